/* The lifetime test's C program (preload/tests/preload/lifetime.rs).
 *
 * Writes LEN bytes of a pattern to FILE with write(2), never syncing,
 * then ends the way MODE says: "return" from main, "exit", "_exit",
 * "_Exit", or "execve" into PROGRAM ARGS... (the data must be in the file
 * before the new program starts: it may read it).
 *
 * The pattern is preload/tests/common's pattern(LEN, 77).
 *
 * Usage: lifetime MODE FILE LEN [PROGRAM ARGS...]
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static uint64_t word(uint64_t i, uint64_t seed) {
    uint64_t rot = (seed << 17) | (seed >> 47);
    uint64_t x = (i ^ rot) * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

static int write_pattern(const char *path, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        return -1;
    }
    static unsigned char chunk[1 << 16];
    for (size_t at = 0; at < len; at += sizeof chunk) {
        size_t n = len - at < sizeof chunk ? len - at : sizeof chunk;
        for (size_t j = 0; j < n; j += 8) {
            uint64_t w = word((at + j) / 8, 77);
            memcpy(chunk + j, &w, n - j < 8 ? n - j : 8);
        }
        if (write(fd, chunk, n) != (ssize_t)n) {
            perror("write");
            return -1;
        }
    }
    return 0; /* fd left open: ending the process must write it back */
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: lifetime MODE FILE LEN [PROGRAM ARGS...]\n");
        return 2;
    }
    const char *mode = argv[1];
    if (write_pattern(argv[2], strtoull(argv[3], NULL, 10)) != 0)
        return 1;
    if (strcmp(mode, "return") == 0)
        return 0;
    if (strcmp(mode, "exit") == 0)
        exit(0);
    if (strcmp(mode, "_exit") == 0)
        _exit(0);
    if (strcmp(mode, "_Exit") == 0)
        _Exit(0);
    if (strcmp(mode, "execve") == 0 && argc > 4) {
        execve(argv[4], argv + 4, environ);
        perror("execve");
        return 1;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
