//! The real backends end to end: io_uring and the thread pool on a temp file
//! on this machine's file system, and a raw loop device. With `CI=true` the
//! loop-device test fails instead of skipping when no loop device can be set
//! up.

use crate::common;
use common::pattern;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::loopdev::LoopDevice;
use wbcache::{Cache, Config, OpenOptions, Reason};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wbcache-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn roundtrip(io: &str, routing: &str) {
    // Tests run at once in one process: one directory per configuration.
    let workers = Config::from_options(routing).unwrap();
    let dir = temp_dir(&format!("{io}-{}-{}", workers.writeback_routing.name(), workers.writeback_workers));
    let path = dir.join("file");
    let options = format!("capacity=32M,dirty_limit=8M,io={io},{routing}");
    let cache = Cache::new(Config::from_options(&options).unwrap()).unwrap();
    assert_eq!(cache.stats().io_backend, io);
    let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    let mut reference = vec![0u8; 0];
    // Unaligned writes, spanning folios, extending the file, more data than
    // the cache holds (so eviction and writeback run).
    let mut off = 0u64;
    for i in 0..200u64 {
        let len = 1 + (i as usize * 104_729) % 400_000;
        let data = pattern(len, i);
        let at = if i % 5 == 0 { off / 3 } else { off };
        f.write_at(&data, at).unwrap();
        let end = at as usize + len;
        if reference.len() < end {
            reference.resize(end, 0);
        }
        reference[at as usize..end].copy_from_slice(&data);
        off = off.max(end as u64);
        if i % 50 == 49 {
            f.sync_data().unwrap();
        }
    }
    assert_eq!(f.len().unwrap(), reference.len() as u64);
    let mut back = vec![0u8; reference.len()];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), reference.len());
    assert!(back == reference, "{io}: read back differs");
    f.sync_all().unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), reference.len(), "{io}: backing size is the logical size");
    assert!(on_disk == reference, "{io}: backing content differs after fsync");
    // Truncate and extend: stale bytes must not reappear.
    f.set_len(1000).unwrap();
    f.set_len(50_000).unwrap();
    let mut tail = vec![1u8; 49_000];
    assert_eq!(f.read_at(&mut tail, 1000).unwrap(), 49_000);
    assert!(tail.iter().all(|&b| b == 0), "{io}: extended region reads as zeros");
    f.sync_all().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 50_000);
    let stats = cache.stats();
    assert!(stats.written_bytes(Reason::Fsync) > 0);
    assert_eq!((stats.dirty_bytes, stats.writeback_bytes), (0, 0), "{options}: synced");
    assert_eq!(common::written_bytes_disagree(&stats), None, "{options}");
    assert!(stats.direct_io, "{io}: ext4 temp dir supports O_DIRECT");
    assert_eq!(stats.writeback_workers.len(), workers.writeback_workers as usize, "{options}");
    drop(f);
    cache.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn uring_backend_roundtrip() {
    roundtrip("uring", "writeback_routing=single");
}

#[test]
fn threads_backend_roundtrip() {
    roundtrip("threads", "writeback_routing=single");
}

/// Four workers writing their own 2 MiB regions of one file, each through
/// its own ring (or its own threads), and two binding files round-robin.
#[test]
fn roundtrip_with_several_writeback_workers() {
    roundtrip("uring", "writeback_routing=region,writeback_workers=4,region_size=2M");
    roundtrip("threads", "writeback_routing=region,writeback_workers=3,region_size=2M");
    roundtrip("uring", "writeback_routing=rotor,writeback_workers=2");
}

