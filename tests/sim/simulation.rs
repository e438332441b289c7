//! Simulation campaign: wbcache's reliability as a measured property. Each
//! seed draws, from one seeded generator (never the clock), a cache
//! configuration and the sim backend's knobs, a workload (several files and
//! one simulated block device, one or several threads, buffered, uncached
//! and vectored writes, reads, `set_len`, syncs, handles and caches closed
//! and reopened), a fault schedule (write `EIO` a few times or until
//! cleared, `ENOSPC` on a block or the whole disk, read `EIO`, short
//! transfers, failing flushes, refused submissions, latency spikes) and
//! crash points, each followed by a fresh cache over the rebooted disk. A
//! reference model checks every outcome: reads return exactly what was
//! written; a sync reports errors as docs/semantics.md's errseq rules say, to the
//! handle, and when it succeeds the durable image holds everything written
//! before it; once faults clear, syncs succeed and nothing is lost; after a
//! crash every synced byte not written since survives and every byte is one
//! this file's writes put there (or zero), never garbage or another file's
//! data; folio memory stays under `capacity` and dirty plus writeback under
//! `dirty_limit`.
//!
//! Written bytes are derived from (store, write number, position) so that a
//! byte on the crashed disk tells which writes may have put it there.
//! Threads own disjoint files, plus disjoint byte ranges of one shared store
//! (a file or the block device), so the expected content is known whatever
//! the interleaving; outcomes on a store only its owner touches are checked
//! exactly (errseq included), those on the shared store as far as its
//! owner's view allows. With one thread the calls follow from the seed as
//! long as their outcomes do; where a fault meets the flusher's timing an
//! outcome (and so what follows) may differ from run to run, which the
//! checks allow for.
//!
//! Environment: `WBCACHE_SIM_SECONDS` is the budget (default 120 with
//! `CI=true`, else 20), spent on seeds from `WBCACHE_SIM_FIRST_SEED`
//! (default 0) up, on `WBCACHE_SIM_JOBS` threads (default 1);
//! `WBCACHE_SIM_SEED=n` runs seed `n` alone and prints its configuration;
//! `WBCACHE_SIM_VERBOSE=1` also prints every operation, `WBCACHE_SIM_TIMING=1`
//! each seed's time and every operation slower than 10 ms. The summary line
//! (`simulation: N seeds, C crashes, F faults, V violations`) goes straight
//! to the process's stderr, so plain `cargo test` shows it; a violation
//! prints the line that reproduces it.

use crate::common;
use common::{first_diff, split_at_cuts, split_at_cuts_mut, Rng};

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use wbcache::sim::{Fault, SimConfig, SimIo};
use wbcache::{Cache, Config, File, OpenOptions, Stats, WriteFlags};

const KIB: usize = 1024;
const BLOCK: usize = 4096;

/// No operation legitimately takes this long; past it a seed is a hang.
const WATCHDOG: Duration = Duration::from_secs(90);

/// The campaign stops early after this many violations: later seeds would
/// mostly repeat them, and a broken engine can leave threads behind.
const MAX_VIOLATIONS: usize = 3;

/// Operations since the process started, for the watchdog.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

/// How often each check met the case it is there for, so that a summary
/// shows the campaign exercised what it claims to (a check that never met
/// its case proves nothing).
struct Coverage {
    syncs_ok: AtomicU64,
    syncs_failed: AtomicU64,
    /// Syncs that had to report an error (errseq) and did.
    syncs_reported_must: AtomicU64,
    cache_syncs_failed: AtomicU64,
    writes_failed: AtomicU64,
    writes_short: AtomicU64,
    reads_failed: AtomicU64,
    /// Bytes compared after crashes: synced bytes that had to survive, and
    /// all bytes checked against the writes that could have put them there.
    crash_synced_bytes: AtomicU64,
    crash_bytes: AtomicU64,
    /// Operations whose wait for memory (every folio dirty) ended with the
    /// failure's errno after a second of failing writeback (see
    /// `close_releases_a_writer_waiting_for_memory`), and stuck epochs
    /// [`rescuer`] got going again.
    known_memory_stalls: AtomicU64,
    rescues: AtomicU64,
    /// Crashes of the process (not the machine), the bytes the guardian's
    /// replay wrote, and the bytes checked against every acknowledged
    /// write afterwards.
    process_crashes: AtomicU64,
    process_crash_replayed_bytes: AtomicU64,
    process_crash_bytes: AtomicU64,
}

static COVERAGE: Coverage = Coverage {
    syncs_ok: AtomicU64::new(0),
    syncs_failed: AtomicU64::new(0),
    syncs_reported_must: AtomicU64::new(0),
    cache_syncs_failed: AtomicU64::new(0),
    writes_failed: AtomicU64::new(0),
    writes_short: AtomicU64::new(0),
    reads_failed: AtomicU64::new(0),
    crash_synced_bytes: AtomicU64::new(0),
    crash_bytes: AtomicU64::new(0),
    known_memory_stalls: AtomicU64::new(0),
    rescues: AtomicU64::new(0),
    process_crashes: AtomicU64::new(0),
    process_crash_replayed_bytes: AtomicU64::new(0),
    process_crash_bytes: AtomicU64::new(0),
};

fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn coverage_line() -> String {
    let c = &COVERAGE;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "syncs {} ok / {} failed ({} had to report an error), Cache::sync_all failed {}, writes failed {} / short {}, \
         reads failed {}; after crashes {} synced bytes and {} bytes checked; memory waits ended by failing writeback {}, \
         stuck epochs rescued {}; process crashes {} ({} bytes replayed by the guardian, {} bytes checked against every \
         acknowledged write)",
        get(&c.syncs_ok),
        get(&c.syncs_failed),
        get(&c.syncs_reported_must),
        get(&c.cache_syncs_failed),
        get(&c.writes_failed),
        get(&c.writes_short),
        get(&c.reads_failed),
        get(&c.crash_synced_bytes),
        get(&c.crash_bytes),
        get(&c.known_memory_stalls),
        get(&c.rescues),
        get(&c.process_crashes),
        get(&c.process_crash_replayed_bytes),
        get(&c.process_crash_bytes),
    )
}

// ---------------------------------------------------------------------------
// Output and environment

/// Writes a line straight to the process's stderr: `eprintln!` output of a
/// passing test is captured by the harness, and the summary is meant to be
/// seen in plain `cargo test` output too.
fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// `WBCACHE_SIM_VERBOSE`, read once (operations ask on every call).
fn verbose_env() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("WBCACHE_SIM_VERBOSE").is_ok_and(|v| v != "0"))
}

/// `WBCACHE_SIM_TIMING`, read once.
fn timing_env() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("WBCACHE_SIM_TIMING").is_ok_and(|v| v != "0"))
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

fn budget() -> Duration {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    Duration::from_secs(env_u64("WBCACHE_SIM_SECONDS").unwrap_or(if ci { 120 } else { 20 }))
}

fn repro(seed: u64) -> String {
    format!("WBCACHE_SIM_SEED={seed} cargo test --test sim simulation::")
}

// ---------------------------------------------------------------------------
// Tagged data

