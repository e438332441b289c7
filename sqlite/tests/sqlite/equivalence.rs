//! Equivalence: one seeded random SQL workload run statement by statement
//! against two databases, one on the wbcache VFS and one on SQLite's own
//! unix VFS, comparing every result (rows, change counts, errors, the
//! transaction state) as it goes.
//!
//! The workload: single and multi-row inserts, upserts, range updates and
//! deletes, blobs large enough for overflow pages, range reads with ORDER
//! BY and aggregates, transactions (BEGIN / IMMEDIATE / EXCLUSIVE) ending
//! in COMMIT or ROLLBACK, savepoints, autocommit stretches, VACUUM (some
//! with a new page size), checkpoints, closing and reopening every
//! connection, and switches of journal mode (DELETE, TRUNCATE, PERSIST,
//! MEMORY, WAL, OFF) and of `synchronous` (mostly OFF and NORMAL,
//! stretches of FULL). A second connection to each database reads now and
//! then, also inside the first one's write transactions (and writes
//! between them); in WAL mode it sometimes holds a read transaction across
//! the first connection's commits. At the end both pass
//! `PRAGMA integrity_check`, and once every wbcache connection is closed,
//! the wbcache database read with the plain unix VFS dumps the same as the
//! other.
//!
//! The million operations are four seeds' worth (`equivalence_part_*`).
//! `cache_pressure_equivalence` runs 100,000 over a table of 10-13 MiB
//! with an 8 MiB cache (2 MiB dirty limit), so eviction and writeback
//! happen all along; it is named to start first, as it takes longest.
//!
//! Two answers may differ without a fault (see [`Run::ask`]): rusqlite's
//! SQLite shares one page-cache pool among all connections, so when a
//! write transaction spills is not the same on both sides.
//!
//! `WBCACHE_SQLITE_SEED=<n>` sets the base seed (part `i` runs seed
//! `n + i`, the small-cache test `n + 100`); a mismatch prints it with the
//! operation's index, its SQL and the operations before it.

use crate::common;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cell, Rng};
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection, OpenFlags};
use wbcache::{Cache, Config};

const SEED_ENV: &str = "WBCACHE_SQLITE_SEED";
const DEFAULT_SEED: u64 = 20_240_611;

/// A statement's result: its rows and `changes()`, or the error.
type Outcome = Result<(Vec<Vec<Cell>>, u64), String>;

/// The shape of one run.
struct Profile {
    /// Names the VFS and the scratch directory.
    name: &'static str,
    cache_options: &'static str,
    /// Statements to run (each on both databases).
    ops: u64,
    /// Row ids of `kv` are drawn from `0..key_space`.
    key_space: u64,
    /// Rows inserted (in transactions) before the random workload.
    prefill: u64,
    /// Blob sizes: mostly up to `blob_small`, some up to `blob_large`.
    blob_small: u64,
    blob_large: u64,
    /// Percent of blobs drawn from the large range.
    large_percent: u64,
    /// `PRAGMA cache_size` (negative: KiB).
    sqlite_cache_kib: i64,
    /// Width of the id range an aggregate scans; the `k` range of the
    /// other aggregate is a sixtieth of it.
    scan: u64,
    /// Whole-table aggregates (each reads the table through).
    full_scans: bool,
    /// The least size the table `kv` must have at the end, in bytes.
    min_kv_bytes: u64,
    /// Page sizes VACUUM may switch to.
    page_sizes: &'static [u32],
}

const MILLION_PARTS: u64 = 4;

const BIG: Profile = Profile {
    name: "eq",
    cache_options: "capacity=64M",
    ops: 1_000_000 / MILLION_PARTS,
    key_space: 16_384,
    prefill: 4_000,
    blob_small: 96,
    blob_large: 6_000,
    large_percent: 6,
    sqlite_cache_kib: 1_024,
    scan: 1_500,
    full_scans: true,
    min_kv_bytes: 0,
    page_sizes: &[1024, 2048, 4096, 8192, 16384, 65536],
};

const SMALL_CACHE: Profile = Profile {
    name: "eq-small",
    cache_options: "capacity=8M,dirty_limit=2M,folio_max=256K",
    ops: 100_000,
    key_space: 12_000,
    prefill: 10_000,
    blob_small: 2_000,
    blob_large: 6_000,
    large_percent: 40,
    sqlite_cache_kib: 2_048,
    // Every page this reads beyond the cache is a disk read (the unix VFS
    // reads from the kernel's page cache): light reads keep it fast.
    scan: 150,
    full_scans: false,
    // The table alone is larger than the cache.
    min_kv_bytes: 8 << 20,
    // Large pages multiply the bytes every miss reads and every commit
    // writes back.
    page_sizes: &[1024, 2048, 4096, 8192],
};

