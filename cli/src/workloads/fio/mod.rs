//! `fio`: fio's own jobs, run by fio itself on each engine, its figures
//! read from its JSON report ([`output`]). kernel-buffered runs fio as it
//! is (`--ioengine=psync`), kernel-direct adds `--direct=1`, wbcache runs
//! it under the preload library (as `wbcache run` does) and
//! wbcache-dontcache adds `--ioengine=pvsync2 --uncached=1` there (fio
//! 3.40 and later send `RWF_DONTCACHE` for it; older ones are refused,
//! see [`check_uncached`]). Four patterns, each as two threads of one fio
//! process and as two fio processes (each one job, a thread of its own
//! process, so that each process has a cache of its own: fio's own job
//! processes are forks of its main process, and the preload leaves a
//! forked child's I/O to the kernel). One row per measurement, the jobs'
//! figures merged as fio's `group_reporting` merges them. The job that
//! runs fio ([`run_fio`]) and the table ([`table`]) are shared with
//! `bench --fio JOBFILE` ([`jobfile`]).

pub mod jobfile;
pub mod output;
mod table;

use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use super::external::{capacity_of, run_dir};
use super::external::{command, find_tool, fresh_dir, program_job, run_together, time_limit};
use super::{Group, Jobs, Params, Place, Selection, Workload, WorkloadInfo, MIB};
use crate::bench_worker::{JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{unsupported, EngineKind};
use crate::report::{field_names, ResultRow};
use crate::sys::fmt_size;
pub use output::{FioJobFigures, FioResult};
pub use table::{fio_rows, fio_summary, fio_table, FioFigures};

/// fio, as the catalog and the tables name it.
pub const FIO_SOURCE: &str = "fio, the Flexible I/O Tester (https://github.com/axboe/fio): its own jobs and its \
     JSON report";

pub struct Fio;

pub static FIO: Fio = Fio;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "fio",
    summary: "fio itself running its own jobs (installed fio; by name or with `all`)",
    about: "fio itself (it must be installed) running its own jobs on each engine, its figures from its JSON \
            report: MB/s, IOPS, and its completion latency's p50 and p99 per direction. kernel-buffered runs fio as \
            it is (--ioengine=psync), kernel-direct adds --direct=1, wbcache runs it under libwbcache_preload.so \
            (as wbcache run does, capacity --memory), wbcache-dontcache adds --ioengine=pvsync2 --uncached=1 there \
            (RWF_DONTCACHE on every request: fio 3.40 or later). Patterns: seq-write-1m (1 MiB sequential writes \
            of --size in all, then fsync), rand-write-4k-fsync32 (4 KiB random writes over --size, fsync every 32, \
            for --runtime), rand-read-4k-cached (4 KiB random reads of half the memory, laid out and read once \
            first, for --runtime), rand-rw-70-30 (4 KiB random reads and writes, 70% reads, over --size, for \
            --runtime). Each as threads (two jobs, threads of one fio process) and processes (two fio processes, \
            one job each, each with half the capacity under the preload). Not in the default suite. Select one \
            with e.g. fio/rand-read-4k-cached or fio/seq-write-1m/processes",
    models: "what fio, the field's own tool, reports for the same jobs on the kernel's page cache, on O_DIRECT and \
             on wbcache under an unmodified program",
    source: Some(FIO_SOURCE),
};

/// The engines `fio` runs on.
pub const FIO_ENGINES: [EngineKind; 4] =
    [EngineKind::KernelBuffered, EngineKind::KernelDirect, EngineKind::Wbcache, EngineKind::WbcacheDontcache];
/// Jobs per measurement: threads of one fio process, or fio processes.
pub const FIO_JOBS: u64 = 2;

/// What the jobs do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioPattern {
    SeqWrite,
    RandWrite,
    RandRead,
    RandRw,
}

impl FioPattern {
    pub const ALL: [FioPattern; 4] =
        [FioPattern::SeqWrite, FioPattern::RandWrite, FioPattern::RandRead, FioPattern::RandRw];

