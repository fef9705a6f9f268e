"""Commands, mounts, kernel caches and what the machine is."""
import os
import platform
import re
import stat
import subprocess

from .common import BenchError


def run(cmd, check=True, timeout=None, **kw):
    """Runs a command in its own session (Ctrl-C reaches only us, so teardown
    happens in order); returns CompletedProcess with text output."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           start_new_session=True, **kw)
    except FileNotFoundError:
        raise BenchError(f"{cmd[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(cmd)}: no answer within {timeout} s") from None
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise BenchError(f"{' '.join(cmd)}: exit {r.returncode}: {msg[-1] if msg else ''}")
    return r


def is_block_device(path):
    """True for a block device (or a symlink to one), by stat: a path under
    /dev/ may be a regular file (/dev/shm/x.img) and a device may live
    elsewhere."""
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def os_error_text(e):
    """'PATH: strerror' for an OSError whose filename may be bytes."""
    name = e.filename.decode(errors="replace") if isinstance(e.filename, bytes) else e.filename
    return f"{name}: {e.strerror}" if name else str(e)


def _unescape_mountinfo(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mount_table():
    """{mountpoint: (fstype, source)} from /proc/self/mountinfo."""
    table = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            table[_unescape_mountinfo(fields[4])] = (fields[sep + 1],
                                                     _unescape_mountinfo(fields[sep + 2]))
    return table


def fstype_at(path):
    return mount_table().get(os.path.realpath(path), (None, None))[0]


def drop_kernel_caches():
    """Writes back dirty pages, then drops page cache, dentries and inodes."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def dirty_bytes():
    """Dirty + Writeback from /proc/meminfo: kernel page-cache data on its
    way to a disk (ext4's share of a store burst; kvfs stages in its own
    memory instead)."""
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(("Dirty:", "Writeback:")):
                total += int(line.split()[1]) * 1024
    return total


def mem_available():
    """MemAvailable from /proc/meminfo, bytes (None if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_info(scratch):
    info = {"hostname": platform.node(), "kernel": platform.release(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg()}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_bytes"] = int(line.split()[1]) * 1024
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    r = run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", scratch], check=False)
    if r.returncode == 0 and r.stdout.strip():
        src = r.stdout.split()
        info["scratch_fs"] = {"source": src[0], "fstype": src[1] if len(src) > 1 else ""}
        dev = os.path.basename(src[0])
        try:
            with open(f"/sys/class/block/{dev}/queue/rotational") as f:
                info["scratch_rotational"] = f.read().strip() == "1"
            model = f"/sys/class/block/{dev}/device/model"
            if os.path.exists(model):
                with open(model) as f:
                    info["scratch_device_model"] = f.read().strip()
        except OSError:
            pass
    return info
