//! Helpers shared by the SQLite VFS tests: a seeded generator, scratch
//! directories, the seed from the environment, and reading query results
//! as plain values.
// Not every part is used by the tests of today.
#![allow(dead_code)]

#[path = "../../../tests/common/rng.rs"]
mod rng;

pub use rng::Rng;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::ValueRef;
use rusqlite::Connection;

/// A value read back: SQLite's text kept as bytes (a blob concatenated
/// into text need not be UTF-8).
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl Cell {
    pub fn of(v: ValueRef<'_>) -> Cell {
        match v {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(i) => Cell::Int(i),
            ValueRef::Real(f) => Cell::Real(f),
            ValueRef::Text(t) => Cell::Text(t.to_vec()),
            ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
        }
    }

    /// Text as a string (lossy), anything else in its debug form.
    pub fn as_string(&self) -> String {
        match self {
            Cell::Text(t) => String::from_utf8_lossy(t).into_owned(),
            other => format!("{other:?}"),
        }
    }
}

/// Every column of a row, as cells.
pub fn cells(row: &rusqlite::Row<'_>, columns: usize) -> rusqlite::Result<Vec<Cell>> {
    (0..columns).map(|i| row.get_ref(i).map(Cell::of)).collect()
}

/// The seed: `var` from the environment if set, else `default`.
pub fn seed_from_env(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("{var}='{s}' is not an unsigned integer")),
        Err(_) => default,
    }
}

/// A seed from the clock, for tests whose timing is random anyway.
pub fn clock_seed() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// A fresh, empty scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wbcache-sqlite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes a scratch directory (a test that failed leaves it for a look).
pub fn remove_scratch(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// Every row of a query, as values.
pub fn query_all(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<Vec<Cell>>> {
    let mut stmt = conn.prepare(sql)?;
    let n = stmt.column_count();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(cells(row, n)?);
    }
    Ok(out)
}

/// `PRAGMA integrity_check`'s answer, lines joined.
pub fn integrity(conn: &Connection) -> String {
    let rows = query_all(conn, "PRAGMA integrity_check").unwrap();
    rows.iter().map(|r| r[0].as_string()).collect::<Vec<_>>().join("\n")
}

/// A whole database as text: the schema, then every table's rows ordered
/// by all their columns.
pub fn dump(conn: &Connection) -> Vec<String> {
    let mut out = Vec::new();
    let schema = query_all(conn, "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").unwrap();
    for row in &schema {
        out.push(format!("schema {row:?}"));
    }
    let tables: Vec<String> =
        schema.iter().filter(|r| r[0] == Cell::Text(b"table".to_vec())).map(|r| r[1].as_string()).collect();
    for table in tables {
        let quoted = format!("\"{}\"", table.replace('"', "\"\""));
        let columns = conn.prepare(&format!("SELECT * FROM {quoted}")).unwrap().column_count();
        let order: Vec<String> = (1..=columns).map(|i| i.to_string()).collect();
        let rows = query_all(conn, &format!("SELECT * FROM {quoted} ORDER BY {}", order.join(", "))).unwrap();
        out.push(format!("table {table}: {} rows", rows.len()));
        for row in rows {
            out.push(format!("{table} {row:?}"));
        }
    }
    out
}

/// The first line where two dumps differ, for a message that does not
/// print megabytes.
pub fn first_dump_difference(a: &[String], b: &[String]) -> Option<String> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            return Some(format!("line {i}:\n  wbcache: {x:.400}\n  unix:    {y:.400}"));
        }
    }
    (a.len() != b.len()).then(|| format!("{} lines against {}", a.len(), b.len()))
}

/// Waits (at most two minutes) until no guardian process of the cache of
/// process `owner` is left (`wbc-guardian`, its `WBCACHE_GUARDIAN` naming
/// the owner): a killed owner's data is on the files once it is gone.
pub fn wait_for_guardians_of(owner: libc::pid_t) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let prefix = format!("WBCACHE_GUARDIAN={owner},");
    let guarding = || {
        std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|entry| {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            comm.trim() == "wbc-guardian"
                && std::fs::read(entry.path().join("environ"))
                    .unwrap_or_default()
                    .split(|&b| b == 0)
                    .any(|kv| kv.starts_with(prefix.as_bytes()))
        })
    };
    while guarding() {
        assert!(std::time::Instant::now() < deadline, "the guardian of {owner} still runs after two minutes");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
