"""The process-crash test's program (preload/tests/process_crash.rs).

It never syncs: what survives its SIGKILL is what the cache's guardian
(or, without the library, the kernel's page cache) keeps. After each
acknowledged step it prints "acked N" with one write (a kill cannot cut
the line), then goes on until killed.

  crasher.py append FILE       appends records (O_APPEND, one os.write
                               each), N the last record written
  crasher.py model FILE SEED   random pwrite/ftruncate steps from SEED,
                               N the last step done

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


if sys.argv[1] == "append":
    append(sys.argv[2])
else:
    model(sys.argv[2], int(sys.argv[3]))
