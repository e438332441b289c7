//! The crash states to check, as ALICE bounds them: at each crash point,
//! the states in which the pending calls persisted in order up to each one
//! (`prefix`), all but one of them (`omit-one`), one write torn at its
//! first, middle and last unit (`torn`), a later call persisted without
//! an earlier one it does not depend on (`reorder`, nearest pairs first,
//! at most `--states` per crash point), and seeded random combinations
//! beyond that (`sampled`, `--states` per crash point). Every state keeps
//! the durable calls and what the pending ones it keeps depend on; a state
//! met before (the same calls kept, the same output acknowledged) is
//! counted as a duplicate and checked once.

use std::collections::{BTreeSet, HashSet};

use super::image::Kept;
use super::model::{Analysis, CrashPoint};
use super::trace::{Call, Record};

/// The classes of states, in the order they are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    Prefix,
    OmitOne,
    Torn,
    Reorder,
    Sampled,
}

impl Class {
    pub const ALL: [Class; 5] = [Class::Prefix, Class::OmitOne, Class::Torn, Class::Reorder, Class::Sampled];

    pub fn name(self) -> &'static str {
        match self {
            Class::Prefix => "prefix",
            Class::OmitOne => "omit-one",
            Class::Torn => "torn",
            Class::Reorder => "reorder",
            Class::Sampled => "sampled",
        }
    }
}

/// A write a state keeps only the first bytes of: its call and the bytes.
pub type Torn = Option<(usize, u64)>;

/// What makes two states one: the calls applied, the torn write, the
/// output acknowledged.
type StateKey = (Vec<usize>, Torn, u64);

/// One crash state: the crash point, the pending calls it keeps, and the
/// write it keeps only the first bytes of, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub point: usize,
    pub class: Class,
    /// The pending calls kept (the durable ones always are).
    pub kept: BTreeSet<usize>,
    /// A kept write torn: its index and the bytes kept.
    pub torn: Torn,
    /// The pending calls lost, for reports.
    pub lost: Vec<usize>,
}

impl State {
    /// How much of call `i` the state keeps (`None`: lost or not a
    /// call of the state).
    pub fn kept_of(&self, i: usize, cp_durable: &BTreeSet<usize>) -> Option<Kept> {
        match self.torn {
            Some((t, n)) if t == i => Some(Kept::FirstBytes(n)),
            _ if self.kept.contains(&i) || cp_durable.contains(&i) => Some(Kept::Whole),
            _ => None,
        }
    }

    /// What the state loses: its lost calls and its torn write (one
    /// violation per such signature is reported).
    pub fn signature(&self) -> (Vec<usize>, Torn) {
        (self.lost.clone(), self.torn)
    }

    /// How far the state is from no crash at all: the calls lost, a torn
    /// write counting as one (minimal violations are reported).
    pub fn distance(&self) -> usize {
        self.lost.len() + usize::from(self.torn.is_some())
    }
}

/// Per class: states made, and those left out (over the budget, or met
/// before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    pub explored: u64,
    pub skipped: u64,
    pub duplicates: u64,
}

/// The bounds on a crash point's states.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// At most this many `reorder` states, and this many `sampled` ones,
    /// per crash point.
    pub states_per_point: usize,
    pub seed: u64,
}

/// Makes the states of crash points one after another, counting them and
/// dropping the ones met before.
pub struct Enumerator<'a> {
    analysis: &'a Analysis,
    records: &'a [Record],
    bounds: Bounds,
    seen: HashSet<StateKey>,
    pub counts: [ClassCount; 5],
    rng: u64,
}

