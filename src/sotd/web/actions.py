"""``sotd/web/actions.py``: the three things a page may do (issue 30 item 2), each the CLI's own verb.

A send is ``sotd comm send @<to> <text>``, a spawn ``sotd comm spawn <path> [--name N] [--agent A]
[--command 'argv words']``, a despawn ``sotd comm despawn <id>``, each run as a child of this process with
its environment (so a send goes as this person's own handle, and its answer is exactly the CLI's line:
``filed -> @h`` or ``FAILED -> @h: <reason>``). The form's fields are checked first (``*_argv``, pure):
a value that the verb would read as an option is refused, never passed.
Guarantee: nothing writes but these verbs; what they print reaches the page inert. What would break it:
building a verb's argv from a form field that starts with ``-`` (an option the page did not mean).
"""

from __future__ import annotations

import subprocess
import sys

from sotd import handles
from sotd.text import inert

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

AGENTS = ("claude", "codex", "none")
TEXT_MAX = 64 * 1024
SEND_TIMEOUT_S = 30.0
SPAWN_TIMEOUT_S = 180.0


class FormRefused(Exception):
    """A form the page may not run: its sentence is shown as the answer."""


def _field(form: dict[str, Any], key: str) -> str:
    value = form.get(key, "")
    if not isinstance(value, str):
        raise FormRefused(f"{key}: not text")
    return value


def send_argv(form: dict[str, Any]) -> list[str]:
    to, text = _field(form, "to").removeprefix("@"), _field(form, "text")
    if not handles.is_valid(to):
        raise FormRefused(f"not a handle: {inert(to)!r}")
    if not text.strip():
        raise FormRefused("nothing to send: the message is empty")
    if len(text) > TEXT_MAX:
        raise FormRefused(f"the message is over {TEXT_MAX} characters")
    return ["send", f"@{to}", text]


def spawn_argv(form: dict[str, Any]) -> list[str]:
    path, name = _field(form, "path"), _field(form, "name").removeprefix("@")
    agent, command = _field(form, "agent") or "claude", _field(form, "command")
    if not path or path.startswith("-"):
        raise FormRefused("give the project's folder (a path, not an option)")
    if agent not in AGENTS:
        raise FormRefused(f"agent: one of {', '.join(AGENTS)}")
    argv = ["spawn", path, "--agent", agent]
    if name:
        if not handles.is_valid(name):
            raise FormRefused(f"not a handle: {inert(name)!r}")
        argv += ["--name", name]
    if command:
        argv += ["--command", command]
    return argv


def despawn_argv(form: dict[str, Any]) -> list[str]:
    target = _field(form, "id")
    if not target or target.startswith("-") or not target.isprintable():
        raise FormRefused("give the row's id, slug or handle")
    return ["despawn", target]


ARGV = {
    "send": (send_argv, SEND_TIMEOUT_S),
    "spawn": (spawn_argv, SPAWN_TIMEOUT_S),
    "despawn": (despawn_argv, SEND_TIMEOUT_S),
}


def run(action: str, form: dict[str, Any], environ: dict[str, str]) -> tuple[str, bool]:
    """Run one action: (what the verb printed, stdout then stderr, inert; whether it exited 0)."""
    plan, timeout = ARGV[action]
    try:
        argv = plan(form)
    except FormRefused as e:
        return str(e), False
    try:
        p = subprocess.run(
            [sys.executable, "-m", "sotd", "comm", *argv],
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return inert(f"sotd comm {argv[0]} did not finish: {e}"), False
    text = (p.stdout + p.stderr).decode("utf-8", "replace").rstrip("\n")
    return inert(text, lines=True), p.returncode == 0
