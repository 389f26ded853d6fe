"""The free-prompt table (behaviour 3.3) on real screen captures, read by the same parser the wake uses:
tmux's own bytes for the real Claude Code TUI at the pinned version (``claude-*.capture``, written by
``python -m tests.realagent.screens``) and, only for the shapes the pinned release does not draw, for the
scripted Claude-like screen (written by ``python -m tests.fakes.screens``, each case saying why)."""

from __future__ import annotations

import os

import pytest

from sotd.terminal.prompt import WORKING, is_free, screen_from_capture
from sotd.terminal.tmux import parse_capture
from tests.fakes import screens as scripted
from tests.realagent import screens as real

TABLE = [(c.name, scripted.path_of(c), c.width, c.verdict) for c in scripted.CASES] + [
    (c.name, real.path_of(c), c.width, c.verdict) for c in real.CASES
]

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("name", "path", "width", "verdict"), TABLE, ids=[t[0] for t in TABLE])
def test_captured_screen(name: str, path: str, width: int, verdict: tuple[bool, str | None]) -> None:
    with open(path, encoding="utf-8", newline="") as f:
        raw = f.read()
    text, x, y, w = parse_capture(raw)
    assert w == width
    screen = screen_from_capture(text, x, y, w)
    assert is_free(screen, "claude") == verdict
    assert is_free(screen, "codex") == (False, "no wake predicate for this agent")


def test_every_capture_is_in_the_table() -> None:
    here = os.path.dirname(real.path_of(real.CASES[0]))
    assert sorted(n for n in os.listdir(here) if n.endswith(".capture")) == sorted(
        os.path.basename(t[1]) for t in TABLE
    )


def test_the_real_captures_cover_the_states_issue_11_names() -> None:
    names = {c.name for c in real.CASES}
    assert names >= {"claude-empty-prompt", "claude-draft", "claude-multiline-draft", "claude-working",
                     "claude-working-reduced-motion", "claude-permission-dialog", "claude-agents-view",
                     "claude-queued-placeholder", "claude-question-box", "claude-narrow"}  # fmt: skip
    assert real.WORKING == WORKING


def test_a_working_turn_reads_busy_with_motion_on_and_off_and_drafts_and_dialogs_are_never_free() -> None:
    never_free = [c for c in real.CASES if "working" in c.name or "draft" in c.name or "dialog" in c.name
                  or "question" in c.name or "queued" in c.name]  # fmt: skip
    assert len(never_free) == 7
    assert all(c.verdict[0] is False for c in never_free)
    assert {c.verdict for c in real.CASES if "working" in c.name} == {(False, WORKING)}


def test_the_table_covers_each_reason_a_screen_can_give() -> None:
    reasons = {t[3][1] for t in TABLE}
    assert reasons >= {None, "input not empty", "not in an input box", "pane too narrow for the wake line",
                       "the panel's dot is not on main", WORKING}  # fmt: skip


def test_every_scripted_screen_says_why_it_is_not_a_real_capture() -> None:
    assert all(len(c.scripted_because) > 20 for c in scripted.CASES)
