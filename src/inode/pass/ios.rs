//! A writeback pass's I/Os: chunks cut to `io_max`, neighbours joined
//! into vectored writes (bridging small clean gaps), the store's tail and
//! small sync appends routed through its buffered descriptor, and the
//! store grown before writes past its known length.
//!
//! Invariant: bridged (clean) blocks are held, never counted as dirty or
//! writeback bytes; every chunk belongs to exactly one I/O.

use std::io;
use std::sync::atomic::Ordering;

use super::chunk::{WbChunk, WbPass};
use crate::base::locks::{self, Rank};
use crate::inode::Inode;
use crate::io::queue::{QueuedWrite, Segment};
use crate::io::{batch_len, run_batch, BackingStore, IoOp, IoPriority, BLOCK_SIZE, IOV_MAX};
use crate::stats::{Counters, DeviceAccount, DeviceClass};

const BLOCK: u64 = BLOCK_SIZE as u64;

/// Cuts each chunk into chunks of at most `io_blocks_max` blocks.
pub(super) fn split_at_io_max(chunks: Vec<WbChunk>, io_blocks_max: usize) -> Vec<WbChunk> {
    let mut split = Vec::with_capacity(chunks.len());
    for c in chunks {
        let mut s = c.start;
        while s < c.end {
            let e = (s + io_blocks_max).min(c.end);
            split.push(WbChunk {
                folio: c.folio.clone(),
                buf: c.buf.clone(),
                start: s,
                end: e,
                bridge: false,
                buffered_len: None,
                result: None,
            });
            s = e;
        }
    }
    split
}

/// The largest sync append written through the kernel's cache
/// ([`Inode::mark_sync_append`]): a SQLite commit's journal (about 21 KiB
/// in the sqlite benchmark) or WAL frames fit many times over.
const SYNC_APPEND_BUFFERED_MAX: usize = 64 * 1024;

/// How a pass written in the caller's thread sends its O_DIRECT writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitWindow {
    /// All in one batch: the submission queue's depth is the only bound.
    Whole,
    /// In batches of at most this many bytes (one I/O at least), each
    /// completed before the next is sent.
    Bytes(u64),
}

/// The largest write an fsync or close builds while a read miss is recent
/// ([`crate::policy::dirty::READ_RECENT`]). On this project's virtio disk a
/// read waits for the whole of a write already in the device: next to
/// RocksDB's own flushes and compactions (`wbcache bench -w
/// rocksdb/readwhilewriting`, 1G, block-layer tracepoints), 0.9% of its
/// reads took more than 0.5 ms from the scheduler's queue to completion,
/// with one 1 MiB write in the device (on average, 1.1 MiB) when they came
/// and 1.0 ms at the device, against 42 µs for the others. A 4 KiB
/// fdatasync took 1.4 ms behind 1 MiB writes and 0.24 ms behind 128 KiB
/// ones. The block layer may still merge neighbouring writes sent in one
/// batch (io_uring plugs a batch; merged requests reach `max_sectors_kb`),
/// but an fsync's writes that io_uring hands to its worker threads (ext4
/// allocating blocks) go one at a time and stay at this size. The
/// flusher's writes keep the background budget's size: built at this
/// size too, they cost a stream next to SQLite's commits 15% of its rate
/// (`wbcache bench -w sqlite`, 256M, --repeat 3), and the block layer
/// merged them back into 1-4 MiB requests all the same.
pub const IO_BYTES_WHILE_READING: u64 = 128 << 10;

/// The bytes of a caller's writeback (a large fsync's own writes) in
/// flight at once while read misses are recent: eight writes of
/// [`IO_BYTES_WHILE_READING`]. Sent all at once, a compaction's fsync put
/// 61 MiB into the queue ahead of RocksDB's next reads.
pub const SYNC_WRITE_WINDOW_WHILE_READING: u64 = 8 * IO_BYTES_WHILE_READING;

