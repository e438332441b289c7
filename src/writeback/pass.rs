//! A writeback pass over one inode: collect runs of dirty blocks from its
//! dirty index (in a block range, oldest cursor first), bridge small clean
//! gaps, build I/Os of up to `io_max` (at most `IOV_MAX` buffers each),
//! and complete them: clear writeback, redirty what failed, record errors
//! in the inode's error sequence, drop drop-behind folios that stayed
//! clean, and wake ticket waiters.
//!
//! Invariants:
//! - A block taken by a pass moves dirty → writeback under its folio lock,
//!   and is accounted to the domain as started at that moment; every taken
//!   block is completed exactly once ([`Inode::finish_pass`] asserts one
//!   result per I/O and per chunk).
//! - Bridged (clean) blocks are never counted as dirty or writeback bytes.
//! - A pass holds a writeback ticket from before it takes its first dirty
//!   bit until it completes (see `writeback::sync`).
//! - A pass holds the inode's store-length gate for as long as any of its
//!   I/O is in flight, so a truncation never races it.
//!
//! These are methods of [`Inode`], in this module because they are the
//! writeback layer's: the inode's own paths (read, write, fill, set_len)
//! never call them.

use std::io;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use crate::buf::AlignedBuf;
use crate::folio::{DirtyMark, Folio, FolioState};
use crate::inode::Inode;
use crate::io::queue::{QueuedWrite, Segment};
use crate::io::{run_batch, BackingStore, IoOp, IoPriority, BLOCK_SIZE, IOV_MAX};
use crate::locks;
use crate::mapping::DirtyIndex;
use crate::stats::{Counters, IoClass, Reason};
use crate::writeback::route::Route;

const BLOCK: u64 = BLOCK_SIZE as u64;

/// A contiguous run of blocks taken from one folio for writeback.
struct WbChunk {
    folio: Arc<Folio>,
    buf: Arc<AlignedBuf>,
    /// Block range within the folio.
    start: usize,
    end: usize,
    /// Clean, uptodate blocks written only to join two dirty neighbours
    /// into one I/O (`Config::bridge_gap_bytes`); not dirty data, so not in
    /// the dirty or writeback byte counts, but their room under the dirty
    /// limit is held while the I/O is in flight, as a failure makes them
    /// dirty ([`crate::dirty::DomainDirty::try_reserve_bridge`]). Random 4 KiB writes leave many
    /// dirty blocks one or two blocks apart; rewriting what is already on
    /// disk there costs a few KiB of transfer and saves an I/O (about 4% of
    /// the I/Os of the rand-write benchmark, whose device is bound by I/Os
    /// per second; gaps of 4 or 8 blocks saved hardly more).
    bridge: bool,
    /// Written through the kernel's cache
    /// ([`crate::io::BackingStore::write_tail`]), not O_DIRECT: this many
    /// bytes from the chunk's start, which end at the file's size when the
    /// chunk holds it. Two kinds: the file's partial last block
    /// ([`Inode::mark_tail`]), and a small append a sync writes
    /// ([`Inode::mark_sync_append`]). Such a chunk is an I/O of its own.
    buffered_len: Option<usize>,
    result: Option<io::Result<()>>,
}

impl WbChunk {
    fn offset(&self) -> u64 {
        self.folio.offset() + (self.start * BLOCK_SIZE) as u64
    }
    fn len_bytes(&self) -> usize {
        (self.end - self.start) * BLOCK_SIZE
    }
}

/// Whether completing a pass makes the store's length the logical size
/// again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeFix {
    /// Not now: other passes of the inode are in flight here.
    No,
    /// If no writeback I/O of the inode is in flight anywhere and no length
    /// change is under way; otherwise the last pass, an fsync or the close
    /// does it. A writeback worker must never wait for I/O that another
    /// worker (itself waiting) would complete.
    Try,
    /// Waiting for the inode's other I/O (a caller's own, synchronous pass).
    Wait,
}

