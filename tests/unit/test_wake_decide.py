"""The wake and heartbeat decisions (behaviour 3.1, 3.2, 2.5): one table row per rule, named after it."""

from __future__ import annotations

import json

import pytest

from sotd import handles
from sotd._clock import stamp
from sotd.daemon.decide import (
    ENTER,
    FORGET,
    HOLD,
    WAKE,
    RowView,
    Streak,
    Woken,
    after_wake,
    decide,
    directed,
    due,
    held_handles,
    refused,
    row_handle,
    scan,
    stop_held,
    streak_line,
    wake_rows,
)
from sotd.formats import cursor as cursor_format
from sotd.formats import inbox as inbox_format

pytestmark = pytest.mark.unit

T = 1_800_000_000.0

# ------------------------------------------------------------------------------------------- decide

DECIDE = [
    # name, (unread, fresh, total, memory, now), (action, new memory)
    ("no unread forgets the row", (0, 0, 5, Woken(5, T - 10), T), (FORGET, None)),
    ("no unread forgets even an owed Enter", (0, 0, 5, Woken(5, T - 10, True), T), (FORGET, None)),
    ("never woken wakes", (1, 1, 1, None, T), (WAKE, Woken(1, T))),
    ("never woken wakes even with nothing fresh (restart)", (2, 0, 7, None, T), (WAKE, Woken(7, T))),
    ("fresh mail wakes", (2, 1, 6, Woken(5, T - 10), T), (WAKE, Woken(6, T))),
    ("same batch holds", (2, 0, 5, Woken(5, T - 10), T), (HOLD, Woken(5, T - 10))),
    ("599 s since the wake holds", (1, 0, 5, Woken(5, T - 599), T), (HOLD, Woken(5, T - 599))),
    ("600 s since the wake wakes again", (1, 0, 5, Woken(5, T - 600), T), (WAKE, Woken(5, T))),
    ("Enter owed within 600 s is completed", (1, 1, 6, Woken(5, T - 30, True), T), (ENTER, Woken(5, T - 30))),
    (
        "Enter owed at 600 s is no longer owed: wake",
        (1, 0, 5, Woken(5, T - 600, True), T),
        (WAKE, Woken(5, T)),
    ),
]


@pytest.mark.parametrize(("name", "args", "want"), DECIDE, ids=[r[0] for r in DECIDE])
def test_decide(name: str, args: tuple, want: tuple) -> None:
    assert decide(*args) == want


def test_typed_without_enter_owes_the_enter_and_counts_as_the_wake() -> None:
    mem = after_wake(4, T, entered=False)
    assert mem == Woken(4, T, True)
    assert decide(1, 0, 4, mem, T + 2) == (ENTER, Woken(4, T))
    # once paid, the batch is held: never typed twice
    assert decide(1, 0, 4, Woken(4, T), T + 4)[0] == HOLD


def test_three_lines_in_one_batch_give_one_wake() -> None:
    mem: Woken | None = None
    actions = []
    for tick in range(5):  # five 2 s ticks, the three lines already filed, nobody polls
        total, unread, fresh = scan(
            LINES_TO_B, "", "b", None if mem is None else mem.line, offset=cursor_format.offset
        )
        action, new = decide(unread, fresh, total, mem, T + 2 * tick)
        actions.append(action)
        mem = new
    assert actions == [WAKE, HOLD, HOLD, HOLD, HOLD]


def test_restart_forgets_memory_so_one_more_wake() -> None:
    total, unread, fresh = scan(LINES_TO_B, "", "b", 3, offset=cursor_format.offset)
    assert decide(unread, fresh, total, Woken(3, T), T + 2)[0] == HOLD
    assert decide(unread, fresh, total, None, T + 2)[0] == WAKE


# --------------------------------------------------------------------------------------------- scan


def line(frm: object, to: object) -> bytes:
    return json.dumps({"from": frm, "to": to, "msg": "hi", "ts": "2026-01-01T00:00:00Z"}).encode()


LINES_TO_B = [line("a", "b"), line("c", "b"), line("a", "b")]
MIXED = [
    line("a", "b"),
    line("b", "b"),
    line("a", "*"),
    line("a", "c"),
    line("a", 7),
    b"not json",
    line("c", "b"),
]

