//! `db_bench`'s own report, read: each benchmark's line (`fillseq :
//! 4.037 micros/op 247653 ops/sec 0.081 seconds 20000 operations; 98.3
//! MB/s`) and, with `--histogram=1`, the latency histogram's summary that
//! follows it (`Min: … Median: … Max: …`, `Percentiles: P50: … P99: …
//! P99.9: …`), in microseconds per operation; and RocksDB's version from
//! the header db_bench prints on stderr.

use serde::{Deserialize, Serialize};

/// One benchmark's figures, as db_bench reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchFigures {
    pub name: String,
    pub micros_per_op: f64,
    pub ops_per_s: f64,
    pub seconds: f64,
    pub operations: u64,
    /// Its MB/s, for the benchmarks that report one.
    pub mb_s: Option<f64>,
    /// The histogram's percentiles and maximum, µs per operation.
    pub us_p50: Option<f64>,
    pub us_p99: Option<f64>,
    pub us_p999: Option<f64>,
    pub us_max: Option<f64>,
}

/// The number before `unit` among `words`.
fn before(words: &[&str], unit: &str) -> Option<f64> {
    let at = words.iter().position(|w| *w == unit)?;
    words.get(at.checked_sub(1)?)?.parse().ok()
}

/// The number after `label` among `words`.
fn after(words: &[&str], label: &str) -> Option<f64> {
    let at = words.iter().position(|w| *w == label)?;
    words.get(at + 1)?.parse().ok()
}

/// A benchmark's report line, if `line` is one.
fn bench_line(line: &str) -> Option<BenchFigures> {
    let (name, rest) = line.split_once(" : ").or_else(|| line.split_once(':'))?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    Some(BenchFigures {
        name: name.trim().to_string(),
        micros_per_op: before(&words, "micros/op")?,
        ops_per_s: before(&words, "ops/sec")?,
        seconds: before(&words, "seconds").unwrap_or(0.0),
        operations: before(&words, "operations;").or_else(|| before(&words, "operations")).unwrap_or(0.0) as u64,
        mb_s: before(&words, "MB/s"),
        ..BenchFigures::default()
    })
}

/// Every benchmark db_bench reported on its standard output, in its order.
pub fn parse(stdout: &str) -> Vec<BenchFigures> {
    let mut out: Vec<BenchFigures> = Vec::new();
    // The histogram belongs to the benchmark line before it, once.
    let mut open = false;
    for line in stdout.lines().flat_map(|l| l.split('\r')).map(str::trim) {
        if let Some(b) = bench_line(line) {
            out.push(b);
            open = true;
            continue;
        }
        let (Some(b), true) = (out.last_mut(), open) else { continue };
        let words: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("Min:") {
            b.us_max = after(&words, "Max:");
        } else if line.starts_with("Percentiles:") {
            b.us_p50 = after(&words, "P50:");
            b.us_p99 = after(&words, "P99:");
            b.us_p999 = after(&words, "P99.9:");
            open = false;
        }
    }
    out
}

/// RocksDB's version from db_bench's stderr header (`RocksDB:    version
/// 7.8.3` → `RocksDB 7.8.3`).
pub fn version(stderr: &str) -> Option<String> {
    let line = stderr.lines().find(|l| l.starts_with("RocksDB:"))?;
    let number = line.split_whitespace().skip_while(|w| *w != "version").nth(1)?;
    Some(format!("RocksDB {number}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILL_READ: &str = include_str!("testdata/db_bench-fill-read.txt");
    const OVERWRITE_SYNC: &str = include_str!("testdata/db_bench-overwrite-sync.txt");

    /// db_bench 7.8.3's report of fillseq, fillrandom, readrandom and
    /// readwhilewriting with --histogram=1: each line with its histogram.
    #[test]
    fn a_report_reads_back() {
        let b = parse(FILL_READ);
        let names: Vec<&str> = b.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["fillseq", "fillrandom", "readrandom", "readwhilewriting"]);
        let fillseq = BenchFigures {
            name: "fillseq".into(),
            micros_per_op: 5.934,
            ops_per_s: 168_231.0,
            seconds: 0.030,
            operations: 5000,
            mb_s: Some(66.7),
            us_p50: Some(3.35),
            us_p99: Some(9.87),
            us_p999: Some(69.75),
            us_max: Some(5849.0),
        };
        assert_eq!(b[0], fillseq);
        // The reads' line ends with what they found; their histogram is
        // the reads'.
        assert_eq!(
            (b[2].ops_per_s, b[2].mb_s, b[2].us_p50, b[2].us_p99),
            (506_072.0, Some(127.0), Some(1.30), Some(3.71))
        );
        assert_eq!((b[3].operations, b[3].us_p999), (5000, Some(580.0)));
    }

    /// overwrite with --sync=1: every write synced, milliseconds at p99.
    #[test]
    fn a_synced_overwrite_reads_back() {
        let b = parse(OVERWRITE_SYNC);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].name.as_str(), b[0].ops_per_s, b[0].operations), ("overwrite", 6421.0, 6999));
        assert_eq!((b[0].us_p50, b[0].us_p99, b[0].us_max), (Some(110.64), Some(1185.48), Some(25682.0)));
    }

    #[test]
    fn no_report_is_no_benchmark_and_the_version_is_rocksdbs() {
        assert!(parse("Keys:       16 bytes each\nDB path: [/x]\n").is_empty());
        let line = "fillseq      :       4.037 micros/op 247653 ops/sec 0.081 seconds 20000 operations;";
        assert_eq!(parse(line)[0].mb_s, None);
        assert_eq!(version("RocksDB:    version 7.8.3\nDate: x\n").as_deref(), Some("RocksDB 7.8.3"));
        assert_eq!(version("nothing"), None);
    }
}
