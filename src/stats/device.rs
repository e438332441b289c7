//! The device account: what the engine asked of its devices, per class of
//! work, so that a slow commit or read can be traced to what it queued
//! behind. Every I/O the engine submits is counted once in one class, from
//! the moment it leaves the engine (its submission) to its completion: the
//! count, bytes, latency (submission to completion: the block layer, its
//! scheduler and the device), the class's depth in flight, and, for the
//! foreground classes, how many background bytes were in flight when it
//! was submitted. A flush (the store sync after an fsync's writes) also
//! records how many background bytes completed since the previous flush:
//! a device flush makes every completed write durable, so on a disk whose
//! flush costs more the more it makes durable, those are what a commit
//! pays for. Together with the time an fsync waited inside the
//! engine for writeback the flusher had started, that says whether a slow
//! commit waited in the engine, behind background writes in the device
//! queue, or on the flush.
//!
//! Invariants: an [`InFlightIo`] is begun and ended exactly once (ending
//! consumes it), so each class's in-flight gauge returns to zero when the
//! engine is idle and never goes below it; the background bytes in flight
//! likewise. Owned by the cache's [`super::Counters`]; any thread records.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use super::histogram::{LatencyHistogram, LatencySummary};

/// What an I/O the engine submits is for (the last, a buffered write, is
/// not a device request: see its documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceClass {
    /// A read miss a caller waits for.
    Read = 0,
    /// Readahead: a read nobody waits for yet.
    Readahead = 1,
    /// A write an fsync / fdatasync waits for (its own pass, or flusher
    /// I/O it promoted).
    SyncWrite = 2,
    /// Background, periodic, uncached-kick, reclaim and close writeback.
    BackgroundWrite = 3,
    /// The store sync (`fdatasync` / `fsync`) that ends a commit.
    Flush = 4,
    /// A write through the kernel's page cache (a file's partial last
    /// block, a commit's small append past the store's end): a copy into
    /// the kernel's cache that the next flush writes, not a device request
    /// of its own; counted apart, so that the device classes hold device
    /// requests only and a slow copy (the file system blocking it) shows.
    BufferedWrite = 5,
}

impl DeviceClass {
    pub const COUNT: usize = 6;
    pub const ALL: [DeviceClass; DeviceClass::COUNT] = [
        DeviceClass::Read,
        DeviceClass::Readahead,
        DeviceClass::SyncWrite,
        DeviceClass::BackgroundWrite,
        DeviceClass::Flush,
        DeviceClass::BufferedWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DeviceClass::Read => "read",
            DeviceClass::Readahead => "readahead",
            DeviceClass::SyncWrite => "sync_write",
            DeviceClass::BackgroundWrite => "background_write",
            DeviceClass::Flush => "flush",
            DeviceClass::BufferedWrite => "buffered_write",
        }
    }

    /// Whether a caller waits for it now.
    pub fn is_foreground(self) -> bool {
        matches!(self, DeviceClass::Read | DeviceClass::SyncWrite | DeviceClass::Flush | DeviceClass::BufferedWrite)
    }
}

/// One class's counters.
#[derive(Default)]
struct ClassAccount {
    ios: AtomicU64,
    bytes: AtomicU64,
    in_flight: AtomicU64,
    in_flight_max: AtomicU64,
    /// The sum of every completed I/O's latency: over a period, its growth
    /// divided by the period is the class's mean depth in flight.
    latency_us_total: AtomicU64,
    latency: LatencyHistogram,
    /// KiB of background writes in flight at each submission.
    background_ahead_kib: LatencyHistogram,
}

/// One class of [`crate::Stats::device`] summed up: I/Os, bytes, the most
/// in flight, and latencies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceClassSummary {
    pub ios: u64,
    pub bytes: u64,
    pub in_flight_max: u64,
    pub latency_us_total: u64,
    /// Submission to completion, microseconds.
    pub latency_us: LatencySummary,
    /// Background writes in flight when one of these was submitted, KiB.
    pub background_ahead_kib: LatencySummary,
}

/// An I/O between its submission and its completion.
#[must_use = "an I/O begun is ended once, with DeviceAccount::end"]
pub struct InFlightIo {
    class: DeviceClass,
    bytes: u64,
    submitted: Instant,
}

/// The cache's device account (see the module's documentation).
#[derive(Default)]
pub struct DeviceAccount {
    classes: [ClassAccount; DeviceClass::COUNT],
    background_bytes_in_flight: AtomicU64,
    background_bytes_completed: AtomicU64,
    background_bytes_completed_at_flush: AtomicU64,
    flush_covered_background_kib: LatencyHistogram,
    sync_engine_wait_us: LatencyHistogram,
}

