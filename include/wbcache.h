/*
 * wbcache.h - C ABI of wbcache, a userspace page cache and writeback engine.
 *
 * wbcache gives buffered I/O (cached reads, write-back writes, fsync) on
 * files and raw block devices without the kernel page cache; underneath it
 * does O_DIRECT I/O through io_uring or a thread pool.
 *
 * Link with libwbcache.a (plus -lpthread -ldl -lm) or libwbcache.so.
 *
 * Conventions
 * - Every function returns a non-negative value on success and a negative
 *   errno (e.g. -EINVAL, -ENOENT, -EBADF) on failure; errno itself is not
 *   set. wbc_last_error() gives a message for the last failure.
 * - A NULL handle, path, buffer or output pointer is -EINVAL.
 * - Failures inside the library never unwind into the caller; an internal
 *   error is reported as -EIO (wbc_last_error then says "internal panic").
 * - Exhausted resources are errors, not crashes: no thread can be started
 *   (RLIMIT_NPROC) is -EAGAIN, no descriptor (RLIMIT_NOFILE) is -EMFILE
 *   from wbc_open with the path in the message, no memory for a cache
 *   buffer is -ENOMEM from the call that needed it; what the cache already
 *   holds is kept. io_uring that cannot be set up (seccomp, no descriptor,
 *   kernel.io_uring_disabled) falls back to a thread pool silently.
 *
 * What the library cannot check
 * Arguments are checked where C lets a callee check them: NULL handles,
 * buffers, paths and output pointers, lengths past SSIZE_MAX, iovec counts
 * outside 0..1024, unknown flag bits. It cannot tell a live handle from a
 * freed one or from any other pointer, so these are undefined behaviour:
 * a handle used after wbc_close/wbc_cache_close or closed twice, a close
 * racing another call on the same handle, a non-NULL pointer that is not
 * what its parameter says (dangling, foreign, misaligned), a buffer or
 * iovec array shorter than the length or count passed with it, and a
 * string without its terminating NUL.
 *
 * Handles and ownership
 * - wbc_cache: created by wbc_cache_open, freed by wbc_cache_close.
 * - wbc_file: created by wbc_open, freed by wbc_close. A file keeps the
 *   cache's internal state alive on its own, so caches and files may be
 *   closed in any order: after wbc_cache_close every operation on a file of
 *   that cache fails with -EBADF, and wbc_close still frees it.
 * - Close each handle exactly once. Handles may be used from several
 *   threads at once, but a close must not run concurrently with any other
 *   call on the handle it frees; finish I/O before wbc_cache_close, or data
 *   written concurrently with it may miss the final writeback.
 */
#ifndef WBCACHE_H
#define WBCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A page cache: configuration, memory budget, I/O backend, flusher threads. */
typedef struct wbc_cache wbc_cache;

/** An open file or block device in a cache, with its own access mode. */
typedef struct wbc_file wbc_file;

/**
 * wbc_pread/wbc_pwrite flag: uncached I/O (as Linux RWF_DONTCACHE). A write
 * is written back soon, off the writer's path, and dropped from the cache
 * once clean; a read of data not already cached drops it after the copy.
 */
#define WBC_DONTCACHE 0x1u

/**
 * wbc_open flag: every read and write of the handle is uncached, as if each
 * passed WBC_DONTCACHE. For a stream (a backup, a log, a bulk load) marked
 * once at open. Bit 30, which no Linux open(2) flag uses.
 */
#define WBC_O_DONTCACHE 0x40000000

