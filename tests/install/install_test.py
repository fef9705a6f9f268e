#!/usr/bin/python3
"""Installs the build into a temporary DESTDIR and checks the tree.

    install_test.py --build-root DIR --prefix P --bindir B --sbindir S --mandir M \
        --libdir L --includedir I --pythondir PY

Runs `meson install --no-rebuild` (meson test has already built the targets
this test depends on; a rebuild from inside a test could race other builds),
then checks that every file kvfs promises is there with the right mode, that
the installed programs run, that nothing landed outside the prefix, and that
the client side works from the tree: a C and a C++ program build against the
installed kvfs.pc and run, and the installed Python module imports.
Exit 0 when the tree is right, 1 with one line per problem otherwise.
"""
import argparse
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

# (directory option, name, executable?) relative to the prefix; None: the
# mode's x bits are not checked (shared libraries).
EXPECTED = [
    ("sbindir", "kvfs", True),
    ("sbindir", "mkfs.kvfs", True),
    ("sbindir", "fsck.kvfs", True),
    ("sbindir", "umount.fuse.kvfs", True),
    ("bindir", "kvfs-bench", True),
    ("bindir", "kvfs-stress", True),
    ("mandir", "man8/kvfs.8", False),
    ("mandir", "man8/mkfs.kvfs.8", False),
    ("mandir", "man8/fsck.kvfs.8", False),
    ("mandir", "man1/kvfs-bench.1", False),
    ("mandir", "man1/kvfs-stress.1", False),
    ("mandir", "man7/kvfs_ioctl.7", False),
    ("includedir", "kvfs/ioctl.h", False),
    ("includedir", "kvfs/kvfs.h", False),
    ("includedir", "kvfs/kvfs.hpp", False),
    ("libdir", "libkvfs.so.1", None),
    ("libdir", "libkvfs.so", None),
    ("libdir", "pkgconfig/kvfs.pc", False),
    ("pythondir", "kvfs/__init__.py", False),
    ("pythondir", "kvfs/abi.py", False),
    ("pythondir", "kvfs/client.py", False),
    ("pythondir", "kvfs/_memory.py", False),
]

# A client of the installed headers and library. Outside kvfs every call
# fails with ENOTTY, which is enough to prove that it compiled, linked and
# reached the library.
C_PROGRAM = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <kvfs/kvfs.h>
int main(void) {
  int dir = open("/", O_RDONLY | O_DIRECTORY);
  struct kvfs_buffer *b = NULL;
  int rc = kvfs_buffer_create(dir, 4096, &b);
  printf("kvfs_buffer_create: %d\n", rc);
  return rc == -ENOTTY && b == NULL ? 0 : 1;
}
"""
CXX_PROGRAM = r"""
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <kvfs/kvfs.hpp>
int main() {
  int dir = open("/", O_RDONLY | O_DIRECTORY);
  kvfs::client::Table t;
  int rc = kvfs::client::Table::Create(dir, 4, 0, &t);
  std::printf("Table::Create: %d\n", rc);
  return rc == -ENOTTY && !t ? 0 : 1;
}
"""

# Each installed program must answer this with exit status 0.
RUNS = [
    ("sbindir", "kvfs", ["--version"]),
    ("sbindir", "mkfs.kvfs", ["--help"]),
    ("sbindir", "fsck.kvfs", ["--help"]),
    ("bindir", "kvfs-bench", ["--help"]),
    ("bindir", "kvfs-stress", ["--help"]),
]


def under_destdir(destdir, prefix, subdir, name):
    # os.path.join keeps an absolute subdir (e.g. --sbindir=/sbin) as is.
    path = os.path.join(prefix, subdir, name)
    return os.path.join(destdir, path.lstrip("/"))


def check_tree(destdir, a):
    problems = []
    dirs = {"bindir": a.bindir, "sbindir": a.sbindir, "mandir": a.mandir,
            "libdir": a.libdir, "includedir": a.includedir, "pythondir": a.pythondir}
    for opt, name, executable in EXPECTED:
        path = under_destdir(destdir, a.prefix, dirs[opt], name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            problems.append(f"missing: {os.path.relpath(path, destdir)}")
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            problems.append(f"not a non-empty regular file: {os.path.relpath(path, destdir)}")
        if executable is None:
            continue
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
    problems += check_client(destdir, a, dirs)
    return problems


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, **kw)


def check_client(destdir, a, dirs):
    """Builds and runs a C and a C++ client with `pkg-config kvfs` pointed at
    the DESTDIR tree; imports the installed Python module."""
    problems = []
    libdir = under_destdir(destdir, a.prefix, a.libdir, "")
    env = {**os.environ, "LD_LIBRARY_PATH": libdir,
           "PKG_CONFIG_PATH": os.path.join(libdir, "pkgconfig")}
    pc = shutil.which("pkg-config")
    if pc is None:
        problems.append("pkg-config not found: cannot check kvfs.pc")
    else:
        # The .pc says prefix=PREFIX; the tree is under DESTDIR.
        r = run([pc, "--cflags", "--libs", "--define-variable=prefix=" +
                 os.path.join(destdir, a.prefix.lstrip("/")), "kvfs"], env=env)
        if r.returncode != 0:
            problems.append(f"pkg-config --cflags --libs kvfs: {r.stdout.strip()}")
        else:
            flags = shlex.split(r.stdout)
            for lang, compiler, std, text in (("c", "cc", [], C_PROGRAM),
                                              ("c++", "c++", ["-std=c++20"], CXX_PROGRAM)):
                src = os.path.join(destdir, f"client.{'c' if lang == 'c' else 'cc'}")
                exe = os.path.join(destdir, f"client-{lang}")
                with open(src, "w") as f:
                    f.write(text)
                # A sanitized libkvfs needs its runtime linked into the client.
                san = [f"-fsanitize={a.sanitize}"] if a.sanitize not in ("", "none") else []
                r = run([compiler, *std, *san, "-Wall", "-Werror", src, "-o", exe, *flags])
                if r.returncode != 0:
                    problems.append(f"{lang} client does not build against the installed "
                                    f"kvfs.pc ({' '.join(flags)}):\n{r.stdout}")
                    continue
                r = run([exe], env=env)
                if r.returncode != 0:
                    problems.append(f"{lang} client: exit {r.returncode}: {r.stdout.strip()}")
                os.unlink(src)
                os.unlink(exe)
    pydir = under_destdir(destdir, a.prefix, a.pythondir, "")
    r = run([sys.executable, "-c", "import kvfs, sys; "
             "assert kvfs.__file__.startswith(sys.argv[1]), kvfs.__file__; "
             "print(hex(kvfs.abi.IOC_BATCH))", pydir],
            env={**os.environ, "PYTHONPATH": pydir}, cwd=destdir)
    if r.returncode != 0 or r.stdout.strip() != "0xc030b703":
        problems.append(f"installed Python module kvfs: exit {r.returncode}: {r.stdout.strip()}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-root", required=True)
    ap.add_argument("--sanitize", default="none", help="meson's b_sanitize of the build")
    ap.add_argument("--meson", default=shutil.which("meson") or "meson")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--sbindir", required=True)
    ap.add_argument("--mandir", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--includedir", required=True)
    ap.add_argument("--pythondir", required=True)
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
