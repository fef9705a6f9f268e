"""kvfs-bench --quick against the built binaries.

The benchmark is the instrument the other issues report with, so its own
guarantees are tested: every workload completes and verifies the bytes it
loads (read from its JSON), a corrupted load is caught, an interrupted run
leaves nothing mounted, attached or behind, and bad setups fail with one
clear line.

The tool and binaries come from meson (KVFS_BENCH, KVFS_BIN, MKFS_KVFS_BIN).
Mounting needs root and /dev/fuse; without them the tests are skipped, but
where both exist a skip is a failure.
"""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BENCH = os.environ.get("KVFS_BENCH", "")
KVFS_BIN = os.environ.get("KVFS_BIN", "")
MKFS_BIN = os.environ.get("MKFS_KVFS_BIN", "")


def can_mount():
    return os.geteuid() == 0 and os.path.exists("/dev/fuse")


@pytest.fixture(autouse=True)
def _environment():
    if not can_mount():
        pytest.skip("needs root and /dev/fuse")
    missing = [n for n, p in (("KVFS_BENCH", BENCH), ("KVFS_BIN", KVFS_BIN),
                              ("MKFS_KVFS_BIN", MKFS_BIN)) if not p or not os.path.exists(p)]
    if missing:
        # Root and /dev/fuse are here: not running the tests is a failure.
        pytest.fail(f"{', '.join(missing)} must name the tool and the built binaries "
                    "(run through meson test)")


