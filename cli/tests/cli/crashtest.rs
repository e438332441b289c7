//! `wbcache crashtest` end to end, as its users run it: small programs
//! with a known crash bug and their fixed forms, each with its own
//! checker, classified under both persistence models; SQLite in its
//! journal modes; the recorder's self-check catching a write it did not
//! see; bad input. The programs are Python (`os` calls, which go through
//! the C library the preload library interposes).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{in_ci, preload_library, python_and_preload_ready, scratch, wbcache};

/// A test program: its source, what it finds in its directory first, its
/// checker, and whether each model has a violation.
struct Case {
    name: &'static str,
    program: &'static str,
    /// Files of the directory before the run.
    initial: &'static [(&'static str, &'static [u8])],
    check: &'static str,
    posix_violation: bool,
    ext4_violation: bool,
}

/// 300 lines of the new contents, as the programs write them.
const NEW: &str = "import os, sys\nd = sys.argv[1]\nNEW = b'new contents\\n' * 300\n";

/// What the checkers of the rename programs compare with: the file is
/// the old contents or the new, whole; after "saved", the new.
const RENAME_CHECK: &str = "python3 -c \"
import os, sys
new = b'new contents\\n' * 300
saved = b'saved' in open(os.environ['WBCACHE_CRASH_STDOUT'], 'rb').read()
a = open('a', 'rb').read() if os.path.exists('a') else None
ok = a in (new, b'old contents\\n') or (a is None and not saved)
sys.exit(0 if ok and (a == new or not saved) else 1)
\"";

const WRITE_TMP: &str = "fd = os.open(f'{d}/a.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\nos.write(fd, NEW)\n";

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "rename-new-name-without-fsync",
            program: "os.close(fd)\nos.rename(f'{d}/a.tmp', f'{d}/a')\nprint('saved', flush=True)\n",
            initial: &[],
            check: RENAME_CHECK,
            posix_violation: true,
            ext4_violation: true,
        },
        Case {
            name: "rename-over-existing-without-fsync",
            program: "os.close(fd)\nos.rename(f'{d}/a.tmp', f'{d}/a')\n",
            initial: &[("a", b"old contents\n")],
            check: RENAME_CHECK,
            posix_violation: true,
            ext4_violation: false,
        },
        Case {
            name: "rename-with-fsync-of-file-and-directory",
            program: "os.fsync(fd)\nos.close(fd)\nos.rename(f'{d}/a.tmp', f'{d}/a')\n\
                      dfd = os.open(d, os.O_RDONLY)\nos.fsync(dfd)\nprint('saved', flush=True)\n",
            initial: &[("a", b"old contents\n")],
            check: RENAME_CHECK,
            posix_violation: false,
            ext4_violation: false,
        },
        Case {
            name: "log-header-before-records",
            program: LOG_HEADER_FIRST,
            initial: &[],
            check: LOG_HEADER_CHECK,
            posix_violation: true,
            ext4_violation: true,
        },
        Case {
            name: "checksummed-append-log",
            program: APPEND_LOG,
            initial: &[],
            check: APPEND_LOG_CHECK,
            posix_violation: false,
            ext4_violation: false,
        },
    ]
}

/// A log of 64-byte records (56 bytes, then their sum) whose 8-byte
/// header, the record count, is written before the record is synced.
const LOG_HEADER_FIRST: &str = "\
def rec(i):
    body = bytes([i]) * 56
    return body + sum(body).to_bytes(8, 'little')
fd = os.open(f'{d}/log', os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, (0).to_bytes(8, 'little'), 0)
os.fsync(fd)
dfd = os.open(d, os.O_RDONLY)
os.fsync(dfd)
for i in range(1, 6):
    os.pwrite(fd, rec(i), 8 + (i - 1) * 64)
    os.pwrite(fd, i.to_bytes(8, 'little'), 0)
os.fsync(fd)
print('done', flush=True)
";

const LOG_HEADER_CHECK: &str = "python3 -c \"
import os, sys
if not os.path.exists('log'): sys.exit(0)
b = open('log', 'rb').read()
n = int.from_bytes(b[:8], 'little') if len(b) >= 8 else 0
for i in range(n):
    r = b[8 + i * 64: 8 + (i + 1) * 64]
    if len(r) < 64 or sum(r[:56]) != int.from_bytes(r[56:], 'little') or r[0] != i + 1: sys.exit(1)
\"";