    pub fn name(self) -> &'static str {
        match self {
            FioPattern::SeqWrite => "seq-write-1m",
            FioPattern::RandWrite => "rand-write-4k-fsync32",
            FioPattern::RandRead => "rand-read-4k-cached",
            FioPattern::RandRw => "rand-rw-70-30",
        }
    }

    /// The bytes of all the jobs' files: half the memory for the cached
    /// reads, --size for the others.
    pub fn files_bytes(self, p: &Params) -> u64 {
        let total = if self == FioPattern::RandRead { p.memory / 2 } else { p.size };
        (total / FIO_JOBS / MIB).max(1) * MIB * FIO_JOBS
    }

    /// fio's options for the pattern, each job over its own file (no
    /// pre-read on kernel-direct, which reads past any cache, and where
    /// fio's pre-read fails).
    fn options(self, p: &Params, engine: EngineKind) -> Vec<String> {
        let size = format!("--size={}", self.files_bytes(p) / FIO_JOBS);
        let timed = |runtime_s: f64| vec!["--time_based".to_string(), fio_time(runtime_s)];
        let mut o: Vec<String> = match self {
            FioPattern::SeqWrite => vec!["--rw=write".into(), "--bs=1M".into(), "--end_fsync=1".into()],
            FioPattern::RandWrite => vec!["--rw=randwrite".into(), "--bs=4k".into(), "--fsync=32".into()],
            // Read once before the timed part (untimed): it starts cached.
            FioPattern::RandRead => vec!["--rw=randread".into(), "--bs=4k".into(), "--pre_read=1".into()],
            FioPattern::RandRw => vec!["--rw=randrw".into(), "--rwmixread=70".into(), "--bs=4k".into()],
        };
        o.retain(|opt| !(engine == EngineKind::KernelDirect && opt == "--pre_read=1"));
        o.push(size);
        match self {
            // Size-based, capped as the bench's other size-based runs.
            FioPattern::SeqWrite => o.push(fio_time(p.stream_cap_s)),
            _ => o.extend(timed(p.runtime_s)),
        }
        o
    }

    /// What the jobs do, in words, with this run's sizes.
    fn describe(self, p: &Params) -> String {
        let each = fmt_size(self.files_bytes(p) / FIO_JOBS);
        match self {
            FioPattern::SeqWrite => format!(
                "each job writes a new {each} file in 1 MiB sequential writes, then fsync (--rw=write --bs=1M \
                 --end_fsync=1), at most {} s",
                p.stream_cap_s
            ),
            FioPattern::RandWrite => format!(
                "each job writes 4 KiB at random offsets of a {each} file, fsync every 32 writes, for {} s \
                 (--rw=randwrite --bs=4k --fsync=32)",
                p.runtime_s
            ),
            FioPattern::RandRead => format!(
                "each job reads 4 KiB at random offsets of a {each} file fio laid out and read once first, so that \
                 it starts cached, for {} s (--rw=randread --bs=4k --pre_read=1; a second job of the same process \
                 keeps the file open meanwhile, reading one block a second, as the preload library keeps a file's \
                 copy while the process has it open)",
                p.runtime_s
            ),
            FioPattern::RandRw => format!(
                "each job reads (70%) and writes (30%) 4 KiB at random offsets of a {each} file fio laid out \
                 first, for {} s (--rw=randrw --rwmixread=70 --bs=4k)",
                p.runtime_s
            ),
        }
    }
}

/// The job that keeps `rand-read-4k-cached`'s files open: under the
/// preload library a file's cached copy lives while the process has it
/// open, and fio's pre-read opens and closes the file before the job
/// opens it again. It reads one block a second, in a group of its own,
/// and ends with the measured job (`--exitall --exit_what=all`); its
/// figures are not the row's.
pub const HOLDER: &str = "hold-open";
/// How long the measured job waits for the holder to open the files.
pub const HOLDER_HEAD_START_MS: u64 = 200;

