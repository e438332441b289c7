//! The cache: configuration, the I/O backend, every inode and writeback
//! domain, folio memory accounting against `capacity`, dirty throttling, and
//! the asynchronous readahead worker.
//!
//! Ownership: [`Cache`] and every [`File`] hold the [`Shared`] state. Shared
//! owns the inode table and the domains; domains run the flushers and hold
//! dirty inodes; inodes hold their domain. Those cycles are broken by
//! [`Cache::close`] (also run on drop), which writes everything back, stops
//! the threads and empties the tables.
//!
//! Memory invariant: `counters.cached_bytes` (folio buffers in mappings plus
//! reservations being turned into folios) never exceeds `capacity`; a folio
//! is allocated only through [`Shared::reserve_folio_buf`], which counts
//! pooled buffers too and evicts clean folios or waits for writeback to make
//! some clean.

use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::buf::{AlignedBuf, BufPool, BulkFree};
use crate::config::Config;
use crate::evict::Evictor;
use crate::file::{File, OpenOptions};
use crate::inode::Inode;
use crate::io::{open_backend, Io, IoPriority, OpenHow, BLOCK_SIZE};
use crate::locks;
use crate::stats::{Counters, Stats};
use crate::throttle::{ratelimit_bytes, throttle_pause, ThrottleInput};
use crate::writeback::domain::{Domain, WORK_BACKGROUND, WORK_RECLAIM};
use crate::writeback::Reason;

/// How long an allocation may wait for writeback to make memory clean before
/// it fails with `ENOMEM` (only a stuck device gets here).
const RESERVE_TIMEOUT_MS: u64 = 30_000;

/// Inodes kept in the table (each holds a descriptor); beyond this, idle
/// ones are synced and forgotten.
pub const MAX_CACHED_INODES: usize = 1024;

/// Worker threads: they fill asynchronous readahead windows and forget
/// idle inodes for the flusher.
const READAHEAD_WORKERS: usize = 2;

/// Reads of `io_max` submitted together by a readahead worker. With both
/// workers busy that keeps four 1 MiB reads in flight, the virtio disk's
/// best depth here (raw 1 MiB reads: ~1.8 GB/s at depth 4, ~1.35 at 8).
const READAHEAD_BATCH_IOS: u64 = 2;

/// Work for the worker threads.
enum WorkerJob {
    Readahead(ReadaheadJob),
    /// Forget an inode the flusher found idle: forgetting syncs it, and
    /// the flusher must never wait for writeback (its own passes of that
    /// inode may still be in flight, and only it completes them).
    ForgetIdle(Arc<Inode>),
}

struct ReadaheadJob {
    inode: Arc<Inode>,
    start_block: u64,
    end_block: u64,
    /// Filled for an uncached reader: drop behind it.
    dropbehind: bool,
    /// Where the reader's last read ended (bytes): a window the reader has
    /// already passed (it read those blocks itself) is not filled again.
    reader_pos: Arc<AtomicU64>,
}

/// Held by a file operation while it runs (see `Shared::ops_gate`).
pub type OpGuard<'a> = RwLockReadGuard<'a, ()>;

/// State shared by the cache, its files, domains and threads.
pub struct Shared {
    pub config: Config,
    pub counters: Counters,
    pub evictor: Evictor,
    pub buf_pool: BufPool,
    /// Time origin for dirtied-when stamps.
    pub epoch: Instant,
    pub io: Arc<dyn Io>,
    closed: AtomicBool,
    /// File operations hold it shared; closing takes it exclusively after
    /// setting `closed`, so every operation that got in has finished before
    /// the final sync.
    ops_gate: RwLock<()>,
    inodes: Mutex<HashMap<(u64, u64), Arc<Inode>>>,
    domains: Mutex<HashMap<u64, Arc<Domain>>>,
    progress: Mutex<u64>,
    progress_cond: Condvar,
    worker_tx: Mutex<Option<mpsc::Sender<WorkerJob>>>,
    readahead_threads: Mutex<Vec<JoinHandle<()>>>,
    next_inode_id: AtomicU64,
    all_direct_io: AtomicBool,
    /// Bytes dirty or under writeback (a block rewritten under writeback
    /// counts twice), what the dirty limit holds writers to. One counter,
    /// so no reader can see bytes moving between dirty and writeback in
    /// neither: it grows when blocks become dirty and shrinks when their
    /// writeback ends or truncation drops them; a failed writeback makes
    /// its bytes dirty (counted again) before it ends (uncounted).
    pub unclean_bytes: AtomicU64,
    /// Writers waiting in [`Shared::wait_for_dirty_room`]. While any waits,
    /// every flusher writes back whatever the background threshold says
    /// (the kernel's `balance_dirty_pages` starts background writeback
    /// whenever a task is over its limits): a waiter is released by the
    /// writeback it kicked, never by periodic writeback.
    pub nr_dirty_waiters: AtomicU64,
    /// [`RESERVE_TIMEOUT_MS`]; tests shorten it.
    reserve_timeout_ms: AtomicU64,
}

