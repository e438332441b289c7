//! A writeback pass's completion: each chunk's blocks leave writeback,
//! failed ones are redirtied and their error recorded in the inode's error
//! sequence, drop-behind folios that stayed clean are freed, the store's
//! known length is raised, and the pass's ticket and store-length gate are
//! given back.
//!
//! Invariant: every block a pass took is completed exactly once.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::chunk::{SizeFix, WbChunk, WbPass, WritebackOutcome};
use crate::base::locks::{self, Rank};
use crate::buf::AlignedBuf;
use crate::guardian::arena::BlockState;
use crate::inode::Inode;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::{DirtyMark, Folio, FolioGuard, FolioState};
use crate::stats::Counters;

const BLOCK: u64 = BLOCK_SIZE as u64;

/// What a pass's completion adds up, chunk by chunk, and settles at its
/// end. Dirty data only in `done_bytes`: bridges were never counted as
/// dirty or under writeback, only their room was held.
#[derive(Default)]
struct CompletionTally {
    done_bytes: u64,
    bridge_bytes: u64,
    bridge_redirtied_bytes: u64,
    redirtied_bytes: u64,
}

impl Inode {
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

    /// Ends a writeback reference to a folio's buffer; `st` is the folio's
    /// locked state and is unlocked here. A reference to the folio's current
    /// buffer is dropped under the lock: a writer that took the lock in
    /// between would see the buffer shared, copy it (counting the copy) and
    /// leave the old one to this reference, which would then free it
    /// uncounted. If the folio moved on to a copy or was removed, the last
    /// reference gives the old buffer's memory back.
    pub(super) fn end_writeback_ref(&self, folio: &Folio, st: FolioGuard<'_>, buf: Arc<AlignedBuf>) {
        if Arc::ptr_eq(&buf, st.buf()) {
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
            locks::lock_ranked(Rank::Tickets, &self.tickets).in_flight.contains(&pass.ticket),
            "a pass holds its ticket until it completes"
        );
        let mut outcome = WritebackOutcome::default();
        // Counted before the blocks leave writeback, so that a snapshot
        // with nothing under writeback has every byte written counted.
        let written_by_class = pass.written_by_class();
        self.counters.count_written(pass.reason, written_by_class);
        self.complete_chunks(pass.chunks, &mut outcome);
        let before = self.writeback_pass_bytes.fetch_sub(pass.bytes, Ordering::AcqRel);
        assert!(before >= pass.bytes, "a pass's bytes were counted when it was collected");
        assert_eq!(outcome.written_bytes + outcome.failed_bytes, pass.bytes, "every byte completes once");
        debug_assert_eq!(written_by_class.iter().sum::<u64>(), outcome.written_bytes, "written bytes counted once");
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

    pub(in crate::inode) fn record_error(&self, e: &io::Error, outcome: &mut WritebackOutcome) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        self.errseq.record(errno);
        self.counters.last_writeback_errno.store(errno, Ordering::Release);
        Counters::add(&self.counters.writeback_errors, 1);
        outcome.first_error.get_or_insert(errno);
    }

    fn complete_chunks(self: &Arc<Self>, chunks: Vec<WbChunk>, outcome: &mut WritebackOutcome) {
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
                    // On the store now, unless written again meanwhile.
                    if !st.removed {
                        record_clean_blocks(&st, c.start, c.end);
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
            if !st.removed && st.dontcache_dirty > 0 && st.dirty.next_set(c.start, c.end).is_some() {
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
        self.dirty.account_writeback_done(tally.done_bytes);
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

/// Blocks `[start, end)` of a folio were written back: those not dirty
/// again are clean in the crash table too.
fn record_clean_blocks(st: &FolioState, start: usize, end: usize) {
    if !st.buf().is_guarded() {
        return;
    }
    let mut b = start;
    while b < end {
        let run_end = st.dirty.next_set(b, end).unwrap_or(end);
        if run_end > b {
            st.buf().record_blocks((b, run_end), BlockState::Clean);
        }
        b = st.dirty.next_clear(run_end, end).unwrap_or(end);
    }
}
