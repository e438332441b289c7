//! Several writeback workers per device, through the `sim` backend, which
//! counts every write that begins while an overlapping write to the same
//! file is in flight (`SimStats::overlapping_writes`; its latency keeps
//! writes in flight long enough to meet):
//! - one file spanning many regions is written back by every worker of
//!   `region` routing, each only in its own regions, never two versions of
//!   a block at once, and the bytes that reach the store are the file's;
//! - `rotor` routing spreads files over its workers, one worker per file;
//! - an fsync of a file whose writeback the workers hold in flight waits
//!   for all of them, then syncs the store;
//! - with four workers, every byte fsynced before a crash survives it.

use crate::common;
use common::pattern;
use common::{assert_same, wait_until, Rng};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, File, OpenOptions, Stats};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn sim(latency_us_max: u32, seed: u64) -> Arc<SimIo> {
    Arc::new(SimIo::new(SimConfig { seed, latency_us_max, direct_io: true, ..SimConfig::default() }))
}

fn cache(sim: &Arc<SimIo>, options: &str) -> Cache {
    let base = "capacity=64M,dirty_limit=32M,folio_max=64K,io_max=64K,io_depth=8,expire_ms=600000";
    Cache::with_sim(Config::from_options(&format!("{base},{options}")).unwrap(), sim.clone()).unwrap()
}

fn open(cache: &Cache, path: &str) -> File {
    cache.open(path, &OpenOptions::read_write_create()).unwrap()
}

/// Writes `data` in 4 KiB pieces in a random order (every block once).
fn write_scattered(file: &File, data: &[u8], seed: u64) {
    let mut blocks: Vec<usize> = (0..data.len() / (4 * KIB)).collect();
    let mut rng = Rng::new(seed);
    for i in (1..blocks.len()).rev() {
        blocks.swap(i, rng.below(i + 1));
    }
    for b in blocks {
        let off = b * 4 * KIB;
        file.write_at(&data[off..off + 4 * KIB], off as u64).unwrap();
    }
}

fn worker_bytes(st: &Stats) -> Vec<u64> {
    st.writeback_workers.iter().map(|w| w.written_bytes).collect()
}

/// Eight 256 KiB regions dealt to four workers: background writeback of
/// one 2 MiB file goes through all four, each writing what its regions
/// hold (two regions' worth), with no write overlapping another in
/// flight, and the store ends up holding the file.
#[test]
fn one_file_spanning_regions_is_written_by_every_worker() {
    let sim = sim(300, 1);
    // Background writeback from the first block on, no periodic pass.
    let c = cache(&sim, "dirty_background=0,writeback_routing=region,writeback_workers=4,region_size=256K");
    let f = open(&c, "/spanning");
    let data = pattern(2 * MIB, 7);
    write_scattered(&f, &data, 3);
    assert!(
        wait_until(Duration::from_secs(20), || c.stats().dirty_bytes == 0 && c.stats().writeback_bytes == 0),
        "background writeback cleaned the file: {:?}",
        c.stats()
    );
    let st = c.stats();
    assert_eq!(st.writeback_workers.len(), 4, "{st:?}");
    let bytes = worker_bytes(&st);
    // Bridges may rewrite a clean block next to a dirty one: a worker
    // writes at least its regions' dirty bytes, a little more at most.
    for (w, &b) in bytes.iter().enumerate() {
        assert!(b >= (512 * KIB) as u64, "worker {w} wrote its two regions: {bytes:?}");
        assert!(st.writeback_workers[w].ios > 0 && st.writeback_workers[w].passes > 0, "{st:?}");
    }
    assert!(st.writeback_workers.iter().any(|w| w.busy_us > 0), "busy time is counted: {st:?}");
    assert_eq!(sim.stats().overlapping_writes, 0, "no two writes of one block in flight");
    f.sync_all().unwrap();
    assert_same(&sim.durable_image(Path::new("/spanning")).unwrap(), &data, "the store after fsync");
    drop(f);
    c.close().unwrap();
}

