/*
 * read_scaling.c - how cached 4 KiB reads scale with reader threads, through
 * wbcache's C ABI (wbc_pread) and through the kernel's pread(2).
 *
 * A file of 64 MiB is written and read once, so both caches hold it. Then 1,
 * 2 and 4 threads read random 4 KiB blocks of it at once, each thread in a
 * random order of its own (every block once per round), all through one open
 * file: one wbc_file shared by the threads (a handle may be used from several
 * threads at once), and for the kernel one file descriptor. Each thread makes
 * 2,000,000 reads after the common start; the best of 3 runs is printed:
 * microseconds per read (every thread's time over its reads) and reads per
 * second in all (every thread's reads over the time from the common start
 * until the last thread ended), as `wbcache bench -w
 * rand-read/cached-4k-readers` measures them.
 *
 * Build it from the repository root, after `cargo build --release`:
 *   cc -O2 -pthread -o target/read_scaling examples/read_scaling.c -Iinclude -Ltarget/release -lwbcache
 * and run it as
 *   LD_LIBRARY_PATH=target/release target/read_scaling [dir [reads-per-thread [region-MiB]]]
 * (defaults: /var/tmp, 2000000, 64). It works on a new file in dir, which it
 * removes at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wbcache.h"

#define BLOCK 4096
#define MAX_THREADS 4
#define RUNS 3
#define WARMUP_READS 1000

/* The two ways of reading the file, and everything the reader threads of one
 * run share. */
enum engine { KERNEL_PREAD, WBCACHE_PREAD };

struct run {
    enum engine engine;
    int fd;
    wbc_file *file;
    uint64_t blocks;
    long reads; /* per thread, after the common start */
    pthread_barrier_t start;
};

/* One reader thread: its order of the blocks, its time and its first error. */
struct reader {
    struct run *run;
    unsigned index;
    struct timespec began, ended;
    int64_t error; /* 0, or -errno */
};

