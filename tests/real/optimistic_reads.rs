//! Cached reads take no lock: they copy from a folio and check its change
//! sequence afterwards. These races pit such readers against everything
//! that changes or frees a folio they may be copying from (writers of the
//! same folio, eviction, truncation, hole punching, drop-behind), through
//! the sim backend and on real files. Every block written carries its
//! generation and its number in every 8-byte word, so a read that mixed
//! two states of a block (torn) or read a block's bytes from elsewhere
//! (memory reused under it) is caught word by word.

use crate::common;
use common::programs::TempDir;
use common::with_timeout;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions, WriteFlags};

const BLOCK: usize = 4096;
const KIB: usize = 1024;

/// Where a race runs: the sim backend or real files under a temp dir.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sim,
    Real,
}

/// A cache on `backend` and the path of its file (the temp dir, if any,
/// lives as long as the returned guard).
fn cache_on(backend: Backend, options: &str, seed: u64) -> (Cache, String, Option<TempDir>) {
    let config = Config::from_options(options).unwrap();
    match backend {
        Backend::Sim => {
            let sim = Arc::new(SimIo::new(SimConfig { seed, latency_us_max: 30, ..SimConfig::default() }));
            (Cache::with_sim(config, sim).unwrap(), "/race".to_string(), None)
        }
        Backend::Real => {
            let dir = TempDir::new("optimistic");
            let path = dir.0.join("race").to_string_lossy().into_owned();
            (Cache::new(config).unwrap(), path, Some(dir))
        }
    }
}

/// Block `block` as generation `generation` writes it.
fn block_image(generation: u32, block: u64) -> Vec<u8> {
    let word = (u64::from(generation) << 32 | (block & 0xFFFF_FFFF)).to_le_bytes();
    word.iter().copied().cycle().take(BLOCK).collect()
}

/// `blocks` blocks from `first`, as generation `generation` writes them.
fn image(generation: u32, first: u64, blocks: u64) -> Vec<u8> {
    (first..first + blocks).flat_map(|b| block_image(generation, b)).collect()
}

/// Checks that the `got` bytes read at block `first` hold, block by
/// block, one whole state each: every word of a block is the same
/// generation of that block, or (where `zeros_allowed`: truncation,
/// punching) every word is zero. Returns the generations seen.
fn check_blocks(got: &[u8], first: u64, zeros_allowed: bool, what: &str) -> Vec<u32> {
    let mut generations = Vec::new();
    for (i, block_bytes) in got.chunks(BLOCK).enumerate() {
        let block = first + i as u64;
        let words: Vec<u64> = block_bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
        let Some(&head) = words.first() else { continue };
        assert!(words.iter().all(|&w| w == head), "{what}: block {block} is torn: words {:x?}", distinct(&words));
        if head == 0 {
            assert!(zeros_allowed, "{what}: block {block} reads as zeros");
            continue;
        }
        assert_eq!(head & 0xFFFF_FFFF, block & 0xFFFF_FFFF, "{what}: block {block} holds another block's bytes");
        generations.push((head >> 32) as u32);
    }
    generations
}

fn distinct(words: &[u64]) -> Vec<u64> {
    let mut seen: Vec<u64> = words.to_vec();
    seen.sort_unstable();
    seen.dedup();
    seen
}

/// A small xorshift generator: each thread its own sequence.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs `readers` reader threads (each given its number) and `changer`
/// until the changer returns, then stops the readers; returns the reads
/// they made.
fn race(readers: usize, reader: impl Fn(usize, &AtomicBool) -> u64 + Sync, changer: impl FnOnce() + Send) -> u64 {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (reader, stop) = (&reader, &stop);
        let threads: Vec<_> = (0..readers).map(|r| s.spawn(move || reader(r, stop))).collect();
        changer();
        stop.store(true, Ordering::Release);
        threads.into_iter().map(|t| t.join().expect("a reader panicked")).sum()
    })
}

