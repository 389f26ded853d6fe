"""W2 of issue 6 at small N: concurrent senders into one inbox; the invariants, not the timings.

Every success exactly once, each sender's order kept, no partial line visible to a reader holding the
shared lock, no FAILED-but-filed (bench/fanin.py: the library path in processes and the real CLI); the
last test makes real FAILED answers by holding the recipient's inbox lock past the send bound.
"""

from __future__ import annotations

import os

import pytest
from bench import common
from bench.fanin import RCPT, check_fanin, cli_run, lib_run

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]


@pytest.mark.parametrize("size", [200, 4096])
def test_suite_fanin_library_4_writers(tmp_path: object, size: int) -> None:
    layout = common.make_comm(str(tmp_path))
    r = lib_run("sotd", layout, "t", 4, 40, size)
    c = r["checks"]
    assert c["problems"] == [], c  # type: ignore[index]
    assert c["lines"] == c["successes"] == 160 and c["failures"] == 0  # type: ignore[index]


def test_suite_fanin_cli_4_senders(tmp_path: object) -> None:
    s = common.Sessions(str(tmp_path))
    rcpt = s.add(RCPT)
    for i in range(4):
        s.add(f"s{i}")
    r = cli_run(s, rcpt, "send", 4, 3, 200)
    c = r["checks"]
    assert c["problems"] == [], c  # type: ignore[index]
    assert c["successes"] == 12 and c["lines"] == 12  # type: ignore[index]


def test_suite_fanin_check_catches_each_violation() -> None:
    from sotd.formats import inbox

    def ln(w: str, s: int) -> bytes:
        return inbox.encode_line(w, RCPT, "r", f"fanin {w} {s} x", "2026-01-01T00:00:00Z")

    good = ln("a", 0) + ln("a", 1)
    assert check_fanin(good, {"a": [0, 1]}, {}, 0)["problems"] == []
    assert check_fanin(ln("a", 0) + ln("a", 0), {"a": [0]}, {}, 0)["duplicates"] == 1
    assert check_fanin(ln("a", 0), {"a": [0, 1]}, {}, 0)["missing"] == 1
    assert check_fanin(ln("a", 1) + ln("a", 0), {"a": [0, 1]}, {}, 0)["out_of_order_senders"] == 1
    assert check_fanin(good, {"a": [0]}, {"a": [1]}, 0)["failed_but_filed"] == 1
    assert check_fanin(good + b'{"fro', {"a": [0, 1]}, {}, 0)["problems"] != []
    assert check_fanin(good, {"a": [0, 1]}, {}, 2)["partial_reads"] == 2


def test_suite_fanin_cli_senders_meet_a_held_inbox_lock(tmp_path: object) -> None:
    """Real FAILED answers in a fan-in: another process's lock holder keeps the recipient's inbox lock for
    longer than a send's 2 s bound, three times with short gaps, while 4 CLI senders send. Some sends
    fail with the busy sentence and some are filed; none that failed is in the inbox, every success is
    there once and in order."""
    import fcntl
    import threading

    s = common.Sessions(str(tmp_path))
    rcpt = s.add(RCPT)
    for i in range(4):
        s.add(f"s{i}")
    stop = threading.Event()
    held = threading.Event()

    def jam() -> None:
        fd = os.open(s.layout.inbox_lock(rcpt), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            for _ in range(3):
                fcntl.flock(fd, fcntl.LOCK_EX)
                held.set()
                if stop.wait(2.6):
                    break
                fcntl.flock(fd, fcntl.LOCK_UN)
                if stop.wait(0.4):
                    break
        finally:
            os.close(fd)

    t = threading.Thread(target=jam)
    t.start()
    try:
        assert held.wait(10)
        r = cli_run(s, rcpt, "send", 4, 4, 200)
    finally:
        stop.set()
        t.join(10)
    c = r["checks"]
    assert c["problems"] == [], c  # type: ignore[index]
    assert c["failed_but_filed"] == 0 and c["failures"] >= 4 and c["successes"] >= 1, c  # type: ignore[index]
    assert c["lines"] == c["successes"]  # type: ignore[index]
