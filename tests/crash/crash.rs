//! Real-process crash test: a child process writes records through wbcache
//! and fsyncs, announcing each successful fsync on stdout; the parent kills
//! it with SIGKILL at a random moment and checks that every record the child
//! announced as synced is in the backing file, byte for byte. Two shapes:
//! records of 1,000-71,000 bytes (most syncs write back more than 64 KiB,
//! O_DIRECT), and small records of 100-20,100 bytes, as a log or a WAL
//! appends them (each sync's append is at most about 60 KiB, written
//! through the store's buffered descriptor, and its end is unaligned).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wbcache::{Cache, Config, OpenOptions};

const CHILD_ENV: &str = "WBCACHE_CRASH_CHILD_FILE";
const CHILD_IO_ENV: &str = "WBCACHE_CRASH_CHILD_IO";
const CHILD_SMALL_ENV: &str = "WBCACHE_CRASH_CHILD_SMALL";

/// Record `i`'s length: unaligned and varying, so records straddle
/// blocks and folios.
fn record_len(i: u64, small: bool) -> u64 {
    if small {
        100 + (i * 7919 % 20_000)
    } else {
        1000 + (i * 7919 % 70_000)
    }
}

/// Record `i`: its offset, length and byte pattern.
fn record(i: u64, small: bool) -> (u64, Vec<u8>) {
    let len = record_len(i, small);
    let offset = (0..i).map(|j| record_len(j, small)).sum();
    let data = (0..len).map(|k| ((i * 31 + k * 7) % 251) as u8).collect();
    (offset, data)
}

/// The child: writes records forever, fsyncing every few and printing
/// `synced <n>` (records 0..n are durable) after each success.
#[test]
fn crash_child_process() {
    let Ok(path) = std::env::var(CHILD_ENV) else { return };
    let io = std::env::var(CHILD_IO_ENV).unwrap_or_else(|_| "uring".into());
    let small = std::env::var(CHILD_SMALL_ENV).is_ok();
    let cache = Cache::new(Config::from_options(&format!("capacity=64M,io={io}")).unwrap()).unwrap();
    let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    let mut i = 0u64;
    loop {
        let (off, data) = record(i, small);
        assert_eq!(file.write_at(&data, off).unwrap(), data.len());
        i += 1;
        if i % 3 == 0 {
            if i % 2 == 0 {
                file.sync_all().unwrap();
            } else {
                file.sync_data().unwrap();
            }
            println!("synced {i}");
        }
    }
}

fn check_backing_file(path: &Path, synced: u64, seed: u64, small: bool) {
    let content = std::fs::read(path).unwrap();
    for i in 0..synced {
        let (off, data) = record(i, small);
        let end = off as usize + data.len();
        assert!(content.len() >= end, "seed {seed}: file is {} bytes, record {i} ends at {end}", content.len());
        assert!(content[off as usize..end] == data[..], "seed {seed}: record {i} (of {synced} synced) differs");
    }
}

fn run_crash_round(io: &str, seed: u64, small: bool) {
    let dir = std::env::temp_dir().join(format!("wbcache-crash-{}-{seed}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("data");
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "crash::crash_child_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .env(CHILD_IO_ENV, io);
    if small {
        command.env(CHILD_SMALL_ENV, "1");
    }
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    // Kill after a seeded delay of 100..1100 ms of writing.
    let kill_after = Duration::from_millis(100 + seed % 1000);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("synced ") {
                let _ = tx.send(n.trim().parse::<u64>().unwrap());
            }
        }
    });
    let started = Instant::now();
    let mut synced = 0u64;
    while started.elapsed() < kill_after {
        if let Ok(n) = rx.recv_timeout(Duration::from_millis(5)) {
            synced = synced.max(n);
        }
    }
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child runs until killed");
    reader.join().unwrap();
    // Announcements that raced with the kill still describe completed fsyncs.
    while let Ok(n) = rx.try_recv() {
        synced = synced.max(n);
    }
    assert!(synced > 0, "seed {seed}: the child synced nothing before the kill ({io})");
    check_backing_file(&path, synced, seed, small);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `WBCACHE_CRASH_SEED`, or one from the clock; printed for a replay.
fn crash_seed() -> u64 {
    let base = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    let seed = std::env::var("WBCACHE_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(base);
    eprintln!("crash test seed {seed} (rerun with WBCACHE_CRASH_SEED={seed})");
    seed
}

#[test]
fn fsynced_records_survive_sigkill() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let seed = crash_seed();
    for (round, io) in ["uring", "threads", "uring"].iter().enumerate() {
        run_crash_round(io, seed.wrapping_add(round as u64 * 7777), false);
    }
}

/// Small synced appends (a log's, a WAL's): written back through the
/// store's buffered descriptor, they survive a SIGKILL as O_DIRECT
/// writes do.
#[test]
fn fsynced_small_appends_survive_sigkill() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let seed = crash_seed();
    for (round, io) in ["uring", "threads"].iter().enumerate() {
        run_crash_round(io, seed.wrapping_add(round as u64 * 7777), true);
    }
}
