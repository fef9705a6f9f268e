"""Permission checks as ext4 makes them. Where the kernel is 6.16 or later
kvfs mounts without default_permissions and checks permissions itself
(fuse/permissions.h); these tests run one matrix of calls by an unprivileged
user (and by root) on kvfs and on an ext4 loop image made here, and want
the same answer from both for every call: success, or the same errno.
They also check what the kernel's caches could get wrong: a walk through a
name cached while it was allowed, after its directory became private or
after the name moved into a private directory; and a stat right after
another process's store, rename or unlink."""
import errno
import os
import stat
import subprocess

import pytest

from conftest import run_as

USER = 65534      # nobody
GROUP = 4242      # a supplementary group of the user
OTHER_GROUP = 4343




def outcome(fn):
    """"ok", what fn() returned when that says more (a bool, a string, a
    list), or the errno's name."""
    try:
        r = fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    return r if isinstance(r, (bool, str, list)) else "ok"


def as_user(fn, groups=(GROUP,)):
    """Runs fn() as USER (primary group USER, supplementary `groups`) in a
    child; returns what it returned."""
    return run_as(fn, USER, USER, groups)


def write(path, data=b"abc", mode=0o644):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def setup_tree(root):
    """The same tree on each filesystem, made by root."""
    def d(name, mode, uid=0, gid=0):
        p = os.path.join(root, name)
        os.mkdir(p)
        os.chown(p, uid, gid)
        os.chmod(p, mode)
        return p

    def f(name, mode, uid=0, gid=0):
        p = os.path.join(root, name)
        write(p)
        os.chown(p, uid, gid)
        os.chmod(p, mode)
        return p

    d("pub", 0o755)
    d("priv", 0o700)
    d("grp", 0o750, gid=GROUP)
    d("grpw", 0o770, gid=GROUP)
    d("otherw", 0o777)
    d("sticky", 0o1777)
    d("mine", 0o755, uid=USER, gid=USER)
    d("mine/sub", 0o755, uid=USER, gid=USER)
    d("xonly", 0o711)
    for n in ("pub", "priv", "grp", "xonly"):
        f(f"{n}/f", 0o644)
    f("pub/f600", 0o600)
    f("pub/f666", 0o666)
    f("pub/f640g", 0o640, gid=GROUP)
    f("pub/f604", 0o604, gid=GROUP)  # the group may not read, others may
    f("pub/f755", 0o755)
    f("pub/f744", 0o744)
    f("mine/own", 0o644, uid=USER, gid=USER)
    f("mine/own2", 0o644, uid=USER, gid=USER)
    f("mine/own3", 0o644, uid=USER, gid=USER)
    f("mine/sgid", 0o644, uid=USER, gid=OTHER_GROUP)
    f("sticky/root", 0o666)
    f("sticky/user", 0o644, uid=USER, gid=USER)
    f("sticky/user2", 0o644, uid=USER, gid=USER)
    f("otherw/root", 0o644)
    d("otherw/rootdir", 0o755)
    f("grpw/root", 0o644)
    os.setxattr(os.path.join(root, "pub", "f"), "user.k", b"v")
    os.setxattr(os.path.join(root, "pub", "f600"), "user.k", b"v")


