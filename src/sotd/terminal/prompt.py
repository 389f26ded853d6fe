"""Screen reading for the wake (behaviour 3.3, D16): is this row's agent sitting at a free prompt?

Pure: a ``Screen`` is a value (lines, a dim mask, the cursor, the width); ``is_free`` answers with the
logged refusal reason; ``screen_from_capture`` turns ``tmux capture-pane -e -p`` output into a ``Screen``.
The guarantee: the wake types only into an empty Claude Code input box that has focus (the agents panel,
when shown, has its dot on ``main``) and is wide enough to hold the wake line on one row. A Codex row's
screen is read by ``codex_prompt`` (``is_free``, ``hold_region`` and ``line_alone_in_box`` hand it over).

What would break it: reading a dim suggestion as a draft (a free prompt would never be woken) or a
non-dim draft as empty (the wake line would be appended to someone's half-typed text); reading an SGR
colour parameter (``38;2;…``) as the dim attribute; reading a draft whose cursor was moved to its start
as Claude Code's placeholder (``is_placeholder``: the rest of a draft is never dim); reading a working
screen whose footer row is blank or cut short as idle (``has_footer``, ``is_working``).

Columns are character indices of a line, which equal terminal cells for everything the rules look at
(spaces, ``❯``, NBSP, ``─``); a wide character earlier on the cursor row is itself a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

WAKE_LINE = "[sot-comm] you have mail: run comm-poll.sh"

GLYPH = "❯"  # U+276F
WINDOWS_GLYPH = ">"
NBSP = "\u00a0"
RULE = "─"  # U+2500
PANEL_DOT = "●"  # U+25CF
PANEL_RING = "◯"  # U+25EF
PANEL_MAIN = "  ● main"
# Claude Code's footer while a turn works (2.1.197, motion on or off; tests/fixtures/screens/claude-working*)
WORKING_FOOTER = "esc to interrupt"

# The refusal reasons, as logged (protocol: matched byte for byte).
NO_PREDICATE = "no wake predicate for this agent"
NO_CURSOR = "no cursor"
NOT_IN_BOX = "not in an input box"
NO_GLYPH = "no prompt glyph"
TEXT_BEFORE = "text before the glyph"
CURSOR_AWAY = "cursor not at the prompt"
NOT_EMPTY = "input not empty"
TOO_NARROW = "pane too narrow for the wake line"
PANEL_UNKNOWN = "agents panel focused or unrecognised"
PANEL_NOT_MAIN = "the panel's dot is not on main"
WORKING = "agent is working"  # ours (3.3 "never types into a … working screen"): the footer says so
NO_FOOTER = "no footer under the box"  # ours: a blank or missing footer row cannot say the turn is idle

AGENTS_WITH_PREDICATE = ("claude", "codex")  # codex: terminal/codex_prompt.py (issue 12)


@dataclass(frozen=True, slots=True)
class Screen:
    """One frame: ``lines`` with trailing ASCII spaces trimmed (NBSP kept); ``dim[y]`` the columns of row
    ``y`` drawn dim (rows past the end of ``dim`` have none); ``cursor`` (x, y) or None; ``width`` cells."""

    lines: tuple[str, ...]
    dim: tuple[frozenset[int], ...] = ()
    cursor: tuple[int, int] | None = None
    width: int = 80

    @classmethod
    def of(
        cls,
        lines: list[str] | tuple[str, ...],
        cursor: tuple[int, int] | None,
        width: int = 80,
        dim: dict[int, frozenset[int] | set[int]] | None = None,
    ) -> Screen:
        """A screen from raw lines (trailing spaces trimmed here) and a sparse dim mask ``{row: columns}``."""
        trimmed = tuple(line.rstrip(" ") for line in lines)
        mask: list[frozenset[int]] = [frozenset()] * len(trimmed)
        for y, cols in (dim or {}).items():
            if 0 <= y < len(mask):
                mask[y] = frozenset(cols)
        return cls(trimmed, tuple(mask), cursor, width)

    def cursor_cell(self) -> tuple[int, int] | None:
        """The cursor's (x, y) when it lies on the screen, else None (no cursor, or one off the grid: both
        screen readers refuse a row then)."""
        if self.cursor is None:
            return None
        x, y = self.cursor
        if not (0 <= y < len(self.lines)) or not (0 <= x < self.width):
            return None
        return x, y

    def dim_at(self, y: int) -> frozenset[int]:
        return self.dim[y] if 0 <= y < len(self.dim) else frozenset()

    def undimmed(self, y: int) -> str:
        """Row ``y`` with its dim cells read as spaces, trailing spaces trimmed again."""
        line = self.lines[y]
        cols = self.dim_at(y)
        if cols:
            line = "".join(" " if i in cols else ch for i, ch in enumerate(line))
        return line.rstrip(" ")


def is_border(line: str) -> bool:
    """A box border: only ``─``, or ``─…─ label ─…─`` (one label of more than two characters, one space
    either side, no ``─`` inside): Claude Code's named-session top border."""
    if not line:
        return False
    if all(ch == RULE for ch in line):
        return True
    head = len(line) - len(line.lstrip(RULE))
    tail = len(line) - len(line.rstrip(RULE))
    if head == 0 or tail == 0:
        return False
    middle = line[head : len(line) - tail]
    if len(middle) < 2 or middle[0] != " " or middle[-1] != " ":
        return False
    label = middle[1:-1]
    return len(label) > 2 and RULE not in label and label == label.strip(" ")


