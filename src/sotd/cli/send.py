"""``sotd comm send`` (comm-send.sh): one message, one answer. Behaviour 1.3, 1.4; seed 000 "The wire".

The one result: ``filed -> @h`` (indented when this box's own folder took it) and exit 0, or
``FAILED -> @h: <reason>`` and exit 1. Nothing is queued and no second route is tried; a send never types
into any terminal.
"""

from __future__ import annotations

from sotd import _clock
from sotd.cli.common import Context, check_identity, err, open_context, out, prog
from sotd.errors import RegistryUnreadable, SotdError


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


class _Sender:
    """One send's shared state: who sends, the registry as read once, and how this box files."""

    __slots__ = ("agents", "ctx", "hint", "local", "nfs", "repo")

    def __init__(self, ctx: Context, agents: dict[str, object] | None) -> None:
        self.ctx = ctx
        self.hint: str | None = None  # the next step of the last failure, when it has one (cli/hints.py)
        self.agents = agents
        from sotd.text import carry_os

        self.repo = carry_os(ctx.repo)  # a folder name's bytes, carried as the reference's jq does
        from sotd.formats import lockmanager

        own = lockmanager.own_lock(ctx.layout)
        self.local = own is not None
        self.nfs = lockmanager.is_nfs(own) if own else False

    def take_hint(self) -> str | None:
        """The last failure's hint, cleared for the next copy."""
        hint, self.hint = self.hint, None
        return hint

    def deliver(self, target: str, text: str, *, broadcast: bool) -> str | None:
        """File one copy; None when filed, else the FAILED reason. Prints the ``filed`` line itself."""
        from sotd import handles
        from sotd.formats import registry

        if self.agents is None:
            return f"the registry could not be read, so @{target} could not be routed; nothing was sent"
        if not handles.is_valid(target):
            return f'not a handle: "{target}"'
        verdict = registry.AgentRow.of(self.agents, target).verdict()
        if verdict == registry.UNLISTED:
            if broadcast:
                return f"no such handle: {target}"
            return self.relay(target, text)
        if verdict == registry.NOT_LIVE:
            return f"no live session holds @{target}"
        if not self.local:
            return self.via_daemon(target, text, broadcast=broadcast)
        from sotd.formats import inbox

        line = inbox.encode_line(self.ctx.name, "" if broadcast else target, self.repo, text, _clock.stamp())
        try:
            inbox.append(
                self.ctx.layout,
                target,
                line,
                nfs=self.nfs,
                bound=inbox.inbox_wait(self.ctx.environ),
                note=err,
            )
        except SotdError as e:
            return e.message
        out(f"  filed -> @{target}")
        return None

    def via_daemon(self, target: str, text: str, *, broadcast: bool) -> str | None:
        """This box cannot take the inbox lock itself: hand the line to its daemon as ``comm.file``."""
        from sotd.cli import daemonlink

        endpoint, start_failed = daemonlink.needed_endpoint(self.ctx.environ)
        if endpoint is None:
            from sotd.cli import hints
            from sotd.runtime import default_socket

            env = self.ctx.environ
            self.hint = hints.no_daemon(env.get("SOT_SOCKET") or default_socket(env), start_failed)
            return "this box cannot take the inbox lock itself, and no daemon is reachable to file it"
        failed = self._file(endpoint, target, text, broadcast)
        if failed is not None and failed.startswith("the daemon did not answer at "):
            from sotd.cli import hints

            self.hint = hints.daemon_silent()
        return failed

    def relay(self, target: str, text: str) -> str | None:
        """A handle this folder does not list: the relay endpoint (never the local daemon) files it."""
        from sotd.cli import daemonlink

        endpoint = daemonlink.relay_endpoint(self.ctx.environ)
        if endpoint is None:
            from sotd import runtime, topology
            from sotd.cli import hints

            env = self.ctx.environ
            own = env.get("SOT_SOCKET") or runtime.default_socket(env)
            _none, why = topology.relay_endpoint_or_reason(env, runtime.self_host(env), own)
            self.hint = hints.not_registered(target, self.ctx.layout.registry, why)
            return (
                "no sotd daemon found; set SOT_RELAY_ENDPOINT=unix:/path, ssh:target[/host], or (Windows) "
                "pipe:name"
            )
        return self._file(endpoint, target, text, False)

    def _file(self, endpoint: str, target: str, text: str, broadcast: bool) -> str | None:
        from sotd.cli import daemonlink
        from sotd.wire import payloads

        # ``expires``: when this send stops waiting (D6: 5 s from the dial), so a daemon that gets the
        # frame late refuses it rather than file mail this command already reported as FAILED
        expires = round(_clock.now() + daemonlink.VERDICT_S, 3)
        payload = payloads.comm_file_payload(
            self.ctx.name, target, text, broadcast=broadcast, expires=expires
        )
        try:
            answer = daemonlink.call(self.ctx, endpoint, payloads.COMM_FILE, payload)
        except SotdError as e:
            return e.message
        if answer.get("ok") is True:
            out(f"filed -> @{target}")
            return None
        error = answer.get("error")
        if isinstance(error, str) and error:
            return error
        return f"the daemon answered neither ok nor a refusal: {answer}"


