#!/usr/bin/env bash
# kvfs quick start: installs what kvfs needs, builds it (build-release),
# formats a 2 GiB image file, mounts it, runs an LMCache-style connector
# workload on the mount, unmounts, and says what happened at each step.
#
# Safe to run again: the build is reused, the image is reformatted, a mount
# left by an interrupted run is unmounted first. Needs root (packages,
# /dev/fuse, allow_other). Works on a fresh Debian 12 machine.
#
# Usage: tools/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh

builddir=build-release
qs=/var/tmp/kvfs-quickstart
image=$qs/kvfs.img
mnt=$qs/mnt
log=$qs/kvfs.log

step() { echo; echo "==> $*"; }
is_mounted() { grep -qs " $mnt .* - fuse\.kvfs " /proc/self/mountinfo; }

if [ "$(id -u)" -ne 0 ]; then
  echo "quickstart: run as root (installs packages, mounts with /dev/fuse)" >&2
  exit 1
fi

step "1/6 packages"
kvfs_install_deps

step "2/6 build ($builddir, release)"
if [ ! -f "$builddir/build.ninja" ]; then
  meson setup "$builddir" -Dbuildtype=release
else
  echo "reusing $builddir"
fi
ninja -C "$builddir" tools/kvfs tools/mkfs.kvfs
kvfs_bin=$PWD/$builddir/tools/kvfs
mkfs_bin=$PWD/$builddir/tools/mkfs.kvfs

step "3/6 format a 2 GiB image: $image"
mkdir -p "$mnt"
if is_mounted; then
  echo "unmounting $mnt, left mounted by an earlier run"
  fusermount3 -u "$mnt" || umount -l "$mnt"
fi
# An earlier daemon may still be writing out and holds the image's lock.
for _ in $(seq 1 300); do
  [ ! -e "$image" ] || flock -n "$image" true && break
  sleep 0.1
done
"$mkfs_bin" --size 2G -f "$image"

step "4/6 mount at $mnt (daemon log: $log)"
# FUSE over io_uring (Linux 6.14+) takes most of the cost out of each FUSE
# round trip; kvfs uses it where the kernel offers it (transport=auto).
uring_param=/sys/module/fuse/parameters/enable_uring
if [ -w "$uring_param" ]; then
  if [ "$(cat "$uring_param")" != Y ]; then
    echo Y >"$uring_param"
    echo "switched on FUSE over io_uring (echo Y > $uring_param; N switches it off)"
  fi
else
  echo "this kernel has no FUSE over io_uring: kvfs uses /dev/fuse"
fi
"$kvfs_bin" -f "$image" "$mnt" >"$log" 2>&1 &
pid=$!
unmount_on_exit() {
  if is_mounted; then fusermount3 -u "$mnt" || true; fi
}
trap unmount_on_exit EXIT
for _ in $(seq 1 300); do
  is_mounted && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kvfs did not start:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
is_mounted || { echo "kvfs did not mount" >&2; exit 1; }
df -h "$mnt" | sed 's/^/    /'

step "5/6 connector workload (LMCache-style store/lookup/load, 64 keys x 4 MiB)"
rc=0
python3 tools/connector_workload.py "$mnt" --keys 64 --size 4M || rc=1
python3 tools/connector_workload.py "$mnt" --keys 64 --size 4M --direct || rc=1

step "6/6 unmount"
fusermount3 -u "$mnt"
daemon_rc=0
wait "$pid" || daemon_rc=$?
trap - EXIT
echo "kvfs exited with status $daemon_rc (0: staged data written, index committed, RocksDB closed)"

echo
if [ $rc -eq 0 ] && [ $daemon_rc -eq 0 ]; then
  echo "quickstart: OK -- formatted $image, mounted it, stored and loaded 2 x 64 chunks"
  echo "byte-exact, unmounted cleanly. Mount it again yourself with:"
  echo "    $kvfs_bin $image $mnt     # background; fusermount3 -u $mnt to unmount"
  exit 0
fi
echo "quickstart: FAILED (workload status $rc, daemon status $daemon_rc); daemon log: $log" >&2
exit 1
