"""A restore of K chunks, cold, on an idle volume and during a store burst."""
import os
import shutil
import signal
import time

from ..common import BURST_START_FRACTION, GATE, BenchError, fmt_size
from ..connector import load_keys, store_keys
from ..data import AlignedBuffer, _libc, key_names
from ..system import dirty_bytes


class RestoreWorkload:
    def _burst_writer(self, d, offs, size, wfd):
        """Child process: stores one chunk of `size` bytes per offset in
        `offs` with the connector's loop (buffered), one progress byte per
        stored key."""
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        try:
            _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        except Exception:  # noqa: BLE001 -- best effort
            pass
        keys, tmps = key_names(d, "burst", len(offs))
        views = [self.pattern.data(off, size) for off in offs]
        flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
        for path, tmp, view in zip(keys, tmps, views):
            fd = os.open(tmp, flags, 0o644)
            try:
                n = os.write(fd, view)
                while n < len(view):
                    n += os.write(fd, view[n:])
            finally:
                os.close(fd)
            os.rename(tmp, path)
            os.write(wfd, b".")

    def _start_burst(self, d, count, size):
        # Offsets from the parent's counter: later keys never reuse them.
        offs = [self.pattern.next_offset() for _ in range(count)]
        r, w = os.pipe()
        with GATE.critical():
            pid = os.fork()
            if pid == 0:
                # The child never leaves this section (nor returns into the
                # parent's stack): its signals stay deferred until it resets
                # them, and it ends in os._exit.
                code = 1
                try:
                    os.close(r)
                    self._burst_writer(d, offs, size, w)
                    code = 0
                except BaseException as e:  # noqa: B036 -- the child reports and exits
                    try:
                        os.write(2, f"kvfs-bench: burst writer: {e}\n".encode())
                    except OSError:
                        pass
                finally:
                    os._exit(code)
            self.burst_pid = pid
        os.close(w)
        return r

    def _load_restore(self, t, keys, buf, offs, size):
        """Loads and verifies the restore's keys: (seconds, CPU seconds)."""
        meter = t.cpu()
        t0 = time.perf_counter()
        got = load_keys(keys, [buf.slot_view(i, size) for i in range(len(keys))], False,
                        self.stop)
        secs = time.perf_counter() - t0
        cpu = meter.stop()
        bad = [keys[i].decode() for i, nread, st_size in got
               if nread != size or st_size != size
               or not self.pattern.matches(buf, i, offs[i], size)]
        if bad:
            raise BenchError(f"restore on {t.name}: {len(bad)} of {len(keys)} keys did not "
                             f"verify; first: {bad[0]}")
        return secs, cpu

    def run_restore_round(self, rnd):
        c = self.cfg
        k, size, burst = c["restore_keys"], c["restore_size"], c["burst"]
        burst_keys = max(1, burst // size)
        for name in self.fs_order(rnd):
            t = self.targets[name]
            self.progress.step(f"restore {k}x{fmt_size(size)}, idle and during a "
                               f"{fmt_size(burst)} store burst, on {name} "
                               f"round {rnd + 1}/{c['rounds']}")
            d = os.path.join(t.workdir, f"restore-r{rnd}")
            bd = os.path.join(d, "burst")
            os.makedirs(bd)
            buf = AlignedBuffer(k, size)
            try:
                keys, tmps = key_names(d, f"restore-r{rnd}", k)
                offs = [self.pattern.next_offset() for _ in range(k)]
                for i in range(k):
                    self.pattern.fill(buf, i, offs[i], size)
                store_keys(keys, tmps, [buf.slot_view(i, size) for i in range(k)], False,
                           self.stop)
                common = dict(workload="restore", fs=t.name, mode="buffered", size=size,
                              batches=1, keys=k, round=rnd, bytes=k * size, burst=burst)
                buf.poison()
                cold = t.cold()
                idle, cpu = self._load_restore(t, keys, buf, offs, size)
                self.record(op="idle", seconds=idle, value=idle, unit="s", verified=True,
                            cold=cold, **cpu, **common)
                buf.poison()
                t.cold()
                # The burst: another process stores burst_keys chunks; the
                # restore starts once it has issued half of them.
                rfd = self._start_burst(bd, burst_keys, size)
                t_burst = time.perf_counter()
                issued = 0
                threshold = max(1, int(burst_keys * BURST_START_FRACTION))
                while issued < threshold:
                    chunk = os.read(rfd, threshold - issued)
                    if not chunk:
                        break
                    issued += len(chunk)
                at_start = issued
                dirty_start = dirty_bytes()
                busy, cpu = self._load_restore(t, keys, buf, offs, size)
                dirty_end = dirty_bytes()
                os.set_blocking(rfd, False)
                try:
                    while True:
                        chunk = os.read(rfd, 1 << 16)
                        if not chunk:
                            break
                        issued += len(chunk)
                except BlockingIOError:
                    pass
                at_end = issued
                os.set_blocking(rfd, True)
                while True:
                    chunk = os.read(rfd, 1 << 16)
                    if not chunk:
                        break
                    issued += len(chunk)
                os.close(rfd)
                _, status = os.waitpid(self.burst_pid, 0)
                self.burst_pid = None
                burst_secs = time.perf_counter() - t_burst
                if status != 0 or issued != burst_keys:
                    raise BenchError(f"restore on {t.name}: the burst writer failed after "
                                     f"{issued} of {burst_keys} stores (status {status})")
                self.record(op="busy", seconds=busy, value=busy, unit="s", verified=True,
                            burst_issued_at_start=at_start * size,
                            burst_issued_at_end=at_end * size,
                            burst_ended_before_restore=at_end == burst_keys,
                            dirty_bytes_at_start=dirty_start, dirty_bytes_at_end=dirty_end,
                            burst_seconds=burst_secs, **cpu, **common)
                self.record(op="busy/idle", seconds=None, value=busy / idle, unit="x",
                            verified=True, **common)
                self.progress.result(f"idle {idle:.3f} s, busy {busy:.3f} s "
                                     f"({busy / idle:.2f}x), verified")
            finally:
                buf.close()
                if not self.stop.is_set():
                    shutil.rmtree(d, ignore_errors=True)
                    os.sync()
