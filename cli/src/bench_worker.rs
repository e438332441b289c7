//! The measuring side: `wbcache bench-worker` reads one [`Spec`] as JSON on
//! stdin, runs its jobs (one thread each) against the engine, samples dirty
//! bytes and per-second progress every 100 ms, and prints one [`Outcome`]
//! as JSON on stdout. The parent starts a fresh worker per measurement, so
//! every run begins with a fresh process (and, for kernel engines, inside
//! the memory cgroup the parent put it in before sending the spec).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engines::{EngineFile, EngineKind, System, DIRECT_DEPTH};
use crate::measure::{HistData, Histogram, Series};
use crate::sys::{IoBuffer, Rng};
use crate::workloads::{AdviceVariant, JobSpec, Pattern, Setup, Spec, SqliteJob, FOREGROUND, STREAMER, TRANSACTIONS};

const MIB: u64 = 1 << 20;
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

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
    /// The sum of the times of every fsync the job timed one by one
    /// (`fsync-under-load`'s foreground), in seconds.
    #[serde(default)]
    pub fsync_total_s: Option<f64>,
    /// Each of those fsyncs: `(seconds since the job's start at which it
    /// started, its latency in ms)`.
    #[serde(default)]
    pub fsync_points: Vec<(f64, f64)>,
    /// `hot-set`'s hot reader: how many of its reads (`ops`) found their
    /// whole chunk cached just before; `None` when the engine has no cache
    /// to ask (O_DIRECT).
    #[serde(default)]
    pub resident_chunks: Option<u64>,
    /// `sqlite`'s transactions: what the database was and what the
    /// commits took (the job's `ops` are its transactions, `lat` their
    /// latency, `io_end_s` the time they ran).
    #[serde(default)]
    pub sqlite: Option<SqliteResult>,
    /// `advice`'s job: what was cached and what the advice calls took.
    #[serde(default)]
    pub advice: Option<AdviceResult>,
}

/// What `sqlite`'s transactions job measured besides its transactions.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SqliteResult {
    /// The database file's size after the load (pages × page size).
    pub db_bytes: u64,
    /// The load's time (not part of the measurement), in seconds.
    pub load_s: f64,
    /// Each COMMIT statement's time.
    pub commit: HistData,
}

/// What `advice`'s job measured besides its reads or writes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AdviceResult {
    /// The streams: the most bytes of the file cached at once, of the
    /// looks after every `every` bytes written (`None` for the reads).
    pub peak_cached_bytes: Option<u64>,
    /// The time spent inside the advice calls, in seconds: the one
    /// WILLNEED, or every DONTNEED or range writeback start (`None` for
    /// the plain variants).
    pub advise_s: Option<f64>,
    /// The calls that time adds up.
    pub advise_calls: u64,
    /// The time the looks at what is cached took, in seconds: the bench's
    /// own work, not the application's, so it is left out of the job's
    /// times (`io_end_s`, `end_s`).
    pub look_s: f64,
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
        }
    }
}

/// Entry point of `wbcache bench-worker`.
pub fn main() -> i32 {
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
    let outcome = run(&spec);
    let json = serde_json::to_string(&outcome).expect("outcome serializes");
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{json}");
    let _ = out.flush();
    0
}

struct JobRaw {
    bytes: u64,
    ops: u64,
    /// Times relative to the job's own start (right after the barrier).
    io_end_s: f64,
    end_s: f64,
    hist: Histogram,
    fsync: Option<Histogram>,
    us_per_call: Option<f64>,
    fsync_total_s: Option<f64>,
    fsync_points: Vec<(f64, f64)>,
    resident_chunks: Option<u64>,
    sqlite: Option<SqliteResult>,
    advice: Option<AdviceResult>,
}

/// Per-job series bookkeeping for the sampler.
struct SeriesState {
    series: Series,
    samples: Vec<(f64, u64)>,
    last_bytes: u64,
    last_t: f64,
}

