//! `rocksdb`: RocksDB's own benchmark, `db_bench`, run as it is on each
//! engine (plain on kernel-buffered, where RocksDB's I/O is buffered by
//! default; with O_DIRECT reads, flushes and compactions on kernel-direct;
//! under the preload library on wbcache), its figures read from its own
//! report ([`output`]). Five variants, one benchmark each: fillseq and
//! fillrandom build a new database; overwrite (every write synced) runs on
//! one that another db_bench process loaded first; readrandom and
//! readwhilewriting run after fillseq in the same process, with a small
//! block cache so that reads come from the page cache (the kernel's or
//! wbcache's). The database is about 2 × the memory (16 MiB with --quick).

mod output;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::external::{
    capacity_of, command, dir_bytes, drop_from_page_cache, find_tool, fresh_dir, program_job, run_dir, run_together,
    time_limit, Finished,
};
use super::{Group, Jobs, Params, Place, Selection, Spec, Workload, WorkloadInfo, MIB};
use crate::bench_worker::{JobContext, JobRaw, JobResult, Measured, Outcome, Status};
use crate::engines::EngineKind;
use crate::measure::{round3, Percentiles};
use crate::report::{baseline, failed_row, field_names, fmt_num, heading, mib, ratio_of, ResultRow, RowTable};
use crate::sys::fmt_size;
pub use output::BenchFigures;

pub struct Rocksdb;

pub static ROCKSDB: Rocksdb = Rocksdb;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "rocksdb",
    summary: "RocksDB's db_bench (installed db_bench; by name or with `all`)",
    about: "RocksDB's db_bench (it must be installed) on a database of about 2 × --memory (16M with --quick): \
            16-byte keys, 400-byte values, no compression, a 1 MiB block cache (so reads come from the page \
            cache), one thread. Variants, one db_bench benchmark each: fillseq and fillrandom (a new database, \
            keys in order or at random), overwrite (--sync=1, every write synced, for --runtime, on a database \
            another db_bench process loaded with fillseq first), readrandom and readwhilewriting (for --runtime, \
            after fillseq in the same process). kernel-buffered runs db_bench as it is (RocksDB's I/O is \
            buffered by default), kernel-direct adds --use_direct_reads and \
            --use_direct_io_for_flush_and_compaction, wbcache runs it under libwbcache_preload.so (capacity \
            --memory). Figures, db_bench's own: operations per second, the latency's p50 and p99 (its \
            --histogram), MB/s. Not in the default suite. Select one with e.g. rocksdb/readrandom",
    models: "a storage engine (RocksDB, as in MySQL's MyRocks, Kafka Streams, CockroachDB before Pebble) loading, \
             overwriting with synced writes and reading a database larger than the memory, on the kernel's page \
             cache and on wbcache under the unmodified program",
    source: Some("RocksDB's db_bench (https://github.com/facebook/rocksdb/wiki/Benchmarking-tools)"),
};

/// The engines `rocksdb` runs on.
pub const ROCKSDB_ENGINES: [EngineKind; 3] =
    [EngineKind::KernelBuffered, EngineKind::KernelDirect, EngineKind::Wbcache];
/// The bytes one entry takes in the database (16-byte key, 400-byte value,
/// no compression; measured: 100,000 entries made 42.7 MB).
pub const ROCKSDB_ENTRY_BYTES: u64 = 427;
/// db_bench's block cache: small, so reads go to the page cache.
pub const ROCKSDB_BLOCK_CACHE: u64 = MIB;

/// db_bench's benchmarks `rocksdb` runs, one per variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbBenchmark {
    FillSeq,
    FillRandom,
    Overwrite,
    ReadRandom,
    ReadWhileWriting,
}

impl DbBenchmark {
    pub const ALL: [DbBenchmark; 5] = [
        DbBenchmark::FillSeq,
        DbBenchmark::FillRandom,
        DbBenchmark::Overwrite,
        DbBenchmark::ReadRandom,
        DbBenchmark::ReadWhileWriting,
    ];