/// 64 bits of the data write `seq` of store `store` puts at byte `8 * word`.
fn tag_word(store: u32, seq: u64, word: u64) -> u64 {
    let mut z =
        (u64::from(store) << 56) ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ word.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The byte write `seq` of store `store` puts at position `pos`: it depends
/// on all three, so data of another store, another write or another place
/// does not pass for it (but for a chance match of one byte in 256).
fn tag_byte(store: u32, seq: u64, pos: usize) -> u8 {
    tag_word(store, seq, (pos / 8) as u64).to_le_bytes()[pos % 8]
}

/// What write `seq` of store `store` writes at `off..off + len`.
fn tagged(store: u32, seq: u64, off: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut pos = off;
    while pos < off + len {
        let word = tag_word(store, seq, (pos / 8) as u64).to_le_bytes();
        let take = (8 - pos % 8).min(off + len - pos);
        v.extend_from_slice(&word[pos % 8..pos % 8 + take]);
        pos += take;
    }
    v
}

fn errno_name(code: Option<i32>) -> String {
    match code {
        Some(libc::EIO) => "EIO".into(),
        Some(libc::ENOSPC) => "ENOSPC".into(),
        Some(libc::EBADF) => "EBADF".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(c) => format!("errno {c}"),
        None => "no errno".into(),
    }
}

// ---------------------------------------------------------------------------
// What a seed draws

/// A store of the seed: a regular file or the block device.
#[derive(Clone, Debug)]
struct StoreDesc {
    id: u32,
    path: PathBuf,
    /// The block device's size; regular files have none.
    device_len: Option<usize>,
    /// The length of a store that never changes size (the device, the
    /// shared file); `None` for a file its owner resizes.
    fixed_len: Option<usize>,
}

/// Everything a seed decides before it starts.
#[derive(Clone, Debug)]
struct SeedConfig {
    options: String,
    config: Config,
    sim: SimConfig,
    /// Worker threads; 1 is the single-threaded (reproducible) workload.
    threads: usize,
    nr_files: usize,
    /// Largest offset a write to a regular file reaches.
    file_max: usize,
    dev_len: usize,
    /// With several threads, the store they share by ranges: the device,
    /// or a regular file of `shared_len` bytes.
    share_device: bool,
    shared_len: usize,
    epochs: usize,
    /// Operations per epoch (all threads together), up to this.
    epoch_ops_max: usize,
    /// Chance per operation (per mille) of injecting a fault; 0 = no faults.
    fault_permille: usize,
    /// Chance per barrier (percent) of switching every write to failing, or
    /// back; 0 = never.
    switch_percent: usize,
}

fn pick<T: Copy>(rng: &mut Rng, choices: &[T]) -> T {
    choices[rng.below(choices.len())]
}

fn size(n: usize) -> String {
    if n == 0 {
        "0".into()
    } else if n % (1 << 20) == 0 {
        format!("{}M", n >> 20)
    } else if n % KIB == 0 {
        format!("{}K", n / KIB)
    } else {
        n.to_string()
    }
}

impl SeedConfig {
    fn draw(rng: &mut Rng, seed: u64) -> SeedConfig {
        let folio_max = pick(rng, &[4 * KIB, 16 * KIB, 16 * KIB, 64 * KIB, 64 * KIB, 256 * KIB]);
        let capacity =
            pick(rng, &[64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB, 1 << 20, 2 << 20, 4 << 20]).max(4 * folio_max);
        // Mostly at most half: the more of the memory dirty folios may
        // hold, the more often a writer needing a folio while the disk
        // fails meets the 30 s wait of `close_releases_a_writer_waiting_for_memory`.
        let dirty_limit = match rng.below(20) {
            0 => capacity,
            1..=4 => capacity * 3 / 4,
            5..=12 => capacity / 2,
            13..=16 => capacity / 4,
            _ => capacity / 8,
        }
        .max(2 * folio_max)
        .next_multiple_of(BLOCK)
        .min(capacity);
        let dirty_background = match rng.below(4) {
            0 => 0,
            1 => dirty_limit / 4,
            2 => dirty_limit / 2,
            _ => dirty_limit - BLOCK,
        } / BLOCK
            * BLOCK;
        let io_max = pick(rng, &[4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 << 20]);
        let bridge_gap = pick(rng, &[0, 4 * KIB, 8 * KIB, 16 * KIB]);
        let bridge_gap = if bridge_gap <= io_max / 2 { bridge_gap } else { 0 };
        let expire_ms = pick(rng, &[1, 3, 10, 30, 100, 60_000]);
        let io_depth = pick(rng, &[1, 2, 8, 32, 128]);
        let readahead_max = pick(rng, &[4 * KIB, 32 * KIB, 256 * KIB, 16 << 20]);
        let pause_ms = pick(rng, &[1, 10, 200]);
        // Through the option parser, as users give them.
        let options = format!(
            "capacity={},dirty_limit={},dirty_background={},folio_max={},io_max={},bridge_gap={},expire_ms={expire_ms},\
             io_depth={io_depth},readahead_max={},throttle_pause_ms_max={pause_ms}",
            size(capacity),
            size(dirty_limit),
            size(dirty_background),
            size(folio_max),
            size(io_max),
            size(bridge_gap),
            size(readahead_max),
        );
        // Drawn from a stream of its own, so adding it left every other
        // draw of every seed as it was.
        let mut routing_rng = Rng::new(seed ^ 0x7a3c_91e5_d2b4_0f68);
        let workers = pick(&mut routing_rng, &[1, 1, 2, 3, 4]);
        let routing = match routing_rng.below(3) {
            0 => "writeback_routing=single".to_string(),
            1 => format!("writeback_routing=rotor,writeback_workers={workers}"),
            _ => {
                let region = pick(&mut routing_rng, &[1, 2, 4, 16]) * folio_max;
                format!("writeback_routing=region,writeback_workers={workers},region_size={}", size(region))
            }
        };
        let options = format!("{options},{routing}");
        let config =
            Config::from_options(&options).unwrap_or_else(|e| panic!("seed {seed}: drew bad options {options}: {e}"));

        let spikes = rng.chance(10);
        let sim_seed = rng.next_u64();
        let sim = SimConfig {
            seed: sim_seed,
            latency_us_max: if rng.chance(15) { pick(rng, &[2, 20, 100]) } else { 0 },
            short_transfer_percent: pick(rng, &[0, 0, 5, 25]),
            retryable_error_percent: pick(rng, &[0, 0, 5, 20]),
            direct_io: rng.chance(80),
            submit_error_percent: pick(rng, &[0, 0, 3, 15]),
            latency_spike_percent: if spikes { pick(rng, &[1, 3]) } else { 0 },
            latency_spike_us: if spikes { pick(rng, &[200, 2000]) } else { 0 },
            // From a value drawn already, so every other draw of a seed
            // stays what it was.
            tail_writes: sim_seed % 2 == 0,
            ..SimConfig::default()
        };
        let threads = if rng.chance(60) { 1 } else { rng.between(2, 3) };
        let nr_files = rng.between(threads.max(2), 4);
        let file_max = pick(rng, &[8 * KIB + 100, 40 * KIB, 160 * KIB + 7, 600 * KIB]);
        let dev_len = pick(rng, &[16 * KIB, 64 * KIB, 256 * KIB]);
        let share_device = rng.chance(50);
        let shared_len = pick(rng, &[12 * KIB + 5, 100 * KIB + 1, 300 * KIB]);
        let faulty = rng.chance(70);
        SeedConfig {
            options,
            config,
            sim,
            threads,
            nr_files,
            file_max,
            dev_len,
            share_device,
            shared_len,
            epochs: rng.between(8, 40),
            epoch_ops_max: pick(rng, &[8, 30, 60, 120]),
            fault_permille: if faulty { pick(rng, &[10, 30, 80]) } else { 0 },
            switch_percent: if faulty && rng.chance(40) { pick(rng, &[3, 10]) } else { 0 },
        }
    }

    fn describe(&self) -> String {
        let s = &self.sim;
        format!(
            "{}; sim: latency_us_max={} short={}% retryable={}% submit_errors={}% spikes={}%x{}us direct_io={}; \
             {} thread(s), {} files up to {} bytes, device {} bytes, shared {}; {} epochs of up to {} ops; \
             faults {}‰, disk-wide errors {}%",
            self.options,
            s.latency_us_max,
            s.short_transfer_percent,
            s.retryable_error_percent,
            s.submit_error_percent,
            s.latency_spike_percent,
            s.latency_spike_us,
            s.direct_io,
            self.threads,
            self.nr_files,
            self.file_max,
            self.dev_len,
            if self.threads == 1 {
                "nothing".to_string()
            } else if self.share_device {
                "the device".to_string()
            } else {
                format!("a file of {} bytes", self.shared_len)
            },
            self.epochs,
            self.epoch_ops_max,
            self.fault_permille,
            self.switch_percent,
        )
    }
}

// ---------------------------------------------------------------------------
// The reference model of one byte range

/// What one thread knows about its bytes of one store: the whole of a file
/// it owns (whose length it changes), or a fixed range of a fixed-size store
/// it shares.
struct Region {
    store: usize,
    store_id: u32,
    /// First byte (0 for a whole file).
    lo: usize,
    /// A fixed-size range; `false` for a whole file.
    fixed: bool,
    /// What reads must return (for a fixed range, its bytes).
    data: Vec<u8>,
    /// The range's bytes on the disk when the epoch began.
    baseline: Vec<u8>,
    /// `data` at the last successful sync (or when the epoch began).
    synced: Vec<u8>,
    /// Bytes of `synced` that a write or `set_len` since may have changed.
    modified: Vec<bool>,
    /// Smallest and largest length since `synced` (whole files).
    min_len: usize,
    max_len: usize,
    /// Writes of this epoch: (write number, offset, length), logged before
    /// they are issued so that a crash during one still knows its bytes.
    log: Vec<(u64, usize, usize)>,
    /// Write numbers of this region: `seq_base + n`, unique per store.
    seq_base: u64,
    next_seq: u64,
}

impl Region {
    fn new(store: &StoreDesc, store_index: usize, lo: usize, fixed_len: Option<usize>, seq_base: u64) -> Region {
        let data = vec![0u8; fixed_len.unwrap_or(0)];
        Region {
            store: store_index,
            store_id: store.id,
            lo,
            fixed: fixed_len.is_some(),
            baseline: data.clone(),
            synced: data.clone(),
            modified: vec![false; data.len()],
            min_len: data.len(),
            max_len: data.len(),
            data,
            log: Vec::new(),
            seq_base,
            next_seq: 0,
        }
    }

    fn hi(&self) -> usize {
        self.lo + self.data.len()
    }

    fn touch(&mut self, start: usize, end: usize) {
        let end = end.min(self.modified.len());
        if start < end {
            self.modified[start..end].iter_mut().for_each(|m| *m = true);
        }
    }

    /// Logs a write of `len` bytes at absolute offset `off` before it is
    /// issued; returns its write number.
    fn begin_write(&mut self, off: usize, len: usize) -> u64 {
        let seq = self.seq_base + self.next_seq;
        self.next_seq += 1;
        self.log.push((seq, off, len));
        let rel = off - self.lo;
        self.touch(rel, rel + len);
        if !self.fixed {
            self.max_len = self.max_len.max(off + len);
        }
        seq
    }

    fn apply_write(&mut self, off: usize, bytes: &[u8]) {
        let rel = off - self.lo;
        let end = rel + bytes.len();
        if self.data.len() < end {
            assert!(!self.fixed, "a fixed range never grows");
            self.data.resize(end, 0);
        }
        self.data[rel..end].copy_from_slice(bytes);
    }

    /// Logs a length change of a whole file before it is issued.
    fn begin_set_len(&mut self, new_len: usize) {
        let old = self.data.len();
        self.touch(new_len.min(old), new_len.max(old));
        self.min_len = self.min_len.min(new_len);
        self.max_len = self.max_len.max(new_len);
    }

    fn apply_set_len(&mut self, new_len: usize) {
        self.data.resize(new_len, 0);
    }

    fn synced_now(&mut self) {
        self.synced.clone_from(&self.data);
        self.modified.clear();
        self.modified.resize(self.data.len(), false);
        self.min_len = self.data.len();
        self.max_len = self.data.len();
    }

    /// The range's bytes in a store image (shorter when the image ends
    /// inside it).
    fn part<'i>(&self, image: &'i [u8]) -> &'i [u8] {
        if self.fixed {
            &image[self.lo.min(image.len())..self.hi().min(image.len())]
        } else {
            image
        }
    }

    /// The range as the image holds it, a fixed range padded with zeros
    /// (what reads return once the store has its full length again).
    fn padded(&self, image: &[u8]) -> Vec<u8> {
        let mut v = self.part(image).to_vec();
        if self.fixed {
            v.resize(self.data.len(), 0);
        }
        v
    }

    /// After a crash of the process (not the machine): the guardian wrote
    /// what the cache held, so the range is exactly what reads returned,
    /// every acknowledged write in it.
    fn check_process_crash(&self, image: &[u8]) -> Result<(), String> {
        let got = self.padded(image);
        count(&COVERAGE.process_crash_bytes, got.len() as u64);
        if got == self.data {
            return Ok(());
        }
        Err(format!(
            "after a crash of the process the range differs from the acknowledged writes: {}",
            first_diff(&got, &self.data)
        ))
    }

    /// The checks after a crash; `Err` says what is wrong.
    fn check_crash(&self, image: &[u8]) -> Result<(), String> {
        let part = self.part(image);
        if !self.fixed {
            if part.len() < self.min_len {
                return Err(format!(
                    "length {} is below {}, the smallest length since the last successful sync",
                    part.len(),
                    self.min_len
                ));
            }
            let most = self.baseline.len().max(self.max_len.next_multiple_of(BLOCK));
            if part.len() > most {
                return Err(format!("length {} is beyond any length the file had ({most})", part.len()));
            }
        }
        // Synced and not written since: still there. A fixed range reads as
        // zeros past a store's end.
        for (i, (&want, &modified)) in self.synced.iter().zip(&self.modified).enumerate() {
            let got = part.get(i).copied().or(if self.fixed { Some(0) } else { None });
            if !modified && got != Some(want) {
                return Err(format!(
                    "byte {} was synced as {want:#04x} and not written since, but the crash left {}",
                    self.lo + i,
                    got.map_or("nothing (the file is shorter)".to_string(), |g| format!("{g:#04x}"))
                ));
            }
        }
        // Every byte is zero, what the disk held when the epoch began, or
        // what a write of this epoch put there.
        let mut ok: Vec<bool> =
            part.iter().enumerate().map(|(i, &b)| b == 0 || self.baseline.get(i) == Some(&b)).collect();
        for &(seq, off, len) in &self.log {
            let start = off.max(self.lo) - self.lo;
            let end = (off + len - self.lo).min(part.len());
            for i in start..end {
                if !ok[i] && part[i] == tag_byte(self.store_id, seq, self.lo + i) {
                    ok[i] = true;
                }
            }
        }
        count(&COVERAGE.crash_bytes, part.len() as u64);
        count(&COVERAGE.crash_synced_bytes, self.modified.iter().filter(|&&m| !m).count() as u64);
        if let Some(i) = ok.iter().position(|&ok| !ok) {
            let bad = ok.iter().filter(|&&ok| !ok).count();
            return Err(format!(
                "byte {} is {:#04x}, which no write of this file put there ({bad} such bytes; baseline {:?})",
                self.lo + i,
                part[i],
                self.baseline.get(i)
            ));
        }
        Ok(())
    }

    /// A new epoch over the disk as `image` holds it.
    fn reset_epoch(&mut self, image: &[u8]) {
        self.data = self.padded(image);
        self.baseline.clone_from(&self.data);
        self.log.clear();
        self.synced_now();
    }
}

// ---------------------------------------------------------------------------
// One thread's view of one store: its region, handles and errseq model

struct Handle {
    file: File,
    readable: bool,
    writable: bool,
    /// The handle's next sync must report an error: the sim returned one
    /// for this store since the handle's cursor last moved.
    must: bool,
    /// It may report one (an error happened while its last sync ran, or
    /// another thread's error may still be on its way).
    may: bool,
    /// What happened to the handle, for a violation's report.
    history: String,
}

struct View {
    store: StoreDesc,
    region: Region,
    /// Only this thread touches the store, so errseq outcomes are exact.
    exact: bool,
    handles: Vec<Handle>,
    /// `SimIo::write_errors` of the store when last looked at.
    err_count: u64,
    /// An error no handle has reported yet (a handle opened now reports it).
    unseen_must: bool,
    unseen_may: bool,
    /// Errors since the store's last sync, which a `Cache::sync_all` may
    /// still find recorded.
    unrecorded: bool,
    /// ENOSPC may be reported (else only EIO).
    enospc_possible: bool,
    /// Faults this view injected and has not cleared.
    faults_injected: bool,
    /// Operations until the view clears a fault injected "until cleared".
    permanent_ttl: Option<usize>,
    /// `SimIo::read_errors` of the store at the start of the previous and
    /// of this operation: a read or fill may fail from a fault fired in
    /// that window (a readahead worker's fill shares its failure).
    read_err_prev: u64,
    read_err_now: u64,
    /// Where a sequential reader stands.
    seq_read_pos: Option<usize>,
}

impl View {
    fn new(store: StoreDesc, region: Region, exact: bool) -> View {
        View {
            store,
            region,
            exact,
            handles: Vec::new(),
            err_count: 0,
            unseen_must: false,
            unseen_may: false,
            unrecorded: false,
            enospc_possible: false,
            faults_injected: false,
            permanent_ttl: None,
            read_err_prev: 0,
            read_err_now: 0,
            seq_read_pos: None,
        }
    }

