//! Dirty throttling policy: pure functions from counters to a pause, modelled
//! on the kernel's `balance_dirty_pages` (position control with bounded
//! pauses). No state and no clock here, so it is tested exhaustively.
//!
//! Below the *freerun* point, the midpoint between `dirty_background` and
//! `dirty_limit`, writers never pause. Between freerun and the limit a writer
//! may dirty at `write_bw * pos_ratio`, where `pos_ratio` falls smoothly
//! (cubically) from 2 at freerun to 0 at the limit, and its pause is the time
//! its newly dirtied bytes take at that rate, capped at `pause_max`. At or
//! over the limit every check pauses `pause_max` (the caller re-checks), so
//! dirty memory stays bounded while the pause curve has no cliff before it.
//!
//! The mechanism that applies the policy to a writer ([`balance_dirty`],
//! [`wait_for_dirty_room`]) is at the end: it reads the domain's gauges,
//! kicks its flusher and waits for writeback progress.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::Caching;
use crate::policy::dirty::{DirtyRoom, DomainDirty, Work};
use crate::stats::Counters;

/// Counters the policy decides from.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleInput {
    /// Dirty bytes now (cache-wide).
    pub nr_dirty_bytes: u64,
    pub dirty_background_bytes: u64,
    pub dirty_limit_bytes: u64,
    /// Measured writeback bandwidth, bytes per second.
    pub write_bw_bytes_per_s: u64,
    /// Bytes this writer dirtied since its last check.
    pub dirtied_bytes: u64,
    pub pause_max: Duration,
}

/// The point below which writers run free.
pub fn freerun_bytes(dirty_background_bytes: u64, dirty_limit_bytes: u64) -> u64 {
    dirty_background_bytes + (dirty_limit_bytes.saturating_sub(dirty_background_bytes)) / 2
}

/// Position ratio in [0, 2]: 2 at freerun, 1 near a quarter of the way to
/// the limit, 0 at the limit. Monotonically non-increasing in dirty bytes.
pub fn pos_ratio(input: &ThrottleInput) -> f64 {
    let freerun = freerun_bytes(input.dirty_background_bytes, input.dirty_limit_bytes);
    if input.nr_dirty_bytes <= freerun {
        return 2.0;
    }
    if input.nr_dirty_bytes >= input.dirty_limit_bytes {
        return 0.0;
    }
    let span = (input.dirty_limit_bytes - freerun) as f64;
    let x = (input.nr_dirty_bytes - freerun) as f64 / span;
    2.0 * (1.0 - x).powi(3)
}

/// How long the writer should pause now. Zero below freerun.
pub fn throttle_pause(input: &ThrottleInput) -> Duration {
    let freerun = freerun_bytes(input.dirty_background_bytes, input.dirty_limit_bytes);
    if input.nr_dirty_bytes <= freerun {
        return Duration::ZERO;
    }
    if input.nr_dirty_bytes >= input.dirty_limit_bytes {
        return input.pause_max;
    }
    // A floor keeps the rate positive before the first bandwidth sample.
    let bw = input.write_bw_bytes_per_s.max(1 << 20) as f64;
    let rate = bw * pos_ratio(input);
    if rate <= 0.0 {
        return input.pause_max;
    }
    // Clamped in seconds first: just under a large limit the rate can be
    // so small that the pause overflows a `Duration`.
    let pause_s = (input.dirtied_bytes as f64 / rate).min(input.pause_max.as_secs_f64());
    Duration::from_secs_f64(pause_s).min(input.pause_max)
}

/// Bytes a writer may dirty between two checks (the kernel's
/// `ratelimit_pages`): small enough that a writer cannot overshoot the limit
/// by much, large enough that checks are rare on the hot path.
pub fn ratelimit_bytes(dirty_limit_bytes: u64) -> u64 {
    (dirty_limit_bytes / 256).clamp(16 << 10, 1 << 20)
}

thread_local! {
    /// Bytes this thread dirtied since its last throttle check.
    static DIRTIED_SINCE_CHECK: Cell<u64> = const { Cell::new(0) };
    /// This thread's recent dirtying: bytes, halved every
    /// [`LIGHT_HALF_LIFE`] since, and when they were last updated.
    static RECENT_DIRTIED: Cell<(f64, Option<Instant>)> = const { Cell::new((0.0, None)) };
}

/// How fast a writer's recent dirtying is forgotten.
const LIGHT_HALF_LIFE: Duration = Duration::from_millis(100);

