"""Fuzz: the registry and the self file as any bytes, through the everyday verbs (issue 19 part 4).

Oracle: no traceback, exit codes from the documented set, stdout UTF-8; an unreadable registry is never
replaced (its bytes are the same after every verb); a registry sotd wrote is one document that holds no
lone-surrogate escape; a self file is read as a valid handle or nobody, and a verb never replaces a self
file it could not read except by a join that says so.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sotd import _clock
from sotd.errors import RegistryUnreadable
from sotd.formats import registry, selffile
from sotd.handles import is_valid
from tests.fuzz.conftest import Cases, fuzz
from tests.fuzz.kit import (
    VERB_CODES,
    Box,
    as_json,
    carried,
    holds_to_contract,
    json_value,
    nasty_text,
    run_proc,
)


@st.composite
def registry_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["agents", "agents", "json", "bytes"]))
    if kind == "agents":
        agents: dict[object, object] = {}
        for name in draw(st.lists(st.one_of(nasty_text, st.sampled_from(["alpha", "beta"])), max_size=4)):
            row = draw(
                st.one_of(
                    json_value,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "host": st.one_of(nasty_text, st.just("testhost")),
                            "last_seen": st.one_of(nasty_text, st.just(_clock.stamp())),
                            "root": nasty_text,
                            "summary": nasty_text,
                            "status": nasty_text,
                            "floor": st.one_of(st.none(), nasty_text),
                        },
                    ),
                )
            )
            agents[name] = row
        doc: dict[str, object] = {"protocol_version": draw(json_value), "agents": agents}
        return as_json(doc, ascii_escapes=draw(st.booleans()))
    if kind == "json":
        return as_json(draw(json_value))
    return draw(st.binary(max_size=60))


VERBS = [
    ("list",),
    ("join", "--name", "alpha"),
    ("send", "@beta", "hi"),
    ("unread",),
    ("poll",),
    ("status", "working", "x"),
]


def fresh_registry(box: Box, data: bytes) -> None:
    """A fresh box whose registry holds ``data``."""
    box.reset()
    with open(box.layout.registry, "wb") as f:
        f.write(data)


def readable(data: bytes) -> bool:
    try:
        registry.parse(data)
    except RegistryUnreadable:
        return False
    return True


@fuzz(300)
@given(data=registry_bytes(), verb=st.sampled_from(VERBS))
def test_fuzz_any_registry_through_the_verbs(
    box: Box, cases: Cases, data: bytes, verb: tuple[str, ...]
) -> None:
    cases.one()
    fresh_registry(box, data)
    r = box.cli("alpha", *verb)
    holds_to_contract(r, VERB_CODES)
    with open(box.layout.registry, "rb") as f:
        after = f.read()
    if not readable(data):
        assert after == data, r  # an unreadable registry is never replaced
    elif after != data:
        assert readable(after)  # sotd wrote it: one registry document
        assert carried(json.loads(after)), after  # and no string in it holds a lone surrogate


@fuzz(30)
@given(data=registry_bytes(), verb=st.sampled_from(VERBS))
def test_fuzz_any_registry_through_the_real_process(
    box: Box, cases: Cases, data: bytes, verb: tuple[str, ...]
) -> None:
    cases.one()
    fresh_registry(box, data)
    r = run_proc([b"comm", *(v.encode() for v in verb)], box.env("alpha"), box.root("alpha"))
    holds_to_contract(r, VERB_CODES)
    if not readable(data):
        with open(box.layout.registry, "rb") as f:
            assert f.read() == data


@st.composite
def self_file_bytes(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=80))
    handle = draw(st.one_of(nasty_text, st.just("alpha")))
    repo = draw(st.one_of(nasty_text, st.just("alpha")))
    root = draw(st.one_of(nasty_text, st.just(box_root_marker)))
    return f"{handle}\nrepo={repo}\nroot={root}\n".encode("utf-8", "surrogatepass")


box_root_marker = "<root>"


@fuzz(300)
@given(data=self_file_bytes(), verb=st.sampled_from(VERBS))
def test_fuzz_any_self_file_through_the_verbs(
    box: Box, cases: Cases, data: bytes, verb: tuple[str, ...]
) -> None:
    cases.one()
    box.reset()
    data = data.replace(box_root_marker.encode(), box.root("alpha").encode())
    path = box.alpha.self_file
    with open(path, "wb") as f:
        f.write(data)
    handle = selffile.read_handle(path, box.root("alpha"))
    assert handle is None or handle == "" or is_valid(handle)
    r = box.cli("alpha", *verb)
    holds_to_contract(r, VERB_CODES)
    with open(path, "rb") as f:
        after = f.read()
    if verb[0] != "join":
        assert after == data, r  # only a join writes a self file


@fuzz(200)
@given(data=registry_bytes(), me=st.one_of(nasty_text, st.just("testhost")))
def test_fuzz_any_registry_through_the_web_pages_box_list(cases: Cases, data: bytes, me: str) -> None:
    """``sotd web``'s list of the registry's hosts no daemon answers for (``web.snapshot.unlinked_boxes``):
    whatever a registry holds, a list of boxes whose names are inert text, counts that add up."""
    from sotd.text import inert
    from sotd.web import snapshot

    cases.one()
    try:
        agents = registry.agents_of(registry.parse(data))
    except RegistryUnreadable:
        return
    boxes = snapshot.unlinked_boxes(agents, me, {"b1"}, _clock.now(), 600)
    assert sum(b["handles"] for b in boxes) <= len(agents)
    for b in boxes:
        assert b["box"] == inert(b["box"]) and 0 <= b["live"] <= b["handles"], b


@fuzz(100)
@given(data=st.binary(max_size=200), kind=st.sampled_from(["file", "dir-with-head"]))
def test_fuzz_any_git_entry_above_a_project(
    tmp_path_factory: Any, cases: Cases, data: bytes, kind: str
) -> None:
    """Any ``.git`` above the working folder (behaviour 1.1's project root): a file of any bytes, or a folder
    whose ``HEAD`` holds them; the root is that folder only for what git reads as a repository, and the walk
    never raises."""
    import os

    from sotd.cli.comm.common import is_git_marker, raw_root

    cases.one()
    top = str(tmp_path_factory.mktemp("gitfuzz"))
    here = os.path.join(top, "work")
    os.makedirs(here)
    marker = os.path.join(top, ".git")
    if kind == "file":
        with open(marker, "wb") as f:
            f.write(data)
    else:
        os.makedirs(marker)
        with open(os.path.join(marker, "HEAD"), "wb") as f:
            f.write(data)
    assert raw_root(here) == (top if is_git_marker(marker) else here)
    assert not is_git_marker(marker) or (kind == "file" and data.startswith(b"gitdir: "))
