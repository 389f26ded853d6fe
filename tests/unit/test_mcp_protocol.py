"""The pure parts of ``sotd mcp`` (issue 26): version negotiation, the era, each message's answer, the
line splitter, the tool listing per version, and the bad-input refusals (``sotd.mcp.tools.refusal``)."""

from __future__ import annotations

import pytest

from sotd.mcp import NAMES, protocol, tools
from sotd.mcp.protocol import McpConnection, ToolCall

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),  # initialize does not exist at 2026 versions
        ("2099-01-01", "2025-11-25"),
        (None, "2025-11-25"),
        (20250618, "2025-11-25"),
    ],
)
def test_negotiated(asked: object, answered: str) -> None:
    assert protocol.negotiated(asked) == answered


def conn() -> McpConnection:
    return McpConnection(tools.listing)


def req(rid: object, method: str, params: object = None) -> dict[str, object]:
    m: dict[str, object] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        m["params"] = params
    return m


MODERN_META = {"_meta": {protocol.VERSION_KEY: "2026-07-28"}}


def code(answer: object) -> object:
    assert isinstance(answer, dict)
    return answer.get("error", {}).get("code")


@pytest.mark.parametrize(
    ("msg", "want"),
    [
        ("text", -32600),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": 1}, -32600),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600),
        (req(1, "ping", [1]), -32602),
        (req(1, "nope"), -32601),
        (req(1, "tools/call", {"name": "rm"}), -32602),
        (req(1, "tools/call", {}), -32602),
        (req(1, "server/discover"), -32601),  # a connection opened without the 2026 envelope
        (req(1, "ping"), None),
        (req("a", "tools/list"), None),
    ],
)
def test_one_message(msg: object, want: object) -> None:
    assert code(conn().receive(msg)) == want


def test_notifications_and_answers_get_no_answer() -> None:
    c = conn()
    assert c.receive({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert c.receive({"jsonrpc": "2.0", "id": 3, "result": {}}) is None


def test_the_handshake_era_writes_no_2026_fields() -> None:
    c = conn()
    init = c.receive(req(1, "initialize", {"protocolVersion": "2024-11-05"}))
    assert isinstance(init, dict) and init["result"]["protocolVersion"] == "2024-11-05"
    listed = c.receive(req(2, "tools/list"))
    assert isinstance(listed, dict) and set(listed["result"]) == {"tools"}
    assert [t["name"] for t in listed["result"]["tools"]] == list(NAMES)
    assert all(set(t) == {"name", "description", "inputSchema"} for t in listed["result"]["tools"])
    call = c.receive(req(3, "tools/call", {"name": "poll"}))
    assert isinstance(call, ToolCall) and call.arguments == {}
    assert c.tool_result(call, "x", False)["result"] == {
        "content": [{"type": "text", "text": "x"}],
        "isError": False,
    }


def test_the_2026_era_discovers_and_stamps_results() -> None:
    c = conn()
    found = c.receive(req(1, "server/discover", MODERN_META))
    assert isinstance(found, dict)
    body = found["result"]
    assert body["supportedVersions"] == ["2026-07-28"] and body["resultType"] == "complete"
    listed = c.receive(req(2, "tools/list", MODERN_META))
    assert isinstance(listed, dict)
    assert {"resultType", "ttlMs", "cacheScope"} <= set(listed["result"])
    assert all("title" in t and "annotations" in t for t in listed["result"]["tools"])
    call = c.receive(req(3, "tools/call", {"name": "list", **MODERN_META}))
    assert isinstance(call, ToolCall)
    assert c.tool_result(call, "x", True)["result"]["resultType"] == "complete"
    # initialize does not exist at 2026 versions, and a version not served is -32022 naming the served ones
    refused = c.receive(req(4, "initialize", {"protocolVersion": "2025-06-18", **MODERN_META}))
    assert code(refused) == -32022
    other = c.receive(req(5, "tools/list", {"_meta": {protocol.VERSION_KEY: "2030-01-01"}}))
    assert isinstance(other, dict) and other["error"]["data"] == {
        "supported": ["2026-07-28"],
        "requested": "2030-01-01",
    }


def test_a_batch() -> None:
    c = conn()
    assert code(c.receive([])) == -32600
    out = c.receive([req(1, "ping"), {"jsonrpc": "2.0", "method": "notifications/x"}, req(2, "initialize")])
    assert isinstance(out, list) and [code(a) for a in out] == [None, -32600]


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"a", b"b\nc"], [b"ab"]),
        ([b"x" * 6 + b"\n"], [None]),
        ([b"x" * 6, b"yyy\nok\n"], [None, b"ok"]),
        ([b"xxxx", b"xx", b"\nok\n"], [None, b"ok"]),
        ([b"12345\n"], [b"12345"]),
    ],
)
def test_line_splitter(chunks: list[bytes], lines: list[bytes | None]) -> None:
    s = protocol.LineSplitter(max_line=5)
    got: list[bytes | None] = []
    for c in chunks:
        got += s.feed(c)
    assert got == lines


