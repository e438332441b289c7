//! The folio index: an inode's folios by block number, as a radix tree of
//! 64-slot nodes (the shape of the kernel's xarray), so that finding the
//! folio that covers a block is a fixed walk of one or two loads per level
//! with no key comparisons. A `BTreeMap` keyed by folio index cost a cached
//! random 4 KiB read about 20 ns more than this on the project's machine:
//! its search through sorted keys mispredicts a branch per level on random
//! blocks, where this walk computes each slot from the block number.
//!
//! Shape: a node at level `l` has 64 slots of `64^l` blocks each; a tree
//! whose root is at level `h - 1` covers blocks `[0, 64^h)`. A folio of
//! order `o` lives at level `o / 6`, in the `2^(o mod 6)` consecutive
//! slots its blocks span: the first holds the folio (the index's one
//! reference to it, which drop-behind's count of holders relies on), the
//! others point back to that first slot. A lookup stops at the first slot
//! holding a folio or a pointer back. The tree grows a root when a folio
//! lies beyond it, drops nodes as they empty, and drops its root while all
//! the root holds is a node in its first slot.
//!
//! Nodes come in two shapes, so that folios scattered over a large file
//! (random 4 KiB I/O on a database or a device) do not cost a 0.5 KiB node
//! per level each: a *dense* node is an array of 64 slots (one load finds
//! a slot); a *sparse* one, for up to [`SPARSE_SLOTS_MAX`] slots in use,
//! keeps a bitmap of its used slots and only those, in order (a second
//! load and a popcount find one). A node turns dense when it would pass
//! that many and sparse again when it falls to half of it; the root is
//! always dense. The index's nodes are counted in the cache's
//! `metadata_bytes`.
//!
//! Lock-free lookups: every slot is one word (a tagged pointer), read and
//! written atomically, and a node's level is in the node, so a reader
//! inside a read section ([`crate::base::epoch`]) can walk the tree with no lock
//! while a writer changes it ([`FolioIndex::find_lockless`]). Writers keep
//! every word a reader can load meaningful: a dense node's slots change in
//! place, one word at a time; a sparse node's set of used slots never
//! changes once published (a slot taken or put builds a new node, which
//! replaces the old one in its parent's word); what a change unlinks (a
//! node, the index's reference to a folio) is released through
//! [`crate::base::epoch::defer`], never at once. A reader may see a tree between
//! two such stores: a sibling whose folio is gone, a folio that is leaving.
//! It then finds nothing (and takes the locked path) or a folio whose own
//! state says whether it may be read.
//!
//! Invariants (checked by `check` in the tests, and by assertions around
//! each change): folios do not overlap; a folio's first slot holds it, the
//! other slots it spans point back to that one, and no other slot refers
//! to it; a node's level is its parent's minus one; a node's count of used
//! slots is right, a sparse node's slots match its bitmap and are never
//! empty, and no node but a root during an insert is empty; `len` counts
//! folios; `node_bytes` sums the nodes.
//!
//! Owned by its mapping, behind the mapping's index lock: locked lookups
//! under the read lock, changes under the write lock; lock-free lookups
//! through the root word the mapping shares.

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::base::epoch;
use crate::mapping::folio::Folio;
use crate::stats::Counters;

mod node;

use node::{
    decode, defer_release, folio_word, is_node, node_at, put, release_tree, replace, sibling_word, take, Node,
    NodeRole, Owned, Slot, Unlinked, SLOTS, SLOT_BITS, SPARSE_SLOTS_MAX, TAG_BITS, TAG_FOLIO,
};
#[cfg(test)]
use node::{Dense, Sparse};

/// The tallest tree: 9 levels cover 2^54 blocks, past the last block of
/// the largest file (2^64 bytes is 2^52 blocks), and keep every shift and
/// every slot's first block within a `u64`.
const HEIGHT_MAX: u32 = 9;

/// The slot of `block` in a node at `level`.
fn slot_of(block: u64, level: u32) -> usize {
    ((block >> (SLOT_BITS * level)) as usize) & (SLOTS - 1)
}

