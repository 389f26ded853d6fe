"""The decision on ``expires`` in ``comm.file`` frames (docs/contract.md, "Frames and 0.6.6"; issue 14).

sotd keeps ``expires`` (a late receiver refuses rather than file mail its sender already reported FAILED),
because it costs neither side anything:

- every frame sotd sends reads, under the 0.6.6 daemon's rules as behaviour 2.1/2.3 write them
  (``tests/integration/reference_066.py``, a stand-in: the 0.6.6 daemon cannot run here), as the same
  request with the same verdict as that frame without ``expires``;
- a frame without ``expires``, exactly as a 0.6.6 ``comm-send.sh`` sends it, is filed by a real sotd
  daemon with the whole inbox-lock wait.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from typing import Any

import pytest

from sotd import _clock
from tests.conftest import Comm
from tests.fakes.fake_daemon import FakeDaemon
from tests.integration import reference_066
from tests.integration.test_daemon import (
    HELLO,
    Daemon,
    folder,
    inbox_lines,
    line,
    live,
    put_agents,
    raw,
    read_lines,
    start,
)

pytestmark = pytest.mark.integration


def _judge(frame: dict[str, Any], to: str) -> dict[str, Any]:
    req = reference_066.read_request(frame)
    floor = _clock.stamp(_clock.now() - reference_066.FRESH_SECS)
    return reference_066.verdict(req, home=True, agents={to: live()}, now_stamp_floor=floor)


def test_frames_sotd_sends_read_alike_under_the_0_6_6_rules(tmp_path: Any) -> None:
    comm = Comm(str(tmp_path), record=False)  # no lock-manager record: a send is the daemon's to file
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    sock = os.path.join(comm.work, "d.sock")
    with FakeDaemon(sock) as d:
        sent = a.run("send", "@beta", "through the daemon", env={"SOT_SOCKET": sock})
        relayed = a.run("send", "@zed", "through the relay", env={"SOT_RELAY_ENDPOINT": f"unix:{sock}"})
    assert (sent.code, relayed.code) == (0, 0), (sent, relayed)
    frames = [m for m in d.received if m.get("op") == "comm.file"]
    assert [f["payload"]["to"] for f in frames] == ["beta", "zed"]
    for frame in frames:
        to = frame["payload"]["to"]
        assert isinstance(frame["payload"]["expires"], float)  # seconds since the epoch, a JSON number
        without = dict(frame, payload={k: v for k, v in frame["payload"].items() if k != "expires"})
        assert reference_066.read_request(frame) == reference_066.read_request(without)
        want = {"append": {"from": "alpha", "to": to, "repo": "daemon", "msg": frame["payload"]["text"]}}
        assert _judge(frame, to) == _judge(without, to) == want


def test_the_0_6_6_rules_refuse_what_they_cannot_read() -> None:
    """The stand-in is not a rubber stamp: the field types 2.3 names are checked."""
    good = {
        "v": 1,
        "id": 7,
        "kind": "req",
        "op": "comm.file",
        "payload": {"from": "a", "to": "b", "text": "x"},
    }
    assert _judge(good, "b") == {"append": {"from": "a", "to": "b", "repo": "daemon", "msg": "x"}}
    for bad in ({"text": 5}, {"broadcast": "yes"}, {"forwarded": 1}, {"to": None}):
        frame = dict(good, payload={**good["payload"], **bad})
        with pytest.raises(reference_066.Refused):
            reference_066.read_request(frame)
    with pytest.raises(reference_066.Refused):
        reference_066.read_request(dict(good, id=-1))
    assert _judge(dict(good, payload={**good["payload"], "to": "../x"}), "b")["code"] == "bad_handle"


def test_a_0_6_6_frame_without_expires_is_filed_with_the_whole_lock_wait(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    put_agents(lay, beta=live())
    d = start(daemons, work, "a", lay.home, "testhost", env={"SOT_INBOX_LOCK_WAIT_SECS": "3"})
    fd = os.open(lay.inbox_lock("beta"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held 1 s: a frame without expires waits for it (bound 3 s)
    release = threading.Timer(1.0, lambda: os.close(fd))
    release.start()
    try:
        s = raw(d.sock)
        s.sendall(line(1, "hello", HELLO))
        # behaviour 1.4: exactly {from, to, text, broadcast:false}; no id, no forwarded, no expires
        s.sendall(
            line(2, "comm.file", {"from": "alpha", "to": "beta", "text": "from 0.6.6", "broadcast": False})
        )
        t0 = time.monotonic()
        answers = read_lines(s, 2)
        took = time.monotonic() - t0
        s.close()
    finally:
        release.join(5)
    assert answers[0]["payload"]["ok"] is True
    assert answers[1]["op"] == "comm.file" and answers[1]["payload"] == {"ok": True}
    assert took >= 0.5  # it waited for the lock rather than giving up early
    [got] = inbox_lines(lay, "beta")
    assert (got["from"], got["to"], got["repo"], got["msg"]) == ("alpha", "beta", "daemon", "from 0.6.6")
