//! SQLite on wbcache: a VFS that runs SQLite's files through a
//! [`wbcache::Cache`], as a loadable extension or from Rust.
//!
//! - Loadable extension: `libwbcache_sqlite.so`. Loading it (the shell's
//!   `.load`, `sqlite3_load_extension`) registers the VFS `wbcache` for
//!   the life of the process over one process-wide cache configured by the
//!   environment variable `WBCACHE_OPTIONS` (`wbc_cache_open`'s keys);
//!   with `WBCACHE_SQLITE_DEFAULT=1` it also becomes the default VFS.
//! - Rust: [`register`] a VFS over a cache of your own, for programs that
//!   link SQLite (rusqlite, `libsqlite3-sys`).
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

/// Whether the extension registered its VFS in this process already.
static EXTENSION_LOADED: Mutex<bool> = Mutex::new(false);

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
/// `libwbcache_sqlite.so` → `sqlite3_wbcachesqlite_init`).
///
/// # Safety
/// Called by SQLite's extension loader, with its routine table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_wbcachesqlite_init(
    _db: *mut c_void,
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
        let mut loaded = EXTENSION_LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if *loaded {
            return Ok(());
        }
        let (config, make_default) = extension_settings()?;
        let cache = Cache::new(config).map_err(|e| format!("cannot start the cache: {e}"))?;
        vfs::register(api, Arc::new(cache), EXTENSION_VFS_NAME, make_default).map_err(|e| e.to_string())?;
        *loaded = true;
        Ok(())
    });
    match result {
        Ok(Ok(())) => ffi::SQLITE_OK_LOAD_PERMANENTLY,
        Ok(Err(message)) => fail(message),
        Err(_) => fail("internal error while loading".to_string()),
    }
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
    // SAFETY: same contract.
    unsafe { sqlite3_wbcachesqlite_init(db, err, routines) }
}
