//! stdio on managed files: `fopen`, `fopen64`, `fdopen`, `freopen`,
//! `freopen64`, `fileno` and `fileno_unlocked`.
//!
//! glibc's streams make their reads, writes, seeks and closes inside the
//! C library, where a preloaded library does not see them. So a stream on
//! a managed file is built with `fopencookie` over a managed descriptor:
//! stdio keeps its buffering, and every buffer it fills or drains goes
//! through this library's `read`, `write`, `lseek` and `close` on that
//! descriptor, i.e. through the cache, coherent with every other
//! descriptor of the file.
//!
//! - `fopen`: a managed path is opened with this library's `open`, with
//!   the flags glibc derives from the mode (`r`, `w`, `a`, `+`; `x` is
//!   `O_EXCL`, `e` `O_CLOEXEC`; `b`, `m`, `c` change nothing), then wrapped
//!   in a cookie stream; `a` starts at the end, as glibc's. Any other
//!   path: the C library's `fopen`. A managed path the cache does not
//!   serve (a FIFO) gets the C library's stream over the descriptor; a
//!   mode naming a character set (`,ccs=`) gets the C library's `fopen`,
//!   not cached (cookie streams are byte streams).
//! - `fdopen` on a managed descriptor: a cookie stream over it, with
//!   glibc's checks (the access mode fits the descriptor's; `a` sets
//!   `O_APPEND`). Any other descriptor: the C library's.
//! - `freopen`, three cases:
//!   1. a cookie stream is reopened in place (the same `FILE *`): its
//!      buffer flushed, the new file opened (managed or not: the cookie's
//!      calls reach the kernel on an unmanaged descriptor) and put on the
//!      old descriptor's number (`dup3`, as glibc does), the stream's mode
//!      flags set for the new mode; no path reopens the same file;
//!   2. a managed path onto `stdin`, `stdout` or `stderr` (glibc's own
//!      streams, whose I/O stays inside the C library): the old stream is
//!      closed, the file opened on its descriptor number, and a new cookie
//!      stream is returned and stored in the variable, so `printf`,
//!      `puts`, `scanf` use it. A copy of the old pointer taken before
//!      (C++ iostreams synced with stdio hold one) reaches the closed
//!      stream;
//!   3. a managed path onto any other stream: the C library's `freopen`,
//!      not cached, and one line on stderr (a new object would leave the
//!      program's pointer dangling).
//! - `fileno`, `fileno_unlocked`: a cookie stream's descriptor (glibc
//!   answers -1 for one), so `fsync(fileno(fp))`, `fstat` and libstdc++'s
//!   file streams (which `fopen` and then use the descriptor) work.
//!
//! Exit: the C library flushes streams after every `atexit` handler,
//! when the cache has already closed. So the exit handler (`lifetime.rs`)
//! flushes the cookie streams before the cache closes
//! (`streams::flush_at_exit`; a stream another thread holds locked is
//! skipped); a stream written later (in a handler registered before the
//! cache existed, or glibc's final flush) reaches the kernel directly, at
//! its description's position: the cache wrote everything back when it
//! closed. So does a stream in a forked child (the parent wrote its dirty
//! data back before the fork): at its description's position, at the end
//! for `O_APPEND`, which the kernel's descriptor does not know.
//!
//! Ownership and invariants: a cookie stream owns its descriptor (its
//! close closes it, as `fclose` closes a glibc stream's). The registry
//! (`streams.rs`) holds a stream's entry exactly while it is open: this
//! module inserts it once the `FILE` is made, and the cookie's close
//! removes it before the C library frees the `FILE`, so `fileno` never
//! answers for a freed stream, and a stream address reused by the C
//! library is never mistaken for a cookie stream.
//!
//! Not served: wide-character I/O on a cookie stream (glibc's cookie
//! streams are byte streams: `fwide` refuses), `open_memstream`,
//! `fmemopen`, `tmpfile` and `popen` (no managed file), and glibc's
//! static streams when the program puts a managed descriptor under them
//! with `dup2` (their I/O stays inside the C library, on the kernel's
//! file).

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::ptr::{self, addr_of_mut};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use libc::{c_char, c_int, c_void, off64_t, off_t, size_t, ssize_t, FILE};

