"""Fixtures for kvfs real-mount tests.

Each test gets a fresh volume: an image file under /var/tmp formatted with
mkfs.kvfs, mounted by `kvfs -f` running in the background. Teardown
unmounts with fusermount3 -u and requires the daemon to exit 0: a crash, a
hang or a non-zero exit fails the test that used the mount.

The binaries come from meson (KVFS_BIN, MKFS_KVFS_BIN). Mounting needs root
and /dev/fuse; without them the tests are skipped, but where both exist a
skip is a failure.

meson runs the suite once per FUSE transport: KVFS_TRANSPORT=dev or uring
becomes every mount's -o transport=. The uring run switches the kernel's
FUSE over io_uring on for its duration (and back afterwards); on a kernel
without it, it says so and skips.
"""
import contextlib
import ctypes
import os
import pickle
import signal
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

KVFS_BIN = os.environ.get("KVFS_BIN", "")
MKFS_BIN = os.environ.get("MKFS_KVFS_BIN", "")
FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"
TRANSPORT = os.environ.get("KVFS_TRANSPORT", "")
URING_PARAM = "/sys/module/fuse/parameters/enable_uring"

MiB = 1 << 20
GiB = 1 << 30

# A test that runs longer than this is taken as hung: its daemons' FUSE
# connections are aborted (so blocked system calls return ENOTCONN), the
# daemons killed, and the test fails -- instead of the suite hanging.
TEST_TIMEOUT_S = float(os.environ.get("KVFS_TEST_TIMEOUT", "180"))

_live_mounts = []  # Mounts with a running daemon (the watchdog's list)


def unmount(path, cmd=None):
    """Unmounts `path` (fusermount3 -u, or `cmd` + [path]) and returns the
    finished command. Refused with EBUSY, it is tried again for up to 30 s:
    on a busy machine a process outside the test (an indexer, a stat of
    every mount) or a close the kernel has not finished releasing can hold
    the mount for a moment. Any other failure returns at once."""
    cmd = cmd or [FUSERMOUNT, "-u"]
    deadline = time.monotonic() + 30
    while True:
        r = subprocess.run(cmd + [path], capture_output=True, text=True)
        busy = r.returncode != 0 and "busy" in (r.stderr + r.stdout).lower()
        if not busy or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def can_mount():
    return os.geteuid() == 0 and os.path.exists("/dev/fuse")


def pytest_configure(config):
    """As root, the tests run in a mount namespace of their own: the
    volumes they mount are invisible to every other process on the machine,
    whose statfs and stat of each mount (df, monitoring, a filesystem
    stress run elsewhere) would otherwise reach the daemons and change what
    the tests count. Mounts made outside still show inside (a slave, not a
    private, copy of the tree). Done here, while pytest has one thread."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_void_p]
    clone_newns, ms_rec, ms_slave = 0x00020000, 0x4000, 1 << 19
    if libc.unshare(clone_newns) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if libc.mount(None, b"/", None, ms_rec | ms_slave, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rslave /")


def pytest_collection_modifyitems(config, items):
    if not can_mount():
        skip = pytest.mark.skip(reason="needs root and /dev/fuse")
        for item in items:
            item.add_marker(skip)
        return
    if any(not p or not os.access(p, os.X_OK) for p in (KVFS_BIN, MKFS_BIN)):
        # Root and /dev/fuse are here: not running the tests is a failure.
        for item in items:
            item.add_marker(pytest.mark.usefixtures("_binaries_missing"))


@pytest.fixture(scope="session", autouse=True)
def _transport():
    """For the io_uring run: FUSE over io_uring switched on (as root), and
    put back as it was at the end."""
    if TRANSPORT != "uring" or not can_mount():
        yield
        return
    if not os.path.exists(URING_PARAM):
        pytest.skip("this kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING): "
                    "the io_uring run is skipped")
    with kernel_param(URING_PARAM, "Y"):
        yield


@contextlib.contextmanager
def kernel_param(path, value):
    """The kernel parameter file `path` (/sys/module/..., /proc/sys/...) set
    to `value` (as root) inside the block, and put back as it was after."""
    with open(path) as f:
        before = f.read().strip()
    with open(path, "w") as f:
        f.write(value)
    try:
        yield
    finally:
        with open(path, "w") as f:
            f.write(before)


def with_transport(options):
    """`options` with this run's transport=, unless they name one."""
    if not TRANSPORT or (options and "transport=" in options):
        return options
    return f"transport={TRANSPORT}" + (f",{options}" if options else "")


