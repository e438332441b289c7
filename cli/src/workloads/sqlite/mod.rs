//! `sqlite`: SQLite running pgbench's TPC-B-like transaction on
//! kernel-buffered (SQLite's unix VFS) and on wbcache (the wbcache VFS),
//! in WAL and DELETE journal modes, alone or next to a streaming writer of
//! the same engine. The transactions job is this module's own (told what
//! to do by a [`SqliteJob`], in [`job`], it loads the database in [`db`],
//! waits for the writer's head start, then runs transactions until the
//! deadline or the writer's end); the writer is the generic streaming
//! loop. One row per measurement: transactions per second, the commit's
//! latency, the writer's MB/s and the peak RSS.

mod db;
mod job;

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    round_down, variants_named, Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Spec, Workload, WorkloadInfo,
    MIB,
};
use crate::bench_worker::{JobContext, JobRaw, JobResult, Measured, Outcome};
use crate::engines::{EngineKind, Target};
use crate::measure::{round3, HistData, Histogram};
use crate::report::{
    aggregate, field_names, figure_of, fmt_count, fmt_num, heading, mib, ms, of_role, ratio_of, ResultRow, RowTable,
};
use crate::sys::fmt_size;
pub use job::{Journal, SqliteJob};

/// The transaction `sqlite` runs.
const PGBENCH_TPCB: &str = "pgbench's built-in TPC-B-like script";

pub struct Sqlite;

pub static SQLITE: Sqlite = Sqlite;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "sqlite",
    summary: "SQLite running pgbench's TPC-B-like transactions, idle and next to a stream",
    about: "SQLite (one connection, synchronous=FULL, 4 KiB pages) running pgbench's TPC-B-like transaction \
            for --runtime: BEGIN; UPDATE an account's balance; SELECT it; UPDATE a teller's; UPDATE a branch's; \
            INSERT a history row; COMMIT (account, teller, branch and delta at random). The database is \
            pgbench's (10 tellers and up to 100,000 accounts per branch, an 84-character filler per account), \
            with about 1.25 × --memory of accounts data (4M with --quick), loaded before the timed part. It \
            runs on kernel-buffered (SQLite's default unix VFS, the kernel's page cache) and on wbcache (the \
            wbcache VFS over the engine's Cache); the other engines do not run it. Variants wal-idle and \
            delete-idle (journal_mode WAL or DELETE, the transactions alone), wal-streaming and \
            delete-streaming (the same next to a streaming writer of the same engine: --size, twice the \
            memory, written to a new file in the same directory in 1 MiB sequential writes, over and over \
            from its start until --runtime ends, then fsync, through the kernel's page cache or the \
            database's own wbcache Cache; the transactions start once it has written a quarter of the memory \
            and stop when it is done). Figures: \
            transactions per second, the COMMIT statement's latency (p50, p99, max), the writer's MB/s and the \
            process's peak RSS. Select one variant with e.g. sqlite/wal-streaming",
    models: "an application's embedded database (a browser profile, a phone app, a service's local store) \
             committing small transactions durably while a backup, a download or a log streams through the \
             same cache to the same disk: what a commit costs, idle and under the stream",
    source: Some(PGBENCH_TPCB),
};

/// The variants of `sqlite`: a journal mode, with the transactions alone
/// or next to a streaming writer of the same engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqliteVariant {
    pub journal: Journal,
    pub streaming: bool,
}

impl SqliteVariant {
    pub const ALL: [SqliteVariant; 4] = [
        SqliteVariant { journal: Journal::Wal, streaming: false },
        SqliteVariant { journal: Journal::Wal, streaming: true },
        SqliteVariant { journal: Journal::Delete, streaming: false },
        SqliteVariant { journal: Journal::Delete, streaming: true },
    ];

    /// The variant name (JSON `variant`).
    pub fn name(self) -> &'static str {
        match (self.journal, self.streaming) {
            (Journal::Wal, false) => "wal-idle",
            (Journal::Wal, true) => "wal-streaming",
            (Journal::Delete, false) => "delete-idle",
            (Journal::Delete, true) => "delete-streaming",
        }
    }

    pub fn parse(s: &str) -> Option<SqliteVariant> {
        SqliteVariant::ALL.into_iter().find(|v| v.name() == s)
    }

    fn group(self) -> Group {
        Group::new(&SQLITE, Some(self.name().into()), self)
    }
}

