"""Each connector's exact call sequence against a real kvfs mount, byte-exact
on load. The sequences follow the connectors' file backends: the calls, their
flags and their order are what matters, not the connector code itself."""
import hashlib
import os

import pytest

from kvio import (BLOCK, MiB, SIZES, align_up, direct_read_all,
                  direct_write_all, payload, read_file, wait_for)

KEYS = 3  # keys per size and connector: enough for a store/lookup/load loop


def size_id(n):
    return f"{n >> 10}KiB" if n < MiB else f"{n >> 20}MiB"


# --- LMCache: fs adapter (buffered) --------------------------------------
#
# store:  exists(path)? ; open(tmp, "wb"); write(metadata); write(data);
#         close; rename(tmp, path)
# lookup: exists(path)
# load:   open(path, "rb"); read(metadata); readinto(buffer); close

META_LEN = 40


def lmcache_meta(size):
    return b"LMC1" + size.to_bytes(8, "little") + bytes(META_LEN - 12)


def lmcache_store(base, key, data):
    path = os.path.join(base, f"{key}.data")
    if os.path.exists(path):
        return False
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(lmcache_meta(len(data)))
        f.write(data)
    os.rename(tmp, path)
    return True


def lmcache_load(base, key):
    path = os.path.join(base, f"{key}.data")
    with open(path, "rb") as f:
        meta = f.read(META_LEN)
        size = int.from_bytes(meta[4:12], "little")
        buf = bytearray(size)
        n = f.readinto(buf)
        assert n == size
        assert f.read(1) == b""
    return bytes(buf)


@pytest.mark.parametrize("size", SIZES, ids=size_id)
def test_lmcache_buffered_store_lookup_load(vol, size):
    base = vol.p("lmcache")
    os.mkdir(base)
    keys = [f"vllm@model@1@0@{hashlib.sha256(bytes([i])).hexdigest()}" for i in range(KEYS)]
    for i, k in enumerate(keys):
        assert not os.path.exists(os.path.join(base, f"{k}.data"))
        assert lmcache_store(base, k, payload((size, i), size))
    # A second store of the same key is skipped by the lookup.
    assert not lmcache_store(base, keys[0], b"x")
    for i, k in enumerate(keys):
        assert os.path.exists(os.path.join(base, f"{k}.data"))
        assert os.stat(os.path.join(base, f"{k}.data")).st_size == META_LEN + size
        assert lmcache_load(base, k) == payload((size, i), size)
    assert sorted(os.listdir(base)) == sorted(f"{k}.data" for k in keys)


# --- LMCache: O_DIRECT store/load ------------------------------------------
#
# store: open(tmp, O_CREAT|O_WRONLY|O_DIRECT) -- no O_TRUNC, so a stale temp
#        file from an earlier crashed store may be there, longer than the new
#        one; write(data padded to 4 KiB); ftruncate(fd, exact length);
#        close; rename(tmp, path)
# load:  open(path, O_RDONLY|O_DIRECT); read into an aligned buffer; close


def lmcache_direct_store(base, key, data):
    path = os.path.join(base, key)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
    try:
        direct_write_all(fd, data)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    os.rename(tmp, path)


def lmcache_direct_load(base, key):
    path = os.path.join(base, key)
    size = os.stat(path).st_size
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        return direct_read_all(fd, size)
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", SIZES, ids=size_id)
def test_lmcache_odirect_store_over_stale_longer_temp(vol, size):
    base = vol.p("lmcache_direct")
    os.mkdir(base)
    # Not a multiple of 4 KiB: the padded write is cut back by ftruncate.
    n = size + 1000
    for i in range(KEYS):
        key = f"key{i}"
        # A stale temp file twice as long, left by an earlier crashed store.
        with open(os.path.join(base, key + ".tmp"), "wb") as f:
            f.write(b"\xee" * (2 * size))
        lmcache_direct_store(base, key, payload((n, i), n))
        assert not os.path.exists(os.path.join(base, key + ".tmp"))
    for i in range(KEYS):
        key = f"key{i}"
        st = os.stat(os.path.join(base, key))
        assert st.st_size == n
        got = lmcache_direct_load(base, key)
        assert len(got) == n
        assert got == payload((n, i), n)
        # The buffered path sees the same bytes.
        assert read_file(os.path.join(base, key)) == payload((n, i), n)


# --- SGLang: HiCache file storage ------------------------------------------
#
# set:    exists(path)? ; open(tmp, "wb"); write; close; os.replace(tmp, path)
# get:    open(path, "rb"); readinto(preallocated buffer); close
# exists: os.path.exists(path)


def sglang_set(base, key, data):
    path = os.path.join(base, f"{key}.bin")
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def sglang_get(base, key, size):
    buf = bytearray(size)
    with open(os.path.join(base, f"{key}.bin"), "rb") as f:
        n = f.readinto(buf)
    assert n == size
    return bytes(buf)


