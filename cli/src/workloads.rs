//! The workload catalog (names are part of the CLI and JSON), their expansion
//! into measurement groups (a workload and variant, run once per engine),
//! and the job specs a worker executes.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use wbcache::Routing;

use crate::engines::{CallKind, EngineKind, Target};
use crate::sys::fmt_size;

pub const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

pub struct WorkloadInfo {
    pub name: &'static str,
    pub about: &'static str,
    /// What the workload stands for in an application, in plain words.
    pub models: &'static str,
    /// The public measurement it follows (a patch series by its subject
    /// line, a libMicro case), if there is one.
    pub source: Option<&'static str>,
}

/// The posting the fsync-under-load workload follows.
const URGENT_WRITEBACK: &str =
    "the LKML posting \"block, mm: add support for boosting urgent asynchronous writeback io\" by Daeho Jeong";

/// The posting parallel-writeback follows, and the reviewer's question it
/// answers.
const AG_WRITEBACK: &str = "the LKML posting \"[PATCH v3 0/6] AG aware parallel writeback for XFS\" by Kundan Kumar \
     (January 2026), and Brian Foster's question in reply to it: does routing writeback by allocation group beat plain \
     concurrency, with inodes spread over the writeback workers by a rotor";

/// The flusher-kick series whose tables several write workloads follow.
const DONTCACHE_KICK: &str =
    "the tables of the LKML series \"mm: kick writeback flusher for IOCB_DONTCACHE with targeted dirty tracking\" (v5, 2026)";

/// The series that brought uncached buffered I/O to Linux, whose reason
/// to exist `hot-set` measures.
const UNCACHED_IO: &str = "the LKML series \"Uncached buffered IO\" by Jens Axboe (PATCHSET v1 to v8, November and \
     December 2024: RWF_UNCACHED, renamed RWF_DONTCACHE and merged for Linux 6.14), and what uncached I/O is for: \
     data streamed once through the cache should not push out the data that is read again and again";

/// The transaction `sqlite` runs.
const PGBENCH_TPCB: &str = "pgbench's built-in TPC-B-like script";

/// The calls `advice` makes, and the applications that make them.
const PAGE_CACHE_CONTROLS: &str = "the page-cache controls as applications call them: \
     sync_file_range(SYNC_FILE_RANGE_WRITE) over what was just written, as PostgreSQL's checkpointer does \
     (checkpoint_flush_after) and RocksDB's bytes_per_sync; POSIX_FADV_DONTNEED over data written once, as \
     PostgreSQL does on its closed WAL segments at wal_level=minimal; POSIX_FADV_WILLNEED before reading, as \
     PostgreSQL's prefetching does (effective_io_concurrency)";

pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        name: "seq-write",
        about: "one writer, 1 MiB sequential writes to a new file of --size, then fsync",
        models: "a backup, a log or a bulk load streaming one large file: MB/s and the tail latency of each write",
        source: Some(DONTCACHE_KICK),
    },
    WorkloadInfo {
        name: "rand-write",
        about: "one writer, 4 KiB random writes (every block once, random order) over an existing file of --size, stopped after --runtime, then fsync",
        models: "a database updating pages of a table larger than memory",
        source: Some(DONTCACHE_KICK),
    },
    WorkloadInfo {
        name: "multi-writer",
        about: "4 writers, 1 MiB sequential writes, one new file each (--size split between them), then fsync",
        models: "several streams written at once (parallel backups, compaction outputs): aggregate MB/s and tail latency",
        source: Some(DONTCACHE_KICK),
    },
    WorkloadInfo {
        name: "files-32",
        about: "32 writers, 64 KiB sequential writes, one new file each, for --runtime, then fsync",
        models: "many files written at once (a build, an unpacking archive, a sharded log): MB/s, tail latency and how much dirty data piles up",
        source: Some(DONTCACHE_KICK),
    },
    WorkloadInfo {
        name: "competing",
        about: "the engine's writer against one buffered writer of the same system (kernel or wbcache), separate files, 1 MiB sequential, for --runtime, then fsync: per-writer MB/s and p99.9 (rows: writer, buffered-peer, aggregate)",
        models: "an uncached stream (a backup) next to an ordinary buffered writer: does either starve the other",
        source: Some(DONTCACHE_KICK),
    },
    WorkloadInfo {
        name: "fsync-under-load",
        about: "a foreground writer's fsyncs, each phase once alone (idle) and once next to two background writers of the same engine (load: 1 MiB sequential writes to two new files of up to --size, wrapping, no fsync, until the foreground ends); variants small/idle and small/load, 100 × (append 4 KiB to its own new file, sleep 100 ms, fsync); large/idle and large/load, 50 × (append 8 MiB to its own new file in one call, fsync); background/alone, the two background writers alone for --runtime. A --runtime under 5 s shortens the phases to runtime × 20 small (at least 10) and runtime × 10 large (at least 5) iterations. Rows: fsync p50/p99/max and total per engine, and the background writers' MB/s with and without the fsyncs",
        models: "a database committing small transactions (or a program saving a file) while a checkpoint or a backup streams gigabytes to the same disk: what an fsync costs under load",
        source: Some(URGENT_WRITEBACK),
    },
    WorkloadInfo {
        name: "parallel-writeback",
        about: "12 writers at once, 4 KiB random writes (every block once, random order), --size (twice the memory) in all, \
                stopped after --runtime, then fsync: the writeback's MB/s until everything is clean, and the machine's CPU \
                seconds per GiB written. Variants files (one new file per writer, each writer fsyncs its own) and shared \
                (one new file for all twelve, each writer a disjoint random share of its blocks, one fsync after the last \
                writer); on --device, a twelfth of the area per writer, or all of it. wbcache runs once per writeback \
                routing and worker count: single-1, rotor-1/2/4, region-1/2/4 (--writeback-workers sets the counts); \
                kernel-buffered and kernel-direct are the references (the dontcache engines do not run it). \
                Select one pattern with parallel-writeback/files or parallel-writeback/shared, one row with e.g. \
                parallel-writeback/shared/region-4",
        models: "many threads dirtying more data than fits in memory at once, in many files or in one large file \
                 (a database checkpoint, parallel loads, a virtual machine image): does spreading writeback over \
                 several workers make it reach the disk sooner, and at what CPU cost",
        source: Some(AG_WRITEBACK),
    },
    WorkloadInfo {
        name: "seq-read",
        about: "read a cold file of --size (twice the memory) sequentially, 1 MiB reads",
        models: "a scan, a backup or a restore reading a file larger than memory for the first time",
        source: Some("the read table of the LKML series \"block: enable RWF_DONTCACHE for block devices\" (v6)"),
    },
    WorkloadInfo {
        name: "rand-read",
        about: "4 KiB random reads over a file of --size (twice the cache), for --runtime; variants (µs per call): cached-4k, 4 KiB random reads inside a region read once before (up to 64M, past the L2 caches: the copy's memory traffic dominates; a bare memcpy of the same pattern is measured as the reference); cached-4k-offset0, the same cached 4 KiB at offset 0 (the read path's own cost); cached-4k-written, as cached-4k in a region written before in 4 KiB writes in random order (a database's hot pages: a cache of many 4 KiB folios, where finding the folio costs most)",
        models: "point lookups: cold over a table larger than memory, and hot inside a cached working set",
        source: Some("libMicro's pread_u4k case (the cached-4k-offset0 variant)"),
    },
    WorkloadInfo {
        name: "hot-set",
        about: "cache protection: a hot reader reads a hot file of a quarter of --memory over and over (256 KiB \
                sequential reads, wrapping; the file is written and read twice before the timed part, so it starts \
                out cached) while a streamer moves --size (twice the memory) through the engine. Variants alone (the \
                hot reader alone for --runtime), write-stream (the streamer writes a new file in 1 MiB sequential \
                writes, then fsync; the hot reader runs until it is done) and read-stream (the streamer reads a cold \
                file, laid out before the run, in 1 MiB sequential reads). The streamer uses the engine's mode \
                (RWF_DONTCACHE, O_DIRECT, WriteFlags::DONTCACHE, ...); the hot reader reads plainly through the \
                engine's cache: buffered for both kernel engines with a cache, the same wbcache Cache as the streamer \
                without flags for both wbcache engines, and O_DIRECT on kernel-direct, which has no cache (its hit \
                ratio is null). Figures: the streamer's MB/s, the hot reader's MB/s (and against its alone row), and \
                the hot hit ratio, the share of the hot reader's chunks wholly cached just before it read them \
                (mincore(2) on a mapping of the hot file for the kernel, File::residency for wbcache). Select one \
                variant with e.g. hot-set/write-stream",
        models: "a database's or a web server's working set read again and again while a backup, a log shipper or \
                 a bulk load streams through the same cache: does the stream push the hot data out, and does the \
                 hot reader slow down",
        source: Some(UNCACHED_IO),
    },
    WorkloadInfo {
        name: "sqlite",
        about: "SQLite (one connection, synchronous=FULL, 4 KiB pages) running pgbench's TPC-B-like transaction \
                for --runtime: BEGIN; UPDATE an account's balance; SELECT it; UPDATE a teller's; UPDATE a branch's; \
                INSERT a history row; COMMIT (account, teller, branch and delta at random). The database is \
                pgbench's (10 tellers and up to 100,000 accounts per branch, an 84-character filler per account), \
                with about 1.25 × --memory of accounts data (4M with --quick), loaded before the timed part. It \
                runs on kernel-buffered (SQLite's default unix VFS, the kernel's page cache) and on wbcache (the \
                wbcache VFS over the engine's Cache); the other engines do not run it. Variants wal-idle and \
                delete-idle (journal_mode WAL or DELETE, the transactions alone), wal-streaming and \
                delete-streaming (the same next to a streaming writer of the same engine: --size, twice the \
                memory, written to a new file in the same directory in 1 MiB sequential writes, over and over \
                from its start until --runtime ends, then fsync, through the kernel's page cache or the \
                database's own wbcache Cache; the transactions start once it has written a quarter of the memory \
                and stop when it is done). Figures: \
                transactions per second, the COMMIT statement's latency (p50, p99, max), the writer's MB/s and the \
                process's peak RSS. Select one variant with e.g. sqlite/wal-streaming",
        models: "an application's embedded database (a browser profile, a phone app, a service's local store) \
                 committing small transactions durably while a backup, a download or a log streams through the \
                 same cache to the same disk: what a commit costs, idle and under the stream",
        source: Some(PGBENCH_TPCB),
    },
    WorkloadInfo {
        name: "advice",
        about: "the page-cache controls applications use, on the kernel's page cache (posix_fadvise(2), \
                sync_file_range(2) on the file descriptor) and on wbcache (File::advise, File::writeback_range), \
                side by side. It runs on kernel-buffered and wbcache; the other engines do not run it. Variants: \
                cold-read (a file of half of --memory, laid out before the run and cached in neither engine when \
                the timed part starts: dropped from the kernel's page cache, and a wbcache Cache starts empty; read \
                sequentially in 1 MiB reads); cold-read-willneed (the same, the timed part starting with one \
                POSIX_FADV_WILLNEED / Advice::WillNeed over the whole file: MB/s from the advice to the last read, \
                and the advice call's own time); stream (a new file of --size, twice the memory, written in 1 MiB \
                sequential writes, then fsync); stream-dontneed (the same, with POSIX_FADV_DONTNEED / \
                Advice::DontNeed over everything written so far after every 8 MiB); stream-sync-range (the same, \
                with sync_file_range(SYNC_FILE_RANGE_WRITE) / File::writeback_range(WRITE) over the 8 MiB just \
                written, after every 8 MiB). Stream figures: MB/s (the final fsync included), the write calls' \
                p99.9 latency, the final fsync's time, the time spent in the advice calls, and the peak of the \
                file's cached bytes, looked at after every 8 MiB written (mincore(2) on a read-only shared mapping \
                of the file for the kernel, File::cached_ranges for wbcache). The advised variants are compared \
                with the same engine's plain variant and with the kernel. Select one variant with e.g. \
                advice/stream-sync-range",
        models: "a database prefetching a file it is about to scan, a log or a backup that drops what it wrote \
                 because nobody reads it again, a checkpoint or a compaction that starts writeback as it goes so \
                 that its final fsync is short: does each call do on wbcache what it does on the kernel, and what \
                 does it cost",
        source: Some(PAGE_CACHE_CONTROLS),
    },
    WorkloadInfo {
        name: "small-overwrite",
        about: "overwrite offset 0 of an already cached file (written once and fsynced), per-call cost in µs; variants {write,pwrite,writev}-{1k,10k}-{4k,1m,2m}-file (writev: 10 iovecs of the size)",
        models: "small in-place updates of a cached file (a database header, a counter, a WAL tail): the cost of one write call",
        source: Some("libMicro's write_u1k/u10k, pwrite_u1k/u10k and writev_u1k/u10k cases, as run in the LKML series \"ext4: avoid tail walks for cached large-folio writes\" (v3)"),
    },
];

