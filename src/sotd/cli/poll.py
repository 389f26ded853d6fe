"""``sotd comm poll`` (comm-poll.sh): show the mail past the cursor, then move the cursor. Behaviour 1.5.

Poll is the only writer of a cursor, and writes it from the bytes it showed (never a re-read), after
showing them. The read lock is held only while the bytes are read, so a slow display never holds off a
writer.
"""

from __future__ import annotations

from sotd.cli.common import Context, check_identity, err, out, prog
from sotd.errors import InboxBusy, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Batch:
    """The complete lines of one inbox read, and where this reader's cursor puts it."""

    __slots__ = ("lines", "start")

    def __init__(self, lines: list[bytes], start: int) -> None:
        self.lines = lines
        self.start = start


def read_batch(ctx: Context, handle: str, *, warn: Callable[[str], None] = err) -> Batch | None:
    """Read the inbox once (under the shared lock where this box appends itself). None: no inbox file.

    Raises ``InboxBusy`` when the lock stays held past its bound.
    """
    from sotd.formats import cursor, inbox, lockmanager

    lay = ctx.layout
    own = lockmanager.own_lock(lay)
    if own is not None:
        nfs = lockmanager.is_nfs(own)
        with inbox.ReadLock(lay, handle, nfs=nfs, bound=inbox.read_wait(ctx.environ), warn=warn):
            data = inbox.read_all(lay, handle)
    else:
        data = inbox.read_all(lay, handle)
    if data is None:
        return None
    lines = inbox.complete_lines(data)
    start = cursor.offset(cursor.read(lay, handle), lines, handle, err)
    return Batch(lines, start)


def run(argv: list[str]) -> int:
    me = prog("comm-poll", "poll")
    why = check_identity()
    if why:
        err(f"{me}: {why}")
        return 1
    ctx = Context()
    from sotd.formats import cursor, inbox, registry
    from sotd.formats import layout as layout_mod

    for w in layout_mod.ensure_home(ctx.layout):
        err(w)
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
    for raw in batch.lines[batch.start :]:
        obj = inbox.decode_line(raw)
        if obj is None:
            continue
        out(inbox.show_line(obj))
        shown += 1
    if not shown:
        out("No new messages.")
    total = len(batch.lines)
    new_text = cursor.encode(total, batch.lines[total - 1] if total else None)
    if new_text != cursor.read(ctx.layout, name):
        cursor.write(ctx.layout, name, total, batch.lines[total - 1] if total else None)
    _touch(ctx, registry)
    return 0


def _touch(ctx: Context, registry: object) -> None:
    try:
        registry.touch(ctx.layout, ctx.host, ctx.name, bound=1.0)  # type: ignore[attr-defined]
    except (SotdError, OSError):
        pass
