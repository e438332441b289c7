//! What a first run of `wbcache bench` meets, run as a user runs it: a
//! `--custom` job of any request size runs; the run says what it does to
//! the machine and, when the kernel engines run without their memory
//! cgroup, marks their rows not comparable and gives no verdict against
//! them unless `--allow-unfair`; targets are judged only on the median of
//! `--repeat 3`; what a run killed outright left behind, the next one
//! removes and says so.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{entries, scratch, wbcache};

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A request size that is not a multiple of 512: the job's files are laid
/// out (O_DIRECT for their whole blocks, the rest through the page cache),
/// every row runs, and the label says 3000, not a rounded 2.9k.
#[test]
fn a_custom_job_of_any_request_size_runs() {
    let dir = scratch("custom-3000");
    let run = common::run_bench(&dir, &["--custom", "--bs=3000", "--size=32M", "-e", "kernel-buffered,wbcache"]);
    let results = run.json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    for r in results {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["variant"], "read-3000-j1-f1", "{r}");
        let (bytes, ops) = (r["bytes"].as_u64().unwrap(), r["ops"].as_u64().unwrap());
        assert!(ops > 0 && bytes == ops * 3000, "{r}");
    }
    let stdout = run.stdout.to_lowercase();
    assert!(stdout.contains("bs=3000") && !stdout.contains("2.9k"), "{stdout}");
    common::finish(&run, &dir);
}

/// The notes a run printed on stderr.
fn notes(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("note: ")).collect()
}

/// Without the memory cgroup (here --no-cgroup, as for a user without
/// root), the kernel rows are marked not comparable and the verdict that
/// compares against them is withheld, said so; --allow-unfair gives it,
/// unjudged with one run, judged with three.
#[test]
fn kernel_rows_without_their_memory_limit_are_not_judged() {
    let dir = scratch("not-comparable");
    let args = ["-w", "pwrite-1k-2m-file", "-e", "kernel-buffered,wbcache", "--quick", "--no-cgroup"];
    let run = common::run_bench(&dir, &args);
    let notes = notes(&run.stderr);
    assert!(
        notes.iter().any(|n| n.starts_with("note: --no-cgroup: the kernel engines run without a memory limit")
            && n.contains("their rows are marked not comparable")
            && n.contains("drop --no-cgroup, or pass --allow-unfair")),
        "{notes:?}"
    );
    if is_root() {
        assert!(notes.iter().any(|n| n.contains("sync; echo 3 > /proc/sys/vm/drop_caches")), "{notes:?}");
    }
    let stdout = &run.stdout;
    assert!(stdout.contains("| kernel-buffered (not comparable) |"), "{stdout}");
    assert!(stdout.contains("| wbcache |"), "{stdout}");
    assert!(!stdout.contains("| pwrite-1k-2m-file: wbcache µs/call ≤ kernel-buffered/20 |"), "{stdout}");
    assert!(stdout.contains("1 verdict against kernel-buffered withheld: "), "{stdout}");
    assert_eq!(run.json["config"]["not_comparable_engines"], serde_json::json!(["kernel-buffered"]));
    assert_eq!(run.json["config"]["targets_judged"], false);
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch("allow-unfair");
    let mut unfair = args.to_vec();
    unfair.push("--allow-unfair");
    let run = common::run_bench(&dir, &unfair);
    let stdout = &run.stdout;
    assert!(!stdout.contains("not comparable") && !stdout.contains("withheld"), "{stdout}");
    let target = "| pwrite-1k-2m-file: wbcache µs/call ≤ kernel-buffered/20 |";
    let line = stdout.lines().find(|l| l.starts_with(target)).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.ends_with("| run with --repeat 3 to judge |"), "{line}");
    assert!(stdout.contains("run with --repeat 3 to judge them"), "{stdout}");
    assert!(run.json["config"]["not_comparable_engines"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch("repeat-3");
    unfair.extend(["--repeat", "3"]);
    let run = common::run_bench(&dir, &unfair);
    let line = run.stdout.lines().find(|l| l.starts_with(target)).unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(line.ends_with("| met |") || line.ends_with("| NOT met |"), "{line}");
    assert_eq!(run.json["config"]["targets_judged"], true);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The memory cgroups of run `pid` (a child of this process): under the
/// cgroup v2 root, or under this process's own v1 memory cgroup.
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let own_v1 = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|t| {
        t.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.trim_start_matches('/').to_string()))
    });
    let bases =
        [PathBuf::from("/sys/fs/cgroup"), PathBuf::from("/sys/fs/cgroup/memory").join(own_v1.unwrap_or_default())];
    let prefix = format!("wbcache-bench-{pid}-");
    bases
        .iter()
        .filter_map(|b| std::fs::read_dir(b).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// A run killed with SIGKILL (no chance to clean up) leaves its directory
/// and, mid kernel measurement, its memory cgroup; the next run removes
/// both and says so in one note.
#[test]
fn what_a_killed_run_leaves_the_next_one_removes() {
    let dir = scratch("killed-run");
    let mut child = wbcache()
        .args(["bench", "-w", "files-32", "-e", "kernel-buffered", "--memory", "32M", "--runtime", "60", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wbcache");
    let pid = child.id();
    let started = Instant::now();
    while entries(&dir).is_empty() || started.elapsed() < Duration::from_secs(3) {
        assert!(started.elapsed() < Duration::from_secs(60), "the run never created its directory");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = std::fs::canonicalize(dir.join(format!("wbcache-bench-{pid}"))).expect("SIGKILL leaves the directory");
    // Its worker dies with it (the parent-death signal): wait until its
    // cgroup, if it has one, is empty.
    let cgroups = cgroups_of(pid);
    let waited = Instant::now();
    while cgroups.iter().any(|c| std::fs::read_to_string(c.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())) {
        assert!(waited.elapsed() < Duration::from_secs(30), "the worker outlived its run");
        std::thread::sleep(Duration::from_millis(50));
    }

    let out = wbcache()
        .args(["bench", "-w", "pwrite-1k-4k-file", "-e", "wbcache", "--quick", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run wbcache");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let removed: Vec<&str> = stderr.lines().filter(|l| l.contains("left behind")).collect();
    assert_eq!(removed.len(), 1, "one note: {stderr}");
    assert!(removed[0].starts_with("note: removed what runs killed before their end left behind: "), "{stderr}");
    assert!(removed[0].contains(&format!("1 temporary directory ({})", left.display())), "{stderr}");
    assert!(!left.exists(), "{} is still there", left.display());
    // (A run of another test at the same time may have removed them first.)
    for c in &cgroups {
        assert!(!c.exists(), "{} is still there", c.display());
    }
    assert!(entries(&dir).is_empty(), "left behind: {:?}", entries(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}
