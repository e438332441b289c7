//! The `sqlite3_vfs` object: opening, deleting and naming files through
//! one cache, and registering with SQLite.
//!
//! A registered VFS lives for the rest of the process (SQLite keeps
//! pointers to it in every connection), so its [`VfsState`] and
//! `sqlite3_vfs` are leaked on purpose. The state (`state.rs`) owns a
//! reference to the cache and the table of databases open in this process
//! (each a [`crate::lock::DbShared`], shared by the connections to it).
//! What the cache does not
//! do (randomness, sleeping, the clock, loading libraries) goes to the VFS
//! that was the default when this one registered (SQLite's `unix`).
//!
//! Files without a name (temporary databases and journals) are created in
//! the usual temporary directory and unlinked at once through the cache,
//! so their data is dropped, never written, once they close. At exit the
//! process writes back what its caches hold (an `atexit` hook): SQLite
//! closes files without syncing when `synchronous` is OFF.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libsqlite3_sys as ffi;
use wbcache::{Cache, OpenOptions};

use crate::api::SqliteApi;
use crate::file::{FileState, VfsFile, IO_METHODS};
use crate::lock::Level;
use crate::shm::ShmHeld;
use crate::state::{guard, nix_access, stat_quietly, sync_dir, VfsState};

/// `SQLITE_OPEN_SUPER_JOURNAL` (called `MASTER_JOURNAL` in the bindings
/// of older headers).
const SQLITE_OPEN_SUPER_JOURNAL: c_int = 0x4000;

/// The longest path SQLite may ask for (`PATH_MAX`).
const MAX_PATHNAME: c_int = 4096;

/// Every VFS registered by this library in this process.
static REGISTERED: Mutex<Vec<&'static VfsState>> = Mutex::new(Vec::new());

/// Registers a VFS named `name` over `cache` with the SQLite `api` leads
/// to; `make_default` makes it the default VFS.
pub fn register(api: SqliteApi, cache: Arc<Cache>, name: &str, make_default: bool) -> std::io::Result<()> {
    let c_name = CString::new(name)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "VFS name contains a NUL byte"))?;
    let mut registered = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: `vfs_find` is SQLite's; it takes a NUL-terminated name.
    if !unsafe { (api.vfs_find)(c_name.as_ptr()) }.is_null() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("a SQLite VFS named '{name}' is already registered"),
        ));
    }
    // SAFETY: `vfs_find` is SQLite's; `c"unix"` is a NUL-terminated static.
    let mut os = unsafe { (api.vfs_find)(c"unix".as_ptr()) };
    if os.is_null() {
        // SAFETY: `vfs_find` is SQLite's, and takes NULL to ask for the
        // default VFS.
        os = unsafe { (api.vfs_find)(std::ptr::null()) };
    }
    if os.is_null() {
        return Err(std::io::Error::other("SQLite has no default VFS to take the clock and randomness from"));
    }
    let state: &'static VfsState = Box::leak(Box::new(VfsState::new(cache, c_name, api, os)));
    let vfs: &'static mut ffi::sqlite3_vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
        iVersion: 2,
        szOsFile: std::mem::size_of::<VfsFile>() as c_int,
        mxPathname: MAX_PATHNAME,
        pNext: std::ptr::null_mut(),
        zName: state.name.as_ptr(),
        pAppData: (state as *const VfsState).cast_mut().cast(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    }));
    // SAFETY: `vfs` is a complete, leaked (never freed) VFS object.
    let rc = unsafe { (api.vfs_register)(vfs, c_int::from(make_default)) };
    if rc != ffi::SQLITE_OK {
        return Err(std::io::Error::other(format!("sqlite3_vfs_register failed with code {rc}")));
    }
    if registered.is_empty() {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(write_back_at_exit) };
    }
    registered.push(state);
    Ok(())
}

/// Writes back every registered VFS's cache when the process exits.
extern "C" fn write_back_at_exit() {
    let registered = REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for state in registered {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.cache.sync_all()));
    }
}

/// The VFS state behind `vfs`.
///
/// # Safety
/// `vfs` is a VFS object [`register`] made.
unsafe fn vfs_state(vfs: *mut ffi::sqlite3_vfs) -> &'static VfsState {
    // SAFETY: `pAppData` is the leaked `VfsState`, per the contract.
    unsafe { &*(*vfs).pAppData.cast::<VfsState>() }
}

