//! Database locks: full sharing among the connections of this process, and
//! one process per database.
//!
//! The cache holds one copy of a file for its process, with writes another
//! process cannot see until they are written back, so two processes must
//! never use one database at once. A [`DbShared`] exists per database file
//! while any connection of this process has it open. It holds an
//! open-file-description lock (`F_OFD_SETLK`) over SQLite's whole lock
//! range (the pending, reserved and shared bytes at 1 GiB): a write lock
//! when the file could be opened for writing, else a read lock. SQLite's
//! unix VFS in another process takes its locks on those same bytes, so
//! every lock it tries fails and it reports `SQLITE_BUSY`; a second
//! wbcache process fails the same way. The lock is taken when the first
//! connection opens the database, or at its first `xLock` if another
//! process held it then, and held until the last connection closes
//! (`locking_mode=EXCLUSIVE` across processes). Descriptor-owned locks
//! rather than POSIX record locks, because closing any descriptor of the
//! file (the cache closes its own now and then) would drop those.
//!
//! Inside the process, SQLite's five lock levels are kept in memory with the
//! rules of its unix VFS: many SHARED, one RESERVED, PENDING keeps new
//! SHARED out, EXCLUSIVE once the others have left.
//!
//! Invariant: nothing of the database is cached while the process does not
//! hold the cross-process lock. Connections open their cached handle only
//! once it is held; before, they read the file directly (SQLite reads the
//! header before it locks). Taking the lock makes the cache forget what it
//! held of the database, its journal and its WAL (written back when the
//! lock was last given up), so nothing another process changed meanwhile
//! is read stale.

use std::fs::File as StdFile;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use wbcache::Cache;

use crate::shm::ShmNode;

/// SQLite's lock levels (`SQLITE_LOCK_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None = 0,
    Shared = 1,
    Reserved = 2,
    Pending = 3,
    Exclusive = 4,
}

impl Level {
    pub fn from_sqlite(level: i32) -> Option<Level> {
        Some(match level {
            0 => Level::None,
            1 => Level::Shared,
            2 => Level::Reserved,
            3 => Level::Pending,
            4 => Level::Exclusive,
            _ => return None,
        })
    }
}

/// SQLite's lock bytes: `PENDING_BYTE` (1 GiB), the reserved byte after it,
/// then 510 shared bytes.
const LOCK_RANGE_START: i64 = 0x4000_0000;
const LOCK_RANGE_LEN: i64 = 2 + 510;

/// Why a lock was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LockError {
    /// Held elsewhere (another connection, or another process): `SQLITE_BUSY`.
    Busy,
    /// The lock call failed: `SQLITE_IOERR_LOCK`.
    Io,
}

/// In-process lock state of one database.
struct Levels {
    /// The highest level any connection holds.
    highest: Level,
    /// Connections holding SHARED or more.
    shared: u32,
    /// This process holds the cross-process lock.
    owned: bool,
}

/// What every connection of this process to one database shares.
pub struct DbShared {
    pub path: PathBuf,
    pub key: (u64, u64),
    /// The descriptor owning the cross-process lock (and reading the file
    /// before it is held).
    lock_fd: StdFile,
    writable: bool,
    levels: Mutex<Levels>,
    /// The WAL index, in memory (see [`crate::shm`]).
    pub shm: Mutex<Option<ShmNode>>,
}

