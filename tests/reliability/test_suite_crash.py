"""W4 of issue 6: 200 appenders SIGKILLed at random points; no acknowledged line is lost (bench/crash.py)."""

from __future__ import annotations

import pytest
from bench.crash import run_crash

pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.alone, pytest.mark.timeout(120)]


def test_suite_crash_200_kills_lose_no_acknowledged_line(tmp_path: object) -> None:
    r = run_crash(str(tmp_path), kills=200, budget=40.0)
    assert r["problems"] == [], r
    assert r["kills"] >= 100, f"only {r['kills']} kills within 40 s: {r}"
    assert r["acked"] > 0 and r["acked_missing"] == 0 and r["duplicates"] == 0 and r["bad_lines"] == 0
    assert r["torn_tails_cut"] >= 1, "no kill tore a line: the torn-line path was not exercised"