const SCHEMA: &str = "
    CREATE TABLE kv(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT, n REAL, b BLOB);
    CREATE INDEX kv_k ON kv(k);
    CREATE INDEX kv_vn ON kv(v, n);
    CREATE TABLE tags(name TEXT PRIMARY KEY, cnt INTEGER NOT NULL, note TEXT) WITHOUT ROWID;
    CREATE TABLE log(seq INTEGER PRIMARY KEY AUTOINCREMENT, op INTEGER, payload BLOB);
";

const JOURNAL_MODES: [&str; 6] = ["DELETE", "TRUNCATE", "PERSIST", "MEMORY", "WAL", "OFF"];

const WORDS: [&str; 12] =
    ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Main,
    Second,
}

/// One database: its main connection and, now and then, a second one.
struct Side {
    path: PathBuf,
    /// `None`: the default (unix) VFS.
    vfs: Option<String>,
    main: Option<Connection>,
    second: Option<Connection>,
}

impl Side {
    fn new(path: PathBuf, vfs: Option<String>) -> Side {
        let main = open(&path, vfs.as_deref());
        Side { path, vfs, main: Some(main), second: None }
    }

    fn conn(&mut self, who: Who) -> &Connection {
        match who {
            Who::Main => self.main.as_ref().expect("main connection open"),
            Who::Second => {
                if self.second.is_none() {
                    self.second = Some(open(&self.path, self.vfs.as_deref()));
                }
                self.second.as_ref().unwrap()
            }
        }
    }

    fn main(&self) -> &Connection {
        self.main.as_ref().expect("main connection open")
    }
}

fn open(path: &Path, vfs: Option<&str>) -> Connection {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match vfs {
        Some(name) => Connection::open_with_flags_and_vfs(path, flags, name),
        None => Connection::open_with_flags(path, flags),
    }
    .unwrap_or_else(|e| panic!("open {} on {vfs:?}: {e}", path.display()));
    // BUSY is a result like any other, compared at once, never waited out.
    conn.busy_timeout(Duration::ZERO).unwrap();
    conn.set_prepared_statement_cache_capacity(64);
    conn
}

/// Runs one statement to completion.
fn run(conn: &Connection, sql: &str, params: &[Value]) -> Outcome {
    let e = |e: rusqlite::Error| format!("{e:?}");
    let mut stmt = conn.prepare_cached(sql).map_err(e)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query(params_from_iter(params.iter())).map_err(e)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(e)? {
        out.push(common::cells(row, columns).map_err(e)?);
    }
    drop(rows);
    Ok((out, conn.changes()))
}

fn show_param(v: &Value) -> String {
    match v {
        Value::Blob(b) => format!("blob[{}]", b.len()),
        other => format!("{other:?}"),
    }
}

fn show_params(params: &[Value]) -> String {
    params.iter().map(show_param).collect::<Vec<_>>().join(", ")
}

fn show_value(v: &Cell) -> String {
    match v {
        Cell::Blob(b) => format!("blob[{}]", b.len()),
        Cell::Text(t) if t.len() > 40 => format!("{:?}...", String::from_utf8_lossy(&t[..40])),
        Cell::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
        other => format!("{other:?}"),
    }
}

fn show_outcome(o: &Outcome) -> String {
    match o {
        Err(e) => format!("error {e}"),
        Ok((rows, changes)) => {
            let shown: Vec<String> = rows
                .iter()
                .take(8)
                .map(|r| format!("({})", r.iter().map(show_value).collect::<Vec<_>>().join(", ")))
                .collect();
            let more = if rows.len() > 8 { format!(" ... {} rows in all", rows.len()) } else { String::new() };
            format!("changes {changes}, rows [{}]{more}", shown.join(" "))
        }
    }
}

/// The first differing row of two outcomes, when both have rows.
fn outcome_difference(a: &Outcome, b: &Outcome) -> String {
    match (a, b) {
        (Ok((ra, ca)), Ok((rb, cb))) => {
            if ca != cb {
                return format!("changes {ca} against {cb}");
            }
            match ra.iter().zip(rb).position(|(x, y)| x != y) {
                Some(i) => {
                    let show = |r: &[Cell]| r.iter().map(show_value).collect::<Vec<_>>().join(", ");
                    let column = ra[i].iter().zip(&rb[i]).position(|(x, y)| x != y);
                    format!("row {i}, column {column:?}: ({})\n  against ({})", show(&ra[i]), show(&rb[i]))
                }
                None => format!("{} rows against {}", ra.len(), rb.len()),
            }
        }
        _ => "an error on one side or both".into(),
    }
}

fn text(o: &Outcome) -> String {
    match o {
        Ok((rows, _)) => match rows.first().and_then(|r| r.first()) {
            Some(cell) => cell.as_string(),
            None => "no rows".into(),
        },
        Err(e) => format!("error {e}"),
    }
}

/// A statement run, for the failure message.
#[derive(Clone)]
struct Logged {
    index: u64,
    who: Who,
    sql: String,
    params: Vec<Value>,
}

