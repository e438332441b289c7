//! The folio index: an inode's folios by block number, as a radix tree of
//! 64-slot nodes (the shape of the kernel's xarray), so that finding the
//! folio that covers a block is a fixed walk of one or two loads per level
//! with no key comparisons. A `BTreeMap` keyed by folio index cost a cached
//! random 4 KiB read about 20 ns more than this on the project's machine:
//! its search through sorted keys mispredicts a branch per level on random
//! blocks, where this walk computes each slot from the block number.
//!
//! Shape: a node at level `l` has 64 slots of `64^l` blocks each; a tree
//! of height `h` (its root at level `h - 1`) covers blocks `[0, 64^h)`. A
//! folio of order `o` lives at level `o / 6`, in the `2^(o mod 6)`
//! consecutive slots its blocks span: the first holds the folio (the
//! index's one reference to it, which drop-behind's count of holders
//! relies on), the others point back to that first slot. A lookup stops
//! at the first slot holding a folio or a pointer back. The tree grows a
//! root when a folio lies beyond it, drops nodes as they empty, and drops
//! its root while all the root holds is a node in its first slot.
//!
//! Nodes come in two shapes, so that folios scattered over a large file
//! (random 4 KiB I/O on a database or a device) do not cost a 1 KiB node
//! per level each: a *dense* node is an array of 64 slots (one load finds
//! a slot); a *sparse* one, for up to [`SPARSE_SLOTS_MAX`] slots in use,
//! keeps a bitmap of its used slots and only those, in order (a second
//! load and a popcount find one). A node turns dense when it would pass
//! that many and sparse again when it falls to half of it; the root is
//! always dense. The index's nodes are counted in the cache's
//! `metadata_bytes`.
//!
//! Invariants (checked by `check` in the tests, and by assertions around
//! each change): folios do not overlap; a folio's first slot holds it, the
//! other slots it spans point back to that one, and no other slot refers
//! to it; a node's count of used slots is right, a sparse node's slots
//! match its bitmap and are never empty, and no node but a root during an
//! insert is empty; `len` counts folios; `node_bytes` sums the nodes.
//!
//! Owned by its mapping, behind the mapping's index lock: lookups under the
//! read lock, changes under the write lock.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::folio::Folio;
use crate::stats::Counters;

/// log2 of the slots per node.
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
/// The tallest tree: 9 levels cover 2^54 blocks, past the last block of
/// the largest file (2^64 bytes is 2^52 blocks), and keep every shift and
/// every slot's first block within a `u64`.
const HEIGHT_MAX: u32 = 9;
/// Slots a sparse node holds at most (a quarter of a dense node's bytes);
/// a dense node with half as many in use turns sparse again.
const SPARSE_SLOTS_MAX: usize = 16;

enum Slot {
    Empty,
    Node(Node),
    /// The first slot a folio spans.
    Folio(Arc<Folio>),
    /// A later slot a folio spans: the number of its first slot.
    Sibling(u8),
}

/// The slot every absent slot of a sparse node reads as.
static EMPTY: Slot = Slot::Empty;

struct Dense {
    /// Non-empty slots.
    used: usize,
    slots: [Slot; SLOTS],
}

struct Sparse {
    /// Bit `i` set: slot `i` is in use, held at `slots[rank of bit i]`.
    used_bits: u64,
    slots: Vec<Slot>,
}

enum Node {
    Dense(Box<Dense>),
    Sparse(Box<Sparse>),
}

impl Node {
    fn dense() -> Node {
        Node::Dense(Box::new(Dense { used: 0, slots: std::array::from_fn(|_| Slot::Empty) }))
    }

    fn sparse() -> Node {
        Node::Sparse(Box::new(Sparse { used_bits: 0, slots: Vec::new() }))
    }

    /// Heap bytes of the node itself (not of what its slots point to).
    fn bytes(&self) -> usize {
        match self {
            Node::Dense(_) => std::mem::size_of::<Dense>(),
            Node::Sparse(s) => std::mem::size_of::<Sparse>() + s.slots.capacity() * std::mem::size_of::<Slot>(),
        }
    }

