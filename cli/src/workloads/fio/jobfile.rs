//! `bench --fio JOBFILE`: the user's own fio job file, run by fio on
//! kernel-buffered (as it is), kernel-direct (`--direct=1` added) and
//! wbcache (under the preload library), its jobs' figures side by side.
//! Not in the catalog: the command line makes its one group. Each engine's
//! fio runs in a fresh directory of the measurement's (`--directory` and
//! the working directory, so the file's relative names land there; only
//! files there go through the preload's cache), every job as a thread of
//! the one fio process (`--thread`), and the directory is removed after.
//! A job whose I/O engine the preload does not see (io_uring, libaio) is
//! refused on wbcache rather than measured on the kernel unawares.

use std::io;
use std::path::PathBuf;

use super::{
    capacity_of, engine_options, fio_rows, fio_summary, fio_table, run_dir, run_fio, FioFigures, FioRun, FIO_SOURCE,
};
use crate::bench_worker::{JobContext, JobRaw, JobResult, Outcome};
use crate::engines::EngineKind;
use crate::report::{field_names, ResultRow};
use crate::sys::fmt_size;
use crate::workloads::external::program_job;
use crate::workloads::{Group, Jobs, Params, Place, Selection, Spec, Workload, WorkloadInfo};

pub struct FioJobfile;

pub static FIO_JOBFILE: FioJobfile = FioJobfile;

/// Its name in the rows; it has no catalog entry to say more.
static INFO: WorkloadInfo =
    WorkloadInfo { name: "fio-jobfile", summary: "", about: "", models: "", source: Some(FIO_SOURCE) };

/// The engines a job file runs on.
pub const JOBFILE_ENGINES: [EngineKind; 3] =
    [EngineKind::KernelBuffered, EngineKind::KernelDirect, EngineKind::Wbcache];

/// How long a job file may run beyond twice --runtime and a minute before
/// it is killed (its own runtime is its own: --timeout bounds it).
pub const JOBFILE_ALLOWANCE_S: f64 = 600.0;

/// The job file of `bench --fio`, absolute.
#[derive(Clone, Debug)]
pub struct JobFile {
    pub path: PathBuf,
}

/// The group of a `--fio` job file.
pub fn group(path: PathBuf) -> Group {
    Group::new(&FIO_JOBFILE, None, JobFile { path })
}

impl Workload for FioJobfile {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    /// Never selected by name: the command line makes its group.
    fn groups(&'static self, _selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        None
    }

    fn only_on(&self) -> Option<&'static [EngineKind]> {
        Some(&JOBFILE_ENGINES)
    }

    fn label(&self, group: &Group) -> String {
        format!("fio {}", group.shape::<JobFile>().path.display())
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        format!(
            "the jobs of {}, run by fio on each engine (kernel-buffered as they are, kernel-direct with --direct=1, \
             wbcache under libwbcache_preload.so with capacity {}), every job a thread of one fio process \
             (--thread), in a fresh directory (--directory) removed after each run",
            group.shape::<JobFile>().path.display(),
            fmt_size(capacity_of(&p.wbcache_options))
        )
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let file = group.shape::<JobFile>();
        let dir = run_dir(place, name);
        let mut args = engine_options(engine);
        if let Some(d) = &dir {
            args.push(format!("--directory={}", d.display()));
        }
        args.push(file.path.display().to_string());
        let preload_options = (!engine.is_kernel()).then(|| p.wbcache_options.clone());
        let run = FioRun {
            dir,
            processes: vec![args],
            preload_options,
            uncached: false,
            merged_as: None,
            helper_jobs: Vec::new(),
        };
        Jobs { jobs: vec![program_job(engine, run.dir.as_deref(), &run, 0)], deadline_s: p.runtime_s, pipelined: false }
    }

    fn timeout_allowance_s(&self, _spec: &Spec) -> f64 {
        JOBFILE_ALLOWANCE_S
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        run_fio(ctx, &ctx.own_pattern()?)
    }

    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        fio_rows(group, engine, jobs, o)
    }

    fn own_fields(&self) -> Vec<String> {
        field_names::<FioFigures>()
    }

    fn shares_the_disk(&self) -> bool {
        true
    }

    fn summary(&self, rows: &[ResultRow]) -> String {
        fio_summary(rows)
    }

    /// A job file is the user's: it models nothing the bench can name.
    fn context(&self) -> String {
        String::new()
    }

    fn table(&self, about: &str, rows: &[&ResultRow]) -> String {
        fio_table(self.name(), about, rows)
    }
}
