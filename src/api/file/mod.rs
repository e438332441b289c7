//! Open handles: [`File`] (positional I/O, sync, size); the values its
//! calls take ([`OpenOptions`], [`WriteFlags`], [`Advice`],
//! [`SyncRangeFlags`]) live in `options`, and [`FileCursor`], the
//! `std::io::{Read, Write, Seek}` adapter, in `cursor`.
//!
//! A handle owns its access mode, its errseq cursor (each handle's next
//! fsync reports a writeback error once) and its readahead state. Dropping
//! a handle does not write back (as `close(2)`): dirty data stays cached
//! and the flusher writes it.

mod cursor;
mod options;

use std::cell::Cell;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::api::shared::{OpGuard, Shared};
use crate::base::locks;
use crate::base::sys::SyncKind;
use crate::buf::user::{Gather, RawIov, ReadTarget, Scatter, WriteSource};
pub use crate::inode::Allocation;
use crate::inode::{FillPlan, Inode};
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::Caching;
use crate::policy::memory::Memory;
use crate::readahead::{Decision, IdleRead, Readahead};

pub use crate::mapping::folio::{RESIDENT_CACHED, RESIDENT_DIRTY, RESIDENT_WRITEBACK};
pub use cursor::FileCursor;
pub use options::{Advice, OpenOptions, SyncRangeFlags, WriteFlags};

const BLOCK: u64 = BLOCK_SIZE as u64;

/// A handle's access pattern advice ([`Advice::Sequential`],
/// [`Advice::Random`]), as the readahead of its reads uses it.
const ACCESS_NORMAL: u8 = 0;
const ACCESS_SEQUENTIAL: u8 = 1;
const ACCESS_RANDOM: u8 = 2;

/// An open file or block device in a [`Cache`](crate::Cache). `Send + Sync`:
/// share it between threads with an `Arc` or references.
///
/// Its calls are positional, as `std::os::unix::fs::FileExt`'s
/// (`read_at`, `write_at`), with std's names where std has the call
/// (`sync_all`, `sync_data`, `set_len`); [`File::cursor`] gives a
/// `Read + Write + Seek` view. Dropping it does not write back (as
/// `close(2)`): the flusher or a sync does.
///
/// ```
/// use std::io::{Read, Seek, SeekFrom, Write};
/// use wbcache::{Cache, Config, OpenOptions, WriteFlags};
/// # fn main() -> std::io::Result<()> {
/// let cache = Cache::new(Config::from_options("capacity=16M")?)?;
/// let path = std::env::temp_dir().join(format!("wbcache-doc-file-{}", std::process::id()));
/// let file = cache.open(&path, &OpenOptions::read_write_create())?;
///
/// file.write_at(b"hello", 4096)?; // into the cache, dirty
/// file.write_at_with(b"log", 0, WriteFlags::DONTCACHE)?; // uncached: dropped once written back
/// let mut buf = [0u8; 5];
/// assert_eq!(file.read_at(&mut buf, 4096)?, 5); // from the cache
/// assert_eq!(&buf, b"hello");
/// file.sync_data()?; // durable on return
/// assert_eq!(file.len()?, 4101);
///
/// let mut cursor = file.cursor(); // std::io's traits, from offset 0
/// cursor.seek(SeekFrom::End(0))?;
/// cursor.write_all(b"!")?;
/// cursor.seek(SeekFrom::Start(4096))?;
/// let mut text = String::new();
/// cursor.read_to_string(&mut text)?;
/// assert_eq!(text, "hello!");
///
/// cache.remove_file(&path)?;
/// # Ok(()) }
/// ```
pub struct File {
    inode: Arc<Inode>,
    shared: Arc<Shared>,
    /// The cache's memory account, held directly: every operation ends by
    /// checking it (`evict_excess`), so it is one pointer away.
    memory: Arc<Memory>,
    /// `Config::readahead_blocks_max`, fixed for the cache's life.
    readahead_blocks_max: u64,
    /// `Config::capacity_bytes`, fixed for the cache's life.
    capacity_bytes: u64,
    /// With `scan_dropbehind`, the blocks a sequential stream reads (a
    /// quarter of `capacity`, at most `SCAN_CACHED_BYTES_MAX`) before the
    /// rest of a scan of a file larger than `capacity` drops behind the
    /// reader.
    scan_blocks_min: Option<u64>,
    /// With `stream_dropbehind`, the bytes a sequential write stream of
    /// this handle writes cached before the rest drops behind it (as
    /// `scan_blocks_min`, in bytes).
    stream_cached_bytes: Option<u64>,
    /// Where this handle's last write ended, and how many bytes its
    /// sequential stream up to there has written. Threads sharing a
    /// handle may blur these; they only choose how folios are kept.
    write_stream_end: AtomicU64,
    write_stream_bytes: AtomicU64,
    readable: bool,
    writable: bool,
    /// Flags every read and write of the handle carries ([`OpenOptions::dontcache`]).
    default_flags: WriteFlags,
    /// [`OpenOptions::append`].
    append: bool,
    /// [`Advice::NoReuse`] given: every read and write is uncached.
    noreuse: AtomicBool,
    /// `ACCESS_*`: the access pattern advice.
    access_advice: AtomicU8,
    err_cursor: Mutex<u64>,
    readahead: Mutex<Readahead>,
    /// `readahead` has no window open ([`Readahead::is_idle`]), as of its
    /// last use: random reads then skip its lock.
    readahead_idle: AtomicBool,
    /// `readahead`'s stream is shorter than a scan (`scan_dropbehind`), as
    /// of its last use: a read again of the last block cannot be a scan's
    /// then, and skips its lock too.
    readahead_stream_short: AtomicBool,
    /// Where this handle's last read ended (for access accounting and
    /// readahead's sequential test), as of the last read by a thread
    /// whose previous read was of another handle, or that read ahead
    /// (see [`File::note_read_end`]).
    last_read_end: Arc<AtomicU64>,
}

