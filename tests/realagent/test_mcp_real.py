"""Mail as MCP tools with the real Claude Code (issue 26 item 3; the model is the stand-in, which calls the
tools as a model does, everything else is real): ``sotd comm install --agent-settings`` registers
``sotd mcp`` in the session HOME's ``~/.claude.json`` and its allow rules; a reply holding ``$``, both
quotes, backslashes, a newline and non-ASCII goes through ``mcp__sotd__send`` and is filed byte for byte
with no dialog, from the session's own handle (its private self file, found by the server); a poll through
``mcp__sotd__poll`` moves the cursor (the next one says ``No new messages.``); uninstall gives the files'
bytes back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from tests.conftest import wait_for
from tests.realagent import kit, standin
from tests.realagent.standin import StandIn
from tests.realagent.test_hooks_real import DIALOG, _comm_folder, _install, _outside_env, _registry

REPLY = "it costs $5 now; echo rc=$? \"double\" 'single' back\\slash \\ space\nsecond line: é ü 日本 🚀"


def _offered(model: StandIn) -> set[str]:
    names: set[str] = set()
    for r in model.main_requests():
        for t in r.body.get("tools", []) or []:
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                names.add(t["name"])
    return names


def test_the_real_claude_code_sends_and_polls_through_the_mcp_tools(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome, tmp_path: object
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    _comm_folder(comm)
    claude_json = os.path.join(claude_home.home, ".claude.json")
    with open(claude_json, "rb") as f:
        before = f.read()
    r = _install(claude_home, comm, "install", "--agent-settings")
    assert f"Registered the MCP server 'sotd' (sotd mcp) with Claude Code in {claude_json}" in r.stdout, r
    a = start_claude("alpha", extra_env=_outside_env(comm))
    a.wait_idle()
    b = start_claude("beta", extra_env=_outside_env(comm))
    b.wait_idle()
    wait_for(lambda: sorted(_registry(comm)) == ["alpha-testhost", "beta-testhost"], what="both joined")
    model.add(
        standin.tool("mcp__sotd__send", {"to": "beta-testhost", "text": REPLY}, when="tell beta"),
        standin.text("SITREP: told beta", when="filed -> @beta-testhost"),
    )
    a.submit("tell beta the price")
    a.wait(lambda t: "SITREP: told beta" in t, "alpha's turn end", timeout=90)
    assert DIALOG not in a.text()
    assert {f"mcp__sotd__{n}" for n in ("join", "send", "poll", "unread", "list", "status")} <= _offered(
        model
    )
    with open(os.path.join(comm, "inbox", "beta-testhost.jsonl"), "rb") as f:
        last = json.loads(f.read().splitlines()[-1])
    assert last["msg"] == REPLY and last["from"] == "alpha-testhost" and last["to"] == "beta-testhost"
    model.add(
        standin.tool("mcp__sotd__poll", {}, when="read your mail"),
        standin.tool("mcp__sotd__poll", {}, when="second line: é ü 日本"),
        standin.text("SITREP: read it", when="No new messages."),
    )
    b.submit("read your mail")
    b.wait(lambda t: "SITREP: read it" in t, "beta's turn end", timeout=90)
    assert DIALOG not in b.text()
    results = model.tool_results()
    assert any("[alpha-testhost:alpha] it costs $5 now" in t for t in results), results
    assert "No new messages." in results
    p = _install(claude_home, comm, "uninstall")
    assert "The comm folder's mail, registry and self files were left as they are." in p.stdout
    with open(claude_json, "rb") as f:
        after = json.loads(f.read())
    assert "sotd" not in after.get("mcpServers", {}) and before  # Claude Code rewrote it: only ours came out
