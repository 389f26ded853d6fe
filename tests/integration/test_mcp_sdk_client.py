"""``sotd mcp`` against an independent client: the official MCP Python SDK (``mcp``, the dev extra) over
stdio (issue 26 item 1, conformance). For every protocol version the agents negotiate (the handshake
era's four and 2026-07-28's ``server/discover``), the SDK's own validation of each result at that
version passes: initialize or discover, tools/list, and a call of each tool; the send files its text.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

# the dev extra's mcp SDK (scripts/setup installs it): missing, these tests fail, never skip
import mcp_types as types  # installed with mcp
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import SOTD, Comm, Session

pytestmark = pytest.mark.integration

HANDSHAKE = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
TEXT = (
    "a reply with $HOME, \"double\" and 'single' quotes, back\\slashes,\na newline and non-ASCII: é 日本 🚀"
)


async def _drive(session_env: Session, version: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=SOTD, args=["mcp"], env=dict(session_env.env), cwd=session_env.root
    )
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        if version in HANDSHAKE:
            init = await s.send_request(
                types.InitializeRequest(
                    params=types.InitializeRequestParams(
                        protocol_version=version,
                        capabilities=types.ClientCapabilities(),
                        client_info=types.Implementation(name="sdk-test", version="1"),
                    )
                ),
                types.InitializeResult,
            )
            s.adopt(init)
            await s.send_notification(types.InitializedNotification())
            seen["negotiated"] = init.protocol_version
            seen["server"] = init.server_info.name
        else:
            found = await s.discover()
            seen["negotiated"] = s.protocol_version
            seen["supported"] = found.supported_versions
        listed = await s.list_tools()
        seen["tools"] = [t.name for t in listed.tools]
        seen["titled"] = [t.title is not None for t in listed.tools]
        results = {}
        for name, args in (
            ("join", {}),
            ("send", {"to": "@alpha", "text": TEXT}),
            ("unread", {"handle": "alpha"}),
            ("status", {"state": "working", "text": "on $it"}),
            ("list", {}),
            ("poll", {}),
            ("send", {"to": "alpha"}),
        ):
            r = await s.call_tool(name, args)
            block = r.content[0]
            assert isinstance(block, types.TextContent)
            results[name if name not in results else name + "-bad"] = (block.text, r.is_error)
        seen["results"] = results
    return seen


@pytest.fixture
def two(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


@pytest.mark.parametrize("version", [*HANDSHAKE, "2026-07-28"])
def test_the_sdk_client_speaks_every_version(two: tuple[Comm, Session, Session], version: str) -> None:
    comm, _a, b = two
    seen = anyio.run(_drive, b, version)
    assert seen["negotiated"] == version
    assert seen["tools"] == ["join", "send", "poll", "unread", "list", "status"]
    assert all(seen["titled"]) == (version >= "2025-06-18")
    r = seen["results"]
    assert r["join"][1] is False and r["join"][0].startswith("Joined sot-comm as @beta")
    assert r["send"] == ("  filed -> @alpha", False)
    assert r["unread"] == ("1", False)
    assert r["status"] == ("state recorded: working", False)
    assert r["list"][1] is False and "@beta" in r["list"][0]
    assert r["poll"] == ("No new messages.", False)
    assert r["send-bad"] == ('usage: sotd comm send @name "msg" | --broadcast "msg"', True)
    assert json.loads(comm.inbox_bytes("alpha"))["msg"] == TEXT
