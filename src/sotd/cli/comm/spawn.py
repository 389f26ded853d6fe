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

``run`` is parse → plan (``plan_args``, ``plan_label``, ``workspace_taken``, ``phase_verdict``: pure,
table-tested in tests/unit/test_verb_plans.py) → act (the daemon's ops, the registry) → render. Every
failure is raised as a ``sotd.errors`` class; a rollback's line rides on the error (``after``).
"""

from __future__ import annotations

import os

from sotd import _clock, cmdtable
from sotd.cli.comm import hints
from sotd.cli.comm.common import Context, check_ancestry, err, line_buffered, open_context, out, prog
from sotd.errors import (
    EXIT_OK,
    BadArgument,
    HandleError,
    IdentityRefused,
    RegistryUnreadable,
    ScriptUsage,
    SotdError,
    SpawnFailed,
    TaskNotQueued,
)
from sotd.wire import answers, payloads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

OPTS_EXTRA = ("--command",)  # ours: the agent's argv as shell words (a row may run any command)
OPTS = tuple(f for f in cmdtable.flags("comm spawn") if f not in OPTS_EXTRA)  # behaviour 1.10's
ACCOUNT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
AGENTS = ("claude", "codex", "none")  # none (ours): a plain --command; the refusal's text is 1.10's


def parse(argv: list[str], me: str) -> tuple[dict[str, str], list[str]]:
    """(options, positional words), read by the command table's one parser (``sotd.cmdtable.parse``)."""
    parsed = cmdtable.parse("comm spawn", argv)
    if parsed.missing:
        raise ScriptUsage(f"usage: {me} [--name NAME] <repo-path> … ({parsed.missing} needs a value)")
    return parsed.opts, parsed.words


def usage_line(me: str) -> str:
    return (
        f'usage: {me} [--name NAME] <repo-path> [--agent claude|codex|none] [--account A] [--expertise "a, b"] '
        '[--task "do X"] [--label L] [--display-label L] [--endpoint ssh:target[/host]|unix:PATH] '
        "[--command 'argv words']"
    )


class SpawnArgs:
    """What the command line asks for, checked: the plan's input to the acts."""

    __slots__ = ("account", "agent", "command", "name", "path")

    def __init__(self, agent: str, account: str | None, name: str | None, path: str) -> None:
        self.agent = agent
        self.account = account
        self.name = name
        self.path = path
        self.command: list[str] | None = None


def plan_args(opts: dict[str, str], pos: list[str], me: str) -> SpawnArgs:
    """The options' refusals in behaviour 1.10's order (agent, account, the positional words); pure."""
    agent = opts.get("agent", "claude")
    if agent not in AGENTS:
        raise BadArgument(
            f"ERROR: --agent must be claude or codex (got '{agent}')", hint=hints.options("spawn")
        )
    if agent == "none" and "command" not in opts:
        raise BadArgument(
            "ERROR: --agent none runs a plain command: give it with --command 'argv words'",
            hint=hints.options("spawn"),
        )
    account = opts.get("account")
    if account is not None and not (account and account[0] not in "_-" and set(account) <= ACCOUNT_CHARS):
        raise BadArgument(
            f"ERROR: --account must match ^[a-z0-9][a-z0-9_-]*$ (got '{account}')",
            hint=hints.options("spawn"),
        )
    name = opts.get("name")
    if len(pos) == 2:  # legacy form: <name> <repo-path>
        if name is not None:
            raise BadArgument(
                "ERROR: name given both as --name and positionally — pick one", hint=hints.options("spawn")
            )
        name, path = pos
    elif len(pos) == 1:
        path = pos[0]
    else:
        raise ScriptUsage(usage_line(me))
    return SpawnArgs(agent, account, name, path)


def plan_label(opts: dict[str, str], base: str) -> str:
    """The row's label: ``--display-label``, else ``--label`` (the folder's name or ``<name>-<suffix>``),
    else the folder's name; pure."""
    label = opts.get("label", base)
    if "display-label" in opts:
        return opts["display-label"]
    if label != base and not (label.startswith(base + "-") and len(label) > len(base) + 1):
        raise BadArgument(
            f"ERROR: --label '{label}' must be the repo folder's name '{base}' or '{base}-<suffix>' "
            "(use --display-label to show another label)"
        )
    return label


def plan_command(opts: dict[str, str]) -> list[str] | None:
    """``--command``'s shell words as the row's argv (None: not given); pure."""
    if "command" not in opts:
        return None
    import shlex

    try:
        command = shlex.split(opts["command"])
    except ValueError as e:
        raise BadArgument(
            f"ERROR: --command is not a list of shell words: {e}", hint=hints.options("spawn")
        ) from None
    if not command:
        raise BadArgument("ERROR: --command is empty", hint=hints.options("spawn"))
    return command


def workspace_taken(spaces: list[object], root: str) -> SpawnFailed | None:
    """One root = one workspace: the refusal when a listed workspace already has ``root``; pure."""
    for w in spaces:
        if isinstance(w, dict) and w.get("project_root") == root:
            return SpawnFailed(
                f"ERROR: {root} already has a workspace: '{w.get('label')}' (slug '{w.get('slug')}', id "
                f"{w.get('workspace_id')}); nothing was spawned.",
                hint="  One root = one workspace: for a second agent on this repo, make a git worktree "
                "(git worktree add ../<repo>-wt-<short>) and spawn that.",
            )
    return None


READY = "ready"
WAIT = "wait"
FAILED_PHASES = ("ended_no_respawn", "terminal", "foreign", "gone")
WAITING_MAX = 200  # ``phase_of``, ``waiting_of``: a far daemon's text is cut to this


def _listed_row(listed: dict[str, Any], wid: str) -> dict[str, Any] | None:
    """Row ``wid``'s entry in a ``workspace.list`` answer (None: not listed, or no list at all); pure."""
    rows = listed.get("workspaces")
    for w in rows if isinstance(rows, list) else []:
        if isinstance(w, dict) and w.get("workspace_id") == wid:
            return w
    return None


def phase_of(listed: dict[str, Any], wid: str) -> str:
    """The phase ``workspace.list`` shows for row ``wid`` ("gone": not listed); pure. A daemon's text, so
    shown inert and cut like ``waiting_of``'s (the phases sotd names are plain words, kept as they are)."""
    from sotd.text import inert

    w = _listed_row(listed, wid)
    return "gone" if w is None else inert(str(w.get("phase")))[:WAITING_MAX]


def waiting_of(listed: dict[str, Any], wid: str) -> str:
    """Why row ``wid``'s screen does not read ready yet, as ``workspace.list`` says (``""``: not said); pure.
    A daemon's text: shown inert, on one line, at most ``WAITING_MAX`` characters."""
    from sotd.text import inert

    why = (_listed_row(listed, wid) or {}).get("waiting_on")
    return inert(why)[:WAITING_MAX] if isinstance(why, str) else ""


def phase_verdict(phase: str, *, past_deadline: bool) -> str:
    """``READY``, ``WAIT`` (ask again in a second), or the failure's kind ("phase" or "timeout"); pure."""
    if phase == "ready":
        return READY
    if phase in FAILED_PHASES:
        return "phase"
    return "timeout" if past_deadline else WAIT


def task_text(spawner: str, task: str, send_command: str) -> str:
    """The ``--task`` mail: the task, and the command the row replies with."""
    return (
        f"Task from @{spawner}: {task} — reply to @{spawner} via {send_command} when done or blocked (say what "
        "you found or what you need)."
    )


def remote_send_command(info: object) -> str:
    """The reply command for a row on another box: the one the target's daemon reports; pure."""
    command = info.get("send_command") if isinstance(info, dict) else None
    return command if isinstance(command, str) and command else "comm-send.sh"


def names_remote(opts: dict[str, str], environ: Mapping[str, str]) -> str:
    """The ``ssh:`` endpoint this spawn names (``--endpoint``, else ``$SOT_SPAWN_ENDPOINT``), or ""; pure."""
    value = opts.get("endpoint", "") or environ.get("SOT_SPAWN_ENDPOINT", "")
    return value if value.startswith("ssh:") else ""


def remote_root(path: str, endpoint: str) -> str:
    """The repo path on the target, as given: absolute (this box cannot resolve another box's paths);
    the target's daemon checks it; pure."""
    if not os.path.isabs(path):
        raise BadArgument(
            f"ERROR: a spawn on another box ({endpoint}) needs the repo's absolute path on that box (got '{path}')",
            hint=hints.options("spawn"),
        )
    return os.path.normpath(path)


def local_root(path: str) -> str:
    """The repo's canonical path on this box (it must be a folder)."""
    if not os.path.exists(path):
        raise BadArgument(f"ERROR: repo path not found: {path}", hint=hints.options("spawn"))
    try:
        root = os.path.realpath(path, strict=True)
    except OSError as e:
        raise BadArgument(
            f"ERROR: could not resolve a canonical path for '{path}' ({e.strerror or e})"
        ) from None
    if not os.path.isdir(root):
        raise BadArgument(f"ERROR: repo path is not a folder: {path}", hint=hints.options("spawn"))
    return root


def ask(ctx: Context, endpoint: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    from sotd.cli.comm import daemoncall

    return daemoncall.call(ctx, endpoint, op, payload)


def run(argv: list[str]) -> int:
    me = prog("comm-spawn.sh", "spawn")
    line_buffered()
    why = check_ancestry()
    if why:
        raise IdentityRefused(f"{me}: {why}")
    opts, pos = parse(argv, me)
    args = plan_args(opts, pos, me)
    remote = names_remote(opts, os.environ)
    root = remote_root(args.path, remote) if remote else local_root(args.path)
    label = plan_label(opts, os.path.basename(root))
    if args.name is not None:
        from sotd import handles

        if not handles.is_valid(args.name):
            raise HandleError(f'invalid handle: "{args.name}"')
    args.command = plan_command(opts)

    ctx = open_context()
    from sotd.cli.comm import daemoncall, routing
    from sotd.formats import registry

    registry.ensure(ctx.layout)
    task = opts.get("task")
    if task is not None:
        problem = routing.routable(ctx, routing.read_agents(ctx.layout))
        if problem:
            raise SpawnFailed(f"FAILED: {problem}")

    endpoint = daemoncall.required_endpoint(opts.get("endpoint", ""), ctx.environ)
    try:
        info, dhost = daemoncall.daemon_info(ctx, endpoint)
    except SotdError as e:
        raise SpawnFailed(
            f"ERROR: the sotd daemon at {endpoint} did not answer version.query: {e.message}",
            hint=daemoncall.silent_hint(ctx.environ, endpoint),
        ) from None
    if not dhost:
        err(f"comm-spawn: the daemon at {endpoint} did not declare its host; assuming it runs on this box")
        dhost = ctx.host
    local = dhost == ctx.host

    try:
        listed = ask(ctx, endpoint, payloads.WORKSPACE_LIST, {})
    except SotdError as e:
        raise SpawnFailed(
            f"ERROR: workspace.list did not answer via {endpoint} ({e.message}); nothing was spawned.",
            hint=daemoncall.silent_hint(ctx.environ, endpoint),
        ) from None
    spaces = listed.get("workspaces")
    if not isinstance(spaces, list):
        raise SpawnFailed(f"ERROR: workspace.list failed via {endpoint}: {listed}; nothing was spawned.")
    taken = workspace_taken(spaces, root)
    if taken is not None:
        raise taken

    nonce = f"{os.getpid()}-{os.urandom(4).hex()}-{os.urandom(4).hex()}"
    name = _claim(ctx, root, args.name, opts=opts, nonce=nonce, local=local)
    try:
        wid = _create(ctx, endpoint, label=label, root=root, args=args, name=name)
        _wait_ready(ctx, endpoint, wid, me, remote=not local)
    except SpawnFailed as e:
        if local:  # the provisional entry this spawn wrote goes, while it is still exactly that
            e.after = (*e.after, _rollback(ctx, name, root, nonce))
        raise
    if task is None:
        return EXIT_OK
    if not local:
        failed = _deliver_remote_task(
            ctx, endpoint, name, task_text(ctx.name, task, remote_send_command(info))
        )
    else:
        text = task_text(ctx.name, task, f"{ctx.layout.bin_dir}/comm-send.sh")
        failed = routing.Sender(ctx, routing.read_agents(ctx.layout)).deliver(name, text, broadcast=False)
    if failed is not None:
        raise TaskNotQueued(
            f"ERROR: the task could not be queued for @{name}: {failed}", hint=hints.task_by_hand(name, task)
        )
    return EXIT_OK


def _claim(
    ctx: Context, root: str, name: str | None, *, opts: dict[str, str], nonce: str, local: bool
) -> str:
    """The row's name: explicit (verbatim) or derived in fresh mode; on a local daemon claimed at once
    together with the provisional entry (one lock hold). Nothing is written when it fails."""
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
        raise RegistryUnreadable(
            "FAILED: the registry could not be read or updated, so nothing was written"
        ) from None
    except SotdError as e:
        raise SpawnFailed(e.message) from None  # a handle none derivable, the lock, a write
    if problem:
        assert name is not None  # only an explicit name is refused; nothing was written, so no rollback
        raise SpawnFailed(problem, hint=hints.name_taken(name))
    h = picked[-1]
    if local:
        fd = os.open(lay.inbox(h), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.close(fd)
    return h


def create_payload(*, label: str, root: str, args: SpawnArgs, name: str) -> dict[str, Any]:
    """``workspace.create``'s payload for these arguments; pure."""
    return payloads.workspace_create_payload(
        label=label,
        project_root=root,
        agent=args.agent,
        agent_name=name,
        account=args.account,
        command=args.command,
    )


def _create(ctx: Context, endpoint: str, *, label: str, root: str, args: SpawnArgs, name: str) -> str:
    try:
        answer = ask(
            ctx,
            endpoint,
            payloads.WORKSPACE_CREATE,
            create_payload(label=label, root=root, args=args, name=name),
        )
    except SotdError as e:
        raise SpawnFailed(
            f"ERROR: workspace.create failed via {endpoint}\n  daemon said: {e.message}", hint=hints.rows()
        ) from None
    wid = answer.get("workspace_id")
    if not answers.is_ok(answer) or not isinstance(wid, str) or not wid:
        import json

        raise SpawnFailed(
            f"ERROR: workspace.create failed via {endpoint}\n  daemon said: {json.dumps(answer, ensure_ascii=False)}",
            hint=hints.rows(),
        )
    out(
        f"Created workspace '{answer.get('label', label)}' (slug={answer.get('slug')}, id={wid}) via {endpoint}"
    )
    attach = answer.get("attach")
    if isinstance(attach, str) and attach:
        out(f"  watch it: {attach}")
    return wid


def _ready_wait(ctx: Context) -> float:
    try:
        return float(ctx.environ.get("SOT_COMM_SPAWN_CAPSULE_WAIT", "") or 90)
    except ValueError:
        return 90.0


def _wait_ready(ctx: Context, endpoint: str, wid: str, me: str, *, remote: bool = False) -> None:
    import time

    limit = _ready_wait(ctx)
    despawn = me.replace("spawn", "despawn")
    hint_tail = f" --endpoint {endpoint}" if remote else ""  # the hint must work as printed
    deadline = time.monotonic() + limit
    phase = "unknown"
    waiting = ""
    while True:
        try:
            listed = ask(ctx, endpoint, payloads.WORKSPACE_LIST, {})
            phase, waiting = phase_of(listed, wid), waiting_of(listed, wid)
        except SotdError:
            pass
        verdict = phase_verdict(phase, past_deadline=time.monotonic() >= deadline)
        if verdict == READY:
            out(f"Capsule row ready (id={wid}, phase=ready)")
            return
        if verdict == "phase":
            raise SpawnFailed(
                f"ERROR: capsule row {wid} reached phase {phase}, not ready; see it with {despawn} {wid}{hint_tail}"
            )
        if verdict == "timeout":
            # the screen's reason inside the parentheses: the hint ends the line, so it works as printed
            seen = f"; its screen: {waiting}" if waiting else ""
            raise SpawnFailed(
                f"ERROR: capsule row {wid} was not ready within {limit:g}s (phase {phase}{seen}); it is left "
                f"running — remove it with {despawn} {wid}{hint_tail}"
            )
        time.sleep(1.0)


def _rollback(ctx: Context, name: str, root: str, nonce: str) -> str:
    """Take back the provisional entry while it is still what this spawn wrote; the line saying what
    became of it."""
    from sotd.formats import registry, reglock

    def change(doc: dict[str, object]) -> tuple[bool, int]:
        r = registry.del_if_provisional(doc, name, root, nonce)
        return r == 0, r

    try:
        _doc, rc = registry.update(ctx.layout, ctx.host, change, bound=reglock.wait_bound(dict(ctx.environ)))
    except SotdError as e:
        return f"comm-spawn: FAILED to roll back @{name}: {e.message}"
    if rc == 0:
        return f"comm-spawn: rolled back provisional registry row for @{name} after a failed spawn"
    return (
        f"comm-spawn: did NOT roll back @{name} — its row no longer matches what this spawn wrote (another "
        "session may hold it now)"
    )


def _deliver_remote_task(ctx: Context, endpoint: str, name: str, text: str) -> str | None:
    """File the task in the target's folder through its daemon; while the row has not joined yet (its
    handle is not listed there) try again each second, within the ready wait."""
    import time

    from sotd.cli.comm.routing import Sender

    deadline = time.monotonic() + _ready_wait(ctx)
    sender = Sender(ctx, {})
    while True:
        failed = sender.file_at(endpoint, name, text, broadcast=False)
        if failed is None or not failed.startswith("no box knows that handle") or time.monotonic() > deadline:
            return failed
        time.sleep(1.0)
