//! The `sqlite3` shell under the preload, in each journal mode (`wal`,
//! `delete`, `truncate`, `persist`, `memory`, `off`): it creates a table,
//! inserts 20,000 rows over several transactions, updates and deletes
//! some, and checks the database's integrity, all through the cache
//! (journals created, truncated and deleted; in WAL mode the `-shm` file
//! mapped shared, which hands it to the kernel). Then a plain `sqlite3`,
//! not preloaded, opens what is on disk, checks its integrity again and
//! computes the same aggregates, which must equal both the preloaded
//! run's and the values computed here from the rows' formulas.

use crate::common;

use common::{plain, preloaded, run, tool, Scratch, OPTIONS, TIMEOUT};

const ROWS: u64 = 20_000;

/// The statements: rows `x` = 1..=ROWS with `n = x * 7919 % 1000003` and
/// `v` = `row-` and `x` in 8 digits, padded to 200 characters (a database
/// of a few MiB, more than the cache's dirty limit), inserted in four
/// transactions; then every third row's `n` incremented and every tenth
/// row deleted.
fn script(mode: &str) -> String {
    let mut sql =
        format!("PRAGMA journal_mode = {mode};\nCREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v TEXT);\n");
    for part in 0..4 {
        let (from, to) = (part * ROWS / 4 + 1, (part + 1) * ROWS / 4);
        sql += &format!(
            "BEGIN;\nWITH RECURSIVE c(x) AS (SELECT {from} UNION ALL SELECT x + 1 FROM c WHERE x < {to})\n\
             INSERT INTO t SELECT x, x * 7919 % 1000003, printf('row-%08d%188s', x, '') FROM c;\nCOMMIT;\n"
        );
    }
    sql + "UPDATE t SET n = n + 1 WHERE id % 3 = 0;\nDELETE FROM t WHERE id % 10 = 0;\n"
}

/// The check both runs end with: integrity, then the aggregates.
const CHECK: &str = "PRAGMA integrity_check;\n\
                     SELECT count(*), sum(n), sum(n * (id % 97)), sum(length(v)), rtrim(min(v)), rtrim(max(v)) FROM t;\n";

/// What `CHECK` must print, computed from the formulas.
fn expected() -> String {
    let rows: Vec<(u64, u64)> =
        (1..=ROWS).filter(|x| x % 10 != 0).map(|x| (x, x * 7919 % 1_000_003 + u64::from(x % 3 == 0))).collect();
    let sum: u64 = rows.iter().map(|r| r.1).sum();
    let mixed: u64 = rows.iter().map(|(id, n)| n * (id % 97)).sum();
    let last = rows.last().unwrap().0;
    format!("ok\n{}|{sum}|{mixed}|{}|row-00000001|row-{last:08}\n", rows.len(), rows.len() * 200)
}

fn journal_mode(mode: &str) {
    let Some(sqlite3) = tool("sqlite3") else { return };
    let scratch = Scratch::new(&format!("sqlite-{mode}"));
    let managed = scratch.dir("managed");
    let db = managed.join("test.db");
    let sql = scratch.script("create.sql", &(script(mode) + CHECK));
    let mut cmd = preloaded(&sqlite3, &[&managed], OPTIONS);
    cmd.arg("-bail").arg(&db).arg(format!(".read {}", sql.display()));
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    // `PRAGMA journal_mode` answers with the mode it set.
    let (set, printed) = out.stdout.split_once('\n').unwrap_or_default();
    assert_eq!(set, mode, "the journal mode sqlite3 set\n{}", out.details());
    assert_eq!(printed, expected(), "preloaded sqlite3, journal_mode={mode}\n{}", out.details());

    let check = scratch.script("check.sql", CHECK);
    let mut cmd = plain(&sqlite3);
    cmd.arg("-bail").arg(&db).arg(format!(".read {}", check.display()));
    let out = run(cmd, TIMEOUT).ok();
    assert_eq!(out.stdout, expected(), "plain sqlite3 reading what the preloaded one wrote ({mode})");
}

#[test]
fn sqlite_wal() {
    journal_mode("wal");
}

#[test]
fn sqlite_delete() {
    journal_mode("delete");
}

#[test]
fn sqlite_truncate() {
    journal_mode("truncate");
}

#[test]
fn sqlite_persist() {
    journal_mode("persist");
}

#[test]
fn sqlite_memory() {
    journal_mode("memory");
}

#[test]
fn sqlite_off() {
    journal_mode("off");
}
