//! Fuzzed inputs, on the stable toolchain: seeded random loops with the
//! small generator of `tests/common` (no cargo-fuzz, no new dependency).
//!
//! - The option-string parser ([`Config::from_options`], [`parse_size`]):
//!   strings built from a grammar of valid and invalid keys and values,
//!   both separators, empty pieces, unicode and huge numbers. It never
//!   panics; every refusal is `InvalidInput` (`EINVAL` over the C ABI, with
//!   the same message from `wbc_last_error`); every accepted string
//!   round-trips through [`Config::to_options`].
//! - Every C ABI function (`wbc_*`) with random arguments: NULL where the
//!   header says it is checked, live handles (never freed ones: see below),
//!   offsets and lengths near 0, `INT64_MAX`, 2^63, `SSIZE_MAX`, the file
//!   system's largest file and a loop device's end (when one can be set
//!   up), random `flags`, `oflags` and modes. No call may panic (a panic
//!   the ABI's guard turns into `-EIO` still counts as a failure: a panic
//!   hook counts every panic in the process) and every error must be one
//!   the header documents for that function. The range calls
//!   (`wbc_fadvise`, `wbc_sync_range`, `wbc_fallocate`) are also checked
//!   against a model of the bytes around the range and the size, read
//!   before and after each call: advice and `sync_range` change nothing, a
//!   punch or zeroing reads as zeros, mode 0 and `ZERO_RANGE` extend the
//!   file unless `KEEP_SIZE`, and a failed call changes nothing.
//!
//! What C cannot be protected from, so the fuzzer never does it: a handle
//! used after `wbc_close`/`wbc_cache_close` or closed twice (the handle is
//! freed memory), a close racing other calls on its handle, pointers that
//! are not NULL yet invalid (dangling, or foreign), buffers or iovec arrays
//! shorter than the length or count given, strings without a NUL. Lengths
//! past `SSIZE_MAX` and counts outside `0..=1024` are refused before any
//! memory is touched, so those are fuzzed.
//!
//! Each loop runs a few seconds at most in `cargo test`;
//! `WBCACHE_FUZZ_ITERATIONS=N` runs N iterations instead (no time bound),
//! `WBCACHE_FUZZ_SEED=S` picks the seed. A failure prints the seed and the
//! iteration, which reproduce it.

use crate::common;

use std::collections::HashSet;
use std::ffi::{c_char, c_int, CString};
use std::io;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use common::loopdev::LoopDevice;
use common::programs::TempDir;
use common::Rng;
use wbcache::{parse_size, Config};
use wbcache_capi::{self as capi, wbc_cache, wbc_file};

// ---------------------------------------------------------------- harness

/// Iterations and time bound: `WBCACHE_FUZZ_ITERATIONS` when set (then no
/// time bound), otherwise `default` iterations or `budget`, whichever
/// comes first.
fn budget(default: u64, budget: Duration) -> (u64, Option<Duration>) {
    match std::env::var("WBCACHE_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()) {
        Some(n) => (n, None),
        None => (default, Some(budget)),
    }
}

fn seed() -> u64 {
    std::env::var("WBCACHE_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x00c0_ffee)
}

/// Panics anywhere in the process since [`count_panics`] was first
/// called, including those the C ABI's guard catches (the hook runs
/// before unwinding) and those on the cache's own threads.
static PANICS: AtomicU64 = AtomicU64::new(0);

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn report_rate(what: &str, seed: u64, done: u64, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    eprintln!("fuzz {what}: {done} iterations in {secs:.2} s ({:.0}/s), seed {seed}", done as f64 / secs.max(1e-9));
}

// ------------------------------------------------------ option-string grammar

/// Every key the library accepts, from the library itself: a new option
/// is fuzzed the day it exists.
const KEYS: &[&str] = wbcache::OPTION_KEYS;

/// The keys whose values are sizes (the grammar gives them suffixes).
const SIZE_KEYS: &[&str] = &[
    "capacity",
    "dirty_limit",
    "dirty_background",
    "folio_max",
    "io_max",
    "readahead_max",
    "bridge_gap",
    "region_size",
];

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len())]
}

/// Whitespace that `str::trim` removes, and some it does not.
const SPACES: &[&str] = &[" ", "  ", "\t", "\u{a0}", "\u{3000}", "\u{2003}", "\n", "\u{200b}", "\u{feff}"];

/// Characters no key or value has: unicode letters and marks, digits of
/// other scripts, separators' look-alikes, control characters.
const ODD: &[&str] = &[
    "é",
    "ß",
    "К",
    "\u{212a}",
    "ｋ",
    "\u{0301}",
    "١",
    "４",
    "😀",
    "\u{ff0c}",
    "\u{037e}",
    "=",
    "\\",
    "\"",
    "'",
    "%",
    "\u{1}",
    "\u{7f}",
    "\u{10ffff}",
    "\u{fffd}",
];

fn number(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => rng.below(10).to_string(),
        1 => (1u64 << rng.below(64)).to_string(),
        2 => ((1u64 << rng.below(64)) + (rng.below(3) as u64)).wrapping_sub(1).to_string(),
        3 => u64::MAX.to_string(),
        4 => "18446744073709551616".into(),   // 2^64
        5 => "9".repeat(rng.between(20, 40)), // far past u64
        6 => format!("{:0>width$}", rng.below(5000), width = rng.between(1, 12)), // leading zeros
        7 => rng.next_u64().to_string(),
        _ => (rng.below(4096) as u64 * 4096).to_string(),
    }
}

fn suffix(rng: &mut Rng) -> &'static str {
    const SUFFIXES: &[&str] = &[
        "",
        "",
        "",
        "",
        "k",
        "K",
        "kb",
        "KB",
        "KiB",
        "kib",
        "kIb",
        "m",
        "M",
        "MB",
        "MiB",
        "g",
        "G",
        "GB",
        "GiB",
        "t",
        "T",
        "TiB",
        "b",
        "B",
        "iB",
        "P",
        "PB",
        "x",
        "KiBB",
        "kk",
        " K",
        "\u{212a}",
        "К",
        "ｋ",
        "K\u{0301}",
        "e3",
        ".5G",
    ];
    SUFFIXES[rng.below(SUFFIXES.len())]
}

fn value(rng: &mut Rng, key: &str) -> String {
    let v = match rng.below(12) {
        0..=5 if SIZE_KEYS.contains(&key) => format!("{}{}", number(rng), suffix(rng)),
        0..=5 if key == "io" => (*pick(rng, &["uring", "threads", "sim", "URING", "Threads", "spdk", ""])).into(),
        0..=5 if key == "scan_dropbehind" || key == "stream_dropbehind" => {
            (*pick(rng, &["on", "off", "ON", "1", "true", ""])).into()
        }
        0..=5 => number(rng),
        6 => format!("{}{}", number(rng), suffix(rng)),
        7 => (*pick(rng, &["-1", "+4K", "1.5G", "0x10", "1e9", "١٢", "４０９６", "NaN", "inf", "--", "0b1"])).into(),
        8 => (0..rng.below(6)).map(|_| *pick(rng, ODD)).collect(),
        9 => String::new(),
        10 => (*pick(rng, &["uring", "threads"])).into(),
        _ => format!("{}={}", number(rng), number(rng)), // a second '='
    };
    pad(rng, v)
}

/// Sometimes surrounds `s` with whitespace.
fn pad(rng: &mut Rng, s: String) -> String {
    if rng.chance(80) {
        return s;
    }
    format!("{}{s}{}", pick(rng, SPACES), pick(rng, SPACES))
}

fn key(rng: &mut Rng) -> String {
    let k = *pick(rng, KEYS);
    let k = match rng.below(12) {
        0..=7 => k.to_string(),
        8 => k.to_uppercase(),
        9 => format!("{k}{}", pick(rng, ODD)),
        10 => format!("{}{k}", pick(rng, &["x", "_", "-", "no_"])),
        _ => (0..rng.below(4)).map(|_| *pick(rng, ODD)).collect(),
    };
    pad(rng, k)
}

fn item(rng: &mut Rng) -> String {
    match rng.below(16) {
        0 => String::new(),
        1 => (*pick(rng, SPACES)).into(),
        2 => key(rng),                               // no '='
        3 => format!("={}", value(rng, "capacity")), // no key
        4 => (0..rng.below(8)).map(|_| *pick(rng, ODD)).collect(),
        _ => {
            let k = key(rng);
            let v = value(rng, k.trim());
            format!("{k}={v}")
        }
    }
}

