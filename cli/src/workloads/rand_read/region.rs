//! The hot region of `rand-read`'s cached variants: `cached-4k` and
//! `cached-4k-written` read 4 KiB at random inside it, and the reader
//! threads (`cached-4k-readers-<threads>`, in `readers`) read every block
//! of the same region, so that their figures stand next to `cached-4k`'s.
//! A quarter of the memory, at most 64 MiB (past the L2 caches, so the
//! copy's memory traffic dominates) and at most the file, in whole 4 KiB
//! blocks.

use crate::workloads::{round_down, Params, KIB, MIB};

/// The region the `cached-4k` variant reads at random.
pub fn cached_span(p: &Params) -> u64 {
    round_down((p.memory / 4).min(64 * MIB).min(p.size), 4 * KIB)
}
