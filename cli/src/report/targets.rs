//! wbcache's goals against the kernel, checked on this run's rows: each
//! workload says its own ([`crate::workloads::Workload::targets`]), of its
//! own rows and references; this module gathers them into one table, in
//! the order the workloads give, and says which were met.

use std::fmt::Write as _;

use super::{Reference, ResultRow};
use crate::workloads::WORKLOADS;

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

/// wbcache's goals against the kernel, checked on this run's rows (`None`
/// when the rows give no goal to check).
pub fn targets(rows: &[ResultRow], dirty_limit: u64, references: &[Reference]) -> Option<String> {
    let mut workloads = WORKLOADS.to_vec();
    workloads.sort_by_key(|w| w.targets_rank());
    let mut lines: Vec<Verdict> = Vec::new();
    for w in workloads {
        let own_rows: Vec<&ResultRow> = rows.iter().filter(|r| r.is_of(w)).collect();
        let own_references: Vec<&Reference> = references.iter().filter(|r| r.workload == w.name()).collect();
        lines.extend(w.targets(&own_rows, &TargetInputs { dirty_limit, references: &own_references }));
    }
    if lines.is_empty() {
        return None;
    }
    let mut out = String::from(
        "### targets (wbcache vs the kernel, this run)\n\n| target | measured | result |\n|---|---|---|\n",
    );
    for v in lines {
        let _ = writeln!(out, "| {} | {} | {} |", v.target, v.measured, if v.met { "met" } else { "NOT met" });
    }
    Some(out)
}
