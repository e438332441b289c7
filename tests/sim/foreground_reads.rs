//! Reads first, through the `sim` backend: while read misses keep coming,
//! periodic writeback leaves data older than `expire_ms` dirty (up to
//! `expire_busy_ms`) and writes it once the reads pause; and a large fsync
//! builds writes of 128 KiB and sends them in batches of 1 MiB rather than
//! 1 MiB writes all at once, so a read that reaches the device meanwhile
//! waits behind little.

use crate::common;
use common::wait_until;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, DeviceClass, File, OpenOptions};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// The file the reader misses in: 64 MiB long, only its last block written.
const READ_FILE: &str = "/read";
const READ_FILE_BYTES: u64 = 64 << 20;

fn cache(sim: &Arc<SimIo>, options: &str) -> Cache {
    Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap()
}

/// The read file, synced: every block but its last is on the store only
/// (a hole), so reading it misses.
fn make_read_file(cache: &Cache) -> File {
    let file = cache.open(READ_FILE, &OpenOptions::read_write_create()).unwrap();
    file.write_at(&[1u8; 4096], READ_FILE_BYTES - 4096).unwrap();
    file.sync_data().unwrap();
    file
}

/// A thread that reads a 4 KiB block of `file` it has not read before
/// every millisecond (each a miss) until `stop` is set, keeping the longest
/// gap between two reads' ends in `gap_us_max`; returns how many it read.
fn start_reader(file: File, stop: Arc<AtomicBool>, gap_us_max: Arc<AtomicU64>) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let blocks = READ_FILE_BYTES / 4096 - 1;
        let mut buf = vec![0u8; 4096];
        let mut n = 0u64;
        let mut last = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            // A stride coprime with the block count visits every block
            // once before any repeats, and never two neighbours in a row
            // (no readahead).
            let block = (n * 7919) % blocks;
            assert_eq!(file.read_at(&mut buf, block * 4096).unwrap(), 4096);
            gap_us_max.fetch_max(last.elapsed().as_micros() as u64, Ordering::Relaxed);
            last = std::time::Instant::now();
            n += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        n
    })
}

/// Dirty data older than `expire_ms` stays dirty while reads miss, and is
/// written once they stop; with `expire_busy_ms` at `expire_ms` it is
/// written while they go on.
#[test]
fn periodic_writeback_waits_while_reads_miss() {
    for (busy_option, waits) in [("", true), (",expire_busy_ms=50", false)] {
        let what = format!("expire_ms=50{busy_option}");
        let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
        let options = format!("capacity=64M,dirty_limit=32M,dirty_background=30M,expire_ms=50{busy_option}");
        let cache = cache(&sim, &options);
        let reader = make_read_file(&cache);
        let stop = Arc::new(AtomicBool::new(false));
        let gap_us_max = Arc::new(AtomicU64::new(0));
        let reading = start_reader(reader, stop.clone(), gap_us_max.clone());
        // The reader's first miss comes before the write ages.
        assert!(wait_until(Duration::from_secs(5), || cache.stats().device[DeviceClass::Read as usize].ios > 0));
        let written = cache.open("/written", &OpenOptions::read_write_create()).unwrap();
        written.write_at(&[7u8; 64 * KIB], 0).unwrap();
        // Twelve expire periods, each one flusher look (or more) at it.
        std::thread::sleep(Duration::from_millis(600));
        let st = cache.stats();
        // A reader the machine stalled for 100 ms leaves a gap in which
        // periodic writeback rightly goes: only then may the data be clean.
        let gap_us = gap_us_max.load(Ordering::Relaxed);
        if waits {
            assert!(st.periodic_waits_for_foreground > 0, "{what}: {st:?}");
            if gap_us < 90_000 {
                assert_eq!(st.dirty_bytes, 64 * KIB as u64, "{what}: still dirty while reads miss: {st:?}");
            } else {
                eprintln!("{what}: the reader stalled {gap_us} µs; the data may have gone in that gap");
            }
        } else {
            assert_eq!(st.dirty_bytes, 0, "{what}: written within expire_ms: {st:?}");
            assert_eq!(st.periodic_waits_for_foreground, 0, "{what}: {st:?}");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reading.join().unwrap() > 100, "{what}: the reader kept reading");
        // Clean and no longer under writeback: the write has reached the
        // store (dirty bytes alone reach 0 while the I/O is in flight).
        assert!(
            wait_until(Duration::from_secs(5), || {
                let st = cache.stats();
                st.dirty_bytes == 0 && st.writeback_bytes == 0
            }),
            "{what}: written once the reads stopped: {:?}",
            cache.stats()
        );
        let image = sim.written_image(Path::new("/written")).unwrap();
        assert_eq!(image, vec![7u8; 64 * KIB], "{what}");
        drop(written);
        cache.close().unwrap();
    }
}