/// The most a light writer has dirtied lately (decayed, see
/// [`RECENT_DIRTIED`]): a sixty-fourth of `dirty_limit`, 2 MiB at the
/// default 128M, about 14 MB/s sustained. A database committing small
/// transactions stays under it; a bulk writer passes it within
/// milliseconds.
fn light_bytes(cfg: &Config) -> f64 {
    (cfg.dirty_limit_bytes / 64).max(BLOCK_SIZE as u64) as f64
}

/// The part of `dirty_limit` only light writers may fill: a sixteenth.
/// Heavy writers stop short of it, so a light writer beside a bulk stream
/// finds room at once instead of queuing for the room the stream keeps
/// taking (the kernel throttles heavy dirtiers harder than light ones for
/// the same reason). Dirty + writeback stays under `dirty_limit` all the
/// same.
pub fn light_reserve_bytes(cfg: &Config) -> u64 {
    let reserve = cfg.dirty_limit_bytes / 16 / BLOCK_SIZE as u64 * BLOCK_SIZE as u64;
    // A heavy writer keeps room for at least its largest request.
    reserve.min(cfg.dirty_limit_bytes.saturating_sub(room_bytes_max(cfg)))
}

/// This thread's recent dirtying, decayed to now.
fn recent_dirtied_bytes(now: Instant) -> f64 {
    let (bytes, at) = RECENT_DIRTIED.with(Cell::get);
    match at {
        Some(at) => {
            bytes * 0.5f64.powf(now.saturating_duration_since(at).as_secs_f64() / LIGHT_HALF_LIFE.as_secs_f64())
        }
        None => 0.0,
    }
}

/// Counts `bytes` newly dirtied by this thread; returns whether it is a
/// light writer (counting them).
fn note_dirtied(cfg: &Config, bytes: u64) -> bool {
    let now = Instant::now();
    let recent = recent_dirtied_bytes(now) + bytes as f64;
    RECENT_DIRTIED.with(|c| c.set((recent, Some(now))));
    recent <= light_bytes(cfg)
}

/// Whether the calling thread is a light writer now.
fn thread_is_light(cfg: &Config) -> bool {
    recent_dirtied_bytes(Instant::now()) <= light_bytes(cfg)
}

/// How far dirty + writeback may go for the calling thread's room:
/// `dirty_limit` for a light writer, less [`light_reserve_bytes`] for the
/// others.
pub fn room_limit_bytes(cfg: &Config) -> u64 {
    if thread_is_light(cfg) {
        cfg.dirty_limit_bytes
    } else {
        cfg.dirty_limit_bytes - light_reserve_bytes(cfg)
    }
}

/// The bound on an uncached writer: its domain's uncached bytes not yet
/// under writeback (its backlog), paced above half the bound and held at
/// the bound, which is half of `dirty_background` plus the domain's other
/// (buffered) dirty data. The flusher
/// starts writing uncached data as soon as it is dirtied, so the backlog
/// is how far the writer is ahead of the device: holding it small keeps
/// dirty memory (and the final fsync) small at no cost in throughput,
/// where without it a stream faster than the device fills the cache to
/// `dirty_limit`. Beside a buffered writer, whose backlog the flusher
/// writes in turn with this one's, the uncached writer may hold as much
/// more as the buffered one holds, so it is not starved (measured: held
/// to the larger of the two instead, it got 0.69x the buffered writer's
/// throughput; to half of `dirty_background` alone, 0.47x). Writeback in
/// flight (bounded by the flusher's queue) does not count.
pub fn uncached_input(
    dontcache_dirty_bytes: u64,
    domain_dirty_bytes: u64,
    cfg: &Config,
    write_bw_bytes_per_s: u64,
    dirtied_bytes: u64,
) -> ThrottleInput {
    let buffered_dirty_bytes = domain_dirty_bytes.saturating_sub(dontcache_dirty_bytes);
    ThrottleInput {
        nr_dirty_bytes: dontcache_dirty_bytes,
        dirty_background_bytes: 0,
        dirty_limit_bytes: cfg.dirty_background_bytes / 2 + buffered_dirty_bytes,
        write_bw_bytes_per_s,
        dirtied_bytes,
        pause_max: Duration::from_millis(cfg.throttle_pause_ms_max),
    }
}

/// Whether a writer that dirtied `dirtied_bytes` since its last check must
/// look at its pause now: past freerun, every `ratelimit` bytes, and at or
/// over the limit, every write.
fn check_due(input: &ThrottleInput, ratelimit: u64) -> bool {
    let freerun = freerun_bytes(input.dirty_background_bytes, input.dirty_limit_bytes);
    input.nr_dirty_bytes > freerun
        && (input.dirtied_bytes >= ratelimit || input.nr_dirty_bytes >= input.dirty_limit_bytes)
}

