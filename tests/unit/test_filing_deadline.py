"""A filing's deadline (docs/contract.md "A filing's deadline"; issue 15): the frame's ``expires`` bounds the
whole filing, lock wait + append + sync, not only the lock wait.

``inbox.deadline_action`` and ``ops.filing_deadline`` are pure and table-tested; the append itself is driven
in-process through the module's seams (a clock that the slow step moves on), on a real file and a real
flock. The daemon with a really slow fsync is ``tests/reliability/test_filing_deadline_daemon.py``.
"""

from __future__ import annotations

import errno
import os

import pytest

from sotd.daemon import ops
from sotd.errors import AppendFailed
from sotd.formats import inbox
from sotd.formats.layout import Layout, ensure_home

pytestmark = pytest.mark.unit

BEFORE = b'{"n":1}\n'
LINE = b'{"n":2}\n'


@pytest.mark.parametrize(
    ("step", "left", "action"),
    [
        (inbox.BEFORE_LOCK, None, inbox.GO),
        (inbox.BEFORE_LOCK, 1.0, inbox.GO),
        (inbox.BEFORE_LOCK, 0.001, inbox.GO),
        (inbox.BEFORE_LOCK, 0.0, inbox.GIVE_UP),
        (inbox.BEFORE_LOCK, -3.0, inbox.GIVE_UP),
        (inbox.BEFORE_WRITE, None, inbox.GO),
        (inbox.BEFORE_WRITE, 0.001, inbox.GO),
        (inbox.BEFORE_WRITE, 0.0, inbox.GIVE_UP),
        (inbox.BEFORE_WRITE, -0.001, inbox.GIVE_UP),
        (inbox.AFTER_SYNC, None, inbox.GO),
        (inbox.AFTER_SYNC, 0.001, inbox.GO),
        (inbox.AFTER_SYNC, 0.0, inbox.TAKE_BACK),
        (inbox.AFTER_SYNC, -0.5, inbox.TAKE_BACK),
    ],
)
def test_deadline_action_table(step: str, left: float | None, action: str) -> None:
    assert inbox.deadline_action(step, left) == action


@pytest.mark.parametrize(
    ("expires", "now", "mono_now", "deadline"),
    [
        (None, 1000.0, 50.0, None),
        ("1001", 1000.0, 50.0, None),
        (True, 1000.0, 50.0, None),
        (1002.0, 1000.0, 50.0, 50.0 + 2.0 - ops.ANSWER_MARGIN_S),
        (1002, 1000.0, 50.0, 50.0 + 2.0 - ops.ANSWER_MARGIN_S),
        (999.0, 1000.0, 50.0, 50.0 - 1.0 - ops.ANSWER_MARGIN_S),  # already past: a moment behind the clock
    ],
)
def test_filing_deadline_table(expires: object, now: float, mono_now: float, deadline: float | None) -> None:
    got = ops.filing_deadline(expires, now, mono_now)
    assert got == (None if deadline is None else pytest.approx(deadline))


LATE = (
    "comm.file for @sink: filed, but its ok went out 0.300s after its sender's deadline; "
    "the sender may have been told FAILED for a line that is in the inbox"
)


@pytest.mark.parametrize(
    ("expires", "answer", "now", "text"),
    [
        (None, {"ok": True}, 1000.0, None),  # no deadline: never late
        (1000.0, {"ok": True}, 999.9, None),  # in time
        (1000.0, {"ok": True}, 1000.0, None),  # at the deadline itself: the sender's wait has not ended
        (1000.0, {"ok": True}, 1000.3, LATE),
        (1000.0, {"ok": 1}, 1000.3, None),  # not an ok (only ``true`` is)
        (1000.0, {"ok": False, "code": "file_failed", "error": "x"}, 1000.3, None),  # a refusal files nothing
    ],
)
def test_late_ok_table(
    expires: float | None, answer: dict[str, object], now: float, text: str | None
) -> None:
    assert ops.late_ok_text("sink", expires, answer, now) == text


@pytest.fixture
def lay(tmp_path: os.PathLike[str]) -> Layout:
    layout = Layout(os.path.join(os.fspath(tmp_path), "comm"))
    ensure_home(layout)
    with open(layout.inbox("a"), "wb") as f:
        f.write(BEFORE)
    return layout


def _read(lay: Layout) -> bytes:
    with open(lay.inbox("a"), "rb") as f:
        return f.read()


