//! The cross-process lock registry gives every inode number its own byte:
//! two processes cache two different files under the library side by
//! side, whatever their inode numbers (inodes 2k and 2k+1 once shared a
//! byte).
//!
//! A file another process holds is never refused any more: the second
//! process opens it through the kernel instead. So that a second process
//! succeeds proves nothing; what it proves is its statistics
//! (`WBCACHE_STATS`): its 1-byte write was cached and written back at
//! close (`written_bytes_total > 0`), which a write through the kernel is
//! not (`written_bytes_total` 0). Were the two inodes' bytes one, the
//! holder's write lock on it would send the second process's open to the
//! kernel exactly as an open of the held file itself does, which the
//! test also runs: its line shows 0, and the test would fail.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Holds `argv[1]` open (a managed file, written) until its stdin closes;
/// says `held` once it has it. Opens `argv[1]` and exits 0 without
/// `--hold`.
const SOURCE: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_WRONLY);
    if (fd < 0) { perror(argv[1]); return 1; }
    if (write(fd, "x", 1) != 1) return 1;
    if (argc > 2 && strcmp(argv[2], "--hold") == 0) {
        char c;
        puts("held");
        fflush(stdout);
        while (read(0, &c, 1) > 0) {}
    }
    return close(fd) == 0 ? 0 : 1;
}
"#;

/// The preload library built with this test (see `stdio.rs`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.join("libwbcache_preload.so"), deps.parent().unwrap().join("libwbcache_preload.so")]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).unwrap())
        .expect("cargo builds libwbcache_preload.so with the tests")
}

/// Two files of `dir` whose inode numbers are 2k and 2k+1.
fn neighbours(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashMap::new();
    for i in 0..10_000 {
        let path = dir.join(format!("f{i}"));
        std::fs::write(&path, b"").unwrap();
        let ino = path.metadata().unwrap().ino();
        if let Some(other) = seen.get(&(ino ^ 1)) {
            return if ino % 2 == 0 { (path, PathBuf::clone(other)) } else { (PathBuf::clone(other), path) };
        }
        seen.insert(ino, path);
    }
    panic!("no two neighbouring inode numbers among 10000 new files");
}

#[test]
fn files_with_neighbouring_inode_numbers_are_cached_by_two_processes() {
    let _claim = common::Claim::shared();
    let dir = std::env::temp_dir().join(format!("wbcache-preload-locks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("files")).unwrap();
    std::fs::write(dir.join("hold.c"), SOURCE).unwrap();
    let cc = Command::new("cc").arg("-o").arg(dir.join("hold")).arg(dir.join("hold.c")).status();
    assert!(cc.expect("cc (gcc) is needed").success());
    let (even, odd) = neighbours(&dir.join("files"));
    let under_library = |args: &[&Path]| {
        let mut command = Command::new(dir.join("hold"));
        command.args(args).env("LD_PRELOAD", library()).env("WBCACHE_PATHS", dir.join("files"));
        command.env_remove("WBCACHE_OPTIONS").env_remove("WBCACHE_STATS");
        command
    };
    let mut holder =
        under_library(&[&even, Path::new("--hold")]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut said = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut said).unwrap();
    assert_eq!(said, "held\n");
    // The second process's statistics line, after its write to `file`.
    let second = |file: &Path| {
        let stats = dir.join("stats.jsonl");
        let _ = std::fs::remove_file(&stats);
        let out = under_library(&[file]).env("WBCACHE_STATS", &stats).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "the second process, {}: {stderr}", file.display());
        let lines = common::stats_lines(&stats);
        assert_eq!(lines.len(), 1, "the second process's statistics, {}", file.display());
        common::stat(&lines[0], "written_bytes_total")
    };
    let neighbour = second(&odd);
    // The control: the held file itself, opened through the kernel.
    let same = second(&even);
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(neighbour > 0, "the file next to a held one was not cached (written_bytes_total {neighbour})");
    assert_eq!(same, 0, "a write through the kernel counted as the cache's: the check above proves nothing");
}