pub fn info(name: &str) -> Option<&'static WorkloadInfo> {
    WORKLOADS.iter().find(|w| w.name == name)
}

/// What a measurement group does.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    SeqWrite,
    RandWrite,
    MultiWriter,
    Files32,
    Competing,
    /// One measurement group of `fsync-under-load`.
    FsyncUnderLoad(FsyncGroup),
    /// One measurement group of `parallel-writeback`.
    ParallelWriteback(PwGroup),
    /// One variant of `hot-set`.
    HotSet(HotSet),
    /// One variant of `sqlite`.
    Sqlite(SqliteVariant),
    /// One variant of `advice`.
    Advice(AdviceVariant),
    SeqRead,
    RandRead,
    /// µs per cached 4 KiB read (see [`CachedShape`]).
    CachedRead {
        shape: CachedShape,
    },
    Overwrite {
        call: CallKind,
        bs: u64,
        file_size: u64,
    },
    /// A job described with fio's words (`bench --custom`).
    Custom(FioJob),
}

/// The measurement groups of `fsync-under-load`, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncGroup {
    SmallIdle,
    SmallLoad,
    LargeIdle,
    LargeLoad,
    BackgroundAlone,
}

/// The foreground phase of an `fsync-under-load` group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreground {
    /// 4 KiB appended, a 100 ms pause, fsync.
    Small,
    /// 8 MiB appended in one call, fsync.
    Large,
}

impl FsyncGroup {
    pub const ALL: [FsyncGroup; 5] = [
        FsyncGroup::SmallIdle,
        FsyncGroup::SmallLoad,
        FsyncGroup::LargeIdle,
        FsyncGroup::LargeLoad,
        FsyncGroup::BackgroundAlone,
    ];

    /// The variant name (JSON `variant`).
    pub fn variant(self) -> &'static str {
        match self {
            FsyncGroup::SmallIdle => "small/idle",
            FsyncGroup::SmallLoad => "small/load",
            FsyncGroup::LargeIdle => "large/idle",
            FsyncGroup::LargeLoad => "large/load",
            FsyncGroup::BackgroundAlone => "background/alone",
        }
    }

    pub fn foreground(self) -> Option<Foreground> {
        match self {
            FsyncGroup::SmallIdle | FsyncGroup::SmallLoad => Some(Foreground::Small),
            FsyncGroup::LargeIdle | FsyncGroup::LargeLoad => Some(Foreground::Large),
            FsyncGroup::BackgroundAlone => None,
        }
    }

    /// Whether the two background writers run.
    pub fn loaded(self) -> bool {
        !matches!(self, FsyncGroup::SmallIdle | FsyncGroup::LargeIdle)
    }

    /// The variant of the row that reports the background writers of a
    /// group with a foreground (`None` for the idle groups).
    pub fn background_variant(self) -> Option<&'static str> {
        match self {
            FsyncGroup::SmallLoad => Some("background/with-fsync"),
            FsyncGroup::LargeLoad => Some("background/with-large-fsync"),
            FsyncGroup::BackgroundAlone => Some("background/alone"),
            FsyncGroup::SmallIdle | FsyncGroup::LargeIdle => None,
        }
    }
}

/// Small fsync iterations for a runtime: 100 at 5 s and above, 20 per
/// second below (at least 10).
pub fn fsync_small_iterations(runtime_s: f64) -> u64 {
    ((runtime_s * 20.0).round() as u64).clamp(10, 100)
}

/// Large fsync iterations for a runtime: 50 at 5 s and above, 10 per
/// second below (at least 5).
pub fn fsync_large_iterations(runtime_s: f64) -> u64 {
    ((runtime_s * 10.0).round() as u64).clamp(5, 50)
}

/// The pause between a small write and its fsync.
pub const FSYNC_SMALL_PAUSE_MS: u64 = 100;
/// What one foreground iteration appends.
pub const FSYNC_SMALL_BS: u64 = 4 * KIB;
pub const FSYNC_LARGE_BS: u64 = 8 * MIB;

impl Foreground {
    /// `(bytes per iteration, iterations, pause before the fsync in ms)`.
    pub fn shape(self, runtime_s: f64) -> (u64, u64, u64) {
        match self {
            Foreground::Small => (FSYNC_SMALL_BS, fsync_small_iterations(runtime_s), FSYNC_SMALL_PAUSE_MS),
            Foreground::Large => (FSYNC_LARGE_BS, fsync_large_iterations(runtime_s), 0),
        }
    }

    /// No new iteration starts after this many seconds: generous, so
    /// that slow fsyncs under load are measured, not cut off.
    pub fn deadline_s(self, runtime_s: f64) -> f64 {
        let (_, n, _) = self.shape(runtime_s);
        match self {
            Foreground::Small => n as f64 * 0.1 + 30.0,
            Foreground::Large => 30.0 + n as f64,
        }
    }
}

/// The writers of `parallel-writeback`.
pub const PW_WRITERS: u64 = 12;
/// Its request size.
pub const PW_BS: u64 = 4 * KIB;
/// The most writeback workers the cache runs per device (its
/// `writeback_workers` range is 1..=64).
pub const PW_MAX_WORKERS: u32 = 64;
/// The writeback worker counts its wbcache rows try by default.
pub const PW_DEFAULT_WORKERS: &[u32] = &[1, 2, 4];

/// Where `parallel-writeback`'s writers write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PwPattern {
    /// One new file (a twelfth of the area on a device) per writer; each
    /// writer fsyncs its own.
    Files,
    /// One new file (the whole area on a device) for every writer, each
    /// writing a disjoint random share of its blocks; one fsync after the
    /// last writer.
    Shared,
}

impl PwPattern {
    pub const ALL: [PwPattern; 2] = [PwPattern::Files, PwPattern::Shared];

    pub fn name(self) -> &'static str {
        match self {
            PwPattern::Files => "files",
            PwPattern::Shared => "shared",
        }
    }

    pub fn parse(s: &str) -> Option<PwPattern> {
        PwPattern::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// A wbcache writeback configuration: `writeback_routing` and
/// `writeback_workers`, named `<routing>-<workers>` (`rotor-2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writeback {
    pub routing: Routing,
    pub workers: u32,
}

impl Writeback {
    pub fn name(self) -> String {
        format!("{}-{}", self.routing.name(), self.workers)
    }

    /// Parses `rotor-2`: a routing and a worker count the cache accepts
    /// (`single` is one worker).
    pub fn parse(s: &str) -> Option<Writeback> {
        let (routing, count) = s.rsplit_once('-')?;
        let routing = [Routing::Single, Routing::Rotor, Routing::Region].into_iter().find(|r| r.name() == routing)?;
        let workers: u32 = count.parse().ok()?;
        let max = if routing == Routing::Single { 1 } else { PW_MAX_WORKERS };
        // One spelling per row: `rotor-2`, not `rotor-02` or `rotor-+2`.
        ((1..=max).contains(&workers) && workers.to_string() == count).then_some(Writeback { routing, workers })
    }

    /// The cache options that select it.
    pub fn options(self) -> [(&'static str, String); 2] {
        [("writeback_routing", self.routing.name().to_string()), ("writeback_workers", self.workers.to_string())]
    }
}

/// The wbcache configurations `parallel-writeback` runs for these worker
/// counts: `single-1` (the baseline: one worker, as before routing
/// existed), then `rotor-n` for each count, then `region-n`.
pub fn pw_configs(workers: &[u32]) -> Vec<Writeback> {
    let mut v = vec![Writeback { routing: Routing::Single, workers: 1 }];
    for routing in [Routing::Rotor, Routing::Region] {
        v.extend(workers.iter().map(|&workers| Writeback { routing, workers }));
    }
    v
}

/// One measurement group of `parallel-writeback`: a pattern, on the kernel
/// engines (`writeback` is `None`) or on wbcache with one configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PwGroup {
    pub pattern: PwPattern,
    pub writeback: Option<Writeback>,
}

impl PwGroup {
    /// The variant name (JSON `variant`): `files`, `shared/region-4`.
    pub fn variant(self) -> String {
        match self.writeback {
            Some(w) => format!("{}/{}", self.pattern.name(), w.name()),
            None => self.pattern.name().to_string(),
        }
    }

    /// The engines the group runs on: kernel-buffered and kernel-direct for
    /// the kernel's group, wbcache for a configuration's.
    pub fn runs_on(self, engine: EngineKind) -> bool {
        match self.writeback {
            Some(_) => engine == EngineKind::Wbcache,
            None => matches!(engine, EngineKind::KernelBuffered | EngineKind::KernelDirect),
        }
    }
}

/// The engines `parallel-writeback` runs on at all.
pub const PW_ENGINES: [EngineKind; 3] = [EngineKind::KernelBuffered, EngineKind::KernelDirect, EngineKind::Wbcache];

/// The variants of `hot-set`: the hot reader alone, or next to a streamer
/// that writes or reads --size through the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotSet {
    Alone,
    WriteStream,
    ReadStream,
}

impl HotSet {
    pub const ALL: [HotSet; 3] = [HotSet::Alone, HotSet::WriteStream, HotSet::ReadStream];

    /// The variant name (JSON `variant`).
    pub fn name(self) -> &'static str {
        match self {
            HotSet::Alone => "alone",
            HotSet::WriteStream => "write-stream",
            HotSet::ReadStream => "read-stream",
        }
    }

    pub fn parse(s: &str) -> Option<HotSet> {
        HotSet::ALL.into_iter().find(|v| v.name() == s)
    }

    /// Whether the streamer writes (`Some(true)`), reads (`Some(false)`),
    /// or does not run (`None`).
    pub fn stream_writes(self) -> Option<bool> {
        match self {
            HotSet::Alone => None,
            HotSet::WriteStream => Some(true),
            HotSet::ReadStream => Some(false),
        }
    }

    fn group(self) -> Group {
        Group { workload: "hot-set", variant: Some(self.name().into()), kind: Kind::HotSet(self) }
    }
}

/// The hot reader's request size.
pub const HOT_BS: u64 = 256 * KIB;
/// The streamer's request size.
pub const HOT_STREAM_BS: u64 = MIB;
/// The role of `hot-set`'s hot reader.
pub const HOT: &str = "hot";
/// The role of `hot-set`'s streamer: when it ends, the hot reader stops.
pub const STREAMER: &str = "streamer";

/// The hot file: a quarter of the memory, whole requests.
pub fn hot_len(p: &Params) -> u64 {
    round_down(p.memory / 4, HOT_BS)
}

/// What the streamer moves: --size (twice the memory by default), whole
/// requests.
pub fn hot_stream_len(p: &Params) -> u64 {
    round_down(p.size, HOT_STREAM_BS)
}

/// The engine the hot reader reads through: the engine's own cache, read
/// plainly (the uncached engines' buffered peer, on the same system and,
/// for wbcache, the same `Cache`); kernel-direct reads with O_DIRECT.
pub fn hot_engine(engine: EngineKind) -> EngineKind {
    if engine.is_dontcache() {
        engine.buffered_peer()
    } else {
        engine
    }
}

/// SQLite's journal modes the `sqlite` workload measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Journal {
    /// `journal_mode=WAL`: commits append to the write-ahead log.
    Wal,
    /// `journal_mode=DELETE`: SQLite's default rollback journal.
    Delete,
}

impl Journal {
    /// The `PRAGMA journal_mode` value (SQLite answers it in lower case).
    pub fn pragma(self) -> &'static str {
        match self {
            Journal::Wal => "wal",
            Journal::Delete => "delete",
        }
    }
}

/// The variants of `sqlite`: a journal mode, with the transactions alone
/// or next to a streaming writer of the same engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqliteVariant {
    pub journal: Journal,
    pub streaming: bool,
}

impl SqliteVariant {
    pub const ALL: [SqliteVariant; 4] = [
        SqliteVariant { journal: Journal::Wal, streaming: false },
        SqliteVariant { journal: Journal::Wal, streaming: true },
        SqliteVariant { journal: Journal::Delete, streaming: false },
        SqliteVariant { journal: Journal::Delete, streaming: true },
    ];

    /// The variant name (JSON `variant`).
    pub fn name(self) -> &'static str {
        match (self.journal, self.streaming) {
            (Journal::Wal, false) => "wal-idle",
            (Journal::Wal, true) => "wal-streaming",
            (Journal::Delete, false) => "delete-idle",
            (Journal::Delete, true) => "delete-streaming",
        }
    }

    pub fn parse(s: &str) -> Option<SqliteVariant> {
        SqliteVariant::ALL.into_iter().find(|v| v.name() == s)
    }

    fn group(self) -> Group {
        Group { workload: "sqlite", variant: Some(self.name().into()), kind: Kind::Sqlite(self) }
    }
}