/// An append-only log of checksummed records, each synced before it is
/// acknowledged; the directory synced after the log's creation.
const APPEND_LOG: &str = "\
def rec(i):
    body = bytes([i]) * 56
    return body + sum(body).to_bytes(8, 'little')
fd = os.open(f'{d}/log', os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
dfd = os.open(d, os.O_RDONLY)
os.fsync(dfd)
for i in range(1, 6):
    os.write(fd, rec(i))
    os.fsync(fd)
    print(f'acked {i}', flush=True)
";

const APPEND_LOG_CHECK: &str = "python3 -c \"
import os, sys
acked = open(os.environ['WBCACHE_CRASH_STDOUT']).read().count('acked')
b = open('log', 'rb').read() if os.path.exists('log') else b''
valid = 0
while len(b) >= (valid + 1) * 64:
    r = b[valid * 64:(valid + 1) * 64]
    if sum(r[:56]) != int.from_bytes(r[56:], 'little') or r[0] != valid + 1: break
    valid += 1
sys.exit(0 if valid >= acked else 1)
\"";

/// What one crash test run said.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `wbcache crashtest` on `program` (Python) in a fresh directory.
fn crashtest(test: &Path, initial: &[(&str, &[u8])], program: &str, extra: &[&str], check: &str) -> Outcome {
    let dir = test.join("files");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in initial {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let source = test.join("program.py");
    std::fs::write(&source, format!("{NEW}{program}")).unwrap();
    let out = crashtest_command(&dir)
        .args(extra)
        .args(["--check", check, "--"])
        .arg("python3")
        .arg(&source)
        .arg(&dir)
        .output()
        .expect("run wbcache crashtest");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `wbcache crashtest --paths DIR` with the preload library this build
/// made, its work directory beside `dir` (a run with a violation keeps
/// it: the test's directory holds it, not the system's).
fn crashtest_command(dir: &Path) -> Command {
    let work = dir.with_file_name("work");
    let _ = std::fs::remove_dir_all(&work);
    let mut command = wbcache();
    command.arg("crashtest").arg("--paths").arg(dir).arg("--work").arg(&work).stdin(Stdio::null());
    if let Some(lib) = preload_library() {
        command.env("WBCACHE_PRELOAD", lib);
    }
    command
}

/// The five programs, each under both models: a violation exactly where
/// the bug is, every run.
#[test]
fn small_programs_are_classified_under_both_models() {
    if !python_and_preload_ready() {
        return;
    }
    let test = scratch("crashtest-cases");
    for case in cases() {
        let program = format!("{WRITE_TMP}{}", case.program);
        let program = if case.name.starts_with("rename") { program } else { case.program.to_string() };
        for (model, violation) in [("posix", case.posix_violation), ("ext4-ordered", case.ext4_violation)] {
            let out = crashtest(&test, case.initial, &program, &["--model", model], case.check);
            let expected = if violation { 1 } else { 0 };
            assert_eq!(
                out.code,
                Some(expected),
                "{} under {model}: stdout:\n{}\nstderr:\n{}",
                case.name,
                out.stdout,
                out.stderr
            );
            if violation {
                assert!(out.stdout.contains("violation 1 of") && out.stdout.contains("LOST"), "{}", out.stdout);
                assert!(out.stdout.contains("rebuild it: wbcache crashtest --rebuild"), "{}", out.stdout);
            }
        }
    }
    std::fs::remove_dir_all(&test).unwrap();
}

/// A violation's rebuild command makes its state again, which fails the
/// checker again; the work directory is kept for it.
#[test]
fn a_violation_rebuilds_into_a_directory() {
    if !python_and_preload_ready() {
        return;
    }
    let test = scratch("crashtest-rebuild");
    let program =
        format!("{WRITE_TMP}os.close(fd)\nos.rename(f'{{d}}/a.tmp', f'{{d}}/a')\nprint('saved', flush=True)\n");
    let json = test.join("report.json");
    let json_arg = json.to_string_lossy().into_owned();
    let out = crashtest(&test, &[], &program, &["--json", &json_arg], RENAME_CHECK);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["model"], "posix");
    let v = &report["violations"][0];
    let rebuild = v["rebuild"].as_str().unwrap().to_string();
    let into = test.join("state");
    let args: Vec<String> = rebuild.split(' ').skip(1).map(|a| a.replace("DIR", &into.to_string_lossy())).collect();
    let made = wbcache().args(&args).output().unwrap();
    assert_eq!(made.status.code(), Some(0), "{}", String::from_utf8_lossy(&made.stderr));
    let check = Command::new("sh")
        .arg("-c")
        .arg(RENAME_CHECK)
        .current_dir(&into)
        .env("WBCACHE_CRASH_STDOUT", PathBuf::from(format!("{}.stdout", into.display())))
        .status()
        .unwrap();
    assert!(!check.success(), "the rebuilt state fails its checker again");
    // What the rebuild refuses, exit status 2 and one line each: a point
    // past the trace, a call not pending there, a torn write without its
    // bytes, a directory not filled yet, a work directory that is not one.
    let work = report["work"].as_str().unwrap().to_string();
    let other = test.join("other").to_string_lossy().into_owned();
    let into = into.to_string_lossy().into_owned();
    for (args, says) in [
        (vec!["--rebuild", &work, "--point", "999", "--into", &other], "the trace has"),
        (vec!["--rebuild", &work, "--point", "3", "--lost", "2", "--into", &other], "not pending"),
        (vec!["--rebuild", &work, "--point", "3", "--torn", "1", "--into", &other], "CALL:BYTES"),
        (vec!["--rebuild", &work, "--point", "3", "--into", &into], "not empty"),
        (vec!["--rebuild", &other, "--point", "3", "--into", &other], "not a kept crash test"),
    ] {
        let out = wbcache().arg("crashtest").args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&test).unwrap();
}

/// A write the recorder cannot see (a raw system call) fails the run's
/// self-check; a shared writable mapping is refused unless left out.
#[test]
fn what_escapes_the_recorder_stops_the_run() {
    if !python_and_preload_ready() {
        return;
    }
    let test = scratch("crashtest-escapes");
    let raw = "import ctypes\nfd = os.open(f'{d}/a', os.O_WRONLY | os.O_CREAT, 0o644)\n\
               ctypes.CDLL(None).syscall(1, fd, b'unseen', 6)\nos.close(fd)\n";
    let out = crashtest(&test, &[], raw, &[], "true");
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("a change escaped the recorder"), "{}", out.stderr);
    let mapped = "import mmap\nfd = os.open(f'{d}/m', os.O_RDWR | os.O_CREAT, 0o644)\nos.ftruncate(fd, 4096)\n\
                  m = mmap.mmap(fd, 4096)\nm[0:2] = b'hi'\nm.close()\nos.close(fd)\n";
    let out = crashtest(&test, &[], mapped, &[], "true");
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--ignore-mapped"), "{}", out.stderr);
    let out = crashtest(&test, &[], mapped, &["--ignore-mapped"], "test ! -e m");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    std::fs::remove_dir_all(&test).unwrap();
}

/// Bad input: one line, exit status 2, the program never run.
#[test]
fn bad_input_is_refused_before_the_program_runs() {
    let test = scratch("crashtest-bad");
    let marker = test.join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--model", "zfs", "--check", "true"], "--model zfs: not a model"),
        (vec!["--states", "0", "--check", "true"], "above 0"),
        (vec!["--check", " "], "--check: an empty command"),
        (vec!["--paths", "/nonexistent-dir", "--check", "true"], "--paths /nonexistent-dir"),
    ];
    for (args, says) in cases {
        let out = wbcache().arg("crashtest").args(&args).args(touch).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!marker.exists(), "{args:?}: the program ran");
    }
    std::fs::remove_dir_all(&test).unwrap();
}

