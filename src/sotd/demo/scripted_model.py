"""src/sotd/demo/scripted_model.py: a scripted stand-in for the Anthropic Messages API on 127.0.0.1.

The real Claude Code TUI (the pinned npm package) cannot reach a model on these machines, so the demo's
real-agent rows (``sotd.demo.rows_part``) and the real-agent test tier (``tests/realagent``, through its shim
``standin.py``) point it at this server (``ANTHROPIC_BASE_URL``): the only stand-in there; everything else
(the TUI, its hooks, tmux, sotd) is real. What Claude Code reads (testing-notes §5):

- ``POST /v1/messages`` with ``"stream": true``: the SSE events ``message_start``,
  ``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` (``text`` and ``tool_use``
  blocks), ``message_delta`` with the stop reason, ``message_stop``; without ``stream``, one JSON message;
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``;
- side requests (title generation and the like) carry no ``tools``: they get plain text and never consume
  a script step, although their text may quote the last prompt.

A test gives the server a script: a list of ``Step``s, each the answer to the next *main* request (one
with ``tools``) — ``text(...)`` ends the turn, ``bash(...)`` calls the Bash tool, ``sleep(n)`` calls Bash
with ``sleep n`` (a busy turn the TUI shows as working), and a step's ``when`` makes it wait for a main
request whose newest user content (prompt, tool result or hook feedback) holds that text; until then the
server answers ``idle_text``. With the script used up it answers ``idle_text`` too. ``in_order=False``
(several sessions on one server, as in the demo) answers with the first step whose ``when`` matches,
wherever it stands in the script. Every request is kept
in ``requests`` (the test reads them); ``main_requests`` and ``tool_results`` are the usual views.

What would break it: answering a side request from the script (a step would be eaten by a title request
and the turn would get the wrong answer), or an SSE frame Claude Code cannot parse (the TUI shows an API
error and the turn ends with no tool call).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-sonnet-4-5"


@dataclass(frozen=True)
class ScriptStep:
    """One scripted answer: ``kind`` is ``text`` or ``bash``; ``when`` a substring the newest user content
    must hold before this step is used; ``delay`` seconds the server waits before it answers."""

    kind: str
    value: str
    when: str | None = None
    delay: float = 0.0
    description: str = ""
    tool_input: tuple[tuple[str, Any], ...] = ()


def text(value: str, *, when: str | None = None, delay: float = 0.0) -> ScriptStep:
    return ScriptStep("text", value, when, delay)


def bash(command: str, *, when: str | None = None, delay: float = 0.0, description: str = "") -> ScriptStep:
    return ScriptStep("bash", command, when, delay, description or f"Run {command.split(maxsplit=1)[0]}")


def sleep(seconds: float, *, when: str | None = None, delay: float = 0.0) -> ScriptStep:
    """A tool call that keeps the turn busy for ``seconds`` (Bash ``sleep``; needs an allow rule), after
    the model "thinks" for ``delay`` seconds."""
    return ScriptStep("bash", f"sleep {seconds:g}", when, delay, "Wait")


def tool(name: str, tool_input: dict[str, Any], *, when: str | None = None) -> ScriptStep:
    """A call of any tool by name (``AskUserQuestion`` with its ``questions``, …)."""
    return ScriptStep("tool", name, when, 0.0, "", tuple(tool_input.items()))


@dataclass
class Request:
    """One request as received: ``path``, the JSON ``body``, ``kind`` (main / side / count_tokens / other),
    ``at`` (``time.monotonic()``) and the step it was answered with (None: the idle text or not main)."""

    path: str
    body: dict[str, Any]
    kind: str
    at: float
    step: ScriptStep | None = None

    @property
    def newest_user_text(self) -> str:
        return newest_user_text(self.body)


def _flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                out.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result":
                out.append(_flatten(block.get("content", "")))
            elif block.get("type") == "tool_reference":  # a ToolSearch result: the tool it loaded
                out.append(str(block.get("tool_name", "")))
    return "\n".join(out)


def newest_user_text(body: dict[str, Any]) -> str:
    """The text of the last ``user`` message: its text blocks and tool results, joined by newlines."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return _flatten(m.get("content"))
    return ""


def _kind(path: str, body: dict[str, Any]) -> str:
    p = path.split("?", 1)[0]
    if p.endswith("/count_tokens"):
        return "count_tokens"
    if p.endswith("/v1/messages"):
        return "main" if body.get("tools") else "side"
    return "other"


