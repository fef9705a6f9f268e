"""Loads served by the kernel (FUSE passthrough from per-file memory).

A read-only open of a cached file is answered so that the kernel reads the
file's memory itself: no READ request reaches kvfs. The kernel's rule (while
a file has such an open, every open of it must be one) must never show as
an EIO: writers, truncates, renames, unlinks and eviction of a file that a
reader holds behave as on ext4, and nothing written through such an open is
lost. Each test runs on both transports (conftest.py)."""
import errno
import json
import mmap
import os
import signal
import subprocess
import time

import pytest

from conftest import FUSERMOUNT, MiB, _live_mounts

FSCK_BIN = os.environ.get("FSCK_KVFS_BIN", "")

SIZES = [64 * 1024, 256 * 1024 + 17, 4 * MiB, 24 * MiB + 4096]
SMALL = [1, 4096, 64 * 1024 - 1]  # served through the daemon


def stats(vol):
    with open(vol.p(".kvfs", "stats")) as f:
        return json.load(f)


def pattern(n, seed):
    block = bytes((seed * 31 + i * 7) & 0xFF for i in range(4096))
    return (block * (n // 4096 + 1))[:n]


def store(path, data, direct=False):
    """A connector's store: temp file, one write, close, rename."""
    tmp = path + ".tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if direct:
        flags |= os.O_DIRECT
        buf = mmap.mmap(-1, max(4096, (len(data) + 4095) // 4096 * 4096))
        buf[: len(data)] = data
    fd = os.open(tmp, flags, 0o644)
    try:
        if direct:
            os.write(fd, memoryview(buf)[: (len(data) + 4095) // 4096 * 4096])
            os.ftruncate(fd, len(data))
        else:
            os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def load(path, direct=False):
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    try:
        size = os.fstat(fd).st_size
        if direct:
            buf = mmap.mmap(-1, max(4096, (size + 4095) // 4096 * 4096))
            n = os.readv(fd, [buf])
            return bytes(buf[:n])
        return os.read(fd, size + 1)
    finally:
        os.close(fd)


def served(vol):
    return stats(vol)["passthrough"]["served_opens"]


def reads(vol):
    return stats(vol)["requests"].get("read", 0)


def reads_of(vol, fn):
    """READ requests that fn() caused, less those of reading the stats file."""
    a = reads(vol)
    per_look = reads(vol) - a
    b = reads(vol)
    fn()
    return reads(vol) - b - per_look


def drop_cache(vol):
    with open(vol.p(".kvfs", "drop_cache"), "w") as f:
        f.write("1")


def test_passthrough_is_on_and_loads_send_no_read(vol):
    s = stats(vol)
    assert s["passthrough"]["on"], s["passthrough"]
    for i, n in enumerate(SIZES):
        store(vol.p(f"k{i}"), pattern(n, i))
    drop_cache(vol)
    for direct in (False, True):
        before_served = served(vol)

        def loads():
            for i, n in enumerate(SIZES):
                assert load(vol.p(f"k{i}"), direct) == pattern(n, i), (n, direct)

        assert reads_of(vol, loads) == 0, "a load served by the kernel sent READ requests"
        assert served(vol) - before_served == len(SIZES)
    # Files under 64 KiB: through the daemon, bytes equal.
    for i, n in enumerate(SMALL):
        store(vol.p(f"s{i}"), pattern(n, i))
    before = served(vol)
    for i, n in enumerate(SMALL):
        assert load(vol.p(f"s{i}")) == pattern(n, i)
        assert load(vol.p(f"s{i}"), True) == pattern(n, i)
    assert served(vol) == before
    # The bytes survive a remount (and come back from the device).
    vol.remount()
    for i, n in enumerate(SIZES):
        assert load(vol.p(f"k{i}"), True) == pattern(n, i)


def test_shared_read_only_map_of_a_served_file(vol):
    data = pattern(3 * MiB + 123, 5)
    store(vol.p("model.safetensors"), data)
    fd = os.open(vol.p("model.safetensors"), os.O_RDONLY)
    try:
        m = mmap.mmap(fd, len(data), mmap.MAP_SHARED, mmap.PROT_READ)
        assert m[:] == data
        m.close()
    finally:
        os.close(fd)


def test_passthrough_off_behaves_as_before(make_volume):
    v = make_volume("off", options="passthrough=off")
    v.mount.start()
    s = stats(v)
    assert not s["passthrough"]["on"] and "passthrough=off" in s["passthrough"]["mode"]
    assert s["file_memory"]["budget"] == 0
    data = pattern(2 * MiB, 1)
    store(v.p("k"), data)
    assert reads_of(v, lambda: load(v.p("k")) == data) > 0
    assert load(v.p("k")) == data
    fd = os.open(v.p("k"), os.O_RDONLY)
    try:
        with pytest.raises(OSError) as e:
            mmap.mmap(fd, len(data), mmap.MAP_SHARED, mmap.PROT_READ)
        assert e.value.errno == errno.ENODEV
    finally:
        os.close(fd)
    v.mount.stop()


def test_writers_beside_a_served_reader_see_what_ext4_shows(vol):
    """A reader holds a served open while others write, truncate, O_DIRECT
    write, rename over and unlink: no EIO; what each sees is ext4's."""
    path = vol.p("k")
    data = pattern(1 * MiB, 2)
    store(path, data)
    reader = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(reader, len(data), 0) == data
        # O_WRONLY writer: the reader sees its bytes at once.
        w = os.open(path, os.O_WRONLY)
        assert os.pwrite(w, b"A" * 10, 100) == 10
        assert os.pread(reader, 20, 95) == data[95:100] + b"A" * 10 + data[110:115]
        os.close(w)
        # O_RDWR reads back, appends; the size moves for everyone.
        rw = os.open(path, os.O_RDWR)
        assert os.pread(rw, 10, 100) == b"A" * 10
        os.pwrite(rw, b"tail", len(data))
        os.close(rw)
        assert os.stat(path).st_size == len(data) + 4
        assert os.fstat(reader).st_size == len(data) + 4
        # truncate(2) and O_TRUNC.
        os.truncate(path, 4096)
        assert os.stat(path).st_size == 4096
        assert os.pread(reader, 8192, 0) == data[:100] + b"A" * 10 + data[110:4096]
        t = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.write(t, b"fresh")
        os.close(t)
        assert os.pread(reader, 100, 0) == b"fresh"
        # An O_DIRECT writer.
        buf = mmap.mmap(-1, 8192)
        buf[:] = b"D" * 8192
        d = os.open(path, os.O_WRONLY | os.O_DIRECT)
        assert os.pwritev(d, [buf], 0) == 8192
        os.close(d)
        assert os.pread(reader, 8192, 0) == b"D" * 8192
        os.fsync(reader)
    finally:
        os.close(reader)
    # Everything written reached the file: after a remount too.
    vol.remount()
    assert load(path) == b"D" * 8192


def test_rename_over_and_unlink_of_a_held_file(vol):
    old, new = pattern(512 * 1024, 3), pattern(300 * 1024, 4)
    store(vol.p("k"), old)
    reader = os.open(vol.p("k"), os.O_RDONLY)
    try:
        store(vol.p("k"), new)  # rename over the held file
        assert os.pread(reader, len(old) + 1, 0) == old
        assert load(vol.p("k")) == new
        os.unlink(vol.p("k"))
        assert os.pread(reader, len(old) + 1, 0) == old
        assert not os.path.exists(vol.p("k"))
    finally:
        os.close(reader)


def test_eviction_skips_a_held_file_then_takes_it(make_volume):
    v = make_volume("evict", options="evict=lru,evict_min_age=0")
    v.mount.start()
    data = pattern(4 * MiB, 6)
    store(v.p("k"), data)
    reader = os.open(v.p("k"), os.O_RDONLY)
    try:
        with open(v.p(".kvfs", "evict"), "w") as f:
            f.write("0")
        assert os.path.exists(v.p("k")), "an open file was evicted"
        assert os.pread(reader, len(data) + 1, 0) == data
        # A second open of the held file is served the same way: no EIO.
        assert load(v.p("k")) == data
    finally:
        os.close(reader)
    # The kernel sends the last RELEASE after close() returns: evict again
    # until the file is free.
    deadline = time.monotonic() + 30
    while os.path.exists(v.p("k")) and time.monotonic() < deadline:
        with open(v.p(".kvfs", "evict"), "w") as f:
            f.write("0")
        time.sleep(0.05)
    assert not os.path.exists(v.p("k"))
    v.mount.stop()


def test_kill_9_with_served_opens_then_fsck_clean(make_volume):
    v = make_volume("kill", options=None)
    v.mount.start()
    data = pattern(2 * MiB, 7)
    store(v.p("k"), data)
    fd = os.open(v.p("k"), os.O_RDONLY)
    os.fsync(fd)  # the store is durable; the served open stays
    assert os.pread(fd, 16, 0) == data[:16]
    v.mount.proc.send_signal(signal.SIGKILL)
    v.mount.proc.wait(timeout=60)
    os.close(fd)
    subprocess.run([FUSERMOUNT, "-u", "-z", v.mount.path], capture_output=True)
    v.mount.proc = None
    if v.mount in _live_mounts:
        _live_mounts.remove(v.mount)
    v.mount.log.close()
    if FSCK_BIN:
        r = subprocess.run([FSCK_BIN, "-n", v.image], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    v.mount.start()
    assert load(v.p("k")) == data
    v.mount.stop()


def proc_counts(pid):
    fds = os.listdir(f"/proc/{pid}/fd")
    memfds = 0  # file memory: memfds, or unnamed files on kvfs's own tmpfs
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if "memfd:" in target or target.endswith("(deleted)"):
                memfds += 1
        except OSError:
            pass
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return len(fds), memfds, rss


def settle_made_ahead(vol):
    """Waits until kvfs stops making memory ahead of loads (it makes a
    bounded amount after loads missed it)."""
    last, same = None, 0
    for _ in range(200):
        fm = stats(vol)["file_memory"]
        now = (fm["made_ahead"], fm["kept_bytes"])
        same = same + 1 if now == last else 0
        if same == 3:
            return
        last = now
        time.sleep(0.05)
    raise AssertionError(f"memory still being made ahead: {fm}")


def test_many_open_read_close_cycles_leave_the_daemon_flat(vol):
    keys = 16
    for i in range(keys):
        store(vol.p(f"k{i}"), pattern(256 * 1024, i))
    for i in range(keys):
        load(vol.p(f"k{i}"))
    settle_made_ahead(vol)
    pid = vol.mount.proc.pid
    fds0, memfds0, rss0 = proc_counts(pid)
    before = served(vol)
    cycles = 100_000
    for n in range(cycles):
        fd = os.open(vol.p(f"k{n % keys}"), os.O_RDONLY)
        os.read(fd, 256 * 1024)
        os.close(fd)
    assert served(vol) - before == cycles
    fds1, memfds1, rss1 = proc_counts(pid)
    assert fds1 <= fds0 + 2, (fds0, fds1)
    assert memfds1 <= max(memfds0, keys), (memfds0, memfds1)
    assert rss1 < rss0 + 64 * 1024, (rss0, rss1)  # KiB


def test_many_cycles_over_more_keys_than_the_cache_holds_leave_the_daemon_flat(make_volume):
    """Loads that evict and reuse file memory all the time: the memory is
    reused, never made anew without bound, and each load sees its own key."""
    v = make_volume("cycle", size=1024 * MiB, options="cache_mb=8")
    v.mount.start()
    keys, size = 200, 64 * 1024  # 12.5 MiB: twice the 6 MiB of file memory
    for i in range(keys):
        store(v.p(f"k{i}"), pattern(size, i % 251))
    for i in range(keys):
        assert load(v.p(f"k{i}")) == pattern(size, i % 251)
    settle_made_ahead(v)
    pid = v.mount.proc.pid
    fds0, memfds0, rss0 = proc_counts(pid)
    cycles = 100_000
    for n in range(cycles):
        i = (n * 7) % keys
        fd = os.open(v.p(f"k{i}"), os.O_RDONLY)
        got = os.read(fd, size + 1)
        os.close(fd)
        if n % 97 == 0:
            assert got == pattern(size, i % 251), n
    fm = stats(v)["file_memory"]
    assert fm["reused"] > cycles // 2, fm
    assert fm["bytes"] + fm["kept_bytes"] <= fm["budget"], fm
    fds1, memfds1, rss1 = proc_counts(pid)
    assert fds1 <= fds0 + 2, (fds0, fds1)
    assert memfds1 <= memfds0 + 8, (memfds0, memfds1)
    assert rss1 < rss0 + 32 * 1024, (rss0, rss1)  # KiB
    v.mount.stop()


def test_a_map_keeps_its_files_bytes_while_file_memory_is_reused(make_volume):
    """A MAP_SHARED reader holds a served file while its memory is evicted
    and kvfs reuses memory for other keys: the map shows its own file's
    bytes throughout, and after more loads and a cache drop."""
    v = make_volume("map", size=1024 * MiB, options="cache_mb=32")
    v.mount.start()
    a = pattern(4 * MiB, 200)
    store(v.p("a"), a)
    drop_cache(v)
    fd = os.open(v.p("a"), os.O_RDONLY)
    m = mmap.mmap(fd, len(a), mmap.MAP_SHARED, mmap.PROT_READ)
    os.close(fd)  # the kernel's release reaches kvfs; the map stays
    try:
        assert m[:] == a
        before = stats(v)["file_memory"]["reused"]
        for rnd in range(3):
            for i in range(16):  # 64 MiB through 24 MiB of file memory
                store(v.p(f"k{i}"), pattern(4 * MiB, i + rnd))
                assert load(v.p(f"k{i}")) == pattern(4 * MiB, i + rnd)
            drop_cache(v)
            assert m[:] == a, rnd
        assert stats(v)["file_memory"]["reused"] > before
    finally:
        m.close()
    assert load(v.p("a")) == a
    v.mount.stop()


def test_cache_mb_bounds_file_memory(make_volume):
    v = make_volume("budget", size=1024 * MiB, options="cache_mb=64")
    v.mount.start()
    for i in range(40):
        store(v.p(f"k{i}"), pattern(4 * MiB, i))
    for i in range(40):
        assert load(v.p(f"k{i}")) == pattern(4 * MiB, i)
        fm = stats(v)["file_memory"]
        assert fm["bytes"] + fm["kept_bytes"] <= fm["budget"] <= 48 * MiB, fm
    v.mount.stop()


def fio(*args):
    r = subprocess.run(["fio", "--output-format=terse", "--minimal", *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # terse v3: field 5 (index 4) is the job's error count.
    for line in r.stdout.splitlines():
        fields = line.split(";")
        if len(fields) > 4:
            assert fields[4] == "0", line
    return r.stdout


FIO_FILES = ["--nrfiles=4", "--filesize=8m", "--size=32m", "--verify=crc32c",
             "--verify_state_save=0", "--ioengine=psync", "--name=kv"]


def test_fio_verify_through_served_opens(vol):
    """fio writes with checksums through the daemon, then verifies through
    opens the kernel serves (buffered and O_DIRECT); then writes while
    readers hold the files (served writers) and verifies after a remount."""
    d = vol.p("fio")
    os.mkdir(d)
    fio(f"--directory={d}", "--rw=write", "--bs=256k", "--do_verify=0", *FIO_FILES)
    for direct in ("0", "1"):
        before = served(vol)
        fio(f"--directory={d}", "--rw=read", "--bs=256k", "--verify_only=1", f"--direct={direct}",
            *FIO_FILES)
        assert served(vol) > before, "fio's reads were not served by the kernel"
    # Readers hold every file: fio's O_RDWR opens are served from the same
    # memory, its writes land there and are written out at close.
    files = sorted(os.listdir(d))
    holders = [os.open(os.path.join(d, f), os.O_RDONLY) for f in files]
    try:
        fio(f"--directory={d}", "--rw=randwrite", "--bs=64k", "--do_verify=1", "--randseed=7",
            *FIO_FILES)
        fio(f"--directory={d}", "--rw=randwrite", "--bs=64k", "--do_verify=1", "--randseed=9",
            "--direct=1", *FIO_FILES)
    finally:
        for fd in holders:
            os.close(fd)
    vol.remount()
    fio(f"--directory={d}", "--rw=randwrite", "--bs=64k", "--verify_only=1", "--randseed=9",
        "--direct=1", *FIO_FILES)