static double seconds(struct timespec t) {
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* xorshift64*: a random order per thread, seeded with its index. */
static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint32_t *shuffled_blocks(uint64_t blocks, unsigned seed) {
    uint32_t *order = malloc(blocks * sizeof *order);
    uint64_t state = (seed + 1) * 0x9E3779B97F4A7C15ULL;
    if (!order)
        return NULL;
    for (uint64_t i = 0; i < blocks; i++)
        order[i] = (uint32_t)i;
    for (uint64_t i = blocks - 1; i > 0; i--) {
        uint64_t j = next_random(&state) % (i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    return order;
}

/* One 4 KiB read at off: 0, or -errno (a short read is -EIO). */
static int64_t read_block(const struct run *run, void *buf, uint64_t off) {
    int64_t n;
    if (run->engine == WBCACHE_PREAD) {
        n = wbc_pread(run->file, buf, BLOCK, off, 0);
    } else {
        n = pread(run->fd, buf, BLOCK, (off_t)off);
        if (n < 0)
            n = -errno;
    }
    return n == BLOCK ? 0 : n < 0 ? n : -EIO;
}

/* Warmup reads, the common start, then the run's reads in this thread's order. */
static void *read_course(void *arg) {
    struct reader *r = arg;
    struct run *run = r->run;
    uint32_t *order = shuffled_blocks(run->blocks, r->index);
    void *buf = aligned_alloc(BLOCK, BLOCK);
    uint64_t at = 0;
    if (!order || !buf)
        r->error = -ENOMEM;
    for (long i = 0; i < WARMUP_READS && !r->error; i++, at = (at + 1) % run->blocks)
        r->error = read_block(run, buf, (uint64_t)order[at] * BLOCK);
    pthread_barrier_wait(&run->start);
    clock_gettime(CLOCK_MONOTONIC, &r->began);
    for (long i = 0; i < run->reads && !r->error; i++) {
        r->error = read_block(run, buf, (uint64_t)order[at] * BLOCK);
        if (++at == run->blocks)
            at = 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &r->ended);
    free(order);
    free(buf);
    return NULL;
}

/* One run of `threads` readers: microseconds per read and reads per second
 * in all; -errno of the first failure, else 0. */
static int64_t run_readers(struct run *run, unsigned threads, double *us_per_read, double *reads_per_s) {
    pthread_t ids[MAX_THREADS];
    struct reader readers[MAX_THREADS];
    double first = 0, last = 0, busy = 0;
    int64_t error = 0;
    pthread_barrier_init(&run->start, NULL, threads);
    for (unsigned i = 0; i < threads; i++) {
        readers[i] = (struct reader){.run = run, .index = i};
        if (pthread_create(&ids[i], NULL, read_course, &readers[i]) != 0) {
            fprintf(stderr, "read_scaling: cannot start a reader thread\n");
            exit(EXIT_FAILURE);
        }
    }
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        double began = seconds(readers[i].began), ended = seconds(readers[i].ended);
        first = (i == 0 || began < first) ? began : first;
        last = ended > last ? ended : last;
        busy += ended - began;
        if (!error)
            error = readers[i].error;
    }
    pthread_barrier_destroy(&run->start);
    double reads = (double)run->reads * threads;
    *us_per_read = busy * 1e6 / reads;
    *reads_per_s = last > first ? reads / (last - first) : 0;
    return error;
}

/* The best of RUNS runs (most reads per second). */
static int64_t best_of_runs(struct run *run, unsigned threads, double *us_per_read, double *reads_per_s) {
    *us_per_read = 0;
    *reads_per_s = 0;
    for (int i = 0; i < RUNS; i++) {
        double us, per_s;
        int64_t rc = run_readers(run, threads, &us, &per_s);
        if (rc < 0)
            return rc;
        if (per_s > *reads_per_s) {
            *us_per_read = us;
            *reads_per_s = per_s;
        }
    }
    return 0;
}

/* Writes the region at path and reads it once through the kernel's cache;
 * returns the open descriptor, or -1 (with a message). */
static int lay_out(const char *path, uint64_t bytes) {
    char *chunk = malloc(1 << 20);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !chunk) {
        perror(path);
        free(chunk);
        return -1;
    }
    for (size_t i = 0; i < 1 << 20; i++)
        chunk[i] = (char)(i * 7 + i / 4096);
    for (uint64_t off = 0; off < bytes; off += 1 << 20) {
        size_t n = bytes - off < (1 << 20) ? (size_t)(bytes - off) : 1 << 20;
        if (pwrite(fd, chunk, n, (off_t)off) != (ssize_t)n || pread(fd, chunk, n, (off_t)off) != (ssize_t)n) {
            perror(path);
            close(fd);
            free(chunk);
            return -1;
        }
    }
    free(chunk);
    if (fdatasync(fd) != 0) {
        perror(path);
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads the region once through the cache, so it holds it. */
static int64_t warm(wbc_file *f, uint64_t bytes) {
    char *buf = malloc(1 << 20);
    int64_t rc = buf ? 0 : -ENOMEM;
    for (uint64_t off = 0; off < bytes && rc >= 0; off += 1 << 20)
        rc = wbc_pread(f, buf, 1 << 20, off, 0);
    free(buf);
    return rc < 0 ? rc : 0;
}

/* Every thread count on both engines, one line each. */
static int measure(struct run *kernel, struct run *cache) {
    static const unsigned counts[] = {1, 2, 4};
    printf("%-8s %14s %14s %14s %14s %16s\n", "threads", "pread us/read", "pread reads/s", "wbc us/read",
           "wbc reads/s", "wbc vs pread");
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        double k_us, k_per_s, w_us, w_per_s;
        int64_t rc = best_of_runs(kernel, counts[i], &k_us, &k_per_s);
        if (rc < 0) {
            fprintf(stderr, "read_scaling: pread: %s\n", strerror((int)-rc));
            return 1;
        }
        rc = best_of_runs(cache, counts[i], &w_us, &w_per_s);
        if (rc < 0) {
            fprintf(stderr, "read_scaling: wbc_pread: %s\n", strerror((int)-rc));
            return 1;
        }
        printf("%-8u %14.3f %14.0f %14.3f %14.0f %15.2fx\n", counts[i], k_us, k_per_s, w_us, w_per_s,
               k_per_s > 0 ? w_per_s / k_per_s : 0);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/var/tmp";
    long reads = argc > 2 ? atol(argv[2]) : 2000000;
    long region_mib = argc > 3 ? atol(argv[3]) : 64;
    char path[4096], options[64];
    if (reads <= 0 || region_mib <= 0 || region_mib > 4096) {
        fprintf(stderr, "usage: read_scaling [dir [reads-per-thread [region-MiB (1-4096)]]]\n");
        return 2;
    }
    uint64_t bytes = (uint64_t)region_mib << 20;
    snprintf(path, sizeof path, "%s/wbcache-read-scaling-%ld.bin", dir, (long)getpid());
    snprintf(options, sizeof options, "capacity=%ldM", region_mib * 2 + 64);
    int fd = lay_out(path, bytes);
    if (fd < 0)
        return 1;

    wbc_cache *c = NULL;
    wbc_file *f = NULL;
    int status = 1;
    int64_t rc = wbc_cache_open(options, &c);
    if (rc >= 0)
        rc = wbc_open(c, path, O_RDONLY, 0, &f);
    if (rc >= 0)
        rc = warm(f, bytes);
    if (rc < 0) {
        fprintf(stderr, "read_scaling: %s: %s\n", path, strerror((int)-rc));
    } else {
        struct run kernel = {.engine = KERNEL_PREAD, .fd = fd, .blocks = bytes / BLOCK, .reads = reads};
        struct run cache = {.engine = WBCACHE_PREAD, .file = f, .blocks = bytes / BLOCK, .reads = reads};
        printf("read_scaling: a cached %ld MiB region, random 4 KiB reads, %ld per thread after %d warmup reads, "
               "best of %d runs\n",
               region_mib, reads, WARMUP_READS, RUNS);
        status = measure(&kernel, &cache);
    }
    if (f)
        wbc_close(f);
    if (c)
        wbc_cache_close(c);
    close(fd);
    unlink(path);
    return status;
}
