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
//! - `ioctl`: the kernel answers on the file's own descriptor, as it
//!   would without the cache: terminal requests (`ENOTTY`), the
//!   descriptor's flags and attribute requests at once; requests that
//!   read the data or its layout after the file's dirty data was written
//!   back; `FIONREAD` from the description; clones after both files were
//!   written back (a cloned-into file is then handed to the kernel); any
//!   other request after the file was handed to the kernel, since it may
//!   change the data behind the cache.

use std::io;

use libc::{c_int, c_ulong, c_void, off_t, size_t, ssize_t};

use crate::table;
use crate::{errno, guard, handover, open, real, record, state};

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
        let key = desc.key;
        if table::insert(new, desc) {
            if let Some(state) = state::built() {
                state.add_descriptor(key);
            }
        } else {
            // Its description is being handed over: once that ends, `old`
            // is the kernel's, and so is `new` (below).
            handover::wait_for_hand_overs();
        }
    }
    handover::after_duplicate(old, new);
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
        let _ = open::release(Some(target), &desc);
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
    if matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
        // Managed or served by the kernel, the duplicate is what `fd` is
        // (`share` counts it either way; a hand-over it starts waits for
        // the calls holding a description, so none is held here).
        drop(inside);
        return share(fd, kernel(cmd, arg));
    }
    // Only the flags need the description; every other command (a lock
    // that waits, above all) runs without holding it, so a hand-over on
    // another thread never waits for the kernel's call.
    if !matches!(cmd, libc::F_GETFL | libc::F_SETFL) {
        return kernel(cmd, arg);
    }
    let Some(desc) = table::get(fd) else { return kernel(cmd, arg) };
    match cmd {
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
            // The kernel's descriptor keeps `O_APPEND` (for the moment it
            // is handed over); `O_DIRECT` is the cache's.
            let rc = kernel(cmd, (wanted & !libc::O_DIRECT) as c_ulong);
            if rc == 0 {
                let old = desc.flags();
                desc.status_flags
                    .store((old & !CHANGEABLE) | (wanted & CHANGEABLE), std::sync::atomic::Ordering::Release);
            }
            rc
        }
        _ => unreachable!("only the flags commands reach here"),
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
        let n = transfer(from, from_off, buf.as_mut_ptr().cast(), want, Direction::Read)?;
        if n == 0 {
            break;
        }
        let mut written = 0;
        while written < n {
            let m = transfer(to, to_off, buf[written..].as_mut_ptr().cast(), n - written, Direction::Write)?;
            written += m;
        }
        done += n;
    }
    Ok(done)
}

/// Which way one of `copy`'s transfers goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

