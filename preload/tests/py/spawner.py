"""The lifetime test's program that starts others (preload/tests/preload/lifetime.rs).

Appends pattern(70000, 91 + k) to FILE (kept open, never synced: dirty in
the cache), then starts `cat FILE`, for k = 0, 1, 2, each time another
way: subprocess.run (Python's vfork and exec), subprocess.run with
close_fds=False (posix_spawn where Python uses it), os.posix_spawn. Each
cat runs without the preload (it reads the file through the kernel) and
must print every byte written so far. The parent's cache must survive
them all: it then appends pattern(1000, 82) to FILE and writes
pattern(3000, 83) to a new file FILE.2.

Usage: spawner.py FILE CAT
"""

import os
import subprocess
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


def spawned(cat, path, env):
    """cat's output, started with os.posix_spawn."""
    read_end, write_end = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, write_end, 1), (os.POSIX_SPAWN_CLOSE, read_end)]
    pid = os.posix_spawn(cat, [cat, path], env, file_actions=actions)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 1 << 16):
        chunks.append(chunk)
    os.close(read_end)
    assert os.waitpid(pid, 0)[1] == 0, "cat failed"
    return b"".join(chunks)


def main():
    path, cat = sys.argv[1], sys.argv[2]
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    ways = {
        "subprocess": lambda: subprocess.run([cat, path], capture_output=True, env=env, check=True).stdout,
        "subprocess close_fds=False": lambda: subprocess.run(
            [cat, path], capture_output=True, env=env, check=True, close_fds=False
        ).stdout,
        "posix_spawn": lambda: spawned(cat, path, env),
    }
    written = b""
    for k, (how, start) in enumerate(ways.items()):
        chunk = pattern(70_000, 91 + k)
        assert os.write(fd, chunk) == len(chunk)
        written += chunk
        got = start()
        assert got == written, "%s: cat read %d bytes, not the %d written" % (how, len(got), len(written))
    assert os.write(fd, pattern(1000, 82)) == 1000
    other = os.open(path + ".2", os.O_WRONLY | os.O_CREAT, 0o644)
    assert os.write(other, pattern(3000, 83)) == 3000
    print("ok")


main()
