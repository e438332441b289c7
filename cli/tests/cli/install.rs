//! `wbcache install`: staged under a temporary DESTDIR, the installed
//! library, header and pkg-config files build a C program with `pkg-config
//! --cflags --libs wbcache`, which runs against the installed library (it
//! asks for `wbc_version()` and opens a cache).
//!
//! The libraries come from the capi/lib crate, which `cargo test` does not
//! link: the test builds it (`cargo build -p wbcache-clib`, the same target
//! directory and profile) and installs with `--from` that directory.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{scratch, wbcache};

/// `target/<profile>`, two levels above the test executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("the test runs from target/<profile>/deps").to_path_buf()
}

/// Runs `cmd`; fails the test with its outputs unless it exits 0.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}

/// The directory holding this build's `libwbcache.so` and `libwbcache.a`.
fn built_libraries() -> PathBuf {
    let dir = profile_dir();
    let profile = dir.file_name().and_then(|n| n.to_str()).expect("profile directory name").to_string();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ has a parent");
    cmd.current_dir(workspace).env("CARGO_TARGET_DIR", dir.parent().unwrap()).args(["build", "-p", "wbcache-clib"]);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    run(&mut cmd, "building the C library");
    dir
}

const PROGRAM: &str = r#"#include <stdio.h>
#include <string.h>
#include <wbcache.h>

int main(void) {
    wbc_cache *c = NULL;
    int rc = wbc_cache_open("capacity=16M", &c);
    if (rc != 0) {
        fprintf(stderr, "wbc_cache_open: %d\n", rc);
        return 1;
    }
    printf("version %s\n", wbc_version());
    return wbc_cache_close(c) == 0 ? 0 : 1;
}
"#;

#[test]
fn installed_library_builds_and_runs_a_c_program_with_pkg_config() {
    if Command::new("pkg-config").arg("--version").output().is_err() {
        eprintln!("pkg-config not installed: the installed files are not checked");
        return;
    }
    let from = built_libraries();
    let work = scratch("install");
    let destdir = work.join("stage");
    let prefix = "/opt/wbcache-test";
    let out = run(
        wbcache().env("DESTDIR", &destdir).args(["install", "--prefix", prefix, "--from"]).arg(&from),
        "wbcache install",
    );
    let root = destdir.join(prefix.trim_start_matches('/'));
    let lib = root.join("lib");
    let real = format!("libwbcache.so.{}", env!("CARGO_PKG_VERSION"));
    assert!(out.contains(&lib.join(&real).display().to_string()), "{out}");
    assert_eq!(std::fs::read_link(lib.join("libwbcache.so.0")).unwrap(), Path::new(&real));
    assert_eq!(std::fs::read_link(lib.join("libwbcache.so")).unwrap(), Path::new("libwbcache.so.0"));
    assert!(lib.join("libwbcache.a").is_file() && root.join("include/wbcache.h").is_file());
    let pc = std::fs::read_to_string(lib.join("pkgconfig/wbcache.pc")).unwrap();
    assert!(pc.starts_with(&format!("prefix={prefix}\n")), "the .pc names the prefix, not DESTDIR:\n{pc}");
    assert!(lib.join("pkgconfig/wbcache-static.pc").is_file());

    // pkg-config reads the staged files as a staged tree's: their paths
    // with DESTDIR in front (PKG_CONFIG_SYSROOT_DIR).
    let flags = run(
        Command::new("pkg-config")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .env("PKG_CONFIG_SYSROOT_DIR", &destdir)
            .args(["--cflags", "--libs", "wbcache"]),
        "pkg-config",
    );
    let source = work.join("version.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let exe = work.join("version");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    run(
        Command::new(cc).args(["-Wall", "-Werror"]).arg(&source).args(flags.split_whitespace()).arg("-o").arg(&exe),
        "compiling against the installed library",
    );
    let out = run(Command::new(&exe).env("LD_LIBRARY_PATH", &lib), "the program");
    assert_eq!(out.trim_end(), format!("version {}", env!("CARGO_PKG_VERSION")));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_relative_prefix_is_refused() {
    let out = wbcache().args(["install", "--prefix", "relative/dir"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not an absolute path"), "{stderr}");
}