SCAN = [
    ("nothing read: every directed line is unread and fresh", (MIXED, "", None), (7, 2, 2)),
    ("self-echo, broadcast, other handle, numeric to, junk do not count", (MIXED[1:6], "", None), (5, 0, 0)),
    ("cursor past line 1", (MIXED, "1", None), (7, 1, 1)),
    ("fresh counts from the total at the last wake", (MIXED, "", 6), (7, 2, 1)),
    ("fresh at exactly the recorded total", (MIXED, "", 7), (7, 2, 0)),
    ("shrunken file: recorded total read as 0", (MIXED[:3], "", 9), (3, 1, 1)),
    ("cursor covers the whole inbox", (MIXED, "7", None), (7, 0, 0)),
    ("empty inbox", ([], "", None), (0, 0, 0)),
]


@pytest.mark.parametrize(("name", "args", "want"), SCAN, ids=[r[0] for r in SCAN])
def test_scan(name: str, args: tuple, want: tuple) -> None:
    lines, cur, woken = args
    assert scan(lines, cur, "b", woken, offset=cursor_format.offset) == want


def test_scan_uses_the_offset_it_is_given() -> None:
    assert scan(MIXED, "ignored", "b", None, offset=lambda c, lines, h: 6) == (7, 1, 1)
    assert scan(MIXED, "x", "b", None, offset=lambda c, lines, h: 99) == (7, 0, 0)


def test_directed_agrees_with_the_inbox_format() -> None:
    for raw in [*MIXED, b"", b"[1]", line(None, "b"), line("b", None)]:
        obj = inbox_format.decode_line(raw)
        assert directed(raw, "b") == (obj is not None and handles.is_directed(obj, "b")), raw


def test_scan_matches_the_unread_command() -> None:
    data = b"\n".join(MIXED) + b"\n" + line("a", "b")  # torn tail: not complete, not counted
    lines = inbox_format.complete_lines(data)
    for cur in ("", "1", "3", "7"):
        shown = cursor_format.offset(cur, lines, "b", None)
        assert scan(lines, cur, "b", None, offset=cursor_format.offset)[1] == inbox_format.count_directed(
            lines[shown:], "b"
        )


# --------------------------------------------------------------------------------------------- stop_at


def entry(mark: object) -> dict:
    return {"host": "h", "stop_at": mark}


STOP = [
    ("offset 0 holds", entry(stamp(T)), True),
    ("offset -60 holds", entry(stamp(T - 60)), True),
    ("offset +1 holds", entry(stamp(T + 1)), True),
    ("offset -61 does not hold", entry(stamp(T - 61)), False),
    ("offset +2 does not hold", entry(stamp(T + 2)), False),
    ("offset +60 does not hold", entry(stamp(T + 60)), False),
    ("missing stop_at does not hold", {"host": "h"}, False),
    ("null stop_at does not hold", entry(None), False),
    ("numeric stop_at does not hold", entry(T), False),
    ("no entry (unlisted, or no registry) does not hold", None, False),
    ("an entry that is not an object does not hold", "garbage", False),
    ("a list entry does not hold", [], False),
]


@pytest.mark.parametrize(("name", "entry", "held"), STOP, ids=[r[0] for r in STOP])
def test_stop_held(name: str, entry: object, held: bool) -> None:
    assert stop_held(entry, T) is held


# ------------------------------------------------------------------------------------------- heartbeat

A = frozenset({"a"})
AB = frozenset({"a", "b"})
NONE: frozenset[str] = frozenset()

DUE = [
    ("both sets empty: nothing", (NONE, NONE, None, T), False),
    ("both sets empty long after a pass: nothing", (NONE, NONE, T - 3600, T), False),
    ("held set grew: due", (A, AB, T - 2, T), True),
    ("held set emptied: due (last pass)", (A, NONE, T - 2, T), True),
    ("first pass: due", (NONE, A, None, T), True),
    ("same set, 59 s: not due", (A, A, T - 59, T), False),
    ("same set, 60 s: due", (A, A, T - 60, T), True),
    ("same set, never passed: due", (A, A, None, T), True),
]


@pytest.mark.parametrize(("name", "args", "want"), DUE, ids=[r[0] for r in DUE])
def test_due(name: str, args: tuple, want: bool) -> None:
    assert due(*args) is want


