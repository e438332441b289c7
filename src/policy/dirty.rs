//! Dirty accounting: the byte gauges of the cache and of each writeback
//! domain, the coalesced work bits that wake a domain's flusher, and the
//! progress signal that wakes whoever waits for writeback or free memory.
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
//! Room is taken with one compare-and-swap against the limit, so it never
//! passes it: a writer that found room keeps it until it dirtied its
//! blocks, and nobody (another writer, a bridge) can take it meanwhile. The
//! cache-wide `Counters` gauges (`dirty_bytes`, `writeback_bytes`,
//! `dontcache_dirty_bytes`) are the sums of the domains' gauges: every
//! method here moves a domain gauge and its cache-wide gauge together. A
//! work bit that is already set is not set again (many uncached writers
//! cost one wakeup).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::base::locks;
use crate::io::BLOCK_SIZE;
use crate::policy::background_budget::BackgroundBudget;
use crate::stats::Counters;

/// Work bits, checked by the flusher in this order. Uncached writes wrote
/// dirty data the flusher writes back for them (as many bytes as the
/// domain's uncached-dirty count).
pub const WORK_START_DONTCACHE: u32 = 1 << 1;
/// A writer is over the background threshold or waits for dirty room. It
/// only wakes the flusher: the gauges say how much to write.
pub const WORK_BACKGROUND: u32 = 1 << 2;
pub const WORK_RECLAIM: u32 = 1 << 3;

/// Wakes everyone waiting for writeback progress or freed memory.
#[derive(Default)]
pub struct Progress {
    generation: Mutex<u64>,
    changed: locks::WaitQueue,
}

impl Progress {
    pub fn made(&self) {
        let mut g = locks::lock(&self.generation);
        *g += 1;
        self.changed.notify_all();
    }

