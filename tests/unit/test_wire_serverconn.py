"""The server side of a connection (``sotd.wire.serverconn``), fed bytes only: no socket, no asyncio.

Each row of ``TRANSITIONS`` is driven from bytes and its actions compared with the exact answer bytes the
spec's texts encode to (behaviour 2.1, 2.2); misuse by our own code raises ``LocalProtocolError``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sotd.errors import SotdError, WireError
from sotd.wire import serverconn as sc
from sotd.wire.errors import LocalProtocolError, RemoteProtocolError
from sotd.wire.framing import Envelope, encode
from sotd.wire.hello import CLIENT_ROLES, ROLES, hello_payload

pytestmark = pytest.mark.unit

HOST = "boxa"
VERSION = "9.9"
HELLO = hello_payload(host="boxb", os_user="uid:1000", role="cli", name="alice", client_id="c1")
HELLO_OK = {"ok": True, "protocol": 3, "host": HOST, "version": VERSION}


def line(id: int, op: str, payload: dict[str, Any], kind: str = "req") -> bytes:
    return json.dumps({"v": 1, "id": id, "kind": kind, "op": op, "payload": payload}).encode() + b"\n"


def answer(id: int, op: str, payload: dict[str, Any]) -> tuple[str, bytes]:
    return ("answer", encode(Envelope(id, "res", op, payload)))


def machine(peer_uid: int | None = 1000) -> sc.ServerConnection:
    return sc.ServerConnection(host=HOST, version=VERSION, own_uid=1000, peer_uid=peer_uid)


def feed(m: sc.ServerConnection, *chunks: bytes) -> list[tuple[object, ...]]:
    out: list[sc.Action] = []
    for c in chunks:
        out += m.receive_data(c)
    return sc.describe(out)


ACCEPTED = ("accepted", "cli", "boxb", "alice", "c1")
FORBIDDEN_TEXT = "this daemon serves uid 1000 only (the peer runs as uid 2000)"
MISMATCH = "protocol mismatch: this daemon speaks protocol 3, the client 2"
BAD_ROLE = 'unknown role: "boss" (one of fe, bridge, cli, agent, link)'

# (peer uid, bytes, actions, state after): one row per line of TRANSITIONS reached from bytes
TABLE: list[tuple[int | None, bytes, list[tuple[object, ...]], str]] = [
    (1000, line(1, "hello", HELLO), [answer(1, "hello", HELLO_OK), ACCEPTED], sc.OPEN),
    (None, line(1, "hello", HELLO), [answer(1, "hello", HELLO_OK), ACCEPTED], sc.OPEN),  # uid unknown
    (1000, line(1, "hello", dict(HELLO, protocol=2)),
     [answer(1, "hello", {"error": MISMATCH, "code": "protocol_mismatch"}),
      ("close", "protocol_mismatch", f"refused hello: {MISMATCH}", "info")], sc.CLOSED),
    (1000, line(1, "hello", dict(HELLO, role="boss")),
     [answer(1, "hello", {"error": BAD_ROLE, "code": "bad_hello"}),
      ("close", "bad_hello", f"refused hello: {BAD_ROLE}", "info")], sc.CLOSED),
    (1000, line(1, "hello", dict(HELLO, host="")),
     [answer(1, "hello", {"error": "a hello must name its host", "code": "bad_hello"}),
      ("close", "bad_hello", "refused hello: a hello must name its host", "info")], sc.CLOSED),
    (1000, line(7, "version.query", {}),
     [answer(7, "version.query", {"error": "the first request on a connection must be hello", "code": "hello_required"}),
      ("close", "hello_required", "closed: first envelope was req version.query, not hello", "warning")], sc.CLOSED),
    (1000, line(7, "hello", {"ok": True}, kind="res"),
     [answer(7, "hello", {"error": "the first request on a connection must be hello", "code": "hello_required"}),
      ("close", "hello_required", "closed: first envelope was res hello, not hello", "warning")], sc.CLOSED),
    (1000, line(0, "workspace.changed", {}, kind="evt"),
     [answer(0, "workspace.changed", {"error": "the first request on a connection must be hello", "code": "hello_required"}),
      ("close", "hello_required", "closed: first envelope was evt workspace.changed, not hello", "warning")], sc.CLOSED),
    (2000, line(1, "hello", HELLO),
     [answer(1, "hello", {"error": FORBIDDEN_TEXT, "code": "forbidden"}),
      ("close", "forbidden", "refused a hello from uid 2000 (this daemon serves uid 1000)", "warning")], sc.CLOSED),
    (2000, line(4, "comm.file", {}),
     [answer(4, "comm.file", {"error": FORBIDDEN_TEXT, "code": "forbidden"}),
      ("close", "forbidden", "refused a hello from uid 2000 (this daemon serves uid 1000)", "warning")], sc.CLOSED),
    (1000, b"\x00\xff garbage\n",
     [("close", "bad_frame", "closed: malformed input before hello: envelope is not UTF-8 (invalid start byte at byte 1)", "warning")], sc.CLOSED),
    (2000, b"[1]\n",
     [("close", "bad_frame", "closed: malformed input before hello: envelope is not a JSON object (got list)", "warning")], sc.CLOSED),
    (1000, b"", [("end",)], sc.ENDED),
    (2000, b"", [("end",)], sc.ENDED),
    (1000, b'{"v":1,', [], sc.AWAITING_HELLO),  # half an envelope: nothing yet
    (1000, b"\n\n", [], sc.AWAITING_HELLO),  # blank lines are skipped
]  # fmt: skip


@pytest.mark.parametrize(("uid", "data", "want", "state"), TABLE)
def test_before_hello(uid: int | None, data: bytes, want: list[tuple[object, ...]], state: str) -> None:
    m = machine(uid)
    assert feed(m, data) == want
    assert m.state == state


def opened() -> sc.ServerConnection:
    m = machine()
    feed(m, line(1, "hello", HELLO))
    return m


# (bytes after an accepted hello, actions, state after)
AFTER: list[tuple[bytes, list[tuple[object, ...]], str]] = [
    (line(2, "comm.file", {"to": "x"}), [("run", 2, "comm.file")], sc.OPEN),
    (line(2, "no.such", {}), [("run", 2, "no.such")], sc.OPEN),  # unknown ops are the dispatcher's answer
    (line(5, "comm.file", {"ok": True}, kind="res"), [("resolve", 5, "comm.file")], sc.OPEN),
    (line(0, "workspace.changed", {}, kind="evt"), [], sc.OPEN),
    (line(3, "hello", HELLO), [answer(3, "hello", HELLO_OK)], sc.OPEN),  # a second hello: answered only
    (line(3, "hello", dict(HELLO, protocol=9)),
     [answer(3, "hello", {"error": "protocol mismatch: this daemon speaks protocol 3, the client 9",
                          "code": "protocol_mismatch"})], sc.OPEN),  # refused, and the connection stays
    (b"not json\n", [("close", "bad_frame", "closed: malformed input: envelope is not JSON (Expecting value: line 1 column 1 (char 0))", "warning")], sc.CLOSED),
    (b"x" * ((1 << 20) + 1), [("close", "bad_frame", "closed: malformed input: envelope longer than 1048576 bytes (no newline yet)", "warning")], sc.CLOSED),
    (b"", [("end",)], sc.ENDED),
]  # fmt: skip


@pytest.mark.parametrize(("data", "want", "state"), AFTER)
def test_after_hello(data: bytes, want: list[tuple[object, ...]], state: str) -> None:
    m = opened()
    assert feed(m, data) == want
    assert m.state == state


def test_the_table_is_whole() -> None:
    # every live state has a row for every input; ENDED and CLOSED have none (input after them is misuse)
    inputs = {sc.HELLO, sc.BAD_HELLO, sc.REQUEST, sc.RESPONSE, sc.EVENT, sc.BAD_BYTES, sc.END}
    for state in (sc.FOREIGN, sc.AWAITING_HELLO, sc.OPEN):
        assert {i for s, i in sc.TRANSITIONS if s == state} == inputs
    assert {s for s, _ in sc.TRANSITIONS} == {sc.FOREIGN, sc.AWAITING_HELLO, sc.OPEN}


def test_every_row_is_driven_by_the_byte_tables() -> None:
    seen: set[tuple[str, str]] = set()
    step = sc.ServerConnection._step

    def spy(self: sc.ServerConnection, got: str, *rest: Any) -> None:
        seen.add((self.state, got))
        step(self, got, *rest)

    sc.ServerConnection._step = spy  # type: ignore[method-assign]
    try:
        for uid, data, _w, _s in TABLE:
            feed(machine(uid), data)
        for data, _w, _s in AFTER:
            feed(opened(), data)
        for i in (sc.RESPONSE, sc.EVENT, sc.BAD_HELLO, sc.BAD_BYTES):  # the foreign rows the table skips
            m = machine(2000)
            feed(m, {sc.RESPONSE: line(1, "x", {}, "res"), sc.EVENT: line(1, "x", {}, "evt"),
                     sc.BAD_HELLO: line(1, "hello", {}), sc.BAD_BYTES: b"\xff\n"}[i])  # fmt: skip
    finally:
        sc.ServerConnection._step = step  # type: ignore[method-assign]
    assert seen == set(sc.TRANSITIONS)


def test_whole_session_in_one_chunk_and_byte_by_byte() -> None:
    stream = line(1, "hello", HELLO) + line(2, "comm.file", {"to": "a"}) + line(3, "agent.join", {})
    want = [answer(1, "hello", HELLO_OK), ACCEPTED, ("run", 2, "comm.file"), ("run", 3, "agent.join")]
    assert feed(machine(), stream) == want
    assert feed(machine(), *(bytes([b]) for b in stream)) == want


def test_what_follows_a_refused_hello_in_the_same_bytes_is_never_read() -> None:
    m = machine()
    got = feed(m, line(1, "hello", dict(HELLO, role="boss")) + line(2, "comm.file", {"to": "a"}))
    assert [a[0] for a in got] == ["answer", "close"] and m.state == sc.CLOSED


def test_good_envelopes_before_a_bad_line_act_and_the_error_comes_with_the_next_bytes() -> None:
    m = opened()
    assert feed(m, line(2, "comm.file", {}) + b"garbage\n") == [("run", 2, "comm.file")]
    assert feed(m, b"more")[0][:2] == ("close", "bad_frame")


def test_the_end_inside_an_envelope_is_malformed() -> None:
    m = opened()
    assert feed(m, b'{"v":1', b"") == [
        ("close", "bad_frame", "closed: malformed input: the connection ended inside an envelope", "warning")
    ]


def test_answer_bytes_and_local_misuse() -> None:
    m = opened()
    (run,) = m.receive_data(line(2, "comm.file", {"to": "a"}) + line(0, "hello", HELLO, kind="evt"))
    assert isinstance(run, sc.ServeRequest)
    assert (
        m.answer(run.env, {"ok": True})
        == b'{"v":1,"id":2,"kind":"res","op":"comm.file","payload":{"ok":true}}\n'
    )
    with pytest.raises(LocalProtocolError, match="not awaiting one"):
        m.answer(run.env, {"ok": True})  # twice
    with pytest.raises(LocalProtocolError):
        m.answer(Envelope(9, "req", "comm.file", {}), {"ok": True})  # never handed out
    assert not isinstance(LocalProtocolError("x"), SotdError)  # a bug of ours: never shown as a user's error


def test_a_request_handed_out_before_the_end_may_still_be_answered() -> None:
    m = opened()
    (run,) = m.receive_data(line(2, "comm.file", {}))
    assert feed(m, b"") == [("end",)]
    assert m.answer(run.env, {"ok": True}).startswith(b'{"v":1,"id":2,')
    with pytest.raises(LocalProtocolError, match="ended"):
        m.receive_data(b"more")


def test_a_closed_machine_refuses_to_be_fed() -> None:
    m = machine()
    feed(m, b"garbage\n")
    with pytest.raises(LocalProtocolError, match="closed"):
        m.receive_data(line(1, "hello", HELLO))


def test_a_refusal_whose_echo_cannot_be_framed_closes_unanswered() -> None:
    op = "x" * ((1 << 20) - 100)  # fits in a request line, but not with the refusal's text beside it
    m = machine()
    got = feed(m, line(1, op, {}))
    assert [a[0] for a in got] == ["close"] and m.state == sc.CLOSED


def test_a_peers_fault_is_a_wire_error_with_its_answer() -> None:
    (_a, close) = machine().receive_data(line(1, "hello", dict(HELLO, protocol=2)))
    assert isinstance(close, sc.Close) and isinstance(close.error, RemoteProtocolError)
    assert isinstance(close.error, WireError)
    assert close.error.answer() == {"error": MISMATCH, "code": "protocol_mismatch"} and close.error.closes


def test_one_role_list() -> None:
    assert ROLES == ("fe", "bridge", "cli", "agent", "link")  # every role behaviour 2.1 lets a daemon accept
    assert set(CLIENT_ROLES) <= set(ROLES)
