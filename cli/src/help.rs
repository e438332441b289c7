//! `bench`'s help texts: the short one `--help` ends with (one line per
//! workload and engine) and the long one `--list` prints (what each
//! workload does and models, its variants, the engines, the suites, and
//! the options that take more than a line to explain).

use crate::engines::EngineKind;
use crate::workloads::small_overwrite::{DEFAULT_OVERWRITES, QUICK_OVERWRITES};
use crate::workloads::WORKLOADS;

/// What `bench --help` says after the options: each workload and engine in
/// a line, and what a run does to the machine.
pub fn short() -> String {
    let mut s = String::from("Workloads (the default suite runs all but fio and rocksdb; --list says more):\n");
    for w in WORKLOADS.iter().map(|w| w.info()) {
        s.push_str(&format!("  {:<19} {}\n", w.name, w.summary));
    }
    s.push_str("\nEngines:\n");
    for e in EngineKind::ALL {
        s.push_str(&format!("  {:<19} {}\n", e.name(), e.summary()));
    }
    s.push_str(&format!("\n{}\n", wrap(MACHINE, 0, 100)));
    s
}

/// What a run does to the machine, and what follows without root.
const MACHINE: &str =
    "As root, a run drops the whole machine's page cache before each measurement and runs the kernel \
     engines in a memory cgroup of --memory; without root they run without one, their rows are marked not comparable \
     and no verdict compares against them (--allow-unfair to compare all the same).";

/// What `bench --list` prints: the workloads in full, the engines, the
/// suites, each workload's variants, and the options in detail.
pub fn list_text() -> String {
    let mut s = String::from("Workloads (what each models, and the public measurement it follows):\n");
    for w in WORKLOADS.iter().map(|w| w.info()) {
        s.push_str(&format!("  {:<19} {}\n  {:<19} models: {}\n", w.name, w.about, "", w.models));
        if let Some(source) = w.source {
            s.push_str(&format!("  {:<19} follows: {source}\n", ""));
        }
    }
    s.push_str("\nEngines:\n");
    for e in EngineKind::ALL {
        s.push_str(&format!("  {:<19} {}\n", e.name(), e.describe()));
    }
    s.push_str(
        "  (small-overwrite call shapes: kernel-buffered/-dontcache use lseek (untimed) + write(2) or writev(2), or \
         pwrite(2)/pwritev2; kernel-direct uses positioned io_uring writes for all three; wbcache engines map write \
         and pwrite to one write_at and writev to one write_vectored_at)\n",
    );
    s.push_str(&format!(
        "\nDefault suite (no --workloads): every workload but fio and rocksdb (by name or with `all`), \
         small-overwrite variants {}.\n\
         --quick: the same with small-overwrite {}, --memory 128M, --runtime 1s, a 4M sqlite database (and a 16M \
         rocksdb one).\n\
         Without --quick, any selection runs with --memory 256M, --size 2 × memory, --runtime 5s unless given, \
         so a workload alone measures what it measures in the default suite.\n",
        DEFAULT_OVERWRITES.join(", "),
        QUICK_OVERWRITES.join(", ")
    ));
    for listed in WORKLOADS.iter().filter_map(|w| w.listed_variants()) {
        s.push_str(&format!("\n{listed}\n"));
    }
    s.push_str("\nOptions in detail:\n");
    for (flag, text) in OPTION_DETAILS {
        s.push_str(&format!("  {flag:<19} {}\n", wrap(text, 22, 100).trim_start()));
    }
    s
}

