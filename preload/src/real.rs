//! The C library's own functions behind the ones this library interposes,
//! found with `dlsym(RTLD_NEXT, name)` on first use and kept: calls on
//! descriptors and paths the cache does not manage go straight to them.
//!
//! Invariant: a `Real` resolves once per process (a race resolves twice
//! to the same address, harmlessly); a missing symbol is a broken C library
//! and aborts with its name rather than calling through NULL.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One libc function, resolved on first use.
pub struct Real {
    name: &'static CStr,
    address: AtomicUsize,
}

impl Real {
    pub const fn new(name: &'static CStr) -> Real {
        Real { name, address: AtomicUsize::new(0) }
    }

    /// The function's address.
    pub fn get(&self) -> usize {
        let known = self.address.load(Ordering::Acquire);
        if known != 0 {
            return known;
        }
        // SAFETY: a NUL-terminated symbol name; RTLD_NEXT asks for the next
        // definition after this library's, the C library's.
        let found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if found == 0 {
            let message = format!("wbcache preload: the C library has no {:?}\n", self.name);
            // SAFETY: writing a live buffer to stderr, then aborting.
            unsafe {
                libc::write(2, message.as_ptr().cast(), message.len());
                libc::abort();
            }
        }
        self.address.store(found, Ordering::Release);
        found
    }
}

