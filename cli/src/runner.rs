//! The parent side of `wbcache bench`: prepares the place (a fresh directory
//! or a raw device), the memory cgroups and the data file, then runs every
//! (workload, engine) measurement in a fresh worker process, dropping the
//! kernel's caches before each, and prints a table per workload as it
//! completes, then the targets, the JSON and the charts.

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::bench_worker::{direct_read_reference_mb_s, memcpy_reference_us, Outcome, Status, DIRECT_REFERENCE_DEPTH};
use crate::cgroup::MemCgroups;
use crate::cli::{list_text, BenchArgs, Plan};
use crate::engines::DIRECT_DEPTH;
use crate::progress::{say, Progress};
use crate::report::{
    advice_table, failed_row, fsync_table, hot_alone_ratios, hot_table, markdown_table, pw_table, rows_from,
    sqlite_table, targets, to_json, Reference, ResultRow,
};
use crate::sys::{self, fmt_size, IoBuffer, Machine};
use crate::workloads::{
    advice_about, build_spec, cached_span, data_len, describe, fsync_background_about, hot_about, info, pw_about,
    sqlite_about, CachedShape, FioJob, Group, Kind, Pattern, Place, Spec, KIB,
};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The signal that interrupted the run (its exit status is 128 + it).
static INTERRUPTED_BY: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPTED_BY.store(sig, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// The fresh directory a run works in. Dropping it removes it, so every
/// way out of the run (an error, a signal, a panic while unwinding) leaves
/// nothing behind.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            if e.kind() != io::ErrorKind::NotFound {
                say(&format!("note: could not remove {}: {e}", self.0.display()));
            }
        }
    }
}

/// Where the run happens, and what to remove afterwards.
struct Site {
    place: Place,
    /// The fresh directory we created (removed when dropped).
    created_dir: Option<ScratchDir>,
    fs: String,
    device: String,
}

fn pick_default_parent() -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().ok();
    let mut candidates = vec![PathBuf::from("/var/tmp")];
    candidates.extend(cwd);
    candidates.push(PathBuf::from("/tmp"));
    for c in candidates {
        if c.is_dir() && !sys::is_memory_fs(&c) {
            let probe = c.join(format!(".wbcache-bench-probe-{}", std::process::id()));
            if fs::create_dir(&probe).is_ok() {
                let _ = fs::remove_dir(&probe);
                return Ok(c);
            }
        }
    }
    Err("no writable directory on a disk file system (tried /var/tmp, the current directory, /tmp); pass --dir".into())
}

fn prepare_site(plan: &mut Plan, notes: &mut Vec<String>) -> Result<Site, String> {
    if let Some(dev) = plan.args.device.clone() {
        if !sys::is_block_device(&dev) {
            return Err(format!("{} is not a block device", dev.display()));
        }
        if let Some(why) = sys::device_in_use(&dev) {
            return Err(format!("refusing to overwrite {}: {why}", dev.display()));
        }
        let dev_size = sys::block_device_size(&dev).map_err(|e| format!("{}: {e}", dev.display()))?;
        let mib = 1u64 << 20;
        if dev_size < 8 * mib {
            return Err(format!("{} is too small ({} bytes)", dev.display(), dev_size));
        }
        if let Some(job) = &plan.custom {
            let need = job.numjobs * job.nrfiles * job.file_len();
            if need > dev_size {
                return Err(format!(
                    "{} holds {}; --numjobs × --size need {}",
                    dev.display(),
                    fmt_size(dev_size),
                    fmt_size(need)
                ));
            }
        }
        if plan.params.size > dev_size {
            plan.params.size = (dev_size / mib) * mib;
            notes.push(format!("--size reduced to the device size, {}", fmt_size(plan.params.size)));
        }
        return Ok(Site {
            place: Place { dir: None, device: Some(dev.clone()), device_size: dev_size, free_bytes: dev_size },
            created_dir: None,
            fs: "raw block device".into(),
            device: dev.display().to_string(),
        });
    }
    let parent = match &plan.args.dir {
        // Checked when the plan was made: it exists.
        Some(d) => d.clone(),
        None => pick_default_parent()?,
    };
    let dir = parent.join(format!("wbcache-bench-{}", std::process::id()));
    fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let dir = fs::canonicalize(&dir).unwrap_or(dir);
    let scratch = ScratchDir(dir.clone());
    if sys::is_memory_fs(&dir) {
        notes.push(format!("{} is a memory file system: O_DIRECT engines will fail there", dir.display()));
    }
    let (fs_type, source) = sys::mount_of(&dir).map(|(t, s, _)| (t, s)).unwrap_or(("unknown".into(), "unknown".into()));
    let free = sys::free_bytes(&dir).unwrap_or(u64::MAX);
    let need = match &plan.custom {
        Some(job) => job.numjobs * job.nrfiles * job.file_len() + (256 << 20),
        None => 2 * plan.params.size + (256 << 20),
    };
    if free < need {
        return Err(format!(
            "{} has {} free; this run needs about {} (lower --size, --memory or --numjobs)",
            dir.display(),
            fmt_size(free),
            fmt_size(need)
        ));
    }
    Ok(Site {
        place: Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: free },
        created_dir: Some(scratch),
        fs: fs_type,
        device: source,
    })
}

