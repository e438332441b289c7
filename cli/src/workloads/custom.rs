//! `bench --custom`: one job described with fio's words, run on every
//! engine with the same tables, JSON and charts as the catalog's
//! workloads. It is not in the catalog (the command line makes its one
//! group from the fio options) and models nothing of its own. Each of its
//! threads is a job over its own files, laid out by the runner unless the
//! job only writes sequentially; the requests (round robin over the files,
//! reads and writes mixed as asked, fsyncs as asked) are this module's own
//! timed phase.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{round_down, Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Workload, WorkloadInfo};
use crate::bench_worker::{eof_at, JobContext, JobFiles, JobRaw, Measured, OpGen};
use crate::engines::{EngineFile, EngineKind, Target};
use crate::measure::Histogram;
use crate::sys::{exact_size, IoBuffer, Rng};

pub struct Custom;

pub static CUSTOM: Custom = Custom;

/// Its name in the rows; it has no catalog entry to say more.
static INFO: WorkloadInfo = WorkloadInfo { name: "custom", summary: "", about: "", models: "", source: None };

/// fio's `--rw` values that make sense for a synchronous API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FioRw {
    Read,
    Write,
    RandRead,
    RandWrite,
    RandRw,
}

impl FioRw {
    pub const ALL: [FioRw; 5] = [FioRw::Read, FioRw::Write, FioRw::RandRead, FioRw::RandWrite, FioRw::RandRw];

    pub fn name(self) -> &'static str {
        match self {
            FioRw::Read => "read",
            FioRw::Write => "write",
            FioRw::RandRead => "randread",
            FioRw::RandWrite => "randwrite",
            FioRw::RandRw => "randrw",
        }
    }

    pub fn parse(s: &str) -> Option<FioRw> {
        FioRw::ALL.into_iter().find(|rw| rw.name() == s)
    }

    pub fn random(self) -> bool {
        matches!(self, FioRw::RandRead | FioRw::RandWrite | FioRw::RandRw)
    }

    /// The share of reads, in percent, given fio's `--rwmixread`.
    pub fn read_percent(self, rwmixread: u8) -> u8 {
        match self {
            FioRw::Read | FioRw::RandRead => 100,
            FioRw::Write | FioRw::RandWrite => 0,
            FioRw::RandRw => rwmixread,
        }
    }

    /// Reads need files with data in them before the timed phase (fio lays
    /// them out first); a sequential write starts from new, empty files.
    pub fn needs_layout(self) -> bool {
        self != FioRw::Write
    }
}

/// One fio-style job, as `bench --custom` was given it. Each of `numjobs`
/// threads does `size` bytes of I/O (or stops at the runtime) over its own
/// `nrfiles` files of `size / nrfiles` bytes, switching file after every
/// request (fio's default `file_service_type=roundrobin`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FioJob {
    pub rw: FioRw,
    pub bs: u64,
    pub size: u64,
    pub numjobs: u64,
    pub nrfiles: u64,
    pub rwmixread: u8,
    /// fsync a file after every this many writes to it; 0 never.
    pub fsync_every: u64,
    /// fsync every file when the job ends (fio's `end_fsync=1`).
    pub end_fsync: bool,
    /// `--runtime` was given: it caps the job (otherwise the size does).
    pub runtime_capped: bool,
}

impl FioJob {
    pub fn file_len(&self) -> u64 {
        round_down(self.size / self.nrfiles, self.bs)
    }

    /// The bytes of every file of every thread.
    pub fn files_bytes(&self) -> u64 {
        self.numjobs * self.nrfiles * self.file_len()
    }

    /// The variant name: the job in fio's words, short.
    pub fn variant(&self) -> String {
        // Exact: a --bs of 3000 is `3000`, not a rounded `2.9k`.
        let mut v = format!("{}-{}", self.rw.name(), exact_size(self.bs).to_lowercase());
        if self.rw == FioRw::RandRw {
            v += &format!("-mix{}", self.rwmixread);
        }
        if self.fsync_every > 0 {
            v += &format!("-fsync{}", self.fsync_every);
        }
        if self.end_fsync {
            v += "-endfsync";
        }
        v + &format!("-j{}-f{}", self.numjobs, self.nrfiles)
    }

    /// The file of `job`'s `file`-th file on a file system.
    pub fn file_name(job: u64, file: u64) -> String {
        format!("custom-{job}.{file}.bin")
    }
}

/// The group of a `--custom` job.
pub fn group(job: FioJob) -> Group {
    Group::new(&CUSTOM, Some(job.variant()), job)
}

/// File `file` of custom job `job`: laid out by the runner (in place on a
/// device) unless the job only writes sequentially.
pub fn custom_file(place: &Place, fio: &FioJob, job: u64, file: u64) -> Target {
    let len = fio.file_len();
    match (&place.device, &place.dir) {
        (Some(dev), _) => Target { path: dev.clone(), offset: (job * fio.nrfiles + file) * len, len, create: false },
        (None, Some(dir)) => {
            Target { path: dir.join(FioJob::file_name(job, file)), offset: 0, len, create: !fio.rw.needs_layout() }
        }
        (None, None) => unreachable!("a place has a dir or a device"),
    }
}

impl Workload for Custom {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    /// Never selected by name: the command line makes its group.
    fn groups(&'static self, _selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        None
    }

    /// The files of a job that reads or overwrites (fio does the same
    /// before its jobs start); on a device, the data is there.
    fn files_to_lay_out(&self, group: &Group, place: &Place) -> Vec<Target> {
        let job = group.shape::<FioJob>();
        if place.device.is_some() || !job.rw.needs_layout() {
            return Vec::new();
        }
        (0..job.numjobs).flat_map(|j| (0..job.nrfiles).map(move |f| custom_file(place, job, j, f))).collect()
    }

