"""The connector's loop: LMCache-style store and load of keys, and threads
that run several such loops at once."""
import os
import signal
import threading
import time

from .common import BenchError, Interrupted
from .system import os_error_text


def store_keys(keys, tmps, views, direct, stop):
    """LMCache's store, per key: stat (must be missing); open tmp; one write;
    close; rename. Returns the number of keys stored."""
    flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
    if direct:
        flags |= os.O_DIRECT
    for path, tmp, view in zip(keys, tmps, views):
        if stop.is_set():
            raise Interrupted(signal.SIGINT)
        try:
            os.stat(path)
            raise BenchError(f"{path.decode()}: exists before it was stored")
        except FileNotFoundError:
            pass
        fd = os.open(tmp, flags, 0o644)
        try:
            n = os.write(fd, view)
            while n < len(view):  # a short write; regular files rarely do this
                n += os.write(fd, view[n:])
        finally:
            os.close(fd)
        os.rename(tmp, path)
    return len(keys)


def load_keys(keys, views, direct, stop):
    """A request's load, as LMCache does it: the lookup (stat of every key:
    contains() before the retrieve), then per key: open; one read of the
    whole chunk; close. Returns a list of (key index, bytes read, size from
    stat)."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    if direct:
        flags |= os.O_DIRECT
    sizes = [os.stat(path).st_size for path in keys]
    got = []
    for i, (path, view) in enumerate(zip(keys, views)):
        if stop.is_set():
            raise Interrupted(signal.SIGINT)
        fd = os.open(path, flags)
        try:
            n = os.readv(fd, [view])
            while 0 < n < len(view):  # short read: finish it, and record it
                m = os.readv(fd, [view[n:]])
                if m == 0:
                    break
                n += m
        finally:
            os.close(fd)
        got.append((i, n, sizes[i]))
    return got


def run_threads(fn, count, stop):
    """Runs fn(tid) in `count` threads that start together; returns
    (wall seconds from the first start to the last end, results by tid).
    Raises the first worker error. The main thread waits in join() so that
    signals reach it; on an interrupt the workers see `stop` and end."""
    barrier = threading.Barrier(count)
    starts, ends, results, errors = [0.0] * count, [0.0] * count, [None] * count, []

    def body(tid):
        try:
            barrier.wait()
            starts[tid] = time.perf_counter()
            results[tid] = fn(tid)
            ends[tid] = time.perf_counter()
        except threading.BrokenBarrierError:
            pass
        except BaseException as e:  # noqa: B036 -- handed to the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(t,), daemon=True) for t in range(count)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        if any(t.is_alive() for t in threads):
            stop.set()
            barrier.abort()
            for t in threads:
                t.join(timeout=120)
    if errors:
        e = errors[0]
        if isinstance(e, OSError):
            raise BenchError(os_error_text(e)) from e
        raise e
    return max(ends) - min(starts), results


def write_all(fd, view):
    """Writes all of `view` (one write returns at most 2 GiB - 4 KiB on
    Linux; a regular file rarely writes less otherwise)."""
    n = os.write(fd, view)
    while n < len(view):
        n += os.write(fd, view[n:])


def read_into(fd, view):
    """Reads from fd's position until `view` is full or end of file; returns
    the bytes read (short when the file is)."""
    n = os.readv(fd, [view])
    while 0 < n < len(view):
        m = os.readv(fd, [view[n:]])
        if m == 0:
            break
        n += m
    return n