thread_local! {
    /// The calling thread's last read: its handle (the address of the
    /// handle's `last_read_end`) and where it ended. A thread that keeps
    /// reading one handle at random finds its previous read here, so the
    /// cached read path writes nothing shared: threads reading one handle
    /// on several cores would otherwise bounce that line on every read.
    static THREAD_LAST_READ: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// Runs `f` with the calling thread's last read ([`THREAD_LAST_READ`]):
/// one thread-local lookup for a whole read (from a shared library each is
/// a call into the dynamic linker).
fn with_thread_last_read<R>(f: impl FnOnce(&Cell<(usize, u64)>) -> R) -> R {
    // Cannot panic: a constant-initialised thread-local without a
    // destructor is never destroyed, so every thread can reach it.
    THREAD_LAST_READ.with(f)
}

/// What an operation does with the handle's data, checked against the
/// mode it was opened with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// Whether a read went through readahead's state (its worker follows
/// the reader's position) or skipped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadaheadUse {
    Skipped,
    Followed,
}

impl File {
    pub(crate) fn new(inode: Arc<Inode>, shared: Arc<Shared>, options: &OpenOptions) -> File {
        let cursor = inode.open_error_cursor();
        File {
            inode,
            memory: shared.memory.clone(),
            readahead_blocks_max: shared.config.readahead_blocks_max(),
            capacity_bytes: shared.config.capacity_bytes,
            scan_blocks_min: shared.config.scan_dropbehind.then(|| shared.config.scan_cached_bytes() / BLOCK),
            stream_cached_bytes: shared.config.stream_dropbehind.then(|| shared.config.scan_cached_bytes()),
            write_stream_end: AtomicU64::new(u64::MAX),
            write_stream_bytes: AtomicU64::new(0),
            shared,
            readable: options.read,
            writable: options.writable(),
            default_flags: if options.dontcache { WriteFlags::DONTCACHE } else { WriteFlags::NONE },
            append: options.append,
            noreuse: AtomicBool::new(false),
            access_advice: AtomicU8::new(ACCESS_NORMAL),
            err_cursor: Mutex::new(cursor),
            readahead: Mutex::new(Readahead::default()),
            readahead_idle: AtomicBool::new(true),
            readahead_stream_short: AtomicBool::new(true),
            last_read_end: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Where the previous read ended: the calling thread's own previous
    /// read (`last`, see [`with_thread_last_read`]) if it was of this
    /// handle, else the handle's last recorded one.
    fn prev_read_end(&self, last: &Cell<(usize, u64)>) -> u64 {
        let key = Arc::as_ptr(&self.last_read_end) as usize;
        match last.get() {
            (last_key, end) if last_key == key => end,
            _ => self.last_read_end.load(Ordering::Relaxed),
        }
    }

    /// Records where a read ended: for the calling thread always (in
    /// `last`), and in the handle when this thread's previous read was of
    /// another handle (so a thread alternating handles, and other threads,
    /// find it there) or when the read went through readahead's state (its
    /// worker follows the reader through a window). Not a swap: concurrent
    /// reads of one handle only blur the access accounting and readahead's
    /// guess, and a store costs no locked instruction.
    fn note_read_end(&self, last: &Cell<(usize, u64)>, end: u64, readahead: ReadaheadUse) {
        let key = Arc::as_ptr(&self.last_read_end) as usize;
        let same_handle = last.replace((key, end)).0 == key;
        if !same_handle || readahead == ReadaheadUse::Followed {
            self.last_read_end.store(end, Ordering::Relaxed);
        }
    }

    /// Enters an operation: the returned guard keeps the cache from
    /// closing until the operation is over, so nothing it writes can land
    /// after the cache's final sync.
    fn enter(&self, access: Access) -> io::Result<OpGuard<'_>> {
        let guard = self.shared.enter_op()?;
        self.check_access(access)?;
        Ok(guard)
    }

    /// Whether the handle was opened for reading.
    pub fn is_readable(&self) -> bool {
        self.readable
    }

    /// Whether the handle was opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// `EBADF` unless the handle may read (or write). Vectored calls check
    /// it before their buffer list, as Linux does: a bad list on a handle
    /// of the wrong mode is `EBADF`, not `EINVAL`.
    fn check_access(&self, access: Access) -> io::Result<()> {
        let allowed = match access {
            Access::Read => self.readable,
            Access::Write => self.writable,
        };
        if !allowed {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `off`; fewer only at end of file.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.read_at_with(buf, off, WriteFlags::NONE)
    }

    /// [`File::read_at`] with flags (`DONTCACHE`: drop folios this read
    /// brought in once it has copied them).
    pub fn read_at_with(&self, buf: &mut [u8], off: u64, flags: WriteFlags) -> io::Result<usize> {
        self.read_into(buf, off, flags)
    }

    /// [`File::read_at_with`] into a buffer that need not be initialized
    /// (no zeroing first). After `Ok(n)` its first `n` bytes hold the data;
    /// the rest may or may not have been written (a truncate racing the
    /// read, or an error part-way, can leave bytes past `n` written).
    pub fn read_at_uninit(
        &self,
        buf: &mut [std::mem::MaybeUninit<u8>],
        off: u64,
        flags: WriteFlags,
    ) -> io::Result<usize> {
        self.read_into(buf, off, flags)
    }

    /// Reads into `bufs` in order, as [`File::read_at`] into their
    /// concatenation would (`preadv`): up to their total length, fewer only
    /// at end of file. More than 1024 buffers (`IOV_MAX`), or a total past
    /// `isize::MAX`, is `InvalidInput`.
    pub fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], off: u64) -> io::Result<usize> {
        self.read_vectored_at_with(bufs, off, WriteFlags::NONE)
    }

