//! Background writeback's I/O priority class where the device's scheduler
//! sees it: the block layer's `block_rq_issue` and `block_rq_complete`
//! tracepoints (which carry each request's `ioprio`) on a loop device
//! (O_DIRECT to its backing file), with the mq-deadline scheduler and with
//! none, through io_uring and through the thread pool.
//!
//! With `background_ioprio=idle`, the over-threshold and periodic
//! writeback of a writer reaches the device in the idle class, at most
//! `IDLE_IOS_MAX` (4) requests per writeback worker at once, while an
//! fsync's writes and read misses carry best effort level 0. With the
//! default (`be`), no request is idle and background writes carry best
//! effort level 7.
//!
//! Next to another process's reader that keeps mq-deadline full (fio, 256
//! reads of 64 KiB in flight against the loop device's 128 tags), idle-class
//! requests are not served: the flusher finds one waiting 100 ms, sends
//! its background writeback best effort, and an fsync that needs a block
//! already sent idle waits for it at most until mq-deadline ages it
//! (`prio_aging_expire`, set to 1 s here, on the loop device and on the
//! disk under its backing file, which sees the same classes, and put back
//! after).
//!
//! They need root, `losetup`, tracefs and (the second) fio: without them
//! they skip with a printed reason, except under `CI=true`, where they
//! fail.

use crate::{common, one_at_a_time};

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::loopdev::LoopDevice;
use common::{pattern, wait_until};
use wbcache::{Cache, Config, OpenOptions, Stats};

const MIB: u64 = 1 << 20;
const SECTOR: u64 = 512;
/// The most idle-class requests one writeback worker keeps in the kernel.
const IDLE_IOS_MAX: usize = 4;
const WORKERS: usize = 2;

/// Skips (or, under `CI=true`, fails) a test whose machine lacks `what`.
fn unavailable(what: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but {what}");
    }
    eprintln!("SKIPPED: {what}");
}

/// One request as the tracepoints printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Request {
    issue: bool,
    write: bool,
    sector: u64,
    sectors: u64,
    /// `be`, `idle`, `rt` or `none`, and the level within the class.
    class: String,
    level: u32,
}

impl Request {
    /// Parses the text after `block_rq_issue: ` or `block_rq_complete: `:
    /// `7,3 WS 131072 () 2048 + 256 idle,0,0 [comm]` (issue) or
    /// `7,3 WS () 2048 + 256 idle,0,0 [0]` (complete).
    fn parse(line: &str) -> Option<Request> {
        let (issue, rest) = if let Some((_, r)) = line.split_once("block_rq_issue: ") {
            (true, r)
        } else {
            (false, line.split_once("block_rq_complete: ")?.1)
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let rwbs = fields.get(1)?;
        let at = fields.iter().position(|f| *f == "+")?;
        let sector = fields.get(at - 1)?.parse().ok()?;
        let sectors = fields.get(at + 1)?.parse().ok()?;
        let prio: Vec<&str> = fields.get(at + 2)?.split(',').collect();
        let (write, read) = (rwbs.contains('W'), rwbs.contains('R'));
        if !(write || read) || sectors == 0 || prio.len() != 3 {
            return None;
        }
        Some(Request { issue, write, sector, sectors, class: prio[0].to_string(), level: prio[2].parse().ok()? })
    }

    fn bytes(&self) -> std::ops::Range<u64> {
        self.sector * SECTOR..(self.sector + self.sectors) * SECTOR
    }
}

/// A tracing instance of its own that records the block requests of one
/// device, removed on drop.
struct Trace {
    dir: PathBuf,
}

impl Trace {
    fn start(device: &Path) -> Result<Trace, String> {
        let root = Path::new("/sys/kernel/tracing");
        if !root.join("instances").exists() {
            let _ = Command::new("mount").args(["-t", "tracefs", "nodev"]).arg(root).status();
        }
        let rdev = std::fs::metadata(device).map_err(|e| e.to_string())?.rdev();
        let dev = (u64::from(libc::major(rdev)) << 20) | u64::from(libc::minor(rdev));
        let dir = root.join("instances").join(format!("wbcache-prio-{}-{}", std::process::id(), dev));
        std::fs::create_dir(&dir).map_err(|e| format!("tracefs instance {}: {e}", dir.display()))?;
        let trace = Trace { dir };
        trace.set("buffer_size_kb", "16384")?;
        for event in ["block_rq_issue", "block_rq_complete"] {
            trace.set(&format!("events/block/{event}/filter"), &format!("dev == {dev}"))?;
            trace.set(&format!("events/block/{event}/enable"), "1")?;
        }
        trace.set("tracing_on", "1")?;
        Ok(trace)
    }

