//! Regressions found in review: truncation racing reads, writes and fills,
//! and reads larger than the evictable memory. Through the sim backend with
//! seeded latency so the races are wide.

use crate::common;
use common::with_timeout;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions};

const K: u64 = 1024;

/// Truncate to 4 KiB while readers race it, then extend: the extension must
/// read as zeros, never as the pre-truncate bytes.
#[test]
fn truncated_bytes_never_reappear_after_extension() {
    for seed in 0..12 {
        let sim = Arc::new(SimIo::new(SimConfig { seed, latency_us_max: 20_000, ..SimConfig::default() }));
        let config = Config::with_capacity(64 * 1024 * K);
        {
            let cache = Cache::with_sim(config.clone(), sim.clone()).unwrap();
            let f = cache.open("/a", &OpenOptions::read_write_create()).unwrap();
            f.write_at(&vec![0xAAu8; 1024 * K as usize], 0).unwrap();
            f.sync_all().unwrap();
            cache.close().unwrap();
        }
        let cache = Cache::with_sim(config, sim.clone()).unwrap();
        let f = Arc::new(cache.open("/a", &OpenOptions::read_write_create()).unwrap());
        f.write_at(&[1u8; 4096], 0).unwrap();
        let mut threads = Vec::new();
        let fw = f.clone();
        threads.push(std::thread::spawn(move || drop(fw.sync_data())));
        for (delay_ms, at) in [(1u64, 512 * K), (3, 768 * K)] {
            let fr = f.clone();
            threads.push(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay_ms));
                let mut b = [0u8; 4096];
                let n = fr.read_at(&mut b, at).unwrap();
                assert!(b[..n].iter().all(|&x| x == 0xAA), "seed {seed}: a racing read returns old data or nothing");
            }));
        }
        let ft = f.clone();
        threads.push(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            ft.set_len(4096).unwrap();
        }));
        for t in threads {
            t.join().unwrap();
        }
        f.set_len(1024 * K).unwrap();
        let mut b = vec![0u8; 4096];
        f.read_at(&mut b, 768 * K).unwrap();
        assert!(b.iter().all(|&x| x == 0), "seed {seed}: pre-truncate bytes visible after truncate + extend");
        f.sync_all().unwrap();
        let image = sim.durable_image(Path::new("/a")).unwrap();
        assert!(image[4096..].iter().all(|&x| x == 0), "seed {seed}: stale bytes on the store");
    }
}

