"""The wake: the daemon types ``[sot-comm] you have mail: run comm-poll.sh`` into an idle Claude row.

Spec: behaviour 3.1-3.3; seed 000 "Waking". The decisions are ``sotd.daemon.decide`` (pure), one attempt
on a pane is ``sotd.terminal.attempt`` (blocking); this module carries the memory between ticks and runs the
checks: every 2 s tick for each Ready Claude row with a declared handle, and at once when a row's inbox
file changes (inotify on ``inbox/``, through ctypes, read on the event loop with ``add_reader``).
Guarantee: one wake line per batch of unread directed mail (again after ten minutes unread), an owed
Enter completed instead of a second line, never while the row's Stop hook mark is under 60 s old, never
into a screen that is not a free prompt (a Codex row's: ``terminal/codex_prompt.py``). The memory is in this process only: a
restarted daemon wakes each row with unread mail once more.
What would break it: two checks of one row at once (both would type), or storing the memory of a refused
attempt (the batch would never be typed).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import struct
import time
from typing import TYPE_CHECKING

from sotd import _clock
from sotd.daemon import decide
from sotd.errors import RegistryUnreadable, SotdError
from sotd.formats import cursor, readhint, registry
from sotd.terminal import attempt

if TYPE_CHECKING:
    from sotd.daemon.rows import DaemonRows
    from sotd.formats.layout import Layout

log = logging.getLogger("sotd")

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
WATCH_MASK = IN_CLOSE_WRITE | IN_MODIFY | IN_MOVED_TO
_EVENT = struct.Struct("iIII")


# ---------------------------------------------------------------------------------------------- inotify


def parse_events(data: bytes) -> list[tuple[int, str]]:
    """``(mask, name)`` of each ``struct inotify_event`` in ``data``. Pure."""
    out: list[tuple[int, str]] = []
    i = 0
    while i + _EVENT.size <= len(data):
        _wd, mask, _cookie, length = _EVENT.unpack_from(data, i)
        raw = data[i + _EVENT.size : i + _EVENT.size + length]
        out.append((mask, raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")))
        i += _EVENT.size + length
    return out


def handle_of(name: str) -> str | None:
    """The handle whose inbox file is ``name`` (``<h>.jsonl``), else None."""
    return name[: -len(".jsonl")] if name.endswith(".jsonl") and len(name) > len(".jsonl") else None


class Inotify:
    """One inotify descriptor watching one folder (Linux; ``open`` returns None elsewhere)."""

    def __init__(self, fd: int, folder: str) -> None:
        self.fd = fd
        self.folder = folder

    @classmethod
    def open(cls, folder: str) -> Inotify | None:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name, use_errno=True)
            init = libc.inotify_init1
            add = libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        init.argtypes = [ctypes.c_int]
        init.restype = ctypes.c_int
        add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        add.restype = ctypes.c_int
        fd = init(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.warning(
                "inotify is not available (%s): the wake checks every tick only",
                os.strerror(ctypes.get_errno()),
            )
            return None
        if add(fd, os.fsencode(folder), WATCH_MASK) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            log.info("inotify cannot watch %s (%s) yet", folder, os.strerror(err))
            return None
        return cls(fd, folder)

    def read(self) -> list[tuple[int, str]]:
        try:
            data = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return []
        return parse_events(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


# --------------------------------------------------------------------------------------------- the wake


class Facts:
    """The inbox scan's counts and the handle's registry entry (``entry``: None when the handle has no
    unread mail, no registry, or an unreadable one), read by ``read_facts``."""

    __slots__ = ("entry", "fresh", "total", "unread")

    def __init__(self, total: int, unread: int, fresh: int, entry: object) -> None:
        self.total = total
        self.unread = unread
        self.fresh = fresh
        self.entry = entry


def read_facts(layout: Layout, handle: str, woken_line: int | None) -> Facts | None:
    """What the decision needs (blocking): the inbox scan and the registry (for ``stop_at``). Reads only."""
    try:
        cursor_text = cursor.read(layout, handle)
        # from the cursor's byte offset when the reader's hint checks out: a tick costs what is new
        view = readhint.read(layout, handle, cursor_text)
    except SotdError as e:
        log.info("wake: @%s skipped: %s", handle, e.message)
        return None
    lines, base = (view.lines, view.base) if view is not None else ([], 0)
    total, unread, fresh = decide.scan(
        lines, cursor_text, handle, woken_line, offset=cursor.offset, base=base
    )
    entry: object = None
    if unread:
        with contextlib.suppress(RegistryUnreadable, OSError):
            doc = registry.read(layout)
            if doc is not None:
                entry = registry.AgentRow.of(registry.agents_of(doc), handle).entry
    return Facts(total, unread, fresh, entry)


class Waker:
    """The wake's memory (per row, in memory only), its refusal streaks, and its running checks."""

    def __init__(self, rows: DaemonRows, layout: Layout, *, hold: float = attempt.HOLD_SECS) -> None:
        self.rows = rows
        self.layout = layout
        self.hold = hold
        self.memory: dict[str, decide.Woken] = {}
        self.streaks: dict[str, decide.Streak] = {}
        self.busy: set[str] = set()
        self.again: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.watch: Inotify | None = None
        self.use_inotify = True
        self.streak_silent = decide.STREAK_SILENT_SECS  # a test seam shortens it

    # -------------------------------------------------------------------------------------- triggers

    def tick(self, views: list[decide.RowView]) -> None:
        """Every 2 s: a check for each row the wake looks at (running concurrently, one per row)."""
        targets = decide.wake_rows(views)
        ids = {v.row_id for v in targets}
        for rid in list(self.memory):
            if rid not in ids:
                self.memory.pop(rid, None)
                self.streaks.pop(rid, None)
        for v in targets:
            self.schedule(v)
        if self.use_inotify and self.watch is None and os.path.isdir(self.layout.inbox_dir):
            self.start_watch()

    def schedule(self, view: decide.RowView) -> None:
        if view.row_id in self.busy:
            self.again.add(view.row_id)
            return
        self.busy.add(view.row_id)
        task = asyncio.get_running_loop().create_task(self._run(view))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def start_watch(self) -> None:
        self.watch = Inotify.open(self.layout.inbox_dir)
        if self.watch is None:
            return
        asyncio.get_running_loop().add_reader(self.watch.fd, self._on_inotify)
        log.info("wake: watching %s for new mail (inotify)", self.layout.inbox_dir)

    def _on_inotify(self) -> None:
        if self.watch is None:
            return
        changed = {h for _m, name in self.watch.read() if (h := handle_of(name))}
        if not changed:
            return
        for v in decide.wake_rows(self.current_views()):
            if v.declared in changed:
                self.schedule(v)

    def current_views(self) -> list[decide.RowView]:
        """The rows as they stand now (no file read): a row that joined since the last tick is looked at
        on its first mail, not a tick later. Only declared handles matter to the wake."""
        return [
            decide.RowView(row_id=r.id, phase=r.phase, declared=r.handle, agent_name=r.agent_name,
                           agent=r.agent, runtime=r.runtime)
            for r in list(self.rows.rows.values())
        ]  # fmt: skip

    def close(self) -> None:
        if self.watch is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.watch.fd)
            self.watch.close()
            self.watch = None
        for t in list(self.tasks):
            t.cancel()

    # ----------------------------------------------------------------------------------------- check

    async def _run(self, view: decide.RowView) -> None:
        try:
            while True:
                self.again.discard(view.row_id)
                try:
                    await self.check(view)
                except Exception:
                    log.exception("wake: the check of row %s failed", view.row_id)
                if view.row_id not in self.again:
                    return
        finally:
            self.busy.discard(view.row_id)

    async def check(self, view: decide.RowView) -> str:
        """One decision and, when it says so, one attempt. Returns what happened (for tests and logs)."""
        row = self.rows.rows.get(view.row_id)
        if row is None or row.phase != decide.WAKE_PHASE or row.handle != view.declared or not row.pane:
            return "gone"
        h = view.declared
        memory = self.memory.get(row.id)
        facts = await asyncio.to_thread(read_facts, self.layout, h, memory.line if memory else None)
        if facts is None:
            return "unreadable"
        now = _clock.now()
        action, new = decide.decide(facts.unread, facts.fresh, facts.total, memory, now)
        if action == decide.FORGET:
            self.memory.pop(row.id, None)
            if self.streaks.pop(row.id, None) is not None:
                log.info("comm wake: @%s has no unread mail any more", h)
            return action
        if action == decide.HOLD:
            return action
        if decide.stop_held(facts.entry, now):
            return "stop_held"
        started = time.monotonic()
        if action == decide.WAKE:
            out = await asyncio.to_thread(attempt.wake, self.rows.tmux, row.pane, row.agent, hold=self.hold)
        else:
            out = await asyncio.to_thread(attempt.complete_enter, self.rows.tmux, row.pane, agent=row.agent)
        took = time.monotonic() - started
        total = facts.total
        if out.result in (attempt.WOKEN, attempt.TYPED_NO_ENTER):
            # mail that arrived during the hold is this wake's too: the line sends the agent to poll all
            after = await asyncio.to_thread(read_facts, self.layout, h, None)
            if after is not None:
                total = max(total, after.total)
        if out.result == attempt.WOKEN:
            self.memory[row.id] = decide.after_wake(total, now, entered=True)
            self.streaks.pop(row.id, None)
            log.info("comm wake: woke @%s (row %s, %d unread) in %.1fs", h, row.id, facts.unread, took)
        elif out.result == attempt.ENTERED:
            assert new is not None
            self.memory[row.id] = new
            self.streaks.pop(row.id, None)
            log.info("comm wake: sent the owed Enter to @%s (row %s)", h, row.id)
        elif out.result == attempt.TYPED_NO_ENTER:
            self.memory[row.id] = decide.after_wake(total, now, entered=False)
            log.warning(
                "comm wake: @%s (row %s): the wake line %s; %s (owed to a later tick)",
                h,
                row.id,
                attempt.DID_NOT_SHOW,
                attempt.NO_ENTER,
            )
        elif out.result == attempt.REFUSED:
            say, streak = decide.refused(self.streaks.get(row.id), now, self.streak_silent)
            self.streaks[row.id] = streak
            if say:
                log.warning("%s", decide.streak_line(h, out.reason or "", out.border or ""))
        else:
            log.info("comm wake: @%s (row %s) skipped: %s", h, row.id, out.reason)
        return out.result
