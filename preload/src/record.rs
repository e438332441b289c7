//! The crash-test recorder (`wbcache crashtest`): while
//! `WBCACHE_CRASHTEST_TRACE` names a trace file, every call that changes a
//! file or a name under `WBCACHE_CRASHTEST_ROOT`, and every durability
//! point, is written to the trace as it takes effect: one JSON line per
//! call (`<trace>`), the bytes of each write appended to `<trace>.data`.
//! The format is the command line's `crashtest::trace`, described in
//! docs/crashtest.md.
//!
//! Each recorded call and its line are one step: the call runs with the
//! recorder's lock held (a process-wide mutex, then an `flock` of the
//! trace through a descriptor of this process's own, which the program's
//! other processes take too, forked ones included), so no other recorded
//! call comes between a call and its line, whatever the threads or
//! processes. Files are named by inode, names by their path relative to
//! the root. Calls the recorder cannot follow on files under the root (a
//! shared writable mapping, a symbolic link, `O_TMPFILE`, a copy whose
//! bytes cannot be read back) are recorded as such, and the crash test
//! refuses or leaves them out. A call made from inside a recorded one
//! (stdio's buffer flushed by `write`) is recorded once, by the outer.
//!
//! Without the variable, every function here runs its call and nothing
//! else: one load of a `OnceLock`.

use std::cell::Cell;
use std::ffi::{CStr, OsStr};
use std::fmt::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use libc::{c_char, c_int, c_void, ssize_t};

use crate::real;

/// The recorder of this process, if the crash test asked for one.
struct Recorder {
    trace_path: PathBuf,
    trace: c_int,
    data: c_int,
    root: PathBuf,
    root_dev: u64,
    /// The crash test's file of the program's standard output (every
    /// process's), read-only: its size is what the program acknowledged.
    output: c_int,
}

static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();
/// The process-wide lock, holding the descriptor this process takes the
/// trace's `flock` through, with the process it was opened in: a child
/// forked without `exec` shares its parent's descriptions, whose `flock`
/// would not keep the two apart, and opens one of its own.
static LOCK: Mutex<Option<(u32, c_int)>> = Mutex::new(None);

thread_local! {
    /// Set while this thread runs a recorded call.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

fn recorder() -> Option<&'static Recorder> {
    RECORDER.get_or_init(open_recorder).as_ref()
}

/// The trace and data files, opened for appending, and the root.
fn open_recorder() -> Option<Recorder> {
    let trace_path = std::env::var_os("WBCACHE_CRASHTEST_TRACE")?;
    let root = std::fs::canonicalize(std::env::var_os("WBCACHE_CRASHTEST_ROOT")?).ok()?;
    let mut data_path = PathBuf::from(&trace_path);
    data_path.set_extension("data");
    let open = |path: &Path| -> Option<c_int> {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path; the C library's open.
        let fd = unsafe { real::open(c.as_ptr(), flags, 0o600) };
        (fd >= 0).then_some(fd)
    };
    let (trace, data) = (open(Path::new(&trace_path))?, open(&data_path)?);
    let root_dev = stat_path(&root)?.st_dev;
    let output = std::env::var_os("WBCACHE_CRASHTEST_STDOUT").map_or(-1, |path| {
        std::ffi::CString::new(path.into_vec()).map_or(-1, |c| {
            // SAFETY: a NUL-terminated path; the C library's open.
            unsafe { real::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) }
        })
    });
    Some(Recorder { trace_path: PathBuf::from(trace_path), trace, data, root, root_dev, output })
}

