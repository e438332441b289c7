//! The recorder's trace: what a program did to the files under the
//! recorded directory, one call per line, in the order the calls took
//! effect.
//!
//! The preload library writes it (`WBCACHE_CRASHTEST_TRACE`) while the
//! program runs: one JSON object per line in `trace.jsonl`, and the bytes
//! of every write appended to `trace.data`, where its line points
//! (`data_at`). A file is named by its inode number (`ino`), which stays
//! the same across renames; a name by its path relative to the recorded
//! directory. Each line carries `stdout`: how many bytes of its standard
//! output the program had written when the call returned, which is what
//! it had acknowledged by then. docs/crashtest.md describes the format.
//!
//! This module reads the trace and says what each call is to the
//! persistence models: which file or names it changes, and whether it is
//! a durability point. It owns no state beyond the trace.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One call the program made, as the recorder saw it take effect.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Call {
    /// A new, empty file at `path` (`open` with `O_CREAT` that made it).
    Create {
        path: PathBuf,
        ino: u64,
    },
    /// The file's size set to `size` (`ftruncate`, `truncate`, an
    /// `O_TRUNC` open).
    Truncate {
        ino: u64,
        size: u64,
    },
    /// `len` bytes written at `off` (after an `O_APPEND` write, where they
    /// landed); `sync` says whether the write itself was a durability
    /// point (`O_DSYNC`, `O_SYNC`, `RWF_DSYNC`, `RWF_SYNC`).
    Write {
        ino: u64,
        off: u64,
        len: u64,
        data_at: u64,
        sync: WriteSync,
    },
    /// `fallocate(2)` with `mode`, over `len` bytes at `off`.
    Fallocate {
        ino: u64,
        mode: i32,
        off: u64,
        len: u64,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Link {
        from: PathBuf,
        to: PathBuf,
    },
    Unlink {
        path: PathBuf,
    },
    Mkdir {
        path: PathBuf,
    },
    Rmdir {
        path: PathBuf,
    },
    /// `fsync` of a file.
    Fsync {
        ino: u64,
    },
    /// `fdatasync` of a file.
    Fdatasync {
        ino: u64,
    },
    /// `fsync` or `fdatasync` of a directory.
    FsyncDir {
        path: PathBuf,
    },
    /// `sync_file_range` with `SYNC_FILE_RANGE_WAIT_AFTER`: the range's
    /// data written, its metadata (the size) not.
    SyncRange {
        ino: u64,
        off: u64,
        len: u64,
    },
    /// `sync(2)` or `syncfs(2)`: everything durable.
    Sync,
    /// The last descriptor of the file closed (ext4's `auto_da_alloc`
    /// starts the writeback of a file truncated to zero at its close).
    Close {
        ino: u64,
    },
    /// A shared, writable mapping of the file: its stores through the
    /// mapping are not recorded.
    Mapped {
        ino: u64,
    },
    /// A call the recorder cannot follow (a raw `io_uring`, an
    /// `fallocate` that moves bytes): the trace is incomplete.
    Unsupported {
        what: String,
    },
}

/// Whether a write was a durability point of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteSync {
    None,
    /// `O_DSYNC`, `RWF_DSYNC`: the data and the size needed to read it.
    Data,
    /// `O_SYNC`, `RWF_SYNC`: the data and all of the file's metadata.
    All,
}

/// One line of the trace.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Record {
    #[serde(flatten)]
    pub call: Call,
    /// Bytes of standard output the program had written when the call
    /// returned (see [`Trace::acknowledged`]).
    #[serde(default)]
    pub stdout: u64,
}

impl Call {
    /// Whether the call makes something durable (a crash point follows
    /// it).
    pub fn is_durability_point(&self) -> bool {
        match self {
            Call::Fsync { .. } | Call::Fdatasync { .. } | Call::FsyncDir { .. } | Call::SyncRange { .. } => true,
            Call::Sync => true,
            Call::Write { sync, .. } => *sync != WriteSync::None,
            _ => false,
        }
    }

