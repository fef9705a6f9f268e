"""Eviction (-o evict=lru): what a full volume costs a connector's stores,
how well kvfs's LRU keeps what a Zipf trace asks for again, and what an
eviction pass does to loads. Each part formats and mounts a kvfs volume of
its own (DATA_DIR/evict.img at DIR/mnt-evict), sized for it:

  store   the connector's serial store loop (open tmp O_CREAT|O_WRONLY, one
          write, close, rename; buffered) on an empty volume and on a full
          one (filled past the high watermark, so kvfs evicts while the loop
          runs), same mount, -o evict=lru,evict_min_age=0; the order of the
          two alternates by round.
  trace   a Zipf(0.9) trace over keys of 256 KiB..1 MiB (cachesim.Trace): a
          key is loaded if present (a hit: stat, open, one read, close,
          bytes verified), else stored (a miss). The volume's data space is
          sized so that its high watermark holds --evict-capacity of the
          trace's working set. Replayed on kvfs with eviction on
          (evict_min_age=0, 90/80 watermarks), and on kvfs with eviction off
          and strictatime while an outside evictor like llm-d's
          (atime_evictor) scans the tree's atimes and deletes the oldest
          from 90% down to 80%: run as soon as a store leaves the volume at
          90% or more (its best case: it never lets the volume fill), and
          every --evict-scan-ms in a thread (as a daemon would; a store that
          finds the volume full fails with ENOSPC, as it would for a
          connector). Beside them, exact LRU
          simulations of the same trace at the same bytes: between the same
          watermarks (the policy kvfs runs), and plain LRU at the high and at
          the low watermark's bytes.
  pass    serial loads (stat, open, read, close) of 256 KiB keys while
          `kvfsctl evict MOUNT --to 10` (or a write to MOUNT/.kvfs/evict)
          unlinks the 64 KiB files that fill the volume to 85%, against the
          same loads on the idle volume: p50 and p99 latency.
"""
import errno
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from ..atime_evictor import AtimeEvictor, space_used
from ..cachesim import Trace, lru_hits, watermark_bytes, watermark_hits
from ..common import BenchError, KiB, MiB, align_up, fmt_size, parse_list, parse_size, \
    percentile
from ..data import AlignedBuffer, Pattern, key_names
from ..targets import KvfsTarget

# kvfs's default watermarks, used by every part.
HIGH_PCT, LOW_PCT = 90, 80
TRACE_MIN, TRACE_MAX, TRACE_STEP = 256 * KiB, 1024 * KiB, 64 * KiB
TRACE_ALPHA = 0.9
# The pass part: the volume filled to FILL_PCT with FILLER-byte files (below
# the high watermark, so no pass runs by itself), loads of HOT_SIZE keys
# holding HOT_PCT of it, and a pass down to PASS_TO_PCT (the hot keys, used
# last, stay).
FILLER = 64 * KiB
HOT_SIZE = 256 * KiB
HOT_PCT = 4
FILL_PCT = 85
PASS_TO_PCT = 10
# Room for an eviction volume's index beside its image on the --ram tmpfs.
INDEX_BYTES = 256 * MiB
# Where the store part's volume starts and what its loop moves per sample.
STORE_SHARE = 0.5


def evict_trace(cfg):
    return Trace(cfg["evict_keys"], cfg["evict_requests"], alpha=TRACE_ALPHA, seed=cfg["seed"],
                 min_size=TRACE_MIN, max_size=TRACE_MAX, step=TRACE_STEP)


