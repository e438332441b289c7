//! Exhausted resources: too few file descriptors (`RLIMIT_NOFILE`), no more
//! threads (`RLIMIT_NPROC`), folio buffers that cannot be allocated, and
//! io_uring that cannot be set up. Each must give the caller a clear error
//! (the errno, and the path where there is one), leave the cache working
//! for what it already holds, and lose no data.
//!
//! Resource limits belong to the whole process, so every case runs in a
//! child: the parent test re-executes this test binary with
//! `--exact <child test> --nocapture` and [`CHILD_ENV`] naming the case and
//! a scratch directory; the child sets its limit (`setrlimit`), runs the
//! case, and reports what it saw as `wbcache-resources: key=value` lines on
//! standard output, which the parent checks. A child test run without the
//! variable (a plain `cargo test`) does nothing.
//!
//! io_uring refused by seccomp is `tests/real/real_io.rs`'s
//! `io_uring_forbidden_falls_back_to_threads`; here it is refused for want
//! of descriptors.

use crate::common;
use common::pattern;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::programs::TempDir;
use wbcache::errno_of;
use wbcache::sim::{SimConfig, SimIo};
use wbcache::{AlignedBuf, Cache, Config, OpenOptions};
use wbcache_capi as capi;

/// `<child test name>:<scratch dir>`; set only in a child.
const CHILD_ENV: &str = "WBCACHE_RESOURCES_CHILD";
const REPORT_PREFIX: &str = "wbcache-resources: ";
/// A child that takes longer is stuck (e.g. I/O that cannot complete) and
/// is killed; the test then fails saying so.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- harness

/// What a child reported, and how it ended.
struct Report {
    values: BTreeMap<String, String>,
    output: String,
}

impl Report {
    #[track_caller]
    fn get(&self, key: &str) -> &str {
        self.values.get(key).unwrap_or_else(|| panic!("the child did not report {key}:\n{}", self.output))
    }
}

/// Runs the child test `name` on `dir` and returns its report; fails if it
/// did not exit 0 within [`CHILD_TIMEOUT`].
fn run_child(name: &str, dir: &Path) -> Report {
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", &format!("resources::{name}"), "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{name}:{}", dir.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("re-run the test binary");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if started.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("child output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let output = format!("--- stdout\n{stdout}--- stderr\n{}", String::from_utf8_lossy(&out.stderr));
    match status {
        None => panic!("child {name} did not finish within {CHILD_TIMEOUT:?} (stuck):\n{output}"),
        Some(s) if !s.success() => panic!("child {name} failed ({s}):\n{output}"),
        Some(_) => {}
    }
    let values = stdout
        .lines()
        // `--nocapture` prints the test's name without a newline first.
        .filter_map(|l| Some(&l[l.find(REPORT_PREFIX)? + REPORT_PREFIX.len()..]))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Report { values, output }
}

/// In the child for `name`: its scratch directory. `None` in every other
/// run, where the child test returns at once.
fn child_dir(name: &str) -> Option<PathBuf> {
    let value = std::env::var(CHILD_ENV).ok()?;
    let (case, dir) = value.split_once(':')?;
    (case == name).then(|| PathBuf::from(dir))
}

fn report(key: &str, value: impl std::fmt::Display) {
    // One line each, so a value never spans lines.
    let value = value.to_string().replace('\n', " ");
    println!("{REPORT_PREFIX}{key}={value}");
}

/// `ok`, or `errno:<n>:<message>` for an error; the form every child
/// reports outcomes in.
fn outcome<T>(result: &io::Result<T>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(e) => format!("errno:{}:{e}", errno_of(e)),
    }
}

#[track_caller]
fn errno_in(outcome: &str) -> i32 {
    let rest = outcome.strip_prefix("errno:").unwrap_or_else(|| panic!("not an error: {outcome}"));
    rest.split(':').next().unwrap().parse().unwrap()
}

fn set_limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) {
    let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: a valid rlimit for this process.
    let rc = unsafe { libc::setrlimit(resource, &limit) };
    assert_eq!(rc, 0, "setrlimit({resource}, {soft}): {}", io::Error::last_os_error());
}

fn get_limit(resource: libc::__rlimit_resource_t) -> libc::rlimit {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is valid for writing.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut limit) }, 0);
    limit
}

