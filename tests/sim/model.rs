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
//! - `concurrent_appends_through_the_sim_never_interleave`: threads append
//!   checksummed records through `O_APPEND` handles of one file while
//!   writeback runs all the time; every record is there once, whole.
//!
//! Every model mixes in the range calls and the name calls: `advise` (every
//! `Advice`, ranges to the end of the file and empty ones; reads after it
//! still match), `writeback_range` (every combination of its flags, no
//! durability promised; a wait may report an error as a sync does),
//! `punch_hole`/`zero_range`/`allocate` (and `fallocate` with `fallocate(2)`'s mode bits; misuse:
//! read-only handles, empty and reversed ranges, past `i64::MAX`, unknown
//! modes), handles opened with `append`, `Cache::remove_file` and
//! `Cache::rename` (a file created under a removed or renamed-away name is
//! empty; handles of a removed or replaced file keep working on it, as
//! "unlinked" files of the model, until they close).
//!
//! Seeds: `WBCACHE_MODEL_SEEDS=N` runs seeds `0..N` (default 8, 8, 4 and,
//! for the appends, 8), `WBCACHE_MODEL_SEED=n` runs only seed `n`,
//! `WBCACHE_MODEL_OPS=n` sets the operations per seed (the appends: records
//! of all threads), `WBCACHE_MODEL_VERBOSE=1` prints each seed's counters
//! (with how often each newer operation ran). A failure prints the seed, the operation index and the last
//! operations.

use crate::common;
use common::{first_diff, split_at_cuts, split_at_cuts_mut, Rng};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::{IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use wbcache::sim::{Fault, SimConfig, SimIo};
use wbcache::{Advice, Allocation, Cache, Config, File, OpenOptions, SyncRangeFlags, WriteFlags};

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
            "[{} seed {} op {}; rerun: WBCACHE_MODEL_SEED={} cargo test --test sim model::{}]",
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
    /// Opened with `append`: every write goes to the end of the file.
    append: bool,
    /// `Advice::NoReuse` given (and no `Advice::Normal` since): its reads
    /// and writes are uncached.
    noreuse: bool,
}

impl Handle {
    fn flags(&self) -> String {
        let mut s = String::new();
        for (on, name) in [(!self.writable, " ro"), (self.append, " append"), (self.noreuse, " noreuse")] {
            if on {
                s.push_str(name);
            }
        }
        s
    }
}

/// A `fallocate(2)` call the model makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Falloc {
    Punch,
    Zero { keep_size: bool },
    Allocate { keep_size: bool },
}

impl Falloc {
    fn mode(self) -> i32 {
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
        match self {
            Falloc::Punch => PUNCH | KEEP,
            Falloc::Zero { keep_size } => ZERO | if keep_size { KEEP } else { 0 },
            Falloc::Allocate { keep_size } => {
                if keep_size {
                    KEEP
                } else {
                    0
                }
            }
        }
    }
    /// Whether a range past the end extends the file.
    fn grows(self) -> bool {
        matches!(self, Falloc::Zero { keep_size: false } | Falloc::Allocate { keep_size: false })
    }
    fn zeroes(self) -> bool {
        !matches!(self, Falloc::Allocate { .. })
    }
}

struct FileModel {
    /// Its name now (for an unlinked file: the last name it had).
    path: PathBuf,
    /// Every name its stores may have been opened under (renames add
    /// one): injected faults belong to the name a store was opened with.
    aliases: Vec<PathBuf>,
    /// Removed (or replaced by a rename) while handles were open: they keep
    /// working on it until they close; it has no durable image to check.
    unlinked: bool,
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
            aliases: vec![path.clone()],
            path,
            unlinked: false,
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

    /// A `fallocate` of `[start, end)` that succeeded: like a write for the
    /// crash model (the store changes now, durably only at the next sync).
    fn apply_fallocate(&mut self, how: Falloc, start: u64, end: u64) {
        let old_len = self.data.len();
        if how.grows() && end > old_len as u64 {
            let new_len = usize::try_from(end).expect("a growing range stays small");
            self.data.resize(new_len, 0);
            self.touch(old_len, new_len);
        }
        if how.zeroes() {
            let len = self.data.len() as u64;
            let (s, e) = (start.min(len) as usize, end.min(len) as usize);
            self.data[s..e].fill(0);
            self.touch(s, e);
        }
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
    /// Fault mode: names faults were injected for since the last clearing
    /// (any fault, and read faults).
    fault_paths: HashSet<PathBuf>,
    read_fault_paths: HashSet<PathBuf>,
    /// For fresh names (`/model/r{n}`) that renames and re-creations use.
    next_name: usize,
    /// How often each of the newer operations ran (printed with
    /// `WBCACHE_MODEL_VERBOSE`, and checked to have run at all).
    counts: BTreeMap<&'static str, usize>,
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
            // Half the seeds write partial last blocks and small sync
            // appends through the store's buffered path, as real files do.
            tail_writes: seed % 2 == 1,
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
        Model {
            mode,
            progress,
            rng,
            sim,
            config,
            cache: Some(cache),
            files,
            max_file_bytes,
            crashes: 0,
            fault_paths: HashSet::new(),
            read_fault_paths: HashSet::new(),
            next_name: 0,
            counts: BTreeMap::new(),
        }
    }

    fn ctx(&self) -> String {
        let c = &self.config;
        format!("{} [{} x{}]", self.progress.ctx(), c.writeback_routing.name(), c.writeback_workers)
    }

    fn verbose(&self, when: &str) {
        if std::env::var_os("WBCACHE_MODEL_VERBOSE").is_some() {
            let st = self.cache().stats();
            eprintln!(
                "{} {when}, crashes {}: {st:?}\n  sim: {:?}\n  ops: {:?}",
                self.ctx(),
                self.crashes,
                self.sim.stats(),
                self.counts
            );
        }
    }

