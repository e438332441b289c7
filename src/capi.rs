//! The C ABI: `extern "C"` functions over [`Cache`] and [`File`], declared
//! for C and C++ in `include/wbcache.h`.
//!
//! # Handles and ownership
//! - `wbc_cache *` is a boxed [`Cache`]. [`wbc_cache_open`] allocates it and
//!   [`wbc_cache_close`] writes everything back, syncs, and frees it; the
//!   pointer is dangling afterwards.
//! - `wbc_file *` is a boxed [`File`]. [`wbc_open`] allocates it and
//!   [`wbc_close`] frees it. A `File` holds the cache's shared state through
//!   its own reference count, never through the `wbc_cache` box, so a file
//!   may outlive its cache: after [`wbc_cache_close`] every operation on it
//!   fails with `-EBADF`, and [`wbc_close`] still frees it. Files and caches
//!   may therefore be closed in any order; each handle must be closed exactly
//!   once.
//! - Both handles may be used from several threads at once (they wrap `Send
//!   + Sync` types), except that a close must not race with any other call on
//!   the handle it frees. A file's data written concurrently with
//!   [`wbc_cache_close`] may miss the final writeback: finish I/O first.
//!
//! # Errors
//! Every function returns a non-negative value on success and `-errno` on
//! failure, mapped by [`errno_of`]: the OS error code when there is one, or
//! the `io::ErrorKind` otherwise. A NULL handle, buffer, path or output
//! pointer is `-EINVAL`. Panics never cross the ABI: each function catches
//! them and returns `-EIO`. [`wbc_last_error`] gives the message of the last
//! failure on the calling thread (e.g. which option was bad).

#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
use std::io::{self, IoSlice};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;

use crate::cache::Cache;
use crate::config::Config;
use crate::file::{Advice, File, OpenOptions, SyncRangeFlags, WriteFlags};
use crate::io::errno_of;
use crate::userbuf::{RawIov, IOV_MAX};

/// `wbc_pread`/`wbc_pwrite` flag: uncached I/O (`RWF_DONTCACHE`); equals
/// [`WriteFlags::DONTCACHE`] and the header's `WBC_DONTCACHE`.
pub const WBC_DONTCACHE: u32 = 0x1;

/// `wbc_open` flag: every read and write of the handle is uncached, as if
/// each passed `WBC_DONTCACHE` ([`OpenOptions::dontcache`]). Bit 30, which
/// no Linux architecture uses for an open(2) flag; the header's
/// `WBC_O_DONTCACHE`.
pub const WBC_O_DONTCACHE: c_int = 0x4000_0000;

/// [`wbc_residency`] bits: the block is cached, dirty, under writeback.
pub const WBC_RESIDENT_CACHED: u8 = crate::folio::RESIDENT_CACHED;
pub const WBC_RESIDENT_DIRTY: u8 = crate::folio::RESIDENT_DIRTY;
pub const WBC_RESIDENT_WRITEBACK: u8 = crate::folio::RESIDENT_WRITEBACK;

/// The open(2) flags [`wbc_open`] accepts besides the access mode.
/// `O_CLOEXEC`, `O_DIRECT` and `O_LARGEFILE` are accepted and ignored:
/// backing descriptors belong to the cache (and are opened O_DIRECT and
/// close-on-exec by it), and offsets are always 64-bit.
const ACCEPTED_OFLAGS: c_int = libc::O_ACCMODE
    | WBC_O_DONTCACHE
    | libc::O_CREAT
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_EXCL
    | libc::O_CLOEXEC
    | libc::O_DIRECT
    | libc::O_LARGEFILE
    | KERNEL_O_LARGEFILE;

/// glibc defines `O_LARGEFILE` as 0 on 64-bit targets, but callers that take
/// the value from kernel headers pass the kernel's bit; accept that too.
#[cfg(any(target_arch = "x86", target_arch = "x86_64", target_arch = "riscv64", target_arch = "loongarch64"))]
const KERNEL_O_LARGEFILE: c_int = 0o100000;
#[cfg(any(target_arch = "arm", target_arch = "aarch64"))]
const KERNEL_O_LARGEFILE: c_int = 0o400000;
#[cfg(not(any(
    target_arch = "x86",
    target_arch = "x86_64",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "arm",
    target_arch = "aarch64"
)))]
const KERNEL_O_LARGEFILE: c_int = libc::O_LARGEFILE;

/// Opaque C handle for a [`Cache`].
#[allow(non_camel_case_types)]
pub struct wbc_cache {
    cache: Cache,
}

/// Opaque C handle for a [`File`].
#[allow(non_camel_case_types)]
pub struct wbc_file {
    file: File,
}

thread_local! {
    /// Message of the last failed call on this thread, for [`wbc_last_error`].
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A failed call: the errno it returns (positive) and the message kept for
/// [`wbc_last_error`].
#[derive(Debug)]
struct Failure {
    errno: i32,
    message: String,
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure { errno: errno_of(&e), message: e.to_string() }
    }
}

fn einval(message: &str) -> Failure {
    Failure { errno: libc::EINVAL, message: message.to_string() }
}

fn set_last_error(function: &str, message: &str) {
    // `try_with`: a call made while this thread's locals are being destroyed
    // just loses its message.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            s.clear();
            s.push_str(function);
            s.push_str(": ");
            s.push_str(message);
        }
    });
}

/// Runs the body of an exported function: `Ok(n)` becomes `n`, an error
/// `-errno`, a panic `-EIO`; failures are recorded for [`wbc_last_error`].
fn guard(function: &str, body: impl FnOnce() -> Result<i64, Failure>) -> i64 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(n)) => n,
        Ok(Err(failure)) => {
            set_last_error(function, &failure.message);
            -i64::from(failure.errno)
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("unknown panic");
            set_last_error(function, &format!("internal panic: {what}"));
            // Dropping the payload could itself panic; leak it instead.
            std::mem::forget(payload);
            -i64::from(libc::EIO)
        }
    }
}

/// [`guard`] for the functions that return `int` (0 or `-errno`).
fn guard_int(function: &str, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    // 0 or -errno; every errno fits in an int.
    guard(function, || body().map(|()| 0)) as c_int
}

/// The handle behind `c`, or `EINVAL` for NULL.
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`] not yet passed to
/// [`wbc_cache_close`].
unsafe fn cache_ref<'a>(c: *const wbc_cache) -> Result<&'a Cache, Failure> {
    // SAFETY: the caller guarantees `c` is NULL or points to a live wbc_cache
    // box, which nothing mutates through a shared borrow.
    unsafe { c.as_ref() }.map(|h| &h.cache).ok_or_else(|| einval("NULL cache handle"))
}

/// The handle behind `f`, or `EINVAL` for NULL.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`] not yet passed to
/// [`wbc_close`].
unsafe fn file_ref<'a>(f: *const wbc_file) -> Result<&'a File, Failure> {
    // SAFETY: as in `cache_ref`, for a wbc_file box.
    unsafe { f.as_ref() }.map(|h| &h.file).ok_or_else(|| einval("NULL file handle"))
}

