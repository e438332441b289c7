//! `wbcache bench -w hot-set` run end to end as a user runs it, with the
//! quick sizes (--memory 128M: a 32M hot file, 256M streamed), on wbcache,
//! wbcache-dontcache and kernel-buffered: three variants per engine, every
//! row ok with the hot reader's MB/s and hit ratio, and the table and the
//! targets printed.

use crate::common;
use common::{scratch, MIB};

#[test]
fn hot_set_runs_every_variant() {
    let dir = scratch("hot-set");
    let run = common::run_bench(&dir, &["-w", "hot-set", "--quick", "-e", "wbcache,wbcache-dontcache,kernel-buffered"]);
    let (stdout, stderr, json) = (&run.stdout, &run.stderr, &run.json);
    let results = json["results"].as_array().unwrap();
    common::assert_rows(
        json,
        &["kernel-buffered", "wbcache", "wbcache-dontcache"],
        &["alone", "write-stream", "read-stream"],
        "three variants per engine",
    );
    for r in results {
        let (engine, variant) = (r["engine"].as_str().unwrap(), r["variant"].as_str().unwrap());
        let what = format!("{engine} {variant}: {r}");
        assert_eq!(r["workload"], "hot-set");
        assert_eq!(r["status"], "ok", "{what}");
        let ratio = r["hot_hit_ratio"].as_f64().unwrap_or_else(|| panic!("hot_hit_ratio in {what}"));
        assert!((0.0..=1.0).contains(&ratio), "{what}");
        let hot = r["hot_mb_s"].as_f64().unwrap();
        assert!(hot > 0.0 && hot.is_finite(), "{what}");
        assert!(r["throughput_mb_s"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        let bytes = r["bytes"].as_u64().unwrap();
        let runtime = r["runtime_s"].as_f64().unwrap();
        if variant == "alone" {
            // The hot reader alone for the runtime (1 s with --quick); its
            // figures are the row's.
            assert!((0.9..5.0).contains(&runtime), "{what}");
            assert_eq!(r["throughput_mb_s"], r["hot_mb_s"], "{what}");
            assert!(r["hot_mb_s_alone_ratio"].is_null(), "{what}");
        } else {
            // The streamer: 256M in 1 MiB requests, unless the 6 s cap stopped it.
            assert!(bytes > 0 && bytes <= 256 * MIB && bytes % MIB == 0, "{what}");
            if runtime < 5.5 {
                assert_eq!(bytes, 256 * MIB, "{what}");
            }
            assert_eq!(r["ops"].as_u64().unwrap(), bytes / MIB, "{what}");
            let x = r["hot_mb_s_alone_ratio"].as_f64().unwrap_or_else(|| panic!("hot_mb_s_alone_ratio in {what}"));
            assert!(x > 0.0 && x.is_finite(), "{what}");
        }
        assert_eq!(r["fsync_lat_us"].is_null(), variant != "write-stream", "{what}: only the write stream fsyncs");
        assert_eq!(r["dropbehind_freed_bytes"].is_u64(), engine != "kernel-buffered", "{what}");
        assert!(r.get("peak_dirty_bytes").is_some_and(|v| v.is_u64()), "{what}");
    }
    let workloads = json["config"]["workloads"].as_array().unwrap();
    assert!(workloads.iter().any(|w| w == "hot-set-read-stream"), "{workloads:?}");

    assert!(stdout.contains("### hot-set"), "{stdout}");
    assert!(
        stdout.contains(
            "| engine | variant | stream MB/s | hot MB/s | hot vs alone | hot hit ratio | peak dirty+wb MiB |"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("Uncached buffered IO") && stdout.contains("Jens Axboe"), "{stdout}");
    for variant in ["write-stream", "read-stream"] {
        assert!(stdout.contains(&format!("| hot-set {variant}: wbcache-dontcache hot hit ratio ≥ 99% |")), "{stdout}");
        assert!(stdout
            .contains(&format!("| hot-set {variant}: wbcache-dontcache hot reader MB/s ≥ 0.9 × its alone MB/s |")));
    }
    assert!(stderr.contains("bench: 9 results from 9 measurements"), "{stderr}");
    common::finish(&run, &dir);
}

#[test]
fn hot_set_is_listed() {
    let text = common::bench_list();
    assert!(text.contains("hot-set"), "{text}");
    assert!(text.contains("Jens Axboe") && text.contains("hot-set/write-stream"), "{text}");
}
