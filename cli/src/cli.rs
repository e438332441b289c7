//! Command line: `wbcache bench [options]`, and the resolution of options
//! and suites into a [`Plan`].

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use wbcache::parse_size;
use wbcache::Config;

use crate::engines::EngineKind;
use crate::sys::{exact_size, fmt_size};
use crate::workloads::custom::{FioJob, FioRw};
use crate::workloads::parallel_writeback::{PW_DEFAULT_WORKERS, PW_MAX_WORKERS};
use crate::workloads::small_overwrite::{DEFAULT_OVERWRITES, QUICK_OVERWRITES};
use crate::workloads::{custom, expand, Group, Params, Selection, WORKLOADS};

const MIB: u64 = 1 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "wbcache",
    version,
    about = "wbcache: a userspace page cache and writeback engine — command line tools"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Measure Linux writeback workloads on the kernel's buffered,
    /// RWF_DONTCACHE and O_DIRECT paths and on wbcache, side by side.
    #[command(after_help = crate::help::short())]
    Bench(Box<BenchArgs>),
    /// Run a program with its file I/O under the given directories through
    /// wbcache (libwbcache_preload.so preloaded): wbcache run --paths /data
    /// -- PROGRAM ARGS...
    Run(crate::run::RunArgs),
    /// Install wbcache under a prefix: the binary, the preload and SQLite
    /// libraries, the C library with its header and pkg-config files, man
    /// pages and shell completions: wbcache install --prefix /usr/local
    Install(crate::install::InstallArgs),
    /// Remove what `wbcache install` placed under a prefix (its install
    /// manifest lists it): wbcache uninstall --prefix /usr/local
    Uninstall(crate::install::UninstallArgs),
    /// Record a program's file calls once, then check every state a crash
    /// could leave with the program's own checker: wbcache crashtest
    /// --paths DIR --check 'COMMAND' -- PROGRAM ARGS...
    Crashtest(Box<crate::crashtest::CrashtestArgs>),
    /// Show every cache running on this machine, once: capacity, cached,
    /// dirty and under-writeback bytes, hit ratio, rates, fsyncs, and the
    /// files holding unwritten data: wbcache stat [--json | --prometheus]
    Stat(crate::stat::StatArgs),
    /// Show every running cache, refreshed every second, until q or
    /// Ctrl-C: wbcache top
    Top(crate::stat::TopArgs),
    /// Internal: runs one measurement described on stdin (used by `bench`).
    #[command(hide = true, name = "bench-worker")]
    BenchWorker,
}

/// `bench`'s options. Each one's help is one line; what needs more is in
/// `--list` ([`crate::help`]).
#[derive(Args, Debug, Default)]
pub struct BenchArgs {
    /// Workloads to run, comma separated: see --list (default: the default suite)
    #[arg(short, long, value_delimiter = ',', value_name = "LIST")]
    pub workloads: Vec<String>,
    /// Engines to run, comma separated (default: all)
    #[arg(short, long, value_delimiter = ',', value_name = "LIST")]
    pub engines: Vec<String>,
    /// wbcache's memory and the kernel engines' limit (default 256M)
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// File size of the streaming workloads (default 2 × --memory)
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Duration of the time-based workloads: 10, 5s, 500ms (default 5 s)
    #[arg(long, value_name = "TIME")]
    pub runtime: Option<String>,
    /// A wbcache option, repeatable: --set dirty_limit=64M
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Existing directory on a disk to run in (default /var/tmp)
    #[arg(long, value_name = "DIR", conflicts_with = "device")]
    pub dir: Option<PathBuf>,
    /// Run on a raw block device instead of files: DESTROYS ITS DATA
    #[arg(long, value_name = "DEV")]
    pub device: Option<PathBuf>,
    /// Confirms that --device may be overwritten
    #[arg(long)]
    pub yes_destroy: bool,
    /// Write every result as JSON (schema version 1) to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write SVG charts and an index.html into DIR (made if new)
    #[arg(long, value_name = "DIR")]
    pub svg: Option<PathBuf>,
    /// A smoke subset with small sizes, one to two minutes
    #[arg(long)]
    pub quick: bool,
    /// Describe the workloads, engines, suites and options in full, then exit
    #[arg(long, alias = "help-workloads")]
    pub list: bool,
    /// Kill a measurement after SECS seconds (default: 2 × its cap + 60 s)
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Report each measurement's median of N runs; 3 or more judge targets
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub repeat: u32,
    /// parallel-writeback's writeback worker counts (default 1,2,4)
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub writeback_workers: Vec<String>,
    /// Run the kernel engines without their memory cgroup (not comparable)
    #[arg(long)]
    pub no_cgroup: bool,
    /// Do not drop the kernel's caches before each measurement
    #[arg(long)]
    pub no_drop_caches: bool,
    /// Judge the kernel engines' rows even without their memory cgroup
    #[arg(long)]
    pub allow_unfair: bool,
    /// Print wbcache's stats after each wbcache run (stderr)
    #[arg(short, long)]
    pub verbose: bool,
    /// Run one job described with the options below, instead of the workloads
    #[arg(long, conflicts_with_all = ["workloads", "quick"], help_heading = "fio-style job")]
    pub custom: bool,
    /// read, write, randread, randwrite or randrw (default read)
    #[arg(long, requires = "custom", value_name = "MODE", help_heading = "fio-style job")]
    pub rw: Option<String>,
    /// The size of each request (default 4k)
    #[arg(long, requires = "custom", value_name = "SIZE", help_heading = "fio-style job")]
    pub bs: Option<String>,
    /// Threads, each over files of its own (default 1, at most 64)
    #[arg(long, requires = "custom", value_name = "N", help_heading = "fio-style job")]
    pub numjobs: Option<u64>,
    /// Files per thread, used round robin (default 1, at most 1024)
    #[arg(long, requires = "custom", value_name = "N", help_heading = "fio-style job")]
    pub nrfiles: Option<u64>,
    /// Percentage of reads with --rw=randrw (default 50)
    #[arg(long, requires = "custom", value_name = "PERCENT", help_heading = "fio-style job")]
    pub rwmixread: Option<u64>,
    /// fsync a file after every N writes to it (default 0: never)
    #[arg(long, requires = "custom", value_name = "N", help_heading = "fio-style job")]
    pub fsync: Option<u64>,
    /// fsync every file when the thread finishes
    #[arg(long, alias = "end_fsync", requires = "custom", help_heading = "fio-style job")]
    pub end_fsync: bool,
    /// Uncached I/O (RWF_DONTCACHE) on the dontcache engines
    #[arg(long, requires = "custom", help_heading = "fio-style job")]
    pub dontcache: bool,
    /// Run your fio job file on kernel-buffered, kernel-direct and wbcache
    #[arg(long, value_name = "JOBFILE", conflicts_with_all = ["workloads", "quick", "custom"])]
    pub fio: Option<PathBuf>,
}

