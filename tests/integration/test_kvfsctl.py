"""kvfsctl against a real kvfs mount: each subcommand's output is checked
against what the filesystem did (op counts, statvfs, df -h, cache bytes),
and its errors and exit codes (0 ok, 1 failed, 2 usage, 3 not a kvfs
mount) against real non-kvfs directories, missing paths and a dead daemon."""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from kvio import MiB, payload, read_stats, wait_for

KVFSCTL_BIN = os.environ.get("KVFSCTL_BIN", "")

EXIT_FAILED, EXIT_USAGE, EXIT_NOT_KVFS = 1, 2, 3


@pytest.fixture(autouse=True)
def _kvfsctl_built():
    if not KVFSCTL_BIN or not os.access(KVFSCTL_BIN, os.X_OK):
        pytest.fail(f"KVFSCTL_BIN={KVFSCTL_BIN!r} must name the built kvfsctl (run through meson test)")


def ctl(*args, **kw):
    return subprocess.run([KVFSCTL_BIN, *args], capture_output=True, text=True, timeout=60, **kw)


def ok(*args):
    r = ctl(*args)
    assert r.returncode == 0, f"kvfsctl {' '.join(args)}: rc {r.returncode}: {r.stderr}"
    assert r.stderr == ""
    return r.stdout


def stats_json(vol):
    return json.loads(ok("stats", vol.path, "--json"))


def op_count(s, op):
    return s["ops"][op]["latency"]["count"]


def put(path, data):
    with open(path, "wb", buffering=0) as f:
        f.write(data)


def one_error_line(r, rc, *words):
    """rc as expected, nothing on stdout, one line on stderr with `words`."""
    assert r.returncode == rc, f"rc {r.returncode} (want {rc}): {r.stdout} {r.stderr}"
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"
    return lines[0]


def human(n):
    """df -h's rendering (coreutils: powers of 1024, rounded up, one decimal
    below 10)."""
    if n < 1024:
        return str(n)
    v, unit = n / 1024, 0
    while v >= 1024 and unit < 5:
        v, unit = v / 1024, unit + 1
    if v < 10:
        r = math.ceil(v * 10) / 10
        if r < 10:
            return f"{r:.1f}{'KMGTPE'[unit]}"
        v = r
    r = math.ceil(v)
    if r >= 1024 and unit < 5:
        return f"1.0{'KMGTPE'[unit + 1]}"
    return f"{r}{'KMGTPE'[unit]}"


def test_version_names_the_tool(vol):
    out = ok("--version")
    assert re.fullmatch(r"kvfsctl \d+\.\d+\.\d+\n", out), out


def test_stats_json_op_counts_grow_by_what_was_done(vol):
    before = stats_json(vol)
    n = 20
    for i in range(n):
        put(vol.p(f"k{i}"), payload(f"k{i}", 64 * 1024))
    for i in range(n):
        with open(vol.p(f"k{i}"), "rb", buffering=0) as f:
            assert f.read() == payload(f"k{i}", 64 * 1024)
    assert not os.path.exists(vol.p("missing"))  # one counted lookup
    after = stats_json(vol)
    assert op_count(after, "write") >= op_count(before, "write") + n
    assert after["ops"]["write"]["bytes"] >= before["ops"]["write"]["bytes"] + n * 64 * 1024
    # A load the kernel serves (passthrough) is counted by its open: read
    # ops count the reads that reached kvfs.
    def loads(s):
        return op_count(s, "read") + s["passthrough"]["served_opens"]

    def loaded(s):
        return s["ops"]["read"]["bytes"] + s["passthrough"]["served_bytes"]

    assert loads(after) >= loads(before) + n
    assert op_count(after, "open") >= op_count(before, "open") + n
    assert loaded(after) >= loaded(before) + n * 64 * 1024
    assert op_count(after, "lookup") >= op_count(before, "lookup") + 1
    assert op_count(after, "create") >= op_count(before, "create") + n
    # A connector's store ends in a rename; a delete is an unlink.
    for i in range(n):
        os.rename(vol.p(f"k{i}"), vol.p(f"key{i}"))
        os.unlink(vol.p(f"key{i}"))
    renamed = stats_json(vol)
    assert op_count(renamed, "rename") == op_count(after, "rename") + n
    assert op_count(renamed, "unlink") == op_count(after, "unlink") + n
    # The same document as the control file serves.
    direct = read_stats(vol.path)
    assert op_count(direct, "write") == op_count(after, "write")


