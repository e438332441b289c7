//! The thread-pool backend: `preadv`/`pwritev` on a small pool of worker
//! threads; the fallback where io_uring cannot be set up.
//!
//! Invariants:
//! - [`FdEngine::submit_once`] hands every pending op but one to the pool as
//!   a single `preadv`/`pwritev` attempt, runs the last one on the calling
//!   thread, and returns only after every dispatched job has answered. Jobs
//!   hold raw pointers into the caller's buffers; that wait (also done by a
//!   drop guard while unwinding) is what keeps the buffers alive for them.
//! - Workers share one job queue with two classes: a worker takes the
//!   oldest sync job (a caller waits on it: a read miss, an fsync's writes,
//!   promoted writeback) before any async one (background writeback), so
//!   sync I/O never queues behind the flusher's. A worker sets its own I/O
//!   priority to the job's `ioprio` so the device scheduler still sees sync
//!   vs async (the op the caller runs itself keeps the caller's priority).
//! - [`PoolQueue`] (the flusher's asynchronous writes) owns its writes'
//!   buffers and frees a write only after its job answered; every job
//!   answers exactly once, a job dropped unrun with `EIO` ([`Reply`]).
//! - The pool lives as long as the [`ThreadsIo`] or any store it opened;
//!   when the last of them is dropped, the queue closes and the workers are
//!   joined.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::backend::Io;
use super::fd::{ioprio_of, open_fd_store, rw_iovecs, rw_once, FdEngine};
use super::queue::{complete_without_backend, Completion, QueuedWrite, Reap, SlotTable, WriteQueue};
use super::store::{Attempt, BackingStore, IoKind, IoOp, IoPriority, OpenHow};

/// Most workers a pool runs. Each worker keeps one request in flight, so
/// this is the pool's device queue depth: scattered 4 KiB writeback needs a
/// deep one (rand-write with `io=threads` on this project's virtio disk:
/// ~300 MB/s with 8 workers, 420-430 with 16, 460-540 with 32, 530-560
/// with 64; streaming writes and reads did not change). Idle workers only
/// sleep on the queue.
const MAX_WORKERS: usize = 64;
/// Fewest workers, so one slow request does not serialise a batch.
const MIN_WORKERS: usize = 2;
/// preadv/pwritev need little stack.
const WORKER_STACK_BYTES: usize = 256 * 1024;

/// The thread-pool backend.
pub struct ThreadsIo {
    pool: Arc<Pool>,
    /// Workers per pool: the shared one, and each writeback queue's own.
    workers: usize,
}

impl ThreadsIo {
    /// A pool of `min(io_depth, 64)` workers, at least 2. If threads cannot be
    /// spawned, I/O runs on the submitting thread instead.
    pub fn new(io_depth: u32) -> Self {
        let workers = (io_depth as usize).clamp(MIN_WORKERS, MAX_WORKERS);
        ThreadsIo { pool: Arc::new(Pool::new(workers, "wbcache-io")), workers }
    }

    /// Worker threads this pool spawned.
    #[cfg(test)]
    pub fn workers(&self) -> usize {
        self.pool.handles.len()
    }

    /// Worker threads currently running (they start asynchronously).
    #[cfg(test)]
    pub fn workers_alive(&self) -> usize {
        self.pool.stats.alive.load(Ordering::Acquire)
    }

    /// Attempts the workers have executed (single-op batches and the
    /// submitter's own share run inline and are not counted).
    #[cfg(test)]
    pub fn worker_attempts(&self) -> u64 {
        self.pool.stats.attempts.load(Ordering::Relaxed)
    }
}

impl Io for ThreadsIo {
    fn kind(&self) -> IoKind {
        IoKind::Threads
    }

    fn open(&self, path: &Path, how: &OpenHow) -> io::Result<Arc<dyn BackingStore>> {
        open_fd_store(path, how, self.pool.clone())
    }

    /// Each writeback worker's queue has threads of its own, as each has
    /// its own ring with io_uring: several workers' writes do not queue
    /// behind one pool (nor behind reads), and a worker's threads end with
    /// it.
    fn write_queue(&self) -> Box<dyn WriteQueue> {
        Box::new(PoolQueue::new(Arc::new(Pool::new(self.workers, "wbcache-wb"))))
    }
}

/// One attempt at one op, executed by a worker.
struct Job {
    fd: RawFd,
    offset: u64,
    iovecs: Vec<libc::iovec>,
    write: bool,
    priority: IoPriority,
    reply: Reply,
}

