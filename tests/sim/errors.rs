//! Error paths through the `sim` backend, one scenario per test: writeback
//! errors and errseq reporting, ENOSPC, read-only handles, block-device
//! bounds, bad options, use after close, open flags, uncached writes, and
//! what closing a file versus closing the cache writes back.
//!
//! Unless a test says otherwise the cache is "quiet": periodic writeback is a
//! minute away and every test stays below `dirty_background`, so only the
//! test's own calls write back and every outcome is deterministic.

use crate::common;
use common::{assert_same, wait_until, with_timeout};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wbcache::sim::{Fault, SimConfig, SimIo};
use wbcache::{Cache, Config, File, OpenOptions, WriteFlags};

const KIB: usize = 1024;
const BLOCK: usize = 4096;
const QUIET: &str = "capacity=16M,dirty_limit=4M,dirty_background=2M,folio_max=256K,expire_ms=60000";

fn sim() -> Arc<SimIo> {
    Arc::new(SimIo::new(SimConfig { seed: 1, ..SimConfig::default() }))
}

fn new_cache(sim: &Arc<SimIo>, options: &str) -> Cache {
    Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

fn errno(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error()
}

fn read_all(f: &File, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

fn durable(sim: &SimIo, path: &str) -> Vec<u8> {
    sim.durable_image(Path::new(path)).expect("file exists")
}

fn written(sim: &SimIo, path: &str) -> Vec<u8> {
    sim.written_image(Path::new(path)).expect("file exists")
}

#[test]
fn eio_at_writeback_keeps_data_dirty_until_a_retry_succeeds() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(100 * KIB + 17, 1);
    f.write_at(&data, 0).unwrap();
    sim.inject(Path::new("/e"), 7, Fault::WriteEio, u32::MAX);

    let e = f.sync_all().unwrap_err();
    assert_eq!(errno(&e), Some(libc::EIO));
    let st = cache.stats();
    assert!(st.dirty_bytes > 0, "failed data stays dirty: {st:?}");
    assert!(st.writeback_errors > 0);
    assert!(durable(&sim, "/e").is_empty(), "nothing durable after a failed sync");
    assert_same(&read_all(&f, data.len() + 10), &data, "the cache still serves the data");

    // Every retry that fails is a new error, reported again.
    assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::EIO));
    assert!(cache.stats().dirty_bytes > 0);

    sim.clear_faults();
    f.sync_all().unwrap();
    assert_same(&durable(&sim, "/e"), &data, "durable image");
    assert_eq!(cache.stats().dirty_bytes, 0);
    f.sync_all().unwrap();
    drop(f);
    cache.close().unwrap();
    assert_same(&durable(&sim, "/e"), &data, "durable image");
}

#[test]
fn error_is_reported_once_to_every_open_handle() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let h1 = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    let h2 = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(40 * KIB, 2);
    h1.write_at(&data, 0).unwrap();
    sim.inject(Path::new("/e"), 3, Fault::WriteEio, u32::MAX);

    assert_eq!(errno(&h1.sync_all().unwrap_err()), Some(libc::EIO), "h1 sees its failure");
    assert!(cache.stats().dirty_bytes > 0);
    sim.clear_faults();
    // h2 did not sync yet: its next sync reports the error once, although
    // its own writeback (the retry) now succeeds.
    assert_eq!(errno(&h2.sync_all().unwrap_err()), Some(libc::EIO), "h2 sees it too");
    assert_same(&durable(&sim, "/e"), &data, "the retry made the data durable");
    h2.sync_all().expect("reported once to h2");
    h1.sync_all().expect("reported once to h1");
    h1.sync_data().unwrap();
    let h3 = cache.open("/e", &OpenOptions::new().read(true)).unwrap();
    h3.sync_all().expect("a handle opened after the error was seen starts clean");
}

#[test]
fn unseen_error_is_reported_to_a_handle_opened_later() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let h1 = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    let h2 = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(40 * KIB, 3);
    h2.write_at(&data, 0).unwrap();
    sim.inject(Path::new("/e"), 0, Fault::WriteEio, u32::MAX);
    // Cache::sync_all hits the error; no handle has seen it.
    assert_eq!(errno(&cache.sync_all().unwrap_err()), Some(libc::EIO));
    sim.clear_faults();

    let h3 = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    assert_eq!(errno(&h3.sync_all().unwrap_err()), Some(libc::EIO), "opened before anyone saw it");
    h3.sync_all().unwrap();
    assert_eq!(errno(&h1.sync_all().unwrap_err()), Some(libc::EIO));
    h1.sync_all().unwrap();
    assert_eq!(errno(&h2.sync_data().unwrap_err()), Some(libc::EIO));
    h2.sync_data().unwrap();
    let h4 = cache.open("/e", &OpenOptions::read_write_create()).unwrap();
    h4.sync_all().expect("opened after the error was seen");
    assert_same(&durable(&sim, "/e"), &data, "durable image");
}

