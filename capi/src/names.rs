//! Calls on names through a cache: unlink and rename, which keep the cache
//! coherent with the change (a file losing its last name loses its cached
//! data unwritten; a renamed file's data follows it), and forget, which
//! writes back a file no handle has open and drops its cached state, so the
//! next open reads it afresh.

use super::failure::{guard_int, Failure};
use super::handles::{c_path, cache_ref, wbc_cache};
use std::ffi::{c_char, c_int};

/// Removes `path` as unlink(2) does, with its cached data when that was
/// the file's last name (dropped unwritten; open handles keep working
/// until closed, then it goes). See
/// [`Cache::remove_file`](wbcache::Cache::remove_file). Returns 0 or
/// `-errno`: unlink(2)'s (`-ENOENT`, `-EISDIR`, `-EACCES`, ...), `-EINVAL`
/// for NULL arguments, `-EBADF` after
/// [`wbc_cache_close`](super::wbc_cache_close).
///
/// # Safety
/// `c` is NULL or a live pointer from
/// [`wbc_cache_open`](super::wbc_cache_open); `path` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn wbc_unlink(c: *mut wbc_cache, path: *const c_char) -> c_int {
    guard_int("wbc_unlink", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees `path` is NULL or NUL-terminated.
        let path = unsafe { c_path(path) }?;
        cache.remove_file(path).map_err(|e| Failure::on_path(path, e))
    })
}

/// Makes the cache forget `path` if it is cached and no handle has it open:
/// writes it back, syncs it, and drops its cached data, so the next open reads
/// it afresh. See [`Cache::forget`](wbcache::Cache::forget). Returns 1 if
/// forgotten, 0 if not cached, missing or open, or `-errno` (a failed
/// writeback or sync, `-EINVAL` for NULL arguments, `-EBADF` after
/// [`wbc_cache_close`](super::wbc_cache_close)).
///
/// # Safety
/// As [`wbc_unlink`].
#[no_mangle]
pub unsafe extern "C" fn wbc_forget(c: *mut wbc_cache, path: *const c_char) -> c_int {
    let mut forgotten = false;
    let rc = guard_int("wbc_forget", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees `path` is NULL or NUL-terminated.
        let path = unsafe { c_path(path) }?;
        forgotten = cache.forget(path).map_err(|e| Failure::on_path(path, e))?;
        Ok(())
    });
    if rc == 0 {
        c_int::from(forgotten)
    } else {
        rc
    }
}

/// Renames `from` to `to` as rename(2) does, replacing `to`; the cached data
/// follows the file, and a replaced `to` whose last name that was loses its
/// cached data unwritten (see [`Cache::rename`](wbcache::Cache::rename)).
/// Returns 0 or `-errno`: rename(2)'s (`-ENOENT`, `-EISDIR`, `-EXDEV`, ...),
/// `-EINVAL` for NULL arguments, `-EBADF` after
/// [`wbc_cache_close`](super::wbc_cache_close).
///
/// # Safety
/// `c` is NULL or a live pointer from
/// [`wbc_cache_open`](super::wbc_cache_open); `from` and `to` are NULL or
/// NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn wbc_rename(c: *mut wbc_cache, from: *const c_char, to: *const c_char) -> c_int {
    guard_int("wbc_rename", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees both are NULL or NUL-terminated.
        let (from, to) = unsafe { (c_path(from)?, c_path(to)?) };
        cache.rename(from, to).map_err(|e| Failure::on_path(from, e))
    })
}
