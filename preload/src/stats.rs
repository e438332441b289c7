//! `wbcache_preload_stats_json`: the one call this library adds instead
//! of interposing. A program that knows it runs under the library (the
//! bench's `wbcache-preload` engine finds it with `dlsym`) asks for the
//! process's cache statistics, as the C ABI's `wbc_stats_json` gives
//! them. Programs that do not know of it never call it.
//!
//! Snapshot only: the statistics are read under the state's cache lock
//! and copied out; nothing is kept or changed.
//!
//! `WBCACHE_STATS=FILE` (`wbcache run --stats FILE`) appends them to FILE
//! as one line when the process's cache closes at exit, after the last
//! write-back: one line per process that cached anything, so a program
//! that starts others leaves one line each.

use libc::{c_char, size_t, ssize_t};

use crate::{errno, guard, real, state};

/// At exit, before the cache closes, in a process that opened a managed
/// file: its dirty data written back, then its statistics appended to
/// the file `WBCACHE_STATS` names, if any (a failure is complained about, never
/// fatal). Written through the C library's own calls: the file is never
/// the cache's, even under a managed directory.
pub fn record_at_exit(cache: &wbcache::Cache) {
    let Some(path) = std::env::var_os("WBCACHE_STATS").filter(|p| !p.is_empty()) else { return };
    // The close that follows would write back the rest: done first, so the
    // figures count it.
    if let Err(e) = cache.sync_all() {
        state::complain(&format!("writing back at exit failed: {e}"));
    }
    let mut line = cache.stats().to_json();
    line.push('\n');
    let Ok(c_path) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())) else {
        return state::complain("WBCACHE_STATS: a path with a NUL byte");
    };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the descriptor is ours, closed once.
    unsafe {
        let fd = real::open(c_path.as_ptr(), flags, 0o644);
        if fd < 0 || real::write(fd, line.as_ptr().cast(), line.len()) != line.len() as isize {
            let e = std::io::Error::last_os_error();
            state::complain(&format!("WBCACHE_STATS: {}: {e}", path.to_string_lossy()));
        }
        if fd >= 0 {
            real::close(fd);
        }
    }
}

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
