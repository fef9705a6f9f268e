"""Lanes, RAM cache and memory bounds on a real mount (issue 5).

- A foreground read overtakes write-behind already queued: the read of a key
  issued while a gigabyte of stores is still being written out completes
  before they are.
- The RAM cache never serves an older or torn version: readers race writers
  that replace the same names (tmp + rename, as connectors do) and unlinks.
- The daemon's memory stays within cache + staging bounds plus a fixed
  overhead while it reads many times the cache size.
"""
import errno
import os
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import GiB, MiB
from kvio import payload, read_file, read_stats, write_file


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def test_read_overtakes_queued_write_behind(make_volume):
    """A read of a key issued behind a gigabyte of write-behind completes
    while writes queued before it are still not on the device: it went
    ahead of them. Only the order is asserted, not how much was queued or
    how fast anything went."""
    # Staging holds the whole burst, so write() returns at memory speed and
    # the burst sits queued on the write lane, one command in flight
    # (lane_write=1); the device is shaped to 100 MB/s, so that writing the
    # burst out takes ~10 s, while a read that goes first needs its own
    # 16 MiB and the one write command ahead of each of its reads.
    v = make_volume("burst", size=4 * GiB, options="dirty_mb=1280,lane_write=1,shape=80:100")
    v.mount.start()
    key = payload("restore-key", 16 * MiB)
    write_file(v.p("key"), key, fsync=True)
    with open(v.p(".kvfs", "drop_cache"), "w") as f:
        f.write("1")

    chunk = payload("burst", 16 * MiB)
    fds = [os.open(v.p(f"burst{i}"), os.O_WRONLY | os.O_CREAT, 0o644) for i in range(8)]
    try:
        for i in range(GiB // len(chunk)):
            os.write(fds[i % len(fds)], chunk)
        for fd in fds:
            os.close(fd)  # close starts writing out the file's staged tail
        fds = []
        got = read_file(v.p("key"))
        # Staged bytes are written to kvfs and not yet to the device; none
        # were added since the burst: what is left was queued before the
        # read and completes after it.
        left = read_stats(v.path)["staging"]["staged_bytes"]
        with open(v.p(".kvfs", "sync"), "w") as f:  # returns once all is on the device
            f.write("1")
    finally:
        for fd in fds:
            os.close(fd)
    assert got == key
    assert left > 0, "the read waited for every write queued before it"
    assert read_stats(v.path)["staging"]["staged_bytes"] == 0


def race(targets, seconds, stop):
    """Runs fn(*args) for each (fn, args) in a thread of its own for
    `seconds`, then sets `stop` and waits for them."""
    threads = [threading.Thread(target=fn, args=args) for fn, args in targets]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)


