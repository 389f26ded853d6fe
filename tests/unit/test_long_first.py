"""The ``long`` tests start first in every pass, the rest keep their collected order.

File: ``tests/unit/test_long_first.py`` (issue 31: the quick loop ended on one worker running a 38 s row
test collected last). What would break it: a sort that is not stable, or that reads the marker off the
module instead of the item.
"""

from __future__ import annotations

import pytest

from tests.conftest import long_first

pytestmark = pytest.mark.unit


class Item:
    def __init__(self, name: str, long: bool) -> None:
        self.name = name
        self.long = long

    def get_closest_marker(self, name: str) -> object:
        return object() if name == "long" and self.long else None


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("", ""),
        ("a b c", "a b c"),
        ("a B c", "B a c"),
        ("a b C D", "C D a b"),
        ("A b C d", "A C b d"),
    ],
)
def test_long_ones_first_in_collected_order(given: str, want: str) -> None:
    items = [Item(n, n.isupper()) for n in given.split()]
    got = long_first(items)  # type: ignore[arg-type]
    assert " ".join(i.name for i in got) == want
