//! A Rust program that depends on the wbcache crate gets the crate only:
//! neither C library (`libwbcache.a`, `libwbcache.so`) is built for it, and
//! no build script writes pkg-config files or a `libwbcache.so.0` link into
//! its target directory. The C library is the capi/lib crate's
//! (`wbcache-clib`), which such a program does not depend on.
//!
//! The consumer is a crate made in a temporary directory, depending on this
//! one by path and built with `cargo build --offline` (the dependencies
//! come from cargo's local registry cache, pinned by the workspace's
//! `Cargo.lock`) into a target directory of its own, without debug info to
//! keep the build short.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::programs::{manifest_dir, run, TempDir};

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// What the C library's build leaves, by file name: the libraries, the
/// SONAME link and the pkg-config files.
fn is_c_library_file(name: &str) -> bool {
    let libwbcache = name.starts_with("libwbcache.") || name.starts_with("libwbcache-");
    let library = libwbcache && (name.ends_with(".a") || name.contains(".so"));
    library || name.ends_with(".pc")
}

#[test]
fn a_rust_consumer_builds_no_c_library() {
    let work = TempDir::new("consumer");
    let root = &work.0;
    std::fs::create_dir_all(root.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"wbcache-consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nwbcache = {{ path = {:?} }}\n\n[workspace]\n",
        manifest_dir().display().to_string()
    );
    std::fs::write(root.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(
        root.join("src/main.rs"),
        "fn main() {\n    let _ = wbcache::Config::from_options(\"capacity=1M\");\n}\n",
    )
    .unwrap();
    std::fs::copy(manifest_dir().join("Cargo.lock"), root.join("Cargo.lock")).unwrap();

    let target = root.join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(
        Command::new(cargo)
            .current_dir(root)
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .env("CARGO_INCREMENTAL", "0")
            .env_remove("RUSTFLAGS")
            .args(["build", "--offline", "--quiet"]),
        "building a crate that depends on wbcache",
    );
    let built = files_under(&target);
    assert!(
        built.iter().any(|p| p.file_name().is_some_and(|n| n == "wbcache-consumer")),
        "the consumer's program is not in {}",
        target.display()
    );
    let c_files: Vec<&PathBuf> =
        built.iter().filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(is_c_library_file)).collect();
    assert!(c_files.is_empty(), "the C library's files in a Rust consumer's target directory: {c_files:?}");
}

#[test]
fn the_check_knows_the_c_library_files() {
    for name in ["libwbcache.a", "libwbcache.so", "libwbcache.so.0", "wbcache.pc", "wbcache-static.pc"] {
        assert!(is_c_library_file(name), "{name}");
    }
    for name in ["libwbcache-0123abcd.rlib", "libwbcache-0123abcd.rmeta", "wbcache-consumer", "libio_uring-1.rlib"] {
        assert!(!is_c_library_file(name), "{name}");
    }
}
