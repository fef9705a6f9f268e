/* kvfs batch ioctl ABI, version 1.
 *
 * Clients that know about kvfs move many keys per call: register shared
 * memory once (a memfd or a /dev/shm file the caller owns), lay out an array
 * of entries and their names in it, and issue KVFS_IOC_BATCH on a directory
 * of the mount. The daemon runs the entries at queue depth (in bounded
 * waves) and writes each entry's status and byte count back into the array.
 * Data moves between the device and registered memory without a copy when
 * the buffer offset and the file offset are multiples of 4096; other entries
 * go through a bounce buffer and work the same.
 *
 * The FUSE ioctl of a normal filesystem copies only a fixed-size struct in
 * and out, so everything bulky lives in registered memory and the ioctl
 * carries where it is (man 7 kvfs_ioctl).
 *
 * Registration. KVFS_IOC_REGISTER on any open file or directory of the mount
 * names one of the caller's own file descriptors: a memfd or a file on tmpfs
 * or hugetlbfs, opened O_RDWR, owned by the caller's uid, at least `length`
 * bytes long. The daemon opens that very file through /proc/PID/fd and maps
 * it shared; the caller keeps its own mapping. The registration belongs to
 * the calling process and to the open file the ioctl was issued on; it ends
 * at KVFS_IOC_UNREGISTER, when that open file is closed for the last time,
 * or when the process exits. Another process (a fork child included) using
 * its id gets EBADF.
 *
 * Batch. KVFS_IOC_BATCH is issued on a directory fd. Entry names are paths
 * relative to that directory, like openat(2): components separated by '/',
 * each at most KVFS_NAME_MAX bytes; absolute paths, "." and ".." components
 * and empty components are refused (EXDEV for the escaping ones, EINVAL for
 * empty). Every entry is checked as open(2)/unlink(2) would check the
 * caller's uid, gid and supplementary groups: search permission on each
 * directory walked; READ and PREFETCH need read permission on the file;
 * WRITE and DELETE need write and search permission on the final directory
 * (and, in a sticky directory, ownership of the file or directory).
 *
 * Memory. An entry's data region is (buf_id, buf_off, length): buf_id is a
 * registration of the calling process. buf_id 0 means "plain memory of the
 * calling process at address buf_off": the daemon copies it with
 * process_vm_readv/process_vm_writev (slower; one copy); if the kernel does
 * not permit that, the entry fails with EPERM. The entry table itself is at
 * (table_id, table_off), under the same rules; name_off is in the same space
 * as the table (an offset into table_id's region, or an address when
 * table_id is 0).
 *
 * Results are in input order: entry i's status and result are written to
 * entry i. A call-level failure (the ioctl returns -1) writes no entry.
 * Entries of one batch run concurrently: two entries naming the same file
 * have no defined order between them.
 *
 * Features. KVFS_IOC_FEATURES on any open file or directory of the mount
 * answers which ABI version the daemon speaks and which enum kvfs_op values
 * its KVFS_IOC_BATCH runs (KVFS_OP_BIT(op) set in `ops`). A daemon that
 * predates the call fails it with ENOTTY (or EINVAL): it runs exactly
 * KVFS_OPS_BASE. An entry whose op the daemon does not run fails alone
 * with EINVAL, so a client asks once per mount and picks its ops, rather
 * than guessing from per-entry errors.
 *
 * Errors of the call (ioctl returns -1, errno):
 *   EPROTO   version is not KVFS_ABI_VERSION (FEATURES takes any)
 *   EINVAL   reserved fields or flags not zero; count 0; table_off not
 *            8-aligned
 *   E2BIG    count > KVFS_BATCH_MAX_ENTRIES
 *   EBADF    table_id is not a registration of the calling process
 *   EFAULT   the table lies outside its region (or unreadable memory)
 *   ENOTDIR  BATCH on an fd that is not a directory
 *   ENOMEM, EMFILE (REGISTER: too many registrations), ...
 * REGISTER also: EBADF (no such fd), EACCES (fd not opened O_RDWR), EPERM
 *   (the file is another user's), EINVAL (length 0, not a multiple of 4096
 *   or of the hugetlbfs page, above KVFS_REGISTER_MAX_BYTES or the file's
 *   size; not a regular tmpfs/hugetlbfs file). UNREGISTER: EBADF.
 *   FEATURES: EINVAL (reserved or flags not 0).
 * Errors of one entry (kvfs_batch_entry.status, a positive errno):
 *   ENOENT, EACCES, EPERM, EISDIR, ENOTDIR, ENAMETOOLONG, EXDEV, EINVAL
 *   (unknown op, flags not zero, READ of length 0, empty name), EBADF (bad
 *   buf_id), EFAULT (region outside the registration), EFBIG (length above
 *   KVFS_ENTRY_MAX_BYTES), ENOSPC, EIO, EBUSY (WRITE: its registered memory
 *   changed while the device was reading it; nothing was written), ...
 */
