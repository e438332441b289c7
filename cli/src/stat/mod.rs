//! `wbcache stat` and `wbcache top`: every cache running on the machine
//! (each program under `wbcache run`, each SQLite or library user), read
//! from the shared memory each cache keeps, without stopping or slowing
//! the program: capacity, cached, dirty and under-writeback bytes, hit
//! ratio, read and writeback rates over the last second, fsyncs and their
//! p99, and the files holding the most unwritten data. `stat` prints one
//! snapshot (a table, `--json` or `--prometheus`); `top` redraws it every
//! second until `q` or Ctrl-C.
//!
//! [`discover`] finds and reads the caches; [`render`] formats them;
//! [`top`] owns the terminal while it runs.

pub mod discover;
pub mod render;
pub mod top;

use clap::Args;

#[derive(Args, Debug)]
pub struct StatArgs {
    /// Print JSON, for scripts
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print Prometheus' text exposition format (node_exporter's textfile collector)
    #[arg(long)]
    pub prometheus: bool,
    /// Only the cache of this process (its owner)
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Seconds between refreshes: 1, 0.5 (at least 0.1)
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = parse_interval)]
    pub interval: f64,
    /// Only the cache of this process (its owner)
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

fn parse_interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.1..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!("--interval {text}: seconds from 0.1 to 3600")),
    }
}

/// `wbcache stat`; returns the exit status.
pub fn run_stat(args: StatArgs) -> i32 {
    let caches = discover::caches(args.pid);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&render::json(&caches)).expect("JSON of plain values"));
    } else if args.prometheus {
        print!("{}", render::prometheus(&caches));
    } else {
        match render::table(&caches) {
            Some(table) => print!("{table}"),
            None => println!("{}", discover::none_found(args.pid)),
        }
    }
    0
}

/// `wbcache top`; returns the exit status.
pub fn run_top(args: TopArgs) -> i32 {
    top::run(top::Refresh { interval_s: args.interval, pid: args.pid })
}
