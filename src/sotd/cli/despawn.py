"""``sotd comm despawn`` (comm-despawn.sh): destroy a row, its self-file slot and its registry entry.

Behaviour 1.11. The row is found first by the registry entry's ``workspace_id``, else by a listed row
whose slug, label or id is the argument; nothing is destroyed until the daemon's declared host is known
(it names the slot to delete).

Remote despawn (issue 20): the target's daemon removes the row's slot in its own folder and prunes its
registry there; here, only a registry entry whose host is the daemon's is removed (never a same-named
entry of another box). stdout is line-buffered, so captured output keeps its order with stderr.
"""

from __future__ import annotations

import json
import os

from sotd.cli import hints
from sotd.cli.common import check_identity, err, open_context, out, prog
from sotd.errors import RegistryUnreadable, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def run(argv: list[str]) -> int:
    me = prog("comm-despawn.sh", "despawn")
    from sotd.cli.spawn import _line_buffered

    _line_buffered()
    why = check_identity()
    if why:
        err(f"{me}: {why}")
        return 1
    opts: dict[str, str] = {}
    pos: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--endpoint" and i + 1 < len(argv):
            opts["endpoint"] = argv[i + 1]
            i += 1
        elif a.startswith("--endpoint="):
            opts["endpoint"] = a.split("=", 1)[1]
        else:
            pos.append(a)
        i += 1
    if len(pos) != 1 or not pos[0]:
        err(f"usage: {me} <name|slug|workspace_id> [--endpoint ssh:target[/host]|unix:PATH]")
        return 1
    who = pos[0]
    ctx = open_context()
    from sotd.cli.spawn import _endpoint, ask, silent_hint
    from sotd.formats import registry, reglock

    lay = ctx.layout
    try:
        doc = registry.read(lay)
        agents = registry.agents_of(doc) if doc is not None else {}
    except RegistryUnreadable:
        err("FAILED: the registry could not be read; nothing was despawned")
        return 1
    endpoint = _endpoint(opts, ctx)  # a refused endpoint is raised with its hint
    if endpoint is None:
        raise SotdError(
            "ERROR: could not find the sotd daemon. Set --endpoint unix:/path or ssh:target[/host].",
            hint=f"or start this box's daemon: {hints.START_DAEMON}",
        )

    entry = agents.get(who)
    wid: str | None = None
    handle: str | None = who if isinstance(entry, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("workspace_id"), str) and entry["workspace_id"]:
        wid = entry["workspace_id"]
    listed_ok = False
    if wid is None:
        why = "no workspace has that name, slug or id"
        try:
            listed = ask(ctx, endpoint, "workspace.list", {})
            spaces = listed.get("workspaces")
            if not isinstance(spaces, list):
                raise SotdError(f"workspace.list answered {json.dumps(listed, ensure_ascii=False)}")
            listed_ok = True
            for w in spaces:
                if isinstance(w, dict) and who in (
                    w.get("slug"),
                    w.get("label"),
                    w.get("workspace_id"),
                    w.get("agent_name"),
                ):
                    wid = str(w.get("workspace_id"))
                    name = w.get("handle") or w.get("agent_name")
                    if handle is None and isinstance(name, str) and name:
                        handle = name
                    break
        except SotdError as e:
            why = e.message
        if wid is None:
            err(
                f"FAILED: comm-despawn could not resolve '{who}' to a workspace via {endpoint}: {why}; nothing was despawned."
            )
            if listed_ok and isinstance(entry, dict) and entry.get("host") == ctx.host:
                err(f"  @{who} is only a registry entry here; remove it with comm-leave.sh --name {who}")
            elif listed_ok:
                err(hints.rows())
            else:
                err(silent_hint(ctx, endpoint))
            return 1

    try:
        info = ask(ctx, endpoint, "version.query", {}).get("daemon")
    except SotdError as e:
        raise SotdError(
            f"FAILED: the daemon at {endpoint} did not answer version.query ({e.message}); nothing was despawned.",
            hint=silent_hint(ctx, endpoint),
        ) from None
    dhost = info.get("host") if isinstance(info, dict) else None
    if not isinstance(dhost, str) or not dhost:
        err(
            f"FAILED: the daemon at {endpoint} did not declare its host, so the row's self-file slot cannot be "
            "named; nothing was despawned."
        )
        return 1

    try:
        answer: dict[str, Any] = ask(ctx, endpoint, "workspace.destroy", {"workspace_id": wid})
    except SotdError as e:
        raise SotdError(f"ERROR: workspace.destroy failed: {e.message}", hint=hints.rows()) from None
    payload = json.dumps(answer, ensure_ascii=False)
    if answer.get("ok") is not True:
        raise SotdError(f"ERROR: workspace.destroy failed: {payload}", hint=hints.rows())
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
        return 0

    def change(d: dict[str, object]) -> tuple[bool, bool]:
        entry = registry.agents_of(d).get(handle)
        if dhost != ctx.host and not (isinstance(entry, dict) and entry.get("host") == dhost):
            return False, False  # another box's row: its own daemon pruned its folder's entry
        gone = registry.delete(d, handle)
        return gone, gone

    try:
        registry.update(lay, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ)))
    except SotdError as e:
        raise SotdError(
            f"ERROR: the registry entry @{handle} could not be removed: {e.message}",
            hint=hints.registry_entry_left(handle),
        ) from None
    out(f"Removed @{handle} from sot-comm registry")
    return 0
