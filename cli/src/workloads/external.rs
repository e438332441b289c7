//! Programs of the field's own (fio, RocksDB's `db_bench`) run by a
//! workload's job in the worker, as they are: found on `PATH` (a missing
//! one makes the job `unsupported`, named), each in a process group of its
//! own in a fresh directory of the measurement's, under the preload
//! library (`libwbcache_preload.so`, [`crate::preload_library`]) for
//! the wbcache engines, and in the worker's memory cgroup for the kernel
//! engines (a child stays in its parent's cgroup). A program still running
//! when the bench's timeout comes is killed with its whole group; one
//! whose worker dies is killed by the kernel (`PR_SET_PDEATHSIG`). Their
//! output is read back whole for the workload to parse; the stats their
//! preloaded caches leave, by the worker.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{JobSpec, Pattern, Place, Spec};
use crate::engines::{unsupported, EngineKind, Target};
use crate::preload_library::{library, preload_list, program_stats_path};

/// An executable named `name` on `PATH`; `unsupported: <name> not
/// installed` when there is none.
pub fn find_tool(name: &str) -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .ok_or_else(|| unsupported(format!("{name} not installed")))
}

/// The measurement's own directory, empty: where its program runs and
/// keeps its files (`unsupported` on a raw device, which has no file
/// system for them).
pub fn fresh_dir(dir: Option<&Path>, tool: &str) -> io::Result<PathBuf> {
    let dir = dir.ok_or_else(|| unsupported(format!("{tool} needs a file system (--dir), not --device")))?;
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    fs::create_dir_all(dir)?;
    Ok(dir.to_path_buf())
}

/// The measurement's directory: a new one named after it in the bench's
/// directory, or none on a device.
pub fn run_dir(place: &Place, name: &str) -> Option<PathBuf> {
    place.dir.as_ref().filter(|_| place.device.is_none()).map(|d| d.join(name))
}

/// The one job of a measurement that runs programs in `dir`: the workload's
/// own `pattern`; the directory is its target (removed after the run),
/// sized by the bytes its programs lay out or write.
pub fn program_job<T: Serialize>(engine: EngineKind, dir: Option<&Path>, pattern: &T, bytes: u64) -> JobSpec {
    let target =
        Target { path: dir.map(Path::to_path_buf).unwrap_or_default(), offset: 0, len: bytes, create: dir.is_some() };
    JobSpec::new(engine, target, Pattern::own(pattern))
}

/// The capacity an option string gives a cache.
pub fn capacity_of(options: &str) -> u64 {
    wbcache::Config::from_options(options).map(|c| c.capacity_bytes).unwrap_or(1 << 30)
}

/// How long a job's programs may run: until shortly before the bench
/// kills the worker (its timeout less a tenth, at most 10 s), so the job
/// reports the timeout itself; twice the deadline and a minute without one.
pub fn time_limit(spec: &Spec) -> Duration {
    let timeout_s = spec.timeout_s.unwrap_or(2.0 * spec.deadline_s + 60.0);
    Duration::from_secs_f64((timeout_s - (timeout_s / 10.0).min(10.0)).max(1.0))
}

/// One run of a program: its command, set up to run in `dir` in a process
/// group of its own, under the preload library with `preload_options`
/// (the wbcache option string) when given, its files under `dir` cached.
pub fn command<S: AsRef<OsStr>>(
    tool: &Path,
    args: &[S],
    dir: &Path,
    preload_options: Option<&str>,
) -> io::Result<Command> {
    let mut c = Command::new(tool);
    c.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c.process_group(0);
    crate::sys::die_with_parent(&mut c);
    if let Some(options) = preload_options {
        let lib = library().map_err(unsupported)?;
        c.env("LD_PRELOAD", preload_list(&lib)).env("WBCACHE_PATHS", dir).env("WBCACHE_OPTIONS", options);
        // A report left by an earlier run that did not get to take it
        // (a killed worker) is not this run's.
        let stats_path = program_stats_path(dir);
        let _ = fs::remove_file(&stats_path);
        c.env("WBCACHE_STATS", stats_path);
    } else {
        c.env_remove("WBCACHE_PATHS").env_remove("WBCACHE_STATS");
    }
    Ok(c)
}

/// What a program printed, and how it ended.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Its last few lines on stderr (progress lines overwritten with `\r`
    /// split apart), and those on stdout that start with `<tool>:` (fio
    /// writes its errors there when its output is a pipe), for an error
    /// message.
    pub fn last_words(&self, tool: &str) -> String {
        let said = format!("{tool}:");
        let err = self.stderr.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("..."));
        let out = self.stdout.lines().map(str::trim).filter(|l| l.starts_with(&said));
        let lines: Vec<&str> = err.chain(out).collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    }

    /// Whether the program ran as measured: it ended well, and the preload
    /// library (whose lines start with `wbcache: `) said nothing (it
    /// leaves a program it cannot serve to the kernel).
    pub fn check(&self, tool: &str) -> io::Result<()> {
        if !self.status.success() {
            return Err(self.failure(tool));
        }
        match self.stderr.lines().find(|l| l.starts_with("wbcache: ")) {
            Some(said) => Err(io::Error::other(format!("{tool} under the preload library: {said}"))),
            None => Ok(()),
        }
    }

    /// An error saying that `tool` failed, with its last words.
    pub fn failure(&self, tool: &str) -> io::Error {
        let words = self.last_words(tool);
        let words = if words.is_empty() { String::new() } else { format!(": {words}") };
        io::Error::other(format!("{tool} ended with {}{words}", self.status))
    }
}

