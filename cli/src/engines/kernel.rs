//! The kernel's buffered engines: `kernel-buffered` (`pwrite`/`pread`, and
//! `write`/`writev` after an untimed `lseek` for the libMicro call shapes)
//! and `kernel-dontcache` (`pwritev2`/`preadv2` with `RWF_DONTCACHE`). The
//! residency and cached-bytes questions are answered by `mincore(2)` on a
//! read-only shared mapping the file owns and never touches. Reads take
//! the descriptor alone ([`read_full`]), so reader threads share it.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use wbcache::Advice;

use super::engine::{CallKind, EngineFile, SharedReader, Target};
use super::syscall::{cvt, read_full, retry_eintr, unsupported_flag, RWF_DONTCACHE};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Buffered,
    Dontcache,
}

pub(super) struct KernelFile {
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
    pub(super) fn open(target: &Target, mode: Mode) -> io::Result<KernelFile> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(target.create)
            .truncate(target.create)
            .mode(0o644)
            .open(&target.path)?;
        Ok(KernelFile { file, mode, map: None })
    }

    pub(super) fn fd(&self) -> RawFd {
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
        read_full(self.fd(), buf, off, self.mode == Mode::Dontcache)
    }

    fn shared_reader(&self) -> Option<SharedReader<'_>> {
        Some(SharedReader::Fd { fd: self.fd(), dontcache: self.mode == Mode::Dontcache })
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
                    let n = retry_eintr(|| {
                        // SAFETY: `buf[done..]` is valid for reads for its length.
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
