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
        for i in 0..300 {
            conn.execute("INSERT INTO t(b) VALUES (?1)", [format!("row {i} {}", "x".repeat(i * 37 % 5000))]).unwrap();
        }
        let second = Connection::open_with_flags_and_vfs(&path, flags, "wbcache-smoke").unwrap();
        let n: i64 = second.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 300, "{mode}: a second connection sees the rows");
        drop(second);
        drop(conn);
        let plain = Connection::open(&path).unwrap();
        let n: i64 = plain.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 300, "{mode}: the unix VFS reads what wbcache wrote");
        let ok: String = plain.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The file control reads the per-file setting; `psow=0` in the URI turns
/// powersafe overwrite off, as with the unix VFS.
#[test]
fn powersafe_overwrite_follows_the_uri() {
    use rusqlite::ffi;
    let dir = std::env::temp_dir().join(format!("wbcache-sqlite-psow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = Arc::new(Cache::new(Config::with_capacity(16 << 20)).unwrap());
    wbcache_sqlite::register(cache, "wbcache-psow", false).unwrap();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_URI;
    for (uri, want) in [("a.db", 1), ("b.db?psow=0", 0), ("c.db?psow=on", 1)] {
        let name = format!("file:{}/{uri}", dir.display());
        let conn = Connection::open_with_flags_and_vfs(&name, flags, "wbcache-psow").unwrap();
        conn.execute_batch("CREATE TABLE t(x)").unwrap();
        let mut value: std::ffi::c_int = -1;
        // SAFETY: a live connection; the op takes a pointer to an int.
        let rc = unsafe {
            ffi::sqlite3_file_control(
                conn.handle(),
                c"main".as_ptr(),
                ffi::SQLITE_FCNTL_POWERSAFE_OVERWRITE,
                (&mut value as *mut std::ffi::c_int).cast(),
            )
        };
        assert_eq!((rc, value), (ffi::SQLITE_OK, want), "{uri}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `SQLITE_FCNTL_CHUNK_SIZE` makes the database grow and shrink in whole
/// chunks, its growth preallocated (as the unix VFS does): the file's size
/// is a multiple of the chunk, its blocks are allocated, and the unix VFS
/// reads the result back.
#[test]
fn chunk_size_preallocates_whole_chunks() {
    use rusqlite::ffi;
    use std::os::unix::fs::MetadataExt;
    let dir = std::env::temp_dir().join(format!("wbcache-sqlite-chunk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = Arc::new(Cache::new(Config::with_capacity(64 << 20)).unwrap());
    wbcache_sqlite::register(cache, "wbcache-chunk", false).unwrap();
    let path = dir.join("chunked.db");
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
    let conn = Connection::open_with_flags_and_vfs(&path, flags, "wbcache-chunk").unwrap();
    let chunk: std::ffi::c_int = 1 << 20;
    let mut arg = chunk;
    // SAFETY: a live connection; the op takes a pointer to an int.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_CHUNK_SIZE,
            (&mut arg as *mut std::ffi::c_int).cast(),
        )
    };
    assert_eq!(rc, ffi::SQLITE_OK);
    conn.execute_batch("PRAGMA synchronous=FULL; CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB);").unwrap();
    for i in 0..600 {
        conn.execute("INSERT INTO t(b) VALUES (zeroblob(?1))", [1000 + i * 7]).unwrap();
    }
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len() % chunk as u64, 0, "whole chunks: {} bytes", meta.len());
    assert!(meta.len() >= 2 << 20, "grown: {} bytes", meta.len());
    assert!(meta.blocks() * 512 >= meta.len(), "preallocated: {} sectors for {} bytes", meta.blocks(), meta.len());
    conn.execute_batch("DELETE FROM t WHERE a > 10; VACUUM;").unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len % chunk as u64, 0, "cut to whole chunks: {len} bytes");
    drop(conn);
    let plain = Connection::open(&path).unwrap();
    let n: i64 = plain.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 10);
    let ok: String = plain.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(ok, "ok");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `wbcache_stats()` on a connection of a program that links SQLite: the
/// cache's statistics as JSON, which follow what the connection does (its
/// commits' fsyncs), until the connection closes and gives back its
/// reference to the cache.
#[test]
fn the_stats_function_returns_the_caches_json() {
    let dir = std::env::temp_dir().join(format!("wbcache-sqlite-stats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = Arc::new(Cache::new(Config::from_options("capacity=16M,io=threads").unwrap()).unwrap());
    wbcache_sqlite::register(cache.clone(), "wbcache-stats", false).unwrap();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
    let conn = Connection::open_with_flags_and_vfs(dir.join("s.db"), flags, "wbcache-stats").unwrap();
    let missing = conn.query_row("SELECT wbcache_stats()", [], |r| r.get::<_, String>(0));
    assert!(missing.is_err(), "not there before it is registered");
    // SAFETY: a live connection of the linked SQLite.
    unsafe { wbcache_sqlite::register_stats_function(conn.handle(), cache.clone()) }.unwrap();
    let stats = |conn: &Connection| conn.query_row("SELECT wbcache_stats()", [], |r| r.get::<_, String>(0)).unwrap();
    let fsyncs = |json: &str| -> u64 {
        let at = json.find("\"fsyncs\":").expect("fsyncs") + "\"fsyncs\":".len();
        json[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let before = stats(&conn);
    assert!(before.starts_with('{') && before.ends_with('}'), "{before}");
    assert!(before.contains("\"io_backend\":\"threads\""), "{before}");
    assert!(before.contains(&format!("\"capacity\":{}", 16 << 20)), "the cache's own: {before}");
    conn.execute_batch("PRAGMA synchronous=FULL; CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
    let after = stats(&conn);
    assert!(fsyncs(&after) > fsyncs(&before), "the commits' fsyncs show: {before} then {after}");
    let references = Arc::strong_count(&cache);
    drop(conn);
    assert_eq!(Arc::strong_count(&cache), references - 1, "the closed connection let its reference go");
    std::fs::remove_dir_all(&dir).unwrap();
}
