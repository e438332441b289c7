//! The process's lifetime under the preload. Data written and never
//! synced (5 MiB, more than the cache's dirty limit, so some of it is
//! still cached at the end) must be in the file when the process is gone,
//! however it ends: the end of a Python script, `sys.exit`, `os._exit`
//! (the C library's `_exit`, which skips `atexit` handlers), `os.execv`
//! into another program (which reads it at once: `cmp` against a copy of
//! the expected bytes, preloaded too), and a C program's return from
//! `main`, `exit`, `_exit`, `_Exit` and `execve`. A forked child reads what
//! its parent wrote before the fork; so do programs started with
//! `subprocess` (vfork and exec) and `posix_spawn`, and the program that
//! started them keeps its cache. A file one preloaded process caches
//! for writing is refused to another (EBUSY, with a line on stderr naming
//! the file) until the first is gone, while readers share a file. Every
//! file is checked by this process, which is not preloaded.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_file, hold, pattern, preloaded, python, refusal, run, tool, Scratch, OPTIONS, TIMEOUT};

const PROGRAM: &str = include_str!("py/lifetime.py");
const C_PROGRAM: &str = include_str!("c/lifetime.c");
const SPAWNER: &str = include_str!("py/spawner.py");
const LEN: usize = 5 * common::MIB + 1234;

/// A scratch directory with a managed subdirectory, the file the program
/// writes there, and an unmanaged copy of what it must hold (for `cmp`).
struct Setup {
    scratch: Scratch,
    managed: PathBuf,
    file: PathBuf,
    reference: PathBuf,
}

fn setup(name: &str) -> Setup {
    let scratch = Scratch::new(name);
    let managed = scratch.dir("managed");
    let reference = scratch.dir("plain").join("expected");
    std::fs::write(&reference, pattern(LEN, 77)).unwrap();
    Setup { file: managed.join("data"), managed, reference, scratch }
}

/// Runs `py/lifetime.py MODE FILE LEN` (then, for `execv`, `cmp FILE
/// EXPECTED`) preloaded; it must exit with `status`.
fn python_ends(mode: &str, status: i32) -> Option<Setup> {
    let (python, cmp) = (python()?, tool("cmp")?);
    let setup = setup(&format!("lifetime-py-{mode}"));
    let script = setup.scratch.script("lifetime.py", PROGRAM);
    let mut cmd = preloaded(&python, &[&setup.managed], OPTIONS);
    cmd.arg(script).arg(mode).arg(&setup.file).arg(LEN.to_string());
    if mode == "execv" {
        cmd.arg(&cmp).arg(&setup.file).arg(&setup.reference);
    }
    let out = run(cmd, TIMEOUT).no_complaints(&[]);
    assert_eq!(out.status.code(), Some(status), "{mode}\n{}", out.details());
    Some(setup)
}

#[test]
fn unsynced_data_survives_the_end_of_a_script() {
    let Some(setup) = python_ends("end", 0) else { return };
    assert_file(&setup.file, &pattern(LEN, 77));
}

#[test]
fn unsynced_data_survives_sys_exit() {
    let Some(setup) = python_ends("sys.exit", 3) else { return };
    assert_file(&setup.file, &pattern(LEN, 77));
}

#[test]
fn unsynced_data_survives_os_exit() {
    let Some(setup) = python_ends("os._exit", 0) else { return };
    assert_file(&setup.file, &pattern(LEN, 77));
}

/// The program execv'd is `cmp`: its status (0) says it read every byte.
#[test]
fn unsynced_data_is_written_back_before_execv() {
    let Some(setup) = python_ends("execv", 0) else { return };
    assert_file(&setup.file, &pattern(LEN, 77));
}

#[test]
fn a_forked_child_reads_what_its_parent_wrote() {
    let Some(setup) = python_ends("fork", 0) else { return };
    let mut expected = pattern(LEN, 77);
    expected.extend_from_slice(&pattern(1000, 78));
    assert_file(&setup.file, &expected);
}

/// A program that starts others (subprocess: vfork and exec; posix_spawn)
/// keeps its cache, and the programs it starts (not preloaded) read what
/// it wrote and did not sync.
#[test]
fn programs_started_see_the_data_and_the_starter_keeps_its_cache() {
    let (Some(python), Some(cat)) = (python(), tool("cat")) else { return };
    let setup = setup("lifetime-spawn");
    let script = setup.scratch.script("spawner.py", SPAWNER);
    let mut cmd = preloaded(&python, &[&setup.managed], OPTIONS);
    cmd.arg(script).arg(&setup.file).arg(cat);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(out.stdout.trim(), "ok", "{}", out.details());
    let mut expected: Vec<u8> = (91..94).flat_map(|seed| pattern(70_000, seed)).collect();
    expected.extend_from_slice(&pattern(1000, 82));
    assert_file(&setup.file, &expected);
    assert_file(&setup.file.with_extension("2"), &pattern(3000, 83));
}

