"""``sotd comm status`` (comm-status.sh): work-state events and declarations. Behaviour 1.9, 4.3, D3.

Events (``prompt``, ``stop``, ``interrupted``) come from hooks and are silent when they cannot apply;
declarations are typed by the session and say why they were discarded. Each is one read-decide-write
under the registry lock.
"""

from __future__ import annotations

import os

from sotd import _clock
from sotd.cli.comm.common import Context, check_ancestry, err, prog
from sotd.errors import (
    EXIT_OK,
    IdentityRefused,
    RegistryUnreadable,
    SotdError,
    StampDiscarded,
    StateRefused,
    UsageError,
)

VERBS = ("prompt", "stop", "interrupted", "working", "idle", "blocked", "done", "waiting")
EVENTS = ("prompt", "stop", "interrupted")


def parse(argv: list[str], me: str) -> str:
    """The verb (the first word); raises the usage when there is none or it is not one of ``VERBS``."""
    if not argv:
        raise UsageError(f'usage: {me} <{"|".join(VERBS)}> ["text"]')
    verb = argv[0]
    if verb not in VERBS:
        from sotd.text import inert  # the word as one field: its newline cannot start a line of its own

        raise UsageError(f"{me}: invalid verb '{inert(verb)}' (want {'|'.join(VERBS)})")
    return verb


def discard_sentence(me: str, name: str, cwd: str) -> str:
    """What a declaration says when this row has no registry row (no handle, or the row is gone)."""
    return (
        f"{me}: no registry row for '{name or '<no identity>'}' from cwd {cwd} -- stamp discarded; "
        "run it from the session's project root"
    )


def refusal(event: bool, missing: bool, problem: str | None, discard: str) -> SotdError | None:
    """After the registry update: None when the stamp was written or an event is silently dropped (no
    row); a declaration with no row is discarded; a state the rules refuse is refused, event or not."""
    if missing:
        return None if event else StampDiscarded(discard)
    if problem:
        return StateRefused(problem)
    return None


def run(argv: list[str]) -> int:
    me = prog("comm-status.sh", "status")
    verb = parse(argv, me)
    from sotd.text import carry_os

    # the words' bytes carried (docs/contract.md, "Text that cannot be carried"), as a send's are
    text: str | None = carry_os(" ".join(argv[1:])) if len(argv) > 1 else None
    event = verb in EVENTS
    why = check_ancestry()
    if why:
        if event:
            return EXIT_OK  # a hook's event is silent where it cannot apply
        raise IdentityRefused(f"{me}: {why}")
    ctx = Context()
    env = ctx.environ
    origin = env.get("COMM_STATUS_ORIGIN", "machine") or "machine"
    prompt_id = env.get("COMM_STATUS_PROMPT_ID", "")
    if verb == "interrupted" and not prompt_id:
        return EXIT_OK
    from sotd import workstate
    from sotd.formats import layout as layout_mod
    from sotd.formats import registry, reglock

    name = ctx.name
    discard = discard_sentence(me, name, os.getcwd())
    if not name:
        if event:
            return EXIT_OK
        raise StampDiscarded(discard)
    for w in layout_mod.ensure_home(ctx.layout):
        err(w)
    outcome: dict[str, str] = {}

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = registry.agents_of(doc)
        assert isinstance(agents, dict)
        entry = agents.get(name)
        if not isinstance(entry, dict):
            outcome["missing"] = "1"
            return False, None
        problem = workstate.validate(verb, text, entry, me)
        if problem:
            outcome["problem"] = problem
            return False, None
        now = _clock.stamp()
        agents[name] = workstate.apply(
            entry, verb, text=text, origin=origin, prompt_id=prompt_id, now_stamp=now
        )
        return True, None

    try:
        registry.update(ctx.layout, ctx.host, change, bound=reglock.wait_bound(dict(env)))
    except RegistryUnreadable:
        if event:
            return EXIT_OK
        from sotd.cli.comm import hints

        raise RegistryUnreadable(
            "FAILED: the registry could not be read or updated, so nothing was written",
            hint=hints.registry_unreadable(),
        ) from None
    except SotdError as e:
        e.reason, e.hint, e.after = None, None, ()  # its sentence alone (the lock's names its holder)
        raise
    refused = refusal(event, "missing" in outcome, outcome.get("problem"), discard)
    if refused is not None:
        raise refused
    if "missing" in outcome:
        return EXIT_OK  # an event with no row: silent
    if verb == "prompt" and env.get("COMM_STATUS_TRANSCRIPT"):
        _save_transcript(ctx, name, env["COMM_STATUS_TRANSCRIPT"])
    return EXIT_OK


def _save_transcript(ctx: Context, name: str, path: str) -> None:
    from sotd import fsprim

    try:
        fsprim.write_atomic(ctx.layout.state(f"transcript-{name}.path"), path.encode() + b"\n")
    except OSError:
        pass
