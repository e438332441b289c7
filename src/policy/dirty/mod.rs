//! Dirty accounting: the byte gauges of the cache ([`CacheDirty`]) and of
//! each writeback domain ([`DomainDirty`]), kept here, and around them one
//! file each: writers' room under the dirty limit (`room`), the coalesced
//! work bits that wake a domain's flushers (`work`), the fsyncs and
//! readers waiting on a domain's writeback (`sync_waiter`), the domain's
//! writeback bandwidth (`bandwidth`) and the progress signal that wakes
//! whoever waits for writeback or free memory (`progress`).
//!
//! This sits below both the inode (which accounts the bytes it dirties and
//! throttles on them) and the writeback layer (which accounts what it writes
//! and is woken by the bits), so neither has to reach into the other.
//!
//! Invariants: `CacheDirty::unclean_bytes` is every domain's dirty plus
//! writeback bytes (a block rewritten under writeback counts twice), plus
//! the room writers took and have not dirtied yet ([`DirtyRoom`]), plus the
//! clean bytes writeback passes bridge while their I/O is in flight (a
//! failed bridge makes them dirty, and that room must already be held).
//! The cache-wide `Counters` gauges (`dirty_bytes`, `writeback_bytes`,
//! `dontcache_dirty_bytes`) are the sums of the domains' gauges: every
//! method that moves a domain gauge moves its cache-wide gauge with it.
//! How room is taken without ever passing the limit is `room`'s invariant;
//! how kicks coalesce is `work`'s.
//!
//! Ownership: the cache's shared state holds its [`CacheDirty`], which
//! every domain and the memory accounting share; a domain's
//! [`DomainDirty`] is shared by the domain, its workers and its inodes, and
//! listed in the cache's until the cache closes
//! ([`CacheDirty::clear_domains`] breaks that cycle). Every type the two
//! hold or take is defined here, fields and all: the gauges' methods, the
//! worker wakeups, the bandwidth window and [`DirtyRoom`]; each child adds
//! the `impl` of its own concept and reads the fields it needs (a child
//! sees its parent's private items), and this file names no child but to
//! re-export it.
//!
//! Layering inside the folder, top first: `room`, `sync_waiter`, `work`
//! and `bandwidth`, which name the types defined here; this file;
//! `progress`, which names nothing of the folder.

mod bandwidth;
mod progress;
mod room;
mod sync_waiter;
mod work;

pub use progress::Progress;
pub use sync_waiter::{READER_SYNC_WAITER_ID, READ_RECENT};
pub use work::{DontcacheRoundEnd, Work};

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::base::locks;
use crate::io::BLOCK_SIZE;
use crate::policy::background_budget::BackgroundBudget;
use crate::stats::Counters;

/// Cache-wide dirty state, shared by every domain of one cache.
pub struct CacheDirty {
    pub counters: Arc<Counters>,
    pub progress: Arc<Progress>,
    /// Time origin for dirtied-when stamps.
    pub epoch: Instant,
    /// Bytes dirty or under writeback (and room taken by writers, and
    /// bridged clean bytes in flight), what the dirty limit holds writers
    /// to. One counter, so no reader can see bytes moving between dirty and
    /// writeback in neither: it grows when blocks become dirty and shrinks
    /// when their writeback ends or truncation drops them; a failed
    /// writeback makes its bytes dirty (counted again) before it ends
    /// (uncounted).
    pub unclean_bytes: AtomicU64,
    /// Writers waiting for dirty room (see `throttle::wait_for_dirty_room`).
    /// While any waits, every flusher writes back whatever the background
    /// threshold says.
    pub nr_dirty_waiters: AtomicU64,
    /// Set when the cache closes: waits for dirty room or memory end.
    closed: AtomicBool,
    domains: Mutex<Vec<Arc<DomainDirty>>>,
}

impl CacheDirty {
    pub fn new(counters: Arc<Counters>, progress: Arc<Progress>) -> Arc<CacheDirty> {
        Arc::new(CacheDirty {
            counters,
            progress,
            epoch: Instant::now(),
            unclean_bytes: AtomicU64::new(0),
            nr_dirty_waiters: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            domains: Mutex::new(Vec::new()),
        })
    }

    /// Dirty bytes now, cache-wide.
    pub fn dirty_bytes(&self) -> u64 {
        self.counters.dirty_bytes.load(Ordering::Acquire)
    }