/// Throttles a writer that just dirtied `newly_bytes` in `domain`, as
/// `balance_dirty_pages` does: rate-limited checks, a pause from the pure
/// policy above, and waiting for writeback progress while over the dirty
/// limit. An uncached writer ([`Caching::Uncached`]) is also held to
/// [`uncached_input`]'s bound.
pub fn balance_dirty(domain: &DomainDirty, cfg: &Config, newly_bytes: u64, caching: Caching) {
    let cache = &domain.cache;
    let dirtied = DIRTIED_SINCE_CHECK.with(|c| {
        c.set(c.get() + newly_bytes);
        c.get()
    });
    let dirty = cache.dirty_bytes();
    if dirty > cfg.dirty_background_bytes {
        domain.kick(Work::Background);
    }
    // A light writer is not paced: what it dirties is small by definition,
    // and the room it takes is bounded by `dirty_limit` all the same.
    if note_dirtied(cfg, newly_bytes) {
        return;
    }
    let pause_max = Duration::from_millis(cfg.throttle_pause_ms_max);
    let inputs = |dirtied: u64| {
        let bw = domain.write_bw_bytes_per_s.load(Ordering::Relaxed);
        let global = ThrottleInput {
            nr_dirty_bytes: cache.dirty_bytes(),
            dirty_background_bytes: cfg.dirty_background_bytes,
            dirty_limit_bytes: cfg.dirty_limit_bytes,
            write_bw_bytes_per_s: bw,
            dirtied_bytes: dirtied,
            pause_max,
        };
        let uncached = caching.is_uncached().then(|| {
            uncached_input(
                domain.dontcache_dirty_bytes.load(Ordering::Acquire),
                domain.nr_dirty_bytes.load(Ordering::Acquire),
                cfg,
                bw,
                dirtied,
            )
        });
        (global, uncached)
    };
    let ratelimit = ratelimit_bytes(cfg.dirty_limit_bytes);
    let (global, uncached) = inputs(dirtied);
    if !check_due(&global, ratelimit) && !uncached.is_some_and(|u| check_due(&u, ratelimit)) {
        return;
    }
    DIRTIED_SINCE_CHECK.with(|c| c.set(0));
    let started = Instant::now();
    let mut paused = false;
    // The pause is re-evaluated whenever writeback completes: the writer
    // owes `pause(dirty now)` of waiting for what it dirtied, and is let
    // go as soon as the time waited covers it. Dirty falling releases it
    // early; dirty staying high keeps it the full pause.
    loop {
        let (global, uncached) = inputs(dirtied);
        let pause = throttle_pause(&global).max(uncached.map_or(Duration::ZERO, |u| throttle_pause(&u)));
        let waited = started.elapsed();
        if pause <= waited || cache.is_closed() {
            break;
        }
        paused = true;
        domain.kick(Work::Background);
        cache.progress.wait((pause - waited).min(Duration::from_millis(10)));
    }
    if paused {
        Counters::add(&cache.counters.throttle_events, 1);
        Counters::add(&cache.counters.throttle_us_total, started.elapsed().as_micros() as u64);
    }
}

