"""Fuzz: the screens the wake reads (behaviour 3.3; issue 25 build 6), mutated from real captures.

The captures in ``tests/fixtures/screens`` are tmux's own bytes for the real Claude Code and Codex TUIs.
Each case takes a busy one (a working turn, a queued message) or a drafted one (a draft, one moved home,
a multi-line draft) and mutates it the ways a real capture varies without changing what the screen is:
colour, bold, reverse and hyperlink sequences added between cells; SGR resets added (never a dim set: a
dim draft is by definition the placeholder); trailing blanks; the transcript above the box edited,
dropped or grown; the rows under the box blanked, cut short at any cell (a capture taken mid-redraw) or
cut off; the cursor moved along its row; the pane wider; a draft's text replaced by any other text. The
mutated text goes through the wake's own parser (``screen_from_capture``).

Oracle: a busy or drafted screen never reads as a free prompt, with its agent's predicate or the other's.
So that the oracle can fail, the colour-only mutations of the empty prompt and the empty composer must
still read free (the mutations reach the predicate as the real screen would).
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd.terminal.prompt import NO_FOOTER, Screen, is_border, is_free, screen_from_capture
from sotd.terminal.tmux import parse_capture
from tests.fuzz.conftest import Cases, fuzz

pytestmark = pytest.mark.unit

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "screens")
TOKEN = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.|.", re.S)


class Shot(NamedTuple):
    """One real capture: its agent, its rows (raw, escapes kept), the cursor and the width, and where the
    rows above the box (``top``: editable above it) and under it (``under``: from it down) begin."""

    name: str
    agent: str
    rows: tuple[str, ...]
    x: int
    y: int
    width: int
    top: int
    under: int


def load(name: str, agent: str) -> Shot:
    with open(os.path.join(HERE, f"{name}.capture"), encoding="utf-8", newline="") as f:
        text, x, y, w = parse_capture(f.read())
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    lines = screen_from_capture(text, x, y, w).lines
    if agent == "claude":
        top = max(i for i in range(y) if is_border(lines[i]))
        under = min(i for i in range(y + 1, len(lines)) if is_border(lines[i])) + 1
    else:
        composer = max(i for i in range(y + 1) if lines[i].startswith("›"))
        status = [i for i in range(composer) if "esc to interrupt" in lines[i]]
        top = status[-1] if status else composer
        under = y + 1
    return Shot(name, agent, tuple(rows), x, y, w, top, under)


BUSY = [load(n, "claude") for n in ("claude-working", "claude-working-reduced-motion",
                                    "claude-working-no-color", "claude-queued-placeholder")] + [
    load(n, "codex") for n in ("codex-working", "codex-queued")]  # fmt: skip
DRAFTED = [load(n, "claude") for n in ("claude-draft", "claude-draft-home", "claude-draft-home-no-color",
                                       "claude-multiline-draft")] + [
    load(n, "codex") for n in ("codex-draft", "codex-multiline-draft")]  # fmt: skip
EMPTY = [load("claude-empty-prompt", "claude"), load("codex-empty-composer", "codex")]

# Sequences that change nothing the predicates read (colour, bold, reverse, a hyperlink), and resets (they
# may turn a dim placeholder's cells plain: a busy or drafted screen must stay refused, a free one may not).
colour = st.one_of(
    st.integers(0, 255).map(lambda n: f"\x1b[38;5;{n}m"),
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)).map(
        lambda c: f"\x1b[38;2;{c[0]};{c[1]};{c[2]}m"
    ),
    st.sampled_from(["\x1b[39m", "\x1b[49m", "\x1b[1m", "\x1b[7m", "\x1b[48;5;2m", "\x1b[58:2::2:2:2m",
                     "\x1b]8;;https://x/\x1b\\", "\x1b]8;;\x07", "\x1b[K"]),
)  # fmt: skip
reset = st.sampled_from(["\x1b[0m", "\x1b[m", "\x1b[22m", "\x1b[0;39m"])
visible = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\x1b"), max_size=30
)


def tokens(row: str) -> list[str]:
    return TOKEN.findall(row)


def cut(row: str, keep: int) -> str:
    """``row`` with only its first ``keep`` visible cells (every escape kept: the SGR state runs on)."""
    out, seen = [], 0
    for t in tokens(row):
        if t.startswith("\x1b"):
            out.append(t)
        elif seen < keep:
            out.append(t)
            seen += 1
    return "".join(out)


def with_noise(data: Any, rows: list[str], kinds: Any, count: int) -> list[str]:
    """Add up to ``count`` sequences from ``kinds`` between cells of random rows."""
    rows = list(rows)
    for _ in range(data.draw(st.integers(0, count))):
        if not rows:
            break
        i = data.draw(st.integers(0, len(rows) - 1))
        parts = tokens(rows[i])
        at = data.draw(st.integers(0, len(parts)))
        rows[i] = "".join(parts[:at]) + data.draw(kinds) + "".join(parts[at:])
    return rows


def new_draft(data: Any, shot: Shot, rows: list[str]) -> list[str]:
    """The draft's first row with its text replaced by any other text holding a visible character."""
    y = shot.y if shot.name in ("claude-draft", "claude-draft-home", "claude-draft-home-no-color",
                                "codex-draft") else None  # fmt: skip
    if y is None:
        return rows
    text = data.draw(visible.filter(lambda t: t.strip(" ") != ""))
    parts = tokens(rows[y])
    glyph = next(i for i, t in enumerate(parts) if t in ("❯", "›"))
    sep = next(i for i in range(glyph + 1, len(parts)) if not parts[i].startswith("\x1b"))
    head = parts[: sep + 1]  # through the NBSP (Claude Code) or the space (Codex) after the glyph
    tail = [t for t in parts[sep + 1 :] if t.startswith("\x1b")]
    rows[y] = "".join(head) + text + "".join(tail)
    return rows


