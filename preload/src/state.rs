//! The process's one cache and what it manages: the directories from
//! `WBCACHE_PATHS` (colon separated; canonical), the cache built from
//! `WBCACHE_OPTIONS` (the C ABI's option keys), and per managed file (by
//! device and inode) the cross-process locks and the count of descriptors
//! of it that are open here, cached or handed to the kernel.
//!
//! Built on the first interposed call that names a path, never before
//! (`lifetime::state`, which registers the exit and fork hooks with the
//! build; the process's end is `lifetime.rs`'s): a program that touches
//! no managed path pays for nothing. Without `WBCACHE_PATHS`, or when the
//! cache cannot be built (one line on stderr says why), nothing is
//! managed and every call goes to the C library.
//!
//! Invariants: a file is cached here only while this process holds its
//! cache lock (write-locked when any descriptor here may write it) and
//! no other process using this library holds its users lock; a process
//! holds a file's users lock while it has descriptors of the file open
//! that the cache does not serve (handed to the kernel, or opened while
//! another process held the file). So two processes never cache one
//! file, and none caches a file another one reads or writes through the
//! kernel. A file that another process holds is opened through the
//! kernel instead, never refused. The cache lock is given up when the
//! file's last cached descriptor closes, after its dirty data was written
//! back to the kernel. The locks are open-file-description locks in one
//! registry file per device (`/dev/shm/wbcache-locks-DEV`, empty: only
//! its byte ranges are locked, one byte per inode number in each of three
//! regions, cache, users and alive), not on the file itself: there they
//! would conflict with the program's own record locks (RocksDB locks its
//! whole `LOCK` file). The registry outlives the processes on purpose:
//! removing it while one process locks it would let the next process lock
//! a new file, unseen by the first. When a process that caches a file
//! dies, its cache lock lives on in its guardian (which holds the
//! registry's description) until the data the process left is on the
//! file, and its alive lock goes at once: an open that finds the one
//! without the other waits for the guardian (see `lock_file`).

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
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
    registries: HashMap<u64, Registry>,
    /// Descriptors of managed files that the kernel serves, by number.
    uncached_fds: HashMap<libc::c_int, (u64, u64)>,
    /// Per file, how many of `uncached_fds` it has (its users lock is held
    /// while there are any).
    uncached: HashMap<(u64, u64), usize>,
    /// Files another process opened while this one was starting to cache
    /// them (the watcher saw the open before the file was in the table).
    contended: std::collections::HashSet<(u64, u64)>,
    /// Files being handed to the kernel: opened through the kernel.
    handing: std::collections::HashSet<(u64, u64)>,
    /// Files whose last descriptor closed here while the cache kept their
    /// (clean) data: how the file looked then.
    closed: HashMap<(u64, u64), Fingerprint>,
    /// Registry descriptors not yet handed to the cache's guardian.
    unkept: Vec<libc::c_int>,
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
    /// Matches no file: what the cache kept of a file handed to the
    /// kernel is stale whatever the file looks like later.
    pub const STALE: Fingerprint = Fingerprint { size: -1, mtime_ns: 0, ctime_ns: 0 };

    pub fn of(st: &libc::stat) -> Fingerprint {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Fingerprint {
            size: st.st_size,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// A device's lock registry: two descriptors of it, two open file
/// descriptions. The cache and users locks are taken on `fd`, which the
/// cache's guardian keeps too (`Cache::keep_for_guardian`): when this
/// process dies they last until the guardian has written its data. The
/// alive locks are taken on `alive`, which only this process has: they
/// go with it.
#[derive(Clone, Copy)]
struct Registry {
    fd: libc::c_int,
    alive: libc::c_int,
}

impl Registry {
    /// The descriptor `region`'s locks are taken on.
    fn of(self, region: Region) -> libc::c_int {
        match region {
            Region::Alive => self.alive,
            Region::Cache | Region::Users => self.fd,
        }
    }
}

/// The three regions of a registry: which lock a byte is.
#[derive(Clone, Copy)]
enum Region {
    /// Bytes locked by the process that caches each file.
    Cache,
    /// Bytes read-locked by every process that has the file open through
    /// the kernel.
    Users,
    /// Bytes read-locked by the process that caches each file, on a
    /// description only it has: held means that process lives. A cache
    /// lock held with no alive lock is a dead process's, held by its
    /// guardian while it writes the dead process's data.
    Alive,
}

/// How long an open waits for a dead process's guardian to write its
/// data before it opens the file through the kernel anyway.
const GUARDIAN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Uncached descriptors of managed files open: while 0, `close` looks up
/// nothing.
static UNCACHED_FDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

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
/// `on_built` runs once, inside a build that manages something, before
/// any call sees the state: the process's exit and fork hooks
/// (`lifetime::state`, the one caller) are registered then.
pub fn get(on_built: fn()) -> Option<&'static State> {
    STATE.get_or_init(|| build(on_built)).as_ref()
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

fn build(on_built: fn()) -> Option<State> {
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
    on_built();
    Some(State { roots, cache: Mutex::new(Some(cache)), files: Mutex::new(Files::default()) })
}

impl State {
    /// Takes the cache out, to close it (at exit): later calls find no
    /// cache and fail with `EBADF`.
    pub fn take_cache(&self) -> Option<Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// In a forked child: closes its copies of the registries. The child
    /// holds none of the parent's locks: its copies would keep them held
    /// after the parent let them go (an open-file-description lock lives
    /// while a descriptor of it does). Skipped if the registries' lock
    /// was held at the fork (a child never waits for it).
    pub fn close_registries_in_child(&self) {
        if let Ok(files) = self.files.try_lock() {
            for registry in files.registries.values() {
                // SAFETY: the child's copy of the registry, closed once.
                unsafe {
                    real::close(registry.fd);
                    real::close(registry.alive);
                }
            }
        }
    }

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

    /// Counts a new cached descriptor of the file `key` (device, inode) at
    /// `path`, taking or strengthening the cross-process cache lock.
    /// `EBUSY` when another process holds it (its cache lock, or its
    /// users lock: it has the file open through the kernel): the file is
    /// then opened through the kernel here too.
    ///
    /// A file a dead process cached is locked by that process's guardian
    /// until the data it left is on the file: the open waits for that (at
    /// most [`GUARDIAN_WAIT`]), so it never reads the file half written.
    pub fn lock_file(&self, key: (u64, u64), writable: bool) -> std::io::Result<()> {
        let deadline = std::time::Instant::now() + GUARDIAN_WAIT;
        loop {
            let result = self.try_lock_file(key, writable);
            self.keep_registries_for_guardian();
            let busy = matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EBUSY));
            if !busy || !self.held_by_a_guardian(key) || std::time::Instant::now() > deadline {
                return result;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Whether the file `key`'s cache lock is a dead process's, kept by
    /// its guardian (no process that lives holds the alive lock).
    fn held_by_a_guardian(&self, key: (u64, u64)) -> bool {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(registry) = files.registries_of(key.0) else { return false };
        held_elsewhere(registry, Region::Cache, key.1).unwrap_or(false)
            && !held_elsewhere(registry, Region::Alive, key.1).unwrap_or(true)
    }

    /// Registries opened since the last call go to the cache's guardian.
    fn keep_registries_for_guardian(&self) {
        let fresh = std::mem::take(&mut self.files.lock().unwrap_or_else(|e| e.into_inner()).unkept);
        for fd in fresh {
            if let Err(e) = self.with_cache(|cache| cache.keep_for_guardian(fd)) {
                complain(&format!("the guardian cannot keep the lock registry: {e}"));
            }
        }
    }

    fn try_lock_file(&self, key: (u64, u64), writable: bool) -> std::io::Result<()> {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let registry = files.registries_of(key.0)?;
        if let Some(lock) = files.locks.get_mut(&key) {
            if writable && !lock.exclusive {
                set_lock(registry, Region::Cache, key.1, libc::F_WRLCK)?;
                lock.exclusive = true;
            }
            lock.descriptors += 1;
            return Ok(());
        }
        let busy = || Err(std::io::Error::from_raw_os_error(libc::EBUSY));
        if files.uncached.contains_key(&key) || files.handing.contains(&key) {
            return busy();
        }
        // The cache lock first, then the users lock: a cacher elsewhere
        // that hands the file over takes its users lock before it gives
        // its cache lock up, so one of the two is always seen.
        set_lock(registry, Region::Cache, key.1, if writable { libc::F_WRLCK } else { libc::F_RDLCK })?;
        if held_elsewhere(registry, Region::Users, key.1)? {
            let _ = set_lock(registry, Region::Cache, key.1, libc::F_UNLCK);
            return busy();
        }
        let _ = set_lock(registry, Region::Alive, key.1, libc::F_RDLCK);
        files.locks.insert(key, FileLock { exclusive: writable, descriptors: 1 });
        Ok(())
    }

    /// Marks the files `keys` as being handed to the kernel.
    pub fn begin_handing(&self, keys: &[(u64, u64)]) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.handing.extend(keys.iter().copied());
    }

    /// The files `keys` are no longer being handed to the kernel.
    pub fn end_handing(&self, keys: &[(u64, u64)]) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            files.handing.remove(key);
        }
    }

    /// Counts `fd`, a descriptor of the managed file `key` that the
    /// kernel serves, taking the file's users lock with the first.
    pub fn track_uncached(&self, fd: libc::c_int, key: (u64, u64)) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(registry) = files.registries_of(key.0) else { return };
        if let Some(earlier) = files.uncached_fds.insert(fd, key) {
            files.drop_uncached(earlier);
        } else {
            UNCACHED_FDS.fetch_add(1, Ordering::AcqRel);
        }
        let count = files.uncached.entry(key).or_insert(0);
        *count += 1;
        if *count == 1 {
            // Shared with every other process that has the file open
            // through the kernel; only a would-be cacher is kept out.
            let _ = set_lock(registry, Region::Users, key.1, libc::F_RDLCK);
        }
    }

    /// The file `fd` is a kernel-served descriptor of, if it is one.
    pub fn uncached_key(&self, fd: libc::c_int) -> Option<(u64, u64)> {
        if UNCACHED_FDS.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.files.lock().unwrap_or_else(|e| e.into_inner()).uncached_fds.get(&fd).copied()
    }

    /// Forgets the kernel-served descriptors among those `closing`
    /// selects (they are being closed), giving up a file's users lock
    /// with its last.
    pub fn untrack_uncached(&self, closing: impl Fn(libc::c_int) -> bool) {
        if UNCACHED_FDS.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<libc::c_int> = files.uncached_fds.keys().copied().filter(|&fd| closing(fd)).collect();
        for fd in gone {
            if let Some(key) = files.uncached_fds.remove(&fd) {
                UNCACHED_FDS.fetch_sub(1, Ordering::AcqRel);
                files.drop_uncached(key);
            }
        }
    }

    /// Records that another process opened `key` (the watcher's note for
    /// an open it cannot hand over yet).
    pub fn mark_contended(&self, key: (u64, u64)) {
        self.files.lock().unwrap_or_else(|e| e.into_inner()).contended.insert(key);
    }

    /// Whether another process opened `key` since the last asking.
    pub fn take_contended(&self, key: (u64, u64)) -> bool {
        self.files.lock().unwrap_or_else(|e| e.into_inner()).contended.remove(&key)
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
            let _ = set_lock(registry, Region::Cache, key.1, libc::F_UNLCK);
            let _ = set_lock(registry, Region::Alive, key.1, libc::F_UNLCK);
        }
        true
    }
}

