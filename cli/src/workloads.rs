//! The workload catalog (names fixed by the bench issue), their expansion
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
    /// Which seed table (or design target) the workload reproduces.
    pub reproduces: &'static str,
    /// A slot reserved for a later issue: runs as `unsupported`.
    pub slot: bool,
}

pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        name: "seq-write",
        about: "one writer, 1 MiB sequential writes to a new file of --size, then fsync",
        reproduces: "dontcache-flusher-kick: single-stream seq-write MB/s and its p99/p99.9 tail latency; DESIGN: buffered 0.8 GB/s vs O_DIRECT 1.7 GB/s",
        slot: false,
    },
    WorkloadInfo {
        name: "rand-write",
        about: "one writer, 4 KiB random writes (every block once, random order) over an existing file of --size, stopped after --runtime, then fsync",
        reproduces: "dontcache-flusher-kick: single-stream rand-write MB/s",
        slot: false,
    },
    WorkloadInfo {
        name: "multi-writer",
        about: "4 writers, 1 MiB sequential writes, one new file each (--size split between them), then fsync",
        reproduces: "dontcache-flusher-kick: multi-writer (4 jobs, sequential write) aggregate MB/s, p99, p99.9",
        slot: false,
    },
    WorkloadInfo {
        name: "files-32",
        about: "32 writers, 64 KiB sequential writes, one new file each, for --runtime, then fsync (the \"Axboe test\")",
        reproduces: "dontcache-flusher-kick: 32-file write aggregate MB/s, p99 and peak dirty MB",
        slot: false,
    },
    WorkloadInfo {
        name: "competing",
        about: "the engine's writer against one buffered writer of the same system (kernel or wbcache), separate files, 1 MiB sequential, for --runtime, then fsync: per-writer MB/s and p99.9 (rows: writer, buffered-peer, aggregate)",
        reproduces: "dontcache-flusher-kick: competing writers (dontcache vs buffered, separate files), and the buffered-vs-buffered baseline (kernel-buffered row)",
        slot: false,
    },
    WorkloadInfo {
        name: "seq-read",
        about: "read a cold file of --size sequentially, 1 MiB reads",
        reproduces: "dontcache-block-devices: READS table (per-second MB/s over ~2x RAM, normal vs dontcache)",
        slot: false,
    },
    WorkloadInfo {
        name: "rand-read",
        about: "4 KiB random reads over a file of --size (twice the cache), for --runtime; variants (µs per call): cached-4k, 4 KiB random reads inside a region read once before (up to 64M, past the L2 caches: the copy's memory traffic dominates; a bare memcpy of the same pattern is measured as the reference); cached-4k-offset0, libMicro's pread_u4k shape, the same cached 4 KiB at offset 0 (the read path's own cost)",
        reproduces: "no seed table: the issue's targets (a cached 4 KiB read costs <= 0.2 us) and the scan/hit behaviour of the cache",
        slot: false,
    },
    WorkloadInfo {
        name: "small-overwrite",
        about: "libMicro shape: overwrite offset 0 of an already cached file (written once and fsynced), per-call cost in us; variants {write,pwrite,writev}-{1k,10k}-{4k,1m,2m}-file (writev: 10 iovecs of the size, as libMicro)",
        reproduces: "ext4-large-folio-tail-walk: libMicro write_u1k/u10k, pwrite_u1k/u10k, writev_u1k/u10k usecs/call",
        slot: false,
    },
    WorkloadInfo {
        name: "fsync-under-load",
        about: "fsync of a small file while bulk writeback runs (filled in by the fsync issue; the slot exists)",
        reproduces: "fsync-boost-async-writeback (filled in by a later issue)",
        slot: true,
    },
    WorkloadInfo {
        name: "parallel-writeback",
        about: "writeback parallelism by region or inode (filled in by the parallel-writeback issue; the slot exists)",
        reproduces: "xfs-ag-parallel-writeback (filled in by a later issue)",
        slot: true,
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
    Slot,
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
        "fsync-under-load" => vec![g("fsync-under-load", Kind::Slot)],
        "parallel-writeback" => vec![g("parallel-writeback", Kind::Slot)],
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
        Kind::Overwrite { call, bs, file_size } => format!(
            "{}{} {} at offset 0 of a cached {} file, µs per call",
            call.name(),
            if *call == CallKind::Writev { " (10 iovecs of)" } else { "" },
            fmt_size(*bs),
            fmt_size(*file_size)
        ),
        Kind::Slot => "filled in by a later issue".into(),
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

/// The spec of one measurement; `None` for slots.
pub fn build_spec(group: &Group, engine: EngineKind, p: &Params, place: &Place, progress: bool) -> Option<Spec> {
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
        Kind::Slot => return None,
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
        Kind::Overwrite { call, bs, file_size } => {
            let iovecs = if *call == CallKind::Writev { 10 } else { 1 };
            let iterations = if *bs >= 10 * KIB { p.iterations_10k } else { p.iterations_1k };
            let pat = Pattern::Calls { call: *call, bs: *bs, iovecs, iterations, warmup: p.warmup };
            let t = place.fresh(&name, 0, (*file_size).max(iovecs * bs));
            (vec![job(engine, t, Setup::Prefill { bytes: *file_size }, pat, false, 10)], p.call_cap_s, false)
        }
    };
    Some(Spec {
        workload: group.workload.to_string(),
        variant: group.variant.clone(),
        engine,
        jobs,
        deadline_s,
        wbcache_options: p.wbcache_options.clone(),
        pipelined,
        progress,
    })
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
