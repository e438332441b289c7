//! Reads, writes and the file position on managed descriptors: `read`,
//! `write`, `pread`/`pwrite` (and their `64` names), `readv`/`writev`,
//! `preadv`/`pwritev`, `preadv2`/`pwritev2` (and `preadv64v2`/
//! `pwritev64v2`, which programs built with `_FILE_OFFSET_BITS=64` call,
//! Python's `os.preadv`/`os.pwritev` and fio among them) and `lseek`.
//!
//! The position lives in the description (shared by `dup`s), locked
//! across a call that uses it, as the kernel serializes a description's
//! position. `O_APPEND` writes go to the end whatever the position, which
//! then follows them. `O_SYNC`/`O_DSYNC` descriptions, and writes with
//! `RWF_SYNC`/`RWF_DSYNC`, sync the written data before returning;
//! `RWF_DONTCACHE` makes the call uncached (drop-behind).
//!
//! `SEEK_DATA` and `SEEK_HOLE` treat the whole file as data (the cache
//! keeps no holes): data at any offset before the end, the one hole at it.

use std::io::{self, IoSlice};
use std::sync::{Mutex, MutexGuard};

use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};
use wbcache::{RawIov, WriteFlags};

use crate::table::{self, Desc};
use crate::{errno, guard, real, record};

/// `RWF_DONTCACHE` (Linux 6.14): libc does not name it yet.
const RWF_DONTCACHE: c_int = 0x80;

/// The per-call flags a managed call honours; others fail with
/// `EOPNOTSUPP`, as the kernel answers flags it does not know.
const RWF_KNOWN: c_int =
    libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_NOWAIT | libc::RWF_APPEND | RWF_DONTCACHE;

fn io_flags(rwf: c_int) -> io::Result<WriteFlags> {
    if rwf & !RWF_KNOWN != 0 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    Ok(if rwf & RWF_DONTCACHE != 0 { WriteFlags::DONTCACHE } else { WriteFlags::NONE })
}

/// The iovecs as slices.
///
/// # Safety
/// Each iovec describes memory valid for reads of its length for `'a`.
unsafe fn gather<'a>(iov: *const iovec, count: c_int) -> io::Result<Vec<IoSlice<'a>>> {
    if count < 0 || count as usize > libc::UIO_MAXIOV as usize || (iov.is_null() && count > 0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: the caller's contract; `count` iovecs at `iov`.
    let iovs = if count == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(iov, count as usize) } };
    Ok(iovs
        .iter()
        .map(|v| {
            IoSlice::new(if v.iov_len == 0 {
                &[]
            } else {
                // SAFETY: each base is valid for its length (the caller's
                // contract).
                unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) }
            })
        })
        .collect())
}

/// One buffer as a slice, without the allocation of [`gather`] (the
/// per-call path of `write`); a NULL buffer of some length is `EFAULT`.
///
/// # Safety
/// `buf` is valid for reads of `len` bytes for `'a` (or NULL).
unsafe fn one<'a>(buf: *const c_void, len: size_t) -> io::Result<[IoSlice<'a>; 1]> {
    if len == 0 {
        return Ok([IoSlice::new(&[])]);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    // SAFETY: `buf` is non-NULL and `len <= isize::MAX` (checked), and the
    // caller guarantees it is valid for reads of `len` bytes for `'a`.
    Ok([IoSlice::new(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })])
}

/// The iovecs as the buffers of a read, and their total length. They stay
/// raw pointers ([`RawIov`]): POSIX lets a program's iovecs overlap, which
/// `&mut` slices may not; they are filled in order, a later one's bytes
/// winning, as the kernel fills them. A length past `SSIZE_MAX` is
/// `EINVAL` (before the engine would see it) and a NULL base with a
/// length `EFAULT`.
///
/// # Safety
/// Each iovec describes memory valid for writes of its length for the
/// call (or has a NULL base).
unsafe fn scatter(iov: *const iovec, count: c_int) -> io::Result<(Vec<RawIov>, u64)> {
    if count < 0 || count as usize > libc::UIO_MAXIOV as usize || (iov.is_null() && count > 0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: the caller's contract; `count` iovecs at `iov`.
    let iovs = if count == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(iov, count as usize) } };
    let mut bufs = Vec::with_capacity(iovs.len());
    let mut total: u64 = 0;
    for v in iovs {
        if v.iov_len > isize::MAX as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        if v.iov_base.is_null() && v.iov_len > 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        total = total.saturating_add(v.iov_len as u64);
        // SAFETY: the base is valid for writes of its length for the call
        // (the caller's contract), not NULL unless the length is 0, and
        // the length at most `isize::MAX`; `RawIov`s may overlap.
        bufs.push(unsafe { RawIov::new(v.iov_base.cast(), v.iov_len) });
    }
    Ok((bufs, total))
}

