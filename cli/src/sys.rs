//! Small system helpers: aligned buffers for O_DIRECT, a PRNG, the machine
//! description, file-system and block-device facts, dropping caches.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::CString;
use std::fs;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Alignment of every I/O buffer: enough for O_DIRECT on any device.
pub const ALIGN: usize = 4096;

/// Buffers of at least this size are wbcache's own folio buffers, on
/// transparent huge pages as the cache's are: an O_DIRECT I/O on a
/// physically contiguous buffer is one segment, not one per 4 KiB page, and
/// on a virtio disk that alone nearly doubled raw 1 MiB reads. Every engine
/// gets the same buffers, so `kernel-direct` stays the device's limit.
const HUGE_BUF_MIN_BYTES: usize = 1 << 20;

/// A buffer aligned to [`ALIGN`], zeroed at allocation.
pub struct IoBuffer {
    ptr: *mut u8,
    len: usize,
    memory: Memory,
}

enum Memory {
    Heap(Layout),
    /// Owns the memory at `ptr` (which does not move with it).
    Folio {
        _owner: wbcache::AlignedBuf,
    },
}

// SAFETY: the buffer is plain owned memory; `IoBuffer` is its only owner.
unsafe impl Send for IoBuffer {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for IoBuffer {}

impl IoBuffer {
    pub fn new(len: usize) -> IoBuffer {
        if len >= HUGE_BUF_MIN_BYTES && len % ALIGN == 0 {
            let mut buf = wbcache::AlignedBuf::zeroed(len);
            let ptr = buf.as_mut_ptr();
            return IoBuffer { ptr, len, memory: Memory::Folio { _owner: buf } };
        }
        let cap = len.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(cap, ALIGN).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        IoBuffer { ptr, len, memory: Memory::Heap(layout) }
    }

    /// A buffer filled with pseudo-random bytes (so no layer can treat the
    /// data as zeroes).
    pub fn filled(len: usize, seed: u64) -> IoBuffer {
        let mut b = IoBuffer::new(len);
        let mut rng = Rng::new(seed);
        for chunk in b.chunks_mut(8) {
            let v = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        b
    }
}

impl Deref for IoBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised (zeroed) bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for IoBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is valid for `len` initialised (zeroed) bytes while
        // self lives, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for IoBuffer {
    fn drop(&mut self) {
        if let Memory::Heap(layout) = self.memory {
            // SAFETY: allocated in `new` with this exact layout.
            unsafe { dealloc(self.ptr, layout) }
        }
    }
}

/// xorshift64*: fast, seedable, good enough for offsets.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The JSON `machine` object.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub kernel: String,
    pub cpus: usize,
    pub mem_bytes: u64,
    pub fs: String,
    pub device: String,
}

pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, field)
}

pub fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// This process's peak resident set size so far (`VmHWM` of
/// `/proc/self/status`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    meminfo_field(&fs::read_to_string("/proc/self/status").ok()?, "VmHWM")
}

/// Dirty + Writeback from `/proc/meminfo`, in bytes (system-wide).
pub fn kernel_dirty_bytes() -> u64 {
    match fs::read_to_string("/proc/meminfo") {
        Ok(text) => meminfo_field(&text, "Dirty").unwrap_or(0) + meminfo_field(&text, "Writeback").unwrap_or(0),
        Err(_) => 0,
    }
}

/// The machine's busy CPU time so far, in clock ticks (see
/// [`clock_ticks_per_s`]): user + nice + system + irq + softirq of the
/// `cpu` line of `/proc/stat`, every CPU together. Kernel threads (the
/// kernel's writeback in kworkers) count as well as processes.
pub fn cpu_busy_ticks() -> Option<u64> {
    proc_stat_busy(&fs::read_to_string("/proc/stat").ok()?)
}

pub fn proc_stat_busy(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq ...
    if v.len() < 7 {
        return None;
    }
    Some(v[0] + v[1] + v[2] + v[5] + v[6])
}

/// Clock ticks per second of `/proc/stat` (`USER_HZ`).
pub fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// The mount holding `path`: (file-system type, source device, mount point).
pub fn mount_of(path: &Path) -> Option<(String, String, PathBuf)> {
    let path = fs::canonicalize(path).ok()?;
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(String, String, PathBuf)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(src), Some(mnt), Some(fstype)) = (f.next(), f.next(), f.next()) else { continue };
        let mnt = PathBuf::from(unescape_mount(mnt));
        let longer = match &best {
            Some(b) => mnt.as_os_str().len() >= b.2.as_os_str().len(),
            None => true,
        };
        if path.starts_with(&mnt) && longer {
            best = Some((fstype.to_string(), unescape_mount(src), mnt));
        }
    }
    best
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
}

