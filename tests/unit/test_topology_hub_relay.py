"""The hub's own relay endpoint (behaviour 1.4, 2.4, D4): on the hub, ``sotd topology relay-endpoint`` names
the hub's daemon socket, where the offer to the linked boxes happens; without a ``hosts.toml`` there is none."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator

import pytest

from sotd import topology
from tests.conftest import SOTD, clean_env

pytestmark = pytest.mark.unit

GOOD = b'hub = "boxa"\n\n[boxes.boxa]\nssh = "boxa.lan"\n\n[boxes.boxb]\n'


@pytest.fixture
def sock(tmp_path: os.PathLike[str]) -> Iterator[str]:
    path = os.path.join(os.fspath(tmp_path), "d.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    yield path
    s.close()


def home_with(tmp_path: os.PathLike[str], data: bytes | None) -> dict[str, str]:
    home = os.path.join(os.fspath(tmp_path), "comm")
    os.makedirs(home, exist_ok=True)
    if data is not None:
        with open(os.path.join(home, "hosts.toml"), "wb") as f:
            f.write(data)
    return {"SOT_COMM_HOME": home}


def test_hub_names_its_own_daemon_socket(tmp_path: os.PathLike[str], sock: str) -> None:
    env = home_with(tmp_path, GOOD)
    assert topology.relay_endpoint_or_reason(env, "boxa", sock) == (f"unix:{sock}", "")
    # a guest still gets the hub's endpoint, whatever its own socket
    assert topology.relay_endpoint_or_reason(env, "boxb", sock) == ("ssh:boxa.lan/boxa", "")
    # the daemon's own uplink decision is unchanged: the hub links to nobody
    assert topology.relay_endpoint(topology.parse(GOOD), "boxa") is None


def test_hub_whose_daemon_is_not_there_has_none(tmp_path: os.PathLike[str]) -> None:
    env = home_with(tmp_path, GOOD)
    missing = os.path.join(os.fspath(tmp_path), "none.sock")
    ep, why = topology.relay_endpoint_or_reason(env, "boxa", missing)
    assert ep is None
    assert why == (
        f"this box (boxa) is the hub named by {env['SOT_COMM_HOME']}/hosts.toml, and no daemon socket is at "
        f"{missing} to relay through"
    )
    # a plain file is not a daemon
    with open(missing, "w"):
        pass
    assert topology.relay_endpoint_or_reason(env, "boxa", missing)[0] is None


def test_hub_unix_endpoint_in_the_file_names_the_socket(tmp_path: os.PathLike[str], sock: str) -> None:
    env = home_with(tmp_path, f'hub = "boxa"\n[boxes.boxa]\nendpoint = "unix:{sock}"\n'.encode())
    other = os.path.join(os.fspath(tmp_path), "other.sock")
    assert topology.relay_endpoint_or_reason(env, "boxa", other) == (f"unix:{sock}", "")


def test_no_file_is_never_the_local_daemon(tmp_path: os.PathLike[str], sock: str) -> None:
    """A box without hosts.toml is its own hub but names no relay: a miss is "no sotd daemon found"."""
    env = home_with(tmp_path, None)
    assert topology.relay_endpoint_or_reason(env, "boxa", sock) == (None, topology.NO_HUB)
    env = home_with(tmp_path, b"hub = 5\n")
    ep, why = topology.relay_endpoint_or_reason(env, "boxa", sock)
    assert ep is None and why.startswith("this box's hosts.toml cannot be read, so it names no hub: ")


def test_cli_on_the_hub(tmp_path: os.PathLike[str], sock: str) -> None:
    env = clean_env()
    env.update(home_with(tmp_path, GOOD), SOT_SELF_HOST="boxa", SOT_SOCKET=sock)
    r = subprocess.run(
        [SOTD, "topology", "relay-endpoint"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, f"unix:{sock}\n", "")
    env["SOT_SOCKET"] = os.path.join(os.fspath(tmp_path), "gone.sock")
    r = subprocess.run(
        [SOTD, "topology", "relay-endpoint"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 1 and r.stdout == "" and "is the hub" in r.stderr
