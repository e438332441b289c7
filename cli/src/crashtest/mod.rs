//! `wbcache crashtest [--paths DIR] --check 'COMMAND' [--model
//! posix|ext4-ordered] [--states N] [--seed S] -- PROGRAM ARGS...`: every
//! state a crash could leave of an unmodified program's files, each
//! checked by the program's own recovery (ALICE's method: record once,
//! then build the crash states a persistence model allows).
//!
//! The run, in order: the directory's contents are kept (every state
//! starts from them); the program runs once under the preload library,
//! whose recorder writes every call that changes a file or name under the
//! directory, and every durability point, to the trace ([`trace`]); the
//! trace replayed over the initial contents must give the directory as the
//! program left it, byte for byte, or the run stops (a change the recorder
//! missed would make every verdict wrong); then at each crash point the
//! model ([`model`]) says what is durable and what is pending, the
//! enumerator ([`states`]) makes the states, each is made into a fresh
//! directory and checked ([`check`]), and the violations are minimized
//! and reported ([`report`]). Exit status: 0 no violation, 1 a
//! violation, 2 bad input or a run that cannot be checked.
//!
//! It owns its work directory (`--work`, else a new one under the
//! temporary directory, removed unless a violation was found): the trace,
//! the initial contents (`base/`), the program's output, and a directory
//! per checker slot. `--rebuild WORK --point K [--lost ...] [--torn I:N]
//! --into DIR` makes one state of a kept work directory again.

mod check;
mod image;
mod model;
mod report;
mod states;
mod trace;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::preload_library::{library, preload_list};
use crate::progress::say;
use check::{Checker, Recording, ToCheck};
use image::Image;
use model::{Analysis, ModelKind};
use report::{JsonReport, JsonTorn, JsonViolation, Violation};
use states::{Bounds, Enumerator, State};
use trace::{Call, Trace};

#[derive(Args, Debug)]
pub struct CrashtestArgs {
    /// The directory whose files the program changes (default: the
    /// current directory): its calls on files under it are recorded, and
    /// its contents before the run are where every crash state starts.
    #[arg(long, value_name = "DIR")]
    pub paths: Option<PathBuf>,
    /// The program's own checker: a shell command run in each crash
    /// state, in its directory (also $WBCACHE_CRASH_DIR), with
    /// $WBCACHE_CRASH_STDOUT (a file: the program's output up to the
    /// crash) and $WBCACHE_CRASH_POINT; exit 0 when the program recovers.
    #[arg(long, value_name = "COMMAND", required_unless_present = "rebuild")]
    pub check: Option<String>,
    /// The persistence model: posix (nothing is durable unless synced) or
    /// ext4-ordered (ext4's data=ordered journal); see docs/crashtest.md.
    #[arg(long, default_value = "posix", value_name = "MODEL")]
    pub model: String,
    /// At most N reordered states, and N sampled ones, per crash point.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub states: usize,
    /// The seed of the sampled states.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// Checkers run at once (default: one per CPU).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Seconds a checker may take on one state before it is a violation.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub check_timeout: u64,
    /// Where the trace, the initial contents and the states go (default:
    /// a new directory under the temporary directory, kept only when a
    /// violation is found).
    #[arg(long, value_name = "DIR")]
    pub work: Option<PathBuf>,
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Leave out of every state the files the program maps shared and
    /// writable (their stores cannot be recorded: SQLite's -shm, which it
    /// rebuilds) instead of refusing the run.
    #[arg(long)]
    pub ignore_mapped: bool,
    /// Rebuild one state of a kept work directory into --into instead of
    /// running a program.
    #[arg(long, value_name = "WORK", conflicts_with_all = ["check", "program"])]
    pub rebuild: Option<PathBuf>,
    /// With --rebuild: the crash point (the last call before the crash).
    #[arg(long, value_name = "K", requires = "rebuild")]
    pub point: Option<usize>,
    /// With --rebuild: the pending calls the state lost.
    #[arg(long, value_name = "CALLS", value_delimiter = ',', requires = "rebuild")]
    pub lost: Vec<usize>,
    /// With --rebuild: the write the state keeps only the first bytes of.
    #[arg(long, value_name = "CALL:BYTES", requires = "rebuild")]
    pub torn: Option<String>,
    /// With --rebuild: the new directory to make the state in.
    #[arg(long, value_name = "DIR", requires = "rebuild")]
    pub into: Option<PathBuf>,
    /// The program and its arguments, after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM",
        required_unless_present = "rebuild"
    )]
    pub program: Vec<OsString>,
}