/// Lets this process open exactly `free` more descriptors. The limit
/// bounds descriptor *numbers* (a new one is the lowest free number, and
/// must be below the limit), so it is set just past the `free`-th unused
/// number; descriptors already open above it (such as a jobserver's
/// inherited from cargo) stay usable. The hard limit stays, so a case can
/// raise the limit again.
fn allow_more_fds(free: u64) {
    let hard = get_limit(libc::RLIMIT_NOFILE).rlim_max;
    // Listing needs a descriptor of its own, which the last limit may deny.
    set_limit(libc::RLIMIT_NOFILE, hard, hard);
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The listing's own descriptor was among them and is closed now.
    // SAFETY: F_GETFD only asks whether a descriptor number is open.
    let open: std::collections::HashSet<i32> =
        listed.into_iter().filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0).collect();
    let mut limit = 0i32;
    let mut unused = 0u64;
    loop {
        if !open.contains(&limit) {
            if unused == free {
                break;
            }
            unused += 1;
        }
        limit += 1;
    }
    set_limit(libc::RLIMIT_NOFILE, limit as u64, hard);
}

fn capi_last_error() -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { capi::wbc_last_error(buf.as_mut_ptr().cast(), buf.len()) };
    String::from_utf8_lossy(&buf[..(n.max(0) as usize).min(buf.len() - 1)]).into_owned()
}

fn capi_cache(options: &str) -> Result<*mut capi::wbc_cache, String> {
    let options = CString::new(options).unwrap();
    let mut c = ptr::null_mut();
    // SAFETY: valid string and output pointer.
    let rc = unsafe { capi::wbc_cache_open(options.as_ptr(), &mut c) };
    if rc == 0 {
        Ok(c)
    } else {
        Err(format!("errno:{}:{}", -rc, capi_last_error()))
    }
}

fn capi_open(c: *mut capi::wbc_cache, path: &Path) -> Result<*mut capi::wbc_file, String> {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut f = ptr::null_mut();
    // SAFETY: `c` is live; valid path and output pointer.
    let rc = unsafe { capi::wbc_open(c, path.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o666, &mut f) };
    if rc == 0 {
        Ok(f)
    } else {
        Err(format!("errno:{}:{}", -rc, capi_last_error()))
    }
}

fn rw_create() -> OpenOptions {
    OpenOptions::read_write_create()
}

/// Writes, syncs and reads back `len` bytes of a pattern at `off`.
fn write_sync_read(f: &wbcache::File, len: usize, off: u64, seed: u64) -> io::Result<()> {
    let data = pattern(len, seed);
    let n = f.write_at(&data, off)?;
    if n != len {
        return Err(io::Error::other(format!("short write {n} of {len}")));
    }
    f.sync_all()?;
    let mut back = vec![0u8; len];
    let n = f.read_at(&mut back, off)?;
    if n != len || back != data {
        return Err(io::Error::other("read back differs"));
    }
    Ok(())
}

// ------------------------------------------------- RLIMIT_NOFILE, io=threads

const NOFILE_FREE: u64 = 12;

