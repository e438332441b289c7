//! `fsync-under-load`: a foreground writer's fsyncs, each phase once alone
//! and once next to two background writers of the same engine, and the
//! background writers alone. The foreground's timed phase (append, pause,
//! fsync, each fsync timed) is this module's own; the background writers
//! are the generic streaming loop, stopped when the foreground ends. A
//! group with a foreground gives its row, and a loaded one also the
//! background writers' row; the table orders each phase idle, loaded, then
//! its background, and the fsyncs of `small/load` get a chart of their own.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    described, round_down, Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Workload, WorkloadInfo, KIB, MIB,
};
use crate::bench_worker::{JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{EngineKind, Target};
use crate::measure::{round3, Histogram, Percentiles};
use crate::report::{
    aggregate, baseline, field_names, find_row, fmt_num, fmt_seconds, heading, ms, of_role, ratio_of, round6,
    ResultRow, RowTable, TargetInputs, Verdict,
};
use crate::svg::{engine_color, line_chart_scaled, Line};
use crate::sys::{fmt_size, IoBuffer};

/// The posting the fsync-under-load workload follows.
const URGENT_WRITEBACK: &str =
    "the LKML posting \"block, mm: add support for boosting urgent asynchronous writeback io\" by Daeho Jeong";

pub struct FsyncUnderLoad;

pub static FSYNC_UNDER_LOAD: FsyncUnderLoad = FsyncUnderLoad;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "fsync-under-load",
    summary: "a writer's fsyncs alone and next to two streaming writers",
    about: "a foreground writer's fsyncs, each phase once alone (idle) and once next to two background writers of the same engine (load: 1 MiB sequential writes to two new files of up to --size, wrapping, no fsync, until the foreground ends); variants small/idle and small/load, 100 × (append 4 KiB to its own new file, sleep 100 ms, fsync); large/idle and large/load, 50 × (append 8 MiB to its own new file in one call, fsync); background/alone, the two background writers alone for --runtime. A --runtime under 5 s shortens the phases to runtime × 20 small (at least 10) and runtime × 10 large (at least 5) iterations. Rows: fsync p50/p99/max and total per engine, and the background writers' MB/s with and without the fsyncs",
    models: "a database committing small transactions (or a program saving a file) while a checkpoint or a backup streams gigabytes to the same disk: what an fsync costs under load",
    source: Some(URGENT_WRITEBACK),
};

/// The measurement groups of `fsync-under-load`, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncGroup {
    SmallIdle,
    SmallLoad,
    LargeIdle,
    LargeLoad,
    BackgroundAlone,
}

/// The foreground phase of an `fsync-under-load` group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreground {
    /// 4 KiB appended, a 100 ms pause, fsync.
    Small,
    /// 8 MiB appended in one call, fsync.
    Large,
}

impl FsyncGroup {
    pub const ALL: [FsyncGroup; 5] = [
        FsyncGroup::SmallIdle,
        FsyncGroup::SmallLoad,
        FsyncGroup::LargeIdle,
        FsyncGroup::LargeLoad,
        FsyncGroup::BackgroundAlone,
    ];

    /// The variant name (JSON `variant`).
    pub fn variant(self) -> &'static str {
        match self {
            FsyncGroup::SmallIdle => "small/idle",
            FsyncGroup::SmallLoad => "small/load",
            FsyncGroup::LargeIdle => "large/idle",
            FsyncGroup::LargeLoad => "large/load",
            FsyncGroup::BackgroundAlone => "background/alone",
        }
    }

    pub fn foreground(self) -> Option<Foreground> {
        match self {
            FsyncGroup::SmallIdle | FsyncGroup::SmallLoad => Some(Foreground::Small),
            FsyncGroup::LargeIdle | FsyncGroup::LargeLoad => Some(Foreground::Large),
            FsyncGroup::BackgroundAlone => None,
        }
    }

    /// Whether the two background writers run.
    pub fn loaded(self) -> bool {
        !matches!(self, FsyncGroup::SmallIdle | FsyncGroup::LargeIdle)
    }

    /// The variant of the row that reports the background writers of a
    /// group with a foreground (`None` for the idle groups).
    pub fn background_variant(self) -> Option<&'static str> {
        match self {
            FsyncGroup::SmallLoad => Some(BACKGROUND_WITH_FSYNC),
            FsyncGroup::LargeLoad => Some(BACKGROUND_WITH_LARGE_FSYNC),
            FsyncGroup::BackgroundAlone => Some("background/alone"),
            FsyncGroup::SmallIdle | FsyncGroup::LargeIdle => None,
        }
    }
}

