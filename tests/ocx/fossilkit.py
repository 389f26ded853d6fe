"""Helpers for OCX tests that drive Debian's real ``fossil``: repositories, users, a server, configs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sotd.demo import ocx_seed as seed
from sotd.demo.ocx_seed import make_hub
from sotd.demo.ocx_seed import stop as stop_server
from sotd.ocx import envelope as ev

__all__ = ["make_hub", "stop_server"]  # the shared builders, under the names these tests use

VENV_BIN = os.path.dirname(sys.executable)
SOTD = shutil.which("sotd", path=VENV_BIN) or "sotd"


def need_fossil() -> None:
    if shutil.which("fossil") is None:
        pytest.skip("fossil is not installed (apt-get install fossil)")


def fossil(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None) -> str:
    p = subprocess.run(
        [*(prefix or []), "fossil", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, prefix: list[str] | None = None, bound: float = 15.0) -> None:
    """Wait (at most ``bound`` seconds) until something accepts on host:port (inside a netns if prefixed)."""
    deadline = time.monotonic() + bound
    probe = [
        *(prefix or []),
        sys.executable,
        "-c",
        f"import socket; socket.create_connection(({host!r}, {port}), timeout=1).close()",
    ]
    while time.monotonic() < deadline:
        if subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {host}:{port} after {bound}s")


@contextmanager
def served(repo: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """``fossil server --localhost`` on a free port for ``repo``; yields the port, stops it after."""
    port, srv = seed.serve(repo, env)
    try:
        yield port
    finally:
        stop_server(srv)


def write_config(path: str, index: str, clones: list[dict[str, object]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(seed.node_config(index, clones))


def base_env(home: str) -> dict[str, str]:
    drop = ("SOT_", "SOTD_", "TMUX", "CLAUDE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=home, USER="root", SOT_COMM_HOME=os.path.join(home, "comm"))
    return env


class Ran:
    def __init__(self, p: subprocess.CompletedProcess[str]) -> None:
        self.code = p.returncode
        self.out = p.stdout
        self.err = p.stderr

    def __repr__(self) -> str:
        return f"Ran(code={self.code}, out={self.out!r}, err={self.err!r})"


def sotd(*args: str, env: dict[str, str], prefix: list[str] | None = None, timeout: float = 120) -> Ran:
    p = subprocess.run(
        [*(prefix or []), SOTD, *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    return Ran(p)


USERS = {"alice": ("alicepw", "oiy"), "bob": ("bobpw", "oiy"), "viewer": ("viewerpw", "oi")}


def two_node_scenario(home: str, host: str, port: int, prefixes: dict[str, list[str]]) -> None:
    """Nodes alice (A) and bob (B) and a login without y (viewer), each with its own clone of the hub
    served at host:port, every step through the CLI (``prefixes``: e.g. ``ip netns exec NS`` per node).
    """
    envs = {}
    for who, pw in (("alice", "alicepw"), ("bob", "bobpw"), ("viewer", "viewerpw")):
        e = base_env(home)
        cfg = os.path.join(home, f"{who}.toml")
        e["SOT_OCX_CONFIG"] = cfg
        clone = os.path.join(home, f"{who}.fossil")
        r = sotd("ocx", "clone", f"http://{who}:{pw}@{host}:{port}/", clone, env=e, prefix=prefixes.get(who))
        assert r.code == 0, r
        assert pw not in r.out
        url = f"http://{who}@{host}:{port}/"
        write_config(
            cfg,
            os.path.join(home, f"{who}.sqlite"),
            [{"name": "proj", "repository": clone, "login": who, "url": url}],
        )
        envs[who] = e
    msg = os.path.join(home, "review.json")
    with open(msg, "wb") as f:
        f.write(ev.encode("review", {"checkin": "abc"}, to="bob"))
    r = sotd("ocx", "post", msg, "--repo", "proj", env=envs["alice"], prefix=prefixes.get("alice"))
    assert r.code == 0, r
    h = r.out.strip()
    assert ev.is_hash(h)
    assert sotd("ocx", "sync", env=envs["bob"], prefix=prefixes.get("bob")).code == 0
    shown = sotd("ocx", "show", h, "--json", env=envs["bob"], prefix=prefixes.get("bob"))
    (row,) = json.loads(shown.out)["rows"]
    assert (row["sender_login"], row["to_login"], row["hash"]) == ("alice", "bob", h)
    r = sotd(
        "ocx",
        "answer",
        h,
        "--kind",
        "reviewed",
        "--body",
        '{"verdict": "pass"}',
        "--repo",
        "proj",
        env=envs["bob"],
        prefix=prefixes.get("bob"),
    )
    assert r.code == 0, r
    ah = r.out.strip()
    assert sotd("ocx", "sync", env=envs["alice"], prefix=prefixes.get("alice")).code == 0
    ans = sotd("ocx", "answers", h, "--json", env=envs["alice"], prefix=prefixes.get("alice"))
    assert [(a["hash"], a["sender_login"]) for a in json.loads(ans.out)] == [(ah, "bob")]
    human = sotd("ocx", "answers", h, env=envs["alice"], prefix=prefixes.get("alice"))
    assert ah in human.out and "from=bob" in human.out
    lst = sotd("ocx", "list", "--to", "bob", env=envs["alice"], prefix=prefixes.get("alice"))
    assert h in lst.out
    # a login without y: reported as not delivered, never as sent
    with open(msg, "wb") as f:
        f.write(ev.encode("review", {"checkin": "def"}, to="bob"))
    r = sotd("ocx", "post", msg, "--repo", "proj", env=envs["viewer"], prefix=prefixes.get("viewer"))
    assert r.code == 3, r
    assert r.out == ""
    assert "was not delivered" in r.err and "write-unversioned capability (y)" in r.err
    rj = sotd(
        "ocx", "post", msg, "--repo", "proj", "--json", env=envs["viewer"], prefix=prefixes.get("viewer")
    )
    assert rj.code == 3 and json.loads(rj.out)["delivered"] is False
    assert "NOT DELIVERED" in sotd("ocx", "list", env=envs["viewer"], prefix=prefixes.get("viewer")).out


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@contextmanager
def bridge_namespaces(prefix: str, hub_addr: str, node_addrs: dict[str, str]) -> Iterator[dict[str, str]]:
    """A hub namespace holding a bridge at ``hub_addr``, and one namespace per node joined to it by a veth
    pair (addresses exist only inside these namespaces). Yields {"hub": ns, <node>: ns, …}. Skips when
    namespaces cannot be made here; on exit kills whatever still runs in them and deletes them."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for network namespaces")
    tag = str(os.getpid() % 100000)
    hub = f"{prefix}hub{tag}"
    names = {who: f"{prefix}{i}n{tag}" for i, who in enumerate(node_addrs)}
    made: list[str] = []
    try:
        _ip("netns", "add", hub)
        made.append(hub)
        _ip("-n", hub, "link", "set", "lo", "up")
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{hub_addr}/24", "dev", "br0")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, (who, ns) in enumerate(names.items()):
            _ip("netns", "add", ns)
            made.append(ns)
            inside, outside = f"{prefix}{i}v{tag}", f"{prefix}{i}v{tag}h"
            _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "netns", hub)
            _ip("-n", hub, "link", "set", outside, "master", "br0")
            _ip("-n", hub, "link", "set", outside, "up")
            _ip("-n", ns, "addr", "add", f"{node_addrs[who]}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield {"hub": hub, **names}
    except subprocess.CalledProcessError as e:
        pytest.skip(f"network namespaces are not available here: {e.stderr!r}")
    finally:
        for ns in reversed(made):  # whatever still runs in them (a server, a node, a sandbox) goes first
            pids = subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=20, check=False
            ).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True, timeout=10, check=False)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20, check=False)
