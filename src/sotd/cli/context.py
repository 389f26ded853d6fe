"""``sotd comm context``: the eval-able KEY=value lines of behaviour 1.1."""

from __future__ import annotations

from sotd.cli.common import Context, check_identity, err
from sotd.errors import SotdError


def _quote(v: str) -> str:
    if v == "":
        return ""
    safe = all(c.isalnum() or c in "@%+=:,./-_" for c in v)
    return v if safe else "'" + v.replace("'", "'\"'\"'") + "'"


def run(argv: list[str]) -> int:
    why = check_identity()
    if why:
        err(f"comm-context: {why}")
        return 1
    try:
        ctx = Context()
    except SotdError as e:
        # behaviour 1.1: the underlying reason comes first; the sentence after it says "see the reason above"
        if e.reason:
            err(e.reason)
        err(e.message)
        if e.hint:
            err(e.hint)
        return e.exit_status
    for key, value in ctx.items():
        print(f"{key}={_quote(value)}")
    return 0
