//! Cache-wide counters (atomics updated on the paths that own each event) and
//! the [`Stats`] snapshot users read, with its JSON form for the C ABI and
//! the CLI.
//!
//! Counters are only ever added to, except the gauges (`cached_bytes`,
//! `dirty_bytes`, `writeback_bytes`, `dontcache_dirty_bytes`,
//! `sync_waiters`), which the
//! owners of the state they measure keep exact.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::config::{Config, OptionValue};

mod device;
mod histogram;
mod per_thread;

pub use device::{DeviceAccount, DeviceClass, DeviceClassSummary, InFlightIo};
pub use histogram::{LatencyHistogram, LatencySummary};
pub use per_thread::PerThreadCount;

/// Why a writeback happened; written bytes are counted per reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Dirty data over the background threshold.
    Background = 0,
    /// Dirty data older than `expire`.
    Periodic = 1,
    /// Kicked by uncached writes.
    Dontcache = 2,
    /// An fsync/fdatasync.
    Fsync = 3,
    /// Memory pressure: eviction found nothing clean.
    Reclaim = 4,
    /// The cache is closing.
    Close = 5,
    /// A [`crate::File::writeback_range`] (`sync_file_range`) call.
    SyncRange = 6,
}

impl Reason {
    pub const COUNT: usize = 7;
    pub const ALL: [Reason; Reason::COUNT] = [
        Reason::Background,
        Reason::Periodic,
        Reason::Dontcache,
        Reason::Fsync,
        Reason::Reclaim,
        Reason::Close,
        Reason::SyncRange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Background => "background",
            Reason::Periodic => "periodic",
            Reason::Dontcache => "dontcache",
            Reason::Fsync => "fsync",
            Reason::Reclaim => "reclaim",
            Reason::Close => "close",
            Reason::SyncRange => "sync_range",
        }
    }
}

/// The class of a writeback I/O: whether an fsync / fdatasync waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoClass {
    /// Written for an fsync or fdatasync: by the caller itself, or by the
    /// flusher after the call promoted it.
    Sync = 0,
    /// Background, periodic, uncached-kick and reclaim writeback.
    Async = 1,
}

impl IoClass {
    pub const COUNT: usize = 2;
    pub const ALL: [IoClass; IoClass::COUNT] = [IoClass::Sync, IoClass::Async];

    pub fn name(self) -> &'static str {
        match self {
            IoClass::Sync => "sync",
            IoClass::Async => "async",
        }
    }
}

