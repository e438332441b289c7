//! Coherence between processes, as the library gives it with its
//! `fanotify` watcher: a process that opens a file another preloaded
//! process caches (preloaded itself or not, before or after the other)
//! sees every byte the other's writes acknowledged, at its open and from
//! then on, without the writer closing, syncing or exiting; nothing is
//! lost or overwritten when the writer lets go in the middle of a burst of
//! writes from two threads. Shown with real processes, each in its own
//! process group (killed when a test ends): `tail -f` following a
//! preloaded writer, started after it or before it; a plain `cat` of a
//! file a preloaded writer holds; this process reading a file while a
//! preloaded writer writes it as fast as it can; a reader holding a file
//! while a writer opens it, and the reverse. The writers cache with
//! `HOLD_OPTIONS`, whose dirty data never expires within a test: without
//! the hand-over, other processes would see nothing until the writer
//! exits. The watcher needs `CAP_SYS_ADMIN` (root here): without it these
//! tests are skipped, with the reason printed.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{
    assert_file, pattern, plain, preloaded, python, run, stat, tool, Group, Holder, Scratch, HOLD_OPTIONS, OPTIONS,
    PY_STATS, TIMEOUT,
};

/// Whether the watcher can run (else prints why the test is skipped).
fn privileged(test: &str) -> bool {
    common::privileged()
        || common::missing::<()>(&format!("{test}: the library's watcher (fanotify) needs CAP_SYS_ADMIN; not root"))
            .is_some()
}

/// A group's standard output, line by line, each with when this process
/// got it.
fn timed_lines(group: &mut Group) -> Receiver<(Instant, String)> {
    let stdout = group.child.stdout.take().expect("stdout piped and not taken yet");
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    receive
}

/// The appending writer: opens `argv[1]` with the flags `argv[2]`, writes
/// `line NNN` lines (`argv[3]` of them) every 20 ms, saying `wrote N`
/// after each, then holds the file until SIGTERM (never syncing).
const APPENDER: &str = r#"
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
fd = os.open(sys.argv[1], int(sys.argv[2]), 0o644)
for i in range(int(sys.argv[3])):
    assert os.write(fd, b"line %03d\n" % i) == 9
    print("wrote", i, flush=True)
    time.sleep(0.02)
while True:
    time.sleep(0.01)
"#;

/// Lines the appender writes (at 20 ms each: about 2 s).
const LINES: usize = 100;

/// How far the writer may get past a line before `tail` shows it: 50
/// lines, a second at its pace.
const LAG: usize = 50;

fn appender(python: &Path, file: &Path, managed: &Path, flags: libc::c_int) -> Group {
    let mut cmd = preloaded(python, &[managed], HOLD_OPTIONS);
    cmd.arg("-c").arg(APPENDER).arg(file).arg(flags.to_string()).arg(LINES.to_string());
    Group::spawn(cmd)
}

/// `tail -f` (preloaded) of `file`, printing it from its first line.
fn tail(tail: &Path, file: &Path, managed: &Path) -> Group {
    let mut cmd = preloaded(tail, &[managed], OPTIONS);
    // -s: the interval when tail polls instead of using inotify.
    cmd.args(["-n", "+1", "-s", "0.05", "-f"]).arg(file);
    Group::spawn(cmd)
}

