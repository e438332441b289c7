//! The bench's workloads, each behind the [`Workload`] trait in a module of
//! its own (a family sharing one implementation, such as [`plain`], is one
//! module): its catalog entry, its variants and their expansion into
//! measurement groups, its job specs, what the worker runs for it where the
//! generic job runner does not, its result rows (with its own figures, a
//! type of its module), its table (through the report's one builder) and
//! its targets. [`WORKLOADS`] is the catalog, in the order of `--list`,
//! the suites and the report; adding a workload is a module and a line
//! there, and one more in [`OWN_FIELDS_ORDER`] if its rows have figures
//! of their own (the JSON's columns: [`own_columns`]).
//!
//! A [`Group`] is one workload and variant, run once per engine; it carries
//! the workload that made it ([`Group::owner`]) and the workload's own typed
//! description of it, so shared code asks the group, never a name. Names
//! (`workload`, `variant`) are what the command line, the JSON and the
//! worker's spec say; what knows only a name looks the workload up in the
//! catalog ([`by_name`]): the worker, which gets a spec as JSON (through
//! [`Catalog`], which `main` passes down to it), and the charts, which get
//! rows ([`owner_of`]).
//!
//! This module is the layer above the worker, the report and the charts'
//! drawing: it answers for the catalog ([`by_name`], [`owner_of`]) and
//! gathers every workload's goals ([`targets`]), so those layers name no
//! workload. It stands above the workloads' modules; what they build on
//! (the trait, [`Group`], a group's spec and rows: [`build_spec`],
//! [`rows_from`]) is in `workload`, below them all, and is re-exported
//! here.

pub mod advice;
pub mod competing;
pub mod custom;
pub mod external;
pub mod fio;
pub mod fsync_under_load;
pub mod hot_set;
pub mod parallel_writeback;
pub mod plain;
pub mod rand_read;
pub mod rocksdb;
pub mod small_overwrite;
pub mod sqlite;
mod workload;

use std::io;

pub use crate::spec::{data_len, round_down, JobSpec, Jobs, Params, Pattern, Place, Setup, Spec, KIB, MIB};

use crate::bench_worker::{JobContext, JobRaw, OwnJobs};
use crate::report::{targets_table, OwnColumns, Reference, ResultRow, TargetInputs, Verdict};
pub use workload::{
    build_spec, described, rows_from, variants_named, Group, ReferenceContext, Selection, Workload, WorkloadInfo,
};

/// The catalog, in its order.
pub static WORKLOADS: &[&dyn Workload] = &[
    &plain::SEQ_WRITE,
    &plain::RAND_WRITE,
    &plain::MULTI_WRITER,
    &plain::FILES_32,
    &competing::COMPETING,
    &fsync_under_load::FSYNC_UNDER_LOAD,
    &parallel_writeback::PARALLEL_WRITEBACK,
    &plain::SEQ_READ,
    &rand_read::RAND_READ,
    &hot_set::HOT_SET,
    &sqlite::SQLITE,
    &advice::ADVICE,
    &small_overwrite::SMALL_OVERWRITE,
    &fio::FIO,
    &rocksdb::ROCKSDB,
];

/// The workloads whose rows have figures of their own
/// ([`Workload::own_fields`]), in the order their fields joined schema 1
/// of the JSON report, which every row has, `null` where they are another
/// workload's: a workload with new figures goes last.
static OWN_FIELDS_ORDER: &[&dyn Workload] = &[
    &fsync_under_load::FSYNC_UNDER_LOAD,
    &parallel_writeback::PARALLEL_WRITEBACK,
    &hot_set::HOT_SET,
    &sqlite::SQLITE,
    &advice::ADVICE,
    &fio::FIO,
    &rocksdb::ROCKSDB,
    &rand_read::RAND_READ,
];

/// The JSON report's columns of the rows' own figures: every workload's
/// own fields, in the order they joined the schema.
pub fn own_columns() -> OwnColumns {
    let fields: Vec<Vec<String>> = OWN_FIELDS_ORDER.iter().map(|w| w.own_fields()).collect();
    OwnColumns::new(fields.iter().map(Vec::as_slice))
}

/// The catalog entry named `name`.
#[cfg(test)]
pub fn info(name: &str) -> Option<&'static WorkloadInfo> {
    WORKLOADS.iter().map(|w| w.info()).find(|w| w.name == name)
}

/// The workload a worker's spec names: one of the catalog, the
/// `--custom` job or the `--fio` job file.
pub fn by_name(name: &str) -> Option<&'static dyn Workload> {
    let outside: [&'static dyn Workload; 2] = [&custom::CUSTOM, &fio::jobfile::FIO_JOBFILE];
    WORKLOADS.iter().copied().chain(outside).find(|w| w.name() == name)
}

/// The catalog as the worker asks it ([`OwnJobs`]): a spec's workload by
/// its name ([`by_name`]), which runs the jobs of its own pattern.
pub struct Catalog;

impl OwnJobs for Catalog {
    fn knows(&self, workload: &str) -> bool {
        by_name(workload).is_some()
    }

