//! Removing a file through the cache, and making the cache forget one.
//!
//! `Cache::remove_file` is `unlink(2)` plus what the cache owes the file
//! when that was its last name: its cached folios, dirty ones included, are
//! discarded without ever being written — at once when no handle is open,
//! at the last close otherwise — and its inode leaves the inode table, so a
//! new file that gets the same inode number (ext4 hands freed numbers out
//! again) is a new, empty inode and never shows the old bytes. Handles open
//! at the unlink keep reading and writing their file until they close. A
//! file with another hard link left, and a block device whose node is
//! removed, keep their data cached and written back as usual. Errors are
//! unlink's, with their errno (`raw_os_error()`), as `std::fs::remove_file`'s.
//!
//! `Cache::forget` writes back and syncs a cached file that no handle has
//! open and drops it, so the next open reads the store afresh (size
//! included) after another process changed it; without it the cache keeps
//! serving its own copy, which these tests show too. It returns false for
//! a file that is open, not cached or missing.
//!
//! Most real-file tests run on the temporary directory's file system with
//! a configuration under which nothing is written back on its own (dirty
//! data stays below the background threshold and expires after an hour),
//! so every byte that reaches a store was written because a test asked, or
//! wrongly; the inode-reuse test and the races run with writeback busy
//! instead. The simulated-backend tests count every byte written to the
//! sim. The races pit removals against writers, forgets and recreations,
//! on the sim and on real files. The block-device test needs root and a
//! loop device; it skips with a printed reason without them, except under
//! `CI=true`, where it fails. A removal after `Cache::close` cannot be
//! written: `close` consumes the cache.

use crate::common;
use common::{pattern, read_all};

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::loopdev::{mknod_block, LoopDevice};
use common::programs::TempDir;
use common::{assert_same, Rng};
use wbcache::errno_of;
use wbcache::sim::{SimConfig, SimIo};
use wbcache::{Cache, Config, OpenOptions, Stats};

/// Nothing is written back unless a test asks: dirty data stays far below
/// the background threshold and expires after an hour.
const NO_WRITEBACK: &str = "capacity=64M,dirty_limit=32M,dirty_background=31M,expire_ms=3600000";

/// Writeback running all the time (small thresholds, a 20 ms expiry), for
/// the races: discards then meet writeback in flight.
const BUSY_WRITEBACK: &str = "capacity=8M,dirty_limit=2M,dirty_background=512K,folio_max=256K,expire_ms=20";

const KIB: usize = 1 << 10;

fn written_total(stats: &Stats) -> u64 {
    stats.written_bytes_by_reason.iter().sum()
}

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true)
}

fn create_new() -> OpenOptions {
    OpenOptions::read_write_create().create_new(true)
}

fn assert_gone(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => panic!("{} should be gone, is {other:?}", path.display()),
    }
}

/// The last name of a file with dirty data and no open handle goes: its
/// data leaves the cache at once, unwritten. Then, round after round, a new
/// file appears under the same name (through the cache, or behind its back
/// with `std::fs::write`) and reads as itself: empty, or exactly what was
/// written, never the removed file's bytes, and nothing of the removed
/// files was ever written. The cache lets go of a removed file's
/// descriptor promptly, even with the flusher's periodic pass an hour away
/// (so the inode numbers may come back; the next test makes sure they do).
#[test]
fn removing_the_last_name_discards_dirty_data_unwritten() {
    const ROUNDS: u64 = 50;
    let dir = TempDir::new("remove-reuse");
    let path = dir.0.join("f");
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let mut reused = 0;
    let mut previous_ino = None;
    for round in 0..ROUNDS {
        let outside = round % 3 == 2;
        // The new file under the old name: empty through the cache, or
        // created by another program with content of its own.
        let expected_start = if outside {
            let content = pattern(100 + round as usize, 1000 + round);
            std::fs::write(&path, &content).unwrap();
            content
        } else {
            Vec::new()
        };
        let file = if outside { cache.open(&path, &rw()) } else { cache.open(&path, &create_new()) }
            .unwrap_or_else(|e| panic!("round {round}: open: {e}"));
        let ino = std::fs::metadata(&path).unwrap().ino();
        if previous_ino == Some(ino) {
            reused += 1;
        }
        assert_same(
            &read_all(&file),
            &expected_start,
            &format!("round {round}: a new file (inode {ino}) reads as new"),
        );

        // A short write at the start: a stale inode would keep its old,
        // longer size and show its old bytes after these.
        let marker = pattern(1000, 2000 + round);
        file.write_at(&marker, 0).unwrap();
        let mut want = expected_start.clone();
        if want.len() < marker.len() {
            want.resize(marker.len(), 0);
        }
        want[..marker.len()].copy_from_slice(&marker);
        assert_same(&read_all(&file), &want, &format!("round {round}: after a short write"));

        // Then the data that must never be seen again: large, at an
        // unaligned offset, its size changing from round to round.
        let old = pattern(64 * KIB + 4096 * (round as usize % 7) + 333, round);
        let at = 4096 + 17 * round as usize;
        file.write_at(&old, at as u64).unwrap();
        want.resize(at + old.len(), 0);
        want[at..].copy_from_slice(&old);
        assert_same(&read_all(&file), &want, &format!("round {round}: after the large write"));
        drop(file);

        let before = cache.stats();
        assert!(before.dirty_bytes >= old.len() as u64, "round {round}: dirty {} bytes", before.dirty_bytes);
        assert_eq!(before.open_inodes, 1, "round {round}: the file is cached with no handle open");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            expected_start.len() as u64,
            "round {round}: nothing was written back before the removal"
        );

        cache.remove_file(&path).unwrap_or_else(|e| panic!("round {round}: remove_file: {e}"));
        let after = cache.stats();
        assert_eq!(after.dirty_bytes, 0, "round {round}: the removed file's dirty data is discarded at once");
        assert_eq!(after.cached_bytes, 0, "round {round}: and all its cached data");
        assert_eq!(after.open_inodes, 0, "round {round}: its inode left the table");
        // Promptly, not at the flusher's next look an hour away (a
        // readahead job of the last reads may hold the inode a moment).
        assert!(
            common::wait_until(Duration::from_secs(5), || deleted_descriptors_under(&dir.0) == 0),
            "round {round}: the removed file's descriptor is still open"
        );
        assert_gone(&path);
        previous_ino = Some(ino);
    }
    let stats = cache.stats();
    assert_eq!(written_total(&stats), 0, "nothing of a removed file is ever written: {stats:?}");
    eprintln!(
        "inode number reused in {reused} of {} rounds; descriptors of removed files still open: {}",
        ROUNDS - 1,
        deleted_descriptors_under(&dir.0)
    );
    cache.close().unwrap();
}