/// Where a job's answer goes: `(index, attempt)` on the submitter's
/// channel. Every job answers exactly once: a job dropped unrun (a worker
/// died with it queued) answers `EIO` from here, so a submitter waiting
/// for its answers never hangs; a job the submitter ran itself after the
/// pool refused it is disarmed instead.
struct Reply {
    to: mpsc::Sender<(usize, Attempt)>,
    /// The op's index in its batch, or the write's slot in its queue.
    index: usize,
    answered: bool,
}

impl Reply {
    fn new(to: mpsc::Sender<(usize, Attempt)>, index: usize) -> Reply {
        Reply { to, index, answered: false }
    }

    fn send(mut self, attempt: Attempt) {
        self.answered = true;
        // A submitter only stops listening once every job has answered, so
        // a failed send means it is gone; nothing to do.
        let _ = self.to.send((self.index, attempt));
    }

    /// For a job the submitter runs itself: no answer will come.
    fn disarm(mut self) {
        self.answered = true;
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.to.send((self.index, Err(io::Error::from_raw_os_error(libc::EIO))));
        }
    }
}

/// A [`Job`] that may cross to a worker thread.
struct SendJob(Job);

// SAFETY: the only non-Send part of a Job is the raw pointers in its iovecs.
// They point into buffers borrowed by the submitting `submit_once` call, which
// does not return (nor unwind past its `Batch` guard) until this job has
// answered or been dropped, or into buffers a `PoolQueue` slot owns, which it
// frees only after the job answered (its drop waits for every job out); so
// the memory outlives every use by the worker.
unsafe impl Send for SendJob {}

struct Pool {
    jobs: Arc<JobQueue>,
    handles: Vec<JoinHandle<()>>,
    /// Read only by the tests' accessors; the workers update it.
    #[cfg_attr(not(test), allow(dead_code))]
    stats: Arc<PoolStats>,
}

#[derive(Default)]
struct PoolStats {
    /// Workers running.
    alive: AtomicUsize,
    /// Attempts executed by workers.
    attempts: AtomicU64,
}

/// The workers' job queue: sync jobs before async ones, each class in
/// order.
#[derive(Default)]
struct JobQueue {
    state: Mutex<Jobs>,
    ready: Condvar,
}

#[derive(Default)]
struct Jobs {
    sync: VecDeque<SendJob>,
    background: VecDeque<SendJob>,
    /// Workers that may still take a job: dispatching to none fails (the
    /// submitter runs the op itself).
    workers: usize,
    /// Cleared when the pool drops: idle workers exit.
    open: bool,
    /// Sync jobs taken since the last async one.
    sync_in_a_row: u32,
}

/// Sync jobs taken in a row before a waiting async job gets its turn.
const SYNC_JOBS_BEFORE_AN_ASYNC_ONE: u32 = 8;

impl JobQueue {
    /// Queues `job` in its class, or gives it back when no worker can take it.
    fn push(&self, job: Job) -> Result<(), Job> {
        let mut jobs = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !jobs.open || jobs.workers == 0 {
            return Err(job);
        }
        match job.priority {
            IoPriority::Sync => jobs.sync.push_back(SendJob(job)),
            IoPriority::Async | IoPriority::Idle => jobs.background.push_back(SendJob(job)),
        }
        drop(jobs);
        self.ready.notify_one();
        Ok(())
    }

    /// The next job, sync first, except that after
    /// [`SYNC_JOBS_BEFORE_AN_ASYNC_ONE`] sync jobs in a row a waiting async
    /// one goes (a steady stream of read misses must not stall writeback
    /// that fsyncs and throttled writers wait for); `None` once the pool is
    /// closing.
    fn pop(&self) -> Option<Job> {
        let mut jobs = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let async_turn = jobs.sync_in_a_row >= SYNC_JOBS_BEFORE_AN_ASYNC_ONE && !jobs.background.is_empty();
            let next = if async_turn { None } else { jobs.sync.pop_front() };
            if let Some(SendJob(job)) = next {
                jobs.sync_in_a_row += 1;
                return Some(job);
            }
            if let Some(SendJob(job)) = jobs.background.pop_front() {
                jobs.sync_in_a_row = 0;
                return Some(job);
            }
            if !jobs.open {
                return None;
            }
            jobs = self.ready.wait(jobs).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A worker stops taking jobs. The last one drops whatever is queued,
    /// so every such job answers `EIO` ([`Reply`]) instead of waiting for a
    /// worker that will never come.
    fn worker_left(&self) {
        let orphans: Vec<SendJob> = {
            let mut jobs = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            jobs.workers -= 1;
            if jobs.workers > 0 {
                return;
            }
            let sync = std::mem::take(&mut jobs.sync);
            let background = std::mem::take(&mut jobs.background);
            sync.into_iter().chain(background).collect()
        };
        drop(orphans);
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).open = false;
        self.ready.notify_all();
    }
}

