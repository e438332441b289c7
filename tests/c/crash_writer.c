/* The C ABI's process-crash test program (capi/tests/capi/from_c.rs): writes 100-byte
 * records through libwbcache (never syncing: a cache whose dirty data
 * does not expire), printing "acked N" after every 64th record, until it
 * is killed. Record i is "record %08d " followed by bytes of (i % 251),
 * 100 bytes in all, at offset 100 * i of DIR/log. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "wbcache.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: crash_writer DIR\n");
        return 2;
    }
    wbc_cache *cache;
    int rc = wbc_cache_open("capacity=64M,dirty_limit=48M,dirty_background=40M,expire_ms=3600000", &cache);
    if (rc != 0) {
        fprintf(stderr, "wbc_cache_open: %d\n", rc);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/log", argv[1]);
    wbc_file *file;
    rc = wbc_open(cache, path, O_RDWR | O_CREAT, 0644, &file);
    if (rc != 0) {
        fprintf(stderr, "wbc_open: %d\n", rc);
        return 1;
    }
    for (unsigned long i = 0;; i++) {
        char record[100];
        memset(record, (int)(i % 251), sizeof record);
        char head[32];
        int n = snprintf(head, sizeof head, "record %08lu ", i);
        memcpy(record, head, (size_t)n);
        if (wbc_pwrite(file, record, sizeof record, i * sizeof record, 0) != (int64_t)sizeof record) {
            fprintf(stderr, "wbc_pwrite failed at record %lu\n", i);
            return 1;
        }
        if (i % 64 == 63) {
            printf("acked %lu\n", i);
            fflush(stdout);
        }
    }
}
