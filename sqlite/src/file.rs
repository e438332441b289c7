//! One open SQLite file (`sqlite3_file`) on the cache, and its I/O methods.
//!
//! SQLite allocates `szOsFile` bytes per open file and hands them to
//! `xOpen`; a [`VfsFile`] lives there: SQLite's header and a pointer to the
//! boxed [`FileState`], freed by `xClose`. SQLite calls one file's methods
//! from one thread at a time; what several connections share (locks, the
//! WAL index) is in [`crate::lock::DbShared`] behind its own locks.
//!
//! Reads and writes go through the cache (`wbcache::File::read_at` and
//! `write_at`, looped until complete); `xSync` is `sync_data` for
//! `SQLITE_SYNC_DATAONLY` and `sync_all` otherwise, and the first sync of a
//! newly created journal or WAL also syncs its directory, so the file's
//! name is as durable as its data. A main database reads the file directly
//! until this process holds its cross-process lock (see [`crate::lock`]).

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use libsqlite3_sys as ffi;
use wbcache::OpenOptions;

use crate::lock::{DbShared, Level, LockError};
use crate::shm::{ShmError, ShmHeld, ShmLockOp, ShmNode};
use crate::state::{guard, VfsState};

/// The bytes SQLite allocates for an open file (`szOsFile`).
#[repr(C)]
pub struct VfsFile {
    pub base: ffi::sqlite3_file,
    pub state: *mut FileState,
}

pub struct FileState {
    pub vfs: &'static VfsState,
    pub path: PathBuf,
    pub read_only: bool,
    /// The cached handle; for a main database, opened only once the
    /// process holds the database (until then reads go to `db` directly).
    pub file: Option<wbcache::File>,
    /// A main database's shared state (`None` for journals, WAL and
    /// temporary files, which have no locks and no WAL index).
    pub db: Option<Arc<DbShared>>,
    pub level: Level,
    pub shm_held: ShmHeld,
    pub shm_mapped: bool,
    /// The directory to sync at the first `xSync` (a created journal or
    /// WAL: its name must be durable before SQLite relies on it).
    pub dir_to_sync: Option<PathBuf>,
    /// `SQLITE_FCNTL_PERSIST_WAL`.
    pub persist_wal: bool,
    /// `SQLITE_FCNTL_POWERSAFE_OVERWRITE` (see `xDeviceCharacteristics`).
    pub powersafe_overwrite: bool,
    /// `SQLITE_FCNTL_CHUNK_SIZE` (0: none): the file grows and is cut in
    /// multiples of it, its growth preallocated, as the unix VFS does.
    pub chunk_bytes: u64,
}

impl FileState {
    /// `n` rounded up to the chunk size (unchanged without one).
    fn round_to_chunk(&self, n: u64) -> u64 {
        if self.chunk_bytes == 0 {
            n
        } else {
            n.div_ceil(self.chunk_bytes).saturating_mul(self.chunk_bytes)
        }
    }

    /// `SQLITE_FCNTL_SIZE_HINT`: with a chunk size, the file is
    /// preallocated (and grown) to the hint rounded up to a chunk, as the
    /// unix VFS does with `posix_fallocate`; where the store cannot
    /// preallocate, it is grown sparse. Without a chunk size, a no-op.
    fn size_hint(&mut self, hint: u64) -> c_int {
        if self.chunk_bytes == 0 || self.read_only {
            return ffi::SQLITE_OK;
        }
        let want = self.round_to_chunk(hint);
        let Some(f) = self.cached() else { return ffi::SQLITE_IOERR_TRUNCATE };
        let Ok(len) = f.len() else { return ffi::SQLITE_IOERR_FSTAT };
        if want <= len {
            return ffi::SQLITE_OK;
        }
        match f.allocate(len..want, false) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => match f.set_len(want) {
                Ok(()) => ffi::SQLITE_OK,
                Err(e) => write_error(&e, ffi::SQLITE_IOERR_TRUNCATE),
            },
            Err(e) => write_error(&e, ffi::SQLITE_IOERR_WRITE),
        }
    }
}

impl FileState {
    /// The cached handle, opened now if this process holds the database.
    fn cached(&mut self) -> Option<&wbcache::File> {
        if self.file.is_none() {
            let db = self.db.as_ref()?;
            if !db.is_owned() {
                return None;
            }
            let options = OpenOptions::new().read(true).write(!self.read_only);
            self.file = Some(self.vfs.cache.open(&db.path, &options).ok()?);
        }
        self.file.as_ref()
    }
}