/// The engines `sqlite` runs on: SQLite's default unix VFS over the
/// kernel's page cache, and the wbcache VFS over a wbcache Cache.
pub const SQLITE_ENGINES: [EngineKind; 2] = [EngineKind::KernelBuffered, EngineKind::Wbcache];
/// The role of `sqlite`'s transactions: when they end, the streaming
/// writer stops (and when it ends, they stop).
pub const TRANSACTIONS: &str = "transactions";
/// The streaming writer's request size.
pub const SQLITE_STREAM_BS: u64 = MIB;
/// pgbench's shape: accounts and tellers per branch.
pub const ACCOUNTS_PER_BRANCH: u64 = 100_000;
pub const TELLERS_PER_BRANCH: u64 = 10;
/// The bytes one account takes in the database's 4 KiB pages (an
/// 84-character filler, three integers, the cell's header, the b-tree's
/// inner pages; measured: 3,355,443 accounts made a 315.7 MiB database, 98.7
/// bytes each), to size the table from the bytes wanted.
pub const SQLITE_ACCOUNT_BYTES: u64 = 98;

/// What a `sqlite` job does: the database to load, the journal mode to
/// measure, and how far the streaming writer gets ahead of the first
/// transaction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SqliteJob {
    pub journal: Journal,
    /// Accounts loaded (pgbench's `100,000 × scale`, here to reach the size).
    pub accounts: u64,
    /// The transactions start once the job with the [`STREAMER`] role has
    /// written this many bytes (0: no streaming writer).
    pub head_start: u64,
    /// SQLite's files next to the database (`-wal`, `-shm`, `-journal`),
    /// removed after the run as the database is.
    pub side_files: Vec<Target>,
}

impl SqliteJob {
    /// pgbench's scale: branches, one per 100,000 accounts (the last one
    /// may have fewer).
    pub fn branches(&self) -> u64 {
        self.accounts.div_ceil(ACCOUNTS_PER_BRANCH).max(1)
    }

    pub fn tellers(&self) -> u64 {
        self.branches() * TELLERS_PER_BRANCH
    }
}

/// The accounts of a `sqlite` database: about `p.sqlite_data_bytes` of
/// table pages.
pub fn sqlite_accounts(p: &Params) -> u64 {
    (p.sqlite_data_bytes / SQLITE_ACCOUNT_BYTES).max(1)
}

/// What `sqlite`'s streaming writer writes: --size (twice the memory by
/// default), whole requests.
pub fn sqlite_stream_len(p: &Params) -> u64 {
    round_down(p.size, SQLITE_STREAM_BS)
}

/// How much the streaming writer writes before the first transaction: a
/// quarter of the memory (at most a quarter of the stream).
pub fn sqlite_head_start(p: &Params) -> u64 {
    (p.memory / 4).min(sqlite_stream_len(p) / 4)
}

/// The variants of `advice`: a cold file read plainly or after one
/// WILLNEED, and a new file streamed plainly, with DONTNEED behind it, or
/// with its writeback started as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdviceVariant {
    ColdRead,
    ColdReadWillneed,
    Stream,
    StreamDontneed,
    StreamSyncRange,
}

impl AdviceVariant {
    pub const ALL: [AdviceVariant; 5] = [
        AdviceVariant::ColdRead,
        AdviceVariant::ColdReadWillneed,
        AdviceVariant::Stream,
        AdviceVariant::StreamDontneed,
        AdviceVariant::StreamSyncRange,
    ];

    /// The variant name (JSON `variant`).
    pub fn name(self) -> &'static str {
        match self {
            AdviceVariant::ColdRead => "cold-read",
            AdviceVariant::ColdReadWillneed => "cold-read-willneed",
            AdviceVariant::Stream => "stream",
            AdviceVariant::StreamDontneed => "stream-dontneed",
            AdviceVariant::StreamSyncRange => "stream-sync-range",
        }
    }

    pub fn parse(s: &str) -> Option<AdviceVariant> {
        AdviceVariant::ALL.into_iter().find(|v| v.name() == s)
    }

    /// Whether the variant reads the cold file (else it writes a new one).
    pub fn reads(self) -> bool {
        matches!(self, AdviceVariant::ColdRead | AdviceVariant::ColdReadWillneed)
    }

    /// The variant without advice an advised one is compared with (`None`
    /// for the plain ones).
    pub fn plain(self) -> Option<AdviceVariant> {
        match self {
            AdviceVariant::ColdRead | AdviceVariant::Stream => None,
            AdviceVariant::ColdReadWillneed => Some(AdviceVariant::ColdRead),
            AdviceVariant::StreamDontneed | AdviceVariant::StreamSyncRange => Some(AdviceVariant::Stream),
        }
    }

    fn group(self) -> Group {
        Group { workload: "advice", variant: Some(self.name().into()), kind: Kind::Advice(self) }
    }
}

/// The engines `advice` runs on: the kernel's page cache through
/// `posix_fadvise(2)` and `sync_file_range(2)`, and a wbcache Cache
/// through `File::advise` and `File::writeback_range`.
pub const ADVICE_ENGINES: [EngineKind; 2] = [EngineKind::KernelBuffered, EngineKind::Wbcache];
/// `advice`'s request size, reads and writes.
pub const ADVICE_BS: u64 = MIB;
/// The stream variants advise (and look at what is cached) after every
/// this many bytes written.
pub const ADVICE_EVERY: u64 = 8 * MIB;

/// The cold file `advice` reads: half the memory (at most the data file
/// it is read from), whole requests.
pub fn advice_cold_len(p: &Params) -> u64 {
    round_down((p.memory / 2).min(data_len(p)), ADVICE_BS)
}

/// The file `advice`'s stream variants write: --size (twice the memory by
/// default), whole requests.
pub fn advice_stream_len(p: &Params) -> u64 {
    round_down(p.size, ADVICE_BS)
}

/// `parallel-writeback`'s groups for these worker counts: per pattern, the
/// kernel's group, then one per wbcache configuration.
pub fn pw_groups(workers: &[u32]) -> Vec<Group> {
    let mut groups = Vec::new();
    for pattern in PwPattern::ALL {
        let configs = std::iter::once(None).chain(pw_configs(workers).into_iter().map(Some));
        groups.extend(configs.map(|writeback| pw_group(PwGroup { pattern, writeback })));
    }
    groups
}

fn pw_group(pw: PwGroup) -> Group {
    Group { workload: "parallel-writeback", variant: Some(pw.variant()), kind: Kind::ParallelWriteback(pw) }
}

/// `parallel-writeback/<selector>`: `files` or `shared` (the pattern's
/// groups, the kernel's and every configuration's), or one configuration
/// of a pattern (`shared/region-4`, any worker count the cache accepts).
fn pw_selection(selector: &str, workers: &[u32]) -> Option<Vec<Group>> {
    match selector.split_once('/') {
        None => {
            let pattern = PwPattern::parse(selector)?;
            Some(
                pw_groups(workers)
                    .into_iter()
                    .filter(|g| matches!(g.kind, Kind::ParallelWriteback(pw) if pw.pattern == pattern))
                    .collect(),
            )
        }
        Some((pattern, config)) => {
            let pattern = PwPattern::parse(pattern)?;
            Some(vec![pw_group(PwGroup { pattern, writeback: Some(Writeback::parse(config)?) })])
        }
    }
}

/// The cache options `base` with `overrides` in place of the same keys (the
/// options refuse a key given twice), or added at the end.
pub fn options_with(base: &str, overrides: &[(&str, String)]) -> String {
    let mut pairs: Vec<(String, String)> = base
        .split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (item.to_string(), String::new()),
        })
        .collect();
    for (key, value) in overrides {
        match pairs.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => pair.1 = value.clone(),
            None => pairs.push((key.to_string(), value.clone())),
        }
    }
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// fio's `--rw` values that make sense for a synchronous API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FioRw {
    Read,
    Write,
    RandRead,
    RandWrite,
    RandRw,
}

impl FioRw {
    pub const ALL: [FioRw; 5] = [FioRw::Read, FioRw::Write, FioRw::RandRead, FioRw::RandWrite, FioRw::RandRw];

    pub fn name(self) -> &'static str {
        match self {
            FioRw::Read => "read",
            FioRw::Write => "write",
            FioRw::RandRead => "randread",
            FioRw::RandWrite => "randwrite",
            FioRw::RandRw => "randrw",
        }
    }

    pub fn parse(s: &str) -> Option<FioRw> {
        FioRw::ALL.into_iter().find(|rw| rw.name() == s)
    }

    pub fn random(self) -> bool {
        matches!(self, FioRw::RandRead | FioRw::RandWrite | FioRw::RandRw)
    }

    /// The share of reads, in percent, given fio's `--rwmixread`.
    pub fn read_percent(self, rwmixread: u8) -> u8 {
        match self {
            FioRw::Read | FioRw::RandRead => 100,
            FioRw::Write | FioRw::RandWrite => 0,
            FioRw::RandRw => rwmixread,
        }
    }

    /// Reads need files with data in them before the timed phase (fio lays
    /// them out first); a sequential write starts from new, empty files.
    pub fn needs_layout(self) -> bool {
        self != FioRw::Write
    }
}

/// One fio-style job, as `bench --custom` was given it. Each of `numjobs`
/// threads does `size` bytes of I/O (or stops at the runtime) over its own
/// `nrfiles` files of `size / nrfiles` bytes, switching file after every
/// request (fio's default `file_service_type=roundrobin`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FioJob {
    pub rw: FioRw,
    pub bs: u64,
    pub size: u64,
    pub numjobs: u64,
    pub nrfiles: u64,
    pub rwmixread: u8,
    /// fsync a file after every this many writes to it; 0 never.
    pub fsync_every: u64,
    /// fsync every file when the job ends (fio's `end_fsync=1`).
    pub end_fsync: bool,
    /// `--runtime` was given: it caps the job (otherwise the size does).
    pub runtime_capped: bool,
}

impl FioJob {
    pub fn file_len(&self) -> u64 {
        round_down(self.size / self.nrfiles, self.bs)
    }

    /// The variant name: the job in fio's words, short.
    pub fn variant(&self) -> String {
        let mut v = format!("{}-{}", self.rw.name(), fmt_size(self.bs).replace(' ', "").to_lowercase());
        if self.rw == FioRw::RandRw {
            v += &format!("-mix{}", self.rwmixread);
        }
        if self.fsync_every > 0 {
            v += &format!("-fsync{}", self.fsync_every);
        }
        if self.end_fsync {
            v += "-endfsync";
        }
        v + &format!("-j{}-f{}", self.numjobs, self.nrfiles)
    }

    /// The file of `job`'s `file`-th file on a file system.
    pub fn file_name(job: u64, file: u64) -> String {
        format!("custom-{job}.{file}.bin")
    }
}

/// One workload (and variant), run once per engine.
#[derive(Clone, Debug)]
pub struct Group {
    pub workload: &'static str,
    pub variant: Option<String>,
    pub kind: Kind,
}

impl Group {
    pub fn label(&self) -> String {
        match &self.variant {
            Some(v) if self.workload == "small-overwrite" => v.clone(),
            Some(v) => format!("{} {v}", self.workload),
            None => self.workload.to_string(),
        }
    }

    /// File-name-safe label.
    pub fn slug(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}-{}", self.workload, v.replace('/', "-")),
            None => self.workload.to_string(),
        }
    }

    /// Whether the group runs on `engine` (every group does, except
    /// `parallel-writeback`'s, see [`PwGroup::runs_on`], `sqlite`'s, see
    /// [`SQLITE_ENGINES`], and `advice`'s, see [`ADVICE_ENGINES`]).
    pub fn runs_on(&self, engine: EngineKind) -> bool {
        match self.kind {
            Kind::ParallelWriteback(pw) => pw.runs_on(engine),
            Kind::Sqlite(_) => SQLITE_ENGINES.contains(&engine),
            Kind::Advice(_) => ADVICE_ENGINES.contains(&engine),
            _ => true,
        }
    }

    /// The engines the group runs on, when not every one (said in the
    /// note or error about groups left out).
    pub fn only_on(&self) -> Option<&'static [EngineKind]> {
        match self.kind {
            Kind::ParallelWriteback(_) => Some(&PW_ENGINES),
            Kind::Sqlite(_) => Some(&SQLITE_ENGINES),
            Kind::Advice(_) => Some(&ADVICE_ENGINES),
            _ => None,
        }
    }

    /// Needs the shared data file (real data, laid out before the runs).
    pub fn needs_data(&self) -> bool {
        // (Custom jobs lay out files of their own: see the runner.)
        matches!(
            self.kind,
            Kind::RandWrite
                | Kind::SeqRead
                | Kind::RandRead
                | Kind::CachedRead { .. }
                | Kind::HotSet(HotSet::ReadStream)
                | Kind::Advice(AdviceVariant::ColdRead | AdviceVariant::ColdReadWillneed)
        )
    }
}

