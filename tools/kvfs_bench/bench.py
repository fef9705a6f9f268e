"""The benchmark run: scratch directory, the --ram device, targets, the
rounds of every workload, teardown."""
import fcntl
import os
import signal
import threading
import time

from .common import BLOCK, FILESYSTEMS, FS_WORKLOADS, RAM_SOURCE, BenchError
from .data import Pattern, StampedContent, import_kvfs_module
from .progress import Progress
from .common import fmt_size
from .system import fstype_at, mount_table, os_error_text, run
from .targets import Ext4Target, KvfsTarget
from .workloads import (BatchWorkload, EvictionWorkload, FioWorkload, LmcacheWorkload,
                        LookupWorkload, RestoreWorkload, VllmWorkload, WholeseqWorkload)


class Bench(FioWorkload, LmcacheWorkload, LookupWorkload, BatchWorkload, RestoreWorkload,
            EvictionWorkload, WholeseqWorkload, VllmWorkload):
    """One run: its configuration, targets, samples and teardown."""

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
        # Mounts a workload makes for itself (eviction), torn down with the rest.
        self.extra_targets = []
        self.stop = threading.Event()
        self.burst_pid = None
        self.progress = Progress(0)
        self.pattern = None
        self.content = None  # objects larger than the pattern (wholeseq, vllm)
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
        if "evict" in c["workloads"]:
            n += self.evict_plan_steps()
        if "wholeseq" in c["workloads"]:
            n += self.wholeseq_plan_steps()
        if "vllm" in c["workloads"]:
            n += self.vllm_plan_steps()
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
        for t in list(self.extra_targets):
            try:
                t.teardown(False)
            except BaseException as e:  # noqa: B036 -- teardown goes on
                errors.append(f"{t.mnt}: {e}")
        self.extra_targets.clear()
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

    def repeats(self, nbytes):
        """Samples of a configuration that moves `nbytes` in one round: as
        many as it takes to move sample_bytes. Why: one request of 32 x
        256 KiB lasts 6 ms, and a single such sample per round swung with
        the shared disk's moment (kvfs and ext4 in the same round alike)."""
        return max(1, -(-self.cfg["sample_bytes"] // nbytes))

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
        self.content = StampedContent(self.pattern)
        failed = set()
        if "fio" in c["workloads"]:
            self.run_workload("fio", self.prepare_fio)
            if self.status.get("fio", {}).get("status") == "failed":
                failed.add("fio")
        if any(w in c["workloads"] for w in FS_WORKLOADS):
            self.setup_targets()
        for rnd in range(c["rounds"]):
            for w, fn in (("fio", self.run_fio_round),
                          ("lmcache", self.run_lmcache_round),
                          ("lookup", self.run_lookup_round),
                          ("batch", self.run_batch_round),
                          ("restore", self.run_restore_round),
                          ("wholeseq", self.run_wholeseq_round),
                          ("vllm", self.run_vllm_round),
                          ("evict", self.run_evict_round)):
                if w in c["workloads"] and w not in failed:
                    self.run_workload(w, lambda: fn(rnd))
                    if self.status.get(w, {}).get("status") == "failed":
                        failed.add(w)
        self.progress.done()
