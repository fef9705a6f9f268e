"""Storms of stat from one thread, cold caches: names that exist and names
that do not."""
import os
import shutil
import time

from ..common import BLOCK, BenchError
from ..data import key_names


class LookupWorkload:
    def run_lookup_round(self, rnd):
        c = self.cfg
        n = c["lookup_names"]
        for name in self.fs_order(rnd):
            t = self.targets[name]
            self.progress.step(f"lookup storm {n} hits + {n} misses on {name} "
                               f"round {rnd + 1}/{c['rounds']}")
            d = os.path.join(t.workdir, f"lookup-r{rnd}")
            os.makedirs(d)
            try:
                hits, _ = key_names(d, f"lookup-r{rnd}", n)
                misses, _ = key_names(d, f"missing-r{rnd}", n)
                data = self.pattern.data(self.pattern.next_offset(), BLOCK)
                for p in hits:
                    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                    try:
                        os.write(fd, data)
                    finally:
                        os.close(fd)
                results = {}
                for op, names, want in (("hit", hits, True), ("miss", misses, False)):
                    cold = t.cold()
                    found = wrong = 0
                    t0 = time.perf_counter()
                    for p in names:
                        try:
                            st = os.stat(p)
                            found += 1
                            if st.st_size != BLOCK:
                                wrong += 1
                        except FileNotFoundError:
                            pass
                    secs = time.perf_counter() - t0
                    ok = (found == n and wrong == 0) if want else found == 0
                    results[op] = self.record(
                        workload="lookup", op=op, fs=t.name, mode="-", size=0, batches=1,
                        keys=n, round=rnd, seconds=secs, value=n / secs, unit="ops/s",
                        verified=ok, found=found, wrong_size=wrong, cold=cold)
                    if not ok:
                        raise BenchError(f"lookup {op}s on {t.name}: {found} of {n} names found "
                                         f"({wrong} with the wrong size), expected "
                                         f"{n if want else 0}")
                self.progress.result(f"hits {results['hit']['value']:.0f}/s, "
                                     f"misses {results['miss']['value']:.0f}/s")
            finally:
                if not self.stop.is_set():
                    shutil.rmtree(d, ignore_errors=True)
