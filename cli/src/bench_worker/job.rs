//! One job of a measurement, on a thread of its own: what it shares with
//! the measurement's other jobs ([`JobContext`]), the generic course of a
//! job ([`JobContext::run_timed`]: its setup and files, the common start,
//! a timed phase, its final fsync), and the generic timed phase, the
//! streaming and random loops of [`Pattern::Seq`], [`Pattern::Rand`] and
//! [`Pattern::RandShare`]. A workload's own timed phase is its own
//! ([`crate::workloads::Workload::run_job`]), usually inside `run_timed`.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::offsets::{KeyedPerm, OpGen};
use crate::engines::{EngineFile, EngineKind, System, Target, DIRECT_DEPTH};
use crate::measure::Histogram;
use crate::spec::{JobSpec, Pattern, Setup, Spec, MIB};
use crate::sys::IoBuffer;

/// The error of a job ended because another one failed (the first real
/// error is the one reported).
pub(super) const CANCELLED: &str = "cancelled: another job failed";

/// A read that found the end of the file at `off`.
pub fn eof_at(off: u64) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("read at {off} hit end of file"))
}

/// What a job's thread shares with the measurement's other jobs.
pub struct JobContext<'a> {
    pub sys: &'a System,
    pub spec: &'a Spec,
    pub job: &'a JobSpec,
    /// Every job's bytes so far, in the order of `spec.jobs` (the sampler
    /// reads them).
    pub counters: &'a [AtomicU64],
    /// Set when a job failed: every job ends.
    pub cancel: &'a AtomicBool,
    /// Set when a job that stops the others ended ([`JobSpec::stops_others`]):
    /// the streaming loops end.
    pub stop: &'a AtomicBool,
    pub(super) index: usize,
    pub(super) barrier: &'a Barrier,
    /// Jobs whose I/O is done (a job with `fsync_after_all` waits for all).
    pub(super) io_done: &'a AtomicUsize,
}

/// A job's open files: its target, and its other targets when asked for.
pub struct JobFiles {
    pub file: Box<dyn EngineFile>,
    pub others: Vec<Box<dyn EngineFile>>,
}

/// What a timed phase measured.
#[derive(Default)]
pub struct Measured {
    pub bytes: u64,
    pub ops: u64,
    /// Each request's latency.
    pub hist: Histogram,
    /// Mean cost of one call in microseconds (per-call workloads).
    pub us_per_call: Option<f64>,
    pub fsync: Option<Histogram>,
    /// The workload's own figures, passed on to its rows as JSON.
    pub own: Option<serde_json::Value>,
    /// Dirty (and writeback) bytes of its engine when its I/O ended, before
    /// its final fsync (jobs that end with one): what the engine had not
    /// yet written when the stream stopped. The fsync's time is then how
    /// long the stream took to become durable.
    pub dirty_bytes_at_io_end: Option<u64>,
}

impl Measured {
    /// Counts one request of `bytes` started at `t` (also in `counter`,
    /// which the sampler reads).
    pub fn record(&mut self, counter: &AtomicU64, bytes: u64, t: Instant) {
        self.hist.record(t.elapsed().as_nanos() as u64);
        self.bytes += bytes;
        self.ops += 1;
        counter.fetch_add(bytes, Relaxed);
    }

    /// Keeps the workload's own figures.
    pub fn set_own<T: Serialize>(&mut self, own: &T) {
        self.own = Some(serde_json::to_value(own).expect("a result serializes"));
    }
}

/// What one job did: its timed phase, and when it ended.
pub struct JobRaw {
    pub measured: Measured,
    /// Seconds from the job's own start (right after the barrier) to the
    /// end of the I/O loop.
    pub io_end_s: f64,
    /// Seconds from the job's own start to its end (final fsync included).
    pub end_s: f64,
}