    pub fn has_dirty_waiters(&self) -> bool {
        self.nr_dirty_waiters.load(Ordering::Acquire) > 0
    }

    /// Nanoseconds since `epoch`.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Marks the cache closed and wakes every waiter. Returns whether it was
    /// open.
    pub fn close(&self) -> bool {
        let was_open = !self.closed.swap(true, Ordering::AcqRel);
        self.progress.made();
        debug_assert!(self.is_closed(), "a closed cache stays closed");
        was_open
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Forgets every domain (cache close): breaks the cache ↔ domain cycle.
    pub fn clear_domains(&self) {
        locks::lock(&self.domains).clear();
    }
}

/// One writeback domain's dirty accounting and its flusher's wakeup.
pub struct DomainDirty {
    pub cache: Arc<CacheDirty>,
    pub nr_dirty_bytes: AtomicU64,
    pub nr_writeback_bytes: AtomicU64,
    pub dontcache_dirty_bytes: AtomicU64,
    /// Uncached writes' kicks of this domain (a generation counter).
    dontcache_kicks: AtomicU64,
    /// Bit `w` set while worker `w`'s dirty list holds inodes (kept by the
    /// domain): kicks go to those workers only.
    listed_workers: AtomicU64,
    /// Exponentially averaged writeback bandwidth, bytes per second.
    pub write_bw_bytes_per_s: AtomicU64,
    /// One wakeup per writeback worker: a kick sets its bit on each.
    wakeups: Box<[WorkerWakeup]>,
    shutdown: AtomicBool,
    /// The domain's writeback bandwidth sample in progress (every worker's
    /// completions together).
    bandwidth: Mutex<BandwidthWindow>,
    /// The inodes (by id, once per waiter) of the fsync / fdatasync calls
    /// waiting on this domain's writeback now: the flusher submits their
    /// collected I/O first and caps its other I/O while any waits.
    sync_waiters: Mutex<Vec<u64>>,
    /// `sync_waiters.len()`, read without the lock on every submission.
    nr_sync_waiters: AtomicU64,
    /// Bumped on every change of `sync_waiters`, so the flusher looks at
    /// the list only when it changed.
    sync_waiters_generation: AtomicU64,
    /// When a reader last came to wait for a fill or left, in ns since the
    /// cache's epoch, plus one (0: never). While that is within
    /// [`READ_RECENT`], periodic writeback waits
    /// (`writeback::policy::periodic_cutoff`), an fsync builds small writes
    /// and a caller's writeback sends them in small batches
    /// (`Inode::begin_pass`, `Inode::write_gated_pass`).
    read_seen_ns_plus_one: AtomicU64,
    /// The largest background I/O, scaled by foreground latency.
    pub background_budget: BackgroundBudget,
}

impl DomainDirty {
    /// A new domain's accounting for `nr_workers` writeback workers,
    /// registered with its cache.
    pub fn new(cache: &Arc<CacheDirty>, nr_workers: usize, background_budget: BackgroundBudget) -> Arc<DomainDirty> {
        assert!(nr_workers >= 1, "a domain has a writeback worker");
        let domain = Arc::new(DomainDirty {
            cache: cache.clone(),
            nr_dirty_bytes: AtomicU64::new(0),
            nr_writeback_bytes: AtomicU64::new(0),
            dontcache_dirty_bytes: AtomicU64::new(0),
            dontcache_kicks: AtomicU64::new(0),
            listed_workers: AtomicU64::new(0),
            write_bw_bytes_per_s: AtomicU64::new(100 << 20),
            wakeups: (0..nr_workers).map(|_| WorkerWakeup::default()).collect(),
            shutdown: AtomicBool::new(false),
            bandwidth: Mutex::new(BandwidthWindow::default()),
            sync_waiters: Mutex::new(Vec::new()),
            nr_sync_waiters: AtomicU64::new(0),
            sync_waiters_generation: AtomicU64::new(0),
            read_seen_ns_plus_one: AtomicU64::new(0),
            background_budget,
        });
        locks::lock(&cache.domains).push(domain.clone());
        domain
    }

