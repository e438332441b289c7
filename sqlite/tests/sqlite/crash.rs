//! Real-process tests of the wbcache VFS: crashes (SIGKILL) and the lock
//! that keeps a database to one process.
//!
//! Crashes: a child process (this test binary re-executed, running only
//! `crash_child`) commits numbered transactions with `synchronous=FULL`,
//! printing `COMMITTED <n>` after each COMMIT returns, and is killed at a
//! random moment. Transaction `n` inserts row `n` of `rows` (a payload
//! derived from `n`), sets the counter to `n`, and rewrites rows of
//! `other` with a tag `n` and contents derived from (id, `n`): a few
//! random ones, or now and then a run of hundreds (more than SQLite's page
//! cache, so it spills into the database mid-transaction, and more than
//! the cache's dirty limit in the small-cache rounds, so writeback runs
//! mid-transaction). After each kill the database is opened with SQLite's
//! own unix VFS: it must pass `integrity_check`, hold every row reported
//! committed with the right payload (rows 1..=counter, no gap, counter ==
//! max row: the transactions are atomic), and no `other` row may carry a
//! tag above the counter or contents other than its (id, tag) derive.
//! Every other round checks a copy instead, leaving the hot journal or
//! WAL to the next child, whose wbcache VFS must recover it. Twenty kills
//! in WAL mode and twenty in DELETE mode; `WBCACHE_SQLITE_CRASH_SEED`
//! replays the random choices (not the timing).
//!
//! Locks: while a child holds a database open on the wbcache VFS, the
//! unix VFS of the parent and the wbcache VFS of another child both get
//! SQLITE_BUSY; once the child exits, both read everything it committed.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Rng;
use rusqlite::{Connection, OpenFlags};
use wbcache::{Cache, Config};

const ROLE_ENV: &str = "WBCACHE_SQLITE_CHILD_ROLE";
const DB_ENV: &str = "WBCACHE_SQLITE_CHILD_DB";
const MODE_ENV: &str = "WBCACHE_SQLITE_CHILD_MODE";
const SEED_ENV: &str = "WBCACHE_SQLITE_CHILD_SEED";
const OPTIONS_ENV: &str = "WBCACHE_SQLITE_CHILD_OPTIONS";
const CRASH_SEED_ENV: &str = "WBCACHE_SQLITE_CRASH_SEED";
const SYNC_ENV: &str = "WBCACHE_SQLITE_CHILD_SYNCHRONOUS";

const CHILD_VFS: &str = "wbcache-crash-child";
const KILLS: u64 = 20;
/// Rows of `other`.
const OTHER_ROWS: u64 = 3000;

/// Cache settings of the writer child, by round: small (eviction and
/// writeback during big transactions, frequent periodic writeback), the
/// default, and small on the thread-pool backend.
const CHILD_CACHES: [&str; 3] = [
    "capacity=16M,dirty_limit=4M,folio_max=256K,expire_ms=50",
    "capacity=64M",
    "capacity=16M,dirty_limit=4M,folio_max=256K,io=threads",
];

/// Row `n`'s payload.
fn payload(n: u64) -> Vec<u8> {
    let len = 40 + (n * 7919 % 1500) as usize;
    (0..len).map(|i| ((n * 31 + i as u64 * 7) % 251) as u8).collect()
}

/// The contents of `other` row `id` written by transaction `tag`.
fn other_blob(id: u64, tag: u64) -> Vec<u8> {
    let len = 100 + ((id * 7919 + tag * 104_729) % 3400) as usize;
    (0..len).map(|i| ((id * 13 + tag * 17 + i as u64 * 7) % 253) as u8).collect()
}

// ---------------------------------------------------------------------------
// The child.

/// The child's entry: does nothing unless the parent set the role.
#[test]
fn crash_child() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    let path = PathBuf::from(std::env::var(DB_ENV).unwrap());
    let mode = std::env::var(MODE_ENV).unwrap();
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let options = std::env::var(OPTIONS_ENV).unwrap_or_else(|_| "capacity=64M".into());
    let cache = Arc::new(Cache::new(Config::from_options(&options).unwrap()).unwrap());
    wbcache_sqlite::register(cache, CHILD_VFS, false).unwrap();
    match role.as_str() {
        "writer" => writer(&path, &mode, seed),
        "holder" => holder(&path, &mode),
        "probe" => probe(&path),
        other => panic!("unknown child role {other}"),
    }
}

