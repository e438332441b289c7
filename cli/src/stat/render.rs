//! What `stat` prints of the running caches: a table for people, JSON for
//! scripts, and Prometheus' text exposition format for node_exporter's
//! textfile collector. `top` draws the same table.
//!
//! Pure functions of the caches read: nothing here reads `/proc`.

use serde_json::{json, Value};
use wbcache::watch::{Figure, GuardianProgress};

use super::discover::WatchedCache;
use crate::report::{fmt_count, fmt_three_digits};
use crate::sys::fmt_size;

/// The version of `stat --json`'s layout (fields are added, never renamed).
pub const JSON_VERSION: u32 = 1;

const HEAD: [&str; 12] = [
    "PID",
    "PROGRAM",
    "STATE",
    "CAPACITY",
    "CACHED",
    "DIRTY",
    "WRITEBACK",
    "HIT%",
    "READ MB/s",
    "WB MB/s",
    "FSYNCS",
    "FSYNC p99",
];

/// Program names are cut to this many characters in the table.
const PROGRAM_WIDTH: usize = 28;

/// The table: a row per cache, then its files holding unwritten data,
/// indented under it. `None` when there is no cache.
pub fn table(caches: &[WatchedCache]) -> Option<String> {
    if caches.is_empty() {
        return None;
    }
    let rows: Vec<[String; 12]> = caches.iter().map(row).collect();
    let widths: Vec<usize> = (0..HEAD.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0).max(HEAD[i].len()))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i < 3 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&HEAD.map(String::from));
    for (cache, cells) in caches.iter().zip(&rows) {
        out += &line(cells);
        out += &details(cache);
    }
    Some(out)
}

/// A cache's row.
fn row(cache: &WatchedCache) -> [String; 12] {
    let f = &cache.figures;
    let size = |figure: Figure| fmt_size(f.get(figure));
    let rate = |bytes_per_s: f64| fmt_three_digits(bytes_per_s / 1e6);
    let fsync_p99 = match f.get(Figure::Fsyncs) {
        0 => "-".to_string(),
        _ => format!("{} ms", fmt_three_digits(f.get(Figure::FsyncLatencyUsP99) as f64 / 1000.0)),
    };
    [
        cache.owner_pid.to_string(),
        cut(&shown_program(&cache.program), PROGRAM_WIDTH),
        cache.state_name().to_string(),
        size(Figure::CapacityBytes),
        size(Figure::CachedBytes),
        size(Figure::DirtyBytes),
        size(Figure::WritebackBytes),
        cache.hit_ratio().map_or("-".into(), |r| format!("{:.1}", r * 100.0)),
        cache.rates.map_or("-".into(), |r| rate(r.read_bytes_per_s)),
        cache.rates.map_or("-".into(), |r| rate(r.written_bytes_per_s)),
        fmt_count(f.get(Figure::Fsyncs)),
        fsync_p99,
    ]
}

/// The lines under a cache's row: the guardian's progress, and the files
/// with the most unwritten bytes.
fn details(cache: &WatchedCache) -> String {
    let mut out = String::new();
    let GuardianProgress { written_bytes, total_bytes } = cache.guardian;
    if let Some(guardian) = cache.guardian_pid.filter(|_| !cache.owner_alive) {
        out += &format!(
            "    guardian {guardian}: {} of {} written to the files\n",
            fmt_size(written_bytes),
            fmt_size(total_bytes)
        );
    }
    for file in &cache.files {
        out += &format!("    {:>8}  {}\n", fmt_size(file.bytes), printable(&file.name));
    }
    out
}

/// A command line as the table shows it: the program's file name without
/// its directory, the arguments after it, control characters (a script's
/// newlines) as spaces.
fn shown_program(command_line: &str) -> String {
    let spaced: String = command_line.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let printable = printable(&spaced);
    let (program, args) = printable.split_once(' ').unwrap_or((&printable, ""));
    let name = program.rsplit('/').next().unwrap_or(program);
    let words: Vec<&str> = std::iter::once(name).chain(args.split_whitespace()).collect();
    words.join(" ")
}

