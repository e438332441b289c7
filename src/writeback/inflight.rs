//! The flusher's writeback passes in flight. A pass's I/Os go to the
//! flusher's [`WriteQueue`] and the flusher goes on collecting the next pass
//! (of the same inode or another) while the device writes, so the device
//! queue does not drain between passes and many small inodes' passes overlap
//! instead of running one at a time.
//!
//! Two classes of I/O: *sync*, which an fsync / fdatasync waits for, and
//! *async* (background, periodic, uncached kick, reclaim). Collected I/O is
//! held here until [`policy::may_submit_async`] lets it into the queue:
//! sync I/O first, then async up to the queue's depth, or, while a sync
//! waiter exists on the domain, only up to `async_depth_while_sync` async
//! I/Os in the queue. An fsync that arrives for an inode whose I/O is held
//! here *promotes* it: it moves to the sync class (and carries the sync
//! `ioprio`) and is submitted ahead of the rest, written once. I/O already
//! in the queue is waited for, not rewritten. While sync callers are
//! recent the async bytes in the queue are capped ([`policy::sync_recency`]),
//! within 100 ms of one scaled with the background I/O size
//! ([`policy::async_queue_bytes_while_sync`]). With
//! `background_ioprio=idle`, async I/O that nothing waits for goes in the
//! idle class, at most [`policy::IDLE_IOS_MAX`] in the queue, the rest held
//! until one completes or has waited [`policy::IDLE_WAIT_MAX`]
//! ([`policy::background_class`]).
//!
//! Invariants:
//! - A pass is completed ([`Inode::finish_pass`]) exactly once, after every
//!   one of its I/Os completed, and only then gives back the store's I/O
//!   gate it took before its first I/O was queued.
//! - A pass fixes the store's length only when it is its inode's last pass
//!   in flight here, and only if that needs no waiting
//!   ([`SizeFix::Try`]): the fix waits for all of the inode's I/O, and a
//!   worker must never wait for I/O that only it, or another worker
//!   waiting likewise, can complete.
//! - Every I/O of a pass in flight is either held (`held_sync`,
//!   `held_async`) or in the queue (`in_queue` counts those, `async_in_queue`
//!   the async ones); the queue never holds more than its depth, so nothing
//!   waits inside the backend where it could not be promoted. Whenever a
//!   pass is in flight, at least one of its I/Os is in the queue after
//!   [`InFlight::submit_held`], so waiting for a completion always ends.
//! - Collected I/O is bounded ([`InFlight::new`]): `start` reaps completions
//!   before it returns while more is collected than that.
//!
//! Owned by one writeback worker's thread (the queue cannot move between
//! threads); each worker has its own, so its own submission queue.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::config::BackgroundIoprio;
use crate::inode::Inode;
use crate::inode::{PassScope, PassSize, SizeFix, WbPass};
use crate::io::queue::{Completion, QueuedWrite, Reap, WriteQueue};
use crate::io::IoPriority;
use crate::stats::{Counters, DeviceClass, InFlightIo, IoClass, Reason, WorkerCounters};
use crate::writeback::domain::Domain;
use crate::writeback::policy;

/// I/O tags are `pass id << TAG_SHIFT | I/O index within the pass`.
const TAG_SHIFT: u32 = 32;

fn class_of(priority: IoPriority) -> IoClass {
    match priority {
        IoPriority::Sync => IoClass::Sync,
        IoPriority::Async | IoPriority::Idle => IoClass::Async,
    }
}

struct Pending {
    inode: Arc<Inode>,
    pass: WbPass,
    results: Vec<Option<io::Result<usize>>>,
    /// The class each I/O went to the queue in (`None` while held), and
    /// its length.
    classes: Vec<Option<(IoClass, u64)>>,
    /// Each I/O in the queue in the device account, until it completes.
    device_ios: Vec<Option<InFlightIo>>,
    remaining: usize,
}

