//! Checking crash states: each one made into a fresh directory (the
//! recorded directory's initial image with the state's calls applied, in
//! the program's order) and the program's own checker run there, several
//! at once (`--jobs`). The checker is a shell command; it gets the state's
//! directory (`WBCACHE_CRASH_DIR`, also its working directory), the
//! program's output up to the crash (`WBCACHE_CRASH_STDOUT`, a file) and
//! the crash point (`WBCACHE_CRASH_POINT`, the index of the last call
//! before the crash). A non-zero exit, a signal or a timeout is a
//! violation.
//!
//! Each worker owns a slot directory under the work directory and
//! rebuilds its state there from nothing for every check: a checker may
//! change the files it checks (SQLite rolls its journal back), so nothing
//! of one state may leak into the next.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::image::Image;
use super::states::State;
use super::trace::Trace;

/// What checks run against: the trace, the initial image, and the
/// program's whole standard output.
pub struct Recording<'a> {
    pub trace: &'a Trace,
    pub initial: &'a Image,
    pub stdout: &'a [u8],
    /// Files left out of every state (shared writable mappings, with
    /// `--ignore-mapped`).
    pub left_out: &'a BTreeSet<u64>,
}

/// A state with the durable calls of its crash point.
pub struct ToCheck {
    pub state: State,
    pub durable: std::sync::Arc<BTreeSet<usize>>,
}

/// How a checker ended on a state.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub passed: bool,
    /// What ended it: `exit status 1`, `signal 9`, `timed out after 60 s`.
    pub ending: String,
    /// The last lines of its output (standard output and error).
    pub output: String,
}

/// The checker and how it runs.
pub struct Checker {
    pub command: String,
    pub timeout: Duration,
    pub jobs: usize,
}

/// The image of `state`: the initial image with its calls applied.
pub fn state_image(recording: &Recording<'_>, item: &ToCheck) -> Image {
    let mut image = recording.initial.clone();
    for i in 0..=item.state.point {
        if let Some(kept) = item.state.kept_of(i, &item.durable) {
            image.apply(&recording.trace.records[i].call, recording.trace.bytes(i), kept);
        }
    }
    if recording.left_out.is_empty() {
        image
    } else {
        image.without_files(recording.left_out)
    }
}

/// The output the program had acknowledged in `item`'s state.
fn acknowledged<'a>(recording: &Recording<'a>, item: &ToCheck) -> &'a [u8] {
    let n = recording.trace.acknowledged(item.state.point, recording.stdout.len() as u64) as usize;
    &recording.stdout[..n.min(recording.stdout.len())]
}

/// Makes `state` into the directory `dir` (emptied first) and its
/// acknowledged output into `stdout_file`.
pub fn materialize(recording: &Recording<'_>, item: &ToCheck, dir: &Path, stdout_file: &Path) -> io::Result<()> {
    write_state(&state_image(recording, item), acknowledged(recording, item), dir, stdout_file)
}

/// Writes `image` into `dir` (emptied first) and `output` into
/// `stdout_file`.
fn write_state(image: &Image, output: &[u8], dir: &Path, stdout_file: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    fs::create_dir_all(dir)?;
    image.write(dir)?;
    fs::write(stdout_file, output)
}

/// What a check found: each state's verdict, and how many states had the
/// files and output of an earlier one (given its verdict, not checked
/// again: two ways to lose calls can leave the same files).
pub struct Checked {
    pub verdicts: Vec<Verdict>,
    pub same_as_earlier: usize,
}

/// The states checked so far, by what the checker would see: a hash of
/// the files and the acknowledged output, with the first state that had
/// it.
type Seen = Mutex<HashMap<(u64, usize), usize>>;