/// The quick start's run: a cached write at 4096, an uncached one at 0
/// (written back by the flusher), an fdatasync. Two blocks were written
/// (the last one, five bytes of the file, counts whole), and each
/// breakdown adds up to that total, whoever wrote which block.
#[test]
fn written_bytes_add_up_after_a_quickstart_run() {
    let dir = temp_dir("written-sums");
    let cache = Cache::new(Config::from_options("capacity=256M,dirty_limit=64M").unwrap()).unwrap();
    let f = cache.open(dir.join("data.db"), &OpenOptions::read_write_create()).unwrap();
    f.write_at(b"hello", 4096).unwrap();
    f.write_at_with(b"log", 0, wbcache::WriteFlags::DONTCACHE).unwrap();
    f.sync_data().unwrap();
    cache.sync_all().unwrap();
    let st = cache.stats();
    assert_eq!((st.dirty_bytes, st.writeback_bytes), (0, 0));
    assert_eq!(common::written_bytes_disagree(&st), None);
    assert_eq!(st.written_bytes_total, 8192, "two blocks: {}", st.to_json());
    let json = st.to_json();
    assert!(json.contains("\"written_bytes_total\":8192,"), "{json}");
    drop(f);
    cache.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reopen_after_close_reads_durable_data() {
    let dir = temp_dir("reopen");
    let path = dir.join("file");
    let data = pattern(3 << 20, 9);
    {
        let cache = Cache::new(Config::from_options("capacity=64M").unwrap()).unwrap();
        let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
        f.write_at(&data, 12_345).unwrap();
        drop(f); // closing a file does not write back ...
        cache.close().unwrap(); // ... closing the cache does
    }
    let cache = Cache::new(Config::from_options("capacity=64M").unwrap()).unwrap();
    let f = cache.open(&path, &OpenOptions::new().read(true)).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(&mut back, 12_345).unwrap(), data.len());
    assert!(back == data);
    assert!(f.write_at(b"x", 0).is_err(), "read-only handle");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn read_device(path: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(off)).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).unwrap();
    buf
}

#[test]
fn raw_loop_device() {
    let Some(dev) = LoopDevice::create_or_skip("loop", 64 << 20) else { return };
    // A device's regions are slices of the device: four workers share it.
    for (io, routing) in [
        ("uring", "writeback_routing=single"),
        ("threads", "writeback_routing=single"),
        ("uring", "writeback_routing=region,writeback_workers=4,region_size=2M"),
    ] {
        let cache = Cache::new(Config::from_options(&format!("capacity=32M,io={io},{routing}")).unwrap()).unwrap();
        let f = cache.open(&dev.device, &OpenOptions::new().read(true).write(true)).unwrap();
        assert!(f.is_block_device());
        let size = f.len().unwrap();
        assert_eq!(size, 64 << 20);
        let data = pattern(5 << 20, 3);
        assert_eq!(f.write_at(&data, 777).unwrap(), data.len());
        // Past the end: ENOSPC; crossing it: short.
        let err = f.write_at(b"abc", size).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{io}");
        assert_eq!(f.write_at(&[7u8; 100], size - 10).unwrap(), 10, "{io}: crossing write is short");
        let mut past = [0u8; 10];
        assert_eq!(f.read_at(&mut past, size).unwrap(), 0, "{io}: read past the end");
        assert!(f.set_len(size / 2).is_err(), "{io}: a device cannot be resized");
        f.sync_all().unwrap();
        assert!(read_device(&dev.device, 777, data.len()) == data, "{io}: device content after fsync");
        assert_eq!(read_device(&dev.device, size - 10, 10), vec![7u8; 10]);
        drop(f);
        // O_TRUNC on a device is ignored, as open(2) does: nothing is lost.
        let again = cache.open(&dev.device, &OpenOptions::new().read(true).write(true).truncate(true)).unwrap();
        assert_eq!(again.len().unwrap(), size, "{io}: O_TRUNC on a device");
        drop(again);
        assert!(read_device(&dev.device, 777, data.len()) == data, "{io}: device content after O_TRUNC");
        cache.close().unwrap();
    }
}

const SECCOMP_CHILD_ENV: &str = "WBCACHE_SECCOMP_CHILD_DIR";

