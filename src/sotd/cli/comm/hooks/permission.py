"""``sotd comm hook permission``: the permission hook sets the ``dialog`` fact (decision D3).

Claude Code's ``PermissionRequest`` (or its permission ``Notification``) and Codex's approval prompt: the
dialog's one-line text goes on this session's registry entry, so the entry reads ``blocked`` with it
until the turn's next event. The hook prints nothing: its stdout would be a permission decision. What
would break it: printing anything (the agent would take it as an answer to the dialog), or a dialog that
outlives its turn (``dialog_prompt`` must be the entry's ``floor_prompt``).
"""

from __future__ import annotations

from sotd import _clock
from sotd.cli.comm.common import Context
from sotd.cli.comm.hooks.shared import ancestry_check, hook_input
from sotd.errors import SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


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


def run(environ: Mapping[str, str]) -> int:
    """The agent's permission hook (Claude Code ``PermissionRequest``, Codex ``PermissionRequest``, or a
    Claude Code permission ``Notification``): set the ``dialog`` fact of this session's entry (D3).

    The dialog belongs to the running turn (``dialog_prompt`` = the entry's ``floor_prompt``) and keeps
    the floor, so the entry reads ``blocked`` with the dialog's text until the next ``prompt``, ``stop``
    or ``interrupted`` of that turn clears it. Prints nothing (an empty answer lets the agent show its
    dialog as usual); a refused process, a session without a registry row, a registry lock not taken
    within 1 s: nothing changes.
    """
    hook = hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    text = dialog_text(hook)
    if text is None:
        return 0
    if ancestry_check()[0]:
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
        agents = registry.agents_of(doc)
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
