//! Routing: which writeback worker of a domain writes which dirty data, as
//! pure functions of the configuration (`writeback_routing`,
//! `writeback_workers`, `region_size`).
//!
//! - `single`: one worker writes everything.
//! - `rotor`: each inode is bound to one worker, dealt round-robin when it
//!   first needs one, and that worker writes all of it.
//! - `region`: each backing store's offset space is cut into regions of
//!   `region_size` bytes (the analogue of a file system's allocation
//!   groups), dealt to the workers in turn, each store's from a different
//!   worker (region `r` of the store of inode `i` to worker
//!   `(i + r) mod workers`), so small files spread over the workers as
//!   files in different allocation groups do, and a large file or a device
//!   is split between them; a worker writes only its regions' blocks, so
//!   one inode's dirty data can be written by several workers at once.
//!
//! Invariants: every block has exactly one worker (for `rotor`, the one its
//! inode is bound to); a pass of a worker covers only its blocks, in one
//! sweep from its cursor. No two workers ever write one block at once
//! anyway: a block under writeback is not taken again until that I/O ends,
//! whoever took it.

use std::ops::Range;

use crate::config::{Config, Routing};
use crate::io::BLOCK_SIZE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub routing: Routing,
    pub nr_workers: usize,
    /// log2 of the region size in blocks.
    region_shift_blocks: u32,
}

impl Route {
    pub fn new(config: &Config) -> Route {
        let nr_workers =
            if config.writeback_routing == Routing::Single { 1 } else { config.writeback_workers as usize };
        debug_assert!(nr_workers >= 1 && nr_workers <= crate::config::MAX_WRITEBACK_WORKERS as usize);
        debug_assert!(config.region_size_bytes.is_power_of_two() && config.region_size_bytes >= BLOCK_SIZE as u64);
        let region_shift_blocks = (config.region_size_bytes / BLOCK_SIZE as u64).trailing_zeros();
        Route { routing: config.writeback_routing, nr_workers, region_shift_blocks }
    }

    pub fn region_of_block(&self, block: u64) -> u64 {
        block >> self.region_shift_blocks
    }

    /// The worker of region `region` of the store of inode `inode_id`.
    pub fn worker_of_region(&self, inode_id: u64, region: u64) -> usize {
        (inode_id.wrapping_add(region) % self.nr_workers as u64) as usize
    }

    /// The blocks of `region`.
    pub fn region_blocks(&self, region: u64) -> Range<u64> {
        let start = region << self.region_shift_blocks;
        start..start.saturating_add(1 << self.region_shift_blocks)
    }

    /// The workers (a bit mask) whose regions hold `regions` of inode
    /// `inode_id`'s store.
    pub fn workers_of_regions(&self, inode_id: u64, regions: impl Iterator<Item = u64>) -> u64 {
        let all = all_workers(self.nr_workers);
        let mut mask = 0u64;
        for r in regions {
            mask |= 1 << self.worker_of_region(inode_id, r);
            if mask == all {
                break;
            }
        }
        mask
    }

    /// The block ranges a pass of `worker` over inode `inode_id` sweeps, in order: from `cursor`
    /// to the end, then from the start up to `cursor`. Under `region`
    /// routing only the worker's regions among `dirty_regions` (sorted,
    /// ascending), the one holding `cursor` split in two; otherwise every
    /// block. Ranges are disjoint and non-empty.
    pub fn pass_ranges(
        &self,
        inode_id: u64,
        worker: usize,
        cursor: u64,
        dirty_regions: impl Iterator<Item = u64>,
    ) -> Vec<Range<u64>> {
        debug_assert!(worker < self.nr_workers, "worker {worker} of {}", self.nr_workers);
        let whole = std::iter::once(0..u64::MAX);
        let owned: Vec<Range<u64>> = if self.routing == Routing::Region {
            dirty_regions
                .filter(|&r| self.worker_of_region(inode_id, r) == worker)
                .map(|r| self.region_blocks(r))
                .collect()
        } else {
            whole.collect()
        };
        debug_assert!(owned.windows(2).all(|w| w[0].end <= w[1].start), "regions come sorted");
        let mut after: Vec<Range<u64>> = Vec::with_capacity(owned.len() + 1);
        let mut before: Vec<Range<u64>> = Vec::new();
        for r in owned {
            if r.end <= cursor {
                before.push(r);
            } else if r.start >= cursor {
                after.push(r);
            } else {
                after.push(cursor..r.end);
                before.push(r.start..cursor);
            }
        }
        after.extend(before);
        debug_assert!(after.iter().all(|r| r.start < r.end), "no empty range");
        after
    }
}