    /// Errors the sim returned for this store since the last look: each is
    /// recorded in the inode's error sequence before any later sync checks
    /// it (a sync waits for the writeback passes that began before it), so
    /// every handle's next sync must report one, and so must a new handle's
    /// until some handle reported it.
    fn observe_errors(&mut self, sim: &SimIo) {
        let now = sim.write_errors(&self.store.path);
        if now > self.err_count {
            if verbose_env() {
                say(&format!("    {}: write errors {} -> {now}", self.store.path.display(), self.err_count));
            }
            self.err_count = now;
            self.errors_happened(true);
        }
    }

    fn errors_happened(&mut self, definite: bool) {
        let definite = definite && self.exact;
        for h in &mut self.handles {
            if definite {
                h.must = true;
                h.history.push_str("; errors seen: must");
            } else {
                h.may = true;
            }
        }
        if definite {
            self.unseen_must = true;
        } else {
            self.unseen_may = true;
        }
        self.unrecorded = true;
    }

    fn begin_op(&mut self, sim: &SimIo) {
        self.observe_errors(sim);
        self.read_err_prev = self.read_err_now;
        self.read_err_now = sim.read_errors(&self.store.path);
    }

    /// A read fault fired on this store since the previous operation began.
    fn read_fault_fired(&self, sim: &SimIo) -> bool {
        sim.read_errors(&self.store.path) > self.read_err_prev
    }

    /// What `File::len` must say.
    fn file_len(&self) -> usize {
        self.store.fixed_len.unwrap_or(self.region.data.len())
    }
}

// ---------------------------------------------------------------------------
// An epoch: one cache from open to crash or close

struct Epoch {
    seed: u64,
    number: usize,
    sim: Arc<SimIo>,
    config: Config,
    cache: RwLock<Option<Cache>>,
    /// Set just before the sim crashes: every later outcome is unknown.
    crashed: AtomicBool,
    /// A violation was found: every thread stops.
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    /// Operations of this epoch (all threads), and the one at which the
    /// threads stop for the sim to crash (`u64::MAX`: none).
    ops: AtomicU64,
    crash_at: AtomicU64,
    /// `crash_at` was reached: every thread stops at its next operation.
    crash_due: AtomicBool,
    crash_seed: u64,
    /// The crash is the process's, not the machine's (one in four): the
    /// cache's guardian writes what it held, and nothing acknowledged may
    /// be missing afterwards.
    process_crash: bool,
    /// The disk-wide write error in force (0: none).
    switch: AtomicI32,
    faults: AtomicU64,
    /// Bumped by every note a thread makes, for [`rescuer`].
    heartbeat: AtomicU64,
    /// Times [`rescuer`] repaired the disk; each worker forgets its faults
    /// when it sees this move.
    rescues: AtomicU64,
    /// The epoch's operations are over ([`rescuer`] stops).
    over: AtomicBool,
    /// Slack for the memory check: other threads may be half-way through
    /// an operation when one samples the counters.
    memory_slack: u64,
    /// Worker 0 fails on purpose at this operation (`u64::MAX`: never), to
    /// show that the harness reports a violation as itself.
    planted_violation_op: u64,
    verbose: bool,
}

impl Drop for Epoch {
    /// After a violation the engine may be wedged: leak the cache rather
    /// than wait in its close for writeback that never ends.
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(cache) = self.cache.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
                std::mem::forget(cache);
            }
        }
    }
}

impl Epoch {
    fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    fn stopped(&self) -> bool {
        self.crashed() || self.crash_due.load(Ordering::SeqCst) || self.failed.load(Ordering::SeqCst)
    }

    fn with_cache<R>(&self, f: impl FnOnce(&Cache) -> R) -> Option<R> {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(f)
    }

    fn stats(&self) -> Option<Stats> {
        self.with_cache(Cache::stats)
    }

    /// Power loss, with the flusher (and readahead) still at work and no
    /// thread of the workload inside an operation: one waiting there for
    /// writeback to free memory would wait 30 s once the disk is dead (see
    /// `close_releases_a_writer_waiting_for_memory`). What a thread's
    /// operation was doing at the crash only ever reached the cache, so
    /// nothing the disk can show is lost by stopping them first.
    ///
    /// Or the process's death (`process_crash`): the guardian replays the
    /// crash table into the disk's written images, and the kernel then
    /// writes them (the disk settles), so a later power loss loses none.
    fn crash_now(&self) {
        self.crashed.store(true, Ordering::SeqCst);
        let cache = self.cache.write().unwrap_or_else(|e| e.into_inner()).take();
        if self.process_crash {
            if let Some(cache) = &cache {
                let (replayed, _failures) = cache.simulate_process_crash(&self.sim);
                count(&COVERAGE.process_crashes, 1);
                count(&COVERAGE.process_crash_replayed_bytes, replayed);
            }
            self.sim.settle();
        } else {
            self.sim.crash(self.crash_seed);
        }
        if let Some(cache) = cache {
            drop_in_background(cache);
        }
    }

    fn switch(&self) -> Option<i32> {
        match self.switch.load(Ordering::SeqCst) {
            0 => None,
            code => Some(code),
        }
    }
}

/// How long an epoch may go without any thread starting an operation
/// before [`rescuer`] repairs the disk: well past the throttle's one second
/// before it fails a writer, well short of the 30 s memory wait.
const RESCUE_AFTER: Duration = Duration::from_secs(3);

/// Watches an epoch for a thread stuck in the known 30 s memory wait
/// (`close_releases_a_writer_waiting_for_memory`): while the disk keeps
/// failing, a write or read that needs a folio when every cached folio is
/// dirty waits that long, and with faults "until cleared" a seed can meet
/// it again and again. When no thread has started an operation for
/// `RESCUE_AFTER`, the disk recovers (every fault and the disk-wide error
/// go), as a real one might, which lets writeback free memory; the workers
/// then forget their faults. Every error the disk returned is still
/// counted and checked, so the errseq model is unaffected.
fn rescuer(ep: &Epoch) {
    let mut last = ep.heartbeat.load(Ordering::Relaxed);
    let mut since = Instant::now();
    while !ep.over.load(Ordering::SeqCst) {
        std::thread::park_timeout(Duration::from_millis(20));
        let now = ep.heartbeat.load(Ordering::Relaxed);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() > RESCUE_AFTER && !ep.stopped() {
            ep.sim.clear_faults();
            ep.sim.set_write_error_all(None);
            ep.switch.store(0, Ordering::SeqCst);
            ep.rescues.fetch_add(1, Ordering::SeqCst);
            count(&COVERAGE.rescues, 1);
            since = Instant::now();
        }
    }
}

/// Marks an epoch over when dropped, and wakes its rescuer now rather than
/// at its next look (an epoch is a few milliseconds).
struct EpochOver<'a> {
    ep: &'a Epoch,
    rescuer: std::thread::Thread,
}

impl Drop for EpochOver<'_> {
    fn drop(&mut self) {
        self.ep.over.store(true, Ordering::SeqCst);
        self.rescuer.unpark();
    }
}

/// Crashed caches still shutting down (see [`drop_in_background`]).
static DYING: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());

/// Drops a crashed cache on a thread of its own. Its close only meets dead
/// stores, but a flusher whose writes just failed sleeps out its failure
/// backoff (50 ms) before it notices the close, and waiting for that would
/// cost most of a crash's time; nothing it does can reach the rebooted disk.
fn drop_in_background(cache: Cache) {
    let mut dying = DYING.lock().unwrap_or_else(|e| e.into_inner());
    dying.retain(|h| !h.is_finished());
    // Bounded, so a machine without threads to spare still makes progress.
    if dying.len() >= 64 {
        drop(dying);
        drop(cache);
        return;
    }
    match std::thread::Builder::new().name("sim-dying-cache".into()).spawn(move || drop(cache)) {
        Ok(h) => dying.push(h),
        Err(e) => panic!("spawn a thread to drop a crashed cache: {e}"),
    }
}

/// Waits for every crashed cache to be gone.
fn join_dying() {
    let handles: Vec<_> = DYING.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
    for h in handles {
        let _ = h.join();
    }
}

// ---------------------------------------------------------------------------
// A worker: one thread's views and operations

#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Read,
    Write,
    Any,
}

struct Worker {
    id: usize,
    rng: Rng,
    views: Vec<View>,
    recent: VecDeque<String>,
    /// The view the current operation works on (for the log).
    cur_view: usize,
    /// `Epoch::rescues` when this worker last looked.
    rescues_seen: u64,
    fault_permille: usize,
    /// Largest offset a write to an owned regular file reaches.
    file_max: usize,
    folio_max: usize,
    /// Single-threaded workload: the only worker.
    alone: bool,
    ops: u64,
}

impl Worker {
    fn note(&mut self, ep: &Epoch, what: String) {
        ep.heartbeat.fetch_add(1, Ordering::Relaxed);
        let on = self.views.get(self.cur_view).map_or(String::new(), |v| v.store.path.display().to_string());
        if ep.verbose {
            say(&format!("  [e{} w{} #{}] {on}: {what}", ep.number, self.id, self.ops));
        }
        if self.recent.len() == 40 {
            self.recent.pop_front();
        }
        self.recent.push_back(format!("e{} #{} {on}: {what}", ep.number, self.ops));
    }

    /// Records a violation and panics with everything needed to chase it.
    fn fail(&self, ep: &Epoch, what: String) -> ! {
        let msg = format!(
            "seed {} epoch {} worker {} op {}: {what}\n  last operations of this worker:\n    {}",
            ep.seed,
            ep.number,
            self.id,
            self.ops,
            self.recent.iter().cloned().collect::<Vec<_>>().join("\n    ")
        );
        ep.failed.store(true, Ordering::SeqCst);
        ep.failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(msg.clone());
        panic!("{msg}");
    }

    /// Runs up to `nops` operations, or until the epoch's crash point, a
    /// crash or a violation.
    fn run(&mut self, ep: &Epoch, nops: usize) {
        for _ in 0..nops {
            if ep.stopped() {
                return;
            }
            let n = ep.ops.fetch_add(1, Ordering::SeqCst) + 1;
            PROGRESS.fetch_add(1, Ordering::Relaxed);
            ep.heartbeat.fetch_add(1, Ordering::Relaxed);
            if n == ep.crash_at.load(Ordering::SeqCst) {
                self.note(ep, format!("crash {:#x}", ep.crash_seed));
                ep.crash_due.store(true, Ordering::SeqCst);
                return;
            }
            self.ops += 1;
            let t0 = Instant::now();
            self.step(ep);
            let rescues = ep.rescues.load(Ordering::SeqCst);
            if rescues != self.rescues_seen {
                self.rescues_seen = rescues;
                for v in &mut self.views {
                    v.faults_injected = false;
                    v.permanent_ttl = None;
                }
            }
            if timing_env() && t0.elapsed() > Duration::from_millis(10) {
                say(&format!("slow op seed {} {:?}: {:?}", ep.seed, t0.elapsed(), self.recent.back()));
            }
            if ep.stopped() {
                return;
            }
            self.check_stats(ep);
            if self.id == 0 && self.ops == ep.planted_violation_op {
                self.fail(ep, "a planted violation (the harness's self-test)".into());
            }
        }
    }

    fn step(&mut self, ep: &Epoch) {
        let vi = self.rng.below(self.views.len());
        self.cur_view = vi;
        self.views[vi].begin_op(&ep.sim);
        if let Some(ttl) = self.views[vi].permanent_ttl {
            if ttl == 0 {
                self.views[vi].permanent_ttl = None;
                return self.op_clear_faults(ep, vi);
            }
            self.views[vi].permanent_ttl = Some(ttl - 1);
        }
        let roll = self.rng.below(1000);
        let fault_roll = roll >= 1000 - self.fault_permille;
        match roll {
            _ if fault_roll => self.op_inject(ep, vi),
            0..=359 => self.op_write(ep, vi),
            360..=599 => self.op_read(ep, vi),
            600..=689 => self.op_sync(ep, vi),
            690..=739 => self.op_set_len(ep, vi),
            740..=809 => self.op_reopen(ep, vi),
            810..=839 => self.op_len(ep, vi),
            840..=869 => self.op_clear_faults(ep, vi),
            870..=874 => self.op_idle(ep),
            _ => self.op_read(ep, vi),
        }
    }

