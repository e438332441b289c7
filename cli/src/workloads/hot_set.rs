//! `hot-set`: cache protection. A hot reader reads a hot file over and
//! over through the engine's cache while a streamer moves --size through
//! the engine in its own mode: does the stream push the hot data out? The
//! hot reader's timed phase (reads that first ask whether their chunk is
//! still cached) is this module's own; the streamer is the generic
//! streaming loop, and the hot reader stops when it ends. One row per
//! measurement, compared with the same engine's `alone` row once that ran.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{
    described, round_down, Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Setup, Workload, WorkloadInfo, KIB,
    MIB,
};
use crate::bench_worker::{eof_at, JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{EngineFile, EngineKind, Target};
use crate::measure::round3;
use crate::report::{
    aggregate, field_names, find_row, fmt_num, heading, mib, of_role, round6, ResultRow, RowTable, TargetInputs,
    Verdict,
};
use crate::sys::{fmt_size, IoBuffer};

/// The series that brought uncached buffered I/O to Linux, whose reason
/// to exist `hot-set` measures.
const UNCACHED_IO: &str = "the LKML series \"Uncached buffered IO\" by Jens Axboe (PATCHSET v1 to v8, November and \
     December 2024: RWF_UNCACHED, renamed RWF_DONTCACHE and merged for Linux 6.14), and what uncached I/O is for: \
     data streamed once through the cache should not push out the data that is read again and again";

pub struct HotSetWorkload;

pub static HOT_SET: HotSetWorkload = HotSetWorkload;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "hot-set",
    summary: "a hot file read over and over while a stream passes through the cache",
    about: "cache protection: a hot reader reads a hot file of a quarter of --memory over and over (256 KiB \
            sequential reads, wrapping; the file is written and read twice before the timed part, so it starts \
            out cached) while a streamer moves --size (twice the memory) through the engine. Variants alone (the \
            hot reader alone for --runtime), write-stream (the streamer writes a new file in 1 MiB sequential \
            writes, then fsync; the hot reader runs until it is done) and read-stream (the streamer reads a cold \
            file, laid out before the run, in 1 MiB sequential reads). The streamer uses the engine's mode \
            (RWF_DONTCACHE, O_DIRECT, WriteFlags::DONTCACHE, ...); the hot reader reads plainly through the \
            engine's cache: buffered for both kernel engines with a cache, the same wbcache Cache as the streamer \
            without flags for both wbcache engines, and O_DIRECT on kernel-direct, which has no cache (its hit \
            ratio is null). Figures: the streamer's MB/s, the hot reader's MB/s (and against its alone row), and \
            the hot hit ratio, the share of the hot reader's chunks wholly cached just before it read them \
            (mincore(2) on a mapping of the hot file for the kernel, File::residency for wbcache). Select one \
            variant with e.g. hot-set/write-stream",
    models: "a database's or a web server's working set read again and again while a backup, a log shipper or \
             a bulk load streams through the same cache: does the stream push the hot data out, and does the \
             hot reader slow down",
    source: Some(UNCACHED_IO),
};

/// The variants of `hot-set`: the hot reader alone, or next to a streamer
/// that writes or reads --size through the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotSet {
    Alone,
    WriteStream,
    ReadStream,
}

impl HotSet {
    pub const ALL: [HotSet; 3] = [HotSet::Alone, HotSet::WriteStream, HotSet::ReadStream];

    /// The variant name (JSON `variant`).
    pub fn name(self) -> &'static str {
        match self {
            HotSet::Alone => "alone",
            HotSet::WriteStream => "write-stream",
            HotSet::ReadStream => "read-stream",
        }
    }

    pub fn parse(s: &str) -> Option<HotSet> {
        HotSet::ALL.into_iter().find(|v| v.name() == s)
    }

    /// Whether the streamer writes (`Some(true)`), reads (`Some(false)`),
    /// or does not run (`None`).
    pub fn stream_writes(self) -> Option<bool> {
        match self {
            HotSet::Alone => None,
            HotSet::WriteStream => Some(true),
            HotSet::ReadStream => Some(false),
        }
    }

    fn group(self) -> Group {
        Group::new(&HOT_SET, Some(self.name().into()), self)
    }
}

/// The hot reader's request size.
pub const HOT_BS: u64 = 256 * KIB;
/// The streamer's request size.
pub const HOT_STREAM_BS: u64 = MIB;
/// The role of `hot-set`'s hot reader.
pub const HOT: &str = "hot";
/// The role of `hot-set`'s streamer: when it ends, the hot reader stops.
pub const STREAMER: &str = "streamer";

