"""tests/realagent/codex_standin.py: a scripted stand-in for the OpenAI Responses API on 127.0.0.1, for the
real Codex TUI (issue 12 part 1; testing-notes §5).

The pinned Codex cannot reach a model here, so its temp ``CODEX_HOME`` names a provider whose ``base_url``
is this server (``wire_api = "responses"``; Codex appends ``/responses``). The only stand-in in the
Codex tests; the TUI, its hook runner, tmux and sotd are real. What Codex 0.171.0 sent and read here:

- ``POST /v1/responses`` with ``"stream": true``; ``input`` holds ``message`` items (roles developer /
  user / assistant), ``function_call`` and ``function_call_output`` items; the shell tool is the function
  ``exec_command`` with arguments ``{"cmd": "<shell text>", "yield_time_ms": N}``;
- the answer is SSE: ``response.created``, per output item ``response.output_item.added`` /
  (``response.output_text.delta``) / ``response.output_item.done``, then ``response.completed`` with the
  usage; a turn ends when a response has no ``function_call``;
- side requests (the thread's title and the like) carry no ``exec_command`` tool (an empty ``tools``, or
  ``apply_patch`` alone): plain text, never a script step.

- MCP tools are not among the functions: the tools hold ``{"type": "tool_search", "execution": "client"}``;
  a ``tool_search_call`` item (``arguments``: ``query``, ``limit``) is answered by Codex with a
  ``tool_search_output`` item whose ``tools`` are namespaces (``mcp__sotd`` with its functions), and the
  model then calls a ``function_call`` with ``"namespace": "mcp__sotd"`` and the tool's own name. The
  step ``tool("tool_search", {...})`` is that search; ``tool(name, {"__namespace__": ns, ...})`` that call.

It keeps the interface of ``standin.StandIn`` (the Claude Code stand-in): the same ``Step``s (``text``,
``bash``, ``sleep``; ``when`` waits for the newest user content: prompt, tool output or hook feedback),
``requests`` / ``main_requests()`` / ``answered()`` / ``tool_results()`` / ``wait_main(n)``.

What would break it: a step eaten by a side request, or an SSE frame Codex cannot parse (the TUI shows a
stream error and retries, and the turn gets no tool call).
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.realagent import standin
from tests.realagent.standin import Request, ScriptStep, bash, sleep, text

__all__ = ["CodexRequest", "CodexStandIn", "ScriptStep", "bash", "sleep", "text"]

MODEL = "gpt-5.5"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    out: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return "\n".join(out)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return _content_text(output.get("content")) or str(output.get("output") or "")
    return _content_text(output)


def newest_user_text(body: dict[str, Any]) -> str:
    """The text of the newest input a person, a tool or a hook gave: the last ``function_call_output``, or
    ``user`` / ``developer`` message, after the last assistant output."""
    items = body.get("input")
    if not isinstance(items, list):
        return ""
    for it in reversed(items):
        if not isinstance(it, dict):
            continue
        if it.get("type") == "function_call_output":
            return _output_text(it.get("output"))
        if it.get("type") == "tool_search_output":
            return json.dumps(it.get("tools"), ensure_ascii=False)
        if it.get("type") == "message" and it.get("role") in ("user", "developer"):
            return _content_text(it.get("content"))
        if it.get("type") == "message" and it.get("role") == "assistant":
            return ""
    return ""


class CodexRequest(Request):
    @property
    def newest_user_text(self) -> str:
        return newest_user_text(self.body)


def _kind(path: str, body: dict[str, Any]) -> str:
    if path.split("?", 1)[0].endswith("/responses"):
        names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        return "main" if "exec_command" in names else "side"
    return "other"


class CodexStandIn(standin.StandIn):
    """The Responses API stand-in; ``start()`` binds 127.0.0.1; ``url`` is the provider's ``base_url``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.side_text = "Read the mail"

    @property
    def url(self) -> str:
        return super().url + "/v1"

    def tool_results(self) -> list[str]:
        """The text of every ``exec_command`` output Codex sent back, in order (each once)."""
        seen: dict[str, str] = {}
        for r in self.main_requests():
            for it in r.body.get("input", []):
                if isinstance(it, dict) and it.get("type") == "function_call_output":
                    seen.setdefault(str(it.get("call_id")), _output_text(it.get("output")))
        return list(seen.values())

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        import time

        body = self._body(h)
        req = CodexRequest(h.path, body, _kind(h.path, body), time.monotonic())
        step = self._take(req)
        if req.kind == "other":
            self._json(h, 404, {"error": {"type": "not_found", "message": h.path}})
            return
        if step is not None and step.delay:
            time.sleep(step.delay)
        seq = next(self._ids)
        items: list[dict[str, Any]]
        if req.kind == "side":
            items = [self._message(seq, self.side_text)]
        elif step is None or step.kind == "text":
            items = [self._message(seq, self.idle_text if step is None else step.value)]
        elif step.kind == "tool" and step.value == "tool_search":
            items = [self._search(seq, step)]
        elif step.kind == "tool":
            items = [self._function(seq, step)]
        else:
            items = [self._call(seq, step)]
        self._sse(h, seq, items)

    @staticmethod
    def _message(seq: int, value: str) -> dict[str, Any]:
        return {"type": "message", "id": f"msg_{seq:06d}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": value, "annotations": []}]}  # fmt: skip

    @staticmethod
    def _call(seq: int, step: ScriptStep) -> dict[str, Any]:
        args: dict[str, Any] = {"cmd": step.value}
        if step.value.startswith("sleep "):
            # keep the call (and so the turn) open for the whole sleep: the tool yields after at most 30 s
            args["yield_time_ms"] = 30000
        return {"type": "function_call", "id": f"fc_{seq:06d}", "call_id": f"call_{seq:06d}",
                "name": "exec_command", "arguments": json.dumps(args), "status": "completed"}  # fmt: skip

    @staticmethod
    def _search(seq: int, step: ScriptStep) -> dict[str, Any]:
        return {"type": "tool_search_call", "id": f"ts_{seq:06d}", "call_id": f"call_{seq:06d}",
                "execution": "client", "arguments": dict(step.tool_input), "status": "completed"}  # fmt: skip

    @staticmethod
    def _function(seq: int, step: ScriptStep) -> dict[str, Any]:
        args = dict(step.tool_input)
        namespace = args.pop("__namespace__", None)
        item = {"type": "function_call", "id": f"fc_{seq:06d}", "call_id": f"call_{seq:06d}",
                "name": step.value, "arguments": json.dumps(args), "status": "completed"}  # fmt: skip
        if namespace is not None:
            item["namespace"] = namespace
        return item

    @staticmethod
    def _sse(h: BaseHTTPRequestHandler, seq: int, items: list[dict[str, Any]]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()

        def event(data: dict[str, Any]) -> None:
            h.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
            h.wfile.flush()

        rid = f"resp_{seq:06d}"
        event({"type": "response.created", "response": {"id": rid, "status": "in_progress", "output": []}})
        for i, it in enumerate(items):
            if it["type"] == "message":
                event(
                    {"type": "response.output_item.added", "output_index": i, "item": {**it, "content": []}}
                )
                event({"type": "response.output_text.delta", "output_index": i, "item_id": it["id"],
                       "content_index": 0, "delta": it["content"][0]["text"]})  # fmt: skip
            else:
                event({"type": "response.output_item.added", "output_index": i, "item": it})
            event({"type": "response.output_item.done", "output_index": i, "item": it})
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}  # fmt: skip
        event({"type": "response.completed",
               "response": {"id": rid, "status": "completed", "output": items, "usage": usage}})  # fmt: skip
