//! The read side of an inode: cache hits copied under the mapping's read
//! lock, misses filled by creating locked placeholder folios, reading their
//! blocks (one I/O per contiguous run) and publishing them uptodate.
//!
//! Invariants: a block at or beyond `on_disk_len_max` reads as zeros
//! without I/O; only the named blocks of a folio are read, never more; a
//! reader never sees a block that is not uptodate; a failed fill leaves
//! its folio's blocks not uptodate and reports the error to that reader.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::Inode;
use crate::base::epoch::ReadSection;
use crate::buf::user::ReadTarget;
use crate::buf::AlignedBuf;
use crate::io::{batch_len, run_batch, IoBufs, IoOp, IoPriority, BLOCK_SIZE};
use crate::mapping::folio::{Caching, Folio, FolioState, OptimisticCopy};
use crate::policy::dirty::READER_SYNC_WAITER_ID;
use crate::policy::memory::{BufUse, WhenFull};
use crate::stats::{Counters, DeviceClass};

const BLOCK: u64 = BLOCK_SIZE as u64;

/// The longest part of a read copied on the hit paths (see
/// [`Inode::copy_cached_part`]): a few microseconds of copying at most,
/// under the mapping's read lock or inside a read section.
const HIT_COPY_UNDER_INDEX_MAX: usize = 64 << 10;

/// Copies tried without a lock before the locked path takes over, while
/// writers keep changing the folio.
const OPTIMISTIC_TRIES: usize = 3;

/// How a fill reads the blocks it brings in.
#[derive(Clone, Copy)]
pub struct FillPlan<'a> {
    pub priority: IoPriority,
    /// Uncached: the folios it creates are dropped behind the reader.
    pub caching: Caching,
    /// The reads submitted together, about this many bytes; each batch is
    /// readable as soon as it completes.
    pub batch_bytes: u64,
    /// Readahead's reader's position (bytes): the blocks it has passed are
    /// not filled.
    pub reader_pos: Option<&'a AtomicU64>,
}

impl FillPlan<'_> {
    /// A reader's own fill: synchronous, every read submitted at once.
    pub fn for_reader(caching: Caching) -> FillPlan<'static> {
        FillPlan { priority: IoPriority::Sync, caching, batch_bytes: u64::MAX, reader_pos: None }
    }
}

/// Where one folio's part of a read lies, for the hit paths (see
/// [`Inode::copy_cached_part`]).
#[derive(Clone, Copy)]
struct ReadPart {
    /// Bytes of the read already copied: the part goes to this offset of
    /// the caller's buffer.
    done: usize,
    /// File offset of the part.
    pos: u64,
    /// Bytes of the read left.
    remaining: usize,
    /// Where the handle's previous read ended (bytes): a folio it touched
    /// is not counted as accessed again.
    prev_end: u64,
}

impl Inode {
    /// Reads blocks `[b, e)` of a locked folio (block `abs` of the file
    /// onwards, up to block `read_end`; zeros past it) and marks them
    /// uptodate; inside [`Folio::change`].
    fn read_blocks_into(
        &self,
        folio: &Folio,
        st: &mut FolioState,
        (b, e): (usize, usize),
        abs: u64,
        read_end: u64,
    ) -> io::Result<()> {
        let buf = Arc::make_mut(st.buf_mut());
        let bytes = &mut buf[b * BLOCK_SIZE..e * BLOCK_SIZE];
        bytes.fill(0);
        if read_end > abs {
            let n = ((read_end - abs) * BLOCK) as usize;
            let store = self.store();
            let io = self.counters.device.begin(DeviceClass::Read, n as u64);
            let read = crate::io::read_full(&*store, &mut bytes[..n], abs * BLOCK, IoPriority::Sync);
            self.counters.device.end(io);
            read?;
            // A short read is a hole or end of file: the zeros stand.
            // Bytes past `on_disk_len_max` (a truncate not yet applied to
            // the store) are zeros whatever the store still holds.
            let disk_len = self.on_disk_len_max.load(Ordering::Acquire);
            let valid = disk_len.saturating_sub(abs * BLOCK).min(n as u64) as usize;
            bytes[valid..].fill(0);
        }
        st.set_uptodate(folio.nr_blocks(), b, e);
        Ok(())
    }

