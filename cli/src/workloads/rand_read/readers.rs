//! `rand-read`'s reader-thread variants, `cached-4k-readers-1`, `-2` and
//! `-4`: how cached 4 KiB reads scale with the threads reading one open
//! file at once. One hot region (`cached-4k`'s, read once before); the
//! reader threads start together and each makes the same number of 4 KiB
//! reads (fewer only at the per-call cap), over every block of the region
//! in an order of its own (shuffled with a seed of the thread's). The
//! threads of the kernel engines share one file descriptor (`pread(2)`),
//! those of wbcache one `wbcache::File` (it is `Send + Sync`); those of
//! kernel-direct open a handle each (an io_uring serves one thread).
//! Reported: µs per call (every thread's time over its reads, so the mean
//! over every read) and reads/s in all (every thread's reads over the time
//! from the common start until the last thread ended), next to a bare
//! memcpy of the same pattern by as many threads; the table sets each
//! engine's reads/s against kernel-buffered's at the same thread count.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::region::cached_span;
use crate::bench_worker::{eof_at, JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{EngineFile, EngineKind, SharedReader, Target};
use crate::measure::round3;
use crate::report::{aggregate, dash, figure_of, fmt_num, ratio_of, Reference, ResultRow, RowTable};
use crate::sys::{fmt_size, IoBuffer, Rng};
use crate::workloads::{Group, Params, KIB};

/// The reader thread counts of the variants, one variant each.
pub const READER_COUNTS: [u32; 3] = [1, 2, 4];

/// The variants' common name: `rand-read/cached-4k-readers` selects all
/// of them, `rand-read/cached-4k-readers-<threads>` one.
pub const READERS_FAMILY: &str = "cached-4k-readers";

/// The seed the reader threads' orders derive from (the engines' threads
/// and the memcpy reference's read in the same orders).
const ORDER_SEED: u64 = 9;

/// Each reader thread makes this many times `cached-4k`'s reads. With
/// `cached-4k`'s 200,000 a run lasted about 0.1 s, and a thread held off
/// its core for a few milliseconds (by the host, a kernel thread) moved the
/// aggregate by 10-20% between runs: two readers gave 1.45-2.40× of one
/// over six runs on the project's 2-core machine, where the C program
/// `examples/read_scaling.c`, at 2,000,000 reads per thread, gave
/// 2.46-2.51× in two. Ten times as many last long enough to even that
/// out, within the per-call cap at a cache's speed.
const READS_PER_CACHED_4K_READ: u64 = 10;

/// Reads between two looks at the clock and the stop flags.
const READS_PER_LOOK: u64 = 256;

/// The variant of `threads` reader threads.
pub fn variant_of(threads: u32) -> String {
    format!("{READERS_FAMILY}-{threads}")
}

/// The reader threads of a variant name, if it is one of these variants.
pub fn threads_of(variant: &str) -> Option<u32> {
    let threads: u32 = variant.strip_prefix(READERS_FAMILY)?.strip_prefix('-')?.parse().ok()?;
    READER_COUNTS.contains(&threads).then_some(threads)
}

/// The timed phase of a `cached-4k-readers` job (and of its memcpy
/// reference): each of `reader_threads` threads makes `warmup` untimed
/// reads of `bs`, waits for the common start, then makes
/// `reads_per_thread` timed ones, in its own order of the first `span`
/// bytes' blocks (round again when they are fewer than its reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderReads {
    pub bs: u64,
    pub span: u64,
    pub reader_threads: u32,
    pub reads_per_thread: u64,
    pub warmup: u64,
    pub seed: u64,
}

impl ReaderReads {
    /// The reads of `threads` reader threads in this run: `cached-4k`'s
    /// region and warmup, and [`READS_PER_CACHED_4K_READ`] times its calls,
    /// per thread.
    pub fn new(p: &Params, threads: u32) -> ReaderReads {
        ReaderReads {
            bs: 4 * KIB,
            span: cached_span(p),
            reader_threads: threads,
            reads_per_thread: p.iterations_1k * READS_PER_CACHED_4K_READ,
            warmup: p.warmup,
            seed: ORDER_SEED,
        }
    }

    /// Thread `i`'s order: every block of the region once, shuffled with
    /// a seed of the thread's own.
    fn order(&self, i: usize) -> Vec<u32> {
        let blocks = (self.span / self.bs).clamp(1, u64::from(u32::MAX));
        let mut rng = Rng::new(self.seed ^ ((i as u64 + 1) << 32));
        let mut order: Vec<u32> = (0..blocks as u32).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, rng.below(k as u64 + 1) as usize);
        }
        order
    }
}

