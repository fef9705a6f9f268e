"""Helpers shared by the integration tests: payloads, file I/O (O_DIRECT
too), the stats control file, waiting for the daemon's background work."""
import json
import mmap
import os
import random
import time

import pytest

BLOCK = 4096
KiB = 1 << 10
MiB = 1 << 20

# The chunk sizes the connectors store (issue 3): a small layer slice, a
# typical chunk, a large chunk.
SIZES = [256 * KiB, 4 * MiB, 24 * MiB]


def payload(seed, size):
    """Deterministic bytes that differ for every seed and position."""
    return random.Random(repr(seed)).randbytes(size)


def align_up(n, a=BLOCK):
    return (n + a - 1) // a * a


class AlignedBuffer:
    """Page-aligned anonymous memory (O_DIRECT needs aligned user buffers)."""

    def __init__(self, size):
        self.size = max(align_up(size), BLOCK)
        self.mem = mmap.mmap(-1, self.size)

    def view(self, n=None):
        return memoryview(self.mem)[: self.size if n is None else n]

    def close(self):
        self.mem.close()


def direct_write_all(fd, data, offset=0):
    """Writes `data` at `offset` (aligned) with O_DIRECT, padded with zeros
    to the block size; returns the padded length written."""
    assert offset % BLOCK == 0
    buf = AlignedBuffer(len(data))
    try:
        buf.mem[: len(data)] = data
        done = 0
        while done < buf.size:
            n = os.pwrite(fd, buf.view()[done:], offset + done)
            assert n > 0 and n % BLOCK == 0, n
            done += n
        return buf.size
    finally:
        buf.close()


def direct_read_all(fd, size, offset=0):
    """Reads up to `size` bytes at `offset` with O_DIRECT (aligned buffer
    and length), stopping at end of file."""
    assert offset % BLOCK == 0
    buf = AlignedBuffer(size)
    try:
        done = 0
        while done < buf.size:
            n = os.preadv(fd, [buf.view()[done:]], offset + done)
            if n == 0:
                break
            done += n
            if n % BLOCK:
                break  # short read: end of file
        return bytes(buf.mem[: min(done, size)])
    finally:
        buf.close()


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data, mode=0o644, fsync=False):
    """Creates or truncates `path` and writes all of `data` (one write(2) per
    up to 2 GiB, as connectors do)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_stats(mount):
    """MOUNT/.kvfs/stats as a dict."""
    with open(os.path.join(mount, ".kvfs", "stats")) as f:
        return json.load(f)


def wait_for(cond, what, timeout=10.0):
    """Polls cond() until it is true; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for: {what}")
        time.sleep(0.02)