/// Called before a write dirties up to `len` bytes: takes that much room
/// under `dirty_limit`, kicking writeback and waiting for it while there is
/// not enough. The room is the writer's until its blocks are dirty in it
/// (or it drops), so dirty + writeback never passes the limit, however many
/// writers and writeback passes race for it. Bytes under writeback count
/// too, as in the kernel's `balance_dirty_pages`: a failed writeback
/// makes them dirty again, and writers that had filled the room they
/// left would push dirty past the limit (while fsyncs kept failing on a
/// full file system, dirty grew to three times the limit).
///
/// A waiting writer is counted in `nr_dirty_waiters`, which makes every
/// flusher write back whatever the background threshold says, so it is
/// released by the writeback it kicked, never by periodic writeback.
///
/// When writeback keeps failing (the dirty data cannot leave the cache)
/// the writer gets the failure's errno (`ENOSPC` on a full file system,
/// `EIO` when there is none) after a second instead of hanging, as
/// `write(2)` reports a recorded writeback error; nothing of its write
/// was applied.
pub fn wait_for_dirty_room<'d>(domain: &'d DomainDirty, cfg: &Config, len: u64) -> io::Result<DirtyRoom<'d>> {
    let cache = &domain.cache;
    let limit = room_limit_bytes(cfg);
    debug_assert!(len <= room_bytes_max(cfg), "writers ask for at most room_bytes_max ({len})");
    let room = len.min(limit);
    if let Some(taken) = domain.try_take_room(room, limit) {
        return Ok(taken);
    }
    if cache.is_closed() {
        // The write fails further on; nothing to hold for it.
        return Ok(domain.no_room());
    }
    let started = Instant::now();
    let errors_before = cache.counters.writeback_errors.load(Ordering::Acquire);
    let _waiting = DirtyWaiter::register(&cache.nr_dirty_waiters);
    let result = loop {
        // Read before trying: room given back after the try wakes the wait.
        let progress = cache.progress.generation();
        if let Some(taken) = domain.try_take_room(room, limit) {
            break Ok(taken);
        }
        if cache.is_closed() {
            break Ok(domain.no_room());
        }
        // Every domain, not only the writer's: the limit is cache-wide,
        // and the bytes holding this writer may sit on another device.
        cache.kick_all(Work::Background);
        cache.progress.wait_since(progress, Duration::from_millis(cfg.throttle_pause_ms_max.min(50)));
        let failing = cache.counters.writeback_errors.load(Ordering::Acquire) > errors_before;
        if failing && started.elapsed() > Duration::from_secs(1) {
            let errno = cache.counters.last_writeback_errno.load(Ordering::Acquire);
            break Err(io::Error::from_raw_os_error(if errno > 0 { errno } else { libc::EIO }));
        }
    };
    Counters::add(&cache.counters.throttle_events, 1);
    Counters::add(&cache.counters.throttle_us_total, started.elapsed().as_micros() as u64);
    result
}

/// The most dirty room one writer waits for at a time: a quarter of
/// `dirty_limit` (so several writers fit under it at once), at least one
/// block. Writes dirtying more are cut into parts of this size, each
/// waiting for its own room.
pub fn room_bytes_max(cfg: &Config) -> u64 {
    (cfg.dirty_limit_bytes / 4 / BLOCK_SIZE as u64 * BLOCK_SIZE as u64).max(BLOCK_SIZE as u64)
}

/// One writer counted in `nr_dirty_waiters` for as long as it lives,
/// whichever way the wait ends.
struct DirtyWaiter<'a>(&'a AtomicU64);

impl<'a> DirtyWaiter<'a> {
    fn register(nr_waiters: &'a AtomicU64) -> DirtyWaiter<'a> {
        // SeqCst: see `DirtyRoom`'s drop, which reads this after giving
        // room back.
        nr_waiters.fetch_add(1, Ordering::SeqCst);
        DirtyWaiter(nr_waiters)
    }
}

impl Drop for DirtyWaiter<'_> {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "dirty waiter count underflow");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A writer is light until it dirtied more than a sixty-fourth of
    /// `dirty_limit` lately; heavy, it stops a sixteenth short of the
    /// limit; its past is forgotten with a 100 ms half-life.
    #[test]
    fn light_writers_keep_the_last_sixteenth() {
        let cfg = Config::from_options("capacity=256M,dirty_limit=128M").unwrap();
        std::thread::spawn(move || {
            assert_eq!(light_reserve_bytes(&cfg), 8 * MIB);
            assert_eq!(room_limit_bytes(&cfg), 128 * MIB, "a new thread is light");
            assert!(note_dirtied(&cfg, MIB), "1 MiB: light");
            assert!(!note_dirtied(&cfg, 2 * MIB), "3 MiB at once: heavy");
            assert_eq!(room_limit_bytes(&cfg), 120 * MIB);
            std::thread::sleep(Duration::from_millis(300));
            assert!(thread_is_light(&cfg), "three half-lives later, under 0.4 MiB remembered");
            assert_eq!(room_limit_bytes(&cfg), 128 * MIB);
        })
        .join()
        .unwrap();
        // A limit so small that the largest request needs all of it keeps
        // no reserve.
        let tiny = Config::from_options("capacity=1M,dirty_limit=16K,dirty_background=8K,folio_max=4K").unwrap();
        assert_eq!(light_reserve_bytes(&tiny), 0);
    }

