"""hosts.toml: location, parsing, the relay endpoint, and the CLI's first line (behaviour 2.2, 2.4)."""

from __future__ import annotations

import os
import subprocess

import pytest

from sotd import topology
from tests.conftest import SOTD, clean_env

pytestmark = pytest.mark.unit

GOOD = b"""
hub = "boxa"

[boxes.boxa]
ssh = "boxa.lan"

[boxes.boxb]

[boxes.boxc]
ssh = "c-box"
"""


def test_path_order() -> None:
    assert topology.path({"SOT_HOSTS_TOML": "/x/h.toml", "SOT_COMM_HOME": "/c"}) == "/x/h.toml"
    assert topology.path({"SOT_COMM_HOME": "/c"}) == "/c/hosts.toml"
    assert topology.path({"HOME": "/home/u"}) == "/home/u/.sot-comm/hosts.toml"


def test_parse_good() -> None:
    t = topology.parse(GOOD)
    assert t.hub == "boxa"
    assert sorted(t.boxes) == ["boxa", "boxb", "boxc"]
    assert t.boxes["boxb"].ssh == "boxb"  # default: the box's own name
    assert t.guests() == ["boxb", "boxc"]


@pytest.mark.parametrize(
    "data",
    [
        b"hub = ",  # not TOML
        b"\xff\xfe",  # not UTF-8
        b'[boxes.a]\nssh = "a"\n',  # no hub
        b'hub = "Box A"\n',  # not a plain host
        b'hub = "a"\nboxes = 3\n',
        b'hub = "a"\n[boxes."-x"]\n',
        b'hub = "a"\n[boxes.a]\nssh = "-oProxyCommand=x"\n',
        b'hub = "a"\n[boxes.a]\nendpoint = "tcp:1.2.3.4:5"\n',
    ],
)
def test_parse_refuses(data: bytes) -> None:
    with pytest.raises(topology.TopologyError):
        topology.parse(data)


@pytest.mark.parametrize(
    ("self_host", "want"),
    [
        ("boxa", None),
        ("boxb", "ssh:boxa.lan/boxa"),
        ("elsewhere", "ssh:boxa.lan/boxa"),
    ],
)
def test_relay_endpoint(self_host: str, want: str | None) -> None:
    assert topology.relay_endpoint(topology.parse(GOOD), self_host) == want


def test_relay_endpoint_hub_not_listed_and_explicit_endpoint() -> None:
    assert topology.relay_endpoint(topology.parse(b'hub = "h1"\n'), "g") == "ssh:h1/h1"
    t = topology.parse(b'hub = "h1"\n[boxes.h1]\nendpoint = "unix:/run/h.sock"\n')
    assert topology.relay_endpoint(t, "g") == "unix:/run/h.sock"


def test_load(tmp_path: os.PathLike[str]) -> None:
    home = os.fspath(tmp_path)
    env = {"SOT_COMM_HOME": home}
    assert topology.load(env) is None
    p = os.path.join(home, "hosts.toml")
    with open(p, "wb") as f:
        f.write(GOOD)
    t = topology.load(env)
    assert t is not None and t.hub == "boxa" and t.path == p
    os.remove(p)
    os.mkdir(p)  # a folder where the file should be: unreadable, not absent
    with pytest.raises(topology.TopologyError):
        topology.load(env)
    ep, why = topology.relay_endpoint_or_reason(env, "boxb")
    assert ep is None and why.startswith("this box's hosts.toml cannot be read, so it names no hub: ")


def test_texts() -> None:
    assert topology.NO_HUB == "no hosts.toml names a hub"
    assert topology.unreadable_text("E") == "this box's hosts.toml cannot be read, so it names no hub: E"


def _cli(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    e = clean_env()
    e.update(env)
    return subprocess.run(
        [SOTD, "topology", "relay-endpoint"], env=e, capture_output=True, text=True, timeout=30, check=False
    )


def test_cli_relay_endpoint(tmp_path: os.PathLike[str]) -> None:
    home = os.fspath(tmp_path)
    r = _cli({"SOT_COMM_HOME": home, "SOT_SELF_HOST": "boxb"})
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "no hosts.toml names a hub\n")
    with open(os.path.join(home, "hosts.toml"), "wb") as f:
        f.write(GOOD)
    r = _cli({"SOT_COMM_HOME": home, "SOT_SELF_HOST": "boxb"})
    assert (r.returncode, r.stdout.splitlines()[0]) == (0, "ssh:boxa.lan/boxa")
    r = _cli({"SOT_COMM_HOME": home, "SOT_SELF_HOST": "boxa"})
    assert r.returncode == 1 and r.stdout == "" and "is the hub" in r.stderr
