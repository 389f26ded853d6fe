"""``sotd comm hook prompt``: the UserPromptSubmit hook (behaviour 4.3, the ``prompt`` event).

Each prompt starts a turn: the event carries the prompt's origin (a person, or a machine: mail, a relay,
a hook's feedback; ``workstate.classify_origin``) and a turn id unique even for two prompts in one second,
whose last 20 characters are its start stamp (the Stop hook's effort nudge reads it). It also empties the
session's tool-call count. What would break it: a turn id without its stamp at the end (the effort nudge
would never fire), or a refused process (behaviour 5.1) touching the count.
"""

from __future__ import annotations

import os

from sotd import _clock
from sotd.cli.comm.hooks.shared import ancestry_check, hook_input, session_key, status_event

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def classify_origin(prompt: str) -> str:
    from sotd import workstate

    return workstate.classify_origin(prompt)


def run(environ: Mapping[str, str]) -> int:
    """UserPromptSubmit: the ``prompt`` event with its origin and turn id."""
    hook = hook_input()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    text = hook.get("prompt")
    origin = classify_origin(text if isinstance(text, str) else "")
    # the turn id: unique even for two prompts in one second; its last 20 characters are its start stamp
    turn = f"{hook.get('prompt_id') or hook.get('session_id') or ''}:{os.urandom(4).hex()}:{_clock.stamp()}"
    extra = {"COMM_STATUS_ORIGIN": origin, "COMM_STATUS_PROMPT_ID": turn}
    if isinstance(hook.get("transcript_path"), str):
        extra["COMM_STATUS_TRANSCRIPT"] = str(hook["transcript_path"])
    if ancestry_check()[0] == 0:  # a refused process changes nothing, not even the tool-call count
        from sotd.formats.layout import Layout

        try:
            os.unlink(Layout.from_env(dict(environ)).state(f"calls-{session_key(environ, hook)}.count"))
        except OSError:
            pass
    status_event("prompt", extra_env=extra)
    return 0
