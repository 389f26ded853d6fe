"""Where the suite's time goes: each tier's wall time and the slowest tests, after every pass (issue 31).

File: ``tests/timing.py``. As a pytest plugin (``tests/conftest.py`` registers ``Times``) it records, on the
controlling process (so under ``pytest -n`` too: the workers' reports carry their start and stop times),
each test's time (set-up, call and tear-down together) and the span it ran in, prints the pass's table in
the terminal summary and, when ``SOTD_TIMES_FILE`` names a file, writes the rows there as JSON lines. Run as
``python -m tests.timing <file>...`` (``scripts/test`` does, at its end) it prints one table for several
passes: the tiers across all of them and the 15 slowest tests of all.
A tier is the test's folder under ``tests/`` (``unit``, ``integration``, ``nfs``, ...). Its wall time is
the length of the union of its tests' spans: the time during which at least one of its tests was running,
so tiers that ran beside each other under ``-n 2`` each count the time they shared. Its test time is the
sum of its tests' own times (at most twice its wall time on two workers).
Guarantee: the numbers are measured (``time.time`` stamps pytest itself takes), never estimated; a pass
whose file cannot be read is named, not skipped in silence.
What would break it: a pytest whose reports lose ``start``/``stop`` (the wall column would read 0).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SLOWEST = 15
ENV = "SOTD_TIMES_FILE"


@dataclass
class Row:
    """One test: its node id, tier, own time (s) and the span [start, stop] it ran in (epoch seconds)."""

    nodeid: str
    tier: str
    secs: float
    start: float
    stop: float


def tier_of(nodeid: str) -> str:
    """``tests/<tier>/...::name`` -> ``<tier>``; a test file directly in ``tests/`` is tier ``tests``."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def union_secs(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of the intervals ``spans`` (overlaps counted once)."""
    total = 0.0
    end = None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def table(rows: list[Row], *, slowest: int = SLOWEST) -> list[str]:
    """The lines of the summary: one per tier (wall, test time, count), then the ``slowest`` tests."""
    if not rows:
        return ["times: no tests ran"]
    tiers: dict[str, list[Row]] = {}
    for r in rows:
        tiers.setdefault(r.tier, []).append(r)
    out = ["times per tier (wall = while one of its tests ran; test time = the sum of its tests' own times):"]
    order = sorted(tiers.items(), key=lambda kv: -union_secs((r.start, r.stop) for r in kv[1]))
    for tier, got in order:
        wall = union_secs((r.start, r.stop) for r in got)
        own = sum(r.secs for r in got)
        out.append(f"  {tier:<14} wall {wall:7.1f} s   test time {own:7.1f} s   {len(got):5d} tests")
    out.append(f"the {min(slowest, len(rows))} slowest tests:")
    for r in sorted(rows, key=lambda r: -r.secs)[:slowest]:
        out.append(f"  {r.secs:7.2f} s  {r.nodeid}")
    return out


class Times:
    """The plugin: collects one ``Row`` per test from its reports (controller side)."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        start = float(getattr(report, "start", 0.0) or 0.0)
        stop = float(getattr(report, "stop", 0.0) or 0.0)
        got = self.rows.get(report.nodeid)
        if got is None:
            self.rows[report.nodeid] = Row(
                report.nodeid, tier_of(report.nodeid), report.duration, start, stop
            )
            return
        got.secs += report.duration
        got.start = min(got.start, start) if got.start else start
        got.stop = max(got.stop, stop)

    def pytest_terminal_summary(self, terminalreporter: Any, config: Any) -> None:
        if hasattr(config, "workerinput"):
            return
        rows = list(self.rows.values())
        for line in table(rows) if rows else []:  # nothing ran (--collect-only): nothing to tell
            terminalreporter.write_line(line)
        path = os.environ.get(ENV, "")
        if path:
            with open(path, "w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r.__dict__) + "\n")


def read(path: str) -> list[Row]:
    with open(path, encoding="utf-8") as f:
        return [Row(**json.loads(line)) for line in f if line.strip()]


def main(argv: list[str]) -> int:
    """``python -m tests.timing <file>...``: one table for the passes those files hold."""
    rows: list[Row] = []
    for path in argv:
        try:
            rows += read(path)
        except (OSError, ValueError, TypeError) as e:
            print(f"times: {path} unreadable ({e}): that pass is not in the table below")
    for line in table(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