def _in_box(screen: Screen, y: int) -> bool:
    return 0 < y < len(screen.lines) - 1 and is_border(screen.lines[y - 1]) and is_border(screen.lines[y + 1])


def is_working(screen: Screen, lower: int) -> bool:
    """A turn is working: a line below the box's lower rule (row ``lower``) starts, after its indent,
    with ``esc to interrupt``, or is a cut-off start of those words (a capture taken while the footer row
    is being redrawn: ``  esc to in``). Claude Code shows that footer for the whole turn whether or not its
    spinner moves (``prefersReducedMotion``), while the box itself still reads as an empty prompt."""
    for line in screen.lines[lower + 1 :]:
        text = line.lstrip(" ")
        if text.startswith(WORKING_FOOTER) or (text and WORKING_FOOTER.startswith(text)):
            return True
    return False


def has_footer(screen: Screen, lower: int) -> bool:
    """The row under the box's lower rule (row ``lower``) is drawn: not blank, and not cut off by the
    capture's end. Claude Code always draws one there at an empty prompt (``? for shortcuts``, or the
    permission mode's ``⏵⏵ … on``), and that row is the one saying ``esc to interrupt`` while a turn
    works; blank or missing (a capture taken mid-redraw, or a pane whose last row is the rule), it cannot
    say the turn is idle, so the screen is not free (issue 25: such a working screen read free)."""
    return lower + 1 < len(screen.lines) and screen.lines[lower + 1].strip(" ") != ""


def _panel_reason(screen: Screen, lower: int) -> str | None:
    """The agents panel below the box's lower rule, if any: recognisable, dot on ``main``."""
    panel = [line for line in screen.lines[lower + 1 :] if PANEL_DOT in line or PANEL_RING in line]
    if not panel:
        return None
    if any(not line.startswith("  ") for line in panel):
        return PANEL_UNKNOWN
    dotted = [line for line in panel if PANEL_DOT in line]
    if not dotted or any(line != PANEL_MAIN for line in dotted):
        return PANEL_NOT_MAIN
    return None


def is_placeholder(screen: Screen, g: int) -> bool:
    """The cursor row shows Claude Code's placeholder in an empty input (glyph at column ``g``): the
    cursor on the input's first cell (``g + 2``, after the NBSP), a character there (Claude Code draws its
    cursor by showing the placeholder's first letter in reverse video, not dim), and after it only dim
    text, at least one dim character. 2.1.197 draws so its ``Try "…"`` placeholder of a fresh session and
    the prompt suggestion after a turn (``promptSuggestionEnabled``); both show only while the input is
    empty. A person's draft is never drawn dim, so a draft whose cursor was moved to its start (Home)
    fails here, as does a one-letter draft. With colour off (``NO_COLOR``) the placeholder is not dim
    either: it reads as a draft and the wake refuses (``input not empty``), the safe side."""
    pos = screen.cursor_cell()
    if pos is None:
        return False
    x, y = pos
    line = screen.lines[y]
    if x != g + 2 or line[g + 1 : g + 2] != NBSP or x >= len(line) or line[x] == " ":
        return False
    dim = screen.dim_at(y)
    rest = [i for i in range(x + 1, len(line)) if line[i] != " "]
    return bool(rest) and all(i in dim for i in rest)


def is_free(screen: Screen, agent: str, *, windows: bool = False) -> tuple[bool, str | None]:
    """``(True, None)`` when the wake may type at this screen, else ``(False, reason)``.

    Checks run in a fixed order so a screen always yields the same reason; the content after the glyph is
    judged before the cursor's column, so a typed draft (cursor at its end) reads ``input not empty``; a
    working turn is judged right after the box, so its empty-looking box reads ``agent is working``; a
    missing footer row is judged after the box's content, so a draft (which hides the footer) still reads
    ``input not empty``.
    """
    if agent not in AGENTS_WITH_PREDICATE:
        return False, NO_PREDICATE
    if agent == "codex":
        from sotd.terminal import codex_prompt

        return codex_prompt.is_free(screen)
    pos = screen.cursor_cell()
    if pos is None:
        return False, NO_CURSOR
    x, y = pos
    if not _in_box(screen, y):
        return False, NOT_IN_BOX
    if is_working(screen, y + 1):
        return False, WORKING
    row = screen.undimmed(y)
    glyphs = (GLYPH, WINDOWS_GLYPH) if windows else (GLYPH,)
    found = [i for i in (row.find(g) for g in glyphs) if i >= 0]
    if not found:
        return False, NO_GLYPH
    g = min(found)
    if row[:g].strip(" "):
        return False, TEXT_BEFORE
    after = row[g + 1 :]
    if not (after == NBSP or (windows and after == "") or is_placeholder(screen, g)):
        return False, NOT_EMPTY
    if x not in (g + 1, g + 2):
        return False, CURSOR_AWAY
    if g + 2 + len(WAKE_LINE) + 2 > len(screen.lines[y + 1]):
        return False, TOO_NARROW
    if not has_footer(screen, y + 1):
        return False, NO_FOOTER
    reason = _panel_reason(screen, y + 1)
    if reason is not None:
        return False, reason
    return True, None


