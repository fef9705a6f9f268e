"""Constants, errors, the signal gate and parsing of sizes and lists."""
import contextlib
import os
import signal

BLOCK = 4096
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

WORKLOADS = ["fio", "lmcache", "lookup", "batch", "restore"]
# Run only when named in --workloads: they mount volumes of their own.
EXTRA_WORKLOADS = ["evict", "wholeseq", "vllm"]
# The workloads that run on the kvfs and ext4 mounts (setup_targets).
FS_WORKLOADS = ("lmcache", "lookup", "restore", "batch", "wholeseq", "vllm")
FILESYSTEMS = ["kvfs", "ext4"]
MODES = ["buffered", "direct"]

# Defaults of a full run and of --quick; an option given on the command line
# wins over both.
FULL = dict(sizes="256K,4M,24M", keys=32, batches="1,8", modes="buffered,direct", rounds=3,
            fio_runtime=1.5, fio_depths="1,4,16,32", fio_region="4G", lookup_names=10000,
            restore="64x4M", burst="4G", image_size="12G", batch_shapes="64x256K,16x4M,16x24M",
            sample_bytes="64M", evict_keys=1500, evict_requests=15000, evict_capacity=0.30,
            evict_sizes="256K,4M", evict_volume="1G", evict_scan_ms=50,
            object_sizes="256M,1G", object_threads=4, object_count=2, vllm_sizes="2M,16M",
            vllm_threads="16,16", vllm_bytes="1G")
QUICK = dict(sizes="256K,1M", keys=8, batches="1,2", modes="buffered,direct", rounds=1,
             fio_runtime=0.5, fio_depths="1,16", fio_region="128M", lookup_names=300,
             restore="16x1M", burst="128M", image_size="1G", batch_shapes="8x256K,4x1M",
             sample_bytes="0", evict_keys=150, evict_requests=1500, evict_capacity=0.30,
             evict_sizes="256K", evict_volume="256M", evict_scan_ms=50,
             object_sizes="16M,32M", object_threads=2, object_count=1, vllm_sizes="2M,4M",
             vllm_threads="4,4", vllm_bytes="32M")

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


def percentile(vals, q):
    """The q-quantile (0..1) of vals by the nearest-rank rule."""
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]
