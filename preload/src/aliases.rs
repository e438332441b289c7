//! The C library's other names for the calls this library serves, each
//! the served call under the name a program may reach instead:
//! - the fortified reads a `_FORTIFY_SOURCE` build calls when it knows
//!   the buffer's size (`__pread_chk`, `__pread64_chk`; `__read_chk` is
//!   beside `read` in `rw.rs`), which abort on an overflow as glibc's do;
//! - glibc's internal aliases that it also exports (`__read`, `__write`,
//!   `__open`, `__close`, `__lseek`, `__fcntl`, `__dup2`, `__pread64`,
//!   `__pwrite64`, `__mmap`, `__fstat64`, `__vfork`);
//! - the `stat` entry points of programs built against glibc before 2.33
//!   (`__xstat`, `__fxstat`, `__lxstat`, `__fxstatat` and their `64`
//!   names), which take a version argument: on x86-64 and arm64 every
//!   version names the one `struct stat` layout.
//!
//! A test (`preload/tests/exports.rs`) checks the exports against the C
//! library's: every variant it has of a served call is served here.

use libc::{c_char, c_int, c_ulong, c_void, off_t, size_t, ssize_t};

use crate::{fdops, meta, open, rw};

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(fd: c_int, buf: *mut c_void, len: size_t, off: off_t, buf_len: size_t) -> ssize_t {
    if len > buf_len {
        // SAFETY: glibc's answer to a fortified overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: as `pread`.
    unsafe { rw::pread(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    off: off_t,
    buf_len: size_t,
) -> ssize_t {
    if len > buf_len {
        // SAFETY: glibc's answer to a fortified overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: as `pread64`.
    unsafe { rw::pread64(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    // SAFETY: the same call.
    unsafe { rw::read(fd, buf, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    // SAFETY: the same call.
    unsafe { rw::write(fd, buf, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: the same call.
    unsafe { rw::pread64(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pwrite64(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: the same call.
    unsafe { rw::pwrite64(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: the same call.
    unsafe { rw::lseek(fd, off, whence) }
}

#[no_mangle]
pub unsafe extern "C" fn __open(path: *const c_char, flags: c_int, mode: libc::c_uint) -> c_int {
    // SAFETY: the same call.
    unsafe { open::open(path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64(path: *const c_char, flags: c_int, mode: libc::c_uint) -> c_int {
    // SAFETY: the same call.
    unsafe { open::open64(path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __close(fd: c_int) -> c_int {
    // SAFETY: the same call.
    unsafe { open::close(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn __fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the same call.
    unsafe { fdops::fcntl(fd, cmd, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn __dup2(fd: c_int, target: c_int) -> c_int {
    // SAFETY: the same call.
    unsafe { fdops::dup2(fd, target) }
}

#[no_mangle]
pub unsafe extern "C" fn __mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the same call.
    unsafe { fdops::mmap(addr, len, prot, flags, fd, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the same call.
    unsafe { meta::fstat64(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __vfork() -> libc::pid_t {
    // SAFETY: the same call.
    unsafe { crate::lifetime::vfork() }
}

#[no_mangle]
pub unsafe extern "C" fn __xstat(_version: c_int, path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the same call (one `struct stat` layout, see the module's doc).
    unsafe { meta::stat(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __xstat64(_version: c_int, path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::stat64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(_version: c_int, path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::lstat(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(_version: c_int, path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::lstat64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(_version: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::fstat(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_version: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::fstat64(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _version: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::fstatat(dirfd, path, st, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _version: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: as `__xstat`.
    unsafe { meta::fstatat64(dirfd, path, st, flags) }
}
