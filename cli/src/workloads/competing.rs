//! `competing`: the engine's writer against one buffered writer of the same
//! system, side by side for --runtime. One measurement gives three rows,
//! each writer's and their aggregate, named by the jobs' roles; charts tell
//! them apart by their dash.

use super::plain::DONTCACHE_KICK;
use super::{Group, JobSpec, Jobs, Params, Pattern, Place, Selection, Workload, WorkloadInfo, MIB};
use crate::bench_worker::{JobResult, Outcome};
use crate::engines::EngineKind;
use crate::report::{aggregate, ResultRow};

/// The role (and row) of the engine's own writer.
const WRITER: &str = "writer";
/// The role (and row) of the buffered writer beside it.
const BUFFERED_PEER: &str = "buffered-peer";
/// The row of both writers together.
const AGGREGATE: &str = "aggregate";

pub struct Competing;

pub static COMPETING: Competing = Competing;

static INFO: WorkloadInfo = WorkloadInfo {
    name: "competing",
    summary: "the engine's writer next to a buffered writer of the same system",
    about: "the engine's writer against one buffered writer of the same system (kernel or wbcache), separate files, 1 MiB sequential, for --runtime, then fsync: per-writer MB/s and p99.9 (rows: writer, buffered-peer, aggregate)",
    models: "an uncached stream (a backup) next to an ordinary buffered writer: does either starve the other",
    source: Some(DONTCACHE_KICK),
};

impl Workload for Competing {
    fn info(&self) -> &WorkloadInfo {
        &INFO
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(vec![Group::new(self, None, ())]),
            Some(_) => None,
        }
    }

    fn describe(&self, _group: &Group, p: &Params) -> String {
        let rt = p.runtime_s;
        format!("the engine's writer vs a buffered writer of the same system, 1 MiB sequential, {rt} s, then fsync")
    }

    fn jobs(&self, _group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let per = place.per_writer(2, p.size);
        let seq_w = || Pattern::Seq { write: true, bs: MIB, total: None };
        let a = JobSpec::new(engine, place.fresh(name, 0, per), seq_w()).with_final_fsync().seeded(5).with_role(WRITER);
        let peer = engine.buffered_peer();
        let b = JobSpec::new(peer, place.fresh(name, 1, per), seq_w())
            .with_final_fsync()
            .seeded(6)
            .with_role(BUFFERED_PEER);
        Jobs { jobs: vec![a, b], deadline_s: p.runtime_s, pipelined: true }
    }

    /// A row per writer (named by its role), then their aggregate.
    fn rows(&self, group: &Group, engine: EngineKind, jobs: &[&JobResult], o: &Outcome) -> Vec<ResultRow> {
        let mut rows: Vec<ResultRow> =
            jobs.iter().map(|j| aggregate(group, engine, j.role.clone(), &[*j], o)).collect();
        rows.push(aggregate(group, engine, Some(AGGREGATE.into()), jobs, o));
        rows
    }

    fn series_label(&self, row: &ResultRow) -> String {
        match &row.variant {
            Some(v) if matches!(v.as_str(), WRITER | BUFFERED_PEER | AGGREGATE) => format!("{} {v}", row.engine),
            _ => row.engine.clone(),
        }
    }

    fn line_style(&self, row: &ResultRow) -> (&'static str, &'static str) {
        let dash = match row.variant.as_deref() {
            Some(BUFFERED_PEER) => "7 4",
            Some(AGGREGATE) => "2 3",
            _ => "",
        };
        (crate::svg::engine_color(&row.engine), dash)
    }
}
