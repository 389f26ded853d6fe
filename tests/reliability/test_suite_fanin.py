"""W2 of issue 6 at small N: concurrent senders into one inbox; the invariants, not the timings.

Every success exactly once, each sender's order kept, no partial line visible to a reader holding the
shared lock, no FAILED-but-filed (bench/fanin.py: the library path in processes and the real CLI).
"""

from __future__ import annotations

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
