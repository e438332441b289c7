//! The five engines behind one interface, so every workload runs against
//! every engine:
//!
//! - `kernel-buffered`: `pwrite`/`pread` (and `write`/`writev` after `lseek`
//!   for the libMicro shapes) through the kernel page cache;
//! - `kernel-dontcache`: `pwritev2`/`preadv2` with `RWF_DONTCACHE` (0x80);
//!   `EOPNOTSUPP`/`EINVAL` for the flag becomes an `Unsupported` error, which
//!   the report shows as `unsupported`;
//! - `kernel-direct`: O_DIRECT through io_uring, [`DIRECT_DEPTH`] requests
//!   in flight for streaming and random workloads (latency = completion
//!   latency, submission to completion), one at a time for the per-call
//!   workloads;
//! - `wbcache` and `wbcache-dontcache`: a [`wbcache::File`] of a shared
//!   [`wbcache::Cache`], the latter with [`WriteFlags::DONTCACHE`] on every
//!   read and write. The libMicro call shapes: `write` and `pwrite` are
//!   one `write_at` at the offset, `writev` is one `write_vectored_at`;
//! - `wbcache-preload`: kernel-buffered's C library calls, made by a worker
//!   that runs under `libwbcache_preload.so` (as `wbcache run` runs a
//!   program), so the cache serves them: what an unmodified program pays.
//!   Only the workloads that opt in run it (their calls are ones the
//!   library serves; `mincore` residency questions are not).
//!
//! This module holds the interface ([`EngineFile`], [`Pipelined`],
//! [`SharedReader`] for reader threads sharing one open file) and the
//! [`System`] a measurement opens its files in; each engine's file is in
//! its own module: `kernel` (buffered and RWF_DONTCACHE), `direct`
//! (O_DIRECT through io_uring), `wbcache_file`; `preload` reads the
//! preloaded cache's statistics.

mod direct;
mod kernel;
mod preload;
mod wbcache_file;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wbcache::{Advice, Cache, Config, OpenOptions, WriteFlags};

use crate::sys::{kernel_dirty_bytes, IoBuffer};
use direct::DirectFile;
use kernel::{KernelFile, Mode};
use wbcache_file::WbFile;

/// `RWF_DONTCACHE` (Linux 6.14+): uncached buffered I/O.
pub const RWF_DONTCACHE: libc::c_int = 0x80;

/// Marks an error as "this engine cannot do this here" (the report's
/// `unsupported` status), as opposed to a failure.
#[derive(Debug)]
pub struct NotSupportedHere(pub String);

impl std::fmt::Display for NotSupportedHere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotSupportedHere {}

pub fn unsupported(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, NotSupportedHere(msg))
}

/// Whether `e` was made by [`unsupported`].
pub fn is_unsupported(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotSupportedHere>())
}

/// Requests kept in flight by `kernel-direct`.
pub const DIRECT_DEPTH: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    KernelBuffered,
    KernelDontcache,
    KernelDirect,
    Wbcache,
    WbcacheDontcache,
    WbcachePreload,
}

impl EngineKind {
    pub const ALL: [EngineKind; 6] = [
        EngineKind::KernelBuffered,
        EngineKind::KernelDontcache,
        EngineKind::KernelDirect,
        EngineKind::Wbcache,
        EngineKind::WbcacheDontcache,
        EngineKind::WbcachePreload,
    ];