HANDLE = [
    ("declared handle wins", RowView("ws-1", "Ready", "alpha", "beta", "gamma"), [], "alpha"),
    ("else the self file's first line", RowView("ws-1", "Ready", "", "beta\n", "gamma"), [], "beta"),
    ("else the stored agent name", RowView("ws-1", "Ready", "", "", "gamma"), [], "gamma"),
    ("nothing at all", RowView("ws-1", "Ready"), [], ""),
    ("never a handle another row declares", RowView("ws-1", "Ready", "", "beta", "gamma"), ["beta"], ""),
    ("agent name declared elsewhere", RowView("ws-1", "Ready", "", "", "gamma"), ["gamma"], ""),
    ("own declaration stands beside another's", RowView("ws-1", "Ready", "alpha"), ["alpha"], "alpha"),
]


@pytest.mark.parametrize(("name", "row", "others", "want"), HANDLE, ids=[r[0] for r in HANDLE])
def test_row_handle(name: str, row: RowView, others: list[str], want: str) -> None:
    assert row_handle(row, others) == want


def test_held_handles_only_starting_and_ready_and_declarer_holds() -> None:
    rows = [
        RowView("ws-1", "Ready", "alpha"),
        RowView("ws-2", "Starting", "", "beta"),
        RowView("ws-3", "terminal", "gamma"),
        RowView("ws-4", "ended_no_respawn", "", "", "delta"),
        RowView("ws-5", "Ready", "", "", "epsilon"),
        RowView("ws-6", "Ready", "", "zeta"),
        RowView("ws-7", "terminal", "zeta"),  # declares zeta while not running: ws-6 may not hold it
    ]
    assert held_handles(rows) == frozenset({"alpha", "beta", "epsilon"})


def test_wake_rows_rules() -> None:
    rows = [
        RowView("ok", "Ready", "a"),
        RowView("starting", "Starting", "b"),
        RowView("codex", "Ready", "c", agent="codex"),
        RowView("no-declared", "Ready", "", "d", "d"),
        RowView("dup-1", "Ready", "e"),
        RowView("dup-2", "terminal", "e"),
        RowView("not-capsule", "Ready", "f", runtime="plain"),
        RowView("dead", "terminal", "g"),
        RowView("other-agent", "Ready", "h", agent="none"),
    ]
    # a Codex row is woken like a Claude Code one (issue 12: its predicate reads every captured screen right)
    assert [r.row_id for r in wake_rows(rows)] == ["ok", "codex"]


# ------------------------------------------------------------------------------------------ streaks


def test_refusal_streak_silent_for_60s_then_one_line() -> None:
    log, s = refused(None, T)
    assert (log, s) == (False, Streak(T))
    log, s = refused(s, T + 58)
    assert not log
    log, s = refused(s, T + 59.9)
    assert not log
    log, s = refused(s, T + 60)
    assert log and s.logged
    log, s = refused(s, T + 120)
    assert not log
    # a wake or a clear ends the streak: the caller drops it, and a new streak is silent again
    log, s = refused(None, T + 200)
    assert not log


def test_streak_line_names_handle_reason_border() -> None:
    text = streak_line("alpha", "input not empty", "─── fix ───")
    assert text.startswith("comm wake: a row with unread mail keeps refusing the wake")
    assert "@alpha" in text and "input not empty" in text and "─── fix ───" in text


def test_scan_from_a_hinted_base_counts_what_a_full_scan_counts() -> None:
    """3.2 scan with the read hint: the lines the cursor showed are not read again, the counts are the same."""
    full = [
        b'{"from":"x","to":"me","msg":"1"}',
        b'{"from":"x","to":"me","msg":"2"}',
        b'{"from":"x","to":"me","msg":"3"}',
        b'{"from":"x","to":"","msg":"b"}',
        b'{"from":"x","to":"me","msg":"4"}',
    ]

    def shown_two(text: str, lines: list[bytes], handle: str) -> int:
        return 2

    for woken in (None, 0, 3, 4, 5, 9):
        want = scan(full, "2 x", "me", woken, offset=shown_two)
        assert scan(full[2:], "2 x", "me", woken, offset=shown_two, base=2) == want