    fn used(&self) -> usize {
        match self {
            Node::Dense(d) => d.used,
            Node::Sparse(s) => s.used_bits.count_ones() as usize,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> &Slot {
        match self {
            Node::Dense(d) => &d.slots[i],
            Node::Sparse(s) => {
                let bit = 1u64 << i;
                if s.used_bits & bit == 0 {
                    &EMPTY
                } else {
                    &s.slots[(s.used_bits & (bit - 1)).count_ones() as usize]
                }
            }
        }
    }

    /// The slot `i` if in use, for changing what it holds in place.
    fn get_mut(&mut self, i: usize) -> Option<&mut Slot> {
        match self {
            Node::Dense(d) => Some(&mut d.slots[i]).filter(|s| !matches!(s, Slot::Empty)),
            Node::Sparse(s) => {
                let bit = 1u64 << i;
                (s.used_bits & bit != 0).then(|| &mut s.slots[(s.used_bits & (bit - 1)).count_ones() as usize])
            }
        }
    }

    /// Puts `slot` (not empty) in the empty slot `i`; returns the change
    /// in the node's bytes (a sparse node that grows or turns dense).
    fn put(&mut self, i: usize, slot: Slot) -> isize {
        debug_assert!(!matches!(slot, Slot::Empty) && matches!(self.get(i), Slot::Empty), "slot {i} was empty");
        let (before, used_before) = (self.bytes(), self.used());
        if let Node::Sparse(s) = self {
            if s.slots.len() == SPARSE_SLOTS_MAX {
                self.make_dense();
            }
        }
        match self {
            Node::Dense(d) => {
                d.slots[i] = slot;
                d.used += 1;
            }
            Node::Sparse(s) => {
                let bit = 1u64 << i;
                // Capacity doubles up to 16 from 1: a node of one folio
                // (4 KiB folios scattered over a file) holds one slot, not
                // the four a `Vec` would start with.
                if s.slots.len() == s.slots.capacity() {
                    let len = s.slots.len();
                    s.slots.reserve_exact((2 * len).clamp(1, SPARSE_SLOTS_MAX) - len);
                }
                s.slots.insert((s.used_bits & (bit - 1)).count_ones() as usize, slot);
                s.used_bits |= bit;
            }
        }
        debug_assert_eq!(self.used(), used_before + 1);
        self.bytes() as isize - before as isize
    }

    /// Empties slot `i` (in use) and returns what it held, and the change
    /// in the node's bytes (a dense node that turns sparse, unless
    /// `keep_dense`).
    fn take(&mut self, i: usize, keep_dense: bool) -> (Slot, isize) {
        let (before, used_before) = (self.bytes(), self.used());
        let taken = match self {
            Node::Dense(d) => {
                d.used -= 1;
                std::mem::replace(&mut d.slots[i], Slot::Empty)
            }
            Node::Sparse(s) => {
                let bit = 1u64 << i;
                debug_assert!(s.used_bits & bit != 0, "slot {i} in use");
                s.used_bits &= !bit;
                s.slots.remove((s.used_bits & (bit - 1)).count_ones() as usize)
            }
        };
        debug_assert!(!matches!(taken, Slot::Empty), "slot {i} was in use");
        debug_assert_eq!(self.used(), used_before - 1);
        match self {
            Node::Dense(d) if !keep_dense && d.used <= SPARSE_SLOTS_MAX / 2 => self.make_sparse(),
            Node::Sparse(s) if s.slots.capacity() > 2 * s.slots.len().max(1) => s.slots.shrink_to_fit(),
            _ => {}
        }
        (taken, self.bytes() as isize - before as isize)
    }

    fn make_dense(&mut self) {
        let Node::Sparse(s) = self else { return };
        let mut dense = Dense { used: 0, slots: std::array::from_fn(|_| Slot::Empty) };
        let bits = s.used_bits;
        for (rank, slot) in std::mem::take(&mut s.slots).into_iter().enumerate() {
            let i = nth_set_bit(bits, rank);
            dense.slots[i] = slot;
            dense.used += 1;
        }
        debug_assert_eq!(dense.used, bits.count_ones() as usize);
        *self = Node::Dense(Box::new(dense));
    }

    fn make_sparse(&mut self) {
        let Node::Dense(d) = self else { return };
        let mut sparse = Sparse { used_bits: 0, slots: Vec::with_capacity(d.used) };
        for (i, slot) in d.slots.iter_mut().enumerate() {
            if !matches!(slot, Slot::Empty) {
                sparse.used_bits |= 1 << i;
                sparse.slots.push(std::mem::replace(slot, Slot::Empty));
            }
        }
        debug_assert_eq!(sparse.slots.len(), d.used);
        *self = Node::Sparse(Box::new(sparse));
    }

    /// The used slots from `start` on, in order, with their numbers.
    fn used_from(&self, start: usize) -> impl Iterator<Item = (usize, &Slot)> {
        let (dense, sparse) = match self {
            Node::Dense(d) => (Some(d.slots.iter().enumerate().skip(start)), None),
            Node::Sparse(s) => {
                let bits = s.used_bits;
                let skipped = (bits & ((1u64 << start) - 1)).count_ones() as usize;
                (
                    None,
                    Some(
                        s.slots
                            .iter()
                            .enumerate()
                            .skip(skipped)
                            .map(move |(rank, slot)| (nth_set_bit(bits, rank), slot)),
                    ),
                )
            }
        };
        dense.into_iter().flatten().chain(sparse.into_iter().flatten()).filter(|(_, s)| !matches!(s, Slot::Empty))
    }

    /// Every node below this one, and this one's bytes (tests).
    #[cfg(test)]
    fn bytes_below(&self) -> usize {
        self.bytes()
            + self
                .used_from(0)
                .map(|(_, s)| if let Slot::Node(child) = s { child.bytes_below() } else { 0 })
                .sum::<usize>()
    }
}

/// The number of the `rank`-th (from 0) set bit of `bits`.
fn nth_set_bit(mut bits: u64, rank: usize) -> usize {
    for _ in 0..rank {
        bits &= bits - 1;
    }
    debug_assert!(bits != 0, "bit of rank {rank} exists");
    bits.trailing_zeros() as usize
}

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

/// Folio index → folio; see the module docs.
#[derive(Default)]
pub struct FolioIndex {
    /// Dense; `None` when nothing is indexed.
    root: Option<Node>,
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
        FolioIndex { root: None, height: 0, len: 0, node_bytes: 0, counters }
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

    /// The folio covering `block`, if cached.
    #[inline]
    pub fn find(&self, block: u64) -> Option<&Arc<Folio>> {
        let mut node = self.root.as_ref()?;
        if !self.covers(block) {
            return None;
        }
        let mut level = self.height - 1;
        loop {
            let mut slot = node.get(slot_of(block, level));
            if let Slot::Sibling(first) = slot {
                slot = node.get(usize::from(*first));
            }
            match slot {
                Slot::Empty => return None,
                Slot::Sibling(_) => unreachable!("a sibling points to its folio's first slot"),
                Slot::Folio(f) => {
                    debug_assert!(f.index <= block && block < f.end_index(), "folio {} covers block {block}", f.index);
                    return Some(f);
                }
                Slot::Node(child) => {
                    debug_assert!(level > 0, "no node below level 0");
                    node = child;
                    level -= 1;
                }
            }
        }
    }

    /// The folio whose first block is `index`, if cached.
    pub fn get(&self, index: u64) -> Option<&Arc<Folio>> {
        self.find(index).filter(|f| f.index == index)
    }

    /// The first folio (in block order) whose first block is at or after
    /// `block`.
    pub fn first_from(&self, block: u64) -> Option<&Arc<Folio>> {
        let root = self.root.as_ref()?;
        if !self.covers(block) {
            return None;
        }
        let found = Self::first_in(root, self.height - 1, 0, block);
        debug_assert!(found.is_none_or(|f| f.index >= block));
        found
    }

    /// `first_from` within `node` (at `level`, its first block `base`);
    /// `from` is below the node's end.
    fn first_in(node: &Node, level: u32, base: u64, from: u64) -> Option<&Arc<Folio>> {
        let shift = SLOT_BITS * level;
        let start = if from <= base { 0 } else { ((from - base) >> shift) as usize };
        for (i, slot) in node.used_from(start) {
            match slot {
                // A sibling's folio starts before it, so before `from`
                // (or it was met at its first slot).
                Slot::Empty | Slot::Sibling(_) => {}
                Slot::Folio(f) if f.index >= from => return Some(f),
                // A folio starting before `from` that spans it.
                Slot::Folio(_) => {}
                Slot::Node(child) => {
                    if let Some(f) = Self::first_in(child, level - 1, base + ((i as u64) << shift), from) {
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
        let mut grown = 0isize;
        let mut node = self.root.as_mut().expect("a grown tree has a root");
        let mut at = self.height - 1;
        while at > level {
            let i = slot_of(folio.index, at);
            if matches!(node.get(i), Slot::Empty) {
                let child = Node::sparse();
                grown += child.bytes() as isize;
                grown += node.put(i, Slot::Node(child));
            }
            node = match node.get_mut(i) {
                Some(Slot::Node(child)) => child,
                _ => unreachable!("the overlap check found no folio above the folio's level"),
            };
            at -= 1;
        }
        let (index, order, ptr) = (folio.index, folio.order, Arc::as_ptr(&folio));
        let first = slot_of(index, level);
        let first_slot = u8::try_from(first).expect("a slot number fits in a byte");
        // Siblings first, then the folio itself (the index's reference).
        for i in first + 1..first + slots_spanned(order) {
            grown += node.put(i, Slot::Sibling(first_slot));
        }
        grown += node.put(first, Slot::Folio(folio));
        self.len += 1;
        self.account(grown);
        debug_assert!(self.get(index).is_some_and(|f| Arc::as_ptr(f) == ptr), "folio {index} indexed");
        debug_assert!(self.find(last_block).is_some_and(|f| Arc::as_ptr(f) == ptr));
        debug_assert_eq!(self.len, len_before + 1);
    }

    /// A new root above the old one (which becomes its first slot).
    fn grow(&mut self) {
        assert!(self.height < HEIGHT_MAX, "block numbers fit in {HEIGHT_MAX} levels");
        let mut root = Node::dense();
        let mut grown = root.bytes() as isize;
        // An empty root (only while an insert grows the tree) is dropped.
        match self.root.take() {
            Some(mut old) if old.used() > 0 => {
                // The old root was dense; below the root, few slots in
                // use are kept sparse.
                if old.used() <= SPARSE_SLOTS_MAX / 2 {
                    let before = old.bytes() as isize;
                    old.make_sparse();
                    grown += old.bytes() as isize - before;
                }
                grown += root.put(0, Slot::Node(old));
            }
            Some(old) => grown -= old.bytes() as isize,
            None => {}
        }
        self.root = Some(root);
        self.height += 1;
        self.account(grown);
    }

    /// Removes and returns the folio whose first block is `index`.
    pub fn remove(&mut self, index: u64) -> Option<Arc<Folio>> {
        let order = self.get(index)?.order;
        let root = self.root.as_mut().expect("a folio was found");
        let (folio, shrunk) = Self::remove_in(root, self.height - 1, index, order, true);
        debug_assert_eq!((folio.index, folio.order), (index, order));
        self.len -= 1;
        self.account(shrunk);
        self.shrink();
        debug_assert!(self.get(index).is_none(), "folio {index} left the index");
        Some(folio)
    }

    /// Clears the slots of the folio at `index` (of `order`) below `node`
    /// (at `level`), dropping nodes that empty; returns the folio and the
    /// change in the nodes' bytes.
    fn remove_in(node: &mut Node, level: u32, index: u64, order: u8, is_root: bool) -> (Arc<Folio>, isize) {
        if level == level_of(order) {
            let first = slot_of(index, level);
            let mut change = 0;
            // Last slot first: a sparse node shifts fewer slots.
            for i in (first + 1..first + slots_spanned(order)).rev() {
                let (taken, c) = node.take(i, is_root);
                debug_assert!(
                    matches!(taken, Slot::Sibling(s) if usize::from(s) == first),
                    "folio {index} spans slot {i}"
                );
                change += c;
            }
            let (Slot::Folio(folio), c) = node.take(first, is_root) else {
                panic!("folio {index} is in its first slot")
            };
            return (folio, change + c);
        }
        let i = slot_of(index, level);
        let Some(Slot::Node(child)) = node.get_mut(i) else { panic!("folio {index} is indexed at its level") };
        let (folio, mut change) = Self::remove_in(child, level - 1, index, order, false);
        if child.used() == 0 {
            let (Slot::Node(empty), c) = node.take(i, is_root) else { unreachable!("slot {i} held the child") };
            change += c - empty.bytes() as isize;
        }
        (folio, change)
    }

    /// Drops an empty root, and roots that only lead to their first slot's
    /// node, so lookups after a truncation walk no more levels than the
    /// remaining folios need.
    fn shrink(&mut self) {
        loop {
            let Some(root) = self.root.as_mut() else { return };
            if root.used() == 0 {
                let bytes = root.bytes() as isize;
                self.root = None;
                self.height = 0;
                self.account(-bytes);
                return;
            }
            if root.used() != 1 || !matches!(root.get(0), Slot::Node(_)) {
                return;
            }
            let root_bytes = root.bytes() as isize;
            let (Slot::Node(mut child), _) = root.take(0, true) else { unreachable!("checked above") };
            let child_bytes = child.bytes() as isize;
            child.make_dense();
            let change = child.bytes() as isize - child_bytes - root_bytes;
            self.root = Some(child);
            self.height -= 1;
            self.account(change);
        }
    }

    /// Takes every folio out, in block order.
    pub fn take_all(&mut self) -> Vec<Arc<Folio>> {
        let folios: Vec<Arc<Folio>> = self.values().cloned().collect();
        debug_assert_eq!(folios.len(), self.len);
        let bytes = self.node_bytes as isize;
        self.root = None;
        self.height = 0;
        self.len = 0;
        self.account(-bytes);
        debug_assert_eq!(self.node_bytes, 0);
        folios
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

    /// Checks every invariant of the module docs (tests).
    #[cfg(test)]
    fn check(&self) {
        fn walk(node: &Node, level: u32, base: u64, folios: &mut Vec<(u64, u8)>) {
            let shift = SLOT_BITS * level;
            if let Node::Sparse(s) = node {
                assert_eq!(s.slots.len(), s.used_bits.count_ones() as usize, "a sparse node holds its used slots");
                assert!(s.slots.len() <= SPARSE_SLOTS_MAX);
            }
            let mut used = 0;
            for i in 0..SLOTS {
                let slot_base = base + ((i as u64) << shift);
                match node.get(i) {
                    Slot::Empty => continue,
                    Slot::Node(child) => {
                        assert!(level > 0 && child.used() > 0, "a non-empty node above level 0");
                        walk(child, level - 1, slot_base, folios);
                    }
                    Slot::Folio(f) => {
                        assert_eq!(level_of(f.order), level, "folio {} at its level", f.index);
                        assert_eq!(f.index, slot_base, "a folio sits in its first slot");
                        for later in i + 1..i + slots_spanned(f.order) {
                            let points_back =
                                matches!(node.get(later), Slot::Sibling(first) if usize::from(*first) == i);
                            assert!(points_back, "folio {}", f.index);
                        }
                        folios.push((f.index, f.order));
                    }
                    Slot::Sibling(first) => {
                        let Slot::Folio(f) = node.get(usize::from(*first)) else { panic!("a sibling of no folio") };
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
        if let Some(root) = &self.root {
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
}

impl Drop for FolioIndex {
    /// Nodes still here stop counting in the metadata.
    fn drop(&mut self) {
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
    type Item = &'a Arc<Folio>;

    fn next(&mut self) -> Option<&'a Arc<Folio>> {
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

    fn folio(index: u64, order: u8) -> Arc<Folio> {
        Arc::new(Folio::new(index, order, false))
    }

    #[test]
    fn a_slot_is_two_words() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
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
        assert!(idx.is_empty() && idx.root.is_none());
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
        assert!(idx.root.is_none() && idx.height == 0);
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
        // below the root (48 B each), and a share of the dense root.
        let per_folio = idx.node_bytes / 40;
        assert!(
            per_folio <= 3 * 48 + std::mem::size_of::<Dense>() / 40,
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
