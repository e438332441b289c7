//! A writeback worker: one flusher thread of a domain, its dirty list and
//! its passes in flight ([`InFlight`]). Each round it takes its coalesced
//! work bits and does, in order: `start_dontcache` (its share of the
//! domain's uncached-dirty count, from the oldest inodes of its list,
//! whatever wrote them),
//! periodic (inodes dirtied longer than `expire` ago, in full), and
//! background / reclaim (oldest inodes first while [`policy`] says so: dirty
//! memory over the background threshold, a writer waiting at the dirty
//! limit, or, once, starved eviction). `Work::Background` only wakes the
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
//! Owns its `InFlight` (and with it its own submission queue) and its dirty
//! list; shares the domain's gauges, thresholds and bandwidth estimate with
//! the domain's other workers. It writes only what the domain's routing
//! gives it ([`crate::policy::route`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::locks;
use crate::config::Config;
use crate::inode::PassSize;
use crate::io::Io;
use crate::policy::dirty::DomainDirty;
use crate::policy::dirty::{DontcacheRoundEnd, Work};
use crate::stats::Counters;
use crate::stats::{Reason, WorkerCounters};
use crate::writeback::domain::{Domain, OnIdle};
use crate::writeback::inflight::InFlight;
use crate::writeback::policy::{self, BackgroundInput, PassLimits};

/// How often a worker looks at its thread's CPU time (one `getrusage`).
const CPU_SAMPLE_PERIOD: Duration = Duration::from_millis(10);

/// A domain with its writeback workers running (as many as `config`
/// routes to), their counters registered in `counters`.
pub fn start_domain(
    device_id: u64,
    dirty: Arc<DomainDirty>,
    config: Arc<Config>,
    io: Arc<dyn Io>,
    counters: &Counters,
    on_idle: OnIdle,
) -> std::io::Result<Arc<Domain>> {
    let domain = Domain::new(dirty, config, io, on_idle);
    let nr_workers = domain.route.nr_workers;
    for n in 0..nr_workers {
        let stats = Arc::new(WorkerCounters { device_id, worker: n as u32, ..WorkerCounters::default() });
        let for_thread = domain.clone();
        let for_stats = stats.clone();
        // The first keeps the name it always had (`top`, `perf` users).
        let name = if n == 0 { format!("wbc-flush-{device_id:x}") } else { format!("wbc-flush-{device_id:x}-{n}") };
        // No thread to be had (RLIMIT_NPROC, memory): the open that
        // needed this domain fails with the spawn's error, the OS's EAGAIN
        // as it is.
        let spawned = crate::io::spawn_io_thread(name, move |ready| run(for_thread, n, for_stats, ready));
        match spawned {
            Ok(handle) => {
                domain.add_worker(handle);
                locks::lock(&counters.writeback_workers).push(stats);
            }
            Err(e) => {
                domain.stop();
                return Err(e);
            }
        }
    }
    debug_assert_eq!(domain.nr_started_workers(), nr_workers);
    Ok(domain)
}

/// Runs worker `worker` of `domain` until the domain shuts down.
pub fn run(domain: Arc<Domain>, worker: usize, stats: Arc<WorkerCounters>, ready: crate::io::Ready) {
    let config = &domain.config;
    let interval = policy::flusher_interval(config.expire_ms);
    let limits = PassLimits::new(config.io_max_bytes, config.io_depth);
    let mut inflight = InFlight::new(
        domain.clone(),
        worker,
        stats.clone(),
        domain.io.write_queue(),
        limits.queued_ios_max,
        limits.queued_bytes_max,
        policy::queue_ios_max(config.io_depth),
    );
    // Its write queue's ring exists; its ring for other I/O too, now.
    domain.io.prepare_thread();
    ready.done();
    let mut cpu_sampled_at = Instant::now();
    // Failures in a row, reset once writeback succeeds again.
    let mut consecutive_failures = 0u32;
    let mut written_at_failure = 0u64;
    while !domain.is_shutdown() {
        if cpu_sampled_at.elapsed() >= CPU_SAMPLE_PERIOD {
            sample_cpu(&stats);
            cpu_sampled_at = Instant::now();
        }
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
            domain.dirty.wait_work(worker, interval)
        } else {
            inflight.reap_some();
            domain.dirty.take_work(worker)
        };
        if domain.is_shutdown() {
            break;
        }
        if bits.contains(Work::StartDontcache) {
            write_dontcache(&domain, worker, &mut inflight, &limits);
        }
        write_expired(&domain, worker, &mut inflight);
        write_background(&domain, worker, &mut inflight, bits.contains(Work::Reclaim), &limits);
    }
    inflight.drain();
    sample_cpu(&stats);
}

