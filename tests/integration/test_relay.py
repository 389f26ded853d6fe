"""``comm-relay.sh send`` through its installed script (behaviour 1.4): a handle this folder does not list
goes to the relay endpoint as one ``comm.file``, and the daemon's answer is the result.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import Comm, Result, Session
from tests.fakes.fake_daemon import FakeDaemon

pytestmark = pytest.mark.integration


@pytest.fixture
def alpha(comm: Comm) -> Session:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    return a


def relay(s: Session, sock: str, *args: str) -> Result:
    return s.run("relay", "send", *args, env={"SOT_RELAY_ENDPOINT": f"unix:{sock}"})


def test_an_unlisted_handle_is_filed_by_the_relay_daemon(comm: Comm, alpha: Session) -> None:
    sock = os.path.join(comm.work, "relay.sock")
    with FakeDaemon(sock) as d:
        r = relay(alpha, sock, "@far", "hello", "@there")
    assert (r.code, r.out, r.err) == (0, "filed -> @far\n", ""), r  # not indented: a daemon filed it
    frames = [f for f in d.received if f["op"] == "comm.file"]
    assert len(frames) == 1
    payload = dict(frames[0]["payload"])
    payload.pop("expires", None)
    assert payload == {"from": "alpha", "to": "far", "text": "hello @there", "broadcast": False}
    assert comm.inbox_bytes("far") == b""


def test_the_relay_daemons_refusal_is_its_own_words(comm: Comm, alpha: Session) -> None:
    sock = os.path.join(comm.work, "relay.sock")
    with FakeDaemon(sock) as d:
        d.answer = {"error": "no box knows that handle: far", "code": "not_here"}
        r = relay(alpha, sock, "@far", "hello")
    assert (r.code, r.out, r.err) == (1, "", "FAILED -> @far: no box knows that handle: far\n")


def test_a_broadcast_never_goes_to_the_relay(comm: Comm, alpha: Session) -> None:
    b = comm.session("beta")
    assert b.run("join", "--name", "beta").code == 0
    sock = os.path.join(comm.work, "relay.sock")
    with FakeDaemon(sock) as d:
        r = relay(alpha, sock, "--all", "everyone")
    assert (r.code, r.out, r.err) == (0, "  filed -> @beta\nBroadcast to 1 agent(s).\n", "")
    assert d.received == []


def test_a_refused_process_changes_nothing(comm: Comm, alpha: Session, tmp_path) -> None:
    from tests.integration.test_cli_identity import Tree, snapshot

    tree = Tree(os.path.join(str(tmp_path), "tree"))
    before = snapshot(comm.home)
    r = tree.run(alpha, [os.path.join(comm.layout.bin_dir, "comm-relay.sh"), "send", "@beta", "hi"])
    assert r.code == 1 and r.out == "", r
    assert r.err.startswith("FAILED -> @beta: this process runs under ")
    assert snapshot(comm.home) == before
