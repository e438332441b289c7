//! The report's device tables, for the workloads where a program's reads
//! or commits share the disk with writeback: what the block layer saw on
//! every engine (requests and their mean milliseconds from allocation,
//! scheduler queue included, to completion), and, for wbcache, its own
//! account per class of work (latency from the engine's submission,
//! background bytes ahead of foreground I/O, what each flush covered, and
//! what fsyncs waited inside the engine). Both read only the rows' JSON
//! fields, so a report rebuilt from a saved JSON shows the same.

use std::fmt::Write as _;

use serde_json::Value;

use super::table::push_table_head;
use super::ResultRow;

/// The device tables of `rows` (a workload's), empty when none carries a
/// device figure.
pub fn device_tables(rows: &[&ResultRow]) -> String {
    let mut out = String::new();
    push_block_table(&mut out, rows);
    push_account_table(&mut out, rows);
    out
}

/// The block layer's table: every engine's row with a `block_device`.
fn push_block_table(out: &mut String, rows: &[&ResultRow]) {
    let with_block: Vec<&&ResultRow> = rows.iter().filter(|r| r.ok() && r.block_device.is_some()).collect();
    if !with_block.is_empty() {
        let device = with_block[0].block_device.as_ref().map(|b| b.device.as_str()).unwrap_or("?");
        let _ = writeln!(
            out,
            "\nBlock layer (`{device}`, the timed phase): requests, MB and mean ms per request from allocation to completion, busy ms; \
             a stream's dirty MiB left when it stopped, and the seconds until it was durable\n"
        );
        push_table_head(
            out,
            &[
                "variant",
                "engine",
                "reads",
                "read ms",
                "writes",
                "write MB",
                "write ms",
                "flushes",
                "flush ms",
                "busy ms",
                "dirty left MiB",
                "durable after s",
            ],
        );
        for r in with_block {
            let b = r.block_device.as_ref().expect("filtered");
            let mean = |ms: u64, n: u64| if n == 0 { "-".to_string() } else { format!("{:.2}", ms as f64 / n as f64) };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
                r.variant.as_deref().unwrap_or("-"),
                r.engine,
                b.reads,
                mean(b.read_ms, b.reads),
                b.writes,
                b.write_bytes as f64 / 1e6,
                mean(b.write_ms, b.writes),
                b.flushes,
                mean(b.flush_ms, b.flushes),
                b.busy_ms,
                r.dirty_bytes_at_end
                    .map(|d| format!("{:.1}", d as f64 / (1u64 << 20) as f64))
                    .unwrap_or_else(|| "-".into()),
                r.durable_s.map(|s| format!("{s:.3}")).unwrap_or_else(|| "-".into())
            );
        }
    }
}

/// wbcache's own account: its rows with a `device_account`.
fn push_account_table(out: &mut String, rows: &[&ResultRow]) {
    let with_account: Vec<&&ResultRow> = rows.iter().filter(|r| r.ok() && r.device_account.is_some()).collect();
    if !with_account.is_empty() {
        out.push_str(
            "\nwbcache's device account (the whole measurement, setup included): I/Os, p50/p99 µs from submission \
             to completion (a buffered write: the copy into the kernel's cache); background KiB in flight ahead of a sync write (p99); background KiB each flush \
             covered (p50/p99); what fsyncs waited inside the engine (p99 µs)\n\n",
        );
        push_table_head(
            out,
            &[
                "variant",
                "engine",
                "read",
                "sync write",
                "background write",
                "flush",
                "buffered write",
                "ahead of sync writes",
                "flush covered",
                "engine wait",
            ],
        );
        for r in with_account {
            let a = r.device_account.as_ref().expect("filtered");
            let class = |name: &str| {
                let c = &a["device"][name];
                format!("{} · {}/{}", num(&c["ios"]), num(&c["lat_us"]["p50"]), num(&c["lat_us"]["p99"]))
            };
            let covered = &a["flush_covered_background_kib"];
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} |",
                r.variant.as_deref().unwrap_or("-"),
                r.engine,
                class("read"),
                class("sync_write"),
                class("background_write"),
                class("flush"),
                class("buffered_write"),
                num(&a["device"]["sync_write"]["background_ahead_kib"]["p99"]),
                num(&covered["p50"]),
                num(&covered["p99"]),
                num(&a["sync_engine_wait_us"]["p99"])
            );
        }
    }
}

fn num(v: &Value) -> String {
    v.as_u64().map(|n| n.to_string()).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::ok_row;
    use crate::sys::BlockDelta;

    #[test]
    fn tables_of_block_and_account_figures() {
        let mut kernel = ok_row("kernel-buffered");
        kernel.block_device = Some(BlockDelta {
            device: "vda".into(),
            reads: 4,
            read_ms: 10,
            writes: 10,
            write_bytes: 5_000_000,
            write_ms: 25,
            flushes: 2,
            flush_ms: 3,
            busy_ms: 40,
            ..BlockDelta::default()
        });
        (kernel.dirty_bytes_at_end, kernel.durable_s) = (Some(512 << 20), Some(1.25));
        let mut wbcache = ok_row("wbcache");
        wbcache.device_account = crate::report::device_account_of(
            r#"{"device":{"read":{"ios":7,"lat_us":{"p50":100,"p99":900}},"sync_write":{"ios":3,"lat_us":{"p50":50,"p99":70},
                "background_ahead_kib":{"p99":1024}},"background_write":{"ios":9,"lat_us":{"p50":800,"p99":2000}},
                "flush":{"ios":3,"lat_us":{"p50":400,"p99":600}},"buffered_write":{"ios":2,"lat_us":{"p50":9,"p99":60000}}},
                "flush_covered_background_kib":{"p50":512,"p99":4096},"sync_engine_wait_us":{"p99":1500}}"#,
        );
        let t = device_tables(&[&kernel, &wbcache]);
        assert!(
            t.contains("| v | kernel-buffered | 4 | 2.50 | 10 | 5 | 2.50 | 2 | 1.50 | 40 | 512.0 | 1.250 |"),
            "{t}"
        );
        assert!(
            t.contains(
                "| v | wbcache | 7 · 100/900 | 3 · 50/70 | 9 · 800/2000 | 3 · 400/600 | 2 · 9/60000 | 1024 | 512/4096 | 1500 |"
            ),
            "{t}"
        );
        assert_eq!(device_tables(&[&ok_row("kernel-buffered")]), "", "nothing to show");
        let idle = r#"{"device":{"read":{"ios":0},"flush":{"ios":0}},"flush_covered_background_kib":{},"sync_engine_wait_us":{}}"#;
        assert_eq!(crate::report::device_account_of(idle), None, "a cache that did no I/O is not shown");
    }
}