/// The worker thread's CPU time so far into its counters.
fn sample_cpu(stats: &WorkerCounters) {
    if let Some(us) = crate::io::thread_cpu_us() {
        stats.cpu_us.store(us, Ordering::Relaxed);
    }
}

/// Bytes written back by the whole cache so far (successfully).
fn written_bytes_total(domain: &Domain) -> u64 {
    domain.dirty.cache.counters.written_bytes_total.load(Ordering::Relaxed)
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

/// Periodic writeback: every inode that joined the worker's list longer
/// than `expire` ago (`expire_busy` while read misses are recent,
/// [`policy::periodic_cutoff`]), each in one pass of everything of it the
/// worker writes (it is queued whole).
fn write_expired(domain: &Arc<Domain>, worker: usize, inflight: &mut InFlight) {
    let cutoff = policy::periodic_cutoff(&policy::PeriodicInput {
        now_ns: domain.dirty.cache.now_ns(),
        expire_ms: domain.config.expire_ms,
        expire_busy_ms: domain.config.expire_busy_ms,
        read_seen_ns: domain.dirty.read_seen_ns(),
    });
    let (expired, some_wait) = domain.take_expired(worker, cutoff.before_ns(), cutoff.waiting_before_ns());
    if some_wait {
        Counters::add(&domain.dirty.cache.counters.periodic_waits_for_foreground, 1);
    }
    for listed in expired {
        inflight.start(&listed.inode, Reason::Periodic, PassSize::ALL);
        domain.requeue(worker, listed);
    }
}

/// Background and reclaim writeback, oldest inodes of the worker's list
/// first, for as long as [`policy::background_reason`] gives a reason and
/// passes make progress. The reason is the domain's (its dirty bytes, its
/// waiters): every worker writes its share while it holds.
fn write_background(
    domain: &Arc<Domain>,
    worker: usize,
    inflight: &mut InFlight,
    reclaim_kicked: bool,
    limits: &PassLimits,
) {
    while !domain.is_shutdown() {
        let cache = &domain.dirty.cache;
        let input = BackgroundInput {
            dirty_bytes: cache.dirty_bytes(),
            dirty_background_bytes: domain.config.dirty_background_bytes,
            has_dirty_waiters: cache.has_dirty_waiters(),
            reclaim_kicked,
        };
        let Some(reason) = policy::background_reason(&input) else { break };
        let Some(listed) = domain.pop_oldest(worker) else { break };
        let started = inflight.start(&listed.inode, reason, limits.pass);
        domain.requeue(worker, listed);
        if !policy::continue_background(reason, started, inflight.failed()) {
            break;
        }
    }
}

/// One `start_dontcache` round: the worker's share of the domain's
/// uncached-dirty bytes, from the oldest inodes of its list. The work bit
/// stays set while the worker makes progress and uncached dirty data
/// remains, so a stream of uncached writes costs a handful of wakeups
/// rather than one per write.
fn write_dontcache(domain: &Arc<Domain>, worker: usize, inflight: &mut InFlight, limits: &PassLimits) {
    let generation = domain.dirty.dontcache_kick_generation();
    let target = domain.dirty.dontcache_dirty_bytes.load(Ordering::Acquire);
    let share = policy::dontcache_share(target, domain.nr_workers_with_dirty_inodes());
    let started = if share > 0 { write_oldest(domain, worker, inflight, Reason::Dontcache, share, limits) } else { 0 };
    let remaining = domain.dirty.dontcache_dirty_bytes.load(Ordering::Acquire);
    let keep_going = started > 0 && remaining > 0 && !inflight.failed() && !domain.is_shutdown();
    let end = DontcacheRoundEnd {
        keep_going,
        generation_seen: generation,
        worker_has_dirty: domain.nr_dirty_inodes(worker) > 0,
    };
    domain.dirty.end_start_dontcache(worker, end);
}

/// Writes up to `target_bytes` from the oldest inodes of the worker's
/// list, one pass of at most the pass limits per inode; inodes that stay
/// dirty go to the tail.
fn write_oldest(
    domain: &Arc<Domain>,
    worker: usize,
    inflight: &mut InFlight,
    reason: Reason,
    target_bytes: u64,
    limits: &PassLimits,
) -> u64 {
    let mut written = 0u64;
    let mut passes = policy::targeted_passes_max(domain.nr_dirty_inodes(worker));
    while written < target_bytes && passes > 0 && !domain.is_shutdown() {
        passes -= 1;
        let Some(listed) = domain.pop_oldest(worker) else { break };
        let size = PassSize { bytes_max: limits.pass.bytes_max.min(target_bytes - written), ..limits.pass };
        written += inflight.start(&listed.inode, reason, size);
        domain.requeue(worker, listed);
        if inflight.failed() {
            break;
        }
    }
    written
}
