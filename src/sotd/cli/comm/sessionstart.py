"""``sotd comm hook start`` (``comm-session-start.sh``): the ``SessionStart`` hook of Claude Code and Codex.

Issue 11 part 2 items 1 and 4; seed 000 "The self file" ("or any private file a launcher pins").
At a session's start (and again after a resume, ``/clear`` or a compaction) the hook joins the session
with no person or model action, then tells the model in a few lines its handle, how to read and send
mail, and to close each turn with a ``SITREP`` marker (docs/agents.md, "Joining").

- In a row: the daemon pinned the row's slot and set ``SOT_COMM_NAME``, so the join takes that name and
  declares it to the daemon (``row.json`` gets the handle).
- Outside a row, with ``session_id`` and ``CLAUDE_ENV_FILE``: the hook pins a **private** self file for
  this session, ``self/session-<session id>.txt``, writing ``export SOT_COMM_SELF_FILE=…`` into the env
  file (Claude Code runs it before each later Bash command); the other hooks, which do not get that
  environment, find the same file from their ``session_id`` (``hook_pinned_self_file``; the start hook's
  note ``state/pinned-<leaf>`` keeps them on it after a ``comm-leave.sh`` removed it). So two sessions
  on one box never share a slot, and neither un-joins the other. Its leaf has no ``__``, so it names no
  row (identity, behaviour 5). Without the env file the session keeps the shared ``nopane`` slot.
- Outside a row under Codex (no env file: its hooks get none): the same private file, from ``session_id``
  (Codex's thread id). The start hook's note ``state/pinned-<leaf>`` is what pins it: the model's commands
  carry ``CODEX_THREAD_ID`` (the same id), and ``sotd comm`` adopts the file the note names
  (``hooks.shared.command_pinned_self_file``), so the session no longer takes the shell's shared slot
  (issue 27 item 7). Without the note (it could not be written) the session keeps the shared slot.
- A launcher's own ``SOT_COMM_SELF_FILE`` is kept as it is.

Guarantee: the hook never fails its agent (exit 0; a failed join is said in the text, with the command that
recovers). What would break it: pinning a file the session's later commands cannot see (no env file), or a
leaf with ``__`` (it would name a row and be refused).
"""

from __future__ import annotations

import os
import sys

from sotd import fastjson as json  # json without re (the hot path)
from sotd.cli.comm.hooks.shared import pin_note, private_slot  # every hook's (the Stop hook loads no more)
from sotd.errors import EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SKILL = "sot-session-start"


def _sh(v: str) -> str:
    return "'" + v.replace("'", "'\\''") + "'"


def env_file_lines(self_file: str | None, bin_dir: str, path_env: str) -> list[str]:
    """The lines the start hook appends to ``CLAUDE_ENV_FILE``: the pinned self file, and ``bin/`` put first
    on the PATH when it is not on it yet (so the bare names in the texts run). Pure."""
    lines = []
    if self_file is not None:
        lines.append(f"export SOT_COMM_SELF_FILE={_sh(self_file)}")
    if bin_dir not in path_env.split(os.pathsep):
        lines.append(f'export PATH={_sh(bin_dir)}:"$PATH"')
    return lines


def start_text(
    handle: str | None,
    *,
    cmd_dir: str,
    skill: bool,
    problem: list[str] | None = None,
    where: str = "",
    tools: bool = False,
    agent: str | None = None,
) -> str:
    """What the model reads at its session's start (pure). ``cmd_dir``: "" when the scripts are on the
    PATH (bare names), else the folder to prefix. ``skill``: the sot-session-start skill is installed.
    ``tools``: the sotd MCP server is registered (issue 26): one more line names its tools for replies.
    ``agent``: the session's agent; for ``codex`` one more line says which commands its sandbox refuses
    and what to use instead (issue 26 item 4)."""
    poll, send, join = (
        os.path.join(cmd_dir, n) if cmd_dir else n for n in ("comm-poll.sh", "comm-send.sh", "comm-join.sh")
    )
    more = f" More (leaving, getting a lost handle back, conventions): the {SKILL} skill." if skill else ""
    if handle is None:
        why = "\n".join("  " + ln for ln in (problem or ["(no reason was given)"])[:6])
        return (
            "sot-comm: this session could not join at its start:\n"
            f"{why}\n"
            f"Mail to it is not read until it joins; join by hand with {join} --name NAME"
            + (" (or the sotd MCP server's join tool)" if tools else "")
            + f".{more}"
        )
    lines = [
        f"sot-comm: this session is @{handle}{where} — other agent sessions reach it by that handle.",
        f'- Read mail: {poll}. Send: {send} @handle "text" (the answer is `filed -> @handle` or'
        " `FAILED -> @handle: <reason>`; nothing is queued).",
        f"- The line `[sot-comm] you have mail: run comm-poll.sh` means mail waits: run {poll}, act on it,"
        f" and answer its sender with {send}.",
        "- End every turn with one closing line: `SITREP: <what is done>`, `SITREP-QUESTION: <what you"
        " need>` or `SITREP-WAITING: <what you wait for>`.",
    ]
    if tools:
        from sotd.mcp import START_LINE

        lines.append(START_LINE)
    if agent == "codex":
        lines.append(codex_line(tools))
    if more:
        lines.append("-" + more)
    return "\n".join(lines)


