"""The Python module `kvfs` (python/kvfs) against a real mount: round trips
for every op, 32 keys in one call, mixed hits and misses, per-key errors in
input order, registered (in place) and plain (kernel-copied) memory, numpy
arrays, threads."""
import errno
import os
import sys
import threading

import pytest

from kvio import payload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import kvfs  # noqa: E402
from kvfs import abi  # noqa: E402

try:
    import numpy
except ImportError:  # numpy is optional: only its tests are skipped
    numpy = None

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def client(vol):
    c = kvfs.Client(vol.path)
    yield c
    c.close()


def count_calls(c):
    """Wraps c._submit to count KVFS_IOC_BATCH calls (entries per call);
    returns the counter."""
    calls = []
    real = c._submit

    def counting(table, names):
        calls.append(memoryview(table).nbytes // 64)
        return real(table, names)

    c._submit = counting
    return calls


def test_abi_constants_match_the_c_header():
    # tests/client/abi_test.cc pins the C side to the same literals.
    assert (abi.IOC_REGISTER, abi.IOC_UNREGISTER, abi.IOC_BATCH, abi.IOC_FEATURES) == \
        (0xC020B701, 0x4010B702, 0xC030B703, 0xC040B704)
    assert abi.ENTRY.size == 64 and abi.BATCH_ARGS.size == 48 and abi.FEATURES_ARGS.size == 64
    assert abi.OPS_BASE == 0x3E
    assert abi.ENTRY.pack(1, 2, 3, 4, 5, 6, 7, -8, 9, 10)[48:52] == (-8).to_bytes(4, sys.byteorder,
                                                                                    signed=True)


def test_outside_kvfs_the_call_raises_enotty(workdir):
    with kvfs.Client(workdir) as c:
        with pytest.raises(OSError) as e:
            c.stat_batch(["x"])
        assert e.value.errno == errno.ENOTTY
        with pytest.raises(OSError) as e:
            c.register(4096)
        assert e.value.errno == errno.ENOTTY


def test_write_read_stat_prefetch_delete_round_trip(vol, client):
    sizes = [1, 1000, 4096, 4097, 256 * KiB, 4 * MiB + 5]
    names = [f"k{i}" for i in range(len(sizes))]
    data = [payload(("rt", i), n) for i, n in enumerate(sizes)]
    # Sources of every kind: bytes, bytearray, memoryview slice, Buffer view.
    src = client.register(8 * MiB)
    src.view(0, sizes[5])[:] = data[5]
    items = [(names[0], data[0]), (names[1], bytearray(data[1])),
             (names[2], memoryview(b"xx" + data[2])[2:]), (names[3], data[3]),
             (names[4], bytearray(data[4])), (names[5], src.view(0, sizes[5]))]
    res = client.write_batch(items)
    assert [r.status for r in res] == [0] * 6
    assert [r.value for r in res] == sizes
    assert [r.name for r in res] == names
    for name, d in zip(names, data):
        with open(vol.p(name), "rb") as f:
            assert f.read() == d, name

    st = client.stat_batch(names + ["nope"])
    assert [r.value for r in st] == sizes + [0]
    assert [r.status for r in st] == [0] * 6 + [errno.ENOENT]
    assert client.exists_batch(["nope", names[2]]) == [False, True]

    # Into a registered Buffer, split in slots (in place).
    dst = client.register(6 * 8 * MiB)
    res = client.read_batch(names, dst, size=8 * MiB)
    assert [r.value for r in res] == sizes
    for i, d in enumerate(data):
        assert bytes(dst.view(i * 8 * MiB, sizes[i])) == d, names[i]
    # Into plain memory (the daemon's process_vm path), bigger than the files.
    plain = [bytearray(n + 100) for n in sizes]
    res = client.read_batch(names, plain)
    assert [r.value for r in res] == sizes
    for i, d in enumerate(data):
        assert bytes(plain[i][:sizes[i]]) == d and plain[i][sizes[i]:] == bytes(100), names[i]
    # Views of the Buffer at unaligned offsets, with a file offset.
    views = [dst.view(1 + i * 8 * MiB, 777) for i in range(6)]
    res = client.read_batch(names, views, file_offset=3)
    for i, d in enumerate(data):
        assert res[i].value == len(d[3:3 + 777]), names[i]
        assert bytes(views[i][:res[i].value]) == d[3:3 + 777], names[i]

    pf = client.prefetch(names + ["nope"])
    assert [r.status for r in pf] == [0] * 6 + [errno.ENOENT]

    de = client.delete_batch(["nope"] + names)
    assert [r.status for r in de] == [errno.ENOENT] + [0] * 6
    assert not any(os.path.exists(vol.p(n)) for n in names)
    assert client.exists_batch(names) == [False] * 6
    del views
    src.close()
    dst.close()


def kernel_page_kib(address):
    """KernelPageSize (KiB) of this process's mapping that holds `address`."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("KernelPageSize:"):
                return int(line.split()[1])
    raise AssertionError(f"no mapping holds {address:#x}")


def test_buffers_take_reserved_huge_pages_and_move_bytes_exactly(vol, client, huge_pages):
    # With huge pages reserved, a buffer whose size is a multiple of 2 MiB
    # is made of them (faster device I/O); others keep 4 KiB pages.
    huge = client.register(4 * MiB)
    small = client.register(256 * KiB)
    assert kernel_page_kib(huge.address) == 2048
    assert kernel_page_kib(small.address) == 4
    names = [f"hp-{i}" for i in range(4)]
    for i in range(4):
        huge.view(i * MiB, MiB)[:] = payload(("hp", i), MiB)
    res = client.write_batch([(names[i], huge.view(i * MiB, MiB)) for i in range(4)])
    assert all(r.ok for r in res), res
    huge.view()[:] = b"\0" * (4 * MiB)
    res = client.read_batch(names, huge, size=MiB)
    assert [r.value for r in res] == [MiB] * 4
    for i in range(4):
        assert bytes(huge.view(i * MiB, MiB)) == payload(("hp", i), MiB), i
        with open(vol.p(names[i]), "rb") as f:
            assert f.read() == payload(("hp", i), MiB), i
    huge.close()  # before the fixture gives the pages back
    small.close()


def test_exists_batch_takes_every_kind_of_name(vol, client):
    # ASCII str names take a packing path of their own; non-ASCII str,
    # undecodable bytes (surrogateescape), bytes and path-likes the other.
    import pathlib
    odd = os.fsdecode(b"raw-\xff-name")
    for name in ("plain", "caf\u00e9-\u2603", odd, "deep"):
        with open(os.path.join(os.fsencode(vol.path), os.fsencode(name)), "wb") as f:
            f.write(b"x")
    asks = ["plain", "missing", "caf\u00e9-\u2603", "caf\u00e9-missing", odd,
            b"raw-\xff-name", pathlib.PurePath("deep"), b"plain", "x" * 256, "a\0b"]
    assert client.exists_batch(asks) == [True, False, True, False, True, True, True, True,
                                         False, False]
    assert client.exists_batch(["plain", "missing"]) == [True, False]  # all ASCII
    st = client.stat_batch(["x" * 256, "a\0b"])
    assert [r.status for r in st] == [errno.ENAMETOOLONG, errno.EINVAL]


def test_features_name_the_abi_version_and_every_op(vol, client):
    version, ops = client.features()
    assert version == abi.ABI_VERSION
    assert ops == abi.OPS_BASE | abi.op_bit(abi.OP_EXISTS)
    assert client.supports(abi.OP_EXISTS) and not client.supports(abi.OP_EXISTS + 1)
    # An op the daemon does not run fails its entry alone.
    res = client.batch([kvfs.Entry(abi.OP_EXISTS + 1, "x"), kvfs.Entry(abi.OP_STAT, "x")])
    assert [r.status for r in res] == [errno.EINVAL, errno.ENOENT]


@pytest.mark.parametrize("answer", [errno.ENOTTY, errno.EINVAL])
def test_exists_batch_asks_stat_of_a_daemon_without_features(vol, client, monkeypatch, answer):
    # A daemon that predates KVFS_IOC_FEATURES fails it (ENOTTY; EINVAL from
    # one that checks the size): it runs the base ops, so EXISTS is asked
    # as STAT. Its answer to FEATURES is stood in for here.
    for name in ("a", "c"):
        with open(vol.p(name), "wb") as f:
            f.write(b"x")
    real_ioctl = kvfs.client._ioctl
    features_calls = []

    def older_daemon(fd, request, args):
        if request == abi.IOC_FEATURES:
            features_calls.append(fd)
            raise OSError(answer, os.strerror(answer))
        return real_ioctl(fd, request, args)

    monkeypatch.setattr(kvfs.client, "_ioctl", older_daemon)
    ops = []
    real = client._call_names

    def recording(op, names):
        ops.append(op)
        return real(op, names)

    client._call_names = recording
    assert client.features() == (1, abi.OPS_BASE)
    assert client.exists_batch(["a", "b", "c"]) == [True, False, True]
    assert client.exists_batch(["b", "c"]) == [False, True]
    assert ops == [abi.OP_STAT, abi.OP_STAT]
    assert len(features_calls) == 1  # asked once per Client


def test_features_outside_kvfs_are_the_base_set_and_batches_still_raise(workdir):
    with kvfs.Client(workdir) as c:
        assert c.features() == (1, abi.OPS_BASE)
        with pytest.raises(OSError) as e:
            c.exists_batch(["x"])
        assert e.value.errno == errno.ENOTTY


def test_32_keys_in_one_call_with_mixed_hits_and_misses(vol, client):
    key = 256 * KiB
    names = [f"layer0/chunk-{i:02d}" for i in range(32)]
    os.mkdir(vol.p("layer0"))
    present = [i % 4 != 3 for i in range(32)]
    for i, name in enumerate(names):
        if present[i]:
            with open(vol.p(name), "wb") as f:
                f.write(payload(("mix", i), key))
    buf = client.register(32 * key)
    calls = count_calls(client)
    res = client.read_batch(names, buf, size=key)
    assert calls == [32]
    assert [r.name for r in res] == names
    for i, r in enumerate(res):
        if present[i]:
            assert r.ok and r.error is None and r.unwrap() == key, (i, r)
            assert bytes(buf.view(i * key, key)) == payload(("mix", i), key), i
        else:
            assert r.status == errno.ENOENT and r.value == 0, (i, r)
            assert isinstance(r.error, OSError) and r.error.errno == errno.ENOENT
            assert r.error.filename == names[i]
            with pytest.raises(FileNotFoundError):
                r.unwrap()
    assert client.exists_batch(names) == present
    assert calls == [32, 32]
    buf.close()


def test_write_batch_then_read_batch_in_plain_memory(client):
    items = {f"w{i}": payload(("w", i), 64 * KiB + i) for i in range(16)}
    res = client.write_batch(items)
    assert all(r.ok for r in res) and [r.name for r in res] == list(items)
    dests = [bytearray(len(v)) for v in items.values()]
    res = client.read_batch(list(items), dests)
    assert [r.value for r in res] == [len(v) for v in items.values()]
    assert [bytes(d) for d in dests] == list(items.values())
    # Replace: the new bytes, never a mix.
    res = client.write_batch([("w0", b"short")])
    assert res[0].value == 5
    out = [bytearray(100)]
    assert client.read_batch(["w0"], out)[0].value == 5 and out[0][:5] == b"short"


def test_per_key_errors_come_back_in_input_order(vol, client):
    os.mkdir(vol.p("d"))
    with open(vol.p("f"), "wb") as f:
        f.write(b"data")
    cases = [
        ("f", 0),
        ("missing", errno.ENOENT),
        ("/f", errno.EXDEV),             # absolute
        ("../f", errno.EXDEV),           # escapes the directory
        ("d/../f", errno.EXDEV),
        ("", errno.EINVAL),              # empty name
        ("d//f", errno.EINVAL),          # empty component
        ("n" * 256, errno.ENAMETOOLONG),  # component of 256 bytes
        ("f/x", errno.ENOTDIR),
        ("d", errno.EISDIR),
        ("f", 0),
    ]
    out = [bytearray(16) for _ in cases]
    res = client.read_batch([n for n, _ in cases], out)
    assert [(r.name, r.status) for r in res] == cases
    assert out[0][:4] == b"data" and out[-1][:4] == b"data"
    st = client.stat_batch([n for n, _ in cases if n != "d"])
    assert [r.status for r in st] == [e for n, e in cases if n != "d"]


def test_raw_entries_with_bad_memory_fail_alone(client):
    client.write_batch([("f", b"x" * 8192)])
    buf = client.register(8192)
    E = kvfs.Entry
    res = client.batch([
        E(abi.OP_READ, "f", buf.id, 0, 8192),
        E(abi.OP_READ, "f", buf.id, 4096, 8192),     # runs past the registration
        E(abi.OP_READ, "f", buf.id + 1000, 0, 4096),  # not a registration
        E(abi.OP_READ, "f", buf.id, 0, 0),           # READ of length 0
        E(99, "f"),                                   # unknown op
        E(abi.OP_STAT, "f", flags=1),                 # reserved flags
        E(abi.OP_STAT, "f"),
    ])
    assert [r.status for r in res] == [0, errno.EFAULT, errno.EBADF, errno.EINVAL,
                                       errno.EINVAL, errno.EINVAL, 0]
    assert res[0].value == 8192 and res[-1].value == 8192
    buf.close()


def test_a_closed_buffer_is_unregistered(client):
    client.write_batch([("f", b"y" * 4096)])
    buf = client.register(4096)
    old = buf.id
    buf.close()
    assert buf.closed and buf.id == 0
    res = client.batch([kvfs.Entry(abi.OP_READ, "f", old, 0, 4096)])
    assert res[0].status == errno.EBADF


def test_more_than_the_entry_limit_runs_in_several_calls_in_order(client):
    client.write_batch([(f"e{i}", b"z" * (i + 1)) for i in range(0, 5000, 7)])
    names = [f"e{i}" for i in range(5000)]
    calls = count_calls(client)
    res = client.stat_batch(names)
    assert calls == [abi.BATCH_MAX_ENTRIES, 5000 - abi.BATCH_MAX_ENTRIES]
    assert [r.value for r in res] == [i + 1 if i % 7 == 0 else 0 for i in range(5000)]
    assert [r.status for r in res] == [0 if i % 7 == 0 else errno.ENOENT for i in range(5000)]


def test_destinations_are_checked_before_the_call(client):
    with pytest.raises(BufferError):
        client.read_batch(["f"], [b"read-only"])
    with pytest.raises(ValueError):
        client.read_batch(["a", "b"], [bytearray(1)])
    with pytest.raises(TypeError):
        client.read_batch(["a"], bytearray(10))  # one buffer, not one per name
    buf = client.register(4096)
    with pytest.raises(ValueError):
        client.read_batch(["a", "b"], buf)  # two slots do not fit one page
    with pytest.raises(ValueError):
        buf.view(4000, 200)
    buf.close()
    with pytest.raises(ValueError):
        buf.view()


@pytest.mark.skipif(numpy is None, reason="numpy not installed")
def test_numpy_arrays_round_trip_registered_and_plain(client):
    n, shape = 8, (256, 1024)  # 8 x 512 KiB of float16
    arrays = [numpy.random.default_rng(i).standard_normal(shape).astype(numpy.float16)
              for i in range(n)]
    names = [f"np/{i}" for i in range(n)]
    os.mkdir(os.path.join(client.path, "np"))
    assert all(r.ok for r in client.write_batch(zip(names, arrays)))
    # Plain numpy arrays (the kernel copies).
    out = [numpy.empty(shape, numpy.float16) for _ in range(n)]
    assert [r.value for r in client.read_batch(names, out)] == [a.nbytes for a in arrays]
    assert all(numpy.array_equal(a, b) for a, b in zip(arrays, out))
    # Arrays over a registered Buffer (in place, no copy).
    buf = client.register(n * arrays[0].nbytes)
    slab = numpy.frombuffer(buf.view(), dtype=numpy.float16).reshape(n, *shape)
    res = client.read_batch(names, list(slab))
    assert all(r.ok for r in res)
    assert all(numpy.array_equal(arrays[i], slab[i]) for i in range(n))
    # And written back from the slab.
    slab[0] += 1
    assert client.write_batch([("np/0", slab[0])])[0].ok
    with open(os.path.join(client.path, "np/0"), "rb") as f:
        assert f.read() == slab[0].tobytes()
    with pytest.raises(ValueError):
        client.read_batch(["np/1"], [out[1][:, ::2]])  # not contiguous
    del slab, res
    buf.close()


def test_eight_threads_share_one_client(client):
    errors = []

    def worker(t):
        try:
            for rnd in range(4):
                items = [(f"t{t}-{k}", payload((t, rnd, k), 32 * KiB)) for k in range(16)]
                assert all(r.ok for r in client.write_batch(items))
                dests = [bytearray(32 * KiB) for _ in items]
                res = client.read_batch([n for n, _ in items], dests)
                assert all(r.value == 32 * KiB for r in res)
                assert [bytes(d) for d in dests] == [d for _, d in items]
        except Exception as e:  # reported below, with the thread
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_a_fork_child_gets_its_own_tables_and_not_the_parents_buffers(client):
    client.write_batch([("f", b"q" * 4096)])
    buf = client.register(4096)
    client.read_batch(["f"], buf)  # the parent's table exists before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report (plain-memory status, parent-buffer status)
        code = 1
        try:
            os.close(r)
            plain = [bytearray(4096)]
            a = client.read_batch(["f"], plain)[0]
            b = client.read_batch(["f"], buf)[0]
            os.write(w, f"{a.status} {a.value} {bytes(plain[0]) == b'q' * 4096} {b.status}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        report = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == f"0 4096 True {errno.EBADF}"
    assert client.read_batch(["f"], buf)[0].value == 4096  # the parent's still work
    buf.close()
