//! The folio index's nodes and slots: what a slot's word holds (a tagged
//! pointer to a node or a folio, or a folio's later slot pointing back),
//! the two shapes of node, and the changes a writer makes to them: a word
//! stored in place in a dense node, a sparse node replaced by a new one
//! (its set of used slots never changes once readers can see it), and
//! whatever a change unlinks released through [`crate::base::epoch::defer`], so
//! that a lock-free reader in a read section never loads a word whose
//! target is gone. The module above ([`super`]) owns the tree; every
//! function here that changes a node is called under the index's write
//! lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::base::epoch;
use crate::mapping::folio::Folio;

/// log2 of the slots per node.
pub(super) const SLOT_BITS: u32 = 6;
pub(super) const SLOTS: usize = 1 << SLOT_BITS;
/// Slots a sparse node holds at most (a quarter of a dense node's bytes);
/// a dense node with half as many in use turns sparse again.
pub(super) const SPARSE_SLOTS_MAX: usize = 16;

/// A slot's word: 0 is empty; otherwise the low three bits say what the
/// rest is: a dense or a sparse node's address, a folio's address
/// (`Arc::into_raw`: the index's reference), or the number of the folio's
/// first slot, shifted.
pub(super) const TAG_BITS: usize = 7;
pub(super) const TAG_DENSE: usize = 1;
pub(super) const TAG_SPARSE: usize = 5;
pub(super) const TAG_FOLIO: usize = 2;
pub(super) const TAG_SIBLING: usize = 3;
pub(super) const SIBLING_SHIFT: u32 = 3;

// What the tagged words assume, checked when the crate builds: the
// addresses a word holds (nodes, and folios as `Arc::into_raw` gives them)
// leave the tag bits free, the tags are distinct and non-zero (0 is an
// empty slot), and a sibling's number starts just above them.
const _: () = {
    assert!(std::mem::align_of::<Dense>() > TAG_BITS);
    assert!(std::mem::align_of::<Sparse>() > TAG_BITS);
    assert!(std::mem::align_of::<Folio>() > TAG_BITS);
    let tags = [TAG_DENSE, TAG_SPARSE, TAG_FOLIO, TAG_SIBLING];
    let mut i = 0;
    while i < tags.len() {
        assert!(tags[i] != 0 && tags[i] & !TAG_BITS == 0);
        let mut j = i + 1;
        while j < tags.len() {
            assert!(tags[i] != tags[j]);
            j += 1;
        }
        i += 1;
    }
    assert!(1 << SIBLING_SHIFT == TAG_BITS + 1);
    assert!(SPARSE_SLOTS_MAX < SLOTS && SLOTS <= u64::BITS as usize);
};

