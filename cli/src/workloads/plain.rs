//! The plain streams, one implementation for five catalog entries:
//! `seq-write`, `rand-write`, `multi-writer` and `files-32` write, `seq-read`
//! reads, each a group of its own (no variants), run by the worker's
//! generic streaming loop, one row per engine in the generic table.
//! `seq-read` also measures a bare O_DIRECT read of its file (what any
//! cache of that size could reach here) and checks wbcache against it.

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use super::{
    data_len, round_down, Group, JobSpec, Jobs, Params, Pattern, Place, ReferenceContext, Selection, Workload,
    WorkloadInfo, KIB, MIB,
};
use crate::engines::EngineKind;
use crate::report::{find_row, mib, Reference, ResultRow, TargetInputs, Verdict};
use crate::sys::fmt_size;

/// The flusher-kick series whose tables several write workloads follow.
pub const DONTCACHE_KICK: &str =
    "the tables of the LKML series \"mm: kick writeback flusher for IOCB_DONTCACHE with targeted dirty tracking\" (v5, 2026)";

/// Which of the plain streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    SeqWrite,
    RandWrite,
    MultiWriter,
    Files32,
    SeqRead,
}

/// One of the plain streams.
pub struct Plain {
    stream: Stream,
    info: WorkloadInfo,
}

pub static SEQ_WRITE: Plain = Plain {
    stream: Stream::SeqWrite,
    info: WorkloadInfo {
        name: "seq-write",
        summary: "one writer, 1 MiB sequential writes to a new file, then fsync",
        about: "one writer, 1 MiB sequential writes to a new file of --size, then fsync",
        models: "a backup, a log or a bulk load streaming one large file: MB/s and the tail latency of each write",
        source: Some(DONTCACHE_KICK),
    },
};

pub static RAND_WRITE: Plain = Plain {
    stream: Stream::RandWrite,
    info: WorkloadInfo {
        name: "rand-write",
        summary: "one writer, 4 KiB random writes over an existing file, then fsync",
        about: "one writer, 4 KiB random writes (every block once, random order) over an existing file of --size, stopped after --runtime, then fsync",
        models: "a database updating pages of a table larger than memory",
        source: Some(DONTCACHE_KICK),
    },
};

pub static MULTI_WRITER: Plain = Plain {
    stream: Stream::MultiWriter,
    info: WorkloadInfo {
        name: "multi-writer",
        summary: "4 writers, 1 MiB sequential writes to a new file each, then fsync",
        about: "4 writers, 1 MiB sequential writes, one new file each (--size split between them), then fsync",
        models:
            "several streams written at once (parallel backups, compaction outputs): aggregate MB/s and tail latency",
        source: Some(DONTCACHE_KICK),
    },
};

pub static FILES_32: Plain = Plain {
    stream: Stream::Files32,
    info: WorkloadInfo {
        name: "files-32",
        summary: "32 writers, 64 KiB sequential writes to a new file each, then fsync",
        about: "32 writers, 64 KiB sequential writes, one new file each, for --runtime, then fsync",
        models: "many files written at once (a build, an unpacking archive, a sharded log): MB/s, tail latency and how much dirty data piles up",
        source: Some(DONTCACHE_KICK),
    },
};

pub static SEQ_READ: Plain = Plain {
    stream: Stream::SeqRead,
    info: WorkloadInfo {
        name: "seq-read",
        summary: "a cold file read sequentially in 1 MiB reads",
        about: "read a cold file of --size (twice the memory) sequentially, 1 MiB reads",
        models: "a scan, a backup or a restore reading a file larger than memory for the first time",
        source: Some("the read table of the LKML series \"block: enable RWF_DONTCACHE for block devices\" (v6)"),
    },
};

impl Workload for Plain {
    fn info(&self) -> &WorkloadInfo {
        &self.info
    }

