"""``sotd/mcp/protocol.py``: the MCP side of ``sotd mcp``, sans I/O. JSON-RPC 2.0 over newline-delimited
stdio; the MCP lifecycle of the handshake era (``initialize``: 2024-11-05, 2025-03-26, 2025-06-18,
2025-11-25) and of the stateless era (2026-07-28: ``server/discover``, the protocol version in each
request's ``_meta``, ``resultType`` and the cache hints on results).

Guarantee: every line in gets at most one line out, and every request (a message with an ``id``) gets
exactly one answer: a result, or a JSON-RPC error with the spec's code (-32700 a line that is not JSON or
not UTF-8, -32600 not a request, -32601 an unknown method, -32602 bad params, -32022 a protocol version
this server does not serve). A tool's own failure is never a JSON-RPC error: it is a result with
``isError`` (``McpConnection.tool_result``), so the model reads the CLI's sentence. The era is decided by
the first request, once (``initialize`` opens the handshake era; a request carrying the 2026 envelope
opens the stateless one); a handshake answers the client's version when this server speaks it, else its
newest handshake version (``negotiated``).
What would break it: an answer to a notification, two answers to one id, a 2026 field (``resultType``,
``ttlMs``) on a handshake-era answer that a strict older client refuses, or a line longer than the bound
buffered whole (``LineSplitter`` drops it as it grows and answers -32700 once).

Stdlib only, no ``json``/``re``/``typing`` at import (JSON through ``sotd.fastjson``): the server's start
is part of every agent session's start.
"""

from __future__ import annotations

from sotd import __version__
from sotd.mcp import SERVER_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]

# 2026-07-28's per-request envelope (its ``_meta`` keys)
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_VERSION = -32022

MAX_LINE = 4 << 20  # one request line, newline excluded (a send's text is bounded far below: tools.MAX_TEXT)

HANDSHAKE = "handshake"
MODERN = "modern"

INSTRUCTIONS = (
    "Mail between coding-agent sessions (sot-comm). Use these tools, not the comm-*.sh scripts, to take "
    "your handle (join), send a message (send: the text goes exactly as given, no shell quoting), read "
    "your mail (poll: shows what is new and marks it read), count unread mail (unread), see who is "
    "registered (list) and declare your work state (status). A refusal is a tool error whose text says "
    "why and what to do next."
)


def negotiated(asked: object) -> str:
    """The handshake version to answer ``initialize`` with: the client's when this server speaks it, else
    the newest handshake version (the client then decides whether it can go on). Pure."""
    if isinstance(asked, str) and asked in HANDSHAKE_VERSIONS:
        return asked
    return LATEST_HANDSHAKE


def at_least(version: str, minimum: str) -> bool:
    """``version`` is a known revision no older than ``minimum`` (unknown: False). Pure."""
    known = (*HANDSHAKE_VERSIONS, *MODERN_VERSIONS)
    return version in known and known.index(version) >= known.index(minimum)


def envelope_version(params: object) -> str | None:
    """The protocol version a 2026-era request names in its ``_meta``, or None (no envelope). Pure."""
    if not isinstance(params, dict):
        return None
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return None
    v = meta.get(VERSION_KEY)
    return v if isinstance(v, str) else None


def error(rid: object, code: int, message: str, data: object = None) -> dict[str, Any]:
    """A JSON-RPC error answer. Pure."""
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": err}


def result(rid: object, body: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": body}


def valid_id(rid: object) -> bool:
    """A JSON-RPC id MCP allows: a string or an integer (never null, a bool or a fraction). Pure."""
    return isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))


class ToolCall:
    """A ``tools/call`` the connection handed out: the tool's name, its arguments as sent, and the
    request's ``_meta`` (an object, else empty: what the client says about the call, as data)."""

    __slots__ = ("arguments", "meta", "name", "rid")

    def __init__(self, rid: object, name: str, arguments: object, meta: object = None) -> None:
        self.rid = rid
        self.name = name
        self.arguments = arguments
        self.meta: dict[str, Any] = meta if isinstance(meta, dict) else {}


