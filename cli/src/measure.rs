//! Measurement primitives: a log-linear latency histogram (nanoseconds in,
//! percentiles in microseconds out) and the per-second / dirty-bytes series
//! the sampler fills.
//!
//! The histogram keeps every value below 128 ns exactly and 64 sub-buckets
//! per power of two above (relative error under 1.6%), in a fixed array, so
//! recording is a few instructions and histograms of several writers merge
//! by adding counts. Maximum and minimum are exact.

use serde::{Deserialize, Serialize};

const EXACT: u64 = 128;
const SUB: u64 = 64;
const BUCKETS: usize = (EXACT + (64 - 7) * SUB) as usize;

fn index_of(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let e = 63 - u64::from(v.leading_zeros()); // 7..=63
    let shift = e - 6;
    let m = v >> shift; // 64..128
    (EXACT + (e - 7) * SUB + (m - SUB)) as usize
}

/// Midpoint of a bucket's value range.
fn value_of(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < EXACT {
        return idx;
    }
    let k = idx - EXACT;
    let e = k / SUB + 7;
    let m = k % SUB + SUB;
    let shift = e - 6;
    (m << shift) + ((1u64 << shift) >> 1)
}

/// Latency histogram in nanoseconds.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum_ns: u64,
    min_ns: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS], count: 0, sum_ns: 0, min_ns: u64::MAX, max_ns: 0 }
    }
}

/// Latency percentiles in microseconds (the JSON `lat_us` object).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// A histogram in transit between the worker and the parent: sparse buckets.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HistData {
    pub buckets: Vec<(u32, u64)>,
    pub count: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl Histogram {
    pub fn record(&mut self, ns: u64) {
        self.counts[index_of(ns)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += *b;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The value at percentile `p` (0..=100), in nanoseconds.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (idx, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return value_of(idx).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    pub fn percentiles(&self) -> Option<Percentiles> {
        if self.count == 0 {
            return None;
        }
        let us = |ns: u64| round3(ns as f64 / 1000.0);
        Some(Percentiles {
            p50: us(self.percentile_ns(50.0)),
            p99: us(self.percentile_ns(99.0)),
            p999: us(self.percentile_ns(99.9)),
            max: us(self.max_ns),
        })
    }

    pub fn to_data(&self) -> HistData {
        let buckets =
            self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i as u32, c)).collect::<Vec<_>>();
        HistData { buckets, count: self.count, sum_ns: self.sum_ns, min_ns: self.min_ns, max_ns: self.max_ns }
    }

    pub fn from_data(d: &HistData) -> Histogram {
        let mut h = Histogram::default();
        for &(i, c) in &d.buckets {
            if let Some(slot) = h.counts.get_mut(i as usize) {
                *slot += c;
            }
        }
        h.count = d.count;
        h.sum_ns = d.sum_ns;
        h.min_ns = d.min_ns;
        h.max_ns = d.max_ns;
        h
    }
}

/// Rounds to three decimals (JSON numbers stay readable).
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Per-second byte counts of one writer or reader: `(bytes, seconds)` per
/// interval; the last interval may be shorter than a second.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Series {
    pub intervals: Vec<(u64, f64)>,
}

impl Series {
    /// MB/s (10^6 bytes per second) per interval; a trailing interval shorter
    /// than 0.1 s is left out (too short to be a rate).
    pub fn mb_s(&self) -> Vec<f64> {
        self.intervals.iter().filter(|(_, d)| *d >= 0.1).map(|(b, d)| round3(*b as f64 / d / 1e6)).collect()
    }

    /// Adds another series interval by interval (aggregate of several jobs).
    pub fn add(&mut self, other: &Series) {
        if self.intervals.len() < other.intervals.len() {
            self.intervals.resize(other.intervals.len(), (0, 0.0));
        }
        for (a, b) in self.intervals.iter_mut().zip(&other.intervals) {
            a.0 += b.0;
            a.1 = a.1.max(b.1);
        }
    }
}

