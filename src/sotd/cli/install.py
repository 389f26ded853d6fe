"""``sotd comm install`` / ``sotd comm uninstall``: the wrappers, the agent hooks, Claude Code's settings
and the sot-comm skill.

Behaviour 1.12 and seed 000 "Upgrading to 0.7.0"; issue 11 part 2 items 2, 7 and 8 (docs/agents.md,
"Install"). Each wrapper is a short shell script that execs the ``sotd`` recorded at install (the venv's
console script, which runs the venv's interpreter directly, never a shim); when that ``sotd`` is gone a
wrapper says so and how to put it back, and a hook says so to the session (a ``systemMessage``) and lets
the agent go on. Every file is written to a temp and renamed into place, so a session never runs half a
script. What was installed is recorded in ``bin/.installed`` (the scripts) and ``bin/.installed-settings.json``
(every settings file changed, with its bytes before and exactly what was added, and the skill written), so
``sotd comm uninstall`` takes out exactly that: a settings file nobody changed since is put back byte for
byte. ``comm-relay.sh`` is the one script that is not such a wrapper: its ``send`` runs ``sotd comm relay``,
its ``bridge`` is the retired verb's sleeping stub.

Guarantees of the settings merge (``merge_claude_settings``, pure): everything already in the document is
kept; only missing hook entries and allow rules are added; every command path is shell-quoted; a second
run adds nothing. The file is written through a symlink (its target is replaced, the link stays), keeps its
mode, and a file that is not a JSON object is refused and left untouched. What would break them: writing
the link's own path (it becomes a regular file), a temp created under the process umask and renamed as is
(0644 becomes 0600), or matching our entries by anything but the exact command recorded.
"""

from __future__ import annotations

import json
import os
import sys

