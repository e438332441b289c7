//! The `wbcache-preload` engine's window on the cache it runs under: the
//! worker runs under `libwbcache_preload.so`, whose cache serves the
//! kernel engine's calls, and asks it for its statistics through the one
//! call the library adds (`wbcache_preload_stats_json`, found with
//! `dlsym`). Without the library loaded the engine refuses to run: its
//! calls would go to the kernel and measure the kernel under its name.

use std::ffi::CStr;
use std::io;

use super::unsupported::unsupported;

type StatsFn = unsafe extern "C" fn(*mut libc::c_char, libc::size_t) -> libc::ssize_t;

const STATS_SYMBOL: &CStr = c"wbcache_preload_stats_json";

fn stats_fn() -> Option<StatsFn> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks
    // the symbol up.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, STATS_SYMBOL.as_ptr()) };
    // SAFETY: the library defines the symbol with exactly `StatsFn`'s
    // signature.
    (!sym.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, StatsFn>(sym) })
}

/// Fails unless this process runs under the preload library.
pub(super) fn check_loaded() -> io::Result<()> {
    match stats_fn() {
        Some(_) => Ok(()),
        None => Err(unsupported("libwbcache_preload.so is not loaded in this worker".into())),
    }
}

/// The preloaded cache's statistics, once it was built (on the first
/// call that named a managed path).
pub(super) fn stats() -> Option<serde_json::Value> {
    let f = stats_fn()?;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
        let n = usize::try_from(n).ok()?;
        if n < buf.len() {
            return serde_json::from_slice(&buf[..n]).ok();
        }
        buf.resize(n + 1, 0);
    }
}

/// One numeric statistic (0 before the cache was built).
pub(super) fn stat(key: &str) -> u64 {
    stats().and_then(|v| v[key].as_u64()).unwrap_or(0)
}
