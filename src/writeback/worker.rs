//! A writeback worker: the flusher thread of a domain and its passes in
//! flight ([`InFlight`]). Each round it takes the coalesced work bits and
//! does, in order: `start_dontcache` (as many bytes as the domain's
//! uncached-dirty count, from the oldest dirty inodes, whatever wrote them),
//! periodic (inodes dirtied longer than `expire` ago, in full), and
//! background / reclaim (oldest inodes first while [`policy`] says so: dirty
//! memory over the background threshold, a writer waiting at the dirty
//! limit, or, once, starved eviction). `WORK_BACKGROUND` only wakes the
//! worker: the counters, not the bit, say how much to write, so a writer
//! that kicks and then waits is written for even when the background
//! threshold sits above what it needs. Every inode pass is bounded by
//! [`PassLimits`], so one big file cannot starve the others.
//!
//! Passes run asynchronously: while the device writes one, the worker
//! collects the next, and between rounds it waits for I/O completions
//! rather than for new work whenever writes are in flight. It completes
//! everything before it exits.
//!
//! Owns its `InFlight` (and with it its own submission queue); shares the
//! domain's dirty list and gauges with the domain's other workers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::dirty::{WORK_RECLAIM, WORK_START_DONTCACHE};
use crate::stats::{Counters, Reason};
use crate::writeback::domain::Domain;
use crate::writeback::inflight::InFlight;
use crate::writeback::policy::{self, BackgroundInput, PassLimits};

/// Runs one worker of `domain` until the domain shuts down.
pub fn run(domain: Arc<Domain>) {
    let config = &domain.config;
    let interval = policy::flusher_interval(config.expire_ms);
    let limits = PassLimits::new(config.io_max_bytes, config.io_depth);
    let mut inflight = InFlight::new(
        domain.clone(),
        domain.io.write_queue(),
        limits.queued_ios_max,
        limits.queued_bytes_max,
        policy::queue_ios_max(config.io_depth),
    );
    // Failures in a row, reset once writeback succeeds again.
    let mut consecutive_failures = 0u32;
    let mut written_at_failure = 0u64;
    while !domain.is_shutdown() {
        if inflight.failed() {
            // Failed writes are dirty again: let them sit for a while (the
            // writers meanwhile throttle on them, and fsync retries them).
            inflight.drain();
            let written = written_bytes_total(&domain);
            consecutive_failures = if written > written_at_failure { 1 } else { consecutive_failures + 1 };
            written_at_failure = written;
            sleep_unless_shutdown(&domain, policy::failure_backoff(consecutive_failures));
            inflight.clear_failed();
        }
        let bits = if inflight.is_empty() {
            domain.dirty.wait_work(interval)
        } else {
            inflight.reap_some();
            domain.dirty.take_work()
        };
        if domain.is_shutdown() {
            break;
        }
        if bits != 0 {
            Counters::add(&domain.dirty.cache.counters.flusher_wakeups, 1);
        }
        if bits & WORK_START_DONTCACHE != 0 {
            let target = domain.dirty.dontcache_dirty_bytes.load(Ordering::Acquire);
            if target > 0 {
                write_oldest(&domain, &mut inflight, Reason::Dontcache, target, &limits);
            }
        }
        write_expired(&domain, &mut inflight);
        write_background(&domain, &mut inflight, bits & WORK_RECLAIM != 0, &limits);
    }
    inflight.drain();
}

/// Bytes written back by the whole cache so far (successfully).
fn written_bytes_total(domain: &Domain) -> u64 {
    domain.dirty.cache.counters.written_bytes_by_reason.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}

/// Sleeps `duration`, in slices, so that closing the cache is not held up
/// by a long backoff.
fn sleep_unless_shutdown(domain: &Domain, duration: std::time::Duration) {
    let slice = std::time::Duration::from_millis(50);
    let deadline = std::time::Instant::now() + duration;
    while !domain.is_shutdown() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(slice));
    }
}

/// Periodic writeback: every inode dirtied longer than `expire` ago, each
/// in one pass of everything dirty now (it is queued whole).
fn write_expired(domain: &Arc<Domain>, inflight: &mut InFlight) {
    let cutoff_ns = policy::expired_before_ns(domain.dirty.cache.now_ns(), domain.config.expire_ms);
    for inode in domain.take_expired(cutoff_ns) {
        inflight.start(&inode, Reason::Periodic, u64::MAX, usize::MAX);
        domain.requeue(inode);
    }
}

/// Background and reclaim writeback, oldest inodes first, for as long as
/// [`policy::background_reason`] gives a reason and passes make progress.
fn write_background(domain: &Arc<Domain>, inflight: &mut InFlight, reclaim_kicked: bool, limits: &PassLimits) {
    while !domain.is_shutdown() {
        let cache = &domain.dirty.cache;
        let input = BackgroundInput {
            dirty_bytes: cache.dirty_bytes(),
            dirty_background_bytes: domain.config.dirty_background_bytes,
            has_dirty_waiters: cache.has_dirty_waiters(),
            reclaim_kicked,
        };
        let Some(reason) = policy::background_reason(&input) else { break };
        let Some(inode) = domain.pop_oldest() else { break };
        let started = inflight.start(&inode, reason, limits.pass_bytes, limits.pass_runs);
        domain.requeue(inode);
        if !policy::continue_background(reason, started, inflight.failed()) {
            break;
        }
    }
}

/// Writes up to `target_bytes` from the oldest dirty inodes, one pass of at
/// most the pass limits per inode; inodes that stay dirty go to the tail.
fn write_oldest(domain: &Arc<Domain>, inflight: &mut InFlight, reason: Reason, target_bytes: u64, limits: &PassLimits) {
    let mut written = 0u64;
    let mut passes = policy::targeted_passes_max(domain.nr_dirty_inodes());
    while written < target_bytes && passes > 0 && !domain.is_shutdown() {
        passes -= 1;
        let Some(inode) = domain.pop_oldest() else { break };
        let want = limits.pass_bytes.min(target_bytes - written);
        written += inflight.start(&inode, reason, want, limits.pass_runs);
        domain.requeue(inode);
        if inflight.failed() {
            break;
        }
    }
}