impl DbShared {
    /// Opens the lock descriptor of `path` (read-write if the file allows)
    /// and tries the cross-process lock; not holding it is no error yet
    /// (`xLock` tries again and answers `SQLITE_BUSY`).
    pub fn open(cache: &Cache, path: &Path, key: (u64, u64)) -> std::io::Result<Arc<DbShared>> {
        let (lock_fd, writable) = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => (f, true),
            Err(_) => (std::fs::OpenOptions::new().read(true).open(path)?, false),
        };
        let db = Arc::new(DbShared {
            path: path.to_path_buf(),
            key,
            lock_fd,
            writable,
            levels: Mutex::new(Levels { highest: Level::None, shared: 0, owned: false }),
            shm: Mutex::new(None),
        });
        let mut levels = db.levels();
        if db.take_cross_process(cache, &mut levels) == Err(LockError::Io) {
            return Err(std::io::Error::other(format!(
                "{}: cannot take the lock bytes, or write back what the cache held of the database",
                path.display()
            )));
        }
        drop(levels);
        Ok(db)
    }

    fn levels(&self) -> MutexGuard<'_, Levels> {
        self.levels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this process holds the database (its connections may cache).
    pub fn is_owned(&self) -> bool {
        self.levels().owned
    }

    /// Takes the cross-process lock if not held, then forgets what the
    /// cache may still hold of the database's files.
    fn take_cross_process(&self, cache: &Cache, levels: &mut Levels) -> Result<(), LockError> {
        if levels.owned {
            return Ok(());
        }
        let kind = if self.writable { libc::F_WRLCK } else { libc::F_RDLCK };
        // SAFETY: `flock` is plain data; zeroed is a valid value.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = kind as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = LOCK_RANGE_START;
        lock.l_len = LOCK_RANGE_LEN;
        // SAFETY: fcntl on a descriptor we own with a valid `flock`.
        let rc = unsafe { libc::fcntl(self.lock_fd.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN | libc::EACCES | libc::EINTR) => Err(LockError::Busy),
                _ => Err(LockError::Io),
            };
        }
        // Another process may have changed the files since this one last
        // held them: nothing cached from then may be read now. They were
        // written back when the lock was given up, so this drops only
        // clean copies.
        for path in self.related_paths() {
            if cache.forget(&path).is_err() {
                return Err(LockError::Io);
            }
        }
        levels.owned = true;
        Ok(())
    }

    /// The database, its rollback journal and its WAL.
    pub fn related_paths(&self) -> [PathBuf; 3] {
        let with_suffix = |suffix: &str| {
            let mut name = self.path.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        [self.path.clone(), with_suffix("-journal"), with_suffix("-wal")]
    }

    /// `xLock`: raises a connection from `held` to `want`. Returns the
    /// connection's new level (PENDING when EXCLUSIVE waits for readers).
    pub fn lock(&self, cache: &Cache, held: Level, want: Level) -> (Level, Result<(), LockError>) {
        if held >= want {
            return (held, Ok(()));
        }
        let mut l = self.levels();
        // Another connection is past SHARED: only SHARED may be shared with
        // it, and not once it reached PENDING.
        if held != l.highest && (l.highest >= Level::Pending || want > Level::Shared) {
            return (held, Err(LockError::Busy));
        }
        match want {
            Level::Shared => {
                debug_assert_eq!(held, Level::None);
                if let Err(e) = self.take_cross_process(cache, &mut l) {
                    return (held, Err(e));
                }
                l.shared += 1;
                l.highest = l.highest.max(Level::Shared);
                (Level::Shared, Ok(()))
            }
            Level::Reserved => {
                debug_assert_eq!(held, Level::Shared, "RESERVED is asked for from SHARED");
                l.highest = Level::Reserved;
                (Level::Reserved, Ok(()))
            }
            Level::Pending | Level::Exclusive => {
                debug_assert!(held >= Level::Shared, "EXCLUSIVE is asked for from SHARED or more");
                l.highest = Level::Pending;
                if l.shared > 1 {
                    return (Level::Pending, Err(LockError::Busy));
                }
                l.highest = want;
                (want, Ok(()))
            }
            Level::None => unreachable!("held >= want"),
        }
    }

    /// `xUnlock`: lowers a connection from `held` to `to` (SHARED or NONE).
    pub fn unlock(&self, held: Level, to: Level) -> Level {
        if held <= to {
            return held;
        }
        let mut l = self.levels();
        if held > Level::Shared {
            debug_assert_eq!(l.highest, held, "one connection is past SHARED");
            l.highest = Level::Shared;
        }
        if to == Level::None {
            l.shared -= 1;
            if l.shared == 0 {
                l.highest = Level::None;
            }
        }
        to
    }

    /// `xCheckReservedLock`: whether a connection holds RESERVED or more.
    pub fn reserved(&self) -> bool {
        self.levels().highest > Level::Shared
    }

    /// Reads the file directly (before the lock is held: SQLite reads the
    /// header of a database it has not locked yet).
    pub fn read_direct(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.lock_fd.read_at(&mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// The file's size, read directly (before the lock is held).
    pub fn len_direct(&self) -> std::io::Result<u64> {
        Ok(self.lock_fd.metadata()?.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &Path, cache: &Cache) -> Arc<DbShared> {
        let path = dir.join("db");
        std::fs::write(&path, b"x").unwrap();
        DbShared::open(cache, &path, (0, 0)).unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wbcache-sqlite-lock-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn levels_follow_sqlites_rules() {
        let dir = scratch("levels");
        let cache = Cache::new(wbcache::Config::with_capacity(16 << 20)).unwrap();
        let d = db(&dir, &cache);
        let (a, r) = d.lock(&cache, Level::None, Level::Shared);
        assert_eq!((a, r), (Level::Shared, Ok(())));
        let (b, r) = d.lock(&cache, Level::None, Level::Shared);
        assert_eq!((b, r), (Level::Shared, Ok(())));
        let (a, r) = d.lock(&cache, a, Level::Reserved);
        assert_eq!((a, r), (Level::Reserved, Ok(())));
        assert!(d.reserved());
        assert_eq!(d.lock(&cache, b, Level::Reserved), (Level::Shared, Err(LockError::Busy)), "one RESERVED");
        let (a, r) = d.lock(&cache, a, Level::Exclusive);
        assert_eq!((a, r), (Level::Pending, Err(LockError::Busy)), "a reader is still in");
        let (c, r) = d.lock(&cache, Level::None, Level::Shared);
        assert_eq!((c, r), (Level::None, Err(LockError::Busy)), "PENDING keeps new readers out");
        let b = d.unlock(b, Level::None);
        assert_eq!(b, Level::None);
        let (a, r) = d.lock(&cache, a, Level::Exclusive);
        assert_eq!((a, r), (Level::Exclusive, Ok(())));
        let a = d.unlock(a, Level::Shared);
        assert!(!d.reserved());
        let (b, r) = d.lock(&cache, b, Level::Shared);
        assert_eq!((b, r), (Level::Shared, Ok(())));
        d.unlock(a, Level::None);
        d.unlock(b, Level::None);
        assert_eq!(d.levels().shared, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A second holder of the lock range (a child process running `flock`
    /// would do; an open file description of this process is enough, as
    /// such locks conflict between descriptions) makes the first lock
    /// answer BUSY until it goes.
    #[test]
    fn another_owner_makes_shared_busy() {
        let dir = scratch("owner");
        let cache = Cache::new(wbcache::Config::with_capacity(16 << 20)).unwrap();
        let first = db(&dir, &cache);
        assert!(first.is_owned());
        let second = DbShared::open(&cache, &first.path, (0, 1)).unwrap();
        assert!(!second.is_owned(), "the range is taken");
        assert_eq!(second.lock(&cache, Level::None, Level::Shared), (Level::None, Err(LockError::Busy)));
        drop(first);
        assert_eq!(second.lock(&cache, Level::None, Level::Shared), (Level::Shared, Ok(())));
        assert!(second.is_owned());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