def test_stats_table_shows_every_section_with_the_json_numbers(vol):
    for i in range(5):
        put(vol.p(f"f{i}"), payload(f"f{i}", MiB))
    ok("flush", vol.path)
    s = stats_json(vol)
    out = ok("stats", vol.path)
    lines = out.splitlines()
    assert lines[0].startswith(f"kvfs at {vol.path} ({vol.mount.image})")
    # The op table: from its header to the first blank line.
    start = next(i for i, l in enumerate(lines) if l.startswith("OP "))
    end = lines.index("", start)
    rows = {l.split()[0]: l.split() for l in lines[start:end]}
    assert rows["OP"] == ["OP", "COUNT", "BYTES", "P50", "P90", "P99", "P99.9", "MAX"]
    for op in ("lookup", "getattr", "create", "open", "read", "write", "rename", "unlink",
               "prefetch", "fsync"):
        assert int(rows[op][1]) == op_count(s, op), op
    assert rows["write"][2] == human(s["ops"]["write"]["bytes"])
    lane_head = next(l for l in lines if l.startswith("LANE "))
    assert lane_head.split()[:6] == ["LANE", "OPS", "BYTES", "IN-FLIGHT", "QUEUED", "ERRORS"]
    start = lines.index(lane_head)
    lane_rows = [l.split() for l in lines[start + 1:lines.index("", start)]]
    assert {r[0] for r in lane_rows} == set(s["lanes"])
    for r in lane_rows:
        assert int(r[1]) == s["lanes"][r[0]]["ops"], r
    dev_head = next(l for l in lines if l.startswith("DEVICE "))
    assert dev_head.split() == ["DEVICE", "OPS", "BYTES", "IN-FLIGHT", "QUEUED", "ERRORS", "P50",
                                "P99", "PATH"]
    start = lines.index(dev_head)
    dev_rows = [l.split() for l in lines[start + 1:lines.index("", start)]]
    assert [(int(r[0]), r[-1]) for r in dev_rows] == [(d["device"], d["path"])
                                                      for d in s["devices"]]
    assert dev_rows[0][-1] == vol.mount.image
    assert int(dev_rows[0][1]) == s["devices"][0]["ops"] > 0
    assert f"hits {s['cache']['hits']}, misses {s['cache']['misses']}" in out
    assert re.search(r"^prefetch  read \S+, used \S+, wasted \S+", out, re.M)
    assert re.search(r"^staging   0 staged \(dirty\) of ", out, re.M)
    space = s["space"]
    assert (f"space     {human(space['total_bytes'])} total, {human(space['free_bytes'])} free, "
            f"largest free extent {human(space['largest_free_bytes'])}") in out
    assert f"transport {s['transport']}" in lines
    assert re.search(r"^errors    none$", out, re.M)


