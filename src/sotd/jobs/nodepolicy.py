"""The node policy of the run executor (the ``[jobs.policy]`` table; docs/jobs.md): what a node allows.

``parse_policy(table)`` reads the table (``PolicyError`` on any unknown key or bad value);
``check(resolved, policy, values)`` answers a resolved run (``sotd.jobs.placeholders.resolve``) with a
refusal sentence or ``None``; ``cap_limits(limits, policy)`` then lowers each limit to the node's maximum
(never refuses; ``DEFAULT_MAXIMA`` caps memory, tmp and disk when the policy names no maximum). Pure.
``[jobs.policy.workspaces]`` (``parse_workspaces``, defaults ``DEFAULT_WORKSPACES``) says how the disk
cap is held, the node-wide bound and the retention of finished workspaces (``sotd.jobs.disk``).

Guarantee: a run that passes names only users, ids, capabilities, binds and created files the node
allows, and no bind into ``$$root$$`` beyond its own workspace. What would break it: comparing a policy
path before its placeholders are expanded with the run's values, or a prefix test that is not
path-component aware (``/srv/a`` must not allow ``/srv/ab``: ``placeholders.inside``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from sotd.jobs.errors import PolicyError, Refused
from sotd.jobs.placeholders import expand, inside
from sotd.jobs.spec import LIMIT_NAMES, MAX_ID, Limits, RunSpec, parse_capability, parse_limits, parse_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# What a node's policy caps when it names no maximum (issue 18: each of these limits has a default).
DEFAULT_MAXIMA: Mapping[str, str] = {"memory": "4G", "tmp_size": "512M", "disk": "8G"}
# ``[jobs.policy.workspaces]`` when not written (issue 24, item 5): each run's workspace is a file system
# of its disk cap; all runs together hold at most ``total``; of the finished, the newest ``keep`` are kept
# while they hold at most ``keep_bytes``.
DEFAULT_WORKSPACES: Mapping[str, str | int] = {
    "cap": "filesystem",
    "total": "64G",
    "keep": 3,
    "keep_bytes": "8G",
}
WORKSPACE_CAPS = ("filesystem", "measured")
MAX_KEEP = 1000


@dataclass(frozen=True)
class WorkspacePolicy:
    """``[jobs.policy.workspaces]``: how a run's disk cap is held (``filesystem``: its workspace is a file
    system of that size; ``measured``: the old 2 s measure, for a node that cannot mount), the node-wide
    bound ``total`` on what all runs' workspaces may hold, and the retention of finished workspaces
    (the newest ``keep``, while they hold at most ``keep_bytes``). ``text`` keeps the sizes as written."""

    cap: str = "filesystem"
    total: int = 64 << 30
    keep: int = 3
    keep_bytes: int = 8 << 30
    text: Mapping[str, str] = field(default_factory=lambda: {"total": "64G", "keep_bytes": "8G"})


@dataclass(frozen=True)
class Policy:
    """What this node allows (the ``[jobs.policy]`` table; see docs/jobs.md). Paths may use placeholders
    (``$$workspace$$``, ``$$release$$``, ``$$root$$``), expanded with the run's values before comparing."""

    users: frozenset[str] = frozenset()
    uids: tuple[tuple[int, int], ...] = ()
    gids: tuple[tuple[int, int], ...] = ()
    capabilities: frozenset[str] = frozenset()
    network: bool = False
    sessions: bool = False
    user_namespaces: bool = False  # may a sandbox make user namespaces of its own (bwrap --disable-userns)
    seccomp: bool = True  # the seccomp filter (sotd.jobs.seccomp) on every sandbox
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ("$$workspace$$",)
    homes: tuple[str, ...] = ()
    created_files: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    workspaces: WorkspacePolicy = field(default_factory=WorkspacePolicy)


