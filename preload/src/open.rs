//! Opening and closing: the `open` family (`open`, `open64`, `openat`,
//! `openat64`, `creat`, `creat64` and glibc's fortified `__open_2`
//! variants), `close`, and `close_range` and `closefrom`, which close
//! many at once.
//!
//! A path is managed when it names, or will name (`O_CREAT`), a regular
//! file or a block device under a managed directory, and the call asks
//! for neither `O_PATH` nor `O_DIRECTORY`. The kernel opens it first with
//! the program's flags less `O_TRUNC` and `O_DIRECT` (so every error,
//! permission and `O_CREAT`/`O_EXCL` answer is the kernel's, and the
//! descriptor number is a real one); then the cache opens it and does the
//! truncation itself, so no cached byte outlives it. Where the cache
//! cannot see through the descriptor (0-2) or another process holds the
//! file, the kernel serves it instead (`uncached`), with those flags.
//!
//! Closing the last managed descriptor of a file writes its dirty data
//! back to the kernel and drops the cache's copy before the file's
//! cross-process lock is given up: another process that opens it next
//! reads what this one wrote, and this one, opening it again, reads what
//! the other wrote.

use std::ffi::CStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libc::{c_char, c_int, c_uint, mode_t};
use wbcache::{Advice, OpenOptions};

use crate::state::Fingerprint;
use crate::table::{self, Desc};
use crate::{errno, guard, handover, lifetime, real, record, state, watch};

/// The flags the kernel's open of a managed file leaves to the cache
/// (`O_APPEND` stays: the kernel's descriptor carries it for the moment
/// it is handed to the kernel).
const CACHE_FLAGS: c_int = libc::O_TRUNC | libc::O_DIRECT;

/// The status flags a description keeps (`F_GETFL`).
pub const STATUS_FLAGS: c_int =
    libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC | libc::O_NONBLOCK | libc::O_DIRECT;

/// `path` made absolute (against `dirfd`, or the working directory) with
/// its directory resolved (symlinks, `..`), the last component as given;
/// `None` when that cannot be done (the kernel then answers alone).
pub fn resolve(dirfd: c_int, path: &CStr) -> Option<PathBuf> {
    let path = Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else if dirfd == libc::AT_FDCWD {
        std::env::current_dir().ok()?.join(path)
    } else {
        std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()?.join(path)
    };
    let name = absolute.file_name()?;
    let parent = std::fs::canonicalize(absolute.parent()?).ok()?;
    Some(parent.join(name))
}

/// The open of a managed file, after the kernel's open gave `fd`: cached
/// (the cache's handle, the truncation, the table entry), or served by
/// the kernel where the cache cannot see through the description or
/// another process holds the file (`uncached`). On failure `fd` is
/// closed and the error returned.
fn adopt(fd: c_int, path: &Path, flags: c_int, (key, now): ((u64, u64), Fingerprint)) -> io::Result<()> {
    let state = lifetime::state().expect("a managed open has a state");
    let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
    // Descriptors 0-2 are where the C library's own streams read and write.
    if fd <= 2 {
        return uncached(state, fd, key, flags);
    }
    // Marked before anything is decided: an open by another process from
    // now on is seen, by the table or as contended.
    watch::watch(fd, |key| handover::hand_over(Some(key)));
    state.take_contended(key);
    match state.lock_file(key, writable || flags & libc::O_TRUNC != 0) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return uncached(state, fd, key, flags),
        Err(e) => return Err(close_after(fd, key, e)),
    }
    let file = cached_file(state, path, flags, (key, now)).map_err(|e| {
        state.unlock_file(key);
        close_after(fd, key, e)
    })?;
    table::insert(fd, Arc::new(Desc::new(file, flags & STATUS_FLAGS, key, path.to_path_buf())));
    if state.take_contended(key) {
        // Another process opened it while this open was under way. A
        // failed writeback keeps it cached (the open itself succeeded).
        if let Err(e) = handover::hand_over(Some(key)) {
            state::complain(&format!("{}: another process opened it; it stays cached: {e}", path.display()));
        }
    }
    Ok(())
}

