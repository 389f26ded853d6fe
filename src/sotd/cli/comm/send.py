"""``sotd comm send`` (comm-send.sh): one message, one answer. Behaviour 1.3, 1.4; seed 000 "The wire".

The one result: ``filed -> @h`` (indented when this box's own folder took it) and exit 0, or
``FAILED -> @h: <reason>`` and exit 1. Nothing is queued and no second route is tried; a send never types
into any terminal. ``run`` is parse → plan (``refusal``, pure) → act (``routing.Sender``) → render; every
failure is raised as a ``sotd.errors`` class that ``sotd.cli.main`` prints.
"""

from __future__ import annotations

from sotd.cli.comm.common import check_ancestry, open_context, out, prog
from sotd.errors import (
    EXIT_OK,
    IdentityRefused,
    RegistryLinked,
    RegistryUnreadable,
    ScriptUsage,
    SendFailed,
    SotdError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.comm.common import Context
    from sotd.cli.comm.routing import Sender


def parse(argv: list[str]) -> tuple[bool, str | None, str]:
    """(broadcast, target, text): ``--broadcast`` anywhere; the first ``@word`` before any text is the target.

    The text is the words' bytes joined by spaces and carried (``sotd.text.carry_os``: bytes that are not
    UTF-8 become U+FFFD exactly as the 0.6.6 reference's jq makes them).
    """
    from sotd.text import carry_os

    broadcast = False
    target: str | None = None
    words: list[str] = []
    for a in argv:
        if a == "--broadcast":
            broadcast = True
        elif target is None and not words and a.startswith("@") and not broadcast:
            target = a[1:]
        else:
            words.append(a)
    return broadcast, target, carry_os(" ".join(words))


def usage_refusal(broadcast: bool, target: str | None, text: str, me: str) -> SotdError | None:
    """The plan's first step: the command line's refusal (exit 1, as 0.6.6's script), or None."""
    if not text:
        return ScriptUsage(f'usage: {me} @name "msg" | --broadcast "msg"')
    if not broadcast and target is None:
        return ScriptUsage("no target; use @name or --broadcast")
    return None


def refusal(
    label: str, broadcast: bool, agents: dict[str, object] | None, problem: str | None
) -> SotdError | None:
    """The plan's second step, from the registry as read (None: unreadable) and ``routing.routable``'s
    problem: the error this send stops with before any copy is filed, or None (go)."""
    if agents is None:
        from sotd.cli.comm import hints  # only on this path: a send that goes loads no hint text (issue 17)

        if broadcast:
            return RegistryUnreadable(
                "FAILED -> --broadcast: the registry could not be read; nothing was sent",
                hint=hints.registry_unreadable(),
            )
        return RegistryUnreadable(f"FAILED -> {label}: {problem}", hint=hints.registry_unreadable())
    if problem:
        return SendFailed(f"FAILED -> {label}: {problem}")
    return None


def run(argv: list[str]) -> int:
    broadcast, target, text = parse(argv)
    return send(broadcast, target, text)


def send(broadcast: bool, target: str | None, text: str) -> int:
    """The send itself, from its parsed parts (``run``'s, or a ``sotd mcp`` tool call's): plan, act,
    render; every failure raised."""
    label = "--broadcast" if broadcast else f"@{target or ''}"
    refused = usage_refusal(broadcast, target, text, prog("comm-send.sh", "send"))
    if refused is not None:
        raise refused
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"FAILED -> {label}: {why}")
    ctx = open_context()
    from sotd.cli.comm import routing
    from sotd.formats import registry

    registry.ensure(ctx.layout)
    try:
        agents = routing.read_agents(ctx.layout)
    except RegistryLinked as e:
        raise SendFailed(f"FAILED -> {label}: {e.message}") from None
    refused = refusal(label, broadcast, agents, routing.routable(ctx, agents))
    if refused is not None:
        raise refused
    sender = routing.Sender(ctx, agents)
    if broadcast:
        failures = _broadcast(sender, text)
        _touch_self(ctx)
        if failures:
            raise SendFailed(failures[0], after=tuple(failures[1:]))
        return EXIT_OK
    assert target is not None
    failed = sender.deliver(target, text, broadcast=False)
    _touch_self(ctx)
    if failed is not None:
        raise SendFailed(f"FAILED -> @{target}: {failed}", hint=sender.hint)
    return EXIT_OK


def _broadcast(sender: Sender, text: str) -> list[str]:
    """One copy to each listed handle but the sender's; the summary on stdout; the stderr lines of the
    failures (each FAILED line, then each distinct next step once), empty when every copy was filed."""
    agents = sender.agents
    assert agents is not None  # refusal() stopped an unreadable registry
    targets = sorted(k for k in agents if k != sender.ctx.name)
    ok = 0
    failed: list[str] = []
    hints: list[str] = []  # each next step once, after the FAILED lines (the summary stays last)
    for t in targets:
        why = sender.deliver(t, text, broadcast=True)
        hint = sender.take_hint()
        if why is None:
            ok += 1
        else:
            failed.append(f"FAILED -> @{t}: {why}")
            if hint and hint not in hints:
                hints.append(hint)
    if ok == len(targets):
        out(f"Broadcast to {ok} agent(s).")
        return []
    out(f"Broadcast to {ok} of {len(targets)} agent(s).")
    return failed + hints  # not all filed: each one that was not is a FAILED line


def _touch_self(ctx: Context) -> None:
    """Best-effort ``last_seen`` of the sender's own row, 1 s lock bound; never changes the exit code."""
    from sotd.formats import registry

    try:
        registry.touch(ctx.layout, ctx.host, ctx.name, bound=1.0)
    except (SotdError, OSError):
        pass