fn child_open(path: &Path) -> Connection {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
    Connection::open_with_flags_and_vfs(path, flags, CHILD_VFS).unwrap()
}

fn set_journal_mode(conn: &Connection, mode: &str) {
    let got: String = conn.query_row(&format!("PRAGMA journal_mode = {mode}"), [], |r| r.get(0)).unwrap();
    assert_eq!(got, mode.to_lowercase(), "journal mode");
}

/// Announces `what` on stdout, at once.
fn say(what: &str) {
    let mut out = std::io::stdout().lock();
    // A newline first: the harness's "test crash_child ... " has none.
    // One write, so a kill cannot cut a line short.
    out.write_all(format!("\n{what}\n").as_bytes()).unwrap();
    out.flush().unwrap();
}

/// Commits numbered transactions until killed.
fn writer(path: &Path, mode: &str, seed: u64) {
    let mut conn = child_open(path);
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    set_journal_mode(&conn, mode);
    // A page cache smaller than a big transaction: it spills.
    let synchronous = std::env::var(SYNC_ENV).unwrap_or_else(|_| "FULL".into());
    conn.execute_batch(&format!("PRAGMA synchronous = {synchronous}; PRAGMA cache_size = -1000;")).unwrap();
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE IF NOT EXISTS rows(n INTEGER PRIMARY KEY, payload BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS counter(id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS other(id INTEGER PRIMARY KEY, tag INTEGER NOT NULL, v BLOB NOT NULL);
         INSERT OR IGNORE INTO counter VALUES (0, 0);
         COMMIT;",
    )
    .unwrap();
    let others: u64 = conn.query_row("SELECT count(*) FROM other", [], |r| r.get(0)).unwrap();
    if others == 0 {
        let tx = conn.transaction().unwrap();
        for id in 0..OTHER_ROWS {
            tx.execute("INSERT INTO other(id, tag, v) VALUES (?1, 0, ?2)", (id, other_blob(id, 0))).unwrap();
        }
        tx.commit().unwrap();
    }
    let last: u64 = conn.query_row("SELECT n FROM counter WHERE id = 0", [], |r| r.get(0)).unwrap();
    let mut rng = Rng::new(seed);
    for n in last + 1.. {
        let tx = conn.transaction().unwrap();
        tx.execute("INSERT INTO rows(n, payload) VALUES (?1, ?2)", (n, payload(n))).unwrap();
        tx.execute("UPDATE counter SET n = ?1 WHERE id = 0", [n]).unwrap();
        let ids: Vec<u64> = if rng.one_in(10) {
            let len = rng.between(500, 1200);
            let first = rng.below(OTHER_ROWS - len);
            (first..first + len).collect()
        } else {
            (0..rng.between(1, 8)).map(|_| rng.below(OTHER_ROWS)).collect()
        };
        {
            let mut update = tx.prepare_cached("UPDATE other SET tag = ?1, v = ?2 WHERE id = ?3").unwrap();
            for id in ids {
                assert_eq!(update.execute((n, other_blob(id, n), id)).unwrap(), 1);
            }
        }
        tx.commit().unwrap();
        say(&format!("COMMITTED {n}"));
        if mode == "WAL" && rng.one_in(30) {
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())).unwrap();
        }
    }
}

/// Commits some rows, says READY, holds the database until a line comes
/// on stdin, commits one more row, says DONE and exits.
fn holder(path: &Path, mode: &str) {
    let conn = child_open(path);
    set_journal_mode(&conn, mode);
    conn.execute_batch("PRAGMA synchronous = FULL; CREATE TABLE t(n INTEGER PRIMARY KEY, v TEXT NOT NULL);").unwrap();
    for n in 1..=50u64 {
        conn.execute("INSERT INTO t(n, v) VALUES (?1, ?2)", (n, format!("row {n}"))).unwrap();
    }
    say("READY 50");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    conn.execute("INSERT INTO t(n, v) VALUES (51, 'row 51')", []).unwrap();
    say("DONE 51");
    drop(conn);
}