/// The background writers' rows next to a foreground.
const BACKGROUND_WITH_FSYNC: &str = "background/with-fsync";
const BACKGROUND_WITH_LARGE_FSYNC: &str = "background/with-large-fsync";

/// Small fsync iterations for a runtime: 100 at 5 s and above, 20 per
/// second below (at least 10).
pub fn fsync_small_iterations(runtime_s: f64) -> u64 {
    ((runtime_s * 20.0).round() as u64).clamp(10, 100)
}

/// Large fsync iterations for a runtime: 50 at 5 s and above, 10 per
/// second below (at least 5).
pub fn fsync_large_iterations(runtime_s: f64) -> u64 {
    ((runtime_s * 10.0).round() as u64).clamp(5, 50)
}

/// The pause between a small write and its fsync.
pub const FSYNC_SMALL_PAUSE_MS: u64 = 100;
/// What one foreground iteration appends.
pub const FSYNC_SMALL_BS: u64 = 4 * KIB;
pub const FSYNC_LARGE_BS: u64 = 8 * MIB;

impl Foreground {
    /// `(bytes per iteration, iterations, pause before the fsync in ms)`.
    pub fn shape(self, runtime_s: f64) -> (u64, u64, u64) {
        match self {
            Foreground::Small => (FSYNC_SMALL_BS, fsync_small_iterations(runtime_s), FSYNC_SMALL_PAUSE_MS),
            Foreground::Large => (FSYNC_LARGE_BS, fsync_large_iterations(runtime_s), 0),
        }
    }

    /// No new iteration starts after this many seconds: generous, so
    /// that slow fsyncs under load are measured, not cut off.
    pub fn deadline_s(self, runtime_s: f64) -> f64 {
        let (_, n, _) = self.shape(runtime_s);
        match self {
            Foreground::Small => n as f64 * 0.1 + 30.0,
            Foreground::Large => 30.0 + n as f64,
        }
    }
}

/// The role of the job whose fsyncs `fsync-under-load` measures: when it
/// ends, the jobs with the [`BACKGROUND`] role stop.
pub const FOREGROUND: &str = "foreground";
/// The role of `fsync-under-load`'s background writers.
pub const BACKGROUND: &str = "background";

/// The foreground's timed phase: `iterations` × (write `bs` at the end of
/// what the job wrote so far, sleep `pause_ms`, fsync), each fsync timed
/// on its own; no new iteration after the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsyncEach {
    pub bs: u64,
    pub iterations: u64,
    pub pause_ms: u64,
}

/// What the foreground measured besides its writes and fsyncs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FsyncEachResult {
    /// The sum of the times of every fsync timed one by one, in seconds.
    pub total_s: f64,
    /// Each of those fsyncs: `(seconds since the job's start at which it
    /// started, its latency in ms)`.
    pub points: Vec<(f64, f64)>,
}

/// The files of an `fsync-under-load` measurement: the foreground's
/// (`fg_len` bytes, `bs` per iteration) and the two background writers'
/// (up to `want` bytes each, what is left of the space after the
/// foreground's). On a device: the foreground's region first (at most a
/// quarter of the device, whole iterations), then the two writers' halves
/// of the rest.
fn fsync_layout(place: &Place, name: &str, fg_len: u64, bs: u64, want: u64) -> (Target, [Target; 2]) {
    match (&place.device, &place.dir) {
        (Some(dev), _) => {
            let fg = if fg_len == 0 { 0 } else { round_down(fg_len.min(place.device_size / 4), bs) };
            let per = round_down(want.min(place.device_size.saturating_sub(fg) / 2).max(MIB), MIB);
            let region = |offset: u64, len: u64| Target { path: dev.clone(), offset, len, create: false };
            (region(0, fg), [region(fg, per), region(fg + per, per)])
        }
        (None, Some(_)) => {
            let rest = Place { free_bytes: place.free_bytes.saturating_sub(fg_len), ..place.clone() };
            let per = rest.per_writer(2, want);
            (place.fresh(name, 2, fg_len), [place.fresh(name, 0, per), place.fresh(name, 1, per)])
        }
        (None, None) => unreachable!("a place has a dir or a device"),
    }
}