/// The engines `sqlite` runs on: SQLite's default unix VFS over the
/// kernel's page cache, and the wbcache VFS over a wbcache Cache.
pub const SQLITE_ENGINES: [EngineKind; 2] = [EngineKind::KernelBuffered, EngineKind::Wbcache];
/// The role of `sqlite`'s transactions: when they end, the streaming
/// writer stops (and when it ends, they stop).
pub const TRANSACTIONS: &str = "transactions";
/// The role of `sqlite`'s streaming writer.
pub const STREAMER: &str = "streamer";
/// The streaming writer's request size.
pub const SQLITE_STREAM_BS: u64 = MIB;
/// The bytes one account takes in the database's 4 KiB pages (an
/// 84-character filler, three integers, the cell's header, the b-tree's
/// inner pages; measured: 3,355,443 accounts made a 315.7 MiB database, 98.7
/// bytes each), to size the table from the bytes wanted.
pub const SQLITE_ACCOUNT_BYTES: u64 = 98;

/// What `sqlite`'s transactions job measured besides its transactions.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SqliteResult {
    /// The database file's size after the load (pages × page size).
    pub db_bytes: u64,
    /// The load's time (not part of the measurement), in seconds.
    pub load_s: f64,
    /// Each COMMIT statement's time.
    pub commit: HistData,
}

/// The accounts of a `sqlite` database: about `p.sqlite_data_bytes` of
/// table pages.
pub fn sqlite_accounts(p: &Params) -> u64 {
    (p.sqlite_data_bytes / SQLITE_ACCOUNT_BYTES).max(1)
}

/// What `sqlite`'s streaming writer writes: --size (twice the memory by
/// default), whole requests.
pub fn sqlite_stream_len(p: &Params) -> u64 {
    round_down(p.size, SQLITE_STREAM_BS)
}

/// How much the streaming writer writes before the first transaction: a
/// quarter of the memory (at most a quarter of the stream).
pub fn sqlite_head_start(p: &Params) -> u64 {
    (p.memory / 4).min(sqlite_stream_len(p) / 4)
}

/// The database of a `sqlite` measurement (a new file in the directory; on
/// a device, the device itself, where the job reports that SQLite needs a
/// file system) and its side files.
fn sqlite_db(place: &Place, name: &str, len: u64) -> (Target, Vec<Target>) {
    match (&place.device, &place.dir) {
        (Some(dev), _) => (Target { path: dev.clone(), offset: 0, len, create: false }, Vec::new()),
        (None, Some(dir)) => {
            let file = |suffix: &str| Target {
                path: dir.join(format!("{name}.db{suffix}")),
                offset: 0,
                len: if suffix.is_empty() { len } else { 0 },
                create: true,
            };
            (file(""), ["-wal", "-shm", "-journal"].map(file).to_vec())
        }
        (None, None) => unreachable!("a place has a dir or a device"),
    }
}

/// What `sqlite` does, with this run's sizes (said once above its table,
/// before each variant's description).
pub fn sqlite_about(p: &Params) -> String {
    let accounts = sqlite_accounts(p);
    let job = SqliteJob { journal: Journal::Wal, accounts, head_start: 0 };
    format!(
        "SQLite, one connection, PRAGMA synchronous=FULL, 4 KiB pages, running pgbench's TPC-B-like transaction \
         one after another for {} s: BEGIN; UPDATE pgbench_accounts (a random account's balance + a random delta); \
         SELECT that balance; UPDATE pgbench_tellers; UPDATE pgbench_branches; INSERT INTO pgbench_history; COMMIT. \
         The database: {}, {} tellers, {} accounts (about {} of accounts data, an 84-character filler each), \
         loaded before the timed part with journal_mode=OFF and synchronous=OFF, then synced. \
         kernel-buffered runs SQLite's default unix VFS (the kernel's page cache); wbcache runs the wbcache VFS over \
         the engine's Cache, which the streaming writer shares",
        p.runtime_s,
        match job.branches() {
            1 => "1 branch".to_string(),
            n => format!("{} branches", fmt_count(n)),
        },
        fmt_count(job.tellers()),
        fmt_count(accounts),
        fmt_size(p.sqlite_data_bytes)
    )
}

