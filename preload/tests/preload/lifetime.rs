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
//! started them keeps its cache. A file one preloaded process caches is
//! never refused to another: opened for reading, appending or writing,
//! or truncated by path, while a holder has it open with bytes only its
//! cache has, the other process sees every byte the holder's writes
//! acknowledged (as root, the holder's watcher hands the file to the
//! kernel at the other's open), and the holder writes nothing stale back
//! when it exits; without the privilege the open still succeeds (run as
//! user nobody). Every file is checked by this process, which is not
//! preloaded.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_file, pattern, preloaded, python, run, tool, Holder, Scratch, OPTIONS, TIMEOUT};

const PROGRAM: &str = include_str!("../py/lifetime.py");
const C_PROGRAM: &str = include_str!("../c/lifetime.c");
const SPAWNER: &str = include_str!("../py/spawner.py");
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

/// A preloaded Python opening `file` with `flags`, reading it whole if
/// `flags` lets it, then writing `write` (at its position) if given:
/// `Ok(bytes read)`, or `Err(errno)` when the open failed. The library
/// must complain of nothing.
fn open_as_another(
    python: &Path,
    file: &Path,
    managed: &Path,
    flags: libc::c_int,
    write: Option<&[u8]>,
) -> Result<Vec<u8>, i32> {
    let code = "import os, sys\n\
                flags = int(sys.argv[2])\n\
                try:\n    fd = os.open(sys.argv[1], flags)\n\
                except OSError as e:\n    print('errno', e.errno)\n    sys.exit(0)\n\
                read = []\n\
                while flags & os.O_ACCMODE != os.O_WRONLY:\n\
                \x20   chunk = os.read(fd, 1 << 20)\n\
                \x20   if not chunk:\n        break\n\
                \x20   read.append(chunk)\n\
                if len(sys.argv) > 3:\n    os.write(fd, bytes.fromhex(sys.argv[3]))\n\
                os.close(fd)\n\
                print('opened', b''.join(read).hex())\n";
    let mut cmd = preloaded(python, &[managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(file).arg(flags.to_string());
    if let Some(bytes) = write {
        cmd.arg(hex(bytes));
    }
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    let printed = out.stdout.trim_end();
    if let Some(errno) = printed.strip_prefix("errno ") {
        return Err(errno.parse().unwrap());
    }
    match printed.strip_prefix("opened") {
        Some(read) => Ok(unhex(read.trim())),
        None => panic!("the second opener printed {printed:?}\n{}", out.details()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
}

/// The flags a holder creates its file with and writes it through.
const CREATE: libc::c_int = libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC;

/// A holder that wrote `data` to a new `file` through its cache: the
/// bytes are its cache's alone (dirty there, the kernel's file still
/// empty) when it returns.
fn writing_holder(python: &Path, setup: &Setup, data: &[u8]) -> Holder {
    let _ = std::fs::remove_file(&setup.file);
    let holder = Holder::writing(python, &setup.file, &setup.managed, CREATE, data);
    assert!(holder.dirty_bytes >= data.len() as u64, "the holder's bytes are not dirty in its cache");
    let on_disk = std::fs::metadata(&setup.file).unwrap().len();
    assert_eq!(on_disk, 0, "the holder's bytes reached the kernel before anyone opened the file");
    holder
}

/// Another preloaded process opens a file a preloaded holder wrote
/// through its cache and still holds, reading it (`O_RDONLY`, `O_RDWR`):
/// never refused, and, with the holder's watcher (root), it reads every
/// byte the holder's writes acknowledged; the holder, its file handed to
/// the kernel, writes nothing stale back when it exits. Unprivileged,
/// the documented fallback: the open succeeds, and the opener reads what
/// the kernel has (here nothing).
#[test]
fn another_process_reads_every_byte_a_holder_acknowledged() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-reader");
    let data = pattern(100_000, 5);
    for (name, flags) in [("O_RDONLY", libc::O_RDONLY), ("O_RDWR", libc::O_RDWR)] {
        let holder = writing_holder(&python, &setup, &data);
        let read = open_as_another(&python, &setup.file, &setup.managed, flags, None);
        let read = read.unwrap_or_else(|errno| panic!("open({name}) of a held file failed: errno {errno}"));
        if common::privileged() {
            assert!(read == data, "open({name}): read {} bytes, not the holder's {}", read.len(), data.len());
        }
        holder.finish();
        assert_file(&setup.file, &data);
    }
}

/// An appender (`O_WRONLY | O_APPEND`, another preloaded process) of a
/// file a holder wrote through its cache and holds: opened, and its bytes
/// land after every byte the holder acknowledged, none overwritten, also
/// once the holder exited. Unprivileged: the open succeeds (where the
/// bytes land is then the kernel's and the holder's write-back's).
#[test]
fn an_appender_writes_after_the_holders_bytes() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-appender");
    let data = pattern(100_000, 6);
    let holder = writing_holder(&python, &setup, &data);
    let appended = b"appended by another process";
    let opened = open_as_another(&python, &setup.file, &setup.managed, libc::O_WRONLY | libc::O_APPEND, Some(appended));
    assert_eq!(opened, Ok(Vec::new()), "open(O_WRONLY | O_APPEND) of a held file");
    if !common::privileged() {
        return;
    }
    let mut expected = data.clone();
    expected.extend_from_slice(appended);
    assert_file(&setup.file, &expected);
    assert!(holder.reread() == expected, "the holder does not read the appended bytes after its own");
    holder.finish();
    assert_file(&setup.file, &expected);
}

/// Two preloaded readers hold a file open, having read it through their
/// caches; a preloaded writer opens it (`O_WRONLY`), writes and exits:
/// never refused, and, with the watchers (root), both readers then read
/// the writer's bytes through the descriptors they hold.
#[test]
fn a_writer_opens_a_file_readers_hold() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-readers");
    std::fs::write(&setup.file, b"shared by readers").unwrap();
    let readers =
        [Holder::reading(&python, &setup.file, &setup.managed), Holder::reading(&python, &setup.file, &setup.managed)];
    for reader in &readers {
        assert_eq!(reader.read, b"shared by readers");
    }
    let opened = open_as_another(&python, &setup.file, &setup.managed, libc::O_WRONLY, Some(b"SHARED"));
    assert_eq!(opened, Ok(Vec::new()), "a writer while other processes read");
    assert_file(&setup.file, b"SHARED by readers");
    if !common::privileged() {
        return;
    }
    for reader in readers {
        assert_eq!(String::from_utf8_lossy(&reader.reread()), "SHARED by readers", "a reader after the writer");
        reader.finish();
    }
    assert_file(&setup.file, b"SHARED by readers");
}

/// `truncate(2)` of a path (another preloaded process) while a holder
/// holds a file it wrote through its cache: never refused; with the
/// holder's watcher (root), the holder's bytes go to the kernel first
/// and the truncation applies to them: 4 bytes on disk when the call
/// returns, still 4 after the holder exited (it writes nothing stale
/// back).
#[test]
fn truncating_a_held_file_cuts_the_holders_bytes() {
    let Some(python) = python() else { return };
    let setup = setup("lifetime-truncate");
    let holder = writing_holder(&python, &setup, b"0123456789");
    let code = "import os, sys\n\
                try:\n    os.truncate(sys.argv[1], 4)\n    print('truncated')\n\
                except OSError as e:\n    print('errno', e.errno)\n";
    let mut cmd = preloaded(&python, &[&setup.managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(&setup.file);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(out.stdout.trim(), "truncated", "truncate of a held file\n{}", out.details());
    if !common::privileged() {
        return;
    }
    assert_file(&setup.file, b"0123");
    assert_eq!(holder.reread(), b"0123", "the holder after the truncation");
    holder.finish();
    assert_file(&setup.file, b"0123");
}

/// The holder and the opener of `without_privilege_a_second_opener_is_not_refused`:
/// `hold FILE` creates FILE, writes a line to it and holds it until
/// SIGTERM (then exits normally); `open FILE` opens it `O_RDWR` and says
/// how many bytes it read, or the open's errno.
const UNPRIVILEGED: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    if (strcmp(argv[1], "hold") == 0) {
        signal(SIGTERM, on_term);
        int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, "held by nobody\n", 15) != 15) { perror(argv[2]); return 1; }
        printf("held\n");
        fflush(stdout);
        while (!stop) usleep(10000);
        return 0;
    }
    int fd = open(argv[2], O_RDWR);
    if (fd < 0) { printf("errno %d\n", errno); return 0; }
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf);
    printf("opened %zd\n", n);
    return close(fd) == 0 ? 0 : 1;
}
"#;