/// Makes `io_uring_setup` fail with EPERM for this thread and the threads it
/// starts afterwards, as a container's seccomp profile does.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn forbid_io_uring() {
    const IO_URING_SETUP: u32 = 425; // same number on x86_64 and aarch64
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let filter = [
        // Load the syscall number (offset 0 of struct seccomp_data).
        libc::sock_filter { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: 0 },
        libc::sock_filter { code: BPF_JMP_JEQ_K, jt: 0, jf: 1, k: IO_URING_SETUP },
        libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ERRNO | libc::EPERM as u32 },
        libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW },
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
    // SAFETY: prctl with a valid, live filter program; it only restricts this process.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(libc::prctl(libc::PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &prog as *const _), 0);
    }
}

/// Child side of `io_uring_forbidden_falls_back_to_threads`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn seccomp_child_process() {
    let Ok(dir) = std::env::var(SECCOMP_CHILD_ENV) else { return };
    forbid_io_uring();
    let cache = Cache::new(Config::from_options("capacity=32M,io=uring").unwrap()).unwrap();
    let path = Path::new(&dir).join("file");
    let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    let data = pattern(1 << 20, 5);
    f.write_at(&data, 100).unwrap();
    f.sync_all().unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_at(&mut back, 100).unwrap();
    assert!(back == data);
    println!("io_backend={}", cache.stats().io_backend);
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn io_uring_forbidden_falls_back_to_threads() {
    if std::env::var(SECCOMP_CHILD_ENV).is_ok() {
        return;
    }
    let dir = temp_dir("seccomp");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "real_io::seccomp_child_process", "--nocapture", "--test-threads=1"])
        .env(SECCOMP_CHILD_ENV, &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("io_backend=threads"), "io_uring was forbidden, yet: {stdout}");
    assert!(std::fs::read(dir.join("file")).unwrap()[100..100 + (1 << 20)] == pattern(1 << 20, 5)[..]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Random writes, truncations and syncs by one thread per file, on real
/// files, while the flusher's asynchronous passes run under a small dirty
/// limit (so they overlap the size changes and each other). Every file must
/// end up exactly as its reference. A failure prints the seed.
fn truncate_and_write_under_async_writeback(io: &str, seed: u64) {
    let dir = temp_dir(&format!("async-{io}-{seed}"));
    let options =
        format!("capacity=8M,dirty_limit=1M,dirty_background=256K,folio_max=64K,io_max=64K,expire_ms=20,io={io}");
    let cache = Cache::new(Config::from_options(&options).unwrap()).unwrap();
    std::thread::scope(|s| {
        for file in 0..3u64 {
            let (cache, dir) = (&cache, &dir);
            s.spawn(move || {
                let path = dir.join(format!("f{file}"));
                let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
                let mut reference: Vec<u8> = Vec::new();
                let mut x = (seed << 8 | file) | 1;
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                for i in 0..600u64 {
                    let r = next();
                    let ctx = format!("seed {seed} file {file} op {i}");
                    match r % 20 {
                        0 => {
                            let len = next() % (reference.len() as u64 + 200_000);
                            f.set_len(len).unwrap_or_else(|e| panic!("{ctx}: set_len: {e}"));
                            reference.resize(len as usize, 0);
                        }
                        1 => f.sync_data().unwrap_or_else(|e| panic!("{ctx}: sync_data: {e}")),
                        _ => {
                            let at = next() % 3_000_000;
                            let len = if r % 3 == 0 { 4096 } else { 1 + next() as usize % 70_000 };
                            let at = if r % 3 == 0 { at & !4095 } else { at };
                            let data = pattern(len, r);
                            f.write_at(&data, at).unwrap_or_else(|e| panic!("{ctx}: write: {e}"));
                            let end = at as usize + len;
                            if reference.len() < end {
                                reference.resize(end, 0);
                            }
                            reference[at as usize..end].copy_from_slice(&data);
                        }
                    }
                }
                f.sync_all().unwrap();
                let on_disk = std::fs::read(&path).unwrap();
                assert_eq!(on_disk.len(), reference.len(), "seed {seed} file {file}: backing size");
                if let Some(at) = on_disk.iter().zip(&reference).position(|(a, b)| a != b) {
                    panic!("seed {seed} file {file}: backing content differs first at byte {at}");
                }
            });
        }
    });
    assert!(cache.stats().written_bytes(Reason::Background) > 0, "the flusher took part");
    cache.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn async_writeback_races_truncation_on_uring() {
    for seed in 1..=3 {
        truncate_and_write_under_async_writeback("uring", seed);
    }
}

#[test]
fn async_writeback_races_truncation_on_threads() {
    truncate_and_write_under_async_writeback("threads", 7);
}

/// `io_max=8M` over 4 KiB folios: a writeback I/O could gather 2048 buffers,
/// more than `pwritev` and io_uring accept (1024, `EINVAL`). Writeback caps
/// the buffers per I/O, so fsync succeeds and every block reaches the disk,
/// on both backends.
fn many_small_folios_in_one_large_io(io: &str) {
    let dir = temp_dir(&format!("iovmax-{io}"));
    let path = dir.join("file");
    let cache =
        Cache::new(Config::from_options(&format!("capacity=64M,dirty_limit=32M,io_max=8M,io={io}")).unwrap()).unwrap();
    let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
    let blocks = 2048u64;
    // Back to front: each 4 KiB write makes its own folio (none can grow
    // into a neighbour that already exists).
    for b in (0..blocks).rev() {
        f.write_at(&pattern(4096, b), b * 4096).unwrap();
    }
    f.sync_all().unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len() as u64, blocks * 4096);
    for b in 0..blocks as usize {
        assert!(on_disk[b * 4096..(b + 1) * 4096] == pattern(4096, b as u64)[..], "{io}: block {b}");
    }
    cache.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn uring_writeback_caps_buffers_per_io() {
    many_small_folios_in_one_large_io("uring");
}

#[test]
fn threads_writeback_caps_buffers_per_io() {
    many_small_folios_in_one_large_io("threads");
}

/// Another program appends to a file a read-only handle has open: neither
/// that handle's fsync nor the cache's close may cut the file back to the
/// length the cache saw at open. A writable handle cuts only its own
/// tail-block padding. A running executable opens read-only (no ETXTBSY).
#[test]
fn foreign_appends_survive_sync_and_close() {
    use std::io::Write;
    let dir = temp_dir("foreign-append");
    let path = dir.join("log");
    std::fs::write(&path, pattern(5000, 1)).unwrap();
    let cache = Cache::new(Config::from_options("capacity=16M").unwrap()).unwrap();
    let reader = cache.open(&path, &OpenOptions::new().read(true)).unwrap();
    let mut head = vec![0u8; 100];
    reader.read_at(&mut head, 0).unwrap();
    let appended = pattern(10_000, 2);
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&appended).unwrap();
    reader.sync_all().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 15_000, "a reader's fsync cut the file");

    // A writer of the same inode rewrites its first bytes and syncs: only
    // what it wrote changes, the foreign tail stays.
    let writer = cache.open(&path, &OpenOptions::new().read(true).write(true)).unwrap();
    writer.write_at(b"rewritten", 0).unwrap();
    writer.sync_all().unwrap();
    drop(reader);
    drop(writer);
    cache.close().unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 15_000, "the close cut the file");
    assert_eq!(&on_disk[..9], b"rewritten");
    assert!(on_disk[9..5000] == pattern(5000, 1)[9..]);
    assert!(on_disk[5000..] == appended[..], "the appended bytes changed");

    // Our own padding: a 5000-byte file written through the cache is 5000
    // bytes on disk after fsync, though O_DIRECT wrote two whole blocks.
    let cache = Cache::new(Config::from_options("capacity=16M").unwrap()).unwrap();
    let own = dir.join("own");
    let f = cache.open(&own, &OpenOptions::read_write_create()).unwrap();
    f.write_at(&pattern(5000, 3), 0).unwrap();
    f.sync_all().unwrap();
    assert_eq!(std::fs::metadata(&own).unwrap().len(), 5000);

    let exe = cache.open(std::env::current_exe().unwrap(), &OpenOptions::new().read(true)).unwrap();
    let mut magic = [0u8; 4];
    exe.read_at(&mut magic, 0).unwrap();
    assert_eq!(&magic, b"\x7fELF");
    drop(exe);
    drop(f);
    cache.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A write past the file system's largest file size fails with the same
