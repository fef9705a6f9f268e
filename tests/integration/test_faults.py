"""Device faults on a real mount: injected EIO on reads and writes at chosen
device offsets (the daemon's `-o fault_eio=...` test hook, a FaultInjectingIo
around the real engine), flipped bytes in the image under `verify=on`, and
damaged volumes that mount and fsck must refuse with a clear message.

What kvfs promises, and these tests assert:
- a read that touches a range the device fails gets EIO, never wrong bytes;
  other files, and other parts of the same file, keep reading;
- a failed write-behind surfaces as EIO at fsync() and at close(); the
  daemon keeps serving; the index never points at the data that was not
  written, so after a remount the file has its last version whose data
  reached the device (here: empty, as created) and fsck finds nothing wrong;
- with verify=on, bytes that no longer match their extent's crc32c fail the
  read with EIO (also a 4 KiB read of an undamaged block of that extent:
  extents are checked whole); fsck --verify-data names the file by path
  (exit 4) and -y moves it to /lost+found (exit 1).

Device offsets of a file's data are found by searching the unmounted image
for the file's (random, unique) bytes.
"""
import errno
import json
import os
import struct
import subprocess
import sys
import threading

import pytest

from conftest import MiB, mounted_fstype, run_kvfs
from kvio import payload

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import kvfs  # noqa: E402

FSCK_BIN = os.environ.get("FSCK_KVFS_BIN", "")
BLOCK = 4096

needs_fsck = pytest.mark.skipif(not FSCK_BIN, reason="FSCK_KVFS_BIN not set")


def store(path, data, fsync=True):
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def load(path):
    with open(path, "rb") as f:
        return f.read()


