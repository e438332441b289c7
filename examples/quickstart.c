/*
 * quickstart.c - wbcache from C: open a cache and a file, write through the
 * cache, read back, sync, print the cache's statistics.
 *
 * Build it from the repository root, after `cargo build --release`:
 *   cc -o target/quickstart examples/quickstart.c -Iinclude target/release/libwbcache.a -lpthread -ldl -lm
 * (target/ keeps the program out of the source tree). Run it as
 * `target/quickstart [path]`; without a path it uses a new file in /tmp and
 * removes it at the end.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcache.h"

/* Every wbc_* function returns a value >= 0 or -errno; reports the latter. */
static int failed(int64_t rc, const char *what) {
    if (rc >= 0)
        return 0;
    fprintf(stderr, "quickstart: %s: %s\n", what, strerror((int)-rc));
    return 1;
}

int main(int argc, char **argv) {
    char tmp[64];
    const char *path = argv[1];
    if (argc < 2) {
        snprintf(tmp, sizeof tmp, "/tmp/wbcache-quickstart-%ld.db", (long)getpid());
        path = tmp;
    }

    wbc_cache *c;
    wbc_file *f;
    if (failed(wbc_cache_open("capacity=256M,dirty_limit=64M,io=uring", &c), "wbc_cache_open"))
        return EXIT_FAILURE;
    if (failed(wbc_open(c, path, O_RDWR | O_CREAT, 0644, &f), path)) {
        wbc_cache_close(c);
        return EXIT_FAILURE;
    }

    int status = EXIT_FAILURE;
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    char buf[5];
    char json[8192];
    int64_t n;
    if (failed(wbc_pwrite(f, "hello", 5, 4096, 0), "wbc_pwrite"))           /* into the cache, dirty */
        goto out;
    if (failed(wbc_pwrite(f, "log", 3, 0, WBC_DONTCACHE), "wbc_pwrite"))    /* uncached write */
        goto out;
    if (failed(wbc_pwritev(f, iov, 2, 8192, 0), "wbc_pwritev"))             /* writes "abcd"; wbc_preadv reads */
        goto out;
    if (failed(n = wbc_pread(f, buf, sizeof buf, 4096, 0), "wbc_pread"))    /* served from the cache */
        goto out;
    printf("read back: %.*s\n", (int)n, buf);
    if (failed(wbc_fdatasync(f), "wbc_fdatasync"))                          /* durable on return */
        goto out;
    if (failed(n = wbc_stats_json(c, json, sizeof json), "wbc_stats_json")) /* the JSON's length */
        goto out;
    if (n >= (int64_t)sizeof json) {
        fprintf(stderr, "quickstart: statistics longer than %zu bytes\n", sizeof json);
        goto out;
    }
    puts(json);
    status = EXIT_SUCCESS;

out:
    if (failed(wbc_close(f), "wbc_close"))
        status = EXIT_FAILURE;
    if (failed(wbc_cache_close(c), "wbc_cache_close")) /* writes back and syncs everything */
        status = EXIT_FAILURE;
    if (argc < 2 && unlink(path) != 0) {
        perror(path);
        status = EXIT_FAILURE;
    }
    return status;
}
