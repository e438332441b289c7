//! `parallel-writeback`: twelve writers dirty more than fits in memory, in
//! one file each or in one shared file, and the writeback's MB/s until
//! every byte is clean is measured, with the machine's CPU per GiB. The
//! kernel engines run each pattern once; wbcache runs it once per writeback
//! configuration (routing and worker count), each a group and a row of its
//! own, with the cache's options changed to match. The writers are the
//! generic random-write loops; one chart per pattern holds every row.

use serde::{Deserialize, Serialize};
use wbcache::Routing;

use super::{round_down, Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Workload, WorkloadInfo, KIB};
use crate::bench_worker::{JobResult, Outcome};
use crate::engines::EngineKind;
use crate::measure::round3;
use crate::report::{
    aggregate, field_names, fmt_num, fmt_three_digits, heading, Cells, ResultRow, RowTable, TargetInputs, Verdict,
};
use crate::svg::engine_color;
use crate::sys::fmt_size;

/// The posting parallel-writeback follows, and the reviewer's question it
/// answers.
const AG_WRITEBACK: &str = "the LKML posting \"[PATCH v3 0/6] AG aware parallel writeback for XFS\" by Kundan Kumar \
     (January 2026), and Brian Foster's question in reply to it: does routing writeback by allocation group beat plain \
     concurrency, with inodes spread over the writeback workers by a rotor";

pub struct ParallelWriteback;

pub static PARALLEL_WRITEBACK: ParallelWriteback = ParallelWriteback;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "parallel-writeback",
    summary: "12 writers dirtying twice the memory: writeback MB/s and CPU per GiB",
    about:
        "12 writers at once, 4 KiB random writes (every block once, random order), --size (twice the memory) in all, \
            stopped after --runtime, then fsync: the writeback's MB/s until everything is clean, and the machine's CPU \
            seconds per GiB written. Variants files (one new file per writer, each writer fsyncs its own) and shared \
            (one new file for all twelve, each writer a disjoint random share of its blocks, one fsync after the last \
            writer); on --device, a twelfth of the area per writer, or all of it. wbcache runs once per writeback \
            routing and worker count: single-1, rotor-1/2/4, region-1/2/4 (--writeback-workers sets the counts); \
            kernel-buffered and kernel-direct are the references (the dontcache engines do not run it). \
            Select one pattern with parallel-writeback/files or parallel-writeback/shared, one row with e.g. \
            parallel-writeback/shared/region-4",
    models: "many threads dirtying more data than fits in memory at once, in many files or in one large file \
             (a database checkpoint, parallel loads, a virtual machine image): does spreading writeback over \
             several workers make it reach the disk sooner, and at what CPU cost",
    source: Some(AG_WRITEBACK),
};

/// The writers of `parallel-writeback`.
pub const PW_WRITERS: u64 = 12;
/// Its request size.
pub const PW_BS: u64 = 4 * KIB;
/// The most writeback workers the cache runs per device (its
/// `writeback_workers` range is 1..=64).
pub const PW_MAX_WORKERS: u32 = 64;
/// The writeback worker counts its wbcache rows try by default.
pub const PW_DEFAULT_WORKERS: &[u32] = &[1, 2, 4];

/// Where `parallel-writeback`'s writers write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PwPattern {
    /// One new file (a twelfth of the area on a device) per writer; each
    /// writer fsyncs its own.
    Files,
    /// One new file (the whole area on a device) for every writer, each
    /// writing a disjoint random share of its blocks; one fsync after the
    /// last writer.
    Shared,
}

impl PwPattern {
    pub const ALL: [PwPattern; 2] = [PwPattern::Files, PwPattern::Shared];

    pub fn name(self) -> &'static str {
        match self {
            PwPattern::Files => "files",
            PwPattern::Shared => "shared",
        }
    }

    pub fn parse(s: &str) -> Option<PwPattern> {
        PwPattern::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// A wbcache writeback configuration: `writeback_routing` and
/// `writeback_workers`, named `<routing>-<workers>` (`rotor-2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writeback {
    pub routing: Routing,
    pub workers: u32,
}

impl Writeback {
    pub fn name(self) -> String {
        format!("{}-{}", self.routing.name(), self.workers)
    }

    /// Parses `rotor-2`: a routing and a worker count the cache accepts
    /// (`single` is one worker).
    pub fn parse(s: &str) -> Option<Writeback> {
        let (routing, count) = s.rsplit_once('-')?;
        let routing = [Routing::Single, Routing::Rotor, Routing::Region].into_iter().find(|r| r.name() == routing)?;
        let workers: u32 = count.parse().ok()?;
        let max = if routing == Routing::Single { 1 } else { PW_MAX_WORKERS };
        // One spelling per row: `rotor-2`, not `rotor-02` or `rotor-+2`.
        ((1..=max).contains(&workers) && workers.to_string() == count).then_some(Writeback { routing, workers })
    }

    /// The cache options that select it.
    pub fn options(self) -> [(&'static str, String); 2] {
        [("writeback_routing", self.routing.name().to_string()), ("writeback_workers", self.workers.to_string())]
    }
}

/// The wbcache configurations `parallel-writeback` runs for these worker
/// counts: `single-1` (the baseline: one worker, as before routing
/// existed), then `rotor-n` for each count, then `region-n`.
pub fn pw_configs(workers: &[u32]) -> Vec<Writeback> {
    let mut v = vec![Writeback { routing: Routing::Single, workers: 1 }];
    for routing in [Routing::Rotor, Routing::Region] {
        v.extend(workers.iter().map(|&workers| Writeback { routing, workers }));
    }
    v
}

/// One measurement group of `parallel-writeback`: a pattern, on the kernel
/// engines (`writeback` is `None`) or on wbcache with one configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PwGroup {
    pub pattern: PwPattern,
    pub writeback: Option<Writeback>,
}

