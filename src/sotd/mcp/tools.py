"""``sotd/mcp/tools.py``: the tools ``sotd mcp`` offers, and each one's call into the ``sotd comm`` verbs.

Spec: behaviour 1.2 (join), 1.3 (send), 1.5 (poll), 1.6 (unread), 1.7 (list), 1.9 (status); issue 26
item 1. Guarantee: a tool does what its verb does, through the verb's own functions (``send.send``,
``poll.run``, ``unread.run``, ``listing.run``, ``join.run``, ``status.run``: no shell, no second copy of a
rule), in this process, whose parent is the agent: so the identity check (behaviour 5) and the session's
self file apply exactly as for the wrappers, and a second agent below the first gets no identity (a
session's private self file is found as its hooks find it: Claude Code's from ``CLAUDE_CODE_SESSION_ID``,
Codex's from the thread each call's ``_meta`` names). The
result's text is what the verb prints (stdout and stderr in the order written) then, on a failure, the
error's lines as ``sotd.cli.main`` prints them (reason, sentence, hint, after); ``isError`` is a status
other than 0. A send's text goes verbatim (no word splitting, no ``--broadcast`` read out of it).
Bad input (``refusal``: a missing or ill-typed argument, a text over the bound, text UTF-8 cannot carry) is
refused before the verb runs, with the verb's own sentence where it has one: nothing is filed.
What would break it: a verb that prints outside ``sotd.cli.common.out``/``err`` (its line would miss the
result), or a tool that reads its arguments without ``refusal`` first.
"""

from __future__ import annotations

import os
import sys

from sotd.errors import BadArgument, ScriptUsage, SendFailed, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# A send's text bound: the frame a daemon would carry (1 MiB, wire/framing.MAX_LINE) is checked for any
# text longer than this many characters (below it no text can reach the bound, even all escapes).
QUICK_TEXT = 100_000

STATES = ("working", "idle", "blocked", "done", "waiting")  # the declarations (the events are the hooks')

_TEXT = {"type": "string"}