/// The buffer of `read`, as the one target of a read: a NULL buffer or a
/// length past `SSIZE_MAX` is `EFAULT`, as `read(2)` answers.
///
/// # Safety
/// `buf` is valid for writes of `len` bytes for the call (or NULL).
unsafe fn one_target(buf: *mut c_void, len: size_t) -> io::Result<(Vec<RawIov>, u64)> {
    if len > 0 && (buf.is_null() || len > isize::MAX as usize) {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    // SAFETY: the caller's contract; not NULL unless the length is 0, and
    // the length at most `isize::MAX`.
    Ok((vec![unsafe { RawIov::new(buf.cast(), len) }], len as u64))
}

/// What a read call gave besides its descriptor: its buffers, their total
/// length and its flags.
struct ReadArgs {
    bufs: Vec<RawIov>,
    total: u64,
    flags: WriteFlags,
}

/// Reads at `at` (the position when `None`, advanced by what was read).
/// The descriptor's mode is checked before `args` reads the program's
/// buffers and flags, as Linux checks them: `EBADF` on a write-only
/// descriptor whatever the buffers, then the buffers' errors, then the
/// flags'.
fn read_into(desc: &Desc, at: Option<u64>, args: impl FnOnce() -> io::Result<ReadArgs>) -> io::Result<usize> {
    if desc.flags() & libc::O_ACCMODE == libc::O_WRONLY {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let ReadArgs { mut bufs, total, flags } = args()?;
    match at {
        Some(off) => {
            within_range(off, total)?;
            desc.file.read_vectored_at_raw(&mut bufs, off, flags)
        }
        None => {
            let mut pos = desc.pos.lock().unwrap_or_else(|e| e.into_inner());
            within_range(*pos, total)?;
            let n = desc.file.read_vectored_at_raw(&mut bufs, *pos, flags)?;
            *pos += n as u64;
            Ok(n)
        }
    }
}

/// `EINVAL` when `[off, off + len)` passes the largest offset, as Linux
/// checks every read and write before it starts (`rw_verify_area`), at
/// the offset given or the position, even for an append.
fn within_range(off: u64, len: u64) -> io::Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// Appends to one file one at a time, as the kernel's inode lock makes
/// them: each finds the end and writes there with no other append of the
/// file in between. The cache's handles are never opened in append mode
/// (whether a write appends is the description's `O_APPEND` at the time
/// of the write, which `F_SETFL` changes, or the call's `RWF_APPEND`), so
/// the lock is here: one of a few, by inode number.
fn appends_of(key: (u64, u64)) -> MutexGuard<'static, ()> {
    static APPENDS: [Mutex<()>; 16] = [const { Mutex::new(()) }; 16];
    APPENDS[(key.1 % 16) as usize].lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes at `at` (the position when `None`, which follows the write),
/// at the end for `O_APPEND` or `RWF_APPEND`, synced for `O_SYNC`/
/// `O_DSYNC`, `RWF_SYNC` or `RWF_DSYNC` (`rwf`: `pwritev2`'s flags).
fn write_from(desc: &Desc, bufs: &[IoSlice<'_>], at: Option<u64>, flags: WriteFlags, rwf: c_int) -> io::Result<usize> {
    let status = desc.flags();
    if status & libc::O_ACCMODE == libc::O_RDONLY {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let append = status & libc::O_APPEND != 0 || rwf & libc::RWF_APPEND != 0;
    let sync = rwf & (libc::RWF_SYNC | libc::RWF_DSYNC) != 0;
    let appending = append.then(|| appends_of(desc.key));
    let mut pos = desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    within_range(at.unwrap_or(*pos), bufs.iter().map(|b| b.len() as u64).sum())?;
    let off = match at {
        _ if append => desc.file.len()?,
        Some(off) => off,
        None => *pos,
    };
    let n = match bufs {
        [buf] => desc.file.write_at_with(buf, off, flags)?,
        _ => desc.file.write_vectored_at_with(bufs, off, flags)?,
    };
    // An empty write leaves the position, even an append's (Linux checks
    // the count before it finds the end).
    if at.is_none() && n > 0 {
        *pos = off + n as u64;
    }
    drop((pos, appending));
    if sync || status & (libc::O_SYNC | libc::O_DSYNC) != 0 {
        desc.file.sync_data()?;
    }
    Ok(n)
}

/// A call's `ssize_t` answer.
fn answer(result: io::Result<usize>) -> ssize_t {
    match result {
        Ok(n) => n as ssize_t,
        Err(e) => errno::fail::<i64>(&e) as ssize_t,
    }
}

/// Runs `managed` on `fd`'s description, or `kernel` when it has none.
fn on_fd(fd: c_int, managed: impl FnOnce(&Desc) -> io::Result<usize>, kernel: impl FnOnce() -> ssize_t) -> ssize_t {
    let Some(_inside) = guard::enter() else { return kernel() };
    match table::get(fd) {
        Some(desc) => answer(managed(&desc)),
        None => kernel(),
    }
}

fn offset(off: off_t) -> io::Result<u64> {
    u64::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    on_fd(
        fd,
        |d| {
            read_into(d, None, || {
                // SAFETY: the program lends `buf` for `len` bytes.
                let (bufs, total) = unsafe { one_target(buf, len) }?;
                Ok(ReadArgs { bufs, total, flags: WriteFlags::NONE })
            })
        },
        // SAFETY: the program's arguments, passed on.
        || unsafe { real::read(fd, buf, len) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, len: size_t, buf_len: size_t) -> ssize_t {
    if len > buf_len {
        // SAFETY: abort takes nothing and has no precondition; it is
        // glibc's answer to a fortified overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: the program's arguments, passed on to `read`, whose contract
    // is this call's: `buf` writable for `len` bytes (`len <= buf_len`).
    unsafe { read(fd, buf, len) }
}

/// The first `n` bytes of `buf` (what a write of it wrote), for the
/// recorder.
///
/// # Safety
/// `buf` is valid for reads of `n` bytes (the write just read them).
unsafe fn written(buf: *const c_void, n: usize) -> Vec<u8> {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }.to_vec()
}

/// The first `n` bytes of the iovecs, in order (what a write of them
/// wrote), for the recorder.
///
/// # Safety
/// The iovecs are valid and their first `n` bytes readable (the write
/// just read them).
unsafe fn written_iov(iov: *const iovec, count: c_int, n: usize) -> Vec<u8> {
    // SAFETY: the caller's contract.
    let slices = unsafe { gather(iov, count) }.unwrap_or_default();
    let mut out = Vec::with_capacity(n);
    for s in slices {
        let take = (n - out.len()).min(s.len());
        out.extend_from_slice(&s[..take]);
    }
    out
}

/// Where a vectored write with offset `off` (-1: the position) goes, for
/// the recorder.
fn recorded_at(off: off_t) -> record::At {
    u64::try_from(off).map_or(record::At::Position, record::At::Offset)
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    let call = || {
        on_fd(
            fd,
            // SAFETY: the program lends `buf` for `len` bytes for the call.
            |d| write_from(d, &unsafe { one(buf, len) }?, None, WriteFlags::NONE, 0),
            // SAFETY: the program's arguments, passed on to the call it made.
            || unsafe { real::write(fd, buf, len) },
        )
    };
    // SAFETY: `buf` held the `n` bytes written.
    record::write(fd, record::At::Position, 0, |_, n| unsafe { written(buf, n) }, call)
}

/// `pread`: one buffer at an offset, the position untouched (no
/// allocation, no position lock: the per-call path).
fn pread_managed(d: &Desc, buf: *mut c_void, len: size_t, off: off_t) -> io::Result<usize> {
    // Linux checks the offset before the descriptor's access mode.
    let off = offset(off)?;
    if d.flags() & libc::O_ACCMODE == libc::O_WRONLY {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    within_range(off, len as u64)?;
    if len == 0 {
        return Ok(0);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    // SAFETY: the program lends `buf` for writes of `len` bytes for the
    // call (it need not be initialized: the slice is of MaybeUninit).
    let slice = unsafe { std::slice::from_raw_parts_mut(buf.cast::<std::mem::MaybeUninit<u8>>(), len) };
    d.file.read_at_uninit(slice, off, WriteFlags::NONE)
}

/// `pwrite`: one buffer at an offset (at the end for `O_APPEND`, as
/// Linux does).
fn pwrite_managed(d: &Desc, buf: *const c_void, len: size_t, off: off_t) -> io::Result<usize> {
    let status = d.flags();
    let off = offset(off)?;
    if status & (libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC) != 0 || status & libc::O_ACCMODE == libc::O_RDONLY {
        // SAFETY: the program lends `buf` for `len` bytes.
        return write_from(d, &unsafe { one(buf, len) }?, Some(off), WriteFlags::NONE, 0);
    }
    within_range(off, len as u64)?;
    if len == 0 {
        return Ok(0);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    // SAFETY: the program lends `buf` for reads of `len` bytes.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    d.file.write_at(data, off)
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| pread_managed(d, buf, len, off), || unsafe { real::pread(fd, buf, len, off) })
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| pread_managed(d, buf, len, off), || unsafe { real::pread64(fd, buf, len, off) })
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| pwrite_managed(d, buf, len, off), || unsafe { real::pwrite(fd, buf, len, off) });
    // SAFETY: `buf` held the `n` bytes written.
    record::write(fd, recorded_at(off), 0, |_, n| unsafe { written(buf, n) }, call)
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| pwrite_managed(d, buf, len, off), || unsafe { real::pwrite64(fd, buf, len, off) });
    // SAFETY: `buf` held the `n` bytes written.
    record::write(fd, recorded_at(off), 0, |_, n| unsafe { written(buf, n) }, call)
}

/// `preadv`'s and `pwritev`'s offset: never the position (-1 is as
/// invalid as any negative offset there; only the `2` calls take it).
fn explicit(off: off_t) -> io::Result<off_t> {
    offset(off).map(|_| off)
}

/// `preadv2` and its relatives: `off` -1 means the position.
fn readv_managed(d: &Desc, iov: *const iovec, count: c_int, off: off_t, rwf: c_int) -> io::Result<usize> {
    let at = if off == -1 { None } else { Some(offset(off)?) };
    read_into(d, at, || {
        // SAFETY: the program lends the iovecs' memory for the call.
        let (bufs, total) = unsafe { scatter(iov, count) }?;
        Ok(ReadArgs { bufs, total, flags: io_flags(rwf)? })
    })
}

/// `pwritev2` and its relatives: `off` -1 means the position.
fn writev_managed(d: &Desc, iov: *const iovec, count: c_int, off: off_t, rwf: c_int) -> io::Result<usize> {
    let flags = io_flags(rwf)?;
    let at = if off == -1 { None } else { Some(offset(off)?) };
    // SAFETY: the program lends the iovecs' memory for the call.
    write_from(d, &unsafe { gather(iov, count) }?, at, flags, rwf)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| readv_managed(d, iov, count, -1, 0), || unsafe { real::readv(fd, iov, count) })
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| writev_managed(d, iov, count, -1, 0), || unsafe { real::writev(fd, iov, count) });
    // SAFETY: the iovecs held the `n` bytes written.
    record::write(fd, record::At::Position, 0, |_, n| unsafe { written_iov(iov, count, n) }, call)
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| readv_managed(d, iov, count, explicit(off)?, 0), || unsafe { real::preadv(fd, iov, count, off) })
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| readv_managed(d, iov, count, explicit(off)?, 0), || unsafe { real::preadv64(fd, iov, count, off) })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    let call = || {
        on_fd(
            fd,
            |d| writev_managed(d, iov, count, explicit(off)?, 0),
            // SAFETY: the program's arguments, passed on to the call it made.
            || unsafe { real::pwritev(fd, iov, count, off) },
        )
    };
    // SAFETY: the iovecs held the `n` bytes written.
    record::write(fd, recorded_at(off), 0, |_, n| unsafe { written_iov(iov, count, n) }, call)
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const iovec, count: c_int, off: off_t) -> ssize_t {
    // SAFETY: passed on.
    let call = || {
        on_fd(
            fd,
            |d| writev_managed(d, iov, count, explicit(off)?, 0),
            // SAFETY: the program's arguments, passed on to the call it made.
            || unsafe { real::pwritev64(fd, iov, count, off) },
        )
    };
    // SAFETY: the iovecs held the `n` bytes written.
    record::write(fd, recorded_at(off), 0, |_, n| unsafe { written_iov(iov, count, n) }, call)
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| readv_managed(d, iov, count, off, flags), || unsafe { real::preadv2(fd, iov, count, off, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t {
    // SAFETY: passed on.
    let call = || {
        on_fd(
            fd,
            |d| writev_managed(d, iov, count, off, flags),
            // SAFETY: the program's arguments, passed on to the call it made.
            || unsafe { real::pwritev2(fd, iov, count, off, flags) },
        )
    };
    // SAFETY: the iovecs held the `n` bytes written.
    record::write(fd, recorded_at(off), flags, |_, n| unsafe { written_iov(iov, count, n) }, call)
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t {
    // SAFETY: passed on.
    on_fd(fd, |d| readv_managed(d, iov, count, off, flags), || unsafe { real::preadv64v2(fd, iov, count, off, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(fd: c_int, iov: *const iovec, count: c_int, off: off_t, flags: c_int) -> ssize_t {
    // SAFETY: passed on.
    let call = || {
        on_fd(
            fd,
            |d| writev_managed(d, iov, count, off, flags),
            // SAFETY: the program's arguments, passed on to the call it made.
            || unsafe { real::pwritev64v2(fd, iov, count, off, flags) },
        )
    };
    // SAFETY: the iovecs held the `n` bytes written.
    record::write(fd, recorded_at(off), flags, |_, n| unsafe { written_iov(iov, count, n) }, call)
}

/// Positions past this are asked of the kernel too: the file system's
/// largest file size (ext4's 16 TiB, others more) bounds them there.
const FAR_POSITION: i64 = 1 << 40;

/// `lseek` on a managed description (`fd` one of its descriptors).
fn seek(fd: c_int, desc: &Desc, off: off_t, whence: c_int) -> io::Result<u64> {
    let mut pos = desc.pos.lock().unwrap_or_else(|e| e.into_inner());
    let len = desc.file.len()?;
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *pos as i64,
        libc::SEEK_END => len as i64,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            // A negative offset is past the end as the kernel compares.
            let at = off as u64;
            if at >= len {
                return Err(io::Error::from_raw_os_error(libc::ENXIO));
            }
            *pos = if whence == libc::SEEK_DATA { at } else { len };
            return Ok(*pos);
        }
        _ => return Err(einval()),
    };
    let target = base.checked_add(off).filter(|t| *t >= 0).ok_or_else(einval)?;
    // SAFETY: lseek takes no pointer; it moves the program's own
    // descriptor, whose kernel position is realigned whenever the kernel is
    // handed it.
    if target > FAR_POSITION && unsafe { real::lseek(fd, target, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    *pos = target as u64;
    Ok(*pos)
}

fn lseek_any(fd: c_int, off: off_t, whence: c_int, kernel: impl FnOnce() -> off_t) -> off_t {
    let Some(_inside) = guard::enter() else { return kernel() };
    match table::get(fd) {
        Some(desc) => match seek(fd, &desc, off, whence) {
            Ok(pos) => pos as off_t,
            Err(e) => errno::fail(&e),
        },
        None => kernel(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: passed on.
    lseek_any(fd, off, whence, || unsafe { real::lseek(fd, off, whence) })
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: passed on.
    lseek_any(fd, off, whence, || unsafe { real::lseek64(fd, off, whence) })
}