impl PwGroup {
    /// The variant name (JSON `variant`): `files`, `shared/region-4`.
    pub fn variant(self) -> String {
        match self.writeback {
            Some(w) => format!("{}/{}", self.pattern.name(), w.name()),
            None => self.pattern.name().to_string(),
        }
    }

    /// The engines the group runs on: kernel-buffered and kernel-direct for
    /// the kernel's group, wbcache for a configuration's.
    pub fn runs_on(self, engine: EngineKind) -> bool {
        match self.writeback {
            Some(_) => engine == EngineKind::Wbcache,
            None => matches!(engine, EngineKind::KernelBuffered | EngineKind::KernelDirect),
        }
    }

    fn group(self) -> Group {
        Group::new(&PARALLEL_WRITEBACK, Some(self.variant()), self)
    }
}

/// The engines `parallel-writeback` runs on at all.
pub const PW_ENGINES: [EngineKind; 3] = [EngineKind::KernelBuffered, EngineKind::KernelDirect, EngineKind::Wbcache];

/// `parallel-writeback`'s groups for these worker counts: per pattern, the
/// kernel's group, then one per wbcache configuration.
pub fn pw_groups(workers: &[u32]) -> Vec<Group> {
    let mut groups = Vec::new();
    for pattern in PwPattern::ALL {
        let configs = std::iter::once(None).chain(pw_configs(workers).into_iter().map(Some));
        groups.extend(configs.map(|writeback| PwGroup { pattern, writeback }.group()));
    }
    groups
}

/// `parallel-writeback/<selector>`: `files` or `shared` (the pattern's
/// groups, the kernel's and every configuration's), or one configuration
/// of a pattern (`shared/region-4`, any worker count the cache accepts).
fn pw_selection(selector: &str, workers: &[u32]) -> Option<Vec<Group>> {
    match selector.split_once('/') {
        None => {
            let pattern = PwPattern::parse(selector)?;
            Some(pw_groups(workers).into_iter().filter(|g| g.shape::<PwGroup>().pattern == pattern).collect())
        }
        Some((pattern, config)) => {
            let pattern = PwPattern::parse(pattern)?;
            Some(vec![PwGroup { pattern, writeback: Some(Writeback::parse(config)?) }.group()])
        }
    }
}

/// The cache options `base` with `overrides` in place of the same keys (the
/// options refuse a key given twice), or added at the end.
pub fn options_with(base: &str, overrides: &[(&str, String)]) -> String {
    let mut pairs: Vec<(String, String)> = base
        .split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (item.to_string(), String::new()),
        })
        .collect();
    for (key, value) in overrides {
        match pairs.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => pair.1 = value.clone(),
            None => pairs.push((key.to_string(), value.clone())),
        }
    }
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// Each file of `parallel-writeback files`: a twelfth of --size, whole
/// blocks (on a device, each writer's twelfth of the area).
pub fn pw_file_len(p: &Params) -> u64 {
    round_down(p.size / PW_WRITERS, PW_BS)
}

/// The file of `parallel-writeback shared` (on a device, the area).
pub fn pw_shared_len(p: &Params) -> u64 {
    round_down(p.size, PW_BS)
}

/// What `parallel-writeback` does, per pattern, with this run's sizes (its
/// table's heading).
pub fn pw_about(p: &Params) -> String {
    let rt = p.runtime_s;
    format!(
        "{PW_WRITERS} writers at once, 4 KiB random writes, every block once in a random order, {} in all; a writer \
         still writing after {rt} s stops there (what it wrote counts), then fsync. files: one new {} file per writer, \
         each writer fsyncs its own; shared: one new {} file for all, each writer a disjoint random share of its \
         blocks, one fsync after the last writer",
        fmt_size(p.size),
        fmt_size(pw_file_len(p)),
        fmt_size(pw_shared_len(p))
    )
}

/// What `parallel-writeback`'s wbcache rows change in the cache's options.
fn pw_options_about(p: &Params) -> String {
    let region = wbcache::Config::from_options(&p.wbcache_options).map(|c| fmt_size(c.region_size_bytes));
    format!(
        "wbcache rows: the options above with writeback_routing and writeback_workers as the variant names them: \
         single-1, one writeback worker (the cache without routing); rotor-N, N workers, each file bound to one of \
         them in turn; region-N, N workers, the offsets cut into regions of region_size ({}) dealt to them in turn, \
         so one file can be written by several at once",
        region.unwrap_or_else(|_| "?".into())
    )
}

