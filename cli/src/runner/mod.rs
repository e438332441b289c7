//! The parent side of `wbcache bench`: prepares the place (a fresh directory
//! or a raw device, [`site`]), the memory cgroups and the data file, then
//! runs every (workload, engine) measurement in a fresh worker process
//! ([`child`]), dropping the kernel's caches before each, and prints a table
//! per workload as it completes, then the targets, the JSON and the charts
//! ([`charts`]); a signal or a closed output stops it early ([`interrupt`]).
//! It knows no workload: each group's workload lays out its files, makes
//! its spec, turns the outcome into rows, measures its references and
//! writes its table.

mod charts;
mod child;
mod interrupt;
mod leftovers;
mod site;

use std::fs;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::bench_worker::{Outcome, Status};
use crate::cgroup::MemCgroups;
use crate::cli::{BenchArgs, Plan};
use crate::engines::{EngineKind, DIRECT_DEPTH};
use crate::help::list_text;
use crate::progress::{say, Progress};
use crate::report::{failed_row, to_json, verdict_count, Reference, ResultRow};
use crate::sys::{self, fmt_size, Machine};
use crate::workloads::{
    build_spec, data_len, own_columns, rows_from, targets, Group, Params, ReferenceContext, Spec, Workload,
};
use child::run_worker;
use interrupt::{install_signal_handlers, interrupted_by, print_stdout, INTERRUPTED};
use site::{lay_out, lay_out_file, parents, prepare_site, Site};

/// Everything the measurements of a run share, and what they gather.
struct Bench<'a> {
    plan: &'a Plan,
    params: Params,
    site: &'a Site,
    cgroups: Option<MemCgroups>,
    can_drop: bool,
    /// Engines whose rows are marked not comparable, and no verdict
    /// compares against: kernel engines without their memory limit.
    not_comparable: Vec<EngineKind>,
    progress: Progress,
    rows: Vec<ResultRow>,
    references: Vec<Reference>,
    io_backend: Option<String>,
    worker_stderr: Vec<String>,
    data_ready: bool,
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
    notes.extend(leftovers::remove_stale(&parents(&plan)));
    let mut site = match prepare_site(&mut plan, &mut notes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wbcache bench: {e}");
            return 2;
        }
    };
    let machine = Machine {
        kernel: sys::kernel_release(),
        cpus: sys::cpus(),
        mem_bytes: sys::meminfo_bytes("MemTotal").unwrap_or(0),
        fs: site.fs.clone(),
        device: site.device.clone(),
    };
    let cgroups = memory_cgroups(&plan, &mut notes);
    let not_comparable = not_comparable(&plan, cgroups.as_ref());
    let can_drop = can_drop_caches(&plan, &mut notes);
    notes.push(format!(
        "each timed call includes about {} ns of clock overhead; MB/s = 10^6 bytes/s, write throughput includes the final fsync",
        timer_overhead_ns()
    ));
    if plan.args.repeat > 1 {
        notes.push(format!("each measurement ran {} times; the median run is reported", plan.args.repeat));
    }
    let mut bench = Bench::new(&plan, &site, cgroups, can_drop);
    bench.not_comparable = not_comparable;
    for n in &notes {
        bench.progress.note(&format!("note: {n}"));
    }
    let header = header(&plan, &machine, &site, bench.cgroups.as_ref(), &bench.not_comparable);
    print_stdout(&mut bench.progress, &header);
    bench.measure_all();
    bench.print_closing();
    let config = bench.config_json(&notes);
    let (nr_errors, mut code) = write_outputs(&bench, &machine, &config);
    let total = bench.measurements();
    let Bench { progress, rows, .. } = bench;
    drop(site.created_dir.take());
    let interrupted_by = interrupted_by();
    say(&finish_line(rows.len(), total, progress.elapsed_s(), nr_errors, interrupted_by));
    if let Some(sig) = interrupted_by {
        // The shell's convention: 128 + the signal (130 for Ctrl-C, 143 for
        // SIGTERM, 141 for a closed stdout).
        code = 128 + sig;
    }
    code
}