impl<'a> Enumerator<'a> {
    pub fn new(analysis: &'a Analysis, records: &'a [Record], bounds: Bounds) -> Enumerator<'a> {
        let rng = bounds.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Enumerator { analysis, records, bounds, seen: HashSet::new(), counts: [ClassCount::default(); 5], rng }
    }

    /// The new states of the crash point `cp`, every class.
    pub fn states(&mut self, cp: &CrashPoint) -> Vec<State> {
        let mut out = Vec::new();
        self.prefix_states(cp, &mut out);
        self.omit_one_states(cp, &mut out);
        self.torn_states(cp, &mut out);
        self.reorder_states(cp, &mut out);
        self.sampled_states(cp, &mut out);
        out
    }

    /// Keeps `state` unless it was met before; counts it either way.
    fn offer(
        &mut self,
        cp: &CrashPoint,
        class: Class,
        kept: BTreeSet<usize>,
        torn: Option<(usize, u64)>,
    ) -> Option<State> {
        let count = &mut self.counts[class as usize];
        let mut applied: Vec<usize> = cp.durable.iter().chain(&kept).copied().collect();
        applied.sort_unstable();
        // The output acknowledged in the state: up to the next call.
        let acknowledged = self.records.get(cp.point + 1).map_or(u64::MAX, |next| next.stdout);
        let key = (applied, torn, acknowledged);
        if !self.seen.insert(key) {
            count.duplicates += 1;
            return None;
        }
        count.explored += 1;
        let lost =
            cp.pending.iter().copied().filter(|p| !kept.contains(p) && torn.is_none_or(|(t, _)| t != *p)).collect();
        Some(State { point: cp.point, class, kept, torn, lost })
    }

    /// In order up to each pending call, and all of them.
    fn prefix_states(&mut self, cp: &CrashPoint, out: &mut Vec<State>) {
        let ends = cp.pending.iter().copied().chain([usize::MAX]);
        for end in ends {
            let kept: BTreeSet<usize> = cp.pending.iter().copied().filter(|p| *p < end).collect();
            out.extend(self.offer(cp, Class::Prefix, kept, None));
        }
    }

    /// All pending calls but one (and what depends on it).
    fn omit_one_states(&mut self, cp: &CrashPoint, out: &mut Vec<State>) {
        for &left_out in &cp.pending {
            let wanted: BTreeSet<usize> = cp.pending.iter().copied().filter(|p| *p != left_out).collect();
            let kept = self.analysis.closed(cp, &wanted);
            out.extend(self.offer(cp, Class::OmitOne, kept, None));
        }
    }

    /// Each pending write kept up to its first, middle and last unit
    /// boundary, the calls before it kept.
    fn torn_states(&mut self, cp: &CrashPoint, out: &mut Vec<State>) {
        let unit = self.analysis.kind.tear_unit();
        for &w in &cp.pending {
            let Call::Write { off, len, .. } = self.records[w].call else { continue };
            let before: BTreeSet<usize> = cp.pending.iter().copied().filter(|p| *p < w).collect();
            for cut in tear_points(off, len, unit) {
                out.extend(self.offer(cp, Class::Torn, before.clone(), Some((w, cut))));
            }
        }
    }

    /// A later pending call kept (with what it depends on) while an
    /// earlier one it does not depend on is lost, the calls before the
    /// earlier one kept: nearest pairs first, at most the budget.
    fn reorder_states(&mut self, cp: &CrashPoint, out: &mut Vec<State>) {
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        for (a, &i) in cp.pending.iter().enumerate() {
            for &j in &cp.pending[a + 1..] {
                pairs.push((i, j));
            }
        }
        pairs.sort_by_key(|&(i, j)| (j - i, i));
        let mut made = 0;
        for (n, &(i, j)) in pairs.iter().enumerate() {
            if made == self.bounds.states_per_point {
                self.counts[Class::Reorder as usize].skipped += (pairs.len() - n) as u64;
                break;
            }
            let ancestors = self.analysis.ancestors(j);
            if ancestors.contains(&i) {
                continue;
            }
            let mut wanted: BTreeSet<usize> = cp.pending.iter().copied().filter(|p| *p < i).collect();
            wanted.extend(ancestors.iter().filter(|a| !cp.durable.contains(a)));
            wanted.insert(j);
            let kept = self.analysis.closed(cp, &wanted);
            if kept.contains(&j) {
                made += 1;
                out.extend(self.offer(cp, Class::Reorder, kept, None));
            }
        }
    }

    /// Random combinations of the pending calls (each kept with even
    /// odds), closed under their dependencies.
    fn sampled_states(&mut self, cp: &CrashPoint, out: &mut Vec<State>) {
        if cp.pending.len() < 2 {
            return;
        }
        for _ in 0..self.bounds.states_per_point {
            let wanted: BTreeSet<usize> = cp.pending.iter().copied().filter(|_| self.coin()).collect();
            let kept = self.analysis.closed(cp, &wanted);
            out.extend(self.offer(cp, Class::Sampled, kept, None));
        }
    }

    /// xorshift64: the sampled states follow `--seed` alone.
    fn coin(&mut self) -> bool {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng & 1 == 1
    }
}