impl Workload for ParallelWriteback {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(pw_groups(selection.writeback_workers)),
            Some(selector) => pw_selection(selector, selection.writeback_workers),
        }
    }

    fn takes_writeback_workers(&self) -> bool {
        true
    }

    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&PW_ENGINES)
    }

    fn runs_on(&self, group: &Group, engine: EngineKind) -> bool {
        group.shape::<PwGroup>().runs_on(engine)
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let pw = group.shape::<PwGroup>();
        let rt = p.runtime_s;
        let writers = match pw.pattern {
            PwPattern::Files => format!("{PW_WRITERS} writers, one new {} file each", fmt_size(pw_file_len(p))),
            PwPattern::Shared => format!("{PW_WRITERS} writers sharing one new {} file", fmt_size(pw_shared_len(p))),
        };
        let on = pw.writeback.map(|w| format!(", wbcache with writeback {}", w.name())).unwrap_or_default();
        format!("{writers}, 4 KiB random writes (at most {rt} s), then fsync{on}")
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let jobs = match group.shape::<PwGroup>().pattern {
            PwPattern::Files => {
                let per = pw_file_len(p);
                let ops = Some(per / PW_BS);
                (0..PW_WRITERS)
                    .map(|i| {
                        let pat = Pattern::Rand { write: true, bs: PW_BS, ops };
                        // Each file its own random order.
                        JobSpec::new(engine, place.fresh(name, i as usize, per), pat).with_final_fsync().seeded(20 + i)
                    })
                    .collect()
            }
            PwPattern::Shared => {
                let t = place.fresh(name, 0, pw_shared_len(p));
                (0..PW_WRITERS)
                    .map(|i| {
                        let pat = Pattern::RandShare { bs: PW_BS, share: i, shares: PW_WRITERS, key: 40 };
                        JobSpec::new(engine, t.clone(), pat).seeded(40 + i).with_fsync_after_all_if(i == 0)
                    })
                    .collect()
            }
        };
        Jobs { jobs, deadline_s: p.runtime_s, pipelined: true }
    }

    /// A configuration's rows run with its routing and worker count.
    fn wbcache_options(&self, group: &Group, p: &Params) -> String {
        match group.shape::<PwGroup>().writeback {
            Some(w) => options_with(&p.wbcache_options, &w.options()),
            None => p.wbcache_options.clone(),
        }
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        vec![pw_row(group, engine, *group.shape::<PwGroup>(), jobs, o)]
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<WritebackFigures>()
    }

    /// The writeback's MB/s (every byte on the disk), not the writers'.
    fn primary_figure(&self, row: &ResultRow) -> Option<f64> {
        row.us_per_call.or(pw_figures(row).writeback_mb_s).or(row.throughput_mb_s)
    }

    /// The writers', then the writeback's MB/s and the CPU.
    fn summary(&self, rows: &[ResultRow]) -> String {
        let Some(r) = rows.last() else { return crate::report::summary(rows) };
        let own = pw_figures(r);
        let Some(w) = own.writeback_mb_s else { return crate::report::summary(rows) };
        let mut s = format!("writers {:.1} MB/s, writeback {w:.1} MB/s", r.throughput_mb_s.unwrap_or(0.0));
        if let Some(c) = own.cpu_s_per_gib {
            s.push_str(&format!(", {c:.2} CPU s/GiB"));
        }
        if let Some(t) = r.total_s {
            s.push_str(&format!(" ({t:.1} s)"));
        }
        s
    }

    /// The wbcache configuration after the engine (`wbcache rotor-2`).
    fn series_label(&self, row: &ResultRow) -> String {
        match row.variant.as_deref().and_then(|v| v.split_once('/')) {
            Some((_, config)) => format!("{} {config}", row.engine),
            None => row.engine.clone(),
        }
    }

    /// wbcache's rows coloured by writeback routing and dashed by worker
    /// count (one chart holds all of a pattern's rows).
    fn line_style(&self, row: &ResultRow) -> (&'static str, &'static str) {
        let Some((_, config)) = row.variant.as_deref().and_then(|v| v.split_once('/')) else {
            return (engine_color(&row.engine), "");
        };
        let (routing, workers) = config.rsplit_once('-').unwrap_or((config, ""));
        let color = match routing {
            "single" => engine_color("wbcache"),
            "rotor" => "#17becf",
            "region" => "#d62728",
            _ => "#8c564b",
        };
        let dash = match workers {
            "1" => "",
            "2" => "7 4",
            "4" => "2 3",
            _ => "12 3 2 3",
        };
        (color, dash)
    }

    /// One line per configuration.
    fn dirty_line(&self, row: &ResultRow) -> (String, &'static str, &'static str) {
        let (color, dash) = self.line_style(row);
        (self.series_label(row), color, dash)
    }

    fn about(&self, _groups: &[&Group], p: &Params) -> String {
        format!("{}. {}", pw_about(p), pw_options_about(p))
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        pw_table(self.name(), about, rows)
    }

    fn targets(&self, rows: &[&ResultRow], _inputs: &TargetInputs<'_>) -> Vec<Verdict> {
        pw_targets(rows)
    }

    fn targets_rank(&self) -> u32 {
        6
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// `parallel-writeback`'s own figures of its rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WritebackFigures {
    /// The bytes written over the time from the first write until the
    /// last fsync returned (every byte clean), in MB/s. (The row's
    /// `throughput_mb_s` is the writers' alone: until the last write
    /// returned, no fsync.)
    pub writeback_mb_s: Option<f64>,
    /// The machine's busy CPU time over that same time (user, nice,
    /// system, irq and softirq of every CPU in `/proc/stat`, kernel
    /// threads included), in seconds per GiB written.
    pub cpu_s_per_gib: Option<f64>,
    /// wbcache rows: the bytes each writeback worker wrote, in the order
    /// the cache's stats list them (`None` when they do not).
    pub written_bytes_per_worker: Option<Vec<u64>>,
}

/// A row's [`WritebackFigures`] (all `None` on another workload's row).
fn pw_figures(row: &ResultRow) -> WritebackFigures {
    row.own()
}

