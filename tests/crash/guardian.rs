//! The guardian process's life, seen from the process that owns caches
//! (this test binary): a cache's guardian starts with its first file,
//! never writes while its owner lives, ignores the exit of a fork child,
//! and is gone once the cache closes, with several caches at once and
//! with caches opened and closed over and over. One test function: the
//! checks count this process's guardians, which tests running beside
//! them would change.

use crate::common;

use std::time::{Duration, Instant};

use wbcache::{Cache, Config, OpenOptions};

/// This process's guardians.
fn my_guardians() -> usize {
    common::guardians_of(std::process::id() as libc::pid_t)
}

/// Waits (a bounded time) until this process has `n` guardians.
fn expect_guardians(n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while my_guardians() != n {
        assert!(Instant::now() < deadline, "{what}: {} guardians, expected {n}", my_guardians());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn cache() -> Cache {
    Cache::new(Config::from_options("capacity=16M,expire_ms=3600000").unwrap()).unwrap()
}

#[test]
fn guardians_live_exactly_as_long_as_their_caches() {
    let dir = std::env::temp_dir().join(format!("wbcache-guardian-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    expect_guardians(0, "before any cache");

    // No file, no guardian: a program that never opens one pays nothing.
    let idle = cache();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(my_guardians(), 0, "a cache without files has no guardian");
    idle.close().unwrap();

    // Two caches at once: one guardian each, and the owner alive means
    // the guardian writes nothing (the dirty data stays in the cache).
    let (a, b) = (cache(), cache());
    let path_a = dir.join("a");
    let fa = a.open(&path_a, &OpenOptions::read_write_create()).unwrap();
    let fb = b.open(dir.join("b"), &OpenOptions::read_write_create()).unwrap();
    fa.write_at(b"only in the cache", 0).unwrap();
    fb.write_at(b"b", 0).unwrap();
    expect_guardians(2, "two caches with files");

    // A fork child that exits at once: not the owner's death.
    // SAFETY: the child calls only `_exit`.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: ends the child without running anything of the parent's.
        unsafe { libc::_exit(0) };
    }
    assert!(child > 0, "fork: {}", std::io::Error::last_os_error());
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(std::fs::read(&path_a).unwrap(), b"", "a guardian whose owner lives never writes");
    assert_eq!(my_guardians(), 2, "a fork child's exit is not the owner's death");

    drop((fa, fb));
    a.close().unwrap();
    expect_guardians(1, "one cache closed");
    assert_eq!(std::fs::read(&path_a).unwrap(), b"only in the cache", "the close wrote it back");
    drop(b);
    expect_guardians(0, "both caches closed");

    // Opened and closed over and over: nothing left behind.
    for i in 0..20 {
        let c = cache();
        let f = c.open(dir.join(format!("again-{i}")), &OpenOptions::read_write_create()).unwrap();
        f.write_at(&common::pattern(100_000, i), 0).unwrap();
        drop(f);
        c.close().unwrap();
    }
    expect_guardians(0, "after twenty caches opened and closed");

    // guardian=off: no process at all.
    let off = Cache::new(Config::from_options("capacity=16M,guardian=off").unwrap()).unwrap();
    let f = off.open(dir.join("off"), &OpenOptions::read_write_create()).unwrap();
    f.write_at(b"x", 0).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(my_guardians(), 0, "guardian=off starts none");
    drop(f);
    off.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
