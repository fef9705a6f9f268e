"""Helpers shared by the integration tests: payloads and O_DIRECT I/O."""
import mmap
import os
import random

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
