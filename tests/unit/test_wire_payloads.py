"""Each op's payload (``sotd.wire.payloads``) and the answers (``sotd.wire.answers``), as tables: what a
builder writes (as bytes on the wire) and what a reader takes from a request's bytes (behaviour 2.3)."""

from __future__ import annotations

from typing import Any

import pytest

from sotd.wire import answers, payloads
from sotd.wire.errors import RemoteProtocolError
from sotd.wire.framing import Decoder, Envelope, encode

pytestmark = pytest.mark.unit


def request_bytes(payload_json: bytes) -> dict[str, Any]:
    """The payload of one request line carrying ``payload_json`` (decoded as the daemon decodes it)."""
    (env,) = Decoder().feed(b'{"v":1,"id":2,"kind":"req","op":"comm.file","payload":' + payload_json + b"}\n")
    return env.payload


@pytest.mark.parametrize(
    ("args", "kw", "wire"),
    [
        (("a", "b", "hi"), {}, b'{"from":"a","to":"b","text":"hi","broadcast":false}'),
        (("a", "", "all"), {"broadcast": True}, b'{"from":"a","to":"","text":"all","broadcast":true}'),
        (("a", "b", "hi"), {"forwarded": True}, b'{"from":"a","to":"b","text":"hi","broadcast":false,"forwarded":true}'),
        (("a", "b", "hi"), {"expires": 12.5}, b'{"from":"a","to":"b","text":"hi","broadcast":false,"expires":12.5}'),
    ],
)  # fmt: skip
def test_comm_file_builder_bytes(args: tuple[str, str, str], kw: dict[str, Any], wire: bytes) -> None:
    line = encode(Envelope(2, "req", payloads.COMM_FILE, payloads.comm_file_payload(*args, **kw)))
    assert line == b'{"v":1,"id":2,"kind":"req","op":"comm.file","payload":' + wire + b"}\n"


# (payload bytes, (from, to, text, broadcast, forwarded, expires)) -- the spec's defaults, never a refusal
READS = [
    (b'{"from":"a","to":"b","text":"hi"}', ("a", "b", "hi", False, False, None)),
    (b'{"from":"a","to":"b","text":"hi","broadcast":true,"forwarded":true,"expires":7}', ("a", "b", "hi", True, True, 7)),
    (b'{"from":"a","to":"b"}', ("a", "b", "", False, False, None)),
    (b'{"from":"a","to":"b","text":null,"broadcast":"yes","forwarded":1}', ("a", "b", "", False, False, None)),
    (b'{"from":"a","to":"b","expires":true}', ("a", "b", "", False, False, None)),  # a bool is no deadline
    (b'{"from":"a","to":"b","expires":"soon"}', ("a", "b", "", False, False, None)),
    (b'{"from":"a","to":"b","expires":1.25}', ("a", "b", "", False, False, 1.25)),
]  # fmt: skip


@pytest.mark.parametrize(("wire", "want"), READS)
def test_comm_file_reader(wire: bytes, want: tuple[object, ...]) -> None:
    got = payloads.read_comm_file(request_bytes(wire))
    assert (got.frm, got.to, got.text, got.broadcast, got.forwarded, got.expires) == want


@pytest.mark.parametrize(
    ("wire", "text"),
    [
        (b'{"to":"../x"}', 'not a handle: "../x"'),
        (b'{"to":""}', 'not a handle: ""'),
        (b"{}", 'not a handle: ""'),
        (b'{"to":"a\\"b"}', 'not a handle: "a\\"b"'),
        (b'{"to":7}', 'not a handle: "7"'),
    ],
)
def test_comm_file_to_not_a_handle_is_the_peers_fault_and_keeps_the_connection(
    wire: bytes, text: str
) -> None:
    with pytest.raises(RemoteProtocolError) as e:
        payloads.read_comm_file(request_bytes(wire))
    assert e.value.answer() == {"error": text, "code": "bad_handle"} and not e.value.closes