    /// db_bench's name, also the variant's.
    pub fn name(self) -> &'static str {
        match self {
            DbBenchmark::FillSeq => "fillseq",
            DbBenchmark::FillRandom => "fillrandom",
            DbBenchmark::Overwrite => "overwrite",
            DbBenchmark::ReadRandom => "readrandom",
            DbBenchmark::ReadWhileWriting => "readwhilewriting",
        }
    }

    fn group(self) -> Group {
        Group::new(&ROCKSDB, Some(self.name().into()), self)
    }

    /// db_bench's `--benchmarks` and the options of the benchmark itself;
    /// the load before it in a process of its own, if any.
    fn runs(self, p: &Params) -> (Option<Vec<String>>, Vec<String>) {
        let duration = format!("--duration={}", p.runtime_s.ceil().max(1.0));
        let new_db = "--use_existing_db=0".to_string();
        let fillseq = || vec!["--benchmarks=fillseq".to_string(), new_db.clone()];
        match self {
            DbBenchmark::FillSeq | DbBenchmark::FillRandom => {
                (None, vec![format!("--benchmarks={}", self.name()), new_db])
            }
            DbBenchmark::Overwrite => (
                Some(fillseq()),
                vec!["--benchmarks=overwrite".into(), "--use_existing_db=1".into(), "--sync=1".into(), duration],
            ),
            DbBenchmark::ReadRandom | DbBenchmark::ReadWhileWriting => {
                (None, vec![format!("--benchmarks=fillseq,{}", self.name()), new_db, duration])
            }
        }
    }

    fn describe(self, p: &Params) -> String {
        let rt = p.runtime_s;
        match self {
            DbBenchmark::FillSeq => "fillseq: the keys written in order into a new database".into(),
            DbBenchmark::FillRandom => "fillrandom: the keys written in random order into a new database".into(),
            DbBenchmark::Overwrite => format!(
                "overwrite --sync=1: random keys overwritten, each write synced, for {rt} s, on the database another \
                 db_bench process loaded with fillseq (then dropped from the kernel's page cache, so both engines \
                 start cold)"
            ),
            DbBenchmark::ReadRandom => {
                format!("readrandom: random keys read for {rt} s, after fillseq in the same process")
            }
            DbBenchmark::ReadWhileWriting => format!(
                "readwhilewriting: random keys read for {rt} s by one thread while another writes, after fillseq in \
                 the same process"
            ),
        }
    }
}

/// The entries of the database: about `p.rocksdb_data_bytes`.
pub fn rocksdb_entries(p: &Params) -> u64 {
    (p.rocksdb_data_bytes / ROCKSDB_ENTRY_BYTES).max(1000)
}

/// The memtable's size: a sixteenth of the memory (4 to 64 MiB), so that
/// db_bench's own memory stays small beside the cache.
pub fn rocksdb_write_buffer(p: &Params) -> u64 {
    (p.memory / 16).clamp(4 * MIB, 64 * MIB)
}

/// The options every db_bench run of a measurement shares.
fn common_options(p: &Params, engine: EngineKind, db: &Path) -> Vec<String> {
    let mut o = vec![
        format!("--db={}", db.display()),
        format!("--num={}", rocksdb_entries(p)),
        "--key_size=16".into(),
        "--value_size=400".into(),
        "--compression_type=none".into(),
        format!("--cache_size={ROCKSDB_BLOCK_CACHE}"),
        format!("--write_buffer_size={}", rocksdb_write_buffer(p)),
        "--threads=1".into(),
        "--seed=1".into(),
        "--histogram=1".into(),
    ];
    if engine == EngineKind::KernelDirect {
        o.extend(["--use_direct_reads=1".into(), "--use_direct_io_for_flush_and_compaction=1".into()]);
    }
    o
}

