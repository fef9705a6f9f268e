"""vLLM's filesystem tier: R reader and W writer threads over hashed
directories, O_DIRECT, a store skipped when its file exists.

A key's file is ROOT_r0/HHH/HH_g0/HASH.bin (HHH and HH: the first hex digits
of HASH). Before a round's I/O, O_DIRECT is probed as the tier does: one
aligned 4 KiB read of a file with O_DIRECT; if the filesystem refuses it,
the round runs buffered (and its rows say so). Store, per key: stat (a file
that exists is skipped); mkdir -p of its directory; open(tmp,
O_CREAT|O_WRONLY|O_TRUNC|O_DIRECT); one write; close; rename. Load, per key:
open(O_DIRECT); one read; close. Key i goes to writer i mod W and reader
i mod R. Per chunk size, with N keys of it (--vllm-bytes / size, at least
one per thread):

  store              W writers store N new keys
  store existing     the same N keys again: every one is skipped (keys/s)
  load               caches dropped, R readers load the N keys
  reload             the same loads again
  load during stores caches dropped, R readers load the N keys while W
  store during loads writers store N other new keys; each group's time is
                     from its first start to its last end
  store p50/p99      per stored key (stat to rename), in the store phase and
                     during the loads (ms)
"""
import hashlib
import os
import shutil
import time

from ..common import FAULT, BLOCK, BenchError, fmt_size, percentile
from ..connector import read_into, run_threads, write_all
from ..data import AlignedBuffer

PROBE = ".odirect_probe"


def key_path(root, tag, i):
    h = hashlib.sha256(f"{tag}-{i}".encode()).hexdigest()[:32]
    return os.path.join(f"{root}_r0", h[:3], f"{h[3:5]}_g0", f"{h}.bin")


def probe_direct(root):
    """True when an aligned 4 KiB O_DIRECT read of a file under ROOT_r0
    works, as the tier checks before it uses O_DIRECT."""
    d = f"{root}_r0"
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, PROBE)
    with open(path, "wb") as f:
        f.write(b"\0" * BLOCK)
    buf = AlignedBuffer(1, BLOCK)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
        try:
            return os.preadv(fd, [buf.slot_view(0, BLOCK)], 0) == BLOCK
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        buf.close()
        os.unlink(path)


def store_if_missing(path, view, direct):
    """The tier's store: skipped (False) when the file exists; else mkdir -p,
    tmp, one write, close, rename (True)."""
    try:
        os.stat(path)
        return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
                 | (os.O_DIRECT if direct else 0), 0o644)
    try:
        write_all(fd, view)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    return True


def load_key(path, view, direct):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if direct else 0))
    try:
        return read_into(fd, view)
    finally:
        os.close(fd)


