"""``sotd comm unread <h>``: the count of directed unread lines (decision D1, behaviour 1.6).

Prints a bare integer and exit 0; a busy read lock prints nothing on stdout, a reason on stderr, exit 75;
any other fault a reason on stderr, exit 1. A count that failed is never printed as 0. Failures are
raised (``sotd.errors``); ``sotd.cli.main`` prints them.
"""

from __future__ import annotations

import os

from sotd.cli.comm.common import Context, check_ancestry, out
from sotd.errors import EXIT_OK, IdentityRefused, InboxBusy, NotJoined, ScriptUsage


def asked_handle(argv: list[str], joined: str, prog_env: str) -> str:
    """Whose directed unread lines to count: the one word given, else this row's joined handle. Raises the
    usage for more than one word, and poll's "Not joined" when there is no handle at all."""
    if len(argv) > 1:
        from sotd import cmdtable

        raise ScriptUsage(cmdtable.usage("comm unread", prog_env))
    handle = argv[0] if argv else joined
    if not handle:
        raise NotJoined("Not joined — run comm-join.sh first.")  # as poll says it
    return handle


def run(argv: list[str]) -> int:
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"sotd comm unread: {why}")
    ctx = Context()
    handle = asked_handle(argv, ctx.name, os.environ.get("SOT_COMM_PROG", ""))
    from sotd import handles
    from sotd.cli.comm.inboxread import read_batch
    from sotd.formats import inbox

    handles.validate(handle)
    try:
        batch = read_batch(ctx, handle)
    except InboxBusy:
        raise InboxBusy(
            f"the inbox for @{handle} is being written — nothing was counted; ask again"
        ) from None
    out("0" if batch is None else str(inbox.count_directed(batch.new, handle)))
    return EXIT_OK
