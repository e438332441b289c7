//! fsync / fdatasync of an inode: write back every block dirty at the call
//! (including blocks redirtied while under writeback), wait for the
//! writebacks already in flight that took any of them, then flush the
//! backing store (`fdatasync`, or `fsync` when the size changed) and report
//! the first error since the caller's sample of the error sequence.
//!
//! Tickets: every writeback pass takes a ticket before it takes its first
//! dirty bit and gives it back when it completes. A syncer that samples the
//! newest ticket after its own pass and waits until every ticket up to it
//! is done has covered every writeback that took a block dirty at its call.
//!
//! These are methods of [`Inode`] that files and the writeback layer
//! call; the inode's own data paths never do.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::locks::{self, Ordered, Rank};
use crate::base::sys::SyncKind;
use crate::inode::Inode;
use crate::inode::WritebackOutcome;
use crate::io::{IoPriority, BLOCK_SIZE};
use crate::stats::{Counters, DeviceClass, Reason};

const BLOCK: u64 = BLOCK_SIZE as u64;

impl Inode {
    pub(super) fn ticket_begin(&self) -> u64 {
        let mut t = locks::lock_ranked(Rank::Tickets, &self.tickets);
        debug_assert!(t.in_flight.last().is_none_or(|&last| last <= t.last_issued), "tickets in flight were issued");
        t.last_issued += 1;
        let ticket = t.last_issued;
        let inserted = t.in_flight.insert(ticket);
        debug_assert!(inserted, "ticket {ticket} is issued once");
        ticket
    }

    pub(super) fn ticket_end(&self, ticket: u64) {
        let mut t = locks::lock_ranked(Rank::Tickets, &self.tickets);
        debug_assert!(ticket > 0 && ticket <= t.last_issued, "ticket {ticket} was issued");
        assert!(t.in_flight.remove(&ticket), "ticket {ticket} ends once");
        drop(t);
        self.tickets_done.notify_all();
    }

    /// Waits until every writeback that began before this call has ended.
    /// Returns how long it waited (zero when nothing was in flight).
    pub fn wait_writeback_before_now(&self) -> Duration {
        let mut t = locks::lock_ranked(Rank::Tickets, &self.tickets);
        let sample = t.last_issued;
        let mut started = None;
        while t.in_flight.first().is_some_and(|&first| first <= sample) {
            started.get_or_insert_with(Instant::now);
            t = t.with_guard(|g| self.tickets_done.wait(g));
        }
        debug_assert!(t.in_flight.range(..=sample).next().is_none(), "every ticket up to {sample} ended");
        started.map(|s| s.elapsed()).unwrap_or_default()
    }

    /// Sets the backing store's length to the logical size if they differ
    /// (O_DIRECT writes whole tail blocks; truncation happens here),
    /// waiting for the inode's writeback I/O in flight.
    pub(super) fn fix_backing_size(&self) -> io::Result<()> {
        if !self.backing_size_may_need_fix()? {
            return Ok(());
        }
        let _g = locks::lock_ranked(Rank::Size, &self.size_lock);
        // No writeback I/O runs meanwhile, and none is between taking its
        // blocks and completing: the padding flag cannot be raised under us.
        let _no_io = self.store_len_gate.resize();
        self.fix_backing_size_excluded()
    }

    /// [`Inode::fix_backing_size`] if it needs no waiting: nothing happens
    /// while another length change is under way or any writeback I/O of the
    /// inode is in flight (whoever completes the last one, an fsync or the
    /// close fixes it then).
    pub(super) fn try_fix_backing_size(&self) -> io::Result<()> {
        if !self.backing_size_may_need_fix()? {
            return Ok(());
        }
        let Ok(g) = self.size_lock.try_lock() else { return Ok(()) };
        let _g = Ordered::taken(Rank::Size, g);
        let Some(_no_io) = self.store_len_gate.try_resize() else { return Ok(()) };
        self.fix_backing_size_excluded()
    }

    /// The common case needs no exclusion: the I/O that made the store
    /// longer than the size completed before this check.
    ///
    /// Nor an `fstat` when the store is known to be long enough and holds
    /// no padding of ours: the store is never shorter than
    /// `store_len_min`, and only padding is ever cut. That `fstat` was not
    /// just a syscall: on Linux 6.13 and later (multigrain timestamps) a
    /// `stat` that observes the ctime makes the next write update it with
    /// fine granularity, which dirties the inode on every write and, with
    /// io_uring, sends the write to a worker thread. One `fstat` per
    /// commit raised a 4 KiB O_DIRECT write + `fdatasync` from 48 to 67
    /// µs here.
    fn backing_size_may_need_fix(&self) -> io::Result<bool> {
        if self.info.is_block_device || !self.is_store_writable() {
            return Ok(false);
        }
        let size = self.size();
        if !self.store_padded.load(Ordering::Acquire) && self.store_len_min.load(Ordering::Acquire) >= size {
            return Ok(false);
        }
        Ok(self.backing_size_needs_fix(self.store().len()?, size))
    }