/// The cache's handle of a managed file being opened, truncated for
/// `O_TRUNC`.
fn cached_file(
    state: &state::State,
    path: &Path,
    flags: c_int,
    (key, now): ((u64, u64), Fingerprint),
) -> io::Result<wbcache::File> {
    let access = flags & libc::O_ACCMODE;
    let writable = access != libc::O_RDONLY;
    // Kept from an earlier close here, but changed since (by another
    // process): what the cache holds of it, its size too, is stale.
    if state.take_closed(key).is_some_and(|then| then != now) {
        state.with_cache(|cache| cache.forget(path))?;
    }
    // Not `append`: `O_APPEND` is the description's, per write (rw.rs).
    let options = OpenOptions::new().read(access != libc::O_WRONLY).write(writable);
    let file = state.with_cache(|cache| cache.open(path, &options))?;
    if flags & libc::O_TRUNC != 0 {
        empty(state, &file, path, writable)?;
    }
    Ok(file)
}

/// Closes `fd` after its open failed, and returns `e`.
fn close_after(fd: c_int, key: (u64, u64), e: io::Error) -> io::Error {
    if table::any_of(key).is_none() {
        watch::unwatch(fd);
    }
    // SAFETY: the descriptor the kernel just gave, closed once.
    unsafe { real::close(fd) };
    e
}

/// A managed file opened through the kernel: what this process caches of
/// it goes to the kernel first, the kernel's descriptor gets the flags
/// the cache would have served (`O_TRUNC`, `O_DIRECT`), and the
/// descriptor is counted as the kernel's.
fn uncached(state: &state::State, fd: c_int, key: (u64, u64), flags: c_int) -> io::Result<()> {
    if table::any_of(key).is_some() {
        handover::hand_over(Some(key)).map_err(|e| close_after(fd, key, e))?;
    } else {
        watch::unwatch(fd);
    }
    // SAFETY: fcntl's F_GETFL and F_SETFL take and give integers only (no
    // pointer); `fd` is the descriptor the kernel just gave, still ours.
    let applied = unsafe {
        (flags & libc::O_TRUNC == 0 || truncate_through_kernel(fd, flags))
            && (flags & libc::O_DIRECT == 0
                || real::fcntl(
                    fd,
                    libc::F_SETFL,
                    (real::fcntl(fd, libc::F_GETFL, 0) | libc::O_DIRECT) as libc::c_ulong,
                ) == 0)
    };
    if !applied {
        return Err(close_after(fd, key, io::Error::last_os_error()));
    }
    state.track_uncached(fd, key);
    Ok(())
}

/// `O_TRUNC` on a kernel-served descriptor: `ftruncate`, or for a
/// read-only one (Linux truncates on a read-only open too, given write
/// permission) through a writable open of the same file.
fn truncate_through_kernel(fd: c_int, flags: c_int) -> bool {
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for one `stat`.
    if unsafe { real::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        // The kernel ignores `O_TRUNC` on anything but a regular file (a
        // block device among them).
        return true;
    }
    if flags & libc::O_ACCMODE != libc::O_RDONLY {
        // SAFETY: ftruncate takes no pointer; `fd` is the descriptor the
        // kernel just gave, still ours.
        return unsafe { real::ftruncate(fd, 0) } == 0;
    }
    let Ok(same) = std::ffi::CString::new(format!("/proc/self/fd/{fd}")) else { return false };
    // SAFETY: a NUL-terminated path; the descriptor is closed at once.
    unsafe {
        let writable = real::open(same.as_ptr(), libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC, 0);
        writable >= 0 && real::close(writable) == 0
    }
}

/// `O_TRUNC`: the file emptied through `file` (`writable`), or, when
/// that is read-only, through a writable handle of its own: Linux truncates on a
/// read-only open too (given write permission, which that handle's open
/// checks).
fn empty(state: &state::State, file: &wbcache::File, path: &Path, writable: bool) -> io::Result<()> {
    if writable {
        return file.set_len(0);
    }
    state.with_cache(|cache| cache.open(path, &OpenOptions::new().read(true).write(true))?.set_len(0))
}

/// The file's identity and how it looks now, if the cache serves it (a
/// regular file or a block device).
fn identity(fd: c_int) -> Option<((u64, u64), Fingerprint)> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writing one `stat`.
    if unsafe { real::fstat(fd, &mut st) } != 0 {
        return None;
    }
    let kind = st.st_mode & libc::S_IFMT;
    (kind == libc::S_IFREG || kind == libc::S_IFBLK).then_some(((st.st_dev, st.st_ino), Fingerprint::of(&st)))
}