    /// [`File::read_vectored_at`] with flags (as [`File::read_at_with`]).
    pub fn read_vectored_at_with(&self, bufs: &mut [IoSliceMut<'_>], off: u64, flags: WriteFlags) -> io::Result<usize> {
        self.check_access(Access::Read)?;
        self.read_into(&mut Scatter::new(bufs)?, off, flags)
    }

    /// [`File::read_vectored_at_with`] into raw buffers that need not be
    /// initialized and may overlap (the C ABI's `wbc_preadv`); as
    /// [`File::read_at_uninit`], after `Ok(n)` the concatenation's first
    /// `n` bytes hold the data.
    pub fn read_vectored_at_raw(&self, bufs: &mut [RawIov], off: u64, flags: WriteFlags) -> io::Result<usize> {
        self.check_access(Access::Read)?;
        self.read_into(&mut Scatter::new(bufs)?, off, flags)
    }

    fn read_into<T: ReadTarget + ?Sized>(&self, buf: &mut T, off: u64, flags: WriteFlags) -> io::Result<usize> {
        // No operation guard yet: a read that every cached folio answers
        // touches neither the store nor the memory account, so a close
        // racing it has nothing to wait for (the read comes before it).
        self.shared.check_open()?;
        self.check_access(Access::Read)?;
        let size = self.inode.size();
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off);
        let (start, end) = (off / BLOCK, (off + len).div_ceil(BLOCK));
        with_thread_last_read(|last| {
            let prev_end = self.prev_read_end(last);
            let prev_end_block = prev_end.div_ceil(BLOCK);
            let access = self.access_advice.load(Ordering::Relaxed);
            // As the kernel's random-access mode: the read itself reads
            // what it needs, nothing more.
            if access == ACCESS_RANDOM || self.readahead_state_unchanged(start, end, size, prev_end_block) {
                self.note_read_end(last, off + len, ReadaheadUse::Skipped);
                let caching = self.caching(flags);
                if caching == Caching::Cached {
                    if let Some(n) = self.inode.read_cached(buf, off, prev_end) {
                        return Ok(n);
                    }
                }
                return self.read_through(buf, off, Decision::default(), caching, prev_end);
            }
            let (decision, scanning) = self.readahead_decision(access, start, end, size, prev_end_block);
            // A scan of a file the cache cannot hold, past what a scan may
            // cache: the rest is read as uncached reads are
            // (`scan_dropbehind`).
            let caching = if scanning { Caching::Uncached } else { self.caching(flags) };
            self.note_read_end(last, off + len, ReadaheadUse::Followed);
            if decision == Decision::default() && caching == Caching::Cached {
                if let Some(n) = self.inode.read_cached(buf, off, prev_end) {
                    return Ok(n);
                }
            }
            self.read_through(buf, off, decision, caching, prev_end)
        })
    }

