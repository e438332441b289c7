//! The board: a cache's figures in shared memory, where `wbcache stat`
//! and `wbcache top` read them from another process without stopping or
//! slowing the cache.
//!
//! One small `memfd` per cache ("wbcache-board"), laid out with offsets
//! and versioned like the crash table: a header (owner, program, state,
//! the guardian's pid and progress) and a ring of [`RING_SAMPLES`]
//! samples of [`Figure`]s. The owner's publisher thread writes a sample
//! every [`PUBLISH_INTERVAL`]; each ring slot is a sequence lock (odd
//! while written), so a reader retries rather than see half a sample, and
//! the writer never waits for a reader. Nothing on a read, write or sync
//! path touches the board: the publisher takes its figures from the
//! counters as `Cache::stats` does.
//!
//! The guardian process maps the board too (its descriptor is passed at
//! the guardian's start): after the owner's death it records that it is
//! writing the dead owner's data, and how far it got, until it exits.
//! Readers find boards through `/proc/PID/fd` (the owner's, a fork
//! child's, the guardian's), so a board disappears with the last process
//! holding it: no file is left behind by a crash.
//!
//! Ownership: a [`Board`] (the owner's side) owns its mapping and
//! descriptor; a [`BoardView`] (a reader's, or the guardian's) owns its
//! own mapping of the same memory.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// `BoardLayout::magic`: "wbcboard", stored last when the board is made.
pub const BOARD_MAGIC: u64 = u64::from_le_bytes(*b"wbcboard");
/// Bumped whenever the layout changes: a reader skips another version's
/// board.
pub const BOARD_VERSION: u32 = 1;
/// Samples kept: two seconds at [`PUBLISH_INTERVAL`].
pub const RING_SAMPLES: usize = 8;
/// How often the owner publishes a sample.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(250);
/// Room for figures in a sample; a build with more bumps the version.
const FIGURE_WORDS: usize = 24;
/// Bytes of the program's name kept (`/proc/self/comm` is at most 15).
const PROGRAM_BYTES: usize = 64;

/// What a cache is doing, as its board says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheState {
    /// The owner runs its cache.
    Running,
    /// The owner closed the cache: everything was written and synced.
    Closed,
    /// The owner died with the cache open; its guardian is writing the
    /// data it left to the files.
    GuardianWriting,
    /// The guardian has written everything the dead owner left (it exits
    /// next).
    GuardianDone,
}

impl CacheState {
    fn word(self) -> u32 {
        match self {
            CacheState::Running => 1,
            CacheState::Closed => 2,
            CacheState::GuardianWriting => 3,
            CacheState::GuardianDone => 4,
        }
    }

    fn from_word(word: u32) -> Option<CacheState> {
        [CacheState::Running, CacheState::Closed, CacheState::GuardianWriting, CacheState::GuardianDone]
            .into_iter()
            .find(|s| s.word() == word)
    }

    /// The name scripts see (`stat --json`'s `state`).
    pub fn name(self) -> &'static str {
        match self {
            CacheState::Running => "running",
            CacheState::Closed => "closed",
            CacheState::GuardianWriting => "guardian-writing",
            CacheState::GuardianDone => "guardian-done",
        }
    }
}

/// One figure of a sample: the counters `Cache::stats` reports, under the
/// names of its JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// When the sample was taken: `CLOCK_MONOTONIC`, nanoseconds.
    TimeNs,
    CapacityBytes,
    CachedBytes,
    DirtyBytes,
    WritebackBytes,
    /// The cache's `dirty_limit`.
    DirtyLimitBytes,
    Hits,
    Misses,
    /// Bytes read from the backing stores: read misses and readahead.
    ReadBytes,
    /// Bytes written back (`written_bytes_total`).
    WrittenBytesTotal,
    Fsyncs,
    FsyncLatencyUsP50,
    FsyncLatencyUsP99,
    FsyncLatencyUsMax,
    ThrottleEvents,
    WritebackErrors,
    Evictions,
    OpenInodes,
}