/// The window for a pass of `pass_bytes` written in the caller's thread:
/// batches of [`SYNC_WRITE_WINDOW_WHILE_READING`] while a read miss is
/// recent, whole otherwise.
pub fn submit_window(pass_bytes: u64, read_recent: bool) -> SubmitWindow {
    if read_recent && pass_bytes > SYNC_WRITE_WINDOW_WHILE_READING {
        SubmitWindow::Bytes(SYNC_WRITE_WINDOW_WHILE_READING)
    } else {
        SubmitWindow::Whole
    }
}

/// Runs `ops` in `window`'s batches, each counted in the device account
/// (as `class`) while it is in flight.
fn run_in_windows(
    store: &dyn BackingStore,
    ops: &mut [IoOp<'_>],
    window: SubmitWindow,
    device: &DeviceAccount,
    class: DeviceClass,
) {
    let bytes_max = match window {
        SubmitWindow::Whole => u64::MAX,
        SubmitWindow::Bytes(bytes) => bytes,
    };
    let mut rest = ops;
    while !rest.is_empty() {
        let n = batch_len(rest.iter().map(|op| op.len() as u64), bytes_max);
        let (batch, tail) = rest.split_at_mut(n);
        debug_assert!(n >= 1, "a batch holds one I/O at least");
        let in_flight: Vec<_> = batch.iter().map(|op| device.begin(class, op.len() as u64)).collect();
        run_batch(store, batch);
        in_flight.into_iter().for_each(|io| device.end(io));
        debug_assert!(batch.iter().all(|op| op.result.is_some()), "a batch completes before the next goes");
        rest = tail;
    }
}

/// Writes a pass's I/Os in the calling thread and returns their results
/// in group order: the O_DIRECT ones in `window`'s batches, then the
/// buffered ones.
pub(super) fn write_groups(
    store: &dyn BackingStore,
    pass: &WbPass,
    priority: IoPriority,
    window: SubmitWindow,
    device: &DeviceAccount,
) -> Vec<io::Result<usize>> {
    let class = if priority == IoPriority::Sync { DeviceClass::SyncWrite } else { DeviceClass::BackgroundWrite };
    let is_buffered = |&(i, _): &(usize, usize)| pass.chunks[i].buffered_len.is_some();
    let mut ops: Vec<IoOp<'_>> = pass
        .groups
        .iter()
        .filter(|g| !is_buffered(g))
        .map(|&(i, j)| {
            let bufs = pass.chunks[i..j].iter().map(|c| &c.buf[c.start * BLOCK_SIZE..c.end * BLOCK_SIZE]).collect();
            IoOp::write(pass.chunks[i].offset(), bufs, priority)
        })
        .collect();
    run_in_windows(store, &mut ops, window, device, class);
    let mut direct = ops.iter_mut().map(|op| op.result.take().expect("run_batch completes every op"));
    let results: Vec<io::Result<usize>> = pass
        .groups
        .iter()
        .map(|g @ &(i, j)| {
            if !is_buffered(g) {
                return direct.next().expect("one result per direct I/O");
            }
            debug_assert_eq!(j, i + 1, "a buffered chunk is an I/O of its own");
            let c = &pass.chunks[i];
            let from = c.start * BLOCK_SIZE;
            let data = &c.buf[from..from + c.buffered_len.unwrap_or(c.len_bytes())];
            let io = device.begin(DeviceClass::BufferedWrite, data.len() as u64);
            let written = store.write_tail(c.offset(), data);
            device.end(io);
            written
        })
        .collect();
    debug_assert!(direct.next().is_none(), "every direct result used");
    results
}

impl Inode {
    /// Groups a pass's chunks (sorted, each at most `io_max_bytes`) into
    /// I/Os. Neighbouring chunks form one vectored I/O of at most `io_max`
    /// and `IOV_MAX` buffers (one per chunk), bridging a small gap of clean
    /// cached blocks where one lies between. A buffered chunk is an I/O of
    /// its own. Returns the chunks (bridges included) and each I/O's
    /// `[first, end)` chunk range.
    pub(super) fn group_into_ios(
        &self,
        split: Vec<WbChunk>,
        io_max_bytes: usize,
    ) -> (Vec<WbChunk>, Vec<(usize, usize)>) {
        let mut chunks: Vec<WbChunk> = Vec::with_capacity(split.len());
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut group_start = 0;
        let mut group_bytes = 0usize;
        for c in split {
            if let Some(prev) = chunks.last() {
                let prev_end = prev.offset() + prev.len_bytes() as u64;
                let gap_bytes = c.offset() - prev_end;
                // A bridge adds at most one buffer per block of the gap.
                let buffers_after = chunks.len() - group_start + (gap_bytes / BLOCK) as usize + 1;
                let fits = group_bytes + gap_bytes as usize + c.len_bytes() <= io_max_bytes && buffers_after <= IOV_MAX;
                let fits = fits && c.buffered_len.is_none() && prev.buffered_len.is_none();
                let mut joined = fits && gap_bytes == 0;
                if fits && gap_bytes > 0 && gap_bytes <= self.config.bridge_gap_bytes {
                    if let Some(bridge) = self.take_bridge(prev_end / BLOCK, c.offset() / BLOCK) {
                        chunks.extend(bridge);
                        joined = true;
                    }
                }
                if joined {
                    group_bytes += gap_bytes as usize;
                } else {
                    groups.push((group_start, chunks.len()));
                    group_start = chunks.len();
                    group_bytes = 0;
                }
            }
            group_bytes += c.len_bytes();
            chunks.push(c);
        }
        groups.push((group_start, chunks.len()));
        debug_assert!(groups.iter().all(|&(i, j)| chunks[i + 1..j]
            .iter()
            .zip(&chunks[i..j - 1])
            .all(|(b, a)| b.offset() == a.offset() + a.len_bytes() as u64)));
        assert!(groups.iter().all(|&(i, j)| j - i <= IOV_MAX), "a writeback I/O carries at most IOV_MAX buffers");
        debug_assert!(
            groups.first().map(|g| g.0) == Some(0)
                && groups.windows(2).all(|w| w[0].1 == w[1].0 && w[0].0 < w[0].1)
                && groups.last().is_some_and(|&(i, j)| i < j && j == chunks.len()),
            "the I/Os cover every chunk once, in order"
        );
        debug_assert!(
            groups.iter().all(|&(i, j)| chunks[i..j].iter().map(|c| c.len_bytes()).sum::<usize>() <= io_max_bytes),
            "a writeback I/O is at most io_max"
        );
        (chunks, groups)
    }

    /// Makes the file's partial last block, when the pass writes it, a
    /// chunk of its own that is written only up to the file's size,
    /// through the kernel's cache (see `WbChunk::buffered_len`), where the
    /// store can. Written whole with O_DIRECT, it would pad the file to
    /// the block's end, and the `ftruncate` that cuts the padding before
    /// the next store sync reads the block back to zero its end and writes
    /// it again: for a log or a WAL synced after each small append, that
    /// was a read, a write and a metadata update more per sync. The size is
    /// read after the blocks were taken: whatever a writer put in the block
    /// up to it before then is in the chunk's buffer.
    pub(super) fn mark_tail(&self, chunks: &mut Vec<WbChunk>) {
        if self.info.is_block_device {
            return;
        }
        let Some(last) = chunks.last() else { return };
        let size = self.size();
        let end = last.offset() + last.len_bytes() as u64;
        // Only the block holding the size, cut inside it.
        if last.bridge || last.buffered_len.is_some() || size % BLOCK == 0 || end <= size || end - BLOCK > size {
            return;
        }
        if !self.store().supports_tail_writes() {
            return;
        }
        if last.end - last.start > 1 {
            let last = chunks.last_mut().expect("looked at above");
            let tail = WbChunk {
                folio: last.folio.clone(),
                buf: last.buf.clone(),
                start: last.end - 1,
                end: last.end,
                bridge: false,
                buffered_len: None,
                result: None,
            };
            last.end -= 1;
            chunks.push(tail);
        }
        let tail = chunks.last_mut().expect("looked at above");
        tail.buffered_len = Some((size - tail.offset()) as usize);
        debug_assert!(tail.end - tail.start == 1 && (1..BLOCK_SIZE).contains(&tail.buffered_len.unwrap_or(0)));
    }

    /// Makes a sync's small append go through the kernel's cache: when
    /// the chunks from the block holding the store's known length on
    /// (blocks the file system has yet to allocate, and the partial one
    /// before them) are all at the end and add up to at most
    /// [`SYNC_APPEND_BUFFERED_MAX`], each is written buffered, the last
    /// only up to the file's size. An O_DIRECT write that allocates cannot
    /// complete without blocking, so io_uring hands it to a kernel worker
    /// thread, and the file system converts the new extent after the
    /// write; the buffered write allocates once, at the store sync that
    /// follows at once. A SQLite journal (created, written and synced at
    /// every commit in DELETE mode) and a growing WAL or log are such
    /// appends. Larger appends stay O_DIRECT: the copy into the kernel's
    /// cache is what this engine exists to avoid.
    pub(super) fn mark_sync_append(&self, chunks: &mut [WbChunk]) {
        if self.info.is_block_device || !self.store().supports_tail_writes() {
            return;
        }
        let size = self.size();
        // From the block holding the store's length: that block's page
        // is still in the kernel's cache after the last tail write (see
        // `FdStore::drop_buffered_pages`), and an O_DIRECT write onto a
        // cached page cannot complete without blocking.
        let allocated_end = self.store_len_min.load(Ordering::Acquire) / BLOCK * BLOCK;
        let first = chunks.partition_point(|c| c.offset() < allocated_end);
        let appended = &mut chunks[first..];
        let bytes: usize = appended.iter().map(|c| c.len_bytes()).sum();
        if appended.is_empty() || bytes > SYNC_APPEND_BUFFERED_MAX || appended.iter().any(|c| c.offset() >= size) {
            return;
        }
        for c in appended {
            let len = (size - c.offset()).min(c.len_bytes() as u64) as usize;
            debug_assert!(len > 0 && !c.bridge);
            c.buffered_len = Some(len);
        }
    }

    /// Raises `store_padded` when a chunk of the pass writes a whole block
    /// past the size (a tail chunk writes only up to it). Raised here, not
    /// when the blocks are taken, so a WAL or log whose tail is written
    /// through the kernel's cache never looks padded: that flag cost every
    /// sync an `fstat` (two per SQLite commit), and each `fstat` makes the
    /// next write update the ctime (see
    /// [`Inode::backing_size_may_need_fix`]). The caller holds the store's
    /// I/O gate, so no cut can run between the take and this mark: a
    /// truncate that removes the blocks later lowers it for good.
    pub(super) fn note_padding(&self, chunks: &[WbChunk]) {
        let size = self.size();
        if chunks.iter().any(|c| c.buffered_len.is_none() && c.offset() + c.len_bytes() as u64 > size) {
            if let Some(guarded) = &self.guarded {
                guarded.record_padded();
            }
            self.store_padded.store(true, Ordering::Release);
        }
    }

    /// Takes blocks `[start, end)` for writeback as a bridge between two
    /// dirty runs, if cached folios hold them all and they are uptodate,
    /// clean, not under writeback and not being filled: then the cached
    /// bytes are what the store holds, and writing them again changes
    /// nothing. They are marked under writeback like dirty blocks, so a
    /// writer that dirties one meanwhile copies the folio and its new
    /// version waits for this I/O. One chunk per folio, in order; `None`
    /// (nothing taken) if any block does not qualify, or if the dirty limit
    /// has no room for them to become dirty should the I/O fail.
    fn take_bridge(&self, start: u64, end: u64) -> Option<Vec<WbChunk>> {
        debug_assert!(start < end, "a bridge spans a gap");
        let reserved_bytes = (end - start) * BLOCK;
        if !self.dirty.try_reserve_bridge(reserved_bytes, self.config.dirty_limit_bytes) {
            return None;
        }
        let mut taken: Vec<WbChunk> = Vec::new();
        let mut block = start;
        while block < end {
            let Some(chunk) = self.take_bridge_in_folio(block, end) else {
                for c in taken {
                    self.release_bridge(c);
                }
                self.dirty.end_bridges(reserved_bytes, 0);
                return None;
            };
            block = chunk.folio.index + chunk.end as u64;
            taken.push(chunk);
        }
        debug_assert_eq!(block, end, "the bridge covers the gap exactly");
        let bytes = taken.iter().map(|c| c.len_bytes() as u64).sum();
        Counters::add(&self.counters.bridged_bytes, bytes);
        Some(taken)
    }

    /// The part of `[block, end)` in the folio holding `block`, taken as in
    /// [`Inode::take_bridge`].
    fn take_bridge_in_folio(&self, block: u64, end: u64) -> Option<WbChunk> {
        let folio = self.find(block)?;
        let mut st = folio.lock();
        let (first, last) = ((block - folio.index) as usize, (end.min(folio.end_index()) - folio.index) as usize);
        let clean = st.dirty.count_range(first, last) == 0 && st.writeback.count_range(first, last) == 0;
        if st.removed || st.read_in_flight || !st.is_uptodate(first, last) || !clean {
            return None;
        }
        debug_assert!(first < last && last <= folio.nr_blocks(), "blocks {first}..{last} of the folio");
        st.writeback.set_range(first, last);
        st.nr_writeback += last - first;
        st.check(folio.nr_blocks());
        debug_assert_eq!(st.writeback.count_range(first, last), last - first, "the bridge is under writeback");
        let buf = st.buf().clone();
        drop(st);
        Some(WbChunk { folio, buf, start: first, end: last, bridge: true, buffered_len: None, result: None })
    }

    /// Gives back a bridge chunk that will not be written.
    fn release_bridge(&self, c: WbChunk) {
        debug_assert!(c.bridge);
        debug_assert!(c.result.is_none(), "a released bridge was never written");
        let mut st = c.folio.lock();
        let cleared = st.writeback.clear_range(c.start, c.end);
        assert_eq!(cleared, c.end - c.start, "a bridge's blocks were under writeback");
        st.nr_writeback -= cleared;
        st.check(c.folio.nr_blocks());
        self.end_writeback_ref(&c.folio, st, c.buf);
    }

    /// The pass's I/Os as writes a [`crate::io::queue::WriteQueue`] can own,
    /// tagged `tag_base + i` for group `i`. The caller holds the store's
    /// I/O gate from before the first is submitted until the last completes
    /// ([`Inode::try_begin_async_io`]).
    pub fn pass_writes(&self, pass: &WbPass, priority: IoPriority, tag_base: u64) -> Vec<QueuedWrite> {
        self.grow_store_for_writeback(pass);
        let store = self.store();
        pass.groups
            .iter()
            .enumerate()
            .map(|(g, &(i, j))| QueuedWrite {
                store: store.clone(),
                offset: pass.chunks[i].offset(),
                segments: pass.chunks[i..j]
                    .iter()
                    .map(|c| {
                        let len = c.buffered_len.unwrap_or(c.len_bytes());
                        Segment { buf: c.buf.clone(), range: c.start * BLOCK_SIZE..c.start * BLOCK_SIZE + len }
                    })
                    .collect(),
                priority,
                tag: tag_base + g as u64,
                tail: pass.chunks[i].buffered_len.is_some(),
            })
            .collect()
    }

    /// Before a pass's writes: a file whose store ends before the pass's
    /// last write grows to the logical size first (one `ftruncate`; holes
    /// read as zeros). An O_DIRECT write that extends a file is completed
    /// synchronously by ext4 (it must update the on-disk size when the
    /// write ends), so writeback past the store's end ran one I/O at a time
    /// at any queue depth: an uncached stream wrote back at 2.3 GB/s, the
    /// speed of one O_DIRECT writer, against the kernel's 2.8. Growing only
    /// to the size writers made, with the store's I/O gate held (no length
    /// change can run), keeps every durability rule: a crash may leave the
    /// file longer than its last synced length, never shorter, and the
    /// bytes no sync covered read as zeros. Failing to grow only costs the
    /// speed: the writes extend the store as before.
    pub(super) fn grow_store_for_writeback(&self, pass: &WbPass) {
        if self.info.is_block_device {
            return;
        }
        let known_len = self.store_len_min.load(Ordering::Acquire);
        let pass_end = pass.chunks.iter().map(|c| c.folio.offset() + (c.end * BLOCK_SIZE) as u64).max().unwrap_or(0);
        // Within the store: no grow ever sets the store below
        // `store_len_min` (it only grows past it, below), so nothing can
        // cut these writes.
        if pass_end <= known_len {
            return;
        }
        // The shared gate lets other workers' passes of this inode write
        // meanwhile, and `set_len` is no grow-only call: a pass that read
        // the size, then another pass writing past it (extending the
        // store), then the first pass's `set_len` would cut the second
        // pass's written blocks (their folios clean, maybe dropped: lost).
        // So a pass that may extend the store registers its end first, and
        // a grow holds the lock from its look at the size to its `set_len`
        // and never sets the store below a registered end.
        let mut writes_end = locks::lock_ranked(Rank::StoreWritesEnd, &self.store_writes_end);
        *writes_end = (*writes_end).max(pass_end);
        let known_len = self.store_len_min.load(Ordering::Acquire);
        // Writes through the kernel's cache extend the store as they go,
        // without waiting on each other: only O_DIRECT ones need the grow.
        let direct_end = pass
            .chunks
            .iter()
            .filter(|c| c.buffered_len.is_none())
            .map(|c| c.offset() + c.len_bytes() as u64)
            .max()
            .unwrap_or(0);
        if direct_end <= known_len {
            return;
        }
        let size = self.size();
        // Only the padded tail block past the size (that write extends the
        // store whatever is done here), or a registered write reaches past
        // the size already: no fstat, no grow.
        if size <= known_len || size < *writes_end {
            return;
        }
        let store = self.store();
        let Ok(len) = store.len() else { return };
        if len >= size {
            self.store_len_min.fetch_max(len, Ordering::AcqRel);
            return;
        }
        if store.set_len(size).is_ok() {
            self.store_len_min.fetch_max(size, Ordering::AcqRel);
            self.size_changed.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_fits_its_bytes_and_holds_one_item_at_least() {
        assert_eq!(batch_len([4, 4, 4, 4], 8), 2);
        assert_eq!(batch_len([4, 4, 4], 100), 3, "all fit");
        assert_eq!(batch_len([16, 4], 8), 1, "one too large goes alone");
        assert_eq!(batch_len([4, 16], 8), 1);
        assert_eq!(batch_len([], 8), 0);
        assert_eq!(batch_len([u64::MAX, 1], u64::MAX), 1, "no overflow");
    }

    #[test]
    fn a_large_pass_goes_in_windows_only_while_reads_are_recent() {
        let window = SYNC_WRITE_WINDOW_WHILE_READING;
        assert_eq!(submit_window(64 << 20, true), SubmitWindow::Bytes(window));
        assert_eq!(submit_window(64 << 20, false), SubmitWindow::Whole, "no reader: all at once");
        assert_eq!(submit_window(window, true), SubmitWindow::Whole, "fits one window anyway");
        assert_eq!(submit_window(4096, true), SubmitWindow::Whole, "a commit's writes");
    }
}
