"""The two formats functions issue 13 added (and their old callers now use): ``layout.is_open`` (behaviour
6.0's test of a mode) and the inbox tail rule as ``inbox.torn_tail`` / ``inbox.cut_torn_tail``."""

from __future__ import annotations

import os

import pytest

from sotd.errors import AppendFailed
from sotd.formats import inbox
from sotd.formats.layout import Layout, ensure_home
from sotd.fsprim import is_open

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("mode", "open_"),
    [
        (0o700, False),
        (0o600, False),
        (0o40700, False),
        (0o710, True),
        (0o701, True),
        (0o755, True),
        (0o640, True),
    ],
)
def test_is_open(mode: int, open_: bool) -> None:
    assert is_open(mode) is open_


@pytest.mark.parametrize(
    ("data", "torn"),
    [
        (b"", 0),
        (b"a\n", 0),
        (b"a\nb", 1),
        (b"partial", 7),
        (b"a\n" + b"\0" * 5000, 5000),  # past one 4096-byte block
    ],
)
def test_torn_tail_and_its_cut(tmp_path: object, data: bytes, torn: int) -> None:
    lay = Layout(os.path.join(str(tmp_path), "comm"))
    ensure_home(lay)
    with open(lay.inbox("h"), "wb") as f:
        f.write(data)
    assert inbox.torn_tail(lay, "h") == torn
    assert inbox.cut_torn_tail(lay, "h", nfs=False, bound=1.0) == torn
    with open(lay.inbox("h"), "rb") as f:
        assert f.read() == data[: len(data) - torn]
    assert inbox.torn_tail(lay, "h") == 0


def test_no_inbox_is_no_tail_and_a_held_lock_cuts_nothing(tmp_path: object) -> None:
    import fcntl

    lay = Layout(os.path.join(str(tmp_path), "comm"))
    ensure_home(lay)
    assert inbox.torn_tail(lay, "h") == 0
    with open(lay.inbox("h"), "wb") as f:
        f.write(b"a\nb")
    fd = os.open(lay.inbox_lock("h"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer holds the inbox lock (its own open file)
        with pytest.raises(AppendFailed, match="nothing was appended"):
            inbox.cut_torn_tail(lay, "h", nfs=False, bound=0.2)
    finally:
        os.close(fd)
    with open(lay.inbox("h"), "rb") as f:
        assert f.read() == b"a\nb"
