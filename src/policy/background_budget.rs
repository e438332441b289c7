//! Background writeback that yields to foreground latency, after the block
//! layer's writeback throttling (blk-wbt, `block/blk-wbt.c`): callers that
//! wait for the device (a commit: a whole fsync / fdatasync of a file with
//! at most `io_max` dirty or under writeback when it began, its writes and
//! the store sync after them; a read miss) report how long they waited;
//! every window of
//! [`WINDOW`] is judged by its median wait. blk-wbt judges by the fastest
//! read, which only writes queued ahead can make slow; here the fastest
//! said nothing: next to a stream of 1 MiB writes whose median commit
//! waited 1.2 ms, windows' fastest waits were 17-77 µs (a call that found
//! the device idle between two passes). A window whose median
//! missed `sync_latency_target_us` halves the largest background I/O a domain
//! submits, down to [`IO_BYTES_MIN`]; a window that met it, or saw no
//! foreground wait at all, doubles it back towards `io_max`. The
//! background bytes a worker keeps queued while such callers are recent
//! scale with it (`writeback::policy::async_queue_bytes_while_sync`).
//!
//! Why the I/O size and not the depth: on this project's virtio disk a
//! request waits for the whole of every request ahead of it, and a 4 KiB
//! commit next to a stream took 1.4 ms behind 1 MiB background writes
//! whether one or 128 were allowed in flight, 0.24 ms behind 128 KiB
//! writes. The depth while a waiter is present stays
//! `async_depth_while_sync`.
//!
//! Invariants: the scale step stays in `0..=step_max`, so the budget stays
//! in `IO_BYTES_MIN.min(io_max)..=io_max` and is a power-of-two fraction
//! of `io_max`; a window is judged once, by whoever first finds it over;
//! the decision itself is the pure [`next_step`]. Owned by a writeback
//! domain's accounting; writers of samples and readers of the budget are
//! any threads.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::base::locks;
use crate::stats::{Counters, LatencyHistogram};

/// How long one latency window lasts (blk-wbt's default window).
pub const WINDOW: Duration = Duration::from_millis(100);

/// The smallest background I/O the budget goes down to. Below it a stream
/// loses more throughput than a commit gains: next to a stream, 32 KiB
/// I/Os left it 1.4 GB/s against 1.8 at 64 KiB, for a commit 0.04 ms
/// faster. Since the queue kept while sync callers are recent scales with
/// the I/O size (`writeback::policy::async_queue_bytes_while_sync`), the
/// floor is also the fewest bytes a worker keeps queued then.
pub const IO_BYTES_MIN: u64 = 64 << 10;

/// What one window saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowSummary {
    pub samples: u64,
    pub latency_us_min: u64,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
}

/// The scale step after a window: one step smaller (halving the budget)
/// when the window's median foreground wait missed `target_us`, one step
/// back when it met it or had no foreground wait; 0 always when the
/// adaptation is off (`target_us` 0).
pub fn next_step(step: u32, window: &WindowSummary, target_us: u64, step_max: u32) -> u32 {
    if target_us == 0 {
        return 0;
    }
    if window.samples > 0 && window.latency_us_p50 > target_us {
        (step + 1).min(step_max)
    } else {
        step.saturating_sub(1)
    }
}

/// The window being gathered: its waits in the stats' histogram (whose
/// percentiles are bucket bounds, about 19% wide) and the exact fastest.
struct Window {
    started: Instant,
    latency_us_min: u64,
    latency: LatencyHistogram,
}

impl Window {
    fn new(started: Instant) -> Window {
        Window { started, latency_us_min: u64::MAX, latency: LatencyHistogram::default() }
    }

    fn summary(&self) -> WindowSummary {
        let s = self.latency.summary();
        if s.count == 0 {
            return WindowSummary::default();
        }
        WindowSummary {
            samples: s.count,
            latency_us_min: self.latency_us_min,
            latency_us_p50: s.p50_us,
            latency_us_p99: s.p99_us,
        }
    }
}

