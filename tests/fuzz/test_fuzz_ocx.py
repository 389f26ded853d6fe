"""Fuzz: OCX messages (issue 24 item 7): malformed envelopes, wrong hashes, huge and deep JSON, every
envelope field of every type, text UTF-8 cannot carry, and hash names replaced with other bytes.

Two oracles. The envelope (``read_envelope``, pure): any bytes give a verdict, never an exception; a
valid verdict is only given to a UTF-8 JSON object nesting at most ``MAX_DEPTH`` levels whose every key
and string UTF-8 can carry, with ``"ocx": 2``, exactly one of a login ``to`` or a hash ``re``, and one
content key; an invalid one gives a reason that is itself UTF-8 text. The node (a real Fossil repository,
a hub node with a reader): whatever files a case plants, a sync reports no error and raises nothing; every
right-named valid message has exactly one valid row and is handed to the reader exactly once; a replaced
name keeps its first valid row beside an invalid one, and the node puts the first bytes back; every other
file has an invalid row with a reason; a message planted after them all is indexed (no wedge); a rebuild
keeps every valid row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd import text
from sotd.ocx import envelope as ev
from sotd.ocx import fossil as fx
from sotd.ocx.config import load_config
from sotd.ocx.node import Delivery, NodeClones
from tests.fuzz.conftest import Cases, fuzz
from tests.fuzz.kit import as_json, carried, json_value, nasty_text, nested, scratch_dir

hex40 = st.text("0123456789abcdef", min_size=40, max_size=40)
hex64 = st.text("0123456789abcdef", min_size=64, max_size=64)
KINDS = ["run", "stop", "note", "ended"]


@st.composite
def envelope_doc(draw: st.DrawFn) -> dict[Any, Any]:
    """An envelope whose every field may be missing, doubled, or of any type; a content of any shape."""
    doc: dict[Any, Any] = {}
    if draw(st.integers(0, 9)):
        doc["ocx"] = draw(st.one_of(st.just(2), st.just(2), json_value))
    pick = draw(st.sampled_from(["to", "to", "re", "re", "both", "neither"]))
    if pick in ("to", "both"):
        doc["to"] = draw(st.one_of(st.just("bob"), st.just("lab-user"), nasty_text, json_value))
    if pick in ("re", "both"):
        doc["re"] = draw(st.one_of(hex64, hex40, nasty_text, json_value))
    for k in draw(st.lists(st.one_of(st.sampled_from(KINDS), nasty_text), min_size=0, max_size=2)):
        doc[k] = draw(json_value)
    return doc


@st.composite
def message_bytes(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from(["doc", "doc", "doc", "deep", "wide", "mutated", "bytes"]))
    if shape == "doc":
        return as_json(draw(envelope_doc()), ascii_escapes=draw(st.booleans()))
    if shape == "deep":  # around the limit, and past the parser's own stack
        depth = draw(st.one_of(st.integers(ev.MAX_DEPTH - 3, ev.MAX_DEPTH + 3), st.integers(900, 3000)))
        return b'{"ocx": 2, "to": "bob", "run": ' + nested(depth - 1) + b"}"
    if shape == "wide":  # large: many elements, a long string, a number too long to convert
        n = draw(st.integers(1, 200_000))
        body = draw(st.sampled_from([b"[" + b"1," * n + b"1]", b'"' + b"x" * n + b'"', b"9" * n]))
        return b'{"ocx": 2, "to": "bob", "note": ' + body + b"}"
    if shape == "mutated":  # a valid message with bytes cut, doubled or replaced
        data = bytearray(ev.encode(draw(st.sampled_from(KINDS)), draw(json_value), to="bob"))
        at = draw(st.integers(0, len(data)))
        data[at:at + draw(st.integers(0, 3))] = draw(st.binary(max_size=4))  # fmt: skip
        return bytes(data)
    return draw(st.binary(max_size=80))


def depth_of(doc: object) -> int:
    todo, deepest = [(doc, 1)], 0
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def envelope_holds(data: bytes) -> ev.OcxEnvelope | ev.Invalid:
    got = ev.read_envelope(data)  # the oracle: an exception here fails the case
    assert isinstance(got, ev.OcxEnvelope | ev.Invalid), got
    if isinstance(got, ev.Invalid):
        assert got.reason and isinstance(got.reason, str)
        got.reason.encode("utf-8")
        return got
    doc = json.loads(data.decode("utf-8"))
    assert isinstance(doc, dict) and carried(doc) and depth_of(doc) <= ev.MAX_DEPTH
    assert type(doc["ocx"]) is int and doc["ocx"] == 2
    assert ("to" in doc) != ("re" in doc)
    assert [k for k in doc if k not in ev.ENVELOPE_KEYS] == [got.kind]
    assert got.to is None or ev.is_login(got.to)
    assert got.re is None or ev.is_hash(got.re)
    return got


@fuzz(600)
@given(data=message_bytes())
def test_fuzz_any_bytes_get_a_verdict_and_only_carriable_ones_are_valid(cases: Cases, data: bytes) -> None:
    cases.one()
    envelope_holds(data)


@fuzz(20)
@given(data=message_bytes())
def test_fuzz_past_the_size_limit_is_refused_unparsed(cases: Cases, data: bytes) -> None:
    cases.one()
    big = data + b" " * (ev.MAX_MESSAGE_BYTES + 1 - len(data) % 1000)
    assert envelope_holds(big) == ev.Invalid(
        f"too large: {len(big)} bytes; the limit is {ev.MAX_MESSAGE_BYTES} bytes"
    )


# --- the node over a real Fossil repository ----------------------------------------------------------


class Hub:
    """A hub repository (no remote) served by one node with a reader of every fuzzed kind."""

    def __init__(self, top: str) -> None:
        self.top = top
        self.repo = os.path.join(top, "hub.fossil")
        subprocess.run(["fossil", "init", self.repo, "--admin-user", "admin"], capture_output=True, check=True,
                       timeout=60)  # fmt: skip
        warm = os.path.join(top, "warm.txt")
        with open(warm, "w") as f:
            f.write("the unversioned table exists from here on\n")
        subprocess.run(["fossil", "uv", "add", warm, "--as", "warm.txt", "-R", self.repo, "--user", "admin"],
                       capture_output=True, check=True, timeout=60)  # fmt: skip
        cfg = os.path.join(top, "ocx.toml")
        with open(cfg, "w") as f:
            f.write(f'index = "{top}/index.sqlite"\n\n[[clone]]\nname = "hub"\nrepository = "{self.repo}"\n'
                    'login = "admin"\n')  # fmt: skip
        self.node = NodeClones(load_config({"SOT_OCX_CONFIG": cfg, "HOME": top}))
        self.policy = fx.repo_info(self.repo).hash_policy
        self.handed: dict[str, int] = {}
        self.handed_bytes: dict[str, bytes] = {}
        for kind in KINDS:
            self.node.register(kind, self._reader, name=f"fuzz-{kind}")
        self.first: dict[str, bytes] = {}  # every valid message name planted so far -> its bytes
        self.n = 0

    def _reader(self, d: Delivery) -> None:  # (what a reader raises is only recorded: the test checks)
        self.handed[d.hash] = self.handed.get(d.hash, 0) + 1
        self.handed_bytes[d.hash] = d.data

    def plant(self, name: bytes, data: bytes) -> bool:
        """``fossil uv add`` (False when fossil refuses the name, as it does for some). A name that is not
        UTF-8, which fossil's own commands refuse, is written into the repository file directly: what
        a file written by other means (another program, a damaged copy) would hold."""
        self.n += 1
        path = os.path.join(self.top, "plant.bin")
        with open(path, "wb") as f:
            f.write(data)
        p = subprocess.run([b"fossil", b"uv", b"add", path.encode(), b"--as", name, b"-R", self.repo.encode(),
                            b"--user", b"admin"], capture_output=True, timeout=60, check=False)  # fmt: skip
        if p.returncode == 0:
            return True
        try:
            name.decode("utf-8")
            return False
        except UnicodeDecodeError:
            pass
        with contextlib.closing(sqlite3.connect(self.repo)) as db, db:
            db.execute("INSERT OR REPLACE INTO unversioned(name, rcvid, mtime, hash, sz, encoding, content) "
                       "VALUES(CAST(? AS TEXT), 0, 1, ?, ?, 0, ?)",
                       (name, ev.message_hash(data, self.policy), len(data), data))  # fmt: skip
        return True


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    with scratch_dir() as d:
        h = Hub(d)
        try:
            yield h
        finally:
            h.node.close()


@st.composite
def planted(draw: st.DrawFn) -> tuple[str, bytes]:
    """(how it is named, the bytes): its hash, another hash, a name planted before (replaced), or junk."""
    naming = draw(st.sampled_from(["right", "right", "right", "wrong", "replace", "odd"]))
    return naming, draw(st.one_of(message_bytes(), st.builds(lambda k, b: ev.encode(k, b, to="bob"),
                                                             st.sampled_from(KINDS), json_value)))  # fmt: skip


@fuzz(25)
@given(
    batch=st.lists(planted(), min_size=1, max_size=5),
    rebuild=st.booleans(),
    not_utf8=st.booleans(),
    pick=st.randoms(),
)
def test_fuzz_any_files_never_stop_the_index(
    hub: Hub, cases: Cases, batch: list[tuple[str, bytes]], rebuild: bool, not_utf8: bool, pick: Any
) -> None:
    cases.one()
    idx = hub.node.index
    written: list[tuple[str, bytes, str]] = []  # (name, bytes, naming)
    for asked, data in batch:
        naming = asked
        if naming == "replace" and hub.first:
            name = pick.choice(sorted(hub.first))
        elif naming == "odd":
            # (a name that is not UTF-8: its bytes as surrogate escapes; fossil stores whatever bytes it is given)
            name = (
                "ocx/m/" + pick.choice(["", "x", "A" * 64, "\u00e9" * 3, "0" * 63, "\udcff\udcfe"]) + ".json"
            )
        elif naming == "wrong":
            name = ev.message_name(hashlib.sha3_256(data + b"!").hexdigest())
        else:
            naming = "right"
            name = ev.message_name(ev.message_hash(data, hub.policy))
        if hub.plant(name.encode("utf-8", "surrogateescape"), data):
            written.append((name, data, naming))
    if not_utf8:  # a name whose bytes are not UTF-8 (surrogate escapes here)
        name = f"ocx/m/\udcff{hub.n}.json"
        data = ev.encode("note", {"odd": hub.n}, to="bob")
        assert hub.plant(name.encode("utf-8", "surrogateescape"), data)
        written.append((name, data, "odd"))
    control = ev.encode("note", {"control": hub.n}, to="bob")
    control_name = ev.message_name(ev.message_hash(control, hub.policy))
    assert hub.plant(control_name.encode(), control)
    written.append((control_name, control, "right"))

    valid_before = {(r["name"], r["hash"]) for r in idx.query(repo="hub") if r["valid"]}
    (rep,) = hub.node.sync_once()
    assert rep.error is None, rep.error
    rows = idx.query(repo="hub")
    valid_now = {(r["name"], r["hash"]) for r in rows if r["valid"]}
    assert valid_before <= valid_now  # no valid row is ever replaced or lost
    last = {name: i for i, (name, _, _) in enumerate(written)}  # a name planted twice: the node sees the last
    for i, (name, data, naming) in enumerate(written):
        if last[name] != i:
            continue
        h = ev.message_hash(data, hub.policy) if naming != "right" else ev.hash_from_name(name) or ""
        verdict = ev.read_envelope(data)
        if naming == "right" and isinstance(verdict, ev.OcxEnvelope) and name not in hub.first:
            hub.first[name] = data
        mine = [r for r in rows if r["name"] == text.carry_os(name) and r["hash"] == h]
        assert mine or naming == "replace", (name, naming)  # every file planted has its row
        if name in hub.first and data == hub.first[name]:
            assert [r["valid"] for r in mine] == [1], (name, mine)
        elif mine:
            assert mine[0]["valid"] == 0 and mine[0]["reason"], mine
        if name in hub.first:  # a replaced name holds its first bytes again; its valid row stands
            got = fx.read_message(hub.repo, name)
            assert got is not None and got.data == hub.first[name]
            assert (name, ev.hash_from_name(name)) in valid_now
    for name, data in hub.first.items():
        h = ev.hash_from_name(name) or ""
        assert sum(1 for r in rows if r["hash"] == h and r["valid"]) == 1
        if ev.read_envelope(data).kind in KINDS:  # type: ignore[union-attr]
            assert hub.handed.get(h) == 1, (name, hub.handed.get(h))
            assert hub.handed_bytes[h] == data  # the first bytes, whatever the clone held meanwhile
    assert (control_name, ev.hash_from_name(control_name)) in valid_now  # not wedged
    if rebuild:
        hub.node.rebuild()
        assert {(r["name"], r["hash"]) for r in idx.query(repo="hub") if r["valid"]} == valid_now