    fn groups(&'static self, selector: Option<&str>, _selection: &Selection<'_>) -> Option<Vec<Group>> {
        match selector {
            None => Some(vec![Group::new(self, None, ())]),
            Some(_) => None,
        }
    }

    fn needs_data(&self, _group: &Group) -> bool {
        matches!(self.stream, Stream::RandWrite | Stream::SeqRead)
    }

    fn describe(&self, _group: &Group, p: &Params) -> String {
        let size = fmt_size(p.size);
        let rt = p.runtime_s;
        match self.stream {
            Stream::SeqWrite => format!("one writer, 1 MiB sequential writes, {size} file, then fsync"),
            Stream::RandWrite => {
                format!("one writer, 4 KiB random writes over a {size} file (at most {rt} s), then fsync")
            }
            Stream::MultiWriter => {
                format!("4 writers, 1 MiB sequential writes, {} per file, then fsync", fmt_size(p.size / 4))
            }
            Stream::Files32 => format!("32 writers, 64 KiB sequential writes, one file each, {rt} s, then fsync"),
            Stream::SeqRead => format!("cold sequential read of a {size} file, 1 MiB reads"),
        }
    }

    fn jobs(&self, _group: &Group, engine: EngineKind, p: &Params, place: &Place, name: &str) -> Jobs {
        let seq_w = |bs: u64, total: Option<u64>| Pattern::Seq { write: true, bs, total };
        let (jobs, deadline_s) = match self.stream {
            Stream::SeqWrite => {
                let t = place.fresh(name, 0, p.size);
                (vec![JobSpec::new(engine, t, seq_w(MIB, Some(p.size))).with_final_fsync().seeded(1)], p.stream_cap_s)
            }
            Stream::RandWrite => {
                let pat = Pattern::Rand { write: true, bs: 4 * KIB, ops: Some(p.size / (4 * KIB)) };
                (vec![JobSpec::new(engine, place.data(p.size), pat).with_final_fsync().seeded(2)], p.runtime_s)
            }
            Stream::MultiWriter => {
                let per = round_down(p.size / 4, MIB);
                let jobs = (0..4)
                    .map(|i| {
                        JobSpec::new(engine, place.fresh(name, i, per), seq_w(MIB, Some(per)))
                            .with_final_fsync()
                            .seeded(3)
                    })
                    .collect();
                (jobs, p.stream_cap_s)
            }
            Stream::Files32 => {
                let per = place.per_writer(32, p.size);
                let jobs = (0..32)
                    .map(|i| {
                        JobSpec::new(engine, place.fresh(name, i, per), seq_w(64 * KIB, None))
                            .with_final_fsync()
                            .seeded(4)
                    })
                    .collect();
                (jobs, p.runtime_s)
            }
            Stream::SeqRead => {
                let pat = Pattern::Seq { write: false, bs: MIB, total: Some(p.size) };
                (vec![JobSpec::new(engine, place.data(p.size), pat).seeded(7)], p.stream_cap_s)
            }
        };
        Jobs { jobs, deadline_s, pipelined: true }
    }

    /// `seq-read`: a bare O_DIRECT read of the same file into as much fresh
    /// memory as --memory.
    fn references(&self, group: &Group, ctx: &mut ReferenceContext<'_>) -> Vec<Reference> {
        if self.stream != Stream::SeqRead {
            return Vec::new();
        }
        let p = ctx.params;
        let (bs, depth) = (1 << 20, DIRECT_REFERENCE_DEPTH);
        match direct_read_reference_mb_s(&ctx.place.data_path(), data_len(p), bs, p.memory) {
            Ok(mb_s) => {
                (ctx.note)(&format!("{} · bare O_DIRECT reference: {mb_s:.0} MB/s", group.label()));
                vec![Reference::direct_read(group, p.memory, bs, depth, mb_s)]
            }
            Err(e) => {
                (ctx.note)(&format!("{} · bare O_DIRECT reference failed: {e}", group.label()));
                Vec::new()
            }
        }
    }