impl Workload for Sqlite {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(SqliteVariant::ALL.into_iter().map(SqliteVariant::group).collect()),
            Some(variant) => Some(vec![SqliteVariant::parse(variant)?.group()]),
        }
    }

    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&SQLITE_ENGINES)
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let v = group.shape::<SqliteVariant>();
        let journal = match v.journal {
            Journal::Wal => "journal_mode=WAL",
            Journal::Delete => "journal_mode=DELETE",
        };
        if v.streaming {
            format!(
                "{journal}, next to the streaming writer (a {} file written in 1 MiB writes over and over \
                 until the runtime ends, then fsync; the transactions starting once it has written {})",
                fmt_size(sqlite_stream_len(p)),
                fmt_size(sqlite_head_start(p))
            )
        } else {
            format!("{journal}, the transactions alone")
        }
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let v = group.shape::<SqliteVariant>();
        let (db, side_files) = sqlite_db(place, name, p.sqlite_data_bytes);
        // On a device there is no file system for SQLite: the job says
        // so, and no writer runs.
        let streaming = v.streaming && place.device.is_none();
        let head_start = if streaming { sqlite_head_start(p) } else { 0 };
        let sq = SqliteJob { journal: v.journal, accounts: sqlite_accounts(p), head_start };
        let txn = JobSpec::new(engine, db, Pattern::own(&sq)).seeded(60).with_more_targets(side_files);
        let mut jobs = vec![txn.with_role(TRANSACTIONS).stopping_the_others()];
        if streaming {
            let len = sqlite_stream_len(p);
            // Round and round the file until the runtime ends, so the
            // transactions run beside the stream for all of it (one pass
            // takes well under a second on a fast disk); then fsync, as
            // hot-set's write-stream.
            let pat = Pattern::Seq { write: true, bs: SQLITE_STREAM_BS, total: None };
            let streamer = JobSpec::new(engine, place.fresh(name, 0, len), pat).with_final_fsync().seeded(61);
            jobs.push(streamer.with_role(STREAMER).stopping_the_others());
        }
        Jobs { jobs, deadline_s: p.runtime_s, pipelined: false }
    }

    /// The database's load, at 10 MB/s (well below what a disk takes).
    fn timeout_allowance_s(&self, spec: &Spec) -> f64 {
        spec.jobs.iter().filter(|j| j.pattern.own_as::<SqliteJob>().is_some()).map(|j| j.target.len as f64 / 10e6).sum()
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        run_transactions(ctx, &ctx.own_pattern()?)
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        vec![sqlite_row(group, engine, jobs, o)]
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<SqliteFigures>()
    }

    /// The transactions per second.
    fn primary_figure(&self, row: &ResultRow) -> Option<f64> {
        row.us_per_call.or(sqlite_figures(row).tps).or(row.throughput_mb_s)
    }

    /// No bytes of its own to chart: its figures are transactions.
    fn charts_throughput(&self, _row: &ResultRow) -> bool {
        false
    }

    fn latency_of(&self) -> &'static str {
        "transaction"
    }

    fn shares_the_disk(&self) -> bool {
        true
    }

    /// The transactions per second, the commit's p99, the writer's MB/s.
    fn summary(&self, rows: &[ResultRow]) -> String {
        let Some(r) = rows.last() else { return crate::report::summary(rows) };
        let own = sqlite_figures(r);
        let Some(tps) = own.tps else { return crate::report::summary(rows) };
        let mut s = format!("{tps:.0} TPS");
        if let Some(p99) = own.commit_us_p99 {
            s.push_str(&format!(", commit p99 {:.2} ms", p99 / 1e3));
        }
        if let Some(w) = own.stream_mb_s {
            s.push_str(&format!(", stream {w:.1} MB/s"));
        }
        if let Some(db) = own.db_bytes {
            s.push_str(&format!(" ({} database)", fmt_size(db)));
        }
        s
    }

    /// Each variant named, also when it runs alone.
    fn about(&self, groups: &[&Group], p: &Params) -> String {
        format!("{}. Variants: {}", sqlite_about(p), variants_named(groups, p))
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        sqlite_table(self.name(), about, rows)
    }
}