def box_bounds(screen: Screen) -> tuple[int, int] | None:
    """``(top border row, lower rule row)`` of the box holding the cursor, or None when it is in none."""
    pos = screen.cursor_cell()
    if pos is None or not _in_box(screen, pos[1]):
        return None
    return pos[1] - 1, pos[1] + 1


def hold_region(screen: Screen, agent: str = "claude") -> tuple[str, ...] | None:
    """Rows 0 through the box's lower rule: what must stay identical during the hold (a spinner above the
    box moves it; a ticking footer or panel below the lower rule does not). Codex: its composer's rows."""
    if agent == "codex":
        from sotd.terminal import codex_prompt

        return codex_prompt.hold_region(screen)
    bounds = box_bounds(screen)
    if bounds is None:
        return None
    return screen.lines[: bounds[1] + 1]


def line_alone_in_box(screen: Screen, text: str, agent: str = "claude") -> bool:
    """True when ``text`` sits alone in main's input box: exactly one row reads ``<spaces>❯<NBSP or
    space><text>`` between two borders, and the agents panel (if shown) has its dot on main. Codex: its
    composer reads ``› <text>``."""
    if agent == "codex":
        from sotd.terminal import codex_prompt

        return codex_prompt.line_alone(screen, text)
    hits = []
    for y in range(1, len(screen.lines) - 1):
        row = screen.undimmed(y)
        g = row.find(GLYPH)
        if g < 0 or row[:g].strip(" ") or row[g + 1 : g + 2] not in (NBSP, " "):
            continue
        if row[g + 2 :] == text and _in_box(screen, y):
            hits.append(y)
    return len(hits) == 1 and _panel_reason(screen, hits[0] + 1) is None


# ---------------------------------------------------------------------------------------- capture parsing

_ESC = "\x1b"
# SGR parameters that introduce a colour with sub-parameters (foreground, background, underline colour).
_EXTENDED = ("38", "48", "58")


def _apply_sgr(params: str, dim: bool) -> bool:
    """The dim state after one SGR sequence: 2 sets it; 0, 22 and an empty list reset it. Colour
    sub-parameters (``38;5;n``, ``38;2;r;g;b``) are skipped so their numbers are never read as attributes."""
    fields = params.split(";") if params else [""]
    i = 0
    while i < len(fields):
        f = fields[i]
        head = f.split(":", 1)[0]
        if head in _EXTENDED and ":" not in f:
            kind = fields[i + 1] if i + 1 < len(fields) else ""
            i += 3 if kind == "5" else 5 if kind == "2" else 2
            continue
        if head in ("", "0", "22"):
            dim = False
        elif head == "2":
            dim = True
        i += 1
    return dim


def screen_from_capture(text: str, cursor_x: int, cursor_y: int, width: int) -> Screen:
    """A ``Screen`` from ``tmux capture-pane -e -p`` output and the cursor from ``display-message``.

    The SGR state carries across lines (tmux emits only changes). Other CSI sequences, OSC strings
    (hyperlinks) and two-byte escapes are dropped. A cursor outside the captured rows or the width is kept
    as given: ``is_free`` reads it as ``no cursor``.
    """
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    lines: list[str] = []
    masks: list[frozenset[int]] = []
    dim = False
    for raw in rows:
        out: list[str] = []
        cols: set[int] = set()
        i, n = 0, len(raw)
        while i < n:
            ch = raw[i]
            if ch == _ESC and i + 1 < n:
                kind = raw[i + 1]
                if kind == "[":
                    j = i + 2
                    while j < n and not ("\x40" <= raw[j] <= "\x7e"):
                        j += 1
                    if j < n and raw[j] == "m":
                        dim = _apply_sgr(raw[i + 2 : j], dim)
                    i = j + 1
                elif kind == "]":
                    j = i + 2
                    while j < n and raw[j] != "\x07" and raw[j : j + 2] != _ESC + "\\":
                        j += 1
                    i = j + (1 if j < n and raw[j] == "\x07" else 2)
                else:
                    i += 2
                continue
            if ch in (_ESC, "\r"):
                i += 1
                continue
            if dim:
                cols.add(len(out))
            out.append(ch)
            i += 1
        line = "".join(out).rstrip(" ")
        lines.append(line)
        masks.append(frozenset(c for c in cols if c < len(line)))
    return Screen(tuple(lines), tuple(masks), (cursor_x, cursor_y), width)
