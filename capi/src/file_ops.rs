//! The calls on an open file besides reads and writes: sync, size,
//! truncation, residency, advice, range writeback and fallocate. Each
//! checks its handle and its numbers and forwards to one
//! [`File`](wbcache::File) method. The offsets and lengths of `wbc_fadvise`,
//! `wbc_sync_range` and `wbc_fallocate` arrive signed, as in the system
//! calls they mirror, so a negative one is `EINVAL` here.

use super::failure::{einval, guard, guard_int, Failure};
use super::handles::{file_ref, to_i64, wbc_file};
use std::ffi::{c_int, c_uint};
use std::io;
use wbcache::{Advice, Allocation, SyncRangeFlags};

/// [`wbc_residency`] bits: the block is cached, dirty, under writeback.
pub const WBC_RESIDENT_CACHED: u8 = wbcache::RESIDENT_CACHED;
pub const WBC_RESIDENT_DIRTY: u8 = wbcache::RESIDENT_DIRTY;
pub const WBC_RESIDENT_WRITEBACK: u8 = wbcache::RESIDENT_WRITEBACK;

/// Writes back and syncs the file's data and metadata (`fsync`). Returns 0
/// or `-errno`; a writeback error since this handle's last sync is reported
/// once.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_fsync(f: *mut wbc_file) -> c_int {
    guard_int("wbc_fsync", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        Ok(unsafe { file_ref(f) }?.sync_all()?)
    })
}

/// As [`wbc_fsync`] but `fdatasync` (metadata only when the size changed).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_fdatasync(f: *mut wbc_file) -> c_int {
    guard_int("wbc_fdatasync", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        Ok(unsafe { file_ref(f) }?.sync_data()?)
    })
}

/// The file's logical size in bytes (including cached, unwritten data), or
/// `-errno`.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_size(f: *mut wbc_file) -> i64 {
    guard("wbc_size", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let size = unsafe { file_ref(f) }?.len()?;
        i64::try_from(size).map_err(|_| Failure::from(io::Error::from_raw_os_error(libc::EOVERFLOW)))
    })
}

/// What of `[off, off + len)` is cached, as `mincore(2)` answers for
/// pages: `vec[i]` gets the bits of the `i`-th 4 KiB block from the one
/// holding `off`: [`WBC_RESIDENT_CACHED`] (1), [`WBC_RESIDENT_DIRTY`] (2),
/// [`WBC_RESIDENT_WRITEBACK`] (4); 0 = not cached. `vec` must hold one byte
/// per block the range touches, `(off % 4096 + len + 4095) / 4096`. Blocks
/// past the end of the file are not reported (their bytes are left alone).
/// Returns the number of blocks filled, or `-errno`: `-EINVAL` for a NULL
/// handle, a NULL `vec` with `len > 0` or a range past `UINT64_MAX`,
/// `-EBADF` after [`wbc_cache_close`](super::wbc_cache_close).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open); `vec` is
/// NULL or valid for writes of the bytes said above.
#[no_mangle]
pub unsafe extern "C" fn wbc_residency(f: *mut wbc_file, off: u64, len: u64, vec: *mut u8) -> i64 {
    guard("wbc_residency", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        let end = off.checked_add(len).ok_or_else(|| einval("range past UINT64_MAX"))?;
        if len == 0 {
            return Ok(0);
        }
        if vec.is_null() {
            return Err(einval("NULL vec"));
        }
        let touched = end.div_ceil(4096) - off / 4096;
        let touched = usize::try_from(touched).map_err(|_| einval("range too large"))?;
        // SAFETY: the caller guarantees `vec` holds a byte per touched block.
        let out = unsafe { std::slice::from_raw_parts_mut(vec, touched) };
        Ok(to_i64(file.residency(off, len, out)?))
    })
}

