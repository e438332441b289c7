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
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    char p1[4096], p2[4096], p3[4096], p4[4096], p5[4096];
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
        CHECK_EQ(wbc_stats_json(c, small, sizeof small), n, "stats into a short buffer returns the length");
        CHECK(memcmp(small, "XXXXXXXX", 8) == 0, "short buffer was written to");
        if (n > 0) {
            char *exact = malloc((size_t)n + 1);
            memset(exact, 'X', (size_t)n);
            CHECK_EQ(wbc_stats_json(c, exact, (size_t)n), n, "stats with no room for the NUL");
            CHECK(exact[0] == 'X', "buffer without room for the NUL was written to");
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
    CHECK_EQ(wbc_stats_json(NULL, (char *)buf, sizeof buf), -EINVAL, "wbc_stats_json(NULL)");
    CHECK(wbc_last_error(NULL, 0) > 0, "wbc_last_error length query");

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
