"""``sotd comm join`` (comm-join.sh): take a handle. Behaviour 1.2, 6.7, 6.8.

``run`` is parse → plan (``chosen_name``, ``expertise_of``, ``slot_refused``, ``tier1_warning``: pure,
table-tested in tests/unit/test_verb_plans.py) → act (the locked registry write, the self file) → render.
Every failure is raised as a ``sotd.errors`` class that ``sotd.cli.main`` prints.
"""

from __future__ import annotations

import os

from sotd import PROTOCOL_VERSION, _clock
from sotd.cli.comm.common import Context, check_ancestry, err, open_context, out, prog
from sotd.errors import (
    EXIT_OK,
    HandleError,
    IdentityRefused,
    JoinFailed,
    RegistryLinked,
    RegistryUnreadable,
    SlotClaimed,
    SlotRefused,
    SotdError,
    UsageError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.handles import Derived

USAGE = """\
usage: comm-join.sh [NAME | --name NAME] [--expertise "a, b"] [--repin]
  Takes a handle in this comm folder: NAME, else $SOT_COMM_NAME, else this slot's own handle,
  else one derived from the project folder and the host."""


class _Joined:
    """What the locked read-decide-write learned, for the lines printed after it."""

    __slots__ = ("derived", "name", "others", "previous", "protocol", "tier1_live")

    def __init__(self) -> None:
        self.name = ""
        self.derived: Derived | None = None
        self.others: list[str] = []
        self.protocol: object = None
        self.tier1_live = False
        self.previous: object = None  # the entry this join replaced (None: there was none)


class _Opts:
    __slots__ = ("expertise", "help", "name", "repin")

    def __init__(self) -> None:
        self.name: str | None = None
        self.expertise: str | None = None
        self.repin = False
        self.help = False


def parse(argv: list[str], me: str) -> _Opts:
    """The command line, read by the command table's one parser (``sotd.cmdtable.parse``); the refusals
    in the order of the words (an option-looking word, a second NAME, then an option without its value)."""
    from sotd import cmdtable

    parsed = cmdtable.parse("comm join", argv)
    o = _Opts()
    for key, value in parsed.seq:
        if key == "name":
            o.name = value
        elif key:
            continue  # help, repin, expertise: read from parsed.opts below
        elif value.startswith("-"):
            raise UsageError(f"{me}: unknown option '{value}' (a handle can't start with '-'; see --help)")
        elif o.name is not None:
            raise UsageError(f"{me}: unexpected argument '{value}' (see --help)")
        else:
            o.name = value
    if parsed.missing:
        raise UsageError(f"{me}: {parsed.missing} needs a value (see --help)")
    o.help = "help" in parsed.opts
    o.repin = "repin" in parsed.opts
    o.expertise = parsed.opts.get("expertise")
    return o


def chosen_name(named: str | None, environ: Mapping[str, str], slot_name: str) -> str | None:
    """The handle asked for: NAME, else ``$SOT_COMM_NAME``, else this slot's own; None: derive one; pure."""
    explicit = named if named is not None else environ.get("SOT_COMM_NAME") or None
    return explicit or slot_name or None


def expertise_of(raw: str) -> list[str]:
    """``"a, b"`` as the registry's list (empty parts dropped); pure."""
    return [p.strip() for p in raw.split(",") if p.strip()]


def slot_refused(refusal: str, me: str, repo: str, workspace_id: str) -> SlotRefused:
    """The guard's refusal before anything is written: the slot names another project's session; pure."""
    ws = workspace_id or "unset"
    return SlotRefused(
        f"{me}: REFUSING to put a '{repo}' identity in that slot — it is keyed by this shell's "
        f"$SOT_WORKSPACE_ID ('{ws}'), and a row that comes to name another project's session reads "
        f"that session's mail. Either run this from inside the row it belongs to, or, if this row "
        f"really is '{repo}' now, re-run with --repin.",
        reason=refusal,
    )


def tier1_warning(chosen: str, tier1: str) -> str:
    """The warning when this project's bare handle is held by a live session of another project; pure."""
    return (
        f"*** WARNING: joined as '@{chosen}', but '@{tier1}' (this project's bare handle) is held by a live "
        f"session of another project.\n"
        f"*** Mail sent to @{tier1} will not reach you. If '@{tier1}' should be yours, recover it with:\n"
        f"***   comm-leave.sh --name {chosen}; comm-join.sh --name {tier1}"
    )


def run(argv: list[str]) -> int:
    """Plan (the name asked for, the entry, the slot checks: nothing of the join written yet), then act:
    take the handle in the registry, pin it in the slot, say so."""
    me = prog("comm-join.sh", "join")
    opts = parse(argv, me)
    if opts.help:
        out(USAGE)
        return EXIT_OK
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"{me}: REFUSING to bind: {why}")
    ctx = open_context()
    name, entry = _plan(ctx, opts, me)
    joined = _register(ctx, name, entry)
    _test_pause(ctx.environ)
    _pin(ctx, opts, me, joined, entry)
    _announce(ctx, me, joined)
    return EXIT_OK


