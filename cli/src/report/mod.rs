//! Results: the JSON result rows (schema version 1: fields are added, never
//! renamed), the reference figures measured without an engine, and what
//! every workload's rows share: the aggregate of a measurement's jobs, the
//! generic summary line. [`table`] holds the Markdown tables' shared parts
//! and the generic table, [`targets`] the targets table of wbcache's goals;
//! each workload's own rows, table and goals are in its module.
//!
//! It stands below the workloads and knows none: a row names its group
//! through [`RowGroup`] and its workload by name; turning an outcome into
//! a workload's rows and gathering the workloads' goals are the catalog's
//! (`crate::workloads`). Its own file, the rows, stands below its tables.

mod device;
pub mod own;
mod table;

pub use device::device_tables;
mod targets;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use own::{field_names, OwnColumns, OwnFigures};
pub use table::{
    baseline, dash, figure_of, fmt_count, fmt_num, fmt_seconds, fmt_three_digits, heading, markdown_table, mib, ms,
    ratio_of, Cells, RowTable,
};
pub use targets::{find_row, targets_table, verdict_count, TargetInputs, Verdict};

use crate::bench_worker::{JobResult, Outcome, Status};
use crate::engines::EngineKind;
use crate::measure::{rate_points, round3, sum_samples, HistData, Histogram, Percentiles, Series};
use crate::sys::Machine;

/// One result row. Field order and names are the JSON schema; fields that do
/// not apply are `null`. The fields every workload's rows have are here; a
/// workload's own figures are a type of its module, held in
/// [`ResultRow::own_figures`] and written in the JSON where schema 1 has
/// them. The `#[serde(skip)]` fields feed tables and charts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResultRow {
    pub workload: String,
    pub engine: String,
    pub variant: Option<String>,
    pub throughput_mb_s: Option<f64>,
    pub runtime_s: Option<f64>,
    pub bytes: Option<u64>,
    pub ops: Option<u64>,
    pub lat_us: Option<Percentiles>,
    pub peak_dirty_bytes: Option<u64>,
    pub us_per_call: Option<f64>,
    pub fsync_lat_us: Option<Percentiles>,
    pub total_s: Option<f64>,
    pub per_second_mb_s: Option<Vec<f64>>,
    pub status: String,
    pub error: Option<String>,
    /// The workload's own figures, a type of its module (see [`own`]):
    /// in the JSON, every workload's own columns, `null` where they are
    /// another workload's.
    #[serde(flatten)]
    pub own_figures: OwnFigures,
    /// The block layer's counters of the device under the measurement's
    /// files, from the start of its timed phase until its last job ended
    /// (every engine; absent where the files are on no block device):
    /// requests, bytes and milliseconds (scheduler queue included) per
    /// direction, flushes, and the device's busy milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_device: Option<crate::sys::BlockDelta>,
    /// wbcache rows: the cache's device account over the measurement (its
    /// setup included), as its stats JSON gives it: `device` (per class:
    /// read, readahead, sync_write, background_write, flush, buffered_write: I/Os, bytes,
    /// the most in flight, latency from submission to completion, and the
    /// background KiB in flight ahead of each), `flush_covered_background_kib`
    /// (background KiB completed since the previous flush, per flush) and
    /// `sync_engine_wait_us` (what fsyncs waited inside the engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_account: Option<serde_json::Value>,
    /// Measurements whose jobs end with a final fsync (the streams):
    /// the engine's dirty and writeback bytes when the last such job's
    /// I/O ended, and the seconds from then until that job's data was
    /// durable (its final fsync). At 1G the kernel keeps a stream in
    /// memory where wbcache writes it back as it comes: these say what
    /// each left to write at the end, and what that cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_bytes_at_end: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durable_s: Option<f64>,
    /// `(seconds, bytes)` dirty + writeback samples of the measurement.
    #[serde(skip)]
    pub dirty: Vec<(f64, u64)>,
    /// Throughput `(seconds, MB/s)` during the I/O phase, at 100 ms to 1 s
    /// intervals, for charts.
    #[serde(skip)]
    pub rate_points: Vec<(f64, f64)>,
    /// The final fsync, `(start, end)` in seconds, for charts.
    #[serde(skip)]
    pub fsync_tail_s: Option<(f64, f64)>,
    /// The group (workload and variant) this row belongs to, for charts.
    #[serde(skip)]
    pub group: String,
    /// Each timed fsync of `fsync-under-load`'s foreground: `(seconds
    /// since its start, latency in ms)`, for charts.
    #[serde(skip)]
    pub fsync_points: Vec<(f64, f64)>,
}

