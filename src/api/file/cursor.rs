//! [`FileCursor`]: a position over a [`File`] for
//! `std::io::{Read, Write, Seek}`. The cursor owns only its position;
//! every call goes through the handle's positional I/O.

use std::io::{self, IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};

use super::{Access, File, WriteFlags};
use crate::buf::user::{Gather, IOV_MAX};

/// A position over a [`File`] for `std::io::{Read, Write, Seek}`.
pub struct FileCursor<'a> {
    file: &'a File,
    pos: u64,
}

impl<'a> FileCursor<'a> {
    pub(super) fn new(file: &'a File) -> FileCursor<'a> {
        FileCursor { file, pos: 0 }
    }

    /// The offset the next read or write starts at.
    pub fn position(&self) -> u64 {
        self.pos
    }
}

impl Read for FileCursor<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
    /// As `std::fs::File`: past 1024 buffers (`IOV_MAX`), a short read of
    /// the first 1024.
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let first = bufs.len().min(IOV_MAX);
        let n = self.file.read_vectored_at(&mut bufs[..first], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for FileCursor<'_> {
    /// On an append handle the data goes to the end, and the position
    /// follows it there (as `write(2)` with `O_APPEND`).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (n, at) = self.file.write_from_pos(buf, self.pos, WriteFlags::NONE)?;
        self.pos = at + n as u64;
        Ok(n)
    }
    /// As `std::fs::File`: past 1024 buffers (`IOV_MAX`), a short write of
    /// the first 1024, which `write_all_vectored`-style loops continue.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let bufs = &bufs[..bufs.len().min(IOV_MAX)];
        self.file.check_access(Access::Write)?;
        let (n, at) = self.file.write_from_pos(&Gather::new(bufs)?, self.pos, WriteFlags::NONE)?;
        self.pos = at + n as u64;
        Ok(n)
    }
    /// Buffered data lives in the cache; `flush` is a no-op like
    /// `std::fs::File` (use `sync_all` for durability).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for FileCursor<'_> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let new = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.file.len()?.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match new {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "seek to a negative or overflowing position")),
        }
    }
}