/// error the kernel gives a plain pwrite (EFBIG on ext4 at 17 TiB), on both
/// backends, and leaves the file syncable.
#[test]
fn writes_past_the_largest_file_size_fail_like_pwrite() {
    use std::os::unix::fs::FileExt;
    let dir = temp_dir("efbig");
    let probe_path = dir.join("probe");
    let far = 17u64 << 40;
    let kernel = std::fs::File::create(&probe_path).unwrap().write_at(&[1u8; 4096], far);
    let Err(kernel_err) = kernel else {
        eprintln!("this file system takes a write at 17 TiB; nothing to compare");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    };
    for io in ["uring", "threads"] {
        let cache = Cache::new(Config::from_options(&format!("capacity=16M,io={io}")).unwrap()).unwrap();
        let f = cache.open(dir.join(io), &OpenOptions::read_write_create()).unwrap();
        f.write_at(b"head", 0).unwrap();
        let err = f.write_at(&[1u8; 4096], far).unwrap_err();
        assert_eq!(err.raw_os_error(), kernel_err.raw_os_error(), "{io}: {err}");
        f.sync_all().unwrap();
        assert_eq!(f.len().unwrap(), 4);
        drop(f);
        cache.close().unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A log synced after every small append, as SQLite's WAL and journals
/// are: the partial last block goes through the kernel's cache, so after
/// each sync the file on disk is exactly as long as written (no padding to
/// cut) and holds every byte, appends that fill the block later included;
/// a cached read of it, and a cold one after the cache forgot the file,
/// read the same. Both backends.
#[test]
fn small_appends_synced_one_by_one_keep_the_exact_length() {
    for io in ["uring", "threads"] {
        let dir = temp_dir(&format!("appends-{io}"));
        let path = dir.join("log");
        let _ = std::fs::remove_file(&path);
        let cache = Cache::new(Config::from_options(&format!("capacity=32M,io={io}")).unwrap()).unwrap();
        let f = cache.open(&path, &OpenOptions::read_write_create()).unwrap();
        let mut want = Vec::new();
        for i in 0..300u64 {
            // 1..=9000 bytes: appends inside a block, across one, and of
            // several blocks.
            let piece = pattern(1 + (i as usize * 2741) % 9000, i);
            f.write_at(&piece, want.len() as u64).unwrap();
            want.extend_from_slice(&piece);
            if i % 3 == 0 {
                f.sync_data().unwrap();
            } else {
                f.sync_all().unwrap();
            }
            let on_disk = std::fs::read(&path).unwrap();
            assert_eq!(on_disk.len(), want.len(), "{io}: length after sync {i}");
            if i % 50 == 0 || i == 299 {
                assert!(on_disk == want, "{io}: content after sync {i}");
            }
        }
        let mut got = vec![0u8; want.len()];
        assert_eq!(f.read_at(&mut got, 0).unwrap(), want.len());
        assert!(got == want, "{io}: cached read");
        drop(f);
        assert!(cache.forget(&path).unwrap(), "{io}: the closed file is forgotten");
        let f = cache.open(&path, &OpenOptions::new().read(true)).unwrap();
        let mut cold = vec![0u8; want.len()];
        assert_eq!(f.read_at(&mut cold, 0).unwrap(), want.len());
        assert!(cold == want, "{io}: cold read");
        drop(f);
        cache.close().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