/// The hot file: a quarter of the memory, whole requests.
pub fn hot_len(p: &Params) -> u64 {
    round_down(p.memory / 4, HOT_BS)
}

/// What the streamer moves: --size (twice the memory by default), whole
/// requests.
pub fn hot_stream_len(p: &Params) -> u64 {
    round_down(p.size, HOT_STREAM_BS)
}

/// The engine the hot reader reads through: the engine's own cache, read
/// plainly (the uncached engines' buffered peer, on the same system and,
/// for wbcache, the same `Cache`); kernel-direct reads with O_DIRECT.
pub fn hot_engine(engine: EngineKind) -> EngineKind {
    if engine.is_dontcache() {
        engine.buffered_peer()
    } else {
        engine
    }
}

/// The targets of a `hot-set` measurement: the hot file (`hot_len`
/// bytes) and the stream (`stream_len` bytes: the shared data file
/// when `read`, else a new file). On a device: the stream's region
/// first (the data's, at offset 0), then the hot region right after it,
/// the hot region at most a quarter of the device and the stream what
/// is left of it.
fn hot_layout(place: &Place, name: &str, hot_len: u64, stream_len: u64, read: bool) -> (Target, Target) {
    match (&place.device, &place.dir) {
        (Some(dev), _) => {
            let hot = round_down(hot_len.min(place.device_size / 4), HOT_BS);
            let stream = round_down(stream_len.min(place.device_size.saturating_sub(hot)), HOT_STREAM_BS);
            let region = |offset: u64, len: u64| Target { path: dev.clone(), offset, len, create: false };
            (region(stream, hot), region(0, stream))
        }
        (None, Some(dir)) => {
            let hot = Target { path: dir.join(format!("{name}-hot.bin")), offset: 0, len: hot_len, create: true };
            let stream = if read { place.data(stream_len) } else { place.fresh(name, 0, stream_len) };
            (hot, stream)
        }
        (None, None) => unreachable!("a place has a dir or a device"),
    }
}

/// What `hot-set` does, with this run's sizes (said once above its table,
/// before each variant's description).
pub fn hot_about(p: &Params) -> String {
    format!(
        "Hot reader: 256 KiB sequential reads over a hot {} file (a quarter of the memory), wrapping around; before \
         the timed part the file is written, fsynced and read twice, so it starts out cached. It reads plainly \
         through the engine's cache: buffered pread on kernel-buffered and kernel-dontcache, O_DIRECT on \
         kernel-direct (no cache: no hit ratio), and read_at without flags on the same wbcache Cache as the \
         streamer on wbcache and wbcache-dontcache. Streamer: {} through the engine in its own mode (plain \
         buffered, RWF_DONTCACHE, O_DIRECT, wbcache, wbcache with WriteFlags::DONTCACHE)",
        fmt_size(hot_len(p)),
        fmt_size(hot_stream_len(p))
    )
}

/// The hot reader's timed phase: `bs` sequential reads over the target,
/// wrapping, until the deadline or until the streamer ends; before each
/// read, asks the engine whether the whole chunk is cached (where the
/// engine has a cache to ask).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotReads {
    pub bs: u64,
}

/// What the hot reader measured besides its reads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HotReaderResult {
    /// How many of its reads (`ops`) found their whole chunk cached just
    /// before; `None` when the engine has no cache to ask (O_DIRECT).
    pub resident_chunks: Option<u64>,
}