/// SQLite through the unmodified `sqlite3` shell: transactions
/// acknowledged on standard output, a checker that wants the database
/// intact and every acknowledged transaction in it.
fn sqlite_run(test: &Path, pragmas: &str, model: &str) -> Outcome {
    let dir = test.join("files");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = test.join("txns.sh");
    std::fs::write(
        &script,
        format!(
            "{{ echo \"{pragmas}\"; echo 'CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);'\n\
             for i in 1 2 3 4 5 6 7 8 9 10; do echo \"BEGIN; INSERT INTO t(v) VALUES (hex(randomblob(300))); COMMIT; \
             SELECT 'acked ' || $i;\"; done; }} | sqlite3 \"$1/t.db\"\n"
        ),
    )
    .unwrap();
    let check = test.join("check.sh");
    std::fs::write(&check, SQLITE_CHECK).unwrap();
    let check = format!("sh {}", check.display());
    let out = crashtest_command(&dir)
        .args(["--model", model, "--ignore-mapped", "--check", &check, "--", "sh"])
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The SQLite checker: the database intact, and at least as many rows as
/// transactions acknowledged (none acknowledged: anything goes).
const SQLITE_CHECK: &str = r#"acked=$(grep -c acked "$WBCACHE_CRASH_STDOUT")
[ "$acked" = 0 ] && exit 0
[ -e t.db ] || { echo "no database, $acked acknowledged"; exit 1; }
out=$(sqlite3 t.db 'PRAGMA integrity_check; SELECT count(*) FROM t;' 2>&1) || { echo "$out"; exit 1; }
[ "$(echo "$out" | head -1)" = ok ] || { echo "$out"; exit 1; }
rows=$(echo "$out" | tail -1)
[ "$rows" -ge "$acked" ] || { echo "$rows rows, $acked acknowledged"; exit 1; }
"#;

/// WAL with `synchronous=FULL` and DELETE with `synchronous=EXTRA` keep
/// every acknowledged transaction; `synchronous=OFF` does not, nor does
/// DELETE with `synchronous=FULL`, which does not sync the directory
/// after it deletes the journal: a crash can bring the last
/// transaction's journal back, and its rollback loses the transaction.
#[test]
fn sqlite_journal_modes_under_posix() {
    let has_sqlite = Command::new("sqlite3").arg("-version").output().is_ok_and(|o| o.status.success());
    if !has_sqlite {
        assert!(!in_ci(), "sqlite3 is not installed (CI=true requires it)");
        eprintln!("skipped: sqlite3 is not installed");
        return;
    }
    if !python_and_preload_ready() {
        return;
    }
    let test = scratch("crashtest-sqlite");
    for (pragmas, violation) in [
        ("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", false),
        ("PRAGMA journal_mode=DELETE; PRAGMA synchronous=EXTRA;", false),
        ("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;", true),
        ("PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;", true),
    ] {
        let out = sqlite_run(&test, pragmas, "posix");
        assert_eq!(out.code, Some(i32::from(violation)), "{pragmas}\n{}\n{}", out.stdout, out.stderr);
    }
    std::fs::remove_dir_all(&test).unwrap();
}

/// The recorder follows what common tools do (redirections, appends,
/// `cp`'s copies, `dd`, `truncate`, hard links, a directory moved, a
/// removal, `fallocate`, `tar`, `sync`): the replay of their trace gives
/// the directory they left, byte for byte, or the run would stop.
#[test]
fn common_tools_are_recorded_whole() {
    if !python_and_preload_ready() {
        return;
    }
    let test = scratch("crashtest-tools");
    let dir = test.join("files");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("old"), "seed file\n").unwrap();
    let script = test.join("tools.sh");
    let tar = test.join("t.tar");
    std::fs::write(
        &script,
        format!(
            "set -e\nd=$1\nmkdir -p \"$d/sub/deeper\"\nprintf 'line %s\\n' 1 2 3 > \"$d/sub/a\"\n\
             echo appended >> \"$d/sub/a\"\ncp \"$d/sub/a\" \"$d/sub/deeper/b\"\ncat /etc/services > \"$d/big\"\n\
             cp \"$d/big\" \"$d/big2\"\ndd if=/dev/zero of=\"$d/zeros\" bs=4096 count=3 status=none\n\
             truncate -s 5000 \"$d/zeros\"\nln \"$d/sub/a\" \"$d/hard\"\nmv \"$d/sub/deeper\" \"$d/moved\"\nrm \"$d/old\"\n\
             python3 -c \"import os; fd=os.open('$d/alloc', os.O_RDWR|os.O_CREAT); os.posix_fallocate(fd, 0, 8192); \
             os.pwrite(fd, b'x', 100); os.fsync(fd)\"\n\
             tar -C \"$d\" -cf {tar} sub && mkdir \"$d/untar\" && tar -C \"$d/untar\" -xf {tar}\nsync\necho done\n",
            tar = tar.display()
        ),
    )
    .unwrap();
    let out = crashtest_command(&dir)
        .args(["--check", "grep -q line sub/a || true", "--", "sh"])
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("0 violation(s)"), "{stderr}");
    assert_eq!(std::fs::read(dir.join("big")).unwrap(), std::fs::read(dir.join("big2")).unwrap());
    std::fs::remove_dir_all(&test).unwrap();
}
