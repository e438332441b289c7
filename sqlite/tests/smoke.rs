//! First contact: a database on the wbcache VFS through rusqlite (bundled
//! SQLite), in rollback and WAL mode, read back with SQLite's own VFS.

use std::sync::Arc;

use rusqlite::{Connection, OpenFlags};
use wbcache::{Cache, Config};

#[test]
fn rollback_and_wal_round_trip() {
    let dir = std::env::temp_dir().join(format!("wbcache-sqlite-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = Arc::new(Cache::new(Config::with_capacity(64 << 20)).unwrap());
    wbcache_sqlite::register(cache.clone(), "wbcache-smoke", false).unwrap();
    for mode in ["DELETE", "WAL", "TRUNCATE", "PERSIST", "MEMORY", "OFF"] {
        let path = dir.join(format!("{mode}.db"));
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = Connection::open_with_flags_and_vfs(&path, flags, "wbcache-smoke").unwrap();
        let got: String = conn.query_row(&format!("PRAGMA journal_mode={mode}"), [], |r| r.get(0)).unwrap();
        assert_eq!(got.to_uppercase(), mode);
        conn.execute_batch("PRAGMA synchronous=FULL; CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);").unwrap();
        for i in 0..2000 {
            conn.execute("INSERT INTO t(b) VALUES (?1)", [format!("row {i} {}", "x".repeat(i % 300))]).unwrap();
        }
        let second = Connection::open_with_flags_and_vfs(&path, flags, "wbcache-smoke").unwrap();
        let n: i64 = second.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2000, "{mode}: a second connection sees the rows");
        drop(second);
        drop(conn);
        let plain = Connection::open(&path).unwrap();
        let n: i64 = plain.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2000, "{mode}: the unix VFS reads what wbcache wrote");
        let ok: String = plain.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