/// A writeback pass between collecting its blocks and completing them.
pub struct WbPass {
    ticket: u64,
    reason: Reason,
    chunks: Vec<WbChunk>,
    /// I/O `g` writes `chunks[groups[g].0..groups[g].1]`.
    groups: Vec<(usize, usize)>,
    bytes: u64,
}

impl WbPass {
    /// Bytes the pass writes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Dirty bytes the pass writes (without the clean blocks it bridges).
    pub fn dirty_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| !c.bridge).map(|c| c.len_bytes() as u64).sum()
    }

    /// Records the result of every I/O (in group order) on its chunks.
    pub fn set_results(&mut self, results: Vec<io::Result<usize>>) {
        assert_eq!(results.len(), self.groups.len(), "one result per I/O");
        debug_assert_eq!(self.groups.last().map(|g| g.1), Some(self.chunks.len()), "the I/Os cover every chunk");
        for (&(i, j), result) in self.groups.iter().zip(results) {
            for c in &mut self.chunks[i..j] {
                assert!(c.result.is_none(), "a chunk completes once");
                c.result = Some(match &result {
                    Ok(_) => Ok(()),
                    Err(e) => Err(io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))),
                });
            }
        }
        debug_assert!(self.chunks.iter().all(|c| c.result.is_some()), "every chunk has its result");
    }
}

