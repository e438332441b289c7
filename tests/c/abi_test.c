/*
 * abi_test.c - exercises every function of include/wbcache.h from C.
 *
 * Usage: abi_test <empty temporary directory>
 * Prints one line per failed check and "N passed, M failed" at the end;
 * exits non-zero if any check failed.
 */
#define _GNU_SOURCE
#include "wbcache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The header's advice and flag values are the kernel's. */
_Static_assert(WBC_FADV_NORMAL == POSIX_FADV_NORMAL, "WBC_FADV_NORMAL");
_Static_assert(WBC_FADV_RANDOM == POSIX_FADV_RANDOM, "WBC_FADV_RANDOM");
_Static_assert(WBC_FADV_SEQUENTIAL == POSIX_FADV_SEQUENTIAL, "WBC_FADV_SEQUENTIAL");
_Static_assert(WBC_FADV_WILLNEED == POSIX_FADV_WILLNEED, "WBC_FADV_WILLNEED");
_Static_assert(WBC_FADV_DONTNEED == POSIX_FADV_DONTNEED, "WBC_FADV_DONTNEED");
_Static_assert(WBC_FADV_NOREUSE == POSIX_FADV_NOREUSE, "WBC_FADV_NOREUSE");
_Static_assert(WBC_SYNC_RANGE_WAIT_BEFORE == SYNC_FILE_RANGE_WAIT_BEFORE, "WBC_SYNC_RANGE_WAIT_BEFORE");
_Static_assert(WBC_SYNC_RANGE_WRITE == SYNC_FILE_RANGE_WRITE, "WBC_SYNC_RANGE_WRITE");
_Static_assert(WBC_SYNC_RANGE_WAIT_AFTER == SYNC_FILE_RANGE_WAIT_AFTER, "WBC_SYNC_RANGE_WAIT_AFTER");

