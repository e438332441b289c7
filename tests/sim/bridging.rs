//! Writeback bridges small gaps of clean cached blocks between dirty runs:
//! one I/O instead of two, writing back bytes the store already holds.
//! Checked through the `sim` backend: I/O counts, the `bridged_bytes`
//! stat, the durable image, and what a failed bridge leaves behind.
//!
//! The cache is "quiet" (no background or periodic writeback), so only the
//! tests' own syncs write back.

use crate::common;
use common::assert_same;
use std::path::Path;
use std::sync::Arc;

use wbcache::sim::{Fault, SimConfig, SimIo};
use wbcache::{Cache, Config, File, OpenOptions};

const BLOCK: usize = 4096;
const BLOCKS: usize = 12;
const QUIET: &str = "capacity=16M,dirty_limit=4M,dirty_background=2M,expire_ms=60000";

fn block_of(index: usize, tag: u8) -> Vec<u8> {
    (0..BLOCK).map(|i| (i as u8).wrapping_mul(7) ^ (index as u8).wrapping_add(tag)).collect()
}

/// A file of `BLOCKS` blocks, each cached as a folio of its own (written
/// one 4 KiB write at a time) and made durable, so every block is clean and
/// cached.
fn cached_clean_file(sim: &Arc<SimIo>, options: &str) -> (Cache, File, Vec<u8>) {
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap();
    let f = cache.open("/b", &OpenOptions::read_write_create()).unwrap();
    let mut image = Vec::new();
    for i in 0..BLOCKS {
        let b = block_of(i, 0);
        f.write_at(&b, (i * BLOCK) as u64).unwrap();
        image.extend_from_slice(&b);
    }
    f.sync_all().unwrap();
    (cache, f, image)
}

/// Dirties `blocks` with new contents, updating `image`.
fn dirty(f: &File, image: &mut [u8], blocks: &[usize]) {
    for &i in blocks {
        let b = block_of(i, 99);
        f.write_at(&b, (i * BLOCK) as u64).unwrap();
        image[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(&b);
    }
}

#[test]
fn gaps_of_up_to_two_clean_blocks_are_written_over() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }));
    let (cache, f, mut image) = cached_clean_file(&sim, QUIET);
    // Gaps: 1 (one block), 3-4 (two), 6-8 (three: too wide), 10 (one).
    dirty(&f, &mut image, &[0, 2, 5, 9, 11]);
    let writes_before = sim.stats().writes;
    let bridged_before = cache.stats().bridged_bytes;
    f.sync_all().unwrap();
    assert_eq!(sim.stats().writes - writes_before, 2, "blocks 0..=5 and 9..=11, one write each");
    assert_eq!(cache.stats().bridged_bytes - bridged_before, 4 * BLOCK as u64, "blocks 1, 3, 4 and 10");
    assert_same(&sim.durable_image(Path::new("/b")).unwrap(), &image, "durable image");
    let st = cache.stats();
    assert_eq!((st.dirty_bytes, st.writeback_bytes), (0, 0), "bridges leave no dirty or writeback bytes: {st:?}");
    drop(f);
    cache.close().unwrap();
}

#[test]
fn uncached_gaps_are_not_bridged() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 2, ..SimConfig::default() }));
    let (cache, f, mut image) = cached_clean_file(&sim, QUIET);
    drop(f);
    cache.close().unwrap();
    // A new cache holds only what is written now.
    let cache = Cache::with_sim(Config::from_options(QUIET).unwrap(), sim.clone()).unwrap();
    let f = cache.open("/b", &OpenOptions::new().read(true).write(true)).unwrap();
    dirty(&f, &mut image, &[0, 2, 4]);
    let writes_before = sim.stats().writes;
    f.sync_all().unwrap();
    assert_eq!(sim.stats().writes - writes_before, 3, "nothing cached between the dirty blocks");
    assert_eq!(cache.stats().bridged_bytes, 0);
    assert_same(&sim.durable_image(Path::new("/b")).unwrap(), &image, "durable image");
    drop(f);
    cache.close().unwrap();
}