thread_local! {
    /// Bytes this thread dirtied since its last throttle check.
    static DIRTIED_SINCE_CHECK: Cell<u64> = const { Cell::new(0) };
}

/// One writer counted in [`Shared::nr_dirty_waiters`] for as long as it
/// lives, whichever way the wait ends.
struct DirtyWaiter<'a>(&'a AtomicU64);

impl<'a> DirtyWaiter<'a> {
    fn register(nr_waiters: &'a AtomicU64) -> DirtyWaiter<'a> {
        nr_waiters.fetch_add(1, Ordering::AcqRel);
        DirtyWaiter(nr_waiters)
    }
}

impl Drop for DirtyWaiter<'_> {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "dirty waiter count underflow");
    }
}

impl Shared {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The largest readahead window in blocks: `readahead_max`, but at most
    /// an eighth of the capacity, so windows in flight (which cannot be
    /// evicted) never crowd out the cache.
    pub fn readahead_max_blocks(&self) -> u64 {
        let bytes = self.config.readahead_max_bytes.min(self.config.capacity_bytes / 8);
        (bytes / crate::io::BLOCK_SIZE as u64).max(1)
    }

    /// Enters a file operation (see [`OpGuard`]); `EBADF` once closed.
    pub fn enter_op(&self) -> io::Result<OpGuard<'_>> {
        let guard = locks::read(&self.ops_gate);
        self.check_open()?;
        Ok(guard)
    }

    pub fn check_open(&self) -> io::Result<()> {
        if self.is_closed() {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(())
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.counters.dirty_bytes.load(Ordering::Acquire)
    }

    /// Wakes everyone waiting for writeback progress or freed memory.
    pub fn progress_made(&self) {
        let mut g = locks::lock(&self.progress);
        *g += 1;
        self.progress_cond.notify_all();
    }

    fn wait_progress(&self, timeout: Duration) {
        let g = locks::lock(&self.progress);
        drop(locks::wait_timeout(&self.progress_cond, g, timeout));
    }

    fn domains(&self) -> Vec<Arc<Domain>> {
        locks::lock(&self.domains).values().cloned().collect()
    }

    /// A buffer of `len` bytes for a new folio, accounted in
    /// `cached_bytes`: a pooled one if there is one of that size, else a new
    /// one if `cached + pooled + len <= capacity`, else after shrinking the
    /// pool, evicting clean folios, or waiting for writeback to make some
    /// clean.
    ///
    /// Without `may_wait` (asynchronous readahead, which is optional work)
    /// it fails with `ENOMEM` at once instead of waiting for writeback.
    pub fn reserve_folio_buf(&self, len: usize, may_wait: bool) -> io::Result<AlignedBuf> {
        let capacity = self.config.capacity_bytes;
        let bytes = len as u64;
        let started = Instant::now();
        loop {
            if let Some(buf) = self.buf_pool.take(len) {
                Counters::add(&self.counters.cached_bytes, bytes);
                return Ok(buf);
            }
            let cur = self.counters.cached_bytes.load(Ordering::Acquire);
            let pooled = self.buf_pool.pooled_bytes();
            if cur + pooled + bytes <= capacity {
                if self
                    .counters
                    .cached_bytes
                    .compare_exchange(cur, cur + bytes, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Ok(AlignedBuf::zeroed(len));
                }
                continue;
            }
            if pooled > 0 && self.buf_pool.shrink(cur + pooled + bytes - capacity) > 0 {
                continue;
            }
            let want = (cur + bytes).saturating_sub(capacity).max(bytes);
            if self.evictor.evict(&self.counters, want, &|buf, len| self.release_folio_buf(Some(buf), len)) > 0 {
                continue;
            }
            // Nothing clean to evict: everything is dirty, under writeback or
            // being filled. Make the flushers write and wait for them.
            if !may_wait {
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            for d in self.domains() {
                d.kick(WORK_RECLAIM);
            }
            self.wait_progress(Duration::from_millis(5));
            let timeout = Duration::from_millis(self.reserve_timeout_ms.load(Ordering::Relaxed));
            if started.elapsed() > timeout {
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "wbcache: no folio memory could be freed within {:.1} s (writeback stuck?)",
                        timeout.as_secs_f64()
                    ),
                ));
            }
        }
    }

    /// Evicts until folio memory is back under `capacity`. A copy of a
    /// buffer under writeback made under a folio lock (a fill or a truncate
    /// rewriting part of it) cannot wait for memory and is counted at once,
    /// so it can go over; the operation that made it calls this once it
    /// holds no lock, so no operation leaves the cache over capacity.
    pub fn evict_excess(&self) {
        let capacity = self.config.capacity_bytes;
        let used = self.counters.cached_bytes.load(Ordering::Acquire) + self.buf_pool.pooled_bytes();
        if used <= capacity {
            return;
        }
        let over = used - capacity;
        let from_pool = self.buf_pool.shrink(over);
        if from_pool < over {
            // Evicted buffers may land in the pool: empty it by as much.
            let evicted = self
                .evictor
                .evict(&self.counters, over - from_pool, &|buf, len| self.release_folio_buf(Some(buf), len));
            self.buf_pool.shrink(evicted);
        }
    }

    /// Gives back the buffer of a folio that left the cache (or of a
    /// reservation that was not used): pooled for reuse when possible.
    pub fn release_folio_buf(&self, buf: Option<AlignedBuf>, len: usize) {
        if let Some(buf) = buf {
            debug_assert_eq!(buf.len(), len);
            // A closed cache allocates nothing more: pooling would only
            // keep the memory until the last handle goes.
            if !self.is_closed() {
                self.buf_pool.put(buf, self.config.capacity_bytes / 4);
            }
        }
        Counters::sub(&self.counters.cached_bytes, len as u64);
        self.progress_made();
    }

    /// Throttles a writer that just dirtied `newly_bytes` in `domain`, as
    /// `balance_dirty_pages` does: rate-limited checks, a pause from the pure
    /// policy in [`crate::throttle`], and waiting for writeback progress
    /// while over the dirty limit.
    pub fn balance_dirty(&self, domain: &Domain, newly_bytes: u64) {
        let cfg = &self.config;
        let dirtied = DIRTIED_SINCE_CHECK.with(|c| {
            c.set(c.get() + newly_bytes);
            c.get()
        });
        let dirty = self.dirty_bytes();
        if dirty > cfg.dirty_background_bytes {
            domain.kick(WORK_BACKGROUND);
        }
        let freerun = crate::throttle::freerun_bytes(cfg.dirty_background_bytes, cfg.dirty_limit_bytes);
        if dirty <= freerun || (dirtied < ratelimit_bytes(cfg.dirty_limit_bytes) && dirty < cfg.dirty_limit_bytes) {
            return;
        }
        DIRTIED_SINCE_CHECK.with(|c| c.set(0));
        let started = Instant::now();
        let mut paused = false;
        // The pause is re-evaluated whenever writeback completes: the writer
        // owes `pause(dirty now)` of waiting for what it dirtied, and is let
        // go as soon as the time waited covers it. Dirty falling releases it
        // early; dirty staying high keeps it the full pause.
        loop {
            let input = ThrottleInput {
                nr_dirty_bytes: self.dirty_bytes(),
                dirty_background_bytes: cfg.dirty_background_bytes,
                dirty_limit_bytes: cfg.dirty_limit_bytes,
                write_bw_bytes_per_s: domain.write_bw_bytes_per_s.load(Ordering::Relaxed),
                dirtied_bytes: dirtied,
                pause_max: Duration::from_millis(cfg.throttle_pause_ms_max),
            };
            let pause = throttle_pause(&input);
            let waited = started.elapsed();
            if pause <= waited || self.is_closed() {
                break;
            }
            paused = true;
            domain.kick(WORK_BACKGROUND);
            self.wait_progress((pause - waited).min(Duration::from_millis(10)));
        }
        if paused {
            Counters::add(&self.counters.throttle_events, 1);
            Counters::add(&self.counters.throttle_us_total, started.elapsed().as_micros() as u64);
        }
    }

    /// Called before a write of `len` bytes: while the write could push
    /// dirty memory past `dirty_limit`, kick writeback and wait for it. This
    /// keeps a writer's peak dirty at or under the limit (concurrent writers
    /// can each overshoot by at most one write). Bytes under writeback count
    /// too, as in the kernel's `balance_dirty_pages`: a failed writeback
    /// makes them dirty again, and writers that had filled the room they
    /// left would push dirty past the limit (while fsyncs kept failing on a
    /// full file system, dirty grew to three times the limit).
    ///
    /// When writeback keeps failing (the dirty data cannot leave the cache)
    /// the writer gets `EIO` after a second instead of hanging; nothing of
    /// its write was applied.
    pub fn wait_for_dirty_room(&self, domain: &Domain, len: u64) -> io::Result<()> {
        let limit = self.config.dirty_limit_bytes;
        let room = len.min(limit / 4);
        if self.unclean_bytes.load(Ordering::Acquire) + room <= limit || self.is_closed() {
            return Ok(());
        }
        let started = Instant::now();
        let errors_before = self.counters.writeback_errors.load(Ordering::Acquire);
        let _waiting = DirtyWaiter::register(&self.nr_dirty_waiters);
        let mut result = Ok(());
        while self.unclean_bytes.load(Ordering::Acquire) + room > limit && !self.is_closed() {
            // Every domain, not only the writer's: the limit is cache-wide,
            // and the bytes holding this writer may sit on another device.
            domain.kick(WORK_BACKGROUND);
            for other in self.domains() {
                other.kick(WORK_BACKGROUND);
            }
            self.wait_progress(Duration::from_millis(self.config.throttle_pause_ms_max.min(50)));
            let failing = self.counters.writeback_errors.load(Ordering::Acquire) > errors_before;
            if failing && started.elapsed() > Duration::from_secs(1) {
                result = Err(io::Error::from_raw_os_error(libc::EIO));
                break;
            }
        }
        Counters::add(&self.counters.throttle_events, 1);
        Counters::add(&self.counters.throttle_us_total, started.elapsed().as_micros() as u64);
        result
    }

    /// Whether a writer is waiting for dirty room: the flushers write back
    /// for it whatever the background threshold says.
    pub fn has_dirty_waiters(&self) -> bool {
        self.nr_dirty_waiters.load(Ordering::Acquire) > 0
    }

    /// Queues an asynchronous readahead of blocks `[start, end)`.
    pub fn readahead_async(
        &self,
        inode: &Arc<Inode>,
        start_block: u64,
        end_block: u64,
        dropbehind: bool,
        reader_pos: &Arc<AtomicU64>,
    ) {
        // In batches, so both workers fill one window at once.
        let batch_blocks = (READAHEAD_BATCH_IOS * self.config.io_max_bytes / BLOCK_SIZE as u64).max(1);
        let mut start = start_block;
        while start < end_block {
            let end = (start + batch_blocks).min(end_block);
            let job = ReadaheadJob {
                inode: inode.clone(),
                start_block: start,
                end_block: end,
                dropbehind,
                reader_pos: reader_pos.clone(),
            };
            self.send_to_workers(WorkerJob::Readahead(job));
            start = end;
        }
    }

    fn send_to_workers(&self, job: WorkerJob) {
        if let Some(tx) = locks::lock(&self.worker_tx).as_ref() {
            let _ = tx.send(job);
        }
    }

    /// [`Shared::forget_inode_if_idle`] for the flusher: a worker thread
    /// does it (see [`WorkerJob::ForgetIdle`]), if it is worth a look.
    pub fn forget_inode_if_idle_later(&self, inode: &Arc<Inode>) {
        if locks::lock(&self.inodes).len() > MAX_CACHED_INODES {
            self.send_to_workers(WorkerJob::ForgetIdle(inode.clone()));
        }
    }

    /// Called when an inode may have become idle (last handle closed, or
    /// the flusher cleaned it). Idle inodes stay cached, like the kernel's
    /// inode cache, so reopening a file finds its data; only past
    /// [`MAX_CACHED_INODES`] is an idle inode forgotten, after its data was
    /// made durable (an error keeps it, so the next open or the cache close
    /// reports it).
    pub fn forget_inode_if_idle(&self, inode: &Arc<Inode>) {
        let idle = |i: &Inode| {
            i.handles.load(Ordering::Acquire) == 0 && !i.has_dirty() && !i.on_dirty_list.load(Ordering::Acquire)
        };
        if !idle(inode) || locks::lock(&self.inodes).len() <= MAX_CACHED_INODES {
            return;
        }
        if inode.needs_store_sync() && inode.write_and_sync(false, Reason::Close).is_err() {
            return;
        }
        let mut table = locks::lock(&self.inodes);
        if !idle(inode) || inode.needs_store_sync() {
            return;
        }
        let key = inode.info.store_id;
        if matches!(table.get(&key), Some(i) if Arc::ptr_eq(i, inode)) {
            table.remove(&key);
        }
        drop(table);
        let _bulk = BulkFree::begin();
        inode.drop_all_clean();
    }
}