/// A started program, and the threads reading its output.
struct Running {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

fn read_all(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Starts every command at once and waits for all of them, killing every
/// one's process group once `limit` has passed (then the error says so).
pub fn run_together(commands: Vec<Command>, tool: &str, limit: Duration) -> io::Result<Vec<Finished>> {
    let deadline = Instant::now() + limit;
    let mut running = Vec::new();
    for mut c in commands {
        let started = c.spawn().map_err(|e| io::Error::new(e.kind(), format!("starting {tool}: {e}")));
        let mut child = match started {
            Ok(child) => child,
            Err(e) => {
                kill_groups(&mut running);
                return Err(e);
            }
        };
        let stdout = read_all(child.stdout.take().expect("piped stdout"));
        let stderr = read_all(child.stderr.take().expect("piped stderr"));
        running.push(Running { child, stdout, stderr });
    }
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; running.len()];
    while statuses.iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            kill_groups(&mut running);
            return Err(io::Error::other(format!(
                "{tool} still ran after {:.0} s: killed with its process group",
                limit.as_secs_f64()
            )));
        }
        for (r, status) in running.iter_mut().zip(statuses.iter_mut()).filter(|(_, s)| s.is_none()) {
            *status = r.child.try_wait()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = running.into_iter().zip(statuses).map(|(r, status)| Finished {
        status: status.expect("every program ended"),
        stdout: r.stdout.join().unwrap_or_default(),
        stderr: r.stderr.join().unwrap_or_default(),
    });
    Ok(finished.collect())
}

/// Kills the process group of every program still running, and reaps them.
fn kill_groups(running: &mut Vec<Running>) {
    for r in running.iter_mut() {
        // SAFETY: a signal to the process group the child leads (its pid).
        unsafe { libc::kill(-(r.child.id() as libc::pid_t), libc::SIGKILL) };
    }
    for mut r in running.drain(..) {
        let _ = r.child.wait();
    }
}

/// The bytes of the files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// Drops the files under `dir` from the kernel's page cache: each written
/// back (`fdatasync`), then `POSIX_FADV_DONTNEED`, so the next program
/// starts as cold on the kernel as it does on a new wbcache cache.
pub fn drop_from_page_cache(dir: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    for e in fs::read_dir(dir)?.filter_map(Result::ok) {
        let path = e.path();
        if e.file_type()?.is_dir() {
            drop_from_page_cache(&path)?;
            continue;
        }
        let f = fs::File::open(&path)?;
        f.sync_data()?;
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, dir: &Path) -> Command {
        command(Path::new("/bin/sh"), &["-c", script], dir, None).unwrap()
    }

    /// Programs run together in their directory; their output comes back
    /// whole, and a failed one's last words are its stderr's last lines.
    #[test]
    fn programs_run_and_report() {
        let dir =
            fresh_dir(Some(&std::env::temp_dir().join(format!("wbcache-ext-{}", std::process::id()))), "sh").unwrap();
        let out = run_together(
            vec![sh("pwd; echo out", &dir), sh("echo a >&2; printf 'x\\ry\\n' >&2; echo 'sh: z'; exit 3", &dir)],
            "sh",
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(out[0].stdout, format!("{}\nout\n", dir.display()));
        assert!(out[0].status.success() && !out[1].status.success());
        assert_eq!(out[1].last_words("sh"), "x / y / sh: z");
        assert_eq!(out[1].failure("sh").to_string(), "sh ended with exit status: 3: x / y / sh: z");
        fs::write(dir.join("f"), [0u8; 5000]).unwrap();
        assert_eq!(dir_bytes(&dir), 5000);
        drop_from_page_cache(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A program past its limit is killed with its group (a child it
    /// started too), and the error says so.
    #[test]
    fn a_program_past_its_limit_is_killed_with_its_group() {
        let dir = std::env::temp_dir();
        let t = Instant::now();
        let e = run_together(vec![sh("sleep 30 & sleep 30", &dir)], "sleepy", Duration::from_millis(300))
            .err()
            .expect("killed");
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(e.to_string().contains("sleepy still ran after 0 s: killed with its process group"), "{e}");
    }

    #[test]
    fn missing_tools_and_devices_are_unsupported() {
        let e = find_tool("wbcache-no-such-tool").unwrap_err();
        assert!(crate::engines::is_unsupported(&e));
        assert_eq!(e.to_string(), "wbcache-no-such-tool not installed");
        assert!(find_tool("sh").is_ok());
        let e = fresh_dir(None, "fio").unwrap_err();
        assert!(crate::engines::is_unsupported(&e) && e.to_string().contains("fio needs a file system"));
    }
}
