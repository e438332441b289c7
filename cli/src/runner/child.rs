//! One measurement in a child process: `wbcache bench-worker`, put into a
//! fresh memory cgroup for the kernel engines before it reads its spec,
//! watched (its progress lines shown, killed on a timeout or a signal) and
//! its outcome read back, or a failed one said in words when it died.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::interrupt::{stop_if_output_closed, INTERRUPTED};
use crate::bench_worker::Outcome;
use crate::cgroup::{CgroupHandle, MemCgroups};
use crate::engines::EngineKind;
use crate::progress::Progress;
use crate::sys::fmt_size;
use crate::workloads::Spec;

fn fail(msg: String) -> Outcome {
    Outcome::failed(&io::Error::other(msg))
}

/// What one worker process gave: its outcome, and whether its memory
/// cgroup's OOM killer struck (a kernel engine's page cache over the
/// cgroup's limit).
pub struct WorkerRun {
    pub outcome: Outcome,
    pub oom_killed: bool,
}

/// Runs one spec in a fresh worker process; kernel engines inside a fresh
/// memory cgroup.
pub fn run_worker(
    spec: &Spec,
    cgroups: Option<&mut MemCgroups>,
    timeout: Duration,
    progress: &mut Progress,
    stderr_lines: &mut Vec<String>,
) -> WorkerRun {
    let (mut child, cgroup) = match start_worker(spec, cgroups) {
        Ok(started) => started,
        Err(msg) if spec.engine == EngineKind::WbcachePreload => {
            return WorkerRun { outcome: Outcome::failed(&crate::engines::unsupported(msg)), oom_killed: false }
        }
        Err(msg) => return WorkerRun { outcome: fail(msg), oom_killed: false },
    };
    let mut stdout = child.stdout.take().expect("piped stdout");
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let (rx, other_lines, err_thread) = read_stderr(child.stderr.take().expect("piped stderr"));
    let (status, killed) = watch(&mut child, timeout, progress, &rx);
    let out = out_thread.join().unwrap_or_default();
    let _ = err_thread.join();
    let mut oom_kills = 0;
    if let Some(h) = cgroup {
        oom_kills = h.oom_kills();
        h.remove();
    }
    let lines = other_lines.lock().unwrap_or_else(|e| e.into_inner()).clone();
    stderr_lines.extend(lines.iter().cloned());
    if let Some(msg) = killed {
        return WorkerRun { outcome: fail(msg), oom_killed: false };
    }
    let parsed = out.lines().rev().find(|l| !l.trim().is_empty()).and_then(|l| serde_json::from_str::<Outcome>(l).ok());
    let outcome = match parsed {
        // A program the job ran may have died of the cgroup's limit.
        Some(mut o) if o.status != crate::bench_worker::Status::Ok && oom_kills > 0 => {
            let killed = format!("the OOM killer of its {} memory cgroup struck", fmt_size(spec_memory(spec)));
            o.error = Some(format!("{} ({killed})", o.error.unwrap_or_default()));
            o
        }
        Some(o) => o,
        None => fail(died(spec, status, oom_kills, &lines)),
    };
    let oom_killed = oom_kills > 0 && outcome.status != crate::bench_worker::Status::Ok;
    WorkerRun { outcome, oom_killed }
}

/// Starts the worker, puts it into a memory cgroup for a kernel engine,
/// then sends it the spec (it reads the spec only once in the cgroup).
fn start_worker(spec: &Spec, cgroups: Option<&mut MemCgroups>) -> Result<(Child, Option<CgroupHandle>), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the wbcache binary: {e}"))?;
    let mut command = Command::new(exe);
    command.arg("bench-worker").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Set before exec: the worker's own prctl comes too late for a `bench`
    // killed between the fork and the worker's start.
    crate::sys::die_with_parent(&mut command);
    if spec.engine == EngineKind::WbcachePreload {
        preload_environment(&mut command, spec)?;
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start a worker: {e}"))?;
    let mut cgroup = None;
    if spec.engine.is_kernel() {
        if let Some(cg) = cgroups {
            match cg.create().and_then(|h| h.add_pid(child.id()).map(|()| h)) {
                Ok(h) => cgroup = Some(h),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("cannot put the worker into a memory cgroup: {e}"));
                }
            }
        }
    }
    // The worker reads the spec only now, after it was moved into the cgroup.
    let spec_json = serde_json::to_string(spec).expect("spec serializes");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(spec_json.as_bytes());
    }
    Ok((child, cgroup))
}