    /// Accounts newly dirtied bytes (`dontcache_bytes` of them by uncached
    /// writes), from the writer's `room` as far as it goes. Called under
    /// the folio lock that set the dirty bits; the caller queues the inode
    /// on the domain's dirty list after.
    pub fn account_dirty_bytes(&self, bytes: u64, dontcache_bytes: u64, room: &mut DirtyRoom<'_>) {
        debug_assert!(dontcache_bytes <= bytes);
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "blocks become dirty whole, not {bytes} bytes");
        debug_assert!(std::ptr::eq(room.domain, self), "room is taken in the domain it is used in");
        if bytes == 0 {
            return;
        }
        let c = &self.cache.counters;
        // Room already counted; only what goes beyond it is added now.
        let from_room = bytes.min(room.bytes);
        room.bytes -= from_room;
        let beyond = bytes - from_room;
        let unclean_after = if beyond > 0 {
            let before = self.cache.unclean_bytes.fetch_add(beyond, Ordering::AcqRel);
            debug_assert!(before.checked_add(beyond).is_some(), "unclean overflow");
            before + beyond
        } else {
            self.cache.unclean_bytes.load(Ordering::Acquire)
        };
        c.peak_dirty_writeback_bytes.fetch_max(unclean_after, Ordering::Relaxed);
        let dirty_before = self.nr_dirty_bytes.fetch_add(bytes, Ordering::AcqRel);
        debug_assert!(dirty_before.checked_add(bytes).is_some(), "domain dirty overflow");
        let total = c.dirty_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        c.peak_dirty_bytes.fetch_max(total, Ordering::Relaxed);
        if dontcache_bytes > 0 {
            let dontcache_before = self.dontcache_dirty_bytes.fetch_add(dontcache_bytes, Ordering::AcqRel);
            debug_assert!(dontcache_before.checked_add(dontcache_bytes).is_some(), "domain uncached-dirty overflow");
            Counters::add(&c.dontcache_dirty_bytes, dontcache_bytes);
        }
    }

    /// Dirty bytes already accounted became uncached-dirty (an advice to
    /// drop them behind): the flusher writes them as it writes uncached
    /// data.
    pub fn account_made_dontcache(&self, bytes: u64) {
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "whole blocks, not {bytes} bytes");
        if bytes == 0 {
            return;
        }
        let before = self.dontcache_dirty_bytes.fetch_add(bytes, Ordering::AcqRel);
        debug_assert!(before.checked_add(bytes).is_some(), "domain uncached-dirty overflow");
        Counters::add(&self.cache.counters.dontcache_dirty_bytes, bytes);
    }

    /// Dirty blocks moved to writeback. `dontcache_bytes` is what the
    /// folios that went clean held of uncached-dirty bytes, which a pass
    /// takes whole, so it may exceed `bytes`.
    pub fn account_writeback_started(&self, bytes: u64, dontcache_bytes: u64) {
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "blocks go to writeback whole, not {bytes} bytes");
        let c = &self.cache.counters;
        let before = self.nr_dirty_bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "domain dirty underflow");
        Counters::sub(&c.dirty_bytes, bytes);
        let writeback_before = self.nr_writeback_bytes.fetch_add(bytes, Ordering::AcqRel);
        debug_assert!(writeback_before.checked_add(bytes).is_some(), "domain writeback overflow");
        Counters::add(&c.writeback_bytes, bytes);
        if dontcache_bytes > 0 {
            let before = self.dontcache_dirty_bytes.fetch_sub(dontcache_bytes, Ordering::AcqRel);
            debug_assert!(before >= dontcache_bytes, "domain uncached-dirty underflow");
            Counters::sub(&c.dontcache_dirty_bytes, dontcache_bytes);
        }
    }

    /// Writeback of `done_bytes` ended (what of it succeeded is counted
    /// with the pass: `Counters::count_written`).
    pub fn account_writeback_done(&self, done_bytes: u64) {
        debug_assert!(done_bytes % BLOCK_SIZE as u64 == 0, "writeback ends in whole blocks, not {done_bytes} bytes");
        let c = &self.cache.counters;
        let before = self.nr_writeback_bytes.fetch_sub(done_bytes, Ordering::AcqRel);
        debug_assert!(before >= done_bytes, "domain writeback underflow");
        Counters::sub(&c.writeback_bytes, done_bytes);
        // After any failed bytes were made dirty again (and counted there).
        let before = self.cache.unclean_bytes.fetch_sub(done_bytes, Ordering::AcqRel);
        debug_assert!(before >= done_bytes, "unclean underflow");
        self.cache.progress.made();
    }

    /// Failed writeback: `bytes` under writeback are dirty again (a later
    /// pass retries them). They move from writeback to dirty in one step;
    /// `unclean_bytes` does not change, as the data never left the cache.
    pub fn account_writeback_failed(&self, bytes: u64) {
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "blocks fail whole, not {bytes} bytes");
        if bytes == 0 {
            return;
        }
        let c = &self.cache.counters;
        let writeback_before = self.nr_writeback_bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(writeback_before >= bytes, "domain writeback underflow");
        Counters::sub(&c.writeback_bytes, bytes);
        let dirty_before = self.nr_dirty_bytes.fetch_add(bytes, Ordering::AcqRel);
        debug_assert!(dirty_before.checked_add(bytes).is_some(), "domain dirty overflow");
        let total = c.dirty_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        c.peak_dirty_bytes.fetch_max(total, Ordering::Relaxed);
    }

    /// Blocks of a failed bridge are dirty again: `bytes` of the bridge's
    /// room become dirty bytes (not counted twice). Called under the folio
    /// lock that set their dirty bits, like [`DomainDirty::account_dirty_bytes`].
    pub fn account_bridge_redirtied(&self, bytes: u64) {
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "blocks fail whole, not {bytes} bytes");
        if bytes == 0 {
            return;
        }
        let c = &self.cache.counters;
        let dirty_before = self.nr_dirty_bytes.fetch_add(bytes, Ordering::AcqRel);
        debug_assert!(dirty_before.checked_add(bytes).is_some(), "domain dirty overflow");
        let total = c.dirty_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        c.peak_dirty_bytes.fetch_max(total, Ordering::Relaxed);
    }

    /// Dirty data discarded by truncation.
    pub fn account_discarded(&self, bytes: u64, dontcache_bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.account_writeback_started(bytes, dontcache_bytes);
        let writeback_before = self.nr_writeback_bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(writeback_before >= bytes, "domain writeback underflow");
        Counters::sub(&self.cache.counters.writeback_bytes, bytes);
        let before = self.cache.unclean_bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "unclean underflow");
        self.cache.progress.made();
    }
}