impl Logged {
    fn show(&self) -> String {
        format!("#{} {:?}: {} [{}]", self.index, self.who, self.sql, show_params(&self.params))
    }
}

struct Run {
    base_seed: u64,
    seed: u64,
    profile: &'static Profile,
    rng: Rng,
    w: Side,
    u: Side,
    /// Statements run so far (the index a failure names).
    ops: u64,
    recent: VecDeque<Logged>,
    /// The last statements other than plain reads and writes of the main
    /// connection (transactions, pragmas, the second connection's).
    control: VecDeque<Logged>,
    /// Journal mode in force (lowercase, as the pragma answers).
    mode: String,
    /// The second connections hold a read transaction (WAL only).
    snapshot: Option<Outcome>,
    savepoint: bool,
    /// `synchronous` in force.
    sync: &'static str,
    stats: Stats,
}

#[derive(Default, Debug)]
struct Stats {
    commits: u64,
    rollbacks: u64,
    vacuums: u64,
    mode_switches: u64,
    checkpoints: u64,
    snapshots: u64,
    errors: u64,
    second_ops: u64,
    spill_busy: u64,
    reopens: u64,
}

/// The lock level (0 none .. 4 exclusive) a connection's VFS reports for
/// its main database file.
fn lock_state(conn: Option<&Connection>) -> String {
    let Some(conn) = conn else { return "closed".into() };
    let mut level: std::ffi::c_int = -1;
    // SAFETY: a live connection's handle; LOCKSTATE writes one int.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_LOCKSTATE,
            (&mut level as *mut std::ffi::c_int).cast(),
        )
    };
    if rc == 0 {
        level.to_string()
    } else {
        format!("unknown (rc {rc})")
    }
}

impl Run {
    fn locks(&self) -> String {
        format!(
            "wbcache main {} second {}; unix main {} second {}",
            lock_state(self.w.main.as_ref()),
            lock_state(self.w.second.as_ref()),
            lock_state(self.u.main.as_ref()),
            lock_state(self.u.second.as_ref())
        )
    }

    fn fail(&self, message: &str) -> ! {
        panic!(
            "wbcache/unix mismatch: {message}\n  lock levels now: {}\n  seed {} (base seed {}; rerun with {SEED_ENV}={}), profile {}, \
             op #{}, journal mode {}\n  recent control statements and second-connection \
             statements:\n    {}\n  recent operations, last one failing:\n    {}",
            self.locks(),
            self.seed,
            self.base_seed,
            self.base_seed,
            self.profile.name,
            self.ops,
            self.mode,
            self.control.iter().map(Logged::show).collect::<Vec<_>>().join("\n    "),
            self.recent.iter().map(Logged::show).collect::<Vec<_>>().join("\n    ")
        )
    }

    /// Runs `sql` on both databases (on the main or the second
    /// connections) and compares what they answer.
    ///
    /// Two answers may differ legitimately, as this build of SQLite
    /// (rusqlite's, with `SQLITE_ENABLE_MEMORY_MANAGEMENT`) has all
    /// connections share one page-cache pool: a connection's cache can lose
    /// clean pages to another's, so when a write transaction spills dirty
    /// pages (taking an EXCLUSIVE lock, in rollback modes, or writing
    /// uncommitted frames to the WAL) depends on what every other
    /// connection of the process did. So a second-connection read during a
    /// rollback-mode write transaction may be BUSY on one side only, which
    /// must then be the side whose main connection holds PENDING or more;
    /// and checkpoints compare only whether they completed.
    fn ask(&mut self, who: Who, sql: &str, params: &[Value]) -> Outcome {
        self.ops += 1;
        if self.recent.len() == 24 {
            self.recent.pop_front();
        }
        // Formatted only if a failure prints it.
        let line = Logged { index: self.ops, who, sql: sql.to_string(), params: params.to_vec() };
        let plain = ["INSERT", "UPDATE", "DELETE", "SELECT"].iter().any(|p| sql.starts_with(p));
        if who == Who::Second || !plain {
            if self.control.len() == 24 {
                self.control.pop_front();
            }
            self.control.push_back(line.clone());
        }
        self.recent.push_back(line);
        if who == Who::Second {
            self.stats.second_ops += 1;
        }
        let spill_sensitive = who == Who::Second && self.mode != "wal" && self.in_tx();
        let a = run(self.w.conn(who), sql, params);
        let b = run(self.u.conn(who), sql, params);
        if sql.starts_with("PRAGMA wal_checkpoint") {
            self.check_checkpoint(&a, &b);
        } else if a != b && !(spill_sensitive && self.busy_explained(&a, &b)) {
            self.fail(&format!(
                "results differ\n  wbcache: {}\n  unix:    {}\n  first difference: {}",
                show_outcome(&a),
                show_outcome(&b),
                outcome_difference(&a, &b)
            ));
        }
        let (ta, tb) = (self.w.main().is_autocommit(), self.u.main().is_autocommit());
        if ta != tb {
            self.fail(&format!("transaction state differs: autocommit {ta} on wbcache, {tb} on unix"));
        }
        if a.is_err() {
            self.stats.errors += 1;
        }
        a
    }

