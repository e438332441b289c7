//! Reads and writes: `wbc_pread`/`wbc_pwrite` on one buffer and
//! `wbc_preadv`/`wbc_pwritev` on an iovec list.
//!
//! The caller's memory is lent for the call only. Every pointer and length
//! is checked before a slice is made of it (NULL, `SSIZE_MAX`, `IOV_MAX`,
//! in Linux's order of errors). Read buffers may be uninitialized, so only
//! the bytes a read returns are written, and `wbc_preadv`'s may overlap,
//! so they are never made into Rust slices.

use super::failure::{einval, guard, Failure};
use super::handles::{file_ref, to_i64, wbc_file};
use std::ffi::{c_int, c_void};
use std::io::{self, IoSlice};
use wbcache::{File, WriteFlags};
use wbcache::{RawIov, IOV_MAX};

/// `wbc_pread`/`wbc_pwrite` flag: uncached I/O (`RWF_DONTCACHE`); equals
/// [`WriteFlags::DONTCACHE`] and the header's `WBC_DONTCACHE`.
pub const WBC_DONTCACHE: u32 = 0x1;

fn io_flags(flags: u32) -> Result<WriteFlags, Failure> {
    Ok(WriteFlags::from_bits(flags)?)
}

/// Reads up to `len` bytes at `off` into `buf`; fewer only at end of file.
/// `flags` is 0 or `WBC_DONTCACHE` (other bits: `-EINVAL`). Returns the bytes
/// read (0 at or past end of file) or `-errno` (`-EBADF` on a write-only
/// handle or after [`wbc_cache_close`](super::wbc_cache_close)). `buf` is not
/// zeroed first: past the bytes returned, its contents are unspecified.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open); `buf` is
/// NULL or valid for writes of `len` bytes (it need not be initialized).
#[no_mangle]
pub unsafe extern "C" fn wbc_pread(f: *mut wbc_file, buf: *mut c_void, len: usize, off: u64, flags: u32) -> i64 {
    guard("wbc_pread", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        if buf.is_null() {
            return Err(einval("NULL buffer"));
        }
        if len > isize::MAX as usize {
            return Err(einval("length exceeds SSIZE_MAX"));
        }
        let flags = io_flags(flags)?;
        // The caller's buffer may be fresh from malloc: it is lent as
        // possibly uninitialized bytes, and only those the read returns are
        // written (no zeroing first).
        let slice: &mut [std::mem::MaybeUninit<u8>] = if len == 0 {
            &mut []
        } else {
            // SAFETY: `buf` is non-NULL and valid for `len` bytes of writes
            // (caller contract), `len <= isize::MAX`, and `MaybeUninit<u8>`
            // has no alignment requirement and no validity requirement. The
            // slice lives only for this call, during which the caller lends
            // us `buf`.
            unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
        };
        Ok(file.read_at_uninit(slice, off, flags).map(to_i64)?)
    })
}

/// Writes `len` bytes from `buf` at `off` into the cache (write-back; use
/// [`wbc_fsync`](super::wbc_fsync) for durability). `flags` is 0 or
/// `WBC_DONTCACHE` (uncached write: written back soon and dropped from the
/// cache; other bits: `-EINVAL`). Returns the bytes written (all of them,
/// except at the end of a block device) or `-errno` (`-EBADF` on a read-only
/// handle or after [`wbc_cache_close`](super::wbc_cache_close), `-EFBIG` past
/// the largest file offset).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open); `buf` is
/// NULL or valid for reads of `len` initialized bytes.
#[no_mangle]
pub unsafe extern "C" fn wbc_pwrite(f: *mut wbc_file, buf: *const c_void, len: usize, off: u64, flags: u32) -> i64 {
    guard("wbc_pwrite", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        if buf.is_null() {
            return Err(einval("NULL buffer"));
        }
        if len > isize::MAX as usize {
            return Err(einval("length exceeds SSIZE_MAX"));
        }
        let flags = io_flags(flags)?;
        // SAFETY: `buf` is non-NULL and valid for reads of `len` initialized
        // bytes (caller contract), `len <= isize::MAX`, u8 needs no
        // alignment, and the slice lives only for this call.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        Ok(file.write_at_with(data, off, flags).map(to_i64)?)
    })
}

/// The caller's `iov[0..iovcnt]`, checked: `iovcnt` in `0..=IOV_MAX`, `iov`
/// non-NULL unless `iovcnt` is 0, and no NULL base under a non-zero length
/// (the kernel's `EFAULT`; `EINVAL` here, as for a NULL buffer), and a
/// total length within `SSIZE_MAX`, all before any slice is made of them.
///
/// # Safety
/// `iov` is NULL or valid for reads of `iovcnt` `struct iovec`s.
unsafe fn iovecs<'a>(iov: *const libc::iovec, iovcnt: c_int) -> Result<&'a [libc::iovec], Failure> {
    let count = usize::try_from(iovcnt).map_err(|_| einval("negative iovcnt"))?;
    if count > IOV_MAX {
        return Err(einval("iovcnt exceeds IOV_MAX (1024)"));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(einval("NULL iov"));
    }
    // SAFETY: `iov` is non-NULL and valid for `count` iovecs (caller
    // contract); `struct iovec` has no invalid bit patterns, and the slice
    // lives only for the call that lent the array.
    let list = unsafe { std::slice::from_raw_parts(iov, count) };
    if let Some(i) = list.iter().position(|v| v.iov_base.is_null() && v.iov_len > 0) {
        return Err(Failure { errno: libc::EINVAL, message: format!("NULL iov[{i}].iov_base with a non-zero length") });
    }
    let total = list.iter().try_fold(0usize, |sum, v| sum.checked_add(v.iov_len).filter(|&t| t <= isize::MAX as usize));
    if total.is_none() {
        return Err(einval("the iovecs' total length exceeds SSIZE_MAX"));
    }
    Ok(list)
}

