"""The process-crash test's program (preload/tests/preload/process_crash.rs).

It never syncs: what survives its SIGKILL is what the cache's guardian
(or, without the library, the kernel's page cache) keeps. After each
acknowledged step it prints "acked N" with one write (a kill cannot cut
the line), then goes on until killed.

  crasher.py append FILE       appends records (O_APPEND, one os.write
                               each), N the last record written
  crasher.py model FILE SEED   random pwrite/ftruncate steps from SEED,
                               N the last step done
  crasher.py sqlite FILE       SQLite (Python's sqlite3) in WAL mode with
                               synchronous=NORMAL: transaction N inserts
                               row N and sets the counter to N
  crasher.py fill DIR          rewrites DIR/b (1 MiB, which exists) with
                               bytes 0xbb, prints "acked 0", writes 8 MiB
                               of 0xaa to DIR/a, prints "acked 1", sleeps
  crasher.py bulk FILE         writes 32 MiB (MiB i all bytes 1 + i),
                               prints "acked 0", sleeps
  crasher.py verify FILE       once a line arrives on standard input,
                               reads FILE and prints "size S" and
                               "bad B" (MiB blocks not as bulk wrote them)
  crasher.py check FILE        (run without the library) prints
                               "integrity ok|...", "rows R", "counter C",
                               "bad B" (rows whose payload is wrong)

Record i: b"record %08d %06d\\n" % (i, n), then n bytes of (i % 251),
then b"\\n", with n = 1 + i * 7919 % 3000.

Model steps come from xorshift64 on SEED (the test computes the same):
r = next(); r % 10 == 0 truncates to next() % (1 << 20) + ...; otherwise
pwrite at next() % (1 << 20) of 1 + next() % 16384 bytes, all equal to
1 + step % 251.
"""

import os
import sys

MASK = (1 << 64) - 1
SPAN = 1 << 20


def record(i):
    n = 1 + i * 7919 % 3000
    return b"record %08d %06d\n" % (i, n) + bytes([i % 251]) * n + b"\n"


def xorshift(seed):
    s = seed or 1
    while True:
        s ^= (s << 13) & MASK
        s ^= s >> 7
        s ^= (s << 17) & MASK
        yield s


def ack(n):
    os.write(1, b"acked %d\n" % n)


def append(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    i = 0
    while True:
        data = record(i)
        assert os.write(fd, data) == len(data)
        if i % 16 == 15:
            ack(i)
        i += 1


def model(path, seed):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    rng = xorshift(seed)
    step = 0
    while True:
        if next(rng) % 10 == 0:
            os.ftruncate(fd, next(rng) % (SPAN + SPAN // 4))
        else:
            offset = next(rng) % SPAN
            length = 1 + next(rng) % 16384
            assert os.pwrite(fd, bytes([1 + step % 251]) * length, offset) == length
        ack(step)
        step += 1


def bulk(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(32):
        assert os.pwrite(fd, bytes([1 + i]) * (1 << 20), i << 20) == 1 << 20
    ack(0)
    while True:
        __import__("time").sleep(3600)


def verify(path):
    sys.stdin.readline()  # started ahead, opens when told
    with open(path, "rb") as f:
        data = f.read()
    print("size", len(data))
    print("bad", sum(1 for i in range(32) if data[i << 20:(i + 1) << 20] != bytes([1 + i]) * (1 << 20)))


def payload(n):
    return bytes([n % 251]) * (100 + n * 37 % 3000)


def sqlite(path):
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS rows(n INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS counter(id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    db.execute("INSERT OR IGNORE INTO counter VALUES (0, -1)")
    n = 0
    while True:
        db.execute("BEGIN")
        db.execute("INSERT INTO rows VALUES (?, ?)", (n, payload(n)))
        db.execute("UPDATE counter SET n = ? WHERE id = 0", (n,))
        db.execute("COMMIT")
        ack(n)
        n += 1


def check(path):
    import sqlite3

    db = sqlite3.connect(path)
    print("integrity", db.execute("PRAGMA integrity_check").fetchone()[0])
    print("rows", db.execute("SELECT count(*) FROM rows").fetchone()[0])
    print("counter", db.execute("SELECT n FROM counter WHERE id = 0").fetchone()[0])
    bad = sum(1 for n, p in db.execute("SELECT n, payload FROM rows") if p != payload(n))
    print("bad", bad)


def fill(directory):
    b = os.open(os.path.join(directory, "b"), os.O_WRONLY)
    assert os.pwrite(b, b"\xbb" * (1 << 20), 0) == 1 << 20
    ack(0)
    a = os.open(os.path.join(directory, "a"), os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(8):
        assert os.pwrite(a, b"\xaa" * (1 << 20), i << 20) == 1 << 20
    ack(1)
    while True:
        os.read(0, 1) or __import__("time").sleep(3600)


if sys.argv[1] == "append":
    append(sys.argv[2])
elif sys.argv[1] == "sqlite":
    sqlite(sys.argv[2])
elif sys.argv[1] == "bulk":
    bulk(sys.argv[2])
elif sys.argv[1] == "verify":
    verify(sys.argv[2])
elif sys.argv[1] == "fill":
    fill(sys.argv[2])
elif sys.argv[1] == "check":
    check(sys.argv[2])
else:
    model(sys.argv[2], int(sys.argv[3]))
