"""An evictor outside the filesystem, as llm-d runs one: it looks at the
space used every `interval` seconds (statvfs), and once it reaches `high_pct`
of the volume it scans the tree (os.scandir + stat), sorts the files by
atime, and deletes the oldest until the space it frees brings the volume to
`low_pct`. Files used within `min_age` seconds are spared (llm-d spares the
last 60 minutes). It guesses recency from atime, so the filesystem should be
mounted with strictatime for atimes to be exact.

It runs in a thread of its own (start/stop), or its owner calls check()
when it likes (interval None), and counts its scans, the files
and bytes it deleted and the seconds it spent scanning and deleting.
"""
import os
import threading
import time


def scan_files(root):
    """(atime_ns, bytes allocated, path) of every regular file under root;
    files that go while the scan runs are skipped."""
    out = []
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except FileNotFoundError:
            continue
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                        continue
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                out.append((st.st_atime_ns, st.st_blocks * 512, e.path))
    return out


def space_used(path):
    """(bytes used, bytes total) of the filesystem at `path`."""
    v = os.statvfs(path)
    return (v.f_blocks - v.f_bfree) * v.f_frsize, v.f_blocks * v.f_frsize


class AtimeEvictor:
    def __init__(self, mount, root, high_pct, low_pct, interval=0.05, min_age=0.0):
        self.mount = mount
        self.root = root
        self.high_pct = high_pct
        self.low_pct = low_pct
        self.interval = interval
        self.min_age = min_age
        self.settle_s = 2.0
        self.scans = 0
        self.files = 0
        self.bytes = 0
        self.busy_s = 0.0
        self.errors = []
        self._stop = threading.Event()
        self._thread = None

    def check(self):
        """One look: a scan and deletions if used >= high. Returns the
        files deleted."""
        used, total = space_used(self.mount)
        if total == 0 or used < total // 100 * self.high_pct:
            return 0
        t0 = time.perf_counter()
        self.scans += 1
        target = total // 100 * self.low_pct
        now_ns = time.time_ns()
        deleted = 0
        for atime, nbytes, path in sorted(scan_files(self.root)):
            if used <= target:
                break
            if now_ns - atime < self.min_age * 1e9:
                break  # oldest first: every later file is younger still
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            used -= nbytes
            deleted += 1
            self.bytes += nbytes
        self.files += deleted
        # A filesystem may free an unlinked file's space a moment later
        # (kvfs: once the unlink commits). Wait until statvfs shows it, so
        # that the next look does not see the same space and delete again.
        deadline = time.monotonic() + self.settle_s
        while deleted and space_used(self.mount)[0] > target and time.monotonic() < deadline:
            time.sleep(0.002)
        self.busy_s += time.perf_counter() - t0
        return deleted

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except OSError as e:  # reported with the results, the run goes on
                self.errors.append(str(e))

    def start(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def counters(self):
        return {"scans": self.scans, "files": self.files, "bytes": self.bytes,
                "busy_s": self.busy_s, "interval_s": self.interval, "errors": self.errors[:3]}