/// Sums several jobs' `(seconds, bytes so far)` samples, taken at the same
/// instants (a job that ended keeps its last count).
pub fn sum_samples(jobs: &[&[(f64, u64)]]) -> Vec<(f64, u64)> {
    let len = jobs.iter().map(|j| j.len()).max().unwrap_or(0);
    (0..len)
        .map(|i| {
            let t = jobs.iter().find_map(|j| j.get(i)).map_or(0.0, |p| p.0);
            let bytes = jobs.iter().map(|j| j.get(i).or(j.last()).map_or(0, |p| p.1)).sum();
            (t, bytes)
        })
        .collect()
}

/// Throughput points `(end of interval in seconds, MB/s)` from cumulative
/// samples, up to `until_s` (the end of the I/O phase: the final fsync is
/// charted on its own). The interval grows with the run so that a 1 s run
/// and a 60 s run both give a readable line: 100 ms up to 10 s, 500 ms up
/// to 50 s, 1 s beyond.
pub fn rate_points(samples: &[(f64, u64)], until_s: f64) -> Vec<(f64, f64)> {
    let width_s = if until_s <= 10.0 {
        0.1
    } else if until_s <= 50.0 {
        0.5
    } else {
        1.0
    };
    let mut points = Vec::new();
    let mut prev = (0.0, 0u64);
    for &(t, bytes) in samples.iter().filter(|p| p.0 <= until_s) {
        // Samples are about 100 ms apart; a point closes once the interval
        // is (nearly) full.
        if t - prev.0 >= width_s * 0.95 {
            points.push((round3(t), round3(bytes.saturating_sub(prev.1) as f64 / (t - prev.0) / 1e6)));
            prev = (t, bytes);
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_within_precision() {
        for v in [0u64, 1, 127, 128, 129, 1000, 4096, 123_456, 9_999_999, u64::MAX / 2] {
            let got = value_of(index_of(v));
            let err = (got as f64 - v as f64).abs() / (v.max(1) as f64);
            assert!(err < 0.016, "{v} -> {got}");
        }
        assert_eq!(index_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn rates_from_samples() {
        // 100 MB/s for 1 s, sampled every 100 ms.
        let job: Vec<(f64, u64)> = (1..=10).map(|i| (i as f64 / 10.0, i * 10_000_000)).collect();
        let pts = rate_points(&job, 1.0);
        assert_eq!(pts.len(), 10);
        assert!(pts.iter().all(|p| (p.1 - 100.0).abs() < 1e-6), "{pts:?}");
        assert_eq!(rate_points(&job, 0.45).len(), 4, "nothing after the I/O phase");
        // Two jobs, one ending early: the sum carries its last count.
        let short: Vec<(f64, u64)> = job[..3].to_vec();
        let sum = sum_samples(&[&job[..], &short[..]]);
        assert_eq!(sum.len(), 10);
        assert_eq!(sum[2].1, 60_000_000);
        assert_eq!(sum[9].1, 100_000_000 + 30_000_000);
        // A long run gets wider intervals.
        let long: Vec<(f64, u64)> = (1..=600).map(|i| (i as f64 / 10.0, i * 1_000_000)).collect();
        assert_eq!(rate_points(&long, 60.0).len(), 60);
    }

    #[test]
    fn percentiles_and_merge() {
        let mut a = Histogram::default();
        for v in 1..=1000u64 {
            a.record(v * 1000);
        }
        let p = a.percentiles().unwrap();
        assert!((p.p50 - 500.0).abs() < 10.0, "{p:?}");
        assert!((p.p99 - 990.0).abs() < 16.0, "{p:?}");
        assert_eq!(p.max, 1000.0);
        let b = Histogram::from_data(&a.to_data());
        let mut c = a.clone();
        c.merge(&b);
        assert_eq!(c.count(), 2000);
        assert_eq!(c.percentiles().unwrap().p50, p.p50);
    }
}
