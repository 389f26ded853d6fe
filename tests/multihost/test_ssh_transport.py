"""sotd.client.ssh through a real sshd in another network namespace (behaviour 2.2; D6).

boxa is the client. boxb and boxc each run sshd; a fake daemon (in this test process: a pathname Unix
socket is reachable from any network namespace) listens at each box's ``SOT_SOCKET``. boxc's shell prints
a banner on stdout (``.bashrc``) and its sshd sends a pre-auth ``Banner``.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from collections.abc import Iterator

import pytest

from tests.fakes.fake_daemon import FakeDaemon
from tests.multihost.conftest import build_net
from tests.multihost.netns import Net

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(120)]

CLIENT = r"""
import json, sys, time
from sotd.client import ssh
from sotd.errors import SotdError
from sotd.wire.hello import hello_payload
from sotd.wire.payloads import comm_file_payload
target, host, deadline, n = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
hello = hello_payload(host="boxa", os_user="uid:0", role="cli", name="alice")

def one(i):
    t0 = time.monotonic()
    try:
        ans = ssh.request(target, host, "comm.file", comm_file_payload("alice", f"bob{i}", "hi"), hello, deadline_s=deadline)
        return {"answer": ans, "elapsed": time.monotonic() - t0}
    except SotdError as e:
        return {"error": e.message, "hint": e.hint, "elapsed": time.monotonic() - t0}

if n == 1:
    print(json.dumps(one(0)))
else:
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(n) as ex:
        print(json.dumps(list(ex.map(one, range(n)))))
"""


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    yield from build_net(["boxa", "boxb", "boxc"], sshd_extra={"boxc": ["Banner BANNER_FILE"]})


@pytest.fixture(scope="module")
def daemons(net: Net) -> Iterator[dict[str, FakeDaemon]]:
    c = net.boxes["boxc"]
    with open(os.path.join(c.home, ".bashrc"), "w") as f:
        f.write('echo "Welcome to boxc, $(hostname)!"\necho\necho "{not a frame"\n')
    banner = os.path.join(c.dir, "banner")
    with open(banner, "w") as f:
        f.write("Authorized use only.\n")
    with open(c.sshd_config) as f:
        cfg = f.read().replace("BANNER_FILE", banner)
    with open(c.sshd_config, "w") as f:
        f.write(cfg)
    os.kill(c.sshd_pid, 1)  # SIGHUP: sshd re-executes itself and rereads its config
    time.sleep(0.5)
    fakes = {name: FakeDaemon(net.boxes[name].socket) for name in ("boxb", "boxc")}
    yield fakes
    for fd in fakes.values():
        fd.close()


@pytest.fixture(autouse=True)
def fresh(daemons: dict[str, FakeDaemon]) -> None:
    for fd in daemons.values():
        fd.mode = "answer"
        fd.answer = {"ok": True}
        fd.delay_s = 0.0
        fd.received.clear()


def call(
    net: Net,
    target: str,
    host: str = "",
    *,
    deadline: float = 5.0,
    n: int = 1,
    env: dict[str, str] | None = None,
):
    r = net.run(
        "boxa", [sys.executable, "-c", CLIENT, target, host, str(deadline), str(n)], env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def accepted(net: Net, box: str) -> int:
    """How many ssh connections the box's sshd has accepted so far."""
    with open(net.boxes[box].sshd_log) as f:
        return sum("Accepted publickey" in line for line in f)


def control_sockets(net: Net) -> list[str]:
    return glob.glob(os.path.join(net.boxes["boxa"].run_dir, "sot-comm-ssh-*"))


def short_private_dir(net: Net) -> str:
    """A fresh ControlPath folder with a short path (AF_UNIX paths are bounded at 108 bytes)."""
    import tempfile

    return tempfile.mkdtemp(prefix="x", dir=net.base)


