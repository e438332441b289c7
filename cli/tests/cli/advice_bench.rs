//! `wbcache bench -w advice` run end to end as a user runs it, with the
//! quick sizes (--memory 128M: a 64M cold file, a 256M stream), on every
//! engine: the workload runs on kernel-buffered and wbcache only, five
//! variants each, every row ok with its MB/s and the figures of its
//! variant (the advice calls' time, the final fsync's, the peak of the
//! streamed file's cached bytes), and the table printed.

use crate::common;
use common::{scratch, MIB};
const VARIANTS: [&str; 5] = ["cold-read", "cold-read-willneed", "stream", "stream-dontneed", "stream-sync-range"];

#[test]
fn advice_runs_every_variant() {
    let dir = scratch("advice");
    let run = common::run_bench(&dir, &["-w", "advice", "--quick"]);
    let (stdout, stderr, json) = (&run.stdout, &run.stderr, &run.json);
    let results = json["results"].as_array().unwrap();
    common::assert_rows(
        json,
        &["kernel-buffered", "wbcache"],
        &VARIANTS,
        "five variants on each of the two engines, none on the others",
    );
    let mut peak_cached = std::collections::BTreeMap::new();
    for r in results {
        let (engine, variant) = (r["engine"].as_str().unwrap(), r["variant"].as_str().unwrap());
        let what = format!("{engine} {variant}: {r}");
        assert_eq!(r["workload"], "advice");
        assert_eq!(r["status"], "ok", "{what}");
        let mb_s = r["throughput_mb_s"].as_f64().unwrap_or_else(|| panic!("throughput_mb_s in {what}"));
        assert!(mb_s > 0.0 && mb_s.is_finite(), "{what}");
        let (bytes, ops) = (r["bytes"].as_u64().unwrap(), r["ops"].as_u64().unwrap());
        let (runtime, total) = (r["runtime_s"].as_f64().unwrap(), r["total_s"].as_f64().unwrap());
        assert!(0.0 < runtime && runtime <= total, "{what}");
        // 1 MiB calls over the whole file, unless the 6 s cap stopped them.
        let len = if variant.starts_with("cold-read") { 64 * MIB } else { 256 * MIB };
        assert!(bytes > 0 && bytes <= len && bytes % MIB == 0 && ops == bytes / MIB, "{what}");
        if total < 5.5 {
            assert_eq!(bytes, len, "{what}");
        }
        assert!(r["lat_us"]["p999"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        let advised = variant.contains('-') && variant != "cold-read";
        assert_eq!(r["advise_s"].as_f64().is_some_and(|v| v >= 0.0), advised, "{what}");
        if variant.starts_with("cold-read") {
            assert_eq!(r["advise_calls"].as_u64(), advised.then_some(1), "{what}: one WILLNEED");
            for field in ["fsync_s", "fsync_lat_us", "peak_cached_bytes", "cached_look_s"] {
                assert!(r.get(field).is_some_and(|v| v.is_null()), "{field} in {what}");
            }
        } else {
            // One call after every 8 MiB written.
            assert_eq!(r["advise_calls"].as_u64(), advised.then_some(bytes / (8 * MIB)), "{what}");
            let fsync = r["fsync_s"].as_f64().unwrap_or_else(|| panic!("fsync_s in {what}"));
            assert!(fsync >= 0.0 && (fsync - (total - runtime)).abs() < 0.002, "{what}");
            assert!(r["fsync_lat_us"]["max"].is_f64(), "{what}");
            let peak = r["peak_cached_bytes"].as_u64().unwrap_or_else(|| panic!("peak_cached_bytes in {what}"));
            assert!(peak > 0 && peak <= bytes, "{what}");
            if engine == "wbcache" {
                // Within the cache's capacity (--memory), and a little more.
                assert!(peak <= 160 * MIB, "{what}");
            }
            assert!(r["cached_look_s"].as_f64().is_some_and(|v| v >= 0.0), "{what}");
            peak_cached.insert((engine.to_string(), variant.to_string()), peak);
        }
        assert!(r.get("peak_dirty_bytes").is_some_and(|v| v.is_u64()), "{what}");
    }
    // wbcache's DONTNEED drops clean data at once and what it wrote after
    // its writeback: the stream keeps less cached than without advice,
    // which fills the cache.
    let wb = |v: &str| peak_cached[&("wbcache".to_string(), v.to_string())];
    assert!(wb("stream-dontneed") < wb("stream"), "{peak_cached:?}");
    let workloads = json["config"]["workloads"].as_array().unwrap();
    assert!(workloads.iter().any(|w| w == "advice-stream-sync-range"), "{workloads:?}");

    assert!(stdout.contains("### advice"), "{stdout}");
    assert!(
        stdout.contains(
            "| variant | engine | MB/s | vs plain | vs kernel-buffered | p99.9 µs | advice s | fsync s | \
             peak cached MiB | peak dirty+wb MiB |"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("PostgreSQL's checkpointer") && stdout.contains("RocksDB's bytes_per_sync"), "{stdout}");
    assert!(stdout.contains("| stream-sync-range | wbcache |"), "{stdout}");
    assert!(stderr.contains("bench: 10 results from 10 measurements"), "{stderr}");
    common::finish(&run, &dir);
}

#[test]
fn advice_is_listed() {
    let text = common::bench_list();
    assert!(text.contains("advice/stream-sync-range"), "{text}");
    assert!(text.contains("RocksDB's bytes_per_sync"), "{text}");
}