/// What the reader threads did together: the job's own figures (and a
/// memcpy reference's).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadersFigures {
    pub reader_threads: u32,
    /// Every thread's timed reads.
    pub reads: u64,
    /// From the common start until the last thread ended, in seconds.
    pub wall_s: f64,
    /// Every thread's time from the start to its last read, over all the
    /// reads, in µs: the mean cost of one read as its thread saw it.
    pub us_per_call: f64,
}

impl ReadersFigures {
    /// Every thread's reads per second of the common time.
    pub fn reads_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.reads as f64 / self.wall_s
        } else {
            0.0
        }
    }

    fn of(reader_threads: u32, spans: &[ThreadSpan]) -> ReadersFigures {
        let reads: u64 = spans.iter().map(|s| s.reads).sum();
        let busy_s: f64 = spans.iter().map(|s| (s.end - s.start).as_secs_f64()).sum();
        let wall_s = match (spans.iter().map(|s| s.start).min(), spans.iter().map(|s| s.end).max()) {
            (Some(start), Some(end)) => (end - start).as_secs_f64(),
            _ => 0.0,
        };
        let us_per_call = if reads > 0 { busy_s * 1e6 / reads as f64 } else { 0.0 };
        ReadersFigures { reader_threads, reads, wall_s, us_per_call }
    }
}

/// One reader thread's timed reads: how many, and when they started and
/// ended.
struct ThreadSpan {
    reads: u64,
    start: Instant,
    end: Instant,
}

/// What the reader threads share: their reads, the common start (the
/// caller's thread waits for it too), a stop (a thread failed) and the
/// job's cancel, the cap, and the counter the worker's sampler reads.
struct Course<'a> {
    reads: ReaderReads,
    start: Barrier,
    stop: AtomicBool,
    cancel: Option<&'a AtomicBool>,
    counter: Option<&'a AtomicU64>,
    cap: Duration,
}

impl<'a> Course<'a> {
    fn new(reads: ReaderReads, cancel: Option<&'a AtomicBool>, counter: Option<&'a AtomicU64>, cap: Duration) -> Self {
        let start = Barrier::new(reads.reader_threads as usize + 1);
        Course { reads, start, stop: AtomicBool::new(false), cancel, counter, cap }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Relaxed) || self.cancel.is_some_and(|c| c.load(Relaxed))
    }
}

/// One reader thread: its warmup reads, the common start, then its timed
/// reads in `order` (`read` takes the offset in the region), until their
/// number, the cap or a stop. A failed read stops every thread.
fn read_course<F>(c: &Course<'_>, order: &[u32], mut read: F) -> io::Result<ThreadSpan>
where
    F: FnMut(u64) -> io::Result<()>,
{
    let bs = c.reads.bs;
    let mut at = 0;
    let mut next = || {
        let off = u64::from(order[at]) * bs;
        at = if at + 1 == order.len() { 0 } else { at + 1 };
        off
    };
    let warm = (0..c.reads.warmup).try_for_each(|_| read(next()));
    if warm.is_err() {
        c.stop.store(true, Relaxed);
    }
    // Every thread reaches the start, also after a failure: none waits forever.
    c.start.wait();
    warm?;
    let start = Instant::now();
    let deadline = start + c.cap;
    let mut done = 0;
    while done < c.reads.reads_per_thread && !c.stopped() && Instant::now() < deadline {
        let batch = READS_PER_LOOK.min(c.reads.reads_per_thread - done);
        for _ in 0..batch {
            if let Err(e) = read(next()) {
                c.stop.store(true, Relaxed);
                return Err(e);
            }
        }
        done += batch;
        if let Some(counter) = c.counter {
            counter.fetch_add(batch * bs, Relaxed);
        }
    }
    Ok(ThreadSpan { reads: done, start, end: Instant::now() })
}

/// Runs a reader thread per element of `readers` (thread `i` in order
/// `i`), started together once the caller's thread reached the start too;
/// returns when they started, and what they did, once the last ended.
fn run_threads<F>(c: &Course<'_>, readers: Vec<F>) -> io::Result<(Instant, ReadersFigures)>
where
    F: FnMut(u64) -> io::Result<()> + Send,
{
    assert_eq!(readers.len(), c.reads.reader_threads as usize, "one reader per thread");
    let orders: Vec<Vec<u32>> = (0..readers.len()).map(|i| c.reads.order(i)).collect();
    let (started, spans) = std::thread::scope(|s| {
        let handles: Vec<_> = readers
            .into_iter()
            .zip(&orders)
            .enumerate()
            .map(|(i, (read, order))| {
                let course = move || read_course(c, order, read);
                std::thread::Builder::new().name(format!("reader-{i}")).spawn_scoped(s, course).expect("spawn a reader")
            })
            .collect();
        c.start.wait();
        let started = Instant::now();
        let joined = handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("reader panicked"))));
        (started, joined.collect::<Vec<_>>())
    });
    let spans = spans.into_iter().collect::<io::Result<Vec<ThreadSpan>>>()?;
    Ok((started, ReadersFigures::of(c.reads.reader_threads, &spans)))
}