#ifndef KVFS_IOCTL_H
#define KVFS_IOCTL_H

#include <linux/ioctl.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVFS_ABI_VERSION 1u

#define KVFS_NAME_MAX 255u                  /* bytes of one path component */
#define KVFS_PATH_MAX 4096u                 /* bytes of an entry's name */
#define KVFS_BATCH_MAX_ENTRIES 4096u        /* entries per KVFS_IOC_BATCH */
#define KVFS_ENTRY_MAX_BYTES (1ull << 31)   /* data bytes of one entry (2 GiB) */
#define KVFS_MAX_REGISTRATIONS 64u          /* live registrations per process */
#define KVFS_REGISTER_MAX_BYTES (1ull << 40) /* bytes of one registration */

enum kvfs_op {
  /* Read file bytes [file_off, file_off + length) into the region; a file
   * shorter than that gives fewer bytes. result = bytes read. Past EOF a
   * zero-copy read may write zeros up to the next 4096-byte boundary of the
   * region (never beyond `length`); the rest of the region is untouched. */
  KVFS_OP_READ = 1,
  /* Create or atomically replace the file `name` with the region's `length`
   * bytes (file_off must be 0). The name becomes visible only after its data
   * is written (same ordering as write+close+rename); readers see the old
   * file or the new one, never a mix. result = bytes written. The file
   * gets mode 0644 and the caller's uid and gid, as a temp file renamed over
   * the name would. */
  KVFS_OP_WRITE = 2,
  /* Stat: status 0 and result = file size, or ENOENT. No memory. */
  KVFS_OP_STAT = 3,
  /* Start reading the file into the daemon's RAM cache; returns at once.
   * result = bytes the prefetch will read. No memory. */
  KVFS_OP_PREFETCH = 4,
  /* unlink(2) of the name. No memory. */
  KVFS_OP_DELETE = 5,
  /* Exists: status 0 when the name exists (file or directory), ENOENT (or
   * STAT's other errors) when not; result 0. Only the name is looked up,
   * not its inode: the cheapest "contains" of many keys. No memory. */
  KVFS_OP_EXISTS = 6,
};

/* A bit per op, as in kvfs_features_args.ops. */
#define KVFS_OP_BIT(op) (1ull << (op))
/* The ops of every daemon of ABI version 1, also one without
 * KVFS_IOC_FEATURES: what a client assumes when that call fails. */
#define KVFS_OPS_BASE                                                     \
  (KVFS_OP_BIT(KVFS_OP_READ) | KVFS_OP_BIT(KVFS_OP_WRITE) |               \
   KVFS_OP_BIT(KVFS_OP_STAT) | KVFS_OP_BIT(KVFS_OP_PREFETCH) |            \
   KVFS_OP_BIT(KVFS_OP_DELETE))

