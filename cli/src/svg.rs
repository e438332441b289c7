//! Hand-written SVG charts, drawn from figures: lines over time on a
//! linear or log scale ([`Line`], [`line_chart`], [`line_chart_scaled`]),
//! groups of bars on a log scale ([`log_bar_chart`]), and each engine's
//! colour. Each function returns one whole SVG document as a string; what
//! is charted, and the files, are the callers' (the bench's per-group
//! charts, `crate::runner::charts`; a workload's own, such as
//! fsync-under-load's fsync latencies). It knows no row and no workload.

use std::fmt::Write as _;

const W: f64 = 900.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 265.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 58.0;

/// `s` escaped for SVG and HTML text and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The colour of an engine's lines and bars, by its name (red for a name
/// no engine has).
pub fn engine_color(engine: &str) -> &'static str {
    match engine {
        "kernel-buffered" => "#1f77b4",
        "kernel-dontcache" => "#ff7f0e",
        "kernel-direct" => "#7f7f7f",
        "wbcache" => "#2ca02c",
        "wbcache-dontcache" => "#9467bd",
        "wbcache-preload" => "#8c564b",
        _ => "#d62728",
    }
}

/// A step (1, 2, 5 × 10^k) that splits `max` into about five intervals.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn tick_label(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v.abs() >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// A measured value, three significant digits or so: `7635`, `23.2k`, `0.31`.
fn value_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        crate::report::fmt_three_digits(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn header(out: &mut String, title: &str, subtitle: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
         font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"16\" font-weight=\"bold\">{}</text>\n\
         <text x=\"{LEFT}\" y=\"38\" fill=\"#555\">{}</text>\n",
        esc(title),
        esc(subtitle)
    );
}

fn axes(out: &mut String, x_label: &str, y_label: &str) {
    let (x0, y0, x1, y1) = (LEFT, H - BOTTOM, W - RIGHT, TOP);
    let _ = write!(
        out,
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/>\n\
         <line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
         <text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        (x0 + x1) / 2.0,
        H - 14.0,
        esc(x_label),
        (y0 + y1) / 2.0,
        esc(y_label)
    );
}

fn legend(out: &mut String, entries: &[(String, &str, &str, bool)]) {
    let x = W - RIGHT + 18.0;
    for (i, (label, color, dash, bar)) in entries.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 20.0;
        if *bar {
            let _ = writeln!(out, "<rect x=\"{x}\" y=\"{}\" width=\"22\" height=\"10\" fill=\"{color}\"/>", y - 5.0);
        } else {
            let _ = writeln!(
                out,
                "<line x1=\"{x}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"2.5\" stroke-dasharray=\"{dash}\"/>",
                x + 22.0
            );
        }
        let _ = writeln!(out, "<text x=\"{}\" y=\"{}\">{}</text>", x + 28.0, y + 4.0, esc(label));
    }
}

pub struct Line {
    pub label: String,
    pub color: &'static str,
    pub dash: &'static str,
    pub points: Vec<(f64, f64)>,
    /// A phase without points of its own, `(start, end)` on the x axis
    /// (the final fsync of a write run): drawn as a bar along the axis in
    /// the line's colour, not as a drop to zero.
    pub tail: Option<(f64, f64)>,
}

/// A line chart with linear axes from zero.
pub fn line_chart(title: &str, subtitle: &str, x_label: &str, y_label: &str, lines: &[Line]) -> String {
    line_chart_scaled(title, subtitle, x_label, y_label, lines, false)
}

/// A decade's tick label on a log axis: `0.01`, `1`, `100`, `10k`.
fn decade_label(d: f64) -> String {
    if d < 0.0 {
        format!("{:.*}", (-d) as usize, 10f64.powf(d))
    } else {
        tick_label(10f64.powf(d))
    }
}

/// Where values land on a line chart: a linear x axis from zero, and a
/// linear y axis from zero or (`log_y`) a logarithmic one over whole
/// decades `d0..d1`.
struct LineScale {
    top_x: f64,
    x_step: f64,
    top_y: f64,
    y_step: f64,
    log_y: bool,
    d0: f64,
    d1: f64,
}

