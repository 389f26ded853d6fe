"""The wake's and the heartbeat's decisions (behaviour 3.1, 3.2, 2.5), as pure functions.

The daemon reads the files and the clock and carries the memory; everything here is arithmetic on what it
read. The guarantees: one wake line per batch of mail, one more after ten minutes unread, an Enter owed by
a typed-but-unconfirmed line is completed instead of typing the line again; a row whose Stop hook is
running is left alone; the heartbeat stamps when the held handles change and at least once a minute.

What would break it: counting lines past the cursor that are not directed to the handle (broadcasts and
self-echoes would wake), or letting a shrunken inbox keep an old wake count (new mail would never be
"fresh").

Layer rule: this module may import only ``sotd.errors``, ``sotd._clock`` and the standard library (an
import-linter contract holds it), so the inbox's cursor arithmetic comes in as a function (``scan``'s
``offset``). It sits in the daemon package because the daemon is its only user and it never touches a
terminal; the hold and budget of one attempt on a pane are ``sotd.terminal.attempt``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from sotd import handles

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

TICK_SECS = 2.0
REPEAT_SECS = 600.0
ENTER_OWED_SECS = 600.0
STOP_HOLD_BEFORE = 60
STOP_HOLD_AFTER = 1
HEARTBEAT_SECS = 60.0
STREAK_SILENT_SECS = 60.0
# The agents whose rows are woken: each has a screen predicate (terminal/prompt.py, terminal/codex_prompt.py)
# that reads every captured screen of its pinned release right (docs/rows.md, "The wake for Codex rows").
WAKE_AGENTS = ("claude", "codex")
CONTROLLER_ID = "sot-comm-wake"

FORGET = "forget"
ENTER = "enter"
WAKE = "wake"
HOLD = "hold"

LIVE_PHASES = ("Starting", "Ready")
WAKE_PHASE = "Ready"
STREAK_TEXT = "comm wake: a row with unread mail keeps refusing the wake"


@dataclass(frozen=True, slots=True)
class Woken:
    """What the wake remembers of a row (in memory only): the inbox's total at the wake, when, and whether
    the typed line still waits for its Enter."""

    line: int
    at: float
    enter_owed: bool = False


# ------------------------------------------------------------------------------------------------- scan


def directed(raw: bytes, handle: str) -> bool:
    """A complete inbox line that counts for ``handle``: a JSON object whose ``to`` is the string
    ``handle`` and whose ``from``, if a string, is not (broadcast copies and self-echoes do not count)."""
    if not raw.strip():
        return False
    try:
        obj = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and handles.is_directed(obj, handle)


def scan(
    lines: list[bytes],
    cursor_text: str,
    handle: str,
    woken_line: int | None,
    *,
    offset: Callable[[str, list[bytes], str], int],
    counts: Callable[[bytes, str], bool] = directed,
    base: int = 0,
) -> tuple[int, int, int]:
    """``(total, unread, fresh)`` over the inbox's complete lines (newlines removed).

    ``offset(cursor_text, lines, handle)`` is how many lines the reader has been shown (the daemon passes
    ``sotd.formats.cursor.offset``). ``unread`` counts lines past it that ``counts``; ``fresh`` those also
    at or past ``woken_line``, the total recorded at the last wake — a recorded total beyond the current
    one (the file shrank) is read as 0, as is ``None`` (never woken).

    ``base`` > 0: ``lines`` are only those after the first ``base`` lines, which the cursor (checked by
    the read hint) has already shown; the offset is then ``base`` itself.
    """
    total = base + len(lines)
    if base:
        start = base
    else:
        start = max(0, min(offset(cursor_text, lines, handle), total))
    since = woken_line if woken_line is not None and 0 <= woken_line <= total else 0
    unread = fresh = 0
    for i in range(start, total):
        if counts(lines[i - base], handle):
            unread += 1
            if i >= since:
                fresh += 1
    return total, unread, fresh


# ----------------------------------------------------------------------------------------------- decide


def decide(unread: int, fresh: int, total: int, memory: Woken | None, now: float) -> tuple[str, Woken | None]:
    """The action for one row this tick and the memory to keep once that action is done.

    ``forget`` (no unread: memory None); ``enter`` (a typed line owes its Enter, < 600 s old: memory with
    the debt paid); ``wake`` (fresh mail, never woken, or >= 600 s since the last wake: memory of a wake
    that got its Enter — use ``after_wake`` when the line was typed but no Enter followed); ``hold`` (memory
    unchanged). A refused action keeps the old memory: the caller stores ``new_memory`` only on success.
    """
    if unread <= 0:
        return FORGET, None
    if memory is not None and memory.enter_owed and now - memory.at < ENTER_OWED_SECS:
        return ENTER, replace(memory, enter_owed=False)
    if fresh > 0 or memory is None or now - memory.at >= REPEAT_SECS:
        return WAKE, after_wake(total, now, entered=True)
    return HOLD, memory


def after_wake(total: int, now: float, *, entered: bool) -> Woken:
    """The memory after the wake line was typed: a typed line counts as the wake whether or not Enter
    followed (a batch is never typed twice); without Enter, the Enter is owed."""
    return Woken(line=total, at=now, enter_owed=not entered)


def stop_held(entry: object, now: float) -> bool:
    """True when a handle's registry entry (``registry.AgentRow.entry``, read by the caller) carries a
    ``stop_at`` within ``[now - 60 s, now + 1 s]``, compared as strings against the stamps of those bounds:
    its Stop hook is running.

    No entry (None), an entry that is not an object, a missing, null or non-string ``stop_at``: not held.
    """
    from sotd._clock import stamp

    if not isinstance(entry, dict):
        return False
    mark = entry.get("stop_at")
    if not isinstance(mark, str):
        return False
    return stamp(now - STOP_HOLD_BEFORE) <= mark <= stamp(now + STOP_HOLD_AFTER)


# --------------------------------------------------------------------------------------------- rows


@dataclass(frozen=True, slots=True)
class RowView:
    """What the heartbeat and the wake need of one row record."""

    row_id: str
    phase: str
    declared: str = ""
    self_line: str = ""  # first line of the pinned self file self/<declared host>__<row id>.txt, if any
    agent_name: str = ""
    agent: str = "claude"
    runtime: str = "capsule"


def row_handle(row: RowView, declared_elsewhere: Iterable[str]) -> str:
    """The handle a row holds (behaviour 2.5): its declared handle; else the first line of its pinned self
    file; else the stored agent name. A handle another row declares is never this row's (the declaring row
    holds it, Ready or not): an undeclared candidate taken by a declaring row gives ``""``, not the next
    candidate, so a row never stamps a name it did not join as."""
    if row.declared:
        return row.declared
    taken = set(declared_elsewhere)
    for candidate in (row.self_line.strip(), row.agent_name.strip()):
        if candidate:
            return "" if candidate in taken else candidate
    return ""


def held_handles(rows: Iterable[RowView]) -> frozenset[str]:
    """Non-empty handles of the rows in phase Starting or Ready (only running rows are resolved)."""
    rows = list(rows)
    held: set[str] = set()
    for row in rows:
        if row.phase not in LIVE_PHASES:
            continue
        others = [r.declared for r in rows if r.row_id != row.row_id and r.declared]
        h = row_handle(row, others)
        if h:
            held.add(h)
    return frozenset(held)


def wake_rows(rows: Iterable[RowView]) -> list[RowView]:
    """Rows the wake looks at (behaviour 3.1, 3.2): runtime ``capsule``, phase Ready, a Claude or Codex agent, a
    non-empty declared handle that no other row also declares."""
    rows = list(rows)
    declared: dict[str, int] = {}
    for row in rows:
        if row.declared:
            declared[row.declared] = declared.get(row.declared, 0) + 1
    return [
        r
        for r in rows
        if r.runtime == "capsule"
        and r.phase == WAKE_PHASE
        and r.agent in WAKE_AGENTS
        and r.declared
        and declared[r.declared] == 1
    ]


# ----------------------------------------------------------------------------------------- heartbeat


def due(prev_set: frozenset[str], cur_set: frozenset[str], last_pass: float | None, now: float) -> bool:
    """A stamping pass is due (checked every 2 s tick): nothing while both sets are empty; else when the
    held set changed, when no pass ran yet, or when >= 60 s passed since the last one."""
    if not prev_set and not cur_set:
        return False
    if prev_set != cur_set or last_pass is None:
        return True
    return now - last_pass >= HEARTBEAT_SECS


# -------------------------------------------------------------------------------------- refusal streak


@dataclass(frozen=True, slots=True)
class Streak:
    """A run of refusals for one row with unread mail: when it began and whether it was logged."""

    since: float
    logged: bool = False


def refused(streak: Streak | None, now: float, silent: float = STREAK_SILENT_SECS) -> tuple[bool, Streak]:
    """One more refusal: ``(log now?, streak)``. Silent for the first 60 s, then one line per streak."""
    if streak is None:
        return False, Streak(since=now)
    if not streak.logged and now - streak.since >= silent:
        return True, replace(streak, logged=True)
    return False, streak


def streak_line(handle: str, reason: str, border: str) -> str:
    """The one log line of a refusal streak (a wake or clear ends the streak: the caller drops it)."""
    return f"{STREAK_TEXT} (handle @{handle}, reason: {reason}, border: {border!r})"
