"""``sotd comm poll`` (comm-poll.sh): show the mail past the cursor, then move the cursor. Behaviour 1.5.

Poll is the only writer of a cursor, and writes it from the bytes it showed (never a re-read), after
showing them. The read lock is held only while the bytes are read, so a slow display never holds off a
writer.
"""

from __future__ import annotations

from sotd.cli.common import Context, enter, err, out, prog
from sotd.errors import InboxBusy, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

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
    from byte 0 with the cursor's step-back rules. Raises ``InboxBusy`` when the lock stays held past its
    bound.
    """
    from sotd.formats import cursor, inbox, lockmanager, readhint

    lay = ctx.layout
    text = cursor.read(lay, handle)
    own = lockmanager.own_lock(lay)
    if own is not None:
        nfs = lockmanager.is_nfs(own)
        with inbox.ReadLock(lay, handle, nfs=nfs, bound=inbox.read_wait(ctx.environ), warn=warn):
            view = readhint.read(lay, handle, text)
    else:
        view = readhint.read(lay, handle, text)
    if view is None:
        return None
    if view.base:
        return Batch(view, view.base)
    start = view.shown(text, handle, err)
    if start and text.startswith(f"{start} "):
        # a full scan that accepted a hashed cursor as it stands: leave a hint so the next reader (the
        # Stop hook's unread count, every turn) starts at this line instead of byte 0
        readhint.write(lay, handle, text, view, start)
    return Batch(view, start)


def run(argv: list[str]) -> int:
    me = prog("comm-poll", "poll")
    ctx = enter(me)
    if ctx is None:
        return 1
    from sotd.formats import cursor, registry, showline

    name = ctx.name
    if not name:
        err("Not joined — run comm-join.sh first.")
        return 1
    try:
        batch = read_batch(ctx, name)
    except InboxBusy:
        out(f"the inbox for @{name} is being written — nothing was read; run comm-poll.sh again")
        return 75
    if batch is None:
        out("No messages.")
        _touch(ctx, registry)
        return 0
    shown = 0
    for raw in batch.new:
        text = showline.show_line(raw)  # as the 0.6.6 reference shows it; None: not shown
        if text is None:
            continue
        out(text)
        shown += 1
    if not shown:
        out("No new messages.")
    from sotd.formats import readhint

    new_text = cursor.encode(batch.total, batch.last_line)
    if new_text != cursor.read(ctx.layout, name):
        cursor.write(ctx.layout, name, batch.total, batch.last_line)
        readhint.write(ctx.layout, name, new_text, batch.view)
    elif batch.view.base == 0 and batch.total:
        readhint.write(ctx.layout, name, new_text, batch.view)  # a full scan: let the next read skip it
    _touch(ctx, registry)
    return 0


def _touch(ctx: Context, registry: object) -> None:
    try:
        registry.touch(ctx.layout, ctx.host, ctx.name, bound=1.0)  # type: ignore[attr-defined]
    except (SotdError, OSError):
        pass
