"""``sotd comm context``: the eval-able KEY=value lines of behaviour 1.1."""

from __future__ import annotations

from sotd.cli.common import Context, check_ancestry
from sotd.errors import EXIT_OK, IdentityRefused


def _quote(v: str) -> str:
    if v == "":
        return ""
    safe = all(c.isalnum() or c in "@%+=:,./-_" for c in v)
    return v if safe else "'" + v.replace("'", "'\"'\"'") + "'"


def run(argv: list[str]) -> int:
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"comm-context: {why}")
    # behaviour 1.1: a context that cannot be established is raised with its reason, which main prints
    # first (the sentence after it says "see the reason above")
    ctx = Context()
    for key, value in ctx.items():
        print(f"{key}={_quote(value)}")
    return EXIT_OK