/// What `fsync-under-load`'s background writers do (said once above its
/// table, before each variant's description).
pub fn fsync_background_about(p: &Params) -> String {
    format!(
        "Background writers: two, of the engine under test, 1 MiB sequential writes to new files of up to {} each \
         (wrapping), no fsync; next to a foreground they run until it ends",
        fmt_size(p.size)
    )
}

impl Workload for FsyncUnderLoad {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(FsyncGroup::ALL.into_iter().map(|f| Group::new(self, Some(f.variant().into()), f)).collect()),
            Some(_) => None,
        }
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let f = *group.shape::<FsyncGroup>();
        let rt = p.runtime_s;
        let foreground = f.foreground().map(|fg| {
            let (_, n, _) = fg.shape(rt);
            match fg {
                Foreground::Small => format!(
                    "{n} × (4 KiB appended to the foreground's own new file, {FSYNC_SMALL_PAUSE_MS} ms pause, fsync)"
                ),
                Foreground::Large => {
                    format!("{n} × (8 MiB appended to the foreground's own new file in one write call, fsync)")
                }
            }
        });
        match (foreground, f.loaded()) {
            (Some(fg), false) => format!("{fg}, alone"),
            (Some(fg), true) => format!("{fg}, next to the two background writers"),
            (None, _) => format!("the two background writers alone for {rt} s"),
        }
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let f = *group.shape::<FsyncGroup>();
        let (bs, iterations, pause_ms) = f.foreground().map_or((MIB, 0, 0), |fg| fg.shape(p.runtime_s));
        let (fg_target, bg_targets) = fsync_layout(place, name, bs * iterations, bs, p.size);
        let mut jobs = Vec::new();
        if f.foreground().is_some() {
            let pat = Pattern::own(&FsyncEach { bs, iterations, pause_ms });
            let fg = JobSpec::new(engine, fg_target, pat).seeded(12);
            jobs.push(fg.with_role(FOREGROUND).stopping_the_others());
        }
        if f.loaded() {
            for (i, t) in bg_targets.into_iter().enumerate() {
                let pat = Pattern::Seq { write: true, bs: MIB, total: None };
                jobs.push(JobSpec::new(engine, t, pat).seeded(13 + i as u64).with_role(BACKGROUND));
            }
        }
        let deadline_s = f.foreground().map_or(p.runtime_s, |fg| fg.deadline_s(p.runtime_s));
        Jobs { jobs, deadline_s, pipelined: true }
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        let each: FsyncEach = ctx.own_pattern()?;
        ctx.run_timed(false, |files, started| fsync_each(ctx, &mut *files.file, each, *started))
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        fsync_rows(group, engine, *group.shape::<FsyncGroup>(), jobs, o)
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<FsyncFigures>()
    }

    fn shares_the_disk(&self) -> bool {
        true
    }

    /// The fsync total of a foreground row (not its MB/s, which the pauses
    /// dominate).
    fn primary_figure(&self, row: &ResultRow) -> Option<f64> {
        fsync_total_s(row).or(row.us_per_call).or(row.throughput_mb_s)
    }

    /// The foreground's fsyncs, and the background's MB/s.
    fn summary(&self, rows: &[ResultRow]) -> String {
        let Some(fg) = rows.iter().find(|r| fsync_total_s(r).is_some()) else {
            return crate::report::summary(rows);
        };
        let mut s = match fg.fsync_lat_us {
            Some(p) => format!("fsync p50 {:.2} ms, p99 {:.2} ms", p.p50 / 1e3, p.p99 / 1e3),
            None => "no fsync".into(),
        };
        s.push_str(&format!(", fsync total {:.3} s", fsync_total_s(fg).unwrap_or(0.0)));
        if let Some(t) = rows.iter().filter(|r| fsync_total_s(r).is_none()).find_map(|r| r.throughput_mb_s) {
            s.push_str(&format!(", background {t:.1} MB/s"));
        }
        s
    }

    /// The background writers next to a foreground are one line each.
    fn series_label(&self, row: &ResultRow) -> String {
        match &row.variant {
            Some(v) if v.starts_with("background/with") => format!("{} background", row.engine),
            _ => row.engine.clone(),
        }
    }

    fn line_style(&self, row: &ResultRow) -> (&'static str, &'static str) {
        let dash = match &row.variant {
            Some(v) if v.starts_with("background/with") => "7 4",
            _ => "",
        };
        (engine_color(&row.engine), dash)
    }

    /// Each fsync of `small/load` over time, one line per engine.
    fn charts(&self, rows: &[ResultRow], subtitle: &str) -> Vec<(String, String)> {
        let fsync = fsync_lines(rows);
        if fsync.is_empty() {
            return Vec::new();
        }
        let svg = line_chart_scaled(
            "fsync-under-load small/load: each fsync's latency",
            &format!("{subtitle} (4 KiB appended, 100 ms pause, fsync; two background writers)"),
            "seconds since the foreground started (when the fsync began)",
            "fsync latency, ms (log scale)",
            &fsync,
            true,
        );
        vec![("fsync-under-load-small-load-fsync.svg".to_string(), svg)]
    }

    fn about(&self, groups: &[&Group], p: &Params) -> String {
        format!("{}. {}", fsync_background_about(p), described(groups, p))
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        fsync_table(self.name(), about, rows)
    }

    fn targets(&self, rows: &[&ResultRow], _inputs: &TargetInputs<'_>) -> Vec<Verdict> {
        fsync_targets(rows)
    }

    fn targets_rank(&self) -> u32 {
        5
    }
}

