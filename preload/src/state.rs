//! The process's one cache and what it manages: the directories from
//! `WBCACHE_PATHS` (colon separated; canonical), the cache built from
//! `WBCACHE_OPTIONS` (the C ABI's option keys), and per managed file (by
//! device and inode) the cross-process lock and the count of descriptors
//! of it that are open here.
//!
//! Built on the first interposed call that names a path, never before:
//! a program that touches no managed path pays for nothing. Without
//! `WBCACHE_PATHS`, or when the cache cannot be built (one line on stderr
//! says why), nothing is managed and every call goes to the C library.
//!
//! Invariants: a file is cached here only while this process holds its
//! lock (write-locked when any descriptor here may write it), so a second
//! process that caches it through this library is refused instead of
//! caching a second copy; the lock is given up when the file's last
//! managed descriptor closes, after its dirty data was written back to
//! the kernel. The locks are open-file-description locks in a registry
//! file per device (`/dev/shm/wbcache-locks-DEV`, one byte per inode
//! number), not on the file itself: there they would conflict with the
//! program's own record locks (RocksDB locks its whole `LOCK` file).

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use wbcache::{Cache, Config};

use crate::real;

/// The process's cache and what it manages.
pub struct State {
    roots: Vec<PathBuf>,
    cache: Mutex<Option<Cache>>,
    files: Mutex<Files>,
}

/// The managed files open here and the lock registries they use.
#[derive(Default)]
struct Files {
    locks: HashMap<(u64, u64), FileLock>,
    /// Per device, the registry file's descriptor (kept for the process's
    /// life: its locks are released one by one).
    registries: HashMap<u64, libc::c_int>,
    /// Files whose last descriptor closed here while the cache kept their
    /// (clean) data: how the file looked then.
    closed: HashMap<(u64, u64), Fingerprint>,
}

/// What tells a file changed by someone else: its size and its
/// modification and change times (nanoseconds). A change time read once
/// makes the next change of the file take a fine-grained, distinct one
/// (Linux 6.13+ multigrain timestamps; whole ticks before, still distinct
/// for a change made a tick or more later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub size: i64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Fingerprint {
    pub fn of(st: &libc::stat) -> Fingerprint {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Fingerprint {
            size: st.st_size,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// A managed file's cross-process lock, held while descriptors of it are
/// open here.
struct FileLock {
    /// Whether the lock is a write lock.
    exclusive: bool,
    /// Managed descriptors of the file open here.
    descriptors: usize,
}

static STATE: OnceLock<Option<State>> = OnceLock::new();

/// The state, built on first use; `None` when nothing is managed.
pub fn get() -> Option<&'static State> {
    STATE.get_or_init(build).as_ref()
}

/// The state if it was built already (exit paths: nothing to do if not).
pub fn built() -> Option<&'static State> {
    STATE.get().and_then(Option::as_ref)
}

/// One line on stderr, prefixed with the library's name.
pub fn complain(message: &str) {
    let line = format!("wbcache: {message}\n");
    // SAFETY: writing a live buffer to descriptor 2.
    unsafe { real::write(2, line.as_ptr().cast(), line.len()) };
}

fn build() -> Option<State> {
    let paths = std::env::var_os("WBCACHE_PATHS")?;
    let roots: Vec<PathBuf> = std::env::split_paths(&paths)
        .filter(|p| !p.as_os_str().is_empty())
        .filter_map(|p| match std::fs::canonicalize(&p) {
            Ok(root) => Some(root),
            Err(e) => {
                complain(&format!("WBCACHE_PATHS: {}: {e}; not managed", p.display()));
                None
            }
        })
        .collect();
    if roots.is_empty() {
        return None;
    }
    let options = std::env::var("WBCACHE_OPTIONS").unwrap_or_default();
    let cache = match Config::from_options(&options).and_then(Cache::new) {
        Ok(cache) => cache,
        Err(e) => {
            complain(&format!("WBCACHE_OPTIONS: {e}; nothing is cached"));
            return None;
        }
    };
    // SAFETY: registering plain functions to run at exit and around fork.
    unsafe {
        libc::atexit(write_back_at_exit);
        libc::pthread_atfork(Some(write_back_before_fork), None, Some(forked_child));
    }
    Some(State { roots, cache: Mutex::new(Some(cache)), files: Mutex::new(Files::default()) })
}