def _plan(ctx: Context, opts: _Opts, me: str) -> tuple[str | None, dict[str, object]]:
    """(the name asked for, None to derive one; the registry entry to write), after the checks that run
    before anything is written: the name's shape, a linked slot, and the slot guard."""
    env = ctx.environ
    from sotd import handles
    from sotd.formats import registry, selffile

    lay = ctx.layout
    registry.ensure(lay)

    name = chosen_name(opts.name, env, ctx.name)
    if name is not None:
        handles.validate(name)
    expertise = expertise_of(
        opts.expertise if opts.expertise is not None else env.get("SOT_COMM_EXPERTISE", "")
    )

    # A slot (or self/) that is a symbolic link is refused before anything is written (issue 25).
    selffile.refuse_links(ctx.self_file)
    # The slot guard runs before anything is written: a row's slot that names another project's
    # session would hand this session that one's mail.
    if not opts.repin and not ctx.is_nopane:
        refusal = selffile.guard(ctx.self_file, ctx.repo, ctx.project_root)
        if refusal:
            raise slot_refused(refusal, me, ctx.repo, ctx.workspace_id)

    now = _clock.stamp()
    entry: dict[str, object] = {
        "host": ctx.host,
        "workspace_id": ctx.workspace_id,
        "repo": ctx.repo,
        "root": ctx.project_root,
        "expertise": expertise,
        "status": "idle",
        "joined": now,
        "last_seen": now,
    }
    return name, entry


def _register(ctx: Context, name: str | None, entry: dict[str, object]) -> _Joined:
    """Take the handle in one locked read-decide-write of the registry; what it learned."""
    from sotd import handles
    from sotd.formats import registry, reglock

    lay, env = ctx.layout, ctx.environ
    joined = _Joined()

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = registry.agents_of(doc)
        assert isinstance(agents, dict)
        joined.protocol = doc.get("protocol_version")
        if name is None:
            d = handles.derive(ctx.project_root, ctx.handle_host, agents, reclaim=True)
            joined.derived = d
            joined.name = d.handle
            if d.qualifier:
                held = agents.get(d.tier1)
                joined.tier1_live = registry.AgentRow(d.tier1, held).is_live()
        else:
            joined.name = name
        joined.previous = agents.get(joined.name)
        agents[joined.name] = dict(entry)
        joined.others = sorted(k for k in agents if k != joined.name)
        return True, None

    try:
        registry.update(lay, ctx.host, change, bound=reglock.wait_bound(dict(env)))
    except RegistryUnreadable as e:
        from sotd.cli.comm import hints

        raise RegistryUnreadable(
            "comm: the registry could not be read, so no handle was derived; nothing was written"
            if name is None
            else "FAILED: the registry could not be read or updated, so nothing was written",
            hint=e.hint if isinstance(e, RegistryLinked) else hints.registry_unreadable(),
        ) from None
    except HandleError as e:
        raise HandleError(e.message) from None  # its sentence alone, as 0.6.6 prints it
    derived = joined.derived
    if derived is not None and derived.note:
        err(derived.note)

    if joined.protocol not in (None, PROTOCOL_VERSION):
        err(
            f"WARNING: registry protocol v{joined.protocol} != client v{PROTOCOL_VERSION} — run "
            "ShipTools.update_comm() on all machines"
        )

    return joined


def _pin(ctx: Context, opts: _Opts, me: str, joined: _Joined, entry: dict[str, object]) -> None:
    """Write the handle to the slot (guarded again just before the rename unless ``--repin``); a slot
    claimed meanwhile takes the registry row back."""
    from sotd.formats import selffile

    chosen = joined.name
    guarded = not opts.repin and not ctx.is_nopane
    try:
        if guarded:
            selffile.write_guarded(ctx.self_file, chosen, ctx.repo, ctx.project_root)
        else:
            selffile.write(ctx.self_file, chosen, ctx.repo, ctx.project_root)
    except SlotClaimed as e:
        undone = _take_back(ctx, chosen, entry, joined.previous)
        raise SlotRefused(
            f"{me}: REFUSING to put a '{ctx.repo}' identity in the slot '{ctx.self_file}' — it was claimed "
            f"for another project while this join ran (reason above). {undone} Nothing was written to the "
            f"slot; run {me} from the session that owns it, or re-run with --repin if this row really is "
            f"'{ctx.repo}' now.",
            reason=e.message,
        ) from None
    except SotdError as e:
        raise JoinFailed(
            f"{me}: FATAL — joined as @{chosen} in the registry, but could not write the local self-file at "
            f"'{ctx.self_file}' (see reason above). Commands in this shell will not know their handle; fix "
            f"the folder and re-run {me} --name {chosen}.",
            reason=e.message,
        ) from None


