//! The flusher: one thread per writeback domain. Each round it takes the
//! coalesced work bits and does, in order: `start_all` (everything),
//! `start_dontcache` (as many bytes as the domain's uncached-dirty count,
//! from the oldest dirty inodes, whatever wrote them), periodic (inodes
//! dirtied longer than `expire` ago, in full), and background / reclaim
//! (oldest inodes first while dirty memory is over the background threshold,
//! while any writer waits at the dirty limit, or once when eviction is
//! starved). `WORK_BACKGROUND` only wakes the flusher: the counters, not the
//! bit, say how much to write, so a writer that kicks and then waits is
//! written for even when the background threshold sits above what it needs. Every inode pass is bounded to
//! [`PASS_IOS`] `× io_max` bytes and [`PASS_RUNS_PER_DEPTH`] `× io_depth`
//! runs of dirty blocks, so one big file cannot starve the others.
//!
//! Passes run asynchronously ([`InFlight`]): while the device writes one,
//! the flusher collects the next, and between rounds it waits for I/O
//! completions rather than for new work whenever writes are in flight. It
//! completes everything before it exits.

use std::sync::Arc;
use std::time::Duration;

use crate::dirty::{WORK_RECLAIM, WORK_START_ALL, WORK_START_DONTCACHE};
use crate::stats::Counters;
use crate::stats::Reason;
use crate::writeback::domain::Domain;
use crate::writeback::inflight::InFlight;

/// An inode pass takes at most this many `io_max` I/Os' worth of dirty data
/// (8 MiB at the default `io_max`).
pub const PASS_IOS: u64 = 8;

/// The flusher keeps at most this many `io_max` I/Os' worth of bytes queued
/// (plus the pass that crossed it), and at most two rings' worth of I/Os.
/// On this project's virtio disk, streaming writeback was fastest with
/// 8 MiB queued: seq-write 1.5-1.9 GB/s at 8 MiB (passes of 8 MiB) against
/// 1.1-1.3 GB/s at 16 or 32 MiB, as large writes queued deeper only wait
/// longer; scattered 4 KiB writeback is bound by the I/O count instead.
pub const QUEUED_IOS: u64 = 8;

/// An inode pass takes at most this many runs of dirty blocks per unit of
/// `io_depth` (512 at the default depth of 128): scattered 4 KiB blocks make
/// small passes, so a pass completes, and frees its writers' dirty room,
/// soon after it started, while the next ones keep the device busy.
pub const PASS_RUNS_PER_DEPTH: usize = 4;

/// How long the flusher waits after failed writes before writing again.
const FAILURE_BACKOFF: Duration = Duration::from_millis(50);

pub fn run(domain: Arc<Domain>) {
    let config = &domain.config;
    let interval = Duration::from_millis((config.expire_ms / 4).clamp(5, 500));
    let chunk_bytes = config.io_max_bytes * PASS_IOS;
    let depth = config.io_depth as usize;
    let max_runs = PASS_RUNS_PER_DEPTH * depth;
    let queued_bytes_max = config.io_max_bytes * QUEUED_IOS;
    // Two rings' worth of I/Os queued: one in the device, one ready behind.
    let mut inflight = InFlight::new(domain.clone(), domain.io.write_queue(), 2 * depth, queued_bytes_max);
    while !domain.is_shutdown() {
        if inflight.failed() {
            // Failed writes are dirty again: let them sit for a while (the
            // writers meanwhile throttle on them, and fsync retries them).
            inflight.drain();
            std::thread::sleep(FAILURE_BACKOFF);
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
        if bits & WORK_START_ALL != 0 {
            write_oldest(&domain, &mut inflight, Reason::Background, u64::MAX, (chunk_bytes, max_runs));
        }
        if bits & WORK_START_DONTCACHE != 0 {
            let target = domain.dirty.dontcache_dirty_bytes.load(std::sync::atomic::Ordering::Acquire);
            if target > 0 {
                write_oldest(&domain, &mut inflight, Reason::Dontcache, target, (chunk_bytes, max_runs));
            }
        }
        let cutoff_ns = domain.dirty.cache.now_ns().saturating_sub(config.expire_ms.saturating_mul(1_000_000));
        for inode in domain.take_expired(cutoff_ns) {
            // Everything dirty now, in one pass (it is queued whole).
            inflight.start(&inode, Reason::Periodic, u64::MAX, usize::MAX);
            domain.requeue(inode);
        }
        let reclaim = bits & WORK_RECLAIM != 0;
        loop {
            let dirty_bytes = domain.dirty.cache.dirty_bytes();
            let over_background = dirty_bytes > config.dirty_background_bytes;
            // A writer waiting at the dirty limit is a reason of its own,
            // whatever the background threshold (which may sit so close to
            // the limit that the waiter's room is above it).
            let for_waiters = dirty_bytes > 0 && domain.dirty.cache.has_dirty_waiters();
            if domain.is_shutdown() || !(over_background || for_waiters || reclaim) {
                break;
            }
            let reason = if over_background || for_waiters { Reason::Background } else { Reason::Reclaim };
            let Some(inode) = domain.pop_oldest() else { break };
            let started = inflight.start(&inode, reason, chunk_bytes, max_runs);
            domain.requeue(inode);
            if reason == Reason::Reclaim || started == 0 || inflight.failed() {
                break; // reclaim: one pass frees something; errors: retry later
            }
        }
    }
    inflight.drain();
}

/// Writes up to `target_bytes` from the oldest dirty inodes, one pass of at
/// most `(bytes, runs)` per inode; inodes that stay dirty go to the tail.
fn write_oldest(
    domain: &Arc<Domain>,
    inflight: &mut InFlight,
    reason: Reason,
    target_bytes: u64,
    (chunk_bytes, max_runs): (u64, usize),
) {
    let mut written = 0u64;
    let mut passes = domain.nr_dirty_inodes() * 64 + 1;
    while written < target_bytes && passes > 0 && !domain.is_shutdown() {
        passes -= 1;
        let Some(inode) = domain.pop_oldest() else { break };
        let want = chunk_bytes.min(target_bytes - written);
        written += inflight.start(&inode, reason, want, max_runs);
        domain.requeue(inode);
        if inflight.failed() {
            break;
        }
    }
}