/// The memory cgroups the kernel engines run in, when a kernel engine runs
/// and they are not refused; what the run does about them, in `notes`
/// (without them, one line that says what follows for the comparison).
fn memory_cgroups(plan: &Plan, notes: &mut Vec<String>) -> Option<MemCgroups> {
    let memory = plan.params.memory;
    if !plan.engines.iter().any(|e| e.is_kernel()) {
        return None;
    }
    let why = if plan.args.no_cgroup {
        "--no-cgroup".to_string()
    } else {
        match MemCgroups::setup(memory) {
            Ok(cg) => {
                let mut n = format!(
                    "kernel engines run in a memory cgroup limited to {} ({}), made and removed for each measurement",
                    fmt_size(memory),
                    cg.describe()
                );
                if cg.version() == "v1" {
                    n.push_str(
                        "; cgroup v1 has no per-cgroup dirty throttling, the kernel's global dirty limits apply",
                    );
                }
                notes.push(n);
                return Some(cg);
            }
            Err(why) => format!("memory cgroup unavailable: {why}"),
        }
    };
    let consequence = match (plan.args.allow_unfair, plan.args.no_cgroup) {
        (true, _) => "compared with wbcache's all the same (--allow-unfair)",
        (false, true) => {
            "their rows are marked not comparable and no verdict compares against them (drop --no-cgroup, or pass \
             --allow-unfair)"
        }
        (false, false) => {
            "their rows are marked not comparable and no verdict compares against them (run as root for the \
             memory cgroup, or pass --allow-unfair)"
        }
    };
    notes.push(format!(
        "{why}: the kernel engines run without a memory limit, their page cache free to use all of the machine's \
         memory while wbcache has {}; {consequence}",
        fmt_size(memory)
    ));
    None
}

/// The kernel engines that run without their memory limit, unless
/// `--allow-unfair` compares them all the same.
fn not_comparable(plan: &Plan, cgroups: Option<&MemCgroups>) -> Vec<EngineKind> {
    if cgroups.is_some() || plan.args.allow_unfair {
        return Vec::new();
    }
    plan.engines.iter().copied().filter(|e| e.is_kernel()).collect()
}

/// Whether the kernel's caches are dropped before each measurement (root
/// only): said in `notes` either way, as it changes the whole machine.
fn can_drop_caches(plan: &Plan, notes: &mut Vec<String>) -> bool {
    if plan.args.no_drop_caches {
        notes.push("--no-drop-caches: the kernel's caches are kept between measurements".into());
        return false;
    }
    match sys::can_drop_caches() {
        Ok(()) => {
            notes.push(
                "before each measurement, the whole machine's dirty data is written back and the kernel's caches \
                 dropped (sync; echo 3 > /proc/sys/vm/drop_caches); --no-drop-caches keeps them"
                    .into(),
            );
            true
        }
        Err(e) => {
            notes.push(format!("caches are not dropped between measurements ({e})"));
            false
        }
    }
}

/// The report's first lines: the suite, the machine, the place and the
/// sizes, and how to read the tables.
fn header(
    plan: &Plan,
    machine: &Machine,
    site: &Site,
    cgroups: Option<&MemCgroups>,
    not_comparable: &[EngineKind],
) -> String {
    let p = &plan.params;
    let where_ = match &site.place.device {
        Some(d) => format!("raw device {}", d.display()),
        None => format!("{} ({} on {})", site.place.dir.as_ref().expect("dir").display(), site.fs, site.device),
    };
    let mut header = format!(
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
        match cgroups {
            Some(cg) => format!("memory cgroup {} limited to {}", cg.version(), fmt_size(p.memory)),
            None => "no memory cgroup".into(),
        },
        fmt_size(p.size),
        p.runtime_s
    );
    if plan.args.repeat > 1 {
        header +=
            &format!("- each measurement ran {} times; the run with the median figure is reported\n", plan.args.repeat);
    }
    if !not_comparable.is_empty() {
        header += &format!("- {}\n", not_comparable_sentence(not_comparable));
    }
    header
}

/// Why the rows of `engines` are marked "not comparable".
fn not_comparable_sentence(engines: &[EngineKind]) -> String {
    format!(
        "rows marked \"not comparable\" ({}) ran without the memory cgroup that gives the kernel's page cache \
         wbcache's memory: no verdict compares against them (--allow-unfair to compare)",
        engines.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
    )
}

/// `table` with the engine cell of each row of an engine of `engines`
/// marked "not comparable", and why under it when it marked one.
fn mark_not_comparable(table: &str, engines: &[EngineKind]) -> String {
    let mut marked = false;
    let mut out = String::with_capacity(table.len());
    for line in table.split_inclusive('\n') {
        let mut line = line.to_string();
        if line.starts_with('|') {
            for e in engines {
                let cell = format!("| {} |", e.name());
                if line.contains(&cell) {
                    line = line.replacen(&cell, &format!("| {} (not comparable) |", e.name()), 1);
                    marked = true;
                }
            }
        }
        out.push_str(&line);
    }
    if marked {
        out.push_str(&format!("\nThe {}.\n", not_comparable_sentence(engines)));
    }
    out
}

