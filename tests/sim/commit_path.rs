//! The commit path: what one `write_at` + `sync_data` costs in calls to
//! the backing store, through the `sim` backend. A commit that overwrites
//! data inside the file asks the store nothing but the write and the sync:
//! no length query (`fstat`), whose only effect on Linux 6.13+ is to make
//! the next write update the file's ctime (multigrain timestamps), a
//! journal update per commit.

use crate::common;
use std::path::Path;
use std::sync::Arc;

use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions};

const DB: &str = "/db";

fn cache(sim: &Arc<SimIo>) -> Cache {
    Cache::with_sim(Config::from_options("capacity=16M,dirty_limit=4M,expire_ms=600000").unwrap(), sim.clone()).unwrap()
}

#[test]
fn overwrite_commits_do_not_query_the_store_length() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
    let cache = cache(&sim);
    let file = cache.open(DB, &OpenOptions::read_write_create()).unwrap();
    // A file whose size is not a whole number of blocks: its tail block
    // is padded by O_DIRECT writeback and cut by the first sync.
    file.write_at(&vec![1u8; 64 * 1024 + 100], 0).unwrap();
    file.sync_data().unwrap();
    assert_eq!(sim.durable_image(Path::new(DB)).unwrap().len(), 64 * 1024 + 100);
    let before = sim.stats();
    for i in 0..20u64 {
        file.write_at(&[i as u8; 4096], (i % 16) * 4096).unwrap();
        file.sync_data().unwrap();
    }
    let after = sim.stats();
    assert_eq!(after.syncs - before.syncs, 20, "one store sync per commit");
    assert_eq!(after.len_queries, before.len_queries, "no length query in an overwrite commit");
    // The tail block is written again (padded, then cut): the length is
    // looked at then, and the store keeps the logical size.
    file.write_at(b"tail", 64 * 1024 + 10).unwrap();
    file.sync_data().unwrap();
    let image = sim.durable_image(Path::new(DB)).unwrap();
    assert_eq!(image.len(), 64 * 1024 + 100);
    assert_eq!(&image[64 * 1024 + 10..64 * 1024 + 14], b"tail");
    assert_eq!(image[15 * 4096], 15);
    drop(file);
    cache.close().unwrap();
}

/// A write-ahead log as SQLite keeps one: frames of 4,120 bytes (a
/// 24-byte header and a 4 KiB page) appended and synced one commit at a
/// time, so the file's end is almost never on a block boundary; then, once
/// checkpointed, written again from its start. With the store writing the
/// partial last block through its buffered path, as a regular file's
/// does, no commit pads the store, and none asks it for its length: the
/// appends because each completed tail write tells the cache how long the
/// store is, the rewrites because nothing changed it.
#[test]
fn log_commits_with_unaligned_ends_do_not_query_the_store_length() {
    const WAL: &str = "/db-wal";
    const FRAME: usize = 4096 + 24;
    const FRAMES: usize = 200;
    let sim = Arc::new(SimIo::new(SimConfig { seed: 3, tail_writes: true, ..SimConfig::default() }));
    let cache = cache(&sim);
    let wal = cache.open(WAL, &OpenOptions::read_write_create()).unwrap();
    let frame = |round: u8, i: usize| vec![round.wrapping_mul(31).wrapping_add(i as u8); FRAME];
    wal.write_at(&[7u8; 32], 0).unwrap();
    wal.sync_data().unwrap();
    let commit = |round: u8, first: usize| {
        for i in first..first + 3 {
            wal.write_at(&frame(round, i), (32 + i * FRAME) as u64).unwrap();
        }
        wal.sync_data().unwrap();
    };
    let before = sim.stats();
    for first in (0..FRAMES).step_by(3) {
        commit(1, first);
    }
    let appended = sim.stats();
    assert_eq!(appended.len_queries, before.len_queries, "no length query while the log grows");
    for first in (0..FRAMES - 3).step_by(3) {
        commit(2, first);
    }
    let after = sim.stats();
    assert_eq!(after.len_queries, appended.len_queries, "no length query while the log is rewritten");
    assert_eq!(after.syncs - before.syncs, (FRAMES.div_ceil(3) + (FRAMES - 3).div_ceil(3)) as u64);
    let image = sim.durable_image(Path::new(WAL)).unwrap();
    let len = 32 + FRAMES.div_ceil(3) * 3 * FRAME;
    assert_eq!(image.len(), len, "the store ends at the log's end, unpadded");
    for i in 0..FRAMES.div_ceil(3) * 3 {
        let round = if i < (FRAMES - 3).div_ceil(3) * 3 { 2 } else { 1 };
        assert!(image[32 + i * FRAME..32 + (i + 1) * FRAME] == frame(round, i)[..], "frame {i} of round {round}");
    }
    drop(wal);
    cache.close().unwrap();
}

