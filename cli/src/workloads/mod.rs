//! The bench's workloads, each behind the [`Workload`] trait in a module of
//! its own (a family sharing one implementation, such as [`plain`], is one
//! module): its catalog entry, its variants and their expansion into
//! measurement groups, its job specs, what the worker runs for it where the
//! generic job runner does not, its result rows, its table and its targets.
//! [`WORKLOADS`] is the catalog, in the order of `--list`, the suites and
//! the report; adding a workload is a module and a line there.
//!
//! A [`Group`] is one workload and variant, run once per engine; it carries
//! the workload that made it ([`Group::owner`]) and the workload's own typed
//! description of it, so shared code asks the group, never a name. Names
//! (`workload`, `variant`) are what the command line, the JSON and the
//! worker's spec say; what knows only a name looks the workload up in the
//! catalog ([`by_name`]): the worker, which gets a spec as JSON (through
//! [`Catalog`], which `main` passes down to it), and the charts, which get
//! rows ([`owner_of`]).
//!
//! This module is the layer above the worker, the report and the charts'
//! drawing: it turns a group's outcome into its rows ([`rows_from`]) and
//! gathers every workload's goals ([`targets`]), so those layers name no
//! workload. Its own file stands below the workloads' modules, which build
//! on its trait and [`Group`].

pub mod advice;
pub mod competing;
pub mod custom;
pub mod external;
pub mod fio;
pub mod fsync_under_load;
pub mod hot_set;
pub mod parallel_writeback;
pub mod plain;
pub mod rand_read;
pub mod rocksdb;
pub mod small_overwrite;
pub mod sqlite;

use std::any::Any;
use std::fmt;
use std::io;
use std::sync::Arc;

pub use crate::spec::{data_len, round_down, JobSpec, Jobs, Params, Pattern, Place, Setup, Spec, KIB, MIB};

use crate::bench_worker::{JobContext, JobRaw, JobResult, Outcome, OwnJobs, Status};
use crate::engines::{EngineKind, Target};
use crate::report::{
    aggregate, device_account_of, failed_row, markdown_table, round6, targets_table, Reference, ResultRow, RowGroup,
    TargetInputs, Verdict,
};

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

/// The catalog, in its order.
pub static WORKLOADS: &[&dyn Workload] = &[
    &plain::SEQ_WRITE,
    &plain::RAND_WRITE,
    &plain::MULTI_WRITER,
    &plain::FILES_32,
    &competing::COMPETING,
    &fsync_under_load::FSYNC_UNDER_LOAD,
    &parallel_writeback::PARALLEL_WRITEBACK,
    &plain::SEQ_READ,
    &rand_read::RAND_READ,
    &hot_set::HOT_SET,
    &sqlite::SQLITE,
    &advice::ADVICE,
    &small_overwrite::SMALL_OVERWRITE,
    &fio::FIO,
    &rocksdb::ROCKSDB,
];

/// The catalog entry named `name`.
#[cfg(test)]
pub fn info(name: &str) -> Option<&'static WorkloadInfo> {
    WORKLOADS.iter().map(|w| w.info()).find(|w| w.name == name)
}

/// The workload a worker's spec names: one of the catalog, the
/// `--custom` job or the `--fio` job file.
pub fn by_name(name: &str) -> Option<&'static dyn Workload> {
    let outside: [&'static dyn Workload; 2] = [&custom::CUSTOM, &fio::jobfile::FIO_JOBFILE];
    WORKLOADS.iter().copied().chain(outside).find(|w| w.name() == name)
}

/// The catalog as the worker asks it ([`OwnJobs`]): a spec's workload by
/// its name ([`by_name`]), which runs the jobs of its own pattern.
pub struct Catalog;

impl OwnJobs for Catalog {
    fn knows(&self, workload: &str) -> bool {
        by_name(workload).is_some()
    }

    fn run(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        match by_name(&ctx.spec.workload) {
            Some(workload) => workload.run_job(ctx),
            None => Err(io::Error::other(format!("unknown workload '{}'", ctx.spec.workload))),
        }
    }
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

    /// Runs one of its jobs whose pattern is its own ([`Pattern::Own`]),
    /// on the job's thread in the worker (the generic patterns are the
    /// worker's). [`JobContext::run_timed`] is the generic course of a job
    /// around a timed phase; a job may also take its own course (`sqlite`
    /// loads a database, an external program would run here).
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

/// The groups a workload name (or small-overwrite variant name) expands to,
/// `parallel-writeback` with its default worker counts.
#[cfg(test)]
pub fn groups_for(name: &str, overwrite_subset: Option<&[&str]>) -> Option<Vec<Group>> {
    expand(name, overwrite_subset, parallel_writeback::PW_DEFAULT_WORKERS)
}

/// The groups a name on the command line expands to: a catalog name,
/// `<name>/<selector>` (see each workload's [`Workload::groups`]), or a
/// small-overwrite variant name; `parallel-writeback` tries these writeback
/// worker counts.
pub fn expand(name: &str, overwrite_subset: Option<&[&str]>, writeback_workers: &[u32]) -> Option<Vec<Group>> {
    let selection = Selection { overwrite_subset, writeback_workers };
    WORKLOADS.iter().find_map(|w| w.select(name, &selection))
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

/// The workload a row is of, which labels and draws its lines in charts
/// (`None` for a row whose workload no catalog entry names: one made up).
pub fn owner_of(row: &ResultRow) -> Option<&'static dyn Workload> {
    by_name(&row.workload)
}

/// wbcache's goals against the kernel, checked on this run's rows: each
/// workload's own ([`Workload::targets`]), of its rows and references, in
/// the order of their [`Workload::targets_rank`] (then the catalog's), as
/// the report's table (`None` when the rows give no goal to check).
pub fn targets(rows: &[ResultRow], dirty_limit: u64, references: &[Reference], judged: bool) -> Option<String> {
    let mut workloads = WORKLOADS.to_vec();
    workloads.sort_by_key(|w| w.targets_rank());
    let mut lines: Vec<Verdict> = Vec::new();
    for w in workloads {
        let own_rows: Vec<&ResultRow> = rows.iter().filter(|r| r.is_of(w.name())).collect();
        let own_references: Vec<&Reference> = references.iter().filter(|r| r.workload == w.name()).collect();
        lines.extend(w.targets(&own_rows, &TargetInputs { dirty_limit, references: &own_references }));
    }
    targets_table(lines, judged)
}

/// The sizes the workloads' tests run with.
#[cfg(test)]
pub fn test_params(runtime_s: f64) -> Params {
    Params {
        memory: 128 * MIB,
        size: 256 * MIB,
        runtime_s,
        stream_cap_s: 6.0 * runtime_s,
        call_cap_s: 0.25,
        iterations_1k: 10,
        iterations_10k: 10,
        warmup: 1,
        sqlite_data_bytes: 160 * MIB,
        rocksdb_data_bytes: 256 * MIB,
        wbcache_options: "capacity=128M".into(),
    }
}

/// The variant names of `groups`.
#[cfg(test)]
pub fn variants_of(groups: &[Group]) -> Vec<String> {
    groups.iter().map(|g| g.variant.clone().unwrap()).collect()
}