    fn cache(&self) -> &Cache {
        self.cache.as_ref().expect("cache is open")
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    fn open_handle(&mut self, fi: usize, writable: bool) {
        assert!(!self.files[fi].unlinked, "an unlinked file cannot be opened again");
        let options = if writable {
            if self.rng.chance(50) {
                OpenOptions::read_write_create()
            } else {
                OpenOptions::new().read(true).write(true)
            }
        } else {
            OpenOptions::new().read(true)
        };
        // Some handles are uncached as a whole (the quiet mode's flusher
        // must not be kicked).
        let options = options.dontcache(self.mode != Mode::Quiet && self.rng.chance(20));
        let append = writable && self.rng.chance(15);
        let options = options.append(append);
        if self.files[fi].handles.len() >= 5 {
            let victim = self.rng.below(5);
            self.files[fi].handles.swap_remove(victim);
        }
        let file = self.cache().open(&self.files[fi].path, &options).unwrap_or_else(|e| {
            panic!("open {} writable={writable}: {e} {}", self.files[fi].path.display(), self.ctx())
        });
        assert_eq!(file.is_append(), append, "{}", self.ctx());
        let f = &mut self.files[fi];
        let may_err = f.new_handle_may_err;
        f.handles.push(Handle { file, writable, may_err, append, noreuse: false });
    }

    /// Index of a random handle of file `fi` (opening one if none is open;
    /// an unlinked file must have one).
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
        let append = self.files[fi].handles[hi].append;
        let mut off = self.pick_offset(fi);
        let mut len = self.pick_len();
        if append {
            // The offset is ignored: any, even one no write could reach.
            if self.rng.chance(20) {
                off = [usize::MAX / 2, i64::MAX as usize, 0][self.rng.below(3)];
            }
            // Appends only grow the file: keep it near the model's size.
            len = len.min(self.max_file_bytes.saturating_sub(self.files[fi].data.len()).max(600));
            self.count("append write");
        }
        let at = if append { self.files[fi].data.len() } else { off };
        let dontcache = self.mode != Mode::Quiet && self.rng.chance(25);
        // write_all would hide where a short write stopped.
        let via_cursor = !dontcache && self.rng.chance(10) && !self.files.iter().any(|f| f.faults_active);
        let cuts = if !via_cursor && self.rng.chance(15) { Some(self.pick_cuts(len)) } else { None };
        let mut data = vec![0u8; len];
        self.rng.fill(&mut data);
        self.progress.begin(
            op,
            format!(
                "write f{fi} h{hi}{} off {off} (at {at}) len {len} dontcache {dontcache} cursor {via_cursor} \
                 vectored {cuts:?}",
                self.files[fi].handles[hi].flags()
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
                self.files[fi].apply_write(at, &data[..n]);
                self.quiet_sync_if_needed(op);
            }
            Err(e) => {
                assert!(faults, "write failed without faults: {e} {}", self.ctx());
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "write error {e} {}", self.ctx());
            }
        }
    }

    /// The quiet mode syncs before dirty data reaches the background
    /// threshold: everything, unlinked files through their handles (a
    /// cache's sync does not reach them).
    fn quiet_sync_if_needed(&mut self, op: usize) {
        if self.mode != Mode::Quiet || self.cache().stats().dirty_bytes <= (3 * MIB / 2) as u64 {
            return;
        }
        self.op_cache_sync(op);
        for fi in 0..self.files.len() {
            if self.files[fi].unlinked && !self.files[fi].handles.is_empty() {
                let result = self.files[fi].handles[0].file.sync_data();
                self.after_sync(fi, 0, result, "sync of an unlinked file");
            }
        }
    }

    /// Reads `[off, off + len)` of file `fi` through handle `hi` and checks
    /// it against the reference.
    fn verify_read(&self, fi: usize, hi: usize, off: usize, len: usize, what: &str) {
        let f = &self.files[fi];
        let flen = f.data.len();
        let mut buf = vec![0xA5u8; len];
        match f.handles[hi].file.read_at(&mut buf, off as u64) {
            Ok(n) => {
                let expect = &f.data[off.min(flen)..(off + len).min(flen)];
                assert_eq!(n, expect.len(), "{what}: read length at {off} (file {flen}) {}", self.ctx());
                assert_bytes(&buf[..n], expect, &format!("{what}: read f{fi} h{hi} at {off}"), &self.ctx());
            }
            Err(e) => {
                assert!(f.read_faults_active, "{what}: read failed without faults: {e} {}", self.ctx());
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: read error {e} {}", self.ctx());
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
        if f.unlinked {
            return; // no name: the sim has no image to show
        }
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
        self.cursor_advanced(fi, hi);
    }

    /// Handle `hi` of file `fi` just checked its error cursor (a sync, or
    /// a wait of `writeback_range` that reported an error): the cursor now
    /// stands at the newest error, so only faults still active can produce
    /// another one. Any check with every fault cleared marks the newest
    /// error seen, so new handles start clean.
    fn cursor_advanced(&mut self, fi: usize, hi: usize) {
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

    /// An operation on an unlinked file, through the handles it still has
    /// (it cannot be opened again).
    fn op_unlinked(&mut self, fi: usize, roll: usize, op: usize) {
        let has_writer = self.files[fi].handles.iter().any(|h| h.writable);
        self.count("unlinked op");
        match roll {
            0..=299 if has_writer => self.op_write(fi, op),
            300..=379 => self.op_sync(fi, op),
            380..=429 if has_writer => self.op_set_len(fi, op),
            430..=499 if has_writer => self.op_fallocate(fi, op),
            500..=549 => self.op_advise(fi, op),
            550..=589 => self.op_writeback_range(fi, op),
            590..=639 => {
                // Closing its last handle drops it.
                let n = self.files[fi].handles.len();
                let hi = self.rng.below(n);
                self.progress.begin(op, format!("close unlinked f{fi} h{hi} of {n}"));
                self.files[fi].handles.swap_remove(hi);
            }
            _ => self.op_read(fi, op),
        }
    }

    /// A byte range for `advise` and `writeback_range`: to the end of the
    /// file (`u64::MAX`), empty, inside, across or past the end, the whole
    /// file; 3 in 100 reversed (`InvalidInput`). Returns it and whether it
    /// is reversed.
    fn pick_io_range(&mut self, fi: usize) -> (u64, u64, bool) {
        let len = self.files[fi].data.len();
        let start = match self.rng.below(5) {
            0 => 0,
            1 => self.rng.below(len + 64 * KIB),
            2 => self.rng.below(len / BLOCK + 2) * BLOCK,
            3 => len.saturating_sub(self.rng.below(16 * KIB)),
            _ => self.pick_offset(fi),
        } as u64;
        if self.rng.chance(3) {
            let back = self.rng.between(1, 5000) as u64;
            return (start + back, start, true);
        }
        let end = match self.rng.below(6) {
            0 => u64::MAX,
            1 => start,
            2 => (len as u64).max(start),
            _ => start + self.pick_len() as u64,
        };
        (start, end, false)
    }

    fn op_advise(&mut self, fi: usize, op: usize) {
        use Advice::*;
        let hi = self.pick_handle(fi, false);
        // The quiet mode keeps the flusher idle: no drop-behind of dirty
        // data, no uncached writes.
        let advice = if self.mode == Mode::Quiet {
            [Normal, Sequential, Random, WillNeed][self.rng.below(4)]
        } else {
            [Normal, Sequential, Random, WillNeed, DontNeed, NoReuse][self.rng.below(6)]
        };
        let (start, end, reversed) = self.pick_io_range(fi);
        self.progress
            .begin(op, format!("advise f{fi} h{hi}{} {start}..{end} {advice:?}", self.files[fi].handles[hi].flags()));
        self.count("advise");
        let result = self.files[fi].handles[hi].file.advise(start..end, advice);
        if reversed {
            let e = result.expect_err("a reversed range is refused");
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "advise {start}..{end}: {e} {}", self.ctx());
            return;
        }
        result.unwrap_or_else(|e| panic!("advise {start}..{end} {advice:?}: {e} {}", self.ctx()));
        match advice {
            NoReuse => self.files[fi].handles[hi].noreuse = true,
            Normal => self.files[fi].handles[hi].noreuse = false,
            _ => {}
        }
        // Advice changes no byte, also while what it started (background
        // reads, drop-behind writeback) is still running.
        let len = self.files[fi].data.len();
        let off = (start as usize).min(len.saturating_sub(1));
        let n = self.rng.between(1, 256 * KIB);
        self.verify_read(fi, hi, off, n, &format!("after advise {advice:?}"));
    }

    fn op_writeback_range(&mut self, fi: usize, op: usize) {
        let hi = self.pick_handle(fi, false);
        let mut bits = self.rng.below(8) as u32;
        // The quiet mode: no writeback off the test thread (the range
        // writer writes a start that nobody waits for).
        if self.mode == Mode::Quiet && bits & SyncRangeFlags::WRITE.bits() != 0 {
            bits |= SyncRangeFlags::WAIT_AFTER.bits();
        }
        let how = SyncRangeFlags::from_bits(bits).unwrap();
        let (start, end, reversed) = self.pick_io_range(fi);
        self.progress.begin(
            op,
            format!("writeback_range f{fi} h{hi}{} {start}..{end} flags {bits}", self.files[fi].handles[hi].flags()),
        );
        self.count("writeback_range");
        let syncs_before = self.sim.stats().syncs;
        let result = self.files[fi].handles[hi].file.writeback_range(start..end, how);
        // It syncs no store (no durability promise). Only the quiet mode
        // can tell: nothing else runs there that could sync.
        if self.mode == Mode::Quiet {
            let syncs = self.sim.stats().syncs;
            assert_eq!(syncs, syncs_before, "writeback_range synced a store {}", self.ctx());
        }
        if reversed {
            let e = result.expect_err("a reversed range is refused");
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "writeback_range: {e} {}", self.ctx());
            return;
        }
        let waits = how.contains(SyncRangeFlags::WAIT_BEFORE) || how.contains(SyncRangeFlags::WAIT_AFTER);
        // No durability promise: nothing becomes "synced" here, whatever
        // it returns.
        if let Err(e) = result {
            let f = &self.files[fi];
            assert!(
                waits && f.handles[hi].may_err,
                "writeback_range (flags {bits}) of f{fi} h{hi} failed unexpectedly: {e} {}",
                self.ctx()
            );
            let errno = e.raw_os_error();
            assert!(
                errno == Some(libc::EIO) || errno == Some(libc::ENOSPC),
                "writeback_range error must be EIO or ENOSPC: {e} {}",
                self.ctx()
            );
            // Reported: the handle's cursor moved as a failed sync moves it.
            self.cursor_advanced(fi, hi);
            self.count("writeback_range error");
            return;
        }
        // Waiting before, writing and waiting after leaves nothing of the
        // range dirty (only the test thread writes): the store's written
        // image (not its durable one) holds the range's bytes.
        let all = SyncRangeFlags::WAIT_BEFORE | SyncRangeFlags::WRITE | SyncRangeFlags::WAIT_AFTER;
        let f = &self.files[fi];
        if how == all && self.mode != Mode::Faults && !f.unlinked {
            *self.counts.entry("writeback_range checked").or_default() += 1;
            let written = self.sim.written_image(&f.path).expect("file exists");
            let len = f.data.len();
            let (s, e) = ((start as usize).min(len), end.min(len as u64) as usize);
            let mut on_store = vec![0u8; e - s];
            if s < written.len() {
                let w = e.min(written.len());
                on_store[..w - s].copy_from_slice(&written[s..w]);
            }
            assert_bytes(
                &on_store,
                &f.data[s..e],
                &format!("written image of f{fi} {s}..{e} after writeback_range(all flags)"),
                &self.ctx(),
            );
        }
    }

    /// A range for `fallocate`: unaligned, across folios, to or past the
    /// end; to `i64::MAX` now and then for the modes that keep the size.
    /// Never empty; a range that grows the file stays within
    /// `max_file_bytes`.
    fn pick_falloc_range(&mut self, fi: usize, how: Falloc) -> (u64, u64) {
        let len = self.files[fi].data.len();
        let start = match self.rng.below(4) {
            0 => self.rng.below(len + 64 * KIB),
            1 => {
                let folio = [BLOCK, 64 * KIB, 256 * KIB][self.rng.below(3)];
                let at = self.rng.below(len / folio + 2) * folio;
                (at + self.rng.below(2 * BLOCK)).saturating_sub(BLOCK)
            }
            2 => len.saturating_sub(self.rng.below(16 * KIB)),
            _ => self.rng.below(len / 2 + 1),
        };
        let flen = match self.rng.below(8) {
            0..=3 => self.pick_len(),
            4 => len.saturating_sub(start).max(1),
            5 => len.saturating_sub(start) + self.rng.between(1, 64 * KIB),
            6 => self.rng.between(1, BLOCK),
            _ => self.rng.between(BLOCK, 2 * MIB),
        };
        let mut end = start + flen;
        if !how.grows() && self.rng.chance(5) {
            end = i64::MAX as usize;
        }
        let mut start = start;
        if how.grows() && end > self.max_file_bytes.max(len) {
            end = self.max_file_bytes.max(len);
            start = start.min(end - 1);
        }
        (start as u64, end as u64)
    }

    /// `punch_hole`, `zero_range` or `allocate` (or the same through
    /// `fallocate` with the mode bits), with the misuse cases now and then: a read-only
    /// handle (`EBADF`), an empty or reversed range (`InvalidInput`), an
    /// end past `i64::MAX` (`EFBIG`), an unknown mode (`EOPNOTSUPP`); none
    /// of them changes anything.
    fn op_fallocate(&mut self, fi: usize, op: usize) {
        self.count("fallocate");
        let roll = self.rng.below(100);
        let how = match roll {
            10..=44 => Falloc::Punch,
            45..=59 => Falloc::Zero { keep_size: true },
            60..=74 => Falloc::Zero { keep_size: false },
            75..=87 => Falloc::Allocate { keep_size: true },
            _ => Falloc::Allocate { keep_size: false },
        };
        if roll < 10 {
            return self.fallocate_misuse(fi, roll, op);
        }
        let hi = self.pick_handle(fi, true);
        let (start, end) = self.pick_falloc_range(fi, how);
        let via_mode = self.rng.chance(30);
        self.progress.begin(
            op,
            format!(
                "fallocate f{fi} h{hi}{} {how:?} {start}..{end} (file {}) via_mode {via_mode}",
                self.files[fi].handles[hi].flags(),
                self.files[fi].data.len()
            ),
        );
        self.count(match how {
            Falloc::Punch => "punch_hole",
            Falloc::Zero { .. } => "zero_range",
            Falloc::Allocate { .. } => "allocate",
        });
        let file = &self.files[fi].handles[hi].file;
        let range = start..end;
        let result = if via_mode {
            Allocation::try_from(how.mode()).and_then(|a| file.fallocate(range, a))
        } else {
            match how {
                Falloc::Punch => file.punch_hole(range),
                Falloc::Zero { keep_size } => file.zero_range(range, keep_size),
                Falloc::Allocate { keep_size } => file.allocate(range, keep_size),
            }
        };
        result.unwrap_or_else(|e| panic!("{how:?} {start}..{end}: {e} {}", self.ctx()));
        self.files[fi].apply_fallocate(how, start, end);
        // Both edges (partial blocks keep their other bytes), through
        // another handle too.
        let len = self.files[fi].data.len();
        let hr = self.pick_handle(fi, false);
        let s = (start as usize).min(len).saturating_sub(self.rng.below(BLOCK + 1));
        let n = self.rng.between(1, 3 * BLOCK);
        self.verify_read(fi, hi, s, n, &format!("start of {how:?}"));
        let e = (end.min(len as u64) as usize).saturating_sub(self.rng.below(2 * BLOCK + 1));
        let n = self.rng.between(1, 3 * BLOCK);
        self.verify_read(fi, hr, e, n, &format!("end of {how:?}"));
        self.quiet_sync_if_needed(op);
    }

    fn fallocate_misuse(&mut self, fi: usize, roll: usize, op: usize) {
        use std::io::ErrorKind::InvalidInput;
        let len = self.files[fi].data.len() as u64;
        let start = self.rng.below(len as usize + 2 * BLOCK) as u64;
        // A read-only handle: a new one (an unlinked file may have one).
        let ro = if self.files[fi].unlinked {
            self.files[fi].handles.iter().position(|h| !h.writable)
        } else {
            self.open_handle(fi, false);
            Some(self.files[fi].handles.len() - 1)
        };
        let (hi, what) = match (roll, ro) {
            (0..=2, Some(ro)) => (ro, "read-only handle"),
            (0..=5, _) => (self.pick_handle(fi, true), "empty range"),
            (6, _) => (self.pick_handle(fi, true), "reversed range"),
            (7 | 8, _) => (self.pick_handle(fi, true), "past i64::MAX"),
            _ => (self.pick_handle(fi, true), "unknown mode"),
        };
        let (range, mode) = match what {
            "read-only handle" => (start..start + self.rng.between(1, 100 * KIB) as u64, Falloc::Punch.mode()),
            "empty range" => (start..start, Falloc::Punch.mode()),
            "reversed range" => (start + 1..start, Falloc::Zero { keep_size: false }.mode()),
            "past i64::MAX" => (start..u64::MAX - self.rng.below(1000) as u64, Falloc::Punch.mode()),
            _ => (start..start + BLOCK as u64, [libc::FALLOC_FL_PUNCH_HOLE, 0x100, 0x8][self.rng.below(3)]),
        };
        self.progress.begin(op, format!("fallocate misuse f{fi} h{hi}: {what} {range:?} mode {mode:#x}"));
        self.count("fallocate misuse");
        let file = &self.files[fi].handles[hi].file;
        let result = match (what, self.rng.below(4)) {
            ("unknown mode", _) | (_, 3) => Allocation::try_from(mode).and_then(|a| file.fallocate(range.clone(), a)),
            (_, 0) => file.punch_hole(range.clone()),
            (_, 1) => file.zero_range(range.clone(), self.rng.chance(50)),
            _ => file.allocate(range.clone(), self.rng.chance(50)),
        };
        let e = result.expect_err("misuse is refused");
        match what {
            "read-only handle" => assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{what}: {e} {}", self.ctx()),
            "empty range" | "reversed range" => assert_eq!(e.kind(), InvalidInput, "{what}: {e} {}", self.ctx()),
            "past i64::MAX" => assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{what}: {e} {}", self.ctx()),
            _ => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{what}: {e} {}", self.ctx()),
        }
        // Nothing changed (`check_len` follows).
        let off = (range.start as usize).min(len as usize).saturating_sub(BLOCK);
        self.verify_read(fi, hi, off, 3 * BLOCK, &format!("after refused fallocate ({what})"));
    }

    /// File `fi` is named `to` now: stores opened from now on carry that
    /// name, and with it the faults injected for it.
    fn renamed(&mut self, fi: usize, to: PathBuf) {
        let faulty = self.fault_paths.contains(&to);
        let read_faulty = self.read_fault_paths.contains(&to);
        let f = &mut self.files[fi];
        if faulty {
            f.faults_active = true;
            f.new_handle_may_err = true;
            f.handles.iter_mut().for_each(|h| h.may_err = true);
        }
        f.read_faults_active |= read_faulty;
        if !f.aliases.contains(&to) {
            f.aliases.push(to.clone());
        }
        f.path = to;
    }

    /// A fresh name nothing has used.
    fn fresh_path(&mut self) -> PathBuf {
        self.next_name += 1;
        PathBuf::from(format!("/model/r{}", self.next_name))
    }

    /// Creates an empty file named `path` (a name that names nothing now)
    /// as file `fi`, and returns the model it replaces. Nothing of an
    /// earlier file of that name may show.
    fn create_file_at(&mut self, fi: usize, path: PathBuf) -> FileModel {
        let mut f = FileModel::new(path.clone(), Vec::new());
        f.faults_active = self.fault_paths.contains(&path);
        f.read_faults_active = self.read_fault_paths.contains(&path);
        f.new_handle_may_err = f.faults_active;
        let options = if self.rng.chance(50) {
            OpenOptions::read_write_create()
        } else {
            OpenOptions::new().read(true).write(true).create_new(true)
        };
        let file = self
            .cache()
            .open(&path, &options)
            .unwrap_or_else(|e| panic!("create {} again: {e} {}", path.display(), self.ctx()));
        assert_eq!(file.len().unwrap(), 0, "{} created again is empty {}", path.display(), self.ctx());
        let cached = file.cached_ranges().unwrap();
        assert!(cached.is_empty(), "{} created again has cached data: {cached:?} {}", path.display(), self.ctx());
        let may_err = f.new_handle_may_err;
        f.handles.push(Handle { file, writable: true, may_err, append: false, noreuse: false });
        std::mem::replace(&mut self.files[fi], f)
    }

    /// A file that lost its last name: with `keep_open` its handles keep
    /// working on it (it becomes an unlinked file of the model), else they
    /// close now and its data goes. At most 3 unlinked files are kept.
    fn keep_unlinked(&mut self, mut old: FileModel, keep_open: bool) {
        if !keep_open || old.handles.is_empty() {
            return; // dropping `old` closes its handles
        }
        old.unlinked = true;
        self.files.push(old);
        let oi = self.files.len() - 1;
        let hi = self.rng.below(self.files[oi].handles.len());
        let len = self.files[oi].data.len();
        let off = self.rng.below(len + 1);
        let n = self.rng.between(1, 128 * KIB);
        self.verify_read(oi, hi, off, n, "read of an unlinked file");
        let unlinked: Vec<usize> = (0..self.files.len()).filter(|&i| self.files[i].unlinked).collect();
        if unlinked.len() > 3 {
            self.files[unlinked[0]].handles.clear(); // gone at the end of the operation
        }
    }

    /// `Cache::remove_file`, then a file created under the same name:
    /// empty, whatever the removed file had cached (dirty data too); its
    /// handles, if kept open, still read and write the removed file.
    fn op_remove(&mut self, fi: usize, op: usize) {
        let path = self.files[fi].path.clone();
        let keep_open = self.rng.chance(60);
        let close_first = !keep_open && self.rng.chance(50);
        let n = self.files[fi].handles.len();
        self.progress.begin(
            op,
            format!(
                "remove f{fi} {} ({n} handles, {} bytes) keep_open {keep_open} close_first {close_first}",
                path.display(),
                self.files[fi].data.len()
            ),
        );
        self.count("remove");
        if close_first {
            self.files[fi].handles.clear();
        }
        self.cache().remove_file(&path).unwrap_or_else(|e| panic!("remove {}: {e} {}", path.display(), self.ctx()));
        if self.rng.chance(10) {
            let e = self.cache().remove_file(&path).expect_err("removed already");
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e} {}", self.ctx());
            let e = self.cache().open(&path, &OpenOptions::new().read(true)).map(|_| ()).expect_err("removed");
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e} {}", self.ctx());
        }
        let old = self.create_file_at(fi, path);
        self.keep_unlinked(old, keep_open);
    }

    /// `Cache::rename` of file `fi`: to a fresh name, over another file
    /// (which is dropped, or lives on unlinked through its handles; its
    /// slot gets a new file under the vacated or a fresh name), onto its
    /// own name (nothing happens), or from a name that does not exist
    /// (`NotFound`). The data and the handles follow the file.
    fn op_rename(&mut self, fi: usize, op: usize) {
        let from = self.files[fi].path.clone();
        let others: Vec<usize> = (0..self.files.len()).filter(|&j| j != fi && !self.files[j].unlinked).collect();
        let choice = self.rng.below(10);
        self.count("rename");
        match choice {
            0 => {
                self.progress.begin(op, format!("rename f{fi} {} onto itself", from.display()));
                self.cache().rename(&from, &from).unwrap_or_else(|e| panic!("rename onto itself: {e} {}", self.ctx()));
            }
            1 => {
                let missing = self.fresh_path();
                self.progress.begin(op, format!("rename missing {} to f{fi} {}", missing.display(), from.display()));
                let e = self.cache().rename(&missing, &from).expect_err("nothing to rename");
                assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e} {}", self.ctx());
            }
            2..=5 if !others.is_empty() => {
                let j = others[self.rng.below(others.len())];
                let to = self.files[j].path.clone();
                let keep_open = self.rng.chance(60);
                let close_first = !keep_open && self.rng.chance(50);
                let reuse_name = self.rng.chance(50);
                self.progress.begin(
                    op,
                    format!(
                        "rename f{fi} {} over f{j} {} ({} handles) keep_open {keep_open} close_first {close_first} \
                         reuse_name {reuse_name}",
                        from.display(),
                        to.display(),
                        self.files[j].handles.len()
                    ),
                );
                if close_first {
                    self.files[j].handles.clear();
                }
                self.cache().rename(&from, &to).unwrap_or_else(|e| panic!("rename: {e} {}", self.ctx()));
                self.renamed(fi, to);
                let new_path = if reuse_name { from } else { self.fresh_path() };
                let old = self.create_file_at(j, new_path);
                self.keep_unlinked(old, keep_open);
            }
            _ => {
                let to = self.fresh_path();
                self.progress.begin(op, format!("rename f{fi} {} to {}", from.display(), to.display()));
                self.cache().rename(&from, &to).unwrap_or_else(|e| panic!("rename: {e} {}", self.ctx()));
                let e = self.cache().open(&from, &OpenOptions::new().read(true)).map(|_| ()).expect_err("renamed away");
                assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e} {}", self.ctx());
                self.renamed(fi, to);
            }
        }
        // The data followed the file: through a handle opened before, or
        // one opened under the new name.
        if self.files[fi].handles.is_empty() || self.rng.chance(50) {
            let writable = self.rng.chance(50);
            self.open_handle(fi, writable);
        }
        let hi = self.rng.below(self.files[fi].handles.len());
        let len = self.files[fi].data.len();
        let off = self.rng.below(len + 1);
        let n = self.rng.between(1, 256 * KIB);
        self.verify_read(fi, hi, off, n, "after rename");
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
                // Unlinked files are not the cache's to sync any more.
                for fi in 0..self.files.len() {
                    if !self.files[fi].unlinked {
                        self.check_durable(fi, "Cache::sync_all");
                        self.files[fi].synced_now();
                    }
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
        let path = self.files[fi].path.clone();
        self.progress.begin(op, format!("inject f{fi} {} block {block} {fault:?} x{times}", path.display()));
        self.sim.inject(&path, block, fault, times);
        self.fault_paths.insert(path.clone());
        if fault == Fault::ReadEio {
            self.read_fault_paths.insert(path.clone());
        }
        // Every file a store of that name may belong to: this one, and
        // files renamed away from it or unlinked under it.
        for f in self.files.iter_mut().filter(|f| f.aliases.contains(&path)) {
            f.faults_active = true;
            f.new_handle_may_err = true;
            if fault == Fault::ReadEio {
                f.read_faults_active = true;
            }
            for h in &mut f.handles {
                h.may_err = true;
            }
        }
    }

    /// Clears every fault; then each handle's next sync may still report one
    /// error it has not seen, and the one after must succeed.
    fn op_clear_and_settle(&mut self, op: usize) {
        self.progress.begin(op, "clear faults and sync every handle".into());
        self.sim.clear_faults();
        self.fault_paths.clear();
        self.read_fault_paths.clear();
        for f in &mut self.files {
            f.faults_active = false;
            f.read_faults_active = false;
        }
        for fi in 0..self.files.len() {
            if self.files[fi].handles.is_empty() {
                assert!(!self.files[fi].unlinked, "unlinked files without handles are gone");
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
        // Unlinked files lived on only through their handles.
        self.files.retain(|f| !f.unlinked);
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
            self.files[fi].handles.push(Handle { file, writable: true, may_err: false, append: false, noreuse: false });
            self.files[fi].synced_now(); // created empty: durable at once
        }
        for op in 0..ops {
            let fi = self.rng.below(self.files.len());
            let roll = self.rng.below(1000);
            if self.files[fi].unlinked {
                self.op_unlinked(fi, roll, op);
            } else {
                match (self.mode, roll) {
                    (_, 0..=289) => self.op_write(fi, op),
                    (_, 290..=569) => self.op_read(fi, op),
                    (_, 570..=619) => self.op_sync(fi, op),
                    (_, 620..=669) => self.op_set_len(fi, op),
                    (_, 670..=719) => self.op_reopen(fi, op),
                    (_, 720..=729) => self.op_read_only_misuse(fi, op),
                    (_, 730..=739) => self.op_cache_sync(op),
                    (_, 740..=779) => self.op_advise(fi, op),
                    (_, 780..=809) => self.op_writeback_range(fi, op),
                    (_, 810..=849) => self.op_fallocate(fi, op),
                    (_, 850..=857) => self.op_remove(fi, op),
                    (_, 858..=865) => self.op_rename(fi, op),
                    (Mode::Crashes | Mode::Quiet, 866..=868) => self.op_crash(op),
                    (Mode::Crashes | Mode::Faults, 869..=872) => self.op_idle(op),
                    (Mode::Faults, 873..=939) => self.op_inject(fi, op),
                    (Mode::Faults, 940..=969) => self.op_clear_and_settle(op),
                    _ => self.op_read(fi, op),
                }
            }
            // `fi` may be gone after a crash (an unlinked file).
            if fi < self.files.len() {
                self.check_len(fi);
            }
            self.check_memory();
            // An unlinked file whose last handle closed is gone.
            self.files.retain(|f| !f.unlinked || !f.handles.is_empty());
        }
        // The frequent new operations ran at all (removes, renames and
        // appends are rarer: only counted).
        if ops >= 1000 {
            for what in ["advise", "writeback_range", "fallocate"] {
                assert!(self.counts.get(what).is_some_and(|&n| n > 0), "no {what} ran {}", self.ctx());
            }
        }
        self.progress.begin(ops, "final: close unlinked files, clear, sync, close".into());
        // Their dirty data is dropped, unwritten: nothing dirty may be left
        // of it after the syncs below.
        for f in &mut self.files {
            if f.unlinked {
                f.handles.clear();
            }
        }
        self.files.retain(|f| !f.unlinked);
        self.op_clear_and_settle(ops);
        self.cache().sync_all().unwrap_or_else(|e| panic!("final Cache::sync_all: {e} {}", self.ctx()));
        let st = self.cache().stats();
        self.verbose("final");
        assert_eq!(st.dirty_bytes, 0, "dirty after a full sync {}", self.ctx());
        assert_eq!(st.writeback_bytes, 0, "writeback after a full sync {}", self.ctx());
        if let Some(why) = common::written_bytes_disagree(&st) {
            panic!("after a full sync: {why} {}", self.ctx());
        }
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

// ---------------------------------------------------------------------------
// Appends from several threads

/// An append record: magic, thread, sequence number, payload length, the
/// payload (a pattern of all four), and an FNV-1a checksum of all that.
const RECORD_MAGIC: u32 = 0xA99E_4D5C;
const RECORD_HEADER: usize = 16;
const RECORD_TRAILER: usize = 8;

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3))
}