/// A slot's word, decoded.
#[derive(Clone, Copy)]
pub(super) enum Slot<'a> {
    Empty,
    Node(Node<'a>),
    /// The first slot a folio spans.
    Folio(&'a Folio),
    /// A later slot a folio spans: the number of its first slot.
    Sibling(usize),
}

/// Decodes a word loaded from a slot of a tree that is alive for `'a`.
///
/// # Safety
/// `word` was loaded from a slot (or the root word) of an index whose
/// nodes and folios stay allocated for `'a`: the index's write or read
/// lock is held, or the caller is inside a read section (what writers
/// unlink is released only after every section that could see it).
#[inline]
pub(super) unsafe fn decode<'a>(word: usize) -> Slot<'a> {
    let addr = word & !TAG_BITS;
    match word & TAG_BITS {
        0 => Slot::Empty,
        // SAFETY: the caller's contract; the tag says what the address is.
        TAG_DENSE => Slot::Node(Node::Dense(unsafe { &*(addr as *const Dense) })),
        // SAFETY: TAG_SPARSE marks a `Sparse` node's address (tagged by
        // `Owned::into_word`), and the caller's contract keeps the index's
        // nodes allocated for `'a`.
        TAG_SPARSE => Slot::Node(Node::Sparse(unsafe { &*(addr as *const Sparse) })),
        // SAFETY: TAG_FOLIO marks an address from `Arc::into_raw` (made by
        // `folio_word`): the index's reference, which the caller's contract
        // keeps in the index, so the folio alive, for `'a`.
        TAG_FOLIO => Slot::Folio(unsafe { &*(addr as *const Folio) }),
        _ => Slot::Sibling(word >> SIBLING_SHIFT),
    }
}

pub(super) fn folio_word(folio: Arc<Folio>) -> usize {
    let word = Arc::into_raw(folio) as usize;
    debug_assert_eq!(word & TAG_BITS, 0, "folios are aligned");
    word | TAG_FOLIO
}

pub(super) fn sibling_word(first: usize) -> usize {
    (first << SIBLING_SHIFT) | TAG_SIBLING
}

/// Releases, after every read section that could see it, what an unlinked
/// word owns: a node (only the node: its slots' contents moved to a
/// replacement or were unlinked themselves) or the index's reference to a
/// folio.
pub(super) fn defer_release(word: usize) {
    let word = Unlinked(word);
    epoch::defer(move || {
        let Unlinked(word) = word;
        // SAFETY: unlinked, and handed here once by its last owner.
        unsafe { release_word(word) };
    });
}

/// Frees what `word` owns: a node alone, or the index's folio reference.
///
/// # Safety
/// `word` is a word of this index that no one else owns any more and no
/// reader can still load (or reach through it).
pub(super) unsafe fn release_word(word: usize) {
    let addr = word & !TAG_BITS;
    match word & TAG_BITS {
        // SAFETY: TAG_DENSE marks a `Box<Dense>` leaked by
        // `Owned::into_word`; the caller's contract makes us its last owner,
        // with no reader left to load it, so it is reclaimed once.
        TAG_DENSE => drop(unsafe { Box::from_raw(addr as *mut Dense) }),
        // SAFETY: TAG_SPARSE marks a `Box<Sparse>` leaked by
        // `Owned::into_word`; the caller's contract makes us its last owner,
        // with no reader left to load it, so it is reclaimed once.
        TAG_SPARSE => drop(unsafe { Box::from_raw(addr as *mut Sparse) }),
        // SAFETY: TAG_FOLIO marks the index's reference, made by
        // `folio_word` with `Arc::into_raw`; the caller's contract makes us
        // its last owner, so that one count is given back once.
        TAG_FOLIO => drop(unsafe { Arc::from_raw(addr as *const Folio) }),
        _ => {}
    }
}

/// A word unlinked from the index, on its way to [`epoch::defer`].
pub(super) struct Unlinked(pub(super) usize);
// SAFETY: what the word owns (a node of atomics, an `Arc<Folio>`) may be
// dropped on any thread.
unsafe impl Send for Unlinked {}

/// A node of 64 slots, each a word.
pub(super) struct Dense {
    /// The node's level: 0 holds folios of orders below 6.
    pub(super) level: u32,
    /// Slots in use; written under the index's write lock only.
    pub(super) used: AtomicUsize,
    pub(super) slots: [AtomicUsize; SLOTS],
}

/// A node of few slots: bit `i` of `used_bits` set means slot `i` is in
/// use, its word at `slots[rank of bit i]`. The words change in place; the
/// set of used slots never does.
pub(super) struct Sparse {
    pub(super) level: u32,
    pub(super) used_bits: u64,
    pub(super) slots: Box<[AtomicUsize]>,
}

/// A node, borrowed from the tree.
#[derive(Clone, Copy)]
pub(super) enum Node<'a> {
    Dense(&'a Dense),
    Sparse(&'a Sparse),
}

/// A node not yet in the tree.
pub(super) enum Owned {
    Dense(Box<Dense>),
    Sparse(Box<Sparse>),
}

impl Owned {
    pub(super) fn dense(level: u32, entries: &[(usize, usize)]) -> Owned {
        let slots = std::array::from_fn(|_| AtomicUsize::new(0));
        let node = Dense { level, used: AtomicUsize::new(entries.len()), slots };
        for &(i, w) in entries {
            node.slots[i].store(w, Ordering::Relaxed);
        }
        Owned::Dense(Box::new(node))
    }

    /// A sparse node holding `entries` (slot number, word), in order.
    pub(super) fn sparse(level: u32, entries: &[(usize, usize)]) -> Owned {
        debug_assert!(entries.len() <= SPARSE_SLOTS_MAX && entries.windows(2).all(|w| w[0].0 < w[1].0));
        let used_bits = entries.iter().fold(0u64, |bits, &(i, _)| bits | 1 << i);
        let slots = entries.iter().map(|&(_, w)| AtomicUsize::new(w)).collect();
        Owned::Sparse(Box::new(Sparse { level, used_bits, slots }))
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            Owned::Dense(d) => Node::Dense(d).bytes(),
            Owned::Sparse(s) => Node::Sparse(s).bytes(),
        }
    }

    pub(super) fn into_word(self) -> usize {
        let (addr, tag) = match self {
            Owned::Dense(d) => (Box::into_raw(d) as usize, TAG_DENSE),
            Owned::Sparse(s) => (Box::into_raw(s) as usize, TAG_SPARSE),
        };
        debug_assert_eq!(addr & TAG_BITS, 0, "nodes are aligned");
        addr | tag
    }
}

impl<'a> Node<'a> {
    pub(super) fn level(self) -> u32 {
        match self {
            Node::Dense(d) => d.level,
            Node::Sparse(s) => s.level,
        }
    }

    /// Heap bytes of the node itself (not of what its slots point to).
    pub(super) fn bytes(self) -> usize {
        match self {
            Node::Dense(_) => std::mem::size_of::<Dense>(),
            Node::Sparse(s) => std::mem::size_of::<Sparse>() + std::mem::size_of_val(&*s.slots),
        }
    }

    pub(super) fn used(self) -> usize {
        match self {
            Node::Dense(d) => d.used.load(Ordering::Relaxed),
            Node::Sparse(s) => s.used_bits.count_ones() as usize,
        }
    }

    /// Slot `i`'s word, if the node has one for it (a sparse node has
    /// words only for its used slots).
    #[inline]
    pub(super) fn word(self, i: usize) -> Option<&'a AtomicUsize> {
        match self {
            Node::Dense(d) => Some(&d.slots[i]),
            Node::Sparse(s) => {
                let bit = 1u64 << i;
                if s.used_bits & bit == 0 {
                    None
                } else {
                    s.slots.get((s.used_bits & (bit - 1)).count_ones() as usize)
                }
            }
        }
    }

    #[inline]
    pub(super) fn load(self, i: usize) -> usize {
        self.word(i).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// The used slots from `start` on, in order: (slot number, word).
    pub(super) fn entries_from(self, start: usize) -> impl Iterator<Item = (usize, usize)> + 'a {
        let mut next = start;
        std::iter::from_fn(move || loop {
            if next >= SLOTS {
                return None;
            }
            let i = match self {
                Node::Dense(_) => next,
                Node::Sparse(s) => {
                    let rest = s.used_bits & (u64::MAX << next);
                    if rest == 0 {
                        return None;
                    }
                    rest.trailing_zeros() as usize
                }
            };
            next = i + 1;
            let word = self.load(i);
            if word != 0 {
                return Some((i, word));
            }
        })
    }

    /// Every node below this one, and this one's bytes (tests).
    #[cfg(test)]
    pub(super) fn bytes_below(self) -> usize {
        self.bytes()
            + self
                .entries_from(0)
                // SAFETY: the test owns the index.
                .map(|(_, w)| if let Slot::Node(child) = unsafe { decode(w) } { child.bytes_below() } else { 0 })
                .sum::<usize>()
    }
}

