//! The page-cache controls applications use, on real files: fallocate
//! (reserve, punch a hole, zero a range), posix_fadvise (WILLNEED,
//! DONTNEED, SEQUENTIAL, RANDOM, NOREUSE, NORMAL) and sync_file_range.
//!
//! Each test checks what the cache answers (reads, `cached_ranges`,
//! `residency`, statistics) and what reached the backing file (read with
//! `std::fs` after the cache wrote or closed). The configuration writes
//! nothing back on its own (dirty data below the background threshold,
//! an hour's expiry) unless a test says otherwise, so every byte on the
//! store was written because a test asked. A file system without
//! `fallocate` (tmpfs has it; so does ext4) would fail the fallocate tests
//! with `EOPNOTSUPP`, named in the message.

use crate::common;
use common::{pattern, read_all};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::programs::TempDir;
use common::{assert_same, wait_until};
use wbcache::errno_of;
use wbcache::{
    Advice, Allocation, Cache, Config, File, OpenOptions, Reason, SyncRangeFlags, RESIDENT_CACHED, RESIDENT_DIRTY,
};

const NO_WRITEBACK: &str = "capacity=64M,dirty_limit=32M,dirty_background=31M,expire_ms=3600000";
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn cache(options: &str) -> Cache {
    Cache::new(Config::from_options(options).expect("options")).expect("cache")
}

fn open_rw(cache: &Cache, path: &Path) -> File {
    cache.open(path, &OpenOptions::read_write_create()).expect("open")
}

fn cached_bytes(file: &File) -> u64 {
    file.cached_ranges().unwrap().iter().map(|r| r.end - r.start).sum()
}

fn path_in(dir: &TempDir, name: &str) -> PathBuf {
    dir.0.join(name)
}

/// A punched range reads as zeros at once, cached or not; its dirty data
/// never reaches the store (the bytes there are the punch's zeros, not the
/// data written before it), the partial blocks at its ends keep their
/// other bytes, and the store really has a hole.
#[test]
fn punch_hole_reads_zeros_and_discards_dirty_data() {
    let dir = TempDir::new("punch");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let len = 8 * MIB as usize;
    let mut want = pattern(len, 1);
    f.write_at(&want, 0).unwrap();
    f.sync_data().unwrap();
    // Dirty data inside the hole-to-be, and some around it.
    let rewrite = pattern(2 * MIB as usize, 2);
    f.write_at(&rewrite, 3 * MIB).unwrap();
    want[3 * MIB as usize..5 * MIB as usize].copy_from_slice(&rewrite);
    let blocks_before = std::fs::metadata(&path).unwrap().blocks();
    // Unaligned at both ends.
    let (start, end) = (MIB + 1000, 6 * MIB + 5);
    f.punch_hole(start..end).unwrap();
    want[start as usize..end as usize].fill(0);
    assert_eq!(f.len().unwrap(), len as u64, "a punch keeps the size");
    assert_same(&read_all(&f), &want, "cache after the punch");
    f.sync_data().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &want, "store after the sync");
    let blocks_after = std::fs::metadata(&path).unwrap().blocks();
    assert!(blocks_after < blocks_before, "the store has a hole: {blocks_before} -> {blocks_after} sectors");
    let written = c.stats().written_bytes_by_reason.iter().sum::<u64>();
    drop(f);
    c.close().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &want, "store after the close");
    // The rewrite was discarded, not written: only the first 8 MiB and
    // the punch's partial edge blocks were ever written back.
    assert!(written <= len as u64 + 2 * 4 * KIB, "wrote {written} bytes");
}

/// The same with nothing cached: a fresh cache reads zeros from the store.
#[test]
fn punch_hole_of_uncached_data_reads_zeros() {
    let dir = TempDir::new("punch-cold");
    let path = path_in(&dir, "f");
    let mut want = pattern(4 * MIB as usize, 3);
    std::fs::write(&path, &want).unwrap();
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    // Cache part of it only.
    let mut head = vec![0u8; 64 * KIB as usize];
    f.read_at(&mut head, 0).unwrap();
    f.punch_hole(10 * KIB..3 * MIB).unwrap();
    want[10 * KIB as usize..3 * MIB as usize].fill(0);
    assert_same(&read_all(&f), &want, "cache");
    drop(f);
    c.close().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &want, "store");
}

