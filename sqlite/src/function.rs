//! The SQL function `wbcache_stats()`: the statistics of a cache under a
//! VFS of this library, as the JSON object `wbcache::Stats::to_json` makes
//! (the C ABI's `wbc_stats_json`), e.g. `SELECT wbcache_stats();` or
//! `SELECT json_extract(wbcache_stats(), '$.written_bytes_total');`.
//!
//! Each connection that has it holds its own reference to the cache (the
//! function's data), dropped when SQLite deletes the function (the
//! connection closes). The SQLite functions it calls come from one SQLite,
//! the first that registers it in this copy of the library: a program
//! that links SQLite, or the SQLite that loaded the extension.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use libsqlite3_sys as ffi;
use wbcache::Cache;

use crate::api::SqliteApi;

/// The SQLite whose functions `x_stats` calls (one per copy of this
/// library; [`create`] refuses another).
static API: OnceLock<SqliteApi> = OnceLock::new();

/// Registers `wbcache_stats()` on the connection `db`, over `cache`,
/// through `api` (the SQLite that `db` belongs to). An error is SQLite's
/// result code.
///
/// # Safety
/// `db` is an open connection of the SQLite `api` leads to.
pub unsafe fn create(api: &SqliteApi, db: *mut ffi::sqlite3, cache: Arc<Cache>) -> Result<(), c_int> {
    let first = API.get_or_init(|| *api);
    if first.result_text as usize != api.result_text as usize {
        // Another SQLite in the process: its contexts are not ours to call.
        return Err(ffi::SQLITE_MISUSE);
    }
    let data = Box::into_raw(Box::new(cache)).cast::<c_void>();
    // SAFETY: `db` is open (the caller's contract); the name is
    // NUL-terminated; SQLite hands `data` to `drop_cache` once, when the
    // function is deleted or if this call fails.
    let rc = unsafe {
        (api.create_function_v2)(
            db,
            c"wbcache_stats".as_ptr(),
            0,
            ffi::SQLITE_UTF8,
            data,
            Some(x_stats),
            None,
            None,
            Some(drop_cache),
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// The function's body: the stats JSON of the connection's cache.
unsafe extern "C" fn x_stats(ctx: *mut ffi::sqlite3_context, _argc: c_int, _argv: *mut *mut ffi::sqlite3_value) {
    let api = API.get().expect("set by create, which registered this function");
    // SAFETY: the function's data is the `Arc<Cache>` `create` leaked,
    // alive until `drop_cache`, which SQLite never runs during a call.
    let cache = unsafe { &*(api.user_data)(ctx).cast::<Arc<Cache>>() };
    let json = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cache.stats().to_json()));
    // SAFETY: `ctx` is the call's context; SQLite copies the text
    // (`SQLITE_TRANSIENT`) before this returns; the messages are
    // NUL-terminated (length -1).
    unsafe {
        match json.as_ref().map(|json| (json, c_int::try_from(json.len()))) {
            Ok((json, Ok(len))) => (api.result_text)(ctx, json.as_ptr().cast(), len, ffi::SQLITE_TRANSIENT()),
            Ok((_, Err(_))) => (api.result_error)(ctx, c"wbcache_stats: the statistics are too long".as_ptr(), -1),
            Err(_) => (api.result_error)(ctx, c"wbcache_stats: internal error".as_ptr(), -1),
        }
    }
}

/// Drops the function's reference to the cache.
unsafe extern "C" fn drop_cache(data: *mut c_void) {
    // SAFETY: `data` is the Box `create` leaked; SQLite frees it once.
    drop(unsafe { Box::from_raw(data.cast::<Arc<Cache>>()) });
}
