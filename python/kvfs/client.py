"""Client and Buffer: batches of kvfs operations through KVFS_IOC_BATCH.

Memory, in place or copied (the rule every call follows):
  - Memory inside a registered Buffer (the Buffer itself, or any memoryview,
    numpy array or other buffer-protocol object that lies within one, e.g.
    ``buf.view(off, n)`` or ``numpy.frombuffer(buf.view(), ...)``) is used in
    place: the daemon reads from the device into it, or writes to the
    device from it, without a copy (O_DIRECT when the buffer offset and the
    file offset are multiples of 4096; otherwise through the daemon's bounce
    buffer).
  - Any other buffer-protocol object (bytes, bytearray, numpy arrays, mmap,
    ``torch_tensor.numpy()`` for a CPU tensor) is not copied by Python: its
    address goes to the daemon (buf_id 0), which copies it with
    process_vm_readv/process_vm_writev -- one copy in the kernel, no extra
    memory, no registration. Where the kernel does not allow that the
    entry fails with EPERM. For large repeated transfers register a Buffer.
  - Objects must be C-contiguous; destinations must be writable. They are
    held (exported, so a bytearray cannot resize) only for the call.

Errors: a failure of the whole call (bad mount, ABI version, limits) raises
OSError. Each key's own outcome is a Result: ``status`` is 0 or an errno
value, ``error`` the matching OSError (or None), ``value`` the bytes moved,
the file size or the bytes queued. Results are in input order, one per
input name; duplicate names are not merged (each runs, in one batch, with
no order between them).

Threads: a Client may be used from many threads at once (each thread lays
out its batches in a table of its own). After fork() the child must use its
own Buffers: a registration belongs to the process that made it (the
parent's ids give EBADF per entry), and the client makes new tables itself.
"""
import errno as _errno
import fcntl
import mmap
import os
import sys
import threading
import weakref
from array import array
from itertools import accumulate
from typing import NamedTuple, Optional, Union

from . import abi
from ._memory import Pinned, address_of

_PAGE = 4096
_HUGE = 2 << 20
# A full call of name-only entries fits (4096 x 64 + names of ~150 bytes);
# untouched pages of the memfd cost nothing.
_MIN_TABLE_BYTES = 1 << 20
# Indexes of name_off's low 32-bit word and of status among the 16 native
# words of a 64-byte kvfs_batch_entry.
_NAME_OFF_WORD = 2 if sys.byteorder == "little" else 3
_STATUS_WORD = 12


def _round_up(n, a=_PAGE):
    return (n + a - 1) // a * a


_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def _encode(name):
    """A name as bytes (str via the filesystem encoding, like os.open)."""
    if type(name) is str:  # the common case, without os.fsencode's checks
        return name.encode(_FS_ENCODING, _FS_ERRORS)
    name = os.fspath(name)
    return name.encode(_FS_ENCODING, _FS_ERRORS) if isinstance(name, str) else bytes(name)


def _mapped_memfd(size):
    """(memfd, shared mmap) of `size` bytes: in 2 MiB huge pages when the
    machine has them reserved (vm.nr_hugepages) and `size` is a multiple of
    2 MiB, else in ordinary pages. Device I/O into huge pages is faster (one
    scatter-gather segment per 2 MiB instead of one per 4 KiB). The mapping
    reserves its pages at once, so a shortage shows here and ordinary pages
    serve. OSError when neither can be made."""
    flags = [os.MFD_CLOEXEC]
    if size % _HUGE == 0 and hasattr(os, "MFD_HUGETLB"):
        flags.insert(0, os.MFD_CLOEXEC | os.MFD_HUGETLB)
    for k, f in enumerate(flags):
        fd = -1
        try:
            fd = os.memfd_create("kvfs-buffer", f)
            os.ftruncate(fd, size)
            return fd, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            if fd >= 0:
                os.close(fd)
            if k == len(flags) - 1:
                raise


def _ioctl(fd, request, args):
    """One ioctl with a read-write argument struct; returns the struct as
    the daemon left it. OSError on failure."""
    buf = bytearray(args)
    fcntl.ioctl(fd, request, buf, True)
    return buf