    fn check_stats(&mut self, ep: &Epoch) {
        let Some(st) = ep.stats() else { return };
        if ep.crashed() {
            return;
        }
        let capacity = ep.config.capacity_bytes;
        if st.cached_bytes > capacity + ep.memory_slack {
            self.fail(ep, format!("folio memory {} is over capacity {capacity}: {st:?}", st.cached_bytes));
        }
        // Two versions of a block in flight at once could land in either
        // order, whichever workers wrote them.
        let overlapping = ep.sim.stats().overlapping_writes;
        if overlapping > 0 {
            self.fail(ep, format!("{overlapping} writes began while an overlapping write was in flight"));
        }
        let limit = ep.config.dirty_limit_bytes;
        // `dirty_bytes` and `writeback_bytes` are two gauges read one after
        // the other: bytes moving from one to the other between the reads
        // can be seen in both (a torn sum, found by a 17-minute run). The
        // cache's peak of dirty + writeback is kept from one gauge and
        // covers every instant, this one included: check that.
        // Exact, however many writers: each takes its room before it
        // dirties (one compare-and-swap against the limit).
        if st.peak_dirty_writeback_bytes > limit || st.peak_dirty_bytes > limit {
            self.fail(
                ep,
                format!(
                    "peak dirty + writeback {} (peak dirty {}; now {} + {}) is over dirty_limit {limit}",
                    st.peak_dirty_writeback_bytes, st.peak_dirty_bytes, st.dirty_bytes, st.writeback_bytes
                ),
            );
        }
    }

    // -- handles

    fn open_handle(&mut self, ep: &Epoch, vi: usize, readable: bool, writable: bool) -> Option<usize> {
        let v = &mut self.views[vi];
        v.observe_errors(&ep.sim);
        if v.handles.len() >= 4 {
            let victim = self.rng.below(v.handles.len());
            v.handles.swap_remove(victim);
        }
        let options = match (readable, writable) {
            (true, true) if v.store.device_len.is_none() => OpenOptions::read_write_create(),
            (true, true) => OpenOptions::new().read(true).write(true),
            (true, false) => OpenOptions::new().read(true),
            _ => OpenOptions::new().read(false).write(true),
        };
        let path = v.store.path.clone();
        let opened = ep.with_cache(|c| c.open(&path, &options))?;
        let file = match opened {
            Ok(f) => f,
            Err(_) if ep.crashed() => return None,
            Err(e) => self.fail(ep, format!("open {} ({options:?}): {e}", path.display())),
        };
        let v = &mut self.views[vi];
        let (must, may) = (v.unseen_must, v.unseen_may);
        let history = format!("opened (r{readable} w{writable}) at #{} must {must} may {may}", self.ops);
        v.handles.push(Handle { file, readable, writable, must, may, history });
        Some(v.handles.len() - 1)
    }

    fn pick_handle(&mut self, ep: &Epoch, vi: usize, need: Need) -> Option<usize> {
        let fits = |h: &Handle| match need {
            Need::Read => h.readable,
            Need::Write => h.writable,
            Need::Any => true,
        };
        let candidates: Vec<usize> =
            (0..self.views[vi].handles.len()).filter(|&i| fits(&self.views[vi].handles[i])).collect();
        if candidates.is_empty() || self.rng.chance(3) {
            let (readable, writable) = match need {
                Need::Read => (true, self.rng.chance(70)),
                Need::Write => (self.rng.chance(80), true),
                Need::Any => match self.rng.below(3) {
                    0 => (true, false),
                    1 => (false, true),
                    _ => (true, true),
                },
            };
            return self.open_handle(ep, vi, readable, writable);
        }
        Some(candidates[self.rng.below(candidates.len())])
    }

    // -- writes

    /// Where a write goes: anywhere, near the end, or around a folio or
    /// block boundary.
    fn pick_write_range(&mut self, vi: usize) -> (usize, usize) {
        let folio_max = self.folio_max;
        let v = &self.views[vi];
        let (lo, hi, end) = if v.region.fixed {
            (v.region.lo, v.region.hi(), v.region.hi())
        } else {
            (0, self.file_max, v.region.data.len())
        };
        let len = match self.rng.below(10) {
            0..=3 => self.rng.between(1, 600),
            4..=6 => self.rng.between(1, 12 * KIB),
            7 | 8 => self.rng.between(BLOCK, 2 * folio_max.max(16 * KIB)),
            _ => self.rng.between(1, 3 * folio_max),
        };
        let off = match self.rng.below(5) {
            0 | 1 => self.rng.between(lo, hi - 1),
            2 => (end + self.rng.below(16 * KIB)).saturating_sub(8 * KIB).clamp(lo, hi - 1),
            _ => {
                let unit = if self.rng.chance(50) { BLOCK } else { folio_max };
                let at = (lo + self.rng.below((hi - lo) / unit + 1) * unit).next_multiple_of(unit);
                (at + self.rng.below(2 * BLOCK)).saturating_sub(BLOCK).clamp(lo, hi - 1)
            }
        };
        // Device writes may cross its end (a short write) when one thread
        // owns it; ranges of a shared store stay inside.
        let cap = if v.region.fixed && !(self.alone && v.store.device_len.is_some()) { hi } else { hi + BLOCK };
        (off, len.min(cap - off).max(1))
    }

