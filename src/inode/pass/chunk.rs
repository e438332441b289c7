//! What a writeback pass is made of, shared by the pass's collection
//! (the folder's own file), its I/Os (`ios`) and its completion
//! (`completion`): the runs of blocks it took ([`WbChunk`]), the pass
//! itself ([`WbPass`]), what it may take ([`PassScope`], [`PassSize`]) and
//! what it did ([`WritebackOutcome`]).
//!
//! Invariants: a chunk's blocks are under writeback in its folio from the
//! pass's collection until its completion, which happens once per chunk
//! (one result per I/O, asserted in [`WbPass::set_results`]); bridged
//! chunks hold clean blocks only. The pass owns its chunks; the fields are
//! visible to the pass folder alone.

use std::io;
use std::sync::Arc;

use crate::buf::AlignedBuf;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::Folio;
use crate::policy::route::Route;
use crate::stats::{IoClass, Reason};

/// A contiguous run of blocks taken from one folio for writeback.
pub(super) struct WbChunk {
    pub(super) folio: Arc<Folio>,
    pub(super) buf: Arc<AlignedBuf>,
    /// Block range within the folio.
    pub(super) start: usize,
    pub(super) end: usize,
    /// Clean, uptodate blocks written only to join two dirty neighbours
    /// into one I/O (`Config::bridge_gap_bytes`); not dirty data, so not in
    /// the dirty or writeback byte counts, but their room under the dirty
    /// limit is held while the I/O is in flight, as a failure makes them
    /// dirty ([`crate::policy::dirty::DomainDirty::try_reserve_bridge`]). Random 4 KiB writes leave many
    /// dirty blocks one or two blocks apart; rewriting what is already on
    /// disk there costs a few KiB of transfer and saves an I/O (about 4% of
    /// the I/Os of the rand-write benchmark, whose device is bound by I/Os
    /// per second; gaps of 4 or 8 blocks saved hardly more).
    pub(super) bridge: bool,
    /// Written through the kernel's cache
    /// ([`crate::io::BackingStore::write_tail`]), not O_DIRECT: this many
    /// bytes from the chunk's start, which end at the file's size when the
    /// chunk holds it. Two kinds: the file's partial last block
    /// ([`Inode::mark_tail`](crate::inode::Inode::mark_tail)), and a small
    /// append a sync writes
    /// ([`Inode::mark_sync_append`](crate::inode::Inode::mark_sync_append)).
    /// Such a chunk is an I/O of its own.
    pub(super) buffered_len: Option<usize>,
    pub(super) result: Option<io::Result<()>>,
}

impl WbChunk {
    pub(super) fn offset(&self) -> u64 {
        self.folio.offset() + (self.start * BLOCK_SIZE) as u64
    }
    pub(super) fn len_bytes(&self) -> usize {
        (self.end - self.start) * BLOCK_SIZE
    }
}

/// Whether completing a pass makes the store's length the logical size
/// again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeFix {
    /// Not now: other passes of the inode are in flight here.
    No,
    /// If no writeback I/O of the inode is in flight anywhere and no length
    /// change is under way; otherwise the last pass, an fsync or the close
    /// does it. A writeback worker must never wait for I/O that another
    /// worker (itself waiting) would complete.
    Try,
    /// Waiting for the inode's other I/O (a caller's own, synchronous pass).
    Wait,
}

/// A writeback pass between collecting its blocks and completing them.
pub struct WbPass {
    pub(super) ticket: u64,
    pub(super) reason: Reason,
    pub(super) chunks: Vec<WbChunk>,
    /// I/O `g` writes `chunks[groups[g].0..groups[g].1]`.
    pub(super) groups: Vec<(usize, usize)>,
    /// The class each I/O was written in, from [`WbPass::set_results`].
    pub(super) classes: Vec<IoClass>,
    pub(super) bytes: u64,
}

impl WbPass {
    /// Why the pass writes.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// Bytes the pass writes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Dirty bytes the pass writes (without the clean blocks it bridges).
    pub fn dirty_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| !c.bridge).map(|c| c.len_bytes() as u64).sum()
    }

    /// Bytes I/O `io` writes: its chunks' whole blocks, bridged ones
    /// included (the file's partial last block counts whole, as the cache
    /// tracks it, though only its bytes within the size reach the store).
    pub fn io_bytes(&self, io: usize) -> u64 {
        let (i, j) = self.groups[io];
        self.chunks[i..j].iter().map(|c| c.len_bytes() as u64).sum()
    }

    /// Records the result of every I/O (in group order) on its chunks, and
    /// the class it was written in.
    pub fn set_results(&mut self, results: Vec<(io::Result<usize>, IoClass)>) {
        assert_eq!(results.len(), self.groups.len(), "one result per I/O");
        assert_eq!(self.groups.last().map(|g| g.1), Some(self.chunks.len()), "the I/Os cover every chunk");
        self.classes = results.iter().map(|&(_, class)| class).collect();
        for (&(i, j), (result, _)) in self.groups.iter().zip(results) {
            for c in &mut self.chunks[i..j] {
                assert!(c.result.is_none(), "a chunk completes once");
                c.result = Some(match &result {
                    Ok(_) => Ok(()),
                    Err(e) => Err(io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))),
                });
            }
        }
        debug_assert!(self.chunks.iter().all(|c| c.result.is_some()), "every chunk has its result");
    }

    /// Bytes of the pass's I/Os that succeeded, by the class they were
    /// written in (as [`WbPass::io_bytes`] counts them).
    pub(super) fn written_by_class(&self) -> [u64; IoClass::COUNT] {
        let mut by_class = [0; IoClass::COUNT];
        for (io, &(first, _)) in self.groups.iter().enumerate() {
            if matches!(self.chunks[first].result, Some(Ok(()))) {
                by_class[self.classes[io] as usize] += self.io_bytes(io);
            }
        }
        by_class
    }
}

/// What one writeback pass did.
#[derive(Debug, Default)]
pub struct WritebackOutcome {
    pub written_bytes: u64,
    pub failed_bytes: u64,
    pub first_error: Option<i32>,
}

/// What a pass may take: the whole inode from its start (fsync, close),
/// the folios starting in a block range (`sync_file_range`), or a
/// writeback worker's share of it from that worker's cursor.
#[derive(Clone, Copy)]
pub enum PassScope<'a> {
    Whole,
    Blocks { start: u64, end: u64 },
    Worker { route: &'a Route, worker: usize },
}

/// How much one pass takes at most: dirty bytes, and runs of dirty blocks
/// (each run one I/O or more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassSize {
    pub bytes_max: u64,
    pub runs_max: usize,
}

impl PassSize {
    /// Everything dirty in the pass's scope (fsync, close,
    /// `sync_file_range`, expired data).
    pub const ALL: PassSize = PassSize { bytes_max: u64::MAX, runs_max: usize::MAX };
}
