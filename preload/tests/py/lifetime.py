"""The lifetime test's Python program (preload/tests/preload/lifetime.rs).

Writes LEN bytes of pattern(LEN, 77) to FILE with os.write, never
syncing and never closing, then ends the way MODE says:
  end        the script's end (normal exit)
  sys.exit   sys.exit(3)
  os._exit   os._exit(0) (the C library's _exit)
  execv      os.execv(PROGRAM, [PROGRAM, ARGS...])
  fork       a forked child reads the file (through the descriptor it
             inherited and through one it opens) and must find the data;
             then the parent appends pattern(1000, 78) and ends normally.

Usage: lifetime.py MODE FILE LEN [PROGRAM ARGS...]
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


def read_all(fd):
    chunks, at = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, at)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        at += len(chunk)


def forked(path, fd, data):
    pid = os.fork()
    if pid == 0:
        other = os.open(path, os.O_RDONLY)
        ok = read_all(fd) == data and read_all(other) == data
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit("the forked child did not find what its parent wrote before the fork")
    os.write(fd, pattern(1000, 78))


def main():
    mode, path, length = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    data = pattern(length, 77)
    for at in range(0, length, 1 << 16):
        os.write(fd, data[at : at + (1 << 16)])
    if mode == "sys.exit":
        sys.exit(3)
    elif mode == "os._exit":
        os._exit(0)
    elif mode == "execv":
        os.execv(sys.argv[4], sys.argv[4:])
    elif mode == "fork":
        forked(path, fd, data)
    elif mode != "end":
        sys.exit("unknown mode " + mode)


main()
