//! The pointers a C caller hands over and gets back: the two opaque
//! handles ([`wbc_cache`], [`wbc_file`]), checked borrows of what they box
//! and of path strings (NULL is `EINVAL`, never dereferenced), and the two
//! ways a result goes back out (a byte count as `i64`, text copied into the
//! caller's buffer).
//!
//! A handle owns its boxed `Cache` or `File`: `wbc_cache_open`/`wbc_open`
//! make the box and `wbc_cache_close`/`wbc_close` free it, and only those
//! four take or give up ownership. The borrows made here last for one call,
//! which is as long as the caller lends the memory.

use super::failure::{einval, Failure};
use std::ffi::{c_char, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use wbcache::Cache;
use wbcache::File;

/// Opaque C handle for a [`Cache`].
#[allow(non_camel_case_types)]
pub struct wbc_cache {
    pub(super) cache: Cache,
}

/// Opaque C handle for a [`File`].
#[allow(non_camel_case_types)]
pub struct wbc_file {
    pub(super) file: File,
}

/// The handle behind `c`, or `EINVAL` for NULL.
///
/// # Safety
/// `c` is NULL or a live pointer from
/// [`wbc_cache_open`](super::wbc_cache_open) not yet passed to
/// [`wbc_cache_close`](super::wbc_cache_close).
pub(super) unsafe fn cache_ref<'a>(c: *const wbc_cache) -> Result<&'a Cache, Failure> {
    // SAFETY: the caller guarantees `c` is NULL or points to a live wbc_cache
    // box, which nothing mutates through a shared borrow.
    unsafe { c.as_ref() }.map(|h| &h.cache).ok_or_else(|| einval("NULL cache handle"))
}

/// The handle behind `f`, or `EINVAL` for NULL.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`](super::wbc_open) not yet
/// passed to [`wbc_close`](super::wbc_close).
pub(super) unsafe fn file_ref<'a>(f: *const wbc_file) -> Result<&'a File, Failure> {
    // SAFETY: the caller guarantees `f` is NULL or points to a live wbc_file
    // box (from `wbc_open`, not yet closed), which nothing mutates through a
    // shared borrow.
    unsafe { f.as_ref() }.map(|h| &h.file).ok_or_else(|| einval("NULL file handle"))
}

pub(super) fn to_i64(n: usize) -> i64 {
    // Slices never exceed isize::MAX bytes.
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Copies `text` and a NUL into `buf` if `len` leaves room for both;
/// returns `text.len()` either way.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
pub(super) unsafe fn copy_out(text: &str, buf: *mut c_char, len: usize) -> i64 {
    let n = text.len();
    if !buf.is_null() && len > n {
        // SAFETY: `buf` is valid for `len > n` bytes, so for `n + 1`; a Rust
        // string cannot overlap memory the caller lent us.
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    to_i64(n)
}

/// The path argument of a C call: `-EINVAL` for NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string that outlives the borrow.
pub(super) unsafe fn c_path<'a>(path: *const c_char) -> Result<&'a Path, Failure> {
    if path.is_null() {
        return Err(einval("NULL path"));
    }
    // SAFETY: non-NULL, and the caller guarantees NUL termination.
    Ok(Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes())))
}
