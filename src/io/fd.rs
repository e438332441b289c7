//! Shared code for the backends over real file descriptors (`uring`,
//! `threads`).
//!
//! [`FdStore`] owns one open regular file or block device and implements
//! [`BackingStore`]. How one attempt of a batch is executed is delegated to an
//! [`FdEngine`] (io_uring, a thread pool, or [`SyncEngine`] inline), so
//! opening, probing, sizing and syncing live here once.
//!
//! Invariants:
//! - The descriptor is opened with `O_DIRECT` whenever the file system accepts
//!   it; `info().direct_io` is false only when the `O_DIRECT` open was refused
//!   with `EINVAL` and the buffered retry succeeded.
//! - Only regular files and block devices are opened; anything else is
//!   refused before any I/O (and, when the path already exists, before it is
//!   opened at all, so a FIFO cannot block the open).
//! - `info().logical_block_size <= BLOCK_SIZE`, so the folio code's
//!   `BLOCK_SIZE`-aligned I/O is always valid `O_DIRECT` I/O on the store.
//! - An engine returns from [`FdEngine::submit_once`] only after every I/O it
//!   started has completed: buffers are borrowed for that call only.
//! - Syscall failures keep their errno (`raw_os_error()`), and so does a
//!   directory (`EISDIR`). The other refusals this module detects itself are
//!   `EINVAL` with a message ([`error_with_context`]); their kind,
//!   `InvalidInput`, maps back to `EINVAL` for callers that map by kind.
//!   Messages do not repeat the path: callers add it.

use std::error::Error;
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::store::{Attempt, BackingInfo, BackingStore, IoOp, IoPriority, OpenHow, Symlink, BLOCK_SIZE};
use crate::base::sys::{self, Fd, SyncKind};

/// Executes one attempt of a batch on a raw descriptor; the part of a
/// backend that differs between io_uring and the thread pool.
pub trait FdEngine: Send + Sync {
    /// Same contract as [`BackingStore::submit_once`]: one [`Attempt`] per
    /// op, in order, `Ok(0)` for ops whose `result` is already set. Must not
    /// return while any I/O it started is still running.
    fn submit_once(&self, fd: RawFd, ops: &mut [IoOp<'_>]) -> Vec<Attempt>;
}

/// An engine that runs every op inline with `preadv`/`pwritev`, one after
/// the other. Used by tests and as the io_uring engine's fallback.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncEngine;

impl FdEngine for SyncEngine {
    fn submit_once(&self, fd: RawFd, ops: &mut [IoOp<'_>]) -> Vec<Attempt> {
        ops.iter_mut().map(|op| if op.result.is_some() { Ok(0) } else { rw_once(fd, op) }).collect()
    }
}

/// Executes one attempt of `op` (its [`IoOp::remaining_iovecs`]) with
/// `preadv`/`pwritev` on the calling thread. `EINTR` and short counts are
/// returned as they are; [`super::run_batch`] retries them.
pub fn rw_once(fd: RawFd, op: &mut IoOp<'_>) -> Attempt {
    let write = op.is_write();
    let (offset, iovecs) = op.remaining_iovecs();
    // SAFETY: the iovecs point into `op`'s buffers, which `op` borrows (mutably
    // for a read) for at least this whole call, and nothing else touches them
    // while the syscall runs.
    unsafe { rw_iovecs(fd, offset, &iovecs, write) }
}

/// `preadv`/`pwritev` of `iovecs` at `offset`.
///
/// # Safety
///
/// Every iovec must describe memory that stays valid (and, for a read,
/// writable and not aliased by live references) for the whole call.
pub unsafe fn rw_iovecs(fd: RawFd, offset: u64, iovecs: &[libc::iovec], write: bool) -> Attempt {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if iovecs.len() > libc::c_int::MAX as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: the caller guarantees the iovecs are valid for the call; the
    // array itself is borrowed for the call.
    unsafe { sys::rw_vectored(fd, iovecs, offset, write) }
}

/// The `ioprio` value a request of `priority` carries to the device:
/// best-effort class, level 0 (highest) for sync, level 7 (lowest) for async;
/// the idle class for idle. Schedulers that know only classes (mq-deadline)
/// serve sync and async alike; the idle class waits for everything else.
pub fn ioprio_of(priority: IoPriority) -> u16 {
    const IOPRIO_CLASS_BE: u16 = 2;
    const IOPRIO_CLASS_IDLE: u16 = 3;
    const IOPRIO_CLASS_SHIFT: u16 = 13;
    match priority {
        IoPriority::Sync => IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT,
        IoPriority::Async => (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7,
        IoPriority::Idle => IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
    }
}

/// An OS error this module detected itself: an errno plus a message that
/// says what was wrong (`io::Error::from_raw_os_error` cannot carry one).
#[derive(Debug)]
pub struct OsErrorContext {
    errno: i32,
    message: String,
}

impl OsErrorContext {
    #[cfg(test)]
    pub fn errno(&self) -> i32 {
        self.errno
    }
}

impl fmt::Display for OsErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, io::Error::from_raw_os_error(self.errno))
    }
}

impl Error for OsErrorContext {}

/// An `io::Error` of the kind of `errno`, carrying `errno` and `message`
/// (read back by downcasting to [`OsErrorContext`]). Use it only for errnos
/// whose kind maps back to the same errno (`EINVAL`), since
/// `raw_os_error()` is `None` on the result.
pub fn error_with_context(errno: i32, message: impl Into<String>) -> io::Error {
    let kind = io::Error::from_raw_os_error(errno).kind();
    io::Error::new(kind, OsErrorContext { errno, message: message.into() })
}

/// One open regular file or block device.
pub struct FdStore {
    fd: Fd,
    info: BackingInfo,
    engine: Arc<dyn FdEngine>,
    /// A second descriptor of the file without O_DIRECT, opened on first
    /// use, for [`BackingStore::write_tail`]; `None` when it cannot be
    /// opened (then the tail is written whole, padded).
    tail_fd: std::sync::OnceLock<Option<Fd>>,
    /// The span the buffered writes of [`BackingStore::write_tail`]
    /// covered since the last store sync (`start >= end`: none), dropped
    /// from the kernel's cache once a sync made it durable: see
    /// [`FdStore::drop_buffered_pages`].
    buffered_start: AtomicU64,
    buffered_end: AtomicU64,
}

/// Opens `path` as described by `how` and wraps it in an [`FdStore`] that
/// executes I/O with `engine`.
pub fn open_fd_store(path: &Path, how: &OpenHow, engine: Arc<dyn FdEngine>) -> io::Result<Arc<dyn BackingStore>> {
    Ok(Arc::new(FdStore::open(path, how, engine)?))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    Regular,
    Block,
}

/// Classifies `mode`: directories are refused with `EISDIR`, every other
/// type that does not hold data at offsets with `EINVAL`.
fn store_kind(mode: libc::mode_t) -> io::Result<StoreKind> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Ok(StoreKind::Regular),
        libc::S_IFBLK => Ok(StoreKind::Block),
        libc::S_IFDIR => Err(io::Error::from_raw_os_error(libc::EISDIR)),
        _ => Err(error_with_context(libc::EINVAL, "not a regular file or block device")),
    }
}

