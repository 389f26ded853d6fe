"""``sotd comm spawn`` (comm-spawn.sh): a new row running its own agent. Behaviour 1.10, 4.1, D16.

The provisional registry entry (local daemon only) is written under the registry lock together with the
name it claims, carries a nonce, and is rolled back only while it is still exactly what this spawn wrote;
``--task`` travels as ordinary mail once the row is ready. Spawn never destroys a row.

Remote spawn (``--endpoint ssh:…``, or ``$SOT_SPAWN_ENDPOINT``, naming another box; issue 20): the repo path
is the target's, so it is not checked here — it must be absolute, and the target's daemon resolves and
checks it (its refusal is printed); no provisional entry is written here (the row's own join lists it in
the target's folder); the task mail goes to the target's daemon and names the send command that daemon
reports (``send_command`` in ``version.query``), retried while the row has not joined yet; the despawn
hint carries the endpoint. stdout is line-buffered, so captured output keeps its order with stderr.
"""

from __future__ import annotations

import os
import sys

from sotd import _clock
from sotd.cli import hints
from sotd.cli.common import Context, check_identity, err, open_context, out, prog
from sotd.errors import HandleError, RegistryUnreadable, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OPTS = ("--name", "--agent", "--account", "--expertise", "--task", "--label", "--display-label", "--endpoint")
OPTS_EXTRA = ("--command",)  # ours: the agent's argv as shell words (a row may run any command)
ACCOUNT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


class SpawnFailed(Exception):
    """A failure already reported on stderr; the spawn exits 1 after its rollback."""


def parse(argv: list[str], me: str) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    pos: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        key, eq, val = a.partition("=")
        if key in OPTS or key in OPTS_EXTRA:
            if not eq:
                if i + 1 >= len(argv):
                    raise SotdError(f"usage: {me} [--name NAME] <repo-path> … ({a} needs a value)")
                i += 1
                val = argv[i]
            opts[key[2:]] = val
        else:
            pos.append(a)
        i += 1
    return opts, pos


def _usage(me: str) -> str:
    return (
        f'usage: {me} [--name NAME] <repo-path> [--agent claude|codex|none] [--account A] [--expertise "a, b"] '
        '[--task "do X"] [--label L] [--display-label L] [--endpoint ssh:target[/host]|unix:PATH] '
        "[--command 'argv words']"
    )


def _endpoint(opts: dict[str, str], ctx: Context) -> str | None:
    from sotd.cli import daemonlink
    from sotd.client import unix

    for value in (opts.get("endpoint", ""), ctx.environ.get("SOT_SPAWN_ENDPOINT", "")):
        if value:
            ep, discard = unix.parse_endpoint(value)
            if ep is None:
                raise SotdError(
                    f"comm-lib: refusing to substitute a local daemon for the endpoint you named: {value}",
                    hint=discard,
                )
            return value
    return daemonlink.needed_endpoint(ctx.environ)[0]  # starts this box's daemon when none runs


def silent_hint(ctx: Context, endpoint: str) -> str:
    """The next step when the daemon at ``endpoint`` did not answer: none runs there (start it), or one
    is there and silent (check it), or a far box's (check it there)."""
    from sotd.cli import autostart

    path = endpoint[5:] if endpoint.startswith("unix:") else ""
    if path and not autostart.is_socket(path):
        return hints.no_daemon(path, "no socket appeared there" if autostart.wanted(ctx.environ) else "")
    return hints.endpoint_silent(endpoint)


