//! `wbcache bench -w rand-read/cached-4k-readers` run end to end as a user
//! runs it, with the quick sizes (--memory 128M: a 32M cached region;
//! 200,000 reads per thread, ten times cached-4k's 20,000): the three
//! reader-thread variants on kernel-buffered and wbcache, every row ok with
//! its reads/s and thread count, their table, and a bare memcpy by as many
//! threads under it.

use crate::common;
use common::scratch;

#[test]
fn reader_thread_variants_run() {
    let dir = scratch("rand-read-readers");
    let args = ["-w", "rand-read/cached-4k-readers", "--quick", "-e", "kernel-buffered,wbcache"];
    let run = common::run_bench(&dir, &args);
    let (stdout, stderr, json) = (&run.stdout, &run.stderr, &run.json);
    let variants = ["cached-4k-readers-1", "cached-4k-readers-2", "cached-4k-readers-4"];
    common::assert_rows(json, &["kernel-buffered", "wbcache"], &variants, "three variants per engine");
    for r in json["results"].as_array().unwrap() {
        let what = r.to_string();
        assert_eq!((r["workload"].as_str(), r["status"].as_str()), (Some("rand-read"), Some("ok")), "{what}");
        let threads = r["reader_threads"].as_u64().unwrap_or_else(|| panic!("reader_threads in {what}"));
        assert_eq!(r["variant"], format!("cached-4k-readers-{threads}"), "{what}");
        assert!(r["reads_per_s"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        assert!(r["us_per_call"].as_f64().is_some_and(|v| v > 0.0), "{what}");
        // 200,000 reads per thread with --quick, unless the per-call cap came
        // first.
        let ops = r["ops"].as_u64().unwrap();
        assert!(ops > 0 && ops <= threads * 200_000 && r["bytes"].as_u64() == Some(ops * 4096), "{what}");
    }
    let references = json["references"].as_array().unwrap();
    assert_eq!(references.len(), 3, "{references:?}");
    for (r, threads) in references.iter().zip([1, 2, 4]) {
        assert_eq!(r["variant"], format!("cached-4k-readers-{threads}"), "{r}");
        assert_eq!(r["reader_threads"], threads, "{r}");
        assert!(r["reads_per_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    }
    assert!(stdout.contains("### rand-read"), "{stdout}");
    let head =
        "| variant | engine | readers | µs/call | reads/s | MB/s | reads/s vs kernel-buffered | reads/s vs 1 reader |";
    assert!(stdout.contains(head), "{stdout}");
    assert!(stdout.contains("Reference (cached-4k-readers-4): a bare memcpy"), "{stdout}");
    assert!(stderr.contains("bench: 6 results from 6 measurements"), "{stderr}");
    common::finish(&run, &dir);
}

#[test]
fn reader_thread_variants_are_listed() {
    let text = common::bench_list();
    assert!(
        text.contains("rand-read/cached-4k-readers-2") && text.contains("cached-4k-readers-1, -2 and -4"),
        "{text}"
    );
}
