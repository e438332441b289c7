//! The `sqlite` workload's database: SQLite (the bundled library, one
//! connection) on the engine's VFS, a pgbench database loaded into it, and
//! pgbench's TPC-B-like transaction, timed.
//!
//! kernel-buffered opens the database with SQLite's default `unix` VFS,
//! over the kernel's page cache; wbcache registers the wbcache VFS over the
//! measurement's [`wbcache::Cache`] (the one the streaming writer shares)
//! under a name of its own, and opens the database with it.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use rusqlite::{params, Connection, OpenFlags};

use super::job::{Journal, SqliteJob, ACCOUNTS_PER_BRANCH, TELLERS_PER_BRANCH};
use crate::engines::{unsupported, System};
use crate::measure::Histogram;
use crate::sys::Rng;

/// pgbench's accounts filler: `char(84)`, blank-padded.
const FILLER_LEN: usize = 84;
/// The page size of the database.
pub const PAGE_SIZE: u64 = 4096;
/// Accounts inserted per load transaction.
const LOAD_BATCH: u64 = 100_000;

/// VFS registrations live as long as the process: each gets a name of its
/// own.
static NEXT_VFS: AtomicU64 = AtomicU64::new(0);

/// pgbench's tables (its column names; SQLite's types).
const SCHEMA: &str = "
    CREATE TABLE pgbench_branches (bid INTEGER PRIMARY KEY, bbalance INTEGER, filler TEXT);
    CREATE TABLE pgbench_tellers (tid INTEGER PRIMARY KEY, bid INTEGER, tbalance INTEGER, filler TEXT);
    CREATE TABLE pgbench_accounts (aid INTEGER PRIMARY KEY, bid INTEGER, abalance INTEGER, filler TEXT);
    CREATE TABLE pgbench_history (tid INTEGER, bid INTEGER, aid INTEGER, delta INTEGER, mtime TEXT, filler TEXT);
";

fn sql(e: rusqlite::Error) -> io::Error {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(msg)) => io::Error::other(format!("SQLite: {msg} ({:?})", f.code)),
        e => io::Error::other(format!("SQLite: {e}")),
    }
}

/// A loaded pgbench database, open in the journal mode measured.
pub struct Db {
    conn: Connection,
    /// The database's size after the load: its pages × the page size.
    pub db_bytes: u64,
    /// How long the load took, in seconds.
    pub load_s: f64,
    accounts: u64,
    branches: u64,
    tellers: u64,
}

/// What [`Db::run`] measured.
pub struct Run {
    pub transactions: u64,
    /// Each whole transaction, BEGIN to COMMIT's return.
    pub txn: Histogram,
    /// Each COMMIT statement alone.
    pub commit: Histogram,
}

