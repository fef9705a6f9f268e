"""The kvfs-bench command: options, configuration, main()."""
import argparse
import datetime
import importlib
import json
import os
import re
import shutil
import signal
import sys

from . import __doc__ as USAGE
from .bench import Bench
from .common import (BLOCK, EXTRA_WORKLOADS, FILESYSTEMS, FS_WORKLOADS, FULL, GATE, GiB, KiB, MiB,
                     MODES, QUICK,
                     RAM_INDEX_BYTES, WORKLOADS, BenchError, Interrupted, align_up, fmt_size,
                     parse_list, parse_shape, parse_size)
from .plot import plot
from .report import format_report, summarize
from .system import machine_info, mem_available
from .workloads.eviction import evict_image_bytes, format_evict_report, resolve_evict_config, \
    summarize_evict
from .workloads.vllm import vllm_keys


def build_parser():
    ap = argparse.ArgumentParser(
        prog="kvfs-bench", description=USAGE.split("\n\n")[0].split(": ", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(USAGE.split("\n\n")[1:]))
    ap.add_argument("--dir", default="/var/tmp/kvfs-bench",
                    help="scratch directory for images and mountpoints (default %(default)s); "
                         "it should be on the disk to measure")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and counts, one round (well under a minute)")
    ap.add_argument("--workloads", metavar="LIST", default=",".join(WORKLOADS),
                    help="comma-separated subset of " + ",".join(WORKLOADS) + " (default), "
                         "and " + ",".join(EXTRA_WORKLOADS) + " (only when named; long, see "
                         "below)")
    ap.add_argument("--fs", metavar="LIST", default=",".join(FILESYSTEMS),
                    help="filesystems to measure: kvfs,ext4 (default both)")
    ap.add_argument("--rounds", type=int, metavar="N", help=f"rounds per measurement ({FULL['rounds']})")
    ap.add_argument("--sizes", metavar="LIST", help=f"chunk sizes ({FULL['sizes']}); multiples of 4 KiB")
    ap.add_argument("--keys", type=int, metavar="N", help=f"keys per batch ({FULL['keys']})")
    ap.add_argument("--batches", metavar="LIST", help=f"batches in flight, one thread each ({FULL['batches']})")
    ap.add_argument("--modes", metavar="LIST", help=f"buffered and/or direct ({FULL['modes']})")
    ap.add_argument("--fio-runtime", type=float, metavar="S",
                    help=f"seconds per fio job ({FULL['fio_runtime']:g})")
    ap.add_argument("--fio-depths", metavar="LIST", help=f"fio queue depths ({FULL['fio_depths']})")
    ap.add_argument("--sample-bytes", metavar="SIZE",
                    help="lmcache and batch: repeat a configuration within a round until its "
                         f"samples move this many bytes ({FULL['sample_bytes']}); 0: one "
                         "sample each, and one EXISTS call per round instead of three")
    ap.add_argument("--fio-region", metavar="SIZE", help=f"bytes fio reads and writes ({FULL['fio_region']})")
    ap.add_argument("--fio-target", metavar="PATH", help="file or block device for fio (default: DIR/fio.img, "
                                         "or --kvfs-device before it is formatted); "
                                         "ITS CONTENTS ARE OVERWRITTEN")
    ap.add_argument("--lookup-names", type=int, metavar="N",
                    help=f"names per lookup storm ({FULL['lookup_names']})")
    ap.add_argument("--restore", metavar="KxSIZE", help=f"restore load, KEYSxSIZE ({FULL['restore']})")
    ap.add_argument("--batch-shapes", metavar="LIST",
                    help=f"batch ioctl shapes, KEYSxSIZE ({FULL['batch_shapes']})")
    ap.add_argument("--burst", metavar="SIZE", help=f"bytes of stores during the restore ({FULL['burst']})")
    ap.add_argument("--evict-keys", type=int, metavar="N",
                    help=f"evict: keys of the Zipf trace ({FULL['evict_keys']})")
    ap.add_argument("--evict-requests", type=int, metavar="N",
                    help=f"evict: requests of the Zipf trace ({FULL['evict_requests']})")
    ap.add_argument("--evict-capacity", type=float, metavar="FRACTION",
                    help="evict: bytes the high watermark holds, as a share of the trace's "
                         f"working set ({FULL['evict_capacity']})")
    ap.add_argument("--evict-sizes", metavar="LIST",
                    help=f"evict: chunk sizes of the store loop ({FULL['evict_sizes']})")
    ap.add_argument("--evict-volume", metavar="SIZE",
                    help="evict: image of the store loop and the pass latency "
                         f"({FULL['evict_volume']})")
    ap.add_argument("--evict-scan-ms", type=float, metavar="MS",
                    help="evict: how often the outside atime evictor looks at the space used "
                         f"({FULL['evict_scan_ms']:g})")
    ap.add_argument("--object-sizes", metavar="LIST",
                    help="wholeseq: object sizes, multiples of 4 KiB "
                         f"({FULL['object_sizes']}; --quick: {QUICK['object_sizes']})")
    ap.add_argument("--object-threads", type=int, metavar="T",
                    help="wholeseq: threads storing and loading at once "
                         f"({FULL['object_threads']}; --quick: {QUICK['object_threads']})")
    ap.add_argument("--object-count", type=int, metavar="N",
                    help="wholeseq: objects per thread per size and round "
                         f"({FULL['object_count']}; --quick: {QUICK['object_count']})")
    ap.add_argument("--vllm-sizes", metavar="LIST",
                    help="vllm: file sizes, multiples of 4 KiB "
                         f"({FULL['vllm_sizes']}; --quick: {QUICK['vllm_sizes']})")
    ap.add_argument("--vllm-threads", metavar="R,W",
                    help="vllm: reader and writer threads "
                         f"({FULL['vllm_threads']}; --quick: {QUICK['vllm_threads']})")
    ap.add_argument("--vllm-bytes", metavar="SIZE",
                    help="vllm: bytes of keys per phase and size, at least one key per thread "
                         f"({FULL['vllm_bytes']}; --quick: {QUICK['vllm_bytes']})")
    ap.add_argument("--image-size", metavar="SIZE",
                    help=f"size of each image file ({FULL['image_size']}; with --ram: what the "
                         "largest workload needs)")
    ap.add_argument("--ram", action="store_true",
                    help="put the images and fio's file on a tmpfs that kvfs-bench mounts at "
                         "DIR/ram for the run (a device faster than the software)")
    ap.add_argument("--seed", type=int, metavar="N", default=1, help="seed of the data pattern (1)")
    ap.add_argument("--kvfs-mount", metavar="DIR", help="use this existing kvfs mount (nothing is formatted)")
    ap.add_argument("--ext4-mount", metavar="DIR",
                    help="use this existing mount of a kernel filesystem instead of ext4 on a "
                         "loop device")
    ap.add_argument("--kvfs-device", metavar="DEV", help="format this block device with mkfs.kvfs instead of "
                                          "an image file (index in DIR/kvfs.index)")
    ap.add_argument("--ext4-device", metavar="DEV", help="format this block device with mkfs.ext4 instead of "
                                          "a loop device")
    ap.add_argument("--kvfs-options", metavar="OPTS", help="extra -o options for the kvfs daemon")
    ap.add_argument("--kvfs-bin", metavar="PATH", help="kvfs daemon (default: $KVFS_BIN, else kvfs in PATH)")
    ap.add_argument("--mkfs-bin", metavar="PATH",
                    help="mkfs.kvfs (default: $MKFS_KVFS_BIN, else mkfs.kvfs in PATH)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the image files (everything is still unmounted)")
    ap.add_argument("--json", metavar="FILE", help="write every sample and the summary as JSON")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="plot throughput per chunk size (needs python3-matplotlib)")
    return ap


