//! fsync ahead of background writeback, through the `sim` backend: an
//! fsync of a small file does not wait for a backlog of background writes
//! to another file of the same device; blocks the flusher had collected
//! but not submitted are promoted (submitted first, in the sync class,
//! written once); a block redirtied while its promoted write is in flight
//! is written again; and while an fsync waits, the flusher keeps at most
//! `async_depth_while_sync` background I/Os in flight.
//!
//! The sim's write gate ([`SimIo::hold_writes`]) stands for a slow device:
//! writes to a held path stay "in flight" until the test releases them,
//! and the write log records the order in which writes took effect.

use crate::common;
use common::assert_same;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wbcache::sim::{IoPriority, SimConfig, SimIo, SimWrite};
use wbcache::{Cache, Config, DeviceClass, File, IoClass, OpenOptions};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const BIG: &str = "/big";
const SMALL: &str = "/small";

/// Small I/Os and a shallow queue (4 I/Os), so that a backlog is many
/// I/Os deep; no periodic writeback; one writeback worker, whose queue the
/// tests watch (several workers each apply the same rules to their own); `dirty` sets `dirty_limit` and
/// `dirty_background` (the rest follows).
fn cache(sim: &Arc<SimIo>, dirty: &str, async_depth_while_sync: u32) -> Cache {
    let options = format!(
        "capacity=128M,{dirty},folio_max=256K,io_max=64K,io_depth=4,expire_ms=600000,\
         async_depth_while_sync={async_depth_while_sync},writeback_routing=single"
    );
    Cache::with_sim(Config::from_options(&options).unwrap(), sim.clone()).unwrap()
}

/// A limit of 1 MiB, and background writeback only for writers waiting at
/// it (the threshold sits one block under the limit).
const WAITERS_ONLY: &str = "dirty_limit=1M,dirty_background=1020K";

fn open(cache: &Cache, path: &str) -> File {
    cache.open(path, &OpenOptions::read_write_create()).unwrap()
}

/// Polls `what` until it holds, for at most 20 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread and returns a receiver for its result.
fn in_background<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

fn writes_to(log: &[SimWrite], path: &str) -> Vec<usize> {
    log.iter().enumerate().filter(|(_, w)| w.path == Path::new(path)).map(|(i, _)| i).collect()
}

/// Opens every gate when dropped, so that a failing test does not leave
/// the cache's close waiting forever for writes held at one.
struct OpenGatesOnDrop(Arc<SimIo>);

impl Drop for OpenGatesOnDrop {
    fn drop(&mut self) {
        for path in [BIG, SMALL] {
            self.0.release_writes(Path::new(path));
        }
    }
}

/// The big file's writeback is under way and stuck at the gate, with the
/// small file's block collected behind it: the flusher has 4 of big's I/Os
/// (one queue's depth) at the gate and holds big's other 4 and then
/// small's one. Returns the files, small's contents, and the writer still
/// waiting for dirty room (it ends once writeback moves again).
fn backlog_with_small_block_collected(
    sim: &Arc<SimIo>,
    cache: &Cache,
) -> (Arc<File>, Arc<File>, Vec<u8>, mpsc::Receiver<()>) {
    sim.hold_writes(Path::new(BIG));
    sim.record_writes();
    let big = Arc::new(open(cache, BIG));
    let small = Arc::new(open(cache, SMALL));
    // Big first, so the flusher, oldest first, takes it before small; in
    // 64 KiB writes, so its first pass is 8 folios, 8 I/Os, 512 KiB: as
    // much as the flusher collects before it waits for I/O.
    for i in 0..8 {
        big.write_at(&vec![1u8; 64 * KIB], (i * 64 * KIB) as u64).unwrap();
    }
    let small_data = vec![7u8; 4 * KIB];
    small.write_at(&small_data, 0).unwrap();
    // A writer that must wait for room (1 MiB more against 508 KiB left):
    // the flusher writes back for it, whatever the threshold says, so it
    // takes big's 8 I/Os and small's block in one go, then waits for I/O.
    let writer = in_background({
        let big = big.clone();
        move || big.write_at(&vec![2u8; MIB], 512 * KIB as u64).map(|_| ()).unwrap()
    });
    wait_until("the flusher to reach the gate", || sim.writes_held(Path::new(BIG)) > 0);
    wait_until("small's block to be taken for writeback", || {
        cache.stats().writeback_bytes == (512 * KIB + 4 * KIB) as u64
    });
    (big, small, small_data, writer)
}

