//! What the preload tests share: where the built library (and the
//! `wbcache` binary) are, scratch directories, the programs the tests run
//! (found on `PATH`; a missing one skips its test with a printed reason,
//! except under `CI=true`, where it fails), and running a program with
//! the library preloaded: in its own process group, with a timeout after
//! which the whole group is killed, its output captured.

// Not every part is used by the tests of today.
#![allow(dead_code)]

use std::cell::Cell;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

pub const MIB: usize = 1 << 20;

/// The cache most tests run with: small enough that a few MiB of data
/// are written back and evicted while a program runs, not only at exit.
pub const OPTIONS: &str = "capacity=12M,dirty_limit=4M";

/// How long a program a test runs may take (the machine may be busy).
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Where the test executables are: `target/debug/deps` (each is
/// `deps/NAME-HASH`).
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    assert!(deps.ends_with("deps"), "the test executable is not in a deps directory: {}", exe.display());
    deps.to_path_buf()
}

/// The profile's directory (`target/debug`), where binaries are.
pub fn target_dir() -> PathBuf {
    deps_dir().parent().expect("the profile directory").to_path_buf()
}

/// `libwbcache_preload.so` as `cargo test` built it for these tests: in
/// `deps` beside them (the package's library, a dependency of its
/// integration tests, is built with every crate type, the cdylib too).
/// `target/debug/libwbcache_preload.so`, which `cargo build` puts there,
/// may be older; it is the fallback.
pub fn library() -> PathBuf {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            let candidates = [deps_dir().join("libwbcache_preload.so"), target_dir().join("libwbcache_preload.so")];
            let found = candidates.iter().find(|p| p.is_file()).cloned();
            found.unwrap_or_else(|| {
                panic!(
                    "libwbcache_preload.so is in neither {} nor {}: `cargo test -p wbcache-preload` builds it \
                     (the package's cdylib, beside the tests); was it deleted?",
                    candidates[0].display(),
                    candidates[1].display()
                )
            })
        })
        .clone()
}

/// The `wbcache` binary beside the tests, if the workspace's `cargo test`
/// (or a build of wbcache-cli) made it.
pub fn wbcache_binary() -> Option<PathBuf> {
    let bin = target_dir().join("wbcache");
    bin.is_file().then_some(bin)
}

/// Whether missing tools fail the tests instead of skipping them.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Skips (prints why and returns `None`) or, under `CI=true`, fails.
pub fn missing<T>(what: &str) -> Option<T> {
    assert!(!in_ci(), "{what} (CI=true: missing tools fail the tests)");
    println!("skipped: {what}");
    None
}

/// `name`'s path on `PATH`, or a skip (a failure under `CI=true`).
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file());
    found.or_else(|| missing(&format!("{name} is not installed")))
}

/// The Python interpreter itself (not a `pyenv` shim script, which would
/// run a shell and more programs under the preload first).
pub fn python() -> Option<PathBuf> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let mut cmd = plain(tool("python3")?);
            cmd.args(["-c", "import sys; print(sys.executable)"]);
            let out = run(cmd, TIMEOUT);
            let exe = PathBuf::from(out.stdout.trim());
            Some(exe).filter(|p| out.status.success() && p.is_file())
        })
        .clone()
        .or_else(|| missing("python3 does not run"))
}

