//! An inode's place in the cache around it: its identity, the open handles
//! that keep it in the inode table, its error sequence as handles see it,
//! and its membership of the domain's dirty lists (one bit per writeback
//! worker) and rotor binding, which the writeback domain owns and changes
//! only through these methods.
//!
//! Invariants: the handle count never goes below zero (a close without
//! an open panics); a worker's bit is set while, and only while, that
//! worker's list holds the inode or the worker has taken it off to write
//! it and not put it back; a rotor binding, once made, never changes.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::base::locks::{self, Ordered, Rank};
use crate::io::BackingInfo;
use crate::policy::route::Route;

use super::Inode;

impl Inode {
    /// Unique within the cache (for eviction ghosts and routing).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn info(&self) -> &BackingInfo {
        &self.info
    }

    /// Held by an `O_APPEND` handle's write from finding the end to
    /// writing there.
    pub fn lock_append(&self) -> Ordered<MutexGuard<'_, ()>> {
        locks::lock_ranked(Rank::Append, &self.append_lock)
    }

    /// A new handle's error cursor: errors recorded from now on.
    pub fn open_error_cursor(&self) -> u64 {
        self.errseq.open_cursor()
    }

    /// The first writeback error since `cursor`, advancing it.
    pub fn check_errors(&self, cursor: &mut u64) -> io::Result<()> {
        self.errseq.check_and_advance(cursor)
    }

    /// Counts a new open handle. SeqCst, paired with `mark_unlinked`: of a
    /// last close and an unlink racing, one sees the other's change.
    pub fn handle_opened(&self) {
        self.handles.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts a closed handle; returns how many stay open.
    pub fn handle_closed(&self) -> usize {
        let before = self.handles.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "handle count underflow");
        before - 1
    }

    pub fn open_handles(&self) -> usize {
        self.handles.load(Ordering::SeqCst)
    }

    /// The workers whose dirty lists hold this inode (or took it off to
    /// write it), a bit per worker.
    pub fn listed_workers(&self) -> u64 {
        self.listed_workers.load(Ordering::Acquire)
    }

    /// Whether any writeback worker lists this inode.
    pub fn is_listed(&self) -> bool {
        self.listed_workers() != 0
    }

    /// Sets `worker`'s bit; false if it was set already (the inode is on
    /// that worker's list, or taken by it).
    pub fn mark_listed(&self, worker: usize) -> bool {
        let bit = 1u64 << worker;
        let before = self.listed_workers.fetch_or(bit, Ordering::AcqRel);
        debug_assert!(self.listed_workers() & bit != 0, "the bit is set");
        before & bit == 0
    }

    /// Clears `worker`'s bit; returns the other workers' bits.
    pub fn mark_unlisted(&self, worker: usize) -> u64 {
        let bit = 1u64 << worker;
        self.listed_workers.fetch_and(!bit, Ordering::AcqRel) & !bit
    }

    /// The worker `rotor` routing bound this inode to, if any.
    pub fn rotor_worker(&self) -> Option<usize> {
        let bound = self.rotor_worker.load(Ordering::Acquire);
        (bound != u32::MAX).then_some(bound as usize)
    }

    /// Binds the inode to `worker` unless it is bound already; returns the
    /// worker it is bound to.
    pub fn bind_rotor_worker(&self, worker: usize) -> usize {
        let worker = u32::try_from(worker).expect("a worker number fits 32 bits");
        match self.rotor_worker.compare_exchange(u32::MAX, worker, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => worker as usize,
            Err(bound) => bound as usize,
        }
    }

    /// The workers `route` gives this inode's dirty regions to, a bit per
    /// worker (0 if it has none).
    pub fn dirty_workers(&self, route: &Route) -> u64 {
        route.workers_of_regions(self.id, self.mapping.dirty_index().regions())
    }

    /// Whether any dirty region of this inode is `worker`'s by `route`.
    pub fn has_dirty_region_of(&self, route: &Route, worker: usize) -> bool {
        let idx = self.mapping.dirty_index();
        let mut regions = idx.regions();
        regions.any(|r| route.worker_of_region(self.id, r) == worker)
    }
}