/// A path argument from SQLite.
///
/// # Safety
/// `name` is NULL or NUL-terminated.
unsafe fn path_of(name: *const c_char) -> Option<PathBuf> {
    if name.is_null() {
        return None;
    }
    // SAFETY: `name` is non-NULL (checked) and the caller guarantees it is
    // NUL-terminated; the bytes are copied before returning.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

/// [`open_file`] for a main database: the file must exist before its lock
/// descriptor opens; the cached handle waits for the cross-process lock.
fn open_main_db(
    state: &'static VfsState,
    mut st: FileState,
    mut flags: c_int,
    mode: u32,
    exclusive: bool,
) -> Result<(FileState, c_int), c_int> {
    let path = st.path.clone();
    if flags & ffi::SQLITE_OPEN_CREATE != 0 {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true).create(true).create_new(exclusive);
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, mode);
        if let Err(e) = o.open(&path) {
            let writable_denied = matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM));
            if !(writable_denied && path.exists()) {
                return Err(ffi::SQLITE_CANTOPEN);
            }
        }
    } else if !path.exists() {
        return Err(ffi::SQLITE_CANTOPEN);
    }
    let db = state.db_for(&path).map_err(|_| ffi::SQLITE_CANTOPEN)?;
    if !st.read_only && !nix_access(&path, libc::W_OK) {
        // As the unix VFS does: a database that cannot be written is
        // opened read-only, and SQLite is told so.
        st.read_only = true;
        flags = (flags & !(ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE)) | ffi::SQLITE_OPEN_READONLY;
    }
    st.db = Some(db);
    Ok((st, flags))
}

/// Permission bits for a new journal or WAL: those of its database, as the
/// unix VFS gives them, else 0644.
fn create_mode(path: &Path, kind_flags: c_int) -> u32 {
    let db_path = |suffix: &str| {
        let name = path.as_os_str().as_bytes();
        name.strip_suffix(suffix.as_bytes()).map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(b)))
    };
    let db = if kind_flags & ffi::SQLITE_OPEN_WAL != 0 {
        db_path("-wal")
    } else if kind_flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
        db_path("-journal")
    } else {
        None
    };
    db.and_then(|p| stat_quietly(&p).ok()).map(|st| st.mode & 0o777).unwrap_or(0o644)
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands `szOsFile` writable bytes; until the methods are
    // set, SQLite will not call xClose on them.
    let vf = unsafe { &mut *file.cast::<VfsFile>() };
    vf.base.pMethods = std::ptr::null();
    vf.state = std::ptr::null_mut();
    // SAFETY: `vfs` is one `register` made.
    let state = unsafe { vfs_state(vfs) };
    // As the unix VFS: `psow=0` in a database's URI turns powersafe
    // overwrite off.
    let psow = flags & ffi::SQLITE_OPEN_MAIN_DB == 0
        // SAFETY: a main database's name is followed by its URI parameters.
        || unsafe { uri_boolean(name, "psow") }.unwrap_or(true);
    // SAFETY: SQLite passes NULL or a NUL-terminated name.
    let name = unsafe { path_of(name) };
    guard(ffi::SQLITE_CANTOPEN, || {
        let (mut st, flags) = match open_file(state, name, flags) {
            Ok(opened) => opened,
            Err(rc) => return rc,
        };
        st.powersafe_overwrite = psow;
        vf.state = Box::into_raw(Box::new(st));
        vf.base.pMethods = &IO_METHODS;
        if !out_flags.is_null() {
            // SAFETY: SQLite passes NULL or a writable int.
            unsafe { *out_flags = flags };
        }
        ffi::SQLITE_OK
    })
}

/// The boolean URI parameter `key` of a database name, if given (SQLite's
/// spellings: 1/yes/true/on, 0/no/false/off).
///
/// # Safety
/// `name` is NULL or a main database's name as SQLite passes it to `xOpen`:
/// the path, then `key\0value\0` pairs, then an empty key.
unsafe fn uri_boolean(name: *const c_char, key: &str) -> Option<bool> {
    if name.is_null() {
        return None;
    }
    // SAFETY: per the contract, each step stays inside the parameter block.
    unsafe {
        let mut p = name.add(CStr::from_ptr(name).to_bytes().len() + 1);
        loop {
            let k = CStr::from_ptr(p).to_bytes();
            if k.is_empty() {
                return None;
            }
            p = p.add(k.len() + 1);
            let v = CStr::from_ptr(p).to_bytes();
            p = p.add(v.len() + 1);
            if k == key.as_bytes() {
                return match v.to_ascii_lowercase().as_slice() {
                    b"1" | b"yes" | b"true" | b"on" => Some(true),
                    b"0" | b"no" | b"false" | b"off" => Some(false),
                    _ => None,
                };
            }
        }
    }
}