/// The node a word (tagged as a node) points to.
///
/// # Safety
/// As [`decode`].
#[inline]
pub(super) unsafe fn node_at<'a>(word: usize) -> Node<'a> {
    // SAFETY: the caller's contract is `decode`'s: `word` was loaded from a
    // slot of an index whose nodes stay allocated for `'a`.
    match unsafe { decode(word) } {
        Slot::Node(node) => node,
        _ => unreachable!("a node word"),
    }
}

pub(super) fn is_node(word: usize) -> bool {
    matches!(word & TAG_BITS, TAG_DENSE | TAG_SPARSE)
}

/// Puts `word` (not empty) in the empty slot `i` of the node `parent`
/// points to; the node may be replaced (a sparse one), and the old one is
/// released later. Returns the change in the nodes' bytes.
pub(super) fn put(parent: &AtomicUsize, i: usize, word: usize) -> isize {
    // SAFETY: the index's write lock is held (all callers).
    let node = unsafe { node_at(parent.load(Ordering::Relaxed)) };
    debug_assert!(word != 0 && node.load(i) == 0, "slot {i} was empty");
    let used_before = node.used();
    let change = match node {
        Node::Dense(d) => {
            d.slots[i].store(word, Ordering::Release);
            d.used.store(used_before + 1, Ordering::Relaxed);
            0
        }
        Node::Sparse(s) => {
            let mut entries: Vec<(usize, usize)> = node.entries_from(0).collect();
            let at = entries.partition_point(|&(j, _)| j < i);
            entries.insert(at, (i, word));
            let new = if entries.len() > SPARSE_SLOTS_MAX {
                Owned::dense(s.level, &entries)
            } else {
                Owned::sparse(s.level, &entries)
            };
            replace(parent, new)
        }
    };
    // SAFETY: the index's write lock is held (all callers), so the node
    // `parent` now points to (the one holding the slot, perhaps a
    // replacement just published) is freed by no one while we read it.
    debug_assert_eq!(unsafe { node_at(parent.load(Ordering::Relaxed)) }.used(), used_before + 1);
    change
}

