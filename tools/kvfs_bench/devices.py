"""kvfs-bench --devices: how loads scale over N shaped devices.

Formats one volume over N image files, mounts it with -o shape (each device
completes commands as an NVMe drive would: 80 us, 2000 MB/s, or --shape),
writes the keys, and for each round remounts (cold RAM cache) and times:

  batch   K keys of 24 MiB read at once, one O_DIRECT reader thread each
  serial  the keys read one after another with O_DIRECT, at 4 MiB and 24 MiB

With --slow, it instead compares 1 MiB keys on devices 0-2 of a 4-device
volume, loaded 16 at a time while another thread keeps loading keys on
device 3, with device 3 shaped like the others and then 10x slower (ten
times the latency, a tenth of the bandwidth).

It reports GB/s per N, the speedup over the first N, and the daemon's CPU
seconds per GiB read (utime + stime of the kvfs process), which shows where
the machine's cores, not the devices, become the limit.

  tools/kvfs-bench --devices 1,4,8 [--shape 80:250] [--slow] \\
      --kvfs-bin build/tools/kvfs --mkfs-bin build/tools/mkfs.kvfs
"""
import argparse
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path and "fuse.kvfs" in line for line in f)


class Volume:
    def __init__(self, args, n, shape, workdir):
        self.args = args
        self.mnt = os.path.join(workdir, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        per = args.data_mib * MiB // n + 96 * MiB
        self.devs = [os.path.join(workdir, f"dev{i}.img") for i in range(n)]
        subprocess.run([args.mkfs_bin, "-f", "-q", "--size", str(per), *self.devs], check=True)
        self.options = "shape" if shape is None else f"shape={shape}"
        self.proc = None

    def start(self):
        self.log = open(self.mnt + ".log", "ab")
        self.proc = subprocess.Popen([self.args.kvfs_bin, "-f", "-o", self.options, *self.devs,
                                      self.mnt], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"kvfs did not mount; see {self.mnt}.log")
            time.sleep(0.01)

    def stop(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=True)
        self.proc.wait(timeout=120)

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_keys(vol, prefix, count, size):
    block = os.urandom(MiB)
    for k in range(count):
        with open(os.path.join(vol.mnt, f"{prefix}{k}"), "wb") as f:
            for _ in range(size // MiB):
                f.write(block)
    os.sync()


def read_direct(path, size, buf):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [buf], 0)
    finally:
        os.close(fd)
    if got != size:
        raise OSError(f"{path}: read {got} of {size} bytes")


def timed(vol, fn, nbytes):
    c0, t0 = vol.cpu_s(), time.perf_counter()
    fn()
    t, c = time.perf_counter() - t0, vol.cpu_s() - c0
    return nbytes / t / 1e9, c / (nbytes / (1 << 30))


def batch(vol, prefix, count, size):
    bufs = [mmap.mmap(-1, size) for _ in range(count)]
    errors = []

    def one(k):
        try:
            read_direct(os.path.join(vol.mnt, f"{prefix}{k}"), size, bufs[k])
        except OSError as e:
            errors.append(e)

    def run():
        ts = [threading.Thread(target=one, args=(k,)) for k in range(count)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
    return timed(vol, run, count * size)


def serial(vol, prefix, count, size):
    buf = mmap.mmap(-1, size)

    def run():
        for k in range(count):
            read_direct(os.path.join(vol.mnt, f"{prefix}{k}"), size, buf)
    return timed(vol, run, count * size)


TAG = b"KVFSBENCH:"


def write_tagged(vol, count):
    """1 MiB keys whose first bytes name them, so the images tell where each went."""
    pad = os.urandom(MiB)
    for k in range(count):
        head = TAG + f"t{k};".encode()
        with open(os.path.join(vol.mnt, f"t{k}"), "wb") as f:
            f.write(head + pad[len(head):])
    os.sync()


def device_of_keys(vol):
    found = {}
    for d, img in enumerate(vol.devs):
        with open(img, "rb") as f:
            while True:
                buf = f.read(8 * MiB)
                if not buf:
                    break
                at = buf.find(TAG)
                while at >= 0:
                    if at % 4096 == 0:
                        found[buf[at + len(TAG):buf.index(b";", at)].decode()] = d
                    at = buf.find(TAG, at + 1)
    return found


def slow_device(args):
    base = args.shape or "80:2000"
    lat, bw = (int(x) for x in base.split(":")[:2])
    slow = f"{base}/{lat * 10}:{max(1, bw // 10)}:3"
    out = {}
    with tempfile.TemporaryDirectory(prefix="kvfs-bench-devices-", dir=args.dir) as wd:
        args.data_mib = args.slow_keys
        vol = Volume(args, 4, base, wd)
        vol.start()
        write_tagged(vol, args.slow_keys)
        vol.stop()
        where = device_of_keys(vol)
        fast = [k for k, d in where.items() if d != 3]
        on_slow = [k for k, d in where.items() if d == 3]
        for name, spec in (("device 3 like the others", base), ("device 3 10x slower", slow)):
            vol.options = f"shape={spec}"
            results = []
            for _ in range(args.rounds):
                vol.start()
                stop = threading.Event()

                def background():
                    buf = mmap.mmap(-1, MiB)
                    i = 0
                    while not stop.is_set():
                        read_direct(os.path.join(vol.mnt, on_slow[i % len(on_slow)]), MiB, buf)
                        i += 1
                bg = threading.Thread(target=background)
                bg.start()
                bufs = [mmap.mmap(-1, MiB) for _ in range(16)]

                def load():
                    for g in range(0, len(fast) - 15, 16):
                        ts = [threading.Thread(target=read_direct,
                                               args=(os.path.join(vol.mnt, fast[g + j]), MiB,
                                                     bufs[j])) for j in range(16)]
                        for t in ts:
                            t.start()
                        for t in ts:
                            t.join()
                results.append(timed(vol, load, (len(fast) // 16) * 16 * MiB))
                stop.set()
                bg.join()
                vol.stop()
            out[name] = statistics.median(g for g, _ in results)
    return out


def measure(args, n, shape):
    with tempfile.TemporaryDirectory(prefix="kvfs-bench-devices-", dir=args.dir) as wd:
        vol = Volume(args, n, shape, wd)
        vol.start()
        write_keys(vol, "b", args.keys, 24 * MiB)
        write_keys(vol, "s", args.serial_keys, 4 * MiB)
        vol.stop()
        rows = {"batch 16x24MiB": [], "serial 24MiB": [], "serial 4MiB": []}
        for _ in range(args.rounds):
            for name, fn in (("batch 16x24MiB", lambda: batch(vol, "b", args.keys, 24 * MiB)),
                             ("serial 24MiB", lambda: serial(vol, "b", args.keys, 24 * MiB)),
                             ("serial 4MiB", lambda: serial(vol, "s", args.serial_keys, 4 * MiB))):
                vol.start()  # cold: nothing in the RAM cache
                rows[name].append(fn())
                vol.stop()
        return {k: (statistics.median(g for g, _ in v), statistics.median(c for _, c in v))
                for k, v in rows.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="kvfs-bench --devices", description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="1,4,8", help="device counts to compare (1,4,8)")
    ap.add_argument("--shape", help="-o shape=RULE for the daemon (default: 80 us, 2000 MB/s)")
    ap.add_argument("--keys", type=int, default=16, help="24 MiB keys per batch (16)")
    ap.add_argument("--serial-keys", type=int, default=48, help="4 MiB keys of the serial loop (48)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slow", action="store_true", help="one device 10x slower (see above)")
    ap.add_argument("--slow-keys", type=int, default=256, help="1 MiB keys for --slow (256)")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--kvfs-bin", default=os.environ.get("KVFS_BIN", "kvfs"))
    ap.add_argument("--mkfs-bin", default=os.environ.get("MKFS_KVFS_BIN", "mkfs.kvfs"))
    args = ap.parse_args(argv)
    if args.slow:
        r = slow_device(args)
        first = None
        for name, gbs in r.items():
            first = first or gbs
            print(f"keys on devices 0-2, {name}: {gbs:.2f} GB/s ({first / gbs:.2f}x the time)")
        return 0
    args.data_mib = args.keys * 24 + args.serial_keys * 4
    counts = [int(x) for x in args.devices.split(",")]
    base = None
    print(f"{'devices':>7} {'load':<15} {'GB/s':>6} {'x':>5} {'CPU s/GiB':>9}")
    for n in counts:
        r = measure(args, n, args.shape)
        if base is None:
            base = r
        for k, (gbs, cpu) in r.items():
            print(f"{n:>7} {k:<15} {gbs:6.2f} {gbs / base[k][0]:5.2f} {cpu:9.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