/// Writers rewrite 16 KiB inside one 64 KiB folio, a new generation each
/// time, while readers read the same 16 KiB: every read is of one write,
/// whole (a write within one folio is atomic to readers). Some copies
/// must have been discarded (`hit_retries`): the race really ran.
fn readers_see_whole_writes(backend: Backend) {
    let (cache, path, _dir) = cache_on(backend, "capacity=16M,folio_max=64K,expire_ms=600000", 1);
    let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    const SPAN_BLOCKS: u64 = 4;
    file.write_at(&image(1, 0, 16), 0).unwrap();
    let newest = AtomicU64::new(1);
    let reads = race(
        2,
        |_, stop| {
            let mut buf = vec![0u8; SPAN_BLOCKS as usize * BLOCK];
            let mut reads = 0;
            while !stop.load(Ordering::Acquire) {
                let floor = newest.load(Ordering::Acquire) as u32;
                assert_eq!(file.read_at(&mut buf, 0).unwrap(), buf.len());
                let generations = check_blocks(&buf, 0, false, "a read racing writes");
                assert!(generations.windows(2).all(|g| g[0] == g[1]), "one read, one write: {generations:?}");
                assert!(generations[0] >= floor, "a read went back in time: {} < {floor}", generations[0]);
                reads += 1;
            }
            reads
        },
        || {
            let started = Instant::now();
            for generation in 2u32.. {
                file.write_at(&image(generation, 0, SPAN_BLOCKS), 0).unwrap();
                newest.store(u64::from(generation), Ordering::Release);
                let raced = cache.stats().hit_retries > 0 && generation > 2000;
                if raced || started.elapsed() > Duration::from_secs(20) {
                    break;
                }
            }
        },
    );
    let st = cache.stats();
    assert!(st.hit_retries > 0, "no read ever raced a write ({reads} reads): the test proved nothing");
    assert!(st.hits >= reads, "the reads were cache hits: {} of {reads}", st.hits);
    drop(file);
    cache.close().unwrap();
}

#[test]
fn readers_see_whole_writes_sim() {
    with_timeout(Duration::from_secs(120), || readers_see_whole_writes(Backend::Sim));
}

#[test]
fn readers_see_whole_writes_real() {
    with_timeout(Duration::from_secs(120), || readers_see_whole_writes(Backend::Real));
}

/// Random 4 KiB readers over a file four times the cache: every miss
/// evicts folios other readers may be copying from at that moment.
fn readers_survive_eviction(backend: Backend) {
    let (cache, path, _dir) = cache_on(backend, "capacity=2M,folio_max=16K,expire_ms=600000", 2);
    let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    const BLOCKS: u64 = 2048; // 8 MiB
    file.write_at(&image(1, 0, BLOCKS), 0).unwrap();
    file.sync_all().unwrap();
    let reads = race(
        2,
        |r, stop| {
            let mut rng = Rng(0x9E37_79B9 + r as u64);
            let mut buf = vec![0u8; BLOCK];
            let mut reads = 0;
            // A hot quarter (hits) and the rest (misses that evict).
            while !stop.load(Ordering::Acquire) {
                let block = if rng.below(4) == 0 { rng.below(BLOCKS) } else { rng.below(BLOCKS / 8) };
                assert_eq!(file.read_at(&mut buf, block * BLOCK as u64).unwrap(), BLOCK);
                assert_eq!(check_blocks(&buf, block, false, "a read racing eviction"), [1]);
                reads += 1;
            }
            reads
        },
        || std::thread::sleep(Duration::from_millis(1500)),
    );
    let st = cache.stats();
    assert!(st.evictions > 100 && st.hits > 100, "both eviction and hits ran: {reads} reads, {st:?}");
    drop(file);
    cache.close().unwrap();
}

