//! Every knob of a [`Cache`](crate::Cache), with its default and unit, and the
//! `key=value,...` option-string parser shared by the C ABI and the CLI
//! (and its inverse, [`Config::to_options`]).
//!
//! Invariants checked by [`Config::validate`]: sizes are positive, `folio_max`
//! and `io_max` are powers of two between one block and 1 GiB,
//! `dirty_background < dirty_limit <= capacity`, and `capacity` holds at least
//! a few maximum-size folios so eviction always has room to work.

use std::io;

use crate::io::{IoKind, BLOCK_SIZE};

/// Cache configuration. Build with [`Config::with_capacity`] (the dirty
/// thresholds follow the capacity) and adjust fields, or parse an option
/// string with [`Config::from_options`]. `Config::default()` is
/// `with_capacity(1 GiB)`: lowering only its `capacity_bytes` leaves
/// thresholds sized for 1 GiB, which `validate` rejects below 512 MiB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Upper bound on folio memory, in bytes. Default 1 GiB.
    pub capacity_bytes: u64,
    /// Dirty bytes at which writers are throttled to a stop, in bytes.
    /// Default 50% of `capacity_bytes`: scattered writes merge into fewer,
    /// larger I/Os the more of them wait dirty (see `with_capacity`).
    /// Heavy writers (more than a sixty-fourth of it dirtied lately) stop
    /// a sixteenth short of it, which light writers (a database committing
    /// small transactions beside a bulk writer) keep for themselves; light
    /// writers are not paced below it either.
    pub dirty_limit_bytes: u64,
    /// Dirty bytes at which the flusher starts background writeback.
    /// Default 25% of `capacity_bytes` (half of `dirty_limit` when only that
    /// is lowered in an option string). Any value below `dirty_limit_bytes`
    /// is valid: a writer waiting at the limit makes the flushers write back
    /// whatever this threshold says, so a value close to the limit only
    /// narrows the throttle's smooth zone (writers then run free up to the
    /// limit and wait there for the writeback they started).
    pub dirty_background_bytes: u64,
    /// Dirty data older than this is written back by periodic writeback, in
    /// milliseconds, when no read miss is waiting on the device (see
    /// `expire_busy_ms`). Bounds how long written data stays in memory
    /// only. Default 1000.
    pub expire_ms: u64,
    /// How old dirty data may grow, in milliseconds, while read misses keep
    /// coming (one within the last 100 ms): periodic writeback leaves data
    /// older than `expire_ms` dirty until it is this old or the reads
    /// pause, because each of its writes is a request that reads queue
    /// behind in the device. Fsyncs do not count: the background budget
    /// (`sync_latency_target_us`) answers a commit's wait. Writeback over
    /// `dirty_background`, for a writer waiting at `dirty_limit`, for an
    /// fsync or on close does not wait. At or below `expire_ms`, periodic
    /// writeback never waits (a `Config` that raises `expire_ms` alone past
    /// 30 s keeps working as before). Default 30 × `expire_ms` (30 s, the
    /// kernel's `dirty_expire_centisecs`): next to 70/30 4 KiB random reads
    /// and writes (`wbcache bench -w fio/rand-rw-70-30`, 1G), reads had a
    /// p99 of 322 µs with every write sent back within a second and 138
    /// µs with them kept, the kernel's 95-102 µs. With the guardian on, a
    /// crash of the process loses none of it; a power cut loses at most
    /// this much, as with the kernel.
    pub expire_busy_ms: u64,
    /// Largest folio, in bytes (power of two). Default 2 MiB.
    pub folio_max_bytes: u64,
    /// Largest single I/O built by writeback and readahead, in bytes (power of
    /// two). Default 1 MiB.
    pub io_max_bytes: u64,
    /// I/O backend. Default `uring` (falls back to `threads` when io_uring
    /// cannot be set up).
    pub io: IoKind,
    /// Requests kept in flight by one submitter. Default 128: small random
    /// writeback I/Os need a deep queue (4 KiB O_DIRECT writes on a virtio
    /// disk: ~390 MB/s at depth 32, ~700 MB/s at 128); large I/Os are bounded
    /// by their callers' batch sizes, not by this. With `io=threads` it also
    /// sets the worker count (at most 64).
    pub io_depth: u32,
    /// Largest readahead window, in bytes. Default 16 MiB.
    pub readahead_max_bytes: u64,
    /// Longest single throttle pause, in milliseconds (the kernel's
    /// `MAX_PAUSE`). Default 200.
    pub throttle_pause_ms_max: u64,
    /// Widest gap of clean cached blocks a writeback I/O writes over to
    /// join the dirty runs on either side, in bytes (whole blocks); 0
    /// never writes clean blocks. Default 8 KiB. Rewriting a clean block
    /// assumes the store still holds what the cache holds: set 0 when
    /// something else (another process or cache) writes the same files.
    pub bridge_gap_bytes: u64,
    /// Background (async) writeback I/Os a domain keeps in flight while an
    /// fsync, fdatasync or read miss waits on it, in I/Os (of up to
    /// `io_max`). With nobody waiting, background writeback uses the full
    /// `io_depth` (after a waiter, for twice the gap between waiters, 100 ms
    /// to 1 s, at most 1 MiB per worker, and within 100 ms of one less
    /// while `sync_latency_target_us` shrinks background I/O);
    /// the moment a sync waiter comes, no further async I/O is submitted until
    /// fewer than this many are in flight, so the waiter's own I/O and its
    /// store flush queue behind at most this many, and its blocks that the
    /// flusher had collected are submitted first. Default 1: on this
    /// project's virtio disk, small fsyncs next to two streaming writers
    /// took a p99 of 6.7-6.8 ms at 1, 7.0-7.7 at 2, 9.2 at 4, 16-17 at 8 and
    /// 24-25 ms uncapped, while the writers kept 95% of their throughput
    /// at 1 (`wbcache bench -w fsync-under-load`; docs/performance.md has the table).
    pub async_depth_while_sync: u32,
    /// Foreground latency background writeback yields to, in
    /// microseconds; 0 turns the adaptation off. The block layer's
    /// writeback throttling (blk-wbt) is the model: the latencies of what
    /// callers wait for (whole fsync / fdatasync calls of a file with at
    /// most `io_max` dirty or under writeback when they began, read
    /// misses) are
    /// gathered in windows of 100 ms; when a window's median exceeds this
    /// target, the largest background I/O a domain submits is halved
    /// (from `io_max` down to 64 KiB), and so are the background bytes
    /// each worker keeps queued within 100 ms of a foreground call (1 MiB
    /// at `io_max`, one I/O at least); both double again after each
    /// window that met the target or had no foreground call. Large
    /// background writes are what a commit waits behind on a device that
    /// serves requests in order: on a 2-core VM's virtio disk (Linux 6.18), next to a
    /// stream of 1 MiB writes, a 4 KiB write + fdatasync took 1.4 ms with
    /// 1 MiB background I/Os, 0.24 ms with 128 KiB and 0.16 ms with 64
    /// KiB, while the stream kept 2.9, 2.8 and 1.8 GB/s. Default 200
    /// µs: SQLite next to a stream
    /// (`wbcache bench -w sqlite`, 256M, single runs) committed 2.1× (WAL)
    /// and 2.8× (DELETE) as many transactions per second as with it off,
    /// the stream at 0.85× and 0.72× of its speed; docs/performance.md has the
    /// figures.
    pub sync_latency_target_us: u64,
    /// The I/O priority class background writeback carries to the
    /// device's scheduler: `be` (best effort, as reads and fsyncs; the
    /// default) or `idle`. Schedulers that know only classes, such as
    /// mq-deadline, serve best-effort reads, sync writes and background
    /// writes from one queue (preferring reads); an idle-class request
    /// waits there until no other request does. A request in the kernel
    /// cannot be promoted, so with `idle` the flusher sends in that class
    /// only periodic and over-threshold writeback, never writeback that an
    /// fsync, a writer waiting for dirty room, an uncached writer or
    /// reclaim needs, at most 4 I/Os per worker, and none while one of
    /// them has waited 100 ms or more (and for 1 s after): then background
    /// writeback goes best effort. An fsync that needs a block already
    /// sent in the idle class still waits for it. The `none` scheduler
    /// (NVMe's usual) ignores classes.
    pub background_ioprio: BackgroundIoprio,
    /// Writeback workers (flusher threads) per domain, each with its own
    /// submission queue, 1..=64. `writeback_routing` says how they share
    /// the work; `single` runs one. Default 2, one per core of this
    /// project's 2-core machine: twelve writers of 4 KiB random blocks were
    /// written back at 655 MB/s by 2 region workers and 674 by 4, against
    /// 425 by one, in twelve files, and at 275 / 394 / 137 MB/s in one
    /// shared file (`wbcache bench -w parallel-writeback`); but with 4, one
    /// sequential writer ran at 0.93× the kernel against 1.10× with 2 and
    /// 1.11-1.26× with one (`-w seq-write`, one run each on a noisy
    /// machine). A rule of thumb for larger machines: one per core, more
    /// when many files or one large file are written at random.
    pub writeback_workers: u32,
    /// How a domain's dirty data is split between its writeback workers:
    /// `single` (one worker writes everything), `rotor` (each dirty inode
    /// is bound to one worker, round-robin) or `region` (each backing
    /// store's offset space is cut into `region_size` slices, dealt to the
    /// workers in turn, each store from a different worker; a worker writes
    /// only its regions' blocks, of any inode). Default `region`: as fast
    /// as `rotor` with one file per writer (655 against 646 MB/s at 2
    /// workers) and the only one that splits one file's writeback (275
    /// against 137 MB/s for one shared file at 2 workers, 394 against 139
    /// at 4).
    pub writeback_routing: Routing,
    /// Size of one region of a backing store for `writeback_routing=region`,
    /// in bytes: a power of two, at least `folio_max` (a folio lies in one
    /// region) and at most 1 TiB. Default 64 MiB: one 512 MiB file written
    /// by twelve threads was written back at 427, 394 and 233 MB/s with
    /// 16, 64 and 256 MiB regions (4 workers; fewer regions than workers
    /// leave workers idle), twelve 43 MiB files at 584, 674 and 614.
    pub region_size_bytes: u64,
    /// Whether a sequential scan of a file larger than `capacity` drops
    /// behind what it reads once it has read a quarter of `capacity` (at
    /// most 64 MiB), as
    /// an uncached read does (PostgreSQL reads large tables through a
    /// small ring of buffers for the same reason): the rest of the scan
    /// neither floods the cache nor grows it into fresh memory. Folios
    /// cached before the scan stay. Default on: `wbcache bench -w
    /// seq-read` (a file twice the cache's size, single runs) read at
    /// 0.95-1.03× an O_DIRECT read at 256M and 0.66-1.02× at 1G with it,
    /// against 0.42-0.81× and 0.39-0.59× without it on a 2-core VM
    /// (fresh memory is slow to fault in there). `off` caches every scan
    /// as far as `capacity` allows.
    pub scan_dropbehind: bool,
    /// Whether a handle's long sequential write stream drops behind: once
    /// a handle has written a quarter of `capacity` (at most
    /// 64 MiB) at consecutive offsets, the rest of its
    /// stream is written as uncached writes are (`WriteFlags::DONTCACHE`):
    /// the flusher writes it back at once, the writer is paced by its own
    /// backlog, and its folios leave once written back (a folio read
    /// again before that stays). A backup, a log shipper or a bulk load
    /// then cannot push an application's working set out of the cache
    /// (PostgreSQL writes bulk loads through a small ring of buffers for
    /// the same reason). Default on: SQLite next to a stream of 1 MiB
    /// writes (`wbcache bench -w sqlite`, 256M) missed the cache on about
    /// two reads a transaction with it off and about one in four with it
    /// on. `off` keeps what streams write cached as far as `capacity`
    /// allows; a write the stream makes at another offset starts a new
    /// stream.
    pub stream_dropbehind: bool,
    /// Whether a crash of the process keeps what `write` acknowledged, as
    /// the kernel's page cache does (`guardian`): written data lives in
    /// shared memory and a guardian process writes it to the files if the
    /// process dies without closing the cache. Default on. `off` keeps
    /// written data in the process's own memory (a process crash then
    /// loses what was not written back, as a machine crash does), saving
    /// the guardian process, a copy of a read-filled folio on its first
    /// write, and transparent huge pages for written data where shared
    /// memory gets none.
    pub guardian: bool,
}

