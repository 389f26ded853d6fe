"""tests/realagent/codex_screens.py: captures of the real Codex TUI (the pinned version) for Codex's
free-composer table (behaviour 3.3; issue 12 part 4).

Each ``Case`` is one state of a real ``codex`` session, reached in a private tmux pane with the Responses
stand-in and read with the wake's own capture call. ``python -m tests.realagent.codex_screens`` (re)writes
``tests/fixtures/screens/codex-<name>.capture``; ``tests/unit/test_codex_prompt_captures.py`` tables the
stored bytes; ``tests/realagent/test_codex_screens_live.py`` reaches each state again and fails when the
bytes differ.

Comparing uses what the Claude captures' ``normalise`` also fixes (``capture.py``: the temp folder, the
seconds counters, the SGR codes as per-cell visible style) plus what varies in Codex's own frames: the
wall-clock time a finished turn shows (``Worked for 8s • 10:04`` → ``00:00``), the blink and shimmer of the ``Working``
status line (its glyph alternates ``•``/``◦``: written ``•``; its colours are frames: dropped), and the
colour of the thread's title in the footer and in the agent command center's detail pane (picked per
thread: dropped) and the project path in the footer (a temp folder).
What would break it: normalising more than that (a changed layout would pass). The loop that reaches,
settles, stores and compares a case is tests/realagent/capture.py's (``CODEX`` gives it Codex).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

from tests.realagent import capture as cap
from tests.realagent import codex_kit, kit, screens
from tests.realagent.codex_standin import CodexStandIn, bash, sleep, text

HERE = cap.HERE
HEIGHT = cap.HEIGHT
PREFIX = cap.PREFIX
WORKING = screens.WORKING


class Case(NamedTuple):
    name: str
    width: int
    verdict: tuple[bool, str | None]
    reach: str


# the reasons, mirrored from sotd.terminal.codex_prompt (the unit table checks they are the same)
NOT_EMPTY = "input not empty"
NO_CURSOR = "no cursor"
NO_COMPOSER = "no composer at the cursor"
TOO_NARROW = "pane too narrow for the wake line"
POPUP = "a popup is open below the composer"
NO_FOOTER = "no idle footer (a dialog, view or overlay is open)"

CASES = [
    Case("codex-empty-composer", 100, (True, None), "idle"),
    Case("codex-idle-after-turn", 100, (True, None), "after_turn"),
    Case("codex-draft", 100, (False, NOT_EMPTY), "draft"),
    Case("codex-multiline-draft", 100, (False, NO_FOOTER), "multiline"),
    Case("codex-working", 100, (False, WORKING), "working"),
    Case("codex-queued", 100, (False, WORKING), "queued"),
    Case("codex-approval", 100, (False, NO_FOOTER), "approval"),
    Case("codex-slash-popup", 100, (False, NOT_EMPTY), "slash"),
    Case("codex-file-popup", 100, (False, NOT_EMPTY), "mention"),
    Case("codex-shortcuts", 100, (False, NO_FOOTER), "shortcuts"),
    Case("codex-agents-view", 100, (False, NO_FOOTER), "agents"),
    Case("codex-hooks-review", 100, (False, NO_FOOTER), "hooks_review"),
    Case("codex-narrow", 44, (False, TOO_NARROW), "idle"),
]  # fmt: skip


def path_of(case: Case) -> str:
    return os.path.join(HERE, f"{case.name}.capture")


_CLOCK = re.compile(r"(?<= • )\d\d:\d\d$")
_WORKING_ROW = re.compile(r"^[•◦] Working \(")
_FOOTER_ROW = re.compile(r"^  GPT-\S+ default · ")


def normalise(raw: str) -> str:
    return cap.normalised(raw, _fix_row)


def _fix_row(row: list[cap.Cell], frame: str) -> None:
    cap.sub(row, _CLOCK, lambda t: "00:00")
    line = "".join(ch for ch, _st in row)
    if _FOOTER_ROW.match(line) and line.count(" · ") >= 2:
        # the footer's third part is the thread's title, in a colour picked per thread
        at = line.index(" · ", line.index(" · ") + 1) + 3
        row[at:] = [(ch, ()) for ch, _st in row[at:]]
    if "│" in line and "Agent command center" in frame:
        # the command center's detail pane draws the thread's title in its per-thread colour
        at = line.index("│") + 1
        row[at:] = [(ch, tuple(kv for kv in st if kv[0] != "fg")) for ch, st in row[at:]]
    if _WORKING_ROW.match(line):
        # the status line blinks (its glyph is • or ◦) and shimmers: glyph and colours are frames
        row[:] = [("•", ())] + [(ch, ()) for ch, _st in row[1:]]


# ------------------------------------------------------------------------------------ reaching a state

IDLE_HINT = "? for shortcuts"
# Keys sent in the TUI's first second after its composer shows are not read yet (seen on 0.171.0)
READY_SECS = 2.5
# A frame counts as settled when it is the same this long later (a dialog parks its cursor after drawing)
CALM_SECS = 1.2


def idle(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    return lambda t: IDLE_HINT in t and "› Ask Codex to do anything" in t


def after_turn(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    m.add(text("The build is green on main."))
    c.submit("how is the build?")
    return lambda t: "The build is green on main." in t and "Worked for" in t and idle(c, m)(t)


def draft(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "fix the flaky test")
    return lambda t: "› fix the flaky test" in t


def multiline(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "first line of a draft")
    kit.wait_for(lambda: "first line of a draft" in c.text(), timeout=10, what="the first line")
    c.panes.keys(c.pane, "C-j")
    c.panes.type(c.pane, "and its second line")
    return lambda t: "and its second line" in t and "first line of a draft" in t


def working(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    m.add(sleep(60))
    c.submit("run the slow job")
    return lambda t: "esc to interrupt" in t and "Working (" in t


def queued(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    busy = working(c, m)
    kit.wait_for(lambda: busy(c.text()), timeout=30, what="the working turn")
    c.panes.type(c.pane, "and then this")
    kit.wait_for(lambda: "and then this" in c.text(), timeout=10, what="the queued text")
    c.panes.keys(c.pane, "Tab")
    return lambda t: busy(t) and "and then this" in t and "› Ask Codex to do anything" in t


def approval(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    m.add(bash("touch notes.txt"))
    c.submit("make a notes file")
    return lambda t: "Would you like to run the following command?" in t and "to cancel" in t


def slash(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "/")
    return lambda t: "/model" in t


def mention(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "@")
    return lambda t: "Type to search mentions" in t


def shortcuts(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "?")
    return lambda t: "Keyboard shortcuts" in t and "? / esc close" in t


def agents(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    shown: Callable[[str], bool] = lambda t: "Agent command center" in t and "esc back" in t  # noqa: E731
    for _ in range(5):  # a Left sent in the TUI's first second is not read yet: send it again
        c.panes.keys(c.pane, "Left")
        try:
            kit.wait_for(lambda: shown(c.text()), timeout=2, what="the agent command center")
            break
        except AssertionError:
            continue
    return shown


def hooks_review(c: codex_kit.Codex, m: CodexStandIn) -> Callable[[str], bool]:
    return lambda t: "Hooks need review" in t and "Trust all and continue" in t


REACH: dict[str, Callable[[codex_kit.Codex, CodexStandIn], Callable[[str], bool]]] = {
    f.__name__: f
    for f in (idle, after_turn, draft, multiline, working, queued, approval, slash, mention, shortcuts,
              agents, hooks_review)
}  # fmt: skip


def _open(case: Case, root: str, panes: kit.Panes, model: CodexStandIn) -> codex_kit.Codex:
    """A session with its own CODEX_HOME under ``root``, at its first composer (but for ``hooks_review``)."""
    home = codex_kit.CodexHome(os.path.join(root, "h"), model)
    home.rules("tier", (["sleep"], "allow"), (["touch"], "prompt"))
    project = os.path.join(root, "p")
    os.makedirs(project, exist_ok=True)
    with open(os.path.join(project, "notes.md"), "w", encoding="utf-8") as f:
        f.write("notes\n")
    if case.reach == "hooks_review":
        home.write_hooks({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}})
    c = codex_kit.Codex(panes, home, project)
    if case.reach != "hooks_review":
        kit.settled(c.raw, lambda r: idle(c, model)(kit.plain(r)), 40, f"{case.name}: the first composer")
        time.sleep(READY_SECS)
    return c


CODEX = cap.Tui(
    product="Codex", module="tests.realagent.codex_screens", model=lambda: CodexStandIn().start(),
    open=_open, reach=REACH, normalise=normalise, verdict=codex_kit.verdict, pin=codex_kit.pin,
    calm_s=CALM_SECS,
)  # fmt: skip


def main(argv: list[str]) -> int:
    """Rewrite the stored captures (all, or the names given)."""
    return cap.rewrite(CODEX, CASES, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