/// How a reader thread reads the job's file: through the one the threads
/// share, or through a handle of its own.
enum ThreadReader<'a> {
    Shared(SharedReader<'a>),
    Own(Box<dyn EngineFile>),
}

impl ThreadReader<'_> {
    fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        match self {
            ThreadReader::Shared(file) => file.read_at(buf, off),
            ThreadReader::Own(file) => file.read_at(buf, off),
        }
    }
}

/// The readers of `threads` threads: the job's open file, shared, where
/// the engine lets threads share it; else a handle each, opened on the
/// job's target (kernel-direct).
fn thread_readers<'a>(
    ctx: &JobContext<'_>,
    file: &'a dyn EngineFile,
    threads: u32,
) -> io::Result<Vec<ThreadReader<'a>>> {
    if let Some(shared) = file.shared_reader() {
        return Ok((0..threads).map(|_| ThreadReader::Shared(shared)).collect());
    }
    let target = Target { create: false, ..ctx.job.target.clone() };
    (0..threads).map(|_| ctx.sys.open(ctx.job.engine, &target).map(ThreadReader::Own)).collect()
}

/// A `cached-4k-readers` job: after its setup (the region read once, by
/// the generic course), its reader threads on its open file; the job's
/// start is the threads' common start.
pub fn run_job(ctx: &JobContext<'_>, reads: ReaderReads) -> io::Result<JobRaw> {
    ctx.run_timed(false, |files, started| {
        let course = Course::new(reads, Some(ctx.cancel), Some(ctx.counter()), ctx.deadline_after());
        let base = ctx.job.target.offset;
        let readers: Vec<_> = thread_readers(ctx, &*files.file, reads.reader_threads)?
            .into_iter()
            .map(|mut reader| {
                let mut buf = IoBuffer::new(reads.bs as usize);
                move |off: u64| match reader.read_at(&mut buf, base + off)? {
                    0 => Err(eof_at(base + off)),
                    _ => Ok(()),
                }
            })
            .collect();
        let (start, figures) = run_threads(&course, readers)?;
        *started = start;
        let mut m = Measured {
            bytes: figures.reads * reads.bs,
            ops: figures.reads,
            us_per_call: Some(figures.us_per_call),
            ..Measured::default()
        };
        m.set_own(&figures);
        Ok(m)
    })
}

/// A bare memcpy of the same pattern: as many threads, each copying
/// random `bs` blocks of one shared anonymous buffer of `span` bytes into
/// a buffer of its own, in the reader threads' orders, started and
/// stopped as they are (`cap` for the per-call cap). It runs in the
/// bench's own process.
pub fn memcpy_readers(reads: ReaderReads, cap: Duration) -> io::Result<ReadersFigures> {
    let source = IoBuffer::filled(reads.span.max(reads.bs) as usize, 11);
    let course = Course::new(reads, None, None, cap);
    let bs = reads.bs as usize;
    let readers: Vec<_> = (0..reads.reader_threads)
        .map(|_| {
            let (mut buf, source) = (IoBuffer::new(bs), &source);
            move |off: u64| {
                let off = off as usize;
                buf.copy_from_slice(&source[off..off + bs]);
                std::hint::black_box(&buf[..]);
                Ok::<(), io::Error>(())
            }
        })
        .collect();
    run_threads(&course, readers).map(|(_, figures)| figures)
}