    fn op_write(&mut self, ep: &Epoch, vi: usize) {
        // Under disk-wide or permanent failure, writes that would reach the
        // dirty limit stall a second before they fail: rarely worth it.
        let failing = ep.switch().is_some() || self.views.iter().any(|v| v.permanent_ttl.is_some());
        let (off, len) = self.pick_write_range(vi);
        if failing && !self.rng.chance(2) {
            let Some(st) = ep.stats() else { return };
            let room = ep.config.dirty_limit_bytes.saturating_sub(st.dirty_bytes + st.writeback_bytes);
            if (len + 2 * BLOCK + self.folio_max) as u64 > room {
                return self.op_read(ep, vi);
            }
        }
        let Some(hi) = self.pick_handle(ep, vi, Need::Write) else { return };
        let flavour = self.rng.below(20);
        let dontcache = self.rng.chance(25);
        let cuts: Vec<usize> = if (4..=7).contains(&flavour) {
            let count = if self.rng.chance(10) { self.rng.below(60) } else { self.rng.below(6) };
            let mut cuts: Vec<usize> = (0..count).map(|_| self.rng.below(len + 1)).collect();
            cuts.sort_unstable();
            cuts
        } else {
            Vec::new()
        };
        let v = &mut self.views[vi];
        // What a device lets through: nothing at or past its end, up to it
        // across it.
        let expect = match v.store.device_len {
            Some(dev) if off >= dev => 0,
            Some(dev) => len.min(dev - off),
            None => len,
        };
        let seq = v.region.begin_write(off, expect);
        let data = tagged(v.region.store_id, seq, off, len);
        let what = format!(
            "write h{hi} {off}+{len} seq {seq} {}{}",
            if dontcache { "dontcache " } else { "" },
            match flavour {
                4..=7 => format!("vectored {} pieces", cuts.len() + 1),
                8 => "cursor".into(),
                _ => String::new(),
            }
        );
        self.note(ep, what);
        let wb_errors_before = ep.stats().map_or(0, |s| s.writeback_errors);
        let v = &self.views[vi];
        let file = &v.handles[hi].file;
        let flags = if dontcache { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
        let result = match flavour {
            4..=7 => {
                let pieces: Vec<IoSlice> = split_at_cuts(&data, &cuts).into_iter().map(IoSlice::new).collect();
                file.write_vectored_at_with(&pieces, off as u64, flags)
            }
            8 => {
                let mut c = file.cursor();
                c.seek(SeekFrom::Start(off as u64)).and_then(|_| c.write(&data))
            }
            _ => file.write_at_with(&data, off as u64, flags),
        };
        if ep.crashed() {
            return;
        }
        let writeback_failed = ep.stats().is_some_and(|s| s.writeback_errors > wb_errors_before);
        // An edge block that must be read first, or (at the dirty limit)
        // writeback failing for a second: the only reasons to fail.
        let excused = writeback_failed || v.read_fault_fired(&ep.sim);
        match result {
            Ok(n) if n == expect && expect > 0 => self.views[vi].region.apply_write(off, &data[..n]),
            Ok(n) if excused && n > 0 && n < expect => {
                count(&COVERAGE.writes_short, 1);
                self.views[vi].region.apply_write(off, &data[..n]);
            }
            Ok(n) => self.fail(ep, format!("write of {len} at {off} returned {n}, expected {expect}")),
            Err(e) if expect == 0 && e.raw_os_error() == Some(libc::ENOSPC) => {}
            // The throttle passes on the failure's errno (ENOSPC from a full
            // disk); an edge block's read gives EIO.
            Err(e) if excused && matches!(e.raw_os_error(), Some(libc::EIO | libc::ENOSPC)) => {
                count(&COVERAGE.writes_failed, 1);
            }
            // A writer needing a folio while every cached folio is dirty
            // waits for writeback; while writeback keeps failing it gets
            // the failure's errno after a second
            // (`close_releases_a_writer_waiting_for_memory`).
            Err(e)
                if writeback_failed
                    && (e.kind() == std::io::ErrorKind::OutOfMemory
                        || matches!(e.raw_os_error(), Some(libc::EIO | libc::ENOSPC))) =>
            {
                count(&COVERAGE.known_memory_stalls, 1);
            }
            Err(e) => self.fail(
                ep,
                format!(
                    "write of {len} at {off} failed: {e} ({}); expected {expect} bytes{}",
                    errno_name(e.raw_os_error()),
                    if excused { "" } else { " (no fault fired that could explain it)" }
                ),
            ),
        }
    }

    // -- reads

    fn op_read(&mut self, ep: &Epoch, vi: usize) {
        let Some(hi) = self.pick_handle(ep, vi, Need::Read) else { return };
        let v = &self.views[vi];
        let (lo, end) = if v.region.fixed { (v.region.lo, v.region.hi()) } else { (0, v.region.data.len()) };
        let sequential = v.seq_read_pos.filter(|&p| p < end && self.rng.chance(60));
        let off = match sequential {
            Some(p) => p,
            None => match self.rng.below(4) {
                0 => lo + self.rng.below(end - lo + 16 * KIB),
                1 => lo + self.rng.below((end - lo) / BLOCK + 2) * BLOCK,
                2 => end.saturating_sub(self.rng.below(6 * KIB)).max(lo),
                _ => lo,
            },
        };
        let len = match self.rng.below(4) {
            0 => self.rng.between(1, 700),
            1 => self.rng.between(1, 16 * KIB),
            2 => self.rng.between(BLOCK, 4 * self.folio_max),
            _ => 64 * KIB,
        };
        // A fixed range is read only inside itself: the rest is another
        // thread's (or past a device's end).
        let off = if v.region.fixed { off.min(end - 1) } else { off };
        let len = if v.region.fixed { len.min(end - off) } else { len };
        let flavour = self.rng.below(20);
        let dontcache = self.rng.chance(20);
        let cuts: Vec<usize> = if (4..=6).contains(&flavour) {
            let mut cuts: Vec<usize> = (0..self.rng.below(8)).map(|_| self.rng.below(len + 1)).collect();
            cuts.sort_unstable();
            cuts
        } else {
            Vec::new()
        };
        self.note(
            ep,
            format!(
                "read h{hi} {off}+{len}{}{}",
                if dontcache { " dontcache" } else { "" },
                match flavour {
                    4..=6 => " vectored",
                    7 => " cursor",
                    8 => " uninit",
                    _ => "",
                }
            ),
        );
        let v = &self.views[vi];
        let file = &v.handles[hi].file;
        let flags = if dontcache { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
        let mut buf = vec![0xA5u8; len];
        let wb_errors_before = ep.stats().map_or(0, |s| s.writeback_errors);
        let result = match flavour {
            4..=6 => {
                let mut pieces: Vec<IoSliceMut> =
                    split_at_cuts_mut(&mut buf, &cuts).into_iter().map(IoSliceMut::new).collect();
                file.read_vectored_at_with(&mut pieces, off as u64, flags)
            }
            7 => {
                let mut c = file.cursor();
                c.seek(SeekFrom::Start(off as u64)).and_then(|_| c.read(&mut buf))
            }
            8 => {
                let mut raw: Vec<MaybeUninit<u8>> = vec![MaybeUninit::new(0x5A); len];
                let r = file.read_at_uninit(&mut raw, off as u64, flags);
                if let Ok(n) = r {
                    for (dst, src) in buf.iter_mut().zip(&raw[..n]) {
                        // SAFETY: `read_at_uninit` wrote the first `n` bytes
                        // (and the vector was initialized anyway).
                        *dst = unsafe { src.assume_init() };
                    }
                }
                r
            }
            _ => file.read_at_with(&mut buf, off as u64, flags),
        };
        if ep.crashed() {
            return;
        }
        let data = &v.region.data;
        let rel = off - lo;
        let want = &data[rel.min(data.len())..(rel + len).min(data.len())];
        match result {
            Ok(n) if n == want.len() && buf[..n] == *want => {
                self.views[vi].seq_read_pos = Some(off + n);
            }
            Ok(n) => self.fail(
                ep,
                format!(
                    "read of {len} at {off} returned {n} bytes, expected {}: {}",
                    want.len(),
                    first_diff(&buf[..n.min(len)], want)
                ),
            ),
            Err(e) if v.read_fault_fired(&ep.sim) && e.raw_os_error() == Some(libc::EIO) => {
                count(&COVERAGE.reads_failed, 1);
            }
            // The memory wait again (a miss needs a folio too): with every
            // folio dirty and writeback failing, the failure's errno.
            Err(e)
                if (e.kind() == std::io::ErrorKind::OutOfMemory
                    || matches!(e.raw_os_error(), Some(libc::EIO | libc::ENOSPC)))
                    && ep.stats().is_some_and(|s| s.writeback_errors > wb_errors_before) =>
            {
                count(&COVERAGE.known_memory_stalls, 1);
            }
            Err(e) => self.fail(ep, format!("read of {len} at {off} failed without a read fault: {e}")),
        }
    }

    // -- syncs and the errseq model

    fn op_sync(&mut self, ep: &Epoch, vi: usize) {
        let Some(hi) = self.pick_handle(ep, vi, Need::Any) else { return };
        let data_only = self.rng.chance(50);
        self.sync_handle(ep, vi, hi, data_only, false);
    }

    /// Syncs handle `hi` of view `vi` and checks the outcome against the
    /// errseq model (docs/semantics.md, Errors): a sync fails only if an
    /// error happened since the handle last looked (or it opened while one
    /// was unseen), it must fail if one certainly did, and once it succeeds
    /// everything written before it is durable. `quiet`: no other thread
    /// runs, so even a shared store's outcome is exact from here on.
    /// Returns whether the sync succeeded.
    fn sync_handle(&mut self, ep: &Epoch, vi: usize, hi: usize, data_only: bool, quiet: bool) -> bool {
        self.cur_view = vi;
        let v = &mut self.views[vi];
        v.observe_errors(&ep.sim);
        let before = v.err_count;
        let (must, may) = (v.handles[hi].must, v.handles[hi].may);
        let what = format!("{} h{hi} (must {must} may {may})", if data_only { "sync_data" } else { "sync_all" });
        self.note(ep, what);
        let v = &self.views[vi];
        let file = &v.handles[hi].file;
        let result = if data_only { file.sync_data() } else { file.sync_all() };
        if ep.crashed() {
            return false;
        }
        let v = &mut self.views[vi];
        let after = ep.sim.write_errors(&v.store.path);
        let during = after > before;
        v.err_count = after;
        let exact = v.exact || quiet;
        match result {
            Err(e) => {
                let code = e.raw_os_error();
                let errno_ok = code == Some(libc::EIO) || (code == Some(libc::ENOSPC) && v.enospc_possible);
                if !errno_ok {
                    let what =
                        format!("sync failed with {e} ({}), not EIO or an ENOSPC the disk gave", errno_name(code));
                    self.fail(ep, what);
                }
                if !(must || may || during) {
                    let what = format!(
                        "sync of {} h{hi} failed ({e}) although no error happened since the handle's last sync",
                        v.store.path.display()
                    );
                    self.fail(ep, what);
                }
                count(&COVERAGE.syncs_failed, 1);
                if must {
                    count(&COVERAGE.syncs_reported_must, 1);
                }
                let v = &mut self.views[vi];
                // The newest recorded error is now seen; one recorded after
                // the check may still come.
                v.handles[hi].must = false;
                v.handles[hi].may = during || !exact;
                v.handles[hi].history.push_str(&format!("; #{} sync failed ({e}), errors during {during}", self.ops));
                v.unseen_must = false;
                v.unseen_may = during || !exact;
                if during {
                    for (i, h) in v.handles.iter_mut().enumerate() {
                        if i != hi {
                            h.must |= exact;
                            h.may = true;
                        }
                    }
                }
                v.unrecorded = during;
                false
            }
            Ok(()) => {
                if must {
                    let what = format!(
                        "sync of {} h{hi} succeeded although the disk failed a write of it since the handle's last \
                         sync (errseq: every handle must report it once); write errors {before} -> {after}; \
                         the handle: {}",
                        v.store.path.display(),
                        v.handles[hi].history
                    );
                    self.fail(ep, what);
                }
                self.check_durable(ep, vi, "a successful sync");
                count(&COVERAGE.syncs_ok, 1);
                let v = &mut self.views[vi];
                v.region.synced_now();
                v.handles[hi].history.push_str(&format!("; #{} sync ok, errors during {during}", self.ops));
                // An error during this sync but after its check was
                // recorded too late for it: the next sync reports it.
                v.handles[hi].must = during && exact;
                v.handles[hi].may = !exact;
                if during {
                    v.errors_happened(true);
                }
                v.unrecorded = during;
                true
            }
        }
    }

    /// The durable image holds this view's bytes exactly as the model does.
    fn check_durable(&self, ep: &Epoch, vi: usize, after: &str) {
        let v = &self.views[vi];
        let image = ep.sim.durable_image(&v.store.path).unwrap_or_default();
        let got = v.region.padded(&image);
        let exact_len = !v.region.fixed && image.len() != v.region.data.len();
        if got != v.region.data || exact_len {
            self.fail(
                ep,
                format!(
                    "after {after}, the durable image of {} (bytes {}..{}) differs from what was written: {}",
                    v.store.path.display(),
                    v.region.lo,
                    v.region.hi(),
                    first_diff(if exact_len { &image } else { &got }, &v.region.data)
                ),
            );
        }
    }

    /// Clears the faults this view injected and, unless the whole disk is
    /// failing, syncs every handle until it succeeds: each may report one
    /// last error, then nothing written may be lost.
    fn op_clear_faults(&mut self, ep: &Epoch, vi: usize) {
        let v = &mut self.views[vi];
        if !v.exact {
            // A shared store's faults are the driver's.
            return self.op_sync(ep, vi);
        }
        self.note(ep, "clear faults and settle".into());
        let v = &mut self.views[vi];
        ep.sim.clear_faults_for(&v.store.path);
        v.faults_injected = false;
        v.permanent_ttl = None;
        if ep.switch().is_none() {
            self.settle(ep, vi, false);
        }
    }

    /// Syncs every handle of view `vi` until it succeeds (the faults are
    /// gone), then reads everything back.
    fn settle(&mut self, ep: &Epoch, vi: usize, quiet: bool) {
        if self.views[vi].handles.is_empty() && self.open_handle(ep, vi, true, true).is_none() {
            return;
        }
        for hi in 0..self.views[vi].handles.len() {
            let mut tries = 0;
            while !self.sync_handle(ep, vi, hi, tries % 2 == 0, quiet) {
                if ep.crashed() {
                    return;
                }
                tries += 1;
                // The first may report an error it had not seen, the second
                // one that a writeback in flight at the first recorded.
                if tries == 3 {
                    self.fail(ep, format!("h{hi} still fails to sync after its faults were cleared"));
                }
            }
        }
        let v = &mut self.views[vi];
        v.enospc_possible = ep.switch() == Some(libc::ENOSPC);
        self.read_back(ep, vi, "settling");
    }

    /// Reads the whole region back through a readable handle: it must be
    /// the model, with no fault to excuse an error.
    fn read_back(&mut self, ep: &Epoch, vi: usize, when: &str) {
        let Some(hi) = self.pick_handle(ep, vi, Need::Read) else { return };
        let v = &self.views[vi];
        let want = &v.region.data;
        let mut buf = vec![0u8; want.len() + if v.region.fixed { 0 } else { 100 }];
        let result = v.handles[hi].file.read_at(&mut buf, v.region.lo as u64);
        if ep.crashed() {
            return;
        }
        match result {
            Ok(n) if n == want.len() && buf[..n] == **want => {}
            Ok(n) => self.fail(ep, format!("reading back while {when}: {n} bytes; {}", first_diff(&buf[..n], want))),
            Err(e) if v.read_fault_fired(&ep.sim) => {
                let _ = e;
            }
            Err(e) => self.fail(ep, format!("reading back while {when}: {e}")),
        }
    }

    // -- length

    fn op_set_len(&mut self, ep: &Epoch, vi: usize) {
        let v = &self.views[vi];
        if v.region.fixed && !(self.alone && v.store.device_len.is_some()) {
            return self.op_read(ep, vi);
        }
        let Some(hi) = self.pick_handle(ep, vi, Need::Write) else { return };
        let v = &mut self.views[vi];
        if let Some(dev) = v.store.device_len {
            // A device's size is fixed: the same size is fine, another is
            // EINVAL.
            let same = self.rng.chance(50);
            let new_len = if same { dev } else { self.rng.below(2 * dev) };
            self.note(ep, format!("device set_len h{hi} {new_len}"));
            let result = self.views[vi].handles[hi].file.set_len(new_len as u64);
            if ep.crashed() {
                return;
            }
            match result {
                Ok(()) if new_len == dev => {}
                Err(e) if new_len != dev && e.kind() == std::io::ErrorKind::InvalidInput => {}
                other => self.fail(ep, format!("set_len({new_len}) of a {dev}-byte device: {other:?}")),
            }
            return;
        }
        let len = v.region.data.len();
        let new_len = match self.rng.below(8) {
            0 | 1 => self.rng.below(len + 1),
            2..=4 => len.saturating_sub(self.rng.below(2 * BLOCK)),
            5 => len,
            _ => (len + self.rng.below(64 * KIB)).min(self.file_max),
        };
        self.note(ep, format!("set_len h{hi} {len} -> {new_len}"));
        self.views[vi].region.begin_set_len(new_len);
        let result = self.views[vi].handles[hi].file.set_len(new_len as u64);
        if ep.crashed() {
            return;
        }
        match result {
            Ok(()) => self.views[vi].region.apply_set_len(new_len),
            Err(e) => self.fail(ep, format!("set_len({new_len}) failed: {e}")),
        }
    }

    fn op_len(&mut self, ep: &Epoch, vi: usize) {
        let Some(hi) = self.pick_handle(ep, vi, Need::Any) else { return };
        self.note(ep, format!("len h{hi}"));
        let v = &self.views[vi];
        let result = v.handles[hi].file.len();
        if ep.crashed() {
            return;
        }
        let want = v.file_len() as u64;
        match result {
            Ok(n) if n != want => self.fail(ep, format!("len() is {n}, expected {want}")),
            Ok(_) => {}
            Err(e) => self.fail(ep, format!("len() failed: {e}")),
        }
    }

    fn op_reopen(&mut self, ep: &Epoch, vi: usize) {
        let n = self.views[vi].handles.len();
        match self.rng.below(6) {
            // Closing a file does not write back: the data stays dirty.
            0 => {
                self.note(ep, format!("close all {n} handles"));
                self.views[vi].handles.clear();
            }
            1 | 2 if n > 0 => {
                let hi = self.rng.below(n);
                self.note(ep, format!("close h{hi}"));
                self.views[vi].handles.swap_remove(hi);
            }
            _ => {
                let (readable, writable) = match self.rng.below(4) {
                    0 => (true, false),
                    1 => (false, true),
                    _ => (true, true),
                };
                self.note(ep, format!("open read={readable} write={writable}"));
                self.open_handle(ep, vi, readable, writable);
            }
        }
    }

    // -- faults

    fn op_inject(&mut self, ep: &Epoch, vi: usize) {
        let v = &mut self.views[vi];
        if !v.exact {
            return self.op_read(ep, vi);
        }
        let blocks = v.region.data.len().max(v.region.max_len) / BLOCK + 2;
        let block = self.rng.below(blocks) as u64;
        let (fault, times) = match self.rng.below(16) {
            0..=3 => (Fault::WriteEio, self.rng.between(1, 3) as u32),
            4 => (Fault::WriteEio, u32::MAX),
            5 | 6 => (Fault::Enospc, self.rng.between(1, 2) as u32),
            7 => (Fault::Enospc, u32::MAX),
            8 | 9 => (Fault::ReadEio, self.rng.between(1, 2) as u32),
            10 => (Fault::ReadEio, u32::MAX),
            11 | 12 => (Fault::SyncEio, self.rng.between(1, 2) as u32),
            13 => (Fault::ShortRead, self.rng.between(1, 4) as u32),
            _ => (Fault::ShortWrite, self.rng.between(1, 4) as u32),
        };
        let times_text = if times == u32::MAX { "until cleared".to_string() } else { format!("x{times}") };
        self.note(ep, format!("inject {fault:?} block {block} {times_text}"));
        let v = &mut self.views[vi];
        ep.sim.inject(&v.store.path, block, fault, times);
        ep.faults.fetch_add(1, Ordering::Relaxed);
        v.faults_injected = true;
        if fault == Fault::Enospc {
            v.enospc_possible = true;
        }
        if times == u32::MAX && v.permanent_ttl.is_none() {
            v.permanent_ttl = Some(self.rng.between(1, 6));
        }
    }

    fn op_idle(&mut self, ep: &Epoch) {
        let us = self.rng.below(2000) as u64;
        self.note(ep, format!("idle {us} us"));
        std::thread::sleep(Duration::from_micros(us));
    }
}

// ---------------------------------------------------------------------------
// A seed: its stores, workers and epochs

#[derive(Default, Clone, Copy)]
struct Tally {
    seeds: u64,
    crashes: u64,
    faults: u64,
    ops: u64,
    closes: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.seeds += other.seeds;
        self.crashes += other.crashes;
        self.faults += other.faults;
        self.ops += other.ops;
        self.closes += other.closes;
    }
}

/// How an epoch ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The sim crashes at a random operation (or at the end).
    Crash,
    /// Everything settles, the cache closes cleanly (and the sim may crash
    /// right after: nothing may change).
    Close { then_crash: bool },
}