impl LineScale {
    fn new(lines: &[Line], log_y: bool) -> LineScale {
        let max_x = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0).chain(l.tail.map(|t| t.1)))
            .fold(0.0, f64::max)
            .max(1.0);
        let max_y = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0, f64::max).max(1e-9);
        let min_pos_y =
            lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
        let (x_step, y_step) = (nice_step(max_x), nice_step(max_y));
        // Log scale: whole decades around the positive values.
        let d0 = if min_pos_y.is_finite() { min_pos_y.log10().floor() } else { 0.0 };
        let d1 = max_y.log10().ceil().max(d0 + 1.0);
        LineScale {
            top_x: (max_x / x_step).ceil() * x_step,
            x_step,
            top_y: (max_y / y_step).ceil() * y_step,
            y_step,
            log_y,
            d0,
            d1,
        }
    }

    fn px(&self, x: f64) -> f64 {
        LEFT + x / self.top_x * (W - RIGHT - LEFT)
    }

    fn py(&self, y: f64) -> f64 {
        let plot_h = H - BOTTOM - TOP;
        if self.log_y {
            H - BOTTOM - (y.max(10f64.powf(self.d0)).log10() - self.d0) / (self.d1 - self.d0) * plot_h
        } else {
            H - BOTTOM - y / self.top_y * plot_h
        }
    }

    /// The y axis's ticks: each decade on a log scale, each step otherwise.
    fn y_ticks(&self) -> Vec<(f64, String)> {
        let mut ticks = Vec::new();
        if self.log_y {
            let mut d = self.d0;
            while d <= self.d1 + 0.01 {
                ticks.push((10f64.powf(d), decade_label(d)));
                d += 1.0;
            }
        } else {
            let mut v = 0.0;
            while v <= self.top_y + self.y_step * 0.01 {
                ticks.push((v, tick_label(v)));
                v += self.y_step;
            }
        }
        ticks
    }

    /// The grid lines and tick labels of both axes.
    fn draw_ticks(&self, out: &mut String) {
        for (v, label) in self.y_ticks() {
            let y = self.py(v);
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>\n<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                W - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                label
            );
        }
        let mut v = 0.0;
        while v <= self.top_x + self.x_step * 0.01 {
            let x = self.px(v);
            let _ = writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                H - BOTTOM,
                H - BOTTOM + 5.0,
                H - BOTTOM + 19.0,
                tick_label(v)
            );
            v += self.x_step;
        }
    }

    /// Each line's tail (its final fsync) as a bar along the x axis, one
    /// lane per line that has one.
    fn draw_tails(&self, out: &mut String, lines: &[Line]) {
        for (lane, (l, (start, end))) in lines.iter().filter_map(|l| l.tail.map(|t| (l, t))).enumerate() {
            let y = H - BOTTOM - 5.0 - lane as f64 * 7.0;
            let _ = writeln!(
                out,
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"5\" stroke-opacity=\"0.6\"><title>{}: final fsync, {:.2} s</title></line>",
                self.px(start),
                self.px(end).max(self.px(start) + 2.0),
                l.color,
                esc(&l.label),
                end - start
            );
        }
    }

    /// The lines themselves, with a dot on each point of the short ones.
    fn draw_lines(&self, out: &mut String, lines: &[Line]) {
        for l in lines {
            if l.points.is_empty() {
                continue;
            }
            let pts: Vec<String> =
                l.points.iter().map(|(x, y)| format!("{:.1},{:.1}", self.px(*x), self.py(*y))).collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-dasharray=\"{}\" points=\"{}\"/>",
                l.color,
                l.dash,
                pts.join(" ")
            );
            if l.points.len() <= 40 {
                for (x, y) in &l.points {
                    let _ = writeln!(
                        out,
                        "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\"/>",
                        self.px(*x),
                        self.py(*y),
                        l.color
                    );
                }
            }
        }
    }
}