def _routable(ctx: Context, agents: dict[str, object] | None, unreadable: bool) -> str | None:
    """The sender must be verifiable: a handle, a registry row, and that row's root is this project."""
    name = ctx.name
    bindir = ctx.layout.bin_dir
    if not name:
        return (
            "your sot-comm identity did not resolve — refusing to send with no verifiable from-handle (a "
            "reply would silently misroute). Join first: comm-join.sh --name <canonical-handle> (never a bare "
            "comm-join.sh if you previously held one — see the sot-session-start skill's recovery recipe)."
        )
    if unreadable or agents is None:
        return f"the registry could not be read, so identity @{name} is unverified; nothing was sent"
    row = agents.get(name)
    if not isinstance(row, dict):
        return (
            f"your identity @{name} has no registry row; reclaim it with {bindir}/comm-join.sh --name {name}"
        )
    root = row.get("root")
    if root != ctx.project_root:
        return (
            f"your sot-comm identity '@{name}' is registered to a DIFFERENT project's root ('{root}') — refusing "
            f"to send with a misrouting from-handle. Reclaim it: {bindir}/comm-join.sh --name {name}"
        )
    return None


def run(argv: list[str]) -> int:
    broadcast, target, text = parse(argv)
    label = "--broadcast" if broadcast else f"@{target or ''}"
    if not text:
        err(f'usage: {prog("comm-send.sh", "send")} @name "msg" | --broadcast "msg"')
        return 1
    if not broadcast and target is None:
        err("no target; use @name or --broadcast")
        return 1
    why = check_identity()
    if why:
        err(f"FAILED -> {label}: {why}")
        return 1
    ctx = open_context()
    from sotd.formats import registry

    lay = ctx.layout
    registry.ensure(lay)
    agents: dict[str, object] | None
    try:
        doc = registry.read(lay)
        agents = registry.agents_of(doc) if doc is not None else {}
        unreadable = False
    except RegistryUnreadable:
        agents, unreadable = None, True
    if broadcast and unreadable:
        _unreadable("FAILED -> --broadcast: the registry could not be read; nothing was sent")
    problem = _routable(ctx, agents, unreadable)
    if problem:
        if unreadable:
            _unreadable(f"FAILED -> {label}: {problem}")
        err(f"FAILED -> {label}: {problem}")
        return 1
    sender = _Sender(ctx, agents)
    if broadcast:
        status = _broadcast(sender, text)
    else:
        assert target is not None
        failed = sender.deliver(target, text, broadcast=False)
        _touch_self(ctx)
        if failed is not None:
            raise SotdError(f"FAILED -> @{target}: {failed}", hint=sender.hint, code="send_failed")
        return 0
    _touch_self(ctx)
    return status


def _unreadable(line: str) -> None:
    from sotd.cli import hints

    raise SotdError(line, hint=hints.registry_unreadable(), code="registry_unreadable")


def _broadcast(sender: _Sender, text: str) -> int:
    agents = sender.agents
    if agents is None:
        err("FAILED -> --broadcast: the registry could not be read; nothing was sent")
        return 1
    targets = sorted(k for k in agents if k != sender.ctx.name)
    ok = 0
    hints: list[str] = []  # each next step once, after the FAILED lines (the summary stays last)
    for t in targets:
        failed = sender.deliver(t, text, broadcast=True)
        hint = sender.take_hint()
        if failed is None:
            ok += 1
        else:
            err(f"FAILED -> @{t}: {failed}")
            if hint and hint not in hints:
                hints.append(hint)
    for hint in hints:
        err(hint)
    if ok == len(targets):
        out(f"Broadcast to {ok} agent(s).")
        return 0
    out(f"Broadcast to {ok} of {len(targets)} agent(s).")
    return 1


def _touch_self(ctx: Context) -> None:
    """Best-effort ``last_seen`` of the sender's own row, 1 s lock bound; never changes the exit code."""
    from sotd.formats import registry

    try:
        registry.touch(ctx.layout, ctx.host, ctx.name, bound=1.0)
    except (SotdError, OSError):
        pass