/// The JSON file and the charts, as asked: the count of errored
/// measurements, and the exit status so far (1 when one errored, or an
/// output could not be written).
fn write_outputs(bench: &Bench<'_>, machine: &Machine, config: &serde_json::Value) -> (usize, i32) {
    let (plan, p, rows) = (bench.plan, &bench.params, &bench.rows);
    // Rows that failed are results too, and are written out; a run with
    // errored measurements still exits 1 (unsupported ones are not errors).
    let nr_errors = rows.iter().filter(|r| r.status == Status::Error.name()).count();
    let mut code = if nr_errors > 0 { 1 } else { 0 };
    if let Some(path) = &plan.args.json {
        if let Err(e) = fs::write(path, to_json(machine, config, rows, &bench.references, &own_columns()) + "\n") {
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
        match charts::write_all(dir, rows, &subtitle) {
            Ok(files) => say(&format!("bench: {} charts in {}", files.len(), dir.display())),
            Err(e) => {
                say(&format!("wbcache bench: writing charts to {}: {e}", dir.display()));
                code = 1;
            }
        }
    }
    (nr_errors, code)
}

impl<'a> Bench<'a> {
    fn new(plan: &'a Plan, site: &'a Site, cgroups: Option<MemCgroups>, can_drop: bool) -> Bench<'a> {
        Bench {
            plan,
            params: plan.params.clone(),
            site,
            cgroups,
            can_drop,
            not_comparable: Vec::new(),
            progress: Progress::new(measurements(&plan.groups, &plan.engines)),
            rows: Vec::new(),
            references: Vec::new(),
            io_backend: None,
            worker_stderr: Vec::new(),
            data_ready: false,
        }
    }

    fn measurements(&self) -> usize {
        measurements(&self.plan.groups, &self.plan.engines)
    }

    /// Every group on every engine it runs on, in order; a workload's table
    /// once its last group ran.
    fn measure_all(&mut self) {
        let groups = &self.plan.groups;
        for (gi, group) in groups.iter().enumerate() {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            let layout_error = self.lay_out_for(group);
            for &engine in self.plan.engines.iter().filter(|e| group.runs_on(**e)) {
                if INTERRUPTED.load(Ordering::SeqCst) {
                    break;
                }
                self.progress.begin(&format!("{} · {}", group.label(), engine.name()));
                let new_rows = match &layout_error {
                    Some(e) => vec![failed_row(group, engine, Status::Error, e.clone())],
                    None => self.measure(group, engine),
                };
                self.progress.finish(&summary(group, &new_rows));
                self.rows.extend(new_rows);
                group.owner.after_rows(&mut self.rows);
            }
            self.measure_references(group);
            let last_of_workload = !matches!(groups.get(gi + 1), Some(g) if g.workload == group.workload);
            if last_of_workload {
                let mut table = workload_table(group, groups, &self.rows, &self.params);
                for r in self.references.iter().filter(|r| r.workload == group.workload) {
                    table.push_str(&format!("\n{}\n", r.sentence()));
                }
                print_stdout(&mut self.progress, &mark_not_comparable(&table, &self.not_comparable));
            }
        }
    }

    /// Lays out what `group` reads before it runs: the shared data file
    /// (once), and files of the workload's own. Why it could not, if so.
    fn lay_out_for(&mut self, group: &Group) -> Option<String> {
        let (p, place) = (&self.params, &self.site.place);
        let mut layout_error = None;
        if group.needs_data() && !self.data_ready {
            self.progress.note(&format!("laying out the {} data file", fmt_size(data_len(p))));
            match lay_out(place, data_len(p)) {
                Ok(()) => self.data_ready = true,
                Err(e) => layout_error = Some(format!("laying out the data file: {e}")),
            }
        }
        let files = group.owner.files_to_lay_out(group, place);
        if let Some(first) = files.first() {
            self.progress.note(&format!("laying out {} file(s) of {}", files.len(), fmt_size(first.len)));
        }
        if let Err(e) = files.iter().try_for_each(|t| lay_out_file(&t.path, t.len, false)) {
            layout_error = Some(format!("laying out the job's files: {e}"));
        }
        layout_error
    }

    /// One run of `group` on `engine`, its files removed after it. A kernel
    /// engine's run that its memory cgroup's OOM killer ended is run again,
    /// up to [`OOM_ATTEMPTS`] times in all: under cgroup v1 the kernel does
    /// not throttle a cgroup's dirty pages, so writers that dirty more than
    /// the limit on a slow disk can leave reclaim nothing clean to take
    /// (`parallel-writeback`'s twelve writers at `--quick`'s 128 MiB, once
    /// in a CI run). Each retry is said; the last failure is reported.
    fn run_once(&mut self, group: &Group, engine: EngineKind) -> Outcome {
        for attempt in 1..=OOM_ATTEMPTS {
            let mut spec = build_spec(group, engine, &self.params, &self.site.place, true);
            if self.can_drop {
                let _ = sys::drop_caches();
            }
            let timeout = self.plan.args.timeout.unwrap_or_else(|| default_timeout_s(group, &spec));
            spec.timeout_s = Some(timeout);
            let run = run_worker(
                &spec,
                self.cgroups.as_mut(),
                Duration::from_secs_f64(timeout),
                &mut self.progress,
                &mut self.worker_stderr,
            );
            if self.site.place.device.is_none() {
                // A job that runs another program works in a directory of its own.
                for t in spec.jobs.iter().flat_map(|j| j.targets()).filter(|t| t.create) {
                    let _ = if t.path.is_dir() { fs::remove_dir_all(&t.path) } else { fs::remove_file(&t.path) };
                }
            }
            if !run.oom_killed || attempt == OOM_ATTEMPTS || INTERRUPTED.load(Ordering::SeqCst) {
                return run.outcome;
            }
            self.progress.note(&format!(
                "bench: {} {} · {}: the OOM killer of its memory cgroup ended attempt {attempt} of {OOM_ATTEMPTS}: {}; \
                 running it again",
                group.workload,
                group.variant.as_deref().unwrap_or("-"),
                engine.name(),
                run.outcome.error.as_deref().unwrap_or("")
            ));
        }
        unreachable!("the last attempt returns")
    }

    /// `group` on `engine`, as many times as asked: the median run's rows.
    fn measure(&mut self, group: &Group, engine: EngineKind) -> Vec<ResultRow> {
        let mut runs = Vec::new();
        for _ in 0..self.plan.args.repeat {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            let outcome = self.run_once(group, engine);
            if self.io_backend.is_none() {
                self.io_backend = outcome.io_backend.clone();
            }
            if self.plan.args.verbose {
                if let Some(st) = &outcome.wbcache_stats {
                    self.progress.note(&format!("  wbcache stats: {st}"));
                }
                for l in self.worker_stderr.drain(..) {
                    self.progress.note(&format!("  worker: {l}"));
                }
            }
            self.worker_stderr.clear();
            runs.push(rows_from(group, engine, &outcome));
        }
        median_run(group.owner, runs)
    }

    /// The group's references, once it ran on some engine (not after an
    /// interruption).
    fn measure_references(&mut self, group: &Group) {
        let ran = self.rows.iter().any(|r| r.is_of(group.workload) && r.variant == group.variant && r.ok());
        if !ran || INTERRUPTED.load(Ordering::SeqCst) {
            return;
        }
        let progress = &mut self.progress;
        let mut note = |line: &str| progress.note(line);
        let mut ctx = ReferenceContext { params: &self.params, place: &self.site.place, note: &mut note };
        self.references.extend(group.owner.references(group, &mut ctx));
    }

    /// After the tables: the I/O backend wbcache ran on, and the targets:
    /// judged on the median of 3 runs or more, of the comparable rows.
    fn print_closing(&mut self) {
        self.progress.clear();
        if let Some(b) = &self.io_backend {
            print_stdout(&mut self.progress, &format!("wbcache ran on its `{b}` I/O backend.\n"));
        }
        let (judged, limit, references) = (self.judged(), self.plan.dirty_limit, &self.references);
        let comparable: Vec<ResultRow> =
            self.rows.iter().filter(|r| !self.not_comparable.iter().any(|e| e.name() == r.engine)).cloned().collect();
        let table = targets(&comparable, limit, references, judged);
        let withheld = verdict_count(targets(&self.rows, limit, references, judged).as_deref())
            .saturating_sub(verdict_count(table.as_deref()));
        let mut after = Vec::new();
        if let Some(t) = &table {
            print_stdout(&mut self.progress, t);
            if !judged {
                after.push(NOT_JUDGED_WHY.to_string());
            } else if t.contains("NOT met") {
                after.push(
                    "\"NOT met\" marks a goal wbcache did not reach in this run; it is a result, not an error.".into(),
                );
            }
        }
        if withheld > 0 {
            let engines: Vec<&str> = self.not_comparable.iter().map(|e| e.name()).collect();
            let verdicts = if withheld == 1 { "1 verdict".to_string() } else { format!("{withheld} verdicts") };
            after.push(format!("{verdicts} against {} withheld: {WITHHELD_WHY}.", engines.join(", ")));
        }
        for line in after {
            print_stdout(&mut self.progress, &format!("\n{line}\n"));
        }
    }

    /// Whether this run's figures are medians enough to judge targets on.
    fn judged(&self) -> bool {
        self.plan.args.repeat >= JUDGED_REPEAT
    }

    /// The JSON's `config`: what the run was asked and what it used.
    fn config_json(&self, notes: &[String]) -> serde_json::Value {
        let (plan, p, place) = (self.plan, &self.params, &self.site.place);
        json!({
            "suite": plan.suite,
            "repeat": plan.args.repeat,
            "memory_bytes": p.memory,
            "size_bytes": p.size,
            "runtime_s": p.runtime_s,
            "stream_cap_s": p.stream_cap_s,
            "call_cap_s": p.call_cap_s,
            "engines": plan.engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
            "workloads": plan.groups.iter().map(Group::slug).collect::<Vec<_>>(),
            "wbcache_options": p.wbcache_options,
            "wbcache_effective_options": plan.effective_options,
            "wbcache_dirty_limit_bytes": plan.dirty_limit,
            "wbcache_io_backend": self.io_backend,
            "kernel_direct_queue_depth": DIRECT_DEPTH,
            "dir": place.dir.as_ref().map(|d| d.display().to_string()),
            "device": place.device.as_ref().map(|d| d.display().to_string()),
            "memory_cgroup": self.cgroups.as_ref().map(|c| c.version()),
            "not_comparable_engines": self.not_comparable.iter().map(|e| e.name()).collect::<Vec<_>>(),
            "targets_judged": self.judged(),
            "drop_caches": self.can_drop,
            "notes": notes,
        })
    }
}

