//! `rand-read`: 4 KiB random reads over a file larger than the cache (the
//! generic random loop), and three per-call variants over cached data, each
//! read timed on its own (this module's own timed phase): a region read
//! once before, the same 4 KiB at offset 0, and a region written before in
//! 4 KiB pieces. After `cached-4k`, a bare memcpy of the same pattern is
//! measured in the bench's own process: the memory's share of any cache's
//! read, against which wbcache's cost is checked. The reader-thread
//! variants (`cached-4k-readers-<threads>`: several threads reading
//! `cached-4k`'s region on one open file at once) are in [`readers`]; the
//! region every cached variant reads ([`cached_span`]) is in `region`.

mod readers;
mod region;

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    described, Group, JobSpec, Jobs, Params, Pattern, Place, ReferenceContext, Selection, Setup, Workload,
    WorkloadInfo, KIB,
};
use crate::bench_worker::{JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{EngineFile, EngineKind};
use crate::measure::Histogram;
use crate::report::{field_names, find_row, markdown_table, Reference, ResultRow, TargetInputs, Verdict};
use crate::sys::{fmt_size, IoBuffer, Rng};
use readers::{ReaderReads, ReadersRowFigures, READERS_FAMILY, READER_COUNTS};
use region::cached_span;

pub struct RandRead;

pub static RAND_READ: RandRead = RandRead;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "rand-read",
    summary: "4 KiB random reads, cold and cached (µs per call when cached)",
    about: "4 KiB random reads over a file of --size (twice the cache), for --runtime; variants (µs per call): cached-4k, 4 KiB random reads inside a region read once before (up to 64M, past the L2 caches: the copy's memory traffic dominates; a bare memcpy of the same pattern is measured as the reference); cached-4k-offset0, the same cached 4 KiB at offset 0 (the read path's own cost); cached-4k-written, as cached-4k in a region written before in 4 KiB writes in random order (a database's hot pages: a cache of many 4 KiB folios, where finding the folio costs most); cached-4k-readers-1, -2 and -4, cached-4k's region read by 1, 2 or 4 threads at once on one open file, each in its own random order (µs per call and reads/s in all, against kernel-buffered at the same thread count; a bare memcpy by as many threads as the reference)",
    models: "point lookups: cold over a table larger than memory, and hot inside a cached working set, by one thread or several at once",
    source: Some("libMicro's pread_u4k case (the cached-4k-offset0 variant)"),
};

/// The groups of `rand-read`: the cold random reads, one of the cached
/// per-call variants, or the reader-thread variant of so many threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RandReadGroup {
    Cold,
    Cached(CachedShape),
    Readers(u32),
}

/// The timed phase of a job of the cached variants (the worker's spec
/// carries it): per-call reads on one thread, or reader threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum CachedPattern {
    PerCall(CachedReads),
    Readers(ReaderReads),
}

/// The cached reads of `rand-read`'s per-call variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachedShape {
    /// `cached-4k`: random 4 KiB inside a region read once before (the
    /// caches hold it as readahead left it: 2 MiB folios in wbcache).
    Region,
    /// `cached-4k-offset0`: the same 4 KiB at offset 0 (libMicro's
    /// `pread_u4k`).
    Offset0,
    /// `cached-4k-written`: random 4 KiB inside a region written before in
    /// 4 KiB writes in random order (4 KiB folios).
    Written,
}

impl CachedShape {
    const ALL: [CachedShape; 3] = [CachedShape::Region, CachedShape::Offset0, CachedShape::Written];

    /// The variant name (JSON `variant`).
    fn variant(self) -> &'static str {
        match self {
            CachedShape::Region => "cached-4k",
            CachedShape::Offset0 => "cached-4k-offset0",
            CachedShape::Written => "cached-4k-written",
        }
    }
}

/// The cached variants' timed phase: `iterations` random `bs` reads inside
/// the first `span` bytes, after `warmup` untimed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedReads {
    pub bs: u64,
    pub span: u64,
    pub iterations: u64,
    pub warmup: u64,
}

