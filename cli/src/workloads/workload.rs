//! What a workload is: the [`Workload`] trait every workload module
//! implements, its catalog entry ([`WorkloadInfo`]), and the [`Group`]s
//! its selection makes (one workload and variant, run once per engine),
//! with what every group's measurement goes through whatever its
//! workload: its spec ([`build_spec`]) and its outcome turned into rows
//! ([`rows_from`]). A group carries the workload that made it
//! ([`Group::owner`]) and the workload's own typed description of it
//! ([`Group::shape`]), which only that workload reads; shared code asks
//! the group, never a name.
//!
//! This module stands below every workload module, which builds on it, and
//! names none of them: the catalog, which names them all, is the folder's
//! own file, above them.

use std::any::Any;
use std::fmt;
use std::io;
use std::sync::Arc;

use crate::bench_worker::{JobContext, JobRaw, JobResult, Outcome, Status};
use crate::engines::{EngineKind, Target};
#[cfg(doc)]
use crate::report::field_names;
use crate::report::{
    aggregate, device_account_of, failed_row, markdown_table, round6, Reference, ResultRow, RowGroup, TargetInputs,
    Verdict,
};
use crate::spec::{Jobs, Params, Place, Spec};

/// A workload's catalog entry (`--help`, `--list`, the tables' headings).
pub struct WorkloadInfo {
    pub name: &'static str,
    /// What it measures, in one short line (`--help`).
    pub summary: &'static str,
    /// What it does, in full (`--list`, the tables' headings).
    pub about: &'static str,
    /// What the workload stands for in an application, in plain words.
    pub models: &'static str,
    /// The public measurement it follows (a patch series by its subject
    /// line, a libMicro case, the tool it runs), if there is one.
    pub source: Option<&'static str>,
}

/// What the command line gives the expansion of workload names besides the
/// names.
#[derive(Clone, Copy)]
pub struct Selection<'a> {
    /// The small-overwrite variants `small-overwrite` stands for (`None`:
    /// all of them).
    pub overwrite_subset: Option<&'a [&'a str]>,
    /// The writeback worker counts parallel-writeback's wbcache rows try.
    pub writeback_workers: &'a [u32],
}

/// What a measurement needs from outside the engines before its reference
/// figures are measured (see [`Workload::references`]).
pub struct ReferenceContext<'a> {
    pub params: &'a Params,
    pub place: &'a Place,
    /// Says a line under the progress display.
    pub note: &'a mut dyn FnMut(&str),
}

/// One workload (or a family sharing an implementation: one value per
/// catalog entry). The groups it makes carry it, and every question about a
/// group, a job or a row of its goes to it. Methods with a default are the
/// generic behaviour: a workload overrides where it differs.
pub trait Workload: Sync {
    /// Its catalog entry.
    fn info(&self) -> &WorkloadInfo;