/**
 * Creates a cache.
 *
 * options: NULL for all defaults, or "key=value,..." (pairs separated by
 * ',' or ';') with sizes taking K/M/G/T suffixes (powers of 1024; "4k",
 * "4KB" and "4KiB" alike), e.g. "capacity=256M,dirty_limit=64M,io=threads".
 * Keys: capacity, dirty_limit, dirty_background, expire_ms,
 * expire_busy_ms (how old dirty data may grow while read misses keep
 * coming; 30 times expire_ms unless given), folio_max, io_max, io (uring or threads), io_depth, readahead_max,
 * throttle_pause_ms_max, bridge_gap, async_depth_while_sync,
 * sync_latency_target_us (0 turns it off), background_ioprio (be or idle),
 * writeback_workers, writeback_routing (single, rotor or region),
 * region_size, scan_dropbehind (on or off), stream_dropbehind (on or off),
 * guardian (on or off: whether a crash of the process keeps what writes
 * acknowledged, written to the files by a guardian process).
 *
 * On success stores the new handle in *out and returns 0. Otherwise stores
 * NULL in *out (if out is not NULL) and returns -errno: -EINVAL for an
 * unknown key, a key given twice, a bad value or an inconsistent
 * combination (wbc_last_error names it); -EAGAIN when the cache's threads
 * cannot be started (RLIMIT_NPROC); -ENOMEM.
 */
int wbc_cache_open(const char *options, wbc_cache **out);

/**
 * Writes back and syncs every file, stops the cache's threads and frees the
 * handle (also when it fails). Files still open fail with -EBADF afterwards
 * and must still be passed to wbc_close.
 *
 * Returns 0, or the first writeback/sync error as -errno (that data is lost).
 */
int wbc_cache_close(wbc_cache *c);

/**
 * Writes back and syncs every file of the cache (as syncfs). Returns 0 or
 * the first error as -errno; data that failed stays dirty.
 */
int wbc_cache_sync(wbc_cache *c);

/**
 * Opens (or creates) the file or block device at path through the cache.
 *
 * oflags, from <fcntl.h>: exactly one of O_RDONLY, O_WRONLY, O_RDWR, plus
 * any of O_CREAT, O_EXCL (with O_CREAT: -EEXIST if path exists), O_TRUNC,
 * O_APPEND (every write goes to the end of the file, whatever offset it
 * names, as pwrite(2) does on Linux; appends through the cache never
 * interleave). O_CLOEXEC, O_DIRECT and O_LARGEFILE are accepted and
 * ignored (the cache owns the backing descriptors and always uses 64-bit
 * offsets). WBC_O_DONTCACHE makes the handle uncached. Any other bit
 * (O_NONBLOCK, O_SYNC, ...) is -EINVAL. O_CREAT, O_TRUNC and O_APPEND
 * need O_WRONLY or O_RDWR (-EINVAL otherwise).
 *
 * mode: permission bits for a created file (the umask applies).
 *
 * On success stores the new handle in *out and returns 0. Otherwise stores
 * NULL in *out (if out is not NULL) and returns -errno: what open(2) would
 * (-ENOENT, -EEXIST, -EACCES, -EISDIR, -ENOTDIR, -ELOOP, -ENAMETOOLONG,
 * -EMFILE, ...), -EINVAL also for a path that is neither a regular file nor
 * a block device, -EBADF after the cache was closed, -EAGAIN when the first
 * file on a new device needs a writeback thread that cannot be started.
 * wbc_last_error names the path.
 */
int wbc_open(wbc_cache *c, const char *path, int oflags, unsigned mode, wbc_file **out);

/**
 * Removes path as unlink(2) does. When that was the file's last name, its
 * cached data goes too: every cached block of it, dirty ones included, is
 * dropped without being written. Handles still open keep reading and
 * writing the file until closed, as with unlink(2), and then its data goes;
 * none of it ever reaches a file created later under the same name. With
 * other hard links left, or for a block device node, the data stays cached.
 *
 * Returns 0 or -errno: what unlink(2) would (-ENOENT, -EISDIR, -EACCES,
 * -EPERM, ...), -EINVAL for NULL arguments, -EBADF after wbc_cache_close.
 */
int wbc_unlink(wbc_cache *c, const char *path);