pub fn run(spec: &Spec) -> Outcome {
    let sys = match System::new(spec.engine, &spec.wbcache_options) {
        Ok(s) => s,
        Err(e) => return Outcome::failed(&e),
    };
    let n = spec.jobs.len();
    let barrier = Barrier::new(n + 1);
    let cancel = AtomicBool::new(false);
    // Set when the foreground job ends: the background writers stop.
    let stop = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    // Jobs whose I/O is done (a job with `fsync_after_all` waits for all).
    let io_done = AtomicUsize::new(0);
    // The machine's busy CPU ticks when the last job ended.
    let cpu_end: Mutex<Option<u64>> = Mutex::new(None);
    let counters: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let running: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(true)).collect();
    let mut dirty = Vec::new();
    let mut peak_sampled = 0u64;
    let mut states: Vec<SeriesState> = (0..n)
        .map(|_| SeriesState { series: Series::default(), samples: Vec::new(), last_bytes: 0, last_t: 0.0 })
        .collect();

    let (raws, peak_before, cpu_start) = std::thread::scope(|s| {
        let handles: Vec<_> = spec
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let (sys, barrier, cancel, stop, finished) = (&sys, &barrier, &cancel, &stop, &finished);
                let (counter, running, io_done, cpu_end) = (&counters[i], &running[i], &io_done, &cpu_end);
                let counters = &counters;
                std::thread::Builder::new()
                    .name(format!("job-{i}"))
                    .spawn_scoped(s, move || {
                        let stops = Stops { cancel, stop };
                        let r = match &job.pattern {
                            Pattern::Sqlite(sq) => {
                                run_sqlite_job(sys, spec, job, sq, barrier, stops, counters, io_done)
                            }
                            _ => run_job(sys, spec, job, barrier, stops, counter, io_done),
                        };
                        if r.is_err() {
                            // Also ends the wait of a job with `fsync_after_all`.
                            cancel.store(true, Relaxed);
                        }
                        // The foreground (fsync-under-load), the streamer
                        // (hot-set, sqlite) or the transactions (sqlite)
                        // ended: the jobs beside it stop.
                        if matches!(job.role.as_deref(), Some(FOREGROUND | STREAMER | TRANSACTIONS)) {
                            stop.store(true, Relaxed);
                        }
                        running.store(false, Relaxed);
                        let cpu = crate::sys::cpu_busy_ticks();
                        if finished.fetch_add(1, SeqCst) + 1 == n {
                            *cpu_end.lock().unwrap_or_else(|e| e.into_inner()) = cpu;
                        }
                        r
                    })
                    .expect("spawn a job thread")
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let cpu_start = crate::sys::cpu_busy_ticks();
        let peak_before = sys.peak_dirty_bytes();
        let mut next_progress = 1.0;
        loop {
            let all_done = finished.load(Relaxed) == n;
            let t = t0.elapsed().as_secs_f64();
            let d = sys.dirty_bytes();
            peak_sampled = peak_sampled.max(d);
            dirty.push((crate::measure::round3(t), d));
            let whole_second = t.floor();
            for (i, st) in states.iter_mut().enumerate() {
                st.samples.push((crate::measure::round3(t), counters[i].load(Relaxed)));
                if running[i].load(Relaxed) && whole_second > st.last_t + 0.5 && whole_second >= 1.0 {
                    let b = counters[i].load(Relaxed);
                    st.series.intervals.push((b - st.last_bytes, t - st.last_t));
                    st.last_bytes = b;
                    st.last_t = t;
                }
            }
            if spec.progress && t >= next_progress {
                let total: u64 = counters.iter().map(|c| c.load(Relaxed)).sum();
                eprintln!("@progress {t:.1} {total}");
                next_progress = t.floor() + 1.0;
            }
            if all_done {
                break;
            }
            std::thread::sleep(SAMPLE_EVERY);
        }
        let raws: Vec<io::Result<JobRaw>> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("job panicked")))).collect();
        (raws, peak_before, cpu_start)
    });
    let cpu_end = *cpu_end.lock().unwrap_or_else(|e| e.into_inner());
    let cpu_busy_s = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / crate::sys::clock_ticks_per_s()),
        _ => None,
    };

    let mut first_err: Option<io::Error> = None;
    let mut jobs = Vec::new();
    for ((raw, job), st) in raws.into_iter().zip(&spec.jobs).zip(states.iter_mut()) {
        match raw {
            Ok(r) => {
                let end_s = r.end_s;
                let tail = end_s - st.last_t;
                if tail > 0.0 {
                    st.series.intervals.push((r.bytes - st.last_bytes.min(r.bytes), tail));
                }
                jobs.push(JobResult {
                    role: job.role.clone(),
                    engine: Some(job.engine),
                    bytes: r.bytes,
                    ops: r.ops,
                    io_end_s: r.io_end_s,
                    end_s,
                    lat: r.hist.to_data(),
                    fsync: r.fsync.map(|h| h.to_data()),
                    us_per_call: r.us_per_call,
                    series: std::mem::take(&mut st.series),
                    samples: std::mem::take(&mut st.samples),
                    fsync_total_s: r.fsync_total_s,
                    fsync_points: r.fsync_points,
                    resident_chunks: r.resident_chunks,
                    sqlite: r.sqlite,
                    advice: r.advice,
                });
            }
            Err(e) => {
                let is_cancel = e.to_string() == CANCELLED;
                if first_err.is_none() || (!is_cancel && first_err.as_ref().is_some_and(|f| f.to_string() == CANCELLED))
                {
                    first_err = Some(e);
                }
            }
        }
    }
    // The cache's own peak also sees bursts between samples, but it counts
    // from the cache's creation: use it only if it grew during the timed
    // phase (not during the setup's prefill).
    let peak = match (peak_before, sys.peak_dirty_bytes()) {
        (Some(before), Some(after)) if after > before => peak_sampled.max(after),
        _ => peak_sampled,
    };
    let wbcache_stats = sys.stats_json();
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
    }
}

const CANCELLED: &str = "cancelled: another job failed";

/// The engine a job's setup goes through: uncached engines fill and warm
/// through their buffered peer, so the data starts out cached.
fn setup_engine(engine: EngineKind) -> EngineKind {
    if engine.is_dontcache() {
        engine.buffered_peer()
    } else {
        engine
    }
}

