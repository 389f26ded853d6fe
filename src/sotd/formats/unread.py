"""``sotd/formats/unread.py``: one inbox read past its read cursor, and unread counts kept until the inbox or
the cursor moves. Behaviour 1.5 (what ``unread`` counts), 6.5 (the reader's shared lock), 6.6 (the
cursor's rules).

Shared by the CLI's readers (``cli/comm/inboxread.py``: poll, unread, the Stop hook), ``sotd web``'s
reader of this box's handles, and the daemon's ``agents.list`` (issue 30: each box counts its own
handles' unread mail, so a page on another box can show it).
Guarantee: a read is whole lines a writer finished (the shared lock where this box appends itself); a
count is what ``sotd comm unread <h>`` would print when it was read, and a kept count is given again only
while the inbox's and the cursor's inode, size and mtime are what they were then; nothing here writes
the cursor, so counting never consumes mail.
What would break it: reading without the lock on a box that appends itself (a torn last line counted);
keying a kept count on less than inode, size and mtime (a cursor moved by rename, or an append, would
leave a stale number); a reader here that writes the cursor.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.formats.layout import Layout
    from sotd.formats.readhint import View


def read_past_cursor(
    layout: Layout,
    handle: str,
    *,
    bound: float,
    warn: Callable[[str], None],
    note: Callable[[str], None],
) -> tuple[View, int] | None:
    """The inbox's view and the 0-based index of its first unread line; None when there is no inbox.

    Reads under the shared lock (waiting up to ``bound``; ``InboxBusy`` past it) where this box appends
    itself. ``warn`` gets the lock's 6.5 warning, ``note`` the cursor's step-back note. A full scan that
    accepted a hashed cursor as it stands leaves the read hint (``formats/readhint.py``), so the next
    reader starts at that line instead of byte 0.
    """
    from sotd.formats import cursor, inbox, lockmanager, readhint

    text = cursor.read(layout, handle)
    own = lockmanager.own_lock(layout)
    if own is not None:
        with inbox.ReadLock(layout, handle, nfs=lockmanager.is_nfs(own), bound=bound, warn=warn):
            view = readhint.read(layout, handle, text)
    else:
        view = readhint.read(layout, handle, text)
    if view is None:
        return None
    if view.base:
        return view, view.base
    start = view.shown(text, handle, note)
    if start and text.startswith(f"{start} "):
        readhint.write(layout, handle, text, view, start)
    return view, start


Stamp = tuple[int, int, int, int, int, int]


def stamp_of(layout: Layout, handle: str) -> Stamp:
    """The inbox's and the cursor's (inode, size, mtime in ns); ``-1``s for one that is not there."""
    out: list[int] = []
    for path in (layout.inbox(handle), layout.cursor(handle)):
        try:
            st = os.stat(path)
        except OSError:
            out += [-1, -1, -1]
        else:
            out += [st.st_ino, st.st_size, st.st_mtime_ns]
    return (out[0], out[1], out[2], out[3], out[4], out[5])


class Counter:
    """Unread counts of one comm folder's handles, each read again only when its stamp moved.

    ``count`` may be called from several threads (the daemon's workers): the table is guarded, the read
    itself is not (two threads may both read a changed inbox; both get the same number).
    """

    def __init__(self, layout: Layout, *, bound: float, max_bytes: int | None = None) -> None:
        import threading  # here, not at the top: poll and the Stop hook load this module and need no thread

        self.layout = layout
        self.bound = bound
        self.max_bytes = max_bytes  # an inbox larger than this is not read (None: any size)
        self._kept: dict[str, tuple[Stamp, int]] = {}
        self._lock = threading.Lock()

    def count(self, handle: str) -> int | None:
        """``sotd comm unread <handle>``'s number; None when it could not be counted (the inbox busy past
        ``bound``, unreadable, a link where a file belongs, larger than ``max_bytes``)."""
        from sotd.errors import SotdError
        from sotd.formats import inbox

        key = stamp_of(self.layout, handle)
        with self._lock:
            kept = self._kept.get(handle)
        if kept is not None and kept[0] == key:
            return kept[1]
        if self.max_bytes is not None and key[1] > self.max_bytes:
            return None  # a glance never loads a huge file into a long-lived process
        n: int | None
        try:
            got = read_past_cursor(self.layout, handle, bound=self.bound, warn=_quiet, note=_quiet)
            n = 0 if got is None else inbox.count_directed(got[0].lines[got[1] - got[0].base :], handle)
        except (SotdError, OSError, ValueError):
            n = None
        if n is not None:  # a busy or unreadable inbox is asked again next time, its stamp unmoved or not
            with self._lock:
                self._kept[handle] = (key, n)
        return n

    def forget_all_but(self, handles: set[str]) -> None:
        """Drop the kept counts of handles no longer listed (a registry that shrank)."""
        with self._lock:
            for name in [h for h in self._kept if h not in handles]:
                del self._kept[name]


def _quiet(_line: str) -> None:
    """A count is a glance: the lock's warning and the cursor's note belong to poll, which prints them."""