/// Tries to read the database, then (if that was BUSY) to write it, and
/// says what happened.
fn probe(path: &Path) {
    let conn = child_open(path);
    conn.busy_timeout(Duration::ZERO).unwrap();
    let verdict = |r: rusqlite::Result<String>| match r {
        Ok(s) => format!("ok {s}"),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => "busy".to_string(),
        Err(e) => format!("error {e}"),
    };
    let read = verdict(conn.query_row("SELECT count(*) || ' ' || max(n) FROM t", [], |r| r.get(0)));
    say(&format!("PROBE-READ {read}"));
    if read == "busy" {
        let write = verdict(conn.execute("INSERT INTO t(v) VALUES ('probe')", []).map(|n| n.to_string()));
        say(&format!("PROBE-WRITE {write}"));
    }
}

// ---------------------------------------------------------------------------
// The parent.

fn is_child() -> bool {
    std::env::var_os(ROLE_ENV).is_some()
}

/// A child process, killed if still running when dropped (a failing
/// test must not leave a writer running).
struct ChildGuard(Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts this binary as a child in `role`; its stderr goes to `stderr`.
fn spawn_child(role: &str, db: &Path, mode: &str, seed: u64, options: &str, stderr: &Path) -> ChildGuard {
    spawn_child_with(role, db, (mode, "FULL"), seed, options, stderr)
}

/// As `spawn_child`, with `synchronous` set as `(journal mode, synchronous)` say.
fn spawn_child_with(
    role: &str,
    db: &Path,
    (mode, synchronous): (&str, &str),
    seed: u64,
    options: &str,
    stderr: &Path,
) -> ChildGuard {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash::crash_child", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env(DB_ENV, db)
        .env(MODE_ENV, mode)
        .env(SEED_ENV, seed.to_string())
        .env(OPTIONS_ENV, options)
        .env(SYNC_ENV, synchronous)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap();
    ChildGuard(child)
}

/// Lines of the child's stdout that carry `tag`, as what follows it.
fn tagged_lines(child: &mut Child, tag: &'static str) -> (Receiver<String>, std::thread::JoinHandle<()>) {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find(tag) {
                let _ = tx.send(line[at + tag.len()..].trim().to_string());
            }
        }
    });
    (rx, reader)
}