    /// Whether a second-connection read that is BUSY on one side only is
    /// explained by the lock levels: BUSY where the main connection holds
    /// PENDING or EXCLUSIVE (it spilled), success where it holds less.
    fn busy_explained(&mut self, a: &Outcome, b: &Outcome) -> bool {
        let busy = |o: &Outcome| matches!(o, Err(e) if e.contains("DatabaseBusy"));
        if busy(a) == busy(b) || (!busy(a) && a.is_err()) || (!busy(b) && b.is_err()) {
            return false;
        }
        let level = |c: Option<&Connection>| lock_state(c).parse::<i32>().unwrap_or(-1);
        let (la, lb) = (level(self.w.main.as_ref()), level(self.u.main.as_ref()));
        let explained = busy(a) == (la >= 3) && busy(b) == (lb >= 3);
        if explained {
            self.stats.spill_busy += 1;
        }
        explained
    }

    /// `PRAGMA wal_checkpoint` answers (busy, log frames, checkpointed
    /// frames); frame counts depend on spills (see [`Run::ask`]).
    fn check_checkpoint(&self, a: &Outcome, b: &Outcome) {
        let busy = |o: &Outcome| match o {
            Ok((rows, _)) if rows.len() == 1 && rows[0].len() == 3 => Some(rows[0][0].clone()),
            _ => None,
        };
        if a != b && (busy(a).is_none() || busy(a) != busy(b)) {
            self.fail(&format!("checkpoints differ\n  wbcache: {}\n  unix:    {}", show_outcome(a), show_outcome(b)));
        }
    }

    fn ask0(&mut self, who: Who, sql: &str) -> Outcome {
        self.ask(who, sql, &[])
    }

    /// [`Run::ask`], for statements whose outcome only needs to match.
    fn exec(&mut self, who: Who, sql: &str, params: &[Value]) {
        let _ = self.ask(who, sql, params);
    }

    fn exec0(&mut self, who: Who, sql: &str) {
        self.exec(who, sql, &[]);
    }

    /// Runs `sql` and requires success.
    fn must(&mut self, who: Who, sql: &str, params: &[Value]) -> Vec<Vec<Cell>> {
        match self.ask(who, sql, params) {
            Ok((rows, _)) => rows,
            Err(e) => self.fail(&format!("'{sql}' failed on both: {e}")),
        }
    }

    fn in_tx(&self) -> bool {
        !self.w.main().is_autocommit()
    }

    fn int(&mut self, lo: u64, hi: u64) -> Value {
        Value::Integer(self.rng.between(lo, hi) as i64)
    }

    fn key(&mut self) -> u64 {
        self.rng.below(self.profile.key_space)
    }

    fn text(&mut self) -> Value {
        if self.rng.one_in(12) {
            return Value::Null;
        }
        let words = self.rng.between(1, 5);
        let mut s = String::new();
        for i in 0..words {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(self.rng.pick(&WORDS));
        }
        s.push_str(&format!(" {}", self.rng.below(10_000)));
        Value::Text(s)
    }

    fn real(&mut self) -> Value {
        if self.rng.one_in(15) {
            return Value::Null;
        }
        Value::Real(self.rng.below(2_000_000) as f64 / 7.0 - 100_000.0)
    }

    fn blob(&mut self) -> Value {
        if self.rng.one_in(20) {
            return Value::Null;
        }
        let p = self.profile;
        let len = if self.rng.chance(p.large_percent) {
            self.rng.between(p.blob_small, p.blob_large)
        } else {
            self.rng.below(p.blob_small + 1)
        };
        Value::Blob(self.rng.bytes(len as usize))
    }

    fn kv_row(&mut self, id: u64) -> Vec<Value> {
        let k = self.int(0, 999);
        vec![Value::Integer(id as i64), k, self.text(), self.real(), self.blob()]
    }