class McpConnection:
    """One client's connection: its era and version, and what each message asks. ``receive`` takes one
    decoded message and gives the answer (a dict, a list for a batch, None for nothing to say) or, for a
    tool call, a ``ToolCall`` to run, answered with ``tool_result``. ``tools`` is the tools/list entries
    for a version (``tools.listing``), so this module needs nothing of the verbs."""

    __slots__ = ("era", "listing", "version")

    def __init__(self, listing: Any) -> None:
        self.era = ""  # "" until the first request decides it
        self.version = LATEST_HANDSHAKE
        self.listing = listing

    # ------------------------------------------------------------------------------ one message
    def receive(self, msg: object) -> object:
        if isinstance(msg, list):
            return self._batch(msg)
        return self._one(msg)

    def _batch(self, msgs: list[object]) -> object:
        if not msgs:
            return error(None, INVALID_REQUEST, "an empty batch")
        out: list[object] = []
        for m in msgs:
            if isinstance(m, dict) and m.get("method") == "initialize":
                out.append(error(m.get("id"), INVALID_REQUEST, "initialize may not be part of a batch"))
                continue
            answer = self._one(m)
            if answer is not None:
                out.append(answer)
        return out or None

    def _one(self, msg: object) -> object:
        if not isinstance(msg, dict):
            return error(None, INVALID_REQUEST, "a JSON-RPC message is an object")
        method = msg.get("method")
        has_id = "id" in msg
        rid = msg.get("id")
        if method is None and ("result" in msg or "error" in msg):
            return None  # an answer: this server sends no requests, so there is nothing to match
        if msg.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return error(rid if valid_id(rid) else None, INVALID_REQUEST, "not a JSON-RPC 2.0 request")
        if not has_id:
            return None  # a notification (initialized, cancelled, ...): nothing is answered
        if not valid_id(rid):
            return error(None, INVALID_REQUEST, "a request id is a string or an integer")
        params = msg.get("params")
        if params is not None and not isinstance(params, dict):
            return error(rid, INVALID_PARAMS, "params is an object")
        if not self.era:
            self.era = MODERN if method != "initialize" and envelope_version(params) else HANDSHAKE
        if self.era == MODERN:
            refused = self._modern_refusal(rid, method, params)
            if refused is not None:
                return refused
        if method == "initialize":
            return self._initialize(rid, params)
        if method == "server/discover":
            if self.era != MODERN:
                return error(rid, METHOD_NOT_FOUND, "server/discover: this connection opened with initialize")
            return result(rid, self._modern(self._discover()))
        if method == "ping":
            return result(rid, self._stamped({}))
        if method == "tools/list":
            body = {"tools": self.listing(self.version)}
            if self.era == MODERN:
                body.update(ttlMs=0, cacheScope="private")
            return result(rid, self._stamped(body))
        if method == "tools/call":
            p = params or {}
            name = p.get("name")
            if not isinstance(name, str):
                return error(rid, INVALID_PARAMS, "tools/call needs the tool's name")
            known = [t["name"] for t in self.listing(self.version)]
            if name not in known:
                return error(rid, INVALID_PARAMS, f"unknown tool: {name} (the tools are {', '.join(known)})")
            return ToolCall(rid, name, p.get("arguments", {}), p.get("_meta"))
        return error(rid, METHOD_NOT_FOUND, f"method not found: {method}")

    def _modern_refusal(self, rid: object, method: str, params: object) -> dict[str, Any] | None:
        """A 2026-era request that names no version this server serves (``initialize`` included: it does
        not exist at 2026 versions), or None. The answer lists the versions served."""
        asked = envelope_version(params)
        if method != "initialize" and asked in MODERN_VERSIONS:
            self.version = asked
            return None
        data = {"supported": list(MODERN_VERSIONS), "requested": asked or ""}
        return error(rid, UNSUPPORTED_VERSION, "unsupported protocol version", data)

    def _initialize(self, rid: object, params: dict[str, Any] | None) -> dict[str, Any]:
        self.version = negotiated((params or {}).get("protocolVersion"))
        return result(
            rid,
            {
                "protocolVersion": self.version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": SERVER_NAME, "version": __version__},
                "instructions": INSTRUCTIONS,
            },
        )

    def _discover(self) -> dict[str, Any]:
        return {
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": {"tools": {"listChanged": False}},
            "instructions": INSTRUCTIONS,
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {SERVER_INFO_KEY: {"name": SERVER_NAME, "version": __version__}},
        }

    def _modern(self, body: dict[str, Any]) -> dict[str, Any]:
        body["resultType"] = "complete"
        return body

    def _stamped(self, body: dict[str, Any]) -> dict[str, Any]:
        """A result as this connection's era writes it (2026: with ``resultType``)."""
        return self._modern(body) if self.era == MODERN else body

    def tool_result(self, call: ToolCall, text: str, is_error: bool) -> dict[str, Any]:
        """The answer to ``call``: the text as one text block, ``isError`` when the tool refused."""
        body: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
        return result(call.rid, self._stamped(body))


class LineSplitter:
    """Bytes in, lines out, never more than ``MAX_LINE`` bytes held: a line that outgrows it is dropped as
    it grows and reported once (``TOO_LONG`` in its place). Pure."""

    __slots__ = ("buf", "dropping", "max_line")

    TOO_LONG = None

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.buf = bytearray()
        self.dropping = False
        self.max_line = max_line

    def feed(self, data: bytes) -> list[bytes | None]:
        out: list[bytes | None] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if self.dropping:
                self.dropping = False
            else:
                self.buf += data[start:nl]
                if len(self.buf) > self.max_line:
                    out.append(self.TOO_LONG)
                else:
                    out.append(bytes(self.buf))
            self.buf.clear()
            start = nl + 1
        if not self.dropping:
            self.buf += data[start:]
            if len(self.buf) > self.max_line:
                out.append(self.TOO_LONG)
                self.buf.clear()
                self.dropping = True
        return out


def parse_line(line: bytes) -> tuple[object, str]:
    """One line as a message: (message, "") or (None, why it is not JSON). Blank lines are skipped by the
    caller. Pure."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"the line is not UTF-8 (byte {e.start})"
    from sotd import fastjson

    try:
        return fastjson.loads(text), ""
    except (ValueError, RecursionError) as e:
        return None, f"the line is not JSON ({e})"


def encode(answer: object) -> bytes:
    """An answer's line, newline included (JSON as jq escapes it: ``sotd.text.json_text``)."""
    from sotd.text import json_text

    return json_text(answer).encode("utf-8") + b"\n"
