//! The bench's charts, written with `--svg DIR`: one file per group
//! (workload and variant) and kind: throughput per second per engine
//! (lines), latency percentiles per engine (bars, log scale), dirty bytes
//! over time (lines); then the charts each workload draws of its own
//! (fsync-under-load: each fsync's latency over time); and an `index.html`
//! that shows them all. A row's workload says how its lines are labelled
//! and drawn; [`crate::svg`] draws them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

use crate::report::ResultRow;
use crate::svg::{engine_color, esc, line_chart, log_bar_chart, Line};
use crate::workloads::{owner_of, WORKLOADS};

/// Writes every chart for `rows` into `dir`; returns the files written.
pub fn write_all(dir: &Path, rows: &[ResultRow], subtitle: &str) -> io::Result<Vec<String>> {
    fs::create_dir_all(dir)?;
    let mut groups: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.ok()) {
        if !groups.contains_key(&r.group) {
            order.push(r.group.clone());
        }
        groups.entry(r.group.clone()).or_default().push(r);
    }
    let mut charts = Vec::new();
    for g in &order {
        let rows = &groups[g];
        charts.extend(throughput_chart(g, rows, subtitle));
        charts.extend(latency_chart(g, rows, subtitle));
        charts.extend(dirty_chart(g, rows, subtitle));
    }
    for w in WORKLOADS {
        charts.extend(w.charts(rows, subtitle));
    }
    let mut files = Vec::new();
    for (name, svg) in charts {
        fs::write(dir.join(&name), svg)?;
        files.push(name);
    }
    let mut html = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>wbcache bench</title>\n<body style=\"font-family:sans-serif\">\n<h1>wbcache bench</h1>\n",
    );
    let _ = writeln!(html, "<p>{}</p>", esc(subtitle));
    for f in &files {
        let _ = writeln!(html, "<div><img src=\"{f}\" alt=\"{f}\"></div>");
    }
    html.push_str("</body>\n");
    fs::write(dir.join("index.html"), html)?;
    Ok(files)
}