/// The level a folio of `order` lives at.
fn level_of(order: u8) -> u32 {
    u32::from(order) / SLOT_BITS
}

/// How many slots of its level a folio of `order` spans.
fn slots_spanned(order: u8) -> usize {
    1 << (u32::from(order) % SLOT_BITS)
}

/// The folio covering `block` in the tree whose root word is `root`.
///
/// # Safety
/// As [`decode`]. Under the index's lock the walk sees a consistent tree;
/// in a read section it may see one between two of a writer's stores,
/// and then finds nothing or a folio that does not cover `block`.
#[inline]
unsafe fn find_from<'a>(root: usize, block: u64) -> Option<&'a Folio> {
    if root == 0 {
        return None;
    }
    // SAFETY: the caller's contract is `decode`'s: `root` was loaded from
    // the root word under the index's lock or in a read section, so its
    // node stays allocated for `'a`.
    let mut node = unsafe { node_at(root) };
    if block >> (SLOT_BITS * (node.level() + 1)) != 0 {
        return None;
    }
    loop {
        // SAFETY: a slot of a node reached from `root`, loaded under the
        // caller's contract (the index's lock or a read section), so what
        // its word points to stays allocated for `'a`.
        let mut slot = unsafe { decode(node.load(slot_of(block, node.level()))) };
        if let Slot::Sibling(first) = slot {
            // SAFETY: `first` is a slot of the same node, loaded under the
            // caller's contract (the index's lock or a read section), so what
            // its word points to stays allocated for `'a`.
            slot = unsafe { decode(node.load(first)) };
        }
        match slot {
            Slot::Empty | Slot::Sibling(_) => return None,
            Slot::Folio(f) => return Some(f),
            Slot::Node(child) if child.level() + 1 == node.level() => node = child,
            Slot::Node(_) => return None,
        }
    }
}

/// A folio of the index, borrowed from it under its lock.
#[derive(Clone, Copy)]
pub struct FolioRef<'a>(&'a Folio);

impl std::ops::Deref for FolioRef<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.0
    }
}

impl FolioRef<'_> {
    /// A reference of the caller's own to the folio.
    pub fn to_arc(self) -> Arc<Folio> {
        let ptr: *const Folio = self.0;
        // SAFETY: the folio is in the index, which holds a reference made
        // by `Arc::into_raw`, for as long as this borrow lasts.
        unsafe {
            Arc::increment_strong_count(ptr);
            Arc::from_raw(ptr)
        }
    }

    /// Whether this is `folio` itself.
    pub fn is(self, folio: &Folio) -> bool {
        std::ptr::eq(self.0, folio)
    }
}

/// Folio index → folio; see the module docs.
#[derive(Default)]
pub struct FolioIndex {
    /// The root node's word (dense); 0 when nothing is indexed. Shared
    /// with the mapping for lock-free lookups.
    root: Arc<AtomicUsize>,
    /// The root's level + 1; 0 when there is no root.
    height: u32,
    len: usize,
    /// Bytes of the nodes.
    node_bytes: usize,
    /// Where the nodes' bytes are counted (`metadata_bytes`), if anywhere.
    counters: Option<Arc<Counters>>,
}

impl FolioIndex {
    /// An empty index whose nodes count in nobody's metadata (tests).
    #[cfg(test)]
    pub fn new() -> FolioIndex {
        FolioIndex::default()
    }

    /// An empty index whose nodes count in `counters.metadata_bytes`.
    pub fn counted_in(counters: Option<Arc<Counters>>) -> FolioIndex {
        FolioIndex { root: Arc::default(), height: 0, len: 0, node_bytes: 0, counters }
    }

    /// The root word, for lock-free lookups ([`FolioIndex::find_lockless`]).
    pub fn root_word(&self) -> Arc<AtomicUsize> {
        self.root.clone()
    }

    /// Folios indexed (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the tree's blocks `[0, 64^height)` include `block`.
    fn covers(&self, block: u64) -> bool {
        self.height > 0 && block >> (SLOT_BITS * self.height) == 0
    }

