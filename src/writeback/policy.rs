//! The flusher's decisions, as pure functions of counters and options: how
//! often it wakes, how large a pass is, how much it keeps queued, which
//! dirty data is old enough for periodic writeback, and whether (and why)
//! background writeback goes on. No clock and no state here, so every case
//! is tested below; [`super::worker`] applies them.

use std::time::Duration;

use crate::inode::PassSize;
use crate::policy::dirty::READ_RECENT;
use crate::stats::Reason;

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

/// How long the flusher waits after failed writes before writing again:
/// 50 ms after the first failure, doubling with each further failure in a
/// row up to 1 s. A full disk or a dead device is then retried about once
/// a second instead of twenty times (each retry on a full ext4 forces a
/// journal commit), and data still goes out within a second of the cause
/// clearing. fsync does not wait for this: it retries itself.
pub fn failure_backoff(consecutive_failures: u32) -> Duration {
    let shift = consecutive_failures.saturating_sub(1).min(5);
    Duration::from_millis((50u64 << shift).min(1000))
}

/// How much one pass takes and how much stays queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassLimits {
    /// What one background pass takes at most.
    pub pass: PassSize,
    /// I/Os queued at most: two rings' worth, one in the device and one
    /// ready behind.
    pub queued_ios_max: usize,
    /// Bytes queued at most (a pass is queued whole, so one may cross it).
    pub queued_bytes_max: u64,
}

impl PassLimits {
    pub fn new(io_max_bytes: u64, io_depth: u32) -> PassLimits {
        let depth = io_depth as usize;
        PassLimits {
            pass: PassSize { bytes_max: io_max_bytes * PASS_IOS, runs_max: PASS_RUNS_PER_DEPTH * depth },
            queued_ios_max: 2 * depth,
            queued_bytes_max: io_max_bytes * QUEUED_IOS,
        }
    }
}

/// How long an idle flusher sleeps between looks for expired data: a
/// quarter of `expire`, within 5-500 ms.
pub fn flusher_interval(expire_ms: u64) -> Duration {
    Duration::from_millis((expire_ms / 4).clamp(5, 500))
}

/// Inodes dirtied at or before this time (ns since the cache's epoch) are
/// due for periodic writeback.
pub fn expired_before_ns(now_ns: u64, expire_ms: u64) -> u64 {
    now_ns.saturating_sub(expire_ms.saturating_mul(1_000_000))
}

/// What periodic writeback's cutoff depends on.
#[derive(Clone, Copy, Debug)]
pub struct PeriodicInput {
    pub now_ns: u64,
    pub expire_ms: u64,
    pub expire_busy_ms: u64,
    /// When a read miss last came to or left the domain, in ns since the
    /// cache's epoch; `None` never.
    pub read_seen_ns: Option<u64>,
}

/// Whether periodic writeback waits for the device's readers or goes now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeriodicCutoff {
    /// No read miss within [`READ_RECENT`]: data dirtied at or
    /// before `before_ns` (`expire` ago) is written.
    Expire { before_ns: u64 },
    /// A read miss is recent: only data dirtied at or before
    /// `before_ns` (`expire_busy` ago) is written, and what is older than
    /// `expire` but younger than that waits.
    Busy { before_ns: u64, expire_before_ns: u64 },
}

impl PeriodicCutoff {
    /// Inodes dirtied at or before this time are written now.
    pub fn before_ns(self) -> u64 {
        match self {
            PeriodicCutoff::Expire { before_ns } | PeriodicCutoff::Busy { before_ns, .. } => before_ns,
        }
    }

    /// Data dirtied at or before this time is expired but left waiting
    /// (`Busy` only).
    pub fn waiting_before_ns(self) -> Option<u64> {
        match self {
            PeriodicCutoff::Expire { .. } => None,
            PeriodicCutoff::Busy { expire_before_ns, .. } => Some(expire_before_ns),
        }
    }
}

