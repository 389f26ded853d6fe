"""tests/realagent/screens.py: captures of the real Claude Code TUI (the pinned version) for the
free-prompt table (behaviour 3.3; issue 11 part 1).

Each ``Case`` is one state of a real ``claude`` session, reached in a private tmux pane with the stand-in
model (``standin``) and read with the wake's own capture call (``capture-pane -e -p`` then the cursor, one
tmux command). ``python -m tests.realagent.screens`` (re)writes ``tests/fixtures/screens/claude-<name>
.capture``; ``tests/unit/test_prompt_captures.py`` tables the stored bytes; ``tests/realagent/
test_screens_live.py`` reaches each state again and fails when the bytes differ from the stored ones.

The stored file is tmux's raw answer from one run. The live test compares ``normalise(live)`` with
``normalise(stored)``; ``normalise`` makes fixed only what must vary between two runs:
- the test's temp folder in a path (``/tmp/sra-XXXXXXXX`` → ``/tmp/sra-00000000``, same length);
- the seconds counters of a working turn and a finished one (``(3s``, ``Running… (14s)``, ``for 2s``
  → ``0``), and the finished turn's verb, one of eight picked at random (``✻ Churned
  for 0s`` → ``✻ Worked for 0s``);
- the spinner glyph of a working turn with motion on (it cycles through ``·✢✳✶✻✽``; written as ``✻``)
  and that row's colours (the verb shimmers);
- the running tool call's ``●``, motion on or off (it blinks: ``●`` or a space; written as an uncoloured
  ``●``);
- the cursor cell when it is blank: Claude Code draws its cursor as a reverse-video cell and blinks it
  after a turn (the cursor position itself is kept);
- the SGR codes: rewritten per cell as its visible style, where a blank cell's colour, weight and italics
  (which cannot be seen, and which the TUI's redraw order decides) are dropped; background, reverse,
  underline and strike on a blank are kept.
The spinner's words are fixed by the session's settings (``spinnerVerbs`` replaced by ``Working``, tips
off), not by normalising. What would break it: normalising more than that (a changed layout would pass),
or a capture taken mid-draw (``capture.settled_raw`` waits for two equal normalised frames). The loop that
reaches, settles, stores and compares a case is tests/realagent/capture.py's, shared with Codex's captures;
this module gives it Claude Code (``CLAUDE``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from sotd.terminal.tmux import parse_capture
from tests.realagent import capture as cap
from tests.realagent import kit, standin

HERE = cap.HERE
HEIGHT = cap.HEIGHT
PREFIX = cap.PREFIX
WORKING = "agent is working"  # the wake's reason, mirrored from sotd.terminal.prompt (checked there)

SETTINGS: dict[str, Any] = {
    "spinnerTipsEnabled": False,
    "spinnerVerbs": {"mode": "replace", "verbs": ["Working"]},
    "permissions": {"allow": ["Bash(sleep:*)"]},
}
QUESTION = {
    "questions": [
        {
            "question": "Which branch should I rebase onto?",
            "header": "Branch",
            "multiSelect": False,
            "options": [
                {"label": "main", "description": "the trunk"},
                {"label": "dev", "description": "the work branch"},
            ],
        }
    ]
}


# Prompt suggestions on: 2.1.197 asks a remote flag for them, which an offline session never gets; this
# variable is its own switch over that flag (``promptSuggestionEnabled: false`` in settings turns them off)
SUGGEST = ("CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION", "1")


class Case(NamedTuple):
    name: str
    width: int
    verdict: tuple[bool, str | None]
    reach: str  # the name of the function below that brings the session to this state
    reduced_motion: bool = False
    env: tuple[tuple[str, str], ...] = ()  # set in the session's environment on top of ``kit.agent_env``


CASES = [
    Case("claude-empty-prompt", 100, (True, None), "idle"),
    Case("claude-first-seconds", 100, (False, "the panel's dot is not on main"), "first_seconds"),
    Case("claude-idle-after-turn", 100, (True, None), "after_turn"),
    Case("claude-draft", 100, (False, "input not empty"), "draft"),
    Case("claude-multiline-draft", 100, (False, "not in an input box"), "multiline"),
    Case("claude-working", 100, (False, WORKING), "working"),
    Case("claude-working-reduced-motion", 100, (False, WORKING), "working", reduced_motion=True),
    Case("claude-queued-placeholder", 100, (False, WORKING), "queued"),
    Case("claude-permission-dialog", 100, (False, "not in an input box"), "permission"),
    Case("claude-question-box", 100, (False, "not in an input box"), "question"),
    Case("claude-agents-view", 100, (False, "input not empty"), "agents"),
    Case("claude-narrow", 44, (False, "pane too narrow for the wake line"), "idle_narrow"),
    # a person who turned colour off (https://no-color.org): the same screens with no SGR colour at all
    Case("claude-empty-prompt-no-color", 100, (True, None), "idle", env=(("NO_COLOR", "1"),)),
    Case("claude-working-no-color", 100, (False, WORKING), "working", env=(("NO_COLOR", "1"),)),
    # prompt suggestions on (issue 11 follow-up): a fresh session's empty prompt shows ``Try "…"`` in grey;
    # a draft moved home (Home) looks the same but for the dim; with colour off the two cannot be told
    # apart and the wake refuses (docs/agents.md)
    Case("claude-try-placeholder", 100, (True, None), "idle", env=(SUGGEST,)),
    Case("claude-try-placeholder-no-color", 100, (False, "input not empty"), "idle",
         env=(SUGGEST, ("NO_COLOR", "1"))),
    Case("claude-draft-home", 100, (False, "input not empty"), "draft_home", env=(SUGGEST,)),
    Case("claude-draft-home-no-color", 100, (False, "input not empty"), "draft_home",
         env=(SUGGEST, ("NO_COLOR", "1"))),
    # and after a second turn, the model's suggested next prompt, drawn in the placeholder's place
    Case("claude-suggestion-after-turn", 100, (True, None), "suggested", env=(SUGGEST,)),
]  # fmt: skip


def path_of(case: Case) -> str:
    return os.path.join(HERE, f"{case.name}.capture")


# ------------------------------------------------------------------------------------------ normalising

# the fresh session's placeholder picks one of eight examples at random: written as the first
_TRY = re.compile(r'(?<=^❯\u00a0Try ")[^"]+(?=" *$)')
_SPINNER = re.compile(r"^[·✢✳✶✻✽*] Working…")
_TOOL_ROW = re.compile(r"^[● ] \w+\(")
# Claude Code 2.1.197's words for a finished turn ("✻ Churned for 0s"), one picked at random.
_DONE = re.compile(r"(?<=✻ )(?:Baked|Brewed|Churned|Cogitated|Cooked|Crunched|Sautéed|Worked)(?= for )")
SPIN_GLYPH = "✻"
# The agents view's row for this session ends in its age ("0s", "1s" on a loaded machine, "1m" later).
_AGE = re.compile(r" +\d+[smh](?= *$)")


def normalise(raw: str) -> str:
    """A capture with only what must vary between two runs made fixed (the module text says what), its
    SGR codes rewritten canonically: per cell its visible style, a reset at the end of each row. The
    drawn cursor block blinks after a turn: a blank cell under the cursor is unstyled."""
    return cap.normalised(raw, _fix_row, blank_cursor=True)


def _fix_row(row: list[cap.Cell], frame: str) -> None:
    cap.sub(row, _DONE, lambda t: "Worked")
    cap.sub(row, _TRY, lambda t: "fix lint errors")
    text = "".join(ch for ch, _st in row)
    if _SPINNER.match(text):
        row[0] = (SPIN_GLYPH, ())
        row[1:] = [(ch, ()) for ch, _st in row[1:]]  # the verb shimmers: its colours are frames
    elif _TOOL_ROW.match(text):
        row[0] = ("●", ())  # the running call's dot blinks (and its colour with it)
    elif "current session" in text and (age := _AGE.search(text)):
        # the age is written as 0s, in its own cells' style, right-aligned where it stood
        pad, unit = row[age.start()][1], row[age.end() - 1][1]
        row[age.start() : age.end()] = [(" ", pad)] * (age.end() - age.start() - 2) + [
            ("0", unit),
            ("s", unit),
        ]


# ------------------------------------------------------------------------------------ reaching a state


def idle(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    return lambda t: "? for shortcuts" in t and "/effort" not in t


def first_seconds(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    return lambda t: "? for shortcuts" in t and "● high · /effort" in t


def idle_narrow(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    return idle(c, m)


def after_turn(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    m.add(standin.text("The build is green on main."))
    c.submit("how is the build?")
    return lambda t: "The build is green on main." in t and idle(c, m)(t)


def draft(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "fix the flaky test")
    return lambda t: "❯\u00a0fix the flaky test" in t


# the request Claude Code sends for a suggested next prompt (after the second turn) starts with this
SUGGESTION_MODE = "[SUGGESTION MODE"


def suggested(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    m.add(standin.text("The build is green on main.", when="how is the build"),
          standin.text("The tests pass too.", when="and the tests"),
          standin.text("run the linter", when=SUGGESTION_MODE))  # fmt: skip
    c.submit("how is the build?")
    kit.wait_for(lambda: "The build is green on main." in c.text(), timeout=30, what="the first turn")
    c.wait_idle()
    c.submit("and the tests?")
    return lambda t: "The tests pass too." in t and "❯\u00a0run the linter" in t.splitlines()


def draft_home(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "fix the flaky test")
    kit.wait_for(lambda: "fix the flaky test" in c.text(), timeout=10, what="the draft")
    c.panes.keys(c.pane, "Home")
    return lambda t: "❯\u00a0fix the flaky test" in t and parse_capture(c.raw())[1] == 2  # cursor home


def multiline(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    c.panes.type(c.pane, "first line of a draft")
    kit.wait_for(lambda: "first line of a draft" in c.text(), timeout=10, what="the first line")
    c.panes.keys(c.pane, "\\", "Enter")
    c.panes.type(c.pane, "and its second line")
    return lambda t: "and its second line" in t


def working(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    m.add(standin.sleep(60))
    c.submit("run the slow job")
    return lambda t: "ctrl+b to run in background" in t and "esc to interrupt" in t and "/effort" not in t


def queued(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    busy = working(c, m)
    kit.wait_for(lambda: busy(c.text()), timeout=30, what="the working turn")
    c.submit("and then this")
    return lambda t: "Press up to edit queued messages" in t and busy(t)


def permission(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    m.add(standin.bash("touch notes.txt", description="Make the notes file"))
    c.submit("make a notes file")
    return lambda t: "Do you want to proceed?" in t and "Esc to cancel" in t


def question(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    m.add(standin.tool("AskUserQuestion", QUESTION))
    c.submit("rebase my branch")
    return lambda t: "Which branch should I rebase onto?" in t and "Chat about this" in t


def agents(c: kit.Claude, m: standin.StandIn) -> Callable[[str], bool]:
    c.panes.keys(c.pane, "Left")
    return lambda t: "describe a task for a new session" in t


REACH: dict[str, Callable[[kit.Claude, standin.StandIn], Callable[[str], bool]]] = {
    f.__name__: f for f in (idle, first_seconds, idle_narrow, after_turn, draft, draft_home, multiline,
                            working, queued, permission, question, agents, suggested)
}  # fmt: skip


def _open(case: Case, root: str, panes: kit.Panes, model: standin.StandIn) -> kit.Claude:
    """A session with its own HOME under ``root``, at its first prompt (but for ``first_seconds``)."""
    home = kit.ClaudeHome(os.path.join(root, "h"), reduced_motion=case.reduced_motion, settings=SETTINGS)
    c = kit.Claude(panes, home, model, os.path.join(root, "p"), extra_env=dict(case.env))
    if case.reach != "first_seconds":
        kit.settled(c.raw, lambda r: idle(c, model)(kit.plain(r)), 40, f"{case.name}: the first prompt")
    return c


CLAUDE = cap.Tui(
    product="Claude Code", module="tests.realagent.screens", model=lambda: standin.StandIn().start(),
    open=_open, reach=REACH, normalise=normalise, verdict=kit.verdict, pin=kit.pin, calm_s=0.6,
)  # fmt: skip


def main(argv: list[str]) -> int:
    """Rewrite the stored captures (all, or the names given)."""
    return cap.rewrite(CLAUDE, CASES, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
