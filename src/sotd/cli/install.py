"""``sotd comm install``: put the wrappers, the agent hooks and VERSION into ``$SOT_COMM_HOME/bin``.

Behaviour 1.12 and seed 000 "Upgrading to 0.7.0". Each wrapper is a two-line shell script that execs this
installation's own ``sotd`` (the venv's console script, which runs the venv's interpreter directly, never
a shim). Every file is written to a temp and renamed into place, so a session never runs half a script.
What was installed is recorded in ``bin/.installed``; retired scripts are removed by name only.
``comm-relay.sh`` is the one script that is not such a wrapper: its ``send`` runs ``sotd.cli.relay`` with
this installation's interpreter, its ``bridge`` is the retired verb's sleeping stub. Without
``--agent-settings`` the hook registrations are printed: Claude Code's settings block and Codex's
``hooks.json`` block (``CODEX_EVENTS``).
"""

from __future__ import annotations

import json
import os
import sys

from sotd import __version__
from sotd.cli.common import err, out
from sotd.errors import SotdError, UsageError
from sotd.formats.layout import Layout

WRAPPERS = {
    "comm-send.sh": "send",
    "comm-poll.sh": "poll",
    "comm-join.sh": "join",
    "comm-leave.sh": "leave",
    "comm-list.sh": "list",
    "comm-status.sh": "status",
    "comm-context.sh": "context",
    "comm-spawn.sh": "spawn",
    "comm-despawn.sh": "despawn",
}
HOOKS = {
    "comm-status-idle.sh": "stop",
    "comm-status-prompt.sh": "prompt",
    "comm-status-pretool.sh": "pre-tool",
    "comm-status-posttool.sh": "post-tool",
    "comm-status-permission.sh": "permission",
}
RETIRED = (
    "comm-listen.sh",
    "comm-watch.sh",
    "comm-wake.sh",
    "codex-watch.sh",
    "bus.sh",
    "comm-post-compact.sh",
    "comm-post-clear.sh",
    "comm-session-skill.sh",
    "comm-self-audit.sh",
    "comm-registry-lock-clear.sh",
)
RECORD = ".installed"
# Claude Code hook events -> (matcher or None, our script)
CLAUDE_EVENTS = (
    ("Stop", None, "comm-status-idle.sh"),
    ("UserPromptSubmit", None, "comm-status-prompt.sh"),
    ("PreToolUse", "AskUserQuestion", "comm-status-pretool.sh"),
    ("PostToolUse", "*", "comm-status-posttool.sh"),
    ("PermissionRequest", "*", "comm-status-permission.sh"),
)
# Codex lifecycle hooks (hooks.json, the same shape as Claude Code's "hooks"): the turn end, the prompt, and
# its approval prompts. Codex has no AskUserQuestion, so no tool hooks.
CODEX_EVENTS = (
    ("Stop", None, "comm-status-idle.sh"),
    ("UserPromptSubmit", None, "comm-status-prompt.sh"),
    ("PermissionRequest", "*", "comm-status-permission.sh"),
)


def sotd_executable() -> str:
    """This installation's ``sotd``: the console script beside the running interpreter."""
    cand = os.path.join(os.path.dirname(sys.executable), "sotd")
    if os.access(cand, os.X_OK):
        return cand
    found = os.environ.get("SOTD_BIN", "")
    if found:
        return found
    raise SotdError("sotd comm install: cannot find this installation's sotd beside " + sys.executable)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def wrapper_text(sotd: str, name: str, argv: str) -> str:
    return (
        "#!/bin/sh\n"
        f"# sot-comm {__version__}: {name} is `sotd {argv}`; installed by `sotd comm install`.\n"
        f'SOT_COMM_PROG={name} exec {_q(sotd)} {argv} "$@"\n'
    )


def relay_text(sotd: str) -> str:
    """comm-relay.sh: ``send`` is ``sotd comm relay send`` (``sotd.cli.relay``); ``bridge`` is the sleeping
    stub."""
    return (
        "#!/bin/sh\n"
        f"# sot-comm {__version__}: comm-relay.sh. `send` is sotd comm relay; `bridge` was retired in 0.6.6.\n"
        'case "${1:-}" in\n'
        "  bridge)\n"
        "    echo 'comm-relay: bridge retired in 0.6.6; this leftover loop now sleeps (a reboot clears it)' >&2\n"
        "    while :; do sleep 3600; done ;;\n"
        f'  send) SOT_COMM_PROG=comm-relay.sh exec {_q(sotd)} comm relay "$@" ;;\n'
        '  *) echo \'usage: comm-relay.sh send @to "msg" | --all "msg" | bridge\' >&2; exit 1 ;;\n'
        "esac\n"
    )


def _write(path: str, text: str, mode: int) -> None:
    from sotd.formats import atomic

    atomic.write_atomic(path, text.encode(), mode=mode)
    os.chmod(path, mode)


def _version_stamp() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    head = os.path.join(here, "..", "..", "..", ".git", "HEAD")
    commit = "unknown"
    try:
        with open(head) as f:
            ref = f.read().strip()
        if ref.startswith("ref: "):
            with open(os.path.join(os.path.dirname(head), ref[5:])) as f:
                commit = f.read().strip()
        else:
            commit = ref
    except OSError:
        pass
    return f"{__version__} {commit}\n"


