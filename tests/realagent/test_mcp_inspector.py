"""``sotd mcp`` against the MCP Inspector's CLI (``@modelcontextprotocol/inspector`` at the version in
``scripts/mcp-inspector.pin``, installed by ``scripts/setup`` into ``.agents/mcp-inspector``; issue 26
item 1, a second independent client beside the SDK's): tools/list shows every tool with its schema, and
a tools/call of send files a text with ``$``, quotes and a backslash byte for byte, poll moves the cursor.
Missing, the test fails with setup's error (never skips)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import SOTD, Comm, Session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = os.path.join(ROOT, ".agents", "mcp-inspector")
EXE = os.path.join(PREFIX, "node_modules", ".bin", "mcp-inspector")


def inspector(s: Session, *args: str) -> dict:
    if not os.path.exists(EXE):
        err = os.path.join(ROOT, ".agents", "mcp-inspector.error")
        why = open(err).read() if os.path.exists(err) else "not installed: run scripts/setup"  # noqa: SIM115
        pytest.fail(f"the MCP Inspector is not in {PREFIX}: {why}")
    envs = [a for k, v in s.env.items() if k.startswith("SOT_") for a in ("-e", f"{k}={v}")]
    p = subprocess.run([EXE, "--cli", *envs, SOTD, "mcp", *args], cwd=s.root, env=s.env, capture_output=True,
                       text=True, timeout=90, check=False)  # fmt: skip
    assert p.returncode == 0, p
    return json.loads(p.stdout)


def test_the_inspector_lists_and_calls_the_tools(comm: Comm) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    listed = inspector(b, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == ["join", "send", "poll", "unread", "list", "status"]
    assert listed["tools"][1]["inputSchema"]["required"] == ["text"]
    text = 'costs $5 "now" \\ back'
    sent = inspector(b, "--method", "tools/call", "--tool-name", "send", "--tool-arg", "to=alpha",
                     "--tool-arg", f"text={text}")  # fmt: skip
    assert sent == {"content": [{"type": "text", "text": "  filed -> @alpha"}], "isError": False}
    assert json.loads(comm.inbox_bytes("alpha"))["msg"] == text
    polled = inspector(a, "--method", "tools/call", "--tool-name", "poll")
    assert text in polled["content"][0]["text"]
    again = inspector(a, "--method", "tools/call", "--tool-name", "poll")
    assert again["content"][0]["text"] == "No new messages."
