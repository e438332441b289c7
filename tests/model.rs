//! Model tests through the `sim` backend: thousands of random operations on a
//! few files, checked against a reference `Vec<u8>` per file.
//!
//! - `model_random_ops_with_crashes`: writes (unaligned, spanning folios,
//!   uncached, also through handles opened uncached), reads,
//!   `sync_all`/`sync_data`, `set_len`, several handles per
//!   file that are closed and reopened, read-only handles, cursors, with a
//!   cache small enough that eviction and writeback run all the time, and
//!   random crashes. After every successful sync the durable image equals the
//!   reference exactly; after a crash every byte a successful sync covered and
//!   no later operation touched is still there, and the length is at least
//!   the smallest length since that sync.
//! - `model_with_injected_faults`: the same operations while write errors,
//!   `ENOSPC` and read errors are injected on random blocks. A successful sync
//!   always means "durable == reference"; a failed one is only allowed where
//!   an error could have happened since that handle last synced (errseq); once
//!   faults are cleared the next syncs succeed and everything is durable.
//! - `model_random_ops_with_crashes_quiet_flusher`: the crash model with the
//!   flusher idle (only the test thread writes back), so syncs race nothing.
//!
//! Seeds: `WBCACHE_MODEL_SEEDS=N` runs seeds `0..N` (default 8, 8 and 4),
//! `WBCACHE_MODEL_SEED=n` runs only seed `n`, `WBCACHE_MODEL_OPS=n` sets the
//! operations per seed, `WBCACHE_MODEL_VERBOSE=1` prints each seed's
//! counters. A failure prints the seed, the operation index and the last
//! operations.

mod common;
use common::{first_diff, split_at_cuts, split_at_cuts_mut, Rng};
use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use wbcache::sim::{Fault, SimConfig, SimIo};
use wbcache::{Cache, Config, File, OpenOptions, WriteFlags};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;
const BLOCK: usize = 4096;

/// Small cache: eviction, background and periodic writeback run constantly.
const CRASH_MODEL_OPTIONS: &str = "capacity=8M,dirty_limit=2M,dirty_background=1M,folio_max=256K,expire_ms=50";
/// Background and periodic writeback never start by themselves.
const QUIET_MODEL_OPTIONS: &str = "capacity=8M,dirty_limit=4M,dirty_background=3M,folio_max=256K,expire_ms=60000";
/// Even smaller, so reads keep going to the (faulty) store.
const FAULT_MODEL_OPTIONS: &str = "capacity=2M,dirty_limit=1M,dirty_background=512K,folio_max=64K,expire_ms=20";

/// How the writeback workers share the work, one per seed in turn (so the
/// default seeds run each): one worker; 1, 2 and 4 workers with inodes
/// bound round-robin; 1, 2 and 4 workers writing their own regions, small
/// enough (one to four folios) that every file spans several.
const ROUTINGS: &[&str] = &[
    "writeback_routing=single",
    "writeback_routing=rotor,writeback_workers=2",
    "writeback_routing=region,writeback_workers=2,region_size=256K",
    "writeback_routing=rotor,writeback_workers=4",
    "writeback_routing=region,writeback_workers=4,region_size=512K",
    "writeback_routing=rotor,writeback_workers=1",
    "writeback_routing=region,writeback_workers=1,region_size=1M",
];

/// A hang (for example a lost writeback ticket) fails the run instead of
/// blocking it forever. No operation legitimately takes this long.
const WATCHDOG: Duration = Duration::from_secs(45);

// ---------------------------------------------------------------------------
// Deterministic randomness

// ---------------------------------------------------------------------------
// Seeds, progress and failure reporting

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

fn seeds(default_count: u64) -> Vec<u64> {
    if let Some(seed) = env_u64("WBCACHE_MODEL_SEED") {
        return vec![seed];
    }
    (0..env_u64("WBCACHE_MODEL_SEEDS").unwrap_or(default_count)).collect()
}

fn ops_per_seed(default: usize) -> usize {
    env_u64("WBCACHE_MODEL_OPS").map_or(default, |n| n as usize)
}

/// Where a seed's run is, for failure messages and the watchdog.
struct Progress {
    test: &'static str,
    seed: u64,
    op: AtomicUsize,
    log: Mutex<VecDeque<String>>,
}

impl Progress {
    fn new(test: &'static str, seed: u64) -> Progress {
        Progress { test, seed, op: AtomicUsize::new(0), log: Mutex::new(VecDeque::new()) }
    }
    fn begin(&self, op: usize, what: String) {
        self.op.store(op, Ordering::Relaxed);
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == 64 {
            log.pop_front();
        }
        log.push_back(format!("#{op} {what}"));
    }
    fn ctx(&self) -> String {
        format!(
            "[{} seed {} op {}; rerun: WBCACHE_MODEL_SEED={} cargo test --test model {}]",
            self.test,
            self.seed,
            self.op.load(Ordering::Relaxed),
            self.seed,
            self.test
        )
    }
    fn report(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let ops: Vec<&str> = log.iter().map(String::as_str).collect();
        format!("{}\nlast operations:\n  {}", self.ctx(), ops.join("\n  "))
    }
}