impl Workload for HotSetWorkload {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(HotSet::ALL.into_iter().map(HotSet::group).collect()),
            Some(variant) => Some(vec![HotSet::parse(variant)?.group()]),
        }
    }

    fn needs_data(&self, group: &Group) -> bool {
        *group.shape::<HotSet>() == HotSet::ReadStream
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let rt = p.runtime_s;
        let hot = fmt_size(hot_len(p));
        let stream = fmt_size(hot_stream_len(p));
        match group.shape::<HotSet>() {
            HotSet::Alone => format!("the hot reader alone over its cached {hot} file for {rt} s"),
            HotSet::WriteStream => format!(
                "the hot reader over its cached {hot} file while the streamer writes a new {stream} file \
                 (1 MiB writes, then fsync)"
            ),
            HotSet::ReadStream => format!(
                "the hot reader over its cached {hot} file while the streamer reads a cold {stream} file \
                 (1 MiB reads)"
            ),
        }
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let v = *group.shape::<HotSet>();
        let (hot_target, stream_target) =
            hot_layout(place, name, hot_len(p), hot_stream_len(p), v == HotSet::ReadStream);
        let setup = Setup::Hot { bytes: hot_target.len };
        let reads = Pattern::own(&HotReads { bs: HOT_BS });
        let hot = JobSpec::new(hot_engine(engine), hot_target, reads).with_setup(setup).seeded(50).with_role(HOT);
        let mut jobs = vec![hot];
        if let Some(write) = v.stream_writes() {
            let pat = Pattern::Seq { write, bs: HOT_STREAM_BS, total: Some(stream_target.len) };
            let streamer = JobSpec::new(engine, stream_target, pat).with_final_fsync_if(write).seeded(51);
            jobs.push(streamer.with_role(STREAMER).stopping_the_others());
        }
        let deadline_s = if v == HotSet::Alone { p.runtime_s } else { p.stream_cap_s };
        Jobs { jobs, deadline_s, pipelined: true }
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        let HotReads { bs } = ctx.own_pattern()?;
        ctx.run_timed(false, |files, started| hot_reads(ctx, &mut *files.file, bs, *started))
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        vec![hot_row(group, engine, jobs, o)]
    }

    fn after_rows(&self, rows: &mut [ResultRow]) {
        hot_alone_ratios(rows);
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<HotSetFigures>()
    }

    fn shares_the_disk(&self) -> bool {
        true
    }

    /// The hot reader's MB/s.
    fn primary_figure(&self, row: &ResultRow) -> Option<f64> {
        row.us_per_call.or(hot_figures(row).hot_mb_s).or(row.throughput_mb_s)
    }

    /// The streamer's and the hot reader's MB/s, the hit ratio.
    fn summary(&self, rows: &[ResultRow]) -> String {
        let Some(r) = rows.last() else { return crate::report::summary(rows) };
        let own = hot_figures(r);
        let Some(hot) = own.hot_mb_s else { return crate::report::summary(rows) };
        let mut s = match r.variant.as_deref() {
            Some(v) if v == HotSet::Alone.name() => String::new(),
            _ => format!("stream {:.1} MB/s, ", r.throughput_mb_s.unwrap_or(0.0)),
        };
        s.push_str(&format!("hot {hot:.1} MB/s"));
        if let Some(x) = own.hot_hit_ratio {
            s.push_str(&format!(", hot hit ratio {:.1}%", x * 100.0));
        }
        s
    }

    fn about(&self, groups: &[&Group], p: &Params) -> String {
        // A variant alone starts with its description: a sentence of its own.
        let what = described(groups, p);
        let mut chars = what.chars();
        let what = chars.next().map(|c| c.to_uppercase().chain(chars).collect::<String>()).unwrap_or_default();
        format!("{}. {what}", hot_about(p))
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        hot_table(self.name(), about, rows)
    }

    fn targets(&self, rows: &[&ResultRow], _inputs: &TargetInputs<'_>) -> Vec<Verdict> {
        hot_targets(rows)
    }

    fn targets_rank(&self) -> u32 {
        7
    }
}

/// The hot reader's timed phase on `file` (see [`HotReads`]), from
/// `started`.
fn hot_reads(ctx: &JobContext<'_>, file: &mut dyn EngineFile, bs: u64, started: Instant) -> io::Result<Measured> {
    let job = ctx.job;
    let base = job.target.offset;
    let len = (job.target.len / bs).max(1) * bs;
    // Set up before the clock of the first read starts (a mapping of the
    // hot file for the kernel engines).
    let tracked = file.track_residency(base, len)?;
    let mut resident = 0u64;
    let mut rbuf = IoBuffer::new(bs as usize);
    let deadline = started + ctx.deadline_after();
    let mut m = Measured::default();
    let mut off = 0u64;
    while !ctx.cancel.load(Relaxed) && !ctx.stop.load(Relaxed) && Instant::now() < deadline {
        // Asked just before the read: was the whole chunk still cached?
        if tracked && file.resident(base + off, bs)? {
            resident += 1;
        }
        let t = Instant::now();
        let n = file.read_at(&mut rbuf, base + off)?;
        if n == 0 {
            return Err(eof_at(off));
        }
        m.record(ctx.counter(), n as u64, t);
        off = (off + bs) % len;
    }
    m.set_own(&HotReaderResult { resident_chunks: tracked.then_some(resident) });
    Ok(m)
}

