"""The registry: who is reachable, and liveness.

File: ``registry.json`` (pretty JSON, 2-space indent, trailing newline), its write temp ``registry.json.tmp``
and the skeleton temps ``registry.json.new.<pid>.<n>``.
Spec: seed 000 "registry.json"; behaviour 6.2 (read, write, liveness) and 6.3 (creation).
Guarantee: a read is present, absent (only a first ENOENT) or unreadable, never a guess; every write is one
read-decide-write under the registry lock on a fresh read (the folder is listed first, NFS lesson), and a
failed write leaves the file's bytes and inode as they were and no temp behind; a registry is created only
by hard-linking a synced skeleton where no path exists, so nothing ever replaces, truncates or repairs one.
A ``registry.json`` that is a symbolic link is read as unreadable (``RegistryLinked``, its sentence naming
the link), so no writer replaces it (issue 25).
What would break it: treating a failed read as absent, or writing from a read made before the lock.

Decisions:
- ``encode`` writes UTF-8 unescaped, escaped as jq does for the 0.6.6 shell (``sotd.text.json_text``), and
  ``parse`` carries every string it reads: text UTF-8 cannot hold (a lone surrogate from a ``\\ud800``
  escape) is U+FFFD both ways, so no field read from or written to a registry can stop ``list``, ``join``
  or a hook (docs/contract.md, "Text that cannot be carried").
- ``RegistryWriteFailed`` and ``update``'s ``RegistryUnreadable`` carry the whole sentence of 6.2,
  ``FAILED: `` prefix included; the CLI prints ``message`` as it is. ``<err>`` is the OS's strerror
  (``No space left on device``). A temp that cannot be created or written, or whose bytes do not read
  back as one registry, is "could not be read or updated"; an fsync failure is "flushed";
  a rename failure is "renamed".
- ``update`` on an absent registry first creates the skeleton (``ensure``) under the lock and reads again.
"""

from __future__ import annotations

import os
import time

from sotd import PROTOCOL_VERSION, _clock, fsprim
from sotd.errors import HandleError, RegistryLinked, RegistryUnreadable, RegistryWriteFailed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from sotd.formats.layout import Layout

    R = TypeVar("R")

# Pauses before each retry (the first retry at once, then two after 100 ms): 4 tries in all.
RETRY_PAUSES = (0.0, 0.1, 0.1)
READ_OR_UPDATE_FAILED = "FAILED: the registry could not be read or updated, so nothing was written"

# Seams for tests.
_sleep = time.sleep
_listdir = os.listdir
_link = os.link
_fsync = os.fsync

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_skeleton_seq = 0


# ---------------------------------------------------------------------------------------------- read