#[test]
fn enospc_surfaces_from_sync_and_loses_nothing() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/full", &OpenOptions::read_write_create()).unwrap();
    let mut reference = pattern(200 * KIB, 4);
    f.write_at(&reference, 0).unwrap();
    f.sync_all().unwrap();

    sim.set_write_error_all(Some(libc::ENOSPC));
    let more = pattern(120 * KIB + 5, 5);
    assert_eq!(f.write_at(&more, 150 * KIB as u64).unwrap(), more.len(), "writes into the cache still work");
    reference.resize(150 * KIB + more.len(), 0);
    reference[150 * KIB..].copy_from_slice(&more);
    let e = f.sync_all().unwrap_err();
    assert_eq!(errno(&e), Some(libc::ENOSPC), "{e}");
    assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::ENOSPC), "still full: a new error");
    assert!(cache.stats().dirty_bytes > 0);
    assert_same(&durable(&sim, "/full"), &pattern(200 * KIB, 4), "the old synced data is intact");
    assert_eq!(errno(&cache.sync_all().unwrap_err()), Some(libc::ENOSPC));
    assert_same(&read_all(&f, reference.len() + 1), &reference, "content");

    sim.set_write_error_all(None);
    // Cache::sync_all's failure is still unseen by the handle: reported once.
    assert_eq!(errno(&f.sync_all().unwrap_err()), Some(libc::ENOSPC));
    f.sync_all().unwrap();
    assert_same(&durable(&sim, "/full"), &reference, "nothing lost");
    assert_eq!(cache.stats().dirty_bytes, 0);
}

#[test]
fn read_only_and_write_only_handles_reject_the_other_direction() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let rw = cache.open("/ro", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(10 * KIB, 6);
    rw.write_at(&data, 0).unwrap();

    let ro = cache.open("/ro", &OpenOptions::new().read(true)).unwrap();
    assert_eq!(errno(&ro.write_at(b"x", 0).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&ro.write_at_with(b"x", 5, WriteFlags::DONTCACHE).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&ro.set_len(0).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&ro.set_len(1 << 20).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&ro.cursor().write(b"abc").unwrap_err()), Some(libc::EBADF));
    assert_eq!(ro.len().unwrap(), data.len() as u64);
    assert_same(&read_all(&ro, 20 * KIB), &data, "content");
    ro.sync_all().unwrap();
    assert_same(&durable(&sim, "/ro"), &data, "fsync through a read-only handle syncs the file");

    let wo = cache.open("/ro", &OpenOptions::new().read(false).write(true)).unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(errno(&wo.read_at(&mut buf, 0).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&wo.read_at_with(&mut buf, 0, WriteFlags::DONTCACHE).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&wo.cursor().read(&mut buf).unwrap_err()), Some(libc::EBADF));
    wo.write_at(b"hello", 0).unwrap();
    assert_same(&read_all(&rw, 5), b"hello", "read back");
}

