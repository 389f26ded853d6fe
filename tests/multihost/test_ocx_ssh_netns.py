"""OCX over ``ssh://`` for real: a hub repository on the hub box, reached through the hub's own sshd from
node A and node B, each in its own network namespace (tests/multihost/netns.py: 10.77.0.x exist only
inside the namespaces this test makes). Node C reaches the same hub over http (``fossil server`` on the
hub box), so one message arrives at the hub with a per-login first receipt.

Every step runs the real ``sotd ocx`` CLI in its node's box with the node's own ssh config
(``$SOT_SSH_CONFIG``: BatchMode, the test key). B's test reader is a ``Node`` with a reader registered for
``review``, run in box b. The far side's fossil is a logging wrapper (``?fossil=``), which shows what
fossil's ssh sync and OCX's ssh listing run there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from sotd.ocx import envelope as ev
from tests.multihost.conftest import build_net
from tests.multihost.netns import Net
from tests.ocx.fossilkit import SOTD, make_hub, need_fossil, stop_server, wait_port, write_config

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(300)]

USERS = {"alice": ("alicepw", "oiy"), "bob": ("bobpw", "oiy"), "carol": ("carolpw", "oiy")}
HTTP_PORT = 8080
NOWHERE = "10.77.0.250"  # on the boxes' subnet, but no box holds it

READER = r"""
import json, os
from sotd.ocx.config import load_config
from sotd.ocx.node import NodeClones

node = NodeClones(load_config(os.environ))
got = []

def reader(d):
    got.append({"hash": d.hash, "sender": d.sender, "for_me": d.for_me, "clone": d.clone.name,
                "server_code": d.server_code, "data": d.data.decode()})

