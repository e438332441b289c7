//! fio's JSON report (`--output-format=json` or `json+`), read: per job
//! (per group with `group_reporting`), each direction's bytes, requests,
//! runtime, bandwidth, IOPS and completion-latency (`clat_ns`)
//! percentiles; from `json+` also the completion-latency histogram, with
//! which the reports of several fio processes merge into one as fio merges
//! its own jobs (same buckets, same percentile rule). [`FioResult`] is
//! what a job that ran fio sends on: the rows and the tables read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One direction (read or write) of a job, in fio's own figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Direction {
    pub io_bytes: u64,
    pub total_ios: u64,
    /// fio's runtime of the direction, in milliseconds.
    pub runtime_ms: u64,
    /// fio's `bw_bytes`, bytes per second.
    pub bw_bytes: f64,
    pub iops: f64,
    /// The completion latency's median and 99th percentile, in ns.
    pub clat_ns_p50: Option<f64>,
    pub clat_ns_p99: Option<f64>,
    /// `json+`'s completion-latency histogram: bucket value (ns) → count.
    /// Kept in the worker for merging, not sent on.
    #[serde(skip)]
    pub clat_bins: BTreeMap<u64, u64>,
}

/// One job (or group) of a report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FioJobFigures {
    pub name: String,
    /// The job's I/O engine, as its options or the global ones name it
    /// (`None`: fio's default, psync).
    #[serde(default)]
    pub ioengine: Option<String>,
    pub read: Direction,
    pub write: Direction,
}

/// A whole report: fio's version and its jobs, in its order.
#[derive(Clone, Debug, PartialEq)]
pub struct FioReport {
    pub version: String,
    pub jobs: Vec<FioJobFigures>,
}

/// What a job that ran fio reports, its processes' reports read and merged
/// as asked (the worker sends it on to the rows): fio's version and its
/// jobs' figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FioResult {
    pub version: String,
    pub jobs: Vec<FioJobFigures>,
}

/// Reads a report from fio's standard output (lines fio prints before the
/// JSON, such as warnings, are skipped).
pub fn parse(stdout: &str) -> Result<FioReport, String> {
    let start = stdout.find("\n{").map(|i| i + 1).or_else(|| stdout.starts_with('{').then_some(0));
    let json = &stdout[start.ok_or("no JSON report in fio's output")?..];
    let v: Value = serde_json::from_str(json).map_err(|e| format!("fio's JSON report: {e}"))?;
    let version = v["fio version"].as_str().unwrap_or("fio").to_string();
    let jobs = v["jobs"].as_array().ok_or("fio's JSON report has no jobs")?;
    let global = &v["global options"];
    let jobs = jobs.iter().map(|j| job(j, global)).collect::<Result<Vec<_>, String>>()?;
    Ok(FioReport { version, jobs })
}

fn job(j: &Value, global: &Value) -> Result<FioJobFigures, String> {
    let name = j["jobname"].as_str().ok_or("a job without a name in fio's JSON report")?.to_string();
    match j["error"].as_i64() {
        Some(0) | None => {}
        Some(e) => return Err(format!("fio's job {name} ended with error {e}")),
    }
    let ioengine = j["job options"]["ioengine"].as_str().or(global["ioengine"].as_str()).map(String::from);
    Ok(FioJobFigures { read: direction(&j["read"]), write: direction(&j["write"]), name, ioengine })
}

fn direction(d: &Value) -> Direction {
    let clat = &d["clat_ns"];
    let percentile = |p: &str| clat["percentile"][p].as_f64().filter(|_| clat["N"].as_u64().unwrap_or(0) > 0);
    let clat_bins = clat["bins"]
        .as_object()
        .map(|bins| bins.iter().filter_map(|(k, n)| Some((k.parse().ok()?, n.as_u64()?))).collect())
        .unwrap_or_default();
    Direction {
        io_bytes: d["io_bytes"].as_u64().unwrap_or(0),
        total_ios: d["total_ios"].as_u64().unwrap_or(0),
        runtime_ms: d["runtime"].as_u64().unwrap_or(0),
        bw_bytes: d["bw_bytes"].as_f64().unwrap_or(0.0),
        iops: d["iops"].as_f64().unwrap_or(0.0),
        clat_ns_p50: percentile("50.000000"),
        clat_ns_p99: percentile("99.000000"),
        clat_bins,
    }
}

