"""A filing's deadline at a real daemon on ext4 (docs/contract.md "A filing's deadline"; issue 15's last point).

The NFS tier saw host B told FAILED for lines the hub then filed: the hub bounded its lock wait by the
frame's ``expires`` but not the append and sync after it, which on the guest's slow NFS outlasted the
answer margin. Here the slow sync is real: ``strace`` attached to the running hub daemon delays the exit of
every ``fsync`` it makes (``inject=fsync:delay_exit``), and in the forward case the inbox lock is also held
by the test until just before the deadline. A line is in the inbox only when its sender was told ``ok`` in
time; a filing whose sync ends past the deadline is taken back out and answered FAILED. And the hub's offer
under the same deadline: with no time left to ask a linked box (strace delays the hub's file opens), the
sender is told so and the box files nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.daemon import hub as daemon_hub
from sotd.daemon import ops
from tests.conftest import attached_strace, wait_for
from tests.integration.test_daemon import (
    Daemon,
    folder,
    hub_and_linked_guest,
    hub_sock_path,
    inbox_lines,
    linked,
    live,
    put_agents,
    start,
    write_hosts,
)

STRACE = shutil.which("strace") or "/usr/bin/strace"

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.serial,
    pytest.mark.alone,  # deadlines against a delayed fsync: beside nothing
    pytest.mark.root,
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (strace attaches to the daemon)"),
    pytest.mark.skipif(not os.path.exists(STRACE), reason="no strace"),
]

TAKEN_BACK = (
    "the append failed: the sender's deadline passed while the line was being synced, so it was taken back "
    "out of @alpha's inbox; nothing was appended"
)


@contextlib.contextmanager
def slow_fsync(pid: int, secs: float) -> Iterator[None]:
    """Every fsync of process ``pid`` (all its threads, and threads it starts) returns ``secs`` late."""
    with slow_syscall(pid, "fsync", f"delay_exit={round(secs * 1_000_000)}"):
        yield


@contextlib.contextmanager
def slow_syscall(pid: int, name: str, delay: str) -> Iterator[None]:
    """Every ``name`` syscall of process ``pid`` (all its threads) is delayed as ``delay`` says (strace's
    ``delay_enter=`` or ``delay_exit=``, in microseconds)."""
    with attached_strace(pid, "-o", os.devnull, "-e", f"trace={name}", "-e", f"inject={name}:{delay}"):
        yield


def _lock_free(lay: Any) -> bool:
    """The inbox lock for @alpha can be had at once (then it is let go again)."""
    fd = os.open(lay.inbox_lock("alpha"), os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_sync_that_ends_past_the_deadline_is_taken_back_and_answered_failed(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    put_agents(lay, alpha=live("boxa"))
    hub = start(daemons, work, "hub", lay.home, "boxa")
    with slow_fsync(hub.proc.pid, 1.0):
        # 0.8 s to its sender's deadline: the lock is free, the write is at once, the sync ends 1 s later
        t0 = time.time()
        answer = hub.file("alpha", "late sync", expires=t0 + 0.8)
        took = time.time() - t0
        assert answer == {"error": TAKEN_BACK, "code": "file_failed"}, (answer, hub.logtext()[-2000:])
        assert took > 1.0, "the answer came after the slow sync"
        assert inbox_lines(lay, "alpha") == []
        # the same slow sync with time to spare is filed, and answered before its sender gives up
        t0 = time.time()
        expires = t0 + 4.0
        assert hub.file("alpha", "in time", expires=expires) == {"ok": True}
        assert time.time() < expires - ops.ANSWER_MARGIN_S
    assert [x["msg"] for x in inbox_lines(lay, "alpha")] == ["in time"]


def test_a_guest_told_failed_never_finds_its_line_filed_by_the_hub(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    """The NFS tier's case, on ext4: a guest forwards a send with the sender's deadline; the hub's inbox
    lock is held by another process until just before that deadline, and the hub's sync is slow. The guest
    says FAILED when its wait runs out; the hub, finishing its sync after that, must not leave the line."""
    lay, hub, guest = hub_and_linked_guest(daemons, str(tmp_path))
    with slow_fsync(hub.proc.pid, 1.0):
        fd = os.open(lay.inbox_lock("alpha"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            expires = time.time() + 2.0
            # the hub's deadline is expires less two answer margins (the guest's forward, then the hub)
            release_at = expires - 2 * ops.ANSWER_MARGIN_S - 0.15
            holder = _release_at(fd, release_at)
            answer = guest.file("alpha", "held, then slow", expires=expires)
            answered = time.time()
        finally:
            holder.join(10)
            os.close(fd)
        assert answer["code"] == "file_failed", answer
        assert answered < expires, "the guest answered before its sender gave up"
        # past the deadline, with the inbox lock free again, the hub's filing has ended one way or the other
        wait_for(
            lambda: time.time() > expires and _lock_free(lay), timeout=15, what="the hub's filing to end"
        )
    assert inbox_lines(lay, "alpha") == [], "the guest said FAILED, so the line must not be in the inbox"
    assert TAKEN_BACK in hub.logtext(), hub.logtext()[-2000:]
    assert guest.file("alpha", "after") == {"ok": True}
    assert [x["msg"] for x in inbox_lines(lay, "alpha")] == ["after"]


LATE_OK = (
    "comm.file for @alpha: filed, but its ok went out {}s after its sender's deadline; the sender may have "
    "been told FAILED for a line that is in the inbox"
)


def test_an_ok_the_guest_no_longer_waits_for_is_never_silent(tmp_path: Any, daemons: list[Daemon]) -> None:
    """What no margin covers (docs/contract.md "A filing's deadline"): the hub files in time, then stalls
    past the answer margin before its ``ok`` is on the wire (here strace delays the hub's socket sends by
    2.5 s; a descheduled box does the same). The guest's wait has ended and it says FAILED; the line is in
    the inbox. That case cannot be closed by any deadline (the two ends cannot both know in time), so it
    is made visible: the hub logs that its ok went out after the sender's deadline, naming the handle."""
    lay, hub, guest = hub_and_linked_guest(daemons, str(tmp_path))
    with slow_syscall(hub.proc.pid, "sendto", "delay_enter=2500000"):
        expires = time.time() + 2.0
        answer = guest.file("alpha", "filed, answered late", expires=expires)
        assert time.time() < expires, "the guest answered before its sender gave up"
        assert answer["code"] == "file_failed", answer
        assert "no reply to comm.file within" in answer["error"], answer
        wait_for(lambda: "ok went out" in hub.logtext(), timeout=15, what="the hub's late answer")
    assert [x["msg"] for x in inbox_lines(lay, "alpha")] == ["filed, answered late"]
    late = [row for row in hub.logtext().splitlines() if "ok went out" in row]
    assert len(late) == 1, late
    secs = late[0].split("ok went out ")[1].split("s after")[0]
    assert 0.0 < float(secs) < 3.0, late
    assert late[0].endswith(LATE_OK.format(secs)), late
    # in time, an ok is not logged (asked of the hub itself: the link may still be catching up on the
    # keepalive answers the delay held back)
    assert hub.file("alpha", "after", expires=time.time() + 5.0) == {"ok": True}
    assert sum("ok went out" in row for row in hub.logtext().splitlines()) == 1


