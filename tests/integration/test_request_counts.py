"""The daemon's per-opcode FUSE request counters (MOUNT/.kvfs/stats
"requests", fuse/op_counters.h) against the requests a connector's serial
store and load of one key cost (docs/budget.md): exactly these, no more."""
import json
import mmap
import os
import platform
import time

import pytest

KiB = 1 << 10
MiB = 1 << 20
MAX_REQUEST = 1 * MiB  # max_write and max_read of a kvfs mount


def stats(vol):
    # os.open/os.read: Python's open() adds an ioctl (TCGETS) and an fstat.
    fd = os.open(vol.p(".kvfs", "stats"), os.O_RDONLY)
    try:
        text = b""
        while chunk := os.read(fd, 1 << 20):
            text += chunk
    finally:
        os.close(fd)
    return json.loads(text)


def counts(vol):
    return stats(vol)["requests"]


def kvfs_checks_permissions():
    """Whether the mount leaves out default_permissions (kernel 6.16+)."""
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 16)


def delta(before, after):
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def measured(vol, fn):
    """The requests `fn` sent, without those of reading the stats: the
    difference between two reads around `fn`, minus that of two reads in a
    row (measured before and after; they must agree). A release arrives
    after close(2) returns: the counts are read until they settle."""
    for _ in range(5):
        a = counts(vol)
        b = counts(vol)
        own = delta(a, b)
        fn()
        deadline = time.monotonic() + 2
        c = counts(vol)
        while True:
            time.sleep(0.05)
            d = counts(vol)
            if delta(c, d) == own or time.monotonic() > deadline:
                break
            c = d
        if delta(c, d) != own:
            continue  # an attribute timed out between the reads: again
        got = delta(b, c)
        for k, v in own.items():
            got[k] = got.get(k, 0) - v
        return {k: v for k, v in got.items() if v}
    pytest.fail("reading the stats did not cost the same requests twice in a row")


@pytest.mark.parametrize("size", [256 * KiB, 4 * MiB])
def test_serial_store_and_load_of_one_key_send_the_documented_requests(vol, size):
    path = vol.p(f"model@8@0@{size}.data")
    tmp = path + ".tmp"
    buf = mmap.mmap(-1, size)
    buf.write(os.urandom(size))
    pieces = size // MAX_REQUEST if size > MAX_REQUEST else 1

    def store():
        with pytest.raises(FileNotFoundError):
            os.stat(path)
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        assert os.write(fd, buf) == size
        os.close(fd)
        os.rename(tmp, path)

    # stat of the missing key: lookup. open(O_CREAT): lookup of the temp
    # name, create. write: one per 1 MiB. close: flush, release. rename:
    # lookup of the key, rename. Where kvfs checks permissions itself
    # (Linux 6.16+, fuse/permissions.h) that is all; with the kernel's
    # default_permissions it also asks for the directory's attributes after
    # the create and after the rename (its cached ones were dropped).
    want = {"lookup": 3, "create": 1, "write": pieces, "flush": 1, "release": 1, "rename": 1}
    if not kvfs_checks_permissions():
        want["getattr"] = 2
    assert measured(vol, store) == want
    assert sum(want.values()) == (7 if kvfs_checks_permissions() else 9) + pieces

    # Page-aligned, as pinned tensors are: a read of 1 MiB per 256 pages of
    # the buffer, so an unaligned 4 MiB buffer (1025 pages) costs a fifth.
    got = mmap.mmap(-1, size)

    def load():
        assert os.stat(path).st_size == size
        fd = os.open(path, os.O_RDONLY)
        assert os.readv(fd, [got]) == size
        os.close(fd)

    # stat: getattr (the rename changed the file's ctime). open; with
    # passthrough the kernel reads the file's memory itself, else one read
    # per 1 MiB; close: release only (read-only handles have no flush).
    with open(vol.p(".kvfs", "stats")) as f:
        served = json.load(f)["passthrough"]["on"]
    expected = {"getattr": 1, "open": 1, "release": 1}
    if not served:
        expected["read"] = pieces
    assert measured(vol, load) == expected
    assert got[:] == buf[:]


def test_a_missing_name_costs_one_lookup_then_none(vol):
    """The kernel caches the answer (negative_timeout): a connector's
    repeated existence checks of a key not stored yet stay in the kernel."""
    path = vol.p("never-stored")

    def stat_missing():
        with pytest.raises(FileNotFoundError):
            os.stat(path)

    assert measured(vol, stat_missing) == {"lookup": 1}
    assert measured(vol, stat_missing) == {}


def test_requests_show_in_prometheus_metrics(vol):
    with open(vol.p("k"), "wb") as f:
        f.write(b"x")
    with open(vol.p(".kvfs", "metrics")) as f:
        text = f.read()
    lines = [l for l in text.splitlines() if l.startswith("kvfs_fuse_requests_total{")]
    ops = {l.split('"')[1]: int(l.split()[-1]) for l in lines}
    assert ops["create"] >= 1 and ops["write"] >= 1 and ops["init"] == 1


def test_each_request_is_timed_once_and_lookups_are_never_handed_off(vol):
    """.kvfs/stats "request_times": every request handled is timed once, by
    opcode; lookups (a stat storm) are answered on the thread that received
    them, while a setattr (it may wait) is handed to a worker."""
    with open(vol.p("k"), "wb") as f:
        f.write(b"x" * 100)
    for i in range(50):
        with pytest.raises(FileNotFoundError):
            os.stat(vol.p(f"missing-{i}"))
    os.truncate(vol.p("k"), 10)
    snapshot = stats(vol)
    # The snapshot is taken by the OPEN of the stats file. A handled time is
    # recorded when the handler returns, just after its reply: the last
    # request before the OPEN may not be in yet. A hand-off is recorded
    # before the request runs.
    times, requests = snapshot["request_times"], snapshot["requests"]
    assert requests["lookup"] - 1 <= times["lookup"]["handled"]["count"] <= requests["lookup"]
    assert times["lookup"]["handled"]["count"] >= 50
    assert times["lookup"]["handoff"]["count"] == 0
    assert times["setattr"]["handoff"]["count"] == requests["setattr"] >= 1
    assert times["setattr"]["handled"]["count"] <= requests["setattr"]