node.register("review", reader, name="test-reader")
reports = node.sync_once()
node.close()
print(json.dumps({"errors": [r.error for r in reports], "got": got}))
"""

LOGGING_FOSSIL = """#!/bin/sh
printf '%s\\n' "$*" >> {log}
exec /usr/bin/fossil "$@"
"""

# A far side that lets the sync in but stores nothing it is sent: test-http with read capabilities only.
READ_ONLY_FOSSIL = """#!/bin/sh
if [ "$1" = test-http ]; then shift; exec /usr/bin/fossil test-http --usercap oi "$@"; fi
exec /usr/bin/fossil "$@"
"""


@pytest.fixture
def net() -> Iterator[Net]:
    need_fossil()
    yield from build_net(["hub", "a", "b", "c"])


class Nodes:
    def __init__(self, net: Net) -> None:
        self.net = net
        hub = net.boxes["hub"]
        self.repo = os.path.join(hub.dir, "hub.fossil")
        self.far_log = os.path.join(hub.dir, "far-side.log")
        self.logged = self._program("logged", LOGGING_FOSSIL.format(log=self.far_log))
        self.read_only = self._program("ro", READ_ONLY_FOSSIL)
        self.envs: dict[str, dict[str, str]] = {}
        self.configs: dict[str, str] = {}

    def _program(self, folder: str, text: str) -> str:
        d = os.path.join(self.net.boxes["hub"].dir, folder)
        os.makedirs(d)
        path = os.path.join(d, "fossil")  # fossil runs a remote program only if it is called fossil
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
        return path

    def ssh_url(self, program: str | None = None, host: str | None = None) -> str:
        url = f"ssh://root@{host or self.net.boxes['hub'].addr}/{self.repo}"
        return url + (f"?fossil={program}" if program else "")

    def sotd(self, who: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.net.run(who, [SOTD, *args], env=self.envs[who], timeout=timeout)

    def node(self, who: str, login: str, url: str, clone_url: str | None = None) -> None:
        b = self.net.boxes[who]
        cfg = os.path.join(b.dir, "ocx.toml")
        self.envs[who] = self.net.env(who, SOT_OCX_CONFIG=cfg, USER="root")
        self.configs[who] = cfg
        clone = os.path.join(b.dir, f"{who}.fossil")
        r = self.sotd(who, "ocx", "clone", clone_url or url, clone)
        assert r.returncode == 0, r
        self.configure(who, login, url)

    def configure(self, who: str, login: str, url: str) -> None:
        b = self.net.boxes[who]
        clone = os.path.join(b.dir, f"{who}.fossil")
        write_config(
            self.configs[who],
            os.path.join(b.dir, "index.sqlite"),
            [{"name": "proj", "repository": clone, "login": login, "url": url}],
        )

    def post(self, who: str, data: bytes, *extra: str) -> subprocess.CompletedProcess[str]:
        path = os.path.join(self.net.boxes[who].dir, f"msg-{time.monotonic_ns()}.json")
        with open(path, "wb") as f:
            f.write(data)
        return self.sotd(who, "ocx", "post", path, "--repo", "proj", *extra)

    def read(self, who: str) -> dict[str, object]:
        r = self.net.run(who, [sys.executable, "-c", READER], env=self.envs[who], timeout=120)
        assert r.returncode == 0, r
        return dict(json.loads(r.stdout))

    def listed(self, who: str) -> dict[str, dict[str, object]]:
        r = self.sotd(who, "ocx", "list", "--json")
        assert r.returncode == 0, r
        return {str(row["hash"]): row for row in json.loads(r.stdout)}

    def hub_receipt(self, h: str) -> tuple[str, str]:
        """(login, address) the hub recorded at the first receipt of ``h``."""
        out = subprocess.run(
            ["fossil", "sql", "-R", self.repo,
             "SELECT user.login, rcvfrom.ipaddr FROM unversioned JOIN rcvfrom USING(rcvid) "
             f"JOIN user USING(uid) WHERE unversioned.name = '{ev.message_name(h)}'"],
            capture_output=True, text=True, timeout=30, check=True, env=self.net.env("hub", USER="root"),
        ).stdout.strip()  # fmt: skip
        login, _, addr = out.partition(",")
        return login.strip("'"), addr.strip("'")

    def hub_has(self, h: str) -> bool:
        out = subprocess.run(
            ["fossil", "uv", "list", "-R", self.repo],
            capture_output=True, text=True, timeout=30, check=True, env=self.net.env("hub", USER="root"),
        ).stdout  # fmt: skip
        return ev.message_name(h) in out


def test_messages_cross_boxes_over_ssh(net: Net) -> None:
    n = Nodes(net)
    hub, a_addr, b_addr = net.boxes["hub"], net.boxes["a"].addr, net.boxes["b"].addr
    make_hub(n.repo, USERS, env=net.env("hub", USER="root"))  # its Setup login is "admin"
    srv = net.popen(
        "hub",
        ["fossil", "server", "--port", str(HTTP_PORT), n.repo],
        env=net.env("hub", USER="root"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(hub.addr, HTTP_PORT, prefix=net.in_box("c", []))
        n.node("a", "alice", n.ssh_url(n.logged))
        n.node("b", "bob", n.ssh_url())
        n.node(
            "c",
            "carol",
            f"http://carol@{hub.addr}:{HTTP_PORT}/",
            f"http://carol:carolpw@{hub.addr}:{HTTP_PORT}/",
        )

        # A posts over ssh; the post is confirmed by the hub's listing, read over ssh
        ask = ev.encode("review", {"checkin": "abc"}, to="bob")
        r = n.post("a", ask)
        assert r.returncode == 0, r
        h = r.stdout.strip()
        assert ev.is_hash(h) and n.hub_has(h)
        assert n.listed("a")[h]["post_state"] == "delivered"
        # over ssh fossil logs in as the hub's Setup login; the hub knows A by its address
        assert n.hub_receipt(h) == ("admin", a_addr)

        # B pulls over ssh, learns the sender from the hub's listing, and hands the message to its reader
        got = n.read("b")
        assert got["errors"] == [None]
        (d,) = got["got"]  # type: ignore[misc]
        assert (d["hash"], d["sender"], d["for_me"], d["clone"]) == (h, "admin", True, "proj")
        # the file's bytes, then the post's nonce as JSON whitespace (docs/ocx.md, "Whose bytes")
        data = str(d["data"])
        assert data.startswith(ask.decode()) and json.loads(data) == json.loads(ask)
        shown = json.loads(n.sotd("b", "ocx", "show", h, "--json").stdout)["rows"][0]
        assert (shown["sender_login"], shown["origin"]) == ("admin", f"remote {hub.addr}")

        # B's answer reaches A
        r = n.sotd(
            "b", "ocx", "answer", h, "--kind", "reviewed", "--body", '{"verdict": "pass"}', "--repo", "proj"
        )
        assert r.returncode == 0, r
        ah = r.stdout.strip()
        assert n.hub_receipt(ah) == ("admin", b_addr)
        assert n.sotd("a", "ocx", "sync").returncode == 0
        answers = json.loads(n.sotd("a", "ocx", "answers", h, "--json").stdout)
        assert [(x["hash"], x["sender_login"], x["re_hash"]) for x in answers] == [(ah, "admin", h)]

        # a message first received over http keeps that login: B, over ssh, hands it on as carol's
        r = n.post("c", ev.encode("review", {"checkin": "def"}, to="bob"))
        assert r.returncode == 0, r
        hc = r.stdout.strip()
        got = n.read("b")
        assert [(x["hash"], x["sender"]) for x in got["got"]] == [(hc, "carol")]  # type: ignore[union-attr]

        # what ran on the far side: fossil's ssh sync and OCX's listing both run "fossil test-http REPO"
        with open(n.far_log) as f:
            far = f.read().splitlines()
        assert len(far) >= 4 and set(far) == {f"test-http {n.repo}"}, far

        # a far side that takes the sync but stores nothing: not delivered, and said so (exit 3)
        n.configure("a", "alice", n.ssh_url(n.read_only))
        ro = ev.encode("review", {"checkin": "ro"}, to="bob")
        r = n.post("a", ro)
        assert r.returncode == 3 and r.stdout == "", r
        assert "was not delivered" in r.stderr and "does not list" in r.stderr, r.stderr
        (h_ro,) = [h for h, row in n.listed("a").items() if row["post_state"] == "not_delivered"]
        assert not n.hub_has(h_ro)

        # an unreachable host: a clear error, and nothing lost
        n.configure("a", "alice", n.ssh_url(host=NOWHERE))
        away = ev.encode("review", {"checkin": "away"}, to="bob")
        t0 = time.monotonic()
        r = n.post("a", away)
        assert r.returncode == 1 and r.stdout == "", r
        assert f"ocx: fossil uv sync ssh://root@{NOWHERE}/" in r.stderr, r.stderr
        assert f"ssh: connect to host {NOWHERE} port 22" in r.stderr, r.stderr
        assert time.monotonic() - t0 < 60
        s = n.sotd("a", "ocx", "sync")
        assert s.returncode == 1 and "proj: FAILED: ocx: fossil uv sync" in s.stdout, s
        (h_away,) = [h for h, row in n.listed("a").items() if row["post_state"] == "pending"]
        assert "(not yet delivered)" in n.sotd("a", "ocx", "list").stdout
        assert not n.hub_has(h_away)

        # the hub reachable again: the next sync delivers both and confirms them; B's reader gets both
        n.configure("a", "alice", n.ssh_url(n.logged))
        assert n.sotd("a", "ocx", "sync").returncode == 0
        states = n.listed("a")
        assert (states[h_ro]["post_state"], states[h_away]["post_state"]) == ("delivered", "delivered")
        got = n.read("b")
        assert sorted((x["hash"], x["sender"]) for x in got["got"]) == sorted(  # type: ignore[union-attr]
            [(h_ro, "admin"), (h_away, "admin")]
        )
    finally:
        stop_server(srv)