    /// Its name on the command line and in the JSON.
    fn name(&self) -> &'static str {
        self.info().name
    }

    // --- Selection ---

    /// Its groups: all of them (`selector` `None`, the workload named
    /// alone), or those `name/<selector>` selects; `None` when the
    /// selector names none.
    fn groups(&'static self, selector: Option<&str>, selection: &Selection<'_>) -> Option<Vec<Group>>;

    /// The groups a name on the command line selects, if it is this
    /// workload's name or `<name>/<selector>`.
    fn select(&'static self, name: &str, selection: &Selection<'_>) -> Option<Vec<Group>> {
        if name == self.name() {
            return self.groups(None, selection);
        }
        let selector = name.strip_prefix(self.name())?.strip_prefix('/')?;
        self.groups(Some(selector), selection)
    }

    /// More about its variants for `--list`, after the catalog.
    fn listed_variants(&self) -> Option<String> {
        None
    }

    /// Whether the default and quick suites run it.
    fn in_default_suite(&self) -> bool {
        true
    }

    /// Whether `--writeback-workers` applies to it.
    fn takes_writeback_workers(&self) -> bool {
        false
    }

    /// The engines it runs on, when not every one (said in the note or
    /// error about groups left out): by default all but `wbcache-preload`,
    /// which a workload runs only when every call it makes is one the
    /// preload library serves.
    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&EngineKind::WITHOUT_PRELOAD)
    }

    /// Whether `group` runs on `engine`.
    fn runs_on(&self, _group: &Group, engine: EngineKind) -> bool {
        self.only_on().is_none_or(|only| only.contains(&engine))
    }

    // --- One group's measurement ---

    /// The group's name in the progress display.
    fn label(&self, group: &Group) -> String {
        match &group.variant {
            Some(v) => format!("{} {v}", group.workload),
            None => group.workload.to_string(),
        }
    }

    /// Whether the group reads the shared data file (real data, laid out
    /// before the runs).
    fn needs_data(&self, _group: &Group) -> bool {
        false
    }

    /// Files of its own the runner lays out (real data) before the group
    /// runs.
    fn files_to_lay_out(&self, _group: &Group, _place: &Place) -> Vec<Target> {
        Vec::new()
    }

    /// What the group does, with this run's sizes (table headings).
    fn describe(&self, group: &Group, p: &Params) -> String;

    /// The group's jobs on `engine`; `name` names its new files.
    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs;

    /// The wbcache options the group runs with.
    fn wbcache_options(&self, _group: &Group, p: &Params) -> String {
        p.wbcache_options.clone()
    }

    /// Seconds a measurement may take beyond twice its deadline and a
    /// minute before it is killed (a setup that takes long).
    fn timeout_allowance_s(&self, _spec: &Spec) -> f64 {
        0.0
    }

    /// Runs one of its jobs whose pattern is its own
    /// ([`Pattern::Own`](crate::spec::Pattern::Own)), on the job's thread
    /// in the worker (the generic patterns are the worker's).
    /// [`JobContext::run_timed`] is the generic course of a job around a
    /// timed phase; a job may also take its own course (`sqlite` loads a
    /// database, an external program would run here).
    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        Err(io::Error::other(format!("{}: no job of its own to run", ctx.spec.workload)))
    }

    // --- Results ---

    /// The rows of one successful measurement of `group` on `engine`.
    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        vec![aggregate(group, engine, group.variant.clone(), jobs, o)]
    }

    /// Figures of its rows that depend on other rows of its (all rows so
    /// far are given; it changes only its own), after each measurement.
    fn after_rows(&self, _rows: &mut [ResultRow]) {}

    /// The fields of its rows' own figures, the type it writes with
    /// [`ResultRow::set_own`], in their order: `field_names::<T>()`
    /// ([`field_names`]); none by default. The catalog makes the JSON's
    /// columns of them.
    fn own_fields(&self) -> Vec<String> {
        Vec::new()
    }

    /// The figure of a measurement's first row by which `--repeat` picks
    /// the median run: by default µs per call for per-call rows, else
    /// MB/s.
    fn primary_figure(&self, row: &ResultRow) -> Option<f64> {
        row.us_per_call.or(row.throughput_mb_s)
    }

    /// Whether a row has a line in the group's throughput chart: by
    /// default, the rows that are not per call (which have no stream to
    /// chart).
    fn charts_throughput(&self, row: &ResultRow) -> bool {
        row.us_per_call.is_none()
    }

    /// What one latency of its rows is of (the latency chart's title).
    fn latency_of(&self) -> &'static str {
        "call"
    }

    /// The progress display's line for a measurement's successful rows.
    fn summary(&self, rows: &[ResultRow]) -> String {
        crate::report::summary(rows)
    }

    /// Figures measured without an engine that put the group's in context,
    /// measured once the group ran (and printed under its table).
    fn references(&self, _group: &Group, _ctx: &mut ReferenceContext<'_>) -> Vec<Reference> {
        Vec::new()
    }

    /// A row's label in charts.
    fn series_label(&self, row: &ResultRow) -> String {
        row.engine.clone()
    }

    /// A row's line in the throughput chart: colour and dash.
    fn line_style(&self, row: &ResultRow) -> (&'static str, &'static str) {
        (crate::svg::engine_color(&row.engine), "")
    }

    /// A measurement's line in the dirty-bytes chart: label, colour and
    /// dash (the rows of one measurement share it).
    fn dirty_line(&self, row: &ResultRow) -> (String, &'static str, &'static str) {
        (row.engine.clone(), crate::svg::engine_color(&row.engine), "")
    }

    /// Charts of its own besides the per-group ones, of its rows among
    /// `rows` (every successful and failed row of the run): `(file name,
    /// SVG)`.
    fn charts(&self, _rows: &[ResultRow], _subtitle: &str) -> Vec<(String, String)> {
        Vec::new()
    }

    // --- Its report section ---

    /// What its groups of this run do, for its table's heading.
    fn about(&self, groups: &[&Group], p: &Params) -> String {
        described(groups, p)
    }

    /// What it models and follows, after its table's description.
    fn context(&self) -> String {
        let w = self.info();
        let source = w.source.map(|s| format!(" Follows {s}.")).unwrap_or_default();
        format!(" Models {}.{source}", w.models)
    }

    /// Its table, under `about`, of its rows.
    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        markdown_table(self.name(), about, rows)
    }

    /// Whether its foreground reads or commits share the disk with
    /// writeback: its table is then followed by the device tables (the
    /// block layer's counters and the cache's device account).
    fn shares_the_disk(&self) -> bool {
        false
    }

    /// Its goals for wbcache, checked on its rows of this run.
    fn targets(&self, _rows: &[&ResultRow], _inputs: &TargetInputs<'_>) -> Vec<Verdict> {
        Vec::new()
    }

    /// Where its lines come in the targets table (lower first; equal ranks
    /// in catalog order).
    fn targets_rank(&self) -> u32 {
        u32::MAX
    }
}

