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
//!   one `write_at` at the offset, `writev` is one `write_vectored_at`.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use serde::{Deserialize, Serialize};
use wbcache::{Advice, Cache, Config, OpenOptions, SyncRangeFlags, WriteFlags, RESIDENT_CACHED};

use crate::sys::{kernel_dirty_bytes, IoBuffer};

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
}

impl EngineKind {
    pub const ALL: [EngineKind; 5] = [
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
        if self.is_kernel() {
            EngineKind::KernelBuffered
        } else {
            EngineKind::Wbcache
        }
    }

    pub fn is_dontcache(self) -> bool {
        matches!(self, EngineKind::KernelDontcache | EngineKind::WbcacheDontcache)
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
}

impl System {
    pub fn new(engine: EngineKind, wbcache_options: &str) -> io::Result<System> {
        if engine.is_kernel() {
            return Ok(System::Kernel);
        }
        let config = Config::from_options(wbcache_options)?;
        Ok(System::Wbcache(Arc::new(Cache::new(config)?)))
    }

    pub fn open(&self, engine: EngineKind, target: &Target) -> io::Result<Box<dyn EngineFile>> {
        match (self, engine) {
            (System::Kernel, EngineKind::KernelBuffered) => Ok(Box::new(KernelFile::open(target, Mode::Buffered)?)),
            (System::Kernel, EngineKind::KernelDontcache) => Ok(Box::new(KernelFile::open(target, Mode::Dontcache)?)),
            (System::Kernel, EngineKind::KernelDirect) => Ok(Box::new(DirectFile::open(target)?)),
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
            System::Kernel => None,
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
        }
    }

    /// The cache's own exact peak of dirty + writeback bytes (the kernel
    /// has none: its figure is sampled).
    pub fn peak_dirty_bytes(&self) -> Option<u64> {
        match self {
            System::Kernel => None,
            System::Wbcache(c) => Some(c.stats().peak_dirty_writeback_bytes),
        }
    }

    pub fn stats_json(&self) -> Option<String> {
        match self {
            System::Kernel => None,
            System::Wbcache(c) => Some(c.stats().to_json()),
        }
    }

    pub fn io_backend(&self) -> Option<String> {
        match self {
            System::Kernel => None,
            System::Wbcache(c) => Some(c.stats().io_backend.to_string()),
        }
    }