impl Workload for RandRead {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    /// All of them, one cached variant by its name, or the reader-thread
    /// variants: all of them (`cached-4k-readers`) or one.
    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        let cached = CachedShape::ALL.map(|s| Group::new(self, Some(s.variant().into()), RandReadGroup::Cached(s)));
        let readers = READER_COUNTS.map(|n| Group::new(self, Some(readers::variant_of(n)), RandReadGroup::Readers(n)));
        let all = std::iter::once(Group::new(self, None, RandReadGroup::Cold)).chain(cached).chain(readers);
        let Some(selector) = selector else { return Some(all.collect()) };
        let chosen: Vec<Group> = all
            .filter(|g| match g.shape::<RandReadGroup>() {
                RandReadGroup::Readers(_) if selector == READERS_FAMILY => true,
                _ => g.variant.as_deref() == Some(selector),
            })
            .collect();
        (!chosen.is_empty()).then_some(chosen)
    }

    fn listed_variants(&self) -> Option<String> {
        let names: Vec<String> = CachedShape::ALL
            .iter()
            .map(|s| s.variant().to_string())
            .chain(READER_COUNTS.map(readers::variant_of))
            .map(|v| format!("rand-read/{v}"))
            .collect();
        Some(format!(
            "rand-read variants (also rand-read/{READERS_FAMILY} for all its thread counts): {}",
            names.join(", ")
        ))
    }

    fn needs_data(&self, _group: &Group) -> bool {
        true
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        match group.shape::<RandReadGroup>() {
            RandReadGroup::Cold => format!("4 KiB random reads over a {} file, {} s", fmt_size(p.size), p.runtime_s),
            RandReadGroup::Cached(CachedShape::Region) => {
                format!("4 KiB random reads inside a cached {} region, µs per call", fmt_size(cached_span(p)))
            }
            RandReadGroup::Cached(CachedShape::Offset0) => {
                "4 KiB pread at offset 0 of a cached file (libMicro pread_u4k), µs per call".into()
            }
            RandReadGroup::Cached(CachedShape::Written) => format!(
                "4 KiB random reads inside a cached {} region written before in 4 KiB writes in random order \
                 (a database's hot pages: many 4 KiB folios, not readahead's 2 MiB ones), µs per call",
                fmt_size(cached_span(p))
            ),
            RandReadGroup::Readers(threads) => readers::describe(*threads, p),
        }
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let shape = match *group.shape::<RandReadGroup>() {
            RandReadGroup::Cold => {
                let pat = Pattern::Rand { write: false, bs: 4 * KIB, ops: None };
                let job = JobSpec::new(engine, place.data(p.size), pat).seeded(8);
                return Jobs { jobs: vec![job], deadline_s: p.runtime_s, pipelined: true };
            }
            RandReadGroup::Cached(shape) => shape,
            RandReadGroup::Readers(threads) => {
                let reads = ReaderReads::new(p, threads);
                let (span, pat) = (reads.span, Pattern::own(&CachedPattern::Readers(reads)));
                let job = JobSpec::new(engine, place.data(span), pat).with_setup(Setup::Warm { bytes: span }).seeded(9);
                return Jobs { jobs: vec![job], deadline_s: p.call_cap_s, pipelined: false };
            }
        };
        let span = if shape == CachedShape::Offset0 { 4 * KIB } else { cached_span(p) };
        let reads = CachedReads { bs: 4 * KIB, span, iterations: p.iterations_1k, warmup: p.warmup };
        let pat = Pattern::own(&CachedPattern::PerCall(reads));
        let job = match shape {
            CachedShape::Written => {
                let t = place.fresh(name, 0, span);
                JobSpec::new(engine, t, pat).with_setup(Setup::ScatteredWrites { bytes: span, bs: 4 * KIB }).seeded(9)
            }
            _ => JobSpec::new(engine, place.data(span), pat).with_setup(Setup::Warm { bytes: span }).seeded(9),
        };
        Jobs { jobs: vec![job], deadline_s: p.call_cap_s, pipelined: false }
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        match ctx.own_pattern()? {
            CachedPattern::PerCall(reads) => {
                ctx.run_timed(false, |files, _| cached_reads(ctx, &mut *files.file, reads))
            }
            CachedPattern::Readers(reads) => readers::run_job(ctx, reads),
        }
    }

    /// The reader-thread variants' rows carry their reads/s and threads.
    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        match group.shape::<RandReadGroup>() {
            RandReadGroup::Readers(_) => vec![readers::row(group, engine, jobs, o)],
            _ => vec![crate::report::aggregate(group, engine, group.variant.clone(), jobs, o)],
        }
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<ReadersRowFigures>()
    }

    /// Of the reader-thread variants, every thread's reads per second.
    fn primary_figure(&self, row: &ResultRow) -> Option<f64> {
        readers::readers_figures(row).reads_per_s.or(row.us_per_call).or(row.throughput_mb_s)
    }

    fn summary(&self, rows: &[ResultRow]) -> String {
        rows.last().and_then(readers::summary).unwrap_or_else(|| crate::report::summary(rows))
    }

    /// After `cached-4k`: a bare memcpy of the same pattern; after a
    /// reader-thread variant, the same by as many threads.
    fn references(&self, group: &Group, ctx: &mut ReferenceContext<'_>) -> Vec<Reference> {
        let p = ctx.params;
        let cap = Duration::from_secs_f64(p.call_cap_s);
        match *group.shape::<RandReadGroup>() {
            RandReadGroup::Cached(CachedShape::Region) => {}
            RandReadGroup::Readers(threads) => {
                return readers::references(group, ReaderReads::new(p, threads), cap, &mut *ctx.note)
            }
            _ => return Vec::new(),
        }
        let us = memcpy_reference_us(cached_span(p), 4 * KIB, p.iterations_1k, p.warmup, cap);
        (ctx.note)(&format!("{} · bare memcpy reference: {us:.3} µs/call", group.label()));
        if us > 0.0 {
            vec![Reference::memcpy(group, cached_span(p), us)]
        } else {
            Vec::new()
        }
    }

    /// The heading names the reader-thread variants once, together.
    fn about(&self, groups: &[&Group], p: &Params) -> String {
        let threads_of = |g: &Group| match g.shape::<RandReadGroup>() {
            RandReadGroup::Readers(n) => Some(*n),
            _ => None,
        };
        let others: Vec<&Group> = groups.iter().copied().filter(|g| threads_of(g).is_none()).collect();
        let threads: Vec<u32> = groups.iter().copied().filter_map(threads_of).collect();
        let mut parts = Vec::new();
        if !others.is_empty() {
            parts.push(described(&others, p));
        }
        if !threads.is_empty() {
            parts.push(readers::family_about(&threads, p));
        }
        parts.join("; ")
    }

    /// The generic table of the other variants' rows, then the
    /// reader-thread variants' own.
    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        let (threaded, others): (Vec<&ResultRow>, Vec<&ResultRow>) =
            rows.iter().copied().partition(|r| r.variant.as_deref().and_then(readers::threads_of).is_some());
        match (threaded.is_empty(), others.is_empty()) {
            (true, _) => markdown_table(self.name(), about, &others),
            (false, true) => format!("### {}\n\n{about}\n\n{}", self.name(), readers::table(&threaded)),
            (false, false) => format!("{}\n{}", markdown_table(self.name(), about, &others), readers::table(&threaded)),
        }
    }

    fn targets(&self, rows: &[&ResultRow], inputs: &TargetInputs<'_>) -> Vec<Verdict> {
        cached_targets(rows, inputs.references)
    }

    fn targets_rank(&self) -> u32 {
        3
    }
}

