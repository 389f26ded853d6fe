"""``sotd comm poll`` (comm-poll.sh): show the mail past the cursor, then move the cursor. Behaviour 1.5.

Poll is the only writer of a cursor, and writes it from the bytes it showed (never a re-read), after
showing them. The read lock is held only while the bytes are read (``cli/inboxread.py``), so a slow
display never holds off a writer. Failures are raised (``sotd.errors``); ``sotd.cli.main`` prints them.
"""

from __future__ import annotations

from sotd.cli.common import Context, enter, out, prog
from sotd.cli.inboxread import Batch, read_batch
from sotd.errors import EXIT_OK, InboxBusy, NotJoined, PollBusy, SotdError

__all__ = ["Batch", "read_batch", "run"]  # read_batch stays importable here (the hooks, the benchmarks)


def run(argv: list[str]) -> int:
    ctx = enter(prog("comm-poll", "poll"))
    from sotd.formats import cursor, registry, showline

    name = ctx.name
    if not name:
        raise NotJoined("Not joined — run comm-join.sh first.")
    try:
        batch = read_batch(ctx, name)
    except InboxBusy:
        raise PollBusy(
            f"the inbox for @{name} is being written — nothing was read; run comm-poll.sh again"
        ) from None
    if batch is None:
        out("No messages.")
        _touch(ctx, registry)
        return EXIT_OK
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
    return EXIT_OK


def _touch(ctx: Context, registry: object) -> None:
    try:
        registry.touch(ctx.layout, ctx.host, ctx.name, bound=1.0)  # type: ignore[attr-defined]
    except (SotdError, OSError):
        pass