/// Descriptors of this process open on removed files under `dir`.
fn deleted_descriptors_under(dir: &Path) -> usize {
    // The kernel names them by their canonical path.
    let prefix = format!("{}/", dir.canonicalize().unwrap().display());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|target| target.display().to_string())
        .filter(|target| target.starts_with(&prefix) && target.ends_with(" (deleted)"))
        .count()
}

/// Whether `dir` is on ext4, which hands a freed inode number to the next
/// file created.
fn on_ext4(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a valid out pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == 0xEF53
}

/// Inode numbers do come back: here writeback runs (a 20 ms expiry), so
/// the flusher lets go of a removed file's inode soon and the cache closes
/// its descriptor, which frees the number for the next file. Each round
/// removes a file whose data is cached (dirty, or partly written back),
/// waits for that descriptor to close, then creates a file under the same
/// name — through the cache, or behind its back — and checks that it reads
/// as itself, never as the removed file. On ext4 the number must have come
/// back at least once, or the test proved nothing: after 50 rounds without
/// it, rounds go on (up to 400) until it does, since the other tests of
/// this binary, running beside it, create files of their own and can take
/// the freed number first.
#[test]
fn a_reused_inode_number_never_shows_a_removed_files_data() {
    const ROUNDS: u64 = 50;
    const MOST_ROUNDS: u64 = 400;
    let dir = TempDir::new("remove-reuse-wb");
    let path = dir.0.join("f");
    let cache =
        Cache::new(Config::from_options("capacity=64M,dirty_limit=32M,dirty_background=31M,expire_ms=20").unwrap())
            .unwrap();
    let mut reused = 0;
    let mut previous_ino = None;
    let mut rounds = 0;
    for round in 0..MOST_ROUNDS {
        if round >= ROUNDS && reused > 0 {
            break;
        }
        rounds += 1;
        let outside = round % 2 == 1;
        let expected = if outside {
            let content = pattern(300 + round as usize, 3000 + round);
            std::fs::write(&path, &content).unwrap();
            content
        } else {
            Vec::new()
        };
        let file = if outside { cache.open(&path, &rw()) } else { cache.open(&path, &create_new()) }.unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        if previous_ino == Some(ino) {
            reused += 1;
        }
        assert_same(&read_all(&file), &expected, &format!("round {round}: a new file (inode {ino}) reads as new"));
        let old = pattern(96 * KIB + 4096 * (round as usize % 5) + 77, 4000 + round);
        file.write_at(&old, 1000).unwrap();
        if round % 4 == 0 {
            file.sync_data().unwrap();
        }
        drop(file);
        cache.remove_file(&path).unwrap();
        let stats = cache.stats();
        assert_eq!(
            (stats.dirty_bytes, stats.cached_bytes, stats.open_inodes),
            (0, 0, 0),
            "round {round}: the removed file left the cache"
        );
        assert!(
            common::wait_until(Duration::from_secs(10), || deleted_descriptors_under(&dir.0) == 0),
            "round {round}: the removed file's descriptor is still open after 10 s"
        );
        previous_ino = Some(ino);
    }
    eprintln!("inode number reused in {reused} of {} rounds", rounds - 1);
    if on_ext4(&dir.0) {
        assert!(reused > 0, "ext4 never gave a removed file's inode number to the next file");
    }
    cache.close().unwrap();
}

