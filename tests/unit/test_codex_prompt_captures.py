"""Codex's free-composer table (issue 12 part 4) on real captures of the pinned Codex TUI
(``codex-*.capture``, written by ``python -m tests.realagent.codex_screens``), read by the same parser the
wake uses; and the pure rules of ``sotd.terminal.codex_prompt`` on hand-made screens."""

from __future__ import annotations

import os

import pytest

from sotd.terminal import codex_prompt, prompt
from sotd.terminal.prompt import Screen, is_free, screen_from_capture
from sotd.terminal.tmux import parse_capture
from tests.realagent import codex_screens as real

pytestmark = pytest.mark.unit

TABLE = [(c.name, real.path_of(c), c.width, c.verdict) for c in real.CASES]


def _screen(path: str) -> tuple[Screen, int]:
    with open(path, encoding="utf-8", newline="") as f:
        raw = f.read()
    text, x, y, w = parse_capture(raw)
    return screen_from_capture(text, x, y, w), w


@pytest.mark.parametrize(("name", "path", "width", "verdict"), TABLE, ids=[t[0] for t in TABLE])
def test_captured_codex_screen(name: str, path: str, width: int, verdict: tuple[bool, str | None]) -> None:
    screen, w = _screen(path)
    assert w == width
    assert codex_prompt.is_free(screen) == verdict
    assert is_free(screen, "codex") == verdict  # the wake's entry point dispatches to it
    assert is_free(screen, "claude")[0] is False  # Claude Code's predicate never reads a Codex screen free


def test_every_codex_capture_is_in_the_table() -> None:
    here = os.path.dirname(real.path_of(real.CASES[0]))
    stored = sorted(n for n in os.listdir(here) if n.startswith("codex-") and n.endswith(".capture"))
    assert stored == sorted(os.path.basename(t[1]) for t in TABLE)


def test_the_captures_cover_the_states_issue_12_names_and_only_the_empty_composer_is_free() -> None:
    names = {c.name for c in real.CASES}
    assert names >= {"codex-empty-composer", "codex-draft", "codex-working", "codex-approval",
                     "codex-slash-popup", "codex-file-popup", "codex-shortcuts", "codex-narrow"}  # fmt: skip
    free = {c.name for c in real.CASES if c.verdict[0]}
    assert free == {"codex-empty-composer", "codex-idle-after-turn"}
    assert (real.NOT_EMPTY, real.NO_COMPOSER, real.NO_CURSOR, real.TOO_NARROW, real.POPUP, real.WORKING,
            real.NO_FOOTER) == (
        codex_prompt.NOT_EMPTY, codex_prompt.NO_COMPOSER, codex_prompt.NO_CURSOR, codex_prompt.TOO_NARROW,
        codex_prompt.POPUP, codex_prompt.WORKING, codex_prompt.NO_FOOTER)  # fmt: skip


def test_the_hold_region_and_the_confirm_read_the_composer() -> None:
    idle, _w = _screen(real.path_of(real.CASES[0]))
    region = codex_prompt.hold_region(idle)
    assert region is not None and region[-1].startswith("› Ask Codex")
    assert prompt.hold_region(idle, "codex") == region
    draft, _w = _screen(os.path.join(real.HERE, "codex-draft.capture"))
    assert codex_prompt.line_alone(draft, "fix the flaky test")
    assert prompt.line_alone_in_box(draft, "fix the flaky test", "codex")
    assert not codex_prompt.line_alone(draft, "fix the flaky")
    working, _w = _screen(os.path.join(real.HERE, "codex-working.capture"))
    assert not codex_prompt.line_alone(working, "Ask Codex to do anything")


FOOTER = ["", "  GPT-5.5 default · /p", "  ← for agents · ? for shortcuts"]
PLACEHOLDER = "› Ask Codex to do anything"


def _s(rows: list[str], cursor: tuple[int, int] | None, width: int = 100, dim_from: int = 2) -> Screen:
    """A screen whose composer row (the one starting ``›``) is dim from column ``dim_from`` on."""
    dim = {y: set(range(dim_from, len(r))) for y, r in enumerate(rows) if r == PLACEHOLDER}
    return Screen.of(rows, cursor, width, dim)


@pytest.mark.parametrize(
    ("name", "screen", "verdict"),
    [
        ("empty composer", _s(["header", PLACEHOLDER, *FOOTER], (2, 1)), (True, None)),
        (
            "cursor off the screen (a dialog)",
            _s(["header", PLACEHOLDER, *FOOTER], (100, 4)),
            (False, "no cursor"),
        ),
        ("no cursor reported", _s(["header", PLACEHOLDER, *FOOTER], None), (False, "no cursor")),
        (
            "cursor on a row without ›",
            _s(["header", PLACEHOLDER, *FOOTER], (2, 0)),
            (False, "no composer at the cursor"),
        ),
        (
            "working status above",
            _s(["• Working (3s • esc to interrupt)", PLACEHOLDER, *FOOTER], (2, 1)),
            (False, "agent is working"),
        ),
        ("a draft (not dim)", _s(["header", "› fix it", *FOOTER], (8, 1)), (False, "input not empty")),
        (
            "placeholder not dim reads as a draft",
            _s(["header", PLACEHOLDER, *FOOTER], (2, 1), dim_from=99),
            (False, "input not empty"),
        ),
        (
            "cursor after the glyph but away",
            _s(["header", PLACEHOLDER, *FOOTER], (5, 1)),
            (False, "cursor not at the prompt"),
        ),
        (
            "too narrow",
            _s(["header", PLACEHOLDER, *FOOTER], (2, 1), width=44),
            (False, "pane too narrow for the wake line"),
        ),
        (
            "popup below",
            _s(
                [
                    "header",
                    PLACEHOLDER,
                    "",
                    "  /model",
                    "  /review",
                    "  /new",
                    "  ← for agents · ? for shortcuts",
                ],
                (2, 1),
            ),
            (False, "a popup is open below the composer"),
        ),
        (
            "overlay closing footer",
            _s(["header", PLACEHOLDER, "", "  ? / esc close"], (2, 1)),
            (False, "no idle footer (a dialog, view or overlay is open)"),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_codex_is_free_rules(name: str, screen: Screen, verdict: tuple[bool, str | None]) -> None:
    assert codex_prompt.is_free(screen) == verdict
