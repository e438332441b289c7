//! wbcache's goals against the kernel, checked on this run's rows: each
//! workload says its own ([`crate::workloads::Workload::targets`]), of its
//! own rows and references, as [`Verdict`]s; the catalog gathers them in
//! the order the workloads give (`crate::workloads::targets`), and this
//! module makes them one table that says which were met.

use std::fmt::Write as _;

use super::{Reference, ResultRow};

/// One goal checked: what it is, what was measured, and whether it was met.
pub struct Verdict {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

impl Verdict {
    pub fn new(target: String, measured: String, met: bool) -> Verdict {
        Verdict { target, measured, met }
    }
}

/// What a workload's goals are checked against besides its rows.
pub struct TargetInputs<'a> {
    /// wbcache's `dirty_limit` in this run, in bytes.
    pub dirty_limit: u64,
    /// The workload's references measured in this run.
    pub references: &'a [&'a Reference],
}

/// The successful row of `engine` in `variant`.
pub fn find_row<'a>(rows: &[&'a ResultRow], variant: Option<&str>, engine: &str) -> Option<&'a ResultRow> {
    rows.iter().copied().find(|r| r.variant.as_deref() == variant && r.engine == engine && r.ok())
}

/// What the result column says of a goal not judged: the figures of one
/// or two runs are shown, but judged only as a median of three or more.
pub const NOT_JUDGED: &str = "run with --repeat 3 to judge";

/// The targets table of the goals checked (`None` when there is none);
/// each met or not when `judged`, else its figures with [`NOT_JUDGED`].
pub fn targets_table(lines: Vec<Verdict>, judged: bool) -> Option<String> {
    if lines.is_empty() {
        return None;
    }
    let mut out = String::from(
        "### targets (wbcache vs the kernel, this run)\n\n| target | measured | result |\n|---|---|---|\n",
    );
    for v in lines {
        let result = match (judged, v.met) {
            (false, _) => NOT_JUDGED,
            (true, true) => "met",
            (true, false) => "NOT met",
        };
        let _ = writeln!(out, "| {} | {} | {result} |", v.target, v.measured);
    }
    Some(out)
}

/// How many goals a targets table (of [`targets`]) lists.
pub fn verdict_count(table: Option<&str>) -> usize {
    table.map_or(0, |t| t.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| target |")).count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ResultRow;
    use crate::workloads::targets;

    fn seq_write(engine: &str, mb_s: f64) -> ResultRow {
        ResultRow {
            workload: "seq-write".into(),
            engine: engine.into(),
            status: "ok".into(),
            throughput_mb_s: Some(mb_s),
            ..ResultRow::default()
        }
    }

    /// Judged, a goal is met or not; not judged (fewer than 3 runs), the
    /// same figures with the way to judge them instead.
    #[test]
    fn goals_are_judged_only_when_asked() {
        let rows = [seq_write("wbcache", 900.0), seq_write("kernel-buffered", 1000.0)];
        let judged = targets(&rows, 1 << 30, &[], true).unwrap();
        assert!(judged.contains("| 900 vs 1000 MB/s | NOT met |"), "{judged}");
        let shown = targets(&rows, 1 << 30, &[], false).unwrap();
        assert!(shown.contains("| 900 vs 1000 MB/s | run with --repeat 3 to judge |"), "{shown}");
        assert!(!shown.contains("met |"), "{shown}");
        assert_eq!(verdict_count(Some(&shown)), 1);
        assert_eq!(verdict_count(targets(&rows[..1], 1 << 30, &[], true).as_deref()), 0);
    }
}
