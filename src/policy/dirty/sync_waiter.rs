//! Sync waiters: the fsync / fdatasync calls (by inode id, once per
//! waiter) and the readers waiting for a fill (by
//! [`READER_SYNC_WAITER_ID`], which names no inode) that wait on a
//! domain's device now. The flusher submits the collected I/O of the
//! inodes waited for first and caps its other I/O while any waiter waits;
//! and while a reader came or left within [`READ_RECENT`], periodic
//! writeback waits and a caller's writeback goes in small writes and
//! batches.
//!
//! Invariants: a waiter is listed from [`DomainDirty::enter_sync`] until
//! its [`SyncWaiter`] drops, whichever way the call ends; the
//! lock-free count (`nr_sync_waiters`) is the list's length, and the
//! generation changes with every waiter that comes or goes, so the flusher
//! looks at the list only when it changed. Only a reader stamps the
//! recency clock: an fsync does not.
//!
//! The list, its count, generation and the reader stamp are fields of the
//! domain's [`DomainDirty`] (in the parent); the guard borrows the domain
//! and is owned by the waiting call.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::DomainDirty;
use crate::base::locks;
use crate::stats::Counters;

/// The sync-waiter id of a reader waiting for a fill (no inode's id:
/// those count up from 1).
pub const READER_SYNC_WAITER_ID: u64 = u64::MAX;

/// How long after a read miss the device counts as read from: periodic
/// writeback waits and a caller's writeback goes in small writes and
/// batches until none came for this long (the window blk-wbt holds
/// background writes back for after a read).
pub const READ_RECENT: Duration = Duration::from_millis(100);

/// One fsync / fdatasync counted in its domain's sync waiters for as long
/// as it lives ([`DomainDirty::enter_sync`]), whichever way the call ends.
pub struct SyncWaiter<'a> {
    domain: &'a DomainDirty,
    inode_id: u64,
}

impl Drop for SyncWaiter<'_> {
    fn drop(&mut self) {
        let d = self.domain;
        let mut waiters = locks::lock(&d.sync_waiters);
        let pos = waiters.iter().position(|&id| id == self.inode_id).expect("a sync waiter is listed until it leaves");
        waiters.swap_remove(pos);
        Counters::sub(&d.cache.counters.sync_waiters, 1);
        d.note_reader(self.inode_id);
        d.nr_sync_waiters.store(waiters.len() as u64, Ordering::Release);
        d.sync_waiters_generation.fetch_add(1, Ordering::AcqRel);
        debug_assert_eq!(d.nr_sync_waiters.load(Ordering::Relaxed), waiters.len() as u64);
    }
}

impl DomainDirty {
    /// Counts an fsync / fdatasync of inode `inode_id` as waiting on this
    /// domain's writeback until the returned guard drops.
    pub fn enter_sync(&self, inode_id: u64) -> SyncWaiter<'_> {
        let mut waiters = locks::lock(&self.sync_waiters);
        waiters.push(inode_id);
        Counters::add(&self.cache.counters.sync_waiters, 1);
        self.note_reader(inode_id);
        self.nr_sync_waiters.store(waiters.len() as u64, Ordering::Release);
        self.sync_waiters_generation.fetch_add(1, Ordering::AcqRel);
        debug_assert!(self.has_sync_waiters(), "the new waiter is counted");
        SyncWaiter { domain: self, inode_id }
    }

    /// Sync waiter `waiter_id` comes or goes now: the time, if it is a
    /// reader. An fsync does not count: the background budget answers its
    /// waits, and the flusher keeps writing a committer's streams.
    fn note_reader(&self, waiter_id: u64) {
        if waiter_id != READER_SYNC_WAITER_ID {
            return;
        }
        let now_ns = self.cache.now_ns();
        self.read_seen_ns_plus_one.store(now_ns + 1, Ordering::Relaxed);
        debug_assert!(self.read_seen_ns().is_some(), "seen once noted");
    }

    /// Whether a reader waited on the device within [`READ_RECENT`].
    pub fn read_is_recent(&self) -> bool {
        let Some(seen_ns) = self.read_seen_ns() else { return false };
        self.cache.now_ns().saturating_sub(seen_ns) < READ_RECENT.as_nanos() as u64
    }

    /// When a reader last came to wait for a fill or left (ns since the
    /// cache's epoch), if ever.
    pub fn read_seen_ns(&self) -> Option<u64> {
        self.read_seen_ns_plus_one.load(Ordering::Relaxed).checked_sub(1)
    }

    pub fn has_sync_waiters(&self) -> bool {
        self.nr_sync_waiters.load(Ordering::Acquire) > 0
    }

    /// Changes with every sync waiter that comes or goes.
    pub fn sync_waiters_generation(&self) -> u64 {
        self.sync_waiters_generation.load(Ordering::Acquire)
    }

    /// The inodes sync waiters wait for now (an inode once per waiter), and
    /// the generation that list belongs to.
    pub fn sync_waiter_inodes(&self) -> (u64, Vec<u64>) {
        let waiters = locks::lock(&self.sync_waiters);
        (self.sync_waiters_generation.load(Ordering::Acquire), waiters.clone())
    }
}
