"""O_TMPFILE + linkat, the atomic-publish idiom (llm-d's filesystem backend,
now in vLLM): a key is written as open(dir, O_TMPFILE|O_WRONLY), write,
linkat() of the unnamed file to its final name, close. kvfs supports the
unnamed file and the one link that names it; any other link stays refused
with EPERM. The kernel sends O_TMPFILE as FUSE_TMPFILE, which libfuse 3.14
does not know: kvfs's transports answer it (fuse/tmpfile.h), so this runs on
both (KVFS_TRANSPORT=dev and uring)."""
import ctypes
import errno
import json
import mmap
import os
import subprocess
import sys
import time

import pytest

from conftest import FUSERMOUNT, MiB, _live_mounts
from test_request_counts import kvfs_checks_permissions, measured

FSCK_BIN = os.environ.get("FSCK_KVFS_BIN", "")
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400

_libc = ctypes.CDLL(None, use_errno=True)


def linkat(olddirfd, oldpath, newdirfd, newpath, flags):
    if _libc.linkat(olddirfd, oldpath.encode(), newdirfd, newpath.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def write_all(fd, data):
    # As llm-d's writer: 1 MiB at a time.
    view = memoryview(data)
    while view:
        n = os.write(fd, view[:MiB])
        view = view[n:]


def publish(directory, name, data, how="proc", dirfd=None):
    """llm-d's store of one key: an unnamed file in `directory`, its bytes,
    then the link that names it (through /proc/self/fd, or AT_EMPTY_PATH)
    relative to a descriptor of `directory` (`dirfd`, or one opened here)."""
    fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o644)
    own = dirfd is None
    if own:
        dirfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_all(fd, data)
        if how == "proc":
            linkat(-100, f"/proc/self/fd/{fd}", dirfd, name, AT_SYMLINK_FOLLOW)  # AT_FDCWD
        else:
            linkat(fd, "", dirfd, name, AT_EMPTY_PATH)
    finally:
        if own:
            os.close(dirfd)
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def fsck(image):
    """fsck.kvfs -n --json on the unmounted image: (exit code, finding kinds)."""
    assert FSCK_BIN, "FSCK_KVFS_BIN must name the built fsck.kvfs"
    r = subprocess.run([FSCK_BIN, "-n", "--json", image], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode in (0, 4), f"fsck.kvfs -n exited {r.returncode}: {r.stderr}{r.stdout}"
    return r.returncode, [f.get("kind", "?") for f in json.loads(r.stdout).get("findings", [])]


@pytest.mark.parametrize("how", ["proc", "empty_path"])
@pytest.mark.parametrize("size", [1, 256 << 10, 4 * MiB + 4097])
def test_llmd_publish_is_byte_exact_and_survives_remount(vol, size, how):
    d = vol.p("model", "layer0")
    os.makedirs(d)
    data = os.urandom(size)
    publish(d, "key.bin", data, how)
    st = os.stat(os.path.join(d, "key.bin"))
    assert (st.st_nlink, st.st_size, st.st_mode & 0o777) == (1, size, 0o644)
    assert read(os.path.join(d, "key.bin")) == data
    assert os.listdir(d) == ["key.bin"]
    vol.remount()
    assert read(os.path.join(d, "key.bin")) == data
    assert os.listdir(d) == ["key.bin"]
    assert os.stat(os.path.join(d, "key.bin")).st_nlink == 1


def test_unprivileged_connector_publishes_and_cannot_publish_where_it_may_not_write(vol):
    # Connectors do not run as root: the unnamed file is the caller's, and
    # the kernel's permission checks (default_permissions) apply as for a
    # create: write permission on the directory.
    user = 65534
    open_dir, closed_dir = vol.p("open"), vol.p("closed")
    os.mkdir(open_dir, 0o777)
    os.chmod(open_dir, 0o777)
    os.mkdir(closed_dir, 0o755)
    data = os.urandom(300000)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
            publish(open_dir, "key", data)
            try:
                os.open(closed_dir, os.O_TMPFILE | os.O_WRONLY, 0o644)
                code = 2
            except PermissionError:
                pass
            # Nor link into it an unnamed file made where it may write.
            fd = os.open(open_dir, os.O_TMPFILE | os.O_WRONLY, 0o644)
            try:
                linkat(fd, "", -100, os.path.join(closed_dir, "key"), AT_EMPTY_PATH)
                code = 3
            except PermissionError:
                pass
            try:
                linkat(-100, f"/proc/self/fd/{fd}", -100, os.path.join(closed_dir, "key"),
                       AT_SYMLINK_FOLLOW)
                code = 4
            except PermissionError as e:
                if e.errno != errno.EACCES:
                    code = 5
            os.close(fd)
        except BaseException:  # noqa: BLE001 - the exit code says it
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    st = os.stat(os.path.join(open_dir, "key"))
    assert (st.st_uid, st.st_gid, st.st_nlink) == (user, user, 1)
    assert read(os.path.join(open_dir, "key")) == data
    assert os.listdir(closed_dir) == []


def test_many_keys_published_in_a_row_are_each_exact(vol):
    keys = {f"k{i:03d}": os.urandom(64 << 10 | i) for i in range(50)}
    for name, data in keys.items():
        publish(vol.path, name, data)
    assert sorted(os.listdir(vol.path)) == sorted(keys)
    for name, data in keys.items():
        assert read(vol.p(name)) == data


def test_other_links_are_refused_as_before(vol):
    with open(vol.p("named"), "wb") as f:
        f.write(b"x")
    # A file that has a name: EPERM, as every link was before.
    with pytest.raises(OSError) as e:
        os.link(vol.p("named"), vol.p("second"))
    assert e.value.errno == errno.EPERM
    fd = os.open(vol.p("named"), os.O_RDONLY)
    try:
        with pytest.raises(OSError) as e:
            linkat(-100, f"/proc/self/fd/{fd}", -100, vol.p("third"), AT_SYMLINK_FOLLOW)
        assert e.value.errno == errno.EPERM
    finally:
        os.close(fd)
    # The unnamed file after its link is a named file: a second link, EPERM.
    fd = os.open(vol.path, os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"once")
        linkat(fd, "", -100, vol.p("first"), AT_EMPTY_PATH)
        with pytest.raises(OSError) as e:
            linkat(fd, "", -100, vol.p("again"), AT_EMPTY_PATH)
        assert e.value.errno == errno.EPERM
    finally:
        os.close(fd)
    # O_EXCL: never linkable (the kernel refuses with ENOENT).
    fd = os.open(vol.path, os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o644)
    try:
        with pytest.raises(OSError) as e:
            linkat(fd, "", -100, vol.p("excl"), AT_EMPTY_PATH)
        assert e.value.errno == errno.ENOENT
    finally:
        os.close(fd)
    # A name that exists: EEXIST.
    fd = os.open(vol.path, os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        with pytest.raises(OSError) as e:
            linkat(fd, "", -100, vol.p("named"), AT_EMPTY_PATH)
        assert e.value.errno == errno.EEXIST
    finally:
        os.close(fd)
    # No unnamed file in the control directory.
    with pytest.raises(OSError) as e:
        os.open(vol.p(".kvfs"), os.O_TMPFILE | os.O_WRONLY, 0o644)
    assert e.value.errno == errno.EPERM
    assert sorted(os.listdir(vol.path)) == ["first", "named"]
    assert read(vol.p("named")) == b"x" and read(vol.p("first")) == b"once"


def used_bytes(path):
    s = os.statvfs(path)
    return (s.f_blocks - s.f_bfree) * s.f_frsize


def test_unnamed_file_closed_without_link_disappears(vol):
    before = sorted(os.listdir(vol.path))
    used = used_bytes(vol.path)
    fd = os.open(vol.path, os.O_TMPFILE | os.O_RDWR, 0o600)
    write_all(fd, os.urandom(16 * MiB))
    os.fsync(fd)  # its data and its orphan record are in the index
    assert os.fstat(fd).st_nlink == 0
    assert used_bytes(vol.path) >= used + 16 * MiB
    assert os.pread(fd, 5, 16 * MiB - 5) != b""
    os.close(fd)
    deadline = time.monotonic() + 10
    while used_bytes(vol.path) > used and time.monotonic() < deadline:
        time.sleep(0.05)  # the release arrives after close(2); the delete commits after it
    assert used_bytes(vol.path) == used
    assert sorted(os.listdir(vol.path)) == before
    vol.mount.stop()
    code, kinds = fsck(vol.image)
    assert (code, kinds) == (0, [])
    vol.mount.start()
    assert sorted(os.listdir(vol.path)) == before


WRITER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_WRONLY, 0o644)
data = bytes(range(256)) * (3 * 4096 + 7)
os.write(fd, data)
os.fsync(fd)
print("written", flush=True)
sys.stdin.read()  # holds the unnamed file open until killed; never links it
"""


def test_kill_9_between_write_and_link_leaves_no_name_and_fsck_clean(vol):
    used = used_bytes(vol.path)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, vol.path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "written"
        vol.mount.proc.kill()  # kill -9 of the daemon, the writer still before its link
        vol.mount.proc.wait(timeout=60)
    finally:
        writer.kill()
        writer.wait(timeout=60)
    subprocess.run([FUSERMOUNT, "-u", "-z", vol.mnt], capture_output=True)
    vol.mount.proc = None
    if vol.mount in _live_mounts:
        _live_mounts.remove(vol.mount)
    vol.mount.log.close()
    # The index recorded the unnamed file, as an orphan (its fsync committed it).
    code, kinds = fsck(vol.image)
    assert kinds == ["orphan"], kinds
    # The next mount reclaims it: no name, its space free, fsck clean.
    vol.mount.start()
    assert "reclaimed 1 orphaned file" in vol.mount.read_log()
    assert [n for n in os.listdir(vol.path)] == []
    assert used_bytes(vol.path) == used
    vol.mount.stop()
    assert fsck(vol.image) == (0, [])
    vol.mount.start()


def steady(vol, store):
    """The requests of store(name) in a directory where the previous request
    was a store too (a connector's burst of stores): one store first, then
    the measured one. Again if the kernel forgot inodes meanwhile (its cache
    shrinking: the forgets and the lookups that follow are not the store's)."""
    for attempt in range(5):
        store(f"warm{attempt}")
        got = measured(vol, lambda: store(f"key{attempt}"))
        if "forget" not in got:
            return got
    pytest.fail(f"the kernel forgot inodes during every measurement: {got}")


def test_requests_per_publish(vol):
    """The FUSE requests one llm-d publish costs, in a burst of publishes
    into one directory: open(O_TMPFILE) is tmpfile; one write per MiB;
    linkat a lookup of the new name and link; close flush and release: 5 +
    one per MiB. The temp file + rename fallback costs 6 + one per MiB in
    the same burst (the temp name's lookup and the rename target's). Where
    the kernel checks permissions (default_permissions, before Linux 6.16)
    each adds two getattrs of the directory (the previous change dropped
    its attributes). A directory descriptor opened per key adds opendir and
    releasedir."""
    extra = {} if kvfs_checks_permissions() else {"getattr": 2}
    d = vol.p("d")
    os.mkdir(d)
    dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for size, pieces in ((256 << 10, 1), (4 * MiB, 4)):
            # Page-aligned, as llm-d's pinned staging buffers are: one write
            # request per MiB (test_request_counts.py).
            data = mmap.mmap(-1, size)
            data.write(os.urandom(size))
            for how in ("proc", "empty_path"):
                prefix = f"{size}{how}"
                got = steady(vol, lambda n: publish(d, prefix + n, data, how, dirfd))
                assert got == {"tmpfile": 1, "write": pieces, "lookup": 1, "link": 1,
                               "flush": 1, "release": 1, **extra}, (size, how, got)
                assert read(os.path.join(d, prefix + "key0")) == data[:]

            def rename_store(n):
                path = os.path.join(d, f"r{size}{n}")
                fd = os.open(path + ".tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                write_all(fd, data)
                os.close(fd)
                os.rename(path + ".tmp", path)

            got = steady(vol, rename_store)
            assert got == {"lookup": 2, "create": 1, "write": pieces, "flush": 1, "release": 1,
                           "rename": 1, **extra}, (size, got)
        got = steady(vol, lambda n: publish(d, "own" + n, data))
        assert got == {"tmpfile": 1, "write": 4, "lookup": 1, "link": 1, "flush": 1,
                       "release": 1, "opendir": 1, "releasedir": 1, **extra}, got
    finally:
        os.close(dirfd)