impl Figure {
    pub const ALL: [Figure; 18] = [
        Figure::TimeNs,
        Figure::CapacityBytes,
        Figure::CachedBytes,
        Figure::DirtyBytes,
        Figure::WritebackBytes,
        Figure::DirtyLimitBytes,
        Figure::Hits,
        Figure::Misses,
        Figure::ReadBytes,
        Figure::WrittenBytesTotal,
        Figure::Fsyncs,
        Figure::FsyncLatencyUsP50,
        Figure::FsyncLatencyUsP99,
        Figure::FsyncLatencyUsMax,
        Figure::ThrottleEvents,
        Figure::WritebackErrors,
        Figure::Evictions,
        Figure::OpenInodes,
    ];

    /// The name in `Stats`' JSON (and `stat --json`).
    pub fn name(self) -> &'static str {
        match self {
            Figure::TimeNs => "time_ns",
            Figure::CapacityBytes => "capacity_bytes",
            Figure::CachedBytes => "cached_bytes",
            Figure::DirtyBytes => "dirty_bytes",
            Figure::WritebackBytes => "writeback_bytes",
            Figure::DirtyLimitBytes => "dirty_limit_bytes",
            Figure::Hits => "hits",
            Figure::Misses => "misses",
            Figure::ReadBytes => "read_bytes",
            Figure::WrittenBytesTotal => "written_bytes_total",
            Figure::Fsyncs => "fsyncs",
            Figure::FsyncLatencyUsP50 => "fsync_lat_us_p50",
            Figure::FsyncLatencyUsP99 => "fsync_lat_us_p99",
            Figure::FsyncLatencyUsMax => "fsync_lat_us_max",
            Figure::ThrottleEvents => "throttle_events",
            Figure::WritebackErrors => "writeback_errors",
            Figure::Evictions => "evictions",
            Figure::OpenInodes => "open_inodes",
        }
    }

    /// Whether it counts up from the cache's start (a rate is its
    /// difference over time), rather than being a level.
    pub fn is_counter(self) -> bool {
        matches!(
            self,
            Figure::Hits
                | Figure::Misses
                | Figure::ReadBytes
                | Figure::WrittenBytesTotal
                | Figure::Fsyncs
                | Figure::ThrottleEvents
                | Figure::WritebackErrors
                | Figure::Evictions
        )
    }

    /// Its word in a sample: its place in the declaration, which
    /// [`Figure::ALL`] follows (a test holds them to each other).
    fn index(self) -> usize {
        self as usize
    }
}

const _: () = assert!(Figure::ALL.len() <= FIGURE_WORDS);

/// One sample's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures([u64; FIGURE_WORDS]);

impl Figures {
    pub fn get(&self, figure: Figure) -> u64 {
        self.0[figure.index()]
    }

    pub fn set(&mut self, figure: Figure, value: u64) {
        self.0[figure.index()] = value;
    }
}

/// A ring slot: a sequence lock over one sample.
#[repr(C)]
struct SampleSlot {
    /// Odd while the owner writes the slot; even (twice the samples
    /// written into it) when whole.
    seq: AtomicU64,
    words: [AtomicU64; FIGURE_WORDS],
}

/// The board's memory, from offset 0 of its `memfd`.
#[repr(C)]
struct BoardLayout {
    /// [`BOARD_MAGIC`], stored (Release) after every other header field.
    magic: AtomicU64,
    version: u32,
    state: AtomicU32,
    owner_pid: u32,
    /// 0 until the guardian process maps the board.
    guardian_pid: AtomicU32,
    /// Wall clock at the cache's start, milliseconds since the epoch.
    started_unix_ms: u64,
    /// The crash table's `memfd` inode number (0 without a guardian), so
    /// a reader pairs the board with its table.
    table_inode: AtomicU64,
    program_len: u32,
    program: [u8; PROGRAM_BYTES],
    /// Samples written so far; the newest is in slot `(n - 1) % RING_SAMPLES`.
    samples_written: AtomicU64,
    ring: [SampleSlot; RING_SAMPLES],
    /// What the guardian found to write after the owner's death, and has
    /// written so far, in bytes (`written` stored after `total`).
    guardian_total_bytes: AtomicU64,
    guardian_written_bytes: AtomicU64,
}