@pytest.fixture
def scratch():
    d = tempfile.mkdtemp(prefix="kvfs-bench-test-", dir="/var/tmp")
    yield d
    # Whatever a failing run left is removed here, so that one failure does
    # not leave mounts, loop devices or daemons behind for the next test.
    for m in mounts_under(d):
        subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)
        subprocess.run(["umount", "-l", m], capture_output=True)
    for pid in processes_mentioning(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if loops_over(os.path.join(d, "ext4.img")):
        for line in loops_over(os.path.join(d, "ext4.img")).splitlines():
            subprocess.run(["losetup", "-d", line.split(":", 1)[0]], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def bench_cmd(*args):
    return [sys.executable, BENCH, *args]


def mounts_under(d):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(d + "/")]


def loops_over(image):
    r = subprocess.run(["losetup", "-j", image], capture_output=True, text=True)
    return r.stdout.strip()


def processes_mentioning(d):
    """PIDs whose command line names `d` (a kvfs daemon left running)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if d.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def assert_torn_down(d):
    assert mounts_under(d) == [], "still mounted after kvfs-bench exited"
    assert loops_over(os.path.join(d, "ext4.img")) == "", "loop device left attached"
    for name in ("kvfs.img", "ext4.img", "fio.img"):
        assert not os.path.exists(os.path.join(d, name)), f"{name} left behind"
    assert processes_mentioning(d) == [], "a process of the run is still alive"


def test_quick_run_completes_every_workload_and_verifies_every_load(scratch):
    out = os.path.join(scratch, "out.json")
    png = os.path.join(scratch, "out.png")
    r = subprocess.run(bench_cmd("--quick", "--dir", scratch, "--json", out, "--plot", png),
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"kvfs-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        doc = json.load(f)
    assert doc["outcome"] == "ok"
    cfg = doc["config"]
    assert cfg["workloads"] == ["fio", "lmcache", "lookup", "batch", "restore"]
    status = doc["workloads"]
    for w in ("fio", "lmcache", "lookup", "restore"):
        assert status[w]["status"] == "ok", f"{w}: {status[w]}"
    for w in ("lmcache", "lookup", "restore"):
        assert status[w]["verified"] is True, f"{w}: {status[w]}"
    # The batch workload may say "not available" only while there is no
    # kvfs Python module; once there is one, kvfs-bench must drive it.
    if importlib.util.find_spec("kvfs") is None:
        assert status["batch"]["status"] == "unavailable", status["batch"]
    else:
        assert status["batch"]["status"] == "ok" and status["batch"]["verified"], status["batch"]

    samples = doc["samples"]

    def count(**match):
        return sum(all(s.get(k) == v for k, v in match.items()) for s in samples)

    sizes, depths, batches, modes = (cfg["sizes"], cfg["fio_depths"], cfg["batches"],
                                     cfg["modes"])
    for size in sizes:
        for rw in ("read", "write"):
            for depth in depths:
                assert count(workload="fio", op=rw, size=size, depth=depth) == 1
        for m in batches:
            for mode in modes:
                for fs in ("kvfs", "ext4"):
                    key = dict(workload="lmcache", fs=fs, size=size, batches=m, mode=mode)
                    assert count(op="store", **key) == 1, key
                    assert count(op="load", verified=True, mismatches=0, **key) == 1, key
    for fs in ("kvfs", "ext4"):
        assert count(workload="lookup", fs=fs, op="hit", verified=True) == 1
        assert count(workload="lookup", fs=fs, op="miss", verified=True) == 1
        assert count(workload="restore", fs=fs, op="idle", verified=True) == 1
        assert count(workload="restore", fs=fs, op="busy", verified=True) == 1
    assert all(s["value"] > 0 for s in samples if s["workload"] != "batch")
    # kvfs loads were cold: by the control file or by a remount.
    assert {s["cold"] for s in samples if s["workload"] == "lmcache" and s["fs"] == "kvfs"
            and s["op"] == "load"} <= {"drop_cache", "remount"}

    # The table has a row per measurement, with both filesystems and ratios.
    assert "kvfs/ext4" in r.stdout and "kvfs/limit" in r.stdout
    assert any(row["workload"] == "lmcache" and row["kvfs_vs_ext4"] and row["kvfs_vs_limit"]
               for row in doc["rows"])
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert_torn_down(scratch)


def interrupt_at_progress(args, prefix, while_running=lambda seen: None):
    """Runs kvfs-bench with `args`, sends SIGINT once a progress line starts
    with `prefix` (by progress, not by a delay a fast or slow machine would
    miss), after while_running(lines so far) had its say; returns the exit
    code and the whole output."""
    p = subprocess.Popen(bench_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    seen = []
    try:
        deadline = time.monotonic() + 90
        while True:
            line = p.stdout.readline()
            assert line, "kvfs-bench ended before it could be interrupted:\n" + "".join(seen)
            seen.append(line)
            if line.startswith(prefix):
                break
            assert time.monotonic() < deadline, "no progress within 90 s"
        while_running(seen)
        p.send_signal(signal.SIGINT)
        output, _ = p.communicate(timeout=90)
        return p.returncode, "".join(seen) + output
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def ram_mounts_under(d):
    """tmpfs, fuse and ext4 (loop) mounts at or under `d`."""
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f
                if line.split()[4] == d or line.split()[4].startswith(d + "/")]


def loops_under(d):
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if d + "/" in line]


def test_ram_device_run_verifies_and_unmounts_its_tmpfs(scratch):
    out = os.path.join(scratch, "out.json")
    r = subprocess.run(bench_cmd("--quick", "--ram", "--dir", scratch, "--json", out,
                                 "--workloads", "fio,lmcache,batch,restore",
                                 "--modes", "buffered,direct", "--batches", "1"),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"kvfs-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        doc = json.load(f)
    cfg = doc["config"]
    assert cfg["ram"] is True and cfg["device"] == "ram" and cfg["ram_bytes"] > 0
    # The images were on the tmpfs, which is gone.
    assert cfg["machine"]["scratch_fs"]["fstype"] == "tmpfs", cfg["machine"]
    assert "mounting a tmpfs" in r.stderr and os.path.join(scratch, "ram") in r.stderr
    for w in ("fio", "lmcache", "restore"):
        assert doc["workloads"][w]["status"] == "ok", doc["workloads"][w]
    loads = [s for s in doc["samples"] if s.get("op") == "load"]
    assert loads and all(s["verified"] for s in loads)
    # What the device stands for and what it does not model.
    assert "faster than the software" in r.stdout and "DMA" in r.stdout
    # CPU seconds per GiB beside the throughput: the daemon's for kvfs
    # (ours, so known), the client's and the system's for both.
    assert "kvfs s/GiB dmn/cli/sys" in r.stdout and "SYSTEM-WIDE" in r.stdout
    for s in doc["samples"]:
        if s["workload"] in ("lmcache", "restore") and s["op"] in ("store", "load", "idle",
                                                                  "busy"):
            assert s["cpu_client_s"] >= 0 and s["cpu_system_s"] >= 0, s
            assert (s["cpu_daemon_s"] is None) == (s["fs"] == "ext4"), s
    rows = [row for row in doc["rows"] if row["workload"] == "lmcache"]
    assert rows and all(row["cpu_kvfs"]["daemon"] is not None and row["cpu_ext4"]["daemon"]
                        is None for row in rows)
    assert ram_mounts_under(scratch) == [], "the tmpfs or a mount on it is still there"
    assert loops_under(scratch) == []
    assert not os.path.exists(os.path.join(scratch, "ram"))
    assert_torn_down(scratch)


def test_interrupted_ram_run_leaves_no_tmpfs_loop_or_fuse_mount(scratch):
    def mounted(seen):
        assert ram_mounts_under(scratch), "nothing mounted while running:\n" + "".join(seen)

    # "[2/": inside the lmcache workload, everything mounted.
    rc, output = interrupt_at_progress(("--quick", "--ram", "--dir", scratch, "--workloads",
                                        "lmcache", "--sizes", "1M", "--keys", "64"),
                                       "[2/", mounted)
    assert rc == 128 + signal.SIGINT, output
    assert ram_mounts_under(scratch) == [], output
    assert loops_under(scratch) == [], output
    assert not os.path.exists(os.path.join(scratch, "ram")), output
    assert_torn_down(scratch)


def test_image_under_dev_is_a_file_not_a_block_device():
    """A --dir under /dev/ (here /dev/shm) holds image files: mkfs.kvfs gets
    --size (it failed without it when the path decided "block device")."""
    d = tempfile.mkdtemp(prefix="kvfs-bench-test-", dir="/dev/shm")
    try:
        r = subprocess.run(bench_cmd("--quick", "--dir", d, "--workloads", "lmcache",
                                     "--fs", "kvfs", "--sizes", "256K", "--batches", "1",
                                     "--modes", "buffered"),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"kvfs-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        assert mounts_under(d) == []
        assert not os.path.exists(os.path.join(d, "kvfs.img"))
    finally:
        for m in mounts_under(d):
            subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def test_small_configurations_repeat_until_they_move_sample_bytes(scratch):
    out = os.path.join(scratch, "out.json")
    # 8 keys of 256K: 2 MiB per request at M=1 (two samples of 4M), 4 MiB at
    # M=2 (one); the 8 x 256K batch moves 2 MiB (two samples).
    r = subprocess.run(bench_cmd("--quick", "--dir", scratch, "--json", out,
                                 "--workloads", "lmcache,batch", "--sizes", "256K",
                                 "--batches", "1,2", "--modes", "buffered",
                                 "--batch-shapes", "8x256K", "--sample-bytes", "4M"),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"kvfs-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        doc = json.load(f)

    def repeats(**match):
        return sorted(s["repeat"] for s in doc["samples"]
                      if all(s.get(k) == v for k, v in match.items()))

    for fs in ("kvfs", "ext4"):
        for op in ("store", "load"):
            assert repeats(workload="lmcache", fs=fs, op=op, batches=1) == [0, 1]
            assert repeats(workload="lmcache", fs=fs, op=op, batches=2) == [0]
    if importlib.util.find_spec("kvfs") is not None:
        for op in ("store", "load"):
            assert repeats(workload="batch", op=op, size=256 * 1024) == [0, 1]
        for op in ("exists", "exists loop"):
            assert repeats(workload="batch", op=op) == [0, 1, 2]
    assert all(s["verified"] for s in doc["samples"] if s.get("op") == "load")
    # The progress count covers the repeats: the last step is N/N.
    steps = re.findall(r"^\[(\d+)/(\d+) ", r.stderr, re.M)
    assert steps and steps[-1][0] == steps[-1][1], r.stderr
    assert_torn_down(scratch)


def test_corrupted_load_fails_verification(scratch):
    out = os.path.join(scratch, "out.json")
    env = dict(os.environ, KVFS_BENCH_FAULT="flip-load-byte")
    r = subprocess.run(bench_cmd("--quick", "--dir", scratch, "--json", out,
                                 "--workloads", "lmcache", "--fs", "kvfs", "--sizes", "256K",
                                 "--batches", "1", "--modes", "buffered"),
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, f"a corrupted load must fail the run:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        doc = json.load(f)
    st = doc["workloads"]["lmcache"]
    assert st["status"] == "failed" and st["verified"] is False, st
    assert "did not verify" in st["reason"] and "bytes differ" in st["reason"], st
    loads = [s for s in doc["samples"] if s["workload"] == "lmcache" and s["op"] == "load"]
    assert len(loads) == 1 and loads[0]["verified"] is False and loads[0]["mismatches"] == 1
    assert "FAILED" in r.stdout
    assert_torn_down(scratch)


# wholeseq and vllm, tiny: 8 MiB objects by 2 threads, 1 MiB files by 2 + 2
# threads, fio at 1 MiB for the limit column.
LARGE_ARGS = ("--quick", "--workloads", "fio,wholeseq,vllm", "--sizes", "1M",
              "--object-sizes", "8M", "--object-threads", "2", "--object-count", "2",
              "--vllm-sizes", "1M", "--vllm-threads", "2,2", "--vllm-bytes", "8M")


def test_wholeseq_and_vllm_report_every_figure_and_verify_every_load(scratch):
    out = os.path.join(scratch, "out.json")
    r = subprocess.run(bench_cmd(*LARGE_ARGS, "--dir", scratch, "--json", out),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"kvfs-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        doc = json.load(f)
    for w in ("wholeseq", "vllm"):
        assert doc["workloads"][w] == {"status": "ok", "verified": True, "reason": ""}, w
    samples = doc["samples"]

    def one(**match):
        found = [s for s in samples if all(s.get(k) == v for k, v in match.items())]
        assert len(found) == 1, (match, found)
        return found[0]

    for fs in ("kvfs", "ext4"):
        key = dict(workload="wholeseq", fs=fs, size=8 << 20)
        store = one(op="store", **key)
        assert store["bytes"] == 4 * (8 << 20) and len(store["object_ms"]) == 4
        for op in ("load", "reload"):
            s = one(op=op, verified=True, mismatches=0, **key)
            assert len(s["object_ms"]) == 4 and s["value"] > 0
        assert one(op="load", **key)["cold"] in ("drop_cache", "remount", "drop_caches")
        assert one(op="load p95", **key)["value"] >= one(op="load p50", **key)["value"] > 0
        key = dict(workload="vllm", fs=fs, size=1 << 20)
        for op in ("load", "reload", "load during stores"):
            s = one(op=op, verified=True, mismatches=0, **key)
            assert s["o_direct"] is True and s["mode"] == "direct" and s["keys"] == 8
        for op in ("store", "store existing", "store during loads"):
            assert one(op=op, **key)["value"] > 0
        for op in ("store", "store during loads"):
            # Per stored key: the tail a store waits, beside the throughput.
            assert one(op=f"{op} p99", unit="ms", **key)["value"] >= one(
                op=f"{op} p50", **key)["value"] > 0
    for s in samples:
        if s["workload"] in ("wholeseq", "vllm") and s["unit"] == "MB/s":
            assert (s["cpu_daemon_s"] is None) == (s["fs"] == "ext4"), s
    rows = {(row["workload"], row["op"]): row for row in doc["rows"]}
    for w, op in (("wholeseq", "store"), ("wholeseq", "load"), ("wholeseq", "reload"),
                  ("vllm", "store"), ("vllm", "load"), ("vllm", "reload"),
                  ("vllm", "load during stores"), ("vllm", "store during loads")):
        row = rows[(w, op)]
        # Beside ext4 and fio's best, with the daemon's CPU per GiB.
        assert row["kvfs_vs_ext4"] and row["kvfs_vs_limit"], row
        assert row["cpu_kvfs"]["daemon"] is not None, row
    for op in ("load p50", "load p95"):
        assert rows[("wholeseq", op)]["unit"] == "ms" and rows[("wholeseq", op)]["kvfs_vs_ext4"]
    assert "store + fsync" in r.stdout and "load (cold) during stores" in r.stdout
    assert_torn_down(scratch)


def test_wholeseq_and_vllm_catch_a_corrupted_load(scratch):
    out = os.path.join(scratch, "out.json")
    env = dict(os.environ, KVFS_BENCH_FAULT="flip-load-byte")
    args = [a for a in LARGE_ARGS if a != "fio,wholeseq,vllm"]
    args[args.index("--workloads") + 1:args.index("--workloads") + 1] = ["wholeseq,vllm"]
    r = subprocess.run(bench_cmd(*args, "--fs", "kvfs", "--dir", scratch, "--json", out),
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, f"a corrupted load must fail the run:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        doc = json.load(f)
    for w in ("wholeseq", "vllm"):
        st = doc["workloads"][w]
        assert st["status"] == "failed" and st["verified"] is False, st
        assert "did not verify" in st["reason"] and "bytes differ" in st["reason"], st
        loads = [s for s in doc["samples"] if s["workload"] == w and s["op"] == "load"]
        assert len(loads) == 1 and loads[0]["verified"] is False and loads[0]["mismatches"] == 1
    assert_torn_down(scratch)


# Interrupt points: right after the k-th of the 8 progress lines, so the
# signal lands inside a store, the kvfs remount between store and load, or a
# load -- by progress, not by a delay a fast or slow machine would miss.
@pytest.mark.parametrize("after_step", [1, 3, 5])
def test_interrupted_run_unmounts_detaches_and_removes_images(scratch, after_step):
    rc, output = interrupt_at_progress(("--quick", "--dir", scratch, "--workloads", "lmcache",
                                        "--sizes", "1M", "--keys", "64"),
                                       f"[{after_step}/")
    assert rc == 128 + signal.SIGINT, output
    assert "interrupted" in output
    assert_torn_down(scratch)


def test_bad_chunk_size_is_one_clear_line(scratch):
    r = subprocess.run(bench_cmd("--quick", "--dir", scratch, "--sizes", "1000"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip() == ("kvfs-bench: chunk size 1000: must be a positive multiple "
                                "of 4096 (O_DIRECT)")
    assert mounts_under(scratch) == []


def test_image_too_small_for_the_workload_is_refused(scratch):
    r = subprocess.run(bench_cmd("--quick", "--dir", scratch, "--image-size", "64M"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "--image-size 64M is too small" in r.stderr, r.stderr
    assert mounts_under(scratch) == []


def test_not_root_is_refused_with_a_clear_error(scratch):
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to run kvfs-bench as another user")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        *bench_cmd("--quick", "--dir", scratch)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "must run as root" in r.stderr, r.stderr
