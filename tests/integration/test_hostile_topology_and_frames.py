"""Issue 25, through real processes: a bad hosts.toml, frames the daemon grows past the line bound, bad
input and resets from a peer. Each shows the exact sentence, that nothing printed a traceback, and that the
daemon still serves a good client afterwards.

- every bad hosts.toml through ``sotd topology relay-endpoint``, ``sotd comm send`` and ``sotd doctor``;
- a running hub and guest (linked over ``unix:`` through the real stdio bridge) that keep serving when the
  file is saved bad, on SIGHUP and on ``sotd daemon reload``, logging the reason once; a guest started
  with a bad endpoint serves its folder;
- the largest legal ``comm.file`` forwarded by a guest or offered by the hub: a ``file_failed`` sentence;
  a linked box's odd answer quoted inside the hub's answer is cut to fit;
- a fake hub (a socket server in this test, dialled by a real guest daemon) whose offer makes the guest
  answer past the bound (cut to fit; the link stays up), then sends a malformed frame (one log line; the
  link's state says so);
- a client that resets right after hello, 30 times: the INFO ``closed by the peer`` line each time.

Every daemon is a child process killed in teardown; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.wire import framing
from tests.conftest import SOTD, Comm, wait_for
from tests.integration.test_daemon import (
    HELLO,
    Daemon,
    folder,
    hub_sock_path,
    inbox_lines,
    line,
    linked,
    live,
    put_agents,
    raw,
    read_lines,
    start,
    write_hosts,
)

pytestmark = pytest.mark.integration

SENTENCE = "this box's hosts.toml cannot be read, so it names no hub: "
PLAIN = "[a-z0-9][a-z0-9._-]*"
DEEP = 'hub = "boxa"\nx = ' + "[" * 500 + "]" * 500 + "\n"


def bad_endpoint(value: str) -> str:
    return f'hub = "boxa"\n[boxes.boxa]\nendpoint = {value}\n'


def ssh_target_why(got: str) -> str:
    return (
        f"[boxes.boxa] endpoint ssh:<target>[/<host>] needs a target that is a plain host name {PLAIN} "
        f"(got {got!r})"
    )


# (file text, the reason after SENTENCE; None: starts with the file's path)
BAD = [
    pytest.param(DEEP, "{path} is nested too deep to read", id="nested-500"),
    pytest.param(
        bad_endpoint('"unix:/run/h\\u0000.sock"'),
        "[boxes.boxa] endpoint holds a control character (got 'unix:/run/h\\x00.sock')",
        id="nul",
    ),
    pytest.param(
        bad_endpoint('"unix:/run/h\\nsecond line"'),
        "[boxes.boxa] endpoint holds a control character (got 'unix:/run/h\\nsecond line')",
        id="newline",
    ),
    pytest.param(bad_endpoint('"ssh:Boxa/boxa"'), ssh_target_why("ssh:Boxa/boxa"), id="capital"),
    pytest.param(bad_endpoint('"ssh:"'), ssh_target_why("ssh:"), id="empty-target"),
    pytest.param(bad_endpoint('"ssh:/boxa"'), ssh_target_why("ssh:/boxa"), id="no-target"),
    pytest.param(
        bad_endpoint('"ssh:-oProxyCommand=sh/boxa"'),
        ssh_target_why("ssh:-oProxyCommand=sh/boxa"),
        id="option",
    ),
    pytest.param(bad_endpoint("[1, 2]"), "[boxes.boxa] endpoint must be a string (got [1, 2])", id="type"),
]


def no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t and "Error:" not in t.replace("ERROR", ""), t


def sotd(env: dict[str, str], *args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SOTD, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(("text", "why"), BAD)
def test_a_bad_hosts_toml_is_one_sentence_in_every_command(tmp_path: Any, text: str, why: str) -> None:
    comm = Comm(str(tmp_path), install=False, host="boxb")
    hosts = os.path.join(str(tmp_path), "hosts.toml")
    with open(hosts, "w") as f:
        f.write(text)
    reason = SENTENCE + why.format(path=hosts)
    s = comm.session("beta")
    env = {"SOT_HOSTS_TOML": hosts}
    # relay-endpoint: the sentence, one line, exit 1
    r = sotd({**s.env, **env}, "topology", "relay-endpoint")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", reason + "\n")
    # a send to a handle this folder does not list: FAILED, the hub cannot be asked (the same sentence)
    assert s.run("join", "--name", "beta", env=env).code == 0
    before = comm.inbox_bytes("gamma")
    r2 = s.run("send", "@gamma", "hello", env=env)
    assert r2.code == 1 and r2.out == ""
    assert r2.err.splitlines()[0].startswith("FAILED -> @gamma: no sotd daemon found")
    assert f"the hub cannot be asked ({reason})" in r2.err
    assert comm.inbox_bytes("gamma") == before == b""
    # doctor: a finding with the sentence and the fix, exit 1
    r3 = sotd({**s.env, **env}, "doctor", cwd=s.root)
    assert r3.returncode == 1
    assert reason in r3.stdout + r3.stderr
    assert (
        f"fix the file (docs/deploy.md shows its shape): {hosts}; then: sotd daemon reload"
        in r3.stdout + r3.stderr
    )
    no_traceback(r.stderr, r2.err, r3.stdout, r3.stderr)


# --------------------------------------------------------------------------------- a running daemon


def count(d: Daemon, text: str) -> int:
    return d.logtext().count(text)


def status(d: Daemon) -> subprocess.CompletedProcess[str]:
    return sotd(d.env, "daemon", "status", "--socket", d.sock)


def test_running_daemons_keep_serving_through_a_bad_hosts_toml(tmp_path: Any, daemons: list[Daemon]) -> None:
    work = str(tmp_path)
    write_hosts(work, hub_sock_path(work))
    hosts = os.path.join(work, "hosts.toml")
    hub_lay = folder(work, "a")
    put_agents(hub_lay, alpha=live("boxa"))
    fast = {"SOTD_TEST_TOPOLOGY_CHECK_SECS": "0.2"}
    hub = start(daemons, work, "hub", hub_lay.home, "boxa", env=fast)
    # the guest shares the hub's folder but cannot take its lock (an NFS client): it forwards
    guest = start(
        daemons, work, "guest", hub_lay.home, "boxb", env={**fast, "SOT_COMM_TEST_LOCK_IDENTITY": "none@g"}
    )
    wait_for(lambda: linked(hub, "boxb"), what="the guest's link")
    assert guest.file("alpha", "before") == {"ok": True}
    with open(hosts, "w") as f:
        f.write(DEEP)
    reason = f"{SENTENCE}{hosts} is nested too deep to read"
    kept = "this daemon keeps serving its folder with the topology it read last (hub boxa)"
    logged = f"hosts.toml changed (the file changed): {reason}; {kept}"
    for d in (hub, guest):
        wait_for(lambda d=d: logged in d.logtext(), what="the reason logged")
    time.sleep(1.5)  # several watch ticks: still logged once, and the daemons still run
    for d in (hub, guest):
        assert d.proc.poll() is None
        assert count(d, logged) == 1 and count(d, reason) == 1
        no_traceback(d.logtext())
    # the last good topology still serves: the guest's link and its forward, the hub's own filing
    assert guest.file("alpha", "after") == {"ok": True}
    assert hub.file("alpha", "local") == {"ok": True}
    assert [x["msg"] for x in inbox_lines(hub_lay, "alpha")] == ["before", "after", "local"]
    # status and reload say it, with the fix; reload is a refusal, never internal
    r = status(guest)
    assert r.returncode == 0
    assert (
        f"{reason}; {kept}: fix the file (sotd topology path names it), then: sotd daemon reload" in r.stdout
    )
    assert f"link to the hub at unix:{hub.sock}: up since" in r.stdout
    r = sotd(hub.env, "daemon", "reload", "--socket", hub.sock)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"sotd daemon: reload refused: {reason}; {kept}\n")
    hub.proc.send_signal(signal.SIGHUP)
    wait_for(
        lambda: "hosts.toml read again (SIGHUP): it still cannot be read" in hub.logtext(), what="SIGHUP"
    )
    assert count(hub, reason) == 1 and hub.proc.poll() is None
    # a bad endpoint saved over it: logged once more (a new reason), the link kept
    with open(hosts, "w") as f:
        f.write('hub = "boxa"\n[boxes.boxa]\nendpoint = "ssh:Boxa/boxa"\n')
    why2 = f"{SENTENCE}{ssh_target_why('ssh:Boxa/boxa')}"
    wait_for(lambda: count(guest, why2) == 1, what="the second reason")
    assert guest.file("alpha", "still") == {"ok": True}
    # fixed: read again and applied
    write_hosts(work, hub_sock_path(work))
    for d in (hub, guest):
        wait_for(lambda d=d: "hosts.toml can be read again" in d.logtext(), what="read again")
    assert SENTENCE not in status(guest).stdout
    assert guest.file("alpha", "fixed") == {"ok": True}
    assert guest.logtext().count("is up") == 1  # the link was never dropped
    for d in (hub, guest):
        no_traceback(d.logtext())


def test_a_guest_started_with_a_bad_endpoint_serves_its_folder(tmp_path: Any, daemons: list[Daemon]) -> None:
    work = str(tmp_path)
    hosts = os.path.join(work, "hosts.toml")
    with open(hosts, "w") as f:
        f.write(bad_endpoint('"ssh:-oProxyCommand=sh/boxa"'))
    lay = folder(work, "b")
    put_agents(lay, beta=live("boxb"))
    guest = start(daemons, work, "guest", lay.home, "boxb", env={"SOT_COMM_TEST_LOCK_IDENTITY": "none@g"})
    reason = SENTENCE + ssh_target_why("ssh:-oProxyCommand=sh/boxa")
    time.sleep(1.5)
    assert guest.proc.poll() is None
    assert count(guest, reason) == 1
    info = guest.request("version.query", {})["daemon"]
    assert (
        info["topology_error"]
        == f"{reason}; this daemon keeps serving its folder with no topology until the file can be read"
    )
    # it has no hub to forward to: the answer is the file's sentence
    assert guest.file("beta") == {"error": reason, "code": "file_failed"}
    no_traceback(guest.logtext())


# ---------------------------------------------------------------------------- frames past the bound


def largest_frame(rid: int, to: str) -> bytes:
    """The largest legal ``comm.file`` line (exactly the 1 MiB bound, newline excluded)."""
    payload = {"from": "sender", "to": to, "text": "", "broadcast": False}
    base = len(line(rid, "comm.file", payload)) - 1
    payload["text"] = "x" * (framing.MAX_LINE - base)
    out = line(rid, "comm.file", payload)
    assert len(out) - 1 == framing.MAX_LINE
    return out


def one_answer(sock_path: str, frame: bytes) -> dict[str, Any]:
    with raw(sock_path) as s:
        s.sendall(line(1, "hello", HELLO) + frame)
        hello, answer = read_lines(s, 2)
    assert hello["payload"]["ok"] is True
    return dict(answer["payload"])


TOO_LONG = r"its frame would be (\d+) bytes, over the 1048576-byte line bound \(send it in parts\)"


def test_the_largest_legal_frame_forwarded_or_offered_is_a_file_failed_sentence(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    write_hosts(work, hub_sock_path(work))
    hub_lay = folder(work, "a")
    put_agents(hub_lay, alpha=live("boxa"))
    hub = start(daemons, work, "hub", hub_lay.home, "boxa")
    guest = start(daemons, work, "guest", hub_lay.home, "boxb", env={"SOT_COMM_TEST_LOCK_IDENTITY": "none@g"})
    wait_for(lambda: linked(hub, "boxb"), what="the guest's link")
    # the guest's forward of it (forwarded and expires added)
    got = one_answer(guest.sock, largest_frame(2, "alpha"))
    assert got["code"] == "file_failed"
    m = re.fullmatch(f"the message is too long to hand it to the hub: {TOO_LONG}", got["error"])
    assert m and int(m.group(1)) > framing.MAX_LINE, got
    # the hub's offer of it (a handle its folder does not list, a linked box to offer to)
    got = one_answer(hub.sock, largest_frame(2, "gamma"))
    assert got["code"] == "file_failed"
    assert re.fullmatch(
        f"this folder does not list @gamma, and the message is too long to offer it to the linked boxes: {TOO_LONG}",
        got["error"],
    ), got
    # the same frame for a listed handle is filed; the link still carries a small forward
    assert one_answer(hub.sock, largest_frame(2, "alpha")) == {"ok": True}
    assert guest.file("alpha", "small") == {"ok": True}
    assert [len(x["msg"]) for x in inbox_lines(hub_lay, "alpha")][-1:] == [5]
    assert guest.logtext().count("is up") == 1
    for d in (hub, guest):
        assert "internal" not in d.logtext()
        no_traceback(d.logtext())


def test_an_odd_answer_quoted_by_the_hub_is_cut_to_fit(tmp_path: Any, daemons: list[Daemon]) -> None:
    work = str(tmp_path)
    write_hosts(work, hub_sock_path(work))
    hub = start(daemons, work, "hub", folder(work, "a").home, "boxa", env={"SOT_INBOX_LOCK_WAIT_SECS": "3"})
    with raw(hub.sock) as link:  # a fake linked box
        link.sendall(line(1, "hello", dict(HELLO, role="link", host="boxb", client_id="sotd-hub-link-1")))
        assert read_lines(link, 1)[0]["payload"]["ok"] is True
        wait_for(lambda: linked(hub, "boxb"), what="the fake link")
        answer: list[dict[str, Any]] = []
        t = threading.Thread(target=lambda: answer.append(hub.file("zed")), daemon=True)
        t.start()
        [offer] = read_lines(link, 1)
        odd = {"weird": "z" * (framing.MAX_LINE - 200)}  # fits its own line; quoted, it would not
        res = json.dumps({"v": 1, "id": offer["id"], "kind": "res", "op": "comm.file", "payload": odd})
        assert len(res) <= framing.MAX_LINE
        link.sendall(res.encode() + b"\n")
        t.join(15)
        assert answer, "the client got no answer"
        [got] = answer
        assert got["code"] == "file_failed"
        assert got["error"].startswith('boxb answered neither ok nor a refusal: {"weird": "zzzz')
        assert got["error"].endswith(f"... ({len(json.dumps(odd, ensure_ascii=False))} characters in all)")
        # an offer in flight when the link sends a malformed frame (and is closed for it) is answered at once
        answer.clear()
        t = threading.Thread(target=lambda: answer.append(hub.file("zed")), daemon=True)
        t0 = time.monotonic()
        t.start()
        read_lines(link, 1)
        link.sendall(b"{not json\n")
        t.join(15)
        assert time.monotonic() - t0 < 3.5  # well inside the offer's 4 s bound
    assert answer == [{"error": "no box answered for @zed within 4s: boxb", "code": "file_failed"}]
    assert (
        "connection" in hub.logtext() and ": closed: malformed input: envelope is not JSON (" in hub.logtext()
    )
    # the link's state says why it is down
    later = hub.file("zed")
    assert later["code"] == "not_here"
    assert later["error"] == "no box knows that handle: zed (no link from: boxb)", later
    assert re.fullmatch(
        r"the link from boxb is down since "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: it sent bad input: envelope is not JSON \(.+\)",
        later["hint"],
    ), later
    assert hub.request("version.query", {})["daemon"]["host"] == "boxa"  # still serving
    no_traceback(hub.logtext())


# ------------------------------------------------------------------------------------- a fake hub


class FakeHub:
    """A hub that is a socket server in this test: it answers a link's hello and then sends what the test
    says down the link, reading the guest's answers. One link at a time; every wait bounded."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(4)
        self.srv.settimeout(30)
        self.conn: socket.socket | None = None
        self.buf = b""

    def accept(self) -> None:
        conn, _ = self.srv.accept()
        conn.settimeout(15)
        if self.conn is not None:
            self.conn.close()
        self.conn, self.buf = conn, b""
        hello = self.read()
        assert hello["op"] == "hello" and hello["payload"]["role"] == "link"
        ok = {"ok": True, "protocol": 3, "host": "boxa", "version": "fake"}
        self.send({"v": 1, "id": hello["id"], "kind": "res", "op": "hello", "payload": ok})

    def send(self, obj: dict[str, Any]) -> None:
        assert self.conn is not None
        self.conn.sendall(json.dumps(obj).encode() + b"\n")

    def read(self) -> dict[str, Any]:
        """The next line from the guest that is not a keepalive (answered here)."""
        assert self.conn is not None
        while True:
            while b"\n" not in self.buf:
                data = self.conn.recv(1 << 20)
                assert data, "the guest closed the link"
                self.buf += data
            one, _, self.buf = self.buf.partition(b"\n")
            assert len(one) <= framing.MAX_LINE
            got: dict[str, Any] = json.loads(one)
            if got["kind"] == "req" and got["op"] == "version.query":
                self.send({"v": 1, "id": got["id"], "kind": "res", "op": "version.query", "payload": {}})
                continue
            return got

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.srv.close()