/// The fewest runs of each measurement (`--repeat`) whose median the
/// targets are judged on: one run on a busy machine can mislead.
const JUDGED_REPEAT: u32 = 3;

/// How many times a kernel engine's run is tried when its memory cgroup's
/// OOM killer ends it ([`Bench::run_once`]).
const OOM_ATTEMPTS: u32 = 3;

/// Why targets were not judged, after their table.
const NOT_JUDGED_WHY: &str = "Targets are judged on the median of at least 3 runs of each measurement: run with \
     --repeat 3 to judge them (one run on a busy machine can mislead); this run's figures are shown as measured.";

/// Why the verdicts against kernel engines without their memory limit are
/// withheld.
const WITHHELD_WHY: &str = "those engines ran without the memory cgroup that limits the kernel's page cache to \
     wbcache's memory, so the comparison would not be fair (--allow-unfair judges it all the same)";

/// How long a measurement may take before it is killed: twice its time cap
/// plus a minute, plus what its workload allows for its setup.
fn default_timeout_s(group: &Group, spec: &Spec) -> f64 {
    2.0 * spec.deadline_s + 60.0 + group.owner.timeout_allowance_s(spec)
}

/// The progress display's line for a measurement: its workload's, or the
/// failure.
fn summary(group: &Group, rows: &[ResultRow]) -> String {
    let Some(r) = rows.last() else { return "no result".into() };
    if !r.ok() {
        return format!("{}: {}", r.status, r.error.clone().unwrap_or_default());
    }
    group.owner.summary(rows)
}