/// `parallel-writeback`'s row: the writers' MB/s (until the last write
/// returned), the writeback's (until the last fsync returned), the
/// machine's CPU time per GiB over the latter, and for wbcache what each
/// writeback worker wrote if its stats say.
fn pw_row(group: &Group, engine: EngineKind, pw: PwGroup, jobs: &[&JobResult], o: &Outcome) -> ResultRow {
    let mut row = aggregate(group, engine, group.variant.clone(), jobs, o);
    let bytes: u64 = jobs.iter().map(|j| j.bytes).sum();
    let writers_s = jobs.iter().map(|j| j.io_end_s).fold(0.0, f64::max);
    let clean_s = jobs.iter().map(|j| j.end_s).fold(0.0, f64::max);
    row.throughput_mb_s = (writers_s > 0.0).then(|| round3(bytes as f64 / writers_s / 1e6));
    row.set_own(&WritebackFigures {
        writeback_mb_s: (clean_s > 0.0).then(|| round3(bytes as f64 / clean_s / 1e6)),
        cpu_s_per_gib: o.cpu_busy_s.filter(|_| bytes > 0).map(|cpu| round3(cpu / (bytes as f64 / GIB))),
        written_bytes_per_worker: o.wbcache_stats.as_deref().and_then(written_per_worker),
    });
    // One chart per pattern, every engine and configuration in it.
    row.group = format!("{}-{}", group.workload, pw.pattern.name());
    row
}

/// The `written_bytes` of each entry of the `writeback_workers` array of
/// the cache's stats JSON, if it has one.
pub fn written_per_worker(stats_json: &str) -> Option<Vec<u64>> {
    let v: serde_json::Value = serde_json::from_str(stats_json).ok()?;
    let workers = v.get("writeback_workers")?.as_array()?;
    let bytes: Vec<u64> = workers.iter().map(|w| w.get("written_bytes")?.as_u64()).collect::<Option<_>>()?;
    (!bytes.is_empty()).then_some(bytes)
}

/// The pattern of a `parallel-writeback` row (`files` of `files/rotor-2`)
/// and its wbcache configuration, if any.
fn pw_parts(r: &ResultRow) -> (&str, Option<&str>) {
    let v = r.variant.as_deref().unwrap_or("");
    match v.split_once('/') {
        Some((pattern, config)) => (pattern, Some(config)),
        None => (v, None),
    }
}

/// The ok row of `engine` in `variant`.
fn pw_find<'a>(rows: &[&'a ResultRow], variant: &str, engine: &str) -> Option<&'a ResultRow> {
    rows.iter().copied().find(|r| r.variant.as_deref() == Some(variant) && r.engine == engine && r.ok())
}

fn writeback_ratio(row: &ResultRow, base: Option<&ResultRow>) -> Option<f64> {
    match (
        row.ok().then_some(pw_figures(row).writeback_mb_s).flatten(),
        base.and_then(|b| pw_figures(b).writeback_mb_s),
    ) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// What the `parallel-writeback` table's columns mean (printed above it).
pub const PW_COLUMNS: &str = "writers MB/s: bytes written ÷ the time from the first write until the last writer's \
     last write returned (no fsync). writeback MB/s: bytes written ÷ the time until the last fsync returned, every \
     byte on the disk. CPU s/GiB: the machine's busy CPU time over that same time (user, nice, system, irq and \
     softirq of every CPU, from /proc/stat) per GiB written; machine-wide, so the kernel's writeback in its kworker \
     threads counts for the kernel engines as the cache's writeback workers count for wbcache (anything else running \
     on the machine counts too). vs columns: writeback MB/s ÷ that row's in the same pattern (files or shared). \
     kernel-dontcache and wbcache-dontcache do not run this workload.";

/// The `parallel-writeback` table: per pattern, the kernel engines and each
/// wbcache writeback configuration; writers' and writeback MB/s, CPU per
/// GiB, and the writeback's MB/s against single-1, kernel-buffered and
/// kernel-direct of the same pattern. Under it: region against rotor at
/// each worker count, and one shared file against one file per writer.
pub fn pw_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let has_workers = rows.iter().any(|r| pw_figures(r).written_bytes_per_worker.is_some());
    let mut head = vec![
        "variant",
        "engine",
        "writers MB/s",
        "writeback MB/s",
        "CPU s/GiB",
        "vs single-1",
        "vs kernel-buffered",
        "vs kernel-direct",
    ];
    if has_workers {
        head.push("written per worker MiB");
    }
    let workers_note = if has_workers {
        " written per worker: what each of the cache's writeback workers wrote (the writeback_workers of its \
         stats), in MiB; what the fsyncs wrote themselves is not in it."
    } else {
        ""
    };
    let columns = format!("{PW_COLUMNS}{workers_note}");
    let mut table = RowTable::new(&[&heading(title), about, &columns], &head, rows);
    for r in rows {
        let mut c = table.cells(r);
        pw_cells(&mut c, r, rows, has_workers);
        table.push(c);
    }
    for line in pw_comparisons(rows) {
        table.push_paragraph(&line);
    }
    table.finish()
}

