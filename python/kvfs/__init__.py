"""kvfs: many keys per call on a kvfs mount, through its batch ioctl.

Pure Python, standard library only (fcntl.ioctl, os.memfd_create, mmap,
struct, ctypes). The ABI is include/kvfs/ioctl.h (man 7 kvfs_ioctl).

    import kvfs

    with kvfs.Client("/mnt/kv/layer0") as c:
        buf = c.register(32 * 4 << 20)             # registered: no copies
        names = [f"chunk-{i}" for i in range(32)]
        results = c.read_batch(names, buf, size=4 << 20)
        for i, r in enumerate(results):             # input order
            if r.ok:
                chunk = buf.view(i * (4 << 20), r.value)
            else:
                print(r.name, r.error)              # OSError(ENOENT, ...)

See kvfs.client for which memory is used in place and which is copied.
"""
from . import abi
from .client import Buffer, Client, Entry, Result

__all__ = ["abi", "Buffer", "Client", "Entry", "Result"]
__version__ = "0.1.0"
