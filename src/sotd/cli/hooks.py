"""``sotd comm hook <event>``: the agent hooks (SessionStart, Stop, UserPromptSubmit, Pre/PostToolUse,
PermissionRequest).

Behaviour 3.4 (the Stop hook), 4.3 (the status hooks) and decision D3 (the permission hook's ``dialog``).
Claude Code runs all of them; Codex runs the Stop, prompt and permission hooks (the same JSON on stdin).
A hook never fails its agent: it always exits 0, and holds a turn only by printing
``{"decision":"block","reason":...}``. Every path that cannot do its job falls open (no block) rather
than trap a session. The SessionStart hook is ``sotd.cli.sessionstart``; every other hook first adopts the
private self file its session's start hook pinned (found from ``session_id``).

After the mail gate and the closing markers, the Stop hook nudges (docs/agents.md, "Nudges"): a turn a
person started that ends without a marker is held once to add one; a machine turn of real effort (at
least ``EFFORT_CALLS`` tool calls or ``EFFORT_SECONDS``) gets one softly worded hold; a ``SITREP:`` that
names files (backticked paths with a ``/``) which do not exist is held once. Each is once per turn (a tick
holding the turn id), fails open when its tick cannot be written, applies only in a row unless
``nudges = on`` in the comm folder's ``hooks.conf`` (``nudges_apply``), never holds a ``stop_hook_active``
continuation, and stands down with ``SOT_COMM_NUDGES=off``. Tool calls are counted by the PostToolUse hook, one byte each appended to
``state/calls-<key>.count``, which the prompt hook empties.
"""

from __future__ import annotations

import os
import sys

from sotd import _clock
from sotd import fastjson as json  # json without re (the hot path)
from sotd.cli.common import Context, err
from sotd.errors import InboxBusy, RegistryUnreadable, SotdError
from sotd.formats.layout import safe_component

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.formats.layout import Layout

EFFORT_CALLS = 8
EFFORT_SECONDS = 300
MAX_AUDITED = 20  # paths named in one SITREP that the audit looks at

MACHINE_PREFIXES = (
    "[SYSTEM NOTIFICATION",
    "[relay] from",
    "[sot-comm] ",
    "Another Claude session sent a message",
    "Stop hook feedback:",
)


def session_key(environ: Mapping[str, str], hook: dict[str, object]) -> str:
    """CLAUDE_CODE_SESSION_ID (or the hook's session_id), else the row, else the transcript, else the parent."""
    key = environ.get("CLAUDE_CODE_SESSION_ID") or str(hook.get("session_id") or "")
    if not key:
        ws = environ.get("SOT_WORKSPACE_ID", "")
        if ws and ws != "nopane":
            key = ws
    if not key:
        transcript = str(hook.get("transcript_path") or environ.get("COMM_STATUS_TRANSCRIPT") or "")
        key = os.path.basename(transcript)
    if not key:
        key = str(os.getppid())
    return safe_component(key)


HOOK_INPUT_MAX = 8 << 20  # bytes of hook JSON a hook reads; past it the input is not used (drained)
HOOK_DEPTH_MAX = 64  # arrays and objects nested deeper than this: the input is not used
_DRAIN_MAX = 256 << 20  # at most this much of an oversized input is read away before the hook goes on


