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
//!   bit until it completes (see `inode::sync`).
//! - A pass holds the inode's store-length gate for as long as any of its
//!   I/O is in flight, so a truncation never races it.
//!
//! These are methods of [`Inode`] that the writeback layer above drives
//! (its workers, in-flight passes, fsync and `sync_file_range`): the
//! inode's own data paths (read, write, fill, set_len) never call them.

mod chunk;
mod completion;
mod ios;

use chunk::WbChunk;
pub use chunk::{PassScope, PassSize, SizeFix, WbPass, WritebackOutcome};

use ios::{split_at_io_max, submit_window, write_groups, IO_BYTES_WHILE_READING};

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::inode::Inode;
use crate::io::{IoPriority, BLOCK_SIZE};
use crate::mapping::folio::{DirtyMark, Folio};
use crate::mapping::DirtyIndex;
use crate::stats::{IoClass, Reason};

const BLOCK: u64 = BLOCK_SIZE as u64;

/// Where a dirty-index scan of one pass stands: within `range`, at
/// `next_key` (folio index).
struct DirtyScan {
    range: Range<u64>,
    next_key: u64,
}

impl Inode {
    /// Takes dirty blocks of the folios in the pass's block ranges (whole
    /// folios, in file order: for a worker, its share from its cursor on,
    /// wrapping) until about `size` is reached, marks them under writeback
    /// and returns them as chunks (one per run).
    fn collect_dirty(&self, scope: PassScope<'_>, size: PassSize) -> Vec<WbChunk> {
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
            while taken < size.bytes_max && chunks.len() < size.runs_max {
                let Some(folios) = self.next_dirty_folios(&mut scan, &mut went_clean) else { continue 'ranges };
                for folio in folios {
                    if taken >= size.bytes_max || chunks.len() >= size.runs_max {
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
                buf: st.buf().clone(),
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

    /// One synchronous writeback pass: takes all of the inode's dirty
    /// data, writes it with I/Os of up to `io_max` merged across folios,
    /// and completes it. Failed blocks become dirty again and the error is
    /// recorded in the errseq. Clean drop-behind folios are dropped
    /// afterwards.
    pub fn writeback(self: &Arc<Self>, reason: Reason, priority: IoPriority) -> WritebackOutcome {
        match self.begin_gated_pass(reason, PassScope::Whole) {
            Some(pass) => self.write_gated_pass(pass, priority, SizeFix::Wait),
            None => WritebackOutcome::default(),
        }
    }

    /// Takes the store's length gate, then all the dirty blocks of
    /// `scope` as one pass (`None`, with
    /// the gate given back, when nothing was dirty). The gate comes before
    /// the blocks (as the flusher's passes take it): a length change,
    /// backing-size fix or hole punch never falls between taking a block
    /// and writing it. The pass must go to [`Inode::write_gated_pass`].
    pub fn begin_gated_pass(self: &Arc<Self>, reason: Reason, scope: PassScope<'_>) -> Option<WbPass> {
        self.store_len_gate.begin_io();
        let pass = self.begin_pass(reason, PassSize::ALL, scope);
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
        // A read miss that comes meanwhile waits behind what is in flight.
        let window = submit_window(pass.bytes, self.dirty.read_is_recent());
        let results = write_groups(&*store, &pass, priority, window, &self.counters.device);
        let elapsed = started.elapsed();
        let class = if priority == IoPriority::Sync { IoClass::Sync } else { IoClass::Async };
        pass.set_results(results.into_iter().map(|r| (r, class)).collect());
        self.note_store_written(&pass);
        self.store_len_gate.end_io();
        let outcome = self.finish_pass(pass, fix_size);
        self.dirty.update_bandwidth(outcome.written_bytes, elapsed);
        outcome
    }

    /// Starts a writeback pass: takes a ticket, collects dirty blocks of
    /// `scope` up to `size` (marking them under writeback), and groups them
    /// into I/Os of at most `io_max`. `None` when nothing was dirty (the
    /// ticket is already given back).
    pub fn begin_pass(self: &Arc<Self>, reason: Reason, size: PassSize, scope: PassScope<'_>) -> Option<WbPass> {
        let ticket = self.ticket_begin();
        let mut chunks = self.collect_dirty(scope, size);
        if chunks.is_empty() {
            self.ticket_end(ticket);
            return None;
        }
        chunks.sort_by_key(|c| c.offset());
        // Background I/O gets smaller while foreground waits miss their
        // target (`crate::policy::background_budget`); what a caller waits for
        // is built at `io_max`, or small while reads miss (the flusher's
        // stays with the budget: built at 128 KiB while reads missed, it
        // cost a stream next to SQLite 15% of its rate).
        let io_max = self.config.io_max_bytes;
        let io_max_bytes = if !matches!(reason, Reason::Fsync | Reason::Close) {
            self.dirty.background_budget.io_bytes_max().min(io_max)
        } else if self.dirty.read_is_recent() {
            io_max.min(IO_BYTES_WHILE_READING)
        } else {
            io_max
        } as usize;
        let mut split = split_at_io_max(chunks, io_max_bytes / BLOCK_SIZE);
        if reason == Reason::Fsync {
            self.mark_sync_append(&mut split);
        }
        self.mark_tail(&mut split);
        self.note_padding(&split);
        let (chunks, groups) = self.group_into_ios(split, io_max_bytes);
        let bytes = chunks.iter().map(|c| c.len_bytes() as u64).sum();
        self.writeback_pass_bytes.fetch_add(bytes, Ordering::AcqRel);
        Some(WbPass { ticket, reason, chunks, groups, classes: Vec::new(), bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::folio::FolioStart;

    /// A pass's batched index cleanup drops the entries of folios still
    /// clean or removed; one redirtied since the pass took its blocks keeps
    /// its entry, and so does an entry that now holds a new folio at the
    /// same place.
    #[test]
    fn went_clean_folios_leave_the_dirty_index_only_while_clean() {
        let folio_at = |index: u64, mark: u8| {
            let f = Arc::new(Folio::new(index, 0, FolioStart::Idle));
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