    fn describe(&self, group: &Group, p: &Params) -> String {
        let job = group.shape::<FioJob>();
        let mix = match job.rw {
            FioRw::RandRw => format!(" ({}% reads)", job.rwmixread),
            _ => String::new(),
        };
        let fsync = match (job.fsync_every, job.end_fsync) {
            (0, false) => String::new(),
            (0, true) => ", fsync at the end".into(),
            (n, end) => format!(", fsync every {n} writes{}", if end { " and at the end" } else { "" }),
        };
        let stop =
            if job.runtime_capped { format!(" or {} s, whichever comes first", p.runtime_s) } else { String::new() };
        format!(
            "fio-style job: rw={}{mix}, bs={}, {} thread(s), each over {} file(s) of {}, {} of I/O per thread{stop}{fsync}",
            job.rw.name(),
            exact_size(job.bs),
            job.numjobs,
            job.nrfiles,
            exact_size(job.file_len()),
            exact_size(job.size)
        )
    }

    fn jobs(&self, group: &Group, engine: EngineKind, p: &Params, place: &Place, _name: &str) -> Jobs {
        let fio = group.shape::<FioJob>();
        let jobs = (0..fio.numjobs)
            .map(|j| {
                let mut targets: Vec<Target> = (0..fio.nrfiles).map(|f| custom_file(place, fio, j, f)).collect();
                let first = targets.remove(0);
                JobSpec::new(engine, first, Pattern::own(fio))
                    .with_final_fsync_if(fio.end_fsync)
                    .seeded(11 + j)
                    .with_more_targets(targets)
            })
            .collect();
        let deadline_s = if fio.runtime_capped { p.runtime_s } else { p.stream_cap_s };
        // fio's psync engine: one request at a time per thread.
        Jobs { jobs, deadline_s, pipelined: false }
    }

    fn run_job(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        let fio: FioJob = ctx.own_pattern()?;
        ctx.run_timed(true, |files, _| fio_requests(ctx, files, &fio))
    }

    /// A custom job is the user's: it models nothing the bench can name.
    fn context(&self) -> String {
        String::new()
    }
}

/// A thread's requests over its files (the target, then its other
/// targets), round robin, until its size is done or the deadline.
fn fio_requests(ctx: &JobContext<'_>, files: &mut JobFiles, fio: &FioJob) -> io::Result<Measured> {
    let job = ctx.job;
    let bs = fio.bs;
    let bases: Vec<u64> = std::iter::once(job.target.offset).chain(job.more_targets.iter().map(|t| t.offset)).collect();
    let walk = if fio.rw.random() {
        Pattern::Rand { write: false, bs, ops: None }
    } else {
        Pattern::Seq { write: false, bs, total: None }
    };
    let mut gens: Vec<OpGen> =
        (0..bases.len()).map(|i| OpGen::new(&walk, fio.file_len(), job.seed.wrapping_add(i as u64))).collect();
    let wbuf = IoBuffer::filled(bs as usize, job.seed);
    let mut rbuf = IoBuffer::new(bs as usize);
    let mut mix = Rng::new(job.seed ^ 0xf10);
    let read_percent = u64::from(fio.rw.read_percent(fio.rwmixread));
    let mut writes_since_fsync = vec![0u64; bases.len()];
    let mut fsyncs = Histogram::default();
    let mut m = Measured::default();
    let deadline = Instant::now() + ctx.deadline_after();
    let mut request = 0usize;
    while !ctx.cancel.load(Relaxed) && m.bytes < fio.size {
        // Round robin over the job's files, one request each.
        let index = request % bases.len();
        request += 1;
        let off = bases[index] + gens[index].next().expect("fio walks never end");
        let read = mix.below(100) < read_percent;
        let f: &mut dyn EngineFile = if index == 0 { &mut *files.file } else { &mut *files.others[index - 1] };
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        let n = if read {
            let n = f.read_at(&mut rbuf, off)?;
            if n == 0 {
                return Err(eof_at(off));
            }
            n as u64
        } else {
            f.write_at(&wbuf, off)?;
            bs
        };
        m.record(ctx.counter(), n, t);
        if !read && fio.fsync_every > 0 {
            writes_since_fsync[index] += 1;
            if writes_since_fsync[index] == fio.fsync_every {
                writes_since_fsync[index] = 0;
                let t = Instant::now();
                f.fsync()?;
                fsyncs.record(t.elapsed().as_nanos() as u64);
            }
        }
    }
    if fsyncs.count() > 0 {
        m.fsync = Some(fsyncs);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(bs: u64) -> FioJob {
        FioJob {
            rw: FioRw::Read,
            bs,
            size: 32 << 20,
            numjobs: 1,
            nrfiles: 1,
            rwmixread: 50,
            fsync_every: 0,
            end_fsync: false,
            runtime_capped: false,
        }
    }

    /// The label says the request size exactly: a size no unit divides in
    /// bytes, not rounded.
    #[test]
    fn labels_say_the_size_exactly() {
        assert_eq!(job(4096).variant(), "read-4k-j1-f1");
        assert_eq!(job(1 << 20).variant(), "read-1m-j1-f1");
        assert_eq!(job(3000).variant(), "read-3000-j1-f1");
        assert_eq!(job(1536).variant(), "read-1536-j1-f1");
        assert_eq!(job(3000).file_len(), 33_552_000, "whole requests, the file ending mid-block");
    }
}
