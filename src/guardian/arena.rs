//! Guarded memory: the folio buffers that hold written data, in shared
//! memory that outlives the process, and the crash table that says what
//! they hold.
//!
//! Two `memfd`s, both also mapped by the guardian process:
//! - the *arena*: buffers, carved from 2 MiB chunks, one size class per
//!   chunk (a buffer of more than a chunk takes a run of whole chunks);
//! - the *table*, laid out with offsets and versioned ([`TableHeader`]):
//!   per managed file its size as the cache knows it; per chunk its slot
//!   length; per arena block a descriptor (for a slot's first block: the
//!   file and offset its folio holds) and a dirty byte (the block holds
//!   data the file does not have yet).
//!
//! Recording is plain stores (relaxed atomics compile to `mov`): a dirty
//! byte is set after the data is copied and before the write returns, and
//! cleared only when the block is known to be on the store (writeback done
//! and not dirtied again) or its data was discarded. Nothing reads the
//! table while the owner lives; after the owner's death the guardian reads
//! it, and the process's exit orders every store before that. A write
//! still in progress at the death may be found in part: as on the kernel,
//! a write that did not return may land as any part of its bytes.
//!
//! Ownership: an [`Arena`] owns both mappings and the slot allocator; a
//! buffer owns its slot (see `buf::AlignedBuf`) and gives it back on drop,
//! which forgets its record.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

/// The unit of dirty tracking (as `io::BLOCK_SIZE`, which sits above).
pub const BLOCK_BYTES: usize = 4096;
/// Arena chunk: one size class per chunk.
pub const CHUNK_BYTES: usize = 2 << 20;
const CHUNK_BLOCKS: usize = CHUNK_BYTES / BLOCK_BYTES;

/// The largest arena a table may describe (64 TiB): beyond any cache's
/// capacity, and small enough that a layout's sizes cannot overflow.
const ARENA_BYTES_MAX: u64 = 1 << 46;

/// `TableHeader::magic`: "wbcguard".
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"wbcguard");
/// Bumped whenever the layout changes: a guardian refuses a table of
/// another version.
pub const TABLE_VERSION: u32 = 2;
/// The owner is running: a death leaves dirty data to write.
pub const STATE_RUNNING: u32 = 1;
/// The owner closed the cache (everything written and synced).
pub const STATE_CLOSED: u32 = 2;
/// A descriptor's `file` when no file owns the slot: the zero a fresh
/// table reads as (file slots start at 1).
pub const NO_FILE: u32 = 0;
/// Managed files the table has room for (a record and a name each,
/// touched as used); a file opened beyond them is not guarded.
pub const FILE_SLOTS: u32 = 1 << 14;
/// A file's name in the table: a length word, then the path's bytes (its
/// last [`FILE_NAME_BYTES`] when longer), for `wbcache stat`'s files.
const FILE_NAME_WORDS: usize = 32;
pub const FILE_NAME_BYTES: usize = (FILE_NAME_WORDS - 1) * 8;

/// The table's first bytes. Offsets are from the table's start.
#[repr(C)]
pub struct TableHeader {
    pub magic: u64,
    pub version: u32,
    pub state: AtomicU32,
    pub owner_pid: u32,
    pub file_slots: u32,
    pub arena_bytes: u64,
    pub files_at: u64,
    pub names_at: u64,
    pub chunks_at: u64,
    pub descs_at: u64,
    pub dirty_at: u64,
    pub table_bytes: u64,
}

/// A managed file: in use, its generation (bumped when the slot is
/// released, so records of an earlier file are ignored), its size as the
/// cache knows it, whether writeback may have padded the store's tail
/// block past that size (O_DIRECT writes whole blocks; the cache cuts the
/// padding off later), and whether a truncation to that size is under way
/// (the store is cut last).
#[repr(C)]
pub struct FileRecord {
    pub used: AtomicU32,
    pub generation: AtomicU32,
    pub size: AtomicU64,
    pub padded: AtomicU32,
    pub cut_owed: AtomicU32,
}

/// A slot's first block: which file (and generation) its folio belongs
/// to, and the folio's offset in that file.
#[repr(C)]
pub struct SlotDesc {
    pub file: AtomicU32,
    pub generation: AtomicU32,
    pub offset: AtomicU64,
}

