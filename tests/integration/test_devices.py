"""One kvfs volume over four image devices, on a real mount.

Where each chunk went is read from the images themselves: every 1 MiB chunk
written here starts with a tag naming its file and chunk, and after the
unmount the images are scanned for the tags (kvfs writes a chunk as one
block-aligned extent). fsck --json's per_device stats give the used bytes.
"""
import errno
import json
import os
import subprocess
import time

import pytest

import conftest
from conftest import KVFS_BIN, MiB, Mount, _live_mounts, mounted_fstype

# The FUSE transport under test, where conftest selects one.
with_transport = getattr(conftest, "with_transport", lambda options: options)

FSCK_BIN = os.environ.get("FSCK_KVFS_BIN", "")
needs_fsck = pytest.mark.skipif(not FSCK_BIN, reason="FSCK_KVFS_BIN not set")
NDEV = 4
TAG = b"KVFSTAG:"


class MultiMount(Mount):
    """Mount, with several devices before the mount point."""

    def __init__(self, devices, path, options=None):
        super().__init__(devices[0], path, options)
        self.devices = devices

    def start(self):
        self.conn = None
        args = [KVFS_BIN, "-f"]
        options = with_transport(self.options)
        if options:
            args += ["-o", options]
        args += [*self.devices, self.path]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while mounted_fstype(self.path) != "fuse.kvfs":
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                pytest.fail(f"kvfs exited with {rc} before mounting: {self.read_log()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"kvfs did not mount within 30 s: {self.read_log()}")
            time.sleep(0.01)
        self.conn = os.minor(os.stat(self.path).st_dev)
        _live_mounts.append(self)


@pytest.fixture
def vol4(workdir):
    devs = [os.path.join(workdir, f"dev{i}.img") for i in range(NDEV)]
    r = subprocess.run([os.environ["MKFS_KVFS_BIN"], "-f", "-q", "--size", str(160 * MiB),
                        *devs], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    mnt = os.path.join(workdir, "mnt")
    os.mkdir(mnt)
    m = MultiMount(devs, mnt)
    m.start()
    try:
        yield m
        if m.proc is not None:
            m.stop()
    finally:
        m.kill()


def chunk(name, i, size=MiB):
    head = TAG + f"{name}#{i};".encode()
    unit = f"{name}:{i}:".encode()
    body = unit * (size // len(unit) + 1)
    return (head + body)[:size]


def write_file(path, name, nchunks):
    with open(path, "wb") as f:
        for i in range(nchunks):
            f.write(chunk(name, i))


def read_equal(path, name, nchunks):
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == nchunks * MiB
    for i in range(nchunks):
        assert data[i * MiB:(i + 1) * MiB] == chunk(name, i), f"{path} chunk {i}"


def where(devices):
    """{(name, chunk): device index} from the tags on the images."""
    found = {}
    for d, img in enumerate(devices):
        with open(img, "rb") as f:
            while True:
                buf = f.read(8 * MiB)
                if not buf:
                    break
                for off in range(0, len(buf), 4096):
                    if buf[off:off + 8] == TAG:
                        end = buf.index(b";", off)
                        name, i = buf[off + 8:end].decode().split("#")
                        found[(name, int(i))] = d
    return found


def fsck_json(devices):
    r = subprocess.run([FSCK_BIN, "-n", "--json", *devices], capture_output=True, text=True)
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["errors"] == 0, r.stdout + r.stderr
    return rep


@needs_fsck
def test_large_file_and_serial_keys_spread_over_every_device(vol4):
    # 64 MiB file: its chunks stripe over all four devices.
    write_file(os.path.join(vol4.path, "big"), "big", 64)
    # A serial loop of one-chunk keys: consecutive keys start on different devices.
    for k in range(40):
        write_file(os.path.join(vol4.path, f"k{k}"), f"k{k}", 1)
    read_equal(os.path.join(vol4.path, "big"), "big", 64)
    vol4.stop()
    vol4.start()  # remount: still byte-exact
    read_equal(os.path.join(vol4.path, "big"), "big", 64)
    for k in range(40):
        read_equal(os.path.join(vol4.path, f"k{k}"), f"k{k}", 1)
    with open(os.path.join(vol4.path, ".kvfs", "stats")) as f:
        devs = json.load(f)["devices"]
    assert [d["path"] for d in devs] == vol4.devices
    # The cold load after the remount read about a quarter from each device.
    assert all(d["bytes"] >= 20 * MiB and d["errors"] == 0 for d in devs), devs
    vol4.stop()
    loc = where(vol4.devices)
    big = [loc[("big", i)] for i in range(64)]
    per = [big.count(d) for d in range(NDEV)]
    assert min(per) >= 14, f"64 MiB file chunks per device: {per}"
    keys = [loc[(f"k{k}", 0)] for k in range(40)]
    assert min(keys.count(d) for d in range(NDEV)) >= 5, f"serial keys per device: {keys}"
    rep = fsck_json(vol4.devices)
    assert len(rep["stats"]["per_device"]) == NDEV
    assert all(p["files"] > 0 for p in rep["stats"]["per_device"]), rep["stats"]["per_device"]


def device_metrics(mount, name):
    """{device index: value} of the Prometheus gauge `name` in .kvfs/metrics."""
    with open(os.path.join(mount, ".kvfs", "metrics")) as f:
        lines = f.read().splitlines()
    prefix = name + '{device="'
    return {int(line[len(prefix):line.index('"', len(prefix))]): int(line.split()[-1])
            for line in lines if line.startswith(prefix)}


def test_space_per_device_sums_to_statfs_and_is_what_was_written_there(vol4):
    # 64 MiB striped over every device and 40 one-chunk keys, each fsynced:
    # nothing is staged or reserved when the figures are read.
    names = [("big", 64)] + [(f"k{k}", 1) for k in range(40)]
    for name, n in names:
        with open(os.path.join(vol4.path, name), "wb") as f:
            for i in range(n):
                f.write(chunk(name, i))
            os.fsync(f.fileno())
    with open(os.path.join(vol4.path, ".kvfs", "stats")) as f:
        devs = json.load(f)["devices"]
    sv = os.statvfs(vol4.path)
    size = [d["size_bytes"] for d in devs]
    used = [d["used_bytes"] for d in devs]
    free = [d["free_bytes"] for d in devs]
    # Each device's data region: its image after the first MiB (superblock).
    assert size == [os.path.getsize(img) - MiB for img in vol4.devices] == [159 * MiB] * NDEV
    assert sum(size) == sv.f_blocks * sv.f_frsize
    assert sum(free) == sv.f_bfree * sv.f_frsize == sv.f_bavail * sv.f_frsize
    assert all(u + f == s for u, f, s in zip(used, free, size)), devs
    assert sum(used) == 104 * MiB and min(used) > 0, used
    assert all(0 < d["largest_free_bytes"] <= d["free_bytes"] for d in devs), devs
    # Prometheus says the same.
    for name, want in (("kvfs_device_size_bytes", size), ("kvfs_device_used_bytes", used),
                       ("kvfs_device_free_bytes", free)):
        assert device_metrics(vol4.path, name) == dict(enumerate(want)), name
    # And each device's used bytes are the chunks found on its image.
    vol4.stop()
    loc = where(vol4.devices)
    assert len(loc) == 104
    assert used == [MiB * list(loc.values()).count(d) for d in range(NDEV)]


@needs_fsck
def test_keys_leave_used_space_balanced(vol4):
    # 120 keys of 4 MiB fill 480 MiB of 640; then every third is deleted and
    # 1 MiB keys (one chunk each: the hash alone picks the device) take the space.
    for k in range(120):
        write_file(os.path.join(vol4.path, f"k{k}"), f"k{k}", 4)
    for k in range(0, 120, 3):
        os.unlink(os.path.join(vol4.path, f"k{k}"))
    for k in range(100):
        write_file(os.path.join(vol4.path, f"s{k}"), f"s{k}", 1)
    vol4.stop()
    used = [p["bytes"] for p in fsck_json(vol4.devices)["stats"]["per_device"]]
    assert max(used) <= 1.1 * min(used), f"used bytes per device: {used}"


def test_eio_on_one_device_fails_only_its_files(vol4):
    for k in range(24):
        write_file(os.path.join(vol4.path, f"k{k}"), f"k{k}", 1)
    write_file(os.path.join(vol4.path, "big"), "big", 8)
    vol4.stop()
    loc = where(vol4.devices)
    bad = 1
    vol4.options = f"fault_eio=read:0:{1 << 40}:{bad}"
    vol4.start()
    on_bad = [k for k in range(24) if loc[(f"k{k}", 0)] == bad]
    assert on_bad and len(on_bad) < 24
    for k in range(24):
        p = os.path.join(vol4.path, f"k{k}")
        if k in on_bad:
            with pytest.raises(OSError) as e:
                with open(p, "rb") as f:
                    f.read()
            assert e.value.errno == errno.EIO
        else:
            read_equal(p, f"k{k}", 1)
    with pytest.raises(OSError) as e:  # striped over every device, so over the bad one
        with open(os.path.join(vol4.path, "big"), "rb") as f:
            f.read()
    assert e.value.errno == errno.EIO
    # Writes keep working (devices are only failing reads here).
    write_file(os.path.join(vol4.path, "new"), "new", 2)
    vol4.stop()
    assert f"device {bad}: read of device {bad}" in vol4.read_log(), vol4.read_log()


def test_missing_device_is_refused_naming_it(workdir):
    devs = [os.path.join(workdir, f"dev{i}.img") for i in range(3)]
    subprocess.run([os.environ["MKFS_KVFS_BIN"], "-f", "-q", "--size", str(64 * MiB), *devs],
                   check=True)
    mnt = os.path.join(workdir, "mnt")
    os.mkdir(mnt)
    r = subprocess.run([KVFS_BIN, "-f", devs[0], devs[2], mnt], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "device 1 missing" in r.stderr, r.stderr
    assert devs[2] + " is device 2" in r.stderr, r.stderr


@needs_fsck
def test_added_device_keeps_data_and_takes_new_chunks(workdir):
    devs = [os.path.join(workdir, f"dev{i}.img") for i in range(3)]
    mkfs_bin = os.environ["MKFS_KVFS_BIN"]
    subprocess.run([mkfs_bin, "-f", "-q", "--size", str(96 * MiB), *devs], check=True)
    mnt = os.path.join(workdir, "mnt")
    os.mkdir(mnt)
    m = MultiMount(devs, mnt)
    m.start()
    try:
        for k in range(6):
            write_file(os.path.join(mnt, f"old{k}"), f"old{k}", 4)
        # Mounted: refused (the devices are locked).
        new = os.path.join(workdir, "dev3.img")
        r = subprocess.run([mkfs_bin, "--size", str(96 * MiB), "--add", new, *devs],
                           capture_output=True, text=True)
        assert r.returncode == 1 and not os.path.exists(new + ".index"), r.stderr
        m.stop()
        r = subprocess.run([mkfs_bin, "--size", str(96 * MiB), "--add", new, *devs],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "device 3" in r.stdout
        # The old three alone are no longer the whole volume.
        r = subprocess.run([KVFS_BIN, "-f", *devs, mnt], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1 and "device 3 missing" in r.stderr, r.stderr
        m.devices = devs + [new]
        m.start()
        for k in range(6):
            read_equal(os.path.join(mnt, f"old{k}"), f"old{k}", 4)
        write_file(os.path.join(mnt, "fresh"), "fresh", 8)
        read_equal(os.path.join(mnt, "fresh"), "fresh", 8)
        m.stop()
        loc = where(m.devices)
        fresh = [loc[("fresh", i)] for i in range(8)]
        # The empty device is 8 MiB behind the others (24 MiB over three): it
        # takes new chunks until it is within the 1/32 slack (3 MiB) of them.
        assert fresh.count(3) >= 6, fresh
        assert all(loc[(f"old{k}", i)] < 3 for k in range(6) for i in range(4))
        per = fsck_json(m.devices)["stats"]["per_device"]
        assert per[3]["bytes"] == fresh.count(3) * MiB and per[3]["files"] == 1, per
    finally:
        m.kill()
