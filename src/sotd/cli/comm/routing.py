"""``sotd/cli/comm/routing.py``: routing one message copy, shared by send and spawn's ``--task``. Behaviour 1.3,
1.4; seed 000 "The wire".

Guarantee: a copy is filed once, by one route, or its FAILED reason is returned: a listed live handle goes
into this box's inbox (or, when this box cannot take the inbox lock itself, to its daemon as ``comm.file``);
a handle this folder does not list goes to the relay endpoint, never to the local daemon; nothing is
queued and no second route is tried. ``routable`` is the one check that the sender's own handle can be
verified before any copy is filed.
What would break it: a second route tried after a failure (mail filed twice), or a send whose sender has
no registry row of this project (a reply would misroute).

Imported on the send hot path: only sotd leaves at import time, the rest lazily.
"""

from __future__ import annotations

from sotd import _clock
from sotd.cli.comm.common import err, out
from sotd.errors import RegistryLinked, RegistryUnreadable, SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.comm.common import Context
    from sotd.formats.layout import Layout


def read_agents(layout: Layout) -> dict[str, object] | None:
    """The registry's agents as read once: {} when there is no registry, None when it cannot be read."""
    from sotd.formats import registry

    try:
        doc = registry.read(layout)
    except RegistryLinked:
        raise  # said by the send as its FAILED line (issue 25)
    except RegistryUnreadable:
        return None
    return registry.agents_of(doc) if doc is not None else {}


def routable(ctx: Context, agents: dict[str, object] | None) -> str | None:
    """None when the sender is verifiable (a handle, a registry row, and that row's root is this project),
    else the reason a send must not go (``agents`` None: the registry could not be read)."""
    name = ctx.name
    bindir = ctx.layout.bin_dir
    if not name:
        return (
            "your sot-comm identity did not resolve — refusing to send with no verifiable from-handle (a "
            "reply would silently misroute). Join first: comm-join.sh --name <canonical-handle> (never a bare "
            "comm-join.sh if you previously held one — see the sot-session-start skill's recovery recipe)."
        )
    if agents is None:
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


class Sender:
    """One send's shared state: who sends, the registry as read once, and how this box files."""

    __slots__ = ("agents", "ctx", "hint", "local", "nfs", "repo")

    def __init__(self, ctx: Context, agents: dict[str, object] | None) -> None:
        self.ctx = ctx
        self.hint: str | None = None  # the next step of the last failure, when it has one (cli/comm/hints.py)
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

        if self.agents is None:
            return f"the registry could not be read, so @{target} could not be routed; nothing was sent"
        if not handles.is_valid(target):
            return f'not a handle: "{target}"'
        from sotd.formats import registry

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
        from sotd.cli.comm import daemoncall

        endpoint, start_failed = daemoncall.needed_endpoint(self.ctx.environ)
        if endpoint is None:
            from sotd.cli.comm import hints
            from sotd.runtime import default_socket

            env = self.ctx.environ
            self.hint = hints.no_daemon(env.get("SOT_SOCKET") or default_socket(env), start_failed)
            return "this box cannot take the inbox lock itself, and no daemon is reachable to file it"
        failed = self.file_at(endpoint, target, text, broadcast=broadcast)
        if failed is not None and failed.startswith("the daemon did not answer at "):
            from sotd.cli.comm import hints

            self.hint = hints.daemon_silent()
        return failed

    def relay(self, target: str, text: str) -> str | None:
        """A handle this folder does not list: the relay endpoint (never the local daemon) files it."""
        from sotd.cli.comm import daemoncall

        endpoint = daemoncall.chosen_relay_endpoint(self.ctx.environ)
        if endpoint is None:
            from sotd import runtime, topology
            from sotd.cli.comm import hints

            env = self.ctx.environ
            own = env.get("SOT_SOCKET") or runtime.default_socket(env)
            _none, why = topology.relay_endpoint_or_reason(env, runtime.self_host(env), own)
            self.hint = hints.not_registered(target, self.ctx.layout.registry, why)
            return (
                "no sotd daemon found; set SOT_RELAY_ENDPOINT=unix:/path, ssh:target[/host], or (Windows) "
                "pipe:name"
            )
        return self.file_at(endpoint, target, text, broadcast=False)

    def file_at(self, endpoint: str, target: str, text: str, *, broadcast: bool) -> str | None:
        """One ``comm.file`` at the daemon at ``endpoint``; None when it filed (``filed`` printed), else the
        FAILED reason (its refusal, or why it did not answer)."""
        from sotd.cli.comm import daemoncall

        # ``expires``: when this send stops waiting (D6: 5 s, from the command's start: issue 27), so a daemon that gets the
        # frame late refuses it rather than file mail this command already reported as FAILED
        from sotd.wire import answers, payloads

        expires = round(_clock.now() + daemoncall.left_now(), 3)
        payload = payloads.comm_file_payload(
            self.ctx.name, target, text, broadcast=broadcast, expires=expires
        )
        try:
            answer = daemoncall.call(self.ctx, endpoint, payloads.COMM_FILE, payload)
        except SotdError as e:
            return e.message
        if answers.is_ok(answer):
            out(f"filed -> @{target}")
            return None
        error = answers.refusal_text(answer)
        if error is not None:
            hint = answers.hint_of(answer)  # the daemon's next step (e.g. which link is down, since when)
            if hint is not None:
                self.hint = hint
            return error
        return f"the daemon answered neither ok nor a refusal: {answer}"
