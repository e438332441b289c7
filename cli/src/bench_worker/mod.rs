//! The measuring side: `wbcache bench-worker` reads one [`Spec`] as JSON on
//! stdin, runs its jobs (one thread each) against the engine, samples dirty
//! bytes and per-second progress every 100 ms, and prints one [`Outcome`]
//! as JSON on stdout. The parent starts a fresh worker per measurement, so
//! every run begins with a fresh process (and, for kernel engines, inside
//! the memory cgroup the parent put it in before sending the spec).
//!
//! This module owns the threads, the sampler and the outcome; [`job`] the
//! course of one job and the generic timed phase; [`offsets`] where the
//! generic patterns' requests go. A job whose pattern is its workload's own
//! is run by the workload (the spec names it): the worker asks for it by
//! name through [`OwnJobs`], which `main` passes down from the catalog, so
//! the worker names no workload.

mod job;
mod offsets;

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Barrier, Mutex};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use job::{eof_at, JobContext, JobFiles, JobRaw, Measured};
pub use offsets::OpGen;

use crate::engines::{EngineKind, System};
use crate::measure::{round3, HistData, Series};
use crate::spec::{Pattern, Spec};

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The workloads as the worker knows them: by the name a spec gives. A job
/// whose pattern is its workload's own ([`Pattern::Own`]) is run by that
/// workload. The catalog answers (`crate::workloads::Catalog`, passed down
/// by `main`), so the worker names no workload.
pub trait OwnJobs: Sync {
    /// Whether a workload is named `workload`.
    fn knows(&self, workload: &str) -> bool;

    /// Runs the job of `ctx`, whose pattern is its workload's own, on the
    /// job's thread.
    fn run(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Unsupported,
    Error,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unsupported => "unsupported",
            Status::Error => "error",
        }
    }
}

/// What one job did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct JobResult {
    pub role: Option<String>,
    pub engine: Option<EngineKind>,
    pub bytes: u64,
    pub ops: u64,
    /// Seconds from the common start to the end of the I/O loop.
    pub io_end_s: f64,
    /// Seconds from the common start to the end of the job (final fsync included).
    pub end_s: f64,
    pub lat: HistData,
    pub fsync: Option<HistData>,
    /// Mean cost of one call in microseconds (per-call workloads).
    pub us_per_call: Option<f64>,
    pub series: Series,
    /// `(seconds, bytes done so far)` every 100 ms of the timed phase, for
    /// the throughput charts (finer than `series`, which is per second).
    #[serde(default)]
    pub samples: Vec<(f64, u64)>,
    /// The workload's own figures of the job (its timed phase's own, see
    /// [`Measured::own`]), read back by its rows.
    #[serde(default)]
    pub own: Option<serde_json::Value>,
    /// See [`Measured::dirty_bytes_at_io_end`].
    #[serde(default)]
    pub dirty_bytes_at_io_end: Option<u64>,
}

impl JobResult {
    /// The workload's own figures, as `T`.
    pub fn own<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_value(self.own.clone()?).ok()
    }
}

/// What a worker prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub error: Option<String>,
    pub jobs: Vec<JobResult>,
    /// `(seconds, dirty + writeback bytes)` every 100 ms.
    pub dirty: Vec<(f64, u64)>,
    pub peak_dirty_bytes: u64,
    pub wbcache_stats: Option<String>,
    pub io_backend: Option<String>,
    /// Busy CPU time of the whole machine (every CPU's user, nice, system,
    /// irq and softirq time in `/proc/stat`) from the start of the timed
    /// phase until the last job ended, in seconds.
    #[serde(default)]
    pub cpu_busy_s: Option<f64>,
    /// The worker process's peak resident set size (`VmHWM`), setup
    /// included, in bytes.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// What the block layer counted on the device of the measurement's
    /// files from the start of the timed phase until the last job ended.
    #[serde(default)]
    pub block_device: Option<crate::sys::BlockDelta>,
}

impl Outcome {
    pub fn failed(e: &io::Error) -> Outcome {
        let status = if crate::engines::is_unsupported(e) { Status::Unsupported } else { Status::Error };
        Outcome {
            status,
            error: Some(e.to_string()),
            jobs: Vec::new(),
            dirty: Vec::new(),
            peak_dirty_bytes: 0,
            wbcache_stats: None,
            io_backend: None,
            cpu_busy_s: None,
            peak_rss_bytes: None,
            block_device: None,
        }
    }
}

/// Entry point of `wbcache bench-worker`; `own_jobs` runs the jobs whose
/// pattern is their workload's own.
pub fn main(own_jobs: &dyn OwnJobs) -> i32 {
    // Die with the parent: a killed `bench` must not leave a writer behind.
    // SAFETY: prctl with these arguments only sets a process attribute.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let mut input = String::new();
    if let Err(e) = io::stdin().read_to_string(&mut input) {
        eprintln!("bench-worker: reading the spec: {e}");
        return 2;
    }
    let spec: Spec = match serde_json::from_str(&input) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench-worker: bad spec: {e}");
            return 2;
        }
    };
    let outcome = run(&spec, own_jobs);
    let json = serde_json::to_string(&outcome).expect("outcome serializes");
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{json}");
    let _ = out.flush();
    0
}