/// Runs `body` for every seed on its own thread; a failure or a hang (no new
/// operation for [`WATCHDOG`]) fails the test naming the seed, the
/// operation and how to rerun it. A hung seed's thread is left behind.
fn run_seeds(test: &'static str, default_count: u64, body: fn(&Progress)) {
    for seed in seeds(default_count) {
        let progress = Arc::new(Progress::new(test, seed));
        let (tx, rx) = mpsc::channel();
        let for_thread = progress.clone();
        std::thread::Builder::new()
            .name(format!("{test}-seed-{seed}"))
            .spawn(move || {
                let outcome = catch_unwind(AssertUnwindSafe(|| body(&for_thread)));
                let _ = tx.send(outcome);
            })
            .unwrap();
        let mut last_op = usize::MAX;
        let mut last_change = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Ok(())) => break,
                Ok(Err(panic)) => {
                    eprintln!("FAILED {}", progress.report());
                    resume_unwind(panic);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the seed thread always reports"),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let op = progress.op.load(Ordering::Relaxed);
                    if op != last_op {
                        last_op = op;
                        last_change = Instant::now();
                    } else if last_change.elapsed() > WATCHDOG {
                        panic!(
                            "HANG: no progress for {WATCHDOG:?} (an engine thread that panicked, printed above, \
                             can leave waiters hanging)\n{}",
                            progress.report()
                        );
                    }
                }
            }
        }
    }
}

fn assert_bytes(got: &[u8], want: &[u8], what: &str, ctx: &str) {
    if got != want {
        panic!("{what}: {} {ctx}", first_diff(got, want));
    }
}

// ---------------------------------------------------------------------------
// The model

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Crashes,
    Faults,
    /// As `Crashes`, but the flusher stays idle (no uncached writes, a long
    /// expire, and the model syncs before dirty data reaches the background
    /// threshold): only the test thread writes back.
    Quiet,
}

struct Handle {
    file: File,
    writable: bool,
    /// An error may still be reported to this handle by its next sync:
    /// faults were active since its last sync (or since it was opened while
    /// an error could be unseen).
    may_err: bool,
}

struct FileModel {
    path: PathBuf,
    /// What reads must return.
    data: Vec<u8>,
    handles: Vec<Handle>,
    /// Snapshot of `data` at the last successful sync (or at reboot).
    synced: Vec<u8>,
    /// Bytes of `synced` that a later write or `set_len` touched.
    modified: Vec<bool>,
    /// Smallest length the file had since `synced` was taken.
    min_len: usize,
    /// Fault mode: faults for this path may still fire.
    faults_active: bool,
    read_faults_active: bool,
    /// Fault mode: a handle opened now may still see an unseen error.
    new_handle_may_err: bool,
}

impl FileModel {
    fn new(path: PathBuf, data: Vec<u8>) -> FileModel {
        let len = data.len();
        FileModel {
            path,
            synced: data.clone(),
            modified: vec![false; len],
            min_len: len,
            data,
            handles: Vec::new(),
            faults_active: false,
            read_faults_active: false,
            new_handle_may_err: false,
        }
    }

    fn touch(&mut self, start: usize, end: usize) {
        let end = end.min(self.modified.len());
        if start < end {
            self.modified[start..end].iter_mut().for_each(|m| *m = true);
        }
    }

    fn apply_write(&mut self, off: usize, bytes: &[u8]) {
        let old_len = self.data.len();
        let end = off + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[off..end].copy_from_slice(bytes);
        self.touch(off.min(old_len), end);
    }

    fn apply_set_len(&mut self, new_len: usize) {
        let old_len = self.data.len();
        self.data.resize(new_len, 0);
        self.touch(new_len.min(old_len), new_len.max(old_len));
        self.min_len = self.min_len.min(new_len);
    }

    fn synced_now(&mut self) {
        self.synced.clone_from(&self.data);
        self.modified = vec![false; self.data.len()];
        self.min_len = self.data.len();
    }
}

struct Model<'p> {
    mode: Mode,
    progress: &'p Progress,
    rng: Rng,
    sim: Arc<SimIo>,
    config: Config,
    cache: Option<Cache>,
    files: Vec<FileModel>,
    max_file_bytes: usize,
    crashes: usize,
}