impl Files {
    /// Device `dev`'s registry, opened on first use.
    fn registries_of(&mut self, dev: u64) -> std::io::Result<Registry> {
        if let Some(&found) = self.registries.get(&dev) {
            return Ok(found);
        }
        let fd = open_registry(dev)?;
        let alive = open_registry(dev).inspect_err(|_| {
            // SAFETY: the descriptor opened just above, ours.
            unsafe { real::close(fd) };
        })?;
        let registry = Registry { fd, alive };
        self.registries.insert(dev, registry);
        self.unkept.push(fd);
        Ok(registry)
    }

    /// One kernel-served descriptor of `key` fewer; the users lock goes
    /// with the last.
    fn drop_uncached(&mut self, key: (u64, u64)) {
        let Some(count) = self.uncached.get_mut(&key) else { return };
        assert!(*count > 0, "an uncached descriptor is counted once");
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.uncached.remove(&key);
        if let Some(&registry) = self.registries.get(&key.0) {
            let _ = set_lock(registry, Region::Users, key.1, libc::F_UNLCK);
        }
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
    // SAFETY: fchmod takes no pointer; `fd` is the descriptor just opened,
    // ours. It widens the mode past the umask (best effort).
    unsafe { libc::fchmod(fd, 0o666) };
    Ok(above_program_descriptors(fd))
}

/// `fd` moved to a number at or above 256 (or half the limit of open
/// descriptors), the original closed; `fd` where that cannot be done.
/// This library's own descriptors stay out of the numbers a program
/// `dup2`s onto (`exec 3>>log`), which would silently close them.
pub fn above_program_descriptors(fd: libc::c_int) -> libc::c_int {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills one live `rlimit`.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 1024 };
    let floor = soft.saturating_div(2).min(256) as libc::c_int;
    if fd >= floor {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC and close take integers only (no pointer);
    // `fd` is this library's own descriptor, closed once, after its
    // duplicate exists, and not used after.
    unsafe {
        let high = real::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor as libc::c_ulong);
        if high < 0 {
            return fd;
        }
        real::close(fd);
        high
    }
}

