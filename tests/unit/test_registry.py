"""Behaviour 6.2 (read, parse, write, liveness) and 6.3 (skeleton creation) for sotd.formats.registry."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd import _clock, fsprim
from sotd.errors import HandleError, RegistryUnreadable, RegistryWriteFailed
from sotd.formats import registry
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit

SKELETON = b'{"protocol_version": 1, "agents": {}}\n'  # behaviour 6.3, byte for byte (38 bytes)


@pytest.fixture
def lay(tmp_path: object) -> Layout:
    return Layout(str(tmp_path))


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    got: list[float] = []
    monkeypatch.setattr(registry, "_sleep", got.append)
    return got


def write(lay: Layout, data: bytes) -> None:
    with open(lay.registry, "wb") as f:
        f.write(data)


def snapshot(lay: Layout) -> tuple[bytes, int]:
    with open(lay.registry, "rb") as f:
        return f.read(), os.stat(lay.registry).st_ino


def leftovers(lay: Layout) -> list[str]:
    return sorted(n for n in os.listdir(lay.home) if n.startswith("registry.json") and n != "registry.json")


# ------------------------------------------------------------------------------------------ read_bytes


def test_6_2_first_enoent_is_absent(lay: Layout, sleeps: list[float]) -> None:
    assert registry.read_bytes(lay) is None
    assert registry.read(lay) is None
    assert sleeps == []


def test_6_2_nonempty_bytes_never_retried(
    lay: Layout, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(registry, "_listdir", calls.append)
    write(lay, b"not json at all")
    assert registry.read_bytes(lay) == b"not json at all"
    assert calls == [] and sleeps == []
    with pytest.raises(RegistryUnreadable):
        registry.read(lay)


def test_6_2_zero_bytes_four_tries_then_unreadable(
    lay: Layout, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(registry, "_listdir", calls.append)
    write(lay, b"")
    with pytest.raises(RegistryUnreadable) as ei:
        registry.read_bytes(lay)
    assert ei.value.message == "no good read in 4 tries; the last: zero bytes"
    assert sleeps == [0.1, 0.1]  # first retry at once, then two after 100 ms
    assert calls == [lay.home] * 3  # the folder is opened before each retry


def test_6_2_zero_bytes_then_good_read(
    lay: Layout, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(lay, b"")

    def fill(path: str) -> list[str]:
        write(lay, SKELETON)
        return []

    monkeypatch.setattr(registry, "_listdir", fill)
    assert registry.read_bytes(lay) == SKELETON
    assert sleeps == []


def test_6_2_vanishing_during_retries_is_unreadable_not_absent(
    lay: Layout, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(lay, b"")

    def vanish(path: str) -> list[str]:
        if os.path.exists(lay.registry):
            os.unlink(lay.registry)
        return []

    monkeypatch.setattr(registry, "_listdir", vanish)
    with pytest.raises(RegistryUnreadable) as ei:
        registry.read_bytes(lay)
    assert "4 tries" in ei.value.message


def test_6_2_open_error_retried_then_unreadable(lay: Layout, sleeps: list[float]) -> None:
    os.mkdir(lay.registry)  # open succeeds, read says EISDIR
    with pytest.raises(RegistryUnreadable) as ei:
        registry.read(lay)
    assert ei.value.message.startswith("no good read in 4 tries; the last: ")
    assert sleeps == [0.1, 0.1]


def test_6_2_read_error_then_good(lay: Layout, sleeps: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    write(lay, SKELETON)
    real = registry._read_once
    n = {"i": 0}

    def flaky(path: str) -> bytes:
        n["i"] += 1
        if n["i"] == 1:
            raise OSError(errno.ESTALE, "Stale file handle")
        return real(path)

    monkeypatch.setattr(registry, "_read_once", flaky)
    assert registry.read(lay) == {"protocol_version": 1, "agents": {}}


def test_6_2_first_estale_not_absent(
    lay: Layout, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    def stale(path: str) -> bytes:
        raise OSError(errno.ESTALE, "Stale file handle")

    monkeypatch.setattr(registry, "_read_once", stale)
    with pytest.raises(RegistryUnreadable) as ei:
        registry.read_bytes(lay)
    assert ei.value.message == "no good read in 4 tries; the last: Stale file handle"


# ------------------------------------------------------------------------------------------ parse


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   \n",
        b'{"agents": {}',  # truncated
        b'{"agents": 5}',
        b"null",
        b"[]",
        b'{"protocol_version": 1}',
        b'{"agents": {}}{"agents": {}}',  # two documents
        b'{"agents": {}}\n{"agents": []}',
        b'{"agents": []}\n{"agents": {}}',  # two documents, the good one second
        b'{"agents": {"a": NaN}}',
        b'{"agents": {"a": Infinity}}',
        b'\xff{"agents": {}}',
        b'\xef\xbb\xbf{"agents": {}}',  # a BOM is not JSON
        b"[" * 100000,
    ],
)
def test_6_2_parse_unreadable(data: bytes) -> None:
    with pytest.raises(RegistryUnreadable):
        registry.parse(data)


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (SKELETON, {"protocol_version": 1, "agents": {}}),
        (b'{"agents":{"a":{"host":"h"}}}', {"agents": {"a": {"host": "h"}}}),
        (b'  {"agents": {}}  \n\n', {"agents": {}}),
        ('{"agents": {"é": {}}}'.encode(), {"agents": {"é": {}}}),
    ],
)
def test_6_2_parse_one_document_with_agents_object(data: bytes, want: dict[str, object]) -> None:
    assert registry.parse(data) == want


# ------------------------------------------------------------------------------------------ encode


def test_d12_encode_pretty_two_space_trailing_newline() -> None:
    doc = {"protocol_version": 1, "agents": {"a-box": {"expertise": ["x", "y"], "root": "/r", "n": []}}}
    assert registry.encode(doc) == (
        b'{\n  "protocol_version": 1,\n  "agents": {\n    "a-box": {\n      "expertise": [\n        "x",\n'
        b'        "y"\n      ],\n      "root": "/r",\n      "n": []\n    }\n  }\n}\n'
    )


def test_d12_encode_utf8_unescaped_like_jq() -> None:
    data = registry.encode({"agents": {"a": {"summary": "café ✓"}}})
    assert "café ✓".encode() in data
    assert b"\\u" not in data


def test_d12_encode_lone_surrogate_falls_back_to_ascii() -> None:
    doc = registry.parse(b'{"agents": {"a": {"s": "\\ud800"}}}')
    data = registry.encode(doc)
    assert registry.parse(data) == doc


def test_6_3_skeleton_bytes() -> None:
    assert registry.skeleton() == SKELETON
    assert len(SKELETON) == 38  # the reference's size (issue 28 item 7)
    assert registry.parse(SKELETON) == {"protocol_version": 1, "agents": {}}


def test_6_3_the_first_write_after_the_skeleton_is_pretty(lay: Layout) -> None:
    """The skeleton is the one line 6.3 gives; the next writer writes D12's pretty form over it."""
    assert registry.ensure(lay) is True
    assert registry.read_bytes(lay) == SKELETON

    def add(doc: dict[str, object]) -> tuple[bool, None]:
        registry.agents_of(doc)["a"] = {"host": "box"}
        return True, None

    registry.update(lay, "box", add, bound=1.0)
    assert registry.read_bytes(lay) == (
        b'{\n  "protocol_version": 1,\n  "agents": {\n    "a": {\n      "host": "box"\n    }\n  }\n}\n'
    )