/// Cuts each chunk into chunks of at most `io_max_blocks` blocks.
fn split_at_io_max(chunks: Vec<WbChunk>, io_max_blocks: usize) -> Vec<WbChunk> {
    let mut split = Vec::with_capacity(chunks.len());
    for c in chunks {
        let mut s = c.start;
        while s < c.end {
            let e = (s + io_max_blocks).min(c.end);
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

/// What a pass's completion adds up, chunk by chunk, and settles at its
/// end. Dirty data only in `done_bytes` and `written_bytes`: bridges were
/// never counted as dirty or under writeback, only their room was held.
#[derive(Default)]
struct CompletionTally {
    done_bytes: u64,
    written_bytes: u64,
    bridge_bytes: u64,
    bridge_redirtied_bytes: u64,
    redirtied_bytes: u64,
}

/// The largest sync append written through the kernel's cache
/// ([`Inode::mark_sync_append`]): a SQLite commit's journal (about 21 KiB
/// in the sqlite benchmark) or WAL frames fit many times over.
const SYNC_APPEND_BUFFERED_MAX: usize = 64 * 1024;

/// Writes a pass's I/Os in the calling thread and returns their results
/// in group order: the O_DIRECT ones as one batch, then the buffered ones.
fn write_groups(store: &dyn BackingStore, pass: &WbPass, priority: IoPriority) -> Vec<io::Result<usize>> {
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
    run_batch(store, &mut ops);
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
            store.write_tail(c.offset(), &c.buf[from..from + c.buffered_len.unwrap_or(c.len_bytes())])
        })
        .collect();
    debug_assert!(direct.next().is_none(), "every direct result used");
    results
}

/// What one writeback pass did.
#[derive(Debug, Default)]
pub struct WritebackOutcome {
    pub written_bytes: u64,
    pub failed_bytes: u64,
    pub first_error: Option<i32>,
}

/// What a pass may take: the whole inode from its start (fsync, close),
/// the folios starting in a block range (`sync_file_range`), or a
/// writeback worker's share of it from that worker's cursor.
#[derive(Clone, Copy)]
pub enum PassScope<'a> {
    Whole,
    Blocks { start: u64, end: u64 },
    Worker { route: &'a Route, worker: usize },
}

/// Where a dirty-index scan of one pass stands: within `range`, at
/// `next_key` (folio index).
struct DirtyScan {
    range: Range<u64>,
    next_key: u64,
}

impl Inode {
    /// Takes dirty blocks of the folios in the pass's block ranges (whole
    /// folios, in file order: for a worker, its share from its cursor on,
    /// wrapping) until about `max_bytes` or `max_chunks` runs, marks them
    /// under writeback and returns them as chunks.
    fn collect_dirty(&self, scope: PassScope<'_>, max_bytes: u64, max_chunks: usize) -> Vec<WbChunk> {
        let ranges = match scope {
            PassScope::Whole => std::iter::once(0..u64::MAX).collect(),
            // The dirty index is keyed by folio start: a folio that starts
            // before the range but reaches into it is written too (its
            // dirty blocks go whole, as the kernel writes whole folios).
            PassScope::Blocks { start, end } => {
                let first_key = self.mapping.read().find(start).map_or(start, |f| f.index);
                std::iter::once(first_key..end).collect()
            }
            PassScope::Worker { route, worker } => {
                let cursor = self.writeback_cursors[worker].load(Ordering::Relaxed);
                let idx = self.mapping.dirty_index();
                route.pass_ranges(self.id, worker, cursor, idx.regions())
            }
        };
        let mut chunks = Vec::new();
        let (mut taken, mut taken_dontcache) = (0u64, 0u64);
        let mut cursor_after = None;
        // Folios this scan left without dirty blocks; their index entries
        // go at the next look (or the end), under the lock taken anyway.
        let mut went_clean: Vec<Arc<Folio>> = Vec::new();
        'ranges: for range in ranges {
            let mut scan = DirtyScan { next_key: range.start, range };
            while taken < max_bytes && chunks.len() < max_chunks {
                let Some(folios) = self.next_dirty_folios(&mut scan, &mut went_clean) else { continue 'ranges };
                for folio in folios {
                    if taken >= max_bytes || chunks.len() >= max_chunks {
                        break 'ranges;
                    }
                    let (blocks, dontcache_blocks) = self.take_dirty_runs(&folio, &mut chunks, &mut went_clean);
                    if blocks > 0 {
                        taken += blocks as u64 * BLOCK;
                        taken_dontcache += dontcache_blocks as u64 * BLOCK;
                        cursor_after = Some(folio.end_index());
                    }
                }
            }
            break;
        }
        if !went_clean.is_empty() {
            Self::unindex_went_clean(&mut self.mapping.dirty_index(), &mut went_clean);
        }
        // Stored once per pass: writers read this inode's lines on every
        // write, and a store per folio kept taking them away.
        if let (Some(next), PassScope::Worker { worker, .. }) = (cursor_after, scope) {
            self.writeback_cursors[worker].store(next, Ordering::Relaxed);
        }
        debug_assert_eq!(taken, chunks.iter().map(|c| c.len_bytes() as u64).sum::<u64>());
        debug_assert!(
            chunks.iter().all(|c| !c.bridge && c.start < c.end && c.end <= c.folio.nr_blocks()),
            "chunks are non-empty dirty runs within their folios"
        );
        debug_assert!(
            match scope {
                PassScope::Worker { route, worker } if route.routing == crate::config::Routing::Region => chunks
                    .iter()
                    .all(|c| route.worker_of_region(self.id, route.region_of_block(c.folio.index)) == worker),
                _ => true,
            },
            "a worker takes only its regions' blocks"
        );
        self.dirty.account_writeback_started(taken, taken_dontcache);
        chunks
    }

    /// The next few dirty folios of the scan's range, clearing the index
    /// entries of `went_clean` under the same lock. `None` when the range
    /// is done.
    fn next_dirty_folios(&self, scan: &mut DirtyScan, went_clean: &mut Vec<Arc<Folio>>) -> Option<Vec<Arc<Folio>>> {
        /// Index keys copied per look at the dirty index: the index lock is
        /// not held while folios are locked, and a pass never copies more
        /// of a large index than it uses. Each look takes the index lock once
        /// for all of its folios (the index holds them, so no mapping lock
        /// is needed): writers take it on every newly dirty folio, and
        /// per-folio locking by the flusher made them sleep on it.
        const KEYS_PER_LOOK: usize = 64;
        if scan.next_key >= scan.range.end {
            return None;
        }
        let folios: Vec<Arc<Folio>> = {
            let mut idx = self.mapping.dirty_index();
            Self::unindex_went_clean(&mut idx, went_clean);
            idx.range(scan.next_key..scan.range.end).take(KEYS_PER_LOOK).map(|(_, f)| f.clone()).collect()
        };
        let last = folios.last()?;
        scan.next_key = last.index + 1;
        debug_assert!(folios.iter().all(|f| scan.range.contains(&f.index)));
        Some(folios)
    }

    /// Moves the dirty runs of `folio` that are not already under
    /// writeback to writeback, as chunks. Returns the blocks taken and the
    /// uncached-dirty blocks they account for; a folio left clean goes on
    /// `went_clean`.
    fn take_dirty_runs(
        &self,
        folio: &Arc<Folio>,
        chunks: &mut Vec<WbChunk>,
        went_clean: &mut Vec<Arc<Folio>>,
    ) -> (usize, usize) {
        let mut st = folio.lock();
        if st.removed || st.nr_dirty == 0 {
            // Evicted after an earlier pass cleaned it, before its entry
            // went: the entry goes now (if still its own).
            drop(st);
            went_clean.push(folio.clone());
            return (0, 0);
        }
        let nr_blocks = folio.nr_blocks();
        debug_assert_eq!(folio.dirty_mark.load(Ordering::Relaxed), DirtyMark::DIRTY, "a dirty folio is marked dirty");
        debug_assert!(!st.read_in_flight, "a folio being filled has no dirty blocks");
        let (dirty_before, writeback_before) = (st.nr_dirty, st.nr_writeback);
        // A block rewritten while its old version is still in flight waits
        // for that I/O: two versions of one block in flight could land in
        // either order.
        let mut taken_blocks = 0usize;
        for (start, end) in st.dirty.runs_excluding(&st.writeback, nr_blocks) {
            st.dirty.clear_range(start, end);
            st.writeback.set_range(start, end);
            taken_blocks += end - start;
            // Raised while the blocks are still ours (folio locked), so a
            // truncate that removes them later lowers it for good.
            let chunk_end = folio.offset() + (end * BLOCK_SIZE) as u64;
            if self.on_disk_len_max.load(Ordering::Acquire) < chunk_end {
                self.on_disk_len_max.fetch_max(chunk_end, Ordering::AcqRel);
            }
            chunks.push(WbChunk {
                folio: folio.clone(),
                buf: st.buf.clone(),
                start,
                end,
                bridge: false,
                buffered_len: None,
                result: None,
            });
        }
        if taken_blocks == 0 {
            return (0, 0);
        }
        st.nr_writeback += taken_blocks;
        st.nr_dirty -= taken_blocks;
        let dontcache_blocks = if st.nr_dirty == 0 {
            std::mem::take(&mut st.dontcache_dirty)
        } else {
            let n = st.dontcache_dirty.min(taken_blocks);
            st.dontcache_dirty -= n;
            n
        };
        st.check(nr_blocks);
        debug_assert_eq!(st.nr_dirty + st.nr_writeback, dirty_before + writeback_before);
        debug_assert!(
            st.dirty.runs_excluding(&st.writeback, nr_blocks).is_empty(),
            "every dirty block not in flight was taken"
        );
        debug_assert!(st.nr_dirty > 0 || st.dontcache_dirty == 0, "a clean folio holds no uncached-dirty blocks");
        if st.nr_dirty == 0 {
            folio.dirty_mark.store(DirtyMark::CLEAN, Ordering::Release);
            drop(st);
            went_clean.push(folio.clone());
        }
        (taken_blocks, dontcache_blocks)
    }

    /// Takes the folios of `went_clean` out of the dirty index (its lock
    /// held) unless they were dirtied again since: a writer marks a folio
    /// dirty before it inserts it, and inserts under this lock, so a folio
    /// still marked clean (or removed) here has no newer entry. An entry
    /// that holds another folio (a new one at the same place, after the
    /// old one was removed) stays.
    fn unindex_went_clean(idx: &mut DirtyIndex, went_clean: &mut Vec<Arc<Folio>>) {
        for folio in went_clean.drain(..) {
            if folio.dirty_mark.load(Ordering::Acquire) != DirtyMark::DIRTY
                && idx.get(&folio.index).is_some_and(|f| Arc::ptr_eq(f, &folio))
            {
                idx.remove(folio.index);
            }
        }
        debug_assert!(went_clean.is_empty(), "the batch is consumed");
    }

    /// One synchronous writeback pass: takes up to `max_bytes` of dirty
    /// data, writes it with I/Os of up to `io_max` merged across folios,
    /// and completes it. Failed blocks become dirty again and the error is
    /// recorded in the errseq. Clean drop-behind folios are dropped
    /// afterwards.
    pub fn writeback(self: &Arc<Self>, reason: Reason, max_bytes: u64, priority: IoPriority) -> WritebackOutcome {
        match self.begin_gated_pass(reason, max_bytes, PassScope::Whole) {
            Some(pass) => self.write_gated_pass(pass, priority, SizeFix::Wait),
            None => WritebackOutcome::default(),
        }
    }

    /// Takes the store's length gate, then a pass's blocks (`None`, with
    /// the gate given back, when nothing was dirty). The gate comes before
    /// the blocks (as the flusher's passes take it): a length change,
    /// backing-size fix or hole punch never falls between taking a block
    /// and writing it. The pass must go to [`Inode::write_gated_pass`].
    pub fn begin_gated_pass(self: &Arc<Self>, reason: Reason, max_bytes: u64, scope: PassScope<'_>) -> Option<WbPass> {
        self.store_len_gate.begin_io();
        let pass = self.begin_pass(reason, max_bytes, usize::MAX, scope);
        if pass.is_none() {
            self.store_len_gate.end_io();
        }
        pass
    }

    /// Writes a pass from [`Inode::begin_gated_pass`] in the calling
    /// thread, gives the gate back and completes the pass.
    pub fn write_gated_pass(
        self: &Arc<Self>,
        mut pass: WbPass,
        priority: IoPriority,
        fix_size: SizeFix,
    ) -> WritebackOutcome {
        self.grow_store_for_writeback(&pass);
        let store = self.store();
        let started = Instant::now();
        let results = write_groups(&*store, &pass, priority);
        let elapsed = started.elapsed();
        let class = if priority == IoPriority::Sync { IoClass::Sync } else { IoClass::Async };
        let written: u64 = results.iter().filter_map(|r| r.as_ref().ok()).map(|&n| n as u64).sum();
        Counters::add(&self.counters.written_bytes_by_class[class as usize], written);
        pass.set_results(results);
        self.note_store_written(&pass);
        self.store_len_gate.end_io();
        let outcome = self.finish_pass(pass, fix_size);
        self.dirty.update_bandwidth(outcome.written_bytes, elapsed);
        outcome
    }

    /// Starts a writeback pass: takes a ticket, collects up to `max_bytes`
    /// or `max_chunks` runs of dirty blocks (marking them under writeback),
    /// and groups them into I/Os of at most `io_max`. `None` when nothing
    /// was dirty (the ticket is already given back).
    pub fn begin_pass(
        self: &Arc<Self>,
        reason: Reason,
        max_bytes: u64,
        max_chunks: usize,
        scope: PassScope<'_>,
    ) -> Option<WbPass> {
        let ticket = self.ticket_begin();
        let mut chunks = self.collect_dirty(scope, max_bytes, max_chunks);
        if chunks.is_empty() {
            self.ticket_end(ticket);
            return None;
        }
        chunks.sort_by_key(|c| c.offset());
        // Background I/O gets smaller while foreground waits miss their
        // target (`crate::background_budget`); what a caller waits for
        // is built at `io_max`.
        let io_max_bytes = match reason {
            Reason::Fsync | Reason::Close => self.config.io_max_bytes,
            _ => self.dirty.background_budget.io_bytes_max().min(self.config.io_max_bytes),
        } as usize;
        let mut split = split_at_io_max(chunks, io_max_bytes / BLOCK_SIZE);
        if reason == Reason::Fsync {
            self.mark_sync_append(&mut split);
        }
        self.mark_tail(&mut split);
        self.note_padding(&split);
        let (chunks, groups) = self.group_into_ios(split, io_max_bytes);
        let bytes = chunks.iter().map(|c| c.len_bytes() as u64).sum();
        Some(WbPass { ticket, reason, chunks, groups, bytes })
    }

    /// Groups a pass's chunks (sorted, each at most `io_max_bytes`) into
    /// I/Os. Neighbouring chunks form one vectored I/O of at most `io_max`
    /// and `IOV_MAX` buffers (one per chunk), bridging a small gap of clean
    /// cached blocks where one lies between. A buffered chunk is an I/O of
    /// its own. Returns the chunks (bridges included) and each I/O's
    /// `[first, end)` chunk range.
    fn group_into_ios(&self, split: Vec<WbChunk>, io_max_bytes: usize) -> (Vec<WbChunk>, Vec<(usize, usize)>) {
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
    fn mark_tail(&self, chunks: &mut Vec<WbChunk>) {
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
    /// the chunks past the store's known length (blocks the file system
    /// has yet to allocate) are all at the end and add up to at most
    /// [`SYNC_APPEND_BUFFERED_MAX`], each is written buffered, the last
    /// only up to the file's size. An O_DIRECT write that allocates cannot
    /// complete without blocking, so io_uring hands it to a kernel worker
    /// thread, and the file system converts the new extent after the
    /// write; the buffered write allocates once, at the store sync that
    /// follows at once. A SQLite journal (created, written and synced at
    /// every commit in DELETE mode) and a growing WAL or log are such
    /// appends. Larger appends stay O_DIRECT: the copy into the kernel's
    /// cache is what this engine exists to avoid.
    fn mark_sync_append(&self, chunks: &mut [WbChunk]) {
        if self.info.is_block_device || !self.store().supports_tail_writes() {
            return;
        }
        let size = self.size();
        let allocated_end = self.store_len_min.load(Ordering::Acquire).next_multiple_of(BLOCK);
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
    fn note_padding(&self, chunks: &[WbChunk]) {
        let size = self.size();
        if chunks.iter().any(|c| c.buffered_len.is_none() && c.offset() + c.len_bytes() as u64 > size) {
            self.store_padded.store(true, Ordering::Release);
        }
    }

    /// Raises `store_len_min` to the end of each write of the pass that
    /// succeeded: the store is at least that long now, and only a cut,
    /// which the store's I/O gate holds off until the caller gives it back,
    /// can shorten it. Without this, a file grown by tail writes (a WAL
    /// appended to and synced) stayed "maybe short" and every sync asked
    /// the store for its length.
    pub fn note_store_written(&self, pass: &WbPass) {
        let end = pass
            .chunks
            .iter()
            .filter(|c| matches!(c.result, Some(Ok(()))))
            .map(|c| c.offset() + c.buffered_len.unwrap_or(c.len_bytes()) as u64)
            .max();
        if let Some(end) = end {
            if self.store_len_min.load(Ordering::Acquire) < end {
                self.store_len_min.fetch_max(end, Ordering::AcqRel);
            }
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
        let buf = st.buf.clone();
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

    /// Ends a writeback reference to a folio's buffer; `st` is the folio's
    /// locked state and is unlocked here. A reference to the folio's current
    /// buffer is dropped under the lock: a writer that took the lock in
    /// between would see the buffer shared, copy it (counting the copy) and
    /// leave the old one to this reference, which would then free it
    /// uncounted. If the folio moved on to a copy or was removed, the last
    /// reference gives the old buffer's memory back.
    fn end_writeback_ref(&self, folio: &Folio, st: MutexGuard<'_, FolioState>, buf: Arc<AlignedBuf>) {
        if Arc::ptr_eq(&buf, &st.buf) {
            drop(buf);
            drop(st);
            return;
        }
        drop(st);
        // `into_inner`, not `try_unwrap`: when the last two references end at
        // once, exactly one of them gets the buffer back.
        if let Some(buf) = Arc::into_inner(buf) {
            self.memory.release_folio_buf(Some(buf), folio.size_bytes());
        }
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
    fn grow_store_for_writeback(&self, pass: &WbPass) {
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
        let mut writes_end = locks::lock(&self.store_writes_end);
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

    /// Takes the store's I/O gate for writes that complete later; `false`
    /// when a length change is pending (the caller must first complete the
    /// I/O it has in flight, then use [`Inode::begin_async_io_wait`]).
    pub fn try_begin_async_io(&self) -> bool {
        self.store_len_gate.try_begin_io()
    }

    /// As [`Inode::try_begin_async_io`], waiting out a length change.
    pub fn begin_async_io_wait(&self) {
        self.store_len_gate.begin_io();
    }

    /// Gives back the gate taken for a pass's asynchronous writes, once all
    /// of them completed.
    pub fn end_async_io(&self) {
        self.store_len_gate.end_io();
    }

    /// Completes a pass whose I/Os all finished: clears writeback, redirties
    /// and records failures, drops clean drop-behind folios, gives back the
    /// ticket and, as `fix_size` says, makes the store's length the logical
    /// size again.
    pub fn finish_pass(self: &Arc<Self>, pass: WbPass, fix_size: SizeFix) -> WritebackOutcome {
        debug_assert!(
            locks::lock(&self.tickets).in_flight.contains(&pass.ticket),
            "a pass holds its ticket until it completes"
        );
        let mut outcome = WritebackOutcome::default();
        self.complete_chunks(pass.chunks, pass.reason, &mut outcome);
        debug_assert_eq!(outcome.written_bytes + outcome.failed_bytes, pass.bytes, "every byte completes once");
        if outcome.written_bytes > 0 {
            self.written_since_sync.store(true, Ordering::Release);
        }
        self.ticket_end(pass.ticket);
        if outcome.written_bytes > 0 {
            let fixed = match fix_size {
                SizeFix::No => Ok(()),
                SizeFix::Try => self.try_fix_backing_size(),
                SizeFix::Wait => self.fix_backing_size(),
            };
            if let Err(e) = fixed {
                self.record_error(&e, &mut outcome);
            }
        }
        outcome
    }

    pub fn record_error(&self, e: &io::Error, outcome: &mut WritebackOutcome) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        self.errseq.record(errno);
        self.counters.last_writeback_errno.store(errno, Ordering::Release);
        Counters::add(&self.counters.writeback_errors, 1);
        outcome.first_error.get_or_insert(errno);
    }

    fn complete_chunks(self: &Arc<Self>, chunks: Vec<WbChunk>, reason: Reason, outcome: &mut WritebackOutcome) {
        debug_assert!(chunks.iter().all(|c| c.result.is_some()), "every chunk has its result");
        let mut tally = CompletionTally::default();
        let mut drop_candidates: Vec<Arc<Folio>> = Vec::new();
        let mut dontcache_unblocked = false;
        for mut c in chunks {
            let bytes = c.len_bytes() as u64;
            if c.bridge {
                tally.bridge_bytes += bytes;
            } else {
                tally.done_bytes += bytes;
            }
            let mut st = c.folio.lock();
            let cleared = st.writeback.clear_range(c.start, c.end);
            assert_eq!(cleared, c.end - c.start, "blocks under writeback complete once");
            st.nr_writeback -= cleared;
            match c.result.take().expect("every chunk has a result") {
                Ok(()) => {
                    outcome.written_bytes += bytes;
                    if !c.bridge {
                        tally.written_bytes += bytes;
                    }
                }
                Err(e) => {
                    outcome.failed_bytes += bytes;
                    self.record_error(&e, outcome);
                    if !st.removed {
                        self.redirty_failed_chunk(&c, &mut st, &mut tally);
                    }
                }
            }
            // Uncached data written over these blocks while they were in
            // flight waited for this I/O: the flusher's uncached round
            // that found them in flight wrote nothing and may have
            // stopped, so it is asked again now that they can go.
            if !st.removed && st.dontcache_dirty > 0 && st.dirty.next(c.start, c.end, true).is_some() {
                dontcache_unblocked = true;
            }
            st.check(c.folio.nr_blocks());
            let droppable = !st.removed && st.nr_dirty == 0 && st.nr_writeback == 0;
            self.end_writeback_ref(&c.folio, st, c.buf);
            if droppable && c.folio.dropbehind.load(Ordering::Relaxed) {
                drop_candidates.push(c.folio);
            }
        }
        if tally.bridge_bytes > 0 {
            self.dirty.end_bridges(tally.bridge_bytes, tally.bridge_redirtied_bytes);
        }
        self.dirty.account_writeback_done(tally.done_bytes, tally.written_bytes, reason);
        if tally.redirtied_bytes > 0 || dontcache_unblocked {
            let workers = self.queue_on_dirty_list(None);
            if dontcache_unblocked {
                self.dirty.kick_dontcache(workers);
            }
        }
        // The reaper frees them, in task context and batched: never here,
        // on the completion path that fsync waiters wait behind.
        drop_candidates.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for f in drop_candidates {
            self.queue_dropbehind(f);
        }
    }

    /// A failed chunk's blocks (of a folio still in the cache) are dirty
    /// again, so a later fsync retries them (fsyncgate: never report them
    /// clean). A failed bridge too: the store may now hold anything there.
    fn redirty_failed_chunk(&self, c: &WbChunk, st: &mut FolioState, tally: &mut CompletionTally) {
        debug_assert!(!st.removed, "only a cached folio's blocks are redirtied");
        let was_clean = st.nr_dirty == 0;
        let newly = st.set_dirty(c.start, c.end);
        let newly_bytes = newly as u64 * BLOCK;
        tally.redirtied_bytes += newly_bytes;
        if c.bridge {
            // Bridged blocks were clean, never counted as dirty; their
            // room was held for this. Counted under the folio lock, before
            // anyone can take (and subtract) them again.
            self.dirty.account_bridge_redirtied(newly_bytes);
            tally.bridge_redirtied_bytes += newly_bytes;
        } else {
            // Moved back, not counted twice: the bytes stay unclean
            // throughout, so dirty + writeback never reads above what the
            // cache holds.
            self.dirty.account_writeback_failed(newly_bytes);
            tally.done_bytes -= newly_bytes;
        }
        if was_clean && newly > 0 {
            self.mapping.index_dirty(&c.folio);
        }
        debug_assert!(
            st.nr_dirty > 0 && c.folio.dirty_mark.load(Ordering::Relaxed) == DirtyMark::DIRTY,
            "failed blocks are dirty again, and their folio marked dirty"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass's batched index cleanup drops the entries of folios still
    /// clean or removed; one redirtied since the pass took its blocks keeps
    /// its entry, and so does an entry that now holds a new folio at the
    /// same place.
    #[test]
    fn went_clean_folios_leave_the_dirty_index_only_while_clean() {
        let folio_at = |index: u64, mark: u8| {
            let f = Arc::new(Folio::new(index, 0, false));
            f.dirty_mark.store(mark, Ordering::Relaxed);
            f
        };
        let clean = folio_at(1, DirtyMark::CLEAN);
        let redirtied = folio_at(2, DirtyMark::DIRTY);
        let removed = folio_at(3, DirtyMark::REMOVED);
        let replaced = folio_at(4, DirtyMark::REMOVED);
        let successor = folio_at(4, DirtyMark::DIRTY);
        let other = folio_at(9, DirtyMark::DIRTY);
        let mut idx = DirtyIndex::new(Some(1));
        for f in [&clean, &redirtied, &removed, &successor, &other] {
            idx.insert(f.clone());
        }
        let mut went_clean = vec![clean, redirtied.clone(), removed, replaced];
        Inode::unindex_went_clean(&mut idx, &mut went_clean);
        assert!(went_clean.is_empty(), "the batch is consumed");
        assert_eq!(idx.keys().copied().collect::<Vec<_>>(), vec![2, 4, 9]);
        assert!(Arc::ptr_eq(&idx[&2], &redirtied) && Arc::ptr_eq(&idx[&4], &successor));
        assert_eq!(idx.regions().collect::<Vec<_>>(), vec![1, 2, 4], "region counts follow (2 blocks each)");
    }
}