/// Writes back and syncs what the cache holds, then closes it: at normal
/// exit (`exit`, a return from `main`) and before `_exit`. Later calls
/// find no managed descriptor and go to the kernel.
pub fn write_back_and_close() {
    let Some(state) = built() else { return };
    let cache = state.cache.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(cache) = cache {
        // A process that opened no managed file (a shell, a helper the
        // program ran) has no statistics to leave.
        if state.opened_any() {
            crate::stats::record_at_exit(&cache);
        }
        if let Err(e) = cache.close() {
            complain(&format!("writing back at exit failed: {e}"));
        }
    }
    // What the program does after this (later atexit handlers, destructors)
    // goes to the kernel, which now holds every byte: the descriptors stop
    // being managed, where their descriptions stood.
    for (fd, desc) in crate::table::entries() {
        crate::table::align_kernel_descriptor(fd, &desc);
        crate::table::remove(fd);
    }
}

/// Every open managed file's dirty data to the kernel (the files closed
/// already were written back at their last close): before a `fork`,
/// whose child reads the inherited descriptors through the kernel, and
/// before an `exec` or a spawn, whose program reads through the kernel.
pub fn write_back_open_files() {
    for (_, desc) in crate::table::entries() {
        if let Err(e) = crate::open::write_back(&desc) {
            complain(&format!("{}: writing back failed: {e}", desc.path.display()));
        }
    }
}

/// Before `fork`: the open files' dirty data to the kernel, and each
/// managed descriptor's position and `O_APPEND` to its kernel descriptor,
/// which the child inherits and uses.
extern "C" fn write_back_before_fork() {
    let Some(_inside) = crate::guard::enter() else { return };
    write_back_open_files();
    for (fd, desc) in crate::table::entries() {
        crate::table::align_kernel_descriptor(fd, &desc);
    }
}

extern "C" fn forked_child() {
    crate::guard::mark_forked_child();
}

extern "C" fn write_back_at_exit() {
    // Not in a forked child (its parent's cache is not its own), nor
    // inside a call of this library.
    let Some(inside) = crate::guard::enter() else { return };
    // The streams' buffered bytes go through the cache before it closes
    // (outside the guard: their writes are this library's calls).
    drop(inside);
    crate::stdio::flush_at_exit();
    let Some(_inside) = crate::guard::enter() else { return };
    write_back_and_close();
}