use crate::streams::{self, Stream};
use crate::table::{self, Desc};
use crate::{errno, guard, lifetime, open, real, state};

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieFunctions {
    read: unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t,
    write: unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t,
    seek: unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int,
    close: unsafe extern "C" fn(*mut c_void) -> c_int,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, functions: CookieFunctions) -> *mut FILE;
    fn __fpurge(stream: *mut FILE);
    fn flockfile(stream: *mut FILE);
    fn funlockfile(stream: *mut FILE);
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// A stream's mode flags in glibc's `_flags` (the first member of the
/// public `struct _IO_FILE`), as libio.h defined them: what `fopencookie`
/// sets from its mode, and a reopen in place changes.
const NO_READS: c_int = 0x4;
const NO_WRITES: c_int = 0x8;
const IS_APPENDING: c_int = 0x1000;

/// A parsed `fopen`-style mode.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Mode {
    /// `b'r'`, `b'w'` or `b'a'`.
    kind: u8,
    plus: bool,
    exclusive: bool,
    cloexec: bool,
}

/// Which call's reading of a mode string: `fdopen` reads fewer letters
/// and ignores `x`, `e` and a character set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ModeOf {
    Fopen,
    Fdopen,
}

impl Mode {
    /// The mode as glibc's `fopen` or `fdopen` (as `call` says) reads it;
    /// `None` for a mode it refuses (`EINVAL`) or, for `fopen`, one
    /// naming a character set.
    fn parse(mode: &CStr, call: ModeOf) -> Option<Mode> {
        let for_fdopen = call == ModeOf::Fdopen;
        let bytes = mode.to_bytes();
        let kind = *bytes.first().filter(|k| matches!(k, b'r' | b'w' | b'a'))?;
        let mut parsed = Mode { kind, plus: false, exclusive: false, cloexec: false };
        let letters = if for_fdopen { 5 } else { 7 };
        for &letter in bytes.iter().take(letters).skip(1) {
            match letter {
                b'+' => parsed.plus = true,
                b'x' if !for_fdopen => parsed.exclusive = true,
                b'e' if !for_fdopen => parsed.cloexec = true,
                _ => {}
            }
        }
        let charset = !for_fdopen && bytes.windows(5).any(|w| w == b",ccs=");
        (!charset).then_some(parsed)
    }

    /// `open`'s flags for this mode.
    fn open_flags(self) -> c_int {
        let access = if self.plus {
            libc::O_RDWR
        } else if self.kind == b'r' {
            libc::O_RDONLY
        } else {
            libc::O_WRONLY
        };
        let creation = match self.kind {
            b'w' => libc::O_CREAT | libc::O_TRUNC,
            b'a' => libc::O_CREAT | libc::O_APPEND,
            _ => 0,
        };
        let exclusive = if self.exclusive { libc::O_EXCL } else { 0 };
        let cloexec = if self.cloexec { libc::O_CLOEXEC } else { 0 };
        access | creation | exclusive | cloexec
    }

    /// The mode string for `fopencookie` (access only).
    fn cookie_mode(self) -> &'static CStr {
        match (self.kind, self.plus) {
            (b'r', false) => c"r",
            (b'r', true) => c"r+",
            (b'w', false) => c"w",
            (b'w', true) => c"w+",
            (_, false) => c"a",
            (_, true) => c"a+",
        }
    }

    /// The `_flags` bits glibc gives a stream of this mode.
    fn stream_flags(self) -> c_int {
        let flags = match self.kind {
            b'r' => NO_WRITES,
            b'w' => NO_READS,
            _ => NO_READS | IS_APPENDING,
        };
        if self.plus {
            flags & IS_APPENDING
        } else {
            flags
        }
    }

    /// Whether the stream starts at the end of the file (`a` without `+`).
    fn starts_at_end(self) -> bool {
        self.kind == b'a' && !self.plus
    }

    /// Whether the mode's access fits a descriptor's status flags
    /// (`fdopen`'s check).
    fn fits(self, status: c_int) -> bool {
        match status & libc::O_ACCMODE {
            libc::O_RDONLY => self.kind == b'r' && !self.plus,
            libc::O_WRONLY => self.kind != b'r' && !self.plus,
            _ => true,
        }
    }
}

