//! Python under the preload: buffered `open()` writes and reads, and the
//! `os` module's descriptor calls (`os.open`, `pwrite`/`pread`, `fsync`,
//! `ftruncate`, `lseek` with `SEEK_DATA`/`SEEK_HOLE`, `dup`/`dup2`
//! sharing the position, `fstat`/`stat` sizes while the data is dirty,
//! `writev`/`pwritev`/`preadv`, `fcntl(F_SETFL)`, a shared writable
//! `mmap`, `rename`, `truncate`, `unlink`). The script (`py/calls.py`)
//! asserts what the program itself sees; the test then reads every file
//! it left from disk, unpreloaded, and checks them byte for byte against
//! expectations computed here. Also: threads appending through
//! descriptors of their own lose no record; a managed descriptor closed
//! behind the library's back (stdio's `fclose`) or by `os.closerange`
//! (`close_range`) does not leave its number haunted by the old file.

use crate::common;

use common::{assert_file, pattern, preloaded, python, run, Scratch, MIB, OPTIONS, TIMEOUT};

const SCRIPT: &str = include_str!("../py/calls.py");

#[test]
fn python_file_calls_through_the_cache() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("python-calls");
    let managed = scratch.dir("managed");
    let script = scratch.script("calls.py", SCRIPT);
    let mut cmd = preloaded(python, &[&managed], OPTIONS);
    cmd.arg(script).arg(&managed);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(out.stdout.trim(), "ok", "{}", out.details());

    let mut buffered = pattern(3 * MIB + 17, 10);
    buffered.extend_from_slice(&pattern(1000, 11));
    assert_file(&managed.join("buffered"), &buffered);

    let mut renamed = pattern(5000, 20);
    renamed[100..107].copy_from_slice(b"xyzdup2");
    renamed.resize(MIB, 0);
    renamed.extend_from_slice(&pattern(3000, 21)[..1000]);
    assert_file(&managed.join("renamed"), &renamed);

    assert_file(&managed.join("vectored"), b"012345678901234567890123456789abc");
    let mut mapped = b"HELLO world".to_vec();
    mapped.extend_from_slice(&b"hello world".repeat(999));
    mapped.extend_from_slice(b"tail");
    assert_file(&managed.join("mapped"), &mapped);
    assert_file(&managed.join("mapped-append"), b"0123456789ab");
    for gone in ["gone", "positioned"] {
        assert!(!managed.join(gone).exists(), "{gone} is still there");
    }
}

/// A managed descriptor closed where the library cannot see it (stdio's
/// `fclose` of an `fdopen`ed descriptor closes it inside the C library):
/// when the kernel hands its number out again, for a file the cache does
/// not manage, that file's reads and writes must reach that file, not the
/// old one's cache; and the old file's lock must be given up.
#[test]
fn a_number_closed_behind_the_library_is_not_haunted() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("python-haunted");
    let (managed, plain_dir) = (scratch.dir("managed"), scratch.dir("plain"));
    let (cached, other) = (managed.join("cached"), plain_dir.join("other"));
    std::fs::write(&cached, b"managed file").unwrap();
    std::fs::write(&other, b"plain file").unwrap();
    let code = "import ctypes, os, sys\n\
                libc = ctypes.CDLL(None)\n\
                libc.fdopen.restype = ctypes.c_void_p\n\
                libc.fclose.argtypes = [ctypes.c_void_p]\n\
                fd = os.open(sys.argv[1], os.O_RDWR)\n\
                libc.fclose(libc.fdopen(fd, b'r+'))\n\
                again = os.open(sys.argv[2], os.O_RDWR)\n\
                assert again == fd, (fd, again)\n\
                print(os.read(again, 100).decode())\n\
                os.write(again, b' written')\n\
                import subprocess\n\
                probe = 'import os, sys; os.open(sys.argv[1], os.O_RDWR); print(42)'\n\
                r = subprocess.run([sys.executable, '-c', probe, sys.argv[1]], capture_output=True, text=True)\n\
                print(r.stdout.strip() or r.stderr.strip())\n";
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(&cached).arg(&other);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    // Then another process (preloaded too) may cache the old file.
    assert_eq!(out.stdout.trim(), "plain file\n42", "{}", out.details());
    assert_file(&other, b"plain file written");
    assert_file(&cached, b"managed file");
}

/// Four threads append 100-byte records to one file, each through a
/// descriptor of its own opened with `O_APPEND`: as with the kernel, no
/// record may overwrite another or be torn.
#[test]
fn threads_appending_to_one_file_lose_nothing() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("python-appends");
    let managed = scratch.dir("managed");
    let log = managed.join("log");
    let code = "import os, sys, threading\n\
                def worker(k):\n\
                \x20   fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\n\
                \x20   for i in range(3000):\n\
                \x20       assert os.write(fd, (b'%d:%05d:' % (k, i)).ljust(99, b'.') + b'\\n') == 100\n\
                \x20   os.close(fd)\n\
                threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]\n\
                [t.start() for t in threads]\n\
                [t.join() for t in threads]\n";
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(&log);
    run(cmd, TIMEOUT).ok().no_complaints(&[]);
    let data = std::fs::read(&log).unwrap();
    assert_eq!(data.len(), 4 * 3000 * 100, "the log's size");
    let mut records: Vec<&[u8]> = data.chunks(100).collect();
    records.sort();
    let mut expected: Vec<Vec<u8>> =
        (0..4).flat_map(|k| (0..3000).map(move |i| format!("{k}:{i:05}:{}\n", ".".repeat(91)).into_bytes())).collect();
    expected.sort();
    assert!(records.iter().zip(&expected).all(|(a, b)| a == b), "a record is torn, lost or doubled");
}