/// `xOpen`'s work: the file's state and the flags it was opened with.
fn open_file(state: &'static VfsState, name: Option<PathBuf>, mut flags: c_int) -> Result<(FileState, c_int), c_int> {
    let main_db = flags & ffi::SQLITE_OPEN_MAIN_DB != 0;
    let create = flags & ffi::SQLITE_OPEN_CREATE != 0;
    let exclusive = flags & ffi::SQLITE_OPEN_EXCLUSIVE != 0;
    let read_only = flags & ffi::SQLITE_OPEN_READWRITE == 0;
    let delete_on_close = flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0;
    let is_new_journal =
        create && flags & (ffi::SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL | ffi::SQLITE_OPEN_WAL) != 0;
    let (path, unnamed) = match name {
        Some(p) => (p, false),
        None => (state.temp_path(), true),
    };
    let mode = create_mode(&path, flags);
    let mut st = FileState {
        vfs: state,
        path: path.clone(),
        read_only,
        file: None,
        db: None,
        level: Level::None,
        shm_held: ShmHeld::default(),
        shm_mapped: false,
        dir_to_sync: None,
        persist_wal: false,
        powersafe_overwrite: true,
        chunk_bytes: 0,
    };
    if main_db {
        return open_main_db(state, st, flags, mode, exclusive);
    }
    let options = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .create(create || unnamed)
        .create_new(exclusive || unnamed)
        .mode(mode);
    let opened = match state.cache.open(&path, &options) {
        Err(e) if !read_only && !create && wbcache::errno_of(&e) == libc::EACCES => {
            st.read_only = true;
            flags = (flags & !ffi::SQLITE_OPEN_READWRITE) | ffi::SQLITE_OPEN_READONLY;
            state.cache.open(&path, &OpenOptions::new().read(true))
        }
        other => other,
    };
    st.file = Some(opened.map_err(|_| ffi::SQLITE_CANTOPEN)?);
    if unnamed || delete_on_close {
        // Unlinked now, as the unix VFS does: the data lives as long as the
        // handle, and is dropped unwritten when it closes.
        state.cache.remove_file(&path).map_err(|_| ffi::SQLITE_CANTOPEN)?;
    } else if is_new_journal {
        st.dir_to_sync =
            path.parent().map(|d| if d.as_os_str().is_empty() { PathBuf::from(".") } else { d.to_path_buf() });
    }
    Ok((st, flags))
}

