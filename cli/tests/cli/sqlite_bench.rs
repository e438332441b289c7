//! `wbcache bench -w sqlite` run end to end as a user runs it, with the
//! quick sizes (--memory 128M, a 4M database, 1 s of transactions, 256M
//! streamed), on every engine: the workload runs on kernel-buffered and
//! wbcache only, four variants each, every row ok with its transactions per
//! second, its commit latency and its memory, and the table printed.

use crate::common;
use common::{scratch, MIB};
const VARIANTS: [&str; 4] = ["wal-idle", "wal-streaming", "delete-idle", "delete-streaming"];

#[test]
fn sqlite_runs_every_variant() {
    let dir = scratch("sqlite");
    let run = common::run_bench(&dir, &["-w", "sqlite", "--quick"]);
    let (stdout, stderr, json) = (&run.stdout, &run.stderr, &run.json);
    let results = json["results"].as_array().unwrap();
    common::assert_rows(
        json,
        &["kernel-buffered", "wbcache"],
        &VARIANTS,
        "four variants on each of the two engines, none on the others",
    );
    let mut db_sizes = Vec::new();
    for r in results {
        let (engine, variant) = (r["engine"].as_str().unwrap(), r["variant"].as_str().unwrap());
        let what = format!("{engine} {variant}: {r}");
        assert_eq!(r["workload"], "sqlite");
        assert_eq!(r["status"], "ok", "{what}");
        let tps = r["tps"].as_f64().unwrap_or_else(|| panic!("tps in {what}"));
        assert!(tps > 0.0 && tps.is_finite(), "{what}");
        let ops = r["ops"].as_u64().unwrap();
        let runtime = r["runtime_s"].as_f64().unwrap();
        assert!(ops >= 1 && runtime > 0.0, "{what}");
        // The transactions stop after the runtime (1 s with --quick), or
        // earlier when the streaming writer is done.
        assert!(runtime < 3.0, "{what}");
        assert!((tps - ops as f64 / runtime).abs() <= 0.01 * tps + 1.0, "{what}");
        let (p50, p99, max) = (
            r["commit_us_p50"].as_f64().unwrap_or_else(|| panic!("commit_us_p50 in {what}")),
            r["commit_us_p99"].as_f64().unwrap(),
            r["commit_us_max"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{what}");
        // The whole transaction takes at least its commit.
        let txn_max = r["lat_us"]["max"].as_f64().unwrap();
        assert!(txn_max >= max, "{what}");
        let db = r["db_bytes"].as_u64().unwrap();
        assert!((2 * MIB..16 * MIB).contains(&db) && db % 4096 == 0, "{what}");
        db_sizes.push(db);
        let rss = r["peak_rss_bytes"].as_u64().unwrap_or_else(|| panic!("peak_rss_bytes in {what}"));
        assert!(rss > MIB, "{what}");
        if engine == "wbcache" {
            // The cache's memory and the rest of the process, within the
            // memory given (128M) and 64 MiB more.
            assert!(rss <= 192 * MIB, "{what}");
        }
        let stream = r["stream_mb_s"].as_f64();
        if variant.ends_with("-streaming") {
            assert!(stream.is_some_and(|s| s > 0.0 && s.is_finite()), "{what}");
        } else {
            assert!(r["stream_mb_s"].is_null(), "{what}");
        }
        assert!(r["throughput_mb_s"].is_null() && r["bytes"].is_null(), "{what}");
        assert!(r.get("peak_dirty_bytes").is_some_and(|v| v.is_u64()), "{what}");
    }
    db_sizes.dedup();
    assert_eq!(db_sizes.len(), 1, "the same database on both engines: {db_sizes:?}");
    let workloads = json["config"]["workloads"].as_array().unwrap();
    assert!(workloads.iter().any(|w| w == "sqlite-delete-streaming"), "{workloads:?}");

    assert!(stdout.contains("### sqlite"), "{stdout}");
    assert!(
        stdout.contains(
            "| variant | engine | TPS | vs idle | commit p50 ms | commit p99 ms | commit max ms | txn p99 ms | \
             stream MB/s | db MiB | peak RSS MiB | peak dirty+wb MiB | TPS vs kernel-buffered |"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("Follows pgbench's built-in TPC-B-like script."), "{stdout}");
    assert!(stdout.contains("| wal-streaming | wbcache |"), "{stdout}");
    assert!(stderr.contains("bench: 8 results from 8 measurements"), "{stderr}");
    common::finish(&run, &dir);
}

#[test]
fn sqlite_is_listed() {
    let text = common::bench_list();
    assert!(text.contains("sqlite/wal-streaming"), "{text}");
    assert!(text.contains("pgbench's built-in TPC-B-like script"), "{text}");
}
