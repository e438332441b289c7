//! `wbcache bench -w fsync-under-load` run end to end on wbcache, as a
//! user runs it (the quick sizes: 20 small and 10 large fsyncs): every
//! variant gives an ok row, the foreground rows carry their fsync figures,
//! the background rows their MB/s, and the table and targets are printed.

use crate::common;
use common::scratch;

#[test]
fn fsync_under_load_runs_every_variant() {
    let dir = scratch("fsync-under-load");
    let run = common::run_bench(&dir, &["-w", "fsync-under-load", "--quick", "-e", "wbcache"]);
    let (stdout, json) = (&run.stdout, &run.json);
    let results = json["results"].as_array().unwrap();
    let row = |variant: &str| {
        results
            .iter()
            .find(|r| r["workload"] == "fsync-under-load" && r["variant"] == variant)
            .unwrap_or_else(|| panic!("no {variant} row in {results:?}"))
    };
    for variant in ["small/idle", "small/load", "large/idle", "large/load"] {
        let r = row(variant);
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["engine"], "wbcache");
        let fsync = &r["fsync_lat_us"];
        for p in ["p50", "p99", "p999", "max"] {
            assert!(fsync[p].as_f64().is_some_and(|v| v > 0.0), "{variant}: fsync_lat_us.{p} in {r}");
        }
        let total = r["fsync_total_s"].as_f64().unwrap_or_else(|| panic!("{variant}: fsync_total_s in {r}"));
        // The sum of the fsyncs is at least the slowest one, and no more than
        // every one of them at the slowest's cost.
        let max_s = fsync["max"].as_f64().unwrap() / 1e6;
        let n = if variant.starts_with("small") { 20.0 } else { 10.0 };
        assert!(total >= max_s * 0.99 && total <= n * max_s * 1.01, "{variant}: total {total} s, max {max_s} s");
        assert!(r["lat_us"]["max"].as_f64().is_some(), "{variant}: the foreground's write latency");
        let (bs, n) = if variant.starts_with("small") { (4096, 20) } else { (8 << 20, 10) };
        assert_eq!(r["bytes"], bs * n, "{variant}: every iteration ran");
        assert_eq!(r["ops"], n);
        assert!(r["throughput_mb_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    }
    // The small phase takes at least its 20 pauses of 100 ms.
    assert!(row("small/idle")["runtime_s"].as_f64().unwrap() >= 2.0);
    for variant in ["background/with-fsync", "background/with-large-fsync", "background/alone"] {
        let r = row(variant);
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["throughput_mb_s"].as_f64().is_some_and(|v| v > 0.0), "{variant}: {r}");
        assert!(r["fsync_total_s"].is_null() && r["fsync_lat_us"].is_null(), "{variant}: {r}");
    }
    assert_eq!(results.len(), 7, "{results:?}");
    // The background writers stop with the foreground: they ran about as
    // long as it did, not until the measurement's deadline (32 s).
    let fg_s = row("small/load")["runtime_s"].as_f64().unwrap();
    let bg_s = row("background/with-fsync")["runtime_s"].as_f64().unwrap();
    assert!(bg_s <= fg_s + 1.0, "background ran {bg_s} s, foreground {fg_s} s");
    assert!(bg_s >= fg_s - 1.0, "background ran {bg_s} s, foreground {fg_s} s");
    assert!(json["config"]["workloads"].as_array().unwrap().iter().any(|w| w == "fsync-under-load-small-load"));

    assert!(stdout.contains("### fsync-under-load"), "{stdout}");
    assert!(stdout.contains("| variant | engine | fsync p50 ms | fsync p99 ms |"), "{stdout}");
    assert!(stdout.contains("boosting urgent asynchronous writeback io"), "{stdout}");
    // kernel-buffered did not run: only the wbcache-only targets.
    assert_eq!(stdout.matches("| fsync-under-load ").count(), 3, "{stdout}");
    common::finish(&run, &dir);
}

#[test]
fn fsync_under_load_is_listed() {
    let text = common::bench_list();
    assert!(text.contains("fsync-under-load"), "{text}");
    assert!(text.contains("small/load") && text.contains("background/alone"), "{text}");
}