/// A handle open when the last name goes keeps its file: it reads back
/// what it wrote and writes more, while a new file under the name is
/// another inode. At its close the data goes, and none of it was ever
/// written to the (unlinked) store.
#[test]
fn an_open_handle_keeps_the_removed_file_until_it_closes() {
    let dir = TempDir::new("remove-open");
    let path = dir.0.join("f");
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let file = cache.open(&path, &create_new()).unwrap();
    let first = pattern(100 * KIB + 7, 1);
    file.write_at(&first, 0).unwrap();
    // A descriptor of our own on the store, to look at it once unlinked.
    let mut peek = std::fs::File::open(&path).unwrap();
    let dirty = cache.stats().dirty_bytes;
    assert!(dirty >= first.len() as u64, "dirty {dirty}");

    cache.remove_file(&path).unwrap();
    assert_gone(&path);
    assert_eq!(peek.metadata().unwrap().nlink(), 0, "the store has no name left");
    let stats = cache.stats();
    assert_eq!(stats.open_inodes, 0, "the inode left the table");
    assert_eq!(stats.dirty_bytes, dirty, "an open handle keeps the data");
    assert_same(&read_all(&file), &first, "read through the open handle after the removal");

    let second = pattern(50 * KIB + 11, 2);
    file.write_at(&second, first.len() as u64 + 5).unwrap();
    let mut want = first.clone();
    want.resize(first.len() + 5, 0);
    want.extend_from_slice(&second);
    assert_same(&read_all(&file), &want, "the open handle writes on after the removal");
    assert!(cache.stats().dirty_bytes > dirty, "more dirty data while the handle is open");

    // A new file under the same name is a new inode, empty, and writes to
    // it stay out of the removed file.
    let new = cache.open(&path, &create_new()).unwrap();
    assert_eq!(new.len().unwrap(), 0, "the new file under the name is empty");
    let fresh = pattern(3000, 3);
    new.write_at(&fresh, 0).unwrap();
    assert_same(&read_all(&new), &fresh, "the new file");
    assert_same(&read_all(&file), &want, "the removed file, next to the new one");
    drop(new);
    cache.remove_file(&path).unwrap();

    assert!(cache.stats().dirty_bytes > 0, "the open handle's data is still there");
    drop(file);
    let stats = cache.stats();
    assert_eq!(stats.dirty_bytes, 0, "the last close discards the removed file's data");
    assert_eq!(stats.cached_bytes, 0, "all of it");
    cache.sync_all().unwrap();
    let stats = cache.stats();
    assert_eq!(written_total(&stats), 0, "nothing was written back: {stats:?}");
    assert_eq!(stats.dirty_bytes, 0);
    let mut on_store = Vec::new();
    peek.read_to_end(&mut on_store).unwrap();
    assert_eq!(on_store.len(), 0, "the unlinked store never got the data");
    cache.close().unwrap();
    assert_eq!(peek.metadata().unwrap().len(), 0, "not even at the cache's close");
}

/// With another hard link left, removing a name changes nothing for the
/// data: it stays cached and dirty, is read through the other name, and is
/// written back by a sync. Removing the last name then discards what is
/// dirty by then.
#[test]
fn a_hard_link_left_keeps_the_data_cached_and_written_back() {
    let dir = TempDir::new("remove-link");
    let (a, b) = (dir.0.join("a"), dir.0.join("b"));
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let data = pattern(200 * KIB + 99, 4);
    let file = cache.open(&a, &create_new()).unwrap();
    file.write_at(&data, 0).unwrap();
    drop(file);
    std::fs::hard_link(&a, &b).unwrap();
    let dirty = cache.stats().dirty_bytes;
    assert!(dirty >= data.len() as u64, "dirty {dirty}");

    cache.remove_file(&a).unwrap();
    assert_gone(&a);
    let stats = cache.stats();
    assert_eq!(stats.dirty_bytes, dirty, "another name is left: the data stays dirty");
    assert_eq!(stats.open_inodes, 1, "and the inode cached");
    assert_eq!(std::fs::metadata(&b).unwrap().len(), 0, "nothing written back yet");
    let other = cache.open(&b, &rw()).unwrap();
    assert_eq!(cache.stats().open_inodes, 1, "the other name reaches the same inode");
    assert_same(&read_all(&other), &data, "read through the other name (from the cache: the store is empty)");

    cache.sync_all().unwrap();
    assert_eq!(cache.stats().dirty_bytes, 0);
    assert!(written_total(&cache.stats()) >= data.len() as u64);
    assert_same(&std::fs::read(&b).unwrap(), &data, "the other name's bytes on disk after sync_all");

    // Now the last name, with new dirty data over a clean part.
    let more = pattern(8 * KIB, 5);
    other.write_at(&more, 4096).unwrap();
    drop(other);
    let written = written_total(&cache.stats());
    assert!(cache.stats().dirty_bytes > 0);
    cache.remove_file(&b).unwrap();
    assert_gone(&b);
    let stats = cache.stats();
    assert_eq!((stats.dirty_bytes, stats.cached_bytes, stats.open_inodes), (0, 0, 0), "the last name went");
    cache.sync_all().unwrap();
    assert_eq!(written_total(&cache.stats()), written, "the discarded data was never written");
    cache.close().unwrap();
}