/// Writes `len` bytes of real data at the start of the data file or device
/// (O_DIRECT where possible, so the parent does not fill the page cache).
fn lay_out(place: &Place, len: u64) -> io::Result<()> {
    lay_out_file(&place.data_path(), len, place.device.is_some())
}

/// Lays out the files of a fio-style job that reads or overwrites (fio
/// does the same before its jobs start); on a device, the data is there.
fn lay_out_custom(place: &Place, job: &FioJob) -> io::Result<()> {
    if place.device.is_some() || !job.rw.needs_layout() {
        return Ok(());
    }
    for j in 0..job.numjobs {
        for f in 0..job.nrfiles {
            lay_out_file(&place.custom_file(job, j, f).path, job.file_len(), false)?;
        }
    }
    Ok(())
}

fn lay_out_file(path: &std::path::Path, len: u64, is_device: bool) -> io::Result<()> {
    let open = |direct: bool| {
        let mut o = fs::OpenOptions::new();
        o.write(true);
        if !is_device {
            o.create(true).truncate(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    let file = match open(true) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(false)?,
        Err(e) => return Err(e),
    };
    let chunk = 1usize << 20;
    let buf = IoBuffer::filled(chunk, 0x5eed);
    let mut off = 0u64;
    while off < len {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        let n = (chunk as u64).min(len - off) as usize;
        std::os::unix::fs::FileExt::write_all_at(&file, &buf[..n], off)?;
        off += n as u64;
    }
    file.sync_all()
}

fn timer_overhead_ns() -> u64 {
    let mut best = u64::MAX;
    for _ in 0..10_000 {
        let t = Instant::now();
        let d = t.elapsed().as_nanos() as u64;
        best = best.min(d);
    }
    best
}

/// Runs one spec in a fresh worker process; kernel engines inside a fresh
/// memory cgroup.
fn run_worker(
    spec: &Spec,
    cgroups: Option<&mut MemCgroups>,
    timeout: Duration,
    progress: &mut Progress,
    stderr_lines: &mut Vec<String>,
) -> Outcome {
    let fail = |msg: String| Outcome::failed(&io::Error::other(msg));
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(format!("cannot find the wbcache binary: {e}")),
    };
    let mut child = match Command::new(exe)
        .arg("bench-worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start a worker: {e}")),
    };
    let mut cgroup = None;
    if spec.engine.is_kernel() {
        if let Some(cg) = cgroups {
            match cg.create().and_then(|h| h.add_pid(child.id()).map(|()| h)) {
                Ok(h) => cgroup = Some(h),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return fail(format!("cannot put the worker into a memory cgroup: {e}"));
                }
            }
        }
    }
    // The worker reads the spec only now, after it was moved into the cgroup.
    let spec_json = serde_json::to_string(spec).expect("spec serializes");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(spec_json.as_bytes());
    }
    let mut stdout = child.stdout.take().expect("piped stdout");
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<(f64, u64)>();
    let other_lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let err_lines = other_lines.clone();
    let err_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("@progress ") {
                let mut f = rest.split_whitespace();
                if let (Some(Ok(t)), Some(Ok(b))) = (f.next().map(str::parse), f.next().map(str::parse)) {
                    let _ = tx.send((t, b));
                }
            } else {
                let mut v = err_lines.lock().unwrap_or_else(|e| e.into_inner());
                v.push(line);
                if v.len() > 40 {
                    v.remove(0);
                }
            }
        }
    });
    let started = Instant::now();
    let mut last: Option<(f64, u64)> = None;
    let mut killed: Option<String> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => {
                killed = Some(format!("waiting for the worker: {e}"));
                break None;
            }
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            let _ = child.kill();
            killed = Some("interrupted".into());
        } else if started.elapsed() > timeout {
            let _ = child.kill();
            killed = Some(format!("timed out after {:.0} s (killed)", timeout.as_secs_f64()));
        }
        if killed.is_some() {
            break child.wait().ok();
        }
        if let Ok((t, b)) = rx.recv_timeout(Duration::from_millis(100)) {
            let rate = match last {
                Some((t0, b0)) if t > t0 => (b.saturating_sub(b0)) as f64 / (t - t0) / 1e6,
                _ => b as f64 / t.max(0.001) / 1e6,
            };
            last = Some((t, b));
            progress.update(format!("{t:.0} s  {rate:.0} MB/s"));
        }
    };
    let out = out_thread.join().unwrap_or_default();
    let _ = err_thread.join();
    let mut oom_kills = 0;
    if let Some(h) = cgroup {
        oom_kills = h.oom_kills();
        h.remove();
    }
    let lines = other_lines.lock().unwrap_or_else(|e| e.into_inner()).clone();
    stderr_lines.extend(lines.iter().cloned());
    if let Some(msg) = killed {
        return fail(msg);
    }
    let parsed = out.lines().rev().find(|l| !l.trim().is_empty()).and_then(|l| serde_json::from_str::<Outcome>(l).ok());
    match parsed {
        Some(o) => o,
        None => {
            let how = match status {
                Some(st) => {
                    use std::os::unix::process::ExitStatusExt;
                    match st.signal() {
                        Some(9) if oom_kills > 0 => {
                            format!(
                                "worker killed by the OOM killer of its {} memory cgroup",
                                fmt_size(spec_memory(spec))
                            )
                        }
                        Some(sig) => format!("worker killed by signal {sig}"),
                        None => format!("worker exited with {st}"),
                    }
                }
                None => "worker vanished".into(),
            };
            let tail: Vec<&String> = lines.iter().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
            let tail: Vec<&str> = tail.iter().map(|s| s.as_str()).collect();
            fail(if tail.is_empty() { how } else { format!("{how}: {}", tail.join(" / ")) })
        }
    }
}