/// Values that are each valid for their key, so that many strings built
/// from them are accepted (and round-trip) rather than refused.
fn plausible(rng: &mut Rng, key: &str) -> String {
    let sizes = |rng: &mut Rng, options: &[&str]| -> String { (*pick(rng, options)).to_string() };
    match key {
        "capacity" => sizes(rng, &["1G", "256M", "64M", "32m", "3G", "100000K", "1T", "268435456", "48MiB"]),
        "dirty_limit" => sizes(rng, &["512M", "64M", "16M", "8M", "12345678", "32MB"]),
        "dirty_background" => sizes(rng, &["0", "4K", "8M", "1M", "16380K", "100"]),
        "expire_ms" => sizes(rng, &["1", "7", "1000", "60000", "18446744073709551615"]),
        "expire_busy_ms" => sizes(rng, &["1", "999", "1000", "30000", "18446744073709551615"]),
        "folio_max" => sizes(rng, &["4K", "64K", "2M", "1M", "8k"]),
        "io_max" => sizes(rng, &["1M", "64K", "4M", "1G", "16K"]),
        "io" => sizes(rng, &["uring", "threads"]),
        "io_depth" => sizes(rng, &["1", "2", "128", "4096", "64"]),
        "readahead_max" => sizes(rng, &["16M", "4K", "4097", "1G", "0"]),
        "throttle_pause_ms_max" => sizes(rng, &["1", "200", "18446744073709551615"]),
        "async_depth_while_sync" => sizes(rng, &["1", "2", "8", "4096", "0", "4097"]),
        "sync_latency_target_us" => sizes(rng, &["0", "1", "500", "10000000", "10000001", "-1"]),
        "writeback_workers" => sizes(rng, &["1", "2", "4", "64", "0", "65"]),
        "writeback_routing" => sizes(rng, &["single", "rotor", "region", "Region", ""]),
        "region_size" => sizes(rng, &["64M", "2M", "1G", "1T", "3M", "4K"]),
        "scan_dropbehind" | "stream_dropbehind" => sizes(rng, &["on", "off", "On", "yes", ""]),
        "background_ioprio" => sizes(rng, &["be", "idle", "rt", "IDLE", ""]),
        _ => sizes(rng, &["0", "8K", "4K", "64K"]),
    }
}

fn options(rng: &mut Rng) -> String {
    let separators = [",", ";", ",,", ";;", ", ", " ; ", ";,", ",\u{a0}"];
    let items: Vec<String> = if rng.chance(50) {
        // Distinct keys with plausible values (duplicates sometimes).
        let mut keys: Vec<&str> = KEYS.to_vec();
        let n = rng.below(keys.len() + 1);
        (0..n)
            .map(|_| {
                let k = if rng.chance(3) { *pick(rng, KEYS) } else { keys.swap_remove(rng.below(keys.len())) };
                let v = plausible(rng, k);
                pad(rng, format!("{k}={v}"))
            })
            .collect()
    } else {
        (0..rng.below(8)).map(|_| item(rng)).collect()
    };
    let mut s = String::new();
    for (i, it) in items.iter().enumerate() {
        if i > 0 || rng.chance(5) {
            let separator: &&str = pick(rng, &separators);
            s.push_str(separator);
        }
        s.push_str(it);
    }
    if rng.chance(5) {
        let separator: &&str = pick(rng, &separators);
        s.push_str(separator);
    }
    s
}

/// The size grammar, written out once more as the reference the parser is
/// compared with: ASCII digits, then nothing, `B`, or `K`/`M`/`G`/`T`
/// optionally followed by `B` or `iB`, in either case, surrounded by
/// whitespace `str::trim` removes.
fn reference_size(value: &str) -> Option<u64> {
    let v = value.trim();
    let end = v.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(v.len());
    let (digits, suffix) = v.split_at(end);
    if digits.is_empty() {
        return None;
    }
    let suffix = suffix.to_ascii_lowercase();
    let (unit, rest) = match suffix.chars().next() {
        None => return digits.parse().ok(),
        Some('k') => (10, &suffix[1..]),
        Some('m') => (20, &suffix[1..]),
        Some('g') => (30, &suffix[1..]),
        Some('t') => (40, &suffix[1..]),
        Some('b') if suffix == "b" => return digits.parse().ok(),
        Some(_) => return None,
    };
    if !matches!(rest, "" | "b" | "ib") {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << unit)
}

/// Checks one option string; returns a failure description or `None`.
fn check_options(s: &str, c_check: bool) -> Option<String> {
    let parsed = match std::panic::catch_unwind(|| Config::from_options(s)) {
        Ok(parsed) => parsed,
        Err(_) => return Some("from_options panicked".into()),
    };
    match parsed {
        Err(e) => {
            if e.kind() != io::ErrorKind::InvalidInput || wbcache::errno_of(&e) != libc::EINVAL {
                return Some(format!("refused with {:?} / errno {}: {e}", e.kind(), wbcache::errno_of(&e)));
            }
            let message = e.to_string();
            // Every message says which option: its key, or the piece that
            // is not `key=value` ("option '...'").
            if !(message.contains("option") || KEYS.iter().any(|k| message.contains(k))) {
                return Some(format!("message names no option: {message}"));
            }
            if c_check {
                if let Some(failure) = check_c_refusal(s, &message) {
                    return Some(failure);
                }
            }
        }
        Ok(config) => {
            if let Err(e) = config.validate() {
                return Some(format!("accepted an invalid configuration: {e}"));
            }
            let spelled = config.to_options();
            match Config::from_options(&spelled) {
                Ok(again) if again == config && again.to_options() == spelled => {}
                Ok(again) => return Some(format!("round trip changed it: {spelled} -> {}", again.to_options())),
                Err(e) => return Some(format!("to_options gave {spelled:?}, which is refused: {e}")),
            }
        }
    }
    None
}

/// The C ABI refuses `s` (cut at a NUL, as C would read it) with `-EINVAL`,
/// a NULL handle and the parser's message.
fn check_c_refusal(s: &str, message: &str) -> Option<String> {
    if s.contains('\0') {
        return None;
    }
    let options = CString::new(s).unwrap();
    let mut c: *mut wbc_cache = ptr::NonNull::dangling().as_ptr();
    // SAFETY: a valid string and output pointer.
    let rc = unsafe { capi::wbc_cache_open(options.as_ptr(), &mut c) };
    if rc != -libc::EINVAL || !c.is_null() {
        if rc == 0 {
            // SAFETY: a live handle, closed once.
            unsafe { capi::wbc_cache_close(c) };
        }
        return Some(format!("wbc_cache_open returned {rc} (handle {c:?})"));
    }
    let expected = format!("wbc_cache_open: {message}");
    let got = last_error();
    (got != expected).then(|| format!("wbc_last_error {got:?}, expected {expected:?}"))
}

#[test]
fn option_strings_never_panic_and_refusals_are_einval() {
    count_panics();
    let seed = seed();
    let (iterations, time) = budget(200_000, Duration::from_secs(3));
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let (mut accepted, mut done) = (0u64, 0u64);
    for i in 0..iterations {
        if time.is_some_and(|t| started.elapsed() > t) {
            break;
        }
        let s = options(&mut rng);
        if let Some(failure) = check_options(&s, i % 16 == 0) {
            panic!("seed {seed} iteration {i}: {s:?}: {failure}");
        }
        accepted += u64::from(Config::from_options(&s).is_ok());
        done += 1;
    }
    report_rate("option strings", seed, done, started);
    eprintln!("fuzz option strings: {accepted} accepted, {} refused", done - accepted);
    assert!(accepted > done / 20, "the grammar should produce valid strings too: {accepted} of {done}");
    assert!(done - accepted > done / 20, "and invalid ones");
}

#[test]
fn sizes_parse_exactly_as_the_grammar_says() {
    let seed = seed() ^ 0x5153;
    let (iterations, time) = budget(200_000, Duration::from_secs(2));
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut done = 0;
    for i in 0..iterations {
        if time.is_some_and(|t| started.elapsed() > t) {
            break;
        }
        let v = match rng.below(3) {
            0 => {
                let v = format!("{}{}", number(&mut rng), suffix(&mut rng));
                pad(&mut rng, v)
            }
            1 => value(&mut rng, "capacity"),
            _ => (0..rng.below(6))
                .map(|_| *pick(&mut rng, &["1", "0", "k", "i", "B", "b", " ", "G", "9", "é"]))
                .collect(),
        };
        let got = std::panic::catch_unwind(|| parse_size("some_key", &v))
            .unwrap_or_else(|_| panic!("seed {seed} iteration {i}: parse_size({v:?}) panicked"));
        match (got, reference_size(&v)) {
            (Ok(n), Some(m)) if n == m => {}
            (Err(e), None) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "seed {seed} iteration {i}: {v:?}");
                assert!(e.to_string().contains("some_key"), "seed {seed} iteration {i}: {v:?}: {e}");
            }
            (got, want) => panic!("seed {seed} iteration {i}: parse_size({v:?}) = {got:?}, the grammar says {want:?}"),
        }
        done += 1;
    }
    report_rate("sizes", seed, done, started);
}

