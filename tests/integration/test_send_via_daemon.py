"""Behaviour 1.3/1.4, D6: a box that cannot take the inbox lock itself hands the line to a daemon.

The comm folder here has no inbox-lock-manager record (no hub has recorded one), so `sotd comm send`
must not append itself: it sends one ``comm.file`` to the daemon at ``$SOT_SOCKET`` and prints the
daemon's answer. The daemon is the fake one that speaks the wire (the real daemon has its own tests).
"""

from __future__ import annotations

import os
import time

import pytest

from sotd import runtime
from tests.conftest import Comm, Session
from tests.fakes.fake_daemon import FakeDaemon

pytestmark = pytest.mark.integration


@pytest.fixture
def box(tmp_path: object) -> tuple[Comm, Session, Session]:
    comm = Comm(str(tmp_path), record=False)
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


def test_no_daemon_reachable(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    runtime_dir = os.path.join(comm.work, "run")  # the default socket's folder, private to this test
    r = a.run("send", "@beta", "hi", env={"SOT_SOCKET": "", "XDG_RUNTIME_DIR": runtime_dir})
    assert r.code == 1
    sock = runtime.default_socket({**a.env, "XDG_RUNTIME_DIR": runtime_dir})  # this folder's (issue 27)
    assert os.path.dirname(sock).startswith(os.path.join(runtime_dir, "sotd-sot-"))
    assert r.err == (
        "FAILED -> @beta: this box cannot take the inbox lock itself, and no daemon is reachable to file it\n"
        f"no daemon runs at {sock} (SOT_DAEMON_AUTOSTART is off); start it: sotd daemon start\n"
    )
    assert comm.inbox_bytes("beta") == b""


def test_daemon_ok_is_unindented_filed(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    sock = os.path.join(comm.work, "d.sock")
    with FakeDaemon(sock) as d:
        r = a.run("send", "@beta", "hello", "there", env={"SOT_SOCKET": sock})
    assert (r.code, r.out, r.err) == (0, "filed -> @beta\n", "")
    hello, req = d.received[0], d.received[1]
    assert (
        hello["op"] == "hello" and hello["payload"]["role"] == "cli" and hello["payload"]["name"] == "alpha"
    )
    assert req["op"] == "comm.file"
    payload = dict(req["payload"])
    expires = payload.pop("expires")
    assert payload == {"from": "alpha", "to": "beta", "text": "hello there", "broadcast": False}
    assert 0 < expires - time.time() <= 5.0  # when the send stops waiting: D6's 5 s from the dial
    assert comm.inbox_bytes("beta") == b"", "this box must not append itself"


def test_daemon_refusal_is_its_own_words(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    sock = os.path.join(comm.work, "d.sock")
    with FakeDaemon(sock) as d:
        d.answer = {"error": "no live session holds @beta", "code": "no_live_session"}
        r = a.run("send", "@beta", "hi", env={"SOT_SOCKET": sock})
    assert (r.code, r.out, r.err) == (1, "", "FAILED -> @beta: no live session holds @beta\n")


def test_old_daemon_unknown_op(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    sock = os.path.join(comm.work, "d.sock")
    with FakeDaemon(sock) as d:
        d.answer = {"error": "unknown op: comm.file"}
        r = a.run("send", "@beta", "hi", env={"SOT_SOCKET": sock})
    assert (r.code, r.err) == (1, "FAILED -> @beta: unknown op: comm.file\n")


def test_hello_refused(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    sock = os.path.join(comm.work, "d.sock")
    with FakeDaemon(sock) as d:
        d.mode = "refuse"
        d.refusal = {"error": "another OS user holds this host", "code": "forbidden"}
        r = a.run("send", "@beta", "hi", env={"SOT_SOCKET": sock})
    assert (r.code, r.err) == (1, "FAILED -> @beta: hello refused: another OS user holds this host\n")


def test_silent_daemon_fails_within_5s_of_the_start(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    sock = os.path.join(comm.work, "d.sock")
    with FakeDaemon(sock) as d:
        d.mode = "silent"
        t0 = time.monotonic()
        r = a.run("send", "@beta", "hi", env={"SOT_SOCKET": sock})
        elapsed = time.monotonic() - t0
    assert r.code == 1
    assert r.err == (
        f"FAILED -> @beta: the daemon did not answer at unix:{sock}\n"
        "check it: sotd daemon status (a hung one: sotd daemon stop; sotd daemon start)\n"
    )
    assert 4.0 <= elapsed < 5.5, elapsed  # 5 s from the command's start, less the way back (issue 27)


def test_broadcast_never_goes_to_the_relay(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    sock = os.path.join(comm.work, "relay.sock")
    with FakeDaemon(sock) as d:
        r = a.run("send", "--broadcast", "hi", env={"SOT_SOCKET": "", "SOT_RELAY_ENDPOINT": f"unix:{sock}"})
    assert r.code == 1
    assert d.received == []
    assert r.out == "Broadcast to 0 of 1 agent(s).\n"


def test_a_miss_goes_to_the_relay_endpoint_only(box: tuple[Comm, Session, Session]) -> None:
    comm, a, _ = box
    relay = os.path.join(comm.work, "relay.sock")
    local = os.path.join(comm.work, "local.sock")
    with FakeDaemon(relay) as r_d, FakeDaemon(local) as l_d:
        r = a.run(
            "send", "@gamma", "far away", env={"SOT_SOCKET": local, "SOT_RELAY_ENDPOINT": f"unix:{relay}"}
        )
    assert (r.code, r.out) == (0, "filed -> @gamma\n")
    assert [m["op"] for m in r_d.received] == ["hello", "comm.file"]
    assert l_d.received == []