unsafe extern "C" fn x_delete(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir_too: c_int) -> c_int {
    // SAFETY: `vfs` is one `register` made.
    let state = unsafe { vfs_state(vfs) };
    // SAFETY: SQLite passes a NUL-terminated name.
    let Some(path) = (unsafe { path_of(name) }) else { return ffi::SQLITE_IOERR_DELETE };
    guard(ffi::SQLITE_IOERR_DELETE, || {
        if let Err(e) = state.cache.remove_file(&path) {
            return if wbcache::errno_of(&e) == libc::ENOENT {
                ffi::SQLITE_IOERR_DELETE_NOENT
            } else {
                ffi::SQLITE_IOERR_DELETE
            };
        }
        if sync_dir_too != 0 {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if sync_dir(dir).is_err() {
                return ffi::SQLITE_IOERR_DIR_FSYNC;
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_access(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, flags: c_int, out: *mut c_int) -> c_int {
    // SAFETY: `vfs` is one `register` made.
    let state = unsafe { vfs_state(vfs) };
    // SAFETY: SQLite passes a NUL-terminated name.
    let Some(path) = (unsafe { path_of(name) }) else { return ffi::SQLITE_IOERR_ACCESS };
    guard(ffi::SQLITE_IOERR_ACCESS, || {
        let yes = match flags {
            ffi::SQLITE_ACCESS_READWRITE => nix_access(&path, libc::R_OK | libc::W_OK),
            // SQLITE_ACCESS_EXISTS (and the unused ACCESS_READ): as the unix
            // VFS, an empty regular file does not count (a journal left
            // empty is no journal). Its size is the cache's when it caches
            // the file (written data may not have reached the disk yet).
            _ => match stat_quietly(&path) {
                Err(_) => false,
                Ok(st) if st.mode & libc::S_IFMT != libc::S_IFREG || st.size > 0 => true,
                Ok(_) => state
                    .cache
                    .open(&path, &OpenOptions::new().read(true))
                    .and_then(|f| f.len())
                    .is_ok_and(|len| len > 0),
            },
        };
        // SAFETY: SQLite passes a writable int.
        unsafe { *out = c_int::from(yes) };
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    out_len: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: SQLite passes a NUL-terminated name.
    let Some(path) = (unsafe { path_of(name) }) else { return ffi::SQLITE_CANTOPEN };
    guard(ffi::SQLITE_CANTOPEN, || {
        let absolute = if path.is_absolute() {
            path
        } else {
            match std::env::current_dir() {
                Ok(cwd) => cwd.join(path),
                Err(_) => return ffi::SQLITE_CANTOPEN,
            }
        };
        // The journal and WAL go beside the database's real directory.
        let resolved = match (absolute.parent(), absolute.file_name()) {
            (Some(dir), Some(file)) => std::fs::canonicalize(dir).map(|d| d.join(file)).unwrap_or(absolute),
            _ => absolute,
        };
        let bytes = resolved.as_os_str().as_bytes();
        let Ok(room) = usize::try_from(out_len) else { return ffi::SQLITE_CANTOPEN };
        if bytes.len() + 1 > room {
            return ffi::SQLITE_CANTOPEN;
        }
        // SAFETY: `out` holds `out_len` bytes; `bytes.len() + 1` fit.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len());
            *out.add(bytes.len()) = 0;
        }
        ffi::SQLITE_OK
    })
}

// What the cache has no part in goes to the OS VFS.

/// The OS VFS of `vfs`.
///
/// # Safety
/// `vfs` is one [`register`] made.
unsafe fn os(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: the caller guarantees `vfs` is one `register` made, as
    // `vfs_state` requires.
    unsafe { vfs_state(vfs) }.os()
}

unsafe extern "C" fn x_dl_open(vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    // SAFETY: the OS VFS is SQLite's and has this method.
    unsafe { os(vfs).as_ref().and_then(|o| o.xDlOpen).map_or(std::ptr::null_mut(), |f| f(os(vfs), name)) }
}

unsafe extern "C" fn x_dl_error(vfs: *mut ffi::sqlite3_vfs, len: c_int, out: *mut c_char) {
    // SAFETY: SQLite calls this with the VFS `register` made, so `os` is
    // sound; the OS VFS is SQLite's static object, and its method gets
    // SQLite's own `len` and `out` (a buffer of `len` bytes), unchanged.
    unsafe {
        if let Some(f) = os(vfs).as_ref().and_then(|o| o.xDlError) {
            f(os(vfs), len, out)
        }
    }
}

unsafe extern "C" fn x_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    handle: *mut c_void,
    symbol: *const c_char,
) -> Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)> {
    // SAFETY: SQLite calls this with the VFS `register` made, so `os` is
    // sound; the OS VFS is SQLite's static object, and its method gets the
    // handle its xDlOpen returned and SQLite's NUL-terminated symbol.
    unsafe { os(vfs).as_ref().and_then(|o| o.xDlSym).and_then(|f| f(os(vfs), handle, symbol)) }
}

unsafe extern "C" fn x_dl_close(vfs: *mut ffi::sqlite3_vfs, handle: *mut c_void) {
    // SAFETY: SQLite calls this with the VFS `register` made, so `os` is
    // sound; the OS VFS is SQLite's static object, and its method gets the
    // handle its xDlOpen returned, which SQLite closes once.
    unsafe {
        if let Some(f) = os(vfs).as_ref().and_then(|o| o.xDlClose) {
            f(os(vfs), handle)
        }
    }
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, len: c_int, out: *mut c_char) -> c_int {
    // SAFETY: the OS VFS is SQLite's and has this method.
    unsafe { os(vfs).as_ref().and_then(|o| o.xRandomness).map_or(0, |f| f(os(vfs), len, out)) }
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    // SAFETY: the OS VFS is SQLite's and has this method.
    unsafe { os(vfs).as_ref().and_then(|o| o.xSleep).map_or(0, |f| f(os(vfs), micros)) }
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: SQLite calls this with the VFS `register` made, so `os` is
    // sound; the OS VFS is SQLite's static object, and its method gets
    // SQLite's own `out`, a writable double.
    unsafe { os(vfs).as_ref().and_then(|o| o.xCurrentTime).map_or(ffi::SQLITE_ERROR, |f| f(os(vfs), out)) }
}

unsafe extern "C" fn x_get_last_error(vfs: *mut ffi::sqlite3_vfs, len: c_int, out: *mut c_char) -> c_int {
    // SAFETY: SQLite calls this with the VFS `register` made, so `os` is
    // sound; the OS VFS is SQLite's static object, and its method gets
    // SQLite's own `len` and `out` (a buffer of `len` bytes), unchanged.
    unsafe { os(vfs).as_ref().and_then(|o| o.xGetLastError).map_or(0, |f| f(os(vfs), len, out)) }
}

unsafe extern "C" fn x_current_time_int64(vfs: *mut ffi::sqlite3_vfs, out: *mut i64) -> c_int {
    // SAFETY: SQLite calls this with the VFS `register` made, so `os` is
    // sound; the OS VFS is SQLite's static object, whose
    // `xCurrentTimeInt64` field exists from version 2 on (checked), and its
    // method gets SQLite's own `out`, a writable sqlite3_int64.
    unsafe {
        let o = os(vfs);
        match o.as_ref() {
            Some(v) if v.iVersion >= 2 => v.xCurrentTimeInt64.map_or(ffi::SQLITE_ERROR, |f| f(o, out)),
            _ => ffi::SQLITE_ERROR,
        }
    }
}
