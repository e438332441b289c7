//! Finding every cache running on the machine: each cache keeps a board
//! (a `memfd`, see `wbcache::watch`) that its owner, the owner's fork
//! children and its guardian hold open. Walking `/proc/PID/fd` finds them
//! (the boards of processes this user may inspect: all of them for root),
//! each board once however many processes hold it, and the crash table
//! beside it names the files holding unwritten data.
//!
//! Nothing here writes to the caches: boards and tables are mapped read
//! only, and a cache that ends while it is read simply drops out.

use std::collections::HashMap;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

use wbcache::watch::{self, CacheState, Figure, Figures, GuardianProgress, UnwrittenFile};

/// Files listed per cache: those with the most unwritten bytes.
pub const FILES_SHOWN: usize = 5;

/// One cache as `stat` shows it.
#[derive(Clone, Debug)]
pub struct WatchedCache {
    /// The board's `memfd` inode number: tells apart two caches of one
    /// process.
    pub board_inode: u64,
    pub owner_pid: u32,
    /// The guardian process, once started.
    pub guardian_pid: Option<u32>,
    /// The owner's command line while it lives, else the name the cache
    /// recorded.
    pub program: String,
    /// Whether the owner still holds the board (it is alive).
    pub owner_alive: bool,
    pub state: CacheState,
    /// The newest sample.
    pub figures: Figures,
    /// Per second, over the last second: (read from the stores, written
    /// back) bytes; `None` before two samples.
    pub rates: Option<Rates>,
    /// The files holding the most unwritten bytes (with `guardian=on`).
    pub files: Vec<UnwrittenFile>,
    /// Whether the cache has a crash table to list files from.
    pub has_table: bool,
    /// The guardian's progress after the owner died.
    pub guardian: GuardianProgress,
}

/// Rates over the last second of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub read_bytes_per_s: f64,
    pub written_bytes_per_s: f64,
}

impl WatchedCache {
    /// Hits over lookups, `None` before any.
    pub fn hit_ratio(&self) -> Option<f64> {
        let (hits, misses) = (self.figures.get(Figure::Hits), self.figures.get(Figure::Misses));
        (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64)
    }

    /// What the cache is doing, in words: its board's state, or that its
    /// owner is gone and the guardian has not yet said so.
    pub fn state_name(&self) -> &'static str {
        if self.state == CacheState::Running && !self.owner_alive {
            "owner-gone"
        } else {
            self.state.name()
        }
    }
}

/// The caches running now, those of `pid` only if given.
pub fn caches(pid: Option<u32>) -> Vec<WatchedCache> {
    let mut caches = running_caches();
    if let Some(pid) = pid {
        caches.retain(|c| c.owner_pid == pid);
    }
    caches
}

/// What is said when no cache is found.
pub fn none_found(pid: Option<u32>) -> String {
    let whose = match pid {
        Some(pid) => format!("of process {pid}"),
        None => "on this machine".to_string(),
    };
    // SAFETY: geteuid reads no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let hint = if root { "" } else { " (the caches of other users' programs are visible to root only)" };
    format!("no running wbcache cache {whose}{hint}")
}

/// A board or crash table found in a process's descriptors.
struct Found {
    path: std::path::PathBuf,
    /// Its `memfd`'s inode number: what the descriptor must still name
    /// when it is opened.
    inode: u64,
    holders: Vec<u32>,
}

/// Every cache whose board this process can read, by owner pid.
pub fn running_caches() -> Vec<WatchedCache> {
    let (boards, tables) = scan_descriptors();
    let mut caches: Vec<WatchedCache> = boards.values().filter_map(|found| watched_cache(found, &tables)).collect();
    caches.sort_by_key(|c| c.owner_pid);
    caches
}

/// Boards and tables held by the processes of `/proc`, by `memfd` inode.
fn scan_descriptors() -> (HashMap<u64, Found>, HashMap<u64, Found>) {
    let (mut boards, mut tables) = (HashMap::new(), HashMap::new());
    let me = std::process::id();
    let Ok(procs) = fs::read_dir("/proc") else { return (boards, tables) };
    for proc in procs.flatten() {
        let Some(pid) = proc.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(fds) = fs::read_dir(proc.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else { continue };
            let target = target.to_string_lossy();
            let found = if target.starts_with(&format!("/memfd:{}", watch::BOARD_MEMFD_NAME)) {
                &mut boards
            } else if target.starts_with(&format!("/memfd:{}", watch::TABLE_MEMFD_NAME)) {
                &mut tables
            } else {
                continue;
            };
            let Ok(meta) = fs::metadata(fd.path()) else { continue };
            let inode = meta.ino();
            let entry = found.entry(inode).or_insert_with(|| Found { path: fd.path(), inode, holders: Vec::new() });
            entry.holders.push(pid);
        }
    }
    (boards, tables)
}

