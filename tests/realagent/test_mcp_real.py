"""Mail as MCP tools with the real Claude Code (issue 26 item 3; the model is the stand-in, which calls the
tools as a model does, everything else is real): ``sotd comm install --agent-settings`` registers
``sotd mcp`` in the session HOME's ``~/.claude.json`` and its allow rules; a reply holding ``$``, both
quotes, backslashes, a newline and non-ASCII goes through ``mcp__sotd__send`` and is filed byte for byte
with no dialog, from the session's own handle (its private self file, found by the server); a poll through
``mcp__sotd__poll`` moves the cursor (the next one says ``No new messages.``); uninstall gives the files'
bytes back. Run against the pin and, when ``scripts/setup --newest`` installed it, the newest Claude Code.
A second Claude Code that a session's Bash starts (``claude -p``) gets no identity through its own server.
And the shell path it replaces: a row whose wrapper call Claude Code stops at its own dialog (a ``$`` in
the text) is listed ``blocked`` with that command until a person answers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from unittest.mock import patch

import pytest

from tests.conftest import wait_for
from tests.realagent import kit, standin
from tests.realagent.standin import StandIn
from tests.realagent.test_hooks_real import DIALOG, _install, _outside_env, _registry

REPLY = "it costs $5 now; echo rc=$? \"double\" 'single' back\\slash \\ space\nsecond line: é ü 日本 🚀"


TOOLS = {f"mcp__sotd__{n}" for n in ("join", "send", "poll", "unread", "list", "status")}


def _offered(req: standin.Request) -> set[str]:
    return {t["name"] for t in req.body.get("tools", []) or [] if isinstance(t, dict) and "name" in t}


def _deferred(req: standin.Request) -> bool:
    """Whether this Claude Code defers the MCP tools behind its ``ToolSearch`` (2.1.332 does: the tools
    are named in a system message, their schemas load through ``ToolSearch``; 2.1.197 offers them as
    tools). Fails the test when it does neither."""
    if _offered(req) >= TOOLS:
        return False
    said = json.dumps(req.body)
    assert "ToolSearch" in _offered(req) and all(t in said for t in TOOLS), sorted(_offered(req))
    return True


def _calls(deferred: bool, tool: str, when: str) -> list[standin.ScriptStep]:
    """What a model does before it calls ``tool``: with deferred tools, load its schema first."""
    if not deferred:
        return []
    return [standin.tool("ToolSearch", {"query": f"select:{tool}"}, when=when)]


@pytest.mark.parametrize("claude_kit", ["pin", "newest"], indirect=True)
def test_the_real_claude_code_sends_and_polls_through_the_mcp_tools(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome, tmp_path: object
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    kit.comm_folder(comm)
    claude_json = os.path.join(claude_home.home, ".claude.json")
    with open(claude_json, "rb") as f:
        before = f.read()
    r = _install(claude_home, comm, "install", "--agent-settings")
    assert f"Registered the MCP server 'sotd' (sotd mcp) with Claude Code in {claude_json}" in r.stdout, r
    # both folders trusted before either session starts: a running Claude Code (2.1.332 seen) writes its
    # own copy of ~/.claude.json back, and a trust added after its start can be lost (a trust dialog)
    for name in ("alpha", "beta"):
        claude_home.trust(os.path.join(str(tmp_path), name))
    a = start_claude("alpha", extra_env=_outside_env(comm))
    a.wait_idle()
    b = start_claude("beta", extra_env=_outside_env(comm))
    b.wait_idle()
    wait_for(lambda: sorted(_registry(comm)) == ["alpha-testhost", "beta-testhost"], what="both joined")
    a.submit("hello")  # a first turn (the stand-in's "Done."): which tools does this Claude Code offer?
    deferred = _deferred(model.wait_main(1, timeout=60)[0])
    a.wait(lambda t: "Done." in t, "alpha's first turn")
    a.wait_idle()
    send_when = "mcp__sotd__send" if deferred else "tell beta"
    model.add(
        *_calls(deferred, "mcp__sotd__send", "tell beta"),
        standin.tool("mcp__sotd__send", {"to": "beta-testhost", "text": REPLY}, when=send_when),
        standin.text("SITREP: told beta", when="filed -> @beta-testhost"),
    )
    a.submit("tell beta the price")
    a.wait(lambda t: "SITREP: told beta" in t, "alpha's turn end", timeout=90)
    assert DIALOG not in a.text()
    with open(os.path.join(comm, "inbox", "beta-testhost.jsonl"), "rb") as f:
        last = json.loads(f.read().splitlines()[-1])
    assert last["msg"] == REPLY and last["from"] == "alpha-testhost" and last["to"] == "beta-testhost"
    assert _install(claude_home, comm, "unread", "beta-testhost").stdout == "1\n"
    model.add(
        *_calls(deferred, "mcp__sotd__poll", "read your mail"),
        standin.tool("mcp__sotd__poll", {}, when="mcp__sotd__poll" if deferred else "read your mail"),
        standin.tool("mcp__sotd__poll", {}, when="second line: é ü 日本"),
        standin.text("SITREP: read it", when="No new messages."),
    )
    b.submit("read your mail")
    b.wait(lambda t: "SITREP: read it" in t, "beta's turn end", timeout=90)
    assert DIALOG not in b.text()
    results = model.tool_results()
    assert any("[alpha-testhost:alpha] it costs $5 now" in t for t in results), results
    assert "No new messages." in results
    assert _install(claude_home, comm, "unread", "beta-testhost").stdout == "0\n"  # the tool moved the cursor
    p = _install(claude_home, comm, "uninstall")
    assert "The comm folder's mail, registry and self files were left as they are." in p.stdout
    with open(claude_json, "rb") as f:
        after = json.loads(f.read())
    assert "sotd" not in after.get("mcpServers", {}) and before  # Claude Code rewrote it: only ours came out


def test_a_second_claude_code_started_inside_a_session_gets_no_identity_through_the_tool(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome,
    claude_kit: kit.ClaudeKit, tmp_path: object,
) -> None:  # fmt: skip
    """The outer session's Bash starts a second Claude Code (``claude -p``); that one's own ``sotd mcp``
    has two agents above it, so its send is a tool error with the identity check's sentence and nothing
    is filed, while the outer session keeps its handle."""
    comm = os.path.join(str(tmp_path), "comm")
    kit.comm_folder(comm)
    _install(claude_home, comm, "install", "--agent-settings")
    claude_home.allow("Bash(claude -p:*)")
    beta = os.path.join(comm, "self", "beta-session.txt")
    with patch.dict(os.environ, {"SOT_COMM_SELF_FILE": beta}):  # beta: a session outside, by the CLI
        _install(claude_home, comm, "join", "--name", "beta")
    bin_dir = os.path.dirname(claude_kit.exe)
    a = start_claude("alpha", extra_env=_outside_env(comm, {"PATH": bin_dir + ":/usr/bin:/bin"}))
    a.wait_idle()
    wait_for(lambda: "alpha-testhost" in _registry(comm), what="alpha joined")
    model.add(
        standin.bash("claude -p 'inner: tell beta'", when="run the helper"),
        standin.tool(
            "mcp__sotd__send", {"to": "beta", "text": "from the inner agent"}, when="inner: tell beta"
        ),
        standin.text("inner: refused", when="no comm identity"),
        standin.text("SITREP: the helper ran", when="inner: refused"),
    )
    a.submit("run the helper")
    a.wait(lambda t: "SITREP: the helper ran" in t, "alpha's turn end", timeout=90)
    refused = [t for t in model.tool_results() if "FAILED -> @beta" in t]
    assert refused and "this process runs under claude, started inside claude's session, so it has no comm identity" in refused[0], model.tool_results()  # fmt: skip
    inbox = os.path.join(comm, "inbox", "beta.jsonl")
    if os.path.exists(inbox):
        with open(inbox, "rb") as f:
            assert b"from the inner agent" not in f.read()
    assert "alpha-testhost" in _registry(comm)


def test_a_row_stalled_at_claude_codes_own_dialog_is_listed_blocked_with_the_command(
    box: kit.Box, model: StandIn
) -> None:
    """Issue 26 item 4: a ``$`` in a wrapper's text makes Claude Code ask despite the allow rules; the
    permission hook puts the refused command on the row's entry, so ``list`` shows it ``blocked`` with it
    while the row waits for a person; once a person answers it the turn goes on, and its end clears it."""
    box.install()
    box.start()
    assert box.sotd("join", "--name", "you").returncode == 0
    pane = box.spawn("r6")["pane"]
    box.wait_idle(pane)
    wait_for(lambda: (box.row("r6") or {}).get("handle") == "r6", what="row.json naming @r6")
    command = 'comm-send.sh @you "it costs $5 now"'
    model.add(
        standin.bash(command, when="tell you the price"),
        standin.text("SITREP: sent it", when="filed -> @you"),
    )
    box.tmux.send_text(pane, "tell you the price")
    wait_for(lambda: "tell you the price" in box.text(pane), timeout=10, what="the prompt typed")
    box.tmux.send_enter(pane)
    box.wait_screen(pane, lambda t: "Do you want to proceed?" in t, "Claude Code's own dialog", timeout=60)

    def blocked_line() -> str | None:
        """The line under @r6's in ``list`` (its work state) when it reads ``[blocked]``."""
        lines = box.sotd("list").stdout.splitlines()
        at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("@r6 "))
        state = lines[at + 1].strip() if at + 1 < len(lines) else ""
        return state if state.startswith("[blocked]") else None

    line = wait_for(blocked_line, timeout=20, what="@r6 listed blocked")
    assert line.startswith(f"[blocked] permission for Bash: {command} · "), line
    assert "it costs" not in box.sotd("poll").stdout  # nothing was sent while it waited
    box.tmux.send_enter(pane)  # a person answers "1. Yes"
    box.wait_screen(pane, lambda t: "SITREP: sent it" in t, "the turn's end", timeout=60)
    wait_for(lambda: blocked_line() is None, timeout=30, what="@r6 no longer blocked")
    # and the shell path's other trap: bash expanded the "$5" the model wrote (the MCP send files it as is)
    assert box.sotd("poll").stdout.endswith("] [r6:r6] it costs  now\n")
