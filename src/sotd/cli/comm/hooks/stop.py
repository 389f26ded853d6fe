"""``sotd comm hook stop``: the Stop hook (behaviour 3.4), which Claude Code and Codex both run at a turn end.

First the mail gate: directed mail past the cursor holds the turn once per batch with
``{"decision":"block","reason":...}`` (the reason names ``comm-poll.sh``). Then the closing marker of the
last assistant message (``SITREP:`` / ``SITREP-QUESTION:`` / ``SITREP-WAITING:``) becomes a work-state
event (behaviour 4.3), and the row's ``stop_at`` is stamped (the wake leaves a row alone while it is under
a minute old). A Stop hook that fails on the way still runs the mail gate (``stop_after_error``) and says
in a ``systemMessage`` when even that fails.

After the mail gate and the closing markers, the Stop hook nudges (docs/agents.md, "Nudges"): a turn a
person started that ends without a marker is held once to add one; a machine turn of real effort (at
least ``EFFORT_CALLS`` tool calls or ``EFFORT_SECONDS``) gets one softly worded hold; a ``SITREP:`` that
names files (backticked paths with a ``/``) which do not exist is held once. Each is once per turn (a tick
holding the turn id), fails open when its tick cannot be written, applies only in a row unless
``nudges = on`` in the comm folder's ``hooks.conf`` (``nudges_apply``), never holds a ``stop_hook_active``
continuation, and stands down with ``SOT_COMM_NUDGES=off``. Tool calls are counted by the PostToolUse
hook (``sotd.cli.comm.hooks.tool``), one byte each appended to ``state/calls-<key>.count``, which the prompt
hook empties.

What would break it: a hold that is not remembered (a tick that cannot be written must fall open, or the
turn would be held at every end), or a fault before the mail gate that lets a turn with unread mail go.
"""

from __future__ import annotations

import os

from sotd import _clock
from sotd import fastjson as json  # json without re (the hot path)
from sotd.cli.comm.common import Context, err
from sotd.cli.comm.hooks.shared import (
    ancestry_check,
    block,
    hook_input,
    read_tick,
    session_key,
    status_event,
    system_message,
    write_tick,
)
from sotd.errors import InboxBusy, RegistryUnreadable, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.formats.layout import Layout


EFFORT_CALLS = 8

EFFORT_SECONDS = 300

MAX_AUDITED = 20  # paths named in one SITREP that the audit looks at


def _registry_row(ctx: Context) -> tuple[dict[str, object] | None, bool]:
    """(this session's registry row or None, registry unreadable)."""
    from sotd.formats import registry

    try:
        doc = registry.read(ctx.layout)
    except RegistryUnreadable:
        return None, True
    agents = registry.agents_of(doc) if doc else None
    row = agents.get(ctx.name) if isinstance(agents, dict) and ctx.name else None
    return (row if isinstance(row, dict) else None), False


def mail_gate(ctx: Context, key: str, stop_hook_active: bool) -> str | None:
    """The first check of every turn end: the block reason when directed mail is unread, else None."""
    from sotd.cli.comm.inboxread import (
        read_batch,  # not via sotd.cli.comm.poll: a module the hook need not load
    )
    from sotd.formats import inbox

    name = ctx.name
    faults: list[str] = []
    try:
        batch = read_batch(ctx, name, warn=faults.append)
    except InboxBusy:
        err(
            f"comm-status-idle: the inbox for @{name} is being written; it will be checked again at the next turn end"
        )
        return None
    except (SotdError, OSError) as e:
        faults.append(
            f"WARNING: the unread count for @{name} failed ({e}); run comm-poll.sh to check by hand"
        )
        batch = None
    prefix = ""
    if faults and not stop_hook_active:
        fault_tick = ctx.layout.state(f"lock-fault-{key}.tick")
        marker = faults[0]
        if read_tick(fault_tick) != marker and write_tick(fault_tick, marker):
            prefix = marker + "\n"
            if batch is None:
                return prefix.rstrip("\n")
    if batch is None:
        return None
    if inbox.count_directed(batch.new, name) <= 0:
        return prefix.rstrip("\n") or None
    tick = ctx.layout.state(f"mail-{key}.tick")
    total = str(batch.total)
    if read_tick(tick) == total:
        return prefix.rstrip("\n") or None
    if not write_tick(tick, total):
        return None  # fail open: a block we cannot remember would repeat every turn
    reason = f"New sot-comm mail for @{name} — run comm-poll.sh now, act on it, then end the turn."
    from sotd.mcp import STOP_NOTE, registered  # the spec's sentence, then the tools when they are there

    return prefix + reason + (STOP_NOTE if registered(ctx.layout.bin_dir) else "")


