/* libkvfs: the C client of kvfs's batch ioctl (kvfs/ioctl.h, man 7 kvfs_ioctl).
 *
 * Many keys per call: register shared memory once, describe a batch of
 * READ/WRITE/STAT/EXISTS/PREFETCH/DELETE entries in a table, run it with one
 * ioctl, read each entry's status. Example (errors unchecked for brevity):
 *
 *   int dir = open("/mnt/kv/layer0", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
 *   struct kvfs_buffer *buf;                       // 32 slots of 4 MiB
 *   kvfs_buffer_create(dir, 32u << 22, &buf);
 *   struct kvfs_table *t;                          // 32 entries, 4 KiB of names
 *   kvfs_table_create(dir, 32, 4096, &t);
 *   for (uint32_t i = 0; i < 32; i++)
 *     kvfs_table_add_read(t, names[i], strlen(names[i]), buf,
 *                         (uint64_t)i << 22, 4u << 20, 0);
 *   int failed = kvfs_batch(dir, t, NULL);         // entries that failed, or -errno
 *   for (uint32_t i = 0; i < 32; i++)              // results in input order
 *     if (kvfs_table_status(t, i) == 0)
 *       use((char *)kvfs_buffer_data(buf) + ((size_t)i << 22), kvfs_table_result(t, i));
 *   kvfs_table_destroy(t);
 *   kvfs_buffer_destroy(buf);
 *
 * Conventions.
 *   - Functions returning int return a value >= 0 on success and a negative
 *     errno on failure; they never rely on errno (which they may clobber).
 *     Out-parameters are written only on success. Nothing aborts or throws.
 *   - Per-entry statuses read through this API are 0 or a negative errno,
 *     like everything else here; the raw ABI entry (kvfs_table_entry) keeps
 *     the positive errno the daemon wrote.
 *   - `fd` arguments are any open file or directory of a kvfs mount; batch
 *     calls need a directory (`dirfd`), and entry names are relative to it
 *     (like openat(2); no absolute names, no ".."). ENOTTY: not kvfs.
 *
 * Memory. Data moves without a copy between the device and a registered
 * kvfs_buffer (when buffer offset and file offset are multiples of 4096;
 * other entries use the daemon's bounce buffer). The *_mem variants take
 * plain memory of the calling process instead: the daemon copies it with
 * process_vm_readv/writev (one copy; the entry fails with EPERM where the
 * kernel does not allow that).
 *
 * Threads. Functions without an object argument, and buffers, may be used
 * from any number of threads at once (the daemon does not order concurrent
 * batches that touch the same bytes of a buffer: the caller must). A
 * kvfs_table is used by one thread at a time.
 *
 * Lifetime. A registration belongs to the process that made it: a fork
 * child using a parent's buffer gets EBADF for its entries.
 */
#ifndef KVFS_KVFS_H
#define KVFS_KVFS_H

#include <stddef.h>
#include <stdint.h>

#include <kvfs/ioctl.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVFS_API __attribute__((visibility("default")))
#else
#define KVFS_API
#endif

/* ---- Raw calls (one ioctl each). ---- */

/* KVFS_IOC_REGISTER: registers `length` bytes (a multiple of 4096) of the
 * caller's memfd or tmpfs file `mem_fd` (opened O_RDWR, owned by the caller).
 * The registration lives until kvfs_unregister, the last close of the open
 * file `fd` refers to, or the process's exit. Stores the id in *buf_id.
 * Returns 0, or -EINVAL (length), -EACCES/-EPERM (not the caller's file),
 * -EMFILE (KVFS_MAX_REGISTRATIONS reached), -ENOTTY (fd not on kvfs), ... */
KVFS_API int kvfs_register(int fd, int mem_fd, uint64_t length, uint64_t *buf_id);

/* KVFS_IOC_UNREGISTER. Returns 0, or -EBADF (not a registration of this
 * process), ... Batches running on the buffer finish first (daemon side). */
KVFS_API int kvfs_unregister(int fd, uint64_t buf_id);

/* KVFS_IOC_BATCH over `count` entries at (table_id, table_off), filled in by
 * the caller. On success (return 0) each entry holds its status and result
 * and *args (may be NULL) the call's totals. On failure returns -errno
 * (EPROTO, EINVAL, E2BIG, EBADF, EFAULT, ENOTDIR, ...) and no entry was
 * written. */
KVFS_API int kvfs_batch_raw(int dirfd, uint64_t table_id, uint64_t table_off, uint32_t count,
                            struct kvfs_batch_args *args);

/* KVFS_IOC_FEATURES through `fd` (any file or directory of the mount): the
 * daemon's ABI version and the ops its batches run (KVFS_OP_BIT(op) in
 * out->ops). Returns 0 when the daemon answered, 1 when it predates the
 * call (ENOTTY or EINVAL: *out then holds version 1 and KVFS_OPS_BASE),
 * or another -errno. A file that is not on kvfs also answers ENOTTY, so 1
 * is returned for it too; its first batch call then fails with -ENOTTY. */
KVFS_API int kvfs_features(int fd, struct kvfs_features_args *out);

/* ---- Registered buffers. ---- */

/* Shared memory: a memfd, mapped read-write in this process and registered
 * with the daemon. */
struct kvfs_buffer;

/* Creates a buffer of `size` bytes rounded up to a multiple of 4096 (zero
 * filled) and registers it through `fd`. A size that is a multiple of 2 MiB
 * gets 2 MiB huge pages when the machine has them reserved
 * (vm.nr_hugepages): device I/O into them is faster. The buffer keeps its own duplicate
 * of `fd`, so the caller may close `fd` at once; the registration ends at
 * kvfs_buffer_destroy. Stores the new buffer in *out (caller owns it).
 * Returns 0, or -EINVAL (size 0 or above KVFS_REGISTER_MAX_BYTES), -ENOMEM,
 * -EMFILE, or the errno of memfd_create/ftruncate/mmap/KVFS_IOC_REGISTER. */
KVFS_API int kvfs_buffer_create(int fd, size_t size, struct kvfs_buffer **out);

/* Unregisters, unmaps and frees `buf` (NULL: nothing). The memory is gone
 * afterwards whatever the result. Returns 0, or the -errno of
 * KVFS_IOC_UNREGISTER (the registration then ends at the close of the
 * buffer's fd or the process's exit instead). No batch may be using it. */
KVFS_API int kvfs_buffer_destroy(struct kvfs_buffer *buf);

/* The mapping (page aligned), its size in bytes, the registration id. */
KVFS_API void *kvfs_buffer_data(const struct kvfs_buffer *buf);
KVFS_API size_t kvfs_buffer_size(const struct kvfs_buffer *buf);
KVFS_API uint64_t kvfs_buffer_id(const struct kvfs_buffer *buf);

/* ---- Entry tables (a batch being built). ---- */

/* Entries and their names, laid out in a registered buffer of its own:
 * `max_entries` entries of 64 bytes, then `name_bytes` bytes of names. */
struct kvfs_table;

/* Creates an empty table through `fd` (as kvfs_buffer_create). max_entries:
 * 1..KVFS_BATCH_MAX_ENTRIES; name_bytes: room for all names together (0
 * picks 256 per entry). Returns 0, or -EINVAL, -ENOMEM, ... */
KVFS_API int kvfs_table_create(int fd, uint32_t max_entries, size_t name_bytes,
                               struct kvfs_table **out);
/* 1 when the daemon `t` was created through runs `op` in its batches, 0
 * when not (an entry of it would fail with EINVAL); asked once, at
 * kvfs_table_create (kvfs_features). */
KVFS_API int kvfs_table_supports(const struct kvfs_table *t, uint32_t op);
/* Unregisters and frees `t` (NULL: nothing). */
KVFS_API void kvfs_table_destroy(struct kvfs_table *t);
/* Empties `t` for the next batch (capacity and registration kept). */
KVFS_API void kvfs_table_reset(struct kvfs_table *t);
/* Entries added since the last reset / how many fit. */
KVFS_API uint32_t kvfs_table_count(const struct kvfs_table *t);
KVFS_API uint32_t kvfs_table_capacity(const struct kvfs_table *t);

/* Appends one entry (fields as struct kvfs_batch_entry; the name's bytes are
 * copied into the table, no NUL needed). The library checks only what the
 * layout needs: the daemon checks the rest and reports it per entry.
 * Returns the entry's index, or -ENOSPC (entries or name room full: run the
 * batch and reset), -ENAMETOOLONG (name_len > KVFS_PATH_MAX). */
KVFS_API int kvfs_table_add(struct kvfs_table *t, uint32_t op, const char *name, size_t name_len,
                            uint64_t buf_id, uint64_t buf_off, uint64_t length, uint64_t file_off);

/* READ file bytes [file_off, file_off + length) of `name` into `buf` at
 * buf_off; result = bytes read (fewer at end of file). */
KVFS_API int kvfs_table_add_read(struct kvfs_table *t, const char *name, size_t name_len,
                                 const struct kvfs_buffer *buf, uint64_t buf_off,
                                 uint64_t length, uint64_t file_off);
/* WRITE: create or atomically replace `name` with `length` bytes of `buf`
 * at buf_off; result = bytes written. */