    /// One random statement of the workload.
    fn random_op(&mut self) {
        let in_tx = self.in_tx();
        // Outside a transaction the second connection writes now and then.
        let writer = if !in_tx && self.snapshot.is_none() && self.rng.one_in(8) { Who::Second } else { Who::Main };
        let reader = if self.rng.one_in(5) { Who::Second } else { Who::Main };
        let ks = self.profile.key_space;
        match self.rng.below(1000) {
            0..=179 => {
                let id = self.rng.below(ks);
                let row = self.kv_row(id);
                self.exec(writer, "INSERT INTO kv(id, k, v, n, b) VALUES (?1, ?2, ?3, ?4, ?5)", &row);
            }
            180..=279 => {
                let id = self.rng.below(ks);
                let row = self.kv_row(id);
                self.exec(writer, "INSERT OR REPLACE INTO kv(id, k, v, n, b) VALUES (?1, ?2, ?3, ?4, ?5)", &row);
            }
            280..=389 => {
                let lo = self.key();
                let hi = lo + self.rng.below(20);
                let p = vec![
                    self.int(0, 50),
                    self.text(),
                    self.real(),
                    Value::Integer(lo as i64),
                    Value::Integer(hi as i64),
                ];
                self.exec(
                    writer,
                    "UPDATE kv SET k = (k + ?1) % 1000, v = ?2, n = coalesce(n, 0) * 0.5 + coalesce(?3, 1) \
                     WHERE id BETWEEN ?4 AND ?5",
                    &p,
                );
            }
            390..=449 => {
                let p = vec![self.blob(), Value::Integer(self.key() as i64)];
                self.exec(writer, "UPDATE kv SET b = ?1 WHERE id = ?2", &p);
            }
            450..=519 => {
                let lo = self.key();
                let p = vec![Value::Integer(lo as i64), Value::Integer((lo + self.rng.below(10)) as i64)];
                self.exec(writer, "DELETE FROM kv WHERE id BETWEEN ?1 AND ?2", &p);
            }
            520..=534 => {
                let lo = self.rng.below(1000);
                let p = vec![Value::Integer(lo as i64), Value::Integer(lo as i64 + 1)];
                self.exec(writer, "DELETE FROM kv WHERE k BETWEEN ?1 AND ?2", &p);
            }
            535..=589 => {
                let p = vec![Value::Text(format!("t{}", self.rng.below(5000))), self.text()];
                self.exec(
                    writer,
                    "INSERT INTO tags(name, cnt, note) VALUES (?1, 1, ?2) \
                     ON CONFLICT(name) DO UPDATE SET cnt = cnt + 1, note = excluded.note",
                    &p,
                );
            }
            590..=599 => {
                let lo = self.rng.below(5000);
                let p = vec![Value::Text(format!("t{lo}")), Value::Text(format!("t{}", lo + 30))];
                self.exec(writer, "DELETE FROM tags WHERE name >= ?1 AND name < ?2", &p);
            }
            600..=659 => {
                let len = self.rng.below(200) as usize;
                let p = vec![self.int(0, 1 << 40), Value::Blob(self.rng.bytes(len))];
                self.exec(writer, "INSERT INTO log(op, payload) VALUES (?1, ?2)", &p);
            }
            660..=669 => {
                let p = vec![self.int(0, 3000)];
                self.exec(writer, "DELETE FROM log WHERE seq < (SELECT max(seq) FROM log) - ?1", &p);
            }
            670..=709 => {
                let rows = self.rng.between(2, 8);
                let mut params = Vec::new();
                let mut groups = Vec::new();
                for r in 0..rows {
                    let id = self.rng.below(ks);
                    params.extend(self.kv_row(id));
                    let b = r * 5;
                    groups.push(format!("(?{}, ?{}, ?{}, ?{}, ?{})", b + 1, b + 2, b + 3, b + 4, b + 5));
                }
                let sql = format!("INSERT OR REPLACE INTO kv(id, k, v, n, b) VALUES {}", groups.join(", "));
                self.exec(writer, &sql, &params);
            }
            710..=719 => {
                let lo = self.key();
                let p = vec![Value::Integer(lo as i64), Value::Integer((lo + self.rng.below(300)) as i64)];
                self.exec(
                    writer,
                    "INSERT OR IGNORE INTO tags(name, cnt, note) \
                     SELECT 'k' || k, count(*), max(v) FROM kv WHERE id BETWEEN ?1 AND ?2 GROUP BY k",
                    &p,
                );
            }
            720..=729 => {
                let lo = self.key();
                let p = vec![Value::Integer(lo as i64), Value::Integer((lo + self.rng.below(200)) as i64)];
                self.exec(
                    writer,
                    "UPDATE kv SET b = CASE WHEN b IS NULL THEN zeroblob(id % 700) ELSE CAST(substr(b, 2) || x'00ff' AS BLOB) END \
                     WHERE id BETWEEN ?1 AND ?2",
                    &p,
                );
            }
            730..=744 => self.savepoint_op(),
            745..=829 => {
                let lo = self.key();
                let p = vec![Value::Integer(lo as i64), Value::Integer((lo + self.rng.below(50)) as i64)];
                self.exec(reader, "SELECT id, k, v, n, b FROM kv WHERE id BETWEEN ?1 AND ?2 ORDER BY id", &p);
            }
            830..=879 => {
                let lo = self.rng.below(1000);
                let p = vec![
                    Value::Integer(lo as i64),
                    Value::Integer((lo + self.rng.below(self.profile.scan / 60)) as i64),
                ];
                self.exec(
                    reader,
                    "SELECT count(*), sum(k), total(n), min(v), max(v), sum(length(b)), min(id), max(id) \
                     FROM kv WHERE k BETWEEN ?1 AND ?2",
                    &p,
                );
            }
            880..=899 => {
                let p = vec![Value::Integer(self.key() as i64), Value::Integer(self.profile.scan as i64)];
                self.exec(
                    reader,
                    "SELECT k % 13, count(*), sum(length(v)), total(n) FROM kv WHERE id BETWEEN ?1 AND ?1 + ?2 \
                     GROUP BY 1 ORDER BY 1",
                    &p,
                );
            }
            900..=929 => {
                let p = vec![self.int(0, 999), self.int(1, 40)];
                self.exec(reader, "SELECT id, k, v FROM kv WHERE k >= ?1 ORDER BY k DESC, id LIMIT ?2", &p);
            }
            930..=949 => {
                let p = vec![Value::Text(format!("t{}", self.rng.below(5000)))];
                self.exec(reader, "SELECT name, cnt, note FROM tags WHERE name >= ?1 ORDER BY name LIMIT 20", &p);
            }
            950..=964 if self.profile.full_scans => {
                self.exec0(reader, "SELECT count(*), max(seq), min(seq), sum(length(payload)), sum(op) FROM log");
            }
            950..=964 => {
                self.exec0(
                    reader,
                    "SELECT max(seq), min(seq), (SELECT op FROM log ORDER BY seq DESC LIMIT 1) FROM log",
                );
            }
            965..=984 => {
                let p = vec![Value::Integer(self.key() as i64)];
                self.exec(reader, "SELECT id, hex(b), typeof(n), v FROM kv WHERE id = ?1", &p);
            }
            985..=997 => {
                let p = vec![self.text()];
                self.exec(reader, "SELECT v, n, id FROM kv WHERE v >= ?1 ORDER BY v, n, id LIMIT 10", &p);
            }
            _ if self.profile.full_scans => {
                self.exec0(reader, "SELECT count(*), sum(k), total(n), sum(length(b)), sum(length(v)) FROM kv");
            }
            _ => {
                // Through the index on k alone.
                self.exec0(reader, "SELECT count(*), sum(k) FROM kv INDEXED BY kv_k");
            }
        }
    }

