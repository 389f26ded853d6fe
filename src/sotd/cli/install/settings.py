"""``sotd/cli/install/settings.py``: the install part that merges sotd's hooks and allow rules into Claude
Code's ``settings.json`` and Codex's ``hooks.json`` (the same shape), and takes out exactly that.

Issue 11 part 2 items 2 and 8 (docs/agents.md, "Install"). Guarantees of the merge
(``merge_claude_settings``, pure): everything already in the document is kept; only missing hook entries
and allow rules are added; every command path is shell-quoted; a second run adds nothing. The file is
written through a symlink (its target is replaced, the link stays), keeps its mode, and a file that is not
a JSON object is refused and left untouched. Uninstall puts a file nobody changed since back byte for
byte, and otherwise takes out only our entries.

What would break it: writing the link's own path, a temp created under the process umask and renamed as
is (0644 becomes 0600), or matching our entries by anything but the exact command recorded.
"""

from __future__ import annotations

import json
import os

from sotd.cli.comm.common import out
from sotd.cli.install.codex_config import codex_dir
from sotd.cli.install.record import (
    b64,
    entry_for,
    link_target,
    read_bytes,
    replace_keeping_mode,
    sha256,
    undo_each,
    undo_if_untouched,
)
from sotd.errors import SettingsRefused, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.install.part import Setup


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


CODEX_TRUST_NOTE = (
    "Codex runs new or changed hooks only once a person trusts them: start codex and pick "
    "'Trust all and continue' (or review them with /hooks)"
)


def shell_quote(s: str) -> str:
    """``s`` in single quotes for a POSIX shell (a quote inside closed, escaped and reopened)."""
    return "'" + s.replace("'", "'\\''") + "'"


def hook_command(bin_dir: str, script: str) -> str:
    """The ``command`` of one hook entry: the script's absolute path, shell-quoted (Claude Code runs it
    through a shell, so a path with a space or a quote in it still names one file)."""
    return shell_quote(os.path.join(bin_dir, script))


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
        raise SettingsRefused('the settings file\'s "hooks" is not an object; nothing was changed')
    for event, matcher, script in events:
        command = hook_command(bin_dir, script)
        legacy = os.path.join(bin_dir, script)
        if event not in hooks:
            hooks[event] = []
            done["created"].append([f"hooks.{event}"])
        groups = hooks[event]
        if not isinstance(groups, list):
            raise SettingsRefused(f'the settings file\'s hooks."{event}" is not a list; nothing was changed')
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
            raise SettingsRefused('the settings file\'s "permissions" is not an object; nothing was changed')
        if "allow" not in perms:
            perms["allow"] = []
            done["created"].append(["permissions.allow"])
        rules = perms["allow"]
        if not isinstance(rules, list):
            raise SettingsRefused(
                'the settings file\'s permissions."allow" is not a list; nothing was changed'
            )
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


def load_doc(path: str, data: bytes | None) -> dict[str, object]:
    try:
        doc = json.loads(data) if data and data.strip() else {}
    except ValueError as e:
        raise SettingsRefused(f"{path} is not valid JSON ({e}); nothing was changed") from None
    if not isinstance(doc, dict):
        raise SettingsRefused(f"{path} does not hold a JSON object; nothing was changed")
    return doc


def dump(doc: dict[str, object]) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


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
    target = link_target(path)
    data = read_bytes(target)
    doc = load_doc(path, data)
    done = merge_claude_settings(doc, bin_dir, events, allow=allow)
    if not changed(done):
        return False
    new = dump(doc)
    mode = 0o600
    if data is not None:
        mode = os.stat(target).st_mode & 0o7777
    else:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    if record is not None:
        if not record:
            record.update(before=b64(data), before_known=True, hooks=[], allow=[], requoted=[], created=[])
        elif record.get("after_sha256") != (sha256(data) if data is not None else None):
            record["before_known"] = False  # the file changed since our last write: its old bytes are stale
        for key in ("hooks", "allow", "requoted", "created"):
            seen = record.setdefault(key, [])
            if isinstance(seen, list):
                seen.extend(x for x in done[key] if x not in seen)
    replace_keeping_mode(target, new, mode)
    if record is not None:
        record["after_sha256"] = sha256(new)
    return True


