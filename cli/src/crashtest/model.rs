//! Persistence models: what a crash after a given call may keep of the
//! calls before it.
//!
//! A model says, for each call of the trace, which earlier calls must
//! persist if it does (its dependencies: an append after the truncate
//! before it, a rename after the create of its name), and, at a crash
//! point, which calls are durable (kept by every crash state) and which
//! are pending (each may or may not persist, in any combination the
//! dependencies allow, a write torn at the model's unit). The rules, and
//! the sources they follow, are in docs/crashtest.md; each is tested
//! below on a small trace.
//!
//! - `posix`: nothing is durable unless synced. A file's data and size by
//!   `fsync`/`fdatasync` of that file (or an `O_SYNC`/`O_DSYNC` write, or
//!   `sync_file_range` with wait for data within the size); a name by
//!   `fsync` of its directory; everything by `sync`. Writes tear at
//!   512-byte sectors.
//! - `ext4-ordered`: ext4's `data=ordered` journal. Name changes,
//!   truncations and allocations persist as an ordered prefix, and any
//!   `fsync` (of any file or directory) commits all of them before it;
//!   file data as in `posix` but torn at 4096-byte blocks, an append's
//!   size never without its data; `auto_da_alloc`: a rename over an
//!   existing file persists only with the renamed file's data, and a file
//!   truncated to zero and closed has its data persist before any later
//!   name change.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::image::{Entry, Image};
use super::trace::{Call, Record, WriteSync};

/// `fallocate(2)`'s `FALLOC_FL_KEEP_SIZE`.
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;

/// A persistence model (`--model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    Posix,
    Ext4Ordered,
}

impl ModelKind {
    pub fn parse(name: &str) -> Option<ModelKind> {
        match name {
            "posix" => Some(ModelKind::Posix),
            "ext4-ordered" => Some(ModelKind::Ext4Ordered),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Posix => "posix",
            ModelKind::Ext4Ordered => "ext4-ordered",
        }
    }

    /// The unit a pending write may be torn at: a state keeps a write's
    /// bytes up to one of these boundaries.
    pub fn tear_unit(self) -> u64 {
        match self {
            ModelKind::Posix => 512,
            ModelKind::Ext4Ordered => 4096,
        }
    }
}

/// What a model makes of a whole trace: each call's dependencies, and
/// what the durability rules need to know of each call.
#[derive(Debug)]
pub struct Analysis {
    pub kind: ModelKind,
    /// The earlier calls each call persists only with (direct ones).
    pub deps: Vec<Vec<usize>>,
    /// Whether a write grows its file (its size then persists with it,
    /// never through `sync_file_range`).
    extends: Vec<bool>,
    /// ext4-ordered: whether the call is journaled metadata.
    journaled: Vec<bool>,
}

/// What a crash after call `point` may keep.
#[derive(Debug, Clone)]
pub struct CrashPoint {
    /// The last call before the crash.
    pub point: usize,
    /// The calls up to `point` every state keeps.
    pub durable: BTreeSet<usize>,
    /// The calls up to `point` that change the files and may be lost.
    pub pending: Vec<usize>,
}

impl Analysis {
    /// The model's view of `records`, the recorded directory having been
    /// `initial` before the run.
    pub fn new(kind: ModelKind, records: &[Record], initial: &Image) -> Analysis {
        let mut tracker = Tracker::new(initial);
        let mut deps = Vec::with_capacity(records.len());
        let mut extends = Vec::with_capacity(records.len());
        let mut journaled = Vec::with_capacity(records.len());
        let mut last_journaled: Option<usize> = None;
        // ext4's auto_da_alloc: writes of a file truncated to zero, to be
        // written before the next name change once the file is closed.
        let mut flushed_at_close: Vec<usize> = Vec::new();
        for (i, record) in records.iter().enumerate() {
            let call = &record.call;
            let mut mine = tracker.dependencies(call);
            extends.push(tracker.extends(call));
            let is_journaled = kind == ModelKind::Ext4Ordered && is_metadata(call);
            journaled.push(is_journaled);
            if is_journaled {
                mine.extend(last_journaled);
                mine.append(&mut flushed_at_close);
                if let Call::Rename { from, to } = call {
                    if tracker.exists(to) {
                        mine.extend(tracker.file_changes(tracker.ino_at(from)));
                    }
                }
                last_journaled = Some(i);
            }
            if kind == ModelKind::Ext4Ordered {
                if let Call::Close { ino } = call {
                    if tracker.truncated_to_zero(*ino) {
                        flushed_at_close.extend(tracker.file_changes(Some(*ino)));
                    }
                }
            }
            mine.sort_unstable();
            mine.dedup();
            assert!(mine.iter().all(|d| *d < i), "a call depends only on earlier calls");
            deps.push(mine);
            tracker.note(i, call);
        }
        Analysis { kind, deps, extends, journaled }
    }