/// The memcpy reference of `group` (threads of `reads`), with a line for
/// the progress display; none if it made no copy (a cap already past).
pub fn references(group: &Group, reads: ReaderReads, cap: Duration, note: &mut dyn FnMut(&str)) -> Vec<Reference> {
    match memcpy_readers(reads, cap) {
        Ok(f) if f.reads > 0 => {
            let (us, per_s) = (f.us_per_call, fmt_num(f.reads_per_s()));
            note(&format!("{} · bare memcpy reference: {us:.3} µs/call, {per_s} copies/s in all", group.label()));
            vec![Reference::memcpy_readers(group, reads.span, &f)]
        }
        Ok(_) => Vec::new(),
        Err(e) => {
            note(&format!("{} · bare memcpy reference failed: {e}", group.label()));
            Vec::new()
        }
    }
}

impl Reference {
    /// A `cached-4k-readers` variant's: the bare memcpy of its pattern by
    /// as many threads ([`memcpy_readers`]) inside a `span`-byte buffer.
    pub fn memcpy_readers(group: &Group, span: u64, f: &ReadersFigures) -> Reference {
        let threads = f.reader_threads;
        Reference {
            workload: group.workload.to_string(),
            variant: group.variant.clone(),
            what: format!(
                "memcpy of random 4 KiB blocks of one anonymous {} buffer by {}, in the reader threads' orders",
                fmt_size(span),
                if threads == 1 {
                    "one thread into a buffer of its own".to_string()
                } else {
                    format!("{threads} threads at once, each into a buffer of its own")
                }
            ),
            us_per_call: round3(f.us_per_call),
            mb_s: None,
            reads_per_s: Some(f.reads_per_s().round()),
            reader_threads: Some(threads),
        }
    }
}

/// A variant's description (table headings).
pub fn describe(threads: u32, p: &Params) -> String {
    format!(
        "{threads} reader thread{} at once on one open file, each reading random 4 KiB blocks of a cached {} region \
         in an order of its own, µs per call and reads/s in all",
        if threads == 1 { "" } else { "s" },
        fmt_size(cached_span(p))
    )
}

/// The variants of `threads` reader threads in one phrase (a heading's).
pub fn family_about(threads: &[u32], p: &Params) -> String {
    let names: Vec<String> = threads.iter().map(|&n| variant_of(n)).collect();
    let counts: Vec<String> = threads.iter().map(u32::to_string).collect();
    let counts = match counts.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => counts.join(""),
    };
    format!(
        "{}: {counts} reader threads at once on one open file (the kernel's: one file descriptor, pread; wbcache's: one \
         wbcache::File; kernel-direct's: a handle each), each reading random 4 KiB blocks of the cached {} region \
         in an order of its own, µs per call and reads/s in all (a bare memcpy by as many threads as the reference)",
        names.join(", "),
        fmt_size(cached_span(p))
    )
}

/// `rand-read`'s own figures of the rows of its reader-thread variants
/// (`cached-4k-readers-N`). The row's `us_per_call` is each thread's time
/// over its reads (the mean over every read).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReadersRowFigures {
    /// Every reader thread's reads over the time from their common start
    /// until the last one ended, in reads per second (all threads
    /// together).
    pub reads_per_s: Option<f64>,
    /// The reader threads.
    pub reader_threads: Option<u32>,
}

/// A row's [`ReadersRowFigures`] (all `None` on other rows).
pub fn readers_figures(row: &ResultRow) -> ReadersRowFigures {
    row.own()
}

