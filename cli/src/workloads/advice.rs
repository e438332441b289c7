//! `advice`: the page-cache controls applications use, on the kernel's page
//! cache (`posix_fadvise(2)`, `sync_file_range(2)`) and on wbcache
//! (`File::advise`, `File::writeback_range`), side by side: a cold file read
//! plainly or after one WILLNEED, a new file streamed plainly, with
//! DONTNEED behind it, or with its writeback started as it goes. The job's
//! timed phase (reads or writes, with the variant's advice and looks at
//! what is cached) is this module's own; one row per measurement, compared
//! with the same engine's plain variant and with the kernel.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    data_len, round_down, variants_named, Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Setup, Workload,
    WorkloadInfo, MIB,
};
use crate::bench_worker::{eof_at, JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{EngineFile, EngineKind};
use crate::report::{
    aggregate, field_names, figure_of, fmt_num, fmt_seconds, heading, mib, ratio_of, round6, ResultRow, RowTable,
};
use crate::sys::{fmt_size, IoBuffer};

/// The calls `advice` makes, and the applications that make them.
const PAGE_CACHE_CONTROLS: &str = "the page-cache controls as applications call them: \
     sync_file_range(SYNC_FILE_RANGE_WRITE) over what was just written, as PostgreSQL's checkpointer does \
     (checkpoint_flush_after) and RocksDB's bytes_per_sync; POSIX_FADV_DONTNEED over data written once, as \
     PostgreSQL does on its closed WAL segments at wal_level=minimal; POSIX_FADV_WILLNEED before reading, as \
     PostgreSQL's prefetching does (effective_io_concurrency)";

pub struct AdviceWorkload;

pub static ADVICE: AdviceWorkload = AdviceWorkload;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "advice",
    summary: "posix_fadvise and sync_file_range next to wbcache's controls",
    about: "the page-cache controls applications use, on the kernel's page cache (posix_fadvise(2), \
            sync_file_range(2) on the file descriptor) and on wbcache (File::advise, File::writeback_range), \
            side by side. It runs on kernel-buffered and wbcache; the other engines do not run it. Variants: \
            cold-read (a file of half of --memory, laid out before the run and cached in neither engine when \
            the timed part starts: dropped from the kernel's page cache, and a wbcache Cache starts empty; read \
            sequentially in 1 MiB reads); cold-read-willneed (the same, the timed part starting with one \
            POSIX_FADV_WILLNEED / Advice::WillNeed over the whole file: MB/s from the advice to the last read, \
            and the advice call's own time); stream (a new file of --size, twice the memory, written in 1 MiB \
            sequential writes, then fsync); stream-dontneed (the same, with POSIX_FADV_DONTNEED / \
            Advice::DontNeed over everything written so far after every 8 MiB); stream-sync-range (the same, \
            with sync_file_range(SYNC_FILE_RANGE_WRITE) / File::writeback_range(WRITE) over the 8 MiB just \
            written, after every 8 MiB). Stream figures: MB/s (the final fsync included), the write calls' \
            p99.9 latency, the final fsync's time, the time spent in the advice calls, and the peak of the \
            file's cached bytes, looked at after every 8 MiB written (mincore(2) on a read-only shared mapping \
            of the file for the kernel, File::cached_ranges for wbcache). The advised variants are compared \
            with the same engine's plain variant and with the kernel. Select one variant with e.g. \
            advice/stream-sync-range",
    models: "a database prefetching a file it is about to scan, a log or a backup that drops what it wrote \
             because nobody reads it again, a checkpoint or a compaction that starts writeback as it goes so \
             that its final fsync is short: does each call do on wbcache what it does on the kernel, and what \
             does it cost",
    source: Some(PAGE_CACHE_CONTROLS),
};

/// The variants of `advice`: a cold file read plainly or after one
/// WILLNEED, and a new file streamed plainly, with DONTNEED behind it, or
/// with its writeback started as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdviceVariant {
    ColdRead,
    ColdReadWillneed,
    Stream,
    StreamDontneed,
    StreamSyncRange,
}

impl AdviceVariant {
    pub const ALL: [AdviceVariant; 5] = [
        AdviceVariant::ColdRead,
        AdviceVariant::ColdReadWillneed,
        AdviceVariant::Stream,
        AdviceVariant::StreamDontneed,
        AdviceVariant::StreamSyncRange,
    ];

