"""A missing name's negative entry: the kernel caches "no such name" (the
negative_timeout option), so a storm of stats of missing keys costs one
LOOKUP per name (test_request_counts.py), and kvfs drops that entry
whenever it creates the name by a path the kernel does not see itself.
After each way of storing a key, a stat from another process that stat-ed
the key missing just before sees it at once."""
import os
import sys

import pytest

from test_tmpfile import publish

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import kvfs  # noqa: E402


def size_seen_by_another_process(path):
    """st_size of `path` as a forked child's stat sees it, or None if the
    child gets ENOENT."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            try:
                os.write(w, str(os.stat(path).st_size).encode())
            except FileNotFoundError:
                os.write(w, b"missing")
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return None if out == b"missing" else int(out)


@pytest.mark.parametrize("where", ["", "sub"])
def test_a_key_stored_by_the_batch_ioctl_is_seen_at_once(vol, where):
    if where:
        os.mkdir(vol.p(where))
    key = os.path.join(where, "key") if where else "key"
    with kvfs.Client(vol.path) as c:
        assert size_seen_by_another_process(vol.p(key)) is None
        assert size_seen_by_another_process(vol.p(key)) is None  # cached missing
        assert [r.status for r in c.write_batch([(key, b"x" * 1000)])] == [0]
        assert size_seen_by_another_process(vol.p(key)) == 1000
        # Replaced: the new size, not the cached one.
        assert [r.status for r in c.write_batch([(key, b"y" * 3000)])] == [0]
        assert size_seen_by_another_process(vol.p(key)) == 3000
        assert [r.status for r in c.delete_batch([key])] == [0]
        assert size_seen_by_another_process(vol.p(key)) is None


@pytest.mark.parametrize("how", ["proc", "empty_path"])
def test_a_key_published_by_o_tmpfile_and_linkat_is_seen_at_once(vol, how):
    key = vol.p("key")
    assert size_seen_by_another_process(key) is None
    assert size_seen_by_another_process(key) is None
    publish(vol.path, "key", b"z" * 2000, how=how)
    assert size_seen_by_another_process(key) == 2000