/// The value fio gives percentile `p` of a histogram: the first bucket at
/// which the running count reaches `p`% of all.
pub fn percentile_of(bins: &BTreeMap<u64, u64>, p: f64) -> Option<f64> {
    let total: u64 = bins.values().sum();
    if total == 0 {
        return None;
    }
    let mut sum = 0;
    for (&value, &n) in bins {
        sum += n;
        if sum as f64 >= p / 100.0 * total as f64 {
            return Some(value as f64);
        }
    }
    bins.keys().next_back().map(|&v| v as f64)
}

impl Direction {
    /// Several jobs' direction as one, as fio's `group_reporting` adds
    /// them: bytes and requests summed over the longest runtime, the
    /// percentiles of the histograms added together (`None` when a job
    /// with requests has no histogram: its report was not `json+`).
    pub fn merged(parts: &[&Direction]) -> Direction {
        let runtime_ms = parts.iter().map(|d| d.runtime_ms).max().unwrap_or(0);
        let io_bytes = parts.iter().map(|d| d.io_bytes).sum();
        let total_ios = parts.iter().map(|d| d.total_ios).sum();
        let mut bins = BTreeMap::new();
        for d in parts {
            for (&v, &n) in &d.clat_bins {
                *bins.entry(v).or_insert(0) += n;
            }
        }
        let complete = parts.iter().all(|d| d.total_ios == 0 || !d.clat_bins.is_empty());
        let per_s = |x: u64| if runtime_ms > 0 { x as f64 * 1000.0 / runtime_ms as f64 } else { 0.0 };
        Direction {
            io_bytes,
            total_ios,
            runtime_ms,
            bw_bytes: per_s(io_bytes),
            iops: per_s(total_ios),
            clat_ns_p50: percentile_of(&bins, 50.0).filter(|_| complete),
            clat_ns_p99: percentile_of(&bins, 99.0).filter(|_| complete),
            clat_bins: bins,
        }
    }
}

impl FioJobFigures {
    /// Several jobs (of one or several fio processes) as one named `name`;
    /// a lone job stays as fio reported it.
    pub fn merged(name: &str, jobs: &[&FioJobFigures]) -> FioJobFigures {
        if let [one] = jobs {
            return FioJobFigures { name: name.to_string(), ..(*one).clone() };
        }
        let reads: Vec<&Direction> = jobs.iter().map(|j| &j.read).collect();
        let writes: Vec<&Direction> = jobs.iter().map(|j| &j.write).collect();
        FioJobFigures {
            name: name.to_string(),
            ioengine: jobs[0].ioengine.clone(),
            read: Direction::merged(&reads),
            write: Direction::merged(&writes),
        }
    }

    pub fn io_bytes(&self) -> u64 {
        self.read.io_bytes + self.write.io_bytes
    }