@pytest.mark.parametrize(
    ("version", "fields"),
    [
        ("2024-11-05", {"name", "description", "inputSchema"}),
        ("2025-03-26", {"name", "description", "inputSchema", "annotations"}),
        ("2025-06-18", {"name", "description", "inputSchema", "annotations", "title"}),
        ("2026-07-28", {"name", "description", "inputSchema", "annotations", "title"}),
    ],
)
def test_listing_per_version(version: str, fields: set[str]) -> None:
    assert all(set(t) == fields for t in tools.listing(version))


@pytest.mark.parametrize(
    ("tool", "args", "sentence"),
    [
        ("send", {"to": "a", "text": "hi"}, None),
        ("send", {"broadcast": True, "text": "hi"}, None),
        (
            "send",
            {"to": "a", "broadcast": True, "text": "hi"},
            "no target; use @name or --broadcast (give either 'to' or broadcast, not both)",
        ),
        ("send", {"to": "a", "text": ""}, 'usage: sotd comm send @name "msg" | --broadcast "msg"'),
        (
            "send",
            {"broadcast": 1, "text": "x"},
            "ERROR: send's 'broadcast' must be true or false (got a number); nothing was done",
        ),
        (
            "send",
            {"to": True, "text": "x"},
            "ERROR: send's 'to' must be a string (got a boolean); nothing was done",
        ),
        ("send", None, "ERROR: send's arguments must be an object (got null); nothing was done"),
        ("poll", {"x": 1}, "ERROR: poll has no argument 'x' (its arguments: none); nothing was done"),
        ("poll", {}, None),
        (
            "unread",
            {"handle": 5},
            "ERROR: unread's 'handle' must be a string (got a number); nothing was done",
        ),
        (
            "status",
            {"state": "stop"},
            "ERROR: status's 'state' must be one of working|idle|blocked|done|waiting (got 'stop'); nothing was written",
        ),
        (
            "status",
            {"state": "done", "text": "\udc80"},
            "sotd comm status: the text holds U+DC80 (half of a surrogate pair), which UTF-8 cannot carry; nothing was written",
        ),
        ("status", {"state": "done"}, None),
        ("join", {"name": "x", "expertise": "a, b"}, None),
    ],
)
def test_refusal(tool: str, args: object, sentence: str | None) -> None:
    refused = tools.refusal(tool, args)
    assert (refused.message if refused else None) == sentence


@pytest.mark.parametrize(
    ("tool", "args", "argv"),
    [
        ("join", {}, []),
        ("join", {"name": "-x", "expertise": "a"}, ["--name", "-x", "--expertise", "a"]),
        ("unread", {"handle": "h"}, ["h"]),
        ("status", {"state": "blocked", "text": "a b  c"}, ["blocked", "a b  c"]),
        ("status", {"state": "idle"}, ["idle"]),
        ("list", {}, []),
    ],
)
def test_argv_of(tool: str, args: dict[str, object], argv: list[str]) -> None:
    assert tools.argv_of(tool, args) == argv


@pytest.mark.parametrize(
    ("meta", "thread"),
    [
        ({"x-codex-turn-metadata": {"thread_id": "01a2359e-af34", "turn_id": "t"}}, "01a2359e-af34"),
        ({}, None),
        ({"x-codex-turn-metadata": "01a2359e"}, None),
        ({"x-codex-turn-metadata": {"thread_id": 7}}, None),
        ({"x-codex-turn-metadata": {"thread_id": ""}}, None),
        ({"x-codex-turn-metadata": {"thread_id": "x" * 201}}, None),
        ({"progressToken": 1}, None),
    ],
)  # fmt: skip
def test_codex_thread_is_read_from_the_calls_meta(meta: dict[str, object], thread: str | None) -> None:
    from sotd.mcp import tools

    assert tools.codex_thread(meta) == thread


def test_a_tool_call_keeps_its_meta_as_data() -> None:
    from sotd.mcp import protocol

    conn = protocol.McpConnection(lambda v: [{"name": "poll"}])
    conn.receive(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}
    )
    call = conn.receive({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "poll", "arguments": {}, "_meta": {"a": 1}}})  # fmt: skip
    assert isinstance(call, protocol.ToolCall) and call.meta == {"a": 1}
    bad = conn.receive({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": {"name": "poll", "_meta": "x"}})  # fmt: skip
    assert isinstance(bad, protocol.ToolCall) and bad.meta == {}
