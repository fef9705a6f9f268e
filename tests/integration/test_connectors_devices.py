"""Every connector sequence of test_connectors.py on a volume of four image
devices (chunks striped over all of them, docs/devices.md); after each, the
volume is remounted and fsck.kvfs must find it clean."""
import os
import subprocess

import pytest

from test_connectors import *  # noqa: F401,F403 -- the sequences, run here on 4 devices
from test_devices import FSCK_BIN, NDEV, MultiMount, fsck_json

from conftest import MiB


class FourDevices:
    def __init__(self, mount):
        self.mount = mount
        self.path = mount.path

    def p(self, *names):
        return os.path.join(self.path, *names)


@pytest.fixture
def vol(workdir):
    """Overrides conftest's vol for the tests imported above."""
    devs = [os.path.join(workdir, f"dev{i}.img") for i in range(NDEV)]
    subprocess.run([os.environ["MKFS_KVFS_BIN"], "-f", "-q", "--size", str(256 * MiB), *devs],
                   check=True)
    mnt = os.path.join(workdir, "mnt")
    os.mkdir(mnt)
    m = MultiMount(devs, mnt)
    m.start()
    try:
        yield FourDevices(m)
        if m.proc is not None:
            m.stop()
            m.start()  # remount: the volume is whole after the sequence
            m.stop()
            if FSCK_BIN:
                fsck_json(devs)
    finally:
        m.kill()