/// Compiles `c/lifetime.c` into `dir` with `$CC` (or `cc`).
fn c_program(dir: &Path) -> Option<PathBuf> {
    let cc = match std::env::var("CC") {
        Ok(cc) => PathBuf::from(cc),
        Err(_) => tool("cc")?,
    };
    let (source, exe) = (dir.join("lifetime.c"), dir.join("lifetime"));
    std::fs::write(&source, C_PROGRAM).unwrap();
    let mut cmd = Command::new(cc);
    cmd.args(["-std=c11", "-D_DEFAULT_SOURCE", "-O2", "-Wall", "-Werror", "-o"]).arg(&exe).arg(&source);
    run(cmd, TIMEOUT).ok();
    Some(exe)
}

/// The C program's ends: return from main, exit, _exit, _Exit, execve
/// (into `cmp`, which must find every byte).
#[test]
fn unsynced_data_survives_every_end_of_a_c_program() {
    let Some(cmp) = tool("cmp") else { return };
    let setup = setup("lifetime-c");
    let Some(program) = c_program(&setup.scratch.dir("build")) else { return };
    for mode in ["return", "exit", "_exit", "_Exit", "execve"] {
        let _ = std::fs::remove_file(&setup.file);
        let mut cmd = preloaded(&program, &[&setup.managed], OPTIONS);
        cmd.arg(mode).arg(&setup.file).arg(LEN.to_string());
        if mode == "execve" {
            cmd.arg(&cmp).arg(&setup.file).arg(&setup.reference);
        }
        let out = run(cmd, TIMEOUT).no_complaints(&[]);
        assert!(out.status.success(), "mode {mode}: {}\n{}", out.status, out.details());
        assert_file(&setup.file, &pattern(LEN, 77));
    }
}

/// A preloaded Python opening `file` with `flags` (a Python expression):
/// what it printed ("opened" or "errno N") and its stderr.
fn try_open(python: &Path, file: &Path, managed: &Path, flags: &str) -> (String, String) {
    let code = format!(
        "import os, sys\n\
         try:\n    os.open(sys.argv[1], {flags})\n    print('opened')\n\
         except OSError as e:\n    print('errno', e.errno)\n"
    );
    let mut cmd = preloaded(python, &[managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(file);
    let out = run(cmd, TIMEOUT).ok();
    (out.stdout.trim().to_string(), out.stderr)
}

#[test]
fn a_file_cached_for_writing_is_refused_to_another_process() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-busy");
    std::fs::write(&setup.file, b"held").unwrap();
    let holder = hold(&python, &setup.file, &setup.managed, "os.O_RDWR");
    for flags in ["os.O_RDONLY", "os.O_WRONLY | os.O_APPEND", "os.O_RDWR | os.O_TRUNC"] {
        let (printed, stderr) = try_open(&python, &setup.file, &setup.managed, flags);
        assert_eq!(printed, format!("errno {}", libc::EBUSY), "open({flags}) of a file another process caches");
        assert!(stderr.contains(&refusal(&setup.file)), "no line naming the file:\n{stderr}");
    }
    drop(holder);
    let (printed, stderr) = try_open(&python, &setup.file, &setup.managed, "os.O_RDWR");
    assert_eq!(printed, "opened", "open after the holder ended\n{stderr}");
    assert_file(&setup.file, b"held");
}

#[test]
fn readers_share_a_file_a_writer_is_refused() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-readers");
    std::fs::write(&setup.file, b"shared").unwrap();
    let reader = hold(&python, &setup.file, &setup.managed, "os.O_RDONLY");
    let (printed, stderr) = try_open(&python, &setup.file, &setup.managed, "os.O_RDONLY");
    assert_eq!(printed, "opened", "a second reader\n{stderr}");
    let (printed, stderr) = try_open(&python, &setup.file, &setup.managed, "os.O_WRONLY");
    assert_eq!(printed, format!("errno {}", libc::EBUSY), "a writer while another process reads\n{stderr}");
    assert!(stderr.contains(&refusal(&setup.file)), "no line naming the file:\n{stderr}");
    drop(reader);
}

/// `truncate(2)` of a path goes through the file's lock as an open for
/// writing does: refused (EBUSY) while another process caches the file,
/// and, once it is free, applied and on disk when the call returns (the
/// kernel sees the new length at once, as after the kernel's own call).
#[test]
fn truncating_a_path_takes_the_files_lock() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-truncate");
    std::fs::write(&setup.file, b"0123456789").unwrap();
    let code = "import os, sys\n\
                try:\n    os.truncate(sys.argv[1], 4)\n    print('truncated')\n\
                except OSError as e:\n    print('errno', e.errno)\n";
    let truncate = || {
        let mut cmd = preloaded(&python, &[&setup.managed], OPTIONS);
        cmd.arg("-c").arg(code).arg(&setup.file);
        let out = run(cmd, TIMEOUT).ok();
        (out.stdout.trim().to_string(), out.stderr)
    };
    let holder = hold(&python, &setup.file, &setup.managed, "os.O_RDONLY");
    let (printed, stderr) = truncate();
    assert_eq!(printed, format!("errno {}", libc::EBUSY), "truncate of a file another process caches\n{stderr}");
    assert!(stderr.contains(&refusal(&setup.file)), "no line naming the file:\n{stderr}");
    assert_file(&setup.file, b"0123456789");
    drop(holder);
    let (printed, stderr) = truncate();
    assert_eq!(printed, "truncated", "truncate once the file is free\n{stderr}");
    assert_file(&setup.file, b"0123");
}