/// The methods of every file (version 2: WAL index, no memory mapping).
pub static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// The state behind an open `sqlite3_file`.
///
/// # Safety
/// `file` is a `VfsFile` that `xOpen` initialised and `xClose` has not
/// freed, used by one thread at a time (SQLite's rule for one file).
unsafe fn state<'a>(file: *mut ffi::sqlite3_file) -> &'a mut FileState {
    // SAFETY: per the contract, `file` points at a live `VfsFile` whose
    // `state` is the Box `xOpen` leaked, and no one else uses it now.
    unsafe { &mut *(*file.cast::<VfsFile>()).state }
}

/// `errno`-based result code for a failed write or truncate.
fn write_error(e: &std::io::Error, code: c_int) -> c_int {
    match wbcache::errno_of(e) {
        libc::ENOSPC | libc::EDQUOT => ffi::SQLITE_FULL,
        _ => code,
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite calls xClose once on a file xOpen initialised.
    let vf = unsafe { &mut *file.cast::<VfsFile>() };
    if vf.state.is_null() {
        return ffi::SQLITE_OK;
    }
    // SAFETY: `state` is the Box xOpen leaked; taken back exactly once.
    let mut st = unsafe { Box::from_raw(vf.state) };
    vf.state = std::ptr::null_mut();
    vf.base.pMethods = std::ptr::null();
    guard(ffi::SQLITE_IOERR_CLOSE, move || {
        if let Some(db) = st.db.take() {
            if st.shm_mapped {
                unmap_shm(&db, &mut st.shm_held);
                st.shm_mapped = false;
            }
            st.level = db.unlock(st.level, Level::None);
            drop(st.file.take());
            return st.vfs.release_db(db);
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_read(file: *mut ffi::sqlite3_file, buf: *mut c_void, amount: c_int, offset: i64) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let Ok(len) = usize::try_from(amount) else { return ffi::SQLITE_IOERR_READ };
    let Ok(off) = u64::try_from(offset) else { return ffi::SQLITE_IOERR_READ };
    // SAFETY: SQLite passes a buffer of `amount` writable bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
    guard(ffi::SQLITE_IOERR_READ, || {
        let got = match st.cached() {
            Some(f) => read_full(f, out, off),
            None => match &st.db {
                Some(db) => db.read_direct(out, off),
                None => return ffi::SQLITE_IOERR_READ,
            },
        };
        match got {
            Ok(n) if n == len => ffi::SQLITE_OK,
            Ok(n) => {
                // SQLite wants the rest zeroed on a short read.
                out[n..].fill(0);
                ffi::SQLITE_IOERR_SHORT_READ
            }
            Err(_) => ffi::SQLITE_IOERR_READ,
        }
    })
}

/// Reads until `buf` is full or the file ends.
fn read_full(f: &wbcache::File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

unsafe extern "C" fn x_write(file: *mut ffi::sqlite3_file, buf: *const c_void, amount: c_int, offset: i64) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let Ok(len) = usize::try_from(amount) else { return ffi::SQLITE_IOERR_WRITE };
    let Ok(off) = u64::try_from(offset) else { return ffi::SQLITE_IOERR_WRITE };
    // SAFETY: SQLite passes `amount` readable bytes.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    guard(ffi::SQLITE_IOERR_WRITE, || {
        // SQLite writes a database only under its EXCLUSIVE lock, which
        // this process holds by then: the cached handle is open.
        let Some(f) = st.cached() else { return ffi::SQLITE_IOERR_WRITE };
        let mut done = 0;
        while done < len {
            match f.write_at(&data[done..], off + done as u64) {
                Ok(0) => return ffi::SQLITE_IOERR_WRITE,
                Ok(n) => done += n,
                Err(e) => return write_error(&e, ffi::SQLITE_IOERR_WRITE),
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let Ok(size) = u64::try_from(size) else { return ffi::SQLITE_IOERR_TRUNCATE };
    // As the unix VFS: a chunked file is cut to a whole chunk.
    let size = st.round_to_chunk(size);
    guard(ffi::SQLITE_IOERR_TRUNCATE, || match st.cached() {
        Some(f) => match f.set_len(size) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => write_error(&e, ffi::SQLITE_IOERR_TRUNCATE),
        },
        None => ffi::SQLITE_IOERR_TRUNCATE,
    })
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    guard(ffi::SQLITE_IOERR_FSYNC, || {
        let Some(f) = st.cached() else { return ffi::SQLITE_IOERR_FSYNC };
        let synced = if flags & ffi::SQLITE_SYNC_DATAONLY != 0 { f.sync_data() } else { f.sync_all() };
        if synced.is_err() {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        if let Some(dir) = st.dir_to_sync.take() {
            if crate::state::sync_dir(&dir).is_err() {
                st.dir_to_sync = Some(dir);
                return ffi::SQLITE_IOERR_DIR_FSYNC;
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, out: *mut i64) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    guard(ffi::SQLITE_IOERR_FSTAT, || {
        let len = match st.cached() {
            Some(f) => f.len(),
            None => match &st.db {
                Some(db) => db.len_direct(),
                None => return ffi::SQLITE_IOERR_FSTAT,
            },
        };
        match len.ok().and_then(|n| i64::try_from(n).ok()) {
            Some(n) => {
                // SAFETY: SQLite passes a writable i64.
                unsafe { *out = n };
                ffi::SQLITE_OK
            }
            None => ffi::SQLITE_IOERR_FSTAT,
        }
    })
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let Some(want) = Level::from_sqlite(level) else { return ffi::SQLITE_MISUSE };
    guard(ffi::SQLITE_IOERR_LOCK, || {
        let Some(db) = st.db.clone() else {
            // Only main databases are locked; others just keep the level.
            st.level = st.level.max(want);
            return ffi::SQLITE_OK;
        };
        let (now, result) = db.lock(&st.vfs.cache, st.level, want);
        st.level = now;
        match result {
            Ok(()) => {
                if st.cached().is_none() {
                    // Held, yet the cache would not open the file.
                    st.level = db.unlock(st.level, Level::None);
                    return ffi::SQLITE_IOERR_LOCK;
                }
                ffi::SQLITE_OK
            }
            Err(LockError::Busy) => ffi::SQLITE_BUSY,
            Err(LockError::Io) => ffi::SQLITE_IOERR_LOCK,
        }
    })
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let Some(to) = Level::from_sqlite(level).filter(|&l| l <= Level::Shared) else { return ffi::SQLITE_MISUSE };
    guard(ffi::SQLITE_IOERR_UNLOCK, || {
        st.level = match &st.db {
            Some(db) => db.unlock(st.level, to),
            None => st.level.min(to),
        };
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let reserved = st.db.as_ref().is_some_and(|db| db.reserved());
    // SAFETY: SQLite passes a writable int.
    unsafe { *out = c_int::from(reserved) };
    ffi::SQLITE_OK
}

/// Reads or sets a boolean file control (`*arg < 0` asks).
///
/// # Safety
/// `arg` points at a writable int.
unsafe fn bool_control(flag: &mut bool, arg: *mut c_void) {
    let arg = arg.cast::<c_int>();
    // SAFETY: the caller guarantees `arg` points at a writable int, alive
    // for this call.
    unsafe {
        if *arg < 0 {
            *arg = c_int::from(*flag);
        } else {
            *flag = *arg != 0;
        }
    }
}

unsafe extern "C" fn x_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    match op {
        ffi::SQLITE_FCNTL_LOCKSTATE => {
            // SAFETY: this op's argument is a writable int.
            unsafe { *arg.cast::<c_int>() = st.level as c_int };
            ffi::SQLITE_OK
        }
        ffi::SQLITE_FCNTL_VFSNAME => {
            let name = st.vfs.name.to_string_lossy();
            // SAFETY: this op's argument is a writable `char *`, which
            // SQLite frees with sqlite3_free.
            unsafe { *arg.cast::<*mut c_char>() = st.vfs.api.malloc_string(&name) };
            ffi::SQLITE_OK
        }
        ffi::SQLITE_FCNTL_PERSIST_WAL => {
            // SAFETY: this op's argument is a writable int.
            unsafe { bool_control(&mut st.persist_wal, arg) };
            ffi::SQLITE_OK
        }
        ffi::SQLITE_FCNTL_POWERSAFE_OVERWRITE => {
            // SAFETY: this op's argument is a writable int.
            unsafe { bool_control(&mut st.powersafe_overwrite, arg) };
            ffi::SQLITE_OK
        }
        ffi::SQLITE_FCNTL_CHUNK_SIZE => {
            // SAFETY: this op's argument is a readable int.
            let chunk = unsafe { *arg.cast::<c_int>() };
            st.chunk_bytes = u64::try_from(chunk).unwrap_or(0);
            ffi::SQLITE_OK
        }
        ffi::SQLITE_FCNTL_SIZE_HINT => {
            // SAFETY: this op's argument is a readable sqlite3_int64.
            let hint = unsafe { *arg.cast::<i64>() };
            let Ok(hint) = u64::try_from(hint) else { return ffi::SQLITE_OK };
            guard(ffi::SQLITE_IOERR_WRITE, || st.size_hint(hint))
        }
        ffi::SQLITE_FCNTL_HAS_MOVED => {
            // Moved: the name leads elsewhere now (renamed, or unlinked).
            let moved = match &st.db {
                Some(db) => crate::state::file_key(&st.path).ok() != Some(db.key),
                None => false,
            };
            // SAFETY: this op's argument is a writable int.
            unsafe { *arg.cast::<c_int>() = c_int::from(moved) };
            ffi::SQLITE_OK
        }
        _ => ffi::SQLITE_NOTFOUND,
    }
}

unsafe extern "C" fn x_sector_size(_file: *mut ffi::sqlite3_file) -> c_int {
    // The cache's block: what writeback writes as a unit.
    4096
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    // Only powersafe overwrite (see docs/quickstart.md): writeback rewrites whole
    // 4 KiB blocks, and bytes of a block outside a write keep the values
    // they have on disk. Not SEQUENTIAL (writeback reorders writes), not
    // SAFE_APPEND (a file may grow before its data lands), no atomic sizes.
    if st.powersafe_overwrite {
        ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE
    } else {
        0
    }
}

/// The database's WAL index, made on first use, with this connection
/// counted among its users.
fn shm_node<'a>(db: &'a DbShared, mapped: &mut bool) -> std::sync::MutexGuard<'a, Option<ShmNode>> {
    let mut shm = db.shm.lock().unwrap_or_else(|p| p.into_inner());
    let node = shm.get_or_insert_with(ShmNode::new);
    if !*mapped {
        node.users += 1;
        *mapped = true;
    }
    shm
}

/// Gives back a connection's WAL locks and its use of the index; the last
/// user frees it.
fn unmap_shm(db: &DbShared, held: &mut ShmHeld) {
    let mut shm = db.shm.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(node) = shm.as_mut() {
        node.lock(held, 0, crate::shm::NLOCK, ShmLockOp::Unlock).expect("unlocking cannot fail");
        node.users -= 1;
        if node.users == 0 {
            *shm = None;
        }
    }
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    region_bytes: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    // SAFETY: SQLite passes a writable pointer.
    unsafe { *out = std::ptr::null_mut() };
    let (Ok(region), Ok(bytes)) = (usize::try_from(region), usize::try_from(region_bytes)) else {
        return ffi::SQLITE_IOERR_SHMMAP;
    };
    guard(ffi::SQLITE_IOERR_SHMMAP, || {
        let Some(db) = st.db.clone() else { return ffi::SQLITE_IOERR_SHMMAP };
        let mut shm = shm_node(&db, &mut st.shm_mapped);
        let node = shm.as_mut().expect("made by shm_node");
        match node.map(region, bytes, extend != 0) {
            Ok(p) => {
                // SAFETY: `out` is the writable `void **` SQLite passes to
                // xShmMap for its answer, valid for the whole call.
                unsafe { *out = p.cast() };
                ffi::SQLITE_OK
            }
            Err(_) => ffi::SQLITE_IOERR_SHMMAP,
        }
    })
}

unsafe extern "C" fn x_shm_lock(file: *mut ffi::sqlite3_file, offset: c_int, count: c_int, flags: c_int) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    let (Ok(first), Ok(n)) = (usize::try_from(offset), usize::try_from(count)) else {
        return ffi::SQLITE_IOERR_SHMLOCK;
    };
    if n == 0 || first + n > crate::shm::NLOCK {
        return ffi::SQLITE_IOERR_SHMLOCK;
    }
    guard(ffi::SQLITE_IOERR_SHMLOCK, || {
        let Some(db) = st.db.clone() else { return ffi::SQLITE_IOERR_SHMLOCK };
        let mut shm = shm_node(&db, &mut st.shm_mapped);
        let node = shm.as_mut().expect("made by shm_node");
        let op = if flags & ffi::SQLITE_SHM_LOCK == 0 {
            ShmLockOp::Unlock
        } else if flags & ffi::SQLITE_SHM_EXCLUSIVE != 0 {
            ShmLockOp::Exclusive
        } else {
            ShmLockOp::Shared
        };
        match node.lock(&mut st.shm_held, first, n, op) {
            Ok(()) => ffi::SQLITE_OK,
            Err(ShmError::Busy) => ffi::SQLITE_BUSY,
            Err(ShmError::BadRegionSize) => ffi::SQLITE_IOERR_SHMLOCK,
        }
    })
}

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    // The index's mutex orders this connection's accesses with those of
    // connections that take it next, as the unix VFS's barrier does.
    if let Some(db) = &st.db {
        drop(db.shm.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, _delete: c_int) -> c_int {
    // SAFETY: SQLite calls this method only on a file `xOpen` initialised
    // and `xClose` has not freed, one thread at a time (its rule for one
    // file): what `state` requires.
    let st = unsafe { state(file) };
    guard(ffi::SQLITE_IOERR_SHMMAP, || {
        if let (Some(db), true) = (&st.db, st.shm_mapped) {
            unmap_shm(db, &mut st.shm_held);
            st.shm_mapped = false;
        }
        ffi::SQLITE_OK
    })
}