/// Regressions: strings the fuzzer (or review) singled out.
#[test]
fn option_string_regressions() {
    for s in [
        "",
        ";",
        ",;,",
        "capacity=18446744073709551615",
        "capacity=16777216T",
        "capacity=1G,expire_ms=18446744073709551615,throttle_pause_ms_max=18446744073709551615",
        "io_depth=4294967296",
        "io_depth=4096,io=uring",
        "capacity=\u{a0}1G\u{3000}",
        "capacity=1\u{212a}",
        "capacity=1К",
        "capacity=1G=2G",
        "=1G",
        "\u{feff}capacity=1G",
        "capacity=1G\u{0}",
        "readahead_max=0",
        "folio_max=1G,capacity=4G,dirty_limit=2G,io_max=1G,bridge_gap=512M",
        "bridge_gap=18446744073709549568",
    ] {
        if let Some(failure) = check_options(s, true) {
            panic!("{s:?}: {failure}");
        }
    }
}

// ------------------------------------------------------------------ C ABI

fn last_error() -> String {
    let mut buf = vec![0u8; 8192];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { capi::wbc_last_error(buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "wbc_last_error failed: {n}");
    String::from_utf8_lossy(&buf[..(n as usize).min(buf.len() - 1)]).into_owned()
}

/// The errnos `include/wbcache.h` documents for each function (those of
/// open(2) for `wbc_open`, of the backing store's I/O for the rest).
fn documented(function: &str) -> &'static [i32] {
    use libc::*;
    const STORE: &[i32] = &[EIO, ENOSPC, EDQUOT, EFBIG];
    match function {
        "wbc_cache_open" => &[EINVAL, EAGAIN, ENOMEM],
        "wbc_cache_close" | "wbc_cache_sync" | "wbc_fsync" | "wbc_fdatasync" => {
            &[EINVAL, EBADF, EIO, ENOSPC, EDQUOT, EFBIG]
        }
        "wbc_open" => &[
            EINVAL,
            ENOENT,
            EEXIST,
            EACCES,
            EPERM,
            EBADF,
            EISDIR,
            ENOTDIR,
            ENAMETOOLONG,
            ELOOP,
            EMFILE,
            ENFILE,
            ENOSPC,
            EDQUOT,
            EROFS,
            ETXTBSY,
            ENXIO,
            ENODEV,
            EOVERFLOW,
            EFBIG,
            ENOMEM,
            EAGAIN,
            EIO,
        ],
        "wbc_close" | "wbc_stats_json" => &[EINVAL],
        "wbc_pread" | "wbc_preadv" => &[EINVAL, EBADF, EIO, ENOMEM],
        "wbc_pwrite" | "wbc_pwritev" | "wbc_truncate" => {
            const W: &[i32] = &[EINVAL, EBADF, EFBIG, ENOSPC, EDQUOT, EIO, ENOMEM];
            let _ = STORE;
            W
        }
        "wbc_size" => &[EINVAL, EBADF, EOVERFLOW],
        "wbc_fadvise" => &[EINVAL, EBADF],
        "wbc_sync_range" => &[EINVAL, EBADF, EIO, ENOSPC, EDQUOT, EFBIG],
        "wbc_fallocate" => &[EINVAL, EBADF, EFBIG, EOPNOTSUPP, ENOSPC, EDQUOT, EIO],
        "wbc_last_error" => &[EIO],
        other => panic!("no errno list for {other}"),
    }
}

/// A failure found by the C ABI fuzzer, with what reproduces it.
struct Failures {
    seed: u64,
    found: Vec<String>,
    /// Outcomes seen, per function: `ok`, or the errno's name; printed,
    /// to show what the run covered.
    seen: std::collections::BTreeMap<(String, String), u64>,
}

impl Failures {
    fn check(&mut self, i: u64, call: &str, function: &str, rc: i64) {
        let outcome = if rc >= 0 { "ok".to_string() } else { format!("{}", io::Error::from_raw_os_error(-rc as i32)) };
        *self.seen.entry((function.to_string(), outcome)).or_default() += 1;
        if rc >= 0 {
            return;
        }
        let errno = i32::try_from(-rc).unwrap_or(i32::MAX);
        let message = last_error();
        if !documented(function).contains(&errno) {
            self.found.push(format!(
                "seed {} iteration {i}: {call} = -{} ({}), not documented for {function}; last error: {message}",
                self.seed,
                errno,
                io::Error::from_raw_os_error(errno)
            ));
        }
        if message.contains("internal panic") {
            self.found.push(format!("seed {} iteration {i}: {call}: {message}", self.seed));
        }
    }

    #[track_caller]
    fn expect(&mut self, i: u64, call: &str, rc: i64, want: i64) {
        if rc != want {
            self.found.push(format!(
                "seed {} iteration {i}: {call} = {rc}, expected {want}: {}",
                self.seed,
                last_error()
            ));
        }
    }
}

/// One open `wbc_file`.
struct Live {
    f: *mut wbc_file,
    cache: usize,
    path: usize,
    read: bool,
    write: bool,
    /// Opened with `O_APPEND`: writes go to the end, whatever their offset.
    append: bool,
}

/// One cache of the fuzzer: its handle (NULL once closed: a closed
/// handle is freed memory and is never passed again).
struct CacheSlot {
    c: *mut wbc_cache,
    paths: Vec<FuzzPath>,
}

/// A path a cache's files are opened at: `writable` ones lie in the
/// fuzzer's own directories (or its loop device); the others are system
/// paths, only ever opened read-only.
struct FuzzPath {
    c: CString,
    writable: bool,
    device: bool,
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The paths of cache `n`: regular files, and names that must be refused
/// (a directory, a file used as a directory, a symlink loop, a FIFO, a
/// name too long, nothing at all, bytes that are not UTF-8), plus system
/// paths read-only, plus the loop device for the first cache.
fn paths_for(dir: &Path, n: usize, device: Option<&Path>) -> Vec<FuzzPath> {
    let d = dir.join(format!("cache{n}"));
    std::fs::create_dir_all(&d).unwrap();
    let fifo = d.join("fifo");
    let c_fifo = c_path(&fifo);
    // SAFETY: a valid path.
    unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) };
    let _ = std::os::unix::fs::symlink(d.join("loop"), d.join("loop"));
    let mut paths: Vec<FuzzPath> = ["a", "b", "c", "loop", "a/x", "missing/x", "fifo", ""]
        .iter()
        .map(|name| FuzzPath { c: c_path(&d.join(name)), writable: true, device: false })
        .collect();
    paths.push(FuzzPath { c: c_path(&d), writable: true, device: false });
    paths.push(FuzzPath { c: c_path(&d.join("n".repeat(300))), writable: true, device: false });
    let mut odd = d.as_os_str().as_bytes().to_vec();
    odd.extend_from_slice(b"/\xff\xfe-not-utf8");
    paths.push(FuzzPath { c: CString::new(odd).unwrap(), writable: true, device: false });
    paths.push(FuzzPath { c: CString::new("").unwrap(), writable: true, device: false });
    for system in ["/dev/null", "/proc/self/status", "/"] {
        paths.push(FuzzPath { c: CString::new(system).unwrap(), writable: false, device: false });
    }
    if let Some(device) = device {
        paths.push(FuzzPath { c: c_path(device), writable: true, device: true });
    }
    paths
}

const DEVICE_BYTES: u64 = 8 << 20;

/// A loop device for the device-end cases; `None` where none can be set
/// up (not root, no loop driver).
fn fuzz_loop_device() -> Option<LoopDevice> {
    LoopDevice::create("fuzz-loop", DEVICE_BYTES)
        .map_err(|e| eprintln!("fuzz: no loop device ({e}); device ends not fuzzed"))
        .ok()
}

/// ext4's largest file with 4 KiB blocks (`s_maxbytes`): writes cross it
/// short or fail with `EFBIG`.
const EXT4_MAX_FILE: u64 = (1 << 44) - 4096;

fn offset(rng: &mut Rng) -> u64 {
    let near = |rng: &mut Rng, at: u64| at.wrapping_add(rng.below(9000) as u64).wrapping_sub(4500);
    match rng.below(12) {
        0 => 0,
        1..=3 => rng.below(1 << 20) as u64,
        4 => rng.below(64 << 20) as u64,
        5 => near(rng, i64::MAX as u64),
        6 => near(rng, 1 << 63),
        7 => near(rng, u64::MAX),
        8 => near(rng, EXT4_MAX_FILE),
        9 => near(rng, DEVICE_BYTES),
        10 => near(rng, isize::MAX as u64),
        _ => rng.next_u64(),
    }
}

/// A length within `buf_len`, or one past `SSIZE_MAX` (refused before the
/// buffer is touched).
fn length(rng: &mut Rng, buf_len: usize) -> usize {
    match rng.below(14) {
        0 => 0,
        1 => 1,
        2 => 4095,
        3 => 4096,
        4 => 4097,
        5 => isize::MAX as usize + 1,
        6 => usize::MAX,
        7 => buf_len,
        8..=10 => rng.below(300),
        _ => rng.below(buf_len.min(300_000) + 1),
    }
}