    fn targets(&self, rows: &[&ResultRow], inputs: &TargetInputs<'_>) -> Vec<Verdict> {
        match self.stream {
            Stream::SeqWrite => seq_write_targets(rows, inputs.dirty_limit),
            Stream::SeqRead => seq_read_targets(rows, inputs.references),
            Stream::RandWrite => rand_write_targets(rows),
            Stream::MultiWriter | Stream::Files32 => Vec::new(),
        }
    }

    fn targets_rank(&self) -> u32 {
        match self.stream {
            Stream::SeqWrite => 1,
            Stream::SeqRead => 2,
            Stream::RandWrite => 4,
            Stream::MultiWriter | Stream::Files32 => u32::MAX,
        }
    }
}

/// `seq-write`'s goals: wbcache's MB/s and p99.9 against kernel-buffered's,
/// and its peak of dirty bytes within its `dirty_limit`.
fn seq_write_targets(rows: &[&ResultRow], dirty_limit: u64) -> Vec<Verdict> {
    let mut lines = Vec::new();
    if let (Some(w), Some(k)) = (find_row(rows, None, "wbcache"), find_row(rows, None, "kernel-buffered")) {
        if let (Some(a), Some(b)) = (w.throughput_mb_s, k.throughput_mb_s) {
            lines.push(Verdict::new(
                "seq-write: wbcache MB/s (with fsync) ≥ kernel-buffered".into(),
                format!("{a:.0} vs {b:.0} MB/s"),
                a >= b,
            ));
        }
        if let (Some(a), Some(b)) = (&w.lat_us, &k.lat_us) {
            lines.push(Verdict::new(
                "seq-write: wbcache p99.9 write latency ≤ kernel-buffered".into(),
                format!("{} vs {} µs", crate::report::fmt_num(a.p999), crate::report::fmt_num(b.p999)),
                a.p999 <= b.p999,
            ));
        }
    }
    if let Some(w) = find_row(rows, None, "wbcache") {
        if let Some(peak) = w.peak_dirty_bytes {
            lines.push(Verdict::new(
                "seq-write: wbcache peak dirty (incl. under writeback) ≤ its dirty_limit".into(),
                format!("{} MiB vs {} MiB", mib(peak), mib(dirty_limit)),
                peak <= dirty_limit,
            ));
        }
    }
    lines
}

/// `seq-read`'s goals: wbcache's cold read against 0.9 × kernel-direct's,
/// and against 0.9 × the bare O_DIRECT read's reference.
fn seq_read_targets(rows: &[&ResultRow], references: &[&Reference]) -> Vec<Verdict> {
    let mut lines = Vec::new();
    if let (Some(w), Some(d)) = (find_row(rows, None, "wbcache"), find_row(rows, None, "kernel-direct")) {
        if let (Some(a), Some(b)) = (w.throughput_mb_s, d.throughput_mb_s) {
            lines.push(Verdict::new(
                "seq-read cold: wbcache ≥ 0.9 × kernel-direct".into(),
                format!("{a:.0} vs {b:.0} MB/s ({:.2}×)", a / b),
                a >= 0.9 * b,
            ));
        }
    }
    let direct = references.first().and_then(|r| r.mb_s);
    if let (Some(w), Some(d)) = (find_row(rows, None, "wbcache"), direct) {
        if let Some(a) = w.throughput_mb_s {
            lines.push(Verdict::new(
                "seq-read cold: wbcache ≥ 0.9 × a bare O_DIRECT read into as much fresh memory".into(),
                format!("{a:.0} vs {d:.0} MB/s ({:.2}×)", a / d),
                a >= 0.9 * d,
            ));
        }
    }
    lines
}