/// A domain's background I/O budget and the window that adjusts it.
pub struct BackgroundBudget {
    target_us: u64,
    io_max_bytes: u64,
    step_max: u32,
    step: AtomicU32,
    epoch: Instant,
    /// When the current window ends, in nanoseconds since `epoch`: readers
    /// of the budget take the lock only once it is over.
    window_end_ns: AtomicU64,
    window: Mutex<Window>,
    counters: Arc<Counters>,
}

impl BackgroundBudget {
    pub fn new(target_us: u64, io_max_bytes: u64, counters: Arc<Counters>) -> BackgroundBudget {
        let step_max = if io_max_bytes > IO_BYTES_MIN { (io_max_bytes / IO_BYTES_MIN).ilog2() } else { 0 };
        let epoch = Instant::now();
        counters.background_io_bytes_max.store(io_max_bytes, Ordering::Relaxed);
        BackgroundBudget {
            target_us,
            io_max_bytes,
            step_max,
            step: AtomicU32::new(0),
            epoch,
            window_end_ns: AtomicU64::new(WINDOW.as_nanos() as u64),
            window: Mutex::new(Window::new(epoch)),
            counters,
        }
    }

    /// Whether foreground latency is measured at all.
    pub fn is_on(&self) -> bool {
        self.target_us > 0
    }

    /// A foreground wait of `latency` that ended now.
    pub fn record(&self, latency: Duration) {
        self.record_at(Instant::now(), latency);
    }

    /// The largest background I/O to build now, in bytes.
    pub fn io_bytes_max(&self) -> u64 {
        self.io_bytes_max_at(Instant::now())
    }

    pub fn record_at(&self, now: Instant, latency: Duration) {
        if !self.is_on() {
            return;
        }
        let mut w = locks::lock(&self.window);
        self.close_window_if_over(&mut w, now);
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        w.latency_us_min = w.latency_us_min.min(us);
        w.latency.record(us);
        debug_assert!(w.latency_us_min <= us, "the sample is in its window");
    }

    pub fn io_bytes_max_at(&self, now: Instant) -> u64 {
        if self.is_on() && self.ns_since_epoch(now) >= self.window_end_ns.load(Ordering::Acquire) {
            let mut w = locks::lock(&self.window);
            self.close_window_if_over(&mut w, now);
        }
        self.budget_of(self.step.load(Ordering::Acquire))
    }

    fn budget_of(&self, step: u32) -> u64 {
        debug_assert!(step <= self.step_max, "step {step} past {}", self.step_max);
        self.io_max_bytes >> step
    }