    /// Makes blocks `[start, end)` of a locked folio uptodate: blocks at or
    /// beyond the on-disk length become zeros, the rest are read (one I/O
    /// per contiguous run). Only the named blocks are read, never the folio.
    pub(super) fn fill_blocks(&self, folio: &Folio, st: &mut FolioState, start: usize, end: usize) -> io::Result<()> {
        debug_assert!(start < end && end <= folio.nr_blocks(), "blocks {start}..{end} of the folio");
        debug_assert!(!st.removed && !st.read_in_flight, "a cached folio no fill is reading");
        let disk_blocks = self.on_disk_len_max.load(Ordering::Acquire).div_ceil(BLOCK);
        let mut b = start;
        while b < end {
            if st.all_uptodate || st.uptodate.get(b) {
                b += 1;
                continue;
            }
            let mut e = b + 1;
            while e < end && !st.uptodate.get(e) {
                e += 1;
            }
            let abs = folio.index + b as u64;
            let read_end = (folio.index + e as u64).min(disk_blocks.max(abs));
            self.memory.account_shared_copy(st);
            folio.change(st, |st| self.read_blocks_into(folio, st, (b, e), abs, read_end))?;
            b = e;
        }
        debug_assert!(st.is_uptodate(start, end), "blocks {start}..{end} filled");
        Ok(())
    }