impl Pool {
    /// A pool of `workers` threads named `{name}-{i}`.
    fn new(workers: usize, name: &str) -> Pool {
        let jobs = Arc::new(JobQueue::default());
        {
            let mut state = jobs.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.open = true;
            state.workers = workers;
        }
        let stats = Arc::new(PoolStats::default());
        let handles: Vec<JoinHandle<()>> = (0..workers)
            .filter_map(|i| {
                let queue = jobs.clone();
                let stats = stats.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .stack_size(WORKER_STACK_BYTES)
                    .spawn(move || worker_loop(&queue, &stats));
                if spawned.is_err() {
                    // Never came: it takes no job. With no worker at all,
                    // every dispatch fails and submit_once runs the ops inline.
                    jobs.worker_left();
                }
                spawned.ok()
            })
            .collect();
        Pool { jobs, handles, stats }
    }

    /// Queues `job`, or gives it back when no worker can take it.
    fn dispatch(&self, job: Job) -> Result<(), Job> {
        self.jobs.push(job)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // No batch can be in flight: every submitter holds an Arc to the pool.
        self.jobs.close();
        for handle in self.handles.drain(..) {
            // A worker that panicked has nothing left to clean up.
            let _ = handle.join();
        }
    }
}

/// Decrements the live-worker count and leaves the job queue however the
/// worker exits.
struct AliveGuard<'a>(&'a AtomicUsize, &'a JobQueue);

impl Drop for AliveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        self.1.worker_left();
    }
}

fn worker_loop(jobs: &JobQueue, stats: &PoolStats) {
    stats.alive.fetch_add(1, Ordering::AcqRel);
    let _alive = AliveGuard(&stats.alive, jobs);
    let mut current_ioprio: Option<u16> = None;
    while let Some(job) = jobs.pop() {
        let ioprio = ioprio_of(job.priority);
        if current_ioprio != Some(ioprio) {
            set_thread_ioprio(ioprio);
            current_ioprio = Some(ioprio);
        }
        // SAFETY: the iovecs point into buffers the submitter keeps borrowed
        // until this job answers (see SendJob); nobody else touches them.
        let attempt = unsafe { rw_iovecs(job.fd, job.offset, &job.iovecs, job.write) };
        stats.attempts.fetch_add(1, Ordering::Relaxed);
        job.reply.send(attempt);
    }
}

/// Sets this thread's I/O priority (`ioprio_set(IOPRIO_WHO_PROCESS, 0, ..)`
/// targets the calling thread). Best effort: a refused priority must not
/// fail the I/O.
fn set_thread_ioprio(ioprio: u16) {
    const IOPRIO_WHO_PROCESS: libc::c_int = 1;
    // SAFETY: ioprio_set takes only integers.
    unsafe {
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, libc::c_int::from(ioprio));
    }
}

/// Collects the answers of one batch's dispatched jobs. Dropping it waits
/// for the jobs still out, so not even a panic lets the caller's buffers go
/// while a worker uses them.
struct Batch {
    reply: Option<mpsc::Sender<(usize, Attempt)>>,
    answers: mpsc::Receiver<(usize, Attempt)>,
    outstanding: usize,
}

impl Batch {
    fn new() -> Batch {
        let (reply, answers) = mpsc::channel();
        Batch { reply: Some(reply), answers, outstanding: 0 }
    }

    fn reply_to(&self) -> mpsc::Sender<(usize, Attempt)> {
        self.reply.as_ref().expect("batch still dispatching").clone()
    }