/// What an option's one line of `--help` leaves out.
const OPTION_DETAILS: &[(&str, &str)] = &[
    (
        "--workloads",
        "names from the catalog, or variants: small-overwrite ones (pwrite-1k-2m-file), \
         parallel-writeback/files, parallel-writeback/shared/region-4, rand-read/cached-4k, \
         rand-read/cached-4k-readers-4 (rand-read/cached-4k-readers: 1, 2 and 4 reader threads), \
         hot-set/write-stream, sqlite/wal-streaming, advice/stream-sync-range, fio/rand-read-4k-cached, \
         fio/seq-write-1m/processes, rocksdb/readrandom; `all`; or `default`. Without it, the default suite runs \
         (about 8-9 minutes).",
    ),
    (
        "--memory",
        "wbcache's capacity and the kernel engines' memory cgroup limit, 256M by default, 128M with --quick; \
         --set capacity=... changes wbcache's alone.",
    ),
    ("--size", "the file size of the streaming and random workloads, twice --memory by default."),
    (
        "--runtime",
        "5 s by default, 1 s with --quick; size-based workloads stop at 6 × it, per-call workloads at a quarter of \
         it (0.25-2 s).",
    ),
    (
        "--dir",
        "the run makes a fresh directory in it and removes it afterwards; it must exist (a missing one is refused, \
         not created) and be on a disk: a memory file system (tmpfs, ramfs) is refused, as its files would be memory, \
         counted against the kernel engines' limit. Without it: /var/tmp, the current directory or /tmp, the first \
         on a disk that is writable. What runs killed before their end left there (and their memory cgroups) the \
         next run removes, and says so.",
    ),
    ("--device", "refused without --yes-destroy, and when it is mounted or used as swap."),
    (
        "--json",
        "`references` lists figures measured without an engine that put the results in context: a bare memcpy of \
         the cached-4k pattern (`us_per_call`), the same by as many threads as each cached-4k-readers variant has \
         (`us_per_call`, `reads_per_s` in all, `reader_threads`), and a bare O_DIRECT read of seq-read's file into \
         as much fresh memory as --memory (`mb_s`). The cached-4k-readers rows carry `reads_per_s` (every reader \
         thread's reads per second of their common time) and `reader_threads`. `config.not_comparable_engines` \
         names the kernel engines that ran without their memory cgroup, `config.targets_judged` says whether the \
         targets were judged. Its directory must exist.",
    ),
    (
        "--svg",
        "throughput per second, latency percentiles, dirty bytes over time; for fsync-under-load, each fsync's \
         latency over time. A new directory is made; its parent must exist.",
    ),
    (
        "--repeat",
        "the run with the median figure is reported: MB/s, µs/call for per-call rows, reads/s for rand-read's \
         cached-4k-readers rows, the fsync total for fsync-under-load's foreground, writeback MB/s for \
         parallel-writeback, the hot reader's MB/s for hot-set, transactions per second for sqlite. Targets are \
         judged (met or NOT met) only on the median of 3 runs or more: one run on a shared, noisy machine can \
         mislead. With fewer, their figures are shown unjudged.",
    ),
    (
        "--writeback-workers",
        "parallel-writeback's wbcache rows try each count with writeback_routing=rotor and =region; single-1 \
         always runs as the baseline.",
    ),
    (
        "--no-drop-caches",
        "as root, a run writes back every dirty page and drops the kernel's caches before each measurement (sync; \
         echo 3 > /proc/sys/vm/drop_caches): for the whole machine, not only its own files.",
    ),
    (
        "--allow-unfair",
        "without root (or with --no-cgroup) the kernel engines run without their memory cgroup, their page cache \
         free to use all of the machine's memory while wbcache has --memory: their rows are marked not comparable \
         and no verdict compares against them, unless this is given.",
    ),
    (
        "--custom",
        "--size is each thread's I/O (default 2 × --memory), split between its --nrfiles files; --runtime, when \
         given, caps it. One request at a time per thread, as fio's psync engine. Any --bs works; kernel-direct \
         (O_DIRECT) needs multiples of 4k and is left out otherwise. Example: --custom --rw=randrw --rwmixread=70 \
         --bs=4k --numjobs=4 --fsync=32.",
    ),
    (
        "--dontcache",
        "runs kernel-dontcache and wbcache-dontcache, with kernel-buffered as the ratio's baseline, unless --engines \
         says otherwise.",
    ),
    (
        "--fio",
        "fio must be installed. kernel-direct adds --direct=1, wbcache runs fio under libwbcache_preload.so as \
         `wbcache run` runs it; fio's own figures side by side: per job, read and write MB/s, IOPS, p50 and p99. \
         Each engine's fio runs in a fresh directory (--directory: the job file's relative file names land there, \
         and only files there go through the cache), every job as a thread of one fio process (--thread). A run is \
         killed after --timeout seconds (default: twice --runtime plus 11 minutes).",
    ),
];

/// `text` in lines of at most `width` columns (a longer word alone), each
/// but the first indented by `indent`.
fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_wraps_at_the_width() {
        assert_eq!(wrap("aa bb cc", 2, 7), "aa bb\n  cc");
        assert_eq!(wrap("a verylongword b", 0, 5), "a\nverylongword\nb");
        assert_eq!(wrap("", 4, 10), "");
    }

    /// One line per workload and engine, none of them long.
    #[test]
    fn the_short_help_has_one_line_per_workload() {
        let text = short();
        for w in WORKLOADS {
            let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("  {} ", w.name()))).collect();
            assert_eq!(lines.len(), 1, "{}", w.name());
        }
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(text.lines().count() < 32, "{text}");
    }
}