/// `rand-write`'s goal: wbcache's MB/s against kernel-buffered's.
fn rand_write_targets(rows: &[&ResultRow]) -> Vec<Verdict> {
    let mut lines = Vec::new();
    if let (Some(w), Some(k)) = (find_row(rows, None, "wbcache"), find_row(rows, None, "kernel-buffered")) {
        if let (Some(a), Some(b)) = (w.throughput_mb_s, k.throughput_mb_s) {
            lines.push(Verdict::new(
                "rand-write: wbcache MB/s (with fsync) ≥ kernel-buffered".into(),
                format!("{a:.1} vs {b:.1} MB/s"),
                a >= b,
            ));
        }
    }
    lines
}

impl Reference {
    /// `seq-read`'s: a bare O_DIRECT read of the same file into `footprint`
    /// bytes of fresh memory, at `mb_s` (`us_per_call`: per `bs` read).
    pub fn direct_read(group: &Group, footprint: u64, bs: u64, depth: usize, mb_s: f64) -> Reference {
        Reference {
            workload: group.workload.to_string(),
            variant: group.variant.clone(),
            what: format!(
                "O_DIRECT sequential read of the same file, {} reads, {depth} in flight (io_uring), into {} of \
                 fresh memory (huge pages advised) that the reads go round",
                fmt_size(bs),
                fmt_size(footprint)
            ),
            us_per_call: if mb_s > 0.0 { bs as f64 / mb_s } else { 0.0 },
            mb_s: Some(mb_s),
            reads_per_s: None,
            reader_threads: None,
        }
    }
}

/// Reads in flight in [`direct_read_reference_mb_s`]: this machine's
/// virtio disk reads fastest with four 1 MiB reads in flight (about
/// 1.8 GB/s from small pages; deeper queues were slower).
pub const DIRECT_REFERENCE_DEPTH: usize = 16;

/// MB/s of a bare O_DIRECT sequential read of `[0, len)` of `path`, `bs`
/// reads, [`DIRECT_REFERENCE_DEPTH`] in flight through io_uring, into
/// `footprint` bytes of fresh anonymous memory (2 MiB aligned, advised to
/// use huge pages, as a cache's buffers are) that the reads go round: the
/// first round faults the memory in, as a cache filling for the first time
/// does. What `seq-read` could reach on this machine with that much memory
/// and no cache at all (the report sets it beside the engines' figures).
pub fn direct_read_reference_mb_s(path: &Path, len: u64, bs: u64, footprint: u64) -> io::Result<f64> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    let huge = 2u64 << 20;
    let footprint = footprint.max(bs * DIRECT_REFERENCE_DEPTH as u64).next_multiple_of(huge);
    let span = (footprint + huge) as usize;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let base = (raw as u64).next_multiple_of(huge) as *mut u8;
    // SAFETY: `base..base + footprint` lies inside the mapping; advice only.
    unsafe { libc::madvise(base.cast(), footprint as usize, libc::MADV_HUGEPAGE) };
    let result = read_round(&file, base, footprint, len, bs);
    // SAFETY: the mapping made above, with no request in flight into it.
    unsafe { libc::munmap(raw, span) };
    result
}

