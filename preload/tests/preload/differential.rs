//! Differential test: a seeded random sequence of file calls
//! (`py/differential.py`: the open flags with `O_APPEND`, `O_TRUNC` and
//! `O_EXCL`; read, write, pread, pwrite, readv, writev, preadv(2),
//! pwritev(2) with their flags, at random offsets and sizes, past the end
//! too; lseek with every whence; ftruncate and truncate growing and
//! shrinking; fsync, fdatasync, sync_file_range; fallocate and
//! posix_fallocate; posix_fadvise and readahead; copy_file_range and
//! sendfile; dup and dup2; fstat and stat sizes; F_GETFL/F_SETFL; rename,
//! unlink; close and reopen) runs once under the preload on a managed
//! directory and once on a plain one. Every call's result (its return
//! value, a digest of the bytes it read, or its errno) must be the same in
//! both runs, and so must every file's final bytes, read by this process:
//! the cache must be indistinguishable from the kernel's page cache. Where
//! Linux leaves the answer to the file system (SEEK_DATA/SEEK_HOLE), the
//! driver records whether the answer is legal instead of the answer.
//!
//! Each seed makes 20,000 calls (five tests: 100,000 in all), with a
//! different cache configuration, down to a cache of 1 MiB with 64 KiB
//! folios that writes back and evicts all the time. Four seeds are fixed;
//! one comes from the clock (or `PRELOAD_DIFF_SEED`, to replay one). A
//! mismatch prints the seed, the first differing call and the calls
//! before it.

use crate::common;

use std::path::Path;

use common::{plain, preloaded, python, run, Scratch, TIMEOUT};

const DRIVER: &str = include_str!("../py/differential.py");
const CALLS: usize = 20_000;
const FILES: [&str; 3] = ["a", "b", "c"];

/// Runs the driver with `seed` on `dir`, preloaded with `options` when
/// given; its records.
fn drive(python: &Path, driver: &Path, seed: u64, dir: &Path, options: Option<&str>) -> Vec<String> {
    let records = dir.with_extension("jsonl");
    let mut cmd = match options {
        Some(options) => preloaded(python, &[dir], options),
        None => plain(python),
    };
    cmd.arg(driver).arg(seed.to_string()).arg(dir).arg(CALLS.to_string()).arg(&records);
    if options.is_some() {
        cmd.arg("--expect-cached");
    }
    let what = if options.is_some() { "preloaded" } else { "plain" };
    let out = run(cmd, TIMEOUT);
    assert!(out.status.success(), "seed {seed}: the {what} driver failed ({})\n{}", out.status, out.details());
    out.no_complaints(&[]);
    std::fs::read_to_string(&records).unwrap().lines().map(str::to_string).collect()
}

/// The first call whose records differ, with the calls before it.
fn first_difference(kernel: &[String], cached: &[String]) -> Option<String> {
    let at = kernel
        .iter()
        .zip(cached)
        .position(|(k, c)| k != c)
        .or_else(|| (kernel.len() != cached.len()).then_some(kernel.len().min(cached.len())))?;
    let before = kernel[at.saturating_sub(8)..at].join("\n  ");
    let none = String::from("(none)");
    Some(format!(
        "call {at} differs\n  ...\n  {before}\nkernel: {}\ncached: {}",
        kernel.get(at).unwrap_or(&none),
        cached.get(at).unwrap_or(&none)
    ))
}

/// One seed: both runs, then their records and files compared.
fn differential(seed: u64, options: &str) {
    let Some(python) = python() else { return };
    let scratch = Scratch::new(&format!("differential-{seed}"));
    let driver = scratch.script("differential.py", DRIVER);
    let (plain_dir, managed_dir) = (scratch.dir("kernel"), scratch.dir("cached"));
    let kernel = drive(&python, &driver, seed, &plain_dir, None);
    let cached = drive(&python, &driver, seed, &managed_dir, Some(options));
    let replay = format!("seed {seed} (PRELOAD_DIFF_SEED={seed} replays it), WBCACHE_OPTIONS={options}");
    if let Some(difference) = first_difference(&kernel, &cached) {
        panic!("{replay}: {difference}");
    }
    assert!(kernel.len() >= CALLS, "{replay}: only {} calls recorded", kernel.len());
    for name in FILES {
        let (k, c) = (std::fs::read(plain_dir.join(name)).ok(), std::fs::read(managed_dir.join(name)).ok());
        let at = |a: &[u8], b: &[u8]| a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
        match (&k, &c) {
            (Some(k), Some(c)) if k != c => {
                panic!("{replay}: file {name}: {} bytes vs {}, first difference at {}", k.len(), c.len(), at(k, c))
            }
            (k, c) if k.is_some() != c.is_some() => panic!("{replay}: file {name} exists in only one run"),
            _ => {}
        }
    }
}

#[test]
fn differential_default_cache() {
    differential(1, "capacity=64M");
}

#[test]
fn differential_small_cache() {
    differential(2, "capacity=12M,dirty_limit=4M");
}

#[test]
fn differential_tiny_folios_evicting() {
    differential(3, "capacity=1M,folio_max=64K,dirty_limit=256K");
}

#[test]
fn differential_expiring_threads_backend() {
    differential(4, "capacity=2M,folio_max=16K,readahead_max=64K,expire_ms=1,io=threads");
}

/// A new seed each run (printed; `PRELOAD_DIFF_SEED` replays one).
#[test]
fn differential_random_seed() {
    let seed = match std::env::var("PRELOAD_DIFF_SEED") {
        Ok(seed) => seed.parse().expect("PRELOAD_DIFF_SEED is a number"),
        Err(_) => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
                % 1_000_000_007
        }
    };
    println!("differential seed {seed}");
    differential(seed, "capacity=4M,folio_max=256K,dirty_limit=1M");
}
