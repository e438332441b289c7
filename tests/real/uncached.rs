//! Uncached I/O end to end (`WriteFlags::DONTCACHE`, handles opened with
//! `OpenOptions::dontcache`):
//! - the flusher kick coalesces: 10,000 uncached 4 KiB writes make at most
//!   a few hundred flusher wakeups, on a real file and through the `sim`
//!   backend's slow device;
//! - drop-behind is exact: what uncached writes dirtied and uncached reads
//!   brought in leaves the cache once clean (`dropbehind_freed_bytes`),
//!   what was cached before stays, and a cached access in between keeps
//!   the folio;
//! - a random mix of uncached and cached reads and writes on a sim block
//!   device and a sim file never changes content (checked against a
//!   reference `Vec<u8>`, and against the durable image after a sync);
//! - on a loop device, uncached writes and reads through the cache leave
//!   on the device exactly the bytes written (read back with plain reads
//!   after the cache closed). With `CI=true` a missing loop device fails
//!   the test instead of skipping it.
//!
//! Seeds: `WBCACHE_UNCACHED_SEED=n` runs the mixed test with seed `n` only;
//! a failure prints its seed.

use crate::common;
use common::pattern;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::loopdev::LoopDevice;
use common::programs::TempDir;
use common::{assert_same, wait_until, Rng};
use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, File, OpenOptions, Stats, WriteFlags, RESIDENT_CACHED};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Blocks of `[off, off + len)` of `file` that are cached now.
fn cached_blocks(file: &File, off: u64, len: u64) -> usize {
    let mut out = vec![0u8; (len as usize).div_ceil(4 * KIB) + 1];
    let n = file.residency(off, len, &mut out).unwrap();
    out[..n].iter().filter(|&&b| b & RESIDENT_CACHED != 0).count()
}

/// The cached runs of blocks of `[0, len)`, as `(first block, count)`.
fn cached_runs(file: &File, len: u64) -> Vec<(usize, usize)> {
    let mut out = vec![0u8; (len as usize).div_ceil(4 * KIB)];
    let n = file.residency(0, len, &mut out).unwrap();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, b) in out[..n].iter().enumerate() {
        if b & RESIDENT_CACHED != 0 {
            match runs.last_mut() {
                Some((start, count)) if *start + *count == i => *count += 1,
                _ => runs.push((i, 1)),
            }
        }
    }
    runs
}

/// Waits until the reaper has freed what it was given (its batches run on
/// a short tick) and returns the stats then.
fn settled(cache: &Cache, freed_at_least: u64) -> Stats {
    assert!(
        wait_until(Duration::from_secs(10), || cache.stats().dropbehind_freed_bytes >= freed_at_least),
        "drop-behind freed {} of {freed_at_least} bytes",
        cache.stats().dropbehind_freed_bytes
    );
    cache.stats()
}

/// 10,000 uncached 4 KiB writes: every one that dirtied new blocks is a
/// kick, and the kicks coalesce into a few hundred wakeups at most.
fn coalescing(cache: &Cache, file: &File) {
    let before = cache.stats();
    let block = pattern(4 * KIB, 1);
    for i in 0..10_000u64 {
        file.write_at_with(&block, i * 4 * KIB as u64, WriteFlags::DONTCACHE).unwrap();
    }
    let after = cache.stats();
    let kicks = after.dontcache_kicks - before.dontcache_kicks;
    let wakeups = after.flusher_wakeups - before.flusher_wakeups;
    eprintln!("10,000 uncached writes: {kicks} kicks, {wakeups} flusher wakeups");
    assert_eq!(kicks, 10_000, "each write dirtied a new block");
    assert!(wakeups <= 300, "{wakeups} wakeups for 10,000 uncached writes");
    file.sync_data().unwrap();
    let st = settled(cache, 40 * MIB as u64 * 9 / 10);
    let left = cached_blocks(file, 0, 40 * MIB as u64);
    assert!(left < 1024, "written back and dropped behind, but {left} blocks are cached: {st:?}");
    assert_eq!(st.dirty_bytes, 0);
}

