#!/usr/bin/python3
"""Installs the build into a temporary DESTDIR and checks the tree.

    install_test.py --build-root DIR --prefix P --bindir B --sbindir S --mandir M

Runs `meson install --no-rebuild` (meson test has already built the targets
this test depends on; a rebuild from inside a test could race other builds),
then checks that every file kvfs promises is there with the right mode, that
the installed programs run, and that nothing landed outside the prefix.
Exit 0 when the tree is right, 1 with one line per problem otherwise.
"""
import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile

# (directory option, name, executable?) relative to the prefix.
EXPECTED = [
    ("sbindir", "kvfs", True),
    ("sbindir", "mkfs.kvfs", True),
    ("sbindir", "fsck.kvfs", True),
    ("bindir", "kvfs-bench", True),
    ("mandir", "man8/kvfs.8", False),
    ("mandir", "man8/mkfs.kvfs.8", False),
    ("mandir", "man8/fsck.kvfs.8", False),
    ("mandir", "man1/kvfs-bench.1", False),
]

# Each installed program must answer this with exit status 0.
RUNS = [
    ("sbindir", "kvfs", ["--version"]),
    ("sbindir", "mkfs.kvfs", ["--help"]),
    ("sbindir", "fsck.kvfs", ["--help"]),
    ("bindir", "kvfs-bench", ["--help"]),
]


def under_destdir(destdir, prefix, subdir, name):
    # os.path.join keeps an absolute subdir (e.g. --sbindir=/sbin) as is.
    path = os.path.join(prefix, subdir, name)
    return os.path.join(destdir, path.lstrip("/"))


def check_tree(destdir, a):
    problems = []
    dirs = {"bindir": a.bindir, "sbindir": a.sbindir, "mandir": a.mandir}
    for opt, name, executable in EXPECTED:
        path = under_destdir(destdir, a.prefix, dirs[opt], name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            problems.append(f"missing: {os.path.relpath(path, destdir)}")
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            problems.append(f"not a non-empty regular file: {os.path.relpath(path, destdir)}")
        if executable and (st.st_mode & 0o111) != 0o111:
            problems.append(f"not executable by all (mode {st.st_mode & 0o7777:o}): "
                            f"{os.path.relpath(path, destdir)}")
        if not executable and st.st_mode & 0o111:
            problems.append(f"executable, should not be (mode {st.st_mode & 0o7777:o}): "
                            f"{os.path.relpath(path, destdir)}")
    # Nothing outside the prefix (absolute install_dir values are bugs here).
    root = os.path.join(destdir, a.prefix.lstrip("/"))
    for top, _, files in os.walk(destdir):
        for f in files:
            p = os.path.join(top, f)
            if os.path.commonpath([p, root]) != root:
                problems.append(f"outside the prefix {a.prefix}: {os.path.relpath(p, destdir)}")
    if problems:
        return problems
    for opt, name, args in RUNS:
        path = under_destdir(destdir, a.prefix, dirs[opt], name)
        r = subprocess.run([path] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        if r.returncode != 0 or not r.stdout.strip():
            problems.append(f"{name} {' '.join(args)}: exit {r.returncode}, "
                            f"output {r.stdout.strip()[:200]!r}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-root", required=True)
    ap.add_argument("--meson", default=shutil.which("meson") or "meson")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--sbindir", required=True)
    ap.add_argument("--mandir", required=True)
    a = ap.parse_args()

    os.makedirs("/var/tmp", exist_ok=True)
    destdir = tempfile.mkdtemp(prefix="kvfs-install-", dir="/var/tmp")
    try:
        r = subprocess.run([a.meson, "install", "-C", a.build_root, "--no-rebuild", "--quiet",
                            "--destdir", destdir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=300)
        if r.returncode != 0:
            print(f"meson install failed (exit {r.returncode}):\n{r.stdout}")
            return 1
        problems = check_tree(destdir, a)
        for p in problems:
            print(p)
        if problems:
            return 1
        print(f"installed tree under {destdir} is complete")
        return 0
    finally:
        shutil.rmtree(destdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