    /// Closes the cache (writes back and syncs whatever is still dirty).
    /// A cache still shared (a SQLite VFS registered over it holds it for
    /// the process's life) is left to the process's exit instead.
    pub fn close(self) -> io::Result<()> {
        match self {
            System::Kernel => Ok(()),
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

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

fn cvt(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

fn unsupported_flag(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::EINVAL) => unsupported(format!("RWF_DONTCACHE refused by the kernel here ({e})")),
        _ => e,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Buffered,
    Dontcache,
}

struct KernelFile {
    file: fs::File,
    mode: Mode,
    /// A read-only shared mapping of the range whose residency is asked
    /// (`hot-set`), never touched: `mincore(2)` on it reports the page
    /// cache without faulting pages in.
    map: Option<ResidencyMap>,
}

/// `len` bytes of a file from offset `off`, mapped at `addr`.
struct ResidencyMap {
    addr: *mut libc::c_void,
    off: u64,
    len: usize,
    /// One byte per page, for `mincore`.
    vec: Vec<u8>,
}

// SAFETY: the mapping is owned by one `KernelFile` and only read through
// `mincore`, which does not touch its memory.
unsafe impl Send for ResidencyMap {}

impl Drop for ResidencyMap {
    fn drop(&mut self) {
        // SAFETY: `addr` and `len` are what mmap returned and was given;
        // nothing refers to the mapping any more.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as u64
    } else {
        4096
    }
}

impl KernelFile {
    fn open(target: &Target, mode: Mode) -> io::Result<KernelFile> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(target.create)
            .truncate(target.create)
            .mode(0o644)
            .open(&target.path)?;
        Ok(KernelFile { file, mode, map: None })
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Writes all of `bufs` at `off` (`None`: the file position), with the
    /// mode's flags.
    fn write_vec(&mut self, bufs: &[&[u8]], off: Option<u64>) -> io::Result<()> {
        let flags = if self.mode == Mode::Dontcache { RWF_DONTCACHE } else { 0 };
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut iov: Vec<libc::iovec> =
            bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: b.len() }).collect();
        let mut done = 0usize;
        let mut first = 0usize;
        while done < total {
            let pos = off.map_or(-1, |o| (o + done as u64) as libc::off_t);
            let n = retry_eintr(|| {
                // SAFETY: the iovecs point into `bufs`, borrowed for this call.
                let rc = unsafe {
                    if flags == 0 && pos >= 0 {
                        libc::pwritev(self.fd(), iov[first..].as_ptr(), (iov.len() - first) as libc::c_int, pos)
                    } else if flags == 0 {
                        libc::writev(self.fd(), iov[first..].as_ptr(), (iov.len() - first) as libc::c_int)
                    } else {
                        libc::pwritev2(self.fd(), iov[first..].as_ptr(), (iov.len() - first) as libc::c_int, pos, flags)
                    }
                };
                cvt(rc)
            });
            let n = if flags != 0 { n.map_err(unsupported_flag)? } else { n? };
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
            }
            done += n;
            // Advance the iovecs past what was written.
            let mut left = n;
            while left > 0 && first < iov.len() {
                if left >= iov[first].iov_len {
                    left -= iov[first].iov_len;
                    first += 1;
                } else {
                    // SAFETY: stays inside the same buffer.
                    iov[first].iov_base = unsafe { (iov[first].iov_base as *mut u8).add(left) } as *mut _;
                    iov[first].iov_len -= left;
                    left = 0;
                }
            }
        }
        Ok(())
    }
}

impl EngineFile for KernelFile {
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        if self.mode == Mode::Buffered {
            let mut done = 0;
            while done < buf.len() {
                let n = retry_eintr(|| {
                    // SAFETY: `buf[done..]` is valid for reads for its length.
                    cvt(unsafe {
                        libc::pwrite(
                            self.fd(),
                            buf[done..].as_ptr() as *const _,
                            buf.len() - done,
                            (off + done as u64) as libc::off_t,
                        )
                    })
                })?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::WriteZero, "pwrite returned 0"));
                }
                done += n;
            }
            Ok(())
        } else {
            self.write_vec(&[buf], Some(off))
        }
    }

    fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let fd = self.fd();
        let dontcache = self.mode == Mode::Dontcache;
        let mut done = 0;
        while done < buf.len() {
            let n = retry_eintr(|| {
                let pos = (off + done as u64) as libc::off_t;
                // SAFETY: `buf[done..]` is valid for writes for its length.
                let rc = unsafe {
                    if dontcache {
                        let iov =
                            libc::iovec { iov_base: buf[done..].as_mut_ptr() as *mut _, iov_len: buf.len() - done };
                        libc::preadv2(fd, &iov, 1, pos, RWF_DONTCACHE)
                    } else {
                        libc::pread(fd, buf[done..].as_mut_ptr() as *mut _, buf.len() - done, pos)
                    }
                };
                cvt(rc)
            });
            let n = if dontcache { n.map_err(unsupported_flag)? } else { n? };
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    fn prepare_call(&mut self, call: CallKind, off: u64) -> io::Result<()> {
        if call != CallKind::Pwrite {
            // SAFETY: plain syscall on an fd we own.
            let rc = unsafe { libc::lseek(self.fd(), off as libc::off_t, libc::SEEK_SET) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    fn write_call(&mut self, call: CallKind, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        match call {
            CallKind::Pwrite => {
                if bufs.len() == 1 {
                    self.write_at(bufs[0], off)
                } else {
                    self.write_vec(bufs, Some(off))
                }
            }
            CallKind::Write if self.mode == Mode::Buffered && bufs.len() == 1 => {
                let buf = bufs[0];
                let mut done = 0;
                while done < buf.len() {
                    // SAFETY: `buf[done..]` is valid for reads for its length.
                    let n = retry_eintr(|| {
                        cvt(unsafe { libc::write(self.fd(), buf[done..].as_ptr() as *const _, buf.len() - done) })
                    })?;
                    if n == 0 {
                        return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
                    }
                    done += n;
                }
                Ok(())
            }
            CallKind::Write | CallKind::Writev => self.write_vec(bufs, None),
        }
    }

    fn fsync(&mut self) -> io::Result<()> {
        retry_eintr(|| self.file.sync_all())
    }

    fn track_residency(&mut self, off: u64, len: u64) -> io::Result<bool> {
        if off % page_size() != 0 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("residency of [{off}, +{len}): needs a page-aligned, non-empty range"),
            ));
        }
        self.map = None;
        // SAFETY: a new read-only shared mapping of our own file; the
        // kernel picks the address. It is never read or written, only
        // passed to mincore, and unmapped when `ResidencyMap` drops.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.fd(),
                off as libc::off_t,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.map = Some(ResidencyMap { addr, off, len: len as usize, vec: Vec::new() });
        Ok(true)
    }

    fn resident(&mut self, off: u64, len: u64) -> io::Result<bool> {
        Ok(self.mincore(off, len)?.iter().all(|v| v & 1 != 0))
    }

    fn cached_bytes(&mut self, off: u64, len: u64) -> io::Result<u64> {
        let pages = self.mincore(off, len)?.iter().filter(|v| *v & 1 != 0).count() as u64;
        Ok((pages * page_size()).min(len))
    }

    fn advise(&mut self, off: u64, len: u64, advice: Advice) -> io::Result<()> {
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe { libc::posix_fadvise(self.fd(), off as libc::off_t, len as libc::off_t, advice.raw()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    fn start_writeback(&mut self, off: u64, len: u64) -> io::Result<()> {
        retry_eintr(|| {
            // SAFETY: plain syscall on an fd we own.
            let rc = unsafe {
                libc::sync_file_range(
                    self.fd(),
                    off as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            cvt(rc as isize).map(drop)
        })
    }
}

impl KernelFile {
    /// `mincore(2)`'s answer for `[off, off + len)` of the mapping made by
    /// `track_residency`: one byte per page, bit 0 set where the page is
    /// in the page cache.
    fn mincore(&mut self, off: u64, len: u64) -> io::Result<&[u8]> {
        let page = page_size();
        let map = self.map.as_mut().ok_or_else(|| io::Error::other("residency asked before track_residency"))?;
        let inside = off >= map.off && off + len <= map.off + map.len as u64 && (off - map.off) % page == 0;
        if !inside || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("residency of [{off}, +{len}) outside the mapping"),
            ));
        }
        let pages = len.div_ceil(page) as usize;
        map.vec.resize(pages, 0);
        // SAFETY: the range lies inside the mapping (checked above) and
        // starts on a page; `vec` holds one byte per page of it.
        let rc = unsafe {
            libc::mincore(
                (map.addr as *mut u8).add((off - map.off) as usize) as *mut libc::c_void,
                len as usize,
                map.vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(&map.vec)
    }
}

/// O_DIRECT through io_uring.
struct DirectFile {
    file: fs::File,
    ring: IoUring,
}

impl DirectFile {
    fn open(target: &Target) -> io::Result<DirectFile> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(target.create)
            .truncate(target.create)
            .mode(0o644)
            .custom_flags(libc::O_DIRECT)
            .open(&target.path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    unsupported(format!("O_DIRECT not supported here ({e})"))
                } else {
                    e
                }
            })?;
        let ring = IoUring::new(DIRECT_DEPTH as u32).map_err(|e| unsupported(format!("io_uring unavailable ({e})")))?;
        Ok(DirectFile { file, ring })
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }

    /// Runs one request to completion (looping on short transfers).
    fn one(&mut self, entry_for: &mut dyn FnMut(usize) -> io_uring::squeue::Entry, len: usize) -> io::Result<usize> {
        let mut done = 0usize;
        let mut attempts = 0;
        while done < len {
            let sqe = entry_for(done).user_data(0);
            // SAFETY: the entry's buffers are borrowed by the caller for this
            // whole call, and we wait for its completion before returning.
            unsafe {
                self.ring.submission().push(&sqe).map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
            let res = reap_one(&mut self.ring);
            attempts += 1;
            if res < 0 {
                if (res == -libc::EINTR || res == -libc::EAGAIN) && attempts < 1000 {
                    continue;
                }
                return Err(direct_error(-res));
            }
            if res == 0 {
                break;
            }
            done += res as usize;
        }
        Ok(done)
    }
}

fn direct_error(errno: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    if errno == libc::EINVAL {
        unsupported(format!("O_DIRECT rejected the request's alignment ({e})"))
    } else {
        e
    }
}

impl EngineFile for DirectFile {
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        let fd = self.fd();
        let n = self.one(
            &mut |done| {
                opcode::Write::new(fd, buf[done..].as_ptr(), (buf.len() - done) as u32)
                    .offset(off + done as u64)
                    .build()
            },
            buf.len(),
        )?;
        if n < buf.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "O_DIRECT write returned 0"));
        }
        Ok(())
    }

    fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let fd = self.fd();
        let ptr = buf.as_mut_ptr();
        let len = buf.len();
        // SAFETY (for the pointer arithmetic below): `done < len`.
        self.one(
            &mut |done| {
                opcode::Read::new(fd, unsafe { ptr.add(done) }, (len - done) as u32).offset(off + done as u64).build()
            },
            len,
        )
    }

    fn write_call(&mut self, call: CallKind, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        if call != CallKind::Writev || bufs.len() == 1 {
            // No lseek through io_uring: `write` is a positioned write too.
            for (i, b) in bufs.iter().enumerate() {
                self.write_at(b, off + (i * b.len()) as u64)?;
            }
            return Ok(());
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let iov: Vec<libc::iovec> =
            bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: b.len() }).collect();
        let fd = self.fd();
        let n = self.one(
            &mut |done| {
                assert_eq!(done, 0, "short O_DIRECT writev");
                opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32).offset(off).build()
            },
            total,
        )?;
        if n < total {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "O_DIRECT writev was short"));
        }
        Ok(())
    }

    fn fsync(&mut self) -> io::Result<()> {
        retry_eintr(|| self.file.sync_all())
    }

    fn pipeline(&mut self) -> Option<&mut dyn Pipelined> {
        Some(self)
    }
}