def _announce(ctx: Context, me: str, joined: _Joined) -> None:
    """The inbox, the tier-1 warning, a row's declaration, and the three lines a join prints."""
    lay, env, chosen, derived = ctx.layout, ctx.environ, joined.name, joined.derived
    _touch_inbox(lay.inbox(chosen))

    if joined.tier1_live and derived is not None:
        err(tier1_warning(chosen, derived.tier1))

    from sotd import ancestry

    row = ancestry.row_named(dict(env), lay.home, ctx.host)
    if row:
        _declare(ctx, row, chosen, me)

    out(f"Joined sot-comm as @{chosen}  ({ctx.repo} on {ctx.host}).")
    out(f"  inbox: {lay.inbox_dir}/{chosen}.jsonl")
    out("Others registered: " + (", ".join(joined.others) if joined.others else "none"))


def _test_pause(env: Mapping[str, str]) -> None:
    """Test seam ``SOT_COMM_TEST_JOIN_PAUSE=<path>``: between the registry write and the self-file write,
    create ``<path>`` and wait until it is removed (at most 30 s), so a test can claim the slot in between.
    Unset (always, outside tests): nothing happens."""
    path = env.get("SOT_COMM_TEST_JOIN_PAUSE", "")
    if not path:
        return
    import time

    with open(path, "w") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 30.0
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def _take_back(ctx: Context, handle: str, written: Mapping[str, object], previous: object) -> str:
    """Undo this join's registry write after the slot was claimed under it; the sentence saying what became
    of the entry. The entry goes back to what it was before the join (removed when there was none), but
    only while it is still the one this join wrote (same host, row, root and ``joined`` stamp)."""
    from sotd.formats import registry, reglock

    mine = ("host", "workspace_id", "root", "joined")
    outcome: list[str] = []

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = registry.agents_of(doc)
        assert isinstance(agents, dict)
        cur = agents.get(handle)
        if not isinstance(cur, dict) or any(cur.get(k) != written.get(k) for k in mine):
            outcome.append("changed")
            return False, None
        if isinstance(previous, dict):
            agents[handle] = previous
        else:
            del agents[handle]
        return True, None

    try:
        registry.update(ctx.layout, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ)))
    except SotdError as e:
        return (
            f"The registry entry this join wrote for @{handle} could not be taken back ({e.message}); remove "
            f"it with comm-leave.sh --name {handle}."
        )
    if outcome:
        return f"The registry entry for @{handle} changed after this join wrote it, so it was left as it is."
    if isinstance(previous, dict):
        return f"The registry entry for @{handle} was put back as it was before this join."
    return f"The registry entry this join wrote for @{handle} was removed again."


def _touch_inbox(path: str) -> None:
    """Create the inbox file if missing; never through a link (``LinkRefused``, issue 25)."""
    from sotd import fsprim

    try:
        fd = fsprim.open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600, real_folder=True)
    except fsprim.LinkedPath as e:
        from sotd.formats.layout import link_refused

        raise link_refused(str(e.filename)) from None
    os.close(fd)


def _declare(ctx: Context, row: str, handle: str, me: str) -> None:
    """Tell the row's daemon which handle the row now holds (``agent.join``); a failure only warns."""
    from sotd.cli.comm import daemoncall
    from sotd.wire import payloads

    endpoint = daemoncall.local_endpoint(ctx.environ)
    if endpoint is None:
        err(
            f"{me}: WARNING — this shell's identity names row '{row}' but no daemon endpoint could be "
            f"resolved; the daemon won't learn '@{handle}' until the next comm-session-start."
        )
        return
    try:
        daemoncall.call(ctx, endpoint, payloads.AGENT_JOIN, payloads.agent_join_payload(row, handle))
    except SotdError:
        err(
            f"{me}: WARNING — could not declare '@{handle}' to the daemon (agent.join); it will retry at the "
            "next comm-session-start."
        )
