"""``sotd comm context``: the eval-able KEY=value lines of behaviour 1.1."""

from __future__ import annotations

from sotd.cli.common import Context, check_identity, err


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
    ctx = Context()
    for key, value in ctx.items():
        print(f"{key}={_quote(value)}")
    return 0