def vllm_keys(cfg, size):
    """Keys of a phase at `size`: --vllm-bytes of them, at least one per
    thread."""
    return max(cfg["vllm_readers"], cfg["vllm_writers"], cfg["vllm_bytes"] // size)


class VllmWorkload:
    def vllm_plan_steps(self):
        c = self.cfg
        return c["rounds"] * len(c["vllm_sizes"]) * len(c["filesystems"])

    def run_vllm_round(self, rnd):
        c = self.cfg
        content = self.content
        for size in c["vllm_sizes"]:
            n = vllm_keys(c, size)
            bufs = [AlignedBuffer(n, size) for _ in range(3)]  # set A, set B, loads
            try:
                for name in self.fs_order(rnd):
                    self.progress.step(f"vllm {fmt_size(size)} x{n} R={c['vllm_readers']} "
                                       f"W={c['vllm_writers']} on {name} "
                                       f"round {rnd + 1}/{c['rounds']}")
                    r = self._vllm_config(self.targets[name], rnd, size, n, content, *bufs)
                    self.progress.result(
                        f"store {r['store']['value']:.0f} MB/s, load {r['load']['value']:.0f} "
                        f"MB/s, reload {r['reload']['value']:.0f} MB/s, mixed load/store "
                        f"{r['load during stores']['value']:.0f}/"
                        f"{r['store during loads']['value']:.0f} MB/s"
                        f"{'' if r['store']['o_direct'] else ' (no O_DIRECT)'}, verified")
            finally:
                for b in bufs:
                    b.close()

    def _vllm_config(self, t, rnd, size, n, content, src_a, src_b, dst):
        c = self.cfg
        readers, writers = c["vllm_readers"], c["vllm_writers"]
        d = os.path.join(t.workdir, f"vllm-r{rnd}-{fmt_size(size)}")
        root = os.path.join(d, "kv")
        os.makedirs(d)
        try:
            direct = probe_direct(root)
            keys_a = [key_path(root, f"a{rnd}", i) for i in range(n)]
            keys_b = [key_path(root, f"b{rnd}", i) for i in range(n)]
            for buf in (src_a, src_b):
                for i in range(n):
                    content.fill(buf.slot_view(i, size), content.next_object())
            common = dict(workload="vllm", fs=t.name, mode="direct" if direct else "buffered",
                          o_direct=direct, size=size, keys=n, round=rnd, bytes=n * size)

            def store(keys, src, tid):
                t0 = time.perf_counter()
                stored, lat = 0, []
                for i in range(tid, n, writers):
                    t1 = time.perf_counter()
                    if store_if_missing(keys[i], src.slot_view(i, size), direct):
                        stored += 1
                        lat.append(time.perf_counter() - t1)
                return t0, time.perf_counter(), stored, lat

            def store_percentiles(op, results):
                lat = [x for r in results for x in r[3]]
                for q, key in ((0.5, "p50"), (0.99, "p99")):
                    self.record(op=f"{op} {key}", value=1e3 * percentile(lat, q), unit="ms",
                                seconds=None, batches=writers, **common)

            def load(tid):
                t0 = time.perf_counter()
                got = [(i, load_key(keys_a[i], dst.slot_view(i, size), direct))
                       for i in range(tid, n, readers)]
                return t0, time.perf_counter(), got

            out = {}
            meter = t.cpu()
            secs, res = run_threads(lambda tid: store(keys_a, src_a, tid), writers, self.stop)
            if sum(r[2] for r in res) != n:
                raise BenchError(f"vllm store on {t.name}: {n - sum(r[2] for r in res)} of {n} "
                                 "new keys were skipped as existing")
            out["store"] = self.record(op="store", seconds=secs, value=n * size / secs / 1e6,
                                       unit="MB/s", batches=writers, **meter.stop(), **common)
            store_percentiles("store", res)
            secs, res = run_threads(lambda tid: store(keys_a, src_a, tid), writers, self.stop)
            if sum(r[2] for r in res):
                raise BenchError(f"vllm store on {t.name}: {sum(r[2] for r in res)} of {n} "
                                 "existing keys were stored again")
            self.record(op="store existing", seconds=secs, value=n / secs, unit="keys/s",
                        batches=writers, **dict(common, bytes=0))
            cold = t.cold()
            for op in ("load", "reload"):
                dst.poison()
                meter = t.cpu()
                secs, res = run_threads(load, readers, self.stop)
                cpu = meter.stop()
                out[op] = self._vllm_verified(t, op, res, keys_a, src_a, dst, dict(
                    common, op=op, seconds=secs, value=n * size / secs / 1e6, unit="MB/s",
                    batches=readers, cold=cold if op == "load" else False, **cpu))
            dst.poison()
            t.cold()
            meter = t.cpu()
            _, res = run_threads(
                lambda tid: load(tid) if tid < readers else store(keys_b, src_b, tid - readers),
                readers + writers, self.stop)
            cpu = meter.stop()
            stored = sum(r[2] for r in res[readers:])
            if stored != n:
                raise BenchError(f"vllm store during loads on {t.name}: {n - stored} of {n} new "
                                 "keys were skipped as existing")
            for op, group, threads in (("load during stores", res[:readers], readers),
                                       ("store during loads", res[readers:], writers)):
                secs = max(r[1] for r in group) - min(r[0] for r in group)
                # The CPU of the phase, shared by its two rows by their bytes.
                fields = dict(common, op=op, seconds=secs, value=n * size / secs / 1e6,
                              unit="MB/s", batches=threads, cold=cold, phase_bytes=2 * n * size,
                              **{k: None if v is None else v / 2 for k, v in cpu.items()})
                if op.startswith("load"):
                    out[op] = self._vllm_verified(t, op, group, keys_a, src_a, dst, fields)
                else:
                    out[op] = self.record(**fields)
                    store_percentiles(op, group)
            return out
        finally:
            if not self.stop.is_set():
                shutil.rmtree(d, ignore_errors=True)

    def _vllm_verified(self, t, op, results, keys, src, dst, fields):
        """Records a load's sample with its verification; BenchError on a
        key that read short or differs from what was stored."""
        size = fields["size"]
        if FAULT == "flip-load-byte" and op == "load":
            dst.view[size // 2] ^= 0xFF
        bad = []
        for _, _, got in results:
            for i, nread in got:
                if nread != size:
                    bad.append(f"{keys[i]}: read {nread} bytes, stored {size}")
                elif not src.same_slot(dst, i, size):
                    bad.append(f"{keys[i]}: bytes differ from what was stored")
        sample = self.record(verified=not bad, mismatches=len(bad), **fields)
        if bad:
            raise BenchError(f"vllm {op} on {t.name} ({fmt_size(size)}): {len(bad)} of "
                             f"{fields['keys']} keys did not verify; first: {bad[0]}")
        return sample