impl Drop for Model<'_> {
    /// On a failure, leak the cache instead of closing it: closing waits for
    /// writeback, which never ends if an engine thread died, and the test
    /// should report its own assertion, not a hang.
    fn drop(&mut self) {
        if std::thread::panicking() {
            for f in &mut self.files {
                f.handles.drain(..).for_each(std::mem::forget);
            }
            std::mem::forget(self.cache.take());
        }
    }
}

impl<'p> Model<'p> {
    fn new(mode: Mode, progress: &'p Progress) -> Model<'p> {
        let seed = progress.seed;
        let mut rng = Rng::new(seed);
        let sim = Arc::new(SimIo::new(SimConfig {
            seed,
            latency_us_max: 20,
            short_transfer_percent: 10,
            retryable_error_percent: 5,
            direct_io: true,
            ..SimConfig::default()
        }));
        let base = match mode {
            Mode::Crashes => CRASH_MODEL_OPTIONS,
            Mode::Faults => FAULT_MODEL_OPTIONS,
            Mode::Quiet => QUIET_MODEL_OPTIONS,
        };
        // Vary the I/O size so merged and split writeback both happen.
        let io_max = ["64K", "256K", "1M"][rng.below(3)];
        let routing = ROUTINGS[(seed % ROUTINGS.len() as u64) as usize];
        let config = Config::from_options(&format!("{base},io_max={io_max},{routing}")).unwrap();
        let nr_files = if mode == Mode::Faults { 2 } else { 3 + rng.below(2) };
        let files = (0..nr_files).map(|i| FileModel::new(PathBuf::from(format!("/model/f{i}")), Vec::new())).collect();
        let max_file_bytes = if mode == Mode::Faults { 3 * MIB / 2 } else { 4 * MIB };
        let cache = Cache::with_sim(config.clone(), sim.clone()).unwrap();
        Model { mode, progress, rng, sim, config, cache: Some(cache), files, max_file_bytes, crashes: 0 }
    }

    fn ctx(&self) -> String {
        let c = &self.config;
        format!("{} [{} x{}]", self.progress.ctx(), c.writeback_routing.name(), c.writeback_workers)
    }

    fn verbose(&self, when: &str) {
        if std::env::var_os("WBCACHE_MODEL_VERBOSE").is_some() {
            let st = self.cache().stats();
            eprintln!("{} {when}, crashes {}: {st:?}\n  sim: {:?}", self.ctx(), self.crashes, self.sim.stats());
        }
    }

    fn cache(&self) -> &Cache {
        self.cache.as_ref().expect("cache is open")
    }

    fn open_handle(&mut self, fi: usize, writable: bool) {
        let options = if writable {
            if self.rng.chance(50) {
                OpenOptions::read_write_create()
            } else {
                OpenOptions::new().write(true)
            }
        } else {
            OpenOptions::new()
        };
        // Some handles are uncached as a whole (the quiet mode's flusher
        // must not be kicked).
        let options = options.dontcache(self.mode != Mode::Quiet && self.rng.chance(20));
        if self.files[fi].handles.len() >= 5 {
            let victim = self.rng.below(5);
            self.files[fi].handles.swap_remove(victim);
        }
        let file = self.cache().open(&self.files[fi].path, &options).unwrap_or_else(|e| {
            panic!("open {} writable={writable}: {e} {}", self.files[fi].path.display(), self.ctx())
        });
        let f = &mut self.files[fi];
        let may_err = f.new_handle_may_err;
        f.handles.push(Handle { file, writable, may_err });
    }

    /// Index of a random handle of file `fi` (opening one if none is open).
    fn pick_handle(&mut self, fi: usize, need_write: bool) -> usize {
        if !self.files[fi].handles.iter().any(|h| h.writable || !need_write) {
            self.open_handle(fi, true);
        }
        loop {
            let hi = self.rng.below(self.files[fi].handles.len());
            if self.files[fi].handles[hi].writable || !need_write {
                return hi;
            }
        }
    }

    fn check_len(&self, fi: usize) {
        let f = &self.files[fi];
        for h in &f.handles {
            let len = h.file.len().unwrap();
            assert_eq!(len, f.data.len() as u64, "len() of {} {}", f.path.display(), self.ctx());
        }
    }

    fn check_memory(&self) {
        let st = self.cache().stats();
        assert!(
            st.cached_bytes <= self.config.capacity_bytes,
            "cached {} > capacity {} {}",
            st.cached_bytes,
            self.config.capacity_bytes,
            self.ctx()
        );
    }

    /// A write position: anywhere, near the end, or near a folio boundary.
    fn pick_offset(&mut self, fi: usize) -> usize {
        let len = self.files[fi].data.len();
        let max = self.max_file_bytes;
        match self.rng.below(4) {
            0 | 1 => self.rng.below(max),
            2 => (len + self.rng.below(64 * KIB)).saturating_sub(32 * KIB).min(max),
            _ => {
                let folio = [BLOCK, 64 * KIB, 256 * KIB][self.rng.below(3)];
                let at = self.rng.below(max / folio + 1) * folio;
                (at + self.rng.below(2 * BLOCK)).saturating_sub(BLOCK).min(max)
            }
        }
    }

    fn pick_len(&mut self) -> usize {
        match self.rng.below(10) {
            0..=3 => self.rng.between(1, 600),
            4..=6 => self.rng.between(1, 20 * KIB),
            7 | 8 => self.rng.between(20 * KIB, 300 * KIB),
            _ => self.rng.between(300 * KIB, 700 * KIB),
        }
    }

    /// Where a vectored call splits its buffer: up to 8 sorted cut points
    /// (1 in 8 calls: up to 100), repeats (empty buffers) and the ends
    /// included.
    fn pick_cuts(&mut self, len: usize) -> Vec<usize> {
        let count = if self.rng.chance(12) { self.rng.below(101) } else { self.rng.below(9) };
        let mut cuts: Vec<usize> = (0..count).map(|_| self.rng.below(len + 1)).collect();
        cuts.sort_unstable();
        cuts
    }

    fn op_write(&mut self, fi: usize, op: usize) {
        let hi = self.pick_handle(fi, true);
        let off = self.pick_offset(fi);
        let len = self.pick_len();
        let dontcache = self.mode != Mode::Quiet && self.rng.chance(25);
        // write_all would hide where a short write stopped.
        let via_cursor = !dontcache && self.rng.chance(10) && !self.files.iter().any(|f| f.faults_active);
        let cuts = if !via_cursor && self.rng.chance(15) { Some(self.pick_cuts(len)) } else { None };
        let mut data = vec![0u8; len];
        self.rng.fill(&mut data);
        self.progress.begin(
            op,
            format!(
                "write f{fi} h{hi} off {off} len {len} dontcache {dontcache} cursor {via_cursor} vectored {cuts:?}"
            ),
        );
        let f = &self.files[fi];
        let file = &f.handles[hi].file;
        let flags = if dontcache { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
        let result = if via_cursor {
            let mut c = file.cursor();
            c.seek(SeekFrom::Start(off as u64)).unwrap();
            c.write_all(&data).map(|()| len)
        } else if let Some(cuts) = &cuts {
            let pieces: Vec<IoSlice> = split_at_cuts(&data, cuts).into_iter().map(IoSlice::new).collect();
            file.write_vectored_at_with(&pieces, off as u64, flags)
        } else if dontcache {
            file.write_at_with(&data, off as u64, WriteFlags::DONTCACHE)
        } else {
            file.write_at(&data, off as u64)
        };
        // A write may fail or come back short only because of a fault: a
        // read fault on an edge block it must fill, or writeback failing
        // (any file) while it waits for dirty room.
        let faults = f.read_faults_active || self.files.iter().any(|f| f.faults_active);
        match result {
            Ok(n) => {
                if n != len {
                    assert!(faults, "short write {n} of {len} without faults {}", self.ctx());
                    assert!(n > 0 && n < len, "write returned {n} of {len} {}", self.ctx());
                }
                self.files[fi].apply_write(off, &data[..n]);
                if self.mode == Mode::Quiet && self.cache().stats().dirty_bytes > (3 * MIB / 2) as u64 {
                    self.op_cache_sync(op);
                }
            }
            Err(e) => {
                assert!(faults, "write failed without faults: {e} {}", self.ctx());
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "write error {e} {}", self.ctx());
            }
        }
    }

    fn op_read(&mut self, fi: usize, op: usize) {
        let hi = self.pick_handle(fi, false);
        let len = self.files[fi].data.len();
        let off = match self.rng.below(3) {
            0 => self.rng.below(len + 64 * KIB),
            1 => self.rng.below(len / BLOCK + 2) * BLOCK,
            _ => len.saturating_sub(self.rng.below(8 * KIB)),
        };
        let want_len = self.pick_len();
        let dontcache = self.rng.chance(20);
        let via_cursor = !dontcache && self.rng.chance(10);
        let cuts = if !via_cursor && self.rng.chance(15) { Some(self.pick_cuts(want_len)) } else { None };
        self.progress.begin(
            op,
            format!(
                "read f{fi} h{hi} off {off} len {want_len} dontcache {dontcache} cursor {via_cursor} vectored {cuts:?}"
            ),
        );
        let f = &self.files[fi];
        let file = &f.handles[hi].file;
        let mut buf = vec![0xA5u8; want_len];
        let flags = if dontcache { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
        let result = if via_cursor {
            let mut c = file.cursor();
            c.seek(SeekFrom::Start(off as u64)).unwrap();
            // read() may return less than asked only at end of file.
            c.read(&mut buf)
        } else if let Some(cuts) = &cuts {
            let mut pieces: Vec<IoSliceMut> =
                split_at_cuts_mut(&mut buf, cuts).into_iter().map(IoSliceMut::new).collect();
            file.read_vectored_at_with(&mut pieces, off as u64, flags)
        } else if dontcache {
            file.read_at_with(&mut buf, off as u64, WriteFlags::DONTCACHE)
        } else {
            file.read_at(&mut buf, off as u64)
        };
        let expect = &f.data[off.min(len)..(off + want_len).min(len)];
        match result {
            Ok(n) => {
                assert_eq!(n, expect.len(), "read length at {off} (file {len}) {}", self.ctx());
                assert_bytes(&buf[..n], expect, &format!("read f{fi} at {off}"), &self.ctx());
            }
            Err(e) => {
                assert!(f.read_faults_active, "read failed without faults: {e} {}", self.ctx());
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "read error {e} {}", self.ctx());
            }
        }
    }

    /// After a successful sync of file `fi` nothing of it is left that is
    /// not durable: the durable image is the reference, exactly.
    fn check_durable(&self, fi: usize, what: &str) {
        let f = &self.files[fi];
        let durable = self.sim.durable_image(&f.path).expect("file exists");
        assert_bytes(&durable, &f.data, &format!("durable image of {} after {what}", f.path.display()), &self.ctx());
    }

    fn op_sync(&mut self, fi: usize, op: usize) {
        let hi = self.pick_handle(fi, false);
        let data_only = self.rng.chance(50);
        self.progress.begin(op, format!("sync f{fi} h{hi} data_only {data_only}"));
        let file = &self.files[fi].handles[hi].file;
        let result = if data_only { file.sync_data() } else { file.sync_all() };
        self.after_sync(fi, hi, result, "sync");
    }

    fn after_sync(&mut self, fi: usize, hi: usize, result: std::io::Result<()>, what: &str) {
        let f = &self.files[fi];
        match result {
            Ok(()) => {
                self.check_durable(fi, what);
                self.files[fi].synced_now();
            }
            Err(e) => {
                assert!(f.handles[hi].may_err, "{what} of f{fi} h{hi} failed unexpectedly: {e} {}", self.ctx());
                let errno = e.raw_os_error();
                assert!(
                    errno == Some(libc::EIO) || errno == Some(libc::ENOSPC),
                    "{what} error must be EIO or ENOSPC: {e} {}",
                    self.ctx()
                );
            }
        }
        // The cursor now stands at the newest error: only faults still
        // active can produce another one. Any sync with every fault cleared
        // marks the newest error seen, so new handles start clean.
        let f = &mut self.files[fi];
        f.handles[hi].may_err = f.faults_active;
        if !f.faults_active {
            f.new_handle_may_err = false;
        }
    }

    fn op_set_len(&mut self, fi: usize, op: usize) {
        let hi = self.pick_handle(fi, true);
        let len = self.files[fi].data.len();
        let new_len = match self.rng.below(10) {
            0 | 1 => self.rng.below(len + 1),
            2..=5 => len.saturating_sub(self.rng.below(2 * BLOCK)),
            6 => len,
            _ => (len + self.rng.below(300 * KIB)).min(self.max_file_bytes),
        };
        self.progress.begin(op, format!("set_len f{fi} h{hi} {len} -> {new_len}"));
        self.files[fi].handles[hi]
            .file
            .set_len(new_len as u64)
            .unwrap_or_else(|e| panic!("set_len {new_len}: {e} {}", self.ctx()));
        self.files[fi].apply_set_len(new_len);
    }

    fn op_reopen(&mut self, fi: usize, op: usize) {
        let n = self.files[fi].handles.len();
        let choice = self.rng.below(10);
        self.progress.begin(op, format!("reopen f{fi} ({n} handles) choice {choice}"));
        match choice {
            // Close every handle: a clean inode may leave the table.
            0 => self.files[fi].handles.clear(),
            1 | 2 => self.open_handle(fi, false),
            _ => {
                if n > 0 {
                    let hi = self.rng.below(n);
                    self.files[fi].handles.swap_remove(hi);
                }
                if self.files[fi].handles.len() < 3 {
                    self.open_handle(fi, true);
                }
            }
        }
    }

    fn op_read_only_misuse(&mut self, fi: usize, op: usize) {
        self.progress.begin(op, format!("read-only misuse f{fi}"));
        self.open_handle(fi, false);
        let ro = &self.files[fi].handles.last().unwrap().file;
        let e = ro.write_at(b"nope", 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{}", self.ctx());
        let e = ro.set_len(0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{}", self.ctx());
    }

    fn op_cache_sync(&mut self, op: usize) {
        self.progress.begin(op, "cache.sync_all".into());
        let result = self.cache().sync_all();
        match result {
            Ok(()) => {
                // Like syncfs: every file, also those without an open handle
                // (see `errors::cache_close_syncs_data_of_files_closed_earlier`)
                // and those whose flusher writeback failed meanwhile (see
                // `errors::cache_sync_all_reports_failed_concurrent_writeback`).
                for fi in 0..self.files.len() {
                    self.check_durable(fi, "Cache::sync_all");
                    self.files[fi].synced_now();
                }
            }
            // Cache::sync_all reports whatever failed, without errseq.
            Err(e) => assert!(self.files.iter().any(|f| f.faults_active), "cache sync failed: {e} {}", self.ctx()),
        }
    }

    /// Lets periodic (expire) writeback and the flusher catch up.
    fn op_idle(&mut self, op: usize) {
        let ms = self.config.expire_ms + self.rng.below(20) as u64;
        self.progress.begin(op, format!("idle {ms} ms"));
        std::thread::sleep(Duration::from_millis(ms));
    }

    fn op_inject(&mut self, fi: usize, op: usize) {
        let blocks = self.files[fi].data.len() / BLOCK + 2;
        let block = self.rng.below(blocks) as u64;
        let (fault, times) = match self.rng.below(5) {
            0 | 1 => (Fault::WriteEio, self.rng.between(1, 3) as u32),
            2 => (Fault::Enospc, self.rng.between(1, 2) as u32),
            3 => (Fault::ReadEio, self.rng.between(1, 2) as u32),
            _ => (Fault::ReadEio, u32::MAX),
        };
        self.progress.begin(op, format!("inject f{fi} block {block} {fault:?} x{times}"));
        let f = &mut self.files[fi];
        self.sim.inject(&f.path, block, fault, times);
        f.faults_active = true;
        f.new_handle_may_err = true;
        if fault == Fault::ReadEio {
            f.read_faults_active = true;
        }
        for h in &mut f.handles {
            h.may_err = true;
        }
    }

    /// Clears every fault; then each handle's next sync may still report one
    /// error it has not seen, and the one after must succeed.
    fn op_clear_and_settle(&mut self, op: usize) {
        self.progress.begin(op, "clear faults and sync every handle".into());
        self.sim.clear_faults();
        for f in &mut self.files {
            f.faults_active = false;
            f.read_faults_active = false;
        }
        for fi in 0..self.files.len() {
            if self.files[fi].handles.is_empty() {
                self.open_handle(fi, true);
            }
            for hi in 0..self.files[fi].handles.len() {
                let file = &self.files[fi].handles[hi].file;
                let first = file.sync_all();
                let failed = first.is_err();
                self.after_sync(fi, hi, first, "first sync after clearing faults");
                if failed {
                    let second = self.files[fi].handles[hi].file.sync_all();
                    assert!(second.is_ok(), "second sync after clearing faults: {second:?} {}", self.ctx());
                    self.after_sync(fi, hi, second, "second sync after clearing faults");
                }
            }
            self.check_durable(fi, "settling");
        }
    }

    /// Power loss: the old cache's stores die, the cache is dropped, and the
    /// durable images must hold everything a successful sync covered.
    fn op_crash(&mut self, op: usize) {
        let crash_seed = self.rng.next_u64();
        self.progress.begin(op, format!("crash {crash_seed:#x}"));
        self.verbose("before crash");
        self.sim.crash(crash_seed);
        self.crashes += 1;
        for f in &mut self.files {
            f.handles.clear();
        }
        // Dropping writes back into dead stores: errors, ignored.
        drop(self.cache.take());
        for f in &mut self.files {
            let durable = self.sim.durable_image(&f.path).expect("created files survive a crash");
            assert_eq!(self.sim.written_image(&f.path).as_deref(), Some(&durable[..]), "after a crash");
            assert!(
                durable.len() >= f.min_len,
                "{}: durable length {} < {} (the smallest length since the last successful sync) {}",
                f.path.display(),
                durable.len(),
                f.min_len,
                self.progress.ctx()
            );
            if let Some(i) = (0..f.synced.len()).find(|&i| !f.modified[i] && durable[i] != f.synced[i]) {
                panic!(
                    "{}: byte {i} was synced as {:#04x} and never touched again, but the crash left {:#04x} \
                     (durable length {}, synced length {}) {}",
                    f.path.display(),
                    f.synced[i],
                    durable[i],
                    durable.len(),
                    f.synced.len(),
                    self.progress.ctx()
                );
            }
            // The rebooted disk is the new truth.
            *f = FileModel::new(f.path.clone(), durable);
        }
        self.cache = Some(Cache::with_sim(self.config.clone(), self.sim.clone()).unwrap());
    }

    fn run(&mut self, ops: usize) {
        for fi in 0..self.files.len() {
            let file = self.cache().open(&self.files[fi].path, &OpenOptions::read_write_create()).unwrap();
            self.files[fi].handles.push(Handle { file, writable: true, may_err: false });
            self.files[fi].synced_now(); // created empty: durable at once
        }
        for op in 0..ops {
            let fi = self.rng.below(self.files.len());
            let roll = self.rng.below(1000);
            match (self.mode, roll) {
                (_, 0..=329) => self.op_write(fi, op),
                (_, 330..=659) => self.op_read(fi, op),
                (_, 660..=719) => self.op_sync(fi, op),
                (_, 720..=779) => self.op_set_len(fi, op),
                (_, 780..=839) => self.op_reopen(fi, op),
                (_, 840..=849) => self.op_read_only_misuse(fi, op),
                (_, 850..=859) => self.op_cache_sync(op),
                (Mode::Crashes | Mode::Quiet, 860..=862) => self.op_crash(op),
                (Mode::Crashes | Mode::Faults, 863..=866) => self.op_idle(op),
                (Mode::Faults, 860..=929) => self.op_inject(fi, op),
                (Mode::Faults, 930..=959) => self.op_clear_and_settle(op),
                _ => self.op_read(fi, op),
            }
            self.check_len(fi);
            self.check_memory();
        }
        self.progress.begin(ops, "final: clear, sync, close".into());
        self.op_clear_and_settle(ops);
        self.cache().sync_all().unwrap_or_else(|e| panic!("final Cache::sync_all: {e} {}", self.ctx()));
        let st = self.cache().stats();
        self.verbose("final");
        assert_eq!(st.dirty_bytes, 0, "dirty after a full sync {}", self.ctx());
        assert_eq!(st.writeback_bytes, 0, "writeback after a full sync {}", self.ctx());
        assert_eq!(self.sim.stats().overlapping_writes, 0, "two writes of one block in flight at once {}", self.ctx());
        let workers = self.config.writeback_workers as usize;
        assert_eq!(st.writeback_workers.len(), workers, "one counter set per worker {}", self.ctx());
        for f in &mut self.files {
            f.handles.clear();
        }
        self.cache.take().unwrap().close().unwrap_or_else(|e| panic!("close: {e} {}", self.progress.ctx()));
        for fi in 0..self.files.len() {
            self.check_durable(fi, "Cache::close");
        }
    }

    /// After [`Model::run`] closed the cache: a crash loses nothing; then a
    /// burst of writes (some synced) on a new cache and a crash in the
    /// middle of it.
    fn crash_after_close_then_burst(&mut self, op_base: usize) {
        self.progress.begin(op_base, "crash after close".into());
        self.sim.crash(self.rng.next_u64());
        for fi in 0..self.files.len() {
            self.check_durable(fi, "a crash after Cache::close");
        }
        self.cache = Some(Cache::with_sim(self.config.clone(), self.sim.clone()).unwrap());
        for f in &mut self.files {
            *f = FileModel::new(f.path.clone(), std::mem::take(&mut f.data));
        }
        for i in 0..120 {
            let fi = i % self.files.len();
            if i % 37 == 36 {
                self.op_sync(fi, op_base + 1 + i);
            } else {
                self.op_write(fi, op_base + 1 + i);
            }
        }
        self.op_crash(op_base + 121);
        drop(self.cache.take());
    }
}

#[test]
fn model_random_ops_with_crashes() {
    run_seeds("model_random_ops_with_crashes", 8, |progress| {
        let ops = ops_per_seed(2000);
        let mut model = Model::new(Mode::Crashes, progress);
        model.run(ops);
        model.crash_after_close_then_burst(ops + 1);
        assert!(model.crashes >= 1);
    });
}

/// The crash model with the flusher idle: every writeback is the test
/// thread's own, so the durable image is checked without racing the
/// flusher.
#[test]
fn model_random_ops_with_crashes_quiet_flusher() {
    run_seeds("model_random_ops_with_crashes_quiet_flusher", 8, |progress| {
        let ops = ops_per_seed(2000);
        let mut model = Model::new(Mode::Quiet, progress);
        model.run(ops);
        model.crash_after_close_then_burst(ops + 1);
        assert!(model.crashes >= 1);
    });
}

#[test]
fn model_with_injected_faults() {
    run_seeds("model_with_injected_faults", 4, |progress| {
        let ops = ops_per_seed(1200);
        let mut model = Model::new(Mode::Faults, progress);
        model.run(ops);
        let st = model.sim.stats();
        assert!(st.faults_fired > 0, "no injected fault fired: the test exercised nothing {}", progress.ctx());
    });
}

/// A read that hits `ReadEio` fails without changing anything; once the
/// fault is cleared the same read returns the right data, and writes that
/// only partly cover a faulty block fail instead of writing garbage.
#[test]
fn read_faults_do_not_corrupt_state() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 7, ..SimConfig::default() }));
    let path = Path::new("/model/readfault");
    let mut rng = Rng::new(7);
    let mut data = vec![0u8; 512 * KIB];
    rng.fill(&mut data);
    {
        let cache = Cache::with_sim(Config::from_options(FAULT_MODEL_OPTIONS).unwrap(), sim.clone()).unwrap();
        let f = cache.open(path, &OpenOptions::read_write_create()).unwrap();
        f.write_at(&data, 0).unwrap();
        drop(f);
        cache.close().unwrap();
    }
    // A fresh cache: nothing is cached, every read goes to the store.
    let cache = Cache::with_sim(Config::from_options(FAULT_MODEL_OPTIONS).unwrap(), sim.clone()).unwrap();
    let f = cache.open(path, &OpenOptions::read_write_create()).unwrap();
    sim.inject(path, 40, Fault::ReadEio, u32::MAX);
    let mut buf = vec![0u8; 64 * KIB];
    let e = f.read_at(&mut buf, 36 * BLOCK as u64).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let e = f.read_at(&mut buf[..100], 40 * BLOCK as u64 + 7).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "an error is not cached as data");
    // Blocks around it are fine.
    assert_eq!(f.read_at(&mut buf[..BLOCK], 39 * BLOCK as u64).unwrap(), BLOCK);
    assert_eq!(&buf[..BLOCK], &data[39 * BLOCK..40 * BLOCK]);
    // A partial write into the faulty block needs its old contents: error,
    // nothing written.
    let e = f.write_at(b"xyz", 40 * BLOCK as u64 + 5).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // A write starting in a good block and ending part-way into the faulty
    // one is cut before that block (or fails): never garbage.
    let patch = vec![0xEEu8; BLOCK + 100];
    match f.write_at(&patch, 39 * BLOCK as u64) {
        Ok(n) => {
            assert!(n == BLOCK || n == patch.len(), "short write of {n}");
            data[39 * BLOCK..39 * BLOCK + n].copy_from_slice(&patch[..n]);
        }
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO)),
    }
    // A write covering the whole faulty block does not need to read it.
    let whole = vec![0x5Au8; BLOCK];
    assert_eq!(f.write_at(&whole, 41 * BLOCK as u64).unwrap(), BLOCK);
    data[41 * BLOCK..42 * BLOCK].copy_from_slice(&whole);
    sim.clear_faults();
    let mut all = vec![0u8; data.len()];
    assert_eq!(f.read_at(&mut all, 0).unwrap(), data.len());
    assert_bytes(&all, &data, "after clearing the read fault", "");
    f.sync_all().unwrap();
    assert_bytes(&sim.durable_image(path).unwrap(), &data, "durable", "");
    drop(f);
    cache.close().unwrap();
}

