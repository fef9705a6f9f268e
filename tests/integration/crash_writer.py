"""The writer of the crash tests: stores keys with the connector pattern
(tmp, write, close, rename) until the mount dies under it. With `tmpfile`,
as llm-d's filesystem backend does instead: open(dir, O_TMPFILE), write,
linkat of the unnamed file to a new key's name, close (names are never
reused: a link does not replace).

Every key's bytes say which key and which version they are. A journal on
the local filesystem (fsynced line by line) records what the writer knows:
`synced NAME VERSION` once a version is durable by kvfs's promise (the tmp
file was fsynced before the rename, and a later fsync covered the rename).

usage: crash_writer.py MOUNT JOURNAL SEED [tmpfile]
"""
import ctypes
import os
import random
import struct
import sys

HEADER = struct.Struct("<32sQ")


def content(name, version, size):
    head = HEADER.pack(name.encode()[:32].ljust(32, b"\0"), version)
    body = random.Random(f"{name}/{version}").randbytes(size - HEADER.size)
    return head + body


def parse(data):
    """(name, version) a file's bytes claim to be, or None."""
    if len(data) < HEADER.size:
        return None
    raw, version = HEADER.unpack_from(data)
    return raw.rstrip(b"\0").decode(errors="replace"), version


def link_unnamed(fd, path):
    """linkat(AT_FDCWD, "/proc/self/fd/FD", AT_FDCWD, path, AT_SYMLINK_FOLLOW)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, path.encode(), 0x400) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def main():
    mnt, journal_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tmpfile = len(sys.argv) > 4 and sys.argv[4] == "tmpfile"
    rng = random.Random(seed)
    # Versions only grow, across rounds too: start past everything an
    # earlier writer may have renamed (one more than its journal says, since
    # a crash can fall between a rename and its journal line).
    versions = {}
    if os.path.exists(journal_path):
        for line in open(journal_path):
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                versions[parts[1]] = max(versions.get(parts[1], 0), int(parts[2]) + 1)
    journal = open(journal_path, "a", buffering=1)

    def note(line):
        journal.write(line + "\n")
        journal.flush()
        os.fsync(journal.fileno())

    mount_dev = os.stat(mnt).st_dev  # once detached, mnt is a plain directory
    pending_sync = []  # versions fsynced before their rename; durable at the next fsync
    i = 0
    try:
        while True:
            if os.stat(mnt).st_dev != mount_dev:
                return
            name = f"t{seed}k{i}" if tmpfile else f"key{rng.randrange(40):03d}"
            version = versions.get(name, 0) + 1
            size = rng.choice([4096, 65536, 300000, 1 << 20, (1 << 20) + 12345])
            data = content(name, version, size)
            sync = rng.random() < 0.3
            if tmpfile:
                fd = os.open(mnt, os.O_TMPFILE | os.O_WRONLY, 0o644)
                os.write(fd, data)
                if sync:
                    os.fsync(fd)
                link_unnamed(fd, os.path.join(mnt, name))
                os.close(fd)
            else:
                tmp = os.path.join(mnt, f"{name}.tmp{i}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, data)
                if sync:
                    os.fsync(fd)
                os.close(fd)
                os.rename(tmp, os.path.join(mnt, name))
            versions[name] = version
            note(f"renamed {name} {version}")
            if sync:
                # The rename is durable once a later fsync returns: kvfs
                # commits in order, so any fsync covers every earlier change.
                fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
                note(f"synced {name} {version}")
            i += 1
    except OSError:
        pass  # the daemon died under us: that is the test


if __name__ == "__main__":
    main()