/// Of several runs of one measurement, the one whose primary figure
/// (throughput, µs/call for per-call rows, the fsync total for
/// fsync-under-load's foreground rows, the writeback MB/s for
/// parallel-writeback, the hot reader's MB/s for hot-set, or the
/// transactions per second for sqlite, of its first row) is the median
/// among the runs that succeeded; a failed run only if all failed.
fn median_run(mut runs: Vec<Vec<ResultRow>>) -> Vec<ResultRow> {
    let key = |rows: &Vec<ResultRow>| -> Option<f64> {
        let row = rows.first()?;
        if row.status != "ok" {
            return None;
        }
        row.fsync_total_s
            .or(row.us_per_call)
            .or(row.writeback_mb_s)
            .or(row.hot_mb_s)
            .or(row.tps)
            .or(row.throughput_mb_s)
    };
    let mut ok: Vec<(f64, usize)> = runs.iter().enumerate().filter_map(|(i, r)| key(r).map(|k| (k, i))).collect();
    if ok.is_empty() {
        return runs.into_iter().next().unwrap_or_default();
    }
    ok.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pick = ok[ok.len() / 2].1;
    runs.swap_remove(pick)
}

/// How long a measurement may take before it is killed: twice its time cap
/// plus a minute, plus, for `sqlite`, its database's load (at 10 MB/s, well
/// below what a disk takes).
fn default_timeout_s(spec: &Spec) -> f64 {
    let load_s: f64 =
        spec.jobs.iter().filter(|j| matches!(j.pattern, Pattern::Sqlite(_))).map(|j| j.target.len as f64 / 10e6).sum();
    2.0 * spec.deadline_s + 60.0 + load_s
}

fn spec_memory(spec: &Spec) -> u64 {
    wbcache::Config::from_options(&spec.wbcache_options).map(|c| c.capacity_bytes).unwrap_or(0)
}