/// `text` with what a terminal would act on written out instead: control
/// characters (an escape sequence in a file name of another user's
/// program) and the bidirectional overrides, as `\u{..}`.
fn printable(text: &str) -> String {
    let acts = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    text.chars().map(|c| if acts(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// The program's file name alone: a label that stays the same over the
/// cache's life and carries none of its arguments.
fn program_name(command_line: &str) -> String {
    let first = command_line.split(|c: char| c == ' ' || c.is_control()).next().unwrap_or("");
    first.rsplit('/').next().unwrap_or(first).to_string()
}

/// `text` cut to `width` characters, its end replaced by `…` when longer.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    text.chars().take(width - 1).collect::<String>() + "…"
}

/// `stat --json`: every cache with every figure of its newest sample.
pub fn json(caches: &[WatchedCache]) -> Value {
    let caches: Vec<Value> = caches
        .iter()
        .map(|c| {
            let figures: serde_json::Map<String, Value> =
                Figure::ALL.iter().map(|f| (f.name().to_string(), json!(c.figures.get(*f)))).collect();
            json!({
                "pid": c.owner_pid,
                "guardian_pid": c.guardian_pid,
                "program": c.program,
                "state": c.state_name(),
                "owner_alive": c.owner_alive,
                "figures": figures,
                "hit_ratio": c.hit_ratio(),
                "read_bytes_per_s": c.rates.map(|r| r.read_bytes_per_s),
                "written_bytes_per_s": c.rates.map(|r| r.written_bytes_per_s),
                "files_listed": c.has_table,
                "files": c.files.iter().map(|f| json!({"path": f.name, "unwritten_bytes": f.bytes})).collect::<Vec<_>>(),
                "guardian_written_bytes": c.guardian.written_bytes,
                "guardian_total_bytes": c.guardian.total_bytes,
            })
        })
        .collect();
    json!({ "version": JSON_VERSION, "caches": caches })
}

/// `stat --prometheus`: one metric family per figure, a sample per cache
/// labelled with its pid, program and board (two caches of one process
/// are two series); the state as a metric of its own, so that a series
/// keeps its labels as the state changes.
pub fn prometheus(caches: &[WatchedCache]) -> String {
    let mut out = String::new();
    for figure in Figure::ALL.into_iter().filter(|f| *f != Figure::TimeNs) {
        let (name, kind) = if figure.is_counter() {
            (format!("wbcache_{}", counter_name(figure.name())), "counter")
        } else {
            (format!("wbcache_{}", figure.name()), "gauge")
        };
        out += &format!("# HELP {name} wbcache's {} (see docs/stat.md).\n# TYPE {name} {kind}\n", figure.name());
        for c in caches {
            out += &format!("{name}{{{}}} {}\n", labels(c), c.figures.get(figure));
        }
    }
    out += "# HELP wbcache_state The cache's state (1 for the state it is in).\n# TYPE wbcache_state gauge\n";
    for c in caches {
        out += &format!("wbcache_state{{{},state=\"{}\"}} 1\n", labels(c), c.state_name());
    }
    out += "# HELP wbcache_unwritten_bytes Bytes only the cache holds, per file (the largest few).\n";
    out += "# TYPE wbcache_unwritten_bytes gauge\n";
    for c in caches {
        let mut by_name: Vec<(&str, u64)> = Vec::new();
        for f in &c.files {
            match by_name.iter_mut().find(|(name, _)| *name == f.name) {
                Some((_, bytes)) => *bytes += f.bytes,
                None => by_name.push((&f.name, f.bytes)),
            }
        }
        for (name, bytes) in by_name {
            out += &format!("wbcache_unwritten_bytes{{{},file=\"{}\"}} {bytes}\n", labels(c), escape(name));
        }
    }
    out
}

/// A counter's name ends in `_total`, as Prometheus' conventions ask.
fn counter_name(name: &str) -> String {
    if name.ends_with("_total") {
        name.to_string()
    } else {
        format!("{name}_total")
    }
}

/// A cache's labels, without braces.
fn labels(c: &WatchedCache) -> String {
    format!("pid=\"{}\",program=\"{}\",cache=\"{}\"", c.owner_pid, escape(&program_name(&c.program)), c.board_inode)
}

/// A label value as the exposition format writes it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stat::discover::Rates;
    use wbcache::watch::{CacheState, Figures, UnwrittenFile};

    fn cache() -> WatchedCache {
        let mut figures = Figures::default();
        for (f, v) in [
            (Figure::CapacityBytes, 256 << 20),
            (Figure::CachedBytes, 12 << 20),
            (Figure::DirtyBytes, 4 << 20),
            (Figure::Hits, 99),
            (Figure::Misses, 1),
            (Figure::Fsyncs, 3),
            (Figure::FsyncLatencyUsP99, 1500),
        ] {
            figures.set(f, v);
        }
        WatchedCache {
            board_inode: 7,
            owner_pid: 42,
            guardian_pid: Some(43),
            program: "python3 \"w\".py".into(),
            owner_alive: true,
            state: CacheState::Running,
            figures,
            rates: Some(Rates { read_bytes_per_s: 0.0, written_bytes_per_s: 12.5e6 }),
            files: vec![UnwrittenFile { name: "/data/a".into(), bytes: 4 << 20 }],
            has_table: true,
            guardian: GuardianProgress::default(),
        }
    }

    #[test]
    fn the_table_has_a_row_per_cache_and_its_files_under_it() {
        let text = table(&[cache()]).expect("a table");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("PID  PROGRAM") && lines[0].ends_with("FSYNC p99"), "{text}");
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(row[0], "42");
        assert!(lines[1].contains("running") && lines[1].contains("256M") && lines[1].contains("4M"), "{text}");
        assert!(lines[1].contains("99.0") && lines[1].contains("12.5") && lines[1].contains("1.50 ms"), "{text}");
        assert_eq!(lines[2].trim(), "4M  /data/a");
        assert_eq!(table(&[]), None);
    }

    #[test]
    fn a_command_line_is_shown_by_its_file_name_on_one_line() {
        assert_eq!(shown_program("/usr/bin/python3 -c \nimport os\n\tx()"), "python3 -c import os x()");
        assert_eq!(shown_program("db_bench"), "db_bench");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(printable("/d/a\x1b[2Jb\u{202e}"), "/d/a\\u{1b}[2Jb\\u{202e}");
        assert_eq!(program_name("/usr/bin/python3\0-c"), "python3");
    }

    #[test]
    fn json_and_prometheus_carry_every_figure() {
        let j = json(&[cache()]);
        assert_eq!(j["version"], 1);
        assert_eq!(j["caches"][0]["figures"]["dirty_bytes"], 4 << 20);
        assert_eq!(j["caches"][0]["hit_ratio"], 0.99);
        assert_eq!(j["caches"][0]["files"][0]["unwritten_bytes"], 4 << 20);
        let p = prometheus(&[cache()]);
        assert!(p.contains("# TYPE wbcache_hits_total counter\n"), "{p}");
        let labels = "pid=\"42\",program=\"python3\",cache=\"7\"";
        assert!(p.contains(&format!("wbcache_dirty_bytes{{{labels}}} 4194304\n")), "{p}");
        assert!(p.contains(&format!("wbcache_state{{{labels},state=\"running\"}} 1\n")), "{p}");
        assert!(p.contains("wbcache_written_bytes_total{"), "{p}");
        assert!(p.contains("file=\"/data/a\"} 4194304\n"), "{p}");
        assert!(!p.contains("time_ns"), "{p}");
    }
}