/// What a `rocksdb` job runs: the load (if any) and the benchmark, each a
/// db_bench process, in the measurement's directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RocksdbRun {
    pub dir: Option<PathBuf>,
    pub load: Option<Vec<String>>,
    pub timed: Vec<String>,
    /// The benchmark whose figures are the row's.
    pub benchmark: String,
    pub preload_options: Option<String>,
}

/// What a `rocksdb` job reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RocksdbResult {
    pub version: String,
    pub figures: BenchFigures,
    /// The database directory's bytes after the run.
    pub db_bytes: u64,
}

/// One db_bench process, run to its end within `limit` of `started`.
fn db_bench_once(run: &RocksdbRun, args: &[String], dir: &Path, limit: (Instant, Duration)) -> io::Result<Finished> {
    let db_bench = find_tool("db_bench")?;
    let left = limit.1.saturating_sub(limit.0.elapsed());
    let c = command(&db_bench, args, dir, run.preload_options.as_deref())?;
    let f = run_together(vec![c], "db_bench", left)?.remove(0);
    f.check("db_bench")?;
    Ok(f)
}

/// The load (then the database dropped from the kernel's page cache)
/// and the benchmark, in `dir`: the benchmark's figures.
fn load_and_measure(run: &RocksdbRun, dir: &Path, limit: (Instant, Duration)) -> io::Result<RocksdbResult> {
    if let Some(load) = &run.load {
        db_bench_once(run, load, dir, limit)?;
        drop_from_page_cache(dir)?;
    }
    let f = db_bench_once(run, &run.timed, dir, limit)?;
    let figures = output::parse(&f.stdout).into_iter().find(|b| b.name == run.benchmark).ok_or_else(|| {
        io::Error::other(format!("db_bench reported no {}: {}", run.benchmark, f.last_words("db_bench")))
    })?;
    let version = output::version(&f.stderr).unwrap_or_else(|| "db_bench".into());
    Ok(RocksdbResult { version, figures, db_bytes: dir_bytes(dir) })
}

/// Runs a `rocksdb` job in the worker: db_bench found, the measurement's
/// directory made, the load and the benchmark, the directory removed.
fn run_db_bench(ctx: &JobContext<'_>, run: &RocksdbRun) -> io::Result<JobRaw> {
    ctx.start_together(Ok(()))?;
    ctx.check_cancelled()?;
    let started = Instant::now();
    find_tool("db_bench")?;
    let dir = fresh_dir(run.dir.as_deref(), "db_bench")?;
    let outcome = load_and_measure(run, &dir, (started, time_limit(ctx.spec)));
    let _ = fs::remove_dir_all(&dir);
    let result = outcome?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let mut measured = Measured { ops: result.figures.operations, ..Measured::default() };
    measured.set_own(&result);
    Ok(JobRaw { measured, io_end_s: elapsed_s, end_s: elapsed_s })
}