/// The board's length in its `memfd`: one page.
fn board_bytes() -> usize {
    std::mem::size_of::<BoardLayout>().next_multiple_of(4096)
}

/// The owner's side: made with the cache, written by its publisher.
pub struct Board {
    fd: OwnedFd,
    layout: NonNull<BoardLayout>,
}

// SAFETY: the mapping lives as long as the board, and after `create`
// every field written is an atomic.
unsafe impl Send for Board {}
// SAFETY: as above: `&Board` writes only atomics; the header's plain
// fields were written before the board was shared.
unsafe impl Sync for Board {}

impl Board {
    /// A board for a cache of this process, named after `program`.
    pub fn create(program: &str) -> io::Result<Board> {
        let (fd, base) = super::arena::map_memfd(c"wbcache-board", board_bytes() as u64)?;
        let layout = base.cast::<BoardLayout>();
        let mut name = [0u8; PROGRAM_BYTES];
        let program_len = program.len().min(PROGRAM_BYTES);
        name[..program_len].copy_from_slice(&program.as_bytes()[..program_len]);
        let started_unix_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        // SAFETY: a fresh mapping of `board_bytes()` (zeros), large enough
        // for the layout and aligned to a page; readers skip it until the
        // magic is stored below, so these plain writes race with nothing.
        unsafe {
            let l = layout.as_ptr();
            (*l).version = BOARD_VERSION;
            (*l).owner_pid = std::process::id();
            (*l).started_unix_ms = started_unix_ms;
            (*l).program_len = program_len as u32;
            (*l).program = name;
            (*l).state.store(CacheState::Running.word(), Ordering::Relaxed);
            (*l).magic.store(BOARD_MAGIC, Ordering::Release);
        }
        Ok(Board { fd, layout })
    }

    fn layout(&self) -> &BoardLayout {
        // SAFETY: mapped for the board's life and initialised by `create`.
        unsafe { self.layout.as_ref() }
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Names the crash table paired with this board (its `memfd`'s inode).
    pub fn set_table_inode(&self, inode: u64) {
        self.layout().table_inode.store(inode, Ordering::Release);
    }

    pub fn set_state(&self, state: CacheState) {
        self.layout().state.store(state.word(), Ordering::Release);
    }

    /// Writes the next sample. One writer: the cache's publisher.
    pub fn publish(&self, figures: &Figures) {
        let l = self.layout();
        let n = l.samples_written.load(Ordering::Relaxed);
        let slot = &l.ring[(n % RING_SAMPLES as u64) as usize];
        let seq = slot.seq.load(Ordering::Relaxed);
        debug_assert!(seq % 2 == 0, "a slot is whole between samples");
        slot.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, value) in slot.words.iter().zip(figures.0) {
            word.store(value, Ordering::Relaxed);
        }
        slot.seq.store(seq + 2, Ordering::Release);
        l.samples_written.store(n + 1, Ordering::Release);
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; nothing refers to it
        // after the board.
        let _ = unsafe { crate::base::sys::unmap(self.layout.as_ptr().cast(), board_bytes()) };
    }
}

/// What a reader learns from a board.
#[derive(Clone, Debug)]
pub struct BoardReading {
    pub owner_pid: u32,
    /// 0 while the cache has no guardian process.
    pub guardian_pid: u32,
    pub program: String,
    pub started_unix_ms: u64,
    pub state: CacheState,
    /// The crash table's `memfd` inode number, 0 without a guardian.
    pub table_inode: u64,
    /// The newest sample; `None` before the first.
    pub newest: Option<Figures>,
    /// The sample nearest a second before the newest, for rates.
    pub second_before: Option<Figures>,
    /// The guardian's progress after the owner's death.
    pub guardian: GuardianProgress,
}

/// How far a guardian got writing a dead owner's data to the files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuardianProgress {
    pub written_bytes: u64,
    /// What it found to write (0 before it starts).
    pub total_bytes: u64,
}

