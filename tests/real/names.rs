//! One file, many names: every path that reaches the same backing store
//! must reach the same cached inode, or two copies of its data would drift
//! apart (a write through one name unseen through the other, and writeback
//! of the stale copy undoing the new one). For a regular file the names are
//! hard links, symlinks (relative, absolute, chained, through a directory
//! link), `/proc/self/fd/N` and `/dev/fd/N`, relative and absolute paths
//! with `.`, `..` and doubled slashes, a rename and (as root) a bind mount.
//! For a raw block device they are its `/dev` node, a second node made with
//! `mknod` (another inode number, the same major:minor), a symlink and
//! `/proc/self/fd/N`. Each test checks that the cache holds one inode and
//! one copy of the data, and that a write through any name is read at once
//! through every other, before anything is written back (the store still
//! has the old bytes then, so those reads came from the one shared copy).
//!
//! The bind-mount and block-device tests need root; they skip with a
//! printed reason without it, except under `CI=true`, where they fail.

use crate::common;
use common::pattern;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::assert_same;
use common::loopdev::{mknod_block, LoopDevice};
use wbcache::{Cache, Config, File, OpenOptions};

/// Nothing is written back while a test looks (dirty stays far below the
/// background threshold and expires after an hour), so a name that reached
/// another inode would read the store's old bytes and fail the comparison.
const NO_WRITEBACK: &str = "capacity=64M,dirty_limit=32M,dirty_background=31M,expire_ms=3600000";

const CHUNK: usize = 64 << 10;

/// A fresh directory under the temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("wbcache-names-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The canonical path, so the relative path built from it below
        // counts the directories the kernel will walk.
        TempDir(dir.canonicalize().unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `abs` as a path relative to the working directory (`../../tmp/...`),
/// without changing the working directory, which the test threads share.
fn relative_from_cwd(abs: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let mut rel = PathBuf::new();
    for _ in cwd.components().skip(1) {
        rel.push("..");
    }
    rel.push(abs.strip_prefix("/").unwrap());
    assert!(rel.is_relative());
    rel
}

/// Root, or why not. Under `CI=true` a missing requirement is a failure,
/// elsewhere a printed skip.
fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip(what, "not root")
}

fn skip(what: &str, why: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but {what} cannot run: {why}");
    }
    eprintln!("SKIPPED {what}: {why}");
    false
}

/// Writes a distinct chunk through each handle in turn, at offsets that
/// straddle block and chunk boundaries, and after each write reads the
/// whole of `reference` back through every handle. Returns the reference.
fn write_through_each_read_through_all(files: &[(String, File)], base: u64) -> Vec<u8> {
    let mut reference = Vec::new();
    for (i, (name, f)) in files.iter().enumerate() {
        let data = pattern(CHUNK, i as u64 + 1);
        // Each chunk overlaps the previous one by 100 bytes: the bytes
        // another name wrote last must be replaced, not kept aside.
        let at = (i * (CHUNK - 100) + 333) as u64;
        assert_eq!(f.write_at(&data, base + at).unwrap(), CHUNK, "write through {name}");
        let end = at as usize + CHUNK;
        if reference.len() < end {
            reference.resize(end, 0);
        }
        reference[at as usize..end].copy_from_slice(&data);
        for (other, g) in files {
            let mut back = vec![0u8; reference.len()];
            assert_eq!(g.read_at(&mut back, base).unwrap(), reference.len(), "read through {other}");
            assert_same(&back, &reference, &format!("read through {other} after a write through {name}"));
        }
    }
    reference
}