/// `forget` writes a closed file back and drops it, so a change another
/// program makes afterwards is seen at the next open, size included.
/// Without it the cache keeps serving its own, now stale, copy: the
/// behaviour `forget` exists to avoid, shown here on a second file.
#[test]
fn forget_writes_back_and_the_next_open_sees_outside_changes() {
    let dir = TempDir::new("forget");
    let (a, b, c) = (dir.0.join("a"), dir.0.join("b"), dir.0.join("c"));
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();

    let data = pattern(40 * KIB + 5, 6);
    let file = cache.open(&a, &create_new()).unwrap();
    file.write_at(&data, 0).unwrap();
    drop(file);
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 0, "dirty, not written yet");
    assert!(cache.stats().dirty_bytes > 0);
    assert!(cache.forget(&a).unwrap(), "a closed cached file is forgotten");
    let stats = cache.stats();
    assert_eq!((stats.dirty_bytes, stats.open_inodes), (0, 0), "written back and dropped");
    assert_eq!(stats.cached_bytes, 0, "nothing of it stays cached");
    assert_same(&std::fs::read(&a).unwrap(), &data, "forget wrote the data back");
    assert!(!cache.forget(&a).unwrap(), "a second forget finds nothing cached");

    // Another program rewrites it, longer.
    let outside = pattern(90 * KIB + 3, 7);
    std::fs::write(&a, &outside).unwrap();
    let file = cache.open(&a, &rw()).unwrap();
    assert_eq!(file.len().unwrap(), outside.len() as u64, "the new size");
    assert_same(&read_all(&file), &outside, "the new content after forget");
    drop(file);

    // The contrast: no forget, the cache keeps its copy (size included)
    // over what the other program wrote.
    let cached = pattern(24 * KIB + 1, 8);
    let file = cache.open(&b, &create_new()).unwrap();
    file.write_at(&cached, 0).unwrap();
    drop(file);
    cache.sync_all().unwrap();
    assert_same(&std::fs::read(&b).unwrap(), &cached, "b on disk");
    let changed = pattern(70 * KIB, 9);
    std::fs::write(&b, &changed).unwrap();
    let file = cache.open(&b, &rw()).unwrap();
    let stale = read_all(&file);
    eprintln!(
        "without forget: the cache serves {} bytes of its own copy over {} bytes on disk",
        stale.len(),
        changed.len()
    );
    assert_same(&stale, &cached, "without forget the reopened file is the cache's stale copy");
    drop(file);
    assert!(cache.forget(&b).unwrap());
    let file = cache.open(&b, &rw()).unwrap();
    assert_same(&read_all(&file), &changed, "after forget the outside change shows");

    // An open file is not forgotten, and keeps its (dirty) data.
    let dirty_data = pattern(16 * KIB, 10);
    file.write_at(&dirty_data, 0).unwrap();
    let dirty = cache.stats().dirty_bytes;
    assert!(dirty > 0);
    assert!(!cache.forget(&b).unwrap(), "an open file is not forgotten");
    assert_eq!(cache.stats().dirty_bytes, dirty, "and its dirty data is left as it was");
    let mut want = changed.clone();
    want[..dirty_data.len()].copy_from_slice(&dirty_data);
    assert_same(&read_all(&file), &want, "still cached");
    drop(file);
    let reopened = cache.open(&b, &rw()).unwrap();
    assert_same(&read_all(&reopened), &want, "reopened: the same cached inode");
    drop(reopened);

    // Names that reach no cached file.
    assert!(!cache.forget(dir.0.join("missing")).unwrap(), "a missing path");
    std::fs::write(&c, b"never opened through the cache").unwrap();
    assert!(!cache.forget(&c).unwrap(), "a file the cache never opened");
    assert!(!cache.forget(&dir.0).unwrap(), "a directory");

    // A symlink names its target.
    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&b, &link).unwrap();
    assert!(cache.forget(&link).unwrap(), "forget through a symlink forgets its target");
    assert_same(&std::fs::read(&b).unwrap(), &want, "and wrote it back");
    assert!(cache.forget(&a).unwrap(), "a, cached again since its reopening");
    assert_eq!(cache.stats().open_inodes, 0);
    cache.close().unwrap();
}

/// Errors are unlink(2)'s, with their errno (as std::fs::remove_file's); a
/// symlink is removed, not its target.
#[test]
fn remove_file_errors_are_unlinks() {
    let dir = TempDir::new("remove-errors");
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();

    let missing = dir.0.join("missing");
    let err = cache.remove_file(&missing).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "the OS's error, as std::fs::remove_file's: {err}");

    let sub = dir.0.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let err = cache.remove_file(&sub).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EISDIR), "{err}");
    assert!(sub.is_dir(), "the directory is still there");

    let err = cache.remove_file(sub.join("missing").join("deeper")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOENT, "{err}");

    // A symlink to a cached file: the link goes, the file and its dirty
    // data stay.
    let target = dir.0.join("target");
    let data = pattern(12 * KIB, 11);
    let file = cache.open(&target, &create_new()).unwrap();
    file.write_at(&data, 0).unwrap();
    drop(file);
    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let dirty = cache.stats().dirty_bytes;
    cache.remove_file(&link).unwrap();
    assert_gone(&link);
    assert!(target.exists());
    assert_eq!(cache.stats().dirty_bytes, dirty, "removing a symlink keeps its target's data");
    let file = cache.open(&target, &rw()).unwrap();
    assert_same(&read_all(&file), &data, "the target, through the cache");
    drop(file);
    cache.close().unwrap();
    assert_same(&std::fs::read(&target).unwrap(), &data, "written back at close");
}