def mutate(data: Any, shot: Shot, keep_meaning_only: bool = False) -> tuple[Screen, str]:
    """One mutated capture of ``shot`` read by the wake's parser, and a note of what was done."""
    rows = list(shot.rows)
    y, done = shot.y, []
    if not keep_meaning_only and data.draw(st.booleans()):
        rows = new_draft(data, shot, rows)
        done.append("draft")
    # the transcript above the box: rows dropped, replaced or added
    above = rows[: shot.top]
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(st.sampled_from(["drop", "edit", "add"]))
        # a dropped or edited row keeps its escapes (tmux writes only the changes of SGR state: losing
        # one would change the cells after it, which no real screen does)
        if op == "drop" and above:
            i = data.draw(st.integers(0, len(above) - 1))
            escapes = cut(above.pop(i), 0)
            if i < len(above):
                above[i] = escapes + above[i]
            else:
                rows[shot.top] = escapes + rows[shot.top]
        elif op == "edit" and above:
            i = data.draw(st.integers(0, len(above) - 1))
            above[i] = cut(above[i], 0) + data.draw(visible)
        elif op == "add":
            above.insert(data.draw(st.integers(0, len(above))), data.draw(visible))
    y += len(above) - shot.top
    rows = above + rows[shot.top :]
    under = shot.under + len(above) - shot.top
    if not keep_meaning_only:
        # the rows under the box: one blanked, cut short, or everything from it down cut off
        for _ in range(data.draw(st.integers(0, 2))):
            if under >= len(rows):
                break
            i = data.draw(st.integers(under, len(rows) - 1))
            op = data.draw(st.sampled_from(["blank", "cut", "gone"]))
            if op == "gone":
                rows = rows[:i]
            else:
                keep = 0 if op == "blank" else data.draw(st.integers(0, 120))
                rows[i] = cut(rows[i], keep)
            done.append(f"{op}@{i}")
        rows += [""] * data.draw(st.integers(0, 3))
    rows = [r + " " * data.draw(st.integers(0, 2)) for r in rows] if data.draw(st.booleans()) else rows
    rows = with_noise(data, rows, colour if keep_meaning_only else st.one_of(colour, reset), 6)
    x, width = shot.x, shot.width
    if not keep_meaning_only:
        if data.draw(st.booleans()):
            x = data.draw(st.integers(0, shot.width - 1))
        width = shot.width + data.draw(st.integers(0, 40))
    text = "\n".join(rows) + "\n"
    return screen_from_capture(text, x, y, width), " ".join(done)


@fuzz(300)
@given(data=st.data(), shot=st.sampled_from(BUSY + DRAFTED))
def test_fuzz_a_busy_or_drafted_screen_never_reads_free(cases: Cases, data: Any, shot: Shot) -> None:
    cases.one()
    screen, done = mutate(data, shot)
    for agent in ("claude", "codex"):
        verdict = is_free(screen, agent)
        assert verdict[0] is False, (shot.name, agent, done, screen.cursor, screen.lines[-12:])


@fuzz(100)
@given(data=st.data(), shot=st.sampled_from(EMPTY))
def test_fuzz_the_empty_prompt_stays_free_under_colour_noise(cases: Cases, data: Any, shot: Shot) -> None:
    """The mutations reach the predicate: the same noise on an empty prompt leaves it free."""
    cases.one()
    screen, _done = mutate(data, shot, keep_meaning_only=True)
    assert is_free(screen, shot.agent) == (True, None), (shot.name, screen.lines)


def test_the_shots_are_what_their_names_say() -> None:
    """Unmutated, each busy and drafted capture is refused and each empty one free; the box bounds found."""
    for shot in BUSY + DRAFTED:
        text = "\n".join(shot.rows) + "\n"
        assert is_free(screen_from_capture(text, shot.x, shot.y, shot.width), shot.agent)[0] is False
        assert 0 < shot.top <= shot.y < shot.under
    for shot in EMPTY:
        text = "\n".join(shot.rows) + "\n"
        assert is_free(screen_from_capture(text, shot.x, shot.y, shot.width), shot.agent) == (True, None)


def test_a_working_screen_with_its_footer_row_cut_mid_redraw_is_not_free() -> None:
    """Issue 25's root cause, through the raw capture: the working footer row blanked, or cut to any
    start, by the same ``cut`` the fuzz uses; today's rule reads them ``no footer under the box`` or
    ``agent is working``, never free."""
    shot = BUSY[0]
    row = shot.under
    width = len(screen_from_capture(shot.rows[row] + "\n", 0, 0, shot.width).lines[0])
    for keep in range(width + 1):
        rows = list(shot.rows)
        rows[row] = cut(rows[row], keep)
        screen = screen_from_capture("\n".join(rows) + "\n", shot.x, shot.y, shot.width)
        verdict = is_free(screen, "claude")
        assert verdict[0] is False, keep
        if keep <= 2:  # the indent only: a blank row
            assert verdict == (False, NO_FOOTER), keep
