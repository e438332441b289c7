//! The range calls under concurrency, and on a raw block device:
//! `punch_hole` / `zero_range` racing writers, readers, fsyncs and busy
//! background writeback; `writeback_range` (sync_file_range) racing
//! resizes, punches, writers and `Cache::close`; `Advice::DontNeed` racing
//! readers and writers of the same range; `Advice::WillNeed` racing a
//! truncate; and fallocate on a loop device. Every race runs on a real file
//! (in a temporary directory) and on the simulated backend (seeded latency
//! and short transfers, which widen the races and count overlapping
//! writes); the punch race also on a simulated and on a real block device.
//!
//! Each race has one right answer. Threads own disjoint bytes of the file
//! (regions of an odd length, so that their edges fall inside blocks and
//! folios that neighbouring owners share) and keep a reference of them: an
//! owner checks what it reads against it, and after a `sync_data` checks the
//! store's copy of its regions too (an O_DIRECT read, or the sim's image),
//! so discarded dirty data written over a hole after the punch is caught
//! while the race runs, not only at the end. After the threads join, the
//! cache's content, the store's after `sync_all` and the store's after
//! `Cache::close` must each equal the assembled reference exactly. Readers
//! that cannot know the exact answer check what can be known: every byte
//! of the punch race is zero or carries its own offset's tag, and every 4
//! KiB block of the DONTNEED race names its block and a version no older
//! than the reader saw before.
//!
//! Seeds: each test prints its seed (in the captured output shown when it
//! fails); `WBCACHE_RACES_SEED=<n> cargo test --test real controls_races::<test>`
//! replays a test's operation sequences (the threads' interleaving still
//! differs from run to run). `WBCACHE_RACES_MS=<n>` runs every timed race
//! phase `n` milliseconds instead of its default (1-2.5 s).
//!
//! The loop-device test needs root and a loop device; without them it
//! prints why it skipped, except under `CI=true`, where it fails.
//!
//! Two library bugs these races found (fixed) are reproduced,
//! deterministically, by the regression tests at the end.

use crate::common;
use common::{pattern, read_all};

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::loopdev::LoopDevice;
use common::programs::TempDir;
use common::{assert_same, first_diff, with_timeout, Rng};
use wbcache::errno_of;
use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Advice, AlignedBuf, Allocation, Cache, Config, File, OpenOptions, Stats, SyncRangeFlags, WriteFlags};

/// Writeback running all the time: small thresholds, a 20 ms expiry, and
/// folios of up to 256 KiB for the punches to split.
const BUSY_WRITEBACK: &str = "capacity=8M,dirty_limit=2M,dirty_background=512K,folio_max=256K,expire_ms=20";

/// Nothing is written back unless a call asks for it (dirty data stays
/// under the background threshold and expires after an hour), so whatever
/// reaches the store was written because of the calls a test made.
const QUIET_WRITEBACK: &str = "capacity=16M,dirty_limit=8M,dirty_background=6M,folio_max=256K,expire_ms=3600000";

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;
const FOLIO_MAX: u64 = 256 * KIB;

/// An odd region length: region edges fall inside blocks and folios.
const REGION: u64 = 196_613;

/// Bound on every test body: a hang fails instead of blocking the suite.
const WATCHDOG: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Seeds, durations, data.

/// The test's seed: `WBCACHE_RACES_SEED`, or a fresh one, printed either way.
fn seed_for(test: &str) -> u64 {
    let seed = match std::env::var("WBCACHE_RACES_SEED") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("WBCACHE_RACES_SEED={v} is not a number")),
        Err(_) => {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
            Rng::new(nanos ^ u64::from(std::process::id())).next_u64() >> 20
        }
    };
    eprintln!("{test}: seed {seed} (replay: WBCACHE_RACES_SEED={seed} cargo test --test real controls_races::{test})");
    seed
}

/// How long a timed race phase runs: `WBCACHE_RACES_MS`, or `default_ms`.
fn phase(default_ms: u64) -> Duration {
    let ms = match std::env::var("WBCACHE_RACES_MS") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("WBCACHE_RACES_MS={v} is not a number")),
        Err(_) => default_ms,
    };
    Duration::from_millis(ms)
}

/// The byte a write of `version` puts at file offset `off`: the first four
/// bytes of each 8-byte word are the word's index (little endian), the
/// other four the version. A reader that cannot know the version can still
/// tell a byte that belongs at its offset (or a zero) from one that does
/// not.
fn tag_byte(off: u64, version: u32) -> u8 {
    let i = off % 8;
    if i < 4 {
        ((off / 8) >> (8 * i)) as u8
    } else {
        (version >> (8 * (i - 4))) as u8
    }
}

fn tagged(off: u64, len: usize, version: u32) -> Vec<u8> {
    (0..len as u64).map(|i| tag_byte(off + i, version)).collect()
}

/// Every offset-tag byte of `buf` (read at `off`) is zero or its tag.
fn check_tags(buf: &[u8], off: u64) -> Result<(), String> {
    for (i, &b) in buf.iter().enumerate() {
        let o = off + i as u64;
        if o % 8 < 4 && b != 0 && b != tag_byte(o, 0) {
            return Err(format!("byte {o} is {b:#04x}: neither zero nor its offset tag {:#04x}", tag_byte(o, 0)));
        }
    }
    Ok(())
}

fn rw_create() -> OpenOptions {
    OpenOptions::read_write_create()
}

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

fn read_exact_at(file: &File, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = file.read_at(&mut buf, off).unwrap();
    assert_eq!(n, len, "a read of {len} bytes at {off} inside the file");
    buf
}

fn is_ebadf<T: std::fmt::Debug>(result: &std::io::Result<T>) -> bool {
    matches!(result, Err(e) if errno_of(e) == libc::EBADF)
}

fn stats_line(s: &Stats) -> String {
    format!(
        "written {} KiB, read ahead {} KiB, cow copies {}, bridged {} KiB, dropped behind {} KiB, evictions {}, misses {}",
        s.written_bytes_by_reason.iter().sum::<u64>() / KIB,
        s.readahead_bytes / KIB,
        s.cow_copies,
        s.bridged_bytes / KIB,
        s.dropbehind_freed_bytes / KIB,
        s.evictions,
        s.misses
    )
}