def last_assistant_text(hook: dict[str, object]) -> str:
    """The last assistant message: the hook's own field when the agent gives it, else from the transcript."""
    text = hook.get("last_assistant_message")
    if isinstance(text, str):
        return text
    path = hook.get("transcript_path")
    if not isinstance(path, str) or not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 512 * 1024))
            tail = f.read().splitlines()
    except (OSError, ValueError):  # ValueError: a path holding NUL, which no file has
        return ""
    for raw in reversed(tail):
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        msg = obj.get("message") if isinstance(obj, dict) else None
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
            if any(parts):
                return "\n".join(str(p) for p in parts)
    return ""


def sitrep(text: str) -> tuple[str, str] | None:
    """The closing marker of a turn: (verb, text) for SITREP / SITREP-QUESTION / SITREP-WAITING, else None.

    Bold (``**SITREP:**``) and heading (``## SITREP:``) forms count; a SITREP-WAITING with nothing after
    it on its line takes the next non-empty line.
    """
    lines = text.splitlines()
    found: tuple[str, str] | None = None
    for i, line in enumerate(lines):
        s = line.strip().lstrip("#").strip().replace("**", "").strip()
        for marker, verb in (
            ("SITREP-QUESTION:", "blocked"),
            ("SITREP-WAITING:", "waiting"),
            ("SITREP:", "done"),
        ):
            if s.startswith(marker):
                rest = s[len(marker) :].strip()
                if not rest and verb == "waiting":
                    rest = next((x.strip() for x in lines[i + 1 :] if x.strip()), "")
                found = (verb, rest)
                break
    return found


def run(environ: Mapping[str, str]) -> int:
    """The Stop hook: the mail gate, then the closing markers, then the nudges (the module docstring)."""
    hook = hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    status, why = ancestry_check()
    if status == 1:
        return 0
    if status:
        system_message(f"sot-comm: {why}")
        return 0
    try:
        ctx = Context()
    except SotdError as e:
        system_message(f"sot-comm: {e.message}")
        return 0
    row, unreadable = _registry_row(ctx)
    if not ctx.name or (row is None and not unreadable):
        status_event("stop")
        return 0
    key = session_key(environ, hook)
    from sotd.cli.comm import turnend  # the hook decides first, then writes the registry once (issue 17)

    reason = mail_gate(ctx, key, bool(hook.get("stop_hook_active")))
    if reason:
        turnend.write(ctx, [], mark=row is not None)
        block(reason)
        _record_feedback(ctx, key, reason)
        return 0
    marker = sitrep(last_assistant_text(hook))
    nudge = None
    if row is not None and nudges_on(environ, ctx.layout, bool(hook.get("stop_hook_active"))):
        nudge = _nudge(ctx, key, row, marker, hook)
    turnend.write(
        ctx, turnend.plan(marker, held=nudge is not None), mark=row is not None and nudge is not None
    )
    if nudge:
        block(nudge)
        _record_feedback(ctx, key, nudge)
    return 0


def stop_after_error(environ: Mapping[str, str]) -> None:
    """The Stop hook failed on the way (odd input, a bug): it still runs the mail gate from what it can know
    (the handle in this session's self file), and says in a ``systemMessage`` when even that fails, so a
    turn with unread mail is never let go in silence."""
    try:
        if ancestry_check()[0]:
            return  # a refused process does nothing (the refusal was the normal path's to say)
        ctx = Context()
        if not ctx.name:
            return
        reason = mail_gate(ctx, session_key(environ, {}), False)
    except Exception as e:
        system_message(
            f"sot-comm: the Stop hook could not check this session's mail ({type(e).__name__}: {e}); "
            "run comm-poll.sh to check by hand"
        )
        return
    if reason:
        block(reason)


def turn_started(floor_prompt: object) -> float | None:
    """When the turn began: the stamp that ends its id (``<prompt id>:<stamp>``), else None."""
    import calendar
    import time

    if not isinstance(floor_prompt, str) or not _clock.is_stamp(floor_prompt[-20:]):
        return None
    return float(calendar.timegm(time.strptime(floor_prompt[-20:], "%Y-%m-%dT%H:%M:%SZ")))


def named_paths(text: str) -> list[str]:
    """The file paths a SITREP names: backticked words with a ``/`` (not URLs, options or globs), with a
    trailing ``:LINE`` or ``:LINE:COL`` dropped; in order, each once, at most ``MAX_AUDITED``."""
    import re

    out: list[str] = []
    for word in re.findall(r"`([^`\s]+)`", text):
        if "/" not in word or "://" in word or word.startswith("-") or any(c in word for c in "*?$<>|{}~"):
            continue
        path = re.sub(r"(:\d+){1,2}$", "", word)
        if path and path not in out:
            out.append(path)
    return out[:MAX_AUDITED]