impl Workload for Rocksdb {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(DbBenchmark::ALL.into_iter().map(DbBenchmark::group).collect()),
            Some(name) => Some(vec![DbBenchmark::ALL.into_iter().find(|b| b.name() == name)?.group()]),
        }
    }

    fn listed_variants(&self) -> Option<String> {
        let names: Vec<String> = DbBenchmark::ALL.iter().map(|b| format!("rocksdb/{}", b.name())).collect();
        Some(format!("rocksdb variants: {}", names.join(", ")))
    }

    /// It takes minutes and needs db_bench: run it by name (or with `all`).
    fn in_default_suite(&self) -> bool {
        false
    }

    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&ROCKSDB_ENGINES)
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        group.shape::<DbBenchmark>().describe(p)
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let b = *group.shape::<DbBenchmark>();
        let dir = run_dir(place, name);
        let common = common_options(p, engine, &dir.clone().unwrap_or_default().join("db"));
        let (load, timed) = b.runs(p);
        let run = RocksdbRun {
            load: load.map(|l| [common.clone(), l].concat()),
            timed: [common, timed].concat(),
            benchmark: b.name().into(),
            preload_options: (!engine.is_kernel()).then(|| p.wbcache_options.clone()),
            dir,
        };
        let job = program_job(engine, run.dir.as_deref(), &run, p.rocksdb_data_bytes);
        Jobs { jobs: vec![job], deadline_s: p.runtime_s, pipelined: false }
    }

    /// The database's load, at 5 MB/s (db_bench's own pace with
    /// compactions, and a build with assertions, is well above it).
    fn timeout_allowance_s(&self, spec: &Spec) -> f64 {
        spec.jobs.iter().map(|j| j.target.len as f64 / 5e6).sum()
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        run_db_bench(ctx, &ctx.own_pattern()?)
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], _o: &Outcome) -> Vec<ResultRow> {
        let Some(result) = jobs.first().and_then(|j| j.own::<RocksdbResult>()) else {
            return vec![failed_row(group, engine, Status::Error, "no report from db_bench".into())];
        };
        vec![rocksdb_row(group, engine, &result)]
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<DbBenchFigures>()
    }

    fn shares_the_disk(&self) -> bool {
        true
    }

    fn summary(&self, rows: &[ResultRow]) -> String {
        let Some(r) = rows.last() else { return "no result".into() };
        let own = db_bench_figures(r);
        let p99 = own.op_us_p99.map(|v| format!(", p99 {v} µs")).unwrap_or_default();
        format!(
            "{} ops/s{p99} ({})",
            fmt_num(own.ops_per_s.unwrap_or(0.0)),
            own.tool_version.as_deref().unwrap_or("db_bench")
        )
    }

    fn about(&self, groups: &[&Group], p: &Params) -> String {
        format!(
            "RocksDB's db_bench, one thread, on a database of {} entries (16-byte keys, 400-byte values, no \
             compression: about {}), a {} block cache, {} memtables. kernel-buffered runs db_bench as it is, \
             kernel-direct with --use_direct_reads=1 --use_direct_io_for_flush_and_compaction=1, wbcache under \
             libwbcache_preload.so (capacity {}). Variants: {}",
            fmt_num(rocksdb_entries(p) as f64),
            fmt_size(rocksdb_entries(p) * ROCKSDB_ENTRY_BYTES),
            fmt_size(ROCKSDB_BLOCK_CACHE),
            fmt_size(rocksdb_write_buffer(p)),
            fmt_size(capacity_of(&p.wbcache_options)),
            super::variants_named(groups, p)
        )
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        rocksdb_table(self.name(), about, rows)
    }
}

/// `rocksdb`'s own figures of its rows: db_bench's for the row's
/// benchmark. The row's `lat_us` is its P50, P99, P99.9 and Max,
/// `throughput_mb_s` its MB/s, `ops` its operations, `runtime_s` its
/// seconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DbBenchFigures {
    /// The program that measured the row, as it names its version
    /// (`RocksDB 7.8.3`).
    pub tool_version: Option<String>,
    /// The database directory's size after the run, in bytes.
    pub db_bytes: Option<u64>,
    /// Operations per second, and the median and 99th percentile of the
    /// microseconds per operation (`--histogram`).
    pub ops_per_s: Option<f64>,
    pub op_us_p50: Option<f64>,
    pub op_us_p99: Option<f64>,
}

/// A row's [`DbBenchFigures`] (all `None` on another workload's row).
fn db_bench_figures(row: &ResultRow) -> DbBenchFigures {
    row.own()
}

/// A `rocksdb` row: db_bench's figures for its benchmark.
fn rocksdb_row(group: &Group, engine: EngineKind, result: &RocksdbResult) -> ResultRow {
    let f = &result.figures;
    let mut row = ResultRow::empty(group, engine, group.variant.clone(), Status::Ok, None);
    row.set_own(&DbBenchFigures {
        tool_version: Some(result.version.clone()),
        db_bytes: Some(result.db_bytes),
        ops_per_s: Some(f.ops_per_s),
        op_us_p50: f.us_p50,
        op_us_p99: f.us_p99,
    });
    if let (Some(p50), Some(p99), Some(p999), Some(max)) = (f.us_p50, f.us_p99, f.us_p999, f.us_max) {
        row.lat_us = Some(Percentiles { p50, p99, p999, max });
    }
    row.throughput_mb_s = f.mb_s;
    row.ops = Some(f.operations);
    row.runtime_s = Some(round3(f.seconds));
    row
}

