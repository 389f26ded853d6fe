"""Behaviour 6.8 (derivation), seed "Handles" (validity), 6.8 slug."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd import handles
from sotd.errors import HandleError

pytestmark = pytest.mark.unit


def h6(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:6]


@pytest.mark.parametrize(
    ("h", "ok"),
    [
        ("a", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("", False),
        ("-a", False),
        ("a-", True),
        ("a..b", False),
        ("..", False),
        (".a", True),
        ("a.b_c-D9", True),
        ("a/b", False),
        ("a b", False),
        ("é", False),
        ("a\n", False),
        (None, False),
        (5, False),
    ],
)
def test_seed_handles_validity(h: object, ok: bool) -> None:
    assert handles.is_valid(h) is ok
    if ok:
        assert handles.validate(h) == h
    else:
        with pytest.raises(HandleError):
            handles.validate(h)


@pytest.mark.parametrize(
    ("raw", "limit", "want"),
    [
        ("instructor-materials", 20, "instructor-materials"),
        ("My Repo", 20, "My-Repo"),
        ("a  b", 20, "a-b"),
        ("--a--", 20, "a"),
        ("", 20, "x"),
        ("///", 20, "x"),
        ("é", 20, "x"),
        ("aé b", 20, "a-b"),
        ("abcdefghijklmnopqrst-uvw", 20, "abcdefghijklmnopqrst"),
        ("abcdefghijklmnopqrs-uvw", 20, "abcdefghijklmnopqrs"),  # cut leaves '-', stripped again
        ("a.b_c", 20, "a.b_c"),
        ("a..b", 20, "a.-b"),  # our decision: never '..' in a part
        ("HostName", 12, "HostName"),
        ("very-long-hostname", 12, "very-long-ho"),
    ],
)
def test_6_8_sanitize(raw: str, limit: int, want: str) -> None:
    assert handles.sanitize(raw, limit) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("testhost", "testhost"),
        ("MacBook", "MacBook"),
        ("my_box.1", "my_box.1"),
        ("very-long-hostname", "very-long-ho-" + h6("very-long-hostname")),
        ("my box", "my-box-" + h6("my box")),
        ("-box", "box-" + h6("-box")),
        ("", "x-" + h6("")),
    ],
)
def test_6_8_host_part_hash_when_changed(raw: str, want: str) -> None:
    assert handles.host_part(raw) == want


def test_6_8_hash6_is_sha256_prefix() -> None:
    assert handles.hash6("/site1/groupX/instructor-materials") == h6("/site1/groupX/instructor-materials")
    assert len(handles.hash6("")) == 6


ROOT1 = "/site1/groupX/instructor-materials"
ROOT2 = "/site2/groupX/instructor-materials"
ROOT3 = "/site3/groupX/instructor-materials"


def test_6_8_candidates_example() -> None:
    t1, t2, t3 = handles.candidates(ROOT1, "testhost")
    assert t1 == "instructor-materials-testhost"
    assert t2 == "instructor-materials-groupX-testhost"
    assert t3 == f"instructor-materials-{h6(ROOT1)}-testhost"


def test_6_8_example_three_roots_same_folder() -> None:
    agents: dict[str, object] = {}
    got = []
    for root in (ROOT1, ROOT2, ROOT3):
        d = handles.derive(root, "testhost", agents, reclaim=True)
        agents[d.handle] = {"root": root}
        got.append((d.handle, d.qualifier, d.tier1))
    t1 = "instructor-materials-testhost"
    assert got == [
        (t1, "", t1),
        ("instructor-materials-groupX-testhost", "groupX", t1),
        (f"instructor-materials-{h6(ROOT3)}-testhost", h6(ROOT3), t1),
    ]


T1, T2, T3 = handles.candidates(ROOT1, "testhost")
OTHER = {"root": "/other/instructor-materials"}
LEGACY: dict[str, object] = {"host": "testhost"}


@pytest.mark.parametrize(
    ("agents", "reclaim", "want", "qual"),
    [
        ({}, True, T1, ""),
        ({}, False, T1, ""),
        ({T1: {"root": ROOT1}}, True, T1, ""),  # reclaim: own root is claimable
        ({T1: {"root": ROOT1}}, False, T2, "groupX"),  # fresh (spawn): any row collides
        ({T1: OTHER}, True, T2, "groupX"),
        ({T1: LEGACY}, True, T2, "groupX"),  # a legacy row with no root is a collision
        ({T1: "junk"}, True, T2, "groupX"),
        ({T1: OTHER, T2: {"root": ROOT1}}, True, T2, "groupX"),
        ({T1: OTHER, T2: OTHER}, True, T3, h6(ROOT1)),
        ({T1: {"root": ROOT1, "last_seen": "1970-01-01T00:00:00Z"}}, True, T1, ""),  # liveness not consulted
    ],
)
def test_6_8_derive_tiers(agents: dict[str, object], reclaim: bool, want: str, qual: str) -> None:
    d = handles.derive(ROOT1, "testhost", agents, reclaim=reclaim)
    assert (d.handle, d.qualifier, d.tier1) == (want, qual, T1)


def test_6_8_message_tier2_names_holder_root() -> None:
    d = handles.derive(ROOT1, "testhost", {T1: OTHER}, reclaim=True)
    assert (
        d.note == f"comm: '@{T1}' is already held by /other/instructor-materials — joining as '@{T2}' instead"
    )


def test_6_8_message_tier2_unknown_project() -> None:
    d = handles.derive(ROOT1, "testhost", {T1: LEGACY}, reclaim=True)
    assert d.note == f"comm: '@{T1}' is already held by an unknown project — joining as '@{T2}' instead"


def test_6_8_message_tier3() -> None:
    d = handles.derive(ROOT1, "testhost", {T1: OTHER, T2: {"root": "/r2"}}, reclaim=True)
    assert d.note == (
        f"comm: '@{T1}' (held by /other/instructor-materials) and '@{T2}' (held by /r2) are both taken"
        f" — joining as '@{T3}' instead"
    )


def test_6_8_tier1_has_no_note() -> None:
    assert handles.derive(ROOT1, "testhost", {}, reclaim=True).note is None


def test_6_8_all_taken_exact_text() -> None:
    agents = {T1: OTHER, T2: {"root": "/r2"}, T3: LEGACY}
    with pytest.raises(HandleError) as ei:
        handles.derive(ROOT1, "testhost", agents, reclaim=True)
    assert ei.value.message == (
        "comm: every derived handle for this project is already taken — "
        f"'@{T1}' (held by /other/instructor-materials), '@{T2}' (held by /r2), "
        f"and '@{T3}' (held by an unknown project). Pass --name to pick one explicitly."
    )
    assert ei.value.exit_status == 1


def test_6_8_fresh_mode_all_own_rows_taken() -> None:
    agents = {t: {"root": ROOT1} for t in (T1, T2, T3)}
    with pytest.raises(HandleError):
        handles.derive(ROOT1, "testhost", agents, reclaim=False)


def test_6_8_worktree_named_from_folder() -> None:
    d = handles.derive("/home/u/repo-wt-ab12", "box", {}, reclaim=True)
    assert d.handle == "repo-wt-ab12-box"


def test_6_8_raw_host_case_kept() -> None:
    assert handles.candidates("/a/proj", "MyBox")[0] == "proj-MyBox"


@pytest.mark.parametrize(
    ("label", "want"),
    [
        ("MyPackage.jl", "mypackage_jl"),
        ("Foo Bar", "foo-bar"),
        ("", "default"),
        ("!!!", "default"),
        ("a  --  b", "a----b"),
        ("a   b", "a-b"),
        ("trail  ", "trail"),
        ("Ünï", "-n"),  # only a trailing "-" is trimmed
        ("  lead", "-lead"),
        ("x_y-z9", "x_y-z9"),
    ],
)
def test_6_8_slug(label: str, want: str) -> None:
    assert handles.slug(label) == want


names = st.text(st.characters(codec="utf-8"), max_size=80)


@given(root=names, host=names)
def test_6_8_derived_handles_always_valid(root: str, host: str) -> None:
    for t in handles.candidates("/" + root, host):
        assert handles.is_valid(t), t


@given(s=names, limit=st.integers(1, 30))
def test_6_8_sanitize_properties(s: str, limit: int) -> None:
    r = handles.sanitize(s, limit)
    assert 1 <= len(r) <= limit
    assert "--" not in r and ".." not in r
    assert not r.startswith("-") and not r.endswith("-")
