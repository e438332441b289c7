//! A writeback domain (the kernel's `bdi_writeback`): the unit of dirty
//! accounting and flushing, one per backing device. It owns its writeback
//! workers (flusher threads, `writeback_workers` of them), one dirty inode
//! list per worker (oldest dirtied first) and the routing that says which
//! worker writes what ([`Route`]); its byte gauges, its bandwidth estimate
//! and the coalesced work bits that wake the workers are its
//! [`DomainDirty`] (in [`crate::policy::dirty`], below the inode, which accounts
//! into it directly). One domain, however many workers: the thresholds and
//! the throttle see the whole device.
//!
//! Invariants: an inode is on worker `w`'s list at most once, and bit `w`
//! of its `listed_workers` is set exactly while it is on that list or
//! taken off it by worker `w` (until [`Domain::requeue`]). A worker with
//! dirty data of an inode to write has it listed: writers queue it after
//! they dirty a block, and a worker that finds nothing of its own left
//! clears its bit and then looks again.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::base::locks;
use crate::config::{Config, Routing};
use crate::inode::{DirtyInodeList, Inode};
use crate::io::Io;
use crate::policy::dirty::DomainDirty;
use crate::policy::route::{workers_in, Route};

/// What the domain does with an inode the flusher found clean: the cache
/// decides whether to forget it (never on the flusher's thread).
pub type OnIdle = Box<dyn Fn(&Arc<Inode>) + Send + Sync>;

/// An inode on a worker's dirty list.
pub struct Listed {
    pub inode: Arc<Inode>,
    /// When it joined this list: the oldest data the worker has of it may
    /// be this old (ns since the cache epoch). Kept when requeued.
    pub dirtied_when_ns: u64,
}

pub struct Domain {
    pub dirty: Arc<DomainDirty>,
    pub config: Arc<Config>,
    pub io: Arc<dyn Io>,
    pub route: Route,
    /// One dirty list per worker.
    lists: Box<[Mutex<VecDeque<Listed>>]>,
    /// The next worker `rotor` routing binds an inode to.
    rotor: AtomicU32,
    on_idle: OnIdle,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A locked dirty list that tells the domain's accounting, as it is
/// unlocked, whether the list holds anything.
struct ListGuard<'a> {
    list: std::sync::MutexGuard<'a, VecDeque<Listed>>,
    dirty: &'a DomainDirty,
    worker: usize,
}

impl std::ops::Deref for ListGuard<'_> {
    type Target = VecDeque<Listed>;
    fn deref(&self) -> &Self::Target {
        &self.list
    }
}

impl std::ops::DerefMut for ListGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.list
    }
}

impl Drop for ListGuard<'_> {
    fn drop(&mut self) {
        self.dirty.set_worker_listed(self.worker, !self.list.is_empty());
    }
}

impl Domain {
    /// A domain without workers yet: [`crate::writeback::worker::start_domain`]
    /// starts them (the worker layer sits above this one).
    pub fn new(dirty: Arc<DomainDirty>, config: Arc<Config>, io: Arc<dyn Io>, on_idle: OnIdle) -> Arc<Domain> {
        let route = Route::new(&config);
        let nr_workers = route.nr_workers;
        Arc::new(Domain {
            dirty,
            config,
            io,
            route,
            lists: (0..nr_workers).map(|_| Mutex::new(VecDeque::new())).collect(),
            rotor: AtomicU32::new(0),
            on_idle,
            workers: Mutex::new(Vec::new()),
        })
    }

    /// Records a started worker thread, joined by [`Domain::stop`].
    pub fn add_worker(&self, handle: JoinHandle<()>) {
        let mut workers = locks::lock(&self.workers);
        workers.push(handle);
        debug_assert!(workers.len() <= self.route.nr_workers, "one thread per routed worker");
    }

    /// How many worker threads run.
    pub fn nr_started_workers(&self) -> usize {
        locks::lock(&self.workers).len()
    }

    /// Stops the workers (after the caller wrote everything back) and
    /// drops the dirty lists, breaking the domain ↔ inode reference cycle.
    pub fn stop(&self) {
        self.dirty.shut_down();
        let workers: Vec<JoinHandle<()>> = locks::lock(&self.workers).drain(..).collect();
        for h in workers {
            let _ = h.join();
        }
        for worker in 0..self.lists.len() {
            self.list(worker).clear();
        }
        debug_assert!(self.is_shutdown() && locks::lock(&self.workers).is_empty(), "no worker outlives the domain");
    }

    pub fn is_shutdown(&self) -> bool {
        self.dirty.is_shutdown()
    }