#[test]
fn readers_survive_eviction_sim() {
    with_timeout(Duration::from_secs(120), || readers_survive_eviction(Backend::Sim));
}

#[test]
fn readers_survive_eviction_real() {
    with_timeout(Duration::from_secs(120), || readers_survive_eviction(Backend::Real));
}

/// Readers of a file that is truncated to nothing and written again, a
/// new generation each round: a read returns whole blocks of one
/// generation (or fewer bytes, at the size of the moment), never a block
/// that mixes two states or another block's bytes.
fn readers_survive_truncation(backend: Backend) {
    let (cache, path, _dir) = cache_on(backend, "capacity=16M,folio_max=64K,expire_ms=600000", 3);
    let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    const BLOCKS: u64 = 256; // 1 MiB: sixteen folios
    file.write_at(&image(1, 0, BLOCKS), 0).unwrap();
    race(
        2,
        |r, stop| {
            let mut rng = Rng(0x51ED_270B + r as u64);
            let mut buf = vec![0u8; 2 * BLOCK];
            let mut reads = 0;
            while !stop.load(Ordering::Acquire) {
                let block = rng.below(BLOCKS - 1);
                let n = file.read_at(&mut buf, block * BLOCK as u64).unwrap();
                check_blocks(&buf[..n - n % BLOCK], block, true, "a read racing truncation");
                reads += 1;
            }
            reads
        },
        || {
            for generation in 2..200u32 {
                file.set_len(0).unwrap();
                file.write_at(&image(generation, 0, BLOCKS), 0).unwrap();
            }
        },
    );
    drop(file);
    cache.close().unwrap();
}

#[test]
fn readers_survive_truncation_sim() {
    with_timeout(Duration::from_secs(120), || readers_survive_truncation(Backend::Sim));
}

#[test]
fn readers_survive_truncation_real() {
    with_timeout(Duration::from_secs(120), || readers_survive_truncation(Backend::Real));
}

/// Readers of blocks that are punched out (zeros) and written again in
/// turn: every block read is zeros or one generation of it, whole.
fn readers_survive_punching(backend: Backend) {
    let (cache, path, _dir) = cache_on(backend, "capacity=16M,folio_max=64K,expire_ms=600000", 4);
    let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    const BLOCKS: u64 = 64;
    file.write_at(&image(1, 0, BLOCKS), 0).unwrap();
    race(
        2,
        |r, stop| {
            let mut rng = Rng(0xA24B_AED4 + r as u64);
            let mut buf = vec![0u8; BLOCK];
            let mut reads = 0;
            while !stop.load(Ordering::Acquire) {
                let block = rng.below(BLOCKS);
                assert_eq!(file.read_at(&mut buf, block * BLOCK as u64).unwrap(), BLOCK);
                check_blocks(&buf, block, true, "a read racing hole punching");
                reads += 1;
            }
            reads
        },
        || {
            let mut rng = Rng(77);
            for generation in 2..3000u32 {
                // A whole folio or a part of one.
                let (first, blocks) =
                    if generation % 2 == 0 { (rng.below(4) * 16, 16) } else { (rng.below(BLOCKS), 1) };
                let range = first * BLOCK as u64..(first + blocks) * BLOCK as u64;
                file.punch_hole(range.clone()).unwrap();
                file.write_at(&image(generation, first, blocks), range.start).unwrap();
            }
        },
    );
    drop(file);
    cache.close().unwrap();
}

#[test]
fn readers_survive_punching_sim() {
    with_timeout(Duration::from_secs(120), || readers_survive_punching(Backend::Sim));
}

#[test]
fn readers_survive_punching_real() {
    with_timeout(Duration::from_secs(120), || readers_survive_punching(Backend::Real));
}

