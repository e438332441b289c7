//! Scans on real files (`scan_dropbehind`): a sequential read of a file
//! larger than the cache caches its first quarter of `capacity`, then drops
//! what it reads behind it, as an uncached read does; a file the cache can
//! hold, a scan with the option off, and folios cached before the scan stay
//! cached. Every read is checked against the file's bytes.

use crate::common;
use common::pattern;

use std::path::Path;
use std::time::Duration;

use common::programs::TempDir;
use common::{assert_same, wait_until, Rng};
use wbcache::{Advice, Cache, Config, File, OpenOptions};

const MIB: u64 = 1 << 20;
/// `readahead_max` is at most capacity/8 (2 MiB here).
const SMALL: &str = "capacity=16M";

/// A file of `len` bytes written without the cache; its bytes.
fn laid_out(dir: &TempDir, name: &str, len: u64) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.0.join(name);
    let data = pattern(len as usize, len ^ 0x5ca1);
    std::fs::write(&path, &data).expect("lay out");
    (path, data)
}

fn new_cache(options: &str) -> Cache {
    Cache::new(Config::from_options(options).expect("options")).expect("cache")
}

fn open(cache: &Cache, path: &Path) -> File {
    cache.open(path, &OpenOptions::new().read(true)).expect("open")
}

/// Reads all of `f` in 1 MiB reads, checking every byte.
fn scan(f: &File, data: &[u8]) {
    let mut buf = vec![0u8; MIB as usize];
    for (i, want) in data.chunks(MIB as usize).enumerate() {
        let n = f.read_at(&mut buf, i as u64 * MIB).expect("read");
        assert_eq!(n, want.len());
        assert_same(&buf[..n], want, &format!("MiB {i}"));
    }
}

fn cached_bytes(f: &File) -> u64 {
    f.cached_ranges().expect("cached ranges").iter().map(|r| r.end - r.start).sum()
}

/// A 48 MiB file through a 16 MiB cache: the scan caches at most its
/// first 4 MiB (a quarter of the cache) and whatever readahead holds at
/// the moment, not the 16 MiB the cache could hold; the dropped folios are
/// counted as drop-behind frees.
#[test]
fn a_scan_of_a_file_larger_than_the_cache_drops_behind_past_a_quarter() {
    let dir = TempDir::new("scan-large");
    let (path, data) = laid_out(&dir, "big.bin", 48 * MIB);
    let cache = new_cache(SMALL);
    let f = open(&cache, &path);
    scan(&f, &data);
    // The reaper frees in batches, on its own thread.
    let settled = wait_until(Duration::from_secs(10), || cached_bytes(&f) <= 8 * MIB);
    let cached = cached_bytes(&f);
    assert!(settled, "a scan left {cached} bytes cached in a 16 MiB cache");
    // (What the scan cached first may itself have been evicted while the
    // scan's windows were in flight: it is ordinary cached data.)
    let counted = wait_until(Duration::from_secs(10), || cache.stats().dropbehind_freed_bytes >= 24 * MIB);
    assert!(counted, "{:?}", cache.stats().dropbehind_freed_bytes);
    // Read again: still correct (from the store now).
    scan(&f, &data);
    drop(f);
    cache.close().unwrap();
}

/// With `scan_dropbehind=off`, the same scan fills the cache.
#[test]
fn with_scan_dropbehind_off_a_scan_fills_the_cache() {
    let dir = TempDir::new("scan-off");
    let (path, data) = laid_out(&dir, "big.bin", 48 * MIB);
    let cache = new_cache(&format!("{SMALL},scan_dropbehind=off"));
    let f = open(&cache, &path);
    scan(&f, &data);
    let cached = cached_bytes(&f);
    assert!(cached >= 12 * MIB, "only {cached} bytes cached");
    assert_eq!(cache.stats().dropbehind_freed_bytes, 0);
    drop(f);
    cache.close().unwrap();
}

/// A file the cache can hold is cached whole by a scan, and a scan keeps
/// what was cached before it (a hot range read twice), reading it from the
/// cache without marking it.
#[test]
fn a_file_that_fits_and_what_was_cached_before_stay_cached() {
    let dir = TempDir::new("scan-fits");
    let (small_path, small) = laid_out(&dir, "small.bin", 12 * MIB);
    let (big_path, big) = laid_out(&dir, "big.bin", 48 * MIB);
    let cache = new_cache(SMALL);
    let f = open(&cache, &small_path);
    scan(&f, &small);
    assert_eq!(f.cached_ranges().unwrap(), vec![0..12 * MIB], "a file that fits is cached whole");
    drop(f);
    cache.close().unwrap();

    // A cache of its own: nothing else competes for its room.
    let cache = new_cache(SMALL);
    let g = open(&cache, &big_path);
    // A hot 1 MiB near the end, read twice before the scan (random reads).
    let hot = 40 * MIB..41 * MIB;
    let mut buf = vec![0u8; MIB as usize];
    for _ in 0..2 {
        g.read_at(&mut buf, hot.start).unwrap();
        g.read_at(&mut buf, 3 * MIB).unwrap();
    }
    assert_same(&buf, &big[3 * MIB as usize..4 * MIB as usize], "a random read");
    scan(&g, &big);
    assert!(
        wait_until(Duration::from_secs(10), || cached_bytes(&g) <= 10 * MIB),
        "the scan dropped behind: {} bytes cached",
        cached_bytes(&g)
    );
    let ranges = g.cached_ranges().unwrap();
    assert!(ranges.iter().any(|r| r.start <= hot.start && hot.end <= r.end), "the hot range stays: {ranges:?}");
    drop(g);
    cache.close().unwrap();
}

