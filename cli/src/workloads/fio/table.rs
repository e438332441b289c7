//! The rows and the table of the workloads that run fio (`fio` and
//! `bench --fio JOBFILE`): a row per fio job (or per merged measurement)
//! and engine, with fio's own figures per direction, and the table of
//! them side by side with the ratio to kernel-buffered.

use serde::{Deserialize, Serialize};

use super::output::{FioJobFigures, FioResult};
use crate::bench_worker::{JobResult, Outcome, Status};
use crate::engines::EngineKind;
use crate::measure::round3;
use crate::report::{baseline, fmt_num, heading, ratio_of, ResultRow, RowTable};
use crate::workloads::Group;

/// The rows of one measurement: one per job fio reported (its name the
/// variant) or, for a merged measurement, the group's one.
pub fn fio_rows(group: &Group, engine: EngineKind, jobs: &[&JobResult], _o: &Outcome) -> Vec<ResultRow> {
    let Some(result) = jobs.first().and_then(|j| j.own::<FioResult>()) else {
        let error = "no report from fio".to_string();
        return vec![crate::report::failed_row(group, engine, Status::Error, error)];
    };
    result.jobs.iter().map(|j| fio_row(group, engine, &result.version, j)).collect()
}

/// The own figures of the rows of `fio` and `fio-jobfile`: fio's own, from
/// its JSON report. The row's `throughput_mb_s` is the reads' and writes'
/// MB/s together, `ops` their requests, `runtime_s` fio's.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FioFigures {
    /// The program that measured the row, as it names its version
    /// (`fio-3.33`).
    pub tool_version: Option<String>,
    /// The row's reads: MB/s (`bw_bytes` ÷ 10^6), IOPS, and the completion
    /// latency's (`clat_ns`) median and 99th percentile in µs; `None`
    /// without reads.
    pub read_mb_s: Option<f64>,
    pub read_iops: Option<f64>,
    pub read_clat_us_p50: Option<f64>,
    pub read_clat_us_p99: Option<f64>,
    /// The same of the row's writes.
    pub write_mb_s: Option<f64>,
    pub write_iops: Option<f64>,
    pub write_clat_us_p50: Option<f64>,
    pub write_clat_us_p99: Option<f64>,
}

/// A row's [`FioFigures`] (all `None` on another workload's row).
pub fn fio_figures(row: &ResultRow) -> FioFigures {
    row.own()
}

fn fio_row(group: &Group, engine: EngineKind, version: &str, j: &FioJobFigures) -> ResultRow {
    let mut row = ResultRow::empty(group, engine, Some(j.name.clone()), Status::Ok, None);
    let mb_s = |bw_bytes: f64| round3(bw_bytes / 1e6);
    let us = |ns: Option<f64>| ns.map(|ns| round3(ns / 1e3));
    let (r, w) = (&j.read, &j.write);
    let mut figures = FioFigures { tool_version: Some(version.to_string()), ..FioFigures::default() };
    if r.total_ios > 0 {
        (figures.read_mb_s, figures.read_iops) = (Some(mb_s(r.bw_bytes)), Some(round3(r.iops)));
        (figures.read_clat_us_p50, figures.read_clat_us_p99) = (us(r.clat_ns_p50), us(r.clat_ns_p99));
    }
    if w.total_ios > 0 {
        (figures.write_mb_s, figures.write_iops) = (Some(mb_s(w.bw_bytes)), Some(round3(w.iops)));
        (figures.write_clat_us_p50, figures.write_clat_us_p99) = (us(w.clat_ns_p50), us(w.clat_ns_p99));
    }
    row.set_own(&figures);
    row.throughput_mb_s = Some(mb_s(r.bw_bytes + w.bw_bytes));
    row.bytes = Some(j.io_bytes());
    row.ops = Some(j.total_ios());
    row.runtime_s = Some(round3(r.runtime_ms.max(w.runtime_ms) as f64 / 1e3));
    row
}

/// The progress display's line: the last row's MB/s and IOPS.
pub fn fio_summary(rows: &[ResultRow]) -> String {
    let Some(r) = rows.last() else { return "no result".into() };
    let own = fio_figures(r);
    let iops = own.read_iops.unwrap_or(0.0) + own.write_iops.unwrap_or(0.0);
    format!(
        "{:.1} MB/s, {} IOPS ({})",
        r.throughput_mb_s.unwrap_or(0.0),
        fmt_num(iops),
        own.tool_version.as_deref().unwrap_or("fio")
    )
}

/// What the fio tables' columns mean (printed above them).
pub const FIO_COLUMNS: &str = "All figures are fio's own, from its JSON report: MB/s is its bw_bytes ÷ 10^6, IOPS \
     its iops, p50 and p99 its completion latency's (clat) percentiles, per direction. vs kernel-buffered: read and \
     write MB/s together ÷ kernel-buffered's in the same row group.";

/// Where a row comes: its variant's first appearance, then the engines'
/// order.
fn ranked<'a>(rows: &[&'a ResultRow]) -> Vec<&'a ResultRow> {
    let mut variants: Vec<Option<&str>> = Vec::new();
    for r in rows {
        if !variants.contains(&r.variant.as_deref()) {
            variants.push(r.variant.as_deref());
        }
    }
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|r| {
        let v = variants.iter().position(|v| *v == r.variant.as_deref());
        (v, EngineKind::ALL.iter().position(|e| e.name() == r.engine))
    });
    sorted
}

/// The table: per job (or variant) and engine, fio's figures for the
/// directions some row has, and the MB/s against kernel-buffered's.
pub fn fio_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let rows = ranked(rows);
    let reads = rows.iter().any(|r| fio_figures(r).read_iops.is_some());
    let writes = rows.iter().any(|r| fio_figures(r).write_iops.is_some());
    let mut head = vec!["variant", "engine"];
    if reads {
        head.extend(["read MB/s", "read IOPS", "read p50 µs", "read p99 µs"]);
    }
    if writes {
        head.extend(["write MB/s", "write IOPS", "write p50 µs", "write p99 µs"]);
    }
    head.push("MB/s vs kernel-buffered");
    let mut table = RowTable::new(&[&heading(title), about, FIO_COLUMNS], &head, &rows);
    for r in &rows {
        let own = fio_figures(r);
        let mut c = table.cells(r);
        c.variant().engine();
        if reads {
            for v in [own.read_mb_s, own.read_iops, own.read_clat_us_p50, own.read_clat_us_p99] {
                c.figure(v, fmt_num);
            }
        }
        if writes {
            for v in [own.write_mb_s, own.write_iops, own.write_clat_us_p50, own.write_clat_us_p99] {
                c.figure(v, fmt_num);
            }
        }
        let kernel = baseline(r, &rows).and_then(|b| b.throughput_mb_s).filter(|b| *b > 0.0);
        c.times(ratio_of(r.throughput_mb_s, kernel));
        table.push(c);
    }
    table.finish()
}