/// Runs a recorded call: `run` with the recorder's lock held, then `line`
/// (given `run`'s answer) appended to the trace. Outside a recording,
/// inside another recorded call, or for a call that touches nothing under
/// the root (`relevant` false: a pipe, the engine's own `mmap` of its
/// rings, which must never wait for the lock a recorded call holds while
/// it builds the cache), `run` alone.
fn recorded<R: Copy>(relevant: bool, run: impl FnOnce() -> R, line: impl FnOnce(&Recorder, R) -> Option<String>) -> R {
    let Some(rec) = recorder().filter(|_| relevant) else { return run() };
    if BUSY.with(|b| b.replace(true)) {
        return run();
    }
    let mut held = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    let lock_fd = match *held {
        Some((owner, fd)) if owner == pid => fd,
        _ => {
            let c = std::ffi::CString::new(rec.trace_path.as_os_str().as_bytes()).unwrap_or_default();
            // SAFETY: a NUL-terminated path; the C library's open.
            let fd = unsafe { real::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
            *held = Some((pid, fd));
            fd
        }
    };
    // SAFETY: flock(2) of this process's own descriptor of the trace.
    unsafe { libc::flock(lock_fd, libc::LOCK_EX) };
    let answer = run();
    if let Some(mut text) = line(rec, answer) {
        let _ = writeln!(text, ",\"stdout\":{}}}", rec.output_bytes());
        write_all(rec.trace, text.as_bytes());
    }
    // SAFETY: as above.
    unsafe { libc::flock(lock_fd, libc::LOCK_UN) };
    drop(held);
    BUSY.with(|b| b.set(false));
    answer
}

/// Where a write went: at the position, or at an offset.
#[derive(Clone, Copy)]
pub enum At {
    Position,
    Offset(u64),
}

/// A write on `fd`, with `pwritev2`'s flags `rwf`, of the bytes
/// `bytes(off, n)` gives: the `n` the call wrote, at `off`.
pub fn write(
    fd: c_int,
    at: At,
    rwf: c_int,
    bytes: impl FnOnce(u64, usize) -> Vec<u8>,
    run: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let Some(rec) = recorder() else { return run() };
    // The file, found once (a descriptor names the same file after the
    // write); only its size is asked again afterwards.
    let file = rec.file_of(fd).map(|(ino, _, _)| ino);
    let relevant = file.is_some();
    let before = match at {
        At::Offset(off) => Some(off),
        At::Position if relevant => position(fd),
        At::Position => None,
    };
    recorded(relevant, run, |rec, n| {
        let n = usize::try_from(n).ok().filter(|n| *n > 0)?;
        let ino = file?;
        let flags = status_flags(fd);
        let append = flags & libc::O_APPEND != 0 || rwf & libc::RWF_APPEND != 0;
        let off = if append {
            let size_after = match crate::table::get(fd) {
                Some(desc) => desc.file.len().ok()?,
                None => stat_fd(fd)?.st_size as u64,
            };
            size_after - n as u64
        } else {
            before?
        };
        let sync = if flags & libc::O_SYNC == libc::O_SYNC || rwf & libc::RWF_SYNC != 0 {
            "all"
        } else if flags & libc::O_DSYNC != 0 || rwf & libc::RWF_DSYNC != 0 {
            "data"
        } else {
            "none"
        };
        let bytes = bytes(off, n);
        if bytes.len() != n {
            return Some(unsupported(&format!(
                "a write of {n} bytes into inode {ino} whose bytes could not be read back"
            )));
        }
        let data_at = rec.append_data(&bytes)?;
        Some(format!(
            "{{\"op\":\"write\",\"ino\":{ino},\"off\":{off},\"len\":{n},\"data_at\":{data_at},\"sync\":\"{sync}\""
        ))
    })
}

/// The `n` bytes at `off` of the file `fd` is open on, as a reader of it
/// sees them now: through the cache for a managed descriptor (whatever its
/// access mode), else through a read-only descriptor of its own. What a
/// copy into it (`copy_file_range`, `sendfile`) wrote, which the recorder
/// never held; short when they cannot be read.
pub fn read_back(fd: c_int, off: u64, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    let mut done = 0;
    if let Some(desc) = crate::table::get(fd) {
        // A handle of its own that may read (the descriptor's may not).
        let options = wbcache::OpenOptions::new().read(true);
        let reader = crate::state::built().and_then(|s| s.with_cache(|cache| cache.open(&desc.path, &options)).ok());
        while let Some(file) = reader.as_ref().filter(|_| done < n) {
            match file.read_at(&mut bytes[done..], off + done as u64) {
                Ok(got) if got > 0 => done += got,
                _ => break,
            }
        }
    } else if let Some(c) = fd_path(fd).and_then(|p| std::ffi::CString::new(p.into_os_string().into_vec()).ok()) {
        // SAFETY: a NUL-terminated path; the C library's open.
        let reader = unsafe { real::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0) };
        while reader >= 0 && done < n {
            let at = (off + done as u64) as libc::off_t;
            // SAFETY: `bytes` has `n - done` writable bytes after `done`.
            let got = unsafe { real::pread(reader, bytes[done..].as_mut_ptr().cast(), n - done, at) };
            if got <= 0 {
                break;
            }
            done += got as usize;
        }
        if reader >= 0 {
            // SAFETY: our descriptor, closed once.
            unsafe { real::close(reader) };
        }
    }
    bytes.truncate(done);
    bytes
}