/// Group `g`'s throughput over time, a line per row. Every engine that ran
/// appears, even one too short for a line: a missing line must never read
/// as a missing engine. (The per-call rows have no stream to chart, and
/// sqlite's rows no bytes of their own: their figures are transactions.)
fn throughput_chart(g: &str, rows: &[&ResultRow], subtitle: &str) -> Option<(String, String)> {
    let lines: Vec<Line> = rows
        .iter()
        .filter(|r| owner_of(r).map_or(r.us_per_call.is_none(), |w| w.charts_throughput(r)))
        .map(|r| {
            let label = match (r.rate_points.len(), r.runtime_s) {
                (0, Some(t)) => format!("{} (no point: I/O took {t:.2} s)", series_label(r)),
                _ => series_label(r),
            };
            let (color, dash) = line_style(r);
            Line { label, color, dash, points: r.rate_points.clone(), tail: r.fsync_tail_s }
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    let svg = line_chart(&format!("{g}: throughput"), subtitle, "seconds", "MB/s", &lines);
    Some((format!("{g}-throughput.svg"), svg))
}

/// Group `g`'s latency percentiles, per call or per transaction, a group
/// of bars per row.
fn latency_chart(g: &str, rows: &[&ResultRow], subtitle: &str) -> Option<(String, String)> {
    let with_lat: Vec<&&ResultRow> = rows.iter().filter(|r| r.lat_us.is_some()).collect();
    if with_lat.is_empty() {
        return None;
    }
    let cats: Vec<String> = with_lat.iter().map(|r| series_label(r)).collect();
    let vals: Vec<Vec<Option<f64>>> = with_lat
        .iter()
        .map(|r| {
            let p = r.lat_us.expect("filtered");
            vec![Some(p.p50), Some(p.p99), Some(p.p999), Some(p.max)]
        })
        .collect();
    let series = [("p50", "#9ecae1"), ("p99", "#4292c6"), ("p99.9", "#08519c"), ("max", "#08306b")];
    let per = owner_of(with_lat[0]).map_or("call", |w| w.latency_of());
    let svg = log_bar_chart(
        &format!("{g}: latency per {per} (percentiles)"),
        subtitle,
        &format!("µs per {per} (log scale)"),
        &cats,
        &series,
        &vals,
    );
    Some((format!("{g}-latency.svg"), svg))
}

/// Group `g`'s dirty bytes over time: one line per measurement (the rows of
/// one measurement share its samples), as the workload labels it.
fn dirty_chart(g: &str, rows: &[&ResultRow], subtitle: &str) -> Option<(String, String)> {
    let mut seen = Vec::new();
    let dirty: Vec<Line> = rows
        .iter()
        .filter(|r| r.dirty.len() >= 2)
        .filter_map(|r| {
            let (label, color, dash) = dirty_line(r);
            if seen.contains(&label) {
                return None;
            }
            seen.push(label.clone());
            let points = r.dirty.iter().map(|(t, b)| (*t, *b as f64 / (1u64 << 20) as f64)).collect();
            Some(Line { label, color, dash, points, tail: None })
        })
        .collect();
    if dirty.is_empty() {
        return None;
    }
    let svg = line_chart(
        &format!("{g}: dirty + writeback over time"),
        &format!("{subtitle} (kernel: /proc/meminfo, wbcache: its stats)"),
        "seconds",
        "MiB",
        &dirty,
    );
    Some((format!("{g}-dirty.svg"), svg))
}

/// A row's label in charts: its engine, plus what tells the row apart
/// from the engine's others (a writer's role, a configuration), as its
/// workload labels it.
fn series_label(r: &ResultRow) -> String {
    owner_of(r).map_or_else(|| r.engine.clone(), |w| w.series_label(r))
}

/// A row's line colour and dash in the throughput chart, as its workload
/// draws it (by default its engine's colour, solid).
fn line_style(r: &ResultRow) -> (&'static str, &'static str) {
    owner_of(r).map_or_else(|| (engine_color(&r.engine), ""), |w| w.line_style(r))
}

/// A row's measurement's line in the dirty-bytes chart: label, colour and
/// dash.
fn dirty_line(r: &ResultRow) -> (String, &'static str, &'static str) {
    owner_of(r).map_or_else(|| (r.engine.clone(), engine_color(&r.engine), ""), |w| w.dirty_line(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// parallel-writeback: one chart per pattern, each wbcache configuration
    /// its own line (colour by routing, dash by worker count), labelled.
    #[test]
    fn parallel_writeback_charts_per_pattern() {
        let row = |engine: &str, variant: &str| ResultRow {
            workload: "parallel-writeback".into(),
            engine: engine.into(),
            variant: Some(variant.into()),
            status: "ok".into(),
            group: format!("parallel-writeback-{}", variant.split('/').next().unwrap()),
            rate_points: vec![(0.1, 100.0), (0.2, 120.0)],
            dirty: vec![(0.1, 1 << 20), (0.2, 2 << 20)],
            ..ResultRow::default()
        };
        let rows = vec![
            row("kernel-buffered", "files"),
            row("wbcache", "files/single-1"),
            row("wbcache", "files/rotor-2"),
            row("wbcache", "files/region-4"),
            row("wbcache", "shared/region-4"),
        ];
        let styles: Vec<_> = rows.iter().map(line_style).collect();
        assert_eq!(styles[0], (engine_color("kernel-buffered"), ""));
        assert_eq!(styles[1], (engine_color("wbcache"), ""));
        assert_eq!(styles[2], ("#17becf", "7 4"));
        assert_eq!(styles[3], ("#d62728", "2 3"));
        let dir = std::env::temp_dir().join(format!("wbcache-svg-pw-{}", std::process::id()));
        let files = write_all(&dir, &rows, "test").unwrap();
        assert_eq!(
            files,
            [
                "parallel-writeback-files-throughput.svg",
                "parallel-writeback-files-dirty.svg",
                "parallel-writeback-shared-throughput.svg",
                "parallel-writeback-shared-dirty.svg"
            ]
        );
        let dirty = fs::read_to_string(dir.join("parallel-writeback-files-dirty.svg")).unwrap();
        assert_eq!(dirty.matches("<polyline").count(), 4, "a line per configuration");
        assert!(dirty.contains(">wbcache rotor-2</text>"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