struct Seed {
    seed: u64,
    cfg: SeedConfig,
    rng: Rng,
    sim: Arc<SimIo>,
    stores: Vec<StoreDesc>,
    /// With several threads, the index of the store they share.
    shared: Option<usize>,
    workers: Vec<Worker>,
    tally: Tally,
    verbose: bool,
    /// The disk-wide write error in force (0: none); it outlives crashes,
    /// as a broken disk would.
    switch: i32,
    /// The regular files exist (a read-only open needs them).
    created: bool,
    /// See [`Epoch::planted_violation_op`].
    planted_violation_op: u64,
}

impl Seed {
    fn new(seed: u64, verbose: bool) -> Seed {
        let mut rng = Rng::new(seed);
        let cfg = SeedConfig::draw(&mut rng, seed);
        let sim = Arc::new(SimIo::new(cfg.sim.clone()));
        let mut stores: Vec<StoreDesc> = (0..cfg.nr_files)
            .map(|i| StoreDesc {
                id: i as u32 + 1,
                path: PathBuf::from(format!("/sim/f{i}")),
                device_len: None,
                fixed_len: None,
            })
            .collect();
        let dev = StoreDesc {
            id: 100,
            path: PathBuf::from("/dev/simdisk"),
            device_len: Some(cfg.dev_len),
            fixed_len: Some(cfg.dev_len),
        };
        sim.create_block_device(&dev.path, cfg.dev_len as u64);
        stores.push(dev);
        let multi = cfg.threads > 1;
        let shared = if !multi {
            None
        } else if cfg.share_device {
            Some(stores.len() - 1)
        } else {
            stores.push(StoreDesc {
                id: 200,
                path: PathBuf::from("/sim/shared"),
                device_len: None,
                fixed_len: Some(cfg.shared_len),
            });
            Some(stores.len() - 1)
        };
        let folio_max = cfg.config.folio_max_bytes as usize;
        let mut workers: Vec<Worker> = (0..cfg.threads)
            .map(|id| Worker {
                id,
                rng: Rng::new(rng.next_u64()),
                views: Vec::new(),
                recent: VecDeque::new(),
                cur_view: 0,
                rescues_seen: 0,
                fault_permille: cfg.fault_permille,
                file_max: cfg.file_max,
                folio_max,
                alone: !multi,
                ops: 0,
            })
            .collect();
        // Files (and, alone, the device) are owned; a shared store is cut
        // into one range per thread at unaligned points.
        for (si, store) in stores.iter().enumerate() {
            if Some(si) == shared {
                let len = store.fixed_len.expect("a shared store has a fixed size");
                let mut cuts: Vec<usize> = (1..cfg.threads).map(|_| rng.between(1, len - 1)).collect();
                cuts.sort_unstable();
                cuts.dedup();
                let mut bounds = vec![0];
                bounds.extend(cuts);
                bounds.push(len);
                for (k, pair) in bounds.windows(2).enumerate() {
                    let w = k % cfg.threads;
                    let region = Region::new(store, si, pair[0], Some(pair[1] - pair[0]), (k as u64 + 1) << 40);
                    workers[w].views.push(View::new(store.clone(), region, false));
                }
            } else {
                let w = si % cfg.threads;
                let region = Region::new(store, si, 0, store.fixed_len, 0);
                workers[w].views.push(View::new(store.clone(), region, true));
            }
        }
        Seed {
            seed,
            cfg,
            rng,
            sim,
            stores,
            shared,
            workers,
            tally: Tally { seeds: 1, ..Tally::default() },
            verbose,
            switch: 0,
            created: false,
            planted_violation_op: u64::MAX,
        }
    }

    fn run(&mut self) {
        for number in 0..self.cfg.epochs {
            self.run_epoch(number);
        }
        // The seed ends with a clean close: everything written is durable.
        let ep = self.open_epoch(self.cfg.epochs, u64::MAX);
        self.prepare_epoch(&ep);
        self.close_cleanly(&ep, false);
    }

    fn open_epoch(&mut self, number: usize, crash_at: u64) -> Epoch {
        let cache = Cache::with_sim(self.cfg.config.clone(), self.sim.clone())
            .unwrap_or_else(|e| panic!("seed {}: Cache::with_sim: {e}", self.seed));
        let config = self.cfg.config.clone();
        let threads = self.cfg.threads as u64;
        let folio_max = config.folio_max_bytes;
        let crash_seed = self.rng.next_u64();
        Epoch {
            seed: self.seed,
            number,
            sim: self.sim.clone(),
            config,
            cache: RwLock::new(Some(cache)),
            crashed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            ops: AtomicU64::new(0),
            crash_at: AtomicU64::new(crash_at),
            crash_due: AtomicBool::new(false),
            crash_seed,
            process_crash: crash_seed % 4 == 0,
            switch: AtomicI32::new(self.switch),
            faults: AtomicU64::new(0),
            heartbeat: AtomicU64::new(0),
            rescues: AtomicU64::new(0),
            over: AtomicBool::new(false),
            memory_slack: if threads == 1 { 0 } else { (threads + 2) * folio_max },
            planted_violation_op: self.planted_violation_op,
            verbose: self.verbose,
        }
    }

    fn all_views(workers: &mut [Worker]) -> impl Iterator<Item = &mut View> {
        workers.iter_mut().flat_map(|w| w.views.iter_mut())
    }

    fn run_epoch(&mut self, number: usize) {
        let ops_total = self.rng.between(1, self.cfg.epoch_ops_max) as u64;
        let end = match self.rng.below(20) {
            0..=15 => End::Crash,
            16..=18 => End::Close { then_crash: false },
            _ => End::Close { then_crash: true },
        };
        // Mostly mid-way, sometimes after the last operation (at a barrier).
        let crash_at = if end == End::Crash && self.rng.chance(80) {
            self.rng.between(1, ops_total as usize) as u64
        } else {
            u64::MAX
        };
        let multi = self.cfg.threads > 1;
        let nsegs = if multi { self.rng.between(1, 3) } else { self.rng.between(1, 6) };
        // Per segment: operations per thread, and the barrier operation
        // before it (if any).
        let mut plan: Vec<(usize, Option<usize>)> = Vec::new();
        for _ in 0..nsegs {
            let per_thread = (ops_total as usize / nsegs / self.cfg.threads).max(1);
            let barrier = self.rng.chance(25);
            let roll = self.rng.below(100);
            plan.push((per_thread, barrier.then_some(roll)));
        }
        let ep = self.open_epoch(number, crash_at);
        self.prepare_epoch(&ep);
        std::thread::scope(|s| {
            let watch = s.spawn(|| rescuer(&ep));
            // Ends the rescuer however the segments end: a violation panics
            // out of them, and the scope would wait for the rescuer forever
            // (the campaign would report a hang instead of the violation).
            let _over = EpochOver { ep: &ep, rescuer: watch.thread().clone() };
            self.run_segments(&ep, &plan);
        });
        self.tally.ops += ep.ops.load(Ordering::Relaxed);
        self.tally.faults += ep.faults.load(Ordering::Relaxed);
        self.switch = ep.switch.load(Ordering::SeqCst);
        if !ep.crashed() {
            match end {
                End::Crash => {
                    ep.crash_now();
                }
                End::Close { then_crash } => {
                    self.close_cleanly(&ep, then_crash);
                    return;
                }
            }
        }
        self.after_crash(&ep);
    }

