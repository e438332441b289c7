//! Helpers shared by the integration tests: a seeded generator and the
//! data patterns made from it, a whole-file read, a watchdog for tests
//! that could hang, polling, and byte comparisons that say where two
//! buffers differ; [`programs`] builds and runs C programs and examples.
// Each test crate uses a different subset.
#![allow(dead_code)]

pub mod loopdev;
pub mod programs;
mod rng;
pub mod source;

pub use rng::Rng;

use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `body` on its own thread and fails if it does not finish in time
/// (an engine thread that panicked can leave writeback waiters hanging).
pub fn with_timeout(timeout: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(timeout) {
        Ok(()) => handle.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {timeout:?} (hang)"),
    }
}

/// Polls `cond` until it holds or `timeout` passes; returns its last value.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// Asserts equal bytes, naming the first difference.
#[track_caller]
pub fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let detail = match got.iter().zip(want).position(|(a, b)| a != b) {
            Some(i) => format!("first difference at byte {i}: got {:#04x}, want {:#04x}", got[i], want[i]),
            None => String::new(),
        };
        panic!("{what}: got {} bytes, want {} bytes; {detail}", got.len(), want.len());
    }
}

/// The first difference of two byte strings, for messages that do not dump
/// megabytes.
pub fn first_diff(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => format!("first difference at byte {i}: got {:#04x}, want {:#04x}", got[i], want[i]),
        None if got.len() != want.len() => format!("lengths differ: got {}, want {}", got.len(), want.len()),
        None => "equal".into(),
    }
}

/// `data` cut at the ascending offsets `cuts` (a vectored I/O's buffers).
pub fn split_at_cuts_mut<'a>(data: &'a mut [u8], cuts: &[usize]) -> Vec<&'a mut [u8]> {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let (mut rest, mut at) = (data, 0);
    for &cut in cuts {
        let (head, tail) = rest.split_at_mut(cut - at);
        pieces.push(head);
        rest = tail;
        at = cut;
    }
    pieces.push(rest);
    pieces
}

/// `data` cut at the ascending offsets `cuts`: `cuts.len() + 1` slices.
pub fn split_at_cuts<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let (mut rest, mut at) = (data, 0);
    for &cut in cuts {
        let (head, tail) = rest.split_at(cut - at);
        pieces.push(head);
        rest = tail;
        at = cut;
    }
    pieces.push(rest);
    pieces
}

/// `len` bytes of seeded data: each seed its own pattern, the same on
/// every run.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// The whole of `file`, read in one call from offset 0 into a buffer a
/// block longer than the file: the read must stop at the end.
pub fn read_all(file: &wbcache::File) -> Vec<u8> {
    let len = file.len().unwrap() as usize;
    let mut buf = vec![0u8; len + 4096];
    let n = file.read_at(&mut buf, 0).unwrap();
    assert_eq!(n, len, "a read from 0 returns the file's {len} bytes");
    buf.truncate(n);
    buf
}

/// Where `st`'s figures of bytes written back disagree, if they do: each
/// breakdown of `written_bytes_total` (by class, by reason) must add up to
/// it, the writeback workers' shares must not exceed it, and it counts
/// whole 4 KiB blocks. Take `st` while no writeback completes (after a
/// sync, with nothing left dirty or under writeback).
pub fn written_bytes_disagree(st: &wbcache::Stats) -> Option<String> {
    let total = st.written_bytes_total;
    let by_class: u64 = st.written_bytes_by_class.iter().sum();
    let by_reason: u64 = st.written_bytes_by_reason.iter().sum();
    let by_workers: u64 = st.writeback_workers.iter().map(|w| w.written_bytes).sum();
    if by_class == total && by_reason == total && by_workers <= total && total % 4096 == 0 {
        return None;
    }
    Some(format!(
        "written_bytes_total {total}, by class {:?} (sum {by_class}), by reason {:?} (sum {by_reason}), \
         by the writeback workers {by_workers}",
        st.written_bytes_by_class, st.written_bytes_by_reason
    ))
}

/// How many guardian processes (`wbc-guardian`, see `wbcache run`'s docs)
/// guard caches of process `owner` now (their `WBCACHE_GUARDIAN` names it).
pub fn guardians_of(owner: libc::pid_t) -> usize {
    let prefix = format!("WBCACHE_GUARDIAN={owner},");
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|entry| {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            comm.trim() == "wbc-guardian"
                && std::fs::read(entry.path().join("environ"))
                    .unwrap_or_default()
                    .split(|&b| b == 0)
                    .any(|kv| kv.starts_with(prefix.as_bytes()))
        })
        .count()
}

/// Waits (at most two minutes) until no guardian of `owner` is left: a
/// killed owner's data is on its files once its guardian is gone.
pub fn wait_for_guardians_of(owner: libc::pid_t) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while guardians_of(owner) > 0 {
        assert!(Instant::now() < deadline, "the guardian of {owner} still runs after two minutes");
        std::thread::sleep(Duration::from_millis(10));
    }
}
