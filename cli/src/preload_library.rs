//! The preload library, `libwbcache_preload.so`, as the processes this
//! binary starts under it find and use it: where it is (`WBCACHE_PRELOAD`,
//! else beside this binary, as `cargo build` leaves it, else in `../lib`
//! from this binary's directory, as `wbcache install` puts it), the
//! `LD_PRELOAD` that puts it first, and the stats file its cache appends to
//! as a program exits (`WBCACHE_STATS`), read back and merged. `wbcache
//! run`, the bench's `wbcache-preload` workers and the programs a workload
//! runs under it (fio, db_bench) all come here, so they find the same
//! library the same way. It owns no state: the files it names belong to
//! the run that asked.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

/// The library's file name, next to the `wbcache` binary (or in the
/// installed tree's `lib/`).
pub const PRELOAD_LIBRARY: &str = "libwbcache_preload.so";

/// Where the preload library is: `WBCACHE_PRELOAD` if set, else beside
/// this binary, else in `../lib` from its directory (the bench's workers,
/// which run programs under it, ask the same way). The error names every
/// place looked at.
pub fn library() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("WBCACHE_PRELOAD") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the wbcache binary: {e}"))?;
    let candidates = candidates(&exe);
    if let Some(found) = candidates.iter().find(|path| path.is_file()) {
        return Ok(found.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|path| path.display().to_string()).collect();
    Err(format!(
        "{PRELOAD_LIBRARY} not found: looked at {} (build it with cargo build --release, install it with \
         wbcache install, or name it with WBCACHE_PRELOAD)",
        looked.join(" and ")
    ))
}

/// Where the library may be for the binary `exe`, in order: beside it
/// (the build's `target/release/`), then `../lib` (an installed tree).
fn candidates(exe: &Path) -> [PathBuf; 2] {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let installed = dir.parent().unwrap_or(dir).join("lib").join(PRELOAD_LIBRARY);
    [dir.join(PRELOAD_LIBRARY), installed]
}

/// `LD_PRELOAD` with the library first and any the caller set after it.
pub fn preload_list(lib: &Path) -> OsString {
    let mut list = lib.as_os_str().to_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        list.push(":");
        list.push(existing);
    }
    list
}

/// Where the preload library in each program run in `dir` appends its
/// cache's stats as it exits (`WBCACHE_STATS`): beside `dir`, outside the
/// cached paths, so that the report is not itself cached.
pub fn program_stats_path(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(".wbcache-stats.jsonl");
    PathBuf::from(name)
}

/// The stats the programs run in `dir` left (see [`program_stats_path`]),
/// as one JSON object, and the file removed; `None` when none was left.
/// Several processes' lines (fio's job processes, two programs at once)
/// are merged: counts and sums added, maxima and percentiles the larger
/// of theirs (a percentile of the whole cannot be rebuilt from them).
pub fn take_program_stats(dir: &Path) -> Option<String> {
    let path = program_stats_path(dir);
    let text = fs::read_to_string(&path).ok()?;
    let _ = fs::remove_file(&path);
    let lines: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let merged = lines.into_iter().reduce(|mut a, b| {
        merge_stats(&mut a, &b);
        a
    })?;
    Some(merged.to_string())
}

/// Merges `b` into `a`: numbers under keys that count or sum are added,
/// every other number takes the larger value; objects recurse.
fn merge_stats(a: &mut serde_json::Value, b: &serde_json::Value) {
    const ADDED: &[&str] = &["ios", "bytes", "latency_us_total", "written_bytes_total", "hits", "misses", "fsyncs"];
    let (Some(a), Some(b)) = (a.as_object_mut(), b.as_object()) else { return };
    for (key, bv) in b {
        match (a.get_mut(key), bv) {
            (Some(av @ serde_json::Value::Object(_)), serde_json::Value::Object(_)) => merge_stats(av, bv),
            (Some(av), serde_json::Value::Number(bn)) if av.is_u64() && bn.is_u64() => {
                let (x, y) = (av.as_u64().unwrap_or(0), bn.as_u64().unwrap_or(0));
                *av =
                    serde_json::Value::from(if ADDED.contains(&key.as_str()) { x.saturating_add(y) } else { x.max(y) });
            }
            (None, _) => {
                a.insert(key.clone(), bv.clone());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_looked_for_beside_the_binary_then_in_lib() {
        let [beside, installed] = candidates(Path::new("/opt/wb/bin/wbcache"));
        assert_eq!(beside, Path::new("/opt/wb/bin/libwbcache_preload.so"));
        assert_eq!(installed, Path::new("/opt/wb/lib/libwbcache_preload.so"));
    }

    #[test]
    fn program_stats_are_merged_and_taken_once() {
        let dir = std::env::temp_dir().join(format!("wbcache-program-stats-{}", std::process::id()));
        let path = program_stats_path(&dir);
        assert!(path.to_string_lossy().ends_with(".wbcache-stats.jsonl") && !path.starts_with(&dir));
        assert_eq!(take_program_stats(&dir), None, "nothing left");
        fs::write(
            &path,
            "{\"device\":{\"read\":{\"ios\":3,\"lat_us\":{\"p99\":500}}},\"io_backend\":\"uring\"}\n\
             not json\n\
             {\"device\":{\"read\":{\"ios\":4,\"lat_us\":{\"p99\":200}}},\"extra\":1}\n",
        )
        .unwrap();
        let merged: serde_json::Value = serde_json::from_str(&take_program_stats(&dir).unwrap()).unwrap();
        assert_eq!(merged["device"]["read"]["ios"], 7, "counts add up");
        assert_eq!(merged["device"]["read"]["lat_us"]["p99"], 500, "percentiles: the larger");
        assert_eq!((merged["io_backend"].as_str(), merged["extra"].as_u64()), (Some("uring"), Some(1)));
        assert!(!path.exists(), "the file is taken");
    }
}
