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
from sotd.cli.common import err
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
    from sotd.cli import sessionstart

    sessionstart.adopt_pinned_self_file(hook)
    return hook


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
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def status_event(verb: str, text: str | None = None, extra_env: dict[str, str] | None = None) -> None:
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
