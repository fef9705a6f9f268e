"""atime on a real mount: each relatime rule, -o strictatime and -o noatime,
moved atimes kept across a remount, and 10,000 reads making a bounded number
of index commits (.kvfs/stats "commits.index")."""
import json
import os
import time

DAY = 24 * 3600


def stats(vol):
    with open(vol.p(".kvfs", "stats")) as f:
        return json.load(f)


def read(path):
    with open(path, "rb") as f:
        f.read()


def make(path, data=b"0123456789"):
    with open(path, "wb") as f:
        f.write(data)
    return os.stat(path)


def test_relatime_rules(vol):
    """The rules a mount can reach: ctime cannot be set from userspace, so
    "a day old" is checked with an old atime and mtime but a new ctime (the
    ctime rule fires first) here, and alone in tests/fs/atime_test.cc."""
    p = vol.p("k")
    st = make(p)
    # atime not newer than mtime (a file just written): the first read moves it.
    time.sleep(0.01)
    read(p)
    first = os.stat(p).st_atime_ns
    assert first > st.st_mtime_ns
    # Newer than mtime and ctime, and fresh: it holds.
    time.sleep(0.01)
    read(p)
    assert os.stat(p).st_atime_ns == first
    now = time.time()
    # Old atime and mtime (utime sets ctime to now): moves.
    os.utime(p, (now - 2 * DAY, now - 3 * DAY))
    read(p)
    assert os.stat(p).st_atime > now - 60
    # atime equal to mtime: moves.
    os.utime(p, (now - 100, now - 100))
    read(p)
    assert os.stat(p).st_atime > now - 60
    # Writes never move atime (only mtime and ctime).
    os.utime(p, (now - 50, now - 100))
    fd = os.open(p, os.O_WRONLY)
    os.write(fd, b"x")
    os.close(fd)
    assert abs(os.stat(p).st_atime - (now - 50)) < 1


def test_noatime_never_moves(make_volume):
    v = make_volume("noatime", options="noatime")
    v.mount.start()
    p = v.p("k")
    st = make(p)
    time.sleep(0.01)
    read(p)
    assert os.stat(p).st_atime_ns == st.st_atime_ns
    assert stats(v)["atime"]["updates"] == 0
    v.mount.stop()


def test_strictatime_moves_on_every_read(make_volume):
    v = make_volume("strict", options="strictatime")
    v.mount.start()
    p = v.p("k")
    make(p)
    read(p)
    a1 = os.stat(p).st_atime_ns
    time.sleep(0.01)
    read(p)
    a2 = os.stat(p).st_atime_ns
    assert a2 > a1
    v.mount.stop()


def test_moved_atime_is_kept_across_remount(vol):
    p = vol.p("k")
    make(p)
    time.sleep(0.01)
    read(p)
    moved = os.stat(p).st_atime_ns
    vol.remount()
    assert os.stat(p).st_atime_ns == moved


def test_ten_thousand_reads_make_bounded_commits(vol):
    p = vol.p("k")
    make(p, os.urandom(64 * 1024))
    os.sync()
    before = stats(vol)
    fd = os.open(p, os.O_RDONLY)
    for _ in range(10000):
        os.pread(fd, 4096, 0)
    os.close(fd)
    for _ in range(1000):
        read(p)
    after = stats(vol)
    # One moved atime (the first read after the write), held in memory: no
    # commit per read (the flush comes every atime_flush_s).
    assert after["atime"]["updates"] - before["atime"]["updates"] <= 1
    assert after["commits"]["index"] - before["commits"]["index"] <= 2


def test_a_crash_loses_at_most_the_flush_interval(make_volume):
    """kill -9: atimes flushed before it are kept, later ones are lost, and
    nothing else (the data and names are whole, fsck is clean)."""
    import signal
    import subprocess
    from conftest import FUSERMOUNT, _live_mounts
    v = make_volume("crash", options="atime_flush_s=1")
    v.mount.start()
    flushed, lost, marker = v.p("flushed"), v.p("lost"), v.p("marker")
    make(flushed)
    make(lost)
    make(marker)
    os.sync()
    time.sleep(0.01)
    read(flushed)
    kept = os.stat(flushed).st_atime_ns
    deadline = time.monotonic() + 60
    while stats(v)["atime"]["flushes"] == 0:  # counted once its change is queued
        assert time.monotonic() < deadline, "no atime flush in 60 s"
        time.sleep(0.05)
    # Changes commit in the order queued: once an fsync's change is
    # committed, so is the flush's before it.
    fd = os.open(marker, os.O_WRONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    before = os.stat(lost).st_atime_ns
    read(lost)
    assert os.stat(lost).st_atime_ns > before
    v.mount.proc.send_signal(signal.SIGKILL)  # before the next flush
    v.mount.proc.wait(timeout=60)
    subprocess.run([FUSERMOUNT, "-u", "-z", v.mount.path], capture_output=True)
    v.mount.proc = None
    if v.mount in _live_mounts:
        _live_mounts.remove(v.mount)
    v.mount.log.close()
    v.mount.start()
    assert os.stat(flushed).st_atime_ns == kept
    assert os.stat(lost).st_atime_ns == before
    with open(flushed, "rb") as f:
        assert f.read() == b"0123456789"
    v.mount.stop()