class Result(NamedTuple):
    """One key's outcome, in input order."""

    name: Union[str, bytes]
    status: int  # 0 or a positive errno value (errno.ENOENT, ...)
    value: int  # bytes read or written, file size (stat), bytes queued (prefetch)

    @property
    def ok(self):
        return self.status == 0

    @property
    def error(self) -> Optional[OSError]:
        """OSError(status, strerror, name), or None when ok."""
        if self.status == 0:
            return None
        return OSError(self.status, os.strerror(self.status), self.name)

    def unwrap(self):
        """`value`, or raises `error`."""
        if self.status:
            raise self.error
        return self.value


class Entry(NamedTuple):
    """A raw batch entry (Client.batch): the fields of struct kvfs_batch_entry
    that the caller sets. name: str or bytes."""

    op: int
    name: Union[str, bytes]
    buf_id: int = 0
    buf_off: int = 0
    length: int = 0
    file_off: int = 0
    flags: int = 0


# Registrations alive in this process, {buf_id: (pid, address, size)}, so
# that memory inside one is recognised by address and used in place. No
# lock: single dict operations are atomic under the GIL, and Buffer.__del__
# (which the garbage collector may run in the middle of any allocation,
# locks held or not) must never wait for one.
_live = {}


def _locate(address, nbytes):
    """(buf_id, buf_off) of memory [address, address + nbytes): inside a live
    registration of this process, or (0, address) for plain memory."""
    pid = os.getpid()
    for buf_id, (owner, base, size) in list(_live.items()):
        if owner == pid and base <= address and address + nbytes <= base + size:
            return buf_id, address - base
    return 0, address