    /// Every engine but `wbcache-preload`: what a workload runs on unless
    /// it opts in to the preload.
    pub const WITHOUT_PRELOAD: [EngineKind; 5] = [
        EngineKind::KernelBuffered,
        EngineKind::KernelDontcache,
        EngineKind::KernelDirect,
        EngineKind::Wbcache,
        EngineKind::WbcacheDontcache,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::KernelBuffered => "kernel-buffered",
            EngineKind::KernelDontcache => "kernel-dontcache",
            EngineKind::KernelDirect => "kernel-direct",
            EngineKind::Wbcache => "wbcache",
            EngineKind::WbcacheDontcache => "wbcache-dontcache",
            EngineKind::WbcachePreload => "wbcache-preload",
        }
    }

    pub fn parse(s: &str) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|e| e.name() == s)
    }

    pub fn is_kernel(self) -> bool {
        matches!(self, EngineKind::KernelBuffered | EngineKind::KernelDontcache | EngineKind::KernelDirect)
    }

    /// The plain buffered engine of the same system (the competing peer, and
    /// what fills a file that must start out cached).
    pub fn buffered_peer(self) -> EngineKind {
        match self {
            EngineKind::WbcachePreload => EngineKind::WbcachePreload,
            e if e.is_kernel() => EngineKind::KernelBuffered,
            _ => EngineKind::Wbcache,
        }
    }

    pub fn is_dontcache(self) -> bool {
        matches!(self, EngineKind::KernelDontcache | EngineKind::WbcacheDontcache)
    }

    /// What it is, in one short line (`--help`).
    pub fn summary(self) -> &'static str {
        match self {
            EngineKind::KernelDirect => "O_DIRECT through io_uring, queue depth 16 (the device's limit)",
            EngineKind::WbcachePreload => "kernel-buffered's calls under libwbcache_preload.so (small-overwrite only)",
            e => e.describe(),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            EngineKind::KernelBuffered => "pwrite/pread through the kernel page cache",
            EngineKind::KernelDontcache => "pwritev2/preadv2 with RWF_DONTCACHE (uncached buffered I/O)",
            EngineKind::KernelDirect => {
                "O_DIRECT through io_uring, queue depth 16, buffers on huge pages (the device's limit)"
            }
            EngineKind::Wbcache => "wbcache::Cache, write_at/read_at (write_vectored_at for writev)",
            EngineKind::WbcacheDontcache => "wbcache::Cache with WriteFlags::DONTCACHE",
            EngineKind::WbcachePreload => {
                "kernel-buffered's calls (pwrite, lseek + write/writev, fsync) under libwbcache_preload.so, as \
                 `wbcache run` runs a program: what an unmodified program pays (small-overwrite only)"
            }
        }
    }
}

/// libMicro's call shapes for the small-overwrite workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// `lseek(fd, off)` (untimed) then `write(2)`.
    Write,
    /// `pwrite(2)` at the offset.
    Pwrite,
    /// `lseek(fd, off)` (untimed) then `writev(2)` of several buffers.
    Writev,
}

impl CallKind {
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Write => "write",
            CallKind::Pwrite => "pwrite",
            CallKind::Writev => "writev",
        }
    }
}

/// Where a job does its I/O: a file (created and truncated when `create`),
/// or a region `[offset, offset + len)` of a block device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Target {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
    pub create: bool,
}

/// One open file of an engine. Offsets are absolute (the job adds the
/// target's offset).
pub trait EngineFile: Send {
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()>;
    fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Untimed preparation of a [`CallKind`] call (the `lseek` of `write`
    /// and `writev`).
    fn prepare_call(&mut self, _call: CallKind, _off: u64) -> io::Result<()> {
        Ok(())
    }
    /// One libMicro-style call writing `bufs` back to back at `off`.
    fn write_call(&mut self, call: CallKind, bufs: &[&[u8]], off: u64) -> io::Result<()>;
    fn fsync(&mut self) -> io::Result<()>;
    /// Engines that keep several requests in flight.
    fn pipeline(&mut self) -> Option<&mut dyn Pipelined> {
        None
    }
    /// Prepares [`EngineFile::resident`] for ranges inside `[off, off +
    /// len)` (`off` page-aligned); `false` when the engine has no cache to
    /// ask (O_DIRECT).
    fn track_residency(&mut self, _off: u64, _len: u64) -> io::Result<bool> {
        Ok(false)
    }
    /// Whether every page (kernel) or block (wbcache) of `[off, off + len)`
    /// is cached now, asked without reading or faulting anything in. Only
    /// after [`EngineFile::track_residency`] said `true`, inside its range.
    fn resident(&mut self, _off: u64, _len: u64) -> io::Result<bool> {
        Err(io::Error::other("this engine has no cache to ask"))
    }
    /// How many bytes of `[off, off + len)` are cached now (dirty ones
    /// included), asked as [`EngineFile::resident`] asks: only after
    /// [`EngineFile::track_residency`] said `true`, inside its range.
    fn cached_bytes(&mut self, _off: u64, _len: u64) -> io::Result<u64> {
        Err(io::Error::other("this engine has no cache to ask"))
    }
    /// Advice about `[off, off + len)`: `posix_fadvise(2)` on the kernel's
    /// file descriptor, [`wbcache::File::advise`] on wbcache's handle.
    fn advise(&mut self, _off: u64, _len: u64, advice: Advice) -> io::Result<()> {
        Err(unsupported(format!("this engine takes no {advice:?} advice")))
    }
    /// Starts the writeback of the dirty data of `[off, off + len)` and
    /// returns without waiting for it: `sync_file_range(2)` with
    /// `SYNC_FILE_RANGE_WRITE` on the kernel's file descriptor,
    /// [`wbcache::File::writeback_range`] with [`SyncRangeFlags::WRITE`]
    /// on wbcache's handle.
    fn start_writeback(&mut self, _off: u64, _len: u64) -> io::Result<()> {
        Err(unsupported("this engine has no range writeback".into()))
    }
    /// The file as several threads read it at once (`rand-read`'s
    /// `cached-4k-readers` variants), or `None` when each thread needs a
    /// handle of its own (kernel-direct: its io_uring serves one thread).
    fn shared_reader(&self) -> Option<SharedReader<'_>> {
        None
    }
}

