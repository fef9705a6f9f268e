#!/usr/bin/env bash
# Installs what kvfs needs, builds it from scratch and runs the whole test
# suite (meson test), which includes clang's thread-safety analysis of
# fs/, io/, device/ and fuse/ (suite tsa). With --sanitize, the build uses
# ASan+UBSan.
# Usage: tools/check.sh [--sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh

builddir=build-check
setup_args=(-Dbuildtype=debugoptimized)
if [ "${1:-}" = "--sanitize" ]; then
  builddir=build-check-asan
  setup_args=(-Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false)
fi

kvfs_install_deps
echo "==> building from scratch in $builddir"
rm -rf "$builddir"
meson setup "$builddir" "${setup_args[@]}" | tail -n 3
ninja -C "$builddir"

echo "==> running the test suite"
rc=0
meson test -C "$builddir" --print-errorlogs --num-processes 2 || rc=$?

# One closing line that any CI reader understands, from meson's own log.
python3 - "$builddir/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