    fn set(&self, file: &str, value: &str) -> Result<(), String> {
        std::fs::write(self.dir.join(file), value).map_err(|e| format!("{}: {e}", self.dir.join(file).display()))
    }

    /// Stops recording and returns the requests in the order they happened.
    fn stop(&self) -> Vec<Request> {
        self.set("tracing_on", "0").expect("stop tracing");
        let text = std::fs::read_to_string(self.dir.join("trace")).expect("read the trace");
        text.lines().filter_map(Request::parse).collect()
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = self.set("tracing_on", "0");
        for event in ["block_rq_issue", "block_rq_complete"] {
            let _ = self.set(&format!("events/block/{event}/enable"), "0");
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A loop device with `scheduler` and a trace of its requests.
fn traced_device(tag: &str, scheduler: &str) -> Option<(LoopDevice, Trace)> {
    let dev = LoopDevice::create_or_skip(tag, 256 * MIB)?;
    let name = dev.device.file_name().expect("a device name").to_string_lossy().to_string();
    let sched = PathBuf::from(format!("/sys/block/{name}/queue/scheduler"));
    if let Err(e) = std::fs::write(&sched, scheduler) {
        unavailable(&format!("no {scheduler} scheduler for {name}: {e}"));
        return None;
    }
    match Trace::start(&dev.device) {
        Ok(trace) => Some((dev, trace)),
        Err(e) => {
            unavailable(&format!("no block tracepoints: {e}"));
            None
        }
    }
}

fn open_cache(io: &str, background_ioprio: &str) -> Cache {
    let options = format!(
        "capacity=64M,dirty_limit=32M,dirty_background=4M,expire_ms=200,io={io},writeback_workers={WORKERS},\
         background_ioprio={background_ioprio}"
    );
    Cache::new(Config::from_options(&options).unwrap()).unwrap()
}

/// The most requests of `class` the device held at once.
fn most_in_flight(requests: &[Request], class: &str) -> usize {
    let mut in_flight: HashMap<u64, usize> = HashMap::new();
    let (mut now, mut most) = (0usize, 0usize);
    for r in requests.iter().filter(|r| r.class == class) {
        if r.issue {
            *in_flight.entry(r.sector).or_default() += 1;
            now += 1;
            most = most.max(now);
        } else if let Some(n) = in_flight.get_mut(&r.sector).filter(|n| **n > 0) {
            *n -= 1;
            now -= 1;
        }
    }
    most
}

/// Writes 16 MiB (over the 4 MiB background threshold: the flusher writes
/// it back, the rest when it expires) and waits for it to be clean; then
/// writes 1 MiB at 64 MiB and fsyncs; then reads 1 MiB at 96 MiB, which
/// no one wrote (a miss).
fn background_then_fsync_then_read(cache: &Cache, device: &Path, what: &str) -> Stats {
    let f = cache.open(device, &OpenOptions::new().read(true).write(true)).unwrap();
    let data = pattern(16 * MIB as usize, 7);
    for (i, chunk) in data.chunks(MIB as usize).enumerate() {
        assert_eq!(f.write_at(chunk, i as u64 * MIB).unwrap(), chunk.len(), "{what}");
    }
    let clean = wait_until(Duration::from_secs(30), || {
        let st = cache.stats();
        st.dirty_bytes == 0 && st.writeback_bytes == 0
    });
    assert!(clean, "{what}: the flusher wrote everything back: {:?}", cache.stats());
    f.write_at(&data[..MIB as usize], 64 * MIB).unwrap();
    f.sync_all().unwrap();
    let mut back = vec![0u8; MIB as usize];
    assert_eq!(f.read_at(&mut back, 96 * MIB).unwrap(), back.len(), "{what}");
    cache.stats()
}

fn check_classes(scheduler: &str, io: &str, background_ioprio: &str) {
    let what = format!("{scheduler}, {io}, background_ioprio={background_ioprio}");
    let Some((dev, trace)) = traced_device("prio", scheduler) else { return };
    let cache = open_cache(io, background_ioprio);
    let stats = background_then_fsync_then_read(&cache, &dev.device, &what);
    let requests = trace.stop();
    drop(cache);
    let issued: Vec<&Request> = requests.iter().filter(|r| r.issue).collect();
    let within = |r: &&Request, at: u64| r.bytes().start >= at && r.bytes().end <= at + MIB;
    let background: Vec<&Request> = issued.iter().copied().filter(|r| r.write && r.bytes().end <= 16 * MIB).collect();
    let fsync_writes: Vec<&Request> = issued.iter().copied().filter(|r| r.write && within(r, 64 * MIB)).collect();
    let reads: Vec<&Request> = issued.iter().copied().filter(|r| !r.write && within(r, 96 * MIB)).collect();
    let background_bytes: u64 = background.iter().map(|r| r.bytes().end - r.bytes().start).sum();
    assert_eq!(background_bytes, 16 * MIB, "{what}: every background byte went to the device once");
    assert!(!fsync_writes.is_empty() && !reads.is_empty(), "{what}: {requests:?}");
    for r in fsync_writes.iter().chain(&reads) {
        // The thread pool may run a caller's own I/O on the caller's
        // thread, at that thread's level; io_uring gives every request its
        // level. The class is what mq-deadline reads.
        let level_ok = r.level == 0 || io == "threads";
        assert!(r.class == "be" && level_ok, "{what}: what a caller waits for: {r:?}");
    }
    if background_ioprio == "idle" {
        // Best effort only after an idle request waited 100 ms: the disk
        // under the loop device is shared with the rest of the machine.
        let after_a_wait = stats.idle_class_waits_over > 0;
        for r in &background {
            let idle = (r.class.as_str(), r.level) == ("idle", 0);
            let best_effort = (r.class.as_str(), r.level) == ("be", 7);
            assert!(idle || (best_effort && after_a_wait), "{what}: background writeback: {r:?} ({stats:?})");
        }
        assert!(stats.idle_class_ios > 0, "{what}: {stats:?}");
        let most = most_in_flight(&requests, "idle");
        assert!(most <= IDLE_IOS_MAX * WORKERS, "{what}: {most} idle requests at once");
    } else {
        assert_eq!(stats.idle_class_ios, 0, "{what}");
        for r in &background {
            assert_eq!((r.class.as_str(), r.level), ("be", 7), "{what}: background writeback: {r:?}");
        }
    }
    assert!(requests.iter().all(|r| r.class != "idle" || background_ioprio == "idle"), "{what}");
}

#[test]
fn background_writeback_reaches_the_scheduler_in_its_own_class() {
    let _one = one_at_a_time();
    for scheduler in ["mq-deadline", "none"] {
        for io in ["uring", "threads"] {
            for background_ioprio in ["idle", "be"] {
                check_classes(scheduler, io, background_ioprio);
            }
        }
    }
}

/// fio reading the device at random, 256 reads in flight, in a process
/// group of its own (killed with it on drop). Its job runs as a thread
/// (`--thread`): a job process of its own starts a new session, which
/// killing fio's group would leave running, holding the device.
struct SaturatingReader(Child);

impl SaturatingReader {
    fn start(device: &Path) -> Option<SaturatingReader> {
        let mut cmd = Command::new("fio");
        cmd.args(["--name=reader", "--rw=randread", "--bs=64k", "--direct=1", "--ioengine=io_uring"])
            .args(["--iodepth=256", "--time_based", "--runtime=60", "--readonly"])
            .args(["--offset=128M", "--size=64M", "--thread"])
            .arg(format!("--filename={}", device.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        match cmd.spawn() {
            Ok(child) => Some(SaturatingReader(child)),
            Err(e) => {
                unavailable(&format!("no fio here ({e})"));
                None
            }
        }
    }
}

impl Drop for SaturatingReader {
    fn drop(&mut self) {
        // SAFETY: kill takes only integers; the group is fio's own.
        unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// mq-deadline's `prio_aging_expire` of a queue, set for a test and put
/// back on drop.
struct AgingSet {
    path: PathBuf,
    before: String,
}

impl AgingSet {
    /// Sets it on the queue at `/sys/dev/block/MAJ:MIN` of `rdev` (or of
    /// the disk holding that partition), if that queue runs mq-deadline.
    fn set(rdev: u64, ms: u32) -> Option<AgingSet> {
        let dev = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)));
        let queue = if dev.join("partition").exists() { dev.join("../queue") } else { dev.join("queue") };
        let path = queue.join("iosched/prio_aging_expire");
        let before = std::fs::read_to_string(&path).ok()?.trim().to_string();
        std::fs::write(&path, ms.to_string()).ok()?;
        Some(AgingSet { path, before })
    }
}

impl Drop for AgingSet {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.before);
    }
}

#[test]
fn idle_writeback_next_to_a_reader_that_fills_the_scheduler() {
    let _one = one_at_a_time();
    for io in ["uring", "threads"] {
        next_to_a_saturating_reader(io);
    }
}

fn next_to_a_saturating_reader(io: &str) {
    let Some((dev, trace)) = traced_device("prio-busy", "mq-deadline") else { return };
    // The loop device passes each request's class on to the disk under
    // its backing file, where the reader's requests queue too: mq-deadline
    // ages idle requests after 1 s on both.
    let device_rdev = std::fs::metadata(&dev.device).unwrap().rdev();
    let _loop_aging = AgingSet::set(device_rdev, 1000).expect("the loop device runs mq-deadline");
    let _disk_aging = AgingSet::set(std::fs::metadata(dev.dir.0.join("disk.img")).unwrap().dev(), 1000);
    // The reader reads 64 MiB that hold data, so each read reaches the
    // disk under the loop device (a hole would cost it nothing).
    let mut image = std::fs::OpenOptions::new().write(true).open(&dev.device).unwrap();
    std::io::Seek::seek(&mut image, std::io::SeekFrom::Start(128 * MIB)).unwrap();
    std::io::Write::write_all(&mut image, &pattern(64 * MIB as usize, 3)).unwrap();
    image.sync_all().unwrap();
    drop(image);
    let Some(_reader) = SaturatingReader::start(&dev.device) else { return };
    std::thread::sleep(Duration::from_millis(500));
    let cache = open_cache(io, "idle");
    let f = cache.open(&dev.device, &OpenOptions::new().read(true).write(true)).unwrap();
    let data = pattern(16 * MIB as usize, 9);
    for (i, chunk) in data.chunks(MIB as usize).enumerate() {
        f.write_at(chunk, i as u64 * MIB).unwrap();
    }
    // Let over-threshold writeback start in the idle class and starve.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    f.sync_all().unwrap();
    let fsync = started.elapsed();
    let stats = cache.stats();
    let requests = trace.stop();
    assert!(stats.idle_class_ios > 0, "{io}: {stats:?}");
    assert!(stats.idle_class_waits_over > 0, "{io}: a starved idle request sent writeback best effort: {stats:?}");
    let most = most_in_flight(&requests, "idle");
    assert!(most <= IDLE_IOS_MAX * WORKERS, "{io}: {most} idle requests at once");
    // Bounded by mq-deadline's aging of the idle requests it already held
    // (1 s), not by the reader: generous for a loaded machine.
    assert!(fsync < Duration::from_secs(10), "{io}: fsync took {fsync:?} next to the reader: {stats:?}");
    eprintln!("{io}: fsync next to a saturating reader: {fsync:?}; {} idle-class I/Os", stats.idle_class_ios);
    drop(f);
    drop(cache);
    let mut back = vec![0u8; data.len()];
    let disk = std::fs::File::open(&dev.device).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&disk, &mut back, 0).unwrap();
    common::assert_same(&back, &data, &format!("{io}: the device after the fsync, read by the kernel"));
}
