"""``sotd comm context``: the eval-able KEY=value lines of behaviour 1.1."""

from __future__ import annotations

from sotd.cli.comm.common import Context, check_ancestry
from sotd.errors import EXIT_OK, IdentityRefused


def _quote(v: str) -> str:
    if v == "":
        return ""
    safe = all(c.isalnum() or c in "@%+=:,./-_" for c in v)
    return v if safe else "'" + v.replace("'", "'\"'\"'") + "'"


def eval_lines(items: list[tuple[str, str]]) -> list[str]:
    """The ``KEY=value`` lines, each value quoted for a POSIX shell's ``eval`` (bare when it is safe)."""
    return [f"{key}={_quote(value)}" for key, value in items]


def run(argv: list[str]) -> int:
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"comm-context: {why}")
    # behaviour 1.1: a context that cannot be established is raised with its reason, which main prints
    # first (the sentence after it says "see the reason above")
    ctx = Context()
    for line in eval_lines(ctx.items()):
        print(line)
    return EXIT_OK