impl Db {
    /// Creates the database at `path` (removing what a previous run left)
    /// through the engine's VFS, loads it, makes it durable and switches it
    /// to the journal mode measured, with `synchronous=FULL`.
    pub fn create(sys: &System, path: &Path, job: &SqliteJob) -> io::Result<Db> {
        if crate::sys::is_block_device(path) {
            return Err(unsupported("SQLite needs a file system: a --device run has none".into()));
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            match std::fs::remove_file(&name) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let conn = open(sys, path)?;
        let started = Instant::now();
        let mut db = Db {
            conn,
            db_bytes: 0,
            load_s: 0.0,
            accounts: job.accounts.max(1),
            branches: job.branches(),
            tellers: job.tellers(),
        };
        db.load()?;
        // The load's data on the disk before the timed part, so that the
        // first commits do not write it back.
        match sys.cache() {
            Some(cache) => cache.sync_all()?,
            None => std::fs::File::open(path)?.sync_all()?,
        }
        db.load_s = started.elapsed().as_secs_f64();
        let mode: String = db
            .conn
            .query_row(&format!("PRAGMA journal_mode={}", job.journal.pragma()), [], |r| r.get(0))
            .map_err(sql)?;
        if !mode.eq_ignore_ascii_case(job.journal.pragma()) {
            let why = match job.journal {
                Journal::Wal => " (the VFS has no shared memory for the WAL index?)",
                Journal::Delete => "",
            };
            return Err(io::Error::other(format!(
                "SQLite kept journal_mode={mode} when asked for {}{why}",
                job.journal.pragma()
            )));
        }
        db.conn.execute_batch("PRAGMA synchronous=FULL;").map_err(sql)?;
        Ok(db)
    }

    /// pgbench's initialization: branches, tellers and accounts with zero
    /// balances (an account's branch is `(aid - 1) / 100,000 + 1`), in
    /// large transactions, with no journal and no syncs.
    fn load(&mut self) -> io::Result<()> {
        let conn = &self.conn;
        conn.execute_batch(&format!(
            "PRAGMA page_size={PAGE_SIZE}; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; {SCHEMA}"
        ))
        .map_err(sql)?;
        conn.execute_batch("BEGIN").map_err(sql)?;
        {
            let mut branch =
                conn.prepare("INSERT INTO pgbench_branches (bid, bbalance) VALUES (?1, 0)").map_err(sql)?;
            for bid in 1..=self.branches {
                branch.execute([bid]).map_err(sql)?;
            }
            let mut teller =
                conn.prepare("INSERT INTO pgbench_tellers (tid, bid, tbalance) VALUES (?1, ?2, 0)").map_err(sql)?;
            for tid in 1..=self.tellers {
                teller.execute([tid, (tid - 1) / TELLERS_PER_BRANCH + 1]).map_err(sql)?;
            }
        }
        conn.execute_batch("COMMIT").map_err(sql)?;
        let mut account = conn
            .prepare("INSERT INTO pgbench_accounts (aid, bid, abalance, filler) VALUES (?1, ?2, 0, ?3)")
            .map_err(sql)?;
        let filler = " ".repeat(FILLER_LEN);
        let mut aid = 1;
        while aid <= self.accounts {
            conn.execute_batch("BEGIN").map_err(sql)?;
            let last = (aid + LOAD_BATCH - 1).min(self.accounts);
            for a in aid..=last {
                account.execute(params![a, (a - 1) / ACCOUNTS_PER_BRANCH + 1, filler]).map_err(sql)?;
            }
            conn.execute_batch("COMMIT").map_err(sql)?;
            aid = last + 1;
        }
        drop(account);
        let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).map_err(sql)?;
        let page_size: u64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).map_err(sql)?;
        self.db_bytes = pages * page_size;
        Ok(())
    }

    /// pgbench's TPC-B-like transaction, one after another, until `done`
    /// (asked after each, so at least one runs): random account, teller,
    /// branch and delta (-5000 to 5000) from `seed`, as pgbench draws them.
    pub fn run(&self, seed: u64, done: &mut dyn FnMut() -> bool) -> io::Result<Run> {
        let conn = &self.conn;
        let prepare = |s: &str| conn.prepare(s).map_err(sql);
        let mut begin = prepare("BEGIN")?;
        let mut update_account = prepare("UPDATE pgbench_accounts SET abalance = abalance + ?1 WHERE aid = ?2")?;
        let mut select_account = prepare("SELECT abalance FROM pgbench_accounts WHERE aid = ?1")?;
        let mut update_teller = prepare("UPDATE pgbench_tellers SET tbalance = tbalance + ?1 WHERE tid = ?2")?;
        let mut update_branch = prepare("UPDATE pgbench_branches SET bbalance = bbalance + ?1 WHERE bid = ?2")?;
        let mut insert_history = prepare(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (?1, ?2, ?3, ?4, CURRENT_TIMESTAMP)",
        )?;
        let mut commit = prepare("COMMIT")?;
        let mut rng = Rng::new(seed);
        let mut run = Run { transactions: 0, txn: Histogram::default(), commit: Histogram::default() };
        loop {
            let aid = 1 + rng.below(self.accounts) as i64;
            let bid = 1 + rng.below(self.branches) as i64;
            let tid = 1 + rng.below(self.tellers) as i64;
            let delta = rng.below(10_001) as i64 - 5_000;
            let t = Instant::now();
            let mut body = || -> rusqlite::Result<()> {
                begin.execute([])?;
                update_account.execute([delta, aid])?;
                let _balance: i64 = select_account.query_row([aid], |r| r.get(0))?;
                update_teller.execute([delta, tid])?;
                update_branch.execute([delta, bid])?;
                insert_history.execute([tid, bid, aid, delta])?;
                Ok(())
            };
            if let Err(e) = body() {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(sql(e));
            }
            let c = Instant::now();
            commit.execute([]).map_err(sql)?;
            let end = Instant::now();
            run.commit.record((end - c).as_nanos() as u64);
            run.txn.record((end - t).as_nanos() as u64);
            run.transactions += 1;
            if done() {
                return Ok(run);
            }
        }
    }
}

/// Opens (creating) the database through the engine's VFS.
fn open(sys: &System, path: &Path) -> io::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let vfs = match sys.cache() {
        None => "unix".to_string(),
        Some(cache) => {
            let name = format!("wbcache-bench-{}", NEXT_VFS.fetch_add(1, Relaxed));
            wbcache_sqlite::register(cache.clone(), &name, false)
                .map_err(|e| io::Error::new(e.kind(), format!("registering the wbcache SQLite VFS: {e}")))?;
            name
        }
    };
    Connection::open_with_flags_and_vfs(path, flags, vfs.as_str()).map_err(sql)
}