fn to_i64(n: usize) -> i64 {
    // Slices never exceed isize::MAX bytes.
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Copies `text` and a NUL into `buf` if `len` leaves room for both;
/// returns `text.len()` either way.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
unsafe fn copy_out(text: &str, buf: *mut c_char, len: usize) -> i64 {
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

/// Creates a cache. `options` is a `key=value,...` string as in
/// [`Config::from_options`] (NULL: all defaults). On success stores the
/// handle in `*out` and returns 0; otherwise stores NULL (if `out` is not
/// NULL) and returns `-errno` (`-EINVAL` for a bad option).
///
/// # Safety
/// `options` is NULL or a NUL-terminated string; `out` is NULL or valid for
/// a pointer write.
#[no_mangle]
pub unsafe extern "C" fn wbc_cache_open(options: *const c_char, out: *mut *mut wbc_cache) -> c_int {
    guard_int("wbc_cache_open", || {
        if out.is_null() {
            return Err(einval("NULL output pointer"));
        }
        // SAFETY: `out` is non-NULL and the caller guarantees it is writable.
        unsafe { out.write(ptr::null_mut()) };
        let config = if options.is_null() {
            Config::default()
        } else {
            // SAFETY: the caller guarantees a NUL-terminated string.
            let options = unsafe { CStr::from_ptr(options) };
            Config::from_options(options.to_str().map_err(|_| einval("options are not UTF-8"))?)?
        };
        let handle = Box::new(wbc_cache { cache: Cache::new(config)? });
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Writes back and syncs every file, stops the cache's threads and frees
/// the handle (even on error). Files still open fail with `-EBADF` from now
/// on and must still be passed to [`wbc_close`]. Returns 0 or the first
/// writeback/sync error as `-errno` (that data is lost).
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`]; it is dangling
/// afterwards and no other call on it may run concurrently.
#[no_mangle]
pub unsafe extern "C" fn wbc_cache_close(c: *mut wbc_cache) -> c_int {
    guard_int("wbc_cache_close", || {
        if c.is_null() {
            return Err(einval("NULL cache handle"));
        }
        // SAFETY: `c` came from `Box::into_raw` in `wbc_cache_open` and the
        // caller hands its ownership back exactly once.
        let handle = unsafe { Box::from_raw(c) };
        Ok(handle.cache.close()?)
    })
}

/// Writes back and syncs every file of the cache (as `syncfs`). Returns 0
/// or the first error as `-errno`; failed data stays dirty.
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_cache_sync(c: *mut wbc_cache) -> c_int {
    guard_int("wbc_cache_sync", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        Ok(cache.sync_all()?)
    })
}

/// The [`OpenOptions`] for open(2) `oflags` and `mode`, or `EINVAL` for
/// unknown flag bits or an invalid access mode.
fn open_options(oflags: c_int, mode: c_uint) -> Result<OpenOptions, Failure> {
    if oflags & !ACCEPTED_OFLAGS != 0 {
        return Err(einval(&format!("unsupported open flags {:#x}", oflags & !ACCEPTED_OFLAGS)));
    }
    let (read, write) = match oflags & libc::O_ACCMODE {
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        _ => return Err(einval("invalid access mode")),
    };
    let create = oflags & libc::O_CREAT != 0;
    Ok(OpenOptions::new()
        .read(read)
        .write(write)
        .create(create)
        .create_new(create && oflags & libc::O_EXCL != 0)
        .truncate(oflags & libc::O_TRUNC != 0)
        .dontcache(oflags & WBC_O_DONTCACHE != 0)
        .append(oflags & libc::O_APPEND != 0)
        .mode(mode & 0o7777))
}

/// Opens (or creates) `path` through the cache, with open(2) flags: the
/// access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`), `O_CREAT`, `O_EXCL` (with
/// `O_CREAT`: fail with `-EEXIST` if it exists), `O_TRUNC`, `O_APPEND`
/// (every write goes to the end of the file, whatever its offset, as
/// pwrite(2) on Linux; appends through the cache never interleave); `O_CLOEXEC`,
/// `O_DIRECT` and `O_LARGEFILE` are accepted and ignored; `WBC_O_DONTCACHE`
/// makes every read and write of the handle uncached; any other bit is
/// `-EINVAL`. `mode` (permission bits, minus the umask) applies to a
/// created file. `O_CREAT`/`O_TRUNC` need write access (`-EINVAL`
/// otherwise). On success stores the handle in `*out` and returns 0;
/// otherwise stores NULL (if `out` is not NULL) and returns `-errno`.
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`]; `path` is NULL or
/// a NUL-terminated string; `out` is NULL or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn wbc_open(
    c: *mut wbc_cache,
    path: *const c_char,
    oflags: c_int,
    mode: c_uint,
    out: *mut *mut wbc_file,
) -> c_int {
    guard_int("wbc_open", || {
        if out.is_null() {
            return Err(einval("NULL output pointer"));
        }
        // SAFETY: `out` is non-NULL and the caller guarantees it is writable.
        unsafe { out.write(ptr::null_mut()) };
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees `path` is NULL or NUL-terminated.
        let path = unsafe { c_path(path) }?;
        let options = open_options(oflags, mode)?;
        // The error names the path already.
        let file = cache.open(path, &options)?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(wbc_file { file }))) };
        Ok(())
    })
}

/// The path argument of a C call: `-EINVAL` for NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string that outlives the borrow.
unsafe fn c_path<'a>(path: *const c_char) -> Result<&'a Path, Failure> {
    if path.is_null() {
        return Err(einval("NULL path"));
    }
    // SAFETY: non-NULL, and the caller guarantees NUL termination.
    Ok(Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes())))
}

/// Removes `path` as unlink(2) does, with its cached data when that was
/// the file's last name (dropped unwritten; open handles keep working
/// until closed, then it goes). See [`Cache::remove_file`]. Returns 0 or
/// `-errno`: unlink(2)'s (`-ENOENT`, `-EISDIR`, `-EACCES`, ...), `-EINVAL`
/// for NULL arguments, `-EBADF` after [`wbc_cache_close`].
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`]; `path` is NULL or
/// a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn wbc_unlink(c: *mut wbc_cache, path: *const c_char) -> c_int {
    guard_int("wbc_unlink", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees `path` is NULL or NUL-terminated.
        let path = unsafe { c_path(path) }?;
        Ok(cache.remove_file(path)?)
    })
}

/// Makes the cache forget `path` if it is cached and no handle has it
/// open: writes it back, syncs it, and drops its cached data, so the next
/// open reads it afresh. See [`Cache::forget`]. Returns 1 if forgotten, 0
/// if not cached, missing or open, or `-errno` (a failed writeback or sync,
/// `-EINVAL` for NULL arguments, `-EBADF` after [`wbc_cache_close`]).
///
/// # Safety
/// As [`wbc_unlink`].
#[no_mangle]
pub unsafe extern "C" fn wbc_forget(c: *mut wbc_cache, path: *const c_char) -> c_int {
    let mut forgotten = false;
    let rc = guard_int("wbc_forget", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees `path` is NULL or NUL-terminated.
        let path = unsafe { c_path(path) }?;
        forgotten = cache.forget(path)?;
        Ok(())
    });
    if rc == 0 {
        c_int::from(forgotten)
    } else {
        rc
    }
}

/// Frees a file handle. Like close(2) it does not write back: dirty data
/// stays cached for the flusher (use [`wbc_fsync`] first for durability).
/// Valid after [`wbc_cache_close`]. Returns 0, or `-EINVAL` for NULL.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`]; it is dangling
/// afterwards and no other call on it may run concurrently.
#[no_mangle]
pub unsafe extern "C" fn wbc_close(f: *mut wbc_file) -> c_int {
    guard_int("wbc_close", || {
        if f.is_null() {
            return Err(einval("NULL file handle"));
        }
        // SAFETY: `f` came from `Box::into_raw` in `wbc_open` and the caller
        // hands its ownership back exactly once.
        drop(unsafe { Box::from_raw(f) });
        Ok(())
    })
}

fn io_flags(flags: u32) -> Result<WriteFlags, Failure> {
    Ok(WriteFlags::from_bits(flags)?)
}

/// Reads up to `len` bytes at `off` into `buf`; fewer only at end of file.
/// `flags` is 0 or `WBC_DONTCACHE` (other bits: `-EINVAL`). Returns the
/// bytes read (0 at or past end of file) or `-errno` (`-EBADF` on a
/// write-only handle or after [`wbc_cache_close`]). `buf` is not zeroed
/// first: past the bytes returned, its contents are unspecified.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`]; `buf` is NULL or valid
/// for writes of `len` bytes (it need not be initialized).
#[no_mangle]
pub unsafe extern "C" fn wbc_pread(f: *mut wbc_file, buf: *mut c_void, len: usize, off: u64, flags: u32) -> i64 {
    guard("wbc_pread", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        if buf.is_null() {
            return Err(einval("NULL buffer"));
        }
        if len > isize::MAX as usize {
            return Err(einval("length exceeds SSIZE_MAX"));
        }
        let flags = io_flags(flags)?;
        // The caller's buffer may be fresh from malloc: it is lent as
        // possibly uninitialized bytes, and only those the read returns are
        // written (no zeroing first).
        let slice: &mut [std::mem::MaybeUninit<u8>] = if len == 0 {
            &mut []
        } else {
            // SAFETY: `buf` is non-NULL and valid for `len` bytes of writes
            // (caller contract), `len <= isize::MAX`, and `MaybeUninit<u8>`
            // has no alignment requirement and no validity requirement. The
            // slice lives only for this call, during which the caller lends
            // us `buf`.
            unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
        };
        Ok(file.read_at_uninit(slice, off, flags).map(to_i64)?)
    })
}