/// The group a row is of, as rows name it: its workload, its variant and
/// its file-name-safe label. A measurement group (`crate::workloads::Group`)
/// is one; the report knows groups by these names only, and leaves asking
/// a row's workload anything to the layers that know the workloads.
pub trait RowGroup {
    /// The workload's name (JSON `workload`).
    fn workload(&self) -> &str;

    /// Its variant (JSON `variant`; `None` for a workload's only group).
    fn variant(&self) -> Option<String>;

    /// The label the group's rows carry ([`ResultRow::group`]): file names
    /// of its charts.
    fn slug(&self) -> String;
}

impl ResultRow {
    pub fn empty(
        group: &dyn RowGroup,
        engine: EngineKind,
        variant: Option<String>,
        status: Status,
        error: Option<String>,
    ) -> Self {
        ResultRow {
            workload: group.workload().to_string(),
            engine: engine.name().to_string(),
            variant,
            throughput_mb_s: None,
            runtime_s: None,
            bytes: None,
            ops: None,
            lat_us: None,
            peak_dirty_bytes: None,
            us_per_call: None,
            fsync_lat_us: None,
            total_s: None,
            per_second_mb_s: None,
            status: status.name().to_string(),
            error,
            own_figures: OwnFigures::default(),
            block_device: None,
            device_account: None,
            dirty_bytes_at_end: None,
            durable_s: None,
            dirty: Vec::new(),
            rate_points: Vec::new(),
            fsync_tail_s: None,
            group: group.slug(),
            fsync_points: Vec::new(),
        }
    }

    pub fn ok(&self) -> bool {
        self.status == "ok"
    }

    /// The same row, its own figures written as `columns` in the JSON.
    pub fn in_columns(&self, columns: &OwnColumns) -> ResultRow {
        ResultRow { own_figures: self.own_figures.in_columns(columns), ..self.clone() }
    }

    /// The workload's own figures, as `T`, the type that wrote them
    /// ([`ResultRow::set_own`]); every field `None` on a row without them.
    pub fn own<T: DeserializeOwned + Default>(&self) -> T {
        self.own_figures.read()
    }

    /// Writes the workload's own figures, a type of its module.
    pub fn set_own<T: Serialize>(&mut self, figures: &T) {
        self.own_figures = OwnFigures::of(figures);
    }

    /// Changes the workload's own figures, of type `T`.
    pub fn update_own<T: Serialize + DeserializeOwned + Default>(&mut self, change: impl FnOnce(&mut T)) {
        let mut figures: T = self.own();
        change(&mut figures);
        self.set_own(&figures);
    }

    /// Whether the row is of the workload named `workload`.
    pub fn is_of(&self, workload: &str) -> bool {
        self.workload == workload
    }
}

pub fn failed_row(group: &dyn RowGroup, engine: EngineKind, status: Status, error: String) -> ResultRow {
    ResultRow::empty(group, engine, group.variant(), status, Some(error))
}

fn merged(hists: impl Iterator<Item = HistData>) -> Option<Percentiles> {
    let mut h = Histogram::default();
    for d in hists {
        h.merge(&Histogram::from_data(&d));
    }
    h.percentiles()
}

pub fn aggregate(
    group: &dyn RowGroup,
    engine: EngineKind,
    variant: Option<String>,
    jobs: &[&JobResult],
    o: &Outcome,
) -> ResultRow {
    let mut row = ResultRow::empty(group, engine, variant, Status::Ok, None);
    let bytes: u64 = jobs.iter().map(|j| j.bytes).sum();
    let ops: u64 = jobs.iter().map(|j| j.ops).sum();
    let runtime = jobs.iter().map(|j| j.io_end_s).fold(0.0, f64::max);
    let total = jobs.iter().map(|j| j.end_s).fold(0.0, f64::max);
    let mut series = Series::default();
    for j in jobs {
        series.add(&j.series);
    }
    row.bytes = Some(bytes);
    row.ops = Some(ops);
    row.runtime_s = Some(round3(runtime));
    row.total_s = Some(round3(total));
    row.throughput_mb_s = (total > 0.0).then(|| round3(bytes as f64 / total / 1e6));
    row.lat_us = merged(jobs.iter().map(|j| j.lat.clone()));
    let fsyncs: Vec<HistData> = jobs.iter().filter_map(|j| j.fsync.clone()).collect();
    row.fsync_lat_us = if fsyncs.is_empty() { None } else { merged(fsyncs.into_iter()) };
    row.us_per_call = if jobs.len() == 1 { jobs[0].us_per_call.map(round3) } else { None };
    row.per_second_mb_s = Some(series.mb_s());
    row.rate_points =
        rate_points(&sum_samples(&jobs.iter().map(|j| j.samples.as_slice()).collect::<Vec<_>>()), runtime);
    row.fsync_tail_s = (jobs.iter().any(|j| j.fsync.is_some()) && total > runtime).then_some((runtime, total));
    row.peak_dirty_bytes = Some(o.peak_dirty_bytes);
    row.dirty = o.dirty.clone();
    row
}