def test_a_frame_the_hub_has_no_time_left_to_offer_says_so_and_nothing_is_filed(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    """CI's case (issue 27 item 2), made certain: a send that started slowly reaches the hub with its
    deadline near; the hub's own steps use up what is left (strace delays each file open of the hub by
    0.3 s: the lock record's, then the registry's), so no linked box can be asked in time. The sender is
    told that, not a bare ``no box knows that handle``, and its linked box, which lists @gamma, files
    nothing later."""
    work = str(tmp_path)
    write_hosts(work, hub_sock_path(work))
    hub_lay, guest_lay = folder(work, "a"), folder(work, "b")
    put_agents(hub_lay, alpha=live("boxa"))
    put_agents(guest_lay, gamma=live("boxb"))
    hub = start(daemons, work, "hub", hub_lay.home, "boxa")
    start(daemons, work, "guest", guest_lay.home, "boxb")
    wait_for(lambda: linked(hub, "boxb"), what="the guest's link")
    assert hub.file("gamma", "warm") == {"ok": True}  # offered to boxb, which files it; imports are done
    delay_s = 0.3
    with slow_syscall(hub.proc.pid, "openat", f"delay_enter={round(delay_s * 1_000_000)}"):
        # left after the margin: more than one delayed open (the filing goes on), less than two (no offer)
        answer = hub.file("gamma", "too late", expires=time.time() + ops.ANSWER_MARGIN_S + 1.5 * delay_s)
    assert answer == {"error": daemon_hub.too_late_to_offer_text("gamma"), "code": "file_failed"}, answer
    time.sleep(1.0)
    assert [x["msg"] for x in inbox_lines(guest_lay, "gamma")] == ["warm"]
    assert hub.file("gamma", "after") == {"ok": True}  # the next send with time left is offered and filed
    assert [x["msg"] for x in inbox_lines(guest_lay, "gamma")] == ["warm", "after"]


def _release_at(fd: int, at: float) -> Any:
    """A thread that unlocks ``fd`` at wall time ``at`` (the holder lets go just before the deadline)."""
    import threading

    def run() -> None:
        time.sleep(max(0.0, at - time.time()))
        fcntl.flock(fd, fcntl.LOCK_UN)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