    /// What a crash right after call `point` may keep.
    pub fn crash_point(&self, records: &[Record], point: usize) -> CrashPoint {
        let mut durable = vec![false; point + 1];
        for i in 0..=point {
            durable[i] = !records[i].call.changes_state() || self.made_durable(records, i, point);
        }
        // What a durable call persists with is durable too.
        for i in (0..=point).rev() {
            if durable[i] {
                for &d in &self.deps[i] {
                    durable[d] = true;
                }
            }
        }
        let pending = (0..=point).filter(|&i| !durable[i]).collect();
        let durable = (0..=point).filter(|&i| durable[i] && records[i].call.changes_state()).collect();
        CrashPoint { point, durable, pending }
    }

    /// Whether a later call up to `point` makes call `i` durable.
    fn made_durable(&self, records: &[Record], i: usize, point: usize) -> bool {
        let call = &records[i].call;
        if let Call::Write { sync, .. } = call {
            if *sync != WriteSync::None {
                return true;
            }
        }
        let later = &records[i + 1..=point];
        if later.iter().any(|r| r.call == Call::Sync) {
            return true;
        }
        if self.journaled[i] {
            return later.iter().any(|r| commits_the_journal(&r.call));
        }
        if let Some(ino) = call.file().filter(|_| !call.is_namespace()) {
            return later.iter().any(|r| match &r.call {
                Call::Fsync { ino: x } | Call::Fdatasync { ino: x } => *x == ino,
                Call::SyncRange { ino: x, off, len } => *x == ino && !self.extends[i] && covers(call, *off, *len),
                Call::Write { ino: x, sync, .. } => *x == ino && *sync != WriteSync::None,
                _ => false,
            });
        }
        // A name: durable once every directory it changes is synced.
        call.directories().iter().all(|dir| later.iter().any(|r| r.call == Call::FsyncDir { path: dir.clone() }))
    }

    /// Every call `i` persists only with, directly or not.
    pub fn ancestors(&self, i: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<usize> = self.deps[i].clone();
        while let Some(d) = todo.pop() {
            if seen.insert(d) {
                todo.extend(&self.deps[d]);
            }
        }
        seen
    }

    /// The calls of `wanted` (pending calls of `cp`) that can persist
    /// together: a call is kept only if every call it depends on is
    /// durable or kept.
    pub fn closed(&self, cp: &CrashPoint, wanted: &BTreeSet<usize>) -> BTreeSet<usize> {
        let mut kept = BTreeSet::new();
        for &p in &cp.pending {
            let deps_in = self.deps[p].iter().all(|d| cp.durable.contains(d) || kept.contains(d));
            if wanted.contains(&p) && deps_in {
                kept.insert(p);
            }
        }
        kept
    }
}

/// Whether a call is ext4 journal metadata: a name change, a truncation,
/// an allocation that changes the size.
fn is_metadata(call: &Call) -> bool {
    match call {
        Call::Truncate { .. } => true,
        Call::Fallocate { mode, .. } => mode & FALLOC_FL_KEEP_SIZE == 0,
        _ => call.is_namespace(),
    }
}

/// Whether a call commits ext4's journal (every earlier metadata change
/// persists).
fn commits_the_journal(call: &Call) -> bool {
    match call {
        Call::Fsync { .. } | Call::Fdatasync { .. } | Call::FsyncDir { .. } | Call::Sync => true,
        Call::Write { sync, .. } => *sync != WriteSync::None,
        _ => false,
    }
}

