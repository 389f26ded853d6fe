"""``sotd comm list`` (comm-list.sh): who is registered, and whether each is live. Behaviour 1.7, D13."""

from __future__ import annotations

from sotd import _clock
from sotd.cli.comm.common import Context, enter, out, prog
from sotd.errors import EXIT_OK, RegistryUnreadable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def age_text(secs: float) -> str:
    s = max(0, int(secs))
    if s < 60:
        return "just now"
    if s < 3600:
        return f"{s // 60}m ago"
    if s < 86400:
        return f"{s // 3600}h ago"
    return f"{s // 86400}d ago"


def stale_window(environ: Mapping[str, str]) -> int:
    raw = environ.get("SOT_COMM_STALE_SECS", "")
    try:
        return int(raw) if raw else 600
    except ValueError:
        return 600


def render(path: str, agents: dict[str, object], me: str, now: float, window: int) -> list[str]:
    """The list's lines. Every registry field is shown as one field (``sotd.text.inert``): a control, a
    bidi override or a newline planted in a name, host, repo, expertise, state or summary shows as its
    ``\\u`` escape, so it can neither drive the terminal nor start a row of its own."""
    from sotd.text import inert

    lines = [f"sot-comm agents  ({path}):"]
    if not agents:
        lines.append("  (none)")
    for name in sorted(agents):
        row = agents[name]
        if not isinstance(row, dict):
            row = {}
        age = _clock.age_of(row.get("last_seen"), now)
        status = "live" if age <= window else f"stale {int(age)}s"
        expertise = row.get("expertise")
        exp = "/".join(str(x) for x in expertise) if isinstance(expertise, list) else ""
        mine = "  <- me" if name == me else ""
        host, repo = inert(str(row.get("host", ""))), inert(str(row.get("repo", "")))
        lines.append(f"  @{inert(name):<18} {host:<10} {repo:<14} {status:<12} [{inert(exp)}]{mine}")
        state = row.get("state") or "idle"
        second = f"      [{inert(str(state))}]"
        summary = row.get("summary")
        if summary:
            second += f" {inert(str(summary))}"
        if row.get("status_at"):
            second += f" · {age_text(_clock.age_of(row.get('status_at'), now))}"
        lines.append(second)
    return lines


def run(argv: list[str]) -> int:
    me = prog("comm-list.sh", "list")
    ctx = enter(me)  # an identity refusal is raised
    from sotd.formats import registry

    registry.ensure(ctx.layout)
    try:
        doc = registry.read(ctx.layout)
    except RegistryUnreadable:
        from sotd.cli.comm import hints

        raise RegistryUnreadable(
            "FAILED: the registry could not be read; nothing was listed",
            hint=hints.registry_unreadable(),
        ) from None
    agents = registry.agents_of(doc) if doc is not None else {}
    for line in render(ctx.layout.registry, agents, ctx.name, _clock.now(), stale_window(ctx.environ)):
        out(line)
    out("")
    for line in frontends_block(ctx):
        out(line)
    return EXIT_OK


def up_text(secs: int) -> str:
    """A daemon's uptime: ``42s``, ``5m``, ``3h``, ``2d``."""
    s = max(0, int(secs))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def frontend_lines(daemon: object) -> list[str]:
    """The block from a ``version.query`` answer's ``daemon`` object (behaviour 1.7), each field a
    front end sent shown inert (``sotd.text.inert``). Pure."""
    from sotd.text import inert

    if not isinstance(daemon, dict):
        return ["attached frontend boxes (this daemon):", NO_FRONTENDS]
    up = daemon.get("up_s")
    head = (
        f"attached frontend boxes (this daemon, up {up_text(up)}):"
        if isinstance(up, int)
        else ("attached frontend boxes (this daemon):")
    )
    lines = [head]
    fes = daemon.get("frontends")
    for fe in fes if isinstance(fes, list) else []:
        if not isinstance(fe, dict):
            continue
        extra = ", ".join(inert(str(fe[k])) for k in ("client_id", "name") if fe.get(k))
        lines.append(f"  fe@{inert(str(fe.get('host') or '?'))}" + (f" ({extra})" if extra else ""))
    if len(lines) == 1:
        lines.append(NO_FRONTENDS)
    return lines


NO_FRONTENDS = "  (none attached, or no daemon answered)"


def frontends_block(ctx: Context) -> list[str]:
    """Ask this box's daemon (``version.query``, the 5 s bound of every daemon call) who is attached."""
    from sotd.cli.comm import daemoncall
    from sotd.errors import SotdError
    from sotd.wire import payloads

    ep = daemoncall.local_endpoint(ctx.environ)
    if ep is None:
        return frontend_lines(None)
    try:
        answer = daemoncall.call(ctx, ep, payloads.VERSION_QUERY, payloads.version_query_payload())
    except (SotdError, OSError):
        return frontend_lines(None)
    return frontend_lines(answer.get("daemon"))