/// Cached readers of folios that uncached reads and writes of another
/// handle keep marking for drop-behind, and the reaper keeps freeing: a
/// read returns one generation of each block, whole.
fn readers_survive_dropbehind(backend: Backend) {
    let (cache, path, _dir) = cache_on(backend, "capacity=16M,folio_max=16K,expire_ms=600000", 5);
    let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    let uncached = cache.open(&path, &OpenOptions::read_write_create().dontcache(true)).unwrap();
    const BLOCKS: u64 = 256;
    file.write_at(&image(1, 0, BLOCKS), 0).unwrap();
    file.sync_all().unwrap();
    let freed_before = cache.stats().dropbehind_freed_bytes;
    race(
        2,
        |r, stop| {
            let mut rng = Rng(0x2545_F491 + r as u64);
            let mut buf = vec![0u8; 4 * BLOCK];
            let mut reads = 0;
            while !stop.load(Ordering::Acquire) {
                let block = rng.below(BLOCKS / 4) * 4;
                assert_eq!(file.read_at(&mut buf, block * BLOCK as u64).unwrap(), buf.len());
                check_blocks(&buf, block, false, "a read racing drop-behind");
                reads += 1;
            }
            reads
        },
        || {
            let mut rng = Rng(99);
            let mut scratch = vec![0u8; 16 * KIB];
            for generation in 2..1500u32 {
                let block = rng.below(BLOCKS / 4) * 4;
                if generation % 2 == 0 {
                    uncached
                        .write_at_with(&image(generation, block, 4), block * BLOCK as u64, WriteFlags::DONTCACHE)
                        .unwrap();
                } else {
                    uncached.read_at(&mut scratch, block * BLOCK as u64).unwrap();
                    check_blocks(&scratch, block, false, "an uncached read");
                }
                if generation % 100 == 0 {
                    uncached.sync_data().unwrap();
                }
            }
            uncached.sync_data().unwrap();
        },
    );
    // The reaper frees behind the writer on a thread of its own: on a
    // loaded machine it may not have run yet when the race ends.
    common::wait_until(Duration::from_secs(10), || cache.stats().dropbehind_freed_bytes > freed_before);
    let freed = cache.stats().dropbehind_freed_bytes - freed_before;
    assert!(freed > 0, "drop-behind freed nothing within 10 s of the race: the race did not run");
    drop((file, uncached));
    cache.close().unwrap();
}

#[test]
fn readers_survive_dropbehind_sim() {
    with_timeout(Duration::from_secs(120), || readers_survive_dropbehind(Backend::Sim));
}

#[test]
fn readers_survive_dropbehind_real() {
    with_timeout(Duration::from_secs(120), || readers_survive_dropbehind(Backend::Real));
}

/// The file's content after every race above is what was written last:
/// checked once here for the write race, end to end through a new cache.
#[test]
fn the_last_write_is_what_stays() {
    with_timeout(Duration::from_secs(60), || {
        let (cache, path, _dir) = cache_on(Backend::Real, "capacity=16M,folio_max=64K", 6);
        let file = Arc::new(cache.open(&path, &OpenOptions::read_write_create()).unwrap());
        file.write_at(&image(1, 0, 16), 0).unwrap();
        let writer = {
            let file = file.clone();
            std::thread::spawn(move || {
                for generation in 2..500u32 {
                    file.write_at(&image(generation, 0, 16), 0).unwrap();
                }
            })
        };
        let mut buf = vec![0u8; 16 * BLOCK];
        for _ in 0..500 {
            file.read_at(&mut buf, 0).unwrap();
            check_blocks(&buf, 0, false, "a read racing writes");
        }
        writer.join().unwrap();
        file.sync_all().unwrap();
        let reopened = cache.open(&path, &OpenOptions::new().read(true)).unwrap();
        reopened.read_at(&mut buf, 0).unwrap();
        assert_eq!(check_blocks(&buf, 0, false, "after the race"), vec![499; 16]);
        drop((file, reopened));
        cache.close().unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(check_blocks(&on_disk, 0, false, "on disk"), vec![499; 16]);
    });
}