/// How a domain's writeback workers share its dirty data (see
/// [`Config::writeback_routing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Routing {
    Single,
    Rotor,
    Region,
}

impl Routing {
    pub fn name(self) -> &'static str {
        match self {
            Routing::Single => "single",
            Routing::Rotor => "rotor",
            Routing::Region => "region",
        }
    }
}

/// The I/O priority class of background writeback (see
/// [`Config::background_ioprio`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackgroundIoprio {
    /// Best effort, the class of everything else the engine submits.
    BestEffort,
    /// The idle class, bounded by the flusher.
    Idle,
}

impl BackgroundIoprio {
    pub fn name(self) -> &'static str {
        match self {
            BackgroundIoprio::BestEffort => "be",
            BackgroundIoprio::Idle => "idle",
        }
    }
}

/// The most a sequential scan of a file larger than the cache caches
/// before `scan_dropbehind` drops the rest behind it. Every byte a scan
/// caches in a cache not yet full is fresh memory, which a 2-core VM
/// faults in at 0.4-2.5 GB/s: with a quarter of a 1 GiB cache (256 MiB),
/// `seq-read --memory 1G` ran at 0.59-0.98× an O_DIRECT read in single
/// runs, with 64 MiB at 0.66-1.02× (and at 256M, where a quarter is 64
/// MiB, at 0.95-1.03×).
pub const SCAN_CACHED_BYTES_MAX: u64 = 64 * MIB;

