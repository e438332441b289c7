//! Unmodified programs under the preload: coreutils' `cp`, `dd`, `mv`,
//! `rm`, `truncate` and `cat` on a managed directory, and a program run
//! through `wbcache run` itself. Each test checks the bytes on disk after
//! the program exits, read by the test process (which is not preloaded),
//! so a program that read or wrote through the cache and left the file
//! wrong, short or unwritten fails; and one test shows that each program
//! really went through the library (its statistics line, `WBCACHE_STATS`)
//! and sees the bytes another preloaded process holds in its cache, so a
//! preload that silently failed to load cannot pass the others
//! vacuously.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{assert_file, pattern, preloaded, python, run, stat, tool, Group, Holder, Scratch, MIB, OPTIONS, TIMEOUT};

/// Runs `program` with `args` under the preload managing `managed`; it
/// must exit 0, the library complaining of nothing (`cp` tries `FICLONE`
/// first, which the kernel answers, then copies).
fn coreutils(program: &Path, args: &[&Path], managed: &Path) -> common::Output {
    let mut cmd = preloaded(program, &[managed], OPTIONS);
    cmd.args(args);
    run(cmd, TIMEOUT).ok().no_complaints(&[])
}

/// A file of `len` pattern bytes in an unmanaged directory.
fn source(scratch: &Scratch, len: usize, seed: u64) -> (std::path::PathBuf, Vec<u8>) {
    let data = pattern(len, seed);
    let path = scratch.dir("plain").join(format!("source-{seed}"));
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

#[test]
fn cp_copies_into_and_within_a_managed_directory() {
    let Some(cp) = tool("cp") else { return };
    let scratch = Scratch::new("cp");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 6 * MIB + 4321, 1);
    let (a, b) = (managed.join("a"), managed.join("b"));
    coreutils(&cp, &[&src, &a], &managed);
    assert_file(&a, &data);
    // Managed to managed: copy_file_range between two cached files.
    coreutils(&cp, &[&a, &b], &managed);
    assert_file(&b, &data);
    assert_file(&a, &data);
}

#[test]
fn dd_with_conv_fsync_writes_every_block() {
    let Some(dd) = tool("dd") else { return };
    let scratch = Scratch::new("dd");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 5 * MIB + 777, 2);
    let out = managed.join("out");
    let (input, output) = (format!("if={}", src.display()), format!("of={}", out.display()));
    coreutils(&dd, &[input.as_ref(), output.as_ref(), "bs=64k".as_ref(), "conv=fsync".as_ref()], &managed);
    assert_file(&out, &data);
    // And back out of the cache, skipping into the file as it reads.
    let back = scratch.dir("plain").join("back");
    let (input, output) = (format!("if={}", out.display()), format!("of={}", back.display()));
    coreutils(&dd, &[input.as_ref(), output.as_ref(), "bs=64k".as_ref(), "skip=3".as_ref()], &managed);
    assert_file(&back, &data[3 * 65536..]);
}

#[test]
fn mv_renames_and_rm_removes_managed_files() {
    let (Some(cp), Some(mv), Some(rm)) = (tool("cp"), tool("mv"), tool("rm")) else { return };
    let scratch = Scratch::new("mv");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 3 * MIB + 5, 3);
    let (x, y) = (managed.join("x"), managed.join("y"));
    coreutils(&cp, &[&src, &x], &managed);
    // Over an existing name: the old file's data must not come back.
    std::fs::write(&y, b"old contents of y").unwrap();
    coreutils(&mv, &[&x, &y], &managed);
    assert!(!x.exists(), "mv left {}", x.display());
    assert_file(&y, &data);
    // Out of the managed directory (a rename the kernel does alone).
    let out = scratch.dir("plain").join("moved");
    coreutils(&mv, &[&y, &out], &managed);
    assert_file(&out, &data);
    coreutils(&cp, &[&out, &y], &managed);
    coreutils(&rm, &[&y], &managed);
    assert!(!y.exists(), "rm left {}", y.display());
}

#[test]
fn truncate_shrinks_and_extends_with_zeros() {
    let (Some(cp), Some(truncate)) = (tool("cp"), tool("truncate")) else { return };
    let scratch = Scratch::new("truncate");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 3 * MIB, 4);
    let t = managed.join("t");
    coreutils(&cp, &[&src, &t], &managed);
    coreutils(&truncate, &["-s".as_ref(), "1000".as_ref(), &t], &managed);
    assert_file(&t, &data[..1000]);
    coreutils(&truncate, &["-s".as_ref(), "5M".as_ref(), &t], &managed);
    let mut expected = data[..1000].to_vec();
    expected.resize(5 * MIB, 0);
    assert_file(&t, &expected);
}