/// The cached variants' timed phase on `file` (see [`CachedReads`]).
fn cached_reads(ctx: &JobContext<'_>, file: &mut dyn EngineFile, reads: CachedReads) -> io::Result<Measured> {
    let CachedReads { bs, span, iterations, warmup } = reads;
    let base = ctx.job.target.offset;
    let blocks = (span / bs).max(1);
    let mut rng = Rng::new(ctx.job.seed);
    let mut buf = IoBuffer::new(bs as usize);
    for _ in 0..warmup {
        file.read_at(&mut buf, base + rng.below(blocks) * bs)?;
    }
    let mut m = Measured::default();
    let deadline = Instant::now() + ctx.deadline_after();
    for _ in 0..iterations {
        if ctx.cancel.load(Relaxed) {
            break;
        }
        let off = base + rng.below(blocks) * bs;
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        let n = file.read_at(&mut buf, off)?;
        m.record(ctx.counter(), n as u64, t);
    }
    m.us_per_call = Some(m.hist.mean_ns() / 1000.0);
    Ok(m)
}

/// The bound on `rand-read cached-4k-offset0` (µs per call): the read
/// path's own cost.
const CACHED_OFFSET0_US_MAX: f64 = 0.10;
/// What `rand-read cached-4k` may cost beyond the bare memcpy of the same
/// pattern (µs per call): the read path's share of a random cached read.
const CACHED_OVER_MEMCPY_US_MAX: f64 = 0.05;

