//! What runs killed outright (SIGKILL, a crash) left behind, found and
//! removed when the next run starts: their fresh directories
//! (`wbcache-bench-N`, in the places a run works in) and their memory
//! cgroups (`wbcache-bench-N-M`), N being the process id of a run that is
//! gone (no `/proc/N`). A run holds a lock on its directory while it runs
//! ([`lock`]), so the directory of a live run this one cannot see (in
//! another pid namespace, on the same disk) stays; only this user's
//! directories are touched.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::cgroup;

const PREFIX: &str = "wbcache-bench-";

/// The run a directory's name (`wbcache-bench-N`) or, with `cgroup`, a
/// memory cgroup's (`wbcache-bench-N-M`) names: N.
fn pid_in(name: &str, cgroup: bool) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, seq) = match rest.split_once('-') {
        Some((pid, seq)) => (pid, Some(seq)),
        None => (rest, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || seq.is_some() != cgroup || seq.is_some_and(|s| !digits(s)) {
        return None;
    }
    pid.parse().ok()
}

/// Whether run `pid` is over: not this one, and no such process.
fn gone(pid: u32) -> bool {
    pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
}

/// Takes the run's lock on its directory `dir`, held until the returned
/// file is closed (by the process's end, however it ends); `None` when
/// another process holds it.
pub fn lock(dir: &Path) -> Option<fs::File> {
    let file = fs::File::open(dir).ok()?;
    // SAFETY: flock(2) on a descriptor this function owns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (rc == 0).then_some(file)
}

/// A directory (not a link to one) of this user's.
fn mine(path: &Path) -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == me)
}

/// Removes the directories of runs that are gone from each of `parents`
/// (each looked at once): the ones removed.
fn remove_stale_dirs(parents: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut removed = Vec::new();
    for parent in parents.iter().filter_map(|p| fs::canonicalize(p).ok()) {
        if seen.contains(&parent) {
            continue;
        }
        seen.push(parent.clone());
        let Ok(entries) = fs::read_dir(&parent) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(pid) = entry.file_name().to_str().and_then(|n| pid_in(n, false)) else { continue };
            if !gone(pid) || !mine(&path) {
                continue;
            }
            // Locked: a live run, whose process this one cannot see.
            let Some(_lock) = lock(&path) else { continue };
            if fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

/// Removes what runs that are gone left behind: their directories in
/// `parents` and their memory cgroups. The note that says what was
/// removed, if anything was.
pub fn remove_stale(parents: &[PathBuf]) -> Option<String> {
    let dirs = remove_stale_dirs(parents);
    let cgroups = cgroup::remove_matching(|name| pid_in(name, true).is_some_and(gone));
    let mut parts = Vec::new();
    if !dirs.is_empty() {
        parts.push(format!(
            "{} ({})",
            count(dirs.len(), "temporary directory", "temporary directories"),
            listed(&dirs)
        ));
    }
    if !cgroups.is_empty() {
        parts.push(format!("{} ({})", count(cgroups.len(), "memory cgroup", "memory cgroups"), listed(&cgroups)));
    }
    (!parts.is_empty()).then(|| format!("removed what runs killed before their end left behind: {}", parts.join(", ")))
}

fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The first three paths, and how many more.
fn listed(paths: &[PathBuf]) -> String {
    let mut shown: Vec<String> = paths.iter().take(3).map(|p| p.display().to_string()).collect();
    if paths.len() > 3 {
        shown.push(format!("and {} more", paths.len() - 3));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_runs_are_recognised() {
        assert_eq!(pid_in("wbcache-bench-4242", false), Some(4242));
        assert_eq!(pid_in("wbcache-bench-4242-7", true), Some(4242));
        for (name, cgroup) in [
            ("wbcache-bench-4242-7", false),
            ("wbcache-bench-4242", true),
            ("wbcache-bench-", false),
            ("wbcache-bench-42x", false),
            ("wbcache-bench-42-", true),
            ("wbcache-bench-probe-1", false),
            (".wbcache-bench-probe-1", false),
            ("other-4242", false),
        ] {
            assert_eq!(pid_in(name, cgroup), None, "{name} {cgroup}");
        }
    }

    /// A gone run's directory is removed; a live run's (this one's, and
    /// one locked by a live process), another name and a file stay.
    #[test]
    fn only_directories_of_gone_runs_are_removed() {
        let parent = std::env::temp_dir().join(format!("wbcache-leftovers-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&parent);
        fs::create_dir_all(&parent).unwrap();
        // A process id that is surely gone: a child that exited and was reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let stale = parent.join(format!("wbcache-bench-{dead_pid}"));
        fs::create_dir_all(stale.join("sub")).unwrap();
        fs::write(stale.join("sub/data"), b"x").unwrap();
        let own = parent.join(format!("wbcache-bench-{}", std::process::id()));
        fs::create_dir(&own).unwrap();
        let other = parent.join("wbcache-bench-x");
        fs::create_dir(&other).unwrap();
        let file = parent.join("wbcache-bench-1");
        fs::write(&file, b"x").unwrap();
        if gone(dead_pid) {
            let removed = remove_stale_dirs(&[parent.clone(), parent.join(".")]);
            assert_eq!(removed, [fs::canonicalize(&parent).unwrap().join(stale.file_name().unwrap())]);
            assert!(!stale.exists());
        }
        assert!(own.is_dir() && other.is_dir() && file.is_file());
        let locked = parent.join(format!("wbcache-bench-{dead_pid}"));
        fs::create_dir(&locked).unwrap();
        let held = lock(&locked).expect("the lock");
        assert!(lock(&locked).is_none(), "held by another open file");
        assert!(remove_stale_dirs(std::slice::from_ref(&parent)).is_empty(), "a locked directory stays");
        drop(held);
        fs::remove_dir_all(&parent).unwrap();
    }
}
