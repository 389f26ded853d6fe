"""Forced interleavings of appenders, the tail cut, the rollback and readers (events and threads, no sleeps)."""

from __future__ import annotations

import errno
import fcntl
import os
import threading

import pytest

from sotd.errors import AppendFailed, InboxBusy
from sotd.formats import cursor, inbox
from sotd.formats.layout import Layout

pytestmark = pytest.mark.races

H = "a"
WAIT = 10  # bound on every event wait (a hang fails the test instead of stalling it)


@pytest.fixture
def lay(tmp_path: os.PathLike[str]) -> Layout:
    lay = Layout(str(tmp_path))
    os.makedirs(lay.inbox_dir)
    return lay


def _read(lay: Layout) -> bytes:
    return inbox.read_all(lay, H) or b""


def _line(n: int) -> bytes:
    return inbox.encode_line("b", H, "r", f"m{n}", "2026-01-01T00:00:00Z")


@pytest.fixture
def waiter_started(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when some caller's lock attempt found the lock held and handed it to a helper to block on."""
    ev = threading.Event()
    real = inbox._Waiter.wait

    def spy(self: inbox._Waiter, fd: int, op: int, bound: float) -> bool:
        ev.set()
        return real(self, fd, op, bound)

    monkeypatch.setattr(inbox._Waiter, "wait", spy)
    return ev


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sotd-inbox-flock"]


def _wait_free(path: str) -> None:
    """Until nobody holds the lock on ``path`` (an abandoned helper drops it once it gets it), bounded."""
    probe = os.open(path, os.O_RDWR)
    try:
        for _ in range(WAIT * 100):
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(probe, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                threading.Event().wait(0.01)
        raise AssertionError(f"{path} still locked after {WAIT} s")
    finally:
        os.close(probe)


class PausedWriter:
    """An append in a thread that stops at a named point until released."""

    def __init__(
        self, lay: Layout, line: bytes, monkeypatch: pytest.MonkeyPatch, *, at: str, fail: bool = False
    ):
        self.reached = threading.Event()
        self.go = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(lay, line))
        me = self.thread
        real_write, real_fsync = inbox._write, inbox._fsync

        def write(fd: int, data: bytes) -> int:
            if threading.current_thread() is me and at == "mid-write" and not self.reached.is_set():
                half = len(data) // 2
                n = real_write(fd, bytes(data[:half]))
                self.reached.set()
                assert self.go.wait(WAIT)
                return n
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            if threading.current_thread() is me and at == "before-sync":
                self.reached.set()
                assert self.go.wait(WAIT)
                if fail:
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
            real_fsync(fd)

        monkeypatch.setattr(inbox, "_write", write)
        monkeypatch.setattr(inbox, "_fsync", fsync)

    def _run(self, lay: Layout, line: bytes) -> None:
        try:
            inbox.append(lay, H, line, nfs=False, bound=5)
        except BaseException as e:
            self.error = e

    def start(self) -> PausedWriter:
        self.thread.start()
        assert self.reached.wait(WAIT)
        return self

    def finish(self) -> None:
        self.go.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


def poll_unlocked(lay: Layout, notes: list[str]) -> list[bytes]:
    data = _read(lay)
    lines = inbox.complete_lines(data)
    start = cursor.offset(cursor.read(lay, H), lines, H, notes.append)
    cursor.write(lay, H, len(lines), lines[-1] if lines else None)
    return lines[start:]


# ------------------------------------------------------------------------------------ readers vs appends


def test_locked_reader_waits_for_a_line_in_flight(
    lay: Layout, monkeypatch: pytest.MonkeyPatch, waiter_started: threading.Event
) -> None:
    inbox.append(lay, H, _line(1), nfs=False, bound=2)
    w = PausedWriter(lay, _line(2), monkeypatch, at="mid-write").start()
    assert _read(lay).endswith(_line(2)[: len(_line(2)) // 2])  # half a line really is in the file
    got: list[bytes | None] = []

    def reader() -> None:
        with inbox.ReadLock(lay, H, nfs=False, bound=5, warn=lambda s: got.append(s.encode())):
            got.append(inbox.read_all(lay, H))

    t = threading.Thread(target=reader)
    t.start()
    assert waiter_started.wait(WAIT)  # the reader is blocked on the writer's lock
    assert got == []
    w.finish()
    t.join(WAIT)
    assert w.error is None
    assert got == [_line(1) + _line(2)]


def test_locked_reader_busy_past_its_bound(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    w = PausedWriter(lay, _line(1), monkeypatch, at="mid-write").start()
    try:
        with pytest.raises(InboxBusy) as ei:
            with inbox.ReadLock(lay, H, nfs=False, bound=0.2, warn=lambda _s: None):
                pytest.fail("read under a held lock")
        assert (
            ei.value.message == "the inbox for @a is being written — nothing was read; run comm-poll.sh again"
        )
        assert ei.value.exit_status == 75
        with pytest.raises(InboxBusy):
            with inbox.ReadLock(lay, H, nfs=True, bound=0.2, warn=lambda _s: None):
                pytest.fail("read under a held lock")
    finally:
        w.finish()
    assert _read(lay) == _line(1)


def test_unlocked_reader_counts_a_line_that_is_then_cut_back(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox.append(lay, H, _line(1), nfs=False, bound=2)
    notes: list[str] = []
    assert poll_unlocked(lay, notes) == [_line(1)[:-1]]
    w = PausedWriter(lay, _line(2), monkeypatch, at="before-sync", fail=True).start()
    assert poll_unlocked(lay, notes) == [_line(2)[:-1]]  # seen in flight
    w.finish()
    assert isinstance(w.error, AppendFailed)
    assert _read(lay) == _line(1)  # rolled back
    monkeypatch.undo()
    inbox.append(lay, H, _line(3), nfs=False, bound=2)  # lands where line 2 was
    assert poll_unlocked(lay, notes) == [_line(3)[:-1]]
    assert notes == [cursor.step_back_note(H)]
    assert poll_unlocked(lay, notes) == []


def test_unlocked_reader_after_cut_back_with_nothing_after(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox.append(lay, H, _line(1), nfs=False, bound=2)
    w = PausedWriter(lay, _line(2), monkeypatch, at="before-sync", fail=True).start()
    notes: list[str] = []
    assert poll_unlocked(lay, notes) == [_line(1)[:-1], _line(2)[:-1]]
    w.finish()
    assert poll_unlocked(lay, notes) == []  # hashed count one past the end is the end
    assert notes == [cursor.step_back_note(H)]  # and a step back the reader is told of (issue 14)
    monkeypatch.undo()
    inbox.append(lay, H, _line(3), nfs=False, bound=2)
    assert poll_unlocked(lay, notes) == [_line(3)[:-1]]
    assert notes == [cursor.step_back_note(H)]  # once


def test_unlocked_reader_never_counts_a_torn_line(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    inbox.append(lay, H, _line(1), nfs=False, bound=2)
    w = PausedWriter(lay, _line(2), monkeypatch, at="mid-write").start()
    notes: list[str] = []
    assert poll_unlocked(lay, notes) == [_line(1)[:-1]]  # the half line is not a line
    w.finish()
    assert poll_unlocked(lay, notes) == [_line(2)[:-1]]
    assert notes == []


# ------------------------------------------------------------------------------- appenders vs appenders


def test_second_appender_waits_then_both_lines_whole(
    lay: Layout, monkeypatch: pytest.MonkeyPatch, waiter_started: threading.Event
) -> None:
    w = PausedWriter(lay, _line(1), monkeypatch, at="mid-write").start()
    errs: list[BaseException] = []

    def second() -> None:
        try:
            inbox.append(lay, H, _line(2), nfs=False, bound=5)
        except BaseException as e:
            errs.append(e)

    t = threading.Thread(target=second)
    t.start()
    assert waiter_started.wait(WAIT)
    w.finish()
    t.join(WAIT)
    assert errs == [] and w.error is None
    assert _read(lay) == _line(1) + _line(2)


def test_append_cuts_the_torn_tail_of_a_dead_writer_while_a_reader_polls(lay: Layout) -> None:
    inbox.append(lay, H, _line(1), nfs=False, bound=2)
    with open(lay.inbox(H), "ab") as f:
        f.write(_line(2)[:9])  # the dead writer's partial
    notes: list[str] = []
    assert poll_unlocked(lay, notes) == [_line(1)[:-1]]
    cut: list[str] = []
    inbox.append(lay, H, _line(3), nfs=False, bound=2, note=cut.append)
    assert cut == ["note: cut 9 bytes of an unterminated line a dead writer left in @a's inbox"]
    assert poll_unlocked(lay, notes) == [_line(3)[:-1]]
    assert notes == []


@pytest.mark.parametrize("nfs", [False, True], ids=["blocking", "nfs-poll"])
def test_busy_bound_then_abandoned_helper_releases(lay: Layout, nfs: bool) -> None:
    holder = os.open(lay.inbox_lock(H), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with pytest.raises(AppendFailed) as ei:
            inbox.append(lay, H, _line(1), nfs=nfs, bound=1)
        assert ei.value.message == "the inbox lock for @a was held for 1s — nothing was appended"
        assert ei.value.code == "file_failed"
        assert inbox.read_all(lay, H) is None  # the inbox was never even opened
    finally:
        os.close(holder)  # releases
    _wait_free(lay.inbox_lock(H))  # the abandoned helper takes the lock and drops it at once
    inbox.append(lay, H, _line(2), nfs=nfs, bound=1)
    assert _read(lay) == _line(2)


def test_bound_zero_is_one_try(lay: Layout, waiter_started: threading.Event) -> None:
    holder = os.open(lay.inbox_lock(H), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_SH)  # a reader holds it
    try:
        with pytest.raises(AppendFailed, match="was held for 0s — nothing was appended"):
            inbox.append(lay, H, _line(1), nfs=False, bound=0)
        assert not waiter_started.is_set()  # no helper was asked to wait
        # readers share
        with inbox.ReadLock(lay, H, nfs=False, bound=0, warn=lambda _s: None) as rl:
            assert rl.locked
    finally:
        os.close(holder)