/// Periodic writeback's cutoff now. Data older than `expire` goes to the
/// device when nothing reads from it; while read misses are recent it
/// waits up to `expire_busy`, as the kernel keeps
/// dirty data for `dirty_expire_centisecs` (30 s): each periodic write is a
/// request that reads queue behind in the device, and small random ones
/// cost the most. On this project's virtio disk, `fio`'s 4 KiB
/// 70/30 random reads and writes over 2 GiB with a 1 GiB cache read with a
/// p99 of 322 µs while every write went back within a second (70,000
/// background writes in 5 s, 0.9 ms each at the device), 138 µs with them
/// kept (the kernel's 95-102 µs). Writeback over the background threshold
/// and what a caller waits for do not wait for this. Fsyncs do not count:
/// counted, they kept the flusher from writing the streams beside them
/// once a second, and a commit's wait behind background writes is the
/// background budget's to answer (`crate::policy::background_budget`).
pub fn periodic_cutoff(input: &PeriodicInput) -> PeriodicCutoff {
    let expire_before_ns = expired_before_ns(input.now_ns, input.expire_ms);
    let recent_ns = READ_RECENT.as_nanos() as u64;
    let busy = input.read_seen_ns.is_some_and(|seen| input.now_ns.saturating_sub(seen) < recent_ns);
    if !busy || input.expire_busy_ms <= input.expire_ms {
        return PeriodicCutoff::Expire { before_ns: expire_before_ns };
    }
    let before_ns = expired_before_ns(input.now_ns, input.expire_busy_ms);
    debug_assert!(before_ns <= expire_before_ns, "the busy cutoff is the older one");
    PeriodicCutoff::Busy { before_ns, expire_before_ns }
}

/// What the background decision reads.
#[derive(Clone, Copy, Debug)]
pub struct BackgroundInput {
    pub dirty_bytes: u64,
    pub dirty_background_bytes: u64,
    /// Writers wait for dirty room.
    pub has_dirty_waiters: bool,
    /// Eviction found nothing clean and kicked the flusher.
    pub reclaim_kicked: bool,
}

/// Why the flusher writes another background pass now, if at all: dirty
/// data over the background threshold, or a writer waiting at the dirty
/// limit (a reason of its own, whatever the threshold, which may sit so
/// close to the limit that the waiter's room is above it), are
/// `Background`; starved eviction alone is `Reclaim`.
pub fn background_reason(input: &BackgroundInput) -> Option<Reason> {
    let over_background = input.dirty_bytes > input.dirty_background_bytes;
    let for_waiters = input.dirty_bytes > 0 && input.has_dirty_waiters;
    if over_background || for_waiters {
        Some(Reason::Background)
    } else if input.reclaim_kicked {
        Some(Reason::Reclaim)
    } else {
        None
    }
}

/// Whether background writeback goes on after a pass of `reason` that took
/// `started_bytes`: reclaim stops after one pass (it frees something), and
/// so does a pass that found nothing or failed (errors retry later).
pub fn continue_background(reason: Reason, started_bytes: u64, failed: bool) -> bool {
    reason == Reason::Background && started_bytes > 0 && !failed
}

/// How many I/Os a flusher may hand its queue at once: `io_depth`, the
/// most the backend keeps in flight, so nothing waits inside the backend
/// where an fsync could not promote it.
pub fn queue_ios_max(io_depth: u32) -> usize {
    (io_depth as usize).max(1)
}

/// Async (background) writeback bytes one worker keeps in the device
/// queue (one I/O always, whatever its size) while fsyncs, fdatasyncs or
/// reads wait on the domain, or did within [`SYNC_RECENT`]. Whatever is
/// queued when such a caller arrives, it waits behind. Next to a streaming
/// writer, SQLite's commits (`wbcache bench -w sqlite`, 256M, wbcache
/// rows) took a p99 of 40-58 ms (WAL) and 58-73 ms (rollback journal)
/// with the queue's full depth of 1 MiB writes, 20 and 29 ms at 4 MiB, 9.4
/// and 24 ms at 2 MiB, 8.4 and 18 ms at 1 MiB, and transactions ran at
/// 74-151, 121, 173 and 202 per second (WAL); the stream kept writing at
/// 2.5-2.7 GB/s throughout. Without recent sync callers the cap is off:
/// writeback of 32 files at once lost 18% of its speed to it.
pub const ASYNC_QUEUE_BYTES_WHILE_SYNC: u64 = 1 << 20;