/// The stream behind a cookie.
///
/// # Safety
/// `cookie` is a live cookie of [`cookie_stream`] (the stream holds it
/// until its close).
unsafe fn stream_at<'a>(cookie: *mut c_void) -> &'a Stream {
    // SAFETY: the caller's contract: an `Arc<Stream>` not yet released.
    unsafe { &*(cookie as *const Stream) }
}

fn errno_is(code: c_int) -> bool {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() == code }
}

/// Whether the cache closed (at exit): later calls on managed
/// descriptors fail with `EBADF`, and the kernel holds every byte.
fn cache_closed() -> bool {
    state::built().is_some_and(|state| state.with_cache(|_| Ok(())).is_err())
}

/// A cookie's call on `fd`: `cached`, this library's call, or `kernel` on
/// `fd`'s description when the cache cannot serve it: in a forked child
/// (the parent wrote its dirty data back before the fork, and the kernel's
/// descriptor has neither the stream's position nor `O_APPEND`), and after
/// the cache closed at exit (it wrote everything back).
fn serve<T: PartialOrd + Default>(fd: c_int, cached: impl FnOnce() -> T, kernel: impl FnOnce(&Desc) -> T) -> T {
    if guard::is_forked_child() {
        return match table::get(fd) {
            Some(desc) => kernel(&desc),
            None => cached(),
        };
    }
    let n = cached();
    if n >= T::default() || !errno_is(libc::EBADF) || !cache_closed() {
        return n;
    }
    match table::get(fd) {
        Some(desc) => kernel(&desc),
        None => n,
    }
}

/// The kernel's size of the file behind `fd`.
fn kernel_len(fd: c_int) -> Option<u64> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writing one `stat`.
    (unsafe { real::fstat(fd, &mut st) } == 0).then_some(st.st_size as u64)
}

/// `read` on the kernel's file, at the description's position.
fn kernel_read(desc: &Desc, fd: c_int, buf: *mut c_char, len: size_t) -> ssize_t {
    let mut pos = desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: stdio's buffer of `len` bytes.
    let n = unsafe { real::pread(fd, buf.cast(), len, *pos as off_t) };
    if n > 0 {
        *pos += n as u64;
    }
    n
}

/// `write` on the kernel's file, at the description's position (at the
/// end for `O_APPEND`).
fn kernel_write(desc: &Desc, fd: c_int, buf: *const c_char, len: size_t) -> ssize_t {
    let mut pos = desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    let at = if desc.flags() & libc::O_APPEND != 0 { kernel_len(fd) } else { Some(*pos) };
    let Some(at) = at else { return -1 };
    // SAFETY: stdio's buffer of `len` bytes.
    let n = unsafe { real::pwrite(fd, buf.cast(), len, at as off_t) };
    if n >= 0 {
        *pos = at + n as u64;
    }
    n
}