impl State {
    /// Whether `path` (absolute, its directories resolved) lies under a
    /// managed directory.
    pub fn manages(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| path.starts_with(root))
    }

    /// Runs `f` with the cache, or fails with `EBADF` once it closed.
    pub fn with_cache<T>(&self, f: impl FnOnce(&Cache) -> std::io::Result<T>) -> std::io::Result<T> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        match cache.as_ref() {
            Some(cache) => f(cache),
            None => Err(std::io::Error::from_raw_os_error(libc::EBADF)),
        }
    }

    /// Counts a new managed descriptor of the file `key` (device, inode) at
    /// `path`, taking or strengthening the cross-process lock. `EBUSY` (and
    /// one line on stderr) when another process holds it.
    pub fn lock_file(&self, key: (u64, u64), path: &Path, writable: bool) -> std::io::Result<()> {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let registry = match files.registries.get(&key.0) {
            Some(&fd) => fd,
            None => {
                let fd = open_registry(key.0)?;
                files.registries.insert(key.0, fd);
                fd
            }
        };
        if let Some(lock) = files.locks.get_mut(&key) {
            if writable && !lock.exclusive {
                set_lock(registry, key.1, libc::F_WRLCK, path)?;
                lock.exclusive = true;
            }
            lock.descriptors += 1;
            return Ok(());
        }
        set_lock(registry, key.1, if writable { libc::F_WRLCK } else { libc::F_RDLCK }, path)?;
        files.locks.insert(key, FileLock { exclusive: writable, descriptors: 1 });
        Ok(())
    }

    /// Whether this process ever opened a managed file (each took a lock
    /// in its device's registry, kept for the process's life).
    pub fn opened_any(&self) -> bool {
        !self.files.lock().unwrap_or_else(|e| e.into_inner()).registries.is_empty()
    }

    /// Counts one more managed descriptor of `key` (a duplicate).
    pub fn add_descriptor(&self, key: (u64, u64)) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lock) = files.locks.get_mut(&key) {
            lock.descriptors += 1;
        }
    }

    /// Remembers how the file `key` looked when its last descriptor here
    /// closed, its data still cached.
    pub fn remember_closed(&self, key: (u64, u64), fingerprint: Fingerprint) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.closed.insert(key, fingerprint);
    }

    /// How the file `key` looked when it last closed here, if the cache
    /// kept its data then (forgotten by the asking: the caller decides).
    pub fn take_closed(&self, key: (u64, u64)) -> Option<Fingerprint> {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.closed.remove(&key)
    }

    /// Whether one managed descriptor of `key` is left open here.
    pub fn is_last_descriptor(&self, key: (u64, u64)) -> bool {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.locks.get(&key).is_some_and(|lock| lock.descriptors == 1)
    }

    /// Counts a managed descriptor of `key` closed; the last one gives the
    /// lock up. Returns whether it was the last.
    pub fn unlock_file(&self, key: (u64, u64)) -> bool {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lock) = files.locks.get_mut(&key) else { return false };
        assert!(lock.descriptors > 0, "a managed descriptor closes once");
        lock.descriptors -= 1;
        if lock.descriptors > 0 {
            return false;
        }
        files.locks.remove(&key);
        if let Some(&registry) = files.registries.get(&key.0) {
            let _ = set_lock(registry, key.1, libc::F_UNLCK, Path::new(""));
        }
        true
    }
}

/// The lock registry of device `dev`: a file in `/dev/shm` that every
/// process using this library on that device locks bytes of.
fn open_registry(dev: u64) -> std::io::Result<libc::c_int> {
    let path = CString::new(format!("/dev/shm/wbcache-locks-{dev:x}")).expect("no NUL in the name");
    // SAFETY: a NUL-terminated path; the mode lets every user lock it.
    let fd = unsafe { real::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o666) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above; widening the mode past the umask (best effort).
    unsafe { libc::fchmod(fd, 0o666) };
    Ok(fd)
}

/// Sets (`F_RDLCK`, `F_WRLCK`) or clears (`F_UNLCK`) the lock on byte
/// `ino` of `registry`, without waiting.
fn set_lock(registry: libc::c_int, ino: u64, kind: libc::c_int, path: &Path) -> std::io::Result<()> {
    // SAFETY: an all-zero `flock` is a valid value to fill in.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // One byte per inode number: below i64::MAX, so that the byte's end
    // is a valid offset (a mask clearing bit 0 would give inodes 2k and
    // 2k+1 one byte, and refuse one of them while another process
    // caches the other).
    lock.l_start = (ino % (i64::MAX as u64)) as i64;
    lock.l_len = 1;
    // SAFETY: F_OFD_SETLK reads one live `flock`.
    let rc = unsafe { real::fcntl(registry, libc::F_OFD_SETLK, &mut lock as *mut libc::flock as libc::c_ulong) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
        complain(&format!("{}: cached by another process; refused (EBUSY)", path.display()));
        return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(e)
}