/// Where each part of a table of `arena_bytes` lies, and its total size.
pub fn table_layout(arena_bytes: u64) -> TableHeader {
    let blocks = arena_bytes / BLOCK_BYTES as u64;
    let chunks = arena_bytes / CHUNK_BYTES as u64;
    let files_at = std::mem::size_of::<TableHeader>().next_multiple_of(64) as u64;
    let names_at = (files_at + FILE_SLOTS as u64 * std::mem::size_of::<FileRecord>() as u64).next_multiple_of(64);
    let chunks_at = names_at + FILE_SLOTS as u64 * (FILE_NAME_WORDS * 8) as u64;
    let descs_at = (chunks_at + chunks * 4).next_multiple_of(64);
    let dirty_at = descs_at + blocks * std::mem::size_of::<SlotDesc>() as u64;
    let table_bytes = (dirty_at + blocks).next_multiple_of(BLOCK_BYTES as u64);
    TableHeader {
        magic: TABLE_MAGIC,
        version: TABLE_VERSION,
        state: AtomicU32::new(STATE_RUNNING),
        owner_pid: std::process::id(),
        file_slots: FILE_SLOTS,
        arena_bytes,
        files_at,
        names_at,
        chunks_at,
        descs_at,
        dirty_at,
        table_bytes,
    }
}

/// A read view of a mapped table (the owner's or the guardian's).
pub struct TableView {
    base: NonNull<u8>,
}

// SAFETY: the view only hands out references to atomics.
unsafe impl Send for TableView {}
// SAFETY: through `&TableView` one gets only shared references to the
// header's plain fields (written before any view exists, never changed
// after) and to atomics, so views used from several threads cannot race.
unsafe impl Sync for TableView {}

impl TableView {
    /// # Safety
    /// `base` maps a whole table (its `table_bytes`) laid out by
    /// [`table_layout`], for as long as the view lives.
    pub unsafe fn new(base: NonNull<u8>) -> TableView {
        TableView { base }
    }

    pub fn header(&self) -> &TableHeader {
        // SAFETY: the table starts with its header (`new`'s contract).
        unsafe { &*self.base.as_ptr().cast::<TableHeader>() }
    }

    fn at<T>(&self, offset: u64, index: u64) -> &T {
        // SAFETY: callers index within the part `offset` starts (checked
        // against the header's counts), inside the mapping.
        unsafe { &*self.base.as_ptr().add(offset as usize + index as usize * std::mem::size_of::<T>()).cast::<T>() }
    }

    pub fn file(&self, slot: u32) -> &FileRecord {
        assert!(slot < self.header().file_slots, "file slot {slot} in the table");
        self.at(self.header().files_at, slot as u64)
    }

    /// Records `name` (a path) as file slot `slot`'s name: its last
    /// [`FILE_NAME_BYTES`] bytes when longer. Before the slot is marked
    /// used; readers check the generation around their read.
    pub fn set_file_name(&self, slot: u32, name: &[u8]) {
        let words = self.file_name_words(slot);
        let name = &name[name.len().saturating_sub(FILE_NAME_BYTES)..];
        words[0].store(name.len() as u64, Ordering::Relaxed);
        for (word, bytes) in words[1..].iter().zip(name.chunks(8)) {
            let mut le = [0u8; 8];
            le[..bytes.len()].copy_from_slice(bytes);
            word.store(u64::from_le_bytes(le), Ordering::Relaxed);
        }
    }

    /// File slot `slot`'s name, as recorded (possibly cut to its tail).
    pub fn file_name(&self, slot: u32) -> Vec<u8> {
        let words = self.file_name_words(slot);
        let len = (words[0].load(Ordering::Relaxed) as usize).min(FILE_NAME_BYTES);
        let mut name: Vec<u8> = words[1..].iter().flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes()).collect();
        name.truncate(len);
        name
    }

    /// File slot `slot`'s name if the slot holds the file of `generation`
    /// from before the name was read to after: read from another process
    /// while the owner runs, a slot released and reused meanwhile names
    /// another file (or a mix of two names), and gives `None`.
    pub fn file_name_of(&self, slot: u32, generation: u32) -> Option<Vec<u8>> {
        let record = self.file(slot);
        let in_use = || {
            let (used, now) = (record.used.load(Ordering::Relaxed), record.generation.load(Ordering::Relaxed));
            std::sync::atomic::fence(Ordering::Acquire);
            used != 0 && now == generation
        };
        if !in_use() {
            return None;
        }
        let name = self.file_name(slot);
        in_use().then_some(name)
    }

    fn file_name_words(&self, slot: u32) -> &[AtomicU64; FILE_NAME_WORDS] {
        assert!(slot < self.header().file_slots, "file slot {slot} in the table");
        self.at(self.header().names_at, slot as u64)
    }

    /// The slot length (in blocks) of chunk `chunk`'s size class; 0 for a
    /// free chunk or one continuing a larger buffer.
    pub fn chunk_slot_blocks(&self, chunk: u64) -> &AtomicU32 {
        assert!(chunk < self.chunks(), "chunk {chunk} in the arena");
        self.at(self.header().chunks_at, chunk)
    }

    pub fn desc(&self, block: u64) -> &SlotDesc {
        assert!(block < self.blocks(), "block {block} in the arena");
        self.at(self.header().descs_at, block)
    }

    pub fn dirty(&self, block: u64) -> &AtomicU8 {
        debug_assert!(block < self.blocks(), "block {block} in the arena");
        self.at(self.header().dirty_at, block)
    }

    pub fn blocks(&self) -> u64 {
        self.header().arena_bytes / BLOCK_BYTES as u64
    }

    pub fn chunks(&self) -> u64 {
        self.header().arena_bytes / CHUNK_BYTES as u64
    }

    /// Whether the header is one this build lays out.
    pub fn is_valid(&self, table_bytes: u64) -> bool {
        let h = self.header();
        // Read from another process's memory, the header is checked
        // before its sizes are multiplied into a layout.
        if h.magic != TABLE_MAGIC || h.version != TABLE_VERSION || h.arena_bytes > ARENA_BYTES_MAX {
            return false;
        }
        let expected = table_layout(h.arena_bytes);
        h.table_bytes == expected.table_bytes
            && h.table_bytes <= table_bytes
            && h.file_slots == expected.file_slots
            && h.files_at == expected.files_at
            && h.names_at == expected.names_at
            && h.chunks_at == expected.chunks_at
            && h.descs_at == expected.descs_at
            && h.arena_bytes % CHUNK_BYTES as u64 == 0
            && h.dirty_at == expected.dirty_at
    }
}