/// All 18 small-overwrite variant names.
pub fn overwrite_variants() -> Vec<String> {
    let mut v = Vec::new();
    for call in ["write", "pwrite", "writev"] {
        for size in ["1k", "10k"] {
            for file in ["4k", "1m", "2m"] {
                v.push(format!("{call}-{size}-{file}-file"));
            }
        }
    }
    v
}

/// Parses `pwrite-1k-2m-file`.
pub fn parse_overwrite(name: &str) -> Option<Kind> {
    let rest = name.strip_suffix("-file")?;
    let mut parts = rest.split('-');
    let call = match parts.next()? {
        "write" => CallKind::Write,
        "pwrite" => CallKind::Pwrite,
        "writev" => CallKind::Writev,
        _ => return None,
    };
    let bs = match parts.next()? {
        "1k" => KIB,
        "10k" => 10 * KIB,
        _ => return None,
    };
    let file_size = match parts.next()? {
        "4k" => 4 * KIB,
        "1m" => MIB,
        "2m" => 2 * MIB,
        _ => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Kind::Overwrite { call, bs, file_size })
}

/// The groups a workload name (or small-overwrite variant name) expands to,
/// `parallel-writeback` with its default worker counts.
#[cfg(test)]
pub fn groups_for(name: &str, overwrite_subset: Option<&[&str]>) -> Option<Vec<Group>> {
    expand(name, overwrite_subset, PW_DEFAULT_WORKERS)
}

/// The groups a workload name expands to: a catalog name, a small-overwrite
/// variant name, `parallel-writeback/<selector>` (see [`pw_selection`]),
/// `hot-set/<variant>`, `sqlite/<variant>` or `advice/<variant>`;
/// `parallel-writeback` tries these writeback worker counts.
pub fn expand(name: &str, overwrite_subset: Option<&[&str]>, writeback_workers: &[u32]) -> Option<Vec<Group>> {
    let g = |workload: &'static str, kind: Kind| Group { workload, variant: None, kind };
    if let Some(selector) = name.strip_prefix("parallel-writeback/") {
        return pw_selection(selector, writeback_workers);
    }
    if let Some(variant) = name.strip_prefix("hot-set/") {
        return Some(vec![HotSet::parse(variant)?.group()]);
    }
    if let Some(variant) = name.strip_prefix("sqlite/") {
        return Some(vec![SqliteVariant::parse(variant)?.group()]);
    }
    if let Some(variant) = name.strip_prefix("advice/") {
        return Some(vec![AdviceVariant::parse(variant)?.group()]);
    }
    let groups = match name {
        "seq-write" => vec![g("seq-write", Kind::SeqWrite)],
        "rand-write" => vec![g("rand-write", Kind::RandWrite)],
        "multi-writer" => vec![g("multi-writer", Kind::MultiWriter)],
        "files-32" => vec![g("files-32", Kind::Files32)],
        "competing" => vec![g("competing", Kind::Competing)],
        "fsync-under-load" => FsyncGroup::ALL
            .into_iter()
            .map(|f| Group {
                workload: "fsync-under-load",
                variant: Some(f.variant().into()),
                kind: Kind::FsyncUnderLoad(f),
            })
            .collect(),
        "parallel-writeback" => pw_groups(writeback_workers),
        "hot-set" => HotSet::ALL.into_iter().map(HotSet::group).collect(),
        "sqlite" => SqliteVariant::ALL.into_iter().map(SqliteVariant::group).collect(),
        "advice" => AdviceVariant::ALL.into_iter().map(AdviceVariant::group).collect(),
        "seq-read" => vec![g("seq-read", Kind::SeqRead)],
        "rand-read" => vec![
            g("rand-read", Kind::RandRead),
            Group {
                workload: "rand-read",
                variant: Some("cached-4k".into()),
                kind: Kind::CachedRead { shape: CachedShape::Region },
            },
            Group {
                workload: "rand-read",
                variant: Some("cached-4k-offset0".into()),
                kind: Kind::CachedRead { shape: CachedShape::Offset0 },
            },
            Group {
                workload: "rand-read",
                variant: Some("cached-4k-written".into()),
                kind: Kind::CachedRead { shape: CachedShape::Written },
            },
        ],
        "small-overwrite" => {
            let names: Vec<String> = match overwrite_subset {
                Some(subset) => subset.iter().map(|s| s.to_string()).collect(),
                None => overwrite_variants(),
            };
            names
                .into_iter()
                .map(|v| Group {
                    workload: "small-overwrite",
                    kind: parse_overwrite(&v).expect("known variant"),
                    variant: Some(v),
                })
                .collect()
        }
        other => {
            let kind = parse_overwrite(other)?;
            vec![Group { workload: "small-overwrite", variant: Some(other.to_string()), kind }]
        }
    };
    Some(groups)
}

/// The cached reads of `rand-read`'s per-call variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachedShape {
    /// `cached-4k`: random 4 KiB inside a region read once before (the
    /// caches hold it as readahead left it: 2 MiB folios in wbcache).
    Region,
    /// `cached-4k-offset0`: the same 4 KiB at offset 0 (libMicro's
    /// `pread_u4k`).
    Offset0,
    /// `cached-4k-written`: random 4 KiB inside a region written before in
    /// 4 KiB writes in random order (4 KiB folios).
    Written,
}

/// What a job does before the timed phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Setup {
    None,
    /// Write the first `bytes` of the target (one call when it is at most
    /// 2 MiB, so the cache can build one large folio), then fsync: the file
    /// starts out cached and clean.
    Prefill {
        bytes: u64,
    },
    /// Read the first `bytes` of the target once: they start out cached.
    Warm {
        bytes: u64,
    },
    /// Write the first `bytes` of the target in `bs` writes, each block
    /// once in a random order, then fsync: they start out cached and
    /// clean, in `bs` pieces (a cache keeps each write's folio).
    ScatteredWrites {
        bytes: u64,
        bs: u64,
    },
    /// `hot-set`'s hot file: write the first `bytes` of the target in 1 MiB
    /// writes, fsync, then read them twice: they start out cached, and
    /// hot (read more than once) for the cache's replacement policy.
    Hot {
        bytes: u64,
    },
    /// `advice`'s cold file (laid out before the run): drop the target's
    /// range from the kernel's page cache (`POSIX_FADV_DONTNEED` on a file
    /// descriptor of its own; the data is clean), so it starts out cold
    /// for the kernel also where the caches cannot be dropped between runs.
    /// (A wbcache Cache is new in every measurement: nothing is cached.)
    Cold,
}

/// The timed phase of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Pattern {
    /// Sequential requests of `bs` from offset 0, wrapping at the target's
    /// length; `total` bytes, or until the deadline when `None`.
    Seq { write: bool, bs: u64, total: Option<u64> },
    /// Random `bs`-aligned requests over the target; `ops` requests (each
    /// block at most once), or until the deadline when `None`.
    Rand { write: bool, bs: u64, ops: Option<u64> },
    /// libMicro: `iterations` calls writing `iovecs` buffers of `bs` at offset 0.
    Calls { call: CallKind, bs: u64, iovecs: u64, iterations: u64, warmup: u64 },
    /// Random `bs` reads inside the first `span` bytes.
    CachedReads { bs: u64, span: u64, iterations: u64, warmup: u64 },
    /// `iterations` × (write `bs` at the end of what the job wrote so far,
    /// sleep `pause_ms`, fsync), each fsync timed on its own; no new
    /// iteration after the deadline.
    FsyncEach { bs: u64, iterations: u64, pause_ms: u64 },
    /// A fio-style job over the target and `more_targets` (its other files).
    Fio { job: FioJob, more_targets: Vec<Target> },
    /// `bs` random writes to this job's share of the target's blocks, each
    /// once: of one pseudo-random order of all of them (the same for every
    /// job with the same `key`), the job takes every `shares`-th, from the
    /// `share`-th on. The jobs with shares `0..shares` write every block
    /// once between them. Until the deadline.
    RandShare { bs: u64, share: u64, shares: u64, key: u64 },
    /// `hot-set`'s hot reader: `bs` sequential reads over the target,
    /// wrapping, until the deadline or until the streamer ends; before each
    /// read, asks the engine whether the whole chunk is cached (where the
    /// engine has a cache to ask).
    HotReads { bs: u64 },
    /// `sqlite`'s transactions: load the database (the target), then run
    /// pgbench's TPC-B-like transaction one after another until the
    /// deadline, or until the streaming writer ends.
    Sqlite(SqliteJob),
    /// `advice`: `bs` sequential reads of the whole target (after one
    /// WILLNEED over it for `cold-read-willneed`), or `bs` sequential
    /// writes of the whole target, then fsync, with the variant's advice
    /// and a look at what of the target is cached after every `every`
    /// bytes written; stopped at the deadline.
    Advice { variant: AdviceVariant, bs: u64, every: u64 },
}

/// The role of the job whose fsyncs `fsync-under-load` measures: when it
/// ends, the jobs with the [`BACKGROUND`] role stop.
pub const FOREGROUND: &str = "foreground";
/// The role of `fsync-under-load`'s background writers.
pub const BACKGROUND: &str = "background";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobSpec {
    /// Row name for workloads reporting per job (competing).
    pub role: Option<String>,
    pub engine: EngineKind,
    pub target: Target,
    pub setup: Setup,
    pub pattern: Pattern,
    pub fsync_at_end: bool,
    pub seed: u64,
    /// Once every job of the measurement has done its I/O, fsync the target
    /// (`parallel-writeback shared`: one fsync after the last writer).
    #[serde(default)]
    pub fsync_after_all: bool,
}

impl JobSpec {
    /// Every file or device region the job touches.
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        let more = match &self.pattern {
            Pattern::Fio { more_targets, .. } => more_targets.as_slice(),
            Pattern::Sqlite(sq) => sq.side_files.as_slice(),
            _ => &[],
        };
        std::iter::once(&self.target).chain(more)
    }
}

/// Everything a worker needs for one measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    pub workload: String,
    pub variant: Option<String>,
    pub engine: EngineKind,
    pub jobs: Vec<JobSpec>,
    /// No new request is issued after this many seconds of the timed phase.
    pub deadline_s: f64,
    pub wbcache_options: String,
    /// Let pipelined engines keep several requests in flight.
    pub pipelined: bool,
    /// Emit `@progress` lines on stderr.
    pub progress: bool,
}

/// Sizes and times of a run, fixed by the suite and the command line.
#[derive(Clone, Debug)]
pub struct Params {
    pub memory: u64,
    pub size: u64,
    pub runtime_s: f64,
    /// Cap on size-based workloads (they stop early and report what they did).
    pub stream_cap_s: f64,
    /// Cap on the per-call workloads.
    pub call_cap_s: f64,
    pub iterations_1k: u64,
    pub iterations_10k: u64,
    pub warmup: u64,
    /// The accounts data `sqlite` loads: 1.25 × the memory (a few MiB
    /// with --quick).
    pub sqlite_data_bytes: u64,
    pub wbcache_options: String,
}

/// Where the files live: a directory, or regions of a raw block device.
#[derive(Clone, Debug)]
pub struct Place {
    pub dir: Option<PathBuf>,
    pub device: Option<PathBuf>,
    pub device_size: u64,
    /// Free bytes in the directory's file system at the start.
    pub free_bytes: u64,
}