def trace_image_bytes(cfg, trace=None):
    """Image size for the trace part: data space whose high watermark holds
    evict_capacity of the working set (mkfs.kvfs keeps about 1 MiB of the
    image for itself; the measured data space is what the simulations use)."""
    trace = trace or evict_trace(cfg)
    cap = int(trace.working_set_bytes() * cfg["evict_capacity"])
    return align_up(cap * 100 // HIGH_PCT, MiB) + MiB


def evict_image_bytes(cfg):
    """Room for the images the eviction workload formats, and its index:
    two of the largest, as the next part's image is made while the last
    one's space may not be given back yet."""
    return 2 * max(cfg["evict_volume"], trace_image_bytes(cfg)), INDEX_BYTES


def resolve_evict_config(a, cfg, pick):
    cfg["evict_keys"] = pick("evict_keys")
    cfg["evict_requests"] = pick("evict_requests")
    cfg["evict_capacity"] = pick("evict_capacity")
    cfg["evict_sizes"] = parse_list(pick("evict_sizes"), parse_size, "--evict-sizes")
    cfg["evict_volume"] = parse_size(str(pick("evict_volume")))
    cfg["evict_scan_ms"] = pick("evict_scan_ms")
    if cfg["evict_keys"] < 2 or cfg["evict_requests"] < 1:
        raise BenchError("--evict-keys must be at least 2 and --evict-requests at least 1")
    if not 0 < cfg["evict_capacity"] < 1:
        raise BenchError("--evict-capacity must be a fraction between 0 and 1 (0.3: 30%)")
    if cfg["evict_scan_ms"] <= 0:
        raise BenchError("--evict-scan-ms must be positive")
    if cfg["evict_volume"] < 64 * MiB:
        raise BenchError("--evict-volume must be at least 64M")
    for s in cfg["evict_sizes"]:
        # A store in flight must be small beside the room above the high
        # watermark, or the loop would measure the writers' wait alone.
        if s <= 0 or s % 4096 or s * 4 > cfg["evict_volume"] * (100 - HIGH_PCT) // 100:
            raise BenchError(f"--evict-sizes {fmt_size(s)}: must be a positive multiple of 4096 "
                             "and small beside the volume's room above the high watermark "
                             "(give a larger --evict-volume)")


def used_bytes(mnt):
    return space_used(mnt)[0]


def eviction_stats(mnt):
    """The "eviction" object of MOUNT/.kvfs/stats, or {} without one."""
    try:
        with open(os.path.join(mnt, ".kvfs", "stats")) as f:
            return json.load(f).get("eviction") or {}
    except (OSError, ValueError):
        return {}


def stats_delta(before, after):
    return {k: after[k] - before.get(k, 0) for k in ("files", "bytes", "passes", "writer_waits",
                                                      "writer_wait_s")
            if isinstance(after.get(k), (int, float))}


def store_one(path, tmp, view):
    """The connector's store: open tmp, one write, close, rename. False when
    the volume is full (ENOSPC; the tmp file is removed)."""
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            n = os.write(fd, view)
            while n < len(view):
                n += os.write(fd, view[n:])
        finally:
            os.close(fd)
        os.rename(tmp, path)
        return True
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        return False


MISSING, RACE = -1, -2


def load_one(path, view):
    """A load: stat, open, one read, close. The bytes read, or MISSING (stat
    found no name) or RACE (stat found it, open did not: it was evicted in
    between)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return MISSING
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return RACE
    try:
        n = os.readv(fd, [view])
        while 0 < n < len(view):
            m = os.readv(fd, [view[n:]])
            if m == 0:
                break
            n += m
    finally:
        os.close(fd)
    return n


def wait_until(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class EvictionWorkload:
    # ------------------------------------------------------------ volumes

    def _evict_mount(self, size, options):
        t = KvfsTarget(self, self.mnt_dir("mnt-evict"),
                       image=os.path.join(self.data_dir, "evict.img"), options=options)
        t.log_path = os.path.join(self.dir, "kvfs-evict.log")
        self.extra_targets.append(t)
        t.format(size)
        t.start()
        t.prepare_workdir()
        return t

    def _evict_unmount(self, t):
        try:
            t.teardown(False)
        finally:
            self.extra_targets.remove(t)

    def evict_plan_steps(self):
        c = self.cfg
        return c["rounds"] * (2 * len(c["evict_sizes"]) + 3 + 1)

    def _evict_pattern(self):
        if getattr(self, "evict_pat", None) is None:
            self.evict_pat = Pattern(max(self.cfg["evict_sizes"] + [TRACE_MAX, HOT_SIZE]),
                                     seed=self.cfg["seed"])
        return self.evict_pat

    def run_evict_round(self, rnd):
        self._evict_store_round(rnd)
        self._evict_trace_round(rnd)
        self._evict_pass_round(rnd)

    # ------------------------------------------------------------ store loop

    def _store_series(self, t, d, prefix, size, nbytes):
        """Stores keys of `size` until `nbytes` are stored; returns (keys,
        offsets, seconds, ENOSPC failures, CPU)."""
        pat = self._evict_pattern()
        count = max(1, nbytes // size)
        keys, tmps = key_names(d, prefix, count)
        offs = [pat.next_offset() for _ in range(count)]
        views = [pat.data(o, size) for o in offs]
        failed = 0
        meter = t.cpu()
        t0 = time.perf_counter()
        for path, tmp, view in zip(keys, tmps, views):
            if not store_one(path, tmp, view):
                failed += 1
        secs = time.perf_counter() - t0
        return keys, offs, secs, failed, meter.stop()

    def _verify_tail(self, t, keys, offs, size, n=16):
        """Reads back the last n keys stored (the most recent: never the
        ones evicted) and checks every byte."""
        pat = self._evict_pattern()
        buf = AlignedBuffer(1, size)
        try:
            for path, off in list(zip(keys, offs))[-n:]:
                got = load_one(path, buf.slot_view(0, size))
                if got != size or not pat.matches(buf, 0, off, size):
                    raise BenchError(f"evict store on {t.name}: {path.decode()} read back "
                                     f"{'missing' if got < 0 else f'{got} bytes'} or with other "
                                     "bytes than stored")
        finally:
            buf.close()

    def _evict_store_round(self, rnd):
        c = self.cfg
        for size in c["evict_sizes"]:
            t = self._evict_mount(c["evict_volume"], "evict=lru,evict_min_age=0")
            try:
                base, total = space_used(t.mnt)
                high, low = watermark_bytes(total, HIGH_PCT, LOW_PCT)
                nbytes = int(total * STORE_SHARE)
                states = ["empty", "full"] if rnd % 2 == 0 else ["full", "empty"]
                res = {}
                for i, state in enumerate(states):
                    self.progress.step(f"evict store {fmt_size(size)} x{nbytes // size} on the "
                                       f"{state} volume (evict=lru) round {rnd + 1}/{c['rounds']}")
                    d = os.path.join(t.workdir, f"{state}-{i}")
                    if state == "empty":
                        shutil.rmtree(t.workdir)
                        os.makedirs(t.workdir)
                        if not wait_until(lambda: used_bytes(t.mnt) <= base + MiB, 30):
                            raise BenchError("evict store: the emptied volume still uses "
                                             f"{fmt_size(used_bytes(t.mnt) - base)}")
                    else:
                        # Past the high watermark and one pass more, untimed.
                        fill = os.path.join(t.workdir, f"fill-{i}")
                        os.makedirs(fill)
                        need = max(0, high - used_bytes(t.mnt)) + (high - low)
                        self._store_series(t, fill, f"fill{rnd}.{i}", size, need)
                        wait_until(lambda: used_bytes(t.mnt) < high, 10)
                    os.makedirs(d)
                    ev0 = eviction_stats(t.mnt)
                    used0 = used_bytes(t.mnt)
                    keys, offs, secs, failed, cpu = self._store_series(
                        t, d, f"s{rnd}.{i}", size, nbytes)
                    ev = stats_delta(ev0, eviction_stats(t.mnt))
                    self._verify_tail(t, keys, offs, size)
                    moved = len(keys) * size
                    res[state] = self.record(
                        workload="evict", op=f"store {state}", fs="kvfs", mode="buffered",
                        size=size, batches=1, keys=len(keys), round=rnd, seconds=secs,
                        value=moved / secs / 1e9, unit="GB/s", stores_per_s=len(keys) / secs,
                        bytes=moved, enospc=failed, used_pct_at_start=100 * used0 / total,
                        eviction=ev, verified=True, **cpu)
                    self.progress.result(
                        f"{res[state]['value']:.2f} GB/s, {len(keys) / secs:.0f} stores/s, "
                        f"{failed} ENOSPC, evicted {ev.get('files', '?')} files")
                    if failed:
                        raise BenchError(f"evict store: {failed} of {len(keys)} stores on the "
                                         f"{state} volume got ENOSPC with eviction on")
                self.record(workload="evict", op="store full/empty", fs="kvfs", mode="buffered",
                            size=size, batches=1, keys=res["full"]["keys"], round=rnd,
                            seconds=None, value=res["full"]["value"] / res["empty"]["value"],
                            unit="x", verified=True)
            finally:
                self._evict_unmount(t)

    # ------------------------------------------------------------ Zipf trace

    def _replay(self, t, trace, d, evictor=None, on_crossing=False):
        """Replays the trace under d; returns the counts and latencies. An
        outside `evictor` runs in its thread, or with `on_crossing` right
        after each store that leaves the volume at its high watermark or
        above (an evictor that notices at once: no overshoot)."""
        pat = self._evict_pattern()
        keys, tmps = key_names(d, "zipf", trace.keys)
        offs = self.trace_offs
        buf = AlignedBuffer(1, TRACE_MAX)
        hits = misses = races = enospc = bad = 0
        load_s = []
        _, total = space_used(t.mnt)
        peak = 0
        high = total // 100 * HIGH_PCT
        if evictor and not on_crossing:
            evictor.start()
        t0 = time.perf_counter()
        try:
            for k in trace.requests:
                size = trace.sizes[k]
                view = buf.slot_view(0, size)
                l0 = time.perf_counter()
                got = load_one(keys[k], view)
                if got >= 0:
                    load_s.append(time.perf_counter() - l0)
                    hits += 1
                    if got != size or not pat.matches(buf, 0, offs[k], size):
                        bad += 1
                    continue
                misses += 1
                races += got == RACE
                if not store_one(keys[k], tmps[k], pat.data(offs[k], size)):
                    enospc += 1
                used = used_bytes(t.mnt)
                peak = max(peak, used)
                if on_crossing and used >= high:
                    evictor.check()
        finally:
            if evictor and not on_crossing:
                evictor.stop()
            buf.close()
        secs = time.perf_counter() - t0
        if bad:
            raise BenchError(f"evict trace on {t.name}: {bad} loads read other bytes than stored")
        return {"hits": hits, "misses": misses, "hit_rate": hits / len(trace), "races": races,
                "enospc": enospc, "seconds": secs, "requests_per_s": len(trace) / secs,
                "load_p50_ms": 1e3 * percentile(load_s, 0.5) if load_s else None,
                "load_p99_ms": 1e3 * percentile(load_s, 0.99) if load_s else None,
                "peak_used_pct": 100 * peak / total}

    def _evict_trace_round(self, rnd):
        c = self.cfg
        if getattr(self, "trace", None) is None:
            self.trace = evict_trace(c)
            pat = self._evict_pattern()
            self.trace_offs = [pat.next_offset() for _ in range(self.trace.keys)]
        trace = self.trace
        image = trace_image_bytes(c, trace)
        ws = trace.working_set_bytes()
        common = dict(workload="evict", mode="buffered", size=0, batches=1, keys=trace.keys,
                      round=rnd, requests=len(trace), working_set=ws, unit="%", verified=True)
        interval = c["evict_scan_ms"] / 1000
        outside = "evict=off,strictatime"
        runs = [("kvfs", f"evict=lru,evict_min_age=0,evict_high={HIGH_PCT},evict_low={LOW_PCT}",
                 None),
                ("llm-d", outside, "crossing"),
                (f"llm-d every {c['evict_scan_ms']:g} ms", outside, interval)]
        if rnd % 2:
            runs.reverse()
        for who, options, scan in runs:
            label = ("kvfs evict=lru" if scan is None else
                     "an atime evictor run as a store crosses the high watermark "
                     "(kvfs evict=off, strictatime)" if scan == "crossing" else
                     f"an atime evictor every {c['evict_scan_ms']:g} ms (kvfs evict=off, "
                     "strictatime)")
            self.progress.step(f"evict Zipf({TRACE_ALPHA}) trace of {len(trace)} requests over "
                               f"{trace.keys} keys, {label}, round {rnd + 1}/{c['rounds']}")
            t = self._evict_mount(image, options)
            try:
                base, total = space_used(t.mnt)
                d = os.path.join(t.workdir, "trace")
                os.makedirs(d)
                evictor = None if scan is None else AtimeEvictor(
                    t.mnt, d, HIGH_PCT, LOW_PCT, interval=scan if scan != "crossing" else None)
                ev0 = eviction_stats(t.mnt)
                r = self._replay(t, trace, d, evictor, on_crossing=scan == "crossing")
                r["eviction"] = (stats_delta(ev0, eviction_stats(t.mnt)) if scan is None
                                 else evictor.counters())
            finally:
                self._evict_unmount(t)
            self.record(**{**r, **common, "op": f"hit rate {who}", "fs": "kvfs",
                           "value": 100 * r["hit_rate"], "data_bytes": total, "base_bytes": base})
            self.progress.result(f"hit rate {100 * r['hit_rate']:.2f}%, {r['races']} races, "
                                 f"{r['enospc']} ENOSPC, peak {r['peak_used_pct']:.1f}% used, "
                                 f"{r['requests_per_s']:.0f} requests/s")
            if who == "kvfs":
                high, low = watermark_bytes(total, HIGH_PCT, LOW_PCT)
                sims = (("sim watermarks", watermark_hits(trace.requests, trace.sizes, high, low,
                                                          base=base)),
                        ("sim LRU at high", lru_hits(trace.requests, trace.sizes, high - base)),
                        ("sim LRU at low", lru_hits(trace.requests, trace.sizes, low - base)))
                for name, s in sims:
                    self.record(**{**s.as_dict(), **common, "op": name, "fs": "sim",
                                   "value": 100 * s.hit_rate, "seconds": None,
                                   "data_bytes": total, "base_bytes": base})
                kvfs_rate, sim_rate = 100 * r["hit_rate"], 100 * sims[0][1].hit_rate
                self.record(op="kvfs - sim", fs="kvfs", value=kvfs_rate - sim_rate,
                            seconds=None, **{**common, "unit": "points"})
            elif who == "llm-d":
                llmd_rate = 100 * r["hit_rate"]
        self.record(op="kvfs - llm-d", fs="kvfs", value=kvfs_rate - llmd_rate, seconds=None,
                    **{**common, "unit": "points"})

    # ------------------------------------------------------------ pass latency

    def _pass_command(self, t):
        """How to run a pass down to PASS_TO_PCT now: a kvfsctl command, or
        the control file; None if this kvfs has neither."""
        cands = [os.path.join(os.path.dirname(self.kvfs_bin), "kvfsctl"),
                 os.environ.get("KVFSCTL_BIN"), shutil.which("kvfsctl"),
                 shutil.which("kvfsctl", path="/usr/local/sbin:/usr/sbin:/sbin")]
        for ctl in cands:
            if ctl and os.access(ctl, os.X_OK):
                r = subprocess.run([ctl, "evict", "--help"], capture_output=True, text=True)
                if r.returncode == 0 and "--to" in r.stdout:
                    return [ctl, "evict", t.mnt, "--to", str(PASS_TO_PCT)]
                break
        if os.path.exists(os.path.join(t.mnt, ".kvfs", "evict")):
            return [sys.executable, "-c",
                    "import sys; open(sys.argv[1], 'w').write(sys.argv[2] + '\\n')",
                    os.path.join(t.mnt, ".kvfs", "evict"), str(PASS_TO_PCT)]
        return None

    def _evict_pass_round(self, rnd):
        c = self.cfg
        size = c["evict_volume"]
        self.progress.step(f"evict pass: {fmt_size(HOT_SIZE)} loads idle and during a pass "
                           f"from {FILL_PCT}% to {PASS_TO_PCT}%, round {rnd + 1}/{c['rounds']}")
        t = self._evict_mount(size, "evict=lru,evict_min_age=0")
        pat = self._evict_pattern()
        buf = AlignedBuffer(1, HOT_SIZE)
        try:
            cmd = self._pass_command(t)
            if cmd is None:
                self.progress.result("not available: no kvfsctl evict and no MOUNT/.kvfs/evict")
                self.record(workload="evict", op="pass", fs="kvfs", mode="-", size=0,
                            batches=1, keys=0, round=rnd, seconds=None, value=None, unit="-",
                            available=False, reason="no kvfsctl evict, no .kvfs/evict")
                return
            base, total = space_used(t.mnt)
            filler = os.path.join(t.workdir, "filler")
            hot_d = os.path.join(t.workdir, "hot")
            os.makedirs(filler)
            os.makedirs(hot_d)
            # Filler first (the oldest: what the pass takes), then the hot keys.
            nfill = max(0, (total * FILL_PCT // 100 - base) - total * HOT_PCT // 100) // FILLER
            self._store_series(t, filler, f"f{rnd}", FILLER, nfill * FILLER)
            nhot = max(1, total * HOT_PCT // 100 // HOT_SIZE)
            hot, hot_offs, _, failed, _ = self._store_series(t, hot_d, f"h{rnd}", HOT_SIZE,
                                                             nhot * HOT_SIZE)
            if failed:
                raise BenchError(f"evict pass: {failed} stores got ENOSPC while filling")
            view = buf.slot_view(0, HOT_SIZE)
            bad = [0]

            def load(i):
                k = i % len(hot)
                l0 = time.perf_counter()
                got = load_one(hot[k], view)
                dt = time.perf_counter() - l0
                if got != HOT_SIZE or not pat.matches(buf, 0, hot_offs[k], HOT_SIZE):
                    bad[0] += 1
                return dt

            for i in range(len(hot)):  # every hot key in the RAM cache, most recent
                load(i)
            n_idle = max(1000, 4 * len(hot))
            idle = [load(i) for i in range(n_idle)]
            used_before = used_bytes(t.mnt)
            ev0 = eviction_stats(t.mnt)
            busy = []
            p0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            i = 0
            while proc.poll() is None:
                busy.append(load(i))
                i += 1
            pass_s = time.perf_counter() - p0
            out = proc.stdout.read().strip()
            proc.stdout.close()
            # The last load may have ended after the pass; it counts as during.
            if proc.returncode != 0:
                raise BenchError(f"evict pass: {' '.join(cmd)}: exit {proc.returncode}: {out}")
            ev = stats_delta(ev0, eviction_stats(t.mnt))
            used_after = used_bytes(t.mnt)
            if bad[0]:
                raise BenchError(f"evict pass: {bad[0]} loads missed or read other bytes")
            if len(busy) < 100:
                self.progress.message(f"kvfs-bench: warning: the pass lasted {pass_s:.3f} s, only "
                                      f"{len(busy)} loads ran during it (p99 is rough)")
            common = dict(workload="evict", fs="kvfs", mode="buffered", size=HOT_SIZE,
                          batches=1, keys=len(hot), round=rnd, verified=True)
            r_idle = self.record(op="load p99 idle", value=1e3 * percentile(idle, 0.99),
                                 p50_ms=1e3 * percentile(idle, 0.5), loads=len(idle),
                                 seconds=sum(idle), unit="ms", **common)
            r_busy = self.record(op="load p99 during pass", value=1e3 * percentile(busy, 0.99),
                                 p50_ms=1e3 * percentile(busy, 0.5), loads=len(busy),
                                 seconds=pass_s, unit="ms", pass_seconds=pass_s,
                                 used_pct_before=100 * used_before / total,
                                 used_pct_after=100 * used_after / total, eviction=ev,
                                 command=cmd[:2], output=out[-200:], **common)
            self.record(op="load p99 pass/idle", value=r_busy["value"] / r_idle["value"],
                        seconds=None, unit="x", **common)
            self.progress.result(
                f"idle p50/p99 {r_idle['p50_ms']:.3f}/{r_idle['value']:.3f} ms, during the pass "
                f"({pass_s:.2f} s, {ev.get('files', '?')} files, {len(busy)} loads) "
                f"{r_busy['p50_ms']:.3f}/{r_busy['value']:.3f} ms")
        finally:
            buf.close()
            self._evict_unmount(t)


# ---------------------------------------------------------------- report

TARGETS = {"store full/empty": (">=", 0.9), "kvfs - sim": ("abs<=", 1.0),
           "kvfs - llm-d": (">=", 0.0), "load p99 pass/idle": ("<=", 1.5)}


def summarize_evict(samples):
    """Rows: median [min-max] per (op, size) over rounds, with the target
    of the issue where there is one and whether the median meets it."""
    groups, order = {}, []
    for s in samples:
        if s.get("workload") != "evict" or s.get("value") is None:
            continue
        key = (s["op"], s["size"])
        if key not in groups:
            groups[key] = {"unit": s["unit"], "vals": [], "extra": {}}
            order.append(key)
        g = groups[key]
        g["vals"].append(s["value"])
        for k in ("stores_per_s", "cpu_daemon_s", "bytes", "p50_ms", "loads", "enospc", "races",
                  "peak_used_pct"):
            if s.get(k) is not None:
                g["extra"].setdefault(k, []).append(s[k])
    rows = []
    for op, size in order:
        g = groups[(op, size)]
        v = g["vals"]
        row = {"op": op, "size": size, "unit": g["unit"], "median": statistics.median(v),
               "min": min(v), "max": max(v), "n": len(v)}
        ex = g["extra"]
        if "stores_per_s" in ex:
            row["stores_per_s"] = statistics.median(ex["stores_per_s"])
        if "cpu_daemon_s" in ex and ex.get("bytes"):
            row["cpu_daemon_s_per_gib"] = sum(ex["cpu_daemon_s"]) / (sum(ex["bytes"]) / (1 << 30))
        if "peak_used_pct" in ex:
            row["peak_used_pct"] = max(ex["peak_used_pct"])
        if "p50_ms" in ex:
            row["p50_ms"] = statistics.median(ex["p50_ms"])
            row["loads"] = statistics.median(ex["loads"])
        for k in ("enospc", "races"):
            if k in ex:
                row[k] = sum(ex[k])
        if op in TARGETS:
            how, want = TARGETS[op]
            m = row["median"]
            row["target"] = f"{'|x| <= ' if how == 'abs<=' else how + ' '}{want:g}"
            row["meets"] = (abs(m) <= want if how == "abs<=" else
                            m >= want if how == ">=" else m <= want)
        rows.append(row)
    return rows


def format_evict_report(rows, cfg):
    from ..report import render_table
    if not rows:
        return ""
    table = []
    for r in rows:
        unit = r["unit"]
        fmt = ((lambda x: f"{x:.3f}") if unit in ("ms", "GB/s") else
               (lambda x: f"{x:.2f}"))
        cell = fmt(r["median"]) if r["n"] == 1 else \
            f"{fmt(r['median'])} [{fmt(r['min'])}-{fmt(r['max'])}]"
        notes = []
        if "stores_per_s" in r:
            notes.append(f"{r['stores_per_s']:.0f} stores/s")
        if "cpu_daemon_s_per_gib" in r:
            notes.append(f"daemon {r['cpu_daemon_s_per_gib']:.2f} CPU s/GiB")
        if "p50_ms" in r:
            notes.append(f"p50 {r['p50_ms']:.3f} ms, {r['loads']:.0f} loads")
        if "peak_used_pct" in r:
            notes.append(f"peak {r['peak_used_pct']:.1f}% used")
        if r.get("enospc"):
            notes.append(f"{r['enospc']} ENOSPC")
        if r.get("races"):
            notes.append(f"{r['races']} stat-then-open races")
        target = "-"
        if "target" in r:
            target = f"{r['target']} {'ok' if r['meets'] else 'MISSED'}"
        table.append([r["op"], fmt_size(r["size"]) if r["size"] else "-", unit, cell, target,
                      "; ".join(notes)])
    return (f"Eviction (-o evict=lru, watermarks {HIGH_PCT}/{LOW_PCT}%): median [min-max] over "
            f"{cfg['rounds']} round(s). Zipf({TRACE_ALPHA}) trace: {cfg['evict_requests']} "
            f"requests over {cfg['evict_keys']} keys of {fmt_size(TRACE_MIN)}..{fmt_size(TRACE_MAX)}"
            f", high watermark = {100 * cfg['evict_capacity']:.0f}% of the working set; "
            "sim = exact LRU of the same trace at the same bytes\n"
            + render_table(["measure", "chunk", "unit", "value", "target", "notes"], table))
