"""``sotd comm hook <event>``: the agent hooks (SessionStart, Stop, UserPromptSubmit, Pre/PostToolUse,
PermissionRequest), one module per hook beside this dispatcher.

Behaviour 3.4 (the Stop hook: ``stop``), 4.3 (the status hooks: ``prompt``, ``tool``) and decision D3
(the permission hook's ``dialog``: ``permission``); ``start`` is SessionStart (``sotd.cli.comm.sessionstart``
does its work). What they share (the bounded input, the answer line, ticks) is ``shared``. Claude Code
runs all of them; Codex runs the Stop, prompt and permission hooks (the same JSON on stdin). A hook never
fails its agent: it always exits 0, and holds a turn only by printing ``{"decision":"block","reason":...}``.
Every path that cannot do its job falls open (no block) rather than trap a session; every hook but
``start`` first adopts the private self file its session's start hook pinned (found from ``session_id``).

Only the module of the hook asked for is imported (the Stop hook runs at every turn end). What would break
it: an exception that escapes ``run`` (the agent would show a hook failure), or a Stop hook fault that
skips the mail gate (``stop.stop_after_error`` runs it once more).
"""

from __future__ import annotations

import os

from sotd.cli.comm.common import err

EVENTS = ("start", "stop", "prompt", "pre-tool", "post-tool", "permission")


def run(argv: list[str]) -> int:
    if not argv or argv[0] not in EVENTS:
        err(
            "usage: sotd comm hook start|stop|prompt|pre-tool|post-tool|permission   (reads the agent's hook "
            "JSON on stdin)"
        )
        return 0
    env = os.environ
    try:
        if argv[0] == "start":
            from sotd.cli.comm.hooks import start

            return start.run(env)
        if argv[0] == "stop":
            from sotd.cli.comm.hooks import stop

            return stop.run(env)
        if argv[0] == "prompt":
            from sotd.cli.comm.hooks import prompt

            return prompt.run(env)
        if argv[0] == "permission":
            from sotd.cli.comm.hooks import permission

            return permission.run(env)
        from sotd.cli.comm.hooks import tool

        return tool.run(env, "pre" if argv[0] == "pre-tool" else "post")
    except Exception as e:  # a hook must never fail its agent
        err(f"sot-comm hook {argv[0]}: {type(e).__name__}: {e}")
        if argv[0] == "stop":
            from sotd.cli.comm.hooks import stop

            stop.stop_after_error(env)
        return 0
