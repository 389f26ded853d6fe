"""Fuzz: frames and payloads at a real daemon (``sotd daemon run`` subprocess), issue 19 part 4.

Oracle: the daemon stays up and answers the next client; every answer is a response, a refusal being a
non-empty ``error`` with a ``code`` and a filing's success exactly ``{"ok": true}``; every ``comm.file`` answered ok is a whole line in the
inbox (no acknowledged line lost: with no junk on the connection, exactly one line per ok); every line the
daemon files is UTF-8 and holds no lone surrogate, whatever the frame's text held.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd.formats import inbox
from tests.fuzz.conftest import Cases, fuzz
from tests.fuzz.kit import carried, json_value, nasty_text, scratch_dir
from tests.integration.test_daemon import HELLO, Daemon, folder, live, put_agents

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[Daemon, Any]]:
    with scratch_dir() as work:
        lay = folder(work, "comm")
        put_agents(lay, alice=live())
        d = Daemon(work, "a", lay.home, "testhost", env={"SOT_INBOX_LOCK_WAIT_SECS": "1"})
        try:
            yield d, lay
        finally:
            d.stop()


def req(rid: int, op: str, payload: object) -> bytes:
    return json.dumps({"v": 1, "id": rid, "kind": "req", "op": op, "payload": payload}).encode() + b"\n"


comm_file = st.fixed_dictionaries(
    {"to": st.one_of(st.just("alice"), nasty_text), "text": st.one_of(nasty_text, json_value)},
    optional={
        "from": st.one_of(st.just("beta"), nasty_text, json_value),  # a handle, or a bad one (refused)
        "broadcast": json_value,
        "forwarded": json_value,
        # a deadline of any shape, or one a moment either side of now (an ok answered after it is logged)
        "expires": st.one_of(json_value, st.floats(-2.0, 30.0).map(lambda d: round(time.time() + d, 3))),
    },
)
other_op = st.tuples(
    st.sampled_from(["version.query", "hello", "agent.send", "agent.join", "no.such", ""]),
    st.one_of(st.dictionaries(nasty_text, json_value, max_size=3), json_value),
)
junk = st.binary(min_size=1, max_size=200).filter(lambda b: b"\n" not in b).map(lambda b: b + b"\n")
frame = st.one_of(
    comm_file.map(lambda p: ("comm.file", p)),
    comm_file.map(lambda p: ("comm.file", p)),
    other_op,
    junk,
)


def exchange(sock_path: str, frames: list[bytes]) -> list[dict[str, Any]]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    buf = b""
    try:
        s.connect(sock_path)
        s.sendall(req(0, "hello", HELLO) + b"".join(frames))
        s.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            data = s.recv(65536)
            if not data:
                break
            buf += data
    except OSError:
        pass  # the daemon closes on junk: that is its answer
    finally:
        s.close()
    return [json.loads(x) for x in buf.splitlines()]


@fuzz(400)
@given(frames=st.lists(frame, min_size=1, max_size=5))
def test_fuzz_frames_at_a_real_daemon(daemon: tuple[Daemon, Any], cases: Cases, frames: list[Any]) -> None:
    cases.one()
    d, lay = daemon
    before = len(inbox.complete_lines(_inbox(lay)))
    wire: list[bytes] = []
    to_alice: set[int] = set()
    for i, f in enumerate(frames, start=1):
        if isinstance(f, bytes):
            wire.append(f)
            continue
        op, payload = f
        wire.append(req(i, op, payload))
        if op == "comm.file" and isinstance(payload, dict) and payload.get("to") == "alice":
            to_alice.add(i)
    answers = exchange(d.sock, wire)
    assert answers and answers[0]["payload"].get("ok") is True, answers  # the hello
    ok_filed = 0
    for a in answers[1:]:
        assert a.get("kind") == "res", a
        p = a["payload"]
        if "error" in p:  # a refusal: its sentence and its code
            assert isinstance(p.get("error"), str) and p["error"], a
            assert isinstance(p.get("code"), str) and p["code"], a
        elif a["id"] in to_alice:
            assert p == {"ok": True}, a
            ok_filed += 1
    assert d.proc.poll() is None, d.logtext()
    assert "Traceback" not in d.logtext(), d.logtext()[-3000:]  # bad input is a logged line, never a trace
    assert d.request("version.query", {})["daemon"]["host"] == "testhost"
    lines = inbox.complete_lines(_inbox(lay))
    added = lines[before:]
    if any(isinstance(f, bytes) for f in frames):
        assert len(added) >= ok_filed  # a request in flight when junk closed the connection may still file
    else:
        assert len(added) == ok_filed, (answers, added)
    for raw in added:
        raw.decode("utf-8")
        assert carried(json.loads(raw)), raw


def _inbox(lay: Any) -> bytes:
    try:
        with open(lay.inbox("alice"), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def test_fuzz_daemon_fixture_files_once(daemon: tuple[Daemon, Any]) -> None:
    """The oracle can see a filing: one plain ``comm.file`` to alice is one more line."""
    d, lay = daemon
    before = len(inbox.complete_lines(_inbox(lay)))
    assert d.request("comm.file", {"from": "x", "to": "alice", "text": "seen"}) == {"ok": True}
    assert len(inbox.complete_lines(_inbox(lay))) == before + 1
    assert os.path.exists(lay.inbox("alice"))
