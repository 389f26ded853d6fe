"""The rows' pure rules (2.5, 2.6, 4.1) and the wake's inotify parsing, as tables; the heartbeat's
stamping pass on a real registry with the lock held by someone else (D7: one try, retried next tick)."""

from __future__ import annotations

import os
import struct
from typing import Any

import pytest

from sotd import _clock
from sotd.daemon import heartbeat, rows, wake
from sotd.daemon.decide import RowView
from sotd.formats import registry
from sotd.formats.layout import Layout, ensure_home

pytestmark = pytest.mark.unit


def row(rid: str, handle: str = "", joined: str = "", **kw: Any) -> rows.RowRecord:
    return rows.RowRecord(
        id=rid, label=rid, slug=rid, project_root=f"/p/{rid}", handle=handle, joined_at=joined, **kw
    )


def test_dedupe_keeps_the_registry_last_joiner_else_the_latest_join() -> None:
    rs = [row("a", "h", "2026-01-01T00:00:02Z"), row("b", "h", "2026-01-01T00:00:01Z"), row("c", "k")]
    assert rows.dedupe_handles(rs, {"h": "b"}) == [("a", "h")]
    assert [r.handle for r in rs] == ["", "h", "k"]
    rs = [row("a", "h", "2026-01-01T00:00:02Z"), row("b", "h", "2026-01-01T00:00:01Z")]
    assert rows.dedupe_handles(rs, {}) == [("b", "h")]


def _doc(**agents: dict[str, Any]) -> dict[str, object]:
    return {"protocol_version": 1, "agents": dict(agents)}


def test_prune_removes_this_hosts_entries_of_the_row_only() -> None:
    r = row("ws-1", agent_name="alpha")
    doc = _doc(
        alpha={"host": "BoxA", "workspace_id": ""},
        other={"host": "boxa", "workspace_id": "ws-1"},
        keep1={"host": "boxb", "workspace_id": "ws-1"},
        keep2={"workspace_id": "ws-1"},
        keep3={"host": "boxa", "workspace_id": "ws-2"},
    )
    write, gone = rows.prune_change(r, "boxa")(doc)
    assert write and sorted(gone) == ["alpha", "other"]
    assert sorted(registry.agents_of(doc)) == ["keep1", "keep2", "keep3"]
    doc = _doc(alpha={"host": "boxa", "workspace_id": "ws-9"})
    assert rows.prune_change(r, "boxa")(doc) == (False, [])


@pytest.mark.parametrize(
    ("entry", "want_write", "want"),
    [
        (
            {"host": "h", "state": "done", "done": "x", "status_at": "t"},
            True,
            {"host": "h", "state": "idle", "status_at": "t"},
        ),
        ({"host": "h", "state": "working", "done": "x"}, True, {"host": "h", "state": "working"}),
        ({"host": "h", "state": "working"}, False, {"host": "h", "state": "working"}),
        (
            {"host": "other", "state": "done", "done": "x"},
            False,
            {"host": "other", "state": "done", "done": "x"},
        ),
    ],
)
def test_activate(entry: dict[str, Any], want_write: bool, want: dict[str, Any]) -> None:
    doc = _doc(a=dict(entry))
    write, _ = rows.activate_change("a", "h")(doc)
    assert write == want_write
    assert registry.agents_of(doc)["a"] == want


def test_agent_argv() -> None:
    assert rows.agent_argv("claude", None, {}) == ["claude"]
    assert rows.agent_argv("codex", ["x", "y"], {}) == ["x", "y"]
    assert rows.agent_argv("claude", [], {"SOTD_AGENT_ARGV_CLAUDE": '["fake", "-v"]'}) == ["fake", "-v"]
    assert rows.agent_argv("claude", None, {"SOTD_AGENT_ARGV_CLAUDE": "not json"}) == ["claude"]
    assert rows.agent_argv("none", None, {}) is None


def test_row_record_round_trip_and_rejects() -> None:
    r = row("ws-1", "h", argv=["a"], phase=rows.READY)
    from dataclasses import asdict

    assert rows.RowRecord.from_json(asdict(r)) == r
    assert rows.RowRecord.from_json({"id": "x"}) is None
    assert rows.RowRecord.from_json([1]) is None
    assert r.wire()["phase"] == "ready"


def test_inotify_event_parsing() -> None:
    def ev(mask: int, name: bytes) -> bytes:
        padded = name + b"\0" * (16 - len(name) % 16) if name else b""
        return struct.pack("iIII", 1, mask, 0, len(padded)) + padded

    data = (
        ev(wake.IN_MODIFY, b"alpha.jsonl")
        + ev(wake.IN_CLOSE_WRITE, b"alpha.lock")
        + ev(wake.IN_MOVED_TO, b"")
    )
    assert wake.parse_events(data) == [(2, "alpha.jsonl"), (8, "alpha.lock"), (128, "")]
    assert [wake.handle_of(n) for _m, n in wake.parse_events(data)] == ["alpha", None, None]


def test_inotify_sees_an_inbox_append(tmp_path) -> None:
    w = wake.Inotify.open(str(tmp_path))
    if w is None:
        pytest.skip("no inotify here")
    try:
        with open(tmp_path / "bob.jsonl", "ab") as f:
            f.write(b"{}\n")
        assert "bob" in {wake.handle_of(n) for _m, n in w.read()}
    finally:
        w.close()


@pytest.mark.parametrize(
    ("prev", "cur", "last", "now", "period", "want"),
    [
        (frozenset(), frozenset(), None, 100.0, 60.0, False),
        (frozenset(), frozenset({"a"}), None, 100.0, 60.0, True),
        (frozenset({"a"}), frozenset({"a"}), 41.0, 100.0, 60.0, False),  # 59 s: not due
        (frozenset({"a"}), frozenset({"a"}), 40.0, 100.0, 60.0, True),
        (frozenset({"a"}), frozenset({"a"}), 98.0, 100.0, 2.0, True),  # the shortened period (tests)
    ],
)
def test_heartbeat_due(
    prev: frozenset[str], cur: frozenset[str], last: float | None, now: float, period: float, want: bool
) -> None:
    assert heartbeat.is_due(prev, cur, last, now, period) is want


def test_heartbeat_stamps_existing_entries_and_retries_a_held_lock(tmp_path) -> None:
    lay = Layout(str(tmp_path / "comm"))
    ensure_home(lay)
    old = "2000-01-01T00:00:00Z"
    with open(lay.registry, "wb") as f:
        f.write(registry.encode(_doc(a={"host": "h", "last_seen": old}, b={"host": "h", "last_seen": old})))
    views = [
        RowView("ws-1", "Ready", declared="a"),
        RowView("ws-2", "Starting", agent_name="zz"),
        RowView("ws-3", "ended_no_respawn", declared="b"),
    ]
    hb = heartbeat.Heartbeat(lay, "h")
    # someone holds the registry lock: one try, nothing written, due again at the next tick
    with open(lay.reglock, "w") as f:
        f.write(f"h:-:-:-:{os.getpid()}:-\n")
    assert hb.tick(views) is None
    assert registry.agents_of(registry.read(lay) or {})["a"]["last_seen"] == old
    os.unlink(lay.reglock)
    assert hb.tick(views) == ["a"]  # zz has no entry (never created); b's row is not running
    agents = registry.agents_of(registry.read(lay) or {})
    assert (
        _clock.is_fresh(agents["a"]["last_seen"]) and agents["b"]["last_seen"] == old and "zz" not in agents
    )
    assert hb.tick(views) is None  # not due again before the minute
