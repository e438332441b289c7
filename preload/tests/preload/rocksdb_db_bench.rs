//! RocksDB's `db_bench` under the preload: `fillrandom` of 20,000 keys
//! with a small write buffer, so the run writes and syncs its WAL, flushes
//! and compacts SST files, renames CURRENT and deletes obsolete files, all
//! through the cache. A plain `db_bench` (not preloaded) then reads the
//! database back (`readseq`, `verifychecksum`) and must find exactly the
//! keys it finds in the same fill made without the preload. Skipped with a
//! printed reason when db_bench is missing, except under `CI=true`.
//!
//! A test binary of its own: RocksDB reads small files (CURRENT, OPTIONS)
//! with `fdopen` and `fclose`, whose close the library does not see until
//! stdio is interposed; the file's lock is held until its descriptor
//! number is reused (`open::fresh`), and a file another test created
//! meanwhile with the inode number of one RocksDB deleted would be
//! refused.

use crate::common;

use std::path::Path;

use common::{plain, preloaded, run, tool, wait_for_guardians_of, Group, Scratch, OPTIONS, TIMEOUT};

/// db_bench's arguments: a small write buffer and target file size, so a
/// fill of 20,000 keys flushes and compacts SST files, not only the WAL.
const DB_BENCH: &[&str] = &[
    "--num=20000",
    "--seed=42",
    "--threads=1",
    "--write_buffer_size=262144",
    "--target_file_size_base=262144",
    "--max_bytes_for_level_base=1048576",
];

/// The keys `readseq` read, from its report line.
fn keys_read(stdout: &str) -> u64 {
    let line =
        stdout.lines().find(|l| l.starts_with("readseq")).unwrap_or_else(|| panic!("no readseq line:\n{stdout}"));
    let before = line.split(" operations;").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("no count in {line:?}"))
}

/// Fills `db` (preloaded on `managed` when given), then reads it back
/// without the preload; the keys read.
fn fill_and_read(db_bench: &Path, db: &Path, managed: Option<&Path>) -> u64 {
    let db_arg = format!("--db={}", db.display());
    let mut cmd = match managed {
        Some(dir) => preloaded(db_bench, &[dir], OPTIONS),
        None => plain(db_bench),
    };
    cmd.args(DB_BENCH).arg(&db_arg).arg("--benchmarks=fillrandom");
    run(cmd, TIMEOUT).ok().no_complaints(&["ioctl"]);
    let mut cmd = plain(db_bench);
    cmd.args(DB_BENCH).arg(&db_arg).args(["--use_existing_db=1", "--benchmarks=readseq,verifychecksum"]);
    keys_read(&run(cmd, TIMEOUT).ok().stdout)
}

#[test]
fn db_bench_fillrandom_reads_back_without_the_preload() {
    let Some(db_bench) = tool("db_bench") else { return };
    let scratch = Scratch::new("db-bench");
    let managed = scratch.dir("managed");
    let cached = fill_and_read(&db_bench, &managed.join("db"), Some(&managed));
    let reference = fill_and_read(&db_bench, &scratch.dir("plain").join("db"), None);
    assert_eq!(cached, reference, "keys read back: filled under the preload vs without it");
    assert!(cached > 10_000, "fillrandom of 20,000 keys left {cached}");
}

/// Operations db_bench reported done in its report file
/// (`secs_elapsed,interval_qps` per one-second interval).
fn reported_ops(report: &Path) -> u64 {
    let text = std::fs::read_to_string(report).unwrap_or_default();
    text.lines().skip(1).filter_map(|l| l.split(',').nth(1)?.trim().parse::<f64>().ok()).sum::<f64>() as u64
}

/// `db_bench fillseq --sync=0` under the library (no sync at all: the WAL
/// lives in the cache until written back), killed with SIGKILL after it
/// reported two seconds of progress. RocksDB documents that a crash of
/// the process loses no write even with `sync=false`; once the guardian
/// has written the dead process's data, a plain `db_bench` opens the
/// database, `verifychecksum` passes and `readseq` finds at least every
/// key reported written (keys are sequential, so the prefix).
#[test]
fn db_bench_killed_without_sync_loses_no_write() {
    let Some(db_bench) = tool("db_bench") else { return };
    let scratch = Scratch::new("db-bench-kill");
    let managed = scratch.dir("managed");
    let (db, report) = (managed.join("db"), scratch.path("report.csv"));
    let num = "--num=50000000";
    let mut cmd = preloaded(&db_bench, &[&managed], "capacity=256M,expire_ms=3600000");
    cmd.args(["--benchmarks=fillseq", num, "--value_size=100", "--sync=0", "--report_interval_seconds=1"])
        .arg(format!("--db={}", db.display()))
        .arg(format!("--report_file={}", report.display()));
    let group = Group::spawn(cmd);
    let pid = group.child.id() as libc::pid_t;
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::fs::read_to_string(&report).unwrap_or_default().lines().count() < 3 {
        assert!(std::time::Instant::now() < deadline, "db_bench reported no progress");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let written = reported_ops(&report);
    group.kill();
    let _ = group.wait(TIMEOUT);
    wait_for_guardians_of(pid);
    let mut cmd = plain(&db_bench);
    cmd.args(["--use_existing_db=1", "--benchmarks=readseq,verifychecksum", num]).arg(format!("--db={}", db.display()));
    let out = run(cmd, TIMEOUT).ok();
    let read = keys_read(&out.stdout);
    println!("db_bench killed: {written} keys reported written, {read} keys read back without the library");
    assert!(read >= written, "{written} keys were reported written, {read} read back\n{}", out.details());
}
