//! A writeback domain (the kernel's `bdi_writeback`): the unit of dirty
//! accounting and flushing, one per backing device. It owns the dirty inode
//! list (oldest dirtied first) and its writeback workers (flusher threads); its byte gauges, its
//! bandwidth estimate and the coalesced work bits that wake the flusher are
//! its [`DomainDirty`] (in [`crate::dirty`], below the inode, which accounts
//! into it directly).
//!
//! Invariants: an inode is on `dirty_inodes` at most once, exactly while its
//! `on_dirty_list` flag is set.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::config::Config;
use crate::dirty::DomainDirty;
use crate::inode::{DirtyInodeList, Inode};
use crate::io::Io;
use crate::locks;

/// What the domain does with an inode the flusher found clean: the cache
/// decides whether to forget it (never on the flusher's thread).
pub type OnIdle = Box<dyn Fn(&Arc<Inode>) + Send + Sync>;

pub struct Domain {
    pub dirty: Arc<DomainDirty>,
    pub config: Arc<Config>,
    pub io: Arc<dyn Io>,
    dirty_inodes: Mutex<VecDeque<Arc<Inode>>>,
    on_idle: OnIdle,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Domain {
    /// A domain with `nr_workers` writeback workers running.
    ///
    /// Only one for now: the workers of a domain pop inodes from one dirty
    /// list, and two of them writing the same inode at once could each
    /// wait, to fix the store's length, for I/O only the other completes.
    /// Several workers need routing by inode or region first.
    pub fn start(
        device_id: u64,
        nr_workers: usize,
        dirty: Arc<DomainDirty>,
        config: Arc<Config>,
        io: Arc<dyn Io>,
        on_idle: OnIdle,
    ) -> std::io::Result<Arc<Domain>> {
        assert_eq!(nr_workers, 1, "one writeback worker per domain until routing exists");
        let domain = Arc::new(Domain {
            dirty,
            config,
            io,
            dirty_inodes: Mutex::new(VecDeque::new()),
            on_idle,
            workers: Mutex::new(Vec::new()),
        });
        for n in 0..nr_workers {
            let for_thread = domain.clone();
            // The first keeps the name it always had (`top`, `perf` users).
            let name = if n == 0 { format!("wbc-flush-{device_id:x}") } else { format!("wbc-flush-{device_id:x}-{n}") };
            // No thread to be had (RLIMIT_NPROC, memory): the open that
            // needed this domain fails with the spawn's error (EAGAIN).
            match std::thread::Builder::new().name(name.clone()).spawn(move || super::worker::run(for_thread)) {
                Ok(handle) => locks::lock(&domain.workers).push(handle),
                Err(e) => {
                    domain.stop();
                    // The kind carries the errno (EAGAIN) to the C ABI.
                    return Err(std::io::Error::new(e.kind(), format!("cannot start the flusher thread {name}: {e}")));
                }
            }
        }
        debug_assert_eq!(locks::lock(&domain.workers).len(), nr_workers);
        Ok(domain)
    }

    /// Stops the flusher (after the caller wrote everything back) and drops
    /// the dirty list, breaking the domain ↔ inode reference cycle.
    pub fn stop(&self) {
        self.dirty.shut_down();
        let workers: Vec<JoinHandle<()>> = locks::lock(&self.workers).drain(..).collect();
        for h in workers {
            let _ = h.join();
        }
        locks::lock(&self.dirty_inodes).clear();
        debug_assert!(self.is_shutdown() && locks::lock(&self.workers).is_empty(), "no worker outlives the domain");
    }

    pub fn is_shutdown(&self) -> bool {
        self.dirty.is_shutdown()
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
        debug_assert!(expired.iter().all(|i| i.on_dirty_list.load(Ordering::Acquire)), "a listed inode is flagged");
        expired
    }

    pub fn nr_dirty_inodes(&self) -> usize {
        locks::lock(&self.dirty_inodes).len()
    }

    /// Puts an inode taken by the flusher back: at the tail, keeping its
    /// dirtied time, if it still has dirty data; off the list otherwise.
    pub fn requeue(&self, inode: Arc<Inode>) {
        debug_assert!(inode.on_dirty_list.load(Ordering::Acquire), "a taken inode keeps its flag until requeued");
        debug_assert!(
            !locks::lock(&self.dirty_inodes).iter().any(|i| Arc::ptr_eq(i, &inode)),
            "a taken inode is off the list"
        );
        if inode.has_dirty() {
            locks::lock(&self.dirty_inodes).push_back(inode);
            return;
        }
        inode.on_dirty_list.store(false, Ordering::Release);
        // A writer may have dirtied it after the check and seen the flag set.
        if inode.has_dirty() {
            DirtyInodeList::queue_dirty_inode(self, &inode);
        } else {
            // Not here: forgetting syncs the inode, which waits for its
            // writeback, and the flusher may hold passes of it in flight.
            (self.on_idle)(&inode);
        }
    }
}

impl Domain {
    /// Takes a clean inode off the dirty list, where it stays after an
    /// fsync cleaned it until the flusher's next pass comes by: forgetting
    /// an idle inode needs it off. False if it has dirty data, is not
    /// listed, or the flusher holds it (taken, not yet requeued).
    pub fn unlist_clean(&self, inode: &Arc<Inode>) -> bool {
        {
            let mut list = locks::lock(&self.dirty_inodes);
            if inode.has_dirty() {
                return false;
            }
            let Some(pos) = list.iter().position(|i| Arc::ptr_eq(i, inode)) else { return false };
            list.remove(pos);
            inode.on_dirty_list.store(false, Ordering::Release);
        }
        // As in `requeue`: a writer may have dirtied it after the check and
        // seen the flag still set.
        if inode.has_dirty() {
            DirtyInodeList::queue_dirty_inode(self, inode);
            return false;
        }
        true
    }
}

impl DirtyInodeList for Domain {
    /// Queues `inode` at the tail of the dirty list with `dirtied_when =
    /// now` unless it is queued already.
    fn queue_dirty_inode(&self, inode: &Arc<Inode>) {
        if inode.on_dirty_list.load(Ordering::Acquire) || inode.on_dirty_list.swap(true, Ordering::AcqRel) {
            return;
        }
        inode.dirtied_when_ns.store(self.dirty.cache.now_ns(), Ordering::Relaxed);
        let mut list = locks::lock(&self.dirty_inodes);
        debug_assert!(!list.iter().any(|i| Arc::ptr_eq(i, inode)), "an unflagged inode is not listed");
        list.push_back(inode.clone());
    }
}