def test_cache_never_serves_an_old_or_torn_version(vol):
    """Writers replace four names (tmp + rename) and unlink them; readers
    stat and read them in a loop. Every read is exactly one version: its
    header names the key and version, the rest is that version's bytes."""
    names = [f"k{i}" for i in range(4)]
    stop = threading.Event()
    errors = []
    reads = [0]
    stale = [0]

    def version_bytes(name, version):
        size = (64 + (version * 37) % 3000) * 1024  # sizes vary by version
        body = payload((name, version), size - 16)
        return struct.pack("<QQ", version, size) + body

    def writer(w):
        version = w
        try:
            while not stop.is_set():
                version += 2  # writer 0 even versions, writer 1 odd
                name = names[version % len(names)]
                tmp = vol.p(f"{name}.w{w}.tmp")
                write_file(tmp, version_bytes(name, version))
                os.rename(tmp, vol.p(name))
                if version % 7 == 0:
                    try:
                        os.unlink(vol.p(names[(version + 1) % len(names)]))
                    except FileNotFoundError:
                        pass
        except Exception as e:  # noqa: BLE001 -- reported by the test
            errors.append(f"writer {w}: {e!r}")

    def reader(r):
        i = r
        try:
            while not stop.is_set():
                i += 1
                name = names[i % len(names)]
                try:
                    os.stat(vol.p(name))  # lookup-driven prefetch
                    data = read_file(vol.p(name))
                except FileNotFoundError:
                    continue
                except OSError as e:
                    # The name was replaced between the kernel's lookup and
                    # open, twice (the kernel retries once): README
                    # "Semantics". Rare, or it is a bug (checked below).
                    if e.errno != errno.ESTALE:
                        raise
                    stale[0] += 1
                    continue
                version, size = struct.unpack("<QQ", data[:16])
                if len(data) != size or data != version_bytes(name, version):
                    errors.append(f"reader {r}: {name} version {version}: {len(data)} bytes, "
                                  f"header says {size}, content differs")
                    return
                reads[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"reader {r}: {e!r}")

    race([(writer, (w,)) for w in range(2)] + [(reader, (r,)) for r in range(3)], 8, stop)
    assert not errors, errors[:5]
    assert stale[0] <= max(1, reads[0] // 100), (stale[0], reads[0])
    assert reads[0] > 50, reads[0]
    assert read_stats(vol.path)["cache"]["hits"] > 0


def test_cache_never_serves_bytes_older_than_a_finished_truncate_or_overwrite(vol):
    """One file changed in place while readers stat (prefetch) and read it:
    open(O_TRUNC) + write, truncate to 0 + write, and an overwrite from
    offset 0 that then cuts the old tail with ftruncate. A read that starts
    after a change finished never returns an older version (in-place
    changes are not atomic, so a read racing one may be torn; it must still
    not be older)."""
    path = vol.p("t")
    finished = [0]  # the last version whose change has returned
    stop = threading.Event()
    errors = []
    checked = [0]

    def version_bytes(version):
        size = (48 + (version * 53) % 2500) * 1024
        return struct.pack("<QQ", version, size) + payload(("t", version), size - 16)

    def writer():
        try:
            for version in range(1, 1 << 30):
                if stop.is_set():
                    return
                data = version_bytes(version)
                how = version % 3
                if how == 0:
                    write_file(path, data)  # O_TRUNC, one write
                else:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                    try:
                        if how == 1:
                            os.ftruncate(fd, 0)
                        assert os.pwrite(fd, data, 0) == len(data)
                        if how == 2:
                            os.ftruncate(fd, len(data))  # the old tail goes
                    finally:
                        os.close(fd)
                finished[0] = version
        except Exception as e:  # noqa: BLE001 -- reported by the test
            errors.append(f"writer: {e!r}")

    def reader(r):
        try:
            while not stop.is_set():
                floor = finished[0]
                if floor == 0:
                    continue
                os.stat(path)  # lookup/getattr-driven prefetch
                data = read_file(path)
                if len(data) < 16:
                    continue  # between a truncate and its write
                version, size = struct.unpack("<QQ", data[:16])
                if version < floor:
                    errors.append(f"reader {r}: version {version} after {floor} had finished")
                    return
                if len(data) == size and data == version_bytes(version):
                    checked[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"reader {r}: {e!r}")

    race([(writer, ())] + [(reader, (r,)) for r in range(3)], 5, stop)
    assert not errors, errors[:5]
    assert finished[0] > 20 and checked[0] > 20, (finished[0], checked[0])


@pytest.mark.skipif(os.environ.get("KVFS_SANITIZE", "none") not in ("", "none"),
                    reason="ASan's shadow memory and quarantine make RSS meaningless")
def test_daemon_memory_stays_within_cache_and_staging_bounds(make_volume):
    cache_mb, dirty_mb = 64, 64
    v = make_volume("mem", size=2 * GiB, options=f"cache_mb={cache_mb},dirty_mb={dirty_mb}")
    v.mount.start()
    pid = v.mount.proc.pid
    base_kib = vm_kib(pid, "VmRSS")
    files = 32
    size = 16 * MiB  # 512 MiB in all: eight times the cache
    for i in range(files):
        write_file(v.p(f"f{i}"), payload(("mem", i), size))
    for rnd in range(2):
        with open(v.p(".kvfs", "drop_cache"), "w") as f:
            f.write("1")
        for i in range(files):
            os.stat(v.p(f"f{i}"))  # lookup prefetch competes for the cache too
        for i in range(files):
            assert read_file(v.p(f"f{i}")) == payload(("mem", i), size), (rnd, i)
    s = read_stats(v.path)
    assert s["cache"]["bytes"] <= cache_mb * MiB, s["cache"]
    peak_kib = vm_kib(pid, "VmHWM")
    # The bound is absolute, not on top of the RSS at mount: by then the
    # staging pool is faulted in and the cache's first piece (64 MiB, all of
    # this cache) is being registered, so "start + cache + staging" would
    # count both twice and pass a cache twice its size. Fixed overhead:
    # RocksDB, thread stacks, libraries, FUSE buffers, allocator slack
    # (~21 MiB idle on the dev VM, where the peak here was 154 MiB).
    overhead_mb = 64
    limit_kib = (cache_mb + dirty_mb + overhead_mb) * 1024
    assert peak_kib <= limit_kib, (
        f"daemon peak RSS {peak_kib // 1024} MiB (at mount {base_kib // 1024} MiB) > cache "
        f"{cache_mb} + staging {dirty_mb} + overhead {overhead_mb} MiB")


def test_serial_loads_in_store_order_read_ahead_of_the_loop(vol):
    """A connector loads a request's keys one at a time, in the order it
    stored them (consecutive inodes). After two such loads kvfs prefetches
    the next keys (inode-order readahead, 8 files ahead), so the device
    works ahead of the serial loop; a key replaced after it was read ahead
    still loads its new bytes."""
    keys = [f"chunk-{i:03d}" for i in range(12)]
    data = {k: payload(k, MiB) for k in keys}
    for k in keys:  # LMCache's store: tmp, one write, close, rename
        write_file(vol.p(k + ".tmp"), data[k])
        os.rename(vol.p(k + ".tmp"), vol.p(k))
    with open(vol.p(".kvfs", "drop_cache"), "w") as f:
        f.write("1")
    before = read_stats(vol.path)["cache"]["prefetched_bytes"]
    for k in keys[:2]:
        assert read_file(vol.p(k)) == data[k]
    # The two loads' own files plus the 8 after them, before they are opened.
    want = before + 10 * MiB
    deadline = time.monotonic() + 20
    while read_stats(vol.path)["cache"]["prefetched_bytes"] < want:
        assert time.monotonic() < deadline, read_stats(vol.path)["cache"]
        time.sleep(0.01)
    data[keys[5]] = payload("replaced", MiB + 5)
    write_file(vol.p(keys[5] + ".tmp"), data[keys[5]])
    os.rename(vol.p(keys[5] + ".tmp"), vol.p(keys[5]))
    used = read_stats(vol.path)["cache"]["prefetch_used_bytes"]
    for k in keys[2:]:
        assert read_file(vol.p(k)) == data[k], k
    assert read_stats(vol.path)["cache"]["prefetch_used_bytes"] >= used + 7 * MiB


def test_load_of_a_key_whose_prefetch_is_still_queued_promotes_it(make_volume):
    """Prefetches queued for a batch of keys (by its lookups, or here by
    the control file, which queues them before its write returns) go to the
    device one file at a time (lane_prefetch=1). A load of the last key does
    not wait for all the others: its queued prefetch moves to the read
    lane. The device is shaped slow (20 ms a command): the prefetches
    ahead of the last key's take seconds, not the milliseconds in which a
    page-cached image would serve them, so the load finds it still queued
    (checked, not assumed) however loaded the machine is."""
    v = make_volume("promote", size=GiB, options="lane_prefetch=1,shape=20000:200")
    v.mount.start()
    keys = [f"key-{i:02d}" for i in range(48)]
    data = {k: payload(k, 4 * MiB) for k in keys}
    for k in keys:
        write_file(v.p(k), data[k])
    with open(v.p(".kvfs", "drop_cache"), "w") as f:
        f.write("1")
    with open(v.p(".kvfs", "prefetch"), "w") as f:
        f.write("".join(k + "\n" for k in keys))
    # 47 files of 4 MiB, one command at a time, are still ahead of the last one.
    queued = read_stats(v.path)["lanes"]["prefetch"]
    assert queued["queued"] > 0, queued
    assert read_file(v.p(keys[-1])) == data[keys[-1]]
    lane = read_stats(v.path)["lanes"]["prefetch"]
    assert lane["promoted"] >= 1, lane
    for k in keys:
        assert read_file(v.p(k)) == data[k], k


def _store_while_reading(vol, script, *args):
    """Runs `script` (a reader: it gets `args` then the path of a stop file,
    says "reading" once it reads and keeps reading until the file exists) in
    another process and, while it reads, stores 16 MiB (16 write requests of
    1 MiB) at vol/stored, again until a write has waited (at most 40 times:
    on a loaded machine the reader may not be running while one store's
    writes pass). Returns the stats' write_yield before and after."""
    stop = os.path.join(os.path.dirname(vol.path), "stop-reading")
    reader = subprocess.Popen([sys.executable, "-c", script, *args, stop],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline() == "reading\n"
        before = read_stats(vol.path)["write_yield"]
        stored = payload("stored-meanwhile", 16 * MiB)
        for _ in range(40):
            write_file(vol.p("stored"), stored)
            after = read_stats(vol.path)["write_yield"]
            if after["waits"] > before["waits"]:
                break
    finally:
        open(stop, "w").close()
        assert reader.wait(timeout=30) == 0
    assert read_file(vol.p("stored")) == stored
    return before, after


# Reads 1 MiB at a time from argv[1], around and around, until argv[2]
# exists; says "reading" once it is.
_READER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
off, said = 0, False
while not os.path.exists(sys.argv[2]):
    if not os.pread(fd, 1 << 20, off):
        raise SystemExit("short read")
    off = (off + (1 << 20)) % size
    if not said:
        print("reading", flush=True)
        said = True
"""


def test_writes_wait_for_another_callers_reads_but_not_for_their_own(make_volume):
    """fuse/read_priority.h: while another process reads, a store's write
    requests wait for its reads to pause (counted in the stats); a process's
    own reads never hold up its writes (a copy within the mount); what is
    written arrives whole either way. Reads the kernel serves itself
    (passthrough) never reach kvfs: this is about the reads that do."""
    vol = make_volume("v", size=1 << 30, options="passthrough=off")
    vol.mount.start()
    src = payload("being-read", 8 * MiB)
    write_file(vol.p("src"), src)
    before, during = _store_while_reading(vol, _READER, vol.p("src"))
    assert during["waits"] > before["waits"]
    assert during["waited_ms"] > before["waited_ms"]
    # No reader but ourselves: copy src 1 MiB at a time, reads and writes
    # alternating, none of which may wait. The first write comes before our
    # first read: no read may still count as in flight.
    time.sleep(0.05)  # past the reader's last read
    fd_in = os.open(vol.p("src"), os.O_RDONLY)
    fd_out = os.open(vol.p("copy"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        assert os.pwrite(fd_out, src[:MiB], 0) == MiB
        assert read_stats(vol.path)["write_yield"]["waits"] == during["waits"]
        for off in range(0, len(src), MiB):
            assert os.pwrite(fd_out, os.pread(fd_in, MiB, off), off) == MiB
    finally:
        os.close(fd_in)
        os.close(fd_out)
    after = read_stats(vol.path)["write_yield"]
    assert after["waits"] == during["waits"]
    assert read_file(vol.p("copy")) == src
    vol.mount.stop()


# Loads argv[2]'s 8 x 1 MiB keys k0..k7 with one batch READ after another
# (the kvfs Python module, from argv[1]) until argv[3] exists; says
# "reading" after the first batch.
_BATCH_READER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import kvfs
with kvfs.Client(sys.argv[2]) as c:
    buf = c.register(8 << 20)
    names = ["k%d" % i for i in range(8)]
    said = False
    while not os.path.exists(sys.argv[3]):
        if not all(r.ok for r in c.read_batch(names, buf, size=1 << 20)):
            raise SystemExit("batch read failed")
        if not said:
            print("reading", flush=True)
            said = True
"""


def test_writes_wait_for_another_callers_batch_reads(vol):
    """A batch ioctl call with READ entries is a read for fuse/ReadPriority:
    another process's POSIX writes wait while such calls keep coming."""
    d = vol.p("keys")
    os.mkdir(d)
    for i in range(8):
        write_file(os.path.join(d, f"k{i}"), payload(f"key{i}", MiB))
    python_dir = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    before, after = _store_while_reading(vol, _BATCH_READER, python_dir, d)
    assert after["waits"] > before["waits"]