/// Rotor routing binds each file to one worker, round-robin: four files,
/// two workers, two files each, and every worker wrote two files' bytes.
#[test]
fn rotor_spreads_files_over_workers() {
    let sim = sim(50, 2);
    let c = cache(&sim, "dirty_background=0,writeback_routing=rotor,writeback_workers=2");
    let files: Vec<(File, Vec<u8>)> =
        (0..4).map(|i| (open(&c, &format!("/rotor{i}")), pattern(256 * KIB, 20 + i as u64))).collect();
    for (i, (f, data)) in files.iter().enumerate() {
        write_scattered(f, data, i as u64);
    }
    assert!(
        wait_until(Duration::from_secs(20), || c.stats().dirty_bytes == 0 && c.stats().writeback_bytes == 0),
        "background writeback cleaned the files"
    );
    let bytes = worker_bytes(&c.stats());
    assert_eq!(bytes.len(), 2);
    for (w, &b) in bytes.iter().enumerate() {
        assert!(b >= (512 * KIB) as u64, "worker {w} wrote its two files: {bytes:?}");
    }
    assert_eq!(sim.stats().overlapping_writes, 0);
    for (i, (f, data)) in files.iter().enumerate() {
        f.sync_data().unwrap();
        assert_same(&sim.durable_image(Path::new(&format!("/rotor{i}"))).unwrap(), data, "after fsync");
    }
    drop(files);
    c.close().unwrap();
}

/// While every worker has writes of one file held in flight (the sim's
/// write gate stands for a slow device), an fsync of that file does not
/// return; released, it returns once all of them completed, and the store
/// holds the whole file.
#[test]
fn fsync_waits_for_every_worker() {
    let sim = sim(0, 3);
    let path = Path::new("/held");
    let c = cache(&sim, "dirty_background=0,writeback_routing=region,writeback_workers=4,region_size=256K");
    let f = open(&c, "/held");
    sim.hold_writes(path);
    // A failing assertion must not leave the close waiting at the gate.
    struct ReleaseOnDrop<'a>(&'a SimIo, &'a Path);
    impl Drop for ReleaseOnDrop<'_> {
        fn drop(&mut self) {
            self.0.release_writes(self.1);
        }
    }
    let _release = ReleaseOnDrop(&sim, path);
    let data = pattern(2 * MIB, 9);
    write_scattered(&f, &data, 4);
    // Every worker has a region of the file, and background writeback
    // starts at once: each gets writes to the gate.
    assert!(
        wait_until(Duration::from_secs(20), || sim.writes_held(path) >= 4),
        "the workers' writes reach the gate (held: {})",
        sim.writes_held(path)
    );
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        let f = &f;
        scope.spawn(move || {
            let _ = tx.send(f.sync_all());
        });
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "fsync returned with writes held in flight");
        assert!(sim.durable_image(path).is_none_or(|d| d != data), "nothing was synced yet");
        sim.release_writes(path);
        let result = rx.recv_timeout(Duration::from_secs(20)).expect("fsync returns once the writes complete");
        result.unwrap();
    });
    assert_same(&sim.durable_image(path).unwrap(), &data, "the store after fsync");
    let st = c.stats();
    assert!(worker_bytes(&st).iter().filter(|&&b| b > 0).count() >= 2, "several workers wrote: {st:?}");
    assert_eq!(sim.stats().overlapping_writes, 0);
    drop(f);
    c.close().unwrap();
}

/// Four workers (rotor and region), files written at random and some
/// fsynced, then a crash: every fsynced file is on the store as it was
/// synced, whatever the workers had in flight for the others.
#[test]
fn fsynced_bytes_survive_a_crash_with_four_workers() {
    for (round, routing) in
        ["writeback_routing=rotor,writeback_workers=4", "writeback_routing=region,writeback_workers=4,region_size=128K"]
            .iter()
            .cycle()
            .take(8)
            .enumerate()
    {
        let seed = 100 + round as u64;
        let sim = sim(100, seed);
        let c = cache(&sim, &format!("dirty_background=256K,{routing}"));
        let mut rng = Rng::new(seed);
        let mut synced: Vec<(String, Vec<u8>)> = Vec::new();
        for i in 0..6 {
            let path = format!("/crash{i}");
            let f = open(&c, &path);
            let data = pattern((1 + rng.below(4)) * 256 * KIB, seed * 10 + i);
            write_scattered(&f, &data, seed + i);
            if rng.below(2) == 0 {
                f.sync_data().unwrap();
                synced.push((path, data));
            }
        }
        sim.crash(seed);
        for (path, data) in &synced {
            let durable = sim.durable_image(Path::new(path)).unwrap();
            assert_same(&durable, data, &format!("{path} after a crash ({routing}, seed {seed})"));
        }
        assert_eq!(sim.stats().overlapping_writes, 0, "{routing}, seed {seed}");
        drop(c);
    }
}
