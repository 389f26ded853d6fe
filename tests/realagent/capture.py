"""tests/realagent/capture.py: the captures of a real agent's TUI, for either agent (behaviour 3.3).

``screens.py`` (Claude Code) and ``codex_screens.py`` (Codex) each hold a table of ``Case``s, the
functions that reach each state and the agent's own ``normalise``; they pass their agent as a ``Tui`` to
what is here, once for both: reaching a case in a fresh session and taking tmux's raw capture once the
frame has settled (``capture``, ``settled_raw``), rewriting the stored captures (``rewrite``, what
``python -m tests.realagent.screens`` / ``codex_screens`` run), taking every case live a few at a time
(``live``) and comparing a live capture with the stored one (``check_stored``). The SGR cell helpers both
agents' ``normalise`` are built from (``cells``, ``sub``, ``emit``) are here too.

The stored file is tmux's raw answer from one run, at ``tests/fixtures/screens/<case name>.capture``.
What would break it: a settle test weaker than two equal normalised frames ``calm_s`` apart (a capture
taken mid-draw), or a compare of anything but the two normalised texts.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol

from sotd.terminal.tmux import parse_capture
from tests.realagent import kit

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "screens")
HEIGHT = 30
PREFIX = "sra-"
SETTLE_S = 40.0


class CaseLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def width(self) -> int: ...
    @property
    def verdict(self) -> tuple[bool, str | None]: ...
    @property
    def reach(self) -> str: ...


class Session(Protocol):
    def raw(self) -> str: ...


class Tui(NamedTuple):
    """What one agent's captures need: how to start its session and read its screens."""

    product: str  # "Claude Code", "Codex": the failure message names it
    module: str  # the module whose ``python -m`` rewrites this agent's captures
    model: Callable[[], Any]  # a started stand-in model (``.stop()`` ends it)
    open: Callable[[Any, str, kit.Panes, Any], Session]  # (case, root, panes, model): the session, ready
    reach: dict[str, Callable[[Any, Any], Callable[[str], bool]]]  # the functions that reach a state
    normalise: Callable[[str], str]
    verdict: Callable[[str], tuple[bool, str | None]]
    pin: Callable[[], str]
    calm_s: float  # a frame counts as settled when it is the same this long later


def path_of(case: CaseLike) -> str:
    return os.path.join(HERE, f"{case.name}.capture")


# ------------------------------------------------------------------------------- normalising: SGR cells

Cell = tuple[str, tuple[tuple[str, str], ...]]
_SGR = re.compile(r"\x1b\[([0-9;:]*)m")
TMP = re.compile(re.escape("/tmp/" + PREFIX) + r"[A-Za-z0-9_]{8}")
COUNTER = re.compile(r"(?<=\()\d+(?=s)|(?<=for )\d+(?=s)")
# Attributes a blank cell shows: the others (colour, bold, dim, italic) are invisible on a space.
_SHOWN_ON_BLANK = ("bg", "underline", "reverse", "strike")


def _sgr(params: str, style: dict[str, str]) -> None:
    fields = params.split(";") if params else ["0"]
    i = 0
    while i < len(fields):
        f = fields[i] or "0"
        n = int(f) if f.isdigit() else -1
        if n in (38, 48, 58):
            kind = fields[i + 1] if i + 1 < len(fields) else ""
            take = 3 if kind == "5" else 5 if kind == "2" else 2
            style[{38: "fg", 48: "bg", 58: "ul"}[n]] = ";".join(fields[i : i + take])
            i += take
            continue
        if n == 0:
            style.clear()
        elif n in (1, 2, 3, 4, 5, 7, 8, 9):
            style[{1: "bold", 2: "dim", 3: "italic", 4: "underline", 5: "blink", 7: "reverse", 8: "hidden",
                   9: "strike"}[n]] = f  # fmt: skip
        elif n == 22:
            style.pop("bold", None)
            style.pop("dim", None)
        elif n in (23, 24, 25, 27, 28, 29):
            style.pop(
                {23: "italic", 24: "underline", 25: "blink", 27: "reverse", 28: "hidden", 29: "strike"}[n],
                None,
            )
        elif 30 <= n <= 37 or 90 <= n <= 97:
            style["fg"] = f
        elif n == 39:
            style.pop("fg", None)
        elif 40 <= n <= 47 or 100 <= n <= 107:
            style["bg"] = f
        elif n == 49:
            style.pop("bg", None)
        i += 1


def cells(frame: str) -> list[list[Cell]]:
    """The frame as rows of (character, its visible style); the SGR state carries across rows as in tmux."""
    rows: list[list[Cell]] = []
    style: dict[str, str] = {}
    for line in frame.split("\n"):
        row: list[Cell] = []
        i = 0
        while i < len(line):
            m = _SGR.match(line, i)
            if m:
                _sgr(m.group(1), style)
                i = m.end()
                continue
            ch = line[i]
            i += 1
            shown = {k: v for k, v in style.items() if ch != " " or k in _SHOWN_ON_BLANK}
            row.append((ch, tuple(sorted(shown.items()))))
        rows.append(row)
    return rows


