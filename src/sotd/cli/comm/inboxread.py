"""``sotd/cli/comm/inboxread.py``: reading one inbox past its read cursor, shared by poll, unread and the Stop
hook. Behaviour 1.5, 1.6; the read itself is ``formats/unread.read_past_cursor`` (the daemon's and
``sotd web``'s counts use it too), with the read hint of ``formats/readhint.py``.

Guarantee: one read under the shared read lock (where this box appends itself), so a batch is whole lines
a writer finished; the lines past the cursor, and what the cursor needs to move past them. Nothing here
moves the cursor (poll is its only writer); a full scan that accepted a hashed cursor leaves the read
hint so the next reader starts at that line.
What would break it: reading without the lock on a box that appends itself (a torn last line shown), or
a reader here that writes the cursor (a count that consumes mail).
"""

from __future__ import annotations

from sotd.cli.comm.common import err

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.cli.comm.common import Context
    from sotd.formats.readhint import View


class Batch:
    """One read of an inbox: the complete lines past this reader's cursor, and what the cursor needs."""

    __slots__ = ("new", "start", "view")

    def __init__(self, view: View, start: int) -> None:
        self.view = view
        self.start = start  # lines already shown (0-based index of the first new line)
        self.new = view.lines[start - view.base :]

    @property
    def total(self) -> int:
        return self.view.total

    @property
    def last_line(self) -> bytes | None:
        return self.view.line(self.view.total)


def read_batch(ctx: Context, handle: str, *, warn: Callable[[str], None] = err) -> Batch | None:
    """Read the inbox once (under the shared lock where this box appends itself). None: no inbox file.

    Reads from the cursor's byte offset when the private hint checks out (``formats/readhint.py``), else
    from byte 0 with the cursor's step-back rules (their note goes to stderr). Raises ``InboxBusy`` when
    the lock stays held past its bound (``SOT_INBOX_READ_WAIT_SECS``).
    """
    from sotd.formats import inbox, unread

    got = unread.read_past_cursor(ctx.layout, handle, bound=inbox.read_wait(ctx.environ), warn=warn, note=err)
    return None if got is None else Batch(*got)