def json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in ``data`` (strings skipped; brackets only counted). Pure."""
    import re

    outside = re.sub(rb'"(?:[^"\\\\]|\\\\.)*"', b"", data)
    depth = deepest = 0
    for m in re.finditer(rb"[\[\]{}]", outside):
        depth += 1 if m.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def parse_hook_input(data: bytes, *, whole: bool) -> tuple[dict[str, object], str | None]:
    """The hook's JSON object and None, or ``{}`` and why the input cannot be used (logged by the caller).

    ``whole`` is False when more than ``HOOK_INPUT_MAX`` bytes came. Strings are carried
    (``sotd.text.loads``), so nothing a hook stores from its input holds text UTF-8 cannot encode. Pure.
    """
    if not whole:
        return {}, f"the hook input is larger than {HOOK_INPUT_MAX} bytes"
    if not data.strip():
        return {}, None
    # nesting is never deeper than the count of openers, so only an input with that many needs the scan
    if data.count(b"[") + data.count(b"{") > HOOK_DEPTH_MAX and json_depth(data) > HOOK_DEPTH_MAX:
        return {}, f"the hook input nests arrays or objects deeper than {HOOK_DEPTH_MAX} levels"
    from sotd.text import loads

    try:
        obj = loads(data)
    except (ValueError, RecursionError) as e:
        return {}, f"the hook input is not JSON ({type(e).__name__})"
    if not isinstance(obj, dict):
        return {}, "the hook input is not a JSON object"
    return obj, None


def _read_hook_json() -> dict[str, object]:
    """Stdin as the hook's JSON object (``{}`` when it cannot be used: the reason goes to stderr, the hook
    goes on with what it knows from its environment and its self file)."""
    data, whole = b"", True
    try:
        if not sys.stdin.isatty():
            data = sys.stdin.buffer.read(HOOK_INPUT_MAX + 1)
            if len(data) > HOOK_INPUT_MAX:
                whole = False
                drained = 0
                while drained < _DRAIN_MAX and sys.stdin.buffer.read(1 << 16):
                    drained += 1 << 16
    except (OSError, ValueError, AttributeError) as e:
        err(f"sot-comm hook: the hook input could not be read ({e}); going on without it")
        return {}
    obj, why = parse_hook_input(data, whole=whole)
    if why:
        err(f"sot-comm hook: {why}; going on without it")
    return obj


def _answer(obj: dict[str, str]) -> None:
    """One JSON answer on stdout, carried (a path or a name in it may hold bytes that are not UTF-8)."""
    from sotd.text import carry

    sys.stdout.write(carry(json.dumps(obj, ensure_ascii=False)) + "\n")


def _hook_input() -> dict[str, object]:
    """The hook's JSON, with the session's private self file (pinned by its SessionStart hook) adopted."""
    hook = _read_hook_json()
    from sotd.cli import sessionstart

    sessionstart.adopt_pinned_self_file(hook)
    return hook


def _block(reason: str) -> None:
    _answer({"decision": "block", "reason": reason})


def _system_message(text: str) -> None:
    _answer({"systemMessage": text})


def _identity() -> tuple[int, str | None]:
    from sotd import identity

    return identity.check(dict(os.environ))


def _write_tick(path: str, value: str) -> bool:
    from sotd.formats import atomic

    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        atomic.write_atomic(path, value.encode() + b"\n")
    except OSError:
        return False
    return True


def _read_tick(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _registry_row(ctx: Context) -> tuple[dict[str, object] | None, bool]:
    """(this session's registry row or None, registry unreadable)."""
    from sotd.formats import registry

    try:
        doc = registry.read(ctx.layout)
    except RegistryUnreadable:
        return None, True
    agents = doc.get("agents") if doc else None
    row = agents.get(ctx.name) if isinstance(agents, dict) and ctx.name else None
    return (row if isinstance(row, dict) else None), False


def _status(verb: str, text: str | None = None, extra_env: dict[str, str] | None = None) -> None:
    """Run a work-state event in this process (the same code as ``sotd comm status``)."""
    from sotd.cli import status

    saved = dict(os.environ)
    if extra_env:
        # an environment cannot hold NUL: such a value (from the hook's input) is left out, not fatal
        os.environ.update({k: v for k, v in extra_env.items() if "\0" not in v})
    try:
        status.run([verb] if text is None else [verb, text])
    except (SotdError, OSError):
        pass
    finally:
        os.environ.clear()
        os.environ.update(saved)


def mail_gate(ctx: Context, key: str, stop_hook_active: bool) -> str | None:
    """The first check of every turn end: the block reason when directed mail is unread, else None."""
    from sotd.cli.poll import read_batch
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
        if _read_tick(fault_tick) != marker and _write_tick(fault_tick, marker):
            prefix = marker + "\n"
            if batch is None:
                return prefix.rstrip("\n")
    if batch is None:
        return None
    if inbox.count_directed(batch.new, name) <= 0:
        return prefix.rstrip("\n") or None
    tick = ctx.layout.state(f"mail-{key}.tick")
    total = str(batch.total)
    if _read_tick(tick) == total:
        return prefix.rstrip("\n") or None
    if not _write_tick(tick, total):
        return None  # fail open: a block we cannot remember would repeat every turn
    return prefix + f"New sot-comm mail for @{name} — run comm-poll.sh now, act on it, then end the turn."


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


def stop(environ: Mapping[str, str]) -> int:
    hook = _hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    status, why = _identity()
    if status == 1:
        return 0
    if status:
        _system_message(f"sot-comm: {why}")
        return 0
    try:
        ctx = Context()
    except SotdError as e:
        _system_message(f"sot-comm: {e.message}")
        return 0
    row, unreadable = _registry_row(ctx)
    if not ctx.name or (row is None and not unreadable):
        _status("stop")
        return 0
    key = session_key(environ, hook)
    from sotd.cli import turnend  # the hook decides first, then writes the registry once (issue 17)

    reason = mail_gate(ctx, key, bool(hook.get("stop_hook_active")))
    if reason:
        turnend.write(ctx, [], mark=row is not None)
        _block(reason)
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
        _block(nudge)
        _record_feedback(ctx, key, nudge)
    return 0


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
    return _read_tick(tick) != value and _write_tick(tick, value)


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
    from sotd.cli import sessionstart

    return nudges_apply(
        env_switch=environ.get("SOT_COMM_NUDGES", ""),
        setting=hook_setting(os.path.join(lay.home, "hooks.conf"), "nudges", NUDGE_SETTINGS),
        in_row=sessionstart.in_row(environ),
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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def classify_origin(prompt: str) -> str:
    from sotd import workstate

    return workstate.classify_origin(prompt)


def prompt(environ: Mapping[str, str]) -> int:
    """UserPromptSubmit: the ``prompt`` event with its origin and turn id."""
    hook = _hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    text = hook.get("prompt")
    origin = classify_origin(text if isinstance(text, str) else "")
    # the turn id: unique even for two prompts in one second; its last 20 characters are its start stamp
    turn = f"{hook.get('prompt_id') or hook.get('session_id') or ''}:{os.urandom(4).hex()}:{_clock.stamp()}"
    extra = {"COMM_STATUS_ORIGIN": origin, "COMM_STATUS_PROMPT_ID": turn}
    if isinstance(hook.get("transcript_path"), str):
        extra["COMM_STATUS_TRANSCRIPT"] = str(hook["transcript_path"])
    if _identity()[0] == 0:  # a refused process changes nothing, not even the tool-call count
        from sotd.formats.layout import Layout

        try:
            os.unlink(Layout.from_env(dict(environ)).state(f"calls-{session_key(environ, hook)}.count"))
        except OSError:
            pass
    _status("prompt", extra_env=extra)
    return 0


def tool(environ: Mapping[str, str], phase: str) -> int:
    """PreToolUse(AskUserQuestion) -> blocked with the question; PostToolUse of its answer -> prompt."""
    hook = _hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    ask = hook.get("tool_name") == "AskUserQuestion"
    if not ask and phase == "pre":
        return 0
    key = session_key(environ, hook)
    from sotd.formats.layout import Layout

    lay = Layout.from_env(dict(environ))
    if not ask and _hb_fresh(lay, key):
        _count_call(lay, key)  # this session passed the identity check under 10 s ago
        return 0  # the heartbeat short-circuits before anything else (4.3: tick < 10 s old)
    # A refused process changes nothing under the comm folder, not even a tick or a marker (behaviour 5.1).
    status, why = _identity()
    if status:
        if status != 1 and not ask:
            _system_message(f"sot-comm: {why}")
        return 0
    try:
        ctx = Context()
    except SotdError:
        return 0
    if not ask:
        _count_call(lay, key)
        _heartbeat(ctx, key)
        return 0
    tool_id = safe_component(str(hook.get("tool_use_id") or "none"))
    marker = ctx.layout.state(f"askq-{tool_id}.marker")
    if phase == "pre":
        question = _first_question(hook.get("tool_input"))
        _write_tick(marker, _clock.stamp())
        _status("blocked", question or "a question for the user")
        _status("stop")
    elif os.path.exists(marker):
        _status("prompt", extra_env={"COMM_STATUS_ORIGIN": "user"})
        try:
            os.unlink(marker)
        except OSError:
            pass
    return 0


def _count_call(lay: Layout, key: str) -> None:
    """One byte appended to ``state/calls-<key>.count`` (best effort): the Stop hook's effort measure."""
    try:
        fd = os.open(
            lay.state(f"calls-{key}.count"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return
    try:
        os.write(fd, b".")
    except OSError:
        pass
    finally:
        os.close(fd)


def _hb_fresh(lay: Layout, key: str) -> bool:
    """Whether this session's heartbeat tick is under 10 s old (the PostToolUse hook then does nothing)."""
    tick = lay.state(f"hb-{key}.tick")
    try:
        return _clock.now() - os.stat(tick).st_mtime < 10
    except OSError:
        return False


def _heartbeat(ctx: Context, key: str) -> None:
    """Any other tool call: refresh status_at and last_seen of a working turn, at most once a minute."""
    _write_tick(ctx.layout.state(f"hb-{key}.tick"), _clock.stamp())
    if not ctx.name:
        return
    from sotd.formats import registry

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = doc["agents"]
        row = agents.get(ctx.name) if isinstance(agents, dict) else None
        if not isinstance(row, dict) or not row.get("floor"):
            return False, None
        if _clock.age_of(row.get("status_at")) < 60:
            return False, None
        row["status_at"] = row["last_seen"] = _clock.stamp()
        return True, None

    try:
        registry.update(ctx.layout, ctx.host, change, bound=0.0)
    except (SotdError, OSError):
        pass


DIALOG_MAX = 160  # characters of a dialog's text kept for the summary
_DETAIL_KEYS = ("command", "file_path", "path", "url", "description")
_DIALOG_NOTIFICATIONS = ("permission_prompt", "elicitation_dialog")


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= DIALOG_MAX else flat[: DIALOG_MAX - 1] + "…"


def dialog_text(hook: dict[str, object]) -> str | None:
    """The text of the dialog a permission hook reports (decision D3), or None when it shows none.

    A ``PermissionRequest`` (Claude Code's, or Codex's approval prompt): ``permission for <tool>: <what>``,
    ``<what>`` being the tool input's command, file path, path, URL or description, the first one given;
    ``permission for <tool>`` without one. A Claude Code ``Notification`` counts only when it announces a
    permission or choice dialog (``notification_type`` ``permission_prompt``/``elicitation_dialog``, or,
    from a release that sends no type, a message that mentions permission): its message. Whitespace runs
    become one space; at most ``DIALOG_MAX`` characters.
    """
    if hook.get("hook_event_name") == "Notification":
        message = hook.get("message")
        kind = hook.get("notification_type")
        text = message if isinstance(message, str) else ""
        if kind in _DIALOG_NOTIFICATIONS or (kind is None and "permission" in text.lower()):
            return _one_line(text) or "a permission dialog"
        return None
    tool = hook.get("tool_name")
    tool_s = " ".join(tool.split()) if isinstance(tool, str) else ""
    detail = ""
    tool_input = hook.get("tool_input")
    if isinstance(tool_input, dict):
        for k in _DETAIL_KEYS:
            v = tool_input.get(k)
            if isinstance(v, str) and v.strip():
                detail = v
                break
    if not tool_s:
        return _one_line(detail) if detail else "a permission dialog"
    return _one_line(f"permission for {tool_s}: {detail}" if detail else f"permission for {tool_s}")


def permission(environ: Mapping[str, str]) -> int:
    """The agent's permission hook (Claude Code ``PermissionRequest``, Codex ``PermissionRequest``, or a
    Claude Code permission ``Notification``): set the ``dialog`` fact of this session's entry (D3).

    The dialog belongs to the running turn (``dialog_prompt`` = the entry's ``floor_prompt``) and keeps
    the floor, so the entry reads ``blocked`` with the dialog's text until the next ``prompt``, ``stop``
    or ``interrupted`` of that turn clears it. Prints nothing (an empty answer lets the agent show its
    dialog as usual); a refused process, a session without a registry row, a registry lock not taken
    within 1 s: nothing changes.
    """
    hook = _hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    text = dialog_text(hook)
    if text is None:
        return 0
    if _identity()[0]:
        return 0  # silent even for an unreadable ancestry: this hook's stdout is a permission decision
    try:
        ctx = Context()
    except SotdError:
        return 0
    name = ctx.name
    if not name:
        return 0
    from sotd import workstate
    from sotd.formats import registry

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = doc["agents"]
        entry = agents.get(name) if isinstance(agents, dict) else None
        if not isinstance(agents, dict) or not isinstance(entry, dict):
            return False, None
        turn = entry.get("floor_prompt")
        agents[name] = workstate.apply(
            entry,
            "dialog",
            text=text,
            origin="machine",
            prompt_id=turn if isinstance(turn, str) else "",
            now_stamp=_clock.stamp(),
        )
        return True, None

    try:
        registry.update(ctx.layout, ctx.host, change, bound=1.0)
    except (SotdError, OSError):
        pass
    return 0


def _first_question(tool_input: object) -> str:
    if isinstance(tool_input, dict):
        qs = tool_input.get("questions")
        if isinstance(qs, list) and qs and isinstance(qs[0], dict):
            return str(qs[0].get("question") or "")
        q = tool_input.get("question")
        if isinstance(q, str):
            return q
    return ""


def session_start(environ: Mapping[str, str]) -> int:
    """SessionStart: join this session and tell the model its handle (``sotd.cli.sessionstart``)."""
    hook = _read_hook_json()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    from sotd.cli import sessionstart

    return sessionstart.run(environ, hook)


def run(argv: list[str]) -> int:
    if not argv or argv[0] not in ("start", "stop", "prompt", "pre-tool", "post-tool", "permission"):
        err(
            "usage: sotd comm hook start|stop|prompt|pre-tool|post-tool|permission   (reads the agent's hook "
            "JSON on stdin)"
        )
        return 0
    env = os.environ
    try:
        if argv[0] == "start":
            return session_start(env)
        if argv[0] == "stop":
            return stop(env)
        if argv[0] == "prompt":
            return prompt(env)
        if argv[0] == "permission":
            return permission(env)
        return tool(env, "pre" if argv[0] == "pre-tool" else "post")
    except Exception as e:  # a hook must never fail its agent
        err(f"sot-comm hook {argv[0]}: {type(e).__name__}: {e}")
        if argv[0] == "stop":
            stop_after_error(env)
        return 0


def stop_after_error(environ: Mapping[str, str]) -> None:
    """The Stop hook failed on the way (odd input, a bug): it still runs the mail gate from what it can know
    (the handle in this session's self file), and says in a ``systemMessage`` when even that fails, so a
    turn with unread mail is never let go in silence."""
    try:
        if _identity()[0]:
            return  # a refused process does nothing (the refusal was the normal path's to say)
        ctx = Context()
        if not ctx.name:
            return
        reason = mail_gate(ctx, session_key(environ, {}), False)
    except Exception as e:
        _system_message(
            f"sot-comm: the Stop hook could not check this session's mail ({type(e).__name__}: {e}); "
            "run comm-poll.sh to check by hand"
        )
        return
    if reason:
        _block(reason)