/// True for memory-backed file systems, where O_DIRECT and writeback mean
/// nothing.
pub fn is_memory_fs(path: &Path) -> bool {
    memory_fs(path).is_some()
}

/// The memory-backed file system `path` is on (`tmpfs`, `ramfs`), if it is.
pub fn memory_fs(path: &Path) -> Option<&'static str> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statfs` is a plain C struct, for which all zeros is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a struct statfs fills.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    match st.f_type as i64 {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    }
}

/// Bytes available to this process on the file system of `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is a plain C struct, for which all zeros is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a struct statvfs fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Size of a block device in bytes.
pub fn block_device_size(path: &Path) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let f = fs::File::open(path)?;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

pub fn is_block_device(path: &Path) -> bool {
    fs::metadata(path).map(|m| m.file_type().is_block_device()).unwrap_or(false)
}

/// Whether `dev` (or a partition of it) is mounted or used as swap.
pub fn device_in_use(dev: &Path) -> Option<String> {
    let dev = fs::canonicalize(dev).ok()?;
    let dev_s = dev.to_string_lossy().to_string();
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(src), Some(mnt)) = (f.next(), f.next()) else { continue };
        let src_c = fs::canonicalize(src).map(|p| p.to_string_lossy().to_string()).unwrap_or_else(|_| src.into());
        if src_c == dev_s
            || (src_c.starts_with(&dev_s) && src_c[dev_s.len()..].trim_start_matches('p').parse::<u32>().is_ok())
        {
            return Some(format!("{src_c} is mounted on {mnt}"));
        }
    }
    let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
    for line in swaps.lines().skip(1) {
        if let Some(src) = line.split_whitespace().next() {
            if src == dev_s {
                return Some(format!("{src} is used as swap"));
            }
        }
    }
    None
}

/// Whether this process may drop the kernel's caches (as root, with a
/// writable `/proc/sys`), found without dropping them.
pub fn can_drop_caches() -> io::Result<()> {
    fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches").map(drop)
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
pub fn drop_caches() -> io::Result<()> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3\n")
}

/// A size in the option syntax, exact: `256M`, `1G`, or plain bytes
/// (`3000`, not `2.9K`) when no unit divides it.
pub fn exact_size(bytes: u64) -> String {
    for (unit, n) in [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if bytes >= n && bytes % n == 0 {
            return format!("{}{unit}", bytes / n);
        }
    }
    bytes.to_string()
}

/// Human size: `512M`, `1G`, `4K`, `1.5G`.
pub fn fmt_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, n) in UNITS {
        if bytes >= n {
            return if bytes % n == 0 {
                format!("{}{u}", bytes / n)
            } else {
                format!("{:.1}{u}", bytes as f64 / n as f64)
            };
        }
    }
    format!("{bytes}")
}

/// The block layer's counters of one device (`/sys/dev/block/MAJ:MIN/stat`,
/// Documentation/block/stat.rst): requests completed, bytes, and the
/// milliseconds they spent from their allocation (scheduler queue
/// included) to their completion, per direction, and the flushes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStat {
    pub reads: u64,
    pub read_sectors: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_sectors: u64,
    pub write_ms: u64,
    /// Milliseconds the device had requests in flight.
    pub busy_ms: u64,
    pub flushes: u64,
    pub flush_ms: u64,
}

/// What the device holding `path` did between two [`BlockStat`]s, as the
/// bench JSON's `block_device` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct BlockDelta {
    pub device: String,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub write_ms: u64,
    pub busy_ms: u64,
    pub flushes: u64,
    pub flush_ms: u64,
}

/// Parses a `stat` file's fields (11 on old kernels, 17 with flushes).
pub fn parse_block_stat(text: &str) -> Option<BlockStat> {
    let f: Vec<u64> = text.split_whitespace().map(|v| v.parse().ok()).collect::<Option<_>>()?;
    if f.len() < 11 {
        return None;
    }
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    Some(BlockStat {
        reads: at(0),
        read_sectors: at(2),
        read_ms: at(3),
        writes: at(4),
        write_sectors: at(6),
        write_ms: at(7),
        busy_ms: at(9),
        flushes: at(15),
        flush_ms: at(16),
    })
}

/// The device `path` lives on (the device itself for a block device
/// node): its name and its counters now; `None` where it has none (tmpfs).
pub fn block_stat_of(path: &Path) -> Option<(String, BlockStat)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).ok()?;
    let dev = if meta.file_type().is_block_device() { meta.rdev() } else { meta.dev() };
    let dir = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev)));
    let name = fs::read_link(&dir).ok()?.file_name()?.to_string_lossy().into_owned();
    Some((name, parse_block_stat(&fs::read_to_string(dir.join("stat")).ok()?)?))
}