def find_binary(given, env, name):
    for cand in (given, os.environ.get(env), shutil.which(name),
                 shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")):
        if cand and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return None


def resolve_config(a):
    preset = QUICK if a.quick else FULL

    def pick(attr, key=None):
        v = getattr(a, attr)
        return preset[key or attr] if v is None else v

    cfg = {"quick": a.quick, "dir": os.path.abspath(a.dir), "seed": a.seed}
    cfg["workloads"] = parse_list(a.workloads, str.strip, "--workloads")
    bad = [w for w in cfg["workloads"] if w not in WORKLOADS + EXTRA_WORKLOADS]
    if bad:
        raise BenchError(f"--workloads: unknown {','.join(bad)} "
                         f"(known: {','.join(WORKLOADS + EXTRA_WORKLOADS)})")
    cfg["filesystems"] = parse_list(a.fs, str.strip, "--fs")
    bad = [f for f in cfg["filesystems"] if f not in FILESYSTEMS]
    if bad:
        raise BenchError(f"--fs: unknown {','.join(bad)} (known: kvfs,ext4)")
    cfg["rounds"] = pick("rounds")
    cfg["sizes"] = parse_list(pick("sizes"), parse_size, "--sizes")
    cfg["keys"] = pick("keys")
    cfg["batches"] = parse_list(pick("batches"), int, "--batches")
    cfg["modes"] = parse_list(pick("modes"), str.strip, "--modes")
    cfg["fio_runtime"] = pick("fio_runtime")
    cfg["fio_depths"] = parse_list(pick("fio_depths"), int, "--fio-depths")
    cfg["fio_region"] = parse_size(pick("fio_region"))
    cfg["sample_bytes"] = parse_size(pick("sample_bytes"))
    cfg["lookup_names"] = pick("lookup_names")
    cfg["restore_keys"], cfg["restore_size"] = parse_shape(pick("restore"), "--restore")
    cfg["batch_shapes"] = parse_list(pick("batch_shapes"),
                                     lambda t: parse_shape(t, "--batch-shapes"),
                                     "--batch-shapes")
    cfg["burst"] = parse_size(pick("burst"))
    cfg["ram"] = bool(a.ram)
    if "evict" in cfg["workloads"]:
        resolve_evict_config(a, cfg, pick)
    resolve_large_config(cfg, pick)
    cfg["device"] = "ram" if a.ram else "disk"
    bad = [m for m in cfg["modes"] if m not in MODES]
    if bad:
        raise BenchError(f"--modes: unknown {','.join(bad)} (known: buffered,direct)")
    for s in cfg["sizes"] + [cfg["restore_size"]] + [s for _, s in cfg["batch_shapes"]]:
        if s <= 0 or s % BLOCK:
            raise BenchError(f"chunk size {s}: must be a positive multiple of 4096 (O_DIRECT)")
    for name in ("rounds", "keys", "lookup_names", "restore_keys"):
        if cfg[name] < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be at least 1")
    if min(cfg["batches"]) < 1 or min(cfg["fio_depths"]) < 1 or \
            min(k for k, _ in cfg["batch_shapes"]) < 1:
        raise BenchError("--batches, --fio-depths and the keys of --batch-shapes must be at least 1")
    # Every workload deletes its files before the next one starts; the
    # largest working set must fit, with room for allocation slack.
    need = 0
    if "lmcache" in cfg["workloads"]:
        need = max(need, max(cfg["sizes"]) * cfg["keys"] * max(cfg["batches"]))
    if "restore" in cfg["workloads"]:
        need = max(need, cfg["restore_keys"] * cfg["restore_size"] + cfg["burst"]
                   + cfg["restore_size"])
    if "lookup" in cfg["workloads"]:
        need = max(need, cfg["lookup_names"] * 8 * KiB)
    if "batch" in cfg["workloads"]:
        need = max(need, max(k * s for k, s in cfg["batch_shapes"]))
    if "wholeseq" in cfg["workloads"]:
        need = max(need, cfg["object_threads"] * cfg["object_count"] * max(cfg["object_sizes"]))
    if "vllm" in cfg["workloads"]:
        need = max(need, max(2 * vllm_keys(cfg, s) * s for s in cfg["vllm_sizes"]))
    managed = not (a.kvfs_mount and a.ext4_mount)
    if a.image_size is None and a.ram:
        # RAM is scarcer than disk: the images are as large as the run needs
        # (with room for allocation slack), not the disk default.
        cfg["image_size"] = max(GiB, align_up(int(need * 1.5 + 512 * MiB), 512 * MiB))
    else:
        cfg["image_size"] = parse_size(pick("image_size"))
    if managed and need * 1.25 + 256 * MiB > cfg["image_size"]:
        raise BenchError(f"--image-size {fmt_size(cfg['image_size'])} is too small: the largest "
                         f"workload holds {fmt_size(need)} at once (give at least "
                         f"{fmt_size(align_up(int(need * 1.25 + 256 * MiB), GiB))})")
    if a.ram:
        resolve_ram(a, cfg, need)
    return cfg


def resolve_large_config(cfg, pick):
    """The options of wholeseq and vllm, checked."""
    cfg["object_sizes"] = parse_list(pick("object_sizes"), parse_size, "--object-sizes")
    cfg["object_threads"] = pick("object_threads")
    cfg["object_count"] = pick("object_count")
    cfg["vllm_sizes"] = parse_list(pick("vllm_sizes"), parse_size, "--vllm-sizes")
    threads = parse_list(pick("vllm_threads"), int, "--vllm-threads")
    if len(threads) != 2:
        raise BenchError("--vllm-threads: expected READERS,WRITERS such as 16,16")
    cfg["vllm_readers"], cfg["vllm_writers"] = threads
    cfg["vllm_bytes"] = parse_size(pick("vllm_bytes"))
    if min(cfg["object_threads"], cfg["object_count"], *threads) < 1:
        raise BenchError("--object-threads, --object-count and --vllm-threads must be at least 1")
    for s in cfg["object_sizes"] + cfg["vllm_sizes"]:
        if s <= 0 or s % BLOCK:
            raise BenchError(f"object or file size {s}: must be a positive multiple of 4096")
    # The client's buffers: wholeseq one of the largest object per thread,
    # vllm three sets of keys (two stored, one loaded).
    buffers = {"wholeseq": cfg["object_threads"] * max(cfg["object_sizes"]),
               "vllm": max(3 * vllm_keys(cfg, s) * s for s in cfg["vllm_sizes"])}
    avail = mem_available()
    for w, n in buffers.items():
        if w in cfg["workloads"] and avail is not None and n + 512 * MiB > avail:
            raise BenchError(f"{w}: its buffers ({fmt_size(n)}) do not fit in the "
                             f"{fmt_size(avail)} of memory available; give smaller sizes, "
                             "fewer threads or (vllm) a smaller --vllm-bytes")


def resolve_ram(a, cfg, need):
    """--ram: the tmpfs size (every file put on it, which kvfs-bench
    allocates in full) and a check that it and the run fit in memory."""
    if a.keep:
        raise BenchError("--keep with --ram: the images live on the tmpfs, which is unmounted "
                         "at the end of the run")
    uses_fs = any(w in cfg["workloads"] for w in FS_WORKLOADS)
    files = []
    if uses_fs and "kvfs" in cfg["filesystems"] and not a.kvfs_mount and not a.kvfs_device:
        files.append(("kvfs image", cfg["image_size"]))
        files.append(("kvfs index", RAM_INDEX_BYTES))
    if uses_fs and "ext4" in cfg["filesystems"] and not a.ext4_mount and not a.ext4_device:
        files.append(("ext4 image", cfg["image_size"]))
    if "evict" in cfg["workloads"]:
        image, index = evict_image_bytes(cfg)
        files.append(("eviction image", image))
        files.append(("eviction index", index))
    if "fio" in cfg["workloads"] and a.fio_target is None and not a.kvfs_device:
        files.append(("fio file", min(cfg["fio_region"], cfg["image_size"])))
    if not files:
        raise BenchError("--ram: nothing would be on the RAM device (every target is a mount or "
                         "device given on the command line)")
    cfg["ram_bytes"] = align_up(sum(n for _, n in files), MiB)
    # Besides the tmpfs: kvfs's RAM cache (cache_mb, 1024 MiB by default)
    # and the client's buffers (the largest working set) plus headroom.
    cache = 1024 * MiB
    m = re.search(r"(?:^|,)cache_mb=(\d+)", a.kvfs_options or "")
    if m:
        cache = int(m.group(1)) * MiB
    want = cfg["ram_bytes"] + cache + need + 512 * MiB
    avail = mem_available()
    if avail is not None and want > avail:
        raise BenchError(
            f"--ram: the tmpfs needs {fmt_size(cfg['ram_bytes'])} ("
            + ", ".join(f"{what} {fmt_size(n)}" for what, n in files)
            + f") and the run about {fmt_size(want - cfg['ram_bytes'])} more, but only "
            f"{fmt_size(avail)} of memory is available; give smaller --image-size, --sizes, "
            "--batches or --fio-region")


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    # --devices is its own mode (devices.py): volumes of N shaped devices.
    if any(x == "--devices" or x.startswith("--devices=") for x in args):
        from kvfs_bench.devices import main as devices_main
        return devices_main(args)
    a = build_parser().parse_args(argv)
    try:
        cfg = resolve_config(a)
    except BenchError as e:
        print(f"kvfs-bench: {e}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("kvfs-bench: must run as root (it mounts filesystems, sets up loop devices and "
              "drops the page cache)", file=sys.stderr)
        return 2
    uses_fs = any(w in cfg["workloads"] for w in FS_WORKLOADS)
    if (uses_fs and "kvfs" in cfg["filesystems"] and not a.kvfs_mount) or \
            "evict" in cfg["workloads"]:
        if not os.path.exists("/dev/fuse"):
            print("kvfs-bench: /dev/fuse is missing: FUSE is not available here "
                  "(modprobe fuse; in a container, pass --device /dev/fuse)", file=sys.stderr)
            return 2
        cfg["kvfs_bin"] = find_binary(a.kvfs_bin, "KVFS_BIN", "kvfs")
        cfg["mkfs_bin"] = find_binary(a.mkfs_bin, "MKFS_KVFS_BIN", "mkfs.kvfs")
        for key, name, opt in (("kvfs_bin", "kvfs", "--kvfs-bin"),
                               ("mkfs_bin", "mkfs.kvfs", "--mkfs-bin")):
            if cfg[key] is None:
                print(f"kvfs-bench: {name} not found (install kvfs, or give {opt})",
                      file=sys.stderr)
                return 2
        if not shutil.which("fusermount3"):
            print("kvfs-bench: fusermount3 not found (apt-get install fuse3)", file=sys.stderr)
            return 2
    else:
        cfg["kvfs_bin"] = cfg["mkfs_bin"] = None
    if uses_fs and "ext4" in cfg["filesystems"] and not a.ext4_mount:
        for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
            if not shutil.which(tool):
                print(f"kvfs-bench: {tool} not found (apt-get install e2fsprogs util-linux)",
                      file=sys.stderr)
                return 2
    if a.plot:
        try:
            importlib.import_module("matplotlib")  # fail now, not after the run
        except ImportError:
            print("kvfs-bench: --plot needs matplotlib (apt-get install python3-matplotlib)",
                  file=sys.stderr)
            return 2

    bench = Bench(a, cfg)

    def during_cleanup(signum, frame):
        sys.stderr.write("\nkvfs-bench: cleaning up, please wait\n")

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for s in handled:
        signal.signal(s, GATE.handler)

    started = datetime.datetime.now(datetime.timezone.utc)
    outcome, code = "ok", 0
    try:
        bench.setup_scratch()
        cfg["machine"] = machine_info(bench.data_dir)
        bench.run_all()
    except Interrupted as e:
        outcome, code = "interrupted", 128 + e.signum
        bench.progress.message(f"\nkvfs-bench: interrupted ({e}); tearing down")
    except BenchError as e:
        outcome, code = "error", 1
        bench.progress.message(f"kvfs-bench: {e}")
    finally:
        for s in handled:
            signal.signal(s, during_cleanup)
        errors = bench.teardown()
        for e in errors:
            print(f"kvfs-bench: teardown: {e}", file=sys.stderr)
        for s in handled:
            signal.signal(s, signal.SIG_DFL)
    if errors and code == 0:
        outcome, code = "error", 1

    for w in cfg["workloads"]:
        if w not in bench.status:
            bench.status[w] = {"status": "interrupted" if outcome == "interrupted" else "not run",
                               "verified": None, "reason": ""}
    failed = [w for w, s in bench.status.items() if s["status"] == "failed"]
    if failed and code == 0:
        code = 1
    fio_rows, rows = summarize(bench.samples, cfg)
    report = format_report(fio_rows, rows, cfg)
    evict_rows = summarize_evict(bench.samples)
    evict_report = format_evict_report(evict_rows, cfg)
    if evict_report:
        report = (report + "\n\n" + evict_report) if report else evict_report
    if report:
        print(report)
    for w in failed:
        print(f"\nkvfs-bench: {w} FAILED: {bench.status[w]['reason']}")
    if a.json:
        doc = {"tool": "kvfs-bench", "format": 1, "command": sys.argv,
               "started": started.isoformat(timespec="seconds"),
               "seconds": round((datetime.datetime.now(datetime.timezone.utc)
                                 - started).total_seconds(), 1),
               "outcome": outcome, "exit_status": code, "config": cfg,
               "loadavg_at_end": os.getloadavg(),
               "kvfs_cold_method": {t.name: getattr(t, "cold_method", None)
                                    for t in bench.targets.values()},
               "workloads": bench.status, "fio": fio_rows, "rows": rows, "evict": evict_rows,
               "samples": bench.samples}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")
    if a.plot and any(r["workload"] == "lmcache" for r in rows):
        plot(a.plot, rows, fio_rows, cfg, cfg.get("machine", {}))
        print(f"\nplot: {a.plot}")
    return code


if __name__ == "__main__":
    sys.exit(main())