def emit(rows: list[list[Cell]]) -> str:
    """The rows as text again, SGR codes written canonically: per cell its visible style, a reset at the
    end of each row, trailing unstyled blanks dropped."""
    out: list[str] = []
    for row in rows:
        while row and row[-1] == (" ", ()):
            row.pop()
        parts: list[str] = []
        cur: tuple[tuple[str, str], ...] = ()
        for ch, st in row:
            if st != cur:
                parts.append("\x1b[0" + "".join(";" + v for _k, v in st) + "m")
                cur = st
            parts.append(ch)
        if cur:
            parts.append("\x1b[0m")
        out.append("".join(parts))
    return "\n".join(out)


def sub(row: list[Cell], pattern: re.Pattern[str], repl: Callable[[str], str]) -> None:
    """Replace each match of ``pattern`` in the row's text; the new cells take the first old cell's style."""
    text = "".join(ch for ch, _st in row)
    for m in reversed(list(pattern.finditer(text))):
        st = row[m.start()][1] if m.start() < len(row) else ()
        row[m.start() : m.end()] = [(ch, st) for ch in repl(m.group(0))]


def fix_run_values(row: list[Cell]) -> None:
    """What differs in every agent's frames between two runs: the test's temp folder, seconds counters."""
    sub(row, TMP, lambda t: "/tmp/" + PREFIX + "0" * 8)
    sub(row, COUNTER, lambda t: "0")


def normalised(raw: str, fix_row: Callable[[list[Cell], str], None], *, blank_cursor: bool = False) -> str:
    """A capture as cells with ``fix_run_values`` and the agent's ``fix_row(row, frame)`` applied to each
    row (and, with ``blank_cursor``, a blank cell under the cursor unstyled), written back with ``emit``,
    then the cursor line ``x y width``."""
    frame, x, y, w = parse_capture(raw)
    rows = cells(frame.rstrip("\n"))
    for row in rows:
        fix_run_values(row)
        fix_row(row, frame)
    if blank_cursor and 0 <= y < len(rows) and 0 <= x < len(rows[y]) and rows[y][x][0] == " ":
        rows[y][x] = (" ", ())
    return emit(rows) + f"\n{x} {y} {w}\n"


# ----------------------------------------------------------------------------------- taking a capture


def settled_raw(
    tui: Tui, s: Session, pred: Callable[[str], bool], what: str, timeout: float = SETTLE_S
) -> str:
    """tmux's raw capture once ``pred`` holds and the normalised frame stays the same for ``tui.calm_s``."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        last = s.raw()
        if pred(kit.plain(last)):
            time.sleep(tui.calm_s)
            again = s.raw()
            if tui.normalise(again) == tui.normalise(last):
                return again
            continue
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last screen:\n{kit.plain(last)}")


def capture(tui: Tui, case: CaseLike) -> str:
    """Reach ``case`` in a fresh session (its own home, model and tmux server); tmux's raw capture."""
    root = tempfile.mkdtemp(prefix=PREFIX, dir="/tmp")
    assert len(os.path.basename(root)) == len(PREFIX) + 8, root
    model = tui.model()
    panes = kit.Panes((case.width, HEIGHT))
    try:
        s = tui.open(case, root, panes, model)
        pred = tui.reach[case.reach](s, model)
        return settled_raw(tui, s, pred, case.name)
    finally:
        panes.close()
        model.stop()
        shutil.rmtree(root, ignore_errors=True)


def rewrite(tui: Tui, cases: Iterable[CaseLike], names: Sequence[str]) -> int:
    """Rewrite the stored captures (all, or the names given); print each verdict against the table's."""
    os.makedirs(HERE, exist_ok=True)
    for case in cases:
        if names and case.name not in names:
            continue
        raw = capture(tui, case)
        got = tui.verdict(raw)
        with open(path_of(case), "w", encoding="utf-8", newline="") as f:
            f.write(raw)
        flag = "" if got == case.verdict else f"   <-- the table wants {case.verdict}"
        print(f"{case.name}: {got}{flag}")
    return 0


# -------------------------------------------------------------------------------- live against stored


def live(tui: Tui, cases: Sequence[CaseLike], parallel: int) -> dict[str, str | BaseException]:
    """Every case captured live, ``parallel`` at a time; a case that failed holds its exception."""

    def one(case: CaseLike) -> str | BaseException:
        try:
            return capture(tui, case)
        except BaseException as e:  # reported by that case's test
            return e

    with ThreadPoolExecutor(parallel) as pool:
        got = list(pool.map(one, cases))
    return {c.name: g for c, g in zip(cases, got, strict=True)}


def check_stored(tui: Tui, case: CaseLike, raw: str | BaseException) -> None:
    """The live capture has the table's verdict (normalised too) and, normalised, equals the stored one."""
    if isinstance(raw, BaseException):
        raise raw
    assert tui.verdict(raw) == case.verdict
    assert tui.verdict(tui.normalise(raw)) == case.verdict  # normalising never changes what the wake reads
    with open(path_of(case), encoding="utf-8", newline="") as f:
        stored = f.read()
    got, want = tui.normalise(raw), tui.normalise(stored)
    diff = "\n".join(
        repr(d) for d in difflib.unified_diff(want.split("\n"), got.split("\n"), lineterm="", n=0)
    )
    assert got == want, (
        f"{tui.product} {tui.pin()} draws {case.name} differently now:\n{kit.plain(raw)}\n{diff}\n"
        f"rerun python -m {tui.module} and commit the captures with the pin"
    )
