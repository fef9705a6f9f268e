"""Aligned buffers, the data pattern every key holds, key names."""
import array
import ctypes
import hashlib
import importlib
import importlib.util
import mmap
import os
import random
import sys

from .common import BLOCK, MiB, align_up

_libc = ctypes.CDLL(None, use_errno=True)
_libc.memcmp.restype = ctypes.c_int
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


class AlignedBuffer:
    """Page-aligned, pre-faulted anonymous memory holding `count` slots of
    `slot_size` bytes (O_DIRECT needs aligned buffers; pre-faulting keeps page
    faults out of the timed loops). The I/O loops get memoryviews of slots;
    verification uses memcmp on raw addresses (no copies)."""

    def __init__(self, count, slot_size):
        self.count = count
        self.slot = align_up(max(slot_size, 1))
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        self.mem = mmap.mmap(-1, self.count * self.slot, flags=flags)
        self._cobj = ctypes.c_char.from_buffer(self.mem)
        self.addr = ctypes.addressof(self._cobj)
        self.view = memoryview(self.mem)

    def slot_view(self, i, n):
        return self.view[i * self.slot: i * self.slot + n]

    def slot_addr(self, i):
        return self.addr + i * self.slot

    def same_slot(self, other, i, n):
        """True when the first n bytes of slot i are the same here and in
        AlignedBuffer `other` (of the same slot size)."""
        return _libc.memcmp(self.slot_addr(i), other.slot_addr(i), n) == 0

    def poison(self):
        """Fills every slot with a byte the pattern check rejects, so that a
        short or skipped read cannot pass as the data stored there before."""
        _libc.memset(self.addr, 0x5A, self.count * self.slot)

    def close(self):
        try:
            self.view.release()
            del self._cobj
            self.mem.close()
        except BufferError:
            # Slices are still referenced (a traceback holds the frames of
            # an interrupted loop): the memory goes when they do.
            pass


class Pattern:
    """The data every key holds: `size` bytes of one seeded random buffer,
    starting at an offset that is distinct for every key of the run (keys
    differ in every 4 KiB block, so a block from another key, another offset
    or an earlier round does not verify)."""

    SLACK = 1 * MiB

    def __init__(self, max_size, seed):
        self.base = bytearray(random.Random(seed).randbytes(max_size + self.SLACK))
        self._cobj = ctypes.c_char.from_buffer(self.base)
        self.addr = ctypes.addressof(self._cobj)
        self.view = memoryview(self.base)
        self.counter = 0

    def next_offset(self):
        # 4099 is odd: offsets repeat only after SLACK keys (2^20).
        self.counter += 1
        return (self.counter * 4099) % self.SLACK

    def data(self, off, size):
        return self.view[off: off + size]

    def fill(self, buf, slot, off, size):
        buf.slot_view(slot, size)[:] = self.view[off: off + size]

    def matches(self, buf, slot, off, size):
        return _libc.memcmp(buf.slot_addr(slot), self.addr + off, size) == 0

    def first_difference(self, buf, slot, off, size):
        got = buf.slot_view(slot, size)
        want = self.view[off: off + size]
        for pos in range(0, size, BLOCK):
            if got[pos: pos + BLOCK] != want[pos: pos + BLOCK]:
                return pos
        return None


class StampedContent:
    """The bytes of objects of any size, larger than the pattern too: the
    pattern repeated from a distinct offset, with the first 8 bytes of every
    4 KiB block replaced by a stamp (the object's number << 32 | the block's
    number). No block repeats within an object, across objects of the run,
    or at another offset, however often the pattern repeats."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.counter = 0

    def next_object(self):
        """(object number, pattern offset) of a new object."""
        self.counter += 1
        return self.counter, self.pattern.next_offset()

    def fill(self, view, obj, start=0):
        """Writes bytes [start, start + len(view)) of object `obj` (a pair from
        next_object) into `view`; start and len(view) are multiples of 4 KiB."""
        number, off = obj
        base = self.pattern.view
        n, pos, src = len(view), 0, (off + start) % len(base)
        while pos < n:
            k = min(n - pos, len(base) - src)
            view[pos: pos + k] = base[src: src + k]
            pos, src = pos + k, 0
        first = (number << 32) | (start // BLOCK)
        view.cast("Q")[:: BLOCK // 8] = array.array("Q", range(first, first + n // BLOCK))

    def first_difference(self, addr, size, obj, scratch):
        """Offset of the first 4 KiB block of the `size` bytes at address
        `addr` that differs from object `obj`, or None; compared a slot of
        AlignedBuffer `scratch` at a time."""
        for pos in range(0, size, scratch.slot):
            k = min(scratch.slot, size - pos)
            want = scratch.slot_view(0, k)
            self.fill(want, obj, pos)
            if _libc.memcmp(addr + pos, scratch.addr, k) != 0:
                for blk in range(0, k, BLOCK):
                    if _libc.memcmp(addr + pos + blk, scratch.addr + blk, min(BLOCK, k - blk)):
                        return pos + blk
        return None


def import_kvfs_module():
    """The kvfs Python client (batch ioctl): installed, or python/ next to
    tools/ when run from a source tree. None if neither is there."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
    if importlib.util.find_spec("kvfs") is None and os.path.isdir(os.path.join(src, "kvfs")):
        sys.path.insert(0, os.path.abspath(src))
    try:
        return importlib.import_module("kvfs")
    except ImportError:
        return None


def key_names(directory, prefix, count):
    """LMCache-like chunk file names (model@world@worker@hash.data), as bytes
    paths plus their temp names; computed before timing."""
    keys, tmps = [], []
    for i in range(count):
        h = hashlib.sha256(f"{prefix}-{i}".encode()).hexdigest()
        p = os.path.join(directory, f"bench-model@8@{prefix}@{h}.data").encode()
        keys.append(p)
        tmps.append(p + b".tmp")
    return keys, tmps
