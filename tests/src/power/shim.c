/*
 * The power-cut layer: an LD_PRELOAD shim for the daemon under test.
 *
 * Every write to a regular file under $POWERCUT_DIR reaches the file (the
 * process reads its own writes, as with a page cache), but first the bytes
 * it overwrites and the file's length are appended to an undo log
 * ($POWERCUT_LOG, outside the directory). fsync/fdatasync (and writes
 * through an O_SYNC/O_DSYNC descriptor, syncfs, sync) append a marker: the
 * file's writes logged before it are durable. sync_file_range is NOT a
 * marker: it starts writeback but flushes neither the disk's cache nor the
 * file's size, so it is no durability barrier. A "power cut" is a SIGKILL
 * of the process (and all it started) followed by
 * `agent_tests::power::layer::cut`, which undoes,
 * newest first, every logged write not covered by a later marker of its
 * file: each file is left exactly as of its last sync.
 *
 * Intercepted: write, writev, pwrite(64), pwritev(64)(v2), ftruncate(64),
 * fallocate(64), posix_fallocate(64), copy_file_range, sendfile(64), splice
 * (the writing side), fsync, fdatasync, syncfs, sync. A writable shared mmap of
 * a tracked file cannot be followed: it logs a record that makes the cut
 * fail loudly. Metadata (create, rename, unlink, mkdir) is not logged: it
 * counts as durable at once, which is weaker than a real power cut (a new
 * file's name can be lost without a directory fsync).
 *
 * The log is one record per write(2) (O_APPEND); each record holds its own
 * position in the log, which is what a marker's "up to" refers to, so the
 * log spans daemon restarts until a cut (the page cache does too).
 * The shim removes LD_PRELOAD and POWERCUT_* from the environment at load,
 * so programs the daemon starts (tools) run without it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { REC_WRITE = 1, REC_SYNC = 2, REC_SYNC_ALL = 3, REC_MMAP = 4 };

/* Little-endian on every platform this runs on (x86_64, aarch64). */
struct header {
    uint32_t magic;     /* "PCUT" */
    uint32_t kind;
    uint64_t at;        /* this record's position in the log */
    uint64_t dev, ino;
    uint64_t offset;    /* REC_WRITE: start of the range; REC_SYNC*: up to */
    uint64_t old_size;  /* REC_WRITE: the file's length before */
    uint32_t path_len;
    uint32_t old_len;   /* bytes of old content that follow the path */
};
#define MAGIC 0x54554350u

static char dir[PATH_MAX];
static size_t dir_len;
static int log_fd = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

#define REAL(ret, name, ...)                                                   \
    static ret (*real_##name)(__VA_ARGS__);                                    \
    static ret (*get_##name(void))(__VA_ARGS__) {                              \
        if (!real_##name)                                                      \
            real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);        \
        return real_##name;                                                    \
    }

REAL(ssize_t, write, int, const void *, size_t)
REAL(ssize_t, writev, int, const struct iovec *, int)
REAL(ssize_t, pwrite, int, const void *, size_t, off_t)
REAL(ssize_t, pwrite64, int, const void *, size_t, off64_t)
REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t)
REAL(ssize_t, pwritev64, int, const struct iovec *, int, off64_t)
REAL(ssize_t, pwritev2, int, const struct iovec *, int, off_t, int)
REAL(ssize_t, pwritev64v2, int, const struct iovec *, int, off64_t, int)
REAL(int, ftruncate, int, off_t)
REAL(int, ftruncate64, int, off64_t)
REAL(int, fallocate, int, int, off_t, off_t)
REAL(int, fallocate64, int, int, off64_t, off64_t)
REAL(int, posix_fallocate, int, off_t, off_t)
REAL(int, posix_fallocate64, int, off64_t, off64_t)
REAL(ssize_t, copy_file_range, int, off64_t *, int, off64_t *, size_t, unsigned int)
REAL(ssize_t, sendfile, int, int, off_t *, size_t)
REAL(ssize_t, sendfile64, int, int, off64_t *, size_t)
REAL(ssize_t, splice, int, off64_t *, int, off64_t *, size_t, unsigned int)
REAL(int, fsync, int)
REAL(int, fdatasync, int)
REAL(int, syncfs, int)
REAL(void, sync, void)

