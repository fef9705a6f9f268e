#!/usr/bin/env python3
"""signal_storm: SIGINT a storm of readers and writers on a directory and
check that every process exits promptly and every file stays intact.

usage: signal_storm.py MOUNTDIR [--rounds N] [--seed S] [--big N] [--small N]
                       [--sigint dfl|handler|mix] [--api posix|client|mix]
                       [--no-fadvise]

Setup writes --big 96 MiB and --small 8 MiB files into MOUNTDIR/storm/. Each
round forks 12 processes: 8 single-threaded readers (each reads whole files,
a mix of the 96 MiB and 8 MiB ones, buffered and O_DIRECT, into page-aligned
mmap buffers; buffered reads first drop the page cache with
POSIX_FADV_DONTNEED unless --no-fadvise), checks what it read against the file's known SHA-256, and
every few files writes b"1" to MOUNTDIR/.kvfs/drop_cache, errors ignored)
and 4 writers (8 MiB stores: write a temporary file, then os.rename() it
over a final name). After a random 100-600 ms each gets SIGINT. With
--sigint dfl the children keep the default action (the kernel kills them),
with handler Python's KeyboardInterrupt handler runs (the signal interrupts
a FUSE request, which the daemon must answer), mix (default) alternates.

With --api client or mix, (some) readers use the repo's Python kvfs.Client
(python/kvfs) read_batch, into an mmap (the daemon copies with
process_vm_writev) or a registered Buffer, and writers its write_batch
(atomic replace) instead of write + rename; where the client is unusable
(not kvfs) it falls back to posix.

Failures (exit 1): a process that needs more than 10 s to exit after its
signal (HUNG: its /proc/PID/stack and wchan are printed, it gets SIGKILL;
the slowest exit of each round is printed, but no shorter bound fails: on
a loaded machine an interrupted process that waits for nothing still
takes 1-2 s to be scheduled and torn down); a child that reports an error (any OSError, a
short O_DIRECT read outside a signal, a read whose content does not match);
and, after all rounds, a final file that is not exactly one complete
version a writer wrote, or a setup file whose content changed.

Every file's content is derived from (name, version): each 4 KiB block
starts with a 16-byte header (magic, version, block index, name hash),
followed by bytes from SHA-256(name:version), so a file can be checked on
its own.
"""
import argparse
import hashlib
import mmap
import os
import random
import signal
import struct
import sys
import time
import zlib

MiB = 1 << 20
BLOCK = 4096
BIG = 96 * MiB
SMALL = 8 * MiB
CHUNK = 1 * MiB
MAGIC = 0x4B565353  # "KVSS"
HDR = struct.Struct("<IIII")  # magic, version, block index, crc32(name)
N_READERS = 8
N_WRITERS = 4
HUNG_S = 10.0
FADVISE = True
EVICTING = False  # --evicting: files may vanish (eviction), never change
# Shared with the children (fork): [files read whole, bytes read, stores
# renamed into place]; approximate (no locking), for the round summary.
COUNTERS = None
KVFS = None  # the kvfs Python package (repo's python/), for --api client|mix