/// The device account's keys of a wbcache stats JSON (see
/// [`ResultRow::device_account`]); `None` for stats without them, or of a
/// cache that submitted no I/O.
pub fn device_account_of(stats_json: &str) -> Option<serde_json::Value> {
    let stats: serde_json::Value = serde_json::from_str(stats_json).ok()?;
    // A cache that submitted nothing is not the one that did the I/O (a
    // program run under the preload has its own, in its own process).
    let ios: u64 = stats.get("device")?.as_object()?.values().filter_map(|c| c["ios"].as_u64()).sum();
    if ios == 0 {
        return None;
    }
    let mut account = serde_json::Map::new();
    for key in ["device", "flush_covered_background_kib", "sync_engine_wait_us"] {
        account.insert(key.to_string(), stats.get(key)?.clone());
    }
    Some(serde_json::Value::Object(account))
}

/// The jobs of `jobs` with role `role`.
pub fn of_role<'a>(jobs: &[&'a JobResult], role: &str) -> Vec<&'a JobResult> {
    jobs.iter().copied().filter(|j| j.role.as_deref() == Some(role)).collect()
}

/// Rounds to six decimals (a total of fast fsyncs stays readable in µs).
pub fn round6(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// The progress display's line for a measurement's successful rows: the
/// last row's µs per call, MB/s, p99.9, peak of dirty bytes and time.
pub fn summary(rows: &[ResultRow]) -> String {
    let Some(r) = rows.last() else { return "no result".into() };
    let mut s = String::new();
    if let Some(c) = r.us_per_call {
        s.push_str(&format!("{c:.3} µs/call, "));
    }
    if let Some(t) = r.throughput_mb_s {
        s.push_str(&format!("{t:.1} MB/s"));
    }
    if let Some(l) = &r.lat_us {
        s.push_str(&format!(", p99.9 {:.1} µs", l.p999));
    }
    if let Some(p) = r.peak_dirty_bytes {
        s.push_str(&format!(", peak dirty+wb {:.1} MiB", p as f64 / (1u64 << 20) as f64));
    }
    if let Some(t) = r.total_s {
        s.push_str(&format!(" ({t:.1} s)"));
    }
    s
}

/// A figure measured without any engine that puts the engines' figures in
/// context (JSON `references`): what a bare `memcpy` of the `rand-read
/// cached-4k` pattern costs on this machine (by one thread, and by as many
/// threads as each `cached-4k-readers` variant has), and what a bare
/// O_DIRECT read of `seq-read`'s file reaches.
#[derive(Clone, Debug, Serialize)]
pub struct Reference {
    pub workload: String,
    pub variant: Option<String>,
    pub what: String,
    pub us_per_call: f64,
    /// Throughput references (`seq-read`'s bare O_DIRECT read): MB/s
    /// (null for the per-call ones).
    pub mb_s: Option<f64>,
    /// The memcpy by reader threads (`cached-4k-readers`): every thread's
    /// copies over the time from their common start until the last one
    /// ended, per second (null for the others).
    pub reads_per_s: Option<f64>,
    /// The threads copying at once in that reference (null for the others).
    pub reader_threads: Option<u32>,
}

impl Reference {
    /// The line printed under the workload's table.
    pub fn sentence(&self) -> String {
        if let (Some(reads_per_s), Some(threads)) = (self.reads_per_s, self.reader_threads) {
            return format!(
                "Reference ({}): a bare {}, costs {:.3} µs per copy and reaches {} copies/s in all here: the memory's \
                 share of any cache's reads of this pattern by {threads} reader thread{}.",
                self.variant.as_deref().unwrap_or("main"),
                self.what,
                self.us_per_call,
                fmt_num(reads_per_s),
                if threads == 1 { "" } else { "s" }
            );
        }
        if let Some(mb_s) = self.mb_s {
            return format!(
                "Reference: a bare {}, reads {mb_s:.0} MB/s here: the disk's and the memory's limit for any cache of this \
                 size.",
                self.what
            );
        }
        format!(
            "Reference ({}): a bare {}, costs {:.3} µs here: the memory's share of any cache's read of this pattern.",
            self.variant.as_deref().unwrap_or("main"),
            self.what,
            self.us_per_call
        )
    }
}

#[derive(Serialize)]
struct Report<'a> {
    version: u32,
    machine: &'a Machine,
    config: &'a serde_json::Value,
    results: &'a [ResultRow],
    references: &'a [Reference],
}

