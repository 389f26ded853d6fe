"""``sotd comm leave`` (comm-leave.sh): remove a registry row. Behaviour 1.8, D10.

Never removes an inbox or a cursor: mail already filed stays readable by the next holder of the handle.
"""

from __future__ import annotations

import os

from sotd.cli.common import enter, out, prog
from sotd.errors import EXIT_OK, RegistryUnreadable, ScriptUsage


def run(argv: list[str]) -> int:
    me = prog("comm-leave.sh", "leave")
    other: str | None = None
    if len(argv) == 1 and argv[0].startswith("--name="):
        other = argv[0][len("--name=") :]
        if not other:
            raise ScriptUsage("--name= needs a handle")
    elif len(argv) == 2 and argv[0] == "--name":
        other = argv[1]
        if not other:
            raise ScriptUsage("--name= needs a handle")
    elif argv:
        raise ScriptUsage(f"usage: {me} [--name <handle>]")
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
        if name in agents:
            del agents[name]
            return True, True
        return False, False

    registry.ensure(ctx.layout)
    try:
        _, removed = registry.update(
            ctx.layout, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ))
        )
    except RegistryUnreadable:
        from sotd.cli import hints

        raise RegistryUnreadable(
            "FAILED: the registry could not be read; nothing was removed", hint=hints.registry_unreadable()
        ) from None
    if other is not None:
        if not removed:
            out(f"@{name} not in registry — nothing to do.")
        else:
            out(f"Removed @{name} from the registry (row only; comm-despawn.sh does full teardown).")
        return EXIT_OK
    try:
        os.unlink(ctx.self_file)
    except FileNotFoundError:
        pass
    if not removed:
        out("Not joined — nothing to do.")
    else:
        out(f"Left sot-comm (@{name} removed).")
    return EXIT_OK