def missing_paths(paths: list[str], cwd: str) -> list[str]:
    return [p for p in paths if not os.path.lexists(os.path.join(cwd, p))]


def _once(ctx: Context, name: str, key: str, value: str) -> bool:
    """True when ``value`` is new for this tick and was recorded (a tick that cannot be written: False)."""
    tick = ctx.layout.state(f"{name}-{key}.tick")
    return read_tick(tick) != value and write_tick(tick, value)


def _calls(ctx: Context, key: str) -> int:
    try:
        return os.stat(ctx.layout.state(f"calls-{key}.count")).st_size
    except OSError:
        return 0


NUDGE_SETTINGS = ("rows", "on", "off")  # the ``nudges`` line of hooks.conf; "rows" when not set


def nudges_apply(*, env_switch: str, setting: str, in_row: bool, stop_hook_active: bool) -> bool:
    """Whether the SITREP nudges may hold this turn end (pure; docs/agents.md, "Nudges").

    They are a row's work-state, so by default only a row gets them; ``nudges = on`` in the comm folder's
    ``hooks.conf`` switches them on outside rows too, ``nudges = off`` (or ``SOT_COMM_NUDGES=off``) stands
    them down everywhere. Never inside a ``stop_hook_active`` continuation: that turn end was already
    held once, and holding it again costs the person another model call."""
    if stop_hook_active or env_switch == "off" or setting == "off":
        return False
    return in_row or setting == "on"


def hook_setting(path: str, key: str, allowed: tuple[str, ...]) -> str:
    """``key``'s value in a ``key = value`` file (``#`` comments, blank lines), else ``allowed[0]``: a
    missing or unreadable file, a missing key, or a value not in ``allowed`` all read as the default."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return allowed[0]
    value = allowed[0]
    for line in text.splitlines():
        k, eq, v = line.split("#", 1)[0].partition("=")
        if eq and k.strip() == key:
            value = v.strip().lower()
    return value if value in allowed else allowed[0]


def nudges_on(environ: Mapping[str, str], lay: Layout, stop_hook_active: bool) -> bool:
    from sotd import ancestry  # a row: its identity names one

    return nudges_apply(
        env_switch=environ.get("SOT_COMM_NUDGES", ""),
        setting=hook_setting(os.path.join(lay.home, "hooks.conf"), "nudges", NUDGE_SETTINGS),
        in_row=ancestry.row_named(environ) is not None,
        stop_hook_active=stop_hook_active,
    )


def _nudge(
    ctx: Context, key: str, row: dict[str, object], marker: tuple[str, str] | None, hook: dict[str, object]
) -> str | None:
    """The nudge that holds this turn end, or None (see the module docstring)."""
    turn = str(row.get("floor_prompt") or "")
    floor = row.get("floor")
    if marker is None and turn:
        if floor == "user":
            if _once(ctx, "nudge", key, turn):
                return (
                    "This turn answered a person and ended without a closing line. End it with one line the"
                    " dashboard can show: `SITREP: <what is done>`, `SITREP-QUESTION: <what you need from"
                    " them>` or `SITREP-WAITING: <what you wait for>`."
                )
            return None
        calls = _calls(ctx, key)
        began = turn_started(turn)
        seconds = 0 if began is None else max(0, int(_clock.now() - began))
        if (calls >= EFFORT_CALLS or seconds >= EFFORT_SECONDS) and _once(ctx, "nudge", key, turn):
            return (
                f"This turn did real work ({calls} tool calls, {seconds // 60} min) and ended without a closing"
                " line. If it finished something, end with `SITREP: <headline>` so the others can see it;"
                " if not, just end the turn again."
            )
        return None
    if marker is not None and marker[0] == "done":
        cwd = hook.get("cwd")
        here = cwd if isinstance(cwd, str) and os.path.isdir(cwd) else os.getcwd()
        missing = missing_paths(named_paths(marker[1]), here)
        if missing and _once(ctx, "audit", key, turn + "|" + marker[1]):
            return (
                "The SITREP names files that are not there: "
                + ", ".join(f"`{p}`" for p in missing)
                + ". Create them or correct the SITREP, then end the turn."
            )
    return None


def _record_feedback(ctx: Context, key: str, reason: str) -> None:
    path = ctx.layout.state(f"stop-feedback-{key}.jsonl")
    line = json.dumps({"ts": _clock.stamp(), "reason": reason}, ensure_ascii=False) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass
