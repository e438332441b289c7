//! `wbcache bench` driven as a user drives it, with bad input: each case
//! must exit 2 with one line on stderr, print nothing on stdout, and leave
//! no scratch directory behind; SIGINT and SIGTERM mid-run must stop the
//! workers, remove the scratch directory and exit 130 and 143.

use crate::common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{entries, scratch, wbcache};

fn run(args: &[&str]) -> Output {
    wbcache().arg("bench").args(args).stdin(Stdio::null()).output().expect("run wbcache")
}

/// Asserts a usage error: exit 2, one line naming `needle`, nothing on
/// stdout, and no `wbcache-bench-<pid>` directory left under /var/tmp.
fn assert_usage_error(args: &[&str], needle: &str) {
    let child = wbcache()
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wbcache");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(out.status.code(), Some(2), "{args:?}: exit status {:?}, stderr {stderr}", out.status);
    assert_eq!(lines.len(), 1, "{args:?}: one line expected, got {stderr:?}");
    assert!(lines[0].contains(needle), "{args:?}: {:?} does not mention {needle:?}", lines[0]);
    assert!(out.stdout.is_empty(), "{args:?}: printed {:?}", String::from_utf8_lossy(&out.stdout));
    for parent in ["/var/tmp", "/tmp"] {
        let left = Path::new(parent).join(format!("wbcache-bench-{pid}"));
        assert!(!left.exists(), "{args:?}: left {} behind", left.display());
    }
}

#[test]
fn bad_numbers_are_refused_before_anything_runs() {
    let w = "pwrite-1k-4k-file";
    for t in ["-1", "1e30", "nan", "0", "inf"] {
        assert_usage_error(&["-w", w, &format!("--timeout={t}")], "--timeout");
    }
    for r in ["-5", "nan", "0", "1e30", "5 parsecs"] {
        assert_usage_error(&["-w", w, &format!("--runtime={r}")], r.split(' ').next().unwrap());
    }
    assert_usage_error(&["-w", w, "--memory", "1M"], "--memory");
    assert_usage_error(&["-w", w, "--memory", "lots"], "--memory");
    assert_usage_error(&["-w", w, "--size", "1K"], "--size");
    assert_usage_error(&["-w", w, "--repeat", "0"], "--repeat");
    assert_usage_error(&["-w", w, "--repeat", "-1"], "-1");
}

#[test]
fn bad_selections_and_options_are_refused() {
    assert_usage_error(&["-w", ""], "no workload selected");
    assert_usage_error(&["-w", "nope"], "unknown workload 'nope'");
    assert_usage_error(&["-e", "nope"], "unknown engine 'nope'");
    assert_usage_error(&["--set", "bogus=1"], "bogus");
    assert_usage_error(&["--set", "dirty_limit"], "KEY=VALUE");
    assert_usage_error(&["--set", "io=threads", "--set", "io=uring"], "io");
    assert_usage_error(&["--device", "/dev/null"], "--yes-destroy");
    assert_usage_error(&["--bogus"], "--bogus");
    assert_usage_error(&["--rw", "read"], "--custom");
    assert_usage_error(&["--custom", "-w", "seq-write"], "--custom");
    assert_usage_error(&["-w", "parallel-writeback/both"], "unknown workload 'parallel-writeback/both'");
    assert_usage_error(&["-w", "parallel-writeback/files/single-2"], "parallel-writeback/shared/rotor-2");
    assert_usage_error(&["-w", "parallel-writeback", "--writeback-workers", "0"], "--writeback-workers 0");
    assert_usage_error(&["-w", "seq-write", "--writeback-workers", "2"], "--writeback-workers");
    assert_usage_error(&["-w", "parallel-writeback", "-e", "kernel-dontcache"], "runs on kernel-buffered");
    assert_usage_error(&["-w", "hot-set/both"], "unknown workload 'hot-set/both'");
}

