"""``sotd/jobs/restart.py``: a run after a node restart (ocx.md section 6): rebuilt from its record and
supervised again while its processes live, else ended ``lost``.

``restored`` rebuilds a ``runner.JobRun`` from what the node recorded (``state.json``, or a session's
record in ``sotd.ocxrun``); ``adopt`` gives a ``JobRun`` to ``wait()`` on when its sandbox still lives
(``launchers.Adopted``: its pid with the recorded start time, or its cgroups still holding a process),
else the ``Ended`` (``lost``, now recorded). Guarantee: a run found ended or dead drops its workspace
claim (``claims.release_workspace``) and its disk reservation; a live one keeps both, and a reused pid is
never taken for the run. What would break it: adopting by pid alone, or a lost run left with its claim.
"""

from __future__ import annotations

import json
import os
import time

from sotd import _clock
from sotd.jobs import launchers as la
from sotd.jobs import limits as lim
from sotd.jobs import nodepolicy, spec
from sotd.jobs import steps as stp
from sotd.jobs.claims import release_workspace
from sotd.jobs.errors import Refused
from sotd.jobs.outcome import Ended
from sotd.jobs.runner import JobRun, NodeSupplies
from sotd.jobs.statefolder import plan_from, write_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def restored(
    rec: Mapping[str, object], *, run_hash: str, node: NodeSupplies, launcher: la.Launcher | None = None
) -> JobRun:
    """A ``JobRun`` rebuilt from what a node recorded of it (``state.json``, a session's record): body,
    values, hash, CPU and disk limits, and its deadline on this clock; ``KeyError``/``TypeError`` when a
    field is missing or of the wrong type. The caller resolves it again and reopens its cgroups."""
    values = rec["values"]
    if not isinstance(values, dict):
        raise TypeError("the record's values are not an object")
    r = JobRun(rec["body"], run_hash=run_hash, repository_name=str(rec["repository_name"]), target=stp.Target(""),
               node=node, hash_name=str(rec.get("hash_name") or "sha3_256"), launcher=launcher)  # fmt: skip
    r.values = {str(k): str(v) for k, v in values.items()}
    cpu, disk, deadline = rec.get("cpu"), rec.get("disk"), rec.get("deadline")
    r.limits = spec.Limits(
        cpu=cpu if isinstance(cpu, int) else None, disk=disk if isinstance(disk, int) else None
    )
    if isinstance(deadline, (int, float)):
        r.deadline = time.monotonic() + max(0.0, float(deadline) - _clock.now())
    return r


def adopt(state_dir: str, run_hash: str, node: NodeSupplies | None = None) -> JobRun | Ended:
    """After a node restart: a ``JobRun`` to ``wait()`` on when the run's processes still live, else the
    ``Ended`` (``lost``, now recorded). A run that already ended gives its recorded ``Ended``. A run
    found ended or dead drops its workspace claim (``release_workspace``); a live one keeps it."""
    got = _adopt(state_dir, run_hash, node)
    if isinstance(got, Ended):
        release_workspace(state_dir, run_hash)
    return got


def _adopt(state_dir: str, run_hash: str, node: NodeSupplies | None) -> JobRun | Ended:
    d = os.path.join(state_dir, run_hash)
    try:
        with open(os.path.join(d, "ended.json")) as f:
            return Ended.from_json(json.load(f))
    except (OSError, ValueError, TypeError):
        pass
    try:
        with open(os.path.join(d, "state.json")) as f:
            st = json.load(f)
    except (OSError, ValueError) as e:
        lost = Ended("lost", why=f"the run's state is unreadable: {e}")
        os.makedirs(d, mode=0o700, exist_ok=True)
        write_json(os.path.join(d, "ended.json"), lost.to_json())
        return lost
    n = node or NodeSupplies(
        root="/", policy=nodepolicy.Policy(), carrier=stp.FossilCarrier(), state_dir=state_dir
    )
    r = restored(st, run_hash=run_hash, node=n)
    try:
        r.run = r.resolve_again()
    except (Refused, KeyError):
        r.run = None
    r.plan = plan_from(st.get("plan"))
    r.cgroups = lim.Cgroups.existing(st.get("cgroups") or {}, r.plan)
    r.launcher = la.Adopted(st.get("pid"), st.get("start_time"), r.cgroups)
    if r.launcher.alive():
        return r
    if r.cgroups.dirs:
        r.cgroups.remove()
    lost = r.collect(Ended("lost", exit=r.exit_status()))
    r.result = lost
    write_json(os.path.join(d, "ended.json"), lost.to_json())
    r.disks.end(run_hash)
    return lost