/// `hot-set`'s own figures of its rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HotSetFigures {
    /// The share (0 to 1) of the hot reader's 256 KiB reads whose every
    /// page (kernel) or block (wbcache) was cached just before the read;
    /// `None` on kernel-direct, which has no cache.
    pub hot_hit_ratio: Option<f64>,
    /// The hot reader's bytes over the time it read, in MB/s. (The row's
    /// `throughput_mb_s` is the streamer's; on `alone` rows, the hot
    /// reader's.)
    pub hot_mb_s: Option<f64>,
    /// Streaming rows: `hot_mb_s` ÷ the same engine's `alone` row's, when
    /// this run has it.
    pub hot_mb_s_alone_ratio: Option<f64>,
    /// wbcache rows: the bytes the cache dropped behind uncached I/O
    /// (`dropbehind_freed_bytes` of its stats) over the whole
    /// measurement, setup included.
    pub dropbehind_freed_bytes: Option<u64>,
    /// wbcache rows: CPU time the cache's drop-behind reaper thread used
    /// (`dropbehind_cpu_us` of its stats), microseconds.
    pub dropbehind_cpu_us: Option<u64>,
}

/// A row's [`HotSetFigures`] (all `None` on another workload's row).
fn hot_figures(row: &ResultRow) -> HotSetFigures {
    row.own()
}

/// `hot-set`'s row: the streamer's figures (the hot reader's on `alone`),
/// the hot reader's MB/s and hit ratio, and for wbcache the bytes dropped
/// behind uncached I/O.
fn hot_row(group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> ResultRow {
    let (hot, streamer) = (of_role(jobs, HOT), of_role(jobs, STREAMER));
    let main = if streamer.is_empty() { &hot } else { &streamer };
    let mut row = aggregate(group, engine, group.variant.clone(), main, o);
    let mut figures = HotSetFigures::default();
    if let Some(h) = hot.first() {
        figures.hot_mb_s = (h.io_end_s > 0.0).then(|| round3(h.bytes as f64 / h.io_end_s / 1e6));
        let resident_chunks = h.own::<HotReaderResult>().and_then(|r| r.resident_chunks);
        figures.hot_hit_ratio = resident_chunks.filter(|_| h.ops > 0).map(|r| round6(r as f64 / h.ops as f64));
        if streamer.is_empty() {
            // Alone: the row's MB/s is the hot reader's, the same figure.
            row.throughput_mb_s = figures.hot_mb_s;
        }
    }
    let stats = o.wbcache_stats.as_deref();
    figures.dropbehind_freed_bytes = stats.and_then(|s| stats_u64(s, "dropbehind_freed_bytes"));
    figures.dropbehind_cpu_us = stats.and_then(|s| stats_u64(s, "dropbehind_cpu_us"));
    row.set_own(&figures);
    row
}

/// A number at the top level of the cache's stats JSON.
fn stats_u64(stats_json: &str, key: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(stats_json).ok()?;
    v.get(key)?.as_u64()
}

/// `hot_mb_s_alone_ratio` of every streaming `hot-set` row whose engine
/// has an `alone` row in `rows`.
pub fn hot_alone_ratios(rows: &mut [ResultRow]) {
    let alone_variant = Some(HotSet::Alone.name());
    let alone: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.is_of(HOT_SET.name()) && r.variant.as_deref() == alone_variant && r.ok())
        .filter_map(|r| Some((r.engine.clone(), hot_figures(r).hot_mb_s.filter(|v| *v > 0.0)?)))
        .collect();
    for r in rows.iter_mut().filter(|r| r.is_of(HOT_SET.name()) && r.variant.as_deref() != alone_variant) {
        let base = alone.iter().find(|(e, _)| *e == r.engine).map(|(_, v)| *v);
        let ok = r.ok();
        r.update_own(|f: &mut HotSetFigures| {
            f.hot_mb_s_alone_ratio = match (f.hot_mb_s.filter(|_| ok), base) {
                (Some(a), Some(b)) => Some(round3(a / b)),
                _ => None,
            }
        });
    }
}

/// The order of `hot-set`'s rows in its table: per engine (in the
/// engines' order), alone, then write-stream, then read-stream.
fn hot_rank(r: &ResultRow) -> (usize, usize) {
    let engine = EngineKind::ALL.iter().position(|e| e.name() == r.engine).unwrap_or(usize::MAX);
    let variant = HotSet::ALL.iter().position(|v| Some(v.name()) == r.variant.as_deref()).unwrap_or(usize::MAX);
    (engine, variant)
}

/// A hit ratio as a percentage: `99.8%`, `100%`.
fn percent(ratio: f64) -> String {
    if ratio >= 1.0 {
        "100%".into()
    } else {
        format!("{:.1}%", ratio * 100.0)
    }
}

