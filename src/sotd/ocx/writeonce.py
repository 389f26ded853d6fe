"""Write-once for real: the pure decisions by which a node keeps the first bytes of each name it owns.

Spec: ../shared/spec/ocx.md 3.4 (Fossil keeps only the newest version of an unversioned file, the newest
mtime wins, anyone with ``y`` can overwrite a name) and decision O2 (a message's name is its hash);
docs/ocx.md, "Write-once". A node keeps the first valid bytes of every message name it has seen (the
index's ``kept``) and of every file it stored itself (``published``); after each sync it compares what
its clone and the remote hold under those names with what it kept, and puts the kept bytes back where
they differ, with an mtime newer than the other version's, so the next sync carries them to the remote.

Guarantee: ``other_bytes`` says why a name must be put back exactly when the clone holds a different
version of it (other bytes, a deletion, or none at all) or the remote lists other bytes; never for a name
the remote has simply not been sent yet. ``restore_mtime`` is always newer than the version it replaces
(up to the last time Fossil can name: past that, Fossil's newest-wins cannot be beaten).
What would break it: comparing by name or mtime instead of by hash (a replaced file keeps its name), or
putting bytes back with an mtime not newer than the other version (the next sync would take the other).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.ocx.index import IndexRow


def other_bytes(ours: tuple[str, ...], held: tuple[str | None, int] | None, listed: str | None) -> str | None:
    """Why the name whose kept bytes hash to ``ours`` (every hash Fossil may store for them) must be put
    back, or None. ``held``: what the clone holds under the name (hash, or None for a deletion; mtime),
    None when the clone has no such file at all; ``listed``: the hash the remote lists for it, or None
    (not listed, or no remote). A listed hash of a length none of ``ours`` has cannot be compared."""
    if held is None:
        return "the clone no longer holds it"
    if held[0] is None:
        return "the clone holds a deletion of it"
    if held[0] not in ours:
        return f"the clone holds other bytes (hash {held[0]})"
    if listed is not None and listed not in ours and any(len(listed) == len(h) for h in ours):
        return f"the remote lists other bytes (hash {listed})"
    return None


def restore_mtime(now: float, held: tuple[str | None, int] | None) -> int:
    """The mtime (seconds since 1970) of the kept bytes put back: now, or one second past the version the
    clone holds when that one is newer (an attacker may date a version in the future)."""
    other = held[1] if held is not None else 0
    return max(int(now), other + 1)


def index_sentence(h: str, row: IndexRow | None, error: str | None) -> str:
    """What the index did with a message just posted (one sentence, for ``sotd ocx post``'s stderr)."""
    if row is None:
        why = f": {error}" if error else ""
        return f"ocx: {h} is delivered; the index did not record it yet{why} (the next sync indexes it)"
    if not row["valid"]:
        return f"ocx: {h} is delivered; the index recorded it as invalid: {row['reason']}"
    address = f"to {row['to_login']}" if row["to_login"] is not None else f"answering {row['re_hash']}"
    sender = row["sender_login"] or "a sender not known yet"
    return f"ocx: {h} is delivered; the index recorded it as {row['kind']} {address} from {sender}"
