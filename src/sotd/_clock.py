"""Wall-clock time and the ISO stamps of the comm folder.

Stamps are exactly ``YYYY-MM-DDTHH:MM:SSZ`` (20 characters, UTC). Liveness compares them as strings, never
as parsed dates, so every writer and reader must produce exactly this shape. Tests replace the clock with
``set_clock``; nothing else calls ``time.time`` for a stamp.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

LIVE_SECS = 600
_now: Callable[[], float] = time.time


def now() -> float:
    """Seconds since the epoch on the (replaceable) wall clock."""
    return _now()


def set_clock(fn: Callable[[], float] | None) -> None:
    """Replace the wall clock (tests); ``None`` restores ``time.time``."""
    global _now
    _now = fn if fn is not None else time.time


def stamp(t: float | None = None) -> str:
    """The 20-character UTC stamp of ``t`` (default: now)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now() if t is None else t))


def is_stamp(s: object) -> bool:
    """True when ``s`` has exactly the stamp's shape (digits where digits belong)."""
    if not isinstance(s, str) or len(s) != 20:
        return False
    for i, ch in enumerate(s):
        want = "-" if i in (4, 7) else "T" if i == 10 else ":" if i in (13, 16) else "Z" if i == 19 else None
        if want is None:
            if not ("0" <= ch <= "9"):
                return False
        elif ch != want:
            return False
    return True


def is_fresh(s: object, t: float | None = None, window: int = LIVE_SECS) -> bool:
    """Liveness: a well-shaped stamp that sorts after the stamp of ``t - window`` (a future stamp is fresh)."""
    return is_stamp(s) and str(s) > stamp((now() if t is None else t) - window)


def age_of(s: object, t: float | None = None) -> float:
    """Seconds from stamp ``s`` to ``t``; an unparseable stamp counts from epoch 0 (display only)."""
    t = now() if t is None else t
    if is_stamp(s):
        import calendar

        return t - calendar.timegm(time.strptime(str(s), "%Y-%m-%dT%H:%M:%SZ"))
    return t