/// ZERO_RANGE zeroes like a punch; without KEEP_SIZE a range past the end
/// extends the file, with it the size stays.
#[test]
fn zero_range_zeroes_and_extends_unless_keep_size() {
    let dir = TempDir::new("zero");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let mut want = pattern(MIB as usize + 123, 4);
    f.write_at(&want, 0).unwrap();
    f.zero_range(100..200 * KIB, false).unwrap();
    want[100..200 * KIB as usize].fill(0);
    assert_same(&read_all(&f), &want, "zeroed inside");
    // Past the end, keeping the size: nothing changes in length.
    f.zero_range(MIB..3 * MIB, true).unwrap();
    want[MIB as usize..].fill(0);
    assert_eq!(f.len().unwrap(), MIB + 123);
    assert_same(&read_all(&f), &want, "zeroed to the end, size kept");
    // Past the end, not keeping it: the file grows with zeros.
    f.zero_range(2 * MIB..2 * MIB + 10, false).unwrap();
    want.resize(2 * MIB as usize + 10, 0);
    assert_eq!(f.len().unwrap(), 2 * MIB + 10);
    assert_same(&read_all(&f), &want, "extended by the zero range");
    f.sync_all().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &want, "store");
    drop(f);
    c.close().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &want, "store after the close");
}

/// Mode 0 reserves blocks and extends the size; KEEP_SIZE reserves past
/// the end without changing it. No byte changes either way.
#[test]
fn allocate_reserves_blocks_and_extends_unless_keep_size() {
    let dir = TempDir::new("alloc");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let data = pattern(10_000, 5);
    f.write_at(&data, 0).unwrap();
    f.allocate(0..4 * MIB, true).unwrap();
    assert_eq!(f.len().unwrap(), 10_000, "KEEP_SIZE keeps the size");
    let blocks = std::fs::metadata(&path).unwrap().blocks();
    assert!(blocks * 512 >= 4 * MIB, "4 MiB reserved: {blocks} sectors");
    f.allocate(MIB..8 * MIB, false).unwrap();
    assert_eq!(f.len().unwrap(), 8 * MIB, "mode 0 extends");
    let mut want = data.clone();
    want.resize(8 * MIB as usize, 0);
    assert_same(&read_all(&f), &want, "cache");
    f.sync_all().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 * MIB);
    assert_same(&std::fs::read(&path).unwrap(), &want, "store");
    drop(f);
    c.close().unwrap();
}

/// fallocate's errors: a read-only handle, an empty range, a range past
/// `i64::MAX`, and a mode wbcache does not take, each leaving the data as
/// it was.
#[test]
fn fallocate_errors_change_nothing() {
    let dir = TempDir::new("alloc-err");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let data = pattern(64 * KIB as usize, 6);
    f.write_at(&data, 0).unwrap();
    let ro = c.open(&path, &OpenOptions::new().read(true)).unwrap();
    assert_eq!(errno_of(&ro.punch_hole(0..4096).unwrap_err()), libc::EBADF);
    assert_eq!(errno_of(&f.punch_hole(10..10).unwrap_err()), libc::EINVAL);
    assert_eq!(errno_of(&f.allocate(1..u64::MAX, false).unwrap_err()), libc::EFBIG);
    let collapse = libc::FALLOC_FL_COLLAPSE_RANGE;
    assert_eq!(
        errno_of(&Allocation::try_from(collapse).and_then(|how| f.fallocate(0..4096, how)).unwrap_err()),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        errno_of(
            &Allocation::try_from(libc::FALLOC_FL_PUNCH_HOLE).and_then(|how| f.fallocate(0..4096, how)).unwrap_err()
        ),
        libc::EOPNOTSUPP
    );
    assert_same(&read_all(&f), &data, "unchanged");
    drop((f, ro));
    c.close().unwrap();
    assert_same(&std::fs::read(&path).unwrap(), &data, "store");
}

/// DONTNEED drops the range's clean folios at once and leaves the rest;
/// dirty folios in it go once the flusher has written them (it is kicked,
/// as for uncached writes), and their data is on the store.
#[test]
fn dontneed_drops_clean_now_and_dirty_after_writeback() {
    let dir = TempDir::new("dontneed");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let want = pattern(8 * MIB as usize, 7);
    f.write_at(&want, 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(cached_bytes(&f), 8 * MIB);
    f.advise(0..4 * MIB, Advice::DontNeed).unwrap();
    let left = cached_bytes(&f);
    assert!(left <= 4 * MIB + 2 * MIB, "clean folios of the range dropped at once: {left} bytes cached");
    let mut cached_tail = vec![0u8; 4];
    f.residency(8 * MIB - 4 * 4096, 4 * 4096, &mut cached_tail).unwrap();
    assert!(cached_tail.iter().all(|&b| b & RESIDENT_CACHED != 0), "outside the range stays cached");
    // Dirty data: rewritten, then DONTNEED on all of it.
    let rewrite = pattern(8 * MIB as usize, 8);
    f.write_at(&rewrite, 0).unwrap();
    f.advise(0..u64::MAX, Advice::DontNeed).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || cached_bytes(&f) == 0 && c.stats().dirty_bytes == 0),
        "dirty folios written by the flusher and dropped: {} bytes cached, {} dirty",
        cached_bytes(&f),
        c.stats().dirty_bytes
    );
    assert_same(&std::fs::read(&path).unwrap(), &rewrite, "store");
    assert_same(&read_all(&f), &rewrite, "read back from the store");
    drop(f);
    c.close().unwrap();
}

