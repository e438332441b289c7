//! Descriptor operations on managed files: duplication (`dup`, `dup2`,
//! `dup3`, `fcntl(F_DUPFD…)`, sharing the description as the kernel
//! does), status flags (`fcntl(F_GETFL/F_SETFL)`; every other `fcntl`,
//! record locks included, goes to the real file), copies between
//! descriptors (`copy_file_range`, `sendfile`, served by reading and
//! writing through the cache), and what the cache cannot serve:
//! - `mmap`: a shared writable mapping hands the descriptor to the kernel
//!   (its dirty data written back, the cache's copy forgotten, the
//!   descriptor no longer managed) and then maps it, so the mapping and
//!   every later call see one file; any other mapping (read-only, or
//!   private) is made after the file's dirty data is written back;
//! - `ioctl`: refused with `EOPNOTSUPP` and one line on stderr naming the
//!   file and the request, except `FIOCLEX` and `FIONCLEX`, which set the
//!   kernel descriptor's close-on-exec flag.

use std::io;

use libc::{c_int, c_ulong, c_void, off_t, size_t, ssize_t};

use crate::table;
use crate::{errno, guard, open, real, state};

/// Makes `new` (just made by the kernel from `old`) a managed descriptor
/// of `old`'s description, if `old` is managed. `new` < 0: nothing.
fn share(old: c_int, new: c_int) -> c_int {
    if new < 0 {
        return new;
    }
    let Some(_inside) = guard::enter() else { return new };
    if let Some(desc) = table::get(old) {
        if let Some(state) = state::built() {
            state.add_descriptor(desc.key);
        }
        table::insert(new, desc);
    }
    new
}

/// Before the kernel reuses `target` (`dup2`, `dup3`): a managed one is
/// closed as `close` would.
fn release_target(old: c_int, target: c_int) {
    if old == target {
        return;
    }
    let Some(_inside) = guard::enter() else { return };
    if let Some(desc) = table::remove(target) {
        let _ = open::release(&desc);
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: passed on.
    share(fd, unsafe { real::dup(fd) })
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, target: c_int) -> c_int {
    release_target(fd, target);
    // SAFETY: passed on.
    share(fd, unsafe { real::dup2(fd, target) })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, target: c_int, flags: c_int) -> c_int {
    release_target(fd, target);
    // SAFETY: passed on.
    share(fd, unsafe { real::dup3(fd, target, flags) })
}

/// `fcntl` on a managed descriptor: duplication shares the description;
/// `F_GETFL`/`F_SETFL` answer and change the description's status flags
/// (the kernel's descriptor keeps the rest); everything else is the
/// kernel's.
fn fcntl_any(fd: c_int, cmd: c_int, arg: c_ulong, kernel: impl Fn(c_int, c_ulong) -> c_int) -> c_int {
    let Some(inside) = guard::enter() else { return kernel(cmd, arg) };
    let Some(desc) = table::get(fd) else { return kernel(cmd, arg) };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            drop(inside);
            share(fd, kernel(cmd, arg))
        }
        libc::F_GETFL => {
            let kernel_flags = kernel(cmd, arg);
            if kernel_flags < 0 {
                return kernel_flags;
            }
            (kernel_flags & !open::STATUS_FLAGS) | desc.flags()
        }
        libc::F_SETFL => {
            const CHANGEABLE: c_int = libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT;
            let wanted = arg as c_int;
            let rc = kernel(cmd, (wanted & !(libc::O_APPEND | libc::O_DIRECT)) as c_ulong);
            if rc == 0 {
                let old = desc.flags();
                desc.status_flags
                    .store((old & !CHANGEABLE) | (wanted & CHANGEABLE), std::sync::atomic::Ordering::Release);
            }
            rc
        }
        _ => kernel(cmd, arg),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: passed on with the program's argument.
    fcntl_any(fd, cmd, arg, |c, a| unsafe { real::fcntl(fd, c, a) })
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: passed on with the program's argument.
    fcntl_any(fd, cmd, arg, |c, a| unsafe { real::fcntl64(fd, c, a) })
}

/// Copies `len` bytes from `from` to `to` through this library's own
/// calls (so either end may be managed), at the given offsets or the
/// descriptors' positions. Returns the bytes copied (fewer at end of
/// file).
fn copy(from: c_int, from_off: *mut off_t, to: c_int, to_off: *mut off_t, len: usize) -> io::Result<usize> {
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(len.max(1))];
    let mut done = 0;
    while done < len {
        let want = buf.len().min(len - done);
        let n = transfer(from, from_off, buf.as_mut_ptr().cast(), want, false)?;
        if n == 0 {
            break;
        }
        let mut written = 0;
        while written < n {
            let m = transfer(to, to_off, buf[written..].as_mut_ptr().cast(), n - written, true)?;
            written += m;
        }
        done += n;
    }
    Ok(done)
}

