"""The control directory MOUNT/.kvfs/ (stats, metrics, drop_cache,
prefetch, sync) and the user.kvfs.prefetch hint, on a real kvfs mount."""
import errno
import json
import os
import re
import stat
import subprocess
import time

import pytest

from kvio import MiB, payload, wait_for


def expect_errno(code, fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == code, f"{fn.__name__}{args}: {e.value!r}, expected {errno.errorcode[code]}"


def put(path, data):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def get(path):
    with open(path, "rb", buffering=0) as f:
        return f.read()


def control_write(vol, name, data):
    """One write(2) to .kvfs/NAME; OSError carries the errno it returned."""
    fd = os.open(vol.p(".kvfs", name), os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)


def stats(vol):
    # Small reads: the document must be one snapshot across them all.
    chunks = []
    with open(vol.p(".kvfs", "stats"), "rb", buffering=0) as f:
        while True:
            c = f.read(100)
            if not c:
                break
            chunks.append(c)
    return json.loads(b"".join(chunks))


def device_bytes(s):
    return sum(lane["bytes"] for lane in s["lanes"].values())


def test_control_directory_lists_its_files_with_fixed_modes(vol):
    st = os.stat(vol.p(".kvfs"))
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o555
    assert sorted(os.listdir(vol.p(".kvfs"))) == ["drop_cache", "evict", "metrics", "prefetch",
                                                  "stats", "sync"]
    for name, mode in [("stats", 0o444), ("metrics", 0o444), ("drop_cache", 0o200),
                       ("prefetch", 0o200), ("sync", 0o200), ("evict", 0o200)]:
        st = os.stat(vol.p(".kvfs", name))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, name
    # The control inodes are not in the index: the root lists only user files.
    put(vol.p("a"), b"x")
    assert ".kvfs" not in os.listdir(vol.path)


def test_stats_is_json_with_ops_lanes_cache_and_space(vol):
    put(vol.p("f"), payload("f", MiB))
    assert get(vol.p("f")) == payload("f", MiB)
    s = stats(vol)
    for key in ("ops", "lanes", "cache", "space"):
        assert key in s, key
    assert s["space"]["total_bytes"] > 0
    # Loads the kernel served (passthrough) count by their opens.
    assert s["ops"]["read"]["bytes"] + s["passthrough"]["served_bytes"] >= MiB
    # "f" created and looked up: its name's answer is cached.
    assert s["name_cache"]["entries"] >= 1 and s["name_cache"]["bytes"] > 0


def test_metrics_is_prometheus_text(vol):
    assert not os.path.exists(vol.p("missing"))  # a lookup to count
    text = get(vol.p(".kvfs", "metrics")).decode()
    assert 'kvfs_op_seconds_count{op="lookup"}' in text
    assert "# TYPE kvfs_op_seconds histogram" in text


def test_stats_and_metrics_name_the_transport_the_mount_uses(vol):
    want = os.environ.get("KVFS_TRANSPORT", "")
    transport = stats(vol)["transport"]
    # The kernel sends requests through /dev/fuse until every io_uring queue
    # has registered, which the daemon does after its INIT reply: right
    # after the mount the answer may still be /dev/fuse.
    deadline = time.monotonic() + 30
    while want == "uring" and transport == "/dev/fuse" and time.monotonic() < deadline:
        time.sleep(0.05)
        transport = stats(vol)["transport"]
    text = get(vol.p(".kvfs", "metrics")).decode()
    assert "# TYPE kvfs_transport_uring gauge\n" in text
    uring = re.search(r"^kvfs_transport_uring (\d)$", text, re.M).group(1) == "1"
    # The suite runs once per transport (conftest.py); without one, auto.
    if want == "dev":
        assert transport == "/dev/fuse" and not uring
    elif want == "uring":
        assert re.fullmatch(r"io_uring \(\d+ queues x \d+ entries\)", transport) and uring, transport
    else:
        assert transport == "/dev/fuse" or (transport.startswith("io_uring (") and uring), transport
        assert uring == transport.startswith("io_uring")


def test_control_files_open_only_in_their_direction(vol):
    expect_errno(errno.EACCES, os.open, vol.p(".kvfs", "stats"), os.O_WRONLY)
    expect_errno(errno.EACCES, os.open, vol.p(".kvfs", "drop_cache"), os.O_RDONLY)


def test_drop_cache_empties_the_cache_and_data_reads_back(vol):
    data = payload("dc", 4 * MiB)
    put(vol.p("f"), data)
    control_write(vol, "sync", b"1")  # written out: the read below fills the cache
    assert get(vol.p("f")) == data
    wait_for(lambda: stats(vol)["cache"]["bytes"] > 0, "the read to fill the cache", timeout=20.0)
    # The shell way: open(O_TRUNC) then write.
    r = subprocess.run(["sh", "-c", f"echo 1 > {vol.p('.kvfs', 'drop_cache')}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert stats(vol)["cache"]["bytes"] == 0
    device = device_bytes(stats(vol))
    assert get(vol.p("f")) == data
    # It really came from the device again (by a miss or an open prefetch).
    assert device_bytes(stats(vol)) >= device + len(data)


def test_sync_control_file(vol):
    put(vol.p("f"), payload("s", MiB))
    control_write(vol, "sync", b"1\n")
    assert stats(vol)["staging"]["staged_bytes"] == 0
    vol.remount()
    assert get(vol.p("f")) == payload("s", MiB)


def test_prefetch_control_file_fills_the_cache_for_later_reads(vol):
    os.mkdir(vol.p("d"))
    files = {"a": payload("a", 2 * MiB), "d/b": payload("b", 3 * MiB)}
    for name, data in files.items():
        put(vol.p(name), data)
    control_write(vol, "drop_cache", b"1")
    before = stats(vol)["cache"]
    assert before["bytes"] == 0
    control_write(vol, "prefetch", b"a\n/d/b\n\n")
    want = before["prefetched_bytes"] + sum(len(d) for d in files.values())
    wait_for(lambda: stats(vol)["cache"]["prefetched_bytes"] >= want, "prefetch of a and d/b", timeout=20.0)
    hits = stats(vol)["cache"]["hits"]
    for name, data in files.items():
        assert get(vol.p(name)) == data
    after = stats(vol)["cache"]
    assert after["hits"] > hits
    assert after["prefetch_used_bytes"] > before["prefetch_used_bytes"]


def test_prefetch_of_a_missing_name_fails_after_trying_the_rest(vol):
    put(vol.p("a"), payload("a", MiB))
    control_write(vol, "drop_cache", b"1")
    before = stats(vol)["cache"]["prefetched_bytes"]
    expect_errno(errno.ENOENT, control_write, vol, "prefetch", b"missing\na\n")
    wait_for(lambda: stats(vol)["cache"]["prefetched_bytes"] >= before + MiB,
             "prefetch of a despite the missing name before it", timeout=20.0)
    assert get(vol.p("a")) == payload("a", MiB)


def test_prefetch_list_cut_anywhere_across_writes_names_every_file(vol):
    # `cat list > .kvfs/prefetch` writes a long list in pieces cut mid-name;
    # the last name may lack its newline (close(2) ends it).
    os.mkdir(vol.p("d"))
    names = [f"d/key-{i:03d}-" + "x" * 100 for i in range(8)]
    for i, name in enumerate(names):
        put(vol.p(name), payload(name, MiB // 4 + i))
    control_write(vol, "drop_cache", b"1")
    before = stats(vol)["cache"]["prefetched_bytes"]
    text = "\n".join(names).encode()
    fd = os.open(vol.p(".kvfs", "prefetch"), os.O_WRONLY)
    try:
        for at in range(0, len(text), 37):  # every write ends inside a name
            assert os.write(fd, text[at:at + 37]) == len(text[at:at + 37])
    finally:
        os.close(fd)
    want = before + sum(MiB // 4 + i for i in range(len(names)))
    wait_for(lambda: stats(vol)["cache"]["prefetched_bytes"] >= want,
             "prefetch of every name of a list cut across writes", timeout=20.0)
    for i, name in enumerate(names):
        assert get(vol.p(name)) == payload(name, MiB // 4 + i)

    # A last name without a newline that does not exist fails the close.
    fd = os.open(vol.p(".kvfs", "prefetch"), os.O_WRONLY)
    os.write(fd, names[0].encode() + b"\nd/miss")
    os.write(fd, b"ing")
    expect_errno(errno.ENOENT, os.close, fd)

    # A line longer than any path is refused at once; the next line still counts.
    fd = os.open(vol.p(".kvfs", "prefetch"), os.O_WRONLY)
    try:
        expect_errno(errno.ENAMETOOLONG, os.write, fd, b"y" * 5000)
        assert os.write(fd, b"y" * 100 + b"\n" + names[1].encode() + b"\n") > 0
    finally:
        os.close(fd)


def test_prefetch_xattr_on_file_and_directory(vol):
    os.mkdir(vol.p("d"))
    put(vol.p("f"), payload("f", 2 * MiB))
    put(vol.p("d", "g"), payload("g", 2 * MiB))
    control_write(vol, "drop_cache", b"1")
    before = stats(vol)["cache"]
    os.setxattr(vol.p("f"), "user.kvfs.prefetch", b"1")
    os.setxattr(vol.p("d"), "user.kvfs.prefetch", b"1")
    wait_for(lambda: stats(vol)["cache"]["prefetched_bytes"] >= before["prefetched_bytes"] + 4 * MiB,
             "prefetch through the xattr", timeout=20.0)
    hits = stats(vol)["cache"]["hits"]
    assert get(vol.p("f")) == payload("f", 2 * MiB)
    assert get(vol.p("d", "g")) == payload("g", 2 * MiB)
    assert stats(vol)["cache"]["hits"] > hits
    # A hint, not an attribute: nothing is stored; other user.kvfs.* names
    # are reserved (test_xattr.py has the attributes that are stored).
    expect_errno(errno.ENODATA, os.getxattr, vol.p("f"), "user.kvfs.prefetch")
    expect_errno(errno.EINVAL, os.setxattr, vol.p("f"), "user.kvfs.other", b"1")


def test_the_control_directory_cannot_be_changed(vol):
    expect_errno(errno.EPERM, os.open, vol.p(".kvfs", "x"), os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno(errno.EPERM, os.mkdir, vol.p(".kvfs", "d"))
    expect_errno(errno.EPERM, os.unlink, vol.p(".kvfs", "stats"))
    put(vol.p("f"), b"x")
    expect_errno(errno.EPERM, os.rename, vol.p("f"), vol.p(".kvfs", "f"))
    expect_errno(errno.EPERM, os.rename, vol.p(".kvfs", "stats"), vol.p("g"))
    expect_errno(errno.EPERM, os.chmod, vol.p(".kvfs", "stats"), 0o666)
    assert sorted(os.listdir(vol.p(".kvfs"))) == ["drop_cache", "evict", "metrics", "prefetch",
                                                  "stats", "sync"]


def test_control_files_answer_every_other_call_alone(vol):
    """Calls the control files have nothing for: no attributes, no ioctl,
    no space, no links; fsync has nothing to make durable."""
    import fcntl
    import termios
    st = vol.p(".kvfs", "stats")
    assert os.listxattr(st) == []
    expect_errno(errno.ENODATA, os.getxattr, st, "user.x")
    expect_errno(errno.EOPNOTSUPP, os.setxattr, st, "user.x", b"1")
    expect_errno(errno.ENODATA, os.removexattr, st, "user.x")
    expect_errno(errno.EPERM, os.link, st, vol.p("stats-link"))
    fd = os.open(st, os.O_RDONLY)
    try:
        os.fsync(fd)
        expect_errno(errno.ENOTTY, fcntl.ioctl, fd, termios.TCGETS, bytes(64))
    finally:
        os.close(fd)
    fd = os.open(vol.p(".kvfs", "sync"), os.O_WRONLY)
    try:
        expect_errno(errno.EPERM, os.posix_fallocate, fd, 0, 4096)
    finally:
        os.close(fd)
    d = os.open(vol.p(".kvfs"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(d)
    finally:
        os.close(d)


def test_a_user_entry_named_kvfs_cannot_be_created_in_the_root(vol):
    expect_errno(errno.EEXIST, os.mkdir, vol.p(".kvfs"))
    expect_errno(errno.EEXIST, os.open, vol.p(".kvfs"), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                 0o644)
    # Elsewhere the name is an ordinary one.
    os.mkdir(vol.p("d"))
    put(vol.p("d", ".kvfs"), b"user data")
    assert get(vol.p("d", ".kvfs")) == b"user data"
