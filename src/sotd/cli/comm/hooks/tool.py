"""``sotd comm hook pre-tool|post-tool``: the PreToolUse and PostToolUse hooks (behaviour 4.3).

``AskUserQuestion``: its PreToolUse sets ``blocked`` with the question (then ``stop``), the PostToolUse of
its answer sets ``prompt`` again (a marker file per tool call links the two). Any other tool call: one
byte on the session's call count (the Stop hook's effort measure) and the working turn's heartbeat
(``status_at`` and ``last_seen``, at most once a minute), short-circuited while the heartbeat tick is
under 10 s old. What would break it: the short-circuit skipping the count, or a refused process
(behaviour 5.1) writing a tick or a marker.
"""

from __future__ import annotations

import os

from sotd import _clock
from sotd.cli.comm.common import Context
from sotd.cli.comm.hooks.shared import (
    ancestry_check,
    hook_input,
    session_key,
    status_event,
    system_message,
    write_tick,
)
from sotd.errors import SotdError
from sotd.formats.layout import safe_component

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.formats.layout import Layout


def run(environ: Mapping[str, str], phase: str) -> int:
    """PreToolUse(AskUserQuestion) -> blocked with the question; PostToolUse of its answer -> prompt."""
    hook = hook_input()
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
    status, why = ancestry_check()
    if status:
        if status != 1 and not ask:
            system_message(f"sot-comm: {why}")
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
        write_tick(marker, _clock.stamp())
        status_event("blocked", question or "a question for the user")
        status_event("stop")
    elif os.path.exists(marker):
        status_event("prompt", extra_env={"COMM_STATUS_ORIGIN": "user"})
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
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
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
    write_tick(ctx.layout.state(f"hb-{key}.tick"), _clock.stamp())
    if not ctx.name:
        return
    from sotd.formats import registry

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = registry.agents_of(doc)
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


def _first_question(tool_input: object) -> str:
    if isinstance(tool_input, dict):
        qs = tool_input.get("questions")
        if isinstance(qs, list) and qs and isinstance(qs[0], dict):
            return str(qs[0].get("question") or "")
        q = tool_input.get("question")
        if isinstance(q, str):
            return q
    return ""
