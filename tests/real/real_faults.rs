//! Real faults from a real kernel, not the simulator: a full ext4 file
//! system and the end of a raw block device.
//!
//! On a 32 MiB ext4 image (loop device, mounted), a file system nearly
//! filled by another file, a writer writes more through the cache than
//! fits. The test proves: writeback's ENOSPC reaches `sync_data` and
//! `sync_all` (on the handle that wrote and on one opened later) and keeps
//! doing so while the space is missing; the writer is held at the dirty
//! limit and then refused (nothing of the refused write applied) instead of
//! the cache growing; dirty plus under-writeback bytes never pass
//! `dirty_limit` and cached bytes never pass `capacity`; every accepted
//! byte still reads back from the cache though the disk lacks it, and other
//! files still read; once the filler is deleted the next fsync succeeds,
//! the writer goes on, and after the cache closes and the file system is
//! mounted afresh (no kernel cache of the old mount) every byte is on disk.
//!
//! On a raw loop device, sequential unaligned writes run past its end: the
//! write crossing the end is short, every write at or past it fails with
//! ENOSPC at write time (never later in writeback), so fsync succeeds with
//! no writeback error and nothing inside the device is lost. A device whose
//! size is not a multiple of 4 KiB is refused at open (EINVAL).
//!
//! Both run on io_uring and on the thread pool. They need root, `losetup`
//! and `mkfs.ext4` (e2fsprogs): without them they skip with a printed
//! reason, except under `CI=true`, where they fail.

use crate::common;
use common::pattern;

use std::io::{IoSlice, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::assert_same;
use wbcache::{Cache, Config, OpenOptions, Reason};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Why this test cannot run here, or `None`: root and the tools it needs.
fn missing_requirement(tools: &[&str]) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for tool in tools {
        if find_tool(tool).is_none() {
            return Some(format!("{tool} not found (PATH, /usr/sbin, /sbin)"));
        }
    }
    None
}

/// `tool` on PATH or in the sbin directories (a non-login PATH may lack
/// them, while e2fsprogs installs there).
fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// Skips with a printed reason, or fails under `CI=true`, where a missing
/// root or tool must not pass silently.
fn skip(what: &str, why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but {what} cannot run: {why}");
    }
    eprintln!("SKIPPED {what}: {why}");
}

