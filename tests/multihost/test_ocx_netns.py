"""OCX across network namespaces: a hub served by ``fossil server`` on its namespace's address, and two
nodes, each in its own namespace with its own clone, configuration and index (addresses 10.78.0.x exist
only inside the namespaces this test creates). Every step runs the real ``sotd ocx`` CLI in its node's
namespace.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.ocx.fossilkit import (
    USERS,
    base_env,
    bridge_namespaces,
    make_hub,
    need_fossil,
    stop_server,
    two_node_scenario,
    wait_port,
)

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root]

HUB_ADDR = "10.78.0.1"
NODE_ADDRS = {"alice": "10.78.0.2", "bob": "10.78.0.3", "viewer": "10.78.0.4"}
PORT = 8080


@pytest.fixture
def namespaces() -> Iterator[dict[str, str]]:
    need_fossil()
    with bridge_namespaces("ocx", HUB_ADDR, NODE_ADDRS) as names:
        yield names


def test_message_and_answer_cross_namespaces(namespaces: dict[str, str], tmp_path: str) -> None:
    home = str(tmp_path)
    hub_repo = os.path.join(home, "hub.fossil")
    make_hub(hub_repo, USERS, env=base_env(home))
    hub = ["ip", "netns", "exec", namespaces["hub"]]
    srv = subprocess.Popen(
        [*hub, "fossil", "server", "--port", str(PORT), hub_repo],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=base_env(home),
    )
    try:
        prefixes = {who: ["ip", "netns", "exec", namespaces[who]] for who in NODE_ADDRS}
        wait_port(HUB_ADDR, PORT, prefix=prefixes["alice"])
        wait_port(HUB_ADDR, PORT, prefix=prefixes["bob"])
        two_node_scenario(home, HUB_ADDR, PORT, prefixes)
        # the hub recorded each push at first receipt from the node's own namespace address
        out = subprocess.run(
            [
                "fossil",
                "sql",
                "-R",
                hub_repo,
                "SELECT DISTINCT user.login, rcvfrom.ipaddr FROM unversioned JOIN rcvfrom USING(rcvid) "
                "JOIN user USING(uid) WHERE unversioned.name LIKE 'ocx/m/%' ORDER BY 1",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=base_env(home),
        ).stdout
        assert f"'alice','{NODE_ADDRS['alice']}'" in out and f"'bob','{NODE_ADDRS['bob']}'" in out
        assert "viewer" not in out
    finally:
        stop_server(srv)