/// Child: with a dozen descriptors left, opens files until the cache
/// refuses, then checks that what is open still works, that the C ABI
/// gives the same errno and message, and what happens to new opens once
/// every handle is closed.
#[test]
fn child_nofile() {
    let Some(dir) = child_dir("child_nofile") else { return };
    let cache = Cache::new(Config::from_options("capacity=32M,dirty_limit=8M,io=threads").unwrap()).unwrap();
    let c = capi_cache("capacity=16M,dirty_limit=4M,io=threads").unwrap();
    allow_more_fds(NOFILE_FREE);

    let mut files = Vec::new();
    let mut refused = None;
    for i in 0..NOFILE_FREE * 4 {
        let path = dir.join(format!("f{i}"));
        match cache.open(&path, &rw_create()) {
            Ok(f) => files.push(f),
            Err(e) => {
                refused = Some((path, e));
                break;
            }
        }
    }
    report("opened", files.len());
    let (path, e) = refused.expect("the limit stops the opens");
    report("open_errno", errno_of(&e));
    report("open_message", &e);
    report("raw_os_error", format!("{:?}", e.raw_os_error()));
    report("refused_file_created", path.exists());

    // The C ABI on the same exhaustion: the errno and a message naming it.
    let c_path = dir.join("c-file");
    report("capi_open", capi_open(c, &c_path).map(|_| "ok".to_string()).unwrap_or_else(|e| e));

    // What is open keeps working: writes, syncs (writeback uses the open
    // descriptors and the pool's threads) and reads.
    let results: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, f)| outcome(&write_sync_read(f, 100_000, 4096 * i as u64, i as u64)))
        .collect();
    report("open_files_work", results.iter().all(|r| r == "ok"));
    if let Some(bad) = results.iter().find(|r| *r != "ok") {
        report("open_files_failure", bad);
    }
    report("cache_sync_all", outcome(&cache.sync_all()));

    // Every handle closed: the inodes stay cached, each with its
    // descriptor. Can new files be opened, and closed ones reopened?
    let opened = files.len();
    drop(files);
    report("inodes_after_close", cache.stats().open_inodes);
    report("new_open_after_close", outcome(&cache.open(dir.join("after-close"), &rw_create())));
    report("reopen_after_close", outcome(&cache.open(dir.join("f0"), &rw_create())));
    report("close", outcome(&cache.close()));
    // SAFETY: `c` is live and closed once.
    report("capi_close", unsafe { capi::wbc_cache_close(c) });
    report("expected_files", opened);
}

/// Opening past `RLIMIT_NOFILE` fails with `EMFILE` (in Rust the OS's error
/// itself, as std's; C's `wbc_last_error` names the path), creates nothing,
/// and leaves every open file working: all of it reaches the disk.
#[test]
fn too_few_descriptors_fail_opens_with_emfile_and_lose_nothing() {
    let dir = TempDir::new("res-nofile");
    let r = run_child("child_nofile", &dir.0);
    let opened: usize = r.get("opened").parse().unwrap();
    assert!(opened >= 1 && opened <= NOFILE_FREE as usize, "{opened} opened:\n{}", r.output);
    assert_eq!(r.get("open_errno"), libc::EMFILE.to_string(), "{}", r.output);
    assert!(r.get("open_message").contains("Too many open files"), "{}", r.output);
    assert_eq!(r.get("raw_os_error"), format!("Some({})", libc::EMFILE), "the OS's error itself:\n{}", r.output);
    assert_eq!(r.get("refused_file_created"), "false", "{}", r.output);
    let capi = r.get("capi_open");
    assert_eq!(errno_in(capi), libc::EMFILE, "{capi}");
    assert!(capi.contains("wbc_open: ") && capi.contains("c-file") && capi.contains("Too many open files"), "{capi}");
    assert_eq!(r.get("open_files_work"), "true", "{}", r.output);
    assert_eq!(r.get("cache_sync_all"), "ok");
    assert_eq!(r.get("close"), "ok");
    assert_eq!(r.get("capi_close"), "0");
    for i in 0..r.get("expected_files").parse::<usize>().unwrap() {
        let on_disk = std::fs::read(dir.0.join(format!("f{i}"))).unwrap();
        let off = 4096 * i;
        assert!(on_disk.len() == off + 100_000 && on_disk[off..] == pattern(100_000, i as u64)[..], "f{i}");
    }
}

/// With every handle closed, the cache gives descriptors back when it runs
/// out: it forgets idle inodes (synced first) and opens again. Today an
/// idle inode is forgotten only past `MAX_CACHED_INODES` (1024), whatever
/// `RLIMIT_NOFILE` is, so a program that opens and closes files through
/// the cache runs out of descriptors at the soft limit (often 1024 itself)
/// even though it holds none open. Reopening a cached file needs a new
/// descriptor too (the store is opened before the inode is looked up). The
/// fix is in `src/api/cache.rs` (on `EMFILE`/`ENFILE`, forget idle inodes and
/// retry the open) and `src/api/shared.rs` (forgetting idle inodes below
/// `MAX_CACHED_INODES`), and needs one more step: after an fsync a clean
/// inode stays on its domain's dirty list (holding it, and so its
/// descriptor, and failing the idle test) until the flusher's next pass,
/// so forgetting must also take clean inodes off that list.
#[test]
fn idle_inodes_are_forgotten_to_free_descriptors() {
    let dir = TempDir::new("res-nofile-idle");
    let r = run_child("child_nofile", &dir.0);
    assert_eq!(r.get("new_open_after_close"), "ok", "{}", r.output);
    assert_eq!(r.get("reopen_after_close"), "ok", "{}", r.output);
}