/// A line chart with a linear x axis from zero and a linear y axis from
/// zero, or (`log_y`) a logarithmic one over the decades the points span.
pub fn line_chart_scaled(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    lines: &[Line],
    log_y: bool,
) -> String {
    let scale = LineScale::new(lines, log_y);
    let mut out = String::new();
    header(&mut out, title, subtitle);
    scale.draw_ticks(&mut out);
    axes(&mut out, x_label, y_label);
    scale.draw_tails(&mut out, lines);
    scale.draw_lines(&mut out, lines);
    let mut entries: Vec<(String, &str, &str, bool)> =
        lines.iter().map(|l| (l.label.clone(), l.color, l.dash, false)).collect();
    if lines.iter().any(|l| l.tail.is_some()) {
        entries.push(("bars on the axis: final fsync".into(), "#888888", "", true));
    }
    legend(&mut out, &entries);
    out.push_str("</svg>\n");
    out
}

/// Horizontal grouped bars on a log scale: one group per category (an
/// engine), one bar per series (a percentile), each labelled with its value.
/// The height grows with the number of categories, so labels never collide.
pub fn log_bar_chart(
    title: &str,
    subtitle: &str,
    x_label: &str,
    categories: &[String],
    series: &[(&str, &'static str)],
    values: &[Vec<Option<f64>>],
) -> String {
    let width = W;
    let group_h = BAR_H * series.len() as f64 + GAP;
    let plot_h = group_h * categories.len().max(1) as f64;
    let height = TOP + 24.0 + plot_h + BOTTOM;
    let (x0, x1) = (LABEL_W, width - 150.0);
    let y_top = TOP + 24.0;
    let y_bottom = y_top + plot_h;
    let all: Vec<f64> = values.iter().flatten().flatten().copied().filter(|v| *v > 0.0).collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(1e-3);
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 10.0);
    let scale = BarScale { x0, x1, y_top, y_bottom, d0: lo.log10().floor(), d1: hi.log10().ceil() };
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"20\" y=\"22\" font-size=\"16\" font-weight=\"bold\">{}</text>\n\
         <text x=\"20\" y=\"38\" fill=\"#555\">{}</text>\n",
        esc(title),
        esc(subtitle)
    );
    // Legend in one row above the plot.
    let mut lx = x0;
    for (label, color) in series {
        let _ = writeln!(
            out,
            "<rect x=\"{lx}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            TOP + 2.0,
            lx + 18.0,
            TOP + 11.0,
            esc(label)
        );
        lx += 28.0 + 7.5 * label.len() as f64;
    }
    scale.draw_axis(&mut out, x_label);
    for (ci, cat) in categories.iter().enumerate() {
        let gy = y_top + ci as f64 * group_h + GAP / 2.0;
        scale.draw_group(&mut out, gy, cat, series, values.get(ci).map_or(&[][..], |row| row.as_slice()));
    }
    out.push_str("</svg>\n");
    out
}

const LABEL_W: f64 = 230.0;
const BAR_H: f64 = 11.0;
const GAP: f64 = 12.0;

/// Where a bar chart's values land: a log scale over whole decades
/// `d0..d1` from `x0` to `x1`, the bars between `y_top` and `y_bottom`.
#[derive(Clone, Copy)]
struct BarScale {
    x0: f64,
    x1: f64,
    y_top: f64,
    y_bottom: f64,
    d0: f64,
    d1: f64,
}

impl BarScale {
    fn px(&self, v: f64) -> f64 {
        self.x0 + (v.max(10f64.powf(self.d0)).log10() - self.d0) / (self.d1 - self.d0) * (self.x1 - self.x0)
    }