def install(lay: Layout, sotd: str) -> tuple[list[str], list[str]]:
    """Write every script; return (installed names, removed names)."""
    from sotd.formats.layout import ensure_home

    for w in ensure_home(lay):
        err(w)
    os.makedirs(lay.bin_dir, mode=0o755, exist_ok=True)
    previous = _read_record(lay)
    names: list[str] = []
    for name, verb in WRAPPERS.items():
        _write(os.path.join(lay.bin_dir, name), wrapper_text(sotd, name, f"comm {verb}"), 0o755)
        names.append(name)
    for name, event in HOOKS.items():
        _write(os.path.join(lay.bin_dir, name), wrapper_text(sotd, name, f"comm hook {event}"), 0o755)
        names.append(name)
    _write(os.path.join(lay.bin_dir, "comm-relay.sh"), relay_text(sotd), 0o755)
    names.append("comm-relay.sh")
    _write(lay.version_file, _version_stamp(), 0o644)
    removed = []
    for name in sorted(set(RETIRED) | (previous - set(names))):
        path = os.path.join(lay.bin_dir, name)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(name)
    _write(os.path.join(lay.bin_dir, RECORD), "".join(n + "\n" for n in names), 0o644)
    return names, removed


def _read_record(lay: Layout) -> set[str]:
    try:
        with open(os.path.join(lay.bin_dir, RECORD)) as f:
            names = {line.strip() for line in f}
    except OSError:
        return set()
    # a recorded name is removed only if it is a plain file name in bin/
    return {n for n in names if n and "/" not in n and n not in (".", "..")}


def merge_claude_settings(
    doc: dict[str, object],
    bin_dir: str,
    events: tuple[tuple[str, str | None, str], ...] = CLAUDE_EVENTS,
) -> bool:
    """Add our hook entries to a Claude Code settings document (or, with ``CODEX_EVENTS``, a Codex
    ``hooks.json``: the same shape); True when anything changed."""
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SotdError('the settings file\'s "hooks" is not an object; nothing was changed')
    changed = False
    for event, matcher, script in events:
        command = os.path.join(bin_dir, script)
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SotdError(f'the settings file\'s hooks."{event}" is not a list; nothing was changed')
        present = any(
            isinstance(g, dict)
            and isinstance(g.get("hooks"), list)
            and any(isinstance(h, dict) and h.get("command") == command for h in g["hooks"])
            for g in groups
        )
        if present:
            continue
        group: dict[str, object] = {"hooks": [{"type": "command", "command": command}]}
        if matcher is not None:
            group = {"matcher": matcher, **group}
        groups.append(group)
        changed = True
    return changed


def write_claude_settings(path: str, bin_dir: str) -> bool:
    from sotd.formats import atomic

    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
    try:
        doc = json.loads(data) if data.strip() else {}
    except ValueError as e:
        raise SotdError(f"{path} is not valid JSON ({e}); nothing was changed") from None
    if not isinstance(doc, dict):
        raise SotdError(f"{path} does not hold a JSON object; nothing was changed")
    if not merge_claude_settings(doc, bin_dir):
        return False
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    mode = 0o600
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        pass
    atomic.write_atomic(path, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(), mode=mode)
    return True


def instructions(bin_dir: str) -> list[str]:
    lines = [
        "",
        "Register the hooks with Claude Code (~/.claude/settings.json), or re-run with --agent-settings:",
    ]
    snippet: dict[str, object] = {}
    merge_claude_settings(snippet, bin_dir)
    lines += ["  " + ln for ln in json.dumps(snippet, indent=2).splitlines()]
    codex: dict[str, object] = {}
    merge_claude_settings(codex, bin_dir, CODEX_EVENTS)
    lines += [
        "",
        "Register them with Codex in ~/.codex/hooks.json (or a project's .codex/hooks.json), then trust them",
        "in Codex with /hooks:",
    ]
    lines += ["  " + ln for ln in json.dumps(codex, indent=2).splitlines()]
    lines += [
        "A Codex without lifecycle hooks reads its mail only when it polls: tell it so in AGENTS.md",
        f"('run {bin_dir}/comm-poll.sh after each task').",
    ]
    return lines


def run(argv: list[str]) -> int:
    settings: str | None = None
    for a in argv:
        if a == "--agent-settings":
            settings = os.path.join(os.path.expanduser("~"), ".claude", "settings.json")
        elif a.startswith("--agent-settings="):
            settings = a.split("=", 1)[1]
        elif a in ("-h", "--help"):
            out("usage: sotd comm install [--agent-settings[=PATH]]")
            return 0
        else:
            raise UsageError(f"sotd comm install: unknown argument '{a}' (see --help)")
    lay = Layout.from_env()
    names, removed = install(lay, sotd_executable())
    out(f"Installed sot-comm {__version__} into {lay.bin_dir}: {', '.join(names)}")
    if removed:
        out(f"Removed retired scripts: {', '.join(removed)}")
    if settings:
        if write_claude_settings(settings, lay.bin_dir):
            out(f"Registered the hooks in {settings}")
        else:
            out(f"The hooks were already registered in {settings}")
    else:
        for line in instructions(lay.bin_dir):
            out(line)
    return 0
