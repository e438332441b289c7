//! Results: the JSON result rows (schema version 1: fields are added, never
//! renamed), the Markdown tables printed per workload, and the check of
//! wbcache's goals against the kernel on this run's rows.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::engines::EngineKind;
use crate::measure::{rate_points, round3, sum_samples, HistData, Histogram, Percentiles, Series};
use crate::sys::{fmt_size, Machine};
use crate::worker::{JobResult, Outcome, Status};
use crate::workloads::{Group, Kind};

/// One result row. Field order and names are the JSON schema; fields that do
/// not apply are `null`. The `#[serde(skip)]` fields feed tables and charts.
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
}

impl ResultRow {
    fn empty(
        group: &Group,
        engine: EngineKind,
        variant: Option<String>,
        status: Status,
        error: Option<String>,
    ) -> Self {
        ResultRow {
            workload: group.workload.to_string(),
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
            dirty: Vec::new(),
            rate_points: Vec::new(),
            fsync_tail_s: None,
            group: group.slug(),
        }
    }

    pub fn ok(&self) -> bool {
        self.status == "ok"
    }

    /// Label in charts: engine, plus the role for per-writer rows.
    pub fn series_label(&self) -> String {
        match &self.variant {
            Some(v) if matches!(v.as_str(), "writer" | "buffered-peer" | "aggregate") => format!("{} {v}", self.engine),
            _ => self.engine.clone(),
        }
    }
}

pub fn failed_row(group: &Group, engine: EngineKind, status: Status, error: String) -> ResultRow {
    ResultRow::empty(group, engine, group.variant.clone(), status, Some(error))
}

fn merged(hists: impl Iterator<Item = HistData>) -> Option<Percentiles> {
    let mut h = Histogram::default();
    for d in hists {
        h.merge(&Histogram::from_data(&d));
    }
    h.percentiles()
}

