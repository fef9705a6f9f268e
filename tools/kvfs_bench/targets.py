"""The filesystems measured: kvfs (mkfs.kvfs + the daemon, or a mount) and
ext4 (on a loop device, a device, or a mount)."""
import os
import shutil
import subprocess
import time

from .common import GATE, BenchError
from .sampling import CpuMeter
from .system import drop_kernel_caches, fstype_at, is_block_device, run


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

    def __init__(self, bench, mnt, image=None, index=None, managed=True, owned=True,
                 options=None):
        self.bench = bench
        # -o options of this mount, after --kvfs-options (the eviction
        # workload mounts its own volumes with evict=...).
        self.options = options
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
        if self.options:
            opts.append(self.options)
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