/// Room under the dirty limit that a writer took before dirtying blocks
/// ([`DomainDirty::try_take_room`]): counted in `unclean_bytes` from the
/// moment it is taken, consumed as the writer's blocks become dirty
/// ([`DomainDirty::account_dirty_bytes`]), and what is left is given back
/// when it drops (the write covered fewer new blocks, or failed).
pub struct DirtyRoom<'a> {
    domain: &'a DomainDirty,
    bytes: u64,
}

impl DirtyRoom<'_> {
    /// Room not dirtied yet.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds `more` (taken in the same domain) to this room.
    pub fn absorb(&mut self, mut more: DirtyRoom<'_>) {
        debug_assert!(std::ptr::eq(self.domain, more.domain), "rooms of one domain");
        self.bytes += std::mem::take(&mut more.bytes);
        debug_assert_eq!(more.bytes, 0, "moved, not given back");
    }
}

impl Drop for DirtyRoom<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let cache = &self.domain.cache;
        // SeqCst here and where a writer registers as waiting and then
        // tries for room: one of the two sees the other (no lost wakeup).
        let before = cache.unclean_bytes.fetch_sub(self.bytes, Ordering::SeqCst);
        debug_assert!(before >= self.bytes, "unclean underflow");
        // Writers waiting for room may be waiting for exactly this. Only
        // then: a rewrite of dirty blocks gives its whole room back on every
        // call, and waking nobody through a lock cost it more than the copy.
        if cache.nr_dirty_waiters.load(Ordering::SeqCst) > 0 {
            cache.progress.made();
        }
    }
}

/// A writeback worker's coalesced work bits and what it sleeps on.
#[derive(Default)]
struct WorkerWakeup {
    bits: AtomicU32,
    /// Set by the worker before it looks at `bits` and waits, cleared when
    /// it wakes: a kick notifies (and counts a wakeup) only while it is
    /// set. A worker that is awake finds the bit at its next round, as the
    /// kernel does not wake a flusher whose writeback is in progress.
    sleeping: AtomicBool,
    lock: Mutex<()>,
    cond: Condvar,
}