/// The accounts data of `sqlite` with --quick.
pub const SQLITE_QUICK_DATA: u64 = 4 * MIB;
/// The database `rocksdb` builds with --quick.
pub const ROCKSDB_QUICK_DATA: u64 = 16 * MIB;

/// Everything `bench` will do.
pub struct Plan {
    pub suite: &'static str,
    pub groups: Vec<Group>,
    pub engines: Vec<EngineKind>,
    pub params: Params,
    pub dirty_limit: u64,
    /// Every wbcache option's value as used (given or derived).
    pub effective_options: String,
    /// The fio-style job of `--custom`.
    pub custom: Option<FioJob>,
    /// Adjustments the plan made that the report should mention.
    pub notes: Vec<String>,
    pub args: BenchArgs,
}

/// The wbcache options of the run: `capacity` from `--memory`, then each
/// `--set`, which may override `capacity` (the kernel engines keep
/// `--memory` as their limit) but may not name a key twice.
fn merge_options(memory: u64, sets: &[String]) -> Result<String, String> {
    let mut pairs: Vec<(String, String)> = vec![("capacity".into(), exact_size(memory))];
    let mut given: Vec<String> = Vec::new();
    for set in sets {
        for item in set.split([',', ';']).map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(format!("--set {item}: expected KEY=VALUE"));
            };
            let (key, value) = (key.trim(), value.trim());
            if given.iter().any(|k| k == key) {
                return Err(format!("--set {key}: given twice"));
            }
            given.push(key.to_string());
            match pairs.iter_mut().find(|(k, _)| k == key) {
                Some(pair) => pair.1 = value.to_string(),
                None => pairs.push((key.to_string(), value.to_string())),
            }
        }
    }
    Ok(pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
}

/// The fio-style job of `--custom`, checked: every value in range, and
/// every file at least one request long.
fn fio_job(args: &BenchArgs, size: u64) -> Result<FioJob, String> {
    let rw = match args.rw.as_deref().map(str::trim) {
        None => FioRw::Read,
        Some(name) => FioRw::parse(name).ok_or_else(|| {
            let known: Vec<&str> = FioRw::ALL.iter().map(|rw| rw.name()).collect();
            format!("--rw {name}: not one of {}", known.join(", "))
        })?,
    };
    let bs = match &args.bs {
        Some(b) => parse_size("--bs", b).map_err(|e| e.to_string())?,
        None => 4096,
    };
    if bs == 0 || bs > 64 * MIB {
        return Err(format!("--bs {bs}: must be between 1 byte and 64M"));
    }
    let in_range = |flag: &str, v: Option<u64>, default: u64, max: u64| match v {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(format!("--{flag} {n}: must be between 1 and {max}")),
    };
    let numjobs = in_range("numjobs", args.numjobs, 1, 64)?;
    let nrfiles = in_range("nrfiles", args.nrfiles, 1, 1024)?;
    let rwmixread = match args.rwmixread {
        None => 50,
        Some(_) if rw != FioRw::RandRw => return Err("--rwmixread applies to --rw=randrw only".into()),
        Some(p) if p <= 100 => p as u8,
        Some(p) => return Err(format!("--rwmixread {p}: a percentage, 0 to 100")),
    };
    let fsync_every = args.fsync.unwrap_or(0);
    if fsync_every > 0 && rw.read_percent(rwmixread) == 100 {
        return Err(format!("--fsync {fsync_every}: --rw={} does not write", rw.name()));
    }
    let job = FioJob {
        rw,
        bs,
        size,
        numjobs,
        nrfiles,
        rwmixread,
        fsync_every,
        end_fsync: args.end_fsync,
        runtime_capped: args.runtime.is_some(),
    };
    if size / nrfiles < bs {
        return Err(format!(
            "--size {} split over --nrfiles {nrfiles} leaves less than one --bs {} per file",
            exact_size(size),
            exact_size(bs)
        ));
    }
    Ok(job)
}

/// `--fio`'s job file, checked readable before anything runs, made
/// absolute (fio runs in a directory of its own).
fn job_file(path: &std::path::Path) -> Result<PathBuf, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("--fio {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("--fio {shown}: not a file"));
    }
    std::fs::File::open(path).map_err(|e| format!("--fio {shown}: cannot be read: {e}"))?;
    std::fs::canonicalize(path).map_err(|e| format!("--fio {shown}: {e}"))
}

/// `--writeback-workers`: counts from 1 to 64, sorted, each once; the
/// default when not given.
fn writeback_workers(given: &[String]) -> Result<Vec<u32>, String> {
    if given.is_empty() {
        return Ok(PW_DEFAULT_WORKERS.to_vec());
    }
    let mut counts = Vec::new();
    for item in given.iter().map(|s| s.trim()) {
        match item.parse::<u32>() {
            Ok(n) if (1..=PW_MAX_WORKERS).contains(&n) => counts.push(n),
            _ => return Err(format!("--writeback-workers {item}: a count from 1 to {PW_MAX_WORKERS}")),
        }
    }
    counts.sort_unstable();
    counts.dedup();
    Ok(counts)
}

/// Parses `10`, `5s`, `500ms`, `2m`, `1.5` (seconds).
/// The longest `--runtime` or `--timeout` accepted, in seconds: a week.
/// Longer values (`1e30`) would overflow the durations built from them.
pub const SECONDS_MAX: f64 = 7.0 * 24.0 * 3600.0;

pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a duration (e.g. 10, 5s, 500ms)"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("duration '{s}' must be positive"));
    }
    if v * mult > SECONDS_MAX {
        return Err(format!("duration '{s}' is longer than a week"));
    }
    Ok(v * mult)
}

/// The directory `path` goes into, which must exist: its parent (the
/// current directory for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// One rule for every path the run writes: what it names (the `--json`
/// file, the `--svg` directory, the run's fresh directory in `--dir`) may
/// be new, but the directory it goes into must exist; a missing one is
/// refused, named, and nothing is created for it.
fn check_parent(flag: &str, path: &Path, parent: &Path) -> Result<(), String> {
    let shown = path.display();
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{flag} {shown}: {} is not a directory", parent.display())),
        Err(_) => Err(format!("{flag} {shown}: directory {} does not exist (create it first)", parent.display())),
    }
}

/// Checks the paths the run writes to or under, before anything is
/// measured: the `--json` file's directory exists (and the path is not a
/// directory), `--svg`'s parent exists (the directory itself is made now
/// if it is new), and `--dir` is a directory on a disk, not in memory.
fn check_outputs(args: &BenchArgs) -> Result<(), String> {
    if let Some(path) = &args.json {
        if path.is_dir() {
            return Err(format!("--json {}: is a directory, not a file", path.display()));
        }
        check_parent("--json", path, parent_of(path))?;
    }
    if let Some(dir) = &args.svg {
        if dir.exists() && !dir.is_dir() {
            return Err(format!("--svg {}: exists and is not a directory", dir.display()));
        }
        check_parent("--svg", dir, parent_of(dir))?;
    }
    if let Some(dir) = &args.dir {
        check_parent("--dir", dir, dir)?;
        if let Some(fs) = crate::sys::memory_fs(dir) {
            return Err(format!(
                "--dir {}: a memory file system ({fs}): its files are memory, counted against the kernel engines' \
                 memory limit, with no disk to write back to; give a directory on a disk",
                dir.display()
            ));
        }
    }
    // Made only once everything else passed: a refused run creates nothing.
    if let Some(dir) = args.svg.as_ref().filter(|d| !d.is_dir()) {
        std::fs::create_dir(dir).map_err(|e| format!("--svg {}: {e}", dir.display()))?;
    }
    Ok(())
}

impl Plan {
    pub fn from_args(args: BenchArgs) -> Result<Plan, String> {
        let explicit = !args.workloads.is_empty() && !args.workloads.iter().all(|w| w == "default");
        let suite = if args.custom {
            "fio-job"
        } else if args.fio.is_some() {
            "fio-jobfile"
        } else if args.quick {
            "quick"
        } else if explicit {
            "custom"
        } else {
            "default"
        };
        let pw_workers = writeback_workers(&args.writeback_workers)?;
        let mut groups = select_groups(&args, suite, explicit, &pw_workers)?;
        let (mut engines, engines_given) = select_engines(&args)?;
        if !args.writeback_workers.is_empty() && !groups.iter().any(|g| g.owner.takes_writeback_workers()) {
            return Err("--writeback-workers applies to parallel-writeback, which is not selected".into());
        }
        let mut notes = Vec::new();
        leave_out_groups(&mut groups, &engines, &mut notes)?;
        let (memory, size) = memory_and_size(&args)?;
        if let Some(t) = args.timeout {
            // Checked before anything runs: a negative, NaN or huge value
            // would panic building the timeout's `Duration` mid-run.
            if !(t > 0.0 && t <= SECONDS_MAX) {
                return Err(format!(
                    "--timeout {t}: must be a number of seconds above 0 and at most {SECONDS_MAX} (a week)"
                ));
            }
        }
        // The same default for every selection, as for the memory.
        let default_runtime_s = if args.quick { 1.0 } else { 5.0 };
        let runtime_s = match &args.runtime {
            Some(r) => parse_duration(r)?,
            None => default_runtime_s,
        };
        let options = merge_options(memory, &args.set)?;
        let config = Config::from_options(&options).map_err(|e| format!("wbcache options '{options}': {e}"))?;
        // Every key's value as the cache will run it, printed once.
        let effective_options = config.to_options();
        let custom = match args.custom {
            true => Some(add_custom_job(&args, size, engines_given, &mut engines, &mut groups, &mut notes)?),
            false => None,
        };
        if !engines_given {
            // By default, the engines the selection (`--custom`'s job too) runs on at all.
            engines.retain(|e| groups.iter().any(|g| g.runs_on(*e)));
        }
        let params = run_params(suite == "quick", memory, size, runtime_s, options);
        if let (Some(dev), false) = (&args.device, args.yes_destroy) {
            return Err(format!(
                "--device {} would destroy the data on it; add --yes-destroy if that is what you want",
                dev.display()
            ));
        }
        check_outputs(&args)?;
        Ok(Plan {
            suite,
            groups,
            engines,
            params,
            dirty_limit: config.dirty_limit_bytes,
            effective_options,
            custom,
            notes,
            args,
        })
    }
}

