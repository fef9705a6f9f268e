"""The kvfs daemon: startup errors are one clear line and a non-zero exit;
a volume is mounted once; background mode; the connection's parameters."""
import os
import subprocess
import time

import pytest

from conftest import KVFS_BIN, MKFS_BIN, MiB, mounted_fstype, run_kvfs, unmount


def one_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {stderr!r}"
    return lines[0]


def test_second_mount_of_same_volume_is_refused(vol, workdir):
    other = os.path.join(workdir, "mnt2")
    os.mkdir(other)
    r = run_kvfs("-f", vol.image, other)
    assert r.returncode != 0
    line = one_line(r.stderr)
    assert "in use" in line and vol.image in line, line
    assert mounted_fstype(other) is None
    # The first mount is unharmed.
    with open(vol.p("still-works"), "wb") as f:
        f.write(b"yes")
    with open(vol.p("still-works"), "rb") as f:
        assert f.read() == b"yes"


def test_mkfs_of_a_mounted_volume_is_refused_even_with_force(vol):
    with open(vol.p("keep"), "wb") as f:
        f.write(b"data")
    r = subprocess.run([MKFS_BIN, "-f", vol.image], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "in use" in r.stderr and vol.image in r.stderr, r.stderr
    # Nothing was touched: the mount goes on, its data readable.
    with open(vol.p("keep"), "rb") as f:
        assert f.read() == b"data"
    with open(vol.p("more"), "wb") as f:
        f.write(b"yes")
    assert sorted(os.listdir(vol.path)) == ["keep", "more"]


def test_mkfs_does_not_replace_the_index_of_a_mounted_volume(vol, workdir):
    with open(vol.p("keep"), "wb") as f:
        f.write(b"data")
    other = os.path.join(workdir, "other.img")
    r = subprocess.run([MKFS_BIN, "-f", "--size", str(64 * MiB), "--index", vol.image + ".index",
                        other], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "in use" in r.stderr and "index" in r.stderr, r.stderr
    assert not os.path.exists(other)
    vol.remount()  # the index is whole: the volume mounts again, data intact
    with open(vol.p("keep"), "rb") as f:
        assert f.read() == b"data"


def test_missing_mountpoint(make_volume):
    v = make_volume("a")
    r = run_kvfs("-f", v.image, v.mnt + "-does-not-exist")
    assert r.returncode != 0
    line = one_line(r.stderr)
    assert "mountpoint" in line and "No such file or directory" in line, line


def test_mountpoint_not_a_directory(make_volume):
    v = make_volume("a")
    r = run_kvfs("-f", v.image, v.image)
    assert r.returncode != 0
    assert "not a directory" in one_line(r.stderr)


def test_foreign_index_is_refused(make_volume):
    a = make_volume("a")
    b = make_volume("b")
    r = run_kvfs("-f", "-o", f"index={b.image}.index", a.image, a.mnt)
    assert r.returncode != 0
    line = one_line(r.stderr)
    assert "foreign index" in line, line
    assert mounted_fstype(a.mnt) is None


def test_missing_index_is_refused(make_volume, workdir):
    a = make_volume("a")
    r = run_kvfs("-f", "-o", f"index={workdir}/no-such-index", a.image, a.mnt)
    assert r.returncode != 0
    assert "no-such-index" in one_line(r.stderr)


def test_not_a_kvfs_image_is_refused(workdir):
    img = os.path.join(workdir, "zeros.img")
    with open(img, "wb") as f:
        f.truncate(64 * MiB)
    mnt = os.path.join(workdir, "m")
    os.mkdir(mnt)
    r = run_kvfs("-f", img, mnt)
    assert r.returncode != 0
    assert img in one_line(r.stderr)
    assert mounted_fstype(mnt) is None


def test_missing_device(workdir):
    mnt = os.path.join(workdir, "m")
    os.mkdir(mnt)
    r = run_kvfs("-f", os.path.join(workdir, "nope.img"), mnt)
    assert r.returncode != 0
    assert "nope.img" in one_line(r.stderr)


def test_bad_option_values(make_volume):
    v = make_volume("a")
    r = run_kvfs("-f", "-o", "log_level=loud", v.image, v.mnt)
    assert r.returncode != 0
    assert "log_level" in one_line(r.stderr)
    r = run_kvfs("-f", "-o", "prefetch=always", v.image, v.mnt)
    assert r.returncode != 0
    assert "prefetch" in one_line(r.stderr)
    # Options for libfuse are checked before the volume is opened.
    r = run_kvfs("-f", "-o", "no_such_option", v.image, v.mnt)
    assert r.returncode != 0
    assert "no_such_option" in one_line(r.stderr)
    assert mounted_fstype(v.mnt) is None
    r = run_kvfs("-f", v.image)  # no mountpoint
    assert r.returncode != 0 and "usage" in r.stderr


def daemon_pids(mnt):
    """Pids of kvfs processes serving `mnt` (from their command lines)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"kvfs" and mnt.encode() in argv:
            pids.append(int(pid))
    return pids


def test_background_mode_returns_once_mounted(make_volume):
    v = make_volume("bg")
    r = run_kvfs("-o", "dirty_mb=64,entry_timeout=5,log_level=warn", v.image, v.mnt)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    pids = daemon_pids(v.mnt)
    try:
        # Mounted by the time the command returned, by a daemon in its own
        # session.
        assert mounted_fstype(v.mnt) == "fuse.kvfs"
        assert len(pids) == 1
        assert os.getsid(pids[0]) == pids[0]
        with open(os.path.join(v.mnt, "f"), "wb") as f:
            f.write(b"background")
    finally:
        # The daemon writes everything out and exits.
        unmount_and_wait(v.mnt)
    v.mount.start()
    with open(os.path.join(v.mnt, "f"), "rb") as f:
        assert f.read() == b"background"
    v.mount.stop()


def unmount_and_wait(mnt):
    """Unmounts `mnt` and waits for its daemon to exit."""
    r = unmount(mnt)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 60
    while daemon_pids(mnt):
        assert time.monotonic() < deadline, "daemon still running 60 s after unmount"
        time.sleep(0.05)


@pytest.mark.parametrize("dest", ["file", "stderr"])
def test_background_log_goes_to_a_file_or_the_kept_stderr(make_volume, workdir, dest):
    # Without syslog the background daemon's lines would be lost; log=PATH
    # and log=stderr keep them. `shape` makes the daemon log a warning.
    v = make_volume("log")
    path = os.path.join(workdir, "kvfs.log")
    with open(path + ".stderr", "wb") as err:
        opt = f"log={path}" if dest == "file" else "log=stderr"
        r = subprocess.run([KVFS_BIN, "-o", f"{opt},shape", v.image, v.mnt], stdout=err,
                           stderr=err, timeout=60)
    assert r.returncode == 0
    assert mounted_fstype(v.mnt) == "fuse.kvfs"
    unmount_and_wait(v.mnt)
    with open(path if dest == "file" else path + ".stderr") as f:
        text = f.read()
    # Lines the daemon wrote once in the background: the startup line, the
    # warning, and the unmount.
    image, mnt = os.path.realpath(v.image), os.path.realpath(v.mnt)
    assert f"mounted {image} at {mnt}" in text, text
    assert "[warning] shape: device 0 modelled as 80 us per command" in text, text
    assert f"unmounted {mnt}" in text, text


def test_log_file_that_cannot_be_opened_fails_the_mount(make_volume):
    v = make_volume("log")
    r = run_kvfs("-o", "log=/proc/no/such/dir/kvfs.log", v.image, v.mnt)
    assert r.returncode != 0
    assert "log=/proc/no/such/dir/kvfs.log" in one_line(r.stderr)
    assert mounted_fstype(v.mnt) is None


def test_background_mode_startup_error_is_reported(make_volume):
    v = make_volume("bg")
    r = run_kvfs(v.image, v.mnt + "-missing")
    assert r.returncode != 0
    assert "mountpoint" in one_line(r.stderr)
    a = make_volume("other")
    r = run_kvfs("-o", f"index={a.image}.index", v.image, v.mnt)
    assert r.returncode != 0
    assert "foreign index" in one_line(r.stderr)


def test_connection_parameters(vol):
    dev = os.stat(vol.path).st_dev
    conn = f"/sys/fs/fuse/connections/{os.minor(dev)}"
    if not os.path.isdir("/sys/fs/fuse/connections") or not os.listdir(
            "/sys/fs/fuse/connections"):
        subprocess.run(["mount", "-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"],
                       capture_output=True)
    assert os.path.isdir(conn), "fusectl is not available"
    with open(os.path.join(conn, "max_background")) as f:
        assert int(f.read()) >= 64
    with open(os.path.join(conn, "congestion_threshold")) as f:
        assert int(f.read()) >= 48
    with open("/proc/self/mountinfo") as f:
        line = next(l for l in f if f" {vol.path} " in l)
    # kvfs checks permissions itself where the kernel can drop cached names
    # on its word (Linux 6.16+); before that the kernel does.
    release = tuple(int(x) for x in os.uname().release.split(".")[:2])
    assert ("default_permissions" in line) == (release < (6, 16)), line
    assert "allow_other" in line
    assert "max_read=1048576" in line


def test_open_file_limit_is_raised_to_the_hard_limit(make_volume):
    # RocksDB keeps every table file open and each client process with
    # registered buffers costs a pidfd: the daemon must not stop at 1024.
    import resource
    v = make_volume("v")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 1024, hard)
    # Start the daemon with a low soft limit, as a login shell would give it.
    old = (soft, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        v.mount.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    with open(f"/proc/{v.mount.proc.pid}/limits") as f:
        line = next(l for l in f if l.startswith("Max open files"))
    daemon_soft, daemon_hard = line.split()[3:5]
    assert daemon_soft == daemon_hard == str(hard), line
    v.mount.stop()


def test_one_worker_without_spinning_serves_blocked_writers_and_lookups(make_volume):
    """The request loop at its extremes: one worker thread for the requests
    that may wait, and a receiver that sleeps as soon as the device is empty.
    Writers that fill the 8 MiB of staging wait on that one worker while the
    receiver keeps answering lookups; nothing deadlocks, every byte is right,
    and SIGINT still ends the daemon cleanly."""
    import threading
    from kvio import payload

    v = make_volume("v", size=512 * MiB, options="spin_us=0,max_threads=1,dirty_mb=8")
    v.mount.start()
    errors = []
    stats_done = [0]

    def writer(t):
        try:
            for k in range(3):
                data = payload((t, k), 6 * MiB + 4096 * t + 17)
                with open(v.p(f"w{t}.{k}"), "wb") as f:
                    f.write(data)
        except Exception as e:  # reported below
            errors.append(e)

    def looker(stop):
        while not stop.is_set():
            for n in range(50):
                assert not os.path.exists(v.p(f"missing{stats_done[0]}.{n}"))
            stats_done[0] += 1

    stop = threading.Event()
    lk = threading.Thread(target=looker, args=(stop,))
    lk.start()
    ws = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for w in ws:
        w.start()
    for w in ws:
        w.join(timeout=120)
    stop.set()
    lk.join(timeout=60)
    assert not any(w.is_alive() for w in ws) and not lk.is_alive(), "requests hung"
    assert not errors, errors
    assert stats_done[0] > 0
    for t in range(4):
        for k in range(3):
            with open(v.p(f"w{t}.{k}"), "rb") as f:
                assert f.read() == payload((t, k), 6 * MiB + 4096 * t + 17)
    assert v.mount.stop(how="sigint") == 0