/// The resolved path when the open of `path` with `flags` is one the
/// cache may serve (a path under a managed directory, neither `O_PATH`
/// nor `O_DIRECTORY`).
fn managed_path(dirfd: c_int, path: *const c_char, flags: c_int) -> Option<PathBuf> {
    if path.is_null() || flags & (libc::O_PATH | libc::O_DIRECTORY) != 0 {
        return None;
    }
    let state = lifetime::state()?;
    // SAFETY: the program passes a NUL-terminated path (checked non-NULL).
    let c_path = unsafe { CStr::from_ptr(path) };
    resolve(dirfd, c_path).filter(|p| state.manages(p))
}

/// A descriptor number the kernel just gave out: an entry the table still
/// has under it is stale, its descriptor closed by a call this library
/// does not see (stdio's `fclose` of an `fdopen`ed managed descriptor,
/// `close_range`), and it goes as that `close` would have made it go
/// (written back, its lock given up). Without this, the new descriptor's
/// reads and writes would be served from the old file's cache.
pub fn fresh(fd: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    if let Some(stale) = table::remove(fd) {
        let _ = release(None, &stale);
    }
    if let Some(state) = state::built() {
        state.untrack_uncached(|f| f == fd);
    }
    fd
}

/// Runs `f` on a description of the managed file at `path` (resolved)
/// opened for writing just for it, as a path call that changes the file
/// (`truncate`) acts: under the file's cross-process lock, through the
/// cache, the file written back and its lock given up afterwards unless a
/// descriptor here still has it open. `Ok(false)` when `path` names no
/// file the cache serves (a directory, a FIFO) or one the kernel serves
/// (another process holds it): the kernel's call then answers.
pub fn with_writable(path: &Path, f: impl FnOnce(&Desc) -> io::Result<()>) -> io::Result<bool> {
    let c_path =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_WRONLY | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { real::open(c_path.as_ptr(), flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = fresh(fd);
    let Some(key) = identity(fd) else {
        // SAFETY: our descriptor from just above, closed once.
        unsafe { real::close(fd) };
        return Ok(false);
    };
    adopt(fd, path, flags, key)?;
    let Some(desc) = table::remove(fd) else {
        // Opened through the kernel (another process holds the file, and
        // has written it back): the kernel's call answers.
        if let Some(state) = state::built() {
            state.untrack_uncached(|f| f == fd);
        }
        // SAFETY: our descriptor, closed once.
        unsafe { real::close(fd) };
        return Ok(false);
    };
    let done = f(&desc);
    let released = release(Some(fd), &desc);
    drop(desc);
    // SAFETY: our descriptor, closed once.
    unsafe { real::close(fd) };
    done.and(released).map(|()| true)
}

/// Every open of the family: `kernel_open(flags)` is the C library's call
/// with the program's other arguments; a crash test's recorder sees it.
fn open_managed(dirfd: c_int, path: *const c_char, flags: c_int, kernel_open: impl Fn(c_int) -> c_int) -> c_int {
    record::open(dirfd, path, flags, || open_any(dirfd, path, flags, kernel_open))
}

fn open_any(dirfd: c_int, path: *const c_char, flags: c_int, kernel_open: impl Fn(c_int) -> c_int) -> c_int {
    let Some(_inside) = guard::enter() else { return kernel_open(flags) };
    let Some(resolved) = managed_path(dirfd, path, flags) else { return fresh(kernel_open(flags)) };
    let fd = fresh(kernel_open(flags & !CACHE_FLAGS));
    if fd < 0 {
        return fd;
    }
    let Some(key) = identity(fd) else {
        if flags & CACHE_FLAGS == 0 {
            return fd;
        }
        // Not a file the cache serves: the kernel opens it as asked.
        // SAFETY: our descriptor from just above, closed once.
        unsafe { real::close(fd) };
        return fresh(kernel_open(flags));
    };
    match adopt(fd, &resolved, flags, key) {
        Ok(()) => fd,
        Err(e) => errno::fail(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's arguments, passed on.
    open_managed(libc::AT_FDCWD, path, flags, |f| unsafe { real::open(path, f, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's arguments, passed on.
    open_managed(libc::AT_FDCWD, path, flags, |f| unsafe { real::open64(path, f, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on (no O_CREAT: no mode).
    open_managed(libc::AT_FDCWD, path, flags, |f| unsafe { real::open(path, f, 0) })
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on (no O_CREAT: no mode).
    open_managed(libc::AT_FDCWD, path, flags, |f| unsafe { real::open64(path, f, 0) })
}

#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's arguments, passed on.
    open_managed(dirfd, path, flags, |f| unsafe { real::openat(dirfd, path, f, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the program's arguments, passed on.
    open_managed(dirfd, path, flags, |f| unsafe { real::openat64(dirfd, path, f, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    open_managed(dirfd, path, flags, |f| unsafe { real::openat(dirfd, path, f, 0) })
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    open_managed(dirfd, path, flags, |f| unsafe { real::openat64(dirfd, path, f, 0) })
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: `creat` is this `open`.
    open_managed(libc::AT_FDCWD, path, flags, |f| unsafe { real::open(path, f, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: `creat64` is this `open64`.
    open_managed(libc::AT_FDCWD, path, flags, |f| unsafe { real::open64(path, f, mode) })
}

/// Gives up a managed descriptor's claim on its file. The last one of the
/// file writes its dirty data back to the kernel before the lock goes, and
/// remembers how the file looked then: the cache keeps its (clean) data,
/// and the next open here uses it only if the file has not changed since
/// (another process may change it once the lock is gone). When the file
/// cannot be looked at, its data is dropped at once.
/// `fd`: the descriptor being closed, if it is still open (its file's
/// watch goes with the last).
pub fn release(fd: Option<c_int>, desc: &Desc) -> io::Result<()> {
    let Some(state) = state::built() else { return Ok(()) };
    let written = if state.is_last_descriptor(desc.key) {
        desc.write_back().and_then(|()| match fingerprint_of(desc) {
            Some(then) => {
                state.remember_closed(desc.key, then);
                Ok(())
            }
            None => desc.file.advise(0..i64::MAX as u64, Advice::DontNeed),
        })
    } else {
        Ok(())
    };
    if state.unlock_file(desc.key) {
        if let Some(fd) = fd {
            watch::unwatch(fd);
        }
    }
    written
}

/// How `desc`'s file looks now, if its path still names it.
fn fingerprint_of(desc: &Desc) -> Option<Fingerprint> {
    let c_path = std::ffi::CString::new(desc.path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero `stat` is a valid value for stat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a `stat` to fill.
    if unsafe { real::stat(c_path.as_ptr(), &mut st) } != 0 || (st.st_dev, st.st_ino) != desc.key {
        return None;
    }
    Some(Fingerprint::of(&st))
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    record::on_fd(fd, record::FdCall::Close, || close_any(fd))
}

fn close_any(fd: c_int) -> c_int {
    let Some(_inside) = guard::enter() else {
        // SAFETY: passed on.
        return unsafe { real::close(fd) };
    };
    let Some(desc) = table::remove(fd) else {
        if let Some(state) = state::built() {
            state.untrack_uncached(|f| f == fd);
        }
        // SAFETY: passed on.
        return unsafe { real::close(fd) };
    };
    let released = release(Some(fd), &desc);
    drop(desc);
    // SAFETY: the program's descriptor, closed once.
    let rc = unsafe { real::close(fd) };
    match released {
        Err(e) if rc == 0 => errno::fail(&e),
        _ => rc,
    }
}

/// Before the kernel closes every descriptor in `[first, last]`: the
/// managed ones are released as `close` releases them (written back,
/// their locks given up) while their numbers are still taken; a failure
/// is complained about, as the calls that close many descriptors report
/// none.
fn release_range(first: c_uint, last: c_uint) {
    let Some(_inside) = guard::enter() else { return };
    let in_range = |fd: c_int| (first as u64..=last as u64).contains(&(fd as u64));
    if let Some(state) = state::built() {
        state.untrack_uncached(in_range);
    }
    for (fd, _) in table::entries_where(|fd, _| in_range(fd)) {
        if let Some(desc) = table::remove(fd) {
            if let Err(e) = release(Some(fd), &desc) {
                state::complain(&format!("{}: writing back at close failed: {e}", desc.path.display()));
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let known = (libc::CLOSE_RANGE_UNSHARE | libc::CLOSE_RANGE_CLOEXEC) as c_int;
    // What the kernel refuses closes nothing; CLOEXEC only marks them.
    if first <= last && flags & !known == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        release_range(first, last);
    }
    // SAFETY: passed on.
    unsafe { real::close_range(first, last, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(first: c_int) {
    release_range(first.max(0) as c_uint, c_uint::MAX);
    // SAFETY: passed on.
    unsafe { real::closefrom(first) }
}
