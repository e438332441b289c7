//! A registered VFS's state, below the `sqlite3_vfs` callbacks
//! (`vfs.rs`) and the file methods (`file.rs`), which both use it: the
//! cache, the table of databases open in this process (each a
//! [`DbShared`], shared by the connections to it, released by the last),
//! fresh names for temporary files, and the file-system calls both
//! layers make by name (a status that reads no timestamp, a directory
//! sync). Nothing here calls up into either.

use std::collections::HashMap;
use std::ffi::{c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use libsqlite3_sys as ffi;
use wbcache::Cache;

use crate::api::SqliteApi;
use crate::lock::DbShared;

/// One registered VFS's state, leaked: SQLite keeps pointers to it.
pub struct VfsState {
    pub cache: Arc<Cache>,
    pub name: CString,
    pub api: SqliteApi,
    /// The VFS that was the default before this one registered.
    os: *mut ffi::sqlite3_vfs,
    /// Databases open in this process, by (device, inode).
    dbs: Mutex<HashMap<(u64, u64), Arc<DbShared>>>,
    temp_files: AtomicU64,
}

// SAFETY: `os` points at SQLite's static VFS object, which SQLite lets any
// thread use; everything else is Send and Sync on its own.
unsafe impl Send for VfsState {}
// SAFETY: `os` points at SQLite's static VFS object, which SQLite lets
// any thread use, and `&VfsState` only reads the pointer and calls its
// methods; the other fields are Sync on their own (a Mutex, an atomic).
unsafe impl Sync for VfsState {}

/// Runs `body`, turning a panic into `on_panic` (a panic must not unwind
/// into SQLite's C frames).
pub fn guard(on_panic: c_int, body: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(on_panic)
}

/// What the VFS reads of a file's status by name: never its timestamps.
pub struct FileStatus {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: u64,
}

/// `statx(2)` of `path` (symlinks followed) asking for no timestamp. On
/// Linux 6.13 and later (multigrain timestamps) a stat that returns the
/// ctime or mtime marks the ctime as seen, and the file's next write must
/// then update it at fine granularity, which sends the cache's next
/// O_DIRECT write of the database to a kernel worker thread. SQLite asks
/// whether the database moved, and what mode its journal gets, at every
/// transaction in DELETE mode. Falls back to `stat(2)` where `statx` does
/// not exist.
pub fn stat_quietly(path: &Path) -> std::io::Result<FileStatus> {
    const MASK: u32 = libc::STATX_TYPE | libc::STATX_MODE | libc::STATX_INO | libc::STATX_SIZE;
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut stx = std::mem::MaybeUninit::<libc::statx>::uninit();
    // SAFETY: `c_path` is NUL-terminated; `stx` is valid for one `statx`.
    if unsafe { libc::statx(libc::AT_FDCWD, c_path.as_ptr(), 0, MASK, stx.as_mut_ptr()) } == 0 {
        // SAFETY: statx(2) succeeded, so it filled the struct.
        let stx = unsafe { stx.assume_init() };
        return Ok(FileStatus {
            dev: libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
            ino: stx.stx_ino,
            mode: u32::from(stx.stx_mode),
            size: stx.stx_size,
        });
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(err);
    }
    let meta = std::fs::metadata(path)?;
    Ok(FileStatus { dev: meta.dev(), ino: meta.ino(), mode: meta.mode(), size: meta.len() })
}

/// The (device, inode) of the file `path` names.
pub fn file_key(path: &Path) -> std::io::Result<(u64, u64)> {
    let st = stat_quietly(path)?;
    Ok((st.dev, st.ino))
}

/// `fsync` of a directory, so names created or removed in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl VfsState {
    pub fn new(cache: Arc<Cache>, name: CString, api: SqliteApi, os: *mut ffi::sqlite3_vfs) -> VfsState {
        VfsState { cache, name, api, os, dbs: Mutex::new(HashMap::new()), temp_files: AtomicU64::new(0) }
    }

    /// The VFS that was the default before this one registered.
    pub fn os(&self) -> *mut ffi::sqlite3_vfs {
        self.os
    }

    /// The [`DbShared`] of the database at `path`, made (taking the
    /// cross-process lock if it can) for the first connection.
    pub fn db_for(&self, path: &Path) -> std::io::Result<Arc<DbShared>> {
        let key = file_key(path)?;
        let mut dbs = self.dbs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(db) = dbs.get(&key) {
            return Ok(db.clone());
        }
        let db = DbShared::open(&self.cache, path, key)?;
        dbs.insert(key, db.clone());
        Ok(db)
    }

    /// A connection closed `db`: the last one writes back what the cache
    /// holds of the database, its journal and WAL, makes the cache forget
    /// them, and gives up the cross-process lock.
    pub fn release_db(&self, db: Arc<DbShared>) -> c_int {
        let mut dbs = self.dbs.lock().unwrap_or_else(|p| p.into_inner());
        // This connection's reference goes under the table's lock, so of
        // two last connections closing at once, exactly one sees the table
        // hold the only reference left.
        let key = db.key;
        drop(db);
        if dbs.get(&key).is_none_or(|db| Arc::strong_count(db) > 1) {
            return ffi::SQLITE_OK;
        }
        let db = dbs.remove(&key).expect("looked up above");
        let mut rc = ffi::SQLITE_OK;
        if db.is_owned() {
            for path in db.related_paths() {
                if self.cache.forget(&path).is_err() {
                    rc = ffi::SQLITE_IOERR_CLOSE;
                }
            }
        }
        // Gives up the cross-process lock, with the table's lock still
        // held: a connection opening now finds no entry and takes it anew.
        drop(db);
        drop(dbs);
        rc
    }

    /// A fresh name for a temporary file, in SQLite's temporary directory
    /// (`SQLITE_TMPDIR`, `TMPDIR`, `/var/tmp`, `/usr/tmp`, `/tmp`, `.`).
    pub fn temp_path(&self) -> PathBuf {
        let candidates = [std::env::var_os("SQLITE_TMPDIR"), std::env::var_os("TMPDIR")]
            .into_iter()
            .flatten()
            .map(PathBuf::from)
            .chain(["/var/tmp", "/usr/tmp", "/tmp", "."].map(PathBuf::from));
        let dir = candidates
            .into_iter()
            .find(|d| std::fs::metadata(d).is_ok_and(|m| m.is_dir()) && nix_access(d, libc::W_OK | libc::X_OK))
            .unwrap_or_else(|| PathBuf::from("."));
        let n = self.temp_files.fetch_add(1, Ordering::Relaxed);
        let mut random = [0u8; 8];
        // SAFETY: the OS VFS is SQLite's; its `xRandomness` writes at most
        // the bytes given.
        unsafe {
            if let Some(f) = (*self.os).xRandomness {
                f(self.os, random.len() as c_int, random.as_mut_ptr().cast());
            }
        }
        dir.join(format!("etilqs_wbc{:x}_{n:x}_{:x}", std::process::id(), u64::from_ne_bytes(random)))
    }
}

/// `access(2)`.
pub fn nix_access(path: &Path, mode: c_int) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}
