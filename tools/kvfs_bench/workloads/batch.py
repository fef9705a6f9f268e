"""The kvfs batch ioctl through its Python module: WRITE, READ and EXISTS."""
import os
import shutil
import time

from ..common import BenchError, fmt_size
from ..data import import_kvfs_module


class BatchWorkload:
    def run_batch_round(self, rnd):
        c = self.cfg
        kvfs_mod = import_kvfs_module()
        if kvfs_mod is None:
            reason = "no kvfs Python module (python/kvfs in the source tree, or installed)"
            if rnd == 0:
                self.record(workload="batch", op="batch", fs="kvfs", mode="-", size=0,
                            batches=1, round=0, value=None, unit="-", available=False,
                            reason=reason)
                self.mark("batch", "unavailable", None, reason)
            for n, size in c["batch_shapes"]:
                self.progress.step(f"batch ioctl {n}x{fmt_size(size)}")
                self.progress.result("not available: " + reason)
            return
        t = self.targets["kvfs"]
        # One client for the round, as a connector keeps one: what a batch
        # costs, not what opening a client and its first call cost.
        with kvfs_mod.Client(t.workdir) as client:
            for n, size in c["batch_shapes"]:
                reps = self.repeats(n * size)
                for rep in range(reps):
                    of = f" sample {rep + 1}/{reps}" if reps > 1 else ""
                    self.progress.step(f"batch ioctl {fmt_size(size)} x{n} on kvfs "
                                       f"round {rnd + 1}/{c['rounds']}{of}")
                    self.run_batch_shape(client, t, rnd, rep, n, size)
        self.run_batch_exists(kvfs_mod, t, rnd)

    def run_batch_shape(self, client, t, rnd, rep, n, size):
        """One sample of a batch shape: n keys of `size` stored with one
        write_batch and, caches dropped, loaded with one read_batch, from
        and into a buffer registered for the sample."""
        sub = f"batch-r{rnd}.{rep}-{fmt_size(size)}"
        d = os.path.join(t.workdir, sub)
        os.makedirs(d)
        try:
            with client.register(n * size) as buf:
                names = [f"{sub}/bench-model@8@b{rnd}.{rep}@{i:05d}.data" for i in range(n)]
                offs = [self.pattern.next_offset() for _ in range(n)]
                for i in range(n):
                    buf.view(i * size, size)[:] = self.pattern.data(offs[i], size)
                common = dict(workload="batch", fs="kvfs", mode="ioctl", size=size,
                              batches=1, keys=n, round=rnd, repeat=rep, bytes=size * n)
                meter = t.cpu()
                t0 = time.perf_counter()
                res = client.write_batch(
                    [(names[i], buf.view(i * size, size)) for i in range(n)])
                secs = time.perf_counter() - t0
                cpu = meter.stop()
                failed = [r for r in res if not r.ok]
                if failed:
                    raise BenchError(f"batch store: {len(failed)} of {n} keys failed; "
                                     f"first: {failed[0].name}: {failed[0].error}")
                store = self.record(op="store", seconds=secs, value=size * n / secs / 1e6,
                                    unit="MB/s", **cpu, **common)
                buf.view()[:] = b"\xa5" * buf.size  # nothing stale can verify
                cold = t.cold()
                meter = t.cpu()
                t0 = time.perf_counter()
                res = client.read_batch(names, buf, size=size)
                secs = time.perf_counter() - t0
                cpu = meter.stop()
                bad = []
                for i, r in enumerate(res):
                    if not r.ok or r.value != size:
                        bad.append(f"{names[i]}: {r.error or f'{r.value} bytes'}")
                    elif buf.view(i * size, size) != self.pattern.data(offs[i], size):
                        bad.append(f"{names[i]}: bytes differ from what was stored")
                load = self.record(op="load", seconds=secs, value=size * n / secs / 1e6,
                                   unit="MB/s", verified=not bad, mismatches=len(bad),
                                   cold=cold, **cpu, **common)
                if bad:
                    raise BenchError(f"batch load ({fmt_size(size)}): {len(bad)} of {n} keys "
                                     f"did not verify; first: {bad[0]}")
            self.progress.result(f"store {store['value']:.0f} MB/s, "
                                 f"load {load['value']:.0f} MB/s, verified")
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    def run_batch_exists(self, kvfs_mod, t, rnd):
        """EXISTS of lookup_names names (half of them missing) in one call,
        against an os.path.exists loop over the same names; cold caches.
        Three samples of each per round (one with --sample-bytes 0): a call
        lasts about 20 ms."""
        n = self.cfg["lookup_names"]
        self.progress.step(f"batch exists {n} names on kvfs round {rnd + 1}/{self.cfg['rounds']}")
        d = os.path.join(t.workdir, f"batch-exists-r{rnd}")
        os.makedirs(d)
        try:
            names = [f"bench-model@8@e{rnd}@{i:06d}.data" for i in range(n)]
            for name in names[::2]:
                os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY, 0o644))
            want = [i % 2 == 0 for i in range(n)]
            paths = [os.path.join(d, name) for name in names]
            for rep in range(3 if self.cfg["sample_bytes"] else 1):
                common = dict(workload="batch", fs="kvfs", mode="ioctl", size=0, batches=1,
                              keys=n, round=rnd, repeat=rep, unit="names/s")
                t.cold()
                t0 = time.perf_counter()
                got_loop = [os.path.exists(p) for p in paths]
                loop_s = time.perf_counter() - t0
                t.cold()  # (a remount, without drop_cache, needs no client open)
                with kvfs_mod.Client(d) as client:
                    # The client's entry table is made and registered once, as
                    # a long-running client has it: what is timed is the call.
                    client.exists_batch(["kvfs-bench-not-a-key"])
                    t0 = time.perf_counter()
                    got = client.exists_batch(names)
                    batch_s = time.perf_counter() - t0
                ok = got == want and got_loop == want
                self.record(op="exists loop", seconds=loop_s, value=n / loop_s, verified=ok,
                            **common)
                r = self.record(op="exists", seconds=batch_s, value=n / batch_s, verified=ok,
                                speedup=loop_s / batch_s, **common)
                if not ok:
                    raise BenchError(
                        f"batch exists: {sum(a != b for a, b in zip(got, want))} of {n} "
                        f"answers wrong (os.path.exists: "
                        f"{sum(a != b for a, b in zip(got_loop, want))})")
            self.progress.result(f"{r['value']:.0f} names/s, {loop_s / batch_s:.1f}x "
                                 "an os.path.exists loop")
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)
