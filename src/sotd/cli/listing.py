"""``sotd comm list`` (comm-list.sh): who is registered, and whether each is live. Behaviour 1.7, D13."""

from __future__ import annotations

from sotd import _clock
from sotd.cli.common import Context, check_identity, err, out, prog
from sotd.errors import RegistryUnreadable

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
        lines.append(
            f"  @{name:<18} {row.get('host', '')!s:<10} {row.get('repo', '')!s:<14} {status:<12} [{exp}]{mine}"
        )
        state = row.get("state") or "idle"
        second = f"      [{state}]"
        summary = row.get("summary")
        if summary:
            second += f" {summary}"
        if row.get("status_at"):
            second += f" · {age_text(_clock.age_of(row.get('status_at'), now))}"
        lines.append(second)
    return lines


def run(argv: list[str]) -> int:
    me = prog("comm-list.sh", "list")
    why = check_identity()
    if why:
        err(f"{me}: {why}")
        return 1
    ctx = Context()
    from sotd.formats import layout as layout_mod
    from sotd.formats import registry

    for w in layout_mod.ensure_home(ctx.layout):
        err(w)
    registry.ensure(ctx.layout)
    try:
        doc = registry.read(ctx.layout)
    except RegistryUnreadable:
        err("FAILED: the registry could not be read; nothing was listed")
        return 1
    agents = registry.agents_of(doc) if doc is not None else {}
    for line in render(ctx.layout.registry, agents, ctx.name, _clock.now(), stale_window(ctx.environ)):
        out(line)
    out("")
    out("attached frontend boxes (this daemon):")
    out("  (none attached, or no daemon answered)")
    return 0