    /// A read the cache did not answer whole, or that must not be cached:
    /// reads ahead as `decision` says, then reads (cached or not, as
    /// `caching` says) through the store as needed.
    fn read_through<T: ReadTarget + ?Sized>(
        &self,
        buf: &mut T,
        off: u64,
        decision: Decision,
        caching: Caching,
        prev_end: u64,
    ) -> io::Result<usize> {
        let _op = self.enter(Access::Read)?;
        // Uncached reads read ahead too; what they bring in is dropped
        // behind the reader once copied.
        if let Some((s, e)) = decision.sync {
            // An error here is retried and reported by the read below.
            let _ = self.inode.fill_range(s, e, FillPlan::for_reader(caching));
        }
        if let Some((s, e)) = decision.async_ {
            self.shared.workers.readahead(&self.inode, (s, e), caching, &self.last_read_end);
        }
        // The inode clips the read to the size itself.
        let result = self.inode.read_at(buf, off, caching, prev_end);
        // A fill may have copied a buffer under writeback (see `evict_excess`).
        self.memory.evict_excess();
        result
    }

    /// Readahead's part in a read of blocks `[start, end)` of a file of
    /// `size` bytes, after a read that ended in block `prev_end_block`
    /// (`access`: the handle's advice): what to read ahead, and whether the
    /// read continues a scan (to be read uncached). Out of line: the hit
    /// path of random reads and re-reads skips it.
    #[inline(never)]
    fn readahead_decision(&self, access: u8, start: u64, end: u64, size: u64, prev_end_block: u64) -> (Decision, bool) {
        let blocks_max =
            if access == ACCESS_SEQUENTIAL { 2 * self.readahead_blocks_max } else { self.readahead_blocks_max };
        let mut ra = locks::lock(&self.readahead);
        ra.set_prev_end_block(prev_end_block);
        let d = ra.on_read(start, end, size.div_ceil(BLOCK), blocks_max, || self.inode.find(start).is_none());
        self.readahead_idle.store(ra.is_idle(), Ordering::Relaxed);
        let short = self.scan_blocks_min.is_none_or(|min| ra.stream_blocks() < min);
        self.readahead_stream_short.store(short, Ordering::Relaxed);
        // The stream before this read: one large read is not a scan by
        // itself.
        let streamed_before = ra.stream_blocks().saturating_sub(end - start);
        (d, self.may_scan(size) && self.scan_blocks_min.is_some_and(|min| streamed_before >= min))
    }