/// A row of a `cached-4k-readers` variant: the job's figures, with the
/// reads per second of all its threads and their number; its MB/s and
/// time are the threads' common time's.
pub fn row(group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> ResultRow {
    let mut row = aggregate(group, engine, group.variant.clone(), jobs, o);
    if let Some(f) = jobs.first().and_then(|j| j.own::<ReadersFigures>()) {
        let bytes = jobs.iter().map(|j| j.bytes).sum::<u64>();
        row.set_own(&ReadersRowFigures {
            reads_per_s: Some(f.reads_per_s().round()),
            reader_threads: Some(f.reader_threads),
        });
        row.runtime_s = Some(round3(f.wall_s));
        row.throughput_mb_s = (f.wall_s > 0.0).then(|| round3(bytes as f64 / f.wall_s / 1e6));
    }
    row
}

/// The progress display's line of a row of these variants.
pub fn summary(r: &ResultRow) -> Option<String> {
    let own = readers_figures(r);
    let (us, per_s, threads) = (r.us_per_call?, own.reads_per_s?, own.reader_threads?);
    Some(format!("{us:.3} µs/call, {} reads/s in all ({threads} reader threads)", fmt_num(per_s)))
}

fn reads_per_s_of(r: &ResultRow) -> Option<f64> {
    readers_figures(r).reads_per_s
}

/// What the columns of [`table`] say.
const READERS_COLUMNS: &str = "Reader threads on one open file: µs/call is every thread's time over its reads (the \
     mean over every read); reads/s is every thread's reads over the time from their common start until the last \
     one ended; the ratios are of reads/s, against kernel-buffered at the same thread count and against the same \
     engine with one reader.";

/// The table of these variants' rows: per engine and thread count, µs per
/// call, reads/s in all and MB/s, and reads/s against kernel-buffered's
/// at the same thread count and against the engine's own single reader.
pub fn table(rows: &[&ResultRow]) -> String {
    let head = [
        "variant",
        "engine",
        "readers",
        "µs/call",
        "reads/s",
        "MB/s",
        "reads/s vs kernel-buffered",
        "reads/s vs 1 reader",
    ];
    let mut table = RowTable::new(&[READERS_COLUMNS], &head, rows);
    for r in rows {
        let variant = r.variant.clone().unwrap_or_else(dash);
        let own = readers_figures(r);
        let threads = own.reader_threads.or_else(|| threads_of(&variant));
        let mine = own.reads_per_s.filter(|v| *v > 0.0);
        let kernel = figure_of(rows, &variant, "kernel-buffered", reads_per_s_of);
        let single = figure_of(rows, &variant_of(1), &r.engine, reads_per_s_of);
        let mut c = table.cells(r);
        c.variant().engine().text(threads.map(|n| n.to_string()).unwrap_or_else(dash));
        c.figure(r.us_per_call, |us| format!("{us:.3}"));
        c.figure(mine, fmt_num).figure(r.throughput_mb_s, fmt_num);
        c.times(ratio_of(mine, kernel)).times(ratio_of(mine, single));
        table.push(c);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::report::test_support::{ok_outcome, own, row_json, READERS_NULLS};
    use crate::report::to_json;
    use crate::sys::Machine;
    use crate::workloads::rand_read::{CachedPattern, RAND_READ};
    use crate::workloads::{build_spec, groups_for, rows_from, test_params, variants_of, Place, Setup, Workload, MIB};

    fn group(variant: &str) -> Group {
        groups_for(&format!("rand-read/{variant}"), None).unwrap().remove(0)
    }

    fn place(dir: &std::path::Path) -> Place {
        Place { dir: Some(dir.to_path_buf()), device: None, device_size: 0, free_bytes: 1 << 40 }
    }

    /// The default suite's rand-read runs the reader-thread variants after
    /// the per-call ones; each is selected by its name, all of them by the
    /// family's, and `--list` names them.
    #[test]
    fn readers_variants_are_selected_by_name() {
        let all = groups_for("rand-read", None).unwrap();
        assert!(all[0].variant.is_none(), "the cold reads first");
        assert_eq!(
            variants_of(&all[1..]),
            [
                "cached-4k",
                "cached-4k-offset0",
                "cached-4k-written",
                "cached-4k-readers-1",
                "cached-4k-readers-2",
                "cached-4k-readers-4"
            ]
        );
        let family = groups_for("rand-read/cached-4k-readers", None).unwrap();
        assert_eq!(variants_of(&family), ["cached-4k-readers-1", "cached-4k-readers-2", "cached-4k-readers-4"]);
        assert_eq!(variants_of(&groups_for("rand-read/cached-4k-readers-2", None).unwrap()), ["cached-4k-readers-2"]);
        assert_eq!(variants_of(&groups_for("rand-read/cached-4k", None).unwrap()), ["cached-4k"]);
        for unknown in
            ["rand-read/cached-4k-readers-3", "rand-read/cached-4k-readers-", "rand-read/readers", "rand-read/"]
        {
            assert!(groups_for(unknown, None).is_none(), "{unknown}");
        }
        assert_eq!((threads_of("cached-4k-readers-4"), threads_of("cached-4k")), (Some(4), None));
        let listed = RAND_READ.listed_variants().unwrap();
        assert!(listed.contains("rand-read/cached-4k-readers-1, rand-read/cached-4k-readers-2"), "{listed}");
        let text = crate::help::list_text();
        assert!(text.contains("rand-read/cached-4k-readers-4") && text.contains("cached-4k-readers-1, -2 and -4"));
    }

    /// One job per measurement (its threads share its file): the region of
    /// cached-4k, read once before, and ten times cached-4k's calls per
    /// thread.
    #[test]
    fn a_readers_job_reads_the_cached_region_with_its_threads() {
        let p = test_params(1.0);
        let spec = build_spec(&group("cached-4k-readers-4"), EngineKind::Wbcache, &p, &place("/w".as_ref()), false);
        assert_eq!((spec.jobs.len(), spec.deadline_s, spec.pipelined), (1, p.call_cap_s, false));
        let job = &spec.jobs[0];
        assert!(matches!(job.setup, Setup::Warm { bytes } if bytes == cached_span(&p)), "{:?}", job.setup);
        assert_eq!((job.target.len, job.target.create), (cached_span(&p), false));
        let Some(CachedPattern::Readers(reads)) = job.pattern.own_as::<CachedPattern>() else { panic!("{job:?}") };
        assert_eq!(reads, ReaderReads::new(&p, 4));
        assert_eq!((reads.bs, reads.reader_threads, reads.reads_per_thread), (4096, 4, 10 * p.iterations_1k));
    }

    /// Every thread reads every block once per round, in an order of its
    /// own; the engines' threads and the memcpy's read in the same orders.
    #[test]
    fn each_thread_reads_every_block_in_an_order_of_its_own() {
        let reads =
            ReaderReads { bs: 4096, span: 1000 * 4096, reader_threads: 2, reads_per_thread: 1, warmup: 0, seed: 9 };
        let (a, b) = (reads.order(0), reads.order(1));
        for order in [&a, &b] {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..1000).collect::<Vec<u32>>());
        }
        assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 900, "orders of their own");
        assert_eq!(a, reads.order(0), "the same seed, the same order");
    }

    /// A failed read, in the warmup or timed, ends every thread's reads
    /// and is the error of all of them.
    #[test]
    fn a_failed_read_stops_every_thread() {
        for (warmup, fail_at) in [(0, 1_000), (5, 1)] {
            let reads =
                ReaderReads { bs: 4096, span: MIB, reader_threads: 2, reads_per_thread: u64::MAX, warmup, seed: 9 };
            let course = Course::new(reads, None, None, Duration::from_secs(600));
            let readers: Vec<_> = (0..2)
                .map(|i| {
                    let mut n = 0;
                    move |_off: u64| {
                        n += 1;
                        if i == 1 && n == fail_at {
                            return Err(io::Error::other("bad block"));
                        }
                        Ok(())
                    }
                })
                .collect();
            let err = run_threads(&course, readers).expect_err("the failure");
            assert_eq!(err.to_string(), "bad block");
        }
    }

    /// The memcpy by reader threads makes every thread's copies (none when
    /// the cap is already past), and its reference carries reads/s and the
    /// threads, in its sentence and the JSON.
    #[test]
    fn memcpy_reference_by_reader_threads() {
        let reads =
            ReaderReads { bs: 4096, span: MIB, reader_threads: 2, reads_per_thread: 3_000, warmup: 10, seed: 9 };
        let f = memcpy_readers(reads, Duration::from_secs(60)).unwrap();
        assert_eq!((f.reader_threads, f.reads), (2, 6_000));
        assert!(f.us_per_call > 0.0 && f.wall_s > 0.0 && f.reads_per_s() > 0.0, "{f:?}");
        let g = group("cached-4k-readers-2");
        let mut notes = Vec::new();
        assert!(references(&g, reads, Duration::ZERO, &mut |l: &str| notes.push(l.to_string())).is_empty());
        let figures = ReadersFigures { reader_threads: 2, reads: 1_000_000, wall_s: 0.125, us_per_call: 0.2 };
        let reference = Reference::memcpy_readers(&g, 64 * MIB, &figures);
        let sentence = reference.sentence();
        assert!(sentence.starts_with("Reference (cached-4k-readers-2): a bare memcpy"), "{sentence}");
        assert!(sentence.contains("64M buffer by 2 threads at once, each into a buffer of its own"), "{sentence}");
        let one = ReadersFigures { reader_threads: 1, ..figures };
        let alone = Reference::memcpy_readers(&group("cached-4k-readers-1"), 64 * MIB, &one).sentence();
        assert!(alone.contains("64M buffer by one thread into a buffer of its own, in the"), "{alone}");
        assert!(alone.contains("reads of this pattern by 1 reader thread."), "{alone}");
        assert!(sentence.contains("0.200 µs per copy and reaches 8,000,000 copies/s in all"), "{sentence}");
        let machine = Machine { kernel: "k".into(), cpus: 2, mem_bytes: 1, fs: "ext4".into(), device: "vda".into() };
        let json: serde_json::Value = serde_json::from_str(&to_json(
            &machine,
            &serde_json::json!({}),
            &[],
            &[reference],
            &crate::workloads::own_columns(),
        ))
        .unwrap();
        let r = &json["references"][0];
        assert_eq!((r["variant"].as_str(), r["us_per_call"].as_f64()), (Some("cached-4k-readers-2"), Some(0.2)));
        assert_eq!((r["reads_per_s"].as_f64(), r["reader_threads"].as_u64()), (Some(8e6), Some(2)));
        assert!(r["mb_s"].is_null());
    }

    fn readers_job(figures: &ReadersFigures) -> JobResult {
        JobResult {
            bytes: figures.reads * 4096,
            ops: figures.reads,
            io_end_s: figures.wall_s,
            end_s: figures.wall_s,
            us_per_call: Some(figures.us_per_call),
            own: own(figures),
            ..JobResult::default()
        }
    }

    /// A row has every thread's reads/s and the threads (JSON fields added
    /// at the end of every row, null on the others), its MB/s and time
    /// the threads' common time's.
    #[test]
    fn a_readers_row_carries_reads_per_s_and_threads() {
        let g = group("cached-4k-readers-2");
        let figures = ReadersFigures { reader_threads: 2, reads: 400_000, wall_s: 0.1, us_per_call: 0.5 };
        let rows = rows_from(&g, EngineKind::Wbcache, &ok_outcome(vec![readers_job(&figures)], None));
        let r = &rows[0];
        let own = readers_figures(r);
        assert_eq!((own.reads_per_s, own.reader_threads, r.us_per_call), (Some(4e6), Some(2), Some(0.5)));
        assert_eq!((r.throughput_mb_s, r.runtime_s, r.ops), (Some(16_384.0), Some(0.1), Some(400_000)));
        assert!(r.lat_us.is_none(), "the reads are timed together, not one by one");
        let json = row_json(r);
        assert!(json.ends_with(",\"reads_per_s\":4000000.0,\"reader_threads\":2}"), "{json}");
        let cold =
            ResultRow::empty(&groups_for("rand-read", None).unwrap()[0], EngineKind::Wbcache, None, Status::Ok, None);
        assert!(row_json(&cold).ends_with(&format!(",{READERS_NULLS}}}")));
        assert_eq!(RAND_READ.summary(&rows), "0.500 µs/call, 4,000,000 reads/s in all (2 reader threads)");
    }

    fn row(variant: &str, engine: EngineKind, reads_per_s: f64, us: f64) -> ResultRow {
        let g = group(variant);
        let mut r = ResultRow::empty(&g, engine, g.variant.clone(), Status::Ok, None);
        r.us_per_call = Some(us);
        r.set_own(&ReadersRowFigures { reads_per_s: Some(reads_per_s), reader_threads: threads_of(variant) });
        r.throughput_mb_s = Some(reads_per_s * 4096.0 / 1e6);
        r
    }

    /// The table shows µs per call and reads/s in all, and sets reads/s
    /// against kernel-buffered's at the same thread count and against the
    /// engine's single reader; the workload's table puts the other
    /// variants in the generic table above it.
    #[test]
    fn the_table_sets_reads_per_s_against_kernel_buffered_at_the_same_threads() {
        let (kb, wb) = (EngineKind::KernelBuffered, EngineKind::Wbcache);
        let g4 = group("cached-4k-readers-4");
        let mut rows = vec![
            row("cached-4k-readers-1", kb, 1_000_000.0, 1.0),
            row("cached-4k-readers-1", wb, 2_000_000.0, 0.5),
            row("cached-4k-readers-2", kb, 1_500_000.0, 1.33),
            row("cached-4k-readers-2", wb, 3_600_000.0, 0.55),
            ResultRow::empty(&g4, wb, g4.variant.clone(), Status::Error, Some("boom".into())),
        ];
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let table = table(&refs);
        assert!(table.starts_with(READERS_COLUMNS), "{table}");
        let head = "| variant | engine | readers | µs/call | reads/s | MB/s | reads/s vs kernel-buffered | \
                    reads/s vs 1 reader | status |";
        assert!(table.contains(head), "{table}");
        assert!(table.contains(
            "| cached-4k-readers-1 | kernel-buffered | 1 | 1.000 | 1,000,000 | 4,096 | 1.00× | 1.00× | ok |"
        ));
        assert!(table.contains(
            "| cached-4k-readers-2 | kernel-buffered | 2 | 1.330 | 1,500,000 | 6,144 | 1.00× | 1.50× | ok |"
        ));
        assert!(
            table.contains("| cached-4k-readers-2 | wbcache | 2 | 0.550 | 3,600,000 | 14,746 | 2.40× | 1.80× | ok |")
        );
        assert!(table.contains("| cached-4k-readers-4 | wbcache | 4 | — | — | — | — | — | error: boom |"), "{table}");
        let cached = group("cached-4k");
        let mut single = ResultRow::empty(&cached, wb, cached.variant.clone(), Status::Ok, None);
        single.us_per_call = Some(0.3);
        rows.push(single);
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let whole = RAND_READ.table("about", &refs);
        assert!(whole.starts_with("### rand-read\n\nabout\n\n| variant | engine | µs/call |"), "{whole}");
        assert_eq!(whole.matches("| cached-4k-readers-2 | wbcache |").count(), 1, "{whole}");
        assert!(whole.contains("| cached-4k | wbcache | 0.300 |") && whole.contains(head), "{whole}");
        let alone = RAND_READ.table("about", &refs[..2]);
        assert!(alone.starts_with(&format!("### rand-read\n\nabout\n\n{READERS_COLUMNS}")), "{alone}");
    }

    /// The heading names the reader-thread variants once, together.
    #[test]
    fn the_heading_names_the_variants_together() {
        let p = test_params(1.0);
        let groups = groups_for("rand-read", None).unwrap();
        let about = RAND_READ.about(&groups.iter().collect::<Vec<_>>(), &p);
        assert!(about.contains("cached-4k-written: 4 KiB random reads"), "{about}");
        assert!(
            about.contains("; cached-4k-readers-1, cached-4k-readers-2, cached-4k-readers-4: 1, 2 or 4 reader threads"),
            "{about}"
        );
        assert_eq!(about.matches("reader thread").count(), 1, "{about}");
        let one = groups_for("rand-read/cached-4k-readers-2", None).unwrap();
        let about = RAND_READ.about(&one.iter().collect::<Vec<_>>(), &p);
        assert!(about.starts_with("cached-4k-readers-2: 2 reader threads at once on one open file"), "{about}");
    }

    /// A scratch directory on a disk file system where there is one
    /// (kernel-direct needs O_DIRECT), removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch() -> Scratch {
        let base = [std::path::PathBuf::from("/var/tmp"), std::env::temp_dir()]
            .into_iter()
            .find(|d| d.is_dir() && !crate::sys::is_memory_fs(d))
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("wbcache-cli-readers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The worker runs a reader-thread job on every engine: the kernel's
    /// threads on one descriptor, wbcache's on one File, kernel-direct's on
    /// handles of their own; every thread makes its reads.
    #[test]
    fn readers_run_on_every_engine() {
        let dir = scratch();
        let mut p = test_params(1.0);
        (p.memory, p.iterations_1k, p.warmup, p.call_cap_s) = (16 * MIB, 200, 10, 30.0);
        let span = cached_span(&p);
        assert_eq!(span, 4 * MIB);
        std::fs::write(dir.0.join("data.bin"), IoBuffer::filled(span as usize, 3).to_vec()).unwrap();
        let g = group("cached-4k-readers-2");
        for engine in
            [EngineKind::KernelBuffered, EngineKind::KernelDontcache, EngineKind::Wbcache, EngineKind::KernelDirect]
        {
            let o = crate::bench_worker::run(
                &build_spec(&g, engine, &p, &place(&dir.0), false),
                &crate::workloads::Catalog,
            );
            if o.status == Status::Unsupported && engine != EngineKind::Wbcache {
                continue; // O_DIRECT or RWF_DONTCACHE not here
            }
            assert_eq!(o.status, Status::Ok, "{engine:?}: {:?}", o.error);
            let r = rows_from(&g, engine, &o).remove(0);
            let own = readers_figures(&r);
            assert_eq!((own.reader_threads, r.ops, r.bytes), (Some(2), Some(4_000), Some(4_000 * 4096)), "{engine:?}");
            assert!(own.reads_per_s.is_some_and(|v| v > 0.0) && r.us_per_call.is_some_and(|v| v > 0.0), "{r:?}");
        }
    }
}