#[test]
fn uncached_writes_coalesce_their_kicks_on_a_real_file() {
    let dir = TempDir::new("uncached-kicks");
    let cache = Cache::new(Config::from_options("capacity=64M,dirty_limit=16M").unwrap()).unwrap();
    let file = cache.open(dir.0.join("stream"), &OpenOptions::read_write_create()).unwrap();
    coalescing(&cache, &file);
    drop(file);
    cache.close().unwrap();
    let back = std::fs::read(dir.0.join("stream")).unwrap();
    assert_eq!(back.len(), 10_000 * 4 * KIB);
    assert!(back.chunks(4 * KIB).all(|c| c == &pattern(4 * KIB, 1)[..]), "every block as written");
}

#[test]
fn uncached_writes_coalesce_their_kicks_on_a_slow_device() {
    // 2 ms per I/O: the writer is far ahead of the device all along.
    let sim =
        Arc::new(SimIo::new(SimConfig { seed: 3, latency_us_max: 2000, direct_io: true, ..SimConfig::default() }));
    let options = "capacity=64M,dirty_limit=16M,folio_max=64K,io_max=256K";
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim).unwrap();
    let file = cache.open("/stream", &OpenOptions::read_write_create()).unwrap();
    coalescing(&cache, &file);
    drop(file);
    cache.close().unwrap();
}

/// A handle opened uncached makes every read and write uncached: what it
/// writes and what it reads in leave the cache once clean, while data a
/// cached handle brought in stays cached when the uncached one reads it.
#[test]
fn a_handle_opened_uncached_drops_behind_everything_it_brings_in() {
    let dir = TempDir::new("uncached-handle");
    let path = dir.0.join("data");
    std::fs::write(&path, pattern(8 * MIB, 2)).unwrap();
    let cache = Cache::new(Config::from_options("capacity=64M").unwrap()).unwrap();
    let cached = cache.open(&path, &OpenOptions::new().read(true)).unwrap();
    let uncached = cache.open(&path, &OpenOptions::new().read(true).write(true).dontcache(true)).unwrap();
    assert!(uncached.is_dontcache() && !cached.is_dontcache());
    // The second half is read through the cached handle, in one read
    // (not from the start: no readahead past it). It stays.
    let mut buf = vec![0u8; 4 * MIB];
    cached.read_at(&mut buf, 4 * MIB as u64).unwrap();
    assert_same(&buf, &pattern(8 * MIB, 2)[4 * MIB..], "cached read");
    // The uncached handle reads everything: the first half goes again.
    let mut all = vec![0u8; 8 * MIB];
    for off in (0..8 * MIB).step_by(256 * KIB) {
        assert_eq!(uncached.read_at(&mut all[off..off + 256 * KIB], off as u64).unwrap(), 256 * KIB);
    }
    assert_same(&all, &pattern(8 * MIB, 2), "uncached read");
    let gone = wait_until(Duration::from_secs(10), || cached_blocks(&cached, 0, 4 * MIB as u64) < 256);
    assert!(gone, "what the uncached reads brought in goes: {:?}", cache.stats());
    assert_eq!(cached_blocks(&cached, 4 * MIB as u64, 4 * MIB as u64), 1024, "what a cached read brought in stays");
    let st = cache.stats();
    // Writes through the uncached handle: kicked, written back, dropped.
    let fresh = pattern(2 * MIB, 3);
    uncached.write_at(&fresh, 8 * MIB as u64).unwrap();
    assert!(cache.stats().dontcache_kicks > st.dontcache_kicks, "a plain write_at of the handle is uncached");
    uncached.sync_data().unwrap();
    let gone = wait_until(Duration::from_secs(10), || cached_blocks(&cached, 8 * MIB as u64, 2 * MIB as u64) < 128);
    assert!(gone, "uncached writes leave once clean: {:?}", cache.stats());
    // The reaper counts what it freed after each batch, a moment after
    // the folios left the mapping.
    let counted = wait_until(Duration::from_secs(10), || {
        cache.stats().dropbehind_freed_bytes >= st.dropbehind_freed_bytes + MIB as u64
    });
    assert!(counted, "the freed bytes are counted: {:?}", cache.stats());
    let mut back = vec![0u8; 2 * MIB];
    cached.read_at(&mut back, 8 * MIB as u64).unwrap();
    assert_same(&back, &fresh, "uncached write read back");
    drop((cached, uncached));
    cache.close().unwrap();
}