/// Whether the byte range of a write lies within `[off, off + len)`
/// (`len` 0: to the end of the file).
fn covers(call: &Call, off: u64, len: u64) -> bool {
    match call {
        Call::Write { off: w, len: n, .. } => *w >= off && (len == 0 || w + n <= off + len),
        _ => false,
    }
}

/// Names, files and sizes along the trace, for the dependencies.
struct Tracker {
    /// The call that last made each name exist (absent: it existed
    /// before the run, or does not exist).
    made_by: HashMap<PathBuf, usize>,
    /// Names that exist now.
    names: HashMap<PathBuf, Option<u64>>,
    sizes: HashMap<u64, u64>,
    /// Each file's calls that changed its bytes or size since its last
    /// truncation to zero or its creation (that truncation included).
    changes: HashMap<u64, Vec<usize>>,
    /// The last truncation of each file.
    last_truncate: HashMap<u64, usize>,
    zeroed: HashSet<u64>,
}

impl Tracker {
    fn new(initial: &Image) -> Tracker {
        let mut names = HashMap::new();
        let mut sizes = HashMap::new();
        for (name, bytes) in initial.contents() {
            let ino = match initial.entry(&name) {
                Some(Entry::File(ino)) => Some(ino),
                _ => None,
            };
            if let (Some(ino), Some(bytes)) = (ino, bytes) {
                sizes.insert(ino, bytes.len() as u64);
            }
            names.insert(name, ino);
        }
        Tracker {
            made_by: HashMap::new(),
            names,
            sizes,
            changes: HashMap::new(),
            last_truncate: HashMap::new(),
            zeroed: HashSet::new(),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        self.names.contains_key(path)
    }

    fn ino_at(&self, path: &Path) -> Option<u64> {
        self.names.get(path).copied().flatten()
    }

    fn file_changes(&self, ino: Option<u64>) -> Vec<usize> {
        ino.and_then(|ino| self.changes.get(&ino)).cloned().unwrap_or_default()
    }

    fn truncated_to_zero(&self, ino: u64) -> bool {
        self.zeroed.contains(&ino)
    }

    /// The call that made `path`'s parent directory, if the trace did.
    fn parent_maker(&self, path: &Path) -> Option<usize> {
        path.parent().and_then(|p| self.made_by.get(p)).copied()
    }

    /// A call's direct dependencies, both models.
    fn dependencies(&self, call: &Call) -> Vec<usize> {
        let mut deps = Vec::new();
        match call {
            Call::Truncate { ino, .. } | Call::Write { ino, .. } | Call::Fallocate { ino, .. } => {
                deps.extend(self.last_truncate.get(ino));
            }
            Call::Create { path, .. } | Call::Mkdir { path } => deps.extend(self.parent_maker(path)),
            Call::Unlink { path } | Call::Rmdir { path } => deps.extend(self.made_by.get(path)),
            Call::Rename { from, to } | Call::Link { from, to } => {
                deps.extend(self.made_by.get(from));
                deps.extend(self.parent_maker(to));
            }
            _ => {}
        }
        deps
    }

    /// Whether a write grows its file.
    fn extends(&self, call: &Call) -> bool {
        match call {
            Call::Write { ino, off, len, .. } => off + len > self.sizes.get(ino).copied().unwrap_or(0),
            _ => false,
        }
    }

    /// Follows call `i`.
    fn note(&mut self, i: usize, call: &Call) {
        match call {
            Call::Create { path, ino } => {
                self.made_by.insert(path.clone(), i);
                self.names.insert(path.clone(), Some(*ino));
                self.sizes.insert(*ino, 0);
                self.changes.insert(*ino, Vec::new());
                self.zeroed.remove(ino);
            }
            Call::Mkdir { path } => {
                self.made_by.insert(path.clone(), i);
                self.names.insert(path.clone(), None);
            }
            Call::Unlink { path } | Call::Rmdir { path } => {
                self.made_by.remove(path);
                self.names.remove(path);
            }
            Call::Rename { from, to } => {
                let ino = self.names.remove(from).flatten();
                self.made_by.remove(from);
                self.made_by.insert(to.clone(), i);
                self.names.insert(to.clone(), ino);
            }
            Call::Link { to, from } => {
                let ino = self.ino_at(from);
                self.made_by.insert(to.clone(), i);
                self.names.insert(to.clone(), ino);
            }
            Call::Truncate { ino, size } => {
                self.sizes.insert(*ino, *size);
                self.last_truncate.insert(*ino, i);
                if *size == 0 {
                    self.changes.insert(*ino, vec![i]);
                    self.zeroed.insert(*ino);
                } else {
                    self.changes.entry(*ino).or_default().push(i);
                }
            }
            Call::Write { ino, off, len, .. } => {
                let size = self.sizes.entry(*ino).or_default();
                *size = (*size).max(off + len);
                self.changes.entry(*ino).or_default().push(i);
            }
            Call::Fallocate { ino, mode, off, len } => {
                if mode & FALLOC_FL_KEEP_SIZE == 0 {
                    let size = self.sizes.entry(*ino).or_default();
                    *size = (*size).max(off + len);
                }
                self.changes.entry(*ino).or_default().push(i);
            }
            Call::Close { ino } => {
                self.zeroed.remove(ino);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(call: Call) -> Record {
        Record { call, stdout: 0 }
    }

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn write(ino: u64, off: u64, len: u64) -> Call {
        Call::Write { ino, off, len, data_at: 0, sync: WriteSync::None }
    }

    fn pending(kind: ModelKind, calls: Vec<Call>, initial: &Image) -> (Vec<usize>, Vec<usize>) {
        let records: Vec<Record> = calls.into_iter().map(rec).collect();
        let a = Analysis::new(kind, &records, initial);
        let cp = a.crash_point(&records, records.len() - 1);
        (cp.durable.into_iter().collect(), cp.pending)
    }

    /// create, write, fsync the file: under posix its name is not
    /// durable (the directory was not synced); under ext4-ordered the
    /// fsync commits the create.
    #[test]
    fn a_file_fsync_persists_its_name_only_on_ext4() {
        let calls = || vec![Call::Create { path: p("a"), ino: 1 }, write(1, 0, 10), Call::Fsync { ino: 1 }];
        assert_eq!(pending(ModelKind::Posix, calls(), &Image::default()), (vec![1], vec![0]));
        assert_eq!(pending(ModelKind::Ext4Ordered, calls(), &Image::default()), (vec![0, 1], vec![]));
    }

    /// With the directory synced too, nothing is pending under either.
    #[test]
    fn file_and_directory_synced_leave_nothing_pending() {
        for kind in [ModelKind::Posix, ModelKind::Ext4Ordered] {
            let calls = vec![
                Call::Create { path: p("a.tmp"), ino: 1 },
                write(1, 0, 10),
                Call::Fsync { ino: 1 },
                Call::Rename { from: p("a.tmp"), to: p("a") },
                Call::FsyncDir { path: PathBuf::new() },
            ];
            assert_eq!(pending(kind, calls, &Image::default()), (vec![0, 1, 3], vec![]), "{kind:?}");
        }
    }

    /// A rename over an existing file without fsync: under ext4-ordered
    /// it persists only with the new file's data (auto_da_alloc); under
    /// posix it does not depend on it.
    #[test]
    fn rename_over_an_existing_file_waits_for_its_data_only_on_ext4() {
        let mut initial = Image::default();
        initial.apply(&Call::Create { path: p("a"), ino: 9 }, &[], super::super::image::Kept::Whole);
        let records: Vec<Record> = vec![
            Call::Create { path: p("a.tmp"), ino: 1 },
            write(1, 0, 10),
            Call::Rename { from: p("a.tmp"), to: p("a") },
        ]
        .into_iter()
        .map(rec)
        .collect();
        let posix = Analysis::new(ModelKind::Posix, &records, &initial);
        let ext4 = Analysis::new(ModelKind::Ext4Ordered, &records, &initial);
        assert_eq!(posix.deps[2], [0]);
        assert_eq!(ext4.deps[2], [0, 1], "the rename waits for the data");
        // A rename to a new name does not.
        let fresh = Analysis::new(ModelKind::Ext4Ordered, &records, &Image::default());
        assert_eq!(fresh.deps[2], [0]);
    }

    /// ext4's journal: name changes persist in order (each depends on the
    /// one before); posix keeps only true dependencies.
    #[test]
    fn ext4_keeps_name_changes_in_order() {
        let records: Vec<Record> = vec![
            Call::Create { path: p("a"), ino: 1 },
            Call::Create { path: p("b"), ino: 2 },
            write(2, 0, 5),
            Call::Unlink { path: p("a") },
        ]
        .into_iter()
        .map(rec)
        .collect();
        let ext4 = Analysis::new(ModelKind::Ext4Ordered, &records, &Image::default());
        assert_eq!(ext4.deps, [vec![], vec![0], vec![], vec![0, 1]]);
        let posix = Analysis::new(ModelKind::Posix, &records, &Image::default());
        assert_eq!(posix.deps, [vec![], vec![], vec![], vec![0]]);
    }

    /// An append after a truncation persists only with it; an fdatasync
    /// makes both durable; sync_file_range does not make an append
    /// durable (its size is metadata) but does an overwrite.
    #[test]
    fn writes_keep_their_truncation_and_sync_file_range_covers_overwrites_only() {
        let mut initial = Image::default();
        initial.apply(&Call::Create { path: p("f"), ino: 3 }, &[], super::super::image::Kept::Whole);
        initial.apply(&write(3, 0, 8192), &[0; 8192], super::super::image::Kept::Whole);
        let calls = vec![
            Call::Truncate { ino: 3, size: 0 },
            write(3, 0, 100),
            Call::SyncRange { ino: 3, off: 0, len: 0 },
            Call::Fdatasync { ino: 3 },
        ];
        let records: Vec<Record> = calls.into_iter().map(rec).collect();
        let a = Analysis::new(ModelKind::Posix, &records, &initial);
        assert_eq!(a.deps[1], [0]);
        let before_fdatasync = a.crash_point(&records, 2);
        assert_eq!(before_fdatasync.pending, [0, 1], "the append grew the file: sync_file_range left it");
        assert!(a.crash_point(&records, 3).pending.is_empty());
        let overwrite: Vec<Record> =
            vec![write(3, 0, 100), Call::SyncRange { ino: 3, off: 0, len: 4096 }].into_iter().map(rec).collect();
        let a = Analysis::new(ModelKind::Posix, &overwrite, &initial);
        assert!(a.crash_point(&overwrite, 1).pending.is_empty());
    }

    /// A file truncated to zero, rewritten and closed has its data
    /// persist before the next name change on ext4.
    #[test]
    fn ext4_flushes_a_truncated_file_at_close_before_later_name_changes() {
        let calls = vec![
            Call::Truncate { ino: 4, size: 0 },
            write(4, 0, 10),
            Call::Close { ino: 4 },
            Call::Create { path: p("marker"), ino: 5 },
        ];
        let records: Vec<Record> = calls.into_iter().map(rec).collect();
        let ext4 = Analysis::new(ModelKind::Ext4Ordered, &records, &Image::default());
        assert_eq!(ext4.deps[3], [0, 1]);
        let posix = Analysis::new(ModelKind::Posix, &records, &Image::default());
        assert!(posix.deps[3].is_empty());
    }

    /// A sync makes everything durable; closing drops what depends on a
    /// call left out.
    #[test]
    fn sync_makes_everything_durable_and_closing_keeps_dependencies() {
        let calls = vec![Call::Mkdir { path: p("d") }, Call::Create { path: p("d/a"), ino: 1 }, Call::Sync];
        assert_eq!(pending(ModelKind::Posix, calls, &Image::default()), (vec![0, 1], vec![]));
        let records: Vec<Record> =
            vec![Call::Mkdir { path: p("d") }, Call::Create { path: p("d/a"), ino: 1 }].into_iter().map(rec).collect();
        let a = Analysis::new(ModelKind::Posix, &records, &Image::default());
        let cp = a.crash_point(&records, 1);
        assert_eq!(a.closed(&cp, &BTreeSet::from([1])), BTreeSet::new(), "no file without its directory");
        assert_eq!(a.closed(&cp, &BTreeSet::from([0, 1])), BTreeSet::from([0, 1]));
        assert_eq!(a.ancestors(1), BTreeSet::from([0]));
    }
}
