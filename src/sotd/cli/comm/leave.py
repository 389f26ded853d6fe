"""``sotd comm leave`` (comm-leave.sh): remove a registry row. Behaviour 1.8, D10.

Never removes an inbox or a cursor: mail already filed stays readable by the next holder of the handle.
"""

from __future__ import annotations

import os

from sotd.cli.comm.common import enter, out, prog
from sotd.errors import EXIT_OK, RegistryUnreadable, ScriptUsage


def parse(argv: list[str], me: str) -> str | None:
    """The other row's handle (``--name <h>`` or ``--name=<h>``), None for this row's own; raises the
    usage for anything else."""
    if len(argv) == 1 and argv[0].startswith("--name="):
        other = argv[0][len("--name=") :]
    elif len(argv) == 2 and argv[0] == "--name":
        other = argv[1]
    elif argv:
        raise ScriptUsage(f"usage: {me} [--name <handle>]")
    else:
        return None
    if not other:
        raise ScriptUsage("--name= needs a handle")
    return other


def removed_row(agents: dict[str, object], name: str) -> bool:
    """Take ``name``'s row out of the registry's agent list (in place); whether there was one. Only the
    row: the inbox and the cursor stay (D10)."""
    if name in agents:
        del agents[name]
        return True
    return False


def said(name: str, other: bool, removed: bool) -> str:
    """The one stdout line: leaving another row (``--name``) or this row's own."""
    if other:
        if removed:
            return f"Removed @{name} from the registry (row only; comm-despawn.sh does full teardown)."
        return f"@{name} not in registry — nothing to do."
    return f"Left sot-comm (@{name} removed)." if removed else "Not joined — nothing to do."


def run(argv: list[str]) -> int:
    me = prog("comm-leave.sh", "leave")
    other = parse(argv, me)
    ctx = enter(me)  # an identity refusal is raised
    from sotd import handles
    from sotd.formats import registry, reglock

    name = other if other is not None else ctx.name
    if not name:
        out("Not joined — nothing to do.")
        return EXIT_OK
    handles.validate(name)

    def change(doc: dict[str, object]) -> tuple[bool, bool]:
        agents = registry.agents_of(doc)
        assert isinstance(agents, dict)
        removed = removed_row(agents, name)
        return removed, removed

    registry.ensure(ctx.layout)
    try:
        _, removed = registry.update(
            ctx.layout, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ))
        )
    except RegistryUnreadable:
        from sotd.cli.comm import hints

        raise RegistryUnreadable(
            "FAILED: the registry could not be read; nothing was removed", hint=hints.registry_unreadable()
        ) from None
    if other is None:
        try:
            os.unlink(ctx.self_file)
        except FileNotFoundError:
            pass
    out(said(name, other is not None, removed))
    return EXIT_OK