    fn run(&self, ctx: &JobContext<'_>) -> io::Result<JobRaw> {
        match by_name(&ctx.spec.workload) {
            Some(workload) => workload.run_job(ctx),
            None => Err(io::Error::other(format!("unknown workload '{}'", ctx.spec.workload))),
        }
    }
}

/// The groups a workload name (or small-overwrite variant name) expands to,
/// `parallel-writeback` with its default worker counts.
#[cfg(test)]
pub fn groups_for(name: &str, overwrite_subset: Option<&[&str]>) -> Option<Vec<Group>> {
    expand(name, overwrite_subset, parallel_writeback::PW_DEFAULT_WORKERS)
}

/// The groups a name on the command line expands to: a catalog name,
/// `<name>/<selector>` (see each workload's [`Workload::groups`]), or a
/// small-overwrite variant name; `parallel-writeback` tries these writeback
/// worker counts.
pub fn expand(name: &str, overwrite_subset: Option<&[&str]>, writeback_workers: &[u32]) -> Option<Vec<Group>> {
    let selection = Selection { overwrite_subset, writeback_workers };
    WORKLOADS.iter().find_map(|w| w.select(name, &selection))
}

/// The workload a row is of, which labels and draws its lines in charts
/// (`None` for a row whose workload no catalog entry names: one made up).
pub fn owner_of(row: &ResultRow) -> Option<&'static dyn Workload> {
    by_name(&row.workload)
}

/// wbcache's goals against the kernel, checked on this run's rows: each
/// workload's own ([`Workload::targets`]), of its rows and references, in
/// the order of their [`Workload::targets_rank`] (then the catalog's), as
/// the report's table (`None` when the rows give no goal to check).
pub fn targets(rows: &[ResultRow], dirty_limit: u64, references: &[Reference], judged: bool) -> Option<String> {
    let mut workloads = WORKLOADS.to_vec();
    workloads.sort_by_key(|w| w.targets_rank());
    let mut lines: Vec<Verdict> = Vec::new();
    for w in workloads {
        let own_rows: Vec<&ResultRow> = rows.iter().filter(|r| r.is_of(w.name())).collect();
        let own_references: Vec<&Reference> = references.iter().filter(|r| r.workload == w.name()).collect();
        lines.extend(w.targets(&own_rows, &TargetInputs { dirty_limit, references: &own_references }));
    }
    targets_table(lines, judged)
}

/// The sizes the workloads' tests run with.
#[cfg(test)]
pub fn test_params(runtime_s: f64) -> Params {
    Params {
        memory: 128 * MIB,
        size: 256 * MIB,
        runtime_s,
        stream_cap_s: 6.0 * runtime_s,
        call_cap_s: 0.25,
        iterations_1k: 10,
        iterations_10k: 10,
        warmup: 1,
        sqlite_data_bytes: 160 * MIB,
        rocksdb_data_bytes: 256 * MIB,
        wbcache_options: "capacity=128M".into(),
    }
}

/// The variant names of `groups`.
#[cfg(test)]
pub fn variants_of(groups: &[Group]) -> Vec<String> {
    groups.iter().map(|g| g.variant.clone().unwrap()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Schema 1's own columns, as the JSON has had them: a workload's new
    /// figures may only be added at the end.
    #[test]
    fn own_columns_are_schema_1s_in_its_order() {
        let schema_1 = [
            "fsync_total_s",
            "writeback_mb_s",
            "cpu_s_per_gib",
            "written_bytes_per_worker",
            "hot_hit_ratio",
            "hot_mb_s",
            "hot_mb_s_alone_ratio",
            "dropbehind_freed_bytes",
            "dropbehind_cpu_us",
            "tps",
            "commit_us_p50",
            "commit_us_p99",
            "commit_us_max",
            "stream_mb_s",
            "db_bytes",
            "peak_rss_bytes",
            "peak_cached_bytes",
            "fsync_s",
            "advise_s",
            "advise_calls",
            "cached_look_s",
            "tool_version",
            "read_mb_s",
            "read_iops",
            "read_clat_us_p50",
            "read_clat_us_p99",
            "write_mb_s",
            "write_iops",
            "write_clat_us_p50",
            "write_clat_us_p99",
            "ops_per_s",
            "op_us_p50",
            "op_us_p99",
            "reads_per_s",
            "reader_threads",
        ];
        let columns = own_columns();
        assert_eq!(columns.names(), schema_1);
    }

    /// Every workload's own figures are columns of the JSON: one with
    /// figures of its own and missing from the order would fail every
    /// report it is in.
    #[test]
    fn every_workload_with_own_figures_has_columns() {
        let columns = own_columns();
        let outside: [&'static dyn Workload; 2] = [&custom::CUSTOM, &fio::jobfile::FIO_JOBFILE];
        for w in WORKLOADS.iter().copied().chain(outside) {
            for field in w.own_fields() {
                assert!(columns.names().contains(&field), "{}'s {field} is in no column", w.name());
            }
        }
    }
}