    /// Whether readahead's state, with no window open, would decide
    /// nothing for this read and keep its window closed
    /// ([`Readahead::idle_read_skipping`]): then the read skips its lock,
    /// and a cached read takes none. A read again of the block the previous
    /// read ended in skips it only where it cannot be a scan's: a file the
    /// cache holds, or a stream shorter than a scan (a re-read adds nothing
    /// to it, and a read between that the state did not see starts it anew).
    #[inline]
    fn readahead_state_unchanged(&self, start: u64, end: u64, size: u64, prev_end_block: u64) -> bool {
        if !self.readahead_idle.load(Ordering::Relaxed) {
            return false;
        }
        match Readahead::idle_read_skipping(prev_end_block, start, end) {
            Some(IdleRead::Random) => true,
            Some(IdleRead::RereadOfLastBlock) => {
                !self.may_scan(size) || self.readahead_stream_short.load(Ordering::Relaxed)
            }
            None => false,
        }
    }

    /// Whether reads of a file of `size` bytes may be a scan to drop
    /// behind (`scan_dropbehind`, and a file larger than the cache).
    fn may_scan(&self, size: u64) -> bool {
        self.scan_blocks_min.is_some() && size > self.capacity_bytes
    }

    /// Writes all of `buf` at `off` into the cache (write-back). On a block
    /// device a write starting at or past the end fails with `ENOSPC` and one
    /// crossing it is short.
    pub fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.write_at_with(buf, off, WriteFlags::NONE)
    }

    /// [`File::write_at`] with flags; `DONTCACHE` makes it an uncached write.
    pub fn write_at_with(&self, buf: &[u8], off: u64, flags: WriteFlags) -> io::Result<usize> {
        self.write_from(buf, off, flags)
    }

    /// Writes all of `bufs`, in order, as [`File::write_at`] of their
    /// concatenation would (`pwritev`): one call, one pass over the folios,
    /// whatever the number of buffers. More than 1024 buffers (`IOV_MAX`),
    /// or a total past `isize::MAX`, is `InvalidInput`.
    pub fn write_vectored_at(&self, bufs: &[IoSlice<'_>], off: u64) -> io::Result<usize> {
        self.write_vectored_at_with(bufs, off, WriteFlags::NONE)
    }

    /// [`File::write_vectored_at`] with flags (as [`File::write_at_with`]).
    pub fn write_vectored_at_with(&self, bufs: &[IoSlice<'_>], off: u64, flags: WriteFlags) -> io::Result<usize> {
        self.check_access(Access::Write)?;
        self.write_from(&Gather::new(bufs)?, off, flags)
    }

    fn write_from<S: WriteSource + ?Sized>(&self, data: &S, off: u64, flags: WriteFlags) -> io::Result<usize> {
        self.write_from_pos(data, off, flags).map(|(n, _)| n)
    }

    /// [`File::write_from`], also returning where the write went (the end
    /// of the file for an append handle).
    fn write_from_pos<S: WriteSource + ?Sized>(
        &self,
        data: &S,
        off: u64,
        flags: WriteFlags,
    ) -> io::Result<(usize, u64)> {
        let _op = self.enter(Access::Write)?;
        if data.is_empty() {
            return Ok((0, off));
        }
        // An append finds the end and writes there with no other append
        // of the inode in between.
        let _append = self.append.then(|| self.inode.lock_append());
        let off = if self.append { self.inode.size() } else { off };
        let len = if self.inode.info().is_block_device {
            let dev_size = self.inode.size();
            if off >= dev_size {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            (data.len() as u64).min(dev_size - off) as usize
        } else if off.checked_add(data.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        } else {
            // Past the file system's largest file size: short, or EFBIG.
            self.inode.room_to_grow(off, data.len())?
        };
        let result = self.inode.write_at(data, len, off, self.write_caching(flags, off, len));
        // An edge-block fill may have copied a buffer under writeback.
        self.memory.evict_excess();
        Ok((result?.0, off))
    }

    /// Whether a write of `len` bytes at `off` is uncached: as
    /// [`File::caching`] says, or because the handle's sequential stream
    /// before it reached `stream_cached_bytes` (`stream_dropbehind`).
    fn write_caching(&self, flags: WriteFlags, off: u64, len: usize) -> Caching {
        if self.caching(flags) == Caching::Uncached {
            return Caching::Uncached;
        }
        let Some(cached_bytes) = self.stream_cached_bytes else { return Caching::Cached };
        let streamed_before = if self.write_stream_end.load(Ordering::Relaxed) == off {
            self.write_stream_bytes.load(Ordering::Relaxed)
        } else {
            0
        };
        self.write_stream_end.store(off + len as u64, Ordering::Relaxed);
        self.write_stream_bytes.store(streamed_before.saturating_add(len as u64), Ordering::Relaxed);
        if streamed_before >= cached_bytes {
            Caching::Uncached
        } else {
            Caching::Cached
        }
    }

    /// Whether an access with `flags` is uncached: by its flags, the
    /// handle's open options or its [`Advice::NoReuse`].
    fn caching(&self, flags: WriteFlags) -> Caching {
        if flags.union(self.default_flags).contains(WriteFlags::DONTCACHE) || self.noreuse.load(Ordering::Relaxed) {
            Caching::Uncached
        } else {
            Caching::Cached
        }
    }

    /// Advice about the handle's future accesses (`posix_fadvise(2)`);
    /// see [`Advice`]. `range` is the file's byte range the advice is
    /// about (`WillNeed`, `DontNeed`; the others are about the handle, as
    /// in the kernel): `off..u64::MAX` reaches the end of the file. Any
    /// handle may advise, whatever its access mode. `InvalidInput` for a
    /// range that ends before it starts.
    pub fn advise(&self, range: std::ops::Range<u64>, advice: Advice) -> io::Result<()> {
        let _op = self.shared.enter_op()?;
        check_range(&range)?;
        match advice {
            Advice::Normal => {
                self.access_advice.store(ACCESS_NORMAL, Ordering::Relaxed);
                self.noreuse.store(false, Ordering::Relaxed);
            }
            Advice::Sequential => self.access_advice.store(ACCESS_SEQUENTIAL, Ordering::Relaxed),
            Advice::Random => self.access_advice.store(ACCESS_RANDOM, Ordering::Relaxed),
            Advice::NoReuse => self.noreuse.store(true, Ordering::Relaxed),
            Advice::WillNeed => {
                let end = range.end.min(self.inode.size()).min(range.start.saturating_add(self.willneed_bytes_max()));
                if range.start < end {
                    // Its own reader position: a window is skipped only
                    // when the reader of this advice passed it (never).
                    let never_passed = Arc::new(AtomicU64::new(0));
                    let blocks = (range.start / BLOCK, end.div_ceil(BLOCK));
                    self.shared.workers.readahead(&self.inode, blocks, Caching::Cached, &never_passed);
                }
            }
            Advice::DontNeed => {
                if range.start < range.end {
                    self.inode.advise_dontneed(range.start, range.end);
                }
            }
        }
        Ok(())
    }

    /// The most one `WillNeed` reads ahead: half the cache, so that the
    /// data asked for does not push itself out.
    fn willneed_bytes_max(&self) -> u64 {
        self.shared.config.capacity_bytes / 2
    }

    /// Writeback of a byte range (`sync_file_range(2)`), in the steps
    /// `how` names: wait for the file's writeback in flight, start
    /// writeback of the range's dirty blocks (in the async class, without
    /// flushing the device), wait for it. **No durability promise**, as
    /// with the kernel's call: the device's cache is not flushed and the
    /// file's size and allocation are not synced; use [`File::sync_data`]
    /// for that. `off..u64::MAX` reaches the end of the file; a folio that
    /// the range covers in part is written whole. A start without
    /// `WAIT_AFTER` returns once the blocks are under writeback; the
    /// cache's range-writer threads write them. Each wait reports a
    /// writeback error of the file since this handle's last report (as
    /// [`File::sync_all`] does, and then the next sync does not report
    /// it again). Any handle may call it. `InvalidInput` for a range that
    /// ends before it starts.
    pub fn writeback_range(&self, range: std::ops::Range<u64>, how: SyncRangeFlags) -> io::Result<()> {
        let _op = self.shared.enter_op()?;
        check_range(&range)?;
        use crate::writeback::sync_range::RangeWriter;
        if how.contains(SyncRangeFlags::WAIT_BEFORE) {
            RangeWriter::wait(&self.inode);
            self.inode.check_errors(&mut locks::lock(&self.err_cursor))?;
        }
        if how.contains(SyncRangeFlags::WRITE) && range.start < range.end {
            let blocks = (range.start / BLOCK, range.end.div_ceil(BLOCK));
            let wait_after = how.contains(SyncRangeFlags::WAIT_AFTER);
            self.shared.range_writer.start_writeback(&self.inode, blocks, wait_after);
        }
        if how.contains(SyncRangeFlags::WAIT_AFTER) {
            RangeWriter::wait(&self.inode);
            self.inode.check_errors(&mut locks::lock(&self.err_cursor))?;
        }
        Ok(())
    }

    /// Reserves the store's blocks for `range` (`fallocate(2)` mode 0, or
    /// `FALLOC_FL_KEEP_SIZE` with `keep_size`): later writes there cannot
    /// fail for want of space. Without `keep_size` a range past the end
    /// extends the file (with zeros). No cached byte changes. Needs write
    /// access (`EBADF`). `InvalidInput` for an empty range, `EFBIG` past
    /// `i64::MAX` or the file system's largest file, `EOPNOTSUPP` where
    /// the store cannot (a block device, a file system without
    /// `fallocate`), and the store's own (`ENOSPC`; on a block device
    /// `EINVAL` for a range not aligned to its logical block size or past
    /// its end, whatever the mode).
    pub fn allocate(&self, range: std::ops::Range<u64>, keep_size: bool) -> io::Result<()> {
        self.fallocate(range, Allocation::Reserve { keep_size })
    }

    /// Deallocates `range` (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`):
    /// it reads as zeros afterwards, cached or not, and dirty data in it is
    /// discarded, never written over the hole. The size does not change.
    /// Errors as [`File::allocate`].
    pub fn punch_hole(&self, range: std::ops::Range<u64>) -> io::Result<()> {
        self.fallocate(range, Allocation::PunchHole)
    }

    /// Zeroes `range` (`FALLOC_FL_ZERO_RANGE`, with `FALLOC_FL_KEEP_SIZE`
    /// when `keep_size`): as [`File::punch_hole`], but the blocks stay
    /// allocated and, without `keep_size`, a range past the end extends
    /// the file. Errors as [`File::allocate`].
    pub fn zero_range(&self, range: std::ops::Range<u64>, keep_size: bool) -> io::Result<()> {
        self.fallocate(range, Allocation::ZeroRange { keep_size })
    }

    /// `fallocate(2)` of `range` as `how` says: [`File::allocate`],
    /// [`File::punch_hole`] or [`File::zero_range`], chosen by a value
    /// (`Allocation::try_from(mode)` takes `fallocate(2)`'s mode bits, as
    /// the C ABI's `wbc_fallocate` does). Errors as [`File::allocate`].
    pub fn fallocate(&self, range: std::ops::Range<u64>, how: Allocation) -> io::Result<()> {
        let _op = self.enter(Access::Write)?;
        if range.start >= range.end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("fallocate of an empty range {}..{}", range.start, range.end),
            ));
        }
        if range.end > i64::MAX as u64 {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let result = self.inode.allocate(how, range.start, range.end - range.start);
        // Zeroing a folio's part may have copied a buffer under writeback.
        self.memory.evict_excess();
        result
    }

    /// Writes back and syncs data and metadata (`fsync`). Reports a
    /// writeback error since this handle's last report once.
    pub fn sync_all(&self) -> io::Result<()> {
        self.sync(SyncKind::All)
    }

    /// As [`File::sync_all`] but `fdatasync` (metadata only if the size
    /// changed).
    pub fn sync_data(&self) -> io::Result<()> {
        self.sync(SyncKind::DataOnly)
    }

    fn sync(&self, kind: SyncKind) -> io::Result<()> {
        let _op = self.shared.enter_op()?;
        let mut cursor = locks::lock(&self.err_cursor);
        self.inode.sync(kind, &mut cursor)
    }

    /// Logical size in bytes.
    pub fn len(&self) -> io::Result<u64> {
        self.shared.check_open()?;
        Ok(self.inode.size())
    }

    /// Whether the size is 0.
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Truncates or extends (with zeros). Block devices: `EINVAL` unless the
    /// size is unchanged.
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        let _op = self.enter(Access::Write)?;
        if size > i64::MAX as u64 {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let result = self.inode.set_len(size);
        // Zeroing the new last folio's tail may have copied its buffer.
        self.memory.evict_excess();
        result?;
        self.inode.queue_on_dirty_list(None);
        Ok(())
    }

    /// What of `[off, off + len)` is cached, as `mincore(2)` answers for
    /// pages: `out[i]` gets the bits of the `i`-th 4 KiB block from the one
    /// holding `off` ([`RESIDENT_CACHED`], [`RESIDENT_DIRTY`],
    /// [`RESIDENT_WRITEBACK`]; 0 = not cached). Blocks past the end of the
    /// file are not reported. Returns the number of blocks filled; `out`
    /// must hold them (`InvalidInput` otherwise). A snapshot: the answer
    /// may be stale as soon as it returns.
    pub fn residency(&self, off: u64, len: u64, out: &mut [u8]) -> io::Result<usize> {
        let _op = self.shared.enter_op()?;
        let end = off
            .checked_add(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("range {off} + {len} overflows")))?;
        let end = end.min(self.inode.size());
        if end <= off {
            return Ok(0);
        }
        let first = off / BLOCK;
        let nr_blocks = (end.div_ceil(BLOCK) - first) as usize;
        if out.len() < nr_blocks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("residency of {nr_blocks} blocks needs {nr_blocks} bytes, got {}", out.len()),
            ));
        }
        self.inode.residency(first, &mut out[..nr_blocks]);
        Ok(nr_blocks)
    }

    /// The byte ranges of the file the cache holds (as `fincore(1)`
    /// reports), in order, merged, within the file's size. Costs a look at
    /// every cached block, not at the file's whole length. A snapshot: the
    /// answer may be stale as soon as it returns.
    pub fn cached_ranges(&self) -> io::Result<Vec<std::ops::Range<u64>>> {
        let _op = self.shared.enter_op()?;
        let size = self.inode.size();
        Ok(self
            .inode
            .cached_block_runs()
            .into_iter()
            .map(|(first, end)| first * BLOCK..(end * BLOCK).min(size))
            .filter(|r| r.start < r.end)
            .collect())
    }

    /// Whether the handle was opened with [`OpenOptions::append`].
    pub fn is_append(&self) -> bool {
        self.append
    }

    /// Whether the handle was opened with [`OpenOptions::dontcache`].
    pub fn is_dontcache(&self) -> bool {
        self.default_flags.contains(WriteFlags::DONTCACHE)
    }

    /// Whether the backing store is a raw block device.
    pub fn is_block_device(&self) -> bool {
        self.inode.info().is_block_device
    }

    /// A `Read + Write + Seek` cursor at offset 0.
    pub fn cursor(&self) -> FileCursor<'_> {
        FileCursor::new(self)
    }

    /// Closes the handle. Dirty data stays cached and is written back later.
    pub fn close(self) {}
}

impl Drop for File {
    fn drop(&mut self) {
        // SeqCst: see `Inode::mark_unlinked`.
        if self.inode.handle_closed() == 0 && !self.shared.is_closed() {
            if self.inode.is_unlinked() {
                // As close(2) of an unlinked file's last descriptor: its
                // data goes, unwritten.
                self.shared.discard_unlinked(&self.inode);
            } else {
                self.shared.forget_inode_if_idle(&self.inode);
            }
        }
    }
}

/// `InvalidInput` unless `range` is a range (start at or before end).
fn check_range(range: &std::ops::Range<u64>) -> io::Result<()> {
    if range.start > range.end {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("range {}..{} ends before it starts", range.start, range.end),
        ));
    }
    Ok(())
}