    /// The variant name (JSON `variant`).
    pub fn name(self) -> &'static str {
        match self {
            AdviceVariant::ColdRead => "cold-read",
            AdviceVariant::ColdReadWillneed => "cold-read-willneed",
            AdviceVariant::Stream => "stream",
            AdviceVariant::StreamDontneed => "stream-dontneed",
            AdviceVariant::StreamSyncRange => "stream-sync-range",
        }
    }

    pub fn parse(s: &str) -> Option<AdviceVariant> {
        AdviceVariant::ALL.into_iter().find(|v| v.name() == s)
    }

    /// Whether the variant reads the cold file (else it writes a new one).
    pub fn reads(self) -> bool {
        matches!(self, AdviceVariant::ColdRead | AdviceVariant::ColdReadWillneed)
    }

    /// The variant without advice an advised one is compared with (`None`
    /// for the plain ones).
    pub fn plain(self) -> Option<AdviceVariant> {
        match self {
            AdviceVariant::ColdRead | AdviceVariant::Stream => None,
            AdviceVariant::ColdReadWillneed => Some(AdviceVariant::ColdRead),
            AdviceVariant::StreamDontneed | AdviceVariant::StreamSyncRange => Some(AdviceVariant::Stream),
        }
    }

    fn group(self) -> Group {
        Group::new(&ADVICE, Some(self.name().into()), self)
    }
}

/// The engines `advice` runs on: the kernel's page cache through
/// `posix_fadvise(2)` and `sync_file_range(2)`, and a wbcache Cache
/// through `File::advise` and `File::writeback_range`.
pub const ADVICE_ENGINES: [EngineKind; 2] = [EngineKind::KernelBuffered, EngineKind::Wbcache];
/// `advice`'s request size, reads and writes.
pub const ADVICE_BS: u64 = MIB;
/// The stream variants advise (and look at what is cached) after every
/// this many bytes written.
pub const ADVICE_EVERY: u64 = 8 * MIB;

/// The cold file `advice` reads: half the memory (at most the data file
/// it is read from), whole requests.
pub fn advice_cold_len(p: &Params) -> u64 {
    round_down((p.memory / 2).min(data_len(p)), ADVICE_BS)
}

/// The file `advice`'s stream variants write: --size (twice the memory by
/// default), whole requests.
pub fn advice_stream_len(p: &Params) -> u64 {
    round_down(p.size, ADVICE_BS)
}

/// What `advice` does, with this run's sizes (said once above its table,
/// before each variant's description).
pub fn advice_about(p: &Params) -> String {
    format!(
        "The page-cache controls applications use, on the kernel's page cache (kernel-buffered: pread and pwrite, \
         posix_fadvise(2) and sync_file_range(2) on the same file descriptor) and on wbcache (read_at and write_at, \
         File::advise and File::writeback_range on the same handle); the other engines do not run it. Cold reads: the \
         first {} of the data file laid out before the run, dropped from the kernel's page cache before the timed \
         part (a wbcache Cache starts empty). Streams: a new {} file, 1 MiB writes, then fsync; after every \
         {} written, the file's cached bytes are looked at (mincore(2) on a read-only shared mapping of the file, \
         never touched, for the kernel; File::cached_ranges summed for wbcache), before the variant's advice",
        fmt_size(advice_cold_len(p)),
        fmt_size(advice_stream_len(p)),
        fmt_size(ADVICE_EVERY)
    )
}

/// An `advice` job's timed phase: `bs` sequential reads of the whole
/// target (after one WILLNEED over it for `cold-read-willneed`), or `bs`
/// sequential writes of the whole target, then fsync, with the variant's
/// advice and a look at what of the target is cached after every `every`
/// bytes written; stopped at the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdviceJob {
    pub variant: AdviceVariant,
    pub bs: u64,
    pub every: u64,
}