    /// Whether the call changes the files or their names (what a crash
    /// may keep or lose); the others only make earlier changes durable.
    pub fn changes_state(&self) -> bool {
        !matches!(
            self,
            Call::Fsync { .. }
                | Call::Fdatasync { .. }
                | Call::FsyncDir { .. }
                | Call::SyncRange { .. }
                | Call::Sync
                | Call::Close { .. }
                | Call::Mapped { .. }
                | Call::Unsupported { .. }
        )
    }

    /// The file whose data or size the call changes or syncs.
    pub fn file(&self) -> Option<u64> {
        match self {
            Call::Create { ino, .. }
            | Call::Truncate { ino, .. }
            | Call::Write { ino, .. }
            | Call::Fallocate { ino, .. }
            | Call::Fsync { ino }
            | Call::Fdatasync { ino }
            | Call::SyncRange { ino, .. }
            | Call::Close { ino }
            | Call::Mapped { ino } => Some(*ino),
            _ => None,
        }
    }

    /// Whether the call changes a name (a directory's entries).
    pub fn is_namespace(&self) -> bool {
        matches!(
            self,
            Call::Create { .. }
                | Call::Rename { .. }
                | Call::Link { .. }
                | Call::Unlink { .. }
                | Call::Mkdir { .. }
                | Call::Rmdir { .. }
        )
    }

    /// The directories whose entries the call changes.
    pub fn directories(&self) -> Vec<PathBuf> {
        let parent = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
        match self {
            Call::Create { path, .. } | Call::Unlink { path } | Call::Mkdir { path } | Call::Rmdir { path } => {
                vec![parent(path)]
            }
            Call::Rename { from, to } => {
                let mut dirs = vec![parent(to)];
                if parent(from) != parent(to) {
                    dirs.push(parent(from));
                }
                dirs
            }
            Call::Link { to, .. } => vec![parent(to)],
            _ => Vec::new(),
        }
    }

    /// A line for people: the call as the program made it.
    pub fn describe(&self, names: &dyn Fn(u64) -> String) -> String {
        match self {
            Call::Create { path, .. } => format!("create {}", path.display()),
            Call::Truncate { ino, size } => format!("truncate {} to {size}", names(*ino)),
            Call::Write { ino, off, len, sync, .. } => {
                let sync = match sync {
                    WriteSync::None => "",
                    WriteSync::Data => " (O_DSYNC)",
                    WriteSync::All => " (O_SYNC)",
                };
                format!("write {} [{off}, {}){sync}", names(*ino), off + len)
            }
            Call::Fallocate { ino, mode, off, len } => {
                format!("fallocate {} mode {mode:#x} [{off}, {})", names(*ino), off + len)
            }
            Call::Rename { from, to } => format!("rename {} -> {}", from.display(), to.display()),
            Call::Link { from, to } => format!("link {} -> {}", from.display(), to.display()),
            Call::Unlink { path } => format!("unlink {}", path.display()),
            Call::Mkdir { path } => format!("mkdir {}", path.display()),
            Call::Rmdir { path } => format!("rmdir {}", path.display()),
            Call::Fsync { ino } => format!("fsync {}", names(*ino)),
            Call::Fdatasync { ino } => format!("fdatasync {}", names(*ino)),
            Call::FsyncDir { path } => format!("fsync directory {}", shown_dir(path)),
            Call::SyncRange { ino, off, len } => format!("sync_file_range {} [{off}, {})", names(*ino), off + len),
            Call::Sync => "sync".to_string(),
            Call::Close { ino } => format!("close {}", names(*ino)),
            Call::Mapped { ino } => format!("mmap shared writable {}", names(*ino)),
            Call::Unsupported { what } => format!("unsupported: {what}"),
        }
    }
}

/// A directory's path as people read it: `.` for the recorded directory.
pub fn shown_dir(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        ".".to_string()
    } else {
        path.display().to_string()
    }
}