def user_calls(root):
    """(name, call) pairs run as the user, in order."""
    p = lambda *n: os.path.join(root, *n)  # noqa: E731
    calls = [
        ("stat pub/f", lambda: os.stat(p("pub", "f"))),
        ("stat priv/f", lambda: os.stat(p("priv", "f"))),
        ("stat priv/missing", lambda: os.stat(p("priv", "missing"))),
        ("stat grp/f (group)", lambda: os.stat(p("grp", "f"))),
        ("stat xonly/f", lambda: os.stat(p("xonly", "f"))),
        ("list pub", lambda: sorted(os.listdir(p("pub")))),
        ("list priv", lambda: os.listdir(p("priv"))),
        ("list grp", lambda: sorted(os.listdir(p("grp")))),
        ("list xonly", lambda: os.listdir(p("xonly"))),
        ("read pub/f", lambda: os.close(os.open(p("pub", "f"), os.O_RDONLY))),
        ("read pub/f600", lambda: os.close(os.open(p("pub", "f600"), os.O_RDONLY))),
        ("read pub/f640g", lambda: os.close(os.open(p("pub", "f640g"), os.O_RDONLY))),
        ("read pub/f604", lambda: os.close(os.open(p("pub", "f604"), os.O_RDONLY))),
        ("write pub/f", lambda: os.close(os.open(p("pub", "f"), os.O_WRONLY))),
        ("write pub/f666", lambda: os.close(os.open(p("pub", "f666"), os.O_WRONLY))),
        ("rdwr pub/f666", lambda: os.close(os.open(p("pub", "f666"), os.O_RDWR))),
        ("O_RDONLY|O_TRUNC pub/f", lambda: os.close(os.open(p("pub", "f"), os.O_RDONLY | os.O_TRUNC))),
        ("create pub/new", lambda: write(p("pub", "new"))),
        ("create priv/new", lambda: write(p("priv", "new"))),
        ("create grpw/new", lambda: write(p("grpw", "new"))),
        ("create otherw/new", lambda: write(p("otherw", "new"))),
        ("O_EXCL otherw/root", lambda: os.close(os.open(p("otherw", "root"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))),
        ("mkdir pub/d", lambda: os.mkdir(p("pub", "d"))),
        ("mkdir otherw/d", lambda: os.mkdir(p("otherw", "d"))),
        ("mkdir otherw/root", lambda: os.mkdir(p("otherw", "root"))),
        ("unlink pub/f", lambda: os.unlink(p("pub", "f"))),
        ("unlink pub/missing", lambda: os.unlink(p("pub", "missing"))),
        ("unlink otherw/missing", lambda: os.unlink(p("otherw", "missing"))),
        ("unlink sticky/root", lambda: os.unlink(p("sticky", "root"))),
        ("unlink sticky/user", lambda: os.unlink(p("sticky", "user"))),
        ("unlink otherw/root", lambda: os.unlink(p("otherw", "root"))),
        ("rmdir otherw/rootdir", lambda: os.rmdir(p("otherw", "rootdir"))),
        ("rename sticky/root", lambda: os.rename(p("sticky", "root"), p("sticky", "r2"))),
        ("rename sticky/user2", lambda: os.rename(p("sticky", "user2"), p("sticky", "u3"))),
        ("rename pub/f600 -> otherw", lambda: os.rename(p("pub", "f600"), p("otherw", "x"))),
        ("rename missing -> pub", lambda: os.rename(p("otherw", "missing"), p("pub", "x"))),
        ("rename otherw/new -> pub", lambda: os.rename(p("otherw", "new"), p("pub", "x"))),
        ("rename otherw/new -> grpw", lambda: os.rename(p("otherw", "new"), p("grpw", "moved"))),
        ("rename mine/own3 -> priv", lambda: os.rename(p("mine", "own3"), p("priv", "x"))),
        ("rename otherw/d -> mine", lambda: os.rename(p("otherw", "d"), p("mine", "d"))),
        ("chmod pub/f666", lambda: os.chmod(p("pub", "f666"), 0o600)),
        ("chmod mine/own", lambda: os.chmod(p("mine", "own"), 0o600)),
        ("chmod mine/sgid g+s", lambda: os.chmod(p("mine", "sgid"), 0o2755)),
        ("mode mine/sgid", lambda: oct(os.stat(p("mine", "sgid")).st_mode & 0o7777)),
        ("chmod mine/own2 g+s (own group)", lambda: os.chmod(p("mine", "own2"), 0o2755)),
        ("mode mine/own2", lambda: oct(os.stat(p("mine", "own2")).st_mode & 0o7777)),
        ("chown mine/own to root", lambda: os.chown(p("mine", "own"), 0, -1)),
        ("chown mine/own to self", lambda: os.chown(p("mine", "own"), USER, -1)),
        ("chgrp mine/own to GROUP", lambda: os.chown(p("mine", "own"), -1, GROUP)),
        ("chgrp mine/own to OTHER_GROUP", lambda: os.chown(p("mine", "own"), -1, OTHER_GROUP)),
        ("chgrp pub/f666", lambda: os.chown(p("pub", "f666"), -1, GROUP)),
        ("touch pub/f666", lambda: os.utime(p("pub", "f666"))),
        ("touch pub/f", lambda: os.utime(p("pub", "f"))),
        ("utime pub/f666 explicit", lambda: os.utime(p("pub", "f666"), (1, 1))),
        ("utime mine/own explicit", lambda: os.utime(p("mine", "own"), (1, 1))),
        ("truncate pub/f", lambda: os.truncate(p("pub", "f"), 0)),
        ("truncate pub/f666", lambda: os.truncate(p("pub", "f666"), 1)),
        ("access pub/f R", lambda: os.access(p("pub", "f"), os.R_OK)),
        ("access pub/f W", lambda: os.access(p("pub", "f"), os.W_OK)),
        ("access pub/f755 X", lambda: os.access(p("pub", "f755"), os.X_OK)),
        ("access pub/f744 X", lambda: os.access(p("pub", "f744"), os.X_OK)),
        ("access priv R", lambda: os.access(p("priv"), os.R_OK)),
        ("access grp X", lambda: os.access(p("grp"), os.X_OK)),
        ("chdir priv", lambda: os.chdir(p("priv"))),
        ("chdir grp", lambda: os.chdir(p("grp"))),
        ("getxattr pub/f", lambda: os.getxattr(p("pub", "f"), "user.k").decode()),
        ("getxattr pub/f600", lambda: os.getxattr(p("pub", "f600"), "user.k").decode()),
        ("setxattr pub/f", lambda: os.setxattr(p("pub", "f"), "user.k", b"w")),
        ("setxattr pub/f666", lambda: os.setxattr(p("pub", "f666"), "user.k", b"w")),
        ("setxattr sticky", lambda: os.setxattr(p("sticky"), "user.k", b"w")),
        ("setxattr mine/own", lambda: os.setxattr(p("mine", "own"), "user.k", b"w")),
        ("removexattr pub/f", lambda: os.removexattr(p("pub", "f"), "user.k")),
        ("exec open pub/f744", lambda: subprocess.run([p("pub", "f744")]).returncode),
    ]
    return calls


def run_matrix(root):
    setup_tree(root)
    names = [n for n, _ in user_calls(root)]
    got = as_user(lambda: [outcome(fn) for _, fn in user_calls(root)])
    return dict(zip(names, got))


def test_unprivileged_calls_get_what_ext4_gives(vol, ext4_dir):
    want = run_matrix(ext4_dir)
    got = run_matrix(vol.path)
    diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not diff, f"kvfs vs ext4 (call: kvfs, ext4): {diff}"
    # The matrix does reach both answers.
    assert want["stat priv/f"] == "EACCES" and want["stat pub/f"] == "ok"
    assert want["unlink sticky/root"] == "EPERM"


def walk_after_narrowing(root):
    """Names cached while allowed, then made private: the user's walk is
    refused at once, as on a local filesystem."""
    p = lambda *n: os.path.join(root, *n)  # noqa: E731
    os.mkdir(p("w"), 0o755)
    os.mkdir(p("w", "d"), 0o755)
    write(p("w", "d", "f"))
    os.mkdir(p("vault"), 0o700)
    write(p("w", "moved"))
    out = {}
    out["before"] = as_user(lambda: outcome(lambda: os.stat(p("w", "d", "f"))))
    out["cached missing"] = as_user(lambda: outcome(lambda: os.stat(p("w", "d", "nope"))))
    out["moved before"] = as_user(lambda: outcome(lambda: os.stat(p("w", "moved"))))
    os.chmod(p("w", "d"), 0o700)
    out["after chmod"] = as_user(lambda: outcome(lambda: os.stat(p("w", "d", "f"))))
    out["missing after chmod"] = as_user(lambda: outcome(lambda: os.stat(p("w", "d", "nope"))))
    os.stat(p("vault"))  # cache it for root
    os.rename(p("w", "moved"), p("vault", "moved"))
    out["moved into private"] = as_user(lambda: outcome(lambda: os.stat(p("vault", "moved"))))
    os.chmod(p("w", "d"), 0o755)
    out["opened again"] = as_user(lambda: outcome(lambda: os.stat(p("w", "d", "f"))))
    os.chown(p("w", "d"), USER, USER)
    os.chmod(p("w", "d"), 0o700)
    out["owner of private dir"] = as_user(lambda: outcome(lambda: os.stat(p("w", "d", "f"))))
    return out


def test_cached_names_do_not_bypass_a_directory_made_private(vol, ext4_dir):
    want = walk_after_narrowing(ext4_dir)
    got = walk_after_narrowing(vol.path)
    assert got == want
    assert want["after chmod"] == "EACCES" and want["moved into private"] == "EACCES"


def test_control_files_stay_root_only(vol):
    stats_path = vol.p(".kvfs", "stats")
    drop = vol.p(".kvfs", "drop_cache")
    res = as_user(lambda: {
        "read stats": outcome(lambda: os.close(os.open(stats_path, os.O_RDONLY))),
        "write drop_cache": outcome(lambda: os.close(os.open(drop, os.O_WRONLY))),
        "access drop_cache W": outcome(lambda: os.access(drop, os.W_OK)),
        "truncate stats": outcome(lambda: os.truncate(stats_path, 0)),
        "chmod drop_cache": outcome(lambda: os.chmod(drop, 0o666)),
    })
    assert res == {"read stats": "ok", "write drop_cache": "EACCES",
                   "access drop_cache W": False, "truncate stats": "EACCES",
                   "chmod drop_cache": "EPERM"}
    # Root may still act.
    with open(drop, "w") as f:
        f.write("1\n")


def test_stat_right_after_another_process_changes_a_name(vol):
    """A connector's stat after another process stored, replaced, renamed
    or unlinked the key answers what ext4 would: what the change left."""
    key = vol.p("key")
    tmp = key + ".tmp"

    def other(fn):
        pid = os.fork()
        if pid == 0:
            try:
                fn()
                os._exit(0)
            except BaseException:  # noqa: BLE001
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

    def store(data):
        write(tmp, data)
        os.rename(tmp, key)

    with pytest.raises(FileNotFoundError):
        os.stat(key)  # the kernel now caches the name as missing
    other(lambda: store(b"a" * 1000))
    st = os.stat(key)
    assert st.st_size == 1000
    other(lambda: store(b"b" * 2000))  # replaced: another inode
    st2 = os.stat(key)
    assert st2.st_size == 2000 and st2.st_ino != st.st_ino
    other(lambda: os.rename(key, key + ".old"))
    with pytest.raises(FileNotFoundError):
        os.stat(key)
    assert os.stat(key + ".old").st_ino == st2.st_ino
    other(lambda: os.unlink(key + ".old"))
    with pytest.raises(FileNotFoundError):
        os.stat(key + ".old")
    other(lambda: os.chmod(vol.path, 0o755))
    assert stat.S_IMODE(os.stat(vol.path).st_mode) == 0o755