/// A 16 MiB fsync writes 128 KiB I/Os in batches of eight while a reader
/// misses, and sixteen 1 MiB I/Os in one batch otherwise; every byte is
/// durable after it either way.
#[test]
fn a_large_fsync_goes_in_batches_while_reads_miss() {
    for reading in [false, true] {
        let sim = Arc::new(SimIo::new(SimConfig { seed: 2, ..SimConfig::default() }));
        let cache = cache(&sim, "capacity=128M,dirty_limit=64M,dirty_background=60M,expire_ms=600000,io_max=1M");
        let reader = make_read_file(&cache);
        let stop = Arc::new(AtomicBool::new(false));
        let reader = reading.then(|| start_reader(reader, stop.clone(), Arc::default()));
        if reader.is_some() {
            let read_misses = || cache.stats().device[DeviceClass::Read as usize].ios;
            assert!(wait_until(Duration::from_secs(5), || read_misses() >= 3), "the reader misses");
        }
        let big = cache.open("/big", &OpenOptions::read_write_create()).unwrap();
        let data: Vec<u8> = (0..16 * MIB).map(|i| (i / 4096) as u8).collect();
        big.write_at(&data, 0).unwrap();
        let before = cache.stats().device[DeviceClass::SyncWrite as usize];
        big.sync_data().unwrap();
        let sync_write = cache.stats().device[DeviceClass::SyncWrite as usize];
        stop.store(true, Ordering::Relaxed);
        if let Some(r) = reader {
            r.join().unwrap();
        }
        if reading {
            assert_eq!(sync_write.ios - before.ios, 128, "128 KiB writes: {sync_write:?}");
            assert_eq!(sync_write.in_flight_max, 8, "batches of 1 MiB: {sync_write:?}");
        } else {
            assert_eq!(sync_write.ios - before.ios, 16, "1 MiB writes: {sync_write:?}");
            assert_eq!(sync_write.in_flight_max, 16, "one batch: {sync_write:?}");
        }
        assert_eq!(sim.durable_image(Path::new("/big")).unwrap(), data, "reading {reading}");
        drop(big);
        cache.close().unwrap();
    }
}

/// A write error in one batch of a windowed fsync fails that fsync with
/// `EIO`, reported once: the failed write's blocks stay dirty and the
/// fsync writes them again with the rest before it returns, and the next
/// fsync succeeds with every byte durable.
#[test]
fn a_write_error_in_one_batch_fails_the_fsync_once_and_loses_nothing() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 3, ..SimConfig::default() }));
    let cache = cache(&sim, "capacity=128M,dirty_limit=64M,dirty_background=60M,expire_ms=600000,io_max=1M");
    let reader = make_read_file(&cache);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = start_reader(reader, stop.clone(), Arc::default());
    let read_misses = || cache.stats().device[DeviceClass::Read as usize].ios;
    assert!(wait_until(Duration::from_secs(5), || read_misses() >= 3), "the reader misses");
    let big = cache.open("/big", &OpenOptions::read_write_create()).unwrap();
    let data: Vec<u8> = (0..16 * MIB).map(|i| (i / 4096) as u8 | 1).collect();
    big.write_at(&data, 0).unwrap();
    // The first 128 KiB write of the sixth 1 MiB batch fails once.
    let failed_block = (5 * MIB / 4096) as u64;
    sim.inject(Path::new("/big"), failed_block, wbcache::sim::Fault::WriteEio, 1);
    let sync_writes = || cache.stats().device[DeviceClass::SyncWrite as usize];
    let before = sync_writes();
    let err = big.sync_data().expect_err("the failed write fails the fsync");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(sim.stats().write_errors, 1);
    assert!(sim.written_image(Path::new("/big")).unwrap() == data, "every byte written, the failed ones again");
    assert_eq!(cache.stats().dirty_bytes, 0);
    let after = sync_writes();
    assert!(after.ios - before.ios > 128, "128 KiB writes, the failed one again: {after:?}");
    assert_eq!(after.in_flight_max, 8, "in batches of 1 MiB: {after:?}");
    big.sync_data().expect("the error is reported once");
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(sim.durable_image(Path::new("/big")).unwrap(), data);
    drop(big);
    cache.close().unwrap();
}