/// Follows the writer's `wrote N` and tail's lines until tail showed
/// every line (the writer still holding the file): tail's lines must be
/// the writer's, in order, each shown before the writer wrote the line
/// `LAG` after it.
fn follow(writer: &Receiver<(Instant, String)>, follower: &Receiver<(Instant, String)>) {
    let (mut wrote, mut seen) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + TIMEOUT;
    // Both: tail may show a line before this process got the writer's
    // report of it.
    while seen.len() < LINES || wrote.len() < LINES {
        let mut idle = true;
        while let Ok((at, line)) = follower.try_recv() {
            assert_eq!(line, format!("line {:03}", seen.len()), "tail's line {} (after {seen:?})", seen.len());
            seen.push(at);
            idle = false;
        }
        while let Ok((at, line)) = writer.try_recv() {
            assert_eq!(line, format!("wrote {}", wrote.len()), "the writer's report");
            wrote.push(at);
            idle = false;
        }
        // Generous, but no need to wait the whole timeout once the writer
        // is done.
        let given_up = wrote.len() == LINES && wrote[LINES - 1].elapsed() > Duration::from_secs(30);
        assert!(
            Instant::now() < deadline && !given_up,
            "tail showed {} of {LINES} lines; the writer wrote {} (the last {:?} ago)",
            seen.len(),
            wrote.len(),
            wrote.last().map(Instant::elapsed)
        );
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let lag = |i: usize| seen[i].saturating_duration_since(wrote[i]);
    let worst = (0..LINES).max_by_key(|&i| lag(i)).unwrap();
    println!("tail's longest lag: line {worst}, {:?}", lag(worst));
    for i in 0..LINES - LAG {
        assert!(
            seen[i] < wrote[i + LAG],
            "tail showed line {i} only after the writer wrote line {} ({:?} after line {i}'s write)",
            i + LAG,
            lag(i)
        );
    }
}

/// A preloaded writer appends a line every 20 ms, holding the file open,
/// never syncing; a preloaded `tail -f`, started after its first lines,
/// shows every line (the first ones written back when tail opened the
/// file, the later ones written to the kernel by the writer, its file
/// handed over), each within about a second of its write.
#[test]
fn tail_follows_a_writer_that_started_first() {
    let (Some(python), Some(tail_path)) = (python(), tool("tail")) else { return };
    if !privileged("tail_follows_a_writer_that_started_first") {
        return;
    }
    let scratch = Scratch::new("coherence-tail-after");
    let managed = scratch.dir("managed");
    let file = managed.join("log");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND;
    let mut writer = appender(&python, &file, &managed, flags);
    let wrote = timed_lines(&mut writer);
    // The writer's first lines, before tail starts (they are replayed to
    // `follow`, which checks the reports in order).
    let mut first = Vec::new();
    while first.len() < 3 {
        first.push(wrote.recv_timeout(TIMEOUT).expect("the writer's first lines"));
    }
    let mut follower = tail(&tail_path, &file, &managed);
    let seen = timed_lines(&mut follower);
    let (replay, replayed) = std::sync::mpsc::channel();
    for line in first {
        replay.send(line).unwrap();
    }
    std::thread::spawn(move || {
        for line in wrote {
            if replay.send(line).is_err() {
                break;
            }
        }
    });
    follow(&replayed, &seen);
    drop(follower);
    writer.signal(libc::SIGTERM);
    writer.wait(TIMEOUT).ok().no_complaints(&[]);
    let expected: String = (0..LINES).map(|i| format!("line {i:03}\n")).collect();
    assert_file(&file, expected.as_bytes());
}

/// A preloaded `tail -f` opens an empty file first (caching it), then a
/// preloaded writer opens it and appends a line every 20 ms, holding it,
/// never syncing: tail shows every line, each within about a second.
#[test]
fn tail_follows_a_writer_that_started_after_it() {
    let (Some(python), Some(tail_path)) = (python(), tool("tail")) else { return };
    if !privileged("tail_follows_a_writer_that_started_after_it") {
        return;
    }
    let scratch = Scratch::new("coherence-tail-before");
    let managed = scratch.dir("managed");
    let file = managed.join("log");
    std::fs::write(&file, b"").unwrap();
    let mut follower = tail(&tail_path, &file, &managed);
    let seen = timed_lines(&mut follower);
    wait_until_open(&follower, &file);
    let mut writer = appender(&python, &file, &managed, libc::O_WRONLY | libc::O_APPEND);
    let wrote = timed_lines(&mut writer);
    follow(&wrote, &seen);
    drop(follower);
    writer.signal(libc::SIGTERM);
    writer.wait(TIMEOUT).ok().no_complaints(&[]);
    let expected: String = (0..LINES).map(|i| format!("line {i:03}\n")).collect();
    assert_file(&file, expected.as_bytes());
}

/// Waits until the group's leader has `file` open (one of its
/// descriptors in /proc names it).
fn wait_until_open(group: &Group, file: &Path) {
    let fds = format!("/proc/{}/fd", group.pid());
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let open = std::fs::read_dir(&fds)
            .map(|dir| dir.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file)))
            .unwrap_or(false);
        if open {
            return;
        }
        assert!(Instant::now() < deadline, "{} did not open {} in {TIMEOUT:?}", group.what, file.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A plain `cat` (not preloaded) of a file a preloaded writer holds,
/// after it wrote 100,000 bytes through its cache (acknowledged, never
/// synced, the kernel's file still empty): cat shows all of them.
#[test]
fn a_plain_reader_sees_what_a_holder_acknowledged() {
    let (Some(python), Some(cat)) = (python(), tool("cat")) else { return };
    if !privileged("a_plain_reader_sees_what_a_holder_acknowledged") {
        return;
    }
    let scratch = Scratch::new("coherence-cat");
    let managed = scratch.dir("managed");
    let file = managed.join("data");
    let data = pattern(100_000, 40);
    let holder = Holder::writing(&python, &file, &managed, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, &data);
    assert!(holder.dirty_bytes >= data.len() as u64, "the holder's bytes are not dirty in its cache");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 0, "the holder's bytes reached the kernel already");
    let out = scratch.dir("plain").join("cat-out");
    let mut cmd = plain(cat);
    cmd.arg(&file);
    Group::spawn_to(cmd, std::fs::File::create(&out).unwrap()).wait(TIMEOUT).ok();
    assert_file(&out, &data);
    holder.finish();
    assert_file(&file, &data);
}

