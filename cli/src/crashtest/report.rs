//! What a crash test says: the counts of states per class, and each
//! violation minimized — at each crash point with a failing state, the one
//! that lost the fewest calls (a torn write counts as one); the same lost
//! calls failing at several crash points reported once, with the others
//! named — as a readable trace (the calls since the first pending one,
//! each marked kept, lost or torn) and the command that rebuilds that one
//! state. `--json` writes the same for machines.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::check::{ToCheck, Verdict};
use super::image::Image;
use super::states::{Class, ClassCount, State};
use super::trace::{Call, Trace};

/// One violation, minimized.
#[derive(Clone, Debug)]
pub struct Violation {
    pub state: State,
    pub verdict: Verdict,
    /// Later crash points where the same lost calls failed too.
    pub also_at: Vec<usize>,
}

/// The violations of a run, minimized: per crash point the failing states
/// closest to no crash (each a different way to fail), then one per
/// lost-calls signature, closest first.
pub fn minimal_violations(items: &[ToCheck], verdicts: &[Verdict]) -> Vec<Violation> {
    let mut per_point: BTreeMap<usize, Vec<(&State, &Verdict)>> = BTreeMap::new();
    for (item, verdict) in items.iter().zip(verdicts).filter(|(_, v)| !v.passed) {
        let s = &item.state;
        let closest = per_point.entry(s.point).or_default();
        match closest.first().map(|(best, _)| best.distance()) {
            Some(d) if s.distance() > d => {}
            Some(d) if s.distance() == d => closest.push((s, verdict)),
            _ => *closest = vec![(s, verdict)],
        }
    }
    let mut by_signature: HashMap<_, Violation> = HashMap::new();
    for (point, closest) in per_point {
        for (state, verdict) in closest {
            match by_signature.get_mut(&state.signature()) {
                Some(v) => v.also_at.push(point),
                None => {
                    let v = Violation { state: state.clone(), verdict: verdict.clone(), also_at: Vec::new() };
                    by_signature.insert(state.signature(), v);
                }
            }
        }
    }
    let mut violations: Vec<Violation> = by_signature.into_values().collect();
    // Closest first, then by crash point and by what was lost: the same
    // run reports in the same order (the map above has none).
    violations.sort_by_key(|v| (v.state.distance(), v.state.point, v.state.signature()));
    violations
}

/// Each call said for people, with the names its files had when it was
/// made.
pub fn call_lines(trace: &Trace, initial: &Image) -> Vec<String> {
    let mut names: HashMap<u64, PathBuf> = HashMap::new();
    let mut lines = Vec::with_capacity(trace.records.len());
    for record in &trace.records {
        let name_of = |ino: u64| -> String {
            names
                .get(&ino)
                .map(|p| p.display().to_string())
                .or_else(|| initial.name_of(ino).map(|p| p.display().to_string()))
                .unwrap_or_else(|| format!("inode {ino}"))
        };
        lines.push(record.call.describe(&name_of));
        match &record.call {
            Call::Create { path, ino } => {
                names.insert(*ino, path.clone());
            }
            Call::Rename { from, to } => {
                for name in names.values_mut().filter(|n| n.as_path() == from.as_path()) {
                    *name = to.clone();
                }
                if let Some(ino) = initial.name_of_path(from) {
                    names.entry(ino).or_insert_with(|| to.clone());
                }
            }
            _ => {}
        }
    }
    lines
}

/// How a state treats each call shown in its trace.
fn mark(state: &State, i: usize, is_durable: bool, call: &Call, trace: &Trace) -> String {
    if !call.changes_state() {
        return String::new();
    }
    if let Some((t, kept)) = state.torn.filter(|(t, _)| *t == i) {
        return format!("torn: first {kept} of {} bytes", trace.bytes(t).len());
    }
    if state.lost.contains(&i) {
        "LOST".to_string()
    } else if is_durable {
        "durable".to_string()
    } else {
        "kept".to_string()
    }
}

/// The trace of one violation: the calls from its first pending one to
/// the crash, each marked; long traces keep three calls around each lost
/// or torn one.
pub fn violation_trace(
    v: &Violation,
    item_durable: &dyn Fn(usize) -> bool,
    trace: &Trace,
    lines: &[String],
) -> Vec<String> {
    let s = &v.state;
    let first = s.lost.iter().chain(s.torn.iter().map(|(t, _)| t)).copied().min().unwrap_or(s.point);
    let start = s.kept.iter().copied().min().unwrap_or(first).min(first);
    let marked: Vec<(usize, String)> =
        (start..=s.point).map(|i| (i, mark(s, i, item_durable(i), &trace.records[i].call, trace))).collect();
    let interesting = |i: usize| s.lost.contains(&i) || s.torn.is_some_and(|(t, _)| t == i) || i == s.point;
    let near = |i: usize| marked.len() <= 30 || (i.saturating_sub(3)..=i + 3).any(interesting);
    let mut out = Vec::new();
    let mut skipped = false;
    for (i, m) in &marked {
        if !near(*i) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push("         ...".to_string());
            skipped = false;
        }
        out.push(format!("  [{i:>5}] {:<48} {m}", lines[*i]).trim_end().to_string());
    }
    out
}

