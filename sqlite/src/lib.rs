//! SQLite on wbcache: a VFS that runs SQLite's files through a
//! [`wbcache::Cache`], as a loadable extension or from Rust.
//!
//! - Loadable extension: `libwbcache_sqlite.so`. Loading it (the shell's
//!   `.load`, `sqlite3_load_extension`) registers the VFS `wbcache` for
//!   the life of the process over one process-wide cache configured by the
//!   environment variable `WBCACHE_OPTIONS` (`wbc_cache_open`'s keys);
//!   with `WBCACHE_SQLITE_DEFAULT=1` it also becomes the default VFS. The
//!   SQL function `wbcache_stats()` returns that cache's statistics as
//!   JSON, in the connection that loaded the extension and in every one
//!   opened after it.
//! - Rust: [`register`] a VFS over a cache of your own, for programs that
//!   link SQLite (rusqlite, `libsqlite3-sys`), and
//!   [`register_stats_function`] for `wbcache_stats()` on a connection.
//!
//! One process owns a database at a time (see [`lock`]); inside it, any
//! number of connections share it, WAL included (see [`shm`]).
//!
//! Durability is SQLite's own with `synchronous=FULL` (and NORMAL in WAL
//! mode, minus the last commits): every `xSync` is an fsync of the cache.
//! A crash of the process loses what was written but not synced, as a
//! power loss would with the kernel's cache: with `synchronous=OFF`, treat
//! a killed process like a power cut.

pub mod api;
mod file;
mod function;
pub mod lock;
pub mod shm;
mod state;
mod vfs;

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use libsqlite3_sys as ffi;
use wbcache::{Cache, Config};

use crate::api::SqliteApi;

/// The name the loadable extension registers.
pub const EXTENSION_VFS_NAME: &str = "wbcache";

/// Registers a SQLite VFS named `name` that reads and writes through
/// `cache`, in the SQLite this program links; `make_default` makes it the
/// default VFS (used by connections that name none). It stays registered
/// for the life of the process. Open a database on it with the VFS name
/// (rusqlite: `Connection::open_with_flags_and_vfs(path, flags, name)`) or
/// the URI `file:path?vfs=name`.
///
/// Errors: a VFS of that name already exists (`AlreadyExists`), the name
/// holds a NUL byte (`InvalidInput`), or SQLite refused it.
pub fn register(cache: Arc<Cache>, name: &str, make_default: bool) -> std::io::Result<()> {
    vfs::register(SqliteApi::linked(), cache, name, make_default)
}

/// Registers the SQL function `wbcache_stats()` on the connection `db`
/// of the SQLite this program links: it returns `cache`'s statistics as
/// one JSON object ([`wbcache::Stats::to_json`], the C ABI's
/// `wbc_stats_json`). The connection holds a reference to the cache until
/// it closes. With rusqlite: `unsafe { register_stats_function(conn.handle(),
/// cache.clone()) }`.
///
/// Errors: SQLite refused the function (`Other`, with its result code), or
/// another SQLite of the process registered it first in this library.
///
/// # Safety
/// `db` is an open connection of the SQLite this program links (as
/// rusqlite's `Connection::handle` gives), for the whole call.
pub unsafe fn register_stats_function(db: *mut ffi::sqlite3, cache: Arc<Cache>) -> std::io::Result<()> {
    // SAFETY: the caller guarantees `db` is an open connection of the
    // SQLite this program links, which `SqliteApi::linked` leads to.
    unsafe { function::create(&SqliteApi::linked(), db, cache) }
        .map_err(|rc| std::io::Error::other(format!("SQLite refused wbcache_stats() with result code {rc}")))
}

/// The extension's cache, once its VFS is registered in this process.
static EXTENSION_CACHE: Mutex<Option<Arc<Cache>>> = Mutex::new(None);

/// The extension's cache options and default flag, from the environment.
fn extension_settings() -> Result<(Config, bool), String> {
    let options = std::env::var("WBCACHE_OPTIONS").unwrap_or_default();
    let config = Config::from_options(&options).map_err(|e| format!("WBCACHE_OPTIONS: {e}"))?;
    let make_default = match std::env::var("WBCACHE_SQLITE_DEFAULT").as_deref() {
        Err(_) | Ok("") | Ok("0") => false,
        Ok("1") => true,
        Ok(other) => return Err(format!("WBCACHE_SQLITE_DEFAULT: '{other}' is neither 0 nor 1")),
    };
    Ok((config, make_default))
}