/// One open file that several threads read at once: the kernel's file
/// descriptor, read with `pread(2)` (`preadv2(2)` with `RWF_DONTCACHE` for
/// kernel-dontcache), or wbcache's handle, which is `Send + Sync`.
#[derive(Clone, Copy)]
pub enum SharedReader<'a> {
    Fd { fd: std::os::fd::RawFd, dontcache: bool },
    Wbcache { file: &'a wbcache::File, flags: WriteFlags },
}

impl SharedReader<'_> {
    /// Reads `buf` at `off` (fewer bytes only at the end of the file).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        match *self {
            SharedReader::Fd { fd, dontcache } => kernel::read_full(fd, buf, off, dontcache),
            SharedReader::Wbcache { file, flags } => file.read_at_with(buf, off, flags),
        }
    }
}

/// A source of `(offset, len)` requests for [`Pipelined::run`]; `None` ends
/// the stream.
pub type NextOp<'a> = dyn FnMut() -> Option<(u64, usize)> + 'a;
/// Called once per completed request with its bytes and completion latency.
pub type OnDone<'a> = dyn FnMut(usize, Duration) + 'a;

pub trait Pipelined {
    /// Runs requests from `next` with up to the engine's depth in flight.
    /// Writes take their data from `wbuf`; reads land in `rbufs` (one per
    /// slot, at least depth of them).
    fn run(
        &mut self,
        write: bool,
        wbuf: &IoBuffer,
        rbufs: &mut [IoBuffer],
        next: &mut NextOp<'_>,
        done: &mut OnDone<'_>,
    ) -> io::Result<()>;
}

/// The engine's world: the kernel, or one wbcache cache shared by every job
/// of a measurement.
pub enum System {
    Kernel,
    Wbcache(Arc<Cache>),
    /// This process runs under the preload library, whose cache serves
    /// the kernel engine's calls.
    Preload,
}

impl System {
    pub fn new(engine: EngineKind, wbcache_options: &str) -> io::Result<System> {
        if engine.is_kernel() {
            return Ok(System::Kernel);
        }
        if engine == EngineKind::WbcachePreload {
            preload::check_loaded()?;
            return Ok(System::Preload);
        }
        let config = Config::from_options(wbcache_options)?;
        Ok(System::Wbcache(Arc::new(Cache::new(config)?)))
    }

    pub fn open(&self, engine: EngineKind, target: &Target) -> io::Result<Box<dyn EngineFile>> {
        match (self, engine) {
            (System::Kernel, EngineKind::KernelBuffered) => Ok(Box::new(KernelFile::open(target, Mode::Buffered)?)),
            (System::Kernel, EngineKind::KernelDontcache) => Ok(Box::new(KernelFile::open(target, Mode::Dontcache)?)),
            (System::Kernel, EngineKind::KernelDirect) => Ok(Box::new(DirectFile::open(target)?)),
            (System::Preload, EngineKind::WbcachePreload) => Ok(Box::new(KernelFile::open(target, Mode::Buffered)?)),
            (System::Wbcache(cache), EngineKind::Wbcache | EngineKind::WbcacheDontcache) => {
                let options = if target.create {
                    OpenOptions::read_write_create().truncate(true)
                } else {
                    OpenOptions::new().read(true).write(true)
                };
                let file = cache.open(&target.path, &options)?;
                let flags =
                    if engine == EngineKind::WbcacheDontcache { WriteFlags::DONTCACHE } else { WriteFlags::NONE };
                Ok(Box::new(WbFile { file, flags, residency: Vec::new() }))
            }
            _ => Err(io::Error::other(format!("engine {} does not belong to this system", engine.name()))),
        }
    }

    /// The wbcache Cache every job of the measurement shares (`None` for
    /// the kernel): `sqlite` registers its VFS over it.
    pub fn cache(&self) -> Option<&Arc<Cache>> {
        match self {
            System::Kernel | System::Preload => None,
            System::Wbcache(c) => Some(c),
        }
    }

