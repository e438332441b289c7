//! A backing store and the operations on it: the [`BackingStore`] trait
//! (one attempt of a batch of [`IoOp`]s), what a store is opened with and
//! reports, and the generic driver [`run_batch`], which owns the retry
//! policy every backend shares (short transfers resubmitted, `EINTR` and
//! `EAGAIN` retried, a zero-byte read is end of file).
//!
//! Invariants: buffers are borrowed for the whole synchronous `run_batch`
//! call, so a buffer outlives the I/O that uses it; an O_DIRECT op's
//! offset and length are whole blocks (asserted). Nothing here knows
//! folios, and nothing here names the backends.

use std::io;

use crate::base::sys::SyncKind;

/// The unit of uptodate/dirty tracking and of I/O alignment (defined with
/// the buffers, which are aligned to it).
pub use crate::buf::BLOCK_SIZE;

/// Most buffers one vectored I/O may carry: the kernel's `UIO_MAXIOV`.
/// `pwritev` and io_uring's `WRITEV` fail a request with more with `EINVAL`,
/// so writeback never builds one (at `io_max=8M`, 4 KiB folios would make
/// 2048).
pub const IOV_MAX: usize = 1024;

/// The positive errno for `e`, as the C ABI answers it: its raw OS error if it has one (every
/// error the OS returned has, as with std), or that of an `io::Error` it wraps as its source
/// (a caller's error that adds context), else by kind (`InvalidInput`→`EINVAL`,
/// `NotFound`→`ENOENT`, `AlreadyExists`→`EEXIST`, `PermissionDenied`→`EACCES`,
/// `OutOfMemory`→`ENOMEM`, `WouldBlock`→`EAGAIN`, `StorageFull`→`ENOSPC`,
/// `FileTooLarge`→`EFBIG`, `IsADirectory`→`EISDIR`,
/// `NotADirectory`→`ENOTDIR`, `ReadOnlyFilesystem`→`EROFS`,
/// `ResourceBusy`→`EBUSY`, `Interrupted`→`EINTR`, `TimedOut`→`ETIMEDOUT`,
/// `WriteZero`→`EIO`, `Unsupported`→`EOPNOTSUPP`, anything else `EIO`):
/// an error that carries a message and a kind but no errno (an invalid
/// argument the cache finds itself, say) keeps the errno its kind means
/// instead of becoming `EIO`.
pub fn errno_of(e: &io::Error) -> i32 {
    let mut inner = Some(e);
    while let Some(err) = inner {
        if let Some(code) = err.raw_os_error().filter(|&c| c > 0) {
            return code;
        }
        inner = std::error::Error::source(err).and_then(|s| s.downcast_ref::<io::Error>());
    }
    match e.kind() {
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::StorageFull => libc::ENOSPC,
        io::ErrorKind::FileTooLarge => libc::EFBIG,
        io::ErrorKind::IsADirectory => libc::EISDIR,
        io::ErrorKind::NotADirectory => libc::ENOTDIR,
        io::ErrorKind::ReadOnlyFilesystem => libc::EROFS,
        io::ErrorKind::ResourceBusy => libc::EBUSY,
        io::ErrorKind::Interrupted => libc::EINTR,
        io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        io::ErrorKind::WriteZero => libc::EIO,
        io::ErrorKind::Unsupported => libc::EOPNOTSUPP,
        _ => libc::EIO,
    }
}

/// How often one op may come back short or interrupted before the driver
/// gives up with `EIO`; a device that keeps returning partial transfers is
/// broken, and looping forever on it would hang the caller.
pub const MAX_ATTEMPTS_PER_OP: u32 = 1000;

/// Which backend executes I/O. More may come (and `Sim` exists only with
/// the `sim` feature), so a match on it needs a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoKind {
    /// io_uring with `io_depth` requests in flight per submitting thread.
    Uring,
    /// pread/pwrite on a small thread pool.
    Threads,
    /// In-memory simulation for tests (seeded faults, crash model); only
    /// with the `sim` feature.
    #[cfg(any(test, feature = "sim"))]
    Sim,
}