def pread(path, off, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def read_errno(path, off=0, n=None):
    """The errno reading `path` fails with (0 if it succeeds)."""
    try:
        if n is None:
            load(path)
        else:
            pread(path, off, n)
    except OSError as e:
        return e.errno
    return 0


def image_offset(image, data):
    """Byte offset in the (unmounted) image of the 4 KiB block holding
    data[:BLOCK] -- random bytes, so unique."""
    needle = data[:64]
    step = 64 * MiB
    with open(image, "rb") as f:
        pos = 0
        while True:
            f.seek(pos)
            buf = f.read(step + BLOCK)
            if len(buf) < len(needle):
                break
            i = buf.find(needle)
            while i != -1 and i < step:
                if (pos + i) % BLOCK == 0 and buf[i:i + BLOCK] == data[:BLOCK]:
                    return pos + i
                i = buf.find(needle, i + 1)
            pos += step
    raise AssertionError("file data not found in the image")


def flip(image, off, n=16):
    with open(image, "r+b") as f:
        f.seek(off)
        b = bytearray(f.read(n))
        for k in range(n):
            b[k] ^= 0x5A
        f.seek(off)
        f.write(bytes(b))
        f.flush()
        os.fsync(f.fileno())


def fsck(image, *args):
    r = subprocess.run([FSCK_BIN, *args, image], capture_output=True, text=True, timeout=300)
    return r


def mount_with(vol, options):
    vol.mount.options = options
    vol.mount.start()


# ------------------------------------------------------------ read errors

# Reads are served three ways: from chunks prefetched into the RAM cache,
# from chunks loaded into it on demand, or (no room in the cache) straight
# from the device into the reply.
READ_PATHS = ["prefetch=lookup", "prefetch=off", "prefetch=off,cache_mb=0"]


@pytest.mark.parametrize("path_opts", READ_PATHS)
def test_read_error_fails_only_the_bytes_in_the_failing_range(make_volume, path_opts):
    v = make_volume("v")
    v.mount.start()
    a = payload("a", 3 * MiB)
    b = payload("b", 4 * MiB)
    c = payload("c", 300000)
    store(v.p("a"), a)
    store(v.p("b"), b)
    store(v.p("c"), c)
    v.mount.stop()
    # Fail one 4 KiB block in the middle of a's second chunk.
    bad = image_offset(v.image, a[MiB:]) + 64 * 1024
    mount_with(v, f"{path_opts},fault_eio=read:{bad}:{BLOCK}")

    assert read_errno(v.p("a")) == errno.EIO
    assert read_errno(v.p("a"), MiB + 64 * 1024, BLOCK) == errno.EIO
    # The chunks around it are other extents: they still read.
    assert pread(v.p("a"), 0, MiB) == a[:MiB]
    assert pread(v.p("a"), 2 * MiB, MiB) == a[2 * MiB:]
    assert load(v.p("b")) == b
    assert load(v.p("c")) == c
    # Still serving: new files are written and read back.
    d = payload("d", 2 * MiB)
    store(v.p("d"), d)
    assert load(v.p("d")) == d
    assert read_errno(v.p("a")) == errno.EIO  # and it stays an error
    log = v.mount.read_log()
    assert "fault_eio" in log
    v.mount.stop()

    # The device itself is fine: without the fault every byte is there.
    mount_with(v, None)
    assert load(v.p("a")) == a
    v.mount.stop()


# ------------------------------------------------------------ write errors

def test_failed_write_behind_is_eio_at_fsync_and_close_and_nothing_wrong_is_committed(
        make_volume):
    v = make_volume("v")
    v.mount.start()
    hole = payload("hole", MiB)
    keep = payload("keep", 4 * MiB)
    store(v.p("hole"), hole)  # the first allocation: start of the data region
    store(v.p("keep"), keep)
    os.unlink(v.p("hole"))    # leaves an exactly 1 MiB free extent
    v.mount.stop()
    bad = image_offset(v.image, hole)
    # A chunk is reserved (1 MiB, best fit: that hole) at a file's first
    # write, and written at fsync/close: make writes there fail.
    mount_with(v, f"fault_eio=write:{bad}:{MiB}")

    victim = v.p("victim")
    fd = os.open(victim, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, payload("victim", 512 * 1024))  # staged; its space is the bad hole
    other = payload("other", 3 * MiB)
    store(v.p("other"), other)  # written elsewhere while the hole is reserved
    with pytest.raises(OSError) as e:
        os.fsync(fd)
    assert e.value.errno == errno.EIO
    with pytest.raises(OSError) as e:
        os.close(fd)
    assert e.value.errno == errno.EIO
    assert "write-behind of inode" in v.mount.read_log()

    # The daemon keeps serving every other file.
    assert load(v.p("other")) == other
    assert load(v.p("keep")) == keep
    os.mkdir(v.p("dir"))
    assert sorted(os.listdir(v.path)) == ["dir", "keep", "other", "victim"]
    # The bytes that never reached the device are never handed out.
    assert read_errno(victim, 0, 4096) == errno.EIO
    v.mount.stop()

    # After the remount the victim has its last version whose data reached
    # the device (empty, as created): the index never named the lost data.
    mount_with(v, None)
    assert os.stat(victim).st_size == 0
    assert load(victim) == b""
    assert load(v.p("other")) == other
    assert load(v.p("keep")) == keep
    v.mount.stop()
    if FSCK_BIN:
        r = fsck(v.image, "-n", "--verify-data")
        assert r.returncode == 0, r.stdout + r.stderr


def test_a_full_index_disk_stops_changes_keeps_what_was_synced_and_unmounts(make_volume):
    # The index on a 4 MiB tmpfs of its own; creating names fills it. Once
    # RocksDB fails a commit, kvfs takes no more changes (EROFS) instead of
    # accepting names it cannot keep, keeps serving reads, and unmounts
    # without crashing (RocksDB must not be asked to sync its WAL again).
    v = make_volume("v")
    disk = os.path.join(v.workdir, "index-disk")
    os.mkdir(disk)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", disk], check=True)
    try:
        index = os.path.join(disk, "index")
        from conftest import mkfs
        mkfs(v.image, 256 * MiB, "--index", index)
        mount_with(v, f"index={index}")
        kept = payload("kept", 256 * 1024)
        store(v.p("kept"), kept)  # fsync: durable before the index fills
        made = 0
        with pytest.raises(OSError) as e:
            while made < 1_000_000:
                os.close(os.open(v.p(f"{made:08d}-" + "n" * 200), os.O_CREAT | os.O_WRONLY, 0o644))
                made += 1
        assert e.value.errno == errno.EROFS, e.value
        assert made > 100
        assert "index commit failed" in v.mount.read_log()
        # Reads go on; every change is refused the same way.
        assert load(v.p("kept")) == kept
        assert len(os.listdir(v.path)) >= 1
        for change in (lambda: os.mkdir(v.p("d")), lambda: os.unlink(v.p("kept")),
                       lambda: os.rename(v.p("kept"), v.p("k2")),
                       lambda: open(v.p("kept"), "r+b").close(),
                       lambda: os.close(os.open(v.p("kept"), os.O_RDONLY | os.O_TRUNC)),
                       lambda: os.truncate(v.p("kept"), 0)):
            with pytest.raises(OSError) as e:
                change()
            assert e.value.errno == errno.EROFS
        # The unmount cannot commit what was pending: the daemon says so and
        # exits non-zero, but on its own terms (no abort, no signal).
        subprocess.run(["fusermount3", "-u", v.path], check=True)
        rc = v.mount.proc.wait(timeout=120)
        log = v.mount.read_log()
        v.mount.proc = None
        v.mount.log.close()
        assert rc > 0, log
        assert "Assertion" not in log and "terminate called" not in log, log

        # With room again, the volume mounts with every fsynced byte, takes
        # changes, and fsck finds nothing wrong.
        subprocess.run(["mount", "-o", "remount,size=64m", disk], check=True)
        mount_with(v, f"index={index}")
        assert load(v.p("kept")) == kept
        store(v.p("after"), b"x" * 4096)
        v.mount.stop()
        if FSCK_BIN:
            r = fsck(v.image, "-n", "--index", index)
            assert r.returncode == 0, r.stdout + r.stderr
    finally:
        v.mount.kill()
        subprocess.run(["umount", "-l", disk])


def test_a_failed_device_flush_stops_changes_instead_of_losing_them(make_volume):
    # A commit follows a flush of the devices; once one fails, nothing more
    # is committed, so kvfs must refuse changes (EROFS) rather than accept
    # names it will never keep.
    v = make_volume("v")
    v.mount.start()
    kept = payload("kept", 64 * 1024)
    store(v.p("kept"), kept)
    v.mount.stop()
    mount_with(v, "fault_eio=flush:0:4096")
    fd = os.open(v.p("new"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"x" * 4096)
    with pytest.raises(OSError) as e:
        os.fsync(fd)
    assert e.value.errno == errno.EIO
    try:
        os.close(fd)
    except OSError:
        pass  # the failed write-behind may be reported again
    for change in (lambda: os.mkdir(v.p("d")), lambda: os.unlink(v.p("kept")),
                   lambda: open(v.p("another"), "wb").close()):
        with pytest.raises(OSError) as e:
            change()
        assert e.value.errno == errno.EROFS
    assert load(v.p("kept")) == kept
    subprocess.run(["fusermount3", "-u", v.path], check=True)
    rc = v.mount.proc.wait(timeout=120)
    v.mount.proc = None
    v.mount.log.close()
    assert rc > 0
    mount_with(v, None)
    assert load(v.p("kept")) == kept
    v.mount.stop()


def test_bad_fault_rules_are_refused(make_volume):
    v = make_volume("v")
    for rule, why in [("erase:0:4096", "OP"), ("read:0", "fields"), ("read:x:4096", "OFFSET"),
                      ("read:0:0", "LEN"), ("read:0:4096:1", "DEVICE")]:
        r = run_kvfs("-f", "-o", f"fault_eio={rule}", v.image, v.mnt)
        assert r.returncode != 0
        assert "fault_eio" in r.stderr and why in r.stderr, r.stderr
    r = run_kvfs("-f", "-o", "verify=maybe", v.image, v.mnt)
    assert r.returncode != 0 and "verify=maybe" in r.stderr, r.stderr
    assert mounted_fstype(v.mnt) is None


# ------------------------------------------------------------ corruption

@pytest.mark.parametrize("path_opts", READ_PATHS)
def test_flipped_bytes_fail_reads_with_verify_on_and_fsck_names_the_file(make_volume, path_opts):
    v = make_volume("v")
    v.mount.start()
    os.mkdir(v.p("keys"))
    x = payload("x", 3 * MiB + 1000)
    y = payload("y", 2 * MiB)
    store(v.p("keys", "x"), x)
    store(v.p("keys", "y"), y)
    ino = os.stat(v.p("keys", "x")).st_ino
    v.mount.stop()
    # Damage 16 bytes 100 KiB into x's second chunk (one extent: [1, 2) MiB).
    flip(v.image, image_offset(v.image, x[MiB:]) + 100 * 1024 + 5)

    # verify=off hands the damaged bytes out: the damage is real.
    mount_with(v, path_opts)
    got = load(v.p("keys", "x"))
    assert got != x and len(got) == len(x)
    v.mount.stop()

    mount_with(v, f"{path_opts},verify=on")
    assert read_errno(v.p("keys", "x")) == errno.EIO
    # A 4 KiB read of an intact block of the damaged extent fails too: the
    # checksum covers the whole extent, so the whole extent is read.
    assert read_errno(v.p("keys", "x"), MiB + 512 * 1024, BLOCK) == errno.EIO
    # Other extents of x, and other files, read fine.
    assert pread(v.p("keys", "x"), 0, MiB) == x[:MiB]
    assert pread(v.p("keys", "x"), 2 * MiB, 2 * MiB) == x[2 * MiB:]
    assert pread(v.p("keys", "x"), 3 * MiB, 4096) == x[3 * MiB:]
    assert load(v.p("keys", "y")) == y
    assert read_errno(v.p("keys", "x")) == errno.EIO
    log = v.mount.read_log()
    assert f"inode {ino}" in log and "fails its checksum" in log, log[-3000:]
    assert log.count("fails its checksum") == 1, "logged once per file"
    v.mount.stop()

    if not FSCK_BIN:
        return
    r = fsck(v.image, "-n", "--verify-data", "--json")
    assert r.returncode == 4, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    bad = [f for f in rep["findings"] if f["kind"] == "bad_checksum"]
    assert [f["path"] for f in bad] == ["/keys/x"], rep["findings"]
    assert bad[0]["ino"] == ino
    r = fsck(v.image, "-n", "--verify-data")
    assert r.returncode == 4 and "/keys/x" in r.stdout, r.stdout
    r = fsck(v.image, "-y", "--verify-data")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"/lost+found/#{ino}-x" in r.stdout, r.stdout
    r = fsck(v.image, "-n", "--verify-data")
    assert r.returncode == 0, r.stdout + r.stderr

    # The damaged file is in /lost+found with its bytes as they are now
    # (checksums rewritten: inspectable), the rest untouched.
    mount_with(v, "verify=on")
    assert not os.path.exists(v.p("keys", "x"))
    assert load(v.p("lost+found", f"#{ino}-x")) == got
    assert load(v.p("keys", "y")) == y
    v.mount.stop()


# ------------------------------------------------------------ damaged volumes

def damage_superblock(image):
    flip(image, 100, 1)  # inside the superblock: its checksum no longer matches


def test_damaged_superblock_is_refused_by_mount_and_fsck(make_volume):
    v = make_volume("v")
    damage_superblock(v.image)
    r = run_kvfs("-f", v.image, v.mnt)
    assert r.returncode != 0
    assert "checksum" in r.stderr and v.image in r.stderr, r.stderr
    assert mounted_fstype(v.mnt) is None
    if FSCK_BIN:
        for mode in ("-n", "-y"):
            r = fsck(v.image, mode)
            assert r.returncode == 4, r.stdout + r.stderr
            assert "superblock" in r.stdout and "checksum" in r.stdout, r.stdout


@needs_fsck
def test_fsck_refuses_a_missing_index_saying_so(make_volume):
    v = make_volume("v")
    os.rename(v.image + ".index", v.image + ".index-moved")
    for mode in ("-n", "-y"):
        r = fsck(v.image, mode)
        assert r.returncode == 8, r.stdout + r.stderr
        assert "index is missing" in r.stderr, r.stderr


@needs_fsck
def test_fsck_refuses_a_foreign_index_saying_so(make_volume):
    a = make_volume("a")
    b = make_volume("b")
    for mode in ("-n", "-y"):
        r = fsck(a.image, mode, "--index", b.image + ".index")
        assert r.returncode == 8, r.stdout + r.stderr
        assert "foreign index" in r.stderr, r.stderr


# ------------------------------------------------------------ batch WRITE races


def test_batch_write_of_memory_changed_meanwhile_fails_ebusy_and_no_checksum_lies(make_volume):
    """A batch WRITE moves registered memory to the device in place; a client
    that keeps changing that memory meanwhile gets EBUSY for the entries it
    raced, never a file whose checksums miss its bytes (which fsck
    --verify-data, or verify=on reads, would call corrupt)."""
    v = make_volume("race", size=1024 * MiB)
    v.mount.start()
    n, size = 4, 8 * MiB
    written = []
    busy = 0
    with kvfs.Client(v.path) as c:
        buf = c.register(n * size)
        view = buf.view()
        view[:] = payload("race", n * size)
        stop = threading.Event()

        def scribble():
            # A counter that never repeats: memory changed and changed back
            # between the two checksums would go unseen (kvfs_ioctl(7)).
            x = 0
            while not stop.is_set():
                x += 1
                for off in range(0, n * size, 61 * 4096):
                    struct.pack_into("<Q", view, off, x)

        t = threading.Thread(target=scribble)
        t.start()
        try:
            for k in range(12):
                res = c.write_batch([(f"r{k}-{i}", buf.view(i * size, size)) for i in range(n)])
                for r in res:
                    assert r.status in (0, errno.EBUSY), r
                    busy += r.status == errno.EBUSY
                    if r.ok:
                        written.append(r.name)
                    else:
                        assert not os.path.exists(v.p(r.name)), r.name  # nothing was written
        finally:
            stop.set()
            t.join()
        del view
        buf.close()
    assert busy > 0, "the scribbler never raced a write: the test proves nothing"
    v.mount.stop()
    # What was written reads back with every checksum checked...
    mount_with(v, "verify=on")
    for name in written:
        assert len(load(v.p(name))) == size, name
    v.mount.stop()
    # ...and fsck finds nothing wrong.
    if FSCK_BIN:
        r = fsck(v.image, "-n", "--verify-data", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
