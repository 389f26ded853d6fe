"""``sotd web`` across boxes (issue 30): a handle that joins on another box appears on the hub's page
within 2 s, through the link the daemons already hold (``agents.list`` with fleet, our read-only op: the
hub asks each linked box for its registry's agents), and so does its unread count, which only its own box
can read. Two boxes in network namespaces with real sshd
(tests/multihost/netns.py): boxa the hub, boxb its guest. ``sotd web`` and the browser run outside the
namespaces with boxa's environment: the daemon's socket, the comm folder and the rows' tmux socket are
paths, which a network namespace does not separate, and the browser's 127.0.0.1 is then the server's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.browser.conftest import Page, start_web, within
from tests.conftest import SOTD, Comm, clean_env, stop_proc, wait_for
from tests.multihost.conftest import build_net
from tests.multihost.netns import Net

pytestmark = [pytest.mark.multihost, pytest.mark.root, pytest.mark.timeout(180)]

TOPOLOGY = 'hub = "boxa"\n\n[boxes.boxa]\nssh = "boxa"\n\n[boxes.boxb]\nssh = "boxb"\n'


class Two:
    def __init__(self, net: Net) -> None:
        self.net = net
        self.procs: list[subprocess.Popen[bytes]] = []
        self.comms = {}
        for name, box in net.boxes.items():
            comm = Comm(box.dir, record=False, install=False, host=name)
            with open(os.path.join(comm.home, "hosts.toml"), "w") as f:
                f.write(TOPOLOGY)
            self.comms[name] = comm
        for name in ("boxa", "boxb"):
            with open(os.path.join(net.boxes[name].dir, "daemon.log"), "ab") as log:
                self.procs.append(
                    net.popen(name, [SOTD, "daemon", "run"], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                )
        wait_for(
            lambda: "link to the hub at ssh:boxa/boxa is up" in self.log("boxb"), 40, "boxb's link to the hub"
        )

    def log(self, box: str) -> str:
        try:
            with open(os.path.join(self.net.boxes[box].dir, "daemon.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def comm(self, box: str, name: str, *args: str) -> str:
        """``sotd comm <args>`` as session ``name`` on ``box`` (inside its namespace); its stdout."""
        s = self.comms[box].session(name)
        env = clean_env()
        env.update(s.env)
        env.update(self.net.env(box))
        env.update(SOT_COMM_SELF_FILE=s.self_file, PWD=s.root)
        r = self.net.run(box, [SOTD, "comm", *args], env=env, cwd=s.root)
        assert r.returncode == 0, r.stderr
        return str(r.stdout)

    def join(self, box: str, name: str) -> None:
        self.comm(box, name, "join", "--name", name)

    def web(self, box: str) -> str:
        """``sotd web`` for ``box``'s folder and daemon, outside the namespaces; its address."""
        s = self.comms[box].session("me")
        env = clean_env()
        env.update(s.env)
        env.update(self.net.env(box))
        env.update(SOT_COMM_SELF_FILE=s.self_file, PWD=s.root, SOT_SOCKET=self.net.boxes[box].socket)
        out = os.path.join(self.net.boxes[box].dir, "web.out")
        proc, url = start_web(env, s.root, out)
        self.procs.append(proc)
        return url

    def close(self) -> None:
        for p in reversed(self.procs):
            stop_proc(p)


@pytest.fixture
def two() -> Iterator[Two]:
    for net in build_net(["boxa", "boxb"]):
        t = Two(net)
        try:
            yield t
        finally:
            t.close()


def state(url: str) -> dict[str, object]:
    """``/state`` through the secret's redirect, with the cookie it sets."""
    base, _sep, secret = url.partition("/?s=")
    port = base.rsplit(":", 1)[1]
    req = urllib.request.Request(base + "/state", headers={"Cookie": f"sotd_web_{port}={secret}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_a_handle_joining_on_another_box_appears_on_the_hub_s_page_within_2s(two: Two, page: Page) -> None:
    url = two.web("boxa")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?s=[\w-]+", url)
    page.driver.get(url)
    wait_for(
        lambda: page.driver.execute_script("return document.body.dataset.updated"), 10, "the first state"
    )
    within(
        3,
        lambda: page.driver.execute_script("return document.querySelector('#links li[data-box=\"boxb\"]')"),
        "boxb listed",
    )
    t0 = time.monotonic()
    two.join("boxb", "bella")
    row = within(
        2,
        lambda: page.driver.execute_script(
            "const r = document.querySelector('#handles tr[data-handle=\"bella\"]');"
            "return r ? r.querySelector('td.host').textContent : null;"
        ),
        "@bella from boxb on the hub's page",
    )
    assert row == "boxb"
    page.shot("far-handle")
    assert time.monotonic() - t0 < 5
    # mail for @bella is filed on boxb (the hub offers it down the link); its unread count is boxb's to
    # read, and boxb's daemon gives it in agents.list: the hub's page shows it within 2 s
    two.join("boxa", "hank")
    assert two.comm("boxa", "hank", "send", "@bella", 'a "first" line costs $5') == "filed -> @bella\n"
    assert two.comm("boxa", "hank", "send", "@bella", "a second") == "filed -> @bella\n"
    count = within(
        2,
        lambda: page.driver.execute_script(
            "const r = document.querySelector('#handles tr[data-handle=\"bella\"]');"
            "const n = r ? r.querySelector('td.unread').textContent : '';"
            "return n === '2' ? n : null;"
        ),
        "@bella's unread count from boxb on the hub's page",
    )
    assert count == "2"
    page.shot("far-unread")
    # counting moved nothing: boxb's own reader still has both lines to read
    assert two.comm("boxb", "bella", "unread", "bella") == "2\n"
    # the guest's page sees the hub's handles through its link, the same op the other way
    guest = two.web("boxb")
    far = wait_for(
        lambda: [h for h in state(guest)["handles"] if h["name"] == "hank"],  # type: ignore[index, union-attr]
        10,
        "@hank on boxb's page",
    )
    assert far[0]["host"] == "boxa" and far[0]["box"] == "boxa"