/// The `wbcache-preload` worker runs under the preload library, as
/// `wbcache run` runs a program: its jobs' directories managed, the cache
/// built from the measurement's options.
fn preload_environment(command: &mut Command, spec: &Spec) -> Result<(), String> {
    let lib = crate::preload_library::library()?;
    let mut dirs: Vec<&std::path::Path> = spec.jobs.iter().filter_map(|j| j.target.path.parent()).collect();
    dirs.sort();
    dirs.dedup();
    let paths = std::env::join_paths(dirs).map_err(|e| format!("the jobs' directories as WBCACHE_PATHS: {e}"))?;
    command
        .env("LD_PRELOAD", crate::preload_library::preload_list(&lib))
        .env("WBCACHE_PATHS", paths)
        .env("WBCACHE_OPTIONS", &spec.wbcache_options);
    Ok(())
}

/// The last lines the worker wrote on stderr that are not progress.
type StderrTail = Arc<Mutex<Vec<String>>>;

/// Reads the worker's stderr on a thread: its `@progress` lines, sent as
/// `(seconds, bytes)`, and its last 40 other lines.
fn read_stderr(stderr: ChildStderr) -> (mpsc::Receiver<(f64, u64)>, StderrTail, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel::<(f64, u64)>();
    let other_lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let err_lines = other_lines.clone();
    let err_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("@progress ") {
                let mut f = rest.split_whitespace();
                if let (Some(Ok(t)), Some(Ok(b))) = (f.next().map(str::parse), f.next().map(str::parse)) {
                    let _ = tx.send((t, b));
                }
            } else {
                let mut v = err_lines.lock().unwrap_or_else(|e| e.into_inner());
                v.push(line);
                if v.len() > 40 {
                    v.remove(0);
                }
            }
        }
    });
    (rx, other_lines, err_thread)
}

/// Waits for the worker, showing its progress, and kills it on a signal to
/// the bench or after `timeout`: its exit status (if it was reaped) and
/// why it was killed (if it was).
fn watch(
    child: &mut Child,
    timeout: Duration,
    progress: &mut Progress,
    rx: &mpsc::Receiver<(f64, u64)>,
) -> (Option<ExitStatus>, Option<String>) {
    let started = Instant::now();
    let mut last: Option<(f64, u64)> = None;
    let mut killed: Option<String> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => {
                killed = Some(format!("waiting for the worker: {e}"));
                break None;
            }
        }
        stop_if_output_closed();
        if INTERRUPTED.load(Ordering::SeqCst) {
            let _ = child.kill();
            killed = Some("interrupted".into());
        } else if started.elapsed() > timeout {
            let _ = child.kill();
            killed = Some(format!("timed out after {:.0} s (killed)", timeout.as_secs_f64()));
        }
        if killed.is_some() {
            break child.wait().ok();
        }
        if let Ok((t, b)) = rx.recv_timeout(Duration::from_millis(100)) {
            let rate = match last {
                Some((t0, b0)) if t > t0 => (b.saturating_sub(b0)) as f64 / (t - t0) / 1e6,
                _ => b as f64 / t.max(0.001) / 1e6,
            };
            last = Some((t, b));
            progress.update(format!("{t:.0} s  {rate:.0} MB/s"));
        }
    };
    (status, killed)
}

/// How a worker that printed no outcome ended, with its last words.
fn died(spec: &Spec, status: Option<ExitStatus>, oom_kills: u64, lines: &[String]) -> String {
    let how = match status {
        Some(st) => {
            use std::os::unix::process::ExitStatusExt;
            match st.signal() {
                Some(9) if oom_kills > 0 => {
                    format!("worker killed by the OOM killer of its {} memory cgroup", fmt_size(spec_memory(spec)))
                }
                Some(sig) => format!("worker killed by signal {sig}"),
                None => format!("worker exited with {st}"),
            }
        }
        None => "worker vanished".into(),
    };
    let tail: Vec<&String> = lines.iter().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
    let tail: Vec<&str> = tail.iter().map(|s| s.as_str()).collect();
    if tail.is_empty() {
        how
    } else {
        format!("{how}: {}", tail.join(" / "))
    }
}

fn spec_memory(spec: &Spec) -> u64 {
    wbcache::Config::from_options(&spec.wbcache_options).map(|c| c.capacity_bytes).unwrap_or(0)
}
