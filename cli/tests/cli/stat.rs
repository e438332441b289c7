//! `wbcache stat` and `wbcache top` watching a real program under `wbcache
//! run`: a Python program writes 8 MiB (kept dirty: periodic writeback is
//! a minute away), waits for a go, fsyncs, and waits for an end. `stat
//! --json` must show its dirty bytes and its file, then zero dirty bytes
//! and one fsync; `top`, run in `tmux`, must show the same figures
//! changing on the screen and leave the terminal as it found it on `q`.
//! Each program runs in its own process group, killed at the end.

use crate::common::{in_ci, preload_library, python_and_preload_ready, scratch, wbcache};

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WRITER: &str = r#"
import os, sys, time
ctl, data = sys.argv[1], sys.argv[2]
def wait_for(name):
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(ctl, name)):
        if time.time() > deadline:
            sys.exit(3)
        time.sleep(0.02)
fd = os.open(os.path.join(data, "file"), os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"x" * (8 << 20))
with open(os.path.join(ctl, "pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(ctl, "pid.tmp"), os.path.join(ctl, "pid"))
wait_for("go")
os.fsync(fd)
open(os.path.join(ctl, "synced"), "w").close()
wait_for("end")
"#;

/// The writer under `wbcache run`, in its own process group (killed on
/// drop), and its control directory.
struct Writer {
    child: Child,
    ctl: PathBuf,
    data: PathBuf,
    pid: u32,
}

impl Writer {
    fn start(test: &str) -> Writer {
        let dir = scratch(test);
        let (ctl, data) = (dir.join("ctl"), dir.join("data"));
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let mut command = wbcache();
        command.arg("run").arg("--paths").arg(&data).args([
            "--set",
            "expire_ms=60000",
            "--set",
            "dirty_background=64M",
        ]);
        command.args(["--", "python3", "-c", WRITER]).arg(&ctl).arg(&data).stdin(Stdio::null()).process_group(0);
        if let Some(lib) = preload_library() {
            command.env("WBCACHE_PRELOAD", lib);
        }
        let child = command.spawn().expect("wbcache run");
        let pid_file = ctl.join("pid");
        let mut writer = Writer { child, ctl, data, pid: 0 };
        wait_until("the writer wrote", || pid_file.exists());
        writer.pid = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        writer
    }

    fn signal(&self, name: &str) {
        std::fs::write(self.ctl.join(name), b"").unwrap();
    }

    /// Lets the writer end, and waits for it (exit 0).
    fn finish(mut self) {
        self.signal("end");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the writer under wbcache run failed: {status}");
        assert_eq!(std::fs::metadata(self.data.join("file")).unwrap().len(), 8 << 20);
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the writer's own process group.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `stat --json --pid PID`'s one cache, if there is one.
fn stat_of(pid: u32) -> Option<serde_json::Value> {
    let out = wbcache().args(["stat", "--json", "--pid", &pid.to_string()]).output().expect("wbcache stat");
    assert!(out.status.success(), "stat --json failed: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stat --json is JSON");
    assert_eq!(json["version"], 1);
    json["caches"].as_array().expect("caches").first().cloned()
}

/// The writer's cache once `stat` shows its 8 MiB dirty, and `also`.
fn stat_once_dirty(writer: &Writer, also: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut cache = None;
    wait_until("stat shows the writer's 8 MiB dirty", || {
        cache = stat_of(writer.pid);
        cache.as_ref().is_some_and(|c| c["figures"]["dirty_bytes"].as_u64() >= Some(8 << 20) && also(c))
    });
    cache.expect("seen")
}

#[test]
fn stat_shows_dirty_bytes_rise_and_fall_after_the_programs_fsync() {
    if !python_and_preload_ready() {
        return;
    }
    let writer = Writer::start("stat-json");
    let cache = stat_once_dirty(&writer, |_| true);
    assert_eq!(cache["state"], "running", "{cache}");
    assert_eq!(cache["owner_alive"], true, "{cache}");
    assert!(cache["program"].as_str().unwrap().contains("python3"), "{cache}");
    assert_eq!(cache["figures"]["fsyncs"], 0, "{cache}");
    let file = &cache["files"][0];
    assert_eq!(Path::new(file["path"].as_str().unwrap()), writer.data.join("file").canonicalize().unwrap());
    assert_eq!(file["unwritten_bytes"], 8 << 20, "{cache}");
    writer.signal("go");
    let mut after = None;
    wait_until("stat shows no dirty bytes and one fsync", || {
        after = stat_of(writer.pid);
        after.as_ref().is_some_and(|c| c["figures"]["dirty_bytes"] == 0 && c["figures"]["fsyncs"] == 1)
    });
    let after = after.unwrap();
    assert!(writer.ctl.join("synced").exists());
    assert!(after["figures"]["written_bytes_total"].as_u64() >= Some(8 << 20), "{after}");
    assert_eq!(after["files"], serde_json::json!([]), "{after}");
    let pid = writer.pid;
    writer.finish();
    wait_until("the cache leaves stat once its program ended", || stat_of(pid).is_none());
}

/// Sends SIGCONT to a stopped guardian on drop, so a failed test leaves
/// no process stopped.
struct Stopped(i32);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the guardian this test stopped.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[test]
fn a_dead_owners_cache_shows_its_guardian_until_the_data_is_written() {
    if !python_and_preload_ready() {
        return;
    }
    let writer = Writer::start("stat-guardian");
    // The guardian records its pid on the board as it starts serving.
    let cache = stat_once_dirty(&writer, |c| c["guardian_pid"].is_u64());
    let guardian = cache["guardian_pid"].as_i64().expect("the cache has a guardian") as i32;
    // The guardian, stopped, cannot notice the death yet: the cache must
    // show its owner gone, through the guardian's hold on it.
    // SAFETY: kill(2) on the guardian process and on the writer.
    unsafe { libc::kill(guardian, libc::SIGSTOP) };
    let stopped = Stopped(guardian);
    // SAFETY: as above.
    unsafe { libc::kill(writer.pid as i32, libc::SIGKILL) };
    wait_until("stat shows the owner gone", || {
        stat_of(writer.pid).is_some_and(|c| c["state"] == "owner-gone" && c["owner_alive"] == false)
    });
    drop(stopped);
    wait_until("the cache leaves stat once its guardian has written", || stat_of(writer.pid).is_none());
    let data = std::fs::read(writer.data.join("file")).expect("the file, read through the kernel");
    assert!(data.len() == 8 << 20 && data.iter().all(|b| *b == b'x'), "the dead writer's 8 MiB are in the file");
}

/// `tmux` with a server of the test's own, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn capture(&self) -> String {
        let out = self.command().args(["capture-pane", "-p", "-t", "watch"]).output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

/// The DIRTY and FSYNCS cells of `pid`'s row in a `top` screen.
fn row_figures(screen: &str, pid: u32) -> Option<(String, String)> {
    let line = screen.lines().find(|l| l.split_whitespace().next() == Some(&pid.to_string()))?;
    let mut cells: Vec<&str> = line.split_whitespace().collect();
    if cells.last() == Some(&"ms") {
        cells.pop();
    }
    // From the right: p99, fsyncs, wb, read, hit%, writeback, dirty.
    let n = cells.len();
    (n >= 9).then(|| (cells[n - 7].to_string(), cells[n - 2].to_string()))
}

#[test]
fn top_shows_the_figures_change_and_restores_the_terminal_on_q() {
    if !python_and_preload_ready() {
        return;
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(!in_ci(), "tmux is not installed (CI=true requires it)");
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let writer = Writer::start("stat-top");
    let tmux = Tmux { socket: format!("wbcache-test-{}", std::process::id()) };
    let script = format!(
        "echo before-top; {} top --pid {} --interval 0.2; echo after-top $?; echo settings: $(stty -a | tr ' ' '\\n' | grep -xE -- '-?(icanon|echo|isig)') end; sleep 60",
        env!("CARGO_BIN_EXE_wbcache"),
        writer.pid
    );
    let mut start = tmux.command();
    start.args(["new-session", "-d", "-s", "watch", "-x", "200", "-y", "40", "sh", "-c", &script]);
    assert!(start.status().expect("tmux new-session").success());
    wait_until("top shows the writer dirty", || {
        row_figures(&tmux.capture(), writer.pid).is_some_and(|(dirty, fsyncs)| dirty == "8M" && fsyncs == "0")
    });
    assert!(tmux.capture().contains("wbcache top"), "{}", tmux.capture());
    writer.signal("go");
    wait_until("top shows the fsync and no dirty bytes", || {
        row_figures(&tmux.capture(), writer.pid).is_some_and(|(dirty, fsyncs)| dirty == "0" && fsyncs == "1")
    });
    assert!(tmux.command().args(["send-keys", "-t", "watch", "q"]).status().unwrap().success());
    wait_until("top quits on q", || tmux.capture().contains(" end"));
    let screen = tmux.capture();
    assert!(screen.contains("before-top") && screen.contains("after-top 0"), "{screen}");
    assert!(!screen.contains("FSYNC p99") && !screen.contains("wbcache top"), "the table stayed: {screen}");
    let settings = screen.lines().find(|l| l.starts_with("settings:")).expect("the settings line");
    let mut words: Vec<&str> = settings.split_whitespace().collect();
    words.sort_unstable();
    assert_eq!(words, ["echo", "end", "icanon", "isig", "settings:"], "the keyboard's settings came back: {screen}");
    writer.finish();
}

#[test]
fn stat_and_top_refuse_bad_input_in_one_line() {
    let none = wbcache().args(["stat", "--pid", "1"]).output().unwrap();
    assert_eq!(none.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&none.stdout).lines().count(), 1);
    assert!(String::from_utf8_lossy(&none.stdout).starts_with("no running wbcache cache of process 1"));
    let json = wbcache().args(["stat", "--json", "--pid", "1"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json, serde_json::json!({"version": 1, "caches": []}));
    for (args, says) in [
        (&["top"][..], "standard output is not a terminal"),
        (&["top", "--interval", "0"][..], "--interval 0"),
        (&["stat", "--json", "--prometheus"][..], "cannot be used with"),
    ] {
        let out = wbcache().args(args).stdout(Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
