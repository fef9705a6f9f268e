"""The batch ioctl (include/kvfs/ioctl.h) on a real mount, spoken raw:
fcntl.ioctl + struct + os.memfd_create + mmap, no client library. Round
trips byte-exact for every op, per-entry results in input order, the limits,
hostile input answered with its errno while the daemon keeps serving,
permission checks for an unprivileged caller, registrations that die with
their fd or process, and a daemon killed during a WRITE batch."""
import ctypes
import errno
import fcntl
import functools
import mmap
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import json

import pytest

from conftest import FUSERMOUNT, GiB, MiB, Volume, _live_mounts
from kvio import read_stats, wait_for

# --- The ABI, from include/kvfs/ioctl.h.
ABI_VERSION = 1
NAME_MAX = 255
BATCH_MAX_ENTRIES = 4096
ENTRY_MAX_BYTES = 1 << 31
MAX_REGISTRATIONS = 64
OP_READ, OP_WRITE, OP_STAT, OP_PREFETCH, OP_DELETE, OP_EXISTS = 1, 2, 3, 4, 5, 6

REGISTER_FMT = "=IiQQQ"      # version fd length flags buf_id
UNREGISTER_FMT = "=IIQ"      # version reserved buf_id
BATCH_FMT = "=IIQQQIIQ"      # version count table_id table_off flags completed failed bytes
ENTRY_FMT = "=IIQQQQQiIQ"    # op name_len name_off buf_id buf_off length file_off status flags result
assert struct.calcsize(REGISTER_FMT) == 32
assert struct.calcsize(UNREGISTER_FMT) == 16
assert struct.calcsize(BATCH_FMT) == 48
assert struct.calcsize(ENTRY_FMT) == 64
ENTRY = 64


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (0xB7 << 8) | nr


IOC_REGISTER = _ioc(3, 1, 32)    # _IOWR
IOC_UNREGISTER = _ioc(1, 2, 16)  # _IOW
IOC_BATCH = _ioc(3, 3, 48)       # _IOWR
IOC_FEATURES = _ioc(3, 4, 64)    # _IOWR
FEATURES_FMT = "=IIQQ40x"        # version reserved flags ops spare[5]
OPS_BASE = sum(1 << op for op in (OP_READ, OP_WRITE, OP_STAT, OP_PREFETCH, OP_DELETE))
TCGETS = 0x5401


def errno_of(fn, *args, **kwargs):
    """The errno fn(*args, **kwargs) raises (0 if it succeeds)."""
    try:
        fn(*args, **kwargs)
    except OSError as e:
        return e.errno
    return 0


def register(fd, mem_fd, length, version=ABI_VERSION, flags=0):
    buf = bytearray(struct.pack(REGISTER_FMT, version, mem_fd, length, flags, 0))
    fcntl.ioctl(fd, IOC_REGISTER, buf, True)
    return struct.unpack(REGISTER_FMT, buf)[4]


def unregister(fd, buf_id, version=ABI_VERSION, reserved=0):
    fcntl.ioctl(fd, IOC_UNREGISTER, struct.pack(UNREGISTER_FMT, version, reserved, buf_id))


def batch_ioctl(fd, count, table_id, table_off, version=ABI_VERSION, flags=0):
    """Returns (completed, failed, bytes)."""
    buf = bytearray(struct.pack(BATCH_FMT, version, count, table_id, table_off, flags, 0, 0, 0))
    fcntl.ioctl(fd, IOC_BATCH, buf, True)
    out = struct.unpack(BATCH_FMT, buf)
    return out[5], out[6], out[7]


class Shm:
    """A memfd of `size` bytes, mapped here and registered on `fd`."""

    def __init__(self, fd, size, register_it=True):
        self.size = size
        self.mfd = os.memfd_create("kvfs-test", os.MFD_CLOEXEC)
        os.ftruncate(self.mfd, size)
        self.mm = mmap.mmap(self.mfd, size)
        self.id = register(fd, self.mfd, size) if register_it else 0

    def close(self):
        self.mm.close()
        os.close(self.mfd)


class Entry:
    def __init__(self, op, name, buf_id=0, buf_off=0, length=0, file_off=0, flags=0,
                 name_off=None, name_len=None):
        self.op, self.name, self.buf_id, self.buf_off = op, name, buf_id, buf_off
        self.length, self.file_off, self.flags = length, file_off, flags
        self.name_off, self.name_len = name_off, name_len
        self.status = self.result = None