fn record_payload(seed: u64, thread: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut payload = vec![0u8; len];
    Rng::new(seed ^ (u64::from(thread) << 40) ^ (u64::from(seq) << 8) ^ len as u64).fill(&mut payload);
    payload
}

fn append_record(seed: u64, thread: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut rec = Vec::with_capacity(RECORD_HEADER + len + RECORD_TRAILER);
    for v in [RECORD_MAGIC, thread, seq, len as u32] {
        rec.extend_from_slice(&v.to_le_bytes());
    }
    rec.extend_from_slice(&record_payload(seed, thread, seq, len));
    let sum = fnv1a(&rec);
    rec.extend_from_slice(&sum.to_le_bytes());
    rec
}

/// Mostly small records, some across blocks and folios, a few large.
fn record_len(rng: &mut Rng) -> usize {
    match rng.below(20) {
        0..=12 => rng.below(600),
        13..=18 => rng.between(600, 20 * KIB),
        _ => rng.between(20 * KIB, 200 * KIB),
    }
}

/// Splits `content` into records; panics (naming the offset) at anything
/// that is not a whole record in place. Returns `(thread, seq, len)` in
/// file order.
fn parse_records(content: &[u8], seed: u64, threads: u32, ctx: &str) -> Vec<(u32, u32, usize)> {
    let word = |at: usize| u32::from_le_bytes(content[at..at + 4].try_into().unwrap());
    let mut at = 0;
    let mut out = Vec::new();
    while at < content.len() {
        assert!(content.len() - at >= RECORD_HEADER, "a cut record header at {at} (file {}) {ctx}", content.len());
        assert_eq!(word(at), RECORD_MAGIC, "no record starts at {at} (file {}) {ctx}", content.len());
        let (thread, seq, len) = (word(at + 4), word(at + 8), word(at + 12) as usize);
        assert!(thread < threads, "record at {at}: thread {thread} {ctx}");
        let end = at + RECORD_HEADER + len + RECORD_TRAILER;
        assert!(end <= content.len(), "record t{thread} #{seq} at {at} runs past the end {ctx}");
        let sum = u64::from_le_bytes(content[end - RECORD_TRAILER..end].try_into().unwrap());
        assert_eq!(sum, fnv1a(&content[at..end - RECORD_TRAILER]), "record t{thread} #{seq} at {at}: checksum {ctx}");
        assert!(
            content[at + RECORD_HEADER..end - RECORD_TRAILER] == record_payload(seed, thread, seq, len)[..],
            "record t{thread} #{seq} at {at}: payload {ctx}"
        );
        out.push((thread, seq, len));
        at = end;
    }
    out
}