def codex_line(tools: bool) -> str:
    """The start text's line for a Codex session: Codex runs a command its rules do not read as plain
    words inside its sandbox, where a row's wrappers have no identity. Pure."""
    use = "use the sotd MCP tools (send, poll), or keep" if tools else "keep"
    return (
        "- Codex runs a command its rules do not read as plain words inside its sandbox, where the mail "
        f"scripts have no identity: {use} the scripts in their plain form, the text in single quotes "
        "(comm-send.sh @handle 'text', comm-poll.sh), with no pipe, redirection, 2>&1 or escaped quotes."
    )


def skill_installed(environ: Mapping[str, str], cwd: str) -> bool:
    home = environ.get("HOME") or os.path.expanduser("~")
    for base in (os.path.join(home, ".claude"), os.path.join(cwd, ".claude")):
        if os.path.isfile(os.path.join(base, "skills", SKILL, "SKILL.md")):
            return True
    return False


def _still_joined() -> bool:
    """Whether this session's self file names a handle whose registry entry is this project's on this host
    (then a compaction, which Claude Code may run in the middle of a turn, needs no new join)."""
    from sotd.cli.comm.common import Context
    from sotd.errors import SotdError
    from sotd.formats import registry

    try:
        ctx = Context()
        doc = registry.read(ctx.layout)
    except (SotdError, OSError):
        return False
    entry = registry.agents_of(doc).get(ctx.name) if doc and ctx.name else None
    return isinstance(entry, dict) and entry.get("root") == ctx.project_root and entry.get("host") == ctx.host


def _context_out(text: str) -> None:
    doc = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")


def _join_quietly() -> tuple[int, list[str], list[str]]:
    """``comm-join.sh`` in this process with its output kept: (status, stdout lines, stderr lines)."""
    import io

    from sotd.cli.comm import join
    from sotd.errors import SotdError

    saved = sys.stdout, sys.stderr
    out_buf, err_buf = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out_buf, err_buf
    try:
        try:
            code = join.run([])
        except SotdError as e:
            err_buf.write(e.message + "\n" + (e.hint + "\n" if e.hint else ""))
            code = e.exit_status or 1
    finally:
        sys.stdout, sys.stderr = saved
    return code, out_buf.getvalue().splitlines(), err_buf.getvalue().splitlines()


def run(environ: Mapping[str, str], hook: Mapping[str, object]) -> int:
    """The SessionStart hook (see the module docstring). Prints one JSON object with the text, or nothing
    for a process that is not its session's own agent."""
    from sotd import ancestry
    from sotd.formats.layout import Layout

    status, why = ancestry.check(dict(environ))
    if status == 1:
        return EXIT_OK  # a sub-agent's session: the outer session holds the handle
    if status:
        _context_out(f"sot-comm: {why}")
        return EXIT_OK
    lay = Layout.from_env(dict(environ))
    cwd = hook.get("cwd") if isinstance(hook.get("cwd"), str) else ""
    sid = hook.get("session_id")
    env_file = environ.get("CLAUDE_ENV_FILE", "")
    # Codex gives its hooks no env file, but its commands carry CODEX_THREAD_ID, the hook's session_id
    agent = ancestry.nearest_agent(ancestry.read_chain()[0])  # also names the tools' line for Codex
    codex = not env_file and agent == "codex"
    pins = bool(env_file) or codex
    slot = private_slot(environ, sid if isinstance(sid, str) else "", lay.self_dir) if pins else None
    lines = env_file_lines(slot, lay.bin_dir, environ.get("PATH", ""))
    on_path = lay.bin_dir in environ.get("PATH", "").split(os.pathsep)
    if env_file and lines:
        try:
            with open(env_file, "a", encoding="utf-8") as f:
                f.write("".join(ln + "\n" for ln in lines))
            on_path = True
        except OSError:
            slot = None  # later commands would not see the pin: keep the shared slot
    if slot is not None:
        from sotd.formats.layout import ensure_home

        ensure_home(lay)
        try:
            with open(lay.state(pin_note(slot)), "w") as f:
                f.write(slot + "\n")
        except OSError:
            if codex:
                slot = (
                    None  # a Codex session's commands find the slot by this note alone: keep the shared one
                )
            # (Claude Code: the hooks still find the file itself while it is there)
        if slot is not None:
            os.environ["SOT_COMM_SELF_FILE"] = slot
    outs: list[str] = []
    errs: list[str] = []
    if hook.get("source") == "compact" and _still_joined():
        code = 0  # a compaction mid-turn: the entry (and its work-state) stays as it is
    else:
        code, outs, errs = _join_quietly()
    skill = skill_installed(environ, str(cwd or os.getcwd()))
    from sotd.mcp import registered

    tools = registered(lay.bin_dir)
    cmd_dir = "" if on_path else lay.bin_dir
    handle, where = None, ""
    if code == 0:
        from sotd.cli.comm.common import Context

        ctx = Context()
        handle, where = ctx.name or None, f" ({ctx.repo} on {ctx.host})"
    if handle is None:
        _context_out(start_text(None, cmd_dir=cmd_dir, skill=skill, problem=errs or outs, tools=tools))
        return EXIT_OK
    _context_out(start_text(handle, cmd_dir=cmd_dir, skill=skill, where=where, tools=tools, agent=agent))
    return EXIT_OK