/// `open(2)` flags for `how`, without `O_DIRECT`. Follows
/// `std::fs::OpenOptions`: some access is required, and creating or
/// truncating requires write access (`O_TRUNC` on a read-only descriptor is
/// unspecified by POSIX).
fn open_flags(how: &OpenHow) -> io::Result<libc::c_int> {
    let access = match (how.read, how.write) {
        (true, false) => libc::O_RDONLY,
        (false, true) => libc::O_WRONLY,
        (true, true) => libc::O_RDWR,
        (false, false) => {
            return Err(error_with_context(libc::EINVAL, "OpenHow asks for neither read nor write access"))
        }
    };
    if (how.create || how.create_new || how.truncate) && !how.write {
        return Err(error_with_context(libc::EINVAL, "creating or truncating a backing store requires write access"));
    }
    let mut flags = access | libc::O_CLOEXEC;
    if how.create_new {
        flags |= libc::O_CREAT | libc::O_EXCL;
    } else if how.create {
        flags |= libc::O_CREAT;
    }
    if how.truncate {
        flags |= libc::O_TRUNC;
    }
    Ok(flags)
}

/// Permission bits for a created file. `OpenHow::default()` has `mode == 0`,
/// which would create a file nobody may open again; treat it as "unspecified"
/// and use 0o666 (less the umask) like `std::fs::OpenOptions`.
fn create_mode(how: &OpenHow) -> libc::mode_t {
    if how.mode == 0 {
        0o666
    } else {
        (how.mode & 0o7777) as libc::mode_t
    }
}