/// `lseek` on the description, measuring the end on the kernel's file.
fn kernel_seek(desc: &Desc, fd: c_int, off: off_t, whence: c_int) -> off_t {
    let mut pos = desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    let base = match whence {
        libc::SEEK_SET => Some(0),
        libc::SEEK_CUR => Some(*pos as i64),
        libc::SEEK_END => kernel_len(fd).map(|len| len as i64),
        _ => None,
    };
    match base.and_then(|b| b.checked_add(off)).filter(|t| *t >= 0) {
        Some(target) => {
            *pos = target as u64;
            target
        }
        None => errno::fail_with(libc::EINVAL),
    }
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, len: size_t) -> ssize_t {
    // SAFETY: stdio passes the cookie of a stream it has not closed.
    let fd = unsafe { stream_at(cookie) }.fd.load(Ordering::Acquire);
    serve(
        fd,
        // SAFETY: stdio's buffer of `len` bytes.
        || unsafe { crate::rw::read(fd, buf.cast(), len) },
        |desc| kernel_read(desc, fd, buf, len),
    )
}

/// Writes all of `buf`, or what it could before an error (0 when none:
/// `fopencookie`'s contract forbids a negative answer).
unsafe extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, len: size_t) -> ssize_t {
    // SAFETY: stdio passes the cookie of a stream it has not closed.
    let fd = unsafe { stream_at(cookie) }.fd.load(Ordering::Acquire);
    let mut done = 0;
    while done < len {
        // SAFETY: within stdio's buffer.
        let (rest, left) = (unsafe { buf.add(done) }, len - done);
        // SAFETY: `rest` is `buf` advanced by `done < len`: the `left` bytes
        // of stdio's buffer not yet written, readable for this call.
        let n = serve(fd, || unsafe { crate::rw::write(fd, rest.cast(), left) }, |d| kernel_write(d, fd, rest, left));
        if n <= 0 {
            break;
        }
        done += n as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: stdio passes the cookie of a stream it has not closed.
    let fd = unsafe { stream_at(cookie) }.fd.load(Ordering::Acquire);
    // SAFETY: stdio passes its offset variable.
    let wanted = unsafe { *off };
    // SAFETY: lseek takes no pointer, only the stream's descriptor and
    // numbers; a descriptor closed meanwhile only fails with EBADF.
    let pos = serve(fd, || unsafe { crate::rw::lseek(fd, wanted, whence) }, |d| kernel_seek(d, fd, wanted, whence));
    if pos < 0 {
        return -1;
    }
    // SAFETY: `off` is stdio's offset variable, passed for this call and
    // writable (its position goes back there).
    unsafe { *off = pos };
    0
}

/// Closes the stream's descriptor and forgets the stream; the C library
/// frees the `FILE` after this returns.
unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    // SAFETY: the cookie is the `Arc` `cookie_stream` leaked for the
    // stream, released here once (stdio closes a stream once).
    let stream = unsafe { Arc::from_raw(cookie as *const Stream) };
    streams::remove(&stream);
    let fd = stream.fd.swap(-1, Ordering::AcqRel);
    if fd < 0 {
        return 0;
    }
    // SAFETY: the stream's own descriptor, closed once.
    let rc = unsafe { open::close(fd) };
    // After the cache closed (at exit) its last writeback fails with
    // EBADF; the data was written back when it closed.
    if rc < 0 && errno_is(libc::EBADF) && cache_closed() {
        return 0;
    }
    rc
}

/// A cookie stream of `mode` over `fd`; NULL (with `errno`) when the C
/// library cannot make one (the descriptor is then still the caller's).
fn cookie_stream(fd: c_int, mode: Mode) -> *mut FILE {
    let stream = Arc::new(Stream::new(fd));
    let cookie = Arc::into_raw(stream.clone()) as *mut c_void;
    let functions = CookieFunctions { read: cookie_read, write: cookie_write, seek: cookie_seek, close: cookie_close };
    // SAFETY: a NUL-terminated mode; the cookie lives until its close.
    let fp = unsafe { fopencookie(cookie, mode.cookie_mode().as_ptr(), functions) };
    if fp.is_null() {
        // SAFETY: the cookie leaked above, never given to a stream.
        drop(unsafe { Arc::from_raw(cookie as *const Stream) });
        return ptr::null_mut();
    }
    streams::insert(fp, stream);
    fp
}

