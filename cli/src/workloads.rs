//! The workload catalog (names are part of the CLI and JSON), their expansion
//! into measurement groups (a workload and variant, run once per engine),
//! and the job specs a worker executes.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

/// The flusher-kick series whose tables several write workloads follow.
const DONTCACHE_KICK: &str =
    "the tables of the LKML series \"mm: kick writeback flusher for IOCB_DONTCACHE with targeted dirty tracking\" (v5, 2026)";

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
        name: "seq-read",
        about: "read a cold file of --size (twice the memory) sequentially, 1 MiB reads",
        models: "a scan, a backup or a restore reading a file larger than memory for the first time",
        source: Some("the read table of the LKML series \"block: enable RWF_DONTCACHE for block devices\" (v6)"),
    },
    WorkloadInfo {
        name: "rand-read",
        about: "4 KiB random reads over a file of --size (twice the cache), for --runtime; variants (µs per call): cached-4k, 4 KiB random reads inside a region read once before (up to 64M, past the L2 caches: the copy's memory traffic dominates; a bare memcpy of the same pattern is measured as the reference); cached-4k-offset0, the same cached 4 KiB at offset 0 (the read path's own cost)",
        models: "point lookups: cold over a table larger than memory, and hot inside a cached working set",
        source: Some("libMicro's pread_u4k case (the cached-4k-offset0 variant)"),
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
    SeqRead,
    RandRead,
    /// µs per cached 4 KiB read: random inside a cached region, or the
    /// same 4 KiB at offset 0 (libMicro `pread_u4k`) when `offset0`.
    CachedRead {
        offset0: bool,
    },
    Overwrite {
        call: CallKind,
        bs: u64,
        file_size: u64,
    },
    /// A job described with fio's words (`bench --custom`).
    Custom(FioJob),
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
            Some(v) => format!("{}-{v}", self.workload),
            None => self.workload.to_string(),
        }
    }

    /// Needs the shared data file (real data, laid out before the runs).
    pub fn needs_data(&self) -> bool {
        // (Custom jobs lay out files of their own: see the runner.)
        matches!(self.kind, Kind::RandWrite | Kind::SeqRead | Kind::RandRead | Kind::CachedRead { .. })
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

/// The groups a workload name (or small-overwrite variant name) expands to.
pub fn groups_for(name: &str, overwrite_subset: Option<&[&str]>) -> Option<Vec<Group>> {
    let g = |workload: &'static str, kind: Kind| Group { workload, variant: None, kind };
    let groups = match name {
        "seq-write" => vec![g("seq-write", Kind::SeqWrite)],
        "rand-write" => vec![g("rand-write", Kind::RandWrite)],
        "multi-writer" => vec![g("multi-writer", Kind::MultiWriter)],
        "files-32" => vec![g("files-32", Kind::Files32)],
        "competing" => vec![g("competing", Kind::Competing)],
        "seq-read" => vec![g("seq-read", Kind::SeqRead)],
        "rand-read" => vec![
            g("rand-read", Kind::RandRead),
            Group {
                workload: "rand-read",
                variant: Some("cached-4k".into()),
                kind: Kind::CachedRead { offset0: false },
            },
            Group {
                workload: "rand-read",
                variant: Some("cached-4k-offset0".into()),
                kind: Kind::CachedRead { offset0: true },
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
    /// A fio-style job over the target and `more_targets` (its other files).
    Fio { job: FioJob, more_targets: Vec<Target> },
}

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
}

impl JobSpec {
    /// Every file or device region the job touches.
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        let more = match &self.pattern {
            Pattern::Fio { more_targets, .. } => more_targets.as_slice(),
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
        Kind::SeqRead => format!("cold sequential read of a {size} file, 1 MiB reads"),
        Kind::RandRead => format!("4 KiB random reads over a {size} file, {rt} s"),
        Kind::CachedRead { offset0: false } => {
            format!("4 KiB random reads inside a cached {} region, µs per call", fmt_size(cached_span(p)))
        }
        Kind::CachedRead { offset0: true } => {
            "4 KiB pread at offset 0 of a cached file (libMicro pread_u4k), µs per call".into()
        }
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
        Kind::SeqRead => {
            let pat = Pattern::Seq { write: false, bs: MIB, total: Some(p.size) };
            (vec![job(engine, place.data(p.size), Setup::None, pat, false, 7)], p.stream_cap_s, true)
        }
        Kind::RandRead => {
            let pat = Pattern::Rand { write: false, bs: 4 * KIB, ops: None };
            (vec![job(engine, place.data(p.size), Setup::None, pat, false, 8)], p.runtime_s, true)
        }
        Kind::CachedRead { offset0 } => {
            let span = if *offset0 { 4 * KIB } else { cached_span(p) };
            let pat = Pattern::CachedReads { bs: 4 * KIB, span, iterations: p.iterations_1k, warmup: p.warmup };
            (vec![job(engine, place.data(span), Setup::Warm { bytes: span }, pat, false, 9)], p.call_cap_s, false)
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
    Spec {
        workload: group.workload.to_string(),
        variant: group.variant.clone(),
        engine,
        jobs,
        deadline_s,
        wbcache_options: p.wbcache_options.clone(),
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
}
