//! The workloads that run the field's own programs, end to end with tiny
//! sizes: `-w fio` (fio's jobs and JSON report), `-w rocksdb` (db_bench's
//! benchmarks and report) and `--fio JOBFILE` on kernel-buffered and on
//! wbcache (fio and db_bench under the preload library), every row with
//! the program's figures, positive; and without the programs on `PATH`,
//! every row `unsupported`, naming the missing program, the run exiting 0.
//!
//! A missing fio or db_bench skips its test with the reason printed,
//! except under `CI=true`, where it fails; so does a missing
//! `libwbcache_preload.so` (`cargo build -p wbcache-preload` builds it),
//! whose absence otherwise leaves the wbcache rows out.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{in_ci, preload_library, wbcache};

/// A fresh directory for one test under Cargo's directory for test
/// files (`target/tmp`), away from other programs' files in the system's
/// temporary directory, which may run under the preload library too.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("wbcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `tool` is on `PATH`; when not, says so, and fails under CI.
fn have(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| d.join(tool).is_file()) {
        return true;
    }
    assert!(!in_ci(), "{tool} is not installed (CI=true requires it)");
    eprintln!("skipped: {tool} is not installed");
    false
}

/// The engines to run: kernel-buffered, and wbcache when the library is
/// there (its path for the bench, in `WBCACHE_PRELOAD`).
fn engines() -> (Vec<&'static str>, Option<PathBuf>) {
    match preload_library() {
        Some(lib) => (vec!["kernel-buffered", "wbcache"], Some(lib)),
        None => (vec!["kernel-buffered"], None),
    }
}

/// What a run printed and its JSON rows.
struct Run {
    stdout: String,
    rows: Vec<serde_json::Value>,
}

/// Runs `wbcache bench <args>` in `dir` (tiny sizes, caches left alone),
/// with `path` as `PATH` when given; asserts exit 0.
fn bench(dir: &Path, args: &[&str], lib: Option<&Path>, path: Option<&str>) -> Run {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let json = dir.join("out.json");
    let mut c = wbcache();
    c.arg("bench").args(args).args(["--no-drop-caches", "--dir"]).arg(&work).arg("--json").arg(&json);
    if let Some(lib) = lib {
        c.env("WBCACHE_PRELOAD", lib);
    }
    if let Some(path) = path {
        c.env("PATH", path);
    }
    let out = c.stdin(Stdio::null()).output().expect("run wbcache");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(std::fs::read_dir(&work).unwrap().next().is_none(), "the scratch directory is removed");
    Run { stdout, rows: v["results"].as_array().unwrap().clone() }
}

fn positive(r: &serde_json::Value, field: &str) -> f64 {
    let v = r[field].as_f64().unwrap_or_else(|| panic!("{field} in {r}"));
    assert!(v > 0.0 && v.is_finite(), "{field} in {r}");
    v
}

/// A fio row's figures: the directions it has, positive, p50 ≤ p99.
fn assert_fio_row(r: &serde_json::Value, reads: bool, writes: bool) {
    assert_eq!(r["status"], "ok", "{r}");
    assert!(r["tool_version"].as_str().is_some_and(|v| v.starts_with("fio-")), "{r}");
    positive(r, "throughput_mb_s");
    assert!(r["ops"].as_u64().is_some_and(|n| n > 0), "{r}");
    for (dir, has) in [("read", reads), ("write", writes)] {
        if has {
            positive(r, &format!("{dir}_mb_s"));
            positive(r, &format!("{dir}_iops"));
            let p50 = positive(r, &format!("{dir}_clat_us_p50"));
            assert!(p50 <= positive(r, &format!("{dir}_clat_us_p99")), "{r}");
        } else {
            assert!(r[format!("{dir}_iops")].is_null(), "{r}");
        }
    }
}

