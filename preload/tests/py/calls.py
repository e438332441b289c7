"""Python's file calls on a managed directory (preload/tests/preload/python_calls.rs).

Checks what it can see itself (with assert: a failure exits non-zero
naming the check), and leaves files whose bytes the test then reads:
  buffered  pattern(3 MiB + 17, 10) + pattern(1000, 11)
  renamed   pattern(5000, 20) with b"xyz" at 100 and b"dup2" at 103,
            zeros to 1 MiB, then pattern(3000, 21)[:1000]
  vectored  b"0123456789" * 3 + b"abc"
  mapped    b"HELLO world" + b"hello world" * 999 + b"tail"
  mapped-append  b"0123456789ab"
and no file named "gone" or "positioned".

Usage: calls.py DIRECTORY
"""

import ctypes
import errno
import fcntl
import json
import mmap
import os
import sys

MASK = (1 << 64) - 1
MIB = 1 << 20


def pattern(n, seed):
    """preload/tests/common's pattern(), byte for byte."""
    rot = ((seed << 17) | (seed >> 47)) & MASK
    words = []
    for i in range((n + 7) // 8):
        x = ((i ^ rot) * 0x9E3779B97F4A7C15) & MASK
        x ^= x >> 29
        words.append(x.to_bytes(8, "little"))
    return b"".join(words)[:n]


def stats():
    """The preloaded library's statistics (wbcache_preload_stats_json, the
    one call it adds: without the library there is none)."""
    call = getattr(ctypes.CDLL(None), "wbcache_preload_stats_json", None)
    assert call is not None, "the library is not preloaded"
    call.restype = ctypes.c_ssize_t
    call.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    buf = ctypes.create_string_buffer(1 << 16)
    n = call(buf, len(buf))
    assert 0 < n < len(buf), n
    return json.loads(buf.value[:n])


def interposed(path):
    """Proof that the calls of this process on `path` reach the library:
    a read of it is counted by the cache (a hit or a miss)."""
    before = stats()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert len(os.pread(fd, 4096, 0)) == 4096
    finally:
        os.close(fd)
    after = stats()
    assert after["hits"] + after["misses"] > before["hits"] + before["misses"], "a read not served by the cache"


def buffered(d):
    path = os.path.join(d, "buffered")
    data = pattern(3 * MIB + 17, 10)
    with open(path, "wb") as f:
        for at in range(0, len(data), 100_000):
            f.write(data[at : at + 100_000])
    interposed(path)
    with open(path, "ab") as f:
        f.write(pattern(1000, 11))
    with open(path, "rb") as f:
        assert f.read() == data + pattern(1000, 11), "buffered read back"
        f.seek(MIB)
        assert f.read(10) == data[MIB : MIB + 10], "buffered seek"


def seeks(fd, size):
    assert os.lseek(fd, 0, os.SEEK_END) == size
    assert os.lseek(fd, -10, os.SEEK_CUR) == size - 10
    # Where the holes are is the file system's to say; a legal answer is
    # at or after the offset, data before the end, a hole at most at it.
    for off in (0, 4000, 6000, MIB - 1, MIB):
        data = os.lseek(fd, off, os.SEEK_DATA)
        assert off <= data < size, (off, data)
        assert os.lseek(fd, 0, os.SEEK_CUR) == data
        hole = os.lseek(fd, off, os.SEEK_HOLE)
        assert off <= hole <= size, (off, hole)
    for whence in (os.SEEK_DATA, os.SEEK_HOLE):
        try:
            os.lseek(fd, size, whence)
            raise AssertionError("SEEK_DATA/SEEK_HOLE at the end")
        except OSError as e:
            assert e.errno == errno.ENXIO, e


def duplicates(fd):
    """dup and dup2 share the description: one position."""
    other = os.dup(fd)
    os.lseek(fd, 100, os.SEEK_SET)
    assert os.lseek(other, 0, os.SEEK_CUR) == 100
    assert os.write(other, b"xyz") == 3
    assert os.lseek(fd, 0, os.SEEK_CUR) == 103
    assert os.dup2(fd, 60) == 60
    assert os.write(60, b"dup2") == 4
    assert os.lseek(other, 0, os.SEEK_CUR) == 107
    os.close(other)
    os.close(60)


def positioned(d):
    path = os.path.join(d, "positioned")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    first, second = pattern(5000, 20), pattern(3000, 21)
    assert os.pwrite(fd, first, 0) == 5000
    assert os.pwrite(fd, second, MIB) == 3000
    size = MIB + 3000
    # Dirty, not yet written back: the sizes are the cache's.
    assert os.fstat(fd).st_size == size
    assert os.stat(path).st_size == size
    assert os.pread(fd, 6000, 0) == first + bytes(1000)
    assert os.pread(fd, 5000, MIB - 1000) == bytes(1000) + second
    assert os.pread(fd, 10, size) == b""
    seeks(fd, size)
    duplicates(fd)
    os.ftruncate(fd, MIB + 1000)
    assert os.fstat(fd).st_size == MIB + 1000
    assert os.pread(fd, 2000, MIB) == second[:1000]
    os.fsync(fd)
    os.close(fd)
    os.rename(path, os.path.join(d, "renamed"))
    assert not os.path.exists(path)


def vectored(d):
    path = os.path.join(d, "vectored")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    assert os.writev(fd, [b"0123456789", b"0123456789"]) == 20
    assert os.pwritev(fd, [b"0123", b"456789"], 0) == 10  # O_APPEND: at the end
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
    assert os.pwrite(fd, b"abc", 30) == 3
    bufs = [bytearray(5), bytearray(28)]
    assert os.preadv(fd, bufs, 0) == 33
    assert bytes(bufs[0] + bufs[1]) == b"0123456789" * 3 + b"abc"
    os.fdatasync(fd)
    os.close(fd)


def mapped(d):
    """A shared writable mapping hands the file to the kernel: the
    mapping sees what was written, and the descriptor goes on at its
    position and with its O_APPEND."""
    path = os.path.join(d, "mapped")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    assert os.write(fd, b"hello world" * 1000) == 11000
    m = mmap.mmap(fd, 4096)
    assert m[:11] == b"hello world"
    m[0:5] = b"HELLO"
    m.close()
    assert os.pread(fd, 11, 0) == b"HELLO world"
    assert os.write(fd, b"tail") == 4  # at the position: 11000
    os.close(fd)
    fd = os.open(os.path.join(d, "mapped-append"), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    assert os.write(fd, b"0123456789") == 10
    mmap.mmap(fd, 10).close()
    assert os.pwrite(fd, b"ab", 0) == 2  # O_APPEND: at the end, as before
    os.close(fd)


def removed(d):
    path = os.path.join(d, "gone")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, pattern(100_000, 30))
    os.close(fd)
    os.truncate(path, 10)
    assert os.stat(path).st_size == 10
    os.unlink(path)
    assert not os.path.exists(path)


def main():
    d = sys.argv[1]
    buffered(d)
    positioned(d)
    vectored(d)
    mapped(d)
    removed(d)
    print("ok")


main()