    /// SAVEPOINT, or ROLLBACK TO / RELEASE of the one open.
    fn savepoint_op(&mut self) {
        if !self.in_tx() || self.mode == "off" {
            return;
        }
        if !self.savepoint {
            self.exec0(Who::Main, "SAVEPOINT sp");
            self.savepoint = true;
        } else {
            if self.rng.chance(50) {
                self.exec0(Who::Main, "ROLLBACK TO sp");
            }
            self.exec0(Who::Main, "RELEASE sp");
            self.savepoint = false;
        }
    }

    fn setup(&mut self) {
        let kib = self.profile.sqlite_cache_kib;
        for side in [&mut self.w, &mut self.u] {
            let conn = side.main();
            conn.execute_batch(&format!("PRAGMA cache_size = -{kib}; PRAGMA synchronous = OFF;")).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
        }
        self.mode = text(&self.ask0(Who::Main, "PRAGMA journal_mode"));
        let mut id = 0;
        while id < self.profile.prefill {
            self.must(Who::Main, "BEGIN", &[]);
            for _ in 0..500 {
                if id >= self.profile.prefill {
                    break;
                }
                // Spread over the key space, in a scrambled order.
                let key = (id * 7919) % self.profile.key_space;
                let row = self.kv_row(key);
                self.exec(Who::Main, "INSERT OR REPLACE INTO kv(id, k, v, n, b) VALUES (?1, ?2, ?3, ?4, ?5)", &row);
                id += 1;
            }
            self.must(Who::Main, "COMMIT", &[]);
        }
    }

    /// Closes every connection and opens the main ones again, with the
    /// settings they had. On the wbcache side, the last close writes back
    /// and forgets the files and gives up the lock; the open takes it
    /// again and reads from the disk.
    fn reopen(&mut self) {
        for side in [&mut self.w, &mut self.u] {
            side.second = None;
            side.main = None;
            side.main = Some(open(&side.path, side.vfs.as_deref()));
            let kib = self.profile.sqlite_cache_kib;
            side.main().execute_batch(&format!("PRAGMA cache_size = -{kib};")).unwrap();
        }
        // WAL mode is the file's; the others are the connection's.
        let sync = format!("PRAGMA synchronous = {}", self.sync);
        self.exec0(Who::Main, &sync);
        let mode = format!("PRAGMA journal_mode = {}", self.mode);
        let got = self.ask0(Who::Main, &mode);
        if text(&got) != self.mode {
            self.fail(&format!("journal mode {} after reopening: {}", self.mode, show_outcome(&got)));
        }
        self.stats.reopens += 1;
    }

