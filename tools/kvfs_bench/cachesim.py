"""A KV-cache trace and exact simulations of the evictors it is run against.

The trace: N keys whose popularity follows Zipf(s) (the key of rank r is
asked for with probability proportional to 1 / r**s), each with a fixed size.
A request for a key is a load if the key is cached (a hit), else a store (a
miss). Everything is drawn from one seeded generator, so a seed names one
trace: the same keys, sizes and order on every run.

The simulations replay a trace against a capacity in bytes and return the
hits and misses an exact policy gets:
  lru_hits        plain LRU: after a store, the least recently used keys go
                  until the bytes held are at most the capacity.
  watermark_hits  LRU between watermarks, as kvfs's evictor does it (see
                  fs/eviction.h): once the bytes used reach `high`, the least
                  recently used keys go until used is at most `low`.
A key's bytes are what it occupies (its size rounded up to the allocation
unit); `base` is what the volume uses before any key is stored.

Standard library only; no mount, so tests/bench can check it in
milliseconds.
"""
import bisect
import itertools
import random
from collections import OrderedDict

KiB = 1 << 10


class Trace:
    """`requests` key ids (0..keys-1) drawn from Zipf(`alpha`) with `seed`,
    and `sizes[k]`, each a multiple of `step` between `min_size` and
    `max_size`. Which key has which rank is a seeded permutation, so
    popularity does not follow key id or size."""

    def __init__(self, keys, requests, alpha=0.9, seed=1, min_size=256 * KiB,
                 max_size=1024 * KiB, step=64 * KiB):
        if keys < 1 or requests < 0:
            raise ValueError("a trace needs at least one key and no negative request count")
        if min_size <= 0 or max_size < min_size or min_size % step or max_size % step:
            raise ValueError("sizes: 0 < min_size <= max_size, both multiples of step")
        rng = random.Random(seed)
        self.keys = keys
        self.alpha = alpha
        self.seed = seed
        choices = (max_size - min_size) // step + 1
        self.sizes = [min_size + step * rng.randrange(choices) for _ in range(keys)]
        by_rank = list(range(keys))
        rng.shuffle(by_rank)
        self.by_rank = by_rank
        self.weights = zipf_weights(keys, alpha)
        cum = list(itertools.accumulate(self.weights))
        total = cum[-1]
        # Inverse transform: a uniform draw in [0, total) lands in rank r's
        # interval with probability weights[r] / total.
        self.requests = [by_rank[min(bisect.bisect_right(cum, rng.random() * total), keys - 1)]
                         for _ in range(requests)]

    def working_set_bytes(self, unit=4 * KiB):
        """Bytes of every key the trace asks for at least once."""
        return sum(occupied(self.sizes[k], unit) for k in set(self.requests))

    def __len__(self):
        return len(self.requests)


def zipf_weights(n, alpha):
    """Unnormalised Zipf weights of ranks 1..n (index 0 is rank 1)."""
    return [1.0 / (r ** alpha) for r in range(1, n + 1)]


def occupied(size, unit):
    """Bytes a file of `size` bytes occupies with allocation unit `unit`."""
    return -(-size // unit) * unit


class Result:
    """Hits and misses of a replay; `evicted` keys in eviction order."""

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.evicted = []
        self.passes = 0
        self.peak = 0

    @property
    def hit_rate(self):
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def as_dict(self):
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hit_rate,
                "evictions": len(self.evicted), "passes": self.passes, "peak_bytes": self.peak}


def lru_hits(requests, sizes, capacity, unit=4 * KiB):
    """Plain LRU holding at most `capacity` bytes of keys (a key larger than
    the capacity is never held)."""
    cache = OrderedDict()
    used = 0
    r = Result()
    for k in requests:
        if k in cache:
            r.hits += 1
            cache.move_to_end(k)
            continue
        r.misses += 1
        b = occupied(sizes[k], unit)
        cache[k] = b
        used += b
        while used > capacity:
            old, ob = cache.popitem(last=False)
            used -= ob
            r.evicted.append(old)
        r.peak = max(r.peak, used)
    return r


def watermark_hits(requests, sizes, high, low, base=0, unit=4 * KiB):
    """LRU between watermarks (bytes used, `base` included): after a store,
    if used >= `high`, the least recently used keys go until used <= `low`
    (the store itself stays: it is the most recent)."""
    if low >= high:
        raise ValueError("the low watermark must be below the high one")
    cache = OrderedDict()
    used = base
    r = Result()
    for k in requests:
        if k in cache:
            r.hits += 1
            cache.move_to_end(k)
            continue
        r.misses += 1
        b = occupied(sizes[k], unit)
        cache[k] = b
        used += b
        r.peak = max(r.peak, used - base)
        if used >= high:
            r.passes += 1
            while used > low and len(cache) > 1:
                old, ob = cache.popitem(last=False)
                used -= ob
                r.evicted.append(old)
    return r


def watermark_bytes(total, high_pct, low_pct):
    """kvfs's watermarks in bytes for a data space of `total` bytes, rounded
    as fs/eviction.cc rounds them (total / 100 * pct, integer division)."""
    return total // 100 * high_pct, total // 100 * low_pct
