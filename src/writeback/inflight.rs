//! The flusher's writeback passes in flight. A pass's I/Os go to the
//! flusher's [`WriteQueue`] and the flusher goes on collecting the next pass
//! (of the same inode or another) while the device writes, so the device
//! queue does not drain between passes and many small inodes' passes overlap
//! instead of running one at a time.
//!
//! Invariants:
//! - A pass is completed ([`Inode::finish_pass`]) exactly once, after every
//!   one of its I/Os completed, and only then gives back the store's I/O
//!   gate it took before its first I/O was queued.
//! - A pass fixes the store's length only when it is its inode's last pass
//!   in flight here: the fix waits for all of the inode's I/O, and the
//!   flusher must never wait for I/O that only it can complete.
//! - Queued I/O is bounded ([`InFlight::new`]): `start` reaps completions
//!   before it returns while more is queued than that.
//!
//! Owned by the flusher thread (the queue cannot move between threads).

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::inode::Inode;
use crate::io::queue::{Completion, WriteQueue};
use crate::io::IoPriority;
use crate::stats::Reason;
use crate::writeback::domain::Domain;
use crate::writeback::pass::WbPass;

/// How long a bandwidth sample spans at most.
const BANDWIDTH_SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// I/O tags are `pass id << TAG_SHIFT | I/O index within the pass`.
const TAG_SHIFT: u32 = 32;

struct Pending {
    inode: Arc<Inode>,
    pass: WbPass,
    results: Vec<Option<io::Result<usize>>>,
    remaining: usize,
}

pub struct InFlight {
    domain: Arc<Domain>,
    queue: Box<dyn WriteQueue>,
    passes: HashMap<u64, Pending>,
    /// Passes in flight per inode id.
    passes_per_inode: HashMap<u64, usize>,
    next_pass_id: u64,
    ios_queued: usize,
    bytes_queued: u64,
    ios_queued_max: usize,
    bytes_queued_max: u64,
    /// Set when a pass completed with failed writes; cleared by
    /// [`InFlight::clear_failed`].
    failed: bool,
    /// Bandwidth measurement: bytes written since `busy_since`, while the
    /// queue was never empty.
    busy_since: Option<Instant>,
    busy_bytes: u64,
}

impl InFlight {
    /// Keeps at most about `ios_queued_max` I/Os and `bytes_queued_max`
    /// bytes queued (a pass is queued whole, so one pass may exceed them).
    pub fn new(
        domain: Arc<Domain>,
        queue: Box<dyn WriteQueue>,
        ios_queued_max: usize,
        bytes_queued_max: u64,
    ) -> InFlight {
        InFlight {
            domain,
            queue,
            passes: HashMap::new(),
            passes_per_inode: HashMap::new(),
            next_pass_id: 0,
            ios_queued: 0,
            bytes_queued: 0,
            ios_queued_max: ios_queued_max.max(1),
            bytes_queued_max: bytes_queued_max.max(1),
            failed: false,
            busy_since: None,
            busy_bytes: 0,
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

    /// Starts a pass of up to `max_bytes` (and `max_chunks` runs) on
    /// `inode` and returns the dirty bytes it took (0: nothing was dirty;
    /// clean blocks it bridges are not counted). Before
    /// returning, completes what finished and waits while the queue is over
    /// its bounds.
    pub fn start(&mut self, inode: &Arc<Inode>, reason: Reason, max_bytes: u64, max_chunks: usize) -> u64 {
        if !inode.try_begin_async_io() {
            // A length change waits for the inode's I/O, some of which may
            // be ours: complete everything, then wait our turn.
            self.drain();
            inode.begin_async_io_wait();
        }
        let Some(pass) = inode.begin_pass(reason, max_bytes, max_chunks) else {
            inode.end_async_io();
            return 0;
        };
        let id = self.next_pass_id;
        self.next_pass_id += 1;
        debug_assert!(!self.passes.contains_key(&id) && id < 1 << (64 - TAG_SHIFT), "pass id {id} is free");
        let writes = inode.pass_writes(&pass, IoPriority::Async, id << TAG_SHIFT);
        let dirty_bytes = pass.dirty_bytes();
        self.ios_queued += writes.len();
        self.bytes_queued += pass.bytes();
        *self.passes_per_inode.entry(inode.id).or_insert(0) += 1;
        let n = writes.len();
        self.passes
            .insert(id, Pending { inode: inode.clone(), pass, results: (0..n).map(|_| None).collect(), remaining: n });
        if self.busy_since.is_none() {
            self.busy_since = Some(Instant::now());
        }
        for w in writes {
            self.queue.push(w);
        }
        let done = self.queue.reap(false);
        self.complete(done);
        while self.ios_queued > self.ios_queued_max || self.bytes_queued > self.bytes_queued_max {
            let done = self.queue.reap(true);
            self.complete(done);
        }
        debug_assert!(self.ios_queued <= self.ios_queued_max && self.bytes_queued <= self.bytes_queued_max);
        dirty_bytes
    }

    /// Waits for at least one I/O to complete and completes what finished.
    pub fn reap_some(&mut self) {
        let done = self.queue.reap(true);
        self.complete(done);
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
    }

    fn complete(&mut self, done: Vec<Completion>) {
        for c in done {
            let id = c.tag >> TAG_SHIFT;
            let index = (c.tag & ((1 << TAG_SHIFT) - 1)) as usize;
            let p = self.passes.get_mut(&id).expect("a completion belongs to a pass in flight");
            assert!(p.results[index].is_none(), "an I/O completes once");
            if let Ok(n) = &c.result {
                self.busy_bytes += *n as u64;
            }
            p.results[index] = Some(c.result);
            p.remaining -= 1;
            self.ios_queued -= 1;
            if p.remaining > 0 {
                continue;
            }
            let Pending { inode, mut pass, results, .. } = self.passes.remove(&id).expect("just found");
            self.bytes_queued -= pass.bytes();
            pass.set_results(results.into_iter().map(|r| r.expect("every I/O completed")).collect());
            inode.end_async_io();
            let left = self.passes_per_inode.get_mut(&inode.id).expect("counted at start");
            *left -= 1;
            let last = *left == 0;
            if last {
                self.passes_per_inode.remove(&inode.id);
            }
            let outcome = inode.finish_pass(pass, last);
            if outcome.failed_bytes > 0 {
                self.failed = true;
            }
        }
        debug_assert_eq!(self.passes.values().map(|p| p.remaining).sum::<usize>(), self.ios_queued, "queued I/Os");
        debug_assert_eq!(self.passes.values().map(|p| p.pass.bytes()).sum::<u64>(), self.bytes_queued, "queued bytes");
        debug_assert_eq!(self.passes_per_inode.values().sum::<usize>(), self.passes.len(), "passes per inode");
        // Bandwidth samples: bytes completed over a stretch of time in which
        // our writes were queued all along (the device's rate for us).
        if let Some(since) = self.busy_since {
            let elapsed = since.elapsed();
            let idle = self.passes.is_empty();
            if idle || elapsed >= BANDWIDTH_SAMPLE_PERIOD {
                self.domain.dirty.update_bandwidth(self.busy_bytes, elapsed);
                self.busy_bytes = 0;
                self.busy_since = if idle { None } else { Some(Instant::now()) };
            }
        }
    }
}