fn aggregate(
    group: &Group,
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

/// Turns a worker's outcome into result rows.
pub fn rows_from(group: &Group, engine: EngineKind, o: &Outcome) -> Vec<ResultRow> {
    if o.status != Status::Ok {
        let mut row = failed_row(group, engine, o.status, o.error.clone().unwrap_or_else(|| "failed".into()));
        row.dirty = o.dirty.clone();
        return vec![row];
    }
    let jobs: Vec<&JobResult> = o.jobs.iter().collect();
    if group.kind == Kind::Competing {
        let mut rows: Vec<ResultRow> =
            jobs.iter().map(|j| aggregate(group, engine, j.role.clone(), &[*j], o)).collect();
        rows.push(aggregate(group, engine, Some("aggregate".into()), &jobs, o));
        rows
    } else {
        vec![aggregate(group, engine, group.variant.clone(), &jobs, o)]
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 1_000.0 {
        let s = format!("{:.0}", v);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        fmt_three_digits(v)
    }
}

/// A value below 10 000 with about three significant digits.
pub fn fmt_three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_call(v: f64) -> String {
    if v >= 100.0 {
        fmt_num(v)
    } else {
        format!("{v:.3}")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// The kernel-buffered row a row is compared with (same workload and variant).
fn baseline<'a>(row: &ResultRow, rows: &[&'a ResultRow]) -> Option<&'a ResultRow> {
    rows.iter().copied().find(|r| r.engine == "kernel-buffered" && r.variant == row.variant && r.ok())
}

/// Ratio to kernel-buffered: of µs per call where it applies, else of MB/s.
pub fn ratio(row: &ResultRow, base: &ResultRow) -> Option<f64> {
    if !row.ok() {
        return None;
    }
    match (row.us_per_call, base.us_per_call) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => match (row.throughput_mb_s, base.throughput_mb_s) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        },
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// One Markdown table: engines as rows.
pub fn markdown_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let has_variant = rows.iter().any(|r| r.variant.is_some());
    let has_fsync = rows.iter().any(|r| r.fsync_lat_us.is_some());
    let has_call = rows.iter().any(|r| r.us_per_call.is_some());
    let has_status = rows.iter().any(|r| !r.ok());
    let per_call_only = has_call && rows.iter().all(|r| r.us_per_call.is_some() || !r.ok());
    let mut head: Vec<&str> = Vec::new();
    if has_variant {
        head.push("variant");
    }
    head.push("engine");
    if has_call {
        head.push("µs/call");
    }
    head.extend(["MB/s", "p50 µs", "p99 µs", "p99.9 µs", "max µs"]);
    if has_fsync {
        head.push("fsync max µs");
    }
    head.push("peak dirty+wb MiB");
    head.push(if per_call_only { "µs/call vs kernel-buffered" } else { "vs kernel-buffered" });
    if has_status {
        head.push("status");
    }
    let mut out = String::new();
    let _ = writeln!(out, "### {title}\n\n{about}\n");
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let aligns: Vec<&str> =
        head.iter().map(|h| if matches!(*h, "variant" | "engine" | "status") { "---" } else { "---:" }).collect();
    let _ = writeln!(out, "|{}|", aligns.join("|"));
    let dash = || "—".to_string();
    for r in rows {
        let mut c: Vec<String> = Vec::new();
        if has_variant {
            c.push(r.variant.clone().unwrap_or_else(dash));
        }
        c.push(r.engine.clone());
        if has_call {
            c.push(r.us_per_call.map(fmt_call).unwrap_or_else(dash));
        }
        c.push(r.throughput_mb_s.map(fmt_num).unwrap_or_else(dash));
        for f in [|p: &Percentiles| p.p50, |p: &Percentiles| p.p99, |p: &Percentiles| p.p999, |p: &Percentiles| p.max] {
            c.push(r.lat_us.as_ref().map(|p| fmt_num(f(p))).unwrap_or_else(dash));
        }
        if has_fsync {
            c.push(r.fsync_lat_us.as_ref().map(|p| fmt_num(p.max)).unwrap_or_else(dash));
        }
        c.push(r.peak_dirty_bytes.filter(|_| r.ok()).map(mib).unwrap_or_else(dash));
        let ratio = baseline(r, rows).and_then(|b| ratio(r, b));
        c.push(ratio.map(|x| format!("{x:.2}×")).unwrap_or_else(dash));
        if has_status {
            c.push(match &r.error {
                Some(e) if !r.ok() => cell(&format!("{}: {e}", r.status)),
                _ => r.status.clone(),
            });
        }
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}

/// wbcache's goals against the kernel, checked on this run's rows.
pub fn targets(rows: &[ResultRow], dirty_limit: u64, references: &[Reference]) -> Option<String> {
    let find = |workload: &str, variant: Option<&str>, engine: &str| {
        rows.iter().find(|r| r.workload == workload && r.variant.as_deref() == variant && r.engine == engine && r.ok())
    };
    let mut lines: Vec<(String, String, bool)> = Vec::new();
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    // small-overwrite: 1 KiB <= 1/20, 10 KiB <= 1/10 of kernel-buffered, into a cached 2 MiB file.
    let mut variants: BTreeMap<String, ()> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.workload == "small-overwrite") {
        if let Some(v) = &r.variant {
            variants.insert(v.clone(), ());
        }
    }
    // The call shapes that write 1 KiB or 10 KiB per call (writev writes 10
    // iovecs per call and is shown in the table only).
    for v in variants.keys().filter(|v| !v.starts_with("writev-")) {
        let factor = if v.contains("-1k-2m-") {
            20.0
        } else if v.contains("-10k-2m-") {
            10.0
        } else {
            continue;
        };
        if let (Some(w), Some(k)) =
            (find("small-overwrite", Some(v), "wbcache"), find("small-overwrite", Some(v), "kernel-buffered"))
        {
            if let (Some(a), Some(b)) = (w.us_per_call, k.us_per_call) {
                lines.push((
                    format!("{v}: wbcache µs/call ≤ kernel-buffered/{factor}"),
                    format!("{a:.3} vs {b:.3} µs (1/{:.1})", b / a.max(1e-9)),
                    a <= b / factor,
                ));
            }
        }
    }
    for v in variants.keys().filter(|v| v.ends_with("-4k-file")) {
        let big = v.replace("-4k-file", "-2m-file");
        if let (Some(s), Some(l)) =
            (find("small-overwrite", Some(v), "wbcache"), find("small-overwrite", Some(&big), "wbcache"))
        {
            if let (Some(a), Some(b)) = (s.us_per_call, l.us_per_call) {
                let r = a.max(b) / a.min(b).max(1e-9);
                lines.push((
                    format!("{v} vs {big}: wbcache costs differ < 1.5×"),
                    format!("{a:.3} vs {b:.3} µs ({r:.2}×)"),
                    r < 1.5,
                ));
            }
        }
    }
    if let (Some(w), Some(k)) = (find("seq-write", None, "wbcache"), find("seq-write", None, "kernel-buffered")) {
        if let (Some(a), Some(b)) = (w.throughput_mb_s, k.throughput_mb_s) {
            lines.push((
                "seq-write: wbcache MB/s (with fsync) ≥ kernel-buffered".into(),
                format!("{a:.0} vs {b:.0} MB/s"),
                a >= b,
            ));
        }
        if let (Some(a), Some(b)) = (&w.lat_us, &k.lat_us) {
            lines.push((
                "seq-write: wbcache p99.9 write latency ≤ kernel-buffered".into(),
                format!("{} vs {} µs", fmt_num(a.p999), fmt_num(b.p999)),
                a.p999 <= b.p999,
            ));
        }
    }
    if let Some(w) = find("seq-write", None, "wbcache") {
        if let Some(peak) = w.peak_dirty_bytes {
            lines.push((
                "seq-write: wbcache peak dirty (incl. under writeback) ≤ its dirty_limit".into(),
                format!("{} MiB vs {} MiB", mib(peak), mib(dirty_limit)),
                peak <= dirty_limit,
            ));
        }
    }
    if let (Some(w), Some(d)) = (find("seq-read", None, "wbcache"), find("seq-read", None, "kernel-direct")) {
        if let (Some(a), Some(b)) = (w.throughput_mb_s, d.throughput_mb_s) {
            lines.push((
                "seq-read cold: wbcache ≥ 0.9 × kernel-direct".into(),
                format!("{a:.0} vs {b:.0} MB/s ({:.2}×)", a / b),
                a >= 0.9 * b,
            ));
        }
    }
    // The target is the read path's cost, measured libMicro's way (the
    // same cached 4 KiB again and again); the random-in-a-region variant is
    // reported next to it because it is what a real working set costs.
    for (variant, what) in [
        ("cached-4k-offset0", "cached 4 KiB read (libMicro pread_u4k shape: same 4 KiB)"),
        ("cached-4k", "cached 4 KiB read, random in a region past the L2 caches (64M by default)"),
    ] {
        if let Some(w) = find("rand-read", Some(variant), "wbcache") {
            if let Some(a) = w.us_per_call {
                let kernel = find("rand-read", Some(variant), "kernel-buffered").and_then(|k| k.us_per_call);
                let memcpy = references
                    .iter()
                    .find(|r| r.workload == "rand-read" && r.variant.as_deref() == Some(variant))
                    .map(|r| r.us_per_call);
                let context: Vec<String> = [("kernel-buffered", kernel), ("bare memcpy", memcpy)]
                    .into_iter()
                    .filter_map(|(who, us)| us.map(|us| format!("{who} {us:.3} µs")))
                    .collect();
                let measured = if context.is_empty() {
                    format!("{a:.3} µs")
                } else {
                    format!("{a:.3} µs ({})", context.join("; "))
                };
                // Where copying the bytes alone costs more than the target, no
                // cache can meet it on this machine: say so, rather than
                // leave a bare NOT met that reads as the engine's shortfall.
                let unreachable = a > 0.2 && memcpy.is_some_and(|m| m > 0.2);
                let measured = if unreachable {
                    format!("{measured}; unreachable here: the bare memcpy alone costs more than 0.2 µs")
                } else {
                    measured
                };
                lines.push((format!("{what}: wbcache ≤ 0.2 µs"), measured, a <= 0.2));
            }
        }
    }
    if let (Some(w), Some(k)) = (find("rand-write", None, "wbcache"), find("rand-write", None, "kernel-buffered")) {
        if let (Some(a), Some(b)) = (w.throughput_mb_s, k.throughput_mb_s) {
            lines.push((
                "rand-write: wbcache MB/s (with fsync) ≥ kernel-buffered".into(),
                format!("{a:.1} vs {b:.1} MB/s"),
                a >= b,
            ));
        }
    }
    if lines.is_empty() {
        return None;
    }
    let mut out = String::from(
        "### targets (wbcache vs the kernel, this run)\n\n| target | measured | result |\n|---|---|---|\n",
    );
    for (t, m, ok) in lines {
        let _ = writeln!(out, "| {t} | {m} | {} |", verdict(ok));
    }
    Some(out)
}