def test_df_numbers_equal_statvfs_and_df_h(vol):
    put(vol.p("f"), payload("f", 5 * MiB))
    ok("flush", vol.path)
    sv = os.statvfs(vol.path)
    largest = stats_json(vol)["space"]["largest_free_bytes"]
    head, row, evict = ok("df", "--bytes", vol.path).splitlines()
    assert evict == "Eviction: off"
    assert head.split() == ["Filesystem", "Size", "Used", "Avail", "Use%", "Largest", "Mounted",
                            "on"]
    f = row.split()
    assert f[0] == vol.mount.image and f[-1] == vol.path
    assert int(f[1]) == sv.f_blocks * sv.f_frsize
    assert int(f[2]) == (sv.f_blocks - sv.f_bfree) * sv.f_frsize
    assert int(f[3]) == sv.f_bavail * sv.f_frsize
    assert int(f[5]) == largest
    assert 0 < largest <= sv.f_bfree * sv.f_frsize
    # Human units are coreutils df -h's, column for column.
    ours = ok("df", vol.path).splitlines()[1].split()
    theirs = subprocess.run(["df", "-h", vol.path], capture_output=True, text=True,
                            check=True).stdout.splitlines()[1].split()
    assert ours[:5] == theirs[:5]
    assert ours[5] == human(largest)


def test_df_of_several_devices_has_a_row_per_device_that_sums_to_the_volume(workdir):
    from test_devices import MultiMount
    devs = [os.path.join(workdir, f"dev{i}.img") for i in range(2)]
    for img, size in zip(devs, (64 * MiB, 128 * MiB)):
        with open(img, "wb") as f:
            f.truncate(size)
    subprocess.run([os.environ["MKFS_KVFS_BIN"], "-f", "-q", *devs], check=True)
    mnt = os.path.join(workdir, "mnt")
    os.mkdir(mnt)
    m = MultiMount(devs, mnt)
    m.start()
    try:
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(payload("f", 24 * MiB))
            os.fsync(f.fileno())
        lines = ok("df", "--bytes", mnt).splitlines()
        sv = os.statvfs(mnt)
        with open(os.path.join(mnt, ".kvfs", "stats")) as f:
            stats = json.load(f)["devices"]
        m.stop()
    finally:
        m.kill()
    assert len(lines) == 5 and lines[-1] == "Eviction: off", lines
    volume = [int(x) for x in lines[1].split()[1:4]]
    assert volume == [sv.f_blocks * sv.f_frsize, (sv.f_blocks - sv.f_bfree) * sv.f_frsize,
                      sv.f_bavail * sv.f_frsize]
    rows = [line.split() for line in lines[2:4]]
    assert [r[:2] for r in rows] == [["0:", devs[0]], ["1:", devs[1]]]
    nums = [[int(x) for x in r[2:5]] + [int(r[6])] for r in rows]
    # Size is the image after its first MiB (the superblock); used and
    # free are the daemon's figures, and the rows add up to the volume.
    assert [n[0] for n in nums] == [63 * MiB, 127 * MiB]
    assert nums == [[d["size_bytes"], d["used_bytes"], d["free_bytes"],
                     d["largest_free_bytes"]] for d in stats]
    assert [sum(col) for col in zip(*nums)][:3] == volume
    assert volume[1] == 24 * MiB
    assert all(r[5].endswith("%") for r in rows)


def test_prefetch_fills_the_cache_and_drop_cache_empties_it(make_volume):
    # prefetch=off: lookups and opens start no prefetch, so whatever reaches
    # the cache came through kvfsctl prefetch.
    v = make_volume("v", size=512 * MiB, options="prefetch=off")
    v.mount.start()
    try:
        os.mkdir(v.p("d"))
        files = {"a": payload("a", 2 * MiB), "d/b": payload("b", 3 * MiB),
                 "d/c": payload("c", MiB)}
        for name, data in files.items():
            put(v.p(name), data)
        ok("drop-cache", v.path)
        before = stats_json(v)["cache"]
        assert before["bytes"] == 0
        ok("prefetch", v.path, v.p("a"), v.p("d"))  # a file and a directory
        want = sum(len(d) for d in files.values())
        wait_for(lambda: stats_json(v)["cache"]["prefetched_bytes"] >= before["prefetched_bytes"] + want,
                 "kvfsctl prefetch of a and d/", timeout=20.0)
        # The cache counts a prefetch when it starts, the lane when its
        # device reads complete.
        wait_for(lambda: stats_json(v)["lanes"]["prefetch"]["bytes"] >= want,
                 "the prefetch lane's reads of a and d/", timeout=20.0)
        s = stats_json(v)
        assert s["cache"]["bytes"] >= want
        assert s["lanes"]["prefetch"]["bytes"] >= want
        table = ok("stats", v.path)
        assert f"holds {human(s['cache']['bytes'])} of " in table
        for name, data in files.items():
            with open(v.p(name), "rb", buffering=0) as f:
                assert f.read() == data
        assert stats_json(v)["cache"]["hits"] > s["cache"]["hits"]
        ok("drop-cache", v.path)
        after = stats_json(v)["cache"]
        assert after["bytes"] == 0 and after["entries"] == 0
        v.mount.stop()
    finally:
        v.mount.kill()