/// Option keys accepted by [`Config::from_options`], in documentation order.
pub const OPTION_KEYS: &[&str] = &[
    "capacity",
    "dirty_limit",
    "dirty_background",
    "expire_ms",
    "expire_busy_ms",
    "folio_max",
    "io_max",
    "io",
    "io_depth",
    "readahead_max",
    "throttle_pause_ms_max",
    "bridge_gap",
    "async_depth_while_sync",
    "sync_latency_target_us",
    "background_ioprio",
    "writeback_workers",
    "writeback_routing",
    "region_size",
    "scan_dropbehind",
    "stream_dropbehind",
    "guardian",
];

/// [`Config::expire_busy_ms`] follows `expire_ms` at this ratio unless
/// given (30 s at the default 1 s).
pub const EXPIRE_BUSY_PER_EXPIRE: u64 = 30;

/// The default of [`Config::sync_latency_target_us`].
pub const DEFAULT_SYNC_LATENCY_TARGET_US: u64 = 200;

/// The largest [`Config::sync_latency_target_us`] accepted (10 s).
pub const SYNC_LATENCY_TARGET_US_MAX: u64 = 10_000_000;

/// Most writeback workers a domain runs (an inode's listing is a bit mask).
pub const MAX_WRITEBACK_WORKERS: u32 = 64;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// One option's effective value, typed so that each output form (option
/// string, JSON) can print it in its own way from one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OptionValue {
    Bytes(u64),
    Number(u64),
    Name(&'static str),
}

impl Default for Config {
    fn default() -> Self {
        Config::with_capacity(GIB)
    }
}

impl Config {
    /// Defaults, with the dirty thresholds derived from `capacity_bytes`.
    ///
    /// Half the cache may be dirty, and background writeback starts at a
    /// quarter (the kernel's 2:1 ratio of `dirty_ratio` to
    /// `dirty_background_ratio`). The more dirty data waits, the more of it
    /// merges into contiguous runs: 4 KiB random writes over 512 MiB with a
    /// 256 MiB cache ran at 800-820 MB/s with 25% / 10% and at 840-900 MB/s
    /// with 50% / 25% (`wbcache bench -w rand-write`, alternated), while
    /// streaming writers did not change. The other half stays clean, so
    /// eviction always has something to take.
    pub fn with_capacity(capacity_bytes: u64) -> Self {
        Config {
            capacity_bytes,
            dirty_limit_bytes: capacity_bytes / 2,
            dirty_background_bytes: capacity_bytes / 4,
            expire_ms: 1000,
            expire_busy_ms: EXPIRE_BUSY_PER_EXPIRE * 1000,
            folio_max_bytes: 2 * MIB,
            io_max_bytes: MIB,
            io: IoKind::Uring,
            io_depth: 128,
            readahead_max_bytes: 16 * MIB,
            throttle_pause_ms_max: 200,
            bridge_gap_bytes: 2 * BLOCK_SIZE as u64,
            async_depth_while_sync: 1,
            sync_latency_target_us: DEFAULT_SYNC_LATENCY_TARGET_US,
            background_ioprio: BackgroundIoprio::BestEffort,
            writeback_workers: 2,
            writeback_routing: Routing::Region,
            region_size_bytes: 64 * MIB,
            scan_dropbehind: true,
            stream_dropbehind: true,
            guardian: true,
        }
    }

    /// What an inode's dirty index counts per region: log2 of the region
    /// size in blocks under `writeback_routing=region`, nothing otherwise.
    pub(crate) fn region_tracking(&self) -> Option<u32> {
        let shift = (self.region_size_bytes / BLOCK_SIZE as u64).trailing_zeros();
        (self.writeback_routing == Routing::Region).then_some(shift)
    }