fn rw_flags(rng: &mut Rng) -> u32 {
    match rng.below(8) {
        0..=3 => 0,
        4 | 5 => capi::WBC_DONTCACHE,
        6 => 1 << rng.below(32),
        _ => rng.next_u64() as u32,
    }
}

fn oflags(rng: &mut Rng) -> c_int {
    let mut f = *pick(rng, &[libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR, libc::O_RDWR, libc::O_ACCMODE]);
    let extra = [
        libc::O_CREAT,
        libc::O_CREAT,
        libc::O_EXCL,
        libc::O_TRUNC,
        libc::O_CLOEXEC,
        libc::O_DIRECT,
        libc::O_LARGEFILE,
        0o100000,
        libc::O_APPEND,
        libc::O_NONBLOCK,
        libc::O_SYNC,
        libc::O_NOFOLLOW,
        libc::O_DIRECTORY,
        libc::O_PATH,
        libc::O_TMPFILE,
        i32::MIN,
    ];
    for _ in 0..rng.below(4) {
        if rng.chance(90) {
            f |= *pick(rng, &extra);
        } else {
            f |= 1 << rng.below(31);
        }
    }
    f
}

/// An `off_t` for the range calls: [`offset`]'s values as signed (those
/// past `INT64_MAX` are negative), and the extremes.
fn signed_offset(rng: &mut Rng) -> i64 {
    match rng.below(16) {
        0 => -1,
        1 => i64::MIN,
        2..=9 => rng.below(1 << 20) as i64,
        // Block-aligned within twice a loop device's size (a device
        // refuses unaligned fallocate ranges).
        10 => (rng.below(2 * (DEVICE_BYTES / 4096) as usize) * 4096) as i64,
        _ => offset(rng) as i64,
    }
}

/// A length for the range calls at `off`: 0 (to the end of the file, or
/// refused by `wbc_fallocate`), negative, small, up to the end at
/// `INT64_MAX` and past it.
fn signed_length(rng: &mut Rng, off: i64) -> i64 {
    match rng.below(14) {
        0 => 0,
        1 => -1,
        2 => i64::MIN,
        3 => i64::MAX,
        4 => 4096,
        5 => 1,
        // Ending just before, at or just after INT64_MAX.
        6 => i64::MAX.wrapping_sub(off).wrapping_add(rng.below(5) as i64 - 2),
        7 => rng.next_u64() as i64,
        8 => rng.below(1 << 20) as i64,
        9 => rng.below(64) as i64 * 4096,
        _ => rng.below(300_000) as i64,
    }
}

fn advice(rng: &mut Rng) -> c_int {
    match rng.below(10) {
        0..=7 => rng.below(6) as c_int, // POSIX_FADV_NORMAL ..= POSIX_FADV_NOREUSE
        8 => *pick(rng, &[6, 7, -1, i32::MIN, i32::MAX]),
        _ => rng.next_u64() as c_int,
    }
}

fn sync_range_flags(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0..=6 => rng.below(8) as u32,
        7 => 8,
        8 => 1 << rng.below(32),
        _ => rng.next_u64() as u32,
    }
}

/// The `fallocate(2)` modes the header accepts.
const FALLOC_MODES: [c_int; 5] = [
    0,
    libc::FALLOC_FL_KEEP_SIZE,
    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    libc::FALLOC_FL_ZERO_RANGE,
    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
];

fn falloc_mode(rng: &mut Rng) -> c_int {
    match rng.below(10) {
        0..=6 => *pick(rng, &FALLOC_MODES),
        7 => *pick(
            rng,
            &[
                libc::FALLOC_FL_PUNCH_HOLE,
                libc::FALLOC_FL_COLLAPSE_RANGE,
                libc::FALLOC_FL_INSERT_RANGE,
                libc::FALLOC_FL_UNSHARE_RANGE,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                -1,
            ],
        ),
        8 => 1 << rng.below(31),
        _ => rng.next_u64() as c_int,
    }
}

/// Bytes read around each point of interest before a range call, to
/// compare with after it.
const PROBE_BYTES: u64 = 9000;

/// A file as a range call found it: its size through the handle `f`
/// called, and what a readable handle of it (if one is open) read around
/// the range.
struct Before {
    f: *mut wbc_file,
    size: u64,
    reader: Option<*mut wbc_file>,
    windows: Vec<(u64, Vec<u8>)>,
}

/// A buffer the fuzzer lends to the ABI, valid for its whole length.
const BUF_BYTES: usize = 1 << 20;

/// iovecs into `buf` (within it, so every one is valid for its length,
/// overlapping at random), or an invalid list the ABI must refuse without
/// reading it past what the count allows.
fn iovecs(rng: &mut Rng, buf: &mut [u8]) -> (Vec<libc::iovec>, c_int, bool) {
    let base = buf.as_mut_ptr();
    let count = match rng.below(10) {
        0 => 0,
        1 => 1025, // IOV_MAX + 1: refused
        2 => 1024,
        _ => rng.between(1, 8),
    };
    let mut list: Vec<libc::iovec> = (0..count)
        .map(|_| {
            let len = rng.below(if count > 8 { 64 } else { 40_000 });
            let at = rng.below(buf.len() - len + 1);
            // SAFETY: `at + len <= buf.len()`: in bounds.
            libc::iovec { iov_base: unsafe { base.add(at) }.cast(), iov_len: len }
        })
        .collect();
    let mut null_iov = false;
    match rng.below(12) {
        // A NULL base under a non-zero length: refused.
        0 if count > 0 => list[rng.below(count)].iov_base = ptr::null_mut(),
        // A NULL base with length 0: fine.
        1 if count > 0 => {
            let j = rng.below(count);
            list[j] = libc::iovec { iov_base: ptr::null_mut(), iov_len: 0 };
        }
        // Lengths past SSIZE_MAX, alone or in total: refused before use.
        2 if count > 0 => list[rng.below(count)].iov_len = isize::MAX as usize + 1 + rng.below(100),
        3 if count > 1 => {
            list[0].iov_len = isize::MAX as usize / 2 + 1;
            list[1].iov_len = isize::MAX as usize / 2 + 1;
        }
        4 => null_iov = true,
        _ => {}
    }
    let cnt = match rng.below(20) {
        0 => -1,
        1 => i32::MIN,
        _ => count as c_int,
    };
    // Counts the list does not hold are only ever passed with NULL or
    // refused before the array is read (negative, past 1024).
    (list, cnt, null_iov)
}

struct Fuzzer {
    rng: Rng,
    failures: Failures,
    caches: Vec<CacheSlot>,
    files: Vec<Live>,
    buf: Vec<u8>,
    back: Vec<u8>,
    dir: PathBuf,
    device: Option<PathBuf>,
    next_cache: usize,
}

const CACHE_OPTIONS: &[&str] = &[
    "capacity=16M,dirty_limit=4M,folio_max=64K,io=threads,io_depth=2",
    "capacity=16M,dirty_limit=4M,folio_max=256K,io=uring,io_depth=8",
    "capacity=8M,dirty_limit=2M,dirty_background=0,folio_max=4K,bridge_gap=0,expire_ms=5,io=threads,io_depth=4",
];

impl Fuzzer {
    fn open_cache(&mut self, options: &str) {
        let options = CString::new(options).unwrap();
        let mut c = ptr::null_mut();
        // SAFETY: valid string and output pointer.
        let rc = unsafe { capi::wbc_cache_open(options.as_ptr(), &mut c) };
        assert_eq!(rc, 0, "wbc_cache_open({options:?}): {}", last_error());
        let n = self.next_cache;
        self.next_cache += 1;
        let device = if n == 0 { self.device.clone() } else { None };
        self.caches.push(CacheSlot { c, paths: paths_for(&self.dir, n, device.as_deref()) });
    }

    /// A live file (or NULL, now and then).
    fn file(&mut self) -> (*mut wbc_file, Option<usize>) {
        if self.files.is_empty() || self.rng.chance(4) {
            return (ptr::null_mut(), None);
        }
        let i = self.rng.below(self.files.len());
        (self.files[i].f, Some(i))
    }

    /// A live cache handle (or NULL, now and then).
    fn cache(&mut self) -> (*mut wbc_cache, Option<usize>) {
        let open: Vec<usize> = (0..self.caches.len()).filter(|&i| !self.caches[i].c.is_null()).collect();
        if open.is_empty() || self.rng.chance(4) {
            return (ptr::null_mut(), None);
        }
        let i = *pick(&mut self.rng, &open);
        (self.caches[i].c, Some(i))
    }

    fn is_closed(&self, file: Option<usize>) -> bool {
        file.is_some_and(|i| self.caches[self.files[i].cache].c.is_null())
    }