class Buffer:
    """Shared memory registered with the daemon (a memfd mapped read-write
    here and by the daemon): reads into it and writes from it move without
    a copy. Make one with Client.register(size).

    Use it through view() (a writable memoryview), e.g.
    ``numpy.frombuffer(buf.view(), dtype=numpy.float16)``, and pass it, or
    views/arrays inside it, to read_batch/write_batch.

    close() (also at the end of a with block, when its Client closes, or
    when garbage collected) unregisters it; views still alive keep the pages mapped here, but
    entries on them then go the plain-memory way (copied by the kernel).
    A Buffer may be used by many threads' batches at once; ordering
    concurrent batches that touch the same bytes is the caller's job.
    """

    def __init__(self, fd, size):
        """Registers `size` bytes (rounded up to 4096) through `fd`, a file or
        directory of the mount (kept open, duplicated, for the registration's
        lifetime). OSError: EINVAL, EMFILE (too many registrations), ENOTTY
        (not kvfs), ..."""
        if size <= 0 or size > abi.REGISTER_MAX_BYTES:
            raise ValueError(f"buffer size {size} is not in 1..{abi.REGISTER_MAX_BYTES}")
        self.size = _round_up(size)
        self.id = 0
        self._pid = os.getpid()
        self._mmap = None
        self._memfd = -1
        self._fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0)
        try:
            self._memfd, self._mmap = _mapped_memfd(self.size)
            self.address = address_of(self._mmap)
            out = _ioctl(self._fd, abi.IOC_REGISTER,
                         abi.REGISTER_ARGS.pack(abi.ABI_VERSION, self._memfd, self.size, 0, 0))
            buf_id = abi.REGISTER_ARGS.unpack(out)[4]
            if buf_id == 0:
                raise OSError(_errno.EPROTO, "kvfs: REGISTER returned buffer id 0")
            self.id = buf_id
        except BaseException:
            self._release()
            raise
        _live[self.id] = (self._pid, self.address, self.size)

    def view(self, offset=0, length=None):
        """A writable memoryview of bytes [offset, offset + length) (to the
        end when length is None). ValueError once closed."""
        if self._mmap is None:
            raise ValueError("kvfs.Buffer is closed")
        end = self.size if length is None else offset + length
        if offset < 0 or end > self.size or end < offset:
            raise ValueError(f"range [{offset}, {end}) outside a buffer of {self.size} bytes")
        return memoryview(self._mmap)[offset:end]

    @property
    def closed(self):
        return self._mmap is None

    def close(self):
        """Unregisters and releases the buffer (idempotent). Raises OSError
        if the daemon refuses the unregister (the registration then ends
        when the buffer's fd closes, which this does anyway)."""
        buf_id, self.id = self.id, 0
        if buf_id and self._pid == os.getpid():
            _live.pop(buf_id, None)
        err = None
        if buf_id and self._pid == os.getpid():  # a fork child's copy is not ours
            try:
                _ioctl(self._fd, abi.IOC_UNREGISTER,
                       abi.UNREGISTER_ARGS.pack(abi.ABI_VERSION, 0, buf_id))
            except OSError as e:
                err = e
        self._release()
        if err is not None:
            raise err

    def _release(self):
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # views still exported: unmapped when the last one goes
            self._mmap = None
        for attr in ("_memfd", "_fd"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, attr, -1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return f"<kvfs.Buffer id={self.id} size={self.size}{' closed' if self.closed else ''}>"


class Client:
    """Batches against the directory `mount_dir` of a kvfs mount (the mount
    point or any directory below it): names are relative to it, with '/'
    between components; absolute names and '..' are refused per entry.

    Opening does not check that the directory is on kvfs; the first call
    on another filesystem raises OSError(ENOTTY).
    """

    def __init__(self, mount_dir):
        self.path = os.fspath(mount_dir)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._local = threading.local()  # .table: this thread's table Buffer
        self._features = None  # (version, ops): asked once, by features()
        self._tables_lock = threading.Lock()
        self._tables = []  # GUARDED_BY(_tables_lock): every table made, for close()
        # GUARDED_BY(_tables_lock): Buffers from register() not yet closed.
        self._buffers = weakref.WeakSet()

    def fileno(self):
        return self.fd

    def close(self):
        """Closes every Buffer made by register() and the client's own
        tables (unregistering them), then its directory fd: afterwards
        nothing of the client holds the mount busy. Idempotent."""
        with self._tables_lock:
            tables, self._tables = self._tables, []
            tables += list(self._buffers)
            self._buffers = weakref.WeakSet()
        for t in tables:
            try:
                t.close()
            except OSError:
                pass  # the registration ends with the table's fd anyway
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- What the daemon runs.

    def features(self):
        """(abi_version, ops) of the daemon (KVFS_IOC_FEATURES), asked once
        per Client: ops has abi.op_bit(op) set for each op its batches run.
        A daemon that predates the call (ENOTTY, EINVAL) runs the base ops:
        (1, abi.OPS_BASE). A directory that is not on kvfs answers the same;
        its first batch call raises OSError(ENOTTY)."""
        if self._features is None:
            if self.fd < 0:
                raise ValueError("kvfs.Client is closed")
            try:
                out = _ioctl(self.fd, abi.IOC_FEATURES,
                             abi.FEATURES_ARGS.pack(abi.ABI_VERSION, 0, 0, 0))
                version, _, _, ops = abi.FEATURES_ARGS.unpack(out)
                self._features = (version, ops)
            except OSError as e:
                if e.errno not in (_errno.ENOTTY, _errno.EINVAL):
                    raise
                self._features = (1, abi.OPS_BASE)
        return self._features

    def supports(self, op):
        """Whether the daemon runs `op` (an abi.OP_* value) in its batches;
        an entry of an op it does not run fails with EINVAL."""
        return bool(self.features()[1] & abi.op_bit(op))

    # ---- Memory.

    def register(self, size):
        """A new registered Buffer of `size` bytes (rounded up to 4096; a
        multiple of 2 MiB gets huge pages when vm.nr_hugepages has them). At
        most abi.MAX_REGISTRATIONS per process (each thread using this client
        also holds one for its tables). Client.close() closes it too.
        OSError on failure."""
        if self.fd < 0:
            raise ValueError("kvfs.Client is closed")
        b = Buffer(self.fd, size)
        with self._tables_lock:
            self._buffers.add(b)
        return b

    # ---- Batches.

    def read_batch(self, names, dest, *, size=None, file_offset=0):
        """Reads each name into its destination, all in one batch.

        dest is either
          - a Buffer: name i is read into bytes [i*size, (i+1)*size) of it
            (in place); size defaults to the buffer split evenly, rounded
            down to 4096; or
          - a sequence of writable buffer-protocol objects, one per name
            (views of a Buffer: in place; other memory: copied by the
            kernel, see the module docstring).
        file_offset: first byte of each file to read (an int for all, or one
        per name). A destination larger than the rest of the file gets
        fewer bytes; a smaller one gets only its size.
        Returns one Result per name: value = bytes read.
        """
        names = list(names)
        n = len(names)
        offsets = self._per_key(file_offset, n, "file_offset")
        enc = [_encode(x) for x in names]
        pins = []
        if isinstance(dest, Buffer):
            if dest.closed:
                raise ValueError("kvfs.Buffer is closed")
            if n == 0:
                return []
            if size is None:
                size = dest.size // n // _PAGE * _PAGE
            if size <= 0 or size * n > dest.size:
                raise ValueError(f"{n} slots of {size} bytes do not fit a buffer of {dest.size}")
            entries = [(abi.OP_READ, enc[i], dest.id, i * size, size, offsets[i], 0)
                       for i in range(n)]
        else:
            try:
                memoryview(dest).release()
            except TypeError:
                pass  # not one buffer: a sequence of them
            else:
                raise TypeError("dest is one buffer: pass a kvfs.Buffer or a list of buffers "
                                "(e.g. list(array) for the rows of an array)")
            dests = list(dest)
            if len(dests) != n:
                raise ValueError(f"{n} names but {len(dests)} destinations")
            entries = []
            try:
                for i, d in enumerate(dests):
                    p = Pinned(d, writable=True)
                    pins.append(p)
                    buf_id, off = _locate(p.address, p.nbytes)
                    entries.append((abi.OP_READ, enc[i], buf_id, off, p.nbytes, offsets[i], 0))
            except BaseException:
                for p in pins:
                    p.release()
                raise
        return self._results(names, entries, pins)

    def write_batch(self, items):
        """Creates or atomically replaces each name with its data, all in one
        batch. items: a mapping {name: data} or an iterable of (name, data);
        data: any C-contiguous buffer-protocol object (memory inside a
        Buffer is written in place; other memory is copied by the kernel).
        A name becomes visible only once its data is written; readers see
        the old file or the new one. New files get mode 0644 and the
        caller's uid/gid. Returns one Result per item: value = bytes written.
        """
        pairs = list(items.items()) if hasattr(items, "items") else list(items)
        names = [name for name, _ in pairs]
        pins = []
        entries = []
        try:
            for name, data in pairs:
                p = Pinned(data, writable=False)
                pins.append(p)
                buf_id, off = _locate(p.address, p.nbytes)
                entries.append((abi.OP_WRITE, _encode(name), buf_id, off, p.nbytes, 0, 0))
        except BaseException:
            for p in pins:
                p.release()
            raise
        return self._results(names, entries, pins)

    def stat_batch(self, names):
        """One Result per name: value = file size; status ENOENT when
        missing (EACCES, ENOTDIR, ... as stat(2) would say)."""
        return self._simple(abi.OP_STAT, names)

    def exists_batch(self, names):
        """[True/False] per name, like os.path.exists: False for a missing
        name and for any other per-key error (use stat_batch to tell them
        apart)."""
        names = list(names)
        # STAT answers the same question where the daemon has no EXISTS.
        op = abi.OP_EXISTS if self.supports(abi.OP_EXISTS) else abi.OP_STAT
        out = []
        for start in range(0, len(names), abi.BATCH_MAX_ENTRIES):
            part = names[start:start + abi.BATCH_MAX_ENTRIES]
            out += [st == 0 for st in self._call_names(op, part)]
        return out

    def prefetch(self, names):
        """Starts reading each file into the daemon's RAM cache and returns
        at once. One Result per name: value = bytes the prefetch will read."""
        return self._simple(abi.OP_PREFETCH, names)

    def delete_batch(self, names):
        """unlink(2) of each name. One Result per name (ENOENT if missing)."""
        return self._simple(abi.OP_DELETE, names)

    def batch(self, entries):
        """Runs raw entries (Entry tuples; no checks here, the daemon's are
        what count): one Result per entry, value = the entry's result.
        buf_id 0 means buf_off is an address in this process."""
        entries = [Entry(*e) for e in entries]
        raw = [(e.op, _encode(e.name), e.buf_id, e.buf_off, e.length, e.file_off, e.flags)
               for e in entries]
        return self._results([e.name for e in entries], raw, [])

    # ---- Implementation details follow.

    @staticmethod
    def _per_key(value, n, what):
        if isinstance(value, int):
            return [value] * n
        value = list(value)
        if len(value) != n:
            raise ValueError(f"{n} names but {len(value)} values of {what}")
        return value

    def _simple(self, op, names):
        names = list(names)
        return self._results(names, [(op, _encode(x), 0, 0, 0, 0, 0) for x in names], [])

    def _results(self, names, entries, pins):
        try:
            out = []
            for start in range(0, len(entries), abi.BATCH_MAX_ENTRIES):
                out += self._call(entries[start:start + abi.BATCH_MAX_ENTRIES])
        finally:
            for p in pins:
                p.release()
        return [Result(names[i], st, res) for i, (st, res) in enumerate(out)]

    def _table(self, nbytes):
        """This thread's table Buffer, at least `nbytes` long."""
        t = getattr(self._local, "table", None)
        if t is not None and t._pid == os.getpid() and t.size >= nbytes and not t.closed:
            return t
        if self.fd < 0:
            raise ValueError("kvfs.Client is closed")
        size = max(_round_up(nbytes), _MIN_TABLE_BYTES, 2 * t.size if t is not None else 0)
        new = Buffer(self.fd, size)
        with self._tables_lock:
            if t is not None and t in self._tables:
                self._tables.remove(t)
            self._tables.append(new)
        if t is not None and t._pid == os.getpid():
            try:
                t.close()
            except OSError:
                pass  # its registration ends with its fd, closed anyway
        self._local.table = new
        return new

    def _call_names(self, op, names):
        """One KVFS_IOC_BATCH of entries that are only an op and a name (str,
        bytes or path-like): the hot path of exists_batch. Returns the
        statuses in input order. The table is laid out with array slices,
        and ASCII str names are encoded in one piece: per-entry packing
        cost more than the daemon's work for the entry."""
        n = len(names)
        try:
            joined = "".join(names)
            blob = joined.encode("ascii") if joined.isascii() else None
        except TypeError:  # bytes or path-like names
            blob = None
        if blob is None:
            names = [_encode(x) for x in names]
            blob = b"".join(names)
        lens = array("I", map(len, names))
        table_bytes = 64 * n
        words = array("I", bytes(table_bytes))
        words[0::16] = array("I", [op]) * n
        words[1::16] = lens
        # name_off: a table is far below 4 GiB, so its high word stays 0.
        offsets = array("I", accumulate(lens, initial=table_bytes))
        offsets.pop()
        words[_NAME_OFF_WORD::16] = offsets
        mm = self._submit(words, blob)
        return memoryview(mm)[:table_bytes].cast("i")[_STATUS_WORD::16].tolist()

    def _call(self, entries):
        """One KVFS_IOC_BATCH over <= BATCH_MAX_ENTRIES entries; returns
        [(status, result)] in input order, or raises OSError for the call."""
        pack = abi.ENTRY.pack
        packed = []
        pos = 64 * len(entries)
        for op, name, buf_id, buf_off, length, file_off, flags in entries:
            name_len = len(name)
            packed.append(pack(op, name_len, pos, buf_id, buf_off, length, file_off, 0, flags, 0))
            pos += name_len
        mm = self._submit(b"".join(packed), b"".join([e[1] for e in entries]))
        return [(st, res) for st, _, res in abi.ENTRY_OUT.iter_unpack(mm[0:64 * len(entries)])]

    def _submit(self, table, names):
        """The KVFS_IOC_BATCH of `table` (64-byte entries, bytes-like) whose
        names, `names`, lie right after the entries in this thread's table
        buffer; returns that buffer's mmap, holding the results."""
        table = memoryview(table).cast("B")
        table_bytes = len(table)
        n = table_bytes // 64
        t = self._table(table_bytes + len(names))
        mm = t._mmap
        mm[0:table_bytes] = table
        mm[table_bytes:table_bytes + len(names)] = names
        _ioctl(self.fd, abi.IOC_BATCH,
               abi.BATCH_ARGS.pack(abi.ABI_VERSION, n, t.id, 0, 0, 0, 0, 0))
        return mm
