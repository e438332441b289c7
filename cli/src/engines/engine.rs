//! What every engine is, to the workloads and the worker: its kind
//! ([`EngineKind`]: its name on the command line and in the JSON, what it
//! is), libMicro's call shapes ([`CallKind`]), where a job does its I/O
//! ([`Target`]), and the interface of one open file ([`EngineFile`]),
//! with [`Pipelined`] for the engines that keep several requests in flight
//! and [`SharedReader`] for reader threads sharing one open file. The
//! engines' modules implement it; the folder's own file opens a file of
//! the engine asked ([`super::System`]). A file's offsets are absolute:
//! the job adds its target's offset.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wbcache::{Advice, WriteFlags};

use super::syscall::read_full;
use super::unsupported::unsupported;
use crate::sys::IoBuffer;

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
            SharedReader::Fd { fd, dontcache } => read_full(fd, buf, off, dontcache),
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