    /// Segment by segment: its barrier operation, then every worker runs
    /// its share (in turn, or all at once on threads of their own).
    fn run_segments(&mut self, ep: &Epoch, plan: &[(usize, Option<usize>)]) {
        for &(per_thread, barrier) in plan {
            if let Some(roll) = barrier {
                self.barrier_op(ep, roll, self.cfg.switch_percent);
            }
            if ep.stopped() {
                return;
            }
            if self.cfg.threads > 1 {
                let workers = &mut self.workers;
                std::thread::scope(|s| {
                    for w in workers.iter_mut() {
                        s.spawn(move || {
                            let outcome = catch_unwind(AssertUnwindSafe(|| w.run(ep, per_thread)));
                            if let Err(panic) = outcome {
                                ep.failed.store(true, Ordering::SeqCst);
                                let msg = panic_text(&panic);
                                ep.failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(msg);
                            }
                        });
                    }
                });
                if let Some(msg) = ep.failure.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                    panic!("{msg}");
                }
            } else {
                self.workers[0].run(ep, per_thread);
            }
            if ep.stopped() {
                return;
            }
        }
    }

    /// A new cache over the disk: handles are gone, the shared file gets
    /// its full length again, errseq models start from zero.
    fn prepare_epoch(&mut self, ep: &Epoch) {
        for w in &mut self.workers {
            w.rescues_seen = 0;
        }
        for v in Self::all_views(&mut self.workers) {
            v.handles.clear();
            v.err_count = ep.sim.write_errors(&v.store.path);
            v.unseen_must = false;
            v.unseen_may = false;
            v.unrecorded = false;
            v.read_err_now = ep.sim.read_errors(&v.store.path);
            v.read_err_prev = v.read_err_now;
            v.seq_read_pos = None;
            v.enospc_possible |= ep.switch() == Some(libc::ENOSPC);
        }
        if !self.created {
            for store in self.stores.iter().filter(|s| s.device_len.is_none()) {
                let opened = ep.with_cache(|c| c.open(&store.path, &OpenOptions::read_write_create()));
                opened.expect("the cache is open").unwrap_or_else(|e| panic!("seed {}: create: {e}", self.seed));
            }
            self.created = true;
        }
        if let Some(si) = self.shared.filter(|&si| self.stores[si].device_len.is_none()) {
            let path = self.stores[si].path.clone();
            let want = self.cfg.shared_len as u64;
            let file = ep
                .with_cache(|c| c.open(&path, &OpenOptions::read_write_create()))
                .expect("the cache is open")
                .unwrap_or_else(|e| panic!("seed {}: open the shared file: {e}", self.seed));
            if file.len().unwrap() != want {
                file.set_len(want).unwrap_or_else(|e| panic!("seed {}: size the shared file: {e}", self.seed));
            }
        }
    }

    /// A cache-wide operation while no worker runs.
    fn barrier_op(&mut self, ep: &Epoch, roll: usize, switch_percent: usize) {
        match roll {
            _ if roll < switch_percent => {
                if let Some(code) = ep.switch() {
                    self.workers[0].note(ep, format!("disk-wide {} off, settle everything", errno_name(Some(code))));
                    ep.sim.set_write_error_all(None);
                    ep.switch.store(0, Ordering::SeqCst);
                    self.settle_all(ep);
                } else {
                    let w0 = &mut self.workers[0];
                    let code = if w0.rng.chance(50) { libc::ENOSPC } else { libc::EIO };
                    w0.note(ep, format!("disk-wide {} on", errno_name(Some(code))));
                    ep.sim.set_write_error_all(Some(code));
                    ep.switch.store(code, Ordering::SeqCst);
                    ep.faults.fetch_add(1, Ordering::Relaxed);
                    if code == libc::ENOSPC {
                        Self::all_views(&mut self.workers).for_each(|v| v.enospc_possible = true);
                    }
                }
            }
            0..=39 => self.cache_sync_all(ep),
            40..=59 => {
                self.workers[0].note(ep, "close every handle".into());
                Self::all_views(&mut self.workers).for_each(|v| v.handles.clear());
            }
            60..=79 if self.shared.is_some() && self.cfg.fault_permille > 0 => self.shared_fault(ep),
            _ => {}
        }
    }

    /// Faults on the shared store come and go at barriers: inject one, or
    /// clear them all and settle its views.
    fn shared_fault(&mut self, ep: &Epoch) {
        let si = self.shared.expect("a shared store");
        let path = self.stores[si].path.clone();
        let injected = self.workers.iter().any(|w| w.views.iter().any(|v| v.store.path == path && v.faults_injected));
        if injected {
            self.workers[0].note(ep, "clear the shared store's faults and settle it".into());
            ep.sim.clear_faults_for(&path);
            for w in &mut self.workers {
                for vi in 0..w.views.len() {
                    if w.views[vi].store.path == path {
                        w.views[vi].faults_injected = false;
                        if ep.switch().is_none() {
                            w.settle(ep, vi, true);
                        }
                    }
                }
            }
            return;
        }
        let len = self.stores[si].fixed_len.expect("a shared store has a fixed size");
        let w0 = &mut self.workers[0];
        let block = w0.rng.below(len / BLOCK + 1) as u64;
        let (fault, times) = match w0.rng.below(5) {
            0 => (Fault::WriteEio, w0.rng.between(1, 3) as u32),
            1 => (Fault::Enospc, 1),
            2 => (Fault::ReadEio, w0.rng.between(1, 2) as u32),
            3 => (Fault::SyncEio, 1),
            _ => (Fault::ShortWrite, 2),
        };
        w0.note(ep, format!("shared store: inject {fault:?} block {block} x{times}"));
        ep.sim.inject(&path, block, fault, times);
        ep.faults.fetch_add(1, Ordering::Relaxed);
        for v in Self::all_views(&mut self.workers) {
            if v.store.path == path {
                v.faults_injected = true;
                v.enospc_possible |= fault == Fault::Enospc;
            }
        }
    }

    /// `Cache::sync_all` (syncfs): fails only if an error happened since
    /// some store's last sync; success means every store is durable.
    fn cache_sync_all(&mut self, ep: &Epoch) {
        let sim = &self.sim;
        self.workers[0].note(ep, "Cache::sync_all".into());
        let mut before = Vec::new();
        let mut pending = false;
        for v in Self::all_views(&mut self.workers) {
            v.observe_errors(sim);
            before.push(v.err_count);
            pending |= v.unrecorded;
        }
        let Some(result) = ep.with_cache(Cache::sync_all) else { return };
        let mut during = Vec::new();
        for v in Self::all_views(&mut self.workers) {
            during.push(sim.write_errors(&v.store.path));
        }
        let any_during = during.iter().zip(&before).any(|(a, b)| a > b);
        match result {
            Ok(()) => {
                for wi in 0..self.workers.len() {
                    for vi in 0..self.workers[wi].views.len() {
                        self.workers[wi].check_durable(ep, vi, "Cache::sync_all");
                        self.workers[wi].views[vi].region.synced_now();
                    }
                }
                if let Some(st) = ep.stats() {
                    if !any_during && (st.dirty_bytes != 0 || st.writeback_bytes != 0) {
                        let what = format!("after a successful Cache::sync_all with nothing running: {st:?}");
                        self.workers[0].fail(ep, what);
                    }
                    // Nothing dirty or under writeback, and nothing to
                    // retry: no writeback completes while the snapshot is
                    // read, and every byte written is counted.
                    let quiet = !any_during && st.dirty_bytes == 0 && st.writeback_bytes == 0;
                    if let Some(why) = common::written_bytes_disagree(&st).filter(|_| quiet) {
                        self.workers[0].fail(ep, format!("after a successful Cache::sync_all: {why}"));
                    }
                }
            }
            Err(e) => {
                if !(pending || any_during) {
                    self.workers[0].fail(ep, format!("Cache::sync_all failed without an error to report: {e}"));
                }
                count(&COVERAGE.cache_syncs_failed, 1);
            }
        }
        for (v, (&after, &b)) in Self::all_views(&mut self.workers).zip(during.iter().zip(&before)) {
            v.err_count = after;
            v.unrecorded = after > b;
            if after > b {
                v.errors_happened(true);
            }
        }
    }

    /// Syncs every handle of every view without faults of its own until it
    /// succeeds (views with faults settle when those are cleared).
    fn settle_all(&mut self, ep: &Epoch) {
        for w in &mut self.workers {
            for vi in 0..w.views.len() {
                if w.views[vi].faults_injected {
                    continue;
                }
                w.settle(ep, vi, true);
                if ep.stopped() {
                    return;
                }
            }
        }
    }

    /// Settles everything and closes the cache, which must succeed with
    /// every byte durable; `then_crash` crashes the sim right after, which
    /// must change nothing.
    fn close_cleanly(&mut self, ep: &Epoch, then_crash: bool) {
        self.workers[0].note(ep, format!("clean close{}", if then_crash { ", then crash" } else { "" }));
        ep.sim.clear_faults();
        ep.sim.set_write_error_all(None);
        ep.switch.store(0, Ordering::SeqCst);
        self.switch = 0;
        for v in Self::all_views(&mut self.workers) {
            v.faults_injected = false;
            v.permanent_ttl = None;
        }
        self.settle_all(ep);
        for v in Self::all_views(&mut self.workers) {
            v.handles.clear();
            v.enospc_possible = false;
        }
        let cache = ep.cache.write().unwrap_or_else(|e| e.into_inner()).take().expect("the cache is open");
        if let Err(e) = cache.close() {
            self.workers[0].fail(ep, format!("Cache::close after everything settled: {e}"));
        }
        self.tally.closes += 1;
        for wi in 0..self.workers.len() {
            for vi in 0..self.workers[wi].views.len() {
                self.workers[wi].check_durable(ep, vi, "Cache::close");
            }
        }
        if then_crash {
            ep.crashed.store(true, Ordering::SeqCst);
            self.sim.crash(ep.crash_seed);
            self.tally.crashes += 1;
            for wi in 0..self.workers.len() {
                for vi in 0..self.workers[wi].views.len() {
                    self.workers[wi].check_durable(ep, vi, "a crash right after Cache::close");
                }
            }
        }
        for si in 0..self.stores.len() {
            let image = self.sim.durable_image(&self.stores[si].path).unwrap_or_default();
            for v in Self::all_views(&mut self.workers).filter(|v| v.region.store == si) {
                v.region.reset_epoch(&image);
            }
        }
    }

    /// The checks after a crash, then the rebooted disk is the new truth.
    fn after_crash(&mut self, ep: &Epoch) {
        self.tally.crashes += 1;
        for v in Self::all_views(&mut self.workers) {
            v.handles.clear();
        }
        // The old cache went with the crash; make sure.
        if let Some(cache) = ep.cache.write().unwrap_or_else(|e| e.into_inner()).take() {
            drop_in_background(cache);
        }
        for si in 0..self.stores.len() {
            let store = &self.stores[si];
            let image = self.sim.durable_image(&store.path).unwrap_or_default();
            let written = self.sim.written_image(&store.path).unwrap_or_default();
            if written != image {
                self.workers[0].fail(ep, format!("{}: after a crash written and durable differ", store.path.display()));
            }
            if let Some(dev) = store.device_len {
                if image.len() != dev {
                    self.workers[0].fail(ep, format!("the device is {} bytes after a crash, not {dev}", image.len()));
                }
            }
            for wi in 0..self.workers.len() {
                for vi in 0..self.workers[wi].views.len() {
                    let v = &self.workers[wi].views[vi];
                    if v.region.store != si {
                        continue;
                    }
                    // With the whole disk failing writes, the guardian's
                    // writes failed too: only the power-cut checks hold.
                    let exact = ep.process_crash && self.switch == 0;
                    let checked = v.region.check_crash(&image);
                    let checked =
                        checked.and_then(|()| if exact { v.region.check_process_crash(&image) } else { Ok(()) });
                    if let Err(what) = checked {
                        let detail = self.explain(&image, si, &what);
                        self.workers[wi].fail(
                            ep,
                            format!("after crash {:#x}, {}: {what}{detail}", ep.crash_seed, store.path.display()),
                        );
                    }
                }
            }
            for v in Self::all_views(&mut self.workers).filter(|v| v.region.store == si) {
                v.region.reset_epoch(&image);
            }
        }
    }

    /// For a byte no write of its store explains: whose data it is.
    fn explain(&self, image: &[u8], si: usize, what: &str) -> String {
        let Some(pos) =
            what.strip_prefix("byte ").and_then(|r| r.split(' ').next()).and_then(|p| p.parse::<usize>().ok())
        else {
            return String::new();
        };
        if pos >= image.len() || !what.contains("which no write") {
            return String::new();
        }
        // A write whose 16 bytes around `pos` (any store, any offset shift of
        // up to a block) match the image: misplaced or foreign data.
        let lo = pos.saturating_sub(8);
        let hi = (pos + 8).min(image.len());
        let mut found = Vec::new();
        for w in &self.workers {
            for v in &w.views {
                for &(seq, off, len) in &v.region.log {
                    for shift in [0isize, -(BLOCK as isize), BLOCK as isize] {
                        let src = lo as isize + shift;
                        if src < off as isize || src as usize + (hi - lo) > off + len {
                            continue;
                        }
                        let src = src as usize;
                        if (0..hi - lo).all(|k| tag_byte(v.region.store_id, seq, src + k) == image[lo + k]) {
                            found.push(format!(
                                "store {} write {seq} at offset {src} (shift {shift})",
                                v.store.path.display()
                            ));
                        }
                    }
                }
            }
        }
        let _ = si;
        if found.is_empty() {
            "; it matches no logged write of any store (garbage)".into()
        } else {
            format!("; the bytes around it are {}", found.join(", "))
        }
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "a panic without a message".into()
    }
}

// ---------------------------------------------------------------------------
// The campaign

/// Runs one seed to the end; `Err` carries the violation.
fn run_seed(seed: u64, verbose: bool) -> Result<Tally, String> {
    run_seed_planted(seed, verbose, u64::MAX)
}

/// [`run_seed`], with worker 0 failing on purpose at its operation
/// `planted_violation_op` (`u64::MAX`: never).
fn run_seed_planted(seed: u64, verbose: bool, planted_violation_op: u64) -> Result<Tally, String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut s = Seed::new(seed, verbose);
        s.planted_violation_op = planted_violation_op;
        s.run();
        s.tally
    }));
    outcome.map_err(|panic| panic_text(&panic))
}

fn seed_config_line(seed: u64) -> String {
    let mut rng = Rng::new(seed);
    format!("seed {seed}: {}", SeedConfig::draw(&mut rng, seed).describe())
}

#[derive(Default)]
struct Campaign {
    tally: Tally,
    violations: Vec<(u64, String)>,
}