@pytest.mark.parametrize(
    ("wire", "text"),
    [
        (b'{"to":"b"}', 'the sender is not a handle: ""'),
        (b'{"from":"","to":"b"}', 'the sender is not a handle: ""'),
        (b'{"from":3,"to":"b"}', 'the sender is not a handle: "3"'),
        (b'{"from":"../x","to":"b"}', 'the sender is not a handle: "../x"'),
        (b'{"from":"-a","to":"b"}', 'the sender is not a handle: "-a"'),
        (b'{"from":"a\\u001b]0;T\\u0007","to":"b"}', 'the sender is not a handle: "a\\u001b]0;T\\u0007"'),
        (b'{"from":"a\\nb","to":"b"}', 'the sender is not a handle: "a\\nb"'),
        (b'{"from":"' + b"x" * 4096 + b'","to":"b"}', 'the sender is not a handle: "' + "x" * 128 + '"\u2026'),
        (b'{"from":"' + b"x" * 65 + b'","to":"b"}', 'the sender is not a handle: "' + "x" * 65 + '"'),
        (b'{"from":"' + b"y" * 128 + b'","to":"b"}', 'the sender is not a handle: "' + "y" * 128 + '"'),
        (b'{"from":"' + b"y" * 129 + b'","to":"b"}', 'the sender is not a handle: "' + "y" * 128 + '"\u2026'),
        (b'{"from":[' + b"1," * 5000 + b'1],"to":"b"}', 'the sender is not a handle: "[' + "1, " * 42 + '1"\u2026'),
        (b'{"from":"../x","to":"../y"}', 'not a handle: "../y"'),  # ``to`` is step 1
    ],
)  # fmt: skip
def test_comm_file_from_not_a_handle_is_refused_as_bad_handle(wire: bytes, text: str) -> None:
    with pytest.raises(RemoteProtocolError) as e:
        payloads.read_comm_file(request_bytes(wire))
    assert e.value.answer() == {"error": text, "code": "bad_handle"} and not e.value.closes


def test_a_frame_passed_on_keeps_the_deadline_and_drops_forwarded() -> None:
    req = payloads.read_comm_file(
        request_bytes(b'{"from":"a","to":"b","text":"t","forwarded":true,"expires":9}')
    )
    assert req.frame() == {"from": "a", "to": "b", "text": "t", "broadcast": False, "expires": 9}
    req = payloads.read_comm_file(request_bytes(b'{"from":"a","to":"b","text":"t","broadcast":true}'))
    assert req.frame(broadcast=False) == {"from": "a", "to": "b", "text": "t", "broadcast": False}


@pytest.mark.parametrize(
    ("wire", "want"),
    [(b'{"workspace_id":"w","handle":"h"}', ("w", "h")), (b'{"handle":"h"}', ("", "h")), (b"{}", ("", None))],
)
def test_agent_join_reader(wire: bytes, want: tuple[object, object]) -> None:
    assert payloads.read_agent_join(request_bytes(wire)) == want
    assert payloads.agent_join_payload("w", "h") == {"workspace_id": "w", "handle": "h"}


@pytest.mark.parametrize(("wire", "want"), [(b'{"to":"a"}', "a"), (b"{}", ""), (b'{"to":5}', "")])
def test_agent_send_reader(wire: bytes, want: str) -> None:
    assert payloads.read_agent_send_to(request_bytes(wire)) == want


@pytest.mark.parametrize(
    ("wire", "want"), [(b'{"comm_folder":true}', True), (b"{}", False), (b'{"comm_folder":1}', False)]
)
def test_version_query_reader(wire: bytes, want: bool) -> None:
    assert payloads.read_version_query(request_bytes(wire)) is want
    assert payloads.version_query_payload(comm_folder=want) == ({"comm_folder": True} if want else {})


def test_answers() -> None:
    assert answers.refusal(answers.NOT_HERE, "t") == {"error": "t", "code": "not_here"}
    assert answers.unknown_op("no.such") == {"error": "unknown op: no.such", "code": "unknown_op"}
    assert answers.internal(ValueError("boom")) == {"error": "internal error: boom", "code": "internal"}
    assert [answers.quoted(v) for v in (None, "", 'a"b', 7, "é")] == ['""', '""', '"a\\"b"', '"7"', '"é"']
    assert len(set(answers.CODES)) == len(answers.CODES)
    assert len(set(payloads.OPS)) == len(payloads.OPS)