#[test]
fn a_regular_file_has_one_inode_under_every_name() {
    let dir = TempDir::new("file");
    let d = &dir.0;
    let path = d.join("a");
    std::fs::create_dir(d.join("sub")).unwrap();
    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let first = cache.open(&path, &OpenOptions::read_write_create()).unwrap();

    std::fs::hard_link(&path, d.join("hard")).unwrap();
    std::os::unix::fs::symlink("a", d.join("rel-link")).unwrap();
    std::os::unix::fs::symlink(&path, d.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("rel-link", d.join("chained-link")).unwrap();
    std::os::unix::fs::symlink(d, d.join("dir-link")).unwrap();
    // A descriptor of the kernel's own, to name the file by number.
    let plain = std::fs::File::open(&path).unwrap();
    let fd = plain.as_raw_fd();

    let names: Vec<PathBuf> = vec![
        relative_from_cwd(&path),
        PathBuf::from(format!("{}//./sub/../a", d.display())),
        d.join("hard"),
        d.join("rel-link"),
        d.join("abs-link"),
        d.join("chained-link"),
        d.join("dir-link").join("a"),
        PathBuf::from(format!("/proc/self/fd/{fd}")),
        PathBuf::from(format!("/dev/fd/{fd}")),
    ];
    let rw = OpenOptions::new().read(true).write(true);
    let mut files = vec![(path.display().to_string(), first)];
    for name in &names {
        let f = cache.open(name, &rw).unwrap_or_else(|e| panic!("open {}: {e}", name.display()));
        files.push((name.display().to_string(), f));
    }
    assert_eq!(cache.stats().open_inodes, 1, "{} names, one file", files.len());

    let reference = write_through_each_read_through_all(&files, 0);
    let stats = cache.stats();
    assert_eq!(stats.open_inodes, 1);
    // One copy: each name's chunk landed in the same folios, so the cache
    // holds the file once (with folio rounding at the edges), not once per
    // name.
    let one_copy = reference.len() as u64;
    assert!(
        stats.cached_bytes < one_copy + (CHUNK as u64) * 2,
        "cached {} bytes for one {one_copy}-byte file",
        stats.cached_bytes
    );
    assert!(stats.dirty_bytes < one_copy + (CHUNK as u64) * 2, "dirty {} bytes", stats.dirty_bytes);
    // Nothing was written back yet: every read above came from the cache.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "the store is still empty before any sync");

    // A rename is one more name for the open inode; a sync through any name
    // makes what every name wrote durable.
    std::fs::rename(&path, d.join("renamed")).unwrap();
    let renamed = cache.open(d.join("renamed"), &rw).unwrap();
    let mut back = vec![0u8; reference.len()];
    renamed.read_at(&mut back, 0).unwrap();
    assert_same(&back, &reference, "read through the new name after rename");
    assert_eq!(cache.stats().open_inodes, 1, "renamed, still one inode");
    let by_fd = files.iter().find(|(name, _)| name.starts_with("/proc/self/fd/")).unwrap();
    by_fd.1.sync_data().unwrap();
    assert_same(&std::fs::read(d.join("renamed")).unwrap(), &reference, "on disk after one name's fsync");

    drop(files);
    drop(renamed);
    drop(plain);
    cache.close().unwrap();
}

/// A file opened through a bind mount of its directory: another path, the
/// same device and inode number, so the same cached inode.
#[test]
fn a_bind_mount_is_one_more_name() {
    if !root_or_skip("a_bind_mount_is_one_more_name") {
        return;
    }
    let dir = TempDir::new("bind");
    let (src, dst) = (dir.0.join("src"), dir.0.join("dst"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&dst).unwrap();
    let mount = Command::new("mount").arg("--bind").arg(&src).arg(&dst).output();
    match mount {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            skip("a_bind_mount_is_one_more_name", &format!("mount --bind: {}", String::from_utf8_lossy(&out.stderr)));
            return;
        }
        Err(e) => {
            skip("a_bind_mount_is_one_more_name", &format!("mount: {e}"));
            return;
        }
    }
    // Unmounted even when an assertion fails (before the directory goes).
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(dst.clone());

    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let a = cache.open(src.join("f"), &OpenOptions::read_write_create()).unwrap();
    let b = cache.open(dst.join("f"), &OpenOptions::new().read(true).write(true)).unwrap();
    assert_eq!(cache.stats().open_inodes, 1);
    let files = vec![("src/f".to_string(), a), ("dst/f".to_string(), b)];
    let reference = write_through_each_read_through_all(&files, 4096);
    files[1].1.sync_all().unwrap();
    let on_disk = std::fs::read(src.join("f")).unwrap();
    assert_same(&on_disk[4096..], &reference, "on disk after fsync through the bind mount");
    drop(files);
    cache.close().unwrap();
}

/// Two device nodes of one block device have different inode numbers (and
/// may live on different file systems) but one `st_rdev`: the cache must
/// key a device by what it is, not by the node that named it.
#[test]
fn a_block_device_has_one_inode_under_every_node() {
    const WHAT: &str = "a_block_device_has_one_inode_under_every_node";
    if !root_or_skip(WHAT) {
        return;
    }
    let dev = match LoopDevice::create("blockdev", 16 << 20) {
        Ok(dev) => dev,
        Err(e) => {
            skip(WHAT, &format!("no loop device ({e})"));
            return;
        }
    };
    let node = std::fs::metadata(&dev.device).unwrap();
    let alias = dev.dir.0.join("alias");
    if let Err(e) = mknod_block(&alias, node.rdev()) {
        skip(WHAT, &format!("mknod: {e}"));
        return;
    }
    let alias_meta = std::fs::metadata(&alias).unwrap();
    assert_eq!(alias_meta.rdev(), node.rdev());
    assert_ne!((alias_meta.dev(), alias_meta.ino()), (node.dev(), node.ino()), "two distinct nodes");
    std::os::unix::fs::symlink(&dev.device, dev.dir.0.join("link")).unwrap();
    let plain = std::fs::File::open(&dev.device).unwrap();

    let cache = Cache::new(Config::from_options(NO_WRITEBACK).unwrap()).unwrap();
    let rw = OpenOptions::new().read(true).write(true);
    let names: Vec<PathBuf> = vec![
        dev.device.clone(),
        alias.clone(),
        dev.dir.0.join("link"),
        PathBuf::from(format!("/proc/self/fd/{}", plain.as_raw_fd())),
    ];
    let files: Vec<(String, File)> = names
        .iter()
        .map(|n| (n.display().to_string(), cache.open(n, &rw).unwrap_or_else(|e| panic!("open {}: {e}", n.display()))))
        .collect();
    assert!(files.iter().all(|(_, f)| f.is_block_device()));
    assert_eq!(cache.stats().open_inodes, 1, "one device under {} names", files.len());

    let base = 1 << 20;
    let reference = write_through_each_read_through_all(&files, base);
    let stats = cache.stats();
    assert!(stats.dirty_bytes < reference.len() as u64 + (CHUNK as u64) * 2, "dirty {}", stats.dirty_bytes);
    assert!(stats.cached_bytes < reference.len() as u64 + (CHUNK as u64) * 2, "cached {}", stats.cached_bytes);

    // One sync through the mknod'ed node makes every name's writes durable.
    files[1].1.sync_data().unwrap();
    let mut on_device = vec![0u8; reference.len()];
    std::os::unix::fs::FileExt::read_exact_at(&plain, &mut on_device, base).unwrap();
    assert_same(&on_device, &reference, "device content after fsync through the second node");
    drop(files);
    cache.close().unwrap();
}