/// What `advice`'s job measured besides its reads or writes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AdviceResult {
    /// The streams: the most bytes of the file cached at once, of the
    /// looks after every `every` bytes written (`None` for the reads).
    pub peak_cached_bytes: Option<u64>,
    /// The time spent inside the advice calls, in seconds: the one
    /// WILLNEED, or every DONTNEED or range writeback start (`None` for
    /// the plain variants).
    pub advise_s: Option<f64>,
    /// The calls that time adds up.
    pub advise_calls: u64,
    /// The time the looks at what is cached took, in seconds: the bench's
    /// own work, not the application's, so it is left out of the job's
    /// times (`io_end_s`, `end_s`).
    pub look_s: f64,
}

impl Workload for AdviceWorkload {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(AdviceVariant::ALL.into_iter().map(AdviceVariant::group).collect()),
            Some(variant) => Some(vec![AdviceVariant::parse(variant)?.group()]),
        }
    }

    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&ADVICE_ENGINES)
    }

    fn needs_data(&self, group: &Group) -> bool {
        group.shape::<AdviceVariant>().reads()
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let cold = fmt_size(advice_cold_len(p));
        let stream = fmt_size(advice_stream_len(p));
        let every = fmt_size(ADVICE_EVERY);
        match group.shape::<AdviceVariant>() {
            AdviceVariant::ColdRead => format!("a cold {cold} file read sequentially, 1 MiB reads"),
            AdviceVariant::ColdReadWillneed => format!(
                "one WILLNEED over the whole cold {cold} file (posix_fadvise(POSIX_FADV_WILLNEED) / \
                 File::advise(Advice::WillNeed)), then the same reads"
            ),
            AdviceVariant::Stream => format!("a new {stream} file written in 1 MiB sequential writes, then fsync"),
            AdviceVariant::StreamDontneed => format!(
                "the same stream, with DONTNEED over everything written so far after every {every} \
                 (posix_fadvise(POSIX_FADV_DONTNEED) / File::advise(Advice::DontNeed))"
            ),
            AdviceVariant::StreamSyncRange => format!(
                "the same stream, starting the writeback of the {every} just written after every {every} \
                 (sync_file_range(SYNC_FILE_RANGE_WRITE) / File::writeback_range(SyncRangeFlags::WRITE))"
            ),
        }
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let v = *group.shape::<AdviceVariant>();
        let pattern = Pattern::own(&AdviceJob { variant: v, bs: ADVICE_BS, every: ADVICE_EVERY });
        let j = if v.reads() {
            JobSpec::new(engine, place.data(advice_cold_len(p)), pattern).with_setup(Setup::Cold).seeded(70)
        } else {
            JobSpec::new(engine, place.fresh(name, 0, advice_stream_len(p)), pattern).with_final_fsync().seeded(71)
        };
        Jobs { jobs: vec![j], deadline_s: p.stream_cap_s, pipelined: false }
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        let job: AdviceJob = ctx.own_pattern()?;
        ctx.run_timed(false, |files, started| {
            let deadline = Instant::now() + ctx.deadline_after();
            let (measured, looks) = advice_io(ctx, &mut *files.file, job, deadline)?;
            // The looks at what is cached are the bench's, not the
            // application's: its times leave them out.
            *started += looks;
            Ok(measured)
        })
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        vec![advice_row(group, engine, jobs, o)]
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<AdviceFigures>()
    }

    /// MB/s, the calls' p99.9, the advice calls' and the fsync's time, the
    /// peak of the file's cached bytes.
    fn summary(&self, rows: &[ResultRow]) -> String {
        let Some(r) = rows.last() else { return crate::report::summary(rows) };
        let mut s = format!("{:.1} MB/s", r.throughput_mb_s.unwrap_or(0.0));
        if let Some(l) = &r.lat_us {
            s.push_str(&format!(", p99.9 {:.1} µs", l.p999));
        }
        let own = advice_figures(r);
        if let Some(a) = own.advise_s {
            s.push_str(&format!(", advice {:.3} ms", a * 1e3));
        }
        if let Some(f) = own.fsync_s {
            s.push_str(&format!(", fsync {f:.3} s"));
        }
        if let Some(c) = own.peak_cached_bytes {
            s.push_str(&format!(", peak cached {:.1} MiB", c as f64 / (1u64 << 20) as f64));
        }
        s
    }

    /// Each variant named, also when it runs alone.
    fn about(&self, groups: &[&Group], p: &Params) -> String {
        format!("{}. Variants: {}", advice_about(p), variants_named(groups, p))
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        advice_table(self.name(), about, rows)
    }
}

