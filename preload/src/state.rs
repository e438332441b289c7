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
//! lock, an open-file-description lock at the far end of the offset range
//! (write-locked when any descriptor here may write it), so a second
//! process that caches it, through this library or the SQLite VFS's
//! rules, is refused instead of caching a second copy; the lock is given
//! up when the file's last managed descriptor closes, after its dirty data
//! was written back to the kernel.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use wbcache::{Cache, Config};

use crate::real;

/// The process's cache and what it manages.
pub struct State {
    roots: Vec<PathBuf>,
    cache: Mutex<Option<Cache>>,
    files: Mutex<HashMap<(u64, u64), FileLock>>,
}

/// A managed file's cross-process lock, held while descriptors of it are
/// open here.
struct FileLock {
    /// The descriptor that holds the lock (opened for it alone).
    fd: libc::c_int,
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
    // SAFETY: registering a plain function to run at exit.
    unsafe { libc::atexit(write_back_at_exit) };
    Some(State { roots, cache: Mutex::new(Some(cache)), files: Mutex::new(HashMap::new()) })
}

/// Writes back and syncs what the cache holds, then closes it: at normal
/// exit (`exit`, a return from `main`) and before `_exit` or an `exec`
/// replaces the process. Later calls find no cache and go to the kernel.
pub fn write_back_and_close() {
    let Some(state) = built() else { return };
    let cache = state.cache.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(cache) = cache {
        if let Err(e) = cache.close() {
            complain(&format!("writing back at exit failed: {e}"));
        }
    }
}

extern "C" fn write_back_at_exit() {
    let _inside = crate::guard::enter();
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
        if let Some(lock) = files.get_mut(&key) {
            if writable && !lock.exclusive {
                set_lock(lock.fd, true, path)?;
                lock.exclusive = true;
            }
            lock.descriptors += 1;
            return Ok(());
        }
        let fd = open_lock_fd(path)?;
        if let Err(e) = set_lock(fd, writable, path) {
            // SAFETY: our own descriptor, closed once.
            unsafe { real::close(fd) };
            return Err(e);
        }
        files.insert(key, FileLock { fd, exclusive: writable, descriptors: 1 });
        Ok(())
    }

    /// Counts one more managed descriptor of `key` (a duplicate).
    pub fn add_descriptor(&self, key: (u64, u64)) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lock) = files.get_mut(&key) {
            lock.descriptors += 1;
        }
    }

    /// Whether one managed descriptor of `key` is left open here.
    pub fn is_last_descriptor(&self, key: (u64, u64)) -> bool {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.get(&key).is_some_and(|lock| lock.descriptors == 1)
    }

    /// Counts a managed descriptor of `key` closed; the last one gives the
    /// lock up. Returns whether it was the last.
    pub fn unlock_file(&self, key: (u64, u64)) -> bool {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lock) = files.get_mut(&key) else { return false };
        assert!(lock.descriptors > 0, "a managed descriptor closes once");
        lock.descriptors -= 1;
        if lock.descriptors > 0 {
            return false;
        }
        let fd = lock.fd;
        files.remove(&key);
        // SAFETY: our own descriptor; closing it releases its OFD lock.
        unsafe { real::close(fd) };
        true
    }
}

/// A descriptor of `path` for the lock alone: read-write where allowed
/// (a write lock needs it), else read-only.
fn open_lock_fd(path: &Path) -> std::io::Result<libc::c_int> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    for flags in [libc::O_RDWR, libc::O_RDONLY] {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { real::open(c_path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
        if fd >= 0 {
            return Ok(fd);
        }
    }
    Err(std::io::Error::last_os_error())
}

/// The byte the lock covers: the last one a file offset can name, which no
/// program locks (SQLite's lock bytes sit at 1 GiB).
const LOCK_BYTE: i64 = i64::MAX - 1;

/// Takes the OFD lock on `fd` (write lock when `exclusive`) without waiting.
fn set_lock(fd: libc::c_int, exclusive: bool, path: &Path) -> std::io::Result<()> {
    // SAFETY: an all-zero `flock` is a valid value to fill in.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = if exclusive { libc::F_WRLCK } else { libc::F_RDLCK } as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = LOCK_BYTE;
    lock.l_len = 1;
    // SAFETY: F_OFD_SETLK reads one live `flock`.
    let rc = unsafe { real::fcntl(fd, libc::F_OFD_SETLK, &mut lock as *mut libc::flock as libc::c_ulong) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
        complain(&format!("{}: cached by another process; refused (EBUSY)", path.display()));
        return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
    }
    // A file system without OFD locks: cache it unguarded, as a program
    // without locks would use it.
    if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOLCK) {
        return Ok(());
    }
    Err(e)
}