def _read_once(path: str) -> bytes:
    """One read of the whole file; never through a link at ``registry.json`` (``fsprim.LinkedPath``)."""
    fd = fsprim.open_nofollow(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def read_bytes(layout: Layout) -> bytes | None:
    """The registry's bytes, ``None`` when the first open says ENOENT, else ``RegistryUnreadable``.

    An open error, a read error or zero bytes is retried (3 retries, the folder listed before each);
    non-empty bytes are returned at once, even if they do not parse. A ``registry.json`` that is a
    symbolic link is ``RegistryLinked`` at once (an unreadable registry whose sentence names the link).
    """
    path = layout.registry
    last = ""
    for attempt in range(len(RETRY_PAUSES) + 1):
        if attempt:
            pause = RETRY_PAUSES[attempt - 1]
            if pause:
                _sleep(pause)
            try:
                _listdir(layout.home)  # revalidates the folder's cached view (NFS)
            except OSError:
                pass
        try:
            data = _read_once(path)
        except FileNotFoundError:
            if attempt == 0:
                return None
            last = "it vanished"
            continue
        except fsprim.LinkedPath:
            from sotd.formats.layout import link_refused

            raise RegistryLinked(link_refused(path).message) from None
        except OSError as e:
            last = e.strerror or str(e)
            continue
        if data:
            return data
        last = "zero bytes"
    raise RegistryUnreadable(f"no good read in {len(RETRY_PAUSES) + 1} tries; the last: {last}")


def _reject_constant(name: str) -> object:
    raise ValueError(f"not JSON: {name}")


def parse(data: bytes) -> dict[str, object]:
    """Exactly one JSON document whose ``agents`` is an object, else ``RegistryUnreadable``.

    Read through ``sotd.text.loads``: a lone surrogate escape anywhere in it is read as U+FFFD.
    """
    from sotd.text import loads

    try:
        text = data.decode("utf-8")
        doc = loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise RegistryUnreadable(f"registry.json is not one JSON document: {e}") from None
    if not isinstance(doc, dict):
        raise RegistryUnreadable("registry.json is not a JSON object")
    if not isinstance(doc.get("agents"), dict):
        raise RegistryUnreadable("registry.json has no agents object")
    return doc


def read(layout: Layout) -> dict[str, object] | None:
    """The parsed registry, ``None`` when absent; ``RegistryUnreadable`` otherwise."""
    data = read_bytes(layout)
    return None if data is None else parse(data)


def agents_of(doc: dict[str, object]) -> dict[str, object]:
    """The ``agents`` object of a parsed document."""
    a = doc.get("agents")
    if not isinstance(a, dict):
        raise RegistryUnreadable("registry.json has no agents object")
    return a


# ---------------------------------------------------------------------------------------------- encode


def encode(doc: object) -> bytes:
    """Pretty JSON (2-space indent) plus ``\\n``, UTF-8 unescaped like jq (see the module note)."""
    from sotd.text import json_text

    return (json_text(doc, indent=2) + "\n").encode("utf-8")


def skeleton() -> bytes:
    """The bytes ``ensure`` creates ``registry.json`` with: behaviour 6.3's one line,
    ``{"protocol_version": 1, "agents": {}}`` and a newline (38 bytes), as the 0.6.6 reference creates it,
    so a folder either version made starts byte-equal (issue 28 item 7). Every later write is ``encode``'s
    pretty form (D12); a reader parses both alike."""
    return b'{"protocol_version": %d, "agents": {}}\n' % PROTOCOL_VERSION


def _is_registry(data: bytes) -> bool:
    try:
        parse(data)
    except RegistryUnreadable:
        return False
    return True


# ---------------------------------------------------------------------------------------------- create


def ensure(layout: Layout) -> bool:
    """Create ``registry.json`` from a synced skeleton when no path is there (6.3). True if this call made it.

    An existing path of any kind (0 bytes, a directory, a dangling link) is never touched. A failing fsync
    publishes nothing and leaves no temp: ``RegistryWriteFailed``.
    """
    global _skeleton_seq
    target = layout.registry
    if os.path.lexists(target):
        return False
    _skeleton_seq += 1
    tmp = layout.registry_skeleton(os.getpid(), f"{_skeleton_seq}{os.urandom(3).hex()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    except OSError as e:
        raise RegistryWriteFailed(
            f"FAILED: the registry could not be created ({e.strerror or e}), so nothing was written"
        ) from e
    try:
        try:
            fsprim.write_all(fd, skeleton())
            _fsync(fd)
        finally:
            os.close(fd)
        try:
            _link(tmp, target)
        except FileExistsError:
            return False
        except OSError:
            # NFS: the link may have happened though the call failed; the temp then has two names.
            try:
                if os.stat(tmp).st_nlink == 2 and os.path.samefile(tmp, target):
                    return True
            except OSError:
                pass
            raise
        try:
            fsprim.fsync_dir(layout.home)
        except OSError:
            pass
        return True
    except OSError as e:
        raise RegistryWriteFailed(
            f"FAILED: the registry could not be created ({e.strerror or e}), so nothing was written"
        ) from e
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------- write


def _fresh_read(layout: Layout) -> dict[str, object]:
    try:
        _listdir(layout.home)  # a fresh read on NFS needs the folder opened first
    except OSError:
        pass
    try:
        data = read_bytes(layout)
        if data is None:
            ensure(layout)
            data = read_bytes(layout)
        if data is None:
            raise RegistryUnreadable("registry.json vanished as it was created")
        return parse(data)
    except RegistryUnreadable as e:
        kind = RegistryLinked if isinstance(e, RegistryLinked) else RegistryUnreadable
        raise kind(READ_OR_UPDATE_FAILED, hint=e.message) from e


def write_locked(layout: Layout, doc: dict[str, object]) -> None:
    """Replace the registry with ``doc``; the caller holds the registry lock. ``RegistryWriteFailed``."""
    try:
        data = encode(doc)
    except (TypeError, ValueError) as e:
        raise RegistryWriteFailed(READ_OR_UPDATE_FAILED, hint=str(e)) from e
    try:
        fsprim.write_atomic(layout.registry, data, tmp=layout.registry_tmp, verify=_is_registry)
    except fsprim.AtomicStepError as e:
        err = e.strerror or str(e)
        if e.step == "flush":
            msg = f"FAILED: the registry update could not be flushed ({err}), so nothing was written"
        elif e.step == "rename":
            msg = (
                f"FAILED: the registry update could not be renamed into place ({err}), so nothing was written"
            )
        else:
            msg = READ_OR_UPDATE_FAILED
        raise RegistryWriteFailed(msg, hint=err) from e
    except OSError as e:  # pragma: no cover - write_atomic raises only AtomicStepError
        raise RegistryWriteFailed(READ_OR_UPDATE_FAILED, hint=str(e)) from e


def update_locked(
    layout: Layout, change: Callable[[dict[str, object]], tuple[bool, R]]
) -> tuple[dict[str, object], R]:
    """The read-decide-write of ``update`` for a caller that already holds the registry lock."""
    doc = _fresh_read(layout)
    write, result = change(doc)
    if write:
        write_locked(layout, doc)
    return doc, result


def update(
    layout: Layout,
    host: str,
    change: Callable[[dict[str, object]], tuple[bool, R]],
    *,
    bound: float,
) -> tuple[dict[str, object], R]:
    """One read-decide-write under the registry lock (taken as ``host`` within ``bound`` seconds).

    ``change(doc)`` edits the fresh document in place and answers ``(write, result)``. Raises ``LockFailed``,
    ``RegistryUnreadable`` (6.2's "could not be read or updated" sentence) or ``RegistryWriteFailed``.
    """
    from sotd.formats.reglock import RegistryLock

    with RegistryLock(layout, host, bound):
        return update_locked(layout, change)


# ---------------------------------------------------------------------------------------------- entries


def put(doc: dict[str, object], name: str, entry: dict[str, object]) -> None:
    """Replace the entry ``name`` whole. An empty or blank name is refused."""
    if not name or not name.strip():
        raise HandleError("registry_put: refusing to write an empty/blank handle")
    agents_of(doc)[name] = entry


def delete(doc: dict[str, object], name: str) -> bool:
    """Remove the entry ``name``; True if it was there."""
    agents = agents_of(doc)
    if name in agents:
        del agents[name]
        return True
    return False


def del_if_provisional(doc: dict[str, object], name: str, root: str, nonce: str) -> int:
    """Delete ``name`` only if it is a ``spawning`` row with this root and nonce: 0 deleted, 2 not ours.

    (1, "failed", is the write's outcome, which the caller reports.)
    """
    agents = agents_of(doc)
    entry = agents.get(name)
    if (
        isinstance(entry, dict)
        and entry.get("status") == "spawning"
        and entry.get("root") == root
        and entry.get("nonce") == nonce
    ):
        del agents[name]
        return 0
    return 2


def set_last_seen(doc: dict[str, object], handle: str, stamp: str | None = None) -> bool:
    """Set ``last_seen`` of an existing row (never creates one); True if the row exists."""
    entry = agents_of(doc).get(handle)
    if not isinstance(entry, dict):
        return False
    entry["last_seen"] = stamp if stamp is not None else _clock.stamp()
    return True


# A send's or a poll's touch rewrites ``last_seen`` only when the stamp there is older than this (like
# relatime); docs/contract.md, "Liveness and the last_seen touch", says why liveness stays true.
TOUCH_EVERY_S = 60


def touch_due(last_seen: object, t: float) -> bool:
    """Whether a touch at ``t`` must rewrite ``last_seen``: unless it is a well-shaped stamp within the last
    ``TOUCH_EVERY_S`` seconds, not after ``t`` (a future stamp is rewritten, as every touch did). Pure."""
    if not _clock.is_stamp(last_seen):
        return True
    s = str(last_seen)
    return not (_clock.stamp(t - TOUCH_EVERY_S) < s <= _clock.stamp(t))


def touch(
    layout: Layout,
    host: str,
    handle: str,
    *,
    bound: float = 1.0,
    agents: dict[str, object] | None = None,
) -> bool:
    """Stamp ``last_seen`` of ``handle`` if its row exists (the best-effort touch of a send or a poll), only
    when ``touch_due``: True if the row exists. ``agents``: the registry as the caller read it, else it is
    read here (unlocked); a row that is missing or fresh there is left alone without taking the lock, and
    the locked write decides again on its own fresh read."""
    t = _clock.now()
    if agents is None:
        try:
            doc = read(layout)
            agents = agents_of(doc) if doc is not None else None
        except RegistryUnreadable:
            agents = None
    if agents is not None:
        entry = agents.get(handle)
        if not isinstance(entry, dict):
            return False
        if not touch_due(entry.get("last_seen"), t):
            return True

    def change(doc: dict[str, object]) -> tuple[bool, bool]:
        entry = agents_of(doc).get(handle)
        if not isinstance(entry, dict):
            return False, False
        if not touch_due(entry.get("last_seen"), t):
            return False, True
        return set_last_seen(doc, handle, _clock.stamp(t)), True

    _doc, touched = update(layout, host, change, bound=bound)
    return touched


# ---------------------------------------------------------------------------------------------- a row

# What a registry row says to a sender (behaviour 2.3 steps 5-6, in this order; ``sotd comm send`` 1.4).
UNLISTED = "unlisted"  # no entry, or its host is missing or "": no box knows the handle
NOT_LIVE = "not_live"  # listed, but its last_seen is not fresh: no live session holds it
LIVE = "live"
VERDICTS = (UNLISTED, NOT_LIVE, LIVE)


class AgentRow:
    """A read-only view of one registry entry (``agents[name]``, whatever it holds), with the rules that
    read it: liveness (6.2) and the sender's verdict (2.3). Nothing else re-derives them."""

    __slots__ = ("entry", "name")

    def __init__(self, name: str, entry: object) -> None:
        self.name = name
        self.entry = entry

    @classmethod
    def of(cls, agents: dict[str, object], name: str) -> AgentRow:
        """The row ``name`` of an ``agents`` object (``agents_of``), present or not."""
        return cls(name, agents.get(name))

    @property
    def listed(self) -> bool:
        """The entry is an object (anything else is no row)."""
        return isinstance(self.entry, dict)

    def is_live(self, now: float | None = None) -> bool:
        """Live: an object whose ``last_seen`` is a well-shaped stamp under 600 s old (6.2)."""
        return isinstance(self.entry, dict) and _clock.is_fresh(self.entry.get("last_seen"), now)

    def verdict(self, now: float | None = None) -> str:
        """``UNLISTED`` (no object, or no ``host``), else ``NOT_LIVE`` (not fresh), else ``LIVE``."""
        if not isinstance(self.entry, dict) or not self.entry.get("host"):
            return UNLISTED
        return LIVE if self.is_live(now) else NOT_LIVE


__all__ = [
    "LIVE",
    "NOT_LIVE",
    "PROTOCOL_VERSION",
    "READ_OR_UPDATE_FAILED",
    "TOUCH_EVERY_S",
    "UNLISTED",
    "VERDICTS",
    "AgentRow",
    "agents_of",
    "del_if_provisional",
    "delete",
    "encode",
    "ensure",
    "parse",
    "put",
    "read",
    "read_bytes",
    "set_last_seen",
    "skeleton",
    "touch",
    "touch_due",
    "update",
    "update_locked",
    "write_locked",
]
