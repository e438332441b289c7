//! What a handle's calls take besides data: [`OpenOptions`] (as
//! `std::fs::OpenOptions`), [`WriteFlags`] (per-call `RWF_*` flags),
//! [`Advice`] (`posix_fadvise`) and [`SyncRangeFlags`]
//! (`sync_file_range`). Plain values: they own nothing and validate
//! nothing until a call uses them.

use std::io;

/// How to open a file: the options and rules of `std::fs::OpenOptions`
/// (with `mode` from `std::os::unix::fs::OpenOptionsExt`), plus
/// [`OpenOptions::dontcache`]. Give it to [`Cache::open`](crate::Cache::open).
///
/// As with std, every option starts off: `OpenOptions::new()` asks for no
/// access at all, which opening refuses. Set `read`, `write` or `append`
/// (`append` implies `write`). The combinations std refuses are refused
/// here too, with `InvalidInput` (errno `EINVAL`) and std's words:
///
/// - no access mode (none of `read`, `write` or `append`);
/// - `create`, `create_new` or `truncate` without `write` or `append`;
/// - `truncate` with `append`, unless `create_new` (the file is new, so
///   there is nothing to truncate).
///
/// ```
/// use wbcache::{Cache, Config, OpenOptions};
/// # fn main() -> std::io::Result<()> {
/// let cache = Cache::new(Config::from_options("capacity=16M")?)?;
/// let path = std::env::temp_dir().join(format!("wbcache-doc-options-{}.log", std::process::id()));
///
/// // A log: created if missing, every write at its end.
/// let log = cache.open(&path, &OpenOptions::new().append(true).create(true))?;
/// log.write_at(b"first\n", 0)?;
/// log.write_at(b"second\n", 0)?; // the offset does not matter: appended
/// assert_eq!(log.len()?, 13);
///
/// // A reader of the same file, and what opening refuses.
/// let reader = cache.open(&path, &OpenOptions::new().read(true))?;
/// let mut buf = [0u8; 13];
/// assert_eq!(reader.read_at(&mut buf, 0)?, 13);
/// assert_eq!(&buf, b"first\nsecond\n");
/// let refused = cache.open(&path, &OpenOptions::new()).err().expect("no access mode");
/// assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
///
/// cache.remove_file(&path)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Open for reading ([`OpenOptions::read`]).
    pub read: bool,
    /// Open for writing ([`OpenOptions::write`]).
    pub write: bool,
    /// Create the file if it does not exist ([`OpenOptions::create`]).
    pub create: bool,
    /// Create the file, failing if it exists ([`OpenOptions::create_new`]).
    pub create_new: bool,
    /// Empty the file on open ([`OpenOptions::truncate`]).
    pub truncate: bool,
    /// Permission bits for a created file (default 0o644), minus the
    /// umask ([`OpenOptions::mode`]).
    pub mode: u32,
    /// Every read and write of the handle is uncached, as if it passed
    /// [`WriteFlags::DONTCACHE`]: how a backup, log or streaming handle is
    /// marked once instead of on each call.
    pub dontcache: bool,
    /// `O_APPEND`: every write goes to the end of the file, whatever
    /// offset it names (as `pwrite(2)` on Linux), atomically with respect
    /// to other appends through the cache. Implies write access, as in
    /// std.
    pub append: bool,
}