    /// Blocks until every dispatched job answered, storing the answers.
    fn wait(&mut self, results: &mut [Option<Attempt>]) {
        // Drop our own sender so that, should a job be dropped unanswered,
        // recv fails instead of blocking forever.
        self.reply = None;
        while self.outstanding > 0 {
            match self.answers.recv() {
                Ok((index, attempt)) => {
                    self.outstanding -= 1;
                    results[index] = Some(attempt);
                }
                // Every job is gone (answered or dropped unrun): none can
                // still touch the buffers.
                Err(_) => self.outstanding = 0,
            }
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.reply = None;
        while self.outstanding > 0 && self.answers.recv().is_ok() {
            self.outstanding -= 1;
        }
    }
}

impl FdEngine for Pool {
    fn submit_once(&self, fd: RawFd, ops: &mut [IoOp<'_>]) -> Vec<Attempt> {
        let mut results: Vec<Option<Attempt>> = ops.iter().map(|op| op.result.is_some().then_some(Ok(0))).collect();
        let pending: Vec<usize> = (0..ops.len()).filter(|&i| results[i].is_none()).collect();
        if let Some((&inline, dispatched)) = pending.split_last() {
            let mut batch = Batch::new();
            for &index in dispatched {
                let op = &mut ops[index];
                let (write, priority) = (op.is_write(), op.priority);
                let (offset, iovecs) = op.remaining_iovecs();
                let job = Job { fd, offset, iovecs, write, priority, reply: Reply::new(batch.reply_to(), index) };
                match self.dispatch(job) {
                    Ok(()) => batch.outstanding += 1,
                    // No worker: the job never ran, do it here.
                    Err(job) => {
                        job.reply.disarm();
                        results[index] = Some(rw_once(fd, op));
                    }
                }
            }
            // The calling thread would only wait; let it do one op meanwhile.
            // A single-op batch thus never leaves the thread.
            results[inline] = Some(rw_once(fd, &mut ops[inline]));
            batch.wait(&mut results);
        }
        results.into_iter().map(|r| r.unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::EIO)))).collect()
    }
}

/// [`WriteQueue`] on the pool: each write is handed to the workers as soon
/// as it is pushed (at the latest on the next `reap`), and its answer is
/// folded in when it arrives, so the device stays busy while the owner
/// builds the next writes, and writes to different stores run side by side
/// (the batch queue ran one store's batch after another).
///
/// Invariants: every slot in use in `slots` is either in `backlog`
/// (not handed to the pool) or has exactly one job out (`in_pool` counts
/// those); a slot is freed only after its job answered. Every job answers
/// ([`Reply`]), so waiting for `in_pool` answers always ends.
pub struct PoolQueue {
    pool: Arc<Pool>,
    slots: SlotTable,
    backlog: std::collections::VecDeque<usize>,
    in_pool: usize,
    answers_to: mpsc::Sender<(usize, Attempt)>,
    answers: mpsc::Receiver<(usize, Attempt)>,
    ready: Vec<Completion>,
    queued: usize,
}

impl PoolQueue {
    fn new(pool: Arc<Pool>) -> PoolQueue {
        let (answers_to, answers) = mpsc::channel();
        PoolQueue {
            pool,
            slots: SlotTable::default(),
            backlog: Default::default(),
            in_pool: 0,
            answers_to,
            answers,
            ready: Vec::new(),
            queued: 0,
        }
    }

    fn finish(&mut self, slot: usize, result: io::Result<usize>) {
        let completion = self.slots.finish(slot, result);
        self.ready.push(completion);
    }

    /// Hands the backlog to the workers; a write the pool cannot take (no
    /// worker) runs here.
    fn dispatch_backlog(&mut self) {
        while let Some(slot) = self.backlog.pop_front() {
            let f = self.slots.get_mut(slot);
            let fd = f.write.store.raw_fd().expect("only stores with a descriptor are queued on the pool");
            let (offset, iovecs) = f.remaining_iovecs();
            let priority = f.write.priority;
            let job =
                Job { fd, offset, iovecs, write: true, priority, reply: Reply::new(self.answers_to.clone(), slot) };
            match self.pool.dispatch(job) {
                Ok(()) => self.in_pool += 1,
                Err(job) => {
                    job.reply.disarm();
                    // From what earlier attempts left: rewriting nothing twice.
                    let mut op = f.write.as_op();
                    op.done = f.done;
                    let attempt = rw_once(fd, &mut op);
                    self.fold(slot, attempt);
                }
            }
        }
    }

    /// Folds one attempt into its write: done, or back to the backlog.
    fn fold(&mut self, slot: usize, attempt: Attempt) {
        let f = self.slots.get_mut(slot);
        match f.fold_attempt(attempt) {
            Some(result) => self.finish(slot, result),
            None => self.backlog.push_back(slot),
        }
    }