/// What a call on a descriptor does, for its line.
#[derive(Clone, Copy)]
pub enum FdCall {
    Truncate(u64),
    Fallocate { mode: c_int, off: u64, len: u64 },
    Fsync,
    Fdatasync,
    SyncRange { off: u64, len: u64, flags: u32 },
    Close,
}

/// A call on `fd` that changes its file or makes it durable.
pub fn on_fd(fd: c_int, call: FdCall, run: impl FnOnce() -> c_int) -> c_int {
    let Some(rec) = recorder() else { return run() };
    // A close ends the descriptor: find the file first.
    let file = rec.file_of(fd);
    recorded(file.is_some(), run, |rec, answer| {
        if answer != 0 {
            return None;
        }
        if let FdCall::Close = call {
            let (ino, kind, _) = file?;
            return (kind == libc::S_IFREG).then(|| format!("{{\"op\":\"close\",\"ino\":{ino}"));
        }
        let (ino, kind, _) = rec.file_of(fd)?;
        if kind == libc::S_IFDIR {
            let path = rec.relative(&fd_path(fd)?)?;
            let durable = matches!(call, FdCall::Fsync | FdCall::Fdatasync);
            return durable.then(|| format!("{{\"op\":\"fsync_dir\",\"path\":{}", json_path(&path)));
        }
        Some(match call {
            FdCall::Truncate(size) => format!("{{\"op\":\"truncate\",\"ino\":{ino},\"size\":{size}"),
            FdCall::Fallocate { mode, off, len } => {
                format!("{{\"op\":\"fallocate\",\"ino\":{ino},\"mode\":{mode},\"off\":{off},\"len\":{len}")
            }
            FdCall::Fsync => format!("{{\"op\":\"fsync\",\"ino\":{ino}"),
            FdCall::Fdatasync => format!("{{\"op\":\"fdatasync\",\"ino\":{ino}"),
            FdCall::SyncRange { off, len, flags } if flags & libc::SYNC_FILE_RANGE_WAIT_AFTER != 0 => {
                format!("{{\"op\":\"sync_range\",\"ino\":{ino},\"off\":{off},\"len\":{len}")
            }
            FdCall::SyncRange { .. } | FdCall::Close => return None,
        })
    })
}

/// `sync`, `syncfs`: everything durable.
pub fn sync_all(run: impl FnOnce() -> c_int) -> c_int {
    recorded(true, run, |_, answer| (answer == 0).then(|| "{\"op\":\"sync\"".to_string()))
}

/// An open: a file it created, or one it truncated.
pub fn open(dirfd: c_int, path: *const c_char, flags: c_int, run: impl FnOnce() -> c_int) -> c_int {
    let Some(rec) = recorder() else { return run() };
    let target = resolve(dirfd, path).and_then(|p| rec.relative(&p).map(|rel| (p, rel)));
    let existed = target.as_ref().is_some_and(|(p, _)| stat_path(p).is_some());
    recorded(target.is_some(), run, |rec, fd| {
        let (_, rel) = target?;
        let (ino, kind, _) = rec.file_of(fd).filter(|_| fd >= 0)?;
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Some(unsupported(&format!("O_TMPFILE under {}", rel.display())));
        }
        if kind != libc::S_IFREG {
            return None;
        }
        if !existed {
            return Some(format!("{{\"op\":\"create\",\"path\":{},\"ino\":{ino}", json_path(&rel)));
        }
        let truncates = flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY;
        truncates.then(|| format!("{{\"op\":\"truncate\",\"ino\":{ino},\"size\":0"))
    })
}