    /// Closes the second connections (a journal mode change needs the
    /// database to itself).
    fn close_second(&mut self) {
        self.w.second = None;
        self.u.second = None;
    }

    /// What happens between transactions.
    fn maintenance(&mut self) {
        debug_assert!(!self.in_tx() && self.snapshot.is_none());
        if self.rng.one_in(8) {
            let sync = match self.rng.below(10) {
                0..=5 => "OFF",
                6..=8 => "NORMAL",
                _ => "FULL",
            };
            let sql = format!("PRAGMA synchronous = {sync}");
            self.exec0(Who::Main, &sql);
            self.exec0(Who::Main, "PRAGMA synchronous");
            self.sync = sync;
        }
        if self.rng.one_in(60) {
            self.reopen();
        }
        if self.rng.one_in(40) {
            self.close_second();
            let mode = self.rng.pick(&JOURNAL_MODES);
            let got = self.ask0(Who::Main, &format!("PRAGMA journal_mode = {mode}"));
            self.mode = text(&got);
            self.stats.mode_switches += 1;
        }
        if self.rng.one_in(150) {
            if self.mode != "wal" && self.rng.one_in(3) {
                let size = self.rng.pick(self.profile.page_sizes);
                self.exec0(Who::Main, &format!("PRAGMA page_size = {size}"));
            }
            self.exec0(Who::Main, "VACUUM");
            self.exec0(Who::Main, "PRAGMA page_size");
            self.stats.vacuums += 1;
        }
        if self.mode == "wal" && self.rng.one_in(10) {
            let kind = self.rng.pick(&["PASSIVE", "FULL", "RESTART", "TRUNCATE"]);
            self.exec0(Who::Main, &format!("PRAGMA wal_checkpoint({kind})"));
            self.stats.checkpoints += 1;
        }
        if self.rng.one_in(30) {
            self.close_second();
        }
        if self.rng.one_in(20) {
            self.exec0(Who::Main, "SELECT * FROM pragma_page_count, pragma_freelist_count");
        }
        if self.rng.one_in(400) {
            let got = self.ask0(Who::Main, "PRAGMA quick_check");
            if text(&got) != "ok" {
                self.fail(&format!("quick_check: {}", show_outcome(&got)));
            }
        }
    }

    /// In WAL mode: the second connections start a read transaction, which
    /// must keep seeing this state while the main ones commit.
    fn begin_snapshot(&mut self) {
        if self.ask0(Who::Second, "BEGIN").is_err() {
            return;
        }
        let seen = self.ask0(Who::Second, "SELECT count(*), sum(k), total(n), sum(length(b)) FROM kv");
        self.snapshot = Some(seen);
        self.stats.snapshots += 1;
    }

    fn end_snapshot(&mut self) {
        let Some(before) = self.snapshot.take() else { return };
        let now = self.ask0(Who::Second, "SELECT count(*), sum(k), total(n), sum(length(b)) FROM kv");
        if before.is_ok() && now != before {
            self.fail(&format!(
                "a read transaction's view moved: {} then {}",
                show_outcome(&before),
                show_outcome(&now)
            ));
        }
        self.exec0(Who::Second, "COMMIT");
    }

    fn workload(&mut self) {
        self.setup();
        let target = self.profile.ops;
        while self.ops < target {
            self.maintenance();
            if self.rng.chance(80) {
                if self.mode == "wal" && self.rng.one_in(4) {
                    self.begin_snapshot();
                }
                let begin = match self.rng.below(20) {
                    0..=13 => "BEGIN",
                    14..=18 => "BEGIN IMMEDIATE",
                    _ => "BEGIN EXCLUSIVE",
                };
                self.exec0(Who::Main, begin);
                let n = self.rng.between(20, 600);
                for _ in 0..n {
                    if self.ops >= target {
                        break;
                    }
                    self.random_op();
                }
                self.savepoint = false;
                if self.mode != "off" && self.rng.chance(12) {
                    self.exec0(Who::Main, "ROLLBACK");
                    self.stats.rollbacks += 1;
                } else {
                    self.exec0(Who::Main, "COMMIT");
                    self.stats.commits += 1;
                }
                self.end_snapshot();
                if self.in_tx() {
                    self.fail("the transaction is still open after COMMIT / ROLLBACK");
                }
            } else {
                let n = self.rng.between(1, 40);
                for _ in 0..n {
                    self.random_op();
                    if self.in_tx() {
                        // A SAVEPOINT cannot open here; nothing else may.
                        self.fail("a transaction opened in an autocommit stretch");
                    }
                }
            }
        }
    }

