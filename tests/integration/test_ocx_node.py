"""OCX layers 1 and 2 against Debian's real fossil, on one machine (files and loopback only)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from sotd.ocx import envelope as ev
from sotd.ocx import fossil as fx
from sotd.ocx.config import load_config
from sotd.ocx.errors import DuplicateServerCode, InvalidMessage, NotFossil
from sotd.ocx.node import Delivery, Node
from tests.ocx.fossilkit import (
    USERS,
    base_env,
    fossil,
    free_port,
    make_hub,
    need_fossil,
    sotd,
    two_node_scenario,
    wait_port,
    write_config,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def home(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    need_fossil()
    h = str(tmp_path)
    monkeypatch.setenv("HOME", h)
    monkeypatch.setenv("USER", "root")
    return h


@pytest.fixture
def hub_node(home: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    """A node serving one hub clone (no url): the repository others would push to."""
    repo = os.path.join(home, "hub.fossil")
    make_hub(repo, USERS)
    cfg = os.path.join(home, "ocx.toml")
    write_config(
        cfg, os.path.join(home, "index.sqlite"), [{"name": "hub", "repository": repo, "login": "alice"}]
    )
    monkeypatch.setenv("SOT_OCX_CONFIG", cfg)
    node = Node(load_config(os.environ))
    try:
        yield node
    finally:
        node.close()


def raw_add(repo: str, name: str, data: bytes, home: str) -> None:
    p = os.path.join(home, "raw.bin")
    with open(p, "wb") as f:
        f.write(data)
    fossil("uv", "add", p, "--as", name, "-R", repo, "--user", "admin")


def test_post_indexes_with_sender_to_and_hash(hub_node: Node) -> None:
    data = ev.encode("review", {"checkin": "x"}, to="bob")
    res = hub_node.post("hub", data)
    assert res.delivered and res.hash == hashlib.sha3_256(data).hexdigest()
    (row,) = hub_node.index.show(res.hash)
    assert (row["sender_login"], row["to_login"], row["kind"], row["valid"]) == ("alice", "bob", "review", 1)
    assert [r["hash"] for r in hub_node.index.addressed("bob")] == [res.hash]
    ans = hub_node.answer("hub", res.hash, "reviewed", {"verdict": "pass"})
    (a,) = hub_node.index.answers(res.hash)
    assert a["hash"] == ans.hash and a["re_hash"] == res.hash
    stored = fx.read_message(hub_node.config.clones[0].repository, ans.name)
    assert stored is not None and stored.data == ev.encode_answer(res.hash, "reviewed", {"verdict": "pass"})


def test_post_refuses_invalid_and_huge(hub_node: Node) -> None:
    with pytest.raises(InvalidMessage, match="2 content keys"):
        hub_node.post("hub", b'{"ocx": 2, "to": "u", "a": 1, "b": 2}')
    with pytest.raises(InvalidMessage, match="too large"):
        hub_node.post("hub", b'{"ocx": 2, "to": "u", "a": "' + b"x" * (10 * 1024 * 1024) + b'"}')


def test_bad_files_are_indexed_with_their_reason(hub_node: Node, home: str) -> None:
    repo = hub_node.config.clones[0].repository
    bad = {
        "not json": b"this is not json",
        "ocx 1": b'{"ocx": 1, "to": "bob", "run": {}}',
        "two content keys": b'{"ocx": 2, "to": "bob", "run": {}, "review": {}}',
        "neither": b'{"ocx": 2, "run": {}}',
        "huge": b'{"ocx": 2, "to": "bob", "run": "' + b"x" * (10 * 1024 * 1024) + b'"}',
    }
    for data in bad.values():
        raw_add(repo, ev.message_name(hashlib.sha3_256(data).hexdigest()), data, home)
    misnamed = b'{"ocx": 2, "to": "bob", "run": {}}'
    raw_add(repo, ev.message_name("0" * 64), misnamed, home)
    reports = hub_node.sync_once()
    assert [r.error for r in reports] == [None]
    rows = {r["name"]: r for r in hub_node.index.query(repo="hub")}
    assert len(rows) == 6
    reasons = sorted(str(r["reason"]) for r in rows.values())
    assert all(r["valid"] == 0 for r in rows.values())
    assert any(x.startswith("not JSON") for x in reasons)
    assert '"ocx" is 1, not 2' in reasons
    assert '2 content keys ("run", "review"); a message has exactly one' in reasons
    assert 'neither "to" nor "re"' in reasons
    assert any(x.startswith("too large") for x in reasons)
    assert any(x.startswith("the name is not the hash of the bytes") for x in reasons)
    assert rows[ev.message_name("0" * 64)]["hash"] == hashlib.sha3_256(misnamed).hexdigest()


def test_readers_get_each_valid_message_once_and_rebuild_is_identical(hub_node: Node, home: str) -> None:
    got: list[tuple[str, str, bool]] = []

    def reader(d: Delivery) -> None:
        got.append((d.hash, d.sender, d.for_me))
        assert d.data == ev.encode("review", {"n": 1}, to="alice") or d.envelope.to == "bob"

    def broken(d: Delivery) -> None:
        raise RuntimeError("reader bug")

    hub_node.register("review", reader, name="test-reader")
    hub_node.register("review", broken, name="broken-reader")
    r1 = hub_node.post("hub", ev.encode("review", {"n": 1}, to="alice"))
    r2 = hub_node.post("hub", ev.encode("review", {"n": 2}, to="bob"))
    hub_node.post("hub", ev.encode("other", {}, to="bob"))  # a kind nobody reads: indexed, passed by
    assert [r.error for r in hub_node.sync_once()] == [None]
    assert got == [(r1.hash, "alice", True), (r2.hash, "alice", False)]
    before = hub_node.index.snapshot("hub")
    hub_node.rebuild("hub")
    assert hub_node.index.snapshot("hub") == before
    # replay: the same file removed and added again (a new uvid) is not handed again
    repo = hub_node.config.clones[0].repository
    fossil("uv", "rm", r1.name, "-R", repo)
    raw_add(repo, r1.name, ev.encode("review", {"n": 1}, to="alice"), home)
    hub_node.sync_once()
    hub_node.rebuild()
    hub_node.sync_once()
    assert got == [(r1.hash, "alice", True), (r2.hash, "alice", False)]
    assert hub_node.index.handed_count("hub", r1.hash, "broken-reader") == 1


def test_not_fossil_and_duplicate_server_code(home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = os.path.join(home, "a.fossil")
    make_hub(repo, USERS)
    notf = os.path.join(home, "n.fossil")
    with open(notf, "w") as f:
        f.write("just text\n")
    cfg = os.path.join(home, "ocx.toml")
    index = os.path.join(home, "i.sqlite")
    write_config(
        cfg,
        index,
        [
            {"name": "a", "repository": repo, "login": "alice"},
            {"name": "n", "repository": notf, "login": "alice"},
        ],
    )
    monkeypatch.setenv("SOT_OCX_CONFIG", cfg)
    node = Node(load_config(os.environ))
    try:
        (rep,) = node.sync_once()
        assert rep.error == f"ocx: {notf} is not a Fossil repository (not an SQLite database)"
        with pytest.raises(NotFossil):
            node.post("n", ev.encode("x", {}, to="bob"))
    finally:
        node.close()
    copy = os.path.join(home, "copy.fossil")
    shutil.copy(repo, copy)
    write_config(
        cfg,
        index,
        [
            {"name": "a", "repository": repo, "login": "alice"},
            {"name": "copy", "repository": copy, "login": "alice"},
        ],
    )
    node = Node(load_config(os.environ))
    try:
        with pytest.raises(DuplicateServerCode) as e:
            node.server_codes()
        assert "share the server-code" in e.value.message
        assert e.value.hint is not None and "sotd ocx server-code copy --new" in e.value.hint
        (rep,) = node.sync_once()
        assert rep.error is not None and "share the server-code" in rep.error
    finally:
        node.close()
    env = base_env(home)
    env["SOT_OCX_CONFIG"] = cfg
    old = sotd("ocx", "server-code", "copy", env=env)
    new = sotd("ocx", "server-code", "copy", "--new", env=env)
    assert old.code == 0 and new.code == 0 and old.out != new.out and len(new.out.strip()) == 40
    assert sotd("ocx", "sync", env=env).code == 0


def test_cli_over_loopback_server_with_a_login_lacking_y(home: str) -> None:
    """Fallback shape of the multihost test: two clones on 127.0.0.1; every step through the CLI."""
    hub = os.path.join(home, "hub.fossil")
    make_hub(hub, USERS)
    port = free_port()
    srv = subprocess.Popen(
        ["fossil", "server", "--localhost", "--port", str(port), hub],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=base_env(home),
    )
    try:
        wait_port("127.0.0.1", port)
        two_node_scenario(home, "127.0.0.1", port, {})
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def test_unreachable_remote_is_reported_and_poll_loop_stops(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    repo = os.path.join(home, "leaf.fossil")
    make_hub(repo, USERS)
    cfg = os.path.join(home, "ocx.toml")
    url = f"http://alice@127.0.0.1:{free_port()}/"
    write_config(
        cfg,
        os.path.join(home, "i.sqlite"),
        [{"name": "leaf", "repository": repo, "login": "alice", "url": url}],
    )
    monkeypatch.setenv("SOT_OCX_CONFIG", cfg)
    node = Node(load_config(os.environ))
    try:
        (rep,) = node.sync_once()
        assert rep.error is not None and rep.error.startswith("ocx: fossil uv sync")
        stop = threading.Event()
        t = threading.Thread(target=node.poll_loop, args=(stop, 0.05), daemon=True)
        t.start()
        stop.set()
        t.join(timeout=30)
        assert not t.is_alive()
    finally:
        node.close()
