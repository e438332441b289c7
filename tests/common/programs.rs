//! Building and running programs outside the test crate: C programs
//! linked against `libwbcache.a`, and the examples.
//!
//! Finding what cargo built: the C library comes from the capi/lib crate,
//! which `cargo build` builds into `target/<profile>/` (`cargo test` builds
//! no library of it: nothing there links it), and `cargo test` builds the
//! examples into `target/<profile>/examples/`. A test uses the newest of
//! those that is newer than every source file, and otherwise runs `cargo
//! build` for the same profile first (as after a change to the sources, or
//! always with `WBCACHE_CAPI_FORCE_BUILD` set, to exercise that path).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::SystemTime;

/// The repository's root: the tests of the root crate and of `capi/`
/// share this module, so it is the first directory up from the crate's
/// that holds the C header.
pub fn manifest_dir() -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.ancestors().find(|dir| dir.join("include/wbcache.h").is_file());
    root.unwrap_or_else(|| panic!("no include/wbcache.h above {}", crate_dir.display())).to_path_buf()
}

/// `target/<profile>`: the test executable lives in `target/<profile>/deps`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test executable has a directory");
    assert_eq!(deps.file_name().and_then(|n| n.to_str()), Some("deps"), "unexpected test location {exe:?}");
    deps.parent().expect("deps has a parent").to_path_buf()
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The newest modification time of the library's sources and of `extra`
/// (files or directories, relative to the manifest directory).
fn newest_source(extra: &[&str]) -> SystemTime {
    fn walk(dir: &Path, newest: &mut SystemTime) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, newest);
            } else if let Some(t) = mtime(&path) {
                *newest = (*newest).max(t);
            }
        }
    }
    let root = manifest_dir();
    let mut newest = SystemTime::UNIX_EPOCH;
    walk(&root.join("src"), &mut newest);
    walk(&root.join("capi/src"), &mut newest);
    walk(&root.join("capi/lib/src"), &mut newest);
    let manifests = ["Cargo.toml", "Cargo.lock", "capi/Cargo.toml", "capi/lib/Cargo.toml", "capi/lib/build.rs"];
    for file in manifests.iter().chain(extra) {
        let path = root.join(file);
        if path.is_dir() {
            walk(&path, &mut newest);
        } else if let Some(t) = mtime(&path) {
            newest = newest.max(t);
        }
    }
    newest
}

/// The newest of `candidates` built after every source (and `extra`)
/// changed; otherwise runs `cargo <build_args>` for this test's profile and
/// returns `built`.
fn fresh_or_build(candidates: &[PathBuf], extra: &[&str], build_args: &[&str], built: PathBuf) -> PathBuf {
    let sources = newest_source(extra);
    let fresh = |p: &Path| mtime(p).filter(|t| *t >= sources).map(|t| (t, p.to_path_buf()));
    if std::env::var_os("WBCACHE_CAPI_FORCE_BUILD").is_none() {
        if let Some((_, path)) = candidates.iter().filter_map(|p| fresh(p)).max() {
            return path;
        }
    }
    let profile_dir = profile_dir();
    let profile = profile_dir.file_name().and_then(|n| n.to_str()).expect("profile directory name").to_string();
    let target_dir = profile_dir.parent().expect("target directory");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(manifest_dir()).env("CARGO_TARGET_DIR", target_dir).args(build_args);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed: {status}");
    assert!(built.exists(), "{} missing after {cmd:?}", built.display());
    built
}

/// A `libwbcache.a` built from the current sources.
pub fn static_library() -> PathBuf {
    let dir = profile_dir();
    let candidates = [dir.join("deps/libwbcache.a"), dir.join("libwbcache.a")];
    fresh_or_build(&candidates, &[], &["build", "-p", "wbcache-clib"], dir.join("libwbcache.a"))
}

/// A shared library of the workspace, `lib<name>.so` of cargo package
/// `package` (in `crate_dir`: its manifest and sources count), built from
/// the current sources: the one `cargo test` built beside the tests when
/// the package has an rlib, or else the one `cargo build` left.
pub fn shared_library(package: &str, name: &str, crate_dir: &str) -> PathBuf {
    let dir = profile_dir();
    let file = format!("lib{name}.so");
    let candidates = [dir.join("deps").join(&file), dir.join(&file)];
    fresh_or_build(&candidates, &[crate_dir], &["build", "-p", package], dir.join(&file))
}

/// The executable of `examples/<name>.rs`, built from the current sources.
pub fn example(name: &str) -> PathBuf {
    let exe = profile_dir().join("examples").join(name);
    let source = format!("examples/{name}.rs");
    fresh_or_build(std::slice::from_ref(&exe), &[&source], &["build", "--example", name], exe.clone())
}

/// A fresh, empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("wbcache-{tag}-{}-{unique}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn c_compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Runs `cmd` and returns its standard output; fails the test, with both
/// outputs, unless it exits 0.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}