/// Waits for one completion (the request is in flight into borrowed
/// buffers: never give up while it may still be running).
fn reap_one(ring: &mut IoUring) -> i32 {
    let mut failures = 0u32;
    loop {
        if let Some(c) = ring.completion().next() {
            return c.result();
        }
        if let Err(e) = ring.submit_and_wait(1) {
            failures += 1;
            if failures > 10_000 {
                eprintln!("io_uring: cannot reap an in-flight request ({e}); aborting");
                std::process::abort();
            }
            if e.kind() != io::ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Queues one entry. The queue has room for every slot, so a full queue is
/// a bug; with requests in flight into borrowed buffers, aborting is the only
/// safe answer.
///
/// # Safety
/// The entry's buffers must stay valid until its completion is reaped.
unsafe fn push_or_abort(ring: &mut IoUring, e: &io_uring::squeue::Entry) {
    // SAFETY: forwarded to the caller.
    if unsafe { ring.submission().push(e) }.is_err() {
        eprintln!("io_uring submission queue unexpectedly full; aborting");
        std::process::abort();
    }
}

struct Slot {
    off: u64,
    len: usize,
    done: usize,
    started: Instant,
    attempts: u32,
}

impl Pipelined for DirectFile {
    fn run(
        &mut self,
        write: bool,
        wbuf: &IoBuffer,
        rbufs: &mut [IoBuffer],
        next: &mut NextOp<'_>,
        done: &mut OnDone<'_>,
    ) -> io::Result<()> {
        let depth = DIRECT_DEPTH.min(if write { DIRECT_DEPTH } else { rbufs.len() });
        assert!(depth > 0, "no read buffers for a pipelined read");
        let fd = self.fd();
        let mut slots: Vec<Option<Slot>> = (0..depth).map(|_| None).collect();
        let mut inflight = 0usize;
        let mut exhausted = false;
        let mut first_err: Option<io::Error> = None;
        let mut failures = 0u32;
        let rptrs: Vec<*mut u8> = rbufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let entry = |slot: usize, s: &Slot| {
            let (off, len) = (s.off + s.done as u64, (s.len - s.done) as u32);
            let e = if write {
                // SAFETY (pointer arithmetic): `s.done < s.len <= wbuf.len()`.
                opcode::Write::new(fd, unsafe { wbuf.as_ptr().add(s.done) }, len).offset(off).build()
            } else {
                // SAFETY (pointer arithmetic): `s.done < s.len <= rbufs[slot].len()`.
                opcode::Read::new(fd, unsafe { rptrs[slot].add(s.done) }, len).offset(off).build()
            };
            e.user_data(slot as u64)
        };
        loop {
            while !exhausted && first_err.is_none() && inflight < depth {
                match next() {
                    Some((off, len)) => {
                        let cap = if write { wbuf.len() } else { rbufs[0].len() };
                        assert!(len <= cap, "request larger than its buffer");
                        let slot = slots.iter().position(Option::is_none).expect("a free slot");
                        let s = Slot { off, len, done: 0, started: Instant::now(), attempts: 0 };
                        let e = entry(slot, &s);
                        // SAFETY: `wbuf` and `rbufs` outlive this call, and
                        // this function reaps every submitted request before
                        // it returns (also on errors).
                        unsafe { push_or_abort(&mut self.ring, &e) };
                        slots[slot] = Some(s);
                        inflight += 1;
                    }
                    None => exhausted = true,
                }
            }
            if inflight == 0 {
                break;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                // Requests are in flight into buffers we only borrow: keep
                // reaping, never return before they are done.
                failures += 1;
                if failures > 10_000 {
                    eprintln!("io_uring: cannot reap in-flight requests ({e}); aborting");
                    std::process::abort();
                }
                if e.kind() != io::ErrorKind::Interrupted {
                    first_err.get_or_insert(e);
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            failures = 0;
            let cqes: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
            let now = Instant::now();
            for (slot, res) in cqes {
                let slot = slot as usize;
                let Some(s) = slots[slot].as_mut() else { continue };
                s.attempts += 1;
                if res < 0 && (res == -libc::EINTR || res == -libc::EAGAIN) && s.attempts < 1000 {
                    let e = entry(slot, s);
                    // SAFETY: as above.
                    unsafe { push_or_abort(&mut self.ring, &e) };
                    continue;
                }
                if res < 0 {
                    first_err.get_or_insert(direct_error(-res));
                } else if res > 0 && s.done + (res as usize) < s.len {
                    s.done += res as usize;
                    let e = entry(slot, s);
                    // SAFETY: as above.
                    unsafe { push_or_abort(&mut self.ring, &e) };
                    continue;
                } else {
                    s.done += res as usize;
                    if first_err.is_none() {
                        done(s.done, now - s.started);
                    }
                }
                slots[slot] = None;
                inflight -= 1;
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

struct WbFile {
    file: wbcache::File,
    flags: WriteFlags,
    /// One byte per block, for `residency`.
    residency: Vec<u8>,
}

impl EngineFile for WbFile {
    fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.file.write_at_with(&buf[done..], off + done as u64, self.flags)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "wbcache write_at returned 0"));
            }
            done += n;
        }
        Ok(())
    }

    fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.file.read_at_with(buf, off, self.flags)
    }

    fn write_call(&mut self, call: CallKind, bufs: &[&[u8]], off: u64) -> io::Result<()> {
        if call != CallKind::Writev || bufs.len() == 1 {
            return bufs.iter().try_fold(off, |pos, b| self.write_at(b, pos).map(|()| pos + b.len() as u64)).map(drop);
        }
        // As the kernel engines' writev: one iovec array per call, one call
        // unless it comes back short.
        let mut iov: Vec<io::IoSlice> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let mut slices = &mut iov[..];
        let mut pos = off;
        while !slices.is_empty() {
            let n = self.file.write_vectored_at_with(slices, pos, self.flags)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "wbcache write_vectored_at returned 0"));
            }
            pos += n as u64;
            io::IoSlice::advance_slices(&mut slices, n);
        }
        Ok(())
    }

    fn fsync(&mut self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn track_residency(&mut self, _off: u64, _len: u64) -> io::Result<bool> {
        Ok(true)
    }

    fn resident(&mut self, off: u64, len: u64) -> io::Result<bool> {
        const BLOCK: u64 = 4096;
        let blocks = ((off + len).div_ceil(BLOCK) - off / BLOCK) as usize;
        self.residency.resize(blocks, 0);
        let n = self.file.residency(off, len, &mut self.residency)?;
        // Blocks past the end of the file are not reported: not cached.
        Ok(n == blocks && self.residency[..n].iter().all(|b| b & RESIDENT_CACHED != 0))
    }

    fn cached_bytes(&mut self, off: u64, len: u64) -> io::Result<u64> {
        let end = off.saturating_add(len);
        let ranges = self.file.cached_ranges()?;
        Ok(ranges.iter().map(|r| r.end.min(end).saturating_sub(r.start.max(off))).sum())
    }

    fn advise(&mut self, off: u64, len: u64, advice: Advice) -> io::Result<()> {
        self.file.advise(off..off.saturating_add(len), advice)
    }

    fn start_writeback(&mut self, off: u64, len: u64) -> io::Result<()> {
        self.file.writeback_range(off..off.saturating_add(len), SyncRangeFlags::WRITE)
    }
}

#[cfg(test)]
mod tests {
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
