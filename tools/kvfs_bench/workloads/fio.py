"""The device limit: fio at each chunk size and queue depth."""
import json
import os
import shutil

from ..common import fmt_size
from ..system import BenchError, is_block_device, run


class FioWorkload:
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