/// Declares `$name` as the real libc function of that symbol with the
/// given signature, callable as `real::$name(args)`.
macro_rules! real_fns {
    ($($name:ident: fn($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            #[allow(non_upper_case_globals, non_snake_case)]
            pub mod $name {
                pub static SYMBOL: crate::real::Real = crate::real::Real::new(
                    // SAFETY: the literal ends with its NUL.
                    unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) }
                );
            }
            /// The C library's function of this name.
            ///
            /// # Safety
            /// As the C function's contract.
            #[allow(non_snake_case)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the symbol is the C library's function of exactly
                // this signature (the declarations below follow its
                // prototypes).
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute($name::SYMBOL.get()) };
                // SAFETY: the caller's contract is the C function's.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

use libc::{c_char, c_int, c_uint, c_void, iovec, off_t, size_t, ssize_t};

real_fns! {
    open: fn(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    open64: fn(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    openat: fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    openat64: fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    close: fn(fd: c_int) -> c_int;
    close_range: fn(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    closefrom: fn(first: c_int) -> ();
    read: fn(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t;
    write: fn(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t;
    pread: fn(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t;
    pread64: fn(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t;
    pwrite: fn(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t;
    pwrite64: fn(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t;
    readv: fn(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t;
    writev: fn(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t;
    preadv: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t;
    preadv64: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t;
    pwritev: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t;
    pwritev64: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t;
    preadv2: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t;
    pwritev2: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t;
    preadv64v2: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t;
    pwritev64v2: fn(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t;
    lseek: fn(fd: c_int, off: off_t, whence: c_int) -> off_t;
    lseek64: fn(fd: c_int, off: off_t, whence: c_int) -> off_t;
    fsync: fn(fd: c_int) -> c_int;
    fdatasync: fn(fd: c_int) -> c_int;
    syncfs: fn(fd: c_int) -> c_int;
    sync: fn() -> ();
    ftruncate: fn(fd: c_int, len: off_t) -> c_int;
    ftruncate64: fn(fd: c_int, len: off_t) -> c_int;
    truncate: fn(path: *const c_char, len: off_t) -> c_int;
    truncate64: fn(path: *const c_char, len: off_t) -> c_int;
    fallocate: fn(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    fallocate64: fn(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    posix_fallocate: fn(fd: c_int, off: off_t, len: off_t) -> c_int;
    posix_fallocate64: fn(fd: c_int, off: off_t, len: off_t) -> c_int;
    posix_fadvise: fn(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int;
    posix_fadvise64: fn(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int;
    readahead: fn(fd: c_int, off: off_t, len: size_t) -> ssize_t;
    sync_file_range: fn(fd: c_int, off: off_t, len: off_t, flags: c_uint) -> c_int;
    dup: fn(fd: c_int) -> c_int;
    dup2: fn(fd: c_int, to: c_int) -> c_int;
    dup3: fn(fd: c_int, to: c_int, flags: c_int) -> c_int;
    fcntl: fn(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int;
    fcntl64: fn(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int;
    fstat: fn(fd: c_int, out: *mut libc::stat) -> c_int;
    fstat64: fn(fd: c_int, out: *mut libc::stat) -> c_int;
    stat: fn(path: *const c_char, out: *mut libc::stat) -> c_int;
    stat64: fn(path: *const c_char, out: *mut libc::stat) -> c_int;
    lstat: fn(path: *const c_char, out: *mut libc::stat) -> c_int;
    lstat64: fn(path: *const c_char, out: *mut libc::stat) -> c_int;
    fstatat: fn(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int;
    fstatat64: fn(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int;
    statx: fn(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, out: *mut libc::statx) -> c_int;
    rename: fn(from: *const c_char, to: *const c_char) -> c_int;
    renameat: fn(fromdir: c_int, from: *const c_char, todir: c_int, to: *const c_char) -> c_int;
    renameat2: fn(fromdir: c_int, from: *const c_char, todir: c_int, to: *const c_char, flags: c_uint) -> c_int;
    unlink: fn(path: *const c_char) -> c_int;
    unlinkat: fn(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    mkdir: fn(path: *const c_char, mode: c_uint) -> c_int;
    mkdirat: fn(dirfd: c_int, path: *const c_char, mode: c_uint) -> c_int;
    rmdir: fn(path: *const c_char) -> c_int;
    link: fn(from: *const c_char, to: *const c_char) -> c_int;
    linkat: fn(fromdir: c_int, from: *const c_char, todir: c_int, to: *const c_char, flags: c_int) -> c_int;
    symlink: fn(target: *const c_char, path: *const c_char) -> c_int;
    symlinkat: fn(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int;
    copy_file_range: fn(fd_in: c_int, off_in: *mut off_t, fd_out: c_int, off_out: *mut off_t, len: size_t, flags: c_uint) -> ssize_t;
    sendfile: fn(out_fd: c_int, in_fd: c_int, off: *mut off_t, count: size_t) -> ssize_t;
    sendfile64: fn(out_fd: c_int, in_fd: c_int, off: *mut off_t, count: size_t) -> ssize_t;
    mmap: fn(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void;
    mmap64: fn(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void;
    ioctl: fn(fd: c_int, request: libc::c_ulong, arg: *mut c_void) -> c_int;
    fopen: fn(path: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fopen64: fn(path: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fdopen: fn(fd: c_int, mode: *const c_char) -> *mut libc::FILE;
    freopen: fn(path: *const c_char, mode: *const c_char, stream: *mut libc::FILE) -> *mut libc::FILE;
    freopen64: fn(path: *const c_char, mode: *const c_char, stream: *mut libc::FILE) -> *mut libc::FILE;
    fileno: fn(stream: *mut libc::FILE) -> c_int;
    fileno_unlocked: fn(stream: *mut libc::FILE) -> c_int;
    _exit: fn(status: c_int) -> ();
    _Exit: fn(status: c_int) -> ();
    execve: fn(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    execv: fn(path: *const c_char, argv: *const *const c_char) -> c_int;
    execvp: fn(file: *const c_char, argv: *const *const c_char) -> c_int;
    execvpe: fn(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    posix_spawn: fn(pid: *mut libc::pid_t, path: *const c_char, actions: *const libc::posix_spawn_file_actions_t, attrs: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    posix_spawnp: fn(pid: *mut libc::pid_t, file: *const c_char, actions: *const libc::posix_spawn_file_actions_t, attrs: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
}