/// One appender: `records` records through append handles of `path`,
/// written every way a handle writes (any offset, uncached, vectored,
/// through a cursor, which says where the record went: it is read back
/// there at once), with syncs, range writebacks, advice and reopened
/// handles between them. Returns the lengths of its records.
fn appender(
    cache: &Cache,
    path: &Path,
    seed: u64,
    t: u32,
    records: u32,
    progress: &Progress,
    ops: &AtomicUsize,
) -> Vec<usize> {
    let mut rng = Rng::new(seed.wrapping_mul(0x1_0000).wrapping_add(u64::from(t)));
    let open = |rng: &mut Rng| {
        let options = OpenOptions::new().read(true).write(true).append(true).dontcache(rng.chance(15));
        let options = if rng.chance(50) { options.create(true) } else { options };
        cache.open(path, &options).unwrap_or_else(|e| panic!("t{t} open: {e} {}", progress.ctx()))
    };
    let mut handles = vec![open(&mut rng)];
    let mut lens = Vec::with_capacity(records as usize);
    let mut last_len = 0u64;
    for seq in 0..records {
        let len = record_len(&mut rng);
        lens.push(len);
        let rec = append_record(seed, t, seq, len);
        let hi = rng.below(handles.len());
        let h = &handles[hi];
        let how = rng.below(10);
        let off = match rng.below(3) {
            0 => 0,
            1 => rng.next_u64() >> 1,
            _ => rng.below(1 << 30) as u64,
        };
        progress.begin(
            ops.fetch_add(1, Ordering::Relaxed),
            format!("t{t} append #{seq} len {} h{hi} how {how} off {off}", rec.len()),
        );
        let n = match how {
            0..=3 => h.write_at(&rec, off),
            4 => h.write_at_with(&rec, off, WriteFlags::DONTCACHE),
            5 | 6 => {
                let mut cuts: Vec<usize> = (0..rng.below(6)).map(|_| rng.below(rec.len() + 1)).collect();
                cuts.sort_unstable();
                let pieces: Vec<IoSlice> = split_at_cuts(&rec, &cuts).into_iter().map(IoSlice::new).collect();
                h.write_vectored_at(&pieces, off)
            }
            _ => {
                let mut c = h.cursor();
                c.seek(SeekFrom::Start(off)).unwrap();
                let n = c.write(&rec).unwrap_or_else(|e| panic!("t{t} cursor append: {e} {}", progress.ctx()));
                // Where it went: nobody writes there again.
                let at = c.position() - n as u64;
                let mut back = vec![0u8; n];
                assert_eq!(h.read_at(&mut back, at).unwrap(), n, "t{t} #{seq} read back at {at} {}", progress.ctx());
                assert!(back == rec[..n], "t{t} #{seq}: the record read back at {at} differs {}", progress.ctx());
                Ok(n)
            }
        };
        let n = n.unwrap_or_else(|e| panic!("t{t} append #{seq}: {e} {}", progress.ctx()));
        assert_eq!(n, rec.len(), "t{t} append #{seq}: short without faults {}", progress.ctx());
        let size = h.len().unwrap();
        assert!(
            size >= last_len + rec.len() as u64,
            "t{t}: size {size} after appending {} at >= {last_len} {}",
            rec.len(),
            progress.ctx()
        );
        last_len = size;
        match rng.below(100) {
            0..=2 => h.sync_data().unwrap_or_else(|e| panic!("t{t} sync: {e} {}", progress.ctx())),
            3..=5 => {
                let flags = SyncRangeFlags::from_bits(rng.below(8) as u32).unwrap();
                let start = size.saturating_sub(rng.below(256 * KIB) as u64);
                h.writeback_range(start..u64::MAX, flags)
                    .unwrap_or_else(|e| panic!("t{t} writeback_range: {e} {}", progress.ctx()));
            }
            6 => h.advise(0..0, if rng.chance(50) { Advice::NoReuse } else { Advice::Normal }).unwrap(),
            7 | 8 => {
                let fresh = open(&mut rng);
                if handles.len() < 3 {
                    handles.push(fresh);
                } else {
                    handles[rng.below(3)] = fresh;
                }
            }
            _ => {}
        }
    }
    lens
}