/// Live counters shared by the whole cache.
#[derive(Default)]
pub struct Counters {
    pub metadata_bytes: AtomicU64,
    pub dirty_bytes: AtomicU64,
    pub writeback_bytes: AtomicU64,
    pub dontcache_dirty_bytes: AtomicU64,
    /// Reads answered from the cache: counted per thread, as the hit path
    /// writes nothing shared.
    pub hits: PerThreadCount,
    pub misses: AtomicU64,
    /// Lock-free copies of a cached read discarded because a writer
    /// changed the folio meanwhile (see [`Stats::hit_retries`]).
    pub hit_retries: AtomicU64,
    pub evictions: AtomicU64,
    pub readahead_bytes: AtomicU64,
    /// Bytes written back successfully (see [`Stats::written_bytes_total`]),
    /// and the same bytes by [`Reason`] and by [`IoClass`]: all three move
    /// together, in [`Counters::count_written`].
    pub written_bytes_total: AtomicU64,
    pub written_bytes_by_reason: [AtomicU64; Reason::COUNT],
    /// Times a writeback worker was woken: a kick that found its work bit
    /// clear (a kick finding it set coalesces into the wakeup pending).
    pub flusher_wakeups: AtomicU64,
    /// Uncached writes that dirtied new blocks and so asked the flusher to
    /// start (`start_dontcache`); most coalesce, see `flusher_wakeups`.
    pub dontcache_kicks: AtomicU64,
    /// Bytes of drop-behind folios freed once clean: after their writeback
    /// completed, or after an uncached read copied them.
    pub dropbehind_freed_bytes: AtomicU64,
    /// CPU time of the drop-behind reaper thread so far, microseconds.
    pub dropbehind_cpu_us: AtomicU64,
    pub throttle_events: AtomicU64,
    pub throttle_us_total: AtomicU64,
    pub writeback_errors: AtomicU64,
    pub cow_copies: AtomicU64,
    pub bridged_bytes: AtomicU64,
    pub peak_dirty_bytes: AtomicU64,
    pub peak_dirty_writeback_bytes: AtomicU64,
    /// The errno of the latest failed writeback: what a writer held at the
    /// dirty limit by writeback that cannot complete is told.
    pub last_writeback_errno: std::sync::atomic::AtomicI32,
    /// `File::sync_all` / `sync_data` calls, and how long each took.
    pub fsync_latency: LatencyHistogram,
    /// Gauge: fsync / fdatasync / cache sync calls waiting on writeback now.
    pub sync_waiters: AtomicU64,
    /// Bytes of flusher I/O written in the sync class because an fsync
    /// waited for its inode: I/O it held when the fsync came (promoted),
    /// and passes of that inode it collected while the fsync waited.
    pub promoted_bytes: AtomicU64,
    /// Bytes written back successfully, per [`IoClass`] (see
    /// `written_bytes_total`).
    pub written_bytes_by_class: [AtomicU64; IoClass::COUNT],
    /// Microseconds fsync / fdatasync calls spent waiting for writeback
    /// that the flusher had started (async I/O they needed).
    pub sync_wait_async_us_total: AtomicU64,
    /// The most async writeback I/Os one flusher had in flight right after
    /// it submitted one while a sync waiter was present:
    /// `async_depth_while_sync` at most (I/O submitted before the waiter
    /// came is not cut short; none is added past the cap).
    pub async_ios_in_flight_max_while_sync: AtomicU64,
    /// The largest background writeback I/O now (bytes), and how often
    /// foreground latency windows scaled it down and up
    /// ([`crate::policy::background_budget`]).
    pub background_io_bytes_max: AtomicU64,
    pub background_scaled_down: AtomicU64,
    pub background_scaled_up: AtomicU64,
    /// The async bytes one flusher keeps queued while sync callers are
    /// recent, as last applied (scaled with the background I/O size).
    pub background_queue_bytes_while_sync: AtomicU64,
    /// Background writeback I/Os sent in the idle class
    /// (`background_ioprio=idle`), and the times a worker found one waiting
    /// 100 ms and sent its background writeback best effort for a second.
    pub idle_class_ios: AtomicU64,
    pub idle_class_waits_over: AtomicU64,
    /// Periodic writeback rounds that left data older than `expire` dirty
    /// because a read miss was recent (`expire_busy_ms`).
    pub periodic_waits_for_foreground: AtomicU64,
    /// The fastest and the p99 foreground wait of the last window that had
    /// one, in microseconds.
    pub foreground_latency_us_min: AtomicU64,
    pub foreground_latency_us_p99: AtomicU64,
    /// Every writeback worker's own counters, in the order they started.
    pub writeback_workers: std::sync::Mutex<Vec<std::sync::Arc<WorkerCounters>>>,
    /// What the engine asked of its devices, per class of work.
    pub device: DeviceAccount,
}

/// One writeback worker's counters, kept by the worker itself.
#[derive(Default)]
pub struct WorkerCounters {
    /// The domain (backing device) it writes for, and its number there.
    pub device_id: u64,
    pub worker: u32,
    /// Bytes its I/Os wrote successfully, counted as
    /// [`Stats::written_bytes_total`] counts them (its share of that
    /// total: callers' own syncs write the rest), and I/Os completed
    /// (successfully or not).
    pub written_bytes: AtomicU64,
    pub ios: AtomicU64,
    /// Passes it started (inode sweeps that found dirty data).
    pub passes: AtomicU64,
    /// Time it had I/O in flight, in microseconds.
    pub busy_us: AtomicU64,
    /// CPU time its thread used (user + system), in microseconds, as of its
    /// last look (`getrusage(RUSAGE_THREAD)`, at most every 10 ms of work).
    pub cpu_us: AtomicU64,
}