/// Joins every handle before a panic of one goes on (the others end at
/// their deadline or stop flag on their own).
fn join_all<T>(handles: Vec<std::thread::ScopedJoinHandle<'_, T>>) -> Vec<T> {
    let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
    results.into_iter().map(|r| r.unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
}

// ---------------------------------------------------------------------------
// Where a race's file lives.

/// A real file in a temporary directory, a file or block device of the
/// simulated backend, or a loop device.
struct Store {
    path: PathBuf,
    sim: Option<Arc<SimIo>>,
    options: &'static str,
    /// fallocate on a real block device takes only ranges aligned to its
    /// logical block size.
    falloc_align: u64,
    /// Keep the directory or the loop device while the store is used.
    _dir: Option<TempDir>,
    _dev: Option<LoopDevice>,
}

impl Store {
    fn real(tag: &str, options: &'static str) -> Store {
        let dir = TempDir::new(tag);
        Store { path: dir.0.join("f"), sim: None, options, falloc_align: 1, _dir: Some(dir), _dev: None }
    }

    /// A sim whose every I/O sleeps up to 300 µs (now and then 3 ms) and
    /// is now and then short or retried.
    fn sim(seed: u64, options: &'static str) -> Store {
        let config = SimConfig {
            seed,
            latency_us_max: 300,
            latency_spike_percent: 1,
            latency_spike_us: 3000,
            short_transfer_percent: 3,
            retryable_error_percent: 2,
            ..SimConfig::default()
        };
        let sim = Arc::new(SimIo::new(config));
        Store { path: PathBuf::from("/f"), sim: Some(sim), options, falloc_align: 1, _dir: None, _dev: None }
    }

    fn sim_block_device(seed: u64, options: &'static str, len: u64) -> Store {
        let mut store = Store::sim(seed, options);
        store.path = PathBuf::from("/dev/sim0");
        store.sim.as_ref().unwrap().create_block_device(&store.path, len);
        store
    }

    fn loop_device(dev: LoopDevice, options: &'static str, falloc_align: u64) -> Store {
        Store { path: dev.device.clone(), sim: None, options, falloc_align, _dir: None, _dev: Some(dev) }
    }

    fn cache(&self) -> Cache {
        let config = Config::from_options(self.options).unwrap();
        match &self.sim {
            Some(sim) => Cache::with_sim(config, sim.clone()),
            None => Cache::new(config),
        }
        .unwrap()
    }

    /// What a read of the store returns now at `[off, off + len)` (fewer
    /// bytes at its end): the sim's written image, or an O_DIRECT read, so
    /// the kernel's page cache cannot answer with a stale copy.
    fn peek(&self, off: u64, len: usize) -> Vec<u8> {
        match &self.sim {
            Some(sim) => {
                let image = sim.written_image(&self.path).expect("the sim file exists");
                let end = (off as usize + len).min(image.len());
                image[(off as usize).min(end)..end].to_vec()
            }
            None => read_direct(&self.path, off, len),
        }
    }

    /// The store's whole content: what survives a crash on the sim (its
    /// durable image), a plain read of the file or device otherwise.
    fn contents(&self) -> Vec<u8> {
        match &self.sim {
            Some(sim) => sim.durable_image(&self.path).expect("the sim file exists"),
            None => std::fs::read(&self.path).unwrap(),
        }
    }

    /// What reads of the store see now (the sim's written image).
    fn written_contents(&self) -> Vec<u8> {
        match &self.sim {
            Some(sim) => sim.written_image(&self.path).expect("the sim file exists"),
            None => std::fs::read(&self.path).unwrap(),
        }
    }

    /// The sim never had two writes of one block in flight at once.
    fn check_no_overlapping_writes(&self) {
        if let Some(sim) = &self.sim {
            let stats = sim.stats();
            assert_eq!(stats.overlapping_writes, 0, "overlapping writes on the sim: {stats:?}");
        }
    }
}

/// `[off, off + len)` of `path` read with O_DIRECT (plain reads where the
/// file system refuses O_DIRECT); fewer bytes past the end.
fn read_direct(path: &Path, off: u64, len: usize) -> Vec<u8> {
    let start = off / BLOCK * BLOCK;
    let end = (off + len as u64).div_ceil(BLOCK) * BLOCK;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path) {
        Ok(file) => file,
        Err(_) => std::fs::File::open(path).unwrap(),
    };
    let mut buf = AlignedBuf::zeroed((end - start) as usize);
    let mut got = 0usize;
    while got < buf.len() {
        let n = file.read_at(&mut buf[got..], start + got as u64).unwrap();
        got += n;
        // The end of the file: a short read, and the next would be unaligned.
        if n == 0 || got % 512 != 0 {
            break;
        }
    }
    let from = ((off - start) as usize).min(got);
    let to = (from + len).min(got);
    buf[from..to].to_vec()
}

// ---------------------------------------------------------------------------
// Owners: threads that write, punch, zero, read and check regions of their own.

/// Regions `r` with `r % owners == owner` belong to `owner`.
#[derive(Clone, Copy)]
struct Layout {
    owners: usize,
    regions: u64,
}

impl Layout {
    fn bounds(r: u64) -> (u64, u64) {
        (r * REGION, (r + 1) * REGION)
    }
    fn len(self) -> u64 {
        self.regions * REGION
    }
    fn owned_by(self, owner: usize) -> Vec<u64> {
        (0..self.regions).filter(|r| (*r as usize) % self.owners == owner).collect()
    }
    /// Each owner's reference, for its own regions, put together.
    fn assemble(self, refs: &[Vec<u8>], into: &mut [u8]) {
        for r in 0..self.regions {
            let (a, b) = Self::bounds(r);
            let owner = &refs[r as usize % self.owners];
            into[a as usize..b as usize].copy_from_slice(&owner[a as usize..b as usize]);
        }
    }
}

/// A range inside `[start, end)` for a write or a punch: the whole region,
/// whole blocks, a few bytes inside one block, a range across a folio
/// boundary (which splits the large folio there), or any range; for
/// fallocate on a real device, rounded inwards to `align` (`None` if
/// nothing is left).
fn pick_range(rng: &mut Rng, start: u64, end: u64, align: u64) -> Option<(u64, u64)> {
    let len = end - start;
    let (a, b) = match rng.below(6) {
        0 => (start, end),
        1 => {
            let a = (start + rng.below(len as usize) as u64).next_multiple_of(BLOCK);
            let b = (a + rng.between(1, 48) as u64 * BLOCK).min(end / BLOCK * BLOCK);
            (a, b)
        }
        2 => {
            let a = start + rng.below(len as usize) as u64;
            (a, (a + rng.between(1, 600) as u64).min(end))
        }
        3 if start / FOLIO_MAX < (end - 1) / FOLIO_MAX => {
            // A folio boundary strictly inside the range.
            let first = start / FOLIO_MAX + 1;
            let boundary = rng.between(first as usize, ((end - 1) / FOLIO_MAX) as usize) as u64 * FOLIO_MAX;
            let a = boundary.saturating_sub(rng.between(1, 64 * KIB as usize) as u64).max(start);
            (a, (boundary + rng.between(1, 64 * KIB as usize) as u64).min(end))
        }
        _ => {
            let a = start + rng.below(len as usize) as u64;
            (a, rng.between(a as usize + 1, end as usize) as u64)
        }
    };
    let (a, b) = (a.next_multiple_of(align), b / align * align);
    (a < b).then_some((a, b))
}

fn pick_flags(rng: &mut Rng) -> SyncRangeFlags {
    use SyncRangeFlags as S;
    [
        S::WRITE,
        S::WRITE,
        S::WRITE | S::WAIT_AFTER,
        S::WAIT_BEFORE | S::WRITE,
        S::WAIT_BEFORE | S::WRITE | S::WAIT_AFTER,
        S::WAIT_BEFORE,
        S::WAIT_AFTER,
    ][rng.below(7)]
}

#[derive(Default, Debug)]
struct OwnerCounts {
    writes: u64,
    punches: u64,
    zeroes: u64,
    reads: u64,
    store_checks: u64,
    dontneeds: u64,
    range_writebacks: u64,
}

impl std::ops::AddAssign<&OwnerCounts> for OwnerCounts {
    fn add_assign(&mut self, o: &OwnerCounts) {
        self.writes += o.writes;
        self.punches += o.punches;
        self.zeroes += o.zeroes;
        self.reads += o.reads;
        self.store_checks += o.store_checks;
        self.dontneeds += o.dontneeds;
        self.range_writebacks += o.range_writebacks;
    }
}