/// Writes `len` bytes from `buf` at `off` into the cache (write-back; use
/// [`wbc_fsync`] for durability). `flags` is 0 or `WBC_DONTCACHE` (uncached
/// write: written back soon and dropped from the cache; other bits:
/// `-EINVAL`). Returns the bytes written (all of them, except at the end of
/// a block device) or `-errno` (`-EBADF` on a read-only handle or after
/// [`wbc_cache_close`], `-EFBIG` past the largest file offset).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`]; `buf` is NULL or valid
/// for reads of `len` initialized bytes.
#[no_mangle]
pub unsafe extern "C" fn wbc_pwrite(f: *mut wbc_file, buf: *const c_void, len: usize, off: u64, flags: u32) -> i64 {
    guard("wbc_pwrite", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        if buf.is_null() {
            return Err(einval("NULL buffer"));
        }
        if len > isize::MAX as usize {
            return Err(einval("length exceeds SSIZE_MAX"));
        }
        let flags = io_flags(flags)?;
        // SAFETY: `buf` is non-NULL and valid for reads of `len` initialized
        // bytes (caller contract), `len <= isize::MAX`, u8 needs no
        // alignment, and the slice lives only for this call.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        Ok(file.write_at_with(data, off, flags).map(to_i64)?)
    })
}

/// The caller's `iov[0..iovcnt]`, checked: `iovcnt` in `0..=IOV_MAX`, `iov`
/// non-NULL unless `iovcnt` is 0, and no NULL base under a non-zero length
/// (the kernel's `EFAULT`; `EINVAL` here, as for a NULL buffer), and a
/// total length within `SSIZE_MAX`, all before any slice is made of them.
///
/// # Safety
/// `iov` is NULL or valid for reads of `iovcnt` `struct iovec`s.
unsafe fn iovecs<'a>(iov: *const libc::iovec, iovcnt: c_int) -> Result<&'a [libc::iovec], Failure> {
    let count = usize::try_from(iovcnt).map_err(|_| einval("negative iovcnt"))?;
    if count > IOV_MAX {
        return Err(einval("iovcnt exceeds IOV_MAX (1024)"));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(einval("NULL iov"));
    }
    // SAFETY: `iov` is non-NULL and valid for `count` iovecs (caller
    // contract); `struct iovec` has no invalid bit patterns, and the slice
    // lives only for the call that lent the array.
    let list = unsafe { std::slice::from_raw_parts(iov, count) };
    if let Some(i) = list.iter().position(|v| v.iov_base.is_null() && v.iov_len > 0) {
        return Err(Failure { errno: libc::EINVAL, message: format!("NULL iov[{i}].iov_base with a non-zero length") });
    }
    let total = list.iter().try_fold(0usize, |sum, v| sum.checked_add(v.iov_len).filter(|&t| t <= isize::MAX as usize));
    if total.is_none() {
        return Err(einval("the iovecs' total length exceeds SSIZE_MAX"));
    }
    Ok(list)
}

/// The checked arguments of a vectored call, in Linux's order: the handle,
/// its mode (`EBADF` before a bad list's `EINVAL`), the list, the flags.
///
/// # Safety
/// As [`file_ref`] for `f` and [`iovecs`] for `iov`.
unsafe fn vectored_args<'a>(
    f: *const wbc_file,
    iov: *const libc::iovec,
    iovcnt: c_int,
    flags: u32,
    need_write: bool,
) -> Result<(&'a File, &'a [libc::iovec], WriteFlags), Failure> {
    // SAFETY: forwarded to the caller.
    let file = unsafe { file_ref(f) }?;
    file.check_access(need_write)?;
    // SAFETY: forwarded to the caller.
    let list = unsafe { iovecs(iov, iovcnt) }?;
    Ok((file, list, io_flags(flags)?))
}