/// Records of the burst: `RECORDS` of 64 bytes, record `i` at `i * 64`.
const RECORDS: usize = 200_000;

/// Records the burst's main thread writes before it says `started`.
const FIRST: usize = 1000;

/// Record `i` as the burst writes it.
fn record(i: usize) -> Vec<u8> {
    let mut r = format!("{i:09} ").into_bytes();
    r.resize(63, b'a' + (i % 26) as u8);
    r.push(b'\n');
    r
}

/// The burst: writes records `0..FIRST` (pwrite), says `started`, then
/// two threads write the rest (thread k the records `FIRST + k`,
/// `FIRST + k + 2`, ...) as fast as they can; the records of the second
/// half only once the main thread saw the file handed over (the cache
/// dropped its pages: `cached_bytes` 0), so that some are always written
/// after it, however late the first open comes. Says `done` after.
const BURST: &str = r#"
import os, sys, threading, time
path, records, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
def record(i):
    return (b"%09d " % i).ljust(63, bytes([ord("a") + i % 26])) + b"\n"
for i in range(first):
    assert os.pwrite(fd, record(i), i * 64) == 64
print("started", flush=True)
handed = threading.Event()
def worker(k):
    for i in range(first + k, records, 2):
        if i >= records // 2:
            handed.wait()
        assert os.pwrite(fd, record(i), i * 64) == 64
threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
[t.start() for t in threads]
while wbcache_stats()["cached_bytes"] != 0:
    time.sleep(0.005)
handed.set()
[t.join() for t in threads]
print("done", flush=True)
"#;