fn summary(rows: &[ResultRow]) -> String {
    let Some(r) = rows.last() else { return "no result".into() };
    if !r.ok() {
        return format!("{}: {}", r.status, r.error.clone().unwrap_or_default());
    }
    // fsync-under-load: the foreground's fsyncs, and the background's MB/s.
    if let Some(fg) = rows.iter().find(|r| r.fsync_total_s.is_some()) {
        let mut s = match fg.fsync_lat_us {
            Some(p) => format!("fsync p50 {:.2} ms, p99 {:.2} ms", p.p50 / 1e3, p.p99 / 1e3),
            None => "no fsync".into(),
        };
        s.push_str(&format!(", fsync total {:.3} s", fg.fsync_total_s.unwrap_or(0.0)));
        if let Some(t) = rows.iter().filter(|r| r.fsync_total_s.is_none()).find_map(|r| r.throughput_mb_s) {
            s.push_str(&format!(", background {t:.1} MB/s"));
        }
        return s;
    }
    // hot-set: the streamer's and the hot reader's MB/s, the hit ratio.
    if let Some(hot) = r.hot_mb_s {
        let mut s = match r.variant.as_deref() {
            Some("alone") => String::new(),
            _ => format!("stream {:.1} MB/s, ", r.throughput_mb_s.unwrap_or(0.0)),
        };
        s.push_str(&format!("hot {hot:.1} MB/s"));
        if let Some(x) = r.hot_hit_ratio {
            s.push_str(&format!(", hot hit ratio {:.1}%", x * 100.0));
        }
        return s;
    }
    // sqlite: the transactions per second, the commit's p99, the writer's MB/s.
    if let Some(tps) = r.tps {
        let mut s = format!("{tps:.0} TPS");
        if let Some(p99) = r.commit_us_p99 {
            s.push_str(&format!(", commit p99 {:.2} ms", p99 / 1e3));
        }
        if let Some(w) = r.stream_mb_s {
            s.push_str(&format!(", stream {w:.1} MB/s"));
        }
        if let Some(db) = r.db_bytes {
            s.push_str(&format!(" ({} database)", fmt_size(db)));
        }
        return s;
    }
    // advice: MB/s, the calls' p99.9, the advice calls' and the fsync's
    // time, the peak of the file's cached bytes.
    if r.workload == "advice" {
        let mut s = format!("{:.1} MB/s", r.throughput_mb_s.unwrap_or(0.0));
        if let Some(l) = &r.lat_us {
            s.push_str(&format!(", p99.9 {:.1} µs", l.p999));
        }
        if let Some(a) = r.advise_s {
            s.push_str(&format!(", advice {:.3} ms", a * 1e3));
        }
        if let Some(f) = r.fsync_s {
            s.push_str(&format!(", fsync {f:.3} s"));
        }
        if let Some(c) = r.peak_cached_bytes {
            s.push_str(&format!(", peak cached {:.1} MiB", c as f64 / (1u64 << 20) as f64));
        }
        return s;
    }
    // parallel-writeback: the writers', then the writeback's MB/s and the CPU.
    if let Some(w) = r.writeback_mb_s {
        let mut s = format!("writers {:.1} MB/s, writeback {w:.1} MB/s", r.throughput_mb_s.unwrap_or(0.0));
        if let Some(c) = r.cpu_s_per_gib {
            s.push_str(&format!(", {c:.2} CPU s/GiB"));
        }
        if let Some(t) = r.total_s {
            s.push_str(&format!(" ({t:.1} s)"));
        }
        return s;
    }
    let mut s = String::new();
    if let Some(c) = r.us_per_call {
        s.push_str(&format!("{c:.3} µs/call, "));
    }
    if let Some(t) = r.throughput_mb_s {
        s.push_str(&format!("{t:.1} MB/s"));
    }
    if let Some(l) = &r.lat_us {
        s.push_str(&format!(", p99.9 {:.1} µs", l.p999));
    }
    if let Some(p) = r.peak_dirty_bytes {
        s.push_str(&format!(", peak dirty+wb {:.1} MiB", p as f64 / (1u64 << 20) as f64));
    }
    if let Some(t) = r.total_s {
        s.push_str(&format!(" ({t:.1} s)"));
    }
    s
}

/// Prints a table. When nobody reads the output any more (`bench | head`),
/// the run stops as if interrupted: the rest would be measured for nobody.
fn print_stdout(progress: &mut Progress, text: &str) {
    progress.clear();
    let mut out = io::stdout().lock();
    let written = writeln!(out, "{text}").and_then(|()| out.flush());
    if written.is_err_and(|e| e.kind() == io::ErrorKind::BrokenPipe) {
        INTERRUPTED_BY.store(libc::SIGPIPE, Ordering::SeqCst);
        INTERRUPTED.store(true, Ordering::SeqCst);
    }
}