    /// Dirty + writeback bytes now: `/proc/meminfo` for the kernel (system
    /// wide), the cache's stats for wbcache.
    pub fn dirty_bytes(&self) -> u64 {
        match self {
            System::Kernel => kernel_dirty_bytes(),
            System::Wbcache(c) => {
                let s = c.stats();
                s.dirty_bytes + s.writeback_bytes
            }
            System::Preload => preload::stat("dirty_bytes") + preload::stat("writeback_bytes"),
        }
    }

    /// The cache's own exact peak of dirty + writeback bytes (the kernel
    /// has none: its figure is sampled).
    pub fn peak_dirty_bytes(&self) -> Option<u64> {
        match self {
            System::Kernel => None,
            System::Wbcache(c) => Some(c.stats().peak_dirty_writeback_bytes),
            System::Preload => preload::stats().map(|_| preload::stat("peak_dirty_writeback_bytes")),
        }
    }

    pub fn stats_json(&self) -> Option<String> {
        match self {
            System::Kernel => None,
            System::Wbcache(c) => Some(c.stats().to_json()),
            System::Preload => preload::stats().map(|v| v.to_string()),
        }
    }

    pub fn io_backend(&self) -> Option<String> {
        match self {
            System::Kernel => None,
            System::Wbcache(c) => Some(c.stats().io_backend.to_string()),
            System::Preload => preload::stats().and_then(|v| v["io_backend"].as_str().map(str::to_string)),
        }
    }

    /// Closes the cache (writes back and syncs whatever is still dirty).
    /// A cache still shared (a SQLite VFS registered over it holds it for
    /// the process's life) is left to the process's exit instead.
    pub fn close(self) -> io::Result<()> {
        match self {
            System::Kernel | System::Preload => Ok(()),
            System::Wbcache(c) => match Arc::try_unwrap(c) {
                Ok(cache) => cache.close(),
                Err(shared) => {
                    drop(shared);
                    Ok(())
                }
            },
        }
    }
}

pub(super) fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

