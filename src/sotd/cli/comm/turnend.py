"""The Stop hook's one registry write: the turn end's work-state events and its ``stop_at`` mark together.

Spec: behaviour 3.4 (the Stop hook marks ``stop_at``; the ``stop`` event removes it at the end) and 4.3 (each
event or declaration is a locked read-decide-write, then the reduction, then ``status_at = last_seen =
now``); issue 17 target 1 (at most one registry write per Stop hook).
Guarantee: the registry ends each path of the hook exactly as the separate writes left it (the mark, then
``comm-status.sh`` for the closing marker's declaration, then ``stop``), in one transaction: the steps are
applied in that order to the fresh entry under one lock, so no other writer's change falls between them
and none is lost. The hook decides first (the mail gate, the marker, the nudges only read) and writes once
at the end; where it holds the turn, the mark is written before the block is printed, so the agent never
goes on with the wake still free to type into it.
What would break it: applying a step the separate writes would have refused (``workstate.validate``), or
writing the mark on a path where ``stop`` would remove it anyway (two writes again).
"""

from __future__ import annotations

from sotd import _clock
from sotd.cli.comm.common import Context, err
from sotd.errors import RegistryUnreadable, SotdError

STATUS_PROG = "comm-status.sh"  # the separate writes ran as ``comm-status.sh``: its refusals carry that name
MARK_BOUND_S = 1.0  # behaviour 6.1: the Stop-hook mark's lock bound


def plan(marker: tuple[str, str] | None, *, held: bool) -> list[tuple[str, str | None]]:
    """The work-state steps of a turn end, in order: the closing marker's declaration (``SITREP:`` is
    ``done`` with its headline or none; ``SITREP-QUESTION:``/``SITREP-WAITING:`` only with their text),
    then ``stop`` unless the hook holds the turn. Pure."""
    steps: list[tuple[str, str | None]] = []
    if marker is not None:
        verb, text = marker
        if verb == "done":
            steps.append(("done", text or None))
        elif text:
            steps.append((verb, text))
    if not held:
        steps.append(("stop", None))
    return steps


def write(ctx: Context, steps: list[tuple[str, str | None]], *, mark: bool) -> None:
    """One locked read-decide-write: (``mark``) ``stop_at``, then each step, on this session's entry.

    Silent like the hook's events (a missing row, an unreadable registry); a lock or write failure of a
    write that carries steps is said on stderr, as ``comm-status.sh`` says it. Never raises."""
    if not steps and not mark:
        return
    from sotd import workstate
    from sotd.formats import layout as layout_mod
    from sotd.formats import registry, reglock
    from sotd.text import carry_os

    name = ctx.name
    env = ctx.environ
    origin = env.get("COMM_STATUS_ORIGIN", "machine") or "machine"
    prompt_id = env.get("COMM_STATUS_PROMPT_ID", "")
    carried = [(verb, None if text is None else carry_os(text)) for verb, text in steps]
    if steps:
        try:
            for w in layout_mod.ensure_home(ctx.layout):
                err(w)
        except (SotdError, OSError):
            return
    problems: list[str] = []

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = registry.agents_of(doc)
        entry = agents.get(name)
        if not isinstance(entry, dict):
            return False, None
        now = _clock.stamp()
        wrote = False
        if mark:  # first, as the hook's own mark came before the status writes (the keys keep that order)
            entry = dict(entry, stop_at=now)
            wrote = True
        for verb, text in carried:
            problem = workstate.validate(verb, text, entry, STATUS_PROG)
            if problem:
                problems.append(problem)
                continue
            entry = workstate.apply(entry, verb, text=text, origin=origin, prompt_id=prompt_id, now_stamp=now)
            wrote = True
        agents[name] = entry
        return wrote, None

    bound = reglock.wait_bound(dict(env)) if steps else MARK_BOUND_S
    try:
        registry.update(ctx.layout, ctx.host, change, bound=bound)
    except RegistryUnreadable:
        pass
    except (SotdError, OSError) as e:
        if steps and isinstance(e, SotdError):
            err(e.message)
    for problem in problems:
        err(problem)