/// What a call on a path does, for its line.
#[derive(Clone, Copy)]
pub enum PathCall {
    Truncate(u64),
    Unlink,
    Mkdir,
    Rmdir,
}

/// A call on a path under the root.
pub fn on_path(dirfd: c_int, path: *const c_char, call: PathCall, run: impl FnOnce() -> c_int) -> c_int {
    let Some(rec) = recorder() else { return run() };
    let Some(rel) = resolve(dirfd, path).and_then(|p| rec.relative(&p)) else { return run() };
    let truncated = match call {
        PathCall::Truncate(_) => stat_path(&rec.root.join(&rel)).map(|st| st.st_ino),
        _ => None,
    };
    recorded(true, run, |_, answer| {
        if answer != 0 {
            return None;
        }
        let p = json_path(&rel);
        Some(match call {
            PathCall::Truncate(size) => format!("{{\"op\":\"truncate\",\"ino\":{},\"size\":{size}", truncated?),
            PathCall::Unlink => format!("{{\"op\":\"unlink\",\"path\":{p}"),
            PathCall::Mkdir => format!("{{\"op\":\"mkdir\",\"path\":{p}"),
            PathCall::Rmdir => format!("{{\"op\":\"rmdir\",\"path\":{p}"),
        })
    })
}

/// What a call on two paths does.
#[derive(Clone, Copy)]
pub enum TwoPaths {
    Rename { flags: u32 },
    Link,
    Symlink,
}

/// `rename`, `link`, `symlink` (`from` is the link's target text for a
/// symbolic link): recorded when either end is under the root.
pub fn two_paths(
    from: (c_int, *const c_char),
    to: (c_int, *const c_char),
    call: TwoPaths,
    run: impl FnOnce() -> c_int,
) -> c_int {
    let Some(rec) = recorder() else { return run() };
    let from_rel = resolve(from.0, from.1).and_then(|p| rec.relative(&p));
    let to_rel = resolve(to.0, to.1).and_then(|p| rec.relative(&p));
    if to_rel.is_none() && (from_rel.is_none() || matches!(call, TwoPaths::Symlink)) {
        return run();
    }
    recorded(true, run, |_, answer| {
        if answer != 0 {
            return None;
        }
        let to = to_rel.as_deref().unwrap_or(Path::new("?"));
        Some(match (call, &from_rel, &to_rel) {
            (TwoPaths::Symlink, _, _) => unsupported(&format!("a symbolic link {}", to.display())),
            (TwoPaths::Rename { flags }, _, _) if flags & libc::RENAME_EXCHANGE != 0 => {
                unsupported(&format!("RENAME_EXCHANGE of {}", to.display()))
            }
            (_, Some(f), Some(t)) => {
                let op = if matches!(call, TwoPaths::Link) { "link" } else { "rename" };
                format!("{{\"op\":\"{op}\",\"from\":{},\"to\":{}", json_path(f), json_path(t))
            }
            (_, None, Some(t)) => unsupported(&format!("{} brought in from outside the directory", t.display())),
            (_, Some(f), None) => unsupported(&format!("{} moved out of the directory", f.display())),
            (_, None, None) => return None,
        })
    })
}

/// `mmap`: a shared writable mapping of a file under the root is recorded
/// (its stores are not).
pub fn mapping(fd: c_int, prot: c_int, flags: c_int, run: impl FnOnce() -> *mut c_void) -> *mut c_void {
    let shared_writable = flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0;
    let Some(rec) = recorder().filter(|_| shared_writable && fd >= 0) else { return run() };
    let file = rec.file_of(fd).filter(|(_, kind, _)| *kind == libc::S_IFREG);
    recorded(file.is_some(), run, |_, p| {
        let (ino, _, _) = file.filter(|_| p != libc::MAP_FAILED)?;
        Some(format!("{{\"op\":\"mapped\",\"ino\":{ino}"))
    })
}

