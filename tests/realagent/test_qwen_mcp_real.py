"""A third agent speaks mail through ``sotd mcp`` (issue 26 item 3): Qwen Code from the npm registry (the
version in ``scripts/qwen-code.pin``, installed by ``scripts/setup`` into ``.agents/qwen-code``), which takes
an OpenAI-compatible base URL and reads MCP servers from its ``~/.qwen/settings.json``. The model is the
Chat Completions stand-in on 127.0.0.1 (``chat_standin``); Qwen Code, its MCP client and sotd are real.

Qwen Code 0.24.4 defers MCP tools (seen): it names ``mcp__sotd__join`` … in a system reminder and offers
``tool_search`` (load a schema: ``select:<names>``) and ``tool_call`` (call a deferred tool by name with
its arguments); the stand-in does exactly what a model does with that. Shown, in two headless runs
(``qwen "<prompt>"``): the session joins as ``@gamma`` through the tool, sends a reply holding ``$``, both
quotes, backslashes, a newline and non-ASCII (filed byte for byte), then reads a message through the
poll tool, and the next poll says ``No new messages.`` (the cursor moved, as with ``comm-poll.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SOTD
from tests.realagent import kit, standin
from tests.realagent.chat_standin import MODEL, ChatStandIn
from tests.realagent.test_mcp_real import REPLY

PIN_FILE = os.path.join(kit.TOP, "scripts", "qwen-code.pin")
PREFIX = os.path.join(kit.TOP, ".agents", "qwen-code")
ERROR_FILE = os.path.join(kit.TOP, ".agents", "qwen-code.error")


def qwen_exe() -> str:
    """The pinned ``qwen`` (``qwen --version`` prints the bare version); else ``kit.NotInstalled``."""
    want = kit.read_pin(PIN_FILE)
    return kit.pinned_exe("Qwen Code", PREFIX, ERROR_FILE, "qwen", want, lambda got: got == want)


@pytest.fixture
def chat_model() -> Iterator[ChatStandIn]:
    s = ChatStandIn().start()
    yield s
    s.stop()


def _settings(home: str) -> None:
    """What a person writes to use Qwen Code with the stand-in and sotd's server: the OpenAI-compatible
    provider, the server (``trust``: its calls need no confirmation), and the managed memory off (its
    extra model calls after each run would answer from the script)."""
    os.makedirs(os.path.join(home, ".qwen"), exist_ok=True)
    doc = {
        "security": {"auth": {"selectedType": "openai"}},
        "mcpServers": {"sotd": {"command": SOTD, "args": ["mcp"], "trust": True}},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        "general": {"disableAutoUpdate": True},
        "telemetry": {"enabled": False},
    }
    with open(os.path.join(home, ".qwen", "settings.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)


def load(*names: str, when: str) -> standin.ScriptStep:
    return standin.tool(
        "tool_search", {"query": "select:" + ",".join(f"mcp__sotd__{n}" for n in names)}, when=when
    )


def call(tool: str, when: str, **args: Any) -> standin.ScriptStep:
    return standin.tool("tool_call", {"name": f"mcp__sotd__{tool}", "arguments": args}, when=when)


def test_qwen_code_joins_sends_and_polls_through_the_mcp_tools(
    chat_model: ChatStandIn, tmp_path: Any
) -> None:
    exe = qwen_exe()
    comm = os.path.join(str(tmp_path), "comm")
    kit.comm_folder(comm)
    home = os.path.join(str(tmp_path), "home")
    _settings(home)
    project = os.path.join(str(tmp_path), "gamma")
    os.makedirs(project)
    base = {"SOT_COMM_HOME": comm, "SOT_SELF_HOST": "testhost", "SOT_COMM_TEST_HOST": "testhost"}
    env = kit.agent_env()
    env.update(base, HOME=home, TMPDIR=str(tmp_path), OPENAI_API_KEY="sk-sotd-standin", OPENAI_BASE_URL=chat_model.url,
               OPENAI_MODEL=MODEL, SOT_COMM_SELF_FILE=os.path.join(comm, "self", "gamma-session.txt"))  # fmt: skip

    def qwen(prompt: str) -> str:
        p = subprocess.run([exe, prompt], cwd=project, env=env, capture_output=True, text=True, timeout=90,
                           check=False)  # fmt: skip
        assert p.returncode == 0, p
        return p.stdout

    you_env = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
    you_env.update(base, SOT_COMM_SELF_FILE=os.path.join(comm, "self", "you-session.txt"))

    def you(*args: str) -> str:
        p = subprocess.run([SOTD, "comm", *args], env=you_env, cwd=str(tmp_path), capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
        return p.stdout

    assert "Joined sot-comm as @you" in you("join", "--name", "you")
    chat_model.add(
        load("join", "send", "poll", when="join as gamma"),
        call("join", "mcp__sotd__send", name="gamma"),
        call("send", "Joined sot-comm as @gamma", to="you", text=REPLY),
        standin.text("SITREP: joined and told you", when="filed -> @you"),
    )
    assert "SITREP: joined and told you" in qwen("join as gamma, then tell you the price")
    with open(os.path.join(comm, "inbox", "you.jsonl"), "rb") as f:
        last = json.loads(f.read().splitlines()[-1])
    assert (last["msg"], last["from"], last["to"]) == (REPLY, "gamma", "you")

    assert you("send", "@gamma", "ping from you") == "  filed -> @gamma\n"
    assert you("unread", "gamma") == "1\n"
    chat_model.add(
        load("poll", when="read your mail"),
        call("poll", "mcp__sotd__poll"),
        call("poll", "ping from you"),
        standin.text("SITREP: read it", when="No new messages."),
    )
    assert "SITREP: read it" in qwen("read your mail")
    results = chat_model.tool_results()
    assert any("[you:" in r and "ping from you" in r for r in results), results
    assert "No new messages." in results[-1], results
    assert you("unread", "gamma") == "0\n"
    assert {"tool_search", "tool_call"} <= chat_model.offered()