/// What the `rocksdb` table's columns mean (printed above it).
pub const ROCKSDB_COLUMNS: &str = "All figures are db_bench's own: ops/s its ops/sec, p50, p99 and p99.9 its \
     --histogram's microseconds per operation, MB/s its MB/s. db: the database directory's size after the run. \
     vs kernel-buffered: ops/s ÷ kernel-buffered's in the same variant.";

/// The `rocksdb` table: per variant and engine, db_bench's figures and
/// ops/s against kernel-buffered's.
pub fn rocksdb_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let rank = |r: &ResultRow| {
        let v = DbBenchmark::ALL.iter().position(|b| Some(b.name()) == r.variant.as_deref());
        (v, EngineKind::ALL.iter().position(|e| e.name() == r.engine))
    };
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| rank(r));
    let head =
        ["variant", "engine", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "MB/s", "db MiB", "ops/s vs kernel-buffered"];
    let mut table = RowTable::new(&[&heading(title), about, ROCKSDB_COLUMNS], &head, &rows);
    for r in &rows {
        let mut c = table.cells(r);
        c.variant().engine();
        let p999 = r.lat_us.as_ref().map(|p| p.p999);
        let own = db_bench_figures(r);
        for v in [own.ops_per_s, own.op_us_p50, own.op_us_p99, p999, r.throughput_mb_s] {
            c.figure(v, fmt_num);
        }
        c.figure(own.db_bytes, mib);
        let kernel = baseline(r, &rows).and_then(|b| db_bench_figures(b).ops_per_s).filter(|b| *b > 0.0);
        c.times(ratio_of(own.ops_per_s, kernel));
        table.push(c);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::JobResult;
    use crate::report::test_support::{ok_outcome, own};
    use crate::workloads::{build_spec, groups_for, info, rows_from, test_params as params, variants_of};

    /// rocksdb: five db_bench benchmarks, on three engines, one by one
    /// selectable; not in the default suite.
    #[test]
    fn rocksdb_groups_and_selections() {
        let groups = groups_for("rocksdb", None).unwrap();
        assert_eq!(variants_of(&groups), ["fillseq", "fillrandom", "overwrite", "readrandom", "readwhilewriting"]);
        for g in &groups {
            let on: Vec<EngineKind> = EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect();
            assert_eq!(on, ROCKSDB_ENGINES);
        }
        assert_eq!(variants_of(&groups_for("rocksdb/overwrite", None).unwrap()), ["overwrite"]);
        for bad in ["rocksdb/", "rocksdb/readseq", "rocksdb/overwrite/x"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        assert!(!ROCKSDB.in_default_suite());
        let w = info("rocksdb").unwrap();
        assert!(w.source.unwrap().starts_with("RocksDB's db_bench"));
        for text in [w.about, w.models, w.source.unwrap()] {
            for word in ["issue", "seed", "slot"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
    }

    fn run(variant: &str, engine: EngineKind) -> RocksdbRun {
        let place = Place { dir: Some("/work/bench".into()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let g = groups_for(&format!("rocksdb/{variant}"), None).unwrap().remove(0);
        let spec = build_spec(&g, engine, &params(2.0), &place, false);
        assert_eq!(spec.jobs[0].target.len, 256 * MIB);
        spec.jobs[0].pattern.own_as().unwrap()
    }

    /// The fills build a new database in one db_bench; overwrite runs
    /// --sync=1 in a second one after a fillseq load; the reads follow
    /// fillseq in the same one; kernel-direct asks RocksDB for O_DIRECT.
    #[test]
    fn rocksdb_specs() {
        let fill = run("fillseq", EngineKind::KernelBuffered);
        assert_eq!(fill.load, None);
        let common = "--db=/work/bench/rocksdb-fillseq-kernel-buffered/db --num=628654 --key_size=16 --value_size=400 \
                      --compression_type=none --cache_size=1048576 --write_buffer_size=8388608 --threads=1 --seed=1 \
                      --histogram=1";
        assert_eq!(fill.timed.join(" "), format!("{common} --benchmarks=fillseq --use_existing_db=0"));
        assert_eq!((fill.benchmark.as_str(), fill.preload_options.as_deref()), ("fillseq", None));
        let over = run("overwrite", EngineKind::Wbcache);
        let load = over.load.unwrap().join(" ");
        assert!(load.ends_with("--histogram=1 --benchmarks=fillseq --use_existing_db=0"), "{load}");
        assert!(over.timed.join(" ").ends_with("--benchmarks=overwrite --use_existing_db=1 --sync=1 --duration=2"));
        assert_eq!(over.preload_options.as_deref(), Some("capacity=128M"));
        let read = run("readrandom", EngineKind::KernelDirect);
        let timed = read.timed.join(" ");
        assert!(timed.contains("--use_direct_reads=1 --use_direct_io_for_flush_and_compaction=1"), "{timed}");
        assert!(timed.ends_with("--benchmarks=fillseq,readrandom --use_existing_db=0 --duration=2"), "{timed}");
        assert_eq!(read.load, None);
    }

    fn row_of(engine: EngineKind, figures: BenchFigures) -> ResultRow {
        let result = RocksdbResult { version: "RocksDB 7.8.3".into(), figures, db_bytes: 20 << 20 };
        let job = JobResult { own: own(&result), ..JobResult::default() };
        let g = groups_for("rocksdb/readrandom", None).unwrap().remove(0);
        rows_from(&g, engine, &ok_outcome(vec![job], None)).remove(0)
    }

    /// A row is db_bench's report of the benchmark; the table sets the
    /// engines side by side, ops/s against kernel-buffered's.
    #[test]
    fn rocksdb_rows_and_table() {
        let report = output::parse(include_str!("testdata/db_bench-fill-read.txt"));
        let kernel = row_of(EngineKind::KernelBuffered, report[2].clone());
        let own = db_bench_figures(&kernel);
        assert_eq!((kernel.variant.as_deref(), own.ops_per_s), (Some("readrandom"), Some(506_072.0)));
        assert_eq!((own.op_us_p50, own.op_us_p99), (Some(1.30), Some(3.71)));
        assert_eq!(kernel.lat_us, Some(Percentiles { p50: 1.30, p99: 3.71, p999: 51.0, max: 587.0 }));
        assert_eq!((kernel.throughput_mb_s, kernel.ops, kernel.runtime_s), (Some(127.0), Some(5000), Some(0.01)));
        assert_eq!((own.db_bytes, own.tool_version.as_deref()), (Some(20 << 20), Some("RocksDB 7.8.3")));
        let mut faster = report[2].clone();
        faster.ops_per_s *= 1.5;
        let wb = row_of(EngineKind::Wbcache, faster);
        let table = rocksdb_table("rocksdb", "about", &[&wb, &kernel]);
        assert!(table.contains(
            "| variant | engine | ops/s | p50 µs | p99 µs | p99.9 µs | MB/s | db MiB | ops/s vs kernel-buffered |"
        ));
        assert!(
            table.contains("| readrandom | kernel-buffered | 506,072 | 1.30 | 3.71 | 51.0 | 127 | 20.0 | 1.00× |"),
            "{table}"
        );
        assert!(
            table.contains("| readrandom | wbcache | 759,108 | 1.30 | 3.71 | 51.0 | 127 | 20.0 | 1.50× |"),
            "{table}"
        );
        assert!(table.find("kernel-buffered |").unwrap() < table.find("| wbcache |").unwrap());
        assert_eq!(ROCKSDB.summary(&[wb]), "759,108 ops/s, p99 3.71 µs (RocksDB 7.8.3)");
    }
}