/// The mask of workers `0..nr_workers`.
pub fn all_workers(nr_workers: usize) -> u64 {
    debug_assert!((1..=64).contains(&nr_workers));
    if nr_workers == 64 {
        u64::MAX
    } else {
        (1u64 << nr_workers) - 1
    }
}

/// The workers in a mask, lowest first.
pub fn workers_in(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |w| mask & (1 << w) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(routing: &str, workers: u32, region_size: &str) -> Route {
        let opts = format!("writeback_routing={routing},writeback_workers={workers},region_size={region_size}");
        Route::new(&Config::from_options(&opts).unwrap())
    }

    /// Regions are dealt in turn; 4 MiB regions are 1024 blocks.
    #[test]
    fn regions_are_dealt_to_workers_in_turn() {
        let r = route("region", 3, "4M");
        assert_eq!((r.region_of_block(1023), r.region_of_block(1024)), (0, 1));
        assert_eq!((0..7).map(|g| r.worker_of_region(0, g)).collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2, 0]);
        assert_eq!((0..4).map(|g| r.worker_of_region(1, g)).collect::<Vec<_>>(), vec![1, 2, 0, 1], "from another");
        // Small files, each in its region 0, spread like files in
        // different allocation groups.
        assert_eq!((0..4).map(|i| r.worker_of_region(i, 0)).collect::<Vec<_>>(), vec![0, 1, 2, 0]);
        assert_eq!(r.region_blocks(2), 2048..3072);
        assert_eq!(r.workers_of_regions(0, [0, 3, 6].into_iter()), 0b001);
        assert_eq!(r.workers_of_regions(0, [1, 5].into_iter()), 0b110);
        assert_eq!(r.workers_of_regions(2, [1, 5].into_iter()), 0b011);
    }

    /// A pass sweeps from the cursor, wraps, and under region routing
    /// visits only its own dirty regions, splitting the cursor's.
    #[test]
    fn pass_ranges_sweep_from_the_cursor() {
        let single = route("single", 1, "64M");
        assert_eq!(single.nr_workers, 1);
        assert_eq!(single.pass_ranges(7, 0, 0, [5, 9].into_iter()), vec![0..u64::MAX]);
        assert_eq!(single.pass_ranges(7, 0, 100, std::iter::empty()), vec![100..u64::MAX, 0..100]);
        let r = route("region", 2, "4M"); // 1024 blocks per region
        let dirty = || [0u64, 1, 2, 4, 7].into_iter();
        assert_eq!(r.pass_ranges(0, 0, 0, dirty()), vec![0..1024, 2048..3072, 4096..5120]);
        assert_eq!(r.pass_ranges(0, 1, 0, dirty()), vec![1024..2048, 7168..8192]);
        assert_eq!(r.pass_ranges(0, 0, 2500, dirty()), vec![2500..3072, 4096..5120, 0..1024, 2048..2500]);
        assert_eq!(r.pass_ranges(0, 1, 9000, dirty()), vec![1024..2048, 7168..8192]);
        assert_eq!(r.pass_ranges(1, 0, 0, dirty()), vec![1024..2048, 7168..8192], "another inode's regions");
        assert!(r.pass_ranges(0, 1, 0, [0u64, 2].into_iter()).is_empty(), "nothing of worker 1 is dirty");
    }

    #[test]
    fn worker_masks() {
        assert_eq!(all_workers(1), 1);
        assert_eq!(all_workers(4), 0b1111);
        assert_eq!(all_workers(64), u64::MAX);
        assert_eq!(workers_in(0b1010).collect::<Vec<_>>(), vec![1, 3]);
    }
}
