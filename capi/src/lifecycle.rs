//! Handles come and go here: creating, syncing and closing a cache, and
//! opening and closing files on it, with the open(2) flags mapped to
//! [`OpenOptions`].
//!
//! `wbc_cache_open` and `wbc_open` box what they create and hand the caller
//! the raw pointer, writing NULL to a non-NULL `out` first so that a failed
//! call never leaves it unset; `wbc_cache_close` and `wbc_close` take the
//! box back, once. A file holds the cache's shared state through its own reference,
//! not through the `wbc_cache` box, so the two may be closed in either
//! order.

use super::failure::{einval, guard_int, Failure};
use super::handles::{c_path, cache_ref, wbc_cache, wbc_file};
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::ptr;
use wbcache::Cache;
use wbcache::Config;
use wbcache::OpenOptions;

/// `wbc_open` flag: every read and write of the handle is uncached, as if
/// each passed `WBC_DONTCACHE` ([`OpenOptions::dontcache`]). Bit 30, which
/// no Linux architecture uses for an open(2) flag; the header's
/// `WBC_O_DONTCACHE`.
pub const WBC_O_DONTCACHE: c_int = 0x4000_0000;

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
pub(super) const KERNEL_O_LARGEFILE: c_int = 0o100000;
#[cfg(any(target_arch = "arm", target_arch = "aarch64"))]
pub(super) const KERNEL_O_LARGEFILE: c_int = 0o400000;
#[cfg(not(any(
    target_arch = "x86",
    target_arch = "x86_64",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "arm",
    target_arch = "aarch64"
)))]
pub(super) const KERNEL_O_LARGEFILE: c_int = libc::O_LARGEFILE;

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
        // SAFETY: `out` was checked non-NULL at the top and the caller
        // guarantees it is valid for a pointer write.
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
/// unknown flag bits, an invalid access mode or `O_APPEND` without write
/// access (which `OpenOptions::append` would give). `O_TRUNC` with
/// `O_APPEND` leaves `truncate` off: [`wbc_open`] empties the file itself.
pub(super) fn open_options(oflags: c_int, mode: c_uint) -> Result<OpenOptions, Failure> {
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
    let append = oflags & libc::O_APPEND != 0;
    if append && !write {
        return Err(einval("O_APPEND needs write access (O_WRONLY or O_RDWR)"));
    }
    Ok(OpenOptions::new()
        .read(read)
        .write(write)
        .create(create)
        .create_new(create && oflags & libc::O_EXCL != 0)
        .truncate(oflags & libc::O_TRUNC != 0 && !append)
        .dontcache(oflags & WBC_O_DONTCACHE != 0)
        .append(append)
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
        let file = cache.open(path, &options).map_err(|e| Failure::on_path(path, e))?;
        // O_TRUNC with O_APPEND: open(2) takes the pair, which OpenOptions
        // refuses as std's does; the file is emptied here instead (a block
        // device is not, as open(2) ignores O_TRUNC on one).
        if oflags & libc::O_APPEND != 0 && oflags & libc::O_TRUNC != 0 && !file.is_block_device() {
            file.set_len(0).map_err(|e| Failure::on_path(path, e))?;
        }
        // SAFETY: `out` was checked non-NULL at the top and the caller
        // guarantees it is valid for a pointer write.
        unsafe { out.write(Box::into_raw(Box::new(wbc_file { file }))) };
        Ok(())
    })
}

/// Frees a file handle. Like close(2) it does not write back: dirty data stays
/// cached for the flusher (use [`wbc_fsync`](super::wbc_fsync) first for
/// durability). Valid after [`wbc_cache_close`]. Returns 0, or `-EINVAL` for
/// NULL.
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