fn sim_cache(options: &str, config: SimConfig) -> (Arc<SimIo>, Cache) {
    let sim = Arc::new(SimIo::new(config));
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap();
    (sim, cache)
}

/// On the simulated backend, which counts every byte written: a removed
/// file's dirty data never reaches the sim, not even at the cache's close,
/// while a file left in place is written then (so the count can move).
#[test]
fn sim_a_removed_files_data_is_never_written() {
    let (sim, cache) = sim_cache(NO_WRITEBACK, SimConfig { seed: 21, ..SimConfig::default() });
    sim.record_writes();
    let (gone, kept, open) = (Path::new("/gone"), Path::new("/kept"), Path::new("/open"));
    let data = pattern(300 * KIB + 1, 12);
    for path in [gone, kept, open] {
        let file = cache.open(path, &create_new()).unwrap();
        file.write_at(&data, 0).unwrap();
    }
    let dirty = cache.stats().dirty_bytes;
    assert!(dirty >= 3 * data.len() as u64);

    cache.remove_file(gone).unwrap();
    assert!(sim.written_image(gone).is_none(), "the name is gone from the sim");
    let after = cache.stats().dirty_bytes;
    assert!(after <= dirty - data.len() as u64, "the removed file's dirty data left: {dirty} -> {after}");
    assert_eq!(cache.stats().open_inodes, 2);

    // Removed with a handle open: writes on, then the close discards.
    let handle = cache.open(open, &rw()).unwrap();
    cache.remove_file(open).unwrap();
    assert!(sim.written_image(open).is_none());
    handle.write_at(&data, data.len() as u64).unwrap();
    let mut want = data.clone();
    want.extend_from_slice(&data);
    assert_same(&read_all(&handle), &want, "the open handle of a removed sim file");
    drop(handle);
    assert_eq!(cache.stats().open_inodes, 1);
    let only_kept = cache.stats().dirty_bytes;
    assert!(only_kept >= data.len() as u64 && only_kept < 2 * data.len() as u64, "dirty {only_kept}");
    assert_eq!(sim.stats().written_bytes, 0, "nothing written so far");

    cache.close().unwrap();
    let log = sim.write_log();
    assert!(!log.is_empty(), "the file left in place was written at close");
    for w in &log {
        assert_eq!(w.path, kept, "only the file left in place was ever written: {w:?}");
    }
    assert_eq!(sim.written_image(kept).unwrap(), data, "and holds its data");
}

/// A block device's blocks outlive any node naming it: removing the node
/// (the sim's, here) keeps the cached data, which a sync then writes.
#[test]
fn sim_removing_a_block_device_node_keeps_its_data() {
    let (sim, cache) = sim_cache(NO_WRITEBACK, SimConfig { seed: 22, ..SimConfig::default() });
    let node = Path::new("/dev/sim0");
    sim.create_block_device(node, 4 << 20);
    let data = pattern(256 * KIB, 13);
    let file = cache.open(node, &rw()).unwrap();
    file.write_at(&data, 64 * KIB as u64).unwrap();
    drop(file);
    let dirty = cache.stats().dirty_bytes;
    assert!(dirty >= data.len() as u64);
    cache.remove_file(node).unwrap();
    assert!(sim.written_image(node).is_none(), "the node is gone");
    let stats = cache.stats();
    assert_eq!((stats.dirty_bytes, stats.open_inodes), (dirty, 1), "the device's data stays cached, dirty");
    assert_eq!(sim.stats().written_bytes, 0);
    cache.sync_all().unwrap();
    assert_eq!(cache.stats().dirty_bytes, 0);
    assert!(sim.stats().written_bytes >= data.len() as u64, "and is written back: {:?}", sim.stats());
    cache.close().unwrap();
}

/// Root, or why not. Under `CI=true` a missing requirement is a failure,
/// elsewhere a printed skip.
fn skip(what: &str, why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but {what} cannot run: {why}");
    }
    eprintln!("SKIPPED {what}: {why}");
}

/// The same on a real loop device: its second node, made with `mknod`, is
/// removed with dirty data cached; the data stays, is read through the
/// device's own node, and reaches the device at a sync.
#[test]
fn removing_a_block_device_node_keeps_its_data() {
    const WHAT: &str = "removing_a_block_device_node_keeps_its_data";
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return skip(WHAT, "not root");
    }
    let dev = match LoopDevice::create("remove-blockdev", 16 << 20) {
        Ok(dev) => dev,
        Err(e) => return skip(WHAT, &format!("no loop device ({e})")),
    };
    let alias = dev.dir.0.join("alias");
    if let Err(e) = mknod_block(&alias, std::fs::metadata(&dev.device).unwrap().rdev()) {
        return skip(WHAT, &format!("mknod: {e}"));
    }
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let data = pattern(300 * KIB, 14);
    let file = cache.open(&alias, &rw()).unwrap();
    file.write_at(&data, 8 * KIB as u64).unwrap();
    drop(file);
    let dirty = cache.stats().dirty_bytes;
    assert!(dirty >= data.len() as u64);
    cache.remove_file(&alias).unwrap();
    assert_gone(&alias);
    let stats = cache.stats();
    assert_eq!((stats.dirty_bytes, stats.open_inodes), (dirty, 1), "the device's data stays cached, dirty");
    let file = cache.open(&dev.device, &rw()).unwrap();
    assert_eq!(cache.stats().open_inodes, 1, "the device's own node reaches the same inode");
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_at(&mut back, 8 * KIB as u64).unwrap(), data.len());
    assert_same(&back, &data, "read through the device's node");
    drop(file);
    cache.sync_all().unwrap();
    assert_eq!(cache.stats().dirty_bytes, 0);
    cache.close().unwrap();
    let mut on_device = vec![0u8; data.len()];
    let mut raw = std::fs::File::open(&dev.device).unwrap();
    std::io::Seek::seek(&mut raw, std::io::SeekFrom::Start(8 * KIB as u64)).unwrap();
    raw.read_exact(&mut on_device).unwrap();
    assert_same(&on_device, &data, "on the device after sync_all");
}