/// An fsync of a small file completes without waiting for a backlog of
/// background writes to another file of the same device: the block the
/// flusher had collected is promoted, written once, in the sync class,
/// before the background I/O the flusher held with it.
#[test]
fn fsync_of_a_small_file_goes_ahead_of_a_background_backlog() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
    let cache = cache(&sim, WAITERS_ONLY, 1);
    // After the cache: dropped before it, even while a failure unwinds.
    let _gates = OpenGatesOnDrop(sim.clone());
    let (big, small, small_data, writer) = backlog_with_small_block_collected(&sim, &cache);
    let fsync = in_background({
        let small = small.clone();
        move || small.sync_all()
    });
    wait_until("the fsync to wait", || cache.stats().sync_waiters > 0);
    // The four big I/Os at the gate go; the flusher then submits what it
    // holds, small's block first.
    sim.release_writes(Path::new(BIG));
    fsync.recv_timeout(Duration::from_secs(20)).expect("the fsync returns").expect("the fsync succeeds");
    writer.recv_timeout(Duration::from_secs(20)).expect("the waiting writer got its room");
    drop(big);
    drop(small);
    let st = cache.stats();
    cache.close().unwrap();
    let log = sim.write_log();
    let small_writes = writes_to(&log, SMALL);
    assert_eq!(small_writes.len(), 1, "small's block is written once: {log:?}");
    let w = &log[small_writes[0]];
    assert_eq!((w.offset, w.len, w.priority), (0, 4 * KIB, IoPriority::Sync), "promoted: {w:?}");
    // Ahead of the big I/Os held before it: at most the four at the gate
    // and one more (the cap) took effect first, and the other three after.
    let big_before = writes_to(&log[..small_writes[0]], BIG);
    let big_after = writes_to(&log[small_writes[0]..], BIG);
    assert!(
        big_before.len() <= 5 && big_after.len() >= 3,
        "{} big writes before, {} after",
        big_before.len(),
        big_after.len()
    );
    let big_bytes: usize = log.iter().filter(|w| w.path == Path::new(BIG)).map(|w| w.len).sum();
    assert_eq!(big_bytes, 512 * KIB + MIB, "every big byte written once");
    assert!(st.promoted_bytes >= 4 * KIB as u64, "{st:?}");
    assert!(st.written_bytes_by_class[IoClass::Sync as usize] >= 4 * KIB as u64, "{st:?}");
    assert!(st.sync_wait_async_us_total > 0, "the fsync waited for the flusher's I/O: {st:?}");
    assert_eq!((st.fsyncs, st.fsync_lat_us.max_us > 0), (1, true), "{st:?}");
    // The device account saw the same: the fsync's write was submitted
    // once the big writes at the gate completed, with at most the cap's
    // one 64 KiB background write ahead of it; its flush covered the
    // background writes completed before it; it waited in the engine.
    let device = |class: DeviceClass| st.device[class as usize];
    let sync_write = device(DeviceClass::SyncWrite);
    assert!(sync_write.ios >= 1 && sync_write.bytes >= 4 * KIB as u64, "{st:?}");
    assert!(sync_write.background_ahead_kib.max_us <= 64, "{st:?}");
    assert_eq!(device(DeviceClass::Flush).ios, 1, "one fsync, one store sync: {st:?}");
    assert!(st.flush_covered_background_kib.max_us >= 256, "{st:?}");
    assert!(st.sync_engine_wait_us.count == 1 && st.sync_engine_wait_us.max_us > 0, "{st:?}");
    let background = device(DeviceClass::BackgroundWrite);
    assert!(background.ios >= 5 && background.in_flight_max >= 4, "{st:?}");
    assert!(DeviceClass::ALL.iter().all(|&c| device(c).latency_us.count <= device(c).ios), "{st:?}");
    assert_same(&sim.durable_image(Path::new(SMALL)).unwrap(), &small_data, "small after its fsync");
}