/// The read path's own cost, measured libMicro's way (the same cached 4 KiB
/// again and again), has a bound of its own; a random read in a region
/// past the L2 caches is bounded by what copying the bytes costs there (the
/// bare memcpy of the same pattern) plus the path's share.
/// `cached-4k-written` is reported next to them: many small folios.
fn cached_targets(rows: &[&ResultRow], references: &[&Reference]) -> Vec<Verdict> {
    let mut lines = Vec::new();
    let region = CachedShape::Region.variant();
    let memcpy = references.iter().find(|r| r.variant.as_deref() == Some(region)).map(|r| r.us_per_call);
    for (shape, what) in [
        (CachedShape::Offset0, "cached 4 KiB read (libMicro pread_u4k shape: same 4 KiB)"),
        (CachedShape::Region, "cached 4 KiB read, random in a region past the L2 caches (64M by default)"),
    ] {
        let variant = Some(shape.variant());
        let Some(a) = find_row(rows, variant, "wbcache").and_then(|w| w.us_per_call) else { continue };
        let kernel = find_row(rows, variant, "kernel-buffered").and_then(|k| k.us_per_call);
        let (bound, bound_text) = match shape {
            CachedShape::Offset0 => (CACHED_OFFSET0_US_MAX, format!("{CACHED_OFFSET0_US_MAX:.2} µs")),
            // Without the reference (an interrupted run) there is no bound.
            _ => match memcpy {
                Some(m) => {
                    (m + CACHED_OVER_MEMCPY_US_MAX, format!("the bare memcpy + {CACHED_OVER_MEMCPY_US_MAX:.2} µs"))
                }
                None => continue,
            },
        };
        let context: Vec<String> =
            [("kernel-buffered", kernel), ("bare memcpy", memcpy.filter(|_| shape == CachedShape::Region))]
                .into_iter()
                .filter_map(|(who, us)| us.map(|us| format!("{who} {us:.3} µs")))
                .collect();
        let measured =
            if context.is_empty() { format!("{a:.3} µs") } else { format!("{a:.3} µs ({})", context.join("; ")) };
        lines.push(Verdict::new(format!("{what}: wbcache ≤ {bound_text}"), measured, a <= bound));
    }
    lines
}

impl Reference {
    /// `rand-read cached-4k`'s: a bare memcpy of the same pattern inside
    /// an anonymous buffer of `span` bytes, at `us_per_call`.
    pub fn memcpy(group: &Group, span: u64, us_per_call: f64) -> Reference {
        Reference {
            workload: group.workload.to_string(),
            variant: group.variant.clone(),
            what: format!(
                "memcpy of a random 4 KiB inside an anonymous {} buffer, timed per call as the engines' reads",
                fmt_size(span)
            ),
            us_per_call,
            mb_s: None,
            reads_per_s: None,
            reader_threads: None,
        }
    }
}

