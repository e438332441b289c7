//! What the library says in text: its version, the statistics as JSON and
//! the message of the calling thread's last failure. The last two copy into
//! the caller's buffer only when the text and its NUL fit, and return the
//! text's length either way, so a caller can size its buffer and ask again.

use super::failure::{guard, LAST_ERROR};
use super::handles::{cache_ref, copy_out, wbc_cache};
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The library's version, NUL-terminated: the crate's version.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library's version ("0.1.0"), a static NUL-terminated string the
/// caller must not free or modify: for checking at run time which library
/// the program loaded.
#[no_mangle]
pub extern "C" fn wbc_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// The cache's statistics as one JSON object. If `buf` is not NULL and `len`
/// exceeds the JSON's length, copies the JSON and a NUL into `buf`;
/// otherwise writes nothing. Returns the JSON's length without the NUL (so
/// a return value `>= len` means "retry with return + 1 bytes"), or
/// `-EINVAL` for a NULL cache.
///
/// # Safety
/// `c` is NULL or a live pointer from
/// [`wbc_cache_open`](super::wbc_cache_open); `buf` is NULL or valid for
/// writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn wbc_stats_json(c: *mut wbc_cache, buf: *mut c_char, len: usize) -> i64 {
    guard("wbc_stats_json", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        let mut stats = cache.stats();
        // A C caller has only its options string, which leaves derived
        // values (dirty thresholds) implicit: the JSON says what is in use.
        stats.config.get_or_insert_with(|| cache.config().clone());
        let json = stats.to_json();
        // SAFETY: the caller guarantees `buf` is NULL or valid for `len`.
        Ok(unsafe { copy_out(&json, buf, len) })
    })
}

/// The message of the last failed `wbc_*` call on the calling thread (empty
/// if none; successful calls leave it alone), with the same buffer contract
/// as [`wbc_stats_json`]: copied with a NUL if it fits, and its length
/// returned either way.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn wbc_last_error(buf: *mut c_char, len: usize) -> i64 {
    match catch_unwind(AssertUnwindSafe(|| {
        LAST_ERROR.try_with(|slot| match slot.try_borrow() {
            // SAFETY: the caller guarantees `buf` is NULL or valid for `len`.
            Ok(message) => unsafe { copy_out(&message, buf, len) },
            Err(_) => 0,
        })
    })) {
        Ok(Ok(n)) => n,
        _ => -i64::from(libc::EIO),
    }
}