/// `advice`'s timed phase on `file`, the job's target (see [`AdviceJob`]):
/// the caller fsyncs. Stops at `deadline` (what was done counts). Also
/// returns the time the looks at what is cached took.
fn advice_io(
    ctx: &JobContext<'_>,
    file: &mut dyn EngineFile,
    job: AdviceJob,
    deadline: Instant,
) -> io::Result<(Measured, Duration)> {
    let mut m = Measured::default();
    let mut result = AdviceResult::default();
    let (advise_time, look_time) = if job.variant.reads() {
        (read_cold(ctx, file, job, deadline, &mut m, &mut result)?, Duration::ZERO)
    } else {
        stream(ctx, file, job, deadline, &mut m, &mut result)?
    };
    result.advise_s = job.variant.plain().map(|_| advise_time.as_secs_f64());
    m.set_own(&result);
    Ok((m, look_time))
}

/// The reads: (one WILLNEED over the whole target, then) `bs` sequential
/// reads of it. Returns the time inside the advice call.
fn read_cold(
    ctx: &JobContext<'_>,
    file: &mut dyn EngineFile,
    job: AdviceJob,
    deadline: Instant,
    m: &mut Measured,
    result: &mut AdviceResult,
) -> io::Result<Duration> {
    let base = ctx.job.target.offset;
    let len = (ctx.job.target.len / job.bs).max(1) * job.bs;
    let mut advise_time = Duration::ZERO;
    if job.variant == AdviceVariant::ColdReadWillneed {
        let t = Instant::now();
        file.advise(base, len, wbcache::Advice::WillNeed)?;
        advise_time += t.elapsed();
        result.advise_calls += 1;
    }
    let mut buf = IoBuffer::new(job.bs as usize);
    while m.bytes < len && !ctx.cancel.load(Relaxed) && Instant::now() < deadline {
        let t = Instant::now();
        let n = file.read_at(&mut buf, base + m.bytes)?;
        if n == 0 {
            return Err(eof_at(m.bytes));
        }
        m.record(ctx.counter(), n as u64, t);
    }
    Ok(advise_time)
}

/// The streams: `bs` sequential writes of the whole target; after every
/// `every` bytes written, a look at how much of what was written is cached
/// (recorded before the advice, so the peak is the most the file held),
/// then the variant's advice: DONTNEED over everything written so far, or
/// the start of the writeback of the `every` bytes just written. Returns
/// the time inside the advice calls and the time the looks took.
fn stream(
    ctx: &JobContext<'_>,
    file: &mut dyn EngineFile,
    job: AdviceJob,
    deadline: Instant,
    m: &mut Measured,
    result: &mut AdviceResult,
) -> io::Result<(Duration, Duration)> {
    let AdviceJob { variant, bs, every } = job;
    let base = ctx.job.target.offset;
    let len = (ctx.job.target.len / bs).max(1) * bs;
    let (mut advise_time, mut look_time) = (Duration::ZERO, Duration::ZERO);
    // A mapping of the file's final length for the kernel, made before the
    // first write (it is never touched: pages past the end of the file are
    // simply not cached).
    if !file.track_residency(base, len)? {
        return Err(io::Error::other("this engine has no cache to ask"));
    }
    let wbuf = IoBuffer::filled(bs as usize, ctx.job.seed);
    let mut peak = 0u64;
    // Where the last look was: the window written since is the one whose
    // writeback `stream-sync-range` starts.
    let mut looked = 0u64;
    while m.bytes < len && !ctx.cancel.load(Relaxed) && Instant::now() < deadline {
        let t = Instant::now();
        file.write_at(&wbuf, base + m.bytes)?;
        m.record(ctx.counter(), bs, t);
        let bytes = m.bytes;
        if bytes - looked < every && bytes < len {
            continue;
        }
        let t = Instant::now();
        peak = peak.max(file.cached_bytes(base, bytes)?);
        look_time += t.elapsed();
        let t = Instant::now();
        match variant {
            AdviceVariant::StreamDontneed => file.advise(base, bytes, wbcache::Advice::DontNeed)?,
            AdviceVariant::StreamSyncRange => file.start_writeback(base + looked, bytes - looked)?,
            _ => {}
        }
        if variant.plain().is_some() {
            advise_time += t.elapsed();
            result.advise_calls += 1;
        }
        looked = bytes;
    }
    result.peak_cached_bytes = Some(peak);
    result.look_s = look_time.as_secs_f64();
    Ok((advise_time, look_time))
}