/// The extension's entry point (SQLite derives the name from the file's:
/// `libwbcache_sqlite.so` → `sqlite3_wbcachesqlite_init`): registers the
/// VFS the first time, and `wbcache_stats()` on the loading connection.
///
/// # Safety
/// Called by SQLite's extension loader, with its routine table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_wbcachesqlite_init(
    db: *mut c_void,
    err: *mut *mut c_char,
    routines: *const c_void,
) -> c_int {
    // SAFETY: SQLite passes its routine table.
    let Some(api) = (unsafe { SqliteApi::from_routines(routines) }) else { return ffi::SQLITE_ERROR };
    let fail = |message: String| {
        if !err.is_null() {
            // SAFETY: SQLite passes NULL or a writable pointer for a message
            // it frees with sqlite3_free.
            unsafe { *err = api.malloc_string(&format!("wbcache: {message}")) };
        }
        ffi::SQLITE_ERROR
    };
    let result = std::panic::catch_unwind(|| {
        let cache = extension_cache(&api)?;
        if !db.is_null() {
            // SAFETY: `db` is the connection loading the extension, of the
            // SQLite whose routines `api` holds.
            unsafe { function::create(&api, db.cast(), cache) }
                .map_err(|rc| format!("cannot add wbcache_stats(): SQLite result code {rc}"))?;
        }
        Ok(())
    });
    match result {
        Ok(Ok(())) => ffi::SQLITE_OK_LOAD_PERMANENTLY,
        Ok(Err(message)) => fail(message),
        Err(_) => fail("internal error while loading".to_string()),
    }
}

/// The extension's cache: made, with its VFS registered, by the first
/// load in the process, which also has SQLite run [`auto_init`] for
/// every connection opened from then on.
fn extension_cache(api: &SqliteApi) -> Result<Arc<Cache>, String> {
    let mut loaded = EXTENSION_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(cache) = &*loaded {
        return Ok(cache.clone());
    }
    let (config, make_default) = extension_settings()?;
    let cache = Arc::new(Cache::new(config).map_err(|e| format!("cannot start the cache: {e}"))?);
    vfs::register(*api, cache.clone(), EXTENSION_VFS_NAME, make_default).map_err(|e| e.to_string())?;
    *loaded = Some(cache.clone());
    // SAFETY: `auto_init` has the entry point's signature and stays loaded
    // (the extension is loaded permanently).
    let rc = unsafe { (api.auto_extension)(Some(auto_init)) };
    if rc != ffi::SQLITE_OK {
        return Err(format!("cannot add wbcache_stats() to new connections: SQLite result code {rc}"));
    }
    Ok(cache)
}

/// What SQLite runs for every connection opened after the extension
/// loaded (`sqlite3_auto_extension`): adds `wbcache_stats()` to it. A
/// connection that cannot have it (SQLite out of memory) opens without it
/// rather than fail.
unsafe extern "C" fn auto_init(
    db: *mut ffi::sqlite3,
    _err: *mut *mut c_char,
    routines: *const ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: SQLite passes its routine table to automatic extensions.
    let Some(api) = (unsafe { SqliteApi::from_routines(routines.cast()) }) else { return ffi::SQLITE_OK };
    let _ = std::panic::catch_unwind(|| {
        let cache = EXTENSION_CACHE.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(cache) = cache.filter(|_| !db.is_null()) {
            // SAFETY: `db` is the connection being opened, of that SQLite.
            let _ = unsafe { function::create(&api, db, cache) };
        }
    });
    ffi::SQLITE_OK
}

/// The generic entry point, for loaders asked for it by name.
///
/// # Safety
/// As [`sqlite3_wbcachesqlite_init`].
#[no_mangle]
pub unsafe extern "C" fn sqlite3_extension_init(
    db: *mut c_void,
    err: *mut *mut c_char,
    routines: *const c_void,
) -> c_int {
    // SAFETY: this function's contract is `sqlite3_wbcachesqlite_init`'s
    // (SQLite's loader, with its connection, message slot and routine
    // table); the arguments are passed on unchanged.
    unsafe { sqlite3_wbcachesqlite_init(db, err, routines) }
}
