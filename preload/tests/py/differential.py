"""The differential test's driver (preload/tests/preload/differential.rs).

Runs a seeded random sequence of file calls on a few files in one
directory and writes one JSON line per call: its name, its arguments and
its result (the return value, a digest of the bytes read, or the errno).
The test runs it twice with one seed, once under libwbcache_preload.so on
a managed directory and once on a plain one, and compares the two records
call by call, then the files' bytes. Nothing here depends on the results
of earlier calls except through the driver's own bookkeeping (which slots
are open) and, to skip an overlapping sendfile within one file, the
files' identities, sizes and positions: two runs of one seed make the
same calls until their results differ.

Usage: differential.py SEED DIRECTORY CALLS OUTPUT [--expect-cached]
(--expect-cached: first check that this process's calls on the directory
reach the library: a probe file written there is in the library's cache,
as its statistics, wbcache_preload_stats_json, show.)
"""

import ctypes
import errno
import hashlib
import json
import os
import random
import sys

FILES = ["a", "b", "c"]
SLOTS = 6
# dup2 targets: descriptor numbers well above what the driver and the
# cache open on their own.
DUP2_TARGETS = [70, 71, 72]
SEEK_NAMES = {os.SEEK_SET: "set", os.SEEK_CUR: "cur", os.SEEK_END: "end", os.SEEK_DATA: "data", os.SEEK_HOLE: "hole"}
# ctypes on the process's global scope (dlopen(NULL)), so that a call
# reaches the preloaded library first, as a C program's would.
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.preadv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_long]
LIBC.pwritev.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_long]
LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
LIBC.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long, ctypes.c_uint]
LIBC.readahead.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_size_t]
LIBC.readahead.restype = ctypes.c_ssize_t


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def digest(data):
    return [len(data), hashlib.blake2b(bytes(data), digest_size=8).hexdigest()]


def c_call(result):
    """A ctypes call's result as os calls give it: the value, or OSError."""
    if result < 0:
        raise OSError(ctypes.get_errno(), "c call")
    return result