#[test]
fn bad_custom_jobs_are_refused() {
    assert_usage_error(&["--custom", "--rw=readwrite"], "--rw readwrite");
    assert_usage_error(&["--custom", "--numjobs=0"], "--numjobs");
    assert_usage_error(&["--custom", "--numjobs=65"], "--numjobs");
    assert_usage_error(&["--custom", "--nrfiles=0"], "--nrfiles");
    assert_usage_error(&["--custom", "--rw=randrw", "--rwmixread=101"], "--rwmixread");
    assert_usage_error(&["--custom", "--rw=randwrite", "--rwmixread=50"], "randrw");
    assert_usage_error(&["--custom", "--rw=read", "--fsync=8"], "--fsync");
    assert_usage_error(&["--custom", "--bs=0"], "--bs");
    assert_usage_error(&["--custom", "--bs=1k", "-e", "kernel-direct"], "kernel-direct");
    assert_usage_error(&["--custom", "--size=4M", "--nrfiles=1024", "--bs=8k"], "--nrfiles");
}

#[test]
fn bad_fio_job_files_are_refused() {
    let dir = scratch("fio-jobfile-inputs");
    let missing = dir.join("missing.fio");
    assert_usage_error(&["--fio", &missing.to_string_lossy()], "--fio");
    assert_usage_error(&["--fio", &dir.to_string_lossy()], "not a file");
    let file = dir.join("jobs.fio");
    std::fs::write(&file, "[j]\nrw=read\n").unwrap();
    assert_usage_error(&["--fio", &file.to_string_lossy(), "-w", "seq-write"], "--fio");
    assert_usage_error(&["--fio", &file.to_string_lossy(), "--custom"], "--fio");
    assert_usage_error(&["--fio", &file.to_string_lossy(), "-e", "kernel-dontcache"], "runs on kernel-buffered");
    assert_usage_error(&["-w", "fio/seq-write-1m/both"], "unknown workload 'fio/seq-write-1m/both'");
    assert_usage_error(&["-w", "rocksdb", "-e", "wbcache-dontcache"], "rocksdb runs on kernel-buffered");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_output_paths_are_refused_first() {
    let dir = scratch("outputs");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let missing = dir.join("missing");
    let gone = format!("directory {} does not exist", missing.display());
    // One rule for the three: the directory a path goes into must exist.
    assert_usage_error(&["--json", &missing.join("out.json").to_string_lossy()], &gone);
    assert_usage_error(&["--svg", &missing.join("charts").to_string_lossy()], &gone);
    assert_usage_error(&["--dir", &missing.to_string_lossy()], &gone);
    assert_usage_error(&["--json", &dir.to_string_lossy()], "directory");
    assert_usage_error(&["--svg", &file.to_string_lossy()], "not a directory");
    assert_usage_error(&["--dir", &file.to_string_lossy()], &format!("{} is not a directory", file.display()));
    assert_usage_error(&["--dir", "/etc/passwd"], "--dir /etc/passwd: /etc/passwd is not a directory");
    // A refused run creates no --svg directory, even a valid one.
    let charts = dir.join("charts");
    assert_usage_error(&["--svg", &charts.to_string_lossy(), "--dir", &missing.to_string_lossy()], &gone);
    assert!(!missing.exists() && !charts.exists(), "nothing was created for a refused path");
    assert_eq!(entries(&dir), vec!["a-file".to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A memory file system as `--dir` is refused up front, with the reason:
/// its files would be memory, counted against the kernel engines' limit.
#[test]
fn a_memory_file_system_is_refused_as_dir() {
    let shm = Path::new("/dev/shm");
    let on_tmpfs = std::process::Command::new("stat").args(["-f", "-c", "%T", "/dev/shm"]).output();
    if !shm.is_dir() || !on_tmpfs.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "tmpfs") {
        eprintln!("skipped: /dev/shm is not a tmpfs here");
        return;
    }
    assert_usage_error(&["--dir", "/dev/shm"], "--dir /dev/shm: a memory file system (tmpfs)");
    assert_usage_error(&["--dir", "/dev/shm", "-w", "seq-write"], "no disk to write back to");
}

/// Starts a run that would take a minute, waits until its scratch
/// directory exists and a measurement is under way, sends `signal`, and
/// checks the exit status and that the directory is gone.
fn interrupt_mid_run(signal: libc::c_int, expected_status: i32) {
    let dir = scratch(&format!("signal-{signal}"));
    let child = wbcache()
        .args(["bench", "-w", "files-32", "-e", "wbcache", "--memory", "32M", "--runtime", "60", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wbcache");
    let started = Instant::now();
    while entries(&dir).is_empty() || started.elapsed() < Duration::from_secs(2) {
        assert!(started.elapsed() < Duration::from_secs(60), "the run never created its scratch directory");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    let waited = Instant::now();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(waited.elapsed() < Duration::from_secs(30), "took {:?} to stop", waited.elapsed());
    assert_eq!(out.status.code(), Some(expected_status), "stderr: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(entries(&dir).is_empty(), "left behind: {:?}", entries(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigint_stops_the_run_and_cleans_up() {
    interrupt_mid_run(libc::SIGINT, 130);
}

#[test]
fn sigterm_stops_the_run_and_cleans_up() {
    interrupt_mid_run(libc::SIGTERM, 143);
}

#[test]
fn list_and_help_succeed() {
    let out = run(&["--list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("seq-write") && text.contains("models:"), "{text}");
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout).to_lowercase();
    for insider in ["seed", "slot", "issue", "reproduces"] {
        assert!(!help.contains(insider), "--help says {insider:?}");
    }
    let list = text.to_lowercase();
    for insider in ["seed", "slot", "issue", "reproduces", "design:"] {
        assert!(!list.contains(insider), "--list says {insider:?}");
    }
}

/// `bench --help` is short: the options and one line per workload and
/// engine; what each workload does and models is behind `--list` (also
/// `--help-workloads`), with the options' details.
#[test]
fn help_is_short_and_list_has_the_rest() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.lines().count() <= 80, "{} lines:\n{help}", help.lines().count());
    for name in ["seq-write", "fsync-under-load", "small-overwrite", "rocksdb", "kernel-direct", "wbcache-preload"] {
        assert_eq!(help.lines().filter(|l| l.starts_with(&format!("  {name} "))).count(), 1, "{name}:\n{help}");
    }
    assert!(!help.contains("models:") && help.contains("--list"), "{help}");
    assert!(help.contains("--allow-unfair"), "{help}");
    let list = run(&["--list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("Options in detail:") && text.contains("drop_caches"), "{text}");
    let alias = run(&["--help-workloads"]);
    assert_eq!(alias.status.code(), Some(0));
    assert_eq!(alias.stdout, list.stdout, "--help-workloads is --list");
}

/// Every option scripts use is still accepted (each set checked with
/// --list, which then prints the catalog and exits 0).
#[test]
fn every_option_is_still_accepted() {
    let catalog = [
        "-w",
        "seq-write",
        "-e",
        "wbcache",
        "--memory",
        "64M",
        "--size",
        "64M",
        "--runtime",
        "1",
        "--set",
        "io=threads",
        "--dir",
        "/var/tmp",
        "--json",
        "/nonexistent/x.json",
        "--svg",
        "/nonexistent/x",
        "--quick",
        "--timeout",
        "5",
        "--repeat",
        "3",
        "--writeback-workers",
        "1",
        "--no-cgroup",
        "--no-drop-caches",
        "--allow-unfair",
        "-v",
    ];
    let custom = [
        "--custom",
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--numjobs",
        "2",
        "--nrfiles",
        "2",
        "--rwmixread",
        "70",
        "--fsync",
        "8",
        "--end_fsync",
        "--dontcache",
    ];
    let others: [&[&str]; 3] =
        [&["--device", "/dev/null", "--yes-destroy"], &["--fio", "/dev/null"], &["--end-fsync", "--custom"]];
    for args in [&catalog[..], &custom[..]].into_iter().chain(others) {
        let mut all = args.to_vec();
        all.push("--list");
        let out = run(&all);
        assert_eq!(out.status.code(), Some(0), "{all:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A bench run that would take a minute in `dir`, its tables piped to us.
fn long_bench_piped(dir: &Path) -> std::process::Child {
    wbcache()
        .args(["bench", "-w", "files-32", "-e", "wbcache", "--memory", "32M", "--runtime", "60", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wbcache")
}

/// `child` stops soon, as if interrupted (141, SIGPIPE's status), and
/// leaves `dir` empty; then `dir` goes.
fn stops_as_interrupted_and_cleans_up(mut child: std::process::Child, dir: &Path) {
    let started = Instant::now();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?} to stop", started.elapsed());
    assert_eq!(status.code(), Some(141));
    assert!(entries(dir).is_empty(), "left behind: {:?}", entries(dir));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `bench | head`: once nobody reads the tables, the run stops as if
/// interrupted (exit 141, SIGPIPE's status), and cleans up.
#[test]
fn a_closed_output_stops_the_run_and_cleans_up() {
    let dir = scratch("closed-output");
    let mut child = long_bench_piped(&dir);
    drop(child.stdout.take());
    stops_as_interrupted_and_cleans_up(child, &dir);
}

/// Output closed mid-measurement, after the header was read: the run
/// notices without printing (a measurement can take minutes), stops with
/// 141 and cleans up.
#[test]
fn an_output_closed_mid_measurement_stops_the_run() {
    use std::io::{BufRead, BufReader};
    let dir = scratch("closed-mid-run");
    let mut child = long_bench_piped(&dir);
    let mut header = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut header).unwrap();
    assert!(header.starts_with("## wbcache bench"), "{header:?}");
    // The reader is dropped here, with the rest of the header unread.
    std::thread::sleep(Duration::from_secs(1));
    stops_as_interrupted_and_cleans_up(child, &dir);
}

/// `wbcache run` checks everything before the program starts: a missing
/// directory (of `--paths` or of the `--stats` file), a file given as a directory, an unknown or bad option and a
/// missing program are each one line and exit 2, the program never run
/// (it would create a file); a program that cannot be started is 127.
#[test]
fn run_refuses_bad_input_before_the_program_starts() {
    let dir = scratch("run-bad");
    let marker = dir.join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    let file = dir.join("plain");
    std::fs::write(&file, b"x").unwrap();
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--paths", "/nonexistent-wbcache-dir"], "nonexistent-wbcache-dir"),
        (vec!["--stats", "/nonexistent-wbcache-dir/stats.json"], "no directory /nonexistent-wbcache-dir"),
        (vec!["--paths", file.to_str().unwrap()], "not a directory"),
        (vec!["--set", "bogus=1"], "unknown option 'bogus'"),
        (vec!["--set", "capacity=abc"], "capacity"),
    ];
    for (args, needle) in cases {
        let mut all = vec!["run"];
        all.extend(&args);
        all.extend(touch);
        // The library is found (its path given), so the other checks answer.
        let out = wbcache().args(&all).env("WBCACHE_PRELOAD", "/dev/null").stdin(Stdio::null()).output();
        let out = out.expect("run wbcache");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{all:?}: {stderr}");
        assert!(stderr.contains(needle), "{all:?}: {stderr:?} does not mention {needle:?}");
        assert!(!marker.exists(), "{all:?}: the program ran");
    }
    let out = wbcache().args(["run", "--paths", dir.to_str().unwrap()]).env("WBCACHE_PRELOAD", "/dev/null").output();
    let out = out.expect("run wbcache");
    assert_eq!(out.status.code(), Some(2), "no program: {}", String::from_utf8_lossy(&out.stderr));
    let out = wbcache()
        .args(["run", "--paths", dir.to_str().unwrap(), "--", "/nonexistent-wbcache-program"])
        .env("WBCACHE_PRELOAD", "/dev/null")
        .output()
        .expect("run wbcache");
    assert_eq!(out.status.code(), Some(127), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