#[test]
fn fio_runs_its_jobs_on_each_engine() {
    if !have("fio") {
        return;
    }
    let (engines, lib) = engines();
    let dir = scratch("fio-workload");
    let list = if lib.is_some() { "kernel-buffered,wbcache,wbcache-dontcache" } else { "kernel-buffered" };
    let args = ["-w", "fio", "--quick", "--memory", "64M", "--size", "32M", "--runtime", "300ms", "-e", list];
    let run = bench(&dir, &args, lib.as_deref(), None);
    let patterns = [
        ("seq-write-1m", false, true),
        ("rand-write-4k-fsync32", false, true),
        ("rand-read-4k-cached", true, false),
        ("rand-rw-70-30", true, true),
    ];
    let mut expected = 0;
    for (pattern, reads, writes) in patterns {
        for mode in ["threads", "processes"] {
            let variant = format!("{pattern}/{mode}");
            for engine in &engines {
                let r = run.rows.iter().find(|r| r["variant"] == variant.as_str() && r["engine"] == *engine);
                let r = r.unwrap_or_else(|| panic!("no {engine} {variant} row in {:?}", run.rows));
                assert_eq!(r["workload"], "fio");
                assert_fio_row(r, reads, writes);
                expected += 1;
            }
            if lib.is_some() {
                // fio before 3.40 has no RWF_DONTCACHE: said, not failed.
                let r =
                    run.rows.iter().find(|r| r["variant"] == variant.as_str() && r["engine"] == "wbcache-dontcache");
                let r = r.unwrap_or_else(|| panic!("no wbcache-dontcache {variant} row"));
                match r["status"].as_str() {
                    Some("ok") => assert_fio_row(r, reads, writes),
                    _ => assert!(r["error"].as_str().is_some_and(|e| e.contains("RWF_DONTCACHE")), "{r}"),
                }
                expected += 1;
            }
        }
    }
    assert_eq!(run.rows.len(), expected);
    assert!(run.stdout.contains("### fio") && run.stdout.contains("| rand-rw-70-30/processes | kernel-buffered |"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rocksdb_runs_db_bench_on_each_engine() {
    if !have("db_bench") {
        return;
    }
    let (engines, lib) = engines();
    let dir = scratch("rocksdb-workload");
    let list = engines.join(",");
    let run = bench(
        &dir,
        &["-w", "rocksdb", "--quick", "--memory", "64M", "--runtime", "1", "-e", &list],
        lib.as_deref(),
        None,
    );
    common::assert_rows(
        &serde_json::json!({ "results": run.rows }),
        &engines,
        &["fillseq", "fillrandom", "overwrite", "readrandom", "readwhilewriting"],
        "each benchmark on each engine",
    );
    for r in &run.rows {
        assert_eq!((r["workload"].as_str(), r["status"].as_str()), (Some("rocksdb"), Some("ok")), "{r}");
        assert!(r["tool_version"].as_str().is_some_and(|v| v.starts_with("RocksDB ")), "{r}");
        positive(r, "ops_per_s");
        let p50 = positive(r, "op_us_p50");
        assert!(p50 <= positive(r, "op_us_p99"), "{r}");
        assert!(r["ops"].as_u64().is_some_and(|n| n > 0), "{r}");
        // The quick database: 16M of entries, give or take RocksDB's own.
        let db = r["db_bytes"].as_u64().unwrap();
        assert!(db > 4 << 20 && db < 96 << 20, "{r}");
    }
    assert!(run.stdout.contains("### rocksdb") && run.stdout.contains("| overwrite | kernel-buffered |"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fio_job_file_runs_on_each_engine() {
    if !have("fio") {
        return;
    }
    let (engines, lib) = engines();
    let dir = scratch("fio-jobfile");
    let file = dir.join("jobs.fio");
    let jobs =
        "[global]\nsize=8m\nruntime=300ms\ntime_based\n\n[reader]\nrw=randread\nbs=4k\n\n[writer]\nrw=write\nbs=64k\n";
    std::fs::write(&file, jobs).unwrap();
    let list = engines.join(",");
    let run = bench(&dir, &["--fio", &file.to_string_lossy(), "-e", &list], lib.as_deref(), None);
    common::assert_rows(&serde_json::json!({ "results": run.rows }), &engines, &["reader", "writer"], "a row per job");
    for r in &run.rows {
        assert_eq!(r["workload"], "fio-jobfile");
        let reads = r["variant"] == "reader";
        assert_fio_row(r, reads, !reads);
    }
    assert!(run.stdout.contains("### fio-jobfile") && run.stdout.contains("| reader | kernel-buffered |"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without the programs, each row says which one is missing; the run
/// itself succeeds.
#[test]
fn missing_programs_make_unsupported_rows() {
    let dir = scratch("missing-programs");
    let args = ["-w", "fio/seq-write-1m/threads,rocksdb/fillseq", "--quick", "-e", "kernel-buffered"];
    let run = bench(&dir, &args, None, Some("/nonexistent"));
    assert_eq!(run.rows.len(), 2);
    for (r, tool) in run.rows.iter().zip(["fio", "db_bench"]) {
        assert_eq!(r["status"], "unsupported", "{r}");
        assert_eq!(r["error"], format!("{tool} not installed"));
    }
    assert!(run.stdout.contains("unsupported: fio not installed"), "{}", run.stdout);
    assert!(run.stdout.contains("unsupported: db_bench not installed"), "{}", run.stdout);
    std::fs::remove_dir_all(&dir).unwrap();
}