/// What the `hot-set` table's columns mean (printed above it).
pub const HOT_COLUMNS: &str = "stream MB/s: the streamer's bytes over its time (a write-stream's final fsync \
     included). hot MB/s: the hot reader's bytes over the time it read; vs alone: that ÷ the same engine's alone row. \
     hot hit ratio: the share of the hot reader's 256 KiB reads whose every page (mincore(2) on a read-only shared \
     mapping of the hot file, for the kernel) or block (File::residency, for wbcache) was cached just before the read; \
     kernel-direct has no cache, so no ratio.";

/// The `hot-set` table: per engine and variant, the streamer's MB/s, the
/// hot reader's MB/s (and against its alone row), the hot hit ratio, the
/// peak of dirty bytes and, for wbcache, what was dropped behind.
pub fn hot_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let mut rows: Vec<&ResultRow> = rows.to_vec();
    rows.sort_by_key(|r| hot_rank(r));
    let has_dropped = rows.iter().any(|r| hot_figures(r).dropbehind_freed_bytes.is_some());
    let mut head =
        vec!["engine", "variant", "stream MB/s", "hot MB/s", "hot vs alone", "hot hit ratio", "peak dirty+wb MiB"];
    if has_dropped {
        head.push("dropped behind MiB");
    }
    let dropped_note = if has_dropped {
        " dropped behind: what wbcache freed behind uncached I/O (dropbehind_freed_bytes of its stats), in MiB."
    } else {
        ""
    };
    let columns = format!("{HOT_COLUMNS}{dropped_note}");
    let mut table = RowTable::new(&[&heading(title), about, &columns], &head, &rows);
    for r in &rows {
        let alone = r.variant.as_deref() == Some(HotSet::Alone.name());
        let mut c = table.cells(r);
        c.engine().variant();
        c.figure(r.throughput_mb_s.filter(|_| !alone), fmt_num);
        let own = hot_figures(r);
        c.figure(own.hot_mb_s, fmt_num);
        c.times(own.hot_mb_s_alone_ratio);
        match own.hot_hit_ratio {
            None if r.ok() && r.engine == "kernel-direct" => c.text("— (no cache)"),
            hit_ratio => c.figure(hit_ratio, percent),
        };
        c.figure(r.peak_dirty_bytes, mib);
        if has_dropped {
            c.figure(own.dropbehind_freed_bytes, mib);
        }
        table.push(c);
    }
    table.finish()
}

