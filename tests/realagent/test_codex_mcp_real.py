"""Mail as MCP tools with the real Codex (issue 26 items 2 and 3; the model is the Responses stand-in, which
does what a model does with Codex 0.171.0, everything else is real).

Codex 0.171.0 offers MCP tools behind its client-side ``tool_search`` (seen: the first request names
``tool_search`` and no ``mcp__`` function): the model searches, Codex answers with a ``tool_search_output``
holding the namespace ``mcp__sotd`` and its functions, and the model then calls ``send`` / ``poll`` in that
namespace. Codex starts the server with a filtered environment, so install lists the session's comm
variables under ``env_vars`` (without them the first call answered "your sot-comm identity did not
resolve"; seen). Shown here:

- ``codex mcp get sotd`` reads the registered server; after ``uninstall`` Codex has none;
- a session outside a row: a reply holding ``$``, both quotes, backslashes, a newline and non-ASCII is
  filed through the tool byte for byte (the inbox line's ``msg``) from the session's own handle; a poll
  through the tool reads the mail and moves the cursor as ``comm-poll.sh`` does (``unread`` 1, then 0,
  and the next poll says ``No new messages.``);
- a ``spawn --agent codex`` row, woken by mail: its model first pipes ``comm-poll.sh`` (Codex runs that
  in its sandbox, where the wrapper has no identity): the refusal names the cause and the fix (the tools,
  or the plain form), as the start text did; it then polls and answers through the tools with no sandbox
  failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from sotd.cli.comm import sessionstart
from tests.conftest import SOTD, wait_for
from tests.realagent import codex_kit, kit
from tests.realagent.codex_standin import CodexStandIn, bash, text
from tests.realagent.standin import ScriptStep, tool
from tests.realagent.test_codex_rows import APPROVAL
from tests.realagent.test_mcp_real import REPLY

NAMESPACE = "mcp__sotd"
SANDBOX_REFUSAL = "is not shown to run inside that row's capsule"


def search(when: str) -> ScriptStep:
    """What a model does first with Codex 0.171.0: ask ``tool_search`` for the mail tools."""
    return tool("tool_search", {"query": "sotd mail send poll", "limit": 8}, when=when)


def call(name: str, when: str, **args: Any) -> ScriptStep:
    """A call of the sotd server's tool ``name`` in the namespace ``tool_search`` loaded."""
    return tool(name, {"__namespace__": NAMESPACE, **args}, when=when)


def _last_line(comm: str, handle: str) -> dict[str, Any]:
    with open(os.path.join(comm, "inbox", f"{handle}.jsonl"), "rb") as f:
        return dict(json.loads(f.read().splitlines()[-1]))


def _offered_after_search(model: CodexStandIn) -> set[str]:
    names: set[str] = set()
    for r in model.main_requests():
        for it in r.body.get("input", []):
            if isinstance(it, dict) and it.get("type") == "tool_search_output":
                for ns in it.get("tools") or []:
                    if isinstance(ns, dict) and ns.get("name") == NAMESPACE:
                        names.update(t.get("name") for t in ns.get("tools") or [] if isinstance(t, dict))
    return names