    fn root_node(&self) -> Option<Node<'_>> {
        let word = self.root.load(Ordering::Acquire);
        // SAFETY: `&self` is the index under its lock.
        (word != 0).then(|| unsafe { node_at(word) })
    }

    /// The folio covering `block`, if cached.
    #[inline]
    pub fn find(&self, block: u64) -> Option<FolioRef<'_>> {
        // SAFETY: `&self` is the index under its lock: nothing changes.
        let found = unsafe { find_from(self.root.load(Ordering::Acquire), block) };
        debug_assert!(found.is_none_or(|f| f.index <= block && block < f.end_index()), "covers block {block}");
        found.map(FolioRef)
    }

    /// The folio covering `block` in the index whose root word is `root`
    /// (see [`FolioIndex::root_word`]), without its lock: a folio that
    /// covers the block and was in the index during the call, or `None`
    /// (none, or the walk met a change under way: look again under the
    /// lock). The folio stays allocated while `section` lasts.
    #[inline]
    pub fn find_lockless<'a>(root: &'a AtomicUsize, _section: &'a epoch::ReadSection, block: u64) -> Option<&'a Folio> {
        // SAFETY: inside a read section: what writers unlink is released
        // only after it ends.
        let found = unsafe { find_from(root.load(Ordering::Acquire), block) }?;
        (found.index <= block && block < found.end_index()).then_some(found)
    }

    /// The folio whose first block is `index`, if cached.
    pub fn get(&self, index: u64) -> Option<FolioRef<'_>> {
        self.find(index).filter(|f| f.index == index)
    }

    /// The first folio (in block order) whose first block is at or after
    /// `block`.
    pub fn first_from(&self, block: u64) -> Option<FolioRef<'_>> {
        let root = self.root_node()?;
        if !self.covers(block) {
            return None;
        }
        let found = Self::first_in(root, 0, block);
        debug_assert!(found.is_none_or(|f| f.index >= block));
        found.map(FolioRef)
    }

    /// `first_from` within `node` (its first block `base`); `from` is
    /// below the node's end.
    fn first_in(node: Node<'_>, base: u64, from: u64) -> Option<&Folio> {
        let shift = SLOT_BITS * node.level();
        let start = if from <= base { 0 } else { ((from - base) >> shift) as usize };
        for (i, word) in node.entries_from(start) {
            // SAFETY: the index's lock is held (callers take `&self`).
            match unsafe { decode(word) } {
                // A sibling's folio starts before it, so before `from`
                // (or it was met at its first slot).
                Slot::Empty | Slot::Sibling(_) => {}
                Slot::Folio(f) if f.index >= from => return Some(f),
                // A folio starting before `from` that spans it.
                Slot::Folio(_) => {}
                Slot::Node(child) => {
                    if let Some(f) = Self::first_in(child, base + ((i as u64) << shift), from) {
                        return Some(f);
                    }
                }
            }
        }
        None
    }

    /// The folios whose first block lies in `blocks`, in block order.
    pub fn range(&self, blocks: impl RangeBounds<u64>) -> Folios<'_> {
        let next = match blocks.start_bound() {
            Bound::Included(&b) => b,
            Bound::Excluded(&b) => b.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match blocks.end_bound() {
            Bound::Included(&b) => b.saturating_add(1),
            Bound::Excluded(&b) => b,
            Bound::Unbounded => u64::MAX,
        };
        Folios { index: self, next, end }
    }

    /// Every folio, in block order.
    pub fn values(&self) -> Folios<'_> {
        self.range(..)
    }

    /// Adds `folio`, which overlaps no cached folio (panics if it does,
    /// before changing anything).
    pub fn insert(&mut self, folio: Arc<Folio>) {
        let level = level_of(folio.order);
        let last_block = folio.end_index() - 1;
        // A single block overlaps only a folio that covers it; the forward
        // walk, which crosses empty subtrees of a sparse index (random 4 KiB
        // reads at 1G: 2% of a read miss), is for larger folios.
        let overlaps = self.find(folio.index).is_some()
            || (last_block > folio.index && self.first_from(folio.index).is_some_and(|f| f.index <= last_block));
        assert!(!overlaps, "folio at {} overlaps a cached one", folio.index);
        let len_before = self.len;
        while self.height <= level || !self.covers(last_block) {
            self.grow();
        }
        let (index, order, ptr) = (folio.index, folio.order, Arc::as_ptr(&folio));
        let (parent, mut grown) = Self::descend_creating(&self.root, index, level);
        let first = slot_of(index, level);
        // Siblings first, then the folio itself (the index's reference): a
        // reader that meets a sibling before its folio finds nothing.
        for i in first + 1..first + slots_spanned(order) {
            grown += put(parent, i, sibling_word(first));
        }
        grown += put(parent, first, folio_word(folio));
        self.len += 1;
        self.account(grown);
        debug_assert!(self.get(index).is_some_and(|f| std::ptr::eq(&*f, ptr)), "folio {index} indexed");
        debug_assert!(self.find(last_block).is_some_and(|f| std::ptr::eq(&*f, ptr)));
        debug_assert_eq!(self.len, len_before + 1);
    }

    /// Walks from the root word towards the node at `level` that covers
    /// `index`, creating the nodes missing on the way; returns the word
    /// pointing to that node and the bytes of the nodes made.
    fn descend_creating(root: &AtomicUsize, index: u64, level: u32) -> (&AtomicUsize, isize) {
        let mut grown = 0isize;
        let mut parent = root;
        loop {
            // SAFETY: the index's write lock is held (the caller's `&mut`).
            let node = unsafe { node_at(parent.load(Ordering::Relaxed)) };
            if node.level() == level {
                return (parent, grown);
            }
            let i = slot_of(index, node.level());
            if node.load(i) == 0 {
                let child = Owned::sparse(node.level() - 1, &[]);
                grown += child.bytes() as isize;
                grown += put(parent, i, child.into_word());
            }
            // SAFETY: the index's write lock is held (the caller's `&mut`),
            // so the node `parent` points to now (`put` may have published a
            // replacement) is freed by no one while we use it.
            let node = unsafe { node_at(parent.load(Ordering::Relaxed)) };
            parent = node.word(i).expect("the child's slot is in use");
            debug_assert!(is_node(parent.load(Ordering::Relaxed)), "a node below a node");
        }
    }

    /// A new root above the old one (which becomes its first slot).
    fn grow(&mut self) {
        assert!(self.height < HEIGHT_MAX, "block numbers fit in {HEIGHT_MAX} levels");
        let old = self.root.load(Ordering::Relaxed);
        let mut grown = 0isize;
        let mut first = Vec::new();
        if old != 0 {
            // SAFETY: the index's write lock is held.
            let old_node = unsafe { node_at(old) };
            if old_node.used() == 0 {
                // An empty root (only while an insert grows the tree) goes.
                grown -= old_node.bytes() as isize;
                defer_release(old);
            } else {
                // The old root was dense; below the root, few slots in use
                // are kept sparse.
                let slot = AtomicUsize::new(old);
                if old_node.used() <= SPARSE_SLOTS_MAX / 2 {
                    let entries: Vec<(usize, usize)> = old_node.entries_from(0).collect();
                    grown += replace(&slot, Owned::sparse(old_node.level(), &entries));
                }
                first.push((0, slot.load(Ordering::Relaxed)));
            }
        }
        let root = Owned::dense(self.height, &first);
        grown += root.bytes() as isize;
        self.root.store(root.into_word(), Ordering::Release);
        self.height += 1;
        self.account(grown);
    }

    /// Removes and returns the folio whose first block is `index`. The
    /// index's own reference goes after the read sections that could see
    /// it end.
    pub fn remove(&mut self, index: u64) -> Option<Arc<Folio>> {
        let found = self.get(index)?;
        let (order, folio) = (found.order, found.to_arc());
        let (word, shrunk) = Self::remove_in(&self.root, index, order, NodeRole::Root);
        debug_assert!(std::ptr::eq((word & !TAG_BITS) as *const Folio, Arc::as_ptr(&folio)));
        defer_release(word);
        self.len -= 1;
        self.account(shrunk);
        self.shrink();
        debug_assert!(self.get(index).is_none(), "folio {index} left the index");
        Some(folio)
    }

    /// Clears the slots of the folio at `index` (of `order`) below the
    /// node `parent` points to, dropping nodes that empty; returns the
    /// folio's word and the change in the nodes' bytes.
    fn remove_in(parent: &AtomicUsize, index: u64, order: u8, role: NodeRole) -> (usize, isize) {
        // SAFETY: the index's write lock is held (the caller's `&mut`).
        let node = unsafe { node_at(parent.load(Ordering::Relaxed)) };
        if node.level() == level_of(order) {
            let first = slot_of(index, node.level());
            let mut change = 0;
            // The folio first: a reader then finds nothing at its blocks.
            let (folio, c) = take(parent, first, role);
            debug_assert_eq!(folio & TAG_BITS, TAG_FOLIO, "folio {index} is in its first slot");
            change += c;
            for i in (first + 1..first + slots_spanned(order)).rev() {
                let (taken, c) = take(parent, i, role);
                debug_assert_eq!(taken, sibling_word(first), "folio {index} spans slot {i}");
                change += c;
            }
            return (folio, change);
        }
        let i = slot_of(index, node.level());
        let child_word = node.word(i).expect("the folio is indexed at its level");
        let (folio, mut change) = Self::remove_in(child_word, index, order, NodeRole::Inner);
        // SAFETY: the index's write lock is held (the caller's `&mut`), so
        // the node `child_word` points to now (the call above may have
        // replaced it) is freed by no one while we use it.
        let child = unsafe { node_at(child_word.load(Ordering::Relaxed)) };
        if child.used() == 0 {
            let child_bytes = child.bytes() as isize;
            // `take` loads `parent` afresh: its node may have been replaced.
            let (empty, c) = take(parent, i, role);
            defer_release(empty);
            change += c - child_bytes;
        }
        (folio, change)
    }

    /// Drops an empty root, and roots that only lead to their first slot's
    /// node, so lookups after a truncation walk no more levels than the
    /// remaining folios need.
    fn shrink(&mut self) {
        loop {
            let Some(root) = self.root_node() else { return };
            let root_bytes = root.bytes() as isize;
            if root.used() == 0 {
                let old = self.root.swap(0, Ordering::AcqRel);
                defer_release(old);
                self.height = 0;
                self.account(-root_bytes);
                return;
            }
            let first = root.load(0);
            if root.used() != 1 || !is_node(first) {
                return;
            }
            // SAFETY: the index's write lock is held.
            let child = unsafe { node_at(first) };
            let entries: Vec<(usize, usize)> = child.entries_from(0).collect();
            let dense = Owned::dense(child.level(), &entries);
            let change = dense.bytes() as isize - child.bytes() as isize - root_bytes;
            let old_root = self.root.swap(dense.into_word(), Ordering::AcqRel);
            defer_release(first);
            defer_release(old_root);
            self.height -= 1;
            self.account(change);
        }
    }

    /// Takes every folio out, in block order. The index's own references
    /// and its nodes go after the read sections that could see them end.
    pub fn take_all(&mut self) -> Vec<Arc<Folio>> {
        let folios: Vec<Arc<Folio>> = self.values().map(FolioRef::to_arc).collect();
        debug_assert_eq!(folios.len(), self.len);
        let bytes = self.node_bytes as isize;
        let tree = Unlinked(self.root.swap(0, Ordering::AcqRel));
        epoch::defer(move || {
            let Unlinked(word) = tree;
            // SAFETY: unlinked above, handed here once.
            unsafe { release_tree(word) };
        });
        self.height = 0;
        self.len = 0;
        self.account(-bytes);
        debug_assert_eq!(self.node_bytes, 0);
        folios
    }

    /// Checks every invariant of the module docs (tests).
    #[cfg(test)]
    fn check(&self) {
        fn walk(node: Node<'_>, level: u32, base: u64, folios: &mut Vec<(u64, u8)>) {
            assert_eq!(node.level(), level, "a node's level is its parent's minus one");
            let shift = SLOT_BITS * level;
            if let Node::Sparse(s) = node {
                assert_eq!(s.slots.len(), s.used_bits.count_ones() as usize, "a sparse node holds its used slots");
                assert!(s.slots.len() <= SPARSE_SLOTS_MAX);
                assert!(s.slots.iter().all(|w| w.load(Ordering::Relaxed) != 0), "a sparse node's slots are used");
            }
            let mut used = 0;
            for i in 0..SLOTS {
                let slot_base = base + ((i as u64) << shift);
                // SAFETY: the test owns the index.
                match unsafe { decode(node.load(i)) } {
                    Slot::Empty => continue,
                    Slot::Node(child) => {
                        assert!(level > 0 && child.used() > 0, "a non-empty node above level 0");
                        walk(child, level - 1, slot_base, folios);
                    }
                    Slot::Folio(f) => {
                        assert_eq!(level_of(f.order), level, "folio {} at its level", f.index);
                        assert_eq!(f.index, slot_base, "a folio sits in its first slot");
                        for later in i + 1..i + slots_spanned(f.order) {
                            assert_eq!(node.load(later), sibling_word(i), "folio {} spans slot {later}", f.index);
                        }
                        folios.push((f.index, f.order));
                    }
                    Slot::Sibling(first) => {
                        // SAFETY: `check` borrows the index (`&self`), so no
                        // writer changes or frees what the node's slot
                        // `first` points to while the walk reads it.
                        let Slot::Folio(f) = (unsafe { decode(node.load(first)) }) else {
                            panic!("a sibling of no folio")
                        };
                        assert!(
                            f.index < slot_base && slot_base < f.end_index(),
                            "folio {} spans its siblings",
                            f.index
                        );
                    }
                }
                used += 1;
            }
            assert_eq!(used, node.used(), "a node counts its slots");
        }
        let mut folios = Vec::new();
        if let Some(root) = self.root_node() {
            assert!(self.height > 0 && root.used() > 0, "no empty root");
            assert!(matches!(root, Node::Dense(_)), "the root is dense");
            walk(root, self.height - 1, 0, &mut folios);
            assert_eq!(root.bytes_below(), self.node_bytes, "node bytes are counted");
        } else {
            assert_eq!((self.height, self.node_bytes), (0, 0));
        }
        assert_eq!(folios.len(), self.len, "len counts folios");
        assert!(folios.windows(2).all(|w| w[0].0 + (1 << w[0].1) <= w[1].0), "folios do not overlap");
    }

    /// Adds `change` to the nodes' bytes, here and in the counters.
    fn account(&mut self, change: isize) {
        self.node_bytes = self.node_bytes.checked_add_signed(change).expect("node bytes stay positive");
        if let Some(c) = &self.counters {
            if change > 0 {
                Counters::add(&c.metadata_bytes, change as u64);
            } else if change < 0 {
                Counters::sub(&c.metadata_bytes, change.unsigned_abs() as u64);
            }
        }
    }
}