fn child_stderr(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(30).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// What a check found.
struct Found {
    counter: u64,
}

/// Checks the database at `path` with the unix VFS after a kill: `reported`
/// is the last number the child announced, `floor` what earlier rounds
/// verified.
fn check_after_crash(path: &Path, reported: u64, floor: u64, what: &str) -> Found {
    let conn = Connection::open(path).unwrap();
    let check = common::integrity(&conn);
    assert_eq!(check, "ok", "{what}: integrity_check");
    let counter: u64 = conn.query_row("SELECT n FROM counter WHERE id = 0", [], |r| r.get(0)).unwrap();
    let (count, max): (u64, u64) =
        conn.query_row("SELECT count(*), coalesce(max(n), 0) FROM rows", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    assert!(counter >= reported, "{what}: counter {counter}, but {reported} was reported committed");
    assert!(counter <= reported + 1, "{what}: counter {counter}, but only {reported} was reported committed");
    assert!(counter >= floor, "{what}: counter {counter} went below {floor}, verified in an earlier round");
    assert_eq!(max, counter, "{what}: the last row and the counter differ (a torn transaction)");
    assert_eq!(count, counter, "{what}: {count} rows for counter {counter}: rows missing");
    let mut stmt = conn.prepare("SELECT n, payload FROM rows ORDER BY n").unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut expect = 1u64;
    while let Some(row) = rows.next().unwrap() {
        let n: u64 = row.get(0).unwrap();
        let got: Vec<u8> = row.get(1).unwrap();
        assert_eq!(n, expect, "{what}: row {expect} is missing");
        assert!(got == payload(n), "{what}: row {n}'s payload is wrong");
        expect += 1;
    }
    let mut stmt = conn.prepare("SELECT id, tag, v FROM other ORDER BY id").unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut others = 0;
    while let Some(row) = rows.next().unwrap() {
        let (id, tag): (u64, u64) = (row.get(0).unwrap(), row.get(1).unwrap());
        let v: Vec<u8> = row.get(2).unwrap();
        assert!(tag <= counter, "{what}: other row {id} has tag {tag}, from a transaction after {counter}");
        assert!(v == other_blob(id, tag), "{what}: other row {id} (tag {tag}) has wrong contents");
        others += 1;
    }
    assert_eq!(others, OTHER_ROWS, "{what}: rows of other missing");
    Found { counter }
}

/// Copies the database and its journal or WAL (what exists) into `dir`.
fn copy_database(db: &Path, dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let name = db.file_name().unwrap().to_str().unwrap();
    for suffix in ["", "-journal", "-wal"] {
        let from = db.with_file_name(format!("{name}{suffix}"));
        if from.exists() {
            std::fs::copy(&from, dir.join(format!("{name}{suffix}"))).unwrap();
        }
    }
    dir.join(name)
}

fn crash_rounds(mode: &str, synchronous: &str) {
    let seed = common::seed_from_env(CRASH_SEED_ENV, common::clock_seed());
    eprintln!("crash test ({mode}, synchronous={synchronous}) seed {seed} (rerun with {CRASH_SEED_ENV}={seed})");
    let dir = common::scratch(&format!("crash-{mode}-{synchronous}"));
    let db = dir.join("crash.db");
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut floor = 0;
    // Kills that left a journal or WAL behind with something in it, and
    // kills between a COMMIT and its announcement.
    let (mut hot, mut unannounced) = (0, 0);
    for round in 0..KILLS {
        // Unsynced commits (synchronous=NORMAL) live only in the cache
        // until writeback: no periodic writeback may save them.
        let options = match synchronous {
            "FULL" => CHILD_CACHES[round as usize % CHILD_CACHES.len()].to_string(),
            _ => format!("{},expire_ms=3600000", CHILD_CACHES[1]),
        };
        let options = options.as_str();
        let what = format!("{mode} round {round}, child cache {options} (seed {seed}; {CRASH_SEED_ENV}={seed})");
        let stderr = dir.join(format!("child-{round}.stderr"));
        let mut child =
            spawn_child_with("writer", &db, (mode, synchronous), seed.wrapping_add(round), options, &stderr);
        let pid = child.id() as libc::pid_t;
        let (rx, reader) = tagged_lines(&mut child, "COMMITTED ");
        let mut reported = floor;
        let note = |reported: &mut u64, s: String| {
            let n: u64 = s.parse().unwrap();
            assert!(n > *reported, "{what}: commits announced out of order");
            *reported = n;
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(s) => note(&mut reported, s),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what}: the child committed nothing in 60 s; its stderr:\n{}", child_stderr(&stderr));
            }
        }
        let delay =
            Duration::from_millis(rng.between(5, 300) + if rng.one_in(3) { rng.below(300) } else { rng.below(20) });
        let deadline = Instant::now() + delay;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if let Ok(s) = rx.recv_timeout(left) {
                note(&mut reported, s);
            }
        }
        // SAFETY: kill(2) of our own child, not yet waited for.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        let status = child.wait().unwrap();
        reader.join().unwrap();
        // Announcements still in the pipe were made before the kill.
        while let Ok(s) = rx.try_recv() {
            note(&mut reported, s);
        }
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "{what}: the child ended on its own ({status}); its stderr:\n{}",
            child_stderr(&stderr)
        );
        // The cache's guardian writes what the child's writes left dirty.
        common::wait_for_guardians_of(pid);
        let leftover = ["-journal", "-wal"].iter().any(|suffix| {
            let mut name = db.clone().into_os_string();
            name.push(suffix);
            std::fs::metadata(&name).is_ok_and(|m| m.len() > 0)
        });
        hot += u64::from(leftover);
        // Every other round checks a copy, leaving the recovery of the
        // original to the next child's wbcache VFS.
        let found = if round % 2 == 1 {
            let copy = copy_database(&db, &dir.join("copy"));
            check_after_crash(&copy, reported, floor, &what)
        } else {
            check_after_crash(&db, reported, floor, &what)
        };
        unannounced += u64::from(found.counter > reported);
        floor = found.counter;
        let _ = std::fs::remove_file(&stderr);
    }
    eprintln!(
        "crash test ({mode}, synchronous={synchronous}): {KILLS} kills, {floor} transactions committed, {hot} kills left a journal or WAL, \
         {unannounced} came between a COMMIT and its announcement; {:.1?}",
        started.elapsed()
    );
    common::remove_scratch(&dir);
}

#[test]
fn sigkill_wal() {
    if is_child() {
        return;
    }
    crash_rounds("WAL", "FULL");
}

