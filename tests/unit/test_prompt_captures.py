"""The free-prompt table (behaviour 3.3) on real screen captures, read by the same parser the wake uses:
tmux's own bytes for the real Claude Code TUI at the pinned version (``claude-*.capture``, written by
``python -m tests.realagent.screens``) and, only for the shapes the pinned release does not draw, for the
scripted Claude-like screen (written by ``python -m tests.fakes.screens``, each case saying why)."""

from __future__ import annotations

import os
import re

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
    assert is_free(screen, "codex")[0] is False  # Codex's predicate never reads a Claude Code screen free


def test_every_capture_is_in_the_table() -> None:
    here = os.path.dirname(real.path_of(real.CASES[0]))
    # the codex-* captures are Codex's table (tests/unit/test_codex_prompt_captures.py)
    assert sorted(
        n for n in os.listdir(here) if n.endswith(".capture") and not n.startswith("codex-")
    ) == sorted(os.path.basename(t[1]) for t in TABLE)


def test_the_real_captures_cover_the_states_issue_11_names() -> None:
    names = {c.name for c in real.CASES}
    assert names >= {"claude-empty-prompt", "claude-draft", "claude-multiline-draft", "claude-working",
                     "claude-working-reduced-motion", "claude-permission-dialog", "claude-agents-view",
                     "claude-queued-placeholder", "claude-question-box", "claude-narrow",
                     "claude-try-placeholder", "claude-draft-home",
                     "claude-suggestion-after-turn"}  # fmt: skip
    assert real.WORKING == WORKING


def test_the_try_placeholder_is_free_only_where_it_differs_from_a_draft_moved_home() -> None:
    """With colour on the placeholder (all but its first letter dim) wakes and a draft with its cursor
    moved to its start does not; with colour off both read ``input not empty`` (they look alike)."""
    verdicts = {c.name: c.verdict for c in real.CASES}
    assert verdicts["claude-try-placeholder"] == (True, None)
    for name in ("claude-try-placeholder-no-color", "claude-draft-home", "claude-draft-home-no-color"):
        assert verdicts[name] == (False, "input not empty"), name
    # the cursor on the input's first cell, for the placeholder, the suggested next prompt and the draft
    for name in ("claude-try-placeholder", "claude-suggestion-after-turn", "claude-draft-home"):
        with open(real.path_of(next(c for c in real.CASES if c.name == name)), encoding="utf-8") as f:
            text, x, y, w = parse_capture(f.read())
        assert screen_from_capture(text, x, y, w).lines[y].find("❯") + 2 == x, name


def test_a_working_turn_reads_busy_with_motion_on_and_off_and_drafts_and_dialogs_are_never_free() -> None:
    never_free = [c for c in real.CASES if "working" in c.name or "draft" in c.name or "dialog" in c.name
                  or "question" in c.name or "queued" in c.name]  # fmt: skip
    # the working turn three ways (motion on, motion off, colour off); a draft moved home, colour on and off
    assert len(never_free) == 10
    assert all(c.verdict[0] is False for c in never_free)
    assert {c.verdict for c in real.CASES if "working" in c.name} == {(False, WORKING)}


def test_the_table_covers_each_reason_a_screen_can_give() -> None:
    reasons = {t[3][1] for t in TABLE}
    assert reasons >= {None, "input not empty", "not in an input box", "pane too narrow for the wake line",
                       "the panel's dot is not on main", WORKING}  # fmt: skip


def test_every_scripted_screen_says_why_it_is_not_a_real_capture() -> None:
    assert all(len(c.scripted_because) > 20 for c in scripted.CASES)


def test_the_no_color_captures_are_drawn_without_colour_and_their_twins_with_it() -> None:
    colour = re.compile(r"\x1b\[[0-9;]*(?:3[0-8]|9[0-7])[;m]")
    for case in (c for c in real.CASES if dict(c.env).get("NO_COLOR")):
        twin = next(c for c in real.CASES if c.name == case.name.removesuffix("-no-color"))
        with open(real.path_of(case), encoding="utf-8") as f, open(real.path_of(twin), encoding="utf-8") as g:
            assert not colour.search(f.read()) and colour.search(g.read()), case.name


def test_the_agents_view_age_is_normalised_whatever_it_reads() -> None:
    """The agents view's row for this session ends in its age; on a loaded machine it reads 1s, later 12s."""
    with open(os.path.join(real.HERE, "claude-agents-view.capture"), encoding="utf-8", newline="") as f:
        stored = f.read()
    zero = "   \x1b[38;5;246m0s"
    assert zero in stored
    for later in ("   \x1b[38;5;246m1s", "  \x1b[38;5;246m12s", "   \x1b[38;5;246m2m"):
        assert real.normalise(stored.replace(zero, later)) == real.normalise(stored), later


def test_a_working_capture_whose_footer_row_is_blank_or_cut_is_not_free() -> None:
    """Issue 25: the real working turn's capture with its footer row (``esc to interrupt``, the only thing
    that tells it from an empty prompt) blank, cut short at any length, or cut off the bottom read free."""
    from sotd.terminal.prompt import NO_FOOTER, Screen

    for name in ("claude-working", "claude-working-reduced-motion", "claude-working-no-color"):
        with open(os.path.join(real.HERE, f"{name}.capture"), encoding="utf-8", newline="") as f:
            text, x, y, w = parse_capture(f.read())
        screen = screen_from_capture(text, x, y, w)
        row = y + 2  # the footer row, under the box's lower rule
        footer = screen.lines[row]
        assert footer.lstrip(" ").startswith("esc to interrupt"), name
        blank = Screen((*screen.lines[:row], "", *screen.lines[row + 1 :]), screen.dim, screen.cursor, w)
        assert is_free(blank, "claude") == (False, NO_FOOTER), name
        gone = Screen(screen.lines[:row], screen.dim[:row], screen.cursor, w)
        assert is_free(gone, "claude") == (False, NO_FOOTER), name
        for n in range(1, len(footer)):
            cut = Screen(
                (*screen.lines[:row], footer[:n], *screen.lines[row + 1 :]), screen.dim, screen.cursor, w
            )
            assert is_free(cut, "claude")[0] is False, (name, footer[:n])