KVFS_API int kvfs_table_add_write(struct kvfs_table *t, const char *name, size_t name_len,
                                  const struct kvfs_buffer *buf, uint64_t buf_off,
                                  uint64_t length);
/* READ/WRITE with plain (unregistered) memory of this process (buf_id 0). */
KVFS_API int kvfs_table_add_read_mem(struct kvfs_table *t, const char *name, size_t name_len,
                                     void *dest, uint64_t length, uint64_t file_off);
KVFS_API int kvfs_table_add_write_mem(struct kvfs_table *t, const char *name, size_t name_len,
                                      const void *src, uint64_t length);
/* STAT (result = size; -ENOENT when missing), EXISTS (0 or -ENOENT; the
 * name only, no inode read), PREFETCH (result = bytes the prefetch will
 * read), DELETE (unlink). */
KVFS_API int kvfs_table_add_stat(struct kvfs_table *t, const char *name, size_t name_len);
KVFS_API int kvfs_table_add_exists(struct kvfs_table *t, const char *name, size_t name_len);
KVFS_API int kvfs_table_add_prefetch(struct kvfs_table *t, const char *name, size_t name_len);
KVFS_API int kvfs_table_add_delete(struct kvfs_table *t, const char *name, size_t name_len);

/* Runs the table's entries with one KVFS_IOC_BATCH on `dirfd` (names are
 * relative to it). Returns the number of entries whose status is not 0
 * (0: all succeeded), or -errno when the call itself failed; then every
 * entry's status is set to that -errno. *summary (may be NULL) gets the
 * daemon's totals (zeroed on a call failure). An empty table returns 0
 * without a call. Entries keep their results until the next reset. */
KVFS_API int kvfs_batch(int dirfd, struct kvfs_table *t, struct kvfs_batch_args *summary);

/* Entry i (< count) after kvfs_batch: status 0 or a negative errno, and the
 * result (bytes read/written, file size, bytes queued). */
KVFS_API int kvfs_table_status(const struct kvfs_table *t, uint32_t i);
KVFS_API uint64_t kvfs_table_result(const struct kvfs_table *t, uint32_t i);
/* The raw ABI entry i (status is a positive errno there). */
KVFS_API const struct kvfs_batch_entry *kvfs_table_entry(const struct kvfs_table *t, uint32_t i);

/* ---- One-call helpers: n NUL-terminated names, results in input order. ----
 *
 * Each helper fills `scratch` (reset first; NULL: a temporary table is made
 * and destroyed, which costs a registration per call) and runs as many
 * batches as the table's room needs, in input order. statuses[i] gets 0 or
 * a negative errno; the result arrays (NULL allowed) get entry i's result
 * (0 where the entry failed). With `buf` NULL, buf_offs[i] are addresses of
 * plain memory of this process (see Memory above).
 * Returns the number of failed entries, or -errno when a call failed (or
 * the temporary table could not be made): the entries of that call and
 * later ones then carry that -errno, earlier ones their results. An entry
 * the table cannot hold (name above KVFS_PATH_MAX, or above the scratch
 * table's name room) fails alone with -ENAMETOOLONG or -ENOSPC. */
KVFS_API int kvfs_read_batch(int dirfd, struct kvfs_table *scratch, size_t n,
                             const char *const names[], const struct kvfs_buffer *buf,
                             const uint64_t buf_offs[], const uint64_t lengths[], int statuses[],
                             uint64_t bytes_read[]);
KVFS_API int kvfs_write_batch(int dirfd, struct kvfs_table *scratch, size_t n,
                              const char *const names[], const struct kvfs_buffer *buf,
                              const uint64_t buf_offs[], const uint64_t lengths[], int statuses[],
                              uint64_t bytes_written[]);
KVFS_API int kvfs_stat_batch(int dirfd, struct kvfs_table *scratch, size_t n,
                             const char *const names[], int statuses[], uint64_t sizes[]);
/* statuses[i] = 0 when names[i] exists, -ENOENT (or another -errno) when not.
 * A daemon without KVFS_OP_EXISTS (kvfs_table_supports) is asked STAT. */
KVFS_API int kvfs_exists_batch(int dirfd, struct kvfs_table *scratch, size_t n,
                               const char *const names[], int statuses[]);
KVFS_API int kvfs_prefetch_batch(int dirfd, struct kvfs_table *scratch, size_t n,
                                 const char *const names[], int statuses[], uint64_t queued[]);
KVFS_API int kvfs_delete_batch(int dirfd, struct kvfs_table *scratch, size_t n,
                               const char *const names[], int statuses[]);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVFS_KVFS_H */