/// A table mapped read-only from its descriptor: by another process
/// (`wbcache stat`) while the owner runs. What it reads is a snapshot
/// that the owner's stores move on from; the header, written before the
/// table was shared, is checked first.
pub struct MappedTable {
    view: TableView,
    len: usize,
}

impl MappedTable {
    /// Maps the table `fd` refers to; `InvalidData` for another layout, or
    /// for a memory object whose size is not sealed (its owner could cut
    /// it under the mapping: a reader's access would fault).
    pub fn open(fd: &OwnedFd) -> io::Result<MappedTable> {
        if !crate::base::sys::is_size_sealed(fd.as_raw_fd()) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a crash table (its size is not sealed)"));
        }
        let len = crate::base::sys::fstat_size(fd.as_raw_fd())?;
        if len < std::mem::size_of::<TableHeader>() as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a crash table (too short)"));
        }
        let base = crate::base::sys::map_shared(fd.as_raw_fd(), len as usize, libc::PROT_READ)?;
        // SAFETY: the whole memfd, mapped for this value's life; the header
        // is checked before any other part is read.
        let table = MappedTable { view: unsafe { TableView::new(base) }, len: len as usize };
        if !table.view.is_valid(len) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a crash table of this version"));
        }
        Ok(table)
    }

    pub fn view(&self) -> &TableView {
        &self.view
    }
}

impl Drop for MappedTable {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once.
        let _ = unsafe { crate::base::sys::unmap(self.view.base.as_ptr().cast(), self.len) };
    }
}

/// A `memfd` of `bytes`, its size sealed (readers in other processes
/// trust it: see `base::sys::seal_size`), mapped shared and kept from
/// fork children.
pub fn map_memfd(name: &std::ffi::CStr, bytes: u64) -> io::Result<(OwnedFd, NonNull<u8>)> {
    // SAFETY: a valid NUL-terminated name; the flags are memfd_create's.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    let raw = crate::base::sys::above_program_descriptors(raw);
    // SAFETY: a descriptor we just created and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    crate::base::sys::ftruncate(fd.as_raw_fd(), bytes as i64)?;
    crate::base::sys::seal_size(fd.as_raw_fd())?;
    let base = crate::base::sys::map_shared(fd.as_raw_fd(), bytes as usize, libc::PROT_READ | libc::PROT_WRITE)?;
    // A fork child gets none of it: the guardian watches this process,
    // not its children, and a fork need not copy the cache's page tables.
    // SAFETY: our own mapping of exactly this length.
    let _ = unsafe { crate::base::sys::advise(base.as_ptr().cast(), bytes as usize, libc::MADV_DONTFORK) };
    Ok((fd, base))
}

/// Free chunks kept with their pages (not given back to the kernel), for
/// the next buffers: a streaming writer frees and takes chunks at its
/// write rate, and each fresh chunk costs a page fault and a zeroing per
/// 4 KiB of shared memory (no transparent huge pages there, usually).
/// At most this many (64 MiB), and at most a sixteenth of the arena.
const IDLE_CHUNKS_MAX: usize = 32;

/// Freed slots of chunks still in use wait until this many bytes of them
/// are free, then give their pages back to the kernel together (holes
/// punched in the `memfd`) and become free for reuse: as the process's
/// slabs do, so memory a cache no longer uses does not stay resident.
const PUNCH_BATCH_BYTES: usize = 4 << 20;

/// Populated free chunks the filler thread keeps ready (16 MiB), so a
/// writer that needs a fresh chunk finds its pages faulted in off its
/// path, as the process-wide slab stash does for anonymous buffers: in a
/// profile of `seq-write`, faulting and zeroing fresh shared pages inside
/// the writes took a sixth of the time.
const IDLE_CHUNKS_TARGET: usize = 8;