/// A point-in-time copy of one writeback worker's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub device_id: u64,
    pub worker: u32,
    pub written_bytes: u64,
    pub ios: u64,
    pub passes: u64,
    pub busy_us: u64,
    pub cpu_us: u64,
}

impl WorkerCounters {
    pub fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            device_id: self.device_id,
            worker: self.worker,
            written_bytes: self.written_bytes.load(Relaxed),
            ios: self.ios.load(Relaxed),
            passes: self.passes.load(Relaxed),
            busy_us: self.busy_us.load(Relaxed),
            cpu_us: self.cpu_us.load(Relaxed),
        }
    }
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn sub(counter: &AtomicU64, n: u64) {
        let before = counter.fetch_sub(n, Relaxed);
        debug_assert!(before >= n, "gauge underflow: {before} - {n}");
    }

    /// Counts bytes written back successfully for `reason`, given by the
    /// class they were written in: the total and both its breakdowns, so
    /// that each breakdown adds up to the total.
    pub fn count_written(&self, reason: Reason, by_class: [u64; IoClass::COUNT]) {
        let total: u64 = by_class.iter().sum();
        if total == 0 {
            return;
        }
        for (counter, n) in self.written_bytes_by_class.iter().zip(by_class) {
            Counters::add(counter, n);
        }
        Counters::add(&self.written_bytes_by_reason[reason as usize], total);
        Counters::add(&self.written_bytes_total, total);
    }
}

