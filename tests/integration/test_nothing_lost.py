"""Nothing lost, nothing hung: a file rewritten in place while other
processes read it (xfstests generic/451's loop), and signals, cache drops
and evictions while loads are in flight. Each runs with passthrough on and
off, on this run's transport.

The in-process tests force the interleavings these loops found
(tests/fs/file_memory_test.cc: an older write-out staging after a newer
one; a cache drop between an open's serve decision and its count); these
run the loops themselves on a real mount and check every byte and every
exit."""
import os
import subprocess
import sys

import pytest

from conftest import GiB
from kvio import read_stats

CYCLE_WRITE = os.environ.get("KVFS_CYCLE_WRITE_BIN")
STORM = os.path.join(os.path.dirname(__file__), "signal_storm.py")

PASSTHROUGH = ["passthrough=auto", "passthrough=off"]


def device_errors(log):
    """The daemon's lines about device commands that failed."""
    return [l for l in log.splitlines() if "failed:" in l and "device " in l]


@pytest.fixture(params=PASSTHROUGH)
def mounted(request, make_volume):
    v = make_volume("v", size=1 * GiB, options=request.param)
    v.mount.start()
    yield v
    v.mount.stop()
    assert device_errors(v.mount.read_log()) == []


@pytest.mark.skipif(not CYCLE_WRITE, reason="cycle_write is not built")
@pytest.mark.parametrize("mode", ["aio", "sync", "buffered"])
@pytest.mark.parametrize("readers", ["hold", "loop"])
def test_rewrite_in_place_beside_readers_keeps_every_write(mounted, mode, readers):
    """generic/451: rewrite a 640 KiB file (open, one write, close) while
    two processes read it, and read it back after every close, buffered
    and O_DIRECT: always the bytes just written; no open refused (EIO).
    Then the same after a remount: the last write is on the device."""
    path = mounted.p("cycle")
    r = subprocess.run([CYCLE_WRITE, "-m", mode, "-s", "2", "-r", "2", "-R", readers, path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(path, "rb") as f:
        last = f.read()
    assert len(last) == 640 << 10 and last in (b"\x55" * len(last), b"\xaa" * len(last))
    mounted.remount()
    with open(path, "rb") as f:
        assert f.read() == last


@pytest.mark.parametrize("sigint", ["handler", "dfl"])
def test_signals_during_loads_and_stores_leave_nothing_hung_or_torn(mounted, sigint):
    """12 processes (8 readers of 96 MiB and 8 MiB files, buffered and
    O_DIRECT, dropping the cache every few files; 4 writers of 8 MiB
    stores) get SIGINT mid-call, round after round: none hangs (each exits
    within 10 s, its slowest exit printed), every file reads back as one
    whole version, and the daemon
    logs no failed device command (a read into memory released under it
    fails with EFAULT)."""
    r = subprocess.run([sys.executable, STORM, mounted.path, "--rounds", "4", "--seed", "7",
                        "--sigint", sigint, "--api", "mix"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert device_errors(mounted.mount.read_log()) == []


def test_signals_during_loads_with_eviction(make_volume):
    """The storm on a volume kept full by eviction (evict=lru, no minimum
    age): passes remove files while loads of them are in flight."""
    v = make_volume("ev", size=512 << 20,
                    options="evict=lru,evict_min_age=0,evict_high=45,evict_low=30")
    v.mount.start()
    try:
        r = subprocess.run([sys.executable, STORM, v.path, "--rounds", "4", "--seed", "11",
                            "--big", "2", "--small", "12", "--evicting"],
                           capture_output=True, text=True, timeout=300)
        # Evicted files are gone, not torn: the storm checks what is there.
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        assert read_stats(v.path)["eviction"]["files"] > 0
        assert device_errors(v.mount.read_log()) == []
    finally:
        v.mount.stop()


SIGNALLED_CHILD = (
    "import os, sys\n"
    "path, what = sys.argv[1], sys.argv[2]\n"
    "if what == 'open':\n"
    "    print('waiting', flush=True)\n"
    "    os.open(path, os.O_RDONLY)\n"
    "else:\n"
    "    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
    "    os.write(fd, bytes(range(256)) * (8 << 12))\n"
    "    print('waiting', flush=True)\n"
    "    os.fsync(fd)\n"
)


@pytest.mark.parametrize("what", ["open", "fsync"])
def test_a_signal_answers_an_open_or_fsync_that_waits_for_the_device(make_volume, what):
    """On a slow device (1 MB/s), an open of a 2 MiB file waits for its
    load and an fsync of 2 MiB for its writes, 2 s each. A signal
    (SIGINT, the default action) ends the caller at once: the kernel waits
    for the daemon's answer to the request it sent, and the daemon answers
    EINTR then. The load or the writes still end, the file reads back
    whole, and nothing stays queued."""
    import signal
    import time
    from kvio import wait_for
    v = make_volume("slow", size=512 << 20, options="shape=100:1")
    v.mount.start()
    try:
        data = bytes(range(256)) * (8 << 12)  # 2 MiB
        path = v.p("k")
        if what == "open":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            with open(v.p(".kvfs", "drop_cache"), "w") as f:
                f.write("1")
        p = subprocess.Popen([sys.executable, "-c", SIGNALLED_CHILD, path, what],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert p.stdout.readline() == b"waiting\n"
        time.sleep(0.3)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        took = time.monotonic() - sent
        assert took < 1.0, f"the {what} ended {took:.2f} s after its caller's signal"
        def lanes_idle():
            lanes = read_stats(v.path)["lanes"]
            return all(lanes[n]["queued"] == 0 and lanes[n]["inflight"] == 0 for n in lanes)
        wait_for(lanes_idle, "the lanes to drain", timeout=30)
        with open(path, "rb") as f:
            assert f.read() == data
    finally:
        v.mount.stop()
    assert device_errors(v.mount.read_log()) == []