static void die(const char *what) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "powercut shim: %s: %s\n", what, strerror(errno));
    if (n > 0)
        get_write()(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    abort();
}

__attribute__((constructor)) static void init(void) {
    const char *d = getenv("POWERCUT_DIR");
    const char *l = getenv("POWERCUT_LOG");
    if (!d || !l)
        return;
    mkdir(d, 0700);
    if (!realpath(d, dir))
        die("cannot resolve POWERCUT_DIR");
    dir_len = strlen(dir);
    log_fd = open(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0)
        die("cannot open POWERCUT_LOG");
    unsetenv("LD_PRELOAD");
    unsetenv("POWERCUT_DIR");
    unsetenv("POWERCUT_LOG");
}

/* Whether fd is a regular file under the directory; its stat and path. */
static int tracked(int fd, struct stat *st, char *path, uint32_t *path_len) {
    if (log_fd < 0 || fd < 0 || fd == log_fd)
        return 0;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode))
        return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, PATH_MAX - 1);
    if (n <= 0)
        return 0;
    path[n] = 0;
    if ((size_t)n <= dir_len || memcmp(path, dir, dir_len) != 0 || path[dir_len] != '/')
        return 0;
    *path_len = (uint32_t)n;
    return 1;
}

static uint64_t log_position(void) {
    struct stat st;
    if (fstat(log_fd, &st) != 0)
        die("cannot stat the log");
    return (uint64_t)st.st_size;
}

static void append(struct header *h, const char *path, const void *old) {
    h->magic = MAGIC;
    h->at = log_position();
    struct iovec iov[3] = {
        {h, sizeof *h}, {(void *)path, h->path_len}, {(void *)old, h->old_len}};
    size_t want = sizeof *h + h->path_len + h->old_len;
    ssize_t n = get_writev()(log_fd, iov, 3);
    if (n < 0 || (size_t)n != want)
        die("cannot append to the log");
}

/* Logs what writing [offset, offset + len) of fd would overwrite. Called
 * with mu held, before the write. */
static void log_range(int fd, const struct stat *st, const char *path, uint32_t path_len,
                      uint64_t offset, uint64_t len) {
    uint64_t size = (uint64_t)st->st_size;
    uint64_t end = offset + len;
    uint64_t old_len = 0;
    if (offset < size)
        old_len = (end < size ? end : size) - offset;
    char *old = NULL;
    if (old_len > 0) {
        old = malloc(old_len);
        if (!old)
            die("out of memory");
        /* The descriptor may be write-only: read through a new one. */
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        int rfd = open(link, O_RDONLY | O_CLOEXEC);
        if (rfd < 0)
            die("cannot reopen a file to read what a write overwrites");
        uint64_t got = 0;
        while (got < old_len) {
            ssize_t n = pread(rfd, old + got, old_len - got, (off_t)(offset + got));
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                die("cannot read what a write overwrites");
            }
            got += (uint64_t)n;
        }
        close(rfd);
    }
    struct header h = {0};
    h.kind = REC_WRITE;
    h.dev = (uint64_t)st->st_dev;
    h.ino = (uint64_t)st->st_ino;
    h.offset = offset;
    h.old_size = size;
    h.path_len = path_len;
    h.old_len = (uint32_t)old_len;
    if ((uint64_t)h.old_len != old_len)
        die("a single write of 4 GiB or more");
    append(&h, path, old);
    free(old);
}

static void log_sync(const struct stat *st, uint64_t upto) {
    struct header h = {0};
    h.kind = st ? REC_SYNC : REC_SYNC_ALL;
    if (st) {
        h.dev = (uint64_t)st->st_dev;
        h.ino = (uint64_t)st->st_ino;
    }
    h.offset = upto;
    append(&h, "", NULL);
}

