"""The liveness heartbeat: the daemon stamps ``last_seen`` of the handles its running rows hold.

Spec: behaviour 2.5, decision D7; seed 000 "registry.json" (liveness).
Guarantee: while a row is Starting or Ready its handle's registry entry is stamped at least once a minute
(and at once when the set of held handles changes), so an idle row stays live; an entry is never created,
and a stamp that cannot take the registry lock at once is retried at the next 2 s tick.
What would break it: waiting for the registry lock (the bound is 0: one try at the daemon's turn, then one
try and one reclaim step at the lock; ``regturn``), or recording a pass that did not write (the next try
would wait a whole minute).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from sotd import _clock
from sotd.daemon import decide, regturn
from sotd.errors import SotdError
from sotd.formats import registry

if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.formats.layout import Layout

log = logging.getLogger("sotd")

LOCK_BOUND = 0.0
HEARTBEAT_SECS = decide.HEARTBEAT_SECS


def is_due(prev: frozenset[str], cur: frozenset[str], last: float | None, now: float, period: float) -> bool:
    """``decide.due`` with the minute replaceable by a shorter ``period`` (a test seam)."""
    if decide.due(prev, cur, last, now):
        return True
    return bool(prev or cur) and last is not None and now - last >= period


def stamp_change(held: frozenset[str], stamp: str) -> Callable[[dict[str, object]], tuple[bool, list[str]]]:
    """Set ``last_seen`` on each existing entry of ``held``; write only when one exists."""

    def change(doc: dict[str, object]) -> tuple[bool, list[str]]:
        done = [h for h in sorted(held) if registry.set_last_seen(doc, h, stamp)]
        return bool(done), done

    return change


class Heartbeat:
    """The stamping state between ticks: the last held set and when a pass last wrote."""

    def __init__(self, layout: Layout, host: str, period: float = decide.HEARTBEAT_SECS) -> None:
        self.layout = layout
        self.host = host
        self.period = period
        self.prev: frozenset[str] = frozenset()
        self.last: float | None = None
        self.failing = False

    def tick(self, views: list[decide.RowView], now: float | None = None) -> list[str] | None:
        """One tick (blocking; run it in a thread): the handles stamped, or None when no pass ran or it
        failed (then it is due again at the next tick)."""
        now = _clock.now() if now is None else now
        cur = decide.held_handles(views)
        if not is_due(self.prev, cur, self.last, now, self.period):
            return None
        if not cur:
            self.prev, self.last = cur, now
            return []
        if not os.path.exists(self.layout.registry):
            self.prev, self.last = cur, now
            return []
        try:
            _doc, done = regturn.update(
                self.layout, self.host, stamp_change(cur, _clock.stamp(now)), bound=LOCK_BOUND
            )
        except (SotdError, OSError) as e:
            why = e.message if isinstance(e, SotdError) else str(e)
            if not self.failing:
                log.warning(
                    "heartbeat: could not stamp %s (retrying each tick): %s — once a row's last stamp is ten "
                    "minutes old, sends to it fail as no live session",
                    ", ".join("@" + h for h in sorted(cur)),
                    why,
                )
            self.failing = True
            return None
        if self.failing:
            log.info("heartbeat: stamping works again")
        self.failing = False
        self.prev, self.last = cur, now
        return done