/// Errseq through the model's eyes, deterministically: a write error found
/// by `sync_all` is reported, the data stays dirty and is retried, and once
/// the fault is gone the next sync succeeds with everything durable.
#[test]
fn failed_sync_is_retried_until_durable() {
    for (fault, errno) in [(Fault::WriteEio, libc::EIO), (Fault::Enospc, libc::ENOSPC)] {
        let sim = Arc::new(SimIo::new(SimConfig { seed: 3, latency_us_max: 10, ..SimConfig::default() }));
        let config =
            Config::from_options("capacity=8M,dirty_limit=2M,dirty_background=1M,folio_max=256K,expire_ms=60000")
                .unwrap();
        let cache = Cache::with_sim(config, sim.clone()).unwrap();
        let path = Path::new("/model/retry");
        let f = cache.open(path, &OpenOptions::read_write_create()).unwrap();
        let mut data = vec![0u8; 300 * KIB + 123];
        Rng::new(11).fill(&mut data);
        f.write_at(&data, 0).unwrap();
        sim.inject(path, 5, fault, u32::MAX);
        for attempt in 0..3 {
            let e = f.sync_all().unwrap_err();
            assert_eq!(e.raw_os_error(), Some(errno), "{fault:?} attempt {attempt}");
            assert!(cache.stats().dirty_bytes > 0, "failed data stays dirty");
            let durable = sim.durable_image(path).unwrap();
            assert!(durable.is_empty(), "a failed sync made nothing durable: {} bytes", durable.len());
        }
        sim.clear_faults();
        // Every error was reported by the sync that hit it: nothing is left
        // to report, and the retry succeeds.
        f.sync_all().unwrap();
        assert_bytes(&sim.durable_image(path).unwrap(), &data, "durable after the retry", &format!("{fault:?}"));
        assert_eq!(cache.stats().dirty_bytes, 0);
        drop(f);
        cache.close().unwrap();
    }
}