def _ranges(v: object, what: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(v, list):
        raise PolicyError(f"{what} must be a list of ids or 'LOW-HIGH' ranges")
    out = []
    for x in v:
        if isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_ID:
            out.append((x, x))
        elif isinstance(x, str) and re.fullmatch(r"[0-9]+-[0-9]+", x):
            lo, hi = (int(n) for n in x.split("-"))
            if lo > hi or hi > MAX_ID:
                raise PolicyError(f"{what} has an empty or too large range {x!r}")
            out.append((lo, hi))
        else:
            raise PolicyError(f"{what} has a bad entry {x!r}")
    return tuple(out)


def parse_policy(table: Mapping[str, object]) -> Policy:
    """The ``[jobs.policy]`` table (already read with ``tomllib``) as a ``Policy``, or ``PolicyError``."""
    keys = {
        "users",
        "uids",
        "gids",
        "capabilities",
        "network",
        "sessions",
        "user_namespaces",
        "seccomp",
        "read_only",
        "read_write",
        "homes",
        "created_files",
        "limits",
        "workspaces",
    }
    for k in table:
        if k not in keys:
            raise PolicyError(f"jobs.policy has an unknown key {k!r}")

    def strs(k: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        v = table.get(k, list(default))
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise PolicyError(f"jobs.policy.{k} must be a list of strings")
        return tuple(v)

    def flag(k: str, default: bool = False) -> bool:
        v = table.get(k, default)
        if not isinstance(v, bool):
            raise PolicyError(f"jobs.policy.{k} must be true or false")
        return v

    lim_table = table.get("limits", {})
    if isinstance(lim_table, dict):
        lim_table = {**DEFAULT_MAXIMA, **lim_table}
    try:
        caps = frozenset(parse_capability(c, "jobs.policy.capabilities") for c in strs("capabilities"))
        limits = parse_limits(lim_table)
    except Refused as e:
        raise PolicyError(e.message.replace("run.limits", "jobs.policy.limits")) from None
    return Policy(
        users=frozenset(strs("users")),
        uids=_ranges(table.get("uids", []), "jobs.policy.uids"),
        gids=_ranges(table.get("gids", []), "jobs.policy.gids"),
        capabilities=caps,
        network=flag("network"),
        sessions=flag("sessions"),
        user_namespaces=flag("user_namespaces"),
        seccomp=flag("seccomp", True),
        read_only=strs("read_only"),
        read_write=strs("read_write", ("$$workspace$$",)),
        homes=strs("homes"),
        created_files=strs("created_files"),
        limits=limits,
        workspaces=parse_workspaces(table.get("workspaces", {}), limits),
    )


def parse_workspaces(v: object, limits: Limits) -> WorkspacePolicy:
    """``[jobs.policy.workspaces]`` (defaults ``DEFAULT_WORKSPACES``) as a ``WorkspacePolicy``, or
    ``PolicyError`` naming the key. ``total`` below the largest disk cap (``limits.disk``) would refuse
    every run, so it is refused here."""
    if not isinstance(v, dict):
        raise PolicyError("jobs.policy.workspaces must be a table")
    for k in v:
        if k not in DEFAULT_WORKSPACES:
            raise PolicyError(f"jobs.policy.workspaces has an unknown key {k!r}")
    d = {**DEFAULT_WORKSPACES, **v}
    cap = d["cap"]
    if cap not in WORKSPACE_CAPS:
        raise PolicyError(f'jobs.policy.workspaces.cap must be "filesystem" or "measured", not {cap!r}')
    keep = d["keep"]
    if not isinstance(keep, int) or isinstance(keep, bool) or not 0 <= keep <= MAX_KEEP:
        raise PolicyError(
            f"jobs.policy.workspaces.keep must be an integer from 0 to {MAX_KEEP}, not {keep!r}"
        )
    sizes: dict[str, int] = {}
    for k in ("total", "keep_bytes"):
        try:
            sizes[k] = parse_size(d[k], f"jobs.policy.workspaces.{k}")
        except Refused as e:
            raise PolicyError(e.message) from None
    if limits.disk is not None and sizes["total"] < limits.disk:
        raise PolicyError(
            f"jobs.policy.workspaces.total ({d['total']}) is below jobs.policy.limits.disk"
            f" ({limits.text.get('disk')}): no run could start"
        )
    return WorkspacePolicy(cap=str(cap), total=sizes["total"], keep=keep, keep_bytes=sizes["keep_bytes"],
                           text={"total": str(d["total"]), "keep_bytes": str(d["keep_bytes"])})  # fmt: skip


def load_policy(path: str) -> Policy:
    """Read ``[jobs.policy]`` from the TOML file ``path`` (an absent table allows nothing)."""
    import tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PolicyError(f"cannot read the jobs policy {path}: {e}") from None
    jobs = doc.get("jobs", {})
    table = jobs.get("policy", {}) if isinstance(jobs, dict) else None
    if not isinstance(table, dict):
        raise PolicyError(f"{path}: [jobs.policy] must be a table")
    return parse_policy(table)


def _in_ranges(n: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= n <= hi for lo, hi in ranges)


def _allowed(path: str, prefixes: tuple[str, ...], values: Mapping[str, str]) -> bool:
    for p in prefixes:
        try:
            top = expand(p, values)
        except Refused:
            continue  # a policy entry naming a value this run lacks allows nothing for it
        if top.startswith("/") and inside(path, top):
            return True
    return False


def check(run: RunSpec, policy: Policy, values: Mapping[str, str] | None = None) -> str | None:
    """Why ``policy`` refuses the resolved ``run``, or ``None`` when it allows it.

    ``values`` (from ``resolve``) expand placeholders in the policy's paths.
    """
    vals = values or {}
    sb, pr = run.sandbox, run.process
    if "*" not in policy.users and pr.user not in policy.users:
        return f"this node does not run processes as the login {pr.user!r}"
    if not _in_ranges(sb.uid, policy.uids):
        return f"this node does not run sandboxes as uid {sb.uid}"
    if not _in_ranges(sb.gid, policy.gids):
        return f"this node does not run sandboxes as gid {sb.gid}"
    extra = [c for c in sb.capabilities if c not in policy.capabilities]
    if extra:
        return f"this node does not grant the capabilities {', '.join(extra)}"
    if sb.network and not policy.network:
        return "this node does not give sandboxes network access"
    if pr.session and not policy.sessions:
        return "this node does not run sessions"
    why = foreign_root_bind(run, vals)
    if why:
        return why
    for p in sb.read_only:
        if not _allowed(p, policy.read_only, vals) and not _allowed(p, policy.read_write, vals):
            return f"this node does not bind {p} read-only into sandboxes"
    for p in sb.read_write:
        if not _allowed(p, policy.read_write, vals):
            return f"this node does not bind {p} read-write into sandboxes"
    for p in sb.homes:
        if not _allowed(p, policy.homes, vals):
            return f"this node does not bring the home entry {p} into sandboxes"
    for c in sb.created_files:
        if not _allowed(c.path, policy.created_files, vals):
            return f"this node does not create {c.path} in sandboxes"
    return None


def foreign_root_bind(run: RunSpec, values: Mapping[str, str]) -> str | None:
    """Why a bind of ``run`` reaches into ``$$root$$`` beyond the run's own workspace (where other runs'
    workspaces live), or ``None``. A bind that holds ``$$root$$`` (``/``, say) counts too."""
    root, ws = values.get("root"), values.get("workspace")
    if not root:
        return None
    root = os.path.normpath(root)
    for p in (*run.sandbox.read_only, *run.sandbox.read_write, *run.sandbox.homes):
        if inside(root, p) or (inside(p, root) and not (ws and inside(p, ws))):
            return f"this node binds nothing of $$root$$ ({root}) into a sandbox but the run's own workspace: {p}"
    return None


def cap_limits(limits: Limits, policy: Policy) -> Limits:
    """Each limit lowered to the node's maximum; a limit the run leaves out gets the maximum (if any)."""
    mx = policy.limits
    out: dict[str, int | None] = {}
    text = dict(limits.text)
    for k in LIMIT_NAMES:
        asked, cap = getattr(limits, k), getattr(mx, k)
        if cap is not None and (asked is None or asked > cap):
            out[k] = cap
            text[k] = mx.text[k]
        else:
            out[k] = asked
    return Limits(text=text, **out)
