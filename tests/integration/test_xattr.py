"""Extended attributes on a real mount: vLLM's checksum sequence (set
user.vllm.kv_crc32c on the temp file, rename, load, read it back; also with
O_DIRECT and across a remount), every errno, a 64 KiB value, many files,
concurrent set/get, an unlinked-but-open file, and fsck.kvfs -n clean after."""
import errno
import mmap
import os
import struct
import subprocess
import threading
import zlib

import pytest

FSCK_BIN = os.environ.get("FSCK_KVFS_BIN", "")
NAME = "user.vllm.kv_crc32c"


def crc_of(data):
    return struct.pack("<I", zlib.crc32(data))


def store(path, data, direct=False):
    """vLLM's store: temp file, the checksum on it, rename over the key."""
    tmp = path + ".tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        if direct:
            buf = mmap.mmap(-1, len(data))
            buf.write(data)
            os.write(fd, buf)
        else:
            os.write(fd, data)
        os.setxattr(fd, NAME, crc_of(data))
    finally:
        os.close(fd)
    os.rename(tmp, path)


def load(path, size, direct=False):
    """vLLM's load: read the file, then compare with the stored checksum."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        if direct:
            buf = mmap.mmap(-1, size)
            n = os.readv(fd, [buf])
            data = bytes(buf[:n])
        else:
            data = os.read(fd, size)
        stored = os.getxattr(fd, NAME)
    finally:
        os.close(fd)
    return data, stored


def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def fsck_clean(vol):
    if not FSCK_BIN:
        pytest.skip("FSCK_KVFS_BIN not set")
    r = subprocess.run([FSCK_BIN, "-n", vol.mount.image], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "o_direct"])
def test_vllm_checksum_sequence_survives_rename_and_remount(vol, direct):
    data = os.urandom(256 * 1024)
    key = vol.p("layer0_chunk17.bin")
    store(key, data, direct)
    assert not os.path.exists(key + ".tmp")
    got, stored = load(key, len(data), direct)
    assert got == data and stored == crc_of(data)
    # vLLM refuses to start where its root has no xattrs: it sets one there.
    os.setxattr(vol.path, "user.vllm.probe", b"1")
    vol.remount()
    got, stored = load(key, len(data), direct)
    assert got == data and stored == crc_of(data)
    assert os.getxattr(vol.path, "user.vllm.probe") == b"1"
    assert os.listxattr(key) == [NAME]
    vol.mount.stop()
    fsck_clean(vol)


def test_every_errno(vol):
    f = vol.p("f")
    open(f, "wb").close()
    os.setxattr(f, "user.a", b"1")
    assert errno_of(lambda: os.setxattr(f, "user.a", b"2", os.XATTR_CREATE)) == errno.EEXIST
    assert errno_of(lambda: os.setxattr(f, "user.b", b"2", os.XATTR_REPLACE)) == errno.ENODATA
    os.setxattr(f, "user.a", b"3", os.XATTR_REPLACE)
    assert os.getxattr(f, "user.a") == b"3"
    assert errno_of(lambda: os.getxattr(f, "user.missing")) == errno.ENODATA
    assert errno_of(lambda: os.removexattr(f, "user.missing")) == errno.ENODATA
    assert errno_of(lambda: os.setxattr(f, "user." + "n" * 251, b"")) == errno.ERANGE
    os.setxattr(f, "user." + "n" * 250, b"")
    assert errno_of(lambda: os.setxattr(f, "user.big", b"v" * (65536 + 1))) == errno.E2BIG
    os.setxattr(f, "user.max", b"v" * 65536)
    assert os.getxattr(f, "user.max") == b"v" * 65536
    assert errno_of(lambda: os.setxattr(f, "user.more", b"v" * 65536)) == errno.ENOSPC
    assert errno_of(lambda: os.setxattr(f, "security.kvfs_test", b"x")) == errno.EOPNOTSUPP
    assert errno_of(lambda: os.getxattr(f, "security.capability")) == errno.ENODATA
    # A well-formed ACL (owner rw, group r, other r): the kernel checks the
    # blob first, then kvfs has no ACLs to keep.
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, 0xFFFFFFFF)
                                          for tag, perm in ((1, 6), (4, 4), (0x20, 4)))
    assert errno_of(lambda: os.setxattr(f, "system.posix_acl_access", acl)) == errno.EOPNOTSUPP
    assert errno_of(lambda: os.getxattr(f, "system.posix_acl_access")) == errno.ENODATA
    assert errno_of(lambda: os.setxattr(f, "user.kvfs.mine", b"x")) == errno.EINVAL
    # The size query, and a buffer too short (libc's getxattr, size given).
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.getxattr(f.encode(), b"user.a", None, 0) == 1
    buf = ctypes.create_string_buffer(4)
    assert libc.getxattr(f.encode(), b"user.max", buf, 4) == -1
    assert ctypes.get_errno() == errno.ERANGE
    assert libc.listxattr(f.encode(), buf, 4) == -1
    assert ctypes.get_errno() == errno.ERANGE
    # trusted.* is root's: listed for root only.
    os.setxattr(f, "trusted.t", b"1")
    assert "trusted.t" in os.listxattr(f)
    # The hint keeps its meaning and is not stored.
    os.setxattr(f, "user.kvfs.prefetch", b"1")
    assert errno_of(lambda: os.getxattr(f, "user.kvfs.prefetch")) == errno.ENODATA
    d = vol.p("dir")
    os.mkdir(d)
    os.setxattr(d, "user.tag", b"dir")
    assert os.getxattr(d, "user.tag") == b"dir"


def test_writes_ask_no_security_attributes(vol):
    """The kernel may ask for security.capability around writes: on kvfs a
    write causes no GETXATTR (and one that came would be answered from the
    name alone, fuse/ops_xattr.cc)."""
    import json

    def getxattrs():
        with open(vol.p(".kvfs", "stats")) as f:
            return json.load(f)["requests"].get("getxattr", 0)

    p = vol.p("w")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    os.setxattr(fd, "user.x", b"1")  # a file that has attributes
    before = getxattrs()
    for i in range(200):
        os.pwrite(fd, b"y" * 4096, i * 4096)
    os.close(fd)
    assert getxattrs() == before


def test_thousand_files_listed_and_removed(vol):
    d = vol.p("many")
    os.mkdir(d)
    for i in range(1000):
        p = os.path.join(d, f"k{i}")
        open(p, "wb").close()
        os.setxattr(p, "user.i", str(i).encode())
        os.setxattr(p, "user.j", b"j")
    vol.remount()
    for i in range(1000):
        p = os.path.join(d, f"k{i}")
        assert sorted(os.listxattr(p)) == ["user.i", "user.j"]
        assert os.getxattr(p, "user.i") == str(i).encode()
        os.removexattr(p, "user.i")
        assert os.listxattr(p) == ["user.j"]
    vol.mount.stop()
    fsck_clean(vol)


def test_concurrent_set_and_get_on_one_file(vol):
    f = vol.p("shared")
    open(f, "wb").close()
    errors = []

    def worker(t):
        try:
            for i in range(200):
                os.setxattr(f, f"user.t{t}", f"{t}:{i}".encode())
                v = os.getxattr(f, f"user.t{t}")
                assert v == f"{t}:{i}".encode(), v
                os.listxattr(f)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(os.listxattr(f)) == sorted(f"user.t{t}" for t in range(8))
    vol.remount()
    for t in range(8):
        assert os.getxattr(f, f"user.t{t}") == f"{t}:199".encode()


def test_unlinked_but_open_file_keeps_its_attributes_until_close(vol):
    f = vol.p("gone")
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.setxattr(fd, "user.x", b"1")
    os.unlink(f)
    assert os.getxattr(fd, "user.x") == b"1"
    os.setxattr(fd, "user.y", b"2")
    assert sorted(os.listxattr(fd)) == ["user.x", "user.y"]
    os.close(fd)
    assert not os.path.exists(f)
    vol.mount.stop()
    fsck_clean(vol)