impl Checker {
    /// Checks every state, `jobs` at once, in `work`; `progress` hears of
    /// each check done (how many so far).
    pub fn check_all(
        &self,
        recording: &Recording<'_>,
        items: &[ToCheck],
        work: &Path,
        progress: &(dyn Fn(usize) + Sync),
    ) -> io::Result<Checked> {
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<Verdict, usize>>>> = Mutex::new(vec![None; items.len()]);
        let failure: Mutex<Option<io::Error>> = Mutex::new(None);
        let seen: Seen = Mutex::new(HashMap::new());
        std::thread::scope(|scope| {
            for slot in 0..self.jobs.max(1) {
                let (next, done, results, failure, seen) = (&next, &done, &results, &failure, &seen);
                scope.spawn(move || {
                    let slot_dir = work.join("states").join(slot.to_string());
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items.len() || failure.lock().unwrap().is_some() {
                            break;
                        }
                        match self.check_one(recording, items, i, &slot_dir, seen) {
                            Ok(r) => results.lock().unwrap()[i] = Some(r),
                            Err(e) => {
                                failure.lock().unwrap().get_or_insert(e);
                                break;
                            }
                        }
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                    }
                });
            }
        });
        if let Some(e) = failure.into_inner().unwrap() {
            return Err(e);
        }
        let results: Vec<Result<Verdict, usize>> =
            results.into_inner().unwrap().into_iter().map(|r| r.expect("every state checked")).collect();
        let same_as_earlier = results.iter().filter(|r| r.is_err()).count();
        let verdicts = results
            .iter()
            .map(|r| match r {
                Ok(v) => v.clone(),
                Err(first) => results[*first].clone().expect("the first state of its files was checked"),
            })
            .collect();
        Ok(Checked { verdicts, same_as_earlier })
    }

    /// Makes state `i` in `slot_dir` and runs the checker on it, unless an
    /// earlier state had the same files and output (`Err`: that one).
    fn check_one(
        &self,
        recording: &Recording<'_>,
        items: &[ToCheck],
        i: usize,
        slot_dir: &Path,
        seen: &Seen,
    ) -> io::Result<Result<Verdict, usize>> {
        let image = state_image(recording, &items[i]);
        let output = acknowledged(recording, &items[i]);
        let key = (image.fingerprint(), output.len());
        {
            let mut seen = seen.lock().unwrap();
            match seen.get(&key) {
                Some(&first) if first < i => return Ok(Err(first)),
                Some(_) => {}
                None => {
                    seen.insert(key, i);
                }
            }
        }
        let (dir, stdout_file) = (slot_dir.join("dir"), slot_dir.join("stdout"));
        write_state(&image, output, &dir, &stdout_file)?;
        self.run(&dir, &stdout_file, items[i].state.point).map(Ok)
    }

    /// Runs the checker on the state in `dir`, in a process group of its
    /// own (killed whole on a timeout).
    pub fn run(&self, dir: &Path, stdout_file: &Path, point: usize) -> io::Result<Verdict> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(dir)
            .env("WBCACHE_CRASH_DIR", dir)
            .env("WBCACHE_CRASH_STDOUT", stdout_file)
            .env("WBCACHE_CRASH_POINT", point.to_string())
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("the checker (sh -c ...): {e}")))?;
        let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let readers = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = out.read_to_end(&mut text);
            let _ = err.read_to_end(&mut text);
            text
        });
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if start.elapsed() > self.timeout {
                // SAFETY: kill(2) of the checker's own process group, which
                // this function made; no memory is involved.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let output = readers.join().unwrap_or_default();
        let ending = match status {
            None => format!("timed out after {} s", self.timeout.as_secs()),
            Some(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => "ended".to_string(),
            },
        };
        let passed = status.is_some_and(|s| s.success());
        Ok(Verdict { passed, ending, output: last_lines(&output, 8) })
    }
}

/// The last `n` lines of a checker's output, as text.
fn last_lines(output: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checker_passes_fails_and_times_out() {
        let dir = std::env::temp_dir().join(format!("wbcache-checker-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let out = dir.join("stdout");
        fs::write(&out, "acknowledged\n").unwrap();
        let checker = |command: &str| Checker { command: command.into(), timeout: Duration::from_secs(2), jobs: 1 };
        let ok = checker("test \"$(cat $WBCACHE_CRASH_STDOUT)\" = acknowledged && test $WBCACHE_CRASH_POINT = 7")
            .run(&dir, &out, 7)
            .unwrap();
        assert!(ok.passed, "{ok:?}");
        let bad = checker("echo broken; exit 3").run(&dir, &out, 7).unwrap();
        assert!(!bad.passed && bad.ending == "exit status 3" && bad.output == "broken", "{bad:?}");
        let slow = Checker { timeout: Duration::from_millis(200), ..checker("sleep 5") }.run(&dir, &out, 0).unwrap();
        assert!(!slow.passed && slow.ending.starts_with("timed out"), "{slow:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