/// The bytes a write torn at its first, middle and last `unit` boundary
/// keeps (boundaries of the file's offsets, inside the write).
pub fn tear_points(off: u64, len: u64, unit: u64) -> Vec<u64> {
    let first = (off / unit + 1) * unit;
    let end = off + len;
    if first >= end {
        return Vec::new();
    }
    let last = (end - 1) / unit * unit;
    let boundaries = (last - first) / unit + 1;
    let middle = first + boundaries / 2 * unit;
    let mut cuts: Vec<u64> = [first, middle, last].iter().map(|b| b - off).collect();
    cuts.dedup();
    cuts
}

/// The crash points of a trace: just before each durability point (what
/// it was about to make durable still pending) and just after it, and
/// after the last call. A crash between two of them leaves a state of
/// the one before the next durability point (its `prefix` states are the
/// crashes in between).
pub fn crash_points(records: &[Record]) -> Vec<usize> {
    let mut points = BTreeSet::new();
    for (i, _) in records.iter().enumerate().filter(|(_, r)| r.call.is_durability_point()) {
        if i > 0 {
            points.insert(i - 1);
        }
        points.insert(i);
    }
    points.extend(records.len().checked_sub(1));
    points.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::image::Image;
    use super::super::model::ModelKind;
    use super::super::trace::WriteSync;
    use super::*;

    fn rec(call: Call) -> Record {
        Record { call, stdout: 0 }
    }

    #[test]
    fn writes_tear_at_the_units_inside_them() {
        assert_eq!(tear_points(0, 4096, 512), [512, 2048, 3584]);
        assert_eq!(tear_points(100, 1000, 512), [412, 924]);
        assert_eq!(tear_points(0, 512, 512), Vec::<u64>::new(), "one sector does not tear");
        assert_eq!(tear_points(0, 8192, 4096), [4096]);
    }

    #[test]
    fn crash_points_follow_durability_points_and_the_end() {
        let records: Vec<Record> = vec![
            Call::Create { path: PathBuf::from("a"), ino: 1 },
            Call::Fsync { ino: 1 },
            Call::Write { ino: 1, off: 0, len: 1, data_at: 0, sync: WriteSync::None },
        ]
        .into_iter()
        .map(rec)
        .collect();
        assert_eq!(crash_points(&records), [0, 1, 2]);
    }

    /// create, two writes of one file, no sync (posix): every class has
    /// states, none repeats, each keeps what its calls depend on.
    #[test]
    fn every_class_makes_states_and_none_repeats() {
        let records: Vec<Record> = vec![
            Call::Create { path: PathBuf::from("a"), ino: 1 },
            Call::Write { ino: 1, off: 0, len: 1024, data_at: 0, sync: WriteSync::None },
            Call::Truncate { ino: 1, size: 10 },
            Call::Write { ino: 1, off: 0, len: 10, data_at: 0, sync: WriteSync::None },
        ]
        .into_iter()
        .map(rec)
        .collect();
        let analysis = Analysis::new(ModelKind::Posix, &records, &Image::default());
        let cp = analysis.crash_point(&records, 3);
        assert_eq!(cp.pending, [0, 1, 2, 3]);
        let mut e = Enumerator::new(&analysis, &records, Bounds { states_per_point: 8, seed: 1 });
        let states = e.states(&cp);
        for class in [Class::Prefix, Class::OmitOne, Class::Torn, Class::Reorder] {
            assert!(states.iter().any(|s| s.class == class), "{class:?}");
        }
        for s in &states {
            assert!(!s.kept.contains(&3) || s.kept.contains(&2), "the write after the truncation keeps it: {s:?}");
        }
        let keys: HashSet<_> = states.iter().map(|s| (s.kept.clone(), s.torn)).collect();
        assert_eq!(keys.len(), states.len());
        assert_eq!(e.states(&cp), Vec::new(), "a crash point met again adds nothing");
        assert!(e.counts[Class::Prefix as usize].duplicates > 0);
        let torn: Vec<_> = states.iter().filter_map(|s| s.torn).collect();
        assert_eq!(torn, [(1, 512)], "the 1 KiB write tears at its one inner sector");
    }
}