/// A figure measured without any engine that puts the engines' figures in
/// context (JSON `references`): so far, what a bare `memcpy` of the
/// `rand-read cached-4k` pattern costs on this machine.
#[derive(Clone, Debug, Serialize)]
pub struct Reference {
    pub workload: String,
    pub variant: Option<String>,
    pub what: String,
    pub us_per_call: f64,
}

impl Reference {
    pub fn memcpy(group: &Group, span: u64, us_per_call: f64) -> Reference {
        Reference {
            workload: group.workload.to_string(),
            variant: group.variant.clone(),
            what: format!(
                "memcpy of a random 4 KiB inside an anonymous {} buffer, timed per call as the engines' reads",
                fmt_size(span)
            ),
            us_per_call,
        }
    }

    /// The line printed under the workload's table.
    pub fn sentence(&self) -> String {
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

pub fn to_json(
    machine: &Machine,
    config: &serde_json::Value,
    results: &[ResultRow],
    references: &[Reference],
) -> String {
    serde_json::to_string_pretty(&Report { version: 1, machine, config, results, references })
        .expect("report serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The random cached-read target shows the bare memcpy reference next
    /// to wbcache's figure, and the JSON carries it under `references`.
    #[test]
    fn cached_read_target_names_the_memcpy_reference() {
        let group = crate::workloads::groups_for("rand-read", None)
            .unwrap()
            .into_iter()
            .find(|g| g.variant.as_deref() == Some("cached-4k"))
            .unwrap();
        let mut row = ResultRow::empty(&group, EngineKind::Wbcache, group.variant.clone(), Status::Ok, None);
        row.us_per_call = Some(0.5);
        let reference = Reference::memcpy(&group, 64 << 20, 0.4);
        let table = targets(std::slice::from_ref(&row), 1 << 30, std::slice::from_ref(&reference)).unwrap();
        assert!(
            table.contains("0.500 µs (bare memcpy 0.400 µs); unreachable here: the bare memcpy alone costs more than 0.2 µs | NOT met"),
            "{table}"
        );
        // A memcpy under the target leaves a plain NOT met.
        let cheap = Reference::memcpy(&group, 64 << 20, 0.1);
        let table = targets(std::slice::from_ref(&row), 1 << 30, std::slice::from_ref(&cheap)).unwrap();
        assert!(table.contains("0.500 µs (bare memcpy 0.100 µs) | NOT met"), "{table}");
        assert!(reference.sentence().contains("64M buffer"), "{}", reference.sentence());
        let machine = Machine { kernel: "k".into(), cpus: 2, mem_bytes: 1, fs: "ext4".into(), device: "vda".into() };
        let json: serde_json::Value =
            serde_json::from_str(&to_json(&machine, &serde_json::json!({}), &[row], &[reference])).unwrap();
        assert_eq!(json["references"][0]["variant"], "cached-4k");
        assert_eq!(json["references"][0]["us_per_call"], 0.4);
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(fmt_num(1234567.0), "1,234,567");
        assert_eq!(fmt_num(812.4), "812");
        assert_eq!(fmt_num(2343.0), "2,343");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(0.306), "0.31");
        assert_eq!(fmt_call(0.30512), "0.305");
    }
}
