//! The loadable extension in the system's `sqlite3` shell (SQLite 3.40 on
//! the reference machine; a different SQLite from the bundled one the other
//! tests link): `.load` registers the VFS, a script runs on it through
//! `vfs=wbcache`, and the shell's own unix VFS reads the result back. Bad
//! settings make the load fail with a message that names them, and
//! `wbcache_stats()` reports the extension's cache.
//!
//! The extension is the shared library this test's build produced
//! (`target/<profile>/deps/libwbcache_sqlite.so`). Without a `sqlite3`
//! binary the tests skip with a message, except under `CI=true`, where
//! they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The extension built with this test: the newest `libwbcache_sqlite.so`
/// in `target/<profile>/deps` or `target/<profile>`.
fn extension() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [deps.join("libwbcache_sqlite.so"), deps.parent().unwrap().join("libwbcache_sqlite.so")];
    candidates
        .into_iter()
        .filter(|p| p.exists())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).unwrap())
        .expect("cargo builds the cdylib with the tests")
}

fn shell_or_skip() -> bool {
    let found = Command::new("sqlite3").arg("-version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "sqlite3 is missing under CI (.ci/run installs it)");
        eprintln!("skipped: no sqlite3 shell here");
    }
    found
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wbcache-sqlite-shell-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `script` in a fresh shell with `env` set; returns its output.
fn shell(script: &str, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut cmd = Command::new("sqlite3");
    cmd.arg("-batch").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    cmd.stderr(std::process::Stdio::piped()).env_remove("WBCACHE_OPTIONS").env_remove("WBCACHE_SQLITE_DEFAULT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn load_line() -> String {
    // The shell appends the platform suffix itself, as documented.
    let lib = extension();
    format!(".load {}\n", lib.with_extension("").display())
}

fn sql_script(db: &Path, mode: &str) -> String {
    format!(
        "{load}.open file:{db}?vfs=wbcache\n.vfsname\nPRAGMA journal_mode={mode};\nPRAGMA synchronous=FULL;\n\
         CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n\
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)\n\
         INSERT INTO t SELECT i, printf('%0200d', i) FROM n;\n\
         BEGIN; UPDATE t SET v = 'x' || v WHERE id % 7 = 0; DELETE FROM t WHERE id % 11 = 0; COMMIT;\n\
         BEGIN; DELETE FROM t; ROLLBACK;\n\
         SELECT count(*), sum(id), sum(length(v)) FROM t;\nPRAGMA integrity_check;\n",
        load = load_line(),
        db = db.display(),
    )
}

#[test]
fn a_script_runs_on_the_extension_in_every_journal_mode() {
    if !shell_or_skip() {
        return;
    }
    let dir = scratch("script");
    let want_count = 5000 - 5000 / 11;
    for mode in ["delete", "wal", "truncate", "persist", "memory", "off"] {
        let db = dir.join(format!("{mode}.db"));
        let out = shell(&sql_script(&db, mode), &[]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{mode}: shell failed: {}{}", stdout, text(&out.stderr));
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.first(), Some(&"wbcache"), "{mode}: .vfsname: {stdout}");
        assert_eq!(lines.get(1), Some(&mode), "{mode}: journal mode: {stdout}");
        let summary = lines.get(2).unwrap_or(&"");
        assert!(summary.starts_with(&format!("{want_count}|")), "{mode}: rows: {stdout}");
        assert_eq!(lines.get(3), Some(&"ok"), "{mode}: integrity: {stdout}");
        // The shell's own VFS, in a new process, reads the same.
        let plain = shell(
            &format!(
                ".open {}\nSELECT count(*), sum(id), sum(length(v)) FROM t;\nPRAGMA integrity_check;\n",
                db.display()
            ),
            &[],
        );
        let plain_out = text(&plain.stdout);
        assert_eq!(plain_out.lines().next(), Some(*summary), "{mode}: unix VFS reads back: {plain_out}");
        assert_eq!(plain_out.lines().nth(1), Some("ok"), "{mode}: {plain_out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_extension_can_become_the_default_vfs() {
    if !shell_or_skip() {
        return;
    }
    let dir = scratch("default");
    let db = dir.join("d.db");
    let script = format!(
        "{}.open {}\n.vfsname\nCREATE TABLE t(x);\nINSERT INTO t VALUES (42);\nSELECT x FROM t;\n",
        load_line(),
        db.display()
    );
    let out = shell(&script, &[("WBCACHE_SQLITE_DEFAULT", "1"), ("WBCACHE_OPTIONS", "capacity=32M,io=threads")]);
    assert_eq!(text(&out.stdout), "wbcache\n42\n", "stderr: {}", text(&out.stderr));
    let out = shell(&script.replace("VALUES (42)", "VALUES (43)"), &[("WBCACHE_SQLITE_DEFAULT", "0")]);
    assert!(text(&out.stdout).starts_with("unix"), "not the default unless asked: {}", text(&out.stdout));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `wbcache_stats()` gives the extension's cache's statistics as JSON: in
/// the connection that loaded it, and in one `.open` made afterwards,
/// where they follow the database's commits.
#[test]
fn the_stats_function_reports_the_extensions_cache() {
    if !shell_or_skip() {
        return;
    }
    let dir = scratch("stats");
    let db = dir.join("s.db");
    let script = format!(
        "{load}SELECT wbcache_stats();\n.open file:{db}?vfs=wbcache\nPRAGMA synchronous=FULL;\n\
         CREATE TABLE t(x);\nINSERT INTO t VALUES (1);\nSELECT wbcache_stats();\n",
        load = load_line(),
        db = db.display(),
    );
    let out = shell(&script, &[("WBCACHE_OPTIONS", "capacity=32M,io=threads")]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "shell failed: {stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "two results: {stdout}{}", text(&out.stderr));
    for json in &lines {
        assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
        assert!(json.contains("\"io_backend\":\"threads\""), "{json}");
        assert!(json.contains(&format!("\"capacity\":{}", 32 << 20)), "WBCACHE_OPTIONS's cache: {json}");
    }
    assert!(lines[0].contains("\"fsyncs\":0,"), "nothing synced yet: {}", lines[0]);
    assert!(!lines[1].contains("\"fsyncs\":0,"), "the commits synced: {}", lines[1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_settings_fail_the_load_and_name_the_setting() {
    if !shell_or_skip() {
        return;
    }
    let script = format!("{}SELECT 'loaded';\n", load_line());
    for (key, value, named) in [
        ("WBCACHE_OPTIONS", "capacity=lots", "capacity"),
        ("WBCACHE_OPTIONS", "capacity=64M,no_such_key=1", "no_such_key"),
        (
            "WBCACHE_OPTIONS",
            "capacity=64M,dirty_limit=128M",
            "dirty_limit=128M must be positive and at most capacity=64M",
        ),
        ("WBCACHE_SQLITE_DEFAULT", "yes", "WBCACHE_SQLITE_DEFAULT"),
    ] {
        let out = shell(&script, &[(key, value)]);
        let stderr = text(&out.stderr);
        assert!(stderr.contains("Error"), "{key}={value}: the load fails: {stderr}");
        assert!(stderr.contains(named), "{key}={value}: the error names '{named}': {stderr}");
        // In the option string's words, not the Rust API's.
        assert!(!stderr.contains("Config::") && !stderr.contains("_bytes"), "{key}={value}: {stderr}");
    }
}
