//! A writeback domain (the kernel's `bdi_writeback`): the unit of dirty
//! accounting and flushing, one per backing device. It keeps the dirty
//! inode list (oldest dirtied first), the dirty / writeback / uncached-dirty
//! byte counts, the measured write bandwidth, and the coalesced work bits
//! that wake its flusher.
//!
//! Invariants: an inode is on `dirty_inodes` at most once, exactly while its
//! `on_dirty_list` flag is set; the domain's byte gauges and the cache-wide
//! gauges move together; a work bit that is already set is not set again
//! (many uncached writers cost one wakeup).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cache::Shared;
use crate::inode::Inode;
use crate::locks;
use crate::stats::Counters;
use crate::writeback::Reason;

/// Work bits, checked by the flusher in this order.
pub const WORK_START_ALL: u32 = 1 << 0;
pub const WORK_START_DONTCACHE: u32 = 1 << 1;
pub const WORK_BACKGROUND: u32 = 1 << 2;
pub const WORK_RECLAIM: u32 = 1 << 3;

pub struct Domain {
    pub shared: Arc<Shared>,
    dirty_inodes: Mutex<VecDeque<Arc<Inode>>>,
    work_bits: AtomicU32,
    work_lock: Mutex<()>,
    work_cond: Condvar,
    shutdown: AtomicBool,
    pub nr_dirty_bytes: AtomicU64,
    pub nr_writeback_bytes: AtomicU64,
    pub dontcache_dirty_bytes: AtomicU64,
    /// Exponentially averaged writeback bandwidth, bytes per second.
    pub write_bw_bytes_per_s: AtomicU64,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl Domain {
    /// A domain with its flusher thread running.
    pub fn start(device_id: u64, shared: Arc<Shared>) -> Arc<Domain> {
        let domain = Arc::new(Domain {
            shared,
            dirty_inodes: Mutex::new(VecDeque::new()),
            work_bits: AtomicU32::new(0),
            work_lock: Mutex::new(()),
            work_cond: Condvar::new(),
            shutdown: AtomicBool::new(false),
            nr_dirty_bytes: AtomicU64::new(0),
            nr_writeback_bytes: AtomicU64::new(0),
            dontcache_dirty_bytes: AtomicU64::new(0),
            write_bw_bytes_per_s: AtomicU64::new(100 << 20),
            flusher: Mutex::new(None),
        });
        let for_thread = domain.clone();
        let handle = std::thread::Builder::new()
            .name(format!("wbc-flush-{device_id:x}"))
            .spawn(move || super::flusher::run(for_thread))
            .expect("spawn flusher thread");
        *locks::lock(&domain.flusher) = Some(handle);
        domain
    }

    /// Stops the flusher (after the caller wrote everything back) and drops
    /// the dirty list, breaking the domain ↔ inode reference cycle.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::Release);
        {
            let _g = locks::lock(&self.work_lock);
            self.work_cond.notify_all();
        }
        if let Some(h) = locks::lock(&self.flusher).take() {
            let _ = h.join();
        }
        locks::lock(&self.dirty_inodes).clear();
    }

    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Sets a work bit and wakes the flusher, unless the bit is already set.
    pub fn kick(&self, bit: u32) {
        if self.work_bits.load(Ordering::Acquire) & bit != 0 {
            return;
        }
        if self.work_bits.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return;
        }
        let _g = locks::lock(&self.work_lock);
        self.work_cond.notify_one();
    }

    /// Flusher side: waits up to `interval` for work; returns and clears the
    /// bits (0 on a timeout: time for periodic writeback).
    pub fn wait_work(&self, interval: Duration) -> u32 {
        let g = locks::lock(&self.work_lock);
        if self.work_bits.load(Ordering::Acquire) == 0 && !self.is_shutdown() {
            drop(locks::wait_timeout(&self.work_cond, g, interval));
        }
        self.work_bits.swap(0, Ordering::AcqRel)
    }

    /// Flusher side, while it has writes in flight: takes and clears the
    /// bits without waiting.
    pub fn take_work(&self) -> u32 {
        self.work_bits.swap(0, Ordering::AcqRel)
    }

    /// Accounts newly dirtied bytes (`dontcache_bytes` of them by uncached
    /// writes). Called under the folio lock that set the dirty bits; the
    /// caller queues the inode with [`Domain::queue_dirty_inode`] after.
    pub fn account_dirty_bytes(&self, bytes: u64, dontcache_bytes: u64) {
        debug_assert!(dontcache_bytes <= bytes);
        if bytes == 0 {
            return;
        }
        let c = &self.shared.counters;
        self.shared.unclean_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.nr_dirty_bytes.fetch_add(bytes, Ordering::AcqRel);
        let total = c.dirty_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        c.peak_dirty_bytes.fetch_max(total, Ordering::Relaxed);
        if dontcache_bytes > 0 {
            self.dontcache_dirty_bytes.fetch_add(dontcache_bytes, Ordering::AcqRel);
            Counters::add(&c.dontcache_dirty_bytes, dontcache_bytes);
        }
    }

    /// Queues `inode` at the tail of the dirty list with `dirtied_when = now`
    /// unless it is queued already.
    pub fn queue_dirty_inode(&self, inode: &Arc<Inode>) {
        if inode.on_dirty_list.load(Ordering::Acquire) || inode.on_dirty_list.swap(true, Ordering::AcqRel) {
            return;
        }
        inode.dirtied_when_ns.store(inode.now_ns(), Ordering::Relaxed);
        locks::lock(&self.dirty_inodes).push_back(inode.clone());
    }

    /// Dirty blocks moved to writeback.
    pub fn account_writeback_started(&self, bytes: u64, dontcache_bytes: u64) {
        let c = &self.shared.counters;
        let before = self.nr_dirty_bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "domain dirty underflow");
        Counters::sub(&c.dirty_bytes, bytes);
        self.nr_writeback_bytes.fetch_add(bytes, Ordering::AcqRel);
        Counters::add(&c.writeback_bytes, bytes);
        if dontcache_bytes > 0 {
            self.dontcache_dirty_bytes.fetch_sub(dontcache_bytes, Ordering::AcqRel);
            Counters::sub(&c.dontcache_dirty_bytes, dontcache_bytes);
        }
    }

    /// Writeback of `done_bytes` ended, `written_bytes` of them successfully.
    pub fn account_writeback_done(&self, done_bytes: u64, written_bytes: u64, reason: Reason) {
        let c = &self.shared.counters;
        self.nr_writeback_bytes.fetch_sub(done_bytes, Ordering::AcqRel);
        Counters::sub(&c.writeback_bytes, done_bytes);
        Counters::add(&c.written_bytes_by_reason[reason as usize], written_bytes);
        // After any failed bytes were made dirty again (and counted there).
        let before = self.shared.unclean_bytes.fetch_sub(done_bytes, Ordering::AcqRel);
        debug_assert!(before >= done_bytes, "unclean underflow");
        self.shared.progress_made();
    }

    /// Dirty data discarded by truncation.
    pub fn account_discarded(&self, bytes: u64, dontcache_bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.account_writeback_started(bytes, dontcache_bytes);
        self.nr_writeback_bytes.fetch_sub(bytes, Ordering::AcqRel);
        Counters::sub(&self.shared.counters.writeback_bytes, bytes);
        self.shared.unclean_bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.shared.progress_made();
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

    /// The oldest inode on the dirty list, taken off it (its flag stays set
    /// until [`Domain::requeue`]).
    pub fn pop_oldest(&self) -> Option<Arc<Inode>> {
        locks::lock(&self.dirty_inodes).pop_front()
    }

    /// Takes every inode dirtied before `cutoff_ns` off the list.
    pub fn take_expired(&self, cutoff_ns: u64) -> Vec<Arc<Inode>> {
        let mut list = locks::lock(&self.dirty_inodes);
        let (expired, kept): (Vec<_>, Vec<_>) =
            list.drain(..).partition(|i| i.dirtied_when_ns.load(Ordering::Relaxed) <= cutoff_ns);
        list.extend(kept);
        expired
    }

    pub fn nr_dirty_inodes(&self) -> usize {
        locks::lock(&self.dirty_inodes).len()
    }

    /// Puts an inode taken by the flusher back: at the tail, keeping its
    /// dirtied time, if it still has dirty data; off the list otherwise.
    pub fn requeue(&self, inode: Arc<Inode>) {
        if inode.has_dirty() {
            locks::lock(&self.dirty_inodes).push_back(inode);
            return;
        }
        inode.on_dirty_list.store(false, Ordering::Release);
        // A writer may have dirtied it after the check and seen the flag set.
        if inode.has_dirty() {
            self.queue_dirty_inode(&inode);
        } else {
            // Not here: forgetting syncs the inode, which waits for its
            // writeback, and the flusher may hold passes of it in flight.
            self.shared.forget_inode_if_idle_later(&inode);
        }
    }
}
