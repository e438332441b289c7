//! [`Readahead`]: on-demand readahead for one open handle, as a pure state
//! machine. A read that continues the previous one is sequential; the
//! first sequential miss reads a window synchronously, and when the reader
//! crosses the window's trigger point the next, doubled window (up to
//! `readahead_max`) is asked for asynchronously. A random read resets the
//! state and reads only what it needs. Blocks in, ranges out: the caller
//! does the I/O, and owns the state (one per handle).

/// Initial window: 128 KiB.
pub const INITIAL_WINDOW_BLOCKS: u64 = 32;

/// First window for a request of `[start, end)`: four requests, at least
/// the initial window.
fn initial_window(start: u64, end: u64) -> u64 {
    INITIAL_WINDOW_BLOCKS.max(4 * (end - start))
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readahead {
    /// Block after the previous read's last byte.
    prev_end_block: u64,
    /// The current window's end, 0 = no window.
    window_end_block: u64,
    window_blocks: u64,
    /// Crossing this block issues the next window.
    trigger_block: u64,
    /// Blocks the current sequential stream has advanced over (the read
    /// that began it included): how far a scan has gone.
    stream_blocks: u64,
}

/// A read that an idle state need not see ([`Readahead::idle_read_skipping`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleRead {
    /// A random read (not at block 0): the state would start a new stream
    /// with it; one that skips it starts the new stream at the next read
    /// it sees instead ([`Readahead::set_prev_end_block`]).
    Random,
    /// A read again of the block the previous read ended in, no further (a
    /// record read over and over): the state would not change at all.
    RereadOfLastBlock,
}

/// What to read: `sync` before copying, `async_` in the background.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub sync: Option<(u64, u64)>,
    pub async_: Option<(u64, u64)>,
}

impl Readahead {
    /// Called for every read of blocks `[start, end)`; `eof_block` is the
    /// file's size in blocks (rounded up) and `missing()` tells whether the
    /// first block is not cached (asked only when it matters, so cached
    /// random reads pay no lookup for it).
    pub fn on_read(
        &mut self,
        start: u64,
        end: u64,
        eof_block: u64,
        blocks_max: u64,
        missing: impl FnOnce() -> bool,
    ) -> Decision {
        let sequential = self.prev_end_block != 0 && start <= self.prev_end_block && start + 1 >= self.prev_end_block;
        let mut d = Decision::default();
        if !sequential {
            *self = Readahead { prev_end_block: end, stream_blocks: end - start, ..Readahead::default() };
            if start == 0 && missing() {
                // A read from the start of a file is likely a sequential scan.
                self.open_window(start, end, eof_block, initial_window(start, end).min(blocks_max), &mut d);
            }
            return d;
        }
        let reread = start < self.prev_end_block;
        // A re-read advances the stream only by what it reads past the
        // previous end.
        self.stream_blocks += end.saturating_sub(self.prev_end_block);
        self.prev_end_block = end;
        // A read that starts in the block the last one ended in (a record
        // read again, small reads inside one block) found it cached a
        // moment ago: no look at whether it is missing.
        if self.window_end_block <= start && !reread && missing() {
            let size = if self.window_blocks == 0 { initial_window(start, end) } else { 2 * self.window_blocks };
            self.open_window(start, end, eof_block, size.min(blocks_max), &mut d);
        } else if self.window_end_block > 0 && end > self.trigger_block && self.window_end_block < eof_block {
            let size = (2 * self.window_blocks).min(blocks_max).max(1);
            let from = self.window_end_block;
            let to = (from + size).min(eof_block);
            d.async_ = Some((from, to));
            self.window_blocks = size;
            // Entering the window just issued issues the next one, so a
            // reader that caught up with the device still has a whole window
            // in flight behind the one it waits for.
            self.trigger_block = from;
            self.window_end_block = to;
        }
        d
    }

