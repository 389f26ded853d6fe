"""tests/realagent/chat_standin.py: a scripted stand-in for the OpenAI Chat Completions API on 127.0.0.1,
for an agent that takes an OpenAI-compatible base URL (Qwen Code, issue 26 item 3's third agent).

The only stand-in in those tests; the agent, its MCP client and ``sotd mcp`` are real. What Qwen Code
0.24.4 sent and read here:

- ``POST /v1/chat/completions`` with ``"stream": true``; ``messages`` (roles system / user / assistant /
  tool; an assistant's ``tool_calls``, a tool's ``tool_call_id`` and ``content``) and ``tools``
  (``{"type": "function", "function": {"name", "description", "parameters"}}``);
- the answer is SSE ``data:`` chunks of ``chat.completion.chunk`` objects (a ``delta`` with the text, or
  with one ``tool_calls`` entry carrying the function's name and its arguments as a JSON string), then a
  chunk with the ``finish_reason`` (``stop`` / ``tool_calls``) and the usage, then ``data: [DONE]``;
- side requests (with no tools: a title, a summary) get plain text and never a script step.

It keeps the interface of ``standin.StandIn``: the same ``Step``s (``text``; ``tool(name, args)`` calls a
function), ``when`` waits for the newest user or tool content, ``main_requests()`` / ``tool_results()``.

What would break it: a step eaten by a side request, or a chunk the agent cannot parse (it reports an API
error and the turn ends with no tool call).
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.realagent import standin
from tests.realagent.standin import Request, ScriptStep

MODEL = "qwen3-coder-plus"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def newest_user_text(body: dict[str, Any]) -> str:
    """The newest ``user`` or ``tool`` message's text, after the last assistant message."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for m in reversed(messages):
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("user", "tool"):
            return _content_text(m.get("content"))
        if m.get("role") == "assistant":
            return ""
    return ""


class ChatRequest(Request):
    @property
    def newest_user_text(self) -> str:
        return newest_user_text(self.body)


def _kind(path: str, body: dict[str, Any]) -> str:
    if path.split("?", 1)[0].endswith("/chat/completions"):
        return "main" if body.get("tools") else "side"
    return "other"


class ChatStandIn(standin.StandIn):
    """The Chat Completions stand-in; ``start()`` binds 127.0.0.1; ``url`` is the agent's base URL."""

    @property
    def url(self) -> str:
        return super().url + "/v1"

    def tool_results(self) -> list[str]:
        """The text of every ``tool`` message the agent sent back, in order (each call once)."""
        seen: dict[str, str] = {}
        for r in self.main_requests():
            for m in r.body.get("messages", []):
                if isinstance(m, dict) and m.get("role") == "tool":
                    seen.setdefault(str(m.get("tool_call_id")), _content_text(m.get("content")))
        return list(seen.values())

    def offered(self) -> set[str]:
        """The function names the agent offered in any main request."""
        names: set[str] = set()
        for r in self.main_requests():
            for t in r.body.get("tools") or []:
                fn = t.get("function") if isinstance(t, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                    names.add(fn["name"])
        return names

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        body = self._body(h)
        req = ChatRequest(h.path, body, _kind(h.path, body), time.monotonic())
        step = self._take(req)
        if req.kind == "other":
            self._json(h, 404, {"error": {"type": "not_found", "message": h.path}})
            return
        seq = next(self._ids)
        if req.kind == "side" or step is None or step.kind == "text":
            value = self.side_text if req.kind == "side" else self.idle_text if step is None else step.value
            self._sse(h, seq, {"role": "assistant", "content": value}, "stop")
            return
        call = {"index": 0, "id": f"call_{seq:06d}", "type": "function",
                "function": {"name": step.value, "arguments": json.dumps(dict(step.tool_input))}}  # fmt: skip
        self._sse(h, seq, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")

    @staticmethod
    def _sse(h: BaseHTTPRequestHandler, seq: int, delta: dict[str, Any], finish: str) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()
        base = {"id": f"chatcmpl-{seq:06d}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": MODEL}  # fmt: skip

        def chunk(doc: dict[str, Any]) -> None:
            h.wfile.write(f"data: {json.dumps({**base, **doc})}\n\n".encode())
            h.wfile.flush()

        chunk({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
               "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})  # fmt: skip
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()


__all__ = ["MODEL", "ChatRequest", "ChatStandIn", "ScriptStep", "newest_user_text"]