/// WAL with `synchronous=NORMAL`: commits are not synced, and a crash of
/// the application must keep them all (as SQLite documents for the
/// kernel's cache); the cache's guardian writes them after the kill.
#[test]
fn sigkill_wal_synchronous_normal() {
    if is_child() {
        return;
    }
    crash_rounds("WAL", "NORMAL");
}

#[test]
fn sigkill_delete() {
    if is_child() {
        return;
    }
    crash_rounds("DELETE", "FULL");
}

/// Waits for the child's next line with `tag` (the reader sends whole
/// lines) and returns what follows the tag.
fn expect_line(rx: &Receiver<String>, tag: &str, what: &str, stderr: &Path) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{what}: no '{tag}' from the child; its stderr:\n{}", child_stderr(stderr)));
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..].trim().to_string();
        }
    }
}

/// What a probe child says: its read's verdict and, if BUSY, its write's.
fn run_probe(db: &Path, mode: &str, dir: &Path) -> (String, Option<String>) {
    let stderr = dir.join("probe.stderr");
    let mut child = spawn_child("probe", db, mode, 0, "capacity=16M", &stderr);
    let stdout = child.stdout.take().unwrap();
    let lines: Vec<String> = BufReader::new(stdout).lines().map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "probe failed ({status}); its stderr:\n{}", child_stderr(&stderr));
    let find = |tag: &str| lines.iter().find_map(|l| l.find(tag).map(|at| l[at + tag.len()..].trim().to_string()));
    (find("PROBE-READ ").expect("the probe reports its read"), find("PROBE-WRITE "))
}

fn is_busy<T: std::fmt::Debug>(r: &rusqlite::Result<T>) -> bool {
    matches!(r, Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy))
}

#[test]
fn other_processes_are_locked_out() {
    if is_child() {
        return;
    }
    for mode in ["WAL", "DELETE"] {
        let dir = common::scratch(&format!("lock-{mode}"));
        let db = dir.join("held.db");
        let stderr = dir.join("holder.stderr");
        let mut holder = spawn_child("holder", &db, mode, 0, "capacity=16M", &stderr);
        let (rx, reader) = tagged_lines(&mut holder, "");
        assert_eq!(expect_line(&rx, "READY ", mode, &stderr), "50");

        // The unix VFS of this process: BUSY on a read and on a write.
        let plain = Connection::open(&db).unwrap();
        plain.busy_timeout(Duration::ZERO).unwrap();
        let read = plain.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
        assert!(is_busy(&read), "{mode}: the unix VFS read a database another process holds: {read:?}");
        let write = plain.execute("INSERT INTO t(v) VALUES ('parent')", []);
        assert!(is_busy(&write), "{mode}: the unix VFS wrote a database another process holds: {write:?}");

        // Another wbcache process: BUSY too.
        let (read, write) = run_probe(&db, mode, &dir);
        assert_eq!(read, "busy", "{mode}: a second wbcache process read the held database");
        assert_eq!(write.as_deref(), Some("busy"), "{mode}: a second wbcache process wrote the held database");

        // The holder commits once more and exits.
        holder.stdin.take().unwrap().write_all(b"go\n").unwrap();
        assert_eq!(expect_line(&rx, "DONE ", mode, &stderr), "51");
        let status = holder.wait().unwrap();
        reader.join().unwrap();
        assert!(status.success(), "{mode}: the holder failed ({status}); its stderr:\n{}", child_stderr(&stderr));

        // Now the unix VFS reads it all.
        let rows: Vec<(i64, String)> = plain
            .prepare("SELECT n, v FROM t ORDER BY n")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let want: Vec<(i64, String)> = (1..=51).map(|n| (n, format!("row {n}"))).collect();
        assert_eq!(rows, want, "{mode}: what the holder committed, read after it exited");
        assert_eq!(common::integrity(&plain), "ok");
        let journal: String = plain.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(journal, mode.to_lowercase());
        // (In WAL mode the unix VFS keeps a SHARED lock while open.)
        drop(plain);

        // And so does another wbcache process.
        let (read, _) = run_probe(&db, mode, &dir);
        assert_eq!(read, "ok 51 51", "{mode}: a wbcache process after the holder exited");
        common::remove_scratch(&dir);
    }
}
