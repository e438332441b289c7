//! What a handle's calls take besides data: [`OpenOptions`] (as
//! `std::fs::OpenOptions`), [`WriteFlags`] (per-call `RWF_*` flags),
//! [`Advice`] (`posix_fadvise`) and [`SyncRangeFlags`]
//! (`sync_file_range`). Plain values: they own nothing and validate
//! nothing until a call uses them.

use std::io;

/// How to open a file, as `std::fs::OpenOptions`.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub create_new: bool,
    pub truncate: bool,
    /// Permission bits for a created file (default 0o644).
    pub mode: u32,
    /// Every read and write of the handle is uncached, as if it passed
    /// [`WriteFlags::DONTCACHE`]: how a backup, log or streaming handle is
    /// marked once instead of on each call.
    pub dontcache: bool,
    /// `O_APPEND`: every write goes to the end of the file, whatever
    /// offset it names (as `pwrite(2)` on Linux), atomically with respect
    /// to other appends through the cache. Needs write access.
    pub append: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read: true,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            mode: 0o644,
            dontcache: false,
            append: false,
        }
    }
}

impl OpenOptions {
    pub fn new() -> Self {
        Self::default()
    }
    /// Read and write, creating the file if missing.
    pub fn read_write_create() -> Self {
        OpenOptions { write: true, create: true, ..Self::default() }
    }
    pub fn read(mut self, v: bool) -> Self {
        self.read = v;
        self
    }
    pub fn write(mut self, v: bool) -> Self {
        self.write = v;
        self
    }
    pub fn create(mut self, v: bool) -> Self {
        self.create = v;
        self
    }
    pub fn create_new(mut self, v: bool) -> Self {
        self.create_new = v;
        self
    }
    pub fn truncate(mut self, v: bool) -> Self {
        self.truncate = v;
        self
    }
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }
    /// Makes the handle's every read and write uncached (see
    /// [`OpenOptions::dontcache`]).
    pub fn dontcache(mut self, v: bool) -> Self {
        self.dontcache = v;
        self
    }
    /// Opens for appending (see [`OpenOptions::append`]).
    pub fn append(mut self, v: bool) -> Self {
        self.append = v;
        self
    }

    pub(crate) fn validate(&self) -> io::Result<()> {
        if !self.read && !self.write {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "open for neither reading nor writing"));
        }
        if (self.create || self.create_new || self.truncate) && !self.write {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "create and truncate need write access"));
        }
        if self.append && !self.write {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "append needs write access"));
        }
        Ok(())
    }
}

/// Advice for [`File::advise`](super::File::advise), as
/// `posix_fadvise(2)`'s (the C ABI's `WBC_FADV_*` values are
/// `POSIX_FADV_*`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advice {
    /// Undo `Sequential`, `Random` and `NoReuse` for the handle.
    Normal,
    /// The handle reads sequentially: its readahead window may grow to
    /// twice `readahead_max`.
    Sequential,
    /// The handle reads at random: no readahead, each read reads only
    /// what it needs.
    Random,
    /// The range will be read soon: start reading it in the background
    /// (at most half the cache's capacity from its start).
    WillNeed,
    /// The range will not be read again soon: drop its clean folios now,
    /// and make its dirty ones drop-behind (written by the flusher, then
    /// dropped). Writes nothing itself and waits for nothing.
    DontNeed,
    /// Data the handle reads or writes from now on is used once: its
    /// reads and writes are uncached, as with [`WriteFlags::DONTCACHE`].
    NoReuse,
}

impl Advice {
    /// From `posix_fadvise(2)`'s `advice`; `EINVAL` for an unknown value.
    pub fn from_raw(advice: i32) -> io::Result<Advice> {
        Ok(match advice {
            libc::POSIX_FADV_NORMAL => Advice::Normal,
            libc::POSIX_FADV_SEQUENTIAL => Advice::Sequential,
            libc::POSIX_FADV_RANDOM => Advice::Random,
            libc::POSIX_FADV_WILLNEED => Advice::WillNeed,
            libc::POSIX_FADV_DONTNEED => Advice::DontNeed,
            libc::POSIX_FADV_NOREUSE => Advice::NoReuse,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("unknown advice {advice}: use one of POSIX_FADV_NORMAL ... POSIX_FADV_NOREUSE (0-5)"),
                ))
            }
        })
    }

    /// `posix_fadvise(2)`'s value for this advice.
    pub fn raw(self) -> i32 {
        match self {
            Advice::Normal => libc::POSIX_FADV_NORMAL,
            Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
            Advice::Random => libc::POSIX_FADV_RANDOM,
            Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
            Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
            Advice::NoReuse => libc::POSIX_FADV_NOREUSE,
        }
    }
}

/// What [`File::writeback_range`](super::File::writeback_range) does:
/// `sync_file_range(2)`'s flags, with the same values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncRangeFlags(u32);

impl SyncRangeFlags {
    pub const NONE: SyncRangeFlags = SyncRangeFlags(0);
    /// Wait for writeback of the file already in flight first
    /// (`SYNC_FILE_RANGE_WAIT_BEFORE`).
    pub const WAIT_BEFORE: SyncRangeFlags = SyncRangeFlags(1);
    /// Start writeback of the range's dirty blocks
    /// (`SYNC_FILE_RANGE_WRITE`).
    pub const WRITE: SyncRangeFlags = SyncRangeFlags(2);
    /// Wait for writeback of the file in flight, this call's included,
    /// before returning (`SYNC_FILE_RANGE_WAIT_AFTER`).
    pub const WAIT_AFTER: SyncRangeFlags = SyncRangeFlags(4);

    /// From `sync_file_range(2)`'s `flags`; `EINVAL` for unknown bits.
    pub fn from_bits(bits: u32) -> io::Result<SyncRangeFlags> {
        if bits & !7 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown sync_file_range flags {bits:#x}: use WAIT_BEFORE (1), WRITE (2), WAIT_AFTER (4)"),
            ));
        }
        Ok(SyncRangeFlags(bits))
    }
    pub fn union(self, other: SyncRangeFlags) -> SyncRangeFlags {
        SyncRangeFlags(self.0 | other.0)
    }
    pub fn contains(self, other: SyncRangeFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for SyncRangeFlags {
    type Output = SyncRangeFlags;
    fn bitor(self, other: SyncRangeFlags) -> SyncRangeFlags {
        self.union(other)
    }
}

/// Flags for [`File::write_at_with`](super::File::write_at_with) and
/// [`File::read_at_with`](super::File::read_at_with).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteFlags(u32);

impl WriteFlags {
    pub const NONE: WriteFlags = WriteFlags(0);
    /// Uncached I/O (`RWF_DONTCACHE`): the data is written back by the
    /// flusher off the writer's path and dropped from the cache once clean;
    /// an uncached read of data not already cached drops it after the copy.
    pub const DONTCACHE: WriteFlags = WriteFlags(1);

    pub fn from_bits(bits: u32) -> io::Result<WriteFlags> {
        if bits & !1 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("unknown I/O flags {bits:#x}")));
        }
        Ok(WriteFlags(bits))
    }
    pub fn union(self, other: WriteFlags) -> WriteFlags {
        WriteFlags(self.0 | other.0)
    }
    pub fn contains(self, other: WriteFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn bits(self) -> u32 {
        self.0
    }
}