/// What a work directory keeps of its run (`run.json`).
#[derive(Serialize, Deserialize)]
struct RunInfo {
    model: String,
    paths: PathBuf,
    /// The initial contents' files with the inodes the trace names them by.
    inodes: BTreeMap<PathBuf, u64>,
}

/// A checked run's settings.
struct Plan {
    kind: ModelKind,
    paths: PathBuf,
    check: String,
    work: PathBuf,
    work_given: bool,
    library: PathBuf,
    jobs: usize,
}

pub fn run(args: CrashtestArgs) -> i32 {
    if args.rebuild.is_some() {
        return match rebuild(&args) {
            Ok(dir) => {
                println!("{}", dir.display());
                0
            }
            Err(message) => fail(&message),
        };
    }
    let plan = match plan(&args) {
        Ok(plan) => plan,
        Err(message) => return fail(&message),
    };
    let outcome = crashtest(&args, &plan);
    // A work directory of its own is kept only for a violation's rebuild.
    if !plan.work_given && !matches!(outcome, Ok(true)) {
        let _ = fs::remove_dir_all(&plan.work);
    }
    match outcome {
        Ok(found) => i32::from(found),
        Err(message) => fail(&message),
    }
}

fn fail(message: &str) -> i32 {
    say(&format!("wbcache crashtest: {message}"));
    2
}

/// The settings, every one checked before the program runs.
fn plan(args: &CrashtestArgs) -> Result<Plan, String> {
    let kind = ModelKind::parse(&args.model)
        .ok_or_else(|| format!("--model {}: not a model (posix, ext4-ordered)", args.model))?;
    let cwd = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let paths = args.paths.clone().unwrap_or_else(|| cwd.clone());
    let paths = fs::canonicalize(&paths).map_err(|e| format!("--paths {}: {e}", paths.display()))?;
    if !paths.is_dir() {
        return Err(format!("--paths {}: not a directory", paths.display()));
    }
    let check = args.check.clone().filter(|c| !c.trim().is_empty()).ok_or("--check: an empty command")?;
    if args.jobs == Some(0) || args.states == 0 {
        return Err("--jobs and --states take a number above 0".to_string());
    }
    let library = library()?;
    let (work, work_given) = match &args.work {
        Some(dir) => (cwd.join(dir), true),
        None => (std::env::temp_dir().join(format!("wbcache-crashtest-{}", std::process::id())), false),
    };
    if work.starts_with(&paths) {
        return Err(format!("--work {}: inside --paths, where the program's files are", work.display()));
    }
    if fs::read_dir(&work).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(format!("--work {}: not empty (a kept run's? give a new directory)", work.display()));
    }
    fs::create_dir_all(&work).map_err(|e| format!("--work {}: {e}", work.display()))?;
    let jobs = args.jobs.unwrap_or_else(crate::sys::cpus);
    Ok(Plan { kind, paths, check, work, work_given, library, jobs })
}