/// µs per call of a bare `memcpy` of a random `bs`-byte block inside an
/// anonymous buffer of `span` bytes, timed per call exactly as the cached
/// variants time an engine's reads (after `warmup` untimed copies, at most
/// `calls` or until `cap`). A cache's read of that pattern copies the same
/// bytes from memory as scattered, so the report prints it next to the
/// engines' figures: it says how much of their cost is the memory's. (It
/// runs in the bench's own process, on one heap buffer.)
pub fn memcpy_reference_us(span: u64, bs: u64, calls: u64, warmup: u64, cap: Duration) -> f64 {
    let source = IoBuffer::filled(span.max(bs) as usize, 11);
    let mut buf = IoBuffer::new(bs as usize);
    let blocks = (span / bs).max(1);
    let mut rng = Rng::new(9);
    let copy = |off: usize, buf: &mut IoBuffer| {
        buf.copy_from_slice(&source[off..off + bs as usize]);
        std::hint::black_box(&buf[..]);
    };
    for _ in 0..warmup {
        copy((rng.below(blocks) * bs) as usize, &mut buf);
    }
    let mut hist = Histogram::default();
    let deadline = Instant::now() + cap;
    for _ in 0..calls {
        // As the engines' loop: the offset is drawn before the clock starts.
        let off = (rng.below(blocks) * bs) as usize;
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        copy(off, &mut buf);
        hist.record(t.elapsed().as_nanos() as u64);
    }
    hist.mean_ns() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::report::to_json;
    use crate::sys::Machine;
    use crate::workloads::targets;

    #[test]
    fn memcpy_reference_times_the_calls_it_made() {
        let us = memcpy_reference_us(1 << 20, 4096, 2_000, 10, Duration::from_secs(5));
        assert!(us.is_finite() && us > 0.0, "{us}");
        // A cap already past makes no timed call at all: nothing to report.
        assert_eq!(memcpy_reference_us(1 << 20, 4096, 2_000, 10, Duration::ZERO), 0.0);
    }

    /// The random cached-read target is the bare memcpy reference plus
    /// 0.05 µs, shown next to wbcache's figure; offset 0's is 0.10 µs;
    /// without the reference there is no random-read line; the JSON
    /// carries the reference under `references`.
    #[test]
    fn cached_read_target_names_the_memcpy_reference() {
        let groups = crate::workloads::groups_for("rand-read", None).unwrap();
        let group = groups.iter().find(|g| g.variant.as_deref() == Some("cached-4k")).unwrap().clone();
        let mut row = ResultRow::empty(&group, EngineKind::Wbcache, group.variant.clone(), Status::Ok, None);
        row.us_per_call = Some(0.5);
        let reference = Reference::memcpy(&group, 64 << 20, 0.4);
        let table = targets(std::slice::from_ref(&row), 1 << 30, std::slice::from_ref(&reference), true).unwrap();
        assert!(
            table.contains("wbcache ≤ the bare memcpy + 0.05 µs | 0.500 µs (bare memcpy 0.400 µs) | NOT met"),
            "{table}"
        );
        row.us_per_call = Some(0.449);
        let table = targets(std::slice::from_ref(&row), 1 << 30, std::slice::from_ref(&reference), true).unwrap();
        assert!(table.contains("0.449 µs (bare memcpy 0.400 µs) | met"), "{table}");
        assert!(targets(std::slice::from_ref(&row), 1 << 30, &[], true).is_none(), "no reference, no bound");
        let offset0 = groups.iter().find(|g| g.variant.as_deref() == Some("cached-4k-offset0")).unwrap();
        let mut at0 = ResultRow::empty(offset0, EngineKind::Wbcache, offset0.variant.clone(), Status::Ok, None);
        at0.us_per_call = Some(0.085);
        let table = targets(std::slice::from_ref(&at0), 1 << 30, &[], true).unwrap();
        assert!(table.contains("same 4 KiB): wbcache ≤ 0.10 µs | 0.085 µs | met"), "{table}");
        at0.us_per_call = Some(0.12);
        let table = targets(std::slice::from_ref(&at0), 1 << 30, &[], true).unwrap();
        assert!(table.contains("| 0.120 µs | NOT met"), "{table}");
        assert!(reference.sentence().contains("64M buffer"), "{}", reference.sentence());
        let machine = Machine { kernel: "k".into(), cpus: 2, mem_bytes: 1, fs: "ext4".into(), device: "vda".into() };
        let json: serde_json::Value = serde_json::from_str(&to_json(
            &machine,
            &serde_json::json!({}),
            &[row],
            &[reference],
            &crate::workloads::own_columns(),
        ))
        .unwrap();
        assert_eq!(json["references"][0]["variant"], "cached-4k");
        assert_eq!(json["references"][0]["us_per_call"], 0.4);
    }
}
