//! Room under the dirty limit: what a writer takes before dirtying blocks
//! ([`DirtyRoom`]) and what a writeback pass takes for the clean blocks it
//! bridges, both counted in `CacheDirty::unclean_bytes` from the moment
//! they are taken.
//!
//! Invariants: room is taken with one compare-and-swap against the limit,
//! so it never passes it: a writer that found room keeps it until it
//! dirtied its blocks, and nobody (another writer, a bridge) can take it
//! meanwhile. A room's bytes leave `unclean_bytes` only as the writer's
//! blocks become dirty (counted there instead, by
//! [`DomainDirty::account_dirty_bytes`]) or when it drops; a bridge's when
//! its I/Os end, except the blocks a failed bridge made dirty.
//!
//! A [`DirtyRoom`] is owned by the writer that took it and borrows its
//! domain's [`DomainDirty`]; it is defined with the gauges (in the
//! parent), which consume it. Bridges have no guard: the pass that
//! reserved them gives them back ([`DomainDirty::end_bridges`]).

use std::sync::atomic::Ordering;

use super::{DirtyRoom, DomainDirty};
use crate::io::BLOCK_SIZE;

impl DomainDirty {
    /// Adds `bytes` to `unclean_bytes` if the sum stays at or under
    /// `limit` (one compare-and-swap, so concurrent takers never pass it
    /// together). Returns whether it did.
    fn try_add_unclean(&self, bytes: u64, limit: u64) -> bool {
        let unclean = &self.cache.unclean_bytes;
        let mut now = unclean.load(Ordering::Acquire);
        loop {
            let Some(after) = now.checked_add(bytes).filter(|&after| after <= limit) else { return false };
            match unclean.compare_exchange_weak(now, after, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    self.cache.counters.peak_dirty_writeback_bytes.fetch_max(after, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => now = seen,
            }
        }
    }

    /// Takes `bytes` of room under `limit` for a writer about to dirty
    /// blocks, if there is that much. `bytes` may be 0 (a writer that
    /// dirties nothing new, or a closed cache's, which fails further on).
    pub fn try_take_room(&self, bytes: u64, limit: u64) -> Option<DirtyRoom<'_>> {
        debug_assert!(bytes % BLOCK_SIZE as u64 == 0, "room is whole blocks, not {bytes} bytes");
        // Built only once taken: a dropped room gives its bytes back.
        self.try_add_unclean(bytes, limit).then(|| DirtyRoom { domain: self, bytes })
    }

    /// Room that holds nothing: every byte dirtied with it is added to
    /// `unclean_bytes` on its own (a closing cache; the tests).
    pub fn no_room(&self) -> DirtyRoom<'_> {
        DirtyRoom { domain: self, bytes: 0 }
    }

    /// A writeback pass wants to write `bytes` of clean cached blocks to
    /// join two dirty runs into one I/O. If that I/O fails they become
    /// dirty, so the room is taken now, and only if it fits under `limit`:
    /// otherwise the pass writes the runs as separate I/Os. Returns whether
    /// the room was taken.
    pub fn try_reserve_bridge(&self, bytes: u64, limit: u64) -> bool {
        debug_assert!(bytes > 0 && bytes % BLOCK_SIZE as u64 == 0, "bridges are whole blocks, not {bytes} bytes");
        self.try_add_unclean(bytes, limit)
    }

    /// The bridged I/Os of a pass ended: `redirtied_bytes` of the
    /// `reserved_bytes` taken by [`DomainDirty::try_reserve_bridge`] failed
    /// and were made dirty ([`DomainDirty::account_bridge_redirtied`]); the
    /// rest of the room is given back.
    pub fn end_bridges(&self, reserved_bytes: u64, redirtied_bytes: u64) {
        debug_assert!(redirtied_bytes <= reserved_bytes, "only bridged blocks are redirtied as bridges");
        debug_assert!(redirtied_bytes % BLOCK_SIZE as u64 == 0);
        let released = reserved_bytes - redirtied_bytes;
        if released > 0 {
            let before = self.cache.unclean_bytes.fetch_sub(released, Ordering::SeqCst);
            debug_assert!(before >= released, "unclean underflow");
            self.cache.progress.made();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::domain;
    use super::*;

    /// Room is taken whole or not at all, never past the limit; dirtying
    /// inside it adds nothing, dirtying past it adds the excess, and what is
    /// left goes back when it drops. A bridge competes for the same room.
    #[test]
    fn room_is_held_until_dirtied_or_given_back() {
        let d = domain();
        let unclean = || d.cache.unclean_bytes.load(Ordering::Relaxed);
        let mut room = d.try_take_room(8 << 10, 12 << 10).expect("8K fits under 12K");
        assert_eq!(unclean(), 8 << 10, "counted from the start");
        assert!(d.try_take_room(8 << 10, 12 << 10).is_none(), "8K more would pass the limit");
        assert!(!d.try_reserve_bridge(8 << 10, 12 << 10), "so would a bridge");
        assert!(d.try_reserve_bridge(4 << 10, 12 << 10), "a bridge of what is left fits");
        d.end_bridges(4 << 10, 0);
        d.account_dirty_bytes(4 << 10, 0, &mut room);
        assert_eq!((unclean(), room.bytes()), (8 << 10, 4 << 10), "dirtied inside the room: nothing added");
        d.account_dirty_bytes(8 << 10, 0, &mut room);
        assert_eq!((unclean(), room.bytes()), (12 << 10, 0), "4K from the room, 4K beyond it");
        drop(room);
        assert_eq!(unclean(), 12 << 10, "an empty room gives nothing back");
        assert!(d.try_take_room(0, 12 << 10).is_some(), "no room needed, even at the limit");
        d.account_discarded(12 << 10, 0);
        let room = d.try_take_room(12 << 10, 12 << 10).expect("all of it");
        drop(room);
        assert_eq!(unclean(), 0, "an unused room goes back whole");
        assert_eq!(d.cache.counters.peak_dirty_writeback_bytes.load(Ordering::Relaxed), 12 << 10, "never past 12K");
    }
}