/// The whole run; whether a violation was found.
fn crashtest(args: &CrashtestArgs, plan: &Plan) -> Result<bool, String> {
    let started = Instant::now();
    let initial = keep_initial(plan)?;
    let status = record(args, plan)?;
    let trace = Trace::read(&plan.work.join("trace.jsonl")).map_err(|e| format!("the trace: {e}"))?;
    if let Some(what) = trace.unsupported().first() {
        return Err(format!("the program made a call the recorder cannot follow: {what}"));
    }
    let mapped = mapped_files(&trace, args.ignore_mapped)?;
    let initial = initial.without_files(&mapped);
    self_check(&trace, &initial, &plan.paths, &mapped)?;
    let stdout = fs::read(plan.work.join("stdout")).map_err(|e| format!("the program's output: {e}"))?;
    let analysis = Analysis::new(plan.kind, &trace.records, &initial);
    let points = states::crash_points(&trace.records);
    let mut enumerator =
        Enumerator::new(&analysis, &trace.records, Bounds { states_per_point: args.states, seed: args.seed });
    let mut items = Vec::new();
    for &point in &points {
        let cp = analysis.crash_point(&trace.records, point);
        let durable = Arc::new(cp.durable.clone());
        items.extend(enumerator.states(&cp).into_iter().map(|state| ToCheck { state, durable: durable.clone() }));
    }
    say(&format!(
        "wbcache crashtest: the program ({status}) made {} calls, {} durability points; checking {} states at {} \
         crash points under {} ({} at once)",
        trace.records.len(),
        trace.records.iter().filter(|r| r.call.is_durability_point()).count(),
        items.len(),
        points.len(),
        plan.kind.name(),
        plan.jobs
    ));
    let recording = Recording { trace: &trace, initial: &initial, stdout: &stdout, left_out: &mapped };
    let checker =
        Checker { command: plan.check.clone(), timeout: Duration::from_secs(args.check_timeout), jobs: plan.jobs };
    let checked = check_with_progress(&checker, &recording, &items, &plan.work)?;
    let violations = report::minimal_violations(&items, &checked.verdicts);
    let durable = violations
        .iter()
        .map(|v| items.iter().find(|i| i.state == v.state).map(|i| i.durable.clone()).unwrap_or_default())
        .collect();
    let findings = Findings {
        trace: &trace,
        lines: report::call_lines(&trace, &initial),
        violations,
        durable,
        counts: enumerator.counts,
        crash_points: points.len(),
        states: items.len(),
        same_as_earlier: checked.same_as_earlier,
    };
    print_report(plan, &findings);
    let seconds = started.elapsed().as_secs_f64();
    say(&format!(
        "wbcache crashtest: {} violation(s) in {} states ({}; {} had the files of an earlier state, its verdict \
         theirs) in {seconds:.1} s",
        findings.violations.len(),
        findings.states,
        report::counts_line(&findings.counts),
        findings.same_as_earlier
    ));
    if let Some(path) = &args.json {
        let json = json_report(args, plan, &findings, seconds);
        fs::write(path, json + "\n").map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    Ok(!findings.violations.is_empty())
}

/// What the checks found, for the reports.
struct Findings<'a> {
    trace: &'a Trace,
    /// Each call said for people.
    lines: Vec<String>,
    violations: Vec<Violation>,
    /// Each violation's durable calls.
    durable: Vec<Arc<BTreeSet<usize>>>,
    counts: [states::ClassCount; 5],
    crash_points: usize,
    states: usize,
    /// States not checked again: the files and output of an earlier one.
    same_as_earlier: usize,
}

impl Findings<'_> {
    /// The marked trace of violation `n`.
    fn trace_of(&self, n: usize) -> Vec<String> {
        let durable = &self.durable[n];
        report::violation_trace(&self.violations[n], &|i| durable.contains(&i), self.trace, &self.lines)
    }

    /// What violation `n` is, in one line.
    fn heading(&self, n: usize) -> String {
        let v = &self.violations[n];
        let s = &v.state;
        let mut what = format!("{} call(s) lost", s.lost.len());
        if s.torn.is_some() {
            what += ", one write torn";
        }
        let also = match v.also_at.len() {
            0 => String::new(),
            k => format!("; the same at {k} later crash point(s)"),
        };
        format!(
            "violation {} of {}: a crash after call {} ({}), {what} ({} state){also}",
            n + 1,
            self.violations.len(),
            s.point,
            self.lines[s.point],
            s.class.name()
        )
    }
}

/// The violations on standard output, each with its trace, its checker's
/// ending and output, and the command that rebuilds its state.
fn print_report(plan: &Plan, findings: &Findings<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    for (n, v) in findings.violations.iter().enumerate() {
        let _ = writeln!(out, "{}", findings.heading(n));
        for line in findings.trace_of(n) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "  the checker: {}", v.verdict.ending);
        for line in v.verdict.output.lines() {
            let _ = writeln!(out, "    | {line}");
        }
        let _ = writeln!(out, "  rebuild it: {}\n", report::rebuild_command(&plan.work, &v.state));
    }
}