/// Async bytes one worker keeps queued while sync callers are recent:
/// [`ASYNC_QUEUE_BYTES_WHILE_SYNC`] scaled down with the background I/O
/// size (`budget_io_bytes` of `io_max_bytes`, [`crate::policy::background_budget`]),
/// and never less than one such I/O. The I/O size alone left the queue as
/// deep in bytes as before: next to a stream at 1G (`wbcache bench -w
/// sqlite`), the budget had cut background I/Os to 32-64 KiB, yet each read
/// and sync write of a commit still found 1.3-2 MiB of them ahead (p50) and
/// waited 1.5 ms for them; a rollback-journal commit makes about six such
/// trips. Scaling the queue with the I/O size is blk-wbt's depth scaling:
/// what a foreground request waits behind is the bytes queued ahead.
pub fn async_queue_bytes_while_sync(budget_io_bytes: u64, io_max_bytes: u64) -> u64 {
    let scaled = ASYNC_QUEUE_BYTES_WHILE_SYNC.saturating_mul(budget_io_bytes) / io_max_bytes.max(1);
    scaled.max(budget_io_bytes)
}

/// How long after the last sync caller came or went
/// [`ASYNC_QUEUE_BYTES_WHILE_SYNC`] still applies at least: an application
/// that reads or commits every few milliseconds keeps it on between calls.
pub const SYNC_RECENT: std::time::Duration = std::time::Duration::from_millis(100);

/// The longest [`sync_recent_window`].
pub const SYNC_RECENT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the queue stays capped after a sync caller came or went,
/// given the last two gaps between such events (an fsync's arrival and
/// its end make two; the longer is the time between calls): twice the
/// longer gap, within [`SYNC_RECENT`]..=[`SYNC_RECENT_MAX`]. A program that
/// commits every 100 ms to 500 ms then finds the queue capped at every
/// commit, not refilled to its full depth in between: `fsync-under-load`'s
/// small fsyncs, every 100 ms next to two streams, found 8 MiB of
/// background writes ahead at the p99 with a fixed 100 ms, and waited for
/// them in their flush.
pub fn sync_recent_window(gaps: [std::time::Duration; 2]) -> std::time::Duration {
    (gaps[0].max(gaps[1]) * 2).clamp(SYNC_RECENT, SYNC_RECENT_MAX)
}

/// How recently a sync caller (fsync, fdatasync, read miss) came or went,
/// as the async queue's cap reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncRecency {
    /// One waits now, or came or went within [`SYNC_RECENT`]: the queue
    /// is held to [`async_queue_bytes_while_sync`].
    Now,
    /// Within [`sync_recent_window`]: held to
    /// [`ASYNC_QUEUE_BYTES_WHILE_SYNC`].
    Recent,
    /// Longer ago: the queue's full depth.
    Long,
}

/// [`SyncRecency`] from whether a sync caller waits, the time since one
/// last came or went, and the last two gaps between such events. The
/// scaled cap is for callers that come again within 100 ms (a database
/// committing); later in the window the queue keeps 1 MiB. Next to two
/// streams, fsyncs every 100 ms (`fsync-under-load`, 256M, --repeat 3)
/// still fall within it, and the streams kept 0.63-0.81× of their rate
/// alone, against 0.86-0.95× with 1 MiB over the whole window.
pub fn sync_recency(
    has_sync_waiters: bool,
    since_sync: Option<std::time::Duration>,
    gaps: [std::time::Duration; 2],
) -> SyncRecency {
    match since_sync {
        _ if has_sync_waiters => SyncRecency::Now,
        Some(t) if t < SYNC_RECENT => SyncRecency::Now,
        Some(t) if t < sync_recent_window(gaps) => SyncRecency::Recent,
        _ => SyncRecency::Long,
    }
}

/// A worker's queue as [`may_submit_async`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct AsyncQueue {
    /// Async I/Os in the queue, and their bytes.
    pub ios: usize,
    pub bytes: u64,
    /// I/Os in the queue, sync ones included, and the queue's depth.
    pub all_ios: usize,
    pub ios_max: usize,
}

/// Whether the flusher may submit one more async I/O of `len` bytes now:
/// never past the queue's depth, nor past `bytes_max` of async bytes
/// (unless the queue holds no async I/O), and while an fsync, fdatasync or
/// read waits on the domain, only below `async_depth_while_sync` I/Os, so
/// the waiter's I/O and its flush queue in the device behind at most that
/// many. Sync (promoted) I/O is held to the queue's depth only.
pub fn may_submit_async(
    queue: &AsyncQueue,
    len: u64,
    has_sync_waiters: bool,
    async_depth_while_sync: u32,
    bytes_max: u64,
) -> bool {
    queue.all_ios < queue.ios_max
        && (queue.ios == 0 || queue.bytes.saturating_add(len) <= bytes_max)
        && (!has_sync_waiters || queue.ios < async_depth_while_sync as usize)
}