/// A preloaded writer with two threads writes 200,000 records of 64 bytes
/// at their own offsets (pwrite) as fast as it can, never syncing; this
/// process (not preloaded) opens and reads the file again and again
/// meanwhile. Its first open makes the writer let go in the middle of the
/// burst (the writer's calls in flight finish first); every open sees the
/// records the writer acknowledged before its first report; after the
/// writer exited, every record is on disk, correct. The writer's writes
/// after the hand-over went to the kernel: its cache wrote back less
/// than the whole file (`written_bytes_total`).
#[test]
fn a_writer_lets_go_in_the_middle_of_a_burst() {
    let Some(python) = python() else { return };
    if !privileged("a_writer_lets_go_in_the_middle_of_a_burst") {
        return;
    }
    let scratch = Scratch::new("coherence-burst");
    let managed = scratch.dir("managed");
    let file = managed.join("records");
    let stats = scratch.dir("plain").join("stats.jsonl");
    let mut cmd = preloaded(&python, &[&managed], HOLD_OPTIONS);
    cmd.env("WBCACHE_STATS", &stats).arg("-c").arg(format!("{PY_STATS}{BURST}"));
    cmd.arg(&file).arg(RECORDS.to_string()).arg(FIRST.to_string());
    let mut writer = Group::spawn(cmd);
    let said = writer.lines();
    assert_eq!(said.recv_timeout(TIMEOUT).as_deref(), Ok("started"), "the writer did not start");
    let first: Vec<u8> = (0..FIRST).flat_map(record).collect();
    let deadline = Instant::now() + TIMEOUT;
    let mut reads = 0;
    loop {
        let done = said.try_recv().is_ok();
        let data = std::fs::read(&file).unwrap();
        reads += 1;
        assert!(data.len() >= first.len(), "read {reads}: {} bytes, the first records are acknowledged", data.len());
        assert!(data[..first.len()] == first[..], "read {reads}: the first records differ");
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "the writer did not finish in {TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    writer.wait(TIMEOUT).ok().no_complaints(&[]);
    let expected: Vec<u8> = (0..RECORDS).flat_map(record).collect();
    assert_file(&file, &expected);
    let lines = common::stats_lines(&stats);
    assert_eq!(lines.len(), 1, "the writer's statistics");
    let written = stat(&lines[0], "written_bytes_total");
    println!("{reads} reads; the writer's cache wrote back {written} of {} bytes", expected.len());
    assert!(written < expected.len() as u64, "the writer's cache wrote the whole file: nothing went to the kernel");
}

/// A preloaded reader holds a file open, having read it through its
/// cache; a preloaded writer then opens it (`O_RDWR`), writes and exits:
/// the reader, reading again from offset 0 through the descriptor it
/// holds, sees the writer's bytes.
#[test]
fn a_reader_holding_a_file_sees_a_later_writers_bytes() {
    let Some(python) = python() else { return };
    if !privileged("a_reader_holding_a_file_sees_a_later_writers_bytes") {
        return;
    }
    let scratch = Scratch::new("coherence-reader-first");
    let managed = scratch.dir("managed");
    let file = managed.join("f");
    std::fs::write(&file, b"old contents, read and cached").unwrap();
    let reader = Holder::reading(&python, &file, &managed);
    assert_eq!(reader.read, b"old contents, read and cached");
    let code = "import os, sys\n\
                fd = os.open(sys.argv[1], os.O_RDWR)\n\
                assert os.pwrite(fd, b'NEW', 0) == 3\n";
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(&file);
    run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(String::from_utf8_lossy(&reader.reread()), "NEW contents, read and cached", "the reader");
    reader.finish();
    assert_file(&file, b"NEW contents, read and cached");
}

/// The reverse order: a preloaded writer holds a file it wrote through
/// its cache; a preloaded reader opens it and reads every byte; a third
/// process appends; both holders, reading again through the descriptors
/// they hold, see the appended bytes after the writer's.
#[test]
fn a_reader_opening_a_held_file_sees_its_bytes_and_later_ones() {
    let Some(python) = python() else { return };
    if !privileged("a_reader_opening_a_held_file_sees_its_bytes_and_later_ones") {
        return;
    }
    let scratch = Scratch::new("coherence-writer-first");
    let managed = scratch.dir("managed");
    let file = managed.join("f");
    let written = pattern(50_000, 41);
    let writer = Holder::writing(&python, &file, &managed, libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, &written);
    assert!(writer.dirty_bytes >= written.len() as u64, "the writer's bytes are not dirty in its cache");
    let reader = Holder::reading(&python, &file, &managed);
    assert!(reader.read == written, "the reader read {} bytes, not the writer's {}", reader.read.len(), written.len());
    let code = "import os, sys\n\
                fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n\
                assert os.write(fd, b'appended by a third process') == 27\n";
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(&file);
    run(cmd, TIMEOUT).ok().no_complaints(&[]);
    let mut expected = written.clone();
    expected.extend_from_slice(b"appended by a third process");
    assert!(writer.reread() == expected, "the writer does not read the appended bytes after its own");
    assert!(reader.reread() == expected, "the reader does not read the appended bytes after the writer's");
    reader.finish();
    writer.finish();
    assert_file(&file, &expected);
}