/// WILLNEED reads the range in the background: the data is cached without
/// a read, and a later read of it misses nothing.
#[test]
fn willneed_reads_ahead_in_the_background() {
    let dir = TempDir::new("willneed");
    let path = path_in(&dir, "f");
    let want = pattern(6 * MIB as usize, 9);
    std::fs::write(&path, &want).unwrap();
    let c = cache(NO_WRITEBACK);
    let f = c.open(&path, &OpenOptions::new().read(true)).unwrap();
    assert_eq!(cached_bytes(&f), 0);
    f.advise(MIB..5 * MIB, Advice::WillNeed).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || cached_bytes(&f) >= 4 * MIB),
        "the range is cached: {} bytes",
        cached_bytes(&f)
    );
    let ranges = f.cached_ranges().unwrap();
    assert!(ranges.iter().all(|r| r.start >= MIB && r.end <= 5 * MIB), "only the range: {ranges:?}");
    let misses_before = c.stats().misses;
    let mut buf = vec![0u8; 4 * MIB as usize];
    f.read_at(&mut buf, MIB).unwrap();
    assert_same(&buf, &want[MIB as usize..5 * MIB as usize], "data");
    assert_eq!(c.stats().misses, misses_before, "no read missed");
    // A range past the end reads what there is.
    f.advise(5 * MIB..u64::MAX, Advice::WillNeed).unwrap();
    assert!(wait_until(Duration::from_secs(20), || cached_bytes(&f) >= 5 * MIB));
    drop(f);
    c.close().unwrap();
}

/// RANDOM turns the handle's readahead off (a read caches what it reads);
/// NORMAL turns it back on.
#[test]
fn random_advice_turns_readahead_off_and_normal_back_on() {
    let dir = TempDir::new("random");
    let path = path_in(&dir, "f");
    std::fs::write(&path, pattern(8 * MIB as usize, 10)).unwrap();
    let c = cache(NO_WRITEBACK);
    let f = c.open(&path, &OpenOptions::new().read(true)).unwrap();
    f.advise(0..0, Advice::Random).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..16 {
        f.read_at(&mut buf, i * 4096).unwrap();
    }
    assert_eq!(cached_bytes(&f), 16 * 4096, "only what was read");
    drop(f);
    assert!(c.forget(&path).unwrap(), "forgotten, to start cold");
    let f = c.open(&path, &OpenOptions::new().read(true)).unwrap();
    f.advise(0..0, Advice::Random).unwrap();
    f.advise(0..0, Advice::Normal).unwrap();
    for i in 0..16 {
        f.read_at(&mut buf, i * 4096).unwrap();
    }
    assert!(cached_bytes(&f) >= 128 * KIB, "readahead again: {} bytes", cached_bytes(&f));
    drop(f);
    c.close().unwrap();
}

/// NOREUSE makes the handle's accesses uncached: what it writes leaves the
/// cache once written back; another handle of the file is not affected,
/// and NORMAL undoes it.
#[test]
fn noreuse_makes_the_handles_writes_uncached() {
    let dir = TempDir::new("noreuse");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let other = open_rw(&c, &path);
    f.advise(0..0, Advice::NoReuse).unwrap();
    let data = pattern(4 * MIB as usize, 11);
    f.write_at(&data, 0).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || cached_bytes(&f) == 0),
        "uncached writes are written and dropped: {} bytes cached",
        cached_bytes(&f)
    );
    other.write_at(&data, 4 * MIB).unwrap();
    f.advise(0..0, Advice::Normal).unwrap();
    f.write_at(&data, 8 * MIB).unwrap();
    assert_eq!(cached_bytes(&f), 8 * MIB, "the other handle's and the normal writes stay");
    drop((f, other));
    c.close().unwrap();
}