/// `os.closerange` (the C library's `close_range`) closes managed
/// descriptors as `close` does: their data written back, their locks
/// given up (another preloaded process may cache the file), and their
/// numbers, reused by a socket, the socket's.
#[test]
fn descriptors_closed_by_closerange_are_released() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("python-closerange");
    let managed = scratch.dir("managed");
    let file = managed.join("file");
    let code = "import os, socket, subprocess, sys\n\
                fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n\
                os.write(fd, b'closed by closerange')\n\
                os.closerange(fd, fd + 1)\n\
                a, b = socket.socketpair()\n\
                b.settimeout(10)\n\
                assert a.fileno() == fd, (fd, a.fileno())\n\
                os.write(a.fileno(), b'over the socket')\n\
                print(b.recv(100).decode())\n\
                probe = 'import os, sys; os.open(sys.argv[1], os.O_RDWR); print(42)'\n\
                r = subprocess.run([sys.executable, '-c', probe, sys.argv[1]], capture_output=True, text=True)\n\
                print(r.stdout.strip() or r.stderr.strip())\n";
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(&file);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(out.stdout.trim(), "over the socket\n42", "{}", out.details());
    assert_file(&file, b"closed by closerange");
}

/// `wbcache_preload_stats_json`, the one call the library adds: the
/// cache's statistics (Python names paths at startup: the cache is built
/// before the script runs), whose dirty
/// bytes count what was written and not yet synced; a short buffer gets
/// a NUL-terminated prefix and the full length, as `snprintf` gives.
#[test]
fn the_preloaded_cache_answers_its_statistics() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("python-stats");
    let managed = scratch.dir("managed");
    let script = scratch.script(
        "stats.py",
        r#"
import ctypes, json, os, sys
lib = ctypes.CDLL(None, use_errno=True)
stats = lib.wbcache_preload_stats_json
stats.restype = ctypes.c_ssize_t
stats.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
buf = ctypes.create_string_buffer(1 << 16)
fd = os.open(os.path.join(sys.argv[1], "f"), os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"x" * 8192, 0)
n = stats(buf, len(buf))
assert 0 < n < len(buf), n
s = json.loads(buf.value[:n])
assert s["dirty_bytes"] == 8192, s["dirty_bytes"]
assert s["capacity_bytes"] == 64 << 20, s["capacity_bytes"]
small = ctypes.create_string_buffer(8)
assert stats(small, 8) == n and small.raw == buf.raw[:7] + b"\0", small.raw
assert stats(None, 0) == n
os.fsync(fd)
n = stats(buf, len(buf))
s = json.loads(buf.value[:n])
assert s["dirty_bytes"] == 0 and s["fsyncs"] >= 1, s
os.close(fd)
print("ok")
"#,
    );
    let mut cmd = preloaded(python, &[&managed], "capacity=64M");
    cmd.arg(script).arg(&managed);
    let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_eq!(out.stdout.trim(), "ok", "{}", out.details());
    assert_file(&managed.join("f"), &[b'x'; 8192]);
}

/// `WBCACHE_STATS=FILE`: at exit, after the last write-back, the cache's
/// statistics appended to FILE as one JSON line per process; a file under
/// a managed directory is written by the kernel, never cached.
#[test]
fn statistics_are_appended_at_exit() {
    let Some(python) = python() else { return };
    let scratch = Scratch::new("python-stats-exit");
    let managed = scratch.dir("managed");
    let stats = managed.join("stats.jsonl");
    let code = "import os, sys\n\
                fd = os.open(os.path.join(sys.argv[1], 'f'), os.O_RDWR | os.O_CREAT, 0o644)\n\
                os.pwrite(fd, b'y' * 5000, 0)\n";
    for round in 1..=2 {
        let mut cmd = preloaded(&python, &[&managed], OPTIONS);
        cmd.env("WBCACHE_STATS", &stats).arg("-c").arg(code).arg(&managed);
        run(cmd, TIMEOUT).ok().no_complaints(&[]);
        let text = std::fs::read_to_string(&stats).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), round, "one line per process:\n{text}");
        let last = lines[round - 1];
        assert!(last.starts_with('{') && last.ends_with('}'), "{last}");
        assert!(last.contains("\"dirty_bytes\":0,"), "written back before the statistics: {last}");
        assert!(last.contains("\"open_inodes\":"), "{last}");
    }
    assert_file(&managed.join("f"), &[b'y'; 5000]);
}