@pytest.fixture
def _binaries_missing():
    pytest.fail(f"KVFS_BIN={KVFS_BIN!r} and MKFS_KVFS_BIN={MKFS_BIN!r} must name the built "
                "binaries (run through meson test)")


def mounted_fstype(path):
    """fstype of the mount at `path`, or None (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            mnt = fields[4].replace("\\040", " ")
            if mnt == path:
                return fields[sep + 1]
    return None


def mkfs(image, size, *extra):
    r = subprocess.run([MKFS_BIN, "-f", "-q", "--size", str(size), *extra, image],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"mkfs.kvfs failed: {r.stderr}"


def run_kvfs(*args, timeout=60):
    """Runs kvfs to completion (startup-error tests)."""
    return subprocess.run([KVFS_BIN, *args], capture_output=True, text=True, timeout=timeout)


class Mount:
    """A kvfs daemon serving `image` at `path`, started with -f."""

    def __init__(self, image, path, options=None):
        self.image = image
        self.path = path
        self.options = options
        self.env = {}  # added to the daemon's environment (KVFS_KILL_ODDS...)
        self.proc = None
        self.log_path = path + ".log"

    def start(self):
        self.conn = None
        args = [KVFS_BIN, "-f"]
        options = with_transport(self.options)
        if options:
            args += ["-o", options]
        args += [self.image, self.path]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **self.env} if self.env else None)
        deadline = time.monotonic() + 30
        while mounted_fstype(self.path) != "fuse.kvfs":
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                pytest.fail(f"kvfs exited with {rc} before mounting: {self.read_log()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"kvfs did not mount within 30 s: {self.read_log()}")
            time.sleep(0.01)
        self.conn = os.minor(os.stat(self.path).st_dev)
        _live_mounts.append(self)

    def abort(self):
        """Watchdog: abort the daemon's FUSE connection (first: until then
        any process touching the mount, gdb's fork included, would block),
        record the daemon's threads, kill it."""
        proc = self.proc
        if proc is None:
            return
        conns = "/sys/fs/fuse/connections"
        if not os.listdir(conns):
            subprocess.run(["mount", "-t", "fusectl", "fusectl", conns], capture_output=True)
        try:
            with open(f"{conns}/{self.conn}/abort", "w") as f:
                f.write("1")
        except OSError:
            pass
        if shutil.which("gdb"):
            with open(self.log_path, "ab") as log:
                log.write(b"\n=== watchdog: daemon threads at timeout ===\n")
                log.flush()
                try:
                    subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex",
                                    "thread apply all bt 30"], stdout=log,
                                   stderr=subprocess.DEVNULL, timeout=60)
                except subprocess.TimeoutExpired:
                    pass
        proc.kill()

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, how="fusermount"):
        """Unmounts and returns the daemon's exit status (asserted 0)."""
        assert self.proc is not None
        if how == "fusermount":
            r = unmount(self.path)
            assert r.returncode == 0, f"fusermount3 -u: {r.stderr}"
        elif how == "sigterm":
            self.proc.terminate()
        elif how == "sigint":
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"kvfs did not exit within 120 s after unmount: {self.read_log()}")
        proc, self.proc = self.proc, None
        if self in _live_mounts:
            _live_mounts.remove(self)
        self.log.close()
        assert rc == 0, f"kvfs exited with {rc}: {self.read_log()}"
        assert mounted_fstype(self.path) is None, "still mounted after the daemon exited"
        return proc.returncode

    def kill(self):
        """Teardown after a failure: make sure nothing stays mounted."""
        if self.proc is not None:
            subprocess.run([FUSERMOUNT, "-u", "-z", self.path], capture_output=True)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            if self in _live_mounts:
                _live_mounts.remove(self)
            self.log.close()