pub struct InFlight {
    domain: Arc<Domain>,
    /// The worker this belongs to, and its counters.
    worker: usize,
    stats: Arc<WorkerCounters>,
    queue: Box<dyn WriteQueue>,
    passes: HashMap<u64, Pending>,
    /// Passes in flight per inode id.
    passes_per_inode: HashMap<u64, usize>,
    next_pass_id: u64,
    /// I/Os and bytes collected and not completed (held or in the queue).
    ios_queued: usize,
    bytes_queued: u64,
    ios_queued_max: usize,
    bytes_queued_max: u64,
    /// Collected I/O not yet in the queue: sync (promoted) first, then
    /// async with its inode's id, each in collection order.
    held_sync: VecDeque<QueuedWrite>,
    held_async: VecDeque<(u64, QueuedWrite)>,
    /// I/Os in the queue, and the async ones among them.
    in_queue: usize,
    async_in_queue: usize,
    /// Bytes of the async I/Os in the queue.
    async_bytes_in_queue: u64,
    queue_ios_max: usize,
    /// The sync waiters' inodes as last looked up, and the generation of
    /// the domain's waiter list they belong to.
    sync_inodes: Vec<u64>,
    sync_generation_seen: u64,
    /// When a sync waiter last came or went (see
    /// [`policy::ASYNC_QUEUE_BYTES_WHILE_SYNC`]).
    sync_seen_at: Option<Instant>,
    /// The last two gaps between those events (see
    /// [`policy::sync_recent_window`]).
    sync_gaps: [std::time::Duration; 2],
    /// The idle-class I/Os in the queue (`background_ioprio=idle`): their
    /// tags and when each went in; and when one was last found waiting
    /// [`policy::IDLE_WAIT_MAX`].
    idle_in_queue: Vec<(u64, Instant)>,
    idle_stuck_at: Option<Instant>,
    /// Set when a pass completed with failed writes; cleared by
    /// [`InFlight::clear_failed`].
    failed: bool,
    /// Since when passes are in flight here without a break (counted into
    /// the worker's busy time at every completion).
    busy_since: Option<Instant>,
}