def test_prefetch_reports_each_bad_path_and_still_prefetches_the_rest(make_volume, workdir):
    v = make_volume("v", size=512 * MiB, options="prefetch=off")
    v.mount.start()
    try:
        put(v.p("a"), payload("a", 2 * MiB))
        ok("drop-cache", v.path)
        before = stats_json(v)["cache"]["prefetched_bytes"]
        r = ctl("prefetch", v.path, v.p("missing"), workdir, v.p("a"), v.p(".kvfs", "stats"))
        assert r.returncode == EXIT_FAILED, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 3, r.stderr
        assert v.p("missing") in lines[0] and "No such file or directory" in lines[0]
        assert f"{workdir} is outside the kvfs mount {v.path}" in lines[1]
        assert v.p(".kvfs", "stats") in lines[2] and "control directory" in lines[2]
        wait_for(lambda: stats_json(v)["cache"]["prefetched_bytes"] >= before + 2 * MiB,
                 "prefetch of a despite the bad paths around it", timeout=20.0)
        v.mount.stop()
    finally:
        v.mount.kill()


def test_flush_writes_out_staged_data(vol):
    # The writer is another process: every close(2) of a descriptor of the
    # file flushes it, and so would the closing of the copies a fork (of
    # kvfsctl) makes of this process's descriptors.
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys\n"
         "fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)\n"
         "os.write(fd, bytes(range(256)) * 400)\n"  # 100 KiB: under a chunk, stays staged
         "print('written', flush=True)\n"
         "sys.stdin.readline()\n"
         "os.close(fd)\n", vol.p("f")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "written\n"
        assert read_stats(vol.path)["staging"]["staged_bytes"] > 0
        ok("flush", vol.path)
        assert read_stats(vol.path)["staging"]["staged_bytes"] == 0
    finally:
        writer.stdin.close()
        assert writer.wait(timeout=30) == 0
    vol.remount()
    with open(vol.p("f"), "rb") as f:
        assert f.read() == bytes(range(256)) * 400


def test_not_a_kvfs_mount_is_one_line_and_exit_3(vol, workdir):
    # An ordinary directory, another filesystem's mount point, a directory
    # inside the kvfs mount, a missing path, a file.
    for sub in (["stats"], ["df"], ["drop-cache"], ["flush"], ["prefetch"]):
        extra = [vol.p("x")] if sub == ["prefetch"] else []
        one_error_line(ctl(*sub, workdir, *extra), EXIT_NOT_KVFS,
                       f"{workdir} is not a kvfs mount: not a mount point")
    one_error_line(ctl("stats", "/"), EXIT_NOT_KVFS, "/ is not a kvfs mount",
                   "/proc/self/mountinfo", "not fuse.kvfs")
    os.mkdir(vol.p("d"))
    one_error_line(ctl("stats", vol.p("d")), EXIT_NOT_KVFS,
                   f"inside the kvfs mount at {vol.path}")
    one_error_line(ctl("df", os.path.join(workdir, "nope")), EXIT_NOT_KVFS,
                   "nope: No such file or directory")
    put(vol.p("f"), b"x")
    one_error_line(ctl("stats", vol.p("f")), EXIT_NOT_KVFS, "Not a directory")