/// Of several runs of one measurement of `workload`'s, the one whose
/// primary figure ([`Workload::primary_figure`] of its first row) is the
/// median among the runs that succeeded; a failed run only if all failed.
fn median_run(workload: &dyn Workload, mut runs: Vec<Vec<ResultRow>>) -> Vec<ResultRow> {
    let key = |rows: &Vec<ResultRow>| -> Option<f64> {
        let row = rows.first()?;
        if row.status != "ok" {
            return None;
        }
        workload.primary_figure(row)
    };
    let mut ok: Vec<(f64, usize)> = runs.iter().enumerate().filter_map(|(i, r)| key(r).map(|k| (k, i))).collect();
    if ok.is_empty() {
        return runs.into_iter().next().unwrap_or_default();
    }
    ok.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pick = ok[ok.len() / 2].1;
    runs.swap_remove(pick)
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
fn measurements(groups: &[Group], engines: &[EngineKind]) -> usize {
    groups.iter().map(|g| engines.iter().filter(|e| g.runs_on(**e)).count()).sum()
}

/// A workload's section: its heading (what its groups did, what it models),
/// this run's settings, and its table of its rows.
fn workload_table(group: &Group, groups: &[Group], rows: &[ResultRow], p: &Params) -> String {
    let w = group.owner;
    let mine: Vec<&Group> = groups.iter().filter(|g| g.workload == group.workload).collect();
    let about = format!("{}.{}\n\n{}", w.about(&mine, p), w.context(), run_settings(p));
    let table_rows: Vec<&ResultRow> = rows.iter().filter(|r| r.is_of(w.name())).collect();
    let mut table = w.table(&about, &table_rows);
    if w.shares_the_disk() {
        table.push_str(&crate::report::device_tables(&table_rows));
    }
    table
}

/// The sizes and times behind a table, printed with each one so that a
/// table read alone (or a workload run alone) says what it measured.
fn run_settings(p: &Params) -> String {
    format!(
        "Measured with memory {}, size {}, runtime {} s (caps: {} s for size-based runs, {} s for per-call runs).",
        fmt_size(p.memory),
        fmt_size(p.size),
        p.runtime_s,
        p.stream_cap_s,
        p.call_cap_s
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::fsync_under_load::{FsyncFigures, FSYNC_UNDER_LOAD};
    use crate::workloads::parallel_writeback::{WritebackFigures, PARALLEL_WRITEBACK};
    use crate::workloads::plain::SEQ_WRITE;

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
            let mut row = ResultRow { status: "ok".into(), throughput_mb_s: Some(writers), ..ResultRow::default() };
            row.set_own(&WritebackFigures { writeback_mb_s: Some(writeback), ..WritebackFigures::default() });
            vec![row]
        };
        let runs = vec![pw_run(300.0, 900.0), pw_run(100.0, 800.0), pw_run(200.0, 100.0)];
        let picked = median_run(&PARALLEL_WRITEBACK, runs);
        assert_eq!(picked[0].own::<WritebackFigures>().writeback_mb_s, Some(200.0));
    }

    fn run(status: &str, mb_s: f64) -> Vec<ResultRow> {
        vec![ResultRow { status: status.into(), throughput_mb_s: Some(mb_s), ..ResultRow::default() }]
    }

    /// fsync-under-load's foreground runs are ordered by their fsync total
    /// (not by the throughput, which the pauses dominate).
    #[test]
    fn median_run_orders_fsync_runs_by_their_total() {
        let fsync_run = |total: f64, mb_s: f64| {
            let mut foreground = ResultRow { status: "ok".into(), throughput_mb_s: Some(mb_s), ..ResultRow::default() };
            foreground.set_own(&FsyncFigures { fsync_total_s: Some(total) });
            vec![
                foreground,
                ResultRow { status: "ok".into(), throughput_mb_s: Some(1000.0 - mb_s), ..ResultRow::default() },
            ]
        };
        let runs = vec![fsync_run(3.0, 1.0), fsync_run(1.0, 2.0), fsync_run(2.0, 3.0)];
        let picked = median_run(&FSYNC_UNDER_LOAD, runs);
        assert_eq!(picked[0].own::<FsyncFigures>().fsync_total_s, Some(2.0), "the median total, not the median MB/s");
        assert_eq!(picked.len(), 2, "the run's rows stay together");
    }

    #[test]
    fn median_run_picks_the_middle_successful_run() {
        let picked = median_run(&SEQ_WRITE, vec![run("ok", 900.0), run("ok", 1500.0), run("ok", 1200.0)]);
        assert_eq!(picked[0].throughput_mb_s, Some(1200.0));
        let picked = median_run(&SEQ_WRITE, vec![run("error", 0.0), run("ok", 700.0), run("ok", 800.0)]);
        assert_eq!(picked[0].status, "ok", "failed runs are not chosen while one succeeded");
        let picked = median_run(&SEQ_WRITE, vec![run("error", 0.0)]);
        assert_eq!(picked[0].status, "error");
        assert!(median_run(&SEQ_WRITE, Vec::new()).is_empty());
    }
}
