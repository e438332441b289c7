//! `wbcache_preload_stats_json`: the one call this library adds instead
//! of interposing. A program that knows it runs under the library (the
//! bench's `wbcache-preload` engine finds it with `dlsym`) asks for the
//! process's cache statistics, as the C ABI's `wbc_stats_json` gives
//! them. Programs that do not know of it never call it.
//!
//! Snapshot only: the statistics are read under the state's cache lock
//! and copied out; nothing is kept or changed.

use libc::{c_char, size_t, ssize_t};

use crate::{errno, guard, state};

/// Writes the statistics' JSON to `buf` (at most `len - 1` bytes and a
/// NUL, as `snprintf` does) and returns the JSON's full length; `-1` with
/// `ENOENT` before the cache was built (no managed path named yet) or
/// after it closed at exit.
///
/// # Safety
/// `buf` must be writable for `len` bytes (or `len` 0).
#[no_mangle]
pub unsafe extern "C" fn wbcache_preload_stats_json(buf: *mut c_char, len: size_t) -> ssize_t {
    let Some(_inside) = guard::enter() else { return errno::fail_with::<ssize_t>(libc::ENOENT) };
    let json = match state::built().map(|s| s.with_cache(|cache| Ok(cache.stats().to_json()))) {
        Some(Ok(json)) => json,
        _ => return errno::fail_with::<ssize_t>(libc::ENOENT),
    };
    if len > 0 && !buf.is_null() {
        let n = json.len().min(len - 1);
        // SAFETY: the caller gave `len` writable bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(json.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    json.len() as ssize_t
}