#[test]
fn bridge_gap_zero_writes_only_dirty_blocks() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 4, ..SimConfig::default() }));
    let (cache, f, mut image) = cached_clean_file(&sim, &format!("{QUIET},bridge_gap=0"));
    dirty(&f, &mut image, &[0, 2, 5]);
    let writes_before = sim.stats().writes;
    f.sync_all().unwrap();
    assert_eq!(sim.stats().writes - writes_before, 3, "one write per dirty block");
    assert_eq!(cache.stats().bridged_bytes, 0);
    assert_same(&sim.durable_image(Path::new("/b")).unwrap(), &image, "durable image");
    drop(f);
    cache.close().unwrap();
}

#[test]
fn a_failed_bridge_leaves_its_blocks_dirty_until_a_retry_succeeds() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 3, ..SimConfig::default() }));
    let (cache, f, mut image) = cached_clean_file(&sim, QUIET);
    dirty(&f, &mut image, &[0, 2]);
    sim.inject(Path::new("/b"), 1, Fault::WriteEio, u32::MAX);
    let e = f.sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // Blocks 0 and 2, and the bridge (block 1): the store may hold
    // anything there now, so it must be written again.
    assert_eq!(cache.stats().dirty_bytes, 3 * BLOCK as u64);
    sim.clear_faults();
    f.sync_all().unwrap();
    assert_eq!(cache.stats().dirty_bytes, 0);
    assert_same(&sim.durable_image(Path::new("/b")).unwrap(), &image, "durable image after the retry");
    drop(f);
    cache.close().unwrap();
}

/// A failed bridge makes its clean blocks dirty, so a pass bridges only
/// when the dirty limit has room for them: with two dirty blocks and a
/// limit of two blocks there is none, and the blocks go as two I/Os; with
/// room for one more block, the bridge is taken, fails, and dirty +
/// writeback still never passed the limit.
#[test]
fn a_bridge_needs_room_under_the_dirty_limit() {
    for (limit_blocks, bridged) in [(2usize, false), (3, true)] {
        let limit = limit_blocks * BLOCK;
        // Background writeback starts only past `limit_blocks - 1` dirty
        // blocks: with a limit of 3, never before the sync.
        let background = (limit_blocks - 1) * BLOCK;
        let options =
            format!("capacity=16M,dirty_limit={limit},dirty_background={background},folio_max=4K,expire_ms=60000");
        let sim = Arc::new(SimIo::new(SimConfig { seed: 5, ..SimConfig::default() }));
        let (cache, f, mut image) = cached_clean_file(&sim, &options);
        sim.inject(Path::new("/b"), 1, Fault::WriteEio, u32::MAX);
        let writes_before = sim.stats().writes;
        dirty(&f, &mut image, &[0, 2]);
        let synced = f.sync_all();
        let st = cache.stats();
        assert!(
            st.peak_dirty_writeback_bytes <= limit as u64,
            "limit {limit}: peak dirty + writeback {} over the limit",
            st.peak_dirty_writeback_bytes
        );
        if bridged {
            assert_eq!(synced.unwrap_err().raw_os_error(), Some(libc::EIO), "the bridge failed");
            assert_eq!(st.bridged_bytes, BLOCK as u64);
            assert_eq!(st.dirty_bytes, 3 * BLOCK as u64, "blocks 0 and 2, and the failed bridge");
        } else {
            synced.expect("without a bridge, block 1 is never written");
            assert_eq!(st.bridged_bytes, 0, "no room for the bridge");
            assert_eq!(sim.stats().writes - writes_before, 2, "blocks 0 and 2, one write each");
            assert_eq!(st.dirty_bytes, 0);
        }
        sim.clear_faults();
        f.sync_all().unwrap();
        assert_eq!(cache.stats().dirty_bytes, 0);
        assert!(cache.stats().peak_dirty_writeback_bytes <= limit as u64);
        assert_same(&sim.durable_image(Path::new("/b")).unwrap(), &image, "durable image after the retry");
        drop(f);
        cache.close().unwrap();
    }
}