/// A userspace page cache. Open files with [`Cache::open`]; close with
/// [`Cache::close`] (or drop) to write back and sync everything.
pub struct Cache {
    shared: Arc<Shared>,
}

impl Cache {
    /// Creates a cache with `config` (validated) and its I/O backend.
    pub fn new(config: Config) -> io::Result<Cache> {
        #[cfg(all(feature = "sim", not(test)))]
        if config.io == crate::io::IoKind::Sim {
            // It would report every fsync durable and keep nothing.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "io=sim is an in-memory test backend: use Cache::with_sim",
            ));
        }
        config.validate()?;
        let io = open_backend(config.io, config.io_depth);
        Cache::build(config, io)
    }

    /// Creates a cache over a simulated backend (tests and model checking;
    /// the `sim` feature).
    #[cfg(any(test, feature = "sim"))]
    pub fn with_sim(mut config: Config, sim: Arc<crate::io::sim::SimIo>) -> io::Result<Cache> {
        config.io = crate::io::IoKind::Sim;
        config.validate()?;
        Cache::build(config, sim)
    }

    fn build(config: Config, io: Arc<dyn Io>) -> io::Result<Cache> {
        let (tx, rx) = mpsc::channel::<WorkerJob>();
        let shared = Arc::new(Shared {
            config,
            counters: Counters::default(),
            evictor: Evictor::default(),
            buf_pool: BufPool::default(),
            epoch: Instant::now(),
            io,
            closed: AtomicBool::new(false),
            ops_gate: RwLock::new(()),
            inodes: Mutex::new(HashMap::new()),
            domains: Mutex::new(HashMap::new()),
            progress: Mutex::new(0),
            progress_cond: Condvar::new(),
            worker_tx: Mutex::new(Some(tx)),
            readahead_threads: Mutex::new(Vec::new()),
            next_inode_id: AtomicU64::new(1),
            all_direct_io: AtomicBool::new(true),
            unclean_bytes: AtomicU64::new(0),
            nr_dirty_waiters: AtomicU64::new(0),
            reserve_timeout_ms: AtomicU64::new(RESERVE_TIMEOUT_MS),
        });
        // Two workers, so one window's I/O is in flight while the previous
        // one completes.
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..READAHEAD_WORKERS {
            let rx = rx.clone();
            let worker = std::thread::Builder::new().name(format!("wbc-readahead-{n}")).spawn(move || loop {
                let job = match locks::lock(&rx).recv() {
                    Ok(WorkerJob::Readahead(job)) => job,
                    Ok(WorkerJob::ForgetIdle(inode)) => {
                        if !inode.shared.is_closed() {
                            inode.shared.forget_inode_if_idle(&inode);
                        }
                        continue;
                    }
                    Err(_) => break,
                };
                if !job.inode.shared.is_closed() {
                    // Batches of a few io_max reads: the device's sweet spot,
                    // and each becomes readable on its own. Errors surface to
                    // the reader, which retries; ENOMEM ends this optional work.
                    let batch_bytes = READAHEAD_BATCH_IOS * job.inode.shared.config.io_max_bytes;
                    let passed = job.reader_pos.load(Ordering::Acquire).div_ceil(BLOCK_SIZE as u64);
                    let start = job.start_block.max(passed);
                    if start >= job.end_block {
                        continue;
                    }
                    let _ = job.inode.fill_range_marked(
                        start,
                        job.end_block,
                        IoPriority::Async,
                        job.dropbehind,
                        batch_bytes,
                    );
                }
            })?;
            locks::lock(&shared.readahead_threads).push(worker);
        }
        Ok(Cache { shared })
    }

    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Opens (or creates) the file or block device at `path`.
    pub fn open(&self, path: impl AsRef<Path>, options: &OpenOptions) -> io::Result<File> {
        let path = path.as_ref();
        let shared = &self.shared;
        shared.check_open()?;
        options.validate()?;
        // A read-only handle opens the store read-only, as open(2) would
        // (no EACCES, EROFS or ETXTBSY that a reader would not get); the
        // first writable handle of the inode upgrades its store.
        let how = OpenHow {
            read: true,
            write: options.write,
            create: options.create,
            create_new: options.create_new,
            truncate: false, // through the cache, so cached data goes too
            mode: options.mode,
        };
        let store = shared.io.open(path, &how)?;
        let store_writable = options.write;
        let info = store.info().clone();
        if info.is_block_device && info.len_at_open % crate::io::BLOCK_SIZE as u64 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: block device size {} is not a multiple of 4096", path.display(), info.len_at_open),
            ));
        }
        if !info.direct_io {
            shared.all_direct_io.store(false, Ordering::Release);
        }
        let inode = {
            let mut table = locks::lock(&shared.inodes);
            if let Some(inode) = table.get(&info.store_id) {
                if store_writable {
                    inode.upgrade_store(store);
                }
                inode.handles.fetch_add(1, Ordering::AcqRel);
                inode.clone()
            } else {
                let domain = {
                    let mut domains = locks::lock(&shared.domains);
                    domains
                        .entry(info.device_id)
                        .or_insert_with(|| Domain::start(info.device_id, shared.clone()))
                        .clone()
                };
                let id = shared.next_inode_id.fetch_add(1, Ordering::Relaxed);
                let inode = Arc::new(Inode::new(id, store, store_writable, shared.clone(), domain));
                inode.handles.fetch_add(1, Ordering::AcqRel);
                table.insert(info.store_id, inode.clone());
                inode
            }
        };
        let file = File::new(inode, shared.clone(), options);
        // open(2) ignores O_TRUNC on a block device; so do we.
        if options.truncate && !info.is_block_device {
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let mut st = Stats::from_counters(&s.counters);
        st.capacity_bytes = s.config.capacity_bytes;
        st.io_backend = s.io.kind().name();
        st.direct_io = s.all_direct_io.load(Ordering::Acquire);
        st.open_inodes = locks::lock(&s.inodes).len() as u64;
        st
    }

    /// Writes back and syncs every dirty inode (like `syncfs`). Returns the
    /// first error; failed data stays dirty.
    pub fn sync_all(&self) -> io::Result<()> {
        self.shared.check_open()?;
        sync_everything(&self.shared, Reason::Close)
    }

    /// Writes back and syncs everything, stops the threads and frees the
    /// cache. Files still open afterwards fail with `EBADF`. Returns the
    /// first writeback or sync error (that data is lost with the cache).
    pub fn close(self) -> io::Result<()> {
        shutdown(&self.shared)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = shutdown(&self.shared);
    }
}

