//! Writeback: per-device domains with their dirty accounting and dirty inode
//! lists ([`domain`]), and the flusher thread that drains them ([`flusher`]).
//!
//! Writeback of an inode's data (collecting dirty blocks, building I/Os,
//! completing them) lives with the inode; this module decides *when* and
//! *which* inodes are written, and why.

pub mod domain;
pub mod flusher;
pub mod inflight;

/// Why a writeback happened; written bytes are counted per reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Dirty data over the background threshold.
    Background = 0,
    /// Dirty data older than `expire`.
    Periodic = 1,
    /// Kicked by uncached writes.
    Dontcache = 2,
    /// An fsync/fdatasync.
    Fsync = 3,
    /// Memory pressure: eviction found nothing clean.
    Reclaim = 4,
    /// The cache is closing.
    Close = 5,
}

impl Reason {
    pub const COUNT: usize = 6;
    pub const ALL: [Reason; Reason::COUNT] =
        [Reason::Background, Reason::Periodic, Reason::Dontcache, Reason::Fsync, Reason::Reclaim, Reason::Close];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Background => "background",
            Reason::Periodic => "periodic",
            Reason::Dontcache => "dontcache",
            Reason::Fsync => "fsync",
            Reason::Reclaim => "reclaim",
            Reason::Close => "close",
        }
    }
}