/// Reads into the buffers `iov[0..iovcnt]` in order, as [`wbc_pread`]
/// into their concatenation would (`preadv`). Returns the bytes read (fewer
/// than their total only at end of file) or `-errno`: as `wbc_pread`, and
/// `-EINVAL` for `iovcnt` negative or above 1024, a NULL `iov` (unless
/// `iovcnt` is 0), a NULL base with a non-zero length, or a total length
/// past `SSIZE_MAX`.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`]; `iov` is NULL or valid
/// for reads of `iovcnt` iovecs, each base NULL or valid for writes of its
/// length (the buffers need not be initialized, and may overlap: where they
/// do, the later buffer's bytes win, as with `preadv`).
#[no_mangle]
pub unsafe extern "C" fn wbc_preadv(
    f: *mut wbc_file,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: u64,
    flags: u32,
) -> i64 {
    guard("wbc_preadv", || {
        // SAFETY: the caller guarantees `f` is NULL or live and `iov` NULL
        // or valid for `iovcnt` iovecs.
        let (file, list, flags) = unsafe { vectored_args(f, iov, iovcnt, flags, false) }?;
        // Raw buffers: C may pass overlapping ones, which Rust slices could
        // not express. The pairs are copied out first, so an iov_base
        // pointing into the iovec array itself is harmless too.
        let mut bufs: Vec<RawIov> = list
            .iter()
            .map(|v| {
                // SAFETY: `iov_base` is valid for writes of `iov_len` bytes
                // for this call (caller contract) and non-NULL unless the
                // length is 0 (checked by `iovecs`, as is every length being
                // within `isize::MAX`).
                unsafe { RawIov::new(v.iov_base.cast(), v.iov_len) }
            })
            .collect();
        Ok(file.read_vectored_at_raw(&mut bufs, off, flags).map(to_i64)?)
    })
}

/// Writes the buffers `iov[0..iovcnt]` in order at `off`, as [`wbc_pwrite`]
/// of their concatenation would (`pwritev`): one call, one pass over the
/// cache. Returns the bytes written or `-errno`: as `wbc_pwrite`, and
/// `-EINVAL` for `iovcnt` negative or above 1024, a NULL `iov` (unless
/// `iovcnt` is 0), a NULL base with a non-zero length, or a total length
/// past `SSIZE_MAX`.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`]; `iov` is NULL or valid
/// for reads of `iovcnt` iovecs, each base NULL or valid for reads of its
/// length in initialized bytes.
#[no_mangle]
pub unsafe extern "C" fn wbc_pwritev(
    f: *mut wbc_file,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: u64,
    flags: u32,
) -> i64 {
    guard("wbc_pwritev", || {
        // SAFETY: the caller guarantees `f` is NULL or live and `iov` NULL
        // or valid for `iovcnt` iovecs.
        let (file, list, flags) = unsafe { vectored_args(f, iov, iovcnt, flags, true) }?;
        let bufs: Vec<IoSlice> = list
            .iter()
            .map(|v| {
                if v.iov_len == 0 {
                    return IoSlice::new(&[]);
                }
                // SAFETY: `iov_base` is non-NULL (checked above) and valid
                // for reads of `iov_len` initialized bytes (caller
                // contract), u8 needs no alignment, the slice lives only
                // for this call, and `iovecs` checked the total (so each
                // length) is within `isize::MAX`.
                IoSlice::new(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) })
            })
            .collect();
        Ok(file.write_vectored_at_with(&bufs, off, flags).map(to_i64)?)
    })
}

/// Writes back and syncs the file's data and metadata (`fsync`). Returns 0
/// or `-errno`; a writeback error since this handle's last sync is reported
/// once.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_fsync(f: *mut wbc_file) -> c_int {
    guard_int("wbc_fsync", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        Ok(unsafe { file_ref(f) }?.sync_all()?)
    })
}

/// As [`wbc_fsync`] but `fdatasync` (metadata only when the size changed).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_fdatasync(f: *mut wbc_file) -> c_int {
    guard_int("wbc_fdatasync", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        Ok(unsafe { file_ref(f) }?.sync_data()?)
    })
}

/// The file's logical size in bytes (including cached, unwritten data), or
/// `-errno`.
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_size(f: *mut wbc_file) -> i64 {
    guard("wbc_size", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let size = unsafe { file_ref(f) }?.len()?;
        i64::try_from(size).map_err(|_| Failure::from(io::Error::from_raw_os_error(libc::EOVERFLOW)))
    })
}

/// What of `[off, off + len)` is cached, as `mincore(2)` answers for
/// pages: `vec[i]` gets the bits of the `i`-th 4 KiB block from the one
/// holding `off`: [`WBC_RESIDENT_CACHED`] (1), [`WBC_RESIDENT_DIRTY`] (2),
/// [`WBC_RESIDENT_WRITEBACK`] (4); 0 = not cached. `vec` must hold one byte
/// per block the range touches, `(off % 4096 + len + 4095) / 4096`. Blocks
/// past the end of the file are not reported (their bytes are left alone).
/// Returns the number of blocks filled, or `-errno`: `-EINVAL` for a NULL
/// handle, a NULL `vec` with `len > 0` or a range past `UINT64_MAX`,
/// `-EBADF` after [`wbc_cache_close`].
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`]; `vec` is NULL or valid
/// for writes of the bytes said above.
#[no_mangle]
pub unsafe extern "C" fn wbc_residency(f: *mut wbc_file, off: u64, len: u64, vec: *mut u8) -> i64 {
    guard("wbc_residency", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        let end = off.checked_add(len).ok_or_else(|| einval("range past UINT64_MAX"))?;
        if len == 0 {
            return Ok(0);
        }
        if vec.is_null() {
            return Err(einval("NULL vec"));
        }
        let touched = end.div_ceil(4096) - off / 4096;
        let touched = usize::try_from(touched).map_err(|_| einval("range too large"))?;
        // SAFETY: the caller guarantees `vec` holds a byte per touched block.
        let out = unsafe { std::slice::from_raw_parts_mut(vec, touched) };
        Ok(to_i64(file.residency(off, len, out)?))
    })
}

/// Renames `from` to `to` as rename(2) does, replacing `to`; the cached
/// data follows the file, and a replaced `to` whose last name that was
/// loses its cached data unwritten (see [`Cache::rename`]). Returns 0 or
/// `-errno`: rename(2)'s (`-ENOENT`, `-EISDIR`, `-EXDEV`, ...), `-EINVAL`
/// for NULL arguments, `-EBADF` after [`wbc_cache_close`].
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`]; `from` and `to`
/// are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn wbc_rename(c: *mut wbc_cache, from: *const c_char, to: *const c_char) -> c_int {
    guard_int("wbc_rename", || {
        // SAFETY: the caller guarantees `c` is NULL or live.
        let cache = unsafe { cache_ref(c) }?;
        // SAFETY: the caller guarantees both are NULL or NUL-terminated.
        let (from, to) = unsafe { (c_path(from)?, c_path(to)?) };
        Ok(cache.rename(from, to)?)
    })
}

