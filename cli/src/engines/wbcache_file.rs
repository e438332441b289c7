//! `wbcache` and `wbcache-dontcache`: a [`wbcache::File`] of the
//! measurement's shared [`wbcache::Cache`], the latter with
//! [`WriteFlags::DONTCACHE`] on every read and write. The handle is
//! `Sync`: reader threads share it ([`SharedReader::Wbcache`]).

use std::io;

use wbcache::{Advice, SyncRangeFlags, WriteFlags, RESIDENT_CACHED};

use super::engine::{CallKind, EngineFile, SharedReader};

pub(super) struct WbFile {
    pub(super) file: wbcache::File,
    pub(super) flags: WriteFlags,
    /// One byte per block, for `residency`.
    pub(super) residency: Vec<u8>,
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

    /// `wbcache::File` is `Send + Sync` and reads through `&self`: the
    /// threads share the one handle.
    fn shared_reader(&self) -> Option<SharedReader<'_>> {
        Some(SharedReader::Wbcache { file: &self.file, flags: self.flags })
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