def ask(ctx: Context, endpoint: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    from sotd.cli import daemonlink

    return daemonlink.call(ctx, endpoint, op, payload)


def run(argv: list[str]) -> int:
    me = prog("comm-spawn.sh", "spawn")
    _line_buffered()
    why = check_identity()
    if why:
        err(f"{me}: {why}")
        return 1
    opts, pos = parse(argv, me)
    agent = opts.get("agent", "claude")
    if agent not in ("claude", "codex", "none"):  # none (ours): a plain --command; the text is 1.10's
        raise SotdError(
            f"ERROR: --agent must be claude or codex (got '{agent}')", hint=hints.options("spawn")
        )
    if agent == "none" and "command" not in opts:
        raise SotdError(
            "ERROR: --agent none runs a plain command: give it with --command 'argv words'",
            hint=hints.options("spawn"),
        )
    account = opts.get("account")
    if account is not None and not (account and account[0] not in "_-" and set(account) <= ACCOUNT_CHARS):
        raise SotdError(
            f"ERROR: --account must match ^[a-z0-9][a-z0-9_-]*$ (got '{account}')",
            hint=hints.options("spawn"),
        )
    if len(pos) == 2:  # legacy form: <name> <repo-path>
        if "name" in opts:
            raise SotdError(
                "ERROR: name given both as --name and positionally — pick one", hint=hints.options("spawn")
            )
        opts["name"], path = pos
    elif len(pos) == 1:
        path = pos[0]
    else:
        err(_usage(me))
        return 1
    remote = _names_remote(opts)
    if remote:
        root_or_none = _remote_root(path, remote)
        if root_or_none is None:
            return 1
        root = root_or_none
    elif not os.path.exists(path):
        raise SotdError(f"ERROR: repo path not found: {path}", hint=hints.options("spawn"))
    else:
        try:
            root = os.path.realpath(path, strict=True)
        except OSError as e:
            err(f"ERROR: could not resolve a canonical path for '{path}' ({e.strerror or e})")
            return 1
        if not os.path.isdir(root):
            raise SotdError(f"ERROR: repo path is not a folder: {path}", hint=hints.options("spawn"))
    base = os.path.basename(root)
    label = opts.get("label", base)
    if "display-label" in opts:
        label = opts["display-label"]
    elif label != base and not (label.startswith(base + "-") and len(label) > len(base) + 1):
        err(
            f"ERROR: --label '{label}' must be the repo folder's name '{base}' or '{base}-<suffix>' "
            "(use --display-label to show another label)"
        )
        return 1
    name = opts.get("name")
    if name is not None:
        from sotd import handles

        if not handles.is_valid(name):
            err(f'invalid handle: "{name}"')
            return 1
    command: list[str] | None = None
    if "command" in opts:
        import shlex

        try:
            command = shlex.split(opts["command"])
        except ValueError as e:
            raise SotdError(
                f"ERROR: --command is not a list of shell words: {e}", hint=hints.options("spawn")
            ) from None
        if not command:
            raise SotdError("ERROR: --command is empty", hint=hints.options("spawn"))

    ctx = open_context()
    from sotd.formats import registry

    lay = ctx.layout
    registry.ensure(lay)
    task = opts.get("task")
    spawner = ctx.name
    if task is not None:
        from sotd.cli.send import _routable

        try:
            doc = registry.read(lay)
            agents0: dict[str, object] | None = registry.agents_of(doc) if doc is not None else {}
            unreadable = False
        except RegistryUnreadable:
            agents0, unreadable = None, True
        problem = _routable(ctx, agents0, unreadable)
        if problem:
            err(f"FAILED: {problem}")
            return 1

    endpoint = _endpoint(opts, ctx)
    if endpoint is None:
        raise SotdError(
            "ERROR: could not find the sotd daemon. Set --endpoint unix:/path or ssh:target[/host].",
            hint=f"or start this box's daemon: {hints.START_DAEMON}",
        )
    try:
        info = ask(ctx, endpoint, "version.query", {}).get("daemon")
    except SotdError as e:
        raise SotdError(
            f"ERROR: the sotd daemon at {endpoint} did not answer version.query: {e.message}",
            hint=silent_hint(ctx, endpoint),
        ) from None
    dhost = info.get("host") if isinstance(info, dict) else None
    if not isinstance(dhost, str) or not dhost:
        err(f"comm-spawn: the daemon at {endpoint} did not declare its host; assuming it runs on this box")
        dhost = ctx.host
    local = dhost == ctx.host

    try:
        listed = ask(ctx, endpoint, "workspace.list", {})
    except SotdError as e:
        raise SotdError(
            f"ERROR: workspace.list did not answer via {endpoint} ({e.message}); nothing was spawned.",
            hint=silent_hint(ctx, endpoint),
        ) from None
    spaces = listed.get("workspaces")
    if not isinstance(spaces, list):
        err(f"ERROR: workspace.list failed via {endpoint}: {listed}; nothing was spawned.")
        return 1
    for w in spaces:
        if isinstance(w, dict) and w.get("project_root") == root:
            err(
                f"ERROR: {root} already has a workspace: '{w.get('label')}' (slug '{w.get('slug')}', id "
                f"{w.get('workspace_id')}); nothing was spawned."
            )
            err(
                "  One root = one workspace: for a second agent on this repo, make a git worktree "
                "(git worktree add ../<repo>-wt-<short>) and spawn that."
            )
            return 1

    nonce = f"{os.getpid()}-{os.urandom(4).hex()}-{os.urandom(4).hex()}"
    provisional = False
    try:
        name = _claim(ctx, root, name, opts=opts, nonce=nonce, local=local)
    except SpawnFailed:
        return 1
    provisional = local
    try:
        wid = _create(
            ctx, endpoint, label=label, root=root, agent=agent, name=name, account=account, command=command
        )
        _wait_ready(ctx, endpoint, wid, me, remote=not local)
    except SpawnFailed:
        if provisional:
            _rollback(ctx, name, root, nonce)
        return 1
    if task is not None and not local:
        text = _remote_task_text(spawner, task, info)
        failed = _deliver_remote_task(ctx, endpoint, name, text)
        if failed is not None:
            raise SotdError(
                f"ERROR: the task could not be queued for @{name}: {failed}",
                hint=hints.task_by_hand(name, task),
            )
        return 0
    if task is not None:
        text = (
            f"Task from @{spawner}: {task} — reply to @{spawner} via {lay.bin_dir}/comm-send.sh when done or "
            "blocked (say what you found or what you need)."
        )
        from sotd.cli.send import _Sender

        try:
            doc = registry.read(lay)
            agents = registry.agents_of(doc) if doc is not None else {}
        except RegistryUnreadable:
            agents = None
        failed = _Sender(ctx, agents).deliver(name, text, broadcast=False)
        if failed is not None:
            raise SotdError(
                f"ERROR: the task could not be queued for @{name}: {failed}",
                hint=hints.task_by_hand(name, task),
            )
    return 0


def _claim(
    ctx: Context, root: str, name: str | None, *, opts: dict[str, str], nonce: str, local: bool
) -> str:
    """The row's name: explicit (verbatim) or derived in fresh mode; on a local daemon claimed at once
    together with the provisional entry (one lock hold). Raises ``SpawnFailed``."""
    from sotd import handles
    from sotd.formats import registry, reglock

    lay = ctx.layout
    expertise = [p.strip() for p in opts.get("expertise", "").split(",") if p.strip()]
    picked: list[str] = []

    def change(doc: dict[str, object]) -> tuple[bool, str | None]:
        agents = registry.agents_of(doc)
        if name is not None:
            if name in agents:
                return (
                    False,
                    f"ERROR: agent '@{name}' already in registry — pick another name or comm-leave it first",
                )
            h = name
        else:
            d = handles.derive(root, ctx.handle_host, agents, reclaim=False)
            if d.note:
                err(d.note)
            h = d.handle
        picked.append(h)
        if not local:
            return False, None
        now = _clock.stamp()
        agents[h] = {
            "host": ctx.host,
            "workspace_id": "",
            "repo": os.path.basename(root),
            "root": root,
            "expertise": expertise,
            "status": "spawning",
            "joined": now,
            "last_seen": now,
            "nonce": nonce,
        }
        return True, None

    try:
        _doc, problem = registry.update(lay, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ)))
    except RegistryUnreadable:
        err("FAILED: the registry could not be read or updated, so nothing was written")
        raise SpawnFailed from None
    except HandleError as e:
        err(e.message)
        raise SpawnFailed from None
    except SotdError as e:
        err(e.message)
        raise SpawnFailed from None
    if problem:
        assert name is not None  # only an explicit name is refused; nothing was written, so no rollback
        raise SotdError(problem, hint=hints.name_taken(name))
    h = picked[-1]
    if local:
        fd = os.open(lay.inbox(h), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.close(fd)
    return h


def _create(
    ctx: Context,
    endpoint: str,
    *,
    label: str,
    root: str,
    agent: str,
    name: str,
    account: str | None,
    command: list[str] | None,
) -> str:
    payload: dict[str, Any] = {
        "label": label,
        "project_root": root,
        "autostart_claude": True,
        "agent": agent,
        "agent_name": name,
        "task": "",
        "boot": True,
    }
    if account is not None:
        payload["account"] = account
    if command is not None:
        payload["command"] = command
    try:
        answer = ask(ctx, endpoint, "workspace.create", payload)
    except SotdError as e:
        err(f"ERROR: workspace.create failed via {endpoint}")
        err(f"  daemon said: {e.message}")
        err(hints.rows())  # a second line; the rollback still runs before the exit, so it is not raised
        raise SpawnFailed from None
    wid = answer.get("workspace_id")
    if answer.get("ok") is not True or not isinstance(wid, str) or not wid:
        import json

        err(f"ERROR: workspace.create failed via {endpoint}")
        err(f"  daemon said: {json.dumps(answer, ensure_ascii=False)}")
        err(hints.rows())
        raise SpawnFailed
    out(
        f"Created workspace '{answer.get('label', label)}' (slug={answer.get('slug')}, id={wid}) via {endpoint}"
    )
    attach = answer.get("attach")
    if isinstance(attach, str) and attach:
        out(f"  watch it: {attach}")
    return wid


def _wait_ready(ctx: Context, endpoint: str, wid: str, me: str, *, remote: bool = False) -> None:
    import time

    try:
        limit = float(ctx.environ.get("SOT_COMM_SPAWN_CAPSULE_WAIT", "") or 90)
    except ValueError:
        limit = 90.0
    despawn = me.replace("spawn", "despawn")
    hint_tail = f" --endpoint {endpoint}" if remote else ""  # the hint must work as printed
    deadline = time.monotonic() + limit
    phase = "unknown"
    while True:
        try:
            listed = ask(ctx, endpoint, "workspace.list", {})
            for w in listed.get("workspaces") or []:
                if isinstance(w, dict) and w.get("workspace_id") == wid:
                    phase = str(w.get("phase"))
                    break
            else:
                phase = "gone"
        except SotdError:
            pass
        if phase == "ready":
            out(f"Capsule row ready (id={wid}, phase=ready)")
            return
        if phase in ("ended_no_respawn", "terminal", "foreign", "gone"):
            err(
                f"ERROR: capsule row {wid} reached phase {phase}, not ready; see it with {despawn} {wid}{hint_tail}"
            )
            raise SpawnFailed
        if time.monotonic() >= deadline:
            err(
                f"ERROR: capsule row {wid} was not ready within {limit:g}s (phase {phase}); it is left running — "
                f"remove it with {despawn} {wid}{hint_tail}"
            )
            raise SpawnFailed
        time.sleep(1.0)


def _rollback(ctx: Context, name: str, root: str, nonce: str) -> None:
    from sotd.formats import registry, reglock

    def change(doc: dict[str, object]) -> tuple[bool, int]:
        r = registry.del_if_provisional(doc, name, root, nonce)
        return r == 0, r

    try:
        _doc, rc = registry.update(ctx.layout, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ)))
    except SotdError as e:
        err(f"comm-spawn: FAILED to roll back @{name}: {e.message}")
        return
    if rc == 0:
        err(f"comm-spawn: rolled back provisional registry row for @{name} after a failed spawn")
    else:
        err(
            f"comm-spawn: did NOT roll back @{name} — its row no longer matches what this spawn wrote (another "
            "session may hold it now)"
        )