/// One read or write for `copy`: at `*off` (advanced) when it is given,
/// else at the descriptor's position.
fn transfer(fd: c_int, off: *mut off_t, buf: *mut c_void, len: usize, direction: Direction) -> io::Result<usize> {
    // SAFETY: `buf` is `copy`'s buffer of at least `len` bytes; `off` is
    // NULL or the program's offset variable, as the C calls take it.
    let n = unsafe {
        match (off.is_null(), direction) {
            (true, Direction::Read) => crate::rw::read(fd, buf, len),
            (true, Direction::Write) => crate::rw::write(fd, buf, len),
            (false, Direction::Read) => crate::rw::pread(fd, buf, len, *off),
            (false, Direction::Write) => crate::rw::pwrite(fd, buf, len, *off),
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if !off.is_null() {
        // SAFETY: `off` is non-NULL (checked): the program's offset variable
        // or a local of the caller, writable for this call.
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
    // SAFETY: F_GETFL reads no argument (0 passed) and writes no memory of
    // ours; a bad `fd` only fails.
    let flags = unsafe { fcntl(fd, libc::F_GETFL, 0) };
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live `stat` on this stack, valid for the one
    // `stat` fstat writes.
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
    // SAFETY: lseek takes no pointer, only `fd` and numbers (SEEK_CUR by 0
    // only reads the position); a bad `fd` only fails.
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
        // SAFETY: lseek takes no pointer, only the program's descriptor
        // `to` and numbers.
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
    // SAFETY: the program's offset pointer, read before the call moves it.
    let at = if to_off.is_null() { record::At::Position } else { record::At::Offset(unsafe { *to_off }.max(0) as u64) };
    // SAFETY: passed on.
    let call = || {
        // SAFETY: the program's arguments, passed on to the call it made.
        copy_any(CopyCall::Range(flags), (from, from_off), (to, to_off), len, || unsafe {
            real::copy_file_range(from, from_off, to, to_off, len, flags)
        })
    };
    record::write(to, at, 0, |off, n| record::read_back(to, off, n), call)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(to: c_int, from: c_int, off: *mut off_t, len: size_t) -> ssize_t {
    // SAFETY: passed on.
    let call = || {
        // SAFETY: the program's arguments, passed on to the call it made.
        copy_any(CopyCall::Sendfile, (from, off), (to, std::ptr::null_mut()), len, || unsafe {
            real::sendfile(to, from, off, len)
        })
    };
    record::write(to, record::At::Position, 0, |at, n| record::read_back(to, at, n), call)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(to: c_int, from: c_int, off: *mut off_t, len: size_t) -> ssize_t {
    // SAFETY: passed on.
    let call = || {
        // SAFETY: the program's arguments, passed on to the call it made.
        copy_any(CopyCall::Sendfile, (from, off), (to, std::ptr::null_mut()), len, || unsafe {
            real::sendfile64(to, from, off, len)
        })
    };
    record::write(to, record::At::Position, 0, |at, n| record::read_back(to, at, n), call)
}

/// Before the kernel maps managed descriptor `fd`: see the module's doc.
fn before_map(fd: c_int, prot: c_int, flags: c_int) -> io::Result<()> {
    let Some(desc) = table::get(fd) else { return Ok(()) };
    desc.write_back()?;
    let shared_writable = flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0;
    if shared_writable {
        let key = desc.key;
        drop(desc);
        handover::hand_over(Some(key))?;
    }
    Ok(())
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
    record::mapping(fd, prot, flags, || {
        // SAFETY: the program's arguments, passed on to the call it made.
        mmap_any(prot, flags, fd, || unsafe { real::mmap(addr, len, prot, flags, fd, off) })
    })
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
    let call = || mmap_any(prot, flags, fd, || unsafe { real::mmap64(addr, len, prot, flags, fd, off) });
    record::mapping(fd, prot, flags, call)
}

/// What an `ioctl` request does to a managed file's data, and so what
/// happens before the kernel answers it on the file's own descriptor.
#[derive(Clone, Copy, PartialEq, Debug)]
enum IoctlKind {
    /// Terminal requests (the kernel answers `ENOTTY` for a file), the
    /// descriptor's flags, and requests that read or set attributes
    /// other than the data and the size: straight to the kernel.
    Harmless,
    /// `FIONREAD`: the bytes between the position and the end, answered
    /// from the description.
    BytesToRead,
    /// Requests that read the data or its layout (`FIEMAP`, `FIBMAP`,
    /// `FIOQSIZE`, a block device's `BLKFLSBUF`): the file's dirty data
    /// goes to the kernel first.
    ReadsData,
    /// `FICLONE`, `FICLONERANGE`, `FIDEDUPERANGE`: both files written back
    /// first; when the kernel did change the target, it is handed over.
    Clones,
    /// Anything else may change the data behind the cache: the file is
    /// handed to the kernel first.
    Unknown,
}

/// Linux's request numbers (the x86-64/arm64 encodings of `linux/fs.h`
/// and `linux/fiemap.h`; libc names few of them).
const FIBMAP: c_ulong = 1;
const FIGETBSZ: c_ulong = 2;
const FIONREAD: c_ulong = 0x541b;
const FIONBIO: c_ulong = 0x5421;
const FIOQSIZE: c_ulong = 0x5460;
const FS_IOC_FIEMAP: c_ulong = 0xc020_660b;
const FICLONE: c_ulong = 0x4004_9409;
const FICLONERANGE: c_ulong = 0x4020_940d;
const FIDEDUPERANGE: c_ulong = 0xc018_9436;
const FS_IOC_GETFLAGS: c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: c_ulong = 0x4008_6602;
const FS_IOC_GETVERSION: c_ulong = 0x8008_7601;
const FS_IOC_FSGETXATTR: c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: c_ulong = 0x401c_5820;
const BLKFLSBUF: c_ulong = 0x1261;

fn ioctl_kind(request: c_ulong) -> IoctlKind {
    // Block devices' queries: sizes, sector sizes, read-only and
    // read-ahead settings (0x12xx, less the ones that write or discard).
    const BLOCK_QUERIES: [c_ulong; 9] = [0x125e, 0x1260, 0x1263, 0x1268, 0x1278, 0x1279, 0x127b, 0x127c, 0x127a];
    let size_queries = [0x8008_1272, 0x8008_1270]; // BLKGETSIZE64, BLKBSZGET
    match request {
        FIONREAD => IoctlKind::BytesToRead,
        FIOQSIZE | FS_IOC_FIEMAP | FIBMAP | BLKFLSBUF => IoctlKind::ReadsData,
        FICLONE | FICLONERANGE | FIDEDUPERANGE => IoctlKind::Clones,
        0x5400..=0x54ff => IoctlKind::Harmless,
        FIGETBSZ | FS_IOC_GETFLAGS | FS_IOC_SETFLAGS | FS_IOC_GETVERSION | FS_IOC_FSGETXATTR | FS_IOC_FSSETXATTR => {
            IoctlKind::Harmless
        }
        r if BLOCK_QUERIES.contains(&r) || size_queries.contains(&r) => IoctlKind::Harmless,
        _ => IoctlKind::Unknown,
    }
}

/// A clone request's source descriptor: `FICLONE`'s argument is the
/// descriptor itself, `FICLONERANGE`'s structure opens with it (a
/// `FIDEDUPERANGE` is asked of its source: none here).
fn clone_source(request: c_ulong, arg: *mut c_void) -> c_int {
    match request {
        FICLONE => arg as usize as c_int,
        FICLONERANGE if !arg.is_null() => {
            // SAFETY: `struct file_clone_range` begins with `__s64 src_fd`,
            // the program's structure for this request.
            unsafe { std::ptr::read_unaligned(arg as *const i64) as c_int }
        }
        _ => -1,
    }
}

/// `ioctl` on a managed descriptor, by [`IoctlKind`]; `kernel` makes the
/// call on the file's own descriptor.
fn ioctl_managed(
    desc: std::sync::Arc<table::Desc>,
    request: c_ulong,
    arg: *mut c_void,
    kernel: impl FnOnce() -> c_int,
) -> c_int {
    match ioctl_kind(request) {
        IoctlKind::Harmless if request == FIONBIO && !arg.is_null() => {
            // The description's `O_NONBLOCK` follows, as `F_GETFL` reports
            // it (a call that cannot wait: holding the description is fine).
            let rc = kernel();
            if rc == 0 {
                // SAFETY: FIONBIO's argument is the program's `int`.
                let on = unsafe { *(arg as *const c_int) } != 0;
                let flags = desc.flags();
                let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
                desc.status_flags.store(flags, std::sync::atomic::Ordering::Release);
            }
            rc
        }
        IoctlKind::Harmless => {
            drop(desc);
            kernel()
        }
        IoctlKind::BytesToRead => {
            let pos = *desc.pos.lock().unwrap_or_else(|e| e.into_inner());
            match desc.file.len() {
                Err(e) => errno::fail(&e),
                Ok(_) if arg.is_null() => errno::fail_with(libc::EFAULT),
                Ok(len) => {
                    let left = len.saturating_sub(pos).min(c_int::MAX as u64) as c_int;
                    // SAFETY: FIONREAD's argument is the program's `int`.
                    unsafe { *(arg as *mut c_int) = left };
                    0
                }
            }
        }
        IoctlKind::ReadsData => match desc.write_back() {
            Ok(()) => kernel(),
            Err(e) => errno::fail(&e),
        },
        IoctlKind::Clones => {
            let source = table::get(clone_source(request, arg));
            let written = desc.write_back().and_then(|()| source.map_or(Ok(()), |s| s.write_back()));
            if let Err(e) = written {
                return errno::fail(&e);
            }
            let key = desc.key;
            drop(desc);
            let rc = kernel();
            let target_changed = rc == 0 && request != FIDEDUPERANGE;
            if target_changed {
                let errno = errno::get();
                let _ = handover::hand_over(Some(key));
                errno::set(errno);
            }
            rc
        }
        IoctlKind::Unknown => {
            let key = desc.key;
            drop(desc);
            match handover::hand_over(Some(key)) {
                Ok(()) => kernel(),
                Err(e) => errno::fail(&e),
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: passed on with the program's argument.
    let kernel = || unsafe { real::ioctl(fd, request, arg) };
    let Some(_inside) = guard::enter() else { return kernel() };
    match table::get(fd) {
        Some(desc) => ioctl_managed(desc, request, arg, kernel),
        None => kernel(),
    }
}