/// Whether `fd` is a managed descriptor.
fn is_managed_fd(fd: c_int) -> bool {
    let Some(_inside) = guard::enter() else { return false };
    table::get(fd).is_some()
}

/// Whether `path` names a file under a managed directory.
fn is_managed_path(path: *const c_char) -> bool {
    let Some(_inside) = guard::enter() else { return false };
    if path.is_null() {
        return false;
    }
    let Some(state) = lifetime::state() else { return false };
    // SAFETY: the program passes a NUL-terminated path (checked non-NULL).
    let path = unsafe { CStr::from_ptr(path) };
    open::resolve(libc::AT_FDCWD, path).is_some_and(|p| state.manages(&p))
}

/// The stream over `fd`, just opened with `mode`'s flags: a cookie
/// stream on a managed descriptor (at the end for `a`), the C library's
/// on any other. On failure `fd` is closed and NULL returned (`errno`
/// kept).
fn stream_over(fd: c_int, mode: Mode, mode_text: *const c_char) -> *mut FILE {
    let fp = if is_managed_fd(fd) {
        if mode.starts_at_end() {
            // SAFETY: lseek takes no pointer; `fd` is the descriptor just
            // opened, ours.
            unsafe { crate::rw::lseek(fd, 0, libc::SEEK_END) };
        }
        cookie_stream(fd, mode)
    } else {
        // SAFETY: our descriptor and the program's mode string.
        unsafe { real::fdopen(fd, mode_text) }
    };
    if fp.is_null() {
        // SAFETY: the calling thread's errno.
        let code = unsafe { *libc::__errno_location() };
        // SAFETY: our descriptor, closed once.
        unsafe { open::close(fd) };
        errno::set(code);
    }
    fp
}

