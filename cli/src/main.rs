//! `wbcache`: command line tools for the wbcache page cache.
//!
//! `wbcache bench` runs Linux writeback workloads against the kernel's buffered,
//! `RWF_DONTCACHE` and O_DIRECT paths and against wbcache, in the same run on
//! the same disk, and prints a Markdown table per workload (optionally JSON
//! and SVG charts). See `wbcache bench --help` and `wbcache bench --list`.
//! `wbcache run -- PROGRAM` runs an unmodified program on wbcache ([`run`]).
//! `wbcache install` installs the binary, its libraries, the C library's
//! header and pkg-config files, man pages and completions, and `wbcache
//! uninstall` removes them ([`install`]; the man pages come from the
//! command line's clap definition, passed in from here). `wbcache crashtest -- PROGRAM` checks every state
//! a crash could leave of a program's files with its own checker
//! ([`crashtest`]). `wbcache stat` and `wbcache top` show every cache
//! running on the machine, read from the shared memory each keeps
//! ([`stat`]).
//!
//! Layout, top first (each layer imports only those below it; the table
//! is `CLI_LAYERS` in tests/meta/architecture.rs): [`runner`] (the parent:
//! places, leftovers of killed runs, cgroups, caches, workers, tables,
//! charts); [`cli`] (options, suites); [`help`] (the help and `--list`
//! texts), [`run`], [`install`], [`crashtest`], [`stat`]; [`workloads`] (the `Workload` trait, the
//! catalog, and one module per workload: its variants, job specs, worker
//! code, rows, table and targets); [`svg`] (drawing); [`report`] (result
//! rows, JSON, the shared parts of the tables, the targets table);
//! [`bench_worker`] (one measurement in a child process: its threads, the
//! generic job runner); [`spec`] (what a measurement is made of);
//! [`engines`] (the five engines behind one trait); [`cgroup`],
//! [`measure`] (histograms, series), [`preload_library`], [`progress`],
//! [`sys`]. This file only dispatches: the worker gets the catalog from
//! here ([`workloads::Catalog`]), so that it names no workload.

mod bench_worker;
mod cgroup;
mod cli;
mod crashtest;
mod engines;
mod help;
mod install;
mod measure;
mod preload_library;
mod progress;
mod report;
mod run;
mod runner;
mod spec;
mod stat;
mod svg;
mod sys;
mod workloads;

use clap::Parser;

fn main() {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                e.exit();
            }
            // Every usage error is one line, as the bench's own checks are.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(|l| l.trim().trim_start_matches("error: "))
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            eprintln!("wbcache: {} (see --help)", message.join(" "));
            std::process::exit(2);
        }
    };
    let code = match cli.command {
        cli::Command::Bench(args) => runner::run(*args),
        cli::Command::Run(args) => run::run(args),
        cli::Command::Install(args) => install::run(args, <cli::Cli as clap::CommandFactory>::command()),
        cli::Command::Uninstall(args) => install::run_uninstall(args),
        cli::Command::Crashtest(args) => crashtest::run(*args),
        cli::Command::Stat(args) => stat::run_stat(args),
        cli::Command::Top(args) => stat::run_top(args),
        cli::Command::BenchWorker => bench_worker::main(&workloads::Catalog),
    };
    std::process::exit(code);
}