/// Writers, each on its own file, open, write, read back and close again
/// and again (sometimes syncing), while another thread removes their
/// files, forgets them and recreates them, under constant writeback. A
/// handle always reads back what it just wrote (a removal does not take
/// an open file's data), nothing panics or hangs, and once every file is
/// closed and removed nothing is dirty or cached and no inode is left.
/// The writers of [`race`] write below this offset, the recreations above.
const WRITER_SPAN: u64 = 256 * KIB as u64;

fn race(cache: Cache, paths: Vec<PathBuf>, seed: u64, writer_rounds: usize) {
    let cache = &cache;
    let stop = AtomicBool::new(false);
    let (removed, forgotten, recreated) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        let writers: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(t, path)| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed * 100 + t as u64);
                    for round in 0..writer_rounds {
                        let file = cache
                            .open(path, &OpenOptions::read_write_create())
                            .unwrap_or_else(|e| panic!("writer {t} round {round}: open: {e}"));
                        for _ in 0..rng.between(1, 4) {
                            let len = rng.between(1, 48 * KIB);
                            let off = rng.below(WRITER_SPAN as usize - len) as u64;
                            let data = pattern(len, rng.next_u64());
                            assert_eq!(file.write_at(&data, off).unwrap(), len);
                            let mut back = vec![0u8; len];
                            assert_eq!(file.read_at(&mut back, off).unwrap(), len, "writer {t} round {round}");
                            assert_same(&back, &data, &format!("writer {t} round {round}: read back"));
                            if rng.chance(10) {
                                file.sync_data().unwrap_or_else(|e| panic!("writer {t} round {round}: sync: {e}"));
                            }
                        }
                        drop(file);
                        if rng.chance(20) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let remover = s.spawn(|| {
            let mut rng = Rng::new(seed);
            while !stop.load(Ordering::Relaxed) {
                let path = &paths[rng.below(paths.len())];
                match rng.below(10) {
                    0..=5 => match cache.remove_file(path) {
                        Ok(()) => drop(removed.fetch_add(1, Ordering::Relaxed)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => panic!("remove_file: {e}"),
                    },
                    6..=7 => {
                        if cache.forget(path).unwrap_or_else(|e| panic!("forget: {e}")) {
                            forgotten.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        let file = cache.open(path, &OpenOptions::read_write_create()).unwrap();
                        // Past the writers' range, which they read back.
                        let at = WRITER_SPAN + rng.below(64 * KIB) as u64;
                        file.write_at(&pattern(rng.between(1, 9000), rng.next_u64()), at).unwrap();
                        drop(file);
                        recreated.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if rng.chance(50) {
                    std::thread::sleep(Duration::from_micros(rng.below(300) as u64));
                }
            }
        });
        // Every writer is joined and the remover stopped before a writer's
        // panic goes on, or the scope would wait for the remover forever.
        let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Relaxed);
        remover.join().unwrap();
        for result in results {
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        }
    });
    for path in &paths {
        match cache.remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("final remove_file: {e}"),
        }
    }
    // Every name is gone and every handle closed: nothing is left (the
    // flusher may still be finishing a pass of a removed file).
    let settled = common::wait_until(Duration::from_secs(20), || {
        let stats = cache.stats();
        stats.dirty_bytes == 0 && stats.writeback_bytes == 0
    });
    let stats = cache.stats();
    eprintln!(
        "removed {}, forgotten {}, recreated {}; at the end: dirty {}, writeback {}, cached {}, inodes {}",
        removed.load(Ordering::Relaxed),
        forgotten.load(Ordering::Relaxed),
        recreated.load(Ordering::Relaxed),
        stats.dirty_bytes,
        stats.writeback_bytes,
        stats.cached_bytes,
        stats.open_inodes
    );
    assert!(removed.load(Ordering::Relaxed) > 0, "the race removed files");
    assert!(settled, "dirty data or writeback left after every file was closed and removed: {stats:?}");
    assert_eq!(stats.open_inodes, 0, "an inode outlived every name of its file: {stats:?}");
    assert_eq!(stats.cached_bytes, 0, "no inode left, yet data cached");
}

#[test]
fn sim_removals_race_writers_forgets_and_recreations() {
    common::with_timeout(Duration::from_secs(300), || {
        let config = SimConfig { seed: 23, latency_us_max: 300, ..SimConfig::default() };
        let (sim, cache) = sim_cache(BUSY_WRITEBACK, config);
        let paths = (0..3).map(|t| PathBuf::from(format!("/race{t}"))).collect();
        race(cache, paths, 23, 400);
        drop(sim);
    });
}