    /// Whether a read of blocks `[start, end)`, after one that ended in
    /// block `prev_end_block`, may leave this state alone when no window is
    /// open ([`Readahead::is_idle`]): `Some` when [`Readahead::on_read`]
    /// would decide nothing and keep the window closed, so that a caller
    /// can skip the state (and its lock) on the read hit path.
    pub fn idle_read_skipping(prev_end_block: u64, start: u64, end: u64) -> Option<IdleRead> {
        debug_assert!(start < end, "a read of at least one block");
        let sequential = prev_end_block != 0 && start <= prev_end_block && start + 1 >= prev_end_block;
        if !sequential {
            // Block 0 may begin a scan.
            return (start != 0).then_some(IdleRead::Random);
        }
        (start + 1 == prev_end_block && end == prev_end_block).then_some(IdleRead::RereadOfLastBlock)
    }

    /// Whether no window is open: a read that is not sequential and not
    /// at block 0 leaves the state as it is then (but for where the read
    /// ended, which the caller may keep itself, see
    /// [`Readahead::set_prev_end_block`]).
    pub fn is_idle(&self) -> bool {
        self.window_end_block == 0 && self.window_blocks == 0 && self.trigger_block == 0
    }

    /// Blocks the current sequential stream has read, from the read that
    /// began it (re-reads count once).
    pub fn stream_blocks(&self) -> u64 {
        self.stream_blocks
    }

    /// Where the previous read ended, from the caller's own record: reads
    /// the caller decided without this state (random reads while idle)
    /// still count for the next one's sequential test.
    pub fn set_prev_end_block(&mut self, block: u64) {
        // A read this state did not see came in between: whatever follows
        // starts a new stream.
        if block != self.prev_end_block {
            self.stream_blocks = 0;
        }
        self.prev_end_block = block;
    }