// --------------------------------------------------- RLIMIT_NOFILE, io=uring

/// Child: io_uring needs a descriptor per ring. Without a free descriptor
/// at `Cache::new` the cache runs on the thread pool; with rings set up
/// and then no descriptor left, a new thread (which would create a ring
/// of its own) does its I/O with plain `preadv`/`pwritev`.
#[test]
fn child_nofile_uring() {
    let Some(dir) = child_dir("child_nofile_uring") else { return };
    // A ring-backed cache and a file made before the limit, for the run
    // time part.
    let ring_cache = Cache::new(Config::from_options("capacity=32M,dirty_limit=8M,io=uring").unwrap()).unwrap();
    report("ring_backend_before", ring_cache.stats().io_backend);
    let pre = dir.join("pre");
    std::fs::write(&pre, pattern(1 << 20, 7)).unwrap();
    let pre_file = ring_cache.open(&pre, &rw_create()).unwrap();
    // The flusher creates its ring when it starts: give it the moment.
    std::thread::sleep(Duration::from_millis(100));

    allow_more_fds(0);
    let cache = Cache::new(Config::from_options("capacity=32M,dirty_limit=8M,io=uring").unwrap());
    report("new_under_no_fds", outcome(&cache));
    let cache = cache.unwrap();
    report("backend_under_no_fds", cache.stats().io_backend);

    // A new thread reads the file from disk and writes and syncs, with no
    // descriptor for a ring of its own.
    let result = std::thread::scope(|s| {
        s.spawn(|| -> io::Result<()> {
            let mut back = vec![0u8; 1 << 20];
            let n = pre_file.read_at(&mut back, 0)?;
            if n != back.len() || back != pattern(1 << 20, 7) {
                return Err(io::Error::other("read back differs"));
            }
            write_sync_read(&pre_file, 300_000, 12_345, 8)
        })
        .join()
        .unwrap()
    });
    report("ring_cache_io_without_fds", outcome(&result));

    // Descriptors again: the thread-pool cache works as any.
    allow_more_fds(8);
    let f = cache.open(dir.join("later"), &rw_create()).unwrap();
    report("fallback_cache_io", outcome(&write_sync_read(&f, 200_000, 100, 9)));
    drop(f);
    drop(pre_file);
    report("close", outcome(&cache.close()));
    report("ring_close", outcome(&ring_cache.close()));
}

/// io_uring that cannot be set up for want of descriptors falls back to
/// the thread pool at `Cache::new`, and a thread that cannot get a ring
/// later does its I/O synchronously: nothing fails, nothing is lost.
#[test]
fn io_uring_without_descriptors_falls_back() {
    let dir = TempDir::new("res-nofile-uring");
    let r = run_child("child_nofile_uring", &dir.0);
    assert_eq!(r.get("new_under_no_fds"), "ok", "{}", r.output);
    assert_eq!(r.get("backend_under_no_fds"), "threads", "{}", r.output);
    assert_eq!(r.get("ring_cache_io_without_fds"), "ok", "{}", r.output);
    assert_eq!(r.get("fallback_cache_io"), "ok", "{}", r.output);
    assert_eq!(r.get("close"), "ok");
    assert_eq!(r.get("ring_close"), "ok");
    let pre = std::fs::read(dir.0.join("pre")).unwrap();
    let mut expected = pattern(1 << 20, 7);
    expected[12_345..12_345 + 300_000].copy_from_slice(&pattern(300_000, 8));
    assert!(pre == expected, "pre on disk");
    assert!(std::fs::read(dir.0.join("later")).unwrap()[100..] == pattern(200_000, 9)[..]);
}

// ------------------------------------------------------------ RLIMIT_NPROC