/// The command that rebuilds a violation's state into a directory.
pub fn rebuild_command(work: &Path, state: &State) -> String {
    let mut command = format!("wbcache crashtest --rebuild {} --point {}", work.display(), state.point);
    if !state.lost.is_empty() {
        let lost: Vec<String> = state.lost.iter().map(usize::to_string).collect();
        command += &format!(" --lost {}", lost.join(","));
    }
    if let Some((t, n)) = state.torn {
        command += &format!(" --torn {t}:{n}");
    }
    command + " --into DIR"
}

/// The counts line: per class, states checked and left out.
pub fn counts_line(counts: &[ClassCount; 5]) -> String {
    let parts: Vec<String> = Class::ALL
        .iter()
        .map(|c| {
            let n = counts[*c as usize];
            let mut part = format!("{} {}", c.name(), n.explored);
            if n.skipped > 0 || n.duplicates > 0 {
                part += &format!(" (skipped {}, duplicates {})", n.skipped, n.duplicates);
            }
            part
        })
        .collect();
    parts.join(", ")
}

/// The JSON report (`--json`).
#[derive(Serialize)]
pub struct JsonReport {
    pub model: String,
    pub program: Vec<String>,
    pub calls: usize,
    pub durability_points: usize,
    pub crash_points: usize,
    pub states: BTreeMap<String, JsonCount>,
    /// States that had the files and output of an earlier one (their
    /// verdict is its).
    pub same_as_earlier: usize,
    pub violations: Vec<JsonViolation>,
    pub seconds: f64,
    pub work: PathBuf,
}

#[derive(Serialize)]
pub struct JsonCount {
    pub explored: u64,
    pub skipped: u64,
    pub duplicates: u64,
}

#[derive(Serialize)]
pub struct JsonViolation {
    pub point: usize,
    pub class: String,
    pub lost: Vec<usize>,
    pub torn: Option<JsonTorn>,
    pub checker: String,
    pub output: String,
    pub also_at: Vec<usize>,
    pub trace: Vec<String>,
    pub rebuild: String,
}

#[derive(Serialize)]
pub struct JsonTorn {
    pub call: usize,
    pub bytes_kept: u64,
}

/// The JSON counts of every class.
pub fn json_counts(counts: &[ClassCount; 5]) -> BTreeMap<String, JsonCount> {
    Class::ALL
        .iter()
        .map(|c| {
            let n = counts[*c as usize];
            (c.name().to_string(), JsonCount { explored: n.explored, skipped: n.skipped, duplicates: n.duplicates })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;

    fn state(point: usize, lost: Vec<usize>) -> ToCheck {
        let s = State { point, class: Class::OmitOne, kept: BTreeSet::new(), torn: None, lost };
        ToCheck { state: s, durable: Arc::new(BTreeSet::new()) }
    }

    fn verdict(passed: bool) -> Verdict {
        Verdict { passed, ending: if passed { "exit status 0" } else { "exit status 1" }.into(), output: String::new() }
    }

    /// Per crash point the failing state that lost least; one violation
    /// per lost-calls signature, its other crash points named.
    #[test]
    fn violations_are_minimized_and_grouped() {
        let items =
            vec![state(5, vec![1, 2]), state(5, vec![2]), state(5, vec![]), state(9, vec![2]), state(9, vec![3])];
        let verdicts = vec![verdict(false), verdict(false), verdict(true), verdict(false), verdict(true)];
        let v = minimal_violations(&items, &verdicts);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].state.point, v[0].state.lost.clone(), v[0].also_at.clone()), (5, vec![2], vec![9]));
        // Two ways to fail at one distance are two violations.
        let items = vec![state(5, vec![1]), state(5, vec![2])];
        let v = minimal_violations(&items, &[verdict(false), verdict(false)]);
        assert_eq!(v.iter().map(|v| v.state.lost.clone()).collect::<Vec<_>>(), [vec![1], vec![2]]);
    }

    #[test]
    fn the_rebuild_command_names_the_state() {
        let mut s = state(12, vec![3, 4]).state;
        s.torn = Some((7, 512));
        assert_eq!(
            rebuild_command(Path::new("/w"), &s),
            "wbcache crashtest --rebuild /w --point 12 --lost 3,4 --torn 7:512 --into DIR"
        );
    }
}