impl Default for OpenOptions {
    /// Every option off and `mode` 0o644, as [`OpenOptions::new`].
    fn default() -> Self {
        OpenOptions {
            read: false,
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
    /// Options with everything off (no access mode: set `read`, `write`
    /// or `append` before opening) and `mode` 0o644, as
    /// `std::fs::OpenOptions::new`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Read and write, creating the file if missing (a shorthand for
    /// `OpenOptions::new().read(true).write(true).create(true)`).
    pub fn read_write_create() -> Self {
        OpenOptions::new().read(true).write(true).create(true)
    }

    /// Sets read access: the handle may read (`read_at` and the like;
    /// without it they fail with `EBADF`).
    pub fn read(mut self, read: bool) -> Self {
        self.read = read;
        self
    }

    /// Sets write access: the handle may write, resize, allocate (without
    /// it those fail with `EBADF`). Writing over a file does not truncate
    /// it first: see [`OpenOptions::truncate`].
    pub fn write(mut self, write: bool) -> Self {
        self.write = write;
        self
    }

    /// Sets append mode: every write goes to the end of the file, whatever
    /// offset it names (see the field [`OpenOptions::append`]). Implies
    /// write access, as `std::fs::OpenOptions::append` does.
    pub fn append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    /// Empties the file when it is opened (`O_TRUNC`), cached data
    /// included; needs `write` (not `append`, as in std). A block device
    /// is not truncated, as `open(2)` ignores `O_TRUNC` on one.
    pub fn truncate(mut self, truncate: bool) -> Self {
        self.truncate = truncate;
        self
    }

    /// Creates the file if it does not exist (`O_CREAT`), with the
    /// permission bits [`OpenOptions::mode`]; needs `write` or `append`.
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// Creates the file, failing with `AlreadyExists` (`EEXIST`) if
    /// anything exists at the path, symlinks included (`O_CREAT |
    /// O_EXCL`). `create` and `truncate` are then ignored; needs `write`
    /// or `append`.
    pub fn create_new(mut self, create_new: bool) -> Self {
        self.create_new = create_new;
        self
    }

    /// The permission bits a created file gets (minus the process's
    /// umask), as `std::os::unix::fs::OpenOptionsExt::mode`. Default
    /// 0o644.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    /// Makes the handle's every read and write uncached (see the field
    /// [`OpenOptions::dontcache`]).
    pub fn dontcache(mut self, dontcache: bool) -> Self {
        self.dontcache = dontcache;
        self
    }

    /// Whether a handle opened with these options may write: `write` or
    /// `append`.
    pub(crate) fn writable(&self) -> bool {
        self.write || self.append
    }

    /// Refuses what `std::fs::OpenOptions` refuses, with its messages.
    pub(crate) fn validate(&self) -> io::Result<()> {
        let refuse = |message: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, message.to_string()));
        if (self.create || self.create_new || self.truncate) && !self.writable() {
            return refuse("creating or truncating a file requires write or append access");
        }
        if !self.read && !self.writable() {
            return refuse("must specify at least one of read, write, or append access");
        }
        if self.append && self.truncate && !self.create_new {
            return refuse("truncate and append cannot be combined, as in std: open with append, then set_len(0)");
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
    /// No step: the call only checks its range.
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
    /// The steps of both (also `a | b`).
    pub fn union(self, other: SyncRangeFlags) -> SyncRangeFlags {
        SyncRangeFlags(self.0 | other.0)
    }
    /// Whether every step of `other` is among these.
    pub fn contains(self, other: SyncRangeFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// `sync_file_range(2)`'s value of the flags.
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
    /// No flag: cached I/O.
    pub const NONE: WriteFlags = WriteFlags(0);
    /// Uncached I/O (`RWF_DONTCACHE`): the data is written back by the
    /// flusher off the writer's path and dropped from the cache once clean;
    /// an uncached read of data not already cached drops it after the copy.
    pub const DONTCACHE: WriteFlags = WriteFlags(1);

    /// From the C ABI's flag bits (`WBC_DONTCACHE` is 1); `EINVAL` for
    /// unknown bits.
    pub fn from_bits(bits: u32) -> io::Result<WriteFlags> {
        if bits & !1 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("unknown I/O flags {bits:#x}")));
        }
        Ok(WriteFlags(bits))
    }
    /// The flags of both.
    pub fn union(self, other: WriteFlags) -> WriteFlags {
        WriteFlags(self.0 | other.0)
    }
    /// Whether every flag of `other` is among these.
    pub fn contains(self, other: WriteFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// The C ABI's bits of the flags.
    pub fn bits(self) -> u32 {
        self.0
    }
}