/// The same 4 KiB read again and again at offset 0 of a large file is not
/// a scan: it stays cached and is answered from the cache.
#[test]
fn rereading_one_block_of_a_large_file_is_not_a_scan() {
    let dir = TempDir::new("scan-reread");
    let (path, data) = laid_out(&dir, "big.bin", 48 * MIB);
    let cache = new_cache(SMALL);
    let f = open(&cache, &path);
    let mut buf = vec![0u8; 4096];
    for _ in 0..10_000 {
        f.read_at(&mut buf, 0).unwrap();
    }
    assert_same(&buf, &data[..4096], "block 0");
    let before = cache.stats();
    for _ in 0..1000 {
        f.read_at(&mut buf, 0).unwrap();
    }
    let after = cache.stats();
    assert_eq!(after.hits - before.hits, 1000, "every re-read is a hit");
    assert_eq!(after.dropbehind_freed_bytes, before.dropbehind_freed_bytes);
    assert!(f.cached_ranges().unwrap().first().is_some_and(|r| r.start == 0));
    drop(f);
    cache.close().unwrap();
}

/// A read again of the last block a scan read belongs to the scan: it is
/// read uncached as the scan's reads are, and the block does not stay in
/// the cache. (A re-read that skipped readahead's state, the hit path's
/// shortcut, would have cached it: this fails if that shortcut is taken
/// while a scan's window is open.)
#[test]
fn rereading_the_last_block_of_a_scan_is_the_scans() {
    let dir = TempDir::new("scan-reread-last");
    let (path, data) = laid_out(&dir, "big.bin", 48 * MIB);
    let cache = new_cache(SMALL);
    let f = open(&cache, &path);
    scan(&f, &data);
    let last = 48 * MIB - 4096;
    let mut buf = vec![0u8; 4096];
    // The scan drops its last blocks behind too (perhaps a moment later).
    let dropped = wait_until(Duration::from_secs(10), || is_cached(&f, last) == Some(false));
    assert!(dropped, "the scan left its last block cached");
    for _ in 0..3 {
        assert_eq!(f.read_at(&mut buf, last).unwrap(), 4096);
        assert_same(&buf, &data[last as usize..], "the last block");
        let dropped = wait_until(Duration::from_secs(10), || is_cached(&f, last) == Some(false));
        assert!(dropped, "a scan's re-read left its block cached");
    }
    drop(f);
    cache.close().unwrap();
}

/// Whether the block at `off` is cached (`None` if residency fails).
fn is_cached(f: &File, off: u64) -> Option<bool> {
    let mut vec = [0u8; 1];
    f.residency(off, 4096, &mut vec).ok()?;
    Some(vec[0] & wbcache::RESIDENT_CACHED != 0)
}

/// Random records read in two halves (the second half continues the
/// first) never add up to a scan, however many of them hit the cache; nor
/// does one large read, which is cached whole.
#[test]
fn random_records_and_one_large_read_are_not_a_scan() {
    let dir = TempDir::new("scan-records");
    let (path, data) = laid_out(&dir, "big.bin", 48 * MIB);
    let cache = new_cache(SMALL);
    let mut rng = Rng::new(7);
    // 1,200 hot 8 KiB records (9.4 MiB, more than a scan may cache), made
    // cached by a handle without readahead.
    let records: Vec<u64> = (0..1200).map(|_| 1 + rng.below((48 * MIB / 8192) as usize - 1) as u64).collect();
    let warm = open(&cache, &path);
    warm.advise(0..u64::MAX, Advice::Random).unwrap();
    let mut record = vec![0u8; 8192];
    for &r in &records {
        warm.read_at(&mut record, r * 8192).unwrap();
    }
    let f = open(&cache, &path);
    let mut half = vec![0u8; 4096];
    let read_record = |r: u64, half: &mut Vec<u8>| {
        for part in 0..2u64 {
            let off = r * 8192 + part * 4096;
            f.read_at(half, off).unwrap();
            assert_same(half, &data[off as usize..off as usize + 4096], "a record's half");
        }
    };
    for &r in &records {
        read_record(r, &mut half);
    }
    // Cold records now: their second halves open readahead windows.
    for _ in 0..200 {
        read_record(1 + rng.below((48 * MIB / 8192) as usize - 1) as u64, &mut half);
    }
    assert_eq!(cache.stats().dropbehind_freed_bytes, 0, "random records were read as a scan");
    drop((f, warm));
    cache.close().unwrap();

    let cache = new_cache(SMALL);
    let f = open(&cache, &path);
    let mut large = vec![0u8; 8 * MIB as usize];
    assert_eq!(f.read_at(&mut large, 0).unwrap(), large.len());
    assert_same(&large, &data[..large.len()], "one large read");
    let ranges = f.cached_ranges().unwrap();
    assert!(ranges.first().is_some_and(|r| r.start == 0 && r.end >= 8 * MIB), "one large read is cached: {ranges:?}");
    drop(f);
    cache.close().unwrap();
}