/// The groups the workloads named (or the suite's) expand to, each once,
/// each workload's together, in catalog order.
fn select_groups(args: &BenchArgs, suite: &str, explicit: bool, pw_workers: &[u32]) -> Result<Vec<Group>, String> {
    let overwrite_subset: Option<&[&str]> = match suite {
        "quick" if !explicit => Some(QUICK_OVERWRITES),
        "default" => Some(DEFAULT_OVERWRITES),
        _ => None,
    };
    let outside_the_catalog = args.custom || args.fio.is_some();
    let names: Vec<String> = if outside_the_catalog {
        Vec::new()
    } else if explicit {
        args.workloads.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    } else {
        vec!["default".into()]
    };
    let suite_groups = |overwrite_subset: Option<&[&str]>, default_only: bool| -> Vec<Group> {
        let selection = Selection { overwrite_subset, writeback_workers: pw_workers };
        WORKLOADS
            .iter()
            .filter(|w| !default_only || w.in_default_suite())
            .flat_map(|w| w.groups(None, &selection).expect("catalog names expand"))
            .collect()
    };
    let mut groups: Vec<Group> = Vec::new();
    for name in &names {
        let expanded: Vec<Group> = match name.as_str() {
            "all" => suite_groups(None, false),
            "default" if explicit => suite_groups(Some(DEFAULT_OVERWRITES), true),
            "default" => suite_groups(overwrite_subset, true),
            _ => expand(name, overwrite_subset, pw_workers).ok_or_else(|| {
                format!(
                    "unknown workload '{name}' (see --list; small-overwrite variants look like pwrite-1k-2m-file, \
                     parallel-writeback ones like parallel-writeback/files or parallel-writeback/shared/rotor-2, \
                     hot-set ones like hot-set/write-stream, sqlite ones like sqlite/wal-streaming, advice \
                     ones like advice/stream-dontneed, fio ones like fio/seq-write-1m/threads, rocksdb ones like \
                     rocksdb/readrandom)"
                )
            })?,
        };
        for g in expanded {
            if !groups.iter().any(|h| h.slug() == g.slug()) {
                groups.push(g);
            }
        }
    }
    if let Some(file) = &args.fio {
        groups.push(crate::workloads::fio::jobfile::group(job_file(file)?));
    }
    if groups.is_empty() && !outside_the_catalog {
        return Err("no workload selected (see --list)".into());
    }
    // Keep each workload's groups together, in catalog order.
    let rank = |g: &Group| WORKLOADS.iter().position(|w| w.name() == g.workload).unwrap_or(usize::MAX);
    groups.sort_by_key(rank);
    Ok(groups)
}

/// The engines named (all five by default; the dontcache ones and their
/// baseline for `--custom --dontcache`), sorted, each once; and whether
/// any was named.
fn select_engines(args: &BenchArgs) -> Result<(Vec<EngineKind>, bool), String> {
    let mut engines = Vec::new();
    for e in &args.engines {
        let e = e.trim();
        if e == "all" {
            engines.extend(EngineKind::ALL);
            continue;
        }
        let kind = EngineKind::parse(e).ok_or_else(|| {
            format!(
                "unknown engine '{e}' (known: {})",
                EngineKind::ALL.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
            )
        })?;
        engines.push(kind);
    }
    let engines_given = !engines.is_empty();
    if !engines_given && args.dontcache {
        engines.extend([EngineKind::KernelBuffered, EngineKind::KernelDontcache, EngineKind::WbcacheDontcache]);
    }
    if engines.is_empty() {
        engines.extend(EngineKind::ALL);
    }
    engines.sort();
    engines.dedup();
    Ok((engines, engines_given))
}

/// Leaves out the groups none of the selected engines runs (some workloads
/// run on some engines only), said so per workload in `notes`; refused
/// when that leaves nothing.
fn leave_out_groups(groups: &mut Vec<Group>, engines: &[EngineKind], notes: &mut Vec<String>) -> Result<(), String> {
    let mut left_out: Vec<(&'static str, &'static [EngineKind], usize)> = Vec::new();
    groups.retain(|g| {
        let runs = engines.iter().any(|e| g.runs_on(*e));
        if !runs {
            let only = g.only_on().unwrap_or(&EngineKind::ALL);
            match left_out.iter_mut().find(|(w, _, _)| *w == g.workload) {
                Some(entry) => entry.2 += 1,
                None => left_out.push((g.workload, only, 1)),
            }
        }
        runs
    });
    let names = |only: &[EngineKind]| only.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ");
    if groups.is_empty() && !left_out.is_empty() {
        let parts: Vec<String> =
            left_out.iter().map(|(w, only, _)| format!("{w} runs on {} only", names(only))).collect();
        return Err(format!("{}: none of them is among --engines", parts.join("; ")));
    }
    for (workload, only, n) in left_out {
        notes.push(format!("{workload}: {n} of its groups left out (it runs on {} only)", names(only)));
    }
    Ok(())
}

/// `--memory` and `--size`, checked. One set of defaults for every
/// selection, so a workload run alone measures exactly what its row in the
/// default suite measures.
fn memory_and_size(args: &BenchArgs) -> Result<(u64, u64), String> {
    let default_memory = if args.quick { 128 * MIB } else { 256 * MIB };
    let memory = match &args.memory {
        Some(m) => parse_size("--memory", m).map_err(|e| e.to_string())?,
        None => default_memory,
    };
    if memory < 16 * MIB {
        return Err(format!("--memory {} is too small (at least 16M)", fmt_size(memory)));
    }
    let size = match &args.size {
        Some(s) => parse_size("--size", s).map_err(|e| e.to_string())?,
        None => 2 * memory,
    };
    let size = (size / MIB) * MIB;
    if size < 4 * MIB {
        return Err("--size must be at least 4M".into());
    }
    Ok((memory, size))
}

/// `--custom`'s job, checked, and its group added; kernel-direct left out
/// (or refused, when named) for requests O_DIRECT cannot take.
fn add_custom_job(
    args: &BenchArgs,
    size: u64,
    engines_given: bool,
    engines: &mut Vec<EngineKind>,
    groups: &mut Vec<Group>,
    notes: &mut Vec<String>,
) -> Result<FioJob, String> {
    let job = fio_job(args, size)?;
    if job.bs % 4096 != 0 && engines.contains(&EngineKind::KernelDirect) {
        if engines_given {
            return Err(format!(
                "--bs {}: kernel-direct (O_DIRECT) needs requests in multiples of 4k; drop it from --engines",
                exact_size(job.bs)
            ));
        }
        engines.retain(|e| *e != EngineKind::KernelDirect);
        notes.push(format!("kernel-direct left out: O_DIRECT needs multiples of 4k, --bs is {}", exact_size(job.bs)));
    }
    groups.push(custom::group(job.clone()));
    Ok(job)
}