    fn take_answer(&mut self, (slot, attempt): (usize, Attempt)) {
        assert!(self.in_pool > 0, "an answer for a job out");
        self.in_pool -= 1;
        self.fold(slot, attempt);
    }
}

impl WriteQueue for PoolQueue {
    fn push(&mut self, write: QueuedWrite) {
        self.queued += 1;
        if write.tail || write.store.raw_fd().is_none() || write.is_empty() {
            self.ready.push(complete_without_backend(&write));
            return;
        }
        let slot = self.slots.insert(write);
        self.backlog.push_back(slot);
        // Start it now: a worker may be idle, and a pass's writes are
        // pushed one by one.
        self.dispatch_backlog();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.queued
    }

    fn reap(&mut self, how: Reap) -> Vec<Completion> {
        loop {
            self.dispatch_backlog();
            while let Ok(answer) = self.answers.try_recv() {
                self.take_answer(answer);
            }
            if !self.ready.is_empty() || how == Reap::Poll || self.queued == 0 {
                break;
            }
            if !self.backlog.is_empty() {
                continue; // retries (or pool-less writes) to start first
            }
            assert!(self.in_pool > 0, "queued writes are in the backlog or out on the pool");
            let answer = self.answers.recv().expect("the queue holds a sender of its own");
            self.take_answer(answer);
        }
        // Retries folded in above go out now, not at the next call.
        self.dispatch_backlog();
        let done = std::mem::take(&mut self.ready);
        self.queued -= done.len();
        done
    }

    fn reap_within(&mut self, timeout: std::time::Duration) -> Vec<Completion> {
        self.dispatch_backlog();
        if self.ready.is_empty() && self.backlog.is_empty() && self.in_pool > 0 {
            if let Ok(answer) = self.answers.recv_timeout(timeout) {
                self.take_answer(answer);
            }
        }
        self.reap(Reap::Poll)
    }
}