# name -> (title, description, input schema, read only)
TABLE: dict[str, tuple[str, str, dict[str, Any], bool]] = {
    "join": (
        "Join sot-comm (take or confirm your handle)",
        "Take this session's handle in the comm folder, or confirm the one it holds. With no name it "
        "keeps the handle this session already has (or derives one from the project folder and host). "
        "Call it once at the start of a session, and again if another tool says you are not joined. The "
        "answer names your handle, your inbox and who else is registered.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "the handle to take (letters, digits, . _ -)"},
                "expertise": {"type": "string", "description": 'what this session knows, e.g. "python, ci"'},
            },
            "additionalProperties": False,
        },
        False,
    ),
    "send": (
        "Send a message",
        "Send one message to another session's handle, or to every registered handle (broadcast). The "
        "text is delivered exactly as given: quotes, $, backslashes, newlines and any language need no "
        "escaping. The answer is `filed -> @handle` when it was filed, or a tool error `FAILED -> "
        "@handle: <reason>` with the next step; nothing is queued or retried, so act on a failure.",
        {
            "type": "object",
            "properties": {
                "to": {
                    "type": "string",
                    "description": "the recipient's handle, e.g. boss (a leading @ is allowed)",
                },
                "broadcast": {
                    "type": "boolean",
                    "description": "true: one copy to every handle but yours (leave out 'to')",
                },
                "text": {"type": "string", "description": "the message, verbatim"},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        False,
    ),
    "poll": (
        "Read new mail",
        "Show the messages that arrived since you last read, then mark them read (the next poll shows only "
        "newer ones). Each line names the sender; reply with send. `No new messages.` when there are none.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        False,
    ),
    "unread": (
        "Count unread mail",
        "The number of unread messages addressed to you (or to the handle given), without reading or "
        "marking anything. Use poll to read them.",
        {
            "type": "object",
            "properties": {"handle": {"type": "string", "description": "whose inbox (default: yours)"}},
            "additionalProperties": False,
        },
        True,
    ),
    "list": (
        "List registered sessions",
        "Who is registered in this comm folder: each handle, its host and project, whether it is live, its "
        "declared work state, and which row is you.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        True,
    ),
    "status": (
        "Declare your work state",
        "Record what this session is doing, shown to others by list: working, idle, blocked (say on what), "
        "done, or waiting (say for what). The text is optional and kept verbatim.",
        {
            "type": "object",
            "properties": {
                "state": {"type": "string", "enum": list(STATES)},
                "text": {"type": "string", "description": "a short summary, e.g. what blocks you"},
            },
            "required": ["state"],
            "additionalProperties": False,
        },
        False,
    ),
}


def listing(version: str) -> list[dict[str, Any]]:
    """The tools/list entries as ``version`` writes them: ``annotations`` from 2025-03-26, ``title`` from
    2025-06-18 (an older client gets only the fields its revision has). Pure."""
    from sotd.mcp import NAMES
    from sotd.mcp.protocol import at_least

    out = []
    for name in NAMES:
        title, description, schema, read_only = TABLE[name]
        tool: dict[str, Any] = {"name": name, "description": description, "inputSchema": schema}
        if at_least(version, "2025-06-18"):
            tool["title"] = title
        if at_least(version, "2025-03-26"):
            tool["annotations"] = {
                "title": title,
                "readOnlyHint": read_only,
                "destructiveHint": False,
                "idempotentHint": read_only,
                "openWorldHint": False,
            }
        out.append(tool)
    return out


# ---------------------------------------------------------------------------------------- bad input


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _typed(tool: str, args: dict[str, Any], key: str, want: type) -> SotdError | None:
    """``args[key]`` is absent or of the type ``want``, else the refusal. Pure."""
    if key not in args or (
        isinstance(args[key], want) and not (want is not bool and isinstance(args[key], bool))
    ):
        return None
    what = "true or false" if want is bool else "a string"
    return BadArgument(f"ERROR: {tool}'s '{key}' must be {what} (got {_kind(args[key])}); nothing was done")


def uncarried_text(label: str, text: str, what: str) -> SotdError | None:
    """Text holding a code point UTF-8 cannot carry (a lone surrogate, legal in JSON's ``\\ud800``) is
    refused, never changed in silence. Pure."""
    from sotd.text import uncarried

    bad = uncarried(text)
    if bad is None:
        return None
    return SendFailed(
        f"{label}: the text holds U+{ord(bad):04X} (half of a surrogate pair), which UTF-8 cannot carry; "
        f"{what}"
    )


def too_long(label: str, target: str, text: str, broadcast: bool) -> SotdError | None:
    """A send whose ``comm.file`` frame would outgrow the wire's 1 MiB line bound, or None. Measured with
    the longest handle as sender, so a text that passes fits whichever route files it. Pure."""
    if len(text) <= QUICK_TEXT:
        return None
    from sotd.wire import framing, payloads

    payload = payloads.comm_file_payload("x" * 64, target or "x" * 64, text, broadcast=broadcast, expires=0.0)
    n = framing.request_length(payloads.COMM_FILE, payload)
    if n <= framing.MAX_LINE:
        return None
    return SendFailed(
        f"{label}: the message is too long to send: its frame would be {n} bytes, over the "
        f"{framing.MAX_LINE}-byte line bound (send it in parts); nothing was sent"
    )


def refusal(tool: str, args: object) -> SotdError | None:
    """The bad input of one call, refused before anything runs, or None (go). Pure."""
    if not isinstance(args, dict):
        return BadArgument(
            f"ERROR: {tool}'s arguments must be an object (got {_kind(args)}); nothing was done"
        )
    keys = TABLE[tool][2]["properties"]
    for key in args:
        if key not in keys:
            known = ", ".join(keys) or "none"
            return BadArgument(
                f"ERROR: {tool} has no argument '{key}' (its arguments: {known}); nothing was done"
            )
    if tool == "send":
        for key, want in (("to", str), ("text", str), ("broadcast", bool)):
            bad = _typed(tool, args, key, want)
            if bad is not None:
                return bad
        from sotd.cli.comm import send

        broadcast = bool(args.get("broadcast"))
        target = _handle(args["to"]) if "to" in args else None
        text = args.get("text", "")
        if broadcast and target is not None:
            return ScriptUsage(
                "no target; use @name or --broadcast (give either 'to' or broadcast, not both)"
            )
        refused = send.usage_refusal(broadcast, target, text, "sotd comm send")
        if refused is not None:
            return refused
        label = "FAILED -> --broadcast" if broadcast else f"FAILED -> @{target}"
        return uncarried_text(label, text, "nothing was sent") or too_long(
            label, target or "", text, broadcast
        )
    for key in keys:
        bad = _typed(tool, args, key, str)
        if bad is not None:
            return bad
    if tool == "status":
        state = args.get("state")
        if state not in STATES:
            from sotd.text import inert

            return BadArgument(
                f"ERROR: status's 'state' must be one of {'|'.join(STATES)} (got '{inert(str(state))}'); "
                "nothing was written"
            )
        return uncarried_text("sotd comm status", args.get("text", ""), "nothing was written")
    if tool == "join":
        return uncarried_text(
            "sotd comm join", args.get("expertise", "") + args.get("name", ""), "nothing was written"
        )
    return None


def _handle(to: str) -> str:
    return to[1:] if to.startswith("@") else to


# ------------------------------------------------------------------------------------------ the calls


def argv_of(tool: str, args: dict[str, Any]) -> list[str]:
    """The verb's argv for a checked call (every tool but send, which calls ``send.send``). Pure."""
    if tool == "join":
        argv = []
        if "name" in args:
            argv += ["--name", args["name"]]
        if "expertise" in args:
            argv += ["--expertise", args["expertise"]]
        return argv
    if tool == "unread":
        return [args["handle"]] if "handle" in args else []
    if tool == "status":
        return [args["state"], args["text"]] if "text" in args else [args["state"]]
    return []


def _run_verb(tool: str, args: dict[str, Any]) -> int:
    """The verb's own function for a checked call (each imported on its own branch: a call loads only
    its verb)."""
    if tool == "send":
        from sotd.cli.comm import send

        target = _handle(args["to"]) if "to" in args else None
        return send.send(bool(args.get("broadcast")), target, args["text"])
    argv = argv_of(tool, args)
    if tool == "join":
        from sotd.cli.comm import join

        return join.run(argv)
    if tool == "poll":
        from sotd.cli.comm import poll

        return poll.run(argv)
    if tool == "unread":
        from sotd.cli.comm import unread

        return unread.run(argv)
    if tool == "list":
        from sotd.cli.comm import listing

        return listing.run(argv)
    from sotd.cli.comm import status

    return status.run(argv)


def call(tool: str, args: object, meta: dict[str, Any] | None = None) -> tuple[str, bool]:
    """Run one checked tool call in this process: (the result's text, whether it is an error). The verb's
    lines are caught from ``sys.stdout``/``sys.stderr`` (one buffer, in the order written); an error is
    added as ``sotd.cli.main`` prints it. A fault of our own is said in one line and logged on stderr."""
    refused = refusal(tool, args)
    if refused is not None:
        _log(f"{tool}: refused: {refused.message}")
        return _lines_of(refused), True
    assert isinstance(args, dict)
    adopt_session_slot(os.environ)
    slot = codex_slot(os.environ, codex_thread(meta or {}))
    if slot is not None:  # this call's thread's own slot, for this call only (a Codex has several threads)
        os.environ["SOT_COMM_SELF_FILE"] = slot
        try:
            return _called(tool, args)
        finally:
            os.environ.pop("SOT_COMM_SELF_FILE", None)
    return _called(tool, args)


def _called(tool: str, args: dict[str, Any]) -> tuple[str, bool]:
    import io

    buf = io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = buf
    try:
        status = _run_verb(tool, args)
    except SotdError as e:
        buf.write(_lines_of(e) + "\n")
        status = e.exit_status
    except Exception as e:  # a fault of ours: said, logged, and the server goes on for the next call
        import traceback

        sys.stdout, sys.stderr = saved
        _log(f"{tool}: internal error: {traceback.format_exc()}")
        return f"sotd mcp: {tool} failed inside sotd ({type(e).__name__}: {e}); see the agent's MCP log", True
    finally:
        sys.stdout, sys.stderr = saved
    text = buf.getvalue().rstrip("\n")
    if not text and status == 0:
        text = _quiet_success(tool, args)
    return text, status != 0


def adopt_session_slot(environ: dict[str, str] | os._Environ[str]) -> None:
    """A Claude Code session outside a row acts through its private self file, which its start hook
    pinned for the session's shell (``CLAUDE_ENV_FILE``, not seen by an MCP server): the server finds the
    same slot from ``CLAUDE_CODE_SESSION_ID`` (``hooks.shared.private_slot``), as the other hooks do, once
    the start hook has pinned it. A pinned self file or a row's own slot is never replaced."""
    sid = environ.get("CLAUDE_CODE_SESSION_ID", "")
    if not sid or environ.get("SOT_COMM_SELF_FILE"):
        return
    from sotd.cli.comm.hooks.shared import pin_note, private_slot
    from sotd.formats.layout import Layout

    lay = Layout.from_env(dict(environ))
    slot = private_slot(environ, sid, lay.self_dir)
    if slot is not None and os.path.exists(lay.state(pin_note(slot))):
        environ["SOT_COMM_SELF_FILE"] = slot


def codex_thread(meta: dict[str, Any]) -> str | None:
    """The Codex thread a call comes from: ``_meta["x-codex-turn-metadata"]["thread_id"]``, which Codex
    (0.171.0) sends with every tools/call (it passes the server no thread id in its environment); None
    for another client. Data from the client: only a non-empty string of at most 200 characters. Pure."""
    turn = meta.get("x-codex-turn-metadata")
    tid = turn.get("thread_id") if isinstance(turn, dict) else None
    return tid if isinstance(tid, str) and 0 < len(tid) <= 200 else None


def codex_slot(environ: dict[str, str] | os._Environ[str], thread: str | None) -> str | None:
    """The private self file the start hook pinned for Codex thread ``thread`` (outside a row; its note in
    ``state/`` says it did), or None: no thread, a pinned self file or a row's slot (kept), no note."""
    if thread is None or environ.get("SOT_COMM_SELF_FILE"):
        return None
    from sotd.cli.comm.hooks.shared import pin_note, private_slot
    from sotd.formats.layout import Layout

    lay = Layout.from_env(dict(environ))
    slot = private_slot(environ, thread, lay.self_dir)
    if slot is not None and os.path.exists(lay.state(pin_note(slot))):
        return slot
    return None


def _quiet_success(tool: str, args: dict[str, Any]) -> str:
    """What a verb that prints nothing on success (status) is answered with, so the model sees it went."""
    if tool == "status":
        return f"state recorded: {args['state']}"
    return "done"


def _lines_of(e: SotdError) -> str:
    from sotd.text import inert

    return "\n".join(inert(line, lines=True) for line in e.lines())


def _log(line: str) -> None:
    """One line on the server's stderr (the agent's MCP log)."""
    try:
        os.write(2, f"sotd mcp: {line}\n".encode("utf-8", "replace"))
    except OSError:
        pass