/// The foreground's timed phase on `file` (see [`FsyncEach`]); `started`
/// is the job's start, from which its deadline and its fsyncs' times run.
fn fsync_each(
    ctx: &JobContext<'_>,
    file: &mut dyn crate::engines::EngineFile,
    each: FsyncEach,
    started: Instant,
) -> io::Result<Measured> {
    let FsyncEach { bs, iterations, pause_ms } = each;
    let job = ctx.job;
    let base = job.target.offset;
    // The file grows by `bs` per iteration (wrapping only on a device
    // region shorter than the run).
    let region = (job.target.len / bs).max(1) * bs;
    let wbuf = IoBuffer::filled(bs as usize, job.seed);
    let pause = Duration::from_millis(pause_ms);
    let mut m = Measured::default();
    let mut fsyncs = Histogram::default();
    let mut total = Duration::ZERO;
    let mut points = Vec::new();
    let deadline = started + ctx.deadline_after();
    for i in 0..iterations {
        if ctx.cancel.load(Relaxed) || Instant::now() >= deadline {
            break;
        }
        let t = Instant::now();
        file.write_at(&wbuf, base + (i * bs) % region)?;
        m.record(ctx.counter(), bs, t);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let t = Instant::now();
        file.fsync()?;
        let took = t.elapsed();
        fsyncs.record(took.as_nanos() as u64);
        total += took;
        points.push((round3((t - started).as_secs_f64()), round3(took.as_secs_f64() * 1e3)));
    }
    if fsyncs.count() > 0 {
        m.fsync = Some(fsyncs);
    }
    m.set_own(&FsyncEachResult { total_s: total.as_secs_f64(), points });
    Ok(m)
}

/// `fsync-under-load`'s own figure of its foreground rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FsyncFigures {
    /// The sum of every fsync's time of the foreground, in seconds.
    pub fsync_total_s: Option<f64>,
}

/// A foreground row's fsync total ([`FsyncFigures`]); `None` on other rows.
fn fsync_total_s(row: &ResultRow) -> Option<f64> {
    row.own::<FsyncFigures>().fsync_total_s
}

/// `fsync-under-load`: the foreground's row (its fsyncs, its writes, its
/// bytes over its time) and the background writers' row (their bytes over
/// the time they ran), whichever the group has.
fn fsync_rows(group: &Group, engine: EngineKind, f: FsyncGroup, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
    let (fore, back) = (of_role(jobs, FOREGROUND), of_role(jobs, BACKGROUND));
    let mut rows = Vec::new();
    if !fore.is_empty() {
        let mut row = aggregate(group, engine, group.variant.clone(), &fore, o);
        let own: Vec<FsyncEachResult> = fore.iter().filter_map(|j| j.own()).collect();
        row.set_own(&FsyncFigures { fsync_total_s: Some(round6(own.iter().map(|r| r.total_s).sum())) });
        row.fsync_points = own.into_iter().flat_map(|r| r.points).collect();
        // Its fsyncs are charted one by one; there is no final fsync.
        row.fsync_tail_s = None;
        rows.push(row);
    }
    if let (false, Some(variant)) = (back.is_empty(), f.background_variant()) {
        let mut row = aggregate(group, engine, Some(variant.to_string()), &back, o);
        let bytes: u64 = back.iter().map(|j| j.bytes).sum();
        let ran_s = back.iter().map(|j| j.io_end_s).fold(0.0, f64::max);
        row.throughput_mb_s = (ran_s > 0.0).then(|| round3(bytes as f64 / ran_s / 1e6));
        rows.push(row);
    }
    rows
}