    /// The largest readahead window in blocks: `readahead_max`, but at most
    /// an eighth of the capacity, so windows in flight (which cannot be
    /// evicted) never crowd out the cache.
    pub(crate) fn readahead_blocks_max(&self) -> u64 {
        let bytes = self.readahead_max_bytes.min(self.capacity_bytes / 8);
        (bytes / BLOCK_SIZE as u64).max(1)
    }

    /// What a sequential scan of a file larger than the cache caches
    /// before `scan_dropbehind` drops the rest behind it: a quarter of
    /// `capacity`, at most 64 MiB.
    pub(crate) fn scan_cached_bytes(&self) -> u64 {
        (self.capacity_bytes / 4).min(SCAN_CACHED_BYTES_MAX)
    }

    /// Parses `key=value,...`: pairs separated by `,` or `;` (RocksDB's
    /// separator), freely mixed. Sizes are bytes with an optional suffix
    /// (see [`parse_size`]). Keys not given keep their defaults;
    /// `dirty_limit` and `dirty_background` follow `capacity` unless given.
    /// Unknown keys, keys given twice, bad values and inconsistent
    /// combinations are `InvalidInput` errors that name the offending option.
    pub fn from_options(options: &str) -> io::Result<Config> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for item in options.split([',', ';']).map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| invalid(format!("option '{item}' is not key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            if !OPTION_KEYS.contains(&key) {
                return Err(invalid(format!("unknown option '{key}' (known: {})", OPTION_KEYS.join(", "))));
            }
            // Refused rather than last-one-wins: two values for one key are
            // usually two sources (a default string and an override) that
            // disagree, and silently picking one hides which was meant.
            if let Some((_, first)) = pairs.iter().find(|(k, _)| *k == key) {
                return Err(invalid(format!("option '{key}' is given twice ('{key}={first}' and '{key}={value}')")));
            }
            pairs.push((key, value));
        }
        let capacity = match pairs.iter().find(|(k, _)| *k == "capacity") {
            Some((_, v)) => parse_size("capacity", v)?,
            None => GIB,
        };
        let mut config = Config::with_capacity(capacity);
        for (key, value) in &pairs {
            config.set(key, value)?;
        }
        // A lowered dirty_limit takes the default background threshold down
        // with it (keeping the default 1:2 ratio) unless that was given.
        let given = |k: &str| pairs.iter().any(|(key, _)| *key == k);
        // `single` is one worker: naming it alone means one, whatever the
        // default count of the other policies.
        if config.writeback_routing == Routing::Single && !given("writeback_workers") {
            config.writeback_workers = 1;
        }
        if given("expire_ms") && !given("expire_busy_ms") {
            config.expire_busy_ms = config.expire_ms.saturating_mul(EXPIRE_BUSY_PER_EXPIRE);
        }
        if given("dirty_limit") && !given("dirty_background") {
            config.dirty_background_bytes = config.dirty_background_bytes.min(config.dirty_limit_bytes / 2);
        }
        config.validate()?;
        Ok(config)
    }

    /// The whole configuration as an option string: every key, in
    /// documentation order, with its effective value (derived defaults
    /// spelled out), e.g. `capacity=1G,dirty_limit=512M,...`. For a valid
    /// configuration, [`Config::from_options`] gives it back unchanged.
    pub fn to_options(&self) -> String {
        let items: Vec<String> = self
            .option_values()
            .iter()
            .map(|(key, value)| match value {
                OptionValue::Bytes(n) => format!("{key}={}", format_size(*n)),
                OptionValue::Number(n) => format!("{key}={n}"),
                OptionValue::Name(name) => format!("{key}={name}"),
            })
            .collect();
        items.join(",")
    }

    /// Every option's effective value, keyed and ordered as [`OPTION_KEYS`].
    pub(crate) fn option_values(&self) -> [(&'static str, OptionValue); OPTION_KEYS.len()] {
        use OptionValue::{Bytes, Name, Number};
        [
            ("capacity", Bytes(self.capacity_bytes)),
            ("dirty_limit", Bytes(self.dirty_limit_bytes)),
            ("dirty_background", Bytes(self.dirty_background_bytes)),
            ("expire_ms", Number(self.expire_ms)),
            ("expire_busy_ms", Number(self.expire_busy_ms)),
            ("folio_max", Bytes(self.folio_max_bytes)),
            ("io_max", Bytes(self.io_max_bytes)),
            ("io", Name(self.io.name())),
            ("io_depth", Number(u64::from(self.io_depth))),
            ("readahead_max", Bytes(self.readahead_max_bytes)),
            ("throttle_pause_ms_max", Number(self.throttle_pause_ms_max)),
            ("bridge_gap", Bytes(self.bridge_gap_bytes)),
            ("async_depth_while_sync", Number(u64::from(self.async_depth_while_sync))),
            ("sync_latency_target_us", Number(self.sync_latency_target_us)),
            ("background_ioprio", Name(self.background_ioprio.name())),
            ("writeback_workers", Number(u64::from(self.writeback_workers))),
            ("writeback_routing", Name(self.writeback_routing.name())),
            ("region_size", Bytes(self.region_size_bytes)),
            ("scan_dropbehind", Name(if self.scan_dropbehind { "on" } else { "off" })),
            ("stream_dropbehind", Name(if self.stream_dropbehind { "on" } else { "off" })),
            ("guardian", Name(if self.guardian { "on" } else { "off" })),
        ]
    }

    /// Sets one option by its key (as in the option string).
    pub fn set(&mut self, key: &str, value: &str) -> io::Result<()> {
        match key {
            "capacity" => self.capacity_bytes = parse_size(key, value)?,
            "dirty_limit" => self.dirty_limit_bytes = parse_size(key, value)?,
            "dirty_background" => self.dirty_background_bytes = parse_size(key, value)?,
            "expire_ms" => self.expire_ms = parse_number(key, value)?,
            "expire_busy_ms" => self.expire_busy_ms = parse_number(key, value)?,
            "folio_max" => self.folio_max_bytes = parse_size(key, value)?,
            "io_max" => self.io_max_bytes = parse_size(key, value)?,
            "io_depth" => {
                let depth = parse_number(key, value)?;
                self.io_depth = u32::try_from(depth).map_err(|_| invalid(format!("io_depth={depth} is too large")))?;
            }
            "readahead_max" => self.readahead_max_bytes = parse_size(key, value)?,
            "throttle_pause_ms_max" => self.throttle_pause_ms_max = parse_number(key, value)?,
            "bridge_gap" => self.bridge_gap_bytes = parse_size(key, value)?,
            "async_depth_while_sync" => {
                let depth = parse_number(key, value)?;
                self.async_depth_while_sync = u32::try_from(depth)
                    .map_err(|_| invalid(format!("async_depth_while_sync={depth} is too large")))?;
            }
            "sync_latency_target_us" => self.sync_latency_target_us = parse_number(key, value)?,
            "background_ioprio" => {
                self.background_ioprio = match value {
                    "be" => BackgroundIoprio::BestEffort,
                    "idle" => BackgroundIoprio::Idle,
                    other => return Err(invalid(format!("background_ioprio must be 'be' or 'idle', not '{other}'"))),
                }
            }
            "writeback_workers" => {
                let n = parse_number(key, value)?;
                self.writeback_workers =
                    u32::try_from(n).map_err(|_| invalid(format!("writeback_workers={n} is too large")))?;
            }
            "writeback_routing" => {
                self.writeback_routing = match value {
                    "single" => Routing::Single,
                    "rotor" => Routing::Rotor,
                    "region" => Routing::Region,
                    other => {
                        return Err(invalid(format!(
                            "writeback_routing must be 'single', 'rotor' or 'region', not '{other}'"
                        )))
                    }
                }
            }
            "region_size" => self.region_size_bytes = parse_size(key, value)?,
            "scan_dropbehind" => self.scan_dropbehind = parse_switch(key, value)?,
            "stream_dropbehind" => self.stream_dropbehind = parse_switch(key, value)?,
            "guardian" => self.guardian = parse_switch(key, value)?,
            "io" => {
                self.io = match value {
                    "uring" => IoKind::Uring,
                    "threads" => IoKind::Threads,
                    // In memory: durable nowhere. Only this crate's unit tests
                    // reach it by name; others use Cache::with_sim.
                    #[cfg(test)]
                    "sim" => IoKind::Sim,
                    other => return Err(invalid(format!("io must be 'uring' or 'threads', not '{other}'"))),
                }
            }
            other => return Err(invalid(format!("unknown option '{other}'"))),
        }
        Ok(())
    }

    /// Checks the invariants listed in the module docs.
    pub fn validate(&self) -> io::Result<()> {
        let block = BLOCK_SIZE as u64;
        let pow2 = |name: &str, v: u64| {
            if v < block || v > GIB || !v.is_power_of_two() {
                Err(invalid(format!("{name}={} must be a power of two from 4K to 1G", format_size(v))))
            } else {
                Ok(())
            }
        };
        pow2("folio_max", self.folio_max_bytes)?;
        pow2("io_max", self.io_max_bytes)?;
        let (capacity, folio_max) = (format_size(self.capacity_bytes), format_size(self.folio_max_bytes));
        let (dirty_limit, dirty_background) =
            (format_size(self.dirty_limit_bytes), format_size(self.dirty_background_bytes));
        if self.capacity_bytes < 4 * self.folio_max_bytes {
            return Err(invalid(format!(
                "capacity={capacity} must hold at least four folios of folio_max={folio_max}: at least {}",
                format_size(4 * self.folio_max_bytes)
            )));
        }
        if self.dirty_limit_bytes == 0 || self.dirty_limit_bytes > self.capacity_bytes {
            return Err(invalid(format!(
                "dirty_limit={dirty_limit} must be positive and at most capacity={capacity} \
                 (without dirty_limit it is half of capacity)"
            )));
        }
        if self.dirty_limit_bytes < 2 * self.folio_max_bytes {
            return Err(invalid(format!(
                "dirty_limit={dirty_limit} must hold at least two folios of folio_max={folio_max}: at least {}",
                format_size(2 * self.folio_max_bytes)
            )));
        }
        if self.dirty_background_bytes >= self.dirty_limit_bytes {
            return Err(invalid(format!(
                "dirty_background={dirty_background} must be below dirty_limit={dirty_limit} (without \
                 dirty_background it is a quarter of capacity, or half of dirty_limit when only that is given)"
            )));
        }
        self.validate_timing_and_depths()?;
        self.validate_writeback_layout()
    }

    /// [`Config::validate`]'s checks of the times, queue depths and the
    /// latency target.
    fn validate_timing_and_depths(&self) -> io::Result<()> {
        if self.expire_ms == 0 {
            return Err(invalid("expire_ms=0: expire_ms must be positive (milliseconds)".into()));
        }
        if self.io_depth == 0 || self.io_depth > 4096 {
            return Err(invalid(format!("io_depth={}: io_depth must be 1 to 4096", self.io_depth)));
        }
        if self.readahead_max_bytes < BLOCK_SIZE as u64 {
            let value = format_size(self.readahead_max_bytes);
            return Err(invalid(format!("readahead_max={value}: readahead_max must be at least 4K")));
        }
        if self.throttle_pause_ms_max == 0 {
            return Err(invalid(
                "throttle_pause_ms_max=0: throttle_pause_ms_max must be positive (milliseconds)".into(),
            ));
        }
        if self.async_depth_while_sync == 0 || self.async_depth_while_sync > 4096 {
            return Err(invalid(format!(
                "async_depth_while_sync={}: async_depth_while_sync must be 1 to 4096 (I/Os)",
                self.async_depth_while_sync
            )));
        }
        if self.sync_latency_target_us > SYNC_LATENCY_TARGET_US_MAX {
            return Err(invalid(format!(
                "sync_latency_target_us={}: sync_latency_target_us must be 0 (off) to {SYNC_LATENCY_TARGET_US_MAX} \
                 (10 s)",
                self.sync_latency_target_us
            )));
        }
        Ok(())
    }

    /// [`Config::validate`]'s checks of the writeback workers, their
    /// routing and the I/O shapes.
    fn validate_writeback_layout(&self) -> io::Result<()> {
        if self.writeback_workers == 0 || self.writeback_workers > MAX_WRITEBACK_WORKERS {
            return Err(invalid(format!(
                "writeback_workers={}: writeback_workers must be 1 to {MAX_WRITEBACK_WORKERS}",
                self.writeback_workers
            )));
        }
        if self.writeback_routing == Routing::Single && self.writeback_workers != 1 {
            return Err(invalid(format!(
                "writeback_workers={} needs writeback_routing=rotor or region (single is one worker)",
                self.writeback_workers
            )));
        }
        if !self.region_size_bytes.is_power_of_two()
            || self.region_size_bytes < self.folio_max_bytes
            || self.region_size_bytes > 1 << 40
        {
            return Err(invalid(format!(
                "region_size={}: region_size must be a power of two from folio_max={} to 1T",
                format_size(self.region_size_bytes),
                format_size(self.folio_max_bytes)
            )));
        }
        if self.bridge_gap_bytes % BLOCK_SIZE as u64 != 0 || self.bridge_gap_bytes > self.io_max_bytes / 2 {
            return Err(invalid(format!(
                "bridge_gap={}: bridge_gap must be whole 4K blocks and at most half of io_max={}",
                format_size(self.bridge_gap_bytes),
                format_size(self.io_max_bytes)
            )));
        }
        Ok(())
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// `on` or `off`.
fn parse_switch(key: &str, value: &str) -> io::Result<bool> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(invalid(format!("{key} must be 'on' or 'off', not '{other}'"))),
    }
}

