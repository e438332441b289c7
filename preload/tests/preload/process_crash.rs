//! A crash of the process loses nothing `write()` acknowledged, as on the
//! kernel's page cache: a preloaded Python program writes without ever
//! syncing (`py/crasher.py`), with `expire_ms` so high that no periodic
//! writeback saves anything, and is killed with SIGKILL at a random
//! moment, alone or with its whole process group. Once its guardian has
//! finished, the test reads the file without the library: every
//! acknowledged record (append mode), or exactly the state after the
//! acknowledged steps plus any part of the one in progress (model mode,
//! random `pwrite`/`ftruncate` replayed here from the same seed). Kill
//! points come from a seed (the clock's, or `PROCESS_CRASH_SEED`),
//! printed when a round fails; each round prints its counts.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{guardians, plain, preloaded, privileged, python, run, wait_for_guardians_of, Group, Scratch, TIMEOUT};

const CRASHER: &str = include_str!("../py/crasher.py");

/// No writeback of its own before the kill: what survives is what the
/// guardian writes.
const OPTIONS: &str = "capacity=64M,dirty_limit=48M,dirty_background=40M,expire_ms=3600000";

fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn seed() -> u64 {
    match std::env::var("PROCESS_CRASH_SEED") {
        Ok(seed) => seed.parse().expect("PROCESS_CRASH_SEED is a number"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1,
    }
}

/// How a round kills the program.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// SIGKILL to the program alone.
    Program,
    /// SIGKILL to its whole process group (a shell's Ctrl-C, `timeout`).
    Group,
}

/// Runs the crasher with `args` until it acknowledged `acks` steps, waits
/// `delay`, kills it as `kill` says, waits for its guardian; returns the
/// last step acknowledged.
fn run_then_kill(python: &Path, scratch: &Scratch, args: &[&str], acks: u64, delay: Duration, kill: Kill) -> u64 {
    let script = scratch.script("crasher.py", CRASHER);
    let mut cmd = preloaded(python, &[&scratch.dir("managed")], OPTIONS);
    cmd.arg(script).args(args);
    let mut group = Group::spawn(cmd);
    let pid = group.child.id() as libc::pid_t;
    let lines = group.lines();
    let mut last = None;
    for _ in 0..acks {
        last = Some(lines.recv_timeout(TIMEOUT).unwrap_or_else(|e| panic!("no acknowledgement ({e})")));
    }
    std::thread::sleep(delay);
    // The guardian is started at the first guarded write and shows as one
    // only once its exec is done: wait for it, a while at most.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !guardians().iter().any(|&(_, owner)| owner == pid) {
        assert!(std::time::Instant::now() < deadline, "the program has a guardian");
        std::thread::sleep(Duration::from_millis(10));
    }
    match kill {
        Kill::Program => {
            // SAFETY: a signal to the child this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        Kill::Group => group.kill(),
    }
    last = lines.iter().last().or(last);
    let out = group.wait(TIMEOUT);
    assert!(!out.status.success(), "the crasher exited by itself\n{}", out.details());
    wait_for_guardians_of(pid);
    assert!(!out.stderr.contains("wbcache"), "no complaint from the library or its guardian\n{}", out.details());
    let last = last.expect("at least one acknowledgement");
    last.strip_prefix("acked ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("bad line {last:?}"))
}

/// Record `i` as the crasher appends it.
fn record(i: u64) -> Vec<u8> {
    let n = 1 + i * 7919 % 3000;
    let mut out = format!("record {i:08} {n:06}\n").into_bytes();
    out.extend(std::iter::repeat_n((i % 251) as u8, n as usize));
    out.push(b'\n');
    out
}

#[test]
fn appends_acknowledged_before_a_sigkill_survive_it() {
    let Some(python) = python() else { return };
    let seed = seed();
    let mut state = seed;
    for (round, kill) in [Kill::Program, Kill::Group, Kill::Program, Kill::Group].into_iter().enumerate() {
        let scratch = Scratch::new(&format!("crash-append-{round}"));
        let file = scratch.dir("managed").join("log");
        let (acks, delay) = (50 + next(&mut state) % 2000, Duration::from_micros(next(&mut state) % 50_000));
        let last = run_then_kill(&python, &scratch, &["append", file.to_str().unwrap()], acks, delay, kill);
        let data = std::fs::read(&file).unwrap();
        let mut at = 0;
        let mut whole = 0;
        while let Some(got) = data.get(at..at + record(whole).len()) {
            if got != record(whole) {
                break;
            }
            at += got.len();
            whole += 1;
        }
        println!(
            "round {round} ({kill:?} killed): {} records acknowledged, {whole} whole records on the file ({} bytes)",
            last + 1,
            data.len()
        );
        assert!(
            whole > last,
            "PROCESS_CRASH_SEED={seed}, round {round}: record {whole} of {last} acknowledged is not whole at byte {at} \
             (the file has {} bytes)",
            data.len()
        );
        // After the whole records, at most a part of the one in progress.
        let rest = &data[at..];
        assert!(
            rest.len() < record(whole).len() && rest == &record(whole)[..rest.len()],
            "PROCESS_CRASH_SEED={seed}, round {round}: {} bytes after record {} are not a prefix of the next",
            rest.len(),
            whole - 1
        );
    }
}

/// The model's file after each step, as the crasher takes them.
struct Model {
    rng: u64,
    data: Vec<u8>,
}

/// One step: a truncation to a length, or a write of `len` bytes of
/// `value` at an offset.
#[derive(Debug, Clone, Copy)]
enum Step {
    Truncate(usize),
    Write { offset: usize, len: usize, value: u8 },
}

const SPAN: u64 = 1 << 20;

impl Model {
    fn new(seed: u64) -> Model {
        Model { rng: if seed == 0 { 1 } else { seed }, data: Vec::new() }
    }

    fn step(&mut self, index: u64) -> Step {
        if next(&mut self.rng) % 10 == 0 {
            Step::Truncate((next(&mut self.rng) % (SPAN + SPAN / 4)) as usize)
        } else {
            let offset = (next(&mut self.rng) % SPAN) as usize;
            let len = 1 + (next(&mut self.rng) % 16384) as usize;
            Step::Write { offset, len, value: 1 + (index % 251) as u8 }
        }
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Truncate(len) => self.data.resize(len, 0),
            Step::Write { offset, len, value } => {
                if self.data.len() < offset + len {
                    self.data.resize(offset + len, 0);
                }
                self.data[offset..offset + len].fill(value);
            }
        }
    }
}