/// The run's sizes and times: the suite's iteration counts, the caps that
/// follow from the runtime, the sqlite database's size.
fn run_params(quick: bool, memory: u64, size: u64, runtime_s: f64, wbcache_options: String) -> Params {
    Params {
        memory,
        size,
        runtime_s,
        stream_cap_s: 6.0 * runtime_s,
        call_cap_s: (runtime_s / 4.0).clamp(0.25, 2.0),
        iterations_1k: if quick { 20_000 } else { 200_000 },
        iterations_10k: if quick { 5_000 } else { 50_000 },
        warmup: if quick { 200 } else { 1_000 },
        // More accounts data than memory, so the database does not fit in
        // either cache; a few MiB for the smoke run.
        sqlite_data_bytes: if quick { SQLITE_QUICK_DATA } else { memory / 4 * 5 },
        // Twice the memory: neither cache holds the database.
        rocksdb_data_bytes: if quick { ROCKSDB_QUICK_DATA } else { 2 * memory },
        wbcache_options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_suite_resolves() {
        let p = Plan::from_args(BenchArgs::default()).unwrap();
        assert_eq!(p.suite, "default");
        assert_eq!(p.params.memory, 256 * MIB);
        assert_eq!(p.params.size, 512 * MIB);
        assert_eq!(p.engines.len(), 6, "every engine: small-overwrite runs wbcache-preload too");
        assert_eq!(p.groups.iter().filter(|g| g.workload == "small-overwrite").count(), DEFAULT_OVERWRITES.len());
        let workloads: Vec<&str> = p.groups.iter().map(|g| g.workload).collect();
        let at = |w: &str| workloads.iter().position(|x| *x == w).unwrap();
        assert_eq!(workloads.iter().filter(|w| **w == "fsync-under-load").count(), 5);
        assert!(at("competing") < at("fsync-under-load") && at("fsync-under-load") < at("seq-read"));
    }

    /// `-w fsync-under-load` alone selects its five groups, with the
    /// default suite's runtime (100 small and 50 large fsyncs).
    #[test]
    fn fsync_under_load_alone() {
        let p =
            Plan::from_args(BenchArgs { workloads: vec!["fsync-under-load".into()], ..BenchArgs::default() }).unwrap();
        let variants: Vec<&str> = p.groups.iter().map(|g| g.variant.as_deref().unwrap()).collect();
        assert_eq!(variants, ["small/idle", "small/load", "large/idle", "large/load", "background/alone"]);
        assert_eq!(p.params.runtime_s, 5.0);
        let quick = Plan::from_args(BenchArgs {
            workloads: vec!["fsync-under-load".into()],
            quick: true,
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(quick.groups.len(), 5);
        assert_eq!(quick.params.runtime_s, 1.0);
    }

    #[test]
    fn selections_and_errors() {
        let args = BenchArgs {
            workloads: vec!["pwrite-1k-2m-file".into(), "seq-write".into(), "rand-read".into()],
            engines: vec!["wbcache".into(), "kernel-buffered".into()],
            set: vec!["dirty_limit=128M".into()],
            ..BenchArgs::default()
        };
        let p = Plan::from_args(args).unwrap();
        assert_eq!(p.suite, "custom");
        assert_eq!(p.params.memory, 256 * MIB, "a selection measures with the default suite's memory");
        assert_eq!(p.params.runtime_s, 5.0);
        assert_eq!(p.groups[0].workload, "seq-write");
        assert_eq!(p.groups.len(), 9, "seq-write, seven rand-read groups, one overwrite");
        assert_eq!(p.engines, vec![EngineKind::KernelBuffered, EngineKind::Wbcache]);
        assert_eq!(p.dirty_limit, 128 * MIB);
        assert!(Plan::from_args(BenchArgs { workloads: vec!["nope".into()], ..BenchArgs::default() }).is_err());
        assert!(Plan::from_args(BenchArgs { engines: vec!["nope".into()], ..BenchArgs::default() }).is_err());
        assert!(Plan::from_args(BenchArgs { set: vec!["bogus=1".into()], ..BenchArgs::default() }).is_err());
        assert!(Plan::from_args(BenchArgs { device: Some("/dev/null".into()), ..BenchArgs::default() }).is_err());
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert_eq!(parse_duration("5s").unwrap(), 5.0);
        assert!(parse_duration("-1").is_err());
    }

    /// Bad numbers are refused while the plan is made, before any
    /// directory or process exists: negative, zero, NaN, infinite and
    /// overflowing timeouts and runtimes.
    #[test]
    fn numeric_flags_are_checked_before_anything_runs() {
        for t in [-1.0, 0.0, f64::NAN, f64::INFINITY, 1e30, SECONDS_MAX + 1.0] {
            let e = Plan::from_args(BenchArgs { timeout: Some(t), ..BenchArgs::default() }).err();
            assert!(e.as_deref().is_some_and(|e| e.starts_with("--timeout")), "--timeout {t}: {e:?}");
        }
        for t in [0.5, 60.0, SECONDS_MAX] {
            assert!(Plan::from_args(BenchArgs { timeout: Some(t), ..BenchArgs::default() }).is_ok(), "--timeout {t}");
        }
        for r in ["1e30", "nan", "inf", "-5s", "0", "169h", "10081m"] {
            assert!(
                Plan::from_args(BenchArgs { runtime: Some(r.into()), ..BenchArgs::default() }).is_err(),
                "--runtime {r}"
            );
        }
        assert_eq!(parse_duration("10080m").unwrap(), SECONDS_MAX);
    }

    /// Output paths are checked before the run, with one rule: a missing
    /// `--json` or `--svg` parent directory and a missing `--dir` are
    /// refused, named; a `--json` that is a directory, an `--svg` or `--dir`
    /// that is a file are refused; a new `--svg` directory in an existing
    /// one is created, and only when the plan is accepted.
    #[test]
    fn output_paths_are_checked_first() {
        // On a disk: a memory file system is refused as --dir.
        let base = [PathBuf::from("/var/tmp"), std::env::temp_dir()]
            .into_iter()
            .find(|d| d.is_dir() && !crate::sys::is_memory_fs(d))
            .expect("a directory on a disk");
        let tmp = base.join(format!("wbcache-cli-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let file = tmp.join("existing-file");
        std::fs::write(&file, b"x").unwrap();
        let missing = tmp.join("missing");
        let shown = missing.display().to_string();
        let refused = [
            (BenchArgs { json: Some(missing.join("out.json")), ..BenchArgs::default() }, shown.clone()),
            (BenchArgs { json: Some(tmp.clone()), ..BenchArgs::default() }, "is a directory".into()),
            (BenchArgs { svg: Some(file.clone()), ..BenchArgs::default() }, "not a directory".into()),
            (BenchArgs { svg: Some(missing.join("charts")), ..BenchArgs::default() }, shown.clone()),
            (BenchArgs { dir: Some(missing.clone()), ..BenchArgs::default() }, shown.clone()),
            (BenchArgs { dir: Some(file.clone()), ..BenchArgs::default() }, "is not a directory".into()),
            (
                BenchArgs { svg: Some(tmp.join("charts")), memory: Some("1M".into()), ..BenchArgs::default() },
                "--memory".into(),
            ),
        ];
        for (args, needle) in refused {
            let what = format!("{:?} {:?} {:?}", args.json, args.svg, args.dir);
            let e = Plan::from_args(args).err().unwrap_or_default();
            assert!(e.contains(&needle), "{what}: {e:?} lacks {needle:?}");
        }
        assert!(!missing.exists() && !tmp.join("charts").exists(), "nothing refused was created");
        let svg = tmp.join("charts");
        let ok = BenchArgs {
            json: Some(tmp.join("out.json")),
            svg: Some(svg.clone()),
            dir: Some(tmp.clone()),
            ..BenchArgs::default()
        };
        assert!(Plan::from_args(ok).is_ok());
        assert!(svg.is_dir(), "--svg is created up front");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// `--custom` takes any request size: one that is not a multiple of
    /// 512 runs (kernel-direct left out, said so) and is labelled exactly.
    #[test]
    fn custom_jobs_take_any_request_size() {
        let p = Plan::from_args(BenchArgs {
            custom: true,
            bs: Some("3000".into()),
            size: Some("32M".into()),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(p.groups[0].variant.as_deref(), Some("read-3000-j1-f1"));
        let without_direct: Vec<EngineKind> =
            EngineKind::WITHOUT_PRELOAD.into_iter().filter(|e| *e != EngineKind::KernelDirect).collect();
        assert_eq!(p.engines, without_direct, "without -e, every engine the job runs on but kernel-direct");
        let aligned = Plan::from_args(BenchArgs { custom: true, ..BenchArgs::default() }).unwrap();
        assert_eq!(aligned.engines, EngineKind::WITHOUT_PRELOAD);
        assert_eq!(p.notes, ["kernel-direct left out: O_DIRECT needs multiples of 4k, --bs is 3000"]);
        let about = p.groups[0].owner.describe(&p.groups[0], &p.params);
        assert!(about.contains("bs=3000, 1 thread(s), each over 1 file(s) of 33552000, 32M of I/O"), "{about}");
    }

    /// A memory file system as `--dir` is refused, with the reason.
    #[test]
    fn a_memory_file_system_is_refused_as_dir() {
        let shm = Path::new("/dev/shm");
        if crate::sys::memory_fs(shm).is_none() {
            return;
        }
        let e = Plan::from_args(BenchArgs { dir: Some(shm.into()), ..BenchArgs::default() }).err().unwrap();
        assert!(e.starts_with("--dir /dev/shm: a memory file system (tmpfs)"), "{e}");
    }

    /// `--set` overrides `--memory`'s capacity instead of repeating it, and
    /// a key set twice is refused.
    #[test]
    fn options_are_merged_once() {
        let sets = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(merge_options(1 << 30, &[]).unwrap(), "capacity=1G");
        assert_eq!(
            merge_options(1 << 30, &sets(&["capacity=512M", "io=threads"])).unwrap(),
            "capacity=512M,io=threads"
        );
        assert_eq!(
            merge_options(1 << 30, &sets(&["dirty_limit=64M;expire_ms=5"])).unwrap(),
            "capacity=1G,dirty_limit=64M,expire_ms=5"
        );
        assert!(merge_options(1 << 30, &sets(&["io=threads", "io=uring"])).unwrap_err().contains("io"));
        assert!(merge_options(1 << 30, &sets(&["bogus"])).unwrap_err().contains("KEY=VALUE"));
        let p = Plan::from_args(BenchArgs {
            memory: Some("1G".into()),
            set: sets(&["capacity=512M"]),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(p.params.wbcache_options, "capacity=512M");
        assert!(p.effective_options.starts_with("capacity=512M,dirty_limit=256M,"), "{}", p.effective_options);
        assert_eq!(p.effective_options.matches("capacity=").count(), 1);
        assert_eq!(p.params.memory, 1 << 30, "the kernel engines keep --memory");
    }

    /// parallel-writeback is in the default and quick suites with its 16
    /// groups, after fsync-under-load; `-w parallel-writeback` alone selects
    /// them all, `/files` one pattern; --writeback-workers sets the counts.
    #[test]
    fn parallel_writeback_selection() {
        let pw = |p: &Plan| -> Vec<String> {
            p.groups.iter().filter(|g| g.workload == "parallel-writeback").map(|g| g.variant.clone().unwrap()).collect()
        };
        for quick in [false, true] {
            let p = Plan::from_args(BenchArgs { quick, ..BenchArgs::default() }).unwrap();
            assert_eq!(pw(&p).len(), 16, "quick {quick}");
            let workloads: Vec<&str> = p.groups.iter().map(|g| g.workload).collect();
            let at = |w: &str| workloads.iter().position(|x| *x == w).unwrap();
            assert!(at("fsync-under-load") < at("parallel-writeback") && at("parallel-writeback") < at("seq-read"));
            assert!(p.notes.is_empty(), "{:?}", p.notes);
        }
        let args = |w: &[&str], workers: &[&str], engines: &[&str]| BenchArgs {
            workloads: w.iter().map(|s| s.to_string()).collect(),
            writeback_workers: workers.iter().map(|s| s.to_string()).collect(),
            engines: engines.iter().map(|s| s.to_string()).collect(),
            ..BenchArgs::default()
        };
        let alone = Plan::from_args(args(&["parallel-writeback"], &[], &[])).unwrap();
        assert_eq!(pw(&alone).len(), 16);
        assert_eq!(alone.params.size, 512 * MIB, "2 × memory in all, as in the default suite");
        let files = Plan::from_args(args(&["parallel-writeback/files"], &["4", "1"], &[])).unwrap();
        assert_eq!(
            pw(&files),
            ["files", "files/single-1", "files/rotor-1", "files/rotor-4", "files/region-1", "files/region-4"]
        );
        let one = Plan::from_args(args(&["parallel-writeback/shared/region-2", "seq-write"], &[], &[])).unwrap();
        assert_eq!(pw(&one), ["shared/region-2"]);
        assert_eq!(one.groups[0].workload, "seq-write", "catalog order");
        // The dontcache engines do not run it: its groups are left out, said so.
        let some =
            Plan::from_args(args(&["seq-write", "parallel-writeback"], &["1"], &["wbcache-dontcache", "wbcache"]))
                .unwrap();
        assert_eq!(
            pw(&some),
            [
                "files/single-1",
                "files/rotor-1",
                "files/region-1",
                "shared/single-1",
                "shared/rotor-1",
                "shared/region-1"
            ]
        );
        assert!(some.notes.iter().any(|n| n.contains("2 of its groups left out")), "{:?}", some.notes);
        let refused = [
            (
                args(&["parallel-writeback"], &[], &["kernel-dontcache"]),
                "runs on kernel-buffered, kernel-direct, wbcache only",
            ),
            (args(&["parallel-writeback"], &["0"], &[]), "--writeback-workers 0"),
            (args(&["parallel-writeback"], &["65"], &[]), "--writeback-workers 65"),
            (args(&["parallel-writeback"], &["two"], &[]), "--writeback-workers two"),
            (args(&["seq-write"], &["2"], &[]), "--writeback-workers applies to parallel-writeback"),
            (args(&["parallel-writeback/both"], &[], &[]), "parallel-writeback/shared/rotor-2"),
        ];
        for (a, needle) in refused {
            let e = Plan::from_args(a).err().unwrap_or_default();
            assert!(e.contains(needle), "{e:?} lacks {needle:?}");
        }
    }

    /// hot-set is in the default and quick suites with its three variants,
    /// after rand-read; `-w hot-set/<variant>` selects one.
    #[test]
    fn hot_set_selection() {
        let hot = |p: &Plan| -> Vec<String> {
            p.groups.iter().filter(|g| g.workload == "hot-set").map(|g| g.variant.clone().unwrap()).collect()
        };
        for quick in [false, true] {
            let p = Plan::from_args(BenchArgs { quick, ..BenchArgs::default() }).unwrap();
            assert_eq!(hot(&p), ["alone", "write-stream", "read-stream"], "quick {quick}");
            let workloads: Vec<&str> = p.groups.iter().map(|g| g.workload).collect();
            let at = |w: &str| workloads.iter().position(|x| *x == w).unwrap();
            assert!(at("rand-read") < at("hot-set") && at("hot-set") < at("small-overwrite"));
            assert_eq!(p.params.memory, if quick { 128 * MIB } else { 256 * MIB });
        }
        let one = Plan::from_args(BenchArgs {
            workloads: vec!["hot-set/read-stream".into(), "hot-set/alone".into()],
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(hot(&one), ["read-stream", "alone"]);
        assert_eq!(one.engines, EngineKind::WITHOUT_PRELOAD, "every engine hot-set runs on");
        let e = Plan::from_args(BenchArgs { workloads: vec!["hot-set/both".into()], ..BenchArgs::default() }).err();
        assert!(e.is_some_and(|e| e.contains("hot-set/write-stream")));
    }

    /// An empty selection is a usage error, not an empty run.
    #[test]
    fn nothing_selected_is_an_error() {
        for w in [vec![String::new()], vec![" ".into(), "".into()]] {
            let e = Plan::from_args(BenchArgs { workloads: w.clone(), ..BenchArgs::default() }).err();
            assert!(e.as_deref().is_some_and(|e| e.contains("no workload selected")), "{w:?}: {e:?}");
        }
    }

    /// sqlite is in the default and quick suites with its four variants,
    /// after hot-set; the quick suite's database is a few MiB, the
    /// default's 1.25 × the memory; it runs on two engines only.
    #[test]
    fn sqlite_selection() {
        let sqlite = |p: &Plan| -> Vec<String> {
            p.groups.iter().filter(|g| g.workload == "sqlite").map(|g| g.variant.clone().unwrap()).collect()
        };
        for quick in [false, true] {
            let p = Plan::from_args(BenchArgs { quick, ..BenchArgs::default() }).unwrap();
            assert_eq!(sqlite(&p), ["wal-idle", "wal-streaming", "delete-idle", "delete-streaming"], "quick {quick}");
            let workloads: Vec<&str> = p.groups.iter().map(|g| g.workload).collect();
            let at = |w: &str| workloads.iter().position(|x| *x == w).unwrap();
            assert!(at("hot-set") < at("sqlite") && at("sqlite") < at("small-overwrite"));
            assert_eq!(p.params.sqlite_data_bytes, if quick { 4 * MIB } else { 320 * MIB });
            assert!(p.notes.is_empty(), "{:?}", p.notes);
        }
        let args = |w: &[&str], engines: &[&str]| BenchArgs {
            workloads: w.iter().map(|s| s.to_string()).collect(),
            engines: engines.iter().map(|s| s.to_string()).collect(),
            ..BenchArgs::default()
        };
        let one = Plan::from_args(args(&["sqlite/wal-streaming"], &[])).unwrap();
        assert_eq!(sqlite(&one), ["wal-streaming"]);
        assert_eq!(one.params.sqlite_data_bytes, 320 * MIB, "as in the default suite");
        let big = Plan::from_args(BenchArgs { memory: Some("1G".into()), ..args(&["sqlite"], &[]) }).unwrap();
        assert_eq!(big.params.sqlite_data_bytes, 1280 * MIB);
        // Engines it does not run on: its groups left out, said so.
        let some = Plan::from_args(args(&["seq-write", "sqlite"], &["kernel-direct"])).unwrap();
        assert!(sqlite(&some).is_empty());
        assert!(some
            .notes
            .iter()
            .any(|n| n == "sqlite: 4 of its groups left out (it runs on kernel-buffered, wbcache only)"));
        let e =
            Plan::from_args(args(&["sqlite"], &["kernel-dontcache", "wbcache-dontcache"])).err().unwrap_or_default();
        assert!(e.contains("sqlite runs on kernel-buffered, wbcache only: none of them is among --engines"), "{e}");
        let e = Plan::from_args(args(&["sqlite/both"], &[])).err().unwrap_or_default();
        assert!(e.contains("sqlite/wal-streaming"), "{e}");
    }

    /// advice is in the default and quick suites with its five variants,
    /// after sqlite; the quick suite's cold file is 64M and its stream
    /// 256M; it runs on kernel-buffered and wbcache only.
    #[test]
    fn advice_selection() {
        use crate::workloads::advice::{advice_cold_len, advice_stream_len};
        let advice = |p: &Plan| -> Vec<String> {
            p.groups.iter().filter(|g| g.workload == "advice").map(|g| g.variant.clone().unwrap()).collect()
        };
        let all = ["cold-read", "cold-read-willneed", "stream", "stream-dontneed", "stream-sync-range"];
        for quick in [false, true] {
            let p = Plan::from_args(BenchArgs { quick, ..BenchArgs::default() }).unwrap();
            assert_eq!(advice(&p), all, "quick {quick}");
            let workloads: Vec<&str> = p.groups.iter().map(|g| g.workload).collect();
            let at = |w: &str| workloads.iter().position(|x| *x == w).unwrap();
            assert!(at("sqlite") < at("advice") && at("advice") < at("small-overwrite"));
            let (cold, stream) = if quick { (64 * MIB, 256 * MIB) } else { (128 * MIB, 512 * MIB) };
            assert_eq!((advice_cold_len(&p.params), advice_stream_len(&p.params)), (cold, stream), "quick {quick}");
            assert!(p.notes.is_empty(), "{:?}", p.notes);
        }
        let args = |w: &[&str], engines: &[&str]| BenchArgs {
            workloads: w.iter().map(|s| s.to_string()).collect(),
            engines: engines.iter().map(|s| s.to_string()).collect(),
            ..BenchArgs::default()
        };
        let one = Plan::from_args(args(&["advice/stream-sync-range", "advice/cold-read"], &[])).unwrap();
        assert_eq!(advice(&one), ["stream-sync-range", "cold-read"]);
        assert_eq!((one.suite, one.params.memory, one.params.size), ("custom", 256 * MIB, 512 * MIB));
        let quick_one = Plan::from_args(BenchArgs { quick: true, ..args(&["advice/stream-dontneed"], &[]) }).unwrap();
        assert_eq!((advice(&quick_one), quick_one.params.memory), (vec!["stream-dontneed".to_string()], 128 * MIB));
        // Engines it does not run on: its groups left out, said so.
        let some = Plan::from_args(args(&["seq-write", "advice"], &["kernel-direct", "wbcache-dontcache"])).unwrap();
        assert!(advice(&some).is_empty());
        assert!(some
            .notes
            .iter()
            .any(|n| n == "advice: 5 of its groups left out (it runs on kernel-buffered, wbcache only)"));
        let e = Plan::from_args(args(&["advice"], &["kernel-dontcache"])).err().unwrap_or_default();
        assert!(e.contains("advice runs on kernel-buffered, wbcache only: none of them is among --engines"), "{e}");
        for bad in ["advice/", "advice/dontneed", "advice/stream/x", "advice/Stream"] {
            let e = Plan::from_args(args(&[bad], &[])).err().unwrap_or_default();
            assert!(e.contains("advice/stream-dontneed"), "{bad}: {e}");
        }
    }

    /// fio and rocksdb run only by name or with `all`, never in the default
    /// or quick suites; the rocksdb database is 2 × the memory, 16M with
    /// --quick. `--fio` runs the job file alone, checked up front.
    #[test]
    fn program_workloads_selection() {
        let workloads = |p: &Plan| p.groups.iter().map(|g| g.workload).collect::<Vec<_>>();
        for quick in [false, true] {
            let p = Plan::from_args(BenchArgs { quick, ..BenchArgs::default() }).unwrap();
            assert!(!workloads(&p).iter().any(|w| *w == "fio" || *w == "rocksdb"), "quick {quick}");
            assert_eq!(p.params.rocksdb_data_bytes, if quick { 16 * MIB } else { 512 * MIB });
        }
        let all = Plan::from_args(BenchArgs { workloads: vec!["all".into()], ..BenchArgs::default() }).unwrap();
        assert_eq!(workloads(&all).iter().filter(|w| **w == "fio").count(), 8);
        assert_eq!(workloads(&all).iter().filter(|w| **w == "rocksdb").count(), 5);
        assert_eq!(workloads(&all).last(), Some(&"rocksdb"));
        let file = std::env::temp_dir().join(format!("wbcache-cli-jobfile-{}.fio", std::process::id()));
        std::fs::write(&file, "[j]\nrw=read\n").unwrap();
        let p = Plan::from_args(BenchArgs { fio: Some(file.clone()), ..BenchArgs::default() }).unwrap();
        assert_eq!((p.suite, workloads(&p)), ("fio-jobfile", vec!["fio-jobfile"]));
        let runs: Vec<EngineKind> = p.engines.iter().copied().filter(|e| p.groups[0].runs_on(*e)).collect();
        assert_eq!(runs, [EngineKind::KernelBuffered, EngineKind::KernelDirect, EngineKind::Wbcache]);
        std::fs::remove_file(&file).unwrap();
        let e = Plan::from_args(BenchArgs { fio: Some(file.clone()), ..BenchArgs::default() }).err().unwrap();
        assert!(e.starts_with(&format!("--fio {}: ", file.display())), "{e}");
    }
}