/// A fresh directory for one test, removed when dropped, and the test's
/// [`Claim`] to run preloaded processes: a shared one, held until then.
pub struct Scratch(pub PathBuf, Claim);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        Scratch::with_claim(name, Claim::shared())
    }

    /// A scratch directory with the exclusive claim: no other test of this
    /// binary runs a preloaded process until it is dropped.
    pub fn alone(name: &str) -> Scratch {
        Scratch::with_claim(name, Claim::exclusive())
    }

    fn with_claim(name: &str, claim: Claim) -> Scratch {
        let dir = std::env::temp_dir().join(format!("wbcache-preload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(std::fs::canonicalize(&dir).unwrap(), claim)
    }

    /// A subdirectory, created.
    pub fn dir(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to `name` here (a script for a program to run).
    pub fn script(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tests of this binary run side by side, each with its own preloaded
/// processes, which take locks in the library's registries under
/// `/dev/shm`. A test that looks at those registries (`dev_shm`) must see
/// no other test's processes: it takes the exclusive claim
/// ([`Scratch::alone`]), which waits until no other test holds a shared
/// one, and every other test holds a shared claim while its processes
/// run: each [`Scratch`] holds one (a test without one takes
/// [`Claim::shared`]). A waiting exclusive claim holds back new shared
/// claims, except on a thread that already holds one.
pub struct Claim {
    exclusive: bool,
}

struct Claims {
    shared: usize,
    exclusive: bool,
    exclusive_waiting: usize,
}

static CLAIMS: Mutex<Claims> = Mutex::new(Claims { shared: 0, exclusive: false, exclusive_waiting: 0 });
static CLAIMS_CHANGED: Condvar = Condvar::new();

thread_local! {
    /// The shared claims this thread holds.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

fn claims() -> MutexGuard<'static, Claims> {
    CLAIMS.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Claim {
    /// A claim shared with the other tests that run preloaded processes.
    pub fn shared() -> Claim {
        let mut claims = claims();
        let nested = HELD.get() > 0;
        while claims.exclusive || (claims.exclusive_waiting > 0 && !nested) {
            claims = CLAIMS_CHANGED.wait(claims).unwrap_or_else(PoisonError::into_inner);
        }
        claims.shared += 1;
        HELD.set(HELD.get() + 1);
        Claim { exclusive: false }
    }

    /// The one claim no other test holds a claim beside.
    pub fn exclusive() -> Claim {
        let mut claims = claims();
        claims.exclusive_waiting += 1;
        while claims.exclusive || claims.shared > 0 {
            claims = CLAIMS_CHANGED.wait(claims).unwrap_or_else(PoisonError::into_inner);
        }
        claims.exclusive_waiting -= 1;
        claims.exclusive = true;
        Claim { exclusive: true }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = claims();
        if self.exclusive {
            claims.exclusive = false;
        } else {
            claims.shared -= 1;
            HELD.set(HELD.get().saturating_sub(1));
        }
        CLAIMS_CHANGED.notify_all();
    }
}

/// `program` with the library preloaded, managing `managed` (joined as
/// `WBCACHE_PATHS`) with `options` (`WBCACHE_OPTIONS`).
pub fn preloaded(program: impl AsRef<std::ffi::OsStr>, managed: &[&Path], options: &str) -> Command {
    let mut cmd = plain(program);
    let paths = std::env::join_paths(managed).expect("managed directories without ':'");
    cmd.env("LD_PRELOAD", library()).env("WBCACHE_PATHS", paths).env("WBCACHE_OPTIONS", options);
    cmd
}

/// `program` without the library (and without settings it could inherit
/// from the test's environment).
pub fn plain(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("LD_PRELOAD").env_remove("WBCACHE_PATHS").env_remove("WBCACHE_OPTIONS");
    cmd
}

/// What a finished program printed, and how it ended.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The command, for messages.
    pub what: String,
}

impl Output {
    /// Fails the test, with both outputs, unless the program exited 0.
    pub fn ok(self) -> Output {
        assert!(self.status.success(), "{} failed ({}):\n{}", self.what, self.status, self.details());
        self
    }

    pub fn details(&self) -> String {
        format!("--- stdout:\n{}\n--- stderr:\n{}", self.stdout, self.stderr)
    }

    /// Fails the test if the library complained about anything but what a
    /// line containing one of `expected` says, or
    /// if the dynamic linker could not preload it.
    pub fn no_complaints(self, expected: &[&str]) -> Output {
        for line in self.stderr.lines() {
            let ours = line.starts_with("wbcache:") || line.contains("wbcache preload");
            let unexpected = ours && !expected.iter().any(|e| line.contains(e));
            assert!(!unexpected, "{}: the library complained:\n{line}\n{}", self.what, self.details());
            assert!(!line.contains("cannot be preloaded"), "{}: not preloaded:\n{}", self.what, self.details());
        }
        self
    }
}

/// A child in its own process group, whose group is killed when this is
/// dropped (a test that fails midway leaves nothing running).
pub struct Group {
    pub child: Child,
    pub what: String,
}

impl Group {
    /// Starts `cmd` as the leader of a new process group, its stdin null
    /// and its outputs piped.
    pub fn spawn(cmd: Command) -> Group {
        Group::spawn_to(cmd, Stdio::piped())
    }

    /// As `spawn`, with standard output going to `stdout` (a file).
    pub fn spawn_to(mut cmd: Command, stdout: impl Into<Stdio>) -> Group {
        let what = format!("{cmd:?}");
        cmd.process_group(0).stdin(Stdio::null()).stdout(stdout).stderr(Stdio::piped());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Group { child, what }
    }

    /// The program's standard output, line by line, from a thread of its
    /// own (`wait` then collects no stdout).
    pub fn lines(&mut self) -> std::sync::mpsc::Receiver<String> {
        let stdout = self.child.stdout.take().expect("stdout piped and not taken yet");
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        receive
    }

    /// SIGKILL to every process of the group.
    pub fn kill(&self) {
        // SAFETY: a signal to the process group this `Group` leads.
        unsafe { libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL) };
    }

    /// Waits for the program (at most `timeout`, then kills the group and
    /// fails the test) and collects what it printed.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let stdout = drain(self.child.stdout.take());
        let stderr = drain(self.child.stderr.take());
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the child") {
                break status;
            }
            if Instant::now() > deadline {
                self.kill();
                let _ = self.child.wait();
                let out = format!("--- stdout:\n{}\n--- stderr:\n{}", join(stdout), join(stderr));
                panic!("{} did not finish within {timeout:?}; killed\n{out}", self.what);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // The group's other processes (a program's own children) go too.
        self.kill();
        Output { status, stdout: join(stdout), stderr: join(stderr), what: self.what.clone() }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        let _ = self.child.wait();
    }
}

/// Reads `pipe` to its end on a thread of its own.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

fn join(reader: std::thread::JoinHandle<String>) -> String {
    reader.join().unwrap_or_default()
}

/// Runs `cmd` in its own process group, at most `timeout`.
pub fn run(cmd: Command, timeout: Duration) -> Output {
    Group::spawn(cmd).wait(timeout)
}

/// `len` bytes of a pattern that never repeats within a file (the offset
/// of each 8-byte word mixed with `seed`): a byte out of place shows.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut i = 0u64;
    while out.len() < len {
        let mut x = (i ^ seed.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
        out.extend_from_slice(&x.to_le_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Asserts that `path` (read by this process, not preloaded) holds
/// exactly `expected`, naming the first differing byte.
pub fn assert_file(path: &Path, expected: &[u8]) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if got != expected {
        let at = got.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(got.len().min(expected.len()));
        panic!("{}: {} bytes, expected {}; first difference at byte {at}", path.display(), got.len(), expected.len());
    }
}

/// Whether this process may watch other processes' opens (`fanotify`
/// permission events need `CAP_SYS_ADMIN`: root here): without it the
/// library hands nothing over when another process opens a file it
/// caches, and the opener sees what the kernel was given (docs/run.md).
pub fn privileged() -> bool {
    // SAFETY: geteuid takes nothing, touches no memory and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The options a holder runs with (`Holder`): a cache far larger than what
/// it writes, whose dirty data never expires within a test, so that what
/// it wrote stays in its cache, unwritten, until another process's open
/// makes it let go (or it exits).
pub const HOLD_OPTIONS: &str = "capacity=64M,expire_ms=3600000";

/// Python: `wbcache_stats()`, the statistics of the library preloaded into
/// the process (`wbcache_preload_stats_json`) as a dict.
pub const PY_STATS: &str = r#"
import ctypes as _ctypes, json as _json
def wbcache_stats():
    call = _ctypes.CDLL(None).wbcache_preload_stats_json
    call.restype = _ctypes.c_ssize_t
    call.argtypes = [_ctypes.c_char_p, _ctypes.c_size_t]
    buf = _ctypes.create_string_buffer(1 << 16)
    n = call(buf, len(buf))
    assert 0 < n < len(buf), n
    return _json.loads(buf.value[:n])
"#;

/// The lines of a `WBCACHE_STATS` file: one JSON object per preloaded
/// process that opened a managed file, appended at its exit; none when
/// the file does not exist.
pub fn stats_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// A top-level number of a statistics line (`"key":N`); fails the test
/// when the line has none.
pub fn stat(line: &str, key: &str) -> u64 {
    let tag = format!("\"{key}\":");
    let at = line.find(&tag).unwrap_or_else(|| panic!("no {key} in the statistics line {line}")) + tag.len();
    let digits: String = line[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{key} is not a number in the statistics line {line}"))
}

impl Group {
    /// The group leader's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Sends `signal` to the group's leader only.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: a signal to the child this `Group` started (not reaped
        // while the `Group` lives).
        unsafe { libc::kill(self.pid(), signal) };
    }
}

/// The holder's program: `FILE FLAGS [DATA]` opens FILE with FLAGS (a
/// number) and writes the bytes of the file DATA (unmanaged) through it,
/// or without DATA reads FILE whole; says `held DIRTY HEX` (its cache's
/// dirty bytes, what it read in hex), then holds the file open. SIGUSR1:
/// reads it again from offset 0 (`pread`), says `reread HEX`. SIGTERM:
/// exits normally (its exit path, the library's too, runs).
const HOLDER: &str = r#"
import os, signal, sys, time
wake = []
signal.signal(signal.SIGUSR1, lambda *_: wake.append(1))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
def whole(fd):
    out, at = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, at)
        if not chunk:
            return b"".join(out)
        out.append(chunk)
        at += len(chunk)
fd = os.open(sys.argv[1], int(sys.argv[2]), 0o644)
seen = b""
if len(sys.argv) > 3:
    with open(sys.argv[3], "rb") as f:
        data = f.read()
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])
else:
    seen = whole(fd)
print("held", wbcache_stats()["dirty_bytes"], seen.hex(), flush=True)
while True:
    if wake:
        wake.clear()
        print("reread", whole(fd).hex(), flush=True)
    time.sleep(0.01)
"#;

/// A preloaded Python process (`HOLD_OPTIONS`) holding a managed file
/// open, having written to it through its cache or read it; in its own
/// process group, killed when dropped.
pub struct Holder {
    group: Group,
    lines: std::sync::mpsc::Receiver<String>,
    /// Its cache's dirty bytes once it held the file: what it wrote and
    /// had not written back.
    pub dirty_bytes: u64,
    /// What it read when it opened the file (nothing when it wrote).
    pub read: Vec<u8>,
}

impl Holder {
    /// Opens `file` (under `managed`) with `flags` (`O_CREAT` creates it
    /// 0644), writes `data` through the cache, and holds it; returns once
    /// it holds it.
    pub fn writing(python: &Path, file: &Path, managed: &Path, flags: libc::c_int, data: &[u8]) -> Holder {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let source = std::env::temp_dir().join(format!("wbcache-preload-holder-{}-{n}", std::process::id()));
        std::fs::write(&source, data).unwrap();
        let holder = Holder::start(python, file, managed, flags, Some(&source));
        let _ = std::fs::remove_file(&source);
        holder
    }

    /// Opens `file` (under `managed`) read-only, reads it whole through
    /// the cache, and holds it; returns once it holds it.
    pub fn reading(python: &Path, file: &Path, managed: &Path) -> Holder {
        Holder::start(python, file, managed, libc::O_RDONLY, None)
    }

    fn start(python: &Path, file: &Path, managed: &Path, flags: libc::c_int, source: Option<&Path>) -> Holder {
        let mut cmd = preloaded(python, &[managed], HOLD_OPTIONS);
        cmd.arg("-c").arg(format!("{PY_STATS}{HOLDER}")).arg(file).arg(flags.to_string());
        if let Some(source) = source {
            cmd.arg(source);
        }
        let mut group = Group::spawn(cmd);
        let lines = group.lines();
        let line = lines.recv_timeout(TIMEOUT);
        let words: Vec<&str> = line.as_deref().map(|l| l.split(' ').collect()).unwrap_or_default();
        let (dirty_bytes, read) = match words[..] {
            ["held", dirty, hex] => (dirty.parse().expect("a number of bytes"), from_hex(hex)),
            _ => {
                group.kill();
                let out = group.wait(TIMEOUT);
                panic!("the holder of {} did not start: {line:?}\n{}", file.display(), out.details())
            }
        };
        Holder { group, lines, dirty_bytes, read }
    }

    /// What the holder reads of its file now, from offset 0 through the
    /// descriptor it holds.
    pub fn reread(&self) -> Vec<u8> {
        self.group.signal(libc::SIGUSR1);
        match self.lines.recv_timeout(TIMEOUT) {
            Ok(line) if line.starts_with("reread ") => from_hex(&line["reread ".len()..]),
            other => panic!("the holder did not read its file again: {other:?}"),
        }
    }

    /// Ends the holder as a program ends (SIGTERM: a normal exit, the
    /// library's exit path with it) and waits for it: it must exit 0, the
    /// library complaining of nothing.
    pub fn finish(self) -> Output {
        self.group.signal(libc::SIGTERM);
        self.group.wait(TIMEOUT).ok().no_complaints(&[])
    }
}

/// Bytes from their lowercase hex.
fn from_hex(hex: &str) -> Vec<u8> {
    let digit = |c: u8| (c as char).to_digit(16).expect("a hex digit") as u8;
    hex.as_bytes().chunks(2).map(|pair| digit(pair[0]) << 4 | digit(pair[1])).collect()
}

/// The guardian processes (`wbc-guardian`) alive now, with their owners'
/// pids (from their `WBCACHE_GUARDIAN` setting).
pub fn guardians() -> Vec<(libc::pid_t, libc::pid_t)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() != "wbc-guardian" {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let owner = environ
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(b"WBCACHE_GUARDIAN="))
            .and_then(|v| String::from_utf8_lossy(v).split(',').next().and_then(|p| p.parse().ok()));
        found.push((pid, owner.unwrap_or(0)));
    }
    found
}

/// Waits (at most `TIMEOUT`) until no guardian of `owner` is left: it
/// has written the dead owner's data, or found nothing to write.
pub fn wait_for_guardians_of(owner: libc::pid_t) {
    let deadline = Instant::now() + TIMEOUT;
    while guardians().iter().any(|&(_, o)| o == owner) {
        assert!(Instant::now() < deadline, "the guardian of {owner} is still running after {TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