/// An uncached write followed by a cached read of the same data before it
/// is written back: the read clears the mark, and the data stays cached.
#[test]
fn a_cached_access_keeps_a_dropbehind_folio() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 4, latency_us_max: 50, direct_io: true, ..SimConfig::default() }));
    let options = "capacity=16M,folio_max=64K,expire_ms=600000";
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim).unwrap();
    let file = cache.open("/f", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(256 * KIB, 5);
    file.write_at_with(&data, 0, WriteFlags::DONTCACHE).unwrap();
    let mut kept = vec![0u8; 64 * KIB];
    file.read_at(&mut kept, 0).unwrap();
    file.sync_data().unwrap();
    let freed = settled(&cache, 3 * 64 * KIB as u64).dropbehind_freed_bytes;
    assert_eq!(freed, 3 * 64 * KIB as u64, "three of the four folios went");
    assert_eq!(cached_blocks(&file, 0, 256 * KIB as u64), 16, "the one read stayed");
    drop(file);
    cache.close().unwrap();
}

/// Random uncached and cached reads and writes on a sim block device and a
/// sim file, with a cache small enough that eviction runs: content always
/// equals the reference, and after each sync the durable image does too.
fn mixed_seed(seed: u64) {
    let sim = Arc::new(SimIo::new(SimConfig {
        seed,
        latency_us_max: 30,
        short_transfer_percent: 10,
        direct_io: true,
        ..SimConfig::default()
    }));
    let dev_len = 8 * MIB;
    sim.create_block_device(Path::new("/dev/simdisk"), dev_len as u64);
    let options = "capacity=4M,dirty_limit=1M,folio_max=256K,io_max=256K";
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap();
    let mut rng = Rng::new(seed);
    let dev = cache.open("/dev/simdisk", &OpenOptions::new().read(true).write(true)).unwrap();
    let dev_uncached = cache.open("/dev/simdisk", &OpenOptions::new().read(true).write(true).dontcache(true)).unwrap();
    let file = cache.open("/file", &OpenOptions::read_write_create()).unwrap();
    let file_uncached = cache.open("/file", &OpenOptions::new().read(true).write(true).dontcache(true)).unwrap();
    let file_len = 6 * MIB;
    file.set_len(file_len as u64).unwrap();
    let mut refs = [vec![0u8; dev_len], vec![0u8; file_len]];
    for op in 0..3000 {
        let which = rng.below(2);
        let (plain, uncached, path) =
            if which == 0 { (&dev, &dev_uncached, "/dev/simdisk") } else { (&file, &file_uncached, "/file") };
        let reference = &mut refs[which];
        let len = rng.between(1, 300 * KIB);
        let off = rng.below(reference.len() - len);
        let how = rng.below(4);
        let handle = if how >= 2 { uncached } else { plain };
        let flags = if how == 1 { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
        let ctx = format!("seed {seed} op {op} {path} off {off} len {len} how {how}");
        match rng.below(10) {
            0..=3 => {
                let data = pattern(len, seed ^ op as u64);
                assert_eq!(handle.write_at_with(&data, off as u64, flags).unwrap(), len, "{ctx}");
                reference[off..off + len].copy_from_slice(&data);
            }
            4..=8 => {
                let mut buf = vec![0u8; len];
                assert_eq!(handle.read_at_with(&mut buf, off as u64, flags).unwrap(), len, "{ctx}");
                assert_same(&buf, &reference[off..off + len], &ctx);
            }
            _ => {
                handle.sync_data().unwrap();
                let durable = sim.durable_image(Path::new(path)).unwrap();
                assert_same(&durable[..reference.len()], reference, &format!("durable after sync, {ctx}"));
            }
        }
    }
    let st = cache.stats();
    assert!(st.dropbehind_freed_bytes > 0, "seed {seed}: drop-behind ran: {st:?}");
    drop((dev, dev_uncached, file, file_uncached));
    cache.close().unwrap();
    for (which, path) in ["/dev/simdisk", "/file"].iter().enumerate() {
        let durable = sim.durable_image(Path::new(path)).unwrap();
        assert_same(&durable[..refs[which].len()], &refs[which], &format!("seed {seed}: {path} after close"));
    }
}

#[test]
fn mixed_uncached_and_cached_io_never_changes_content() {
    let seeds: Vec<u64> = match std::env::var("WBCACHE_UNCACHED_SEED") {
        Ok(s) => vec![s.parse().expect("WBCACHE_UNCACHED_SEED is a number")],
        Err(_) => (0..4).collect(),
    };
    for seed in seeds {
        let result = std::panic::catch_unwind(|| mixed_seed(seed));
        if let Err(e) = result {
            eprintln!("FAILED: seed {seed} (rerun with WBCACHE_UNCACHED_SEED={seed})");
            std::panic::resume_unwind(e);
        }
    }
}

/// Uncached writes and reads on a raw block device, through both
/// backends: the kernel refuses `RWF_DONTCACHE` on a block device; the
/// cache does it. After the cache closed, plain reads of the device see
/// every byte written.
#[test]
fn uncached_io_on_a_loop_device() {
    let Some(dev) = LoopDevice::create_or_skip("uncached-loop", 64 << 20) else { return };
    for (round, io) in ["uring", "threads"].iter().enumerate() {
        let cache = Cache::new(Config::from_options(&format!("capacity=16M,dirty_limit=4M,io={io}")).unwrap()).unwrap();
        let f = cache.open(&dev.device, &OpenOptions::new().read(true).write(true).dontcache(true)).unwrap();
        assert!(f.is_block_device());
        let data = pattern(48 * MIB, 10 + round as u64);
        for (i, chunk) in data.chunks(MIB).enumerate() {
            f.write_at(chunk, (i * MIB) as u64).unwrap();
        }
        f.sync_data().unwrap();
        let mut back = vec![0u8; 48 * MIB];
        for off in (0..48 * MIB).step_by(MIB) {
            assert_eq!(f.read_at(&mut back[off..off + MIB], off as u64).unwrap(), MIB);
        }
        assert_same(&back, &data, &format!("{io}: uncached read back"));
        // The reaper frees the last reads' folios on its next tick.
        let dropped = wait_until(Duration::from_secs(10), || cached_blocks(&f, 0, 48 * MIB as u64) < 2048);
        let st = cache.stats();
        assert!(dropped, "{io}: cached block runs {:?}: {st:?}", cached_runs(&f, 48 * MIB as u64));
        assert!(st.dropbehind_freed_bytes >= 80 * MIB as u64, "{io}: what was written, then what was read: {st:?}");
        assert!(st.cached_bytes <= 16 * MIB as u64, "{io}: {st:?}");
        drop(f);
        cache.close().unwrap();
        use std::io::Read;
        let mut raw = vec![0u8; 48 * MIB];
        std::fs::File::open(&dev.device).unwrap().read_exact(&mut raw).unwrap();
        assert_same(&raw, &data, &format!("{io}: the device after close"));
    }
}

/// `File::residency`: what a write left (cached and dirty), what a sync
/// made clean, nothing past the end of the file, and a clear refusal of a
/// vector too short or a range that overflows.
#[test]
fn residency_reports_blocks_and_refuses_bad_input() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 6, direct_io: true, ..SimConfig::default() }));
    let options = "capacity=16M,folio_max=64K,expire_ms=600000";
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim).unwrap();
    let file = cache.open("/r", &OpenOptions::read_write_create()).unwrap();
    file.write_at(&pattern(10 * KIB, 7), 8 * KIB as u64).unwrap();
    let mut out = [0xffu8; 8];
    // Blocks 0..5 of the 18 KiB file: 0 and 1 untouched, 2..4 written.
    assert_eq!(file.residency(0, 64 * KIB as u64, &mut out).unwrap(), 5, "not past the end of the file");
    assert_eq!(out[..2], [0, 0], "never written, never read: not cached");
    for b in &out[2..5] {
        assert_eq!(b & RESIDENT_CACHED, RESIDENT_CACHED, "{out:?}");
        assert_eq!(b & wbcache::RESIDENT_DIRTY, wbcache::RESIDENT_DIRTY, "{out:?}");
    }
    file.sync_data().unwrap();
    assert_eq!(file.residency(9 * KIB as u64, 1, &mut out).unwrap(), 1, "the block holding the offset");
    assert_eq!(out[0], RESIDENT_CACHED, "clean after the sync, still cached");
    assert_eq!(file.residency(1 << 20, 4096, &mut out).unwrap(), 0, "past the end: nothing");
    let short = file.residency(0, 64 * KIB as u64, &mut out[..2]).unwrap_err();
    assert_eq!(short.kind(), std::io::ErrorKind::InvalidInput);
    assert!(short.to_string().contains("needs 5 bytes"), "{short}");
    let overflow = file.residency(u64::MAX - 1, 4096, &mut out).unwrap_err();
    assert_eq!(overflow.kind(), std::io::ErrorKind::InvalidInput, "{overflow}");
    drop(file);
    cache.close().unwrap();
}