/// One row's cells in the `parallel-writeback` table.
fn pw_cells(c: &mut Cells<'_>, r: &ResultRow, rows: &[&ResultRow], has_workers: bool) {
    let (pattern, config) = pw_parts(r);
    let single = config.and_then(|_| pw_find(rows, &format!("{pattern}/single-1"), "wbcache"));
    let own = pw_figures(r);
    c.variant().engine().figure(r.throughput_mb_s, fmt_num).figure(own.writeback_mb_s, fmt_num);
    c.figure(own.cpu_s_per_gib, fmt_three_digits);
    c.times(writeback_ratio(r, single));
    c.times(writeback_ratio(r, pw_find(rows, pattern, "kernel-buffered")));
    c.times(writeback_ratio(r, pw_find(rows, pattern, "kernel-direct")));
    if has_workers {
        let per_worker = |w: &Vec<u64>| {
            w.iter().map(|b| format!("{:.0}", *b as f64 / (1u64 << 20) as f64)).collect::<Vec<_>>().join(" / ")
        };
        c.figure(own.written_bytes_per_worker.as_ref(), per_worker);
    }
}

/// The two comparisons under the `parallel-writeback` table, where the run
/// has both sides: region ÷ rotor at each worker count, and shared ÷ files
/// for each engine and configuration (writeback MB/s).
fn pw_comparisons(rows: &[&ResultRow]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut parts = Vec::new();
    for pattern in PwPattern::ALL.map(PwPattern::name) {
        let mut counts: Vec<u32> = rows
            .iter()
            .filter_map(|r| match pw_parts(r) {
                (p, Some(config)) if p == pattern => config.strip_prefix("rotor-")?.parse().ok(),
                _ => None,
            })
            .collect();
        counts.sort_unstable();
        counts.dedup();
        let ratios: Vec<String> = counts
            .iter()
            .filter_map(|n| {
                let rotor = pw_find(rows, &format!("{pattern}/rotor-{n}"), "wbcache")?;
                let region = pw_find(rows, &format!("{pattern}/region-{n}"), "wbcache")?;
                let x = writeback_ratio(region, Some(rotor))?;
                Some(format!("{n} worker{} {x:.2}×", if *n == 1 { "" } else { "s" }))
            })
            .collect();
        if !ratios.is_empty() {
            parts.push(format!("{pattern}: {}", ratios.join(", ")));
        }
    }
    if !parts.is_empty() {
        lines.push(format!("Region ÷ rotor, writeback MB/s at the same worker count: {}.", parts.join("; ")));
    }
    let mut shared_vs_files = Vec::new();
    for r in rows.iter().filter(|r| r.ok()) {
        let (pattern, config) = pw_parts(r);
        if pattern != PwPattern::Files.name() {
            continue;
        }
        let shared_variant = match config {
            Some(c) => format!("shared/{c}"),
            None => "shared".to_string(),
        };
        if let Some(x) = pw_find(rows, &shared_variant, &r.engine).and_then(|s| writeback_ratio(s, Some(r))) {
            shared_vs_files.push(format!("{} {x:.2}×", PARALLEL_WRITEBACK.series_label(r)));
        }
    }
    if !shared_vs_files.is_empty() {
        lines.push(format!("One shared file ÷ one file per writer, writeback MB/s: {}.", shared_vs_files.join(", ")));
    }
    lines
}