/// What the jobs' threads share with each other and with the sampler.
struct Shared {
    barrier: Barrier,
    cancel: AtomicBool,
    /// Set when a job that stops the others ended.
    stop: AtomicBool,
    finished: AtomicUsize,
    /// Jobs whose I/O is done (a job with `fsync_after_all` waits for all).
    io_done: AtomicUsize,
    /// The machine's busy CPU ticks when the last job ended.
    cpu_end: Mutex<Option<u64>>,
    counters: Vec<AtomicU64>,
    running: Vec<AtomicBool>,
}

impl Shared {
    fn new(n: usize) -> Shared {
        Shared {
            barrier: Barrier::new(n + 1),
            cancel: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            finished: AtomicUsize::new(0),
            io_done: AtomicUsize::new(0),
            cpu_end: Mutex::new(None),
            counters: (0..n).map(|_| AtomicU64::new(0)).collect(),
            running: (0..n).map(|_| AtomicBool::new(true)).collect(),
        }
    }
}

/// Per-job series bookkeeping for the sampler.
struct SeriesState {
    series: Series,
    samples: Vec<(f64, u64)>,
    last_bytes: u64,
    last_t: f64,
}

/// What the sampler gathers while the jobs run: dirty bytes, and each
/// job's progress.
struct Sampler {
    dirty: Vec<(f64, u64)>,
    peak_sampled: u64,
    states: Vec<SeriesState>,
}

pub fn run(spec: &Spec, own_jobs: &dyn OwnJobs) -> Outcome {
    let sys = match System::new(spec.engine, &spec.wbcache_options) {
        Ok(s) => s,
        Err(e) => return Outcome::failed(&e),
    };
    if !own_jobs.knows(&spec.workload) {
        return Outcome::failed(&io::Error::other(format!("unknown workload '{}'", spec.workload)));
    }
    let shared = Shared::new(spec.jobs.len());
    let mut sampler = Sampler::new(spec.jobs.len());
    let block_stat = || block_stat_of_spec(spec);
    let (raws, peak_before, cpu_start, block_start) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.jobs.len()).map(|i| spawn_job(s, &sys, spec, own_jobs, &shared, i)).collect();
        shared.barrier.wait();
        let t0 = Instant::now();
        let cpu_start = crate::sys::cpu_busy_ticks();
        let block_start = block_stat();
        let peak_before = sys.peak_dirty_bytes();
        sampler.sample_until_done(&sys, spec, &shared, t0);
        let raws: Vec<io::Result<JobRaw>> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("job panicked")))).collect();
        (raws, peak_before, cpu_start, block_start)
    });
    let block_device = match (block_start, block_stat()) {
        (Some((device, before)), Some((_, after))) => Some(after.since(&before, device)),
        _ => None,
    };
    let cpu_end = *shared.cpu_end.lock().unwrap_or_else(|e| e.into_inner());
    let cpu_busy_s = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / crate::sys::clock_ticks_per_s()),
        _ => None,
    };
    let (jobs, first_err) = sampler.job_results(raws, spec);
    // The cache's own peak also sees bursts between samples, but it counts
    // from the cache's creation: use it only if it grew during the timed
    // phase (not during the setup's prefill).
    let peak = match (peak_before, sys.peak_dirty_bytes()) {
        (Some(before), Some(after)) if after > before => sampler.peak_sampled.max(after),
        _ => sampler.peak_sampled,
    };
    // A program run under the preload has its own cache, in its own
    // process: its stats, when it left them, are the measurement's.
    let program_stats = spec.jobs.iter().find_map(|j| crate::preload_library::take_program_stats(&j.target.path));
    let wbcache_stats = program_stats.or_else(|| sys.stats_json());
    let io_backend = sys.io_backend();
    let peak_rss_bytes = crate::sys::peak_rss_bytes();
    let close = sys.close();
    if let Some(e) = first_err {
        let mut o = Outcome::failed(&e);
        o.wbcache_stats = wbcache_stats;
        return o;
    }
    let (status, error) = match close {
        Ok(()) => (Status::Ok, None),
        Err(e) => (Status::Error, Some(format!("closing the cache: {e}"))),
    };
    let dirty = sampler.dirty;
    Outcome {
        status,
        error,
        jobs,
        dirty,
        peak_dirty_bytes: peak,
        wbcache_stats,
        io_backend,
        cpu_busy_s,
        peak_rss_bytes,
        block_device,
    }
}

/// The block layer's counters of the device under `spec`'s first file
/// (or its directory, before the file exists).
fn block_stat_of_spec(spec: &Spec) -> Option<(String, crate::sys::BlockStat)> {
    let path = &spec.jobs.first()?.target.path;
    crate::sys::block_stat_of(path).or_else(|| path.parent().and_then(crate::sys::block_stat_of))
}

