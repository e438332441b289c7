/* stdio on files in DIR, mixed with read(2)/write(2) on other descriptors
 * of the same files: `stdio SCENARIO DIR`. Every scenario prints what it
 * reads (never descriptor numbers or paths), so a run under
 * libwbcache_preload.so must print what a run without it prints and leave
 * the same files behind; `probe` alone tells the cache from the kernel. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

/* DIR/name, in one of a few rotating buffers. */
static const char *at(const char *name)
{
    static char paths[8][4096];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, sizeof paths[0], "%s/%s", dir, name);
    return path;
}

#define CHECK(c)                                                                                \
    do {                                                                                        \
        if (!(c)) {                                                                             \
            fprintf(stderr, "line %d: %s failed (errno %d)\n", __LINE__, #c, errno);            \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static void show(FILE *to, const char *label, const char *data, size_t len)
{
    fprintf(to, "%s: [%.*s]\n", label, (int)len, data);
}

/* The whole file, through a new descriptor and read(2). */
static void show_file(FILE *to, const char *label, const char *path)
{
    char buf[8192];
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf);
    CHECK(n >= 0);
    CHECK(close(fd) == 0);
    show(to, label, buf, (size_t)n);
}

/* The whole file as the kernel has it, with no C library wrapper. */
static void show_kernel_file(const char *label, const char *path)
{
    char buf[8192];
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    CHECK(fd >= 0);
    long n = syscall(SYS_read, fd, buf, sizeof buf);
    CHECK(n >= 0);
    CHECK(syscall(SYS_close, fd) == 0);
    show(stdout, label, buf, (size_t)n);
}

static void put(int fd, const char *text)
{
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
}

static void basic(void)
{
    char buf[256];
    int fd = open(at("a"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    put(fd, "0123456789\n");
    FILE *r = fopen(at("a"), "r");
    CHECK(r != NULL);
    CHECK(fgets(buf, sizeof buf, r) != NULL);
    show(stdout, "fgets after write", buf, strlen(buf));
    put(fd, "abc");
    CHECK(fseek(r, 0, SEEK_SET) == 0);
    size_t n = fread(buf, 1, sizeof buf, r);
    show(stdout, "fread after seek", buf, n);
    CHECK(fclose(r) == 0);

    FILE *w = fopen(at("b"), "w");
    CHECK(w != NULL);
    CHECK(fprintf(w, "hello %d\n", 42) > 0);
    CHECK(fwrite("world\n", 1, 6, w) == 6);
    CHECK(fflush(w) == 0);
    show_file(stdout, "b after fflush", at("b"));
    CHECK(fseek(w, 0, SEEK_SET) == 0);
    CHECK(fputs("HE", w) >= 0);
    CHECK(fflush(w) == 0);
    show_file(stdout, "b after fseek and fputs", at("b"));
    printf("ftell: %ld\n", ftell(w));
    int wfd = fileno(w);
    CHECK(wfd >= 0);
    CHECK(fsync(wfd) == 0);
    struct stat st;
    CHECK(fstat(wfd, &st) == 0);
    printf("fstat size: %lld\n", (long long)st.st_size);
    CHECK(lseek(wfd, 0, SEEK_END) == 15);
    put(wfd, "raw\n");
    CHECK(fseek(w, 0, SEEK_END) == 0);
    printf("ftell at end: %ld\n", ftell(w));
    CHECK(fputs("tail\n", w) >= 0);
    CHECK(fclose(w) == 0);
    show_file(stdout, "b after fclose", at("b"));
    CHECK(close(fd) == 0);
}

static void modes(void)
{
    char buf[256];
    int fd = open(at("m"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    put(fd, "0123456789");

    FILE *f = fopen(at("m"), "a");
    CHECK(f != NULL);
    printf("a: ftell at open %ld\n", ftell(f));
    CHECK(fputs("A1", f) >= 0);
    CHECK(fflush(f) == 0);
    CHECK(pwrite(fd, "X", 1, 12) == 1);
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    CHECK(fputs("A2", f) >= 0);
    CHECK(fflush(f) == 0);
    printf("a: ftell after writes %ld\n", ftell(f));
    errno = 0;
    size_t n = fread(buf, 1, 4, f);
    printf("a: fread %zu, error %d, EBADF %d\n", n, ferror(f) != 0, errno == EBADF);
    CHECK(fclose(f) == 0);
    show_file(stdout, "m after a", at("m"));

    f = fopen(at("m"), "a+");
    CHECK(f != NULL);
    printf("a+: ftell at open %ld\n", ftell(f));
    n = fread(buf, 1, 5, f);
    show(stdout, "a+: fread", buf, n);
    CHECK(fputs("P", f) >= 0);
    CHECK(fflush(f) == 0);
    printf("a+: ftell after write %ld\n", ftell(f));
    rewind(f);
    n = fread(buf, 1, sizeof buf, f);
    show(stdout, "a+: fread again", buf, n);
    CHECK(fclose(f) == 0);

    f = fopen(at("m"), "r+");
    CHECK(f != NULL);
    CHECK(fseek(f, 2, SEEK_SET) == 0);
    CHECK(fputc('#', f) == '#');
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    n = fread(buf, 1, sizeof buf, f);
    show(stdout, "r+: fread", buf, n);
    CHECK(fclose(f) == 0);

    f = fopen(at("m"), "r");
    CHECK(f != NULL);
    errno = 0;
    int rc = fputs("no", f);
    printf("r: fputs %d, EBADF %d\n", rc == EOF ? -1 : 0, errno == EBADF);
    CHECK(fclose(f) == 0);

    f = fopen(at("m"), "w+");
    CHECK(f != NULL);
    show_file(stdout, "m after w+", at("m"));
    CHECK(fputs("fresh", f) >= 0);
    rewind(f);
    n = fread(buf, 1, sizeof buf, f);
    show(stdout, "w+: fread", buf, n);
    CHECK(fclose(f) == 0);

    errno = 0;
    f = fopen(at("m"), "wx");
    printf("wx on a file: %s, EEXIST %d\n", f ? "opened" : "NULL", errno == EEXIST);
    f = fopen(at("x"), "wbx");
    CHECK(f != NULL);
    CHECK(fputs("x", f) >= 0);
    CHECK(fclose(f) == 0);
    f = fopen(at("m"), "re");
    CHECK(f != NULL);
    printf("e: cloexec %d\n", (fcntl(fileno(f), F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(fclose(f) == 0);
    f = fopen(at("m"), "rb");
    CHECK(f != NULL);
    printf("rb: cloexec %d\n", (fcntl(fileno(f), F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(fclose(f) == 0);
    errno = 0;
    f = fopen(at("missing"), "r");
    printf("missing: %s, ENOENT %d\n", f ? "opened" : "NULL", errno == ENOENT);
    errno = 0;
    f = fopen(at("m"), "q");
    printf("mode q: %s, EINVAL %d\n", f ? "opened" : "NULL", errno == EINVAL);
    CHECK(close(fd) == 0);
}

static void fd_streams(void)
{
    char buf[256];
    int fd = open(at("d"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w+");
    CHECK(f != NULL);
    printf("fileno is the descriptor: %d\n", fileno(f) == fd);
    CHECK(fprintf(f, "via fdopen\n") > 0);
    CHECK(fflush(f) == 0);
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    show(stdout, "pread after fflush", buf, (size_t)n);
    CHECK(pwrite(fd, "V", 1, 0) == 1);
    rewind(f);
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    show(stdout, "fgets after pwrite", buf, strlen(buf));
    CHECK(fclose(f) == 0);
    errno = 0;
    printf("fclose closed the descriptor: %d\n", fcntl(fd, F_GETFD) == -1 && errno == EBADF);

    int ro = open(at("d"), O_RDONLY);
    CHECK(ro >= 0);
    errno = 0;
    f = fdopen(ro, "w");
    printf("fdopen w on O_RDONLY: %s, EINVAL %d\n", f ? "opened" : "NULL", errno == EINVAL);
    f = fdopen(ro, "r");
    CHECK(f != NULL);
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    show(stdout, "fdopen r", buf, strlen(buf));
    CHECK(fclose(f) == 0);

    int wo = open(at("d"), O_WRONLY);
    CHECK(wo >= 0);
    f = fdopen(wo, "a");
    CHECK(f != NULL);
    printf("fdopen a: O_APPEND %d, ftell %ld\n", (fcntl(wo, F_GETFL) & O_APPEND) != 0, ftell(f));
    CHECK(fputs("appended\n", f) >= 0);
    CHECK(fclose(f) == 0);
    show_file(stdout, "d at the end", at("d"));
}

static void text(void)
{
    /* The writers stay open while the stream reads: nothing is written
     * back to the kernel by a last close. */
    int fd = open(at("t"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    put(fd, "12 34\nline two\nline three\n");
    FILE *f = fopen(at("t"), "r");
    CHECK(f != NULL);
    int a, b;
    CHECK(fscanf(f, "%d %d\n", &a, &b) == 2);
    printf("fscanf: %d %d\n", a, b);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0)
        show(stdout, "getline", line, (size_t)len);
    printf("feof: %d\n", feof(f) != 0);
    int appender = open(at("t"), O_WRONLY | O_APPEND);
    CHECK(appender >= 0);
    put(appender, "more\n");
    clearerr(f);
    len = getline(&line, &cap, f);
    show(stdout, "getline after an append", line, len > 0 ? (size_t)len : 0);
    rewind(f);
    int c = getc(f);
    CHECK(ungetc(c, f) == c);
    int d = getc(f);
    printf("getc, ungetc, getc: %c %c\n", c, d);
    free(line);
    CHECK(fclose(f) == 0);
    CHECK(close(appender) == 0);
    CHECK(close(fd) == 0);
}

static unsigned long sum(const unsigned char *p, size_t n)
{
    unsigned long s = 0;
    for (size_t i = 0; i < n; i++)
        s = s * 31 + p[i];
    return s;
}

static void big(void)
{
    static unsigned char chunk[997], back[1 << 21];
    FILE *f = fopen(at("big"), "w+");
    CHECK(f != NULL);
    for (int k = 0; k < 1500; k++) {
        for (size_t i = 0; i < sizeof chunk; i++)
            chunk[i] = (unsigned char)(k * 31 + i);
        CHECK(fwrite(chunk, 1, sizeof chunk, f) == sizeof chunk);
    }
    CHECK(fflush(f) == 0);
    int fd = open(at("big"), O_RDONLY);
    CHECK(fd >= 0);
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd, back + got, sizeof back - got)) > 0)
        got += (size_t)n;
    printf("read(2) after fwrite: %zu bytes, sum %lu\n", got, sum(back, got));
    CHECK(fseek(f, 12345, SEEK_SET) == 0);
    size_t m = fread(back, 1, 50000, f);
    printf("fread at 12345: %zu bytes, sum %lu\n", m, sum(back, m));

    FILE *u = fopen(at("big"), "r+");
    CHECK(u != NULL);
    CHECK(setvbuf(u, NULL, _IONBF, 0) == 0);
    CHECK(fseek(u, 100, SEEK_SET) == 0);
    CHECK(fwrite("ZZZ", 1, 3, u) == 3);
    char three[3];
    CHECK(pread(fd, three, 3, 100) == 3);
    show(stdout, "unbuffered fwrite, pread", three, 3);
    CHECK(fclose(u) == 0);
    CHECK(fseek(f, 98, SEEK_SET) == 0);
    m = fread(back, 1, 7, f);
    printf("fread over it: %zu bytes, sum %lu\n", m, sum(back, m));
    CHECK(fclose(f) == 0);
    CHECK(close(fd) == 0);
}

static void reopen(void)
{
    char buf[256];
    CHECK(fflush(stdout) == 0);
    FILE *out = freopen(at("out"), "w", stdout);
    CHECK(out != NULL);
    printf("line one\n");
    puts("line two");
    CHECK(fflush(stdout) == 0);
    fprintf(stderr, "fileno(stdout) is 1: %d\n", fileno(stdout) == 1);
    fprintf(stderr, "freopen answered stdout: %d\n", out == stdout);
    put(1, "written to 1\n");
    printf("line three\n");
    CHECK(fflush(stdout) == 0);
    show_file(stderr, "out", at("out"));

    int fd = open(at("out2"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    put(fd, "existing\n");
    CHECK(close(fd) == 0);
    FILE *same = freopen(at("out2"), "a", stdout);
    fprintf(stderr, "reopened the same stream: %d, fileno 1: %d\n", same == out, fileno(stdout) == 1);
    printf("appended\n");
    CHECK(fflush(stdout) == 0);
    show_file(stderr, "out2", at("out2"));
    CHECK(freopen(NULL, "r+", stdout) != NULL);
    CHECK(fgets(buf, sizeof buf, stdout) != NULL);
    show(stderr, "freopen without a path, fgets", buf, strlen(buf));
    CHECK(fseek(stdout, 0, SEEK_END) == 0);
    printf("last\n");
    CHECK(fclose(stdout) == 0);
    show_file(stderr, "out2 closed", at("out2"));

    fd = open(at("in"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    put(fd, "7 8\n");
    CHECK(close(fd) == 0);
    CHECK(freopen(at("in"), "r", stdin) != NULL);
    int a, b;
    CHECK(scanf("%d %d", &a, &b) == 2);
    fprintf(stderr, "scanf from the reopened stdin: %d %d\n", a, b);

    FILE *g = fopen(at("g"), "w");
    CHECK(g != NULL);
    CHECK(fputs("kept", g) >= 0);
    FILE *g2 = freopen("/dev/null", "w", g);
    fprintf(stderr, "reopened onto /dev/null, same stream: %d\n", g2 == g);
    CHECK(fputs("dropped", g) >= 0);
    CHECK(fclose(g) == 0);
    show_file(stderr, "g", at("g"));
}

/* A stream of a file outside DIR reopened onto a file inside it: the C
 * library's freopen under the preload (one line on stderr says so). */
static void foreign(void)
{
    FILE *f = fopen(at("../outside"), "w");
    CHECK(f != NULL);
    FILE *g = freopen(at("inside"), "w", f);
    CHECK(g == f);
    CHECK(fputs("through the C library", f) >= 0);
    CHECK(fclose(f) == 0);
    show_file(stdout, "inside", at("inside"));
    CHECK(unlink(at("../outside")) == 0);
}

static FILE *late;

static void write_late(void)
{
    CHECK(fputs("late\n", late) >= 0);
    CHECK(fclose(late) == 0);
}

static void at_exit(void)
{
    /* Registered before the first managed file: runs after the cache's
     * own exit handler. */
    CHECK(atexit(write_late) == 0);
    late = fopen(at("late"), "w");
    CHECK(late != NULL);
    CHECK(fputs("early\n", late) >= 0);
    FILE *kept = fopen(at("kept"), "w");
    CHECK(kept != NULL);
    CHECK(fprintf(kept, "never closed, never flushed\n") > 0);
    /* A stream holding read-ahead at exit: the C library seeks back. */
    int fd = open(at("read"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    put(fd, "abcdef");
    FILE *reader = fopen(at("read"), "r");
    CHECK(reader != NULL);
    CHECK(fgetc(reader) == 'a');
    exit(0);
}

/* A forked child writes through the streams it inherited. */
static void forked(void)
{
    FILE *log = fopen(at("log"), "a");
    CHECK(log != NULL);
    CHECK(fputs("parent\n", log) >= 0);
    CHECK(fflush(log) == 0);
    FILE *data = fopen(at("data"), "w+");
    CHECK(data != NULL);
    CHECK(fputs("0123456789", data) >= 0);
    CHECK(fflush(data) == 0);
    CHECK(fseek(data, 4, SEEK_SET) == 0);
    CHECK(fflush(stdout) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK(fputs("child\n", log) >= 0);
        CHECK(fputs("CC", data) >= 0);
        CHECK(fflush(data) == 0);
        char buf[32];
        CHECK(fseek(data, 0, SEEK_SET) == 0);
        size_t n = fread(buf, 1, sizeof buf, data);
        show(stdout, "the child reads", buf, n);
        printf("the child's position: %ld\n", ftell(data));
        exit(0); /* flushes the log */
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(fclose(log) == 0);
    CHECK(fclose(data) == 0);
    /* Read from the kernel: the parent's cache keeps the pages it had
     * and does not see what a child wrote through the kernel. */
    show_kernel_file("log", at("log"));
    show_kernel_file("data", at("data"));
}

static FILE *shared;

static void *writer(void *arg)
{
    long id = (long)arg;
    char name[32];
    snprintf(name, sizeof name, "thread%ld", id);
    FILE *own = fopen(at(name), "w");
    CHECK(own != NULL);
    for (int i = 0; i < 2000; i++) {
        CHECK(fprintf(shared, "thread %ld line %04d\n", id, i) > 0);
        CHECK(fprintf(own, "%04d\n", i) > 0);
        if (i % 500 == 0)
            CHECK(fsync(fileno(own)) == 0);
    }
    CHECK(fclose(own) == 0);
    return NULL;
}

static void threads(void)
{
    shared = fopen(at("shared"), "w");
    CHECK(shared != NULL);
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, writer, (void *)i) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(fclose(shared) == 0);
    FILE *f = fopen(at("shared"), "r");
    CHECK(f != NULL);
    int per[4] = {0};
    char line[64];
    long id;
    int i;
    while (fgets(line, sizeof line, f) != NULL) {
        CHECK(sscanf(line, "thread %ld line %d", &id, &i) == 2 && id >= 0 && id < 4 && i == per[id]);
        per[id]++;
    }
    CHECK(fclose(f) == 0);
    printf("lines per thread, in order: %d %d %d %d\n", per[0], per[1], per[2], per[3]);
    /* The threads' lines interleave differently each run. */
    CHECK(unlink(at("shared")) == 0);
}

/* The size the kernel has, asked without the C library's wrappers. */
static long kernel_size(int fd)
{
    struct stat st;
    CHECK(syscall(SYS_fstat, fd, &st) == 0);
    return (long)st.st_size;
}

static void probe(void)
{
    char block[8192];
    memset(block, 'p', sizeof block);
    FILE *f = fopen(at("p"), "w");
    CHECK(f != NULL);
    CHECK(fwrite(block, 1, sizeof block, f) == sizeof block);
    CHECK(fflush(f) == 0);
    int fd = fileno(f);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    printf("fwrite: size %lld, the kernel's %ld\n", (long long)st.st_size, kernel_size(fd));
    CHECK(fsync(fd) == 0);
    printf("fsync(fileno): the kernel's size %ld\n", kernel_size(fd));
    CHECK(fclose(f) == 0);

    int w = open(at("q"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(w >= 0);
    put(w, "cached bytes");
    FILE *r = fopen(at("q"), "r");
    CHECK(r != NULL);
    size_t n = fread(block, 1, sizeof block, r);
    printf("write(2), fread: [%.*s], the kernel's size %ld\n", (int)n, block, kernel_size(w));
    CHECK(fclose(r) == 0);
    CHECK(close(w) == 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: stdio SCENARIO DIR\n");
        return 2;
    }
    dir = argv[2];
    const char *s = argv[1];
    if (strcmp(s, "basic") == 0)
        basic();
    else if (strcmp(s, "modes") == 0)
        modes();
    else if (strcmp(s, "fdopen") == 0)
        fd_streams();
    else if (strcmp(s, "text") == 0)
        text();
    else if (strcmp(s, "big") == 0)
        big();
    else if (strcmp(s, "freopen") == 0)
        reopen();
    else if (strcmp(s, "exit") == 0)
        at_exit();
    else if (strcmp(s, "threads") == 0)
        threads();
    else if (strcmp(s, "fork") == 0)
        forked();
    else if (strcmp(s, "foreign") == 0)
        foreign();
    else if (strcmp(s, "probe") == 0)
        probe();
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    return 0;
}
