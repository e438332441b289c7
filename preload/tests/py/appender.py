"""The SIGKILL test's program (preload/tests/preload/sigkill.rs).

Appends records to a file (O_APPEND, each record in two writes), in
batches of one to five; after each batch it syncs (fsync and fdatasync by
turns) and prints "acked N", N the last record of the batch, which from
then on must survive anything, SIGKILL included. It runs until killed.

Record i: b"record %08d %06d\\n" % (i, n), then pattern(n, i), then b"\\n",
with n = 1 + i * 7919 % 6000 (so records straddle 4 KiB blocks and the
cache's folios).

Usage: appender.py FILE
"""

import os
import sys

MASK = (1 << 64) - 1


def pattern(n, seed):
    """preload/tests/common's pattern(), byte for byte."""
    rot = ((seed << 17) | (seed >> 47)) & MASK
    words = []
    for i in range((n + 7) // 8):
        x = ((i ^ rot) * 0x9E3779B97F4A7C15) & MASK
        x ^= x >> 29
        words.append(x.to_bytes(8, "little"))
    return b"".join(words)[:n]


def record(i):
    n = 1 + i * 7919 % 6000
    return b"record %08d %06d\n" % (i, n) + pattern(n, i) + b"\n"


def main():
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    i = 0
    while True:
        for _ in range(1 + i % 5):
            data = record(i)
            half = len(data) // 2
            assert os.write(fd, data[:half]) == half
            assert os.write(fd, data[half:]) == len(data) - half
            i += 1
        if i % 2:
            os.fsync(fd)
        else:
            os.fdatasync(fd)
        # One write: a kill cannot cut the line (print() may write it in
        # pieces, e.g. under PYTHONUNBUFFERED).
        os.write(1, b"acked %d\n" % (i - 1))


main()