/**
 * Renames from to to as rename(2) does, replacing to. The cached data
 * follows the file, dirty data included; handles open on it keep working.
 * A replaced to whose last name that was loses its cached data, dirty
 * blocks unwritten (as wbc_unlink drops it).
 *
 * Returns 0 or -errno: what rename(2) would (-ENOENT, -EISDIR, -EXDEV,
 * -EACCES, ...), -EINVAL for NULL arguments, -EBADF after wbc_cache_close.
 */
int wbc_rename(wbc_cache *c, const char *from, const char *to);

/**
 * Makes the cache forget path if it is cached and no handle has it open:
 * writes back and syncs its dirty data, then drops all it cached of the
 * file, so the next wbc_open reads it afresh (for files that another
 * process may change while this one has no handle open).
 *
 * Returns 1 if the file was forgotten; 0 if it was not cached, does not
 * exist or is open; or -errno: a failed writeback or sync (the data stays
 * cached and dirty), -EINVAL for NULL arguments, -EBADF after
 * wbc_cache_close.
 */
int wbc_forget(wbc_cache *c, const char *path);

/**
 * Frees a file handle. Like close(2) it does not write back: dirty data
 * stays in the cache for the flusher; call wbc_fsync first for durability.
 * Valid after wbc_cache_close. Returns 0, or -EINVAL for NULL.
 */
int wbc_close(wbc_file *f);

/**
 * Reads up to len bytes at offset off into buf; fewer only at end of file.
 * flags: 0 or WBC_DONTCACHE (any other bit is -EINVAL). buf need not be
 * initialized and is not zeroed first: past the bytes returned, its
 * contents are unspecified.
 *
 * Returns the number of bytes read (0 at or past end of file) or -errno:
 * -EBADF on a write-only handle or after wbc_cache_close, -EINVAL for a
 * NULL buf (even with len 0) or len > SSIZE_MAX, -EIO (etc.) when the
 * backing store fails, -ENOMEM when no cache buffer can be allocated.
 */
int64_t wbc_pread(wbc_file *f, void *buf, size_t len, uint64_t off, uint32_t flags);

/**
 * Writes len bytes from buf at offset off into the cache (write-back: the
 * data is durable only after wbc_fsync/wbc_fdatasync or wbc_cache_close).
 * flags: 0 or WBC_DONTCACHE (any other bit is -EINVAL). Writers may be
 * paused while the cache holds more than dirty_limit bytes of dirty data.
 *
 * The len bytes at buf must be initialized.
 *
 * Returns the number of bytes written (all of them, except at the end of a
 * block device or at the file system's largest file size) or -errno:
 * -EBADF on a read-only handle or after
 * wbc_cache_close, -EFBIG past INT64_MAX (or the file system's largest
 * file), -ENOSPC at the end of a block device, -EINVAL for a NULL buf or
 * len > SSIZE_MAX, -ENOMEM when the write needs a new cache buffer and none
 * can be allocated (what the cache already holds is kept), -EIO when
 * writeback keeps failing while the cache is at dirty_limit.
 */
int64_t wbc_pwrite(wbc_file *f, const void *buf, size_t len, uint64_t off, uint32_t flags);

/**
 * Reads into the buffers iov[0..iovcnt] in order, as wbc_pread into their
 * concatenation would (preadv). Returns the bytes read (fewer than their
 * total only at end of file) or -errno: as wbc_pread, and -EINVAL for
 * iovcnt < 0 or > 1024 (IOV_MAX), a NULL iov (unless iovcnt is 0), a NULL
 * iov_base with a non-zero iov_len, or a total length > SSIZE_MAX. The
 * buffers need not be initialized; they may overlap (the later buffer's
 * bytes win). Fewer bytes than asked also when a concurrent truncate
 * shortens the file during the read.
 */
int64_t wbc_preadv(wbc_file *f, const struct iovec *iov, int iovcnt, uint64_t off, uint32_t flags);