/// sync_file_range(WRITE|WAIT_AFTER) writes the range's dirty blocks and
/// no others; WRITE alone starts them and returns; the writes count as
/// sync-range writeback. Unknown flags and reversed ranges are refused.
#[test]
fn writeback_range_writes_the_range_only() {
    let dir = TempDir::new("sync-range");
    let path = path_in(&dir, "f");
    let c = cache(NO_WRITEBACK);
    let f = open_rw(&c, &path);
    let data = pattern(8 * MIB as usize, 12);
    f.write_at(&data, 0).unwrap();
    f.writeback_range(2 * MIB..4 * MIB, SyncRangeFlags::WRITE | SyncRangeFlags::WAIT_AFTER).unwrap();
    let mut res = vec![0u8; 2048];
    f.residency(0, 8 * MIB, &mut res).unwrap();
    for (i, &bits) in res.iter().enumerate() {
        let inside = (512..1024).contains(&i);
        assert_eq!(bits & RESIDENT_DIRTY == 0, inside, "block {i}: bits {bits:#x}");
        assert!(bits & RESIDENT_CACHED != 0, "block {i} stays cached");
    }
    let on_store = std::fs::read(&path).unwrap();
    assert_same(&on_store[2 * MIB as usize..4 * MIB as usize], &data[2 * MIB as usize..4 * MIB as usize], "store");
    assert_eq!(c.stats().written_bytes_by_reason[Reason::SyncRange as usize], 2 * MIB);
    // WRITE alone: returns at once, the range-writer thread writes.
    f.writeback_range(4 * MIB..u64::MAX, SyncRangeFlags::WRITE).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || c.stats().written_bytes_by_reason[Reason::SyncRange as usize]
            == 6 * MIB),
        "the started writeback completes"
    );
    // WAIT_BEFORE alone and no flags at all are fine.
    f.writeback_range(0..0, SyncRangeFlags::WAIT_BEFORE).unwrap();
    f.writeback_range(0..0, SyncRangeFlags::NONE).unwrap();
    assert_eq!(errno_of(&SyncRangeFlags::from_bits(8).unwrap_err()), libc::EINVAL);
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 10..5;
    assert_eq!(errno_of(&f.writeback_range(reversed, SyncRangeFlags::WRITE).unwrap_err()), libc::EINVAL);
    // Read-only handles may ask too.
    let ro = c.open(&path, &OpenOptions::new().read(true)).unwrap();
    f.write_at(b"x", 0).unwrap();
    ro.writeback_range(0..4096, SyncRangeFlags::WRITE | SyncRangeFlags::WAIT_AFTER).unwrap();
    assert_eq!(std::fs::read(&path).unwrap()[0], b'x');
    drop((f, ro));
    c.close().unwrap();
}

/// Advice values outside POSIX_FADV_* are refused.
#[test]
fn unknown_advice_is_einval() {
    assert_eq!(errno_of(&Advice::from_raw(6).unwrap_err()), libc::EINVAL);
    assert_eq!(errno_of(&Advice::from_raw(-1).unwrap_err()), libc::EINVAL);
    for a in [Advice::Normal, Advice::Sequential, Advice::Random, Advice::WillNeed, Advice::DontNeed, Advice::NoReuse] {
        assert_eq!(Advice::from_raw(a.raw()).unwrap(), a);
    }
}

/// A zeroing or punch the store refuses after the cache quiesced the range
/// (here a simulated block device, which refuses a range past its end as
/// the kernel's `blkdev_fallocate` does) changes nothing: the dirty data
/// inside still reads back and is what the next sync writes.
#[test]
fn a_store_that_refuses_a_zeroing_leaves_the_cache_as_it_was() {
    use wbcache::sim::{SimConfig, SimIo};
    let sim = std::sync::Arc::new(SimIo::new(SimConfig { seed: 7, ..SimConfig::default() }));
    let dev = Path::new("/dev/sim-refuses");
    sim.create_block_device(dev, 4 * MIB);
    let c = Cache::with_sim(Config::from_options(NO_WRITEBACK).unwrap(), sim.clone()).unwrap();
    let f = c.open(dev, &OpenOptions::read_write_create().create(false)).unwrap();
    let data = pattern(2 * MIB as usize, 13);
    f.write_at(&data, MIB).unwrap();
    for (what, result) in [
        ("zero range", f.zero_range(MIB..8 * MIB, true)),
        ("punch", f.punch_hole(2 * MIB..5 * MIB)),
        ("allocate", f.allocate(0..MIB, false)),
    ] {
        let e = result.expect_err(what);
        assert!([libc::EINVAL, libc::EOPNOTSUPP].contains(&errno_of(&e)), "{what}: {e}");
        let mut back = vec![0u8; data.len()];
        f.read_at(&mut back, MIB).unwrap();
        assert_same(&back, &data, &format!("the dirty data after the refused {what}"));
    }
    assert_eq!(f.len().unwrap(), 4 * MIB);
    f.sync_all().unwrap();
    let durable = sim.durable_image(dev).unwrap();
    assert_same(&durable[MIB as usize..3 * MIB as usize], &data, "written by the sync");
    drop(f);
    c.close().unwrap();
}
