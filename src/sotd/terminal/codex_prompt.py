"""Screen reading for the wake of a Codex row (behaviour 3.3; issue 12 parts 4-5): is the real Codex TUI
sitting at a free, empty composer?

Pure, beside ``prompt.is_free`` (Claude Code's), on the same ``Screen`` values. What the pinned Codex
(0.171.0) draws, from the captures in ``tests/fixtures/screens/codex-*.capture``: the composer is one row
starting with ``›`` (U+203A) at column 0 with the cursor two cells in; when empty, the rest of the row is
its placeholder drawn dim (``Ask Codex to do anything``); below it a blank row and the footer, whose last
row ends ``? for shortcuts``. A working turn keeps that empty composer but draws a status row above it,
``• Working (3s • esc to interrupt)``; a dialog (an approval, the hooks review) takes the composer's place
with a numbered list whose selected row also starts with ``›``, and parks the cursor off the screen.

The guarantee: ``is_free`` says free only for that empty composer, with the cursor in it, no working
status above it, the idle footer (nothing opened) as the screen's last row, and room for the wake line on
its row. With no composer at the cursor a missing footer is the reason given first: a dialog parks its
cursor at a leftover cell or off the screen depending on timing, and one dialog must give one reason.
``hold_region`` is what must stay still through the hold (every row through the composer's: the status
row's seconds counter moves it); ``line_alone`` is the confirm-before-Enter check.

What would break it: reading the dim placeholder as a draft (a free composer never woken), a draft as
empty (typed into), or a working turn as free because its composer is empty (the line would be queued
as the next prompt, and Enter would send it mid-turn).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.terminal.prompt import Screen

GLYPH = "›"  # U+203A: the composer's (and a dialog's selected row's) mark
WORKING_MARK = "esc to interrupt"  # in the status row of a working turn
IDLE_FOOTER = "? for shortcuts"  # the footer's last row, composer empty and nothing opened
FOOTER_ROWS = 3  # at most this many non-blank rows below a free composer

# The refusal reasons, as logged (the shared ones are prompt.py's, byte for byte).
NO_CURSOR = "no cursor"
NO_COMPOSER = "no composer at the cursor"
NOT_EMPTY = "input not empty"
CURSOR_AWAY = "cursor not at the prompt"
TOO_NARROW = "pane too narrow for the wake line"
WORKING = "agent is working"
POPUP = "a popup is open below the composer"
NO_FOOTER = "no idle footer (a dialog, view or overlay is open)"


def composer_row(screen: Screen) -> int | None:
    """The row of the composer holding the cursor (it starts with ``›`` at column 0), or None."""
    pos = screen.cursor_cell()
    if pos is None or not screen.lines[pos[1]].startswith(GLYPH):
        return None
    return pos[1]


def working(screen: Screen, composer: int) -> bool:
    """A working turn's status row above the composer (``esc to interrupt``)."""
    return any(WORKING_MARK in line for line in screen.lines[:composer])


def is_free(screen: Screen) -> tuple[bool, str | None]:
    """``(True, None)`` when the wake may type into this Codex screen, else ``(False, reason)``; the checks
    run in a fixed order, so one screen always gives the same reason."""
    from sotd.terminal.prompt import WAKE_LINE

    rows = [line for line in screen.lines if line.strip(" ")]
    footer = bool(rows) and rows[-1].endswith(IDLE_FOOTER)
    pos = screen.cursor_cell()
    if pos is None or not screen.lines[pos[1]].startswith(GLYPH):
        # no composer at the cursor: a dialog or view without the idle footer says so whatever the cursor
        # (where a dialog parks it varies from run to run)
        if not footer:
            return False, NO_FOOTER
        return False, NO_CURSOR if pos is None else NO_COMPOSER
    x, y = pos
    if working(screen, y):
        return False, WORKING
    if screen.undimmed(y) != GLYPH:
        return False, NOT_EMPTY
    if x != len(GLYPH) + 1:
        return False, CURSOR_AWAY
    if len(GLYPH) + 1 + len(WAKE_LINE) + 1 > screen.width:
        return False, TOO_NARROW
    if not footer:
        return False, NO_FOOTER
    below = [line for line in screen.lines[y + 1 :] if line.strip(" ")]
    if len(below) > FOOTER_ROWS:
        return False, POPUP
    return True, None


def hold_region(screen: Screen) -> tuple[str, ...] | None:
    """Rows 0 through the composer's: what must stay identical during the hold; None with no composer."""
    y = composer_row(screen)
    return None if y is None else screen.lines[: y + 1]


def line_alone(screen: Screen, text: str) -> bool:
    """True when the composer holding the cursor reads exactly ``› <text>`` and no turn is working."""
    y = composer_row(screen)
    return y is not None and screen.undimmed(y) == f"{GLYPH} {text}" and not working(screen, y)
