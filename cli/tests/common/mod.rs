//! What the bench's end-to-end tests share: a scratch directory, and one
//! run of `wbcache bench` that must exit 0 with JSON.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wbcache-cli-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What one bench run printed and wrote.
#[allow(dead_code)] // each test binary reads the parts it checks
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
    let out = Command::new(env!("CARGO_BIN_EXE_wbcache"))
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
#[allow(dead_code)] // not every test binary lists
pub fn bench_list() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wbcache")).args(["bench", "--list"]).output().expect("run wbcache");
    assert_eq!(out.status.code(), Some(0), "bench --list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts the run removed its scratch directory, then removes `dir`.
#[allow(dead_code)]
pub fn finish(run: &BenchRun, dir: &Path) {
    assert!(std::fs::read_dir(&run.work).unwrap().next().is_none(), "the scratch directory is removed");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Asserts that the run's rows are exactly `engines` × `variants`, each
/// once (in any order). Not every test binary that includes this module
/// calls it.
#[allow(dead_code)]
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