/// A mapping of a board: a reader's (read only) or the guardian's.
pub struct BoardView {
    layout: NonNull<BoardLayout>,
}

// SAFETY: the view only reads plain header fields written before the
// magic (checked on open) and atomics.
unsafe impl Send for BoardView {}

impl BoardView {
    /// Maps the board `fd` refers to; `InvalidData` for a memory object
    /// that is not a board of this version (or not yet one), or whose size
    /// is not sealed (its owner could cut it under the mapping).
    pub fn open(fd: &OwnedFd, writable: Writable) -> io::Result<BoardView> {
        if !crate::base::sys::is_size_sealed(fd.as_raw_fd()) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a board (its size is not sealed)"));
        }
        let len = crate::base::sys::fstat_size(fd.as_raw_fd())? as usize;
        if len < board_bytes() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a board of this version (too short)"));
        }
        let prot = match writable {
            Writable::No => libc::PROT_READ,
            Writable::Yes => libc::PROT_READ | libc::PROT_WRITE,
        };
        let base = crate::base::sys::map_shared(fd.as_raw_fd(), board_bytes(), prot)?;
        let view = BoardView { layout: base.cast() };
        let l = view.layout();
        let magic = l.magic.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if magic != BOARD_MAGIC || l.version != BOARD_VERSION {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a board of this version"));
        }
        Ok(view)
    }

    fn layout(&self) -> &BoardLayout {
        // SAFETY: mapped for the view's life, `board_bytes()` long.
        unsafe { self.layout.as_ref() }
    }

    /// Everything the board says now.
    ///
    /// A reader's mapping is read-only, where atomics may only be loaded
    /// `Relaxed`: each load is followed by an `Acquire` fence instead,
    /// which orders what comes after it as an `Acquire` load would.
    pub fn read(&self) -> BoardReading {
        let l = self.layout();
        let written = l.samples_written.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let newest = (written > 0).then(|| self.sample(written - 1)).flatten();
        let second_before = newest.and_then(|newest| self.second_before(written, &newest));
        let program_len = (l.program_len as usize).min(PROGRAM_BYTES);
        let state = l.state.load(Ordering::Relaxed);
        let written_bytes = l.guardian_written_bytes.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        BoardReading {
            owner_pid: l.owner_pid,
            guardian_pid: l.guardian_pid.load(Ordering::Relaxed),
            program: String::from_utf8_lossy(&l.program[..program_len]).into_owned(),
            started_unix_ms: l.started_unix_ms,
            state: CacheState::from_word(state).unwrap_or(CacheState::Running),
            table_inode: l.table_inode.load(Ordering::Relaxed),
            newest,
            second_before,
            guardian: GuardianProgress { written_bytes, total_bytes: l.guardian_total_bytes.load(Ordering::Relaxed) },
        }
    }

    /// The older sample closest to a second before `newest`.
    fn second_before(&self, written: u64, newest: &Figures) -> Option<Figures> {
        let target = newest.get(Figure::TimeNs).saturating_sub(1_000_000_000);
        let oldest = written.saturating_sub(RING_SAMPLES as u64 - 1);
        (oldest..written - 1)
            .filter_map(|n| self.sample(n))
            .filter(|s| s.get(Figure::TimeNs) < newest.get(Figure::TimeNs))
            .min_by_key(|s| s.get(Figure::TimeNs).abs_diff(target))
    }

    /// Sample number `n`, if its slot still holds it whole (a few tries
    /// while the owner writes it).
    fn sample(&self, n: u64) -> Option<Figures> {
        let slot = &self.layout().ring[(n % RING_SAMPLES as u64) as usize];
        let wanted = 2 * (n / RING_SAMPLES as u64 + 1);
        for _ in 0..64 {
            let before = slot.seq.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut figures = Figures::default();
            for (value, word) in figures.0.iter_mut().zip(&slot.words) {
                *value = word.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) == before {
                return (before == wanted).then_some(figures);
            }
        }
        None
    }

    /// The guardian maps the board: it records its pid.
    pub fn set_guardian_pid(&self, pid: u32) {
        self.layout().guardian_pid.store(pid, Ordering::Release);
    }

    /// The guardian's state and progress (on a view opened writable).
    pub fn set_guardian_progress(&self, state: CacheState, written_bytes: u64, total_bytes: u64) {
        let l = self.layout();
        l.guardian_total_bytes.store(total_bytes, Ordering::Relaxed);
        l.guardian_written_bytes.store(written_bytes, Ordering::Release);
        l.state.store(state.word(), Ordering::Release);
    }
}

