"""``sotd/jobs/supervision.py``: the one loop that watches a run's sandbox until it ends or a bound is met
(ocx.md 1.7: wall, whole-run CPU, disk, stop), for a job (``runner.JobRun.wait``) and a session
(``sotd.ocxrun.sessions``) alike, over the run's launcher (``launchers.Launcher``).

Guarantee: a bound met kills the whole sandbox (``launcher.kill``) and is named once; a run that ends by
itself is ``None``. What would break it: a second loop for sessions (their bounds would drift from a
job's), or a disk measure every poll on a workspace that is walked (``measured``: every ``DISK_POLL``).
"""

from __future__ import annotations

import time

from sotd.jobs import limits as lim

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.jobs.runner import JobRun

POLL = 0.05
DISK_POLL = 2.0  # seconds between two measures of the workspace's disk use (limits.disk)


def supervise(
    r: JobRun,
    *,
    stop: Callable[[], bool],
    poll: float,
    sleep: Callable[[float], object] = time.sleep,
    tick: Callable[[], None] | None = None,
    give_up: float | None = None,
    bounds_first: bool = False,
) -> str | None:
    """Watch ``r.launcher`` until its sandbox ends or a bound is met, first that holds: ``stopped``
    (``stop()``), ``timed_out`` (the wall deadline), ``cpu`` (the cgroups' whole-run budget), ``disk``
    (``r.disk_hit``: every poll on a workspace file system of its own, else every ``DISK_POLL``). A bound
    met kills the sandbox (``launcher.kill``) and is returned; ``None`` when it ended by itself. Each
    poll asks ``launcher.alive()`` before the bounds (a job's own end wins the poll it ends in), or after
    them with ``bounds_first`` (a session: a stop met as its row ends still ends it ``stopped``).
    ``tick`` runs at every poll (a session's deliveries); past ``give_up`` (monotonic) ``TimeoutError``.
    The one loop of a job and of a session."""
    next_disk = time.monotonic() + DISK_POLL
    measured = not r.own_fs()
    while bounds_first or r.launcher.alive():
        met = None
        if stop():
            met = "stopped"
        elif r.deadline is not None and time.monotonic() >= r.deadline:
            met = "timed_out"
        elif r.cgroups is not None and lim.over_budget(r.cgroups.cpu_seconds(), r.limits.cpu):
            met = "cpu"
        elif not measured or time.monotonic() >= next_disk:
            next_disk = time.monotonic() + DISK_POLL
            met = "disk" if r.disk_hit() else None
        if met is not None:
            r.launcher.kill()
            return met
        if bounds_first and not r.launcher.alive():
            break
        if give_up is not None and time.monotonic() >= give_up:
            raise TimeoutError(f"run {r.run_hash[:12]} still running")
        if tick is not None:
            tick()
        sleep(poll)
    return None