/// The JSON report.
fn json_report(args: &CrashtestArgs, plan: &Plan, findings: &Findings<'_>, seconds: f64) -> String {
    let violations = findings
        .violations
        .iter()
        .enumerate()
        .map(|(n, v)| JsonViolation {
            point: v.state.point,
            class: v.state.class.name().to_string(),
            lost: v.state.lost.clone(),
            torn: v.state.torn.map(|(call, bytes_kept)| JsonTorn { call, bytes_kept }),
            checker: v.verdict.ending.clone(),
            output: v.verdict.output.clone(),
            also_at: v.also_at.clone(),
            trace: findings.trace_of(n),
            rebuild: report::rebuild_command(&plan.work, &v.state),
        })
        .collect();
    let report = JsonReport {
        model: plan.kind.name().to_string(),
        program: args.program.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        calls: findings.trace.records.len(),
        durability_points: findings.trace.records.iter().filter(|r| r.call.is_durability_point()).count(),
        crash_points: findings.crash_points,
        states: report::json_counts(&findings.counts),
        same_as_earlier: findings.same_as_earlier,
        violations,
        seconds,
        work: plan.work.clone(),
    };
    serde_json::to_string_pretty(&report).expect("the report serializes")
}

/// `--rebuild`: one state of a kept work directory made again in a new
/// directory; returns it.
fn rebuild(args: &CrashtestArgs) -> Result<PathBuf, String> {
    let work = args.rebuild.as_deref().expect("--rebuild");
    let info: RunInfo = fs::read_to_string(work.join("run.json"))
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        .map_err(|e| format!("--rebuild {}: not a kept crash test's work directory ({e})", work.display()))?;
    let kind = ModelKind::parse(&info.model).ok_or_else(|| format!("run.json: model {}", info.model))?;
    let into = args.into.clone().ok_or("--rebuild needs --into DIR")?;
    if fs::read_dir(&into).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!("--into {}: not empty", into.display()));
    }
    let trace = Trace::read(&work.join("trace.jsonl")).map_err(|e| format!("the trace: {e}"))?;
    let point = args.point.ok_or("--rebuild needs --point K")?;
    if point >= trace.records.len() {
        return Err(format!("--point {point}: the trace has {} calls", trace.records.len()));
    }
    let initial = Image::read(&work.join("base")).map_err(|e| format!("{}/base: {e}", work.display()))?;
    let initial = initial.renumbered(&info.inodes);
    let torn = args.torn.as_deref().map(parse_torn).transpose()?;
    // As the run saw it: files mapped shared and writable left out.
    let left_out = mapped_files(&trace, true)?;
    let initial = initial.without_files(&left_out);
    let analysis = Analysis::new(kind, &trace.records, &initial);
    let cp = analysis.crash_point(&trace.records, point);
    for call in args.lost.iter().chain(torn.as_ref().map(|(t, _)| t)) {
        if !cp.pending.contains(call) {
            return Err(format!("call {call} is not pending at crash point {point}"));
        }
    }
    let kept: BTreeSet<usize> =
        cp.pending.iter().copied().filter(|p| !args.lost.contains(p) && torn.is_none_or(|(t, _)| t != *p)).collect();
    let state = State { point, class: states::Class::OmitOne, kept, torn, lost: args.lost.clone() };
    let stdout = fs::read(work.join("stdout")).unwrap_or_default();
    let recording = Recording { trace: &trace, initial: &initial, stdout: &stdout, left_out: &left_out };
    let item = ToCheck { state, durable: Arc::new(cp.durable) };
    let mut stdout_file = into.clone().into_os_string();
    stdout_file.push(".stdout");
    check::materialize(&recording, &item, &into, Path::new(&stdout_file)).map_err(|e| format!("--into: {e}"))?;
    Ok(into)
}

/// `--torn CALL:BYTES`.
fn parse_torn(text: &str) -> Result<(usize, u64), String> {
    let (call, bytes) = text.split_once(':').ok_or_else(|| format!("--torn {text}: CALL:BYTES"))?;
    match (call.parse(), bytes.parse()) {
        (Ok(call), Ok(bytes)) => Ok((call, bytes)),
        _ => Err(format!("--torn {text}: CALL:BYTES, two numbers")),
    }
}

/// The directory's contents before the run, kept in memory and in
/// `base/` (with their inodes) for `--rebuild`.
fn keep_initial(plan: &Plan) -> Result<Image, String> {
    let initial = Image::read(&plan.paths).map_err(|e| format!("--paths {}: {e}", plan.paths.display()))?;
    let base = plan.work.join("base");
    fs::create_dir_all(&base).and_then(|()| initial.write(&base)).map_err(|e| format!("{}: {e}", base.display()))?;
    let info = RunInfo { model: plan.kind.name().to_string(), paths: plan.paths.clone(), inodes: initial.inodes() };
    let text = serde_json::to_string_pretty(&info).expect("run info serializes");
    fs::write(plan.work.join("run.json"), text).map_err(|e| format!("{}: {e}", plan.work.display()))?;
    Ok(initial)
}

