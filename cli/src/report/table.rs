//! The Markdown tables' shared parts: how figures are written, the one
//! builder of a table of rows ([`RowTable`]: its heading, its head, a
//! status column when a row failed, a failed row's figures as dashes), and
//! the generic table (engines as rows, MB/s, latency percentiles and the
//! ratio to kernel-buffered) that workloads without a table of their own
//! print. Each workload's own table is its columns, written through
//! [`RowTable`].

use std::fmt::Write as _;

use super::ResultRow;
use crate::measure::Percentiles;

/// A figure for a table: thousands separated above 1,000, about three
/// significant digits below.
pub fn fmt_num(v: f64) -> String {
    if v >= 1_000.0 {
        thousands_separated(&format!("{v:.0}"))
    } else {
        fmt_three_digits(v)
    }
}

/// A count, thousands separated: `1234567` as `1,234,567`.
pub fn fmt_count(n: u64) -> String {
    thousands_separated(&n.to_string())
}

/// `digits` with a comma before every third digit from the right.
fn thousands_separated(digits: &str) -> String {
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
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

/// The successful kernel-buffered row a row is compared with (same
/// workload and variant).
pub fn baseline<'a>(row: &ResultRow, rows: &[&'a ResultRow]) -> Option<&'a ResultRow> {
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

/// A table of result rows being written, one line per row: the heading
/// paragraphs, the head, then each row's [`Cells`], with a status column
/// when any row of the table failed.
pub struct RowTable {
    out: String,
    has_status: bool,
}

impl RowTable {
    /// Starts a table of `rows` (those it will hold): `above`, a paragraph
    /// each (a [`heading`], what the table is about, what its columns
    /// mean), then the head of the columns `head` names.
    pub fn new(above: &[&str], head: &[&str], rows: &[&ResultRow]) -> RowTable {
        let has_status = rows.iter().any(|r| !r.ok());
        let mut out = String::new();
        for paragraph in above {
            let _ = write!(out, "{paragraph}\n\n");
        }
        let mut head = head.to_vec();
        if has_status {
            head.push("status");
        }
        push_table_head(&mut out, &head);
        RowTable { out, has_status }
    }

    /// The cells of `row`'s line, to fill and [`push`](Self::push).
    pub fn cells<'r>(&self, row: &'r ResultRow) -> Cells<'r> {
        Cells { row, cells: Vec::new() }
    }

    /// Ends a row's line: its cells, then its status when the table has
    /// the column.
    pub fn push(&mut self, cells: Cells<'_>) {
        let Cells { row, mut cells } = cells;
        if self.has_status {
            cells.push(status_cell(row));
        }
        let _ = writeln!(self.out, "| {} |", cells.join(" | "));
    }

    /// A paragraph under the table.
    pub fn push_paragraph(&mut self, text: &str) {
        let _ = writeln!(self.out, "\n{text}");
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A table's heading paragraph: `### title`.
pub fn heading(title: &str) -> String {
    format!("### {title}")
}

/// One row's cells in a [`RowTable`]. A figure of a failed row is a dash:
/// a failed measurement has no figure to show, only its status.
pub struct Cells<'r> {
    row: &'r ResultRow,
    cells: Vec<String>,
}

impl Cells<'_> {
    /// A cell of text, as it is (a name: the variant, the engine).
    pub fn text(&mut self, text: impl Into<String>) -> &mut Self {
        self.cells.push(text.into());
        self
    }

    /// The row's variant, a dash for a workload's only group.
    pub fn variant(&mut self) -> &mut Self {
        let variant = self.row.variant.clone().unwrap_or_else(dash);
        self.text(variant)
    }

    /// The row's engine.
    pub fn engine(&mut self) -> &mut Self {
        let engine = self.row.engine.clone();
        self.text(engine)
    }

    /// A figure as `write` writes it; a dash when it is unknown or the
    /// row failed.
    pub fn figure<T>(&mut self, figure: Option<T>, write: impl FnOnce(T) -> String) -> &mut Self {
        let text = figure.filter(|_| self.row.ok()).map(write).unwrap_or_else(dash);
        self.text(text)
    }

    /// A ratio, `1.23×`; a dash when it is unknown or the row failed.
    pub fn times(&mut self, ratio: Option<f64>) -> &mut Self {
        self.figure(ratio, |x| format!("{x:.2}×"))
    }
}

/// What a table shows for a figure it does not have.
pub fn dash() -> String {
    "—".to_string()
}

/// One Markdown table: engines as rows.
pub fn markdown_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let has_variant = rows.iter().any(|r| r.variant.is_some());
    let has_fsync = rows.iter().any(|r| r.fsync_lat_us.is_some());
    let has_call = rows.iter().any(|r| r.us_per_call.is_some());
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
    let mut table = RowTable::new(&[&heading(title), about], &head, rows);
    for r in rows {
        let mut c = table.cells(r);
        if has_variant {
            c.variant();
        }
        c.engine();
        if has_call {
            c.figure(r.us_per_call, fmt_call);
        }
        c.figure(r.throughput_mb_s, fmt_num);
        for f in [|p: &Percentiles| p.p50, |p: &Percentiles| p.p99, |p: &Percentiles| p.p999, |p: &Percentiles| p.max] {
            c.figure(r.lat_us.as_ref(), |p| fmt_num(f(p)));
        }
        if has_fsync {
            c.figure(r.fsync_lat_us.as_ref(), |p| fmt_num(p.max));
        }
        c.figure(r.peak_dirty_bytes, mib);
        c.times(baseline(r, rows).and_then(|b| ratio(r, b)));
        table.push(c);
    }
    table.finish()
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

/// A table's status cell: the status, with the error of a failed row.
fn status_cell(r: &ResultRow) -> String {
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
        assert_eq!(fmt_count(1234567), "1,234,567");
        assert_eq!(fmt_count(100_000), "100,000");
        assert_eq!(fmt_count(5), "5");
        assert_eq!(fmt_call(0.30512), "0.305");
        assert_eq!(fmt_seconds(12.34), "12.3");
        assert_eq!(fmt_seconds(0.0815), "0.0815");
        assert_eq!(fmt_seconds(0.5), "0.500");
        assert_eq!(fmt_seconds(0.002131), "0.00213");
        assert_eq!(fmt_seconds(0.0), "0.00");
    }
}