/* Where a write without an offset lands. */
static uint64_t current_offset(int fd, const struct stat *st) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_APPEND))
        return (uint64_t)st->st_size;
    off_t at = lseek(fd, 0, SEEK_CUR);
    return at < 0 ? 0 : (uint64_t)at;
}

static int sync_flags(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & (O_SYNC | O_DSYNC));
}

/* The common path: log, write, and a marker after a write through an
 * O_SYNC or O_DSYNC descriptor. `pos` < 0: at the current offset. */
#define GUARDED(fd, pos, len, call)                                            \
    do {                                                                       \
        struct stat st;                                                        \
        char path[PATH_MAX];                                                   \
        uint32_t path_len;                                                     \
        int saved = errno;                                                     \
        if (!tracked(fd, &st, path, &path_len)) {                              \
            errno = saved;                                                     \
            return call;                                                       \
        }                                                                      \
        pthread_mutex_lock(&mu);                                               \
        /* The length now, not before the lock: another thread may have    \
         * appended in between. */                                         \
        fstat(fd, &st);                                                        \
        uint64_t at = (pos) < 0 ? current_offset(fd, &st) : (uint64_t)(pos);   \
        log_range(fd, &st, path, path_len, at, (uint64_t)(len));               \
        int synced = sync_flags(fd);                                           \
        errno = saved;                                                         \
        __typeof__(call) r = call;                                             \
        int e = errno;                                                         \
        if (synced && r >= 0)                                                  \
            log_sync(&st, log_position());                                     \
        pthread_mutex_unlock(&mu);                                             \
        errno = e;                                                             \
        return r;                                                              \
    } while (0)

static uint64_t iov_len(const struct iovec *iov, int n) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    return total;
}

ssize_t write(int fd, const void *buf, size_t n) {
    GUARDED(fd, -1, n, get_write()(fd, buf, n));
}
ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    GUARDED(fd, -1, iov_len(iov, cnt), get_writev()(fd, iov, cnt));
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    GUARDED(fd, off, n, get_pwrite()(fd, buf, n, off));
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    GUARDED(fd, off, n, get_pwrite64()(fd, buf, n, off));
}
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    GUARDED(fd, off, iov_len(iov, cnt), get_pwritev()(fd, iov, cnt, off));
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    GUARDED(fd, off, iov_len(iov, cnt), get_pwritev64()(fd, iov, cnt, off));
}
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    GUARDED(fd, off, iov_len(iov, cnt), get_pwritev2()(fd, iov, cnt, off, flags));
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
    GUARDED(fd, off, iov_len(iov, cnt), get_pwritev64v2()(fd, iov, cnt, off, flags));
}

/* A length change: the range between the old and the new length. */
#define RESIZE(fd, len, call)                                                  \
    do {                                                                       \
        struct stat st;                                                        \
        char path[PATH_MAX];                                                   \
        uint32_t path_len;                                                     \
        int saved = errno;                                                     \
        if ((len) < 0 || !tracked(fd, &st, path, &path_len)) {                 \
            errno = saved;                                                     \
            return call;                                                       \
        }                                                                      \
        pthread_mutex_lock(&mu);                                               \
        fstat(fd, &st);                                                        \
        uint64_t size = (uint64_t)st.st_size, want = (uint64_t)(len);          \
        if (want < size)                                                       \
            log_range(fd, &st, path, path_len, want, size - want);             \
        else                                                                   \
            log_range(fd, &st, path, path_len, size, want - size);             \
        errno = saved;                                                         \
        int r = call;                                                          \
        int e = errno;                                                         \
        pthread_mutex_unlock(&mu);                                             \
        errno = e;                                                             \
        return r;                                                              \
    } while (0)

int ftruncate(int fd, off_t len) { RESIZE(fd, len, get_ftruncate()(fd, len)); }
int ftruncate64(int fd, off64_t len) { RESIZE(fd, len, get_ftruncate64()(fd, len)); }