/// The race on real files, where a removed file's inode number comes back
/// for the next file created.
#[test]
fn removals_race_writers_forgets_and_recreations() {
    common::with_timeout(Duration::from_secs(300), || {
        let dir = TempDir::new("remove-race");
        let cache = Cache::new(Config::from_options(BUSY_WRITEBACK).unwrap()).unwrap();
        let paths = (0..3).map(|t| dir.0.join(format!("race{t}"))).collect();
        race(cache, paths, 24, 300);
    });
}

/// An open racing a removal of the same file: one thread opens the file
/// (creating it when missing) and closes it again, another removes it.
/// Once the name is gone for good and every handle closed, no inode may be
/// left in the cache: one would be an unlinked file the cache can no
/// longer reach by any name, holding its descriptor (and with it the
/// file's disk space) and writing its dirty data back to nowhere.
fn open_racing_remove(cache: Cache, path: PathBuf, rounds: usize) -> (u64, u64) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let opener = s.spawn(|| {
            for round in 0..rounds {
                let file = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
                file.write_at(&pattern(4096, round as u64), 0).unwrap();
                drop(file);
            }
        });
        let remover = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                match cache.remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::thread::yield_now(),
                    Err(e) => panic!("remove_file: {e}"),
                }
            }
        });
        let opened = opener.join();
        stop.store(true, Ordering::Relaxed);
        remover.join().unwrap();
        opened.unwrap();
    });
    let _ = cache.remove_file(&path);
    cache.sync_all().unwrap();
    let stats = cache.stats();
    cache.close().unwrap();
    (stats.open_inodes, written_total(&stats))
}

#[test]
fn an_open_racing_a_removal_leaves_no_inode_behind() {
    common::with_timeout(Duration::from_secs(120), || {
        let dir = TempDir::new("remove-open-race");
        let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
        let path = dir.0.join("f");
        let (left, written) = open_racing_remove(cache, path.clone(), 2000);
        let (sim, cache) = sim_cache(NO_WRITEBACK, SimConfig { seed: 25, ..SimConfig::default() });
        let (sim_left, sim_written) = open_racing_remove(cache, PathBuf::from("/f"), 2000);
        eprintln!("left {left} inodes, wrote {written} bytes; sim: left {sim_left}, wrote {sim_written}");
        assert_eq!(
            (left, written),
            (0, 0),
            "inodes left in the cache, and bytes they wrote back, after the race on {}",
            path.display()
        );
        assert_eq!((sim_left, sim_written), (0, 0), "sim: inodes left and bytes written after the race");
        drop(sim);
    });
}

/// A rename through the cache: the cached inode follows the file (one inode,
/// its dirty data readable under the new name before any writeback, and
/// written there at the sync); an open handle keeps working. Renaming over
/// a cached, dirty file drops that file's data unwritten: after the sync
/// the target holds the renamed file's bytes only, and only they were
/// written.
#[test]
fn rename_moves_the_cached_file_and_drops_a_replaced_one() {
    let dir = TempDir::new("rename");
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let (a, b, c) = (dir.0.join("a"), dir.0.join("b"), dir.0.join("c"));
    let data_a = pattern(50_000, 1);
    let fa = cache.open(&a, &create_new()).unwrap();
    fa.write_at(&data_a, 0).unwrap();
    cache.rename(&a, &b).unwrap();
    assert_gone(&a);
    assert_eq!(std::fs::metadata(&b).unwrap().len(), 0, "nothing written back yet");
    assert_eq!(read_all(&fa), data_a, "the open handle follows the file");
    let fb = cache.open(&b, &rw()).unwrap();
    assert_eq!(read_all(&fb), data_a, "the new name reads the cached data");
    assert_eq!(cache.stats().open_inodes, 1, "one inode under either name");
    drop((fa, fb));

    // Renaming over a cached file with dirty data: its data goes unwritten.
    let data_c = pattern(30_000, 2);
    let fc = cache.open(&c, &create_new()).unwrap();
    fc.write_at(&data_c, 0).unwrap();
    drop(fc);
    let dirty_before = cache.stats().dirty_bytes;
    cache.rename(&b, &c).unwrap();
    let after = cache.stats();
    assert!(
        after.dirty_bytes < dirty_before,
        "the replaced file's dirty data is dropped: {dirty_before} -> {}",
        after.dirty_bytes
    );
    assert_eq!(after.open_inodes, 1, "the replaced file's inode left the cache");
    cache.sync_all().unwrap();
    assert!(std::fs::read(&c).unwrap() == data_a, "the target holds the renamed file's bytes");
    assert_eq!(
        written_total(&cache.stats()),
        data_a.len().next_multiple_of(4096) as u64,
        "only the renamed file was written"
    );

    // Errors are rename(2)'s, with their errno, as std::fs::rename's.
    let missing = cache.rename(&a, &b).unwrap_err();
    assert_eq!(errno_of(&missing), libc::ENOENT);
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT), "{missing}");
    cache.close().unwrap();
}