def test_usage_errors_exit_2(vol):
    for args in ([], ["stats"], ["nosuch", vol.path], ["stats", vol.path, "--watch", "0"],
                 ["prefetch", vol.path], ["df", vol.path, "--bogus"]):
        r = ctl(*args)
        assert r.returncode == EXIT_USAGE, (args, r.returncode, r.stderr)
        assert r.stderr, args


def test_a_mount_whose_daemon_died_is_reported(make_volume):
    v = make_volume("v")
    v.mount.start()
    try:
        v.mount.proc.kill()
        v.mount.proc.wait()
        # ENOTCONN; on the io_uring transport a request that reaches the
        # rings while the kernel tears them down is ended with ECONNABORTED.
        line = one_error_line(ctl("stats", v.path), EXIT_NOT_KVFS)
        assert ("Transport endpoint is not connected" in line
                or "Software caused connection abort" in line), line
    finally:
        v.mount.kill()


def test_control_actions_need_root(vol):
    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)

    r = ctl("drop-cache", vol.path, preexec_fn=as_nobody)
    one_error_line(r, EXIT_FAILED, "drop_cache", "needs root", "Permission denied")
    # Reading is for everyone.
    r = ctl("stats", vol.path, "--json", preexec_fn=as_nobody)
    assert r.returncode == 0, r.stderr
    assert "ops" in json.loads(r.stdout)


def read_refreshes(proc, n, out="", timeout=20.0):
    """Reads proc's stdout, after `out` read before, until `n` tables (each
    starting "kvfs at", ending with the errors line) are complete."""
    out = out.encode()
    deadline = time.monotonic() + timeout
    os.set_blocking(proc.stdout.fileno(), False)
    while out.count(b"\nerrors ") < n:
        if time.monotonic() > deadline:
            pytest.fail(f"{n} refreshes not seen in {timeout} s: {out!r}")
        chunk = proc.stdout.read()
        if chunk:
            out += chunk
        time.sleep(0.02)
    return out.decode()


def op_row(table, op):
    """The op table's row for `op`, split."""
    return next(l.split() for l in table.splitlines() if l.split()[:1] == [op])


def test_watch_refreshes_with_rates_until_sigint(vol):
    proc = subprocess.Popen([KVFSCTL_BIN, "stats", vol.path, "--watch", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = read_refreshes(proc, 1)
        # Writes between the first refresh and the next ones.
        put(vol.p("f"), payload("f", 4 * MiB))
        out = read_refreshes(proc, 3, out)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0
    assert proc.stderr.read() == b""
    tables = out.split("kvfs at ")[1:]
    assert len(tables) >= 3
    # Into a pipe: tables one after another (no terminal escapes); the first
    # has no rates, the later ones have per-second columns.
    assert "\033" not in out
    assert "OPS/S" not in tables[0]
    assert all("OPS/S" in t and "BYTES/S" in t for t in tables[1:])
    # A rate is the count's growth over the time between refreshes (~0.3 s).
    for a, b in zip(tables[1:], tables[2:]):
        grown = int(op_row(b, "write")[1]) - int(op_row(a, "write")[1])
        rate = op_row(b, "write")[2]
        if grown == 0:
            assert rate == "0"
        else:
            assert 0.1 < grown / float(rate) < 3.0, (grown, rate)
    assert int(op_row(tables[-1], "write")[1]) > int(op_row(tables[0], "write")[1])


def test_watch_json_prints_one_document_per_refresh(vol):
    proc = subprocess.Popen([KVFSCTL_BIN, "stats", vol.path, "--json", "--watch=0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        lines = []
        while len(lines) < 3 and time.monotonic() < deadline:
            lines.append(proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    docs = [json.loads(l) for l in lines]
    assert len(docs) == 3 and all("ops" in d and "space" in d for d in docs)