impl Recorder {
    /// A descriptor's file if it is on the root's file system and under
    /// the root (or unlinked): inode, kind (`S_IFMT`), status.
    fn file_of(&self, fd: c_int) -> Option<(u64, u32, libc::stat)> {
        let st = stat_fd(fd)?;
        if st.st_dev != self.root_dev {
            return None;
        }
        let path = fd_path(fd)?;
        let deleted = path.as_os_str().as_bytes().ends_with(b" (deleted)");
        (deleted || path.starts_with(&self.root)).then_some((st.st_ino, st.st_mode & libc::S_IFMT, st))
    }

    /// How many bytes of output the program (all its processes) has
    /// written: the crash test's output file's size (0 without one).
    fn output_bytes(&self) -> u64 {
        stat_fd(self.output).map_or(0, |st| st.st_size as u64)
    }

    /// `path` relative to the root, if it is under it.
    fn relative(&self, path: &Path) -> Option<PathBuf> {
        path.strip_prefix(&self.root).ok().map(Path::to_path_buf)
    }

    /// Appends `bytes` to the data file (the trace's lock held); where.
    fn append_data(&self, bytes: &[u8]) -> Option<u64> {
        let at = stat_fd(self.data)?.st_size as u64;
        write_all(self.data, bytes);
        Some(at)
    }
}

/// A line for a call that cannot be followed.
fn unsupported(what: &str) -> String {
    let mut quoted = String::new();
    json_string(&mut quoted, what);
    format!("{{\"op\":\"unsupported\",\"what\":{quoted}")
}

/// The absolute path `path` names from `dirfd`, its directories resolved
/// (symbolic links followed), its last name kept as given.
fn resolve(dirfd: c_int, path: *const c_char) -> Option<PathBuf> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the program passes a NUL-terminated path (checked non-NULL).
    let given = Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
    let full = if given.is_absolute() {
        given.to_path_buf()
    } else if dirfd == libc::AT_FDCWD {
        std::env::current_dir().ok()?.join(given)
    } else {
        fd_path(dirfd)?.join(given)
    };
    let name = full.file_name()?;
    let parent = std::fs::canonicalize(full.parent()?).ok()?;
    Some(parent.join(name))
}

/// The path the kernel gives for a descriptor.
fn fd_path(fd: c_int) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

fn stat_fd(fd: c_int) -> Option<libc::stat> {
    // SAFETY: a zeroed `stat` is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for one `stat`; the C library's fstat.
    (unsafe { real::fstat(fd, &mut st) } == 0).then_some(st)
}

fn stat_path(path: &Path) -> Option<libc::stat> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed `stat` is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a `stat` out-buffer.
    (unsafe { real::fstatat(libc::AT_FDCWD, c.as_ptr(), &mut st, 0) } == 0).then_some(st)
}

/// A descriptor's file position: the cache's description's for a managed
/// one, the kernel's for another.
fn position(fd: c_int) -> Option<u64> {
    if let Some(desc) = crate::table::get(fd) {
        return Some(*desc.pos.lock().unwrap_or_else(|e| e.into_inner()));
    }
    // SAFETY: lseek(2) on the program's descriptor, moving nothing.
    u64::try_from(unsafe { real::lseek(fd, 0, libc::SEEK_CUR) }).ok()
}

/// A descriptor's status flags (`O_APPEND`, `O_SYNC`, `O_DSYNC`), the
/// cache's description's for a managed one.
fn status_flags(fd: c_int) -> c_int {
    match crate::table::get(fd) {
        Some(desc) => desc.flags(),
        // SAFETY: F_GETFL on the program's descriptor.
        None => unsafe { real::fcntl(fd, libc::F_GETFL, 0) }.max(0),
    }
}

/// Writes all of `bytes` to `fd`, retrying short writes and `EINTR`.
fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: a live buffer of `bytes.len()` bytes; the C library's write.
        let n = unsafe { real::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// A path as a JSON string (bytes that are not UTF-8 replaced).
fn json_path(path: &Path) -> String {
    let mut out = String::new();
    json_string(&mut out, &path.to_string_lossy());
    out
}

/// `text` as a JSON string literal, appended to `out`.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_json_strings() {
        assert_eq!(json_path(Path::new("a \"b\"\\c\n")), "\"a \\\"b\\\"\\\\c\\u000a\"");
    }
}