@pytest.fixture(autouse=True)
def watchdog():
    """Fails a test that hangs (see TEST_TIMEOUT_S) rather than the suite."""
    fired = threading.Event()
    logs = []

    def fire():
        fired.set()
        for m in list(_live_mounts):
            m.abort()
            logs.append(f"--- {m.log_path}:\n{m.read_log()[-20000:]}")

    timer = threading.Timer(TEST_TIMEOUT_S, fire)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
    if fired.is_set():
        for m in list(_live_mounts):
            m.kill()
        pytest.fail(f"test hung for more than {TEST_TIMEOUT_S:.0f} s: FUSE connection "
                    "aborted, daemon killed. Daemon log with its threads:\n" + "\n".join(logs))


class Volume:
    """An image formatted with mkfs.kvfs and (once started) mounted."""

    def __init__(self, workdir, size, options=None):
        self.workdir = workdir
        self.image = os.path.join(workdir, "kvfs.img")
        self.mnt = os.path.join(workdir, "mnt")
        os.mkdir(self.mnt)
        mkfs(self.image, size)
        self.mount = Mount(self.image, self.mnt, options)

    @property
    def path(self):
        return self.mnt

    def p(self, *names):
        return os.path.join(self.mnt, *names)

    def remount(self):
        self.mount.stop()
        self.mount.start()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="kvfs-it-", dir="/var/tmp")
    os.chmod(d, 0o755)  # other users (permission tests) reach the mount
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _volume(workdir, size, options=None):
    v = Volume(workdir, size, options)
    v.mount.start()
    return v


@pytest.fixture
def vol(workdir):
    """A mounted 1 GiB volume; unmounted at teardown, daemon must exit 0."""
    v = _volume(workdir, 1 * GiB)
    try:
        yield v
        if v.mount.proc is not None:
            v.mount.stop()
    finally:
        v.mount.kill()


@pytest.fixture
def small_vol(workdir):
    """A mounted 256 MiB volume (ENOSPC tests)."""
    v = _volume(workdir, 256 * MiB)
    try:
        yield v
        if v.mount.proc is not None:
            v.mount.stop()
    finally:
        v.mount.kill()


@pytest.fixture
def make_volume(workdir):
    """Factory for volumes a test mounts itself (startup-error tests)."""
    made = []

    def make(name, size=256 * MiB, options=None):
        d = os.path.join(workdir, name)
        os.mkdir(d)
        v = Volume(d, size, options)
        made.append(v)
        return v

    yield make
    for v in made:
        v.mount.kill()


@pytest.fixture
def huge_pages():
    """Reserves 8 more 2 MiB huge pages (vm.nr_hugepages) for the test and
    gives them back after it; skips where the kernel gives none."""
    knob = "/proc/sys/vm/nr_hugepages"
    with open(knob) as f:
        before = int(f.read())
    try:
        with open(knob, "w") as f:
            f.write(str(before + 8))
    except OSError as e:
        pytest.skip(f"cannot reserve huge pages: {e}")
    try:
        with open(knob) as f:
            if int(f.read()) < before + 4:
                pytest.skip("the kernel reserved no huge pages")
        yield
    finally:
        with open(knob, "w") as f:
            f.write(str(before))


def pwrite_byte(path):
    """Writes one byte ("z") at offset 1 of `path` through a write-only open:
    a data change that is not an append, a truncate or an allocation."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"z", 1)
    finally:
        os.close(fd)


def run_as(fn, uid, gid, groups=()):
    """Runs fn() in a child process as uid/gid with supplementary `groups`
    and returns what it returned (pickled back through a pipe). A step that
    raises fails the test with the child's exception."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            out = pickle.dumps(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - reported through the pipe
            out = pickle.dumps(("error", repr(e)))
            code = 1
        os.write(w, out)
        os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    kind, out = pickle.loads(data) if data else ("error", "no answer")
    assert os.waitstatus_to_exitcode(status) == 0 and kind == "ok", (
        f"the step as uid {uid} failed: {out}")
    return out


@pytest.fixture
def ext4_dir(workdir):
    """A directory on a small ext4 loop image, to compare kvfs's answers
    with the kernel's own filesystem; skips where ext4 cannot be mounted."""
    if not shutil.which("mkfs.ext4"):
        pytest.skip("mkfs.ext4 not installed")
    img = os.path.join(workdir, "ext4.img")
    mnt = os.path.join(workdir, "ext4")
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", img, mnt], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount an ext4 loop image: {r.stderr}")
    try:
        os.chmod(mnt, 0o755)
        yield mnt
    finally:
        unmount(mnt, ["umount"])