/// A whole trace: its records and the bytes of its writes.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub records: Vec<Record>,
    pub data: Vec<u8>,
}

impl Trace {
    /// The trace the recorder wrote at `jsonl` (its data beside it, in
    /// `<jsonl>` with the extension `data`).
    pub fn read(jsonl: &Path) -> io::Result<Trace> {
        let text = match fs::read_to_string(jsonl) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let data = match fs::read(data_path(jsonl)) {
            Ok(data) => data,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut records = Vec::new();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let record: Record = serde_json::from_str(line).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}:{}: {e}", jsonl.display(), n + 1))
            })?;
            records.push(record);
        }
        let trace = Trace { records, data };
        trace.check()?;
        Ok(trace)
    }

    /// Every write's bytes are in the data file.
    fn check(&self) -> io::Result<()> {
        for (i, r) in self.records.iter().enumerate() {
            if let Call::Write { data_at, len, .. } = r.call {
                if data_at.checked_add(len).is_none_or(|end| end > self.data.len() as u64) {
                    let message = format!("trace record {i}: its {len} bytes at {data_at} are past the data's end");
                    return Err(io::Error::new(io::ErrorKind::InvalidData, message));
                }
            }
        }
        Ok(())
    }

    /// The bytes of the write at record `index`.
    pub fn bytes(&self, index: usize) -> &[u8] {
        match self.records[index].call {
            Call::Write { data_at, len, .. } => &self.data[data_at as usize..(data_at + len) as usize],
            _ => &[],
        }
    }

    /// How many bytes of its output (`total` in all) the program had
    /// written while the files were as call `point` left them: up to the
    /// next call, or all of it after the last.
    pub fn acknowledged(&self, point: usize, total: u64) -> u64 {
        self.records.get(point + 1).map_or(total, |next| next.stdout)
    }

    /// The calls the recorder could not follow.
    pub fn unsupported(&self) -> Vec<&str> {
        self.records
            .iter()
            .filter_map(|r| match &r.call {
                Call::Unsupported { what } => Some(what.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Where the data of the trace at `jsonl` is.
pub fn data_path(jsonl: &Path) -> PathBuf {
    jsonl.with_extension("data")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_back_with_its_bytes() {
        let dir = std::env::temp_dir().join(format!("wbcache-trace-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let jsonl = dir.join("trace.jsonl");
        fs::write(
            &jsonl,
            concat!(
                "{\"op\":\"create\",\"path\":\"a\",\"ino\":7,\"stdout\":0}\n",
                "{\"op\":\"write\",\"ino\":7,\"off\":0,\"len\":3,\"data_at\":0,\"sync\":\"none\",\"stdout\":0}\n",
                "{\"op\":\"fsync\",\"ino\":7,\"stdout\":0}\n",
                "{\"op\":\"rename\",\"from\":\"a\",\"to\":\"d/b\",\"stdout\":5}\n",
            ),
        )
        .unwrap();
        fs::write(data_path(&jsonl), b"abc").unwrap();
        let trace = Trace::read(&jsonl).unwrap();
        assert_eq!(trace.records.len(), 4);
        assert_eq!(trace.bytes(1), b"abc");
        assert!(trace.records[2].call.is_durability_point() && !trace.records[1].call.is_durability_point());
        assert_eq!(trace.records[3].stdout, 5);
        assert_eq!(trace.records[3].call.directories(), [PathBuf::from("d"), PathBuf::new()]);
        fs::write(data_path(&jsonl), b"ab").unwrap();
        let e = Trace::read(&jsonl).unwrap_err();
        assert!(e.to_string().contains("past the data's end"), "{e}");
        fs::write(&jsonl, "{\"op\":\"frobnicate\"}\n").unwrap();
        let e = Trace::read(&jsonl).unwrap_err();
        assert!(e.to_string().contains("trace.jsonl:1"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