/// A region's size: inode numbers past it share bytes with smaller ones
/// (ext4's are 32 bits; a shared byte only keeps a file from being cached
/// while another process caches its namesake).
const REGION_BYTES: u64 = 1 << 61;

/// The lock request for inode `ino`'s byte of `region`.
fn byte_lock(region: Region, ino: u64, kind: libc::c_int) -> libc::flock {
    // SAFETY: an all-zero `flock` is a valid value to fill in.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // One byte per inode number in each region, all three below i64::MAX, so
    // that a byte's end is a valid offset (a mask clearing bit 0 would give
    // inodes 2k and 2k+1 one byte, and keep one of them from being cached
    // while another process caches the other).
    let base = match region {
        Region::Cache => 0,
        Region::Users => REGION_BYTES,
        Region::Alive => 2 * REGION_BYTES,
    };
    lock.l_start = (base + ino % REGION_BYTES) as i64;
    lock.l_len = 1;
    lock
}

/// Sets (`F_RDLCK`, `F_WRLCK`) or clears (`F_UNLCK`) the lock on inode
/// `ino`'s byte of `region`, without waiting; `EBUSY` when another
/// process holds a conflicting one.
fn set_lock(registry: Registry, region: Region, ino: u64, kind: libc::c_int) -> std::io::Result<()> {
    let mut lock = byte_lock(region, ino, kind);
    // SAFETY: F_OFD_SETLK reads one live `flock`.
    let rc =
        unsafe { real::fcntl(registry.of(region), libc::F_OFD_SETLK, &mut lock as *mut libc::flock as libc::c_ulong) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
        return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(e)
}

/// Whether another process holds a lock on inode `ino`'s byte of `region`.
fn held_elsewhere(registry: Registry, region: Region, ino: u64) -> std::io::Result<bool> {
    let mut lock = byte_lock(region, ino, libc::F_WRLCK);
    // SAFETY: F_OFD_GETLK reads and fills one live `flock`.
    let rc =
        unsafe { real::fcntl(registry.of(region), libc::F_OFD_GETLK, &mut lock as *mut libc::flock as libc::c_ulong) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}