/// `advice`'s own figures of its rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AdviceFigures {
    /// Stream rows: the most bytes of the written file cached at once
    /// (dirty ones included), of the looks after every 8 MiB written:
    /// `mincore(2)` on a mapping of the file for the kernel,
    /// `File::cached_ranges` for wbcache.
    pub peak_cached_bytes: Option<u64>,
    /// Stream rows: the final fsync's time, in seconds (the row's
    /// `total_s` less its `runtime_s`).
    pub fsync_s: Option<f64>,
    /// Advised rows: the time spent inside the advice calls, in seconds:
    /// the one WILLNEED of `cold-read-willneed` (part of its MB/s), the
    /// sum of every DONTNEED of `stream-dontneed` or range writeback
    /// start of `stream-sync-range`.
    pub advise_s: Option<f64>,
    /// Advised rows: the advice calls `advise_s` adds up.
    pub advise_calls: Option<u64>,
    /// Stream rows: the time the looks at the file's cached bytes took, in
    /// seconds: the bench's own work, left out of the row's `runtime_s`,
    /// `total_s` and MB/s.
    pub cached_look_s: Option<f64>,
}

/// A row's [`AdviceFigures`] (all `None` on another workload's row).
fn advice_figures(row: &ResultRow) -> AdviceFigures {
    row.own()
}

