#!/usr/bin/python3
"""Makes the installed kvfs-bench: the kvfs_bench package, and any other
packages named (the kvfs client module), as one executable zip file (PEP
441), so it installs as a single program, needs no module on the
interpreter's path, and runs with /usr/bin/python3.

    kvfs_bench_zipapp.py OUTPUT PACKAGE_DIR [PACKAGE_DIR...]
"""
import os
import stat
import sys
import zipfile

MAIN = b"""import sys

from kvfs_bench.cli import main

sys.exit(main())
"""


def add_package(z, pkg):
    """Every .py file under `pkg`, as the package named after its folder."""
    name = os.path.basename(os.path.normpath(pkg))
    for top, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(top, f)
                arc = os.path.join(name, os.path.relpath(path, pkg))
                # A fixed date: the same sources make the same file.
                info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(path, "rb") as src:
                    z.writestr(info, src.read())


def main():
    out, pkgs = sys.argv[1], sys.argv[2:]
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"#!/usr/bin/python3\n")
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("__main__.py", MAIN)
            for pkg in pkgs:
                add_package(z, pkg)
    os.chmod(tmp, os.stat(tmp).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
