"""``sotd comm despawn`` (comm-despawn.sh): destroy a row, its self-file slot and its registry entry.

Behaviour 1.11. The row is found first by the registry entry's ``workspace_id``, else by a listed row
whose slug, label or id is the argument; nothing is destroyed until the daemon's declared host is known
(it names the slot to delete).

Remote despawn (issue 20): the target's daemon removes the row's slot in its own folder and prunes its
registry there; here, only a registry entry whose host is the daemon's is removed (never a same-named
entry of another box). stdout is line-buffered, so captured output keeps its order with stderr.

``run`` is parse → plan (``parse``, ``row_of_entry``, ``row_in_list``, ``unresolved``: pure, table-tested
in tests/unit/test_verb_plans.py) → act (the daemon's ops, the registry) → render. Every failure is
raised as a ``sotd.errors`` class that ``sotd.cli.main`` prints.
"""

from __future__ import annotations

import json
import os

from sotd.cli.comm import hints
from sotd.cli.comm.common import check_ancestry, err, line_buffered, open_context, out, prog
from sotd.errors import (
    EXIT_OK,
    AnswerWithoutPart,
    DespawnFailed,
    IdentityRefused,
    RegistryUnreadable,
    ScriptUsage,
    SotdError,
)
from sotd.wire import answers, payloads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def parse(argv: list[str], me: str) -> tuple[str, str]:
    """(the ``--endpoint`` named or "", the row asked for), read by the command table's one parser; a
    command line without exactly one row (or an ``--endpoint`` without its value) is refused with the
    usage (exit 1); pure."""
    from sotd import cmdtable

    parsed = cmdtable.parse("comm despawn", argv)
    pos = parsed.words if not parsed.missing else [*parsed.words, parsed.missing, ""]  # the usage below
    endpoint = parsed.opts.get("endpoint", "")
    if len(pos) != 1 or not pos[0]:
        raise ScriptUsage(f"usage: {me} <name|slug|workspace_id> [--endpoint ssh:target[/host]|unix:PATH]")
    return endpoint, pos[0]


def row_of_entry(entry: object, who: str) -> tuple[str | None, str | None]:
    """(the row's id, its handle) as the registry entry named ``who`` gives them (None: not given); pure."""
    if not isinstance(entry, dict):
        return None, None
    wid = entry.get("workspace_id")
    return (wid if isinstance(wid, str) and wid else None), who


def row_in_list(spaces: list[object], who: str) -> tuple[str | None, str | None]:
    """(id, handle) of the first listed row whose slug, label, id or agent name is ``who``; pure."""
    for w in spaces:
        if isinstance(w, dict) and who in (
            w.get("slug"),
            w.get("label"),
            w.get("workspace_id"),
            w.get("agent_name"),
        ):
            name = w.get("handle") or w.get("agent_name")
            return str(w.get("workspace_id")), (name if isinstance(name, str) and name else None)
    return None, None


def unresolved(
    who: str, endpoint: str, why: str, *, listed: bool, bare_entry_here: bool, silent: str
) -> DespawnFailed:
    """The refusal when ``who`` names no row: a bare registry entry here (leave it), the rows (listed but
    not found), or the daemon that could not list (``silent``: its next step); pure."""
    if listed and bare_entry_here:
        hint = f"  @{who} is only a registry entry here; remove it with comm-leave.sh --name {who}"
    elif listed:
        hint = hints.rows()
    else:
        hint = silent
    return DespawnFailed(
        f"FAILED: comm-despawn could not resolve '{who}' to a workspace via {endpoint}: {why}; nothing was despawned.",
        hint=hint,
    )


def run(argv: list[str]) -> int:
    me = prog("comm-despawn.sh", "despawn")
    line_buffered()
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"{me}: {why}")
    named, who = parse(argv, me)
    ctx = open_context()
    from sotd.cli.comm import daemoncall
    from sotd.formats import registry, reglock

    lay = ctx.layout
    try:
        doc = registry.read(lay)
        agents = registry.agents_of(doc) if doc is not None else {}
    except RegistryUnreadable:
        raise RegistryUnreadable("FAILED: the registry could not be read; nothing was despawned") from None
    endpoint = daemoncall.required_endpoint(named, ctx.environ)  # a refused endpoint is raised with its hint

    entry = agents.get(who)
    wid, handle = row_of_entry(entry, who)
    if wid is None:
        why = "no workspace has that name, slug or id"
        listed_ok = False
        try:
            listed = daemoncall.call(ctx, endpoint, payloads.WORKSPACE_LIST, {})
            spaces = listed.get("workspaces")
            if not isinstance(spaces, list):
                raise AnswerWithoutPart(f"workspace.list answered {json.dumps(listed, ensure_ascii=False)}")
            listed_ok = True
            wid, listed_handle = row_in_list(spaces, who)
            handle = handle or listed_handle
        except SotdError as e:
            why = e.message
        if wid is None:
            raise unresolved(
                who,
                endpoint,
                why,
                listed=listed_ok,
                bare_entry_here=isinstance(entry, dict) and entry.get("host") == ctx.host,
                silent="" if listed_ok else daemoncall.silent_hint(ctx.environ, endpoint),
            )

    try:
        _info, dhost = daemoncall.daemon_info(ctx, endpoint)
    except SotdError as e:
        raise DespawnFailed(
            f"FAILED: the daemon at {endpoint} did not answer version.query ({e.message}); nothing was despawned.",
            hint=daemoncall.silent_hint(ctx.environ, endpoint),
        ) from None
    if not dhost:
        raise DespawnFailed(
            f"FAILED: the daemon at {endpoint} did not declare its host, so the row's self-file slot cannot be "
            "named; nothing was despawned."
        )

    try:
        answer: dict[str, Any] = daemoncall.call(
            ctx, endpoint, payloads.WORKSPACE_DESTROY, payloads.workspace_id_payload(wid)
        )
    except SotdError as e:
        raise DespawnFailed(f"ERROR: workspace.destroy failed: {e.message}", hint=hints.rows()) from None
    payload = json.dumps(answer, ensure_ascii=False)
    if not answers.is_ok(answer):
        raise DespawnFailed(f"ERROR: workspace.destroy failed: {payload}", hint=hints.rows())
    out(f"Destroyed workspace: {payload}")
    try:
        os.unlink(lay.self_file(dhost, wid))
    except FileNotFoundError:
        pass
    except OSError as e:
        err(
            f"WARNING: the row's self file {lay.self_file(dhost, wid)} could not be removed: {e.strerror or e}"
        )
    if handle is None:
        return EXIT_OK
    gone_handle = handle

    def change(d: dict[str, object]) -> tuple[bool, bool]:
        entry = registry.agents_of(d).get(gone_handle)
        if dhost != ctx.host and not (isinstance(entry, dict) and entry.get("host") == dhost):
            return False, False  # another box's row: its own daemon pruned its folder's entry
        gone = registry.delete(d, gone_handle)
        return gone, gone

    try:
        registry.update(lay, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ)))
    except SotdError as e:
        raise DespawnFailed(
            f"ERROR: the registry entry @{handle} could not be removed: {e.message}",
            hint=hints.registry_entry_left(handle),
        ) from None
    out(f"Removed @{handle} from sot-comm registry")
    return EXIT_OK