/// Which chunks hold which size class, and their free slots.
#[derive(Default)]
struct SlotAlloc {
    /// Per chunk: its slot length in blocks (0: free), live slots, free
    /// slot indices.
    chunks: Vec<ChunkState>,
    /// Per size class (4 KiB << class): chunks with a free slot.
    partial: Vec<Vec<u32>>,
    /// Free chunks whose pages are gone (or never were), last freed last.
    fresh: Vec<u32>,
    /// Free chunks that kept their pages (see [`IDLE_CHUNKS_MAX`]).
    idle: Vec<u32>,
    idle_max: usize,
    /// A writer took a chunk: the filler starts only then (a cache that
    /// never writes, such as a shell's under `wbcache run`, costs no
    /// memory).
    in_use: bool,
    /// Freed slots whose pages go back in the next batch (see
    /// [`PUNCH_BATCH_BYTES`]); not reusable until then.
    pending: Vec<Slot>,
    pending_bytes: usize,
}

impl SlotAlloc {
    fn new(chunks: usize) -> SlotAlloc {
        SlotAlloc {
            chunks: vec![ChunkState::default(); chunks],
            partial: vec![Vec::new(); 10],
            fresh: (0..chunks as u32).rev().collect(),
            idle: Vec::new(),
            idle_max: IDLE_CHUNKS_MAX.min(chunks / 16),
            in_use: false,
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// A free chunk, and whether its pages must be faulted in.
    fn take_free_chunk(&mut self) -> Option<(u32, bool)> {
        self.in_use = true;
        if let Some(chunk) = self.idle.pop() {
            return Some((chunk, false));
        }
        self.fresh.pop().map(|chunk| (chunk, true))
    }

    /// Whether the filler should populate another fresh chunk.
    fn wants_fill(&self) -> bool {
        self.in_use && self.idle.len() < IDLE_CHUNKS_TARGET.min(self.idle_max) && !self.fresh.is_empty()
    }

    /// Chunk `chunk` became free; whether its pages go back to the kernel.
    fn give_back_chunk(&mut self, chunk: u32) -> bool {
        self.chunks[chunk as usize] = ChunkState::default();
        if self.idle.len() < self.idle_max {
            self.idle.push(chunk);
            false
        } else {
            self.fresh.push(chunk);
            true
        }
    }
}

#[derive(Default, Clone)]
struct ChunkState {
    slot_blocks: u32,
    live: u32,
    free: Vec<u16>,
}

/// The guarded memory of one cache: the arena, the table, the allocator.
pub struct Arena {
    /// Wakes the filler thread (see [`IDLE_CHUNKS_TARGET`]).
    fill_wanted: std::sync::Condvar,
    arena_fd: OwnedFd,
    arena: NonNull<u8>,
    arena_bytes: u64,
    table_fd: OwnedFd,
    table: TableView,
    table_bytes: u64,
    alloc: Mutex<SlotAlloc>,
}

// SAFETY: the mappings are shared memory that lives as long as the arena;
// slots are handed out once (under the allocator's lock) and the table is
// atomics only.
unsafe impl Send for Arena {}
// SAFETY: `&Arena` reaches the mappings (alive as long as the arena) only
// through the table's atomics and through slots handed out once under the
// allocator's mutex, so no byte has two writers racing.
unsafe impl Sync for Arena {}

/// A slot handed out by [`Arena::allocate`]: its first block and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub first_block: u32,
    pub blocks: u32,
}

/// What the crash table records of a written block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Held only here: a guardian writes it to the file.
    Dirty,
    /// On the store, or discarded: nothing to write.
    Clean,
}

impl Arena {
    /// An arena for a cache of `capacity_bytes`: half as much again (slot
    /// sizes fragment it) plus 32 MiB, all sparse until touched.
    pub fn new(capacity_bytes: u64) -> io::Result<Arena> {
        let arena_bytes = (capacity_bytes + capacity_bytes / 2).next_multiple_of(CHUNK_BYTES as u64) + (32 << 20);
        let layout = table_layout(arena_bytes);
        let (arena_fd, arena) = map_memfd(c"wbcache-guarded", arena_bytes)?;
        // Huge pages where the system gives them to shared memory
        // (`shmem_enabled` `advise`, `within_size` or `always`): fewer TLB
        // misses on cached reads, one segment per 2 MiB of O_DIRECT I/O.
        // With `never` (common) this changes nothing.
        // SAFETY: the arena mapping just made, its whole length.
        let _ = unsafe { crate::base::sys::advise(arena.as_ptr().cast(), arena_bytes as usize, libc::MADV_HUGEPAGE) };
        let (table_fd, table_base) = map_memfd(c"wbcache-table", layout.table_bytes).inspect_err(|_| {
            // SAFETY: the mapping made just above, unmapped once.
            let _ = unsafe { crate::base::sys::unmap(arena.as_ptr().cast(), arena_bytes as usize) };
        })?;
        let table_bytes = layout.table_bytes;
        // SAFETY: a fresh mapping of `table_bytes`, large enough for the
        // header; nobody else writes it yet.
        unsafe { table_base.as_ptr().cast::<TableHeader>().write(layout) };
        // SAFETY: the mapping holds the whole table just laid out.
        let table = unsafe { TableView::new(table_base) };
        let alloc = SlotAlloc::new((arena_bytes / CHUNK_BYTES as u64) as usize);
        let fill_wanted = std::sync::Condvar::new();
        Ok(Arena { fill_wanted, arena_fd, arena, arena_bytes, table_fd, table, table_bytes, alloc: Mutex::new(alloc) })
    }

