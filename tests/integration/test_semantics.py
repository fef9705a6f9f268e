"""POSIX behaviour the connectors rely on, on a real kvfs mount."""
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import stat
import subprocess
import sys
import termios
import threading
import time

import pytest

import mixed_worker
from kvio import MiB, payload, read_file, read_stats, wait_for, write_file


def expect_errno(code, fn, *args, **kwargs):
    with pytest.raises(OSError) as e:
        fn(*args, **kwargs)
    assert e.value.errno == code, f"{fn.__name__}{args}: {e.value!r}, expected {errno.errorcode[code]}"


# --- Persistence ---------------------------------------------------------------


def snapshot(root):
    """Every name under root with its attributes and a digest of its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(read_file(p)).hexdigest()
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size,
                                             st.st_mtime_ns, st.st_ino, digest)
    st = os.stat(root)
    out["."] = (st.st_mode, st.st_uid, st.st_gid, None, st.st_mtime_ns, st.st_ino, None)
    return out


def test_remount_keeps_every_byte_and_attribute(vol):
    os.makedirs(vol.p("a", "b"))
    os.chmod(vol.p("a"), 0o750)
    files = {
        "empty": b"",
        "one": b"x",
        "odd": payload("odd", 123_457),
        os.path.join("a", "mid"): payload("mid", 4 * MiB),
        os.path.join("a", "b", "big"): payload("big", 24 * MiB + 17),
    }
    for name, data in files.items():
        write_file(vol.p(name), data)
    # Sparse: a hole, then data far out.
    with open(vol.p("sparse"), "wb") as f:
        f.seek(10 * MiB)
        f.write(b"end")
    # Truncated down after writing.
    write_file(vol.p("shrunk"), payload("shrunk", 3 * MiB))
    os.truncate(vol.p("shrunk"), 1 * MiB + 5)
    # Overwritten in the middle.
    write_file(vol.p("patched"), payload("patched", 2 * MiB))
    with open(vol.p("patched"), "r+b") as f:
        f.seek(MiB - 10)
        f.write(b"PATCH" * 10)
    os.chmod(vol.p("odd"), 0o600)
    os.chown(vol.p("odd"), 1234, 5678)
    os.chown(vol.p("a", "b"), 4321, 8765)
    os.utime(vol.p("one"), ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
    os.utime(vol.p("a", "b"), ns=(1_700_000_000_000_000_001, 1_650_000_000_000_000_002))

    before = snapshot(vol.path)
    vol.remount()
    after = snapshot(vol.path)
    assert after == before
    assert os.stat(vol.p("one")).st_mtime_ns == 1_500_000_000_987_654_321
    assert read_file(vol.p("sparse")) == bytes(10 * MiB) + b"end"
    expected_patched = bytearray(payload("patched", 2 * MiB))
    expected_patched[MiB - 10:MiB + 40] = b"PATCH" * 10
    assert read_file(vol.p("patched")) == bytes(expected_patched)
    assert read_file(vol.p("shrunk")) == payload("shrunk", 3 * MiB)[:MiB + 5]


def test_sigterm_unmounts_cleanly_and_keeps_data(vol):
    data = payload("sigterm", 5 * MiB + 3)
    # Written and closed but not fsynced: the clean shutdown writes it out.
    write_file(vol.p("f"), data)
    vol.mount.stop(how="sigterm")
    vol.mount.start()
    assert read_file(vol.p("f")) == data


# --- Open files ----------------------------------------------------------------


def test_unlink_while_open(vol):
    st0 = os.statvfs(vol.path)
    data = payload("unlinked", 16 * MiB)
    path = vol.p("victim")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
        used = os.statvfs(vol.path)
        assert used.f_bfree <= st0.f_bfree - len(data) // used.f_frsize
        os.unlink(path)
        assert "victim" not in os.listdir(vol.path)
        expect_errno(errno.ENOENT, os.stat, path)
        # Still readable and writable through the descriptor.
        assert os.pread(fd, len(data), 0) == data
        os.pwrite(fd, b"tail", len(data))
        assert os.pread(fd, 4, len(data)) == b"tail"
        assert os.fstat(fd).st_size == len(data) + 4
        # The name can be reused meanwhile.
        write_file(path, b"new")
        assert read_file(path) == b"new"
        assert os.pread(fd, 8, 0) == data[:8]
    finally:
        os.close(fd)
    os.unlink(path)
    wait_for(lambda: os.statvfs(vol.path).f_bfree >= st0.f_bfree,
             "space freed after the last close")


def test_rename_over_open_file_keeps_old_content_for_old_fd(vol):
    old = payload("old", 3 * MiB)
    new = payload("new", 2 * MiB + 1)
    write_file(vol.p("target"), old)
    fd = os.open(vol.p("target"), os.O_RDONLY)
    try:
        write_file(vol.p("incoming"), new)
        os.rename(vol.p("incoming"), vol.p("target"))
        assert read_file(vol.p("target")) == new
        assert os.pread(fd, len(old) + 10, 0) == old
        assert os.fstat(fd).st_size == len(old)
    finally:
        os.close(fd)
    assert read_file(vol.p("target")) == new
    assert not os.path.exists(vol.p("incoming"))


def test_eight_threads_write_different_files(vol):
    errors = []

    def worker(t):
        try:
            for i in range(6):
                size = [256 << 10, 4 * MiB, 1 * MiB + 77][i % 3]
                with open(vol.p(f"t{t}-{i}"), "wb") as f:
                    f.write(payload((t, i), size))
        except Exception as e:  # reported below
            errors.append((t, e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for t in range(8):
        for i in range(6):
            size = [256 << 10, 4 * MiB, 1 * MiB + 77][i % 3]
            assert read_file(vol.p(f"t{t}-{i}")) == payload((t, i), size), (t, i)


# --- Directories ----------------------------------------------------------------


def test_hundred_thousand_files_in_one_directory(vol):
    d = vol.p("many")
    os.mkdir(d)
    n = 100_000
    names = [f"chunk-{i:06d}" for i in range(n)]

    def create(part):
        for name in names[part::4]:
            os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))

    threads = [threading.Thread(target=create, args=(p,)) for p in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    listed = os.listdir(d)
    assert len(listed) == n
    assert set(listed) == set(names)
    scanned = [e.name for e in os.scandir(d)]
    assert len(scanned) == n and set(scanned) == set(names)
    assert os.stat(d).st_nlink >= 2


def test_readdir_while_deleting_lists_each_survivor_once(vol):
    d = vol.p("churn")
    os.mkdir(d)
    for i in range(3000):
        os.close(os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
    seen = []
    with os.scandir(d) as it:
        for k, e in enumerate(it):
            seen.append(e.name)
            if k == 100:
                for i in range(2000, 3000):
                    os.unlink(os.path.join(d, f"f{i}"))
    assert len(seen) == len(set(seen))
    assert {f"f{i}" for i in range(2000)} <= set(seen)


# --- Space -------------------------------------------------------------------


def test_enospc_then_unlink_then_same_write_succeeds(small_vol):
    v = small_vol
    st = os.statvfs(v.path)
    free = st.f_bavail * st.f_frsize
    # A file that holds about 60% of the space, then a write of about 60%.
    write_file(v.p("filler"), payload("filler", free * 6 // 10 // 4096 * 4096))
    big = payload("big", free * 6 // 10 // 4096 * 4096)

    def store():
        fd = os.open(v.p("big"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            view = memoryview(big)
            while view:
                n = os.write(fd, view[: 8 * MiB])
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    expect_errno(errno.ENOSPC, store)
    # Nothing else harmed.
    assert read_file(v.p("filler")) == payload("filler", free * 6 // 10 // 4096 * 4096)
    os.unlink(v.p("filler"))
    store()
    assert read_file(v.p("big")) == big
    v.remount()
    assert read_file(v.p("big")) == big


def test_statfs_reports_true_numbers(vol):
    st = os.statvfs(vol.path)
    assert st.f_bsize == 4096 and st.f_frsize == 4096
    assert st.f_namemax == 255
    assert 0.9 * (1 << 30) <= st.f_blocks * st.f_frsize <= (1 << 30)
    assert st.f_bfree <= st.f_blocks
    write_file(vol.p("f"), payload("f", 64 * MiB))
    fd = os.open(vol.p("f"), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    wait_for(lambda: os.statvfs(vol.path).f_bfree <= st.f_bfree - (64 * MiB) // 4096,
             "64 MiB of data accounted in f_bfree")
    assert os.stat(vol.p("f")).st_blocks * 512 >= 64 * MiB
    os.unlink(vol.p("f"))
    wait_for(lambda: os.statvfs(vol.path).f_bfree >= st.f_bfree, "space returned after unlink")


# --- Names and errors ----------------------------------------------------------


def test_name_of_255_bytes_works_and_256_is_too_long(vol):
    n255 = "k" * 251 + ".bin"
    assert len(n255.encode()) == 255
    write_file(vol.p(n255), b"data")
    assert read_file(vol.p(n255)) == b"data"
    assert n255 in os.listdir(vol.path)
    os.rename(vol.p(n255), vol.p("d" * 255))
    os.mkdir(vol.p("e" * 255))
    # Multi-byte UTF-8: 85 three-byte characters = 255 bytes.
    u255 = "\u20ac" * 85
    write_file(vol.p(u255), b"euro")
    assert u255 in os.listdir(vol.path)

    n256 = "k" * 256
    expect_errno(errno.ENAMETOOLONG, os.open, vol.p(n256), os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno(errno.ENAMETOOLONG, os.stat, vol.p(n256))
    expect_errno(errno.ENAMETOOLONG, os.mkdir, vol.p(n256))
    expect_errno(errno.ENAMETOOLONG, os.rename, vol.p("d" * 255), vol.p(n256))
    assert os.path.exists(vol.p("d" * 255))


def test_errno_of_common_mistakes(vol):
    # ENOENT, also when asked again (the kernel's negative entry cache),
    # and the name appears once created.
    expect_errno(errno.ENOENT, os.stat, vol.p("missing"))
    expect_errno(errno.ENOENT, os.stat, vol.p("missing"))
    expect_errno(errno.ENOENT, os.open, vol.p("missing"), os.O_RDONLY)
    expect_errno(errno.ENOENT, os.unlink, vol.p("missing"))
    expect_errno(errno.ENOENT, os.rmdir, vol.p("missing"))
    expect_errno(errno.ENOENT, os.rename, vol.p("missing"), vol.p("x"))
    expect_errno(errno.ENOENT, os.open, vol.p("nodir", "f"), os.O_CREAT | os.O_WRONLY, 0o644)
    write_file(vol.p("missing"), b"now here")
    assert read_file(vol.p("missing")) == b"now here"

    os.makedirs(vol.p("d", "sub"))
    expect_errno(errno.ENOTEMPTY, os.rmdir, vol.p("d"))
    expect_errno(errno.EEXIST, os.mkdir, vol.p("d"))
    expect_errno(errno.EEXIST, os.open, vol.p("missing"),
                 os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    expect_errno(errno.EISDIR, os.open, vol.p("d"), os.O_WRONLY)
    expect_errno(errno.EISDIR, os.unlink, vol.p("d"))
    expect_errno(errno.ENOTDIR, os.rmdir, vol.p("missing"))
    expect_errno(errno.ENOTDIR, os.stat, vol.p("missing", "x"))
    expect_errno(errno.ENOTDIR, os.mkdir, vol.p("missing", "x"))
    expect_errno(errno.ENOTDIR, os.rename, vol.p("d"), vol.p("missing"))
    expect_errno(errno.EISDIR, os.rename, vol.p("missing"), vol.p("d"))
    # A directory moved into itself.
    expect_errno(errno.EINVAL, os.rename, vol.p("d"), vol.p("d", "sub", "loop"))

    # renameat2(RENAME_NOREPLACE) onto an existing name.
    write_file(vol.p("src"), b"s")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint]
    AT_FDCWD, RENAME_NOREPLACE = -100, 1
    rc = libc.renameat2(AT_FDCWD, vol.p("src").encode(), AT_FDCWD, vol.p("missing").encode(),
                        RENAME_NOREPLACE)
    assert rc == -1 and ctypes.get_errno() == errno.EEXIST
    assert read_file(vol.p("missing")) == b"now here"
    rc = libc.renameat2(AT_FDCWD, vol.p("src").encode(), AT_FDCWD, vol.p("fresh").encode(),
                        RENAME_NOREPLACE)
    assert rc == 0
    assert read_file(vol.p("fresh")) == b"s" and not os.path.exists(vol.p("src"))

    # Unsupported: a clear error, never a silent success.
    expect_errno(errno.EPERM, os.link, vol.p("fresh"), vol.p("hard"))
    with pytest.raises(OSError) as e:
        os.symlink("fresh", vol.p("soft"))
    assert e.value.errno in (errno.EPERM, errno.EOPNOTSUPP)
    with pytest.raises(OSError) as e:
        os.mkfifo(vol.p("fifo"))
    assert e.value.errno in (errno.EPERM, errno.EOPNOTSUPP)
    with pytest.raises(OSError) as e:
        os.setxattr(vol.p("fresh"), "security.kvfs_test", b"v")
    assert e.value.errno == errno.EOPNOTSUPP
    for name in ("hard", "soft", "fifo"):
        assert not os.path.lexists(vol.p(name))
    # mknod of a regular file is create.
    os.mknod(vol.p("node"), 0o640 | stat.S_IFREG)
    st = os.stat(vol.p("node"))
    assert stat.S_ISREG(st.st_mode) and st.st_size == 0


def test_permissions_are_enforced_for_other_users(vol):
    write_file(vol.p("private"), b"secret", mode=0o600)
    os.chmod(vol.p("private"), 0o600)
    os.mkdir(vol.p("ro"), 0o755)
    pid = os.fork()
    if pid == 0:  # child: an unprivileged user
        code = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            for fn, args in ((os.open, (vol.p("private"), os.O_RDONLY)),
                             (os.open, (vol.p("ro", "f"), os.O_CREAT | os.O_WRONLY, 0o644))):
                try:
                    fn(*args)
                    code = 1
                except PermissionError:
                    pass
            os.stat(vol.p("private"))  # allow_other: visible, just not readable
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_truncate_grow_and_shrink(vol):
    data = payload("t", 3 * MiB + 5)
    write_file(vol.p("t"), data)
    os.truncate(vol.p("t"), 5 * MiB)
    assert read_file(vol.p("t")) == data + bytes(5 * MiB - len(data))
    os.truncate(vol.p("t"), 1000)
    assert read_file(vol.p("t")) == data[:1000]
    with open(vol.p("t"), "r+b") as f:
        f.truncate(0)
        f.write(b"again")
    assert read_file(vol.p("t")) == b"again"
    fd = os.open(vol.p("t"), os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert os.stat(vol.p("t")).st_size == 0
    # O_RDONLY | O_TRUNC truncates too, as on Linux's own filesystems (the
    # kernel asks for write permission first).
    write_file(vol.p("t"), b"x" * 100)
    os.close(os.open(vol.p("t"), os.O_RDONLY | os.O_TRUNC))
    assert os.stat(vol.p("t")).st_size == 0


def test_times_beyond_what_is_kept_are_clamped_not_wrapped(vol):
    """Times are kept as 64-bit nanoseconds (years 1678-2262). One beyond is
    clamped to the nearest end, as ext4 clamps to its range; it never wraps
    around into the past."""
    write_file(vol.p("t"), b"x")
    os.utime(vol.p("t"), (2 ** 40, 2 ** 40))
    st = os.stat(vol.p("t"))
    assert 9_223_372_035 <= st.st_mtime <= 9_223_372_037, st.st_mtime
    os.utime(vol.p("t"), (-(2 ** 40), -(2 ** 40)))
    st = os.stat(vol.p("t"))
    assert -9_223_372_038 <= st.st_mtime <= -9_223_372_035, st.st_mtime
    os.utime(vol.p("t"), (1_700_000_000, 1_700_000_000))
    assert os.stat(vol.p("t")).st_mtime == 1_700_000_000


# --- ioctl and fsync -----------------------------------------------------------


def test_tcgets_and_unknown_ioctls_are_enotty(vol):
    write_file(vol.p("f"), b"hello")
    # Python's open() asks isatty() (TCGETS) for buffering decisions.
    with open(vol.p("f"), "r") as f:
        assert f.read() == "hello"
        assert not f.isatty()
    fd = os.open(vol.p("f"), os.O_RDONLY)
    try:
        t0 = time.monotonic()
        for _ in range(200):
            expect_errno(errno.ENOTTY, fcntl.ioctl, fd, termios.TCGETS, bytes(64))
        assert time.monotonic() - t0 < 5
        expect_errno(errno.ENOTTY, fcntl.ioctl, fd, 0x80086b01, bytes(8))  # _IOR('k', 1, 8)
        assert not os.isatty(fd)
    finally:
        os.close(fd)
    dfd = os.open(vol.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        expect_errno(errno.ENOTTY, fcntl.ioctl, dfd, termios.TCGETS, bytes(64))
    finally:
        os.close(dfd)


def test_fsync_and_fdatasync_succeed(vol):
    data = payload("sync", 6 * MiB + 1)
    fd = os.open(vol.p("s"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
        os.write(fd, b"more")
        os.fdatasync(fd)
    finally:
        os.close(fd)
    dfd = os.open(vol.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    assert read_file(vol.p("s")) == data + b"more"


# --- Everything at once ------------------------------------------------------


def test_concurrent_mixed_operations_then_remount(vol, workdir):
    """Six processes storing, loading, unlinking (also while open) and
    renaming over each other's names for a while; then every worker's files
    are exactly its model, before and after a remount."""
    worker = os.path.join(os.path.dirname(__file__), "mixed_worker.py")
    models = [os.path.join(workdir, f"model{w}.json") for w in range(6)]
    procs = [subprocess.Popen([sys.executable, worker, vol.path, str(w), "8", models[w]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for w in range(6)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out

    def verify():
        for w in range(6):
            with open(models[w]) as f:
                model = json.load(f)
            d = vol.p(f"w{w}")
            assert {n for n in os.listdir(d) if not n.endswith(".tmp")} == set(model)
            for key, (version, size) in model.items():
                assert read_file(os.path.join(d, key)) == mixed_worker.data(key, version, size), \
                    (w, key)

    verify()
    used = os.statvfs(vol.path).f_bfree
    vol.remount()
    verify()
    # Free space rebuilt at mount matches what the running daemon counted.
    assert os.statvfs(vol.path).f_bfree == used


def test_interrupted_readers_leave_the_daemon_serving_and_nothing_queued(make_volume):
    """Readers signalled in the middle of reads: the kernel sends
    FUSE_INTERRUPT for the request the signalled thread waits on; the daemon
    answers it, and its read, queued for the device behind the other
    threads' reads (one read command in flight at a time), is dropped then
    and there. The file still reads back whole. (Buffered reads: an O_DIRECT
    read goes out as background requests, which the kernel never
    interrupts.)"""
    # prefetch=off: every read waits on the read lane itself (no read-ahead
    # of this large file through the cache, whose waits are not commands).
    vol = make_volume("interrupt", size=1024 * MiB, options="lane_read=1,prefetch=off")
    vol.mount.start()
    data = payload("interrupt", 96 * MiB)
    write_file(vol.p("big"), data)
    reader = (
        "import mmap, os, sys, threading\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "def loop(k):\n"
        "    buf = mmap.mmap(-1, 1 << 20)\n"
        "    while True:\n"
        "        os.preadv(fd, [buf], (k % 96) << 20)\n"
        "        k += 7\n"
        "for k in range(1, 8):\n"
        "    threading.Thread(target=loop, args=(k,), daemon=True).start()\n"
        "print('reading', flush=True)\n"
        "loop(0)\n"
    )
    def read_lane():
        return read_stats(vol.path)["lanes"]["read"]
    before = read_lane()["cancelled"]
    for _ in range(5):
        p = subprocess.Popen([sys.executable, "-c", reader, vol.p("big")],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert p.stdout.readline() == b"reading\n"
        # Its threads' reads wait behind one another for the one command
        # the read lane has: the signal hits a thread in one of them.
        wait_for(lambda: read_lane()["queued"] > 0, "reads queued on the read lane")
        p.send_signal(2)  # SIGINT: not fatal, so the request in flight is interrupted
        assert p.wait(timeout=30) != 0
        wait_for(lambda: read_lane()["queued"] == 0, "the read lane's queue to empty")
    assert read_lane()["cancelled"] > before
    assert read_file(vol.p("big")) == data
