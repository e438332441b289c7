//! On-demand readahead for one open handle, after the kernel's: a read that
//! continues the previous one is sequential; the first sequential miss reads
//! a window synchronously, and when the reader crosses the window's trigger
//! point the next, doubled window (up to `readahead_max`) is issued
//! asynchronously, so the device is busy ahead of the reader. A random read
//! resets the state and reads only what it needs.
//!
//! Pure state machine: blocks in, ranges out; the caller does the I/O.

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
        max_blocks: u64,
        missing: impl FnOnce() -> bool,
    ) -> Decision {
        let sequential = self.prev_end_block != 0 && start <= self.prev_end_block && start + 1 >= self.prev_end_block;
        let mut d = Decision::default();
        if !sequential {
            *self = Readahead { prev_end_block: end, ..Readahead::default() };
            if start == 0 && missing() {
                // A read from the start of a file is likely a sequential scan.
                self.open_window(start, end, eof_block, initial_window(start, end).min(max_blocks), &mut d);
            }
            return d;
        }
        self.prev_end_block = end;
        if self.window_end_block <= start && missing() {
            let size = if self.window_blocks == 0 { initial_window(start, end) } else { 2 * self.window_blocks };
            self.open_window(start, end, eof_block, size.min(max_blocks), &mut d);
        } else if self.window_end_block > 0 && end > self.trigger_block && self.window_end_block < eof_block {
            let size = (2 * self.window_blocks).min(max_blocks).max(1);
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

    #[test]
    fn windows_stop_at_eof() {
        let mut ra = Readahead::default();
        let d = ra.on_read(0, 1, 10, 2048, || true);
        assert_eq!(d.sync, Some((0, 10)));
        let d = ra.on_read(1, 2, 10, 2048, || false);
        assert_eq!(d.async_, None);
    }
}