impl IoKind {
    /// The name used in options (`io=uring`) and stats (`io_backend`).
    pub fn name(self) -> &'static str {
        match self {
            IoKind::Uring => "uring",
            IoKind::Threads => "threads",
            #[cfg(any(test, feature = "sim"))]
            IoKind::Sim => "sim",
        }
    }
}

/// I/O priority class of a request. Sync requests (fsync-driven, reads a
/// caller waits on) are submitted ahead of async background writeback and
/// carry a higher `ioprio` to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPriority {
    /// A caller is waiting on this I/O (read miss, fsync).
    Sync,
    /// Background writeback, readahead.
    Async,
    /// Background writeback that the device's scheduler may serve after
    /// everything else (the idle class, `background_ioprio=idle`). The
    /// flusher bounds it (`crate::writeback::policy::background_class`):
    /// a request in the kernel cannot be promoted.
    Idle,
}

/// How to open a backing store; mirrors `open(2)` flags.
#[derive(Clone, Debug, Default)]
pub struct OpenHow {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub create_new: bool,
    pub truncate: bool,
    /// Permission bits for a created file.
    pub mode: u32,
}

/// What the backend learned about a backing store when it opened it.
#[derive(Clone, Debug)]
pub struct BackingInfo {
    /// Size in bytes at open (file size, or device size for a block device).
    pub len_at_open: u64,
    /// Logical block size: the O_DIRECT alignment the device demands.
    /// Recorded by every backend; read by their tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub logical_block_size: u32,
    /// A raw block device: fixed size, writes past its end fail.
    pub is_block_device: bool,
    /// Opened with O_DIRECT. False when the file system refused O_DIRECT and
    /// the store fell back to buffered I/O underneath.
    pub direct_io: bool,
    /// Identity of the device the data lives on (`st_dev`, or `st_rdev` for a
    /// block device): one writeback domain per device.
    pub device_id: u64,
    /// Identity of the store itself: (`st_dev`, `st_ino`) for a file, so
    /// every name of it (links, `/proc/self/fd/N`) shares one inode;
    /// (`u64::MAX`, `st_rdev`) for a block device, so every device node of
    /// it does too.
    pub store_id: (u64, u64),
}

/// Direction and buffers of one op. Several buffers make one vectored
/// transfer at consecutive offsets (`preadv`/`pwritev`).
pub enum IoBufs<'a> {
    Read(Vec<&'a mut [u8]>),
    Write(Vec<&'a [u8]>),
}

/// One request in a batch. `result` is filled by the driver: total bytes
/// transferred (short only for a read that hit end of file) or the error.
pub struct IoOp<'a> {
    pub offset: u64,
    pub bufs: IoBufs<'a>,
    pub priority: IoPriority,
    /// Bytes already transferred by earlier attempts (driver-owned).
    pub done: usize,
    pub result: Option<io::Result<usize>>,
}

/// Outcome of one attempt at one op, as returned by a backend.
pub type Attempt = io::Result<usize>;

impl<'a> IoOp<'a> {
    pub fn read(offset: u64, buf: &'a mut [u8], priority: IoPriority) -> Self {
        IoOp { offset, bufs: IoBufs::Read(vec![buf]), priority, done: 0, result: None }
    }

    pub fn write(offset: u64, bufs: Vec<&'a [u8]>, priority: IoPriority) -> Self {
        IoOp { offset, bufs: IoBufs::Write(bufs), priority, done: 0, result: None }
    }