/// Threads of this process (`/proc/self/status`).
fn threads_now() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Refuses every new thread: `RLIMIT_NPROC` at 1, and, when root (whom the
/// limit does not bind: `CAP_SYS_RESOURCE`/`CAP_SYS_ADMIN`), the whole
/// process switched to `nobody`. Returns false where it cannot be done.
fn refuse_new_threads() -> bool {
    set_limit(libc::RLIMIT_NPROC, 1, 1);
    // SAFETY: plain syscalls on this process's credentials; glibc applies
    // setgid/setuid to every thread.
    unsafe {
        if libc::geteuid() == 0 {
            const NOBODY: libc::uid_t = 65534;
            if libc::setgroups(0, ptr::null()) != 0 || libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 {
                report("setuid", io::Error::last_os_error());
                return false;
            }
        }
    }
    // Check that it took: a thread that can be spawned means the limit
    // does not apply here (another user's namespace, say).
    std::thread::Builder::new().spawn(|| {}).map(|h| h.join()).is_err()
}

/// A directory on another device than `dir`, writable by anyone (the child
/// runs as `nobody`): opening a file there needs a new writeback domain,
/// whose flusher is a new thread.
fn other_device_dir(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let shm = Path::new("/dev/shm");
    let here = std::fs::metadata(dir).ok()?.dev();
    if std::fs::metadata(shm).ok()?.dev() == here {
        return None;
    }
    let other = shm.join(format!("wbcache-resources-{}", std::process::id()));
    std::fs::create_dir_all(&other).ok()?;
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o777)).ok()?;
    Some(other)
}

/// Child: caches made before the limit, then no new thread allowed. New
/// caches must fail with `EAGAIN`; running ones keep working; opening a
/// file on a new device (a new flusher thread) is observed.
#[test]
fn child_nproc() {
    let Some(dir) = child_dir("child_nproc") else { return };
    let threads_cache =
        Cache::new(Config::from_options("capacity=32M,dirty_limit=8M,io=threads,io_depth=4").unwrap()).unwrap();
    let ring_cache = Cache::new(Config::from_options("capacity=32M,dirty_limit=8M,io=uring").unwrap()).unwrap();
    report("ring_backend", ring_cache.stats().io_backend);
    let c = capi_cache("capacity=16M,dirty_limit=4M,io=threads,io_depth=2").unwrap();
    // One file each, so each cache has this device's flusher running.
    let tf = threads_cache.open(dir.join("threads"), &rw_create()).unwrap();
    let rf = ring_cache.open(dir.join("ring"), &rw_create()).unwrap();
    let cf = capi_open(c, &dir.join("capi")).unwrap();
    let other = other_device_dir(&dir);
    report("threads_before", threads_now());

    if !refuse_new_threads() {
        report("skipped", "RLIMIT_NPROC does not apply here");
        return;
    }
    report("skipped", "no");

    // New caches: an error, not a panic.
    for (key, options) in [("new_threads", "capacity=32M,io=threads"), ("new_uring", "capacity=32M,io=uring")] {
        let result = std::panic::catch_unwind(|| Cache::new(Config::from_options(options).unwrap()));
        match result {
            Ok(r) => report(key, outcome(&r)),
            Err(_) => report(key, "panic"),
        }
    }
    report("capi_new", capi_cache("capacity=32M,io=threads").map(|_| "ok".into()).unwrap_or_else(|e| e));

    // The running caches: writes into new (small) folios, syncs, reads;
    // and new files on a device whose flusher runs already.
    report("running_threads", outcome(&write_sync_read(&tf, 3 << 20, 4096 * 3 + 5, 1)));
    report("running_uring", outcome(&write_sync_read(&rf, 3 << 20, 777, 2)));
    let data = pattern(50_000, 3);
    // SAFETY: `cf` is live; `data` is valid for its length.
    let n = unsafe { capi::wbc_pwrite(cf, data.as_ptr().cast(), data.len(), 10, 0) };
    // SAFETY: `cf` is live.
    report("running_capi", format!("{n}/{}", unsafe { capi::wbc_fsync(cf) }));
    let same_device = threads_cache.open(dir.join("threads-2"), &rw_create());
    report("open_same_device", outcome(&same_device));
    if let Ok(f) = &same_device {
        report("same_device_io", outcome(&write_sync_read(f, 100_000, 0, 4)));
    }

    // A file on another device needs a flusher thread of its own.
    match &other {
        None => report("new_device_open", "skipped"),
        Some(other) => {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                threads_cache.open(other.join("elsewhere"), &rw_create())
            }));
            match result {
                Ok(r) => report("new_device_open", outcome(&r)),
                Err(_) => report("new_device_open", "panic"),
            }
            report(
                "capi_new_device_open",
                capi_open(c, &other.join("capi-elsewhere")).map(|_| "ok".into()).unwrap_or_else(|e| e),
            );
        }
    }
    // Still working after that.
    report("running_after", outcome(&write_sync_read(&tf, 200_000, 1 << 20, 5)));
    drop((tf, rf, same_device));
    report("close_threads", outcome(&threads_cache.close()));
    report("close_uring", outcome(&ring_cache.close()));
    // SAFETY: handles are live and each closed once.
    unsafe {
        report("capi_close", format!("{}/{}", capi::wbc_close(cf), capi::wbc_cache_close(c)));
    }
}