fn open_raw(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<Fd> {
    loop {
        match sys::open(path, flags, mode) {
            Ok(fd) => return Ok(Fd::new(fd)),
            // open(2) can be interrupted (e.g. waiting on a lease break).
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// What the store code reads of a file's status: never its timestamps.
#[derive(Clone, Copy, Debug)]
struct StoreStat {
    mode: u32,
    size: u64,
    dev: u64,
    rdev: u64,
    ino: u64,
    nlink: u32,
}

/// `statx(2)` asked for no timestamp. On Linux 6.13 and later
/// (multigrain timestamps) a stat that returns a file's ctime or mtime
/// marks its ctime as seen, and the file's next write must then update
/// the ctime at fine granularity: the inode is dirtied (a journal update
/// for the next fsync), and an O_DIRECT write through io_uring, which
/// cannot do that without blocking, is handed to a kernel worker thread.
/// An `fstat` of the store per sync, or a `stat` per open of a SQLite
/// journal, cost that on every commit. Falls back to `fstatat(2)` where
/// `statx` does not exist.
fn stat_quietly(dirfd: RawFd, path: &CStr, flags: i32) -> io::Result<StoreStat> {
    const MASK: u32 = libc::STATX_TYPE | libc::STATX_MODE | libc::STATX_NLINK | libc::STATX_INO | libc::STATX_SIZE;
    let mut stx = MaybeUninit::<libc::statx>::uninit();
    let stated = sys::statx(dirfd, path, flags, MASK, stx.as_mut_ptr());
    if stated.is_ok() {
        // SAFETY: statx(2) succeeded, so it filled the struct.
        let stx = unsafe { stx.assume_init() };
        return Ok(StoreStat {
            mode: u32::from(stx.stx_mode),
            size: stx.stx_size,
            dev: libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
            rdev: libc::makedev(stx.stx_rdev_major, stx.stx_rdev_minor),
            ino: stx.stx_ino,
            nlink: stx.stx_nlink,
        });
    }
    match stated {
        Err(e) if e.raw_os_error() != Some(libc::ENOSYS) => return Err(e),
        _ => {}
    }
    let mut st = MaybeUninit::<libc::stat>::uninit();
    sys::fstatat(dirfd, path, st.as_mut_ptr(), flags)?;
    // SAFETY: fstatat(2) succeeded, so it initialised the whole struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // dev_t, ino_t, nlink_t and off_t differ between targets.
    Ok(StoreStat {
        mode: st.st_mode,
        size: u64::try_from(st.st_size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?,
        dev: st.st_dev as u64,
        rdev: st.st_rdev as u64,
        ino: st.st_ino as u64,
        nlink: st.st_nlink as u32,
    })
}

/// Opens `c_path` with O_DIRECT, or without it where the file system
/// refuses it (tmpfs before Linux 6.6, procfs, some FUSE file systems):
/// run buffered rather than not at all. Returns the descriptor and whether
/// it is O_DIRECT.
fn open_preferring_direct(c_path: &CStr, flags: i32, mode: libc::mode_t) -> io::Result<(Fd, bool)> {
    match open_raw(c_path, flags | libc::O_DIRECT, mode) {
        Ok(fd) => Ok((fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => match open_raw(c_path, flags, mode) {
            Ok(fd) => Ok((fd, false)),
            // Some file systems refuse O_DIRECT only after O_CREAT created
            // the file, so the O_EXCL retry trips over the file we just
            // made. The first attempt did not fail with EEXIST, so the file
            // did not exist before this call: open it without O_EXCL.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL != 0 => {
                Ok((open_raw(c_path, flags & !(libc::O_EXCL | libc::O_CREAT), mode)?, false))
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Runs `call` again while it fails with `EINTR`.
fn retry_interrupted(mut call: impl FnMut() -> io::Result<()>) -> io::Result<()> {
    loop {
        match call() {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            result => return result,
        }
    }
}

pub(crate) fn path_cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| error_with_context(libc::EINVAL, "path contains a NUL byte"))
}

fn stat_path(path: &CStr, symlink: Symlink) -> io::Result<StoreStat> {
    let flags = match symlink {
        Symlink::Follow => 0,
        Symlink::NoFollow => libc::AT_SYMLINK_NOFOLLOW,
    };
    stat_quietly(libc::AT_FDCWD, path, flags)
}

fn fstat(fd: RawFd) -> io::Result<StoreStat> {
    stat_quietly(fd, c"", libc::AT_EMPTY_PATH)
}

/// `_IOR(ty, nr, size)` for this architecture (the direction bits sit
/// higher on powerpc, mips and sparc).
const fn ioc_read(ty: u32, nr: u32, size: usize) -> u32 {
    const READ_DIRECTION: u32 = if cfg!(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips32r6",
        target_arch = "mips64",
        target_arch = "mips64r6",
        target_arch = "sparc",
        target_arch = "sparc64"
    )) {
        2 << 29
    } else {
        2 << 30
    };
    READ_DIRECTION | ((size as u32) << 16) | (ty << 8) | nr
}

/// `BLKGETSIZE64` (`_IOR(0x12, 114, size_t)`); libc does not export it. The
/// kernel writes a u64 whatever the encoded size says.
const BLKGETSIZE64: libc::Ioctl = ioc_read(0x12, 114, std::mem::size_of::<usize>()) as libc::Ioctl;

fn block_device_size_bytes(fd: RawFd) -> io::Result<u64> {
    let mut size_bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes exactly one u64.
    unsafe { sys::ioctl_read(fd, BLKGETSIZE64, &mut size_bytes) }?;
    Ok(size_bytes)
}

fn block_device_logical_block_size(fd: RawFd) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes exactly one int.
    unsafe { sys::ioctl_read(fd, libc::BLKSSZGET, &mut size) }?;
    u32::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `(offset alignment, memory alignment)` the file system demands of
/// `O_DIRECT` on `fd`, or `None` when the kernel cannot tell (no statx, no
/// `STATX_DIOALIGN`, or 0 meaning "not supported").
fn dio_alignment(fd: RawFd) -> Option<(u32, u32)> {
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    // With AT_EMPTY_PATH, the empty path makes statx describe `fd`.
    sys::statx(fd, c"", libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, stx.as_mut_ptr()).ok()?;
    // SAFETY: the buffer was zeroed and statx succeeded; every field is plain
    // integer data, valid for any bit pattern.
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((stx.stx_dio_offset_align, stx.stx_dio_mem_align))
}

/// Fallback O_DIRECT alignment when the kernel cannot report one: the
/// traditional sector size, which `BLOCK_SIZE` I/O satisfies anyway.
const DEFAULT_LOGICAL_BLOCK_SIZE: u32 = 512;

/// Refuses a store whose O_DIRECT alignment `BLOCK_SIZE`-aligned I/O from
/// `BLOCK_SIZE`-aligned buffers would not meet.
fn check_dio_alignment(logical_block_size: u32, mem_align: u32) -> io::Result<()> {
    if logical_block_size as usize > BLOCK_SIZE {
        return Err(error_with_context(
            libc::EINVAL,
            format!(
                "logical block size {logical_block_size} exceeds the {BLOCK_SIZE}-byte block size wbcache does \
                 I/O in"
            ),
        ));
    }
    if mem_align as usize > BLOCK_SIZE {
        return Err(error_with_context(
            libc::EINVAL,
            format!(
                "O_DIRECT needs {mem_align}-byte aligned memory, more than the {BLOCK_SIZE}-byte alignment of \
                 wbcache buffers"
            ),
        ));
    }
    Ok(())
}

/// `BackingInfo::store_id`'s first half for a block device: not a device
/// number any file system reports as `st_dev` (the kernel's `dev_t` has 32
/// bits), so a device's key never equals a regular file's.
const BLOCK_DEVICE_STORE_DEV: u64 = u64::MAX;

/// The identity of a block device: the device itself (`st_rdev`), not the
/// node that named it. `/dev/loop0` and a node made with `mknod` for the
/// same major:minor are two inodes (on two file systems, even) of one
/// device; keyed by node, the cache would hold two copies of the device's
/// blocks, each blind to the other's writes, and write the stale one back
/// over the new.
fn block_device_store_id(st_rdev: u64) -> (u64, u64) {
    (BLOCK_DEVICE_STORE_DEV, st_rdev)
}

/// [`crate::io::Io::store_id_at`] for the descriptor backends: the key an
/// open of `path` would get, from `stat(2)` (or `lstat(2)`, as `symlink`
/// says).
pub fn store_id_at(path: &Path, symlink: Symlink) -> io::Result<Option<(u64, u64)>> {
    let st = stat_path(&path_cstring(path)?, symlink)?;
    Ok(match st.mode & libc::S_IFMT {
        libc::S_IFREG => Some((st.dev, st.ino)),
        libc::S_IFBLK => Some(block_device_store_id(st.rdev)),
        _ => None,
    })
}

impl FdStore {
    /// Opens `path`; see [`open_fd_store`].
    pub fn open(path: &Path, how: &OpenHow, engine: Arc<dyn FdEngine>) -> io::Result<FdStore> {
        let flags = open_flags(how)?;
        let mode = create_mode(how);
        let c_path = path_cstring(path)?;

        // Refuse a FIFO, socket, character device or directory before opening
        // it: opening a FIFO blocks and opening a device can have side effects.
        // Skipped for create_new, where an existing path must fail with EEXIST.
        // A missing path is left to open(2) (O_CREAT, or ENOENT).
        if !how.create_new {
            if let Ok(st) = stat_path(&c_path, Symlink::Follow) {
                store_kind(st.mode)?;
            }
        }

        let (fd, direct_io) = open_preferring_direct(&c_path, flags, mode)?;
        let raw = fd.as_raw_fd();

        let st = fstat(raw)?;
        // The authoritative check: the path may have changed since stat_path.
        let kind = store_kind(st.mode)?;
        let (st_dev, st_rdev, st_ino) = (st.dev, st.rdev, st.ino);

        let (len_at_open, logical_block_size, mem_align, device_id, store_id) = match kind {
            StoreKind::Block => {
                let lbs = block_device_logical_block_size(raw)?;
                // Block devices want memory aligned to the logical block size.
                (block_device_size_bytes(raw)?, lbs, lbs, st_rdev, block_device_store_id(st_rdev))
            }
            StoreKind::Regular => {
                let size = st.size;
                let (lbs, mem_align) = dio_alignment(raw).unwrap_or((DEFAULT_LOGICAL_BLOCK_SIZE, 0));
                (size, lbs, mem_align, st_dev, (st_dev, st_ino))
            }
        };
        check_dio_alignment(logical_block_size, if direct_io { mem_align } else { 0 })?;

        let info = BackingInfo {
            len_at_open,
            logical_block_size,
            is_block_device: kind == StoreKind::Block,
            direct_io,
            device_id,
            store_id,
        };
        let store = FdStore {
            fd,
            info,
            engine,
            tail_fd: std::sync::OnceLock::new(),
            buffered_start: AtomicU64::new(u64::MAX),
            buffered_end: AtomicU64::new(0),
        };
        // Its tail descriptor now, on the opener's thread, not later on a
        // flusher's (see `io::spawn_io_thread` for why).
        store.tail_descriptor();
        Ok(store)
    }
}

impl FdStore {
    /// After a store sync: drops from the kernel's cache the pages that
    /// buffered writes left there (clean now, unless written again since;
    /// `POSIX_FADV_DONTNEED` leaves dirty pages alone). A cached page
    /// under a later O_DIRECT write makes that write unable to complete
    /// without blocking (the kernel must invalidate the page first), and
    /// io_uring then hands it to a kernel worker thread: a WAL's next
    /// frames, or a journal's header rewritten after its first sync, paid
    /// that on every commit. Advice only: its failure changes nothing.
    ///
    /// The page holding a partial end of the span stays: it is the file's
    /// tail, which the next small append writes through the kernel's cache
    /// again, and a buffered write into part of a page that is not cached
    /// must first read it from the device (a WAL or log synced after each
    /// record paid that read, about 40 µs, on every commit). Whoever
    /// appends more than a page past it writes that page buffered too
    /// (`mark_sync_append` counts from the page holding the store's
    /// length), so no O_DIRECT write lands on it while the append is small.
    fn drop_buffered_pages(&self) {
        if self.buffered_end.load(Ordering::Acquire) == 0 {
            return;
        }
        let start = self.buffered_start.swap(u64::MAX, Ordering::AcqRel);
        let end = self.buffered_end.swap(0, Ordering::AcqRel);
        let (start, end) = (start - start % BLOCK_SIZE as u64, end - end % BLOCK_SIZE as u64);
        let (Ok(offset), Ok(len)) = (i64::try_from(start), i64::try_from(end.saturating_sub(start))) else {
            return;
        };
        if len > 0 {
            let _ = sys::fadvise(self.fd.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED);
        }
    }

    /// The descriptor [`BackingStore::write_tail`] writes through: the
    /// store's own when it is not O_DIRECT, else a second one of the same
    /// file opened through `/proc/self/fd` (so it is the same file even if
    /// renamed or unlinked since), read-write; `None` for a block device
    /// (whose size is whole blocks), a read-only store, or when the second
    /// open fails.
    fn tail_descriptor(&self) -> Option<&Fd> {
        if self.info.is_block_device {
            return None;
        }
        if !self.info.direct_io {
            return Some(&self.fd);
        }
        self.tail_fd
            .get_or_init(|| {
                let flags = sys::fcntl(self.fd.as_raw_fd(), libc::F_GETFL, 0).ok()?;
                if flags & libc::O_ACCMODE == libc::O_RDONLY {
                    return None;
                }
                let path = CString::new(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).ok()?;
                sys::open(&path, libc::O_WRONLY | libc::O_CLOEXEC, 0).ok().map(Fd::new)
            })
            .as_ref()
    }
}

impl AsRawFd for FdStore {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl BackingStore for FdStore {
    fn info(&self) -> &BackingInfo {
        &self.info
    }

    fn len(&self) -> io::Result<u64> {
        if self.info.is_block_device {
            block_device_size_bytes(self.fd.as_raw_fd())
        } else {
            Ok(fstat(self.fd.as_raw_fd())?.size)
        }
    }

    fn accepts_len(&self, len: u64) -> io::Result<bool> {
        if self.info.is_block_device {
            return Ok(true); // bounded by the device's size instead
        }
        let Ok(offset) = i64::try_from(len) else { return Ok(false) };
        // lseek checks the offset against the file system's largest file
        // size (the limit pwrite enforces) and changes nothing we use: all
        // our I/O names its offset.
        match sys::lseek(self.fd.as_raw_fd(), offset, libc::SEEK_SET) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EOVERFLOW)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn is_unlinked(&self) -> io::Result<bool> {
        Ok(!self.info.is_block_device && fstat(self.fd.as_raw_fd())?.nlink == 0)
    }

    fn supports_tail_writes(&self) -> bool {
        self.tail_descriptor().is_some()
    }

    fn write_tail(&self, offset: u64, data: &[u8]) -> io::Result<usize> {
        let fd = self.tail_descriptor().ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))?;
        self.buffered_start.fetch_min(offset, Ordering::AcqRel);
        self.buffered_end.fetch_max(offset.saturating_add(data.len() as u64), Ordering::AcqRel);
        let mut done = 0;
        while done < data.len() {
            let at = i64::try_from(offset + done as u64).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
            match sys::pwrite(fd.as_raw_fd(), &data[done..], at) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the file accepted no bytes")),
                Ok(n) => done += n,
                Err(e) if super::store::is_retryable(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.info.is_block_device {
            let size = block_device_size_bytes(self.fd.as_raw_fd())?;
            if len == size {
                return Ok(());
            }
            return Err(error_with_context(
                libc::EINVAL,
                format!("cannot resize a block device ({size} bytes) to {len} bytes"),
            ));
        }
        let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        retry_interrupted(|| sys::ftruncate(self.fd.as_raw_fd(), len))
    }

    fn sync(&self, kind: SyncKind) -> io::Result<()> {
        retry_interrupted(|| sys::sync(self.fd.as_raw_fd(), kind))?;
        self.drop_buffered_pages();
        Ok(())
    }

    fn submit_once(&self, ops: &mut [IoOp<'_>]) -> Vec<Attempt> {
        self.engine.submit_once(self.fd.as_raw_fd(), ops)
    }

    fn allocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        let efbig = || io::Error::from_raw_os_error(libc::EFBIG);
        let offset = i64::try_from(offset).map_err(|_| efbig())?;
        let len = i64::try_from(len).map_err(|_| efbig())?;
        retry_interrupted(|| sys::fallocate(self.fd.as_raw_fd(), mode, offset, len))
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }
}

/// Helpers and a backend-independent test suite shared by the `fd`, `uring`
/// and `threads` tests.
#[cfg(test)]
pub(crate) mod testutil {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::OsErrorContext;
    use crate::base::sys::SyncKind;
    use crate::io::{read_full, run_batch, write_full, BackingStore, IoBufs, IoOp, IoPriority, OpenHow, BLOCK_SIZE};

    /// Opens a backing store; the backend under test.
    pub type Opener<'a> = &'a dyn Fn(&Path, &OpenHow) -> io::Result<Arc<dyn BackingStore>>;

    pub use crate::buf::AlignedBuf;

    /// Test buffers filled with a pattern.
    pub trait PatternBuf: Sized {
        /// A buffer filled with a pattern that differs per `seed` and per
        /// position, so misplaced or stale data is detected.
        fn pattern(len: usize, seed: u32) -> Self;
    }

    impl PatternBuf for AlignedBuf {
        fn pattern(len: usize, seed: u32) -> Self {
            let mut buf = AlignedBuf::zeroed(len);
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern_byte(seed, i);
            }
            buf
        }
    }

    pub fn pattern_byte(seed: u32, index: usize) -> u8 {
        let x = (index as u32).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503).wrapping_add(seed >> 3);
        (x >> 13) as u8 ^ (index / BLOCK_SIZE) as u8
    }

    /// A unique path under `dir`, removed (file or empty directory) on drop.
    pub struct TempPath(pub PathBuf);

    impl TempPath {
        pub fn new_in(dir: &Path, tag: &str) -> Self {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let name =
                format!("wbcache-{tag}-{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
            TempPath(dir.join(name))
        }

        pub fn new(tag: &str) -> Self {
            Self::new_in(&std::env::temp_dir(), tag)
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0).or_else(|_| std::fs::remove_dir(&self.0));
        }
    }

    pub fn rw_create() -> OpenHow {
        OpenHow { read: true, write: true, create: true, mode: 0o600, ..OpenHow::default() }
    }

    pub fn read_only() -> OpenHow {
        OpenHow { read: true, ..OpenHow::default() }
    }

    pub fn errno(err: &io::Error) -> i32 {
        errno_of(err).unwrap_or_else(|| panic!("error without errno: {err}"))
    }

    /// The errno of a syscall error or of an [`OsErrorContext`] error.
    pub fn errno_of(err: &io::Error) -> Option<i32> {
        err.raw_os_error().or_else(|| err.get_ref()?.downcast_ref::<OsErrorContext>().map(OsErrorContext::errno))
    }

    /// Writes three blocks and reads them back, at a non-zero offset.
    pub fn round_trip(open: Opener<'_>) {
        let path = TempPath::new("round-trip");
        let store = open(&path.0, &rw_create()).expect("open");
        assert_eq!(store.info().len_at_open, 0);
        assert!(store.info().logical_block_size as usize <= BLOCK_SIZE);
        assert!(store.info().logical_block_size.is_power_of_two());
        let data = AlignedBuf::pattern(3 * BLOCK_SIZE, 1);
        write_full(&*store, vec![&data], BLOCK_SIZE as u64, IoPriority::Sync).expect("write");
        assert_eq!(store.len().unwrap(), 4 * BLOCK_SIZE as u64);

        let mut back = AlignedBuf::zeroed(3 * BLOCK_SIZE);
        let n = read_full(&*store, &mut back, BLOCK_SIZE as u64, IoPriority::Async).expect("read");
        assert_eq!(n, 3 * BLOCK_SIZE);
        assert!(back[..] == data[..], "data read back differs from data written");

        // The hole before the data reads as zeros.
        let mut hole = AlignedBuf::pattern(BLOCK_SIZE, 9);
        assert_eq!(read_full(&*store, &mut hole, 0, IoPriority::Sync).unwrap(), BLOCK_SIZE);
        assert!(hole.iter().all(|&b| b == 0));

        store.sync(SyncKind::DataOnly).expect("fdatasync");
        store.sync(SyncKind::All).expect("fsync");

        // A second handle sees the data (no cache between handles) and the
        // same store identity.
        let again = open(&path.0, &read_only()).expect("reopen");
        assert_eq!(again.info().store_id, store.info().store_id);
        assert_eq!(again.info().device_id, store.info().device_id);
        assert_eq!(again.info().len_at_open, 4 * BLOCK_SIZE as u64);
        let mut back2 = AlignedBuf::zeroed(3 * BLOCK_SIZE);
        read_full(&*again, &mut back2, BLOCK_SIZE as u64, IoPriority::Sync).unwrap();
        assert!(back2[..] == data[..]);
    }

    /// One write op gathering several buffers, read back by one op scattering
    /// into buffers of other sizes.
    pub fn vectored(open: Opener<'_>) {
        let path = TempPath::new("vectored");
        let store = open(&path.0, &rw_create()).expect("open");
        let a = AlignedBuf::pattern(BLOCK_SIZE, 11);
        let b = AlignedBuf::pattern(2 * BLOCK_SIZE, 12);
        let c = AlignedBuf::pattern(BLOCK_SIZE, 13);
        write_full(&*store, vec![&a, &b, &c], 0, IoPriority::Async).expect("vectored write");

        let mut x = AlignedBuf::zeroed(3 * BLOCK_SIZE);
        let mut y = AlignedBuf::zeroed(BLOCK_SIZE);
        let mut ops = [IoOp {
            offset: 0,
            bufs: IoBufs::Read(vec![&mut x, &mut y]),
            priority: IoPriority::Sync,
            done: 0,
            result: None,
        }];
        run_batch(&*store, &mut ops);
        assert_eq!(ops[0].result.take().unwrap().unwrap(), 4 * BLOCK_SIZE);
        drop(ops);
        let mut expected = Vec::new();
        expected.extend_from_slice(&a);
        expected.extend_from_slice(&b);
        expected.extend_from_slice(&c);
        assert!(x[..] == expected[..3 * BLOCK_SIZE]);
        assert!(y[..] == expected[3 * BLOCK_SIZE..]);
    }

    /// Reads that run into end of file come back short; at or past it, empty.
    pub fn short_read_past_eof(open: Opener<'_>) {
        let path = TempPath::new("eof");
        let store = open(&path.0, &rw_create()).expect("open");
        let data = AlignedBuf::pattern(2 * BLOCK_SIZE, 21);
        write_full(&*store, vec![&data], 0, IoPriority::Sync).unwrap();

        let mut buf = AlignedBuf::pattern(4 * BLOCK_SIZE, 22);
        let n = read_full(&*store, &mut buf, BLOCK_SIZE as u64, IoPriority::Sync).unwrap();
        assert_eq!(n, BLOCK_SIZE);
        assert!(buf[..BLOCK_SIZE] == data[BLOCK_SIZE..]);

        assert_eq!(read_full(&*store, &mut buf, 2 * BLOCK_SIZE as u64, IoPriority::Sync).unwrap(), 0);
        assert_eq!(read_full(&*store, &mut buf, 100 * BLOCK_SIZE as u64, IoPriority::Sync).unwrap(), 0);

        // End of file inside a block: the first attempt is short and the
        // driver's retry starts at the (unaligned) end of file.
        let tail = 2 * BLOCK_SIZE + 100;
        store.set_len(tail as u64).unwrap();
        let n = read_full(&*store, &mut buf, 0, IoPriority::Sync).unwrap();
        assert_eq!(n, tail);
        assert!(buf[..2 * BLOCK_SIZE] == data[..]);
        assert!(buf[2 * BLOCK_SIZE..tail].iter().all(|&b| b == 0));
    }

    /// 64 writes in one batch, then 64 reads in one batch (more than a small
    /// ring holds, so io_uring submits in waves).
    pub fn batch_of_64(open: Opener<'_>) {
        const OPS: usize = 64;
        let path = TempPath::new("batch");
        let store = open(&path.0, &rw_create()).expect("open");
        let bufs: Vec<AlignedBuf> = (0..OPS).map(|i| AlignedBuf::pattern(BLOCK_SIZE, 100 + i as u32)).collect();
        // Scatter the ops so neighbouring indices are not neighbouring blocks.
        let block_of = |i: usize| ((i * 37) % OPS) as u64;
        let mut writes: Vec<IoOp<'_>> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let priority = if i % 2 == 0 { IoPriority::Sync } else { IoPriority::Async };
                IoOp::write(block_of(i) * BLOCK_SIZE as u64, vec![&b[..]], priority)
            })
            .collect();
        run_batch(&*store, &mut writes);
        for (i, op) in writes.iter_mut().enumerate() {
            assert_eq!(op.result.take().unwrap().unwrap(), BLOCK_SIZE, "write {i}");
        }
        drop(writes);
        assert_eq!(store.len().unwrap(), (OPS * BLOCK_SIZE) as u64);

        let mut backs: Vec<AlignedBuf> = (0..OPS).map(|_| AlignedBuf::zeroed(BLOCK_SIZE)).collect();
        let mut reads: Vec<IoOp<'_>> = backs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| IoOp::read(block_of(i) * BLOCK_SIZE as u64, &mut b[..], IoPriority::Sync))
            .collect();
        run_batch(&*store, &mut reads);
        for (i, op) in reads.iter_mut().enumerate() {
            assert_eq!(op.result.take().unwrap().unwrap(), BLOCK_SIZE, "read {i}");
        }
        drop(reads);
        for i in 0..OPS {
            assert!(backs[i][..] == bufs[i][..], "block of op {i} differs");
        }

        // A mixed batch: completed ops are skipped, errors stay on their op.
        let mut one = AlignedBuf::zeroed(BLOCK_SIZE);
        let mut two = AlignedBuf::zeroed(BLOCK_SIZE);
        let mut mixed = [
            IoOp::read(0, &mut one, IoPriority::Sync),
            IoOp::read(u64::MAX - BLOCK_SIZE as u64 + 1, &mut two, IoPriority::Sync),
        ];
        run_batch(&*store, &mut mixed);
        assert_eq!(mixed[0].result.take().unwrap().unwrap(), BLOCK_SIZE);
        assert_eq!(errno(&mixed[1].result.take().unwrap().unwrap_err()), libc::EINVAL);
        drop(mixed);
        assert!(one[..] == bufs[(0..OPS).find(|&i| block_of(i) == 0).unwrap()][..]);
    }

    /// Writing through a read-only handle fails with EBADF, on that op only.
    pub fn read_only_write_is_ebadf(open: Opener<'_>) {
        let path = TempPath::new("ro");
        drop(open(&path.0, &rw_create()).expect("create"));
        let store = open(&path.0, &read_only()).expect("open read-only");
        let data = AlignedBuf::pattern(BLOCK_SIZE, 31);
        let err = write_full(&*store, vec![&data], 0, IoPriority::Sync).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{err}");
        assert_eq!(store.len().unwrap(), 0);
    }

    /// create_new on an existing file is EEXIST and leaves the file alone.
    pub fn create_new_existing_is_eexist(open: Opener<'_>) {
        let path = TempPath::new("excl");
        let how = OpenHow { read: true, write: true, create_new: true, mode: 0o600, ..OpenHow::default() };
        let store = open(&path.0, &how).expect("first create_new");
        let data = AlignedBuf::pattern(BLOCK_SIZE, 41);
        write_full(&*store, vec![&data], 0, IoPriority::Sync).unwrap();
        let err = open(&path.0, &how).err().expect("second create_new must fail");
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST), "{err}");
        assert_eq!(store.len().unwrap(), BLOCK_SIZE as u64);
    }

    /// A directory is not a backing store, whatever the access mode.
    pub fn directory_is_refused(open: Opener<'_>) {
        let dir = TempPath::new("dir");
        std::fs::create_dir(&dir.0).unwrap();
        let err = open(&dir.0, &read_only()).err().expect("read-only open of a directory must fail");
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR), "{err}");
        let rw = OpenHow { read: true, write: true, ..OpenHow::default() };
        let err = open(&dir.0, &rw).err().expect("read-write open of a directory must fail");
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR), "{err}");
    }

    /// set_len grows and shrinks, len follows, and a new handle sees it.
    pub fn set_len_and_len(open: Opener<'_>) {
        let path = TempPath::new("len");
        let store = open(&path.0, &rw_create()).expect("open");
        assert_eq!(store.len().unwrap(), 0);
        store.set_len(10 * BLOCK_SIZE as u64 + 123).unwrap();
        assert_eq!(store.len().unwrap(), 10 * BLOCK_SIZE as u64 + 123);
        assert_eq!(std::fs::metadata(&path.0).unwrap().len(), 10 * BLOCK_SIZE as u64 + 123);
        let data = AlignedBuf::pattern(BLOCK_SIZE, 51);
        write_full(&*store, vec![&data], 0, IoPriority::Sync).unwrap();
        store.set_len(BLOCK_SIZE as u64).unwrap();
        assert_eq!(store.len().unwrap(), BLOCK_SIZE as u64);
        let reopened = open(&path.0, &read_only()).unwrap();
        assert_eq!(reopened.info().len_at_open, BLOCK_SIZE as u64);
        let mut buf = AlignedBuf::zeroed(2 * BLOCK_SIZE);
        assert_eq!(read_full(&*reopened, &mut buf, 0, IoPriority::Sync).unwrap(), BLOCK_SIZE);
        assert!(buf[..BLOCK_SIZE] == data[..]);
        assert!(store.set_len(u64::MAX).is_err());

        let err = reopened.set_len(0).unwrap_err();
        assert!(matches!(errno(&err), libc::EINVAL | libc::EBADF), "{err}");
        let truncating = OpenHow { write: true, truncate: true, ..OpenHow::default() };
        let truncated = open(&path.0, &truncating).unwrap();
        assert_eq!(truncated.info().len_at_open, 0);
        assert_eq!(truncated.len().unwrap(), 0);
    }

    /// Writes and reads the last blocks of the scratch block device named by
    /// `WBCACHE_TEST_BLOCK_DEVICE` (destroying them), then writes across and
    /// past its end.
    pub fn block_device_writes(open: Opener<'_>) {
        let dev = std::env::var_os("WBCACHE_TEST_BLOCK_DEVICE").expect("set WBCACHE_TEST_BLOCK_DEVICE");
        let how = OpenHow { read: true, write: true, ..OpenHow::default() };
        let store = open(Path::new(&dev), &how).unwrap();
        assert!(store.info().is_block_device);
        assert!(store.info().direct_io);
        let size = store.info().len_at_open;
        assert!(size >= 64 * BLOCK_SIZE as u64);
        let start = size - 64 * BLOCK_SIZE as u64;
        let bufs: Vec<AlignedBuf> = (0..64).map(|i| AlignedBuf::pattern(BLOCK_SIZE, 300 + i)).collect();
        let mut writes: Vec<IoOp<'_>> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| IoOp::write(start + (i * BLOCK_SIZE) as u64, vec![&b[..]], IoPriority::Async))
            .collect();
        run_batch(&*store, &mut writes);
        assert!(writes.iter_mut().all(|op| op.result.take().unwrap().is_ok()));
        drop(writes);
        store.sync(SyncKind::DataOnly).unwrap();
        let mut back = AlignedBuf::zeroed(128 * BLOCK_SIZE);
        // Reading across the end is short, like end of file.
        assert_eq!(read_full(&*store, &mut back, start, IoPriority::Sync).unwrap(), 64 * BLOCK_SIZE);
        for (i, b) in bufs.iter().enumerate() {
            assert!(back[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE] == b[..], "block {i}");
        }
        // Writing across the end writes what fits, then fails with ENOSPC.
        let two = AlignedBuf::pattern(2 * BLOCK_SIZE, 399);
        let err = write_full(&*store, vec![&two], size - BLOCK_SIZE as u64, IoPriority::Sync).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        assert_eq!(
            read_full(&*store, &mut back[..BLOCK_SIZE], size - BLOCK_SIZE as u64, IoPriority::Sync).unwrap(),
            BLOCK_SIZE
        );
        assert!(back[..BLOCK_SIZE] == two[..BLOCK_SIZE]);
        assert_eq!(errno(&store.set_len(size - BLOCK_SIZE as u64).unwrap_err()), libc::EINVAL);
        store.set_len(size).unwrap();
        store.sync(SyncKind::All).unwrap();
    }

    /// Runs the whole suite against one backend.
    pub fn suite(open: Opener<'_>) {
        round_trip(open);
        vectored(open);
        short_read_past_eof(open);
        batch_of_64(open);
        read_only_write_is_ebadf(open);
        create_new_existing_is_eexist(open);
        directory_is_refused(open);
        set_len_and_len(open);
    }

    /// Several threads driving batches on one store at once.
    pub fn concurrent_submitters(open: Opener<'_>) {
        const THREADS: usize = 4;
        const BLOCKS_PER_THREAD: usize = 32;
        let path = TempPath::new("concurrent");
        let store = open(&path.0, &rw_create()).expect("open");
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let store = &store;
                s.spawn(move || {
                    let bufs: Vec<AlignedBuf> = (0..BLOCKS_PER_THREAD)
                        .map(|i| AlignedBuf::pattern(BLOCK_SIZE, (t * 1000 + i) as u32))
                        .collect();
                    let base = t * BLOCKS_PER_THREAD;
                    for round in 0..4 {
                        let mut ops: Vec<IoOp<'_>> = bufs
                            .iter()
                            .enumerate()
                            .map(|(i, b)| {
                                IoOp::write(((base + i) * BLOCK_SIZE) as u64, vec![&b[..]], IoPriority::Async)
                            })
                            .collect();
                        run_batch(&**store, &mut ops);
                        assert!(ops.iter_mut().all(|op| op.result.take().unwrap().is_ok()), "round {round}");
                        drop(ops);
                        let mut back = AlignedBuf::zeroed(BLOCKS_PER_THREAD * BLOCK_SIZE);
                        let n = read_full(&**store, &mut back, (base * BLOCK_SIZE) as u64, IoPriority::Sync).unwrap();
                        assert_eq!(n, BLOCKS_PER_THREAD * BLOCK_SIZE);
                        for (i, b) in bufs.iter().enumerate() {
                            assert!(back[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE] == b[..], "thread {t} block {i}");
                        }
                    }
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::io::{read_full, write_full, IoPriority};

    fn sync_open(path: &Path, how: &OpenHow) -> io::Result<Arc<dyn BackingStore>> {
        open_fd_store(path, how, Arc::new(SyncEngine))
    }

    #[test]
    fn suite_with_sync_engine() {
        suite(&sync_open);
    }

    #[test]
    fn concurrent_with_sync_engine() {
        concurrent_submitters(&sync_open);
    }

    /// Pages of the file the kernel's cache holds, by `mincore(2)` on a
    /// read-only mapping that faults nothing in.
    fn kernel_cached_pages(path: &Path, len: usize) -> usize {
        let file = std::fs::File::open(path).unwrap();
        // SAFETY: a fresh shared read-only mapping of `len` bytes of an
        // open file, unmapped below; nothing reads through it.
        let addr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        assert_ne!(addr, libc::MAP_FAILED);
        let mut vec = vec![0u8; len.div_ceil(4096)];
        // SAFETY: `vec` has one byte per page of the mapping.
        let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(addr, len) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    /// Buffered tail writes leave pages in the kernel's cache until the
    /// store sync that makes them durable drops them (an O_DIRECT write
    /// over a cached page cannot complete without blocking), all but the
    /// page holding the partial end, which the next small append writes
    /// into again (uncached, that write would read it first).
    #[test]
    fn a_store_sync_drops_the_pages_tail_writes_left_cached() {
        let path = TempPath::new("tail-pages");
        let store = sync_open(&path.0, &rw_create()).unwrap();
        assert!(store.supports_tail_writes());
        let data = vec![7u8; 3 * 4096 + 100];
        assert_eq!(store.write_tail(0, &data).unwrap(), data.len());
        assert_eq!(kernel_cached_pages(&path.0, data.len()), 4, "buffered writes are cached");
        store.sync(SyncKind::DataOnly).unwrap();
        assert_eq!(kernel_cached_pages(&path.0, data.len()), 1, "the sync dropped all but the partial tail page");
        assert_eq!(kernel_cached_pages(&path.0, 3 * 4096), 0, "the whole pages went");
        // Ending on a page boundary, nothing is kept: the page the append
        // began in goes too.
        assert_eq!(store.write_tail(3 * 4096 + 100, &[8u8; 4096 - 100]).unwrap(), 4096 - 100);
        store.sync(SyncKind::DataOnly).unwrap();
        assert_eq!(kernel_cached_pages(&path.0, 4 * 4096), 0, "a whole last page is dropped too");
        let mut expected = data;
        expected.resize(4 * 4096, 8);
        assert_eq!(std::fs::read(&path.0).unwrap(), expected);
    }

    #[test]
    fn regular_file_info() {
        let path = TempPath::new("info");
        let store = sync_open(&path.0, &rw_create()).unwrap();
        let info = store.info();
        let meta = std::fs::metadata(&path.0).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(info.store_id, (meta.dev(), meta.ino()));
        assert_eq!(info.device_id, meta.dev());
        assert!(!info.is_block_device);
        assert!(info.logical_block_size >= 512 && info.logical_block_size as usize <= BLOCK_SIZE);
        // mode 0o600 is honoured (the umask only removes bits).
        assert_eq!(meta.mode() & 0o777 & !0o600, 0);
        eprintln!("temp dir direct_io = {}", info.direct_io);
    }

    #[test]
    fn direct_io_flag_matches_descriptor() {
        let path = TempPath::new("flags");
        let store = FdStore::open(&path.0, &rw_create(), Arc::new(SyncEngine)).unwrap();
        // SAFETY: F_GETFL takes no pointer argument; the descriptor is open.
        let fl = unsafe { libc::fcntl(store.as_raw_fd(), libc::F_GETFL) };
        assert!(fl >= 0);
        assert_eq!(fl & libc::O_DIRECT != 0, store.info().direct_io);
        assert_eq!(fl & libc::O_ACCMODE, libc::O_RDWR);
        // SAFETY: F_GETFD takes no pointer argument; the descriptor is open.
        let fd_flags = unsafe { libc::fcntl(store.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(fd_flags & libc::FD_CLOEXEC, 0, "descriptor must be close-on-exec");
    }

    #[test]
    fn tmpfs_round_trip() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("skipping: no /dev/shm");
            return;
        }
        let path = TempPath::new_in(shm, "shm");
        let store = sync_open(&path.0, &rw_create()).expect("open on tmpfs");
        eprintln!("/dev/shm direct_io = {}", store.info().direct_io);
        let data = AlignedBuf::pattern(2 * BLOCK_SIZE, 61);
        write_full(&*store, vec![&data], BLOCK_SIZE as u64, IoPriority::Sync).unwrap();
        let mut back = AlignedBuf::zeroed(4 * BLOCK_SIZE);
        assert_eq!(read_full(&*store, &mut back, 0, IoPriority::Sync).unwrap(), 3 * BLOCK_SIZE);
        assert!(back[..BLOCK_SIZE].iter().all(|&b| b == 0));
        assert!(back[BLOCK_SIZE..3 * BLOCK_SIZE] == data[..]);
        store.sync(SyncKind::DataOnly).unwrap();
        assert_eq!(store.len().unwrap(), 3 * BLOCK_SIZE as u64);
    }

    /// procfs refuses O_DIRECT with EINVAL: the open must fall back to
    /// buffered I/O and say so.
    #[test]
    fn falls_back_to_buffered_when_o_direct_is_refused() {
        let path = Path::new("/proc/self/status");
        if !path.exists() {
            eprintln!("skipping: no procfs");
            return;
        }
        let store = sync_open(path, &read_only()).expect("open procfs file");
        assert!(!store.info().direct_io, "procfs does not do O_DIRECT");
        let mut buf = AlignedBuf::zeroed(BLOCK_SIZE);
        let n = read_full(&*store, &mut buf, 0, IoPriority::Sync).unwrap();
        assert!(n > 0);
        assert!(std::str::from_utf8(&buf[..n]).unwrap().contains("Pid:"));
    }

    #[test]
    fn bad_open_requests_are_einval() {
        let path = TempPath::new("bad");
        let neither = OpenHow { create: false, ..OpenHow::default() };
        assert_eq!(errno(&sync_open(&path.0, &neither).err().unwrap()), libc::EINVAL);
        let create_ro = OpenHow { read: true, create: true, ..OpenHow::default() };
        assert_eq!(errno(&sync_open(&path.0, &create_ro).err().unwrap()), libc::EINVAL);
        let nul = Path::new("/tmp/with\0nul");
        assert_eq!(errno(&sync_open(nul, &rw_create()).err().unwrap()), libc::EINVAL);
        let missing = OpenHow { read: true, write: true, ..OpenHow::default() };
        assert_eq!(sync_open(&path.0, &missing).err().unwrap().raw_os_error(), Some(libc::ENOENT));
        // A default mode (0) still creates a file its owner can reopen.
        let default_mode = OpenHow { read: true, write: true, create: true, ..OpenHow::default() };
        drop(sync_open(&path.0, &default_mode).unwrap());
        use std::os::unix::fs::PermissionsExt;
        assert_ne!(std::fs::metadata(&path.0).unwrap().permissions().mode() & 0o600, 0);
    }

    #[test]
    fn special_files_are_refused() {
        let err = sync_open(Path::new("/dev/null"), &read_only()).err().expect("char device refused");
        assert_eq!(errno(&err), libc::EINVAL, "{err}");
        assert!(err.to_string().contains("not a regular file or block device"), "{err}");

        // Opening a FIFO would block; it must be refused before open(2).
        let fifo = TempPath::new("fifo");
        let c = CString::new(fifo.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = sync_open(&fifo.0, &read_only()).err().expect("FIFO refused");
        assert_eq!(errno(&err), libc::EINVAL, "{err}");
    }

    #[test]
    fn context_errors_keep_errno_and_message() {
        let err = error_with_context(libc::EINVAL, "logical block size 8192 exceeds");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(errno_of(&err), Some(libc::EINVAL));
        assert!(err.to_string().contains("8192"));
        assert_eq!(errno_of(&io::Error::from_raw_os_error(libc::EIO)), Some(libc::EIO));
        assert_eq!(errno_of(&io::Error::other("x")), None);
    }

    #[test]
    fn oversized_alignment_is_refused() {
        assert!(check_dio_alignment(512, 0).is_ok());
        assert!(check_dio_alignment(4096, 4096).is_ok());
        let err = check_dio_alignment(8192, 0).unwrap_err();
        assert_eq!(errno_of(&err), Some(libc::EINVAL));
        assert!(err.to_string().contains("logical block size 8192"), "{err}");
        let err = check_dio_alignment(512, 16384).unwrap_err();
        assert_eq!(errno_of(&err), Some(libc::EINVAL));
        assert!(err.to_string().contains("16384-byte aligned memory"), "{err}");
    }

    #[test]
    fn ioprio_values() {
        assert_eq!(ioprio_of(IoPriority::Sync), 2 << 13);
        assert_eq!(ioprio_of(IoPriority::Async), (2 << 13) | 7);
        assert_eq!(ioprio_of(IoPriority::Idle), 3 << 13);
    }

    #[test]
    fn blkgetsize64_encoding() {
        // The generic _IOR encoding, as <linux/fs.h> defines it on x86_64
        // and aarch64; block_device_read_only checks the ioctl for real.
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        assert_eq!(ioc_read(0x12, 114, 8), 0x8008_1272);
        assert_eq!(ioc_read(0x12, 114, 8) & 0xffff, 0x1272);
    }

    /// Opens some block device read-only (when one is readable here, e.g. as
    /// root) and checks what open learned; never writes.
    #[test]
    fn block_device_read_only() {
        let Ok(entries) = std::fs::read_dir("/sys/block") else {
            eprintln!("skipping: no /sys/block");
            return;
        };
        for entry in entries.flatten() {
            let dev = Path::new("/dev").join(entry.file_name());
            let store = match sync_open(&dev, &read_only()) {
                Ok(store) => store,
                // Not ours to open (device cgroup, permissions, no medium).
                Err(e)
                    if matches!(
                        errno(&e),
                        libc::EACCES | libc::EPERM | libc::ENOENT | libc::ENXIO | libc::ENOMEDIUM
                    ) =>
                {
                    continue
                }
                Err(e) => panic!("opening {}: {e}", dev.display()),
            };
            let info = store.info().clone();
            if info.len_at_open == 0 {
                continue; // an unbound loop device
            }
            eprintln!("checking {} ({info:?})", dev.display());
            assert!(info.is_block_device);
            assert!(info.direct_io);
            assert!(info.logical_block_size.is_power_of_two() && info.logical_block_size >= 512);
            assert_eq!(store.len().unwrap(), info.len_at_open);
            let meta = std::fs::metadata(&dev).unwrap();
            use std::os::unix::fs::MetadataExt;
            assert_eq!(info.device_id, meta.rdev());
            assert_eq!(info.store_id, block_device_store_id(meta.rdev()), "keyed by the device, not the node");
            // A second node of the same device (root only): another inode
            // number, the same identity.
            let alias = TempPath::new("blkalias");
            let c = CString::new(alias.0.as_os_str().as_bytes()).unwrap();
            #[allow(clippy::useless_conversion)] // dev_t is not u64 on every target.
            let rdev: libc::dev_t = meta.rdev().try_into().unwrap();
            // SAFETY: `c` is a NUL-terminated path that outlives the call.
            if unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, rdev) } == 0 {
                let again = sync_open(&alias.0, &read_only()).expect("open the second node");
                assert_ne!(std::fs::metadata(&alias.0).unwrap().ino(), meta.ino());
                assert_eq!(again.info().store_id, info.store_id, "two nodes, one device");
                assert_eq!(again.info().device_id, info.device_id);
            } else {
                eprintln!("no second node: {}", io::Error::last_os_error());
            }
            store.set_len(info.len_at_open).expect("same size is fine");
            let err = store.set_len(info.len_at_open + BLOCK_SIZE as u64).unwrap_err();
            assert_eq!(errno(&err), libc::EINVAL, "{err}");
            let err = store.set_len(info.len_at_open - BLOCK_SIZE as u64).unwrap_err();
            assert_eq!(errno(&err), libc::EINVAL, "{err}");
            let mut buf = AlignedBuf::zeroed(BLOCK_SIZE);
            assert_eq!(read_full(&*store, &mut buf, 0, IoPriority::Sync).unwrap(), BLOCK_SIZE);
            // Reading at the very end is end of file.
            assert_eq!(read_full(&*store, &mut buf, info.len_at_open, IoPriority::Sync).unwrap(), 0);
            return;
        }
        eprintln!("skipping: no readable block device");
    }

    /// Write round trip on a scratch block device named by
    /// WBCACHE_TEST_BLOCK_DEVICE (its contents are destroyed), e.g. a loop
    /// device: `losetup -f --show /tmp/scratch.img`.
    #[test]
    #[ignore = "needs WBCACHE_TEST_BLOCK_DEVICE naming a scratch block device"]
    fn block_device_write_round_trip() {
        block_device_writes(&sync_open);
    }
}