def unwrite_claude_settings(path: str, record: dict[str, object]) -> str:
    """Take out of the settings file at ``path`` what the install recorded; the line saying what happened.

    Unchanged since our last write: the bytes from before the install are put back exactly (or the file
    we created is removed). Changed since: only our entries are taken out (and the containers we made
    that are now empty), and the file is rewritten."""
    target = link_target(path)
    data = read_bytes(target)
    if data is None:
        return f"{path} is gone; nothing to take out of it"
    undone = undo_if_untouched(path, target, data, record)
    if undone is not None:
        return undone
    try:
        doc = load_doc(path, data)
    except SotdError as e:
        return f"{e.message}: sotd's entries in it were left there; take them out by hand"
    done = {
        k: v
        for k, v in record.items()
        if k in ("hooks", "allow", "requoted", "created") and isinstance(v, list)
    }
    if not remove_from_settings(doc, done):
        return f"{path} holds none of sotd's entries any more; left as it is"
    replace_keeping_mode(target, dump(doc), os.stat(target).st_mode & 0o7777)
    return (
        f"Took sotd's hooks and allow rules out of {path} (it had changed since the install, so only those)"
    )


def _write_recorded(
    path: str,
    setup: Setup,
    record: dict[str, object],
    *,
    events: tuple[tuple[str, str | None, str], ...] = CLAUDE_EVENTS,
    allow: list[str] | None = None,
) -> bool:
    """Merge into the file at ``path`` with its entry in ``record["settings"]``; True when it changed.
    An entry that recorded nothing is dropped again."""
    entry = entry_for(record, path)
    done = write_claude_settings(path, setup.lay.bin_dir, allow=allow, record=entry, events=events)
    if not entry:
        files = record.get("settings")
        if isinstance(files, dict):
            files.pop(path, None)
    return done


def _codex_hooks() -> str:
    return os.path.join(codex_dir(), "hooks.json")


def _all_allow_rules(setup: Setup) -> list[str]:
    """The allow rules ``--agent-settings`` writes: the wrappers' and the MCP server's tools'."""
    from sotd.cli.install import mcp

    return allow_rules(setup.lay.bin_dir, setup.home) + mcp.allow_rules()


def check(setup: Setup) -> None:
    """With ``--agent-settings``: refuse a Claude Code settings file or a Codex ``hooks.json`` we could
    not merge into, before anything at all is written."""
    if not setup.settings:
        return
    trial = load_doc(setup.settings, read_bytes(link_target(setup.settings)))
    merge_claude_settings(trial, setup.lay.bin_dir, allow=_all_allow_rules(setup))
    codex_hooks = _codex_hooks()
    merge_claude_settings(load_doc(codex_hooks, read_bytes(link_target(codex_hooks))), setup.lay.bin_dir,
                          CODEX_EVENTS)  # fmt: skip


def install(setup: Setup, record: dict[str, object]) -> None:
    """With ``--agent-settings``: Codex's ``hooks.json``, then Claude Code's settings (whose entry is made
    first in the record, so uninstall says Claude Code's line first)."""
    settings = setup.settings
    if not settings:
        return
    entry_for(record, settings)
    path = _codex_hooks()
    if _write_recorded(path, setup, record, events=CODEX_EVENTS):
        out(f"Registered the hooks in {path} (Codex)")
        out(CODEX_TRUST_NOTE)
    else:
        out(f"The hooks were already registered in {path} (Codex)")
    if _write_recorded(settings, setup, record, allow=_all_allow_rules(setup)):
        out(f"Registered the hooks and allow rules in {settings}")
    else:
        out(f"The hooks were already registered in {settings}")


def uninstall(setup: Setup, record: dict[str, object]) -> int:
    """Take our entries out of each file ``record["settings"]`` names (in the record's order); 1 when one
    could not be changed (it is left as it is)."""
    return undo_each(record, "settings", unwrite_claude_settings)
