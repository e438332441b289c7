//! Replay: what the guardian does when the owner died without closing its
//! cache. From the crash table and the arena it gives each file the
//! length the cache would have left (see `replay_len`), then writes every
//! dirty block (clipped to the cache's size) at its file offset. The same function serves the guardian
//! process (writing through the kernel's page cache) and the simulation's
//! process-crash event (writing into the simulated store).
//!
//! Invariant: only records whose file slot is in use with the same
//! generation are replayed: a slot released and reused for another file
//! never receives an earlier file's blocks.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;

use super::arena::{TableView, BLOCK_BYTES, CHUNK_BYTES, NO_FILE, STATE_CLOSED};

/// Where replayed data goes.
pub trait ReplaySink {
    /// Whether the sink can write file slot `file` (the guardian holds a
    /// descriptor of it).
    fn has_file(&self, file: u32) -> bool;
    /// What reports call file slot `file` (its path where known).
    fn name(&self, file: u32) -> String;
    /// The file's length now (0 for one that cannot say, such as a block
    /// device, whose length never changes).
    fn len(&mut self, file: u32) -> io::Result<u64>;
    /// Sets file `file`'s length.
    fn set_len(&mut self, file: u32, len: u64) -> io::Result<()>;
    /// Writes `data` at `offset` of file `file`, whole.
    fn write(&mut self, file: u32, offset: u64, data: &[u8]) -> io::Result<()>;
}

/// What a replay did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Files with data or a length to replay.
    pub files: u64,
    pub bytes: u64,
    /// One line per failure, naming the file and offset.
    pub failures: Vec<String>,
}

/// A file in use in the table: its generation, size and padding flag.
#[derive(Clone, Copy)]
struct FileState {
    generation: u32,
    size: u64,
    padded: bool,
    cut_owed: bool,
    dirty: bool,
}

/// Replays every dirty block the table records, and the lengths that go
/// with them, unless the owner closed its cache (then there is nothing to
/// do). `arena` is the whole arena.
pub fn replay(table: &TableView, arena: &[u8], sink: &mut dyn ReplaySink) -> ReplayReport {
    let mut report = ReplayReport::default();
    // Relaxed and a fence: the guardian's mapping is read-only, where
    // atomics may only be loaded Relaxed.
    let state = table.header().state.load(Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Acquire);
    if state == STATE_CLOSED {
        return report;
    }
    let mut files = files_in_use(table, |file| sink.has_file(file));
    let slots = dirty_slots(table, &mut files);
    for (&file, state) in &files {
        replay_len(file, state, sink, &mut report);
    }
    for (first, blocks) in slots {
        replay_slot(table, arena, (first, blocks), &files, sink, &mut report);
    }
    report
}

/// The files in use in the table that `has_file` can write, by slot.
fn files_in_use(table: &TableView, has_file: impl Fn(u32) -> bool) -> HashMap<u32, FileState> {
    let mut files = HashMap::new();
    for file in 1..table.header().file_slots {
        let record = table.file(file);
        if record.used.load(Ordering::Relaxed) != 0 && has_file(file) {
            let state = FileState {
                generation: record.generation.load(Ordering::Relaxed),
                size: record.size.load(Ordering::Relaxed),
                padded: record.padded.load(Ordering::Relaxed) != 0,
                cut_owed: record.cut_owed.load(Ordering::Relaxed) != 0,
                dirty: false,
            };
            files.insert(file, state);
        }
    }
    files
}

/// The bytes [`replay`] would write into the files `has_file` can write:
/// its dirty runs, clipped to each file's size as it clips them.
pub fn bytes_to_replay(table: &TableView, has_file: impl Fn(u32) -> bool) -> u64 {
    let mut files = files_in_use(table, has_file);
    let slots = dirty_slots(table, &mut files);
    slots.into_iter().flat_map(|slot| dirty_runs(table, slot, &files)).map(|run| run.end - run.at).sum()
}

/// The slots holding dirty blocks of files in use (arena block, length),
/// marking those files dirty.
fn dirty_slots(table: &TableView, files: &mut HashMap<u32, FileState>) -> Vec<(u64, u64)> {
    let mut found = Vec::new();
    for_each_named_slot(table, |first, slot_blocks, file, generation| {
        let Some(state) = files.get_mut(&file) else { return };
        if generation != state.generation {
            return;
        }
        if (0..slot_blocks).any(|b| table.dirty(first + b).load(Ordering::Relaxed) != 0) {
            state.dirty = true;
            found.push((first, slot_blocks));
        }
    });
    found
}

/// Calls `visit(first block, blocks, file, generation)` for every slot
/// whose descriptor names a file slot of the table. A table read from
/// another process is trusted no further than its header: a slot is cut
/// to the arena's end, and a file beyond the table's slots is skipped.
fn for_each_named_slot(table: &TableView, mut visit: impl FnMut(u64, u64, u32, u32)) {
    let chunk_blocks = (CHUNK_BYTES / BLOCK_BYTES) as u64;
    let (blocks, file_slots) = (table.blocks(), table.header().file_slots);
    for chunk in 0..table.chunks() {
        let slot_blocks = table.chunk_slot_blocks(chunk).load(Ordering::Relaxed) as u64;
        if slot_blocks == 0 || slot_blocks == u32::MAX as u64 {
            continue;
        }
        let slots = if slot_blocks > chunk_blocks { 1 } else { chunk_blocks / slot_blocks };
        for s in 0..slots {
            let first = chunk * chunk_blocks + s * slot_blocks;
            let desc = table.desc(first);
            let file = desc.file.load(Ordering::Relaxed);
            if file != NO_FILE && file < file_slots {
                visit(first, slot_blocks.min(blocks - first), file, desc.generation.load(Ordering::Relaxed));
            }
        }
    }
}

