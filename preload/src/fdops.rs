//! Descriptor operations on managed files: duplication (`dup`, `dup2`,
//! `dup3`, `fcntl(F_DUPFD…)`, sharing the description as the kernel
//! does), status flags (`fcntl(F_GETFL/F_SETFL)`; every other `fcntl`,
//! record locks included, goes to the real file), copies between
//! descriptors (`copy_file_range`, `sendfile`, checked as the kernel
//! checks them, then served by reading and writing through the cache),
//! and what the cache cannot serve:
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
    if new == old {
        // dup2(fd, fd): nothing changed.
        return new;
    }
    open::fresh(new);
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

/// Which copy call: they check their arguments differently.
#[derive(Clone, Copy, PartialEq)]
enum CopyCall {
    /// `copy_file_range` with its flags.
    Range(libc::c_uint),
    Sendfile,
}

/// A descriptor's status flags and `stat`, as the program would see them
/// (the cache's size for a managed file).
fn status(fd: c_int) -> io::Result<(c_int, libc::stat)> {
    // SAFETY: the interposed calls; `st` is valid for one `stat`.
    let flags = unsafe { fcntl(fd, libc::F_GETFL, 0) };
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if flags < 0 || unsafe { crate::meta::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((flags, st))
}

/// `*off`, or `fd`'s position when `off` is NULL.
fn start(fd: c_int, off: *mut off_t) -> io::Result<off_t> {
    if !off.is_null() {
        // SAFETY: the program's offset variable.
        return Ok(unsafe { *off });
    }
    // SAFETY: the interposed call.
    match unsafe { crate::rw::lseek(fd, 0, libc::SEEK_CUR) } {
        -1 => Err(io::Error::last_os_error()),
        pos => Ok(pos),
    }
}

/// What the kernel checks before a copy moves a byte, in its order, so a
/// managed copy fails as the kernel's would (even of 0 bytes): the
/// access modes, `O_APPEND` on the target, the file types and offsets,
/// and (`copy_file_range`) a copy within one file onto itself. Linux
/// 5.3's checks (`generic_copy_file_checks`, `do_sendfile`). Returns the
/// bytes to copy: `copy_file_range` stops at the end the source had when
/// it started (a copy within one file does not read what it wrote).
fn check_copy(
    call: CopyCall,
    from: c_int,
    from_off: *mut off_t,
    to: c_int,
    to_off: *mut off_t,
    len: usize,
) -> io::Result<usize> {
    let fail = |code| Err(io::Error::from_raw_os_error(code));
    let ((in_flags, in_st), (out_flags, out_st)) = (status(from)?, status(to)?);
    let readable = in_flags & libc::O_ACCMODE != libc::O_WRONLY;
    let writable = out_flags & libc::O_ACCMODE != libc::O_RDONLY;
    let appends = out_flags & libc::O_APPEND != 0;
    let kind = |st: &libc::stat| st.st_mode & libc::S_IFMT;
    let CopyCall::Range(flags) = call else {
        // SAFETY: the program's offset variable, when it gives one.
        let negative = !from_off.is_null() && unsafe { *from_off } < 0;
        return match () {
            _ if !readable => fail(libc::EBADF),
            _ if negative => fail(libc::EINVAL),
            _ if !writable => fail(libc::EBADF),
            _ if appends && kind(&out_st) != libc::S_IFIFO => fail(libc::EINVAL),
            _ => Ok(len),
        };
    };
    if flags != 0 {
        return fail(libc::EINVAL);
    }
    if kind(&in_st) == libc::S_IFDIR || kind(&out_st) == libc::S_IFDIR {
        return fail(libc::EISDIR);
    }
    if kind(&in_st) != libc::S_IFREG || kind(&out_st) != libc::S_IFREG {
        return fail(libc::EINVAL);
    }
    if !readable || !writable || appends {
        return fail(libc::EBADF);
    }
    let (pos_in, pos_out) = (start(from, from_off)?, start(to, to_off)?);
    // The kernel's order: offsets that wrap (as unsigned), a copy onto
    // itself (the count cut at the end of the source), then a negative
    // offset.
    if (pos_in as u64).checked_add(len as u64).is_none() || (pos_out as u64).checked_add(len as u64).is_none() {
        return fail(libc::EOVERFLOW);
    }
    let count = if pos_in >= in_st.st_size { 0 } else { (len as i128).min((in_st.st_size - pos_in) as i128) };
    let same = (in_st.st_dev, in_st.st_ino) == (out_st.st_dev, out_st.st_ino);
    let (pos_in, pos_out) = (pos_in as i128, pos_out as i128);
    if same && pos_out + count > pos_in && pos_out < pos_in + count {
        return fail(libc::EINVAL);
    }
    if pos_in < 0 || pos_out < 0 {
        return fail(libc::EINVAL);
    }
    Ok(count as usize)
}

/// `copy_file_range` and `sendfile` with either end managed: checked as
/// the kernel checks them, then copied through this library's calls.
fn copy_any(
    call: CopyCall,
    (from, from_off): (c_int, *mut off_t),
    (to, to_off): (c_int, *mut off_t),
    len: usize,
    kernel: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let shared = {
        let Some(_inside) = guard::enter() else { return kernel() };
        match (table::get(from), table::get(to)) {
            (None, None) => return kernel(),
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(&a, &b),
            _ => false,
        }
    };
    // Outside the guard: the checks and `copy` go through the interposed
    // calls.
    let copied = check_copy(call, from, from_off, to, to_off, len).and_then(|len| {
        if !shared || !from_off.is_null() || !to_off.is_null() {
            return copy(from, from_off, to, to_off, len);
        }
        // One description at both ends: the kernel reads and writes from
        // the one position as it was, then leaves it after the write.
        let (mut at_in, mut at_out) = (start(from, from_off)?, start(to, to_off)?);
        let n = copy(from, &mut at_in, to, &mut at_out, len)?;
        // SAFETY: the interposed call.
        unsafe { crate::rw::lseek(to, at_out, libc::SEEK_SET) };
        Ok(n)
    });
    match copied {
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
    copy_any(CopyCall::Range(flags), (from, from_off), (to, to_off), len, || unsafe {
        real::copy_file_range(from, from_off, to, to_off, len, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(to: c_int, from: c_int, off: *mut off_t, len: size_t) -> ssize_t {
    // SAFETY: passed on.
    copy_any(CopyCall::Sendfile, (from, off), (to, std::ptr::null_mut()), len, || unsafe {
        real::sendfile(to, from, off, len)
    })
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(to: c_int, from: c_int, off: *mut off_t, len: size_t) -> ssize_t {
    // SAFETY: passed on.
    copy_any(CopyCall::Sendfile, (from, off), (to, std::ptr::null_mut()), len, || unsafe {
        real::sendfile64(to, from, off, len)
    })
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
/// back already, its lock given up, forgotten by the cache. Each kernel
/// descriptor takes its description's position and the status flags its
/// open left to the cache (`O_APPEND`, `O_DIRECT`), so the program's next
/// call, now the kernel's, goes on where the last one ended.
fn hand_to_kernel(key: (u64, u64), path: &std::path::Path) -> io::Result<()> {
    let state = state::built().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
    for (fd, _) in table::entries_where(|_, d| d.key == key) {
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