int fallocate(int fd, int mode, off_t off, off_t len) {
    GUARDED(fd, off, len, get_fallocate()(fd, mode, off, len));
}
int fallocate64(int fd, int mode, off64_t off, off64_t len) {
    GUARDED(fd, off, len, get_fallocate64()(fd, mode, off, len));
}
int posix_fallocate(int fd, off_t off, off_t len) {
    GUARDED(fd, off, len, get_posix_fallocate()(fd, off, len));
}
int posix_fallocate64(int fd, off64_t off, off64_t len) {
    GUARDED(fd, off, len, get_posix_fallocate64()(fd, off, len));
}
ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off, size_t n,
                        unsigned int flags) {
    GUARDED(out, out_off ? *out_off : -1, n,
            get_copy_file_range()(in, in_off, out, out_off, n, flags));
}
ssize_t sendfile(int out, int in, off_t *off, size_t n) {
    GUARDED(out, -1, n, get_sendfile()(out, in, off, n));
}
ssize_t sendfile64(int out, int in, off64_t *off, size_t n) {
    GUARDED(out, -1, n, get_sendfile64()(out, in, off, n));
}

ssize_t splice(int in, off64_t *in_off, int out, off64_t *out_off, size_t n,
               unsigned int flags) {
    GUARDED(out, out_off ? *out_off : -1, n, get_splice()(in, in_off, out, out_off, n, flags));
}

/* Everything logged before the call began is durable once it returns. */
#define SYNC(fd, call)                                                         \
    do {                                                                       \
        struct stat st;                                                        \
        char path[PATH_MAX];                                                   \
        uint32_t path_len;                                                     \
        int saved = errno;                                                     \
        if (!tracked(fd, &st, path, &path_len)) {                              \
            errno = saved;                                                     \
            return call;                                                       \
        }                                                                      \
        pthread_mutex_lock(&mu);                                               \
        uint64_t upto = log_position();                                        \
        pthread_mutex_unlock(&mu);                                             \
        errno = saved;                                                         \
        int r = call;                                                          \
        int e = errno;                                                         \
        if (r == 0) {                                                          \
            pthread_mutex_lock(&mu);                                           \
            log_sync(&st, upto);                                               \
            pthread_mutex_unlock(&mu);                                         \
        }                                                                      \
        errno = e;                                                             \
        return r;                                                              \
    } while (0)

int fsync(int fd) { SYNC(fd, get_fsync()(fd)); }
int fdatasync(int fd) { SYNC(fd, get_fdatasync()(fd)); }

int syncfs(int fd) {
    int saved = errno;
    uint64_t upto = 0;
    if (log_fd >= 0) {
        pthread_mutex_lock(&mu);
        upto = log_position();
        pthread_mutex_unlock(&mu);
    }
    errno = saved;
    int r = get_syncfs()(fd);
    int e = errno;
    if (r == 0 && log_fd >= 0) {
        pthread_mutex_lock(&mu);
        log_sync(NULL, upto);
        pthread_mutex_unlock(&mu);
    }
    errno = e;
    return r;
}

void sync(void) {
    uint64_t upto = 0;
    if (log_fd >= 0) {
        pthread_mutex_lock(&mu);
        upto = log_position();
        pthread_mutex_unlock(&mu);
    }
    get_sync()();
    if (log_fd >= 0) {
        pthread_mutex_lock(&mu);
        log_sync(NULL, upto);
        pthread_mutex_unlock(&mu);
    }
}

static void check_mmap(int prot, int flags, int fd) {
    struct stat st;
    char path[PATH_MAX];
    uint32_t path_len;
    int saved = errno;
    if ((prot & PROT_WRITE) && (flags & MAP_SHARED) && tracked(fd, &st, path, &path_len)) {
        pthread_mutex_lock(&mu);
        struct header h = {0};
        h.kind = REC_MMAP;
        h.dev = (uint64_t)st.st_dev;
        h.ino = (uint64_t)st.st_ino;
        h.path_len = path_len;
        append(&h, path, NULL);
        pthread_mutex_unlock(&mu);
    }
    errno = saved;
}

/* Forwarded by the system call itself: the allocator maps memory before
 * dlsym could be used safely (dlsym may allocate). */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (fd >= 0)
        check_mmap(prot, flags, fd);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    if (fd >= 0)
        check_mmap(prot, flags, fd);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}
