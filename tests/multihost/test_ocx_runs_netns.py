"""OCX layer 3 across network namespaces: the hub's ``fossil server`` in its own namespace, node A
(alice) and node B (lab-user) each in theirs (10.78.1.x exists only inside namespaces this test makes).
A posts the seed's build example addressed to B's clone; B's ``sotd ocx node`` takes it, builds under
bubblewrap and answers; A receives started, ended (passed, with the image's hash), then the image. A stop
then ends a long run ``stopped``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from sotd.jobs.spec import output_name
from tests.ocx import runkit as rk
from tests.ocx.fossilkit import base_env, bridge_namespaces, need_fossil, stop_server, wait_port

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(300)]

HUB_ADDR = "10.78.1.1"
NODE_ADDRS = {"a": "10.78.1.2", "b": "10.78.1.3"}
PORT = 8080


@pytest.fixture
def namespaces() -> Iterator[dict[str, str]]:
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    need_fossil()
    with bridge_namespaces("oxr", HUB_ADDR, NODE_ADDRS) as names:
        yield names


def test_build_and_stop_across_namespaces(namespaces: dict[str, str]) -> None:
    top = f"/tmp/sotd-ocxrun-mh-{secrets.token_hex(4)}"
    os.mkdir(top, 0o755)
    hub_repo = os.path.join(top, "hub.fossil")
    srv = None
    node = None
    try:
        rk.make_project(hub_repo, top, env=base_env(top))
        srv = subprocess.Popen(
            ["ip", "netns", "exec", namespaces["hub"], "fossil", "server", "--port", str(PORT), hub_repo],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=base_env(top),
        )  # fmt: skip
        prefixes = {who: ["ip", "netns", "exec", namespaces[who]] for who in NODE_ADDRS}
        for who in NODE_ADDRS:
            wait_port(HUB_ADDR, PORT, prefix=prefixes[who])
        lab = rk.setup_nodes(top, HUB_ADDR, PORT, prefixes)
        code_b = lab.server_code("b")
        h = rk.post_run(lab, "a", rk.run_body(code_b, ["make", "-C", "$$tree$$", "image"]))
        assert "not this clone's; not answered" in rk.node_once(lab, "a")  # another server-code: one line
        log_b = rk.node_once(lab, "b")
        assert "ended: passed" in log_b, log_b
        got = rk.answers(lab, "a", h)
        assert [(k, s) for k, _, s in got] == [("started", "lab-user"), ("ended", "lab-user")]
        ended = got[1][1]
        assert ended["outcome"] == "passed" and ended["verdict"] is True
        img = rk.uv_bytes(lab.clones["a"], output_name(h, "builds/board.img"), top)
        assert img is not None and ended["outputs"] == {"builds/board.img": hashlib.sha3_256(img).hexdigest()}
        # the hub recorded B's answers and the image at first receipt from B's namespace address
        out = rk.fossil(
            "sql", "-R", hub_repo,
            "SELECT DISTINCT user.login, rcvfrom.ipaddr FROM unversioned JOIN rcvfrom USING(rcvid) "
            f"JOIN user USING(uid) WHERE unversioned.name = '{output_name(h, 'builds/board.img')}'",
            env=base_env(top),
        )  # fmt: skip
        assert f"'lab-user','{NODE_ADDRS['b']}'" in out
        # a long run, stopped by its sender across the namespaces
        long = rk.post_run(lab, "a", rk.run_body(code_b, ["sleep", "120"], objective="wait to be stopped"))
        node = rk.start_node(lab, "b", interval=0.3)
        rk.wait_answer(lab, "a", long, "started")
        rk.post_stop(lab, "a", long)
        assert rk.wait_answer(lab, "a", long, "ended")["outcome"] == "stopped"
    finally:
        if node is not None:
            rk.stop_node(node)
        if srv is not None:
            stop_server(srv)
        # only this lab's runs: a sweep of every job cgroup killed a run of the test beside it
        # (test_ocx_runs's `sleep 120` in the mounts lane ended "failed" instead of "stopped")
        rk.sandbox_cleanup(top, [os.path.join(top, f"{who}-state") for who in rk.NODE_LOGIN])
        shutil.rmtree(top, ignore_errors=True)