/// The most idle-class I/Os one worker keeps in the kernel
/// (`background_ioprio=idle`): an fsync that comes for their blocks
/// cannot promote them and waits for them.
pub const IDLE_IOS_MAX: usize = 4;

/// How long an idle-class I/O may wait before the worker sends its
/// background writeback best effort instead: something else keeps the
/// device's scheduler busy (mq-deadline serves an idle request only when
/// no other waits, and ages it only after `prio_aging_expire`, 10 s).
pub const IDLE_WAIT_MAX: Duration = Duration::from_millis(100);

/// How long background writeback stays best effort after an idle-class
/// I/O waited [`IDLE_WAIT_MAX`].
pub const IDLE_BACKOFF: Duration = Duration::from_secs(1);

/// What [`background_class`] reads.
#[derive(Clone, Copy, Debug)]
pub struct IdleClassInput {
    /// `background_ioprio=idle`.
    pub configured: bool,
    /// Why the I/O's pass writes.
    pub reason: Reason,
    pub has_sync_waiters: bool,
    /// Writers wait for dirty room.
    pub has_dirty_waiters: bool,
    /// Idle-class I/Os of this worker in the kernel, and how long the
    /// oldest of them has waited.
    pub idle_in_queue: usize,
    pub oldest_idle_wait: Duration,
    /// How long ago an idle-class I/O was last found waiting
    /// [`IDLE_WAIT_MAX`], if ever.
    pub since_idle_stuck: Option<Duration>,
}

/// The class an async I/O goes to the device in, or whether it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackgroundClass {
    /// Best effort, as everything else.
    BestEffort,
    /// The idle class.
    Idle,
    /// It would go idle, but [`IDLE_IOS_MAX`] are in the kernel already:
    /// it waits for one of them (background writeback is paced by them).
    Wait,
}

/// The class of an async I/O: idle only where configured, only for
/// periodic and over-threshold writeback that no fsync, writer waiting for
/// dirty room, uncached writer or reclaim needs now, and not while (or
/// within [`IDLE_BACKOFF`] after) an idle one waited [`IDLE_WAIT_MAX`];
/// such I/O waits while [`IDLE_IOS_MAX`] are in the kernel.
pub fn background_class(input: &IdleClassInput) -> BackgroundClass {
    let reason_allows = matches!(input.reason, Reason::Background | Reason::Periodic);
    let stuck = input.oldest_idle_wait >= IDLE_WAIT_MAX || input.since_idle_stuck.is_some_and(|t| t < IDLE_BACKOFF);
    let needed = input.has_sync_waiters || input.has_dirty_waiters;
    if !input.configured || !reason_allows || needed || stuck {
        BackgroundClass::BestEffort
    } else if input.idle_in_queue >= IDLE_IOS_MAX {
        BackgroundClass::Wait
    } else {
        BackgroundClass::Idle
    }
}

/// Passes a targeted writeback (uncached bytes) makes at most over
/// `nr_dirty_inodes` inodes, so inodes that stay dirty cannot keep it
/// going forever.
pub fn targeted_passes_max(nr_dirty_inodes: usize) -> usize {
    nr_dirty_inodes * 64 + 1
}