    fn ns_since_epoch(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// Judges the window if it is over (and every empty window after it,
    /// as one: a quiet stretch grows the budget back a step per window).
    fn close_window_if_over(&self, w: &mut Window, now: Instant) {
        let elapsed = now.saturating_duration_since(w.started);
        if elapsed < WINDOW {
            return;
        }
        let summary = w.summary();
        let step_before = self.step.load(Ordering::Acquire);
        let mut step = next_step(step_before, &summary, self.target_us, self.step_max);
        let quiet_windows = (elapsed.as_nanos() / WINDOW.as_nanos()) as u64 - 1;
        for _ in 0..quiet_windows.min(u64::from(self.step_max)) {
            step = next_step(step, &WindowSummary::default(), self.target_us, self.step_max);
        }
        self.step.store(step, Ordering::Release);
        *w = Window::new(now);
        self.window_end_ns.store(self.ns_since_epoch(now) + WINDOW.as_nanos() as u64, Ordering::Release);
        let c = &self.counters;
        match step.cmp(&step_before) {
            std::cmp::Ordering::Greater => c.background_scaled_down.fetch_add(1, Ordering::Relaxed),
            std::cmp::Ordering::Less => c.background_scaled_up.fetch_add(1, Ordering::Relaxed),
            std::cmp::Ordering::Equal => 0,
        };
        c.background_io_bytes_max.store(self.budget_of(step), Ordering::Relaxed);
        if summary.samples > 0 {
            c.foreground_latency_us_min.store(summary.latency_us_min, Ordering::Relaxed);
            c.foreground_latency_us_p99.store(summary.latency_us_p99, Ordering::Relaxed);
        }
        debug_assert!(step <= self.step_max && w.latency_us_min == u64::MAX, "a new, empty window at a valid step");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn summary(samples: u64, latency_us_min: u64) -> WindowSummary {
        WindowSummary { samples, latency_us_min, latency_us_p50: latency_us_min, latency_us_p99: latency_us_min }
    }

    #[test]
    fn next_step_for_every_case() {
        for step in 0..=5 {
            // Missed: one step down, never past the last.
            assert_eq!(next_step(step, &summary(3, 501), 500, 5), (step + 1).min(5));
            // Met (at the target exactly too), or quiet: one step back.
            assert_eq!(next_step(step, &summary(3, 500), 500, 5), step.saturating_sub(1));
            assert_eq!(next_step(step, &summary(0, 0), 500, 5), step.saturating_sub(1));
            // Off.
            assert_eq!(next_step(step, &summary(3, 10_000), 0, 5), 0);
        }
    }

    #[test]
    fn the_budget_halves_on_missed_windows_and_grows_back() {
        let b = BackgroundBudget::new(500, MIB, Arc::default());
        let t0 = b.epoch;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(b.io_bytes_max_at(at(0)), MIB);
        // Windows whose median wait was 2 ms or more: 1 MiB → 64 KiB, no lower.
        let mut expected = MIB;
        for window in 0..7u64 {
            b.record_at(at(window * 100 + 10), Duration::from_millis(2));
            b.record_at(at(window * 100 + 20), Duration::from_millis(3));
            expected = (expected / 2).max(IO_BYTES_MIN);
            assert_eq!(b.io_bytes_max_at(at(window * 100 + 100)), expected, "after window {window}");
        }
        let c = &b.counters;
        assert_eq!(c.background_scaled_down.load(Ordering::Relaxed), u64::from((MIB / IO_BYTES_MIN).ilog2()));
        assert_eq!(c.foreground_latency_us_min.load(Ordering::Relaxed), 2000);
        assert_eq!(c.foreground_latency_us_p99.load(Ordering::Relaxed), 3000);
        // A window whose median met the target: one step back.
        b.record_at(at(705), Duration::from_micros(300));
        b.record_at(at(710), Duration::from_micros(350));
        b.record_at(at(720), Duration::from_millis(9));
        assert_eq!(b.io_bytes_max_at(at(800)), 2 * IO_BYTES_MIN);
        // Three quiet windows: three steps back at once.
        assert_eq!(b.io_bytes_max_at(at(1100)), 16 * IO_BYTES_MIN);
        assert_eq!(c.background_scaled_up.load(Ordering::Relaxed), 2);
        assert_eq!(c.background_io_bytes_max.load(Ordering::Relaxed), 16 * IO_BYTES_MIN);
        // Long quiet: back to io_max, not past it.
        assert_eq!(b.io_bytes_max_at(at(5000)), MIB);
    }

    #[test]
    fn off_or_small_io_max_never_changes_the_budget() {
        let off = BackgroundBudget::new(0, MIB, Arc::default());
        let t0 = off.epoch;
        off.record_at(t0 + Duration::from_millis(10), Duration::from_secs(1));
        assert_eq!(off.io_bytes_max_at(t0 + Duration::from_millis(500)), MIB);
        let small = BackgroundBudget::new(500, 16 << 10, Arc::default());
        small.record_at(t0 + Duration::from_millis(10), Duration::from_secs(1));
        assert_eq!(small.io_bytes_max_at(t0 + Duration::from_millis(500)), 16 << 10);
    }
}
