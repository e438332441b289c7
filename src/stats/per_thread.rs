//! A count kept per thread, for events on paths that must write nothing
//! shared: the read hit path, which a shared counter's atomic add would
//! make every reader on every core write (its line bouncing between them).
//!
//! Each thread adds to a cell of its own, on a cache line of its own, with
//! a plain load and store (one writer: nothing is lost); a snapshot sums
//! the cells. The count owns its cells; each thread keeps a short list of
//! the cells it writes (one per count it touched), found by the count's
//! id, and forgets the cells of counts that are gone.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::locks;

/// One thread's part of a count, alone on its cache line.
#[repr(align(64))]
#[derive(Default)]
struct Cell(AtomicU64);

/// Ids of counts, so a thread's list finds a count's cell.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The cells this thread writes: (count id, cell).
    static CELLS: RefCell<Vec<(u64, Arc<Cell>)>> = const { RefCell::new(Vec::new()) };
}

/// A count that threads add to without writing anything shared.
pub struct PerThreadCount {
    id: u64,
    cells: Mutex<Vec<Arc<Cell>>>,
    /// Where threads that have no list any more (exiting) add.
    shared: AtomicU64,
}

impl Default for PerThreadCount {
    fn default() -> PerThreadCount {
        PerThreadCount {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            cells: Mutex::new(Vec::new()),
            shared: AtomicU64::new(0),
        }
    }
}

impl PerThreadCount {
    /// Adds one for the calling thread.
    #[inline]
    pub fn add_one(&self) {
        let added = CELLS.try_with(|cells| {
            let mut cells = cells.borrow_mut();
            let cell = match cells.iter().position(|(id, _)| *id == self.id) {
                Some(at) => &*cells[at].1,
                None => self.register(&mut cells),
            };
            let n = cell.0.load(Ordering::Relaxed);
            cell.0.store(n + 1, Ordering::Relaxed);
        });
        if added.is_err() {
            self.shared.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives the calling thread a cell of this count, and drops from its
    /// list the cells of counts that are gone (only the list holds them).
    #[cold]
    fn register<'a>(&self, cells: &'a mut Vec<(u64, Arc<Cell>)>) -> &'a Cell {
        cells.retain(|(_, cell)| Arc::strong_count(cell) > 1);
        let cell = Arc::new(Cell::default());
        locks::lock(&self.cells).push(cell.clone());
        cells.push((self.id, cell));
        &cells.last().expect("just pushed").1
    }

    /// The count: every thread's part.
    pub fn sum(&self) -> u64 {
        let cells: u64 = locks::lock(&self.cells).iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
        cells + self.shared.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds from several threads, two counts at once, sum exactly; a
    /// dropped count's cells leave the threads' lists.
    #[test]
    fn threads_add_and_the_sum_is_exact() {
        let (a, b) = (Arc::new(PerThreadCount::default()), Arc::new(PerThreadCount::default()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (a, b) = (a.clone(), b.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        a.add_one();
                    }
                    b.add_one();
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!((a.sum(), b.sum()), (40_000, 4));
        a.add_one();
        drop(a);
        let c = PerThreadCount::default();
        c.add_one();
        let listed = CELLS.with(|cells| cells.borrow().iter().map(|(id, _)| *id).collect::<Vec<_>>());
        assert_eq!(listed, [c.id], "the dropped count's cell left this thread's list");
        assert_eq!(c.sum(), 1);
    }
}