pub fn run(args: BenchArgs) -> i32 {
    if args.list {
        print!("{}", list_text());
        return 0;
    }
    let mut plan = match Plan::from_args(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wbcache bench: {e}");
            return 2;
        }
    };
    install_signal_handlers();
    let mut notes: Vec<String> = std::mem::take(&mut plan.notes);
    let mut site = match prepare_site(&mut plan, &mut notes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wbcache bench: {e}");
            return 2;
        }
    };
    let p = plan.params.clone();
    let machine = Machine {
        kernel: sys::kernel_release(),
        cpus: sys::cpus(),
        mem_bytes: sys::meminfo_bytes("MemTotal").unwrap_or(0),
        fs: site.fs.clone(),
        device: site.device.clone(),
    };
    let any_kernel = plan.engines.iter().any(|e| e.is_kernel());
    let mut cgroups = None;
    if any_kernel && !plan.args.no_cgroup {
        match MemCgroups::setup(p.memory) {
            Ok(cg) => {
                let mut n = format!(
                    "kernel engines run in a memory cgroup limited to {} ({})",
                    fmt_size(p.memory),
                    cg.describe()
                );
                if cg.version() == "v1" {
                    n.push_str(
                        "; cgroup v1 has no per-cgroup dirty throttling, the kernel's global dirty limits apply",
                    );
                }
                notes.push(n);
                cgroups = Some(cg);
            }
            Err(why) => {
                notes.push(format!("memory cgroup unavailable ({why}): kernel engines run without a memory limit"))
            }
        }
    } else if any_kernel {
        notes.push("--no-cgroup: kernel engines run without a memory limit".into());
    }
    let can_drop = !plan.args.no_drop_caches
        && match sys::drop_caches() {
            Ok(()) => true,
            Err(e) => {
                notes.push(format!("caches are not dropped between runs ({e})"));
                false
            }
        };
    notes.push(format!(
        "each timed call includes about {} ns of clock overhead; MB/s = 10^6 bytes/s, write throughput includes the final fsync",
        timer_overhead_ns()
    ));
    if plan.args.repeat > 1 {
        notes.push(format!("each measurement ran {} times; the median run is reported", plan.args.repeat));
    }

    let total = measurements(&plan.groups, &plan.engines);
    let mut progress = Progress::new(total);
    let where_ = match &site.place.device {
        Some(d) => format!("raw device {}", d.display()),
        None => format!("{} ({} on {})", site.place.dir.as_ref().expect("dir").display(), site.fs, site.device),
    };
    let header = format!(
        "## wbcache bench ({} suite)\n\n- machine: Linux {}, {} CPUs, {} RAM; files in {}\n- memory {} (wbcache `{}`; kernel engines: {}), size {}, runtime {} s\n\
         - ratio column: MB/s ÷ kernel-buffered's MB/s; for per-call rows (µs/call), µs/call ÷ kernel-buffered's (lower is better)\n\
         - peak dirty+wb: the most bytes dirty or under writeback at once (the quantity `dirty_limit` bounds), sampled every 100 ms and, for wbcache, its own exact peak\n",
        plan.suite,
        machine.kernel,
        machine.cpus,
        fmt_size(machine.mem_bytes),
        where_,
        fmt_size(p.memory),
        plan.effective_options,
        match &cgroups {
            Some(cg) => format!("memory cgroup {} limited to {}", cg.version(), fmt_size(p.memory)),
            None => "no memory cgroup".into(),
        },
        fmt_size(p.size),
        p.runtime_s
    );
    for n in &notes {
        progress.note(&format!("note: {n}"));
    }
    let header = if plan.args.repeat > 1 {
        format!(
            "{header}- each measurement ran {} times; the run with the median figure is reported\n",
            plan.args.repeat
        )
    } else {
        header
    };
    print_stdout(&mut progress, &header);

    let mut rows: Vec<ResultRow> = Vec::new();
    let mut data_ready = false;
    let mut io_backend: Option<String> = None;
    let mut worker_stderr: Vec<String> = Vec::new();
    let mut references: Vec<Reference> = Vec::new();
    let groups = plan.groups.clone();
    for (gi, group) in groups.iter().enumerate() {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        let mut layout_error = None;
        if group.needs_data() && !data_ready {
            progress.note(&format!("laying out the {} data file", fmt_size(data_len(&p))));
            match lay_out(&site.place, data_len(&p)) {
                Ok(()) => data_ready = true,
                Err(e) => layout_error = Some(format!("laying out the data file: {e}")),
            }
        }
        if let Kind::Custom(job) = &group.kind {
            if job.rw.needs_layout() && site.place.device.is_none() {
                progress.note(&format!(
                    "laying out {} file(s) of {}",
                    job.numjobs * job.nrfiles,
                    fmt_size(job.file_len())
                ));
            }
            if let Err(e) = lay_out_custom(&site.place, job) {
                layout_error = Some(format!("laying out the job's files: {e}"));
            }
        }
        for &engine in plan.engines.iter().filter(|e| group.runs_on(**e)) {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            progress.begin(&format!("{} · {}", group.label(), engine.name()));
            let new_rows = if let Some(e) = &layout_error {
                vec![failed_row(group, engine, Status::Error, e.clone())]
            } else {
                let mut runs = Vec::new();
                for _ in 0..plan.args.repeat {
                    if INTERRUPTED.load(Ordering::SeqCst) {
                        break;
                    }
                    let spec = build_spec(group, engine, &p, &site.place, true);
                    if can_drop {
                        let _ = sys::drop_caches();
                    }
                    let timeout = plan.args.timeout.unwrap_or_else(|| default_timeout_s(&spec));
                    let outcome = run_worker(
                        &spec,
                        cgroups.as_mut(),
                        Duration::from_secs_f64(timeout),
                        &mut progress,
                        &mut worker_stderr,
                    );
                    if site.place.device.is_none() {
                        for t in spec.jobs.iter().flat_map(|j| j.targets()).filter(|t| t.create) {
                            let _ = fs::remove_file(&t.path);
                        }
                    }
                    if io_backend.is_none() {
                        io_backend = outcome.io_backend.clone();
                    }
                    if plan.args.verbose {
                        if let Some(st) = &outcome.wbcache_stats {
                            progress.note(&format!("  wbcache stats: {st}"));
                        }
                        for l in worker_stderr.drain(..) {
                            progress.note(&format!("  worker: {l}"));
                        }
                    }
                    worker_stderr.clear();
                    runs.push(rows_from(group, engine, &outcome));
                }
                median_run(runs)
            };
            progress.finish(&summary(&new_rows));
            rows.extend(new_rows);
            if matches!(group.kind, Kind::HotSet(_)) {
                hot_alone_ratios(&mut rows);
            }
        }
        let ran = rows.iter().any(|r| r.workload == group.workload && r.variant == group.variant && r.ok());
        if group.kind == (Kind::CachedRead { shape: CachedShape::Region }) && ran && !INTERRUPTED.load(Ordering::SeqCst)
        {
            let us = memcpy_reference_us(
                cached_span(&p),
                4 * KIB,
                p.iterations_1k,
                p.warmup,
                Duration::from_secs_f64(p.call_cap_s),
            );
            progress.note(&format!("{} · bare memcpy reference: {us:.3} µs/call", group.label()));
            if us > 0.0 {
                references.push(Reference::memcpy(group, cached_span(&p), us));
            }
        }
        if group.kind == Kind::SeqRead && ran && !INTERRUPTED.load(Ordering::SeqCst) {
            let (bs, depth) = (1 << 20, DIRECT_REFERENCE_DEPTH);
            match direct_read_reference_mb_s(&site.place.data_path(), data_len(&p), bs, p.memory) {
                Ok(mb_s) => {
                    progress.note(&format!("{} · bare O_DIRECT reference: {mb_s:.0} MB/s", group.label()));
                    references.push(Reference::direct_read(group, p.memory, bs, depth, mb_s));
                }
                Err(e) => progress.note(&format!("{} · bare O_DIRECT reference failed: {e}", group.label())),
            }
        }
        let last_of_workload = !matches!(groups.get(gi + 1), Some(g) if g.workload == group.workload);
        if last_of_workload {
            let mut table = workload_table(group, &groups, &rows, &p);
            for r in references.iter().filter(|r| r.workload == group.workload) {
                table.push_str(&format!("\n{}\n", r.sentence()));
            }
            print_stdout(&mut progress, &table);
        }
    }
    progress.clear();
    if let Some(b) = &io_backend {
        print_stdout(&mut progress, &format!("wbcache ran on its `{b}` I/O backend.\n"));
    }
    if let Some(t) = targets(&rows, plan.dirty_limit, &references) {
        print_stdout(&mut progress, &t);
        if t.contains("NOT met") {
            print_stdout(
                &mut progress,
                "\n\"NOT met\" marks a goal wbcache did not reach in this run; it is a result, not an error.\n",
            );
        }
    }

    let config = json!({
        "suite": plan.suite,
        "repeat": plan.args.repeat,
        "memory_bytes": p.memory,
        "size_bytes": p.size,
        "runtime_s": p.runtime_s,
        "stream_cap_s": p.stream_cap_s,
        "call_cap_s": p.call_cap_s,
        "engines": plan.engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
        "workloads": groups.iter().map(Group::slug).collect::<Vec<_>>(),
        "wbcache_options": p.wbcache_options,
        "wbcache_effective_options": plan.effective_options,
        "wbcache_dirty_limit_bytes": plan.dirty_limit,
        "wbcache_io_backend": io_backend,
        "kernel_direct_queue_depth": DIRECT_DEPTH,
        "dir": site.place.dir.as_ref().map(|d| d.display().to_string()),
        "device": site.place.device.as_ref().map(|d| d.display().to_string()),
        "memory_cgroup": cgroups.as_ref().map(|c| c.version()),
        "drop_caches": can_drop,
        "notes": notes,
    });
    // Rows that failed are results too, and are written out; a run with
    // errored measurements still exits 1 (unsupported ones are not errors).
    let nr_errors = rows.iter().filter(|r| r.status == Status::Error.name()).count();
    let mut code = if nr_errors > 0 { 1 } else { 0 };
    if let Some(path) = &plan.args.json {
        if let Err(e) = fs::write(path, to_json(&machine, &config, &rows, &references) + "\n") {
            say(&format!("wbcache bench: writing {}: {e}", path.display()));
            code = 1;
        }
    }
    if let Some(dir) = &plan.args.svg {
        let subtitle = format!(
            "Linux {}, {} CPUs, {} on {}, memory {}, size {}",
            machine.kernel,
            machine.cpus,
            machine.fs,
            machine.device,
            fmt_size(p.memory),
            fmt_size(p.size)
        );
        match crate::svg::write_all(dir, &rows, &subtitle) {
            Ok(files) => say(&format!("bench: {} charts in {}", files.len(), dir.display())),
            Err(e) => {
                say(&format!("wbcache bench: writing charts to {}: {e}", dir.display()));
                code = 1;
            }
        }
    }
    drop(site.created_dir.take());
    let interrupted_by = INTERRUPTED.load(Ordering::SeqCst).then(|| INTERRUPTED_BY.load(Ordering::SeqCst));
    say(&finish_line(rows.len(), total, progress.elapsed_s(), nr_errors, interrupted_by));
    match interrupted_by {
        // The shell's convention: 128 + the signal (130 for Ctrl-C, 143 for
        // SIGTERM, 141 for a closed stdout).
        Some(sig) => 128 + sig,
        None => code,
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGPIPE => "a closed output (SIGPIPE)",
        _ => "a signal",
    }
}

