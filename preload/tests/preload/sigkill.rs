//! SIGKILL: a preloaded program appends records and syncs them, printing
//! "acked N" after each sync (`py/appender.py`); the test kills its whole
//! process group with SIGKILL at a random point, then reads the file
//! itself (not preloaded): every acknowledged record must be there byte
//! for byte. An fsync that returned before the data reached the file, or
//! that wrote it somewhere else, loses an acknowledged record. The kill
//! points come from a seed (the clock's, or `PRELOAD_KILL_SEED`), printed
//! when the test fails.

use crate::common;

use std::time::Duration;

use common::{pattern, preloaded, python, Group, Scratch, OPTIONS, TIMEOUT};

const APPENDER: &str = include_str!("../py/appender.py");

/// Record `i` as the appender writes it.
fn record(i: u64) -> Vec<u8> {
    let n = 1 + i * 7919 % 6000;
    let mut out = format!("record {i:08} {n:06}\n").into_bytes();
    out.extend_from_slice(&pattern(n as usize, i));
    out.push(b'\n');
    out
}

/// A small deterministic generator for the kill points.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs the appender until it acknowledged `acks` batches, then (after
/// `delay`) kills its group; returns the last record acknowledged.
fn append_then_kill(
    python: &std::path::Path,
    scratch: &Scratch,
    file: &std::path::Path,
    acks: u64,
    delay: Duration,
) -> u64 {
    let script = scratch.script("appender.py", APPENDER);
    let mut cmd = preloaded(python, &[file.parent().unwrap()], OPTIONS);
    cmd.arg(script).arg(file);
    let mut group = Group::spawn(cmd);
    let lines = group.lines();
    let mut last = None;
    for _ in 0..acks {
        let line = lines.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("no acknowledgement ({e})"));
        last = Some(line);
    }
    std::thread::sleep(delay);
    group.kill();
    // What it printed before it died was acknowledged too.
    last = lines.iter().last().or(last);
    let out = group.wait(TIMEOUT);
    assert!(!out.status.success(), "the appender exited by itself\n{}", out.details());
    let last = last.expect("at least one acknowledgement");
    last.strip_prefix("acked ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("bad line {last:?}"))
}

#[test]
fn acknowledged_records_survive_sigkill() {
    let Some(python) = python() else { return };
    let seed = match std::env::var("PRELOAD_KILL_SEED") {
        Ok(seed) => seed.parse().expect("PRELOAD_KILL_SEED is a number"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1,
    };
    let mut state = seed;
    for round in 0..3 {
        let scratch = Scratch::new(&format!("sigkill-{round}"));
        let file = scratch.dir("managed").join("log");
        let (acks, delay) = (20 + next(&mut state) % 300, Duration::from_micros(next(&mut state) % 20_000));
        let last = append_then_kill(&python, &scratch, &file, acks, delay);
        let data = std::fs::read(&file).unwrap();
        let mut at = 0;
        for i in 0..=last {
            let expected = record(i);
            let got = data.get(at..at + expected.len());
            assert!(
                got == Some(&expected[..]),
                "PRELOAD_KILL_SEED={seed}, round {round}: record {i} of {last} acknowledged is not at byte {at} \
                 (the file has {} bytes; killed after {acks} acknowledgements and {delay:?})",
                data.len()
            );
            at += expected.len();
        }
    }
}