/// Where a node stands in the tree: the root keeps its layout (dense
/// stays dense), an inner node may change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeRole {
    Root,
    Inner,
}

/// Empties slot `i` (in use) of the node `parent` points to and returns
/// its word and the change in the nodes' bytes. A dense node left with
/// few slots in use turns sparse, unless it is the root.
pub(super) fn take(parent: &AtomicUsize, i: usize, role: NodeRole) -> (usize, isize) {
    let keep_dense = role == NodeRole::Root;
    // SAFETY: the index's write lock is held (all callers).
    let node = unsafe { node_at(parent.load(Ordering::Relaxed)) };
    let taken = node.load(i);
    debug_assert!(taken != 0, "slot {i} was in use");
    let used_before = node.used();
    let change = match node {
        Node::Dense(d) => {
            d.slots[i].store(0, Ordering::Release);
            d.used.store(used_before - 1, Ordering::Relaxed);
            if !keep_dense && used_before - 1 <= SPARSE_SLOTS_MAX / 2 {
                let entries: Vec<(usize, usize)> = node.entries_from(0).collect();
                replace(parent, Owned::sparse(d.level, &entries))
            } else {
                0
            }
        }
        Node::Sparse(s) => {
            let entries: Vec<(usize, usize)> = node.entries_from(0).filter(|&(j, _)| j != i).collect();
            replace(parent, Owned::sparse(s.level, &entries))
        }
    };
    // SAFETY: the index's write lock is held (all callers), so the node
    // `parent` now points to (perhaps a replacement just published) is
    // freed by no one while we read it.
    debug_assert_eq!(unsafe { node_at(parent.load(Ordering::Relaxed)) }.used(), used_before - 1);
    (taken, change)
}

/// Publishes `new` in `parent` in place of the node there (whose slots it
/// took over), releases the old one later, and returns the change in the
/// nodes' bytes.
pub(super) fn replace(parent: &AtomicUsize, new: Owned) -> isize {
    let new_bytes = new.bytes() as isize;
    let old = parent.swap(new.into_word(), Ordering::AcqRel);
    // SAFETY: the index's write lock is held; `old` stays allocated until
    // the release below runs.
    let old_bytes = unsafe { node_at(old) }.bytes() as isize;
    defer_release(old);
    new_bytes - old_bytes
}

/// Frees a whole unlinked tree: its nodes and the index's references to
/// its folios.
///
/// # Safety
/// `word` is a tree's root word (or 0) that no one else owns and no
/// reader can still walk.
pub(super) unsafe fn release_tree(word: usize) {
    if is_node(word) {
        // SAFETY: the caller's contract: the tree is alive until freed here.
        let children: Vec<(usize, usize)> = unsafe { node_at(word) }.entries_from(0).collect();
        for (_, child) in children {
            // SAFETY: `child` heads a subtree of the tree the caller handed
            // over, so no one else owns it and no reader can walk it; it
            // sits in one slot only, so it is freed once.
            unsafe { release_tree(child) };
        }
    }
    // SAFETY: the caller handed over `word` (no one else owns it, no reader
    // can load it), and a node's children were freed above: only the node
    // or the folio reference itself is left, freed once here.
    unsafe { release_word(word) };
}