/// The holder's options (global ones first), each job over a file of
/// `file_bytes`.
fn holder_job(p: &Params, file_bytes: u64) -> Vec<String> {
    vec![
        "--exitall".into(),
        "--exit_what=all".into(),
        format!("--name={HOLDER}"),
        "--rw=read".into(),
        "--bs=4k".into(),
        "--rate_iops=1".into(),
        format!("--size={file_bytes}"),
        "--time_based".into(),
        fio_time(p.runtime_s + 60.0),
    ]
}

/// A time for fio's options, in milliseconds (`--runtime=1500ms`).
fn fio_time(seconds: f64) -> String {
    format!("--runtime={}ms", (seconds * 1000.0).round().max(1.0))
}

/// How the jobs run: as threads of one fio process, or as fio processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioMode {
    Threads,
    Processes,
}

impl FioMode {
    pub const ALL: [FioMode; 2] = [FioMode::Threads, FioMode::Processes];

    pub fn name(self) -> &'static str {
        match self {
            FioMode::Threads => "threads",
            FioMode::Processes => "processes",
        }
    }
}

/// A variant of `fio`: a pattern and a mode (`seq-write-1m/threads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioVariant {
    pub pattern: FioPattern,
    pub mode: FioMode,
}

impl FioVariant {
    pub fn all() -> impl Iterator<Item = FioVariant> {
        FioPattern::ALL.into_iter().flat_map(|pattern| FioMode::ALL.map(|mode| FioVariant { pattern, mode }))
    }

    pub fn name(self) -> String {
        format!("{}/{}", self.pattern.name(), self.mode.name())
    }

    fn group(self) -> Group {
        Group::new(&FIO, Some(self.name()), self)
    }
}

/// What a job that runs fio runs: each fio process's arguments, in the
/// measurement's own directory, under the preload for a wbcache engine.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FioRun {
    /// The measurement's directory (`None` on a device: unsupported).
    pub dir: Option<PathBuf>,
    /// Each fio process's arguments (they start together).
    pub processes: Vec<Vec<String>>,
    /// Each process's wbcache options, on a wbcache engine.
    pub preload_options: Option<String>,
    /// Whether fio is asked for `RWF_DONTCACHE` (`--uncached=1`).
    pub uncached: bool,
    /// The row every job merges into; `None`: a row per job.
    pub merged_as: Option<String>,
    /// Jobs that only help the measured ones (their figures are dropped).
    #[serde(default)]
    pub helper_jobs: Vec<String>,
}

/// The options every engine's fio gets: the engine's I/O path, jobs as
/// threads (the preload caches one process's I/O), the JSON report with
/// its latency histogram.
pub fn engine_options(engine: EngineKind) -> Vec<String> {
    let mut o: Vec<String> = match engine {
        EngineKind::WbcacheDontcache | EngineKind::KernelDontcache => {
            vec!["--ioengine=pvsync2".into(), "--uncached=1".into()]
        }
        _ => vec!["--ioengine=psync".into()],
    };
    if engine == EngineKind::KernelDirect {
        o.push("--direct=1".into());
    }
    o.extend(["--thread".into(), "--output-format=json+".into()]);
    o
}

/// The wbcache options of one of `processes` preloaded processes: the
/// run's, with the capacity split between them (each has a cache of its
/// own; together they have what the kernel engines have).
pub fn per_process_options(options: &str, processes: u64) -> String {
    let capacity = capacity_of(options);
    let share = crate::sys::exact_size((capacity / processes.max(1) / MIB).max(1) * MIB);
    let rest = options.split(',').map(str::trim).filter(|kv| !kv.is_empty() && !kv.starts_with("capacity="));
    std::iter::once(format!("capacity={share}")).chain(rest.map(String::from)).collect::<Vec<_>>().join(",")
}