#[test]
fn block_device_bounds() {
    let sim = sim();
    let dev_len = 64 * KIB;
    sim.create_block_device(Path::new("/dev/sim0"), dev_len as u64);
    let cache = new_cache(&sim, QUIET);
    let dev = cache.open("/dev/sim0", &OpenOptions::new().read(true).write(true)).unwrap();
    assert!(dev.is_block_device());
    assert_eq!(dev.len().unwrap(), dev_len as u64);
    let end = dev_len as u64;

    // At or past the end: ENOSPC, nothing written.
    for off in [end, end + 1, end + 100 * KIB as u64, i64::MAX as u64] {
        assert_eq!(errno(&dev.write_at(b"data", off).unwrap_err()), Some(libc::ENOSPC), "write at {off}");
    }
    let mut c = dev.cursor();
    c.seek(SeekFrom::End(0)).unwrap();
    assert_eq!(errno(&c.write(b"x").unwrap_err()), Some(libc::ENOSPC));
    // Crossing the end: short.
    let block = pattern(2 * BLOCK, 7);
    assert_eq!(dev.write_at(&block, end - BLOCK as u64).unwrap(), BLOCK);
    assert_eq!(dev.write_at(&block[..100], end - 10).unwrap(), 10);
    assert_eq!(dev.write_at_with(&block, end - 3000, WriteFlags::DONTCACHE).unwrap(), 3000);
    assert_eq!(dev.len().unwrap(), end, "a block device never grows");
    // Reads: 0 at or past the end, short across it.
    let mut buf = vec![0u8; 2 * BLOCK];
    assert_eq!(dev.read_at(&mut buf, end).unwrap(), 0);
    assert_eq!(dev.read_at(&mut buf, end + 12345).unwrap(), 0);
    assert_eq!(dev.read_at(&mut buf, end - BLOCK as u64).unwrap(), BLOCK);
    let mut expect = block[..BLOCK].to_vec();
    expect[BLOCK - 10..].copy_from_slice(&block[..10]);
    expect[BLOCK - 3000..].copy_from_slice(&block[..3000]);
    assert_same(&buf[..BLOCK], &expect, "last block");
    // The size cannot change.
    for size in [0, 32 * KIB as u64, end + BLOCK as u64] {
        let e = dev.set_len(size).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "set_len({size}): {e}");
    }
    dev.set_len(end).expect("an unchanged size is fine");
    dev.sync_all().unwrap();
    let image = durable(&sim, "/dev/sim0");
    assert_eq!(image.len(), dev_len);
    assert_same(&image[dev_len - BLOCK..], &expect, "durable last block");
    assert!(image[..dev_len - BLOCK].iter().all(|&b| b == 0));

    // A device whose size is not a whole number of blocks is refused.
    sim.create_block_device(Path::new("/dev/odd"), 5000);
    let e = cache.open("/dev/odd", &OpenOptions::new().read(true).write(true)).err().expect("odd-sized device");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn bad_options_are_invalid_input() {
    for opts in [
        "capacity=abc",
        "capacity=-1",
        "capacity=",
        "capacity",
        "capacity=99999999999T",
        "bogus=1",
        "io=spdk",
        "folio_max=3000",
        "folio_max=2G",
        "io_max=0",
        "capacity=1M",
        "capacity=1G,dirty_limit=2G",
        "capacity=64M,dirty_background=32M,dirty_limit=16M",
        "dirty_limit=0",
        "expire_ms=0",
        "expire_ms=1.5",
        "io_depth=0",
        "io_depth=99999999999",
        "readahead_max=1K",
        "throttle_pause_ms_max=0",
    ] {
        let e = Config::from_options(opts).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{opts}: {e}");
    }
    // A Config built by hand is validated by the cache too.
    let bad = Config { dirty_background_bytes: 1 << 30, ..Config::default() };
    let e = Cache::with_sim(bad, sim()).err().expect("invalid config");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(WriteFlags::from_bits(2).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(WriteFlags::from_bits(1).unwrap(), WriteFlags::DONTCACHE);
}

fn assert_closed(f: &File) {
    let mut buf = [0u8; 8];
    assert_eq!(errno(&f.read_at(&mut buf, 0).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.read_at_with(&mut buf, 0, WriteFlags::DONTCACHE).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.write_at(b"late", 0).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.write_at_with(b"late", 0, WriteFlags::DONTCACHE).unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.sync_all().unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.sync_data().unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.len().unwrap_err()), Some(libc::EBADF));
    assert_eq!(errno(&f.set_len(0).unwrap_err()), Some(libc::EBADF));
}

#[test]
fn use_after_cache_close_is_ebadf() {
    let sim = sim();
    let data = pattern(30 * KIB, 8);
    // Cache::close.
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/a", &OpenOptions::read_write_create()).unwrap();
    f.write_at(&data, 0).unwrap();
    cache.close().unwrap();
    assert_same(&durable(&sim, "/a"), &data, "close wrote back and synced");
    assert_closed(&f);
    drop(f);
    // Dropping the cache closes it the same way.
    let cache2 = new_cache(&sim, QUIET);
    let g = cache2.open("/b", &OpenOptions::read_write_create()).unwrap();
    g.write_at(&data[..1000], 0).unwrap();
    drop(cache2);
    assert_same(&durable(&sim, "/b"), &data[..1000], "durable image");
    assert_closed(&g);
}

#[test]
fn open_flag_errors() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let e = cache.open("/missing", &OpenOptions::new().read(true)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = cache.open("/missing", &OpenOptions::new().read(true).write(true)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let f = cache.open("/exists", &OpenOptions::new().read(true).write(true).create_new(true)).unwrap();
    f.write_at(b"keep me", 0).unwrap();
    let e = cache.open("/exists", &OpenOptions::new().read(true).write(true).create_new(true)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    for bad in [
        OpenOptions::new().read(true).write(false).create(true),
        OpenOptions::new().read(true).write(false).create_new(true),
        OpenOptions::new().read(true).write(false).truncate(true),
        OpenOptions::new().read(false).write(false),
    ] {
        let e = cache.open("/exists", &bad).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
    assert_same(&read_all(&f, 100), b"keep me", "failed opens changed nothing");
    // Truncating through the cache drops cached (dirty) data too.
    let t = cache.open("/exists", &OpenOptions::new().read(true).write(true).truncate(true)).unwrap();
    assert_eq!(t.len().unwrap(), 0);
    assert_eq!(f.len().unwrap(), 0);
    t.sync_all().unwrap();
    assert!(durable(&sim, "/exists").is_empty());
}

#[test]
fn out_of_range_arguments_are_errors() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/r", &OpenOptions::read_write_create()).unwrap();
    assert_eq!(errno(&f.write_at(b"x", i64::MAX as u64).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(errno(&f.write_at(b"x", u64::MAX).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(errno(&f.set_len(u64::MAX).unwrap_err()), Some(libc::EFBIG));
    let mut buf = [7u8; 4];
    assert_eq!(f.read_at(&mut buf, u64::MAX).unwrap(), 0);
    assert_eq!(f.write_at(b"", 5).unwrap(), 0);
    assert_eq!(f.len().unwrap(), 0, "an empty write does not extend");
    let mut c = f.cursor();
    assert_eq!(c.seek(SeekFrom::Current(-1)).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(c.seek(SeekFrom::End(-1)).unwrap_err().kind(), ErrorKind::InvalidInput);
    f.sync_all().unwrap();
}

#[test]
fn dontcache_writes_are_dropped_once_written_back() {
    let sim = sim();
    let cache = new_cache(&sim, "capacity=64M,dirty_limit=16M,dirty_background=8M,folio_max=256K,expire_ms=60000");
    let f = cache.open("/u", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(2 << 20, 9);
    f.write_at_with(&data, 0, WriteFlags::DONTCACHE).unwrap();
    // (A normal read here would clear drop-behind, as in the kernel.)
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at_with(&mut back, 0, WriteFlags::DONTCACHE).unwrap(), data.len());
    assert_same(&back, &data, "readable while dirty");
    f.sync_all().unwrap();
    assert_same(&durable(&sim, "/u"), &data, "durable image");
    assert!(
        wait_until(Duration::from_secs(2), || cache.stats().cached_bytes == 0),
        "clean drop-behind folios are dropped: {:?}",
        cache.stats()
    );
    // An uncached read of uncached data leaves nothing behind either.
    back.fill(0);
    assert_eq!(f.read_at_with(&mut back, 0, WriteFlags::DONTCACHE).unwrap(), data.len());
    assert_same(&back, &data, "content");
    // Freed by the drop-behind reaper, a moment after the copy.
    assert!(
        wait_until(Duration::from_secs(2), || cache.stats().cached_bytes == 0),
        "an uncached read leaves nothing behind: {:?}",
        cache.stats()
    );
    // A normal read caches it.
    assert_same(&read_all(&f, data.len()), &data, "content");
    assert!(cache.stats().cached_bytes >= data.len() as u64);

    // Contrast: cached writes stay cached after writeback.
    let g = cache.open("/c", &OpenOptions::read_write_create()).unwrap();
    let before = cache.stats().cached_bytes;
    g.write_at(&data, 0).unwrap();
    g.sync_all().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(cache.stats().cached_bytes >= before + data.len() as u64);
}

#[test]
fn closing_a_file_does_not_write_back_but_closing_the_cache_does() {
    let sim = sim();
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/lazy", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(64 * KIB + 3, 10);
    f.write_at(&data, 0).unwrap();
    f.close();
    std::thread::sleep(Duration::from_millis(200));
    assert!(written(&sim, "/lazy").is_empty(), "closing a file wrote nothing back");
    assert!(durable(&sim, "/lazy").is_empty());
    assert!(cache.stats().dirty_bytes >= data.len() as u64);
    // The dirty data is still the file's content for a new handle.
    let g = cache.open("/lazy", &OpenOptions::new().read(true)).unwrap();
    assert_same(&read_all(&g, data.len() + 1), &data, "content");
    drop(g);
    cache.close().unwrap();
    assert_same(&durable(&sim, "/lazy"), &data, "durable image");
}

/// Writes 64 KiB uncached (which kicks the flusher at once) onto a device
/// whose first write fails, waits until the flusher's write is in flight,
/// then runs `Cache::sync_all` or `Cache::close`: if that reports success,
/// the data must be durable.
fn sync_or_close_during_failing_flusher_write(close: bool) {
    with_timeout(Duration::from_secs(30), move || {
        // Slow I/O so the flusher's write is still in flight.
        let sim = Arc::new(SimIo::new(SimConfig { seed: 5, latency_us_max: 300_000, ..SimConfig::default() }));
        let cache = new_cache(&sim, QUIET);
        let f = cache.open("/race", &OpenOptions::read_write_create()).unwrap();
        let data = pattern(64 * KIB, 11);
        sim.inject(Path::new("/race"), 0, Fault::WriteEio, 1);
        f.write_at_with(&data, 0, WriteFlags::DONTCACHE).unwrap();
        assert!(
            wait_until(Duration::from_secs(2), || cache.stats().writeback_bytes > 0),
            "the flusher should be writing"
        );
        let (what, result) =
            if close { ("Cache::close", cache.close()) } else { ("Cache::sync_all", cache.sync_all()) };
        if result.is_ok() {
            assert_same(&durable(&sim, "/race"), &data, &format!("{what} returned Ok, so the data must be durable"));
        }
    });
}

/// Engine bug: `sync_everything` (src/api/cache.rs), used by `Cache::sync_all`
/// and `Cache::close`, only looks at the outcome of its own writeback pass.
/// Blocks a flusher pass has already taken are not dirty when it collects,
/// so it waits for that pass (`wait_writeback_before_now`), then fixes the
/// size, syncs the store and returns Ok even though that pass failed and the
/// data is dirty again: the durable image is 64 KiB of zeros.
#[test]
fn cache_sync_all_reports_failed_concurrent_writeback() {
    sync_or_close_during_failing_flusher_write(false);
}

/// The same bug through `Cache::close`: it returns Ok, then drops the
/// re-dirtied data with the cache.
#[test]
fn cache_close_reports_failed_concurrent_writeback() {
    sync_or_close_during_failing_flusher_write(true);
}

/// Engine bug: an inode whose last handle is gone is forgotten as soon as
/// the flusher has written its data back (`Shared::forget_inode_if_idle`
/// via `Domain::requeue`), but written back is not synced: nobody ever calls
/// `sync` on its store. `Cache::close` ("writes back and syncs everything")
/// then returns Ok with that data not durable.
#[test]
fn cache_close_syncs_data_of_files_closed_earlier() {
    let sim = sim();
    let cache = new_cache(&sim, "capacity=16M,dirty_limit=4M,dirty_background=2M,folio_max=256K,expire_ms=20");
    let f = cache.open("/closed-early", &OpenOptions::read_write_create()).unwrap();
    let data = pattern(64 * KIB, 12);
    f.write_at(&data, 0).unwrap();
    drop(f);
    assert!(
        wait_until(Duration::from_secs(5), || {
            let st = cache.stats();
            st.dirty_bytes == 0 && st.writeback_bytes == 0 && written(&sim, "/closed-early") == data
        }),
        "periodic writeback should clean the file: {:?}",
        cache.stats()
    );
    // Time for the flusher to requeue the clean inode, which (today)
    // forgets it because no handle is open.
    std::thread::sleep(Duration::from_millis(100));
    cache.close().unwrap();
    assert_same(&durable(&sim, "/closed-early"), &data, "Cache::close returned Ok, so the data must be durable");
}

/// A writer at the dirty limit while every writeback fails gets the
/// failure's errno (EIO, or ENOSPC on a full disk) instead of hanging;
/// nothing of the refused write is applied, and once the disk recovers the
/// dirty data syncs.
#[test]
fn writer_at_the_dirty_limit_with_failing_writeback_gets_its_errno() {
    for errno in [libc::EIO, libc::ENOSPC] {
        writer_held_by_failing_writeback(errno);
    }
}

fn writer_held_by_failing_writeback(errno: i32) {
    with_timeout(Duration::from_secs(60), move || {
        let sim = sim();
        let cache = new_cache(&sim, "capacity=16M,dirty_limit=2M,dirty_background=1M,folio_max=256K");
        let f = cache.open("/full", &OpenOptions::read_write_create()).unwrap();
        sim.set_write_error_all(Some(errno));
        let chunk = vec![3u8; 256 * KIB];
        let mut written = 0u64;
        let err = loop {
            match f.write_at(&chunk, written) {
                Ok(n) => written += n as u64,
                Err(e) => break e,
            }
            assert!(written < 64 << 20, "writes never refused although no writeback succeeds");
        };
        assert_eq!(err.raw_os_error(), Some(errno), "{err}");
        assert_eq!(f.len().unwrap(), written, "the refused write changed nothing");
        sim.set_write_error_all(None);
        assert!(f.sync_all().is_err(), "the failed writebacks are reported once");
        f.sync_all().unwrap();
        let image = sim.durable_image(Path::new("/full")).unwrap();
        assert_eq!(image.len() as u64, written);
        assert!(image.iter().all(|&b| b == 3));
    });
}

/// Options that cannot work are refused up front: the in-memory `sim`
/// backend by name (it would report every fsync durable and keep nothing;
/// tests reach it through `Cache::with_sim`), the same through `Cache::new`,
/// and sizes whose derived thresholds would overflow.
#[test]
fn unusable_options_are_refused() {
    let err = Config::from_options("io=sim").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("uring"), "{err}");
    let mut config = Config::from_options("capacity=16M").unwrap();
    config.io = wbcache::IoKind::Sim;
    let err = Cache::new(config).err().expect("Cache::new refuses the sim backend");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("with_sim"), "{err}");
    let err = Config::from_options("dirty_limit=8388608T").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

/// While every write-back fails (a full file system), dirty memory still
/// stays under `dirty_limit`: fsyncs keep taking all dirty data into
/// writeback and the failures make it dirty again, and writers must not
/// fill the room it left meanwhile. Once they can make no progress,
/// writers get an error instead of hanging.
#[test]
fn failing_writeback_keeps_dirty_under_the_limit() {
    with_timeout(Duration::from_secs(60), || {
        let sim = sim();
        let cache = Arc::new(new_cache(&sim, QUIET));
        let f = Arc::new(cache.open("/full", &OpenOptions::read_write_create()).unwrap());
        sim.set_write_error_all(Some(libc::ENOSPC));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let syncer = {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    assert!(f.sync_data().is_err(), "nothing can be durable");
                }
            })
        };
        let chunk = vec![3u8; 64 * KIB];
        // Until writers are refused (each refusal takes a second), then two
        // more tries; the limit is 4M, so refusals must come well before
        // the 16M this could write.
        let mut refused = 0;
        for i in 0..256u64 {
            if f.write_at(&chunk, i * chunk.len() as u64).is_err() {
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        syncer.join().unwrap();
        let st = cache.stats();
        let limit = Config::from_options(QUIET).unwrap().dirty_limit_bytes;
        assert!(st.peak_dirty_bytes <= limit, "dirty peaked at {} over a limit of {limit}", st.peak_dirty_bytes);
        assert!(refused > 0, "writers were never refused");
    });
}

/// A file system's largest file size (1 MiB here) is enforced when the
/// write is made, as `pwrite(2)` does, not discovered at writeback (where
/// it would fail every fsync for good): a write at or past it is `EFBIG`,
/// one reaching past it is short, growing past it is `EFBIG` with the size
/// unchanged, and everything accepted is durable after fsync.
#[test]
fn the_largest_file_size_is_enforced_at_write_time() {
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, max_file_len: 1 << 20, ..SimConfig::default() }));
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/big", &OpenOptions::read_write_create()).unwrap();
    let limit = 1u64 << 20;
    assert_eq!(errno(&f.write_at(&[1u8; 10], limit).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(errno(&f.write_at(&[1u8; 10], 3 * limit).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(f.write_at(&[2u8; 300], limit - 100).unwrap(), 100, "a write reaching past the limit is short");
    assert_eq!(f.write_at(&[3u8; BLOCK], 0).unwrap(), BLOCK);
    assert_eq!(errno(&f.set_len(2 * limit).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(f.len().unwrap(), limit, "a refused resize changes nothing");
    f.sync_all().unwrap();
    let image = sim.durable_image(Path::new("/big")).unwrap();
    assert_eq!(image.len() as u64, limit);
    assert_same(&image[..BLOCK], &[3u8; BLOCK], "head");
    assert_same(&image[limit as usize - 100..], &[2u8; 100], "tail");

    // A limit inside a block (XFS, btrfs and tmpfs allow i64::MAX bytes):
    // writeback writes whole blocks, so no write may end in that last
    // partial block, or its writeback would fail for good.
    let limit = (1u64 << 20) + 100;
    let sim = Arc::new(SimIo::new(SimConfig { seed: 1, max_file_len: limit, ..SimConfig::default() }));
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/odd", &OpenOptions::read_write_create()).unwrap();
    assert_eq!(errno(&f.write_at(&[7u8; 50], 1 << 20).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(f.write_at(&[8u8; 300], (1 << 20) - 200).unwrap(), 200, "short at the last whole block");
    f.sync_all().unwrap();
    assert_eq!(sim.durable_image(Path::new("/odd")).unwrap().len() as u64, 1 << 20);
}

/// Vectored calls clip and fail as their plain twins: a gather list
/// crossing a block device's end or the largest file size comes back short
/// at the same byte (its later buffers untouched), one past them fails
/// whole; a handle of the wrong mode is `EBADF` before a bad list's
/// `EINVAL`; past `IOV_MAX` buffers a call is `EINVAL`, while the cursor,
/// as `std::fs::File`, writes the first `IOV_MAX` and comes back short.
#[test]
fn vectored_calls_clip_and_fail_as_plain_ones() {
    use std::io::{IoSlice, IoSliceMut};
    let sim = Arc::new(SimIo::new(SimConfig { seed: 3, max_file_len: 1 << 20, ..SimConfig::default() }));
    let cache = new_cache(&sim, QUIET);
    let a = pattern(3000, 1);
    let b = pattern(5000, 2);
    let c = pattern(700, 3);
    let list = [IoSlice::new(&a), IoSlice::new(&[]), IoSlice::new(&b), IoSlice::new(&c)];
    let joined = [&a[..], &b[..], &c[..]].concat();

    // The largest file size: short inside the second buffer, then EFBIG.
    let f = cache.open("/v", &OpenOptions::read_write_create()).unwrap();
    let limit = 1u64 << 20;
    assert_eq!(f.write_vectored_at(&list, limit - 4000).unwrap(), 4000);
    assert_eq!(errno(&f.write_vectored_at(&list, limit).unwrap_err()), Some(libc::EFBIG));
    assert_eq!(f.len().unwrap(), limit);
    let mut tail = vec![0u8; 4000];
    assert_eq!(f.read_at(&mut tail, limit - 4000).unwrap(), 4000);
    assert_same(&tail, &joined[..4000], "the part that fit");

    // A block device's end: short in the third buffer, ENOSPC at the end.
    sim.create_block_device(Path::new("/dev/simv"), 16 * KIB as u64);
    let dev = cache.open("/dev/simv", &OpenOptions::read_write_create()).unwrap();
    let end = 16 * KIB as u64;
    assert_eq!(dev.write_vectored_at(&list, end - 8500).unwrap(), 8500);
    assert_eq!(errno(&dev.write_vectored_at(&list, end).unwrap_err()), Some(libc::ENOSPC));
    // Read back through a scatter list shaped unlike the gather list.
    let (mut x, mut y) = (vec![0u8; 1], vec![0u8; 9000]);
    let n = dev.read_vectored_at(&mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)], end - 8500).unwrap();
    assert_eq!(n, 8500, "short at the device's end");
    assert_same(&[&x[..], &y[..8499]].concat(), &joined[..8500], "device tail");

    // The handle's mode before the list, then the list's own checks.
    let ro = cache.open("/v", &OpenOptions::new().read(true)).unwrap();
    let too_many = vec![IoSlice::new(b"x"); 1025];
    assert_eq!(errno(&ro.write_vectored_at(&too_many, 0).unwrap_err()), Some(libc::EBADF));
    let e = f.write_vectored_at(&too_many, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let mut one = [0u8; 1];
    let mut many: Vec<IoSliceMut> = Vec::new();
    many.extend((0..1025).map(|_| IoSliceMut::new(&mut [])));
    many.push(IoSliceMut::new(&mut one));
    assert_eq!(f.read_vectored_at(&mut many, 0).unwrap_err().kind(), ErrorKind::InvalidInput);

    // The cursor: IOV_MAX buffers per call, the rest by the caller's loop.
    let g = cache.open("/cursor", &OpenOptions::read_write_create()).unwrap();
    let bytes: Vec<[u8; 1]> = (0..2000u32).map(|i| [(i % 251) as u8]).collect();
    let mut slices: Vec<IoSlice> = bytes.iter().map(|b| IoSlice::new(b)).collect();
    let mut rest = &mut slices[..];
    let mut cur = g.cursor();
    let first = cur.write_vectored(rest).unwrap();
    assert_eq!(first, 1024, "the first IOV_MAX buffers");
    IoSlice::advance_slices(&mut rest, first);
    while !rest.is_empty() {
        let n = cur.write_vectored(rest).unwrap();
        IoSlice::advance_slices(&mut rest, n);
    }
    let want: Vec<u8> = bytes.iter().map(|b| b[0]).collect();
    assert_same(&read_all(&g, 2000), &want, "cursor writes");
    let mut back = vec![[0u8; 1]; 1500];
    let mut dsts: Vec<IoSliceMut> = back.iter_mut().map(|b| IoSliceMut::new(b)).collect();
    let mut rc = g.cursor();
    assert_eq!(rc.read_vectored(&mut dsts).unwrap(), 1024, "the first IOV_MAX buffers");
    assert_eq!(rc.position(), 1024);
    drop(dsts);
    assert_same(&back[..1024].concat(), &want[..1024], "cursor reads");
}

/// A flusher facing writeback that keeps failing backs off (50 ms, then
/// doubling up to a second) instead of retrying twenty times a second, and
/// writes the data back on its own soon after the failure clears.
#[test]
fn failing_writeback_is_retried_with_backoff() {
    with_timeout(Duration::from_secs(60), || {
        let sim = sim();
        let cache = new_cache(&sim, "capacity=16M,dirty_limit=8M,dirty_background=64K,expire_ms=50");
        let f = cache.open("/retried", &OpenOptions::read_write_create()).unwrap();
        sim.set_write_error_all(Some(libc::EIO));
        f.write_at(&[5u8; 64 * KIB], 0).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        let failed = cache.stats().writeback_errors;
        // Without backoff: ~60 rounds in 3 s; with it: 50+100+...+800+1000
        // ms of waits, about 7 rounds.
        assert!((1..=12).contains(&failed), "{failed} failed writebacks in 3 s");
        sim.set_write_error_all(None);
        let started = std::time::Instant::now();
        while cache.stats().dirty_bytes > 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "the data never went out after the fault cleared");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(f.sync_all().is_err(), "the failures are still reported once");
        f.sync_all().unwrap();
        assert_eq!(sim.durable_image(Path::new("/retried")).unwrap(), vec![5u8; 64 * KIB]);
    });
}

/// A miss over two single-block folios (a 4 KiB read at an odd block's
/// middle) is one vectored read of the store, and an error on it fails
/// the read and leaves both folios uncached: once the fault is gone, each
/// block reads back whole, from the store.
#[test]
fn a_miss_over_neighbouring_folios_is_one_read_and_fails_whole() {
    let sim = sim();
    let data = pattern(16 * BLOCK, 7);
    {
        let cache = new_cache(&sim, QUIET);
        let f = cache.open("/pair", &OpenOptions::read_write_create()).unwrap();
        f.write_at(&data, 0).unwrap();
        cache.close().unwrap();
    }
    let cache = new_cache(&sim, QUIET);
    let f = cache.open("/pair", &OpenOptions::new().read(true)).unwrap();
    let at = BLOCK + BLOCK / 2; // blocks 1 and 2: two order-0 folios
    let mut buf = vec![0u8; BLOCK];
    let reads_before = sim.stats().reads;
    assert_eq!(f.read_at(&mut buf, at as u64).unwrap(), BLOCK);
    assert_same(&buf, &data[at..at + BLOCK], "the read across two folios");
    assert_eq!(sim.stats().reads - reads_before, 1, "two neighbouring placeholders, one read");

    let at = 5 * BLOCK + BLOCK / 2; // blocks 5 and 6, the fault on 6
    sim.inject(Path::new("/pair"), 6, Fault::ReadEio, 1);
    let err = f.read_at(&mut buf, at as u64).unwrap_err();
    assert_eq!(errno(&err), Some(libc::EIO), "{err}");
    for block in [5, 6] {
        let mut one = vec![0u8; BLOCK];
        assert_eq!(f.read_at(&mut one, (block * BLOCK) as u64).unwrap(), BLOCK);
        assert_same(&one, &data[block * BLOCK..(block + 1) * BLOCK], "a block of the failed read");
    }
    assert_eq!(sim.stats().read_errors, 1);
    cache.close().unwrap();
}