/// The cache of the board `found`, if it can still be read (and has
/// published its first sample: a cache that has not shows at the next
/// look).
fn watched_cache(found: &Found, tables: &HashMap<u64, Found>) -> Option<WatchedCache> {
    let board = open(found)?;
    let reading = watch::read_board(&board).ok()?;
    let figures = reading.newest?;
    let owner = owner_among(&found.holders, reading.owner_pid);
    let owner_pid = owner.unwrap_or(reading.owner_pid);
    let table = tables.get(&reading.table_inode).filter(|_| reading.table_inode != 0);
    let mut files = table.and_then(open).and_then(|fd| watch::read_unwritten_files(&fd).ok()).unwrap_or_default();
    files.truncate(FILES_SHOWN);
    Some(WatchedCache {
        board_inode: found.inode,
        owner_pid,
        guardian_pid: (reading.guardian_pid != 0).then_some(reading.guardian_pid),
        program: owner.and_then(command_line).unwrap_or(reading.program),
        owner_alive: owner.is_some(),
        state: reading.state,
        figures,
        rates: reading.second_before.map(|before| rates_between(&before, &figures)),
        files,
        has_table: table.is_some(),
        guardian: reading.guardian,
    })
}

/// Bytes read and written back per second from `before` to `after`.
pub fn rates_between(before: &Figures, after: &Figures) -> Rates {
    let seconds = after.get(Figure::TimeNs).saturating_sub(before.get(Figure::TimeNs)) as f64 / 1e9;
    let per_second = |figure: Figure| {
        let delta = after.get(figure).saturating_sub(before.get(figure)) as f64;
        if seconds > 0.0 {
            delta / seconds
        } else {
            0.0
        }
    };
    Rates {
        read_bytes_per_s: per_second(Figure::ReadBytes),
        written_bytes_per_s: per_second(Figure::WrittenBytesTotal),
    }
}

/// Opens what `found`'s descriptor names, if it still names it: the
/// process may have closed that number and opened something else there
/// since the scan (a FIFO would block an open without `O_NONBLOCK`, a
/// terminal would become the controlling one without `O_NOCTTY`).
fn open(found: &Found) -> Option<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file =
        fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(&found.path).ok()?;
    let meta = file.metadata().ok()?;
    let regular = meta.file_type().is_file() && !meta.file_type().is_fifo();
    (regular && meta.ino() == found.inode).then(|| OwnedFd::from(file))
}

/// The owner among the processes holding its board, by the pid it
/// recorded: that pid itself, or a holder that has it in a PID namespace
/// of its own (a container's program seen from the host: the last pid of
/// its `NSpid` line), shown by its pid here. `None` when the owner is not
/// among them (it died).
fn owner_among(holders: &[u32], recorded_pid: u32) -> Option<u32> {
    if holders.contains(&recorded_pid) {
        return Some(recorded_pid);
    }
    holders.iter().copied().find(|holder| {
        let status = fs::read_to_string(format!("/proc/{holder}/status")).unwrap_or_default();
        let innermost = innermost_pid(&status);
        innermost == Some(recorded_pid) && innermost != Some(*holder)
    })
}

/// The last pid of a `/proc/PID/status` text's `NSpid` line: the pid the
/// process has in its own PID namespace.
fn innermost_pid(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// `pid`'s command line, its arguments joined by spaces.
fn command_line(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> =
        raw.split(|b| *b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
    (!words.is_empty()).then(|| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(time_ns: u64, read: u64, written: u64) -> Figures {
        let mut f = Figures::default();
        f.set(Figure::TimeNs, time_ns);
        f.set(Figure::ReadBytes, read);
        f.set(Figure::WrittenBytesTotal, written);
        f
    }

    #[test]
    fn a_pid_in_a_namespace_of_its_own_is_the_last_of_nspid() {
        assert_eq!(innermost_pid("Name:\tdb\nNSpid:\t41230\t7\nNgid:\t0\n"), Some(7));
        assert_eq!(innermost_pid("Name:\tdb\nNSpid:\t41230\n"), Some(41230));
        assert_eq!(innermost_pid("Name:\tdb\n"), None);
    }

    #[test]
    fn rates_are_per_second_of_the_samples_time() {
        let r = rates_between(&figures(1_000_000_000, 0, 10 << 20), &figures(1_500_000_000, 4 << 20, 20 << 20));
        assert_eq!(r, Rates { read_bytes_per_s: (8 << 20) as f64, written_bytes_per_s: (20 << 20) as f64 });
        let same = rates_between(&figures(5, 1, 1), &figures(5, 9, 9));
        assert_eq!(same, Rates { read_bytes_per_s: 0.0, written_bytes_per_s: 0.0 });
    }
}
