//! A lock-free histogram of microseconds (or of any small quantity: the
//! device account also keeps KiB and queue depths in one), and its summary.
//! Any thread records; a summary reads every bucket once, so one taken
//! while others record is a consistent-enough picture, never a torn count.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A latency histogram that many threads record into without a lock:
/// buckets of a quarter power of two of microseconds (each about 19%
/// wide), from 1 µs to about 2^40 µs, and the exact maximum.
pub struct LatencyHistogram {
    buckets: [AtomicU64; LatencyHistogram::BUCKETS],
    latency_us_max: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram { buckets: std::array::from_fn(|_| AtomicU64::new(0)), latency_us_max: AtomicU64::new(0) }
    }
}

impl LatencyHistogram {
    const SUB_BUCKETS: u32 = 4;
    const BUCKETS: usize = 40 * LatencyHistogram::SUB_BUCKETS as usize;

    /// The bucket of `us`: one per microsecond below 4 µs, then a quarter
    /// power of two each, by the two bits below the leading one.
    fn bucket_of(us: u64) -> usize {
        if us < 4 {
            return us as usize;
        }
        let log2 = 63 - us.leading_zeros();
        let sub = (us >> (log2 - 2)) & 3;
        (4 + ((log2 - 2) * Self::SUB_BUCKETS) as usize + sub as usize).min(Self::BUCKETS - 1)
    }

    /// The largest value bucket `i` holds.
    fn bucket_upper_us(i: usize) -> u64 {
        if i < 4 {
            return i as u64;
        }
        let (log2, sub) = ((i as u32 - 4) / Self::SUB_BUCKETS + 2, (i as u64 - 4) % Self::SUB_BUCKETS as u64);
        let base = 1u64 << log2;
        base + (sub + 1) * (base / 4) - 1
    }

    pub fn record(&self, us: u64) {
        self.buckets[Self::bucket_of(us)].fetch_add(1, Relaxed);
        self.latency_us_max.fetch_max(us, Relaxed);
    }

    /// p50, p99 and max: the percentiles as their bucket's upper bound
    /// (capped at the maximum), all 0 when nothing was recorded.
    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let max_us = self.latency_us_max.load(Relaxed);
        let percentile = |p: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = ((total as f64 * p).ceil() as u64).clamp(1, total);
            let mut seen = 0;
            for (i, &n) in counts.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return Self::bucket_upper_us(i).min(max_us);
                }
            }
            max_us
        };
        LatencySummary { count: total, p50_us: percentile(0.50), p99_us: percentile(0.99), max_us }
    }
}

/// A latency histogram summed up: the count, p50, p99 and max.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentiles land in the bucket of the value (within its ~19% width),
    /// never above the maximum, and every value has a bucket.
    #[test]
    fn latency_histogram_percentiles() {
        let h = LatencyHistogram::default();
        assert_eq!(h.summary(), LatencySummary::default(), "empty");
        for us in 1..=1000u64 {
            h.record(us);
        }
        let s = h.summary();
        assert_eq!((s.count, s.max_us), (1000, 1000));
        assert!((500..=600).contains(&s.p50_us), "p50 {s:?}");
        assert!((990..=1000).contains(&s.p99_us), "p99 {s:?}");
        for us in [0u64, 1, 2, 3, 4, 5, 7, 8, 1 << 20, u64::MAX] {
            let i = LatencyHistogram::bucket_of(us);
            assert!(i < LatencyHistogram::BUCKETS);
            if us < 1 << 39 {
                assert!(LatencyHistogram::bucket_upper_us(i) >= us, "{us} fits under its bucket's bound");
                assert!(i == 0 || LatencyHistogram::bucket_upper_us(i - 1) < us, "{us} is not in an earlier bucket");
            }
        }
        let one = LatencyHistogram::default();
        one.record(12_345);
        let s = one.summary();
        assert_eq!((s.p50_us, s.p99_us, s.max_us), (12_345, 12_345, 12_345), "capped at the maximum");
    }
}