/**
 * Writes the buffers iov[0..iovcnt] in order at offset off, as wbc_pwrite
 * of their concatenation would (pwritev): one call, one pass over the
 * cache. The buffers' bytes must be initialized. Returns the bytes written
 * (as wbc_pwrite: fewer only at the end of a block device or at the file
 * system's largest file size) or -errno: as wbc_pwrite, and -EINVAL for
 * iovcnt < 0 or > 1024 (IOV_MAX), a NULL iov (unless iovcnt is 0), a NULL
 * iov_base with a non-zero iov_len, or a total length > SSIZE_MAX.
 */
int64_t wbc_pwritev(wbc_file *f, const struct iovec *iov, int iovcnt, uint64_t off, uint32_t flags);

/**
 * Writes back and syncs the file's data and metadata (fsync): on return 0,
 * every byte written to the file before the call is on the backing store.
 * A writeback error that happened since this handle's last sync is
 * reported once (-EIO, -ENOSPC, -EDQUOT, ...); a later call retries the
 * data.
 */
int wbc_fsync(wbc_file *f);

/** As wbc_fsync, but fdatasync: metadata only when the size changed. */
int wbc_fdatasync(wbc_file *f);

/**
 * The file's logical size in bytes, including data not yet written back,
 * or -errno (-EBADF after wbc_cache_close).
 */
int64_t wbc_size(wbc_file *f);

/**
 * Truncates or extends (with zeros) the file to size bytes (ftruncate).
 * Returns 0 or -errno: -EBADF on a read-only handle or after
 * wbc_cache_close, -EFBIG above INT64_MAX, -EINVAL for a size change of a
 * block device.
 */
int wbc_truncate(wbc_file *f, uint64_t size);

/** wbc_residency bits: the block is cached, dirty, under writeback. */
#define WBC_RESIDENT_CACHED 0x1u
#define WBC_RESIDENT_DIRTY 0x2u
#define WBC_RESIDENT_WRITEBACK 0x4u

/**
 * What of [off, off + len) is cached, as mincore(2) answers for pages:
 * vec[i] gets the bits of the i-th 4 KiB block from the one holding off
 * (WBC_RESIDENT_*; 0 = not cached). vec must hold one byte per block the
 * range touches, (off % 4096 + len + 4095) / 4096. Blocks past the end of
 * the file are not reported (their bytes are left alone). A snapshot: the
 * answer may be stale as soon as it returns.
 *
 * Returns the number of blocks filled, or -errno: -EINVAL for a NULL
 * handle, a NULL vec with len > 0 or a range past UINT64_MAX, -EBADF after
 * wbc_cache_close.
 */
int64_t wbc_residency(wbc_file *f, uint64_t off, uint64_t len, unsigned char *vec);

/** wbc_fadvise advice: the POSIX_FADV_* values. */
#define WBC_FADV_NORMAL 0
#define WBC_FADV_RANDOM 1
#define WBC_FADV_SEQUENTIAL 2
#define WBC_FADV_WILLNEED 3
#define WBC_FADV_DONTNEED 4
#define WBC_FADV_NOREUSE 5

/**
 * Advice about future accesses (posix_fadvise(2)); len == 0 reaches the
 * end of the file. NORMAL undoes SEQUENTIAL, RANDOM and NOREUSE for the
 * handle; SEQUENTIAL lets the handle's readahead window grow to twice
 * readahead_max; RANDOM turns the handle's readahead off; WILLNEED starts
 * reading the range in the background (at most half the cache's capacity);
 * DONTNEED drops the range's clean folios now and makes its dirty ones
 * drop-behind (the flusher writes them, then they are dropped), writing
 * nothing itself; NOREUSE makes the handle's reads and writes uncached.
 *
 * Returns 0 or -errno: -EINVAL for an unknown advice, a negative offset or
 * length or a NULL handle, -EBADF after wbc_cache_close.
 */
int wbc_fadvise(wbc_file *f, int64_t off, int64_t len, int advice);

