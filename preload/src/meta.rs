//! Names and status of managed files: the `stat` family and `statx` (a
//! managed file open here reports the cache's size, dirty data included),
//! `truncate`, and `rename`/`renameat`/`renameat2`/`unlink`/`unlinkat`
//! on managed paths, which go through the cache so that no cached byte
//! survives a removed name or lands in a file created under it later.
//!
//! A managed file that no descriptor holds open here is not cached (its
//! last close wrote it back and the cache forgot it): the kernel's answer
//! about it is the whole answer.

use std::ffi::CStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use libc::{c_char, c_int, c_uint, off_t};

use crate::record::{self, PathCall, TwoPaths};
use crate::table;
use crate::{errno, guard, lifetime, open, real};

/// The cache's size of the file `(dev, ino)`, if a descriptor here has it.
fn cached_len(dev: u64, ino: u64) -> Option<u64> {
    table::any_of((dev, ino)).and_then(|d| d.file.len().ok())
}

/// Fixes the size in `st` after the kernel filled it (`rc` 0).
fn fix_stat(rc: c_int, st: *mut libc::stat) -> c_int {
    if rc != 0 || st.is_null() {
        return rc;
    }
    let Some(_inside) = guard::enter() else { return rc };
    // SAFETY: the kernel filled `*st` (rc 0), the program's buffer.
    let st = unsafe { &mut *st };
    if let Some(len) = cached_len(st.st_dev, st.st_ino) {
        st.st_size = len as off_t;
        st.st_blocks = st.st_blocks.max(len.div_ceil(512) as libc::blkcnt_t);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::fstat(fd, st) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::fstat64(fd, st) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::stat(path, st) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::stat64(path, st) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::lstat(path, st) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::lstat64(path, st) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::fstatat(dirfd, path, st, flags) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    // SAFETY: passed on.
    fix_stat(unsafe { real::fstatat64(dirfd, path, st, flags) }, st)
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    // SAFETY: passed on.
    let rc = unsafe { real::statx(dirfd, path, flags, mask, stx) };
    if rc != 0 || stx.is_null() {
        return rc;
    }
    let Some(_inside) = guard::enter() else { return rc };
    // SAFETY: the kernel filled `*stx` (rc 0), the program's buffer.
    let stx = unsafe { &mut *stx };
    let dev = libc::makedev(stx.stx_dev_major, stx.stx_dev_minor);
    if let Some(len) = cached_len(dev, stx.stx_ino) {
        stx.stx_size = len;
        stx.stx_blocks = stx.stx_blocks.max(len.div_ceil(512));
    }
    rc
}

/// A managed path's resolved form, if `path` is one (`None`: the kernel
/// answers alone).
fn managed(dirfd: c_int, path: *const c_char) -> Option<std::path::PathBuf> {
    let state = lifetime::state()?;
    if path.is_null() {
        return None;
    }
    // SAFETY: the program passes a NUL-terminated path (checked non-NULL).
    open::resolve(dirfd, unsafe { CStr::from_ptr(path) }).filter(|p| state.manages(p))
}

/// Runs `cached` on a managed path (0 or -1 with errno), else `kernel`.
fn on_path(
    dirfd: c_int,
    path: *const c_char,
    cached: impl FnOnce(&std::path::Path) -> io::Result<()>,
    kernel: impl FnOnce() -> c_int,
) -> c_int {
    let Some(_inside) = guard::enter() else { return kernel() };
    match managed(dirfd, path) {
        Some(p) => cached(&p).map_or_else(|e| errno::fail(&e), |()| 0),
        None => kernel(),
    }
}

/// `truncate` of a managed path: through a description of its own, so
/// the file's cross-process lock is held and its data written back as a
/// descriptor's would be; the kernel's call for what the cache does not
/// serve.
fn truncate_cached(path: &std::path::Path, len: off_t) -> io::Result<()> {
    let len = u64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if crate::open::with_writable(path, |desc| desc.file.set_len(len))? {
        return Ok(());
    }
    let c_path =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path.
    match unsafe { real::truncate(c_path.as_ptr(), len as off_t) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_path(libc::AT_FDCWD, path, |p| truncate_cached(p, len), || unsafe { real::truncate(path, len) });
    record::on_path(libc::AT_FDCWD, path, PathCall::Truncate(len.max(0) as u64), call)
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_path(libc::AT_FDCWD, path, |p| truncate_cached(p, len), || unsafe { real::truncate64(path, len) });
    record::on_path(libc::AT_FDCWD, path, PathCall::Truncate(len.max(0) as u64), call)
}

fn unlink_cached(path: &std::path::Path) -> io::Result<()> {
    lifetime::state().expect("a managed path has a state").with_cache(|cache| cache.remove_file(path))
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: passed on.
    let call = || on_path(libc::AT_FDCWD, path, unlink_cached, || unsafe { real::unlink(path) });
    record::on_path(libc::AT_FDCWD, path, PathCall::Unlink, call)
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & libc::AT_REMOVEDIR != 0 {
        // SAFETY: a directory: the kernel's.
        return record::on_path(dirfd, path, PathCall::Rmdir, || unsafe { real::unlinkat(dirfd, path, flags) });
    }
    // SAFETY: passed on.
    let call = || on_path(dirfd, path, unlink_cached, || unsafe { real::unlinkat(dirfd, path, flags) });
    record::on_path(dirfd, path, PathCall::Unlink, call)
}

/// A rename with either end managed goes through the cache.
fn rename_any(
    from_dir: c_int,
    from: *const c_char,
    to_dir: c_int,
    to: *const c_char,
    kernel: impl FnOnce() -> c_int,
) -> c_int {
    let Some(_inside) = guard::enter() else { return kernel() };
    let (Some(from_path), Some(to_path)) = (managed(from_dir, from), managed(to_dir, to)) else { return kernel() };
    let state = lifetime::state().expect("managed paths have a state");
    match state.with_cache(|cache| cache.rename(&from_path, &to_path)) {
        Ok(()) => 0,
        Err(e) => errno::fail(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    // SAFETY: passed on.
    let call = || rename_any(libc::AT_FDCWD, from, libc::AT_FDCWD, to, || unsafe { real::rename(from, to) });
    record::two_paths((libc::AT_FDCWD, from), (libc::AT_FDCWD, to), TwoPaths::Rename { flags: 0 }, call)
}

#[no_mangle]
pub unsafe extern "C" fn renameat(from_dir: c_int, from: *const c_char, to_dir: c_int, to: *const c_char) -> c_int {
    // SAFETY: passed on.
    let call = || rename_any(from_dir, from, to_dir, to, || unsafe { real::renameat(from_dir, from, to_dir, to) });
    record::two_paths((from_dir, from), (to_dir, to), TwoPaths::Rename { flags: 0 }, call)
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    from_dir: c_int,
    from: *const c_char,
    to_dir: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    let call = || {
        if flags != 0 {
            // RENAME_NOREPLACE, RENAME_EXCHANGE: the kernel's, on names only.
            // SAFETY: passed on.
            return unsafe { real::renameat2(from_dir, from, to_dir, to, flags) };
        }
        // SAFETY: passed on.
        rename_any(from_dir, from, to_dir, to, || unsafe { real::renameat2(from_dir, from, to_dir, to, flags) })
    };
    record::two_paths((from_dir, from), (to_dir, to), TwoPaths::Rename { flags }, call)
}

// The calls below are the kernel's on every path; they are interposed only
// so that a crash test's recorder sees them (`record`): without one, each
// is its C library function and nothing else.

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: passed on.
    record::on_path(libc::AT_FDCWD, path, PathCall::Mkdir, || unsafe { real::mkdir(path, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: passed on.
    record::on_path(dirfd, path, PathCall::Mkdir, || unsafe { real::mkdirat(dirfd, path, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: passed on.
    record::on_path(libc::AT_FDCWD, path, PathCall::Rmdir, || unsafe { real::rmdir(path) })
}

#[no_mangle]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    let (from_at, to_at) = ((libc::AT_FDCWD, from), (libc::AT_FDCWD, to));
    // SAFETY: passed on.
    record::two_paths(from_at, to_at, TwoPaths::Link, || unsafe { real::link(from, to) })
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    from_dir: c_int,
    from: *const c_char,
    to_dir: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: passed on.
    record::two_paths((from_dir, from), (to_dir, to), TwoPaths::Link, || unsafe {
        real::linkat(from_dir, from, to_dir, to, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    let (target_at, path_at) = ((libc::AT_FDCWD, target), (libc::AT_FDCWD, path));
    // SAFETY: passed on.
    record::two_paths(target_at, path_at, TwoPaths::Symlink, || unsafe { real::symlink(target, path) })
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    // SAFETY: passed on.
    record::two_paths((libc::AT_FDCWD, target), (dirfd, path), TwoPaths::Symlink, || unsafe {
        real::symlinkat(target, dirfd, path)
    })
}
