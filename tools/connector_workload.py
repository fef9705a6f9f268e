#!/usr/bin/env python3
"""An LMCache-style connector workload against a directory (a kvfs mount).

Does what a file-based KV-cache connector does, with the same calls:
  lookup   stat(key) for every key of a batch (all missing at first)
  store    per key: stat; open(tmp, "wb"); one write; close; rename(tmp, key)
  lookup   stat(key) for every key (all present now)
  load     per key: open(key, "rb"); one read of the whole chunk; close
and checks that every loaded chunk is byte-for-byte what was stored. With
--direct, stores and loads use O_DIRECT with page-aligned buffers (no
O_TRUNC on the temp file; ftruncate to the exact length), as connectors
that bypass the page cache do.

Prints a table of counts, MB/s and verification results; exits 1 if any
chunk did not verify. Uses only the Python standard library.

  tools/connector_workload.py /var/tmp/kvfs-quickstart/mnt --keys 64 --size 4M
"""
import argparse
import hashlib
import mmap
import os
import random
import shutil
import sys
import time

BLOCK = 4096


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("IB")
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def align_up(n):
    return (n + BLOCK - 1) // BLOCK * BLOCK


def key_name(i):
    # LMCache names a chunk after model, world size, worker and chunk hash.
    h = hashlib.sha256(f"chunk-{i}".encode()).hexdigest()
    return f"demo-model@1@0@{h}.data"


def store_buffered(path, data):
    try:
        os.stat(path)
        return False  # already stored
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)
    return True


def load_buffered(path, size):
    with open(path, "rb") as f:
        return f.read(size + 1)


class Aligned:
    def __init__(self, size):
        self.mem = mmap.mmap(-1, max(align_up(size), BLOCK))

    def close(self):
        self.mem.close()


def store_direct(path, data, buf):
    try:
        os.stat(path)
        return False
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
    try:
        buf.mem[: len(data)] = data
        padded = align_up(len(data))
        buf.mem[len(data):padded] = bytes(padded - len(data))
        view = memoryview(buf.mem)[:padded]
        done = 0
        while done < padded:
            done += os.pwrite(fd, view[done:], done)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    os.rename(tmp, path)
    return True


def load_direct(path, size, buf):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        view = memoryview(buf.mem)[: align_up(size)]
        done = 0
        while done < len(view):
            n = os.preadv(fd, [view[done:]], done)
            if n == 0:
                break
            done += n
        return bytes(buf.mem[:done])
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="directory to use (the workload works in DIR/connector_workload)")
    ap.add_argument("--keys", type=int, default=64)
    ap.add_argument("--size", default="4M", help="chunk size (K, M, G suffixes)")
    ap.add_argument("--direct", action="store_true", help="O_DIRECT stores and loads")
    args = ap.parse_args()
    size = parse_size(args.size)
    base = os.path.join(args.dir, "connector_workload")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)

    paths = [os.path.join(base, key_name(i)) for i in range(args.keys)]
    chunks = [random.Random(i).randbytes(size) for i in range(args.keys)]
    buf = Aligned(size) if args.direct else None
    rows = []

    def phase(name, fn, nbytes):
        t0 = time.perf_counter()
        result = fn()
        rows.append((name, args.keys, nbytes, time.perf_counter() - t0, result))

    def lookup(expect_present):
        def run():
            present = 0
            for p in paths:
                try:
                    os.stat(p)
                    present += 1
                except FileNotFoundError:
                    pass
            ok = present == (len(paths) if expect_present else 0)
            return (f"{present}/{len(paths)} present" if expect_present
                    else f"{len(paths) - present}/{len(paths)} missing"), ok
        return run

    def store():
        stored = 0
        for p, c in zip(paths, chunks):
            stored += store_direct(p, c, buf) if args.direct else store_buffered(p, c)
        return f"{stored}/{len(paths)} stored", stored == len(paths)

    def load():
        good = 0
        for p, c in zip(paths, chunks):
            got = load_direct(p, size, buf) if args.direct else load_buffered(p, size)
            good += got == c
        return f"{good}/{len(paths)} byte-exact", good == len(paths)

    phase("lookup (miss)", lookup(False), 0)
    phase("store", store, size * args.keys)
    phase("lookup (hit)", lookup(True), 0)
    phase("load", load, size * args.keys)
    if buf:
        buf.close()

    mode = "O_DIRECT" if args.direct else "buffered"
    print(f"connector workload: {args.keys} keys x {size / (1 << 20):g} MiB, {mode}, in {base}")
    print(f"{'phase':<14} {'ops':>6} {'MiB':>8} {'seconds':>8} {'MB/s':>9} {'ops/s':>9}  result")
    all_ok = True
    for name, ops, nbytes, secs, (text, ok) in rows:
        all_ok &= ok
        mbs = f"{nbytes / secs / 1e6:9.1f}" if nbytes else f"{'-':>9}"
        mib = f"{nbytes / (1 << 20):8.1f}" if nbytes else f"{'-':>8}"
        print(f"{name:<14} {ops:>6} {mib} {secs:8.3f} {mbs} {ops / secs:9.0f}  "
              f"{text}{'' if ok else '  <-- FAILED'}")
    print("verification:", "PASSED" if all_ok else "FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
