"""``sotd comm unread <h>``: the count of directed unread lines (decision D1, behaviour 1.6).

Prints a bare integer and exit 0; a busy read lock prints nothing on stdout, a reason on stderr, exit 75;
any other fault a reason on stderr, exit 1. A count that failed is never printed as 0.
"""

from __future__ import annotations

import os

from sotd.cli.common import Context, check_identity, err, out
from sotd.errors import InboxBusy, SotdError


def run(argv: list[str]) -> int:
    why = check_identity()
    if why:
        err(f"sotd comm unread: {why}")
        return 1
    ctx = Context()
    handle = argv[0] if argv else ctx.name
    if len(argv) > 1:
        from sotd import cmdtable

        err(cmdtable.usage("comm unread", os.environ.get("SOT_COMM_PROG", "")))
        return 1
    if not handle:
        raise SotdError("Not joined — run comm-join.sh first.", code="not_joined")  # as poll says it
    from sotd import handles
    from sotd.cli.poll import read_batch
    from sotd.formats import inbox

    handles.validate(handle)
    try:
        batch = read_batch(ctx, handle)
    except InboxBusy:
        err(f"the inbox for @{handle} is being written — nothing was counted; ask again")
        return 75
    if batch is None:
        out("0")
        return 0
    out(str(inbox.count_directed(batch.new, handle)))
    return 0