impl Drop for BoardView {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        let _ = unsafe { crate::base::sys::unmap(self.layout.as_ptr().cast(), board_bytes()) };
    }
}

/// Whether a [`BoardView`] may write (the guardian's) or only read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writable {
    No,
    Yes,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time_ns: u64, dirty: u64) -> Figures {
        let mut f = Figures::default();
        f.set(Figure::TimeNs, time_ns);
        f.set(Figure::DirtyBytes, dirty);
        f
    }

    #[test]
    fn a_reader_sees_the_header_and_the_newest_sample() {
        let board = Board::create("writer").expect("board");
        let fd = board.fd.try_clone().expect("dup");
        let view = BoardView::open(&fd, Writable::No).expect("view");
        let empty = view.read();
        assert_eq!((empty.owner_pid, empty.program.as_str()), (std::process::id(), "writer"));
        assert_eq!((empty.state, empty.newest, empty.guardian_pid), (CacheState::Running, None, 0));
        for i in 1..=20u64 {
            board.publish(&sample(i * 250_000_000, i));
        }
        let r = view.read();
        assert_eq!(r.newest.map(|f| f.get(Figure::DirtyBytes)), Some(20));
        assert_eq!(r.second_before.map(|f| f.get(Figure::DirtyBytes)), Some(16), "four samples of 250 ms back");
        board.set_state(CacheState::Closed);
        assert_eq!(view.read().state, CacheState::Closed);
    }

    #[test]
    fn a_slot_being_written_is_not_read() {
        let board = Board::create("p").expect("board");
        board.publish(&sample(1, 7));
        let slot = &board.layout().ring[0];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        let fd = board.fd.try_clone().expect("dup");
        let view = BoardView::open(&fd, Writable::No).expect("view");
        assert_eq!(view.read().newest, None, "a torn sample is never returned");
        slot.seq.fetch_add(1, Ordering::Relaxed);
        assert_eq!(view.read().newest, None, "a slot overwritten since is not that sample");
    }

    #[test]
    fn a_memory_object_that_is_not_a_board_is_refused() {
        let (fd, _base) = crate::guardian::arena::map_memfd(c"not-a-board", 8192).expect("memfd");
        let e = BoardView::open(&fd, Writable::No).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_memory_object_whose_size_is_not_sealed_is_refused() {
        // SAFETY: a valid name; a descriptor of our own comes back.
        let raw = unsafe { libc::memfd_create(c"wbcache-board".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create");
        // SAFETY: the descriptor just made, ours alone.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        crate::base::sys::ftruncate(fd.as_raw_fd(), 4096).expect("a page");
        let e = BoardView::open(&fd, Writable::No).err().expect("refused");
        assert!(e.kind() == io::ErrorKind::InvalidData && e.to_string().contains("sealed"), "{e}");
    }

    #[test]
    fn the_figures_fit_and_have_distinct_names() {
        for (i, figure) in Figure::ALL.iter().enumerate() {
            assert_eq!(figure.index(), i, "{figure:?} is listed in declaration order");
        }
        let names: std::collections::HashSet<_> = Figure::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(names.len(), Figure::ALL.len());
        assert!(board_bytes() <= 4096, "one page: {}", board_bytes());
    }
}