fn prepare(sys: &System, job: &JobSpec) -> io::Result<Box<dyn EngineFile>> {
    let base = job.target.offset;
    // The setup handle stays open until the measured handle is open: wbcache
    // forgets an inode's clean folios when its last handle closes.
    let _setup_handle = match job.setup {
        Setup::None => return sys.open(job.engine, &job.target),
        Setup::Cold => {
            drop_from_page_cache(&job.target)?;
            return sys.open(job.engine, &job.target);
        }
        Setup::Prefill { bytes } => {
            let mut f = sys.open(setup_engine(job.engine), &job.target)?;
            let chunk = if bytes <= 2 * MIB { bytes } else { MIB };
            let buf = IoBuffer::filled(chunk as usize, job.seed ^ 0xfeed);
            let mut off = 0;
            while off < bytes {
                let n = chunk.min(bytes - off) as usize;
                f.write_at(&buf[..n], base + off)?;
                off += n as u64;
            }
            f.fsync()?;
            f
        }
        Setup::Warm { bytes } => {
            let mut f = sys.open(setup_engine(job.engine), &job.target)?;
            read_through(&mut *f, base, bytes)?;
            f
        }
        Setup::ScatteredWrites { bytes, bs } => {
            let mut f = sys.open(setup_engine(job.engine), &job.target)?;
            let buf = IoBuffer::filled(bs as usize, job.seed ^ 0xfeed);
            // Every block once, in a random order.
            let blocks = bytes / bs;
            let order = KeyedPerm::new(blocks, job.seed ^ 0x5ca7);
            for i in 0..blocks {
                f.write_at(&buf, base + order.get(i) * bs)?;
            }
            f.fsync()?;
            f
        }
        Setup::Hot { bytes } => {
            // The hot reader's own engine: the data is cached where it reads.
            let mut f = sys.open(job.engine, &job.target)?;
            let buf = IoBuffer::filled(MIB as usize, job.seed ^ 0xfeed);
            let mut off = 0;
            while off < bytes {
                let n = MIB.min(bytes - off) as usize;
                f.write_at(&buf[..n], base + off)?;
                off += n as u64;
            }
            f.fsync()?;
            for _ in 0..2 {
                read_through(&mut *f, base, bytes)?;
            }
            f
        }
    };
    let target = crate::engines::Target { create: false, ..job.target.clone() };
    sys.open(job.engine, &target)
}

/// Drops `target`'s range from the kernel's page cache: written back
/// first (it is clean when laid out by the bench), then
/// `POSIX_FADV_DONTNEED`, on a file descriptor of its own.
fn drop_from_page_cache(target: &crate::engines::Target) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(&target.path)?;
    f.sync_data()?;
    // SAFETY: plain syscall on an fd we own.
    let rc = unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            target.offset as libc::off_t,
            target.len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Reads `[base, base + bytes)` once in 1 MiB reads (to its end of file).
fn read_through(f: &mut dyn EngineFile, base: u64, bytes: u64) -> io::Result<()> {
    let mut buf = IoBuffer::new(MIB as usize);
    let mut off = 0;
    while off < bytes {
        let n = MIB.min(bytes - off) as usize;
        if f.read_at(&mut buf[..n], base + off)? == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(())
}

/// Opens a fio-style job's files after the first (the first is the
/// job's target, opened by [`prepare`]).
fn open_more_targets(sys: &System, job: &JobSpec) -> io::Result<Vec<Box<dyn EngineFile>>> {
    match &job.pattern {
        Pattern::Fio { more_targets, .. } => more_targets.iter().map(|t| sys.open(job.engine, t)).collect(),
        _ => Ok(Vec::new()),
    }
}

/// What ends a job early: `cancel` (another job failed) ends every job;
/// `stop` (the foreground job ended) ends the streaming loops.
#[derive(Clone, Copy)]
struct Stops<'a> {
    cancel: &'a AtomicBool,
    stop: &'a AtomicBool,
}