impl InFlight {
    /// Keeps at most about `ios_queued_max` I/Os and `bytes_queued_max`
    /// bytes collected (a pass is collected whole, so one pass may exceed
    /// them), and at most `queue_ios_max` of them in the queue.
    pub fn new(
        domain: Arc<Domain>,
        worker: usize,
        stats: Arc<WorkerCounters>,
        queue: Box<dyn WriteQueue>,
        ios_queued_max: usize,
        bytes_queued_max: u64,
        queue_ios_max: usize,
    ) -> InFlight {
        InFlight {
            domain,
            worker,
            stats,
            queue,
            passes: HashMap::new(),
            passes_per_inode: HashMap::new(),
            next_pass_id: 0,
            ios_queued: 0,
            bytes_queued: 0,
            ios_queued_max: ios_queued_max.max(1),
            bytes_queued_max: bytes_queued_max.max(1),
            held_sync: VecDeque::new(),
            held_async: VecDeque::new(),
            in_queue: 0,
            async_in_queue: 0,
            async_bytes_in_queue: 0,
            queue_ios_max: queue_ios_max.max(1),
            sync_inodes: Vec::new(),
            sync_generation_seen: 0,
            sync_seen_at: None,
            sync_gaps: [std::time::Duration::ZERO; 2],
            idle_in_queue: Vec::new(),
            idle_stuck_at: None,
            failed: false,
            busy_since: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.passes.is_empty()
    }

    /// Whether a pass completed with failed writes since the last
    /// [`InFlight::clear_failed`]: the flusher backs off instead of
    /// retrying at once (the data is dirty again, and would otherwise cycle
    /// between dirty and writeback without ever throttling its writers).
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn clear_failed(&mut self) {
        self.failed = false;
    }

    /// Starts a pass of up to `size` on `inode` and returns the dirty bytes it took (0: nothing was dirty;
    /// clean blocks it bridges are not counted). Its I/O is sync when an
    /// fsync waits for the inode now. Before returning, completes what
    /// finished and waits while more is collected than the bounds.
    pub fn start(&mut self, inode: &Arc<Inode>, reason: Reason, size: PassSize) -> u64 {
        if !inode.try_begin_async_io() {
            // A length change waits for the inode's I/O, some of which may
            // be ours: complete everything, then wait our turn.
            self.drain();
            inode.begin_async_io_wait();
        }
        let scope = PassScope::Worker { route: &self.domain.route, worker: self.worker };
        let Some(pass) = inode.begin_pass(reason, size, scope) else {
            inode.end_async_io();
            return 0;
        };
        Counters::add(&self.stats.passes, 1);
        let id = self.next_pass_id;
        self.next_pass_id += 1;
        debug_assert!(!self.passes.contains_key(&id) && id < 1 << (64 - TAG_SHIFT), "pass id {id} is free");
        self.look_at_sync_waiters();
        let wanted_by_sync = self.sync_inodes.contains(&inode.id());
        let priority = if wanted_by_sync { IoPriority::Sync } else { IoPriority::Async };
        let writes = inode.pass_writes(&pass, priority, id << TAG_SHIFT);
        assert!((writes.len() as u64) < 1 << TAG_SHIFT, "a pass's I/O numbers fit below its id in the tag");
        if wanted_by_sync {
            Counters::add(&self.domain.dirty.cache.counters.promoted_bytes, pass.bytes());
        }
        let dirty_bytes = pass.dirty_bytes();
        self.ios_queued += writes.len();
        self.bytes_queued += pass.bytes();
        *self.passes_per_inode.entry(inode.id()).or_insert(0) += 1;
        let n = writes.len();
        self.passes.insert(
            id,
            Pending {
                inode: inode.clone(),
                pass,
                results: (0..n).map(|_| None).collect(),
                classes: vec![None; n],
                device_ios: (0..n).map(|_| None).collect(),
                remaining: n,
            },
        );
        if self.busy_since.is_none() {
            self.busy_since = Some(Instant::now());
            self.domain.dirty.writeback_busy();
        }
        for w in writes {
            if wanted_by_sync {
                self.held_sync.push_back(w);
            } else {
                self.held_async.push_back((inode.id(), w));
            }
        }
        self.submit_held();
        let done = self.queue.reap(Reap::Poll);
        self.complete(done);
        while self.ios_queued > self.ios_queued_max || self.bytes_queued > self.bytes_queued_max {
            self.reap_some();
        }
        debug_assert!(self.ios_queued <= self.ios_queued_max && self.bytes_queued <= self.bytes_queued_max);
        dirty_bytes
    }

    /// Submits held I/O and waits for at least one I/O to complete, and
    /// completes what finished.
    pub fn reap_some(&mut self) {
        self.submit_held();
        debug_assert!(self.passes.is_empty() || self.in_queue > 0, "a pass in flight has I/O in the queue");
        let done = match self.idle_wait_left() {
            Some(left) => self.queue.reap_within(left),
            None => self.queue.reap(Reap::Wait),
        };
        self.complete(done);
    }

    /// While held background I/O waits for idle-class I/O in the queue
    /// ([`policy::BackgroundClass::Wait`]), how long until the oldest of
    /// those has waited [`policy::IDLE_WAIT_MAX`]: the worker looks again
    /// then, and sends what it holds best effort if it is still there.
    fn idle_wait_left(&self) -> Option<std::time::Duration> {
        let oldest = self.idle_in_queue.iter().map(|(_, at)| *at).min()?;
        let backing_off = self.idle_stuck_at.is_some_and(|at| at.elapsed() < policy::IDLE_BACKOFF);
        if self.held_async.is_empty() || backing_off {
            return None;
        }
        let left = policy::IDLE_WAIT_MAX.saturating_sub(oldest.elapsed());
        Some(left.max(std::time::Duration::from_millis(1)))
    }

    /// Completes every pass in flight.
    pub fn drain(&mut self) {
        while !self.passes.is_empty() {
            self.reap_some();
        }
        debug_assert!(
            self.passes_per_inode.is_empty() && self.ios_queued == 0 && self.bytes_queued == 0,
            "nothing is in flight after a drain"
        );
        debug_assert!(self.held_sync.is_empty() && self.held_async.is_empty() && self.in_queue == 0);
    }

    /// Looks up the domain's sync waiters when they changed, and promotes
    /// the held async I/O of the inodes they wait for.
    fn look_at_sync_waiters(&mut self) {
        let dirty = &self.domain.dirty;
        if dirty.sync_waiters_generation() == self.sync_generation_seen {
            return;
        }
        let now = Instant::now();
        if let Some(before) = self.sync_seen_at.replace(now) {
            self.sync_gaps = [self.sync_gaps[1], now.duration_since(before)];
        }
        (self.sync_generation_seen, self.sync_inodes) = dirty.sync_waiter_inodes();
        if self.sync_inodes.is_empty() || self.held_async.is_empty() {
            return;
        }
        let mut promoted_bytes = 0u64;
        let mut kept = VecDeque::with_capacity(self.held_async.len());
        for (inode_id, mut w) in self.held_async.drain(..) {
            if self.sync_inodes.contains(&inode_id) {
                debug_assert_eq!(w.priority, IoPriority::Async, "held async I/O is promoted once");
                w.priority = IoPriority::Sync;
                promoted_bytes += w.len() as u64;
                self.held_sync.push_back(w);
            } else {
                kept.push_back((inode_id, w));
            }
        }
        self.held_async = kept;
        Counters::add(&dirty.cache.counters.promoted_bytes, promoted_bytes);
    }

    /// Hands held I/O to the queue: sync first, then async as
    /// [`policy::may_submit_async`] allows.
    fn submit_held(&mut self) {
        self.look_at_sync_waiters();
        let (in_queue_before, async_before) = (self.in_queue, self.async_in_queue);
        while self.in_queue < self.queue_ios_max {
            let Some(w) = self.held_sync.pop_front() else { break };
            self.push_to_queue(w);
        }
        let domain = self.domain.clone();
        let waiters = domain.dirty.has_sync_waiters();
        let cap = domain.config.async_depth_while_sync;
        let since_sync = self.sync_seen_at.map(|at| at.elapsed());
        let bytes_max = match policy::sync_recency(waiters, since_sync, self.sync_gaps) {
            policy::SyncRecency::Now => self.async_queue_bytes_while_sync(),
            policy::SyncRecency::Recent => policy::ASYNC_QUEUE_BYTES_WHILE_SYNC,
            policy::SyncRecency::Long => u64::MAX,
        };
        while let Some(next_len) = self.held_async.front().map(|(_, w)| w.len() as u64) {
            let queue = policy::AsyncQueue {
                ios: self.async_in_queue,
                bytes: self.async_bytes_in_queue,
                all_ios: self.in_queue,
                ios_max: self.queue_ios_max,
            };
            if !policy::may_submit_async(&queue, next_len, waiters, cap, bytes_max) {
                break;
            }
            let Some((inode_id, mut w)) = self.held_async.pop_front() else { break };
            match self.background_class(w.tag) {
                policy::BackgroundClass::BestEffort => {}
                policy::BackgroundClass::Idle => self.note_idle(&mut w),
                policy::BackgroundClass::Wait => {
                    debug_assert!(!self.idle_in_queue.is_empty(), "it waits for idle I/O in the queue");
                    self.held_async.push_front((inode_id, w));
                    break;
                }
            }
            self.push_to_queue(w);
            if waiters {
                // What a waiter sees added: I/O submitted before it came
                // is not cut short, and from then on none goes past the cap.
                let counters = &domain.dirty.cache.counters;
                counters.async_ios_in_flight_max_while_sync.fetch_max(self.async_in_queue as u64, Ordering::Relaxed);
                debug_assert!(self.async_in_queue <= cap as usize, "async I/O submitted past the cap");
            }
        }
        debug_assert!(self.in_queue >= in_queue_before && self.async_in_queue >= async_before, "nothing leaves here");
        debug_assert!(self.in_queue <= self.queue_ios_max.max(in_queue_before), "the queue holds its depth at most");
        debug_assert!(
            self.in_queue > 0 || (self.held_sync.is_empty() && self.held_async.is_empty()),
            "held I/O always has a way into an empty queue"
        );
    }

    /// [`policy::async_queue_bytes_while_sync`] at the domain's budget now,
    /// also shown in the stats.
    fn async_queue_bytes_while_sync(&self) -> u64 {
        let dirty = &self.domain.dirty;
        let budget_io_bytes = dirty.background_budget.io_bytes_max();
        let bytes = policy::async_queue_bytes_while_sync(budget_io_bytes, self.domain.config.io_max_bytes);
        dirty.cache.counters.background_queue_bytes_while_sync.store(bytes, Ordering::Relaxed);
        bytes
    }

    /// The class the async I/O tagged `tag` goes to the device in
    /// ([`policy::background_class`]).
    fn background_class(&mut self, tag: u64) -> policy::BackgroundClass {
        let config = &self.domain.config;
        if config.background_ioprio != BackgroundIoprio::Idle {
            return policy::BackgroundClass::BestEffort;
        }
        let reason = self.passes.get(&(tag >> TAG_SHIFT)).expect("held I/O belongs to a pass in flight").pass.reason();
        let now = Instant::now();
        let oldest_idle_wait = self.idle_in_queue.iter().map(|(_, at)| now.duration_since(*at)).max();
        let oldest_idle_wait = oldest_idle_wait.unwrap_or_default();
        if oldest_idle_wait >= policy::IDLE_WAIT_MAX {
            let counters = &self.domain.dirty.cache.counters;
            if self.idle_stuck_at.is_none_or(|at| now.duration_since(at) >= policy::IDLE_BACKOFF) {
                Counters::add(&counters.idle_class_waits_over, 1);
            }
            self.idle_stuck_at = Some(now);
        }
        let dirty = &self.domain.dirty;
        policy::background_class(&policy::IdleClassInput {
            configured: true,
            reason,
            has_sync_waiters: dirty.has_sync_waiters(),
            has_dirty_waiters: dirty.cache.has_dirty_waiters(),
            idle_in_queue: self.idle_in_queue.len(),
            oldest_idle_wait,
            since_idle_stuck: self.idle_stuck_at.map(|at| now.duration_since(at)),
        })
    }

    /// `w` goes to the device in the idle class.
    fn note_idle(&mut self, w: &mut QueuedWrite) {
        debug_assert_eq!(w.priority, IoPriority::Async, "only async I/O goes idle");
        w.priority = IoPriority::Idle;
        self.idle_in_queue.push((w.tag, Instant::now()));
        Counters::add(&self.domain.dirty.cache.counters.idle_class_ios, 1);
        assert!(self.idle_in_queue.len() <= policy::IDLE_IOS_MAX, "idle-class I/O is bounded");
    }

    fn push_to_queue(&mut self, w: QueuedWrite) {
        let (id, index) = (w.tag >> TAG_SHIFT, (w.tag & ((1 << TAG_SHIFT) - 1)) as usize);
        let class = class_of(w.priority);
        let len = w.len() as u64;
        let p = self.passes.get_mut(&id).expect("held I/O belongs to a pass in flight");
        assert!(p.classes[index].replace((class, len)).is_none(), "an I/O goes to the queue once");
        let device_class = match class {
            IoClass::Sync => DeviceClass::SyncWrite,
            IoClass::Async => DeviceClass::BackgroundWrite,
        };
        let io = self.domain.dirty.cache.counters.device.begin(device_class, len);
        debug_assert!(p.device_ios[index].is_none(), "counted once");
        p.device_ios[index] = Some(io);
        self.in_queue += 1;
        if class == IoClass::Async {
            self.async_in_queue += 1;
            self.async_bytes_in_queue += len;
        }
        self.queue.push(w);
    }

    /// Accounts for the I/O tagged `tag` (of `class` and `len` bytes,
    /// counted in the device account as `io`) leaving the queue.
    fn left_queue(&mut self, tag: u64, class: IoClass, len: u64, io: InFlightIo) {
        self.domain.dirty.cache.counters.device.end(io);
        if let Some(at) = self.idle_in_queue.iter().position(|(t, _)| *t == tag) {
            self.idle_in_queue.swap_remove(at);
        }
        self.in_queue -= 1;
        self.ios_queued -= 1;
        if class == IoClass::Async {
            self.async_in_queue -= 1;
            self.async_bytes_in_queue -= len;
        }
    }

    fn complete(&mut self, done: Vec<Completion>) {
        if done.is_empty() {
            return;
        }
        // What the store accepted (the domain's bandwidth sample), and what
        // of the cache's blocks this worker wrote (its share of
        // `written_bytes_total`).
        let mut completed_bytes = 0u64;
        let mut written_bytes = 0u64;
        Counters::add(&self.stats.ios, done.len() as u64);
        for c in done {
            let id = c.tag >> TAG_SHIFT;
            let index = (c.tag & ((1 << TAG_SHIFT) - 1)) as usize;
            let p = self.passes.get_mut(&id).expect("a completion belongs to a pass in flight");
            assert!(p.results[index].is_none(), "an I/O completes once");
            let (class, len) = p.classes[index].expect("a completed I/O went to the queue");
            let io = p.device_ios[index].take().expect("a queued I/O is in the device account");
            if let Ok(n) = &c.result {
                // The queues loop short writes: a write completes whole or
                // fails.
                assert_eq!(*n as u64, len, "I/O {index} of pass {id} completed whole");
                completed_bytes += *n as u64;
                written_bytes += p.pass.io_bytes(index);
            }
            p.results[index] = Some(c.result);
            p.remaining -= 1;
            let pass_done = p.remaining == 0;
            self.left_queue(c.tag, class, len, io);
            if !pass_done {
                continue;
            }
            let Pending { inode, mut pass, results, classes, .. } = self.passes.remove(&id).expect("just found");
            self.bytes_queued -= pass.bytes();
            let results = results.into_iter().zip(classes);
            pass.set_results(results.map(|(r, c)| (r.expect("every I/O completed"), c.expect("queued").0)).collect());
            inode.note_store_written(&pass);
            inode.end_async_io();
            let left = self.passes_per_inode.get_mut(&inode.id()).expect("counted at start");
            *left -= 1;
            let last = *left == 0;
            if last {
                self.passes_per_inode.remove(&inode.id());
            }
            let outcome = inode.finish_pass(pass, if last { SizeFix::Try } else { SizeFix::No });
            if outcome.failed_bytes > 0 {
                self.failed = true;
            }
        }
        debug_assert_eq!(self.passes.values().map(|p| p.remaining).sum::<usize>(), self.ios_queued, "queued I/Os");
        debug_assert_eq!(self.passes.values().map(|p| p.pass.bytes()).sum::<u64>(), self.bytes_queued, "queued bytes");
        debug_assert_eq!(self.passes_per_inode.values().sum::<usize>(), self.passes.len(), "passes per inode");
        assert_eq!(
            self.held_sync.len() + self.held_async.len() + self.in_queue,
            self.ios_queued,
            "every collected I/O is held or in the queue"
        );
        Counters::add(&self.stats.written_bytes, written_bytes);
        // The domain samples its bandwidth over every worker's completions;
        // this worker's busy time is what it spent with passes in flight.
        let idle = self.passes.is_empty();
        if let Some(since) = self.busy_since {
            let now = Instant::now();
            Counters::add(&self.stats.busy_us, now.duration_since(since).as_micros() as u64);
            self.busy_since = if idle { None } else { Some(now) };
            self.domain.dirty.writeback_completed(completed_bytes, idle);
        }
    }
}