/// A point-in-time copy of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub capacity_bytes: u64,
    pub cached_bytes: u64,
    /// Bytes of metadata: each folio's estimated share (under 1% of cached
    /// bytes for folios of 32 KiB and larger) and the folio indexes'
    /// nodes, counted as they are allocated and freed.
    pub metadata_bytes: u64,
    pub dirty_bytes: u64,
    pub peak_dirty_bytes: u64,
    /// The most bytes that were dirty or under writeback at once: the
    /// quantity `dirty_limit` bounds (the kernel's Dirty + Writeback).
    /// Exact, unlike `dirty_bytes + writeback_bytes` of one snapshot: those
    /// two are read one after the other, and bytes moving between them
    /// meanwhile can be counted in both.
    pub peak_dirty_writeback_bytes: u64,
    pub writeback_bytes: u64,
    pub dontcache_dirty_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub readahead_bytes: u64,
    /// Bytes written back to the backing stores successfully: the dirty
    /// blocks written, and the clean ones bridged between them
    /// (`bridged_bytes`), each block counted whole (4 KiB, the unit the
    /// cache tracks; the file's partial last block too, though only its
    /// bytes within the file's size reach the store). A write that failed
    /// counts nothing (its blocks stay dirty and count when a retry
    /// succeeds). [`Stats::written_bytes_by_reason`] and
    /// [`Stats::written_bytes_by_class`] break it down: each adds up to
    /// it (exactly in a snapshot taken while no writeback completes, e.g.
    /// after a sync).
    pub written_bytes_total: u64,
    /// [`Stats::written_bytes_total`] by [`Reason`] (indexed as
    /// `Reason::ALL`): why each pass wrote.
    pub written_bytes_by_reason: [u64; Reason::COUNT],
    /// Times a writeback worker was woken by a kick (coalesced kicks are
    /// not counted).
    pub flusher_wakeups: u64,
    /// Uncached writes that asked the flusher to start writeback.
    pub dontcache_kicks: u64,
    /// Bytes of drop-behind folios freed once clean (after writeback, or
    /// after an uncached read's copy).
    pub dropbehind_freed_bytes: u64,
    /// CPU time the drop-behind reaper thread used, microseconds: what
    /// freeing behind uncached I/O costs (sampled after each batch).
    pub dropbehind_cpu_us: u64,
    pub throttle_events: u64,
    pub throttle_us_total: u64,
    pub writeback_errors: u64,
    /// Folio buffers copied because a writer touched a folio under writeback.
    pub cow_copies: u64,
    /// Cached reads copy without a lock and check afterwards that no writer
    /// changed the folio meanwhile; this counts the copies discarded (each
    /// is copied again, or under the folio's lock).
    pub hit_retries: u64,
    /// Clean cached bytes written along with dirty neighbours so that one
    /// I/O covers both (a gap of at most two blocks between dirty runs).
    pub bridged_bytes: u64,
    /// `File::sync_all` / `sync_data` calls.
    pub fsyncs: u64,
    /// fsync / fdatasync (and `Cache::sync_all`) calls in progress now.
    pub sync_waiters: u64,
    /// Their latency: p50, p99 (bucket bounds, about 19% wide) and max.
    pub fsync_lat_us: LatencySummary,
    /// Collected background writeback an fsync needed, submitted ahead of
    /// the rest (not written twice).
    pub promoted_bytes: u64,
    /// [`Stats::written_bytes_total`] by [`IoClass`] (indexed as
    /// `IoClass::ALL`): whether an fsync waited for each I/O.
    pub written_bytes_by_class: [u64; IoClass::COUNT],
    /// Time fsync / fdatasync calls waited for writeback the flusher had
    /// started, in microseconds.
    pub sync_wait_async_us_total: u64,
    /// The most async writeback I/Os in flight right after the flusher
    /// submitted one while an fsync waited: `async_depth_while_sync` at most
    /// (what was in flight before the fsync came is not cut short).
    pub async_ios_in_flight_max_while_sync: u64,
    /// The largest background writeback I/O now, in bytes: `io_max`, or
    /// less while foreground waits miss `sync_latency_target_us`.
    pub background_io_bytes_max: u64,
    /// Latency windows that halved the background I/O size, and that grew
    /// it back.
    pub background_scaled_down: u64,
    pub background_scaled_up: u64,
    /// The async bytes one flusher keeps queued while sync callers are
    /// recent (fsyncs or read misses within the last 100 ms to 1 s), as
    /// last applied: 1 MiB scaled down with `background_io_bytes_max`; 0
    /// before any.
    pub background_queue_bytes_while_sync: u64,
    /// Background writeback I/Os sent in the idle class
    /// (`background_ioprio=idle`).
    pub idle_class_ios: u64,
    /// Times a writeback worker found an idle-class I/O waiting 100 ms
    /// (the device's scheduler was busy with other requests) and sent its
    /// background writeback best effort for the next second.
    pub idle_class_waits_over: u64,
    /// Rounds of a writeback worker's periodic writeback that left data
    /// older than `expire_ms` dirty because a read miss had come within
    /// 100 ms: such data waits up to `expire_busy_ms`.
    pub periodic_waits_for_foreground: u64,
    /// The fastest and the p99 foreground wait (a whole fsync or
    /// fdatasync, a read miss) of the last window that had one, in
    /// microseconds; 0 before any.
    pub foreground_latency_us_min: u64,
    pub foreground_latency_us_p99: u64,
    /// `uring`, `threads` or `sim`: the backend actually running.
    pub io_backend: &'static str,
    /// False if any backing store fell back to buffered I/O.
    pub direct_io: bool,
    pub open_inodes: u64,
    /// Each writeback worker of each domain (device), in start order: the
    /// JSON's `writeback_workers` array.
    pub writeback_workers: Vec<WorkerStats>,
    /// The device account, per [`DeviceClass`] (index `class as usize`):
    /// the JSON's `device` object.
    pub device: [DeviceClassSummary; DeviceClass::COUNT],
    /// Background KiB each flush (store sync) covered: written back and
    /// completed since the previous flush (p50, p99, max in the `_us`
    /// fields, which count KiB here).
    pub flush_covered_background_kib: LatencySummary,
    /// How long fsync / fdatasync calls waited inside the engine for
    /// writeback the flusher had started, microseconds.
    pub sync_engine_wait_us: LatencySummary,
    /// The cache's effective configuration (every option, derived defaults
    /// included), printed as the JSON's `config` object when present.
    pub config: Option<Config>,
}