fn nproc_report() -> (TempDir, Report) {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("res-nproc");
    // The child drops to `nobody`, which must still create files here.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = run_child("child_nproc", &dir.0);
    // Whatever the child left on the other device.
    if let Ok(entries) = std::fs::read_dir("/dev/shm") {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("wbcache-resources-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    (dir, r)
}

/// No thread can be created: `Cache::new` fails with `EAGAIN` (no panic),
/// over the C ABI too, and caches already running keep writing, syncing
/// and reading (the thread pool already has its workers; the slab refill
/// thread, which cannot start, is optional), with all data on disk.
#[test]
fn thread_limit_fails_new_caches_with_eagain_and_running_ones_work() {
    let (dir, r) = nproc_report();
    if r.get("skipped") != "no" {
        eprintln!("skipping: {}", r.get("skipped"));
        return;
    }
    for key in ["new_threads", "new_uring"] {
        let got = r.get(key);
        assert_eq!(errno_in(got), libc::EAGAIN, "{key}: {got}\n{}", r.output);
    }
    let capi_new = r.get("capi_new");
    assert_eq!(errno_in(capi_new), libc::EAGAIN, "{capi_new}");
    assert!(capi_new.contains("wbc_cache_open: "), "{capi_new}");
    for key in ["running_threads", "running_uring", "open_same_device", "same_device_io", "running_after"] {
        assert_eq!(r.get(key), "ok", "{key}\n{}", r.output);
    }
    assert_eq!(r.get("running_capi"), "50000/0");
    for key in ["close_threads", "close_uring"] {
        assert_eq!(r.get(key), "ok", "{key}\n{}", r.output);
    }
    assert_eq!(r.get("capi_close"), "0/0");
    // The later write lands inside the first one.
    let mut expected = vec![0u8; 4096 * 3 + 5];
    expected.extend(pattern(3 << 20, 1));
    expected[1 << 20..(1 << 20) + 200_000].copy_from_slice(&pattern(200_000, 5));
    assert!(std::fs::read(dir.0.join("threads")).unwrap() == expected, "threads file");
    assert!(std::fs::read(dir.0.join("ring")).unwrap()[777..] == pattern(3 << 20, 2)[..]);
    assert!(std::fs::read(dir.0.join("capi")).unwrap()[10..] == pattern(50_000, 3)[..]);
    assert!(std::fs::read(dir.0.join("threads-2")).unwrap() == pattern(100_000, 4));
}

/// Opening a file on a device the cache has no flusher for yet starts one:
/// when no thread can be created that must be an `EAGAIN` error. Today
/// `Domain::start` (`src/writeback/domain.rs`) panics ("spawn flusher
/// thread"): a Rust caller's `Cache::open` panics, a C caller gets `-EIO`
/// with "internal panic". The fix makes `Domain::start` return the spawn
/// error and `Shared::domain_for`/`inode_for` (`src/api/shared.rs`) and
/// `Cache::open` pass it on.
#[test]
fn a_new_flusher_that_cannot_start_is_eagain() {
    let (_dir, r) = nproc_report();
    if r.get("skipped") != "no" || r.get("new_device_open") == "skipped" {
        eprintln!("skipping: no thread limit or no second device here");
        return;
    }
    let got = r.get("new_device_open");
    assert!(got != "panic" && errno_in(got) == libc::EAGAIN, "{got}\n{}", r.output);
    assert!(got.contains(&format!("(os error {})", libc::EAGAIN)), "the spawn's own error, its errno kept: {got}");
    let capi = r.get("capi_new_device_open");
    assert_eq!(errno_in(capi), libc::EAGAIN, "{capi}");
    assert!(capi.contains("capi-elsewhere"), "wbc_last_error names the path: {capi}");
    assert_eq!(r.get("running_after"), "ok");
}

// ------------------------------------------------- folio buffers refused

/// Child: the test hook refuses fresh folio buffers. Writes that need a
/// new folio fail with `ENOMEM` (or are short, when part of them landed in
/// folios already cached); everything dirty before stays, and once buffers
/// can be had again a sync makes all of it durable.
#[test]
fn child_buffers_refused() {
    let Some(dir) = child_dir("child_buffers_refused") else { return };
    let sim = Arc::new(SimIo::new(SimConfig { seed: 3, ..SimConfig::default() }));
    let options = "capacity=16M,dirty_limit=4M,dirty_background=2M,folio_max=64K,expire_ms=60000";
    let cache = Cache::with_sim(Config::from_options(options).unwrap(), sim.clone()).unwrap();
    let f = cache.open("/data", &rw_create()).unwrap();
    // Dirty data before the refusals: two whole 64 KiB folios.
    let first = pattern(128 << 10, 1);
    f.write_at(&first, 0).unwrap();
    // A hole up to 8 MiB: reading it needs folios.
    f.set_len(8 << 20).unwrap();
    let mut expected = first.clone();
    expected.resize(8 << 20, 0);

    AlignedBuf::fail_next_allocations(u64::MAX);
    // A new folio: ENOMEM, and the file does not grow.
    let far = f.write_at(&pattern(4096, 2), 16 << 20);
    report("new_folio_write", outcome(&far));
    report("len_after_refused_write", f.len().unwrap());
    // Inside cached folios: no buffer needed.
    let inside = pattern(10_000, 3);
    report("cached_folio_write", outcome(&f.write_at(&inside, 5000)));
    expected[5000..15_000].copy_from_slice(&inside);
    // Crossing from a cached folio into a new one: short, as pwrite(2).
    let crossing = pattern(20_000, 4);
    let n = f.write_at(&crossing, (128 << 10) - 8192);
    report("crossing_write", n.as_ref().map_or_else(|e| format!("errno:{}:{e}", errno_of(e)), |n| n.to_string()));
    if let Ok(n) = n {
        let at = (128 << 10) - 8192;
        expected[at..at + n].copy_from_slice(&crossing[..n]);
    }
    // A read of a hole needs a folio too.
    let mut hole = vec![0u8; 4096];
    report("hole_read", outcome(&f.read_at(&mut hole, 4 << 20)));
    // The C ABI's answer.
    let c_options = CString::new("capacity=16M,dirty_limit=4M,io=threads").unwrap();
    let mut c = ptr::null_mut();
    // SAFETY: valid string and output pointer.
    assert_eq!(unsafe { capi::wbc_cache_open(c_options.as_ptr(), &mut c) }, 0);
    let c_path = dir.join("capi");
    let cf = capi_open(c, &c_path).unwrap();
    let data = pattern(4096, 5);
    // SAFETY: `cf` is live; `data` is valid for its length.
    let rc = unsafe { capi::wbc_pwrite(cf, data.as_ptr().cast(), data.len(), 0, 0) };
    report("capi_write", format!("{rc}:{}", capi_last_error()));
    // Writeback allocates no folio buffers: a sync while refused works.
    report("sync_while_refused", outcome(&f.sync_all()));
    report("durable_while_refused", sim.durable_image(Path::new("/data")).unwrap() == expected);

    // Buffers again.
    AlignedBuf::fail_next_allocations(0);
    report("write_after", outcome(&f.write_at(&pattern(4096, 2), 1 << 20)));
    expected[1 << 20..(1 << 20) + 4096].copy_from_slice(&pattern(4096, 2));
    report("sync_after", outcome(&f.sync_all()));
    let mut back = vec![0u8; expected.len()];
    let n = f.read_at(&mut back, 0).unwrap();
    report("read_back_ok", n == expected.len() && back == expected);
    report("durable_ok", sim.durable_image(Path::new("/data")).unwrap() == expected);

    drop(f);
    report("close", outcome(&cache.close()));
    // SAFETY: handles are live and each closed once.
    unsafe {
        report("capi_close", format!("{}/{}", capi::wbc_close(cf), capi::wbc_cache_close(c)));
    }
}

/// Folio buffers that cannot be allocated (the `AlignedBuf` test hook,
/// standing in for a refused `mmap` and a full heap): `ENOMEM` to the
/// writer, nothing dirty lost. Needs `Memory::reserve`
/// (`src/policy/memory.rs`) to allocate with `AlignedBuf::try_zeroed` and give
/// the reservation back when it fails; until then a refused buffer aborts
/// the process (`handle_alloc_error`) and the hook is not consulted.
#[test]
fn refused_folio_buffers_are_enomem_and_lose_nothing() {
    let dir = TempDir::new("res-buffers");
    let r = run_child("child_buffers_refused", &dir.0);
    assert_eq!(errno_in(r.get("new_folio_write")), libc::ENOMEM, "{}", r.output);
    assert_eq!(r.get("len_after_refused_write"), (8 << 20).to_string(), "a refused write does not grow the file");
    assert_eq!(r.get("cached_folio_write"), "ok");
    assert_eq!(r.get("crossing_write"), "8192", "short: what fit in the cached folio");
    assert_eq!(errno_in(r.get("hole_read")), libc::ENOMEM);
    assert!(r.get("capi_write").starts_with(&format!("-{}:wbc_pwrite: ", libc::ENOMEM)), "{}", r.get("capi_write"));
    assert_eq!(r.get("sync_while_refused"), "ok");
    assert_eq!(r.get("durable_while_refused"), "true");
    for key in ["write_after", "sync_after", "close"] {
        assert_eq!(r.get(key), "ok", "{key}\n{}", r.output);
    }
    assert_eq!(r.get("read_back_ok"), "true");
    assert_eq!(r.get("durable_ok"), "true");
    assert_eq!(r.get("capi_close"), "0/0");
}

/// The hook's contract, on `AlignedBuf` itself (in a child: it is process
/// wide): refusals are counted, `u64::MAX` lasts until reset, and a real
/// refusal (no mapping and no heap for the size) is `ENOMEM`, not an abort.
#[test]
fn child_try_zeroed() {
    if child_dir("child_try_zeroed").is_none() {
        return;
    }
    let errno = |r: io::Result<AlignedBuf>| r.err().and_then(|e| e.raw_os_error());
    report("huge", format!("{:?}", errno(AlignedBuf::try_zeroed(1 << 62))));
    AlignedBuf::fail_next_allocations(2);
    let got: Vec<Option<i32>> = (0..3).map(|_| errno(AlignedBuf::try_zeroed(4096))).collect();
    report("counted", format!("{got:?}"));
    AlignedBuf::fail_next_allocations(u64::MAX);
    let got: Vec<Option<i32>> = (0..3).map(|_| errno(AlignedBuf::try_zeroed(2 << 20))).collect();
    report("forever", format!("{got:?}"));
    report("empty_ok", AlignedBuf::try_zeroed(0).is_ok());
    report("infallible_unaffected", AlignedBuf::zeroed(4096).len());
    AlignedBuf::fail_next_allocations(0);
    report("reset", errno(AlignedBuf::try_zeroed(8192)).is_none());
}

#[test]
fn try_zeroed_reports_enomem_and_the_hook_counts() {
    let dir = TempDir::new("res-try-zeroed");
    let r = run_child("child_try_zeroed", &dir.0);
    let enomem = format!("Some({})", libc::ENOMEM);
    assert_eq!(r.get("huge"), enomem, "{}", r.output);
    assert_eq!(r.get("counted"), format!("[{enomem}, {enomem}, None]"));
    assert_eq!(r.get("forever"), format!("[{enomem}, {enomem}, {enomem}]"));
    assert_eq!(r.get("empty_ok"), "true");
    assert_eq!(r.get("infallible_unaffected"), "4096");
    assert_eq!(r.get("reset"), "true");
}