/// Runs one job: its setup, then (after `barrier`, when every job is
/// ready) its timed phase. `io_done` counts the jobs whose I/O is done.
fn run_job(
    sys: &System,
    spec: &Spec,
    job: &JobSpec,
    barrier: &Barrier,
    stops: Stops<'_>,
    counter: &AtomicU64,
    io_done: &AtomicUsize,
) -> io::Result<JobRaw> {
    let Stops { cancel, stop } = stops;
    let prepared = prepare(sys, job).and_then(|f| Ok((f, open_more_targets(sys, job)?)));
    if prepared.is_err() {
        cancel.store(true, Relaxed);
    }
    barrier.wait();
    // (Moved later by the time the job's own looks took: `advice`.)
    let mut started = Instant::now();
    let (mut file, mut others) = prepared?;
    if cancel.load(Relaxed) {
        return Err(io::Error::other(CANCELLED));
    }
    let base = job.target.offset;
    let mut hist = Histogram::default();
    let mut bytes = 0u64;
    let mut ops = 0u64;
    let mut us_per_call = None;
    let mut fsync_hist = None;
    let mut fsync_total_s = None;
    let mut fsync_points = Vec::new();
    let mut resident_chunks = None;
    let mut advice = None;
    let deadline_after = Duration::from_secs_f64(spec.deadline_s.max(0.01));
    match &job.pattern {
        Pattern::Seq { .. } | Pattern::Rand { .. } | Pattern::RandShare { .. } => {
            let (write, bs) = match job.pattern {
                Pattern::Seq { write, bs, .. } | Pattern::Rand { write, bs, .. } => (write, bs as usize),
                Pattern::RandShare { bs, .. } => (true, bs as usize),
                _ => unreachable!("a streaming pattern"),
            };
            let mut gen = OpGen::new(&job.pattern, job.target.len, job.seed);
            let wbuf = IoBuffer::filled(if write { bs } else { 0 }, job.seed);
            let deadline = Instant::now() + deadline_after;
            let pipelined = spec.pipelined && file.pipeline().is_some();
            if pipelined {
                let mut rbufs: Vec<IoBuffer> =
                    if write { Vec::new() } else { (0..DIRECT_DEPTH).map(|_| IoBuffer::new(bs)).collect() };
                let p = file.pipeline().expect("checked above");
                p.run(
                    write,
                    &wbuf,
                    &mut rbufs,
                    &mut || {
                        if cancel.load(Relaxed) || stop.load(Relaxed) || Instant::now() >= deadline {
                            return None;
                        }
                        gen.next().map(|o| (base + o, bs))
                    },
                    &mut |n, lat| {
                        hist.record(lat.as_nanos() as u64);
                        bytes += n as u64;
                        ops += 1;
                        counter.fetch_add(n as u64, Relaxed);
                    },
                )?;
            } else {
                let mut rbuf = IoBuffer::new(if write { 0 } else { bs });
                while !cancel.load(Relaxed) && !stop.load(Relaxed) {
                    let Some(off) = gen.next() else { break };
                    let t = Instant::now();
                    if t >= deadline {
                        break;
                    }
                    let n = if write {
                        file.write_at(&wbuf, base + off)?;
                        bs
                    } else {
                        let n = file.read_at(&mut rbuf, base + off)?;
                        if n == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                format!("read at {off} hit end of file"),
                            ));
                        }
                        n
                    };
                    hist.record(t.elapsed().as_nanos() as u64);
                    bytes += n as u64;
                    ops += 1;
                    counter.fetch_add(n as u64, Relaxed);
                }
            }
        }
        Pattern::Calls { call, bs, iovecs, iterations, warmup } => {
            let bufs: Vec<IoBuffer> =
                (0..*iovecs).map(|i| IoBuffer::filled(*bs as usize, job.seed.wrapping_add(i))).collect();
            let slices: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
            let per_call = bs * iovecs;
            for _ in 0..*warmup {
                file.prepare_call(*call, base)?;
                file.write_call(*call, &slices, base)?;
            }
            let deadline = Instant::now() + deadline_after;
            for _ in 0..*iterations {
                if cancel.load(Relaxed) {
                    break;
                }
                file.prepare_call(*call, base)?;
                let t = Instant::now();
                if t >= deadline {
                    break;
                }
                file.write_call(*call, &slices, base)?;
                hist.record(t.elapsed().as_nanos() as u64);
                bytes += per_call;
                ops += 1;
                counter.fetch_add(per_call, Relaxed);
            }
            us_per_call = Some(hist.mean_ns() / 1000.0);
        }
        Pattern::FsyncEach { bs, iterations, pause_ms } => {
            // The file grows by `bs` per iteration (wrapping only on a
            // device region shorter than the run).
            let region = (job.target.len / bs).max(1) * bs;
            let wbuf = IoBuffer::filled(*bs as usize, job.seed);
            let pause = Duration::from_millis(*pause_ms);
            let mut fsyncs = Histogram::default();
            let mut total = Duration::ZERO;
            let deadline = started + deadline_after;
            for i in 0..*iterations {
                if cancel.load(Relaxed) || Instant::now() >= deadline {
                    break;
                }
                let t = Instant::now();
                file.write_at(&wbuf, base + (i * bs) % region)?;
                hist.record(t.elapsed().as_nanos() as u64);
                bytes += bs;
                ops += 1;
                counter.fetch_add(*bs, Relaxed);
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
                let t = Instant::now();
                file.fsync()?;
                let took = t.elapsed();
                fsyncs.record(took.as_nanos() as u64);
                total += took;
                fsync_points.push((
                    crate::measure::round3((t - started).as_secs_f64()),
                    crate::measure::round3(took.as_secs_f64() * 1e3),
                ));
            }
            fsync_total_s = Some(total.as_secs_f64());
            if fsyncs.count() > 0 {
                fsync_hist = Some(fsyncs);
            }
        }
        Pattern::Fio { job: fio, more_targets } => {
            let bs = fio.bs;
            let bases: Vec<u64> = std::iter::once(base).chain(more_targets.iter().map(|t| t.offset)).collect();
            let walk = if fio.rw.random() {
                Pattern::Rand { write: false, bs, ops: None }
            } else {
                Pattern::Seq { write: false, bs, total: None }
            };
            let mut gens: Vec<OpGen> =
                (0..bases.len()).map(|i| OpGen::new(&walk, fio.file_len(), job.seed.wrapping_add(i as u64))).collect();
            let wbuf = IoBuffer::filled(bs as usize, job.seed);
            let mut rbuf = IoBuffer::new(bs as usize);
            let mut mix = Rng::new(job.seed ^ 0xf10);
            let read_percent = u64::from(fio.rw.read_percent(fio.rwmixread));
            let mut writes_since_fsync = vec![0u64; bases.len()];
            let mut fsyncs = Histogram::default();
            let deadline = Instant::now() + deadline_after;
            let mut request = 0usize;
            while !cancel.load(Relaxed) && bytes < fio.size {
                // Round robin over the job's files, one request each.
                let index = request % bases.len();
                request += 1;
                let off = bases[index] + gens[index].next().expect("fio walks never end");
                let read = mix.below(100) < read_percent;
                let f: &mut dyn EngineFile = if index == 0 { &mut *file } else { &mut *others[index - 1] };
                let t = Instant::now();
                if t >= deadline {
                    break;
                }
                let n = if read {
                    let n = f.read_at(&mut rbuf, off)?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("read at {off} hit end of file"),
                        ));
                    }
                    n as u64
                } else {
                    f.write_at(&wbuf, off)?;
                    bs
                };
                hist.record(t.elapsed().as_nanos() as u64);
                bytes += n;
                ops += 1;
                counter.fetch_add(n, Relaxed);
                if !read && fio.fsync_every > 0 {
                    writes_since_fsync[index] += 1;
                    if writes_since_fsync[index] == fio.fsync_every {
                        writes_since_fsync[index] = 0;
                        let t = Instant::now();
                        f.fsync()?;
                        fsyncs.record(t.elapsed().as_nanos() as u64);
                    }
                }
            }
            if fsyncs.count() > 0 {
                fsync_hist = Some(fsyncs);
            }
        }
        Pattern::HotReads { bs } => {
            let bs = *bs;
            let len = (job.target.len / bs).max(1) * bs;
            // Set up before the clock of the first read starts (a mapping
            // of the hot file for the kernel engines).
            let tracked = file.track_residency(base, len)?;
            let mut resident = 0u64;
            let mut rbuf = IoBuffer::new(bs as usize);
            let deadline = started + deadline_after;
            let mut off = 0u64;
            while !cancel.load(Relaxed) && !stop.load(Relaxed) && Instant::now() < deadline {
                // Asked just before the read: was the whole chunk still cached?
                if tracked && file.resident(base + off, bs)? {
                    resident += 1;
                }
                let t = Instant::now();
                let n = file.read_at(&mut rbuf, base + off)?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("read at {off} hit end of file")));
                }
                hist.record(t.elapsed().as_nanos() as u64);
                bytes += n as u64;
                ops += 1;
                counter.fetch_add(n as u64, Relaxed);
                off = (off + bs) % len;
            }
            resident_chunks = tracked.then_some(resident);
        }
        Pattern::Sqlite(_) => unreachable!("run by run_sqlite_job"),
        Pattern::Advice { variant, bs, every } => {
            let shape = AdviceShape { variant: *variant, bs: *bs, every: *every };
            let deadline = Instant::now() + deadline_after;
            let (b, n, r, looks) = advice_io(&mut *file, job, shape, deadline, cancel, counter, &mut hist)?;
            (bytes, ops, advice) = (b, n, Some(r));
            // The looks at what is cached are the bench's, not the
            // application's: its times leave them out.
            started += looks;
        }
        Pattern::CachedReads { bs, span, iterations, warmup } => {
            let bs = *bs;
            let blocks = (span / bs).max(1);
            let mut rng = Rng::new(job.seed);
            let mut buf = IoBuffer::new(bs as usize);
            for _ in 0..*warmup {
                file.read_at(&mut buf, base + rng.below(blocks) * bs)?;
            }
            let deadline = Instant::now() + deadline_after;
            for _ in 0..*iterations {
                if cancel.load(Relaxed) {
                    break;
                }
                let off = base + rng.below(blocks) * bs;
                let t = Instant::now();
                if t >= deadline {
                    break;
                }
                let n = file.read_at(&mut buf, off)?;
                hist.record(t.elapsed().as_nanos() as u64);
                bytes += n as u64;
                ops += 1;
                counter.fetch_add(n as u64, Relaxed);
            }
            us_per_call = Some(hist.mean_ns() / 1000.0);
        }
    }
    let io_end_s = started.elapsed().as_secs_f64();
    io_done.fetch_add(1, SeqCst);
    if job.fsync_after_all {
        while io_done.load(SeqCst) < spec.jobs.len() {
            if cancel.load(Relaxed) {
                return Err(io::Error::other(CANCELLED));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    if (job.fsync_at_end || job.fsync_after_all) && !cancel.load(Relaxed) {
        let t = Instant::now();
        file.fsync()?;
        for other in &mut others {
            other.fsync()?;
        }
        fsync_hist.get_or_insert_with(Histogram::default).record(t.elapsed().as_nanos() as u64);
    }
    let end_s = started.elapsed().as_secs_f64();
    drop(file);
    Ok(JobRaw {
        bytes,
        ops,
        io_end_s,
        end_s,
        hist,
        fsync: fsync_hist,
        us_per_call,
        fsync_total_s,
        fsync_points,
        resident_chunks,
        sqlite: None,
        advice,
    })
}

/// Runs `sqlite`'s transactions job: the database's load (before
/// `barrier`, untimed), then, once the streaming writer (if any) has
/// written `head_start` bytes, pgbench's TPC-B-like transactions one after
/// another until the deadline, or until the writer ends (at least one).
/// `counters` are every job's bytes so far.
#[allow(clippy::too_many_arguments)]
fn run_sqlite_job(
    sys: &System,
    spec: &Spec,
    job: &JobSpec,
    sq: &SqliteJob,
    barrier: &Barrier,
    stops: Stops<'_>,
    counters: &[AtomicU64],
    io_done: &AtomicUsize,
) -> io::Result<JobRaw> {
    let Stops { cancel, stop } = stops;
    let db = crate::sqlite_bench::Db::create(sys, &job.target.path, sq);
    if db.is_err() {
        cancel.store(true, Relaxed);
    }
    barrier.wait();
    let db = db?;
    let streamer = spec.jobs.iter().position(|j| j.role.as_deref() == Some(STREAMER));
    if let (Some(i), true) = (streamer, sq.head_start > 0) {
        // The writer goes first; the wait is bounded by the runtime.
        let until = Instant::now() + Duration::from_secs_f64(spec.deadline_s.max(0.01));
        while counters[i].load(Relaxed) < sq.head_start
            && !cancel.load(Relaxed)
            && !stop.load(Relaxed)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if cancel.load(Relaxed) {
        return Err(io::Error::other(CANCELLED));
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(spec.deadline_s.max(0.01));
    let mut done = || cancel.load(Relaxed) || stop.load(Relaxed) || Instant::now() >= deadline;
    let run = db.run(job.seed, &mut done)?;
    let io_end_s = started.elapsed().as_secs_f64();
    io_done.fetch_add(1, SeqCst);
    let sqlite = SqliteResult { db_bytes: db.db_bytes, load_s: db.load_s, commit: run.commit.to_data() };
    drop(db);
    Ok(JobRaw {
        bytes: 0,
        ops: run.transactions,
        io_end_s,
        end_s: io_end_s,
        hist: run.txn,
        fsync: None,
        us_per_call: None,
        fsync_total_s: None,
        fsync_points: Vec::new(),
        resident_chunks: None,
        sqlite: Some(sqlite),
        advice: None,
    })
}

/// What an `advice` job does: its variant, request size, and how often
/// the streams advise and look.
#[derive(Clone, Copy)]
struct AdviceShape {
    variant: AdviceVariant,
    bs: u64,
    every: u64,
}

/// `advice`'s timed part on `file`, the job's target: returns its bytes,
/// its calls and what it measured besides. The reads: (one WILLNEED over
/// the whole target, then) `bs` sequential reads of it. The streams: `bs`
/// sequential writes of the whole target; after every `every` bytes
/// written, a look at how much of what was written is cached (recorded
/// before the advice, so the peak is the most the file held), then the
/// variant's advice: DONTNEED over everything written so far, or the
/// start of the writeback of the `every` bytes just written. The caller
/// fsyncs. Stops at `deadline` (what was done counts). Also returns the
/// time the looks took.
fn advice_io(
    file: &mut dyn EngineFile,
    job: &JobSpec,
    shape: AdviceShape,
    deadline: Instant,
    cancel: &AtomicBool,
    counter: &AtomicU64,
    hist: &mut Histogram,
) -> io::Result<(u64, u64, AdviceResult, Duration)> {
    let AdviceShape { variant, bs, every } = shape;
    let base = job.target.offset;
    let len = (job.target.len / bs).max(1) * bs;
    let mut result = AdviceResult::default();
    let (mut bytes, mut ops) = (0u64, 0u64);
    let mut advise_time = Duration::ZERO;
    let mut look_time = Duration::ZERO;
    if variant.reads() {
        if variant == AdviceVariant::ColdReadWillneed {
            let t = Instant::now();
            file.advise(base, len, wbcache::Advice::WillNeed)?;
            advise_time += t.elapsed();
            result.advise_calls += 1;
        }
        let mut buf = IoBuffer::new(bs as usize);
        while bytes < len && !cancel.load(Relaxed) && Instant::now() < deadline {
            let t = Instant::now();
            let n = file.read_at(&mut buf, base + bytes)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("read at {bytes} hit end of file")));
            }
            hist.record(t.elapsed().as_nanos() as u64);
            bytes += n as u64;
            ops += 1;
            counter.fetch_add(n as u64, Relaxed);
        }
    } else {
        // A mapping of the file's final length for the kernel, made before
        // the first write (it is never touched: pages past the end of the
        // file are simply not cached).
        if !file.track_residency(base, len)? {
            return Err(io::Error::other("this engine has no cache to ask"));
        }
        let wbuf = IoBuffer::filled(bs as usize, job.seed);
        let mut peak = 0u64;
        // Where the last look was: the window written since is the one
        // whose writeback `stream-sync-range` starts.
        let mut looked = 0u64;
        while bytes < len && !cancel.load(Relaxed) && Instant::now() < deadline {
            let t = Instant::now();
            file.write_at(&wbuf, base + bytes)?;
            hist.record(t.elapsed().as_nanos() as u64);
            bytes += bs;
            ops += 1;
            counter.fetch_add(bs, Relaxed);
            if bytes - looked < every && bytes < len {
                continue;
            }
            let t = Instant::now();
            peak = peak.max(file.cached_bytes(base, bytes)?);
            look_time += t.elapsed();
            let t = Instant::now();
            match variant {
                AdviceVariant::StreamDontneed => file.advise(base, bytes, wbcache::Advice::DontNeed)?,
                AdviceVariant::StreamSyncRange => file.start_writeback(base + looked, bytes - looked)?,
                _ => {}
            }
            if variant.plain().is_some() {
                advise_time += t.elapsed();
                result.advise_calls += 1;
            }
            looked = bytes;
        }
        result.peak_cached_bytes = Some(peak);
        result.look_s = look_time.as_secs_f64();
    }
    result.advise_s = variant.plain().map(|_| advise_time.as_secs_f64());
    Ok((bytes, ops, result, look_time))
}

/// µs per call of a bare `memcpy` of a random `bs`-byte block inside an
/// anonymous buffer of `span` bytes, timed per call exactly as the
/// `CachedReads` pattern times an engine's reads (after `warmup` untimed
/// copies, at most `calls` or until `cap`). A cache's read of that pattern
/// copies the same bytes from memory as scattered, so the report prints it
/// next to the engines' figures: it says how much of their cost is the
/// memory's. (It runs in the bench's own process, on one heap buffer.)
pub fn memcpy_reference_us(span: u64, bs: u64, calls: u64, warmup: u64, cap: Duration) -> f64 {
    let source = IoBuffer::filled(span.max(bs) as usize, 11);
    let mut buf = IoBuffer::new(bs as usize);
    let blocks = (span / bs).max(1);
    let mut rng = Rng::new(9);
    let copy = |off: usize, buf: &mut IoBuffer| {
        buf.copy_from_slice(&source[off..off + bs as usize]);
        std::hint::black_box(&buf[..]);
    };
    for _ in 0..warmup {
        copy((rng.below(blocks) * bs) as usize, &mut buf);
    }
    let mut hist = Histogram::default();
    let deadline = Instant::now() + cap;
    for _ in 0..calls {
        // As the engines' loop: the offset is drawn before the clock starts.
        let off = (rng.below(blocks) * bs) as usize;
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        copy(off, &mut buf);
        hist.record(t.elapsed().as_nanos() as u64);
    }
    hist.mean_ns() / 1000.0
}

/// Reads in flight in [`direct_read_reference_mb_s`]: this machine's
/// virtio disk reads fastest with four 1 MiB reads in flight (about
/// 1.8 GB/s from small pages; deeper queues were slower).
pub const DIRECT_REFERENCE_DEPTH: usize = 16;

/// MB/s of a bare O_DIRECT sequential read of `[0, len)` of `path`, `bs`
/// reads, [`DIRECT_REFERENCE_DEPTH`] in flight through io_uring, into
/// `footprint` bytes of fresh anonymous memory (2 MiB aligned, advised to
/// use huge pages, as a cache's buffers are) that the reads go round: the
/// first round faults the memory in, as a cache filling for the first time
/// does. What `seq-read` could reach on this machine with that much memory
/// and no cache at all (the report sets it beside the engines' figures).
pub fn direct_read_reference_mb_s(path: &std::path::Path, len: u64, bs: u64, footprint: u64) -> io::Result<f64> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    let huge = 2u64 << 20;
    let footprint = footprint.max(bs * DIRECT_REFERENCE_DEPTH as u64).next_multiple_of(huge);
    let span = (footprint + huge) as usize;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let base = (raw as u64).next_multiple_of(huge) as *mut u8;
    // SAFETY: `base..base + footprint` lies inside the mapping; advice only.
    unsafe { libc::madvise(base.cast(), footprint as usize, libc::MADV_HUGEPAGE) };
    let result = (|| {
        let mut ring = io_uring::IoUring::new(DIRECT_REFERENCE_DEPTH as u32)?;
        let fd = io_uring::types::Fd(file.as_raw_fd());
        let slots = footprint / bs;
        let (mut next_off, mut done_bytes, mut inflight) = (0u64, 0u64, 0usize);
        let started = Instant::now();
        while done_bytes < len {
            if inflight == 0 && next_off >= len {
                break; // a short read before the end: the file shrank
            }
            while inflight < DIRECT_REFERENCE_DEPTH && next_off < len {
                // SAFETY (pointer arithmetic): slot `i < slots` lies inside
                // the footprint.
                let buf = unsafe { base.add(((next_off / bs) % slots * bs) as usize) };
                let n = bs.min(len - next_off) as u32;
                let e = io_uring::opcode::Read::new(fd, buf, n).offset(next_off).build().user_data(next_off);
                // SAFETY: the buffer outlives the request: every request is
                // reaped below before the mapping is unmapped.
                unsafe { ring.submission().push(&e).map_err(|_| io::Error::other("submission queue full"))? };
                next_off += bs;
                inflight += 1;
            }
            ring.submit_and_wait(1)?;
            let done: Vec<i32> = ring.completion().map(|c| c.result()).collect();
            for res in done {
                inflight -= 1;
                if res < 0 {
                    // Drain what is in flight before the buffers go.
                    while inflight > 0 {
                        ring.submit_and_wait(1)?;
                        inflight -= ring.completion().count();
                    }
                    return Err(io::Error::from_raw_os_error(-res));
                }
                done_bytes += res as u64;
                if res == 0 {
                    done_bytes = len;
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        Ok(if secs > 0.0 { done_bytes as f64 / secs / 1e6 } else { 0.0 })
    })();
    // SAFETY: the mapping made above, with no request in flight into it.
    unsafe { libc::munmap(raw, span) };
    result
}

/// Offsets (relative to the target) of a streaming or random pattern.
enum OpGen {
    Seq {
        next: u64,
        bs: u64,
        len: u64,
        remaining: Option<u64>,
    },
    Perm {
        perm: Vec<u32>,
        i: usize,
        bs: u64,
        remaining: Option<u64>,
    },
    Random {
        rng: Rng,
        blocks: u64,
        bs: u64,
        remaining: Option<u64>,
    },
    /// A share of a [`KeyedPerm`]: its values at `next`, `next + step`, ...
    Share {
        perm: KeyedPerm,
        next: u64,
        step: u64,
        bs: u64,
    },
}

impl OpGen {
    fn new(pattern: &Pattern, len: u64, seed: u64) -> OpGen {
        match *pattern {
            Pattern::Seq { bs, total, .. } => OpGen::Seq { next: 0, bs, len: len.max(bs), remaining: total },
            Pattern::Rand { bs, ops, .. } => {
                let blocks = (len / bs).max(1);
                let mut rng = Rng::new(seed);
                if blocks <= 1 << 24 {
                    let mut perm: Vec<u32> = (0..blocks as u32).collect();
                    for i in (1..perm.len()).rev() {
                        let j = rng.below(i as u64 + 1) as usize;
                        perm.swap(i, j);
                    }
                    OpGen::Perm { perm, i: 0, bs, remaining: ops }
                } else {
                    OpGen::Random { rng, blocks, bs, remaining: ops }
                }
            }
            Pattern::RandShare { bs, share, shares, key } => {
                let blocks = (len / bs).max(1);
                OpGen::Share { perm: KeyedPerm::new(blocks, key), next: share, step: shares.max(1), bs }
            }
            _ => unreachable!("not a streaming pattern"),
        }
    }

    fn next(&mut self) -> Option<u64> {
        match self {
            OpGen::Seq { next, bs, len, remaining } => {
                if *remaining == Some(0) {
                    return None;
                }
                let off = *next;
                let n = (*bs).min(remaining.unwrap_or(u64::MAX));
                *next += *bs;
                if *next + *bs > *len {
                    *next = 0;
                }
                if let Some(r) = remaining {
                    *r -= n;
                }
                Some(off)
            }
            OpGen::Perm { perm, i, bs, remaining } => {
                if *remaining == Some(0) {
                    return None;
                }
                if let Some(r) = remaining {
                    *r -= 1;
                }
                let off = u64::from(perm[*i % perm.len()]) * *bs;
                *i += 1;
                Some(off)
            }
            OpGen::Random { rng, blocks, bs, remaining } => {
                if *remaining == Some(0) {
                    return None;
                }
                if let Some(r) = remaining {
                    *r -= 1;
                }
                Some(rng.below(*blocks) * *bs)
            }
            OpGen::Share { perm, next, step, bs } => {
                if *next >= perm.len() {
                    return None;
                }
                let block = perm.get(*next);
                *next += *step;
                Some(block * *bs)
            }
        }
    }
}

/// A pseudo-random order of `0..n` that needs no table (any number of
/// blocks, and every job that shares it computes only its own part, at no
/// cost up front): a four-round Feistel network over the smallest power of
/// four at least `n`, applied again until the value falls below `n` (cycle
/// walking keeps it a bijection of `0..n`; the domain being under `4 n`,
/// it takes under four passes on average).
struct KeyedPerm {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl KeyedPerm {
    fn new(n: u64, key: u64) -> KeyedPerm {
        let bits = 64 - (n.max(2) - 1).leading_zeros();
        let mut rng = Rng::new(key);
        KeyedPerm { n, half_bits: bits.div_ceil(2), keys: std::array::from_fn(|_| rng.next_u64()) }
    }

    fn len(&self) -> u64 {
        self.n
    }

    /// One pass of the network over `0..4^half_bits`.
    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            // splitmix64's finalizer as the round function.
            let mut z = right ^ k;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (left, right) = (right, left ^ (z & mask));
        }
        (left << self.half_bits) | right
    }

    /// The `i`-th value of the order (`i < n`).
    fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.encrypt(i);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_read_reference_reads_the_whole_file() {
        let dir = std::env::temp_dir().join(format!("wbcache-direct-ref-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.bin");
        // Not a multiple of the read size: the last read is short.
        std::fs::write(&path, vec![5u8; (9 << 20) + (64 << 10)]).unwrap();
        let result = direct_read_reference_mb_s(&path, (9 << 20) + (64 << 10), 1 << 20, 4 << 20);
        std::fs::remove_dir_all(&dir).unwrap();
        match result {
            Ok(mb_s) => assert!(mb_s > 0.0, "{mb_s} MB/s"),
            // A file system without O_DIRECT (tmpfs on some kernels).
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}"),
        }
    }

    #[test]
    fn memcpy_reference_times_the_calls_it_made() {
        let us = memcpy_reference_us(1 << 20, 4096, 2_000, 10, Duration::from_secs(5));
        assert!(us.is_finite() && us > 0.0, "{us}");
        // A cap already past makes no timed call at all: nothing to report.
        assert_eq!(memcpy_reference_us(1 << 20, 4096, 2_000, 10, Duration::ZERO), 0.0);
    }

    /// The order without a table is a bijection of `0..n`, for sizes on
    /// and off powers of two, and a different key gives another order.
    #[test]
    fn keyed_perm_is_a_permutation() {
        for n in [1u64, 2, 3, 4, 5, 7, 8, 100, 1000, 4096, 65_537] {
            let p = KeyedPerm::new(n, 40);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.get(i);
                assert!(v < n && !seen[v as usize], "n {n}: {v} twice or out of range");
                seen[v as usize] = true;
            }
        }
        let (a, b) = (KeyedPerm::new(1000, 1), KeyedPerm::new(1000, 2));
        assert!((0..1000).filter(|&i| a.get(i) != b.get(i)).count() > 900);
        // Not the identity, nor a shifted one: neighbours land far apart.
        let far = (0..999).filter(|&i| a.get(i).abs_diff(a.get(i + 1)) > 10).count();
        assert!(far > 900, "{far}");
    }

    /// Twelve shares of one target write every block once between them,
    /// each share a disjoint part.
    #[test]
    fn shares_cover_every_block_once() {
        let bs = 4096;
        let len = 1000 * bs + 100; // a partial block at the end is not written
        let mut count = vec![0u32; 1000];
        let mut sizes = Vec::new();
        for share in 0..12 {
            let pattern = Pattern::RandShare { bs, share, shares: 12, key: 40 };
            let mut gen = OpGen::new(&pattern, len, 99);
            let mut n = 0;
            while let Some(off) = gen.next() {
                assert_eq!(off % bs, 0);
                count[(off / bs) as usize] += 1;
                n += 1;
            }
            sizes.push(n);
        }
        assert!(count.iter().all(|&c| c == 1), "every block exactly once");
        assert!(sizes.iter().all(|&n| n == 83 || n == 84), "{sizes:?}");
    }
}
