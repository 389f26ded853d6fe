"""The free-prompt table (behaviour 3.3) on real screen captures: tmux's own bytes for the scripted
Claude-like screen in each state (``tests/fixtures/screens``, written by ``python -m tests.fakes.screens``),
read by the same parser the wake uses."""

from __future__ import annotations

import os

import pytest

from sotd.terminal.prompt import is_free, screen_from_capture
from sotd.terminal.tmux import parse_capture
from tests.fakes.screens import CASES, Case, path_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_captured_screen(case: Case) -> None:
    with open(path_of(case), encoding="utf-8", newline="") as f:
        raw = f.read()
    text, x, y, width = parse_capture(raw)
    assert width == case.width
    screen = screen_from_capture(text, x, y, width)
    assert is_free(screen, "claude") == case.verdict
    assert is_free(screen, "codex") == (False, "no wake predicate for this agent")


def test_every_capture_is_in_the_table() -> None:
    here = os.path.dirname(path_of(CASES[0]))
    assert sorted(n for n in os.listdir(here) if n.endswith(".capture")) == sorted(
        os.path.basename(path_of(c)) for c in CASES
    )


def test_the_table_covers_each_reason_a_screen_can_give() -> None:
    reasons = {c.verdict[1] for c in CASES}
    assert reasons >= {None, "input not empty", "not in an input box", "pane too narrow for the wake line",
                       "the panel's dot is not on main"}  # fmt: skip