/// Without `CAP_SYS_ADMIN` the library watches nothing (no fanotify): a
/// file a process caches is seen by others as the kernel has it, and a
/// second process opening it is not refused but opens it through the
/// kernel (docs/run.md). Run as user nobody (`setpriv`) when the test
/// runs as root, else as the test's own user: the opener's open
/// succeeds and reads nothing (the holder's line is still only in its
/// cache: no hand-over happened), and the holder's line is on disk once
/// it exited.
#[test]
fn without_privilege_a_second_opener_is_not_refused() {
    let Some(cc) = tool("cc") else { return };
    let setup = setup("lifetime-unprivileged");
    let build = setup.scratch.dir("build");
    let (source, program) = (build.join("unprivileged.c"), build.join("unprivileged"));
    std::fs::write(&source, UNPRIVILEGED).unwrap();
    let mut cmd = Command::new(cc);
    cmd.args(["-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-o"]).arg(&program).arg(&source);
    run(cmd, TIMEOUT).ok();
    // As nobody: setpriv, then env (so that setpriv itself, running as
    // root, is not preloaded), then the program.
    let wrapper = if common::privileged() {
        let (Some(setpriv), Some(env)) = (tool("setpriv"), tool("env")) else { return };
        std::os::unix::fs::chown(&setup.managed, Some(65534), Some(65534)).unwrap();
        Some((setpriv, env))
    } else {
        None
    };
    let unprivileged = |mode: &str| {
        let mut cmd = match &wrapper {
            Some((setpriv, env)) => {
                let mut cmd = common::plain(setpriv);
                cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(env);
                cmd.arg(format!("LD_PRELOAD={}", common::library().display()));
                cmd.arg(format!("WBCACHE_PATHS={}", setup.managed.display()));
                cmd.arg(format!("WBCACHE_OPTIONS={}", common::HOLD_OPTIONS)).arg(&program);
                cmd
            }
            None => preloaded(&program, &[&setup.managed], common::HOLD_OPTIONS),
        };
        cmd.arg(mode).arg(&setup.file);
        cmd
    };
    let mut holder = common::Group::spawn(unprivileged("hold"));
    let said = holder.lines().recv_timeout(TIMEOUT);
    if said.as_deref() != Ok("held") {
        holder.kill();
        panic!("the unprivileged holder did not start: {said:?}\n{}", holder.wait(TIMEOUT).details());
    }
    let out = run(unprivileged("open"), TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(out.stdout.trim(), "opened 0", "the second opener, unprivileged\n{}", out.details());
    holder.signal(libc::SIGTERM);
    holder.wait(TIMEOUT).ok().no_complaints(&[]);
    assert_file(&setup.file, b"held by nobody\n");
}