/// Truncates or extends (with zeros) the file to `size` bytes (`ftruncate`).
/// Returns 0 or `-errno` (`-EBADF` on a read-only handle, `-EFBIG` above
/// `INT64_MAX`, `-EINVAL` for a size change on a block device).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_truncate(f: *mut wbc_file, size: u64) -> c_int {
    guard_int("wbc_truncate", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        Ok(unsafe { file_ref(f) }?.set_len(size)?)
    })
}

/// `[off, off + len)` as a range, `len == 0` meaning "to the end of the
/// file" (`posix_fadvise`, `sync_file_range`); `EINVAL` for a negative
/// offset or length, or an end past `INT64_MAX`.
fn file_range(off: i64, len: i64) -> Result<std::ops::Range<u64>, Failure> {
    if off < 0 || len < 0 {
        return Err(einval("negative offset or length"));
    }
    if len == 0 {
        return Ok(off as u64..u64::MAX);
    }
    let end = off.checked_add(len).ok_or_else(|| einval("range past INT64_MAX"))?;
    Ok(off as u64..end as u64)
}

/// Advice about the handle's future accesses (`posix_fadvise(2)`):
/// `WBC_FADV_*`, the `POSIX_FADV_*` values. `len == 0` reaches the end of
/// the file. Returns 0 or `-errno`: `-EINVAL` for an unknown advice, a
/// negative offset or length or a NULL handle, `-EBADF` after
/// [`wbc_cache_close`].
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_fadvise(f: *mut wbc_file, off: i64, len: i64, advice: c_int) -> c_int {
    guard_int("wbc_fadvise", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        let advice = Advice::from_raw(advice)?;
        Ok(file.advise(file_range(off, len)?, advice)?)
    })
}

/// Writeback of `[off, off + len)` (`sync_file_range(2)`): `flags` are
/// `WBC_SYNC_RANGE_*`, the `SYNC_FILE_RANGE_*` values. No durability
/// promise (no device flush, no metadata sync). `len == 0` reaches the end
/// of the file. Returns 0 or `-errno`: `-EINVAL` for unknown flags, a
/// negative offset or length or a NULL handle, a writeback error since the
/// handle's last report when it waits (`-EIO`, `-ENOSPC`, ...), `-EBADF`
/// after [`wbc_cache_close`].
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_sync_range(f: *mut wbc_file, off: i64, len: i64, flags: c_uint) -> c_int {
    guard_int("wbc_sync_range", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        let how = SyncRangeFlags::from_bits(flags)?;
        Ok(file.writeback_range(file_range(off, len)?, how)?)
    })
}

/// `fallocate(2)` of `[off, off + len)` with `mode` 0,
/// `FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`,
/// `FALLOC_FL_ZERO_RANGE` or `FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`,
/// with the cache kept coherent (a punched or zeroed range reads as zeros,
/// its dirty data is discarded). Returns 0 or `-errno`: `-EINVAL` for a
/// negative offset, a length `<= 0` or a NULL handle, `-EFBIG` past
/// `INT64_MAX` or the file system's largest file, `-EOPNOTSUPP` for
/// another mode or a store that cannot, `-EBADF` on a read-only handle or
/// after [`wbc_cache_close`], and the store's own (`-ENOSPC`, ...; on a
/// block device `-EINVAL` for a range not aligned to its logical block
/// size or past its end, whatever the mode).
///
/// # Safety
/// `f` is NULL or a live pointer from [`wbc_open`].
#[no_mangle]
pub unsafe extern "C" fn wbc_fallocate(f: *mut wbc_file, mode: c_int, off: i64, len: i64) -> c_int {
    guard_int("wbc_fallocate", || {
        // SAFETY: the caller guarantees `f` is NULL or live.
        let file = unsafe { file_ref(f) }?;
        if off < 0 || len <= 0 {
            return Err(einval("negative offset, or a length not above 0"));
        }
        let end = off.checked_add(len).ok_or(Failure { errno: libc::EFBIG, message: "range past INT64_MAX".into() })?;
        Ok(file.fallocate_mode(mode, off as u64..end as u64)?)
    })
}