class Driver:
    def __init__(self, seed, root, out):
        self.rng = random.Random(seed)
        self.root = root
        self.out = out
        self.slots = {}  # slot -> [fd, file name]
        self.on = None

    # -- arguments -------------------------------------------------------

    def offset(self, huge=True):
        """An offset: mostly in the first 300 KB, some past 1 MiB, a few
        negative and (`huge`) a few near the largest offset."""
        r = self.rng.random()
        if r < 0.01 and huge:
            return (1 << 63) - 1 - self.rng.randrange(0, 100_000)
        if r < 0.02:
            return self.rng.choice([-1, -4096])
        if r < 0.07:
            return self.rng.randrange(1 << 20, 3 << 20)
        if r < 0.5:
            return self.rng.randrange(0, 8192)
        return self.rng.randrange(0, 300_000)

    def size(self):
        r = self.rng.random()
        if r < 0.05:
            return 0
        if r < 0.7:
            return self.rng.randrange(1, 4200)
        if r < 0.97:
            return self.rng.randrange(1, 70_000)
        return self.rng.randrange(1, 400_000)

    def sizes(self):
        return [self.size() // 4 for _ in range(self.rng.randrange(1, 5))]

    def path(self, name):
        return os.path.join(self.root, name)

    # -- records ---------------------------------------------------------

    def record(self, op, args, call):
        """Makes the call and writes its record; `on` names the file of the
        slot the call is on (for a reader of a mismatch)."""
        entry = {"op": op, "args": args, "on": self.on}
        try:
            entry["ret"] = call()
        except OSError as e:
            entry["errno"] = e.errno
        self.out.write(json.dumps(entry) + "\n")

    def fd(self, slot):
        return self.slots[slot][0]

    # -- opening and closing ---------------------------------------------

    def open_flags(self):
        rng = self.rng
        flags = rng.choice([os.O_RDONLY, os.O_WRONLY, os.O_RDWR, os.O_RDWR, os.O_RDWR])
        if rng.random() < 0.8:
            flags |= os.O_CREAT
        if rng.random() < 0.08:
            flags |= os.O_TRUNC
        if rng.random() < 0.2:
            flags |= os.O_APPEND
        if rng.random() < 0.03:
            flags |= os.O_EXCL
        return flags

    def do_open(self, slot):
        if slot in self.slots:
            self.do_close(slot)
        name = self.rng.choice(FILES)
        flags = self.open_flags()

        def call():
            fd = os.open(self.path(name), flags, 0o644)
            self.slots[slot] = [fd, name]
            return "fd"

        self.record("open", [slot, name, flags], call)

    def do_close(self, slot):
        fd = self.slots.pop(slot)[0]
        self.record("close", [slot], lambda: os.close(fd))

    def free_slot(self):
        free = [s for s in range(SLOTS) if s not in self.slots]
        return self.rng.choice(free) if free else None

    def do_dup(self, slot):
        new = self.free_slot()
        if new is None:
            return

        def call():
            fd = os.dup(self.fd(slot))
            self.slots[new] = [fd, self.slots[slot][1]]
            return "fd"

        self.record("dup", [slot, new], call)

    def do_dup2(self, slot):
        target = self.rng.choice(DUP2_TARGETS)
        holder = [s for s, (fd, _) in self.slots.items() if fd == target]
        new = holder[0] if holder else self.free_slot()
        if new is None or new == slot:
            return

        inheritable = self.rng.random() < 0.5  # False: dup3 with O_CLOEXEC

        def call():
            ret = os.dup2(self.fd(slot), target, inheritable=inheritable)
            self.slots[new] = [target, self.slots[slot][1]]
            return ret

        self.record("dup2", [slot, target, inheritable], call)

    # -- reads and writes ------------------------------------------------

    def do_read(self, slot):
        n = self.size()
        self.record("read", [slot, n], lambda: digest(os.read(self.fd(slot), n)))

    def do_write(self, slot):
        data = self.rng.randbytes(self.size())
        self.record("write", [slot, len(data)], lambda: os.write(self.fd(slot), data))

    def do_pread(self, slot):
        n, off = self.size(), self.offset()
        self.record("pread", [slot, n, off], lambda: digest(os.pread(self.fd(slot), n, off)))

    def do_pwrite(self, slot):
        data, off = self.rng.randbytes(self.size()), self.offset()
        self.record("pwrite", [slot, len(data), off], lambda: os.pwrite(self.fd(slot), data, off))

    def do_readv(self, slot):
        bufs = [bytearray(n) for n in self.sizes()]
        self.record("readv", [slot, [len(b) for b in bufs]], lambda: [os.readv(self.fd(slot), bufs), digest(b"".join(bufs))])

    def do_writev(self, slot):
        datas = [self.rng.randbytes(n) for n in self.sizes()]
        self.record("writev", [slot, [len(d) for d in datas]], lambda: os.writev(self.fd(slot), datas))

    def rwf(self, write):
        """preadv2/pwritev2 flags (0 most often: Python then still calls preadv2)."""
        choices = [0, 0, 0, os.RWF_HIPRI] + ([os.RWF_DSYNC, os.RWF_SYNC, os.RWF_APPEND] if write else [])
        return self.rng.choice(choices)

    def do_preadv(self, slot):
        bufs = [bytearray(n) for n in self.sizes()]
        off, flags = self.rng.choice([self.offset(), -1]), self.rwf(False)
        args = [slot, [len(b) for b in bufs], off, flags]
        self.record("preadv2", args, lambda: [os.preadv(self.fd(slot), bufs, off, flags), digest(b"".join(bufs))])

    def do_pwritev(self, slot):
        datas = [self.rng.randbytes(n) for n in self.sizes()]
        off, flags = self.rng.choice([self.offset(), -1]), self.rwf(True)
        args = [slot, [len(d) for d in datas], off, flags]
        self.record("pwritev2", args, lambda: os.pwritev(self.fd(slot), datas, off, flags))

    def iovecs(self, bufs):
        arr = (Iovec * len(bufs))()
        for i, b in enumerate(bufs):
            arr[i].base = ctypes.cast(b, ctypes.c_void_p)
            arr[i].len = len(b)
        return arr

    def do_c_preadv(self, slot):
        """preadv itself (not preadv2), where -1 is an invalid offset."""
        bufs = [ctypes.create_string_buffer(n) for n in self.sizes()]
        off = self.offset()

        def call():
            n = c_call(LIBC.preadv(self.fd(slot), self.iovecs(bufs), len(bufs), off))
            return [n, digest(b"".join(b.raw for b in bufs))]

        self.record("preadv", [slot, [len(b) for b in bufs], off], call)

    def do_c_preadv_overlapping(self, slot):
        """preadv into iovecs that overlap in one buffer, as POSIX allows:
        they are filled in order, so a later one's bytes win."""
        size = self.rng.randint(2, 9000)
        buf = ctypes.create_string_buffer(size)
        base = ctypes.addressof(buf)
        iovs = []
        for _ in range(self.rng.randint(2, 4)):
            start = self.rng.randrange(size)
            iovs.append((start, self.rng.randint(0, size - start)))
        arr = (Iovec * len(iovs))()
        for i, (start, length) in enumerate(iovs):
            arr[i].base = ctypes.c_void_p(base + start)
            arr[i].len = length
        off = self.offset()

        def call():
            n = c_call(LIBC.preadv(self.fd(slot), arr, len(iovs), off))
            return [n, digest(buf.raw)]

        self.record("preadv-overlapping", [slot, iovs, off], call)

    def do_c_pwritev(self, slot):
        datas = [self.rng.randbytes(n) for n in self.sizes()]
        bufs = [ctypes.create_string_buffer(d, len(d)) for d in datas]
        off = self.offset()
        call = lambda: c_call(LIBC.pwritev(self.fd(slot), self.iovecs(bufs), len(bufs), off))
        self.record("pwritev", [slot, [len(d) for d in datas], off], call)

    # -- position, size, sync, advice --------------------------------------

    def do_lseek(self, slot):
        whence = self.rng.choice(list(SEEK_NAMES))
        # Near the largest offset too: Linux seeks no further than the file
        # system's largest file size (ext4: 16 TiB), which the preload asks.
        off = self.offset() if whence != os.SEEK_CUR else self.rng.randrange(-9000, 9000)
        if whence == os.SEEK_END:
            off = self.rng.randrange(-9000, 9000)
        if whence in (os.SEEK_DATA, os.SEEK_HOLE):
            self.record("lseek", [slot, off, SEEK_NAMES[whence]], lambda: self.seek_extent(slot, off, whence))
        else:
            self.record("lseek", [slot, off, SEEK_NAMES[whence]], lambda: os.lseek(self.fd(slot), off, whence))

    def seek_extent(self, slot, off, whence):
        """SEEK_DATA/SEEK_HOLE: where the holes are is the file system's to
        say (the cache reports none), so the answer is recorded as legal or
        not: the bytes it skips read as zeros, the position follows it;
        past the end, ENXIO. Then the position goes back to `off`, the same
        in both runs."""
        fd = self.fd(slot)
        size = os.fstat(fd).st_size
        try:
            got = os.lseek(fd, off, whence)
        except OSError as e:
            if e.errno != errno.ENXIO or off < 0:
                raise
            # SEEK_DATA in a hole that runs to the end is ENXIO too.
            zeros = whence == os.SEEK_DATA and 0 <= off < size and self.zeros(fd, off, size)
            if 0 <= off < size:
                os.lseek(fd, off, os.SEEK_SET)
            return "enxio" if off >= size else ["legal" if zeros else "illegal enxio", True]
        follows = os.lseek(fd, 0, os.SEEK_CUR) == got
        if whence == os.SEEK_DATA:
            legal = off <= got < size and self.zeros(fd, off, got)
        else:
            legal = off <= got <= size and (got == size or self.zeros(fd, got, got + 1))
        os.lseek(fd, off, os.SEEK_SET)
        return ["legal" if legal and follows else ["illegal", got, size], True]

    @staticmethod
    def zeros(fd, start, end):
        """Whether [start, end) reads as zeros (true when `fd` cannot read:
        a write-only descriptor's answer is checked by its range only)."""
        try:
            return os.pread(fd, end - start, start) == bytes(end - start)
        except OSError as e:
            if e.errno != errno.EBADF:
                raise
            return True

    def do_ftruncate(self, slot):
        length = self.offset()
        self.record("ftruncate", [slot, length], lambda: os.ftruncate(self.fd(slot), length))

    def do_truncate(self, _slot):
        name, length = self.rng.choice(FILES), self.offset()
        self.record("truncate", [name, length], lambda: os.truncate(self.path(name), length))

    def do_fsync(self, slot):
        self.record("fsync", [slot], lambda: os.fsync(self.fd(slot)))

    def do_fdatasync(self, slot):
        self.record("fdatasync", [slot], lambda: os.fdatasync(self.fd(slot)))

    def do_sync_file_range(self, slot):
        off, n, flags = self.offset(), self.size(), self.rng.choice([1, 2, 4, 7, 0, 8])
        call = lambda: c_call(LIBC.sync_file_range(self.fd(slot), off, n, flags))
        self.record("sync_file_range", [slot, off, n, flags], call)

    def do_fallocate(self, slot):
        off, n = self.offset(), self.size()
        if self.rng.random() < 0.5:
            self.record("posix_fallocate", [slot, off, n], lambda: os.posix_fallocate(self.fd(slot), off, n))
            return
        mode = self.rng.choice([0, 1, 3, 0x10, 0x11, 2])
        call = lambda: c_call(LIBC.fallocate(self.fd(slot), mode, off, n))
        self.record("fallocate", [slot, mode, off, n], call)

    def do_fadvise(self, slot):
        off, n, advice = self.offset(), self.size(), self.rng.choice([0, 1, 2, 3, 4, 5, 99])
        self.record("posix_fadvise", [slot, off, n, advice], lambda: os.posix_fadvise(self.fd(slot), off, n, advice))

    def do_readahead(self, slot):
        off, n = self.offset(), self.size()
        self.record("readahead", [slot, off, n], lambda: c_call(LIBC.readahead(self.fd(slot), off, n)))

    def do_fstat(self, slot):
        self.record("fstat", [slot], lambda: os.fstat(self.fd(slot)).st_size)

    def do_stat(self, _slot):
        name = self.rng.choice(FILES)
        self.record("stat", [name], lambda: os.stat(self.path(name)).st_size)

    def do_fcntl(self, slot):
        import fcntl

        fd = self.fd(slot)
        if self.rng.random() < 0.5:
            self.record("getfl", [slot], lambda: fcntl.fcntl(fd, fcntl.F_GETFL))
            return
        append = self.rng.random() < 0.5

        def call():
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            flags = flags | os.O_APPEND if append else flags & ~os.O_APPEND
            return fcntl.fcntl(fd, fcntl.F_SETFL, flags)

        self.record("setfl", [slot, append], call)

    # -- copies and names ------------------------------------------------

    def pick_offset(self):
        return None if self.rng.random() < 0.5 else self.offset(huge=False)

    def do_copy_file_range(self, slot):
        other = self.rng.choice(list(self.slots))
        n, src_off, dst_off = self.size(), self.pick_offset(), self.pick_offset()
        call = lambda: os.copy_file_range(self.fd(slot), self.fd(other), n, src_off, dst_off)
        args = [slot, other, self.slots[other][1], n, src_off, dst_off]
        self.record("copy_file_range", args, call)

    def do_sendfile(self, slot):
        other = self.rng.choice(list(self.slots))
        n, off = self.size(), self.pick_offset()
        if self.overlapping(slot, off, other, n):
            return
        self.record("sendfile", [other, self.slots[other][1], slot, off, n], lambda: os.sendfile(self.fd(other), self.fd(slot), off, n))

    def overlapping(self, src, off, dst, n):
        """Whether sendfile would write over what it reads: Linux splices
        the source's page cache pages themselves, so what it copies then
        depends on its chunking (not a result to compare)."""
        src_fd, dst_fd = self.fd(src), self.fd(dst)
        a, b = os.fstat(src_fd), os.fstat(dst_fd)
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            return False
        start = os.lseek(src_fd, 0, os.SEEK_CUR) if off is None else off
        at = os.lseek(dst_fd, 0, os.SEEK_CUR)
        return at < start + n and start < at + n

    def do_rename(self, _slot):
        src, dst = self.rng.choice(FILES), self.rng.choice(FILES)
        self.record("rename", [src, dst], lambda: os.rename(self.path(src), self.path(dst)))

    def do_unlink(self, _slot):
        name = self.rng.choice(FILES)
        self.record("unlink", [name], lambda: os.unlink(self.path(name)))

    def do_reopen_all(self, _slot):
        for slot in sorted(self.slots):
            self.do_close(slot)


# Each call with its weight; the slot is a random open one (or an open).
OPS = [
    (Driver.do_read, 8), (Driver.do_write, 8), (Driver.do_pread, 10), (Driver.do_pwrite, 10),
    (Driver.do_readv, 3), (Driver.do_writev, 3), (Driver.do_preadv, 3), (Driver.do_pwritev, 3),
    (Driver.do_c_preadv, 2), (Driver.do_c_preadv_overlapping, 1), (Driver.do_c_pwritev, 2), (Driver.do_lseek, 8), (Driver.do_ftruncate, 3),
    (Driver.do_truncate, 1), (Driver.do_fsync, 0.3), (Driver.do_fdatasync, 0.3), (Driver.do_sync_file_range, 1),
    (Driver.do_fallocate, 2), (Driver.do_fadvise, 2), (Driver.do_readahead, 1), (Driver.do_fstat, 4),
    (Driver.do_stat, 2), (Driver.do_fcntl, 2), (Driver.do_copy_file_range, 3), (Driver.do_sendfile, 2),
    (Driver.do_dup, 2), (Driver.do_dup2, 1), (Driver.do_close, 3), (Driver.do_open, 4),
    (Driver.do_rename, 0.5), (Driver.do_unlink, 0.5), (Driver.do_reopen_all, 0.2),
]


def stats():
    """The preloaded library's statistics (None without the library: the
    call is the one it adds)."""
    call = getattr(LIBC, "wbcache_preload_stats_json", None)
    if call is None:
        return None
    call.restype = ctypes.c_ssize_t
    call.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    buf = ctypes.create_string_buffer(1 << 16)
    n = call(buf, len(buf))
    assert 0 < n < len(buf), n
    return json.loads(buf.value[:n])


def expect_cached(root):
    path = os.path.join(root, "probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    assert os.write(fd, b"p" * 4096) == 4096
    s = stats()
    if s is None:
        sys.exit("the directory is not cached: the library is not preloaded")
    # Dirty, or (expire_ms=1) already written back but still cached.
    if s["dirty_bytes"] < 4096 and s["cached_bytes"] == 0:
        sys.exit("the directory is not cached: 4096 bytes written, dirty_bytes %d, cached_bytes %d"
                 % (s["dirty_bytes"], s["cached_bytes"]))
    os.close(fd)
    os.unlink(path)


def main():
    seed, root, calls, output = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if sys.argv[5:] == ["--expect-cached"]:
        expect_cached(root)
    funcs, weights = [f for f, _ in OPS], [w for _, w in OPS]
    with open(output, "w") as out:
        driver = Driver(seed, root, out)
        for _ in range(calls):
            op = driver.rng.choices(funcs, weights)[0]
            slot = driver.rng.randrange(SLOTS)
            driver.on = driver.slots[slot][1] if slot in driver.slots else None
            if slot not in driver.slots or op is Driver.do_open:
                driver.do_open(slot)
            else:
                op(driver, slot)
        driver.do_reopen_all(None)


main()