READ = [
    # answer, is_ok, refusal_text, code_of
    ({"ok": True}, True, None, None),
    ({"ok": 1}, False, None, None),
    ({"ok": "true"}, False, None, None),
    (
        {"error": "no box knows that handle: b", "code": "not_here"},
        False,
        "no box knows that handle: b",
        "not_here",
    ),
    ({"error": "", "code": "x"}, False, None, "x"),
    ({"error": True}, False, None, None),
    ({"error": ["a"]}, False, None, None),
    ({}, False, None, None),
]


@pytest.mark.parametrize(("answer", "ok", "text", "code"), READ)
def test_reading_an_answer(answer: dict[str, Any], ok: bool, text: str | None, code: object) -> None:
    assert answers.is_ok(answer) is ok
    assert answers.refusal_text(answer) == text
    assert answers.code_of(answer) == code


def test_an_ok_answer_with_fields_keeps_ok_first_and_their_order() -> None:
    got = answers.ok_with({"workspace_id": "w1", "slug": "s", "ok": True})
    assert list(got) == ["ok", "workspace_id", "slug"] and got["ok"] is True
    assert encode(Envelope(1, "res", payloads.WORKSPACE_DESTROY, answers.ok_with({"pruned": []}))) == (
        b'{"v":1,"id":1,"kind":"res","op":"workspace.destroy","payload":{"ok":true,"pruned":[]}}\n'
    )
    assert answers.OK == {"ok": True} and answers.ROOT_TAKEN in answers.CODES


@pytest.mark.parametrize(
    ("kw", "wire"),
    [
        (
            {"label": "api", "project_root": "/src/api", "agent": "claude", "agent_name": "helper"},
            b'{"label":"api","project_root":"/src/api","autostart_claude":true,"agent":"claude",'
            b'"agent_name":"helper","task":"","boot":true}',
        ),
        (
            {
                "label": "x",
                "project_root": "/x",
                "agent": "none",
                "agent_name": "",
                "account": "work",
                "command": ["sh"],
            },
            b'{"label":"x","project_root":"/x","autostart_claude":true,"agent":"none","agent_name":"",'
            b'"task":"","boot":true,"account":"work","command":["sh"]}',
        ),
    ],
)
def test_workspace_create_builder_bytes(kw: dict[str, Any], wire: bytes) -> None:
    line = encode(Envelope(2, "req", payloads.WORKSPACE_CREATE, payloads.workspace_create_payload(**kw)))
    assert line == b'{"v":1,"id":2,"kind":"req","op":"workspace.create","payload":' + wire + b"}\n"


@pytest.mark.parametrize(
    ("wire", "want"),
    [
        (b"{}", (None, "claude", "", None, "", None)),
        (b'{"agent":"","agent_name":"","label":"","account":""}', (None, "claude", "", None, "", None)),
        (
            b'{"project_root":"/p","agent":"codex","agent_name":"api","label":"L","account":"a","command":["x"]}',
            ("/p", "codex", "api", "L", "a", ["x"]),
        ),
        (b'{"project_root":7,"agent":3,"label":[1]}', (7, 3, "", [1], "", None)),  # the daemon checks types
    ],
)
def test_workspace_create_reader(wire: bytes, want: tuple[object, ...]) -> None:
    r = payloads.read_workspace_create(request_bytes(wire))
    assert (r.project_root, r.agent, r.agent_name, r.label, r.account, r.command) == want


@pytest.mark.parametrize(
    ("wire", "wid", "read"),
    [
        (b'{"workspace_id":"w1"}', "w1", False),
        (b'{"workspace_id":"w1","read":true}', "w1", True),
        (b'{"workspace_id":5,"read":1}', 5, False),
        (b"{}", None, False),
    ],
)
def test_workspace_id_and_activate_readers(wire: bytes, wid: object, read: bool) -> None:
    p = request_bytes(wire)
    assert (payloads.read_workspace_id(p), payloads.read_activate_read(p)) == (wid, read)
    assert payloads.workspace_id_payload("w1") == {"workspace_id": "w1"}


@pytest.mark.parametrize(
    ("wire", "to", "expires"),
    [
        (b'{"to":"bob","expires":12}', "bob", 12.0),
        (b'{"to":"bob","expires":true}', "bob", None),
        (b'{"expires":"soon"}', None, None),
    ],
)
def test_to_and_expires_readers(wire: bytes, to: object, expires: float | None) -> None:
    p = request_bytes(wire)
    assert (payloads.read_to(p), payloads.read_expires(p)) == (to, expires)
