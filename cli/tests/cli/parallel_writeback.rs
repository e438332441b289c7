//! `wbcache bench -w parallel-writeback` run end to end as a user runs it,
//! small (--memory 32M: 64M written per row, at most 1 s of writing), on
//! the one-worker configurations (`--writeback-workers 1`) of wbcache and on
//! kernel-buffered (without a memory cgroup): every row is ok and carries the writers' and the
//! writeback's MB/s and the CPU per GiB; the table, its comparisons and the
//! targets are printed.

use crate::common;
use common::{scratch, MIB};

#[test]
fn parallel_writeback_runs_both_patterns() {
    let dir = scratch("parallel-writeback");
    let run = common::run_bench(
        &dir,
        &[
            "-w",
            "parallel-writeback",
            "--writeback-workers",
            "1",
            "-e",
            "wbcache,kernel-buffered",
            // No memory cgroup for kernel-buffered: under cgroup v1 (no dirty
            // throttling per cgroup) twelve writers can get a 32M one OOM-killed.
            // Its rows are compared all the same: the targets are checked here.
            "--memory",
            "32M",
            "--runtime",
            "1",
            "--no-cgroup",
            "--allow-unfair",
        ],
    );
    let (stdout, stderr, json) = (&run.stdout, &run.stderr, &run.json);
    let results = json["results"].as_array().unwrap();
    let rows: Vec<(String, String)> = results
        .iter()
        .map(|r| (r["variant"].as_str().unwrap().to_string(), r["engine"].as_str().unwrap().to_string()))
        .collect();
    let expected: Vec<(String, String)> = ["files", "shared"]
        .iter()
        .flat_map(|p| {
            [
                (p.to_string(), "kernel-buffered".to_string()),
                (format!("{p}/single-1"), "wbcache".into()),
                (format!("{p}/rotor-1"), "wbcache".into()),
                (format!("{p}/region-1"), "wbcache".into()),
            ]
        })
        .collect();
    assert_eq!(rows, expected);
    let per_file = 64 * MIB / 12 / 4096 * 4096;
    for r in results {
        let variant = r["variant"].as_str().unwrap();
        assert_eq!(r["workload"], "parallel-writeback");
        assert_eq!(r["status"], "ok", "{r}");
        let full = if variant.starts_with("files") { 12 * per_file } else { 64 * MIB };
        let bytes = r["bytes"].as_u64().unwrap();
        assert!(bytes > 0 && bytes <= full, "{variant}: {bytes} of {full}");
        assert_eq!(r["ops"].as_u64().unwrap(), bytes / 4096, "{variant}: 4 KiB writes");
        if r["runtime_s"].as_f64().unwrap() < 0.9 {
            assert_eq!(bytes, full, "{variant}: done before the runtime, every block written");
        }
        let writers = r["throughput_mb_s"].as_f64().unwrap();
        let writeback = r["writeback_mb_s"].as_f64().unwrap();
        assert!(writeback > 0.0 && writeback <= writers, "{variant}: writeback {writeback} vs writers {writers}");
        assert!(r["total_s"].as_f64().unwrap() >= r["runtime_s"].as_f64().unwrap());
        let cpu = r["cpu_s_per_gib"].as_f64().unwrap();
        assert!(cpu > 0.0 && cpu.is_finite(), "{variant}: cpu_s_per_gib {cpu}");
        assert!(r["lat_us"]["p99"].as_f64().is_some(), "{variant}: write latency");
        // files: each writer fsyncs its file; shared: one fsync for all.
        assert!(r["fsync_lat_us"]["max"].as_f64().is_some_and(|v| v > 0.0), "{variant}: {r}");
        assert!(r.get("written_bytes_per_worker").is_some(), "{variant}: the field is there (null or a list)");
        if let Some(w) = r["written_bytes_per_worker"].as_array() {
            assert_eq!(w.len(), 1, "{variant}: one writeback worker");
        }
    }
    let workloads = json["config"]["workloads"].as_array().unwrap();
    assert!(workloads.iter().any(|w| w == "parallel-writeback-shared-region-1"), "{workloads:?}");

    assert!(stdout.contains("### parallel-writeback"), "{stdout}");
    assert!(
        stdout.contains("| variant | engine | writers MB/s | writeback MB/s | CPU s/GiB | vs single-1 |"),
        "{stdout}"
    );
    assert!(stdout.contains("AG aware parallel writeback for XFS"), "{stdout}");
    assert!(stdout.contains("Region ÷ rotor, writeback MB/s at the same worker count: files: 1 worker"), "{stdout}");
    assert!(stdout.contains("One shared file ÷ one file per writer, writeback MB/s: kernel-buffered"), "{stdout}");
    // kernel-direct did not run: the kernel-buffered target per pattern.
    assert_eq!(stdout.matches("| parallel-writeback ").count(), 2, "{stdout}");
    assert!(stdout.contains("| parallel-writeback shared: best wbcache writeback MB/s ≥ kernel-buffered |"));
    assert!(stderr.contains("bench: 8 results from 8 measurements"), "{stderr}");
    common::finish(&run, &dir);
}

/// Rows with several writeback workers, selected one by one: the cache
/// runs the variant's routing and worker count (whatever --set says for the
/// other workloads) and its stats list what each worker wrote.
#[test]
fn parallel_writeback_runs_several_workers() {
    let dir = scratch("parallel-writeback-workers");
    let run = common::run_bench(
        &dir,
        &[
            "-w",
            "parallel-writeback/shared/region-4,parallel-writeback/files/rotor-2",
            "-e",
            "wbcache",
            "--set",
            "writeback_routing=rotor,writeback_workers=3,region_size=4M",
            "--memory",
            "32M",
            "--runtime",
            "1",
        ],
    );
    let (stdout, json) = (&run.stdout, &run.json);
    let results = json["results"].as_array().unwrap();
    let variants: Vec<&str> = results.iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["shared/region-4", "files/rotor-2"], "the order given");
    for (r, workers) in results.iter().zip([4, 2]) {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["writeback_mb_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
        let written = r["written_bytes_per_worker"].as_array().unwrap_or_else(|| panic!("per-worker bytes in {r}"));
        assert_eq!(written.len(), workers, "{r}");
        let sum: u64 = written.iter().map(|w| w.as_u64().unwrap()).sum();
        // Workers' bytes include the clean blocks bridged between dirty
        // runs (gaps of up to 8 KiB among random 4 KiB blocks): a little
        // more than the writers wrote, never much more.
        assert!(sum > 0 && sum <= r["bytes"].as_u64().unwrap() / 10 * 11, "{r}");
    }
    assert!(stdout.contains("written per worker MiB"), "{stdout}");
    assert!(stdout.contains("region_size (4M)"), "{stdout}");
    common::finish(&run, &dir);
}

#[test]
fn parallel_writeback_is_listed() {
    let text = common::bench_list();
    assert!(text.contains("parallel-writeback"), "{text}");
    assert!(text.contains("Kundan Kumar") && text.contains("Brian Foster"), "{text}");
    assert!(text.contains("parallel-writeback/shared/region-4"), "{text}");
}