    /// Worker `worker`'s list, locked; whether it is empty is published
    /// to [`DomainDirty`] when the guard drops (kicks go only to workers
    /// with inodes listed).
    fn list(&self, worker: usize) -> ListGuard<'_> {
        ListGuard { list: locks::lock(&self.lists[worker]), dirty: &self.dirty, worker }
    }

    /// The oldest inode on `worker`'s list, taken off it (its bit stays
    /// set until [`Domain::requeue`]).
    pub fn pop_oldest(&self, worker: usize) -> Option<Listed> {
        self.list(worker).pop_front()
    }

    /// Takes every inode that joined `worker`'s list at or before
    /// `cutoff_ns` off it; also says whether one that stays joined it at
    /// or before `waiting_before_ns` (expired data a busy device left
    /// waiting, `writeback::policy::PeriodicCutoff::Busy`).
    pub fn take_expired(&self, worker: usize, cutoff_ns: u64, waiting_before_ns: Option<u64>) -> (Vec<Listed>, bool) {
        let mut list = self.list(worker);
        let (expired, kept): (Vec<_>, Vec<_>) = list.drain(..).partition(|l| l.dirtied_when_ns <= cutoff_ns);
        let waiting = waiting_before_ns.is_some_and(|before| kept.iter().any(|l| l.dirtied_when_ns <= before));
        list.extend(kept);
        debug_assert!(
            expired.iter().all(|l| l.inode.listed_workers() & (1 << worker) != 0),
            "a listed inode is flagged"
        );
        (expired, waiting)
    }

    pub fn nr_dirty_inodes(&self, worker: usize) -> usize {
        self.list(worker).len()
    }

    /// How many workers have inodes on their lists.
    pub fn nr_workers_with_dirty_inodes(&self) -> usize {
        (0..self.lists.len()).filter(|&w| !self.list(w).is_empty()).count()
    }

    /// Whether `inode` holds dirty data that `worker` writes.
    pub fn has_dirty_for(&self, inode: &Inode, worker: usize) -> bool {
        match self.route.routing {
            Routing::Single | Routing::Rotor => inode.has_dirty(),
            Routing::Region => inode.has_dirty_region_of(&self.route, worker),
        }
    }

    /// The worker `rotor` routing binds `inode` to, binding it now if it
    /// has none (round-robin).
    fn rotor_worker(&self, inode: &Inode) -> usize {
        if let Some(bound) = inode.rotor_worker() {
            return bound;
        }
        let next = self.rotor.fetch_add(1, Ordering::Relaxed) as usize % self.route.nr_workers;
        let worker = inode.bind_rotor_worker(next);
        debug_assert!(worker < self.route.nr_workers);
        worker
    }

    /// The workers (a bit mask) to queue `inode` with: the one writing
    /// block `at`, or, for `None`, every one with dirty data of it (worker
    /// 0 when none has: a store sync may still be owed).
    fn workers_for(&self, inode: &Inode, at: Option<u64>) -> u64 {
        match (self.route.routing, at) {
            (Routing::Single, _) => 1,
            (Routing::Rotor, _) => 1 << self.rotor_worker(inode),
            (Routing::Region, Some(block)) => {
                1 << self.route.worker_of_region(inode.id(), self.route.region_of_block(block))
            }
            (Routing::Region, None) => {
                let mask = inode.dirty_workers(&self.route);
                if mask == 0 {
                    1
                } else {
                    mask
                }
            }
        }
    }

    /// Queues `inode` at the tail of `worker`'s list, dirtied now, unless
    /// it is listed there already.
    fn queue_on(&self, inode: &Arc<Inode>, worker: usize) {
        if !inode.mark_listed(worker) {
            return;
        }
        let listed = Listed { inode: inode.clone(), dirtied_when_ns: self.dirty.cache.now_ns() };
        let mut list = self.list(worker);
        debug_assert!(!list.iter().any(|l| Arc::ptr_eq(&l.inode, inode)), "an unflagged inode is not listed");
        list.push_back(listed);
    }

    /// Puts an inode `worker` took back: at the tail of its list, keeping
    /// its dirtied time, if it still has dirty data for that worker; off
    /// the list otherwise.
    pub fn requeue(&self, worker: usize, listed: Listed) {
        let bit = 1u64 << worker;
        let inode = listed.inode;
        debug_assert!(inode.listed_workers() & bit != 0, "a taken inode keeps its bit until requeued");
        debug_assert!(
            !self.list(worker).iter().any(|l| Arc::ptr_eq(&l.inode, &inode)),
            "a taken inode is off the list"
        );
        if self.has_dirty_for(&inode, worker) {
            self.list(worker).push_back(Listed { inode, dirtied_when_ns: listed.dirtied_when_ns });
            return;
        }
        let others = inode.mark_unlisted(worker);
        // A writer may have dirtied it after the check and seen the bit set.
        if self.has_dirty_for(&inode, worker) {
            self.queue_on(&inode, worker);
        } else if others == 0 && !inode.is_listed() && !inode.has_dirty() {
            // Not here: forgetting syncs the inode, which waits for its
            // writeback, and the worker may hold passes of it in flight.
            (self.on_idle)(&inode);
        }
    }
}

impl Domain {
    /// Takes a clean inode off every dirty list, where it stays after an
    /// fsync cleaned it until the workers' next passes come by: forgetting
    /// an idle inode needs it off. False if it has dirty data, is not
    /// listed, or a worker holds it (taken, not yet requeued).
    pub fn unlist_clean(&self, inode: &Arc<Inode>) -> bool {
        let listed = inode.listed_workers();
        if listed == 0 || inode.has_dirty() {
            return false;
        }
        let mut unlisted = 0u64;
        for worker in workers_in(listed) {
            let mut list = self.list(worker);
            if inode.has_dirty() {
                break;
            }
            let Some(pos) = list.iter().position(|l| Arc::ptr_eq(&l.inode, inode)) else { continue };
            list.remove(pos);
            inode.mark_unlisted(worker);
            unlisted |= 1 << worker;
        }
        // As in `requeue`: a writer may have dirtied it after the check and
        // seen a bit still set.
        if inode.has_dirty() {
            DirtyInodeList::queue_dirty_inode(self, inode, None);
            return false;
        }
        unlisted == listed && !inode.is_listed()
    }
}

impl DirtyInodeList for Domain {
    /// Queues `inode` with the workers [`Domain::workers_for`] names,
    /// where it is not listed yet. A write into dirty data of an inode
    /// already listed costs one load.
    fn queue_dirty_inode(&self, inode: &Arc<Inode>, at: Option<u64>) -> u64 {
        let mask = self.workers_for(inode, at);
        let missing = mask & !inode.listed_workers();
        for worker in workers_in(missing) {
            self.queue_on(inode, worker);
        }
        mask
    }
}