def test_setup_each_box_is_its_own_host(net: Net) -> None:
    r = net.ssh("boxa", "boxb", "hostname; echo $SOT_SELF_HOST; cat /proc/self/net/dev | grep -c eth0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["boxb", "boxb", "1"]


def test_request_reaches_the_far_daemon_through_the_bridge(net: Net, daemons) -> None:
    res = call(net, "boxb", "boxa")
    assert res["answer"] == {"ok": True}
    hello, req = daemons["boxb"].received[:2]
    assert hello["op"] == "hello" and hello["payload"]["host"] == "boxa"
    assert req["op"] == "comm.file" and req["payload"]["to"] == "bob0"
    assert res["elapsed"] < 5


def test_refusal_comes_back_verbatim(net: Net, daemons) -> None:
    daemons["boxb"].answer = {"error": "no live session holds @bob0", "code": "no_live_session"}
    assert call(net, "boxb")["answer"] == {"error": "no live session holds @bob0", "code": "no_live_session"}


def test_login_banners_do_not_break_it(net: Net, daemons) -> None:
    r = net.ssh("boxa", "boxc", "true")
    assert r.stdout.startswith("Welcome to boxc, boxc!\n"), "the banner is really there"
    res = call(net, "boxc", "boxa")
    assert res["answer"] == {"ok": True}
    assert [m["op"] for m in daemons["boxc"].received] == ["hello", "comm.file"]


def test_control_master_is_reused(net: Net, daemons) -> None:
    call(net, "boxb")
    assert control_sockets(net), "a ControlMaster socket sits in boxa's XDG_RUNTIME_DIR"
    before = accepted(net, "boxb")
    results = [call(net, "boxb") for _ in range(3)]
    assert all(r["answer"] == {"ok": True} for r in results)
    assert accepted(net, "boxb") == before, "no new ssh connection: the master carried them"
    assert max(r["elapsed"] for r in results) < 2


def test_concurrent_requests_share_the_master(net: Net, daemons) -> None:
    results = call(net, "boxb", n=6)
    assert [r["answer"] for r in results] == [{"ok": True}] * 6
    assert sorted(m["payload"]["to"] for m in daemons["boxb"].received if m["op"] == "comm.file") == [
        f"bob{i}" for i in range(6)
    ]


def test_silent_daemon_is_failed_at_the_deadline(net: Net, daemons) -> None:
    daemons["boxb"].mode = "silent"
    res = call(net, "boxb", "boxa", deadline=1.5)
    assert res["error"] == "the daemon did not answer at ssh:boxb/boxa"
    assert res["hint"] == "timed out after 1.5s"
    assert 1.5 <= res["elapsed"] < 2.5


def test_no_daemon_on_the_far_box(net: Net, daemons) -> None:
    b = net.boxes["boxb"]
    env = net.env("boxa")
    os.rename(b.socket, b.socket + ".away")
    try:
        res = call(net, "boxb", "boxa", env=env)
    finally:
        os.rename(b.socket + ".away", b.socket)
    assert res["error"].startswith(
        f"the daemon did not answer at ssh:boxb/boxa: sotd stdio-bridge (for boxa): no daemon socket at {b.socket}"
    )
    assert res["elapsed"] < 5


def test_closed_port_fails_at_once_with_ssh_words(net: Net, tmp_path) -> None:
    cfg = tmp_path / "cfg"
    with open(net.ssh_config) as f:
        cfg.write_text("Host boxb-closed\n  HostName 10.77.0.2\n  Port 2222\n" + f.read())
    env = net.env("boxa", SOT_SSH_CONFIG=str(cfg))
    res = call(net, "boxb-closed", env=env)
    assert (
        res["error"]
        == "the daemon did not answer at ssh:boxb-closed: ssh: connect to host 10.77.0.2 port 2222: Connection refused"
    )
    assert res["elapsed"] < 3


@pytest.mark.parametrize("master", [False, True], ids=["fresh", "through-a-master"])
def test_unreachable_box_fails_within_the_deadline(net: Net, daemons, master: bool) -> None:
    env = net.env("boxa", XDG_RUNTIME_DIR=short_private_dir(net))
    if master:
        assert call(net, "boxb", env=env)["answer"] == {"ok": True}
    net.link("boxb", up=False)
    try:
        res = call(net, "boxb", "boxa", deadline=2.0, env=env)
    finally:
        net.link("boxb", up=True)
    assert res["error"].startswith("the daemon did not answer at ssh:boxb/boxa"), res
    assert res["elapsed"] < 2.5, res
    # and the link heals: the next request goes through (a fresh master if the old one died)
    deadline = time.monotonic() + 30
    while True:
        res = call(net, "boxb", env=env)
        if "answer" in res or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert res.get("answer") == {"ok": True}, res


def test_delaying_relay_adds_latency(net: Net, daemons) -> None:
    """The ProxyCommand relay the benchmark uses: every chunk waits, so a request takes visibly longer."""
    env = net.env("boxa", SOT_SSH_CONFIG=net.proxy_config(50), XDG_RUNTIME_DIR=short_private_dir(net))
    first = call(net, "boxb", env=env)
    assert first["answer"] == {"ok": True}
    again = call(net, "boxb", env=env)
    assert again["answer"] == {"ok": True}
    # through the master: at least one round trip (2 x 50 ms) for the session, one for the answer
    assert again["elapsed"] >= 0.2
