//! [`Workers`]: the cache's worker threads and their job queue. They fill
//! asynchronous readahead windows, in batches of a few reads so the device
//! is busy ahead of the reader, and run small jobs for the flusher that
//! must not run on the thread asking for them.
//!
//! The cache owns its workers; a job owns the inode it fills (an `Arc`), so
//! an inode outlives its queued windows. A window the reader has already
//! passed is not filled again.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use crate::base::locks;
use crate::inode::{FillPlan, Inode};
use crate::io::{IoPriority, BLOCK_SIZE};
use crate::mapping::folio::Caching;

/// Worker threads: they fill asynchronous readahead windows and run small
/// jobs for the flusher (forgetting idle inodes).
const READAHEAD_WORKERS: usize = 2;

/// Reads of `io_max` submitted together by a readahead worker. With both
/// workers busy that keeps four 1 MiB reads in flight, the virtio disk's
/// best depth here (raw 1 MiB reads: ~1.8 GB/s at depth 4, ~1.35 at 8).
const READAHEAD_BATCH_IOS: u64 = 2;

/// Work for the worker threads.
enum WorkerJob {
    Readahead(ReadaheadJob),
    /// A job that must not run on the thread that asks for it (the flusher
    /// forgetting an idle inode would wait for its own writeback).
    Run(Box<dyn FnOnce() + Send>),
}

struct ReadaheadJob {
    inode: Arc<Inode>,
    start_block: u64,
    end_block: u64,
    /// Uncached for an uncached reader: drop behind it.
    caching: Caching,
    /// Where the reader's last read ended (bytes): a window the reader has
    /// already passed (it read those blocks itself) is not filled again.
    reader_pos: Arc<AtomicU64>,
}

/// The cache's worker threads and their job queue.
pub struct Workers {
    tx: Mutex<Option<mpsc::Sender<WorkerJob>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    batch_bytes: u64,
}

impl Workers {
    /// Starts the workers; readahead windows go out in batches of a few
    /// `io_max_bytes` reads.
    pub fn start(io_max_bytes: u64, io: &Arc<dyn crate::io::Io>) -> io::Result<Workers> {
        let (tx, rx) = mpsc::channel::<WorkerJob>();
        let workers = Workers {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(Vec::new()),
            batch_bytes: READAHEAD_BATCH_IOS * io_max_bytes,
        };
        // Two workers, so one window's I/O is in flight while the previous
        // one completes.
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..READAHEAD_WORKERS {
            let rx = rx.clone();
            let batch_bytes = workers.batch_bytes;
            let worker = crate::io::spawn_io_worker(format!("wbc-readahead-{n}"), io, move || loop {
                let job = match locks::lock(&rx).recv() {
                    Ok(WorkerJob::Readahead(job)) => job,
                    Ok(WorkerJob::Run(job)) => {
                        job();
                        continue;
                    }
                    Err(_) => break,
                };
                fill_window(&job, batch_bytes);
            });
            // The spawn's error is the OS's (EAGAIN), its errno kept.
            let worker = worker?;
            locks::lock(&workers.threads).push(worker);
        }
        Ok(workers)
    }

    /// Queues an asynchronous readahead of blocks `[start, end)`, in
    /// batches, so both workers fill one window at once.
    pub fn readahead(
        &self,
        inode: &Arc<Inode>,
        (start_block, end_block): (u64, u64),
        caching: Caching,
        reader_pos: &Arc<AtomicU64>,
    ) {
        let batch_blocks = (self.batch_bytes / BLOCK_SIZE as u64).max(1);
        let mut start = start_block;
        while start < end_block {
            let end = (start + batch_blocks).min(end_block);
            let job = ReadaheadJob {
                inode: inode.clone(),
                start_block: start,
                end_block: end,
                caching,
                reader_pos: reader_pos.clone(),
            };
            self.send(WorkerJob::Readahead(job));
            start = end;
        }
    }

    /// Runs `job` on a worker thread.
    pub fn run(&self, job: Box<dyn FnOnce() + Send>) {
        self.send(WorkerJob::Run(job));
    }

    fn send(&self, job: WorkerJob) {
        if let Some(tx) = locks::lock(&self.tx).as_ref() {
            let _ = tx.send(job);
        }
    }

    /// Closes the queue and waits for the workers (jobs still queued are
    /// dropped unrun).
    pub fn stop(&self) {
        locks::lock(&self.tx).take();
        let threads: Vec<JoinHandle<()>> = locks::lock(&self.threads).drain(..).collect();
        for h in threads {
            let _ = h.join();
        }
    }
}

/// Fills one window, unless the cache closed or the reader passed it.
/// Batches of a few io_max reads: the device's sweet spot, and each becomes
/// readable on its own. Errors surface to the reader, which retries; ENOMEM
/// ends this optional work.
fn fill_window(job: &ReadaheadJob, batch_bytes: u64) {
    if job.inode.is_cache_closed() {
        return;
    }
    let passed = job.reader_pos.load(Ordering::Acquire).div_ceil(BLOCK_SIZE as u64);
    let start = job.start_block.max(passed);
    if start >= job.end_block {
        return;
    }
    let plan =
        FillPlan { priority: IoPriority::Async, caching: job.caching, batch_bytes, reader_pos: Some(&job.reader_pos) };
    let _ = job.inode.fill_range(start, job.end_block, plan);
}
