//! The Markdown tables' shared parts: how figures are written, a table's
//! head, its status cells, and the generic table (engines as rows, MB/s,
//! latency percentiles and the ratio to kernel-buffered) that workloads
//! without a table of their own print.

use std::fmt::Write as _;

use super::ResultRow;
use crate::measure::Percentiles;

/// A figure for a table: thousands separated above 1,000, about three
/// significant digits below.
pub fn fmt_num(v: f64) -> String {
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

/// Bytes in MiB, one decimal.
pub fn mib(bytes: u64) -> String {
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

/// A table cell's text: no `|` or line break of its own.
pub fn cell(s: &str) -> String {
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
    push_table_head(&mut out, &head);
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
        push_table_row(&mut out, c, r, has_status);
    }
    out
}

/// Seconds with about three significant digits, also below one: `12.3`,
/// `0.0815`, `0.00213`.
pub fn fmt_seconds(t: f64) -> String {
    if t >= 1.0 || t <= 0.0 {
        return fmt_three_digits(t.max(0.0));
    }
    let digits = (2 - t.log10().floor() as i32).clamp(2, 6) as usize;
    format!("{t:.digits$}")
}

/// fsync latency in ms from the histogram's µs.
pub fn ms(us: f64) -> String {
    fmt_three_digits(us / 1000.0)
}

/// A markdown table's header row and alignment row: text columns
/// (variant, engine, status) left, figures right.
pub fn push_table_head(out: &mut String, head: &[&str]) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let aligns: Vec<&str> =
        head.iter().map(|h| if matches!(*h, "variant" | "engine" | "status") { "---" } else { "---:" }).collect();
    let _ = writeln!(out, "|{}|", aligns.join("|"));
}

/// A positive figure of the successful row of `variant` and `engine`
/// (what a table compares its rows against).
pub fn figure_of(rows: &[&ResultRow], variant: &str, engine: &str, get: fn(&ResultRow) -> Option<f64>) -> Option<f64> {
    rows.iter()
        .find(|b| b.variant.as_deref() == Some(variant) && b.engine == engine && b.ok())
        .and_then(|b| get(b))
        .filter(|v| *v > 0.0)
}

/// `a ÷ b` when both are known.
pub fn ratio_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

/// Ends a table row: `cells`, then the status cell when the table has a
/// status column (some row failed), written as one markdown row.
pub fn push_table_row(out: &mut String, mut cells: Vec<String>, r: &ResultRow, has_status: bool) {
    if has_status {
        cells.push(status_cell(r));
    }
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

/// A table's status cell: the status, with the error of a failed row.
pub fn status_cell(r: &ResultRow) -> String {
    match &r.error {
        Some(e) if !r.ok() => cell(&format!("{}: {e}", r.status)),
        _ => r.status.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(fmt_num(1234567.0), "1,234,567");
        assert_eq!(fmt_num(812.4), "812");
        assert_eq!(fmt_num(2343.0), "2,343");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(0.306), "0.31");
        assert_eq!(fmt_call(0.30512), "0.305");
        assert_eq!(fmt_seconds(12.34), "12.3");
        assert_eq!(fmt_seconds(0.0815), "0.0815");
        assert_eq!(fmt_seconds(0.5), "0.500");
        assert_eq!(fmt_seconds(0.002131), "0.00213");
        assert_eq!(fmt_seconds(0.0), "0.00");
    }
}