/** wbc_sync_range flags: the SYNC_FILE_RANGE_* values. */
#define WBC_SYNC_RANGE_WAIT_BEFORE 0x1u
#define WBC_SYNC_RANGE_WRITE 0x2u
#define WBC_SYNC_RANGE_WAIT_AFTER 0x4u

/**
 * Writeback of [off, off + len) (sync_file_range(2)); len == 0 reaches the
 * end of the file. WAIT_BEFORE waits for the file's writeback in flight;
 * WRITE starts writeback of the range's dirty blocks (background class;
 * without WAIT_AFTER it returns once they are under writeback); WAIT_AFTER
 * waits for the file's writeback in flight, this call's included.
 * No durability promise, as with the kernel's call: the device's cache is
 * not flushed and the size is not synced (use wbc_fdatasync).
 *
 * Returns 0 or -errno: -EINVAL for unknown flags, a negative offset or
 * length or a NULL handle; when it waits, a writeback error of the file
 * since this handle's last report (-EIO, -ENOSPC, ...; reported once, as
 * wbc_fsync does); -EBADF after wbc_cache_close.
 */
int wbc_sync_range(wbc_file *f, int64_t off, int64_t len, unsigned int flags);

/**
 * fallocate(2) of [off, off + len): mode 0 or FALLOC_FL_KEEP_SIZE reserve
 * blocks (mode 0 extends the file past its end); FALLOC_FL_PUNCH_HOLE |
 * FALLOC_FL_KEEP_SIZE deallocates; FALLOC_FL_ZERO_RANGE (optionally with
 * KEEP_SIZE) zeroes. A punched or zeroed range reads as zeros afterwards,
 * cached or not, and its dirty data is discarded, never written over it.
 * Forwarded to the backing store; a failure there changes nothing.
 *
 * Returns 0 or -errno: -EINVAL for a negative offset, a length <= 0 or a
 * NULL handle; -EFBIG past INT64_MAX or the file system's largest file;
 * -EOPNOTSUPP for another mode or where the store cannot (mode 0 on a
 * block device, a file system without fallocate); -EBADF on a read-only
 * handle or after wbc_cache_close; the store's own (-ENOSPC, ...; on a
 * block device -EINVAL for a range not aligned to its logical block size
 * or reaching past its end, whatever the mode, as the kernel answers).
 */
int wbc_fallocate(wbc_file *f, int mode, int64_t off, int64_t len);

/**
 * The cache's statistics as one JSON object, e.g.
 * {"capacity_bytes":...,"cached_bytes":...,"dirty_bytes":...,
 *  "written_bytes_total":...,"written_bytes_by_class":{...},
 *  "written_bytes_by_reason":{...},"io_backend":"uring","direct_io":true,
 *  "config":{"capacity":268435456,...,"io":"uring",...}}.
 * "config" holds every option key with the value in use (sizes in bytes),
 * derived defaults included.
 *
 * If buf is not NULL and len is larger than the JSON's length, copies the
 * JSON and a terminating NUL into buf; otherwise writes nothing to buf.
 * Returns the JSON's length without the NUL either way, so a result >= len
 * means "call again with a buffer of result + 1 bytes"; wbc_stats_json(c,
 * NULL, 0) asks for the length. -EINVAL for a NULL cache.
 */
int64_t wbc_stats_json(wbc_cache *c, char *buf, size_t len);

/**
 * The message of the last failed wbc_* call on the calling thread ("" if
 * none; successful calls do not clear it), e.g. "wbc_cache_open: unknown
 * option 'bogus' ...". Same buffer contract and return value as
 * wbc_stats_json.
 */
int64_t wbc_last_error(char *buf, size_t len);

/**
 * The library's version, e.g. "0.1.0": a static NUL-terminated string that
 * the caller must not modify or free. For checking, at run time, which
 * library the program loaded (pkg-config --modversion wbcache gives the
 * version it was built against). Never fails.
 */
const char *wbc_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WBCACHE_H */