@pytest.fixture
def fake_hub(tmp_path: Any) -> Iterator[FakeHub]:
    run = os.path.join(str(tmp_path), "run-fakehub")
    os.mkdir(run, 0o700)
    hub = FakeHub(os.path.join(run, "sotd.sock"))
    yield hub
    hub.close()


def test_a_guest_answers_past_the_bound_cut_to_fit_and_a_malformed_frame_is_a_logged_line(
    tmp_path: Any, daemons: list[Daemon], fake_hub: FakeHub
) -> None:
    work = str(tmp_path)
    write_hosts(work, fake_hub.path)
    lay = folder(work, "b")
    put_agents(lay, gamma=live("boxb"))
    guest = start(daemons, work, "guest", lay.home, "boxb")
    fake_hub.accept()
    # an offer whose answer echoes a handle long enough to outgrow the bound (bad_handle quotes it)
    to = '"' * (framing.MAX_LINE // 2 - 100)
    offer = {"from": "alice", "to": to, "text": "x", "broadcast": False, "forwarded": True}
    fake_hub.send({"v": 1, "id": 7, "kind": "req", "op": "comm.file", "payload": offer})
    got = fake_hub.read()
    assert (got["id"], got["kind"], got["payload"]["code"]) == (7, "res", "bad_handle")
    assert got["payload"]["error"].startswith('not a handle: "\\"\\"')
    assert got["payload"]["error"].endswith(" characters in all)")
    # the link lives on: the next offer is filed and answered
    fake_hub.send({"v": 1, "id": 8, "kind": "req", "op": "comm.file", "payload": dict(offer, to="gamma")})
    assert fake_hub.read() == {"v": 1, "id": 8, "kind": "res", "op": "comm.file", "payload": {"ok": True}}
    assert [x["msg"] for x in inbox_lines(lay, "gamma")] == ["x"]
    # a malformed frame: one line logged as bad input, the link's state says so, the guest serves on
    assert fake_hub.conn is not None
    fake_hub.conn.sendall(b"{this is not json\n")
    ended = f"link to the hub at unix:{fake_hub.path}: bad input from the hub: envelope is not JSON ("
    wait_for(lambda: ended in guest.logtext(), what="the bad input logged")
    fake_hub.accept()  # the guest redials
    wait_for(lambda: guest.request("version.query", {})["daemon"]["link"]["up"], what="the link up again")
    r = status(guest)
    assert r.returncode == 0 and "link to the hub at unix:" in r.stdout
    text = guest.logtext()
    assert text.count("bad input from the hub") == 1
    assert "unhandled errors in a TaskGroup" not in text
    no_traceback(text)
    # while it is down, its state is the bad input
    fake_hub.conn.sendall(b'{"v": 2}\n')
    wait_for(lambda: guest.logtext().count("bad input from the hub") == 2, what="the second bad input")
    link = guest.request("version.query", {})["daemon"]["link"]
    assert link["up"] is False and link["error"].startswith(
        "bad input from the hub: envelope field 'v' must be 1"
    )


# ----------------------------------------------------------------------------- resets after hello


def test_a_client_that_resets_right_after_hello_is_closed_by_the_peer(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    d = start(daemons, work, "hub", folder(work, "a").home, "boxa")
    hello_line = line(1, "hello", HELLO)
    for _ in range(30):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(d.sock)
        s.sendall(hello_line)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    wait_for(lambda: count(d, ": closed by the peer (") >= 30, what="30 closes logged", timeout=20)
    text = d.logtext()
    lines = [x for x in text.splitlines() if "closed by the peer" in x]
    assert len(lines) == 30 and all(" INFO connection " in x for x in lines), lines
    assert "internal error" not in text and "TaskGroup" not in text
    no_traceback(text)
    assert d.request("version.query", {})["daemon"]["host"] == "boxa"  # a good client after them
