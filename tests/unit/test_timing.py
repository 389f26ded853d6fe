"""tests/timing.py's pure parts: a test's tier, the union of spans, the summary table (issue 31)."""

from __future__ import annotations

import pytest

from tests.timing import Row, table, tier_of, union_secs

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("nodeid", "want"),
    [
        ("tests/unit/test_wire.py::test_round_trip", "unit"),
        ("tests/nfs/test_nfs.py::test_record_v4[x::y]", "nfs"),
        ("tests/test_top.py::test_a", "tests"),
        ("other/test_b.py::test_b", "other"),
    ],
)
def test_tier_is_the_folder_under_tests(nodeid: str, want: str) -> None:
    assert tier_of(nodeid) == want


@pytest.mark.parametrize(
    ("spans", "want"),
    [
        ([], 0.0),
        ([(0.0, 2.0)], 2.0),
        ([(0.0, 2.0), (1.0, 3.0)], 3.0),  # overlap counted once
        ([(5.0, 6.0), (0.0, 1.0)], 2.0),  # apart, in any order
        ([(0.0, 10.0), (2.0, 3.0)], 10.0),  # one inside the other
        ([(0.0, 1.0), (1.0, 2.0)], 2.0),  # touching
    ],
)
def test_union_counts_each_moment_once(spans: list[tuple[float, float]], want: float) -> None:
    assert union_secs(spans) == pytest.approx(want)


def test_table_has_tiers_by_wall_then_the_slowest_tests() -> None:
    rows = [
        Row("tests/unit/test_a.py::a", "unit", 1.0, 100.0, 101.0),
        Row("tests/unit/test_a.py::b", "unit", 2.0, 100.5, 102.5),
        Row("tests/nfs/test_n.py::n", "nfs", 30.0, 200.0, 230.0),
    ]
    assert table(rows, slowest=2) == [
        "times per tier (wall = while one of its tests ran; test time = the sum of its tests' own times):",
        "  nfs            wall    30.0 s   test time    30.0 s       1 tests",
        "  unit           wall     2.5 s   test time     3.0 s       2 tests",
        "the 2 slowest tests:",
        "    30.00 s  tests/nfs/test_n.py::n",
        "     2.00 s  tests/unit/test_a.py::b",
    ]
    assert table([]) == ["times: no tests ran"]
