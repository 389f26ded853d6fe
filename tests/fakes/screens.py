"""Scripted screen captures for the free-prompt table (behaviour 3.3): the scripted Claude-like screen
(``sotd.demo.scripted_agent``) drawn in a real tmux pane on a private server and captured with the exact call the
wake makes (``capture-pane -e -p`` then the cursor, in one tmux command). Only for the shapes the real
Claude Code (``tests/realagent/screens.py``) does not draw; each case says why.

``CASES`` names each screen, how to draw it, the pane's width, and the verdict the wake must reach.
``python -m tests.fakes.screens`` (re)writes ``tests/fixtures/screens/<name>.capture``: tmux's output
byte for byte. ``tests/unit/test_prompt_captures.py`` tables them; the live test in
``tests/integration/test_prompt_captures_live.py`` captures again and checks the stored bytes still match.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import NamedTuple

from sotd.terminal.prompt import is_free, screen_from_capture
from sotd.terminal.tmux import Tmux, capture_argv, parse_capture

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "screens")
HEIGHT = 30


class Case(NamedTuple):
    name: str
    args: tuple[str, ...]
    width: int
    verdict: tuple[bool, str | None]
    scripted_because: str  # why the real Claude Code's capture (tests/realagent/screens.py) cannot stand here


# The real TUI's captures (tests/realagent/screens.py, Claude Code at scripts/claude-code.pin) stand for the
# empty prompt, a draft, a permission dialog and a narrow pane; these scripted screens stay only for the
# shapes the pinned release does not draw, each saying why.
CASES = [
    Case("dim-suggestion", ("--suggest", 'Try "fix the tests"'), 100, (True, None),
         "2.1.197 draws its placeholders in 256-colour grey, never SGR dim; the dim rule of 3.3 is kept"),
    Case("named-session-border", ("--named", "fix-build"), 100, (True, None),
         "2.1.197 was not seen drawing a labelled top border; the border rule of 3.3 is kept"),
    Case("agents-panel-on-main", ("--panel",), 100, (True, None),
         "2.1.197 shows its agents as a full-screen view (claude-agents-view), not a panel under the box"),
    Case("numbered-menu", ("--mode", "menu"), 100, (False, "not in an input box"),
         "a numbered menu drawn as a box of its own; 2.1.197's menus are claude-permission-dialog and claude-question-box"),
    Case("question-input", ("--mode", "question"), 100, (False, "input not empty"),
         "the answer box's 'press 1-3 or type your answer' hint; not reached with the stand-in model"),
    Case("glyph-ascii-space", ("--mode", "ascii"), 100, (False, "input not empty"),
         "the glyph followed by an ASCII space, which Claude Code never draws (it draws an NBSP): a guard"),
    Case("agents-panel-on-helper", ("--panel", "--panel-focus", "helper-1"), 100,
         (False, "the panel's dot is not on main"), "as agents-panel-on-main"),
]  # fmt: skip


def path_of(case: Case) -> str:
    return os.path.join(HERE, f"{case.name}.capture")


def verdict_of(raw: str) -> tuple[bool, str | None]:
    return is_free(screen_from_capture(*parse_capture(raw)), "claude")


def capture(case: Case, work: str) -> str:
    """Draw ``case`` in a fresh private tmux server of its width; tmux's raw answer to the wake's capture."""
    short = tempfile.mkdtemp(prefix="sotd-scr-", dir="/tmp")  # a socket path fits sun_path's 108 bytes
    sock = os.path.join(short, "s")
    t = Tmux(sock, session="screens", size=(case.width, HEIGHT))
    try:
        env = {"TERM": "xterm-256color", "LANG": "C.UTF-8"}
        pane = t.new_window(
            case.name[:20], work, env, [sys.executable, "-m", "sotd.demo.scripted_agent", *case.args]
        )
        deadline = time.monotonic() + 15
        raw = ""
        while time.monotonic() < deadline:
            raw = t.run(capture_argv(sock, pane))
            frame, _x, _y, width = parse_capture(raw)
            rules = [ln for ln in frame.splitlines() if ln and set(ln) == {"─"}]
            drawn = "❯" in frame or "Allow this action" in frame
            if drawn and width == case.width and all(len(r) == case.width for r in rules):
                time.sleep(0.3)  # one more look: the frame is settled, not mid-draw
                again = t.run(capture_argv(sock, pane))
                if again == raw:
                    return raw
            time.sleep(0.1)
        raise AssertionError(f"{case.name}: no settled frame within 15 s; last capture {raw!r}")
    finally:
        t.kill_server()
        shutil.rmtree(short, ignore_errors=True)


def main() -> int:
    os.makedirs(HERE, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sotd-screens-", dir="/tmp")
    try:
        for case in CASES:
            raw = capture(case, work)
            got = verdict_of(raw)
            if got != case.verdict:
                print(f"{case.name}: verdict {got}, want {case.verdict}", file=sys.stderr)
                return 1
            with open(path_of(case), "w", encoding="utf-8", newline="") as f:
                f.write(raw)
            print(f"{case.name}: {got}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