/* One entry of a batch, 64 bytes, 8-byte aligned in its region. */
struct kvfs_batch_entry {
  uint32_t op;        /* in: enum kvfs_op */
  uint32_t name_len;  /* in: bytes of the name (no NUL needed) */
  uint64_t name_off;  /* in: where the name is (see "Memory") */
  uint64_t buf_id;    /* in: READ/WRITE: registration id, or 0 (caller memory) */
  uint64_t buf_off;   /* in: offset in the registration (address if buf_id 0) */
  uint64_t length;    /* in: READ: room in bytes; WRITE: bytes to write */
  uint64_t file_off;  /* in: READ: first byte of the file to read; else 0 */
  int32_t status;     /* out: 0 or a positive errno */
  uint32_t flags;     /* in: 0 (reserved) */
  uint64_t result;    /* out: bytes read/written, size (STAT), queued (PREFETCH) */
};

struct kvfs_register_args {
  uint32_t version;  /* in: KVFS_ABI_VERSION */
  int32_t fd;        /* in: the caller's fd of the memory (memfd, tmpfs file) */
  uint64_t length;   /* in: bytes from offset 0 to map; multiple of 4096 */
  uint64_t flags;    /* in: 0 */
  uint64_t buf_id;   /* out: non-zero id */
};

struct kvfs_unregister_args {
  uint32_t version;  /* in: KVFS_ABI_VERSION */
  uint32_t reserved; /* in: 0 */
  uint64_t buf_id;   /* in: an id of the calling process */
};

struct kvfs_batch_args {
  uint32_t version;   /* in: KVFS_ABI_VERSION */
  uint32_t count;     /* in: entries, 1..KVFS_BATCH_MAX_ENTRIES */
  uint64_t table_id;  /* in: registration holding the entries, or 0 */
  uint64_t table_off; /* in: offset (or address) of the entry array, 8-aligned */
  uint64_t flags;     /* in: 0 */
  uint32_t completed; /* out: entries with status 0 */
  uint32_t failed;    /* out: entries with status != 0 */
  uint64_t bytes;     /* out: data bytes moved (READ + WRITE) */
};

/* What the daemon runs (KVFS_IOC_FEATURES). Later answers go into
 * `spare`, which a daemon of this version leaves 0. */
struct kvfs_features_args {
  uint32_t version;   /* in: the caller's KVFS_ABI_VERSION (any); out: the daemon's */
  uint32_t reserved;  /* in: 0 */
  uint64_t flags;     /* in: 0 */
  uint64_t ops;       /* out: KVFS_OP_BIT(op) of each op KVFS_IOC_BATCH runs */
  uint64_t spare[5];  /* out: 0 */
};

#ifdef __cplusplus
static_assert(sizeof(struct kvfs_batch_entry) == 64, "ABI: entry is 64 bytes");
static_assert(sizeof(struct kvfs_batch_args) == 48, "ABI: batch args are 48 bytes");
static_assert(sizeof(struct kvfs_features_args) == 64, "ABI: features args are 64 bytes");
#else
_Static_assert(sizeof(struct kvfs_batch_entry) == 64, "ABI: entry is 64 bytes");
_Static_assert(sizeof(struct kvfs_batch_args) == 48, "ABI: batch args are 48 bytes");
_Static_assert(sizeof(struct kvfs_features_args) == 64, "ABI: features args are 64 bytes");
#endif

#define KVFS_IOC_MAGIC 0xB7
#define KVFS_IOC_REGISTER _IOWR(KVFS_IOC_MAGIC, 1, struct kvfs_register_args)
#define KVFS_IOC_UNREGISTER _IOW(KVFS_IOC_MAGIC, 2, struct kvfs_unregister_args)
#define KVFS_IOC_BATCH _IOWR(KVFS_IOC_MAGIC, 3, struct kvfs_batch_args)
#define KVFS_IOC_FEATURES _IOWR(KVFS_IOC_MAGIC, 4, struct kvfs_features_args)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVFS_IOCTL_H */
