"""Setuid and setgid bits after writes, truncates and chowns, as an
unprivileged user and as root: kvfs's modes equal what ext4 gives for the
same sequence (run on a small ext4 loop image in the test itself)."""
import os

from conftest import pwrite_byte, run_as

USER = 65534  # nobody; the files' group, so "in the group" holds for it

# Start modes: setuid and setgid with group-execute, each alone, and setgid
# without group-execute (which marks mandatory locking and stays).
MODES = [0o6777, 0o4777, 0o2777, 0o2767, 0o0777]


def as_user(fn):
    run_as(fn, USER, USER)


def ftruncate(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, 1)
    finally:
        os.close(fd)


STEPS = {
    "write by user": lambda p: as_user(lambda: pwrite_byte(p)),
    "write by root": pwrite_byte,
    "truncate by user": lambda p: as_user(lambda: os.truncate(p, 2)),
    "ftruncate by user": lambda p: as_user(lambda: ftruncate(p)),
    "O_TRUNC open by user": lambda p: as_user(lambda: os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))),
    "O_TRUNC open by root": lambda p: os.close(os.open(p, os.O_WRONLY | os.O_TRUNC)),
    "chown by root": lambda p: os.chown(p, 1234, USER),
}


def modes_after_each_step(root):
    """{(start mode, step): mode after it}, each step on a fresh file."""
    out = {}
    for mode in MODES:
        for name, step in STEPS.items():
            p = os.path.join(root, f"f{mode:o}")
            with open(p, "wb") as f:
                f.write(b"abc")
            os.chown(p, 0, USER)
            os.chmod(p, mode)
            assert os.stat(p).st_mode & 0o7777 == mode
            step(p)
            out[(oct(mode), name)] = oct(os.stat(p).st_mode & 0o7777)
            os.unlink(p)
    return out




def test_setuid_setgid_modes_match_ext4(vol, ext4_dir):
    want = modes_after_each_step(ext4_dir)
    got = modes_after_each_step(vol.path)
    diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not diff, f"kvfs vs ext4 (mode after the step): {diff}"
    # The sequence does exercise the rule on both.
    assert want[("0o6777", "write by user")] == "0o777"
    assert want[("0o6777", "write by root")] == "0o6777"


def test_cleared_bits_survive_remount(vol):
    p = vol.p("s")
    with open(p, "wb") as f:
        f.write(b"abc")
    os.chmod(p, 0o6777)
    as_user(lambda: pwrite_byte(p))
    vol.remount()
    assert os.stat(p).st_mode & 0o7777 == 0o777
