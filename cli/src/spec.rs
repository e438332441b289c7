//! What a measurement is made of, whichever the workload: the run's sizes
//! and times ([`Params`]), where its files live ([`Place`]), and the
//! [`Spec`] a worker process executes (its jobs, each a setup and a timed
//! [`Pattern`]). The generic patterns are run by the worker's own job
//! runner; a workload's own pattern ([`Pattern::Own`]) travels as JSON in
//! the workload's own terms and is run by the workload
//! ([`crate::workloads::Workload::run_job`]). Every layer that makes,
//! sends or runs a measurement speaks these types; they name no workload.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::engines::{EngineKind, Target};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;

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
    /// The database `rocksdb` builds: 2 × the memory (a few MiB with
    /// --quick).
    pub rocksdb_data_bytes: u64,
    pub wbcache_options: String,
}

/// The size of the shared data file.
pub fn data_len(p: &Params) -> u64 {
    p.size
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

    /// The first `len` bytes of the shared data file (laid out before the
    /// runs), or of the device.
    pub fn data(&self, len: u64) -> Target {
        Target { path: self.data_path(), offset: 0, len, create: false }
    }

    /// Region `index` of `len` bytes: a new file, or a slice of the device.
    pub fn fresh(&self, name: &str, index: usize, len: u64) -> Target {
        match (&self.device, &self.dir) {
            (Some(dev), _) => Target { path: dev.clone(), offset: index as u64 * len, len, create: false },
            (None, Some(dir)) => Target { path: dir.join(format!("{name}-{index}.bin")), offset: 0, len, create: true },
            (None, None) => unreachable!("a place has a dir or a device"),
        }
    }

    /// Per-file length for `n` time-based writers: `want`, bounded by the
    /// space there is (writers wrap around at this length).
    pub fn per_writer(&self, n: u64, want: u64) -> u64 {
        let avail = if self.device.is_some() { self.device_size / n } else { self.free_bytes / 10 * 8 / n };
        round_down(want.min(avail).max(MIB), MIB)
    }
}

/// `v` rounded down to a multiple of `to`, at least `to`.
pub fn round_down(v: u64, to: u64) -> u64 {
    (v / to).max(1) * to
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
    /// `bs` random writes to this job's share of the target's blocks, each
    /// once: of one pseudo-random order of all of them (the same for every
    /// job with the same `key`), the job takes every `shares`-th, from the
    /// `share`-th on. The jobs with shares `0..shares` write every block
    /// once between them. Until the deadline.
    RandShare { bs: u64, share: u64, shares: u64, key: u64 },
    /// A timed phase of the workload's own, in its own terms: the worker
    /// hands the job to the workload ([`crate::workloads::Workload::run_job`]).
    Own(serde_json::Value),
}

impl Pattern {
    /// A workload's own pattern.
    pub fn own<T: Serialize>(job: &T) -> Pattern {
        Pattern::Own(serde_json::to_value(job).expect("a job serializes"))
    }

    /// The workload's own pattern, read back as `T` (`None` for a generic
    /// pattern, or one of another shape).
    pub fn own_as<T: DeserializeOwned>(&self) -> Option<T> {
        match self {
            Pattern::Own(v) => serde_json::from_value(v.clone()).ok(),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobSpec {
    /// Row name for workloads reporting per job (competing).
    pub role: Option<String>,
    pub engine: EngineKind,
    pub target: Target,
    /// The other files or device regions the job touches (the files of a
    /// fio-style job after its first, a database's side files): removed
    /// after the run as the target is.
    #[serde(default)]
    pub more_targets: Vec<Target>,
    pub setup: Setup,
    pub pattern: Pattern,
    pub fsync_at_end: bool,
    pub seed: u64,
    /// Once every job of the measurement has done its I/O, fsync the target
    /// (`parallel-writeback shared`: one fsync after the last writer).
    #[serde(default)]
    pub fsync_after_all: bool,
    /// When this job ends, the jobs beside it stop (the foreground of
    /// `fsync-under-load`, a streamer, `sqlite`'s transactions).
    #[serde(default)]
    pub stops_others: bool,
}

impl JobSpec {
    /// A job of `pattern` on `target`, built up from there: no setup, no
    /// final fsync, seed 0, no role, no other targets, no say over the
    /// jobs beside it.
    pub fn new(engine: EngineKind, target: Target, pattern: Pattern) -> JobSpec {
        JobSpec {
            role: None,
            engine,
            target,
            more_targets: Vec::new(),
            setup: Setup::None,
            pattern,
            fsync_at_end: false,
            seed: 0,
            fsync_after_all: false,
            stops_others: false,
        }
    }

    /// The same job, its target made ready by `setup` first.
    pub fn with_setup(self, setup: Setup) -> JobSpec {
        JobSpec { setup, ..self }
    }

    /// The same job, ending with an fsync of its target (a stream's
    /// final fsync, timed as part of it).
    pub fn with_final_fsync(self) -> JobSpec {
        self.with_final_fsync_if(true)
    }

    /// The same job, ending with an fsync of its target when `fsync`.
    pub fn with_final_fsync_if(self, fsync: bool) -> JobSpec {
        JobSpec { fsync_at_end: fsync, ..self }
    }

    /// The same job, its random offsets and data drawn from `seed`.
    pub fn seeded(self, seed: u64) -> JobSpec {
        JobSpec { seed, ..self }
    }

    pub fn with_role(self, role: &str) -> JobSpec {
        JobSpec { role: Some(role.to_string()), ..self }
    }

    /// The same job, also touching `targets` (removed after the run as
    /// its target is).
    pub fn with_more_targets(self, more_targets: Vec<Target>) -> JobSpec {
        JobSpec { more_targets, ..self }
    }

    /// The same job, fsyncing its target once every job of the
    /// measurement has done its I/O, when `fsync`.
    pub fn with_fsync_after_all_if(self, fsync: bool) -> JobSpec {
        JobSpec { fsync_after_all: fsync, ..self }
    }

    /// The same job, stopping the jobs beside it when it ends.
    pub fn stopping_the_others(self) -> JobSpec {
        JobSpec { stops_others: true, ..self }
    }

    /// Every file or device region the job touches.
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        std::iter::once(&self.target).chain(&self.more_targets)
    }
}

/// The jobs of one measurement, as a workload lays them out.
pub struct Jobs {
    pub jobs: Vec<JobSpec>,
    /// No new request is issued after this many seconds of the timed phase.
    pub deadline_s: f64,
    /// Let pipelined engines keep several requests in flight.
    pub pipelined: bool,
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
    /// When the bench kills the measurement, in seconds from its start
    /// (`None` in tests): a job that runs another program ends it first.
    #[serde(default)]
    pub timeout_s: Option<f64>,
}