/// Starts job `i` of `spec` on a thread of its own: the generic runner for
/// a generic pattern, its workload for a pattern of the workload's own.
fn spawn_job<'scope, 'env>(
    s: &'scope Scope<'scope, 'env>,
    sys: &'env System,
    spec: &'env Spec,
    own_jobs: &'env dyn OwnJobs,
    shared: &'env Shared,
    i: usize,
) -> ScopedJoinHandle<'scope, io::Result<JobRaw>> {
    let job = &spec.jobs[i];
    let ctx = JobContext {
        sys,
        spec,
        job,
        counters: &shared.counters,
        cancel: &shared.cancel,
        stop: &shared.stop,
        index: i,
        barrier: &shared.barrier,
        io_done: &shared.io_done,
    };
    let run = move || {
        let r = match &job.pattern {
            Pattern::Own(_) => own_jobs.run(&ctx),
            _ => job::run_stream_job(&ctx),
        };
        if r.is_err() {
            // Also ends the wait of a job with `fsync_after_all`.
            shared.cancel.store(true, Relaxed);
        }
        // The foreground (fsync-under-load), the streamer (hot-set, sqlite)
        // or the transactions (sqlite) ended: the jobs beside it stop.
        if job.stops_others {
            shared.stop.store(true, Relaxed);
        }
        shared.running[i].store(false, Relaxed);
        let cpu = crate::sys::cpu_busy_ticks();
        if shared.finished.fetch_add(1, SeqCst) + 1 == spec.jobs.len() {
            *shared.cpu_end.lock().unwrap_or_else(|e| e.into_inner()) = cpu;
        }
        r
    };
    std::thread::Builder::new().name(format!("job-{i}")).spawn_scoped(s, run).expect("spawn a job thread")
}

impl Sampler {
    fn new(n: usize) -> Sampler {
        let states = (0..n)
            .map(|_| SeriesState { series: Series::default(), samples: Vec::new(), last_bytes: 0, last_t: 0.0 })
            .collect();
        Sampler { dirty: Vec::new(), peak_sampled: 0, states }
    }

    /// Every 100 ms from `t0` until every job ended: the dirty bytes, each
    /// job's bytes so far, a per-second interval of each running job, and
    /// the `@progress` line once a second.
    fn sample_until_done(&mut self, sys: &System, spec: &Spec, shared: &Shared, t0: Instant) {
        let n = spec.jobs.len();
        let mut next_progress = 1.0;
        loop {
            let all_done = shared.finished.load(Relaxed) == n;
            let t = t0.elapsed().as_secs_f64();
            let d = sys.dirty_bytes();
            self.peak_sampled = self.peak_sampled.max(d);
            self.dirty.push((round3(t), d));
            let whole_second = t.floor();
            for (i, st) in self.states.iter_mut().enumerate() {
                st.samples.push((round3(t), shared.counters[i].load(Relaxed)));
                if shared.running[i].load(Relaxed) && whole_second > st.last_t + 0.5 && whole_second >= 1.0 {
                    let b = shared.counters[i].load(Relaxed);
                    st.series.intervals.push((b - st.last_bytes, t - st.last_t));
                    st.last_bytes = b;
                    st.last_t = t;
                }
            }
            if spec.progress && t >= next_progress {
                let total: u64 = shared.counters.iter().map(|c| c.load(Relaxed)).sum();
                eprintln!("@progress {t:.1} {total}");
                next_progress = t.floor() + 1.0;
            }
            if all_done {
                break;
            }
            std::thread::sleep(SAMPLE_EVERY);
        }
    }

    /// The jobs' results, each with its series and samples, and the first
    /// error (a job's own before one cancelled by another's).
    fn job_results(&mut self, raws: Vec<io::Result<JobRaw>>, spec: &Spec) -> (Vec<JobResult>, Option<io::Error>) {
        let mut first_err: Option<io::Error> = None;
        let mut jobs = Vec::new();
        for ((raw, job), st) in raws.into_iter().zip(&spec.jobs).zip(self.states.iter_mut()) {
            match raw {
                Ok(r) => {
                    let m = r.measured;
                    let tail = r.end_s - st.last_t;
                    if tail > 0.0 {
                        st.series.intervals.push((m.bytes - st.last_bytes.min(m.bytes), tail));
                    }
                    jobs.push(JobResult {
                        role: job.role.clone(),
                        engine: Some(job.engine),
                        bytes: m.bytes,
                        ops: m.ops,
                        io_end_s: r.io_end_s,
                        end_s: r.end_s,
                        lat: m.hist.to_data(),
                        fsync: m.fsync.map(|h| h.to_data()),
                        us_per_call: m.us_per_call,
                        series: std::mem::take(&mut st.series),
                        samples: std::mem::take(&mut st.samples),
                        own: m.own,
                        dirty_bytes_at_io_end: m.dirty_bytes_at_io_end,
                    });
                }
                Err(e) => {
                    let is_cancel = e.to_string() == job::CANCELLED;
                    let first_is_cancel = first_err.as_ref().is_some_and(|f| f.to_string() == job::CANCELLED);
                    if first_err.is_none() || (!is_cancel && first_is_cancel) {
                        first_err = Some(e);
                    }
                }
            }
        }
        (jobs, first_err)
    }
}