/// One owner's loop until `deadline`: writes of new versions, punches and
/// zeroings (some splitting folios and blocks, some of whole regions), reads
/// checked against its reference (often right after a punch), syncs
/// followed by a check of the store's copy of the region, DONTNEED and
/// range writeback of its regions. Returns its reference (the whole file's
/// length; only its regions mean anything) and what it did.
fn owner(
    f: &File,
    store: &Store,
    layout: Layout,
    t: usize,
    seed: u64,
    deadline: Instant,
    file_len: usize,
) -> (Vec<u8>, OwnerCounts) {
    let mut rng = Rng::new(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mine = layout.owned_by(t);
    let mut reference = read_exact_at(f, 0, file_len);
    let mut n = OwnerCounts::default();
    let who = |op: u64| format!("seed {seed}, owner {t}, op {op}");
    let mut op = 0u64;
    while Instant::now() < deadline {
        op += 1;
        let r = mine[rng.below(mine.len())];
        let (rs, re) = Layout::bounds(r);
        let choice = rng.below(100);
        let align = if (35..60).contains(&choice) { store.falloc_align } else { 1 };
        let Some((a, b)) = pick_range(&mut rng, rs, re, align) else { continue };
        let (au, bu) = (a as usize, b as usize);
        match choice {
            0..=34 => {
                let data = tagged(a, bu - au, rng.next_u64() as u32);
                let flags = if rng.chance(15) { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                assert_eq!(f.write_at_with(&data, a, flags).unwrap(), data.len(), "{}", who(op));
                reference[au..bu].copy_from_slice(&data);
                n.writes += 1;
            }
            35..=59 => {
                if choice < 50 {
                    f.punch_hole(a..b).unwrap_or_else(|e| panic!("{}: punch_hole {a}..{b}: {e}", who(op)));
                    n.punches += 1;
                } else {
                    let keep_size = rng.chance(50);
                    f.zero_range(a..b, keep_size).unwrap_or_else(|e| panic!("{}: zero_range {a}..{b}: {e}", who(op)));
                    n.zeroes += 1;
                }
                reference[au..bu].fill(0);
                if rng.chance(30) {
                    let got = read_exact_at(f, a, bu - au);
                    assert!(
                        got.iter().all(|&x| x == 0),
                        "{}: {a}..{b} read right after its punch: {}",
                        who(op),
                        first_diff(&got, &reference[au..bu])
                    );
                }
            }
            60..=81 => {
                let flags = if rng.chance(10) { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                let mut got = vec![0u8; bu - au];
                assert_eq!(f.read_at_with(&mut got, a, flags).unwrap(), got.len());
                if got != reference[au..bu] {
                    panic!("{}: cache {a}..{b}: {}", who(op), first_diff(&got, &reference[au..bu]));
                }
                n.reads += 1;
            }
            82..=86 => {
                if rng.chance(50) { f.sync_data() } else { f.sync_all() }.unwrap();
                // Everything this owner did is on the store now; others
                // change only their own bytes of the blocks it shares.
                let got = store.peek(rs, (re - rs) as usize);
                if got != reference[rs as usize..re as usize] {
                    panic!(
                        "{}: the store's region {r} ({rs}..{re}) after a sync: {}",
                        who(op),
                        first_diff(&got, &reference[rs as usize..re as usize])
                    );
                }
                n.store_checks += 1;
            }
            87..=92 => {
                f.advise(rs..re, Advice::DontNeed).unwrap();
                n.dontneeds += 1;
            }
            _ => {
                f.writeback_range(rs..re, pick_flags(&mut rng)).unwrap();
                n.range_writebacks += 1;
            }
        }
    }
    (reference, n)
}

// ---------------------------------------------------------------------------
// 1. punch_hole / zero_range racing writers, readers, fsync and writeback.

/// Three owners write, punch, zero and check their regions; an fsync thread
/// syncs the file and the whole cache and starts writeback of all of it; a
/// reader reads anywhere (and asks for WILLNEED or DONTNEED there now and
/// then), checking that every byte is zero or tagged for its offset. Then the cache, the
/// store after `sync_all` and the store after `Cache::close` must equal
/// the owners' references exactly.
fn punch_race(store: Store, seed: u64, run: Duration) -> Store {
    let layout = Layout { owners: 3, regions: 30 };
    let cache = store.cache();
    let f = cache.open(&store.path, &rw_create()).unwrap();
    let file_len = if f.is_block_device() {
        // Start from zeros: one zero_range over the whole device.
        let len = f.len().unwrap();
        f.zero_range(0..len, true).unwrap();
        len
    } else {
        f.set_len(layout.len() + 1000).unwrap();
        layout.len() + 1000
    };
    assert!(file_len >= layout.len());
    let deadline = Instant::now() + run;
    let syncs = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    let (refs, counts) = std::thread::scope(|s| {
        let (f, cache, store) = (&f, &cache, &store);
        let owners: Vec<_> = (0..layout.owners)
            .map(|t| s.spawn(move || owner(f, store, layout, t, seed, deadline, file_len as usize)))
            .collect();
        let syncer = s.spawn(|| {
            let mut rng = Rng::new(seed ^ 0x005E_EDF5);
            while Instant::now() < deadline {
                match rng.below(4) {
                    0 => f.sync_all().unwrap(),
                    1 => f.sync_data().unwrap(),
                    2 => cache.sync_all().unwrap(),
                    _ => f.writeback_range(0..u64::MAX, SyncRangeFlags::WRITE).unwrap(),
                }
                syncs.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(rng.below(3000) as u64));
            }
        });
        let reader = s.spawn(|| {
            let mut rng = Rng::new(seed ^ 0xBEAD);
            let mut buf = vec![0u8; 512 * KIB as usize];
            while Instant::now() < deadline {
                let off = rng.below(file_len as usize) as u64;
                let len = rng.between(1, 512 * KIB as usize).min((file_len - off) as usize);
                // Fills and drops anywhere, racing the owners' punches.
                match rng.below(20) {
                    0 => f.advise(off..off + len as u64, Advice::WillNeed).unwrap(),
                    1 => f.advise(off..off + len as u64, Advice::DontNeed).unwrap(),
                    _ => {}
                }
                let flags = if rng.chance(10) { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                assert_eq!(f.read_at_with(&mut buf[..len], off, flags).unwrap(), len, "seed {seed}: racing read");
                if let Err(e) = check_tags(&buf[..len], off) {
                    panic!("seed {seed}: a racing read of {off}+{len}: {e}");
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        let results = join_all(owners);
        join_all(vec![syncer, reader]);
        let mut counts = OwnerCounts::default();
        let refs: Vec<Vec<u8>> = results
            .into_iter()
            .map(|(r, c)| {
                counts += &c;
                r
            })
            .collect();
        (refs, counts)
    });
    let mut want = vec![0u8; file_len as usize];
    layout.assemble(&refs, &mut want);
    eprintln!(
        "seed {seed}: {counts:?}, {} syncs, {} racing reads; {}",
        syncs.load(Ordering::Relaxed),
        reads.load(Ordering::Relaxed),
        stats_line(&cache.stats())
    );
    assert_same(&read_all(&f), &want, &format!("seed {seed}: the cache after the race"));
    f.sync_all().unwrap();
    assert_same(&store.contents(), &want, &format!("seed {seed}: the store after sync_all"));
    drop(f);
    cache.close().unwrap();
    assert_same(&store.contents(), &want, &format!("seed {seed}: the store after the close"));
    store.check_no_overlapping_writes();
    store
}

#[test]
fn punch_and_zero_race_writers_readers_and_writeback_on_a_file() {
    let seed = seed_for("punch_and_zero_race_writers_readers_and_writeback_on_a_file");
    with_timeout(WATCHDOG, move || drop(punch_race(Store::real("races-punch", BUSY_WRITEBACK), seed, phase(2500))));
}

#[test]
fn punch_and_zero_race_writers_readers_and_writeback_on_the_sim() {
    let seed = seed_for("punch_and_zero_race_writers_readers_and_writeback_on_the_sim");
    with_timeout(WATCHDOG, move || drop(punch_race(Store::sim(seed, BUSY_WRITEBACK), seed, phase(2500))));
}

#[test]
fn punch_and_zero_race_on_a_sim_block_device() {
    let seed = seed_for("punch_and_zero_race_on_a_sim_block_device");
    with_timeout(WATCHDOG, move || {
        let store = punch_race(Store::sim_block_device(seed, BUSY_WRITEBACK, 8 * MIB), seed, phase(1500));
        assert_eq!(store.contents().len() as u64, 8 * MIB, "the device's size");
    });
}

// ---------------------------------------------------------------------------
// 2. writeback_range racing set_len, punch_hole and writers; started
//    writeback followed by a close.

/// Regions below `BASE_REGIONS * REGION` belong to the owners; everything
/// past it to the sizer, which truncates and extends the file there.
const BASE_REGIONS: u64 = 12;
const TAIL_MAX: usize = 1_500_000;
/// The sizer writes data only below this offset of its tail; above it the
/// tail only ever holds zeros, and the zone puncher punches and zeroes
/// there while the sizer truncates and extends through it.
const TAIL_DATA: usize = 900_000;

/// The sizer: truncates and extends the file (never below `base`), writes
/// past the end, punches and zeroes in its tail (zero_range without
/// KEEP_SIZE extending it), checks the size and its tail. Returns the tail.
fn sizer(f: &File, seed: u64, base: u64, deadline: Instant) -> (Vec<u8>, u64) {
    let mut rng = Rng::new(seed ^ 0x512E);
    let mut tail: Vec<u8> = Vec::new();
    let mut resizes = 0u64;
    let mut op = 0u64;
    while Instant::now() < deadline {
        op += 1;
        let who = format!("seed {seed}, sizer op {op}");
        match rng.below(100) {
            0..=24 => {
                let new_len = if rng.chance(10) { 0 } else { rng.below(TAIL_MAX) };
                f.set_len(base + new_len as u64).unwrap_or_else(|e| panic!("{who}: set_len: {e}"));
                tail.resize(new_len, 0);
                resizes += 1;
            }
            25..=49 => {
                let at = rng.below(TAIL_DATA - 1);
                let len = rng.between(1, 200_000).min(TAIL_DATA - at);
                let data = tagged(base + at as u64, len, rng.next_u64() as u32);
                assert_eq!(f.write_at(&data, base + at as u64).unwrap(), len, "{who}");
                if tail.len() < at + len {
                    tail.resize(at + len, 0);
                }
                tail[at..at + len].copy_from_slice(&data);
            }
            50..=59 if !tail.is_empty() => {
                let a = rng.below(tail.len());
                // Sometimes past the end: KEEP_SIZE, so only the tail's
                // bytes change.
                let b = if rng.chance(20) { tail.len() + 100_000 } else { rng.between(a + 1, tail.len()) };
                f.punch_hole(base + a as u64..base + b as u64).unwrap_or_else(|e| panic!("{who}: punch: {e}"));
                let end = b.min(tail.len());
                tail[a..end].fill(0);
            }
            60..=67 => {
                let a = rng.below(tail.len() + 1000);
                let b = a + rng.between(1, 300_000);
                f.zero_range(base + a as u64..base + b as u64, false).unwrap_or_else(|e| panic!("{who}: zero: {e}"));
                if tail.len() < b {
                    tail.resize(b, 0);
                }
                tail[a..b].fill(0);
            }
            68..=89 => {
                assert_eq!(f.len().unwrap(), base + tail.len() as u64, "{who}: the size");
                let got = read_exact_at(f, base, tail.len());
                if got != tail {
                    panic!("{who}: the tail: {}", first_diff(&got, &tail));
                }
                let mut past = [0u8; 16];
                assert_eq!(f.read_at(&mut past, base + tail.len() as u64).unwrap(), 0, "{who}: nothing past the end");
            }
            _ => f.writeback_range(base..u64::MAX, pick_flags(&mut rng)).unwrap(),
        }
    }
    (tail, resizes)
}

/// Punches, zeroes (KEEP_SIZE), drops and reads the zeros-only part of the
/// sizer's tail while the sizer truncates and extends through it: its
/// calls never change the size, and what it reads there is zeros.
fn zone_puncher(f: &File, seed: u64, base: u64, deadline: Instant) {
    let mut rng = Rng::new(seed ^ 0x20E);
    let zone = base + TAIL_DATA as u64;
    let mut buf = vec![0u8; 256 * KIB as usize];
    while Instant::now() < deadline {
        let a = zone + rng.below(TAIL_MAX + 200_000 - TAIL_DATA) as u64;
        let b = a + rng.between(1, 256 * KIB as usize) as u64;
        match rng.below(4) {
            0 => f.punch_hole(a..b).unwrap_or_else(|e| panic!("seed {seed}: zone punch {a}..{b}: {e}")),
            1 => f.zero_range(a..b, true).unwrap_or_else(|e| panic!("seed {seed}: zone zero {a}..{b}: {e}")),
            2 => f.advise(a..b, Advice::DontNeed).unwrap(),
            _ => {
                let n = f.read_at(&mut buf[..(b - a) as usize], a).unwrap();
                if let Some(i) = buf[..n].iter().position(|&x| x != 0) {
                    panic!("seed {seed}: byte {} of the zeros-only zone is {:#04x}", a + i as u64, buf[i]);
                }
            }
        }
        if rng.chance(30) {
            std::thread::sleep(Duration::from_micros(rng.below(300) as u64));
        }
    }
}

/// Range writeback from two threads (through the writable handle and a
/// read-only one) over the whole file, parts of it and its tail, with every
/// combination of flags, while two owners write and punch below `base` and
/// the sizer truncates and extends the file above it (and a zone puncher
/// punches where it truncates). Then new dirty data,
/// WRITE-only calls (handed to the range-writer thread) and at once a close
/// (with the handles dropped first, or still open and refused afterwards):
/// the store must hold the reference exactly.
fn resize_race(store: Store, seed: u64, run: Duration) {
    let layout = Layout { owners: 2, regions: BASE_REGIONS };
    let base = layout.len();
    let cache = store.cache();
    let f = cache.open(&store.path, &rw_create()).unwrap();
    let ro = cache.open(&store.path, &OpenOptions::new().read(true)).unwrap();
    f.set_len(base).unwrap();
    let deadline = Instant::now() + run;
    let calls = AtomicU64::new(0);
    let (refs, counts, (tail, resizes)) = std::thread::scope(|s| {
        let (f, ro, store, calls) = (&f, &ro, &store, &calls);
        let owners: Vec<_> = (0..layout.owners)
            .map(|t| s.spawn(move || owner(f, store, layout, t, seed, deadline, base as usize)))
            .collect();
        let sizer = s.spawn(move || sizer(f, seed, base, deadline));
        let zone_puncher = s.spawn(move || zone_puncher(f, seed, base, deadline));
        let range_writers: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed ^ (0xAB5E + t));
                    while Instant::now() < deadline {
                        let handle = if rng.chance(30) { ro } else { f };
                        let len = f.len().unwrap();
                        let range = match rng.below(4) {
                            0 => 0..u64::MAX,
                            1 => base..u64::MAX,
                            2 => {
                                let a = rng.below(len as usize + 100_000) as u64;
                                a..a + rng.between(1, 64 * KIB as usize) as u64
                            }
                            _ => {
                                let a = rng.below(len as usize + 100_000) as u64;
                                a..a + rng.between(1, 2 * MIB as usize) as u64
                            }
                        };
                        let flags = pick_flags(&mut rng);
                        handle.writeback_range(range.clone(), flags).unwrap_or_else(|e| {
                            panic!("seed {seed}: writeback_range {range:?} {flags:?}: {e}");
                        });
                        calls.fetch_add(1, Ordering::Relaxed);
                        if rng.chance(20) {
                            std::thread::sleep(Duration::from_micros(rng.below(500) as u64));
                        }
                    }
                })
            })
            .collect();
        let results = join_all(owners);
        let tail = join_all(vec![sizer]).pop().unwrap();
        join_all(range_writers);
        join_all(vec![zone_puncher]);
        let mut counts = OwnerCounts::default();
        let refs: Vec<Vec<u8>> = results
            .into_iter()
            .map(|(r, c)| {
                counts += &c;
                r
            })
            .collect();
        (refs, counts, tail)
    });
    let mut want = vec![0u8; base as usize];
    layout.assemble(&refs, &mut want);
    want.extend_from_slice(&tail);
    eprintln!(
        "seed {seed}: {counts:?}, {resizes} resizes, {} range writebacks; {}",
        calls.load(Ordering::Relaxed),
        stats_line(&cache.stats())
    );
    assert_eq!(f.len().unwrap(), want.len() as u64, "seed {seed}: the size after the race");
    assert_same(&read_all(&f), &want, &format!("seed {seed}: the cache after the race"));

    // New dirty data, range writeback started (not waited for), and the close.
    let mut rng = Rng::new(seed ^ 0xC705E);
    for _ in 0..rng.between(1, 4) {
        let at = rng.below(want.len());
        let len = rng.between(1, 600_000).min(want.len() - at);
        let data = tagged(at as u64, len, rng.next_u64() as u32);
        assert_eq!(f.write_at(&data, at as u64).unwrap(), len);
        want[at..at + len].copy_from_slice(&data);
    }
    for _ in 0..rng.between(1, 24) {
        let a = rng.below(want.len()) as u64;
        let range = if rng.chance(20) { 0..u64::MAX } else { a..a + rng.between(1, MIB as usize) as u64 };
        let handle = if rng.chance(30) { &ro } else { &f };
        handle.writeback_range(range, SyncRangeFlags::WRITE).unwrap();
    }
    let how = rng.below(3);
    eprintln!("seed {seed}: close {}", ["after dropping the handles", "with the handles open", "with one open"][how]);
    match how {
        0 => {
            drop((f, ro));
            cache.close().unwrap();
        }
        1 => {
            cache.close().unwrap();
            assert!(is_ebadf(&f.read_at(&mut [0u8; 1], 0)), "a handle of a closed cache");
            assert!(is_ebadf(&f.writeback_range(0..u64::MAX, SyncRangeFlags::WRITE)));
            assert!(is_ebadf(&f.punch_hole(0..4096)));
            assert!(is_ebadf(&ro.advise(0..u64::MAX, Advice::DontNeed)));
        }
        _ => {
            drop(f);
            cache.close().unwrap();
            drop(ro);
        }
    }
    let got = store.contents();
    assert_same(&got, &want, &format!("seed {seed}: the store after the close"));
    store.check_no_overlapping_writes();
}

#[test]
fn writeback_range_races_resizes_punches_and_writers_on_a_file() {
    let seed = seed_for("writeback_range_races_resizes_punches_and_writers_on_a_file");
    with_timeout(WATCHDOG, move || resize_race(Store::real("races-resize", BUSY_WRITEBACK), seed, phase(2500)));
}

#[test]
fn writeback_range_races_resizes_punches_and_writers_on_the_sim() {
    let seed = seed_for("writeback_range_races_resizes_punches_and_writers_on_the_sim");
    with_timeout(WATCHDOG, move || resize_race(Store::sim(seed, BUSY_WRITEBACK), seed, phase(2500)));
}

/// Round after round: a cache over the store, new dirty data, then an owner
/// writing, punching and zeroing and a thread starting range writeback
/// (WRITE only, more calls than the range writer queues) while the main
/// thread closes the cache under them. Every call either took effect (and
/// its data is on the store after the close) or failed with `EBADF`
/// (nothing of it happened); no call hangs. Each round's cache starts from
/// what the last close left.
fn close_race(store: Store, seed: u64, run: Duration) {
    const SIZE: usize = 3 * MIB as usize + 777;
    let mut want = vec![0u8; SIZE];
    let deadline = Instant::now() + run;
    let mut round = 0u64;
    let mut done = 0u64;
    while round < 3 || Instant::now() < deadline {
        let mut rng = Rng::new(seed.wrapping_add(round.wrapping_mul(0x9E37_79B9)));
        let cache = store.cache();
        let f = cache.open(&store.path, &rw_create()).unwrap();
        if round == 0 {
            f.set_len(SIZE as u64).unwrap();
        }
        assert_same(&read_all(&f), &want, &format!("seed {seed}, round {round}: what the last close left"));
        let data = tagged(0, SIZE, rng.next_u64() as u32);
        f.write_at(&data, 0).unwrap();
        want = data;
        let close_after = Duration::from_micros(rng.below(30_000) as u64);
        let closed = AtomicBool::new(false);
        let (after, starts) = std::thread::scope(|s| {
            let (f, closed) = (&f, &closed);
            let start = want.clone();
            let owner = s.spawn(move || {
                let mut rng = Rng::new(seed ^ round ^ 0x0E1);
                let mut reference = start;
                let mut refused = false;
                while !refused {
                    let Some((a, b)) = pick_range(&mut rng, 0, SIZE as u64, 1) else { continue };
                    let (au, bu) = (a as usize, b as usize);
                    match rng.below(10) {
                        0..=4 => {
                            let data = tagged(a, bu - au, rng.next_u64() as u32);
                            match f.write_at(&data, a) {
                                // A write the close cut short keeps what it copied.
                                Ok(n) => reference[au..au + n].copy_from_slice(&data[..n]),
                                Err(e) if errno_of(&e) == libc::EBADF => refused = true,
                                Err(e) => panic!("seed {seed}, round {round}: write: {e}"),
                            }
                        }
                        5..=7 => {
                            let result = if rng.chance(50) { f.punch_hole(a..b) } else { f.zero_range(a..b, true) };
                            match result {
                                Ok(()) => reference[au..bu].fill(0),
                                Err(e) if errno_of(&e) == libc::EBADF => refused = true,
                                Err(e) => panic!("seed {seed}, round {round}: punch: {e}"),
                            }
                        }
                        _ => {
                            let mut got = vec![0u8; bu - au];
                            match f.read_at(&mut got, a) {
                                Ok(n) => {
                                    assert_eq!(n, got.len());
                                    if got != reference[au..bu] {
                                        panic!("seed {seed}, round {round}: {}", first_diff(&got, &reference[au..bu]));
                                    }
                                }
                                Err(e) if errno_of(&e) == libc::EBADF => refused = true,
                                Err(e) => panic!("seed {seed}, round {round}: read: {e}"),
                            }
                        }
                    }
                    assert!(!refused || closed.load(Ordering::Acquire), "EBADF before the close");
                }
                reference
            });
            let starter = s.spawn(move || {
                let mut rng = Rng::new(seed ^ round ^ 0x57A);
                let mut starts = 0u64;
                loop {
                    let a = rng.below(SIZE) as u64;
                    let range =
                        if rng.chance(10) { 0..u64::MAX } else { a..a + rng.between(1, 256 * KIB as usize) as u64 };
                    match f.writeback_range(range, SyncRangeFlags::WRITE) {
                        Ok(()) => starts += 1,
                        Err(e) if errno_of(&e) == libc::EBADF => break,
                        Err(e) => panic!("seed {seed}, round {round}: writeback_range: {e}"),
                    }
                }
                assert!(closed.load(Ordering::Acquire), "EBADF before the close");
                starts
            });
            std::thread::sleep(close_after);
            closed.store(true, Ordering::Release);
            cache.close().unwrap_or_else(|e| panic!("seed {seed}, round {round}: close: {e}"));
            let mut results = join_all(vec![starter]);
            (join_all(vec![owner]).pop().unwrap(), results.pop().unwrap())
        });
        want = after;
        done += starts;
        drop(f);
        assert_same(&store.contents(), &want, &format!("seed {seed}, round {round}: the store after the close"));
        round += 1;
    }
    store.check_no_overlapping_writes();
    eprintln!("seed {seed}: {round} rounds closed under {done} started range writebacks");
}

#[test]
fn started_range_writeback_races_cache_close_on_a_file() {
    let seed = seed_for("started_range_writeback_races_cache_close_on_a_file");
    with_timeout(WATCHDOG, move || close_race(Store::real("races-close", BUSY_WRITEBACK), seed, phase(1500)));
}

#[test]
fn started_range_writeback_races_cache_close_on_the_sim() {
    let seed = seed_for("started_range_writeback_races_cache_close_on_the_sim");
    with_timeout(WATCHDOG, move || close_race(Store::sim(seed, BUSY_WRITEBACK), seed, phase(1500)));
}

// ---------------------------------------------------------------------------
// 3. DONTNEED racing readers and writers of the same range.

const DN_BLOCKS: u64 = 1024;
/// Blocks per ownership chunk: chunk `c` belongs to writer `c % 2`.
const DN_CHUNK: u64 = 16;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Version `version` of block `block`: its index, the version, and words
/// that depend on both.
fn block_data(block: u64, version: u64, out: &mut [u8]) {
    for (i, word) in out.chunks_exact_mut(8).enumerate() {
        let v = match i {
            0 => block,
            1 => version,
            _ => mix(block.wrapping_mul(0x1_0000_0001) ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64),
        };
        word.copy_from_slice(&v.to_le_bytes());
    }
}

/// The version a read block holds, or what is wrong with it.
fn block_version(buf: &[u8], block: u64) -> Result<u64, String> {
    let word = |i: usize| u64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().unwrap());
    if word(0) != block {
        return Err(format!("block {block} names block {:#x}", word(0)));
    }
    let version = word(1);
    let mut want = vec![0u8; BLOCK as usize];
    block_data(block, version, &mut want);
    if buf != want {
        return Err(format!("block {block}, version {version}: {}", first_diff(buf, &want)));
    }
    Ok(version)
}

/// Two writers write new versions of whole blocks (each its own chunks of
/// 16 blocks, sometimes uncached), two readers read runs of blocks
/// anywhere, and an advisor gives DONTNEED over the whole range or parts of
/// it (and now and then starts range writeback or syncs). Every block a
/// reader gets names itself and a version no older than the last it saw
/// there (a stale copy read back from the store after a drop would be
/// older); a writer reads its own blocks back exactly. Then, once quiet,
/// new versions of half the blocks and one DONTNEED of everything: without
/// any other call, the dirty data is written and every folio leaves the
/// cache (within 20 s; a folio the reaper was handed twice takes 2 s, see
/// `a_folio_dropped_behind_twice_is_freed_at_once`), and the
/// store holds the last versions. No handle
/// reads ahead (RANDOM), so nothing comes back into the cache on its own.
fn dontneed_race(store: Store, seed: u64, run: Duration) {
    let len = DN_BLOCKS * BLOCK;
    let cache = store.cache();
    let f = cache.open(&store.path, &rw_create()).unwrap();
    f.advise(0..0, Advice::Random).unwrap();
    let mut initial = vec![0u8; len as usize];
    for (b, block) in initial.chunks_exact_mut(BLOCK as usize).enumerate() {
        block_data(b as u64, 0, block);
    }
    f.write_at(&initial, 0).unwrap();
    f.sync_all().unwrap();
    let deadline = Instant::now() + run;
    let (advices, checked) = (AtomicU64::new(0), AtomicU64::new(0));
    let versions = std::thread::scope(|s| {
        let (f, cache, store, advices, checked) = (&f, &cache, &store, &advices, &checked);
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed ^ (0x3417 + w));
                    let mut versions = vec![0u64; DN_BLOCKS as usize];
                    let mut next = 1u64;
                    let mut buf = vec![0u8; (DN_CHUNK * BLOCK) as usize];
                    while Instant::now() < deadline {
                        let chunk = 2 * rng.below((DN_BLOCKS / DN_CHUNK / 2) as usize) as u64 + w;
                        let b0 = chunk * DN_CHUNK + rng.below(DN_CHUNK as usize) as u64;
                        let b1 = rng.between(b0 as usize + 1, ((chunk + 1) * DN_CHUNK) as usize) as u64;
                        let bytes = &mut buf[..((b1 - b0) * BLOCK) as usize];
                        if rng.chance(85) {
                            for (i, block) in bytes.chunks_exact_mut(BLOCK as usize).enumerate() {
                                block_data(b0 + i as u64, next, block);
                            }
                            let flags = if rng.chance(20) { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                            assert_eq!(f.write_at_with(bytes, b0 * BLOCK, flags).unwrap(), bytes.len());
                            versions[b0 as usize..b1 as usize].fill(next);
                            next += 1;
                        } else {
                            assert_eq!(f.read_at(bytes, b0 * BLOCK).unwrap(), bytes.len());
                            for (i, block) in bytes.chunks_exact(BLOCK as usize).enumerate() {
                                let b = b0 + i as u64;
                                match block_version(block, b) {
                                    Ok(v) if v == versions[b as usize] => {}
                                    Ok(v) => panic!(
                                        "seed {seed}: writer {w} reads version {v} of block {b}, wrote {}",
                                        versions[b as usize]
                                    ),
                                    Err(e) => panic!("seed {seed}: writer {w}: {e}"),
                                }
                            }
                        }
                    }
                    versions
                })
            })
            .collect();
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                s.spawn(move || {
                    let handle = cache.open(&store.path, &OpenOptions::new().read(true)).unwrap();
                    handle.advise(0..0, Advice::Random).unwrap();
                    let mut rng = Rng::new(seed ^ (0x4EAD + r));
                    let mut seen = vec![0u64; DN_BLOCKS as usize];
                    let mut buf = vec![0u8; (64 * BLOCK) as usize];
                    while Instant::now() < deadline {
                        let b0 = rng.below(DN_BLOCKS as usize) as u64;
                        let b1 = rng.between(b0 as usize + 1, (b0 + 64).min(DN_BLOCKS) as usize) as u64;
                        let bytes = &mut buf[..((b1 - b0) * BLOCK) as usize];
                        let flags = if rng.chance(20) { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                        assert_eq!(handle.read_at_with(bytes, b0 * BLOCK, flags).unwrap(), bytes.len());
                        for (i, block) in bytes.chunks_exact(BLOCK as usize).enumerate() {
                            let b = b0 + i as u64;
                            let v = block_version(block, b).unwrap_or_else(|e| panic!("seed {seed}: reader {r}: {e}"));
                            assert!(
                                v >= seen[b as usize],
                                "seed {seed}: reader {r} read version {v} of block {b} after version {}",
                                seen[b as usize]
                            );
                            seen[b as usize] = v;
                        }
                        checked.fetch_add(b1 - b0, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let advisor = s.spawn(move || {
            let mut rng = Rng::new(seed ^ 0xAD71CE);
            while Instant::now() < deadline {
                let range = match rng.below(4) {
                    0 => 0..u64::MAX,
                    1 => {
                        let a = rng.below(len as usize) as u64;
                        a..rng.between(a as usize + 1, len as usize) as u64
                    }
                    _ => {
                        let a = rng.below(DN_BLOCKS as usize) as u64 * BLOCK;
                        a..(a + rng.between(1, 128) as u64 * BLOCK).min(len)
                    }
                };
                f.advise(range.clone(), Advice::DontNeed).unwrap();
                advices.fetch_add(1, Ordering::Relaxed);
                match rng.below(20) {
                    0 => f.writeback_range(range, SyncRangeFlags::WRITE).unwrap(),
                    1 => f.sync_data().unwrap(),
                    _ => {}
                }
                std::thread::sleep(Duration::from_micros(rng.below(400) as u64));
            }
        });
        let versions = join_all(writers);
        join_all(readers);
        join_all(vec![advisor]);
        versions
    });
    let mut want = vec![0u8; len as usize];
    for (b, block) in want.chunks_exact_mut(BLOCK as usize).enumerate() {
        let writer = (b as u64 / DN_CHUNK % 2) as usize;
        block_data(b as u64, versions[writer][b], block);
    }
    eprintln!(
        "seed {seed}: {} DONTNEEDs, {} blocks checked by readers; {}",
        advices.load(Ordering::Relaxed),
        checked.load(Ordering::Relaxed),
        stats_line(&cache.stats())
    );

    // Quiet now: no writeback in flight (a block rewritten while its old
    // version is in flight is not written on DONTNEED's kick: see
    // `dontneed_of_data_rewritten_under_writeback_is_written_on_its_kick`).
    // New versions of a random half of the blocks (plain writes, so not
    // drop-behind), then one DONTNEED: the cache empties itself.
    assert!(
        common::wait_until(Duration::from_secs(20), || cache.stats().writeback_bytes == 0),
        "seed {seed}: writeback in flight after the race: {:?}",
        cache.stats()
    );
    let mut rng = Rng::new(seed ^ 0xF1AA1);
    let mut block = vec![0u8; BLOCK as usize];
    for b in 0..DN_BLOCKS {
        if rng.chance(50) {
            let version = u64::MAX / 2 + b;
            block_data(b, version, &mut block);
            f.write_at(&block, b * BLOCK).unwrap();
            block_data(b, version, &mut want[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize]);
        }
    }
    let dirty = cache.stats().dirty_bytes;
    eprintln!("seed {seed}: {dirty} bytes dirty at the last DONTNEED");
    if store.options == QUIET_WRITEBACK {
        assert!(dirty >= DN_BLOCKS * BLOCK / 4, "seed {seed}: dirty data for the last DONTNEED: {dirty} bytes");
    }
    f.advise(0..u64::MAX, Advice::DontNeed).unwrap();
    let started = Instant::now();
    let settled = common::wait_until(Duration::from_secs(20), || {
        let s = cache.stats();
        s.dirty_bytes == 0 && s.writeback_bytes == 0 && f.cached_ranges().unwrap().is_empty()
    });
    let s = cache.stats();
    assert!(
        settled,
        "seed {seed}: after DONTNEED of everything: {} dirty ({} uncached), {} under writeback, cached {:?}",
        s.dirty_bytes,
        s.dontcache_dirty_bytes,
        s.writeback_bytes,
        f.cached_ranges().unwrap()
    );
    eprintln!("seed {seed}: written and dropped {:?} after the last DONTNEED", started.elapsed());
    assert_same(&store.written_contents(), &want, &format!("seed {seed}: the store after DONTNEED"));
    assert_same(&read_all(&f), &want, &format!("seed {seed}: read back from the store"));
    drop(f);
    cache.close().unwrap();
    assert_same(&store.contents(), &want, &format!("seed {seed}: the store after the close"));
    store.check_no_overlapping_writes();
}

#[test]
fn dontneed_races_readers_and_writers_on_a_file() {
    let seed = seed_for("dontneed_races_readers_and_writers_on_a_file");
    with_timeout(WATCHDOG, move || dontneed_race(Store::real("races-dontneed", QUIET_WRITEBACK), seed, phase(2000)));
}

#[test]
fn dontneed_races_readers_and_writers_on_the_sim() {
    let seed = seed_for("dontneed_races_readers_and_writers_on_the_sim");
    with_timeout(WATCHDOG, move || dontneed_race(Store::sim(seed, BUSY_WRITEBACK), seed, phase(2000)));
}

// ---------------------------------------------------------------------------
// 4. WILLNEED racing a truncate.

/// Two advisors ask for WILLNEED over the file (all of it, parts, from
/// somewhere to the end) and read bits of it, checking every byte is zero
/// or tagged for its offset, while the main thread, round after round,
/// writes a new version of the whole file (synced, started or left dirty,
/// its clean data sometimes dropped so that read-ahead reads the store),
/// truncates it and extends it again: the extension must read as zeros,
/// however the read-ahead of the old bytes fell around the cut, and the
/// store must hold the last round's content.
fn willneed_race(store: Store, seed: u64, run: Duration) {
    const SIZE: u64 = 4 * MIB + 1234;
    let cache = store.cache();
    let f = cache.open(&store.path, &rw_create()).unwrap();
    f.set_len(SIZE).unwrap();
    let stop = AtomicBool::new(false);
    let advices = AtomicU64::new(0);
    let (want, rounds) = std::thread::scope(|s| {
        let (cache, store, stop, advices) = (&cache, &store, &stop, &advices);
        let advisors: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || {
                    let handle = cache.open(&store.path, &OpenOptions::new().read(true)).unwrap();
                    let mut rng = Rng::new(seed ^ (0x7111 + t));
                    let mut buf = vec![0u8; 256 * KIB as usize];
                    while !stop.load(Ordering::Relaxed) {
                        let a = rng.below(SIZE as usize) as u64;
                        let range = match rng.below(3) {
                            0 => 0..u64::MAX,
                            1 => a..u64::MAX,
                            _ => a..a + rng.between(1, 2 * MIB as usize) as u64,
                        };
                        handle.advise(range, Advice::WillNeed).unwrap();
                        advices.fetch_add(1, Ordering::Relaxed);
                        if rng.chance(30) {
                            let len = rng.between(1, buf.len());
                            let n = handle.read_at(&mut buf[..len], a).unwrap();
                            if let Err(e) = check_tags(&buf[..n], a) {
                                panic!("seed {seed}: a read racing the truncates: {e}");
                            }
                        }
                        std::thread::sleep(Duration::from_micros(rng.below(300) as u64));
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + run;
        let mut rng = Rng::new(seed ^ 0x7A11);
        let mut want = vec![0u8; SIZE as usize];
        let mut round = 0u64;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while round < 5 || Instant::now() < deadline {
                let who = format!("seed {seed}, round {round}");
                let data = tagged(0, SIZE as usize, rng.next_u64() as u32);
                f.write_at(&data, 0).unwrap();
                match rng.below(3) {
                    0 => f.sync_data().unwrap(),
                    1 => f.writeback_range(0..u64::MAX, SyncRangeFlags::WRITE).unwrap(),
                    _ => {}
                }
                if rng.chance(50) {
                    f.advise(0..u64::MAX, Advice::DontNeed).unwrap();
                }
                let cut = match rng.below(10) {
                    0 => 0,
                    1..=3 => rng.below((SIZE / BLOCK) as usize) as u64 * BLOCK,
                    _ => rng.below(SIZE as usize) as u64,
                };
                std::thread::sleep(Duration::from_micros(rng.below(500) as u64));
                f.set_len(cut).unwrap_or_else(|e| panic!("{who}: set_len({cut}): {e}"));
                if rng.chance(30) {
                    assert_eq!(read_all(&f).len() as u64, cut, "{who}");
                }
                f.set_len(SIZE).unwrap_or_else(|e| panic!("{who}: set_len({SIZE}): {e}"));
                want.copy_from_slice(&data);
                want[cut as usize..].fill(0);
                let got = read_all(&f);
                if got != want {
                    panic!("{who}: after truncating to {cut} and extending: {}", first_diff(&got, &want));
                }
                round += 1;
            }
        }));
        stop.store(true, Ordering::Relaxed);
        join_all(advisors);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
        (want, round)
    });
    eprintln!(
        "seed {seed}: {rounds} truncate rounds, {} WILLNEEDs; {}",
        advices.load(Ordering::Relaxed),
        stats_line(&cache.stats())
    );
    f.sync_all().unwrap();
    assert_same(&store.contents(), &want, &format!("seed {seed}: the store after sync_all"));
    drop(f);
    cache.close().unwrap();
    assert_same(&store.contents(), &want, &format!("seed {seed}: the store after the close"));
    store.check_no_overlapping_writes();
}

#[test]
fn willneed_races_truncate_on_a_file() {
    let seed = seed_for("willneed_races_truncate_on_a_file");
    with_timeout(WATCHDOG, move || willneed_race(Store::real("races-willneed", BUSY_WRITEBACK), seed, phase(1500)));
}

#[test]
fn willneed_races_truncate_on_the_sim() {
    let seed = seed_for("willneed_races_truncate_on_the_sim");
    with_timeout(WATCHDOG, move || willneed_race(Store::sim(seed, BUSY_WRITEBACK), seed, phase(1500)));
}

// ---------------------------------------------------------------------------
// 5. A raw block device through a loop device.

/// Under `CI=true` a missing requirement is a failure, elsewhere a printed skip.
fn skip(what: &str, why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but {what} cannot run: {why}");
    }
    eprintln!("SKIPPED {what}: {why}");
}