/// `parallel-writeback`'s goals, per pattern: the best wbcache
/// configuration's writeback MB/s against kernel-buffered's, and against
/// 0.9 × kernel-direct's.
fn pw_targets(rows: &[&ResultRow]) -> Vec<Verdict> {
    let mut lines = Vec::new();
    for pattern in PwPattern::ALL.map(PwPattern::name) {
        let best = rows
            .iter()
            .copied()
            .filter(|r| r.engine == "wbcache" && r.ok())
            .filter(|r| matches!(pw_parts(r), (p, Some(_)) if p == pattern))
            .filter_map(|r| Some((pw_figures(r).writeback_mb_s?, pw_parts(r).1?)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let Some((a, config)) = best else { continue };
        let kernel = |engine: &str| pw_find(rows, pattern, engine).and_then(|r| pw_figures(r).writeback_mb_s);
        if let Some(b) = kernel("kernel-buffered") {
            lines.push(Verdict::new(
                format!("parallel-writeback {pattern}: best wbcache writeback MB/s ≥ kernel-buffered"),
                format!("{a:.0} ({config}) vs {b:.0} MB/s ({:.2}×)", a / b.max(1e-9)),
                a >= b,
            ));
        }
        if let Some(b) = kernel("kernel-direct") {
            lines.push(Verdict::new(
                format!("parallel-writeback {pattern}: best wbcache writeback MB/s ≥ 0.9 × kernel-direct"),
                format!("{a:.0} ({config}) vs {b:.0} MB/s ({:.2}×)", a / b.max(1e-9)),
                a >= 0.9 * b,
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::report::test_support::{
        job, row_json, row_value, verdicts, ADVICE_NULLS, PROGRAM_NULLS, READERS_NULLS, SQLITE_NULLS,
    };
    use crate::workloads::{
        build_spec, expand, groups_for, info, rows_from, targets, test_params as params, variants_of, MIB,
    };

    /// Rows are named `<pattern>` (kernel engines) and
    /// `<pattern>/<routing>-<workers>` (wbcache): 2 + 7 groups per pattern,
    /// 18 rows with both kernel engines.
    #[test]
    fn parallel_writeback_groups_and_names() {
        let groups = groups_for("parallel-writeback", None).unwrap();
        let files = [
            "files",
            "files/single-1",
            "files/rotor-1",
            "files/rotor-2",
            "files/rotor-4",
            "files/region-1",
            "files/region-2",
            "files/region-4",
        ];
        let shared: Vec<String> = files.iter().map(|v| v.replacen("files", "shared", 1)).collect();
        assert_eq!(variants_of(&groups), files.iter().map(|v| v.to_string()).chain(shared).collect::<Vec<_>>());
        assert!(groups.iter().all(|g| g.workload == "parallel-writeback"));
        let rows: usize = groups.iter().map(|g| EngineKind::ALL.iter().filter(|e| g.runs_on(**e)).count()).sum();
        assert_eq!(rows, 18);
        // Kernel groups on kernel-buffered and kernel-direct; configurations on wbcache.
        let on = |g: &Group| EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect::<Vec<_>>();
        assert_eq!(on(&groups[0]), [EngineKind::KernelBuffered, EngineKind::KernelDirect]);
        assert_eq!(on(&groups[7]), [EngineKind::Wbcache]);
        assert_eq!(groups[7].slug(), "parallel-writeback-files-region-4");
        assert_eq!(groups[7].label(), "parallel-writeback files/region-4");
        assert!(groups_for("seq-write", None).unwrap()[0].runs_on(EngineKind::WbcacheDontcache));
        let pw =
            PwGroup { pattern: PwPattern::Shared, writeback: Some(Writeback { routing: Routing::Region, workers: 4 }) };
        assert_eq!(pw.variant(), "shared/region-4");
        assert_eq!(PwGroup { writeback: None, ..pw }.variant(), "shared");
        assert!(info("parallel-writeback").is_some_and(|w| w
            .source
            .is_some_and(|s| s.contains("AG aware parallel writeback for XFS") && s.contains("Brian Foster"))));
        // Other worker counts: rotor and region each, single-1 once.
        let v = variants_of(&expand("parallel-writeback", None, &[1, 8]).unwrap());
        assert_eq!(
            v[..6],
            ["files", "files/single-1", "files/rotor-1", "files/rotor-8", "files/region-1", "files/region-8"]
        );
        assert_eq!(v.len(), 12);
    }

    /// `parallel-writeback/<pattern>` selects a pattern's groups,
    /// `parallel-writeback/<pattern>/<config>` one configuration.
    #[test]
    fn parallel_writeback_selections() {
        let files = groups_for("parallel-writeback/files", None).unwrap();
        assert_eq!(files.len(), 8);
        assert!(variants_of(&files).iter().all(|v| v == "files" || v.starts_with("files/")));
        assert_eq!(variants_of(&expand("parallel-writeback/shared", None, &[1]).unwrap()).len(), 4);
        let one = groups_for("parallel-writeback/shared/rotor-2", None).unwrap();
        assert_eq!(variants_of(&one), ["shared/rotor-2"]);
        assert_eq!(variants_of(&groups_for("parallel-writeback/files/region-64", None).unwrap()), ["files/region-64"]);
        for bad in [
            "parallel-writeback/",
            "parallel-writeback/both",
            "parallel-writeback/files/",
            "parallel-writeback/files/single-2",
            "parallel-writeback/files/rotor-0",
            "parallel-writeback/files/rotor-65",
            "parallel-writeback/files/rotor-02",
            "parallel-writeback/files/rotor",
            "parallel-writeback/files/shards-2",
            "parallel-writeback/files/rotor-2/x",
            "seq-write/files",
        ] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        assert_eq!(Writeback::parse("single-1"), Some(Writeback { routing: Routing::Single, workers: 1 }));
        assert_eq!(Writeback::parse("region-4").map(Writeback::name).as_deref(), Some("region-4"));
    }

    #[test]
    fn options_are_overridden_not_repeated() {
        let w = Writeback { routing: Routing::Rotor, workers: 2 };
        assert_eq!(
            options_with("capacity=256M", &w.options()),
            "capacity=256M,writeback_routing=rotor,writeback_workers=2"
        );
        assert_eq!(
            options_with("capacity=1G;writeback_workers=4, writeback_routing=region,region_size=8M", &w.options()),
            "capacity=1G,writeback_workers=2,writeback_routing=rotor,region_size=8M"
        );
        let c = wbcache::Config::from_options(&options_with("capacity=64M,writeback_workers=1", &w.options())).unwrap();
        assert_eq!((c.writeback_routing, c.writeback_workers), (Routing::Rotor, 2));
    }

    /// files: twelve writers, each over its own new file of a twelfth of
    /// --size, each fsyncing it; shared: twelve shares of one file, one
    /// fsync after all of them. On a device: twelfths of the area, or all of it.
    #[test]
    fn parallel_writeback_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let group = |v: &str| {
            groups_for("parallel-writeback", None)
                .unwrap()
                .into_iter()
                .find(|g| g.variant.as_deref() == Some(v))
                .unwrap()
        };
        let files = build_spec(&group("files"), EngineKind::KernelDirect, &p, &place, false);
        assert_eq!(files.jobs.len(), 12);
        let per = 256 * MIB / 12 / 4096 * 4096;
        assert_eq!(pw_file_len(&p), per);
        for (i, j) in files.jobs.iter().enumerate() {
            assert_eq!((j.target.len, j.target.offset, j.target.create), (per, 0, true));
            assert!(matches!(j.pattern, Pattern::Rand { write: true, bs: 4096, ops: Some(n) } if n == per / 4096));
            assert!(j.fsync_at_end && !j.fsync_after_all, "each writer fsyncs its own file");
            assert_eq!(j.seed, 20 + i as u64, "each file its own random order");
        }
        let mut paths: Vec<_> = files.jobs.iter().map(|j| j.target.path.clone()).collect();
        paths.dedup();
        assert_eq!(paths.len(), 12);
        assert_eq!(files.deadline_s, 2.0);
        assert_eq!(files.wbcache_options, p.wbcache_options, "the kernel's rows change no option");

        let shared = build_spec(&group("shared/region-4"), EngineKind::Wbcache, &p, &place, false);
        assert_eq!(shared.jobs.len(), 12);
        assert!(shared.jobs.iter().all(|j| j.target.path == shared.jobs[0].target.path && j.target.len == 256 * MIB));
        for (i, j) in shared.jobs.iter().enumerate() {
            assert!(
                matches!(j.pattern, Pattern::RandShare { bs: 4096, share, shares: 12, key: 40 } if share == i as u64)
            );
            assert!(!j.fsync_at_end);
            assert_eq!(j.fsync_after_all, i == 0, "one fsync, after the last writer");
        }
        assert_eq!(shared.wbcache_options, "capacity=128M,writeback_routing=region,writeback_workers=4");
        assert_eq!(shared.variant.as_deref(), Some("shared/region-4"));

        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let s = build_spec(&group("files/rotor-2"), EngineKind::Wbcache, &p, &dev, false);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, (0..12).map(|i| (i * per, per)).collect::<Vec<_>>());
        assert!(s.jobs.iter().all(|j| !j.target.create && j.target.path == std::path::Path::new("/dev/x")));
        let s = build_spec(&group("shared"), EngineKind::KernelBuffered, &p, &dev, false);
        assert!(s.jobs.iter().all(|j| (j.target.offset, j.target.len, j.target.create) == (0, 256 * MIB, false)));
    }

    fn pw_group(variant: &str) -> Group {
        crate::workloads::groups_for("parallel-writeback", None)
            .unwrap()
            .into_iter()
            .find(|g| g.variant.as_deref() == Some(variant))
            .unwrap()
    }

    /// A parallel-writeback row: the writers' MB/s end at the last write,
    /// the writeback's at the last fsync; CPU per GiB over the latter; what
    /// each writeback worker wrote when the cache's stats list them.
    #[test]
    fn parallel_writeback_row() {
        let mut jobs: Vec<JobResult> = (0..12).map(|_| job("", 100 << 20, 1.0)).collect();
        for (i, j) in jobs.iter_mut().enumerate() {
            j.role = None;
            j.io_end_s = 1.0 + i as f64 / 100.0;
            j.end_s = 2.0 + i as f64 / 10.0;
        }
        let stats = r#"{"dirty_bytes":0,"writeback_workers":[{"device":7,"worker":0,"written_bytes":1048576,"ios":1,"busy_us":3,"cpu_us":2},{"device":7,"worker":1,"written_bytes":2097152,"ios":2,"busy_us":3,"cpu_us":2}],"io_backend":"uring"}"#;
        let o = Outcome {
            status: Status::Ok,
            error: None,
            jobs,
            dirty: vec![(0.1, 1 << 20)],
            peak_dirty_bytes: 1 << 20,
            wbcache_stats: Some(stats.into()),
            io_backend: None,
            cpu_busy_s: Some(3.75),
            peak_rss_bytes: None,
            block_device: None,
        };
        let rows = rows_from(&pw_group("files/rotor-2"), EngineKind::Wbcache, &o);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        let bytes = 12.0 * (100 << 20) as f64;
        assert_eq!(r.variant.as_deref(), Some("files/rotor-2"));
        assert_eq!(r.throughput_mb_s, Some(round3(bytes / 1.11 / 1e6)), "until the last write, no fsync");
        assert_eq!(pw_figures(r).writeback_mb_s, Some(round3(bytes / 3.1 / 1e6)), "until the last fsync");
        assert_eq!(pw_figures(r).cpu_s_per_gib, Some(round3(3.75 / (1200.0 / 1024.0))));
        assert_eq!(pw_figures(r).written_bytes_per_worker, Some(vec![1 << 20, 2 << 20]));
        assert_eq!(r.group, "parallel-writeback-files", "one chart per pattern");
        assert_eq!(PARALLEL_WRITEBACK.series_label(r), "wbcache rotor-2");
        let json = row_value(r);
        assert_eq!(json["writeback_mb_s"], pw_figures(r).writeback_mb_s.unwrap());
        assert_eq!(json["cpu_s_per_gib"], pw_figures(r).cpu_s_per_gib.unwrap());
        assert_eq!(json["written_bytes_per_worker"], serde_json::json!([1 << 20, 2 << 20]));
        let text = row_json(r);
        assert!(text.ends_with(&format!(
            ",\"fsync_total_s\":null,\"writeback_mb_s\":{},\"cpu_s_per_gib\":{},\"written_bytes_per_worker\":[1048576,2097152],\
             \"hot_hit_ratio\":null,\"hot_mb_s\":null,\"hot_mb_s_alone_ratio\":null,\"dropbehind_freed_bytes\":null,\"dropbehind_cpu_us\":null,\
             {SQLITE_NULLS},{ADVICE_NULLS},{PROGRAM_NULLS},{READERS_NULLS}}}",
            json["writeback_mb_s"], json["cpu_s_per_gib"]
        )));
        // The kernel's rows: no configuration in the label, nor workers.
        let mut kernel = o.clone();
        kernel.wbcache_stats = None;
        let k = rows_from(&pw_group("files"), EngineKind::KernelBuffered, &kernel);
        assert_eq!(
            (PARALLEL_WRITEBACK.series_label(&k[0]).as_str(), pw_figures(&k[0]).written_bytes_per_worker.clone()),
            ("kernel-buffered", None)
        );
        // Stats without the array (or an empty one) give no column.
        assert_eq!(written_per_worker(r#"{"dirty_bytes":0}"#), None);
        assert_eq!(written_per_worker(r#"{"writeback_workers":[]}"#), None);
        assert_eq!(written_per_worker("not json"), None);
    }

    fn pw_row(variant: &str, engine: &str, writeback: f64) -> ResultRow {
        let mut row = ResultRow::empty(
            &pw_group(variant),
            EngineKind::parse(engine).unwrap(),
            Some(variant.into()),
            Status::Ok,
            None,
        );
        row.update_own(|f: &mut WritebackFigures| f.writeback_mb_s = Some(writeback));
        row.throughput_mb_s = Some(writeback * 1.5);
        row.update_own(|f: &mut WritebackFigures| f.cpu_s_per_gib = Some(2.5));
        row
    }

    /// Per pattern: the best wbcache configuration against kernel-buffered
    /// and 0.9 × kernel-direct.
    #[test]
    fn parallel_writeback_targets() {
        let rows = vec![
            pw_row("files", "kernel-buffered", 400.0),
            pw_row("files", "kernel-direct", 500.0),
            pw_row("files/single-1", "wbcache", 300.0),
            pw_row("files/rotor-4", "wbcache", 420.0),
            pw_row("files/region-4", "wbcache", 460.0),
            pw_row("shared", "kernel-buffered", 300.0),
            pw_row("shared", "kernel-direct", 600.0),
            pw_row("shared/single-1", "wbcache", 280.0),
            pw_row("shared/region-4", "wbcache", 290.0),
        ];
        let v = verdicts(&rows, "parallel-writeback");
        let names: Vec<&str> = v.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "parallel-writeback files: best wbcache writeback MB/s ≥ kernel-buffered",
                "parallel-writeback files: best wbcache writeback MB/s ≥ 0.9 × kernel-direct",
                "parallel-writeback shared: best wbcache writeback MB/s ≥ kernel-buffered",
                "parallel-writeback shared: best wbcache writeback MB/s ≥ 0.9 × kernel-direct",
            ]
        );
        // files: 460 ≥ 400 and ≥ 450; shared: 290 < 300 and < 540.
        assert_eq!(v.iter().map(|(_, met)| *met).collect::<Vec<_>>(), [true, true, false, false]);
        let table = targets(&rows, 1 << 30, &[], true).unwrap();
        assert!(table.contains("| 460 (region-4) vs 400 MB/s (1.15×) | met |"), "{table}");
        assert!(table.contains("| 290 (region-4) vs 600 MB/s (0.48×) | NOT met |"), "{table}");
        // A failed row is not the best; without wbcache rows, no lines.
        let mut failed = rows.clone();
        failed[4].status = "error".into();
        assert!(targets(&failed, 1 << 30, &[], true).unwrap().contains("| 420 (rotor-4) vs 400 MB/s (1.05×) | met |"));
        let kernel_only: Vec<ResultRow> = rows.iter().filter(|r| r.engine != "wbcache").cloned().collect();
        assert!(verdicts(&kernel_only, "parallel-writeback").is_empty());
        // Only kernel-buffered ran: only its line.
        let no_direct: Vec<ResultRow> = rows.iter().filter(|r| r.engine != "kernel-direct").cloned().collect();
        assert_eq!(verdicts(&no_direct, "parallel-writeback").len(), 2);
    }

    /// The table: ratios within the pattern, and the two comparisons under it.
    #[test]
    fn parallel_writeback_table_compares_within_a_pattern() {
        let mut rows = vec![
            pw_row("files", "kernel-buffered", 400.0),
            pw_row("files", "kernel-direct", 500.0),
            pw_row("files/single-1", "wbcache", 250.0),
            pw_row("files/rotor-2", "wbcache", 400.0),
            pw_row("files/region-2", "wbcache", 500.0),
            pw_row("shared", "kernel-buffered", 200.0),
            pw_row("shared/single-1", "wbcache", 200.0),
            pw_row("shared/rotor-2", "wbcache", 300.0),
            pw_row("shared/region-2", "wbcache", 300.0),
        ];
        rows[4].update_own(|f: &mut WritebackFigures| f.written_bytes_per_worker = Some(vec![3 << 20, 1 << 20]));
        rows[8].status = "error".into();
        rows[8].error = Some("boom".into());
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let table = pw_table("parallel-writeback", "about", &refs);
        assert!(table.contains(
            "| variant | engine | writers MB/s | writeback MB/s | CPU s/GiB | vs single-1 | vs kernel-buffered | \
             vs kernel-direct | written per worker MiB | status |"
        ));
        assert!(table.contains("| files | kernel-direct | 750 | 500 | 2.50 | — | 1.25× | 1.00× | — | ok |"), "{table}");
        assert!(table.contains("| files/region-2 | wbcache | 750 | 500 | 2.50 | 2.00× | 1.25× | 1.00× | 3 / 1 | ok |"));
        assert!(table.contains("| shared/rotor-2 | wbcache | 450 | 300 | 2.50 | 1.50× | 1.50× | — | — | ok |"));
        assert!(table.contains("| shared/region-2 | wbcache | — | — | — | — | — | — | — | error: boom |"));
        assert!(table.contains("Region ÷ rotor, writeback MB/s at the same worker count: files: 2 workers 1.25×."));
        assert!(table.contains(
            "One shared file ÷ one file per writer, writeback MB/s: kernel-buffered 0.50×, wbcache single-1 0.80×, \
             wbcache rotor-2 0.75×."
        ));
        assert!(table.contains("kernel-dontcache and wbcache-dontcache do not run this workload. written per worker:"));
    }
}