    /// Alone, an uncached writer runs free up to a quarter of
    /// `dirty_background` of its own backlog (uncached dirty data not yet
    /// under writeback), is paced above it and held at half of it; beside
    /// buffered dirty data its bound grows by as much.
    #[test]
    fn uncached_writers_are_held_to_their_backlog() {
        let cfg = Config::from_options("capacity=256M,dirty_limit=128M,dirty_background=64M").unwrap();
        let at = |dontcache_dirty: u64| uncached_input(dontcache_dirty, dontcache_dirty, &cfg, 500 * MIB, MIB);
        assert_eq!(throttle_pause(&at(16 * MIB)), Duration::ZERO, "freerun up to 16M");
        let paced = throttle_pause(&at(20 * MIB));
        assert!(paced > Duration::ZERO && paced < Duration::from_millis(200), "paced: {paced:?}");
        assert!(throttle_pause(&at(28 * MIB)) > paced, "more backlog, longer pause");
        assert_eq!(throttle_pause(&at(32 * MIB)), Duration::from_millis(200), "held at 32M");
        assert!(check_due(&at(32 * MIB), 1 << 30), "at the limit every write checks");
        assert!(!check_due(&at(16 * MIB), 0), "under freerun no write checks");
        // Beside 96M of buffered dirty data, 32M of backlog runs free.
        let beside = uncached_input(32 * MIB, 128 * MIB, &cfg, 500 * MIB, MIB);
        assert_eq!(beside.dirty_limit_bytes, 128 * MIB);
        assert_eq!(throttle_pause(&beside), Duration::ZERO);
    }

    fn input(dirty: u64) -> ThrottleInput {
        ThrottleInput {
            nr_dirty_bytes: dirty,
            dirty_background_bytes: 100 * MIB,
            dirty_limit_bytes: 250 * MIB,
            write_bw_bytes_per_s: 500 * MIB,
            dirtied_bytes: MIB,
            pause_max: Duration::from_millis(200),
        }
    }

    /// Just under a huge limit the rate nearly vanishes: the pause is the
    /// longest allowed one, never an overflow (found by review: a panic
    /// inside `balance_dirty`, after the write was already applied).
    #[test]
    fn a_vanishing_rate_pauses_the_longest_without_overflow() {
        let limit = 64 << 30;
        for dirty in [limit - 4096, limit - 1, limit - (1 << 20)] {
            let inp = ThrottleInput {
                nr_dirty_bytes: dirty,
                dirty_background_bytes: limit * 2 / 5,
                dirty_limit_bytes: limit,
                write_bw_bytes_per_s: MIB,
                dirtied_bytes: MIB,
                pause_max: Duration::from_millis(200),
            };
            assert_eq!(throttle_pause(&inp), Duration::from_millis(200), "dirty {dirty}");
        }
    }

    #[test]
    fn no_pause_below_freerun() {
        assert_eq!(freerun_bytes(100 * MIB, 250 * MIB), 175 * MIB);
        for dirty in [0, 50 * MIB, 175 * MIB] {
            assert_eq!(throttle_pause(&input(dirty)), Duration::ZERO);
        }
    }

    #[test]
    fn pause_grows_smoothly_with_excess_and_has_no_cliff() {
        let mut prev = Duration::ZERO;
        let step = MIB / 16;
        let mut dirty = 175 * MIB;
        while dirty < 250 * MIB {
            let p = throttle_pause(&input(dirty));
            assert!(p >= prev, "pause is monotonic at {dirty}");
            // No cliff: one step of dirtying never adds more than a quarter
            // of the maximum pause, except in the final approach where the
            // pause saturates at pause_max.
            if p < Duration::from_millis(200) {
                assert!(p - prev <= Duration::from_millis(50), "jump at {dirty}: {prev:?} -> {p:?}");
            }
            prev = p;
            dirty += step;
        }
        assert_eq!(throttle_pause(&input(250 * MIB)), Duration::from_millis(200));
        assert_eq!(throttle_pause(&input(999 * MIB)), Duration::from_millis(200));
    }

    #[test]
    fn faster_writeback_means_shorter_pauses() {
        let mut slow = input(200 * MIB);
        slow.write_bw_bytes_per_s = 50 * MIB;
        let fast = input(200 * MIB);
        assert!(throttle_pause(&slow) > throttle_pause(&fast));
    }

    #[test]
    fn pos_ratio_is_bounded_and_monotonic() {
        let mut prev = 2.0;
        for i in 0..=300 {
            let r = pos_ratio(&input(i * MIB));
            assert!((0.0..=2.0).contains(&r));
            assert!(r <= prev + 1e-12);
            prev = r;
        }
    }

    #[test]
    fn ratelimit_is_clamped() {
        assert_eq!(ratelimit_bytes(0), 16 << 10);
        assert_eq!(ratelimit_bytes(64 * MIB), 256 << 10);
        assert_eq!(ratelimit_bytes(1 << 40), 1 << 20);
    }
}