#[test]
fn cat_reads_a_managed_file_whole() {
    let (Some(cp), Some(cat)) = (tool("cp"), tool("cat")) else { return };
    let scratch = Scratch::new("cat");
    let managed = scratch.dir("managed");
    let (src, data) = source(&scratch, 4 * MIB + 99, 5);
    let f = managed.join("f");
    coreutils(&cp, &[&src, &f], &managed);
    let out_path = scratch.dir("plain").join("out");
    let mut cmd = preloaded(cat, &[&managed], OPTIONS);
    cmd.arg(&f);
    let stdout = std::fs::File::create(&out_path).unwrap();
    Group::spawn_to(cmd, stdout).wait(TIMEOUT).ok().no_complaints(&[]);
    assert_file(&out_path, &data);
}

/// The `WBCACHE_STATS` line of the one preloaded process that appended
/// to `stats` since it held `before` lines.
fn last_stats_line(stats: &Path, before: usize, program: &str) -> String {
    let lines = common::stats_lines(stats);
    assert_eq!(lines.len(), before + 1, "{program} left no statistics line (or more than one):\n{lines:#?}");
    lines[before].clone()
}

/// Each program, preloaded with `WBCACHE_STATS`, opens files another
/// preloaded process (a holder) wrote through its cache and still holds
/// open (its bytes are only in its cache: the kernel's files are empty):
/// the program must succeed and see every byte the holder's writes
/// acknowledged (as root, the holder's watcher hands the file to the
/// kernel when the program opens it), and leave a statistics line, which
/// only a program whose calls reach the library does; its figures show
/// the library served it (the held file itself the program uses through
/// the kernel, after the hand-over): `cp` copies it and a managed file
/// nobody holds into a managed directory, its copies written back
/// through the cache at its exit (`written_bytes_total`); `cat` also
/// reads the file nobody holds (`hits + misses`); `truncate` also extends
/// it (cached: `open_inodes`); `sqlite3` inserts a row into a database a
/// holder wrote (its journal is written through the cache). `dd` opens
/// its input and output on descriptors 0 and 1, which are the kernel's:
/// nothing of it moves the figures, and its line alone shows its opens
/// reached the library. So a preload that silently failed to load cannot
/// pass the other tests vacuously. Unprivileged (no watcher), the
/// programs must only succeed, and `sqlite3` is left out (it would find
/// the kernel's empty file, no database).
#[test]
fn each_program_goes_through_the_library() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("interposed");
    let (managed, plain_dir) = (scratch.dir("managed"), scratch.dir("plain"));
    let stats = plain_dir.join("stats.jsonl");
    let data = pattern(100_000, 6);
    let held = managed.join("held");
    let create = libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC;
    let holder = Holder::writing(&python, &held, &managed, create, &data);
    assert!(holder.dirty_bytes >= data.len() as u64, "the holder's bytes are not dirty in its cache");
    assert_eq!(std::fs::metadata(&held).unwrap().len(), 0, "the holder's bytes reached the kernel already");
    let seen = common::privileged();
    let program = |name: &str, args: &[&std::ffi::OsStr], stdout: Option<&Path>| -> Option<(String, String)> {
        let path = tool(name)?;
        let before = common::stats_lines(&stats).len();
        let mut cmd = preloaded(path, &[&managed], OPTIONS);
        cmd.env("WBCACHE_STATS", &stats).args(args);
        let group = match stdout {
            Some(file) => Group::spawn_to(cmd, std::fs::File::create(file).unwrap()),
            None => Group::spawn(cmd),
        };
        let out = group.wait(TIMEOUT).ok().no_complaints(&[]);
        Some((out.stdout, last_stats_line(&stats, before, name)))
    };

    let probe = managed.join("probe");
    let probe_data = b"a managed file nobody holds\n";
    std::fs::write(&probe, probe_data).unwrap();
    let copies = scratch.dir("managed/copies");
    if let Some((_, line)) = program("cp", &[held.as_os_str(), probe.as_os_str(), copies.as_os_str()], None) {
        assert!(stat(&line, "written_bytes_total") > 0, "cp did not write through the cache: {line}");
        assert_file(&copies.join("probe"), probe_data);
        if seen {
            assert_file(&copies.join("held"), &data);
        }
    }

    let dd_copy = plain_dir.join("dd-copy");
    let (input, output) = (format!("if={}", held.display()), format!("of={}", dd_copy.display()));
    if program("dd", &[input.as_ref(), output.as_ref()], None).is_some() && seen {
        assert_file(&dd_copy, &data);
    }

    let cat_out = plain_dir.join("cat-out");
    if let Some((_, line)) = program("cat", &[held.as_os_str(), probe.as_os_str()], Some(&cat_out)) {
        assert!(stat(&line, "hits") + stat(&line, "misses") > 0, "cat did not read through the cache: {line}");
        if seen {
            let mut expected = data.clone();
            expected.extend_from_slice(probe_data);
            assert_file(&cat_out, &expected);
        }
    }

    // Relative to the size it sees: the holder's 100,000 bytes, then 1000
    // zeros.
    let mut expected = data.clone();
    if let Some((_, line)) =
        program("truncate", &["-s".as_ref(), "+1000".as_ref(), held.as_os_str(), probe.as_os_str()], None)
    {
        assert!(stat(&line, "open_inodes") > 0, "truncate did not open a file through the cache: {line}");
        if seen {
            expected.resize(data.len() + 1000, 0);
            assert_file(&held, &expected);
        }
    }
    holder.finish();
    if seen {
        assert_file(&held, &expected);
    }

    if !seen {
        return println!("sqlite3 left out: without the watcher's privilege it would read an empty file");
    }
    let Some(sqlite3) = tool("sqlite3") else { return };
    let source = plain_dir.join("source.db");
    let mut cmd = common::plain(&sqlite3);
    cmd.arg(&source).arg("PRAGMA user_version = 42; CREATE TABLE t(x); INSERT INTO t VALUES('from the holder');");
    run(cmd, TIMEOUT).ok();
    let db = managed.join("db");
    let holder = Holder::writing(&python, &db, &managed, create, &std::fs::read(&source).unwrap());
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "the holder's database reached the kernel already");
    let sql = "PRAGMA user_version; SELECT x FROM t; INSERT INTO t VALUES('from sqlite3');";
    let (printed, line) = program("sqlite3", &[db.as_os_str(), sql.as_ref()], None).expect("sqlite3 was found");
    assert_eq!(printed.trim(), "42\nfrom the holder", "sqlite3 did not read the holder's database");
    assert!(stat(&line, "written_bytes_total") > 0, "sqlite3 did not write its journal through the cache: {line}");
    holder.finish();
    let mut cmd = common::plain(&sqlite3);
    cmd.arg(&db).arg("SELECT x FROM t;");
    let rows = run(cmd, TIMEOUT).ok().stdout;
    assert_eq!(rows.trim(), "from the holder\nfrom sqlite3", "the database after both");
}