    pub fn table(&self) -> &TableView {
        &self.table
    }

    /// The whole arena, for a replay in this process (the simulation's
    /// process crash; no thread writes it any more).
    #[cfg(any(test, feature = "sim"))]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the arena mapping, `arena_bytes` long, lives as long as
        // `self`; its writers stopped (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.arena.as_ptr(), self.arena_bytes as usize) }
    }

    pub fn table_fd(&self) -> RawFd {
        self.table_fd.as_raw_fd()
    }

    pub fn arena_fd(&self) -> RawFd {
        self.arena_fd.as_raw_fd()
    }

    /// A slot of `len` bytes (a power-of-two multiple of a block), its
    /// contents stale; `None` when the arena has no room left.
    pub fn allocate(&self, len: usize) -> Option<(Slot, NonNull<u8>)> {
        assert!(len >= BLOCK_BYTES && len.is_power_of_two(), "guarded buffers are power-of-two blocks");
        let slot = if len > CHUNK_BYTES { self.allocate_chunks(len / CHUNK_BYTES)? } else { self.allocate_slot(len)? };
        debug_assert!(self.table.desc(slot.first_block as u64).file.load(Ordering::Relaxed) == NO_FILE);
        // SAFETY: the slot lies inside the arena mapping.
        let ptr = unsafe { self.arena.add(slot.first_block as usize * BLOCK_BYTES) };
        Some((slot, ptr))
    }

    fn allocate_slot(&self, len: usize) -> Option<Slot> {
        let slot_blocks = (len / BLOCK_BYTES) as u32;
        let class = slot_blocks.trailing_zeros() as usize;
        let mut alloc = crate::base::locks::lock(&self.alloc);
        while let Some(&chunk) = alloc.partial[class].last() {
            let state = &mut alloc.chunks[chunk as usize];
            if let Some(index) = state.free.pop() {
                state.live += 1;
                if state.free.is_empty() {
                    alloc.partial[class].pop();
                }
                return Some(Slot {
                    first_block: chunk * CHUNK_BLOCKS as u32 + index as u32 * slot_blocks,
                    blocks: slot_blocks,
                });
            }
            alloc.partial[class].pop();
        }
        let (chunk, fault_in) = alloc.take_free_chunk()?;
        if alloc.wants_fill() {
            self.fill_wanted.notify_one();
        }
        if fault_in {
            self.populate(chunk as usize, 1);
        }
        let per_chunk = CHUNK_BLOCKS as u32 / slot_blocks;
        let state = &mut alloc.chunks[chunk as usize];
        state.slot_blocks = slot_blocks;
        state.live = 1;
        state.free = (1..per_chunk as u16).rev().collect();
        if !state.free.is_empty() {
            alloc.partial[class].push(chunk);
        }
        self.table.chunk_slot_blocks(chunk as u64).store(slot_blocks, Ordering::Relaxed);
        Some(Slot { first_block: chunk * CHUNK_BLOCKS as u32, blocks: slot_blocks })
    }

    fn allocate_chunks(&self, count: usize) -> Option<Slot> {
        let mut alloc = crate::base::locks::lock(&self.alloc);
        let free = |c: &ChunkState| c.slot_blocks == 0;
        let start = alloc.chunks.windows(count).position(|w| w.iter().all(free))?;
        let run = start as u32..(start + count) as u32;
        alloc.fresh.retain(|c| !run.contains(c));
        alloc.idle.retain(|c| !run.contains(c));
        let slot_blocks = (count * CHUNK_BLOCKS) as u32;
        for (i, c) in alloc.chunks[start..start + count].iter_mut().enumerate() {
            // Continuation chunks are marked taken with a slot length the
            // guardian never starts a slot at (it is not a chunk's class).
            c.slot_blocks = if i == 0 { slot_blocks } else { u32::MAX };
            c.live = 1;
        }
        self.table.chunk_slot_blocks(start as u64).store(slot_blocks, Ordering::Relaxed);
        Some(Slot { first_block: (start * CHUNK_BLOCKS) as u32, blocks: slot_blocks })
    }

    /// Starts the thread that keeps [`IDLE_CHUNKS_TARGET`] chunks faulted
    /// in; it ends within a tenth of a second of the arena's end. Without
    /// it (no thread to be had) writers fault chunks in themselves.
    pub fn start_filler(arena: &std::sync::Arc<Arena>) {
        let weak = std::sync::Arc::downgrade(arena);
        let _ = std::thread::Builder::new().name("wbc-guard-fill".into()).spawn(move || {
            while let Some(arena) = weak.upgrade() {
                arena.fill_once();
            }
        });
    }

    /// Waits (a tenth of a second at most) until a chunk is wanted, then
    /// populates one.
    fn fill_once(&self) {
        let alloc = crate::base::locks::lock(&self.alloc);
        let (mut alloc, _) = self
            .fill_wanted
            .wait_timeout_while(alloc, std::time::Duration::from_millis(100), |a| !a.wants_fill())
            .unwrap_or_else(|e| e.into_inner());
        if !alloc.wants_fill() {
            return;
        }
        let Some(chunk) = alloc.fresh.pop() else { return };
        // Taken while it fills: a large buffer's search for free chunks
        // must not find it.
        alloc.chunks[chunk as usize].slot_blocks = u32::MAX;
        drop(alloc);
        self.populate(chunk as usize, 1);
        let mut alloc = crate::base::locks::lock(&self.alloc);
        assert_eq!(alloc.chunks[chunk as usize].slot_blocks, u32::MAX, "a chunk being filled is nobody's");
        alloc.chunks[chunk as usize].slot_blocks = 0;
        alloc.idle.push(chunk);
    }

    /// Faults in `count` chunks from `chunk` in one call: cheaper than a
    /// fault per 4 KiB page inside the writes that touch them first.
    fn populate(&self, chunk: usize, count: usize) {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: whole chunks of the arena mapping; populating changes no
        // byte (the pages are fresh and read as zero either way).
        let _ = unsafe {
            crate::base::sys::advise(
                self.arena.as_ptr().add(chunk * CHUNK_BYTES).cast(),
                count * CHUNK_BYTES,
                MADV_POPULATE_WRITE,
            )
        };
    }

    /// Gives `slot` back: its record is forgotten first. A chunk left with
    /// no live slot becomes free (keeping its pages while few are kept,
    /// see [`IDLE_CHUNKS_MAX`]); a slot of a chunk still in use waits for
    /// the next batch of holes (see [`PUNCH_BATCH_BYTES`]).
    pub fn free(&self, slot: Slot) {
        self.forget(slot);
        let chunk = slot.first_block as usize / CHUNK_BLOCKS;
        let mut alloc = crate::base::locks::lock(&self.alloc);
        if slot.blocks as usize > CHUNK_BLOCKS {
            // Large buffers are rare (folio_max above 2 MiB): their chunks
            // go back at once.
            let count = slot.blocks as usize / CHUNK_BLOCKS;
            for c in chunk..chunk + count {
                alloc.chunks[c] = ChunkState::default();
                alloc.fresh.push(c as u32);
            }
            self.table.chunk_slot_blocks(chunk as u64).store(0, Ordering::Relaxed);
            self.punch(chunk * CHUNK_BLOCKS, count * CHUNK_BLOCKS);
            return;
        }
        let class = slot.blocks.trailing_zeros() as usize;
        let state = &mut alloc.chunks[chunk];
        assert_eq!(state.slot_blocks, slot.blocks, "a slot goes back to its chunk's class");
        state.live -= 1;
        if state.live > 0 {
            alloc.pending.push(slot);
            alloc.pending_bytes += slot.blocks as usize * BLOCK_BYTES;
            if alloc.pending_bytes >= PUNCH_BATCH_BYTES {
                self.punch_pending(&mut alloc);
            }
            return;
        }
        // The chunk's last slot: the chunk goes whole, with the slots of
        // it still waiting for their hole.
        alloc.partial[class].retain(|&c| c as usize != chunk);
        let before = alloc.pending.len();
        alloc.pending.retain(|s| s.first_block as usize / CHUNK_BLOCKS != chunk);
        let dropped = (before - alloc.pending.len()) * slot.blocks as usize * BLOCK_BYTES;
        alloc.pending_bytes -= dropped;
        self.table.chunk_slot_blocks(chunk as u64).store(0, Ordering::Relaxed);
        if alloc.give_back_chunk(chunk as u32) {
            self.punch(chunk * CHUNK_BLOCKS, CHUNK_BLOCKS);
        }
    }

    /// Gives the pending slots' pages back (coalesced runs, under the
    /// allocator's lock so no slot is reused before its hole is punched)
    /// and makes the slots free.
    fn punch_pending(&self, alloc: &mut SlotAlloc) {
        let mut slots = std::mem::take(&mut alloc.pending);
        alloc.pending_bytes = 0;
        slots.sort_unstable_by_key(|s| s.first_block);
        let mut run: Option<(usize, usize)> = None;
        for s in &slots {
            let (start, len) = (s.first_block as usize, s.blocks as usize);
            run = match run {
                Some((rs, rl)) if rs + rl == start => Some((rs, rl + len)),
                Some((rs, rl)) => {
                    self.punch(rs, rl);
                    Some((start, len))
                }
                None => Some((start, len)),
            };
        }
        if let Some((rs, rl)) = run {
            self.punch(rs, rl);
        }
        for s in slots {
            let chunk = s.first_block as usize / CHUNK_BLOCKS;
            let state = &mut alloc.chunks[chunk];
            debug_assert_eq!(state.slot_blocks, s.blocks, "a pending slot's chunk keeps its class");
            state.free.push(((s.first_block as usize % CHUNK_BLOCKS) / s.blocks as usize) as u16);
            if state.free.len() == 1 {
                alloc.partial[s.blocks.trailing_zeros() as usize].push(chunk as u32);
            }
        }
    }

    /// Punches a hole over `blocks` blocks of the arena from block `first`:
    /// their pages go back to the kernel (shared memory is not freed by
    /// `MADV_DONTNEED`; a hole is), and read as zeros.
    fn punch(&self, first: usize, blocks: usize) {
        let _ = crate::base::sys::fallocate(
            self.arena_fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            (first * BLOCK_BYTES) as i64,
            (blocks * BLOCK_BYTES) as i64,
        );
    }

    /// Records that `slot` holds the folio at `offset` of file `file`;
    /// returns whether that is news (the slot held nothing, or another
    /// folio): its dirty blocks are not recorded yet.
    pub fn record_owner(&self, slot: Slot, file: (u32, u32), offset: u64) -> bool {
        let desc = self.table.desc(slot.first_block as u64);
        let known = desc.file.load(Ordering::Relaxed) == file.0
            && desc.generation.load(Ordering::Relaxed) == file.1
            && desc.offset.load(Ordering::Relaxed) == offset;
        if !known {
            self.mark(slot, (0, slot.blocks as usize), BlockState::Clean);
            desc.offset.store(offset, Ordering::Relaxed);
            desc.generation.store(file.1, Ordering::Relaxed);
            desc.file.store(file.0, Ordering::Relaxed);
        }
        !known
    }

    /// Marks blocks `[first, last)` of `slot` as `state` says.
    pub fn mark(&self, slot: Slot, (first, last): (usize, usize), state: BlockState) {
        debug_assert!(first <= last && last <= slot.blocks as usize, "blocks of the slot");
        let dirty = u8::from(state == BlockState::Dirty);
        for b in first..last {
            self.table.dirty(slot.first_block as u64 + b as u64).store(dirty, Ordering::Relaxed);
        }
    }

    /// Moves `from`'s record (owner and dirty blocks) to `to`, which holds
    /// the same bytes from now on; `from` is left unrecorded (a writeback
    /// may still be writing from it, its bytes no longer the newest).
    pub fn move_record(&self, from: Slot, to: Slot) {
        assert_eq!(from.blocks, to.blocks, "a record moves between slots of one size");
        let (src, dst) = (self.table.desc(from.first_block as u64), self.table.desc(to.first_block as u64));
        dst.offset.store(src.offset.load(Ordering::Relaxed), Ordering::Relaxed);
        dst.generation.store(src.generation.load(Ordering::Relaxed), Ordering::Relaxed);
        for b in 0..from.blocks as u64 {
            let d = self.table.dirty(from.first_block as u64 + b).load(Ordering::Relaxed);
            self.table.dirty(to.first_block as u64 + b).store(d, Ordering::Relaxed);
        }
        dst.file.store(src.file.load(Ordering::Relaxed), Ordering::Relaxed);
        self.forget(from);
    }

    /// Forgets `slot`'s record: no owner, nothing dirty.
    pub fn forget(&self, slot: Slot) {
        self.table.desc(slot.first_block as u64).file.store(NO_FILE, Ordering::Relaxed);
        self.mark(slot, (0, slot.blocks as usize), BlockState::Clean);
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the two mappings made in `new`, of these lengths, unmapped
        // once; every buffer holds an `Arc` of the arena, so none is left.
        unsafe {
            let _ = crate::base::sys::unmap(self.arena.as_ptr().cast(), self.arena_bytes as usize);
            let _ = crate::base::sys::unmap(self.table.base.as_ptr().cast(), self.table_bytes as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_of_every_class_are_distinct_and_come_back() {
        let arena = Arena::new(16 << 20).unwrap();
        let mut slots = Vec::new();
        for class in 0..=10 {
            for _ in 0..3 {
                let (slot, ptr) = arena.allocate(BLOCK_BYTES << class).unwrap();
                // SAFETY: the slot is ours and `blocks` long.
                unsafe { ptr.as_ptr().write_bytes(class as u8, slot.blocks as usize * BLOCK_BYTES) };
                slots.push(slot);
            }
        }
        let mut ranges: Vec<(u32, u32)> = slots.iter().map(|s| (s.first_block, s.first_block + s.blocks)).collect();
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "slots never overlap: {ranges:?}");
        for s in slots {
            arena.free(s);
        }
        let alloc = arena.alloc.lock().unwrap();
        assert!(alloc.chunks.iter().all(|c| c.slot_blocks == 0 && c.live == 0), "every chunk is free again");
    }

    #[test]
    fn records_move_and_are_forgotten() {
        let arena = Arena::new(16 << 20).unwrap();
        let (a, _) = arena.allocate(4 * BLOCK_BYTES).unwrap();
        let (b, _) = arena.allocate(4 * BLOCK_BYTES).unwrap();
        arena.record_owner(a, (7, 3), 1 << 20);
        arena.mark(a, (1, 3), BlockState::Dirty);
        arena.move_record(a, b);
        let t = arena.table();
        assert_eq!(t.desc(a.first_block as u64).file.load(Ordering::Relaxed), NO_FILE);
        assert_eq!(t.desc(b.first_block as u64).file.load(Ordering::Relaxed), 7);
        assert_eq!(t.desc(b.first_block as u64).offset.load(Ordering::Relaxed), 1 << 20);
        let dirty: Vec<u8> = (0..4).map(|i| t.dirty(b.first_block as u64 + i).load(Ordering::Relaxed)).collect();
        assert_eq!(dirty, [0, 1, 1, 0]);
        assert!((0..4).all(|i| t.dirty(a.first_block as u64 + i).load(Ordering::Relaxed) == 0));
        arena.free(b);
        assert!((0..4).all(|i| t.dirty(b.first_block as u64 + i).load(Ordering::Relaxed) == 0));
        arena.free(a);
    }

    #[test]
    fn the_table_costs_under_one_percent_of_the_capacity() {
        // The names (256 bytes per file, 4 MiB for all the slots) take
        // memory only as files are opened, a page per 16 files, like the
        // inodes they name: they are counted with the files, not here.
        let names_bytes = FILE_SLOTS as u64 * (FILE_NAME_WORDS * 8) as u64;
        assert_eq!(FILE_NAME_WORDS * 8, 256);
        for capacity in [256u64 << 20, 1 << 30, 8 << 30] {
            let layout = table_layout((capacity + capacity / 2).next_multiple_of(CHUNK_BYTES as u64) + (32 << 20));
            let bytes = layout.table_bytes - names_bytes;
            assert!(bytes * 100 <= capacity, "{bytes} bytes of table for {capacity}");
        }
    }

    /// What another process's reader refuses: a memory object whose size
    /// is not sealed, and a sealed one whose header is not a table's (an
    /// arena too large to lay out, here). The cache's own table maps.
    #[test]
    fn a_reader_maps_only_a_sealed_table_of_this_layout() {
        // SAFETY: a valid name; a descriptor of our own comes back.
        let raw = unsafe { libc::memfd_create(c"wbcache-table".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create");
        // SAFETY: the descriptor just made, ours alone.
        let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
        crate::base::sys::ftruncate(unsealed.as_raw_fd(), 1 << 20).expect("a table's worth");
        let e = MappedTable::open(&unsealed).err().expect("refused");
        assert!(e.to_string().contains("sealed"), "{e}");
        let (forged, base) = map_memfd(c"wbcache-table", 1 << 20).expect("memfd");
        let mut header = table_layout(16 << 20);
        header.arena_bytes = ARENA_BYTES_MAX + CHUNK_BYTES as u64;
        // SAFETY: our own fresh mapping of 1 MiB, room for a header.
        unsafe { base.as_ptr().cast::<TableHeader>().write(header) };
        let e = MappedTable::open(&forged).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let arena = Arena::new(16 << 20).expect("arena");
        let own = crate::base::sys::dup_above_program_descriptors(arena.table_fd()).expect("dup");
        let mapped = MappedTable::open(&own).expect("the cache's own table maps");
        assert_eq!(mapped.view().header().arena_bytes, arena.table().header().arena_bytes);
    }

    #[test]
    fn a_file_name_is_kept_whole_or_by_its_tail() {
        let arena = Arena::new(16 << 20).expect("arena");
        let t = arena.table();
        t.set_file_name(3, b"/var/lib/db/000012.log");
        assert_eq!(t.file_name(3), b"/var/lib/db/000012.log");
        let long: Vec<u8> = (0..400).map(|i| b'a' + (i % 26) as u8).collect();
        t.set_file_name(4, &long);
        assert_eq!(t.file_name(4), &long[400 - FILE_NAME_BYTES..]);
        t.set_file_name(4, b"short");
        assert_eq!(t.file_name(4), b"short");
    }
}
