//! The process crash, simulated: a seeded workload (writes of every size,
//! uncached writes, `set_len` both ways, an occasional sync, on a few
//! files, with the flusher writing back and eviction running beside it
//! under small capacities) is cut at a seeded point by the death of the
//! process (`Cache::simulate_process_crash`): the stores die, and the
//! guardian's replay writes what the crash table records into the
//! simulated disk. Afterwards each file's written image (what the kernel
//! would hold) must equal a simple model of every acknowledged operation,
//! byte for byte: nothing acknowledged is lost, nothing stale returns.
//!
//! The same workloads with `guardian=off` must lose data in some seed (the
//! check can fail). `WBCACHE_PROCESS_CRASH_SEED=n` runs seed `n` alone; a
//! failure prints the seed.

use crate::common;
use common::Rng;

use std::path::PathBuf;
use std::sync::Arc;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions, WriteFlags};

const SEEDS: u64 = 60;

/// One seed's run: the files' model after the acknowledged operations,
/// and what the simulated disk holds after the process crash.
struct Outcome {
    model: Vec<Vec<u8>>,
    images: Vec<Vec<u8>>,
    ops: usize,
    replayed_bytes: u64,
}

fn options(rng: &mut Rng, guardian: bool) -> String {
    let capacity = rng.pick(&["4M", "8M", "32M"]);
    let folio_max = rng.pick(&["16K", "64K", "256K", "1M"]);
    let expire_ms = rng.pick(&[1, 5, 50, 3_600_000]);
    format!(
        "capacity={capacity},dirty_limit=2M,dirty_background=512K,folio_max={folio_max},expire_ms={expire_ms},\
         guardian={}",
        if guardian { "on" } else { "off" }
    )
}

fn run(seed: u64, guardian: bool) -> Outcome {
    let mut rng = Rng::new(seed);
    let sim = Arc::new(SimIo::new(SimConfig { seed, latency_us_max: rng.pick(&[0, 50, 300]), ..SimConfig::default() }));
    let options = options(&mut rng, guardian);
    let cache = Cache::with_sim(Config::from_options(&options).unwrap(), sim.clone()).unwrap();
    let nfiles = rng.between(1usize, 3);
    let paths: Vec<PathBuf> = (0..nfiles).map(|i| PathBuf::from(format!("/f{i}"))).collect();
    let files: Vec<_> = paths.iter().map(|p| cache.open(p, &OpenOptions::read_write_create()).unwrap()).collect();
    let mut model = vec![Vec::new(); nfiles];
    let ops = rng.between(1usize, 400);
    for op in 0..ops {
        let f = rng.below(nfiles);
        match rng.below(20u32) {
            0 => {
                let len = rng.below(3usize << 20);
                files[f].set_len(len as u64).unwrap();
                model[f].resize(len, 0);
            }
            1 => files[f].sync_data().unwrap(),
            _ => {
                let len = if rng.one_in(4) { rng.between(1usize, 1 << 20) } else { rng.between(1usize, 20_000) };
                let offset = rng.below(2usize << 20);
                let data = common::pattern(len, seed ^ (op as u64) << 8);
                let flags = if rng.one_in(5) { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                assert_eq!(files[f].write_at_with(&data, offset as u64, flags).unwrap(), len);
                if model[f].len() < offset + len {
                    model[f].resize(offset + len, 0);
                }
                model[f][offset..offset + len].copy_from_slice(&data);
            }
        }
    }
    let (replayed_bytes, failures) = cache.simulate_process_crash(&sim);
    assert!(failures.is_empty(), "seed {seed}: the replay failed: {failures:?}");
    let images = paths.iter().map(|p| sim.written_image(p).unwrap_or_default()).collect();
    drop(files);
    drop(cache);
    Outcome { model, images, ops, replayed_bytes }
}

fn seeds() -> Vec<u64> {
    match std::env::var("WBCACHE_PROCESS_CRASH_SEED") {
        Ok(seed) => vec![seed.parse().expect("WBCACHE_PROCESS_CRASH_SEED is a number")],
        Err(_) => (0..SEEDS).collect(),
    }
}

#[test]
fn a_process_crash_loses_nothing_acknowledged() {
    let (mut ops, mut replayed) = (0, 0);
    for seed in seeds() {
        let out = run(seed, true);
        for (i, (image, want)) in out.images.iter().zip(&out.model).enumerate() {
            if image != want {
                panic!(
                    "WBCACHE_PROCESS_CRASH_SEED={seed}: file {i} after the process crash differs from every acknowledged \
                     write ({} ops): {}",
                    out.ops,
                    common::first_diff(image, want)
                );
            }
        }
        ops += out.ops;
        replayed += out.replayed_bytes;
    }
    println!("process crashes: {} seeds, {ops} operations, {replayed} bytes replayed by the guardian", seeds().len());
    assert!(replayed > 0, "some crash left dirty data for the guardian to write");
}

#[test]
fn without_a_guardian_a_process_crash_loses_writes() {
    if std::env::var("WBCACHE_PROCESS_CRASH_SEED").is_ok() {
        return;
    }
    let lost = seeds().into_iter().filter(|&seed| {
        let out = run(seed, false);
        out.images != out.model
    });
    assert!(lost.count() > 0, "guardian=off loses acknowledged writes in some seed (the check can fail)");
}