/// Truncates or extends (with zeros) the file to `size` bytes (`ftruncate`).
/// Returns 0 or `-errno` (`-EBADF` on a read-only handle, `-EFBIG` above
/// `INT64_MAX`, `-EINVAL` for a size change on a block device).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_truncate(f: *mut wbc_file, size: u64) -> c_int {
    guard_int("wbc_truncate", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        Ok(unsafe { file_ref(f) }?.set_len(size)?)
    })
}

/// `[off, off + len)` as a range, `len == 0` meaning "to the end of the
/// file" (`posix_fadvise`, `sync_file_range`); `EINVAL` for a negative
/// offset or length, or an end past `INT64_MAX`.
fn file_range(off: i64, len: i64) -> Result<std::ops::Range<u64>, Failure> {
    if off < 0 || len < 0 {
        return Err(einval("negative offset or length"));
    }
    if len == 0 {
        return Ok(off as u64..u64::MAX);
    }
    let end = off.checked_add(len).ok_or_else(|| einval("range past INT64_MAX"))?;
    Ok(off as u64..end as u64)
}

/// Advice about the handle's future accesses (`posix_fadvise(2)`):
/// `WBC_FADV_*`, the `POSIX_FADV_*` values. `len == 0` reaches the end of
/// the file. Returns 0 or `-errno`: `-EINVAL` for an unknown advice, a
/// negative offset or length or a NULL handle, `-EBADF` after
/// [`wbc_cache_close`](super::wbc_cache_close).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_fadvise(f: *mut wbc_file, off: i64, len: i64, advice: c_int) -> c_int {
    guard_int("wbc_fadvise", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        let advice = Advice::from_raw(advice)?;
        Ok(file.advise(file_range(off, len)?, advice)?)
    })
}

/// Writeback of `[off, off + len)` (`sync_file_range(2)`): `flags` are
/// `WBC_SYNC_RANGE_*`, the `SYNC_FILE_RANGE_*` values. No durability
/// promise (no device flush, no metadata sync). `len == 0` reaches the end
/// of the file. Returns 0 or `-errno`: `-EINVAL` for unknown flags, a
/// negative offset or length or a NULL handle, a writeback error since the
/// handle's last report when it waits (`-EIO`, `-ENOSPC`, ...), `-EBADF`
/// after [`wbc_cache_close`](super::wbc_cache_close).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_sync_range(f: *mut wbc_file, off: i64, len: i64, flags: c_uint) -> c_int {
    guard_int("wbc_sync_range", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        let how = SyncRangeFlags::from_bits(flags)?;
        Ok(file.writeback_range(file_range(off, len)?, how)?)
    })
}

/// `fallocate(2)` of `[off, off + len)` with `mode` 0, `FALLOC_FL_KEEP_SIZE`,
/// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_ZERO_RANGE` or
/// `FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`, with the cache kept coherent
/// (a punched or zeroed range reads as zeros, its dirty data is discarded).
/// Returns 0 or `-errno`: `-EINVAL` for a negative offset, a length `<= 0` or
/// a NULL handle, `-EFBIG` past `INT64_MAX` or the file system's largest file,
/// `-EOPNOTSUPP` for another mode or a store that cannot, `-EBADF` on a
/// read-only handle or after [`wbc_cache_close`](super::wbc_cache_close), and
/// the store's own (`-ENOSPC`, ...; on a block device `-EINVAL` for a range
/// not aligned to its logical block size or past its end, whatever the mode).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open).
#[no_mangle]
pub unsafe extern "C" fn wbc_fallocate(f: *mut wbc_file, mode: c_int, off: i64, len: i64) -> c_int {
    guard_int("wbc_fallocate", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        if off < 0 || len <= 0 {
            return Err(einval("negative offset, or a length not above 0"));
        }
        let end = off.checked_add(len).ok_or(Failure { errno: libc::EFBIG, message: "range past INT64_MAX".into() })?;
        Ok(file.fallocate(off as u64..end as u64, Allocation::try_from(mode)?)?)
    })
}