    fn step(&mut self, i: u64) {
        // Weights per mille: mostly I/O on open files, few closes, a
        // cache closed now and then (its files then fail with EBADF).
        let choice = self.rng.below(1000);
        match choice {
            0..=99 => self.op_open(i),
            100..=129 => self.op_close(i),
            130..=309 => self.op_pwrite(i),
            310..=459 => self.op_pread(i),
            460..=539 => self.op_pwritev(i),
            540..=609 => self.op_preadv(i),
            610..=649 => {
                let (f, at) = self.file();
                let data_only = self.rng.chance(50);
                // SAFETY: `f` is NULL or live.
                let rc = i64::from(unsafe {
                    if data_only {
                        capi::wbc_fdatasync(f)
                    } else {
                        capi::wbc_fsync(f)
                    }
                });
                let name = if data_only { "wbc_fdatasync" } else { "wbc_fsync" };
                self.failures.check(i, &format!("{name}({f:?})"), name, rc);
                self.expect_handle_errors(i, name, f, at, rc);
            }
            650..=689 => {
                let (f, at) = self.file();
                // SAFETY: `f` is NULL or live.
                let rc = unsafe { capi::wbc_size(f) };
                self.failures.check(i, &format!("wbc_size({f:?})"), "wbc_size", rc);
                self.expect_handle_errors(i, "wbc_size", f, at, rc);
            }
            690..=749 => {
                let (f, at) = self.file();
                let size = offset(&mut self.rng);
                // SAFETY: `f` is NULL or live.
                let rc = i64::from(unsafe { capi::wbc_truncate(f, size) });
                self.failures.check(i, &format!("wbc_truncate({f:?}, {size})"), "wbc_truncate", rc);
                self.expect_handle_errors(i, "wbc_truncate", f, at, rc);
                if size > i64::MAX as u64 && at.is_some_and(|a| self.files[a].write) && !self.is_closed(at) {
                    self.failures.expect(i, &format!("wbc_truncate(.., {size})"), rc, -i64::from(libc::EFBIG));
                }
            }
            750..=769 => {
                let (c, _) = self.cache();
                // SAFETY: `c` is NULL or live.
                let rc = i64::from(unsafe { capi::wbc_cache_sync(c) });
                self.failures.check(i, &format!("wbc_cache_sync({c:?})"), "wbc_cache_sync", rc);
                if c.is_null() {
                    self.failures.expect(i, "wbc_cache_sync(NULL)", rc, -i64::from(libc::EINVAL));
                }
            }
            770..=809 => self.op_stats(i),
            810..=849 => {
                let len = length(&mut self.rng, 64);
                let mut small = [0u8; 64];
                let (buf, len) =
                    if self.rng.chance(30) { (ptr::null_mut(), len) } else { (small.as_mut_ptr(), len.min(64)) };
                // SAFETY: `buf` is NULL or valid for `len` bytes.
                let rc = unsafe { capi::wbc_last_error(buf.cast::<c_char>(), len) };
                if rc < 0 {
                    self.failures
                        .found
                        .push(format!("seed {} iteration {i}: wbc_last_error = {rc}", self.failures.seed));
                }
            }
            850..=909 => {
                // A cache opened and closed with options from the grammar.
                let s = options(&mut self.rng);
                let Ok(options) = CString::new(s.clone()) else { return };
                let mut c = ptr::null_mut();
                // SAFETY: valid string and output pointer.
                let rc = i64::from(unsafe { capi::wbc_cache_open(options.as_ptr(), &mut c) });
                self.failures.check(i, &format!("wbc_cache_open({s:?})"), "wbc_cache_open", rc);
                if rc == 0 {
                    // A little I/O under whatever configuration it took.
                    self.short_session(i, c, &s);
                    // SAFETY: a live handle, closed once.
                    let rc = i64::from(unsafe { capi::wbc_cache_close(c) });
                    self.failures.expect(i, &format!("wbc_cache_close of a fresh cache ({s:?})"), rc, 0);
                } else if !c.is_null() {
                    self.failures
                        .found
                        .push(format!("seed {} iteration {i}: failed open left a handle", self.failures.seed));
                }
            }
            910..=934 => self.op_fadvise(i),
            935..=959 => self.op_sync_range(i),
            960..=989 => self.op_fallocate(i),
            990..=994 => self.op_close_cache(i),
            _ => {
                // A second handle of a file open already, for reads back.
                self.op_open(i);
            }
        }
    }

    /// Opens a file in a cache made from fuzzed options, writes, reads
    /// back, syncs and closes it: each must succeed.
    fn short_session(&mut self, i: u64, c: *mut wbc_cache, options: &str) {
        let path = c_path(&self.dir.join(format!("session-{}", i % 4)));
        let mut f = ptr::null_mut();
        // SAFETY: `c` is live; valid path and output pointer.
        let rc =
            unsafe { capi::wbc_open(c, path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, 0o644, &mut f) };
        let what = format!("a cache with {options:?}");
        self.failures.expect(i, &format!("wbc_open in {what}"), i64::from(rc), 0);
        if rc != 0 {
            return;
        }
        let len = self.rng.below(300_000) + 1;
        let off = self.rng.below(3 << 20) as u64;
        let flags = if self.rng.chance(30) { capi::WBC_DONTCACHE } else { 0 };
        Rng::new(i).fill(&mut self.buf[..len]);
        // SAFETY: `f` is live; the buffers are valid for `len` bytes.
        unsafe {
            let n = capi::wbc_pwrite(f, self.buf.as_ptr().cast(), len, off, flags);
            self.failures.expect(i, &format!("wbc_pwrite in {what}"), n, len as i64);
            let n = capi::wbc_pread(f, self.back.as_mut_ptr().cast(), len, off, flags);
            self.failures.expect(i, &format!("wbc_pread in {what}"), n, len as i64);
            if self.back[..len] != self.buf[..len] {
                self.failures
                    .found
                    .push(format!("seed {} iteration {i}: read back differs in {what}", self.failures.seed));
            }
            self.failures.expect(i, &format!("wbc_fsync in {what}"), i64::from(capi::wbc_fsync(f)), 0);
            self.failures.expect(i, &format!("wbc_close in {what}"), i64::from(capi::wbc_close(f)), 0);
        }
    }

    /// On a NULL file every call is `EINVAL`; on a file of a closed cache
    /// `EBADF` (or `EINVAL` for a bad argument checked first).
    fn expect_handle_errors(&mut self, i: u64, name: &str, f: *mut wbc_file, at: Option<usize>, rc: i64) {
        if f.is_null() {
            self.failures.expect(i, &format!("{name}(NULL)"), rc, -i64::from(libc::EINVAL));
        } else if self.is_closed(at) && rc != -i64::from(libc::EINVAL) {
            self.failures.expect(i, &format!("{name} after wbc_cache_close"), rc, -i64::from(libc::EBADF));
        }
        let _ = at;
    }

    fn op_open(&mut self, i: u64) {
        let (c, slot) = self.cache();
        let mut flags = if self.rng.chance(60) {
            libc::O_RDWR | libc::O_CREAT | if self.rng.chance(5) { libc::O_TRUNC } else { 0 }
        } else {
            oflags(&mut self.rng)
        };
        let mode = if self.rng.chance(70) { 0o644 } else { self.rng.next_u64() as u32 };
        let (path_ptr, path_index) = match slot {
            Some(s) if !self.rng.chance(5) => {
                // Mostly the regular files (and the device), which take I/O.
                let n = self.caches[s].paths.len();
                let p = if self.rng.chance(70) { *pick(&mut self.rng, &[0, 1, 2, n - 1]) } else { self.rng.below(n) };
                let path = &self.caches[s].paths[p];
                if !path.writable {
                    // Root may write anything: system paths are read-only.
                    flags &= !(libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL | libc::O_TMPFILE);
                }
                (path.c.as_ptr(), Some(p))
            }
            _ => (ptr::null(), None),
        };
        let mut out: *mut wbc_file = ptr::NonNull::dangling().as_ptr();
        let out_ptr: *mut *mut wbc_file = if self.rng.chance(3) { ptr::null_mut() } else { &mut out };
        // SAFETY: `c` NULL or live, `path_ptr` NULL or a C string, `out_ptr`
        // NULL or valid for a pointer write.
        let rc = i64::from(unsafe { capi::wbc_open(c, path_ptr, flags, mode, out_ptr) });
        let call = format!(
            "wbc_open({c:?}, {:?}, {flags:#x}, {mode:#o})",
            path_index.map(|p| &self.caches[slot.unwrap()].paths[p].c)
        );
        self.failures.check(i, &call, "wbc_open", rc);
        if c.is_null() || path_ptr.is_null() || out_ptr.is_null() {
            self.failures.expect(i, &call, rc, -i64::from(libc::EINVAL));
        }
        if out_ptr.is_null() {
            return;
        }
        if rc == 0 {
            let access = flags & libc::O_ACCMODE;
            self.files.push(Live {
                f: out,
                cache: slot.unwrap(),
                path: path_index.unwrap(),
                read: access != libc::O_WRONLY,
                write: access != libc::O_RDONLY,
                append: flags & libc::O_APPEND != 0,
            });
            // Bounded: close one at random past 24.
            if self.files.len() > 24 {
                let j = self.rng.below(self.files.len());
                let f = self.files.swap_remove(j).f;
                // SAFETY: a live handle, closed once.
                assert_eq!(unsafe { capi::wbc_close(f) }, 0);
            }
        } else if !out.is_null() {
            self.failures
                .found
                .push(format!("seed {} iteration {i}: {call} failed but left *out = {out:?}", self.failures.seed));
        }
    }