/// Runs `sqlite`'s transactions job: the database's load (before the
/// common start, untimed), then, once the streaming writer (if any) has
/// written `head_start` bytes, pgbench's TPC-B-like transactions one after
/// another until the deadline, or until the writer ends (at least one).
fn run_transactions(ctx: &JobContext<'_>, sq: &SqliteJob) -> io::Result<JobRaw> {
    let (cancel, stop) = (ctx.cancel, ctx.stop);
    let db = ctx.start_together(db::Db::create(ctx.sys, &ctx.job.target.path, sq))?;
    let streamer = ctx.spec.jobs.iter().position(|j| j.role.as_deref() == Some(STREAMER));
    if let (Some(i), true) = (streamer, sq.head_start > 0) {
        // The writer goes first; the wait is bounded by the runtime.
        let until = Instant::now() + ctx.deadline_after();
        while ctx.counters[i].load(Relaxed) < sq.head_start
            && !cancel.load(Relaxed)
            && !stop.load(Relaxed)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    ctx.check_cancelled()?;
    let started = Instant::now();
    let deadline = started + ctx.deadline_after();
    let mut done = || cancel.load(Relaxed) || stop.load(Relaxed) || Instant::now() >= deadline;
    let run = db.run(ctx.job.seed, &mut done)?;
    let io_end_s = started.elapsed().as_secs_f64();
    ctx.io_done();
    let sqlite = SqliteResult { db_bytes: db.db_bytes, load_s: db.load_s, commit: run.commit.to_data() };
    drop(db);
    let mut measured = Measured { ops: run.transactions, hist: run.txn, ..Measured::default() };
    measured.set_own(&sqlite);
    Ok(JobRaw { measured, io_end_s, end_s: io_end_s })
}

/// `sqlite`'s row: the transactions' figures (per second, their latency,
/// the COMMIT's alone), the database's size, the streaming writer's MB/s
/// and the process's peak RSS.
fn sqlite_row(group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> ResultRow {
    let (txn, streamer) = (of_role(jobs, TRANSACTIONS), of_role(jobs, STREAMER));
    let mut row = aggregate(group, engine, group.variant.clone(), &txn, o);
    // No bytes of its own: the MB/s columns are the writer's (stream_mb_s).
    row.throughput_mb_s = None;
    row.bytes = None;
    row.per_second_mb_s = None;
    row.rate_points = Vec::new();
    let mut figures = SqliteFigures { peak_rss_bytes: o.peak_rss_bytes, ..SqliteFigures::default() };
    if let Some(t) = txn.first() {
        figures.tps = (t.io_end_s > 0.0).then(|| round3(t.ops as f64 / t.io_end_s));
        if let Some(sq) = t.own::<SqliteResult>() {
            let commit = Histogram::from_data(&sq.commit).percentiles();
            figures.commit_us_p50 = commit.map(|p| p.p50);
            figures.commit_us_p99 = commit.map(|p| p.p99);
            figures.commit_us_max = commit.map(|p| p.max);
            figures.db_bytes = Some(sq.db_bytes);
        }
    }
    if let Some(w) = streamer.first() {
        figures.stream_mb_s = (w.end_s > 0.0).then(|| round3(w.bytes as f64 / w.end_s / 1e6));
    }
    row.set_own(&figures);
    row
}

/// `sqlite`'s own figures of its rows. Its `ops` are the transactions,
/// `runtime_s` the time they ran, and `lat_us` each whole transaction's
/// latency (BEGIN to COMMIT's return).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SqliteFigures {
    /// Transactions per second (transactions ÷ the time they ran).
    pub tps: Option<f64>,
    /// The COMMIT statement's latency alone, in µs: median, 99th
    /// percentile, maximum.
    pub commit_us_p50: Option<f64>,
    pub commit_us_p99: Option<f64>,
    pub commit_us_max: Option<f64>,
    /// Streaming rows: the streaming writer's bytes over the time it
    /// wrote, in MB/s.
    pub stream_mb_s: Option<f64>,
    /// The database file's size after the load, in bytes.
    pub db_bytes: Option<u64>,
    /// The worker process's peak resident set size (`VmHWM`, the load
    /// included), in bytes. For wbcache it includes the cache's memory;
    /// the kernel's page cache is not in it.
    pub peak_rss_bytes: Option<u64>,
}

/// A row's [`SqliteFigures`] (all `None` on another workload's row).
fn sqlite_figures(row: &ResultRow) -> SqliteFigures {
    row.own()
}

/// The order of `sqlite`'s rows in its table: per variant (wal-idle,
/// wal-streaming, delete-idle, delete-streaming), kernel-buffered then
/// wbcache.
fn sqlite_rank(r: &ResultRow) -> (usize, usize) {
    let variant = SqliteVariant::ALL.iter().position(|v| Some(v.name()) == r.variant.as_deref()).unwrap_or(usize::MAX);
    let engine = EngineKind::ALL.iter().position(|e| e.name() == r.engine).unwrap_or(usize::MAX);
    (variant, engine)
}

/// What the `sqlite` table's columns mean (printed above it).
pub const SQLITE_COLUMNS: &str = "TPS: transactions per second. vs idle: TPS ÷ the same engine's idle row of the \
     same journal mode. commit: the COMMIT statement's latency alone (where SQLite writes and syncs the journal or \
     the WAL, and in DELETE mode the database); txn p99: the whole transaction's, BEGIN to COMMIT's return. stream \
     MB/s: the streaming writer's bytes over its time, its final fsync included. db: the database's size after the load. peak RSS: \
     the worker process's peak resident set size, the load included (wbcache's cache is in it; the kernel's page \
     cache is not: its memory cgroup bounds that). TPS vs kernel-buffered: TPS ÷ kernel-buffered's in the same \
     variant.";

/// The `sqlite` table: per variant and engine, transactions per second
/// (and against the idle row and kernel-buffered), the commit latency,
/// the writer's MB/s, the database's size and the memory used.
pub fn sqlite_table(title: &str, about: &str, rows: &[&ResultRow]) -> String {
    let mut rows: Vec<&ResultRow> = rows.to_vec();
    rows.sort_by_key(|r| sqlite_rank(r));
    let head = [
        "variant",
        "engine",
        "TPS",
        "vs idle",
        "commit p50 ms",
        "commit p99 ms",
        "commit max ms",
        "txn p99 ms",
        "stream MB/s",
        "db MiB",
        "peak RSS MiB",
        "peak dirty+wb MiB",
        "TPS vs kernel-buffered",
    ];
    let mut table = RowTable::new(&[&heading(title), about, SQLITE_COLUMNS], &head, &rows);
    let tps_of = |variant: &str, engine: &str| figure_of(&rows, variant, engine, |b| sqlite_figures(b).tps);
    for r in &rows {
        let tps = sqlite_figures(r).tps.filter(|_| r.ok());
        let variant = r.variant.as_deref().unwrap_or("");
        let idle =
            SqliteVariant::parse(variant).filter(|v| v.streaming).map(|v| SqliteVariant { streaming: false, ..v });
        let mut c = table.cells(r);
        c.variant().engine().figure(tps, fmt_num);
        c.times(ratio_of(tps, idle.and_then(|v| tps_of(v.name(), &r.engine))));
        let own = sqlite_figures(r);
        for v in [own.commit_us_p50, own.commit_us_p99, own.commit_us_max, r.lat_us.map(|p| p.p99)] {
            c.figure(v, ms);
        }
        c.figure(own.stream_mb_s, fmt_num);
        for v in [own.db_bytes, own.peak_rss_bytes, r.peak_dirty_bytes] {
            c.figure(v, mib);
        }
        c.times(ratio_of(tps, tps_of(variant, "kernel-buffered")));
        table.push(c);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::measure::Percentiles;
    use crate::report::failed_row;
    use crate::report::test_support::{job, ok_outcome, own, row_json, ADVICE_NULLS, PROGRAM_NULLS, READERS_NULLS};
    use crate::workloads::{build_spec, groups_for, info, rows_from, test_params as params, variants_of};

    /// sqlite: four variants on kernel-buffered and wbcache only,
    /// selectable one by one.
    #[test]
    fn sqlite_groups_and_selections() {
        let groups = groups_for("sqlite", None).unwrap();
        assert_eq!(variants_of(&groups), ["wal-idle", "wal-streaming", "delete-idle", "delete-streaming"]);
        for g in &groups {
            let on: Vec<EngineKind> = EngineKind::ALL.into_iter().filter(|e| g.runs_on(*e)).collect();
            assert_eq!(on, [EngineKind::KernelBuffered, EngineKind::Wbcache]);
            assert_eq!(g.only_on(), Some(&SQLITE_ENGINES[..]));
            assert!(!g.needs_data());
        }
        assert_eq!(groups[1].slug(), "sqlite-wal-streaming");
        assert_eq!(groups[1].label(), "sqlite wal-streaming");
        assert_eq!(variants_of(&groups_for("sqlite/delete-idle", None).unwrap()), ["delete-idle"]);
        for bad in ["sqlite/", "sqlite/wal", "sqlite/wal-idle/x", "sqlite/WAL-idle"] {
            assert!(groups_for(bad, None).is_none(), "{bad}");
        }
        let w = info("sqlite").unwrap();
        assert_eq!(w.source, Some("pgbench's built-in TPC-B-like script"));
        for text in [w.about, w.models, w.source.unwrap()] {
            for word in ["issue", "seed", "slot"] {
                assert!(!text.contains(word), "{word} in {text}");
            }
        }
    }

    /// The transactions over a new database in the directory (its side
    /// files removed with it), sized from the memory; the streaming
    /// variants add a writer of the same engine, --size to a new file in
    /// 1 MiB writes, then fsync.
    #[test]
    fn sqlite_specs() {
        let dir = std::env::temp_dir();
        let place = Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: 64 << 30 };
        let p = params(2.0);
        let spec = |variant: &str, engine: EngineKind, place: &Place| {
            let g = groups_for(&format!("sqlite/{variant}"), None).unwrap().remove(0);
            build_spec(&g, engine, &p, place, false)
        };
        let roles = |s: &Spec| s.jobs.iter().map(|j| j.role.clone().unwrap()).collect::<Vec<_>>();
        let idle = spec("delete-idle", EngineKind::KernelBuffered, &place);
        assert_eq!(roles(&idle), [TRANSACTIONS]);
        assert_eq!((idle.deadline_s, idle.pipelined), (2.0, false));
        let txn = &idle.jobs[0];
        let Some(sq) = txn.pattern.own_as::<SqliteJob>() else { panic!("{:?}", txn.pattern) };
        assert_eq!((sq.journal, sq.head_start), (Journal::Delete, 0));
        assert_eq!(sq.accounts, 160 * MIB / SQLITE_ACCOUNT_BYTES);
        assert_eq!((sq.branches(), sq.tellers()), (18, 180));
        assert_eq!(txn.target.path, dir.join("sqlite-delete-idle-kernel-buffered.db"));
        assert!(txn.target.create);
        let removed: Vec<_> =
            txn.targets().map(|t| t.path.file_name().unwrap().to_str().unwrap().to_string()).collect();
        assert_eq!(
            removed,
            [
                "sqlite-delete-idle-kernel-buffered.db",
                "sqlite-delete-idle-kernel-buffered.db-wal",
                "sqlite-delete-idle-kernel-buffered.db-shm",
                "sqlite-delete-idle-kernel-buffered.db-journal"
            ]
        );
        assert!(txn.targets().all(|t| t.create));

        let streaming = spec("wal-streaming", EngineKind::Wbcache, &place);
        assert_eq!(roles(&streaming), [TRANSACTIONS, STREAMER]);
        let (txn, writer) = (&streaming.jobs[0], &streaming.jobs[1]);
        let Some(sq) = txn.pattern.own_as::<SqliteJob>() else { panic!("{:?}", txn.pattern) };
        assert_eq!((sq.journal, sq.head_start), (Journal::Wal, 32 * MIB));
        assert_eq!((txn.engine, writer.engine), (EngineKind::Wbcache, EngineKind::Wbcache));
        // Round and round its file until the runtime ends.
        assert!(matches!(writer.pattern, Pattern::Seq { write: true, bs, total: None } if bs == MIB));
        assert!(writer.fsync_at_end && writer.target.create);
        assert_eq!(writer.target.path.parent(), Some(dir.as_path()));
        assert_ne!(writer.target.path, txn.target.path);

        // On a device: the transactions only, which report that SQLite
        // needs a file system; no writer touches the device.
        let dev = Place { dir: None, device: Some("/dev/x".into()), device_size: 1 << 30, free_bytes: 1 << 30 };
        let s = spec("wal-streaming", EngineKind::KernelBuffered, &dev);
        assert_eq!(roles(&s), [TRANSACTIONS]);
        assert!(!s.jobs[0].target.create && s.jobs[0].targets().count() == 1);
    }

    fn sqlite_group(variant: &str) -> Group {
        crate::workloads::groups_for(&format!("sqlite/{variant}"), None).unwrap().remove(0)
    }

    /// A sqlite row: transactions per second over the time they ran, the
    /// COMMIT's percentiles, the writer's MB/s (its fsync included), the
    /// database's size and the peak RSS; no MB/s or bytes of its own.
    #[test]
    fn sqlite_rows() {
        let mut txn = job(TRANSACTIONS, 0, 2.0);
        txn.ops = 1000;
        let mut commit = Histogram::default();
        for us in [100u64, 200, 300, 5_000] {
            commit.record(us * 1000);
        }
        txn.own = own(&SqliteResult { db_bytes: 320 << 20, load_s: 3.0, commit: commit.to_data() });
        let mut writer = job(STREAMER, 1_000_000_000, 0.5);
        writer.end_s = 1.0;
        let mut o = ok_outcome(vec![txn, writer], None);
        o.peak_rss_bytes = Some(300 << 20);
        let rows = rows_from(&sqlite_group("wal-streaming"), EngineKind::Wbcache, &o);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.workload.as_str(), r.variant.as_deref()), ("sqlite", Some("wal-streaming")));
        assert_eq!((sqlite_figures(r).tps, r.ops, r.runtime_s), (Some(500.0), Some(1000), Some(2.0)));
        assert_eq!(sqlite_figures(r).commit_us_max, Some(5000.0));
        let (p50, p99) = (sqlite_figures(r).commit_us_p50.unwrap(), sqlite_figures(r).commit_us_p99.unwrap());
        assert!((190.0..=210.0).contains(&p50) && p50 <= p99 && p99 <= 5000.0, "{r:?}");
        assert_eq!(sqlite_figures(r).stream_mb_s, Some(1000.0), "the writer's bytes over its time, fsync included");
        assert_eq!((sqlite_figures(r).db_bytes, sqlite_figures(r).peak_rss_bytes), (Some(320 << 20), Some(300 << 20)));
        assert_eq!((r.throughput_mb_s, r.bytes), (None, None));
        assert!(r.lat_us.is_some(), "each transaction's latency");
        let text = row_json(r);
        let (p50, p99) = (serde_json::to_string(&p50).unwrap(), serde_json::to_string(&p99).unwrap());
        assert!(
            text.ends_with(&format!(
                ",\"tps\":500.0,\"commit_us_p50\":{p50},\"commit_us_p99\":{p99},\"commit_us_max\":5000.0,\
                 \"stream_mb_s\":1000.0,\"db_bytes\":335544320,\"peak_rss_bytes\":314572800,{ADVICE_NULLS},{PROGRAM_NULLS},{READERS_NULLS}}}"
            )),
            "{text}"
        );
        // Idle: no writer, no stream figure.
        let idle = ok_outcome(vec![o.jobs[0].clone()], None);
        let r = &rows_from(&sqlite_group("delete-idle"), EngineKind::KernelBuffered, &idle)[0];
        assert_eq!(
            (sqlite_figures(r).tps, sqlite_figures(r).stream_mb_s, sqlite_figures(r).peak_rss_bytes),
            (Some(500.0), None, None)
        );
    }

    fn sqlite_row(variant: &str, engine: &str, tps: f64) -> ResultRow {
        let mut row = ResultRow::empty(
            &sqlite_group(variant),
            EngineKind::parse(engine).unwrap(),
            Some(variant.into()),
            Status::Ok,
            None,
        );
        row.update_own(|f: &mut SqliteFigures| f.tps = Some(tps));
        row.update_own(|f: &mut SqliteFigures| f.commit_us_p50 = Some(150.0));
        row.update_own(|f: &mut SqliteFigures| f.commit_us_p99 = Some(2_500.0));
        row.update_own(|f: &mut SqliteFigures| f.commit_us_max = Some(40_000.0));
        row.lat_us = Some(Percentiles { p50: 200.0, p99: 3_000.0, p999: 9_000.0, max: 41_000.0 });
        row.update_own(|f: &mut SqliteFigures| f.db_bytes = Some(320 << 20));
        row.update_own(|f: &mut SqliteFigures| f.peak_rss_bytes = Some(8 << 20));
        row.peak_dirty_bytes = Some(1 << 20);
        if variant.ends_with("-streaming") {
            row.update_own(|f: &mut SqliteFigures| f.stream_mb_s = Some(900.0));
        }
        row
    }

    /// The table: per variant, kernel-buffered then wbcache; TPS against
    /// the idle row and against kernel-buffered.
    #[test]
    fn sqlite_table_compares_with_idle_and_the_kernel() {
        let mut rows = vec![
            sqlite_row("delete-streaming", "wbcache", 300.0),
            sqlite_row("wal-idle", "wbcache", 4_000.0),
            sqlite_row("wal-idle", "kernel-buffered", 5_000.0),
            sqlite_row("wal-streaming", "kernel-buffered", 500.0),
            sqlite_row("wal-streaming", "wbcache", 1_000.0),
            sqlite_row("delete-idle", "wbcache", 600.0),
        ];
        rows.push(failed_row(&sqlite_group("delete-idle"), EngineKind::KernelBuffered, Status::Error, "boom".into()));
        let refs: Vec<&ResultRow> = rows.iter().collect();
        let table = sqlite_table("sqlite", "about", &refs);
        assert!(table.contains(
            "| variant | engine | TPS | vs idle | commit p50 ms | commit p99 ms | commit max ms | txn p99 ms | \
             stream MB/s | db MiB | peak RSS MiB | peak dirty+wb MiB | TPS vs kernel-buffered | status |"
        ));
        assert!(
            table.contains("| wal-idle | kernel-buffered | 5,000 | — | 0.15 | 2.50 | 40.0 | 3.00 | — | 320.0 | 8.0 | 1.0 | 1.00× | ok |"),
            "{table}"
        );
        assert!(table.contains("| wal-streaming | wbcache | 1,000 | 0.25× | 0.15 | 2.50 | 40.0 | 3.00 | 900 | 320.0 | 8.0 | 1.0 | 2.00× | ok |"));
        assert!(table.contains("| delete-streaming | wbcache | 300 | 0.50× |"), "{table}");
        assert!(table
            .contains("| delete-idle | kernel-buffered | — | — | — | — | — | — | — | — | — | — | — | error: boom |"));
        let order: Vec<&str> = table.lines().filter(|l| l.starts_with("| wal") || l.starts_with("| delete")).collect();
        assert!(order[0].starts_with("| wal-idle | kernel-buffered") && order[1].starts_with("| wal-idle | wbcache"));
        assert!(order[4].starts_with("| delete-idle | kernel-buffered") && order[6].starts_with("| delete-streaming"));
    }
}