/// The cache's statistics as one JSON object. If `buf` is not NULL and `len`
/// exceeds the JSON's length, copies the JSON and a NUL into `buf`;
/// otherwise writes nothing. Returns the JSON's length without the NUL (so
/// a return value `>= len` means "retry with return + 1 bytes"), or
/// `-EINVAL` for a NULL cache.
///
/// # Safety
/// `c` is NULL or a live pointer from [`wbc_cache_open`]; `buf` is NULL or
/// valid for writes of `len` bytes.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    const EINVAL: i64 = -(libc::EINVAL as i64);
    const EBADF: i64 = -(libc::EBADF as i64);

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "wbcache-capi-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn path(&self, name: &str) -> CString {
            CString::new(self.0.join(name).as_os_str().as_bytes()).unwrap()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn open_cache(options: &str) -> *mut wbc_cache {
        let options = CString::new(options).unwrap();
        let mut c = ptr::null_mut();
        // SAFETY: valid string and output pointer.
        let rc = unsafe { wbc_cache_open(options.as_ptr(), &mut c) };
        assert_eq!(rc, 0, "wbc_cache_open({options:?}): {}", last_error());
        assert!(!c.is_null());
        c
    }

    fn open_file(c: *mut wbc_cache, path: &CStr, oflags: c_int) -> Result<*mut wbc_file, i64> {
        let mut f = ptr::null_mut();
        // SAFETY: `c` is live; valid path and output pointer.
        let rc = unsafe { wbc_open(c, path.as_ptr(), oflags, 0o644, &mut f) };
        if rc == 0 {
            assert!(!f.is_null());
            Ok(f)
        } else {
            assert!(f.is_null());
            Err(i64::from(rc))
        }
    }

    fn pwrite(f: *mut wbc_file, data: &[u8], off: u64, flags: u32) -> i64 {
        // SAFETY: `f` is live (or NULL in the tests of NULL handling); `data`
        // is a valid buffer of its length.
        unsafe { wbc_pwrite(f, data.as_ptr().cast(), data.len(), off, flags) }
    }

    fn pread(f: *mut wbc_file, len: usize, off: u64, flags: u32) -> Result<Vec<u8>, i64> {
        let mut buf = vec![0xAAu8; len];
        // SAFETY: as in `pwrite`, for writes.
        let n = unsafe { wbc_pread(f, buf.as_mut_ptr().cast(), len, off, flags) };
        if n < 0 {
            return Err(n);
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// The stats JSON by the documented protocol: the counters are live
    /// (background threads move them), so a length can grow between the
    /// query and the copy, and a return `>= len` means "retry".
    fn stats_json(c: *mut wbc_cache) -> String {
        for _ in 0..100 {
            // SAFETY: `c` is live; NULL buffer is a length query.
            let n = unsafe { wbc_stats_json(c, ptr::null_mut(), 0) };
            assert!(n > 0);
            let mut buf = vec![0u8; n as usize + 1];
            // SAFETY: `buf` is valid for its length.
            let m = unsafe { wbc_stats_json(c, buf.as_mut_ptr().cast(), buf.len()) };
            assert!(m > 0);
            if (m as usize) < buf.len() {
                assert_eq!(buf[m as usize], 0, "NUL-terminated");
                return String::from_utf8(buf[..m as usize].to_vec()).unwrap();
            }
            assert!(buf.iter().all(|&b| b == 0), "a buffer too small is left untouched");
        }
        panic!("the stats JSON kept growing past the length just asked");
    }

    fn last_error() -> String {
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is valid for its length.
        let n = unsafe { wbc_last_error(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..(n as usize).min(4095)]).into_owned()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(u32::from(seed)) as u8).collect()
    }

    #[test]
    fn dontcache_flag_matches_the_rust_api() {
        assert_eq!(WBC_DONTCACHE, WriteFlags::DONTCACHE.bits());
    }

    #[test]
    fn errno_mapping() {
        use io::ErrorKind as K;
        assert_eq!(errno_of(&io::Error::from_raw_os_error(libc::ENOSPC)), libc::ENOSPC);
        assert_eq!(errno_of(&io::Error::from_raw_os_error(libc::EBADF)), libc::EBADF);
        for (kind, errno) in [
            (K::InvalidInput, libc::EINVAL),
            (K::NotFound, libc::ENOENT),
            (K::AlreadyExists, libc::EEXIST),
            (K::PermissionDenied, libc::EACCES),
            (K::OutOfMemory, libc::ENOMEM),
            (K::WouldBlock, libc::EAGAIN),
            (K::StorageFull, libc::ENOSPC),
            (K::FileTooLarge, libc::EFBIG),
            (K::IsADirectory, libc::EISDIR),
            (K::NotADirectory, libc::ENOTDIR),
            (K::ReadOnlyFilesystem, libc::EROFS),
            (K::ResourceBusy, libc::EBUSY),
            (K::Interrupted, libc::EINTR),
            (K::TimedOut, libc::ETIMEDOUT),
            (K::WriteZero, libc::EIO),
            (K::Unsupported, libc::EOPNOTSUPP),
            (K::Other, libc::EIO),
            (K::UnexpectedEof, libc::EIO),
        ] {
            assert_eq!(errno_of(&io::Error::new(kind, "x")), errno, "{kind:?}");
            assert_eq!(errno_of(&io::Error::from(kind)), errno, "{kind:?}");
        }
        // Every kind maps back to the errno it came from, so an error
        // rebuilt with a message (which drops the raw errno) keeps it.
        for errno in [
            libc::EAGAIN,
            libc::ENOSPC,
            libc::EFBIG,
            libc::EISDIR,
            libc::ENOTDIR,
            libc::EROFS,
            libc::EBUSY,
            libc::EINTR,
            libc::ETIMEDOUT,
            libc::ENOMEM,
            libc::EINVAL,
            libc::ENOENT,
            libc::EEXIST,
        ] {
            let kind = io::Error::from_raw_os_error(errno).kind();
            assert_eq!(errno_of(&io::Error::new(kind, "with a message")), errno, "{kind:?}");
        }
    }

    #[test]
    fn panics_become_eio() {
        assert_eq!(guard("t", || panic!("boom")), -i64::from(libc::EIO));
        assert!(last_error().contains("internal panic: boom"), "{}", last_error());
        assert_eq!(guard("t", || panic!("{}", String::from("formatted"))), -i64::from(libc::EIO));
        assert!(last_error().contains("formatted"));
        assert_eq!(guard_int("t", || Err(io::Error::from_raw_os_error(libc::ENOSPC).into())), -libc::ENOSPC);
        assert_eq!(guard("t", || Ok(7)), 7);
    }

    #[test]
    fn null_arguments_are_einval() {
        let c = open_cache("capacity=64M,dirty_limit=16M,io=sim");
        let path = CString::new("/null-args").unwrap();
        let f = open_file(c, &path, libc::O_CREAT | libc::O_RDWR).unwrap();
        let mut buf = [0u8; 8];
        let mut out_f = ptr::null_mut();
        // SAFETY: every non-NULL argument is valid; NULL ones are rejected.
        unsafe {
            assert_eq!(wbc_cache_open(ptr::null(), ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_cache_close(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_cache_sync(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_open(ptr::null_mut(), path.as_ptr(), libc::O_RDWR, 0, &mut out_f), -libc::EINVAL);
            assert!(out_f.is_null());
            assert_eq!(wbc_open(c, ptr::null(), libc::O_RDWR, 0, &mut out_f), -libc::EINVAL);
            assert_eq!(wbc_open(c, path.as_ptr(), libc::O_RDWR, 0, ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_close(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_pread(ptr::null_mut(), buf.as_mut_ptr().cast(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_pread(f, ptr::null_mut(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_pread(f, ptr::null_mut(), 0, 0, 0), EINVAL);
            assert_eq!(wbc_pwrite(ptr::null_mut(), buf.as_ptr().cast(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_pwrite(f, ptr::null(), 8, 0, 0), EINVAL);
            assert_eq!(wbc_fsync(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_fdatasync(ptr::null_mut()), -libc::EINVAL);
            assert_eq!(wbc_size(ptr::null_mut()), EINVAL);
            assert_eq!(wbc_truncate(ptr::null_mut(), 0), -libc::EINVAL);
            assert_eq!(wbc_stats_json(ptr::null_mut(), buf.as_mut_ptr().cast(), 8), EINVAL);
            // Lengths a slice cannot have are refused before any access.
            let dangling = ptr::NonNull::<u8>::dangling().as_ptr();
            assert_eq!(wbc_pread(f, dangling.cast(), usize::MAX, 0, 0), EINVAL);
            assert_eq!(wbc_pwrite(f, dangling.cast(), usize::MAX, 0, 0), EINVAL);
            assert_eq!(wbc_size(f), 0, "nothing was written");
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
    }

    #[test]
    fn bad_options_are_einval_with_a_message() {
        for bad in ["bogus=1", "capacity=abc", "io=spdk", "capacity=1G,dirty_limit=2G", "capacity"] {
            let options = CString::new(bad).unwrap();
            let mut c = ptr::NonNull::<wbc_cache>::dangling().as_ptr();
            // SAFETY: valid string and output pointer.
            assert_eq!(unsafe { wbc_cache_open(options.as_ptr(), &mut c) }, -libc::EINVAL, "{bad}");
            assert!(c.is_null(), "output cleared on failure");
            assert!(last_error().starts_with("wbc_cache_open: "), "{}", last_error());
        }
        let options = CString::new("bogus=1").unwrap();
        let mut c = ptr::null_mut();
        // SAFETY: as above.
        unsafe { wbc_cache_open(options.as_ptr(), &mut c) };
        assert!(last_error().contains("bogus"), "{}", last_error());
        // Not UTF-8.
        let options = CString::new(vec![0xffu8, 0xfe]).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { wbc_cache_open(options.as_ptr(), &mut c) }, -libc::EINVAL);
    }

    #[test]
    fn null_options_are_the_defaults() {
        let mut c = ptr::null_mut();
        // SAFETY: NULL options are allowed; valid output pointer.
        assert_eq!(unsafe { wbc_cache_open(ptr::null(), &mut c) }, 0);
        assert!(stats_json(c).contains(&format!("\"capacity_bytes\":{}", Config::default().capacity_bytes)));
        // SAFETY: `c` is live and closed once.
        assert_eq!(unsafe { wbc_cache_close(c) }, 0);
    }

    /// The stats JSON spells out the configuration in use, thresholds the
    /// options string left to their defaults included.
    #[test]
    fn stats_json_carries_the_effective_configuration() {
        let c = open_cache("capacity=64M;dirty_limit=16M,io=sim");
        let json = stats_json(c);
        let config = format!(
            "\"config\":{{\"capacity\":{},\"dirty_limit\":{},\"dirty_background\":{},",
            64 << 20,
            16 << 20,
            8 << 20
        );
        assert!(json.contains(&config), "{json}");
        assert!(json.contains("\"io\":\"sim\",\"io_depth\":128,"), "{json}");
        // SAFETY: `c` is live and closed once.
        assert_eq!(unsafe { wbc_cache_close(c) }, 0);
    }

    #[test]
    fn open_flags_are_validated_and_mapped() {
        assert!(open_options(libc::O_APPEND | libc::O_RDWR, 0).unwrap().append);
        assert_eq!(
            open_options(libc::O_APPEND | libc::O_RDONLY, 0).unwrap().validate().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(open_options(libc::O_NONBLOCK, 0).unwrap_err().errno, libc::EINVAL);
        assert_eq!(open_options(libc::O_ACCMODE, 0).unwrap_err().errno, libc::EINVAL);
        assert_eq!(open_options(libc::O_SYNC, 0).unwrap_err().errno, libc::EINVAL);
        let o = open_options(libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECT | KERNEL_O_LARGEFILE, 0).unwrap();
        assert!(o.read && !o.write && !o.create && !o.create_new && !o.truncate);
        let o = open_options(libc::O_WRONLY, 0).unwrap();
        assert!(!o.read && o.write);
        let o = open_options(libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC, 0o100600).unwrap();
        assert!(o.read && o.write && o.create && o.create_new && o.truncate);
        assert_eq!(o.mode, 0o600);
        // O_EXCL without O_CREAT is ignored, as open(2) does for files.
        assert!(!open_options(libc::O_RDWR | libc::O_EXCL, 0).unwrap().create_new);
    }

    /// The handle semantics on any backend; `path` names a file that does
    /// not exist yet.
    fn exercise(options: &str, path: &CStr, missing: &CStr) {
        let c = open_cache(options);
        assert_eq!(open_file(c, missing, libc::O_RDWR).unwrap_err(), -i64::from(libc::ENOENT));
        assert!(last_error().contains("wbc_open"), "{}", last_error());
        assert_eq!(last_error().matches(missing.to_str().unwrap()).count(), 1, "{}", last_error());
        let f = open_file(c, path, libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC).unwrap();
        assert_eq!(
            open_file(c, path, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR).unwrap_err(),
            -(libc::EEXIST as i64)
        );
        assert_eq!(
            open_file(c, path, libc::O_RDONLY | libc::O_APPEND).unwrap_err(),
            EINVAL,
            "append needs write access"
        );

        let data = pattern(100_000, 7);
        assert_eq!(pwrite(f, &data, 12_345, 0), data.len() as i64);
        assert_eq!(pread(f, data.len(), 12_345, 0).unwrap(), data);
        let head = pread(f, 12_345 + 10, 0, 0).unwrap();
        assert!(head[..12_345].iter().all(|&b| b == 0));
        assert_eq!(&head[12_345..], &data[..10]);
        // SAFETY: `f` is live.
        assert_eq!(unsafe { wbc_size(f) }, 112_345);
        // Reads stop at end of file and are 0 past it.
        assert_eq!(pread(f, 1000, 112_000, 0).unwrap().len(), 345);
        assert_eq!(pread(f, 10, 1 << 40, 0).unwrap().len(), 0);
        // Uncached I/O and unknown flags.
        let more = pattern(5000, 9);
        assert_eq!(pwrite(f, &more, 200_001, WBC_DONTCACHE), 5000);
        assert_eq!(pread(f, 5000, 200_001, WBC_DONTCACHE).unwrap(), more);
        assert_eq!(pwrite(f, &more, 0, 0x2), EINVAL);
        assert_eq!(pread(f, 10, 0, 0x80).unwrap_err(), EINVAL);
        assert_eq!(pwrite(f, &[], 0, 0), 0);
        // SAFETY: `f` is live.
        unsafe {
            assert_eq!(wbc_fsync(f), 0);
            assert_eq!(wbc_fdatasync(f), 0);
            assert_eq!(wbc_truncate(f, 150_000), 0);
            assert_eq!(wbc_size(f), 150_000);
        }
        assert_eq!(pread(f, 10, 149_995, 0).unwrap(), vec![0; 5]);

        // Access modes.
        let ro = open_file(c, path, libc::O_RDONLY).unwrap();
        assert_eq!(pwrite(ro, b"x", 0, 0), EBADF);
        // SAFETY: `ro` is live.
        assert_eq!(unsafe { wbc_truncate(ro, 0) }, -libc::EBADF);
        assert_eq!(pread(ro, 10, 12_345, 0).unwrap(), &data[..10]);
        let wo = open_file(c, path, libc::O_WRONLY).unwrap();
        assert_eq!(pread(wo, 10, 0, 0).unwrap_err(), EBADF);
        assert_eq!(pread(wo, 10, 1 << 40, 0).unwrap_err(), EBADF, "EBADF even past end of file");
        assert_eq!(pwrite(wo, b"wo", 0, 0), 2);
        // SAFETY: each handle is live and closed once.
        unsafe {
            assert_eq!(wbc_close(ro), 0);
            assert_eq!(wbc_close(wo), 0);
        }

        let json = stats_json(c);
        assert!(json.contains("\"cached_bytes\":") && json.contains("\"written_bytes_by_reason\":{"), "{json}");
        let mut small = [b'X'; 8];
        // SAFETY: `small` is valid for its length.
        let n = unsafe { wbc_stats_json(c, small.as_mut_ptr().cast(), small.len()) };
        assert!(n as usize >= small.len());
        assert_eq!(small, [b'X'; 8], "nothing written to a short buffer");
        let mut exact = vec![b'X'; n as usize];
        // SAFETY: as above; one byte short of room for the NUL.
        assert_eq!(unsafe { wbc_stats_json(c, exact.as_mut_ptr().cast(), exact.len()) }, n);
        assert!(exact.iter().all(|&b| b == b'X'));

        // SAFETY: `c` is live.
        assert_eq!(unsafe { wbc_cache_sync(c) }, 0);
        // Closing the cache with a file open: the file fails with EBADF and
        // can still be closed.
        assert_eq!(pwrite(f, b"tail", 149_996, 0), 4);
        // SAFETY: `c` and `f` are live; `c` is not used after its close.
        unsafe {
            assert_eq!(wbc_cache_close(c), 0);
            assert_eq!(wbc_size(f), EBADF);
            assert_eq!(wbc_fsync(f), -libc::EBADF);
            assert_eq!(wbc_fdatasync(f), -libc::EBADF);
            assert_eq!(wbc_truncate(f, 0), -libc::EBADF);
        }
        assert_eq!(pread(f, 10, 0, 0).unwrap_err(), EBADF);
        assert_eq!(pwrite(f, b"late", 0, 0), EBADF);
        // SAFETY: `f` is live and closed once.
        assert_eq!(unsafe { wbc_close(f) }, 0);
    }

    #[test]
    fn handles_on_the_sim_backend() {
        exercise(
            "capacity=64M,dirty_limit=16M,io=sim",
            &CString::new("/sim/file").unwrap(),
            &CString::new("/sim/missing").unwrap(),
        );
    }

    #[test]
    fn handles_on_real_files_with_threads() {
        let dir = TempDir::new();
        let path = dir.path("data.bin");
        exercise("capacity=64M,dirty_limit=16M,io=threads", &path, &dir.path("missing"));
        // Durable after wbc_cache_close: the expected image, read with std.
        let mut expected = vec![0u8; 150_000];
        expected[..2].copy_from_slice(b"wo");
        let data = pattern(100_000, 7);
        expected[12_345..112_345].copy_from_slice(&data);
        expected[149_996..].copy_from_slice(b"tail");
        let on_disk = std::fs::read(dir.0.join("data.bin")).unwrap();
        assert_eq!(on_disk.len(), expected.len());
        assert!(on_disk == expected, "file content differs from what was written");
    }

    #[test]
    fn handles_on_real_files_with_uring() {
        // Falls back to threads where io_uring cannot be set up.
        let dir = TempDir::new();
        exercise("capacity=64M,dirty_limit=16M,io=uring", &dir.path("u.bin"), &dir.path("missing"));
        assert_eq!(std::fs::metadata(dir.0.join("u.bin")).unwrap().len(), 150_000);
    }

    /// A read does not zero the caller's buffer first: a read that ends at
    /// end of file leaves the rest of the buffer as it was.
    #[test]
    fn pread_writes_only_the_bytes_it_returns() {
        let dir = TempDir::new();
        let path = dir.path("p.bin");
        std::fs::write(dir.0.join("p.bin"), vec![1u8; 10_000]).unwrap();
        let c = open_cache("capacity=64M,dirty_limit=16M,io=threads");
        let f = open_file(c, &path, libc::O_RDONLY).unwrap();
        let mut buf = vec![0xeeu8; 20_000];
        // SAFETY: `f` is live and `buf` is valid for 20_000 bytes.
        let n = unsafe { wbc_pread(f, buf.as_mut_ptr().cast(), 20_000, 500, 0) };
        assert_eq!(n, 9_500);
        assert!(buf[..9_500].iter().all(|&b| b == 1), "the file's bytes");
        assert!(buf[9_500..].iter().all(|&b| b == 0xee), "past end of file the buffer is untouched");
        // SAFETY: handles are live and each closed once.
        unsafe {
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
    }

    #[test]
    fn truncate_on_open_and_uninitialized_read_buffers() {
        let dir = TempDir::new();
        let path = dir.path("t.bin");
        std::fs::write(dir.0.join("t.bin"), vec![1u8; 10_000]).unwrap();
        let c = open_cache("capacity=64M,dirty_limit=16M,io=threads");
        let f = open_file(c, &path, libc::O_RDWR).unwrap();
        // SAFETY: `f` is live.
        assert_eq!(unsafe { wbc_size(f) }, 10_000);
        let mut buf: Vec<std::mem::MaybeUninit<u8>> = Vec::with_capacity(20_000);
        // SAFETY: the spare capacity is valid for 20_000 bytes of writes.
        let n = unsafe { wbc_pread(f, buf.as_mut_ptr().cast(), 20_000, 500, 0) };
        assert_eq!(n, 9_500);
        // SAFETY: wbc_pread initialized the first `n` bytes.
        let read = unsafe {
            buf.set_len(n as usize);
            std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len())
        };
        assert!(read.iter().all(|&b| b == 1));
        let t = open_file(c, &path, libc::O_RDWR | libc::O_TRUNC).unwrap();
        // SAFETY: handles are live and each closed once.
        unsafe {
            assert_eq!(wbc_size(t), 0);
            assert_eq!(wbc_size(f), 0, "both handles share the inode");
            assert_eq!(wbc_close(t), 0);
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
        assert_eq!(std::fs::metadata(dir.0.join("t.bin")).unwrap().len(), 0);
    }

    #[test]
    fn concurrent_writers_on_one_handle() {
        let dir = TempDir::new();
        let c = open_cache("capacity=64M,dirty_limit=16M,io=threads");
        let f = open_file(c, &dir.path("mt.bin"), libc::O_CREAT | libc::O_RDWR).unwrap();
        let handle = f as usize;
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let f = handle as *mut wbc_file;
                    for i in 0..16u64 {
                        let chunk = pattern(10_000, t * 16 + i as u8);
                        assert_eq!(pwrite(f, &chunk, (u64::from(t) * 16 + i) * 10_000, 0), 10_000);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: `f` is live.
        assert_eq!(unsafe { wbc_fsync(f) }, 0);
        for k in 0..64u64 {
            assert_eq!(pread(f, 10_000, k * 10_000, 0).unwrap(), pattern(10_000, k as u8), "chunk {k}");
        }
        // SAFETY: handles are live and each closed once.
        unsafe {
            assert_eq!(wbc_close(f), 0);
            assert_eq!(wbc_cache_close(c), 0);
        }
    }
}
