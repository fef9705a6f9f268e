"""LMCache's serial store and load loop, N keys per batch, M batches in flight."""
import os
import shutil

from ..common import FAULT, BenchError, fmt_size
from ..connector import load_keys, run_threads, store_keys
from ..data import AlignedBuffer, key_names


class LmcacheWorkload:
    def run_lmcache_config(self, t, rnd, size, m, mode, buf, rep):
        c = self.cfg
        n = c["keys"]
        direct = mode == "direct"
        d = os.path.join(t.workdir, f"lmcache-r{rnd}.{rep}-{fmt_size(size)}-m{m}-{mode}")
        os.makedirs(d)
        names = [key_names(d, f"r{rnd}.{rep}t{tid}", n) for tid in range(m)]
        offs = [[self.pattern.next_offset() for _ in range(n)] for _ in range(m)]
        for tid in range(m):
            for k in range(n):
                self.pattern.fill(buf, tid * n + k, offs[tid][k], size)
        views = [[buf.slot_view(tid * n + k, size) for k in range(n)] for tid in range(m)]
        common = dict(workload="lmcache", fs=t.name, mode=mode, size=size, batches=m, keys=n,
                      round=rnd, repeat=rep, bytes=size * n * m)
        try:
            meter = t.cpu()
            secs, _ = run_threads(
                lambda tid: store_keys(names[tid][0], names[tid][1], views[tid], direct,
                                       self.stop), m, self.stop)
            store = self.record(op="store", seconds=secs, value=size * n * m / secs / 1e6,
                                unit="MB/s", **meter.stop(), **common)
            buf.poison()
            cold = t.cold()
            meter = t.cpu()
            secs, got = run_threads(
                lambda tid: load_keys(names[tid][0], views[tid], direct, self.stop),
                m, self.stop)
            cpu = meter.stop()
            if FAULT == "flip-load-byte":
                buf.view[size // 2] ^= 0xFF
            bad = []
            for tid in range(m):
                for k, nread, st_size in got[tid]:
                    slot = tid * n + k
                    if nread != size or st_size != size:
                        bad.append(f"{names[tid][0][k].decode()}: read {nread} bytes, "
                                   f"stat size {st_size}, stored {size}")
                    elif not self.pattern.matches(buf, slot, offs[tid][k], size):
                        pos = self.pattern.first_difference(buf, slot, offs[tid][k], size)
                        bad.append(f"{names[tid][0][k].decode()}: bytes differ from what was "
                                   f"stored, first in the 4 KiB block at offset {pos}")
            load = self.record(op="load", seconds=secs, value=size * n * m / secs / 1e6,
                               unit="MB/s", verified=not bad, mismatches=len(bad),
                               cold=cold, **cpu, **common)
            if bad:
                raise BenchError(f"lmcache load on {t.name} ({mode}, {fmt_size(size)}, M={m}): "
                                 f"{len(bad)} of {n * m} keys did not verify; first: {bad[0]}")
            # The same keys again, caches as the first load left them (a
            # connector reloading a hot prefix).
            buf.poison()
            meter = t.cpu()
            secs, got = run_threads(
                lambda tid: load_keys(names[tid][0], views[tid], direct, self.stop),
                m, self.stop)
            cpu = meter.stop()
            again_bad = sum(1 for tid in range(m) for k, nread, _ in got[tid]
                            if nread != size or
                            not self.pattern.matches(buf, tid * n + k, offs[tid][k], size))
            self.record(op="reload", seconds=secs, value=size * n * m / secs / 1e6, unit="MB/s",
                        verified=not again_bad, mismatches=again_bad, cold=False, **cpu, **common)
            if again_bad:
                raise BenchError(f"lmcache reload on {t.name} ({mode}, {fmt_size(size)}, M={m}): "
                                 f"{again_bad} of {n * m} keys did not verify")
            return store, load
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    def run_lmcache_round(self, rnd):
        c = self.cfg
        order = self.fs_order(rnd)
        for size in c["sizes"]:
            for m in c["batches"]:
                buf = AlignedBuffer(c["keys"] * m, size)
                reps = self.repeats(c["keys"] * m * size)
                try:
                    for mode in c["modes"]:
                        # kvfs and ext4 alternate, sample by sample.
                        for rep in range(reps):
                            for name in order:
                                t = self.targets[name]
                                of = f" sample {rep + 1}/{reps}" if reps > 1 else ""
                                self.progress.step(
                                    f"lmcache {mode} {fmt_size(size)} x{c['keys']} M={m} on "
                                    f"{name} round {rnd + 1}/{c['rounds']}{of}")
                                store, load = self.run_lmcache_config(t, rnd, size, m, mode,
                                                                      buf, rep)
                                self.progress.result(f"store {store['value']:.0f} MB/s, "
                                                     f"load {load['value']:.0f} MB/s, verified")
                finally:
                    buf.close()