@pytest.mark.parametrize("size", SIZES, ids=size_id)
def test_sglang_tmp_and_replace(vol, size):
    base = vol.p("sglang")
    os.mkdir(base)
    keys = [f"{hashlib.sha1(bytes([i])).hexdigest()}_0_k" for i in range(KEYS)]
    for i, k in enumerate(keys):
        assert not os.path.exists(os.path.join(base, f"{k}.bin"))
        sglang_set(base, k, payload((size, "v1", i), size))
    # Overwrite an existing key with new bytes of another length: the
    # replace is atomic and the old bytes are gone.
    sglang_set(base, keys[0], payload((size, "v2"), size // 2))
    assert sglang_get(base, keys[0], size // 2) == payload((size, "v2"), size // 2)
    assert os.stat(os.path.join(base, f"{keys[0]}.bin")).st_size == size // 2
    for i, k in enumerate(keys[1:], start=1):
        assert os.path.exists(os.path.join(base, f"{k}.bin"))
        assert sglang_get(base, k, size) == payload((size, "v1", i), size)
    assert not [n for n in os.listdir(base) if ".tmp." in n]


# --- vLLM: offloading to files -----------------------------------------------
#
# store: makedirs(base/h[0:2]/h[2:4], exist_ok=True);
#        fd = open(tmp, O_CREAT|O_EXCL|O_WRONLY|O_DIRECT, 0o644) -- EEXIST
#        means another writer is storing the block: skip; pwrite aligned;
#        close; rename(tmp, final)
# load:  open(final, O_RDONLY|O_DIRECT); pread into aligned buffer; close


def vllm_path(base, h):
    return os.path.join(base, h[0:2], h[2:4], h)


def vllm_store(base, h, data):
    final = vllm_path(base, h)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = final + ".tmp"
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_DIRECT, 0o644)
    except FileExistsError:
        return False
    try:
        direct_write_all(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    return True


def vllm_load(base, h, size):
    fd = os.open(vllm_path(base, h), os.O_RDONLY | os.O_DIRECT)
    try:
        return direct_read_all(fd, size)
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", SIZES, ids=size_id)
def test_vllm_hashed_dirs_excl_direct(vol, size):
    base = vol.p("vllm")
    os.mkdir(base)
    # Blocks are whole pages in vLLM: sizes are multiples of 4 KiB.
    hashes = [hashlib.sha256(f"{size}-{i}".encode()).hexdigest() for i in range(KEYS)]
    # Two hashes sharing the first level.
    hashes.append(hashes[0][:2] + "ff" + hashes[0][4:])
    for i, h in enumerate(hashes):
        assert vllm_store(base, h, payload((size, i), size))
    # A concurrent writer of the same block: O_EXCL refuses its temp file.
    held = os.open(vllm_path(base, hashes[0]) + ".tmp",
                   os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_DIRECT, 0o644)
    try:
        with pytest.raises(FileExistsError):
            os.open(vllm_path(base, hashes[0]) + ".tmp",
                    os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_DIRECT, 0o644)
    finally:
        os.close(held)
        os.unlink(vllm_path(base, hashes[0]) + ".tmp")
    for i, h in enumerate(hashes):
        assert os.stat(vllm_path(base, h)).st_size == size
        assert vllm_load(base, h, size) == payload((size, i), size)
    assert sorted(os.listdir(os.path.join(base, hashes[0][:2]))) == sorted(
        {hashes[0][2:4], "ff"})


# --- Dynamo (KVBM disk tier): preallocated slab ------------------------------
#
# fd = open(path, O_CREAT|O_RDWR|O_DIRECT); fallocate(fd, 0, 0, slab) (or
# ftruncate); unlink(path) -- the slab lives only as the open fd;
# pwrite/pread blocks at offsets; close frees the space.


@pytest.mark.parametrize("how", ["fallocate", "ftruncate"])
def test_dynamo_slab_unlinked_while_open(vol, how):
    path = vol.p("dynamo-slab")
    slab = 128 * MiB
    free_before = os.statvfs(vol.path).f_bfree
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
    try:
        if how == "fallocate":
            os.posix_fallocate(fd, 0, slab)
        else:
            os.ftruncate(fd, slab)
        assert os.fstat(fd).st_size == slab
        os.unlink(path)
        assert not os.path.exists(path)
        assert "dynamo-slab" not in os.listdir(vol.path)
        # Blocks of every size at offsets across the slab, some overlapping
        # earlier ones (the later write wins).
        layout = []
        off = 0
        for i, size in enumerate(SIZES * 2):
            layout.append((off, size, payload(("slab", i), size)))
            off = align_up(off + size + (i + 1) * 8192, 1 << 20)
        overlap_off = layout[1][0] + 64 * 1024
        overlap = payload("overlap", 256 * 1024)
        assert off <= slab
        for o, _, data in layout:
            direct_write_all(fd, data, o)
        direct_write_all(fd, overlap, overlap_off)
        for i, (o, size, data) in enumerate(layout):
            got = direct_read_all(fd, size, o)
            if i == 1:
                rel = overlap_off - o
                data = data[:rel] + overlap + data[rel + len(overlap):]
            assert got == data, f"block {i} at {o}"
        # Never-written space in the slab reads as zeros.
        gap = layout[0][0] + layout[0][1]
        assert direct_read_all(fd, BLOCK, align_up(gap)) == bytes(BLOCK)
        assert os.fstat(fd).st_size == slab
    finally:
        os.close(fd)
    # The slab's space comes back after the last close.
    wait_for(lambda: os.statvfs(vol.path).f_bfree >= free_before,
             "space of the unlinked slab freed after close")