/// A file's share of what the table records as held only in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unwritten {
    pub file: u32,
    /// The file slot's generation when it was counted (its name is read
    /// against it).
    pub generation: u32,
    pub bytes: u64,
}

/// Bytes the table records as held only in the cache (dirty, or under
/// writeback and not yet done), per file slot in use, largest first: what
/// a guardian would write now. Read while the owner runs (by `wbcache
/// stat`), it is a snapshot that writers move on from.
pub fn unwritten_bytes_by_file(table: &TableView) -> Vec<Unwritten> {
    let mut by_file: HashMap<u32, Unwritten> = HashMap::new();
    for_each_named_slot(table, |first, slot_blocks, file, generation| {
        let record = table.file(file);
        if record.used.load(Ordering::Relaxed) == 0 || record.generation.load(Ordering::Relaxed) != generation {
            return;
        }
        let dirty = (0..slot_blocks).filter(|b| table.dirty(first + b).load(Ordering::Relaxed) != 0).count();
        if dirty > 0 {
            by_file.entry(file).or_insert(Unwritten { file, generation, bytes: 0 }).bytes +=
                dirty as u64 * BLOCK_BYTES as u64;
        }
    });
    let mut files: Vec<Unwritten> = by_file.into_values().collect();
    files.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.file.cmp(&b.file)));
    files
}

/// A file's length, as the cache would have left it: grown to its size
/// when it holds dirty data past the store's end (acknowledged writes
/// extended it), cut back to its size when writeback padded the tail
/// block, or when a truncation was under way (it completes: a truncation
/// records its size before it drops anything). Anything else stays:
/// truncations and `set_len` reached the store when they returned, and
/// bytes past the size that the cache did not put there are another
/// program's (as the cache itself leaves them).
fn replay_len(file: u32, state: &FileState, sink: &mut dyn ReplaySink, report: &mut ReplayReport) {
    if !state.dirty && !state.padded && !state.cut_owed {
        return;
    }
    let len = match sink.len(file) {
        Ok(len) => len,
        Err(e) => {
            report.failures.push(format!("{}: reading the length: {e}", sink.name(file)));
            return;
        }
    };
    let size = state.size;
    let grow = state.dirty && len < size;
    let cut = len > size && (state.cut_owed || (state.padded && len <= size.next_multiple_of(BLOCK_BYTES as u64)));
    report.files += 1;
    if grow || cut {
        if let Err(e) = sink.set_len(file, size) {
            report.failures.push(format!("{}: setting the length to {size}: {e}", sink.name(file)));
        }
    }
}

/// Writes the dirty runs of the slot at arena block `first`, clipped to
/// its file's size.
fn replay_slot(
    table: &TableView,
    arena: &[u8],
    slot: (u64, u64),
    files: &HashMap<u32, FileState>,
    sink: &mut dyn ReplaySink,
    report: &mut ReplayReport,
) {
    for run in dirty_runs(table, slot, files) {
        let data = &arena[run.from..run.from + (run.end - run.at) as usize];
        match sink.write(run.file, run.at, data) {
            Ok(()) => report.bytes += data.len() as u64,
            Err(e) => report.failures.push(format!(
                "{}: writing {} bytes at offset {}: {e}",
                sink.name(run.file),
                data.len(),
                run.at
            )),
        }
    }
}

/// A run of dirty blocks to write: file bytes `[at, end)` from arena byte
/// `from`.
struct DirtyRun {
    file: u32,
    at: u64,
    end: u64,
    from: usize,
}

/// The dirty runs of the slot at arena block `first`, clipped to its
/// file's size (a run wholly past it is left out).
fn dirty_runs(table: &TableView, (first, blocks): (u64, u64), files: &HashMap<u32, FileState>) -> Vec<DirtyRun> {
    let desc = table.desc(first);
    let file = desc.file.load(Ordering::Relaxed);
    let Some(state) = files.get(&file) else { return Vec::new() };
    let offset = desc.offset.load(Ordering::Relaxed);
    let dirty = |b: u64| table.dirty(first + b).load(Ordering::Relaxed) != 0;
    let mut runs = Vec::new();
    let mut b = 0;
    while b < blocks {
        if !dirty(b) {
            b += 1;
            continue;
        }
        let run_start = b;
        while b < blocks && dirty(b) {
            b += 1;
        }
        let at = offset + run_start * BLOCK_BYTES as u64;
        let end = (offset + b * BLOCK_BYTES as u64).min(state.size);
        if end > at {
            runs.push(DirtyRun { file, at, end, from: ((first + run_start) * BLOCK_BYTES as u64) as usize });
        }
    }
    runs
}