def test_the_real_codex_reads_the_registered_server_and_forgets_it_after_uninstall(
    codex_home: codex_kit.CodexHome, tmp_path: Any
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    kit.comm_folder(comm)
    env = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
    env.update(codex_home.env(), SOT_COMM_HOME=comm)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=env, cwd=codex_home.home, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip

    assert run(SOTD, "comm", "install", "--agent-settings").returncode == 0
    got = run(codex_kit.codex_exe(), "mcp", "get", "sotd")
    assert got.returncode == 0, got
    lines = [ln.strip() for ln in got.stdout.splitlines()]
    for want in ("enabled: true", "transport: stdio", f"command: {SOTD}", "args: mcp",
                 "default_tools_approval_mode: approve"):  # fmt: skip
        assert want in lines, got.stdout
    assert run(SOTD, "comm", "uninstall").returncode == 0
    gone = run(codex_kit.codex_exe(), "mcp", "get", "sotd")
    assert gone.returncode != 0 or "sotd" not in gone.stdout, gone


def test_a_codex_session_outside_a_row_sends_and_polls_through_the_tools(
    codex_panes: kit.Panes, codex_home: codex_kit.CodexHome, codex_model: CodexStandIn, tmp_path: Any
) -> None:
    ground = codex_kit.OutsideRow(codex_home, str(tmp_path))
    comm, project, sotd = ground.comm, ground.project, ground.sotd
    you_dir = os.path.join(str(tmp_path), "you")
    os.makedirs(you_dir)
    you = {"SOT_COMM_SELF_FILE": os.path.join(comm, "self", "you-session.txt"), "PWD": you_dir}
    assert sotd("join", "--name", "you", cwd=you_dir, **you).returncode == 0

    pane = codex_panes.start(project, ground.session_env(), [codex_kit.codex_exe()], "alpha")
    codex_kit.wait_idle(lambda: codex_panes.raw(pane))
    codex_model.add(
        search("tell you the price"),
        call("send", f'"name": "{NAMESPACE}"', to="you", text=REPLY),
        text("SITREP: told you", when="filed -> @you"),
    )
    codex_panes.type(pane, "tell you the price")
    wait_for(lambda: "tell you the price" in codex_panes.text(pane), timeout=10, what="the prompt")
    codex_panes.enter(pane)
    codex_panes.wait(pane, lambda t: "SITREP: told you" in t, "the first turn's end", timeout=40)
    assert set(_offered_after_search(codex_model)) == {"join", "send", "poll", "unread", "list", "status"}
    last = _last_line(comm, "you")
    assert (last["msg"], last["from"], last["to"]) == (REPLY, "alpha-testhost", "you")

    assert sotd("send", "@alpha-testhost", "ping from you", cwd=you_dir, **you).stdout == (
        "  filed -> @alpha-testhost\n"
    )
    assert sotd("unread", "alpha-testhost", cwd=you_dir, **you).stdout == "1\n"
    codex_kit.wait_idle(lambda: codex_panes.raw(pane))
    codex_model.add(  # the namespace stays loaded for the rest of the thread: no second search
        call("poll", "read your mail"),
        call("poll", "ping from you"),
        text("SITREP: read it", when="No new messages."),
    )
    codex_panes.type(pane, "read your mail")
    wait_for(lambda: "read your mail" in codex_panes.text(pane), timeout=10, what="the prompt")
    codex_panes.enter(pane)
    codex_panes.wait(pane, lambda t: "SITREP: read it" in t, "the second turn's end", timeout=40)
    results = codex_model.tool_results()
    assert any("[you:you] ping from you" in r for r in results), results
    assert "No new messages." in results[-1], results
    assert sotd("unread", "alpha-testhost", cwd=you_dir, **you).stdout == "0\n"  # the tool moved the cursor
    assert not [r for r in results if SANDBOX_REFUSAL in r or "did not resolve" in r], results


def _ready_row(box: codex_kit.CodexBox, home: codex_kit.CodexHome, name: str) -> str:
    """As ``test_codex_rows._ready_row``, with install's tables kept in ``config.toml`` (the kit rewrites
    the file when it records trust: install again, then the kit keeps what is there)."""
    box.install("--agent-settings")
    assert home.trust_hooks(box.project(name)), "Codex listed none of sotd's hooks"
    box.install("--agent-settings")
    home.adopt()
    with open(home.config_path, encoding="utf-8") as f:
        assert "[mcp_servers.sotd]" in f.read()
    box.start()
    row = box.spawn(name)
    pane = str(row["pane"])
    wait_for(lambda: (box.row(name) or {}).get("handle") == name, timeout=40, what=f"row.json naming @{name}")
    box.wait_idle(pane)
    return pane


def test_a_spawned_codex_row_answers_mail_through_the_tools_with_no_sandbox_failure(
    codex_box: codex_kit.CodexBox, codex_home: codex_kit.CodexHome, codex_model: CodexStandIn
) -> None:
    assert codex_box.sotd("join", "--name", "you").returncode == 0
    pane = _ready_row(codex_box, codex_home, "r5")
    codex_model.add(
        bash("comm-poll.sh 2>&1 | tail -5", when="you have mail"),  # a pipe: Codex sandboxes it
        search("It ran inside Codex's sandbox"),  # the refusal named the tools: the model looks for them
        call("poll", f'"name": "{NAMESPACE}"'),
        call("send", "ping from you", to="@you", text=REPLY),
        call("poll", "filed -> @you"),
        text("SITREP: answered @you", when="No new messages."),
    )
    assert codex_box.sotd("send", "@r5", "ping from you").stdout == "  filed -> @r5\n"
    codex_box.wait_screen(pane, lambda t: "SITREP: answered @you" in t, "the woken turn's end", timeout=60)
    shell, *results = codex_model.tool_results()
    assert SANDBOX_REFUSAL in shell, shell
    assert (
        "send and read mail with the sotd MCP tools (send, poll), or run the script in its plain form"
        in shell
    )
    assert not [r for r in results if SANDBOX_REFUSAL in r], results
    assert any("ping from you" in r for r in results) and "No new messages." in results[-1], results
    started = json.dumps(codex_model.main_requests()[0].body, ensure_ascii=False)
    assert sessionstart.codex_line(True) in started  # the start text said it first
    last = _last_line(codex_box.comm, "you")
    assert (last["msg"], last["from"], last["to"]) == (REPLY, "r5", "you")
    assert APPROVAL not in codex_box.text(pane)
    assert codex_box.sotd("unread", "r5").stdout == "0\n"