/// `advice`'s row: the reads' or the writes' figures (MB/s until the
/// last read, or until the final fsync returned), and what the job
/// measured besides: the peak of the streamed file's cached bytes, the
/// final fsync's time, the time inside the advice calls.
fn advice_row(group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> ResultRow {
    let mut row = aggregate(group, engine, group.variant.clone(), jobs, o);
    let mut figures = AdviceFigures::default();
    if let Some(j) = jobs.first() {
        if let Some(a) = j.own::<AdviceResult>() {
            figures.peak_cached_bytes = a.peak_cached_bytes;
            figures.advise_s = a.advise_s.map(round6);
            figures.advise_calls = a.advise_s.map(|_| a.advise_calls);
            figures.cached_look_s = a.peak_cached_bytes.map(|_| round6(a.look_s));
        }
        if j.fsync.is_some() {
            figures.fsync_s = Some(round6((j.end_s - j.io_end_s).max(0.0)));
        }
    }
    row.set_own(&figures);
    row
}

/// The order of `advice`'s rows in its table: per variant (in the
/// catalog's order), kernel-buffered then wbcache.
fn advice_rank(r: &ResultRow) -> (usize, usize) {
    let variant = AdviceVariant::ALL.iter().position(|v| Some(v.name()) == r.variant.as_deref()).unwrap_or(usize::MAX);
    let engine = EngineKind::ALL.iter().position(|e| e.name() == r.engine).unwrap_or(usize::MAX);
    (variant, engine)
}

/// What the `advice` table's columns mean (printed above it).
pub const ADVICE_COLUMNS: &str = "MB/s: the bytes read or written over the time from the first call of the timed \
     part (the WILLNEED of cold-read-willneed, the first read or write otherwise) until the last read returned, or \
     until the final fsync returned; the streams' looks at what is cached are left out of it. vs plain: MB/s ÷ the same engine's variant without advice (cold-read, stream). \
     vs kernel-buffered: MB/s ÷ kernel-buffered's in the same variant. p99.9 µs: each read or write call's latency, \
     99.9th percentile (the advice calls are not in it). advice s: the time inside the advice calls, the one \
     WILLNEED or the sum of one call after every 8 MiB written. fsync s: the final fsync's time. peak cached: the \
     most bytes of the streamed file cached at once, dirty ones included, of the looks after every 8 MiB written \
     (each look before that point's advice). peak dirty+wb: the most bytes dirty or under writeback at once \
     (system-wide for the kernel, sampled every 100 ms).";

/// The `advice` table: per variant and engine, MB/s (against the same
/// engine's plain variant and against kernel-buffered), the calls' p99.9,
/// the advice calls' time, the final fsync's, and the peaks of cached and
/// of dirty bytes.
pub fn advice_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let mut rows: Vec<&ResultRow> = rows.to_vec();
    rows.sort_by_key(|r| advice_rank(r));
    let head = [
        "variant",
        "engine",
        "MB/s",
        "vs plain",
        "vs kernel-buffered",
        "p99.9 µs",
        "advice s",
        "fsync s",
        "peak cached MiB",
        "peak dirty+wb MiB",
    ];
    let mut table = RowTable::new(&[&heading(title), about, ADVICE_COLUMNS], &head, &rows);
    let mb_s_of = |variant: &str, engine: &str| figure_of(&rows, variant, engine, |b| b.throughput_mb_s);
    for r in &rows {
        let mb_s = r.throughput_mb_s.filter(|_| r.ok());
        let variant = r.variant.as_deref().unwrap_or("");
        let plain = AdviceVariant::parse(variant).and_then(AdviceVariant::plain);
        let mut c = table.cells(r);
        c.variant().engine().figure(mb_s, fmt_num);
        c.times(ratio_of(mb_s, plain.and_then(|v| mb_s_of(v.name(), &r.engine))));
        c.times(ratio_of(mb_s, mb_s_of(variant, "kernel-buffered")));
        c.figure(r.lat_us, |p| fmt_num(p.p999));
        let own = advice_figures(r);
        for v in [own.advise_s, own.fsync_s] {
            c.figure(v, fmt_seconds);
        }
        for v in [own.peak_cached_bytes, r.peak_dirty_bytes] {
            c.figure(v, mib);
        }
        table.push(c);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::measure::{round3, Histogram, Percentiles};
    use crate::report::failed_row;
    use crate::report::test_support::{
        job, ok_outcome, own, row_json, row_value, PROGRAM_NULLS, READERS_NULLS, SQLITE_NULLS,
    };
    use crate::workloads::{build_spec, groups_for, info, rows_from, test_params as params, variants_of};

    /// advice: five variants on kernel-buffered and wbcache only,
    /// selectable one by one; the cold reads need the data file.
    #[test]
    fn advice_groups_and_selections() {
        let groups = groups_for("advice", None).unwrap();
        assert_eq!(
            variants_of(&groups),
            ["cold-read", "cold-read-willneed", "stream", "stream-dontneed", "stream-sync-range"]
        );
        for g in &groups {
            let on: Vec<EngineKind> = EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect();
            assert_eq!(on, [EngineKind::KernelBuffered, EngineKind::Wbcache]);
            assert_eq!(g.only_on(), Some(&ADVICE_ENGINES[..]));
        }
        assert_eq!(groups.iter().map(Group::needs_data).collect::<Vec<_>>(), [true, true, false, false, false]);
        assert_eq!(groups[4].slug(), "advice-stream-sync-range");
        assert_eq!(groups[4].label(), "advice stream-sync-range");
        assert_eq!(variants_of(&groups_for("advice/cold-read-willneed", None).unwrap()), ["cold-read-willneed"]);
        for bad in ["advice/", "advice/willneed", "advice/stream/x", "advice/Stream", "stream-dontneed"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        let plain: Vec<Option<&str>> = AdviceVariant::ALL.iter().map(|v| v.plain().map(AdviceVariant::name)).collect();
        assert_eq!(plain, [None, Some("cold-read"), None, Some("stream"), Some("stream")]);
        let w = info("advice").unwrap();
        let source = w.source.unwrap();
        for name in ["PostgreSQL's checkpointer", "RocksDB's bytes_per_sync", "POSIX_FADV_DONTNEED", "WILLNEED"] {
            assert!(source.contains(name), "{name} in {source}");
        }
        for text in [w.about, w.models, source, &advice_about(&params(1.0))] {
            for word in ["issue", "seed", "slot"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
    }

    /// The cold reads: the first half of the memory of the data file,
    /// dropped from the kernel's cache first; the streams: a new file of
    /// --size, fsynced. On a device: the same regions from its start.
    #[test]
    fn advice_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let spec = |variant: &str, engine: EngineKind, place: &Place| {
            let g = groups_for(&format!("advice/{variant}"), None).unwrap().remove(0);
            build_spec(&g, engine, &p, place, false)
        };
        let cold = spec("cold-read-willneed", EngineKind::KernelBuffered, &place);
        assert_eq!((cold.jobs.len(), cold.deadline_s, cold.pipelined), (1, p.stream_cap_s, false));
        let j = &cold.jobs[0];
        assert_eq!(j.engine, EngineKind::KernelBuffered);
        assert!(matches!(j.setup, Setup::Cold));
        assert!(matches!(
            j.pattern.own_as(),
            Some(AdviceJob { variant: AdviceVariant::ColdReadWillneed, bs, every }) if bs == MIB && every == 8 * MIB
        ));
        assert_eq!((j.target.path.clone(), j.target.offset, j.target.len), (place.data_path(), 0, 64 * MIB));
        assert!(!j.target.create && !j.fsync_at_end);
        assert!(data_len(&p) >= j.target.len, "the laid-out data covers the cold file");
        // A data file smaller than half the memory: the cold file is all of it.
        let small = Params { size: 16 * MIB, ..p.clone() };
        assert_eq!(advice_cold_len(&small), 16 * MIB);

        let stream = spec("stream-sync-range", EngineKind::Wbcache, &place);
        let j = &stream.jobs[0];
        assert!(matches!(j.setup, Setup::None));
        assert!(matches!(j.pattern.own_as(), Some(AdviceJob { variant: AdviceVariant::StreamSyncRange, .. })));
        assert_eq!((j.target.len, j.target.create, j.fsync_at_end), (256 * MIB, true, true));
        assert_eq!(j.target.path, dir.join("advice-stream-sync-range-wbcache-0.bin"));

        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        for (variant, len) in [("cold-read", 64 * MIB), ("stream-dontneed", 256 * MIB)] {
            let t = &spec(variant, EngineKind::KernelBuffered, &dev).jobs[0].target;
            assert_eq!((t.offset, t.len, t.create), (0, len, false), "{variant}");
            assert_eq!(t.path, std::path::Path::new("/dev/x"));
        }
    }

    fn advice_group(variant: &str) -> Group {
        crate::workloads::groups_for(&format!("advice/{variant}"), None).unwrap().remove(0)
    }

    /// An advice row: the stream's MB/s until the fsync returned, the
    /// fsync's own time, the peak of cached bytes, the advice calls'
    /// time; the new fields close the JSON row. A cold read: no fsync, no
    /// cached peak; without advice, no advice time.
    #[test]
    fn advice_rows() {
        let mut w = job("", 512_000_000, 0.5);
        w.role = None;
        w.end_s = 1.0;
        let mut fsync = Histogram::default();
        fsync.record(500_000_000);
        w.fsync = Some(fsync.to_data());
        w.own = own(&AdviceResult {
            peak_cached_bytes: Some(32 << 20),
            advise_s: Some(0.0125),
            advise_calls: 64,
            look_s: 0.002,
        });
        let o = ok_outcome(vec![w], None);
        let r = &rows_from(&advice_group("stream-dontneed"), EngineKind::KernelBuffered, &o)[0];
        assert_eq!((r.workload.as_str(), r.variant.as_deref()), ("advice", Some("stream-dontneed")));
        assert_eq!(r.throughput_mb_s, Some(512.0), "the fsync included");
        assert_eq!((advice_figures(r).fsync_s, advice_figures(r).peak_cached_bytes), (Some(0.5), Some(32 << 20)));
        assert_eq!(
            (advice_figures(r).advise_s, advice_figures(r).advise_calls, advice_figures(r).cached_look_s),
            (Some(0.0125), Some(64), Some(0.002))
        );
        let text = row_json(r);
        assert!(
            text.ends_with(&format!(
                "{SQLITE_NULLS},\"peak_cached_bytes\":33554432,\"fsync_s\":0.5,\"advise_s\":0.0125,\
                 \"advise_calls\":64,\"cached_look_s\":0.002,{PROGRAM_NULLS},{READERS_NULLS}}}"
            )),
            "{text}"
        );
        let mut read = job("", 64 << 20, 0.05);
        read.role = None;
        read.own = own(&AdviceResult::default());
        let o = ok_outcome(vec![read], None);
        let r = &rows_from(&advice_group("cold-read"), EngineKind::Wbcache, &o)[0];
        assert_eq!(r.throughput_mb_s, Some(round3((64 << 20) as f64 / 0.05 / 1e6)));
        assert_eq!(
            (
                advice_figures(r).fsync_s,
                advice_figures(r).peak_cached_bytes,
                advice_figures(r).advise_s,
                advice_figures(r).advise_calls
            ),
            (None, None, None, None)
        );
        assert_eq!(advice_figures(r).cached_look_s, None);
        let json = row_value(r);
        assert!(json["advise_s"].is_null() && json.get("peak_cached_bytes").is_some());
    }

    fn advice_row(variant: &str, engine: &str, mb_s: f64) -> ResultRow {
        let mut row = ResultRow::empty(
            &advice_group(variant),
            EngineKind::parse(engine).unwrap(),
            Some(variant.into()),
            Status::Ok,
            None,
        );
        row.throughput_mb_s = Some(mb_s);
        row.lat_us = Some(Percentiles { p50: 400.0, p99: 2_000.0, p999: 12_345.0, max: 40_000.0 });
        row.peak_dirty_bytes = Some(64 << 20);
        if variant.starts_with("stream") {
            row.update_own(|f: &mut AdviceFigures| f.fsync_s = Some(0.25));
            row.update_own(|f: &mut AdviceFigures| f.peak_cached_bytes = Some(128 << 20));
        }
        if variant.contains('-') && variant != "cold-read" {
            row.update_own(|f: &mut AdviceFigures| f.advise_s = Some(0.0042));
        }
        row
    }

    /// The table: per variant, kernel-buffered then wbcache; MB/s against
    /// the same engine's plain variant and against kernel-buffered.
    #[test]
    fn advice_table_compares_with_plain_and_the_kernel() {
        let mut rows = vec![
            advice_row("stream-sync-range", "wbcache", 1_500.0),
            advice_row("stream", "wbcache", 1_000.0),
            advice_row("stream", "kernel-buffered", 2_000.0),
            advice_row("stream-sync-range", "kernel-buffered", 1_000.0),
            advice_row("cold-read", "kernel-buffered", 1_000.0),
            advice_row("cold-read-willneed", "kernel-buffered", 1_500.0),
            advice_row("cold-read", "wbcache", 2_000.0),
        ];
        rows.push(failed_row(&advice_group("stream-dontneed"), EngineKind::Wbcache, Status::Error, "boom".into()));
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let table = advice_table("advice", "about", &refs);
        assert!(table.contains(
            "| variant | engine | MB/s | vs plain | vs kernel-buffered | p99.9 µs | advice s | fsync s | \
             peak cached MiB | peak dirty+wb MiB | status |"
        ));
        assert!(
            table.contains("| cold-read | wbcache | 2,000 | — | 2.00× | 12,345 | — | — | — | 64.0 | ok |"),
            "{table}"
        );
        assert!(table.contains("| cold-read-willneed | kernel-buffered | 1,500 | 1.50× | 1.00× | 12,345 | 0.00420 |"));
        assert!(table.contains("| stream | wbcache | 1,000 | — | 0.50× | 12,345 | — | 0.250 | 128.0 | 64.0 | ok |"));
        assert!(table.contains("| stream-sync-range | kernel-buffered | 1,000 | 0.50× | 1.00× |"), "{table}");
        assert!(table.contains("| stream-sync-range | wbcache | 1,500 | 1.50× | 1.50× |"), "{table}");
        assert!(table.contains("| stream-dontneed | wbcache | — | — | — | — | — | — | — | — | error: boom |"));
        let order: Vec<&str> = table.lines().filter(|l| l.starts_with("| cold") || l.starts_with("| stream")).collect();
        assert!(order[0].starts_with("| cold-read | kernel-buffered") && order[1].starts_with("| cold-read | wbcache"));
        assert!(order[2].starts_with("| cold-read-willneed") && order[3].starts_with("| stream | kernel-buffered"));
        assert!(order[5].starts_with("| stream-dontneed") && order[6].starts_with("| stream-sync-range | kernel"));
        for word in ["issue", "seed", "slot"] {
            assert!(!ADVICE_COLUMNS.contains(word), "{word}");
        }
    }
}
