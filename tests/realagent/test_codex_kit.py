"""The Codex kit itself (issue 12 part 1): a missing or wrong Codex fails the tier with the install's own
error (never a skip), and the Responses stand-in answers main and side requests as the script says."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from tests.realagent import codex_kit, kit
from tests.realagent.codex_standin import CodexStandIn, bash, text


def test_a_missing_codex_fails_with_the_install_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    err = tmp_path / "codex.error"
    err.write_text("npm error 404 Not Found - GET https://registry.npmjs.org/@openai%2fcodex\n")
    monkeypatch.setattr(codex_kit, "PREFIX", str(tmp_path / "nowhere"))
    monkeypatch.setattr(codex_kit, "ERROR_FILE", str(err))
    with pytest.raises(kit.NotInstalled) as e:
        codex_kit.codex_exe()
    assert "the install failed:\nnpm error 404 Not Found" in str(e.value)


def _post(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        url + "/responses", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        frames = r.read().decode().split("\n\n")
    return [json.loads(f.split("data: ", 1)[1]) for f in frames if "data: " in f]


def test_the_stand_in_answers_main_requests_from_the_script_and_side_requests_with_text() -> None:
    m = CodexStandIn().start()
    try:
        m.add(bash("comm-poll.sh", when="you have mail"), text("SITREP: read"))
        tools = [{"type": "function", "name": "exec_command"}]
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
        events = _post(m.url, {"stream": True, "tools": tools, "input": [user]})
        assert next(e["type"] for e in events) == "response.created"
        assert events[-1]["type"] == "response.completed"
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        assert done[0]["content"][0]["text"] == "Done."  # the step waits for its text: the idle answer
        side = _post(m.url, {"stream": True, "tools": [], "input": [user]})
        assert [e["item"]["type"] for e in side if e["type"] == "response.output_item.done"] == ["message"]
        wake = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "you have mail: x"}],
        }
        call = next(e["item"] for e in _post(m.url, {"stream": True, "tools": tools, "input": [wake]})
                if e["type"] == "response.output_item.done")  # fmt: skip
        assert call["type"] == "function_call" and call["name"] == "exec_command"
        assert json.loads(call["arguments"]) == {"cmd": "comm-poll.sh"}
        out = {"type": "function_call_output", "call_id": call["call_id"], "output": "no new mail"}
        last = _post(m.url, {"stream": True, "tools": tools, "input": [wake, call, out]})
        assert next(e["item"] for e in last if e["type"] == "response.output_item.done")["content"][0][
            "text"
        ] == ("SITREP: read")
        assert m.tool_results() == ["no new mail"]
        assert [r.kind for r in m.requests] == ["main", "side", "main", "main"]
    finally:
        m.stop()