impl DeviceAccount {
    /// An I/O of `bytes` in `class` leaves the engine now. A flush also
    /// records the background bytes completed since the previous one.
    pub fn begin(&self, class: DeviceClass, bytes: u64) -> InFlightIo {
        let c = &self.classes[class as usize];
        c.ios.fetch_add(1, Relaxed);
        c.bytes.fetch_add(bytes, Relaxed);
        let depth = c.in_flight.fetch_add(1, Relaxed) + 1;
        c.in_flight_max.fetch_max(depth, Relaxed);
        if class.is_foreground() {
            c.background_ahead_kib.record(self.background_bytes_in_flight.load(Relaxed) >> 10);
        }
        if class == DeviceClass::BackgroundWrite {
            self.background_bytes_in_flight.fetch_add(bytes, Relaxed);
        }
        if class == DeviceClass::Flush {
            let completed = self.background_bytes_completed.load(Relaxed);
            let before = self.background_bytes_completed_at_flush.swap(completed, Relaxed);
            self.flush_covered_background_kib.record(completed.saturating_sub(before) >> 10);
        }
        InFlightIo { class, bytes, submitted: Instant::now() }
    }

    /// The I/O `io` completed now (successfully or not).
    pub fn end(&self, io: InFlightIo) {
        let c = &self.classes[io.class as usize];
        let us = u64::try_from(io.submitted.elapsed().as_micros()).unwrap_or(u64::MAX);
        c.latency.record(us);
        c.latency_us_total.fetch_add(us, Relaxed);
        let before = c.in_flight.fetch_sub(1, Relaxed);
        assert!(before > 0, "{} I/O ended more often than begun", io.class.name());
        if io.class == DeviceClass::BackgroundWrite {
            let before = self.background_bytes_in_flight.fetch_sub(io.bytes, Relaxed);
            assert!(before >= io.bytes, "background bytes in flight never go below zero");
            self.background_bytes_completed.fetch_add(io.bytes, Relaxed);
        }
    }

    /// An fsync / fdatasync waited `us` inside the engine for writeback
    /// the flusher had started before it came.
    pub fn record_sync_engine_wait(&self, us: u64) {
        self.sync_engine_wait_us.record(us);
    }

    pub fn summary(&self, class: DeviceClass) -> DeviceClassSummary {
        let c = &self.classes[class as usize];
        DeviceClassSummary {
            ios: c.ios.load(Relaxed),
            bytes: c.bytes.load(Relaxed),
            in_flight_max: c.in_flight_max.load(Relaxed),
            latency_us_total: c.latency_us_total.load(Relaxed),
            latency_us: c.latency.summary(),
            background_ahead_kib: c.background_ahead_kib.summary(),
        }
    }

    /// Background KiB each flush covered (completed since the previous one).
    pub fn flush_covered_background_kib(&self) -> LatencySummary {
        self.flush_covered_background_kib.summary()
    }

    /// How long fsyncs waited inside the engine for the flusher's writes.
    pub fn sync_engine_wait_us(&self) -> LatencySummary {
        self.sync_engine_wait_us.summary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_counts_the_background_bytes_completed_since_the_last_one() {
        let a = DeviceAccount::default();
        let first = a.begin(DeviceClass::BackgroundWrite, 1 << 20);
        let second = a.begin(DeviceClass::BackgroundWrite, 1 << 20);
        // A read queued behind both.
        a.end(a.begin(DeviceClass::Read, 4096));
        a.end(first);
        a.end(a.begin(DeviceClass::Flush, 0));
        a.end(second);
        a.end(a.begin(DeviceClass::Flush, 0));
        a.end(a.begin(DeviceClass::Flush, 0));
        let covered = a.flush_covered_background_kib();
        assert_eq!((covered.count, covered.max_us), (3, 1024), "1 MiB, 1 MiB, then nothing");
        let w = a.summary(DeviceClass::BackgroundWrite);
        assert_eq!((w.ios, w.bytes, w.in_flight_max), (2, 2 << 20, 2));
        let r = a.summary(DeviceClass::Read);
        assert_eq!((r.ios, r.bytes, r.background_ahead_kib.max_us), (1, 4096, 2048));
        let f = a.summary(DeviceClass::Flush);
        assert_eq!((f.ios, f.background_ahead_kib.max_us), (3, 1024), "the second write was ahead of the first flush");
        assert_eq!(a.background_bytes_in_flight.load(Relaxed), 0, "nothing left in flight");
        assert!(DeviceClass::ALL.iter().all(|&c| a.classes[c as usize].in_flight.load(Relaxed) == 0));
    }
}