impl BlockStat {
    pub fn since(&self, before: &BlockStat, device: String) -> BlockDelta {
        const SECTOR: u64 = 512;
        BlockDelta {
            device,
            reads: self.reads.saturating_sub(before.reads),
            read_bytes: self.read_sectors.saturating_sub(before.read_sectors) * SECTOR,
            read_ms: self.read_ms.saturating_sub(before.read_ms),
            writes: self.writes.saturating_sub(before.writes),
            write_bytes: self.write_sectors.saturating_sub(before.write_sectors) * SECTOR,
            write_ms: self.write_ms.saturating_sub(before.write_ms),
            busy_ms: self.busy_ms.saturating_sub(before.busy_ms),
            flushes: self.flushes.saturating_sub(before.flushes),
            flush_ms: self.flush_ms.saturating_sub(before.flush_ms),
        }
    }
}

/// Makes the process `command` starts die with this one: `SIGKILL` when
/// this process ends (`PR_SET_PDEATHSIG`), set before the program is
/// executed, and no program at all if this process already ended between
/// the fork and then (the parent then is another process). A killed
/// `bench` never leaves a writer behind.
pub fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid only reads this process's id.
    let parent = unsafe { libc::getpid() };
    // SAFETY: prctl and getppid are async-signal-safe and only set or read
    // attributes of the new process.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the parent ended before the program started"));
            }
            Ok(())
        })
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_stat_fields_and_deltas() {
        // Linux 6.18's 17 fields for vda: reads, merges, sectors, ms; the
        // same of writes; in flight, busy ms, queue ms; discards (4); flushes, ms.
        let before = parse_block_stat("100 5 800 40 200 9 4000 300 0 250 340 0 0 0 0 10 20\n").unwrap();
        let after = parse_block_stat("110 5 880 44 260 9 6000 900 2 700 950 0 0 0 0 16 50").unwrap();
        let d = after.since(&before, "vda".into());
        assert_eq!((d.reads, d.read_bytes, d.read_ms), (10, 80 * 512, 4));
        assert_eq!((d.writes, d.write_bytes, d.write_ms), (60, 2000 * 512, 600));
        assert_eq!((d.busy_ms, d.flushes, d.flush_ms), (450, 6, 30));
        // Old kernels: 11 fields, no flushes.
        let old = parse_block_stat("1 0 8 1 2 0 16 3 0 4 5").unwrap();
        assert_eq!((old.writes, old.flushes), (2, 0));
        assert_eq!(parse_block_stat("1 2 x"), None);
        assert_eq!(parse_block_stat("1 2 3"), None);
    }

    #[test]
    fn busy_cpu_time_from_proc_stat() {
        let text = "cpu  100 20 30 5000 70 4 6 8 0 0\ncpu0 50 10 15 2500 35 2 3 4 0 0\nintr 1\n";
        // user + nice + system + irq + softirq; idle, iowait and steal are not busy.
        assert_eq!(proc_stat_busy(text), Some(160));
        assert_eq!(proc_stat_busy("cpu  1 2 3\n"), None);
        assert_eq!(proc_stat_busy("intr 1\n"), None);
        assert!(cpu_busy_ticks().is_some(), "this machine's /proc/stat");
        assert!(clock_ticks_per_s() > 0.0);
    }

    #[test]
    fn buffers_are_aligned_zeroed_and_large_ones_are_folio_buffers() {
        for len in [0, 1, ALIGN, 3 * ALIGN + 5, HUGE_BUF_MIN_BYTES, 4 * HUGE_BUF_MIN_BYTES, 3 * HUGE_BUF_MIN_BYTES + 5]
        {
            let mut buf = IoBuffer::new(len);
            assert_eq!(buf.len(), len);
            assert_eq!(buf.as_ptr() as usize % ALIGN, 0, "O_DIRECT alignment for {len}");
            if len >= HUGE_BUF_MIN_BYTES && len % ALIGN == 0 {
                let align = if len >= 2 * HUGE_BUF_MIN_BYTES { 2 * HUGE_BUF_MIN_BYTES } else { HUGE_BUF_MIN_BYTES };
                assert_eq!(buf.as_ptr() as usize % align, 0, "{len} bytes: a folio buffer");
            }
            assert!(buf.iter().all(|&b| b == 0), "zeroed");
            buf.fill(0x5a);
            assert!(buf.iter().all(|&b| b == 0x5a), "writable to the end");
        }
        let filled = IoBuffer::filled(HUGE_BUF_MIN_BYTES, 9);
        assert_eq!(&filled[..], &IoBuffer::filled(HUGE_BUF_MIN_BYTES, 9)[..], "seeded");
    }
}