/// The same on the simulated backend, whose write log shows what reached
/// each inode.
#[test]
fn sim_rename_keeps_data_and_drops_a_replaced_file() {
    let (sim, cache) = sim_cache(NO_WRITEBACK, SimConfig { seed: 31, ..SimConfig::default() });
    let (a, b) = (Path::new("/a"), Path::new("/b"));
    let fa = cache.open(a, &create_new()).unwrap();
    fa.write_at(&pattern(9000, 3), 0).unwrap();
    let fb = cache.open(b, &create_new()).unwrap();
    fb.write_at(&pattern(7000, 4), 0).unwrap();
    drop((fa, fb));
    cache.rename(a, b).unwrap();
    assert!(sim.written_image(a).is_none(), "the old name is gone");
    cache.sync_all().unwrap();
    assert_eq!(sim.written_image(b).unwrap(), pattern(9000, 3), "the target holds the renamed file");
    assert_eq!(cache.stats().open_inodes, 1);
    cache.close().unwrap();
}

/// `File::cached_ranges` lists what is cached, merged, within the size.
#[test]
fn cached_ranges_list_what_is_cached() {
    let dir = TempDir::new("ranges");
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let f = cache.open(dir.0.join("f"), &create_new()).unwrap();
    assert_eq!(f.cached_ranges().unwrap(), vec![], "an empty file");
    f.write_at(&pattern(8192, 5), 0).unwrap();
    f.write_at(&pattern(100, 6), 40_000).unwrap();
    let ranges = f.cached_ranges().unwrap();
    assert_eq!(ranges.first(), Some(&(0..8192)), "{ranges:?}");
    assert_eq!(ranges.last().map(|r| r.end), Some(40_100), "the last range ends at the size: {ranges:?}");
    assert!(ranges.windows(2).all(|w| w[0].end < w[1].start), "merged and in order: {ranges:?}");
    let range_blocks: u64 = ranges.iter().map(|r| r.end.div_ceil(4096) - r.start / 4096).sum();
    let mut bits = vec![0u8; 10];
    let n = f.residency(0, 40_100, &mut bits).unwrap();
    let resident = bits[..n].iter().filter(|&&b| b & wbcache::RESIDENT_CACHED != 0).count() as u64;
    assert_eq!(range_blocks, resident, "the same blocks as residency(): {ranges:?} {bits:?}");
    f.sync_all().unwrap();
    assert_eq!(f.cached_ranges().unwrap(), ranges, "clean data stays cached");
    f.set_len(4000).unwrap();
    assert_eq!(f.cached_ranges().unwrap(), vec![0..4000], "a cut file");
    drop(f);
    cache.close().unwrap();
}

/// `O_APPEND` handles: every write goes to the end whatever its offset,
/// and appends from several threads never overlap or interleave: the file
/// ends as the concatenation of every record, each whole.
#[test]
fn appends_from_several_threads_never_overlap() {
    let dir = TempDir::new("append");
    let cache = Cache::new(Config::from_options("capacity=64M").unwrap()).unwrap();
    let path = dir.0.join("log");
    let first = cache.open(&path, &create_new().append(true)).unwrap();
    assert!(first.is_append());
    first.write_at(b"0123456789", 1_000_000).unwrap();
    assert_eq!(first.len().unwrap(), 10, "the offset is ignored");
    let mut cursor = first.cursor();
    std::io::Write::write_all(&mut cursor, b"abc").unwrap();
    assert_eq!(cursor.position(), 13, "the position follows the append");
    const THREADS: u64 = 4;
    const RECORDS: u64 = 500;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let cache = &cache;
            let path = &path;
            s.spawn(move || {
                let f = cache.open(path, &OpenOptions::new().read(true).write(true).append(true)).unwrap();
                for i in 0..RECORDS {
                    // A record: its length, its id, then a pattern of it.
                    let body = pattern(1 + ((t * RECORDS + i) as usize * 977) % 9000, t * RECORDS + i);
                    let mut rec = (body.len() as u32).to_le_bytes().to_vec();
                    rec.extend_from_slice(&(t * RECORDS + i).to_le_bytes());
                    rec.extend_from_slice(&body);
                    assert_eq!(f.write_at(&rec, 0).unwrap(), rec.len());
                }
            });
        }
    });
    let all = read_all(&first);
    assert_eq!(&all[..13], b"0123456789abc");
    let mut seen = std::collections::HashSet::new();
    let mut at = 13;
    while at < all.len() {
        let len = u32::from_le_bytes(all[at..at + 4].try_into().unwrap()) as usize;
        let id = u64::from_le_bytes(all[at + 4..at + 12].try_into().unwrap());
        assert!(all[at + 12..at + 12 + len] == pattern(len, id), "record {id} at {at} is whole");
        assert!(seen.insert(id), "record {id} once");
        at += 12 + len;
    }
    assert_eq!((at, seen.len() as u64), (all.len(), THREADS * RECORDS), "every record, nothing else");
    // As in std, append implies write access, and does not go with truncate.
    let appender = cache.open(&path, &OpenOptions::new().append(true)).unwrap();
    assert_eq!(appender.write_at(b"!", 0).unwrap(), 1);
    assert_eq!(appender.len().unwrap(), all.len() as u64 + 1);
    let err = cache.open(&path, &OpenOptions::new().append(true).truncate(true)).map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "append with truncate");
    drop(first);
    cache.close().unwrap();
}
