"""sotd.wire: envelopes, framing, hello and the one-shot state machine. Bytes only, no sockets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd.errors import SotdError, WireError
from sotd.wire import messages
from sotd.wire.framing import MAX_LINE, Decoder, Envelope, decode_line, encode
from sotd.wire.hello import hello_payload, os_user_for_uid
from sotd.wire.messages import OneShot
from sotd.wire.payloads import comm_file_payload

pytestmark = pytest.mark.unit


def line(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def res(id, op, payload, kind="res"):
    return line({"v": 1, "id": id, "kind": kind, "op": op, "payload": payload})


# ----------------------------------------------------------------------------------------- envelopes

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
envelopes = st.builds(
    Envelope,
    id=st.integers(0, 2**64 - 1),
    kind=st.sampled_from(["req", "res", "evt"]),
    op=st.text(min_size=1, max_size=20),
    payload=st.dictionaries(st.text(max_size=8).filter(lambda k: k != "blob"), json_values, max_size=5),
    rev=st.none() | st.integers(0, 2**64 - 1),
)


@given(envelopes)
@settings(deadline=None)
def test_round_trip(env):
    data = encode(env)
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert decode_line(data[:-1]) == env
    assert Decoder().feed(data) == [env]


@given(st.lists(envelopes, min_size=1, max_size=4), st.data())
@settings(deadline=None)
def test_round_trip_split_anywhere(envs, data):
    stream = b"".join(encode(e) for e in envs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    dec = Decoder()
    got = []
    prev = 0
    for c in [*cuts, len(stream)]:
        got += dec.feed(stream[prev:c])
        prev = c
    assert got == envs and dec.pending == 0


def test_split_at_every_byte_boundary():
    stream = res(1, "hello", {"ok": True}) + res(2, "comm.file", {"ok": True, "é": "ü"}) + res(3, "x", {})
    want = Decoder().feed(stream)
    assert len(want) == 3
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            dec = Decoder()
            got = dec.feed(stream[:i]) + dec.feed(stream[i:j]) + dec.feed(stream[j:])
            assert got == want, (i, j)


def test_one_byte_at_a_time():
    stream = res(1, "hello", {"ok": True}) + b"\n" + res(2, "comm.file", {"ok": True})
    dec = Decoder()
    got = []
    for b in stream:
        got += dec.feed(bytes([b]))
    assert [e.op for e in got] == ["hello", "comm.file"]


@given(st.binary(max_size=300))
@settings(deadline=None)
def test_any_bytes_give_envelopes_or_wire_error(data):
    dec = Decoder()
    try:
        out = dec.feed(data) + dec.feed(b"")
    except WireError:
        return
    assert all(isinstance(e, Envelope) for e in out)


@given(
    st.lists(
        st.sampled_from([b"{", b"}", b'"', b"[", b"]", b":", b",", b"\n", b"1", b'"v"', b"\xff", b" "]),
        max_size=80,
    )
)
@settings(deadline=None)
def test_json_ish_bytes_give_envelopes_or_wire_error(parts):
    try:
        out = Decoder().feed(b"".join(parts))
    except WireError:
        return
    assert all(isinstance(e, Envelope) for e in out)


def test_deep_nesting_is_a_wire_error_not_a_crash():
    with pytest.raises(WireError, match="not JSON"):
        Decoder().feed(b"[" * 100_000 + b"\n")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"hello\n", "not JSON"),
        (b"\xff\xfe{}\n", "not UTF-8"),
        (b"[1,2]\n", "not a JSON object"),
        (b'"x"\n', "not a JSON object"),
        (b'{"v":1,"id":1,"kind":"res","op":"x","payload":{"a":NaN}}\n', "not JSON"),
        (b'{"id":1,"kind":"res","op":"x","payload":{}}\n', "'v'"),
        (b'{"v":2,"id":1,"kind":"res","op":"x","payload":{}}\n', "'v'"),
        (b'{"v":true,"id":1,"kind":"res","op":"x","payload":{}}\n', "'v'"),
        (b'{"v":1,"kind":"res","op":"x","payload":{}}\n', "'id'"),
        (b'{"v":1,"id":-1,"kind":"res","op":"x","payload":{}}\n', "'id'"),
        (b'{"v":1,"id":18446744073709551616,"kind":"res","op":"x","payload":{}}\n', "'id'"),
        (b'{"v":1,"id":1.5,"kind":"res","op":"x","payload":{}}\n', "'id'"),
        (b'{"v":1,"id":"1","kind":"res","op":"x","payload":{}}\n', "'id'"),
        (b'{"v":1,"id":1,"kind":"resp","op":"x","payload":{}}\n', "'kind'"),
        (b'{"v":1,"id":1,"kind":"res","op":"","payload":{}}\n', "'op'"),
        (b'{"v":1,"id":1,"kind":"res","op":7,"payload":{}}\n', "'op'"),
        (b'{"v":1,"id":1,"kind":"res","op":"x","rev":-3,"payload":{}}\n', "'rev'"),
        (b'{"v":1,"id":1,"kind":"res","op":"x"}\n', "'payload'"),
        (b'{"v":1,"id":1,"kind":"res","op":"x","payload":[]}\n', "'payload'"),
    ],
)
def test_bad_lines_name_the_reason(data, reason):
    with pytest.raises(WireError) as ei:
        Decoder().feed(data)
    assert reason in ei.value.message
    assert ei.value.code == "bad_frame"


def test_u64_bounds_and_optional_rev_accepted():
    env = decode_line(b'{"v":1,"id":18446744073709551615,"kind":"evt","op":"x","rev":0,"payload":{}}')
    assert env.id == 2**64 - 1 and env.rev == 0 and env.kind == "evt"
    assert decode_line(b'{"v":1,"id":0,"kind":"req","op":"x","rev":null,"payload":{}}').rev is None


def test_blank_lines_and_crlf_are_tolerated():
    data = b"\n  \n" + res(1, "x", {}).replace(b"\n", b"\r\n")
    assert [e.op for e in Decoder().feed(data)] == ["x"]


def test_error_is_sticky():
    dec = Decoder()
    with pytest.raises(WireError):
        dec.feed(b"nope\n")
    with pytest.raises(WireError):
        dec.feed(res(1, "x", {}))


def test_envelopes_before_a_bad_line_are_delivered_then_the_error():
    dec = Decoder()
    got = dec.feed(res(1, "a", {}) + b"garbage\n" + res(2, "b", {}))
    assert [e.op for e in got] == ["a"]
    assert dec.failed is not None
    with pytest.raises(WireError, match="not JSON"):
        dec.feed(b"")


# -------------------------------------------------------------------------------------------- oversize


def test_max_line_is_accepted():
    head = b'{"v":1,"id":1,"kind":"res","op":"x","payload":{"p":"'
    tail = b'"}}'
    body = head + b"a" * (MAX_LINE - len(head) - len(tail)) + tail
    assert len(body) == MAX_LINE
    assert len(Decoder().feed(body + b"\n")) == 1


def test_over_long_line_is_refused_with_its_newline():
    head = b'{"v":1,"id":1,"kind":"res","op":"x","payload":{"p":"'
    tail = b'"}}'
    body = head + b"a" * (MAX_LINE + 1 - len(head) - len(tail)) + tail
    with pytest.raises(WireError, match="longer than"):
        Decoder().feed(body + b"\n")


def test_over_long_line_is_refused_before_it_ends():
    dec = Decoder()
    assert dec.feed(b"{" + b" " * (MAX_LINE - 1)) == []  # exactly the bound, no newline yet: still waiting
    with pytest.raises(WireError, match="no newline yet"):
        dec.feed(b" ")


def test_over_long_line_in_small_feeds():
    dec = Decoder(max_line=100)
    for _ in range(10):
        assert dec.feed(b"x" * 10) == []
    with pytest.raises(WireError):
        dec.feed(b"x")


def test_encode_refuses_oversize_and_invalid():
    with pytest.raises(WireError):
        encode(Envelope(1, "req", "x", {"p": "a" * MAX_LINE}))
    with pytest.raises(WireError):
        encode(Envelope(-1, "req", "x", {}))
    with pytest.raises(WireError):
        encode(Envelope(1, "bogus", "x", {}))


def test_blob_bytes_are_skipped():
    env = res(1, "pty.screen", {"blob": {"len": 5}})
    got = Decoder().feed(env + b"\n{x\xff\n" + res(2, "b", {}))
    assert [e.op for e in got] == ["pty.screen", "b"]


def test_encode_is_compact_and_ordered():
    assert encode(Envelope(3, "req", "comm.file", {"to": "b"})) == (
        b'{"v":1,"id":3,"kind":"req","op":"comm.file","payload":{"to":"b"}}\n'
    )
    assert (
        encode(Envelope(3, "evt", "x", {}, rev=9))
        == b'{"v":1,"id":3,"kind":"evt","op":"x","rev":9,"payload":{}}\n'
    )


# ----------------------------------------------------------------------------------------------- hello


def test_hello_payload_is_exact():
    assert hello_payload(host="box", os_user=os_user_for_uid(1000), role="agent", name="alice") == {
        "client_id": "sot-comm",
        "last_seen_revision": 0,
        "protocol": 3,
        "app_version": "comm",
        "host": "box",
        "os_user": "uid:1000",
        "role": "agent",
        "name": "alice",
    }
    assert hello_payload(host="box", os_user="uid:0", role="cli")["name"] == ""
    link = hello_payload(host="g", os_user="uid:1", role="link", name="sotd-g", client_id="sotd-hub-link-42")
    assert link["client_id"] == "sotd-hub-link-42" and link["role"] == "link"


@pytest.mark.parametrize(("host", "user"), [("", "uid:1"), ("box", "")])
def test_no_hello_without_host_or_account(host, user):
    with pytest.raises(SotdError):
        hello_payload(host=host, os_user=user, role="cli")


def test_hello_role_is_checked():
    with pytest.raises(ValueError):
        hello_payload(host="b", os_user="uid:1", role="fe")


def test_comm_file_payload():
    assert comm_file_payload("a", "b", "hi") == {"from": "a", "to": "b", "text": "hi", "broadcast": False}
    assert comm_file_payload("a", "", "hi", broadcast=True, forwarded=True)["forwarded"] is True
    got = comm_file_payload("a", "b", "hi", expires=12.5)
    assert list(got) == ["from", "to", "text", "broadcast", "expires"] and got["expires"] == 12.5


# -------------------------------------------------------------------------------------------- one-shot

HELLO = hello_payload(host="box", os_user="uid:1", role="cli", name="a")


def shot():
    return OneShot("comm.file", comm_file_payload("a", "b", "hi"), HELLO)


def test_oneshot_sends_hello_then_request():
    s = shot()
    first, second = Decoder().feed(s.to_send())
    assert (first.kind, first.op, first.payload) == ("req", "hello", HELLO)
    assert (second.kind, second.op, second.id) == ("req", "comm.file", s.req_id)
    assert first.id != second.id


def test_oneshot_skips_events_and_unrelated_lines():
    s = shot()
    assert not s.feed(res(1, "hello", {"ok": True}))
    assert not s.feed(res(0, "comm.file", {"ok": True}, kind="evt"))  # an event with the op's name
    assert not s.feed(res(9, "workspace.list", {"workspaces": []}))
    assert not s.feed(res(5, "comm.file", {"ok": True}, kind="req"))
    assert s.feed(res(2, "comm.file", {"error": "no live session holds @b", "code": "no_live_session"}))
    assert s.response == {"error": "no live session holds @b", "code": "no_live_session"}
    assert s.final_refusal() is None
    assert s.feed(b"more garbage after the answer\n")  # done: nothing more is read


def test_oneshot_answer_split_at_every_byte():
    stream = (
        res(0, "comm.file", {}, kind="evt")
        + res(1, "hello", {"ok": True})
        + res(2, "comm.file", {"ok": True})
    )
    for i in range(len(stream) + 1):
        s = shot()
        s.feed(stream[:i])
        assert s.feed(stream[i:]) and s.response == {"ok": True}


def test_oneshot_refused_hello_is_the_answer():
    s = shot()
    assert s.feed(
        res(1, "hello", {"error": "held by another OS user", "code": "forbidden"})
        + res(2, "comm.file", {"ok": True})
    )
    assert s.response is None and s.refused == "held by another OS user"
    assert s.final_refusal() == "held by another OS user"


def test_oneshot_refused_hello_without_code():
    s = shot()
    assert s.feed(res(1, "hello", {"error": "nope"}))
    assert s.final_refusal() == "nope"


def test_oneshot_protocol_mismatch_is_not_decisive():
    s = shot()
    assert not s.feed(res(1, "hello", {"error": "protocol 3 != 4", "code": "protocol_mismatch"}))
    assert s.final_refusal() == "protocol 3 != 4"
    assert s.feed(res(2, "comm.file", {"ok": True}))
    assert s.response == {"ok": True} and s.final_refusal() is None


def test_oneshot_accepted_hello_is_not_an_answer():
    s = shot()
    assert not s.feed(res(1, "hello", {"ok": True, "error": None}))
    assert s.final_refusal() is None


def test_oneshot_garbage_raises():
    s = shot()
    with pytest.raises(WireError):
        s.feed(res(1, "hello", {"ok": True}) + b"<html>\n")


def test_oneshot_answer_then_garbage_in_one_read_is_the_answer():
    s = shot()
    assert s.feed(res(2, "comm.file", {"ok": True}) + b"<html>\n")
    assert s.response == {"ok": True}


def test_roles_one_home_the_specs_five_and_ours_among_them() -> None:
    # behaviour 2.2: roles fe | bridge | cli | agent, and link for hub links (0.7.0)
    from sotd.wire import hello

    assert hello.ROLES == ("fe", "bridge", "cli", "agent", "link")
    # the client side names none of the hello's (nor the payloads') names again: each has one home
    from sotd.wire import payloads

    assert not {n for n in vars(messages) if not n.startswith("_")} & (
        set(hello.__all__) | set(payloads.__all__)
    )
    assert set(hello.CLIENT_ROLES) <= set(hello.ROLES)
    with pytest.raises(ValueError, match="hello role must be one of agent, cli, link"):
        hello.hello_payload(host="boxa", os_user="uid:1000", role="fe")
