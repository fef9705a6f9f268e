#!/usr/bin/python3
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
  kvfs-bench --kvfs-mount /mnt/kvfs --ext4-mount /mnt/nvme-ext4
"""
import argparse
import contextlib
import ctypes
import datetime
import fcntl
import hashlib
import importlib
import importlib.util
import json
import mmap
import os
import platform
import random
import resource
import re
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import threading
import time

BLOCK = 4096
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

WORKLOADS = ["fio", "lmcache", "lookup", "batch", "restore"]
FILESYSTEMS = ["kvfs", "ext4"]
MODES = ["buffered", "direct"]

# Defaults of a full run and of --quick; an option given on the command line
# wins over both.
FULL = dict(sizes="256K,4M,24M", keys=32, batches="1,8", modes="buffered,direct", rounds=3,
            fio_runtime=1.5, fio_depths="1,4,16,32", fio_region="4G", lookup_names=10000,
            restore="64x4M", burst="4G", image_size="12G", batch_shapes="64x256K,16x4M,16x24M",
            sample_bytes="64M")
QUICK = dict(sizes="256K,1M", keys=8, batches="1,2", modes="buffered,direct", rounds=1,
             fio_runtime=0.5, fio_depths="1,16", fio_region="128M", lookup_names=300,
             restore="16x1M", burst="128M", image_size="1G", batch_shapes="8x256K,4x1M",
             sample_bytes="0")

# The restore starts once the burst writer has issued this share of its
# stores: by then kvfs's write-behind and ext4's writeback are both busy.
BURST_START_FRACTION = 0.5

# Test hook (tests/bench): "flip-load-byte" flips one byte of the first
# loaded chunk before it is verified, to prove that verification fails.
FAULT = os.environ.get("KVFS_BENCH_FAULT", "")


class BenchError(Exception):
    """A failure the user should see as one line (setup, a workload, I/O)."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP arrived: unwind, tear down, exit 128+signum."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGate:
    """Turns SIGINT/SIGTERM/SIGHUP into Interrupted in the main thread,
    except inside critical(): there a signal waits until the section ends.
    A section spawns a child and records it, so that teardown always knows
    every child it must end."""

    def __init__(self):
        self.depth = 0
        self.pending = None

    def handler(self, signum, frame):  # noqa: ARG002 -- signal handler signature
        if self.depth:
            if self.pending is None:
                self.pending = signum
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def critical(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0 and self.pending is not None:
                signum, self.pending = self.pending, None
                raise Interrupted(signum)


GATE = SignalGate()

# Room for kvfs's index (RocksDB) beside its image on the --ram tmpfs.
RAM_INDEX_BYTES = 512 * MiB

# The source name of the --ram tmpfs in the mount table: how a later run
# recognises one that a killed run left behind.
RAM_SOURCE = "kvfs-bench-ram"


# ---------------------------------------------------------------- helpers

def parse_size(text):
    """'256K', '4M', '24MiB', '12G', '4096' -> bytes."""
    s = text.strip().upper()
    for suffix in ("IB", "B"):
        if s.endswith(suffix) and len(s) > len(suffix) and s[-len(suffix) - 1] in "KMGT":
            s = s[: -len(suffix)]
            break
    units = {"K": KiB, "M": MiB, "G": GiB, "T": GiB << 10}
    try:
        if s and s[-1] in units:
            return int(float(s[:-1]) * units[s[-1]])
        return int(s)
    except ValueError:
        raise BenchError(f"not a size: {text!r} (examples: 4096, 256K, 4M, 12G)") from None


def fmt_size(n):
    for unit, div in (("G", GiB), ("M", MiB), ("K", KiB)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    for unit, div in (("G", GiB), ("M", MiB), ("K", KiB)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def parse_shape(text, what):
    """KEYSxSIZE (64x4M) as (keys, bytes); BenchError naming `what`."""
    keys, _, size = text.lower().partition("x")
    try:
        return int(keys), parse_size(size)
    except (ValueError, BenchError):
        raise BenchError(f"{what}: expected KEYSxSIZE such as 64x4M, got {text!r}") from None


def parse_list(text, conv, what):
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise BenchError(f"{what}: empty list")
    return [conv(t) for t in items]


def align_up(n, a=BLOCK):
    return (n + a - 1) // a * a


def run(cmd, check=True, timeout=None, **kw):
    """Runs a command in its own session (Ctrl-C reaches only us, so teardown
    happens in order); returns CompletedProcess with text output."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           start_new_session=True, **kw)
    except FileNotFoundError:
        raise BenchError(f"{cmd[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(cmd)}: no answer within {timeout} s") from None
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise BenchError(f"{' '.join(cmd)}: exit {r.returncode}: {msg[-1] if msg else ''}")
    return r


def is_block_device(path):
    """True for a block device (or a symlink to one), by stat: a path under
    /dev/ may be a regular file (/dev/shm/x.img) and a device may live
    elsewhere."""
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def os_error_text(e):
    """'PATH: strerror' for an OSError whose filename may be bytes."""
    name = e.filename.decode(errors="replace") if isinstance(e.filename, bytes) else e.filename
    return f"{name}: {e.strerror}" if name else str(e)


def _unescape_mountinfo(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mount_table():
    """{mountpoint: (fstype, source)} from /proc/self/mountinfo."""
    table = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            table[_unescape_mountinfo(fields[4])] = (fields[sep + 1],
                                                     _unescape_mountinfo(fields[sep + 2]))
    return table


def fstype_at(path):
    return mount_table().get(os.path.realpath(path), (None, None))[0]


def drop_kernel_caches():
    """Writes back dirty pages, then drops page cache, dentries and inodes."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def dirty_bytes():
    """Dirty + Writeback from /proc/meminfo: kernel page-cache data on its
    way to a disk (ext4's share of a store burst; kvfs stages in its own
    memory instead)."""
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(("Dirty:", "Writeback:")):
                total += int(line.split()[1]) * 1024
    return total


def mem_available():
    """MemAvailable from /proc/meminfo, bytes (None if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_info(scratch):
    info = {"hostname": platform.node(), "kernel": platform.release(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg()}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_bytes"] = int(line.split()[1]) * 1024
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    r = run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", scratch], check=False)
    if r.returncode == 0 and r.stdout.strip():
        src = r.stdout.split()
        info["scratch_fs"] = {"source": src[0], "fstype": src[1] if len(src) > 1 else ""}
        dev = os.path.basename(src[0])
        try:
            with open(f"/sys/class/block/{dev}/queue/rotational") as f:
                info["scratch_rotational"] = f.read().strip() == "1"
            model = f"/sys/class/block/{dev}/device/model"
            if os.path.exists(model):
                with open(model) as f:
                    info["scratch_device_model"] = f.read().strip()
        except OSError:
            pass
    return info


# ---------------------------------------------------------------- CPU time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid):
    """user+system seconds of process `pid` (all its threads, also ended
    ones) from /proc/PID/stat; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def system_cpu_seconds():
    """CPU seconds the whole machine spent busy (user, nice, system, irq,
    softirq of every CPU) from /proc/stat: every process and the kernel's
    own threads (writeback, loop devices), other load included."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / CLK_TCK


def client_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """CPU seconds spent during a measured phase: the kvfs daemon's
    (/proc/PID/stat; None for ext4 or a mount that is not ours), the
    client's (this process: the workload's threads), the system's."""

    def __init__(self, daemon_pid):
        self.pid = daemon_pid
        self.d0 = process_cpu_seconds(daemon_pid) if daemon_pid else None
        self.c0 = client_cpu_seconds()
        self.s0 = system_cpu_seconds()

    def stop(self):
        d1 = process_cpu_seconds(self.pid) if self.pid else None
        c1, s1 = client_cpu_seconds(), system_cpu_seconds()
        return {"cpu_daemon_s": None if self.d0 is None or d1 is None else d1 - self.d0,
                "cpu_client_s": c1 - self.c0, "cpu_system_s": s1 - self.s0}


# ---------------------------------------------------------------- progress

class Progress:
    """One status line on stderr: \\r-updated on a terminal, one line per
    finished step otherwise (logs stay readable)."""

    def __init__(self, total, stream=sys.stderr):
        self.total = total
        self.i = 0
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.label = ""

    def _prefix(self):
        e = int(time.monotonic() - self.t0)
        return f"[{self.i}/{self.total} {e // 60}:{e % 60:02d}]"

    def _show(self, text):
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\x1b[K" + text[: cols - 1])
            self.stream.flush()

    def step(self, label):
        self.i += 1
        self.label = label
        self._show(f"{self._prefix()} {label} ...")

    def result(self, text):
        line = f"{self._prefix()} {self.label}: {text}"
        if self.tty:
            self._show(line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def message(self, text):
        """A line that stays (warnings, notes)."""
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self):
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


# ---------------------------------------------------------------- buffers and data

_libc = ctypes.CDLL(None, use_errno=True)
_libc.memcmp.restype = ctypes.c_int
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


class AlignedBuffer:
    """Page-aligned, pre-faulted anonymous memory holding `count` slots of
    `slot_size` bytes (O_DIRECT needs aligned buffers; pre-faulting keeps page
    faults out of the timed loops). The I/O loops get memoryviews of slots;
    verification uses memcmp on raw addresses (no copies)."""

    def __init__(self, count, slot_size):
        self.count = count
        self.slot = align_up(max(slot_size, 1))
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        self.mem = mmap.mmap(-1, self.count * self.slot, flags=flags)
        self._cobj = ctypes.c_char.from_buffer(self.mem)
        self.addr = ctypes.addressof(self._cobj)
        self.view = memoryview(self.mem)

    def slot_view(self, i, n):
        return self.view[i * self.slot: i * self.slot + n]

    def slot_addr(self, i):
        return self.addr + i * self.slot

    def poison(self):
        """Fills every slot with a byte the pattern check rejects, so that a
        short or skipped read cannot pass as the data stored there before."""
        _libc.memset(self.addr, 0x5A, self.count * self.slot)

    def close(self):
        try:
            self.view.release()
            del self._cobj
            self.mem.close()
        except BufferError:
            # Slices are still referenced (a traceback holds the frames of
            # an interrupted loop): the memory goes when they do.
            pass


class Pattern:
    """The data every key holds: `size` bytes of one seeded random buffer,
    starting at an offset that is distinct for every key of the run (keys
    differ in every 4 KiB block, so a block from another key, another offset
    or an earlier round does not verify)."""

    SLACK = 1 * MiB

    def __init__(self, max_size, seed):
        self.base = bytearray(random.Random(seed).randbytes(max_size + self.SLACK))
        self._cobj = ctypes.c_char.from_buffer(self.base)
        self.addr = ctypes.addressof(self._cobj)
        self.view = memoryview(self.base)
        self.counter = 0

    def next_offset(self):
        # 4099 is odd: offsets repeat only after SLACK keys (2^20).
        self.counter += 1
        return (self.counter * 4099) % self.SLACK

    def data(self, off, size):
        return self.view[off: off + size]

    def fill(self, buf, slot, off, size):
        buf.slot_view(slot, size)[:] = self.view[off: off + size]

    def matches(self, buf, slot, off, size):
        return _libc.memcmp(buf.slot_addr(slot), self.addr + off, size) == 0

    def first_difference(self, buf, slot, off, size):
        got = buf.slot_view(slot, size)
        want = self.view[off: off + size]
        for pos in range(0, size, BLOCK):
            if got[pos: pos + BLOCK] != want[pos: pos + BLOCK]:
                return pos
        return None


def import_kvfs_module():
    """The kvfs Python client (batch ioctl): installed, or python/ next to
    tools/ when run from a source tree. None if neither is there."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    if importlib.util.find_spec("kvfs") is None and os.path.isdir(os.path.join(src, "kvfs")):
        sys.path.insert(0, os.path.abspath(src))
    try:
        return importlib.import_module("kvfs")
    except ImportError:
        return None


def key_names(directory, prefix, count):
    """LMCache-like chunk file names (model@world@worker@hash.data), as bytes
    paths plus their temp names; computed before timing."""
    keys, tmps = [], []
    for i in range(count):
        h = hashlib.sha256(f"{prefix}-{i}".encode()).hexdigest()
        p = os.path.join(directory, f"bench-model@8@{prefix}@{h}.data").encode()
        keys.append(p)
        tmps.append(p + b".tmp")
    return keys, tmps


# ---------------------------------------------------------------- the connector loop

def store_keys(keys, tmps, views, direct, stop):
    """LMCache's store, per key: stat (must be missing); open tmp; one write;
    close; rename. Returns the number of keys stored."""
    flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
    if direct:
        flags |= os.O_DIRECT
    for path, tmp, view in zip(keys, tmps, views):
        if stop.is_set():
            raise Interrupted(signal.SIGINT)
        try:
            os.stat(path)
            raise BenchError(f"{path.decode()}: exists before it was stored")
        except FileNotFoundError:
            pass
        fd = os.open(tmp, flags, 0o644)
        try:
            n = os.write(fd, view)
            while n < len(view):  # a short write; regular files rarely do this
                n += os.write(fd, view[n:])
        finally:
            os.close(fd)
        os.rename(tmp, path)
    return len(keys)


def load_keys(keys, views, direct, stop):
    """A request's load, as LMCache does it: the lookup (stat of every key:
    contains() before the retrieve), then per key: open; one read of the
    whole chunk; close. Returns a list of (key index, bytes read, size from
    stat)."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    if direct:
        flags |= os.O_DIRECT
    sizes = [os.stat(path).st_size for path in keys]
    got = []
    for i, (path, view) in enumerate(zip(keys, views)):
        if stop.is_set():
            raise Interrupted(signal.SIGINT)
        fd = os.open(path, flags)
        try:
            n = os.readv(fd, [view])
            while 0 < n < len(view):  # short read: finish it, and record it
                m = os.readv(fd, [view[n:]])
                if m == 0:
                    break
                n += m
        finally:
            os.close(fd)
        got.append((i, n, sizes[i]))
    return got


def run_threads(fn, count, stop):
    """Runs fn(tid) in `count` threads that start together; returns
    (wall seconds from the first start to the last end, results by tid).
    Raises the first worker error. The main thread waits in join() so that
    signals reach it; on an interrupt the workers see `stop` and end."""
    barrier = threading.Barrier(count)
    starts, ends, results, errors = [0.0] * count, [0.0] * count, [None] * count, []

    def body(tid):
        try:
            barrier.wait()
            starts[tid] = time.perf_counter()
            results[tid] = fn(tid)
            ends[tid] = time.perf_counter()
        except threading.BrokenBarrierError:
            pass
        except BaseException as e:  # noqa: B036 -- handed to the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(t,), daemon=True) for t in range(count)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        if any(t.is_alive() for t in threads):
            stop.set()
            barrier.abort()
            for t in threads:
                t.join(timeout=120)
    if errors:
        e = errors[0]
        if isinstance(e, OSError):
            raise BenchError(os_error_text(e)) from e
        raise e
    return max(ends) - min(starts), results


# ---------------------------------------------------------------- targets

class Target:
    """A mounted filesystem the workloads run in (under `workdir`)."""

    name = ""
    mnt = ""
    cold_method = None

    def daemon_pid(self):
        """The pid of the process serving the mount (kvfs, when ours)."""
        return None

    def cpu(self):
        return CpuMeter(self.daemon_pid())

    @property
    def workdir(self):
        return os.path.join(self.mnt, "kvfs-bench")

    def prepare_workdir(self):
        shutil.rmtree(self.workdir, ignore_errors=True)
        os.makedirs(self.workdir)

    def cold(self):
        """Makes the next access cold; returns how."""
        drop_kernel_caches()
        self.cold_method = "drop_caches"
        return self.cold_method

    def teardown(self, keep):
        pass


class KvfsTarget(Target):
    """kvfs: mkfs.kvfs + the daemon (managed), or an existing mount."""

    name = "kvfs"

    def __init__(self, bench, mnt, image=None, index=None, managed=True, owned=True):
        self.bench = bench
        self.mnt = mnt
        self.image = image
        self.index = index
        self.managed = managed
        # Our own image file (removed at teardown), not a device or file the
        # user named with --kvfs-device.
        self.owned = owned
        self.proc = None
        self.log_path = os.path.join(bench.dir, "kvfs.log")
        self.warned_warm = False
        self.cold_method = None
        self.unmounting = False  # fusermount3 -u sent to the current daemon

    def daemon_pid(self):
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def format(self, size):
        cmd = [self.bench.mkfs_bin, "-f", "-q"]
        if self.index:
            cmd += ["--index", self.index]
        # An image file gets --size (mkfs.kvfs creates or extends it); a
        # block device, or a non-empty file the user named, is used as it is.
        if not is_block_device(self.image) and (
                self.owned or not os.path.exists(self.image) or os.path.getsize(self.image) == 0):
            cmd += ["--size", str(size)]
        run(cmd + [self.image], timeout=600)

    def start(self):
        opts = []
        if self.index:
            opts.append(f"index={self.index}")
        if self.bench.args.kvfs_options:
            opts.append(self.bench.args.kvfs_options)
        cmd = [self.bench.kvfs_bin, "-f"] + (["-o", ",".join(opts)] if opts else [])
        cmd += [self.image, self.mnt]
        log = open(self.log_path, "ab")
        try:
            with GATE.critical():
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
                self.unmounting = False
        finally:
            log.close()
        deadline = time.monotonic() + 60
        while fstype_at(self.mnt) != "fuse.kvfs":
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                raise BenchError(f"kvfs exited with {rc} before mounting: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"kvfs did not mount {self.mnt} within 60 s: {self.log_tail()}")
            time.sleep(0.01)

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                lines = f.read().strip().splitlines()
            return " | ".join(lines[-3:]) or "(no output)"
        except OSError:
            return "(no log)"

    def stop(self, teardown=False):
        """Unmounts and waits for the daemon (it writes out staged data
        first); a non-zero exit is an error. With `teardown`, also ends a
        daemon interrupted while mounting, and unmounts lazily if busy."""
        alive = self.proc is not None and self.proc.poll() is None
        if teardown and alive and not self.unmounting and fstype_at(self.mnt) != "fuse.kvfs":
            # Interrupted while the daemon was starting: it may mount any
            # moment. Let it, and unmount; or end it (SIGTERM: clean exit).
            deadline = time.monotonic() + 10
            while (fstype_at(self.mnt) != "fuse.kvfs" and self.proc.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            if fstype_at(self.mnt) != "fuse.kvfs" and self.proc.poll() is None:
                self.proc.terminate()
        if fstype_at(self.mnt) == "fuse.kvfs":
            self.unmounting = True
            for attempt in range(20):
                r = run(["fusermount3", "-u", self.mnt], check=False)
                if r.returncode == 0 or fstype_at(self.mnt) != "fuse.kvfs":
                    break
                time.sleep(0.25)
            else:
                if not teardown:
                    raise BenchError(f"fusermount3 -u {self.mnt}: {r.stderr.strip()}")
                run(["fusermount3", "-u", "-z", self.mnt], check=False)
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                raise BenchError(f"kvfs did not exit within 600 s of the unmount: {self.log_tail()}")
            self.proc = None
            if rc != 0:
                raise BenchError(f"kvfs exited with {rc} after the unmount: {self.log_tail()}")

    def cold(self):
        ctl = os.path.join(self.mnt, ".kvfs", "drop_cache")
        if os.path.exists(ctl):
            with open(ctl, "w") as f:
                f.write("1\n")
            how = "drop_cache"
        elif self.managed:
            self.stop()
            self.start()
            how = "remount"
        else:
            if not self.warned_warm:
                self.bench.progress.message(
                    "kvfs-bench: warning: no MOUNT/.kvfs/drop_cache and the kvfs mount is not "
                    "ours to remount: kvfs loads may be served from its RAM cache")
                self.warned_warm = True
            how = "none"
        drop_kernel_caches()
        self.cold_method = how
        return how

    def teardown(self, keep):
        if self.managed:
            try:
                self.stop(teardown=True)
            finally:
                if self.proc is not None and self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                if not keep and self.image and self.owned:
                    if os.path.exists(self.image):
                        os.unlink(self.image)
                    shutil.rmtree(self.index or self.image + ".index", ignore_errors=True)
                elif not keep and self.index:
                    shutil.rmtree(self.index, ignore_errors=True)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


class Ext4Target(Target):
    """ext4 on a loop device (direct I/O) over an image file, on a device,
    or an existing mount of any kernel filesystem."""

    name = "ext4"

    def __init__(self, bench, mnt, image=None, device=None, managed=True):
        self.bench = bench
        self.mnt = mnt
        self.image = image
        self.device = device
        self.managed = managed
        self.loop = None
        self.loop_dio = None

    def setup(self, size):
        if self.image:
            with open(self.image, "wb") as f:
                # Allocated like kvfs's image (mkfs.kvfs uses posix_fallocate).
                os.posix_fallocate(f.fileno(), 0, size)
            r = run(["losetup", "-f", "--show", "--direct-io=on", self.image])
            self.loop = r.stdout.strip()
            self.device = self.loop
            try:
                with open(f"/sys/block/{os.path.basename(self.loop)}/loop/dio") as f:
                    self.loop_dio = f.read().strip() == "1"
            except OSError:
                self.loop_dio = None
            if self.loop_dio is False:
                self.bench.progress.message(
                    f"kvfs-bench: warning: {self.loop} does not use direct I/O; ext4 writes "
                    "may land in the host page cache")
        # No discard (it would punch holes in the image), inode tables and
        # journal written now (no lazy init thread during the measurements).
        run(["mkfs.ext4", "-F", "-q", "-m", "0", "-E",
             "lazy_itable_init=0,lazy_journal_init=0,nodiscard", self.device], timeout=600)
        run(["mount", "-t", "ext4", self.device, self.mnt], timeout=120)

    def teardown(self, keep):
        if not self.managed:
            shutil.rmtree(self.workdir, ignore_errors=True)
            return
        try:
            if fstype_at(self.mnt) is not None:
                for attempt in range(20):
                    r = run(["umount", self.mnt], check=False)
                    if r.returncode == 0:
                        break
                    time.sleep(0.25)
                else:
                    run(["umount", "-l", self.mnt], check=False)
        finally:
            if self.image:
                # Every loop device over our image, also one whose name we
                # never learned because a signal came right after losetup.
                r = run(["losetup", "-j", self.image], check=False)
                for line in r.stdout.splitlines():
                    dev = line.split(":", 1)[0].strip()
                    if dev:
                        run(["losetup", "-d", dev], check=False)
                if not keep and os.path.exists(self.image):
                    os.unlink(self.image)


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args, cfg):
        self.args = args
        self.cfg = cfg
        self.dir = cfg["dir"]
        # Where the image files go: --dir, or the tmpfs mounted at DIR/ram
        # (--ram; mounted by setup_scratch, unmounted by teardown).
        self.ram_dir = os.path.join(self.dir, "ram") if cfg.get("ram") else None
        self.ram_mounted = False
        self.data_dir = self.ram_dir or self.dir
        self.samples = []
        self.status = {}  # workload -> {"status", "verified", "reason"}
        self.targets = {}
        self.stop = threading.Event()
        self.burst_pid = None
        self.progress = Progress(0)
        self.pattern = None
        self.kvfs_bin = cfg["kvfs_bin"]
        self.mkfs_bin = cfg["mkfs_bin"]
        self.lock_fd = None
        self.fio_files = []
        self.fio_cmd = None
        self.fio_target = None
        self.fio_rounds_done = False
        self.made_mnt_dirs = []

    # ------------------------------------------------------------ plan

    def plan_steps(self):
        c = self.cfg
        n = 0
        fs = len(c["filesystems"])
        if "fio" in c["workloads"]:
            n += 1 + c["rounds"] * len(c["sizes"]) * 2 * len(c["fio_depths"])
        if "lmcache" in c["workloads"]:
            n += c["rounds"] * len(c["modes"]) * fs * sum(
                self.repeats(c["keys"] * m * size) for size in c["sizes"] for m in c["batches"])
        if "lookup" in c["workloads"]:
            n += c["rounds"] * fs
        if "restore" in c["workloads"]:
            n += c["rounds"] * fs
        if "batch" in c["workloads"]:
            if import_kvfs_module() is None:  # a "not available" step per shape
                n += c["rounds"] * len(c["batch_shapes"])
            else:
                n += c["rounds"] * (sum(self.repeats(k * size) for k, size in c["batch_shapes"])
                                    + 1)
        return n

    def record(self, **sample):
        self.samples.append(sample)
        return sample

    def mark(self, workload, status, verified=None, reason=""):
        prev = self.status.get(workload)
        if prev and prev["status"] == "failed":
            return  # the first failure is the one to report
        self.status[workload] = {"status": status, "verified": verified, "reason": reason}

    # ------------------------------------------------------------ setup / teardown

    def setup_scratch(self):
        os.makedirs(self.dir, exist_ok=True)
        self.lock_fd = os.open(os.path.join(self.dir, ".kvfs-bench.lock"),
                               os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BenchError(f"{self.dir} is in use by another kvfs-bench run") from None
        # What an earlier run killed with SIGKILL may have left behind.
        table = mount_table()
        for name in ("mnt-kvfs", "mnt-ext4"):
            m = os.path.join(self.dir, name)
            if m in table:
                self.progress.message(f"kvfs-bench: unmounting {m}, left by an earlier run")
                if table[m][0].startswith("fuse"):
                    run(["fusermount3", "-u", "-z", m], check=False)
                else:
                    run(["umount", "-l", m], check=False)
        ram = os.path.join(self.dir, "ram")
        for image in (os.path.join(self.dir, "ext4.img"), os.path.join(ram, "ext4.img")):
            r = run(["losetup", "-j", image], check=False)
            for line in r.stdout.splitlines():
                run(["losetup", "-d", line.split(":", 1)[0]], check=False)
        if table.get(ram, (None, None)) == ("tmpfs", RAM_SOURCE):
            self.progress.message(f"kvfs-bench: unmounting the tmpfs {ram}, left by an earlier run")
            run(["umount", "-l", ram], check=False)
        if self.ram_dir:
            self.mount_ram()

    def mount_ram(self):
        """--ram: a tmpfs of cfg['ram_bytes'] at DIR/ram for the images."""
        size = self.cfg["ram_bytes"]
        self.mnt_dir("ram")
        self.progress.message(f"kvfs-bench: mounting a tmpfs of {fmt_size(size)} at "
                              f"{self.ram_dir} (the RAM device)")
        # Marked mounted before the command: a signal that lands while mount
        # runs must still find it in teardown (which checks the mount table).
        self.ram_mounted = True
        run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", RAM_SOURCE, self.ram_dir],
            timeout=60)
        if mount_table().get(self.ram_dir, (None, None))[0] != "tmpfs":
            raise BenchError(f"mount -t tmpfs {self.ram_dir}: not mounted afterwards")

    def unmount_ram(self):
        """Unmounts the --ram tmpfs (its files go with it). Raises BenchError
        when only a lazy unmount succeeded."""
        if not self.ram_mounted:
            return
        self.ram_mounted = False
        if mount_table().get(self.ram_dir, (None, None)) != ("tmpfs", RAM_SOURCE):
            return
        for attempt in range(20):
            r = run(["umount", self.ram_dir], check=False)
            if r.returncode == 0:
                return
            time.sleep(0.25)
        run(["umount", "-l", self.ram_dir], check=False)
        raise BenchError(f"umount {self.ram_dir}: {r.stderr.strip()} (unmounted lazily)")

    def mnt_dir(self, name):
        m = os.path.join(self.dir, name)
        if not os.path.isdir(m):
            os.makedirs(m)
            self.made_mnt_dirs.append(m)
        return m

    def setup_targets(self):
        a, c = self.args, self.cfg
        if "kvfs" in c["filesystems"]:
            if a.kvfs_mount:
                if fstype_at(a.kvfs_mount) != "fuse.kvfs":
                    raise BenchError(f"--kvfs-mount {a.kvfs_mount}: no kvfs mounted there")
                t = KvfsTarget(self, os.path.realpath(a.kvfs_mount), managed=False)
            else:
                if a.kvfs_device:
                    t = KvfsTarget(self, self.mnt_dir("mnt-kvfs"), image=a.kvfs_device,
                                   index=os.path.join(self.dir, "kvfs.index"), owned=False)
                else:
                    t = KvfsTarget(self, self.mnt_dir("mnt-kvfs"),
                                   image=os.path.join(self.data_dir, "kvfs.img"))
                self.targets["kvfs"] = t  # registered first: teardown covers a half setup
                self.progress.message(f"kvfs-bench: mkfs.kvfs {t.image} and mount at {t.mnt}")
                t.format(c["image_size"])
                t.start()
            self.targets["kvfs"] = t
            t.prepare_workdir()
        if "ext4" in c["filesystems"]:
            if a.ext4_mount:
                if fstype_at(a.ext4_mount) is None:
                    raise BenchError(f"--ext4-mount {a.ext4_mount}: nothing is mounted there")
                t = Ext4Target(self, os.path.realpath(a.ext4_mount), managed=False)
            else:
                if a.ext4_device:
                    t = Ext4Target(self, self.mnt_dir("mnt-ext4"), device=a.ext4_device)
                else:
                    t = Ext4Target(self, self.mnt_dir("mnt-ext4"),
                                   image=os.path.join(self.data_dir, "ext4.img"))
                self.targets["ext4"] = t
                what = t.device or f"a loop device over {t.image}"
                self.progress.message(f"kvfs-bench: mkfs.ext4 on {what} and mount at {t.mnt}")
                t.setup(c["image_size"])
            self.targets["ext4"] = t
            t.prepare_workdir()

    def teardown(self):
        """Undoes everything setup did, as far as it got. Never raises."""
        errors = []
        self.stop.set()
        if self.burst_pid:
            try:
                os.kill(self.burst_pid, signal.SIGKILL)
                os.waitpid(self.burst_pid, 0)
            except OSError:
                pass
            self.burst_pid = None
        for name in ("kvfs", "ext4"):
            t = self.targets.get(name)
            if t is None:
                continue
            try:
                t.teardown(self.args.keep)
            except BaseException as e:  # noqa: B036 -- teardown goes on
                errors.append(f"{name}: {e}")
        for p in self.fio_files:
            if not self.args.keep and os.path.exists(p):
                os.unlink(p)
        try:
            self.unmount_ram()
        except BaseException as e:  # noqa: B036 -- teardown goes on
            errors.append(f"tmpfs: {e}")
        for m in self.made_mnt_dirs:
            try:
                os.rmdir(m)
            except OSError:
                pass
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        return errors

    # ------------------------------------------------------------ fio

    def prepare_fio(self):
        """Makes fio's target and writes its region once; the rounds read
        and write it (run_fio_round)."""
        c = self.cfg
        fio = shutil.which("fio")
        if fio is None:
            self.progress.message("kvfs-bench: fio is missing; installing it (apt-get install fio)")
            r = run(["apt-get", "install", "-y", "-q", "fio"], check=False, timeout=600,
                    env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
            fio = shutil.which("fio")
            if fio is None:
                raise BenchError("fio is not installed and apt-get install fio failed: "
                                 + (r.stderr.strip().splitlines() or [""])[-1])
        target = self.args.fio_target
        if target is None and self.args.kvfs_device:
            target = self.args.kvfs_device  # before mkfs.kvfs formats it
        is_dev = target is not None and is_block_device(target)
        if target is None:
            # A file like kvfs's image, in the same directory. Not kvfs's own
            # image: kvfs must not be mounted on a file fio writes.
            target = os.path.join(self.data_dir, "fio.img")
            self.fio_files.append(target)
            with open(target, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, min(c["fio_region"], c["image_size"]))
        region = c["fio_region"]
        if is_dev:
            with open(target, "rb") as f:
                region = min(region, f.seek(0, os.SEEK_END))
        elif target in self.fio_files:
            region = min(region, c["image_size"])
        self.fio_target = target
        self.fio_cmd = [fio, "--name=kvfs-bench", f"--filename={target}", "--ioengine=io_uring",
                        "--direct=1", "--offset=0", f"--size={region}", "--output-format=json"]
        # Reads of never-written (unallocated or unwritten) blocks cost the
        # device nothing: write the region once before measuring.
        self.progress.step(f"fio: writing {fmt_size(region)} of {target} before reading it")
        run(self.fio_cmd + ["--rw=write", "--bs=4M", "--iodepth=16"], timeout=1800)
        self.progress.result("done")
        if target not in self.fio_files:
            # A device or file of the user's, which may be (or overlap) what
            # kvfs or ext4 are about to be made on: every fio round runs now,
            # before they are. Only fio's own scratch file is measured in the
            # rounds between the workloads.
            for rnd in range(c["rounds"]):
                self.run_fio_round(rnd)
            self.fio_rounds_done = True

    def run_fio_round(self, rnd):
        c = self.cfg
        if self.fio_rounds_done:
            return
        runtime_ms = max(1, int(c["fio_runtime"] * 1000))
        for size in c["sizes"]:
            for rw in ("read", "write"):
                for depth in c["fio_depths"]:
                    self.progress.step(f"fio {rw} bs={fmt_size(size)} qd={depth} "
                                       f"round {rnd + 1}/{c['rounds']}")
                    r = run(self.fio_cmd + [f"--rw={rw}", f"--bs={size}", f"--iodepth={depth}",
                                            "--time_based", f"--runtime={runtime_ms}ms"],
                            timeout=600)
                    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0][rw]
                    mbps = job["bw_bytes"] / 1e6
                    self.record(workload="fio", op=rw, fs="device", mode="direct",
                                size=size, batches=1, depth=depth, round=rnd,
                                value=mbps, unit="MB/s", iops=job["iops"],
                                bytes=job["io_bytes"], seconds=job["runtime"] / 1000,
                                lat_mean_us=job["clat_ns"]["mean"] / 1000,
                                target=self.fio_target)
                    self.progress.result(f"{mbps:.0f} MB/s")

    # ------------------------------------------------------------ lmcache

    def repeats(self, nbytes):
        """Samples of a configuration that moves `nbytes` in one round: as
        many as it takes to move sample_bytes. Why: one request of 32 x
        256 KiB lasts 6 ms, and a single such sample per round swung with
        the shared disk's moment (kvfs and ext4 in the same round alike)."""
        return max(1, -(-self.cfg["sample_bytes"] // nbytes))

    def run_lmcache_config(self, t, rnd, size, m, mode, buf, rep):
        c = self.cfg
        n = c["keys"]
        direct = mode == "direct"
        d = os.path.join(t.workdir, f"lmcache-r{rnd}.{rep}-{fmt_size(size)}-m{m}-{mode}")
        os.makedirs(d)
        names = [key_names(d, f"r{rnd}.{rep}t{tid}", n) for tid in range(m)]
        offs = [[self.pattern.next_offset() for _ in range(n)] for _ in range(m)]
        for tid in range(m):
            for k in range(n):
                self.pattern.fill(buf, tid * n + k, offs[tid][k], size)
        views = [[buf.slot_view(tid * n + k, size) for k in range(n)] for tid in range(m)]
        common = dict(workload="lmcache", fs=t.name, mode=mode, size=size, batches=m, keys=n,
                      round=rnd, repeat=rep, bytes=size * n * m)
        try:
            meter = t.cpu()
            secs, _ = run_threads(
                lambda tid: store_keys(names[tid][0], names[tid][1], views[tid], direct,
                                       self.stop), m, self.stop)
            store = self.record(op="store", seconds=secs, value=size * n * m / secs / 1e6,
                                unit="MB/s", **meter.stop(), **common)
            buf.poison()
            cold = t.cold()
            meter = t.cpu()
            secs, got = run_threads(
                lambda tid: load_keys(names[tid][0], views[tid], direct, self.stop),
                m, self.stop)
            cpu = meter.stop()
            if FAULT == "flip-load-byte":
                buf.view[size // 2] ^= 0xFF
            bad = []
            for tid in range(m):
                for k, nread, st_size in got[tid]:
                    slot = tid * n + k
                    if nread != size or st_size != size:
                        bad.append(f"{names[tid][0][k].decode()}: read {nread} bytes, "
                                   f"stat size {st_size}, stored {size}")
                    elif not self.pattern.matches(buf, slot, offs[tid][k], size):
                        pos = self.pattern.first_difference(buf, slot, offs[tid][k], size)
                        bad.append(f"{names[tid][0][k].decode()}: bytes differ from what was "
                                   f"stored, first in the 4 KiB block at offset {pos}")
            load = self.record(op="load", seconds=secs, value=size * n * m / secs / 1e6,
                               unit="MB/s", verified=not bad, mismatches=len(bad),
                               cold=cold, **cpu, **common)
            if bad:
                raise BenchError(f"lmcache load on {t.name} ({mode}, {fmt_size(size)}, M={m}): "
                                 f"{len(bad)} of {n * m} keys did not verify; first: {bad[0]}")
            return store, load
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    def run_lmcache_round(self, rnd):
        c = self.cfg
        order = self.fs_order(rnd)
        for size in c["sizes"]:
            for m in c["batches"]:
                buf = AlignedBuffer(c["keys"] * m, size)
                reps = self.repeats(c["keys"] * m * size)
                try:
                    for mode in c["modes"]:
                        # kvfs and ext4 alternate, sample by sample.
                        for rep in range(reps):
                            for name in order:
                                t = self.targets[name]
                                of = f" sample {rep + 1}/{reps}" if reps > 1 else ""
                                self.progress.step(
                                    f"lmcache {mode} {fmt_size(size)} x{c['keys']} M={m} on "
                                    f"{name} round {rnd + 1}/{c['rounds']}{of}")
                                store, load = self.run_lmcache_config(t, rnd, size, m, mode,
                                                                      buf, rep)
                                self.progress.result(f"store {store['value']:.0f} MB/s, "
                                                     f"load {load['value']:.0f} MB/s, verified")
                finally:
                    buf.close()

    # ------------------------------------------------------------ lookup

    def run_lookup_round(self, rnd):
        c = self.cfg
        n = c["lookup_names"]
        for name in self.fs_order(rnd):
            t = self.targets[name]
            self.progress.step(f"lookup storm {n} hits + {n} misses on {name} "
                               f"round {rnd + 1}/{c['rounds']}")
            d = os.path.join(t.workdir, f"lookup-r{rnd}")
            os.makedirs(d)
            try:
                hits, _ = key_names(d, f"lookup-r{rnd}", n)
                misses, _ = key_names(d, f"missing-r{rnd}", n)
                data = self.pattern.data(self.pattern.next_offset(), BLOCK)
                for p in hits:
                    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                    try:
                        os.write(fd, data)
                    finally:
                        os.close(fd)
                results = {}
                for op, names, want in (("hit", hits, True), ("miss", misses, False)):
                    cold = t.cold()
                    found = wrong = 0
                    t0 = time.perf_counter()
                    for p in names:
                        try:
                            st = os.stat(p)
                            found += 1
                            if st.st_size != BLOCK:
                                wrong += 1
                        except FileNotFoundError:
                            pass
                    secs = time.perf_counter() - t0
                    ok = (found == n and wrong == 0) if want else found == 0
                    results[op] = self.record(
                        workload="lookup", op=op, fs=t.name, mode="-", size=0, batches=1,
                        keys=n, round=rnd, seconds=secs, value=n / secs, unit="ops/s",
                        verified=ok, found=found, wrong_size=wrong, cold=cold)
                    if not ok:
                        raise BenchError(f"lookup {op}s on {t.name}: {found} of {n} names found "
                                         f"({wrong} with the wrong size), expected "
                                         f"{n if want else 0}")
                self.progress.result(f"hits {results['hit']['value']:.0f}/s, "
                                     f"misses {results['miss']['value']:.0f}/s")
            finally:
                if not self.stop.is_set():
                    shutil.rmtree(d, ignore_errors=True)

    # ------------------------------------------------------------ batch

    def run_batch_round(self, rnd):
        c = self.cfg
        kvfs_mod = import_kvfs_module()
        if kvfs_mod is None:
            reason = "no kvfs Python module (python/kvfs in the source tree, or installed)"
            if rnd == 0:
                self.record(workload="batch", op="batch", fs="kvfs", mode="-", size=0,
                            batches=1, round=0, value=None, unit="-", available=False,
                            reason=reason)
                self.mark("batch", "unavailable", None, reason)
            for n, size in c["batch_shapes"]:
                self.progress.step(f"batch ioctl {n}x{fmt_size(size)}")
                self.progress.result("not available: " + reason)
            return
        t = self.targets["kvfs"]
        # One client for the round, as a connector keeps one: what a batch
        # costs, not what opening a client and its first call cost.
        with kvfs_mod.Client(t.workdir) as client:
            for n, size in c["batch_shapes"]:
                reps = self.repeats(n * size)
                for rep in range(reps):
                    of = f" sample {rep + 1}/{reps}" if reps > 1 else ""
                    self.progress.step(f"batch ioctl {fmt_size(size)} x{n} on kvfs "
                                       f"round {rnd + 1}/{c['rounds']}{of}")
                    self.run_batch_shape(client, t, rnd, rep, n, size)
        self.run_batch_exists(kvfs_mod, t, rnd)

    def run_batch_shape(self, client, t, rnd, rep, n, size):
        """One sample of a batch shape: n keys of `size` stored with one
        write_batch and, caches dropped, loaded with one read_batch, from
        and into a buffer registered for the sample."""
        sub = f"batch-r{rnd}.{rep}-{fmt_size(size)}"
        d = os.path.join(t.workdir, sub)
        os.makedirs(d)
        try:
            with client.register(n * size) as buf:
                names = [f"{sub}/bench-model@8@b{rnd}.{rep}@{i:05d}.data" for i in range(n)]
                offs = [self.pattern.next_offset() for _ in range(n)]
                for i in range(n):
                    buf.view(i * size, size)[:] = self.pattern.data(offs[i], size)
                common = dict(workload="batch", fs="kvfs", mode="ioctl", size=size,
                              batches=1, keys=n, round=rnd, repeat=rep, bytes=size * n)
                meter = t.cpu()
                t0 = time.perf_counter()
                res = client.write_batch(
                    [(names[i], buf.view(i * size, size)) for i in range(n)])
                secs = time.perf_counter() - t0
                cpu = meter.stop()
                failed = [r for r in res if not r.ok]
                if failed:
                    raise BenchError(f"batch store: {len(failed)} of {n} keys failed; "
                                     f"first: {failed[0].name}: {failed[0].error}")
                store = self.record(op="store", seconds=secs, value=size * n / secs / 1e6,
                                    unit="MB/s", **cpu, **common)
                buf.view()[:] = b"\xa5" * buf.size  # nothing stale can verify
                cold = t.cold()
                meter = t.cpu()
                t0 = time.perf_counter()
                res = client.read_batch(names, buf, size=size)
                secs = time.perf_counter() - t0
                cpu = meter.stop()
                bad = []
                for i, r in enumerate(res):
                    if not r.ok or r.value != size:
                        bad.append(f"{names[i]}: {r.error or f'{r.value} bytes'}")
                    elif buf.view(i * size, size) != self.pattern.data(offs[i], size):
                        bad.append(f"{names[i]}: bytes differ from what was stored")
                load = self.record(op="load", seconds=secs, value=size * n / secs / 1e6,
                                   unit="MB/s", verified=not bad, mismatches=len(bad),
                                   cold=cold, **cpu, **common)
                if bad:
                    raise BenchError(f"batch load ({fmt_size(size)}): {len(bad)} of {n} keys "
                                     f"did not verify; first: {bad[0]}")
            self.progress.result(f"store {store['value']:.0f} MB/s, "
                                 f"load {load['value']:.0f} MB/s, verified")
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    def run_batch_exists(self, kvfs_mod, t, rnd):
        """EXISTS of lookup_names names (half of them missing) in one call,
        against an os.path.exists loop over the same names; cold caches.
        Three samples of each per round (one with --sample-bytes 0): a call
        lasts about 20 ms."""
        n = self.cfg["lookup_names"]
        self.progress.step(f"batch exists {n} names on kvfs round {rnd + 1}/{self.cfg['rounds']}")
        d = os.path.join(t.workdir, f"batch-exists-r{rnd}")
        os.makedirs(d)
        try:
            names = [f"bench-model@8@e{rnd}@{i:06d}.data" for i in range(n)]
            for name in names[::2]:
                os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY, 0o644))
            want = [i % 2 == 0 for i in range(n)]
            paths = [os.path.join(d, name) for name in names]
            for rep in range(3 if self.cfg["sample_bytes"] else 1):
                common = dict(workload="batch", fs="kvfs", mode="ioctl", size=0, batches=1,
                              keys=n, round=rnd, repeat=rep, unit="names/s")
                t.cold()
                t0 = time.perf_counter()
                got_loop = [os.path.exists(p) for p in paths]
                loop_s = time.perf_counter() - t0
                t.cold()  # (a remount, without drop_cache, needs no client open)
                with kvfs_mod.Client(d) as client:
                    # The client's entry table is made and registered once, as
                    # a long-running client has it: what is timed is the call.
                    client.exists_batch(["kvfs-bench-not-a-key"])
                    t0 = time.perf_counter()
                    got = client.exists_batch(names)
                    batch_s = time.perf_counter() - t0
                ok = got == want and got_loop == want
                self.record(op="exists loop", seconds=loop_s, value=n / loop_s, verified=ok,
                            **common)
                r = self.record(op="exists", seconds=batch_s, value=n / batch_s, verified=ok,
                                speedup=loop_s / batch_s, **common)
                if not ok:
                    raise BenchError(
                        f"batch exists: {sum(a != b for a, b in zip(got, want))} of {n} "
                        f"answers wrong (os.path.exists: "
                        f"{sum(a != b for a, b in zip(got_loop, want))})")
            self.progress.result(f"{r['value']:.0f} names/s, {loop_s / batch_s:.1f}x "
                                 "an os.path.exists loop")
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    # ------------------------------------------------------------ restore

    def _burst_writer(self, d, offs, size, wfd):
        """Child process: stores one chunk of `size` bytes per offset in
        `offs` with the connector's loop (buffered), one progress byte per
        stored key."""
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        try:
            _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        except Exception:  # noqa: BLE001 -- best effort
            pass
        keys, tmps = key_names(d, "burst", len(offs))
        views = [self.pattern.data(off, size) for off in offs]
        flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
        for path, tmp, view in zip(keys, tmps, views):
            fd = os.open(tmp, flags, 0o644)
            try:
                n = os.write(fd, view)
                while n < len(view):
                    n += os.write(fd, view[n:])
            finally:
                os.close(fd)
            os.rename(tmp, path)
            os.write(wfd, b".")

    def _start_burst(self, d, count, size):
        # Offsets from the parent's counter: later keys never reuse them.
        offs = [self.pattern.next_offset() for _ in range(count)]
        r, w = os.pipe()
        with GATE.critical():
            pid = os.fork()
            if pid == 0:
                # The child never leaves this section (nor returns into the
                # parent's stack): its signals stay deferred until it resets
                # them, and it ends in os._exit.
                code = 1
                try:
                    os.close(r)
                    self._burst_writer(d, offs, size, w)
                    code = 0
                except BaseException as e:  # noqa: B036 -- the child reports and exits
                    try:
                        os.write(2, f"kvfs-bench: burst writer: {e}\n".encode())
                    except OSError:
                        pass
                finally:
                    os._exit(code)
            self.burst_pid = pid
        os.close(w)
        return r

    def _load_restore(self, t, keys, buf, offs, size):
        """Loads and verifies the restore's keys: (seconds, CPU seconds)."""
        meter = t.cpu()
        t0 = time.perf_counter()
        got = load_keys(keys, [buf.slot_view(i, size) for i in range(len(keys))], False,
                        self.stop)
        secs = time.perf_counter() - t0
        cpu = meter.stop()
        bad = [keys[i].decode() for i, nread, st_size in got
               if nread != size or st_size != size
               or not self.pattern.matches(buf, i, offs[i], size)]
        if bad:
            raise BenchError(f"restore on {t.name}: {len(bad)} of {len(keys)} keys did not "
                             f"verify; first: {bad[0]}")
        return secs, cpu

    def run_restore_round(self, rnd):
        c = self.cfg
        k, size, burst = c["restore_keys"], c["restore_size"], c["burst"]
        burst_keys = max(1, burst // size)
        for name in self.fs_order(rnd):
            t = self.targets[name]
            self.progress.step(f"restore {k}x{fmt_size(size)}, idle and during a "
                               f"{fmt_size(burst)} store burst, on {name} "
                               f"round {rnd + 1}/{c['rounds']}")
            d = os.path.join(t.workdir, f"restore-r{rnd}")
            bd = os.path.join(d, "burst")
            os.makedirs(bd)
            buf = AlignedBuffer(k, size)
            try:
                keys, tmps = key_names(d, f"restore-r{rnd}", k)
                offs = [self.pattern.next_offset() for _ in range(k)]
                for i in range(k):
                    self.pattern.fill(buf, i, offs[i], size)
                store_keys(keys, tmps, [buf.slot_view(i, size) for i in range(k)], False,
                           self.stop)
                common = dict(workload="restore", fs=t.name, mode="buffered", size=size,
                              batches=1, keys=k, round=rnd, bytes=k * size, burst=burst)
                buf.poison()
                cold = t.cold()
                idle, cpu = self._load_restore(t, keys, buf, offs, size)
                self.record(op="idle", seconds=idle, value=idle, unit="s", verified=True,
                            cold=cold, **cpu, **common)
                buf.poison()
                t.cold()
                # The burst: another process stores burst_keys chunks; the
                # restore starts once it has issued half of them.
                rfd = self._start_burst(bd, burst_keys, size)
                t_burst = time.perf_counter()
                issued = 0
                threshold = max(1, int(burst_keys * BURST_START_FRACTION))
                while issued < threshold:
                    chunk = os.read(rfd, threshold - issued)
                    if not chunk:
                        break
                    issued += len(chunk)
                at_start = issued
                dirty_start = dirty_bytes()
                busy, cpu = self._load_restore(t, keys, buf, offs, size)
                dirty_end = dirty_bytes()
                os.set_blocking(rfd, False)
                try:
                    while True:
                        chunk = os.read(rfd, 1 << 16)
                        if not chunk:
                            break
                        issued += len(chunk)
                except BlockingIOError:
                    pass
                at_end = issued
                os.set_blocking(rfd, True)
                while True:
                    chunk = os.read(rfd, 1 << 16)
                    if not chunk:
                        break
                    issued += len(chunk)
                os.close(rfd)
                _, status = os.waitpid(self.burst_pid, 0)
                self.burst_pid = None
                burst_secs = time.perf_counter() - t_burst
                if status != 0 or issued != burst_keys:
                    raise BenchError(f"restore on {t.name}: the burst writer failed after "
                                     f"{issued} of {burst_keys} stores (status {status})")
                self.record(op="busy", seconds=busy, value=busy, unit="s", verified=True,
                            burst_issued_at_start=at_start * size,
                            burst_issued_at_end=at_end * size,
                            burst_ended_before_restore=at_end == burst_keys,
                            dirty_bytes_at_start=dirty_start, dirty_bytes_at_end=dirty_end,
                            burst_seconds=burst_secs, **cpu, **common)
                self.record(op="busy/idle", seconds=None, value=busy / idle, unit="x",
                            verified=True, **common)
                self.progress.result(f"idle {idle:.3f} s, busy {busy:.3f} s "
                                     f"({busy / idle:.2f}x), verified")
            finally:
                buf.close()
                if not self.stop.is_set():
                    shutil.rmtree(d, ignore_errors=True)
                    os.sync()

    # ------------------------------------------------------------ driver

    def fs_order(self, rnd):
        """Alternates which filesystem goes first, so that drift over a run
        (host caches, other load) does not favour one side."""
        names = [f for f in FILESYSTEMS if f in self.targets]
        return names if rnd % 2 == 0 else names[::-1]

    def run_workload(self, name, fn):
        try:
            fn()
            if name not in self.status:
                self.mark(name, "ok", True)
        except BenchError as e:
            self.mark(name, "failed", False, str(e))
            self.progress.message(f"kvfs-bench: {name} FAILED: {e}")
        except OSError as e:
            self.mark(name, "failed", False, os_error_text(e))
            self.progress.message(f"kvfs-bench: {name} FAILED: {os_error_text(e)}")

    def run_all(self):
        c = self.cfg
        self.progress = Progress(self.plan_steps())
        self.pattern = Pattern(max(c["sizes"] + [s for _, s in c["batch_shapes"]]
                                   + [c["restore_size"], BLOCK]), seed=c["seed"])
        failed = set()
        if "fio" in c["workloads"]:
            self.run_workload("fio", self.prepare_fio)
            if self.status.get("fio", {}).get("status") == "failed":
                failed.add("fio")
        if any(w in c["workloads"] for w in ("lmcache", "lookup", "restore", "batch")):
            self.setup_targets()
        for rnd in range(c["rounds"]):
            for w, fn in (("fio", self.run_fio_round),
                          ("lmcache", self.run_lmcache_round),
                          ("lookup", self.run_lookup_round),
                          ("batch", self.run_batch_round),
                          ("restore", self.run_restore_round)):
                if w in c["workloads"] and w not in failed:
                    self.run_workload(w, lambda: fn(rnd))
                    if self.status.get(w, {}).get("status") == "failed":
                        failed.add(w)
        self.progress.done()


# ---------------------------------------------------------------- summary

def summarize(samples, cfg):
    """Rows of the table: medians, min and max over rounds per filesystem,
    and the ratios (kvfs speed / ext4 speed, kvfs speed / device limit)."""
    def stats(vals):
        vals = [v for v in vals if v is not None]
        if not vals:
            return None
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                "n": len(vals)}

    fio = {}
    for s in samples:
        if s["workload"] == "fio":
            fio.setdefault((s["op"], s["size"], s["depth"]), []).append(s["value"])
    fio_rows = []
    limit = {}
    for (op, size, depth), vals in sorted(fio.items()):
        st = stats(vals)
        fio_rows.append({"op": op, "size": size, "depth": depth, **st})
        if st["median"] > limit.get((op, size), (0, 0))[0]:
            limit[(op, size)] = (st["median"], depth)

    groups = {}
    order = []
    for s in samples:
        if s["workload"] == "fio" or s.get("available") is False:
            continue
        key = (s["workload"], s["op"], s["mode"], s["size"], s["batches"], s.get("keys"))
        if key not in groups:
            groups[key] = {"unit": s["unit"], "keys": s.get("keys")}
            order.append(key)
        groups[key].setdefault(s["fs"], []).append(s["value"])
        if s.get("cpu_client_s") is not None and s.get("bytes"):
            acc = groups[key].setdefault("cpu", {}).setdefault(
                s["fs"], {"daemon": 0.0, "client": 0.0, "system": 0.0, "bytes": 0,
                          "daemon_known": True})
            acc["client"] += s["cpu_client_s"]
            acc["system"] += s["cpu_system_s"]
            acc["bytes"] += s["bytes"]
            if s.get("cpu_daemon_s") is None:
                acc["daemon_known"] = False
            else:
                acc["daemon"] += s["cpu_daemon_s"]

    rows = []
    for key in order:
        workload, op, mode, size, m, _ = key
        g = groups[key]
        row = {"workload": workload, "op": op, "mode": mode, "size": size, "batches": m,
               "keys": g["keys"], "unit": g["unit"],
               "kvfs": stats(g.get("kvfs", [])), "ext4": stats(g.get("ext4", [])),
               "limit": None, "limit_depth": None, "kvfs_vs_ext4": None, "kvfs_vs_limit": None}
        kv, ex = row["kvfs"], row["ext4"]
        if workload in ("lmcache", "batch"):
            lim = limit.get(("write" if op == "store" else "read", size))
            if lim:
                row["limit"], row["limit_depth"] = lim
        elif workload == "restore" and op in ("idle", "busy"):
            lim = limit.get(("read", size))
            if lim:
                # The time the device needs for the restore's bytes at its best.
                row["limit"] = g["keys"] * size / (lim[0] * 1e6)
                row["limit_depth"] = lim[1]
        if kv and ex and kv["median"] and ex["median"] and row["unit"] != "x":
            r = kv["median"] / ex["median"]
            row["kvfs_vs_ext4"] = 1 / r if row["unit"] == "s" else r
        if kv and row["limit"] and kv["median"]:
            r = kv["median"] / row["limit"]
            row["kvfs_vs_limit"] = 1 / r if row["unit"] == "s" else r
        # CPU seconds per GiB moved: totals over every sample of the row
        # (one sample lasts milliseconds; /proc/PID/stat counts 10 ms ticks).
        for fs, acc in g.get("cpu", {}).items():
            gib = acc["bytes"] / GiB
            row[f"cpu_{fs}"] = {
                "daemon": acc["daemon"] / gib if acc["daemon_known"] and fs == "kvfs" else None,
                "client": acc["client"] / gib, "system": acc["system"] / gib,
                "bytes": acc["bytes"]}
        rows.append(row)
    for s in (s for s in samples if s.get("available") is False):
        rows.append({"workload": "batch", "op": "batch", "mode": "-", "size": 0, "batches": 1,
                     "keys": None, "unit": "-", "kvfs": None, "ext4": None, "limit": None,
                     "limit_depth": None, "kvfs_vs_ext4": None, "kvfs_vs_limit": None,
                     "note": "not available: " + s["reason"]})
    return fio_rows, rows


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:.3f}"
    if unit == "x":
        return f"{v:.2f}"
    return f"{v:.0f}"


def fmt_cell(st, unit):
    if not st:
        return "-"
    if st["n"] == 1:
        return fmt_value(st["median"], unit)
    return (f"{fmt_value(st['median'], unit)} "
            f"[{fmt_value(st['min'], unit)}-{fmt_value(st['max'], unit)}]")


def render_table(cols, rows):
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c))
              for i, c in enumerate(cols)]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(cols, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    return "\n".join(out)


OP_LABELS = {("lookup", "hit"): "stat existing (cold)", ("lookup", "miss"): "stat missing (cold)",
             ("restore", "idle"): "load, idle volume",
             ("restore", "busy"): "load, store burst", ("restore", "busy/idle"): "slowdown busy/idle"}


def fmt_cpu(cpu, with_daemon):
    """'daemon/client/system' (kvfs) or 'client/system' CPU s/GiB."""
    if not cpu:
        return "-"
    vals = ([cpu["daemon"]] if with_daemon else []) + [cpu["client"], cpu["system"]]
    return "/".join("-" if v is None else f"{v:.2f}" for v in vals)


def device_note(cfg):
    """What the device of the run stands for (--ram), or None."""
    if not cfg.get("ram"):
        return None
    return (f"Device: RAM, a tmpfs of {fmt_size(cfg['ram_bytes'])} mounted for this run at "
            f"{os.path.join(cfg['dir'], 'ram')} (kvfs's image, ext4's loop image and fio's file "
            "on it). It stands for a device faster than the software: what is measured is the "
            "software's own path.\nIt does not model DMA: every byte the device moves costs a "
            "CPU copy here, for ext4 once and for kvfs once more (into its cache, then to the "
            "caller); an NVMe drive copies by DMA, so the CPU columns include copies a drive "
            "would not cost.")


def format_report(fio_rows, rows, cfg):
    parts = []
    note = device_note(cfg)
    if note:
        parts.append(note)
    if fio_rows:
        depths = sorted({r["depth"] for r in fio_rows})
        table = []
        for op in ("read", "write"):
            for size in sorted({r["size"] for r in fio_rows}):
                cells = {r["depth"]: r for r in fio_rows if r["op"] == op and r["size"] == size}
                if not cells:
                    continue
                best = max(cells.values(), key=lambda r: r["median"])
                table.append([op, fmt_size(size)]
                             + [fmt_cell(cells.get(d), "MB/s") for d in depths]
                             + [f"{best['median']:.0f} (qd{best['depth']})"])
        parts.append("Device limit: fio, io_uring, O_DIRECT, MB/s, median [min-max]\n"
                     + render_table(["op", "bs"] + [f"qd{d}" for d in depths] + ["best"], table))
    if rows:
        table, notes = [], []
        for r in rows:
            if "note" in r:
                notes.append(f"{r['workload']:<9} {r['note']}")
                continue
            if r["workload"] == "batch" and r["size"] == 0:
                size = f"{r['keys']} names"
            elif r["workload"] in ("lmcache", "batch"):
                size = f"{fmt_size(r['size'])} x{r['keys']}"
            elif r["workload"] == "restore":
                size = f"{r['keys']}x{fmt_size(r['size'])}"
            else:
                size = f"{r['keys']} names"
            unit = r["unit"]
            table.append([r["workload"], OP_LABELS.get((r["workload"], r["op"]), r["op"]),
                          r["mode"], size, str(r["batches"]), unit,
                          fmt_cell(r["kvfs"], unit), fmt_cell(r["ext4"], unit),
                          fmt_value(r["limit"], unit),
                          "-" if r["kvfs_vs_ext4"] is None else f"{r['kvfs_vs_ext4']:.2f}",
                          "-" if r["kvfs_vs_limit"] is None else f"{r['kvfs_vs_limit']:.2f}",
                          fmt_cpu(r.get("cpu_kvfs"), True), fmt_cpu(r.get("cpu_ext4"), False)])
        parts.append(f"Workloads: median [min-max] over {cfg['rounds']} round(s); ratios are "
                     "kvfs speed / other speed (above 1: kvfs faster)\n"
                     "CPU s/GiB: CPU seconds per GiB moved, totals over the row's samples, "
                     "during the timed phase only: dmn the kvfs daemon's user+system "
                     "(/proc/PID/stat), cli the workload process's (getrusage), sys SYSTEM-WIDE "
                     "busy time of all CPUs (/proc/stat: every process and kernel thread, "
                     "other load on the machine included; for ext4 the only place its "
                     "writeback and loop-device work shows)\n"
                     + render_table(["workload", "op", "mode", "chunk", "M", "unit", "kvfs",
                                     "ext4", "limit", "kvfs/ext4", "kvfs/limit",
                                     "kvfs s/GiB dmn/cli/sys", "ext4 s/GiB cli/sys"], table)
                     + "".join("\n" + n for n in notes))
    return "\n\n".join(parts)


def plot(path, rows, fio_rows, cfg, machine):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lm = [r for r in rows if r["workload"] == "lmcache"]
    batches = sorted({r["batches"] for r in lm}) or [1]
    ops = ["store", "load"]
    fig, axes = plt.subplots(len(ops), len(batches), figsize=(5.2 * len(batches), 7.5),
                             squeeze=False)
    sizes = sorted({r["size"] for r in lm})
    colors = {"kvfs": "tab:blue", "ext4": "tab:orange"}
    for i, op in enumerate(ops):
        for j, m in enumerate(batches):
            ax = axes[i][j]
            for fs in ("kvfs", "ext4"):
                for mode, style in (("buffered", "-"), ("direct", "--")):
                    pts = [(r["size"], r[fs]) for r in lm if r["op"] == op and r["batches"] == m
                           and r["mode"] == mode and r[fs]]
                    if not pts:
                        continue
                    xs = [p[0] / MiB for p in pts]
                    ys = [p[1]["median"] for p in pts]
                    err = [[p[1]["median"] - p[1]["min"] for p in pts],
                           [p[1]["max"] - p[1]["median"] for p in pts]]
                    ax.errorbar(xs, ys, yerr=err, color=colors[fs], linestyle=style, marker="o",
                                capsize=3, label=f"{fs} {'O_DIRECT' if mode == 'direct' else mode}")
            lim = [(r["size"], r["limit"]) for r in lm if r["op"] == op and r["batches"] == m
                   and r["mode"] == "buffered" and r["limit"]]
            if lim:
                ax.plot([s / MiB for s, _ in lim], [v for _, v in lim], color="black",
                        linestyle=":", marker="s", label="device limit (fio best qd)")
            ax.set_xscale("log")
            ax.set_xticks([s / MiB for s in sizes])
            ax.set_xticklabels([fmt_size(s) for s in sizes])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.set_xlabel("chunk size")
            ax.set_ylabel("MB/s")
            ax.set_title(f"{op}: {cfg['keys']} keys/batch, {m} batch{'es' if m > 1 else ''} "
                         "in flight", fontsize=10)
            ax.grid(True, alpha=0.3)
    mem = machine.get("mem_bytes", 0) / GiB
    fig.suptitle(f"kvfs-bench: LMCache-style loop, median of {cfg['rounds']} round(s), "
                 f"min-max bars\n{machine.get('cpus')} cores, {mem:.0f} GiB RAM, "
                 f"kernel {machine.get('kernel')}", fontsize=10)
    handles, labels = {}, []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    fig.legend([handles[lab] for lab in labels], labels, loc="lower center",
               ncol=min(5, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main

def build_parser():
    ap = argparse.ArgumentParser(
        prog="kvfs-bench", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--dir", default="/var/tmp/kvfs-bench",
                    help="scratch directory for images and mountpoints (default %(default)s); "
                         "it should be on the disk to measure")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and counts, one round (well under a minute)")
    ap.add_argument("--workloads", metavar="LIST", default=",".join(WORKLOADS),
                    help="comma-separated subset of " + ",".join(WORKLOADS))
    ap.add_argument("--fs", metavar="LIST", default=",".join(FILESYSTEMS),
                    help="filesystems to measure: kvfs,ext4 (default both)")
    ap.add_argument("--rounds", type=int, metavar="N", help=f"rounds per measurement ({FULL['rounds']})")
    ap.add_argument("--sizes", metavar="LIST", help=f"chunk sizes ({FULL['sizes']}); multiples of 4 KiB")
    ap.add_argument("--keys", type=int, metavar="N", help=f"keys per batch ({FULL['keys']})")
    ap.add_argument("--batches", metavar="LIST", help=f"batches in flight, one thread each ({FULL['batches']})")
    ap.add_argument("--modes", metavar="LIST", help=f"buffered and/or direct ({FULL['modes']})")
    ap.add_argument("--fio-runtime", type=float, metavar="S",
                    help=f"seconds per fio job ({FULL['fio_runtime']:g})")
    ap.add_argument("--fio-depths", metavar="LIST", help=f"fio queue depths ({FULL['fio_depths']})")
    ap.add_argument("--sample-bytes", metavar="SIZE",
                    help="lmcache and batch: repeat a configuration within a round until its "
                         f"samples move this many bytes ({FULL['sample_bytes']}); 0: one "
                         "sample each, and one EXISTS call per round instead of three")
    ap.add_argument("--fio-region", metavar="SIZE", help=f"bytes fio reads and writes ({FULL['fio_region']})")
    ap.add_argument("--fio-target", metavar="PATH", help="file or block device for fio (default: DIR/fio.img, "
                                         "or --kvfs-device before it is formatted); "
                                         "ITS CONTENTS ARE OVERWRITTEN")
    ap.add_argument("--lookup-names", type=int, metavar="N",
                    help=f"names per lookup storm ({FULL['lookup_names']})")
    ap.add_argument("--restore", metavar="KxSIZE", help=f"restore load, KEYSxSIZE ({FULL['restore']})")
    ap.add_argument("--batch-shapes", metavar="LIST",
                    help=f"batch ioctl shapes, KEYSxSIZE ({FULL['batch_shapes']})")
    ap.add_argument("--burst", metavar="SIZE", help=f"bytes of stores during the restore ({FULL['burst']})")
    ap.add_argument("--image-size", metavar="SIZE",
                    help=f"size of each image file ({FULL['image_size']}; with --ram: what the "
                         "largest workload needs)")
    ap.add_argument("--ram", action="store_true",
                    help="put the images and fio's file on a tmpfs that kvfs-bench mounts at "
                         "DIR/ram for the run (a device faster than the software)")
    ap.add_argument("--seed", type=int, metavar="N", default=1, help="seed of the data pattern (1)")
    ap.add_argument("--kvfs-mount", metavar="DIR", help="use this existing kvfs mount (nothing is formatted)")
    ap.add_argument("--ext4-mount", metavar="DIR",
                    help="use this existing mount of a kernel filesystem instead of ext4 on a "
                         "loop device")
    ap.add_argument("--kvfs-device", metavar="DEV", help="format this block device with mkfs.kvfs instead of "
                                          "an image file (index in DIR/kvfs.index)")
    ap.add_argument("--ext4-device", metavar="DEV", help="format this block device with mkfs.ext4 instead of "
                                          "a loop device")
    ap.add_argument("--kvfs-options", metavar="OPTS", help="extra -o options for the kvfs daemon")
    ap.add_argument("--kvfs-bin", metavar="PATH", help="kvfs daemon (default: $KVFS_BIN, else kvfs in PATH)")
    ap.add_argument("--mkfs-bin", metavar="PATH",
                    help="mkfs.kvfs (default: $MKFS_KVFS_BIN, else mkfs.kvfs in PATH)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the image files (everything is still unmounted)")
    ap.add_argument("--json", metavar="FILE", help="write every sample and the summary as JSON")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="plot throughput per chunk size (needs python3-matplotlib)")
    return ap


def find_binary(given, env, name):
    for cand in (given, os.environ.get(env), shutil.which(name),
                 shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")):
        if cand and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return None


def resolve_config(a):
    preset = QUICK if a.quick else FULL

    def pick(attr, key=None):
        v = getattr(a, attr)
        return preset[key or attr] if v is None else v

    cfg = {"quick": a.quick, "dir": os.path.abspath(a.dir), "seed": a.seed}
    cfg["workloads"] = parse_list(a.workloads, str.strip, "--workloads")
    bad = [w for w in cfg["workloads"] if w not in WORKLOADS]
    if bad:
        raise BenchError(f"--workloads: unknown {','.join(bad)} (known: {','.join(WORKLOADS)})")
    cfg["filesystems"] = parse_list(a.fs, str.strip, "--fs")
    bad = [f for f in cfg["filesystems"] if f not in FILESYSTEMS]
    if bad:
        raise BenchError(f"--fs: unknown {','.join(bad)} (known: kvfs,ext4)")
    cfg["rounds"] = pick("rounds")
    cfg["sizes"] = parse_list(pick("sizes"), parse_size, "--sizes")
    cfg["keys"] = pick("keys")
    cfg["batches"] = parse_list(pick("batches"), int, "--batches")
    cfg["modes"] = parse_list(pick("modes"), str.strip, "--modes")
    cfg["fio_runtime"] = pick("fio_runtime")
    cfg["fio_depths"] = parse_list(pick("fio_depths"), int, "--fio-depths")
    cfg["fio_region"] = parse_size(pick("fio_region"))
    cfg["sample_bytes"] = parse_size(pick("sample_bytes"))
    cfg["lookup_names"] = pick("lookup_names")
    cfg["restore_keys"], cfg["restore_size"] = parse_shape(pick("restore"), "--restore")
    cfg["batch_shapes"] = parse_list(pick("batch_shapes"),
                                     lambda t: parse_shape(t, "--batch-shapes"),
                                     "--batch-shapes")
    cfg["burst"] = parse_size(pick("burst"))
    cfg["ram"] = bool(a.ram)
    cfg["device"] = "ram" if a.ram else "disk"
    bad = [m for m in cfg["modes"] if m not in MODES]
    if bad:
        raise BenchError(f"--modes: unknown {','.join(bad)} (known: buffered,direct)")
    for s in cfg["sizes"] + [cfg["restore_size"]] + [s for _, s in cfg["batch_shapes"]]:
        if s <= 0 or s % BLOCK:
            raise BenchError(f"chunk size {s}: must be a positive multiple of 4096 (O_DIRECT)")
    for name in ("rounds", "keys", "lookup_names", "restore_keys"):
        if cfg[name] < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be at least 1")
    if min(cfg["batches"]) < 1 or min(cfg["fio_depths"]) < 1 or \
            min(k for k, _ in cfg["batch_shapes"]) < 1:
        raise BenchError("--batches, --fio-depths and the keys of --batch-shapes must be at least 1")
    # Every workload deletes its files before the next one starts; the
    # largest working set must fit, with room for allocation slack.
    need = 0
    if "lmcache" in cfg["workloads"]:
        need = max(need, max(cfg["sizes"]) * cfg["keys"] * max(cfg["batches"]))
    if "restore" in cfg["workloads"]:
        need = max(need, cfg["restore_keys"] * cfg["restore_size"] + cfg["burst"]
                   + cfg["restore_size"])
    if "lookup" in cfg["workloads"]:
        need = max(need, cfg["lookup_names"] * 8 * KiB)
    if "batch" in cfg["workloads"]:
        need = max(need, max(k * s for k, s in cfg["batch_shapes"]))
    managed = not (a.kvfs_mount and a.ext4_mount)
    if a.image_size is None and a.ram:
        # RAM is scarcer than disk: the images are as large as the run needs
        # (with room for allocation slack), not the disk default.
        cfg["image_size"] = max(GiB, align_up(int(need * 1.5 + 512 * MiB), 512 * MiB))
    else:
        cfg["image_size"] = parse_size(pick("image_size"))
    if managed and need * 1.25 + 256 * MiB > cfg["image_size"]:
        raise BenchError(f"--image-size {fmt_size(cfg['image_size'])} is too small: the largest "
                         f"workload holds {fmt_size(need)} at once (give at least "
                         f"{fmt_size(align_up(int(need * 1.25 + 256 * MiB), GiB))})")
    if a.ram:
        resolve_ram(a, cfg, need)
    return cfg


def resolve_ram(a, cfg, need):
    """--ram: the tmpfs size (every file put on it, which kvfs-bench
    allocates in full) and a check that it and the run fit in memory."""
    if a.keep:
        raise BenchError("--keep with --ram: the images live on the tmpfs, which is unmounted "
                         "at the end of the run")
    uses_fs = any(w in cfg["workloads"] for w in ("lmcache", "lookup", "restore", "batch"))
    files = []
    if uses_fs and "kvfs" in cfg["filesystems"] and not a.kvfs_mount and not a.kvfs_device:
        files.append(("kvfs image", cfg["image_size"]))
        files.append(("kvfs index", RAM_INDEX_BYTES))
    if uses_fs and "ext4" in cfg["filesystems"] and not a.ext4_mount and not a.ext4_device:
        files.append(("ext4 image", cfg["image_size"]))
    if "fio" in cfg["workloads"] and a.fio_target is None and not a.kvfs_device:
        files.append(("fio file", min(cfg["fio_region"], cfg["image_size"])))
    if not files:
        raise BenchError("--ram: nothing would be on the RAM device (every target is a mount or "
                         "device given on the command line)")
    cfg["ram_bytes"] = align_up(sum(n for _, n in files), MiB)
    # Besides the tmpfs: kvfs's RAM cache (cache_mb, 1024 MiB by default)
    # and the client's buffers (the largest working set) plus headroom.
    cache = 1024 * MiB
    m = re.search(r"(?:^|,)cache_mb=(\d+)", a.kvfs_options or "")
    if m:
        cache = int(m.group(1)) * MiB
    want = cfg["ram_bytes"] + cache + need + 512 * MiB
    avail = mem_available()
    if avail is not None and want > avail:
        raise BenchError(
            f"--ram: the tmpfs needs {fmt_size(cfg['ram_bytes'])} ("
            + ", ".join(f"{what} {fmt_size(n)}" for what, n in files)
            + f") and the run about {fmt_size(want - cfg['ram_bytes'])} more, but only "
            f"{fmt_size(avail)} of memory is available; give smaller --image-size, --sizes, "
            "--batches or --fio-region")


def main(argv=None):
    a = build_parser().parse_args(argv)
    try:
        cfg = resolve_config(a)
    except BenchError as e:
        print(f"kvfs-bench: {e}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("kvfs-bench: must run as root (it mounts filesystems, sets up loop devices and "
              "drops the page cache)", file=sys.stderr)
        return 2
    uses_fs = any(w in cfg["workloads"] for w in ("lmcache", "lookup", "restore", "batch"))
    if uses_fs and "kvfs" in cfg["filesystems"] and not a.kvfs_mount:
        if not os.path.exists("/dev/fuse"):
            print("kvfs-bench: /dev/fuse is missing: FUSE is not available here "
                  "(modprobe fuse; in a container, pass --device /dev/fuse)", file=sys.stderr)
            return 2
        cfg["kvfs_bin"] = find_binary(a.kvfs_bin, "KVFS_BIN", "kvfs")
        cfg["mkfs_bin"] = find_binary(a.mkfs_bin, "MKFS_KVFS_BIN", "mkfs.kvfs")
        for key, name, opt in (("kvfs_bin", "kvfs", "--kvfs-bin"),
                               ("mkfs_bin", "mkfs.kvfs", "--mkfs-bin")):
            if cfg[key] is None:
                print(f"kvfs-bench: {name} not found (install kvfs, or give {opt})",
                      file=sys.stderr)
                return 2
        if not shutil.which("fusermount3"):
            print("kvfs-bench: fusermount3 not found (apt-get install fuse3)", file=sys.stderr)
            return 2
    else:
        cfg["kvfs_bin"] = cfg["mkfs_bin"] = None
    if uses_fs and "ext4" in cfg["filesystems"] and not a.ext4_mount:
        for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
            if not shutil.which(tool):
                print(f"kvfs-bench: {tool} not found (apt-get install e2fsprogs util-linux)",
                      file=sys.stderr)
                return 2
    if a.plot:
        try:
            importlib.import_module("matplotlib")  # fail now, not after the run
        except ImportError:
            print("kvfs-bench: --plot needs matplotlib (apt-get install python3-matplotlib)",
                  file=sys.stderr)
            return 2

    bench = Bench(a, cfg)

    def during_cleanup(signum, frame):
        sys.stderr.write("\nkvfs-bench: cleaning up, please wait\n")

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for s in handled:
        signal.signal(s, GATE.handler)

    started = datetime.datetime.now(datetime.timezone.utc)
    outcome, code = "ok", 0
    try:
        bench.setup_scratch()
        cfg["machine"] = machine_info(bench.data_dir)
        bench.run_all()
    except Interrupted as e:
        outcome, code = "interrupted", 128 + e.signum
        bench.progress.message(f"\nkvfs-bench: interrupted ({e}); tearing down")
    except BenchError as e:
        outcome, code = "error", 1
        bench.progress.message(f"kvfs-bench: {e}")
    finally:
        for s in handled:
            signal.signal(s, during_cleanup)
        errors = bench.teardown()
        for e in errors:
            print(f"kvfs-bench: teardown: {e}", file=sys.stderr)
        for s in handled:
            signal.signal(s, signal.SIG_DFL)
    if errors and code == 0:
        outcome, code = "error", 1

    for w in cfg["workloads"]:
        if w not in bench.status:
            bench.status[w] = {"status": "interrupted" if outcome == "interrupted" else "not run",
                               "verified": None, "reason": ""}
    failed = [w for w, s in bench.status.items() if s["status"] == "failed"]
    if failed and code == 0:
        code = 1
    fio_rows, rows = summarize(bench.samples, cfg)
    report = format_report(fio_rows, rows, cfg)
    if report:
        print(report)
    for w in failed:
        print(f"\nkvfs-bench: {w} FAILED: {bench.status[w]['reason']}")
    if a.json:
        doc = {"tool": "kvfs-bench", "format": 1, "command": sys.argv,
               "started": started.isoformat(timespec="seconds"),
               "seconds": round((datetime.datetime.now(datetime.timezone.utc)
                                 - started).total_seconds(), 1),
               "outcome": outcome, "exit_status": code, "config": cfg,
               "loadavg_at_end": os.getloadavg(),
               "kvfs_cold_method": {t.name: getattr(t, "cold_method", None)
                                    for t in bench.targets.values()},
               "workloads": bench.status, "fio": fio_rows, "rows": rows,
               "samples": bench.samples}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")
    if a.plot and any(r["workload"] == "lmcache" for r in rows):
        plot(a.plot, rows, fio_rows, cfg, cfg.get("machine", {}))
        print(f"\nplot: {a.plot}")
    return code


if __name__ == "__main__":
    sys.exit(main())