fn parse_number(key: &str, value: &str) -> io::Result<u64> {
    value.parse::<u64>().map_err(|_| invalid(format!("option {key}: '{value}' is not a non-negative integer")))
}

/// Suffixes [`parse_size`] accepts, for its error message.
const SIZE_SUFFIXES: &str = "K, M, G or T, optionally followed by B or iB, in either case";

/// Parses a size as the option string takes it: a number of bytes with an
/// optional binary suffix, `K`, `M`, `G` or `T`, in either case and
/// optionally followed by `B` or `iB`. Every spelling is a power of 1024
/// (`4k`, `4K`, `4KB` and `4KiB` are all 4096), as fio reads `4k` and as
/// memory sizes are conventionally given (PostgreSQL's `1GB`, RocksDB's
/// `1G`); a plain number, optionally followed by `B`, is bytes. `key`
/// names the value in the error (`EINVAL`, `InvalidInput`) a bad one gets,
/// so command-line tools can parse their own size flags the same way.
pub fn parse_size(key: &str, value: &str) -> io::Result<u64> {
    let value = value.trim();
    let bad = |why: &str| {
        invalid(format!(
            "option {key}: '{value}' is not a size{why}: expected a number of bytes, optionally followed by \
             {SIZE_SUFFIXES} (powers of 1024; e.g. 4096, 64K, 256MiB, 1G)"
        ))
    };
    let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (digits, suffix) = value.split_at(split);
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad("")),
    };
    let n: u64 = digits.parse().map_err(|_| bad(""))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| bad(" (too large)"))
}