/// Runs the program once under the recorder, its output into the work
/// directory; says how it ended.
fn record(args: &CrashtestArgs, plan: &Plan) -> Result<String, String> {
    let (program, rest) = args.program.split_first().ok_or("no program to run")?;
    let stdout = fs::File::create(plan.work.join("stdout")).map_err(|e| format!("the output file: {e}"))?;
    let status = Command::new(program)
        .args(rest)
        .env("LD_PRELOAD", preload_list(&plan.library))
        .env("WBCACHE_PATHS", &plan.paths)
        .env("WBCACHE_CRASHTEST_TRACE", plan.work.join("trace.jsonl"))
        .env("WBCACHE_CRASHTEST_ROOT", &plan.paths)
        .env("WBCACHE_CRASHTEST_STDOUT", plan.work.join("stdout"))
        .stdin(Stdio::null())
        .stdout(stdout)
        .status()
        .map_err(|e| format!("{}: {e}", Path::new(program).display()))?;
    Ok(match status.code() {
        Some(code) => format!("exit status {code}"),
        None => "killed by a signal".to_string(),
    })
}

/// The files the program mapped shared and writable: left out with
/// `--ignore-mapped`, else the run is refused.
fn mapped_files(trace: &Trace, ignore: bool) -> Result<BTreeSet<u64>, String> {
    let mapped: BTreeSet<u64> = trace
        .records
        .iter()
        .filter_map(|r| match r.call {
            Call::Mapped { ino } => Some(ino),
            _ => None,
        })
        .collect();
    if !mapped.is_empty() && !ignore {
        return Err(format!(
            "the program mapped {} file(s) shared and writable; stores through a mapping cannot be recorded (run \
             with --ignore-mapped to leave such files out of the states, as SQLite's -shm can be)",
            mapped.len()
        ));
    }
    Ok(mapped)
}

/// The trace replayed whole over the initial contents must give the
/// directory as the program left it.
fn self_check(trace: &Trace, initial: &Image, paths: &Path, mapped: &BTreeSet<u64>) -> Result<(), String> {
    let mut replayed = initial.clone();
    for (i, record) in trace.records.iter().enumerate() {
        replayed.apply(&record.call, trace.bytes(i), image::Kept::Whole);
    }
    let replayed = replayed.without_files(mapped);
    let found = Image::read(paths).map_err(|e| format!("--paths {}: {e}", paths.display()))?;
    let found = found.without_files(&mapped_inodes_now(&found, mapped));
    match replayed.difference(&found) {
        None => Ok(()),
        Some(diff) => Err(format!(
            "the replayed trace does not give the directory the program left ({diff}): a change escaped the \
             recorder, so no crash state could be trusted"
        )),
    }
}

/// The mapped files as the directory now numbers them (the same inodes).
fn mapped_inodes_now(found: &Image, mapped: &BTreeSet<u64>) -> BTreeSet<u64> {
    found.inodes().values().copied().filter(|ino| mapped.contains(ino)).collect()
}

/// Checks every state, a progress line every few seconds with the time
/// left at the pace so far.
fn check_with_progress(
    checker: &Checker,
    recording: &Recording<'_>,
    items: &[ToCheck],
    work: &Path,
) -> Result<check::Checked, String> {
    let started = Instant::now();
    let last = std::sync::Mutex::new(Instant::now());
    let total = items.len();
    let progress = |done: usize| {
        let mut last = last.lock().unwrap();
        if last.elapsed() < Duration::from_secs(5) || done == total {
            return;
        }
        *last = Instant::now();
        let elapsed = started.elapsed().as_secs_f64();
        let left = elapsed / done as f64 * (total - done) as f64;
        say(&format!("wbcache crashtest: {done}/{total} states checked ({elapsed:.0} s, about {left:.0} s left)"));
    };
    checker.check_all(recording, items, work, &progress).map_err(|e| format!("checking the states: {e}"))
}
