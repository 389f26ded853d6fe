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
from sotd.ocx.config import NodeConfig, load_config
from sotd.ocx.errors import DuplicateServerCode, InvalidMessage, NotFossil
from sotd.ocx.node import Delivery, NodeClones
from tests.ocx.fossilkit import (
    USERS,
    base_env,
    fossil,
    free_port,
    make_hub,
    need_fossil,
    served,
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
def hub_node(home: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeClones]:
    """A node serving one hub clone (no url): the repository others would push to."""
    repo = os.path.join(home, "hub.fossil")
    make_hub(repo, USERS)
    cfg = os.path.join(home, "ocx.toml")
    write_config(
        cfg, os.path.join(home, "index.sqlite"), [{"name": "hub", "repository": repo, "login": "alice"}]
    )
    monkeypatch.setenv("SOT_OCX_CONFIG", cfg)
    node = NodeClones(load_config(os.environ))
    try:
        yield node
    finally:
        node.close()


def raw_add(repo: str, name: str, data: bytes, home: str) -> None:
    p = os.path.join(home, "raw.bin")
    with open(p, "wb") as f:
        f.write(data)
    fossil("uv", "add", p, "--as", name, "-R", repo, "--user", "admin")


def test_post_indexes_with_sender_to_and_hash(hub_node: NodeClones) -> None:
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


def test_post_refuses_invalid_and_huge(hub_node: NodeClones) -> None:
    with pytest.raises(InvalidMessage, match="2 content keys"):
        hub_node.post("hub", b'{"ocx": 2, "to": "u", "a": 1, "b": 2}')
    with pytest.raises(InvalidMessage, match="too large"):
        hub_node.post("hub", b'{"ocx": 2, "to": "u", "a": "' + b"x" * (10 * 1024 * 1024) + b'"}')


def test_bad_files_are_indexed_with_their_reason(hub_node: NodeClones, home: str) -> None:
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


def test_readers_get_each_valid_message_once_and_rebuild_is_identical(
    hub_node: NodeClones, home: str
) -> None:
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
    node = NodeClones(load_config(os.environ))
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
    node = NodeClones(load_config(os.environ))
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
    node = NodeClones(load_config(os.environ))
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


def leaf_node(home: str, name: str, clones: list[dict[str, object]]) -> NodeClones:
    """A node whose configuration ``NAME.toml`` lists ``clones`` (each made with fx.clone first)."""
    cfg = os.path.join(home, f"{name}.toml")
    write_config(cfg, os.path.join(home, f"{name}.sqlite"), clones)
    config: NodeConfig = load_config({"SOT_OCX_CONFIG": cfg})
    return NodeClones(config)


def test_sha1_repository_post_scan_and_names_end_to_end(home: str) -> None:
    """A hub under the sha1 hash policy: 40-digit message names through post, sync, scan and check_name."""
    hub = os.path.join(home, "hub.fossil")
    make_hub(hub, USERS)
    fossil("hash-policy", "sha1", "-R", hub)
    assert fossil("hash-policy", "-R", hub).strip() == "sha1"
    with served(hub, base_env(home)) as port:
        nodes = {}
        for who in ("alice", "bob"):
            repo = os.path.join(home, f"{who}.fossil")
            fx.clone(f"http://{who}:{USERS[who][0]}@127.0.0.1:{port}/", repo)
            assert fossil("hash-policy", "-R", repo).strip() == "sha1"  # a clone takes the hub's policy
            url = f"http://{who}@127.0.0.1:{port}/"
            nodes[who] = leaf_node(home, who, [{"name": "p", "repository": repo, "login": who, "url": url}])
        a, b = nodes["alice"], nodes["bob"]
        try:
            got: list[tuple[str, str]] = []
            b.register("review", lambda d: got.append((d.hash, d.sender)), name="sha1-reader")
            data = ev.encode("review", {"checkin": "sha1"}, to="bob")
            res = a.post("p", data)
            sha1 = hashlib.sha1(data, usedforsecurity=False).hexdigest()
            assert (res.hash, res.name, res.delivered) == (sha1, f"ocx/m/{sha1}.json", True)
            stored = fx.read_message(a.config.clones[0].repository, res.name)
            assert stored is not None and stored.hash == sha1 and stored.data == data
            assert ev.check_name(res.name, data) is None
            # a misnamed 40-digit file and a 64-digit (SHA3) name, straight into the hub
            misnamed = ev.encode("review", {"checkin": "misnamed"}, to="bob")
            raw_add(hub, ev.message_name("1" * 40), misnamed, home)
            sha3_msg = ev.encode("review", {"checkin": "sha3 name"}, to="bob")
            sha3 = hashlib.sha3_256(sha3_msg).hexdigest()
            raw_add(hub, ev.message_name(sha3), sha3_msg, home)
            assert [r.error for r in b.sync_once()] == [None]
            rows = {r["name"]: r for r in b.index.query(repo="p")}
            ok = rows[res.name]
            assert (ok["hash"], ok["valid"], ok["sender_login"], ok["to_login"]) == (sha1, 1, "alice", "bob")
            bad = rows[ev.message_name("1" * 40)]
            misnamed_sha1 = hashlib.sha1(misnamed, usedforsecurity=False).hexdigest()
            assert (bad["valid"], bad["hash"]) == (0, misnamed_sha1)  # indexed under the policy's hash
            assert (
                bad["reason"] == f"the name is not the hash of the bytes: the bytes hash to {misnamed_sha1}"
            )
            assert rows[ev.message_name(sha3)]["valid"] == 1  # a 64-digit name is checked as SHA3-256
            assert sorted(got) == sorted([(sha1, "alice"), (sha3, "admin")])
            # the answer is a 40-digit message that names a 40-digit one
            ans = b.answer("p", sha1, "reviewed", {"verdict": "pass"})
            assert ans.delivered and len(ans.hash) == 40
            assert (
                ans.hash == hashlib.sha1(ev.encode_answer(sha1, "reviewed", {"verdict": "pass"})).hexdigest()
            )
            assert [r.error for r in a.sync_once()] == [None]
            assert [(r["hash"], r["sender_login"]) for r in a.index.answers(sha1)] == [(ans.hash, "bob")]
        finally:
            a.close()
            b.close()


def test_each_clone_hands_what_arrived_in_it(home: str) -> None:
    """Two clones of two projects on one node: each message is handed with the clone it arrived in."""
    hubs = {}
    for p in ("x", "y"):
        hubs[p] = os.path.join(home, f"hub-{p}.fossil")
        make_hub(hubs[p], {**USERS, "carol": ("carolpw", "oiy")})
    env = base_env(home)
    with served(hubs["x"], env) as px, served(hubs["y"], env) as py:
        ports = {"x": px, "y": py}
        poster_clones, reader_clones = [], []
        for p in ("x", "y"):
            pa = os.path.join(home, f"alice-{p}.fossil")
            fx.clone(f"http://alice:alicepw@127.0.0.1:{ports[p]}/", pa)
            poster_clones.append(
                {
                    "name": f"a{p}",
                    "repository": pa,
                    "login": "alice",
                    "url": f"http://alice@127.0.0.1:{ports[p]}/",
                }
            )
            # the reading node acts as bob on x and as carol on y
            login, pw = ("bob", "bobpw") if p == "x" else ("carol", "carolpw")
            pn = os.path.join(home, f"node-{p}.fossil")
            fx.clone(f"http://{login}:{pw}@127.0.0.1:{ports[p]}/", pn)
            reader_clones.append(
                {"name": p, "repository": pn, "login": login, "url": f"http://{login}@127.0.0.1:{ports[p]}/"}
            )
        poster = leaf_node(home, "poster", poster_clones)
        node = leaf_node(home, "reader", reader_clones)
        try:
            codes = node.server_codes()
            assert codes["x"] != codes["y"]
            seen: list[tuple[str, str, str, bool, object, bytes]] = []

            def reader(d: Delivery) -> None:
                seen.append((d.hash, d.clone.name, d.server_code, d.for_me, d.row["repo"], d.data))

            node.register("review", reader, name="clones-reader")
            only_x = ev.encode("review", {"n": "only in x"}, to="bob")
            only_y = ev.encode("review", {"n": "only in y"}, to="bob")
            both = ev.encode("review", {"n": "in both"}, to="carol")
            h1 = poster.post("ax", only_x).hash
            h2 = poster.post("ay", only_y).hash
            h3 = poster.post("ax", both).hash
            assert poster.post("ay", both).hash == h3  # the same bytes are the same message in each clone
            assert [r.error for r in node.sync_once()] == [None, None]
            assert sorted(seen) == sorted(
                [
                    (h1, "x", codes["x"], True, "x", only_x),
                    (h2, "y", codes["y"], False, "y", only_y),
                    (h3, "x", codes["x"], False, "x", both),
                    (h3, "y", codes["y"], True, "y", both),
                ]
            )
            assert not any(h == h1 and c == "y" for h, c, *_ in seen)
            assert not any(h == h2 and c == "x" for h, c, *_ in seen)
            assert [r["repo"] for r in node.index.show(h3)] == ["x", "y"]
            assert [r["repo"] for r in node.index.show(h1)] == ["x"]
            # nothing is handed again, after another sync or a rebuild of one clone
            before = list(seen)
            node.sync_once()
            node.rebuild("y")
            node.sync_once()
            assert seen == before
        finally:
            poster.close()
            node.close()
