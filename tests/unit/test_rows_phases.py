"""Behaviour 4.1 / D16: which final phase a row whose window is gone takes (``rows.gone_phase``, ``apply``)."""

from __future__ import annotations

import os

import pytest

from sotd.daemon import rows as rows_mod
from sotd.daemon.rows import ENDED, READY, STARTING, TERMINAL, DaemonRows, RowRecord, gone_phase
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("before", "after"),
    [(STARTING, TERMINAL), (READY, ENDED)],
)
def test_gone_phase(before: str, after: str) -> None:
    assert gone_phase(before) == after


def make(tmp_path: object) -> DaemonRows:
    d = os.fspath(tmp_path)  # type: ignore[arg-type]
    return DaemonRows(
        state=os.path.join(d, "state"),
        layout=Layout(os.path.join(d, "comm")),
        host="h",
        socket_path=os.path.join(d, "s.sock"),
        environ={},
    )


def test_apply_decides_on_the_phase_at_apply_time(tmp_path: object) -> None:
    """The plan is read in a thread; a join that made the row Ready since then makes its end ``ended``."""
    rows = make(tmp_path)
    changed: list[str] = []
    rows.on_change = changed.append
    rows.rows["ws-a"] = RowRecord(id="ws-a", label="a", slug="a", project_root="/a", phase=READY)
    rows.rows["ws-b"] = RowRecord(id="ws-b", label="b", slug="b", project_root="/b", phase=STARTING)
    rows.rows["ws-c"] = RowRecord(id="ws-c", label="c", slug="c", project_root="/c", phase=TERMINAL)
    rows.apply([("ws-a", TERMINAL), ("ws-b", TERMINAL), ("ws-c", ENDED), ("ws-gone", ENDED)])
    assert [rows.rows[i].phase for i in ("ws-a", "ws-b", "ws-c")] == [ENDED, TERMINAL, TERMINAL]
    assert changed == ["ws-a", "ws-b"]
    # persisted, shown lower-case on the wire
    rec = os.path.join(rows.ws_dir("ws-b"), rows_mod.RECORD)
    with open(rec, encoding="utf-8") as f:
        assert '"phase": "terminal"' in f.read()
    assert rows.rows["ws-a"].wire()["phase"] == "ended_no_respawn"


@pytest.mark.skipif(__import__("shutil").which("tmux") is None, reason="tmux is not installed")
def test_a_row_whose_window_is_being_made_is_never_judged_gone(tmp_path: object) -> None:
    """``create`` records the row before its window exists (a second create for the root is refused
    meanwhile); a tick in that moment sees no pane. It must not end the row (it did: the row read as gone
    and became ``terminal`` while its agent started)."""
    rows = make(tmp_path)
    rows.rows["ws-new"] = RowRecord(
        id="ws-new", label="n", slug="n", project_root="/n", phase=STARTING
    )  # pane ""
    rows.rows["ws-old"] = RowRecord(
        id="ws-old", label="o", slug="o", project_root="/o", phase=READY, pane="%9"
    )
    # no tmux server runs at the rows' socket: every window with a pane is gone
    assert rows.refresh_plan() == [("ws-old", ENDED)]


def test_why_a_row_is_not_ready_is_kept_only_while_it_is_starting(tmp_path: object) -> None:
    """``workspace.list``'s ``waiting_on``: shown for a Starting row, dropped once the row is no longer
    Starting (or no longer there) at the next tick."""
    rows = make(tmp_path)
    rows.rows["ws-s"] = RowRecord(
        id="ws-s", label="s", slug="s", project_root="/s", phase=STARTING, pane="%1"
    )
    rows.rows["ws-r"] = RowRecord(id="ws-r", label="r", slug="r", project_root="/r", phase=READY, pane="%2")
    rows.waiting_on.update({"ws-s": "no prompt glyph", "ws-r": "no cursor", "ws-gone": "no cursor"})
    listed = {w["workspace_id"]: w for w in rows.listing()}
    assert listed["ws-s"]["waiting_on"] == "no prompt glyph"
    assert "waiting_on" not in listed["ws-r"]
    rows.refresh_plan()  # no tmux server: both windows are gone, and only the Starting row's reason stays
    assert rows.waiting_on == {"ws-s": "no prompt glyph"}


def test_a_join_while_the_window_was_starting_keeps_its_handle_and_takes_the_pane(tmp_path: object) -> None:
    """The agent in a new window may join before ``new_window`` has returned: ``declare`` then replaced the
    record (handle, Ready). ``_started`` gives the pane to that record and saves it, so a restart finds
    both (the suite saw a restarted daemon bring the row back with its pane and no handle)."""
    rows = make(tmp_path)
    began = RowRecord(id="ws-j", label="j", slug="j", project_root="/j", phase=STARTING)
    rows.rows["ws-j"] = began
    rows.save(began)
    assert rows.declare("ws-j", "alpha") == {"ok": True}
    got = rows._started(began, "%7")
    assert got is rows.rows["ws-j"] and (got.pane, got.handle, got.phase) == ("%7", "alpha", READY)
    (saved,) = rows.load()
    assert (saved.pane, saved.handle, saved.phase) == ("%7", "alpha", READY)


def test_a_row_destroyed_while_its_window_was_starting_is_not_saved_again(tmp_path: object) -> None:
    rows = make(tmp_path)
    began = RowRecord(id="ws-d", label="d", slug="d", project_root="/d", phase=STARTING)
    assert rows._started(began, "%9") is None  # not in rows: destroyed meanwhile (no tmux: nothing to kill)
    assert rows.load() == []