    /// Makes blocks `[start, end)` cached and uptodate, creating and
    /// reading the folios that are missing, as `plan` says.
    pub fn fill_range(self: &Arc<Self>, start: u64, end: u64, plan: FillPlan<'_>) -> io::Result<()> {
        let FillPlan { priority, caching, batch_bytes, reader_pos } = plan;
        let mut created = Vec::new();
        let mut b = start;
        while b < end {
            // A window the reader overtook (read and, uncached, dropped
            // already) is not filled again: nobody would read it, and its
            // folios would stay cached, not dropped behind.
            if let Some(pos) = reader_pos {
                let passed = pos.load(Ordering::Acquire).div_ceil(BLOCK);
                if b < passed {
                    b = passed;
                    continue;
                }
            }
            // Once some placeholders exist, fill those rather than wait for
            // memory they themselves may be holding.
            let when_full =
                if priority == IoPriority::Sync && created.is_empty() { WhenFull::Wait } else { WhenFull::Fail };
            match self.find_or_create(b, end, BufUse::Read, when_full) {
                Ok((f, new)) => {
                    b = f.end_index();
                    if new {
                        if caching.is_uncached() {
                            f.dropbehind.store(true, Ordering::Relaxed);
                        }
                        created.push(f);
                    }
                }
                Err(e) => {
                    if created.is_empty() {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        // All placeholders exist before any I/O, so a fast reader waits for
        // this fill instead of overtaking it. The I/O then goes in batches
        // of about `batch_bytes`, each readable as soon as it completes.
        // Each batch's folios are let go once published: a reader done
        // with one of them may hand it to drop-behind, which frees only
        // folios nobody holds.
        let mut first_err = None;
        let mut rest = std::collections::VecDeque::from(created);
        while !rest.is_empty() {
            let n = batch_len(rest.iter().map(|f| f.size_bytes() as u64), batch_bytes);
            let batch: Vec<Arc<Folio>> = rest.drain(..n).collect();
            if let Err(e) = self.fill_folios(&batch, priority) {
                first_err.get_or_insert(e);
            }
            debug_assert!(batch.iter().all(|f| !f.lock().read_in_flight), "every placeholder was published");
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reads placeholders (`read_in_flight` folios) from the store as one
    /// batch of `io_max` reads and publishes them.
    fn fill_folios(&self, created: &[Arc<Folio>], priority: IoPriority) -> io::Result<()> {
        debug_assert!(created.iter().all(|f| f.lock().read_in_flight));
        // Take the buffers out so the I/O can write them without the lock;
        // nobody else touches a read_in_flight folio's buffer.
        let mut bufs: Vec<Arc<AlignedBuf>> = created
            .iter()
            .map(|f| f.change(&mut f.lock(), |st| std::mem::replace(st.buf_mut(), Arc::new(AlignedBuf::zeroed(0)))))
            .collect();
        let (results, supplied) = self.read_placeholders(created, &mut bufs, priority);
        let disk_len = self.on_disk_len_max.load(Ordering::Acquire);
        for ((buf, &n), f) in bufs.iter_mut().zip(&supplied).zip(created) {
            let buf = Arc::get_mut(buf).expect("a filling folio's buffer is private");
            // Past end of file (or a hole the store did not return), or past
            // a truncate not yet applied to the store: zeros.
            let valid = n.min(disk_len.saturating_sub(f.offset()) as usize);
            buf[valid..].fill(0);
        }
        self.publish_fills(created, bufs, results, priority)
    }

    /// Reads each placeholder's buffer (whole blocks up to
    /// `on_disk_len_max`) in one batch. Placeholders that lie next to each
    /// other on the store share one vectored read of at most `io_max`
    /// bytes: a miss that spans two single-block folios (a database's 4 KiB
    /// page at an unaligned offset) is one device request, as the kernel's
    /// is, not two. Returns each folio's result and the bytes the store
    /// supplied to it: the contiguous prefix up to its first short read
    /// (end of file).
    fn read_placeholders(
        &self,
        created: &[Arc<Folio>],
        bufs: &mut [Arc<AlignedBuf>],
        priority: IoPriority,
    ) -> (Vec<io::Result<()>>, Vec<usize>) {
        let disk_len = self.on_disk_len_max.load(Ordering::Acquire);
        let store = self.store();
        let mut ops: Vec<IoOp<'_>> = Vec::new();
        // (op, folio, offset of the piece in the folio, piece length), in
        // the order the op's buffers lie.
        let mut pieces: Vec<(usize, usize, usize, usize)> = Vec::new();
        let io_max = self.config.io_max_bytes as usize;
        for (i, (f, buf)) in created.iter().zip(bufs.iter_mut()).enumerate() {
            let buf = Arc::get_mut(buf).expect("a filling folio's buffer is private");
            // Whole blocks (O_DIRECT) up to `on_disk_len_max`; what lies
            // past it is zeroed by the caller.
            let want = disk_len.saturating_sub(f.offset()).next_multiple_of(BLOCK).min(buf.len() as u64) as usize;
            // io_max-sized reads keep several requests in flight on the
            // device even for one large folio.
            for (k, piece) in buf[..want].chunks_mut(io_max).enumerate() {
                let (offset, len) = (f.offset() + (k * io_max) as u64, piece.len());
                match ops.last_mut() {
                    Some(op) if op.offset + op.len() as u64 == offset && op.len() + len <= io_max => {
                        let IoBufs::Read(op_bufs) = &mut op.bufs else { unreachable!("only reads here") };
                        op_bufs.push(piece);
                    }
                    _ => ops.push(IoOp::read(offset, piece, priority)),
                }
                pieces.push((ops.len() - 1, i, k * io_max, len));
            }
        }
        // A reader waiting on the device counts as a sync waiter of the
        // domain: the flusher then keeps its background writes in the
        // device queue to `async_depth_while_sync`, so a read does not wait
        // behind megabytes of them (the kernel's block layer throttles
        // buffered writeback for reads the same way, `wbt`). No inode has
        // the waiter's id: nothing is promoted for it.
        let _reader = (priority == IoPriority::Sync).then(|| self.dirty.enter_sync(READER_SYNC_WAITER_ID));
        let class = if priority == IoPriority::Sync { DeviceClass::Read } else { DeviceClass::Readahead };
        let device = &self.counters.device;
        let in_flight: Vec<_> = ops.iter().map(|op| device.begin(class, op.len() as u64)).collect();
        let started = std::time::Instant::now();
        run_batch(&*store, &mut ops);
        in_flight.into_iter().for_each(|io| device.end(io));
        if priority == IoPriority::Sync {
            self.dirty.background_budget.record(started.elapsed());
        }
        let results: Vec<io::Result<usize>> =
            ops.iter_mut().map(|op| op.result.take().expect("run_batch completes every op")).collect();
        Self::share_out_reads(created.len(), &pieces, results)
    }

    /// Shares each read's outcome out to the folios whose pieces it
    /// carried, in order: bytes fill the pieces front to back (a short read
    /// ends at end of file), an error fails every folio in the read.
    fn share_out_reads(
        folios: usize,
        pieces: &[(usize, usize, usize, usize)],
        results: Vec<io::Result<usize>>,
    ) -> (Vec<io::Result<()>>, Vec<usize>) {
        let mut outcome: Vec<io::Result<()>> = (0..folios).map(|_| Ok(())).collect();
        let mut supplied = vec![0usize; folios];
        let mut short = vec![false; folios];
        let mut left = vec![0usize; results.len()];
        for (op, result) in results.iter().enumerate() {
            left[op] = *result.as_ref().unwrap_or(&0);
        }
        for &(op, i, start, len) in pieces {
            match &results[op] {
                Ok(_) => {
                    let got = left[op].min(len);
                    left[op] -= got;
                    if !short[i] {
                        supplied[i] = start + got;
                        short[i] = got < len;
                    }
                }
                Err(e) => {
                    short[i] = true;
                    if outcome[i].is_ok() {
                        // Each folio of the read reports it: the same errno,
                        // or the same kind and message.
                        let copy = match e.raw_os_error() {
                            Some(code) => io::Error::from_raw_os_error(code),
                            None => io::Error::new(e.kind(), e.to_string()),
                        };
                        outcome[i] = Err(copy);
                    }
                }
            }
        }
        (outcome, supplied)
    }

    /// Gives each filled folio its buffer back, uptodate where its read
    /// succeeded, and wakes its waiters; a folio whose read failed leaves
    /// the mapping (unless a writer dirtied it meanwhile) so the next
    /// reader retries. Returns the first error.
    fn publish_fills(
        &self,
        created: &[Arc<Folio>],
        bufs: Vec<Arc<AlignedBuf>>,
        results: Vec<io::Result<()>>,
        priority: IoPriority,
    ) -> io::Result<()> {
        let mut first_err = None;
        let mut read_bytes = 0u64;
        for ((f, buf), result) in created.iter().zip(bufs).zip(results) {
            let mut st = f.lock();
            debug_assert!(st.read_in_flight && st.buf().is_empty(), "a placeholder's buffer is out for its read");
            debug_assert!(!st.removed && st.nr_dirty == 0 && st.nr_writeback == 0, "no one but the fill touches it");
            let filled = result.is_ok();
            f.change(&mut st, |st| {
                *st.buf_mut() = buf;
                st.read_in_flight = false;
                if filled {
                    st.set_uptodate(f.nr_blocks(), 0, f.nr_blocks());
                }
            });
            if filled {
                read_bytes += f.size_bytes() as u64;
            }
            st.check(f.nr_blocks());
            debug_assert!(result.is_err() || st.all_uptodate, "a filled folio is uptodate");
            // Counted under the lock the waiters register under: none can
            // be missed, and no wake is sent to nobody.
            let waiters = st.fill_waiters > 0;
            drop(st);
            // Wake waiters before taking the mapping lock: a truncate holding
            // it may be one of them.
            if waiters {
                f.filled.notify_all();
            }
            if let Err(e) = result {
                self.try_remove_clean(f);
                first_err.get_or_insert(e);
            }
        }
        if priority == IoPriority::Async {
            Counters::add(&self.counters.readahead_bytes, read_bytes);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Copies file bytes `[off, off + buf.len())` (clipped to the size) into
    /// `buf`, filling missing folios with one I/O each. Returns bytes read.
    /// Uncached, folios this read brought in are dropped once the read has
    /// copied up to their end; a cached read clears drop-behind.
    /// `prev_end` is where this handle's previous read ended: a folio that
    /// read already touched is not counted as accessed again (sequential
    /// small reads of one large folio are one use, not many).
    pub fn read_at<T: ReadTarget + ?Sized>(
        self: &Arc<Self>,
        buf: &mut T,
        off: u64,
        caching: Caching,
        prev_end: u64,
    ) -> io::Result<usize> {
        let size = self.size();
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let end_block = (off + len as u64).div_ceil(BLOCK);
        let mut done = 0usize;
        let mut missed = false;
        while done < len {
            let pos = off + done as u64;
            let block = pos / BLOCK;
            if caching == Caching::Cached {
                if let Some(n) = self.copy_cached_part(buf, ReadPart { done, pos, remaining: len - done, prev_end }) {
                    done += n;
                    continue;
                }
            }
            let Some(folio) = self.find(block) else {
                missed = true;
                // At most a readahead window per fill, so one huge read
                // cannot pin the whole cache in placeholders.
                let fill_end = end_block.min(block + self.config.readahead_blocks_max());
                self.fill_range(block, fill_end, FillPlan::for_reader(caching))?;
                continue;
            };
            let Some(mut st) = folio.lock_filled() else { continue };
            let folio_off = (pos - folio.offset()) as usize;
            let n = (folio.size_bytes() - folio_off).min(len - done);
            let first = folio_off / BLOCK_SIZE;
            let last = (folio_off + n).div_ceil(BLOCK_SIZE);
            if !st.is_uptodate(first, last) {
                missed = true;
                self.fill_blocks(&folio, &mut st, first, last)?;
            }
            buf.copy_in(done, &st.buf()[folio_off..folio_off + n]);
            let clean = st.nr_dirty == 0 && st.nr_writeback == 0;
            drop(st);
            if caching == Caching::Cached {
                folio.dropbehind.store(false, Ordering::Relaxed);
                let touched_by_prev =
                    prev_end > folio.offset() && prev_end <= folio.offset() + folio.size_bytes() as u64;
                if !touched_by_prev {
                    folio.mark_accessed();
                }
            } else if clean && folio_off + n == folio.size_bytes() && folio.dropbehind.load(Ordering::Relaxed) {
                // Freed by the reaper, not here: the reader goes on.
                self.queue_dropbehind(folio);
            }
            done += n;
        }
        if missed {
            Counters::add(&self.counters.misses, 1);
        } else {
            self.counters.hits.add_one();
        }
        // A truncate that raced this read: what lies past the new end was
        // not there when the read finished, so it is not returned.
        Ok(len.min(self.size().saturating_sub(off) as usize))
    }

    /// A read that the cache answers whole, without I/O and without
    /// waiting: `Some(bytes read)` if every part of it lay in cached,
    /// uptodate folios (see [`Inode::copy_cached_part`]), `None` for the
    /// full path to do (which copies again what this copied).
    pub fn read_cached<T: ReadTarget + ?Sized>(&self, buf: &mut T, off: u64, prev_end: u64) -> Option<usize> {
        let size = self.size();
        if off >= size || buf.is_empty() {
            return Some(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let mut done = 0;
        while done < len {
            let part = ReadPart { done, pos: off + done as u64, remaining: len - done, prev_end };
            done += self.copy_cached_part(buf, part)?;
        }
        self.counters.hits.add_one();
        // As the full path: a truncate that raced the read cuts it.
        Some(len.min(self.size().saturating_sub(off) as usize))
    }

    /// The read hit path: copies the part of a read at `part.pos` (up to
    /// `part.remaining` bytes) that one cached, uptodate folio holds. First
    /// without any lock ([`Inode::copy_cached_part_optimistic`]); when that
    /// cannot answer (a change under way, blocks not all uptodate), under
    /// the mapping's read lock and the folio's lock
    /// ([`Inode::copy_cached_part_locked`]). `None` when the slow path
    /// must do it.
    fn copy_cached_part<T: ReadTarget + ?Sized>(&self, buf: &mut T, part: ReadPart) -> Option<usize> {
        self.copy_cached_part_optimistic(buf, part).or_else(|| self.copy_cached_part_locked(buf, part))
    }

    /// The hit path with no lock and no shared write: in a read section,
    /// finds the folio without the index's lock and copies from it,
    /// validated by the folio's sequence (retried a few times while a
    /// writer changes it). Parts longer than [`HIT_COPY_UNDER_INDEX_MAX`]
    /// are left to the locked paths, so that a section stays short.
    fn copy_cached_part_optimistic<T: ReadTarget + ?Sized>(&self, buf: &mut T, part: ReadPart) -> Option<usize> {
        let section = ReadSection::enter()?;
        let folio = self.mapping.find_lockless(&section, part.pos / BLOCK)?;
        let folio_off = (part.pos - folio.offset()) as usize;
        let n = (folio.size_bytes() - folio_off).min(part.remaining);
        if n > HIT_COPY_UNDER_INDEX_MAX {
            return None;
        }
        let mut tries = 0;
        loop {
            match folio.copy_optimistic(folio_off, n, |bytes| buf.copy_in(part.done, bytes)) {
                OptimisticCopy::Copied => break,
                OptimisticCopy::NotReadable => return None,
                OptimisticCopy::Changed => {
                    Counters::add(&self.counters.hit_retries, 1);
                    tries += 1;
                    if tries == OPTIMISTIC_TRIES {
                        return None;
                    }
                }
            }
        }
        self.note_cached_access(folio, part.prev_end);
        drop(section);
        Some(n)
    }

    /// The hit path under the mapping's read lock and the folio's lock,
    /// without taking a reference to the folio (the lock order is the
    /// index's, then the folio's; a folio in the index is not removed while
    /// its read lock is held). Only parts of at most
    /// [`HIT_COPY_UNDER_INDEX_MAX`] bytes: a longer copy would hold off
    /// folio insertions (and, with a writer waiting, other readers) for its
    /// whole length. `None` when the slow path must do it (a miss, a folio
    /// locked by someone else, a fill in flight, blocks not uptodate, a
    /// long part). Out of line: the lock-free path answers nearly every
    /// hit, and its code stays small.
    #[cold]
    #[inline(never)]
    fn copy_cached_part_locked<T: ReadTarget + ?Sized>(&self, buf: &mut T, part: ReadPart) -> Option<usize> {
        let map = self.mapping.read();
        let folio = map.find(part.pos / BLOCK)?;
        let folio_off = (part.pos - folio.offset()) as usize;
        let n = (folio.size_bytes() - folio_off).min(part.remaining);
        if n > HIT_COPY_UNDER_INDEX_MAX {
            return None;
        }
        // Never waits with the index locked: a folio's lock may be held
        // across a fill's I/O, and folio insertions would wait behind us.
        let mut st = folio.state.try_lock().ok()?;
        debug_assert!(!st.removed, "a folio in the index is not removed");
        debug_assert!(folio.published_matches(&st), "lock-free readers see the folio's state");
        let (first, last) = (folio_off / BLOCK_SIZE, (folio_off + n).div_ceil(BLOCK_SIZE));
        if st.read_in_flight || !st.is_uptodate(first, last) {
            return None;
        }
        buf.copy_in(part.done, &st.buf()[folio_off..folio_off + n]);
        drop(st);
        self.note_cached_access(&folio, part.prev_end);
        Some(n)
    }

    /// A cached read of `folio` happened: it is no longer to be dropped
    /// behind, and counts as accessed unless the handle's previous read
    /// (ending at `prev_end`) touched it already. Plain loads, and stores
    /// only when something changes: readers of a hot folio on other cores
    /// keep its line shared.
    fn note_cached_access(&self, folio: &Folio, prev_end: u64) {
        if folio.dropbehind.load(Ordering::Relaxed) {
            folio.dropbehind.store(false, Ordering::Relaxed);
        }
        let touched_by_prev = prev_end > folio.offset() && prev_end <= folio.offset() + folio.size_bytes() as u64;
        if !touched_by_prev {
            folio.mark_accessed();
        }
    }
}