/// The run's last line: what it produced, how many measurements failed,
/// and what stopped it early, with the exit status that follows.
fn finish_line(
    nr_rows: usize,
    nr_measurements: usize,
    elapsed_s: f64,
    nr_errors: usize,
    interrupted_by: Option<i32>,
) -> String {
    let mut line = format!("bench: {nr_rows} results from {nr_measurements} measurements in {elapsed_s:.0} s");
    match interrupted_by {
        Some(sig) => {
            line += &format!("; interrupted by {} (exit status {})", signal_name(sig), 128 + sig);
        }
        None if nr_errors > 0 => line += &format!("; {nr_errors} failed (status error, exit status 1)"),
        None => {}
    }
    line
}

/// The measurements a plan makes: each group once per selected engine it
/// runs on.
fn measurements(groups: &[Group], engines: &[crate::engines::EngineKind]) -> usize {
    groups.iter().map(|g| engines.iter().filter(|e| g.runs_on(**e)).count()).sum()
}

/// What `parallel-writeback`'s wbcache rows change in the cache's options.
fn pw_options_about(p: &crate::workloads::Params) -> String {
    let region = wbcache::Config::from_options(&p.wbcache_options).map(|c| fmt_size(c.region_size_bytes));
    format!(
        "wbcache rows: the options above with writeback_routing and writeback_workers as the variant names them: \
         single-1, one writeback worker (the cache without routing); rotor-N, N workers, each file bound to one of \
         them in turn; region-N, N workers, the offsets cut into regions of region_size ({}) dealt to them in turn, \
         so one file can be written by several at once",
        region.unwrap_or_else(|_| "?".into())
    )
}

