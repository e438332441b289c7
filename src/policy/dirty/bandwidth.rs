//! A domain's writeback bandwidth: the rate its workers together complete
//! writes at, sampled over windows in which at least one of them had
//! writes in flight all along, and averaged into
//! `DomainDirty::write_bw_bytes_per_s`, the rate the throttle paces
//! writers by.
//!
//! Invariants: a window spans from the first worker going busy to the
//! last going idle, or [`BANDWIDTH_SAMPLE_PERIOD`] at most, so two
//! workers' completions make one sample of the device's rate, not two at
//! half of it; each worker is busy at most once at a time. A sample under
//! 256 KiB, or timed at zero, says nothing about the device and is dropped.
//!
//! The window (`BandwidthWindow`, defined with the domain's
//! [`DomainDirty`] in the parent) is a field of the domain, under its own
//! lock, shared by every worker of the domain.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::DomainDirty;
use crate::base::locks;

/// How long a bandwidth sample spans at most.
const BANDWIDTH_SAMPLE_PERIOD: Duration = Duration::from_millis(50);

impl DomainDirty {
    /// Folds one writeback I/O batch into the bandwidth estimate.
    pub fn update_bandwidth(&self, bytes: u64, elapsed: Duration) {
        if bytes < (256 << 10) || elapsed.is_zero() {
            return; // too small to say anything about the device
        }
        let sample = (bytes as f64 / elapsed.as_secs_f64()) as u64;
        let old = self.write_bw_bytes_per_s.load(Ordering::Relaxed);
        self.write_bw_bytes_per_s.store((old * 3 + sample) / 4, Ordering::Relaxed);
    }

    /// A worker now has writes in flight (it had none).
    pub fn writeback_busy(&self) {
        let mut bw = locks::lock(&self.bandwidth);
        bw.busy_workers += 1;
        bw.since.get_or_insert_with(Instant::now);
        debug_assert!(bw.busy_workers <= self.wakeups.len(), "each worker is busy once");
    }

    /// A worker completed writes of `bytes`; `now_idle`: it has none in
    /// flight any more. Samples the domain's rate every
    /// [`BANDWIDTH_SAMPLE_PERIOD`] and when the last busy worker goes idle.
    pub fn writeback_completed(&self, bytes: u64, now_idle: bool) {
        let mut bw = locks::lock(&self.bandwidth);
        debug_assert!(bw.busy_workers > 0 && bw.since.is_some(), "completions come from a busy worker");
        bw.bytes += bytes;
        if now_idle {
            bw.busy_workers -= 1;
        }
        let Some(since) = bw.since else { return };
        let elapsed = since.elapsed();
        let idle = bw.busy_workers == 0;
        if idle || elapsed >= BANDWIDTH_SAMPLE_PERIOD {
            let sampled = std::mem::take(&mut bw.bytes);
            bw.since = if idle { None } else { Some(Instant::now()) };
            drop(bw);
            self.update_bandwidth(sampled, elapsed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::CacheDirty;
    use super::*;
    use crate::policy::background_budget::BackgroundBudget;

    /// Two workers' completions make one sample of the domain's rate, not
    /// two half-rate ones: the window spans from the first busy worker to
    /// the last one going idle.
    #[test]
    fn bandwidth_counts_every_worker() {
        let d = DomainDirty::new(
            &CacheDirty::new(Arc::default(), Arc::default()),
            2,
            BackgroundBudget::new(0, 1 << 20, Arc::default()),
        );
        d.writeback_busy();
        d.writeback_busy();
        std::thread::sleep(Duration::from_millis(20));
        d.writeback_completed(64 << 20, true);
        let before = d.write_bw_bytes_per_s.load(Ordering::Relaxed);
        assert_eq!(before, 100 << 20, "no sample while a worker is still busy (and under 50 ms)");
        d.writeback_completed(64 << 20, true);
        let after = d.write_bw_bytes_per_s.load(Ordering::Relaxed);
        // 128 MiB in a little over 20 ms is over 1 GB/s; averaged in at a
        // quarter weight the estimate rises well past its 100 MiB/s start.
        assert!(after > 300 << 20, "one sample of both workers' bytes: {after}");
    }
}
