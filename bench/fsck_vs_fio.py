#!/usr/bin/env python3
"""fsck.kvfs --verify-data against fio on the same image.

Builds a volume with real data (kvfs-fsck-bench --write-data --keep), then
alternates, for several rounds, a grid of fio sequential O_DIRECT io_uring
reads of the data region (block sizes x queue depths; the best counts) with
one `fsck.kvfs -n --verify-data` run, so that both see the same machine
state. Prints per-round figures and the ratio of fsck's best to fio's best,
and of their medians.

  bench/fsck_vs_fio.py BUILD_DIR [--rounds 5] [--files 1024] [--file-bytes 4M]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def fio(img, size, bs, qd):
    out = subprocess.run(
        ["fio", "--name=r", f"--filename={img}", "--direct=1", "--ioengine=io_uring",
         "--rw=read", f"--bs={bs}", f"--iodepth={qd}", "--offset=1M", f"--size={size}",
         "--readonly", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["read"]["bw_bytes"] / 1e6


def fsck(build, img, extra):
    out = subprocess.run([os.path.join(build, "tools", "fsck.kvfs"), "-n", "--verify-data",
                          "--json", img] + extra, capture_output=True, text=True).stdout
    s = json.loads(out)["stats"]
    return s["verified_bytes"] / 1e6 / s["verify_seconds"], s["verified_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", default="1024")
    ap.add_argument("--file-bytes", default="4M")
    ap.add_argument("--fsck-args", default="", help="extra fsck.kvfs options")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="kvfs-fsck-fio-", dir="/var/tmp")
    try:
        subprocess.run([os.path.join(a.build, "bench", "kvfs-fsck-bench"), "--files", a.files,
                        "--file-bytes", a.file_bytes, "--write-data", "--keep", "--dir", d],
                       check=True, stdout=subprocess.DEVNULL)
        img = os.path.join(d, "kvfs.img")
        _, size = fsck(a.build, img, [])
        fio_best, fsck_runs, fio_runs = 0.0, [], []
        for r in range(a.rounds):
            grid = {}
            for bs in ("1M", "4M", "8M"):
                for qd in (4, 16, 32):
                    grid[(bs, qd)] = fio(img, size, bs, qd)
            (bs, qd), best = max(grid.items(), key=lambda kv: kv[1])
            got, _ = fsck(a.build, img, a.fsck_args.split())
            fio_runs.append(best)
            fsck_runs.append(got)
            fio_best = max(fio_best, best)
            print(f"round {r + 1}: fio best {best:.0f} MB/s (bs={bs} qd={qd}), "
                  f"fsck --verify-data {got:.0f} MB/s ({100 * got / best:.0f}%)", flush=True)
        print(f"bytes per pass: {size / 2**30:.2f} GiB")
        print(f"best:   fio {fio_best:.0f} MB/s, fsck {max(fsck_runs):.0f} MB/s "
              f"({100 * max(fsck_runs) / fio_best:.0f}%)")
        print(f"median: fio {statistics.median(fio_runs):.0f} MB/s, fsck "
              f"{statistics.median(fsck_runs):.0f} MB/s "
              f"({100 * statistics.median(fsck_runs) / statistics.median(fio_runs):.0f}%)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
