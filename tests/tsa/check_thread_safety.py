#!/usr/bin/env python3
"""Clang's thread-safety analysis over the sources of src/fs, src/io,
src/device and src/fuse (and src/common), with the flags the build uses
(BUILD/compile_commands.json), as errors: a member GUARDED_BY a lock that is
touched without it, a function that REQUIRES a lock called without it, a
lock held past its scope, fail the run.

First it proves it can fail: violations.cc is compiled once per case it
holds (-DCASE_<name>) and each must be refused with a -Wthread-safety
error; without a case the file must compile clean.

Usage: check_thread_safety.py BUILD_DIR [-j N]
Exit: 0 clean, 1 a violation (or a case not caught), 77 no clang++.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

DIRS = ("src/common/", "src/fs/", "src/io/", "src/device/", "src/fuse/")
# gcc-only flags (an unknown -W is an error under -Werror), and colour, which
# would hide the diagnostic names from the probe.
GCC_ONLY = {"-Wno-restrict", "-fdiagnostics-color=always"}
CASES = ("UNGUARDED_WRITE", "WRITE_AFTER_UNLOCK", "MISSING_REQUIRES", "WRITE_UNDER_READER",
         "RETURN_HOLDING", "READ_AFTER_UNLOCK")
HERE = os.path.dirname(os.path.abspath(__file__))


def clang_args(entry, clang):
    """The entry's compile command for clang, checking only (no output)."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    # Drop the launcher (ccache) and the compiler.
    while args and not args[0].startswith("-") and (
            os.path.basename(args[0]) in ("ccache", "sccache") or args[0].endswith(("c++", "g++", "clang++"))):
        args = args[1:]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MQ", "-MT"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a in GCC_ONLY:
            continue
        out.append(a)
    return [clang, "-fsyntax-only", "-Wthread-safety", "-Werror"] + out


def run(entry, argv):
    p = subprocess.run(argv, cwd=entry["directory"], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("-j", type=int, default=2)
    opts = ap.parse_args()
    clang = shutil.which("clang++")
    if not clang:
        print("clang++ not found (tools/deps.sh installs clang): skipped")
        return 77
    entries = json.load(open(os.path.join(opts.build_dir, "compile_commands.json")))
    src_root = os.path.dirname(HERE.rstrip("/"))  # tests/
    src_root = os.path.dirname(src_root)
    mine = []
    for e in entries:
        path = os.path.normpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(path, src_root)
        if rel.startswith(DIRS) and rel.endswith(".cc"):
            mine.append((rel, e))
    mine.sort()
    if not any(rel.startswith("src/fs/") for rel, _ in mine):
        print("no src/fs sources in compile_commands.json: wrong build dir?")
        return 1

    failed = 0
    # The probe: compiled with the flags of an fs/ source, file swapped.
    probe_entry = dict(next(e for rel, e in mine if rel.startswith("src/fs/")))
    probe = os.path.join(HERE, "violations.cc")
    base = clang_args(probe_entry, clang)
    base = [a for a in base if not a.endswith(".cc")] + [probe]
    rc, out = run(probe_entry, base)
    if rc != 0:
        print(f"FAIL violations.cc without a case must compile clean:\n{out}")
        failed += 1
    for case in CASES:
        rc, out = run(probe_entry, base + [f"-DCASE_{case}"])
        if rc == 0 or not re.search(r"\[-Werror,-Wthread-safety", out):
            print(f"FAIL case {case} was not refused by -Wthread-safety:\n{out}")
            failed += 1
        else:
            print(f"ok   case {case} refused")

    with concurrent.futures.ThreadPoolExecutor(max_workers=opts.j) as pool:
        results = pool.map(lambda re_: (re_[0], run(re_[1], clang_args(re_[1], clang))), mine)
        for rel, (rc, out) in results:
            if rc != 0:
                print(f"FAIL {rel}\n{out}")
                failed += 1
    print(f"{len(mine)} sources checked, {len(CASES)} cases probed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
