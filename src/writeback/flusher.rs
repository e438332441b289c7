//! The flusher: one thread per writeback domain. Each round it takes the
//! coalesced work bits and does, in order: `start_all` (everything),
//! `start_dontcache` (as many bytes as the domain's uncached-dirty count,
//! from the oldest dirty inodes, whatever wrote them), periodic (inodes
//! dirtied longer than `expire` ago, in full), and background / reclaim
//! (oldest inodes first while dirty memory is over the background threshold
//! or eviction is starved). Every inode pass is bounded to
//! [`PASS_IOS`] `× io_max` bytes so one big file cannot starve the others.

use std::sync::Arc;
use std::time::Duration;

use crate::io::IoPriority;
use crate::stats::Counters;
use crate::writeback::domain::{Domain, WORK_BACKGROUND, WORK_RECLAIM, WORK_START_ALL, WORK_START_DONTCACHE};
use crate::writeback::Reason;

/// An inode pass takes at most this many `io_max` I/Os' worth of dirty data:
/// 32 MiB at the default `io_max`, i.e. 8192 I/Os when the dirty blocks are
/// scattered 4 KiB ones (kept `io_depth` deep by the backend).
pub const PASS_IOS: u64 = 32;

pub fn run(domain: Arc<Domain>) {
    let config = &domain.shared.config;
    let interval = Duration::from_millis((config.expire_ms / 4).clamp(5, 500));
    let chunk_bytes = config.io_max_bytes * PASS_IOS;
    while !domain.is_shutdown() {
        let bits = domain.wait_work(interval);
        if domain.is_shutdown() {
            break;
        }
        if bits != 0 {
            Counters::add(&domain.shared.counters.flusher_wakeups, 1);
        }
        if bits & WORK_START_ALL != 0 {
            write_oldest(&domain, Reason::Background, u64::MAX, chunk_bytes);
        }
        if bits & WORK_START_DONTCACHE != 0 {
            let target = domain.dontcache_dirty_bytes.load(std::sync::atomic::Ordering::Acquire);
            if target > 0 {
                write_oldest(&domain, Reason::Dontcache, target, chunk_bytes);
            }
        }
        let cutoff_ns = (domain.shared.epoch.elapsed().as_nanos() as u64)
            .saturating_sub(config.expire_ms.saturating_mul(1_000_000));
        for inode in domain.take_expired(cutoff_ns) {
            inode.writeback(Reason::Periodic, u64::MAX, IoPriority::Async);
            domain.requeue(inode);
        }
        let reclaim = bits & WORK_RECLAIM != 0;
        loop {
            let over_background = domain.shared.dirty_bytes() > config.dirty_background_bytes;
            if domain.is_shutdown() || !(over_background || reclaim) {
                break;
            }
            let reason = if over_background { Reason::Background } else { Reason::Reclaim };
            let Some(inode) = domain.pop_oldest() else { break };
            let outcome = inode.writeback(reason, chunk_bytes, IoPriority::Async);
            domain.requeue(inode);
            if !over_background || outcome.written_bytes == 0 {
                break; // reclaim: one pass frees something; errors: retry later
            }
        }
        let _ = WORK_BACKGROUND;
    }
}

/// Writes up to `target_bytes` from the oldest dirty inodes, one bounded pass
/// per inode; inodes that stay dirty go to the tail.
fn write_oldest(domain: &Arc<Domain>, reason: Reason, target_bytes: u64, chunk_bytes: u64) {
    let mut written = 0u64;
    let mut passes = domain.nr_dirty_inodes() * 64 + 1;
    while written < target_bytes && passes > 0 && !domain.is_shutdown() {
        passes -= 1;
        let Some(inode) = domain.pop_oldest() else { break };
        let want = chunk_bytes.min(target_bytes - written);
        let outcome = inode.writeback(reason, want, IoPriority::Async);
        written += outcome.written_bytes;
        domain.requeue(inode);
        if outcome.written_bytes == 0 && outcome.failed_bytes > 0 {
            break;
        }
    }
}