impl Place {
    pub fn data_path(&self) -> PathBuf {
        match (&self.device, &self.dir) {
            (Some(dev), _) => dev.clone(),
            (None, Some(dir)) => dir.join("data.bin"),
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    fn data(&self, len: u64) -> Target {
        Target { path: self.data_path(), offset: 0, len, create: false }
    }

    /// Region `index` of `len` bytes: a new file, or a slice of the device.
    fn fresh(&self, name: &str, index: usize, len: u64) -> Target {
        match (&self.device, &self.dir) {
            (Some(dev), _) => Target { path: dev.clone(), offset: index as u64 * len, len, create: false },
            (None, Some(dir)) => Target { path: dir.join(format!("{name}-{index}.bin")), offset: 0, len, create: true },
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    /// File `file` of custom job `job`: laid out by the runner (in place
    /// on a device) unless the job only writes sequentially.
    pub fn custom_file(&self, fio: &FioJob, job: u64, file: u64) -> Target {
        let len = fio.file_len();
        match (&self.device, &self.dir) {
            (Some(dev), _) => {
                Target { path: dev.clone(), offset: (job * fio.nrfiles + file) * len, len, create: false }
            }
            (None, Some(dir)) => {
                Target { path: dir.join(FioJob::file_name(job, file)), offset: 0, len, create: !fio.rw.needs_layout() }
            }
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    /// The files of an `fsync-under-load` measurement: the foreground's
    /// (`fg_len` bytes, `bs` per iteration) and the two background
    /// writers' (up to `want` bytes each, what is left of the space after
    /// the foreground's). On a device: the foreground's region first (at
    /// most a quarter of the device, whole iterations), then the two
    /// writers' halves of the rest.
    fn fsync_layout(&self, name: &str, fg_len: u64, bs: u64, want: u64) -> (Target, [Target; 2]) {
        match (&self.device, &self.dir) {
            (Some(dev), _) => {
                let fg = if fg_len == 0 { 0 } else { round_down(fg_len.min(self.device_size / 4), bs) };
                let per = round_down(want.min(self.device_size.saturating_sub(fg) / 2).max(MIB), MIB);
                let region = |offset: u64, len: u64| Target { path: dev.clone(), offset, len, create: false };
                (region(0, fg), [region(fg, per), region(fg + per, per)])
            }
            (None, Some(_)) => {
                let rest = Place { free_bytes: self.free_bytes.saturating_sub(fg_len), ..self.clone() };
                let per = rest.per_writer(2, want);
                (self.fresh(name, 2, fg_len), [self.fresh(name, 0, per), self.fresh(name, 1, per)])
            }
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    /// The targets of a `hot-set` measurement: the hot file (`hot_len`
    /// bytes) and the stream (`stream_len` bytes: the shared data file
    /// when `read`, else a new file). On a device: the stream's region
    /// first (the data's, at offset 0), then the hot region right after it,
    /// the hot region at most a quarter of the device and the stream what
    /// is left of it.
    fn hot_layout(&self, name: &str, hot_len: u64, stream_len: u64, read: bool) -> (Target, Target) {
        match (&self.device, &self.dir) {
            (Some(dev), _) => {
                let hot = round_down(hot_len.min(self.device_size / 4), HOT_BS);
                let stream = round_down(stream_len.min(self.device_size.saturating_sub(hot)), HOT_STREAM_BS);
                let region = |offset: u64, len: u64| Target { path: dev.clone(), offset, len, create: false };
                (region(stream, hot), region(0, stream))
            }
            (None, Some(dir)) => {
                let hot = Target { path: dir.join(format!("{name}-hot.bin")), offset: 0, len: hot_len, create: true };
                let stream = if read { self.data(stream_len) } else { self.fresh(name, 0, stream_len) };
                (hot, stream)
            }
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    /// The database of a `sqlite` measurement (a new file in the
    /// directory; on a device, the device itself, where the job reports
    /// that SQLite needs a file system) and its side files.
    fn sqlite_db(&self, name: &str, len: u64) -> (Target, Vec<Target>) {
        match (&self.device, &self.dir) {
            (Some(dev), _) => (Target { path: dev.clone(), offset: 0, len, create: false }, Vec::new()),
            (None, Some(dir)) => {
                let file = |suffix: &str| Target {
                    path: dir.join(format!("{name}.db{suffix}")),
                    offset: 0,
                    len: if suffix.is_empty() { len } else { 0 },
                    create: true,
                };
                (file(""), ["-wal", "-shm", "-journal"].map(file).to_vec())
            }
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    /// Per-file length for `n` time-based writers: `want`, bounded by the
    /// space there is (writers wrap around at this length).
    fn per_writer(&self, n: u64, want: u64) -> u64 {
        let avail = if self.device.is_some() { self.device_size / n } else { self.free_bytes / 10 * 8 / n };
        round_down(want.min(avail).max(MIB), MIB)
    }
}

fn round_down(v: u64, to: u64) -> u64 {
    (v / to).max(1) * to
}

/// Human description of a group with this run's sizes (table headings).
pub fn describe(group: &Group, p: &Params) -> String {
    let size = fmt_size(p.size);
    let rt = p.runtime_s;
    match &group.kind {
        Kind::SeqWrite => format!("one writer, 1 MiB sequential writes, {size} file, then fsync"),
        Kind::RandWrite => format!("one writer, 4 KiB random writes over a {size} file (at most {rt} s), then fsync"),
        Kind::MultiWriter => {
            format!("4 writers, 1 MiB sequential writes, {} per file, then fsync", fmt_size(p.size / 4))
        }
        Kind::Files32 => format!("32 writers, 64 KiB sequential writes, one file each, {rt} s, then fsync"),
        Kind::Competing => {
            format!("the engine's writer vs a buffered writer of the same system, 1 MiB sequential, {rt} s, then fsync")
        }
        Kind::FsyncUnderLoad(f) => {
            let foreground = f.foreground().map(|fg| {
                let (_, n, _) = fg.shape(rt);
                match fg {
                    Foreground::Small => format!(
                        "{n} × (4 KiB appended to the foreground's own new file, {FSYNC_SMALL_PAUSE_MS} ms pause, fsync)"
                    ),
                    Foreground::Large => {
                        format!("{n} × (8 MiB appended to the foreground's own new file in one write call, fsync)")
                    }
                }
            });
            match (foreground, f.loaded()) {
                (Some(fg), false) => format!("{fg}, alone"),
                (Some(fg), true) => format!("{fg}, next to the two background writers"),
                (None, _) => format!("the two background writers alone for {rt} s"),
            }
        }
        Kind::ParallelWriteback(pw) => {
            let writers = match pw.pattern {
                PwPattern::Files => format!("{PW_WRITERS} writers, one new {} file each", fmt_size(pw_file_len(p))),
                PwPattern::Shared => {
                    format!("{PW_WRITERS} writers sharing one new {} file", fmt_size(pw_shared_len(p)))
                }
            };
            let on = pw.writeback.map(|w| format!(", wbcache with writeback {}", w.name())).unwrap_or_default();
            format!("{writers}, 4 KiB random writes (at most {rt} s), then fsync{on}")
        }
        Kind::HotSet(v) => {
            let hot = fmt_size(hot_len(p));
            let stream = fmt_size(hot_stream_len(p));
            match v {
                HotSet::Alone => format!("the hot reader alone over its cached {hot} file for {rt} s"),
                HotSet::WriteStream => format!(
                    "the hot reader over its cached {hot} file while the streamer writes a new {stream} file \
                     (1 MiB writes, then fsync)"
                ),
                HotSet::ReadStream => format!(
                    "the hot reader over its cached {hot} file while the streamer reads a cold {stream} file \
                     (1 MiB reads)"
                ),
            }
        }
        Kind::Sqlite(v) => {
            let journal = match v.journal {
                Journal::Wal => "journal_mode=WAL",
                Journal::Delete => "journal_mode=DELETE",
            };
            if v.streaming {
                format!(
                    "{journal}, next to the streaming writer (a {} file written in 1 MiB writes over and over \
                     until the runtime ends, then fsync; the transactions starting once it has written {})",
                    fmt_size(sqlite_stream_len(p)),
                    fmt_size(sqlite_head_start(p))
                )
            } else {
                format!("{journal}, the transactions alone")
            }
        }
        Kind::Advice(v) => {
            let cold = fmt_size(advice_cold_len(p));
            let stream = fmt_size(advice_stream_len(p));
            let every = fmt_size(ADVICE_EVERY);
            match v {
                AdviceVariant::ColdRead => format!("a cold {cold} file read sequentially, 1 MiB reads"),
                AdviceVariant::ColdReadWillneed => format!(
                    "one WILLNEED over the whole cold {cold} file (posix_fadvise(POSIX_FADV_WILLNEED) / \
                     File::advise(Advice::WillNeed)), then the same reads"
                ),
                AdviceVariant::Stream => format!("a new {stream} file written in 1 MiB sequential writes, then fsync"),
                AdviceVariant::StreamDontneed => format!(
                    "the same stream, with DONTNEED over everything written so far after every {every} \
                     (posix_fadvise(POSIX_FADV_DONTNEED) / File::advise(Advice::DontNeed))"
                ),
                AdviceVariant::StreamSyncRange => format!(
                    "the same stream, starting the writeback of the {every} just written after every {every} \
                     (sync_file_range(SYNC_FILE_RANGE_WRITE) / File::writeback_range(SyncRangeFlags::WRITE))"
                ),
            }
        }
        Kind::SeqRead => format!("cold sequential read of a {size} file, 1 MiB reads"),
        Kind::RandRead => format!("4 KiB random reads over a {size} file, {rt} s"),
        Kind::CachedRead { shape: CachedShape::Region } => {
            format!("4 KiB random reads inside a cached {} region, µs per call", fmt_size(cached_span(p)))
        }
        Kind::CachedRead { shape: CachedShape::Offset0 } => {
            "4 KiB pread at offset 0 of a cached file (libMicro pread_u4k), µs per call".into()
        }
        Kind::CachedRead { shape: CachedShape::Written } => format!(
            "4 KiB random reads inside a cached {} region written before in 4 KiB writes in random order \
             (a database's hot pages: many 4 KiB folios, not readahead's 2 MiB ones), µs per call",
            fmt_size(cached_span(p))
        ),
        Kind::Custom(job) => {
            let mix = match job.rw {
                FioRw::RandRw => format!(" ({}% reads)", job.rwmixread),
                _ => String::new(),
            };
            let fsync = match (job.fsync_every, job.end_fsync) {
                (0, false) => String::new(),
                (0, true) => ", fsync at the end".into(),
                (n, end) => format!(", fsync every {n} writes{}", if end { " and at the end" } else { "" }),
            };
            let stop = if job.runtime_capped { format!(" or {rt} s, whichever comes first") } else { String::new() };
            format!(
                "fio-style job: rw={}{mix}, bs={}, {} thread(s), each over {} file(s) of {}, {} of I/O per thread{stop}{fsync}",
                job.rw.name(),
                fmt_size(job.bs),
                job.numjobs,
                job.nrfiles,
                fmt_size(job.file_len()),
                fmt_size(job.size)
            )
        }
        Kind::Overwrite { call, bs, file_size } => format!(
            "{}{} {} at offset 0 of a cached {} file, µs per call",
            call.name(),
            if *call == CallKind::Writev { " (10 iovecs of)" } else { "" },
            fmt_size(*bs),
            fmt_size(*file_size)
        ),
    }
}

/// What `fsync-under-load`'s background writers do (said once above its
/// table, before each variant's description).
pub fn fsync_background_about(p: &Params) -> String {
    format!(
        "Background writers: two, of the engine under test, 1 MiB sequential writes to new files of up to {} each \
         (wrapping), no fsync; next to a foreground they run until it ends",
        fmt_size(p.size)
    )
}

/// Each file of `parallel-writeback files`: a twelfth of --size, whole
/// blocks (on a device, each writer's twelfth of the area).
pub fn pw_file_len(p: &Params) -> u64 {
    round_down(p.size / PW_WRITERS, PW_BS)
}

/// The file of `parallel-writeback shared` (on a device, the area).
pub fn pw_shared_len(p: &Params) -> u64 {
    round_down(p.size, PW_BS)
}

/// What `parallel-writeback` does, per pattern, with this run's sizes (its
/// table's heading).
pub fn pw_about(p: &Params) -> String {
    let rt = p.runtime_s;
    format!(
        "{PW_WRITERS} writers at once, 4 KiB random writes, every block once in a random order, {} in all; a writer \
         still writing after {rt} s stops there (what it wrote counts), then fsync. files: one new {} file per writer, \
         each writer fsyncs its own; shared: one new {} file for all, each writer a disjoint random share of its \
         blocks, one fsync after the last writer",
        fmt_size(p.size),
        fmt_size(pw_file_len(p)),
        fmt_size(pw_shared_len(p))
    )
}

/// What `hot-set` does, with this run's sizes (said once above its table,
/// before each variant's description).
pub fn hot_about(p: &Params) -> String {
    format!(
        "Hot reader: 256 KiB sequential reads over a hot {} file (a quarter of the memory), wrapping around; before \
         the timed part the file is written, fsynced and read twice, so it starts out cached. It reads plainly \
         through the engine's cache: buffered pread on kernel-buffered and kernel-dontcache, O_DIRECT on \
         kernel-direct (no cache: no hit ratio), and read_at without flags on the same wbcache Cache as the \
         streamer on wbcache and wbcache-dontcache. Streamer: {} through the engine in its own mode (plain \
         buffered, RWF_DONTCACHE, O_DIRECT, wbcache, wbcache with WriteFlags::DONTCACHE)",
        fmt_size(hot_len(p)),
        fmt_size(hot_stream_len(p))
    )
}

/// What `sqlite` does, with this run's sizes (said once above its table,
/// before each variant's description).
pub fn sqlite_about(p: &Params) -> String {
    let accounts = sqlite_accounts(p);
    let job = SqliteJob { journal: Journal::Wal, accounts, head_start: 0, side_files: Vec::new() };
    format!(
        "SQLite, one connection, PRAGMA synchronous=FULL, 4 KiB pages, running pgbench's TPC-B-like transaction \
         one after another for {} s: BEGIN; UPDATE pgbench_accounts (a random account's balance + a random delta); \
         SELECT that balance; UPDATE pgbench_tellers; UPDATE pgbench_branches; INSERT INTO pgbench_history; COMMIT. \
         The database: {}, {} tellers, {} accounts (about {} of accounts data, an 84-character filler each), \
         loaded before the timed part with journal_mode=OFF and synchronous=OFF, then synced. \
         kernel-buffered runs SQLite's default unix VFS (the kernel's page cache); wbcache runs the wbcache VFS over \
         the engine's Cache, which the streaming writer shares",
        p.runtime_s,
        match job.branches() {
            1 => "1 branch".to_string(),
            n => format!("{} branches", fmt_num(n)),
        },
        fmt_num(job.tellers()),
        fmt_num(accounts),
        fmt_size(p.sqlite_data_bytes)
    )
}

/// What `advice` does, with this run's sizes (said once above its table,
/// before each variant's description).
pub fn advice_about(p: &Params) -> String {
    format!(
        "The page-cache controls applications use, on the kernel's page cache (kernel-buffered: pread and pwrite, \
         posix_fadvise(2) and sync_file_range(2) on the same file descriptor) and on wbcache (read_at and write_at, \
         File::advise and File::writeback_range on the same handle); the other engines do not run it. Cold reads: the \
         first {} of the data file laid out before the run, dropped from the kernel's page cache before the timed \
         part (a wbcache Cache starts empty). Streams: a new {} file, 1 MiB writes, then fsync; after every \
         {} written, the file's cached bytes are looked at (mincore(2) on a read-only shared mapping of the file, \
         never touched, for the kernel; File::cached_ranges summed for wbcache), before the variant's advice",
        fmt_size(advice_cold_len(p)),
        fmt_size(advice_stream_len(p)),
        fmt_size(ADVICE_EVERY)
    )
}

/// `1234567` as `1,234,567`.
fn fmt_num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The region the `cached-4k` variant reads at random.
pub fn cached_span(p: &Params) -> u64 {
    round_down((p.memory / 4).min(64 * MIB).min(p.size), 4 * KIB)
}

/// The size of the shared data file.
pub fn data_len(p: &Params) -> u64 {
    p.size
}

/// The spec of one measurement.
pub fn build_spec(group: &Group, engine: EngineKind, p: &Params, place: &Place, progress: bool) -> Spec {
    let name = format!("{}-{}", group.slug(), engine.name());
    let job = |engine: EngineKind, target: Target, setup: Setup, pattern: Pattern, fsync: bool, seed: u64| JobSpec {
        role: None,
        engine,
        target,
        setup,
        pattern,
        fsync_at_end: fsync,
        seed,
        fsync_after_all: false,
    };
    let seq_w = |bs: u64, total: Option<u64>| Pattern::Seq { write: true, bs, total };
    let (jobs, deadline_s, pipelined) = match &group.kind {
        Kind::SeqWrite => {
            let t = place.fresh(&name, 0, p.size);
            (vec![job(engine, t, Setup::None, seq_w(MIB, Some(p.size)), true, 1)], p.stream_cap_s, true)
        }
        Kind::RandWrite => {
            let pat = Pattern::Rand { write: true, bs: 4 * KIB, ops: Some(p.size / (4 * KIB)) };
            (vec![job(engine, place.data(p.size), Setup::None, pat, true, 2)], p.runtime_s, true)
        }
        Kind::MultiWriter => {
            let per = round_down(p.size / 4, MIB);
            let jobs = (0..4)
                .map(|i| job(engine, place.fresh(&name, i, per), Setup::None, seq_w(MIB, Some(per)), true, 3))
                .collect();
            (jobs, p.stream_cap_s, true)
        }
        Kind::Files32 => {
            let per = place.per_writer(32, p.size);
            let jobs = (0..32)
                .map(|i| job(engine, place.fresh(&name, i, per), Setup::None, seq_w(64 * KIB, None), true, 4))
                .collect();
            (jobs, p.runtime_s, true)
        }
        Kind::Competing => {
            let per = place.per_writer(2, p.size);
            let mut a = job(engine, place.fresh(&name, 0, per), Setup::None, seq_w(MIB, None), true, 5);
            a.role = Some("writer".into());
            let mut b = job(engine.buffered_peer(), place.fresh(&name, 1, per), Setup::None, seq_w(MIB, None), true, 6);
            b.role = Some("buffered-peer".into());
            (vec![a, b], p.runtime_s, true)
        }
        Kind::FsyncUnderLoad(f) => {
            let (bs, iterations, pause_ms) = f.foreground().map_or((MIB, 0, 0), |fg| fg.shape(p.runtime_s));
            let (fg_target, bg_targets) = place.fsync_layout(&name, bs * iterations, bs, p.size);
            let mut jobs = Vec::new();
            if f.foreground().is_some() {
                let pat = Pattern::FsyncEach { bs, iterations, pause_ms };
                let mut fg = job(engine, fg_target, Setup::None, pat, false, 12);
                fg.role = Some(FOREGROUND.into());
                jobs.push(fg);
            }
            if f.loaded() {
                for (i, t) in bg_targets.into_iter().enumerate() {
                    let mut bg = job(engine, t, Setup::None, seq_w(MIB, None), false, 13 + i as u64);
                    bg.role = Some(BACKGROUND.into());
                    jobs.push(bg);
                }
            }
            let deadline = f.foreground().map_or(p.runtime_s, |fg| fg.deadline_s(p.runtime_s));
            (jobs, deadline, true)
        }
        Kind::ParallelWriteback(pw) => {
            let jobs = match pw.pattern {
                PwPattern::Files => {
                    let per = pw_file_len(p);
                    let ops = Some(per / PW_BS);
                    (0..PW_WRITERS)
                        .map(|i| {
                            let pat = Pattern::Rand { write: true, bs: PW_BS, ops };
                            // Each file its own random order.
                            job(engine, place.fresh(&name, i as usize, per), Setup::None, pat, true, 20 + i)
                        })
                        .collect()
                }
                PwPattern::Shared => {
                    let t = place.fresh(&name, 0, pw_shared_len(p));
                    (0..PW_WRITERS)
                        .map(|i| {
                            let pat = Pattern::RandShare { bs: PW_BS, share: i, shares: PW_WRITERS, key: 40 };
                            let mut j = job(engine, t.clone(), Setup::None, pat, false, 40 + i);
                            j.fsync_after_all = i == 0;
                            j
                        })
                        .collect()
                }
            };
            (jobs, p.runtime_s, true)
        }
        Kind::HotSet(v) => {
            let (hot_target, stream_target) =
                place.hot_layout(&name, hot_len(p), hot_stream_len(p), *v == HotSet::ReadStream);
            let setup = Setup::Hot { bytes: hot_target.len };
            let mut hot = job(hot_engine(engine), hot_target, setup, Pattern::HotReads { bs: HOT_BS }, false, 50);
            hot.role = Some(HOT.into());
            let mut jobs = vec![hot];
            if let Some(write) = v.stream_writes() {
                let pat = Pattern::Seq { write, bs: HOT_STREAM_BS, total: Some(stream_target.len) };
                let mut streamer = job(engine, stream_target, Setup::None, pat, write, 51);
                streamer.role = Some(STREAMER.into());
                jobs.push(streamer);
            }
            let deadline = if *v == HotSet::Alone { p.runtime_s } else { p.stream_cap_s };
            (jobs, deadline, true)
        }
        Kind::Sqlite(v) => {
            let (db, side_files) = place.sqlite_db(&name, p.sqlite_data_bytes);
            // On a device there is no file system for SQLite: the job says
            // so, and no writer runs.
            let streaming = v.streaming && place.device.is_none();
            let head_start = if streaming { sqlite_head_start(p) } else { 0 };
            let sq = SqliteJob { journal: v.journal, accounts: sqlite_accounts(p), head_start, side_files };
            let mut txn = job(engine, db, Setup::None, Pattern::Sqlite(sq), false, 60);
            txn.role = Some(TRANSACTIONS.into());
            let mut jobs = vec![txn];
            if streaming {
                let len = sqlite_stream_len(p);
                // Round and round the file until the runtime ends, so the
                // transactions run beside the stream for all of it (one
                // pass takes well under a second on a fast disk); then
                // fsync, as hot-set's write-stream.
                let pat = Pattern::Seq { write: true, bs: SQLITE_STREAM_BS, total: None };
                let mut streamer = job(engine, place.fresh(&name, 0, len), Setup::None, pat, true, 61);
                streamer.role = Some(STREAMER.into());
                jobs.push(streamer);
            }
            (jobs, p.runtime_s, false)
        }
        Kind::Advice(v) => {
            let pattern = Pattern::Advice { variant: *v, bs: ADVICE_BS, every: ADVICE_EVERY };
            let j = if v.reads() {
                job(engine, place.data(advice_cold_len(p)), Setup::Cold, pattern, false, 70)
            } else {
                job(engine, place.fresh(&name, 0, advice_stream_len(p)), Setup::None, pattern, true, 71)
            };
            (vec![j], p.stream_cap_s, false)
        }
        Kind::SeqRead => {
            let pat = Pattern::Seq { write: false, bs: MIB, total: Some(p.size) };
            (vec![job(engine, place.data(p.size), Setup::None, pat, false, 7)], p.stream_cap_s, true)
        }
        Kind::RandRead => {
            let pat = Pattern::Rand { write: false, bs: 4 * KIB, ops: None };
            (vec![job(engine, place.data(p.size), Setup::None, pat, false, 8)], p.runtime_s, true)
        }
        Kind::CachedRead { shape } => {
            let span = if *shape == CachedShape::Offset0 { 4 * KIB } else { cached_span(p) };
            let pat = Pattern::CachedReads { bs: 4 * KIB, span, iterations: p.iterations_1k, warmup: p.warmup };
            let j = match shape {
                CachedShape::Written => {
                    let t = place.fresh(&name, 0, span);
                    job(engine, t, Setup::ScatteredWrites { bytes: span, bs: 4 * KIB }, pat, false, 9)
                }
                _ => job(engine, place.data(span), Setup::Warm { bytes: span }, pat, false, 9),
            };
            (vec![j], p.call_cap_s, false)
        }
        Kind::Custom(fio) => {
            let jobs = (0..fio.numjobs)
                .map(|j| {
                    let targets: Vec<Target> = (0..fio.nrfiles).map(|f| place.custom_file(fio, j, f)).collect();
                    let pattern = Pattern::Fio { job: fio.clone(), more_targets: targets[1..].to_vec() };
                    job(engine, targets[0].clone(), Setup::None, pattern, fio.end_fsync, 11 + j)
                })
                .collect();
            let deadline = if fio.runtime_capped { p.runtime_s } else { p.stream_cap_s };
            // fio's psync engine: one request at a time per thread.
            (jobs, deadline, false)
        }
        Kind::Overwrite { call, bs, file_size } => {
            let iovecs = if *call == CallKind::Writev { 10 } else { 1 };
            let iterations = if *bs >= 10 * KIB { p.iterations_10k } else { p.iterations_1k };
            let pat = Pattern::Calls { call: *call, bs: *bs, iovecs, iterations, warmup: p.warmup };
            let t = place.fresh(&name, 0, (*file_size).max(iovecs * bs));
            (vec![job(engine, t, Setup::Prefill { bytes: *file_size }, pat, false, 10)], p.call_cap_s, false)
        }
    };
    let wbcache_options = match &group.kind {
        Kind::ParallelWriteback(PwGroup { writeback: Some(w), .. }) => options_with(&p.wbcache_options, &w.options()),
        _ => p.wbcache_options.clone(),
    };
    Spec {
        workload: group.workload.to_string(),
        variant: group.variant.clone(),
        engine,
        jobs,
        deadline_s,
        wbcache_options,
        pipelined,
        progress,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_overwrite_variant_parses() {
        let all = overwrite_variants();
        assert_eq!(all.len(), 18);
        for v in &all {
            assert!(parse_overwrite(v).is_some(), "{v}");
        }
        assert_eq!(
            parse_overwrite("pwrite-1k-2m-file"),
            Some(Kind::Overwrite { call: CallKind::Pwrite, bs: 1024, file_size: 2 << 20 })
        );
        assert!(parse_overwrite("pwrite-2k-2m-file").is_none());
        assert!(groups_for("nope", None).is_none());
        assert_eq!(groups_for("small-overwrite", None).unwrap().len(), 18);
    }

    fn params(runtime_s: f64) -> Params {
        Params {
            memory: 128 * MIB,
            size: 256 * MIB,
            runtime_s,
            stream_cap_s: 6.0 * runtime_s,
            call_cap_s: 0.25,
            iterations_1k: 10,
            iterations_10k: 10,
            warmup: 1,
            sqlite_data_bytes: 160 * MIB,
            wbcache_options: "capacity=128M".into(),
        }
    }

    #[test]
    fn fsync_under_load_expands_to_five_groups() {
        let groups = groups_for("fsync-under-load", None).unwrap();
        let variants: Vec<&str> = groups.iter().map(|g| g.variant.as_deref().unwrap()).collect();
        assert_eq!(variants, ["small/idle", "small/load", "large/idle", "large/load", "background/alone"]);
        assert!(groups.iter().all(|g| g.workload == "fsync-under-load"));
        // The slug names files and charts: no '/' in it.
        assert_eq!(groups[1].slug(), "fsync-under-load-small-load");
        assert!(info("fsync-under-load").is_some_and(|w| w.source.is_some_and(|s| s.contains("Daeho Jeong"))));
    }

    #[test]
    fn fsync_iterations_follow_the_runtime() {
        assert_eq!((fsync_small_iterations(5.0), fsync_large_iterations(5.0)), (100, 50));
        assert_eq!((fsync_small_iterations(1.0), fsync_large_iterations(1.0)), (20, 10));
        assert_eq!((fsync_small_iterations(0.1), fsync_large_iterations(0.1)), (10, 5));
        assert_eq!((fsync_small_iterations(60.0), fsync_large_iterations(60.0)), (100, 50));
        assert_eq!(fsync_small_iterations(2.26), 45);
        assert_eq!(Foreground::Small.deadline_s(5.0), 40.0);
        assert_eq!(Foreground::Large.deadline_s(5.0), 80.0);
    }

    #[test]
    fn fsync_specs_have_a_foreground_and_two_background_writers() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(1.0);
        let spec = |variant: &str| {
            let g = groups_for("fsync-under-load", None)
                .unwrap()
                .into_iter()
                .find(|g| g.variant.as_deref() == Some(variant))
                .unwrap();
            build_spec(&g, EngineKind::Wbcache, &p, &place, false)
        };
        let roles = |s: &Spec| s.jobs.iter().map(|j| j.role.clone().unwrap()).collect::<Vec<_>>();
        let load = spec("small/load");
        assert_eq!(roles(&load), [FOREGROUND, BACKGROUND, BACKGROUND]);
        assert!(load.jobs.iter().all(|j| !j.fsync_at_end), "no final fsync: the figures are the foreground's");
        assert!(matches!(load.jobs[0].pattern, Pattern::FsyncEach { bs: 4096, iterations: 20, pause_ms: 100 }));
        assert_eq!(load.jobs[0].target.len, 20 * 4096);
        assert!(matches!(load.jobs[1].pattern, Pattern::Seq { write: true, bs: MIB, total: None }));
        assert_eq!(load.jobs[1].target.len, p.size);
        let paths: Vec<_> = load.jobs.iter().map(|j| j.target.path.clone()).collect();
        assert!(paths.iter().all(|t| t.parent() == Some(dir.as_path())), "{paths:?}");
        assert!(paths[0] != paths[1] && paths[1] != paths[2] && paths[0] != paths[2]);
        assert_eq!(load.deadline_s, 20.0 * 0.1 + 30.0);
        assert_eq!(roles(&spec("small/idle")), [FOREGROUND]);
        let large = spec("large/load");
        assert!(matches!(large.jobs[0].pattern, Pattern::FsyncEach { bs: 8388608, iterations: 10, pause_ms: 0 }));
        assert_eq!(large.deadline_s, 40.0);
        let alone = spec("background/alone");
        assert_eq!(roles(&alone), [BACKGROUND, BACKGROUND]);
        assert_eq!(alone.deadline_s, 1.0);
        // On a device: the foreground's region, then the writers' halves of the rest.
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let g = groups_for("fsync-under-load", None).unwrap().swap_remove(3);
        let s = build_spec(&g, EngineKind::Wbcache, &p, &dev, false);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, [(0, 80 * MIB), (80 * MIB, 256 * MIB), (336 * MIB, 256 * MIB)]);
    }

    fn variants_of(groups: &[Group]) -> Vec<String> {
        groups.iter().map(|g| g.variant.clone().unwrap()).collect()
    }

    /// Rows are named `<pattern>` (kernel engines) and
    /// `<pattern>/<routing>-<workers>` (wbcache): 2 + 7 groups per pattern,
    /// 18 rows with both kernel engines.
    #[test]
    fn parallel_writeback_groups_and_names() {
        let groups = groups_for("parallel-writeback", None).unwrap();
        let files = [
            "files",
            "files/single-1",
            "files/rotor-1",
            "files/rotor-2",
            "files/rotor-4",
            "files/region-1",
            "files/region-2",
            "files/region-4",
        ];
        let shared: Vec<String> = files.iter().map(|v| v.replacen("files", "shared", 1)).collect();
        assert_eq!(variants_of(&groups), files.iter().map(|v| v.to_string()).chain(shared).collect::<Vec<_>>());
        assert!(groups.iter().all(|g| g.workload == "parallel-writeback"));
        let rows: usize = groups.iter().map(|g| EngineKind::ALL.iter().filter(|e| g.runs_on(**e)).count()).sum();
        assert_eq!(rows, 18);
        // Kernel groups on kernel-buffered and kernel-direct; configurations on wbcache.
        let on = |g: &Group| EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect::<Vec<_>>();
        assert_eq!(on(&groups[0]), [EngineKind::KernelBuffered, EngineKind::KernelDirect]);
        assert_eq!(on(&groups[7]), [EngineKind::Wbcache]);
        assert_eq!(groups[7].slug(), "parallel-writeback-files-region-4");
        assert_eq!(groups[7].label(), "parallel-writeback files/region-4");
        assert!(groups_for("seq-write", None).unwrap()[0].runs_on(EngineKind::WbcacheDontcache));
        let pw =
            PwGroup { pattern: PwPattern::Shared, writeback: Some(Writeback { routing: Routing::Region, workers: 4 }) };
        assert_eq!(pw.variant(), "shared/region-4");
        assert_eq!(PwGroup { writeback: None, ..pw }.variant(), "shared");
        assert!(info("parallel-writeback").is_some_and(|w| w
            .source
            .is_some_and(|s| s.contains("AG aware parallel writeback for XFS") && s.contains("Brian Foster"))));
        // Other worker counts: rotor and region each, single-1 once.
        let v = variants_of(&expand("parallel-writeback", None, &[1, 8]).unwrap());
        assert_eq!(
            v[..6],
            ["files", "files/single-1", "files/rotor-1", "files/rotor-8", "files/region-1", "files/region-8"]
        );
        assert_eq!(v.len(), 12);
    }

    /// `parallel-writeback/<pattern>` selects a pattern's groups,
    /// `parallel-writeback/<pattern>/<config>` one configuration.
    #[test]
    fn parallel_writeback_selections() {
        let files = groups_for("parallel-writeback/files", None).unwrap();
        assert_eq!(files.len(), 8);
        assert!(variants_of(&files).iter().all(|v| v == "files" || v.starts_with("files/")));
        assert_eq!(variants_of(&expand("parallel-writeback/shared", None, &[1]).unwrap()).len(), 4);
        let one = groups_for("parallel-writeback/shared/rotor-2", None).unwrap();
        assert_eq!(variants_of(&one), ["shared/rotor-2"]);
        assert_eq!(variants_of(&groups_for("parallel-writeback/files/region-64", None).unwrap()), ["files/region-64"]);
        for bad in [
            "parallel-writeback/",
            "parallel-writeback/both",
            "parallel-writeback/files/",
            "parallel-writeback/files/single-2",
            "parallel-writeback/files/rotor-0",
            "parallel-writeback/files/rotor-65",
            "parallel-writeback/files/rotor-02",
            "parallel-writeback/files/rotor",
            "parallel-writeback/files/shards-2",
            "parallel-writeback/files/rotor-2/x",
            "seq-write/files",
        ] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        assert_eq!(Writeback::parse("single-1"), Some(Writeback { routing: Routing::Single, workers: 1 }));
        assert_eq!(Writeback::parse("region-4").map(Writeback::name).as_deref(), Some("region-4"));
    }

    #[test]
    fn options_are_overridden_not_repeated() {
        let w = Writeback { routing: Routing::Rotor, workers: 2 };
        assert_eq!(
            options_with("capacity=256M", &w.options()),
            "capacity=256M,writeback_routing=rotor,writeback_workers=2"
        );
        assert_eq!(
            options_with("capacity=1G;writeback_workers=4, writeback_routing=region,region_size=8M", &w.options()),
            "capacity=1G,writeback_workers=2,writeback_routing=rotor,region_size=8M"
        );
        let c = wbcache::Config::from_options(&options_with("capacity=64M,writeback_workers=1", &w.options())).unwrap();
        assert_eq!((c.writeback_routing, c.writeback_workers), (Routing::Rotor, 2));
    }

    /// files: twelve writers, each over its own new file of a twelfth of
    /// --size, each fsyncing it; shared: twelve shares of one file, one
    /// fsync after all of them. On a device: twelfths of the area, or all of it.
    #[test]
    fn parallel_writeback_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let group = |v: &str| {
            groups_for("parallel-writeback", None)
                .unwrap()
                .into_iter()
                .find(|g| g.variant.as_deref() == Some(v))
                .unwrap()
        };
        let files = build_spec(&group("files"), EngineKind::KernelDirect, &p, &place, false);
        assert_eq!(files.jobs.len(), 12);
        let per = 256 * MIB / 12 / 4096 * 4096;
        assert_eq!(pw_file_len(&p), per);
        for (i, j) in files.jobs.iter().enumerate() {
            assert_eq!((j.target.len, j.target.offset, j.target.create), (per, 0, true));
            assert!(matches!(j.pattern, Pattern::Rand { write: true, bs: 4096, ops: Some(n) } if n == per / 4096));
            assert!(j.fsync_at_end && !j.fsync_after_all, "each writer fsyncs its own file");
            assert_eq!(j.seed, 20 + i as u64, "each file its own random order");
        }
        let mut paths: Vec<_> = files.jobs.iter().map(|j| j.target.path.clone()).collect();
        paths.dedup();
        assert_eq!(paths.len(), 12);
        assert_eq!(files.deadline_s, 2.0);
        assert_eq!(files.wbcache_options, p.wbcache_options, "the kernel's rows change no option");

        let shared = build_spec(&group("shared/region-4"), EngineKind::Wbcache, &p, &place, false);
        assert_eq!(shared.jobs.len(), 12);
        assert!(shared.jobs.iter().all(|j| j.target.path == shared.jobs[0].target.path && j.target.len == 256 * MIB));
        for (i, j) in shared.jobs.iter().enumerate() {
            assert!(
                matches!(j.pattern, Pattern::RandShare { bs: 4096, share, shares: 12, key: 40 } if share == i as u64)
            );
            assert!(!j.fsync_at_end);
            assert_eq!(j.fsync_after_all, i == 0, "one fsync, after the last writer");
        }
        assert_eq!(shared.wbcache_options, "capacity=128M,writeback_routing=region,writeback_workers=4");
        assert_eq!(shared.variant.as_deref(), Some("shared/region-4"));

        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let s = build_spec(&group("files/rotor-2"), EngineKind::Wbcache, &p, &dev, false);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, (0..12).map(|i| (i * per, per)).collect::<Vec<_>>());
        assert!(s.jobs.iter().all(|j| !j.target.create && j.target.path == std::path::Path::new("/dev/x")));
        let s = build_spec(&group("shared"), EngineKind::KernelBuffered, &p, &dev, false);
        assert!(s.jobs.iter().all(|j| (j.target.offset, j.target.len, j.target.create) == (0, 256 * MIB, false)));
    }

    /// hot-set: three variants on every engine, selectable one by one.
    #[test]
    fn hot_set_groups_and_selections() {
        let groups = groups_for("hot-set", None).unwrap();
        assert_eq!(variants_of(&groups), ["alone", "write-stream", "read-stream"]);
        assert!(groups.iter().all(|g| g.workload == "hot-set" && EngineKind::ALL.iter().all(|e| g.runs_on(*e))));
        assert_eq!(groups.iter().map(Group::needs_data).collect::<Vec<_>>(), [false, false, true]);
        assert_eq!(groups[1].slug(), "hot-set-write-stream");
        assert_eq!(groups[1].label(), "hot-set write-stream");
        assert_eq!(variants_of(&groups_for("hot-set/read-stream", None).unwrap()), ["read-stream"]);
        for bad in ["hot-set/", "hot-set/both", "hot-set/alone/x", "hot-set/Alone"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        let source = info("hot-set").and_then(|w| w.source).unwrap();
        assert!(source.contains("Uncached buffered IO") && source.contains("Jens Axboe"), "{source}");
        assert_eq!(hot_engine(EngineKind::WbcacheDontcache), EngineKind::Wbcache);
        assert_eq!(hot_engine(EngineKind::KernelDontcache), EngineKind::KernelBuffered);
        assert_eq!(hot_engine(EngineKind::KernelDirect), EngineKind::KernelDirect);
    }

    /// The hot reader (a quarter of the memory, warmed, read through the
    /// engine's cache) and the streamer (--size through the engine, in its
    /// own mode): a new file to write, the data file to read; on a device,
    /// the stream's region then the hot region.
    #[test]
    fn hot_set_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let spec = |variant: &str, engine: EngineKind, place: &Place| {
            let g = groups_for(&format!("hot-set/{variant}"), None).unwrap().remove(0);
            build_spec(&g, engine, &p, place, false)
        };
        let roles = |s: &Spec| s.jobs.iter().map(|j| j.role.clone().unwrap()).collect::<Vec<_>>();
        let alone = spec("alone", EngineKind::KernelDontcache, &place);
        assert_eq!(roles(&alone), [HOT]);
        assert_eq!(alone.deadline_s, 2.0, "the runtime");
        let hot = &alone.jobs[0];
        assert_eq!(hot.engine, EngineKind::KernelBuffered, "the hot reader reads plainly");
        assert!(matches!(hot.setup, Setup::Hot { bytes } if bytes == 32 * MIB));
        assert!(matches!(hot.pattern, Pattern::HotReads { bs } if bs == 256 * KIB));
        assert_eq!((hot.target.len, hot.target.create, hot.fsync_at_end), (32 * MIB, true, false));

        let write = spec("write-stream", EngineKind::WbcacheDontcache, &place);
        assert_eq!(roles(&write), [HOT, STREAMER]);
        assert_eq!(write.deadline_s, p.stream_cap_s);
        let (hot, streamer) = (&write.jobs[0], &write.jobs[1]);
        assert_eq!((hot.engine, streamer.engine), (EngineKind::Wbcache, EngineKind::WbcacheDontcache));
        assert!(
            matches!(streamer.pattern, Pattern::Seq { write: true, bs, total: Some(t) } if bs == MIB && t == 256 * MIB)
        );
        assert!(streamer.fsync_at_end && streamer.target.create && streamer.target.path != hot.target.path);
        assert!(write.pipelined);

        let read = spec("read-stream", EngineKind::KernelDirect, &place);
        let (hot, streamer) = (&read.jobs[0], &read.jobs[1]);
        assert_eq!((hot.engine, streamer.engine), (EngineKind::KernelDirect, EngineKind::KernelDirect));
        assert!(
            matches!(streamer.pattern, Pattern::Seq { write: false, bs, total: Some(t) } if bs == MIB && t == 256 * MIB)
        );
        assert!(!streamer.fsync_at_end);
        assert_eq!((streamer.target.path.clone(), streamer.target.create), (place.data_path(), false));
        assert!(data_len(&p) >= streamer.target.len, "the laid-out data covers the stream");

        // On a device: the stream from offset 0, the hot region after it.
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let s = spec("write-stream", EngineKind::Wbcache, &dev);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, [(256 * MIB, 32 * MIB), (0, 256 * MIB)]);
        assert!(s.jobs.iter().all(|j| !j.target.create && j.target.path == std::path::Path::new("/dev/x")));
        // A small device: the hot region at most a quarter, the stream the rest.
        let small = Place { device_size: 64 * MIB, ..dev };
        let s = spec("read-stream", EngineKind::Wbcache, &small);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, [(48 * MIB, 16 * MIB), (0, 48 * MIB)]);
    }

    /// sqlite: four variants on kernel-buffered and wbcache only,
    /// selectable one by one.
    #[test]
    fn sqlite_groups_and_selections() {
        let groups = groups_for("sqlite", None).unwrap();
        assert_eq!(variants_of(&groups), ["wal-idle", "wal-streaming", "delete-idle", "delete-streaming"]);
        for g in &groups {
            let on: Vec<EngineKind> = EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect();
            assert_eq!(on, [EngineKind::KernelBuffered, EngineKind::Wbcache]);
            assert_eq!(g.only_on(), Some(&SQLITE_ENGINES[..]));
            assert!(!g.needs_data());
        }
        assert_eq!(groups[1].slug(), "sqlite-wal-streaming");
        assert_eq!(groups[1].label(), "sqlite wal-streaming");
        assert_eq!(variants_of(&groups_for("sqlite/delete-idle", None).unwrap()), ["delete-idle"]);
        for bad in ["sqlite/", "sqlite/wal", "sqlite/wal-idle/x", "sqlite/WAL-idle"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        let w = info("sqlite").unwrap();
        assert_eq!(w.source, Some("pgbench's built-in TPC-B-like script"));
        for text in [w.about, w.models, w.source.unwrap()] {
            for word in ["issue", "seed", "slot"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
    }

    /// The transactions over a new database in the directory (its side
    /// files removed with it), sized from the memory; the streaming
    /// variants add a writer of the same engine, --size to a new file in
    /// 1 MiB writes, then fsync.
    #[test]
    fn sqlite_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let spec = |variant: &str, engine: EngineKind, place: &Place| {
            let g = groups_for(&format!("sqlite/{variant}"), None).unwrap().remove(0);
            build_spec(&g, engine, &p, place, false)
        };
        let roles = |s: &Spec| s.jobs.iter().map(|j| j.role.clone().unwrap()).collect::<Vec<_>>();
        let idle = spec("delete-idle", EngineKind::KernelBuffered, &place);
        assert_eq!(roles(&idle), [TRANSACTIONS]);
        assert_eq!((idle.deadline_s, idle.pipelined), (2.0, false));
        let txn = &idle.jobs[0];
        let Pattern::Sqlite(sq) = &txn.pattern else { panic!("{:?}", txn.pattern) };
        assert_eq!((sq.journal, sq.head_start), (Journal::Delete, 0));
        assert_eq!(sq.accounts, 160 * MIB / SQLITE_ACCOUNT_BYTES);
        assert_eq!((sq.branches(), sq.tellers()), (18, 180));
        assert_eq!(txn.target.path, dir.join("sqlite-delete-idle-kernel-buffered.db"));
        assert!(txn.target.create);
        let removed: Vec<_> =
            txn.targets().map(|t| t.path.file_name().unwrap().to_str().unwrap().to_string()).collect();
        assert_eq!(
            removed,
            [
                "sqlite-delete-idle-kernel-buffered.db",
                "sqlite-delete-idle-kernel-buffered.db-wal",
                "sqlite-delete-idle-kernel-buffered.db-shm",
                "sqlite-delete-idle-kernel-buffered.db-journal"
            ]
        );
        assert!(txn.targets().all(|t| t.create));

        let streaming = spec("wal-streaming", EngineKind::Wbcache, &place);
        assert_eq!(roles(&streaming), [TRANSACTIONS, STREAMER]);
        let (txn, writer) = (&streaming.jobs[0], &streaming.jobs[1]);
        let Pattern::Sqlite(sq) = &txn.pattern else { panic!("{:?}", txn.pattern) };
        assert_eq!((sq.journal, sq.head_start), (Journal::Wal, 32 * MIB));
        assert_eq!((txn.engine, writer.engine), (EngineKind::Wbcache, EngineKind::Wbcache));
        // Round and round its file until the runtime ends.
        assert!(matches!(writer.pattern, Pattern::Seq { write: true, bs, total: None } if bs == MIB));
        assert!(writer.fsync_at_end && writer.target.create);
        assert_eq!(writer.target.path.parent(), Some(dir.as_path()));
        assert_ne!(writer.target.path, txn.target.path);

        // On a device: the transactions only, which report that SQLite
        // needs a file system; no writer touches the device.
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let s = spec("wal-streaming", EngineKind::KernelBuffered, &dev);
        assert_eq!(roles(&s), [TRANSACTIONS]);
        assert!(!s.jobs[0].target.create && s.jobs[0].targets().count() == 1);
    }
    /// advice: five variants on kernel-buffered and wbcache only,
    /// selectable one by one; the cold reads need the data file.
    #[test]
    fn advice_groups_and_selections() {
        let groups = groups_for("advice", None).unwrap();
        assert_eq!(
            variants_of(&groups),
            ["cold-read", "cold-read-willneed", "stream", "stream-dontneed", "stream-sync-range"]
        );
        for g in &groups {
            let on: Vec<EngineKind> = EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect();
            assert_eq!(on, [EngineKind::KernelBuffered, EngineKind::Wbcache]);
            assert_eq!(g.only_on(), Some(&ADVICE_ENGINES[..]));
        }
        assert_eq!(groups.iter().map(Group::needs_data).collect::<Vec<_>>(), [true, true, false, false, false]);
        assert_eq!(groups[4].slug(), "advice-stream-sync-range");
        assert_eq!(groups[4].label(), "advice stream-sync-range");
        assert_eq!(variants_of(&groups_for("advice/cold-read-willneed", None).unwrap()), ["cold-read-willneed"]);
        for bad in ["advice/", "advice/willneed", "advice/stream/x", "advice/Stream", "stream-dontneed"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        let plain: Vec<Option<&str>> = AdviceVariant::ALL.iter().map(|v| v.plain().map(AdviceVariant::name)).collect();
        assert_eq!(plain, [None, Some("cold-read"), None, Some("stream"), Some("stream")]);
        let w = info("advice").unwrap();
        let source = w.source.unwrap();
        for name in ["PostgreSQL's checkpointer", "RocksDB's bytes_per_sync", "POSIX_FADV_DONTNEED", "WILLNEED"] {
            assert!(source.contains(name), "{name} in {source}");
        }
        for text in [w.about, w.models, source, &advice_about(&params(1.0))] {
            for word in ["issue", "seed", "slot"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
    }

    /// The cold reads: the first half of the memory of the data file,
    /// dropped from the kernel's cache first; the streams: a new file of
    /// --size, fsynced. On a device: the same regions from its start.
    #[test]
    fn advice_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let spec = |variant: &str, engine: EngineKind, place: &Place| {
            let g = groups_for(&format!("advice/{variant}"), None).unwrap().remove(0);
            build_spec(&g, engine, &p, place, false)
        };
        let cold = spec("cold-read-willneed", EngineKind::KernelBuffered, &place);
        assert_eq!((cold.jobs.len(), cold.deadline_s, cold.pipelined), (1, p.stream_cap_s, false));
        let j = &cold.jobs[0];
        assert_eq!(j.engine, EngineKind::KernelBuffered);
        assert!(matches!(j.setup, Setup::Cold));
        assert!(matches!(
            j.pattern,
            Pattern::Advice { variant: AdviceVariant::ColdReadWillneed, bs, every } if bs == MIB && every == 8 * MIB
        ));
        assert_eq!((j.target.path.clone(), j.target.offset, j.target.len), (place.data_path(), 0, 64 * MIB));
        assert!(!j.target.create && !j.fsync_at_end);
        assert!(data_len(&p) >= j.target.len, "the laid-out data covers the cold file");
        // A data file smaller than half the memory: the cold file is all of it.
        let small = Params { size: 16 * MIB, ..p.clone() };
        assert_eq!(advice_cold_len(&small), 16 * MIB);

        let stream = spec("stream-sync-range", EngineKind::Wbcache, &place);
        let j = &stream.jobs[0];
        assert!(matches!(j.setup, Setup::None));
        assert!(matches!(j.pattern, Pattern::Advice { variant: AdviceVariant::StreamSyncRange, .. }));
        assert_eq!((j.target.len, j.target.create, j.fsync_at_end), (256 * MIB, true, true));
        assert_eq!(j.target.path, dir.join("advice-stream-sync-range-wbcache-0.bin"));

        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        for (variant, len) in [("cold-read", 64 * MIB), ("stream-dontneed", 256 * MIB)] {
            let t = &spec(variant, EngineKind::KernelBuffered, &dev).jobs[0].target;
            assert_eq!((t.offset, t.len, t.create), (0, len, false), "{variant}");
            assert_eq!(t.path, std::path::Path::new("/dev/x"));
        }
    }
}