    fn open_window(&mut self, start: u64, end: u64, eof_block: u64, size: u64, d: &mut Decision) {
        let to = (start + size.max(end - start)).min(eof_block).max(end.min(eof_block));
        if to > start {
            d.sync = Some((start, to));
        }
        self.window_blocks = size;
        self.window_end_block = to;
        self.trigger_block = start + (to - start) / 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every read that an idle state may skip, against what `on_read`
    /// does with it (blocks 0-9, streams of any length, first block cached
    /// or not): no decision and the window still closed; a re-read of the
    /// last block leaves the whole state as it was. And the reads it may
    /// not skip include every one that opens a window.
    #[test]
    fn reads_an_idle_state_may_skip_decide_nothing() {
        let (eof, max) = (1 << 20, 2048);
        let mut skipped = [0; 2];
        for prev_end_block in 0..10 {
            for (start, end) in (0..10).flat_map(|s| (s + 1..11).map(move |e| (s, e))) {
                for stream_blocks in [0, 1, 5, 100_000] {
                    for first_missing in [false, true] {
                        let idle = Readahead { prev_end_block, stream_blocks, ..Readahead::default() };
                        let mut ra = idle.clone();
                        let d = ra.on_read(start, end, eof, max, || first_missing);
                        let case = format!("prev {prev_end_block}, read [{start}, {end}), stream {stream_blocks}");
                        match Readahead::idle_read_skipping(prev_end_block, start, end) {
                            Some(kind) => {
                                assert_eq!(d, Decision::default(), "{case}");
                                assert!(ra.is_idle(), "{case}");
                                if kind == IdleRead::RereadOfLastBlock {
                                    assert_eq!(ra, idle, "{case}");
                                }
                                skipped[kind as usize] += 1;
                            }
                            None if d != Decision::default() => assert!(!ra.is_idle(), "{case}"),
                            None => {}
                        }
                    }
                }
            }
        }
        assert!(skipped.iter().all(|&n| n > 0), "both kinds met: {skipped:?}");
        assert_eq!(Readahead::idle_read_skipping(3, 2, 3), Some(IdleRead::RereadOfLastBlock));
        assert_eq!(Readahead::idle_read_skipping(3, 2, 4), None, "reads on past the last block");
        assert_eq!(Readahead::idle_read_skipping(3, 3, 4), None, "sequential");
        assert_eq!(Readahead::idle_read_skipping(3, 0, 1), None, "block 0");
        assert_eq!(Readahead::idle_read_skipping(3, 7, 8), Some(IdleRead::Random));
    }

    #[test]
    fn sequential_reads_grow_the_window_and_go_async() {
        let mut ra = Readahead::default();
        let eof = 1 << 20;
        let max = 2048;
        let d = ra.on_read(0, 256, eof, max, || true);
        assert_eq!(d.sync, Some((0, 1024)), "first window: 4x the request");
        assert_eq!(d.async_, None);
        let mut pos = 256;
        let mut async_windows = Vec::new();
        while pos < 20_000 {
            let d = ra.on_read(pos, pos + 256, eof, max, || false);
            assert_eq!(d.sync, None, "a reader ahead of it never waits at {pos}");
            if let Some(w) = d.async_ {
                async_windows.push(w);
            }
            pos += 256;
        }
        assert!(async_windows.len() >= 5);
        for pair in async_windows.windows(2) {
            assert_eq!(pair[0].1, pair[1].0, "windows are contiguous");
        }
        let sizes: Vec<u64> = async_windows.iter().map(|(a, b)| b - a).collect();
        assert!(sizes.windows(2).all(|s| s[1] >= s[0]), "windows grow: {sizes:?}");
        assert_eq!(*sizes.last().unwrap(), max, "capped at readahead_max");
    }

    #[test]
    fn random_reads_read_only_what_they_need() {
        let mut ra = Readahead::default();
        for start in [5000u64, 17, 90_000, 333] {
            let d = ra.on_read(start, start + 1, 1 << 20, 2048, || true);
            assert_eq!(d, Decision::default(), "random read at {start}");
        }
    }

    /// A read that starts in the block the previous one ended in (the same
    /// record again, small reads within a block) does not ask whether its
    /// first block is missing: it was read a moment ago.
    #[test]
    fn a_reread_of_the_last_block_asks_nothing() {
        let mut ra = Readahead::default();
        ra.on_read(0, 1, 1 << 20, 2048, || false);
        for _ in 0..3 {
            let d = ra.on_read(0, 1, 1 << 20, 2048, || panic!("asked whether block 0 is missing"));
            assert_eq!(d, Decision::default());
        }
        assert!(ra.is_idle(), "no window was opened");
        // The next block is asked about, and opens a window when missing.
        let d = ra.on_read(1, 2, 1 << 20, 2048, || true);
        assert!(d.sync.is_some() && !ra.is_idle());
    }

    /// The caller's record of where the last read ended (reads it decided
    /// without the state) counts for the sequential test.
    #[test]
    fn the_callers_record_of_the_last_read_counts() {
        let mut ra = Readahead::default();
        ra.on_read(5000, 5001, 1 << 20, 2048, || true);
        // Reads at 9000.. went by without the state (random, idle).
        ra.set_prev_end_block(9001);
        let d = ra.on_read(9001, 9002, 1 << 20, 2048, || true);
        assert!(d.sync.is_some(), "sequential after the caller's record: a window opens");
    }

    /// A stream counts the blocks it advanced over; re-reads count once, a
    /// random read begins a new stream.
    #[test]
    fn a_stream_counts_what_it_has_read() {
        let mut ra = Readahead::default();
        ra.on_read(0, 256, 1 << 20, 2048, || true);
        let mut pos = 256;
        while pos < 20_000 {
            ra.on_read(pos, pos + 256, 1 << 20, 2048, || false);
            pos += 256;
        }
        assert_eq!(ra.stream_blocks(), pos);
        ra.on_read(pos - 1, pos, 1 << 20, 2048, || false);
        ra.on_read(pos - 1, pos + 1, 1 << 20, 2048, || false);
        assert_eq!(ra.stream_blocks(), pos + 1, "a re-read counts what it reads past the end only");
        ra.on_read(90_000, 90_004, 1 << 20, 2048, || true);
        assert_eq!(ra.stream_blocks(), 4, "a random read begins a new stream");
        // Reads the caller decided without the state (random, idle) break
        // the stream, even when the next read continues the last of them.
        ra.set_prev_end_block(7001);
        ra.on_read(7001, 7002, 1 << 20, 2048, || false);
        assert_eq!(ra.stream_blocks(), 1, "a stream the caller's record broke starts again");
    }

    #[test]
    fn windows_stop_at_eof() {
        let mut ra = Readahead::default();
        let d = ra.on_read(0, 1, 10, 2048, || true);
        assert_eq!(d.sync, Some((0, 10)));
        let d = ra.on_read(1, 2, 10, 2048, || false);
        assert_eq!(d.async_, None);
    }
}