impl Stats {
    /// A snapshot of `c`; `cached_bytes` (kept by the memory account, not
    /// in `c`) is the caller's to fill.
    pub(crate) fn from_counters(c: &Counters, cached_bytes: u64) -> Stats {
        // One summary, so that `fsyncs` is its count.
        let fsync_lat_us = c.fsync_latency.summary();
        let mut by_reason = [0u64; Reason::COUNT];
        for (slot, counter) in by_reason.iter_mut().zip(&c.written_bytes_by_reason) {
            *slot = counter.load(Relaxed);
        }
        Stats {
            written_bytes_total: c.written_bytes_total.load(Relaxed),
            cached_bytes,
            metadata_bytes: c.metadata_bytes.load(Relaxed),
            dirty_bytes: c.dirty_bytes.load(Relaxed),
            peak_dirty_bytes: c.peak_dirty_bytes.load(Relaxed),
            peak_dirty_writeback_bytes: c.peak_dirty_writeback_bytes.load(Relaxed),
            writeback_bytes: c.writeback_bytes.load(Relaxed),
            dontcache_dirty_bytes: c.dontcache_dirty_bytes.load(Relaxed),
            hits: c.hits.sum(),
            misses: c.misses.load(Relaxed),
            evictions: c.evictions.load(Relaxed),
            readahead_bytes: c.readahead_bytes.load(Relaxed),
            written_bytes_by_reason: by_reason,
            flusher_wakeups: c.flusher_wakeups.load(Relaxed),
            dontcache_kicks: c.dontcache_kicks.load(Relaxed),
            dropbehind_freed_bytes: c.dropbehind_freed_bytes.load(Relaxed),
            dropbehind_cpu_us: c.dropbehind_cpu_us.load(Relaxed),
            throttle_events: c.throttle_events.load(Relaxed),
            throttle_us_total: c.throttle_us_total.load(Relaxed),
            writeback_errors: c.writeback_errors.load(Relaxed),
            cow_copies: c.cow_copies.load(Relaxed),
            hit_retries: c.hit_retries.load(Relaxed),
            bridged_bytes: c.bridged_bytes.load(Relaxed),
            fsyncs: fsync_lat_us.count,
            fsync_lat_us,
            sync_waiters: c.sync_waiters.load(Relaxed),
            promoted_bytes: c.promoted_bytes.load(Relaxed),
            written_bytes_by_class: std::array::from_fn(|i| c.written_bytes_by_class[i].load(Relaxed)),
            sync_wait_async_us_total: c.sync_wait_async_us_total.load(Relaxed),
            async_ios_in_flight_max_while_sync: c.async_ios_in_flight_max_while_sync.load(Relaxed),
            background_io_bytes_max: c.background_io_bytes_max.load(Relaxed),
            background_scaled_down: c.background_scaled_down.load(Relaxed),
            background_scaled_up: c.background_scaled_up.load(Relaxed),
            background_queue_bytes_while_sync: c.background_queue_bytes_while_sync.load(Relaxed),
            idle_class_ios: c.idle_class_ios.load(Relaxed),
            idle_class_waits_over: c.idle_class_waits_over.load(Relaxed),
            periodic_waits_for_foreground: c.periodic_waits_for_foreground.load(Relaxed),
            foreground_latency_us_min: c.foreground_latency_us_min.load(Relaxed),
            foreground_latency_us_p99: c.foreground_latency_us_p99.load(Relaxed),
            writeback_workers: crate::base::locks::lock(&c.writeback_workers).iter().map(|w| w.snapshot()).collect(),
            device: DeviceClass::ALL.map(|class| c.device.summary(class)),
            flush_covered_background_kib: c.device.flush_covered_background_kib(),
            sync_engine_wait_us: c.device.sync_engine_wait_us(),
            ..Stats::default()
        }
    }

    /// Bytes written back for `reason`.
    pub fn written_bytes(&self, reason: Reason) -> u64 {
        self.written_bytes_by_reason[reason as usize]
    }

