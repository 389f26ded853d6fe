"""sotd.client.unix against a fake daemon on a real Unix socket (behaviour 2.1, 2.2, 1.4; D6)."""

from __future__ import annotations

import os
import socket
import tempfile
import time

import pytest

from sotd.client.dial import DISCARD, DaemonEndpoint, parse_endpoint
from sotd.client.unix import request
from sotd.errors import DaemonUnreachable, WireError
from sotd.wire.hello import hello_payload
from sotd.wire.payloads import comm_file_payload
from tests.fakes.fake_daemon import FakeDaemon

pytestmark = pytest.mark.integration

HELLO = hello_payload(host="box", os_user="uid:1000", role="cli", name="alice")
FILE = comm_file_payload("alice", "bob", "hi")


@pytest.fixture
def sock_dir():
    # A short folder: AF_UNIX paths are bounded at 108 bytes and tmp_path can be long.
    with tempfile.TemporaryDirectory(prefix="sotd-cu-") as d:
        yield d


@pytest.fixture
def daemon(sock_dir):
    fd = FakeDaemon(os.path.join(sock_dir, "d.sock"))
    yield fd
    fd.close()


def test_ok_answer_skips_event_and_other_responses(daemon):
    assert request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3) == {"ok": True}
    hello, req = daemon.received
    assert hello["op"] == "hello" and hello["kind"] == "req" and hello["payload"] == HELLO
    assert req["op"] == "comm.file" and req["payload"] == FILE and req["v"] == 1
    assert req["id"] != hello["id"]


def test_error_with_code_is_returned_verbatim(daemon):
    daemon.answer = {"error": "no live session holds @bob", "code": "no_live_session"}
    assert request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3) == daemon.answer


def test_error_without_code_is_returned_verbatim(daemon):
    daemon.answer = {"error": "unknown op: comm.file"}
    assert request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3) == {"error": "unknown op: comm.file"}


def test_silent_daemon_fails_at_the_deadline(daemon):
    daemon.mode = "silent"
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable) as ei:
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=0.5)
    elapsed = time.monotonic() - t0
    assert 0.45 <= elapsed < 1.5
    assert ei.value.message == f"the daemon did not answer at unix:{daemon.path}"
    assert ei.value.code == "no_answer"


def test_silent_daemon_full_five_second_deadline(daemon):
    daemon.mode = "silent"
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable) as ei:
        request(daemon.path, "comm.file", FILE, HELLO)
    elapsed = time.monotonic() - t0
    assert 4.9 <= elapsed <= 6.0
    assert str(ei.value) == f"the daemon did not answer at unix:{daemon.path}"


def test_one_deadline_covers_the_hello(daemon):
    # D6: a slow hello eats into the same window; the answer after it comes too late.
    daemon.delay_s = 1.0
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable):
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=0.6)
    assert time.monotonic() - t0 < 1.0


def test_slow_answer_within_the_deadline_is_taken(daemon):
    daemon.delay_s = 0.3
    assert request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3) == {"ok": True}


def test_refused_hello_is_the_answer_at_once(daemon):
    daemon.mode = "refuse"
    daemon.refusal = {"error": "host box is held by another OS user", "code": "forbidden"}
    daemon.answer_after_refusal = True
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable) as ei:
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3)
    assert time.monotonic() - t0 < 2
    assert ei.value.message == "hello refused: host box is held by another OS user"
    assert ei.value.code == "hello_refused"


def test_refused_hello_without_code_is_decisive(daemon):
    daemon.mode = "refuse"
    daemon.refusal = {"error": "bad hello"}
    with pytest.raises(DaemonUnreachable, match=r"^hello refused: bad hello$"):
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3)


def test_protocol_mismatch_waits_for_an_answer(daemon):
    daemon.mode = "refuse"
    daemon.refusal = {"error": "protocol 3 is not 4", "code": "protocol_mismatch"}
    daemon.answer_after_refusal = True
    assert request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3) == {"ok": True}


def test_protocol_mismatch_is_the_answer_when_nothing_else_comes(daemon):
    daemon.mode = "refuse"
    daemon.refusal = {"error": "protocol 3 is not 4", "code": "protocol_mismatch"}
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable, match=r"^hello refused: protocol 3 is not 4$"):
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=0.5)
    assert time.monotonic() - t0 >= 0.45


def test_garbage_is_a_clear_wire_error(daemon):
    daemon.mode = "garbage"
    with pytest.raises(WireError) as ei:
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3)
    assert ei.value.message.startswith(f"the daemon at unix:{daemon.path} sent a malformed line: ")
    assert "not JSON" in ei.value.message


def test_json_that_is_not_an_envelope_is_a_wire_error(daemon):
    daemon.mode = "garbage"
    daemon.garbage = b'{"v":1,"id":3,"kind":"res","op":"comm.file"}\n'
    with pytest.raises(WireError, match="payload"):
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3)


def test_closed_without_answer_is_no_answer(daemon):
    daemon.mode = "close"
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable) as ei:
        request(daemon.path, "comm.file", FILE, HELLO, deadline_s=3)
    assert time.monotonic() - t0 < 2
    assert ei.value.message == f"the daemon did not answer at unix:{daemon.path}"
    assert ei.value.hint


def test_no_socket_is_no_answer(sock_dir):
    path = os.path.join(sock_dir, "absent.sock")
    with pytest.raises(DaemonUnreachable) as ei:
        request(path, "comm.file", FILE, HELLO, deadline_s=1)
    assert ei.value.message == f"the daemon did not answer at unix:{path}"


def test_listener_that_never_accepts_fails_in_time(sock_dir):
    path = os.path.join(sock_dir, "backlog.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(DaemonUnreachable):
            request(path, "comm.file", FILE, HELLO, deadline_s=0.5)
        assert time.monotonic() - t0 < 1.5
    finally:
        srv.close()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("unix:/run/sot/d.sock", DaemonEndpoint("unix", path="/run/sot/d.sock")),
        ("ssh:hub", DaemonEndpoint("ssh", target="hub")),
        ("ssh:hub.lan/laptop-2", DaemonEndpoint("ssh", target="hub.lan", host="laptop-2")),
        ("ssh:0box/a_b", DaemonEndpoint("ssh", target="0box", host="a_b")),
        ("ssh:box/Laptop", None),
        ("ssh:box/a b", None),
        ("ssh:Hub", None),
        ("ssh:-hub", None),
        ("ssh:hub/", None),
        ("ssh:", None),
        ("unix:", None),
        ("tcp:127.0.0.1:9", None),
        ("pipe:sotd", None),
        ("/run/sot/d.sock", None),
    ],
)
def test_parse_endpoint(text, want):
    ep, discard = parse_endpoint(text)
    if want is None:
        assert ep is None
        assert discard == "comm-lib: discarding an endpoint this version cannot dial: " + text
    else:
        assert ep == want and str(ep) == text and discard is None


def test_parse_endpoint_empty_is_silent():
    assert parse_endpoint("") == (None, None)
    assert DISCARD.endswith(": ")
