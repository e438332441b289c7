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
//! A test (`preload/tests/preload/exports.rs`) checks the exports against the C
//! library's: every variant it has of a served call is served here.

use libc::{c_char, c_int, c_ulong, c_void, off_t, size_t, ssize_t};

use crate::{fdops, meta, open, rw};

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(fd: c_int, buf: *mut c_void, len: size_t, off: off_t, buf_len: size_t) -> ssize_t {
    if len > buf_len {
        // SAFETY: abort takes nothing and has no precondition; it is
        // glibc's answer to a fortified overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: the program's arguments, passed on to `pread`, whose contract
    // is this call's: `buf` writable for `len` bytes (`len <= buf_len`).
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
        // SAFETY: abort takes nothing and has no precondition; it is
        // glibc's answer to a fortified overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: the program's arguments, passed on to `pread64`, whose
    // contract is this call's: `buf` writable for `len` bytes (`len <=
    // buf_len`).
    unsafe { rw::pread64(fd, buf, len, off) }
}

/// Exports each alias as a call of the served function it names, with
/// its arguments; one in brackets is taken and not passed (the `stat`
/// entry points' version).
macro_rules! forward {
    ($($alias:ident($([$taken:ident: $tty:ty])? $($arg:ident: $ty:ty),*) -> $ret:ty => $served:path;)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $alias($($taken: $tty,)? $($arg: $ty),*) -> $ret {
                // SAFETY: the served call under another name, with the
                // program's arguments: the alias's contract is its own.
                unsafe { $served($($arg),*) }
            }
        )*
    };
}

forward! {
    __read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t => rw::read;
    __write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t => rw::write;
    __pread64(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t => rw::pread64;
    __pwrite64(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t => rw::pwrite64;
    __lseek(fd: c_int, off: off_t, whence: c_int) -> off_t => rw::lseek;
    __open(path: *const c_char, flags: c_int, mode: libc::c_uint) -> c_int => open::open;
    __open64(path: *const c_char, flags: c_int, mode: libc::c_uint) -> c_int => open::open64;
    __close(fd: c_int) -> c_int => open::close;
    __fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int => fdops::fcntl;
    __dup2(fd: c_int, target: c_int) -> c_int => fdops::dup2;
    __mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void
        => fdops::mmap;
    __fstat64(fd: c_int, st: *mut libc::stat) -> c_int => meta::fstat64;
    __vfork() -> libc::pid_t => crate::lifetime::vfork;
    __xstat([_version: c_int] path: *const c_char, st: *mut libc::stat) -> c_int => meta::stat;
    __xstat64([_version: c_int] path: *const c_char, st: *mut libc::stat) -> c_int => meta::stat64;
    __lxstat([_version: c_int] path: *const c_char, st: *mut libc::stat) -> c_int => meta::lstat;
    __lxstat64([_version: c_int] path: *const c_char, st: *mut libc::stat) -> c_int => meta::lstat64;
    __fxstat([_version: c_int] fd: c_int, st: *mut libc::stat) -> c_int => meta::fstat;
    __fxstat64([_version: c_int] fd: c_int, st: *mut libc::stat) -> c_int => meta::fstat64;
    __fxstatat([_version: c_int] dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int
        => meta::fstatat;
    __fxstatat64([_version: c_int] dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int
        => meta::fstatat64;
}