fn run(tool: &str, args: &[&std::ffi::OsStr]) -> Result<String, String> {
    let exe = find_tool(tool).ok_or_else(|| format!("{tool} not found"))?;
    let out = Command::new(exe).args(args).output().map_err(|e| format!("{tool}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A scratch directory, an image file in it and a loop device over the
/// image, and (for a file system) a mount point: undone on drop in reverse,
/// whether the test passed or panicked. The cache must be gone first
/// (declare it after the guard), or its descriptors keep the mount busy.
struct Scratch {
    dir: PathBuf,
    device: Option<PathBuf>,
    mount_point: Option<PathBuf>,
}

impl Scratch {
    /// A loop device over a sparse image of `size` bytes; `sizelimit`
    /// makes the device smaller than the image.
    fn loop_device(tag: &str, size: u64, sizelimit: Option<u64>) -> Result<Scratch, String> {
        let dir = std::env::temp_dir().join(format!("wbcache-faults-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut scratch = Scratch { dir, device: None, mount_point: None };
        let image = scratch.dir.join("disk.img");
        std::fs::File::create(&image).and_then(|f| f.set_len(size)).map_err(|e| e.to_string())?;
        let limit = sizelimit.map(|l| format!("--sizelimit={l}"));
        let mut args: Vec<&std::ffi::OsStr> = vec!["--find".as_ref(), "--show".as_ref(), "--direct-io=on".as_ref()];
        args.extend(limit.as_deref().map(std::ffi::OsStr::new));
        args.push(image.as_os_str());
        scratch.device = Some(PathBuf::from(run("losetup", &args)?));
        Ok(scratch)
    }

    /// A fresh ext4 of `size` bytes, mounted. 4 KiB blocks, as a real
    /// disk's (mkfs picks 1 KiB for images this small), and no blocks
    /// reserved for root (the test runs as root, and reserved blocks would
    /// move where ENOSPC strikes).
    fn ext4(tag: &str, size: u64) -> Result<Scratch, String> {
        let mut scratch = Scratch::loop_device(tag, size, None)?;
        let device = scratch.device().to_path_buf();
        run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-b".as_ref(),
                "4096".as_ref(),
                "-m".as_ref(),
                "0".as_ref(),
                device.as_os_str(),
            ],
        )?;
        let mount_point = scratch.dir.join("mnt");
        std::fs::create_dir(&mount_point).map_err(|e| e.to_string())?;
        run("mount", &[device.as_os_str(), mount_point.as_os_str()])?;
        scratch.mount_point = Some(mount_point);
        Ok(scratch)
    }

    fn device(&self) -> &Path {
        self.device.as_deref().expect("a loop device")
    }

    fn mnt(&self) -> &Path {
        self.mount_point.as_deref().expect("a mounted file system")
    }

    /// Unmounts and mounts again: what is read afterwards comes from the
    /// device, not from any kernel cache of the old mount.
    fn remount(&mut self) -> Result<(), String> {
        let mount_point = self.mount_point.take().expect("mounted");
        // A closed io_uring lets go of its files in a kernel work item, a
        // moment after its descriptor is closed: until then the mount is
        // busy. Retry for a while rather than fail on EBUSY.
        let mut tries = 0;
        while let Err(e) = run("umount", &[mount_point.as_os_str()]) {
            tries += 1;
            if tries == 50 {
                self.mount_point = Some(mount_point);
                return Err(e);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        run("mount", &[self.device().as_os_str(), mount_point.as_os_str()])?;
        self.mount_point = Some(mount_point);
        Ok(())
    }

    /// Bytes an unprivileged writer could still allocate.
    fn free_bytes(&self) -> u64 {
        let c = std::ffi::CString::new(self.mnt().as_os_str().as_encoded_bytes()).unwrap();
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `c` is NUL-terminated; `st` is valid for one statvfs.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
        // SAFETY: statvfs succeeded and filled the struct.
        let st = unsafe { st.assume_init() };
        #[allow(clippy::unnecessary_cast)] // the field types differ between targets.
        let free = st.f_bavail as u64 * st.f_frsize as u64;
        free
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mount_point) = self.mount_point.take() {
            if run("umount", &[mount_point.as_os_str()]).is_err() {
                // Still busy (a panicking test's cache not yet gone): detach
                // it now; the kernel finishes when the last user leaves.
                let _ = run("umount", &["-l".as_ref(), mount_point.as_os_str()]);
            }
        }
        if let Some(device) = self.device.take() {
            let _ = run("losetup", &["-d".as_ref(), device.as_os_str()]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `body` while a thread samples the cache's gauges; returns its
/// result and the largest dirty plus under-writeback bytes and cached bytes
/// seen meanwhile (the statistics' own peak covers only the former).
fn sampled<T>(cache: &Cache, body: impl FnOnce() -> T) -> (T, u64, u64) {
    let stop = AtomicBool::new(false);
    let (peak_unclean, peak_cached) = (AtomicU64::new(0), AtomicU64::new(0));
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                let st = cache.stats();
                peak_unclean.fetch_max(st.dirty_bytes + st.writeback_bytes, Ordering::Relaxed);
                peak_cached.fetch_max(st.cached_bytes, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let result = body();
        stop.store(true, Ordering::Release);
        result
    });
    (result, peak_unclean.into_inner(), peak_cached.into_inner())
}

const FILE_LEN: usize = 16 << 20;
const WRITE_LEN: usize = 256 << 10;
/// Room left on the file system for the cached file before it is full:
/// less than the file, and less than the file minus what the dirty limit
/// lets the cache hold, so the writer must hit the full disk.
const ROOM: u64 = 3 * MIB;
const DIRTY_LIMIT: u64 = 4 * MIB;
const CAPACITY: u64 = 16 * MIB;

fn enospc_on_a_full_file_system(io: &str) {
    let what = format!("enospc_on_a_full_file_system({io})");
    if let Some(why) = missing_requirement(&["losetup", "mkfs.ext4", "mount", "umount"]) {
        return skip(&what, &why);
    }
    let mut fs = match Scratch::ext4(&format!("enospc-{io}"), 32 * MIB) {
        Ok(fs) => fs,
        Err(e) => return skip(&what, &e),
    };
    let mnt = fs.mnt().to_path_buf();
    // Another file, read through the cache while the disk is full.
    let other = pattern(300_000, 77);
    std::fs::write(mnt.join("other"), &other).unwrap();
    // The filler leaves ROOM bytes; deleting it later makes room for all.
    let filler_len = (fs.free_bytes() - ROOM) & !(4 * KIB - 1);
    assert!(filler_len > FILE_LEN as u64, "a 32 MiB ext4 has room for the filler");
    {
        let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
        let block = vec![0xEEu8; MIB as usize];
        let mut left = filler_len;
        while left > 0 {
            let n = left.min(MIB);
            filler.write_all(&block[..n as usize]).unwrap();
            left -= n;
        }
        filler.sync_all().unwrap();
    }
    eprintln!("{what}: {} bytes free after the filler", fs.free_bytes());

    let options = format!("capacity={CAPACITY},dirty_limit={DIRTY_LIMIT},dirty_background={},io={io}", DIRTY_LIMIT / 4);
    let cache = Cache::new(Config::from_options(&options).unwrap()).unwrap();
    let path = mnt.join("data");
    let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    let data = pattern(FILE_LEN, 1);

    // Write until the cache refuses. The sampler watches the gauges the
    // whole time the writer is held.
    let started = Instant::now();
    let ((accepted, write_err), peak_unclean, peak_cached) = sampled(&cache, || {
        let mut accepted = 0usize;
        loop {
            assert!(accepted < FILE_LEN, "{what}: the whole file was accepted though the disk had {ROOM} bytes");
            let chunk = &data[accepted..accepted + WRITE_LEN];
            match f.write_at(chunk, accepted as u64) {
                Ok(n) => {
                    assert_eq!(n, WRITE_LEN, "{what}: a write into the cache is never short");
                    accepted += n;
                }
                Err(e) => break (accepted, e),
            }
        }
    });
    eprintln!(
        "{what}: write at {accepted} refused after {:?} with {write_err} (errno {:?})",
        started.elapsed(),
        write_err.raw_os_error()
    );
    // The writer is held at the dirty limit while writeback fails, then
    // refused: EIO is what throttle.rs gives after a second of failures
    // (ENOSPC would be as honest; either says the data could not go).
    assert!(
        matches!(write_err.raw_os_error(), Some(libc::EIO) | Some(libc::ENOSPC)),
        "{what}: the refused write: {write_err}"
    );
    assert!(accepted as u64 >= ROOM, "{what}: refused at {accepted}, before the disk was full");
    assert_eq!(f.len().unwrap(), accepted as u64, "{what}: nothing of the refused write was applied");

    // Memory stayed bounded the whole time. The bytes the cache held that
    // were not on disk (accepted minus written back: the file is written
    // once, front to back) are what the dirty limit bounds: the writer was
    // held there, not let through.
    let stats = cache.stats();
    let written_back: u64 = stats.written_bytes_by_reason.iter().sum();
    let held = accepted as u64 - written_back;
    eprintln!(
        "{what}: held {held} bytes not on disk; peaks: sampled dirty+writeback {peak_unclean}, \
         peak_dirty_writeback_bytes {}, cached {peak_cached}; {} writeback errors",
        stats.peak_dirty_writeback_bytes, stats.writeback_errors
    );
    assert!(held <= DIRTY_LIMIT, "{what}: {held} bytes dirty, over the limit");
    // Failed blocks move from writeback back to dirty in one step, so dirty
    // + writeback (and its peak statistic) never read above the limit.
    assert!(peak_unclean <= DIRTY_LIMIT, "{what}: dirty + writeback reached {peak_unclean}");
    assert!(stats.peak_dirty_writeback_bytes <= DIRTY_LIMIT, "{what}: {stats:?}");
    assert!(peak_cached <= CAPACITY, "{what}: cached reached {peak_cached}");
    assert!(stats.writeback_errors > 0, "{what}: writeback failed");
    assert!(stats.dirty_bytes + stats.writeback_bytes > 0, "{what}: the failed data stays dirty (or is retried)");

    // fsync reports the full disk, as ENOSPC, on the handle that wrote ...
    let err = f.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{what}: sync_data: {err}");
    assert_eq!(wbcache::errno_of(&err), libc::ENOSPC, "{what}: as the C ABI sees it");
    // ... and again on the next fsync, which retries and fails again: the
    // error was reported once, the data is still not on disk.
    let err = f.sync_all().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{what}: the retry: {err}");
    // A handle opened now gets the failure of the writeback its own fsync
    // retries (success would claim data that is not durable).
    let g = cache.open(&path, &OpenOptions::new().read(true).write(true)).unwrap();
    let err = g.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{what}: a later handle's fsync: {err}");

    // The cache kept every accepted byte, though the disk lacks some.
    let on_disk = std::fs::read(&path).unwrap();
    assert!(on_disk.len() < accepted || on_disk[..] != data[..accepted], "{what}: the disk was not full after all");
    eprintln!("{what}: on disk {} of {accepted} bytes, {} bytes free", on_disk.len(), fs.free_bytes());
    let mut back = vec![0u8; accepted];
    assert_eq!(g.read_at(&mut back, 0).unwrap(), accepted);
    assert_same(&back, &data[..accepted], &format!("{what}: read back from the cache while the disk is full"));
    // Reads of other files go on (misses, read from the full disk).
    let o = cache.open(mnt.join("other"), &OpenOptions::new().read(true)).unwrap();
    let mut back = vec![0u8; other.len()];
    assert_eq!(o.read_at(&mut back, 0).unwrap(), other.len());
    assert_same(&back, &other, &format!("{what}: another file read while the disk is full"));
    drop(o);
    // The flusher keeps retrying meanwhile; the limit holds throughout.
    let stats = cache.stats();
    assert!(stats.dirty_bytes + stats.writeback_bytes <= DIRTY_LIMIT, "{what}: {stats:?}");
    assert!(stats.cached_bytes <= CAPACITY, "{what}: {stats:?}");

    // Make room (the filler was never opened through the cache, whose
    // descriptors would keep its blocks allocated); committing the
    // directory makes ext4 hand the freed blocks out again.
    std::fs::remove_file(mnt.join("filler")).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    // The flusher retries on its own (dirty is over the background
    // threshold): the data reaches the disk without any fsync.
    let drained = common::wait_until(Duration::from_secs(10), || {
        let st = cache.stats();
        st.dirty_bytes + st.writeback_bytes == 0
    });
    assert!(drained, "{what}: writeback did not recover after space was freed: {:?}", cache.stats());
    // `f` last heard of an error at its second fsync; `g`'s retry failed
    // after that, so `f`'s next fsync reports it, once, though the data is
    // durable by now (errseq: every handle hears of every error, as with
    // the kernel's). The fsync after that succeeds.
    let err = f.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{what}: the failure f had not seen: {err}");
    f.sync_data().unwrap_or_else(|e| panic!("{what}: fsync after freeing space: {e}"));
    // `g` may or may not have a flusher failure after its fsync to hear of;
    // at most one report, then success.
    if let Err(e) = g.sync_data() {
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{what}: g: {e}");
        g.sync_data().unwrap_or_else(|e| panic!("{what}: g's second fsync after freeing space: {e}"));
    }
    assert_eq!(cache.stats().dirty_bytes, 0, "{what}: everything written back");
    assert_same(&std::fs::read(&path).unwrap(), &data[..accepted], &format!("{what}: on disk after fsync"));

    // The writer goes on where it was refused.
    let ((), peak_unclean, peak_cached) = sampled(&cache, || {
        for at in (accepted..FILE_LEN).step_by(WRITE_LEN) {
            assert_eq!(f.write_at(&data[at..at + WRITE_LEN], at as u64).unwrap(), WRITE_LEN, "{what}: at {at}");
        }
    });
    assert!(peak_unclean <= DIRTY_LIMIT && peak_cached <= CAPACITY, "{what}: {peak_unclean} {peak_cached}");
    g.sync_all().unwrap();
    drop((f, g));
    cache.close().unwrap();

    // Every byte on disk, read by the kernel from a fresh mount.
    fs.remount().unwrap_or_else(|e| panic!("{what}: remount: {e}"));
    let mnt = fs.mnt();
    assert_same(&std::fs::read(mnt.join("data")).unwrap(), &data, &format!("{what}: after remount"));
    assert_same(&std::fs::read(mnt.join("other")).unwrap(), &other, &format!("{what}: other after remount"));
}

#[test]
fn enospc_on_a_full_file_system_uring() {
    enospc_on_a_full_file_system("uring");
}

#[test]
fn enospc_on_a_full_file_system_threads() {
    enospc_on_a_full_file_system("threads");
}

/// Unaligned sequential writes running past the end of a raw device.
fn writes_past_a_device_end(io: &str) {
    let what = format!("writes_past_a_device_end({io})");
    if let Some(why) = missing_requirement(&["losetup"]) {
        return skip(&what, &why);
    }
    let dev = match Scratch::loop_device(&format!("devend-{io}"), 8 * MIB, None) {
        Ok(dev) => dev,
        Err(e) => return skip(&what, &e),
    };
    // Small enough that writeback runs while the writer is still writing.
    let options = format!("capacity=8M,dirty_limit=2M,dirty_background=512K,folio_max=256K,io={io}");
    let cache = Cache::new(Config::from_options(&options).unwrap()).unwrap();
    let f = cache.open(dev.device(), &OpenOptions::new().read(true).write(true)).unwrap();
    let size = f.len().unwrap();
    assert_eq!(size, 8 * MIB);
    let data = pattern(size as usize + MIB as usize, 5);
    let mut expected = vec![0u8; size as usize];

    // 300,001-byte writes from offset 1000: none aligned, the last crossing
    // the end (short: what fits is written), then one at the end.
    let mut at = 1000u64;
    let chunk = 300_001usize;
    loop {
        let src = &data[at as usize..at as usize + chunk];
        let n = f.write_at(src, at).unwrap_or_else(|e| panic!("{what}: write at {at}: {e}"));
        expected[at as usize..at as usize + n].copy_from_slice(&src[..n]);
        at += n as u64;
        if n < chunk {
            assert_eq!(at, size, "{what}: a short write stops exactly at the end");
            break;
        }
    }
    for past in [size, size + 1, size + 4096, size + (1 << 40), u64::MAX - 1] {
        let err = f.write_at(b"beyond", past).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{what}: write at {past}: {err}");
    }
    // A vectored write crossing the end is short too.
    let tail = [IoSlice::new(b"abcd"), IoSlice::new(b"efgh")];
    assert_eq!(f.write_vectored_at(&tail, size - 5).unwrap(), 5, "{what}: crossing pwritev");
    expected[size as usize - 5..].copy_from_slice(b"abcde");
    assert_eq!(f.len().unwrap(), size, "{what}: a device does not grow");
    let err = f.set_len(size + 4096).unwrap_err();
    assert_eq!(wbcache::errno_of(&err), libc::EINVAL, "{what}: resizing a device: {err}");

    // Writeback ran while the writes went on (8 MiB through a 2 MiB
    // limit), yet nothing beyond the end was accepted, so nothing fails in
    // writeback, then or at fsync.
    assert!(cache.stats().written_bytes(Reason::Background) > 0, "{what}: the flusher took part");
    f.sync_all().unwrap_or_else(|e| panic!("{what}: fsync: {e}"));
    let stats = cache.stats();
    assert_eq!(stats.writeback_errors, 0, "{what}: {stats:?}");
    let mut back = vec![0u8; size as usize + 4096];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), size as usize, "{what}: a read stops at the end");
    assert_same(&back[..size as usize], &expected, &format!("{what}: read back through the cache"));
    drop(f);
    cache.close().unwrap();

    // The device itself, read with the kernel's own I/O.
    let on_device = std::fs::read(dev.device()).unwrap();
    assert_same(&on_device, &expected, &format!("{what}: device content"));
}

#[test]
fn writes_past_a_device_end_uring() {
    writes_past_a_device_end("uring");
}

#[test]
fn writes_past_a_device_end_threads() {
    writes_past_a_device_end("threads");
}

/// The cache tracks whole 4 KiB blocks: on a device of 512-byte sectors
/// whose size is not a multiple of 4 KiB, writeback of the last block would
/// run past the end. Such a device is refused at open, never half used.
#[test]
fn a_device_of_partial_blocks_is_refused() {
    let what = "a_device_of_partial_blocks_is_refused";
    if let Some(why) = missing_requirement(&["losetup"]) {
        return skip(what, &why);
    }
    let dev = match Scratch::loop_device("partial", 4 * MIB, Some(4 * MIB - 1536)) {
        Ok(dev) => dev,
        Err(e) => return skip(what, &e),
    };
    let cache = Cache::new(Config::from_options("capacity=8M").unwrap()).unwrap();
    let err = cache.open(dev.device(), &OpenOptions::new().read(true).write(true)).err().expect("refused");
    assert_eq!(wbcache::errno_of(&err), libc::EINVAL, "{err}");
    assert!(err.to_string().contains("not a multiple of 4096"), "{err}");
    cache.close().unwrap();
}