from sotd import __version__
from sotd.cli.common import err, out
from sotd.errors import SotdError, UsageError
from sotd.formats.layout import Layout
from sotd.rowargv import ROW_SETTINGS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

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
    "comm-session-start.sh": "start",
}
# The wrappers a session may run with no permission dialog: reading and sending mail and its own
# registration. Spawning and despawning rows start and end agents, so a person still approves those.
ALLOWED = (
    "comm-send.sh",
    "comm-poll.sh",
    "comm-join.sh",
    "comm-leave.sh",
    "comm-list.sh",
    "comm-status.sh",
    "comm-context.sh",
)
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
SETTINGS_RECORD = ".installed-settings.json"
SKILL = "sot-session-start"
SKILL_MARK = "<!-- written by `sotd comm install`; `sotd comm uninstall` removes it -->"
# Claude Code hook events -> (matcher or None, our script)
CLAUDE_EVENTS = (
    ("SessionStart", None, "comm-session-start.sh"),
    ("Stop", None, "comm-status-idle.sh"),
    ("UserPromptSubmit", None, "comm-status-prompt.sh"),
    ("PreToolUse", "AskUserQuestion", "comm-status-pretool.sh"),
    ("PostToolUse", "*", "comm-status-posttool.sh"),
    ("PermissionRequest", "*", "comm-status-permission.sh"),
)
# Codex lifecycle hooks (hooks.json, the same shape as Claude Code's "hooks"): the session's start (the join),
# the turn end, the prompt, and its approval prompts. Codex has no AskUserQuestion, so no tool hooks.
CODEX_EVENTS = (
    ("SessionStart", None, "comm-session-start.sh"),
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


def gone_text(sotd: str) -> str:
    """What a script says when the ``sotd`` it was installed with is gone."""
    return (
        f"sot-comm: the sotd these scripts were installed with ({sotd}) is gone, so sot-comm is off here; "
        "install sotd again and run: sotd comm install"
    )


def direct_entry(sotd: str) -> tuple[str, str] | None:
    """(interpreter, ``sotd/__main__.py``) when ``sotd`` is this installation's own console script, so a
    wrapper can start the interpreter with ``-S`` on the entry itself (issue 17: no ``site``); None for any
    other ``sotd`` (``--sotd=PATH``), which the wrapper then runs as it is."""
    own = os.path.join(os.path.dirname(sys.executable), "sotd")
    if os.path.realpath(sotd) != os.path.realpath(own):
        return None
    import sotd as package

    entry = os.path.join(os.path.dirname(os.path.abspath(package.__file__ or "")), "__main__.py")
    return (sys.executable, entry) if os.path.isfile(entry) else None


def wrapper_text(sotd: str, name: str, argv: str, *, hook: bool = False) -> str:
    """A wrapper: exec the recorded ``sotd`` (this installation's own: its interpreter with ``-S`` on the
    package's entry, ``direct_entry``); when it is gone, say so (a hook: as a ``systemMessage`` on stdout
    and exit 0, so the agent is never failed; a command: on stderr and exit 1)."""
    gone = gone_text(sotd)
    if hook:
        said = f"printf '%s\\n' {_q(json.dumps({'systemMessage': gone}, ensure_ascii=False))}; exit 0"
    else:
        said = f"printf '%s\\n' {_q(name + ': ' + gone)} >&2; exit 1"
    head = (
        "#!/bin/sh\n"
        f"# sot-comm {__version__}: {name} is `sotd {argv}`; installed by `sotd comm install`.\n"
        f"sotd={_q(sotd)}\n"
    )
    direct = direct_entry(sotd)
    if direct is None:
        return head + f'[ -x "$sotd" ] || {{ {said}; }}\nSOT_COMM_PROG={name} exec "$sotd" {argv} "$@"\n'
    python, entry = direct
    return head + (
        f"python={_q(python)} entry={_q(entry)}\n"
        f'[ -x "$sotd" ] && [ -x "$python" ] && [ -f "$entry" ] || {{ {said}; }}\n'
        f'SOT_COMM_PROG={name} exec "$python" -S "$entry" {argv} "$@"\n'
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
    from sotd import fsprim

    fsprim.write_atomic(path, text.encode(), mode=mode)
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
    """Write every script and the rows' settings file; return (installed names, removed names)."""
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
        _write(
            os.path.join(lay.bin_dir, name), wrapper_text(sotd, name, f"comm hook {event}", hook=True), 0o755
        )
        names.append(name)
    _write(os.path.join(lay.bin_dir, "comm-relay.sh"), relay_text(sotd), 0o755)
    names.append("comm-relay.sh")
    _write(os.path.join(lay.bin_dir, ROW_SETTINGS), row_settings_text(lay.bin_dir), 0o644)
    names.append(ROW_SETTINGS)
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


# ------------------------------------------------------------------------------------------ settings (pure)


def hook_command(bin_dir: str, script: str) -> str:
    """The ``command`` of one hook entry: the script's absolute path, shell-quoted (Claude Code runs it
    through a shell, so a path with a space or a quote in it still names one file)."""
    return _q(os.path.join(bin_dir, script))


def allow_rules(bin_dir: str, home: str | None = None) -> list[str]:
    """The ``permissions.allow`` rules for sotd's own wrappers (``ALLOWED``), and nothing else.

    Each wrapper in every form a session types it: the bare name (the wake line and the hook texts give
    that, with ``bin/`` on the PATH), the absolute path, and the ``~/`` path when ``bin/`` is below
    ``home``. ``Bash(<cmd>:*)`` is Claude Code's prefix rule: the command alone or followed by arguments,
    on a word boundary (``comm-poll.shx`` does not match).
    """
    forms: list[str] = []
    for name in ALLOWED:
        full = os.path.join(bin_dir, name)
        forms.append(name)
        forms.append(full)
        if home and home != "/" and full.startswith(home.rstrip("/") + "/"):
            forms.append("~/" + full[len(home.rstrip("/")) + 1 :])
    return [f"Bash({f}:*)" for f in forms]


def _ours(h: object, command: str, legacy: str) -> bool:
    return isinstance(h, dict) and h.get("command") in (command, legacy)


def merge_claude_settings(
    doc: dict[str, object],
    bin_dir: str,
    events: tuple[tuple[str, str | None, str], ...] = CLAUDE_EVENTS,
    allow: list[str] | None = None,
) -> dict[str, list[list[str]]]:
    """Add our hook entries (and the ``allow`` rules, when given) to a Claude Code settings document (or,
    with ``CODEX_EVENTS``, a Codex ``hooks.json``: the same shape). Pure: changes ``doc`` in place and
    returns what it did, for the record uninstall reads: ``hooks`` ([event, matcher or "", command] added),
    ``allow`` ([rule] added), ``requoted`` ([event, old, new]: an entry of an older install whose bare
    path was quoted), ``created`` ([key] of the containers it made: "hooks", "permissions",
    "permissions.allow", "hooks.<event>"). Nothing changed: every list empty."""
    done: dict[str, list[list[str]]] = {"hooks": [], "allow": [], "requoted": [], "created": []}
    if "hooks" not in doc:
        doc["hooks"] = {}
        done["created"].append(["hooks"])
    hooks = doc["hooks"]
    if not isinstance(hooks, dict):
        raise SotdError('the settings file\'s "hooks" is not an object; nothing was changed')
    for event, matcher, script in events:
        command = hook_command(bin_dir, script)
        legacy = os.path.join(bin_dir, script)
        if event not in hooks:
            hooks[event] = []
            done["created"].append([f"hooks.{event}"])
        groups = hooks[event]
        if not isinstance(groups, list):
            raise SotdError(f'the settings file\'s hooks."{event}" is not a list; nothing was changed')
        entries = [
            h
            for g in groups
            if isinstance(g, dict) and isinstance(g.get("hooks"), list)
            for h in g["hooks"]
            if _ours(h, command, legacy)
        ]
        for h in entries:
            if h["command"] == legacy:
                h["command"] = command
                done["requoted"].append([event, legacy, command])
        if entries:
            continue
        group: dict[str, object] = {"hooks": [{"type": "command", "command": command}]}
        if matcher is not None:
            group = {"matcher": matcher, **group}
        groups.append(group)
        done["hooks"].append([event, matcher or "", command])
    if allow:
        if "permissions" not in doc:
            doc["permissions"] = {}
            done["created"].append(["permissions"])
        perms = doc["permissions"]
        if not isinstance(perms, dict):
            raise SotdError('the settings file\'s "permissions" is not an object; nothing was changed')
        if "allow" not in perms:
            perms["allow"] = []
            done["created"].append(["permissions.allow"])
        rules = perms["allow"]
        if not isinstance(rules, list):
            raise SotdError('the settings file\'s permissions."allow" is not a list; nothing was changed')
        for rule in allow:
            if rule not in rules:
                rules.append(rule)
                done["allow"].append([rule])
    if not (done["hooks"] or done["allow"] or done["requoted"]):
        # nothing of ours was missing: take back the empty containers made on the way
        for (key,) in reversed(done["created"]):
            _drop_container(doc, key)
        done["created"] = []
    return done


def _drop_container(doc: dict[str, object], key: str) -> None:
    if key == "hooks":
        doc.pop("hooks", None)
    elif key == "permissions":
        doc.pop("permissions", None)
    elif key == "permissions.allow":
        perms = doc.get("permissions")
        if isinstance(perms, dict):
            perms.pop("allow", None)
    elif key.startswith("hooks."):
        hooks = doc.get("hooks")
        if isinstance(hooks, dict):
            hooks.pop(key[len("hooks.") :], None)


def changed(done: dict[str, list[list[str]]]) -> bool:
    return bool(done["hooks"] or done["allow"] or done["requoted"])


def remove_from_settings(doc: dict[str, object], done: dict[str, list[list[str]]]) -> bool:
    """Take out of ``doc`` what ``merge_claude_settings`` recorded in ``done`` (pure; True when anything
    changed): the hook entries by their exact command, the allow rules, then each group, event list and
    container it made that is now empty. An entry someone else added, or a container that still holds
    anything, stays."""
    touched = False
    hooks = doc.get("hooks")
    ours = {(e, c) for e, _m, c in done.get("hooks", [])} | {
        (e, new) for e, _old, new in done.get("requoted", [])
    }
    if isinstance(hooks, dict):
        for event in sorted({e for e, _c in ours}):
            groups = hooks.get(event)
            if not isinstance(groups, list):
                continue
            kept_groups = []
            for g in groups:
                if isinstance(g, dict) and isinstance(g.get("hooks"), list):
                    kept = [
                        h
                        for h in g["hooks"]
                        if not (isinstance(h, dict) and (event, h.get("command")) in ours)
                    ]
                    if len(kept) != len(g["hooks"]):
                        touched = True
                        if not kept:
                            continue
                        g["hooks"] = kept
                kept_groups.append(g)
            hooks[event] = kept_groups
    perms = doc.get("permissions")
    rules = perms.get("allow") if isinstance(perms, dict) else None
    if isinstance(rules, list) and isinstance(perms, dict):
        drop = {r for (r,) in done.get("allow", [])}
        kept_rules = [r for r in rules if r not in drop]
        if len(kept_rules) != len(rules):
            touched = True
            perms["allow"] = kept_rules
    for (key,) in reversed(done.get("created", [])):
        if _is_empty(doc, key):
            _drop_container(doc, key)
            touched = True
    return touched


def _is_empty(doc: dict[str, object], key: str) -> bool:
    if key in ("hooks", "permissions"):
        v = doc.get(key)
        return isinstance(v, dict) and not v
    if key == "permissions.allow":
        perms = doc.get("permissions")
        return isinstance(perms, dict) and perms.get("allow") == []
    hooks = doc.get("hooks")
    return isinstance(hooks, dict) and hooks.get(key[len("hooks.") :]) == []


def row_settings_text(bin_dir: str) -> str:
    """``bin/claude-settings.json``: the hooks and allow rules a spawned Claude Code row loads with
    ``--settings`` (so a row joins, polls and sends with no dialog even when the user's own settings do
    not register sotd). Identical hook commands to the ones ``--agent-settings`` registers, which Claude
    Code runs once however many settings files name them."""
    doc: dict[str, object] = {}
    merge_claude_settings(doc, bin_dir, allow=allow_rules(bin_dir, os.path.expanduser("~")))
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# A Codex row's first prompt (issue 12 part 3): Codex 0.171.0 starts its thread, and so runs its
# SessionStart hook (the join), only at the first turn, so a row that is to join by itself is given one.
# It starts with "[sot-comm] " (a machine prompt: no closing-line nudge) and asks for one poll.


# ------------------------------------------------------------------------------------------ settings (I/O)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _replace_keeping_mode(target: str, data: bytes, mode: int) -> None:
    """Replace ``target`` whole (temp beside it, synced, renamed) with ``mode`` set on the temp before the
    rename, whatever the umask."""
    from sotd import fsprim

    fsprim.write_atomic(target, data, tmp=f"{target}.tmp.{os.urandom(3).hex()}", mode=mode, exact_mode=True)


def _load_doc(path: str, data: bytes | None) -> dict[str, object]:
    try:
        doc = json.loads(data) if data and data.strip() else {}
    except ValueError as e:
        raise SotdError(f"{path} is not valid JSON ({e}); nothing was changed") from None
    if not isinstance(doc, dict):
        raise SotdError(f"{path} does not hold a JSON object; nothing was changed")
    return doc


def _dump(doc: dict[str, object]) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def _settings_target(path: str) -> str:
    """The file a settings path finally names: a symlink (or a chain of them) is followed, so the write
    goes to the dotfiles folder the link points into and the link itself stays."""
    return os.path.realpath(path)


def write_claude_settings(
    path: str,
    bin_dir: str,
    *,
    allow: list[str] | None = None,
    record: dict[str, object] | None = None,
    events: tuple[tuple[str, str | None, str], ...] = CLAUDE_EVENTS,
) -> bool:
    """Merge our hooks (and ``allow`` rules) into the settings file at ``path``; True when it changed.

    With ``record`` (the install record's entry for this path, changed in place): what was before (the
    exact bytes, or that there was no file), the digest of what was written, and what was added."""
    target = _settings_target(path)
    data = _read_bytes(target)
    doc = _load_doc(path, data)
    done = merge_claude_settings(doc, bin_dir, events, allow=allow)
    if not changed(done):
        return False
    new = _dump(doc)
    mode = 0o600
    if data is not None:
        mode = os.stat(target).st_mode & 0o7777
    else:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    if record is not None:
        if not record:
            record.update(before=_b64(data), before_known=True, hooks=[], allow=[], requoted=[], created=[])
        elif record.get("after_sha256") != (_sha(data) if data is not None else None):
            record["before_known"] = False  # the file changed since our last write: its old bytes are stale
        for key in ("hooks", "allow", "requoted", "created"):
            seen = record.setdefault(key, [])
            if isinstance(seen, list):
                seen.extend(x for x in done[key] if x not in seen)
    _replace_keeping_mode(target, new, mode)
    if record is not None:
        record["after_sha256"] = _sha(new)
    return True


def _b64(data: bytes | None) -> str | None:
    import base64

    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: object) -> bytes | None:
    import base64

    return base64.b64decode(text) if isinstance(text, str) else None


def _undo_if_untouched(path: str, target: str, data: bytes, record: dict[str, object]) -> str | None:
    """When the file still holds exactly the bytes the install wrote, put back the bytes from before it
    (or remove the file it created) and say so; None when it changed since (the caller takes out only
    the install's own entries)."""
    if not (record.get("before_known") and record.get("after_sha256") == _sha(data)):
        return None
    before = _unb64(record.get("before"))
    if before is None:
        os.unlink(target)
        return f"Removed {path} (install had created it)"
    _replace_keeping_mode(target, before, os.stat(target).st_mode & 0o7777)
    return f"Restored {path} to its bytes before the install"


def unwrite_claude_settings(path: str, record: dict[str, object]) -> str:
    """Take out of the settings file at ``path`` what the install recorded; the line saying what happened.

    Unchanged since our last write: the bytes from before the install are put back exactly (or the file
    we created is removed). Changed since: only our entries are taken out (and the containers we made
    that are now empty), and the file is rewritten."""
    target = _settings_target(path)
    data = _read_bytes(target)
    if data is None:
        return f"{path} is gone; nothing to take out of it"
    undone = _undo_if_untouched(path, target, data, record)
    if undone is not None:
        return undone
    try:
        doc = _load_doc(path, data)
    except SotdError as e:
        return f"{e.message}: sotd's entries in it were left there; take them out by hand"
    done = {
        k: v
        for k, v in record.items()
        if k in ("hooks", "allow", "requoted", "created") and isinstance(v, list)
    }
    if not remove_from_settings(doc, done):
        return f"{path} holds none of sotd's entries any more; left as it is"
    _replace_keeping_mode(target, _dump(doc), os.stat(target).st_mode & 0o7777)
    return (
        f"Took sotd's hooks and allow rules out of {path} (it had changed since the install, so only those)"
    )


# ------------------------------------------------------------------------------------------ the skill


def skill_text(bin_dir: str) -> str:
    """The sot-comm skill Claude Code loads (``skills/sot-session-start/SKILL.md``): how to join, send,
    poll and leave, the recovery when the handle is lost, and seed 000's conventions, in our own words."""
    b = bin_dir
    return f"""---
name: {SKILL}
description: How this session talks to other agent sessions over sot-comm - its handle, reading and sending mail, leaving, and getting a lost handle back. Use it when a message mentions sot-comm, comm-poll.sh, comm-send.sh, a handle like @name, or "[sot-comm] you have mail".
---
{SKILL_MARK}

# sot-comm: mail between agent sessions

Every session has a **handle** (`@name`). Mail to a handle is one line appended to its inbox; the
scripts are in `{b}` (on the PATH in a sotd row and in a session the start hook joined).

## Your handle

The session-start hook joins this session by itself and tells you the handle. To see it again:
`comm-context.sh` (the `NAME=` line). To join by hand: `comm-join.sh --name NAME`.

## Read and send

- `comm-poll.sh` shows the mail you have not read yet and marks it read. Run it when the line
  `[sot-comm] you have mail: run comm-poll.sh` arrives, or when a hook tells you mail is waiting.
- `comm-send.sh @name "text"` sends one message. The answer is exactly `filed -> @name` (it is in
  that inbox) or `FAILED -> @name: <reason>`; nothing is queued or retried for you. Read the reason
  and act on it.
- `comm-send.sh --broadcast "text"` reaches every registered session. Use it sparingly.
- `comm-list.sh` shows who is registered and whether each session is live.
- Answer the sender of a message in a message to them, not only in your own reply text: they cannot
  see your screen.

## Ending a turn

End each turn with one closing line, so the others (and the dashboard) can see where you are:
`SITREP: <what is done>`, `SITREP-QUESTION: <what you need from a person>` or
`SITREP-WAITING: <what you are waiting for>`.

## Leaving

`comm-leave.sh` gives the handle up (its registry entry goes; the mail already filed stays).

## Recovery recipe: when the handle is lost

If a send says your identity did not resolve, or a hook says the session has no handle:

1. Do **not** run a bare `comm-join.sh` if you held a handle before: it may derive a different one,
   and mail to the old one would no longer reach you.
2. Find the handle you held: the start hook's message at the top of this session, or your
   project's entry in `comm-list.sh` (the one whose folder is this project).
3. Take it again: `comm-join.sh --name THAT_NAME`. In a sotd row, a plain `comm-join.sh` takes the
   row's own name.
4. Send a short message to whoever was waiting on you, saying you are back.

A refusal that says this process runs under another agent's session means you are a sub-agent: do
not join; the session that started you owns the handle.

## Working with other sessions

- **Domain expertise.** Each session knows its own project best. Say what you need or what is
  broken, and offer a fix if you have one, but leave the other session to decide how to do it there.
- **Tags against groupthink.** Start a message with one of `[design]`, `[question]`, `[breaks]`,
  `[challenge]` or `[consensus]` when it fits. Do not declare `[consensus]` in a thread until someone
  in it has posted a `[breaks]` (tried to break the idea) first.
"""


def checkout_of(sotd: str) -> str | None:
    """The source checkout (a folder holding ``.git``) the recorded ``sotd`` lives in, else None."""
    d = os.path.dirname(os.path.abspath(sotd))
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def checkout_note(sotd: str) -> str | None:
    """The note install prints when the scripts will run a ``sotd`` inside a source checkout."""
    top = checkout_of(sotd)
    if top is None:
        return None
    return (
        f"note: the scripts run {sotd}, inside the source checkout {top}; if that checkout moves or its .venv "
        "is rebuilt they stop (and say so). For a sotd that stays put: pipx install <checkout>, then run "
        "sotd comm install --sotd=$(command -v sotd)"
    )


def install_skill(claude_dir: str, bin_dir: str) -> tuple[str | None, str | None]:
    """Write ``<claude_dir>/skills/sot-session-start/SKILL.md``; (the path written or None, a warning).

    A SKILL.md there that this install did not write (no mark line) is somebody's own: left alone."""
    folder = os.path.join(claude_dir, "skills", SKILL)
    path = os.path.join(folder, "SKILL.md")
    old = _read_bytes(path)
    if old is not None and SKILL_MARK.encode() not in old:
        return (
            None,
            f"WARNING: {path} is not one sotd wrote; it was left as it is, and the skill was not installed",
        )
    os.makedirs(folder, mode=0o755, exist_ok=True)
    _write(path, skill_text(bin_dir), 0o644)
    return path, None


def note_made_dir(record: dict[str, object], folder: str, existed: bool) -> None:
    """Record a folder this install made (``~/.claude/skills``, ``~/.codex/rules``), so uninstall removes it
    again when it is empty (issue 27); one that was there before is never named."""
    if existed or not os.path.isdir(folder):
        return
    made = record.setdefault("made_dirs", [])
    if isinstance(made, list) and folder not in made:
        made.append(folder)


def remove_made_dirs(record: dict[str, object]) -> None:
    """The folders ``note_made_dir`` recorded, each removed only when empty (``rmdir`` refuses otherwise)."""
    made = record.get("made_dirs")
    for folder in made if isinstance(made, list) else []:
        if isinstance(folder, str):
            try:
                os.rmdir(folder)
            except OSError:
                pass  # not empty (someone else's files are in it), or already gone


def uninstall_skill(path: str) -> str | None:
    data = _read_bytes(path)
    if data is None or SKILL_MARK.encode() not in data:
        return None
    os.unlink(path)
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass
    return f"Removed the skill {path}"


# ------------------------------------------------------------------------------------------ the record


# ------------------------------------------------------------------------------------------ Codex

CODEX_RULES = "sot-comm.rules"
CODEX_RULES_MARK = "# written by `sotd comm install --agent-settings`; `sotd comm uninstall` removes it"


def codex_dir(environ: Mapping[str, str] | None = None) -> str:
    """Codex's own folder: ``$CODEX_HOME`` when set (as Codex reads it), else ``~/.codex``."""
    env = os.environ if environ is None else environ
    return env.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")


def codex_rules_text(bin_dir: str, home: str | None = None) -> str:
    """``rules/sot-comm.rules``: Codex ``prefix_rule``s that let sotd's own mail wrappers (``ALLOWED``) run
    with no approval prompt, each in every form a session types it (the bare name, the absolute path, the
    ``~/`` path when ``bin/`` is below ``home``), and nothing else. Pure."""
    lines = [CODEX_RULES_MARK, "# sot-comm: reading and sending mail needs no approval (docs/agents.md)"]
    for name in ALLOWED:
        full = os.path.join(bin_dir, name)
        forms = [name, full]
        if home and home != "/" and full.startswith(home.rstrip("/") + "/"):
            forms.append("~/" + full[len(home.rstrip("/")) + 1 :])
        for form in forms:
            lines.append(f'prefix_rule(pattern = [{json.dumps(form)}], decision = "allow")')
    return "\n".join(lines) + "\n"


def write_codex_rules(path: str, bin_dir: str) -> str:
    """Write the rules file at ``path`` (ours whole: a file there without our mark is left alone); the
    line saying what happened."""
    text = codex_rules_text(bin_dir, os.path.expanduser("~"))
    data = _read_bytes(path)
    if data is not None and not data.decode("utf-8", "replace").startswith(CODEX_RULES_MARK):
        return (
            f"{path} exists and is not sotd's: left as it is (sotd's wrappers may ask for approval in Codex)"
        )
    if data == text.encode():
        return f"The Codex rules were already in {path}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write(path, text, 0o644)
    return f"Allowed sotd's mail wrappers in Codex without approval: {path}"


def unwrite_codex_rules(path: str) -> str | None:
    data = _read_bytes(path)
    if data is None or not data.decode("utf-8", "replace").startswith(CODEX_RULES_MARK):
        return None
    os.unlink(path)
    return f"Removed {path}"


def codex_config_path() -> str:
    return os.path.join(codex_dir(), "config.toml")


def _codex_functions(bin_dir: str) -> dict[str, str]:
    from sotd.cli import codex_config

    return codex_config.shell_functions(bin_dir, list(WRAPPERS))


def codex_functions_trial(bin_dir: str) -> None:
    """Raise (before anything is written) when Codex's ``config.toml`` cannot take our lines."""
    from sotd.cli import codex_config

    path = codex_config_path()
    data = _read_bytes(_settings_target(path))
    codex_config.add_functions(path, _decode_toml(path, data), _codex_functions(bin_dir))


def _decode_toml(path: str, data: bytes | None) -> str:
    try:
        return (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise SotdError(f"{path} is not valid TOML (it is not UTF-8); nothing was changed",
                        hint="Fix it, then run: sotd comm install --agent-settings") from None  # fmt: skip


def write_codex_functions(path: str, bin_dir: str, record: dict[str, object]) -> tuple[bool, list[str]]:
    """Add the comm scripts' bash functions to Codex's ``config.toml`` at ``path`` (through a symlink,
    mode kept, 0600 when new); (whether it changed, the keys the user holds with another value).
    ``record`` (this file's entry in the install record, changed in place) keeps the bytes from before,
    the digest written and the lines added, for ``unwrite_codex_functions``."""
    from sotd.cli import codex_config

    target = _settings_target(path)
    data = _read_bytes(target)
    new, added, foreign = codex_config.add_functions(
        path, _decode_toml(path, data), _codex_functions(bin_dir)
    )
    if not added:
        return False, foreign
    mode = 0o600
    if data is not None:
        mode = os.stat(target).st_mode & 0o7777
    else:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    if not record:
        record.update(before=_b64(data), before_known=True, added=[], keys=[])
    elif record.get("after_sha256") != (_sha(data) if data is not None else None):
        record["before_known"] = False
    lines = record.setdefault("added", [])
    if isinstance(lines, list):
        lines.extend(added)
    funcs = _codex_functions(bin_dir)
    keys = record.setdefault("keys", [])
    if isinstance(keys, list):
        for key, line in zip(funcs, codex_config.function_lines(funcs), strict=True):
            if line in added and key not in keys:
                keys.append(key)
    encoded = new.encode()
    _replace_keeping_mode(target, encoded, mode)
    record["after_sha256"] = _sha(encoded)
    return True, foreign


def unwrite_codex_functions(path: str, record: dict[str, object]) -> str:
    """Take the install's lines out of Codex's ``config.toml``; the line saying what happened. Unchanged
    since our write: the bytes from before are put back (or the file we made is removed); changed since
    (Codex itself records trust there): exactly our lines are taken out."""
    from sotd.cli import codex_config

    target = _settings_target(path)
    data = _read_bytes(target)
    if data is None:
        return f"{path} is gone; nothing to take out of it"
    mode = os.stat(target).st_mode & 0o7777
    undone = _undo_if_untouched(path, target, data, record)
    if undone is not None:
        return undone
    added = _strs(record.get("added"))
    keys = _strs(record.get("keys"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    new = None if text is None else codex_config.remove_functions(path, text, added, keys)
    if new is None:
        return (
            f"{path} no longer holds sotd's lines as install wrote them; left as it is "
            f"(take any {codex_config.function_key('comm-…')} keys out of {codex_config.HEADER} by hand)"
        )
    _replace_keeping_mode(target, new.encode(), mode)
    return f"Took sotd's shell functions out of {path} (it had changed since the install, so only those)"


def _strs(v: object) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _install_codex_functions(lay: Layout, record: dict[str, object]) -> None:
    from sotd.cli import codex_config

    path = codex_config_path()
    configs = record.setdefault("codex_config", {})
    assert isinstance(configs, dict)
    entry = configs.setdefault(path, {})
    assert isinstance(entry, dict)
    changed_now, foreign = write_codex_functions(path, lay.bin_dir, entry)
    if changed_now:
        out(
            f"Put the comm scripts on Codex's shell by name (bash functions under {codex_config.HEADER}): {path}"
        )
    else:
        out(f"The comm scripts were already on Codex's shell by name in {path}")
    for key in foreign:
        out(f"{path}: {key} is set to something else there; left as it is")
    shell = os.path.basename(os.environ.get("SHELL", "") or "bash")
    if shell != "bash":
        out(
            f"note: your shell is {shell}; Codex runs the model's commands in it, and only bash imports "
            f"these functions: name the scripts by full path there ({lay.bin_dir}/comm-poll.sh)"
        )
    if not entry:
        configs.pop(path, None)


CODEX_TRUST_NOTE = (
    "Codex runs new or changed hooks only once a person trusts them: start codex and pick "
    "'Trust all and continue' (or review them with /hooks)"
)


def _settings_record_path(lay: Layout) -> str:
    return os.path.join(lay.bin_dir, SETTINGS_RECORD)


def read_settings_record(lay: Layout) -> dict[str, object]:
    data = _read_bytes(_settings_record_path(lay))
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def _write_settings_record(lay: Layout, doc: dict[str, object]) -> None:
    _write(_settings_record_path(lay), json.dumps(doc, indent=2, ensure_ascii=False) + "\n", 0o600)


def _entry_for(doc: dict[str, object], path: str) -> dict[str, object]:
    files = doc.setdefault("settings", {})
    assert isinstance(files, dict)
    entry = files.setdefault(path, {})
    assert isinstance(entry, dict)
    return entry


def instructions(bin_dir: str) -> list[str]:
    lines = [
        "",
        "Register the hooks and allow rules with Claude Code (~/.claude/settings.json), or re-run with",
        "--agent-settings:",
    ]
    snippet: dict[str, object] = {}
    merge_claude_settings(snippet, bin_dir, allow=allow_rules(bin_dir, os.path.expanduser("~")))
    lines += ["  " + ln for ln in json.dumps(snippet, indent=2, ensure_ascii=False).splitlines()]
    codex: dict[str, object] = {}
    merge_claude_settings(codex, bin_dir, CODEX_EVENTS)
    lines += [
        "",
        "Register them with Codex in ~/.codex/hooks.json (or a project's .codex/hooks.json; --agent-settings",
        "writes it), then trust them in Codex with /hooks:",
    ]
    lines += ["  " + ln for ln in json.dumps(codex, indent=2, ensure_ascii=False).splitlines()]
    from sotd.cli import codex_config

    lines += [
        "",
        "So that a Codex session outside a sotd row finds the scripts by name, add to ~/.codex/config.toml",
        "(--agent-settings adds them):",
        f"  {codex_config.HEADER}",
    ]
    lines += ["  " + ln for ln in codex_config.function_lines(_codex_functions(bin_dir))]
    lines += [
        "A Codex without lifecycle hooks reads its mail only when it polls: tell it so in AGENTS.md",
        f"('run {bin_dir}/comm-poll.sh after each task').",
    ]
    return lines


def run(argv: list[str]) -> int:
    settings: str | None = None
    sotd: str | None = None
    skill_wanted = False
    args = list(argv)
    if "--sotd" in args[:-1]:  # ``--sotd PATH`` as the command table shows it, the same as ``--sotd=PATH``
        i = args.index("--sotd")
        args[i : i + 2] = ["--sotd=" + args[i + 1]]
    for a in args:
        if a == "--skill":
            skill_wanted = True
        elif a == "--agent-settings":
            settings = os.path.join(os.path.expanduser("~"), ".claude", "settings.json")
        elif a.startswith("--agent-settings="):
            settings = a.split("=", 1)[1]
        elif a.startswith("--sotd="):
            sotd = os.path.abspath(a.split("=", 1)[1])
            if not os.access(sotd, os.X_OK) or os.path.isdir(sotd):
                raise UsageError(f"sotd comm install: --sotd={sotd} is not an executable file")
        else:  # --help and unknown options never get here: sotd.cli.main answers them from sotd.cmdtable
            raise UsageError(f"sotd comm install: unknown argument '{a}' (see --help)")
    lay = Layout.from_env()
    if settings:
        settings = os.path.abspath(settings)
        # a file we could not merge into is refused before anything at all is written
        trial = _load_doc(settings, _read_bytes(_settings_target(settings)))
        merge_claude_settings(trial, lay.bin_dir, allow=allow_rules(lay.bin_dir, os.path.expanduser("~")))
        codex_hooks = os.path.join(codex_dir(), "hooks.json")
        merge_claude_settings(_load_doc(codex_hooks, _read_bytes(_settings_target(codex_hooks))), lay.bin_dir,
                              CODEX_EVENTS)  # fmt: skip
        codex_functions_trial(lay.bin_dir)
    recorded = sotd or sotd_executable()
    names, removed = install(lay, recorded)
    note = checkout_note(recorded)
    if note:
        err(note)
    out(f"Installed sot-comm {__version__} into {lay.bin_dir}: {', '.join(names)}")
    if removed:
        out(f"Removed retired scripts: {', '.join(removed)}")
    record = read_settings_record(lay)
    claude_dir = os.path.dirname(settings) if settings else os.path.join(os.path.expanduser("~"), ".claude")
    skills_had = os.path.isdir(os.path.join(claude_dir, "skills"))
    skill, warning = install_skill(claude_dir, lay.bin_dir) if settings or skill_wanted else (None, None)
    note_made_dir(record, os.path.join(claude_dir, "skills"), skills_had)
    if warning:
        err(warning)
    if skill:
        skills = record.setdefault("skills", [])
        if isinstance(skills, list) and skill not in skills:
            skills.append(skill)
        out(f"Installed the Claude Code skill {SKILL}: {skill}")
    if settings:
        entry = _entry_for(record, settings)  # first in the record: uninstall says Claude Code's line first
        _install_codex(lay, record)
        allow = allow_rules(lay.bin_dir, os.path.expanduser("~"))
        if write_claude_settings(settings, lay.bin_dir, allow=allow, record=entry):
            out(f"Registered the hooks and allow rules in {settings}")
        else:
            out(f"The hooks were already registered in {settings}")
        if not entry:
            files = record.get("settings")
            if isinstance(files, dict):
                files.pop(settings, None)
    _write_settings_record(lay, record)
    if not settings:
        for line in instructions(lay.bin_dir):
            out(line)
        if not skill_wanted:
            out(f"The {SKILL} skill for Claude Code: re-run with --agent-settings or --skill.")
    return 0


def _install_codex(lay: Layout, record: dict[str, object]) -> None:
    """Codex's side of ``--agent-settings``: sotd's hooks merged into ``$CODEX_HOME/hooks.json`` (the same
    record, so uninstall takes out exactly ours) and the rules file for the mail wrappers."""
    path = os.path.join(codex_dir(), "hooks.json")
    entry = _entry_for(record, path)
    if write_claude_settings(path, lay.bin_dir, record=entry, events=CODEX_EVENTS):
        out(f"Registered the hooks in {path} (Codex)")
        out(CODEX_TRUST_NOTE)
    else:
        out(f"The hooks were already registered in {path} (Codex)")
    if not entry:
        files = record.get("settings")
        if isinstance(files, dict):
            files.pop(path, None)
    _install_codex_functions(lay, record)
    rules = os.path.join(codex_dir(), "rules", CODEX_RULES)
    rules_had = os.path.isdir(os.path.dirname(rules))
    out(write_codex_rules(rules, lay.bin_dir))
    note_made_dir(record, os.path.dirname(rules), rules_had)
    if _read_bytes(rules) == codex_rules_text(lay.bin_dir, os.path.expanduser("~")).encode():
        listed = record.setdefault("codex_rules", [])
        if isinstance(listed, list) and rules not in listed:
            listed.append(rules)


def uninstall(argv: list[str]) -> int:
    """``sotd comm uninstall``: take out exactly what the installs recorded (settings entries, the skill,
    the scripts and the rows' settings file); the comm folder's mail, registry and self files stay."""
    for a in argv:
        if a in ("-h", "--help"):
            out("usage: sotd comm uninstall     (takes out what sotd comm install put in; mail stays)")
            return 0
        raise UsageError(f"sotd comm uninstall: unknown argument '{a}' (see --help)")
    lay = Layout.from_env()
    record = read_settings_record(lay)
    names = _read_record(lay)
    if not record and not names:
        out(f"Nothing recorded by sotd comm install in {lay.bin_dir}; nothing was removed")
        return 0
    status = 0
    files = record.get("settings")
    if isinstance(files, dict):
        for path, entry in list(files.items()):
            if isinstance(path, str) and isinstance(entry, dict):
                try:
                    out(unwrite_claude_settings(path, entry))
                except OSError as e:
                    err(f"FAILED to change {path}: {e.strerror or e}; it was left as it is")
                    status = 1
    configs = record.get("codex_config")
    if isinstance(configs, dict):
        for path, entry in configs.items():
            if isinstance(path, str) and isinstance(entry, dict):
                try:
                    out(unwrite_codex_functions(path, entry))
                except OSError as e:
                    err(f"FAILED to change {path}: {e.strerror or e}; it was left as it is")
                    status = 1
    rule_files = record.get("codex_rules")
    for path in rule_files if isinstance(rule_files, list) else []:
        if isinstance(path, str):
            line = unwrite_codex_rules(path)
            if line:
                out(line)
    skills = record.get("skills")
    for path in skills if isinstance(skills, list) else []:
        if isinstance(path, str):
            line = uninstall_skill(path)
            if line:
                out(line)
    remove_made_dirs(record)
    gone = []
    for name in sorted(names):
        p = os.path.join(lay.bin_dir, name)
        if os.path.isfile(p) and not os.path.islink(p):
            os.unlink(p)
            gone.append(name)
    for extra in (RECORD, SETTINGS_RECORD):
        try:
            os.unlink(os.path.join(lay.bin_dir, extra))
        except FileNotFoundError:
            pass
    try:
        os.unlink(lay.version_file)
    except FileNotFoundError:
        pass
    if gone:
        out(f"Removed from {lay.bin_dir}: {', '.join(gone)}")
    try:
        os.rmdir(lay.bin_dir)
    except OSError:
        pass
    out("The comm folder's mail, registry and self files were left as they are.")
    return status
