"""A timer around the registry lock of this process, for W5 (``bench/registry.py``).

``install(record)`` replaces ``RegistryLock.acquire`` and ``release`` on the class with wrappers that call
the originals and report each take as ``record(wait_s, hold_s, taken)``: the wait is the time inside
``acquire`` (also when it gives up: then ``hold_s`` is None and ``taken`` False), the hold the time from
``acquire`` returning to ``release`` being called. The lock itself behaves exactly as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def install(record: Callable[[float, float | None, bool], object]) -> None:
    from sotd.formats import reglock

    cls = reglock.RegistryLock
    acquire, release = cls.acquire, cls.release
    taken: dict[int, tuple[float, float]] = {}

    def timed_acquire(self: reglock.RegistryLock) -> None:
        t0 = time.perf_counter()
        try:
            acquire(self)
        except BaseException:
            record(time.perf_counter() - t0, None, False)
            raise
        taken.setdefault(id(self), (t0, time.perf_counter()))

    def timed_release(self: reglock.RegistryLock) -> None:
        t = taken.pop(id(self), None)
        if t is not None:
            record(t[1] - t[0], time.perf_counter() - t[1], True)
        release(self)

    cls.acquire = timed_acquire  # type: ignore[method-assign]
    cls.release = timed_release  # type: ignore[method-assign]