/// `n` with the largest suffix that [`parse_size`] reads back exactly.
fn format_size(n: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n != 0 && n % (1u64 << shift) == 0 {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_consistent() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.capacity_bytes, GIB);
        assert_eq!(c.dirty_limit_bytes, GIB / 2);
        assert_eq!(c.dirty_background_bytes, GIB / 4);
        assert_eq!(c.folio_max_bytes, 2 * MIB);
    }

    #[test]
    fn parses_the_documented_example() {
        let c = Config::from_options("capacity=256M,dirty_limit=64M,io=threads").unwrap();
        assert_eq!(c.capacity_bytes, 256 * MIB);
        assert_eq!(c.dirty_limit_bytes, 64 * MIB);
        assert_eq!(c.dirty_background_bytes, 32 * MIB, "half the lowered limit");
        assert_eq!(c.io, IoKind::Threads);
        assert_eq!(c.bridge_gap_bytes, 8 * 1024, "default");
        assert_eq!(Config::from_options("bridge_gap=0").unwrap().bridge_gap_bytes, 0);
    }

    #[test]
    fn background_follows_a_lowered_dirty_limit() {
        let c = Config::from_options("dirty_limit=64M").unwrap();
        assert_eq!(c.capacity_bytes, GIB);
        assert_eq!(c.dirty_background_bytes, 32 * MIB);
        let c = Config::from_options("dirty_limit=64M,dirty_background=8M").unwrap();
        assert_eq!(c.dirty_background_bytes, 8 * MIB);
    }

    /// Every background threshold below the limit is kept as given (waiting
    /// writers get writeback whatever it is); at the limit it is refused.
    #[test]
    fn background_anywhere_below_the_limit_is_valid() {
        for background in ["0", "4K", "8M", "16380K"] {
            let c = Config::from_options(&format!("capacity=64M,dirty_limit=16M,dirty_background={background}"));
            assert!(c.is_ok(), "dirty_background={background}: {:?}", c.err());
        }
        assert_eq!(
            Config::from_options("capacity=64M,dirty_limit=16M,dirty_background=16380K")
                .unwrap()
                .dirty_background_bytes,
            16 * MIB - 4096
        );
        let e = Config::from_options("capacity=64M,dirty_limit=16M,dirty_background=16M").unwrap_err();
        assert!(e.to_string().contains("dirty_background"), "{e}");
    }

    #[test]
    fn empty_options_are_defaults() {
        let c = Config::from_options("").unwrap();
        assert_eq!(c.capacity_bytes, Config::default().capacity_bytes);
    }

    #[test]
    fn expire_busy_follows_expire_unless_given() {
        assert_eq!(Config::default().expire_busy_ms, 30_000, "the kernel's dirty_expire_centisecs");
        assert_eq!(Config::from_options("expire_ms=50").unwrap().expire_busy_ms, 1500);
        assert_eq!(Config::from_options("expire_ms=50,expire_busy_ms=50").unwrap().expire_busy_ms, 50);
        assert_eq!(Config::from_options("expire_busy_ms=5000").unwrap().expire_ms, 1000, "expire keeps its default");
        let huge = Config::from_options(&format!("expire_ms={}", u64::MAX / 2)).unwrap();
        assert_eq!(huge.expire_busy_ms, u64::MAX, "saturates");
        // At or below expire_ms: periodic writeback never waits, and a
        // Config that raised expire_ms alone stays valid.
        let below = Config::from_options("expire_ms=2000,expire_busy_ms=1000").unwrap();
        assert_eq!((below.expire_ms, below.expire_busy_ms), (2000, 1000));
        let raised = Config { expire_ms: 100_000, ..Config::default() };
        raised.validate().unwrap();
        assert!(Config::from_options("expire_busy_ms=-1").is_err(), "not a number");
    }

    #[test]
    fn rejects_bad_input_with_the_key_named() {
        for (opts, needle) in [
            ("capacity=abc", "capacity"),
            ("bogus=1", "bogus"),
            ("io=spdk", "io must be"),
            ("folio_max=3000", "folio_max"),
            ("capacity=1G,dirty_limit=2G", "dirty_limit"),
            ("capacity=64M,dirty_background=32M,dirty_limit=16M", "dirty_background"),
            ("expire_ms=0", "expire_ms"),
            ("io_depth=0", "io_depth"),
            ("capacity", "key=value"),
            ("capacity=99999999999T", "capacity"),
            ("bridge_gap=5000", "bridge_gap"),
            ("io_max=16K,bridge_gap=12K", "bridge_gap"),
        ] {
            let err = Config::from_options(opts).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{opts}");
            assert!(err.to_string().contains(needle), "{opts}: {err}");
        }
    }

    /// Errors say what is wrong in the option string's own words: each
    /// key as typed, with its value (sizes with their suffix), never the
    /// Rust API's names.
    #[test]
    fn errors_speak_in_options() {
        for (opts, words) in [
            ("capacity=1G,dirty_limit=2G", "dirty_limit=2G must be positive and at most capacity=1G"),
            ("capacity=4M", "capacity=4M must hold at least four folios of folio_max=2M: at least 8M"),
            (
                "capacity=64M,dirty_limit=2M",
                "dirty_limit=2M must hold at least two folios of folio_max=2M: at least 4M",
            ),
            ("capacity=64M,dirty_limit=16M,dirty_background=16M", "dirty_background=16M must be below dirty_limit=16M"),
            ("folio_max=3000", "folio_max=3000 must be a power of two from 4K to 1G"),
            ("io_max=2G", "io_max=2G must be a power of two"),
            ("io_depth=5000", "io_depth=5000: io_depth must be 1 to 4096"),
            ("readahead_max=100", "readahead_max=100: readahead_max must be at least 4K"),
            ("region_size=1M", "region_size=1M: region_size must be a power of two from folio_max=2M to 1T"),
            (
                "io_max=16K,bridge_gap=12K",
                "bridge_gap=12K: bridge_gap must be whole 4K blocks and at most half of io_max=16K",
            ),
            ("io_depth=99999999999", "io_depth=99999999999 is too large"),
        ] {
            let message = Config::from_options(opts).unwrap_err().to_string();
            assert!(message.contains(words), "{opts}: {message}");
            assert!(!message.contains("Config") && !message.contains("_bytes"), "{opts}: {message}");
        }
    }

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_size("x", "4k").unwrap(), 4096);
        assert_eq!(parse_size("x", "2MiB").unwrap(), 2 * MIB);
        assert_eq!(parse_size("x", "1G").unwrap(), GIB);
        assert_eq!(parse_size("x", "512").unwrap(), 512);
        assert!(parse_size("x", "").is_err());
        assert!(parse_size("x", "-1").is_err());
    }

    /// fio's and RocksDB's spellings all mean powers of 1024; anything else
    /// is refused with the key and the accepted suffixes in the message.
    #[test]
    fn size_spellings() {
        for (spelling, bytes) in [
            ("4k", 4096),
            ("4K", 4096),
            ("4KB", 4096),
            ("4kb", 4096),
            ("4KiB", 4096),
            ("4kib", 4096),
            ("64m", 64 * MIB),
            ("64MB", 64 * MIB),
            ("1g", GIB),
            ("1GB", GIB),
            ("1GiB", GIB),
            ("1T", GIB << 10),
            ("1tib", GIB << 10),
            ("4096B", 4096),
            (" 8K ", 8192),
        ] {
            assert_eq!(parse_size("capacity", spelling).unwrap(), bytes, "{spelling}");
        }
        for bad in ["1X", "1KiBB", "4iB", "1 G", "1.5G", "G", "1P", "0x10", "+4K", "1Gi"] {
            let err = Config::from_options(&format!("capacity={bad}")).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}");
            let message = err.to_string();
            assert!(message.contains("capacity") && message.contains(SIZE_SUFFIXES), "{bad}: {message}");
        }
        let c = Config::from_options("capacity=1GiB,dirty_limit=256MB,dirty_background=64mib").unwrap();
        assert_eq!((c.capacity_bytes, c.dirty_limit_bytes, c.dirty_background_bytes), (GIB, 256 * MIB, 64 * MIB));
    }

    #[test]
    fn semicolons_separate_like_commas() {
        let commas = Config::from_options("capacity=256M,dirty_limit=64M,io=threads").unwrap();
        assert_eq!(Config::from_options("capacity=256M;dirty_limit=64M;io=threads").unwrap(), commas);
        assert_eq!(Config::from_options("capacity=256M;dirty_limit=64M,io=threads").unwrap(), commas);
        assert_eq!(Config::from_options(" capacity=256M ; dirty_limit=64M ;, io=threads;").unwrap(), commas);
        assert_eq!(Config::from_options(";").unwrap(), Config::default());
    }

    #[test]
    fn a_key_given_twice_is_refused_by_name() {
        for (opts, key) in [
            ("capacity=1G,capacity=512M", "capacity"),
            ("capacity=1G;capacity=1G", "capacity"),
            ("io=threads,dirty_limit=64M;io=uring", "io"),
            ("bridge_gap=0, bridge_gap =0", "bridge_gap"),
        ] {
            let err = Config::from_options(opts).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{opts}");
            assert!(err.to_string().contains(&format!("option '{key}' is given twice")), "{opts}: {err}");
        }
    }

    /// The routing keys: names, counts and region sizes are checked, and
    /// `single` is one worker whatever else is asked.
    #[test]
    fn writeback_routing_keys() {
        let c = Config::from_options("writeback_routing=region,writeback_workers=4,region_size=8M").unwrap();
        assert_eq!((c.writeback_routing, c.writeback_workers, c.region_size_bytes), (Routing::Region, 4, 8 << 20));
        let c = Config::from_options("writeback_routing=single").unwrap();
        assert_eq!((c.writeback_routing, c.writeback_workers), (Routing::Single, 1));
        assert_eq!(Config::default().background_ioprio, BackgroundIoprio::BestEffort);
        let c = Config::from_options("background_ioprio=idle").unwrap();
        assert_eq!(c.background_ioprio, BackgroundIoprio::Idle);
        assert!(c.to_options().contains("background_ioprio=idle"), "{}", c.to_options());
        for (opts, words) in [
            ("writeback_routing=single,writeback_workers=2", "needs writeback_routing=rotor or region"),
            ("writeback_routing=rotor,writeback_workers=0", "writeback_workers must be 1 to 64"),
            ("writeback_routing=rotor,writeback_workers=65", "writeback_workers must be 1 to 64"),
            ("writeback_routing=shards", "writeback_routing must be 'single', 'rotor' or 'region'"),
            ("scan_dropbehind=yes", "scan_dropbehind must be 'on' or 'off'"),
            ("stream_dropbehind=1", "stream_dropbehind must be 'on' or 'off'"),
            ("region_size=3M", "region_size must be a power of two"),
            ("region_size=1M", "region_size must be a power of two from folio_max"),
            ("region_size=2T", "region_size must be a power of two"),
            ("writeback_workers=x", "option writeback_workers"),
            ("sync_latency_target_us=10000001", "sync_latency_target_us must be 0 (off) to 10000000"),
            ("sync_latency_target_us=-1", "option sync_latency_target_us"),
            ("background_ioprio=rt", "background_ioprio must be 'be' or 'idle', not 'rt'"),
            ("background_ioprio=", "background_ioprio must be 'be' or 'idle'"),
        ] {
            let err = Config::from_options(opts).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{opts}");
            assert!(err.to_string().contains(words), "{opts}: {err}");
        }
    }

    #[test]
    fn to_options_spells_out_every_key_and_round_trips() {
        let c = Config::from_options("capacity=256M,dirty_limit=64M,io=threads").unwrap();
        assert_eq!(
            c.to_options(),
            "capacity=256M,dirty_limit=64M,dirty_background=32M,expire_ms=1000,expire_busy_ms=30000,folio_max=2M,\
             io_max=1M,io=threads,io_depth=128,readahead_max=16M,throttle_pause_ms_max=200,bridge_gap=8K,\
             async_depth_while_sync=1,sync_latency_target_us=200,background_ioprio=be,writeback_workers=2,\
             writeback_routing=region,region_size=64M,scan_dropbehind=on,stream_dropbehind=on,guardian=on"
        );
        let keys: Vec<&str> = c.option_values().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, OPTION_KEYS);
        for opts in [
            "",
            "capacity=256M,dirty_limit=64M,io=threads",
            "capacity=100000K,dirty_limit=12345678,dirty_background=0,bridge_gap=0,expire_ms=7",
            "capacity=3G,folio_max=4K,io_max=1G,io_depth=4096,readahead_max=4097,throttle_pause_ms_max=1",
            "io=sim",
            "writeback_routing=rotor,writeback_workers=3,region_size=2M",
            "scan_dropbehind=off",
        ] {
            let c = Config::from_options(opts).unwrap();
            let again = Config::from_options(&c.to_options()).unwrap();
            assert_eq!(again, c, "{opts} -> {}", c.to_options());
        }
    }

    /// A scan caches a quarter of the capacity, at most 64 MiB.
    #[test]
    fn scan_cached_bytes_is_a_quarter_of_capacity_up_to_the_cap() {
        let at = |options: &str| Config::from_options(options).unwrap().scan_cached_bytes();
        assert_eq!(at("capacity=16M"), 4 * MIB);
        assert_eq!(at("capacity=256M"), SCAN_CACHED_BYTES_MAX);
        assert_eq!(at("capacity=1G"), SCAN_CACHED_BYTES_MAX);
        assert_eq!(SCAN_CACHED_BYTES_MAX, 64 * MIB);
    }

    #[test]
    fn format_size_is_exact() {
        for (n, text) in [(0, "0"), (1, "1"), (1023, "1023"), (1024, "1K"), (1536, "1536"), (3 << 20, "3M")] {
            assert_eq!(format_size(n), text);
            assert_eq!(parse_size("x", text).unwrap(), n);
        }
        assert_eq!(format_size(u64::MAX), u64::MAX.to_string());
        assert_eq!(format_size(1 << 50), "1024T");
    }
}
