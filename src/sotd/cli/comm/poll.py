"""``sotd comm poll`` (comm-poll.sh): show the mail past the cursor, then move the cursor. Behaviour 1.5.

Poll is the only writer of a cursor, and writes it from the bytes it showed (never a re-read), after
showing them. The read lock is held only while the bytes are read (``cli/comm/inboxread.py``), so a slow
display never holds off a writer. Failures are raised (``sotd.errors``); ``sotd.cli.main`` prints them.
"""

from __future__ import annotations

from sotd.cli.comm.common import Context, enter, out, prog
from sotd.cli.comm.inboxread import Batch, read_batch
from sotd.errors import EXIT_OK, InboxBusy, NotJoined, PollBusy, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Batch", "cursor_writes", "read_batch", "run", "shown_lines"]  # read_batch: the hooks, benchmarks


def shown_lines(new: list[bytes], show: Callable[[bytes], str | None]) -> list[str]:
    """The stdout lines for the mail past the cursor: each line as ``show`` renders it (None: not shown),
    or the one "No new messages." line when none of them is shown."""
    lines = [text for text in map(show, new) if text is not None]
    return lines or ["No new messages."]


def cursor_writes(new_text: str, old_text: str, base: int, total: int, batch: int) -> str:
    """What poll writes after showing a batch of ``batch`` lines: "cursor" (the cursor moved; the read
    hint with it), "hint" (the cursor stands, but a full scan of a non-empty box leaves a hint so the next
    read skips it), or "" (nothing). With no line past the cursor the cursor stands as it is, as the
    0.6.6 reference leaves it (it writes only after a batch): a bare count, a legacy stamp, or a hashed
    count one past the end (behaviour 6.6; issue 28 item 3) is not rewritten to ``<total> <hash>``."""
    if batch and new_text != old_text:
        return "cursor"
    if base == 0 and total and new_text == old_text:
        return "hint"
    return ""


def run(argv: list[str]) -> int:
    ctx = enter(prog("comm-poll", "poll"))
    from sotd.formats import cursor, registry

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
    from sotd.formats import readhint

    show = _no_line
    if batch.new:  # the renderer only when there is a line to render (issue 17: poll with nothing new)
        from sotd.formats.showline import show_line as show
    for line in shown_lines(batch.new, show):
        out(line)
    new_text = cursor.encode(batch.total, batch.last_line)
    write = cursor_writes(
        new_text, cursor.read(ctx.layout, name), batch.view.base, batch.total, len(batch.new)
    )
    if write == "cursor":
        cursor.write(ctx.layout, name, batch.total, batch.last_line)
    if write:
        readhint.write(ctx.layout, name, new_text, batch.view)
    _touch(ctx, registry)
    return EXIT_OK


def _no_line(raw: bytes) -> str | None:
    """The renderer of an empty batch (never called: there is no line)."""
    return None


def _touch(ctx: Context, registry: object) -> None:
    try:
        registry.touch(ctx.layout, ctx.host, ctx.name, bound=1.0)  # type: ignore[attr-defined]
    except (SotdError, OSError):
        pass