    /// The fix itself, with the size lock and the store's length gate held.
    fn fix_backing_size_excluded(&self) -> io::Result<()> {
        let size = self.size();
        let store = self.store();
        if self.backing_size_needs_fix(store.len()?, size) {
            // Whichever way it goes, the store's length is `size` after.
            self.store_len_min.fetch_min(size, Ordering::AcqRel);
            store.set_len(size)?;
            self.store_len_min.fetch_max(size, Ordering::AcqRel);
            self.size_changed.store(true, Ordering::Release);
        }
        self.store_padded.store(false, Ordering::Release);
        if let Some(guarded) = &self.guarded {
            guarded.record_unpadded();
        }
        // Only writeback taking blocks raises it, and the gate holds that off.
        debug_assert!(!self.store_padded.load(Ordering::Acquire), "the padding is cut");
        Ok(())
    }

    /// A store shorter than the size grows to it (the size is ours: our
    /// writes made it). A longer one is cut only back from our own tail
    /// padding: within the size's last block, and only after writeback
    /// padded it. Data another program put past our size stays.
    fn backing_size_needs_fix(&self, store_len: u64, size: u64) -> bool {
        match store_len.cmp(&size) {
            std::cmp::Ordering::Equal => false,
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => {
                self.store_padded.load(Ordering::Acquire) && store_len <= size.next_multiple_of(BLOCK)
            }
        }
    }

    /// Writes back every block dirty now and makes it durable: a pass that
    /// writes what is not already in flight, a wait for writeback that began
    /// earlier, a second pass for blocks that were in flight with an older
    /// version, a second wait, then the size fix and the store sync. Any
    /// writeback error recorded meanwhile (by this pass or a flusher pass it
    /// waited for) fails it, and then the store is not synced.
    ///
    /// From start to end the call is a sync waiter of its domain: the
    /// flusher submits whatever it collected of this inode first (promoted
    /// to the sync class) and holds its other I/O to
    /// `async_depth_while_sync`, so neither this call's writes nor its
    /// store sync queue behind a deep pile of background writes.
    pub fn write_and_sync(self: &Arc<Self>, kind: SyncKind, reason: Reason) -> io::Result<()> {
        let _waiter = self.dirty.enter_sync(self.id);
        let err_sample = self.errseq.sample();
        let mut engine_wait_us = 0;
        for _pass in 0..2 {
            self.writeback(reason, IoPriority::Sync);
            // Writeback the flusher started, in its async or promoted I/O.
            let waited = self.wait_writeback_before_now();
            engine_wait_us += waited.as_micros() as u64;
        }
        Counters::add(&self.counters.sync_wait_async_us_total, engine_wait_us);
        self.counters.device.record_sync_engine_wait(engine_wait_us);
        if let Some(errno) = self.errseq.error_since(err_sample) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        if !self.is_store_writable() {
            return Ok(());
        }
        // Cleared before the sync: writeback completing later sets it again.
        self.written_since_sync.store(false, Ordering::Release);
        let result = self.fix_backing_size().and_then(|_| {
            let size_changed = self.size_changed.swap(false, Ordering::AcqRel);
            let flush = self.counters.device.begin(DeviceClass::Flush, 0);
            // A size change needs the full sync: fdatasync need not make
            // it durable unless reading the data depends on it.
            let kind = if size_changed { SyncKind::All } else { kind };
            let r = self.store().sync(kind);
            self.counters.device.end(flush);
            if r.is_err() && size_changed {
                self.size_changed.store(true, Ordering::Release);
            }
            r
        });
        if let Err(e) = &result {
            self.written_since_sync.store(true, Ordering::Release);
            let mut ignored = WritebackOutcome::default();
            self.record_error(e, &mut ignored);
        }
        result
    }

    /// Whether what an fsync would wait for now, the folios in the dirty
    /// index and the passes in flight, is at most `bytes_max` (it stops
    /// counting past it).
    fn outstanding_bytes_at_most(&self, bytes_max: u64) -> bool {
        let mut bytes = self.writeback_pass_bytes.load(Ordering::Acquire);
        if bytes > bytes_max {
            return false;
        }
        let index = self.mapping.dirty_index();
        index.values().all(|folio| {
            bytes += folio.size_bytes() as u64;
            bytes <= bytes_max
        })
    }

    /// Data written back (or truncated) since the last successful store sync.
    pub fn needs_store_sync(&self) -> bool {
        self.written_since_sync.load(Ordering::Acquire) || self.size_changed.load(Ordering::Acquire)
    }

    /// fsync/fdatasync for one handle: [`Inode::write_and_sync`], then
    /// report any error since the handle's cursor (once per handle).
    pub fn sync(self: &Arc<Self>, kind: SyncKind, cursor: &mut u64) -> io::Result<()> {
        let started = Instant::now();
        let commit_sized = self.outstanding_bytes_at_most(self.config.io_max_bytes);
        let result = self.write_and_sync(kind, Reason::Fsync);
        let latency = started.elapsed();
        self.counters.fsync_latency.record(latency.as_micros() as u64);
        // A commit's wait is what background writeback yields to. An
        // fsync of more than one I/O's worth waits mostly for its own
        // bytes: next to two streams (`fsync-under-load`, 256M, --repeat
        // 3), counting 8 MiB fsyncs cut the streams' rate from 909 to 552
        // MB/s while the 8 MiB fsyncs' p99 stayed at 16-17 ms. A read-only
        // store's fsync waited for nothing.
        if self.is_store_writable() && commit_sized {
            self.dirty.background_budget.record(latency);
        }
        self.errseq.check_and_advance(cursor)?;
        result
    }
}