@dataclass
class StandIn:
    """The server: ``start()`` binds 127.0.0.1 on a free port; ``url`` is what ``ANTHROPIC_BASE_URL`` gets."""

    script: list[ScriptStep] = field(default_factory=list)
    in_order: bool = True
    idle_text: str = "Done."
    side_text: str = "Mail session"
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------------------------------- control

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> StandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection; the body ends at close

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                standin._serve(self)

            def do_GET(self) -> None:
                standin._serve(self)

            def do_HEAD(self) -> None:
                self.send_response(404)
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def add(self, *steps: ScriptStep) -> None:
        """Append steps to the script (a test may feed the next turn's answers as it goes)."""
        with self._cond:
            self.script.extend(steps)

    def main_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.kind == "main"]

    def answered(self) -> list[ScriptStep]:
        """The script steps used so far, in order."""
        with self._lock:
            return [r.step for r in self.requests if r.step is not None]

    def pending(self) -> int:
        with self._lock:
            return len(self.script)

    def tool_results(self) -> list[str]:
        """The text of every tool result the model was sent, in order (each once)."""
        seen: dict[str, str] = {}
        for r in self.main_requests():
            for m in r.body.get("messages", []):
                if not (
                    isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), list)
                ):
                    continue
                for b in m["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        seen.setdefault(str(b.get("tool_use_id")), _flatten(b.get("content", "")))
        return list(seen.values())

    def wait_main(self, count: int, timeout: float = 30.0) -> list[Request]:
        """Block until at least ``count`` main requests came in (bounded); the main requests."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(1 for r in self.requests if r.kind == "main") < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    kinds = [r.kind for r in self.requests]
                    raise AssertionError(
                        f"the stand-in model got {kinds} within {timeout}s, wanted {count} main"
                    )
                self._cond.wait(left)
            return [r for r in self.requests if r.kind == "main"]

    # ---------------------------------------------------------------------------------------- serving

    def _take(self, req: Request) -> ScriptStep | None:
        with self._cond:
            self.requests.append(req)
            step: ScriptStep | None = None
            if req.kind == "main" and self.script:
                text = req.newest_user_text
                heads = self.script[:1] if self.in_order else self.script
                for i, head in enumerate(heads):
                    if head.when is None or head.when in text:
                        step = self.script.pop(i)
                        req.step = step
                        break
            self._cond.notify_all()
            return step

    @staticmethod
    def _body(h: BaseHTTPRequestHandler) -> dict[str, Any]:
        """The request's JSON body; an empty one for no body, bad JSON or JSON that is not an object."""
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        body = self._body(h)
        req = Request(h.path, body, _kind(h.path, body), time.monotonic())
        step = self._take(req)
        if req.kind == "count_tokens":
            self._json(h, 200, {"input_tokens": 100})
            return
        if req.kind == "other":
            self._json(h, 404, {"type": "error", "error": {"type": "not_found_error", "message": h.path}})
            return
        if step is not None and step.delay:
            time.sleep(step.delay)
        if req.kind == "side":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": self.side_text}]
            stop = "end_turn"
        elif step is None or step.kind == "text":
            blocks = [{"type": "text", "text": self.idle_text if step is None else step.value}]
            stop = "end_turn"
        else:
            if step.kind == "bash":
                name, tool = "Bash", {"command": step.value, "description": step.description}
            else:
                name, tool = step.value, dict(step.tool_input)
            blocks = [{"type": "tool_use", "id": f"toolu_{next(self._ids):06d}", "name": name, "input": tool}]
            stop = "tool_use"
        model = str(body.get("model") or MODEL)
        if body.get("stream"):
            self._sse(h, model, blocks, stop)
        else:
            msg = self._message(model, blocks, stop)
            self._json(h, 200, msg)

    def _message(self, model: str, blocks: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        return {
            "id": f"msg_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _sse(self, h: BaseHTTPRequestHandler, model: str, blocks: list[dict[str, Any]], stop: str) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()

        def event(name: str, data: dict[str, Any]) -> None:
            h.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            h.wfile.flush()

        start = self._message(model, [], None)
        start["usage"] = {"input_tokens": 100, "output_tokens": 1}
        event("message_start", {"type": "message_start", "message": start})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}})  # fmt: skip
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": b["text"]}})  # fmt: skip
            else:
                head = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                event(
                    "content_block_start", {"type": "content_block_start", "index": i, "content_block": head}
                )
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": json.dumps(b["input"])}})  # fmt: skip
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": 10}})  # fmt: skip
        event("message_stop", {"type": "message_stop"})


# --------------------------------------------------------------------------------- the session's HOME

# A dummy key: Claude Code remembers an approved key by its last 20 characters.
API_KEY = "sk-ant-api03-sotd-standin-" + "0" * 60 + "-realagent-tier-key"


def write_first_run(home: str, version: str, api_key: str = API_KEY) -> str:
    """``<home>/.claude.json`` with Claude Code's first run answered (testing-notes §5: onboarding done,
    the release notes of ``version`` seen, ``api_key`` approved), so no first-run dialog shows; its path."""
    os.makedirs(os.path.join(home, ".claude"), exist_ok=True)
    path = os.path.join(home, ".claude.json")
    doc = {
        "hasCompletedOnboarding": True,
        "lastReleaseNotesSeen": version,
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        "projects": {},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return path


def trust_project(home: str, folder: str) -> str:
    """Mark ``folder`` (made when missing) trusted and onboarded in ``<home>/.claude.json``; its real path."""
    os.makedirs(folder, exist_ok=True)
    real = os.path.realpath(folder)
    path = os.path.join(home, ".claude.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc.setdefault("projects", {})[real] = {
        "hasTrustDialogAccepted": True,
        "hasCompletedProjectOnboarding": True,
        "allowedTools": [],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return real


def session_env(home: str, tmp: str, model_url: str, api_key: str = API_KEY) -> dict[str, str]:
    """What a Claude Code session needs on top of a clean environment to use the stand-in offline."""
    return {
        "HOME": home,
        "TMPDIR": tmp,
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_BASE_URL": model_url,
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