fn workload_table(group: &Group, groups: &[Group], rows: &[ResultRow], p: &crate::workloads::Params) -> String {
    let mine: Vec<&Group> = groups.iter().filter(|g| g.workload == group.workload).collect();
    let what = if matches!(group.kind, Kind::ParallelWriteback(_)) {
        format!("{}. {}", pw_about(p), pw_options_about(p))
    } else if matches!(group.kind, Kind::Sqlite(_) | Kind::Advice(_)) {
        // Each variant named, also when it runs alone.
        let parts: Vec<String> =
            mine.iter().map(|g| format!("{}, {}", g.variant.as_deref().unwrap_or("main"), describe(g, p))).collect();
        let about = if matches!(group.kind, Kind::Sqlite(_)) { sqlite_about(p) } else { advice_about(p) };
        format!("{about}. Variants: {}", parts.join("; "))
    } else if mine.len() == 1 {
        describe(mine[0], p)
    } else {
        let parts: Vec<String> =
            mine.iter().map(|g| format!("{}: {}", g.variant.as_deref().unwrap_or("main"), describe(g, p))).collect();
        parts.join("; ")
    };
    let what = match group.kind {
        Kind::FsyncUnderLoad(_) => format!("{}. {what}", fsync_background_about(p)),
        Kind::HotSet(_) => {
            // A variant alone starts with its description: a sentence of its own.
            let mut chars = what.chars();
            let what = chars.next().map(|c| c.to_uppercase().chain(chars).collect::<String>()).unwrap_or_default();
            format!("{}. {what}", hot_about(p))
        }
        _ => what,
    };
    // The catalog's workloads say what they model; a custom job is the user's.
    let context = match info(group.workload) {
        Some(w) => {
            let source = w.source.map(|s| format!(" Follows {s}.")).unwrap_or_default();
            format!(" Models {}.{source}", w.models)
        }
        None => String::new(),
    };
    let about = format!("{what}.{context}\n\n{}", run_settings(p));
    let table_rows: Vec<&ResultRow> = rows.iter().filter(|r| r.workload == group.workload).collect();
    if matches!(group.kind, Kind::FsyncUnderLoad(_)) {
        return fsync_table(group.workload, &about, &table_rows);
    }
    if matches!(group.kind, Kind::ParallelWriteback(_)) {
        return pw_table(group.workload, &about, &table_rows);
    }
    if matches!(group.kind, Kind::HotSet(_)) {
        return hot_table(group.workload, &about, &table_rows);
    }
    if matches!(group.kind, Kind::Sqlite(_)) {
        return sqlite_table(group.workload, &about, &table_rows);
    }
    if matches!(group.kind, Kind::Advice(_)) {
        return advice_table(group.workload, &about, &table_rows);
    }
    markdown_table(group.workload, &about, &table_rows)
}

