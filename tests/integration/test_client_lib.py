"""libkvfs (C/C++) against a real mount: runs the `Mounted*` GoogleTests of
tests/client/batch_test.cc with KVFS_TEST_MOUNT set to a fresh volume.

The binary comes from meson (KVFS_CLIENT_TEST_BIN); where the integration
suite runs without it (an old build dir) that is a failure, not a skip.
"""
import os
import re
import subprocess

import pytest

CLIENT_TEST_BIN = os.environ.get("KVFS_CLIENT_TEST_BIN", "")


def test_c_client_batches_on_a_real_mount(vol):
    if not CLIENT_TEST_BIN or not os.access(CLIENT_TEST_BIN, os.X_OK):
        pytest.fail(f"KVFS_CLIENT_TEST_BIN={CLIENT_TEST_BIN!r} must name tests/client/client_test "
                    "(run through meson test)")
    r = subprocess.run([CLIENT_TEST_BIN, "--gtest_filter=Mounted*", "--gtest_brief=1"],
                       env={**os.environ, "KVFS_TEST_MOUNT": vol.path},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
    assert r.returncode == 0, f"client_test failed (exit {r.returncode}):\n{r.stdout[-20000:]}"
    # A filter that matched nothing would pass too: count what ran.
    ran = re.search(r"\[  PASSED  \] (\d+) test", r.stdout)
    assert ran and int(ran.group(1)) >= 10, r.stdout[-2000:]


def test_c_client_buffers_take_reserved_huge_pages(vol, huge_pages):
    if not CLIENT_TEST_BIN or not os.access(CLIENT_TEST_BIN, os.X_OK):
        pytest.fail(f"KVFS_CLIENT_TEST_BIN={CLIENT_TEST_BIN!r} must name tests/client/client_test")
    r = subprocess.run([CLIENT_TEST_BIN, "--gtest_filter=Mounted.HugePage*", "--gtest_brief=1"],
                       env={**os.environ, "KVFS_TEST_MOUNT": vol.path, "KVFS_TEST_HUGE_PAGES": "1"},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
    assert r.returncode == 0, f"client_test failed (exit {r.returncode}):\n{r.stdout[-20000:]}"
    assert re.search(r"\[  PASSED  \] 1 test", r.stdout), r.stdout[-2000:]
