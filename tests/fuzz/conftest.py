"""The fuzz tier's budget, seed and case count (issue 19 part 4; docs/design.md, "The fuzz tier").

``SOTD_FUZZ_BUDGET`` is ``ci`` (the default: the fixed budget every ``scripts/test`` and CI run) or
``long`` (``scripts/test fuzz --long``: ten times as many cases, for a release). ``SOTD_FUZZ_SEED`` (default
19) seeds every test, so a run is repeated exactly; the terminal summary prints the seed, the budget and
how many cases ran (counted by the tests themselves; the summary line is ``tests/conftest.py``'s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, seed, settings

from tests.fuzz.kit import Box, scratch_dir

BUDGET = os.environ.get("SOTD_FUZZ_BUDGET", "ci")
SCALE = 10 if BUDGET == "long" else 1
SEED = int(os.environ.get("SOTD_FUZZ_SEED", "19") or "19")


def fuzz(examples: int) -> Any:
    """The decorator of one fuzz test: ``examples`` cases at the CI budget (times ``SCALE``), the recorded
    seed, no example database, no deadline per case (the test's own timeout bounds the whole)."""
    chosen = settings(
        max_examples=examples * SCALE,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )

    def wrap(f: Any) -> Any:
        return seed(SEED)(chosen(f))

    return wrap


class Cases:
    """Counts one test's cases into its ``user_properties`` (they travel with the report, so the summary in
    ``tests/conftest.py`` sees the count under ``pytest -n`` too)."""

    def __init__(self, node: pytest.Item) -> None:
        self.n = 0
        self._props = node.user_properties
        self._props.append(("fuzz_cases", 0))
        self._at = len(self._props) - 1

    def one(self) -> None:
        self.n += 1
        self._props[self._at] = ("fuzz_cases", self.n)


@pytest.fixture
def cases(request: pytest.FixtureRequest) -> Cases:
    assert isinstance(request.node, pytest.Item)
    return Cases(request.node)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.fuzz)
            item.add_marker(pytest.mark.timeout(600 * SCALE))


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    """A box of one module's fuzz tests (``Box.reset`` gives each case a fresh comm folder in it)."""
    with scratch_dir() as d:
        yield Box(d)
