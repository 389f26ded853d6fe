"""Issue 24 items 2, 3 and 6 at layers 1-2: a hub login (carol, capability ``y``) attacks the nodes of
alice (A) and bob (B) with plain Fossil, against a real ``fossil server`` on 127.0.0.1 and real clones,
every node step through the real ``sotd ocx`` CLI.

- Write-once: carol re-uploads the name of bob's real ``ended`` with other bytes and a newer mtime (a date
  in the future, ``fossil uv add --mtime``). The node that sees it first puts the original back (the hub
  holds it again), both indexes keep the valid row plus an invalid row with the reason, ``sotd ocx
  answers`` still lists ``ended``, a rebuild keeps it. The same for a ``run`` replaced before the node it
  asks synced it, and for a run's output ``ocx/out/…`` replaced on the hub.
- No message stops the index: ``{"ocx": 2, "to": "alice", "\\ud800": 1}`` planted on the hub with 30 valid
  messages after it: ``post`` exits 0 and says what the index did, every later message is indexed,
  the planted one is invalid with its reason, and ``rebuild`` ends with as many valid rows.
- Whose bytes: carol pushes alice's exact bytes first; the index shows carol as their sender on every
  node, alice's own included; ``sotd ocx post`` gives each post bytes of its own, so alice's post is hers.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sotd.ocx import envelope as ev
from sotd.ocx import fossil as fx
from sotd.ocx.config import load_config
from sotd.ocx.node import NodeClones
from tests.ocx.fossilkit import USERS, base_env, fossil, make_hub, need_fossil, served, sotd, write_config

pytestmark = pytest.mark.integration

PEOPLE = {**USERS, "carol": ("carolpw", "oiy")}
FUTURE = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 86400 * 365))  # carol dates hers ahead


@dataclass
class Net:
    top: str
    hub: str
    port: int
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    clones: dict[str, str] = field(default_factory=dict)

    def cli(self, who: str, *args: str) -> tuple[int, str, str]:
        r = sotd("ocx", *args, env=self.envs[who])
        return r.code, r.out, r.err

    def ok(self, who: str, *args: str) -> str:
        code, out, err = self.cli(who, *args)
        assert code == 0, (args, out, err)
        return out

    def post(self, who: str, data: bytes) -> tuple[str, str]:
        """``sotd ocx post`` from ``who``: (hash, the stderr sentence)."""
        path = os.path.join(self.top, f"post-{time.monotonic_ns()}.json")
        with open(path, "wb") as f:
            f.write(data)
        code, out, err = self.cli(who, "post", path, "--repo", "proj")
        assert code == 0, (out, err)
        return out.strip(), err.strip()

    def rows(self, who: str) -> list[dict[str, object]]:
        return list(json.loads(self.ok(who, "list", "--json")))

    def answers(self, who: str, h: str) -> list[tuple[str, str, object]]:
        return [
            (r["kind"], r["hash"], r["sender_login"])
            for r in json.loads(self.ok(who, "answers", h, "--json"))
        ]

    def hub_hash(self, name: str) -> str | None:
        return fx.uv_hash(self.hub, name)

    def carol_puts(self, name: str, data: bytes, mtime: str | None = FUTURE) -> None:
        """carol, with plain fossil in her own clone: ``uv add`` (dated ``mtime``) and ``uv sync``."""
        path = os.path.join(self.top, f"carol-{time.monotonic_ns()}.bin")
        with open(path, "wb") as f:
            f.write(data)
        repo, env = self.clones["carol"], base_env(self.top)
        fossil("uv", "sync", "-R", repo, env=env)  # what the hub holds now, as a peer would first
        fossil("uv", "add", path, "--as", name, "-R", repo, *(["--mtime", mtime] if mtime else []), env=env)
        fossil("uv", "sync", "-R", repo, env=env)


@pytest.fixture
def net(tmp_path: str) -> Iterator[Net]:
    need_fossil()
    top = str(tmp_path)
    hub = os.path.join(top, "hub.fossil")
    make_hub(hub, PEOPLE)
    with served(hub, base_env(top)) as port:
        n = Net(top, hub, port)
        for who in ("alice", "bob"):
            pw = PEOPLE[who][0]
            e = base_env(top)
            cfg = os.path.join(top, f"{who}.toml")
            e["SOT_OCX_CONFIG"] = cfg
            clone = os.path.join(top, f"{who}.fossil")
            assert sotd("ocx", "clone", f"http://{who}:{pw}@127.0.0.1:{port}/", clone, env=e).code == 0
            write_config(cfg, os.path.join(top, f"{who}.sqlite"),
                         [{"name": "proj", "repository": clone, "login": who, "url": f"http://{who}@127.0.0.1:{port}/"}])  # fmt: skip
            n.envs[who], n.clones[who] = e, clone
        n.clones["carol"] = os.path.join(top, "carol.fossil")
        fossil("clone", "-u", "--save-http-password", f"http://carol:carolpw@127.0.0.1:{port}/", n.clones["carol"],
               env=base_env(top))  # fmt: skip
        yield n


def by_name(rows: list[dict[str, object]], name: str) -> list[tuple[object, object, object]]:
    """(hash, valid, reason) of every row of ``name``, the valid row first."""
    got = [(r["hash"], r["valid"], r["reason"]) for r in rows if r["name"] == name]
    return sorted(got, key=lambda t: -int(str(t[1])))


def test_a_replaced_ended_is_put_back_and_answers_still_list_it(net: Net) -> None:
    run_h, said = net.post("alice", ev.encode("review", {"checkin": "abc"}, to="bob"))
    assert said == f"ocx: {run_h} is delivered; the index recorded it as review to bob from alice"
    net.ok("bob", "sync")
    ended_h = net.ok("bob", "answer", run_h, "--kind", "ended", "--body", '{"outcome": "passed"}',
                     "--repo", "proj").strip()  # fmt: skip
    net.ok("alice", "sync")
    assert net.answers("alice", run_h) == [("ended", ended_h, "bob")]
    name = ev.message_name(ended_h)
    real = fx.read_message(net.clones["alice"], name)
    assert real is not None and hashlib.sha3_256(real.data).hexdigest() == ended_h

    # carol: other bytes under the name, dated a year ahead: the hub now holds hers
    evil = ev.encode_answer(run_h, "ended", {"outcome": "failed"})
    evil_h = hashlib.sha3_256(evil).hexdigest()
    net.carol_puts(name, evil)
    assert net.hub_hash(name) == evil_h

    # bob, who wrote it, syncs first: his clone took hers (newer), his index keeps his row beside hers,
    # he puts his bytes back dated past hers, and the hub holds them again
    out = net.ok("bob", "sync")
    assert out == "proj: 1 new, 1 put back (another version had replaced them)\n"
    assert net.hub_hash(name) == ended_h
    assert fx.read_message(net.clones["bob"], name).data == real.data  # type: ignore[union-attr]
    reason = f"the name is not the hash of the bytes: the bytes hash to {evil_h}"
    assert by_name(net.rows("bob"), name) == [(ended_h, 1, None), (evil_h, 0, reason)]

    # again, later still: now alice syncs first and puts it back herself
    net.carol_puts(name, evil, FUTURE.replace(FUTURE[:4], str(int(FUTURE[:4]) + 1), 1))
    assert net.hub_hash(name) == evil_h
    assert "1 put back" in net.ok("alice", "sync")
    assert net.hub_hash(name) == ended_h
    assert net.answers("alice", run_h) == [("ended", ended_h, "bob")]
    assert by_name(net.rows("alice"), name) == [(ended_h, 1, None), (evil_h, 0, reason)]
    shown = json.loads(net.ok("alice", "show", ended_h, "--json"))
    assert shown["message"] == real.data.decode() and [r["valid"] for r in shown["rows"]] == [1]

    # a rebuild ends with the same valid rows, though the clone held other bytes for a while
    before = [r for r in net.rows("alice") if r["valid"]]
    net.ok("alice", "rebuild")
    assert [r for r in net.rows("alice") if r["valid"]] == before
    assert net.answers("alice", run_h) == [("ended", ended_h, "bob")]
    assert net.ok("bob", "sync") == "proj: 0 new\n"  # nothing to put back: the hub holds his bytes


def test_a_run_replaced_before_its_node_synced_reaches_it_valid(net: Net) -> None:
    run_h, _ = net.post("alice", ev.encode("review", {"checkin": "x"}, to="bob"))
    name = ev.message_name(run_h)
    evil = ev.encode("review", {"checkin": "evil"}, to="bob")
    net.carol_puts(name, evil)
    net.ok("bob", "sync")  # bob sees only carol's bytes under the name: invalid, nothing to hand on
    assert by_name(net.rows("bob"), name) == [
        (hashlib.sha3_256(evil).hexdigest(), 0,
         f"the name is not the hash of the bytes: the bytes hash to {hashlib.sha3_256(evil).hexdigest()}")
    ]  # fmt: skip
    assert "1 put back" in net.ok("alice", "sync")  # the sender's node holds the first bytes
    net.ok("bob", "sync")
    (row,) = json.loads(net.ok("bob", "show", run_h, "--json"))["rows"]
    assert (row["valid"], row["kind"], row["to_login"], row["sender_login"]) == (1, "review", "bob", "alice")


def test_a_replaced_output_is_put_back_by_the_node_that_stored_it(net: Net) -> None:
    """An ``ocx/out/`` file the node stored itself (``Node.upload``, as a run's outputs are)."""
    copy = os.path.join(net.top, "board.img")
    with open(copy, "wb") as f:
        f.write(b"board 0\n" * 100)
    name = "ocx/out/" + "a" * 64 + "/builds/board.img"
    os.environ["SOT_OCX_CONFIG"] = net.envs["bob"]["SOT_OCX_CONFIG"]
    try:
        node = NodeClones(load_config(os.environ))
    finally:
        del os.environ["SOT_OCX_CONFIG"]
    try:
        stored = node.upload("proj", name, copy)
        assert stored == hashlib.sha3_256(b"board 0\n" * 100).hexdigest()
        assert node.push("proj").error is None and net.hub_hash(name) == stored
        net.carol_puts(name, b"not the board\n")
        (rep,) = node.sync_once()
        assert (rep.error, rep.restored) == (None, 1)
        assert net.hub_hash(name) == stored
        # the node's copy changed since: never sent in its place
        net.carol_puts(name, b"not the board\n", FUTURE.replace(FUTURE[:4], str(int(FUTURE[:4]) + 2), 1))
        with open(copy, "ab") as f:
            f.write(b"x")
        (rep,) = node.sync_once()
        assert (rep.error, rep.restored) == (None, 0)
        assert net.hub_hash(name) == hashlib.sha3_256(b"not the board\n").hexdigest()
    finally:
        node.close()


def test_a_message_utf8_cannot_carry_never_stops_the_index(net: Net) -> None:
    poison = b'{"ocx": 2, "to": "alice", "\\ud800": 1}'
    why = 'text UTF-8 cannot carry: a key of $ holds a lone surrogate (U+D800): "\\ud800"'
    # posting it is refused, nothing written
    path = os.path.join(net.top, "poison.json")
    with open(path, "wb") as f:
        f.write(poison)
    code, out, err = net.cli("bob", "post", path, "--repo", "proj")
    assert (code, out, err) == (1, "", f"ocx: not posted: {why}\n")
    # carol plants it on the hub, then 30 valid messages after it, in one sync
    repo, env = net.clones["carol"], base_env(net.top)
    planted = [poison] + [ev.encode("note", {"n": i}, to="alice") for i in range(30)]
    for i, data in enumerate(planted):
        p = os.path.join(net.top, f"plant-{i}.json")
        with open(p, "wb") as f:
            f.write(data)
        fossil(
            "uv", "add", p, "--as", ev.message_name(hashlib.sha3_256(data).hexdigest()), "-R", repo, env=env
        )
    fossil("uv", "sync", "-R", repo, env=env)
    # bob's next post pulls them all: delivered (exit 0), and says what the index did
    h, said = net.post("bob", ev.encode("review", {"checkin": "after"}, to="alice"))
    assert said == f"ocx: {h} is delivered; the index recorded it as review to alice from bob"
    rows = {r["hash"]: r for r in net.rows("bob")}
    bad = rows[hashlib.sha3_256(poison).hexdigest()]
    assert (bad["valid"], bad["reason"], bad["kind"]) == (0, why, None)
    notes = [r for r in rows.values() if r["kind"] == "note"]
    assert len(notes) == 30 and all(r["valid"] == 1 and r["sender_login"] == "carol" for r in notes)
    # alice's node too; then a rebuild on each ends with every valid row
    net.ok("alice", "sync")
    for who in ("alice", "bob"):
        valid = sorted(str(r["hash"]) for r in net.rows(who) if r["valid"])
        assert len(valid) == 31
        net.ok(who, "rebuild")
        assert sorted(str(r["hash"]) for r in net.rows(who) if r["valid"]) == valid
    after, _ = net.post("alice", ev.encode("note", {"n": "last"}, to="bob"))
    net.ok("bob", "sync")
    assert [r["valid"] for r in net.rows("bob") if r["hash"] == after] == [1]


def test_the_index_shows_who_posted_the_bytes_and_post_makes_them_alices_own(net: Net) -> None:
    stop = ev.encode("stop", {}, re="c" * 64)  # bytes anyone can write before alice does
    h = hashlib.sha3_256(stop).hexdigest()
    net.carol_puts(ev.message_name(h), stop, None)
    # alice's node writes the very same bytes (no nonce: Node.post): the hub holds them from carol, and so
    # alice's index says carol once the listing is read, not alice
    os.environ["SOT_OCX_CONFIG"] = net.envs["alice"]["SOT_OCX_CONFIG"]
    try:
        node = NodeClones(load_config(os.environ))
    finally:
        del os.environ["SOT_OCX_CONFIG"]
    try:
        res = node.post("proj", stop)
        assert res.delivered and res.hash == h
        assert (
            res.indexed
            == f"ocx: {h} is delivered; the index recorded it as stop answering {'c' * 64} from carol"
        )
    finally:
        node.close()
    (row,) = json.loads(net.ok("alice", "show", h, "--json"))["rows"]
    assert (row["sender_login"], row["origin"]) == ("carol", "remote 127.0.0.1")
    net.ok("bob", "sync")
    assert net.answers("bob", "c" * 64) == [("stop", h, "carol")]
    # sotd ocx post: the same file gives bytes of alice's own, a hash no one had, and she is the sender
    mine, said = net.post("alice", stop)
    assert (
        mine != h
        and said == f"ocx: {mine} is delivered; the index recorded it as stop answering {'c' * 64} from alice"
    )
    got = fx.read_message(net.clones["alice"], ev.message_name(mine))
    assert got is not None and got.data.startswith(stop) and json.loads(got.data) == json.loads(stop)
    assert len(got.data) == len(stop) + 8 * ev.NONCE_BYTES and not got.data[len(stop) :].strip(b" \t")
    again, _ = net.post("alice", stop)
    assert again not in (h, mine)
    net.ok("bob", "sync")
    assert net.answers("bob", "c" * 64) == [
        ("stop", h, "carol"),
        ("stop", mine, "alice"),
        ("stop", again, "alice"),
    ]