impl Drop for FolioIndex {
    /// The nodes and the index's folio references go (no reader can be in
    /// a mapping being dropped); they stop counting in the metadata.
    fn drop(&mut self) {
        // SAFETY: `&mut self` on drop: the mapping is going, and lock-free
        // readers hold its inode.
        unsafe { release_tree(self.root.swap(0, Ordering::AcqRel)) };
        let bytes = self.node_bytes as isize;
        self.account(-bytes);
    }
}

/// The folios of [`FolioIndex::range`], in block order.
pub struct Folios<'a> {
    index: &'a FolioIndex,
    /// The next folio starts at or after this block.
    next: u64,
    end: u64,
}

impl<'a> Iterator for Folios<'a> {
    type Item = FolioRef<'a>;

    fn next(&mut self) -> Option<FolioRef<'a>> {
        if self.next >= self.end {
            return None;
        }
        let Some(f) = self.index.first_from(self.next).filter(|f| f.index < self.end) else {
            self.next = self.end;
            return None;
        };
        debug_assert!(f.index >= self.next, "folios come in order");
        self.next = f.end_index();
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::mapping::folio::FolioStart;

    fn folio(index: u64, order: u8) -> Arc<Folio> {
        Arc::new(Folio::new(index, order, FolioStart::Idle))
    }