/// `fopen` and `fopen64`: `kernel` is the C library's call.
fn fopen_any(path: *const c_char, mode: *const c_char, kernel: impl FnOnce() -> *mut FILE) -> *mut FILE {
    if mode.is_null() || !is_managed_path(path) {
        return kernel();
    }
    // SAFETY: the program passes a NUL-terminated mode (checked non-NULL).
    let Some(parsed) = Mode::parse(unsafe { CStr::from_ptr(mode) }, ModeOf::Fopen) else { return kernel() };
    // SAFETY: the program's path; 0666 as fopen creates files.
    let fd = unsafe { open::open(path, parsed.open_flags(), 0o666) };
    if fd < 0 {
        return ptr::null_mut();
    }
    stream_over(fd, parsed, mode)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: passed on.
    fopen_any(path, mode, || unsafe { real::fopen(path, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: passed on.
    fopen_any(path, mode, || unsafe { real::fopen64(path, mode) })
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    // SAFETY: the program passes a NUL-terminated mode (checked non-NULL).
    let parsed = (!mode.is_null()).then(|| Mode::parse(unsafe { CStr::from_ptr(mode) }, ModeOf::Fdopen)).flatten();
    let Some(parsed) = parsed.filter(|_| is_managed_fd(fd)) else {
        // SAFETY: passed on.
        return unsafe { real::fdopen(fd, mode) };
    };
    // SAFETY: F_GETFL takes no argument.
    let status = unsafe { crate::fdops::fcntl(fd, libc::F_GETFL, 0) };
    if status < 0 {
        return ptr::null_mut();
    }
    if !parsed.fits(status) {
        errno::set(libc::EINVAL);
        return ptr::null_mut();
    }
    if parsed.kind == b'a' && status & libc::O_APPEND == 0 {
        // SAFETY: F_SETFL with the descriptor's flags and O_APPEND.
        if unsafe { crate::fdops::fcntl(fd, libc::F_SETFL, (status | libc::O_APPEND) as libc::c_ulong) } < 0 {
            return ptr::null_mut();
        }
        if parsed.starts_at_end() {
            // SAFETY: lseek takes no pointer, only the program's descriptor
            // (open: its flags were just read) and numbers.
            unsafe { crate::rw::lseek(fd, 0, libc::SEEK_END) };
        }
    }
    cookie_stream(fd, parsed)
}

/// The file a reopen without a path opens again: a managed descriptor's
/// path, the kernel's name of any other (as glibc's `freopen`).
fn same_file(fd: c_int) -> Option<CString> {
    if fd < 0 {
        return None;
    }
    let managed = guard::enter().and_then(|_inside| table::get(fd));
    match managed {
        Some(desc) => CString::new(desc.path.as_os_str().as_bytes()).ok(),
        None => CString::new(format!("/proc/self/fd/{fd}")).ok(),
    }
}

/// Puts the descriptor `new` on the number `old` and closes `new`, as
/// glibc's `freopen` keeps a stream's descriptor number (`old` < 0: `new`
/// stays). -1 (with `errno`, `new` closed) when that fails.
fn settle(new: c_int, old: c_int, cloexec: bool) -> c_int {
    if old < 0 || new == old {
        return new;
    }
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: two descriptors of ours; a managed `old` is released as
    // `dup3` releases a target.
    let rc = unsafe { crate::fdops::dup3(new, old, flags) };
    // SAFETY: the calling thread's errno.
    let code = unsafe { *libc::__errno_location() };
    // SAFETY: `new`, ours, closed once.
    unsafe { open::close(new) };
    if rc < 0 {
        errno::set(code);
        return -1;
    }
    old
}

/// Sets `fp`'s mode flags to `mode`'s.
///
/// # Safety
/// `fp` is an open stream whose lock the caller holds.
unsafe fn set_mode_flags(fp: *mut FILE, mode: Mode) {
    const MASK: c_int = NO_READS | NO_WRITES | IS_APPENDING;
    let flags = fp as *mut c_int;
    // SAFETY: `_flags`, an int, is the first member of glibc's public
    // `struct _IO_FILE`; the caller holds the stream's lock.
    unsafe { *flags = (*flags & !MASK) | mode.stream_flags() };
}

/// The new file of a reopen in place, put on the stream's descriptor
/// number `old` (closed, as glibc closes it, when that fails).
fn reopen_descriptor(path: *const c_char, old: c_int, mode: Mode) -> c_int {
    let target = if path.is_null() {
        same_file(old)
    } else {
        // SAFETY: the program passes a NUL-terminated path (checked non-NULL).
        Some(unsafe { CStr::from_ptr(path) }.to_owned())
    };
    let fd = match target {
        // SAFETY: a NUL-terminated path; 0666 as fopen creates files.
        Some(target) => unsafe { open::open(target.as_ptr(), mode.open_flags(), 0o666) },
        None => errno::fail_with(libc::EBADF),
    };
    let fd = if fd >= 0 { settle(fd, old, mode.cloexec) } else { fd };
    if fd < 0 && old >= 0 {
        // SAFETY: the calling thread's errno.
        let code = unsafe { *libc::__errno_location() };
        // SAFETY: the stream's descriptor, closed once (it forgets it).
        unsafe { open::close(old) };
        errno::set(code);
    }
    fd
}

/// `freopen` of a cookie stream: the same `FILE` over the new file.
fn reopen_in_place(stream: &Stream, fp: *mut FILE, path: *const c_char, mode_text: *const c_char) -> *mut FILE {
    // SAFETY: the program passes a NUL-terminated mode (checked non-NULL).
    let Some(mode) = Mode::parse(unsafe { CStr::from_ptr(mode_text) }, ModeOf::Fopen) else {
        errno::set(libc::EINVAL);
        return ptr::null_mut();
    };
    // SAFETY: an open stream (its close has not removed it); stdio's
    // stream locks nest. Its buffered writes go to the old file, what it
    // buffered otherwise is dropped.
    unsafe {
        flockfile(fp);
        libc::fflush(fp);
        __fpurge(fp);
    }
    let fd = reopen_descriptor(path, stream.fd.load(Ordering::Acquire), mode);
    stream.fd.store(fd, Ordering::Release);
    if fd >= 0 {
        let whence = if mode.starts_at_end() { libc::SEEK_END } else { libc::SEEK_SET };
        // SAFETY: the stream, locked by this thread; the seek (a cookie
        // call on the new descriptor) also empties its buffer.
        unsafe {
            set_mode_flags(fp, mode);
            libc::fseeko(fp, 0, whence);
            libc::clearerr(fp);
        }
    }
    // SAFETY: locked above.
    unsafe { funlockfile(fp) };
    if fd < 0 {
        ptr::null_mut()
    } else {
        fp
    }
}

/// The C library's standard stream variables.
fn standard_streams() -> [*mut *mut FILE; 3] {
    // Their addresses, not their values: no access yet.
    [addr_of_mut!(stdin), addr_of_mut!(stdout), addr_of_mut!(stderr)]
}

fn is_standard(fp: *mut FILE) -> bool {
    // SAFETY: the addresses of glibc's `stdin`/`stdout`/`stderr`, statics
    // valid for the whole process; reading a pointer from them is plain.
    standard_streams().iter().any(|&v| unsafe { v.read() } == fp)
}

/// After the C library closed `fd` itself (closing one of its streams):
/// a managed one is forgotten as `close` forgets it.
fn forget_closed(fd: c_int) {
    let Some(_inside) = guard::enter() else { return };
    if let Some(desc) = table::remove(fd) {
        let _ = open::release(None, &desc);
    }
    if let Some(state) = state::built() {
        state.untrack_uncached(|f| f == fd);
    }
}

/// `freopen` of a managed path onto `stdin`, `stdout` or `stderr`: the
/// old stream closed, a cookie stream on its descriptor number stored in
/// the variable(s) that held it, and returned.
fn replace_standard(fp: *mut FILE, path: *const c_char, mode_text: *const c_char) -> Option<*mut FILE> {
    // SAFETY: the program passes a NUL-terminated mode (checked non-NULL).
    let mode = Mode::parse(unsafe { CStr::from_ptr(mode_text) }, ModeOf::Fopen)?;
    // SAFETY: the program's stream; glibc's standard streams are not
    // freed by fclose, and the variables are replaced below.
    let old = unsafe { real::fileno(fp) };
    // SAFETY: `fp` is the program's open stream (freopen's contract),
    // closed once here; it is not used after (a standard stream's memory is
    // not freed by fclose, and the variables holding it are replaced below).
    unsafe { libc::fclose(fp) };
    forget_closed(old);
    // SAFETY: the program's path; 0666 as fopen creates files.
    let fd = unsafe { open::open(path, mode.open_flags(), 0o666) };
    let fd = if fd >= 0 { settle(fd, old, mode.cloexec) } else { fd };
    if fd < 0 {
        return Some(ptr::null_mut());
    }
    let new = stream_over(fd, mode, mode_text);
    if !new.is_null() {
        for variable in standard_streams() {
            // SAFETY: the C library's variables (glibc documents them as
            // assignable).
            unsafe {
                if variable.read() == fp {
                    variable.write(new);
                }
            }
        }
    }
    Some(new)
}

/// `freopen` and `freopen64`: `kernel` is the C library's call.
fn freopen_any(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut FILE,
    kernel: impl FnOnce() -> *mut FILE,
) -> *mut FILE {
    if mode.is_null() || fp.is_null() {
        return kernel();
    }
    if let Some(stream) = streams::get(fp) {
        return reopen_in_place(&stream, fp, path, mode);
    }
    if !is_managed_path(path) {
        return kernel();
    }
    if is_standard(fp) {
        return replace_standard(fp, path, mode).unwrap_or_else(kernel);
    }
    // SAFETY: checked non-NULL above (a managed path).
    let name = unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned();
    state::complain(&format!("{name}: freopen onto a stream of an unmanaged file: the C library's, not cached"));
    kernel()
}

#[no_mangle]
pub unsafe extern "C" fn freopen(path: *const c_char, mode: *const c_char, fp: *mut FILE) -> *mut FILE {
    // SAFETY: passed on.
    freopen_any(path, mode, fp, || unsafe { real::freopen(path, mode, fp) })
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(path: *const c_char, mode: *const c_char, fp: *mut FILE) -> *mut FILE {
    // SAFETY: passed on.
    freopen_any(path, mode, fp, || unsafe { real::freopen64(path, mode, fp) })
}

/// A cookie stream's descriptor, or `kernel`'s answer for another stream.
fn fileno_any(fp: *mut FILE, kernel: impl FnOnce() -> c_int) -> c_int {
    match streams::get(fp) {
        Some(stream) => match stream.fd.load(Ordering::Acquire) {
            fd if fd < 0 => errno::fail_with(libc::EBADF),
            fd => fd,
        },
        None => kernel(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fileno(fp: *mut FILE) -> c_int {
    // SAFETY: passed on.
    fileno_any(fp, || unsafe { real::fileno(fp) })
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(fp: *mut FILE) -> c_int {
    // SAFETY: passed on.
    fileno_any(fp, || unsafe { real::fileno_unlocked(fp) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(mode: &str) -> Option<Mode> {
        Mode::parse(&CString::new(mode).unwrap(), ModeOf::Fopen)
    }

    #[test]
    fn modes_open_with_glibcs_flags() {
        let flags = |mode: &str| parse(mode).unwrap().open_flags();
        assert_eq!(flags("r"), libc::O_RDONLY);
        assert_eq!(flags("rb+"), libc::O_RDWR);
        assert_eq!(flags("w"), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
        assert_eq!(flags("w+x"), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL);
        assert_eq!(flags("a"), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND);
        assert_eq!(flags("a+e"), libc::O_RDWR | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC);
        assert_eq!(flags("rmcb"), libc::O_RDONLY, "m, c and b change nothing");
        assert_eq!(flags("r      +"), libc::O_RDONLY, "glibc reads seven letters");
    }

    #[test]
    fn modes_glibc_refuses_or_gives_a_character_set_are_not_parsed() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("q"), None);
        assert_eq!(parse("+r"), None);
        assert_eq!(parse("r,ccs=UTF-8"), None);
    }

    #[test]
    fn fdopen_ignores_x_e_and_a_character_set() {
        let mode = Mode::parse(c"wxe+", ModeOf::Fdopen).unwrap();
        assert_eq!(mode, Mode { kind: b'w', plus: true, exclusive: false, cloexec: false });
        assert!(Mode::parse(c"r,ccs=UTF-8", ModeOf::Fdopen).is_some());
    }

    #[test]
    fn stream_flags_and_starting_points_follow_glibc() {
        let flags = |mode: &str| parse(mode).unwrap().stream_flags();
        assert_eq!(flags("r"), NO_WRITES);
        assert_eq!(flags("w"), NO_READS);
        assert_eq!(flags("a"), NO_READS | IS_APPENDING);
        assert_eq!(flags("r+"), 0);
        assert_eq!(flags("w+"), 0);
        assert_eq!(flags("a+"), IS_APPENDING);
        assert!(parse("a").unwrap().starts_at_end());
        assert!(!parse("a+").unwrap().starts_at_end());
        assert_eq!(parse("ab+").unwrap().cookie_mode(), c"a+");
    }

    #[test]
    fn fdopen_modes_must_fit_the_descriptor() {
        let fits = |mode: &str, status| Mode::parse(&CString::new(mode).unwrap(), ModeOf::Fdopen).unwrap().fits(status);
        assert!(fits("r", libc::O_RDONLY) && fits("r", libc::O_RDWR));
        assert!(!fits("r+", libc::O_RDONLY) && !fits("w", libc::O_RDONLY));
        assert!(fits("a", libc::O_WRONLY) && !fits("r", libc::O_WRONLY) && !fits("w+", libc::O_WRONLY));
    }
}
