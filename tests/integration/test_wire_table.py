"""The wire as a table, fed bytes and read back as bytes, with no socket: the daemon's own connection
handler (``Server._on_conn``) and its real ops over a real comm folder, driven through an in-memory
stream. Every op and every error code of behaviour 2.3, hello first and hello refused, frames split into
single bytes or merged into one chunk, an oversize line and garbage (each closes only that connection).

Expected answers are written from the spec's texts; the test compares the exact bytes each request's
answer encodes to (``framing.encode``), in any order (requests run concurrently, as on a socket).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from sotd import __version__, _clock
from sotd.daemon.ops import Ops
from sotd.daemon.server import Server
from sotd.formats import registry
from sotd.wire import hello as wire_hello
from sotd.wire.framing import Envelope, encode
from tests.conftest import Comm

pytestmark = pytest.mark.integration

HOST = "testhost"
HELLO = wire_hello.hello_payload(host=HOST, os_user=f"uid:{os.geteuid()}", role="cli")
VERSION = {"host": HOST, "version": __version__}


class MemoryWriter:
    """The parts of ``asyncio.StreamWriter`` the server uses; every byte written is kept."""

    class _Transport:
        def get_write_buffer_size(self) -> int:
            return 0

    def __init__(self) -> None:
        self.data = b""
        self.closed = False
        self.transport = self._Transport()

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.data += data

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        return None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no socket: the peer's uid is not known (the other-uid row is a socket test)


def req(id: int, op: str, payload: dict[str, Any]) -> bytes:
    return json.dumps({"v": 1, "id": id, "kind": "req", "op": op, "payload": payload}).encode() + b"\n"


def res(id: int, op: str, payload: dict[str, Any]) -> bytes:
    return encode(Envelope(id, "res", op, payload))


def exchange(ops: Ops, chunks: list[bytes]) -> tuple[list[bytes], bool]:
    """Feed ``chunks`` then end of input to one connection; (answer lines sorted, closed by the daemon)."""

    async def go() -> MemoryWriter:
        reader = asyncio.StreamReader(limit=1 << 16)
        for c in chunks:
            reader.feed_data(c)
        reader.feed_eof()
        w = MemoryWriter()
        await asyncio.wait_for(Server("/nonexistent/sotd.sock", HOST, ops.handle)._on_conn(reader, w), 30)  # type: ignore[arg-type]
        return w

    w = asyncio.run(go())
    return sorted(w.data.splitlines(keepends=True)), w.closed


@pytest.fixture
def folder(tmp_path: object) -> Comm:
    comm = Comm(str(tmp_path))  # a comm folder whose lock-manager record names this box: appends are local
    a = comm.session("alice")
    assert a.run("join", "alice").code == 0
    for name, fields in (
        ("stale", {"last_seen": "2020-01-01T00:00:00Z"}),
        ("away", {"host": ""}),
        ("dir", {}),
    ):

        def change(
            doc: dict[str, object], name: str = name, fields: dict[str, str] = fields
        ) -> tuple[bool, None]:
            entry = dict(registry.agents_of(doc)["alice"])
            entry.update(fields)
            registry.agents_of(doc)[name] = entry
            return True, None

        registry.update(comm.layout, HOST, change, bound=5.0)
    os.mkdir(comm.layout.inbox("dir"))  # an inbox that cannot be appended to
    return comm


def _ops(comm: Comm, *, hub: bool = True) -> Ops:
    async def offer(payload: dict[str, Any], to: str) -> dict[str, Any] | None:
        return None  # no linked box

    async def forward(payload: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a box holding the record files locally")

    return Ops(layout=comm.layout, environ=dict(os.environ, SOT_COMM_HOME=comm.home), self_host=HOST,
               is_hub=hub, forward=forward, offer=offer, version_info=lambda: VERSION)  # fmt: skip


def _file(to: str, **kw: Any) -> dict[str, Any]:
    return {"from": "bob", "to": to, "text": "hi", **kw}


HELLO_OK = {"ok": True, "protocol": wire_hello.PROTOCOL, "host": HOST, "version": __version__}

# (op, payload, answer) after a good hello; the spec's texts (behaviour 2.3, D5)
TABLE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("version.query", {}, None),  # type: ignore[list-item]  # filled below: it carries debug counters
    ("comm.file", _file("alice"), {"ok": True}),
    ("comm.file", _file("../x"), {"error": 'not a handle: "../x"', "code": "bad_handle"}),
    ("comm.file", _file(""), {"error": 'not a handle: ""', "code": "bad_handle"}),
    ("comm.file", _file("ghost"), {"error": "no box knows that handle: ghost", "code": "not_here"}),
    ("comm.file", _file("away"), {"error": "no box knows that handle: away", "code": "not_here"}),
    ("comm.file", _file("stale"), {"error": "no live session holds @stale", "code": "no_live_session"}),
    ("agent.join", {"workspace_id": "", "handle": "a/b"}, {"error": 'invalid handle: "a/b"', "code": "bad_handle"}),
    ("agent.join", {"workspace_id": "ws-x", "handle": "h"}, {"error": 'unknown workspace: "ws-x"', "code": "unknown_workspace"}),
    ("agent.join", {"workspace_id": "", "handle": "free"}, {"ok": True}),
    ("agent.send", {"to": "alice", "text": "x"}, {"error": "agent.send carries window notifications only; mail to @alice goes through comm.file", "code": "mail_requires_comm_file"}),
    ("no.such", {}, {"error": "unknown op: no.such", "code": "unknown_op"}),
]  # fmt: skip


def _session_bytes() -> tuple[list[bytes], list[bytes]]:
    """The request bytes of one whole session and the answers expected (sorted), version.query aside."""
    sent = [req(1, "hello", HELLO)]
    want = [res(1, "hello", HELLO_OK)]
    for i, (op, payload, answer) in enumerate(TABLE, start=2):
        sent.append(req(i, op, payload))
        if answer is not None:
            want.append(res(i, op, answer))
    return sent, want


def _without_version(lines: list[bytes]) -> list[bytes]:
    out = []
    for ln in lines:
        env = json.loads(ln)
        if env["op"] == "version.query":
            assert env["kind"] == "res" and env["payload"]["daemon"] == VERSION
            continue
        out.append(ln)
    return sorted(out)


@pytest.mark.parametrize("shape", ["one chunk each", "single bytes", "all merged"])
def test_every_op_and_code_whole_split_and_merged(folder: Comm, shape: str) -> None:
    sent, want = _session_bytes()
    if shape == "single bytes":
        chunks = [bytes([b]) for b in b"".join(sent)]
    elif shape == "all merged":
        chunks = [b"".join(sent)]
    else:
        chunks = sent
    got, _closed = exchange(_ops(folder), chunks)
    assert _without_version(got) == sorted(want)
    with open(folder.layout.inbox("alice"), "rb") as f:
        lines = [json.loads(x) for x in f.read().splitlines()]
    assert [(m["from"], m["to"], m["repo"], m["msg"]) for m in lines] == [("bob", "alice", "daemon", "hi")]
    assert _clock.is_stamp(lines[0]["ts"])
    assert not os.path.exists(folder.layout.inbox("ghost")) and not os.path.exists(
        folder.layout.inbox("away")
    )


def test_a_failed_append_is_file_failed_with_the_appends_sentence(folder: Comm) -> None:
    got, _ = exchange(_ops(folder), [req(1, "hello", HELLO), req(2, "comm.file", _file("dir"))])
    answer = json.loads(got[1])["payload"]
    assert answer["code"] == "file_failed" and answer["error"].startswith("the append failed: "), answer


def test_a_forwarded_frame_at_a_box_that_is_not_the_hub(tmp_path: object) -> None:
    guest = Comm(os.path.join(str(tmp_path), "guest"), record=False)  # no record naming this box: a guest
    got, _ = exchange(
        _ops(guest, hub=False), [req(1, "hello", HELLO), req(2, "comm.file", _file("alice", forwarded=True))]
    )
    assert got[1] == res(2, "comm.file", {
        "error": f"a forwarded frame reached a daemon that is not its folder's hub ({HOST})", "code": "file_failed"})  # fmt: skip


def test_hello_first_and_hello_refused(folder: Comm) -> None:
    # a request before any hello: refused, and nothing after it is answered
    got, closed = exchange(_ops(folder), [req(7, "version.query", {}), req(8, "hello", HELLO)])
    assert got == [res(7, "version.query", {"error": "the first request on a connection must be hello", "code": "hello_required"})]  # fmt: skip
    assert closed
    for bad, answer in (
        (dict(HELLO, protocol=2), {"error": f"protocol mismatch: this daemon speaks protocol {wire_hello.PROTOCOL}, the client 2", "code": "protocol_mismatch"}),
        (dict(HELLO, role="boss"), {"error": 'unknown role: "boss" (one of fe, bridge, cli, agent, link)', "code": "bad_hello"}),
        ({k: v for k, v in HELLO.items() if k != "host"}, {"error": "a hello must name its host", "code": "bad_hello"}),
    ):  # fmt: skip
        got, closed = exchange(_ops(folder), [req(1, "hello", bad), req(2, "version.query", {})])
        assert got == [res(1, "hello", answer)] and closed, got


@pytest.mark.parametrize(
    "junk",
    [b"x" * ((1 << 20) + 10) + b"\n", b"\x00\xff garbage\n", b'{"v":1,"id":3,"kind":"req"}\n', b"[1,2]\n"],
    ids=["oversize", "garbage", "no op", "not an object"],
)
def test_bad_input_closes_the_connection_and_answers_nothing_more(folder: Comm, junk: bytes) -> None:
    got, closed = exchange(_ops(folder), [req(1, "hello", HELLO), req(2, "comm.file", _file("alice")), junk,
                                          req(4, "comm.file", _file("alice"))])  # fmt: skip
    assert closed
    assert res(1, "hello", HELLO_OK) in got and all(json.loads(x)["id"] != 4 for x in got), got
    with open(folder.layout.inbox("alice"), "rb") as f:
        assert len(f.read().splitlines()) <= 1  # request 4 was never run