/// A truncate waiting for a fill must not hold the mapping lock the filler
/// needs for its next folio (memory is short, so the filler waits for it).
#[test]
fn truncate_during_a_memory_starved_fill_does_not_deadlock() {
    with_timeout(Duration::from_secs(30), || {
        let sim = Arc::new(SimIo::new(SimConfig { latency_us_max: 50_000, seed: 1, ..SimConfig::default() }));
        let mut c = Config::with_capacity(1024 * K);
        c.folio_max_bytes = 64 * K;
        c.io_max_bytes = 64 * K;
        c.dirty_limit_bytes = 1024 * K;
        c.dirty_background_bytes = 1020 * K;
        c.expire_ms = 100_000;
        let cache = Cache::with_sim(c, sim).unwrap();
        let a = Arc::new(cache.open("/a", &OpenOptions::read_write_create()).unwrap());
        a.set_len(256 * K).unwrap();
        a.sync_all().unwrap();
        let b = cache.open("/b", &OpenOptions::read_write_create()).unwrap();
        for i in 0..15 {
            b.write_at(&vec![7u8; 64 * K as usize], i * 64 * K).unwrap();
        }
        let reader = {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut out = vec![0u8; 128 * K as usize];
                a.read_at(&mut out, 0).unwrap();
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        let truncater = {
            let a = a.clone();
            std::thread::spawn(move || a.set_len(0).unwrap())
        };
        std::thread::sleep(Duration::from_millis(20));
        b.sync_all().unwrap();
        reader.join().unwrap();
        truncater.join().unwrap();
        assert_eq!(a.len().unwrap(), 0);
    });
}

/// One read larger than the whole cache completes (in window-sized fills)
/// instead of pinning every folio in placeholders and waiting for memory.
#[test]
fn a_read_larger_than_the_cache_completes_promptly() {
    with_timeout(Duration::from_secs(10), || {
        let sim = Arc::new(SimIo::new(SimConfig::default()));
        let mut c = Config::with_capacity(1024 * K);
        c.folio_max_bytes = 64 * K;
        c.io_max_bytes = 64 * K;
        {
            let cache = Cache::with_sim(c.clone(), sim.clone()).unwrap();
            let f = cache.open("/a", &OpenOptions::read_write_create()).unwrap();
            f.write_at(&vec![5u8; 2048 * K as usize], 0).unwrap();
            f.sync_all().unwrap();
            cache.close().unwrap();
        }
        let cache = Cache::with_sim(c, sim).unwrap();
        let f = cache.open("/a", &OpenOptions::new().read(true)).unwrap();
        let mut out = vec![0u8; 2048 * K as usize];
        assert_eq!(f.read_at(&mut out, 0).unwrap(), out.len());
        assert!(out.iter().all(|&b| b == 5));
    });
}

/// A write that lands after a truncate published the new size, and is
/// written back while the truncate still waits for older writeback, must
/// survive the truncate's cut of the store: its fsync said it is durable.
#[test]
fn data_written_back_during_a_truncate_survives_the_cut() {
    for seed in 0..8 {
        let sim = Arc::new(SimIo::new(SimConfig { seed, latency_us_max: 30_000, ..SimConfig::default() }));
        let cache = Cache::with_sim(Config::with_capacity(64 * 1024 * K), sim.clone()).unwrap();
        let f = Arc::new(cache.open("/t", &OpenOptions::read_write_create()).unwrap());
        f.write_at(&vec![0xAAu8; 2048 * K as usize], 0).unwrap();
        f.sync_all().unwrap();
        // Writeback in flight (slow) when the truncate starts: the truncate
        // waits for it with the new size already published.
        f.write_at(&vec![0xBBu8; 256 * K as usize], 0).unwrap();
        let fs = f.clone();
        let slow_sync = std::thread::spawn(move || fs.sync_data().unwrap());
        std::thread::sleep(Duration::from_millis(2));
        let ft = f.clone();
        let truncate = std::thread::spawn(move || ft.set_len(1024 * K).unwrap());
        // Once the new size shows, write past it and make that durable
        // (through a handle of its own: a handle's syncs run one at a time).
        let w = cache.open("/t", &OpenOptions::read_write_create()).unwrap();
        while w.len().unwrap() != 1024 * K {
            std::thread::yield_now();
        }
        let at = 1024 * K + 8 * K;
        w.write_at(&[0xCCu8; 4096], at).unwrap();
        w.sync_data().unwrap();
        truncate.join().unwrap();
        slow_sync.join().unwrap();
        let image = sim.durable_image(Path::new("/t")).unwrap();
        assert_eq!(image.len() as u64, at + 4096, "seed {seed}: durable length");
        assert!(image[at as usize..].iter().all(|&x| x == 0xCC), "seed {seed}: the fsynced block was cut off");
        assert!(image[1024 * K as usize..at as usize].iter().all(|&x| x == 0), "seed {seed}: the gap reads as zeros");
        drop((f, w));
        cache.close().unwrap();
    }
}

/// Truncate while an older version of the cut blocks is being written; a
/// writer re-extends the file and a sync tries to write its block before
/// the store is cut; a reader reads the hole in between. The hole must
/// read as zeros (in the cache and in the durable image), and the writer's
/// block must survive the cut. Once, writeback of the extension ran before
/// the cut: the reader filled the hole from the store's old bytes, and the
/// truncate then marked that stale copy dirty and wrote it back.
#[test]
fn a_sync_racing_a_truncate_never_brings_back_cut_bytes() {
    with_timeout(Duration::from_secs(120), || {
        let mut bad = Vec::new();
        for seed in 0..16u64 {
            let sim = Arc::new(SimIo::new(SimConfig { seed, latency_us_max: 30_000, ..SimConfig::default() }));
            let cache = Cache::with_sim(
                Config::from_options("capacity=16M,dirty_limit=4M,dirty_background=2M,folio_max=4K,expire_ms=60000")
                    .unwrap(),
                sim.clone(),
            )
            .unwrap();
            let f = Arc::new(cache.open("/a", &OpenOptions::read_write_create()).unwrap());
            f.write_at(&vec![0xAA; 16 * K as usize], 0).unwrap();
            let first_sync = {
                let f = f.clone();
                std::thread::spawn(move || {
                    let _ = f.sync_data();
                })
            };
            std::thread::sleep(Duration::from_millis(2));
            let truncate = {
                let f = f.clone();
                std::thread::spawn(move || f.set_len(4 * K).unwrap())
            };
            while f.len().unwrap() != 4 * K {
                std::thread::yield_now();
            }
            f.write_at(&vec![0xCC; 4 * K as usize], 12 * K).unwrap();
            let second_sync = {
                let f = f.clone();
                std::thread::spawn(move || {
                    let _ = f.sync_data();
                })
            };
            // Read the hole [8K, 12K) once the old block 2 is on the store.
            let mut hole = vec![0u8; 4 * K as usize];
            while !truncate.is_finished() {
                let written = sim.written_image(Path::new("/a")).unwrap();
                if written.len() >= 12 * K as usize && written[8 * K as usize] == 0xAA {
                    let _ = f.read_at(&mut hole, 8 * K);
                    break;
                }
            }
            truncate.join().unwrap();
            first_sync.join().unwrap();
            second_sync.join().unwrap();
            let n = f.read_at(&mut hole, 8 * K).unwrap();
            let cached_stale = hole[..n].iter().any(|&x| x != 0);
            f.sync_all().unwrap();
            let image = sim.durable_image(Path::new("/a")).unwrap();
            let durable_stale = image[4 * K as usize..12 * K as usize].iter().any(|&x| x != 0);
            let extension_lost = image.len() != 16 * K as usize || image[12 * K as usize..].iter().any(|&x| x != 0xCC);
            if cached_stale || durable_stale || extension_lost {
                bad.push((seed, cached_stale, durable_stale, extension_lost));
            }
            drop(f);
            cache.close().unwrap();
        }
        assert!(bad.is_empty(), "(seed, stale hole read, stale hole durable, extension lost): {bad:?}");
    });
}