def run(fd, shm, entries, table_off=0):
    """Lays the table and names out in `shm` at `table_off`, issues BATCH,
    reads each entry's status/result back. Returns (completed, failed, bytes)."""
    names_off = table_off + len(entries) * ENTRY
    pos = names_off
    for i, e in enumerate(entries):
        raw = e.name.encode() if isinstance(e.name, str) else e.name
        name_off = pos if e.name_off is None else e.name_off
        if e.name_off is None:
            shm.mm[pos:pos + len(raw)] = raw
            pos += len(raw)
        name_len = len(raw) if e.name_len is None else e.name_len
        struct.pack_into(ENTRY_FMT, shm.mm, table_off + i * ENTRY, e.op, name_len, name_off,
                         e.buf_id, e.buf_off, e.length, e.file_off, -1, e.flags, 0xDEAD)
    assert pos <= shm.size
    out = batch_ioctl(fd, len(entries), shm.id, table_off)
    for i, e in enumerate(entries):
        f = struct.unpack_from(ENTRY_FMT, shm.mm, table_off + i * ENTRY)
        e.status, e.result = f[7], f[9]
    return out


def run_in_caller_memory(fd, entries):
    """The same with the table and names in plain process memory (table_id 0)."""
    names = [e.name.encode() for e in entries]
    name_bufs = [ctypes.create_string_buffer(n, len(n) or 1) for n in names]
    table = ctypes.create_string_buffer(len(entries) * ENTRY)
    for i, e in enumerate(entries):
        struct.pack_into(ENTRY_FMT, table, i * ENTRY, e.op, len(names[i]),
                         ctypes.addressof(name_bufs[i]), e.buf_id, e.buf_off, e.length,
                         e.file_off, -1, e.flags, 0xDEAD)
    out = batch_ioctl(fd, len(entries), 0, ctypes.addressof(table))
    for i, e in enumerate(entries):
        f = struct.unpack_from(ENTRY_FMT, table, i * ENTRY)
        e.status, e.result = f[7], f[9]
    return out


def pattern(seed, n):
    return random.Random(seed).randbytes(n)


def registrations(vol):
    return read_stats(vol.path)["batch"]["registrations"]