/// The JSON report: its rows' own figures written as `columns`.
pub fn to_json(
    machine: &Machine,
    config: &serde_json::Value,
    results: &[ResultRow],
    references: &[Reference],
    columns: &OwnColumns,
) -> String {
    let results: Vec<ResultRow> = results.iter().map(|r| r.in_columns(columns)).collect();
    serde_json::to_string_pretty(&Report { version: 1, machine, config, results: &results, references })
        .expect("report serializes")
}

/// What the workloads' tests of their rows, tables and targets share.
#[cfg(test)]
pub(crate) mod test_support {
    use serde::Serialize;

    use super::*;

    /// The fields `sqlite` added, closing every row (null on other workloads').
    pub const SQLITE_NULLS: &str = "\"tps\":null,\"commit_us_p50\":null,\"commit_us_p99\":null,\"commit_us_max\":null,\
         \"stream_mb_s\":null,\"db_bytes\":null,\"peak_rss_bytes\":null";

    /// The fields `advice` added (null on other workloads' rows).
    pub const ADVICE_NULLS: &str =
        "\"peak_cached_bytes\":null,\"fsync_s\":null,\"advise_s\":null,\"advise_calls\":null,\
         \"cached_look_s\":null";

    /// The fields of `rand-read`'s reader-thread variants, closing every
    /// row (null on other rows).
    pub const READERS_NULLS: &str = "\"reads_per_s\":null,\"reader_threads\":null";

    /// The fields of the workloads that run programs (`fio`, `rocksdb`)
    /// (null on other workloads').
    pub const PROGRAM_NULLS: &str =
        "\"tool_version\":null,\"read_mb_s\":null,\"read_iops\":null,\"read_clat_us_p50\":null,\
         \"read_clat_us_p99\":null,\"write_mb_s\":null,\"write_iops\":null,\"write_clat_us_p50\":null,\
         \"write_clat_us_p99\":null,\"ops_per_s\":null,\"op_us_p50\":null,\"op_us_p99\":null";

    pub fn job(role: &str, bytes: u64, io_end_s: f64) -> JobResult {
        let mut lat = Histogram::default();
        lat.record(20_000);
        JobResult {
            role: Some(role.into()),
            engine: Some(EngineKind::Wbcache),
            bytes,
            ops: bytes / 4096,
            io_end_s,
            end_s: io_end_s,
            lat: lat.to_data(),
            ..JobResult::default()
        }
    }

    /// A successful `sqlite/wal-streaming` row of `engine` with no figures,
    /// its variant shown as `v`.
    pub fn ok_row(engine: &str) -> ResultRow {
        let group = crate::workloads::groups_for("sqlite", None).expect("sqlite's groups").remove(0);
        let kind = EngineKind::parse(engine).expect("an engine's name");
        ResultRow::empty(&group, kind, Some("v".into()), Status::Ok, None)
    }

    /// A successful outcome of `jobs`, with the cache's `stats`.
    pub fn ok_outcome(jobs: Vec<JobResult>, stats: Option<&str>) -> Outcome {
        Outcome {
            status: Status::Ok,
            error: None,
            jobs,
            dirty: vec![(0.1, 1 << 20)],
            peak_dirty_bytes: 2 << 20,
            wbcache_stats: stats.map(String::from),
            io_backend: None,
            cpu_busy_s: None,
            peak_rss_bytes: None,
            block_device: None,
        }
    }

    /// `workload`'s target lines of `rows`: (target, met). Empty when the
    /// rows give no targets at all.
    pub fn verdicts(rows: &[ResultRow], workload: &str) -> Vec<(String, bool)> {
        let Some(table) = crate::workloads::targets(rows, 1 << 30, &[], true) else { return Vec::new() };
        let prefix = format!("| {workload}");
        table
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(|l| (l.split(" | ").next().unwrap().trim_start_matches("| ").to_string(), l.ends_with("| met |")))
            .collect()
    }

    /// A row's JSON text as the report writes it: every workload's own
    /// columns, `null` where they are another's.
    pub fn row_json(row: &ResultRow) -> String {
        serde_json::to_string(&row.in_columns(&crate::workloads::own_columns())).unwrap()
    }

    /// A row's JSON as the report writes it, parsed.
    pub fn row_value(row: &ResultRow) -> serde_json::Value {
        serde_json::from_str(&row_json(row)).unwrap()
    }

    /// A workload's own figures of a job, as the worker passes them on.
    pub fn own<T: Serialize>(figures: &T) -> Option<serde_json::Value> {
        Some(serde_json::to_value(figures).unwrap())
    }
}