    fn op_close(&mut self, i: u64) {
        if self.files.is_empty() || self.rng.chance(10) {
            // SAFETY: NULL is checked.
            let rc = i64::from(unsafe { capi::wbc_close(ptr::null_mut()) });
            self.failures.expect(i, "wbc_close(NULL)", rc, -i64::from(libc::EINVAL));
            return;
        }
        let j = self.rng.below(self.files.len());
        let f = self.files.swap_remove(j).f;
        // SAFETY: a live handle, closed once and forgotten.
        let rc = i64::from(unsafe { capi::wbc_close(f) });
        self.failures.expect(i, "wbc_close", rc, 0);
    }

    fn op_close_cache(&mut self, i: u64) {
        let (c, slot) = self.cache();
        if c.is_null() {
            // SAFETY: NULL is checked.
            let rc = i64::from(unsafe { capi::wbc_cache_close(c) });
            self.failures.expect(i, "wbc_cache_close(NULL)", rc, -i64::from(libc::EINVAL));
            return;
        }
        // SAFETY: a live handle, closed once; its slot forgets it.
        let rc = i64::from(unsafe { capi::wbc_cache_close(c) });
        self.failures.check(i, "wbc_cache_close", "wbc_cache_close", rc);
        self.caches[slot.unwrap()].c = ptr::null_mut();
        // Its files stay open (and must now fail with EBADF); a new cache
        // takes its place.
        let options = *pick(&mut self.rng, CACHE_OPTIONS);
        self.open_cache(options);
    }

    /// Where a write of handle `at` at `off` lands: the end of the file for
    /// an `O_APPEND` handle (its size now; the fuzzer runs one call at a
    /// time), else `off`.
    fn write_offset(&self, at: Option<usize>, off: u64) -> u64 {
        match at {
            Some(a) if self.files[a].append => {
                // SAFETY: a live handle.
                let size = unsafe { capi::wbc_size(self.files[a].f) };
                u64::try_from(size).unwrap_or(off)
            }
            _ => off,
        }
    }

    fn op_pwrite(&mut self, i: u64) {
        let (f, at) = self.file();
        let len = length(&mut self.rng, BUF_BYTES);
        let off = offset(&mut self.rng);
        let flags = rw_flags(&mut self.rng);
        let seed = self.rng.next_u64();
        let null_buf = self.rng.chance(5);
        if !null_buf && len <= BUF_BYTES {
            Rng::new(seed).fill(&mut self.buf[..len]);
        }
        let buf: *const u8 = if null_buf { ptr::null() } else { self.buf.as_ptr() };
        let lands_at = self.write_offset(at, off);
        // SAFETY: `f` NULL or live; `buf` NULL, or valid for `len` bytes, or
        // `len` is past SSIZE_MAX (refused before use).
        let rc = unsafe { capi::wbc_pwrite(f, buf.cast(), len, off, flags) };
        let call = format!("wbc_pwrite({f:?}, {len}, {off}, {flags:#x})");
        self.failures.check(i, &call, "wbc_pwrite", rc);
        self.expect_handle_errors(i, "wbc_pwrite", f, at, rc);
        if rc > 0 && rc as u64 > len as u64 {
            self.failures.found.push(format!("seed {} iteration {i}: {call} wrote {rc} > {len}", self.failures.seed));
        }
        if let (Some(a), true) = (at, rc > 0) {
            self.read_back(i, a, lands_at, rc as usize, &call);
        }
        let off = lands_at;
        if let Some(a) = at {
            let live = &self.files[a];
            if !null_buf && len <= isize::MAX as usize && flags & !capi::WBC_DONTCACHE == 0 && !self.is_closed(at) {
                if !live.write {
                    self.failures.expect(i, &call, rc, -i64::from(libc::EBADF));
                } else if len > 0 {
                    let on_device = self.caches[live.cache].paths[live.path].device;
                    if on_device && off >= DEVICE_BYTES {
                        // At or past a device's end: ENOSPC, as pwrite(2).
                        self.failures.expect(i, &call, rc, -i64::from(libc::ENOSPC));
                    } else if !on_device && off.checked_add(len as u64).is_none_or(|e| e > i64::MAX as u64) {
                        self.failures.expect(i, &call, rc, -i64::from(libc::EFBIG));
                    }
                }
            }
        }
    }

    /// Reads back what a write at `off` of `n` bytes (from `self.buf`) put
    /// there, through a readable handle of the same file if one is open.
    fn read_back(&mut self, i: u64, writer: usize, off: u64, n: usize, call: &str) {
        let (cache, path) = (self.files[writer].cache, self.files[writer].path);
        let Some(reader) = self.files.iter().find(|l| l.cache == cache && l.path == path && l.read) else { return };
        let flags = if self.rng.chance(30) { capi::WBC_DONTCACHE } else { 0 };
        // SAFETY: a live handle; `back` is valid for `n <= BUF_BYTES` bytes.
        let got = unsafe { capi::wbc_pread(reader.f, self.back.as_mut_ptr().cast(), n, off, flags) };
        if got != n as i64 || self.back[..n] != self.buf[..n] {
            self.failures.found.push(format!(
                "seed {} iteration {i}: after {call} wrote {n} bytes, reading them back gave {got}{}",
                self.failures.seed,
                if got == n as i64 { " bytes that differ" } else { "" }
            ));
        }
    }

    fn op_pread(&mut self, i: u64) {
        let (f, at) = self.file();
        let len = length(&mut self.rng, BUF_BYTES);
        let off = offset(&mut self.rng);
        let flags = rw_flags(&mut self.rng);
        let buf: *mut u8 = if self.rng.chance(5) { ptr::null_mut() } else { self.back.as_mut_ptr() };
        // SAFETY: `f` NULL or live; `buf` NULL, or `back` (BUF_BYTES long)
        // valid for writes of `len` bytes, or `len` is past SSIZE_MAX
        // (refused before use).
        let rc = unsafe { capi::wbc_pread(f, buf.cast(), len, off, flags) };
        let call = format!("wbc_pread({f:?}, {len}, {off}, {flags:#x})");
        self.failures.check(i, &call, "wbc_pread", rc);
        self.expect_handle_errors(i, "wbc_pread", f, at, rc);
        if rc > 0 && rc as u64 > len as u64 {
            self.failures.found.push(format!("seed {} iteration {i}: {call} read {rc} > {len}", self.failures.seed));
        }
        if let Some(a) = at {
            let ok_args = !buf.is_null() && len <= isize::MAX as usize && flags & !capi::WBC_DONTCACHE == 0;
            if ok_args && !self.is_closed(at) && !self.files[a].read {
                self.failures.expect(i, &call, rc, -i64::from(libc::EBADF));
            }
        }
    }