def content(name, version, size):
    fill = hashlib.sha256(f"{name}:{version}".encode()).digest()
    fill = (fill * (BLOCK // len(fill) + 1))[: BLOCK - HDR.size]
    nh = zlib.crc32(name.encode())
    return b"".join(HDR.pack(MAGIC, version, i, nh) + fill for i in range(size // BLOCK))


def version_of(name, data):
    """The version named in data's first header, or None."""
    if len(data) < HDR.size:
        return None
    magic, version, idx, nh = HDR.unpack_from(data, 0)
    if magic != MAGIC or idx != 0 or nh != zlib.crc32(name.encode()):
        return None
    return version


def writer_version(rnd, wid, seq):
    return (rnd + 1) * 1_000_000 + wid * 100_000 + seq


def writer_version_ok(version, wid, rounds):
    rnd, rest = divmod(version, 1_000_000)
    w, seq = divmod(rest, 100_000)
    return 1 <= rnd <= rounds and w == wid


def log(msg):
    print(msg, flush=True)


# ---- children ----------------------------------------------------------

class ChildError(Exception):
    pass


def drop_cache(mountdir):
    try:
        fd = os.open(os.path.join(mountdir, ".kvfs", "drop_cache"), os.O_WRONLY)
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)
    except OSError:
        pass


def read_file(path, direct, buf, expect_size):
    """Reads the whole file into buf in CHUNK pieces; returns (sha256 hex, bytes)."""
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    if not direct and FADVISE:
        # Drop the kernel's cached pages so the reads below reach the daemon.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    h = hashlib.sha256()
    off = 0
    try:
        while True:
            n = os.preadv(fd, [buf], off)
            if n == 0:
                break
            h.update(memoryview(buf)[:n])
            off += n
            if direct and n < CHUNK and off != expect_size:
                raise ChildError(f"short O_DIRECT read: {n} bytes at {off - n} of {path}")
    finally:
        os.close(fd)
    return h.hexdigest(), off


def client_read(client, mountdir, path, size, bufs, rng):
    """One read_batch of the whole file: into an mmap (the daemon copies
    with process_vm_writev) or a registered Buffer (in place)."""
    name = os.path.relpath(path, mountdir)
    if rng.random() < 0.5:
        if size not in bufs:
            bufs[size] = mmap.mmap(-1, size)
        dest = bufs[size]
        r = client.read_batch([name], [dest])[0]
        how = "read_batch into mmap"
        view = memoryview(dest)
    else:
        key = ("reg", size)
        if key not in bufs:
            bufs[key] = client.register(size)
        dest = bufs[key]
        r = client.read_batch([name], dest, size=size)[0]
        how = "read_batch into registered Buffer"
        view = dest.view(0, size)
    if not r.ok:
        raise ChildError(f"{how} {name}: {r.error}")
    return hashlib.sha256(view[: r.value]).hexdigest(), r.value, how


def reader_main(idx, mountdir, files, rng, client):
    buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT wants
    bufs = {}
    count = 0
    while True:
        path, size, digest = rng.choice(files)
        direct = rng.random() < 0.5
        try:
            if client is not None:
                got, n, how = client_read(client, mountdir, path, size, bufs, rng)
            else:
                got, n = read_file(path, direct, buf, size)
                how = "O_DIRECT" if direct else "buffered"
        except (FileNotFoundError, ChildError) as e:
            gone = isinstance(e, FileNotFoundError) or "No such file" in str(e)
            if EVICTING and gone:
                continue
            raise
        if n != size or got != digest:
            raise ChildError(f"reader {idx}: {path} ({how}): "
                             f"read {n} bytes, sha256 {got[:16]}, expected {size} bytes, "
                             f"{digest[:16]}")
        count += 1
        COUNTERS[0] += 1
        COUNTERS[1] += n
        if count % 3 == 0:
            drop_cache(mountdir)


def writer_main(wid, rnd, mountdir, rng, client):
    d = os.path.join(mountdir, "storm")
    seq = 0
    while True:
        name = f"w{wid}_{seq % 2}"
        version = writer_version(rnd, wid, seq)
        data = content(name, version, SMALL)
        if client is not None:  # an atomic replace, process_vm_readv from data
            r = client.write_batch([(f"storm/{name}", data)])[0]
            if not r.ok:
                raise ChildError(f"write_batch storm/{name}: {r.error}")
            COUNTERS[2] += 1
            seq += 1
            continue
        tmp = os.path.join(d, f".tmp.{name}.{version}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            mv = memoryview(data)
            off = 0
            while off < len(mv):
                off += os.write(fd, mv[off : off + CHUNK])
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(d, name))
        COUNTERS[2] += 1
        seq += 1


def run_child(kind, idx, rnd, mountdir, files, seed, handler, use_client):
    """In the forked child: never returns."""
    signal.signal(signal.SIGINT, signal.default_int_handler if handler else signal.SIG_DFL)
    rng = random.Random(seed)
    code = 0
    try:
        client = KVFS.Client(mountdir) if use_client else None
        if kind == "reader":
            reader_main(idx, mountdir, files, rng, client)
        else:
            writer_main(idx, rnd, mountdir, rng, client)
    except KeyboardInterrupt:
        code = 0
    except ChildError as e:
        sys.stderr.write(f"signal_storm: FAIL {kind} {idx} (pid {os.getpid()}): {e}\n")
        code = 3
    except OSError as e:
        sys.stderr.write(f"signal_storm: FAIL {kind} {idx} (pid {os.getpid()}): "
                         f"{e.__class__.__name__}: {e}\n")
        code = 3
    except BaseException as e:  # noqa: BLE001
        sys.stderr.write(f"signal_storm: FAIL {kind} {idx} (pid {os.getpid()}): {e!r}\n")
        code = 4
    sys.stderr.flush()
    os._exit(code)


# ---- parent ------------------------------------------------------------

def dump_proc(pid):
    for what in ("wchan", "stack", "syscall"):
        try:
            with open(f"/proc/{pid}/{what}") as f:
                text = f.read().strip()
        except OSError as e:
            text = f"(unreadable: {e})"
        log(f"    /proc/{pid}/{what}: " + text.replace("\n", "\n      "))


def setup(mountdir, nbig, nsmall):
    d = os.path.join(mountdir, "storm")
    os.makedirs(d, exist_ok=True)
    files = []
    for kind, n, size in (("big", nbig, BIG), ("small", nsmall, SMALL)):
        for i in range(n):
            name = f"{kind}{i}"
            data = content(name, 1, size)
            path = os.path.join(d, name)
            with open(path, "wb") as f:
                f.write(data)
            files.append((path, size, hashlib.sha256(data).hexdigest()))
    return files


def run_round(rnd, mountdir, files, rng, sigint_mode, api):
    """Returns a list of failure strings."""
    failures = []
    procs = []  # (pid, label)
    for i in range(len(COUNTERS)):
        COUNTERS[i] = 0
    for i in range(N_READERS + N_WRITERS):
        kind = "reader" if i < N_READERS else "writer"
        idx = i if kind == "reader" else i - N_READERS
        handler = {"dfl": False, "handler": True}.get(sigint_mode, (i + rnd) % 2 == 1)
        use_client = api == "client" or (api == "mix" and idx % 2 == 1)
        seed = rng.getrandbits(32)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(kind, idx, rnd, mountdir, files, seed, handler, use_client)
        procs.append((pid, f"{kind} {idx} ({'handler' if handler else 'SIG_DFL'}"
                           f"{', kvfs.Client' if use_client else ''})"))
    time.sleep(rng.uniform(0.1, 0.6))

    sent = {}
    early = {}
    for pid, label in procs:
        r, st = os.waitpid(pid, os.WNOHANG)
        if r == pid:
            early[pid] = st
            continue
        os.kill(pid, signal.SIGINT)
        sent[pid] = time.monotonic()

    pending = {pid: label for pid, label in procs}
    for pid, st in early.items():
        label = pending.pop(pid)
        failures.append(f"round {rnd}: {label} pid {pid} exited before the signal "
                        f"(status {st:#x})")
    max_exit = 0.0
    while pending:
        now = time.monotonic()
        for pid in list(pending):
            label = pending[pid]
            r, st = os.waitpid(pid, os.WNOHANG)
            if r == pid:
                took = time.monotonic() - sent[pid]
                max_exit = max(max_exit, took)
                del pending[pid]
                if os.WIFEXITED(st) and os.WEXITSTATUS(st) != 0:
                    failures.append(f"round {rnd}: {label} pid {pid} reported an error "
                                    f"(exit {os.WEXITSTATUS(st)})")
                elif os.WIFSIGNALED(st) and os.WTERMSIG(st) != signal.SIGINT:
                    failures.append(f"round {rnd}: {label} pid {pid} killed by signal "
                                    f"{os.WTERMSIG(st)}")
            elif now - sent[pid] > HUNG_S:
                log(f"  HUNG: round {rnd}: {label} pid {pid}: no exit {HUNG_S:.0f} s after SIGINT")
                dump_proc(pid)
                failures.append(f"round {rnd}: {label} pid {pid} HUNG (> {HUNG_S:.0f} s after "
                                f"SIGINT)")
                os.kill(pid, signal.SIGKILL)
                t = time.monotonic()
                while time.monotonic() - t < 5:
                    r, _ = os.waitpid(pid, os.WNOHANG)
                    if r == pid:
                        break
                    time.sleep(0.05)
                else:
                    log(f"  pid {pid} did not die 5 s after SIGKILL (left behind)")
                    dump_proc(pid)
                del pending[pid]
        time.sleep(0.01)
    return failures, max_exit, list(COUNTERS)


def verify(mountdir, files, rounds):
    failures = []
    d = os.path.join(mountdir, "storm")
    for path, size, digest in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if EVICTING:
                continue
            raise
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            failures.append(f"setup file {path} changed: {len(data)} bytes, expected {size}")
    found = 0
    for wid in range(N_WRITERS):
        for k in range(2):
            name = f"w{wid}_{k}"
            path = os.path.join(d, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            found += 1
            version = version_of(name, data)
            if version is None or not writer_version_ok(version, wid, rounds):
                failures.append(f"{path}: first block names no version of {name} "
                                f"(header {data[:HDR.size].hex()}, {len(data)} bytes)")
                continue
            want = content(name, version, SMALL)
            if data != want:
                bad = next((i for i in range(min(len(data), len(want))) if data[i] != want[i]),
                           min(len(data), len(want)))
                failures.append(f"{path}: not exactly version {version}: {len(data)} bytes "
                                f"(want {len(want)}), first difference at offset {bad}")
    return failures, found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mountdir")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--big", type=int, default=2, help="96 MiB files (default 2)")
    ap.add_argument("--small", type=int, default=6, help="8 MiB files (default 6)")
    ap.add_argument("--sigint", choices=("dfl", "handler", "mix"), default="mix")
    ap.add_argument("--api", choices=("posix", "client", "mix"), default="posix",
                    help="posix: read/write/rename (default); client: libkvfs's Python "
                         "kvfs.Client (read_batch into mmap or registered buffers, "
                         "write_batch stores); mix: odd-numbered readers and writers use "
                         "the client")
    ap.add_argument("--no-fadvise", action="store_true",
                    help="keep the page cache for buffered reads (default: "
                         "POSIX_FADV_DONTNEED first, so they reach the filesystem)")
    ap.add_argument("--evicting", action="store_true",
                    help="files may vanish (the volume evicts): a missing file is skipped, "
                         "never a failure; a file present must still be whole")
    args = ap.parse_args()
    global FADVISE, COUNTERS, EVICTING
    FADVISE = not args.no_fadvise
    EVICTING = args.evicting
    api = args.api
    if api != "posix":
        global KVFS
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "python"))
        try:
            import kvfs as KVFS
            with KVFS.Client(args.mountdir) as c:
                c.stat_batch(["."])
        except (ImportError, OSError) as e:
            log(f"--api {api}: kvfs.Client unusable here ({e!r}); using posix")
            api = "posix"
    import ctypes
    COUNTERS = (ctypes.c_int64 * 3).from_buffer(mmap.mmap(-1, 4096))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    log(f"signal_storm: {args.mountdir} rounds={args.rounds} seed={seed} sigint={args.sigint}")

    t0 = time.monotonic()
    files = setup(args.mountdir, args.big, args.small)
    log(f"setup: {args.big} x 96 MiB + {args.small} x 8 MiB in {time.monotonic() - t0:.1f} s")

    failures = []
    max_exit_all = 0.0
    d = os.path.join(args.mountdir, "storm")
    for rnd in range(args.rounds):
        for n in os.listdir(d):  # stores a signal cut short
            if n.startswith(".tmp."):
                try:
                    os.unlink(os.path.join(d, n))
                except OSError as e:
                    failures.append(f"unlink {n}: {e}")
        f, max_exit, (nread, nbytes, nstores) = run_round(rnd, args.mountdir, files, rng,
                                                          args.sigint, api)
        max_exit_all = max(max_exit_all, max_exit)
        log(f"round {rnd}: {'ok' if not f else f'{len(f)} failure(s)'}, slowest exit "
            f"{max_exit * 1000:.0f} ms; {nread} whole-file reads ({nbytes / MiB:.0f} MiB), "
            f"{nstores} stores")
        for x in f:
            log(f"  FAIL {x}")
        failures += f

    f, found = verify(args.mountdir, files, args.rounds)
    for x in f:
        log(f"  FAIL {x}")
    failures += f
    hung = sum("HUNG" in x for x in failures)
    log(f"summary: rounds={args.rounds} seed={seed} failures={len(failures)} hung={hung} "
        f"slowest_exit={max_exit_all:.2f}s final_files_checked={found} "
        f"{'ok' if not failures else 'FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