class Clock:
    """``inbox._monotonic``: stands still unless a slow step moves it on."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(inbox, "_monotonic", c)
    return c


def test_a_sync_that_ends_past_the_deadline_takes_the_line_back(
    lay: Layout, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = inbox._fsync
    seen: list[bytes] = []

    def slow_fsync(fd: int) -> None:
        real(fd)
        if not seen:
            seen.append(_read(lay))  # the line was really written and synced
            clock.t += 2.0  # ... and the sync took 2 s, past the 1 s deadline

    monkeypatch.setattr(inbox, "_fsync", slow_fsync)
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", LINE, nfs=False, bound=2, deadline=clock.t + 1.0)
    assert ei.value.message == (
        "the append failed: the sender's deadline passed while the line was being synced, so it was taken "
        "back out of @a's inbox; nothing was appended"
    )
    assert seen == [BEFORE + LINE]
    assert _read(lay) == BEFORE


def test_a_sync_that_ends_in_time_files_the_line(
    lay: Layout, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = inbox._fsync

    def slowish_fsync(fd: int) -> None:
        real(fd)
        clock.t += 0.9

    monkeypatch.setattr(inbox, "_fsync", slowish_fsync)
    inbox.append(lay, "a", LINE, nfs=False, bound=2, deadline=clock.t + 1.0)
    assert _read(lay) == BEFORE + LINE


def test_a_deadline_that_passes_before_the_write_writes_nothing(
    lay: Layout, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline passes between the lock and the write (here: during a slow tail cut)."""
    with open(lay.inbox("a"), "ab") as f:
        f.write(b'{"n":')  # a dead writer's unterminated tail
    writes: list[bytes] = []
    real_ftruncate = inbox._ftruncate

    def slow_ftruncate(fd: int, length: int) -> None:
        real_ftruncate(fd, length)
        clock.t += 1.5

    def no_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return len(data)

    monkeypatch.setattr(inbox, "_ftruncate", slow_ftruncate)
    monkeypatch.setattr(inbox, "_write", no_write)
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", LINE, nfs=False, bound=2, deadline=clock.t + 1.0)
    assert ei.value.message == (
        "the append failed: the sender's deadline passed before the line was written to @a's inbox; "
        "nothing was appended"
    )
    assert writes == []
    assert _read(lay) == BEFORE  # the dead writer's tail cut, nothing of ours written


def test_a_deadline_already_past_takes_no_lock_and_writes_nothing(
    lay: Layout, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox, "_open_lock", lambda path: pytest.fail("the lock file was opened"))
    with pytest.raises(AppendFailed, match=r"deadline passed before the line was written .*nothing was"):
        inbox.append(lay, "a", LINE, nfs=False, bound=2, deadline=clock.t)
    assert _read(lay) == BEFORE


def test_the_lock_wait_is_cut_to_what_is_left_of_the_deadline(lay: Layout, clock: Clock) -> None:
    """A held lock with 0.3 s left: the wait is 0.3 s, not the 2 s bound (the clock here is the seam's, so
    the wait is given to the real helper thread as 0.3 s of real time)."""
    import fcntl
    import time

    fd = os.open(lay.inbox_lock("a"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        with pytest.raises(AppendFailed) as ei:
            inbox.append(lay, "a", LINE, nfs=False, bound=2, deadline=clock.t + 0.3)
        took = time.monotonic() - t0
    finally:
        os.close(fd)
    assert ei.value.message == "the inbox lock for @a was held for 0.3s — nothing was appended"
    assert took < 1.5
    assert _read(lay) == BEFORE


def test_a_take_back_that_fails_says_the_line_may_still_be_there(
    lay: Layout, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = inbox._fsync

    def slow_fsync(fd: int) -> None:
        real(fd)
        clock.t += 2.0

    def eio(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(inbox, "_fsync", slow_fsync)
    monkeypatch.setattr(inbox, "_ftruncate", eio)
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", LINE, nfs=False, bound=2, deadline=clock.t + 1.0)
    assert ei.value.message == (
        "the append failed: the sender's deadline passed while the line was being synced; taking it back "
        "failed (Input/output error), so the line may still be in @a's inbox"
    )
    assert _read(lay) == BEFORE + LINE


def test_no_deadline_is_the_append_as_before(
    lay: Layout, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = inbox._fsync

    def slow_fsync(fd: int) -> None:
        real(fd)
        clock.t += 3.0  # slow, but under STALL_SECS and with no deadline to miss

    monkeypatch.setattr(inbox, "_fsync", slow_fsync)
    inbox.append(lay, "a", LINE, nfs=False, bound=2)
    assert _read(lay) == BEFORE + LINE