/// The I/O engines whose requests are the C library's calls the preload
/// library interposes (io_uring, libaio and the like go past it).
pub const PRELOAD_IOENGINES: &[&str] = &["psync", "sync", "pvsync", "pvsync2", "vsync"];

/// A job whose requests the preload would not see: refused on a wbcache
/// engine rather than measured on the kernel unawares.
fn check_preloadable(jobs: &[FioJobFigures]) -> io::Result<()> {
    for j in jobs {
        if let Some(engine) = j.ioengine.as_deref().filter(|e| !PRELOAD_IOENGINES.contains(e)) {
            return Err(unsupported(format!(
                "fio job {}: ioengine={engine} goes past the preload library (it sees {})",
                j.name,
                PRELOAD_IOENGINES.join(", ")
            )));
        }
    }
    Ok(())
}

/// fio's version as `fio --version` says it (`fio-3.33`): `(major, minor)`.
fn parse_fio_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().trim_start_matches("fio-").split(['.', '-']).map(|s| s.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The version of the fio at `fio`.
fn fio_version(fio: &std::path::Path) -> io::Result<(u32, u32)> {
    let out = std::process::Command::new(fio).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_fio_version(&text).ok_or_else(|| io::Error::other(format!("fio --version said '{}'", text.trim())))
}

/// fio sends `RWF_DONTCACHE` (0x80) for `--uncached=1` from 3.40 on;
/// before, it sends the withdrawn `RWF_UNCACHED` (0x40, `RWF_ATOMIC`
/// since Linux 6.11), which the kernel and the preload refuse.
fn check_uncached(fio: &std::path::Path) -> io::Result<()> {
    let (major, minor) = fio_version(fio)?;
    if (major, minor) < (3, 40) {
        return Err(unsupported(format!(
            "fio {major}.{minor} sends no RWF_DONTCACHE (its --uncached sends 0x40, RWF_ATOMIC since Linux 6.11): fio \
             3.40 or later"
        )));
    }
    Ok(())
}

/// Runs a [`FioRun`] in the worker: fio found, its directory made, every
/// process started together and waited for (killed with its process group
/// at the bench's timeout), the reports read and merged as asked, the
/// directory removed.
pub fn run_fio(ctx: &JobContext<'_>, run: &FioRun) -> io::Result<JobRaw> {
    ctx.start_together(Ok(()))?;
    ctx.check_cancelled()?;
    let started = Instant::now();
    let fio = find_tool("fio")?;
    if run.uncached {
        check_uncached(&fio)?;
    }
    if let Some(options) = &run.preload_options {
        wbcache::Config::from_options(options).map_err(|e| io::Error::other(format!("wbcache options: {e}")))?;
    }
    let dir = fresh_dir(run.dir.as_deref(), "fio")?;
    let commands = run
        .processes
        .iter()
        .map(|args| command(&fio, args, &dir, run.preload_options.as_deref()))
        .collect::<io::Result<Vec<_>>>()?;
    let finished = run_together(commands, "fio", time_limit(ctx.spec));
    let _ = fs::remove_dir_all(&dir);
    let mut result = FioResult::default();
    for f in finished? {
        f.check("fio")?;
        let report = output::parse(&f.stdout).map_err(io::Error::other)?;
        result.version = report.version;
        result.jobs.extend(report.jobs);
    }
    if run.preload_options.is_some() {
        check_preloadable(&result.jobs)?;
    }
    result.jobs.retain(|j| !run.helper_jobs.contains(&j.name));
    if let Some(name) = &run.merged_as {
        result.jobs = vec![FioJobFigures::merged(name, &result.jobs.iter().collect::<Vec<_>>())];
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let mut measured = Measured {
        bytes: result.jobs.iter().map(FioJobFigures::io_bytes).sum(),
        ops: result.jobs.iter().map(FioJobFigures::total_ios).sum(),
        ..Measured::default()
    };
    measured.set_own(&result);
    Ok(JobRaw { measured, io_end_s: elapsed_s, end_s: elapsed_s })
}

impl Workload for Fio {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    /// `fio/<pattern>` (both modes) or `fio/<pattern>/<mode>`.
    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        let Some(selector) = selector else { return Some(FioVariant::all().map(FioVariant::group).collect()) };
        let (pattern, mode) = match selector.split_once('/') {
            Some((pattern, mode)) => (pattern, Some(mode)),
            None => (selector, None),
        };
        let groups: Vec<Group> = FioVariant::all()
            .filter(|v| v.pattern.name() == pattern && mode.is_none_or(|m| m == v.mode.name()))
            .map(FioVariant::group)
            .collect();
        (!groups.is_empty()).then_some(groups)
    }

    fn listed_variants(&self) -> Option<String> {
        let names: Vec<String> = FioVariant::all().map(|v| format!("fio/{}", v.name())).collect();
        Some(format!("fio variants (also fio/<pattern> for both modes): {}", names.join(", ")))
    }

    /// It takes minutes and needs fio: run it by name (or with `all`).
    fn in_default_suite(&self) -> bool {
        false
    }

    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&FIO_ENGINES)
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let v = group.shape::<FioVariant>();
        let how = match v.mode {
            FioMode::Threads => format!("{FIO_JOBS} jobs as threads of one fio process"),
            FioMode::Processes => format!("{FIO_JOBS} fio processes of one job each"),
        };
        format!("{how}; {}", v.pattern.describe(p))
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let v = group.shape::<FioVariant>();
        let files = |k: u64| match v.mode {
            FioMode::Threads => vec![format!("--numjobs={FIO_JOBS}"), "--filename_format=job$jobnum.bin".into()],
            FioMode::Processes => vec![format!("--filename=job{k}.bin")],
        };
        let process = |k: u64| {
            let mut args = engine_options(engine);
            if v.pattern == FioPattern::RandRead {
                args.extend(holder_job(p, v.pattern.files_bytes(p) / FIO_JOBS));
                args.extend(files(k));
            }
            args.push(format!("--name={}", v.pattern.name()));
            if v.pattern == FioPattern::RandRead {
                args.extend(["--new_group".into(), format!("--startdelay={HOLDER_HEAD_START_MS}ms")]);
            }
            args.extend(v.pattern.options(p, engine));
            args.extend(files(k));
            if v.mode == FioMode::Threads {
                args.push("--group_reporting".into());
            }
            args
        };
        let processes: Vec<Vec<String>> = match v.mode {
            FioMode::Threads => vec![process(0)],
            FioMode::Processes => (0..FIO_JOBS).map(process).collect(),
        };
        let preload_options = (!engine.is_kernel()).then(|| match v.mode {
            FioMode::Threads => p.wbcache_options.clone(),
            FioMode::Processes => per_process_options(&p.wbcache_options, FIO_JOBS),
        });
        let run = FioRun {
            dir: run_dir(place, name),
            processes,
            preload_options,
            uncached: engine.is_dontcache(),
            merged_as: group.variant.clone(),
            helper_jobs: if v.pattern == FioPattern::RandRead { vec![HOLDER.into()] } else { Vec::new() },
        };
        let deadline_s = if v.pattern == FioPattern::SeqWrite { p.stream_cap_s } else { p.runtime_s };
        let job = program_job(engine, run.dir.as_deref(), &run, v.pattern.files_bytes(p));
        Jobs { jobs: vec![job], deadline_s, pipelined: false }
    }

    /// fio lays out the files it reads before its jobs start: at 10 MB/s.
    fn timeout_allowance_s(&self, spec: &super::Spec) -> f64 {
        spec.jobs.iter().map(|j| j.target.len as f64 / 10e6).sum()
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        run_fio(ctx, &ctx.own_pattern()?)
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        fio_rows(group, engine, jobs, o)
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<FioFigures>()
    }

    fn shares_the_disk(&self) -> bool {
        true
    }

    fn summary(&self, rows: &[ResultRow]) -> String {
        fio_summary(rows)
    }

    fn about(&self, groups: &[&Group], p: &Params) -> String {
        format!(
            "fio's own jobs, run by fio on each engine: kernel-buffered as it is (--ioengine=psync), kernel-direct \
             with --direct=1, wbcache under libwbcache_preload.so (the files in the measurement's directory \
             through one wbcache per fio process, capacity {} in all), wbcache-dontcache there with \
             --ioengine=pvsync2 --uncached=1; every job a thread of its process (--thread: fio's forked job \
             processes would reach the kernel, not the preload's cache). processes: separate fio processes, each \
             with its share of the capacity, their reports merged as fio's group_reporting merges jobs. Variants: \
             {}",
            fmt_size(capacity_of(&p.wbcache_options)),
            super::variants_named(groups, p)
        )
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        fio_table(self.name(), about, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::JobResult;
    use crate::report::test_support::{ok_outcome, own};
    use crate::workloads::{build_spec, groups_for, info, rows_from, test_params as params, variants_of, Spec};

    /// fio: four patterns in two modes, on four engines, selectable by
    /// pattern or by pattern and mode; not in the default suite.
    #[test]
    fn fio_groups_and_selections() {
        let groups = groups_for("fio", None).unwrap();
        assert_eq!(groups.len(), 8);
        assert_eq!(
            variants_of(&groups)[..3],
            ["seq-write-1m/threads", "seq-write-1m/processes", "rand-write-4k-fsync32/threads"]
        );
        for g in &groups {
            let on: Vec<EngineKind> = EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect();
            assert_eq!(on, FIO_ENGINES);
        }
        assert_eq!(groups[1].slug(), "fio-seq-write-1m-processes");
        assert_eq!(variants_of(&groups_for("fio/rand-read-4k-cached", None).unwrap()).len(), 2);
        assert_eq!(variants_of(&groups_for("fio/rand-rw-70-30/processes", None).unwrap()), ["rand-rw-70-30/processes"]);
        for bad in ["fio/", "fio/threads", "fio/seq-write-1m/", "fio/seq-write-1m/both", "fio/x/threads"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        assert!(!FIO.in_default_suite());
        let w = info("fio").unwrap();
        assert!(w.source.unwrap().starts_with("fio, the Flexible I/O Tester"));
        for text in [w.about, w.models, w.source.unwrap()] {
            for word in ["issue", "seed", "slot"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
    }

    fn spec_and_run(variant: &str, engine: EngineKind) -> (Spec, FioRun) {
        let place = Place { dir: Some("/work/bench".into()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let g = groups_for(&format!("fio/{variant}"), None).unwrap().remove(0);
        let spec = build_spec(&g, engine, &params(2.0), &place, false);
        let run = spec.jobs[0].pattern.own_as::<FioRun>().unwrap();
        (spec, run)
    }

    /// Threads: one fio process with two jobs over a file each, reported
    /// as a group; the preload with the run's capacity on wbcache.
    #[test]
    fn threads_are_one_fio_process() {
        let (spec, run) = spec_and_run("rand-read-4k-cached/threads", EngineKind::Wbcache);
        let dir = PathBuf::from("/work/bench/fio-rand-read-4k-cached-threads-wbcache");
        assert_eq!((run.dir.as_ref(), &spec.jobs[0].target.path, spec.jobs[0].target.create), (Some(&dir), &dir, true));
        assert_eq!(spec.jobs[0].target.len, 64 * MIB, "half the memory in all");
        assert_eq!(run.processes.len(), 1);
        let args = run.processes[0].join(" ");
        assert_eq!(
            args,
            "--ioengine=psync --thread --output-format=json+ --exitall --exit_what=all --name=hold-open --rw=read \
             --bs=4k --rate_iops=1 --size=33554432 --time_based --runtime=62000ms --numjobs=2 \
             --filename_format=job$jobnum.bin --name=rand-read-4k-cached --new_group --startdelay=200ms \
             --rw=randread --bs=4k --pre_read=1 --size=33554432 --time_based --runtime=2000ms --numjobs=2 \
             --filename_format=job$jobnum.bin --group_reporting"
        );
        assert_eq!(run.helper_jobs, [HOLDER], "the holder's figures are not the row's");
        assert_eq!(run.preload_options.as_deref(), Some("capacity=128M"));
        assert_eq!((run.uncached, run.merged_as.as_deref()), (false, Some("rand-read-4k-cached/threads")));
        assert_eq!(spec.deadline_s, 2.0);
    }

    /// Processes: separate fio processes, one job and file each, each
    /// with its share of the capacity; kernel-direct adds --direct=1 (and
    /// drops the pre-read), wbcache-dontcache asks for RWF_DONTCACHE.
    #[test]
    fn processes_are_separate_fio_processes() {
        let (spec, run) = spec_and_run("seq-write-1m/processes", EngineKind::Wbcache);
        assert_eq!(run.processes.len(), 2);
        for (k, args) in run.processes.iter().enumerate() {
            assert!(args.ends_with(&[format!("--filename=job{k}.bin")]), "{args:?}");
            assert!(args.contains(&"--end_fsync=1".to_string()) && args.contains(&"--size=134217728".to_string()));
            assert!(!args.iter().any(|a| a.starts_with("--numjobs") || a == "--group_reporting"));
        }
        assert_eq!(run.preload_options.as_deref(), Some("capacity=64M"));
        assert_eq!(spec.deadline_s, 12.0, "size-based: the stream cap");
        let (_, direct) = spec_and_run("rand-read-4k-cached/processes", EngineKind::KernelDirect);
        assert!(direct.processes[0].contains(&"--direct=1".to_string()));
        assert!(!direct.processes[0].contains(&"--pre_read=1".to_string()));
        assert_eq!(direct.preload_options, None);
        let (_, dontcache) = spec_and_run("rand-write-4k-fsync32/threads", EngineKind::WbcacheDontcache);
        assert!(dontcache.uncached);
        assert_eq!(dontcache.processes[0][..2], ["--ioengine=pvsync2", "--uncached=1"]);
        assert!(dontcache.helper_jobs.is_empty());
        assert!(dontcache.processes[0].contains(&"--fsync=32".to_string()));
    }

    /// On a device there is no directory: the job says fio needs one.
    #[test]
    fn on_a_device_there_is_no_directory() {
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let g = groups_for("fio/seq-write-1m/threads", None).unwrap().remove(0);
        let spec = build_spec(&g, EngineKind::KernelBuffered, &params(1.0), &dev, false);
        let run = spec.jobs[0].pattern.own_as::<FioRun>().unwrap();
        assert_eq!(run.dir, None);
        assert!(!spec.jobs[0].target.create);
    }

    #[test]
    fn fios_version_is_read() {
        assert_eq!(parse_fio_version("fio-3.33\n"), Some((3, 33)));
        assert_eq!(parse_fio_version("fio-3.40-12-gabcdef"), Some((3, 40)));
        assert_eq!(parse_fio_version("fio"), None);
        assert!((3, 33) < (3, 40) && (3, 41) >= (3, 40) && (4, 0) >= (3, 40));
    }

    #[test]
    fn each_process_has_its_share_of_the_capacity() {
        assert_eq!(per_process_options("capacity=128M,io=threads", 2), "capacity=64M,io=threads");
        assert_eq!(per_process_options("io=threads,capacity=1G", 4), "capacity=256M,io=threads");
        assert_eq!(per_process_options("", 2), "capacity=512M");
    }

    #[test]
    fn jobs_the_preload_would_not_see_are_refused() {
        let job = |engine: Option<&str>| FioJobFigures {
            name: "j".into(),
            ioengine: engine.map(String::from),
            ..FioJobFigures::default()
        };
        assert!(check_preloadable(&[job(None), job(Some("psync")), job(Some("pvsync2"))]).is_ok());
        let e = check_preloadable(&[job(Some("libaio"))]).unwrap_err();
        assert!(crate::engines::is_unsupported(&e));
        assert!(e.to_string().starts_with("fio job j: ioengine=libaio goes past the preload library"), "{e}");
    }

    use super::table::fio_figures;

    fn measured(engine: EngineKind, fixture: &str) -> Vec<ResultRow> {
        let report = output::parse(fixture).unwrap();
        let result = FioResult { version: report.version, jobs: report.jobs };
        let job = JobResult { own: own(&result), ..JobResult::default() };
        let g = groups_for("fio/rand-rw-70-30/threads", None).unwrap().remove(0);
        rows_from(&g, engine, &ok_outcome(vec![job], None))
    }

    /// A row is fio's figures as it reported them, per direction; the
    /// table sets them side by side with the ratio to kernel-buffered.
    #[test]
    fn rows_and_table_are_fios_figures() {
        let fixture = include_str!("testdata/fio-randrw-threads.json");
        let kernel = measured(EngineKind::KernelBuffered, fixture).remove(0);
        assert_eq!((kernel.workload.as_str(), kernel.variant.as_deref()), ("fio", Some("randrw")));
        let own = fio_figures(&kernel);
        assert_eq!((own.read_mb_s, own.write_mb_s), (Some(1707.965), Some(730.809)));
        assert_eq!((own.read_iops, own.write_iops), (Some(416_983.713), Some(178_420.195)));
        assert_eq!((own.read_clat_us_p50, own.read_clat_us_p99), (Some(0.652), Some(30.848)));
        assert_eq!((own.write_clat_us_p50, own.write_clat_us_p99), (Some(0.812), Some(2.448)));
        assert_eq!(kernel.throughput_mb_s, Some(2438.774));
        assert_eq!((kernel.ops, kernel.runtime_s), (Some(128_014 + 54_775), Some(0.307)));
        assert_eq!(own.tool_version.as_deref(), Some("fio-3.33"));
        let mut wb = kernel.clone();
        wb.engine = "wbcache".into();
        wb.throughput_mb_s = Some(4877.548);
        let mut missing = crate::report::failed_row(
            &groups_for("fio/rand-rw-70-30/threads", None).unwrap()[0],
            EngineKind::WbcacheDontcache,
            crate::bench_worker::Status::Unsupported,
            "fio not installed".into(),
        );
        missing.variant = Some("randrw".into());
        let table = fio_table("fio", "about", &[&missing, &wb, &kernel]);
        assert!(
            table.contains(
                "| variant | engine | read MB/s | read IOPS | read p50 µs | read p99 µs | write MB/s | write IOPS | \
             write p50 µs | write p99 µs | MB/s vs kernel-buffered | status |"
            ),
            "{table}"
        );
        assert!(table.contains("| randrw | kernel-buffered | 1,708 | 416,984 | 0.65 | 30.8 | 731 | 178,420 | 0.81 | 2.45 | 1.00× | ok |"), "{table}");
        assert!(table.contains("| randrw | wbcache | 1,708 |"));
        assert!(table.contains("| 2.00× | ok |"));
        assert!(table.contains(
            "| randrw | wbcache-dontcache | — | — | — | — | — | — | — | — | — | unsupported: fio not installed |"
        ));
        let order: Vec<&str> = table.lines().filter(|l| l.starts_with("| randrw")).collect();
        assert!(order[0].contains("kernel-buffered") && order[2].contains("wbcache-dontcache"));
        // Writes only: no read columns.
        let writes = measured(EngineKind::KernelBuffered, include_str!("testdata/fio-seqwrite-plus.json"));
        let table = fio_table("fio", "about", &[&writes[0]]);
        assert!(table.contains("| variant | engine | write MB/s |") && !table.contains("read MB/s"), "{table}");
        assert!(fio_summary(&writes).starts_with("838.9 MB/s, 800 IOPS (fio-3.33)"), "{}", fio_summary(&writes));
    }
}
