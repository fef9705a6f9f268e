"""CPU time of a measured phase: the kvfs daemon's, the client's and the
system's."""
import os
import resource

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid):
    """user+system seconds of process `pid` (all its threads, also ended
    ones) from /proc/PID/stat; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def system_cpu_seconds():
    """CPU seconds the whole machine spent busy (user, nice, system, irq,
    softirq of every CPU) from /proc/stat: every process and the kernel's
    own threads (writeback, loop devices), other load included."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / CLK_TCK


def client_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """CPU seconds spent during a measured phase: the kvfs daemon's
    (/proc/PID/stat; None for ext4 or a mount that is not ours), the
    client's (this process: the workload's threads), the system's."""

    def __init__(self, daemon_pid):
        self.pid = daemon_pid
        self.d0 = process_cpu_seconds(daemon_pid) if daemon_pid else None
        self.c0 = client_cpu_seconds()
        self.s0 = system_cpu_seconds()

    def stop(self):
        d1 = process_cpu_seconds(self.pid) if self.pid else None
        c1, s1 = client_cpu_seconds(), system_cpu_seconds()
        return {"cpu_daemon_s": None if self.d0 is None or d1 is None else d1 - self.d0,
                "cpu_client_s": c1 - self.c0, "cpu_system_s": s1 - self.s0}


def add_cpu(total, part):
    """The sum of two CpuMeter.stop() results (total may be None: the
    first phase); a daemon figure unknown in either is unknown in the sum."""
    if total is None:
        return dict(part)
    return {k: None if total[k] is None or part[k] is None else total[k] + part[k]
            for k in total}