    fn op_pwritev(&mut self, i: u64) {
        let (f, at) = self.file();
        let seed = self.rng.next_u64();
        Rng::new(seed).fill(&mut self.buf[..]);
        let (list, count, null_iov) = iovecs(&mut self.rng, &mut self.buf);
        let off = offset(&mut self.rng);
        let flags = rw_flags(&mut self.rng);
        let iov = if null_iov { ptr::null() } else { list.as_ptr() };
        let lands_at = self.write_offset(at, off);
        // SAFETY: `f` NULL or live; `iov` NULL or valid for `list.len()`
        // iovecs, each NULL or valid for its length within `buf` unless
        // the ABI refuses the list first (count outside 0..=1024, a length
        // or total past SSIZE_MAX, a NULL base with a length).
        let rc = unsafe { capi::wbc_pwritev(f, iov, count, off, flags) };
        let total: usize = list.iter().fold(0usize, |t, v| t.saturating_add(v.iov_len));
        let call = format!("wbc_pwritev({f:?}, {count} iovecs of {total} bytes, {off}, {flags:#x})");
        self.failures.check(i, &call, "wbc_pwritev", rc);
        self.expect_handle_errors(i, "wbc_pwritev", f, at, rc);
        if rc > 0 && rc as u64 > total as u64 {
            self.failures.found.push(format!("seed {} iteration {i}: {call} wrote {rc} > {total}", self.failures.seed));
        }
        if rc > 0 {
            // Where buffers overlap, later bytes were gathered in order:
            // rebuild the concatenation the write took.
            let mut gathered = Vec::with_capacity(rc as usize);
            for v in list.iter().filter(|v| v.iov_len > 0) {
                // SAFETY: each iovec lies within `buf` (a successful call
                // had only valid ones).
                gathered.extend_from_slice(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) });
            }
            gathered.truncate(rc as usize);
            let saved = std::mem::take(&mut self.buf);
            self.buf = gathered;
            if let Some(a) = at {
                self.read_back(i, a, lands_at, rc as usize, &call);
            }
            let mut saved = saved;
            std::mem::swap(&mut self.buf, &mut saved);
            let _ = saved;
        }
    }

    fn op_preadv(&mut self, i: u64) {
        let (f, at) = self.file();
        let mut back = std::mem::take(&mut self.back);
        let (list, count, null_iov) = iovecs(&mut self.rng, &mut back);
        let off = offset(&mut self.rng);
        let flags = rw_flags(&mut self.rng);
        let iov = if null_iov { ptr::null() } else { list.as_ptr() };
        // SAFETY: `f` NULL or live; `iov` NULL or valid for `list.len()`
        // iovecs, each NULL or valid for writes of its length within `back`
        // (alive until after the call) unless the ABI refuses the list
        // first (count outside 0..=1024, a length or total past SSIZE_MAX,
        // a NULL base with a length).
        let rc = unsafe { capi::wbc_preadv(f, iov, count, off, flags) };
        self.back = back;
        let total: usize = list.iter().fold(0usize, |t, v| t.saturating_add(v.iov_len));
        let call = format!("wbc_preadv({f:?}, {count} iovecs of {total} bytes, {off}, {flags:#x})");
        self.failures.check(i, &call, "wbc_preadv", rc);
        self.expect_handle_errors(i, "wbc_preadv", f, at, rc);
        if rc > 0 && rc as u64 > total as u64 {
            self.failures.found.push(format!("seed {} iteration {i}: {call} read {rc} > {total}", self.failures.seed));
        }
    }

    /// The file's size through handle `f`, if its cache is open.
    fn size_of(&self, f: *mut wbc_file, at: Option<usize>) -> Option<u64> {
        if f.is_null() || self.is_closed(at) {
            return None;
        }
        // SAFETY: a live handle.
        u64::try_from(unsafe { capi::wbc_size(f) }).ok()
    }

    /// A readable handle of the file that `files[a]` is open on, in its
    /// (open) cache.
    fn reader_of(&self, a: usize) -> Option<*mut wbc_file> {
        if self.is_closed(Some(a)) {
            return None;
        }
        let (cache, path) = (self.files[a].cache, self.files[a].path);
        self.files.iter().find(|l| l.cache == cache && l.path == path && l.read).map(|l| l.f)
    }

    /// What `reader` reads around each of `points` (`PROBE_BYTES` from
    /// `PROBE_BYTES / 2` before it); windows whose read fails are left out.
    fn probe(&mut self, reader: *mut wbc_file, points: &[u64]) -> Vec<(u64, Vec<u8>)> {
        let mut windows = Vec::new();
        for &p in points {
            let lo = p.saturating_sub(PROBE_BYTES / 2);
            if windows.iter().any(|(l, _)| *l == lo) {
                continue;
            }
            let mut bytes = vec![0u8; PROBE_BYTES as usize];
            // SAFETY: a live handle; `bytes` is valid for its length.
            let n = unsafe { capi::wbc_pread(reader, bytes.as_mut_ptr().cast(), bytes.len(), lo, 0) };
            if let Ok(n) = usize::try_from(n) {
                bytes.truncate(n);
                windows.push((lo, bytes));
            }
        }
        windows
    }

    /// The size and windows around the range `[off, end)` before a range
    /// call through `f`, for [`Fuzzer::check_model`]; `None` where no model
    /// applies (a NULL handle, a closed cache).
    fn before_range_call(&mut self, f: *mut wbc_file, at: Option<usize>, off: i64, end: u64) -> Option<Before> {
        let size = self.size_of(f, at)?;
        let reader = self.reader_of(at?);
        let windows = match reader {
            Some(r) => self.probe(r, &[off.max(0) as u64, end, size]),
            None => Vec::new(),
        };
        Some(Before { f, size, reader, windows })
    }

    /// Checks, after a range call, the size (`new_size` expected) and the
    /// windows read before it: bytes past the old size and in `zeroed`
    /// read as zeros, the others as before.
    fn check_model(&mut self, i: u64, function: &str, call: &str, before: Before, new_size: u64, zeroed: Range<u64>) {
        let old_size = before.size;
        // SAFETY: a live handle of an open cache.
        let size = unsafe { capi::wbc_size(before.f) };
        if size != new_size as i64 {
            self.failures.found.push(format!(
                "seed {} iteration {i}: after {call} the size is {size}, expected {new_size} (was {old_size})",
                self.failures.seed
            ));
        }
        let Some(reader) = before.reader else { return };
        *self.failures.seen.entry((function.to_string(), "content checked".into())).or_default() += 1;
        for (lo, old) in &before.windows {
            let lo = *lo;
            let want: Vec<u8> = (lo..lo.saturating_add(PROBE_BYTES).min(new_size))
                .map(|x| if x >= old_size || zeroed.contains(&x) { 0 } else { old[(x - lo) as usize] })
                .collect();
            let mut got = vec![0xa5u8; PROBE_BYTES as usize];
            // SAFETY: a live handle; `got` is valid for its length.
            let n = unsafe { capi::wbc_pread(reader, got.as_mut_ptr().cast(), got.len(), lo, 0) };
            if n != want.len() as i64 || got[..want.len()] != want[..] {
                let first = got.iter().zip(&want).position(|(g, w)| g != w).map_or(0, |p| lo + p as u64);
                self.failures.found.push(format!(
                    "seed {} iteration {i}: after {call}, {PROBE_BYTES} bytes at {lo} read {n} (expected {}){}",
                    self.failures.seed,
                    want.len(),
                    if n == want.len() as i64 { format!(", differing first at {first}") } else { String::new() }
                ));
            }
        }
    }

    /// `wbc_fadvise`: `EINVAL` for a NULL handle, an unknown advice, a
    /// negative offset or length or a range past `INT64_MAX`; `EBADF`
    /// after `wbc_cache_close`; otherwise 0, and no advice changes a byte
    /// or the size.
    fn op_fadvise(&mut self, i: u64) {
        let (f, at) = self.file();
        let off = signed_offset(&mut self.rng);
        let len = signed_length(&mut self.rng, off);
        let advice = advice(&mut self.rng);
        let end = if len == 0 { u64::MAX } else { (off as u64).saturating_add(len as u64) };
        let model = self.before_range_call(f, at, off, end);
        // SAFETY: `f` is NULL or live.
        let rc = i64::from(unsafe { capi::wbc_fadvise(f, off, len, advice) });
        let call = format!("wbc_fadvise({f:?}, {off}, {len}, {advice})");
        self.failures.check(i, &call, "wbc_fadvise", rc);
        let invalid = f.is_null()
            || !(libc::POSIX_FADV_NORMAL..=libc::POSIX_FADV_NOREUSE).contains(&advice)
            || off < 0
            || len < 0
            || off.checked_add(len).is_none();
        self.expect_range_call(i, &call, (at, false), invalid.then_some(libc::EINVAL), rc, Some(0));
        if let Some(before) = model {
            let size = before.size;
            self.check_model(i, "wbc_fadvise", &call, before, size, 0..0);
        }
    }

    /// `wbc_sync_range`: `EINVAL` for a NULL handle, unknown flags, a
    /// negative offset or length or a range past `INT64_MAX`; `EBADF` after
    /// `wbc_cache_close`; otherwise 0 (or, when it waits, a writeback
    /// error), with no byte or size changed.
    fn op_sync_range(&mut self, i: u64) {
        let (f, at) = self.file();
        let off = signed_offset(&mut self.rng);
        let len = signed_length(&mut self.rng, off);
        let flags = sync_range_flags(&mut self.rng);
        let end = if len == 0 { u64::MAX } else { (off as u64).saturating_add(len as u64) };
        let model = self.before_range_call(f, at, off, end);
        // SAFETY: `f` is NULL or live.
        let rc = i64::from(unsafe { capi::wbc_sync_range(f, off, len, flags) });
        let call = format!("wbc_sync_range({f:?}, {off}, {len}, {flags:#x})");
        self.failures.check(i, &call, "wbc_sync_range", rc);
        let invalid = f.is_null() || flags & !7 != 0 || off < 0 || len < 0 || off.checked_add(len).is_none();
        let waits = flags & (libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WAIT_AFTER) != 0;
        // Only a wait reports a writeback error.
        let want_ok = if waits { None } else { Some(0) };
        self.expect_range_call(i, &call, (at, false), invalid.then_some(libc::EINVAL), rc, want_ok);
        if let Some(before) = model {
            let size = before.size;
            self.check_model(i, "wbc_sync_range", &call, before, size, 0..0);
        }
    }

    /// `wbc_fallocate`: `EINVAL` for a NULL handle, a negative offset or a
    /// length `<= 0`; `EFBIG` past `INT64_MAX`; `EOPNOTSUPP` for another
    /// mode; `EBADF` on a read-only handle or after `wbc_cache_close`;
    /// otherwise what the store answers. A success zeroes the range
    /// (punch, zero) and extends the size (mode 0, `ZERO_RANGE` on a
    /// regular file); a failure changes nothing.
    fn op_fallocate(&mut self, i: u64) {
        let (f, at) = self.file();
        let off = signed_offset(&mut self.rng);
        let mut len = signed_length(&mut self.rng, off);
        let mode = falloc_mode(&mut self.rng);
        let allocates = FALLOC_MODES.contains(&mode) && mode & libc::FALLOC_FL_PUNCH_HOLE == 0;
        if allocates && off >= 0 && len > 1 << 20 && off.checked_add(len).is_some() {
            // Blocks the store would really reserve: at most 1 MiB a call
            // (a punch of any length frees; past INT64_MAX is refused).
            len = 1 + len % (1 << 20);
        }
        let end = (off as u64).saturating_add(len as u64);
        let model = self.before_range_call(f, at, off, end);
        // SAFETY: `f` is NULL or live.
        let rc = i64::from(unsafe { capi::wbc_fallocate(f, mode, off, len) });
        let call = format!("wbc_fallocate({f:?}, {mode:#x}, {off}, {len})");
        self.failures.check(i, &call, "wbc_fallocate", rc);
        let arg_error = if f.is_null() || off < 0 || len <= 0 {
            Some(libc::EINVAL)
        } else if off.checked_add(len).is_none() {
            Some(libc::EFBIG)
        } else if !FALLOC_MODES.contains(&mode) {
            Some(libc::EOPNOTSUPP)
        } else {
            None
        };
        let read_only = at.is_some_and(|a| !self.files[a].write);
        let on_device = at.is_some_and(|a| self.caches[self.files[a].cache].paths[self.files[a].path].device);
        self.expect_range_call(i, &call, (at, true), arg_error, rc, None);
        if arg_error.is_none() && !read_only && !on_device && !self.is_closed(at) && end <= 1 << 30 {
            // A small range of a regular file: only the file system may
            // refuse it (no room, no fallocate), never as a bad argument.
            let store = [0, -libc::ENOSPC, -libc::EDQUOT, -libc::EOPNOTSUPP, -libc::EIO];
            if !store.contains(&(rc as i32)) {
                self.failures.found.push(format!(
                    "seed {} iteration {i}: {call} = {rc} for a small range of a regular file: {}",
                    self.failures.seed,
                    last_error()
                ));
            }
        }
        if let Some(before) = model {
            let keeps_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0 || on_device;
            let new_size = if rc == 0 && !keeps_size { before.size.max(end) } else { before.size };
            let zeroes = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
            let zeroed = if rc == 0 && zeroes { off as u64..end } else { 0..0 };
            self.check_model(i, "wbc_fallocate", &call, before, new_size, zeroed);
        }
    }

    /// The result of a range call through `files[at]` (`None`: NULL):
    /// on a NULL handle `EINVAL`; with a bad argument `arg_error`, or
    /// `EBADF` where the handle is bad too (the header orders neither);
    /// on a handle of a closed cache, or a read-only one where the call
    /// needs write access, `EBADF`; otherwise `want_ok` when given.
    fn expect_range_call(
        &mut self,
        i: u64,
        call: &str,
        (at, needs_write): (Option<usize>, bool),
        arg_error: Option<i32>,
        rc: i64,
        want_ok: Option<i64>,
    ) {
        let Some(a) = at else {
            self.failures.expect(i, call, rc, -i64::from(libc::EINVAL));
            return;
        };
        let bad_handle = self.is_closed(at) || (needs_write && !self.files[a].write);
        let ebadf = -i64::from(libc::EBADF);
        match arg_error {
            Some(_) if bad_handle && rc == ebadf => {}
            Some(e) => self.failures.expect(i, call, rc, -i64::from(e)),
            None if bad_handle => self.failures.expect(i, call, rc, ebadf),
            None => {
                if let Some(want) = want_ok {
                    self.failures.expect(i, call, rc, want);
                }
            }
        }
    }

    fn op_stats(&mut self, i: u64) {
        let (c, _) = self.cache();
        let mut out = vec![b'X'; 8192];
        let len = match self.rng.below(4) {
            0 => 0,
            1 => self.rng.below(64),
            _ => out.len(),
        };
        let buf: *mut c_char = if self.rng.chance(20) { ptr::null_mut() } else { out.as_mut_ptr().cast() };
        // SAFETY: `c` NULL or live; `buf` NULL or valid for `len` bytes.
        let rc = unsafe { capi::wbc_stats_json(c, buf, len) };
        self.failures.check(i, &format!("wbc_stats_json({c:?}, {len})"), "wbc_stats_json", rc);
        if c.is_null() {
            self.failures.expect(i, "wbc_stats_json(NULL)", rc, -i64::from(libc::EINVAL));
        } else if rc >= 0 {
            let n = rc as usize;
            if !buf.is_null() && len > n {
                let ok = out[n] == 0 && out[0] == b'{' && std::str::from_utf8(&out[..n]).is_ok();
                if !ok {
                    self.failures
                        .found
                        .push(format!("seed {} iteration {i}: stats JSON malformed", self.failures.seed));
                }
            } else if out.iter().any(|&b| b != b'X') {
                self.failures
                    .found
                    .push(format!("seed {} iteration {i}: stats written to a short buffer", self.failures.seed));
            }
        }
    }

    fn finish(&mut self, i: u64) {
        for live in self.files.drain(..) {
            // SAFETY: live handles, each closed once.
            assert_eq!(unsafe { capi::wbc_close(live.f) }, 0);
        }
        for slot in &mut self.caches {
            if !slot.c.is_null() {
                // SAFETY: a live handle, closed once.
                let rc = i64::from(unsafe { capi::wbc_cache_close(slot.c) });
                slot.c = ptr::null_mut();
                self.failures.check(i, "final wbc_cache_close", "wbc_cache_close", rc);
            }
        }
    }
}