    /// Waits for the next [`Progress::made`], at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let g = locks::lock(&self.generation);
        drop(self.changed.wait_timeout(g, timeout));
    }

    /// The progress made so far, to wait from ([`Progress::wait_since`]).
    pub fn generation(&self) -> u64 {
        *locks::lock(&self.generation)
    }

    /// Waits, at most `timeout`, unless progress was made since
    /// `generation` was read: a waiter that looked at the counters after
    /// reading it cannot miss the progress it needs.
    pub fn wait_since(&self, generation: u64, timeout: Duration) {
        let g = locks::lock(&self.generation);
        if *g != generation {
            return;
        }
        drop(self.changed.wait_timeout(g, timeout));
    }
}

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

    /// Kicks every domain's flusher with `bit`.
    pub fn kick_all(&self, bit: u32) {
        let domains: Vec<Arc<DomainDirty>> = locks::lock(&self.domains).clone();
        for d in domains {
            d.kick(bit);
        }
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

/// How long a bandwidth sample spans at most.
const BANDWIDTH_SAMPLE_PERIOD: Duration = Duration::from_millis(50);

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

    /// Sets a work bit on every worker with inodes listed (the others have
    /// nothing to write) and wakes those that sleep.
    pub fn kick(&self, bit: u32) {
        self.kick_workers(bit, self.listed_workers.load(Ordering::Acquire));
    }

    /// Sets a work bit on the workers of `mask` and wakes those of them
    /// that sleep. A bit already set costs one atomic load: that wakeup is
    /// pending, or (for `start_dontcache`) that worker is writing.
    fn kick_workers(&self, bit: u32, mask: u64) {
        debug_assert!(
            [WORK_START_DONTCACHE, WORK_BACKGROUND, WORK_RECLAIM].contains(&bit),
            "one known work bit at a time, not {bit:#x}"
        );
        for (i, w) in self.wakeups.iter().enumerate() {
            if mask & (1 << i) == 0
                || w.bits.load(Ordering::Acquire) & bit != 0
                || w.bits.fetch_or(bit, Ordering::SeqCst) & bit != 0
            {
                continue;
            }
            // Pairs with `wait_work`: either the worker sees the bit before
            // it sleeps, or this sees it asleep (and it holds the lock from
            // its check until it waits, so the notify cannot come between).
            if w.sleeping.load(Ordering::SeqCst) {
                Counters::add(&self.cache.counters.flusher_wakeups, 1);
                let _g = locks::lock(&w.lock);
                w.cond.notify_one();
            }
        }
    }

    /// Domain side: whether `worker`'s dirty list holds inodes now.
    pub fn set_worker_listed(&self, worker: usize, listed: bool) {
        let bit = 1u64 << worker;
        // Called at every unlock of a list: mostly unchanged, one load.
        if (self.listed_workers.load(Ordering::Acquire) & bit != 0) == listed {
            return;
        }
        if listed {
            self.listed_workers.fetch_or(bit, Ordering::AcqRel);
        } else {
            self.listed_workers.fetch_and(!bit, Ordering::AcqRel);
        }
    }

    /// An uncached write dirtied new blocks that the workers of `mask`
    /// write: counts the kick (also the generation
    /// [`DomainDirty::end_start_dontcache`] compares) and kicks them.
    pub fn kick_dontcache(&self, mask: u64) {
        debug_assert!(mask != 0, "some worker writes the new dirty data");
        self.dontcache_kicks.fetch_add(1, Ordering::AcqRel);
        Counters::add(&self.cache.counters.dontcache_kicks, 1);
        self.kick_workers(WORK_START_DONTCACHE, mask);
    }

    /// Uncached writes' kicks so far: sampled by a worker before it writes
    /// for `start_dontcache`.
    pub fn dontcache_kick_generation(&self) -> u64 {
        self.dontcache_kicks.load(Ordering::Acquire)
    }

    /// Worker side: waits up to `interval` for work for `worker`; returns
    /// its bits and clears them, all but `start_dontcache`, which the
    /// worker ends itself ([`DomainDirty::end_start_dontcache`]). Returns 0
    /// on a timeout: time for periodic writeback.
    pub fn wait_work(&self, worker: usize, interval: Duration) -> u32 {
        let w = &self.wakeups[worker];
        let g = locks::lock(&w.lock);
        w.sleeping.store(true, Ordering::SeqCst);
        if w.bits.load(Ordering::SeqCst) == 0 && !self.is_shutdown() {
            drop(locks::wait_timeout(&w.cond, g, interval));
        } else {
            drop(g);
        }
        w.sleeping.store(false, Ordering::SeqCst);
        w.bits.fetch_and(WORK_START_DONTCACHE, Ordering::AcqRel)
    }

    /// Worker side, while it has writes in flight: takes its bits without
    /// waiting (as [`DomainDirty::wait_work`]).
    pub fn take_work(&self, worker: usize) -> u32 {
        self.wakeups[worker].bits.fetch_and(WORK_START_DONTCACHE, Ordering::AcqRel)
    }

    /// Worker side, after a `start_dontcache` round. With `keep_going` (it
    /// wrote something and uncached dirty data remains) the bit stays set:
    /// the writers' kicks meanwhile keep coalescing into this one wakeup,
    /// and the worker's next round writes again, as the kernel's flusher
    /// holds its `start_dontcache` bit until it has written. Otherwise the
    /// bit is cleared, and set again (without a wakeup: the worker is
    /// awake) if an uncached write kicked since `generation_seen` and the
    /// worker has dirty inodes, so no kick that found the bit set is lost.
    pub fn end_start_dontcache(&self, worker: usize, keep_going: bool, generation_seen: u64, has_dirty: bool) {
        let w = &self.wakeups[worker];
        if keep_going {
            debug_assert!(w.bits.load(Ordering::Acquire) & WORK_START_DONTCACHE != 0, "the bit is still held");
            return;
        }
        w.bits.fetch_and(!WORK_START_DONTCACHE, Ordering::AcqRel);
        if has_dirty && self.dontcache_kick_generation() != generation_seen {
            w.bits.fetch_or(WORK_START_DONTCACHE, Ordering::AcqRel);
        }
    }

    /// Tells the workers to stop and wakes them.
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        for w in self.wakeups.iter() {
            let _g = locks::lock(&w.lock);
            w.cond.notify_all();
        }
    }

    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

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

    /// Adds `bytes` to `unclean_bytes` if the sum stays at or under
    /// `limit` (one compare-and-swap, so concurrent takers never pass it
    /// together). Returns whether it did.
    fn try_add_unclean(&self, bytes: u64, limit: u64) -> bool {
        let unclean = &self.cache.unclean_bytes;
        let mut now = unclean.load(Ordering::Acquire);
        loop {
            let Some(after) = now.checked_add(bytes).filter(|&after| after <= limit) else { return false };
            match unclean.compare_exchange_weak(now, after, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    self.cache.counters.peak_dirty_writeback_bytes.fetch_max(after, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => now = seen,
            }
        }
    }

    /// Takes `bytes` of room under `limit` for a writer about to dirty
    /// blocks, if there is that much. `bytes` may be 0 (a writer that
    /// dirties nothing new, or a closed cache's, which fails further on).
    pub fn try_take_room(&self, bytes: u64, limit: u64) -> Option<DirtyRoom<'_>> {
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "room is whole blocks, not {bytes} bytes");
        // Built only once taken: a dropped room gives its bytes back.
        self.try_add_unclean(bytes, limit).then(|| DirtyRoom { domain: self, bytes })
    }

    /// Room that holds nothing: every byte dirtied with it is added to
    /// `unclean_bytes` on its own (a closing cache; the tests).
    pub fn no_room(&self) -> DirtyRoom<'_> {
        DirtyRoom { domain: self, bytes: 0 }
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

    /// A writeback pass wants to write `bytes` of clean cached blocks to
    /// join two dirty runs into one I/O. If that I/O fails they become
    /// dirty, so the room is taken now, and only if it fits under `limit`:
    /// otherwise the pass writes the runs as separate I/Os. Returns whether
    /// the room was taken.
    pub fn try_reserve_bridge(&self, bytes: u64, limit: u64) -> bool {
        debug_assert!(bytes > 0 && bytes % BLOCK_SIZE as u64 == 0, "bridges are whole blocks, not {bytes} bytes");
        self.try_add_unclean(bytes, limit)
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

    /// The bridged I/Os of a pass ended: `redirtied_bytes` of the
    /// `reserved_bytes` taken by [`DomainDirty::try_reserve_bridge`] failed
    /// and were made dirty ([`DomainDirty::account_bridge_redirtied`]); the
    /// rest of the room is given back.
    pub fn end_bridges(&self, reserved_bytes: u64, redirtied_bytes: u64) {
        debug_assert!(redirtied_bytes <= reserved_bytes, "only bridged blocks are redirtied as bridges");
        debug_assert!(redirtied_bytes % BLOCK_SIZE as u64 == 0);
        let released = reserved_bytes - redirtied_bytes;
        if released > 0 {
            let before = self.cache.unclean_bytes.fetch_sub(released, Ordering::SeqCst);
            debug_assert!(before >= released, "unclean underflow");
            self.cache.progress.made();
        }
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

    /// Folds one writeback I/O batch into the bandwidth estimate.
    pub fn update_bandwidth(&self, bytes: u64, elapsed: Duration) {
        if bytes < (256 << 10) || elapsed.is_zero() {
            return; // too small to say anything about the device
        }
        let sample = (bytes as f64 / elapsed.as_secs_f64()) as u64;
        let old = self.write_bw_bytes_per_s.load(Ordering::Relaxed);
        self.write_bw_bytes_per_s.store((old * 3 + sample) / 4, Ordering::Relaxed);
    }

    /// A worker now has writes in flight (it had none).
    pub fn writeback_busy(&self) {
        let mut bw = locks::lock(&self.bandwidth);
        bw.busy_workers += 1;
        bw.since.get_or_insert_with(Instant::now);
        debug_assert!(bw.busy_workers <= self.wakeups.len(), "each worker is busy once");
    }

    /// A worker completed writes of `bytes`; `now_idle`: it has none in
    /// flight any more. Samples the domain's rate every
    /// [`BANDWIDTH_SAMPLE_PERIOD`] and when the last busy worker goes idle.
    pub fn writeback_completed(&self, bytes: u64, now_idle: bool) {
        let mut bw = locks::lock(&self.bandwidth);
        debug_assert!(bw.busy_workers > 0 && bw.since.is_some(), "completions come from a busy worker");
        bw.bytes += bytes;
        if now_idle {
            bw.busy_workers -= 1;
        }
        let Some(since) = bw.since else { return };
        let elapsed = since.elapsed();
        let idle = bw.busy_workers == 0;
        if idle || elapsed >= BANDWIDTH_SAMPLE_PERIOD {
            let sampled = std::mem::take(&mut bw.bytes);
            bw.since = if idle { None } else { Some(Instant::now()) };
            drop(bw);
            self.update_bandwidth(sampled, elapsed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Arc<DomainDirty> {
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

    /// Room is taken whole or not at all, never past the limit; dirtying
    /// inside it adds nothing, dirtying past it adds the excess, and what is
    /// left goes back when it drops. A bridge competes for the same room.
    #[test]
    fn room_is_held_until_dirtied_or_given_back() {
        let d = domain();
        let unclean = || d.cache.unclean_bytes.load(Ordering::Relaxed);
        let mut room = d.try_take_room(8 << 10, 12 << 10).expect("8K fits under 12K");
        assert_eq!(unclean(), 8 << 10, "counted from the start");
        assert!(d.try_take_room(8 << 10, 12 << 10).is_none(), "8K more would pass the limit");
        assert!(!d.try_reserve_bridge(8 << 10, 12 << 10), "so would a bridge");
        assert!(d.try_reserve_bridge(4 << 10, 12 << 10), "a bridge of what is left fits");
        d.end_bridges(4 << 10, 0);
        d.account_dirty_bytes(4 << 10, 0, &mut room);
        assert_eq!((unclean(), room.bytes()), (8 << 10, 4 << 10), "dirtied inside the room: nothing added");
        d.account_dirty_bytes(8 << 10, 0, &mut room);
        assert_eq!((unclean(), room.bytes()), (12 << 10, 0), "4K from the room, 4K beyond it");
        drop(room);
        assert_eq!(unclean(), 12 << 10, "an empty room gives nothing back");
        assert!(d.try_take_room(0, 12 << 10).is_some(), "no room needed, even at the limit");
        d.account_discarded(12 << 10, 0);
        let room = d.try_take_room(12 << 10, 12 << 10).expect("all of it");
        drop(room);
        assert_eq!(unclean(), 0, "an unused room goes back whole");
        assert_eq!(d.cache.counters.peak_dirty_writeback_bytes.load(Ordering::Relaxed), 12 << 10, "never past 12K");
    }

    /// A bit already set is not set again; taking the bits clears them, all
    /// but `start_dontcache`, which the worker ends.
    #[test]
    fn work_bits_coalesce() {
        let d = domain();
        d.set_worker_listed(0, true);
        d.kick(WORK_BACKGROUND);
        d.kick(WORK_BACKGROUND);
        d.kick(WORK_START_DONTCACHE);
        assert_eq!(d.take_work(0), WORK_BACKGROUND | WORK_START_DONTCACHE);
        assert_eq!(d.take_work(0), WORK_START_DONTCACHE, "held until the worker ends it");
        d.end_start_dontcache(0, false, d.dontcache_kick_generation(), true);
        assert_eq!(d.take_work(0), 0);
        d.cache.kick_all(WORK_RECLAIM);
        assert_eq!(d.wait_work(0, Duration::from_millis(1)), WORK_RECLAIM);
        assert_eq!(d.wait_work(0, Duration::from_millis(1)), 0, "a timeout returns no bits");
        assert_eq!(d.cache.counters.flusher_wakeups.load(Ordering::Relaxed), 0, "the worker never slept on a kick");
    }

    /// A kick wakes a sleeping worker, and counts one wakeup; kicks while
    /// the bit is pending count none.
    #[test]
    fn a_kick_wakes_a_sleeping_worker_once() {
        let d = domain();
        d.set_worker_listed(0, true);
        let sleeper = {
            let d = d.clone();
            std::thread::spawn(move || d.wait_work(0, Duration::from_secs(30)))
        };
        while !d.wakeups[0].sleeping.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // Asleep (or about to wait, holding the lock): the notify follows.
        d.kick(WORK_BACKGROUND);
        d.kick(WORK_BACKGROUND);
        assert_eq!(sleeper.join().unwrap(), WORK_BACKGROUND, "woken well before 30 s");
        assert_eq!(d.cache.counters.flusher_wakeups.load(Ordering::Relaxed), 1);
    }

    /// While a worker holds `start_dontcache`, uncached writers' kicks set
    /// nothing; ending the round clears the bit unless a kick came in since
    /// the worker sampled the generation (and it has work).
    #[test]
    fn start_dontcache_is_held_while_the_worker_writes() {
        let d = domain();
        d.kick_dontcache(1);
        assert_eq!(d.take_work(0), WORK_START_DONTCACHE);
        let seen = d.dontcache_kick_generation();
        for _ in 0..1000 {
            d.kick_dontcache(1);
        }
        assert_eq!(d.cache.counters.dontcache_kicks.load(Ordering::Relaxed), 1001);
        d.end_start_dontcache(0, true, seen, true);
        assert_eq!(d.take_work(0), WORK_START_DONTCACHE, "kept going");
        d.end_start_dontcache(0, false, seen, false);
        assert_eq!(d.take_work(0), 0, "nothing of its own to write: cleared");
        d.kick_dontcache(1);
        let seen = d.dontcache_kick_generation();
        assert_eq!(d.take_work(0), WORK_START_DONTCACHE);
        d.kick_dontcache(1);
        d.end_start_dontcache(0, false, seen, true);
        assert_eq!(d.take_work(0), WORK_START_DONTCACHE, "a kick since the sample is not lost");
        d.end_start_dontcache(0, false, d.dontcache_kick_generation(), true);
        assert_eq!(d.take_work(0), 0);
    }

    /// A kick reaches every worker with inodes listed, once, and no other;
    /// each takes only its own bits.
    #[test]
    fn listed_workers_are_kicked() {
        let d = DomainDirty::new(
            &CacheDirty::new(Arc::default(), Arc::default()),
            4,
            BackgroundBudget::new(0, 1 << 20, Arc::default()),
        );
        for w in 0..3 {
            d.set_worker_listed(w, true);
        }
        d.kick(WORK_BACKGROUND);
        assert_eq!(d.take_work(1), WORK_BACKGROUND);
        d.kick(WORK_BACKGROUND);
        assert_eq!(d.take_work(0), WORK_BACKGROUND);
        assert_eq!(d.take_work(1), WORK_BACKGROUND, "worker 1 took its first bit and got a second");
        assert_eq!(d.take_work(2), WORK_BACKGROUND, "coalesced: one bit for two kicks");
        assert_eq!(d.take_work(2), 0);
        assert_eq!(d.take_work(3), 0, "nothing listed: not kicked");
        d.set_worker_listed(1, false);
        d.kick(WORK_BACKGROUND);
        assert_eq!((d.take_work(0), d.take_work(1)), (WORK_BACKGROUND, 0));
    }

    /// Two workers' completions make one sample of the domain's rate, not
    /// two half-rate ones: the window spans from the first busy worker to
    /// the last one going idle.
    #[test]
    fn bandwidth_counts_every_worker() {
        let d = DomainDirty::new(
            &CacheDirty::new(Arc::default(), Arc::default()),
            2,
            BackgroundBudget::new(0, 1 << 20, Arc::default()),
        );
        d.writeback_busy();
        d.writeback_busy();
        std::thread::sleep(Duration::from_millis(20));
        d.writeback_completed(64 << 20, true);
        let before = d.write_bw_bytes_per_s.load(Ordering::Relaxed);
        assert_eq!(before, 100 << 20, "no sample while a worker is still busy (and under 50 ms)");
        d.writeback_completed(64 << 20, true);
        let after = d.write_bw_bytes_per_s.load(Ordering::Relaxed);
        // 128 MiB in a little over 20 ms is over 1 GB/s; averaged in at a
        // quarter weight the estimate rises well past its 100 MiB/s start.
        assert!(after > 300 << 20, "one sample of both workers' bytes: {after}");
    }
}