/// What a vectored call does with the handle's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// The checked arguments of a vectored call, in Linux's order: the handle,
/// its mode (`EBADF` before a bad list's `EINVAL`), the list, the flags.
///
/// # Safety
/// As [`file_ref`] for `f` and [`iovecs`] for `iov`.
unsafe fn vectored_args<'a>(
    f: *const wbc_file,
    iov: *const libc::iovec,
    iovcnt: c_int,
    flags: u32,
    access: Access,
) -> Result<(&'a File, &'a [libc::iovec], WriteFlags), Failure> {
    // SAFETY: the caller guarantees `f` is NULL or a live `wbc_open`
    // handle, as `file_ref` requires.
    let file = unsafe { file_ref(f) }?;
    // The handle's mode before the list, as Linux checks: a bad list on a
    // handle of the wrong mode is `EBADF`, not `EINVAL`.
    let allowed = match access {
        Access::Read => file.is_readable(),
        Access::Write => file.is_writable(),
    };
    if !allowed {
        return Err(io::Error::from_raw_os_error(libc::EBADF).into());
    }
    // SAFETY: the caller guarantees `iov` is NULL or valid for reads of
    // `iovcnt` iovecs, as `iovecs` requires.
    let list = unsafe { iovecs(iov, iovcnt) }?;
    Ok((file, list, io_flags(flags)?))
}

/// Reads into the buffers `iov[0..iovcnt]` in order, as [`wbc_pread`]
/// into their concatenation would (`preadv`). Returns the bytes read (fewer
/// than their total only at end of file) or `-errno`: as `wbc_pread`, and
/// `-EINVAL` for `iovcnt` negative or above 1024, a NULL `iov` (unless
/// `iovcnt` is 0), a NULL base with a non-zero length, or a total length
/// past `SSIZE_MAX`.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open); `iov` is
/// NULL or valid for reads of `iovcnt` iovecs, each base NULL or valid for
/// writes of its length (the buffers need not be initialized, and may overlap:
/// where they do, the later buffer's bytes win, as with `preadv`).
#[no_mangle]
pub unsafe extern "C" fn wbc_preadv(
    f: *mut wbc_file,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: u64,
    flags: u32,
) -> i64 {
    guard("wbc_preadv", || {
        // SAFETY: the caller guarantees `f` is NULL or live and `iov` NULL
        // or valid for `iovcnt` iovecs.
        let (file, list, flags) = unsafe { vectored_args(f, iov, iovcnt, flags, Access::Read) }?;
        // Raw buffers: C may pass overlapping ones, which Rust slices could
        // not express. The pairs are copied out first, so an iov_base
        // pointing into the iovec array itself is harmless too.
        let mut bufs: Vec<RawIov> = list
            .iter()
            .map(|v| {
                // SAFETY: `iov_base` is valid for writes of `iov_len` bytes
                // for this call (caller contract) and non-NULL unless the
                // length is 0 (checked by `iovecs`, as is every length being
                // within `isize::MAX`).
                unsafe { RawIov::new(v.iov_base.cast(), v.iov_len) }
            })
            .collect();
        Ok(file.read_vectored_at_raw(&mut bufs, off, flags).map(to_i64)?)
    })
}

/// Writes the buffers `iov[0..iovcnt]` in order at `off`, as [`wbc_pwrite`]
/// of their concatenation would (`pwritev`): one call, one pass over the
/// cache. Returns the bytes written or `-errno`: as `wbc_pwrite`, and
/// `-EINVAL` for `iovcnt` negative or above 1024, a NULL `iov` (unless
/// `iovcnt` is 0), a NULL base with a non-zero length, or a total length
/// past `SSIZE_MAX`.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open); `iov` is
/// NULL or valid for reads of `iovcnt` iovecs, each base NULL or valid for
/// reads of its length in initialized bytes.
#[no_mangle]
pub unsafe extern "C" fn wbc_pwritev(
    f: *mut wbc_file,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: u64,
    flags: u32,
) -> i64 {
    guard("wbc_pwritev", || {
        // SAFETY: the caller guarantees `f` is NULL or live and `iov` NULL
        // or valid for `iovcnt` iovecs.
        let (file, list, flags) = unsafe { vectored_args(f, iov, iovcnt, flags, Access::Write) }?;
        let bufs: Vec<IoSlice> = list
            .iter()
            .map(|v| {
                if v.iov_len == 0 {
                    return IoSlice::new(&[]);
                }
                // SAFETY: `iov_base` is non-NULL (checked above) and valid
                // for reads of `iov_len` initialized bytes (caller
                // contract), u8 needs no alignment, the slice lives only
                // for this call, and `iovecs` checked the total (so each
                // length) is within `isize::MAX`.
                IoSlice::new(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) })
            })
            .collect();
        Ok(file.write_vectored_at_with(&bufs, off, flags).map(to_i64)?)
    })
}
