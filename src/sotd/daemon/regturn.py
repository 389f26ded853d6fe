"""The daemon's turn at the registry lock: one thread of this daemon at a time runs the lock protocol.

Spec: behaviour 6.1 (the "daemon only" FAILED text; waiting for the turn counts toward the bound), 2.5,
2.6, D7 (the bounds of the daemon's writers).
Guarantee: two threads of one daemon never run the registry-lock protocol at once. They would share one
holder record (the record names the process, not the thread), so each would take the other's lock for
its own, remove the other's take temp, and hold the same reclaim markers. Every registry write of the
daemon goes through ``update`` here; a writer that does not get the turn within its bound gives up with
``registry lock <p> was not tried: another thread of this daemon held its turn past the bound`` and
nothing was tried or written.
What would break it: a daemon thread calling ``sotd.formats.registry.update`` (or ``RegistryLock``) itself,
or giving the lock protocol the whole bound again after the wait for the turn.

The turn is one per process: a daemon is one process, and the holder record, which is what two turns must
not share, is per process too. Bound 0 is one try at the turn (and then one try at the lock, behaviour
6.1's bound 0).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from sotd.errors import LockFailed
from sotd.formats import registry

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from sotd.formats.layout import Layout

    R = TypeVar("R")

TURN = threading.Lock()
_monotonic = time.monotonic  # seam


def not_tried_text(lock_path: str) -> str:
    """Behaviour 6.1, daemon only (protocol: keep byte for byte)."""
    return (
        f"registry lock {lock_path} was not tried: another thread of this daemon held its turn past the bound"
    )


def take_turn(bound: float) -> float | None:
    """Wait for the turn at most ``bound`` seconds (0: one try). The bound left for the lock protocol, or
    None when the turn was not had; the caller releases ``TURN`` after a float."""
    bound = max(0.0, bound)
    started = _monotonic()
    got = TURN.acquire(blocking=False) if bound == 0 else TURN.acquire(timeout=bound)
    if not got:
        return None
    return max(0.0, bound - (_monotonic() - started))


def update(
    layout: Layout,
    host: str,
    change: Callable[[dict[str, object]], tuple[bool, R]],
    *,
    bound: float,
) -> tuple[dict[str, object], R]:
    """``registry.update`` in this daemon's turn (blocking; run it in a thread). The turn's wait and the
    lock's wait share ``bound``. Raises ``LockFailed`` (the turn's text or the lock's), and whatever
    ``registry.update`` raises."""
    left = take_turn(bound)
    if left is None:
        raise LockFailed(not_tried_text(layout.reglock))
    try:
        return registry.update(layout, host, change, bound=left)
    finally:
        TURN.release()


__all__ = ["TURN", "not_tried_text", "take_turn", "update"]