    /// The stats as one JSON object (keys as the field names). The
    /// configuration, when the snapshot carries it, is a `config` object
    /// keyed by option name: sizes in bytes and times in milliseconds as
    /// numbers, `io` as a string.
    pub fn to_json(&self) -> String {
        let mut s = String::from("{");
        let mut num = |k: &str, v: u64| {
            let _ = write!(s, "\"{k}\":{v},");
        };
        num("capacity_bytes", self.capacity_bytes);
        num("cached_bytes", self.cached_bytes);
        num("metadata_bytes", self.metadata_bytes);
        num("dirty_bytes", self.dirty_bytes);
        num("peak_dirty_bytes", self.peak_dirty_bytes);
        num("peak_dirty_writeback_bytes", self.peak_dirty_writeback_bytes);
        num("writeback_bytes", self.writeback_bytes);
        num("dontcache_dirty_bytes", self.dontcache_dirty_bytes);
        num("hits", self.hits);
        num("misses", self.misses);
        num("evictions", self.evictions);
        num("readahead_bytes", self.readahead_bytes);
        num("written_bytes_total", self.written_bytes_total);
        num("flusher_wakeups", self.flusher_wakeups);
        num("dontcache_kicks", self.dontcache_kicks);
        num("dropbehind_freed_bytes", self.dropbehind_freed_bytes);
        num("dropbehind_cpu_us", self.dropbehind_cpu_us);
        num("throttle_events", self.throttle_events);
        num("throttle_us_total", self.throttle_us_total);
        num("writeback_errors", self.writeback_errors);
        num("cow_copies", self.cow_copies);
        num("hit_retries", self.hit_retries);
        num("bridged_bytes", self.bridged_bytes);
        num("open_inodes", self.open_inodes);
        num("fsyncs", self.fsyncs);
        num("sync_waiters", self.sync_waiters);
        num("promoted_bytes", self.promoted_bytes);
        num("sync_wait_async_us_total", self.sync_wait_async_us_total);
        num("async_ios_in_flight_max_while_sync", self.async_ios_in_flight_max_while_sync);
        num("background_io_bytes_max", self.background_io_bytes_max);
        num("background_scaled_down", self.background_scaled_down);
        num("background_scaled_up", self.background_scaled_up);
        num("background_queue_bytes_while_sync", self.background_queue_bytes_while_sync);
        num("idle_class_ios", self.idle_class_ios);
        num("idle_class_waits_over", self.idle_class_waits_over);
        num("periodic_waits_for_foreground", self.periodic_waits_for_foreground);
        num("foreground_latency_us_min", self.foreground_latency_us_min);
        num("foreground_latency_us_p99", self.foreground_latency_us_p99);
        self.write_device_json(&mut s);
        self.write_breakdowns_json(&mut s);
        let _ = write!(s, "],\"io_backend\":\"{}\",\"direct_io\":{}", self.io_backend, self.direct_io);
        if let Some(config) = &self.config {
            s.push_str(",\"config\":{");
            let fields: Vec<String> = config
                .option_values()
                .iter()
                .map(|(key, value)| match value {
                    OptionValue::Bytes(n) | OptionValue::Number(n) => format!("\"{key}\":{n}"),
                    // Option names are plain identifiers: nothing to escape.
                    OptionValue::Name(name) => format!("\"{key}\":\"{name}\""),
                })
                .collect();
            s.push_str(&fields.join(","));
            s.push('}');
        }
        s.push('}');
        s
    }

    /// [`Stats::to_json`]'s device account: a `device` object keyed by
    /// class name, then the flush coverage and the engine wait of syncs.
    fn write_device_json(&self, s: &mut String) {
        let summary =
            |l: &LatencySummary| format!("{{\"p50\":{},\"p99\":{},\"max\":{}}}", l.p50_us, l.p99_us, l.max_us);
        let classes: Vec<String> = DeviceClass::ALL
            .iter()
            .map(|&class| {
                let d = &self.device[class as usize];
                format!(
                    "\"{}\":{{\"ios\":{},\"bytes\":{},\"in_flight_max\":{},\"latency_us_total\":{},\"lat_us\":{},\"background_ahead_kib\":{}}}",
                    class.name(),
                    d.ios,
                    d.bytes,
                    d.in_flight_max,
                    d.latency_us_total,
                    summary(&d.latency_us),
                    summary(&d.background_ahead_kib)
                )
            })
            .collect();
        let _ = write!(
            s,
            "\"device\":{{{}}},\"flush_covered_background_kib\":{},\"sync_engine_wait_us\":{},",
            classes.join(","),
            summary(&self.flush_covered_background_kib),
            summary(&self.sync_engine_wait_us)
        );
    }