/// One read or write for `copy`: at `*off` (advanced) when it is given,
/// else at the descriptor's position.
fn transfer(fd: c_int, off: *mut off_t, buf: *mut c_void, len: usize, write: bool) -> io::Result<usize> {
    // SAFETY: `buf` is `copy`'s buffer of at least `len` bytes; `off` is
    // NULL or the program's offset variable, as the C calls take it.
    let n = unsafe {
        match (off.is_null(), write) {
            (true, false) => crate::rw::read(fd, buf, len),
            (true, true) => crate::rw::write(fd, buf, len),
            (false, false) => crate::rw::pread(fd, buf, len, *off),
            (false, true) => crate::rw::pwrite(fd, buf, len, *off),
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if !off.is_null() {
        // SAFETY: as above.
        unsafe { *off += n as off_t };
    }
    Ok(n as usize)
}

fn copy_any(
    from: c_int,
    from_off: *mut off_t,
    to: c_int,
    to_off: *mut off_t,
    len: usize,
    kernel: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let managed = {
        let Some(_inside) = guard::enter() else { return kernel() };
        table::get(from).is_some() || table::get(to).is_some()
    };
    if !managed {
        return kernel();
    }
    // Outside the guard: `copy` goes through the interposed calls.
    match copy(from, from_off, to, to_off, len) {
        Ok(n) => n as ssize_t,
        Err(e) => errno::fail::<i64>(&e) as ssize_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    from: c_int,
    from_off: *mut off_t,
    to: c_int,
    to_off: *mut off_t,
    len: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    // SAFETY: passed on.
    copy_any(from, from_off, to, to_off, len, || unsafe {
        real::copy_file_range(from, from_off, to, to_off, len, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(to: c_int, from: c_int, off: *mut off_t, len: size_t) -> ssize_t {
    // SAFETY: passed on.
    copy_any(from, off, to, std::ptr::null_mut(), len, || unsafe { real::sendfile(to, from, off, len) })
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(to: c_int, from: c_int, off: *mut off_t, len: size_t) -> ssize_t {
    // SAFETY: passed on.
    copy_any(from, off, to, std::ptr::null_mut(), len, || unsafe { real::sendfile64(to, from, off, len) })
}

/// Before the kernel maps managed descriptor `fd`: see the module's doc.
fn before_map(fd: c_int, prot: c_int, flags: c_int) -> io::Result<()> {
    let Some(desc) = table::get(fd) else { return Ok(()) };
    open::write_back(&desc)?;
    let shared_writable = flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0;
    if shared_writable {
        let (key, path) = (desc.key, desc.path.clone());
        drop(desc);
        hand_to_kernel(key, &path)?;
    }
    Ok(())
}

/// Stops managing the file `key` (every descriptor of it here): written
/// back already, its lock given up, forgotten by the cache.
fn hand_to_kernel(key: (u64, u64), path: &std::path::Path) -> io::Result<()> {
    let state = state::built().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
    for fd in table::fds_of(key) {
        if let Some(desc) = table::remove(fd) {
            table::align_kernel_descriptor(fd, &desc);
            state.unlock_file(key);
        }
    }
    state.with_cache(|cache| cache.forget(path).map(drop))
}

fn mmap_any(prot: c_int, flags: c_int, fd: c_int, kernel: impl FnOnce() -> *mut c_void) -> *mut c_void {
    if fd >= 0 && flags & libc::MAP_ANONYMOUS == 0 {
        if let Some(_inside) = guard::enter() {
            if let Err(e) = before_map(fd, prot, flags) {
                errno::set(errno::code(&e));
                return libc::MAP_FAILED;
            }
        }
    }
    kernel()
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: passed on.
    mmap_any(prot, flags, fd, || unsafe { real::mmap(addr, len, prot, flags, fd, off) })
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: passed on.
    mmap_any(prot, flags, fd, || unsafe { real::mmap64(addr, len, prot, flags, fd, off) })
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // FIOCLEX and FIONCLEX set the close-on-exec flag, the kernel
    // descriptor's own (Python sets it so on the files it opens).
    let descriptor_flag = request == libc::FIOCLEX as c_ulong || request == libc::FIONCLEX as c_ulong;
    if let Some(_inside) = guard::enter().filter(|_| !descriptor_flag) {
        if let Some(desc) = table::get(fd) {
            state::complain(&format!(
                "{}: ioctl {request:#x} on a cached file is not supported (EOPNOTSUPP)",
                desc.path.display()
            ));
            return errno::fail_with(libc::EOPNOTSUPP);
        }
    }
    // SAFETY: passed on with the program's argument.
    unsafe { real::ioctl(fd, request, arg) }
}