/// `wbcache run` (the binary the workspace's `cargo test` builds) runs a
/// program with the library preloaded on the directories of `--paths`:
/// with `--stats FILE`, the program leaves one statistics line there,
/// which counts what it wrote through the cache.
#[test]
fn wbcache_run_runs_a_program_preloaded() {
    let (Some(python), Some(wbcache)) = (python(), wbcache_run()) else { return };
    let scratch = Scratch::new("run");
    let managed = scratch.dir("managed");
    let stats = scratch.dir("plain").join("stats.jsonl");
    let code = "import os, sys\n\
                fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)\n\
                os.write(fd, b'through wbcache run\\n' * 1000)\n";
    let file = managed.join("out");
    let mut cmd = Command::new(wbcache);
    // The library this `cargo test` built (`wbcache run` looks beside
    // itself by default, where `cargo build` leaves one that may be older).
    cmd.env("WBCACHE_PRELOAD", common::library()).arg("run").arg("--paths").arg(&managed);
    cmd.args(["--set", "capacity=16M", "--stats"]).arg(&stats);
    cmd.arg("--").arg(python).arg("-c").arg(code).arg(&file);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    let lines = common::stats_lines(&stats);
    assert_eq!(lines.len(), 1, "one statistics line (did the program run without the library?)\n{}", out.details());
    let written = stat(&lines[0], "written_bytes_total");
    assert!(written >= 20_000, "written through the cache: {written} bytes, not the program's 20,000\n{}", lines[0]);
    assert_eq!(stat(&lines[0], "capacity_bytes"), 16 * MIB as u64, "--set capacity=16M\n{}", lines[0]);
    assert_file(&file, &b"through wbcache run\n".repeat(1000));
}

/// The `wbcache` binary, or a skip: `cargo test -p wbcache-preload` alone
/// does not build it (the workspace's `cargo test` does, for the CLI's
/// tests).
fn wbcache_run() -> Option<std::path::PathBuf> {
    common::wbcache_binary()
        .or_else(|| common::missing("target/debug/wbcache is not built (run the workspace's tests)"))
}
