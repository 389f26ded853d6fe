"""Handles: validation and derivation from a project root and the box's raw host name.

Spec: seed 000 "Handles"; behaviour 6.8 (derivation, messages), 1.2 (join's name precedence).
Guarantee: every handle this module returns is valid (1-64 bytes of ``A-Za-z0-9._-``, no ``..``, no leading
``-``), and derivation is a pure function of (root, raw host, the registry's agents).
What would break it: a derived part that can hold ``..`` or a leading ``-``; ``sanitize`` therefore also
turns the second ``.`` of a ``..`` into ``-`` (the spec's rule alone would derive an invalid handle from a
folder such as ``a..b``; such a name could never be joined, so nothing compatible is lost).
"""

from __future__ import annotations

import os

from sotd.errors import HandleError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_LEN = 64
_ALLOWED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_SLUG_KEEP = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def is_valid(h: object) -> bool:
    """True for 1-64 bytes of ``A-Za-z0-9._-`` with no ``..`` and no leading ``-``."""
    if not isinstance(h, str) or not h or len(h) > MAX_LEN:
        return False
    if h[0] == "-" or ".." in h:
        return False
    return all(ord(c) < 128 and ord(c) in _ALLOWED for c in h)


def is_directed(line: Mapping[str, object], handle: str) -> bool:
    """Mail directed at ``handle`` (what ``unread``, the Stop hook and a wake count): the inbox line's
    ``to`` is the string ``handle`` and its ``from``, if a string, is not (broadcast copies and
    self-echoes do not count)."""
    to = line.get("to")
    frm = line.get("from")
    return isinstance(to, str) and to == handle and not (isinstance(frm, str) and frm == handle)


def validate(h: object) -> str:
    """``h`` if it is a valid handle, else ``HandleError``."""
    if not is_valid(h):
        raise HandleError(
            f"invalid handle {h!r}: a handle is 1-64 bytes of A-Za-z0-9._-, with no '..' and no leading '-'"
        )
    assert isinstance(h, str)
    return h


def sanitize(s: str, limit: int = 20) -> str:
    """Behaviour 6.8 ``sanitize``: bytes outside the set become ``-``, runs collapse, ends trimmed, cut."""
    out: list[str] = []
    for b in s.encode("utf-8", "surrogateescape"):
        ch = chr(b) if b in _ALLOWED else "-"
        if ch == "." and out and out[-1] == ".":
            ch = "-"  # never let a part hold '..' (see the module note)
        if ch == "-" and out and out[-1] == "-":
            continue
        out.append(ch)
    r = "".join(out)
    if r.startswith("-"):
        r = r[1:]
    if r.endswith("-"):
        r = r[:-1]
    r = r[:limit]
    if r.endswith("-"):
        r = r[:-1]
    return r or "x"


def hash6(s: str) -> str:
    """The first six hex digits of SHA-256 of ``s``'s bytes (no newline)."""
    import hashlib

    return hashlib.sha256(s.encode("utf-8", "surrogateescape")).hexdigest()[:6]


def host_part(raw_host: str) -> str:
    """The host's part of a derived handle: sanitized to 12, plus ``-<hash6>`` when that changed it at all."""
    h = sanitize(raw_host, 12)
    if h != raw_host:
        h = f"{h}-{hash6(raw_host)}"
    return h


def _base_of(root: str) -> tuple[str, str]:
    stripped = root.rstrip("/") or "/"
    return os.path.basename(stripped), os.path.basename(os.path.dirname(stripped).rstrip("/") or "/")


def candidates(root: str, raw_host: str) -> tuple[str, str, str]:
    """The three tiers: ``<base>-<host>``, ``<base>-<parent>-<host>``, ``<base>-<hash6(root)>-<host>``."""
    folder, parent = _base_of(root)
    base = sanitize(folder, 20)
    host = host_part(raw_host)
    return (f"{base}-{host}", f"{base}-{sanitize(parent, 20)}-{host}", f"{base}-{hash6(root)}-{host}")


class Derived:
    """A derivation's outcome: the handle, its qualifier, the tier-1 name and the stderr note (or None)."""

    __slots__ = ("handle", "note", "qualifier", "tier1")

    def __init__(self, handle: str, qualifier: str, tier1: str, note: str | None) -> None:
        self.handle = handle
        self.qualifier = qualifier
        self.tier1 = tier1
        self.note = note

    def __repr__(self) -> str:
        return f"Derived({self.handle!r}, {self.qualifier!r}, {self.tier1!r}, {self.note!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Derived):
            return NotImplemented
        return (self.handle, self.qualifier, self.tier1, self.note) == (
            other.handle,
            other.qualifier,
            other.tier1,
            other.note,
        )

    __hash__ = None  # type: ignore[assignment]


def _holder(entry: object) -> str:
    if isinstance(entry, dict):
        r = entry.get("root")
        if isinstance(r, str) and r:
            return r
    return "an unknown project"


def _claimable(name: str, root: str, agents: Mapping[str, object], reclaim: bool) -> bool:
    if name not in agents:
        return True
    if not reclaim:
        return False
    entry = agents[name]
    return isinstance(entry, dict) and entry.get("root") == root


def derive(root: str, raw_host: str, agents: Mapping[str, object], *, reclaim: bool) -> Derived:
    """Behaviour 6.8: the first claimable tier (reclaim: a row with this root is claimable; fresh: none is).

    Liveness is not consulted. Raises ``HandleError`` with the spec's all-taken sentence.
    """
    t1, t2, t3 = candidates(root, raw_host)
    for t in (t1, t2, t3):
        if not is_valid(t):  # cannot happen by construction; never hand out an invalid name
            raise HandleError(f"comm: derived an invalid handle {t!r}; pass --name to pick one explicitly")
    if _claimable(t1, root, agents, reclaim):
        return Derived(t1, "", t1, None)
    r1 = _holder(agents.get(t1))
    if _claimable(t2, root, agents, reclaim):
        parent = _base_of(root)[1]
        note = f"comm: '@{t1}' is already held by {r1} — joining as '@{t2}' instead"
        return Derived(t2, sanitize(parent, 20), t1, note)
    r2 = _holder(agents.get(t2))
    if _claimable(t3, root, agents, reclaim):
        note = (
            f"comm: '@{t1}' (held by {r1}) and '@{t2}' (held by {r2}) are both taken"
            f" — joining as '@{t3}' instead"
        )
        return Derived(t3, hash6(root), t1, note)
    r3 = _holder(agents.get(t3))
    raise HandleError(
        "comm: every derived handle for this project is already taken — "
        f"'@{t1}' (held by {r1}), '@{t2}' (held by {r2}), and '@{t3}' (held by {r3}). "
        "Pass --name to pick one explicitly."
    )


def slug(label: str) -> str:
    """Workspace-label slug (6.8): lower-case, ``.`` -> ``_``, runs of others -> ``-``, or ``default``."""
    out: list[str] = []
    in_run = False
    for raw in label.lower():
        ch = "_" if raw == "." else raw
        if ch in _SLUG_KEEP:
            out.append(ch)
            in_run = False
        elif not in_run:
            out.append("-")
            in_run = True
    return "".join(out).rstrip("-") or "default"
