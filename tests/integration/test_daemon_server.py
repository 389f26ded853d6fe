"""The daemon's server under load and under clients that vanish: behaviour 2.1 and 2.3 (``ok`` only after the
line is synced), issue #4.

- Concurrent clients over the real Unix socket (8 threads x 50 one-shot ``comm.file``; 4 connections x 50
  pipelined requests) filing to one inbox: every line exactly once, whole, in each sender's order.
- A client that sends hello + ``comm.file`` and goes away (a clean close after reading the hello answer, or
  a close with the answer unread, which a Unix socket reports to the daemon as a reset) while the filing is
  held up by the inbox lock the test holds: the daemon's task count (``version.query`` ->
  ``debug.tasks``) comes back to where it was, and the line is filed once (lock released within the bound)
  or not at all (held past it), never twice.

Random bytes at a real daemon are ``tests/reliability/test_rel_bad_input.py``'s (not repeated here). Every
daemon is a subprocess (``tests.integration.test_daemon.Daemon``) killed in teardown; every wait is bounded.
"""

from __future__ import annotations

import collections
import fcntl
import os
import threading
import time
from typing import Any

import pytest

from sotd.client import unix
from tests.integration.test_daemon import (
    HELLO,
    Daemon,
    eof,
    folder,
    inbox_lines,
    line,
    live,
    put_agents,
    raw,
    read_lines,
    start,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

THREADS = 8
EACH = 50


def hub(work: str, daemons: list[Daemon], **env: str) -> tuple[Daemon, Any]:
    lay = folder(work, "comm")
    put_agents(lay, alice=live(), bob=live())
    return start(daemons, work, "a", lay.home, "boxa", env=env), lay


def tasks(d: Daemon) -> int:
    n = d.request("version.query", {})["debug"]["tasks"]
    assert isinstance(n, int)
    return n


def idle_tasks(d: Daemon) -> int:
    """The task count of an idle daemon (seen twice in a row: the 2 s tick may run a check meanwhile)."""
    last = -1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        n = tasks(d)
        if n == last:
            return n
        last = n
        time.sleep(0.2)
    raise AssertionError("the daemon's task count never settled")


def check_once(lay: Any, handle: str, want: list[str]) -> None:
    got = [x["msg"] for x in inbox_lines(lay, handle)]  # every line parses: none partial
    counts = collections.Counter(got)
    assert sorted(counts) == sorted(want), "lost or foreign lines"
    assert {m: c for m, c in counts.items() if c != 1} == {}, "doubled lines"


# ---------------------------------------------------------------------------------- concurrent clients


def test_concurrent_one_shot_clients_file_every_line_once(tmp_path: Any, daemons: list[Daemon]) -> None:
    d, lay = hub(str(tmp_path), daemons)
    answers: dict[int, list[dict[str, Any]]] = {t: [] for t in range(THREADS)}
    errors: list[BaseException] = []
    go = threading.Barrier(THREADS)

    def sender(t: int) -> None:
        try:
            go.wait(10)
            for i in range(EACH):
                payload = {"from": f"s{t}", "to": "alice", "text": f"t{t}-{i}", "broadcast": False}
                answers[t].append(unix.request(d.sock, "comm.file", payload, HELLO, deadline_s=30))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(90)
    assert not any(th.is_alive() for th in threads), "a sender hung"
    assert errors == []
    assert all(a == [{"ok": True}] * EACH for a in answers.values())
    check_once(lay, "alice", [f"t{t}-{i}" for t in range(THREADS) for i in range(EACH)])
    # each sender waited for its ok before the next send: its lines are in its order
    got = [x["msg"] for x in inbox_lines(lay, "alice")]
    for t in range(THREADS):
        mine = [m for m in got if m.startswith(f"t{t}-")]
        assert mine == [f"t{t}-{i}" for i in range(EACH)]
    assert "internal error" not in d.logtext()


def test_pipelined_requests_on_one_connection_each_answered_once(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    """4 connections, each writing hello + 50 ``comm.file`` at once: the requests run as tasks, every id is
    answered exactly once, and every line is filed exactly once."""
    d, lay = hub(str(tmp_path), daemons)
    conns = 4
    socks = [raw(d.sock) for _ in range(conns)]
    try:
        for c, s in enumerate(socks):
            s.settimeout(60)
            batch = line(1, "hello", HELLO) + b"".join(
                line(i + 2, "comm.file", {"from": "p", "to": "bob", "text": f"c{c}-{i}"}) for i in range(EACH)
            )
            s.sendall(batch)
        for s in socks:
            got = read_lines(s, 1 + EACH)
            assert len(got) == 1 + EACH
            assert got[0]["id"] == 1 and got[0]["payload"]["ok"] is True
            ids = collections.Counter(x["id"] for x in got[1:])
            assert ids == collections.Counter(range(2, EACH + 2))
            assert all(x["kind"] == "res" and x["payload"] == {"ok": True} for x in got[1:]), [
                x["payload"] for x in got[1:] if x["payload"] != {"ok": True}
            ][:3]
    finally:
        for s in socks:
            s.close()
    check_once(lay, "bob", [f"c{c}-{i}" for c in range(conns) for i in range(EACH)])


# ------------------------------------------------------------------------------ a client that vanishes


@pytest.mark.parametrize("release", ["within-bound", "past-bound"])
@pytest.mark.parametrize("how", ["close-after-hello", "close-unread"])
def test_client_gone_mid_request_leaves_no_task_and_no_double(
    tmp_path: Any, daemons: list[Daemon], how: str, release: str
) -> None:
    d, lay = hub(str(tmp_path), daemons, SOT_INBOX_LOCK_WAIT_SECS="2")
    assert d.file("alice", "before") == {"ok": True}
    base = idle_tasks(d)
    fd = os.open(lay.inbox_lock("alice"), os.O_RDWR | os.O_CREAT, 0o600)
    held = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        s = raw(d.sock)
        s.sendall(
            line(1, "hello", HELLO) + line(2, "comm.file", {"from": "ghost", "to": "alice", "text": "gone"})
        )
        if how == "close-after-hello":
            assert read_lines(s, 1)[0]["payload"]["ok"] is True
        time.sleep(0.3)  # the request is in flight: waiting for the lock the test holds
        s.close()
        # end of input (or a reset: a close with data unread): the connection waits for its in-flight
        # request, which waits for the lock the test holds
        assert tasks(d) >= base + 2
        if release == "within-bound":
            time.sleep(0.5)
            fcntl.flock(fd, fcntl.LOCK_UN)
            held = False
        wait_for(lambda: tasks(d) == base, timeout=10, what="the daemon's tasks to come back to idle")
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    time.sleep(1.0)  # nothing filed late
    want = ["before", "gone"] if release == "within-bound" else ["before"]
    check_once(lay, "alice", want)
    assert tasks(d) == base
    log = d.logtext()
    assert "internal error" not in log, log
    if release == "past-bound":
        assert "the inbox lock for @alice was held for 2s" in log
    # the daemon goes on serving
    assert d.file("alice", "after") == {"ok": True}
    check_once(lay, "alice", [*want, "after"])


def test_client_that_half_closes_still_gets_its_answer(tmp_path: Any, daemons: list[Daemon]) -> None:
    """End of input is not the end of the conversation: a one-shot client that half-closes after its
    request (as the stdio bridge does) still reads the answer, once the slow filing is done."""
    d, lay = hub(str(tmp_path), daemons, SOT_INBOX_LOCK_WAIT_SECS="3")
    fd = os.open(lay.inbox_lock("alice"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        s = raw(d.sock)
        s.sendall(
            line(1, "hello", HELLO) + line(2, "comm.file", {"from": "h", "to": "alice", "text": "half"})
        )
        s.shutdown(1)  # SHUT_WR
        time.sleep(0.5)
        fcntl.flock(fd, fcntl.LOCK_UN)
        got = read_lines(s, 2)
        assert [x["id"] for x in got] == [1, 2] and got[1]["payload"] == {"ok": True}
        assert eof(s)
        s.close()
    finally:
        os.close(fd)
    check_once(lay, "alice", ["half"])


# --------------------------------------------------------------------------------- late frames (expires)


def test_a_frame_that_arrives_after_its_sender_stopped_waiting_is_not_filed(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    """No FAILED-but-filed: a frame whose ``expires`` has passed (its sender already said FAILED) is
    refused with the exact text and nothing is appended."""
    d, lay = hub(str(tmp_path), daemons)
    late = {"from": "h", "to": "alice", "text": "late", "expires": time.time() - 1}
    assert d.request("comm.file", late) == {
        "error": "the frame arrived after its sender stopped waiting for it, so nothing was filed",
        "code": "file_failed",
    }
    assert inbox_lines(lay, "alice") == []
    fresh = dict(late, text="in time", expires=time.time() + 5)
    assert d.request("comm.file", fresh) == {"ok": True}
    check_once(lay, "alice", ["in time"])


def test_a_frame_gives_up_the_lock_wait_when_its_sender_would_have_given_up(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    """The receiver's lock wait is cut to what is left before ``expires`` (less the answer margin): with
    the inbox lock held, a frame with 1 s left fails within about 1 s, not the 3 s bound, and is never
    appended once the lock comes free."""
    d, lay = hub(str(tmp_path), daemons, SOT_INBOX_LOCK_WAIT_SECS="3")
    fd = os.open(lay.inbox_lock("alice"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        answer = d.request(
            "comm.file", {"from": "h", "to": "alice", "text": "x", "expires": time.time() + 1.0}
        )
        took = time.monotonic() - t0
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert answer["code"] == "file_failed" and "nothing was appended" in answer["error"]
    assert took < 2.5
    time.sleep(0.5)
    assert inbox_lines(lay, "alice") == []
