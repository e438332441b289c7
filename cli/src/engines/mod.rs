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
//! The interface every engine implements is in `engine` ([`EngineKind`],
//! [`EngineFile`], [`Pipelined`](engine::Pipelined), [`SharedReader`] for
//! reader threads sharing one open file), the `unsupported` error in
//! `unsupported`, the system calls the kernel's engines share in
//! `syscall`; each engine's file is in its own module: `kernel` (buffered
//! and RWF_DONTCACHE), `direct` (O_DIRECT through io_uring),
//! `wbcache_file`; `preload` reads the preloaded cache's statistics. This
//! module, above them all, is the [`System`] a measurement opens its files
//! in: it opens the engine's file by its kind, and re-exports the
//! interface, so the rest of the bench names `crate::engines::…` alone.

mod direct;
mod engine;
mod kernel;
mod preload;
mod syscall;
mod unsupported;
mod wbcache_file;

use std::io;
use std::sync::Arc;

use wbcache::{Cache, Config, OpenOptions, WriteFlags};

use crate::sys::kernel_dirty_bytes;
use direct::DirectFile;
pub use engine::{CallKind, EngineFile, EngineKind, SharedReader, Target, DIRECT_DEPTH};
use kernel::{KernelFile, Mode};
pub use unsupported::{is_unsupported, unsupported};
use wbcache_file::WbFile;

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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use wbcache::Advice;

    use super::*;
    use crate::sys::IoBuffer;

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