    pub fn total_ios(&self) -> u64 {
        self.read.total_ios + self.write.total_ios
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANDRW_THREADS: &str = include_str!("testdata/fio-randrw-threads.json");
    const RANDWRITE_PLUS: &str = include_str!("testdata/fio-randwrite-plus.json");
    const SEQWRITE_PLUS: &str = include_str!("testdata/fio-seqwrite-plus.json");

    /// fio 3.33's report of two threads with group_reporting (randrw 70/30,
    /// 4 KiB): one group, both directions in fio's own figures.
    #[test]
    fn a_grouped_report_reads_back() {
        let r = parse(RANDRW_THREADS).unwrap();
        assert_eq!(r.version, "fio-3.33");
        assert_eq!(r.jobs.len(), 1);
        let j = &r.jobs[0];
        assert_eq!((j.name.as_str(), j.ioengine.as_deref()), ("randrw", Some("psync")));
        let read = Direction {
            io_bytes: 524_345_344,
            total_ios: 128_014,
            runtime_ms: 307,
            bw_bytes: 1_707_965_289.0,
            iops: 416_983.713355,
            clat_ns_p50: Some(652.0),
            clat_ns_p99: Some(30_848.0),
            clat_bins: BTreeMap::new(),
        };
        assert_eq!(j.read, read);
        assert_eq!((j.write.io_bytes, j.write.total_ios), (224_358_400, 54_775));
        assert_eq!((j.write.clat_ns_p50, j.write.clat_ns_p99), (Some(812.0), Some(2_448.0)));
        assert_eq!((j.io_bytes(), j.total_ios()), (524_345_344 + 224_358_400, 128_014 + 54_775));
    }

    /// json+'s histogram gives back fio's own percentiles, and a
    /// direction without requests has none.
    #[test]
    fn percentiles_from_the_histogram_are_fios() {
        for text in [RANDWRITE_PLUS, SEQWRITE_PLUS] {
            let w = parse(text).unwrap().jobs.remove(0).write;
            assert!(!w.clat_bins.is_empty());
            assert_eq!(percentile_of(&w.clat_bins, 50.0), w.clat_ns_p50);
            assert_eq!(percentile_of(&w.clat_bins, 99.0), w.clat_ns_p99);
        }
        let r = parse(SEQWRITE_PLUS).unwrap().jobs.remove(0).read;
        assert_eq!((r.io_bytes, r.clat_ns_p50, r.clat_ns_p99), (0, None, None));
        assert!(percentile_of(&BTreeMap::new(), 50.0).is_none());
    }

    /// Two processes' reports merge as fio's group_reporting would: sums
    /// over the longest runtime, percentiles of the added histograms.
    #[test]
    fn reports_of_several_processes_merge() {
        let a = parse(RANDWRITE_PLUS).unwrap().jobs.remove(0);
        let b = parse(SEQWRITE_PLUS).unwrap().jobs.remove(0);
        let m = FioJobFigures::merged("both", &[&a, &b]);
        assert_eq!(m.name, "both");
        let w = &m.write;
        assert_eq!(w.io_bytes, a.write.io_bytes + b.write.io_bytes);
        assert_eq!(w.total_ios, a.write.total_ios + b.write.total_ios);
        assert_eq!(w.runtime_ms, a.write.runtime_ms.max(b.write.runtime_ms));
        assert!((w.bw_bytes - w.io_bytes as f64 * 1000.0 / w.runtime_ms as f64).abs() < 1e-6);
        let count: u64 = w.clat_bins.values().sum();
        assert_eq!(count, a.write.clat_bins.values().sum::<u64>() + b.write.clat_bins.values().sum::<u64>());
        // Mostly 4 KiB writes (fast) with a few 1 MiB ones (slow).
        let (p50, p99) = (w.clat_ns_p50.unwrap(), w.clat_ns_p99.unwrap());
        assert!(p50 <= a.write.clat_ns_p99.unwrap() && p50 <= p99, "{m:?}");
        assert_eq!(m.read, Direction::default(), "no reads on either side");
        // A lone job stays as fio reported it; one without its histogram
        // leaves the merged percentiles unknown.
        assert_eq!(FioJobFigures::merged("one", &[&a]).write, a.write);
        let plain = parse(RANDRW_THREADS).unwrap().jobs.remove(0);
        assert_eq!(FioJobFigures::merged("x", &[&plain, &a]).write.clat_ns_p99, None);
    }

    #[test]
    fn what_is_not_a_report_is_said() {
        assert!(parse("").unwrap_err().contains("no JSON report"));
        let warned = format!("fio: some warning\n{RANDRW_THREADS}");
        assert_eq!(parse(&warned).unwrap().jobs.len(), 1);
        assert!(parse("{\"jobs\": 3}").unwrap_err().contains("no jobs"));
        let failed = "{\"fio version\": \"fio-3.33\", \"jobs\": [{\"jobname\": \"j\", \"error\": 5}]}";
        assert_eq!(parse(failed).unwrap_err(), "fio's job j ended with error 5");
    }
}