/// One line per engine of the fsync-under-load `small/load` group: each
/// fsync, `(when it began, its latency in ms)`.
pub fn fsync_lines(rows: &[ResultRow]) -> Vec<Line> {
    rows.iter()
        .filter(|r| r.ok() && r.is_of(FSYNC_UNDER_LOAD.name()))
        .filter(|r| r.variant.as_deref() == Some(FsyncGroup::SmallLoad.variant()))
        .filter(|r| !r.fsync_points.is_empty())
        .map(|r| Line {
            label: r.engine.clone(),
            color: engine_color(&r.engine),
            dash: "",
            points: r.fsync_points.clone(),
            tail: None,
        })
        .collect()
}

/// The order of `fsync-under-load`'s rows in its table: each foreground
/// phase idle, then under load, then the background writers of that load.
fn fsync_variant_rank(variant: Option<&str>) -> usize {
    const ORDER: [&str; 7] = [
        "small/idle",
        "small/load",
        BACKGROUND_WITH_FSYNC,
        "large/idle",
        "large/load",
        BACKGROUND_WITH_LARGE_FSYNC,
        "background/alone",
    ];
    variant.and_then(|v| ORDER.iter().position(|o| *o == v)).unwrap_or(ORDER.len())
}

/// What the `fsync-under-load` table's columns mean (printed above it).
const FSYNC_COLUMNS: &str = "fsync columns: the foreground's fsyncs, each timed alone; total: their sum. MB/s: on \
     foreground rows, the foreground's bytes over its time (pauses included); on background rows, the two background \
     writers' bytes over the time they ran. p99 vs kernel-buffered: fsync p99 ÷ kernel-buffered's in the same \
     variant (lower is better).";

/// The `fsync-under-load` table: fsync latency and total per engine and
/// variant, and MB/s (the foreground's, or the background writers').
pub fn fsync_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let mut rows: Vec<&ResultRow> = rows.to_vec();
    rows.sort_by_key(|r| fsync_variant_rank(r.variant.as_deref()));
    let head = [
        "variant",
        "engine",
        "fsync p50 ms",
        "fsync p99 ms",
        "fsync max ms",
        "fsync total s",
        "MB/s",
        "p99 vs kernel-buffered",
    ];
    let mut table = RowTable::new(&[&heading(title), about, FSYNC_COLUMNS], &head, &rows);
    for r in &rows {
        let mut c = table.cells(r);
        c.variant().engine();
        for f in [|p: &Percentiles| p.p50, |p: &Percentiles| p.p99, |p: &Percentiles| p.max] {
            c.figure(r.fsync_lat_us.as_ref(), |p| ms(f(p)));
        }
        c.figure(fsync_total_s(r), fmt_seconds).figure(r.throughput_mb_s, fmt_num);
        let kernel_p99 = baseline(r, &rows).and_then(|b| b.fsync_lat_us).map(|p| p.p99).filter(|p99| *p99 > 0.0);
        c.times(ratio_of(r.fsync_lat_us.map(|p| p.p99), kernel_p99));
        table.push(c);
    }
    table.finish()
}

