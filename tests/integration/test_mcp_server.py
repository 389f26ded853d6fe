"""``sotd mcp`` as a real process over its stdio (issue 26 item 1): raw JSON-RPC lines in, answers out.

The tools call the verbs' own functions: a send through the tool files the same bytes a comm-send.sh
would, its answer is the CLI's ``filed -> @h`` line, a poll through the tool moves the cursor as
comm-poll.sh does, bad input is a tool error with the CLI's sentence and files nothing, and a server
started under a second agent has no identity (the process tree of ``test_cli_identity``).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from tests.conftest import SOTD, Comm, Session
from tests.integration.test_ancestry_procs import SECOND
from tests.integration.test_cli_identity import Tree

pytestmark = pytest.mark.integration

HOSTILE = "it costs $5 now; echo rc=$? \"double\" 'single' back\\slash \\ space\nsecond line: é ü 日本 🚀"


def init(rid: int = 0, version: str = "2025-06-18") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }


def call(rid: int, tool: str, args: object) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": args}}


def exchange(session: Session, *msgs: object, raw: bytes = b"") -> tuple[list[dict[str, Any]], str]:
    """Start ``sotd mcp`` as ``session``, write the messages (and ``raw``), close stdin; the answers."""
    data = b"".join(json.dumps(m).encode() + b"\n" for m in msgs) + raw
    p = subprocess.run(
        [SOTD, "mcp"],
        input=data,
        capture_output=True,
        cwd=session.root,
        env=session.env,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()], p.stderr.decode()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def text_of(answer: dict[str, Any]) -> tuple[str, bool]:
    res = answer["result"]
    assert [c["type"] for c in res["content"]] == ["text"]
    return res["content"][0]["text"], res["isError"]


@pytest.fixture
def two(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


def test_send_through_the_tool_files_the_bytes_comm_send_files(two: tuple[Comm, Session, Session]) -> None:
    comm, _a, b = two
    answers, _ = exchange(b, init(), call(1, "send", {"to": "@alpha", "text": HOSTILE}))
    assert text_of(answers[1]) == ("  filed -> @alpha", False)
    by_tool = comm.inbox_bytes("alpha")
    assert b.run("send", "@alpha", HOSTILE).code == 0
    lines = comm.inbox_bytes("alpha").splitlines(keepends=True)
    assert len(lines) == 2
    strip = [json.loads(x) for x in lines]
    for doc in strip:
        doc.pop("ts")
    assert strip[0] == strip[1]
    assert json.loads(by_tool)["msg"] == HOSTILE


def test_a_text_that_looks_like_a_flag_goes_verbatim(two: tuple[Comm, Session, Session]) -> None:
    comm, _a, b = two
    answers, _ = exchange(b, init(), call(1, "send", {"to": "alpha", "text": "--broadcast"}))
    assert text_of(answers[1]) == ("  filed -> @alpha", False)
    assert json.loads(comm.inbox_bytes("alpha"))["msg"] == "--broadcast"


def test_poll_through_the_tool_moves_the_cursor_like_comm_poll(two: tuple[Comm, Session, Session]) -> None:
    comm, a, b = two
    assert b.run("send", "@alpha", "first").code == 0
    shown = a.run("poll").out
    cursor_by_cli = read_bytes(comm.layout.cursor("alpha"))
    assert b.run("send", "@alpha", HOSTILE).code == 0
    answers, _ = exchange(a, init(), call(1, "unread", {}), call(2, "poll", {}), call(3, "poll", {}))
    assert text_of(answers[1]) == ("1", False)
    text, err = text_of(answers[2])
    assert not err and "[beta:beta] " + HOSTILE in text and "second line" in text and "first" not in text
    assert text_of(answers[3]) == ("No new messages.", False)
    assert a.run("poll").out_lines == ["No new messages."]
    cursor_now = read_bytes(comm.layout.cursor("alpha"))
    assert cursor_now != cursor_by_cli and "first" in shown
    lines = comm.inbox_bytes("alpha").count(b"\n")
    assert cursor_now.split()[0] == str(lines).encode() == b"2"


def test_join_list_status_through_the_tools(comm: Comm) -> None:
    s = comm.session("gamma")
    answers, _ = exchange(
        s,
        init(),
        call(1, "join", {"name": "gamma", "expertise": "python, ci"}),
        call(2, "status", {"state": "blocked", "text": 'on the $HOME "review"'}),
        call(3, "list", {}),
    )
    joined, err = text_of(answers[1])
    assert not err and joined.startswith("Joined sot-comm as @gamma  (gamma on testhost).")
    assert text_of(answers[2]) == ("state recorded: blocked", False)
    listed, err = text_of(answers[3])
    assert not err and "@gamma" in listed and '[blocked] on the $HOME "review"' in listed
    assert s.run("list").out.splitlines()[:3] == listed.splitlines()[:3]


BAD = [
    ({"to": "alpha"}, 'usage: sotd comm send @name "msg" | --broadcast "msg"'),
    ({"text": "hi"}, "no target; use @name or --broadcast"),
    ({"to": 7, "text": "hi"}, "ERROR: send's 'to' must be a string (got a number); nothing was done"),
    (
        {"to": "alpha", "text": ["hi"]},
        "ERROR: send's 'text' must be a string (got an array); nothing was done",
    ),
    (
        {"to": "alpha", "text": "hi", "broadcast": "yes"},
        "ERROR: send's 'broadcast' must be true or false (got a string); nothing was done",
    ),
    (
        {"to": "alpha", "txt": "hi"},
        "ERROR: send has no argument 'txt' (its arguments: to, broadcast, text); nothing was done",
    ),
    ("hi", "ERROR: send's arguments must be an object (got a string); nothing was done"),
    (
        {"to": "alpha", "text": "half \ud800 a pair"},
        "FAILED -> @alpha: the text holds U+D800 (half of a surrogate pair), which UTF-8 cannot carry; nothing was sent",
    ),
    (
        {"to": "alpha", "text": "x" * 1_100_000},
        "FAILED -> @alpha: the message is too long to send: its frame would be 1100204 bytes, over the "
        "1048576-byte line bound (send it in parts); nothing was sent",
    ),
]


@pytest.mark.parametrize(("args", "sentence"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_a_tool_error_with_the_cli_sentence_and_files_nothing(
    two: tuple[Comm, Session, Session], args: object, sentence: str
) -> None:
    comm, _a, b = two
    before = comm.inbox_bytes("alpha")
    answers, log = exchange(b, init(), call(1, "send", args))
    assert text_of(answers[1]) == (sentence, True)
    assert comm.inbox_bytes("alpha") == before
    assert f"sotd mcp: send: refused: {sentence}" in log


def test_a_send_that_fails_says_the_cli_failed_line_and_hint(two: tuple[Comm, Session, Session]) -> None:
    _comm, _a, b = two
    answers, _ = exchange(b, init(), call(1, "send", {"to": "nobody", "text": "hi"}))
    cli = b.run("send", "@nobody", "hi")
    assert text_of(answers[1]) == (cli.err.rstrip("\n"), True)
    assert cli.err.startswith("FAILED -> @nobody: ")


def test_not_joined_is_the_cli_sentence(comm: Comm) -> None:
    s = comm.session("delta")
    answers, _ = exchange(s, init(), call(1, "poll", {}))
    assert text_of(answers[1]) == ("Not joined — run comm-join.sh first.", True)


def test_protocol_errors_are_answered_and_the_server_goes_on(two: tuple[Comm, Session, Session]) -> None:
    _comm, _a, b = two
    answers, log = exchange(
        b,
        init(),
        raw=b"not json\n\xff\xfe\n[]\n"
        + json.dumps({"jsonrpc": "2.0", "id": 5, "method": "nope"}).encode()
        + b"\n"
        + json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "rm"}}).encode()
        + b"\n"
        + json.dumps(call(7, "unread", {})).encode()
        + b"\n",
    )
    codes = [a.get("error", {}).get("code") for a in answers]
    assert codes == [None, -32700, -32700, -32600, -32601, -32602, None]
    assert text_of(answers[-1]) == ("0", False)
    assert "the line is not UTF-8" in log


def test_a_second_agent_gets_no_identity(two: tuple[Comm, Session, Session], tmp_path: object) -> None:
    comm, _a, b = two
    tree = Tree(os.path.join(str(tmp_path), "tree"))
    stdin = "".join(
        json.dumps(m) + "\n"
        for m in (init(), call(1, "send", {"to": "alpha", "text": "x"}), call(2, "poll", {}))
    )
    before = comm.inbox_bytes("alpha")
    r = tree.run(b, [SOTD, "mcp"], layers=("codex", "claude"), stdin=stdin)
    answers = [json.loads(line) for line in r.out_lines]
    assert text_of(answers[1]) == (f"FAILED -> @alpha: {SECOND}", True)
    assert text_of(answers[2]) == (f"sotd comm poll: {SECOND}", True)
    assert comm.inbox_bytes("alpha") == before
    r = tree.run(b, [SOTD, "mcp"], layers=("claude",), stdin=stdin)
    answers = [json.loads(line) for line in r.out_lines]
    assert text_of(answers[1]) == ("  filed -> @alpha", False)


def test_a_child_cannot_write_into_the_answers(comm: Comm) -> None:
    """fd 1 is /dev/null once the loop runs: only answers reach the client's stdout."""
    s = comm.session("eps")
    answers, _ = exchange(s, init(), call(1, "list", {}))
    assert len(answers) == 2 and all(a["jsonrpc"] == "2.0" for a in answers)


def test_a_line_over_the_bound_is_answered_once_and_the_server_goes_on(
    two: tuple[Comm, Session, Session],
) -> None:
    _comm, _a, b = two
    huge = b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"x": "' + b"y" * (5 << 20) + b'"}}\n'
    answers, log = exchange(
        b, init(), call(1, "unread", {}), raw=huge + json.dumps(call(2, "unread", {})).encode() + b"\n"
    )
    assert [a.get("error", {}).get("code") for a in answers] == [None, None, -32700, None]
    assert answers[2]["error"]["message"] == "the line is longer than 4194304 bytes"
    assert text_of(answers[3]) == ("0", False)
    assert "a request line over 4194304 bytes was dropped" in log