/// `hot-set`'s goals, per streaming variant: wbcache-dontcache keeps its
/// hot reader's data cached (hit ratio ≥ 99%) and its speed (≥ 0.9 × alone);
/// kernel-buffered's figures beside them, as context.
fn hot_targets(rows: &[&ResultRow]) -> Vec<Verdict> {
    let mut lines = Vec::new();
    let find = |v: HotSet, engine: &str| find_row(rows, Some(v.name()), engine);
    for v in [HotSet::WriteStream, HotSet::ReadStream] {
        let variant = v.name();
        let Some(w) = find(v, "wbcache-dontcache") else { continue };
        let kernel = find(v, "kernel-buffered");
        if let Some(a) = hot_figures(w).hot_hit_ratio {
            let beside =
                kernel.and_then(|k| hot_figures(k).hot_hit_ratio).map(|k| format!(" (kernel-buffered {})", percent(k)));
            lines.push(Verdict::new(
                format!("hot-set {variant}: wbcache-dontcache hot hit ratio ≥ 99%"),
                format!("{}{}", percent(a), beside.unwrap_or_default()),
                a >= 0.99,
            ));
        }
        let alone = find(HotSet::Alone, "wbcache-dontcache").and_then(|r| hot_figures(r).hot_mb_s).filter(|b| *b > 0.0);
        if let (Some(a), Some(b)) = (hot_figures(w).hot_mb_s, alone) {
            let kernel_alone = find(HotSet::Alone, "kernel-buffered").and_then(|r| hot_figures(r).hot_mb_s);
            let beside = match (kernel.and_then(|k| hot_figures(k).hot_mb_s), kernel_alone) {
                (Some(k), Some(ka)) if ka > 0.0 => format!("; kernel-buffered {:.2}×", k / ka),
                _ => String::new(),
            };
            lines.push(Verdict::new(
                format!("hot-set {variant}: wbcache-dontcache hot reader MB/s ≥ 0.9 × its alone MB/s"),
                format!("{} vs {} MB/s alone ({:.2}×){beside}", fmt_num(a), fmt_num(b), a / b),
                a >= 0.9 * b,
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::report::test_support::{
        job, ok_outcome, own, row_json, row_value, verdicts, ADVICE_NULLS, PROGRAM_NULLS, READERS_NULLS, SQLITE_NULLS,
    };
    use crate::workloads::{
        build_spec, data_len, groups_for, info, rows_from, targets, test_params as params, variants_of, Spec,
    };

    /// hot-set: three variants on every engine, selectable one by one.
    #[test]
    fn hot_set_groups_and_selections() {
        let groups = groups_for("hot-set", None).unwrap();
        assert_eq!(variants_of(&groups), ["alone", "write-stream", "read-stream"]);
        assert!(groups
            .iter()
            .all(|g| g.workload == "hot-set" && EngineKind::WITHOUT_PRELOAD.iter().all(|e| g.runs_on(*e))));
        assert!(groups.iter().all(|g| !g.runs_on(EngineKind::WbcachePreload)));
        assert_eq!(groups.iter().map(Group::needs_data).collect::<Vec<_>>(), [false, false, true]);
        assert_eq!(groups[1].slug(), "hot-set-write-stream");
        assert_eq!(groups[1].label(), "hot-set write-stream");
        assert_eq!(variants_of(&groups_for("hot-set/read-stream", None).unwrap()), ["read-stream"]);
        for bad in ["hot-set/", "hot-set/both", "hot-set/alone/x", "hot-set/Alone"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        let source = info("hot-set").and_then(|w| w.source).unwrap();
        assert!(source.contains("Uncached buffered IO") && source.contains("Jens Axboe"), "{source}");
        assert_eq!(hot_engine(EngineKind::WbcacheDontcache), EngineKind::Wbcache);
        assert_eq!(hot_engine(EngineKind::KernelDontcache), EngineKind::KernelBuffered);
        assert_eq!(hot_engine(EngineKind::KernelDirect), EngineKind::KernelDirect);
    }

    /// The hot reader (a quarter of the memory, warmed, read through the
    /// engine's cache) and the streamer (--size through the engine, in its
    /// own mode): a new file to write, the data file to read; on a device,
    /// the stream's region then the hot region.
    #[test]
    fn hot_set_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let spec = |variant: &str, engine: EngineKind, place: &Place| {
            let g = groups_for(&format!("hot-set/{variant}"), None).unwrap().remove(0);
            build_spec(&g, engine, &p, place, false)
        };
        let roles = |s: &Spec| s.jobs.iter().map(|j| j.role.clone().unwrap()).collect::<Vec<_>>();
        let alone = spec("alone", EngineKind::KernelDontcache, &place);
        assert_eq!(roles(&alone), [HOT]);
        assert_eq!(alone.deadline_s, 2.0, "the runtime");
        let hot = &alone.jobs[0];
        assert_eq!(hot.engine, EngineKind::KernelBuffered, "the hot reader reads plainly");
        assert!(matches!(hot.setup, Setup::Hot { bytes } if bytes == 32 * MIB));
        assert!(matches!(hot.pattern.own_as(), Some(HotReads { bs }) if bs == 256 * KIB));
        assert_eq!((hot.target.len, hot.target.create, hot.fsync_at_end), (32 * MIB, true, false));

        let write = spec("write-stream", EngineKind::WbcacheDontcache, &place);
        assert_eq!(roles(&write), [HOT, STREAMER]);
        assert_eq!(write.deadline_s, p.stream_cap_s);
        let (hot, streamer) = (&write.jobs[0], &write.jobs[1]);
        assert_eq!((hot.engine, streamer.engine), (EngineKind::Wbcache, EngineKind::WbcacheDontcache));
        assert!(
            matches!(streamer.pattern, Pattern::Seq { write: true, bs, total: Some(t) } if bs == MIB && t == 256 * MIB)
        );
        assert!(streamer.fsync_at_end && streamer.target.create && streamer.target.path != hot.target.path);
        assert!(write.pipelined);

        let read = spec("read-stream", EngineKind::KernelDirect, &place);
        let (hot, streamer) = (&read.jobs[0], &read.jobs[1]);
        assert_eq!((hot.engine, streamer.engine), (EngineKind::KernelDirect, EngineKind::KernelDirect));
        assert!(
            matches!(streamer.pattern, Pattern::Seq { write: false, bs, total: Some(t) } if bs == MIB && t == 256 * MIB)
        );
        assert!(!streamer.fsync_at_end);
        assert_eq!((streamer.target.path.clone(), streamer.target.create), (place.data_path(), false));
        assert!(data_len(&p) >= streamer.target.len, "the laid-out data covers the stream");

        // On a device: the stream from offset 0, the hot region after it.
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let s = spec("write-stream", EngineKind::Wbcache, &dev);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, [(256 * MIB, 32 * MIB), (0, 256 * MIB)]);
        assert!(s.jobs.iter().all(|j| !j.target.create && j.target.path == std::path::Path::new("/dev/x")));
        // A small device: the hot region at most a quarter, the stream the rest.
        let small = Place { device_size: 64 * MIB, ..dev };
        let s = spec("read-stream", EngineKind::Wbcache, &small);
        let regions: Vec<(u64, u64)> = s.jobs.iter().map(|j| (j.target.offset, j.target.len)).collect();
        assert_eq!(regions, [(48 * MIB, 16 * MIB), (0, 48 * MIB)]);
    }

    fn hot_group(variant: &str) -> Group {
        crate::workloads::groups_for(&format!("hot-set/{variant}"), None).unwrap().remove(0)
    }

    fn hot_job(role: &str, bytes: u64, ops: u64, io_end_s: f64, resident: Option<u64>) -> JobResult {
        let mut j = job(role, bytes, io_end_s);
        j.ops = ops;
        j.own = own(&HotReaderResult { resident_chunks: resident });
        j
    }

    /// A hot-set row: the streamer's MB/s (the hot reader's when alone),
    /// the hot reader's MB/s and hit ratio, what wbcache dropped behind;
    /// the new fields close the JSON row.
    #[test]
    fn hot_set_rows() {
        let stats =
            r#"{"dirty_bytes":0,"dropbehind_freed_bytes":536870912,"dropbehind_cpu_us":1234,"io_backend":"uring"}"#;
        let o = ok_outcome(
            vec![hot_job(HOT, 4_000_000_000, 1000, 2.0, Some(990)), hot_job(STREAMER, 500_000_000, 500, 1.0, None)],
            Some(stats),
        );
        let rows = rows_from(&hot_group("write-stream"), EngineKind::WbcacheDontcache, &o);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.workload.as_str(), r.variant.as_deref()), ("hot-set", Some("write-stream")));
        assert_eq!(r.throughput_mb_s, Some(500.0), "the streamer's");
        assert_eq!(r.bytes, Some(500_000_000));
        assert_eq!(hot_figures(r).hot_mb_s, Some(2000.0));
        assert_eq!(hot_figures(r).hot_hit_ratio, Some(0.99));
        assert_eq!(hot_figures(r).dropbehind_freed_bytes, Some(512 << 20));
        assert_eq!(hot_figures(r).dropbehind_cpu_us, Some(1234));
        assert_eq!(r.peak_dirty_bytes, Some(2 << 20));
        let text = row_json(r);
        assert!(
            text.ends_with(
                &format!(",\"hot_hit_ratio\":0.99,\"hot_mb_s\":2000.0,\"hot_mb_s_alone_ratio\":null,\"dropbehind_freed_bytes\":536870912,\"dropbehind_cpu_us\":1234,{SQLITE_NULLS},{ADVICE_NULLS},{PROGRAM_NULLS},{READERS_NULLS}}}")
            ),
            "{text}"
        );
        // Alone: the hot reader's figures are the row's; O_DIRECT: no ratio.
        let alone = ok_outcome(vec![hot_job(HOT, 1_000_000_000, 100, 1.0, None)], None);
        let a = &rows_from(&hot_group("alone"), EngineKind::KernelDirect, &alone)[0];
        assert_eq!(
            (a.throughput_mb_s, hot_figures(a).hot_mb_s, hot_figures(a).hot_hit_ratio),
            (Some(1000.0), Some(1000.0), None)
        );
        assert_eq!(hot_figures(a).dropbehind_freed_bytes, None);
        let json = row_value(a);
        assert!(json["hot_hit_ratio"].is_null() && json.get("hot_hit_ratio").is_some());
    }

    fn hot_row(variant: &str, engine: &str, hot_mb_s: f64, ratio: Option<f64>) -> ResultRow {
        let mut row = ResultRow::empty(
            &hot_group(variant),
            EngineKind::parse(engine).unwrap(),
            Some(variant.into()),
            Status::Ok,
            None,
        );
        row.update_own(|f: &mut HotSetFigures| f.hot_mb_s = Some(hot_mb_s));
        row.update_own(|f: &mut HotSetFigures| f.hot_hit_ratio = ratio);
        row.throughput_mb_s = Some(if variant == "alone" { hot_mb_s } else { 1500.0 });
        row.peak_dirty_bytes = Some(64 << 20);
        row
    }

    fn hot_rows() -> Vec<ResultRow> {
        vec![
            hot_row("alone", "kernel-buffered", 20_000.0, Some(1.0)),
            hot_row("alone", "wbcache-dontcache", 25_000.0, Some(1.0)),
            hot_row("write-stream", "kernel-buffered", 8_000.0, Some(0.25)),
            hot_row("write-stream", "wbcache-dontcache", 24_000.0, Some(0.995)),
            hot_row("read-stream", "kernel-buffered", 10_000.0, Some(0.5)),
            hot_row("read-stream", "wbcache-dontcache", 20_000.0, Some(0.98)),
            hot_row("read-stream", "kernel-direct", 50.0, None),
        ]
    }

    /// Per streaming variant: the hit ratio and the hot reader's speed
    /// against alone, kernel-buffered's figures beside them.
    #[test]
    fn hot_set_targets() {
        let mut rows = hot_rows();
        hot_alone_ratios(&mut rows);
        assert_eq!(hot_figures(&rows[3]).hot_mb_s_alone_ratio, Some(0.96));
        assert_eq!(hot_figures(&rows[2]).hot_mb_s_alone_ratio, Some(0.4));
        assert_eq!(hot_figures(&rows[0]).hot_mb_s_alone_ratio, None, "the alone row is the reference");
        assert_eq!(hot_figures(&rows[6]).hot_mb_s_alone_ratio, None, "no kernel-direct alone row");
        let v = verdicts(&rows, "hot-set");
        let names: Vec<&str> = v.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "hot-set write-stream: wbcache-dontcache hot hit ratio ≥ 99%",
                "hot-set write-stream: wbcache-dontcache hot reader MB/s ≥ 0.9 × its alone MB/s",
                "hot-set read-stream: wbcache-dontcache hot hit ratio ≥ 99%",
                "hot-set read-stream: wbcache-dontcache hot reader MB/s ≥ 0.9 × its alone MB/s",
            ]
        );
        // write-stream: 99.5% and 0.96×; read-stream: 98% and 0.80×.
        assert_eq!(v.iter().map(|(_, met)| *met).collect::<Vec<_>>(), [true, true, false, false]);
        let table = targets(&rows, 1 << 30, &[], true).unwrap();
        assert!(table.contains("| 99.5% (kernel-buffered 25.0%) | met |"), "{table}");
        assert!(table.contains("| 24,000 vs 25,000 MB/s alone (0.96×); kernel-buffered 0.40× | met |"), "{table}");
        assert!(table.contains("| 98.0% (kernel-buffered 50.0%) | NOT met |"), "{table}");
        // Without wbcache-dontcache rows, no lines; without its alone row, no speed line.
        let kernel: Vec<ResultRow> = rows.iter().filter(|r| r.engine != "wbcache-dontcache").cloned().collect();
        assert!(verdicts(&kernel, "hot-set").is_empty());
        let streaming: Vec<ResultRow> =
            rows.iter().filter(|r| r.variant.as_deref() != Some("alone")).cloned().collect();
        assert_eq!(verdicts(&streaming, "hot-set").len(), 2);
    }

    /// The table: per engine, alone then the streams; no stream MB/s on
    /// alone rows, no hit ratio on kernel-direct.
    #[test]
    fn hot_set_table() {
        let mut rows = hot_rows();
        rows[1].update_own(|f: &mut HotSetFigures| f.dropbehind_freed_bytes = Some(0));
        rows[3].update_own(|f: &mut HotSetFigures| f.dropbehind_freed_bytes = Some(512 << 20));
        hot_alone_ratios(&mut rows);
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let table = hot_table("hot-set", "about", &refs);
        assert!(table.contains(
            "| engine | variant | stream MB/s | hot MB/s | hot vs alone | hot hit ratio | peak dirty+wb MiB | \
             dropped behind MiB |"
        ));
        assert!(table.contains("| kernel-buffered | alone | — | 20,000 | — | 100% | 64.0 | — |"), "{table}");
        assert!(table.contains("| kernel-buffered | write-stream | 1,500 | 8,000 | 0.40× | 25.0% | 64.0 | — |"));
        assert!(table.contains("| kernel-direct | read-stream | 1,500 | 50.0 | — | — (no cache) | 64.0 | — |"));
        assert!(table.contains("| wbcache-dontcache | write-stream | 1,500 | 24,000 | 0.96× | 99.5% | 64.0 | 512.0 |"));
        let order: Vec<&str> = table.lines().filter(|l| l.starts_with("| k") || l.starts_with("| w")).collect();
        assert!(
            order[0].starts_with("| kernel-buffered | alone")
                && order[2].starts_with("| kernel-buffered | read-stream")
        );
        assert!(order[3].starts_with("| kernel-direct") && order[6].starts_with("| wbcache-dontcache | read-stream"));
        assert!(table.contains("kernel-direct has no cache, so no ratio"));
    }
}