    /// [`Stats::to_json`]'s nested part: the fsync latency summary, the
    /// bytes written by class and by reason, and the open `writeback_workers`
    /// array (closed by the caller).
    fn write_breakdowns_json(&self, s: &mut String) {
        let l = &self.fsync_lat_us;
        let _ = write!(s, "\"fsync_lat_us\":{{\"p50\":{},\"p99\":{},\"max\":{}}},", l.p50_us, l.p99_us, l.max_us);
        s.push_str("\"written_bytes_by_class\":{");
        let classes: Vec<String> = IoClass::ALL
            .iter()
            .map(|c| format!("\"{}\":{}", c.name(), self.written_bytes_by_class[*c as usize]))
            .collect();
        s.push_str(&classes.join(","));
        s.push_str("},\"written_bytes_by_reason\":{");
        let reasons: Vec<String> =
            Reason::ALL.iter().map(|r| format!("\"{}\":{}", r.name(), self.written_bytes(*r))).collect();
        s.push_str(&reasons.join(","));
        s.push_str("},\"writeback_workers\":[");
        let workers: Vec<String> = self
            .writeback_workers
            .iter()
            .map(|w| {
                format!(
                    "{{\"device\":{},\"worker\":{},\"written_bytes\":{},\"ios\":{},\"passes\":{},\"busy_us\":{},\"cpu_us\":{}}}",
                    w.device_id, w.worker, w.written_bytes, w.ios, w.passes, w.busy_us, w.cpu_us
                )
            })
            .collect();
        s.push_str(&workers.join(","));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_every_documented_key() {
        let mut st = Stats { io_backend: "uring", direct_io: true, ..Stats::default() };
        st.written_bytes_by_reason[Reason::Fsync as usize] = 42;
        let json = st.to_json();
        for key in [
            "capacity_bytes",
            "cached_bytes",
            "dirty_bytes",
            "writeback_bytes",
            "dontcache_dirty_bytes",
            "hits",
            "misses",
            "hit_retries",
            "evictions",
            "written_bytes_total",
            "written_bytes_by_reason",
            "flusher_wakeups",
            "dontcache_kicks",
            "dropbehind_freed_bytes",
            "dropbehind_cpu_us",
            "throttle_events",
            "throttle_us_total",
            "io_backend",
            "direct_io",
            "writeback_errors",
        ] {
            assert!(json.contains(&format!("\"{key}\":")), "{key} missing in {json}");
        }
        assert!(json.contains("\"fsync\":42"));
        for key in [
            "fsyncs",
            "promoted_bytes",
            "sync_wait_async_us_total",
            "async_ios_in_flight_max_while_sync",
            "background_io_bytes_max",
            "background_scaled_down",
            "background_scaled_up",
            "background_queue_bytes_while_sync",
            "idle_class_ios",
            "idle_class_waits_over",
            "periodic_waits_for_foreground",
            "foreground_latency_us_min",
            "foreground_latency_us_p99",
        ] {
            assert!(json.contains(&format!("\"{key}\":")), "{key} missing in {json}");
        }
        assert!(json.contains("\"fsync_lat_us\":{\"p50\":0,\"p99\":0,\"max\":0}"), "{json}");
        assert!(json.contains("\"written_bytes_by_class\":{\"sync\":0,\"async\":0}"), "{json}");
        assert!(json.contains("\"writeback_workers\":[]"), "{json}");
        st.device[DeviceClass::Flush as usize].ios = 3;
        st.device[DeviceClass::Flush as usize].latency_us.p99_us = 900;
        st.flush_covered_background_kib.max_us = 2048;
        let json = st.to_json();
        assert!(
            json.contains(
                "\"flush\":{\"ios\":3,\"bytes\":0,\"in_flight_max\":0,\"latency_us_total\":0,\
                 \"lat_us\":{\"p50\":0,\"p99\":900,\"max\":0},\"background_ahead_kib\":{\"p50\":0,\"p99\":0,\"max\":0}},\"buffered_write\":{"
            ),
            "{json}"
        );
        for class in DeviceClass::ALL {
            assert!(json.contains(&format!("\"{}\":{{\"ios\":", class.name())), "{json}");
        }
        assert!(json.contains("\"flush_covered_background_kib\":{\"p50\":0,\"p99\":0,\"max\":2048}"), "{json}");
        assert!(json.contains("\"sync_engine_wait_us\":{\"p50\":0,"), "{json}");
        let parsed_device = json.split("\"device\":{").nth(1).expect("a device object");
        assert!(parsed_device.starts_with("\"read\":"), "{json}");
        st.writeback_workers = vec![
            WorkerStats { device_id: 7, worker: 0, written_bytes: 4096, ios: 1, passes: 1, busy_us: 10, cpu_us: 3 },
            WorkerStats { device_id: 7, worker: 1, ..WorkerStats::default() },
        ];
        let json = st.to_json();
        assert!(
            json.contains(
                "\"writeback_workers\":[{\"device\":7,\"worker\":0,\"written_bytes\":4096,\"ios\":1,\"passes\":1,\
                 \"busy_us\":10,\"cpu_us\":3},{\"device\":7,\"worker\":1,\"written_bytes\":0,\"ios\":0,\"passes\":0,\
                 \"busy_us\":0,\"cpu_us\":0}],"
            ),
            "{json}"
        );
        assert!(json.contains("\"direct_io\":true"));
        assert!(json.starts_with('{') && json.ends_with('}'));
        assert!(!json.contains("\"config\""), "no configuration, no config object: {json}");
    }

    /// Bytes written are counted once, in the total and in each breakdown,
    /// so that the breakdowns add up to the total in the snapshot and its
    /// JSON.
    #[test]
    fn written_bytes_breakdowns_add_up() {
        let c = Counters::default();
        c.count_written(Reason::Fsync, [8192, 4096]);
        c.count_written(Reason::Dontcache, [0, 4096]);
        c.count_written(Reason::Background, [0, 0]);
        let st = Stats::from_counters(&c, 0);
        assert_eq!(st.written_bytes_total, 16384);
        assert_eq!(st.written_bytes_by_class, [8192, 8192]);
        assert_eq!(st.written_bytes(Reason::Fsync), 12288);
        assert_eq!(st.written_bytes(Reason::Dontcache), 4096);
        assert_eq!(st.written_bytes_by_reason.iter().sum::<u64>(), st.written_bytes_total);
        let json = st.to_json();
        assert!(json.contains("\"written_bytes_total\":16384,"), "{json}");
        assert!(json.contains("\"written_bytes_by_class\":{\"sync\":8192,\"async\":8192}"), "{json}");
        assert!(json.contains("\"dontcache\":4096,\"fsync\":12288,"), "{json}");
    }

    /// The configuration is added after the counters, every option by its
    /// key with the value the cache uses (derived defaults included).
    #[test]
    fn json_carries_the_effective_configuration() {
        let bare = Stats { io_backend: "threads", ..Stats::default() };
        let config = Config::from_options("capacity=256M;dirty_limit=64M,io=threads").unwrap();
        let st = Stats { config: Some(config), ..bare.clone() };
        let json = st.to_json();
        let counters = bare.to_json();
        assert!(json.starts_with(&counters[..counters.len() - 1]), "existing fields unchanged: {json}");
        let expected = format!(
            ",\"config\":{{\"capacity\":{},\"dirty_limit\":{},\"dirty_background\":{},\"expire_ms\":1000,\"expire_busy_ms\":30000,\
             \"folio_max\":{},\"io_max\":{},\"io\":\"threads\",\"io_depth\":128,\"readahead_max\":{},\
             \"throttle_pause_ms_max\":200,\"bridge_gap\":8192,\"async_depth_while_sync\":1,\
             \"sync_latency_target_us\":200,\"background_ioprio\":\"be\",\"writeback_workers\":2,\"writeback_routing\":\"region\",\"region_size\":{},\
             \"scan_dropbehind\":\"on\",\"stream_dropbehind\":\"on\",\"guardian\":\"on\"}}}}",
            256 << 20,
            64 << 20,
            32 << 20,
            2 << 20,
            1 << 20,
            16 << 20,
            64 << 20
        );
        assert!(json.ends_with(&expected), "{json}");
        for key in crate::config::OPTION_KEYS {
            assert!(json.contains(&format!("\"{key}\":")), "{key} missing in {json}");
        }
    }
}