impl Drop for PoolQueue {
    /// Waits for every job still out: their buffers must outlive them. The
    /// owner normally drains the queue before dropping it.
    fn drop(&mut self) {
        while self.in_pool > 0 {
            match self.answers.recv() {
                Ok(_) => self.in_pool -= 1,
                Err(_) => break, // cannot happen: we hold a sender
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::io::fd::testutil::*;
    use crate::io::{read_full, write_full, IoPriority, BLOCK_SIZE};

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn worker_counts() {
        assert_eq!(ThreadsIo::new(0).workers(), 2);
        assert_eq!(ThreadsIo::new(1).workers(), 2);
        assert_eq!(ThreadsIo::new(5).workers(), 5);
        assert_eq!(ThreadsIo::new(32).workers(), 32);
        assert_eq!(ThreadsIo::new(128).workers(), MAX_WORKERS);
    }

    #[test]
    fn suite_on_two_workers() {
        let io = ThreadsIo::new(2);
        assert_eq!(io.kind(), IoKind::Threads);
        suite(&|p, h| io.open(p, h));
    }

    #[test]
    fn suite_on_the_most_workers() {
        let io = ThreadsIo::new(64);
        suite(&|p, h| io.open(p, h));
    }

    #[test]
    fn concurrent_submitters_share_the_pool() {
        let io = ThreadsIo::new(4);
        concurrent_submitters(&|p, h| io.open(p, h));
    }

    /// A multi-op batch runs all ops but one on the workers; a single-op
    /// batch stays on the calling thread.
    #[test]
    fn batches_use_the_workers() {
        let io = ThreadsIo::new(4);
        wait_for("workers to start", || io.workers_alive() == 4);
        let path = TempPath::new("pool-used");
        let store = io.open(&path.0, &rw_create()).unwrap();
        let data = AlignedBuf::pattern(BLOCK_SIZE, 1);
        let mut ops: Vec<IoOp<'_>> =
            (0..16).map(|i| IoOp::write(i * BLOCK_SIZE as u64, vec![&data[..]], IoPriority::Async)).collect();
        let attempts = store.submit_once(&mut ops);
        assert_eq!(attempts.len(), 16);
        assert!(attempts.iter().all(|a| matches!(a, Ok(n) if *n == BLOCK_SIZE)));
        assert_eq!(io.worker_attempts(), 15);
        assert_eq!(store.len().unwrap(), 16 * BLOCK_SIZE as u64);

        let mut back = AlignedBuf::zeroed(BLOCK_SIZE);
        assert_eq!(read_full(&*store, &mut back, 15 * BLOCK_SIZE as u64, IoPriority::Sync).unwrap(), BLOCK_SIZE);
        assert!(back[..] == data[..]);
        assert_eq!(io.worker_attempts(), 15, "a single-op batch runs inline");
    }

    /// With no workers (spawning failed), everything runs inline.
    #[test]
    fn pool_without_workers_runs_inline() {
        let pool = Pool::new(0, "test");
        assert!(pool.handles.is_empty());
        let path = TempPath::new("no-workers");
        let store = open_fd_store(&path.0, &rw_create(), Arc::new(Pool::new(0, "test"))).unwrap();
        let data = AlignedBuf::pattern(3 * BLOCK_SIZE, 2);
        let mut ops: Vec<IoOp<'_>> = (0..3)
            .map(|i| {
                IoOp::write(
                    i * BLOCK_SIZE as u64,
                    vec![&data[i as usize * BLOCK_SIZE..][..BLOCK_SIZE]],
                    IoPriority::Sync,
                )
            })
            .collect();
        crate::io::run_batch(&*store, &mut ops);
        assert!(ops.iter_mut().all(|op| op.result.take().unwrap().is_ok()));
        drop(ops);
        let mut back = AlignedBuf::zeroed(3 * BLOCK_SIZE);
        assert_eq!(read_full(&*store, &mut back, 0, IoPriority::Sync).unwrap(), 3 * BLOCK_SIZE);
        assert!(back[..] == data[..]);
        pool.jobs.close(); // a closed queue refuses jobs too
        assert!(pool.dispatch(dummy_job()).is_err());
    }

    /// Workers take every queued sync job before any async one, each class
    /// in order; the last worker to leave answers what is still queued.
    #[test]
    fn sync_jobs_go_before_async_ones() {
        let queue = JobQueue::default();
        {
            let mut state = queue.state.lock().unwrap();
            state.open = true;
            state.workers = 1;
        }
        let (to, answers) = mpsc::channel();
        let job = |index: usize, priority: IoPriority| Job {
            fd: -1,
            offset: 0,
            iovecs: Vec::new(),
            write: true,
            priority,
            reply: Reply::new(to.clone(), index),
        };
        for (index, priority) in
            [(1, IoPriority::Async), (2, IoPriority::Async), (3, IoPriority::Sync), (4, IoPriority::Sync)]
        {
            assert!(queue.push(job(index, priority)).is_ok());
        }
        let order: Vec<usize> = (0..4)
            .map(|_| {
                let j = queue.pop().expect("queued");
                let index = j.reply.index;
                j.reply.disarm();
                index
            })
            .collect();
        assert_eq!(order, [3, 4, 1, 2]);
        // A long run of sync jobs lets one async job through every
        // SYNC_JOBS_BEFORE_AN_ASYNC_ONE.
        let n = SYNC_JOBS_BEFORE_AN_ASYNC_ONE as usize;
        assert!(queue.push(job(100, IoPriority::Async)).is_ok());
        for i in 0..2 * n {
            assert!(queue.push(job(200 + i, IoPriority::Sync)).is_ok());
        }
        let order: Vec<usize> = (0..2 * n + 1)
            .map(|_| {
                let j = queue.pop().expect("queued");
                let index = j.reply.index;
                j.reply.disarm();
                index
            })
            .collect();
        assert_eq!(order[n], 100, "the async job goes after {n} sync ones: {order:?}");
        assert!(order.iter().filter(|&&i| i >= 200).count() == 2 * n, "every sync job ran");
        assert!(queue.push(job(5, IoPriority::Async)).is_ok());
        queue.worker_left();
        assert_eq!(
            answers.try_recv().map(|(i, a)| (i, a.unwrap_err().raw_os_error())).ok(),
            Some((5, Some(libc::EIO)))
        );
        assert!(queue.push(job(6, IoPriority::Sync)).is_err(), "no worker left to take it");
        queue.close();
        assert!(queue.pop().is_none(), "a closed, empty queue ends its workers");
    }

    fn dummy_job() -> Job {
        let (reply, _) = mpsc::channel();
        Job {
            fd: -1,
            offset: 0,
            iovecs: Vec::new(),
            write: false,
            priority: IoPriority::Async,
            reply: Reply::new(reply, 0),
        }
    }

    #[test]
    fn write_queue_completes_every_write_once_across_stores() {
        let io = ThreadsIo::new(4);
        let (pa, pb) = (TempPath::new("pool-queue-a"), TempPath::new("pool-queue-b"));
        let a = io.open(&pa.0, &rw_create()).unwrap();
        let b = io.open(&pb.0, &rw_create()).unwrap();
        let pool = Arc::new(Pool::new(4, "test"));
        let mut queue = PoolQueue::new(pool.clone());
        crate::io::queue::tests::exercise(&mut queue, &a, &b);
        assert!(pool.stats.attempts.load(Ordering::Relaxed) > 0, "the writes ran on the workers");
        // A writeback queue from the backend has threads of its own.
        let mut queue = io.write_queue();
        crate::io::queue::tests::exercise(&mut *queue, &a, &b);
        assert_eq!(io.worker_attempts(), 0, "not on the shared pool's threads");
    }

    /// Without workers the queue still completes everything, on the
    /// owner's thread.
    #[test]
    fn write_queue_without_workers_runs_writes_inline() {
        let pool = Arc::new(Pool::new(0, "test"));
        let (pa, pb) = (TempPath::new("pool-queue-inline-a"), TempPath::new("pool-queue-inline-b"));
        let a = open_fd_store(&pa.0, &rw_create(), pool.clone()).unwrap();
        let b = open_fd_store(&pb.0, &rw_create(), pool.clone()).unwrap();
        let mut queue = PoolQueue::new(pool);
        crate::io::queue::tests::exercise(&mut queue, &a, &b);
    }

    /// A job dropped without running (its worker gone) still answers, with
    /// EIO, so nobody waits for it forever; a disarmed one stays silent.
    #[test]
    fn a_job_dropped_unrun_answers_eio() {
        let (to, answers) = mpsc::channel();
        drop(Job {
            fd: -1,
            offset: 0,
            iovecs: Vec::new(),
            write: true,
            priority: IoPriority::Async,
            reply: Reply::new(to.clone(), 7),
        });
        let (index, attempt) = answers.try_recv().expect("a dropped job answers");
        assert_eq!(index, 7);
        assert_eq!(attempt.unwrap_err().raw_os_error(), Some(libc::EIO));
        Reply::new(to.clone(), 8).disarm();
        Reply::new(to, 9).send(Ok(4096));
        assert_eq!(answers.try_recv().map(|(i, a)| (i, a.unwrap())).ok(), Some((9, 4096)), "one answer each");
        assert!(answers.try_recv().is_err());
    }

    /// Workers outlive the ThreadsIo while a store still uses them, and are
    /// all joined when the last user goes.
    #[test]
    fn workers_exit_when_last_user_drops() {
        let io = ThreadsIo::new(3);
        wait_for("workers to start", || io.workers_alive() == 3);
        let stats = io.pool.stats.clone();
        let path = TempPath::new("exit");
        let store = io.open(&path.0, &rw_create()).unwrap();
        drop(io);
        assert_eq!(stats.alive.load(Ordering::Acquire), 3, "a store still needs the pool");
        let data = AlignedBuf::pattern(2 * BLOCK_SIZE, 3);
        write_full(&*store, vec![&data[..BLOCK_SIZE], &data[BLOCK_SIZE..]], 0, IoPriority::Sync).unwrap();
        drop(store);
        // Pool::drop joins the workers, so they are gone by now.
        assert_eq!(stats.alive.load(Ordering::Acquire), 0);
    }

    /// A dropped-unanswered job (its reply sender gone) cannot hang the
    /// batch: the op gets EIO.
    #[test]
    fn unanswered_job_is_eio() {
        let mut batch = Batch::new();
        let reply = batch.reply_to();
        batch.outstanding = 1;
        drop(reply);
        let mut results = vec![None];
        batch.wait(&mut results);
        assert!(results[0].is_none());
        assert_eq!(batch.outstanding, 0);
    }

    /// See `fd::testutil::block_device_writes`; destroys the device's data.
    #[test]
    #[ignore = "needs WBCACHE_TEST_BLOCK_DEVICE naming a scratch block device"]
    fn block_device_write_round_trip() {
        let io = ThreadsIo::new(4);
        block_device_writes(&|p, h| io.open(p, h));
    }
}