# ------------------------------------------------------------------------------------ remote spawn


def _line_buffered() -> None:
    """stdout written line by line, so ``> f 2>&1`` keeps each line's place among stderr's."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


def _names_remote(opts: dict[str, str]) -> str:
    """The ``ssh:`` endpoint this spawn names (``--endpoint``, else ``$SOT_SPAWN_ENDPOINT``), or ""."""
    value = opts.get("endpoint", "") or os.environ.get("SOT_SPAWN_ENDPOINT", "")
    return value if value.startswith("ssh:") else ""


def _remote_root(path: str, endpoint: str) -> str | None:
    """The repo path on the target, as given: absolute (this box cannot resolve another box's paths);
    the target's daemon checks it. None (reported) when it is not absolute."""
    if not os.path.isabs(path):
        raise SotdError(
            f"ERROR: a spawn on another box ({endpoint}) needs the repo's absolute path on that box "
            f"(got '{path}')",
            hint=hints.options("spawn"),
        )
    return os.path.normpath(path)


def _remote_task_text(spawner: str, task: str, info: object) -> str:
    """The task mail for a row on another box: the reply command is the one the target's daemon reports."""
    command = info.get("send_command") if isinstance(info, dict) else None
    if not isinstance(command, str) or not command:
        command = "comm-send.sh"
    return (
        f"Task from @{spawner}: {task} — reply to @{spawner} via {command} when done or blocked (say what "
        "you found or what you need)."
    )


def _deliver_remote_task(ctx: Context, endpoint: str, name: str, text: str) -> str | None:
    """File the task in the target's folder through its daemon; while the row has not joined yet (its
    handle is not listed there) try again each second, within the ready wait."""
    import time

    from sotd.cli.send import _Sender

    try:
        limit = float(ctx.environ.get("SOT_COMM_SPAWN_CAPSULE_WAIT", "") or 90)
    except ValueError:
        limit = 90.0
    deadline = time.monotonic() + limit
    sender = _Sender(ctx, {})
    while True:
        failed = sender._file(endpoint, name, text, False)
        if failed is None or not failed.startswith("no box knows that handle") or time.monotonic() > deadline:
            return failed
        time.sleep(1.0)