/// Whether `file` is `before` with any part of `step` applied (a step in
/// progress at the kill), which includes none and all of it.
fn is_partly_applied(before: &[u8], step: Step, file: &[u8]) -> bool {
    match step {
        Step::Truncate(len) => {
            let mut after = before.to_vec();
            after.resize(len, 0);
            file == before || file == &after[..]
        }
        Step::Write { offset, len, value } => {
            let end = offset + len;
            if file.len() < before.len() || file.len() > before.len().max(end) {
                return false;
            }
            file.iter().enumerate().all(|(i, &b)| {
                let old = before.get(i).copied().unwrap_or(0);
                b == old || ((offset..end).contains(&i) && b == value)
            })
        }
    }
}

#[test]
fn random_writes_and_truncations_survive_a_sigkill_as_acknowledged() {
    let Some(python) = python() else { return };
    let seed = seed();
    let mut state = seed;
    for (round, kill) in [Kill::Group, Kill::Program, Kill::Group].into_iter().enumerate() {
        let scratch = Scratch::new(&format!("crash-model-{round}"));
        let file = scratch.dir("managed").join("data");
        let model_seed = next(&mut state) % 1_000_000;
        let (acks, delay) = (20 + next(&mut state) % 600, Duration::from_micros(next(&mut state) % 20_000));
        let args = ["model", file.to_str().unwrap(), &model_seed.to_string()];
        let last = run_then_kill(&python, &scratch, &args, acks, delay, kill);
        let mut model = Model::new(model_seed);
        for i in 0..=last {
            let step = model.step(i);
            model.apply(step);
        }
        let in_progress = model.step(last + 1);
        let data = std::fs::read(&file).unwrap();
        println!(
            "round {round} ({kill:?} killed): {} steps acknowledged, the file is their state{} ({} bytes)",
            last + 1,
            if data == model.data { "" } else { " plus part of the next" },
            data.len()
        );
        assert!(
            is_partly_applied(&model.data, in_progress, &data),
            "PROCESS_CRASH_SEED={seed}, round {round}: the file ({} bytes) is not the state after step {last} \
             ({} bytes) with any part of {in_progress:?}",
            data.len(),
            model.data.len()
        );
    }
}