    /// Total bytes the op asks for.
    pub fn len(&self) -> usize {
        match &self.bufs {
            IoBufs::Read(b) => b.iter().map(|s| s.len()).sum(),
            IoBufs::Write(b) => b.iter().map(|s| s.len()).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_write(&self) -> bool {
        matches!(self.bufs, IoBufs::Write(_))
    }

    /// The not-yet-transferred remainder as (offset, iovec list); what a
    /// backend submits on this attempt.
    pub fn remaining_iovecs(&mut self) -> (u64, Vec<libc::iovec>) {
        let mut skip = self.done;
        let mut iovecs = Vec::new();
        let mut push = |ptr: *mut u8, len: usize| {
            if skip >= len {
                skip -= len;
                return;
            }
            // SAFETY: `skip < len`, so the pointer stays inside the slice.
            let base = unsafe { ptr.add(skip) };
            iovecs.push(libc::iovec { iov_base: base.cast(), iov_len: len - skip });
            skip = 0;
        };
        match &mut self.bufs {
            IoBufs::Read(bufs) => bufs.iter_mut().for_each(|b| push(b.as_mut_ptr(), b.len())),
            IoBufs::Write(bufs) => bufs.iter().for_each(|b| push(b.as_ptr() as *mut u8, b.len())),
        }
        (self.offset + self.done as u64, iovecs)
    }
}

/// Whether a path's last component, when a symbolic link, is followed
/// (`stat(2)`) or looked at itself (`lstat(2)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symlink {
    Follow,
    NoFollow,
}

/// One open backing store (file or block device).
#[allow(clippy::len_without_is_empty)]
pub trait BackingStore: Send + Sync {
    fn info(&self) -> &BackingInfo;
    /// Current size of the store in bytes.
    fn len(&self) -> io::Result<u64>;
    /// `ftruncate`; `EINVAL` for a block device unless the size is unchanged.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fsync` or `fdatasync`, as `kind` says.
    fn sync(&self, kind: SyncKind) -> io::Result<()>;
    /// Execute one attempt of every op in `ops` whose `result` is `None`, and
    /// return one [`Attempt`] per op in the same order (ops already complete
    /// get `Ok(0)` and are ignored). Each attempt covers
    /// [`IoOp::remaining_iovecs`]. May return short counts and
    /// `EINTR`/`EAGAIN`; [`run_batch`] handles them.
    fn submit_once(&self, ops: &mut [IoOp<'_>]) -> Vec<Attempt>;
    /// The descriptor an asynchronous backend may submit to directly, if the
    /// store has one; it stays open as long as the store.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Whether the file system lets the store grow to `len` bytes (its
    /// largest file size, `EFBIG` for a write beyond it), asked without
    /// changing anything. Writeback would fail for good past that size, so
    /// a write is refused (or shortened) up front, as `pwrite(2)` would be.
    fn accepts_len(&self, len: u64) -> io::Result<bool> {
        let _ = len;
        Ok(true)
    }
    /// Whether the store is a file no name leads to any more (its link
    /// count is zero): its data can never be read again once its last
    /// descriptor closes. Never true of a block device, whose blocks
    /// outlive any node naming it.
    fn is_unlinked(&self) -> io::Result<bool> {
        Ok(false)
    }
    /// Whether [`BackingStore::write_tail`] works here: an O_DIRECT file
    /// whose last block can also be written through the kernel's cache.
    fn supports_tail_writes(&self) -> bool {
        false
    }
    /// Writes `data` at `offset` through the kernel's page cache, not
    /// O_DIRECT: for the partial last block of a file, which O_DIRECT could
    /// only write whole, padding the file with zeros that a later
    /// `ftruncate` must cut (and that cut reads the block back to zero its
    /// end). The next fsync of the store writes it out. Returns the bytes
    /// written (all of them, or an error).
    fn write_tail(&self, offset: u64, data: &[u8]) -> io::Result<usize> {
        let _ = (offset, data);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// `fallocate(2)` with `mode` (`FALLOC_FL_*` bits) over `len` bytes
    /// at `offset`; `EOPNOTSUPP` where the store cannot do it.
    fn allocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        let _ = (mode, offset, len);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
}

pub(crate) fn is_retryable(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN))
}

/// How many of the leading items (of the given byte lengths) make one
/// batch of at most `bytes_max` bytes: one at least, whatever its size,
/// when there is one.
pub fn batch_len(lens: impl IntoIterator<Item = u64>, bytes_max: u64) -> usize {
    let mut bytes = 0u64;
    let mut n = 0;
    for len in lens {
        let with = bytes.checked_add(len);
        if n > 0 && with.is_none_or(|b| b > bytes_max) {
            break;
        }
        bytes = with.unwrap_or(u64::MAX);
        n += 1;
    }
    n
}

/// Runs every op of `ops` to completion: loops short transfers, retries
/// `EINTR`/`EAGAIN`, treats a zero-byte read as end of file (the op's result
/// is then the bytes read so far) and a zero-byte write as `EIO`.
/// Afterwards every op has `result == Some(..)`.
pub fn run_batch(store: &dyn BackingStore, ops: &mut [IoOp<'_>]) {
    if store.info().direct_io {
        for op in ops.iter() {
            // The engine's own invariant (folios are whole, aligned
            // blocks): an unaligned O_DIRECT op would fail with EINVAL.
            assert_eq!(op.offset % BLOCK_SIZE as u64, 0, "unaligned O_DIRECT offset");
            assert_eq!(op.len() % BLOCK_SIZE, 0, "unaligned O_DIRECT length");
        }
    }
    for op in ops.iter_mut() {
        if op.is_empty() {
            op.result = Some(Ok(0));
        }
    }
    let direct = store.info().direct_io;
    let mut attempts = 0u32;
    while ops.iter().any(|op| op.result.is_none()) {
        attempts += 1;
        let outcomes = store.submit_once(ops);
        assert_eq!(outcomes.len(), ops.len(), "backend must answer every op");
        for (op, outcome) in ops.iter_mut().zip(outcomes) {
            if op.result.is_some() {
                continue;
            }
            match outcome {
                Ok(0) if !op.is_write() => op.result = Some(Ok(op.done)),
                Ok(0) => {
                    op.result = Some(Err(io::Error::new(io::ErrorKind::WriteZero, "backing store accepted no bytes")))
                }
                Ok(n) => {
                    assert!(op.done + n <= op.len(), "backend reported more bytes than asked");
                    op.done += n;
                    // An O_DIRECT read that stops inside a block stopped at
                    // end of file: resubmitting at that unaligned offset
                    // would fail with EINVAL if the file grew meanwhile.
                    let eof_inside_block = direct && !op.is_write() && op.done % BLOCK_SIZE != 0;
                    if op.done == op.len() || eof_inside_block {
                        op.result = Some(Ok(op.done));
                    }
                }
                Err(e) if is_retryable(&e) => {}
                Err(e) => op.result = Some(Err(e)),
            }
            if op.result.is_none() && attempts >= MAX_ATTEMPTS_PER_OP {
                op.result = Some(Err(io::Error::from_raw_os_error(libc::EIO)));
            }
        }
    }
}

/// Reads exactly `buf.len()` bytes at `offset` unless end of file comes
/// first; returns the bytes read.
pub fn read_full(store: &dyn BackingStore, buf: &mut [u8], offset: u64, priority: IoPriority) -> io::Result<usize> {
    let mut ops = [IoOp::read(offset, buf, priority)];
    run_batch(store, &mut ops);
    ops[0].result.take().expect("run_batch completes every op")
}

/// Writes all of `bufs` at consecutive offsets starting at `offset` (the
/// backends' tests).
#[cfg(test)]
pub fn write_full(store: &dyn BackingStore, bufs: Vec<&[u8]>, offset: u64, priority: IoPriority) -> io::Result<()> {
    let mut ops = [IoOp::write(offset, bufs, priority)];
    run_batch(store, &mut ops);
    ops[0].result.take().expect("run_batch completes every op").map(|_| ())
}
