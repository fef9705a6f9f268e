"""kvfs-bench: KV-cache connector workloads on kvfs, on ext4 and at the device limit.

Every figure is measured side by side in one run on one disk: kvfs on an image
file, ext4 on a loop device (direct I/O) over a second image file in the same
directory, and fio on a third image file there for the device limit. The tool
sets all of that up in a scratch directory and tears it down afterwards, also
when interrupted (Ctrl-C, SIGTERM); or it uses mounts and devices you name.

Workloads (--workloads, comma separated; default all):
  fio      device limit: fio (io_uring, O_DIRECT) reading and writing at each
           chunk size, queue depths 1..32, time-limited. "Limit" below is the
           best depth. One fio round runs before each round of the other
           workloads, so that the limit is measured in the same minutes as
           what it is compared with (a shared disk's speed drifts by the
           hour).
  lmcache  the LMCache-style serial loop. Store, per key: stat (missing);
           open(tmp, O_CREAT|O_WRONLY|O_TRUNC); one write; close; rename.
           Load, as a request does: the lookup (stat every key, as LMCache's
           contains() does before the retrieve), then per key: open; one read
           of the whole chunk; close; both timed together.
           N keys per batch, M batches in flight (one thread each), buffered
           and O_DIRECT; caches dropped between store and load. Store time is
           what the connector waits for (write-back happens later, on both).
  lookup   stat storms from one thread, cold caches: names that exist, and
           names that do not.
  batch    the kvfs batch ioctl through its Python module (kvfs only): per
           shape KEYSxSIZE (64x256K, 16x4M, 16x24M), the keys stored with one
           write_batch and, caches dropped, loaded with one read_batch, from
           and into registered memory; "not available" when the module
           cannot be imported.
           lmcache and batch repeat a configuration within each round (a
           fresh directory each time, kvfs and ext4 alternating) until its
           samples move --sample-bytes (64 MiB): a 32 x 256 KiB request
           lasts about 6 ms, and one such sample per round is at the mercy
           of the disk's moment. EXISTS runs three times per round.
           Figures are medians over all samples.
  restore  time to load K chunks (64 x 4 MiB) with cold caches, on an idle
           volume and while a burst of stores (4 GiB, another process) drains.

Run only when named in --workloads (they move tens of GiB: several minutes
a round on a disk), besides evict (workloads/eviction.py):
  wholeseq whole-sequence objects, one file per request's whole KV:
           --object-threads (4) threads each store --object-count (2)
           objects of each --object-sizes size (256M,1G): one buffered write
           of the whole object, then fsync. Caches dropped, each object is
           loaded: posix_fadvise(DONTNEED), a 4 KiB header read, one
           buffered read of the rest; then loaded again (reload: only the
           fadvise in between). The threads move one object each at a time,
           in timed waves. Rows: store + fsync and load MB/s, per-object
           load latency p50 and p95 (ms); the limit is fio's best read (or
           write) at any chunk size.
  vllm     vLLM's filesystem tier: --vllm-threads (16,16) reader and writer
           threads over ROOT_r0/HHH/HH_g0/HASH.bin, files of each
           --vllm-sizes size (2M,16M), --vllm-bytes (1G) of keys a phase.
           O_DIRECT after a probe (one aligned 4 KiB read; buffered if
           refused). A store stats first and skips a file that exists, else
           mkdir -p, tmp, one write, rename. Phases: store; store existing
           (every key skipped, keys/s); load with caches dropped; reload;
           loads with caches dropped while the writers store other keys.
           The limit is fio at the same size when it ran at it, else its
           best.

Device (--ram): by default the images are files in --dir, on the disk to
measure. With --ram, kvfs-bench mounts a tmpfs of the size the run needs
(DIR/ram) and puts kvfs's image, ext4's loop image and fio's file on it, then
unmounts it at the end, also when interrupted or on an error. It stands for
a device faster than the software, so what is measured is the software's own
path. It does not model DMA: every byte the device moves is a CPU copy, for
ext4 once and for kvfs once more (the device into its cache, then to the
caller), where an NVMe drive copies by DMA.

Every load checks every byte against what was stored (per-key data at a
distinct offset of a seeded random pattern); a mismatch fails the workload and
the exit status is 1.

Caches before a load: ext4 gets sync + echo 3 > /proc/sys/vm/drop_caches;
kvfs gets MOUNT/.kvfs/drop_cache when that control file exists, otherwise a
remount (which empties everything), and the same drop_caches.

Output: a table of medians over --rounds (with min and max), the ratios
kvfs/ext4 and kvfs/device limit per row; --json FILE with every sample;
--plot FILE.png (python3-matplotlib) throughput per chunk size.

Needs root (mounts, loop devices, drop_caches) and /dev/fuse.

  kvfs-bench                                  # full run, ~10-15 min
  kvfs-bench --quick                          # small sizes, one round, < 1 min
  kvfs-bench --workloads lmcache --sizes 4M --batches 1 --json out.json
  kvfs-bench --workloads fio,wholeseq,vllm --sizes 2M,16M    # the large and the many
  kvfs-bench --kvfs-mount /mnt/kvfs --ext4-mount /mnt/nvme-ext4
"""
