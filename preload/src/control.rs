//! Syncing, sizing and advising managed descriptors: `fsync`,
//! `fdatasync`, `syncfs`, `sync`, `ftruncate`, `fallocate`,
//! `posix_fallocate`, `posix_fadvise`, `readahead` and `sync_file_range`,
//! each served by the cache on a managed descriptor and passed to the C
//! library on any other.

use std::io;

use libc::{c_int, c_uint, off_t, size_t, ssize_t};
use wbcache::{Advice, Allocation, SyncRangeFlags};

use crate::record::{self, FdCall};
use crate::table::{self, Desc};
use crate::{errno, guard, real, state};

/// Runs `managed` on `fd`'s description (0 or -1 with `errno`), or
/// `kernel` when it has none.
fn on_fd(fd: c_int, managed: impl FnOnce(&Desc) -> io::Result<()>, kernel: impl FnOnce() -> c_int) -> c_int {
    let Some(_inside) = guard::enter() else { return kernel() };
    match table::get(fd) {
        Some(desc) => match managed(&desc) {
            Ok(()) => 0,
            Err(e) => errno::fail(&e),
        },
        None => kernel(),
    }
}

/// As `on_fd`, for the calls that return the error number itself.
fn on_fd_posix(fd: c_int, managed: impl FnOnce(&Desc) -> io::Result<()>, kernel: impl FnOnce() -> c_int) -> c_int {
    let Some(_inside) = guard::enter() else { return kernel() };
    match table::get(fd) {
        Some(desc) => managed(&desc).err().map_or(0, |e| errno::code(&e)),
        None => kernel(),
    }
}

/// `[off, off + len)`, with `len` 0 meaning to the end of the file.
fn range(off: off_t, len: off_t) -> io::Result<std::ops::Range<u64>> {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let start = u64::try_from(off).map_err(|_| einval())?;
    let len = u64::try_from(len).map_err(|_| einval())?;
    Ok(start..if len == 0 { i64::MAX as u64 } else { start.saturating_add(len) })
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    // SAFETY: passed on.
    record::on_fd(fd, FdCall::Fsync, || on_fd(fd, |d| d.file.sync_all(), || unsafe { real::fsync(fd) }))
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    // SAFETY: passed on.
    record::on_fd(fd, FdCall::Fdatasync, || on_fd(fd, |d| d.file.sync_data(), || unsafe { real::fdatasync(fd) }))
}

/// Writes back and syncs everything the cache holds.
fn sync_cache() -> io::Result<()> {
    match state::built() {
        Some(state) => state.with_cache(|cache| cache.sync_all()),
        None => Ok(()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    record::sync_all(|| {
        let synced = guard::enter().map_or(Ok(()), |_inside| sync_cache());
        // SAFETY: passed on.
        let rc = unsafe { real::syncfs(fd) };
        match synced {
            Err(e) if rc == 0 && e.raw_os_error() != Some(libc::EBADF) => errno::fail(&e),
            _ => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn sync() {
    record::sync_all(|| {
        if let Some(_inside) = guard::enter() {
            // `sync(2)` reports nothing; neither does this.
            let _ = sync_cache();
        }
        // SAFETY: passed on.
        unsafe { real::sync() };
        0
    });
}

fn set_len(d: &Desc, len: off_t) -> io::Result<()> {
    let len = u64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if d.flags() & libc::O_ACCMODE == libc::O_RDONLY {
        // ftruncate(2) of a descriptor not open for writing.
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    d.file.set_len(len)
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| set_len(d, len), || unsafe { real::ftruncate(fd, len) });
    record::on_fd(fd, FdCall::Truncate(len.max(0) as u64), call)
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| set_len(d, len), || unsafe { real::ftruncate64(fd, len) });
    record::on_fd(fd, FdCall::Truncate(len.max(0) as u64), call)
}

/// An allocation as the recorder writes it.
fn allocation(mode: c_int, off: off_t, len: off_t) -> FdCall {
    FdCall::Fallocate { mode, off: off.max(0) as u64, len: len.max(0) as u64 }
}

fn allocate(d: &Desc, mode: c_int, off: off_t, len: off_t) -> io::Result<()> {
    if off < 0 || len <= 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    d.file.fallocate(off as u64..(off as u64).saturating_add(len as u64), Allocation::try_from(mode)?)
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| allocate(d, mode, off, len), || unsafe { real::fallocate(fd, mode, off, len) });
    record::on_fd(fd, allocation(mode, off, len), call)
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_fd(fd, |d| allocate(d, mode, off, len), || unsafe { real::fallocate64(fd, mode, off, len) });
    record::on_fd(fd, allocation(mode, off, len), call)
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_fd_posix(fd, |d| allocate(d, 0, off, len), || unsafe { real::posix_fallocate(fd, off, len) });
    record::on_fd(fd, allocation(0, off, len), call)
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: passed on.
    let call = || on_fd_posix(fd, |d| allocate(d, 0, off, len), || unsafe { real::posix_fallocate64(fd, off, len) });
    record::on_fd(fd, allocation(0, off, len), call)
}

/// `posix_fadvise` as Linux answers it: `EINVAL` for a negative length
/// or an unknown advice; a negative offset names no page, and advises
/// nothing.
fn advise(d: &Desc, off: off_t, len: off_t, advice: c_int) -> io::Result<()> {
    if len < 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let advice = Advice::from_raw(advice)?;
    if off < 0 {
        return Ok(());
    }
    d.file.advise(range(off, len)?, advice)
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    // SAFETY: passed on.
    on_fd_posix(fd, |d| advise(d, off, len, advice), || unsafe { real::posix_fadvise(fd, off, len, advice) })
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    // SAFETY: passed on.
    on_fd_posix(fd, |d| advise(d, off, len, advice), || unsafe { real::posix_fadvise64(fd, off, len, advice) })
}

#[no_mangle]
pub unsafe extern "C" fn readahead(fd: c_int, off: off_t, len: size_t) -> ssize_t {
    let len = len.min(i64::MAX as usize) as off_t;
    let willneed = |d: &Desc| {
        // readahead(2) reads: a descriptor that may not is EBADF.
        if d.flags() & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        advise(d, off, len.max(1), libc::POSIX_FADV_WILLNEED)
    };
    // SAFETY: passed on.
    on_fd(fd, willneed, || unsafe { real::readahead(fd, off, len as size_t) } as c_int) as ssize_t
}

/// `sync_file_range` as Linux checks it: the flags, then the range, whose
/// end may not pass the largest offset.
fn write_range(d: &Desc, off: off_t, len: off_t, flags: c_uint) -> io::Result<()> {
    let how = SyncRangeFlags::from_bits(flags)?;
    if off.checked_add(len).is_none() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    d.file.writeback_range(range(off, len)?, how)
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(fd: c_int, off: off_t, len: off_t, flags: c_uint) -> c_int {
    // SAFETY: passed on.
    let call =
        || on_fd(fd, |d| write_range(d, off, len, flags), || unsafe { real::sync_file_range(fd, off, len, flags) });
    record::on_fd(fd, FdCall::SyncRange { off: off.max(0) as u64, len: len.max(0) as u64, flags }, call)
}
