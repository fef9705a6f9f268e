"""kvfs-bench's cache simulations (tools/kvfs_bench/cachesim.py), without a
mount: the Zipf trace is seeded and Zipf-shaped, LRU and the watermark
policy give the hits and evictions worked out by hand."""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))

from kvfs_bench.cachesim import Trace, lru_hits, watermark_bytes, watermark_hits  # noqa: E402

KiB = 1 << 10
U = 4 * KiB


def test_trace_is_seeded_and_zipf_shaped():
    a, b = Trace(200, 50000, seed=7), Trace(200, 50000, seed=7)
    assert a.requests == b.requests and a.sizes == b.sizes
    assert Trace(200, 1000, seed=8).requests != Trace(200, 1000, seed=7).requests[:1000]
    assert all(256 * KiB <= s <= 1024 * KiB and s % (64 * KiB) == 0 for s in a.sizes)
    count = collections.Counter(a.requests)
    top, second = a.by_rank[0], a.by_rank[1]
    assert count.most_common(1)[0][0] == top
    # rank 1 / rank 2 = 2**0.9 = 1.87 for Zipf(0.9)
    assert 1.6 < count[top] / count[second] < 2.2


def test_lru_by_hand():
    sizes = [U] * 4
    r = lru_hits([0, 1, 2, 0, 3, 1, 0], sizes, capacity=3 * U)
    # 0 1 2 miss; 0 hit; 3 miss evicts 1; 1 miss evicts 2; 0 hit
    assert (r.hits, r.misses) == (2, 5)
    assert r.evicted == [1, 2]


def test_watermarks_by_hand():
    sizes = [U] * 6
    # high 4 units, low 2: store 3 makes 4 and evicts 1, 2 (0 was used);
    # stores 1 and 4 make 4 again and evict 0, 3.
    r = watermark_hits([0, 1, 2, 0, 3, 1, 4], sizes, high=4 * U, low=2 * U)
    assert r.evicted == [1, 2, 0, 3]
    assert (r.hits, r.misses, r.passes) == (1, 6, 2)
    assert watermark_bytes(1000, 90, 80) == (900, 800)