impl fmt::Debug for dyn Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The description of a lone group, or `"<variant>: <description>"` of
/// each, `; ` between them: a heading's groups.
pub fn described(groups: &[&Group], p: &Params) -> String {
    if groups.len() == 1 {
        return groups[0].describe(p);
    }
    let parts: Vec<String> =
        groups.iter().map(|g| format!("{}: {}", g.variant.as_deref().unwrap_or("main"), g.describe(p))).collect();
    parts.join("; ")
}

/// `"<variant>, <description>"` of each group, `; ` between them: a
/// heading's variants, each named also when it runs alone.
pub fn variants_named(groups: &[&Group], p: &Params) -> String {
    let parts: Vec<String> =
        groups.iter().map(|g| format!("{}, {}", g.variant.as_deref().unwrap_or("main"), g.describe(p))).collect();
    parts.join("; ")
}

/// One workload (and variant), run once per engine.
#[derive(Clone)]
pub struct Group {
    /// The workload's name (JSON `workload`).
    pub workload: &'static str,
    pub variant: Option<String>,
    /// The workload that made the group and runs it.
    pub owner: &'static dyn Workload,
    /// The workload's own description of the group (see [`Group::shape`]).
    shape: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group").field("workload", &self.workload).field("variant", &self.variant).finish()
    }
}

impl RowGroup for Group {
    fn workload(&self) -> &str {
        self.workload
    }

    fn variant(&self) -> Option<String> {
        self.variant.clone()
    }

    fn slug(&self) -> String {
        Group::slug(self)
    }
}

impl Group {
    /// A group of `owner`'s, described by `shape` (its own type).
    pub fn new<S: Any + Send + Sync>(owner: &'static dyn Workload, variant: Option<String>, shape: S) -> Group {
        Group { workload: owner.name(), variant, owner, shape: Arc::new(shape) }
    }

    /// The workload's own description of the group. Only the workload that
    /// made the group asks, with its own type.
    pub fn shape<S: Any>(&self) -> &S {
        self.shape.downcast_ref().unwrap_or_else(|| panic!("a group of {} described by another type", self.workload))
    }

    pub fn label(&self) -> String {
        self.owner.label(self)
    }

    /// File-name-safe label.
    pub fn slug(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}-{}", self.workload, v.replace('/', "-")),
            None => self.workload.to_string(),
        }
    }

    pub fn runs_on(&self, engine: EngineKind) -> bool {
        self.owner.runs_on(self, engine)
    }

    pub fn only_on(&self) -> Option<&'static [EngineKind]> {
        self.owner.only_on()
    }

    pub fn needs_data(&self) -> bool {
        self.owner.needs_data(self)
    }

    pub fn describe(&self, p: &Params) -> String {
        self.owner.describe(self, p)
    }
}

/// The spec of one measurement.
pub fn build_spec(group: &Group, engine: EngineKind, p: &Params, place: &Place, progress: bool) -> Spec {
    let name = format!("{}-{}", group.slug(), engine.name());
    let Jobs { jobs, deadline_s, pipelined } = group.owner.jobs(group, engine, p, place, &name);
    Spec {
        workload: group.workload.to_string(),
        variant: group.variant.clone(),
        engine,
        jobs,
        deadline_s,
        wbcache_options: group.owner.wbcache_options(group, p),
        pipelined,
        progress,
        timeout_s: None,
    }
}

/// Turns a worker's outcome into result rows: a failed measurement's one
/// row, or the workload's rows.
pub fn rows_from(group: &Group, engine: EngineKind, o: &Outcome) -> Vec<ResultRow> {
    if o.status != Status::Ok {
        let mut row = failed_row(group, engine, o.status, o.error.clone().unwrap_or_else(|| "failed".into()));
        row.dirty = o.dirty.clone();
        return vec![row];
    }
    let jobs: Vec<&JobResult> = o.jobs.iter().collect();
    let mut rows = group.owner.rows(group, engine, &jobs, o);
    let account = o.wbcache_stats.as_deref().and_then(device_account_of);
    // The job that stopped last with a final fsync: its leftovers.
    let last_stream =
        jobs.iter().filter(|j| j.dirty_bytes_at_io_end.is_some()).max_by(|a, b| a.io_end_s.total_cmp(&b.io_end_s));
    for row in &mut rows {
        row.block_device = o.block_device.clone();
        row.device_account = account.clone();
        row.dirty_bytes_at_end = last_stream.and_then(|j| j.dirty_bytes_at_io_end);
        row.durable_s = last_stream.map(|j| round6(j.end_s - j.io_end_s));
    }
    rows
}