@pytest.fixture
def dirfd(vol):
    fd = os.open(vol.path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


DATA = 1 << 20  # where data starts in the test regions (after table + names)


def test_every_op_round_trips_byte_exact(vol, dirfd):
    shm = Shm(dirfd, 64 * MiB)
    sizes = {"aligned": 4 * MiB, "odd": 12345, "empty": 0, "one": 1, "page": 4096}
    contents = {n: pattern(n, s) for n, s in sizes.items()}
    os.mkdir(vol.p("sub"))
    # WRITE from registered memory, aligned and unaligned buffer offsets.
    entries, off = [], DATA
    for i, (n, data) in enumerate(contents.items()):
        off += 4096 if i % 2 == 0 else 4097  # every other one unaligned
        shm.mm[off:off + len(data)] = data
        entries.append(Entry(OP_WRITE, "sub/" + n, shm.id, off, len(data)))
        off += len(data)
    completed, failed, moved = run(dirfd, shm, entries)
    assert [e.status for e in entries] == [0] * len(entries)
    assert [e.result for e in entries] == [len(d) for d in contents.values()]
    assert (completed, failed, moved) == (len(entries), 0, sum(sizes.values()))
    for n, data in contents.items():
        with open(vol.p("sub", n), "rb") as f:
            assert f.read() == data, n
        st = os.stat(vol.p("sub", n))
        assert st.st_mode & 0o777 == 0o644 and st.st_uid == 0

    # POSIX-written file read back by the batch; READ of whole files,
    # ranges at aligned and unaligned file/buffer offsets, and past EOF.
    posix = pattern("posix", 3 * MiB + 100)
    with open(vol.p("sub", "posix"), "wb") as f:
        f.write(posix)
    cases = [("sub/posix", 0, 4 * MiB, posix), ("sub/posix", 4096, MiB, posix[4096:4096 + MiB]),
             ("sub/posix", 1001, 70001, posix[1001:1001 + 70001]),
             ("sub/posix", len(posix) - 10, 4096, posix[-10:]),
             ("sub/posix", len(posix) + 4096, 4096, b""),
             ("sub/aligned", 0, 4 * MiB, contents["aligned"]),
             ("sub/odd", 0, 16384, contents["odd"]), ("sub/empty", 0, 4096, b""),
             ("sub/one", 0, 1, contents["one"])]
    entries, off = [], DATA
    for i, (name, foff, length, _) in enumerate(cases):
        off += 0 if i % 2 == 0 else 1  # odd ones at unaligned buffer offsets
        entries.append(Entry(OP_READ, name, shm.id, off, length, foff))
        off = (off + length + 4095) // 4096 * 4096
    shm.mm[DATA:off] = b"\xee" * (off - DATA)
    run(dirfd, shm, entries)
    for e, (name, foff, length, want) in zip(entries, cases):
        assert (e.status, e.result) == (0, len(want)), (name, foff)
        assert shm.mm[e.buf_off:e.buf_off + len(want)] == want, (name, foff)
        if len(want) < length:  # nothing written past what was read
            # A zero-copy read may fill the rest of its last 4 KiB block with
            # the zeros past EOF (header: "may be overwritten"); nothing more.
            end = e.buf_off + len(want)
            block_end = min(e.buf_off + length, (end + 4095) // 4096 * 4096)
            zeros = bytes(shm.mm[end:block_end])
            assert zeros in (b"\0" * len(zeros), b"\xee" * len(zeros)), (name, foff)
            tail = bytes(shm.mm[block_end:e.buf_off + length])
            assert tail == b"\xee" * len(tail), (name, foff, length)

    # STAT and PREFETCH, then DELETE.
    entries = [Entry(OP_STAT, "sub/" + n) for n in contents] + [Entry(OP_STAT, "sub")]
    entries += [Entry(OP_PREFETCH, "sub/aligned"), Entry(OP_PREFETCH, "sub/posix")]
    run(dirfd, shm, entries)
    assert [e.status for e in entries] == [0] * len(entries)
    assert [e.result for e in entries[:len(contents)]] == list(sizes.values())
    assert 0 < entries[-1].result <= (len(posix) + 4095) // 4096 * 4096 or entries[-1].result == 0
    # EXISTS: status only (result 0), for files and directories alike.
    entries = [Entry(OP_EXISTS, "sub/" + n) for n in contents]
    entries += [Entry(OP_EXISTS, "sub"), Entry(OP_EXISTS, "sub/none"), Entry(OP_EXISTS, "none/x")]
    run(dirfd, shm, entries)
    assert [(e.status, e.result) for e in entries] == [(0, 0)] * (len(contents) + 1) + [
        (errno.ENOENT, 0), (errno.ENOENT, 0)]
    entries = [Entry(OP_DELETE, "sub/odd"), Entry(OP_DELETE, "sub/odd"), Entry(OP_STAT, "sub/odd")]
    run(dirfd, shm, entries[:1])
    run(dirfd, shm, entries[1:])
    assert [e.status for e in entries] == [0, errno.ENOENT, errno.ENOENT]
    assert not os.path.exists(vol.p("sub", "odd"))

    # WRITE replaces atomically; names resolve under the ioctl's directory.
    subfd = os.open(vol.p("sub"), os.O_RDONLY | os.O_DIRECTORY)
    new = pattern("new", 8192)
    shm.mm[DATA:DATA + len(new)] = new
    e = Entry(OP_WRITE, "posix", shm.id, DATA, len(new))
    run(subfd, shm, [e])
    assert e.status == 0
    with open(vol.p("sub", "posix"), "rb") as f:
        assert f.read() == new
    os.close(subfd)

    # buf_id 0: plain process memory, and the table there too.
    src = ctypes.create_string_buffer(pattern("plain", 100003), 100003)
    dst = ctypes.create_string_buffer(100003 + 10)
    entries = [Entry(OP_WRITE, "sub/plain", 0, ctypes.addressof(src), 100003)]
    assert run_in_caller_memory(dirfd, entries) == (1, 0, 100003)
    assert entries[0].status == 0
    entries = [Entry(OP_READ, "sub/plain", 0, ctypes.addressof(dst) + 1, 100003 + 9, 0),
               Entry(OP_STAT, "sub/plain"), Entry(OP_STAT, "sub/nothing")]
    run_in_caller_memory(dirfd, entries)
    assert [(e.status, e.result) for e in entries] == [(0, 100003), (0, 100003),
                                                        (errno.ENOENT, 0)]
    assert dst.raw[1:100004] == src.raw
    # A registered table can still point at plain memory for data.
    entries = [Entry(OP_READ, "sub/plain", 0, ctypes.addressof(dst), 4096, 5)]
    run(dirfd, shm, entries)
    assert entries[0].status == 0 and dst.raw[:4096] == src.raw[5:4101]
    shm.close()


def features(fd, version=ABI_VERSION, reserved=0, flags=0):
    """KVFS_IOC_FEATURES: (version, ops, the 40 spare bytes)."""
    buf = bytearray(struct.pack(FEATURES_FMT, version, reserved, flags, 0))
    fcntl.ioctl(fd, IOC_FEATURES, buf, True)
    out = struct.unpack(FEATURES_FMT, buf)
    return out[0], out[3], bytes(buf[24:])


def test_features_list_exactly_the_ops_a_batch_runs(vol, dirfd):
    version, ops, spare = features(dirfd)
    assert version == ABI_VERSION and spare == bytes(40)
    assert ops == OPS_BASE | 1 << OP_EXISTS
    # Any version is taken (the call is how a client learns the daemon's),
    # from a file as from a directory.
    with open(vol.p("x"), "wb") as f:
        f.write(b"x" * 100)
    fd = os.open(vol.p("x"), os.O_RDONLY)
    try:
        assert features(fd, version=0)[:2] == (ABI_VERSION, ops)
        assert features(dirfd, version=99)[:2] == (ABI_VERSION, ops)
    finally:
        os.close(fd)
    assert errno_of(features, dirfd, reserved=1) == errno.EINVAL
    assert errno_of(features, dirfd, flags=1) == errno.EINVAL
    # Every listed op runs (entries of a batch have no order between them,
    # so a DELETE may precede the READ: ENOENT is a run too); every other
    # op fails its entry alone with EINVAL.
    shm = Shm(dirfd, 1 * MiB)
    listed = [op for op in range(64) if ops >> op & 1]
    unlisted = [op for op in range(64) if not ops >> op & 1]
    data = {OP_READ: (shm.id, 65536, 100), OP_WRITE: (shm.id, 65536, 100)}
    entries = [Entry(op, "x", *data.get(op, ())) for op in listed + unlisted]
    run(dirfd, shm, entries)
    for e in entries:
        assert (e.status == errno.EINVAL) == (e.op in unlisted), (e.op, e.status)
    shm.close()


def test_mixed_hits_and_misses_report_per_entry_in_input_order(vol, dirfd):
    shm = Shm(dirfd, 32 * MiB)
    present = {}
    for i in range(0, 200, 3):
        present[f"k{i}"] = pattern(i, 1000 + i * 7)
        with open(vol.p(f"k{i}"), "wb") as f:
            f.write(present[f"k{i}"])
    names = [f"k{i}" for i in random.Random(5).sample(range(200), 200)]
    entries = []
    for j, n in enumerate(names):
        entries.append(Entry(OP_READ, n, shm.id, DATA + j * 4096 * 2, 8192))
        entries.append(Entry(OP_STAT, n))
    completed, failed, moved = run(dirfd, shm, entries)
    assert completed == 2 * len(present) and failed == 2 * (200 - len(present))
    assert moved == sum(len(d) for d in present.values())
    for j, n in enumerate(names):
        r, s = entries[2 * j], entries[2 * j + 1]
        if n in present:
            data = present[n]
            assert (r.status, r.result, s.status, s.result) == (0, len(data), 0, len(data)), n
            assert shm.mm[r.buf_off:r.buf_off + len(data)] == data, n
        else:
            assert (r.status, r.result, s.status, s.result) == (errno.ENOENT, 0, errno.ENOENT, 0)
    shm.close()


def test_a_batch_of_4096_entries_runs_and_4097_is_refused(vol, dirfd):
    n = BATCH_MAX_ENTRIES
    shm = Shm(dirfd, 4 * MiB + n * 4096)
    data = bytes(range(256)) * 16
    entries = []
    for i in range(n):
        off = 4 * MiB + i * 4096
        shm.mm[off:off + 16] = i.to_bytes(16, "little")
        shm.mm[off + 16:off + 4096] = data[16:]
        entries.append(Entry(OP_WRITE, f"f{i:05d}", shm.id, off, 4096))
    assert run(dirfd, shm, entries) == (n, 0, n * 4096)
    shm.mm[4 * MiB:] = b"\0" * (n * 4096)
    entries = [Entry(OP_READ, f"f{i:05d}", shm.id, 4 * MiB + (n - 1 - i) * 4096, 4096)
               for i in range(n)]
    assert run(dirfd, shm, entries) == (n, 0, n * 4096)
    for i in range(n):
        off = 4 * MiB + (n - 1 - i) * 4096
        assert shm.mm[off:off + 16] == i.to_bytes(16, "little")
    assert len(os.listdir(vol.path)) == n
    entries = [Entry(OP_STAT, f"f{i:05d}") for i in range(n + 1)]
    with pytest.raises(OSError) as e:
        run(dirfd, shm, entries)
    assert e.value.errno == errno.E2BIG
    shm.close()


def test_hostile_input_gets_its_errno_and_the_daemon_keeps_serving(vol, dirfd, workdir):
    shm = Shm(dirfd, 8 * MiB)
    with open(vol.p("x"), "wb") as f:
        f.write(b"x" * 10000)
    table = lambda count, **kw: batch_ioctl(dirfd, count, kw.get("tid", shm.id),  # noqa: E731
                                            kw.get("off", 0), kw.get("version", ABI_VERSION),
                                            kw.get("flags", 0))
    run(dirfd, shm, [Entry(OP_STAT, "x")])
    # Call-level errors.
    assert errno_of(table, 1, version=2) == errno.EPROTO
    assert errno_of(table, 1, version=0) == errno.EPROTO
    assert errno_of(register, dirfd, shm.mfd, 4096, 7) == errno.EPROTO
    assert errno_of(unregister, dirfd, shm.id, 7) == errno.EPROTO
    assert errno_of(table, 1, flags=1) == errno.EINVAL
    assert errno_of(table, 0) == errno.EINVAL
    assert errno_of(table, BATCH_MAX_ENTRIES + 1) == errno.E2BIG
    assert errno_of(table, 0xFFFFFFFF) == errno.E2BIG
    assert errno_of(table, 1, tid=shm.id + 1000) == errno.EBADF
    assert errno_of(table, 1, off=8 * MiB) == errno.EFAULT
    assert errno_of(table, 2, off=8 * MiB - 64) == errno.EFAULT
    assert errno_of(table, 1, off=(1 << 64) - 64) == errno.EFAULT
    assert errno_of(table, 1, off=4) == errno.EINVAL
    assert errno_of(table, 1, tid=0, off=16) == errno.EFAULT  # unmapped address
    filefd = os.open(vol.p("x"), os.O_RDONLY)
    assert errno_of(batch_ioctl, filefd, 1, shm.id, 0) == errno.ENOTDIR
    assert errno_of(fcntl.ioctl, filefd, TCGETS, bytes(64)) == errno.ENOTTY
    assert errno_of(fcntl.ioctl, dirfd, _ioc(3, 99, 48), bytes(48)) == errno.ENOTTY
    assert errno_of(unregister, dirfd, 0) == errno.EBADF
    assert errno_of(unregister, dirfd, 1, ABI_VERSION, 1) == errno.EINVAL

    # Entry-level errors, all in one batch, with good entries between them.
    other = Shm(dirfd, 4096)
    E = Entry
    cases = [
        (E(OP_STAT, "x"), 0),
        (E(OP_READ, "x", shm.id, 8 * MiB - 4096, 8192), errno.EFAULT),  # past the region
        (E(OP_READ, "x", shm.id, (1 << 64) - 4096, 8192), errno.EFAULT),  # wraps around
        (E(OP_WRITE, "w", shm.id, 8 * MiB, 1), errno.EFAULT),
        (E(OP_READ, "x", 999999, 0, 4096), errno.EBADF),  # unknown id
        (E(OP_READ, "x", shm.id, DATA, 0), errno.EINVAL),  # zero length
        (E(OP_READ, "x", shm.id, DATA, ENTRY_MAX_BYTES + 1), errno.EFBIG),
        (E(OP_WRITE, "w", shm.id, DATA, 1 << 63), errno.EFBIG),
        (E(OP_WRITE, "w", shm.id, DATA, 10, 5), errno.EINVAL),  # file_off on a WRITE
        (E(OP_STAT, "../x"), errno.EXDEV),
        (E(OP_STAT, "a/../../x"), errno.EXDEV),
        (E(OP_WRITE, "../escape", shm.id, DATA, 10), errno.EXDEV),
        (E(OP_STAT, "/etc/passwd"), errno.EXDEV),
        (E(OP_DELETE, "/x"), errno.EXDEV),
        (E(OP_STAT, "n" * 256), errno.ENAMETOOLONG),
        (E(OP_WRITE, "n" * 256, shm.id, DATA, 10), errno.ENAMETOOLONG),
        (E(OP_STAT, "n" * 255), errno.ENOENT),
        (E(OP_STAT, ""), errno.EINVAL),
        (E(OP_STAT, "a//b"), errno.EINVAL),
        (E(OP_STAT, "x\0y"), errno.EINVAL),
        (E(OP_STAT, "x", name_len=5000), errno.ENAMETOOLONG),
        (E(OP_STAT, "x", name_off=8 * MiB - 1, name_len=2), errno.EFAULT),
        (E(99, "x"), errno.EINVAL),  # unknown op
        (E(0, "x"), errno.EINVAL),
        (E(OP_STAT, "x", flags=1), errno.EINVAL),
        (E(OP_EXISTS, "x"), 0),
        (E(OP_EXISTS, "../x"), errno.EXDEV),
        (E(OP_EXISTS, "n" * 256), errno.ENAMETOOLONG),
        (E(OP_EXISTS, "x/y"), errno.ENOTDIR),
        (E(7, "x"), errno.EINVAL),  # the op after the last
        (E(OP_READ, "x", 0, 16, 4096), errno.EFAULT),  # caller memory, unmapped address
        (E(OP_WRITE, "w2", 0, 16, 4096), errno.EFAULT),
        (E(OP_READ, "x", other.id, 0, 4096), 0),
        (E(OP_READ, "x/y", shm.id, DATA, 10), errno.ENOTDIR),
        (E(OP_READ, ".", shm.id, DATA, 10), errno.EINVAL),
        (E(OP_READ, "x", shm.id, DATA, 4096, (1 << 63) - 1), errno.EINVAL),
        (E(OP_STAT, "x"), 0),
    ]
    entries = [c[0] for c in cases]
    completed, failed, _ = run(dirfd, shm, entries)
    got = [e.status for e in entries]
    assert got == [c[1] for c in cases], [(i, e.name[:20], g, c[1]) for i, (e, c, g) in
                                          enumerate(zip(entries, cases, got)) if g != c[1]]
    assert completed == got.count(0) and failed == len(got) - got.count(0)
    assert all(e.result == 0 for e in entries if e.status != 0)
    assert not os.path.exists(vol.p("w")) and not os.path.exists(vol.p("w2"))
    assert not os.path.exists(os.path.join(workdir, "escape"))

    # A buffer after UNREGISTER, and unregistering twice.
    unregister(dirfd, other.id)
    e = Entry(OP_READ, "x", other.id, 0, 4096)
    run(dirfd, shm, [e])
    assert e.status == errno.EBADF
    assert errno_of(unregister, dirfd, other.id) == errno.EBADF
    assert errno_of(batch_ioctl, dirfd, 1, other.id, 0) == errno.EBADF
    other.close()

    # REGISTER refusals.
    mfd = os.memfd_create("t")
    os.ftruncate(mfd, 8192)
    assert errno_of(register, dirfd, mfd, 0) == errno.EINVAL
    assert errno_of(register, dirfd, mfd, 4097) == errno.EINVAL
    assert errno_of(register, dirfd, mfd, 3 * 4096) == errno.EINVAL  # longer than the file
    assert errno_of(register, dirfd, mfd, 4096, ABI_VERSION, 1) == errno.EINVAL
    assert errno_of(register, dirfd, 987654, 4096) == errno.EBADF
    assert errno_of(register, dirfd, -1, 4096) == errno.EBADF
    ro = os.open(f"/proc/self/fd/{mfd}", os.O_RDONLY)
    assert errno_of(register, dirfd, ro, 4096) == errno.EACCES
    os.close(ro)
    with open(os.path.join(workdir, "plain"), "wb") as f:
        f.write(b"\0" * 8192)
    pf = os.open(os.path.join(workdir, "plain"), os.O_RDWR)  # not tmpfs
    assert errno_of(register, dirfd, pf, 4096) == errno.EINVAL
    os.close(pf)
    kf = os.open(vol.p("x"), os.O_RDWR)  # a file of the mount itself
    assert errno_of(register, dirfd, kf, 4096) == errno.EINVAL
    os.close(kf)
    assert errno_of(register, dirfd, dirfd, 4096) == errno.EACCES  # a directory, read-only
    r, w = os.pipe()
    assert errno_of(register, dirfd, r, 4096) == errno.EACCES  # read-only end
    os.close(r)
    os.close(w)
    a, b = socket.socketpair()  # read-write, not a file
    assert errno_of(register, dirfd, a.fileno(), 4096) == errno.EINVAL
    a.close()
    b.close()
    shm_path = f"/dev/shm/kvfs-test-{os.getpid()}"
    sf = os.open(shm_path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(sf, 4096)
    os.fchown(sf, 65534, 65534)  # another user's file: root may, but the user may not
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            os.setgid(65534)
            os.setuid(1234)
            code = errno_of(register, dirfd, sf, 4096)
        finally:
            os._exit(code)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == errno.EPERM
    os.close(sf)
    os.unlink(shm_path)

    # At most MAX_REGISTRATIONS per process.
    ids = [register(dirfd, mfd, 4096) for _ in range(MAX_REGISTRATIONS - 1)]  # + shm's
    assert errno_of(register, dirfd, mfd, 4096) == errno.EMFILE
    for i in ids:
        unregister(dirfd, i)
    os.close(mfd)

    # Another process (a fork child) using this process's ids.
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            a = errno_of(batch_ioctl, dirfd, 1, shm.id, 0)
            e = Entry(OP_STAT, "x")
            child_table = Shm(dirfd, 1 << 20)
            e2 = Entry(OP_READ, "x", shm.id, 0, 4096)
            run(dirfd, child_table, [e, e2])
            b = errno_of(unregister, dirfd, shm.id)
            code = 0 if (a, e.status, e2.status, b) == (errno.EBADF, 0, errno.EBADF,
                                                        errno.EBADF) else 1
        finally:
            os._exit(code)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == 0

    # The client shrinks its registered file: the daemon survives.
    small = Shm(dirfd, 1 << 20)
    os.ftruncate(small.mfd, 0)
    e = Entry(OP_WRITE, "shrunk", small.id, 0, 1 << 20)
    f = Entry(OP_READ, "x", small.id, 4096, 4096)
    g = Entry(OP_READ, "x", small.id, 4097, 10000)  # copied by the daemon's CPU
    h = Entry(OP_WRITE, "shrunk2", small.id, 1, 5000)
    run(dirfd, shm, [e, f, g, h])
    # The WRITE in place may also be EBUSY: the READs f and g of the same
    # batch run alongside it and land inside its source range.
    assert e.status in (0, errno.EFAULT, errno.EBUSY), e.status
    assert [x.status in (0, errno.EFAULT) for x in (f, g, h)] == [True] * 3, \
        [x.status for x in (f, g, h)]
    # Even the table in the lost pages: read as zeros (op 0: EINVAL).
    assert batch_ioctl(dirfd, 4, small.id, 0) == (0, 4, 0)
    small.mm.close()
    os.close(small.mfd)

    # Still serving.
    e = Entry(OP_READ, "x", shm.id, DATA, 10000)
    run(dirfd, shm, [e])
    assert (e.status, e.result) == (0, 10000) and shm.mm[DATA:DATA + 10000] == b"x" * 10000
    os.close(filefd)
    shm.close()


def _as_user(fn, uid=65534, gid=65534, groups=()):
    """Runs fn() in a forked child with the given credentials; returns its
    result (a JSON-able value) or raises."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            out = json.dumps(["ok", fn()])
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = json.dumps(["err", repr(e)])
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    kind, val = json.loads(data)
    assert kind == "ok", val
    return val


def test_unprivileged_caller_cannot_reach_what_open_and_unlink_refuse(vol):
    os.mkdir(vol.p("private"), 0o700)
    os.mkdir(vol.p("shared"), 0o755)
    os.mkdir(vol.p("group"), 0o770)
    os.chmod(vol.p("group"), 0o770)  # not what the umask left
    os.chown(vol.p("group"), 0, 4321)
    os.mkdir(vol.p("open"), 0o777)
    for path, mode in [("private/f", 0o644), ("shared/secret", 0o600), ("shared/public", 0o644),
                       ("group/g", 0o640), ("open/rootfile", 0o644)]:
        with open(vol.p(path), "wb") as f:
            f.write(b"s" * 5000)
        os.chmod(vol.p(path), mode)
    os.chown(vol.p("group", "g"), 0, 4321)
    os.chmod(vol.p("open"), 0o1777)  # sticky: only owners delete

    def attempt():
        fd = os.open(vol.path, os.O_RDONLY | os.O_DIRECTORY)
        shm = Shm(fd, 4 << 20)
        shm.mm[DATA:DATA + 10] = b"0123456789"
        E = Entry
        entries = [
            E(OP_STAT, "private/f"), E(OP_READ, "private/f", shm.id, DATA, 4096),
            E(OP_WRITE, "private/new", shm.id, DATA, 10), E(OP_DELETE, "private/f"),
            E(OP_PREFETCH, "private/f"),
            E(OP_STAT, "shared/secret"), E(OP_READ, "shared/secret", shm.id, DATA, 4096),
            E(OP_PREFETCH, "shared/secret"), E(OP_DELETE, "shared/secret"),
            E(OP_WRITE, "shared/secret", shm.id, DATA, 10), E(OP_WRITE, "shared/new", shm.id, DATA, 10),
            E(OP_READ, "shared/public", shm.id, 2 * DATA, 4096),
            E(OP_READ, "group/g", shm.id, 2 * DATA, 4096), E(OP_WRITE, "group/new", shm.id, DATA, 10),
            E(OP_DELETE, "open/rootfile"), E(OP_WRITE, "open/rootfile", shm.id, DATA, 10),
            E(OP_WRITE, "open/mine", shm.id, DATA, 10),
            # EXISTS needs search permission on the directories, as stat(2).
            E(OP_EXISTS, "private/f"), E(OP_EXISTS, "shared/secret"),
        ]
        run(fd, shm, entries)
        # The POSIX answers for the same accesses, for comparison.
        posix = []
        for p, flags in [("private/f", os.O_RDONLY), ("shared/secret", os.O_RDONLY),
                         ("shared/public", os.O_RDONLY), ("group/g", os.O_RDONLY)]:
            posix.append(errno_of(lambda: os.close(os.open(vol.p(p), flags))))
        return [e.status for e in entries], posix

    A, P = errno.EACCES, errno.EPERM
    statuses, posix = _as_user(attempt)
    assert posix == [A, A, 0, A]
    assert statuses == [A, A, A, A, A,
                        0, A, A, A, A, A,
                        0,
                        A, A,
                        P, P, 0,
                        A, 0], statuses
    # With the group among its supplementary groups, the same user gets in.
    statuses, posix = _as_user(attempt, groups=(4321,))
    assert posix == [A, A, 0, 0]
    assert statuses[12:14] == [0, 0]
    # Nothing was changed by the refused entries.
    for path in ["private/f", "shared/secret", "open/rootfile"]:
        with open(vol.p(path), "rb") as f:
            assert f.read() == b"s" * 5000
    assert not os.path.exists(vol.p("private", "new"))
    assert not os.path.exists(vol.p("shared", "new"))
    assert os.stat(vol.p("open", "mine")).st_uid == 65534
    assert os.stat(vol.p("group", "new")).st_gid == 65534


def test_registrations_end_with_their_fd_and_their_process(vol, dirfd):
    assert registrations(vol) == 0
    fd = os.open(vol.path, os.O_RDONLY | os.O_DIRECTORY)
    a = Shm(fd, 1 << 20)
    with open(vol.p("f"), "wb") as f:
        f.write(b"f" * 100)
    filefd = os.open(vol.p("f"), os.O_RDONLY)
    b = Shm(filefd, 1 << 20)  # REGISTER works on a file fd too
    e = Entry(OP_READ, "f", b.id, 0, 4096)
    run(dirfd, a, [e])  # used through another fd of the same process
    assert e.status == 0 and b.mm[:100] == b"f" * 100
    assert registrations(vol) == 2
    os.close(fd)  # the registering fd's last close ends `a`
    wait_for(lambda: registrations(vol) == 1, "the closed fd's registration to end")
    assert errno_of(batch_ioctl, dirfd, 1, a.id, 0) == errno.EBADF
    os.close(filefd)
    wait_for(lambda: registrations(vol) == 0, "the file fd's registration to end")
    a.close()
    b.close()

    # A process that exits without closing anything.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        shm = Shm(dirfd, 1 << 20)
        Shm(os.open(vol.path, os.O_RDONLY | os.O_DIRECTORY), 1 << 20)
        os.write(w, str(shm.id).encode())
        os._exit(0)
    os.close(w)
    assert int(os.read(r, 100)) > 0
    os.close(r)
    os.waitpid(pid, 0)
    # dirfd (shared with the child) stays open here: the exit alone ends it.
    wait_for(lambda: registrations(vol) == 0, "the exited process's registrations to end")


def test_eight_threads_issue_batches_concurrently(vol, dirfd):
    errors = []

    def worker(t):
        try:
            shm = Shm(dirfd, 8 * MiB)
            for rnd in range(10):
                entries = []
                for k in range(16):
                    data = pattern(f"{t}/{rnd}/{k}", 4096 * (k % 3 + 1) + k)
                    off = DATA + k * 4 * 4096 * 4
                    shm.mm[off:off + len(data)] = data
                    entries.append(Entry(OP_WRITE, f"t{t}-{k}", shm.id, off, len(data)))
                assert run(dirfd, shm, entries)[1] == 0
                reads = [Entry(OP_READ, e.name, shm.id, e.buf_off + 4 * 4096 * 2, e.length)
                         for e in entries]
                assert run(dirfd, shm, reads)[1] == 0
                for e, r in zip(entries, reads):
                    assert shm.mm[r.buf_off:r.buf_off + r.length] == \
                        shm.mm[e.buf_off:e.buf_off + e.length]
            shm.close()
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


WRITER = r"""
import os, sys, struct, fcntl, mmap, random
sys.path.insert(0, sys.argv[2])
from test_batch_ioctl import Shm, Entry, run, OP_WRITE, content
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
shm = Shm(fd, 80 << 20)
rnd = 0
while True:
    rnd += 1
    entries = []
    for k in range(32):
        n = f"key{k:02d}"
        data = content(n, rnd, (k + 1) * 65536 + k)
        off = (2 << 20) + k * (2 << 20)
        shm.mm[off:off + len(data)] = data
        entries.append(Entry(OP_WRITE, n, shm.id, off, len(data)))
    run(fd, shm, entries)
    print(rnd, flush=True)
"""


@functools.lru_cache(maxsize=None)
def _body(name, parity, size):
    return random.Random(f"{name}/{parity}").randbytes(size)


def content(name, version, size):
    """Version `version` of key `name`: a header naming it, then a body
    that differs between consecutive versions (so a mix of two is seen)."""
    head = f"{name} v{version} {size}\n".encode()
    return head + _body(name, version % 2, size)[:size - len(head)]


def test_daemon_killed_during_a_write_batch_leaves_each_name_absent_or_complete(workdir):
    here = os.path.dirname(os.path.abspath(__file__))
    vol = Volume(workdir, 1 * GiB)
    try:
        for rnd in range(3):
            vol.mount.start()
            writer = subprocess.Popen([sys.executable, "-c", WRITER, vol.mnt, here],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            first = writer.stdout.readline()  # a batch went through: the next is in flight
            assert first.strip() == b"1", writer.stderr.read()
            time.sleep(random.Random(rnd).uniform(0.0, 0.2))
            vol.mount.proc.send_signal(signal.SIGKILL)
            vol.mount.proc.wait(timeout=60)
            writer.wait(timeout=60)
            subprocess.run([FUSERMOUNT, "-u", "-z", vol.mnt], capture_output=True)
            vol.mount.proc = None
            if vol.mount in _live_mounts:
                _live_mounts.remove(vol.mount)
            vol.mount.log.close()
            vol.mount.start()
            for name in os.listdir(vol.mnt):
                if name == ".kvfs":
                    continue
                with open(vol.p(name), "rb") as f:
                    data = f.read()
                head = data.split(b"\n", 1)[0].decode(errors="replace").split()
                assert len(head) == 3 and head[0] == name, f"{name}: not a version"
                assert data == content(name, int(head[1][1:]), int(head[2])), \
                    f"{name}: torn ({len(data)} bytes)"
            vol.mount.stop()
    finally:
        vol.mount.kill()
