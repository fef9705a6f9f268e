"""The io_uring transport itself: what INIT negotiates, falling back, many
callers on every CPU, and teardown with requests in flight.

The rest of the suite runs on both transports (conftest.py); these tests
are for the io_uring run, which switches the kernel's FUSE over io_uring on.
"""
import mmap
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import (KVFS_BIN, MiB, Mount, TRANSPORT, URING_PARAM, kernel_param, mkfs,
                      mounted_fstype)
from kvio import payload, read_file, read_stats, write_file

FSCK_BIN = os.environ.get("FSCK_KVFS_BIN", "")

pytestmark = pytest.mark.skipif(TRANSPORT != "uring",
                                reason="transport tests belong to the io_uring run")


@pytest.fixture
def uring_off():
    """FUSE over io_uring switched off for the test (the run switches it on)."""
    with kernel_param(URING_PARAM, "N"):
        yield


def new_mount(workdir, options, size=512 * MiB, name="t"):
    image = os.path.join(workdir, f"{name}.img")
    mnt = os.path.join(workdir, f"{name}-mnt")
    os.mkdir(mnt)
    mkfs(image, size)
    return Mount(image, mnt, options)


def fsck_clean(image):
    if not FSCK_BIN:
        return
    r = subprocess.run([FSCK_BIN, "-n", image], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"fsck.kvfs -n: {r.stdout}{r.stderr}"


def store_load(mnt, name, size):
    data = payload(name, size)
    tmp = os.path.join(mnt, name + ".tmp")
    write_file(tmp, data)
    os.rename(tmp, os.path.join(mnt, name))
    assert read_file(os.path.join(mnt, name)) == data


def test_auto_negotiates_io_uring_where_enabled(workdir):
    m = new_mount(workdir, "transport=auto")
    m.start()
    try:
        store_load(m.path, "k", 3 * MiB + 5)
        with pytest.raises(FileNotFoundError):
            os.stat(os.path.join(m.path, "missing"))
        assert "FUSE transport: io_uring" in m.read_log()
    finally:
        m.stop()


def test_auto_falls_back_to_dev_fuse_where_switched_off(workdir, uring_off):
    m = new_mount(workdir, "transport=auto")
    m.start()
    try:
        store_load(m.path, "k", 1 * MiB)
        log = m.read_log()
        assert "FUSE transport: /dev/fuse" in log and "io_uring (" not in log
    finally:
        m.stop()


def test_uring_refuses_to_mount_where_switched_off_and_says_how(workdir, uring_off):
    image = os.path.join(workdir, "r.img")
    mnt = os.path.join(workdir, "r-mnt")
    os.mkdir(mnt)
    mkfs(image, 256 * MiB)
    r = subprocess.run([KVFS_BIN, "-f", "-o", "transport=uring", image, mnt],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert mounted_fstype(mnt) is None
    assert f"echo Y > {URING_PARAM}" in r.stdout + r.stderr


def test_many_callers_on_every_cpu_byte_exact(workdir):
    """Four threads per CPU, each pinned, store and load keys of sizes that
    cross entry and request boundaries, and stat missing names."""
    m = new_mount(workdir, "transport=uring", size=1024 * MiB)
    m.start()
    errors = []
    cpus = sorted(os.sched_getaffinity(0))

    def caller(i):
        try:
            os.sched_setaffinity(0, {cpus[i % len(cpus)]})
            for j in range(12):
                size = [4096, 256 << 10, 1 << 20, (2 << 20) + 333][(i + j) % 4]
                store_load(m.path, f"c{i}-{j}", size)
                with pytest.raises(FileNotFoundError):
                    os.stat(os.path.join(m.path, f"none-{i}-{j}"))
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(f"caller {i}: {e!r}")

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4 * len(cpus))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert len(os.listdir(m.path)) >= 12 * len(threads)
    finally:
        m.stop()
    fsck_clean(m.image)


def busy_callers(mnt, stop, errors):
    """Threads storing, fsyncing and loading until `stop`; each records what
    it fsynced (name -> data) for the check after a restart."""
    synced = {}
    kvfs_dev = os.stat(mnt).st_dev

    def caller(i):
        j = 0
        try:
            while not stop.is_set():
                name = f"b{i}-{j}"
                data = payload(name, (j % 5 + 1) * (300 << 10))
                write_file(os.path.join(mnt, name), data, fsync=True)
                # A daemon stopped by SIGTERM unmounts; a write after that
                # lands in the directory underneath, not in kvfs.
                if os.stat(os.path.join(mnt, name)).st_dev != kvfs_dev:
                    break
                synced[name] = data
                assert read_file(os.path.join(mnt, name)) == data
                j += 1
        except OSError:
            pass  # the daemon went away under it: expected
        except BaseException as e:  # noqa: B902
            errors.append(f"caller {i}: {e!r}")

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    return threads, synced


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_teardown_with_requests_in_flight_then_remount_clean(workdir, how):
    m = new_mount(workdir, "transport=uring", size=1024 * MiB)
    m.start()
    stop = threading.Event()
    errors = []
    threads, synced = busy_callers(m.path, stop, errors)
    time.sleep(1.5)
    if how == "sigterm":
        m.proc.send_signal(signal.SIGTERM)
        rc = m.proc.wait(timeout=120)
        assert rc == 0, m.read_log()
    else:
        m.proc.kill()
        m.proc.wait(timeout=60)
    stop.set()
    m.kill()  # lazy unmount if still mounted; forgets the daemon
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller stayed blocked"
    assert not errors, errors
    assert synced, "nothing was stored before the teardown"
    fsck_clean(m.image)

    m.start()
    try:
        for name, data in list(synced.items()):
            assert read_file(os.path.join(m.path, name)) == data, name
        store_load(m.path, "after", 2 * MiB)
    finally:
        m.stop()
    fsck_clean(m.image)


PAGES_LIMIT = "/proc/sys/fs/fuse/max_pages_limit"


@pytest.fixture
def pages_limit_4mib():
    """The kernel's cap on a FUSE request raised to 4 MiB for the test."""
    if not os.path.exists(PAGES_LIMIT):
        pytest.skip(f"this kernel has no {PAGES_LIMIT}")
    with kernel_param(PAGES_LIMIT, "1024"):
        yield


def direct_buffer(data):
    buf = mmap.mmap(-1, len(data))
    buf.write(data)
    return buf


def test_requests_above_1mib_byte_exact(workdir, pages_limit_4mib):
    """max_request_mb=4: a 24 MiB key travels as 4 MiB writes and reads,
    buffered and O_DIRECT, and reads back byte-exact, also at offsets that
    cross request boundaries."""
    m = new_mount(workdir, "transport=uring,max_request_mb=4", size=1024 * MiB)
    m.start()
    try:
        size = 24 * MiB
        data = payload("big", size)
        before = read_stats(m.path)["requests"]
        fd = os.open(os.path.join(m.path, "direct"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
        try:
            assert os.write(fd, direct_buffer(data)) == size
        finally:
            os.close(fd)
        writes = read_stats(m.path)["requests"].get("write", 0) - before.get("write", 0)
        assert writes <= size // (4 * MiB) + 1, writes
        write_file(os.path.join(m.path, "buffered"), data)

        before = read_stats(m.path)["requests"]
        fd = os.open(os.path.join(m.path, "direct"), os.O_RDONLY | os.O_DIRECT)
        try:
            back = mmap.mmap(-1, size)
            assert os.readv(fd, [back]) == size
            assert back[:] == data
        finally:
            os.close(fd)
        reads = read_stats(m.path)["requests"].get("read", 0) - before.get("read", 0)
        assert reads <= size // (4 * MiB) + 2, reads
        assert read_file(os.path.join(m.path, "buffered")) == data
        with open(os.path.join(m.path, "buffered"), "rb") as f:
            f.seek(3 * MiB + 17)
            assert f.read(6 * MiB) == data[3 * MiB + 17:9 * MiB + 17]
    finally:
        m.stop()
    fsck_clean(m.image)