/// The timed part of [`direct_read_reference_mb_s`]: `[0, len)` of `file`
/// in `bs` reads into the `footprint` bytes at `base`, going round them.
/// Every request is reaped before it returns.
fn read_round(file: &std::fs::File, base: *mut u8, footprint: u64, len: u64, bs: u64) -> io::Result<f64> {
    let mut ring = io_uring::IoUring::new(DIRECT_REFERENCE_DEPTH as u32)?;
    let fd = io_uring::types::Fd(file.as_raw_fd());
    let slots = footprint / bs;
    let (mut next_off, mut done_bytes, mut inflight) = (0u64, 0u64, 0usize);
    let started = Instant::now();
    while done_bytes < len {
        if inflight == 0 && next_off >= len {
            break; // a short read before the end: the file shrank
        }
        while inflight < DIRECT_REFERENCE_DEPTH && next_off < len {
            // SAFETY: pointer arithmetic within the footprint: slot
            // `i < slots` lies inside it.
            let buf = unsafe { base.add(((next_off / bs) % slots * bs) as usize) };
            let n = bs.min(len - next_off) as u32;
            let e = io_uring::opcode::Read::new(fd, buf, n).offset(next_off).build().user_data(next_off);
            // SAFETY: the buffer outlives the request: every request is
            // reaped below before the mapping is unmapped.
            unsafe { ring.submission().push(&e).map_err(|_| io::Error::other("submission queue full"))? };
            next_off += bs;
            inflight += 1;
        }
        ring.submit_and_wait(1)?;
        let done: Vec<i32> = ring.completion().map(|c| c.result()).collect();
        for res in done {
            inflight -= 1;
            if res < 0 {
                // Drain what is in flight before the buffers go.
                while inflight > 0 {
                    ring.submit_and_wait(1)?;
                    inflight -= ring.completion().count();
                }
                return Err(io::Error::from_raw_os_error(-res));
            }
            done_bytes += res as u64;
            if res == 0 {
                done_bytes = len;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(if secs > 0.0 { done_bytes as f64 / secs / 1e6 } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_worker::Status;
    use crate::workloads::targets;

    #[test]
    fn direct_read_reference_reads_the_whole_file() {
        let dir = std::env::temp_dir().join(format!("wbcache-direct-ref-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.bin");
        // Not a multiple of the read size: the last read is short.
        std::fs::write(&path, vec![5u8; (9 << 20) + (64 << 10)]).unwrap();
        let result = direct_read_reference_mb_s(&path, (9 << 20) + (64 << 10), 1 << 20, 4 << 20);
        std::fs::remove_dir_all(&dir).unwrap();
        match result {
            Ok(mb_s) => assert!(mb_s > 0.0, "{mb_s} MB/s"),
            // A file system without O_DIRECT (tmpfs on some kernels).
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}"),
        }
    }

    /// seq-read's bare O_DIRECT reference: a target line against it, a
    /// sentence under the table, and `mb_s` in the JSON (null for the
    /// memcpy reference).
    #[test]
    fn seq_read_target_names_the_direct_read_reference() {
        let group = crate::workloads::groups_for("seq-read", None).unwrap().remove(0);
        let mut row = ResultRow::empty(&group, EngineKind::Wbcache, None, Status::Ok, None);
        row.throughput_mb_s = Some(1900.0);
        let reference = Reference::direct_read(&group, 256 << 20, 1 << 20, 16, 2000.0);
        let table = targets(std::slice::from_ref(&row), 1 << 30, std::slice::from_ref(&reference), true).unwrap();
        assert!(table.contains("as much fresh memory | 1900 vs 2000 MB/s (0.95×) | met"), "{table}");
        row.throughput_mb_s = Some(1700.0);
        let table = targets(std::slice::from_ref(&row), 1 << 30, std::slice::from_ref(&reference), true).unwrap();
        assert!(table.contains("1700 vs 2000 MB/s (0.85×) | NOT met"), "{table}");
        let sentence = reference.sentence();
        assert!(sentence.contains("256M of fresh memory") && sentence.contains("2000 MB/s"), "{sentence}");
        let memcpy_group = crate::workloads::groups_for("rand-read", None).unwrap().remove(1);
        let memcpy = Reference::memcpy(&memcpy_group, 64 << 20, 0.3);
        let machine =
            crate::sys::Machine { kernel: "k".into(), cpus: 2, mem_bytes: 1, fs: "ext4".into(), device: "vda".into() };
        let json: serde_json::Value = serde_json::from_str(&crate::report::to_json(
            &machine,
            &serde_json::json!({}),
            &[row],
            &[reference, memcpy],
            &crate::workloads::own_columns(),
        ))
        .unwrap();
        assert_eq!(json["references"][0]["workload"], "seq-read");
        assert_eq!(json["references"][0]["mb_s"], 2000.0);
        assert_eq!(json["references"][0]["us_per_call"], 524.288);
        assert!(json["references"][1]["mb_s"].is_null());
    }
}
