"""What every agent hook shares (``sotd comm hook <event>``; the hooks are the modules beside this one).

Reading the hook's JSON from stdin within bounds (a hook that cannot use its input goes on without it),
the session's key, the one-line JSON answer on stdout, the process-ancestry check, the small tick files
that make a hold happen once, and a work-state event run in this process (the same code as ``sotd comm
status``, behaviour 4.3). The guarantee of every hook rests here: it never fails its agent and falls open
(no block) when it cannot do its job. What would break it: an answer that is not one JSON line, or a
bounded read that raises on oversized or deeply nested input instead of dropping it (the Stop hook would
not reach its mail gate).
"""

from __future__ import annotations

import os
import sys

from sotd import fastjson as json  # json without re (the hot path)
from sotd.cli.comm.common import err
from sotd.errors import SotdError
from sotd.formats.layout import safe_component

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


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


def read_hook_json() -> dict[str, object]:
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


def answer(obj: dict[str, str]) -> None:
    """One JSON answer on stdout, carried (a path or a name in it may hold bytes that are not UTF-8)."""
    from sotd.text import carry

    sys.stdout.write(carry(json.dumps(obj, ensure_ascii=False)) + "\n")


def hook_input() -> dict[str, object]:
    """The hook's JSON, with the session's private self file (pinned by its SessionStart hook) adopted."""
    hook = read_hook_json()
    adopt_pinned_self_file(hook)
    return hook


# ------------------------------------------------------- the private self file a SessionStart hook pinned
# (here, not in sotd.cli.comm.sessionstart, so the Stop hook at every turn end does not load the start hook)


def session_leaf(session_id: str) -> str:
    """``session-<id>.txt``: the id made safe (bytes outside ``A-Za-z0-9._-`` become ``_``), no ``__`` left
    in it (a leaf with ``__`` would name a row), at most 200 bytes."""
    safe = safe_component(session_id)[:200]
    while "__" in safe:
        safe = safe.replace("__", "_")
    return f"session-{safe}.txt"


def private_slot(environ: Mapping[str, str], session_id: str, self_dir: str) -> str | None:
    """The private self file of a Claude Code session outside a row, or None when there is none to use:
    a pinned ``SOT_COMM_SELF_FILE`` (a launcher's or the daemon's) wins, a row has its own slot, and a
    hook without a ``session_id`` cannot name one. Pure."""
    if environ.get("SOT_COMM_SELF_FILE"):
        return None
    if environ.get("SOT_WORKSPACE_ID", "") not in ("", "nopane"):
        return None
    if not session_id or session_id in (".", ".."):
        return None
    return os.path.join(self_dir, session_leaf(session_id))


def hook_pinned_self_file(environ: Mapping[str, str], hook: Mapping[str, object]) -> str | None:
    """For a hook other than SessionStart: the private self file its session's start hook pinned, when it
    is there (the hook itself is not given ``CLAUDE_ENV_FILE``'s environment)."""
    from sotd.formats.layout import Layout

    sid = hook.get("session_id")
    if not isinstance(sid, str):
        return None
    lay = Layout.from_env(dict(environ))
    path = private_slot(environ, sid, lay.self_dir)
    if path is None:
        return None
    # the file itself, or (after a comm-leave.sh removed it) the start hook's note that it pinned it: the
    # hooks then act as "not joined", as the session's own commands do, never as the shared slot's handle
    if os.path.isfile(path) or os.path.isfile(lay.state(pin_note(path))):
        return path
    return None


CODEX_THREAD = "CODEX_THREAD_ID"  # set by Codex (0.171.0) for every command it runs: its hooks' session_id


def command_pinned_self_file(environ: Mapping[str, str]) -> str | None:
    """For a command a Codex session outside a row runs: the private self file its start hook pinned,
    found from ``CODEX_THREAD_ID`` (the hook's ``session_id``), when the hook's note is there; None
    otherwise (a pinned file, a row, no thread id, no note: the command acts as it would anyway)."""
    from sotd.formats.layout import Layout

    tid = environ.get(CODEX_THREAD, "")
    if not tid:
        return None
    lay = Layout.from_env(dict(environ))
    path = private_slot(environ, tid, lay.self_dir)
    if path is not None and os.path.isfile(lay.state(pin_note(path))):
        return path
    return None


def adopt_command_self_file() -> None:
    """``command_pinned_self_file`` put into this process's environment. Best effort."""
    try:
        path = command_pinned_self_file(os.environ)
    except (OSError, ValueError):
        return
    if path is not None:
        os.environ["SOT_COMM_SELF_FILE"] = path


def pin_note(slot: str) -> str:
    """The name of the start hook's note, under ``state/``, that it pinned ``slot`` for its session."""
    return "pinned-" + os.path.basename(slot)


def adopt_pinned_self_file(hook: Mapping[str, object]) -> None:
    """Put the session's private self file (when there is one) into this process's environment, so the
    hook acts as the handle its session's commands act as. Best effort: a failure leaves the env as is."""
    try:
        path = hook_pinned_self_file(os.environ, hook)
    except (OSError, ValueError):
        return
    if path is not None:
        os.environ["SOT_COMM_SELF_FILE"] = path


def block(reason: str) -> None:
    answer({"decision": "block", "reason": reason})


def system_message(text: str) -> None:
    answer({"systemMessage": text})


def ancestry_check() -> tuple[int, str | None]:
    from sotd import ancestry

    return ancestry.check(dict(os.environ))


def write_tick(path: str, value: str) -> bool:
    from sotd import fsprim

    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fsprim.write_atomic(path, value.encode() + b"\n")
    except OSError:
        return False
    return True


def read_tick(path: str) -> str:
    try:  # never through a link (docs/contract.md, "Never through a link"): a planted one reads as none
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        return os.read(fd, 1 << 12).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def status_event(verb: str, text: str | None = None, extra_env: dict[str, str] | None = None) -> None:
    """Run a work-state event in this process (the same code as ``sotd comm status``)."""
    from sotd.cli.comm import status

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