json_leaf = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
docs = st.fixed_dictionaries(
    {"agents": st.dictionaries(st.text(max_size=10), json_value, max_size=5)},
    optional={"protocol_version": st.integers()},
)


@given(docs)
def test_6_2_parse_encode_roundtrip(doc: dict[str, object]) -> None:
    assert registry.parse(registry.encode(doc)) == doc


@given(st.binary(max_size=200) | docs.map(registry.encode).map(lambda b: b[: len(b) // 2]))
def test_6_2_any_bytes_dict_or_unreadable(data: bytes) -> None:
    try:
        got = registry.parse(data)
    except RegistryUnreadable:
        return
    assert isinstance(got, dict) and isinstance(got["agents"], dict)


# ------------------------------------------------------------------------------------------ liveness

NOW = 1_780_000_000.0


@pytest.mark.parametrize(
    ("last_seen", "live"),
    [
        (_clock.stamp(NOW - 599), True),
        (_clock.stamp(NOW - 600), False),
        (_clock.stamp(NOW - 601), False),
        (_clock.stamp(NOW), True),
        (_clock.stamp(NOW + 3600), True),  # a future stamp is fresh
        ("2099-01-01 00:00:00Z", False),
        ("2099-01-01T00:00:00+00:00", False),
        ("2099-01-01T00:00:00z", False),
        ("2099-01-01T00:00:00Z\n", False),
        ("1970-01-01T00:00:00Z", False),
        ("", False),
        (None, False),
        (12345, False),
    ],
)
def test_6_2_liveness(last_seen: object, live: bool) -> None:
    assert registry.AgentRow("a", {"last_seen": last_seen}).is_live(NOW) is live


@pytest.mark.parametrize("entry", [None, "x", [], {}, {"last_seen": None}])
def test_6_2_liveness_bad_shapes(entry: object) -> None:
    assert registry.AgentRow("a", entry).is_live(NOW) is False


_FRESH = _clock.stamp(NOW - 5)
_OLD = _clock.stamp(NOW - 700)


@pytest.mark.parametrize(
    ("entry", "want"),
    [
        # behaviour 2.3 step 5 (no object, no host) comes before step 6 (not fresh)
        (None, registry.UNLISTED),
        ("x", registry.UNLISTED),
        ({}, registry.UNLISTED),
        ({"last_seen": _FRESH}, registry.UNLISTED),
        ({"host": "", "last_seen": _FRESH}, registry.UNLISTED),
        ({"host": None, "last_seen": _FRESH}, registry.UNLISTED),
        ({"host": "", "last_seen": _OLD}, registry.UNLISTED),
        ({"host": "boxa"}, registry.NOT_LIVE),
        ({"host": "boxa", "last_seen": _OLD}, registry.NOT_LIVE),
        ({"host": "boxa", "last_seen": "yesterday"}, registry.NOT_LIVE),
        ({"host": "boxa", "last_seen": _FRESH}, registry.LIVE),
        ({"host": 7, "last_seen": _FRESH}, registry.LIVE),  # any truthy host is a host, as the daemon read it
    ],
)
def test_2_3_row_verdict_order(entry: object, want: str) -> None:
    row = registry.AgentRow("a", entry)
    assert row.verdict(NOW) == want
    assert row.listed is isinstance(entry, dict)


def test_agent_row_of_reads_the_named_entry() -> None:
    agents: dict[str, object] = {"a": {"host": "boxa", "last_seen": _FRESH}}
    assert registry.AgentRow.of(agents, "a").verdict(NOW) == registry.LIVE
    missing = registry.AgentRow.of(agents, "b")
    assert (missing.name, missing.entry, missing.verdict(NOW)) == ("b", None, registry.UNLISTED)


# ------------------------------------------------------------------------------------------ ensure (6.3)


def test_6_3_ensure_creates_skeleton(lay: Layout) -> None:
    assert registry.ensure(lay) is True
    assert snapshot(lay)[0] == SKELETON
    assert stat.S_IMODE(os.stat(lay.registry).st_mode) == 0o600
    assert leftovers(lay) == []
    assert registry.ensure(lay) is False


@pytest.mark.parametrize("content", [b"", b"garbage", b'{"agents": {"a": {}}}\n'])
def test_6_3_existing_file_never_touched(lay: Layout, content: bytes) -> None:
    write(lay, content)
    before = snapshot(lay)
    assert registry.ensure(lay) is False
    assert snapshot(lay) == before
    assert leftovers(lay) == []


def test_6_3_directory_gets_nothing_linked_in(lay: Layout) -> None:
    os.mkdir(lay.registry)
    assert registry.ensure(lay) is False
    assert os.listdir(lay.registry) == []
    assert leftovers(lay) == []


def test_6_3_dangling_symlink_untouched(lay: Layout) -> None:
    os.symlink(os.path.join(lay.home, "nowhere"), lay.registry)
    assert registry.ensure(lay) is False
    assert not os.path.exists(os.path.join(lay.home, "nowhere"))


def test_6_3_failing_fsync_publishes_nothing(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    def bad(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(registry, "_fsync", bad)
    with pytest.raises(RegistryWriteFailed) as ei:
        registry.ensure(lay)
    assert "Input/output error" in ei.value.message
    assert os.listdir(lay.home) == []


def test_6_3_link_loses_race_keeps_winner(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.link

    def racer(src: str, dst: str) -> None:
        write(lay, b'{"agents": {"w": {}}}\n')
        real(src, dst)

    monkeypatch.setattr(registry, "_link", racer)
    assert registry.ensure(lay) is False
    assert snapshot(lay)[0] == b'{"agents": {"w": {}}}\n'
    assert leftovers(lay) == []


# ------------------------------------------------------------------------------------------ write (no lock)


def add(name: str, entry: dict[str, object] | None = None) -> object:
    def change(doc: dict[str, object]) -> tuple[bool, str]:
        registry.put(doc, name, entry if entry is not None else {"root": "/r"})
        return True, name

    return change


def test_6_2_update_locked_writes_pretty(lay: Layout) -> None:
    registry.ensure(lay)
    doc, res = registry.update_locked(lay, add("a"))  # type: ignore[arg-type]
    assert res == "a"
    data = snapshot(lay)[0]
    assert data == registry.encode({"protocol_version": 1, "agents": {"a": {"root": "/r"}}})
    assert registry.parse(data) == doc
    assert stat.S_IMODE(os.stat(lay.registry).st_mode) == 0o600
    assert leftovers(lay) == []


def test_6_2_update_locked_no_write_keeps_inode(lay: Layout) -> None:
    registry.ensure(lay)
    before = snapshot(lay)
    _doc, res = registry.update_locked(lay, lambda d: (False, 7))
    assert res == 7 and snapshot(lay) == before


def test_6_2_update_lists_folder_before_fresh_read(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.ensure(lay)
    seen: list[str] = []
    monkeypatch.setattr(registry, "_listdir", lambda p: seen.append("listdir") or [])
    real = registry._read_once
    monkeypatch.setattr(registry, "_read_once", lambda p: (seen.append("read"), real(p))[1])
    registry.update_locked(lay, lambda d: (False, None))
    assert seen[:2] == ["listdir", "read"]


def test_6_3_update_on_absent_creates_skeleton_first(lay: Layout) -> None:
    registry.update_locked(lay, add("a"))  # type: ignore[arg-type]
    assert registry.read(lay) == {"protocol_version": 1, "agents": {"a": {"root": "/r"}}}


def test_6_2_update_unreadable_writes_nothing(lay: Layout, sleeps: list[float]) -> None:
    write(lay, b'{"agents": 5}')
    before = snapshot(lay)
    with pytest.raises(RegistryUnreadable) as ei:
        registry.update_locked(lay, add("a"))  # type: ignore[arg-type]
    assert ei.value.message == "FAILED: the registry could not be read or updated, so nothing was written"
    assert snapshot(lay) == before


def test_6_2_stale_tmp_from_dead_writer_is_coped_with(lay: Layout) -> None:
    registry.ensure(lay)
    with open(lay.registry_tmp, "wb") as f:
        f.write(b"half a doc")
    registry.update_locked(lay, add("a"))  # type: ignore[arg-type]
    assert leftovers(lay) == []
    assert "a" in registry.agents_of(registry.read(lay) or {})


def _fail(err: int, text: str) -> object:
    def f(*a: object, **k: object) -> None:
        raise OSError(err, text)

    return f


@pytest.mark.parametrize(
    ("target", "want"),
    [
        (
            "_fsync",
            "FAILED: the registry update could not be flushed (Input/output error), so nothing was written",
        ),
        (
            "_rename",
            "FAILED: the registry update could not be renamed into place (Input/output error), so nothing was written",
        ),
        ("write_all", "FAILED: the registry could not be read or updated, so nothing was written"),
    ],
)
def test_6_2_failed_write_exact_text_bytes_and_inode_kept(
    lay: Layout, monkeypatch: pytest.MonkeyPatch, target: str, want: str
) -> None:
    registry.ensure(lay)
    registry.update_locked(lay, add("old"))  # type: ignore[arg-type]
    before = snapshot(lay)
    monkeypatch.setattr(fsprim, target, _fail(errno.EIO, "Input/output error"))
    with pytest.raises(RegistryWriteFailed) as ei:
        registry.update_locked(lay, add("new"))  # type: ignore[arg-type]
    assert ei.value.message == want
    assert snapshot(lay) == before
    assert leftovers(lay) == []


def test_6_2_check_refuses_bad_readback(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.ensure(lay)
    before = snapshot(lay)
    real = fsprim.write_all
    monkeypatch.setattr(fsprim, "write_all", lambda fd, data: real(fd, data[:-5]))
    with pytest.raises(RegistryWriteFailed) as ei:
        registry.update_locked(lay, add("x"))  # type: ignore[arg-type]
    assert ei.value.message == registry.READ_OR_UPDATE_FAILED
    assert snapshot(lay) == before and leftovers(lay) == []


# ------------------------------------------------------------------------------------------ entries


def test_6_2_put_replaces_whole_and_refuses_blank() -> None:
    doc: dict[str, object] = {"agents": {"a": {"state": "working", "root": "/x"}}}
    registry.put(doc, "a", {"root": "/y"})
    assert doc == {"agents": {"a": {"root": "/y"}}}
    for bad in ("", "   "):
        with pytest.raises(HandleError) as ei:
            registry.put(doc, bad, {})
        assert ei.value.message == "registry_put: refusing to write an empty/blank handle"


def test_6_2_delete() -> None:
    doc: dict[str, object] = {"agents": {"a": {}}}
    assert registry.delete(doc, "a") is True
    assert registry.delete(doc, "a") is False
    assert doc == {"agents": {}}


def test_6_2_touch_sets_last_seen_only_if_row_exists() -> None:
    doc: dict[str, object] = {"agents": {"a": {"root": "/r"}}}
    assert registry.set_last_seen(doc, "a", "2026-01-01T00:00:00Z") is True
    assert registry.set_last_seen(doc, "b", "2026-01-01T00:00:00Z") is False
    assert doc == {"agents": {"a": {"root": "/r", "last_seen": "2026-01-01T00:00:00Z"}}}


SPAWNING = {"status": "spawning", "root": "/r", "nonce": "n1"}


@pytest.mark.parametrize(
    ("entry", "want"),
    [
        (SPAWNING, 0),
        ({**SPAWNING, "status": "idle"}, 2),
        ({**SPAWNING, "root": "/other"}, 2),
        ({**SPAWNING, "nonce": "n2"}, 2),
        ({"status": "spawning", "root": "/r"}, 2),
        (None, 2),
    ],
)
def test_6_2_del_if_provisional(entry: dict[str, object] | None, want: int) -> None:
    agents: dict[str, object] = {} if entry is None else {"h": dict(entry)}
    doc: dict[str, object] = {"agents": agents}
    assert registry.del_if_provisional(doc, "h", "/r", "n1") == want
    assert ("h" in agents) is (want != 0 and entry is not None)


def test_6_2_encode_matches_json_module() -> None:
    doc = {"agents": {"a": {"x": 1.5, "y": True, "z": None}}}
    assert json.loads(registry.encode(doc)) == doc


# ------------------------------------------------------------------------------------------ under the lock


def test_6_2_update_takes_and_releases_the_lock(lay: Layout) -> None:
    seen: list[bool] = []

    def change(doc: dict[str, object]) -> tuple[bool, int]:
        seen.append(os.path.exists(lay.reglock))
        registry.put(doc, "a", {"root": "/r"})
        return True, 1

    doc, res = registry.update(lay, "testhost", change, bound=1)
    assert res == 1 and seen == [True]
    assert not os.path.exists(lay.reglock)
    assert registry.read(lay) == doc


def test_6_2_touch_only_existing_row(lay: Layout) -> None:
    registry.ensure(lay)
    registry.update_locked(lay, add("a"))  # type: ignore[arg-type]
    before = snapshot(lay)
    assert registry.touch(lay, "testhost", "nobody") is False
    assert snapshot(lay) == before  # nothing written for a missing row
    assert registry.touch(lay, "testhost", "a") is True
    entry = registry.agents_of(registry.read(lay) or {})["a"]
    assert isinstance(entry, dict) and _clock.is_stamp(entry["last_seen"])


def test_6_2_update_failure_releases_the_lock(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.ensure(lay)
    monkeypatch.setattr(fsprim, "_fsync", _fail(errno.EIO, "Input/output error"))
    with pytest.raises(RegistryWriteFailed):
        registry.update(lay, "testhost", add("a"), bound=1)  # type: ignore[arg-type]
    assert not os.path.exists(lay.reglock)


# ------------------------------------------------------------------------------- the touch's bound (issue 17)

T = 1_800_000_000.0  # a fixed "now"


@pytest.mark.parametrize(
    ("last_seen", "due"),
    [
        (_clock.stamp(T), False),  # stamped this second
        (_clock.stamp(T - 1), False),
        (_clock.stamp(T - registry.TOUCH_EVERY_S + 1), False),  # the last second inside the bound
        (_clock.stamp(T - registry.TOUCH_EVERY_S), True),  # at the bound: rewritten
        (_clock.stamp(T - 300), True),
        (_clock.stamp(T - 601), True),  # no longer live
        (_clock.stamp(T + 1), True),  # a stamp from the future is put right, as every touch did
        ("2026-01-01 00:00:00Z", True),  # not a stamp's shape
        ("", True),
        (None, True),
        (12, True),
    ],
)
def test_touch_due(last_seen: object, due: bool) -> None:
    assert registry.touch_due(last_seen, T) is due


def test_the_touch_bound_keeps_a_skipped_row_live() -> None:
    """The rule's reason: a row a touch leaves alone is live for at least LIVE - TOUCH_EVERY_S seconds more."""
    assert registry.TOUCH_EVERY_S * 5 <= _clock.LIVE_SECS  # well inside the window
    newest_skipped = _clock.stamp(T - registry.TOUCH_EVERY_S + 1)
    assert not registry.touch_due(newest_skipped, T)
    assert _clock.is_fresh(newest_skipped, T + _clock.LIVE_SECS - registry.TOUCH_EVERY_S)


def test_touch_at_the_bound_writes_and_inside_it_does_not(lay: Layout) -> None:
    registry.ensure(lay)
    _clock.set_clock(lambda: T)
    try:
        inside = _clock.stamp(T - registry.TOUCH_EVERY_S + 1)
        registry.update_locked(lay, add("a", {"root": "/r", "last_seen": inside}))  # type: ignore[arg-type]
        before = snapshot(lay)
        assert registry.touch(lay, "testhost", "a") is True
        assert snapshot(lay) == before  # fresh enough: no lock, no write
        assert not os.path.exists(lay.reglock)
        at = _clock.stamp(T - registry.TOUCH_EVERY_S)
        registry.update_locked(lay, add("a", {"root": "/r", "last_seen": at}))  # type: ignore[arg-type]
        assert registry.touch(lay, "testhost", "a") is True
        assert registry.agents_of(registry.read(lay) or {})["a"] == {
            "root": "/r",
            "last_seen": _clock.stamp(T),
        }
        before = snapshot(lay)
        assert registry.touch(lay, "testhost", "nobody") is False
        assert snapshot(lay) == before
    finally:
        _clock.set_clock(None)


def test_touch_decides_again_on_the_locked_read(lay: Layout) -> None:
    """The caller's registry said "due", but another process stamped the row since: nothing is written."""
    registry.ensure(lay)
    fresh = _clock.stamp()
    registry.update_locked(lay, add("a", {"root": "/r", "last_seen": fresh}))  # type: ignore[arg-type]
    before = snapshot(lay)
    stale = {"a": {"root": "/r", "last_seen": _clock.stamp(_clock.now() - 300)}}
    assert registry.touch(lay, "testhost", "a", agents=stale) is True  # type: ignore[arg-type]
    assert snapshot(lay) == before