pub(super) fn cvt(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// A scratch file's path on a disk file system where one is at hand
    /// (the page cache of a tmpfs cannot be dropped), and whether it is one.
    fn scratch_file(name: &str) -> (PathBuf, bool) {
        let dir = [PathBuf::from("/var/tmp"), std::env::temp_dir()]
            .into_iter()
            .find(|d| d.is_dir() && !crate::sys::is_memory_fs(d))
            .unwrap_or_else(std::env::temp_dir);
        let on_disk = !crate::sys::is_memory_fs(&dir);
        (dir.join(format!("wbcache-cli-{name}-{}.bin", std::process::id())), on_disk)
    }

    /// The kernel's answer comes from mincore(2) on a mapping that is never
    /// touched: pages dropped from the page cache are not resident, and
    /// asking does not bring them back; reading them does.
    #[test]
    fn kernel_residency_follows_the_page_cache() {
        let (path, on_disk) = scratch_file("residency");
        let target = Target { path: path.clone(), offset: 0, len: MIB_TEST, create: true };
        let mut f = KernelFile::open(&target, Mode::Buffered).unwrap();
        assert!(f.resident(0, 4096).is_err(), "asked before track_residency");
        let buf = IoBuffer::filled(MIB_TEST as usize, 3);
        f.write_at(&buf, 0).unwrap();
        f.fsync().unwrap();
        assert!(f.track_residency(0, MIB_TEST).unwrap());
        assert!(f.resident(0, MIB_TEST).unwrap(), "just written");
        assert!(f.resident(512 << 10, 256 << 10).unwrap());
        assert!(f.resident(MIB_TEST - 4096, 8192).is_err(), "past the mapping");
        if on_disk {
            // SAFETY: plain syscall on an fd we own.
            let rc = unsafe { libc::posix_fadvise(f.fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0);
            assert!(!f.resident(0, MIB_TEST).unwrap(), "dropped");
            assert!(!f.resident(0, MIB_TEST).unwrap(), "asking faulted nothing in");
            let mut rbuf = IoBuffer::new(256 << 10);
            assert_eq!(f.read_at(&mut rbuf, 0).unwrap(), 256 << 10);
            assert!(f.resident(0, 256 << 10).unwrap(), "read back in");
        }
        drop(f);
        std::fs::remove_file(&path).unwrap();
    }

    /// wbcache's answer comes from File::residency: blocks written are
    /// cached; blocks past the end are not.
    #[test]
    fn wbcache_residency_and_no_cache_for_direct() {
        let (path, _) = scratch_file("wb-residency");
        let sys = System::new(EngineKind::Wbcache, "capacity=32M").unwrap();
        let target = Target { path: path.clone(), offset: 0, len: MIB_TEST, create: true };
        let mut f = sys.open(EngineKind::Wbcache, &target).unwrap();
        f.write_at(&IoBuffer::filled(MIB_TEST as usize, 4), 0).unwrap();
        assert!(f.track_residency(0, MIB_TEST).unwrap());
        assert!(f.resident(0, MIB_TEST).unwrap());
        assert!(f.resident(4096, 256 << 10).unwrap());
        assert!(!f.resident(MIB_TEST - 4096, 8192).unwrap(), "a block past the end is not cached");
        drop(f);
        sys.close().unwrap();
        // O_DIRECT has no cache to ask (where the file system takes O_DIRECT).
        if let Ok(mut d) = DirectFile::open(&Target { create: false, ..target }) {
            assert!(!d.track_residency(0, MIB_TEST).unwrap());
        }
        std::fs::remove_file(&path).unwrap();
    }

    /// `advice`'s calls on the kernel: cached bytes from mincore(2) over
    /// a mapping longer than the file (pages past its end are not cached),
    /// sync_file_range's start, DONTNEED dropping the written-back pages.
    #[test]
    fn kernel_advice_and_cached_bytes() {
        let (path, on_disk) = scratch_file("advice");
        let target = Target { path: path.clone(), offset: 0, len: 4 * MIB_TEST, create: true };
        let mut f = KernelFile::open(&target, Mode::Buffered).unwrap();
        assert!(f.cached_bytes(0, MIB_TEST).is_err(), "asked before track_residency");
        assert!(f.track_residency(0, 4 * MIB_TEST).unwrap(), "a mapping past the end of the (empty) file");
        assert_eq!(f.cached_bytes(0, 4 * MIB_TEST).unwrap(), 0);
        f.write_at(&IoBuffer::filled(MIB_TEST as usize, 5), 0).unwrap();
        assert_eq!(f.cached_bytes(0, 4 * MIB_TEST).unwrap(), MIB_TEST, "what was written, nothing past it");
        assert_eq!(f.cached_bytes(0, 512 << 10).unwrap(), 512 << 10);
        f.start_writeback(0, MIB_TEST).unwrap();
        f.fsync().unwrap();
        assert_eq!(f.cached_bytes(0, MIB_TEST).unwrap(), MIB_TEST, "written back, still cached");
        f.advise(0, MIB_TEST, Advice::DontNeed).unwrap();
        if on_disk {
            assert_eq!(f.cached_bytes(0, MIB_TEST).unwrap(), 0, "clean pages dropped");
        }
        f.advise(0, MIB_TEST, Advice::WillNeed).unwrap();
        drop(f);
        std::fs::remove_file(&path).unwrap();
    }

    /// The same calls on wbcache: File::cached_ranges summed inside the
    /// range, File::writeback_range's start, File::advise; DONTNEED drops
    /// clean data at once, WILLNEED reads it back in the background.
    #[test]
    fn wbcache_advice_and_cached_bytes() {
        let (path, _) = scratch_file("wb-advice");
        let sys = System::new(EngineKind::Wbcache, "capacity=32M").unwrap();
        let target = Target { path: path.clone(), offset: 0, len: 2 * MIB_TEST, create: true };
        let mut f = sys.open(EngineKind::Wbcache, &target).unwrap();
        assert!(f.track_residency(0, 2 * MIB_TEST).unwrap());
        f.write_at(&IoBuffer::filled(MIB_TEST as usize, 6), 0).unwrap();
        assert_eq!(f.cached_bytes(0, 2 * MIB_TEST).unwrap(), MIB_TEST);
        assert_eq!(f.cached_bytes(256 << 10, 4096).unwrap(), 4096, "only inside the range");
        f.start_writeback(0, MIB_TEST).unwrap();
        f.fsync().unwrap();
        f.advise(0, MIB_TEST, Advice::DontNeed).unwrap();
        assert_eq!(f.cached_bytes(0, MIB_TEST).unwrap(), 0, "clean data dropped at once");
        f.advise(0, MIB_TEST, Advice::WillNeed).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while f.cached_bytes(0, MIB_TEST).unwrap() < MIB_TEST && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(f.cached_bytes(0, MIB_TEST).unwrap(), MIB_TEST, "read back in by the advice");
        drop(f);
        sys.close().unwrap();
        // O_DIRECT takes no advice.
        if let Ok(mut d) = DirectFile::open(&Target { create: false, ..target }) {
            assert!(is_unsupported(&d.advise(0, MIB_TEST, Advice::WillNeed).unwrap_err()));
            assert!(is_unsupported(&d.start_writeback(0, MIB_TEST).unwrap_err()));
        }
        std::fs::remove_file(&path).unwrap();
    }

    const MIB_TEST: u64 = 1 << 20;
}
