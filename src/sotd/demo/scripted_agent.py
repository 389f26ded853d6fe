"""A scripted stand-in for Claude Code's terminal screen: the agent of the demo and of every wake test.

It lives in the package because ``sotd.demo`` runs it at run time; ``tests/fakes/fake_claude.py`` (the
terminal-layer tests' fake) is a shim that runs this module, so the screen is defined once.

It draws with raw ANSI: a header, the transcript, a spinner while "working", an input box between ``─``
rules with ``❯`` + NBSP and the cursor after it (optionally a dim suggestion, a named-session top border,
an agents panel below), and reads keys in raw mode. A submitted line is appended to ``--log`` as a JSON
line; if it is the wake line and ``--on-wake`` is given, that shell command runs after the "work" and its
output is printed above the box. ``--mode`` draws a draft, a permission dialog or a numbered menu instead
of an empty box (``question``: an answer box whose hint follows the glyph; ``ascii``: the glyph with an
ASCII space), so tests can show that the wake refuses them; ``--deaf`` ignores typed keys (focus has
moved away from the box between the last check and the typing). ``--at-start`` runs a shell command before
the first frame, as Claude Code's session-start hook runs ``comm-join.sh``.

Busy and idle (issue #5): ``--alternate IDLE,BUSY`` makes the agent start work on its own: after IDLE
seconds at an empty prompt it is busy for BUSY seconds (a spinner above the box, keys ignored, a line added
to the transcript at the end), then idle again. It never starts while the box holds text (a draft, or a
wake line waiting for its Enter): the idle clock restarts when the box is emptied. ``--flash SECS`` (< 1.5)
makes every busy spell (its own or a submitted line's ``--work``) hide its spinner for SECS after every
``--flash-gap`` seconds of spinner, so the screen reads as a free, still prompt for a moment while the agent
is busy; a spell always ends on spinner. ``--log-keys`` logs every key received with the phase it arrived
in (``idle``, ``busy`` or ``flash``) and every phase change; ``--times`` adds a wall-clock ``t`` to every
logged record (the wake benchmark's clock).

    python -m sotd.demo.scripted_agent [--mode idle|draft|dialog|menu|question|ascii] [--suggest TEXT] [--named LABEL]
                              [--panel] [--panel-focus main|helper-1]
                              [--work SECS] [--on-wake CMD] [--log FILE] [--deaf] [--at-start CMD]
                              [--alternate IDLE,BUSY] [--flash SECS] [--flash-gap SECS] [--log-keys]
                              [--times]
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import select
import shutil
import subprocess
import sys
import termios
import time
import tty

WAKE_LINE = "[sot-comm] you have mail: run comm-poll.sh"
NBSP = "\u00a0"
SPIN = "✻✶✳✢"


class Fake:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode = args.mode
        self.input = "hello" if args.mode == "draft" else ""
        self.transcript: list[str] = []
        self.working_since: float | None = None
        self.work_len = float(args.work)
        self.pending: str | None = None
        self.idle_since = time.monotonic()
        self.chores = 0
        self.shown_phase = "idle"
        self.out = sys.stdout
        self.last: tuple[list[str], tuple[int, int]] | None = None

    # ------------------------------------------------------------------------------------- busy / idle

    def phase(self, now: float | None = None) -> str:
        """``idle``, ``busy`` (spinner shown) or ``flash`` (busy, spinner hidden: the box reads free)."""
        if self.working_since is None:
            return "idle"
        flash, gap = self.args.flash, self.args.flash_gap
        if flash <= 0:
            return "busy"
        t = (time.monotonic() if now is None else now) - self.working_since
        pos = t % (gap + flash)
        return "flash" if pos >= gap and t < self.work_len - gap else "busy"

    def start_work(self, secs: float, line: str | None) -> None:
        self.pending = line
        self.work_len = secs
        self.working_since = time.monotonic()

    def step(self) -> None:
        """Advance the clocks: finish a spell that is over; start one of our own when it is due."""
        now = time.monotonic()
        if self.working_since is not None and now - self.working_since >= self.work_len:
            self.finish()
        elif self.working_since is None and self.args.alternate and self.mode == "idle":
            idle, busy = self.args.alternate
            if self.input:
                self.idle_since = now  # never start with text in the box; count again once it is empty
            elif now - self.idle_since >= idle:
                self.chores += 1
                self.start_work(busy, None)
        ph = self.phase()
        if ph != self.shown_phase:
            self.shown_phase = ph
            if self.args.log_keys:
                self.log("phase", ph)

    # ----------------------------------------------------------------------------------------- drawing

    def size(self) -> tuple[int, int]:
        s = shutil.get_terminal_size((80, 24))
        return s.columns, s.lines

    def frame(self) -> tuple[list[str], tuple[int, int]]:
        cols, rows = self.size()
        rule = "─" * cols
        top = rule
        if self.args.named:
            left = "─" * 3 + " " + self.args.named + " "
            top = left + "─" * max(3, cols - len(left))
        head = ["✻ Fake Claude Code", ""]
        if self.mode == "dialog":
            body = [
                "  Bash command",
                "    rm -rf build",
                "  Allow this action? (y/n)",
                "❯ 1. Yes",
                "  2. No",
            ]
            lines = head + self.transcript[-(rows - len(head) - len(body) - 1) :] + body
            return lines, (26, lines.index("  Allow this action? (y/n)"))
        if self.mode == "menu":
            body = [rule, "  Do you want to proceed?", "❯ 1. Yes", "  2. No, tell me what to do", rule]
            lines = head + self.transcript[-(rows - len(head) - len(body) - 1) :] + body
            return lines, (2, len(lines) - 3)
        spinner: list[str] = []
        if self.working_since is not None and self.phase() == "busy":
            t = time.monotonic() - self.working_since
            spinner = [f"{SPIN[int(t * 10) % len(SPIN)]} Working… ({t:.1f}s)", ""]
        tail = ["  ? for shortcuts"]
        if self.args.panel:
            focus = self.args.panel_focus
            tail += [
                f"  {'●' if focus == 'main' else '◯'} main",
                f"  {'●' if focus == 'helper-1' else '◯'} helper-1",
            ]
        room = rows - len(head) - len(spinner) - 3 - len(tail) - 1
        lines = head + self.transcript[-room:] if room > 0 else list(head)
        lines += spinner
        prompt = f"❯{NBSP}{self.input}"
        if self.mode == "question":  # an AskUserQuestion answer box: the hint sits where input would
            prompt = "❯ press 1-3 or type your answer"
        elif self.mode == "ascii":  # the glyph followed by an ASCII space (not Claude Code's NBSP)
            prompt = "❯ "
        if not self.input and self.args.suggest:
            prompt += f"\x1b[2m{self.args.suggest}\x1b[22m"
        lines += [top, prompt, rule, *tail]
        return lines, (2 + len(self.input), len(lines) - 2 - len(tail))  # after "❯ " in every mode

    def draw(self) -> None:
        # Only on change, and overwriting in place (no clear): a capture never sees a blank interim frame.
        frame = self.frame()
        if frame == self.last:
            return
        self.last = frame
        lines, (x, y) = frame
        body = "\x1b[K\r\n".join(lines)
        self.out.write(f"\x1b[?25h\x1b[H{body}\x1b[K\x1b[J\x1b[{y + 1};{x + 1}H")
        self.out.flush()

    # -------------------------------------------------------------------------------------------- keys

    def log(self, event: str, text: str, **more: str) -> None:
        if self.args.log:
            rec: dict[str, object] = {"event": event, "text": text, **more}
            if self.args.times:
                rec["t"] = time.time()
            with open(self.args.log, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")

    def submit(self) -> None:
        line, self.input = self.input, ""
        self.log("line", line)
        self.transcript += [f"> {line}", ""]
        self.start_work(self.args.work, line)

    def finish(self) -> None:
        line, self.pending, self.working_since = self.pending, None, None
        self.idle_since = time.monotonic()
        if line is None:
            self.transcript += [f"● finished chore {self.chores}", ""]
            return
        if line == WAKE_LINE and self.args.on_wake:
            p = subprocess.run(  # noqa: S602 (the demo's own scripted command)
                self.args.on_wake,
                shell=True,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            out = (p.stdout + p.stderr).rstrip("\n")
            self.transcript += ["● Bash(" + self.args.on_wake + ")", *("  ⎿ " + s for s in out.splitlines())]
            self.log("ran", out)
        else:
            self.transcript.append(f"● ok: {line}")
        self.transcript.append("")

    def key(self, text: str) -> bool:
        """Feed decoded input; False to quit."""
        i = 0
        while i < len(text):
            ch = text[i]
            i += 1
            if self.args.log_keys:
                self.log("key", ch, phase=self.phase())
            if ch == "\x03":
                return False
            if ch == "\x1b":  # skip an escape sequence (arrows, focus events)
                if i < len(text) and text[i] == "[":
                    i += 1
                    while i < len(text) and not ("\x40" <= text[i] <= "\x7e"):
                        i += 1
                    i += 1
                continue
            if self.mode in ("dialog", "menu", "question", "ascii"):
                self.log("key", ch)
                if ch in "1y":
                    self.mode = "idle"
                continue
            if self.working_since is not None:
                self.log("key-while-working", ch)
                continue
            if self.args.deaf:
                self.log("key-ignored", ch)
            elif ch in "\r\n":
                self.submit()
            elif ch in "\x7f\x08":
                self.input = self.input[:-1]
            elif ch >= " ":
                self.input += ch
        return True


def _pair(text: str) -> tuple[float, float]:
    a, sep, b = text.partition(",")
    if not sep:
        raise argparse.ArgumentTypeError("want IDLE,BUSY (seconds)")
    return float(a), float(b)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--mode", choices=("idle", "draft", "dialog", "menu", "question", "ascii"), default="idle"
    )
    ap.add_argument("--suggest", default="")
    ap.add_argument("--named", default="")
    ap.add_argument("--panel", action="store_true")
    ap.add_argument("--panel-focus", default="main", help="the agents panel line that carries the dot")
    ap.add_argument("--work", type=float, default=0.5)
    ap.add_argument("--on-wake", default="")
    ap.add_argument("--log", default="")
    ap.add_argument("--deaf", action="store_true", help="typed text never shows (focus is elsewhere)")
    ap.add_argument("--at-start", default="", help="a shell command run before the first frame")
    ap.add_argument(
        "--alternate",
        type=_pair,
        default=None,
        metavar="IDLE,BUSY",
        help="start work on its own: IDLE s at an empty prompt, then BUSY s busy, and again",
    )
    ap.add_argument("--flash", type=float, default=0.0, help="while busy, hide the spinner for SECS")
    ap.add_argument("--flash-gap", type=float, default=0.6, help="spinner seconds between two flashes")
    ap.add_argument("--log-keys", action="store_true", help="log every key with its phase, and phase changes")
    ap.add_argument("--times", action="store_true", help="a wall-clock 't' in every logged record")
    args = ap.parse_args(argv)
    fake = Fake(args)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fake.log("start", args.mode)
    if args.at_start:
        p = subprocess.run(  # noqa: S602 (the demo's own scripted command)
            args.at_start,
            shell=True,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        fake.transcript += [
            "● Bash(" + args.at_start + ")",
            *("  ⎿ " + s for s in (p.stdout + p.stderr).splitlines()),
            "",
        ]
        fake.log("at-start", (p.stdout + p.stderr).rstrip("\n") + f" (exit {p.returncode})")
    try:
        fake.draw()
        while True:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                data = os.read(fd, 4096)
                if not data:
                    return 0
                if not fake.key(decoder.decode(data)):
                    return 0
            fake.step()
            fake.draw()
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    sys.exit(main())