/// The part of an uncached-write kick's `target_bytes` one worker writes
/// when `busy_workers` workers (at least one) have dirty inodes listed:
/// an even share, rounded up, so the kick writes about the target in all,
/// not once per worker. Uncached writers kick again as soon as a worker
/// took its bit, so a share too small for one worker's data is made up
/// at the next kick.
pub fn dontcache_share(target_bytes: u64, busy_workers: usize) -> u64 {
    target_bytes.div_ceil(busy_workers.max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_sync_window_spans_the_gap_between_calls() {
        let ms = |n: u64| std::time::Duration::from_millis(n);
        assert_eq!(sync_recent_window([ms(0), ms(0)]), SYNC_RECENT, "no history: the floor");
        assert_eq!(sync_recent_window([ms(1), ms(100)]), ms(200), "commits every 100 ms, each 1 ms long");
        assert_eq!(sync_recent_window([ms(300), ms(2)]), ms(600), "either order");
        assert_eq!(sync_recent_window([ms(5), ms(20)]), SYNC_RECENT, "frequent calls: the floor");
        assert_eq!(sync_recent_window([ms(10_000), ms(1)]), SYNC_RECENT_MAX, "rare calls: the ceiling");
    }

    #[test]
    fn failures_back_off_exponentially_up_to_a_second() {
        let ms = |n| failure_backoff(n).as_millis();
        assert_eq!([ms(0), ms(1), ms(2), ms(3), ms(4), ms(5), ms(6)], [50, 50, 100, 200, 400, 800, 1000]);
        assert_eq!(ms(u32::MAX), 1000);
    }

    fn input(dirty_bytes: u64, has_dirty_waiters: bool, reclaim_kicked: bool) -> BackgroundInput {
        BackgroundInput { dirty_bytes, dirty_background_bytes: 64 * MIB, has_dirty_waiters, reclaim_kicked }
    }

    #[test]
    fn limits_follow_io_max_and_depth() {
        let l = PassLimits::new(MIB, 128);
        assert_eq!(
            l,
            PassLimits {
                pass: PassSize { bytes_max: 8 * MIB, runs_max: 512 },
                queued_ios_max: 256,
                queued_bytes_max: 8 * MIB
            }
        );
        let l = PassLimits::new(64 << 10, 1);
        assert_eq!((l.pass.bytes_max, l.pass.runs_max, l.queued_ios_max), (512 << 10, 4, 2));
    }

    #[test]
    fn interval_is_a_quarter_of_expire_within_bounds() {
        assert_eq!(flusher_interval(1000), Duration::from_millis(250));
        assert_eq!(flusher_interval(1), Duration::from_millis(5));
        assert_eq!(flusher_interval(3_600_000), Duration::from_millis(500));
    }

    #[test]
    fn expiry_cutoff_saturates() {
        assert_eq!(expired_before_ns(5_000_000_000, 1000), 4_000_000_000);
        assert_eq!(expired_before_ns(10, 1000), 0, "nothing is older than the epoch");
        assert_eq!(expired_before_ns(u64::MAX, u64::MAX), 0, "no overflow");
    }

    /// Every combination of the three conditions, at, below and above the
    /// threshold.
    #[test]
    fn background_reasons_cover_every_case() {
        for dirty in [0, 1, 64 * MIB, 64 * MIB + 1] {
            for waiters in [false, true] {
                for reclaim in [false, true] {
                    let got = background_reason(&input(dirty, waiters, reclaim));
                    let want = if dirty > 64 * MIB || (dirty > 0 && waiters) {
                        Some(Reason::Background)
                    } else if reclaim {
                        Some(Reason::Reclaim)
                    } else {
                        None
                    };
                    assert_eq!(got, want, "dirty {dirty} waiters {waiters} reclaim {reclaim}");
                }
            }
        }
    }

    /// A waiting writer is written for even when the background threshold
    /// sits one block under the limit (the stall this rule fixes).
    #[test]
    fn a_waiting_writer_is_a_reason_below_the_background_threshold() {
        let i = BackgroundInput {
            dirty_bytes: 12 * MIB,
            dirty_background_bytes: 16 * MIB - 4096,
            has_dirty_waiters: true,
            reclaim_kicked: false,
        };
        assert_eq!(background_reason(&i), Some(Reason::Background));
        assert_eq!(background_reason(&BackgroundInput { has_dirty_waiters: false, ..i }), None);
    }

    #[test]
    fn only_successful_background_passes_continue() {
        assert!(continue_background(Reason::Background, 4096, false));
        assert!(!continue_background(Reason::Background, 0, false), "nothing found");
        assert!(!continue_background(Reason::Background, 4096, true), "failed");
        assert!(!continue_background(Reason::Reclaim, 4096, false), "reclaim: one pass");
    }

    /// The cap binds only while a sync waiter exists, and the queue's depth
    /// and its async bytes always.
    #[test]
    fn async_submission_is_capped_only_while_someone_syncs() {
        let q = |ios: usize, all_ios: usize| AsyncQueue { ios, bytes: ios as u64 * 4096, all_ios, ios_max: 5 };
        for async_in_queue in 0..6 {
            for waiters in [false, true] {
                let want = if waiters { async_in_queue < 2 } else { async_in_queue < 5 };
                assert_eq!(
                    may_submit_async(&q(async_in_queue, async_in_queue), 4096, waiters, 2, u64::MAX),
                    want,
                    "{async_in_queue} {waiters}"
                );
            }
        }
        assert!(
            !may_submit_async(&q(0, 5), 4096, false, 2, u64::MAX),
            "sync I/O fills the queue: no room for async either"
        );
        assert!(may_submit_async(&q(0, 4), 4096, true, 1, u64::MAX), "room under the cap and in the queue");
        let cap = ASYNC_QUEUE_BYTES_WHILE_SYNC;
        let big = AsyncQueue { ios: 3, bytes: cap - 8192, all_ios: 3, ios_max: 128 };
        assert!(may_submit_async(&big, 8192, false, 4, cap), "up to the byte cap");
        assert!(!may_submit_async(&big, 8192 + 4096, false, 4, cap), "not past it");
        assert!(may_submit_async(&big, 8192 + 4096, false, 4, u64::MAX), "no byte cap");
        let empty = AsyncQueue { ios: 0, bytes: 0, all_ios: 0, ios_max: 128 };
        assert!(may_submit_async(&empty, 4 * cap, false, 1, cap), "one I/O of any size");
        assert_eq!(queue_ios_max(128), 128);
        assert_eq!(queue_ios_max(0), 1, "always room for one");
    }

    #[test]
    fn periodic_writeback_waits_for_recent_read_misses() {
        const S: u64 = 1_000_000_000;
        let at = |seen: Option<u64>| PeriodicInput {
            now_ns: 100 * S,
            expire_ms: 1000,
            expire_busy_ms: 30_000,
            read_seen_ns: seen,
        };
        let expire = PeriodicCutoff::Expire { before_ns: 99 * S };
        assert_eq!(periodic_cutoff(&at(None)), expire, "never a read miss");
        assert_eq!(periodic_cutoff(&at(Some(50 * S))), expire, "long ago");
        let recent_ns = READ_RECENT.as_nanos() as u64;
        assert_eq!(periodic_cutoff(&at(Some(100 * S - recent_ns))), expire, "just out of the window");
        let busy = PeriodicCutoff::Busy { before_ns: 70 * S, expire_before_ns: 99 * S };
        assert_eq!(periodic_cutoff(&at(Some(100 * S - recent_ns + 1))), busy);
        assert_eq!(periodic_cutoff(&at(Some(100 * S))), busy, "one now");
        assert_eq!(periodic_cutoff(&at(Some(101 * S))), busy, "a clock read after now still counts");
        assert_eq!((busy.before_ns(), busy.waiting_before_ns()), (70 * S, Some(99 * S)));
        assert_eq!(expire.waiting_before_ns(), None);
        let never_waits = PeriodicInput { expire_busy_ms: 1000, ..at(Some(100 * S)) };
        assert_eq!(periodic_cutoff(&never_waits), expire, "expire_busy at expire: no wait");
        let early = PeriodicInput { now_ns: S, ..at(Some(S)) };
        assert_eq!(periodic_cutoff(&early), PeriodicCutoff::Busy { before_ns: 0, expire_before_ns: 0 }, "no underflow");
    }

    #[test]
    fn sync_recency_by_time_since_the_last_caller() {
        let ms = Duration::from_millis;
        let gaps = [ms(300), ms(300)];
        assert_eq!(sync_recency(true, None, gaps), SyncRecency::Now, "one waits");
        assert_eq!(sync_recency(true, Some(ms(5000)), gaps), SyncRecency::Now);
        assert_eq!(sync_recency(false, Some(ms(99)), gaps), SyncRecency::Now);
        assert_eq!(sync_recency(false, Some(SYNC_RECENT), gaps), SyncRecency::Recent);
        assert_eq!(sync_recency(false, Some(ms(599)), gaps), SyncRecency::Recent, "twice the longer gap");
        assert_eq!(sync_recency(false, Some(ms(600)), gaps), SyncRecency::Long);
        assert_eq!(sync_recency(false, None, gaps), SyncRecency::Long, "never");
        let short = [ms(1), ms(2)];
        assert_eq!(sync_recency(false, Some(ms(100)), short), SyncRecency::Long, "the window is 100 ms at least");
    }

    #[test]
    fn queue_while_sync_scales_with_the_io_size() {
        assert_eq!(async_queue_bytes_while_sync(MIB, MIB), ASYNC_QUEUE_BYTES_WHILE_SYNC, "full size, full queue");
        assert_eq!(async_queue_bytes_while_sync(MIB / 4, MIB), ASYNC_QUEUE_BYTES_WHILE_SYNC / 4);
        assert_eq!(async_queue_bytes_while_sync(32 << 10, MIB), 32 << 10, "one I/O at the smallest size");
        assert_eq!(async_queue_bytes_while_sync(4 * MIB, 4 * MIB), ASYNC_QUEUE_BYTES_WHILE_SYNC.max(4 * MIB));
        assert_eq!(async_queue_bytes_while_sync(MIB, 4 * MIB), MIB, "never below one I/O");
        for io_max in [64 << 10, MIB, 8 * MIB] {
            let mut last = u64::MAX;
            let mut budget = io_max;
            while budget >= 4096 {
                let bytes = async_queue_bytes_while_sync(budget, io_max);
                assert!(bytes >= budget && bytes <= last, "{budget} of {io_max}: {bytes} after {last}");
                last = bytes;
                budget /= 2;
            }
        }
    }

    #[test]
    fn idle_class_only_where_nothing_needs_the_blocks() {
        use BackgroundClass::{BestEffort, Idle, Wait};
        let base = IdleClassInput {
            configured: true,
            reason: Reason::Background,
            has_sync_waiters: false,
            has_dirty_waiters: false,
            idle_in_queue: 0,
            oldest_idle_wait: Duration::ZERO,
            since_idle_stuck: None,
        };
        assert_eq!(background_class(&base), Idle);
        assert_eq!(background_class(&IdleClassInput { reason: Reason::Periodic, ..base }), Idle);
        assert_eq!(background_class(&IdleClassInput { configured: false, ..base }), BestEffort, "the default");
        for reason in [Reason::Dontcache, Reason::Fsync, Reason::Reclaim, Reason::Close, Reason::SyncRange] {
            assert_eq!(background_class(&IdleClassInput { reason, ..base }), BestEffort, "{reason:?} is waited for");
        }
        assert_eq!(background_class(&IdleClassInput { has_sync_waiters: true, ..base }), BestEffort);
        assert_eq!(background_class(&IdleClassInput { has_dirty_waiters: true, ..base }), BestEffort);
        let in_queue = |n| IdleClassInput { idle_in_queue: n, ..base };
        assert_eq!(background_class(&in_queue(IDLE_IOS_MAX - 1)), Idle);
        assert_eq!(background_class(&in_queue(IDLE_IOS_MAX)), Wait, "bounded in number: the rest waits");
        let needed = IdleClassInput { idle_in_queue: IDLE_IOS_MAX, has_dirty_waiters: true, ..base };
        assert_eq!(background_class(&needed), BestEffort, "what a writer waits for does not wait");
        let waited = |d| IdleClassInput { idle_in_queue: 1, oldest_idle_wait: d, ..base };
        assert_eq!(background_class(&waited(IDLE_WAIT_MAX - Duration::from_millis(1))), Idle);
        assert_eq!(background_class(&waited(IDLE_WAIT_MAX)), BestEffort, "bounded in time");
        let after = |d| IdleClassInput { since_idle_stuck: Some(d), ..base };
        assert_eq!(background_class(&after(Duration::from_millis(10))), BestEffort, "best effort for a while");
        assert_eq!(background_class(&after(IDLE_BACKOFF)), Idle, "then idle again");
    }

    #[test]
    fn targeted_writeback_is_bounded() {
        assert_eq!(targeted_passes_max(0), 1);
        assert_eq!(targeted_passes_max(3), 193);
    }

    #[test]
    fn dontcache_kicks_are_shared_between_busy_workers() {
        assert_eq!(dontcache_share(10 * MIB, 1), 10 * MIB);
        assert_eq!(dontcache_share(10 * MIB, 4), 10 * MIB / 4);
        assert_eq!(dontcache_share(10, 4), 3, "rounded up: the shares cover the target");
        assert_eq!(dontcache_share(10 * MIB, 0), 10 * MIB, "no listed worker: the whole target");
        assert_eq!(dontcache_share(0, 3), 0);
    }
}