fn sync_everything(shared: &Shared, reason: Reason) -> io::Result<()> {
    let inodes: Vec<Arc<Inode>> = locks::lock(&shared.inodes).values().cloned().collect();
    let mut first_err = None;
    for inode in inodes {
        if let Err(e) = inode.write_and_sync(false, reason) {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn shutdown(shared: &Arc<Shared>) -> io::Result<()> {
    // Refuse new I/O first, so no write can land after the final sync.
    if shared.closed.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    // Wait for operations already inside (throttled writers see `closed`
    // and stop waiting); new ones fail with EBADF.
    drop(locks::write(&shared.ops_gate));
    let result = sync_everything(shared, Reason::Close);
    locks::lock(&shared.worker_tx).take();
    let workers: Vec<JoinHandle<()>> = locks::lock(&shared.readahead_threads).drain(..).collect();
    for h in workers {
        let _ = h.join();
    }
    let domains: Vec<Arc<Domain>> = locks::lock(&shared.domains).drain().map(|(_, d)| d).collect();
    for d in domains {
        d.stop();
    }
    let inodes: Vec<Arc<Inode>> = locks::lock(&shared.inodes).drain().map(|(_, i)| i).collect();
    let bulk = BulkFree::begin();
    for inode in &inodes {
        inode.drop_all_clean();
    }
    shared.evictor.clear();
    // Folios still mapped (busy, or dirty after failed writeback) go with
    // the inodes; then the pooled buffers: nothing will reuse them, and
    // open handles could keep the pool alive long after the close.
    drop(inodes);
    shared.buf_pool.shrink(u64::MAX);
    drop(bulk);
    shared.progress_made();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sim::{SimConfig, SimIo};
    use crate::io::BLOCK_SIZE;
    use crate::OpenOptions;

    /// A cache over a fresh sim backend, and its shared state.
    fn sim_cache(options: &str) -> (Cache, Arc<Shared>) {
        let sim = Arc::new(SimIo::new(SimConfig::default()));
        let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim).unwrap();
        let shared = cache.shared.clone();
        (cache, shared)
    }

    /// A closed cache keeps no buffer pool: the pool is emptied at close,
    /// and a buffer given back afterwards (by a handle that outlived the
    /// cache) is freed instead of pooled, so open handles cannot keep the
    /// cache's memory resident.
    #[test]
    fn a_closed_cache_pools_nothing() {
        let (cache, shared) = sim_cache("capacity=8M,folio_max=64K");
        let file = cache.open("/f", &OpenOptions::read_write_create()).unwrap();
        file.write_at(&vec![5u8; 4 << 20], 0).unwrap();
        file.sync_all().unwrap();
        assert_eq!(shared.unclean_bytes.load(Ordering::Acquire), 0, "nothing dirty or under writeback after a sync");
        // Reading 8M through an 8M cache evicts into the pool.
        let mut buf = vec![0u8; 64 << 10];
        for off in (0..8u64 << 20).step_by(64 << 10) {
            file.read_at(&mut buf, off).unwrap();
        }
        let held = shared.reserve_folio_buf(BLOCK_SIZE, true).unwrap();
        cache.close().unwrap();
        assert_eq!(shared.buf_pool.pooled_bytes(), 0, "close empties the pool");
        shared.release_folio_buf(Some(held), BLOCK_SIZE);
        assert_eq!(shared.buf_pool.pooled_bytes(), 0, "a buffer freed after close is not pooled");
        assert_eq!(shared.counters.cached_bytes.load(Ordering::Acquire), 0, "nothing stays counted");
        let err = file.read_at(&mut buf, 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }

    /// Folios that leave without eviction (truncation, drop-behind) while
    /// the cache is far under capacity do not pile up in the eviction
    /// queues: their entries (and the folio structs they hold) are swept
    /// once dead ones outnumber the live folios.
    #[test]
    fn folios_that_leave_without_eviction_leave_the_queues() {
        let (cache, shared) = sim_cache("capacity=16M,folio_max=4K");
        let f = cache.open("/t", &OpenOptions::read_write_create()).unwrap();
        let data = vec![5u8; 64 * BLOCK_SIZE];
        for _ in 0..500 {
            f.write_at(&data, 0).unwrap();
            f.set_len(0).unwrap();
        }
        assert!(shared.evictor.tracked() <= 2 * 64 + 64 + 1, "truncated: {} entries", shared.evictor.tracked());
        let block = vec![6u8; BLOCK_SIZE];
        for round in 0..20_000u64 {
            f.write_at_with(&block, (round % 64) * BLOCK_SIZE as u64, crate::WriteFlags::DONTCACHE).unwrap();
            if round % 64 == 63 {
                f.sync_data().unwrap();
            }
        }
        // At most 64 folios (the file's blocks) are live at any insert.
        assert!(shared.evictor.tracked() <= 2 * 64 + 64 + 1, "dropped behind: {} entries", shared.evictor.tracked());
        cache.close().unwrap();
    }

    /// A copy counted over capacity (as a fill or a truncate makes under a
    /// folio lock) is evicted back under it by the operation's end.
    #[test]
    fn excess_from_an_unreserved_copy_is_evicted() {
        let (cache, shared) = sim_cache("capacity=1M,folio_max=64K");
        let f = cache.open("/x", &OpenOptions::read_write_create()).unwrap();
        f.write_at(&vec![1u8; 2 << 20], 0).unwrap();
        f.sync_all().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        f.read_at(&mut buf, 1 << 20).unwrap();
        let full = shared.counters.cached_bytes.load(Ordering::Acquire) + shared.buf_pool.pooled_bytes();
        assert!(full > (1 << 20) - (64 << 10), "the cache is full: {full}");
        // The copy: counted without a reservation.
        Counters::add(&shared.counters.cached_bytes, 64 << 10);
        let evictions = shared.counters.evictions.load(Ordering::Acquire);
        shared.evict_excess();
        let after = shared.counters.cached_bytes.load(Ordering::Acquire) + shared.buf_pool.pooled_bytes();
        assert!(after <= 1 << 20, "still over: {after}");
        assert!(shared.counters.evictions.load(Ordering::Acquire) > evictions || shared.buf_pool.pooled_bytes() == 0);
        Counters::sub(&shared.counters.cached_bytes, 64 << 10);
        drop(f);
        cache.close().unwrap();
    }

    /// With all memory held by buffers nobody can evict, an allocation
    /// that may not wait fails with `ENOMEM` at once, and one that may
    /// waits for the timeout and then fails with an out-of-memory error
    /// (it kicked the flusher meanwhile). Once memory is given back,
    /// allocations succeed again.
    #[test]
    fn a_reservation_that_finds_nothing_to_free_times_out() {
        let (cache, shared) = sim_cache("capacity=1M,folio_max=64K,dirty_limit=128K");
        shared.reserve_timeout_ms.store(200, Ordering::Relaxed);
        // A file gives the cache a writeback domain whose flusher is kicked.
        let _file = cache.open("/f", &OpenOptions::read_write_create()).unwrap();
        let held: Vec<AlignedBuf> =
            (0..(1 << 20) / BLOCK_SIZE).map(|_| shared.reserve_folio_buf(BLOCK_SIZE, false).unwrap()).collect();
        let err = shared.reserve_folio_buf(BLOCK_SIZE, false).err().expect("memory is full");
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM));
        let wakeups_before = shared.counters.flusher_wakeups.load(Ordering::Acquire);
        let started = Instant::now();
        let err = shared.reserve_folio_buf(BLOCK_SIZE, true).err().expect("nothing can be freed");
        let waited = started.elapsed();
        assert_eq!(err.kind(), io::ErrorKind::OutOfMemory);
        assert!(err.to_string().contains("0.2 s"), "{err}");
        assert!(waited >= Duration::from_millis(200), "gave up after {waited:?}");
        assert_eq!(shared.counters.cached_bytes.load(Ordering::Acquire), 1 << 20, "a failure reserves nothing");
        assert!(shared.counters.flusher_wakeups.load(Ordering::Acquire) > wakeups_before, "the flusher was kicked");
        for b in held {
            shared.release_folio_buf(Some(b), BLOCK_SIZE);
        }
        let again = shared.reserve_folio_buf(BLOCK_SIZE, true).unwrap();
        shared.release_folio_buf(Some(again), BLOCK_SIZE);
        cache.close().unwrap();
    }
}