    /// A grid line per decade, the axes, and the x axis's label.
    fn draw_axis(&self, out: &mut String, x_label: &str) {
        let BarScale { x0, x1, y_top, y_bottom, d0, d1 } = *self;
        let mut d = d0;
        while d <= d1 + 0.01 {
            let x = self.px(10f64.powf(d));
            let _ = writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{y_top}\" x2=\"{x:.1}\" y2=\"{y_bottom}\" stroke=\"#e5e5e5\"/>\n\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                y_bottom + 18.0,
                tick_label(10f64.powf(d))
            );
            d += 1.0;
        }
        let _ = writeln!(
            out,
            "<line x1=\"{x0}\" y1=\"{y_bottom}\" x2=\"{x1}\" y2=\"{y_bottom}\" stroke=\"black\"/>\n\
             <line x1=\"{x0}\" y1=\"{y_top}\" x2=\"{x0}\" y2=\"{y_bottom}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            (x0 + x1) / 2.0,
            y_bottom + 38.0,
            esc(x_label)
        );
    }

    /// One category's label and its bars from `gy` down, one per series,
    /// each labelled with its value.
    fn draw_group(
        &self,
        out: &mut String,
        gy: f64,
        cat: &str,
        series: &[(&str, &'static str)],
        values: &[Option<f64>],
    ) {
        let x0 = self.x0;
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 8.0,
            gy + BAR_H * series.len() as f64 / 2.0 + 4.0,
            esc(cat)
        );
        for (si, (name, color)) in series.iter().enumerate() {
            let Some(Some(v)) = values.get(si) else { continue };
            let y = gy + si as f64 * BAR_H;
            let x = self.px(*v);
            let _ = writeln!(
                out,
                "<rect x=\"{x0}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{} {}: {} µs</title></rect>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\">{}</text>",
                (x - x0).max(1.0),
                BAR_H - 1.0,
                esc(cat),
                name,
                value_label(*v),
                x + 3.0,
                y + BAR_H - 2.0,
                value_label(*v)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ResultRow;

    #[test]
    fn steps_are_nice() {
        assert_eq!(nice_step(10.0), 2.0);
        assert_eq!(nice_step(812.0), 200.0);
        assert_eq!(nice_step(0.9), 0.2);
        assert_eq!(tick_label(25000.0), "25k");
        assert_eq!(tick_label(0.5), "0.5");
    }

    #[test]
    fn charts_are_well_formed() {
        let l = Line {
            label: "a <b>".into(),
            color: "#000",
            dash: "",
            points: vec![(1.0, 2.0), (2.0, 3.0)],
            tail: Some((2.0, 2.5)),
        };
        let empty = Line { label: "short".into(), color: "#111", dash: "", points: Vec::new(), tail: None };
        let svg = line_chart("t", "s", "x", "y", &[l, empty]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt;b&gt;"));
        assert!(svg.contains("final fsync, 0.50 s"), "the fsync tail is drawn");
        assert!(svg.contains(">short</text>"), "a line without points stays in the legend");
        let b = log_bar_chart("t", "s", "y", &["e".into()], &[("p50", "#111")], &[vec![Some(3.0)]]);
        assert!(b.contains("<rect x="));
    }

    /// The fsync chart: one line per engine of fsync-under-load small/load,
    /// on a log scale whose decades span the points (a 0 ms fsync sits on
    /// the bottom line).
    #[test]
    fn fsync_chart_has_a_line_per_engine_on_a_log_scale() {
        let row = |engine: &str, variant: &str, points: Vec<(f64, f64)>| ResultRow {
            workload: "fsync-under-load".into(),
            engine: engine.into(),
            variant: Some(variant.into()),
            status: "ok".into(),
            fsync_points: points,
            ..ResultRow::default()
        };
        let rows = vec![
            row("wbcache", "small/load", vec![(0.1, 0.5), (0.2, 0.0), (0.3, 1.2)]),
            row("kernel-buffered", "small/load", vec![(0.1, 250.0), (0.4, 1800.0)]),
            row("wbcache", "small/idle", vec![(0.1, 0.4)]),
            row("wbcache", "background/with-fsync", Vec::new()),
        ];
        let lines = crate::workloads::fsync_under_load::fsync_lines(&rows);
        assert_eq!(lines.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(), ["wbcache", "kernel-buffered"]);
        let svg = line_chart_scaled("t", "s", "x", "ms", &lines, true);
        for decade in [">0.1</text>", ">1</text>", ">10</text>", ">100</text>", ">1000</text>", ">10k</text>"] {
            assert!(svg.contains(decade), "{decade} missing from the log axis");
        }
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert_eq!(decade_label(-2.0), "0.01");
    }
}