/// A block redirtied while its promoted write is in flight is written
/// again: the fsync (which covers blocks redirtied under writeback) makes
/// the new contents durable, and the next one finds nothing to do.
#[test]
fn a_block_redirtied_under_its_promoted_write_is_written_again() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 2, ..SimConfig::default() }));
    let cache = cache(&sim, WAITERS_ONLY, 1);
    let _gates = OpenGatesOnDrop(sim.clone());
    let (big, small, _old, writer) = backlog_with_small_block_collected(&sim, &cache);
    sim.hold_writes(Path::new(SMALL));
    let fsync = in_background({
        let small = small.clone();
        move || small.sync_all()
    });
    wait_until("the fsync to wait", || cache.stats().sync_waiters > 0);
    sim.release_writes(Path::new(BIG));
    wait_until("the promoted write to be in flight", || sim.writes_held(Path::new(SMALL)) > 0);
    let new = vec![9u8; 4 * KIB];
    small.write_at(&new, 0).unwrap();
    sim.release_writes(Path::new(SMALL));
    fsync.recv_timeout(Duration::from_secs(20)).expect("the fsync returns").expect("the fsync succeeds");
    assert_same(&sim.durable_image(Path::new(SMALL)).unwrap(), &new, "the redirtied block after the fsync");
    small.sync_all().unwrap();
    writer.recv_timeout(Duration::from_secs(20)).expect("the waiting writer got its room");
    let log = sim.write_log();
    let small_writes = writes_to(&log, SMALL);
    assert_eq!(small_writes.len(), 2, "the promoted write and the rewrite of the redirtied block: {log:?}");
    assert_eq!(log[small_writes[0]].priority, IoPriority::Sync, "the first was the promoted one");
    drop(big);
    drop(small);
    cache.close().unwrap();
    assert_same(&sim.durable_image(Path::new(SMALL)).unwrap(), &new, "after close");
}

/// While an fsync waits, the flusher keeps at most `async_depth_while_sync`
/// background I/Os in flight (it saw the waiter, and background I/O was
/// still going); the cap is lifted when the fsync is over.
#[test]
fn background_io_in_flight_is_capped_while_an_fsync_waits() {
    for cap in [1u32, 3] {
        // Latency, so that the backlog takes a while and fsyncs overlap it.
        let sim = Arc::new(SimIo::new(SimConfig { seed: 3, latency_us_max: 300, ..SimConfig::default() }));
        let cache = cache(&sim, "dirty_limit=64M,dirty_background=16M", cap);
        let big = open(&cache, BIG);
        let small = open(&cache, SMALL);
        big.write_at(&vec![3u8; 24 * MIB], 0).unwrap();
        for i in 0..40u64 {
            small.write_at(&[i as u8; 4 * KIB], i * 4 * KIB as u64).unwrap();
            small.sync_data().unwrap();
        }
        let st = cache.stats();
        assert!(
            (1..=u64::from(cap)).contains(&st.async_ios_in_flight_max_while_sync),
            "cap {cap}: {} async I/Os in flight while an fsync waited",
            st.async_ios_in_flight_max_while_sync
        );
        assert_eq!(st.fsyncs, 40);
        drop(big);
        drop(small);
        cache.close().unwrap();
    }
}

/// `async_depth_while_sync` is an option like the others: 0 and values past
/// 4096 are refused with a message that names it.
#[test]
fn async_depth_while_sync_is_validated() {
    for bad in ["async_depth_while_sync=0", "async_depth_while_sync=4097", "async_depth_while_sync=x"] {
        let e = Config::from_options(bad).unwrap_err();
        assert!(e.to_string().contains("async_depth_while_sync"), "{bad}: {e}");
    }
    assert_eq!(Config::from_options("async_depth_while_sync=8").unwrap().async_depth_while_sync, 8);
    assert_eq!(Config::default().async_depth_while_sync, 1);
}