fn logical_block_size(device: &Path) -> u64 {
    let name = device.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_to_string(format!("/sys/block/{name}/queue/logical_block_size"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(512)
}

/// The device's size as the kernel sees it (a block device's metadata
/// says 0).
fn device_size(device: &Path) -> u64 {
    use std::io::Seek;
    std::fs::File::open(device).unwrap().seek(std::io::SeekFrom::End(0)).unwrap()
}

/// On a loop device: punch_hole and zero_range (KEEP_SIZE, and without it
/// inside the device) over dirty and clean data, splitting folios and (on a
/// 512-byte-sector device) blocks, read back as zeros through the cache,
/// after a sync through a plain read of the device, and through a fresh
/// cache; the discarded dirty data is never written. What the kernel
/// refuses on a block device is refused with nothing changed: `allocate`
/// (mode 0 or KEEP_SIZE, `EOPNOTSUPP`), an unaligned or past-the-end range
/// (`EINVAL`), a resize (`EINVAL`). The device's size never changes. Then
/// the punch race on the device, with its ranges aligned to the sector.
#[test]
fn block_device_punch_zero_and_allocate_through_a_loop_device() {
    const WHAT: &str = "block_device_punch_zero_and_allocate_through_a_loop_device";
    const DEV: u64 = 16 * MIB;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return skip(WHAT, "not root");
    }
    let dev = match LoopDevice::create("races-blockdev", DEV) {
        Ok(dev) => dev,
        Err(e) => return skip(WHAT, &format!("no loop device ({e})")),
    };
    let seed = seed_for(WHAT);
    with_timeout(WATCHDOG, move || {
        let device = dev.device.clone();
        let lbs = logical_block_size(&device);
        eprintln!("{}: logical block size {lbs}", device.display());
        // A partial block on the device: the sector after a block boundary
        // (a whole block where sectors are 4 KiB).
        let sector = lbs.max(512);
        let cache = Cache::new(Config::from_options(QUIET_WRITEBACK).unwrap()).unwrap();
        let f = cache.open(&device, &rw()).unwrap();
        assert!(f.is_block_device());
        assert_eq!(f.len().unwrap(), DEV);
        let mut want = pattern(DEV as usize, seed);
        f.write_at(&want, 0).unwrap();
        f.sync_all().unwrap();
        // Dirty data over [2M, 6M): most of it is punched or zeroed below.
        let rewrite = pattern(4 * MIB as usize, seed + 1);
        f.write_at(&rewrite, 2 * MIB).unwrap();
        want[2 * MIB as usize..6 * MIB as usize].copy_from_slice(&rewrite);
        let written_before = cache.stats().written_bytes_by_reason.iter().sum::<u64>();

        let mut zero = |range: std::ops::Range<u64>, how: &str, f: &File| {
            let result = match how {
                "punch" => f.punch_hole(range.clone()),
                "zero" => f.zero_range(range.clone(), true),
                _ => f.zero_range(range.clone(), false),
            };
            result.unwrap_or_else(|e| panic!("{how} {range:?} on {}: {e}", device.display()));
            let end = range.end.min(DEV) as usize;
            want[range.start as usize..end].fill(0);
            assert_eq!(f.len().unwrap(), DEV, "{how} {range:?}: the size");
            let got = read_exact_at(f, range.start, end - range.start as usize);
            assert!(got.iter().all(|&b| b == 0), "{how} {range:?} reads as zeros: {}", first_diff(&got, &want));
        };
        // Block-aligned, across folio boundaries, over dirty data.
        zero(2 * MIB + 12 * KIB..3 * MIB + 64 * KIB, "punch", &f);
        // Partial blocks at both ends, over dirty data.
        zero(4 * MIB - 3 * sector..4 * MIB + 8 * KIB + sector, "punch", &f);
        zero(5 * MIB + sector..6 * MIB - 4 * KIB + sector, "zero", &f);
        // Over clean data, without KEEP_SIZE (inside the device).
        zero(7 * MIB + sector..7 * MIB + 64 * KIB, "zero-extend", &f);
        // Past the end with KEEP_SIZE: the kernel stops at the device's end.
        zero(DEV - 8 * KIB..DEV + MIB, "zero", &f);
        zero(DEV - 12 * KIB..DEV + 4 * KIB, "punch", &f);

        // Refused: nothing changes.
        let refused = [
            ("allocate", f.allocate(0..4096, false), libc::EOPNOTSUPP),
            ("allocate KEEP_SIZE", f.allocate(0..4096, true), libc::EOPNOTSUPP),
            ("fallocate mode 0", f.fallocate(8 * MIB..9 * MIB, Allocation::try_from(0).unwrap()), libc::EOPNOTSUPP),
            ("unaligned punch", f.punch_hole(8 * MIB + 100..8 * MIB + 100 + 4096), libc::EINVAL),
            ("zero past the end without KEEP_SIZE", f.zero_range(DEV - 4096..DEV + 4096, false), libc::EINVAL),
            ("punch at the end", f.punch_hole(DEV..DEV + 4096), libc::EINVAL),
            ("resize", f.set_len(DEV / 2), libc::EINVAL),
            ("grow", f.set_len(DEV * 2), libc::EINVAL),
        ];
        for (what, result, errno) in refused {
            match result {
                Err(e) => assert_eq!(errno_of(&e), errno, "{what}: {e}"),
                Ok(()) => panic!("{what} on a block device succeeded"),
            }
        }
        assert_eq!(f.len().unwrap(), DEV);
        assert_same(&read_all(&f), &want, "the device through the cache");
        f.sync_all().unwrap();
        let written = cache.stats().written_bytes_by_reason.iter().sum::<u64>() - written_before;
        // The rewrite's discarded part (about 2 MiB) is never written: at
        // most what is left of it, plus the edge blocks and bridged gaps.
        assert!(written <= 2 * MIB + 64 * KIB, "the sync wrote {written} bytes");
        eprintln!(
            "{}: the sync wrote {} KiB of the 4 MiB rewritten (the rest was punched or zeroed)",
            device.display(),
            written / KIB
        );
        assert_same(&std::fs::read(&device).unwrap(), &want, "a plain read of the device after the sync");
        drop(f);
        cache.close().unwrap();
        assert_eq!(device_size(&device), DEV, "the device's size");

        let fresh = Cache::new(Config::from_options(QUIET_WRITEBACK).unwrap()).unwrap();
        let f = fresh.open(&device, &OpenOptions::new().read(true)).unwrap();
        assert_same(&read_all(&f), &want, "the device through a fresh cache");
        drop(f);
        fresh.close().unwrap();

        // The punch race, on the device.
        let store = punch_race(Store::loop_device(dev, BUSY_WRITEBACK, lbs), seed, phase(1500));
        assert_eq!(device_size(&store.path), DEV, "the device's size after the race");
    });
}

// ---------------------------------------------------------------------------
// Library bugs the races found, reproduced on their own: regression tests
// of their fixes.

/// Dirty data made drop-behind (DONTNEED, or an uncached write) while an
/// older version of the same blocks is still being written back is
/// written once that writeback ends. The bug: the flusher's
/// `start_dontcache` round takes no block that is under writeback, a round
/// that starts nothing ended the work bit, and the completion of the older
/// write did not kick again, so the data stayed dirty until periodic
/// writeback, `expire_ms` later (an hour here; 1 s by default). The fix:
/// that completion kicks. The sim holds the older write at its gate, so
/// the order is exact.
#[test]
fn dontneed_of_data_rewritten_under_writeback_is_written_on_its_kick() {
    with_timeout(WATCHDOG, || {
        for uncached_write in [false, true] {
            let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
            let cache = Cache::with_sim(Config::from_options(QUIET_WRITEBACK).unwrap(), sim.clone()).unwrap();
            let path = Path::new("/stuck");
            let f = cache.open(path, &rw_create()).unwrap();
            f.write_at(&tagged(0, 64 * KIB as usize, 1), 0).unwrap();
            // The first version under writeback, held at the sim's gate.
            sim.hold_writes(path);
            f.writeback_range(0..64 * KIB, SyncRangeFlags::WRITE).unwrap();
            assert!(common::wait_until(Duration::from_secs(5), || sim.writes_held(path) > 0));
            // The second version, drop-behind: kicks the flusher, which
            // finds every dirty block under writeback.
            let second = tagged(0, 64 * KIB as usize, 2);
            if uncached_write {
                f.write_at_with(&second, 0, WriteFlags::DONTCACHE).unwrap();
            } else {
                f.write_at(&second, 0).unwrap();
                f.advise(0..u64::MAX, Advice::DontNeed).unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
            sim.release_writes(path);
            let settled = common::wait_until(Duration::from_secs(5), || {
                let s = cache.stats();
                s.dirty_bytes == 0 && s.writeback_bytes == 0 && f.cached_ranges().unwrap().is_empty()
            });
            let s = cache.stats();
            let how = if uncached_write { "an uncached write" } else { "a write and DONTNEED" };
            assert!(
                settled,
                "{how} over blocks under writeback: 5 s after that writeback ended, {} bytes dirty ({} uncached), \
                 {} under writeback, cached {:?}",
                s.dirty_bytes,
                s.dontcache_dirty_bytes,
                s.writeback_bytes,
                f.cached_ranges().unwrap()
            );
            assert_same(&sim.written_image(path).unwrap(), &second, "the second version on the store");
            drop(f);
            cache.close().unwrap();
        }
    });
}

/// A folio made drop-behind twice in a row (write + DONTNEED, twice, 1 ms
/// apart; or two uncached writes) is freed by the reaper's next batch
/// after it is written back clean, as one made drop-behind once is. The
/// bug: the reaper counted the references its own queue entries hold, so
/// with two entries for one folio each saw it "held by someone" and
/// retried until the older one reached the 2 s limit (`HELD_FOR_MAX`).
/// The fix: a batch keeps one entry per folio.
#[test]
fn a_folio_dropped_behind_twice_is_freed_at_once() {
    with_timeout(WATCHDOG, || {
        let dir = TempDir::new("races-reaper");
        let mut slow = Vec::new();
        for (round, uncached_write) in [(0, false), (1, true), (2, false), (3, true)] {
            let cache = Cache::new(Config::from_options(QUIET_WRITEBACK).unwrap()).unwrap();
            let f = cache.open(dir.0.join(format!("f{round}")), &rw_create()).unwrap();
            for version in 0..2 {
                let data = tagged(0, 64 * KIB as usize, version);
                if uncached_write {
                    f.write_at_with(&data, 0, WriteFlags::DONTCACHE).unwrap();
                } else {
                    f.write_at(&data, 0).unwrap();
                    f.advise(0..u64::MAX, Advice::DontNeed).unwrap();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let started = Instant::now();
            let settled = common::wait_until(Duration::from_secs(10), || {
                let s = cache.stats();
                s.dirty_bytes == 0 && s.writeback_bytes == 0 && f.cached_ranges().unwrap().is_empty()
            });
            let took = started.elapsed();
            let how = if uncached_write { "two uncached writes" } else { "two writes, each with DONTNEED" };
            eprintln!("{how}: written and dropped after {took:?} (settled: {settled})");
            if !settled || took > Duration::from_millis(500) {
                slow.push(format!("{how}: {took:?}"));
            }
            drop(f);
            cache.close().unwrap();
        }
        assert!(slow.is_empty(), "drop-behind folios still cached long after their writeback: {slow:?}");
    });
}