static int passed, failed;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            passed++;                                                      \
        } else {                                                           \
            failed++;                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* CHECK that an integer expression equals an expected value. */
#define CHECK_EQ(expr, want, what)                                                     \
    do {                                                                               \
        long long got_ = (long long)(expr);                                            \
        long long want_ = (long long)(want);                                           \
        CHECK(got_ == want_, "%s: got %lld, want %lld", what, got_, want_);           \
    } while (0)

/* CHECK for an unrecoverable setup step: on failure, report and stop.
 * Evaluates cond exactly once (it is often a call that allocates). */
#define REQUIRE(cond, ...)                                                 \
    do {                                                                   \
        if (cond) {                                                        \
            passed++;                                                      \
        } else {                                                           \
            failed++;                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            printf("%d passed, %d failed (aborted)\n", passed, failed);    \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static char dir[2048];

static const char *path_in(char *buf, const char *name) {
    snprintf(buf, 4096, "%s/%s", dir, name);
    return buf;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed);
}

static const char *last_error(void) {
    static char msg[1024];
    msg[0] = 0;
    wbc_last_error(msg, sizeof msg);
    return msg;
}

/* Reads up to n bytes at off of path with plain read(2), past the cache;
 * returns the bytes read, or -1 if the file cannot be opened. */
static ssize_t read_disk(const char *path, void *buf, size_t n, off_t off) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    size_t got = 0;
    ssize_t r = 0;
    if (lseek(fd, off, SEEK_SET) == off)
        while (got < n && (r = read(fd, (char *)buf + got, n - got)) > 0) got += (size_t)r;
    close(fd);
    return (ssize_t)got;
}

static long long disk_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* The blocks of f's [off, off + len) whose wbc_residency bits include any
 * of bits; -1 if wbc_residency fails. */
static int64_t blocks_with(wbc_file *f, uint64_t off, uint64_t len, unsigned bits) {
    size_t n = (size_t)((off % 4096 + len + 4095) / 4096);
    unsigned char *vec = malloc(n + 1);
    int64_t filled = wbc_residency(f, off, len, vec), count = 0;
    for (int64_t i = 0; i < filled; i++) count += (vec[i] & bits) != 0;
    free(vec);
    return filled < 0 ? -1 : count;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Polls until all blocks of f's [off, off + len) are cached or timeout_s
 * passes; returns the blocks cached at the end. */
static int64_t wait_cached(wbc_file *f, uint64_t off, uint64_t len, double timeout_s) {
    int64_t want = (int64_t)((off % 4096 + len + 4095) / 4096);
    double deadline = now_seconds() + timeout_s;
    int64_t cached;
    while ((cached = blocks_with(f, off, len, WBC_RESIDENT_CACHED)) != want && now_seconds() < deadline) usleep(5000);
    return cached;
}

/* The expected content of the main file, updated along with every write. */
#define MODEL_MAX (1 << 20)
static unsigned char model[MODEL_MAX];
static size_t model_len;

static void model_write(const unsigned char *p, size_t n, size_t off) {
    memcpy(model + off, p, n);
    if (off + n > model_len) model_len = off + n;
}

static void model_truncate(size_t n) {
    if (n < model_len) memset(model + n, 0, model_len - n);
    model_len = n;
}

/* Writes n pattern bytes at off through f and checks the count. */
static void write_pattern(wbc_file *f, size_t n, size_t off, unsigned seed, uint32_t flags, const char *what) {
    unsigned char *p = malloc(n);
    fill(p, n, seed);
    CHECK_EQ(wbc_pwrite(f, p, n, off, flags), n, what);
    model_write(p, n, off);
    free(p);
}

/* Reads [off, off + n) through f and compares with the model. */
static void verify_range(wbc_file *f, size_t n, size_t off, uint32_t flags, const char *what) {
    unsigned char *p = malloc(n + 1);
    size_t want = off >= model_len ? 0 : (model_len - off < n ? model_len - off : n);
    int64_t got = wbc_pread(f, p, n, off, flags);
    CHECK_EQ(got, want, what);
    if (got == (int64_t)want) CHECK(memcmp(p, model + off, want) == 0, "%s: content differs", what);
    free(p);
}

struct writer {
    wbc_file *f;
    unsigned id;
    int errors;
};

#define CHUNK 10000
#define CHUNKS_PER_THREAD 16
#define THREADS 4

static void *writer_main(void *arg) {
    struct writer *w = arg;
    unsigned char buf[CHUNK];
    for (unsigned i = 0; i < CHUNKS_PER_THREAD; i++) {
        unsigned k = w->id * CHUNKS_PER_THREAD + i;
        fill(buf, CHUNK, k);
        if (wbc_pwrite(w->f, buf, CHUNK, (uint64_t)k * CHUNK, 0) != CHUNK) w->errors++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    char p1[4096], p2[4096], p3[4096], p4[4096], p5[4096], p6[4096], p7[4096], p8[4096], p9[4096];
    wbc_cache *c = NULL, *c2 = NULL;
    wbc_file *f = NULL, *f2 = NULL, *ro = NULL, *wo = NULL, *tmp = NULL;
    unsigned char buf[256];

    if (argc != 2) {
        fprintf(stderr, "usage: %s <temporary directory>\n", argv[0]);
        return 2;
    }
    if (strlen(argv[1]) >= sizeof dir) {
        fprintf(stderr, "directory name too long\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    path_in(p1, "main.bin");
    path_in(p2, "missing.bin");
    path_in(p3, "trunc.bin");
    path_in(p4, "threads.bin");
    path_in(p5, "unlinked.bin");
    path_in(p6, "ranges.bin");
    path_in(p7, "cold.bin");
    path_in(p8, "syncrange.bin");
    path_in(p9, "punched.bin");

    /* --- cache open/close and options --- */
    REQUIRE(wbc_cache_open("capacity=64M,dirty_limit=16M,io=threads", &c) == 0 && c != NULL,
            "wbc_cache_open with options: %s", last_error());
    CHECK_EQ(wbc_cache_open(NULL, &c2), 0, "wbc_cache_open(NULL options)");
    CHECK(c2 != NULL, "default cache handle is NULL");
    if (c2) CHECK_EQ(wbc_cache_close(c2), 0, "wbc_cache_close(default cache)");
    c2 = (wbc_cache *)&c2; /* must be overwritten with NULL on failure */
    CHECK_EQ(wbc_cache_open("bogus=1", &c2), -EINVAL, "unknown option");
    CHECK(c2 == NULL, "out not cleared on failure");
    CHECK(strstr(last_error(), "bogus") != NULL, "last error does not name the option: %s", last_error());
    CHECK_EQ(wbc_cache_open("capacity=abc", &c2), -EINVAL, "bad size");
    CHECK_EQ(wbc_cache_open("io=spdk", &c2), -EINVAL, "bad backend");
    CHECK_EQ(wbc_cache_open("capacity=64M,dirty_limit=128M", &c2), -EINVAL, "dirty_limit > capacity");
    CHECK_EQ(wbc_cache_open("capacity", &c2), -EINVAL, "option without value");

    /* --- open --- */
    REQUIRE(wbc_open(c, p1, O_CREAT | O_RDWR, 0644, &f) == 0 && f != NULL, "wbc_open O_CREAT|O_RDWR: %s", last_error());
    CHECK_EQ(wbc_size(f), 0, "size of a new file");
    tmp = (wbc_file *)&tmp;
    CHECK_EQ(wbc_open(c, p1, O_CREAT | O_EXCL | O_RDWR, 0644, &tmp), -EEXIST, "O_EXCL on an existing file");
    CHECK(tmp == NULL, "out not cleared on failure");
    CHECK_EQ(wbc_open(c, p2, O_RDWR, 0644, &tmp), -ENOENT, "missing file without O_CREAT");
    CHECK_EQ(wbc_open(c, p2, O_RDONLY, 0, &tmp), -ENOENT, "missing file read-only");
    CHECK_EQ(wbc_open(c, p1, O_RDONLY | O_APPEND, 0, &tmp), -EINVAL, "O_APPEND needs write access");
    CHECK_EQ(wbc_open(c, p1, O_RDWR | O_NONBLOCK, 0, &tmp), -EINVAL, "O_NONBLOCK is not supported");
    CHECK_EQ(wbc_open(c, p1, O_ACCMODE, 0, &tmp), -EINVAL, "invalid access mode");
    CHECK_EQ(wbc_open(c, p1, O_RDONLY | O_TRUNC, 0, &tmp), -EINVAL, "O_TRUNC without write access");
    if (wbc_open(c, p1, O_RDWR | O_CLOEXEC | O_DIRECT | O_LARGEFILE, 0, &tmp) == 0) {
        passed++;
        CHECK_EQ(wbc_close(tmp), 0, "close O_CLOEXEC|O_DIRECT handle");
    } else {
        CHECK(0, "O_CLOEXEC|O_DIRECT|O_LARGEFILE rejected: %s", last_error());
    }
    CHECK(access(p2, F_OK) != 0, "a failed open created the file");

    /* --- pwrite/pread round trips --- */
    write_pattern(f, 100000, 12345, 7, 0, "pwrite at an unaligned offset");
    verify_range(f, 100000, 12345, 0, "pread the unaligned write back");
    verify_range(f, 20000, 0, 0, "pread across the hole before it");
    verify_range(f, 1, 12345 + 4095, 0, "pread one byte");
    write_pattern(f, 3, 4094, 11, 0, "pwrite across a block boundary");
    verify_range(f, 8192, 0, 0, "pread the first two blocks");
    write_pattern(f, 5000, 300001, 3, WBC_DONTCACHE, "pwrite WBC_DONTCACHE");
    verify_range(f, 5000, 300001, WBC_DONTCACHE, "pread WBC_DONTCACHE");
    verify_range(f, 400000, 0, 0, "pread the whole file (short at EOF)");
    verify_range(f, 100, model_len - 50, 0, "pread crossing EOF");
    CHECK_EQ(wbc_pread(f, buf, sizeof buf, model_len, 0), 0, "pread at EOF");
    CHECK_EQ(wbc_pread(f, buf, sizeof buf, (uint64_t)1 << 40, 0), 0, "pread far past EOF");
    CHECK_EQ(wbc_pwrite(f, buf, 10, 0, 0x2), -EINVAL, "pwrite with an unknown flag");
    CHECK_EQ(wbc_pread(f, buf, 10, 0, 0x80000000u), -EINVAL, "pread with an unknown flag");
    CHECK_EQ(wbc_pwrite(f, buf, 0, 0, 0), 0, "zero-length pwrite");
    CHECK_EQ(wbc_pread(f, buf, 0, 0, 0), 0, "zero-length pread");
    CHECK_EQ(wbc_pwrite(f, buf, 1, INT64_MAX, 0), -EFBIG, "pwrite past INT64_MAX");

    /* --- pwritev/preadv --- */
    {
        /* Pieces of 1, 0, 4095, 5000 and 3 bytes: an empty one, and pieces
         * crossing block boundaries at an unaligned offset. */
        static unsigned char src[10099], dst[10099 + 16];
        fill(src, sizeof src, 21);
        size_t cut[] = {0, 1, 1, 4096, 9096, 10099};
        struct iovec wv[5], rv[5];
        for (int i = 0; i < 5; i++) {
            wv[i] = (struct iovec){src + cut[i], cut[i + 1] - cut[i]};
            rv[i] = (struct iovec){dst + cut[i], cut[i + 1] - cut[i]};
        }
        wv[1].iov_base = NULL; /* a NULL base with length 0 is allowed */
        CHECK_EQ(wbc_pwritev(f, wv, 5, 150001, 0), sizeof src, "pwritev of 5 pieces");
        model_write(src, sizeof src, 150001);
        verify_range(f, sizeof src + 100, 150000, 0, "pread what pwritev wrote");
        memset(dst, 0, sizeof dst);
        CHECK_EQ(wbc_preadv(f, rv, 5, 150001, 0), sizeof src, "preadv of 5 pieces");
        CHECK(memcmp(dst, src, sizeof src) == 0, "preadv content differs");
        memset(dst, 0, sizeof dst);
        CHECK_EQ(wbc_preadv(f, rv, 5, model_len - 10, WBC_DONTCACHE), 10, "preadv crossing EOF is short");
        CHECK(memcmp(dst, model + model_len - 10, 10) == 0, "short preadv content differs");
        CHECK_EQ(wbc_pwritev(f, wv, 5, 4000, WBC_DONTCACHE), sizeof src, "pwritev WBC_DONTCACHE");
        model_write(src, sizeof src, 4000);
        verify_range(f, 20000, 0, 0, "pread what the uncached pwritev wrote");
        CHECK_EQ(wbc_pwritev(f, NULL, 0, 0, 0), 0, "pwritev of no buffers");
        CHECK_EQ(wbc_preadv(f, NULL, 0, 0, 0), 0, "preadv of no buffers");
        CHECK_EQ(wbc_pwritev(f, NULL, 1, 0, 0), -EINVAL, "pwritev(iov=NULL)");
        CHECK_EQ(wbc_preadv(f, NULL, 1, 0, 0), -EINVAL, "preadv(iov=NULL)");
        CHECK_EQ(wbc_pwritev(f, wv, -1, 0, 0), -EINVAL, "pwritev(iovcnt=-1)");
        CHECK_EQ(wbc_preadv(f, rv, 1025, 0, 0), -EINVAL, "preadv(iovcnt=1025)");
        CHECK(strstr(last_error(), "IOV_MAX") != NULL, "last error does not name IOV_MAX: %s", last_error());
        CHECK_EQ(wbc_pwritev(f, wv, 5, 0, 0x4), -EINVAL, "pwritev with an unknown flag");
        struct iovec bad[2] = {{src, 10}, {NULL, 5}};
        CHECK_EQ(wbc_pwritev(f, bad, 2, 0, 0), -EINVAL, "pwritev with a NULL base of length 5");
        CHECK(strstr(last_error(), "iov[1]") != NULL, "last error does not name iov[1]: %s", last_error());
        struct iovec huge[2] = {{src, SIZE_MAX / 2}, {src, SIZE_MAX / 2}};
        CHECK_EQ(wbc_preadv(f, huge, 2, 0, 0), -EINVAL, "preadv with a total past SSIZE_MAX");
        CHECK_EQ(wbc_pwritev(NULL, wv, 5, 0, 0), -EINVAL, "pwritev(f=NULL)");
        /* Overlapping read buffers, as preadv allows: the later one wins. */
        unsigned char scratch[8] = {0};
        struct iovec ov[2] = {{scratch, 8}, {scratch + 4, 4}};
        CHECK_EQ(wbc_preadv(f, ov, 2, 150001, 0), 12, "preadv into overlapping buffers");
        CHECK(memcmp(scratch, src, 4) == 0 && memcmp(scratch + 4, src + 8, 4) == 0,
              "overlapping preadv: the second buffer's bytes land last");
        verify_range(f, 20000, 0, 0, "failed pwritev calls changed nothing");
    }

    /* --- sync, size, truncate --- */
    CHECK_EQ(wbc_fsync(f), 0, "wbc_fsync");
    CHECK_EQ(wbc_fdatasync(f), 0, "wbc_fdatasync");
    CHECK_EQ(wbc_size(f), model_len, "size after writes");
    CHECK_EQ(wbc_truncate(f, 200000), 0, "truncate down");
    model_truncate(200000);
    CHECK_EQ(wbc_size(f), 200000, "size after truncate down");
    verify_range(f, 1000, 199500, 0, "pread across the new EOF");
    CHECK_EQ(wbc_truncate(f, 250000), 0, "truncate up");
    model_truncate(250000);
    CHECK_EQ(wbc_size(f), 250000, "size after truncate up");
    verify_range(f, 60000, 195000, 0, "extension reads as zeros");
    write_pattern(f, 777, 123457, 5, 0, "pwrite after truncate");
    CHECK_EQ(wbc_fdatasync(f), 0, "wbc_fdatasync after truncate");
    CHECK_EQ(wbc_cache_sync(c), 0, "wbc_cache_sync");

    /* --- access modes --- */
    REQUIRE(wbc_open(c, p1, O_RDONLY, 0, &ro) == 0, "open read-only: %s", last_error());
    CHECK_EQ(wbc_pwrite(ro, buf, 10, 0, 0), -EBADF, "pwrite on a read-only handle");
    {
        struct iovec one = {buf, 10};
        CHECK_EQ(wbc_pwritev(ro, &one, 1, 0, 0), -EBADF, "pwritev on a read-only handle");
        CHECK_EQ(wbc_pwritev(ro, &one, -1, 0, 0), -EBADF, "pwritev on a read-only handle, bad iovcnt: EBADF first");
    }
    CHECK_EQ(wbc_truncate(ro, 0), -EBADF, "truncate on a read-only handle");
    verify_range(ro, 4096, 12000, 0, "pread through a read-only handle");
    CHECK_EQ(wbc_fsync(ro), 0, "fsync on a read-only handle");
    REQUIRE(wbc_open(c, p1, O_WRONLY, 0, &wo) == 0, "open write-only: %s", last_error());
    CHECK_EQ(wbc_pread(wo, buf, 10, 0, 0), -EBADF, "pread on a write-only handle");
    {
        struct iovec one = {buf, 10};
        CHECK_EQ(wbc_preadv(wo, &one, 1, 0, 0), -EBADF, "preadv on a write-only handle");
    }
    write_pattern(wo, 10, 0, 99, 0, "pwrite through a write-only handle");
    verify_range(ro, 10, 0, 0, "a second handle sees the write");
    CHECK_EQ(wbc_close(ro), 0, "close read-only handle");
    CHECK_EQ(wbc_close(wo), 0, "close write-only handle");

    /* --- O_TRUNC --- */
    {
        int fd = open(p3, O_CREAT | O_WRONLY | O_TRUNC, 0600);
        REQUIRE(fd >= 0, "create %s: %s", p3, strerror(errno));
        memset(buf, 1, sizeof buf);
        CHECK_EQ(write(fd, buf, sizeof buf), sizeof buf, "POSIX write");
        close(fd);
        REQUIRE(wbc_open(c, p3, O_RDWR | O_TRUNC, 0, &tmp) == 0, "open O_TRUNC: %s", last_error());
        CHECK_EQ(wbc_size(tmp), 0, "size after O_TRUNC");
        CHECK_EQ(wbc_close(tmp), 0, "close O_TRUNC handle");
    }

    /* --- WBC_O_DONTCACHE: every read and write of the handle uncached --- */
    {
        static unsigned char want[1 << 20], got[1 << 20];
        REQUIRE(wbc_open(c, p3, O_RDWR | WBC_O_DONTCACHE, 0, &tmp) == 0, "open WBC_O_DONTCACHE: %s", last_error());
        fill(want, sizeof want, 21);
        CHECK_EQ(wbc_pwrite(tmp, want, sizeof want, 0, 0), sizeof want, "pwrite through an uncached handle");
        CHECK_EQ(wbc_fdatasync(tmp), 0, "fdatasync of the uncached handle");
        CHECK_EQ(wbc_pread(tmp, got, sizeof got, 0, 0), sizeof got, "pread through an uncached handle");
        CHECK(memcmp(got, want, sizeof want) == 0, "uncached handle: content differs");
        CHECK_EQ(wbc_close(tmp), 0, "close the uncached handle");
        CHECK_EQ(wbc_open(c, p3, O_RDWR | 0x20000000, 0, &tmp), -EINVAL, "an unknown high open flag");
    }

    /* --- concurrent writers on one handle --- */
    {
        pthread_t th[THREADS];
        struct writer w[THREADS];
        REQUIRE(wbc_open(c, p4, O_CREAT | O_RDWR, 0600, &tmp) == 0, "open for threads: %s", last_error());
        for (unsigned t = 0; t < THREADS; t++) {
            w[t] = (struct writer){tmp, t, 0};
            pthread_create(&th[t], NULL, writer_main, &w[t]);
        }
        int errors = 0;
        for (unsigned t = 0; t < THREADS; t++) {
            pthread_join(th[t], NULL);
            errors += w[t].errors;
        }
        CHECK_EQ(errors, 0, "concurrent pwrite errors");
        CHECK_EQ(wbc_fsync(tmp), 0, "fsync after concurrent writes");
        unsigned char want[CHUNK], got[CHUNK];
        int bad = 0;
        for (unsigned k = 0; k < THREADS * CHUNKS_PER_THREAD; k++) {
            fill(want, CHUNK, k);
            if (wbc_pread(tmp, got, CHUNK, (uint64_t)k * CHUNK, 0) != CHUNK || memcmp(got, want, CHUNK) != 0) bad++;
        }
        CHECK_EQ(bad, 0, "chunks that read back wrong after concurrent writes");
        CHECK_EQ(wbc_close(tmp), 0, "close threads handle");
    }

    /* --- wbc_unlink and wbc_forget --- */
    {
        static unsigned char data[8192], got[8192];
        fill(data, sizeof data, 33);
        REQUIRE(wbc_open(c, p5, O_CREAT | O_RDWR, 0600, &tmp) == 0, "open for unlink: %s", last_error());
        CHECK_EQ(wbc_pwrite(tmp, data, sizeof data, 0, 0), sizeof data, "dirty data before unlink");
        CHECK_EQ(wbc_unlink(c, p5), 0, "wbc_unlink with a handle open");
        CHECK(access(p5, F_OK) != 0, "the name is gone");
        CHECK_EQ(wbc_pread(tmp, got, sizeof got, 0, 0), sizeof got, "an open handle still reads the unlinked file");
        CHECK(memcmp(got, data, sizeof data) == 0, "unlinked file's content differs");
        CHECK_EQ(wbc_close(tmp), 0, "close the unlinked file's handle");
        REQUIRE(wbc_open(c, p5, O_CREAT | O_RDWR, 0600, &tmp) == 0, "recreate: %s", last_error());
        CHECK_EQ(wbc_size(tmp), 0, "a file created under an unlinked name is new and empty");
        CHECK_EQ(wbc_forget(c, p5), 0, "wbc_forget of an open file");
        CHECK_EQ(wbc_pwrite(tmp, data, 100, 0, 0), 100, "write the new file");
        CHECK_EQ(wbc_close(tmp), 0, "close the new file");
        CHECK_EQ(wbc_forget(c, p5), 1, "wbc_forget of a cached, closed file");
        CHECK_EQ(wbc_forget(c, p5), 0, "wbc_forget of a file no longer cached");
        {
            struct stat st;
            CHECK(stat(p5, &st) == 0 && st.st_size == 100, "wbc_forget wrote the data back");
        }
        CHECK_EQ(wbc_unlink(c, p5), 0, "wbc_unlink of a closed file");
        CHECK_EQ(wbc_unlink(c, p5), -ENOENT, "wbc_unlink of a missing file");
        CHECK_EQ(wbc_forget(c, p5), 0, "wbc_forget of a missing file");
        CHECK_EQ(wbc_unlink(c, dir), -EISDIR, "wbc_unlink of a directory");
        /* O_APPEND: writes go to the end whatever their offset. */
        {
            wbc_file *app = NULL;
            REQUIRE(wbc_open(c, p5, O_CREAT | O_WRONLY | O_APPEND, 0600, &app) == 0, "open O_APPEND: %s", last_error());
            CHECK_EQ(wbc_pwrite(app, data, 10, 0, 0), 10, "append 10 bytes");
            CHECK_EQ(wbc_pwrite(app, data + 10, 20, 0, 0), 20, "append 20 more, offset 0 ignored");
            CHECK_EQ(wbc_size(app), 30, "appended size");
            CHECK_EQ(wbc_close(app), 0, "close the append handle");
            REQUIRE(wbc_open(c, p5, O_RDWR, 0, &tmp) == 0, "reopen to check appends: %s", last_error());
            CHECK_EQ(wbc_pread(tmp, got, 30, 0, 0), 30, "read the appends back");
            CHECK(memcmp(got, data, 30) == 0, "appended content");
            CHECK_EQ(wbc_truncate(tmp, 0), 0, "empty it again");
            CHECK_EQ(wbc_close(tmp), 0, "close");
        }
        /* wbc_residency: a new file written in part, then synced. */
        {
            static unsigned char rv[8];
            REQUIRE(wbc_open(c, p5, O_CREAT | O_RDWR, 0600, &tmp) == 0, "open for residency: %s", last_error());
            CHECK_EQ(wbc_pwrite(tmp, data, 8192, 4096, 0), 8192, "write blocks 1 and 2");
            memset(rv, 0xee, sizeof rv);
            CHECK_EQ(wbc_residency(tmp, 0, 3 * 4096, rv), 3, "residency of 3 blocks");
            CHECK(rv[0] == 0 && (rv[1] & (WBC_RESIDENT_CACHED | WBC_RESIDENT_DIRTY)) == (WBC_RESIDENT_CACHED | WBC_RESIDENT_DIRTY)
                      && (rv[2] & WBC_RESIDENT_DIRTY),
                  "residency bits %x %x %x", rv[0], rv[1], rv[2]);
            CHECK_EQ(wbc_residency(tmp, 100, 4096, rv), 2, "an unaligned range touches 2 blocks");
            CHECK_EQ(wbc_residency(tmp, 3 * 4096, 4096, rv), 0, "past the end of the file");
            CHECK_EQ(wbc_fsync(tmp), 0, "fsync before residency");
            CHECK_EQ(wbc_residency(tmp, 4096, 4096, rv), 1, "residency of block 1");
            CHECK(rv[0] == WBC_RESIDENT_CACHED, "clean after fsync: %x", rv[0]);
            CHECK_EQ(wbc_residency(tmp, 0, 4096, NULL), -EINVAL, "wbc_residency(vec=NULL)");
            CHECK_EQ(wbc_residency(tmp, UINT64_MAX, 2, rv), -EINVAL, "wbc_residency past UINT64_MAX");
            CHECK_EQ(wbc_residency(NULL, 0, 1, rv), -EINVAL, "wbc_residency(f=NULL)");
            CHECK_EQ(wbc_close(tmp), 0, "close after residency");
        }
        /* wbc_rename: the data follows the file, a replaced target goes. */
        {
            char moved[4096 + 16];
            snprintf(moved, sizeof moved, "%s.moved", p5);
            REQUIRE(wbc_open(c, p5, O_RDWR, 0, &tmp) == 0, "open before rename: %s", last_error());
            CHECK_EQ(wbc_pwrite(tmp, data, 100, 0, 0), 100, "dirty data before rename");
            CHECK_EQ(wbc_rename(c, p5, moved), 0, "wbc_rename");
            CHECK(access(p5, F_OK) != 0 && access(moved, F_OK) == 0, "renamed on disk");
            CHECK_EQ(wbc_pread(tmp, got, 100, 0, 0), 100, "the open handle follows the file");
            CHECK_EQ(wbc_close(tmp), 0, "close after rename");
            REQUIRE(wbc_open(c, moved, O_RDWR, 0, &tmp) == 0, "open the new name: %s", last_error());
            CHECK_EQ(wbc_pread(tmp, got, 100, 0, 0), 100, "read through the new name");
            CHECK(memcmp(got, data, 100) == 0, "renamed file's content");
            CHECK_EQ(wbc_size(tmp), 3 * 4096, "renamed file's size");
            CHECK_EQ(wbc_close(tmp), 0, "close the new name");
            CHECK_EQ(wbc_rename(c, p5, moved), -ENOENT, "wbc_rename of a missing file");
            CHECK_EQ(wbc_rename(c, NULL, moved), -EINVAL, "wbc_rename(from=NULL)");
            CHECK_EQ(wbc_rename(c, moved, NULL), -EINVAL, "wbc_rename(to=NULL)");
            CHECK_EQ(wbc_rename(c, moved, p5), 0, "rename back");
        }
        CHECK_EQ(wbc_unlink(NULL, p5), -EINVAL, "wbc_unlink(cache=NULL)");
        CHECK_EQ(wbc_unlink(c, NULL), -EINVAL, "wbc_unlink(path=NULL)");
        CHECK_EQ(wbc_forget(c, NULL), -EINVAL, "wbc_forget(path=NULL)");
    }

    /* --- stats --- */
    {
        int64_t n = wbc_stats_json(c, NULL, 0);
        CHECK(n > 0, "stats length query returned %lld", (long long)n);
        char small[8];
        memset(small, 'X', sizeof small);
        /* Counters are live: the length may move between calls, but a short
         * buffer always gets "retry" (a return >= its size) and no bytes. */
        int64_t short_ret = wbc_stats_json(c, small, sizeof small);
        CHECK(short_ret >= (int64_t)sizeof small, "stats into a short buffer returned %lld", (long long)short_ret);
        CHECK(memcmp(small, "XXXXXXXX", 8) == 0, "short buffer was written to");
        if (n > 0) {
            char *exact = malloc((size_t)n + 1);
            memset(exact, 'X', (size_t)n);
            int64_t no_room = wbc_stats_json(c, exact, (size_t)n);
            if (no_room >= n) {
                CHECK(exact[0] == 'X', "buffer without room for the NUL was written to");
            } else {
                /* The JSON shrank in between (a gauge lost a digit): it fit. */
                CHECK(no_room > 0 && exact[no_room] == '\0', "stats that fit were not NUL-terminated");
            }
            /* The JSON may grow between calls (counters); leave headroom. */
            size_t cap = (size_t)n + 256;
            char *json = malloc(cap);
            int64_t m = wbc_stats_json(c, json, cap);
            CHECK(m > 0 && (size_t)m < cap, "stats into a big buffer returned %lld", (long long)m);
            if (m > 0 && (size_t)m < cap) {
                CHECK(strlen(json) == (size_t)m, "JSON length %zu != returned %lld", strlen(json), (long long)m);
                CHECK(json[0] == '{' && json[m - 1] == '}', "not a JSON object: %s", json);
                CHECK(strstr(json, "\"cached_bytes\":") != NULL, "no cached_bytes in %s", json);
                CHECK(strstr(json, "\"written_bytes_by_reason\":{") != NULL, "no written_bytes_by_reason in %s", json);
                CHECK(strstr(json, "\"io_backend\":\"threads\"") != NULL, "io_backend is not threads: %s", json);
                CHECK(strstr(json, "\"dontcache_kicks\":") != NULL && strstr(json, "\"dontcache_kicks\":0,") == NULL,
                      "the uncached handle's writes kicked the flusher: %s", json);
                CHECK(strstr(json, "\"dropbehind_freed_bytes\":") != NULL, "no dropbehind_freed_bytes in %s", json);
            }
            free(exact);
            free(json);
        }
    }

    /* --- wbc_fadvise, wbc_sync_range, wbc_fallocate --- */
    {
        /* A cache that writes nothing back on its own (dirty data stays
         * dirty until asked), so residency shows what each call did. */
        wbc_cache *rc = NULL;
        wbc_file *rf = NULL, *rro = NULL, *rwo = NULL;
        enum { BIG = 256 * 1024, TOTAL = BIG + 8 * 4096, ROOM = TOTAL + 64 * 1024 };
        unsigned char *want = calloc(1, ROOM), *got = malloc(ROOM), *disk = malloc(ROOM);
        REQUIRE(want && got && disk, "malloc");
        REQUIRE(wbc_cache_open("capacity=64M,dirty_limit=32M,dirty_background=31M,expire_ms=3600000", &rc) == 0,
                "wbc_cache_open without background writeback: %s", last_error());
        REQUIRE(wbc_open(rc, p6, O_CREAT | O_RDWR | O_TRUNC, 0600, &rf) == 0, "open for ranges: %s", last_error());

        /* wbc_fadvise arguments */
        CHECK_EQ(wbc_fadvise(rf, 0, 0, 6), -EINVAL, "wbc_fadvise with advice 6");
        CHECK_EQ(wbc_fadvise(rf, 0, 0, -1), -EINVAL, "wbc_fadvise with advice -1");
        CHECK_EQ(wbc_fadvise(rf, 0, 0, INT_MAX), -EINVAL, "wbc_fadvise with advice INT_MAX");
        CHECK_EQ(wbc_fadvise(rf, -1, 0, WBC_FADV_NORMAL), -EINVAL, "wbc_fadvise at a negative offset");
        CHECK_EQ(wbc_fadvise(rf, INT64_MIN, 4096, WBC_FADV_DONTNEED), -EINVAL, "wbc_fadvise at INT64_MIN");
        CHECK_EQ(wbc_fadvise(rf, 0, -1, WBC_FADV_WILLNEED), -EINVAL, "wbc_fadvise with a negative length");
        CHECK_EQ(wbc_fadvise(rf, INT64_MAX, 1, WBC_FADV_WILLNEED), -EINVAL, "wbc_fadvise past INT64_MAX");
        CHECK_EQ(wbc_fadvise(rf, 1, INT64_MAX, WBC_FADV_DONTNEED), -EINVAL, "wbc_fadvise of INT64_MAX bytes at 1");
        CHECK_EQ(wbc_fadvise(rf, INT64_MAX - 4096, 4096, WBC_FADV_DONTNEED), 0, "wbc_fadvise ending at INT64_MAX");
        CHECK_EQ(wbc_fadvise(rf, INT64_MAX, 0, WBC_FADV_WILLNEED), 0, "wbc_fadvise from INT64_MAX to the end");
        CHECK_EQ(wbc_fadvise(rf, (int64_t)1 << 40, 4096, WBC_FADV_WILLNEED), 0, "wbc_fadvise past the end of file");
        /* Every advice, NORMAL last (it undoes NOREUSE, RANDOM, SEQUENTIAL). */
        for (int a = WBC_FADV_NOREUSE; a >= WBC_FADV_NORMAL; a--) {
            char what[64];
            snprintf(what, sizeof what, "wbc_fadvise(advice %d) of an empty file", a);
            CHECK_EQ(wbc_fadvise(rf, 0, 0, a), 0, what);
        }

        /* wbc_sync_range arguments */
        CHECK_EQ(wbc_sync_range(rf, 0, 0, 8), -EINVAL, "wbc_sync_range with flag 8");
        CHECK_EQ(wbc_sync_range(rf, 0, 0, 8 | WBC_SYNC_RANGE_WRITE), -EINVAL, "wbc_sync_range with WRITE|8");
        CHECK_EQ(wbc_sync_range(rf, 0, 0, UINT_MAX), -EINVAL, "wbc_sync_range with every flag bit");
        CHECK_EQ(wbc_sync_range(rf, -1, 0, WBC_SYNC_RANGE_WRITE), -EINVAL, "wbc_sync_range at a negative offset");
        CHECK_EQ(wbc_sync_range(rf, 0, -4096, WBC_SYNC_RANGE_WRITE), -EINVAL, "wbc_sync_range, negative length");
        CHECK_EQ(wbc_sync_range(rf, INT64_MAX, 1, WBC_SYNC_RANGE_WRITE), -EINVAL, "wbc_sync_range past INT64_MAX");
        CHECK_EQ(wbc_sync_range(rf, 4096, INT64_MAX, WBC_SYNC_RANGE_WAIT_AFTER), -EINVAL,
                 "wbc_sync_range of INT64_MAX bytes at 4096");
        CHECK_EQ(wbc_sync_range(rf, INT64_MAX - 1, 1, WBC_SYNC_RANGE_WRITE | WBC_SYNC_RANGE_WAIT_AFTER), 0,
                 "wbc_sync_range ending at INT64_MAX");
        for (unsigned fl = 0; fl < 8; fl++) {
            char what[64];
            snprintf(what, sizeof what, "wbc_sync_range(flags %u) of an empty file", fl);
            CHECK_EQ(wbc_sync_range(rf, 0, 0, fl), 0, what);
        }

        /* wbc_fallocate arguments: refused before anything changes */
        CHECK_EQ(wbc_fallocate(rf, 0, 0, 0), -EINVAL, "wbc_fallocate of 0 bytes");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_ZERO_RANGE, 4096, 0), -EINVAL, "wbc_fallocate ZERO_RANGE of 0 bytes");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, -1), -EINVAL,
                 "wbc_fallocate with a negative length");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_KEEP_SIZE, -1, 4096), -EINVAL, "wbc_fallocate at a negative offset");
        CHECK_EQ(wbc_fallocate(rf, 0, INT64_MIN, 4096), -EINVAL, "wbc_fallocate at INT64_MIN");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_ZERO_RANGE, INT64_MAX, 1), -EFBIG, "wbc_fallocate past INT64_MAX");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_KEEP_SIZE, 1, INT64_MAX), -EFBIG, "wbc_fallocate of INT64_MAX bytes at 1");
        CHECK_EQ(wbc_fallocate(rf, 0, INT64_MAX, INT64_MAX), -EFBIG, "wbc_fallocate, both INT64_MAX");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_COLLAPSE_RANGE, 0, 4096), -EOPNOTSUPP, "wbc_fallocate COLLAPSE_RANGE");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_INSERT_RANGE, 0, 4096), -EOPNOTSUPP, "wbc_fallocate INSERT_RANGE");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_PUNCH_HOLE, 0, 4096), -EOPNOTSUPP, "PUNCH_HOLE without KEEP_SIZE");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096),
                 -EOPNOTSUPP, "wbc_fallocate PUNCH_HOLE|ZERO_RANGE|KEEP_SIZE");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_UNSHARE_RANGE, 0, 4096), -EOPNOTSUPP, "wbc_fallocate UNSHARE_RANGE");
        CHECK_EQ(wbc_fallocate(rf, -1, 0, 4096), -EOPNOTSUPP, "wbc_fallocate with mode -1");
        {
            /* Past the file system's largest file, where that is below
             * INT64_MAX (ext4: 16 TiB): EFBIG, and the size stays. */
            int fd = open(p6, O_RDONLY);
            int limited = fd >= 0 && lseek(fd, INT64_MAX, SEEK_SET) < 0;
            if (fd >= 0) close(fd);
            if (limited) {
                CHECK_EQ(wbc_fallocate(rf, 0, INT64_MAX - 4096, 4096), -EFBIG, "mode 0 past the largest file");
                CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_ZERO_RANGE, INT64_MAX - 4096, 4096), -EFBIG,
                         "ZERO_RANGE past the largest file");
            }
        }
        CHECK_EQ(wbc_size(rf), 0, "refused wbc_fallocate calls leave the size");
        CHECK_EQ(disk_size(p6), 0, "refused wbc_fallocate calls leave the file");

        /* Punch and zero, unaligned, in dirty and clean data of one
         * 256 KiB folio and over one-block folios (some wholly inside). */
        fill(want, BIG, 51);
        CHECK_EQ(wbc_pwrite(rf, want, BIG, 0, 0), BIG, "write 256 KiB");
        CHECK_EQ(wbc_fsync(rf), 0, "fsync: clean");
        fill(want + 65536, 65536, 52);
        CHECK_EQ(wbc_pwrite(rf, want + 65536, 65536, 65536, 0), 65536, "dirty 64 KiB in the middle");
        for (int b = 0; b < 8; b++) {
            fill(want + BIG + b * 4096, 4096, 60 + (unsigned)b);
            CHECK_EQ(wbc_pwrite(rf, want + BIG + b * 4096, 4096, BIG + b * 4096, 0), 4096, "write one block");
        }
        CHECK_EQ(blocks_with(rf, 0, TOTAL, WBC_RESIDENT_DIRTY), 16 + 8, "dirty blocks before punching");
        struct {
            int mode;
            int64_t off, len;
            const char *what;
        } zeroings[] = {
            {FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 70000, 10000, "punch inside dirty data"},
            {FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 150001, 20000, "punch inside clean data"},
            {FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 120000, 16000, "zero across dirty and clean data"},
            {FALLOC_FL_ZERO_RANGE, 200003, 5, "zero 5 clean bytes"},
            {FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 65536 + 3, 1, "punch 1 dirty byte"},
            {FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, BIG + 4096 + 100, 3 * 4096 - 50,
             "punch over dirty one-block folios"},
            {FALLOC_FL_ZERO_RANGE, BIG + 5 * 4096, 4096, "zero one whole dirty block"},
            {FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, BIG - 1000, 2000, "zero across the folios' border"},
        };
        for (size_t z = 0; z < sizeof zeroings / sizeof zeroings[0]; z++) {
            CHECK_EQ(wbc_fallocate(rf, zeroings[z].mode, zeroings[z].off, zeroings[z].len), 0, zeroings[z].what);
            memset(want + zeroings[z].off, 0, (size_t)zeroings[z].len);
            CHECK_EQ(wbc_pread(rf, got, TOTAL, 0, 0), TOTAL, zeroings[z].what);
            CHECK(memcmp(got, want, TOTAL) == 0, "%s: reads back wrong", zeroings[z].what);
        }
        CHECK_EQ(wbc_size(rf), TOTAL, "punching and zeroing inside the file keep its size");
        CHECK_EQ(wbc_fallocate(rf, 0, 1000, 8000), 0, "mode 0 inside the file");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_KEEP_SIZE, 0, TOTAL), 0, "KEEP_SIZE over the file");
        CHECK_EQ(wbc_pread(rf, got, TOTAL, 0, 0), TOTAL, "read after reserving");
        CHECK(memcmp(got, want, TOTAL) == 0, "reserving changed the content");
        CHECK_EQ(wbc_fsync(rf), 0, "fsync after punching");
        CHECK_EQ(disk_size(p6), TOTAL, "on-disk size after punching");
        CHECK_EQ(read_disk(p6, disk, ROOM, 0), TOTAL, "read(2) after punching");
        CHECK(memcmp(disk, want, TOTAL) == 0, "on disk after punching: the discarded dirty data was written");

        /* Sizes: ZERO_RANGE and mode 0 extend the file, KEEP_SIZE never. */
        int64_t size = TOTAL;
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, size - 100, 8192), 0,
                 "ZERO_RANGE|KEEP_SIZE across the end");
        memset(want + size - 100, 0, 100);
        CHECK_EQ(wbc_size(rf), size, "ZERO_RANGE|KEEP_SIZE keeps the size");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, size - 50, 1 << 20), 0,
                 "punch across the end");
        memset(want + size - 50, 0, 50);
        CHECK_EQ(wbc_size(rf), size, "a punch keeps the size");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_KEEP_SIZE, size, 1 << 20), 0, "KEEP_SIZE past the end");
        CHECK_EQ(wbc_size(rf), size, "KEEP_SIZE keeps the size");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_ZERO_RANGE, size - 1000, 5000), 0, "ZERO_RANGE across the end");
        memset(want + size - 1000, 0, 1000);
        size += 4000;
        CHECK_EQ(wbc_size(rf), size, "ZERO_RANGE extends the file");
        CHECK_EQ(wbc_fallocate(rf, 0, size + 3000, 2000), 0, "mode 0 past the end");
        size += 5000;
        CHECK_EQ(wbc_size(rf), size, "mode 0 extends the file");
        CHECK_EQ(wbc_fallocate(rf, 0, 0, size - 10), 0, "mode 0 short of the end");
        CHECK_EQ(wbc_size(rf), size, "mode 0 inside the file keeps the size");
        memset(got, 0xee, ROOM);
        CHECK_EQ(wbc_pread(rf, got, ROOM, 0, 0), size, "read the extended file");
        CHECK(memcmp(got, want, (size_t)size) == 0, "extended file reads back wrong");
        CHECK(all_zero(got + TOTAL - 1000, (size_t)size - (TOTAL - 1000)), "the zeroed and extended tail");
        CHECK_EQ(wbc_pread(rf, got, 100, (uint64_t)size, 0), 0, "read at the new end");
        CHECK_EQ(wbc_fsync(rf), 0, "fsync after extending");
        CHECK_EQ(disk_size(p6), size, "on-disk size after extending");
        CHECK_EQ(read_disk(p6, disk, ROOM, 0), size, "read(2) after extending");
        CHECK(memcmp(disk, want, (size_t)size) == 0, "on disk after extending");

        /* DONTNEED of clean data: one block (a one-block folio), to the
         * end, then the whole file. RANDOM first: no readahead in flight
         * that a DONTNEED could not drop. */
        CHECK_EQ(wbc_fadvise(rf, 0, 0, WBC_FADV_RANDOM), 0, "RANDOM");
        {
            unsigned char rv[8];
            CHECK_EQ(wbc_pread(rf, got, TOTAL, 0, 0), TOTAL, "read everything into the cache");
            int64_t cached = blocks_with(rf, 0, (uint64_t)size, WBC_RESIDENT_CACHED);
            CHECK(cached > 0, "nothing cached before DONTNEED: %lld", (long long)cached);
            CHECK_EQ(blocks_with(rf, 0, (uint64_t)size, WBC_RESIDENT_DIRTY | WBC_RESIDENT_WRITEBACK), 0,
                     "clean after fsync");
            CHECK_EQ(wbc_fadvise(rf, BIG + 6 * 4096, 4096, WBC_FADV_DONTNEED), 0, "DONTNEED of one block");
            CHECK_EQ(wbc_residency(rf, BIG, 8 * 4096, rv), 8, "residency after DONTNEED of one block");
            CHECK(rv[0] == WBC_RESIDENT_CACHED && rv[4] == WBC_RESIDENT_CACHED && rv[6] == 0
                      && rv[7] == WBC_RESIDENT_CACHED,
                  "DONTNEED of block 6 of 8: %x %x %x %x %x %x %x %x", rv[0], rv[1], rv[2], rv[3], rv[4], rv[5],
                  rv[6], rv[7]);
            CHECK(blocks_with(rf, 0, (uint64_t)size, WBC_RESIDENT_CACHED) < cached, "DONTNEED dropped nothing");
            CHECK_EQ(wbc_fadvise(rf, BIG, 0, WBC_FADV_DONTNEED), 0, "DONTNEED to the end");
            CHECK_EQ(blocks_with(rf, BIG, (uint64_t)size - BIG, WBC_RESIDENT_CACHED), 0,
                     "cached blocks after DONTNEED to the end");
            CHECK_EQ(blocks_with(rf, 0, BIG, WBC_RESIDENT_CACHED), BIG / 4096,
                     "DONTNEED to the end kept what is before");
            CHECK_EQ(wbc_fadvise(rf, 0, 0, WBC_FADV_DONTNEED), 0, "DONTNEED of the whole file");
            CHECK_EQ(blocks_with(rf, 0, (uint64_t)size, WBC_RESIDENT_CACHED), 0,
                     "cached blocks after DONTNEED of the whole file");
            CHECK_EQ(wbc_pread(rf, got, ROOM, 0, 0), size, "read after DONTNEED");
            CHECK(memcmp(got, want, (size_t)size) == 0, "DONTNEED changed the content");
            /* Dirty data becomes drop-behind: the flusher writes it (with
             * no background writeback here), then drops it. */
            fill(want + 4096, 4096, 70);
            CHECK_EQ(wbc_pwrite(rf, want + 4096, 4096, 4096, 0), 4096, "dirty one block");
            CHECK_EQ(wbc_fadvise(rf, 0, 0, WBC_FADV_DONTNEED), 0, "DONTNEED with a dirty block");
            {
                double deadline = now_seconds() + 10.0;
                while (blocks_with(rf, 4096, 4096, WBC_RESIDENT_CACHED) != 0 && now_seconds() < deadline)
                    usleep(5000);
            }
            CHECK_EQ(blocks_with(rf, 4096, 4096, WBC_RESIDENT_CACHED), 0,
                     "a dirty block DONTNEED made drop-behind, 10 s on");
            CHECK_EQ(read_disk(p6, disk, 4096, 4096), 4096, "read(2) of the drop-behind block");
            CHECK(memcmp(disk, want + 4096, 4096) == 0, "the drop-behind block was not written");
            CHECK_EQ(wbc_pread(rf, got, 8192, 0, 0), 8192, "read the dirty block after DONTNEED");
            CHECK(memcmp(got, want, 8192) == 0, "DONTNEED lost dirty data");
            CHECK_EQ(wbc_fsync(rf), 0, "fsync after DONTNEED");
        }

        /* Punch and zero where nothing is cached: zeros from the store. */
        CHECK_EQ(wbc_fadvise(rf, 0, 0, WBC_FADV_DONTNEED), 0, "DONTNEED before uncached punching");
        CHECK_EQ(blocks_with(rf, 0, 65536, WBC_RESIDENT_CACHED), 0, "nothing cached before uncached punching");
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 5000, 4000), 0, "uncached punch");
        memset(want + 5000, 0, 4000);
        CHECK_EQ(wbc_fallocate(rf, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 40000, 1000), 0, "uncached zero");
        memset(want + 40000, 0, 1000);
        CHECK_EQ(wbc_pread(rf, got, 65536, 0, 0), 65536, "read after uncached punching");
        CHECK(memcmp(got, want, 65536) == 0, "uncached punch and zero read back wrong");

        /* Read-only and write-only handles. */
        REQUIRE(wbc_open(rc, p6, O_RDONLY, 0, &rro) == 0, "open ranges read-only: %s", last_error());
        CHECK_EQ(wbc_fallocate(rro, 0, 0, 4096), -EBADF, "wbc_fallocate mode 0 on a read-only handle");
        CHECK_EQ(wbc_fallocate(rro, FALLOC_FL_KEEP_SIZE, 0, 4096), -EBADF, "KEEP_SIZE on a read-only handle");
        CHECK_EQ(wbc_fallocate(rro, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), -EBADF,
                 "punch on a read-only handle");
        CHECK_EQ(wbc_fallocate(rro, FALLOC_FL_ZERO_RANGE, 0, 4096), -EBADF, "ZERO_RANGE on a read-only handle");
        CHECK_EQ(wbc_fallocate(rro, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (int64_t)size, 4096), -EBADF,
                 "ZERO_RANGE|KEEP_SIZE on a read-only handle");
        CHECK_EQ(wbc_fadvise(rro, 0, 0, WBC_FADV_WILLNEED), 0, "wbc_fadvise on a read-only handle");
        CHECK_EQ(wbc_sync_range(rro, 0, 0, WBC_SYNC_RANGE_WRITE | WBC_SYNC_RANGE_WAIT_AFTER), 0,
                 "wbc_sync_range on a read-only handle");
        CHECK_EQ(wbc_pread(rro, got, ROOM, 0, 0), size, "read through the read-only handle");
        CHECK(memcmp(got, want, (size_t)size) == 0, "the read-only handle's calls changed the content");
        CHECK_EQ(wbc_close(rro), 0, "close the read-only handle");
        REQUIRE(wbc_open(rc, p6, O_WRONLY, 0, &rwo) == 0, "open ranges write-only: %s", last_error());
        CHECK_EQ(wbc_fallocate(rwo, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 10, 10), 0,
                 "punch through a write-only handle");
        memset(want + 10, 0, 10);
        CHECK_EQ(wbc_fadvise(rwo, 0, 0, WBC_FADV_DONTNEED), 0, "wbc_fadvise on a write-only handle");
        CHECK_EQ(wbc_sync_range(rwo, 0, 0, WBC_SYNC_RANGE_WAIT_BEFORE), 0, "wbc_sync_range on a write-only handle");
        CHECK_EQ(wbc_close(rwo), 0, "close the write-only handle");
        CHECK_EQ(wbc_pread(rf, got, 4096, 0, 0), 4096, "read after the write-only punch");
        CHECK(memcmp(got, want, 4096) == 0, "the write-only handle's punch reads back wrong");
        CHECK_EQ(wbc_close(rf), 0, "close the ranges file");

        /* WILLNEED: a cold range becomes cached in the background. */
        {
            enum { COLD = 1 << 20, PIECE = 1 << 16 };
            int fd = open(p7, O_CREAT | O_WRONLY | O_TRUNC, 0600);
            REQUIRE(fd >= 0, "create %s: %s", p7, strerror(errno));
            fill(disk, PIECE, 80);
            for (size_t done = 0; done < COLD; done += PIECE)
                CHECK_EQ(write(fd, disk, PIECE), PIECE, "POSIX write of the cold file");
            close(fd);
            REQUIRE(wbc_open(rc, p7, O_RDONLY, 0, &tmp) == 0, "open the cold file: %s", last_error());
            CHECK_EQ(blocks_with(tmp, 0, COLD, WBC_RESIDENT_CACHED), 0, "a cold file is not cached");
            CHECK_EQ(wbc_fadvise(tmp, 0, COLD / 2, WBC_FADV_WILLNEED), 0, "WILLNEED of the first half");
            CHECK_EQ(wait_cached(tmp, 0, COLD / 2, 10.0), COLD / 2 / 4096, "blocks WILLNEED cached within 10 s");
            CHECK_EQ(wbc_fadvise(tmp, COLD / 2, 0, WBC_FADV_WILLNEED), 0, "WILLNEED to the end");
            CHECK_EQ(wait_cached(tmp, COLD / 2, COLD / 2, 10.0), COLD / 2 / 4096, "WILLNEED to the end, within 10 s");
            CHECK_EQ(blocks_with(tmp, 0, COLD, WBC_RESIDENT_DIRTY), 0, "WILLNEED dirtied nothing");
            unsigned char *cold = malloc(COLD);
            CHECK_EQ(wbc_pread(tmp, cold, COLD, 0, 0), COLD, "read the cold file");
            int bad = 0;
            for (size_t at = 0; at < COLD; at += PIECE) bad += memcmp(cold + at, disk, PIECE) != 0;
            CHECK_EQ(bad, 0, "pieces of the cold file read back wrong after WILLNEED");
            free(cold);
            /* RANDOM: sequential reads read only what they ask for. */
            CHECK_EQ(wbc_fadvise(tmp, 0, 0, WBC_FADV_DONTNEED), 0, "DONTNEED of the cold file");
            CHECK_EQ(blocks_with(tmp, 0, COLD, WBC_RESIDENT_CACHED), 0, "the cold file is cold again");
            CHECK_EQ(wbc_fadvise(tmp, 0, 0, WBC_FADV_RANDOM), 0, "RANDOM on the cold file");
            for (int b = 0; b < 16; b++)
                CHECK_EQ(wbc_pread(tmp, got, 4096, (uint64_t)b * 4096, 0), 4096, "a 4 KiB read after RANDOM");
            usleep(100000);
            CHECK_EQ(blocks_with(tmp, 0, COLD, WBC_RESIDENT_CACHED), 16, "blocks cached by 16 reads without readahead");
            CHECK_EQ(wbc_fadvise(tmp, 0, 0, WBC_FADV_NORMAL), 0, "NORMAL after RANDOM");
            CHECK_EQ(wbc_close(tmp), 0, "close the cold file");
        }

        /* sync_range: the range's blocks are written, the others stay
         * dirty (one-block folios: written a block at a time). */
        {
            enum { NB = 16 };
            unsigned char rv[NB], data[NB * 4096];
            REQUIRE(wbc_open(rc, p8, O_CREAT | O_RDWR | O_TRUNC, 0600, &tmp) == 0, "open for sync_range: %s",
                    last_error());
            fill(data, sizeof data, 90);
            for (int b = 0; b < NB; b++)
                CHECK_EQ(wbc_pwrite(tmp, data + b * 4096, 4096, (uint64_t)b * 4096, 0), 4096, "write a block");
            CHECK_EQ(blocks_with(tmp, 0, sizeof data, WBC_RESIDENT_DIRTY), NB, "all dirty before sync_range");
            CHECK_EQ(wbc_sync_range(tmp, 0, 0, 0), 0, "sync_range with no flags");
            CHECK_EQ(wbc_sync_range(tmp, 8 * 4096, 2 * 4096, WBC_SYNC_RANGE_WAIT_BEFORE | WBC_SYNC_RANGE_WAIT_AFTER),
                     0, "sync_range that only waits");
            CHECK_EQ(blocks_with(tmp, 0, sizeof data, WBC_RESIDENT_DIRTY), NB, "waiting wrote nothing");
            /* Blocks 4..7: an unaligned range touching them. */
            CHECK_EQ(wbc_sync_range(tmp, 4 * 4096 + 100, 3 * 4096, WBC_SYNC_RANGE_WRITE | WBC_SYNC_RANGE_WAIT_AFTER),
                     0, "sync_range WRITE|WAIT_AFTER of blocks 4..7");
            CHECK_EQ(wbc_residency(tmp, 0, sizeof data, rv), NB, "residency after sync_range");
            {
                int wrong = 0;
                for (int b = 0; b < NB; b++) {
                    unsigned expect = b >= 4 && b < 8 ? WBC_RESIDENT_CACHED : WBC_RESIDENT_CACHED | WBC_RESIDENT_DIRTY;
                    if ((rv[b] & (WBC_RESIDENT_CACHED | WBC_RESIDENT_DIRTY | WBC_RESIDENT_WRITEBACK)) != expect) {
                        wrong++;
                        fprintf(stderr, "sync_range of blocks 4..7: block %d has bits %x\n", b, rv[b]);
                    }
                }
                CHECK_EQ(wrong, 0, "blocks with wrong bits after sync_range of blocks 4..7");
            }
            CHECK_EQ(read_disk(p8, got, 4 * 4096, 4 * 4096), 4 * 4096, "read(2) of blocks 4..7");
            CHECK(memcmp(got, data + 4 * 4096, 4 * 4096) == 0, "blocks 4..7 on disk after sync_range");
            /* len 0: to the end of the file. */
            CHECK_EQ(wbc_sync_range(tmp, 12 * 4096, 0, WBC_SYNC_RANGE_WRITE | WBC_SYNC_RANGE_WAIT_AFTER), 0,
                     "sync_range from block 12 to the end");
            CHECK_EQ(blocks_with(tmp, 12 * 4096, 4 * 4096, WBC_RESIDENT_DIRTY | WBC_RESIDENT_WRITEBACK), 0,
                     "dirty blocks from 12 after sync_range to the end");
            CHECK_EQ(blocks_with(tmp, 0, 12 * 4096, WBC_RESIDENT_DIRTY), 8, "blocks 0..3 and 8..11 stay dirty");
            CHECK_EQ(read_disk(p8, got, 4 * 4096, 12 * 4096), 4 * 4096, "read(2) of blocks 12..15");
            CHECK(memcmp(got, data + 12 * 4096, 4 * 4096) == 0, "blocks 12..15 on disk after sync_range");
            /* WRITE alone: under writeback (or done) on return, not dirty;
             * WAIT_BEFORE then waits for it. */
            CHECK_EQ(wbc_sync_range(tmp, 0, 4096, WBC_SYNC_RANGE_WRITE), 0, "sync_range WRITE of block 0");
            CHECK_EQ(blocks_with(tmp, 0, 4096, WBC_RESIDENT_DIRTY), 0, "block 0 is not dirty after WRITE");
            CHECK_EQ(wbc_sync_range(tmp, 0, 4096, WBC_SYNC_RANGE_WAIT_BEFORE), 0, "sync_range WAIT_BEFORE");
            CHECK_EQ(blocks_with(tmp, 0, 4096, WBC_RESIDENT_WRITEBACK | WBC_RESIDENT_DIRTY), 0,
                     "block 0 written after WAIT_BEFORE");
            CHECK_EQ(blocks_with(tmp, 4096, 3 * 4096, WBC_RESIDENT_DIRTY), 3, "blocks 1..3 stay dirty");
            CHECK_EQ(wbc_pread(tmp, got, sizeof data, 0, 0), sizeof data, "read after sync_range");
            CHECK(memcmp(got, data, sizeof data) == 0, "sync_range changed the content");
            CHECK_EQ(wbc_fsync(tmp), 0, "fsync after sync_range");
            CHECK_EQ(blocks_with(tmp, 0, sizeof data, WBC_RESIDENT_DIRTY), 0, "nothing dirty after fsync");
            CHECK_EQ(read_disk(p8, got, sizeof data, 0), sizeof data, "read(2) after fsync");
            CHECK(memcmp(got, data, sizeof data) == 0, "on disk after sync_range and fsync");
            /* NOREUSE: the handle's writes are uncached, written back (no
             * background writeback here) and dropped; NORMAL undoes it. */
            CHECK_EQ(wbc_fadvise(tmp, 0, 0, WBC_FADV_NOREUSE), 0, "NOREUSE");
            CHECK_EQ(wbc_pwrite(tmp, data, sizeof data, sizeof data, 0), sizeof data, "write after NOREUSE");
            {
                double deadline = now_seconds() + 10.0;
                while (blocks_with(tmp, sizeof data, sizeof data, WBC_RESIDENT_CACHED) != 0 && now_seconds() < deadline)
                    usleep(5000);
            }
            CHECK_EQ(blocks_with(tmp, sizeof data, sizeof data, WBC_RESIDENT_CACHED), 0,
                     "blocks a NOREUSE handle wrote still cached 10 s on");
            CHECK_EQ(read_disk(p8, got, sizeof data, sizeof data), sizeof data, "read(2) of the NOREUSE write");
            CHECK(memcmp(got, data, sizeof data) == 0, "the NOREUSE write on disk");
            CHECK_EQ(wbc_fadvise(tmp, 0, 0, WBC_FADV_NORMAL), 0, "NORMAL after NOREUSE");
            CHECK_EQ(wbc_pwrite(tmp, data, 4096, 2 * sizeof data, 0), 4096, "write after NORMAL");
            usleep(200000);
            CHECK_EQ(blocks_with(tmp, 2 * sizeof data, 4096, WBC_RESIDENT_DIRTY), 1, "NORMAL: the write stays dirty");
            CHECK_EQ(wbc_fsync(tmp), 0, "fsync after NORMAL");
            CHECK_EQ(wbc_close(tmp), 0, "close the sync_range file");
        }

        /* Dirty data never written back, punched whole: the size still
         * reaches the store with the next fsync, as zeros. */
        REQUIRE(wbc_open(rc, p9, O_CREAT | O_RDWR | O_TRUNC, 0600, &tmp) == 0, "open for punching: %s", last_error());
        fill(got, 10000, 95);
        CHECK_EQ(wbc_pwrite(tmp, got, 10000, 0, 0), 10000, "write 10000 bytes");
        CHECK_EQ(wbc_fallocate(tmp, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 3 * 4096), 0,
                 "punch all the dirty data");
        CHECK_EQ(blocks_with(tmp, 0, 10000, WBC_RESIDENT_DIRTY), 0, "nothing dirty after punching it all");
        CHECK_EQ(wbc_size(tmp), 10000, "size after punching it all");
        CHECK_EQ(wbc_pread(tmp, got, ROOM, 0, 0), 10000, "read after punching it all");
        CHECK(all_zero(got, 10000), "punched dirty data reads as zeros");
        CHECK_EQ(wbc_fsync(tmp), 0, "fsync after punching it all");
        CHECK_EQ(disk_size(p9), 10000, "on-disk size after punching unwritten data");
        memset(got, 0xee, 10000);
        CHECK_EQ(read_disk(p9, got, ROOM, 0), 10000, "read(2) after punching unwritten data");
        CHECK(all_zero(got, 10000), "punched unwritten data is zeros on disk");
        CHECK_EQ(wbc_close(tmp), 0, "close the punched file");

        CHECK_EQ(wbc_cache_close(rc), 0, "close the cache without background writeback");
        CHECK_EQ(read_disk(p6, disk, ROOM, 0), size, "read(2) of the ranges file after its cache closed");
        CHECK(memcmp(disk, want, (size_t)size) == 0, "the ranges file on disk after its cache closed");
        free(want);
        free(got);
        free(disk);
    }

    /* --- NULL arguments --- */
    CHECK_EQ(wbc_cache_open(NULL, NULL), -EINVAL, "wbc_cache_open(out=NULL)");
    CHECK_EQ(wbc_cache_close(NULL), -EINVAL, "wbc_cache_close(NULL)");
    CHECK_EQ(wbc_cache_sync(NULL), -EINVAL, "wbc_cache_sync(NULL)");
    CHECK_EQ(wbc_open(NULL, p1, O_RDWR, 0, &tmp), -EINVAL, "wbc_open(cache=NULL)");
    CHECK_EQ(wbc_open(c, NULL, O_RDWR, 0, &tmp), -EINVAL, "wbc_open(path=NULL)");
    CHECK_EQ(wbc_open(c, p1, O_RDWR, 0, NULL), -EINVAL, "wbc_open(out=NULL)");
    CHECK_EQ(wbc_close(NULL), -EINVAL, "wbc_close(NULL)");
    CHECK_EQ(wbc_pread(NULL, buf, 1, 0, 0), -EINVAL, "wbc_pread(f=NULL)");
    CHECK_EQ(wbc_pread(f, NULL, 1, 0, 0), -EINVAL, "wbc_pread(buf=NULL)");
    CHECK_EQ(wbc_pwrite(NULL, buf, 1, 0, 0), -EINVAL, "wbc_pwrite(f=NULL)");
    CHECK_EQ(wbc_pwrite(f, NULL, 1, 0, 0), -EINVAL, "wbc_pwrite(buf=NULL)");
    CHECK_EQ(wbc_pread(f, buf, SIZE_MAX, 0, 0), -EINVAL, "wbc_pread(len=SIZE_MAX)");
    CHECK_EQ(wbc_fsync(NULL), -EINVAL, "wbc_fsync(NULL)");
    CHECK_EQ(wbc_fdatasync(NULL), -EINVAL, "wbc_fdatasync(NULL)");
    CHECK_EQ(wbc_size(NULL), -EINVAL, "wbc_size(NULL)");
    CHECK_EQ(wbc_truncate(NULL, 0), -EINVAL, "wbc_truncate(NULL)");
    CHECK_EQ(wbc_fadvise(NULL, 0, 0, WBC_FADV_NORMAL), -EINVAL, "wbc_fadvise(NULL)");
    CHECK_EQ(wbc_sync_range(NULL, 0, 0, WBC_SYNC_RANGE_WRITE), -EINVAL, "wbc_sync_range(NULL)");
    CHECK_EQ(wbc_fallocate(NULL, 0, 0, 4096), -EINVAL, "wbc_fallocate(NULL)");
    CHECK_EQ(wbc_stats_json(NULL, (char *)buf, sizeof buf), -EINVAL, "wbc_stats_json(NULL)");
    CHECK(wbc_last_error(NULL, 0) > 0, "wbc_last_error length query");

    /* --- the version: one static string, the crate's version --- */
    {
        const char *v = wbc_version();
        CHECK(v != NULL && v == wbc_version() && v[0] >= '0' && v[0] <= '9', "wbc_version: %s", v ? v : "(null)");
#ifdef WBC_EXPECTED_VERSION
        CHECK(v != NULL && strcmp(v, WBC_EXPECTED_VERSION) == 0, "wbc_version %s, expected %s", v ? v : "(null)",
              WBC_EXPECTED_VERSION);
#endif
    }

    /* --- closing the cache with files open --- */
    REQUIRE(wbc_open(c, p1, O_RDWR, 0, &f2) == 0, "open second handle: %s", last_error());
    write_pattern(f2, 4321, 240000, 42, 0, "pwrite just before cache close (not fsynced)");
    CHECK_EQ(wbc_cache_close(c), 0, "wbc_cache_close with files open");
    c = NULL;
    CHECK_EQ(wbc_pread(f, buf, 10, 0, 0), -EBADF, "pread after cache close");
    CHECK_EQ(wbc_pwrite(f, buf, 10, 0, 0), -EBADF, "pwrite after cache close");
    {
        struct iovec one = {buf, 10};
        CHECK_EQ(wbc_pwritev(f, &one, 1, 0, 0), -EBADF, "pwritev after cache close");
        CHECK_EQ(wbc_preadv(f, &one, 1, 0, 0), -EBADF, "preadv after cache close");
    }
    CHECK_EQ(wbc_fsync(f), -EBADF, "fsync after cache close");
    CHECK_EQ(wbc_fdatasync(f2), -EBADF, "fdatasync after cache close");
    CHECK_EQ(wbc_size(f2), -EBADF, "size after cache close");
    CHECK_EQ(wbc_truncate(f2, 0), -EBADF, "truncate after cache close");
    CHECK_EQ(wbc_fadvise(f, 0, 0, WBC_FADV_WILLNEED), -EBADF, "fadvise after cache close");
    CHECK_EQ(wbc_fadvise(f2, 0, 4096, WBC_FADV_DONTNEED), -EBADF, "fadvise DONTNEED after cache close");
    CHECK_EQ(wbc_sync_range(f, 0, 0, WBC_SYNC_RANGE_WRITE | WBC_SYNC_RANGE_WAIT_AFTER), -EBADF,
             "sync_range after cache close");
    CHECK_EQ(wbc_fallocate(f2, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096), -EBADF,
             "fallocate ZERO_RANGE after cache close");
    CHECK_EQ(wbc_fallocate(f, 0, 0, 1 << 20), -EBADF, "fallocate mode 0 after cache close");
    CHECK_EQ(wbc_close(f), 0, "wbc_close after cache close");
    CHECK_EQ(wbc_close(f2), 0, "wbc_close of the second handle after cache close");

    /* --- durability: read the file back with plain POSIX I/O --- */
    {
        int fd = open(p1, O_RDONLY);
        REQUIRE(fd >= 0, "POSIX open %s: %s", p1, strerror(errno));
        struct stat st;
        CHECK(fstat(fd, &st) == 0, "fstat: %s", strerror(errno));
        CHECK_EQ(st.st_size, model_len, "on-disk size after wbc_cache_close");
        unsigned char *disk = malloc(model_len + 1);
        size_t got = 0;
        ssize_t r;
        while (got <= model_len && (r = read(fd, disk + got, model_len + 1 - got)) > 0) got += (size_t)r;
        close(fd);
        CHECK_EQ(got, model_len, "bytes read back with read()");
        if (got == model_len) {
            size_t first = 0;
            while (first < model_len && disk[first] == model[first]) first++;
            CHECK(first == model_len, "on-disk content differs first at byte %zu", first);
        }
        free(disk);
        CHECK(stat(p4, &st) == 0 && st.st_size == (off_t)THREADS * CHUNKS_PER_THREAD * CHUNK,
              "threads file size on disk");
    }

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