/// `fsync-under-load`'s goals, where this run has the rows they compare.
fn fsync_targets(rows: &[&ResultRow]) -> Vec<Verdict> {
    let mut lines = Vec::new();
    let find = |variant: FsyncGroup, engine: &str| find_row(rows, Some(variant.variant()), engine);
    let p99 = |r: &ResultRow| r.fsync_lat_us.map(|p| p.p99);
    let total = fsync_total_s;
    let wb_small_load = find(FsyncGroup::SmallLoad, "wbcache");
    if let (Some(a), Some(b)) = (wb_small_load.and_then(p99), find(FsyncGroup::SmallIdle, "wbcache").and_then(p99)) {
        lines.push(Verdict::new(
            "fsync-under-load small/load: wbcache fsync p99 ≤ 3 × its small/idle p99".into(),
            format!("{} vs {} ms idle ({:.2}×)", ms(a), ms(b), a / b.max(1e-9)),
            a <= 3.0 * b,
        ));
    }
    let kb_small_load = find(FsyncGroup::SmallLoad, "kernel-buffered");
    if let (Some(a), Some(b)) = (wb_small_load.and_then(p99), kb_small_load.and_then(p99)) {
        lines.push(Verdict::new(
            "fsync-under-load small/load: wbcache fsync p99 ≤ kernel-buffered/5".into(),
            format!("{} vs {} ms (1/{:.1})", ms(a), ms(b), b / a.max(1e-9)),
            a <= b / 5.0,
        ));
    }
    if let (Some(a), Some(b)) = (wb_small_load.and_then(total), kb_small_load.and_then(total)) {
        let below = if b > 0.0 { (1.0 - a / b) * 100.0 } else { 0.0 };
        lines.push(Verdict::new(
            "fsync-under-load small/load: wbcache fsync total ≥ 85% below kernel-buffered's".into(),
            format!("{} vs {} s ({below:.0}% below)", fmt_seconds(a), fmt_seconds(b)),
            a <= 0.15 * b,
        ));
    }
    if let (Some(a), Some(b)) =
        (find(FsyncGroup::LargeLoad, "wbcache").and_then(total), find(FsyncGroup::LargeIdle, "wbcache").and_then(total))
    {
        lines.push(Verdict::new(
            "fsync-under-load large/load: wbcache fsync total ≤ 1.5 × its large/idle total".into(),
            format!("{} vs {} s idle ({:.2}×)", fmt_seconds(a), fmt_seconds(b), a / b.max(1e-9)),
            a <= 1.5 * b,
        ));
    }
    if let (Some(a), Some(b)) = (
        find_row(rows, Some(BACKGROUND_WITH_FSYNC), "wbcache").and_then(|r| r.throughput_mb_s),
        find(FsyncGroup::BackgroundAlone, "wbcache").and_then(|r| r.throughput_mb_s),
    ) {
        lines.push(Verdict::new(
            "fsync-under-load background: wbcache writers' MB/s next to the small fsyncs ≥ 0.9 × alone".into(),
            format!("{a:.0} vs {b:.0} MB/s alone ({:.2}×)", a / b.max(1e-9)),
            a >= 0.9 * b,
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::report::test_support::{job, own, row_json, row_value, verdicts};
    use crate::workloads::{build_spec, groups_for, info, rows_from, targets, test_params as params, Spec};

    #[test]
    fn fsync_under_load_expands_to_five_groups() {
        let groups = groups_for("fsync-under-load", None).unwrap();
        let variants: Vec<&str> = groups.iter().map(|g| g.variant.as_deref().unwrap()).collect();
        assert_eq!(variants, ["small/idle", "small/load", "large/idle", "large/load", "background/alone"]);
        assert!(groups.iter().all(|g| g.workload == "fsync-under-load"));
        // The slug names files and charts: no '/' in it.
        assert_eq!(groups[1].slug(), "fsync-under-load-small-load");
        assert!(info("fsync-under-load").is_some_and(|w| w.source.is_some_and(|s| s.contains("Daeho Jeong"))));
    }

    #[test]
    fn fsync_iterations_follow_the_runtime() {
        assert_eq!((fsync_small_iterations(5.0), fsync_large_iterations(5.0)), (100, 50));
        assert_eq!((fsync_small_iterations(1.0), fsync_large_iterations(1.0)), (20, 10));
        assert_eq!((fsync_small_iterations(0.1), fsync_large_iterations(0.1)), (10, 5));
        assert_eq!((fsync_small_iterations(60.0), fsync_large_iterations(60.0)), (100, 50));
        assert_eq!(fsync_small_iterations(2.26), 45);
        assert_eq!(Foreground::Small.deadline_s(5.0), 40.0);
        assert_eq!(Foreground::Large.deadline_s(5.0), 80.0);
    }

    #[test]
    fn fsync_specs_have_a_foreground_and_two_background_writers() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(1.0);
        let spec = |variant: &str| {
            let g = groups_for("fsync-under-load", None)
                .unwrap()
                .into_iter()
                .find(|g| g.variant.as_deref() == Some(variant))
                .unwrap();
            build_spec(&g, EngineKind::Wbcache, &p, &place, false)
        };
        let roles = |s: &Spec| s.jobs.iter().map(|j| j.role.clone().unwrap()).collect::<Vec<_>>();
        let load = spec("small/load");
        assert_eq!(roles(&load), [FOREGROUND, BACKGROUND, BACKGROUND]);
        assert!(load.jobs.iter().all(|j| !j.fsync_at_end), "no final fsync: the figures are the foreground's");
        assert!(matches!(load.jobs[0].pattern.own_as(), Some(FsyncEach { bs: 4096, iterations: 20, pause_ms: 100 })));
        assert_eq!(load.jobs[0].target.len, 20 * 4096);
        assert!(matches!(load.jobs[1].pattern, Pattern::Seq { write: true, bs: MIB, total: None }));
        assert_eq!(load.jobs[1].target.len, p.size);
        let paths: Vec<_> = load.jobs.iter().map(|j| j.target.path.clone()).collect();
        assert!(paths.iter().all(|t| t.parent() == Some(dir.as_path())), "{paths:?}");
        assert!(paths[0] != paths[1] && paths[1] != paths[2] && paths[0] != paths[2]);
        assert_eq!(load.deadline_s, 20.0 * 0.1 + 30.0);
        assert_eq!(roles(&spec("small/idle")), [FOREGROUND]);
        let large = spec("large/load");
        assert!(matches!(large.jobs[0].pattern.own_as(), Some(FsyncEach { bs: 8388608, iterations: 10, pause_ms: 0 })));
        assert_eq!(large.deadline_s, 40.0);
        let alone = spec("background/alone");
        assert_eq!(roles(&alone), [BACKGROUND, BACKGROUND]);
        assert_eq!(alone.deadline_s, 1.0);
        // On a device: the foreground's region, then the writers' halves of the rest.
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let g = groups_for("fsync-under-load", None).unwrap().swap_remove(3);
        let s = build_spec(&g, EngineKind::Wbcache, &p, &dev, false);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, [(0, 80 * MIB), (80 * MIB, 256 * MIB), (336 * MIB, 256 * MIB)]);
    }

    fn fsync_group(variant: &str) -> Group {
        crate::workloads::groups_for("fsync-under-load", None)
            .unwrap()
            .into_iter()
            .find(|g| g.variant.as_deref() == Some(variant))
            .unwrap()
    }

    /// A foreground with three fsyncs (1, 2 and 5 ms) and two background
    /// writers: the foreground's row and the background/with-fsync row.
    #[test]
    fn fsync_under_load_rows() {
        let mut fg = job(FOREGROUND, 3 * 4096, 0.5);
        fg.end_s = 0.500001;
        let mut fsyncs = Histogram::default();
        for ms in [1, 2, 5] {
            fsyncs.record(ms * 1_000_000);
        }
        fg.fsync = Some(fsyncs.to_data());
        fg.own = own(&FsyncEachResult { total_s: 0.008, points: vec![(0.1, 1.0), (0.2, 2.0), (0.4, 5.0)] });
        let o = Outcome {
            status: Status::Ok,
            error: None,
            jobs: vec![fg, job(BACKGROUND, 300_000_000, 0.5), job(BACKGROUND, 200_000_000, 0.4)],
            dirty: vec![(0.1, 1 << 20)],
            peak_dirty_bytes: 1 << 20,
            wbcache_stats: None,
            io_backend: None,
            cpu_busy_s: None,
            peak_rss_bytes: None,
            block_device: None,
        };
        let rows = rows_from(&fsync_group("small/load"), EngineKind::Wbcache, &o);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (f, b) = (&rows[0], &rows[1]);
        assert_eq!(f.variant.as_deref(), Some("small/load"));
        assert_eq!(fsync_total_s(f), Some(0.008));
        assert_eq!(f.bytes, Some(3 * 4096));
        assert_eq!(f.throughput_mb_s, Some(round3(3.0 * 4096.0 / 0.5 / 1e6)));
        let p = f.fsync_lat_us.unwrap();
        assert!((p.p50 - 2000.0).abs() < 40.0 && p.max == 5000.0, "{p:?}");
        assert_eq!(f.lat_us.unwrap().max, 20.0, "the foreground's write latency");
        assert_eq!(f.fsync_points.len(), 3);
        assert_eq!(f.fsync_tail_s, None, "no final-fsync bar on the throughput chart");
        assert_eq!(b.variant.as_deref(), Some("background/with-fsync"));
        assert_eq!(b.throughput_mb_s, Some(1000.0), "500 MB over the 0.5 s they ran");
        assert_eq!(b.fsync_lat_us, None);
        assert_eq!(fsync_total_s(b), None);
        assert_eq!(FSYNC_UNDER_LOAD.series_label(b), "wbcache background");
        // large/load reports its background too; idle groups only the foreground.
        let large = rows_from(&fsync_group("large/load"), EngineKind::Wbcache, &o);
        assert_eq!(large[1].variant.as_deref(), Some("background/with-large-fsync"));
        let mut idle = o.clone();
        idle.jobs.truncate(1);
        assert_eq!(rows_from(&fsync_group("small/idle"), EngineKind::Wbcache, &idle).len(), 1);
        let mut alone = o.clone();
        alone.jobs.remove(0);
        let alone = rows_from(&fsync_group("background/alone"), EngineKind::Wbcache, &alone);
        assert_eq!(alone.len(), 1);
        assert_eq!((alone[0].variant.as_deref(), alone[0].throughput_mb_s), (Some("background/alone"), Some(1000.0)));
        // The JSON row carries the total, after `error`; other rows carry null.
        let json = row_value(f);
        assert_eq!(json["fsync_total_s"], 0.008);
        assert!(json.get("fsync_points").is_none(), "chart data stays out of the JSON");
        let text = row_json(f);
        assert!(
            text.contains(",\"error\":null,\"fsync_total_s\":0.008,\"writeback_mb_s\":null,"),
            "the new fields come after the older ones: {text}"
        );
        let json = row_value(b);
        assert!(json["fsync_total_s"].is_null());
        // The table: fsync figures in ms, dashes on the background row.
        let table = fsync_table("fsync-under-load", "about", &rows.iter().collect::<Vec<_>>());
        assert!(table.contains("| small/load | wbcache | 2.01 | 5.00 | 5.00 | 0.00800 |"), "{table}");
        assert!(table.contains("| background/with-fsync | wbcache | — | — | — | — | 1,000 | — |"), "{table}");
    }

    fn fsync_row(variant: &str, engine: &str, p99_ms: Option<f64>, total: Option<f64>, mb_s: f64) -> ResultRow {
        let mut row = ResultRow::empty(
            &fsync_group("small/idle"),
            EngineKind::parse(engine).unwrap(),
            Some(variant.into()),
            Status::Ok,
            None,
        );
        row.fsync_lat_us =
            p99_ms.map(|ms| Percentiles { p50: ms * 500.0, p99: ms * 1e3, p999: ms * 1e3, max: ms * 1e3 });
        row.set_own(&FsyncFigures { fsync_total_s: total });
        row.throughput_mb_s = Some(mb_s);
        row
    }

    /// The five fsync-under-load targets, met on one run and missed on another.
    #[test]
    fn fsync_under_load_targets() {
        let good = vec![
            fsync_row("small/idle", "wbcache", Some(1.0), Some(0.02), 0.04),
            fsync_row("small/load", "wbcache", Some(2.5), Some(0.05), 0.04),
            fsync_row("small/load", "kernel-buffered", Some(100.0), Some(1.0), 0.03),
            fsync_row("large/idle", "wbcache", Some(20.0), Some(1.0), 400.0),
            fsync_row("large/load", "wbcache", Some(25.0), Some(1.4), 300.0),
            fsync_row("background/with-fsync", "wbcache", None, None, 950.0),
            fsync_row("background/alone", "wbcache", None, None, 1000.0),
        ];
        let v = verdicts(&good, "fsync-under-load");
        assert_eq!(v.len(), 5, "{v:?}");
        assert!(v.iter().all(|(_, met)| *met), "{v:?}");
        let bad = vec![
            fsync_row("small/idle", "wbcache", Some(1.0), Some(0.02), 0.04),
            fsync_row("small/load", "wbcache", Some(3.5), Some(0.2), 0.04),
            fsync_row("small/load", "kernel-buffered", Some(10.0), Some(1.0), 0.03),
            fsync_row("large/idle", "wbcache", Some(20.0), Some(1.0), 400.0),
            fsync_row("large/load", "wbcache", Some(25.0), Some(1.6), 300.0),
            fsync_row("background/with-fsync", "wbcache", None, None, 850.0),
            fsync_row("background/alone", "wbcache", None, None, 1000.0),
        ];
        let v = verdicts(&bad, "fsync-under-load");
        assert_eq!(v.len(), 5, "{v:?}");
        assert!(v.iter().all(|(_, met)| !*met), "{v:?}");
        assert_eq!(
            v.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
            verdicts(&good, "fsync-under-load").into_iter().map(|(t, _)| t).collect::<Vec<_>>()
        );
        // Without kernel-buffered's row, only the three wbcache-only targets.
        let alone: Vec<ResultRow> = good.into_iter().filter(|r| r.engine == "wbcache").collect();
        assert_eq!(verdicts(&alone, "fsync-under-load").len(), 3);
        // No fsync-under-load rows, no lines about it.
        assert!(targets(&[], 1 << 30, &[], true).is_none());
    }
}
