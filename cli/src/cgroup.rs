//! Memory cgroups for the kernel engines: each kernel-engine measurement
//! runs in a fresh child cgroup limited to `--memory`, so the kernel's page
//! cache gets the same memory as wbcache's `capacity`.
//!
//! cgroup v2 when `/sys/fs/cgroup/cgroup.controllers` exists (the child is
//! made under the root, where the memory controller can be enabled), else v1
//! at `/sys/fs/cgroup/memory`, nested under this process's own memory cgroup
//! so the worker stays within any limit the caller runs under. The cgroups
//! of runs killed before their end are removed by the next run
//! ([`remove_matching`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct MemCgroups {
    v2: bool,
    base: PathBuf,
    limit: u64,
    seq: u32,
}

pub struct CgroupHandle {
    path: PathBuf,
    v2: bool,
}

/// The memory cgroup hierarchy: cgroup v2's root (`true`), or v1's
/// memory hierarchy at this process's own memory cgroup in it.
fn hierarchy() -> Result<(bool, PathBuf), String> {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return Ok((true, PathBuf::from("/sys/fs/cgroup")));
    }
    if !Path::new("/sys/fs/cgroup/memory").is_dir() {
        return Err("no memory cgroup hierarchy at /sys/fs/cgroup".into());
    }
    let root = PathBuf::from("/sys/fs/cgroup/memory");
    let own = fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
                ctrls.split(',').any(|c| c == "memory").then(|| path.trim_start_matches('/').to_string())
            })
        })
        .unwrap_or_default();
    let nested = root.join(&own);
    Ok((false, if !own.is_empty() && nested.is_dir() { nested } else { root }))
}

/// Removes the cgroups in the hierarchy (where [`MemCgroups`] makes them)
/// whose name `stale` picks, when they have no process left: the ones
/// removed.
pub fn remove_matching(stale: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok((v2, base)) = hierarchy() else { return Vec::new() };
    let Ok(entries) = fs::read_dir(&base) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_str().is_some_and(&stale) {
            continue;
        }
        let path = entry.path();
        if !v2 {
            let _ = fs::write(path.join("memory.force_empty"), "0");
        }
        if fs::remove_dir(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

impl MemCgroups {
    /// Finds a usable hierarchy and proves it by creating and removing a
    /// probe cgroup. The error says why not (for the note line).
    pub fn setup(limit: u64) -> Result<MemCgroups, String> {
        let (v2, base) = hierarchy()?;
        if v2 {
            let ctl = fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
            if !ctl.split_whitespace().any(|c| c == "memory") {
                return Err("cgroup v2 has no memory controller".into());
            }
            let sub = fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
            if !sub.split_whitespace().any(|c| c == "memory") {
                fs::write(base.join("cgroup.subtree_control"), "+memory")
                    .map_err(|e| format!("cannot enable the v2 memory controller: {e}"))?;
            }
        }
        let mut me = MemCgroups { v2, base, limit, seq: 0 };
        let probe = me.create().map_err(|e| format!("cannot create a memory cgroup: {e}"))?;
        probe.remove();
        Ok(me)
    }

    pub fn describe(&self) -> String {
        format!("cgroup {} at {}", if self.v2 { "v2" } else { "v1" }, self.base.display())
    }

    pub fn version(&self) -> &'static str {
        if self.v2 {
            "v2"
        } else {
            "v1"
        }
    }

    /// A fresh cgroup limited to the memory limit.
    pub fn create(&mut self) -> io::Result<CgroupHandle> {
        self.seq += 1;
        let path = self.base.join(format!("wbcache-bench-{}-{}", std::process::id(), self.seq));
        fs::create_dir(&path)?;
        let handle = CgroupHandle { path, v2: self.v2 };
        let set = if self.v2 {
            let r = fs::write(handle.path.join("memory.max"), self.limit.to_string());
            let _ = fs::write(handle.path.join("memory.swap.max"), "0");
            r
        } else {
            fs::write(handle.path.join("memory.limit_in_bytes"), self.limit.to_string())
        };
        if let Err(e) = set {
            handle.remove();
            return Err(e);
        }
        Ok(handle)
    }
}

impl CgroupHandle {
    pub fn add_pid(&self, pid: u32) -> io::Result<()> {
        fs::write(self.path.join("cgroup.procs"), pid.to_string())
    }

    /// How many processes the cgroup's OOM killer killed.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        fs::read_to_string(self.path.join(file))
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("oom_kill ").and_then(|v| v.trim().parse().ok())))
            .unwrap_or(0)
    }

    /// Removes the cgroup (after its processes exited), retrying while the
    /// kernel still counts the exited task.
    pub fn remove(self) {
        if !self.v2 {
            let _ = fs::write(self.path.join("memory.force_empty"), "0");
        }
        for _ in 0..50 {
            match fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!("note: could not remove cgroup {}", self.path.display());
    }
}