    #[test]
    fn a_slot_is_one_word_and_a_dense_node_64_of_them() {
        assert_eq!(std::mem::size_of::<Dense>(), 66 * 8);
        assert_eq!(std::mem::size_of::<Sparse>(), 32);
    }

    #[test]
    fn finds_the_folio_covering_each_block() {
        let mut idx = FolioIndex::new();
        assert!(idx.find(0).is_none() && idx.first_from(0).is_none() && idx.is_empty());
        let large = folio(512, 9);
        idx.insert(large.clone());
        assert_eq!(Arc::strong_count(&large), 2, "the index holds one reference to a folio of eight slots");
        drop(large);
        idx.insert(folio(3, 0));
        idx.insert(folio(64, 6));
        idx.check();
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.find(700).map(|f| f.index), Some(512));
        assert_eq!(idx.find(1023).map(|f| f.index), Some(512));
        assert!(idx.find(1024).is_none() && idx.find(2).is_none() && idx.find(u64::MAX).is_none());
        assert_eq!(idx.find(127).map(|f| f.index), Some(64));
        assert_eq!(idx.get(3).map(|f| f.order), Some(0));
        assert!(idx.get(65).is_none(), "get wants the first block");
        assert_eq!(idx.first_from(4).map(|f| f.index), Some(64));
        assert_eq!(idx.first_from(65).map(|f| f.index), Some(512));
        assert_eq!(idx.values().map(|f| f.index).collect::<Vec<_>>(), vec![3, 64, 512]);
        assert_eq!(idx.range(4..513).map(|f| f.index).collect::<Vec<_>>(), vec![64, 512]);
        assert_eq!(idx.range(4..512).map(|f| f.index).collect::<Vec<_>>(), vec![64]);
        assert_eq!(idx.range(64..=64).map(|f| f.index).collect::<Vec<_>>(), vec![64]);
        assert_eq!(idx.remove(64).map(|f| f.index), Some(64));
        assert!(idx.remove(64).is_none() && idx.find(64).is_none());
        idx.check();
        assert_eq!(idx.take_all().len(), 2);
        assert!(idx.is_empty() && idx.root.load(Ordering::Relaxed) == 0);
        idx.check();
    }

    /// A folio far out grows the tree; removing it shrinks it back, so
    /// lookups walk only the levels the remaining folios need.
    #[test]
    fn grows_for_far_blocks_and_shrinks_back() {
        let mut idx = FolioIndex::new();
        idx.insert(folio(5, 0));
        assert_eq!(idx.height, 1);
        let far = (1u64 << 52) - 512;
        idx.insert(folio(far, 9));
        assert_eq!(idx.height, 9);
        idx.check();
        assert_eq!(idx.find(far + 3).map(|f| f.index), Some(far));
        assert_eq!(idx.first_from(6).map(|f| f.index), Some(far));
        idx.remove(far);
        assert_eq!(idx.height, 1, "back to one level");
        idx.check();
        // A large folio needs a level of its own even at block 0.
        idx.insert(folio(1 << 18, 18));
        idx.check();
        assert_eq!(idx.find((1 << 18) + 12345).map(|f| f.order), Some(18));
        idx.remove(5);
        idx.remove(1 << 18);
        assert!(idx.root.load(Ordering::Relaxed) == 0 && idx.height == 0);
        idx.check();
    }

    /// Nodes turn dense as they fill and sparse as they empty, and what
    /// they cost is counted in the cache's metadata.
    #[test]
    fn nodes_change_shape_and_are_counted() {
        let counters = Arc::new(Counters::default());
        let mut idx = FolioIndex::counted_in(Some(counters.clone()));
        let metadata = || counters.metadata_bytes.load(Ordering::Relaxed) as usize;
        // One 4 KiB folio in each of 40 leaves spread over a large file:
        // sparse leaves and middle nodes, not a 1 KiB node each.
        for i in 0..40u64 {
            idx.insert(folio(i * 4096 * 64 + 7, 0));
        }
        idx.check();
        assert_eq!(metadata(), idx.node_bytes);
        // Each has a sparse node of one slot at each of the three levels
        // below the root (40 B each), and a share of the dense root.
        let per_folio = idx.node_bytes / 40;
        assert!(
            per_folio <= 3 * 40 + std::mem::size_of::<Dense>() / 40,
            "scattered 4 KiB folios cost {per_folio} B of nodes each"
        );
        // A leaf filled with 4 KiB folios turns dense, and sparse again as
        // they go.
        for b in 0..SLOTS as u64 {
            if b != 7 {
                idx.insert(folio(b, 0));
            }
        }
        idx.check();
        for b in 0..SLOTS as u64 - 2 {
            idx.remove(b);
            idx.check();
        }
        assert_eq!(metadata(), idx.node_bytes);
        drop(idx);
        assert_eq!(metadata(), 0, "a dropped index stops counting");
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn an_overlapping_folio_is_refused() {
        let mut idx = FolioIndex::new();
        idx.insert(folio(512, 9));
        idx.insert(folio(520, 3));
    }

    /// Random inserts and removals of non-overlapping folios of random
    /// orders, against a `BTreeMap` reference. `WBCACHE_INDEX_SEED=n` runs
    /// only seed `n`.
    #[test]
    fn agrees_with_a_sorted_map_under_random_changes() {
        let seeds: Vec<u64> = match std::env::var("WBCACHE_INDEX_SEED") {
            Ok(s) => vec![s.parse().expect("a seed")],
            Err(_) => (0..24).collect(),
        };
        for seed in seeds {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rand = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mut idx = FolioIndex::new();
            let mut reference: BTreeMap<u64, u8> = BTreeMap::new();
            let covering = |r: &BTreeMap<u64, u8>, b: u64| {
                r.range(..=b).next_back().filter(|(&i, &o)| i + (1 << o) > b).map(|(&i, _)| i)
            };
            // Dense regions fill leaves (dense nodes), wide ones scatter
            // folios (sparse nodes).
            let span_of = |r: u64| match r {
                0 => 1 << 30,
                1 => 1 << 8,
                _ => 1 << 14,
            };
            for step in 0..4000 {
                let span = span_of(rand(4));
                let order = [0, 0, 0, 1, 3, 5, 6, 7, 9, 12][rand(10) as usize];
                let block = rand(span) & !((1u64 << order) - 1);
                // Overlapping folios start before the block and cover it,
                // or start inside the new one.
                let free = covering(&reference, block).is_none()
                    && reference.range(block..block + (1 << order)).next().is_none();
                if rand(3) != 0 && free {
                    idx.insert(folio(block, order));
                    reference.insert(block, order);
                } else if let Some((&i, _)) = reference.range(block..).next() {
                    assert_eq!(idx.remove(i).map(|f| f.index), Some(i), "seed {seed} step {step}");
                    reference.remove(&i);
                }
                let probe = rand(span);
                assert_eq!(idx.find(probe).map(|f| f.index), covering(&reference, probe), "seed {seed} step {step}");
                assert_eq!(
                    idx.first_from(probe).map(|f| f.index),
                    reference.range(probe..).next().map(|(&i, _)| i),
                    "seed {seed} step {step}"
                );
                if step % 50 == 0 {
                    // Removed folios (and their test buffers) go once no
                    // read section can see them.
                    crate::base::epoch::reclaim();
                    idx.check();
                    let all: Vec<u64> = idx.values().map(|f| f.index).collect();
                    assert_eq!(all, reference.keys().copied().collect::<Vec<_>>(), "seed {seed} step {step}");
                    let (a, b) = (rand(span), rand(span));
                    let (a, b) = (a.min(b), a.max(b));
                    let got: Vec<u64> = idx.range(a..b).map(|f| f.index).collect();
                    assert_eq!(
                        got,
                        reference.range(a..b).map(|(&i, _)| i).collect::<Vec<_>>(),
                        "seed {seed} step {step}"
                    );
                }
            }
            idx.check();
            assert_eq!(idx.len(), reference.len(), "seed {seed}");
        }
    }
}