/// Threads append checksummed records of random lengths through `append`
/// handles of one file on the sim backend, with the small cache whose
/// writeback runs all the time, while another thread reads and watches
/// the size (which never shrinks). Afterwards the file is every record
/// exactly once, whole, back to back (appends never interleave or
/// overlap), each thread's in its order; after a sync the durable image
/// is what the cache holds, and so after closing the cache.
#[test]
fn concurrent_appends_through_the_sim_never_interleave() {
    run_seeds("concurrent_appends_through_the_sim_never_interleave", 8, |progress| {
        const THREADS: u32 = 4;
        let seed = progress.seed;
        // WBCACHE_MODEL_OPS is the records of all threads together.
        let records = ops_per_seed(2000).div_ceil(THREADS as usize).max(1) as u32;
        let sim = Arc::new(SimIo::new(SimConfig {
            seed,
            latency_us_max: 20,
            short_transfer_percent: 10,
            retryable_error_percent: 5,
            direct_io: true,
            // Half the seeds write partial last blocks and small sync
            // appends through the store's buffered path, as real files do.
            tail_writes: seed % 2 == 1,
            ..SimConfig::default()
        }));
        let routing = ROUTINGS[(seed % ROUTINGS.len() as u64) as usize];
        let io_max = ["64K", "256K", "1M"][(seed % 3) as usize];
        let config = Config::from_options(&format!("{CRASH_MODEL_OPTIONS},io_max={io_max},{routing}")).unwrap();
        let cache = Cache::with_sim(config, sim.clone()).unwrap();
        let path = Path::new("/model/appends");
        let main = cache.open(path, &OpenOptions::read_write_create()).unwrap();
        let ops = AtomicUsize::new(0);
        let done = std::sync::atomic::AtomicBool::new(false);
        let lens: Vec<Vec<usize>> = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut rng = Rng::new(seed ^ 0xEAD);
                let mut last = 0u64;
                let mut buf = vec![0u8; 64 * KIB];
                while !done.load(Ordering::Acquire) {
                    let size = main.len().unwrap();
                    assert!(size >= last, "the size went back from {last} to {size} {}", progress.ctx());
                    last = size;
                    let off = rng.below(size as usize + 1) as u64;
                    let result = match rng.below(20) {
                        // Calls that change no byte, racing the appends.
                        0 | 1 => {
                            let advice = [Advice::WillNeed, Advice::DontNeed, Advice::Sequential][rng.below(3)];
                            main.advise(off..u64::MAX, advice)
                        }
                        2 | 3 => {
                            main.writeback_range(off..u64::MAX, SyncRangeFlags::from_bits(rng.below(8) as u32).unwrap())
                        }
                        4 => main.allocate(off..size + rng.between(1, 512 * KIB) as u64, true),
                        _ => {
                            let n =
                                main.read_at(&mut buf, off).unwrap_or_else(|e| panic!("read: {e} {}", progress.ctx()));
                            assert!(
                                n as u64 <= main.len().unwrap().saturating_sub(off),
                                "read past the end {}",
                                progress.ctx()
                            );
                            Ok(())
                        }
                    };
                    result.unwrap_or_else(|e| panic!("reader thread at {off}: {e} {}", progress.ctx()));
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            let appenders: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (cache, ops) = (&cache, &ops);
                    s.spawn(move || appender(cache, path, seed, t, records, progress, ops))
                })
                .collect();
            // Stop the reader before passing on an appender's panic (the
            // scope would wait for it forever).
            let joined: Vec<_> = appenders.into_iter().map(|a| a.join()).collect();
            done.store(true, Ordering::Release);
            reader.join().unwrap_or_else(|p| resume_unwind(p));
            joined.into_iter().map(|j| j.unwrap_or_else(|p| resume_unwind(p))).collect()
        });
        progress.begin(ops.load(Ordering::Relaxed), "check the records".into());
        let ctx = progress.ctx();
        let size = main.len().unwrap() as usize;
        let mut content = vec![0u8; size];
        assert_eq!(main.read_at(&mut content, 0).unwrap(), size);
        let found = parse_records(&content, seed, THREADS, &ctx);
        let mut next_seq = vec![0u32; THREADS as usize];
        for &(t, seq, len) in &found {
            // Each thread appends in order, one record at a time: its
            // records come in order, each once.
            assert_eq!(seq, next_seq[t as usize], "thread {t}: record #{seq} out of order or twice {ctx}");
            assert_eq!(len, lens[t as usize][seq as usize], "thread {t} #{seq}: length {ctx}");
            next_seq[t as usize] += 1;
        }
        assert!(next_seq.iter().all(|&n| n == records), "records found per thread {next_seq:?} of {records} {ctx}");
        main.sync_all().unwrap_or_else(|e| panic!("sync: {e} {ctx}"));
        if std::env::var_os("WBCACHE_MODEL_VERBOSE").is_some() {
            eprintln!("{ctx}: {} records, {size} bytes: {:?}\n  sim: {:?}", found.len(), cache.stats(), sim.stats());
        }
        assert_bytes(&sim.durable_image(path).unwrap(), &content, "durable image after the sync", &ctx);
        assert_bytes(&sim.written_image(path).unwrap(), &content, "written image after the sync", &ctx);
        drop(main);
        cache.close().unwrap_or_else(|e| panic!("close: {e} {ctx}"));
        assert_bytes(&sim.durable_image(path).unwrap(), &content, "durable image after close", &ctx);
    });
}