/// Runs seeds from `next` on `jobs` threads until `deadline` (one seed
/// alone when `only`); a hung seed is reported as a violation.
fn campaign(first: u64, only: bool, jobs: usize, deadline: Instant, verbose: bool) -> Campaign {
    let result = Arc::new(Mutex::new(Campaign::default()));
    let next = Arc::new(AtomicU64::new(first));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<()>();
    let mut handles = Vec::new();
    for _ in 0..jobs {
        let (result, next, stop, tx) = (result.clone(), next.clone(), stop.clone(), tx.clone());
        handles.push(std::thread::spawn(move || {
            loop {
                if stop.load(Ordering::SeqCst) || (!only && Instant::now() >= deadline) {
                    break;
                }
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if only && seed != first {
                    break;
                }
                let t0 = Instant::now();
                let outcome = run_seed(seed, verbose);
                let took = t0.elapsed();
                if let Ok(t) = &outcome {
                    // A seed normally takes well under a second: a slow one
                    // met a stall worth a look even when nothing failed.
                    if timing_env() || took > Duration::from_secs(5) {
                        let (secs, crashes, ops) = (took.as_secs_f64(), t.crashes, t.ops);
                        say(&format!("simulation: seed {seed} took {secs:.3} s ({crashes} crashes, {ops} operations)"));
                    }
                }
                let mut r = result.lock().unwrap_or_else(|e| e.into_inner());
                match outcome {
                    Ok(t) => r.tally.add(&t),
                    Err(msg) => {
                        r.tally.seeds += 1;
                        say(&format!("simulation: VIOLATION {msg}"));
                        say(&format!("simulation: {}", seed_config_line(seed)));
                        say(&format!("simulation: reproduce with: {}", repro(seed)));
                        r.violations.push((seed, msg));
                        if r.violations.len() >= MAX_VIOLATIONS {
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                }
            }
            let _ = tx.send(());
        }));
    }
    drop(tx);
    // The watchdog: the campaign fails instead of hanging when a seed stops
    // making progress (its thread is left behind).
    let mut finished = 0;
    let mut last = PROGRESS.load(Ordering::Relaxed);
    let mut since = Instant::now();
    while finished < jobs {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(()) => finished += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = PROGRESS.load(Ordering::Relaxed);
                if now != last {
                    last = now;
                    since = Instant::now();
                } else if since.elapsed() > WATCHDOG {
                    let seed = next.load(Ordering::SeqCst).saturating_sub(1);
                    let msg = format!("HANG: no operation for {WATCHDOG:?}; the seeds running include {seed}");
                    say(&format!("simulation: {msg}; reproduce with: {}", repro(seed)));
                    let mut r = result.lock().unwrap_or_else(|e| e.into_inner());
                    r.violations.push((seed, msg));
                    return std::mem::take(&mut *r);
                }
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    join_dying();
    let mut r = result.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut *r)
}

#[test]
fn simulation_campaign() {
    let verbose = verbose_env();
    let only = env_u64("WBCACHE_SIM_SEED");
    let first = only.or(env_u64("WBCACHE_SIM_FIRST_SEED")).unwrap_or(0);
    let jobs = env_u64("WBCACHE_SIM_JOBS").unwrap_or(1).max(1) as usize;
    let budget = budget();
    if only.is_some() {
        say(&format!("simulation: {}", seed_config_line(first)));
    }
    let started = Instant::now();
    let c = campaign(first, only.is_some(), if only.is_some() { 1 } else { jobs }, started + budget, verbose);
    let secs = started.elapsed().as_secs_f64();
    let t = c.tally;
    say(&format!(
        "simulation: {} seeds, {} crashes, {} faults, {} violations",
        t.seeds,
        t.crashes,
        t.faults,
        c.violations.len()
    ));
    say(&format!(
        "simulation: {secs:.1} s, {:.0} crashes/s, {} operations, {} clean closes; seeds {first}..{}",
        t.crashes as f64 / secs,
        t.ops,
        t.closes,
        first + t.seeds
    ));
    say(&format!("simulation: {}", coverage_line()));
    if !c.violations.is_empty() {
        let seeds: Vec<String> = c.violations.iter().map(|(s, _)| s.to_string()).collect();
        panic!(
            "{} violation(s), seeds {}; the first:\n{}\nreproduce with: {}",
            c.violations.len(),
            seeds.join(", "),
            c.violations[0].1,
            repro(c.violations[0].0)
        );
    }
}

// ---------------------------------------------------------------------------
// Engine bugs the campaign found, each as the smallest failing scenario

/// A cache over a fresh sim for the scenarios below: the flusher stays
/// idle (periodic writeback a minute away, background writeback above what
/// they dirty), so every number is the test's own.
fn quiet_cache(options: &str) -> (Arc<SimIo>, Cache) {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap();
    (sim, cache)
}

/// Engine bug (found by the campaign's first seeds), fixed (the first of two ways): one
/// writer's dirty plus
/// writeback bytes went over `dirty_limit`, which docs/semantics.md promises they
/// never do ("a writer waits for room before it dirties more"), in two
/// ways. `Inode::write_folio_part` asked `throttle::wait_for_dirty_room`
/// for room of `min(bytes, folio_max)` while dirtying whole blocks, so an
/// unaligned write went over by up to a block (here 60 KiB dirty, then 2
/// bytes across a block boundary inside a cached folio: 68 KiB against
/// 64 KiB). Fixed in `src/inode/`: the room is the whole blocks the part
/// can dirty. The other way is the next test.
#[test]
fn unaligned_write_stays_under_the_dirty_limit() {
    let (_sim, cache) =
        quiet_cache("capacity=1M,dirty_limit=64K,dirty_background=63K,folio_max=16K,io_max=64K,expire_ms=60000");
    let f = cache.open("/edge", &OpenOptions::read_write_create()).unwrap();
    // A clean 16 KiB folio, so that the 2 bytes fall into one folio.
    f.write_at(&[3u8; 16 * KIB], 128 * KIB as u64).unwrap();
    f.sync_all().unwrap();
    f.write_at(&[1u8; 60 * KIB], 0).unwrap();
    f.write_at(&[2u8; 2], (128 * KIB + BLOCK - 1) as u64).unwrap();
    let peak = cache.stats().peak_dirty_bytes;
    drop(f);
    cache.close().unwrap();
    assert!(peak <= 64 * KIB as u64, "peak dirty {peak} over a dirty_limit of 65536");
}

/// Found by the campaign's first seeds, fixed: the throttle capped the room
/// a writer waits for at `dirty_limit / 4` while a folio's part of a write
/// dirtied up to `folio_max`, so with `folio_max` above a quarter of the
/// limit one writer went over it (160 KiB against 128 KiB here: 96 KiB
/// dirty, a 64 KiB folio let in with 32 KiB free). A part is now cut at a
/// quarter of the limit, each piece waiting for its own room.
#[test]
fn large_folio_write_stays_under_the_dirty_limit() {
    let (_sim, cache) =
        quiet_cache("capacity=1M,dirty_limit=128K,dirty_background=127K,folio_max=64K,io_max=64K,expire_ms=60000");
    let f = cache.open("/over", &OpenOptions::read_write_create()).unwrap();
    f.write_at(&[1u8; 96 * KIB], 0).unwrap();
    f.write_at(&[2u8; 64 * KIB], 128 * KIB as u64).unwrap();
    let peak = cache.stats().peak_dirty_bytes;
    drop(f);
    cache.close().unwrap();
    assert!(peak <= 128 * KIB as u64, "peak dirty {peak} over a dirty_limit of 131072");
}

/// Found by the campaign (threads filling a 64 KiB cache when the sim
/// crashed, and single-threaded seeds with `dirty_limit` equal to
/// `capacity` and a failing disk), fixed: a write or a read that needs a
/// new folio while every cached folio is dirty waits in
/// `Memory::reserve` for writeback to clean one. With the disk
/// failing that never happens; the wait went on for 30 s, ignoring the
/// cache closing, and `Cache::close` waited with it. Dirty folios fill the
/// memory whenever `dirty_limit` is `capacity`, and also far below it,
/// because dirt is counted per block: here four 16 KiB folios with one
/// dirty block each hold all 64 KiB for 16 KiB of dirty data. The wait now
/// ends at the close (`EBADF`) and after a second of failing writeback
/// (the failure's errno), as the throttle's does.
#[test]
fn close_releases_a_writer_waiting_for_memory() {
    let (sim, cache) =
        quiet_cache("capacity=64K,dirty_limit=32K,dirty_background=28K,folio_max=16K,io_max=64K,expire_ms=60000");
    let f = Arc::new(cache.open("/full", &OpenOptions::read_write_create()).unwrap());
    for i in 0..4 {
        f.write_at(&[1u8; 16 * KIB], (i * 16 * KIB) as u64).unwrap();
    }
    f.sync_all().unwrap();
    for i in 0..4 {
        f.write_at(&[2u8; 1], (i * 16 * KIB + 100) as u64).unwrap();
    }
    sim.set_write_error_all(Some(libc::EIO));
    let writer = {
        let f = f.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let result = f.write_at(&[3u8; BLOCK], 64 * KIB as u64);
            (started.elapsed(), result.map_err(|e| (e.kind(), e.raw_os_error())))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let closed = cache.close();
    let close_took = started.elapsed();
    let (write_took, result) = writer.join().unwrap();
    assert!(closed.is_err(), "the disk fails: the close reports it");
    assert!(close_took < Duration::from_secs(5), "Cache::close took {close_took:?}");
    assert!(write_took < Duration::from_secs(5), "the write took {write_took:?} and returned {result:?}");
}

// ---------------------------------------------------------------------------
// The checker itself

/// A violation found by one worker, alone or among several, comes out of
/// the seed as that violation, promptly: it once left the epoch's rescuer
/// running, so the campaign waited for it and reported a hang instead.
#[test]
fn a_violation_is_reported_as_itself_not_as_a_hang() {
    let threads_of = |seed: u64| SeedConfig::draw(&mut Rng::new(seed), seed).threads;
    let alone = (0..).find(|&seed| threads_of(seed) == 1).unwrap();
    let among_several = (0..).find(|&seed| threads_of(seed) > 1).unwrap();
    for seed in [alone, among_several] {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(run_seed_planted(seed, false, 40));
        });
        let outcome = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("seed {seed}: a planted violation hung the seed for 60 s"));
        let msg = outcome.err().unwrap_or_else(|| panic!("seed {seed}: the planted violation was not reported"));
        assert!(msg.contains("a planted violation"), "seed {seed}: reported as something else: {msg}");
    }
}

/// The crash check accepts what a crash may leave (synced data, any mix of
/// versions a write of this file put there, zeros) and rejects what it
/// must not: a garbage byte, another store's data, this file's data moved,
/// a synced byte lost, a file shorter than any length since the sync.
#[test]
fn crash_check_rejects_garbage_foreign_moved_and_lost_bytes() {
    let store = StoreDesc { id: 7, path: PathBuf::from("/check"), device_len: None, fixed_len: None };
    let mut r = Region::new(&store, 0, 0, None, 0);
    let write = |r: &mut Region, off: usize, len: usize| {
        let seq = r.begin_write(off, len);
        r.apply_write(off, &tagged(7, seq, off, len));
    };
    write(&mut r, 0, 3 * BLOCK + 10);
    write(&mut r, 100, 50);
    r.synced_now();
    let synced = r.data.clone();
    write(&mut r, 2 * BLOCK, BLOCK);
    write(&mut r, 5 * BLOCK, 100);
    let now = r.data.clone();
    assert_eq!(tagged(7, 3, 17, 40), (17..57).map(|p| tag_byte(7, 3, p)).collect::<Vec<_>>());

    r.check_crash(&now).expect("everything written");
    r.check_crash(&synced).expect("the state at the sync");
    let mut mixed = synced.clone();
    mixed.resize(now.len(), 0);
    mixed[2 * BLOCK..3 * BLOCK].copy_from_slice(&now[2 * BLOCK..3 * BLOCK]);
    r.check_crash(&mixed).expect("one block new, the rest old, a hole before the tail");

    let mut garbage = now.clone();
    garbage[2 * BLOCK + 5] ^= 0x5A;
    assert!(r.check_crash(&garbage).unwrap_err().contains("which no write"));
    let mut foreign = now.clone();
    foreign[..BLOCK].copy_from_slice(&tagged(8, 0, 0, BLOCK));
    assert!(r.check_crash(&foreign).is_err(), "another store's data");
    let mut moved = now.clone();
    moved[2 * BLOCK..3 * BLOCK].copy_from_slice(&now[2 * BLOCK - 8..3 * BLOCK - 8]);
    assert!(r.check_crash(&moved).is_err(), "this file's data 8 bytes off");
    let mut lost = now.clone();
    lost[BLOCK + 1] = 0;
    assert!(r.check_crash(&lost).unwrap_err().contains("was synced"));
    assert!(r.check_crash(&now[..BLOCK]).unwrap_err().contains("below"), "shorter than any length since");
}