    /// Integrity, then the dumps: through the VFS, and after closing every
    /// wbcache connection, read with the plain unix VFS.
    fn finish(mut self) {
        if self.in_tx() {
            self.exec0(Who::Main, "COMMIT");
        }
        self.end_snapshot();
        let check = self.ask0(Who::Main, "PRAGMA integrity_check");
        if text(&check) != "ok" {
            self.fail(&format!("integrity_check: {}", show_outcome(&check)));
        }
        let (dw, du) = (common::dump(self.w.main()), common::dump(self.u.main()));
        if let Some(diff) = common::first_dump_difference(&dw, &du) {
            self.fail(&format!("the dumps differ at {diff}"));
        }
        let sizes = self.must(
            Who::Main,
            "SELECT (SELECT sum(pgsize) FROM dbstat WHERE name = 'kv'), \
             (SELECT page_count * page_size FROM pragma_page_count, pragma_page_size)",
            &[],
        );
        let (kv_bytes, db_bytes) = match sizes[0][..] {
            [Cell::Int(kv), Cell::Int(db)] => (kv as u64, db as u64),
            ref other => self.fail(&format!("sizes: {other:?}")),
        };
        eprintln!(
            "{} seed {}: {} ops, {} rows in kv ({} KiB; database {} KiB), final journal mode {}, {:?}",
            self.profile.name,
            self.seed,
            self.ops,
            dw.iter().filter(|l| l.starts_with("kv ")).count(),
            kv_bytes >> 10,
            db_bytes >> 10,
            self.mode,
            self.stats
        );
        assert!(
            kv_bytes >= self.profile.min_kv_bytes,
            "table kv holds {kv_bytes} bytes, less than the {} the profile wants",
            self.profile.min_kv_bytes
        );
        let (wpath, upath) = (self.w.path.clone(), self.u.path.clone());
        // Every wbcache connection closed: the last one writes back.
        self.w.second = None;
        self.w.main = None;
        self.u.second = None;
        self.u.main = None;
        let plain_w = Connection::open(&wpath).unwrap();
        let plain_u = Connection::open(&upath).unwrap();
        let check = common::integrity(&plain_w);
        if check != "ok" {
            self.fail(&format!("integrity_check of the wbcache database on the unix VFS: {check}"));
        }
        let (pw, pu) = (common::dump(&plain_w), common::dump(&plain_u));
        if let Some(diff) = common::first_dump_difference(&pw, &pu) {
            self.fail(&format!("the dumps read with the unix VFS differ at {diff}"));
        }
        if pw != dw {
            self.fail("the wbcache database read with the unix VFS differs from what the wbcache VFS read");
        }
    }
}

fn run_profile(profile: &'static Profile, part: u64) {
    let base_seed = common::seed_from_env(SEED_ENV, DEFAULT_SEED);
    let seed = base_seed.wrapping_add(part);
    let name = format!("{}-{part}", profile.name);
    eprintln!("{name}: seed {seed} (base seed {base_seed}; rerun with {SEED_ENV}={base_seed})");
    let dir = common::scratch(&name);
    let cache = Arc::new(Cache::new(Config::from_options(profile.cache_options).unwrap()).unwrap());
    let vfs = format!("wbcache-{name}");
    wbcache_sqlite::register(cache.clone(), &vfs, false).unwrap();
    let started = Instant::now();
    let mut run = Run {
        base_seed,
        seed,
        profile,
        rng: Rng::new(seed),
        w: Side::new(dir.join("wbcache.db"), Some(vfs)),
        u: Side::new(dir.join("unix.db"), None),
        ops: 0,
        recent: VecDeque::new(),
        control: VecDeque::new(),
        mode: String::new(),
        snapshot: None,
        savepoint: false,
        sync: "OFF",
        stats: Stats::default(),
    };
    run.workload();
    let st = cache.stats();
    let written = |r: wbcache::Reason| st.written_bytes_by_reason[r as usize] >> 20;
    use wbcache::Reason::{Background, Fsync, Periodic, Reclaim};
    eprintln!(
        "{name}: cache: {} hits, {} misses, {} evictions; written back (MiB): {} background, {} periodic, \
         {} fsync, {} reclaim; {} fsyncs",
        st.hits,
        st.misses,
        st.evictions,
        written(Background),
        written(Periodic),
        written(Fsync),
        written(Reclaim),
        st.fsyncs
    );
    if profile.min_kv_bytes > 0 {
        // The point of the small cache: eviction and writeback all along.
        assert!(st.evictions > 0 && written(Background) + written(Reclaim) > 0, "no cache pressure: {st:?}");
    }
    run.finish();
    eprintln!("{name}: {} ops in {:.1?}", profile.ops, started.elapsed());
    common::remove_scratch(&dir);
}

#[test]
fn equivalence_part_1() {
    run_profile(&BIG, 0);
}

#[test]
fn equivalence_part_2() {
    run_profile(&BIG, 1);
}

#[test]
fn equivalence_part_3() {
    run_profile(&BIG, 2);
}

#[test]
fn equivalence_part_4() {
    run_profile(&BIG, 3);
}

#[test]
fn cache_pressure_equivalence() {
    run_profile(&SMALL_CACHE, 100);
}
