//! What the bench's end-to-end tests share: the built `wbcache` binary, a
//! scratch directory, one run of `wbcache bench` that must exit 0 with
//! JSON, and the checks of its rows and its clean-up. Each test module
//! uses the parts it checks.

// Not every part is used by the tests of today.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const MIB: u64 = 1 << 20;

/// The `wbcache` binary this package built.
pub fn wbcache() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wbcache"))
}

/// A fresh, empty directory for one test (the bench's `--dir`, or where
/// its outputs go), under /var/tmp where there is one: the bench refuses a
/// memory file system (a tmpfs /tmp) as `--dir`.
pub fn scratch(name: &str) -> PathBuf {
    let base = Some(PathBuf::from("/var/tmp")).filter(|d| d.is_dir()).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("wbcache-cli-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What one bench run printed and wrote.
pub struct BenchRun {
    pub stdout: String,
    pub stderr: String,
    pub json: serde_json::Value,
    /// The `--dir` it ran in (empty afterwards if it cleaned up).
    pub work: PathBuf,
}

/// Runs `wbcache bench <args> --json <dir>/out.json --dir <dir>/work`,
/// asserts exit 0, and reads the JSON.
pub fn run_bench(dir: &Path, args: &[&str]) -> BenchRun {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let json_path = dir.join("out.json");
    let out = wbcache()
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json_path)
        .arg("--dir")
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .expect("run wbcache");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    BenchRun { stdout, stderr, json, work }
}

/// What `wbcache bench --list` prints.
pub fn bench_list() -> String {
    let out = wbcache().args(["bench", "--list"]).output().expect("run wbcache");
    assert_eq!(out.status.code(), Some(0), "bench --list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names of the entries of `dir`.
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

/// Asserts the run removed its scratch directory, then removes `dir`.
pub fn finish(run: &BenchRun, dir: &Path) {
    assert!(std::fs::read_dir(&run.work).unwrap().next().is_none(), "the scratch directory is removed");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Asserts that the run's rows are exactly `engines` × `variants`, each
/// once (in any order).
pub fn assert_rows(json: &serde_json::Value, engines: &[&str], variants: &[&str], what: &str) {
    let mut rows: Vec<(String, String)> = json["results"]
        .as_array()
        .expect("a results array")
        .iter()
        .map(|r| (r["engine"].as_str().unwrap().to_string(), r["variant"].as_str().unwrap().to_string()))
        .collect();
    rows.sort();
    let mut expected: Vec<(String, String)> =
        engines.iter().flat_map(|e| variants.iter().map(|v| (e.to_string(), v.to_string()))).collect();
    expected.sort();
    assert_eq!(rows, expected, "{what}");
}

/// Whether this is a CI run (`CI=true`): what a test would skip, it fails.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The preload library the bench's wbcache rows need, the newest of: the
/// one `cargo test` just built (`deps/`), one beside the binary (a `cargo
/// build` of the same profile) and the release build's; `None` (said, and
/// a failure under CI) without. The newest, because `cargo test` does not
/// refresh the copy beside the binary, which can be far older.
pub fn preload_library() -> Option<PathBuf> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wbcache"));
    let deps = bin.parent()?.join("deps/libwbcache_preload.so");
    let beside = bin.with_file_name("libwbcache_preload.so");
    let release = bin.parent()?.parent()?.join("release/libwbcache_preload.so");
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let found = [deps, beside, release].into_iter().filter(|p| p.is_file()).max_by_key(modified);
    if found.is_none() {
        assert!(!in_ci(), "libwbcache_preload.so is not built (cargo build -p wbcache-preload)");
        eprintln!("wbcache rows left out: libwbcache_preload.so is not built (cargo build -p wbcache-preload)");
    }
    found
}

/// Whether a test that runs Python 3 under the preload library can run
/// (both are required under CI: there a missing one fails the test).
pub fn python_and_preload_ready() -> bool {
    let python = Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|s| s.success());
    if !python {
        assert!(!in_ci(), "python3 is not installed (CI=true requires it)");
        eprintln!("skipped: python3 is not installed");
        return false;
    }
    preload_library().is_some()
}