/// Bytes the domain's workers completed since `since`, a stretch in which
/// at least one of them had writes in flight all along: the device's rate
/// for this domain, whatever the number of workers.
#[derive(Default)]
struct BandwidthWindow {
    busy_workers: usize,
    since: Option<Instant>,
    bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A domain of one worker in a cache of its own, for the tests of
    /// every file of the folder.
    pub(super) fn domain() -> Arc<DomainDirty> {
        DomainDirty::new(
            &CacheDirty::new(Arc::default(), Arc::default()),
            1,
            BackgroundBudget::new(0, 1 << 20, Arc::default()),
        )
    }

    /// Bytes move dirty → writeback → done with the domain and cache-wide
    /// gauges together, and `unclean` covers both until the end.
    #[test]
    fn gauges_move_together_through_writeback() {
        let d = domain();
        let c = &d.cache.counters;
        d.account_dirty_bytes(12 << 10, 4 << 10, &mut d.no_room());
        assert_eq!(d.cache.unclean_bytes.load(Ordering::Relaxed), 12 << 10);
        assert_eq!(c.dirty_bytes.load(Ordering::Relaxed), 12 << 10);
        assert_eq!(d.dontcache_dirty_bytes.load(Ordering::Relaxed), 4 << 10);
        d.account_writeback_started(8 << 10, 4 << 10);
        assert_eq!(d.nr_dirty_bytes.load(Ordering::Relaxed), 4 << 10);
        assert_eq!(c.writeback_bytes.load(Ordering::Relaxed), 8 << 10);
        assert_eq!(d.cache.unclean_bytes.load(Ordering::Relaxed), 12 << 10, "writeback still counts");
        d.account_writeback_done(8 << 10);
        assert_eq!(d.cache.unclean_bytes.load(Ordering::Relaxed), 4 << 10);
        d.account_discarded(4 << 10, 0);
        assert_eq!(d.cache.unclean_bytes.load(Ordering::Relaxed), 0);
        assert_eq!(c.dirty_bytes.load(Ordering::Relaxed), 0);
        assert_eq!(c.writeback_bytes.load(Ordering::Relaxed), 0);
        assert_eq!(c.peak_dirty_bytes.load(Ordering::Relaxed), 12 << 10);
    }

    /// The two peaks differ by what is under writeback: bytes dirtied while
    /// others are being written raise the dirty + writeback peak only.
    #[test]
    fn peaks_count_dirty_alone_and_with_writeback() {
        let d = domain();
        let c = &d.cache.counters;
        d.account_dirty_bytes(12 << 10, 0, &mut d.no_room());
        d.account_writeback_started(8 << 10, 0);
        d.account_dirty_bytes(8 << 10, 0, &mut d.no_room());
        assert_eq!(c.peak_dirty_bytes.load(Ordering::Relaxed), 12 << 10, "dirty alone never exceeded 12K");
        assert_eq!(c.peak_dirty_writeback_bytes.load(Ordering::Relaxed), 20 << 10);
        d.account_writeback_done(8 << 10);
        d.account_discarded(12 << 10, 0);
        assert_eq!(c.peak_dirty_writeback_bytes.load(Ordering::Relaxed), 20 << 10, "a peak stays");
    }

    /// Failed writeback moves bytes back to dirty without counting them
    /// twice: dirty + writeback, and its peak, stay what the cache holds.
    #[test]
    fn failed_writeback_moves_bytes_back_to_dirty() {
        let d = domain();
        let c = &d.cache.counters;
        d.account_dirty_bytes(16 << 10, 0, &mut d.no_room());
        d.account_writeback_started(16 << 10, 0);
        d.account_writeback_failed(12 << 10);
        d.account_writeback_done(4 << 10);
        assert_eq!(d.cache.unclean_bytes.load(Ordering::Relaxed), 12 << 10);
        assert_eq!(c.dirty_bytes.load(Ordering::Relaxed), 12 << 10);
        assert_eq!(c.writeback_bytes.load(Ordering::Relaxed), 0);
        assert_eq!(d.nr_dirty_bytes.load(Ordering::Relaxed), 12 << 10);
        assert_eq!(c.peak_dirty_writeback_bytes.load(Ordering::Relaxed), 16 << 10, "never above what is held");
    }
}