/// Python's `sqlite3` under the library, WAL with `synchronous=NORMAL`
/// (commits are not synced): after a SIGKILL every acknowledged commit is
/// in the database, which passes `integrity_check` when opened without
/// the library.
#[test]
fn sqlite_commits_with_synchronous_normal_survive_a_sigkill() {
    let Some(python) = python() else { return };
    let seed = seed();
    let mut state = seed;
    for (round, kill) in [Kill::Program, Kill::Group].into_iter().enumerate() {
        let scratch = Scratch::new(&format!("crash-sqlite-{round}"));
        let db = scratch.dir("managed").join("db.sqlite");
        let (acks, delay) = (20 + next(&mut state) % 400, Duration::from_micros(next(&mut state) % 20_000));
        let last = run_then_kill(&python, &scratch, &["sqlite", db.to_str().unwrap()], acks, delay, kill);
        let mut cmd = plain(&python);
        cmd.arg(scratch.path("crasher.py")).args(["check", db.to_str().unwrap()]);
        let out = run(cmd, TIMEOUT).ok();
        let value = |key: &str| {
            let line = out.stdout.lines().find_map(|l| l.strip_prefix(&format!("{key} "))).unwrap_or_default();
            line.to_string()
        };
        println!(
            "round {round} ({kill:?} killed): {} commits acknowledged, {} rows in the database, counter {}, integrity {}",
            last + 1,
            value("rows"),
            value("counter"),
            value("integrity")
        );
        let (rows, counter): (u64, u64) = (value("rows").parse().unwrap(), value("counter").parse().unwrap());
        assert_eq!(value("integrity"), "ok", "PROCESS_CRASH_SEED={seed}, round {round}\n{}", out.details());
        assert_eq!(value("bad"), "0", "PROCESS_CRASH_SEED={seed}, round {round}: payloads\n{}", out.details());
        assert!(
            counter >= last && rows == counter + 1,
            "PROCESS_CRASH_SEED={seed}, round {round}: commit {last} was acknowledged, the database holds {rows} rows \
             up to {counter}"
        );
    }
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount runs");
        assert!(status.success(), "mount -t tmpfs on {}: {status}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The guardian's own failure: the file system fills up while it writes a
/// dead owner's data (8 MiB into a 4 MiB tmpfs). It says so on standard
/// error, naming the file and the offset, and still writes everything
/// else (an overwrite of another file, which needs no new space).
#[test]
fn a_full_file_system_under_the_guardian_is_reported_and_loses_nothing_else() {
    let Some(python) = python() else { return };
    if !privileged() && common::missing::<()>("mounting a small tmpfs needs root").is_none() {
        return;
    }
    let scratch = Scratch::new("crash-enospc");
    let managed = scratch.dir("managed");
    let _tmpfs = Tmpfs::mount(&managed, "4m");
    std::fs::write(managed.join("b"), vec![0x11u8; 1 << 20]).unwrap();
    let script = scratch.script("crasher.py", CRASHER);
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg(script).args(["fill", managed.to_str().unwrap()]);
    let mut group = Group::spawn(cmd);
    let pid = group.child.id() as libc::pid_t;
    let lines = group.lines();
    for want in ["acked 0", "acked 1"] {
        assert_eq!(lines.recv_timeout(TIMEOUT).expect("an acknowledgement"), want);
    }
    group.kill();
    let out = group.wait(TIMEOUT);
    wait_for_guardians_of(pid);
    let a = managed.join("a");
    println!("the guardian said: {}", out.stderr.trim());
    assert!(
        out.stderr.contains("wbcache guardian:")
            && out.stderr.contains(&a.display().to_string())
            && out.stderr.contains("at offset")
            && out.stderr.contains("No space left on device"),
        "the guardian reports the failure with the file and offset\n{}",
        out.details()
    );
    assert_eq!(std::fs::read(managed.join("b")).unwrap(), vec![0xbbu8; 1 << 20], "the other file is whole");
    let written = std::fs::read(&a).unwrap();
    assert!(written.iter().all(|&b| b == 0xaa || b == 0), "file a holds only its own bytes or holes");
}

/// The next process to open a file a killed process cached waits until
/// the guardian has written it: a preloaded reader started the moment the
/// writer (32 MiB acknowledged, none written back) is killed reads all of
/// it. The dead process's cache lock lives on in its guardian; its alive
/// lock went with it.
#[test]
fn the_next_opener_waits_for_the_guardian() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("crash-next-opener");
    let managed = scratch.dir("managed");
    let file = managed.join("bulk");
    let script = scratch.script("crasher.py", CRASHER);
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg(&script).args(["bulk", file.to_str().unwrap()]);
    let mut group = Group::spawn(cmd);
    let pid = group.child.id() as libc::pid_t;
    let lines = group.lines();
    assert_eq!(lines.recv_timeout(TIMEOUT).expect("an acknowledgement"), "acked 0");
    // The reader is started (and its interpreter loaded) before the kill,
    // and opens the file the moment after it: well inside the guardian's
    // writing of 32 MiB.
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg(&script).args(["verify", file.to_str().unwrap()]).stdin(std::process::Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut reader = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut go = reader.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    group.kill();
    std::io::Write::write_all(&mut go, b"go\n").unwrap();
    drop(go);
    let out = reader.wait_with_output().unwrap();
    let out = common::Output {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        what: "the reader".into(),
    };
    assert!(out.status.success(), "{}", out.details());
    let _ = group.wait(TIMEOUT);
    wait_for_guardians_of(pid);
    println!("the reader started at the kill saw: {}", out.stdout.split_whitespace().collect::<Vec<_>>().join(" "));
    assert!(out.stdout.contains("size 33554432") && out.stdout.contains("bad 0"), "{}", out.details());
}
