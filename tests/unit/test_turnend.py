"""``sotd.cli.comm.turnend.plan``: the work-state steps of a turn end, which the Stop hook writes in one go."""

from __future__ import annotations

import pytest

from sotd.cli.comm.turnend import plan

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("marker", "held", "steps"),
    [
        (None, False, [("stop", None)]),
        (None, True, []),
        (("done", "shipped"), False, [("done", "shipped"), ("stop", None)]),
        (("done", ""), False, [("done", None), ("stop", None)]),  # a bare SITREP: done, the note kept
        (("done", "shipped"), True, [("done", "shipped")]),  # a nudge holds the turn: no stop
        (("blocked", "which branch?"), False, [("blocked", "which branch?"), ("stop", None)]),
        (("blocked", ""), False, [("stop", None)]),  # a question needs its text
        (("waiting", "CI"), True, [("waiting", "CI")]),
        (("waiting", ""), True, []),
    ],
)
def test_plan(marker: tuple[str, str] | None, held: bool, steps: list[tuple[str, str | None]]) -> None:
    assert plan(marker, held=held) == steps