/// The sizes and times behind a table, printed with each one so that a
/// table read alone (or a workload run alone) says what it measured.
fn run_settings(p: &crate::workloads::Params) -> String {
    format!(
        "Measured with memory {}, size {}, runtime {} s (caps: {} s for size-based runs, {} s for per-call runs).",
        fmt_size(p.memory),
        fmt_size(p.size),
        p.runtime_s,
        p.stream_cap_s,
        p.call_cap_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_counts_failed_measurements() {
        assert_eq!(finish_line(80, 70, 363.2, 0, None), "bench: 80 results from 70 measurements in 363 s");
        assert_eq!(
            finish_line(5, 5, 0.0, 5, None),
            "bench: 5 results from 5 measurements in 0 s; 5 failed (status error, exit status 1)"
        );
        assert_eq!(
            finish_line(1, 70, 4.0, 1, Some(libc::SIGINT)),
            "bench: 1 results from 70 measurements in 4 s; interrupted by SIGINT (exit status 130)"
        );
    }

    /// parallel-writeback's groups count once per engine they run on.
    #[test]
    fn measurements_count_the_engines_each_group_runs_on() {
        use crate::engines::EngineKind;
        let groups = crate::workloads::expand("parallel-writeback", None, &[1, 2, 4]).unwrap();
        assert_eq!(measurements(&groups, &EngineKind::ALL), 18);
        assert_eq!(measurements(&groups, &[EngineKind::Wbcache]), 14);
        assert_eq!(measurements(&groups, &[EngineKind::KernelDontcache]), 0);
        let seq = crate::workloads::expand("seq-write", None, &[]).unwrap();
        assert_eq!(measurements(&seq, &EngineKind::ALL), 5);
    }

    /// parallel-writeback's runs are ordered by their writeback MB/s.
    #[test]
    fn median_run_orders_parallel_writeback_runs_by_their_writeback() {
        let pw_run = |writeback: f64, writers: f64| {
            vec![ResultRow {
                status: "ok".into(),
                writeback_mb_s: Some(writeback),
                throughput_mb_s: Some(writers),
                ..ResultRow::default()
            }]
        };
        let picked = median_run(vec![pw_run(300.0, 900.0), pw_run(100.0, 800.0), pw_run(200.0, 100.0)]);
        assert_eq!(picked[0].writeback_mb_s, Some(200.0));
    }

    fn run(status: &str, mb_s: f64) -> Vec<ResultRow> {
        vec![ResultRow { status: status.into(), throughput_mb_s: Some(mb_s), ..ResultRow::default() }]
    }

    /// fsync-under-load's foreground runs are ordered by their fsync total
    /// (not by the throughput, which the pauses dominate).
    #[test]
    fn median_run_orders_fsync_runs_by_their_total() {
        let fsync_run = |total: f64, mb_s: f64| {
            vec![
                ResultRow {
                    status: "ok".into(),
                    fsync_total_s: Some(total),
                    throughput_mb_s: Some(mb_s),
                    ..ResultRow::default()
                },
                ResultRow { status: "ok".into(), throughput_mb_s: Some(1000.0 - mb_s), ..ResultRow::default() },
            ]
        };
        let picked = median_run(vec![fsync_run(3.0, 1.0), fsync_run(1.0, 2.0), fsync_run(2.0, 3.0)]);
        assert_eq!(picked[0].fsync_total_s, Some(2.0), "the median total, not the median MB/s");
        assert_eq!(picked.len(), 2, "the run's rows stay together");
    }

    #[test]
    fn median_run_picks_the_middle_successful_run() {
        let picked = median_run(vec![run("ok", 900.0), run("ok", 1500.0), run("ok", 1200.0)]);
        assert_eq!(picked[0].throughput_mb_s, Some(1200.0));
        let picked = median_run(vec![run("error", 0.0), run("ok", 700.0), run("ok", 800.0)]);
        assert_eq!(picked[0].status, "ok", "failed runs are not chosen while one succeeded");
        let picked = median_run(vec![run("error", 0.0)]);
        assert_eq!(picked[0].status, "error");
        assert!(median_run(Vec::new()).is_empty());
    }
}
