"""Whole-sequence objects: one file per request's whole KV, hundreds of MiB
to GiB, stored and loaded by T threads at once.

Store, per object: open(O_CREAT|O_WRONLY|O_TRUNC); one buffered write of the
whole object; fsync; close. Load, per object: open; posix_fadvise(DONTNEED);
a 4 KiB header read; one buffered read of the rest; close. The threads move
one object each at a time, in waves (all start together; a wave's time is
from the first start to the last end); the figures are the waves' bytes over
their summed time, so that filling and verifying buffers between waves is
not timed. Loads run cold (caches dropped after the stores), then again
(reload: only the loader's own fadvise in between).
"""
import os
import shutil
import time

from ..common import FAULT, MiB, BenchError, fmt_size, percentile
from ..connector import read_into, run_threads, write_all
from ..data import AlignedBuffer
from ..sampling import add_cpu

HEADER = 4096
# Verification regenerates an object this many bytes at a time.
VERIFY_SLICE = 64 * MiB


def store_object(path, view):
    """One buffered write of the whole object, then fsync. Seconds taken."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, view)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def load_object(path, view):
    """fadvise(DONTNEED), a header read, then one read of the rest into
    `view` (the header is copied to its start). (bytes read, seconds)."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        head = os.read(fd, min(HEADER, len(view)))
        n = len(head) + read_into(fd, view[len(head):])
    finally:
        os.close(fd)
    secs = time.perf_counter() - t0
    view[:len(head)] = head
    return n, secs


class WholeseqWorkload:
    def wholeseq_plan_steps(self):
        c = self.cfg
        return c["rounds"] * len(c["object_sizes"]) * len(c["filesystems"])

    def run_wholeseq_round(self, rnd):
        c = self.cfg
        content = self.content
        threads = c["object_threads"]
        bufs = [AlignedBuffer(1, max(c["object_sizes"])) for _ in range(threads)]
        scratch = AlignedBuffer(1, min(VERIFY_SLICE, max(c["object_sizes"])))
        try:
            for size in c["object_sizes"]:
                for name in self.fs_order(rnd):
                    t = self.targets[name]
                    self.progress.step(f"wholeseq {fmt_size(size)} x{c['object_count']} "
                                       f"T={threads} on {name} round {rnd + 1}/{c['rounds']}")
                    r = self._wholeseq_config(t, rnd, size, content, bufs, scratch)
                    self.progress.result(
                        f"store+fsync {r['store']['value']:.0f} MB/s, load "
                        f"{r['load']['value']:.0f} MB/s (p95 {r['p95']['value']:.0f} ms), "
                        f"reload {r['reload']['value']:.0f} MB/s, verified")
        finally:
            for b in bufs + [scratch]:
                b.close()

    def _wholeseq_config(self, t, rnd, size, content, bufs, scratch):
        c = self.cfg
        threads, count = c["object_threads"], c["object_count"]
        d = os.path.join(t.workdir, f"wholeseq-r{rnd}-{fmt_size(size)}")
        os.makedirs(d)
        # waves[w][tid]: (path, object) of the object thread tid moves in wave w.
        waves = [[(os.path.join(d, f"req-{w:03d}-{tid:02d}.kv"), content.next_object())
                  for tid in range(threads)] for w in range(count)]
        views = [b.slot_view(0, size) for b in bufs]
        common = dict(workload="wholeseq", fs=t.name, mode="buffered", size=size,
                      batches=threads, keys=count * threads, round=rnd,
                      bytes=size * count * threads)
        try:
            secs, cpu, store_lat = 0.0, None, []
            for wave in waves:
                for tid, (_, obj) in enumerate(wave):
                    content.fill(views[tid], obj)
                meter = t.cpu()
                s, lat = run_threads(lambda tid: store_object(wave[tid][0], views[tid]),
                                     threads, self.stop)
                cpu = add_cpu(cpu, meter.stop())
                secs += s
                store_lat += lat
            out = {"store": self.record(
                op="store", seconds=secs, value=common["bytes"] / secs / 1e6, unit="MB/s",
                object_ms=[1e3 * x for x in store_lat], **cpu, **common)}
            cold = t.cold()
            for op in ("load", "reload"):
                secs, cpu, lat, bad = self._wholeseq_loads(t, size, waves, content, bufs,
                                                           scratch, fault=op == "load")
                out[op] = self.record(op=op, seconds=secs, value=common["bytes"] / secs / 1e6,
                                      unit="MB/s", verified=not bad, mismatches=len(bad),
                                      cold=cold if op == "load" else False,
                                      object_ms=[1e3 * x for x in lat], **cpu, **common)
                if bad:
                    raise BenchError(f"wholeseq {op} on {t.name} ({fmt_size(size)}): {len(bad)} "
                                     f"of {len(lat)} objects did not verify; first: {bad[0]}")
                if op == "load":
                    for q, key in ((0.5, "p50"), (0.95, "p95")):
                        out[key] = self.record(op=f"load {key}",
                                               value=1e3 * percentile(lat, q), unit="ms",
                                               seconds=None, verified=True, **common)
            return out
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    def _wholeseq_loads(self, t, size, waves, content, bufs, scratch, fault):
        """Loads every object, a wave at a time, and verifies each: (seconds,
        CPU, per-object seconds, what did not verify)."""
        secs, cpu, lat, bad = 0.0, None, [], []
        for wave in waves:
            for b in bufs:
                b.poison()
            meter = t.cpu()
            s, got = run_threads(lambda tid: load_object(wave[tid][0],
                                                         bufs[tid].slot_view(0, size)),
                                 len(wave), self.stop)
            cpu = add_cpu(cpu, meter.stop())
            secs += s
            if fault and FAULT == "flip-load-byte":
                bufs[0].view[size // 2] ^= 0xFF
                fault = False
            for tid, (path, obj) in enumerate(wave):
                nread, took = got[tid]
                lat.append(took)
                if nread != size:
                    bad.append(f"{path}: read {nread} bytes, stored {size}")
                    continue
                pos = content.first_difference(bufs[tid].addr, size, obj, scratch)
                if pos is not None:
                    bad.append(f"{path}: bytes differ from what was stored, first in the "
                               f"4 KiB block at offset {pos}")
        return secs, cpu, lat, bad