/// A SQLite journal in DELETE mode: a new file, about 21 KiB written and
/// synced, its header rewritten and synced, then deleted, at every
/// commit. The sync writes the new file's blocks through the store's
/// buffered path (an O_DIRECT write that allocates blocks cannot complete
/// without blocking); the header rewrite, inside blocks the store has,
/// goes O_DIRECT; an append larger than 64 KiB stays O_DIRECT. Every byte
/// is on the store after each sync, and the store is never padded.
#[test]
fn a_syncs_small_append_is_written_buffered_and_a_large_one_direct() {
    const JOURNAL: &str = "/db-journal";
    const KIB: usize = 1024;
    let sim = Arc::new(SimIo::new(SimConfig { seed: 5, tail_writes: true, ..SimConfig::default() }));
    let cache = cache(&sim);
    for commit in 0..5u8 {
        let journal = cache.open(JOURNAL, &OpenOptions::read_write_create()).unwrap();
        let mut data = vec![commit; 21 * KIB + 552 - 1024];
        data[..12].fill(0);
        journal.write_at(&data, 0).unwrap();
        let before = sim.stats();
        journal.sync_data().unwrap();
        let synced = sim.stats();
        assert!(synced.buffered_writes > before.buffered_writes, "commit {commit}: the append went buffered");
        assert_eq!(synced.writes - before.writes, synced.buffered_writes - before.buffered_writes, "only buffered");
        assert_eq!(sim.durable_image(Path::new(JOURNAL)).unwrap(), data, "commit {commit}: the journal is durable");
        journal.write_at(&[commit + 1; 12], 0).unwrap();
        journal.sync_data().unwrap();
        let rewritten = sim.stats();
        assert_eq!(rewritten.buffered_writes, synced.buffered_writes, "commit {commit}: the header went O_DIRECT");
        data[..12].fill(commit + 1);
        assert_eq!(sim.durable_image(Path::new(JOURNAL)).unwrap(), data, "commit {commit}: the header is durable");
        drop(journal);
        cache.remove_file(JOURNAL).unwrap();
    }
    // A large append: O_DIRECT, all but the partial last block.
    let big = cache.open("/big", &OpenOptions::read_write_create()).unwrap();
    let data = vec![9u8; 64 * KIB + 4096 + 100];
    big.write_at(&data, 0).unwrap();
    let before = sim.stats();
    big.sync_data().unwrap();
    let after = sim.stats();
    assert_eq!(after.buffered_writes - before.buffered_writes, 1, "only the partial last block went buffered");
    assert_eq!(sim.durable_image(Path::new("/big")).unwrap(), data);
    drop(big);
    cache.close().unwrap();
}

/// Background writeback yields to slow fsyncs: while fsyncs keep missing
/// `sync_latency_target_us` (the sim's writes take up to 3 ms), each
/// 100 ms window halves the largest background I/O down to 64 KiB, and
/// background writes go out no larger; once the fsyncs stop, quiet
/// windows grow it back to `io_max`.
#[test]
fn background_io_shrinks_while_fsyncs_miss_the_target_and_grows_back() {
    const BIG: &str = "/stream";
    const KIB: u64 = 1 << 10;
    let sim = Arc::new(SimIo::new(SimConfig { seed: 7, latency_us_max: 3000, ..SimConfig::default() }));
    let options = "capacity=64M,dirty_limit=16M,dirty_background=1M,io_max=256K,expire_ms=600000,\
                   sync_latency_target_us=500,writeback_routing=single,writeback_workers=1";
    let cache = Arc::new(Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committer = {
        let (cache, stop) = (cache.clone(), stop.clone());
        std::thread::spawn(move || {
            let db = cache.open(DB, &OpenOptions::read_write_create()).unwrap();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.write_at(&[i as u8; 4096], (i % 8) * 4096).unwrap();
                db.sync_data().unwrap();
                i += 1;
            }
        })
    };
    let budget_is = |bytes: u64| {
        common::wait_until(std::time::Duration::from_secs(20), || cache.stats().background_io_bytes_max == bytes)
    };
    assert!(budget_is(64 * KIB), "budget after slow fsyncs: {:?}", cache.stats().background_io_bytes_max);
    let st = cache.stats();
    assert!(st.background_scaled_down >= 2, "{st:?}");
    assert!(st.foreground_latency_us_p99 > 500 && st.foreground_latency_us_min > 0, "{st:?}");

    sim.record_writes();
    let big = cache.open(BIG, &OpenOptions::read_write_create()).unwrap();
    big.write_at(&vec![5u8; 4 << 20], 0).unwrap();
    // The stream's writes logged from entry `from` on.
    let stream_writes = |from: usize| -> Vec<u64> {
        sim.write_log()[from..].iter().filter(|w| w.path.as_path() == Path::new(BIG)).map(|w| w.len as u64).collect()
    };
    let written_back = |from: usize| {
        common::wait_until(std::time::Duration::from_secs(30), || stream_writes(from).iter().sum::<u64>() >= 3 << 20)
    };
    assert!(written_back(0), "background writeback ran");
    let largest = stream_writes(0).into_iter().max().unwrap_or(0);
    assert!(largest <= 64 * KIB, "background writes of {largest} bytes while fsyncs are slow");
    // The queue kept next to the commits shrank with the I/O: 1 MiB at
    // io_max (256 KiB), scaled by 64 KiB / 256 KiB.
    let queue = cache.stats().background_queue_bytes_while_sync;
    assert_eq!(queue, 256 * KIB, "the queue shrank with the I/O");

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    committer.join().unwrap();
    big.sync_data().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let from = sim.write_log().len();
    big.write_at(&vec![6u8; 4 << 20], 0).unwrap();
    assert!(written_back(from), "background writeback ran");
    let largest = stream_writes(from).into_iter().max().unwrap_or(0);
    assert!(largest > 64 * KIB, "background writes grew back after quiet windows: {largest} bytes at most");
    let st = cache.stats();
    assert!(st.background_scaled_up >= 1, "{st:?}");
    drop(big);
    Arc::try_unwrap(cache).ok().expect("the only handle").close().unwrap();
}