impl JobContext<'_> {
    /// This job's bytes so far.
    pub fn counter(&self) -> &AtomicU64 {
        &self.counters[self.index]
    }

    /// No new request after this long into the timed phase.
    pub fn deadline_after(&self) -> Duration {
        Duration::from_secs_f64(self.spec.deadline_s.max(0.01))
    }

    /// The job's own pattern, as its workload described it.
    pub fn own_pattern<T: DeserializeOwned>(&self) -> io::Result<T> {
        self.job
            .pattern
            .own_as()
            .ok_or_else(|| io::Error::other(format!("a job of {} with a pattern of another kind", self.spec.workload)))
    }

    /// Waits until every job is ready, so that the timed phases start
    /// together; `ready` is this job's setup, which cancels the others if
    /// it failed (and is this job's error after the wait).
    pub fn start_together<T>(&self, ready: io::Result<T>) -> io::Result<T> {
        if ready.is_err() {
            self.cancel.store(true, Relaxed);
        }
        self.barrier.wait();
        ready
    }

    /// The error of a job that another job's failure ended.
    pub fn check_cancelled(&self) -> io::Result<()> {
        if self.cancel.load(Relaxed) {
            return Err(io::Error::other(CANCELLED));
        }
        Ok(())
    }

    /// Counts this job's I/O as done.
    pub fn io_done(&self) {
        self.io_done.fetch_add(1, SeqCst);
    }

    /// The generic course of a job: its setup and its files (and its other
    /// targets, when `open_more_targets`), untimed; the common start; then
    /// `timed`, given the files and the job's start (which it may move
    /// later, to leave out work of the bench's own); then, where the job
    /// asks for it, the final fsync of its files.
    pub fn run_timed(
        &self,
        open_more_targets: bool,
        timed: impl FnOnce(&mut JobFiles, &mut Instant) -> io::Result<Measured>,
    ) -> io::Result<JobRaw> {
        let job = self.job;
        let prepared = prepare(self.sys, job).and_then(|file| {
            let others = match open_more_targets {
                true => job.more_targets.iter().map(|t| self.sys.open(job.engine, t)).collect::<io::Result<_>>()?,
                false => Vec::new(),
            };
            Ok(JobFiles { file, others })
        });
        let prepared = self.start_together(prepared);
        let mut started = Instant::now();
        let mut files = prepared?;
        self.check_cancelled()?;
        let measured = timed(&mut files, &mut started)?;
        self.finish(files, measured, started)
    }

    /// The end of the generic course: the I/O is done; then the final
    /// fsync (after every job's I/O for `fsync_after_all`).
    fn finish(&self, files: JobFiles, mut measured: Measured, started: Instant) -> io::Result<JobRaw> {
        let job = self.job;
        let JobFiles { mut file, mut others } = files;
        let io_end_s = started.elapsed().as_secs_f64();
        self.io_done();
        if job.fsync_after_all {
            while self.io_done.load(SeqCst) < self.spec.jobs.len() {
                self.check_cancelled()?;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if (job.fsync_at_end || job.fsync_after_all) && !self.cancel.load(Relaxed) {
            measured.dirty_bytes_at_io_end = Some(self.sys.dirty_bytes());
            let t = Instant::now();
            file.fsync()?;
            for other in &mut others {
                other.fsync()?;
            }
            measured.fsync.get_or_insert_with(Histogram::default).record(t.elapsed().as_nanos() as u64);
        }
        let end_s = started.elapsed().as_secs_f64();
        drop(file);
        Ok(JobRaw { measured, io_end_s, end_s })
    }
}

/// The engine a job's setup goes through: uncached engines fill and warm
/// through their buffered peer, so the data starts out cached.
fn setup_engine(engine: EngineKind) -> EngineKind {
    if engine.is_dontcache() {
        engine.buffered_peer()
    } else {
        engine
    }
}

/// The job's setup ([`Setup`]), then its target opened for the timed phase.
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
            write_through(&mut *f, base, bytes, chunk, job.seed)?;
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
            write_through(&mut *f, base, bytes, MIB, job.seed)?;
            f.fsync()?;
            for _ in 0..2 {
                read_through(&mut *f, base, bytes)?;
            }
            f
        }
    };
    let target = Target { create: false, ..job.target.clone() };
    sys.open(job.engine, &target)
}

/// Writes `[base, base + bytes)` once in `chunk` writes of the same data.
fn write_through(f: &mut dyn EngineFile, base: u64, bytes: u64, chunk: u64, seed: u64) -> io::Result<()> {
    let buf = IoBuffer::filled(chunk as usize, seed ^ 0xfeed);
    let mut off = 0;
    while off < bytes {
        let n = chunk.min(bytes - off) as usize;
        f.write_at(&buf[..n], base + off)?;
        off += n as u64;
    }
    Ok(())
}

/// Drops `target`'s range from the kernel's page cache: written back
/// first (it is clean when laid out by the bench), then
/// `POSIX_FADV_DONTNEED`, on a file descriptor of its own.
fn drop_from_page_cache(target: &Target) -> io::Result<()> {
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

/// A job with a generic pattern: the streaming or random loop over its
/// target, inside the generic course.
pub fn run_stream_job(ctx: &JobContext<'_>) -> io::Result<JobRaw> {
    ctx.run_timed(false, |files, _| stream(ctx, &mut *files.file))
}

/// The streaming and random loops: requests from the pattern's offsets
/// until they end, the deadline, or a stop; several in flight on an engine
/// that pipelines, when the spec lets it.
fn stream(ctx: &JobContext<'_>, file: &mut dyn EngineFile) -> io::Result<Measured> {
    let job = ctx.job;
    let (write, bs) = match job.pattern {
        Pattern::Seq { write, bs, .. } | Pattern::Rand { write, bs, .. } => (write, bs as usize),
        Pattern::RandShare { bs, .. } => (true, bs as usize),
        Pattern::Own(_) => unreachable!("a streaming pattern"),
    };
    let mut gen = OpGen::new(&job.pattern, job.target.len, job.seed);
    let wbuf = IoBuffer::filled(if write { bs } else { 0 }, job.seed);
    let deadline = Instant::now() + ctx.deadline_after();
    let mut m = Measured::default();
    let (base, counter) = (job.target.offset, ctx.counter());
    let ended = || ctx.cancel.load(Relaxed) || ctx.stop.load(Relaxed);
    if ctx.spec.pipelined && file.pipeline().is_some() {
        let mut rbufs: Vec<IoBuffer> =
            if write { Vec::new() } else { (0..DIRECT_DEPTH).map(|_| IoBuffer::new(bs)).collect() };
        let p = file.pipeline().expect("checked above");
        p.run(
            write,
            &wbuf,
            &mut rbufs,
            &mut || {
                if ended() || Instant::now() >= deadline {
                    return None;
                }
                gen.next().map(|o| (base + o, bs))
            },
            &mut |n, lat| {
                m.hist.record(lat.as_nanos() as u64);
                m.bytes += n as u64;
                m.ops += 1;
                counter.fetch_add(n as u64, Relaxed);
            },
        )?;
        return Ok(m);
    }
    let mut rbuf = IoBuffer::new(if write { 0 } else { bs });
    while !ended() {
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
                return Err(eof_at(off));
            }
            n
        };
        m.record(counter, n as u64, t);
    }
    Ok(m)
}