/// One fuzzer at a time: the panic counter is process-wide.
static C_ABI: Mutex<()> = Mutex::new(());

fn fuzz_c_abi(seed: u64, default_iterations: u64, time: Duration) {
    let _one = C_ABI.lock().unwrap_or_else(|e| e.into_inner());
    count_panics();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let dir = TempDir::new("fuzz-capi");
    let device = fuzz_loop_device();
    let (iterations, time) = budget(default_iterations, time);
    let mut fz = Fuzzer {
        rng: Rng::new(seed),
        failures: Failures { seed, found: Vec::new(), seen: Default::default() },
        caches: Vec::new(),
        files: Vec::new(),
        buf: vec![0u8; BUF_BYTES],
        back: vec![0u8; BUF_BYTES],
        dir: dir.0.clone(),
        device: device.as_ref().map(|d| d.device.clone()),
        next_cache: 0,
    };
    for options in CACHE_OPTIONS {
        fz.open_cache(options);
    }
    let started = Instant::now();
    let mut done = 0;
    for i in 0..iterations {
        if time.is_some_and(|t| started.elapsed() > t) {
            break;
        }
        fz.step(i);
        done += 1;
        if fz.failures.found.len() > 20 {
            break;
        }
    }
    fz.finish(done);
    report_rate("C ABI", seed, done, started);
    eprintln!("fuzz C ABI: loop device {}", if device.is_some() { "fuzzed" } else { "not available" });
    for ((function, outcome), n) in &fz.failures.seen {
        eprintln!("fuzz C ABI:   {function}: {outcome}: {n}");
    }
    let panics = PANICS.load(Ordering::SeqCst) - panics_before;
    let found = &fz.failures.found;
    let unique: HashSet<&String> = found.iter().collect();
    assert!(panics == 0 && found.is_empty(), "{panics} panic(s); {} failure(s):\n{}", unique.len(), found.join("\n"));
}

#[test]
fn c_abi_calls_never_panic_and_fail_with_documented_errnos() {
    fuzz_c_abi(seed(), 20_000, Duration::from_secs(4));
}

/// The grammar's size keys are keys the library has (a renamed or removed
/// option must not leave the fuzzer generating values for nothing).
#[test]
fn size_keys_are_option_keys() {
    for key in SIZE_KEYS {
        assert!(KEYS.contains(key), "{key} is no option key of the library");
    }
}
