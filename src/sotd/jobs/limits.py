"""Enforcing ``run.limits`` (ocx.md 1.5, decision O8): cgroups v2 or v1, else rlimits and a timer.

Decisions are pure: ``read_facts()`` gathers what the host has (mounts, our own cgroup paths, the v2
controllers offered to children) into ``CgroupFacts``; ``plan(limits, facts, uid)`` chooses, per limit,
how it is enforced and says so (``Plan.how``, what ``started`` can report). The I/O shell is ``Cgroups``
(make, join from the child before exec, read usage, kill everything, remove) and ``rlimits_for``.

* ``wall``: the runner's timer, then ``Cgroups.kill`` (v2 ``cgroup.kill``; v1 freezer + SIGKILL each
  task; else the process group and every descendant).
* ``cpu``: a whole-run budget from v2 ``cpu.stat usage_usec`` or v1 ``cpuacct.usage``, polled by the
  runner; RLIMIT_CPU per process stays as the backstop (and is all there is without a cgroup).
* ``processes``: v2 or v1 ``pids.max``; else RLIMIT_NPROC, usable only for a non-root uid (it counts
  every process of that uid, so one uid per run); for uid 0 without a pids cgroup the run is refused.
* ``file_size``: RLIMIT_FSIZE (per file; SIGXFSZ). It also bounds the stdout/stderr logs.
* ``memory``: v2 ``memory.max`` or v1 ``memory.limit_in_bytes`` (swap too where accounted); else
  RLIMIT_AS per process. ``Cgroups.memory_hit`` says whether the cap was met.
* ``tmp_size`` (bwrap ``--size``) and ``disk`` are named in ``how``; ``disk`` is held by the workspace's
  own file system (``sotd.jobs.disk``; the runner names it so) or, ``measured``, walked by the runner.

Guarantee: every limit a run asks for is enforced by the named mechanism or the run is refused.
What would break it: a cgroup created but not joined before exec (the child joins itself in
``preexec``; a fork before that would escape, so nothing forks before it).
"""

from __future__ import annotations

import os
import resource
import signal
import time
from dataclasses import dataclass, field

from sotd import sysprobe
from sotd.jobs.errors import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from sotd.jobs.spec import Limits

V1_WANTED = ("pids", "cpuacct", "freezer", "memory")


@dataclass(frozen=True)
class CgroupFacts:
    """What the host offers: our own cgroup directory in the unified (v2) hierarchy and which controllers
    it can hand to a child (``cgroup.subtree_control``), and our directory in each v1 hierarchy we use."""

    v2: str | None = None
    v2_controllers: frozenset[str] = frozenset()
    v2_kill: bool = False
    v1: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """Per limit, where it is enforced. ``pids``/``cpu``/``kill`` name a cgroup version or ``None``."""

    pids: str | None
    cpu: str | None
    kill: str | None
    v2: str | None
    v1: Mapping[str, str]
    how: Mapping[str, str]
    memory: str | None = None


def parse_mounts(text: str) -> tuple[str | None, dict[str, str]]:
    """From ``/proc/self/mounts``: the cgroup2 mount point, and v1 controller -> mount point."""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        if f[2] == "cgroup2" and v2 is None:
            v2 = f[1]
        elif f[2] == "cgroup":
            for opt in f[3].split(","):
                if opt in V1_WANTED:
                    v1.setdefault(opt, f[1])
    return v2, v1


def parse_proc_cgroup(text: str) -> tuple[str | None, dict[str, str]]:
    """From ``/proc/self/cgroup``: our v2 path (``0::PATH``), and v1 controller -> our path."""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        ctl, _, path = rest.partition(":")
        if hid == "0" and ctl == "":
            v2 = path
        else:
            for c in ctl.split(","):
                v1[c] = path
    return v2, v1


def facts_from(mounts: str, proc_cgroup: str, v2_subtree: str, v2_kill: bool) -> CgroupFacts:
    """Pure: combine the texts read from the host into ``CgroupFacts``."""
    m2, m1 = parse_mounts(mounts)
    p2, p1 = parse_proc_cgroup(proc_cgroup)
    v2 = os.path.join(m2, p2.lstrip("/")).rstrip("/") if m2 and p2 is not None else None
    v1 = {c: os.path.join(m, p1[c].lstrip("/")).rstrip("/") for c, m in m1.items() if c in p1}
    return CgroupFacts(v2=v2, v2_controllers=frozenset(v2_subtree.split()), v2_kill=v2_kill, v1=v1)


def read_facts() -> CgroupFacts:
    """Read this host's cgroup facts (never raises: an unreadable file means that cgroup is absent)."""

    def read(p: str) -> str:
        try:
            with open(p) as f:
                return f.read()
        except OSError:
            return ""

    mounts, mine = read("/proc/self/mounts"), read("/proc/self/cgroup")
    m2, _ = parse_mounts(mounts)
    p2, _ = parse_proc_cgroup(mine)
    d2 = os.path.join(m2, (p2 or "").lstrip("/")) if m2 else ""
    facts = facts_from(mounts, mine, read(os.path.join(d2, "cgroup.subtree_control")) if d2 else "", False)
    if facts.v2 and not os.access(facts.v2, os.W_OK):
        facts = CgroupFacts(v2=None, v1=facts.v1)
    v1 = {c: d for c, d in facts.v1.items() if os.access(d, os.W_OK)}
    kill = bool(facts.v2) and os.path.exists(os.path.join(facts.v2 or "", "cgroup.kill"))
    return CgroupFacts(v2=facts.v2, v2_controllers=facts.v2_controllers, v2_kill=kill, v1=v1)


def plan(limits: Limits, facts: CgroupFacts, uid: int) -> Plan:
    """Choose how each asked limit is enforced on a host with ``facts``, for a sandbox uid ``uid``.

    Prefers v2 for each part, then v1; refuses ``processes`` when neither a pids cgroup nor a usable
    RLIMIT_NPROC (non-root uid) exists.
    """
    how: dict[str, str] = {}
    v2 = facts.v2
    pids = "v2" if v2 and "pids" in facts.v2_controllers else "v1" if "pids" in facts.v1 else None
    # cpu.stat's usage_usec is in every v2 cgroup, controller or not.
    cpu = "v2" if v2 else "v1" if "cpuacct" in facts.v1 else None
    kill = "v2" if v2 and facts.v2_kill else "v1" if "freezer" in facts.v1 and "pids" in facts.v1 else None
    if limits.wall is not None:
        how["wall"] = "timer, then " + {"v2": "cgroup.kill", "v1": "freezer + SIGKILL of each task"}.get(
            kill or "", "SIGKILL of the process tree"
        )
    if limits.cpu is not None:
        how["cpu"] = (
            {"v2": "cgroup v2 cpu.stat budget", "v1": "cgroup v1 cpuacct budget"}[cpu]
            + " + RLIMIT_CPU per process"
            if cpu
            else "RLIMIT_CPU per process only (no cgroup)"
        )
    if limits.processes is not None:
        if pids:
            how["processes"] = f"cgroup {pids} pids.max"
        elif uid != 0:
            how["processes"] = "RLIMIT_NPROC for the sandbox uid"
        else:
            raise Refused(
                "this node cannot limit processes for uid 0: no pids cgroup, and RLIMIT_NPROC does not bind root"
            )
    if limits.file_size is not None:
        how["file_size"] = "RLIMIT_FSIZE"
    memory = None
    if limits.memory is not None:
        memory = "v2" if v2 and "memory" in facts.v2_controllers else "v1" if "memory" in facts.v1 else None
        how["memory"] = (
            {"v2": "cgroup v2 memory.max", "v1": "cgroup v1 memory.limit_in_bytes"}[memory]
            if memory
            else "RLIMIT_AS per process only (no memory cgroup)"
        )
    if limits.tmp_size is not None:
        how["tmp_size"] = "bwrap --size on the sandbox's tmpfs"
    if limits.disk is not None:
        how["disk"] = "the workspace's disk use, measured every few seconds, then the whole tree killed"
    return Plan(pids=pids, cpu=cpu, kill=kill, v2=v2, v1=dict(facts.v1), how=how, memory=memory)


def rlimits_for(limits: Limits, p: Plan) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` to set in the child before exec. RLIMIT_CPU: soft at the budget (SIGXCPU),
    hard one second later (SIGKILL)."""
    out = []
    if limits.cpu is not None:
        out.append((resource.RLIMIT_CPU, limits.cpu, limits.cpu + 1))
    if limits.file_size is not None:
        out.append((resource.RLIMIT_FSIZE, limits.file_size, limits.file_size))
    if limits.processes is not None and p.pids is None:
        out.append((resource.RLIMIT_NPROC, limits.processes, limits.processes))
    if limits.memory is not None and p.memory is None:
        out.append((resource.RLIMIT_AS, limits.memory, limits.memory))
    return out


def over_budget(usage_secs: float | None, budget: int | None) -> bool:
    """True when the whole run's CPU use has reached its budget."""
    return usage_secs is not None and budget is not None and usage_secs >= budget


def descendants(root: int, ppids: Mapping[int, int]) -> list[int]:
    """Every pid below ``root`` in the ``pid -> ppid`` table (pure; for the no-cgroup kill)."""
    kids: dict[int, list[int]] = {}
    for pid, pp in ppids.items():
        kids.setdefault(pp, []).append(pid)
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _ppid_table() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        got = sysprobe.stat_of(name)
        ppid = None if got is None else sysprobe.ppid_in(got[1])
        if ppid is not None:
            out[int(name)] = ppid
    return out


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class Cgroups:
    """The run's cgroup directories (one in v2 and/or one per v1 controller), named ``sotd-job-NAME``."""

    def __init__(self, p: Plan, name: str) -> None:
        self.plan = p
        self.name = name
        self.dirs: dict[str, str] = {}  # "v2" or the v1 controller -> directory
        if p.v2 and (p.pids == "v2" or p.cpu == "v2" or p.kill == "v2" or p.memory == "v2"):
            self.dirs["v2"] = os.path.join(p.v2, name)
        for c in ("pids", "cpuacct", "freezer", "memory"):
            if c in p.v1 and (
                (c == "pids" and (p.pids == "v1" or p.kill == "v1"))
                or (c == "cpuacct" and p.cpu == "v1")
                or (c == "freezer" and p.kill == "v1")
                or (c == "memory" and p.memory == "v1")
            ):
                self.dirs[c] = os.path.join(p.v1[c], name)

    @classmethod
    def existing(cls, dirs: Mapping[str, str], p: Plan) -> Cgroups:
        """Re-open the cgroups of an adopted run."""
        cg = cls.__new__(cls)
        cg.plan, cg.name, cg.dirs = p, os.path.basename(next(iter(dirs.values()), "")), dict(dirs)
        return cg

    def create(self, processes: int | None, memory: int | None = None) -> None:
        """Make every directory and set ``pids.max`` and the memory cap (swap included where the host
        accounts it); on failure remove what was made and raise ``Refused``."""
        try:
            for d in self.dirs.values():
                os.mkdir(d, 0o755)
            if processes is not None and self.plan.pids:
                _write(
                    os.path.join(self.dirs["v2" if self.plan.pids == "v2" else "pids"], "pids.max"),
                    str(processes),
                )
            if memory is not None and self.plan.memory == "v2":
                _write(os.path.join(self.dirs["v2"], "memory.max"), str(memory))
                if os.path.exists(os.path.join(self.dirs["v2"], "memory.swap.max")):
                    _write(os.path.join(self.dirs["v2"], "memory.swap.max"), "0")
            elif memory is not None and self.plan.memory == "v1":
                _write(os.path.join(self.dirs["memory"], "memory.limit_in_bytes"), str(memory))
                if os.path.exists(os.path.join(self.dirs["memory"], "memory.memsw.limit_in_bytes")):
                    _write(os.path.join(self.dirs["memory"], "memory.memsw.limit_in_bytes"), str(memory))
        except OSError as e:
            self.remove()
            raise Refused(f"this node cannot make the run's cgroup: {e}") from None

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the child writes its pid into before exec."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by every process ever in the run (``None`` without a cpu cgroup)."""
        try:
            if self.plan.cpu == "v2" and "v2" in self.dirs:
                for line in _read(os.path.join(self.dirs["v2"], "cpu.stat")).splitlines():
                    k, _, v = line.partition(" ")
                    if k == "usage_usec":
                        return int(v) / 1e6
            if self.plan.cpu == "v1" and "cpuacct" in self.dirs:
                return int(_read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            pass
        return None

    def pids_refused(self) -> int:
        """How many forks ``pids.max`` has refused (``pids.events max``), 0 without a pids cgroup."""
        d = self.dirs.get("v2" if self.plan.pids == "v2" else "pids")
        if not d or not self.plan.pids:
            return 0
        try:
            for line in _read(os.path.join(d, "pids.events")).splitlines():
                k, _, v = line.partition(" ")
                if k == "max":
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def memory_hit(self) -> bool:
        """Did the run's memory reach its cap (v1 ``memory.failcnt`` or ``oom_kill`` in
        ``memory.oom_control``: one big allocation is OOM-killed without a failcnt; v2 ``memory.events``
        max/oom_kill)?"""
        try:
            if self.plan.memory == "v1" and "memory" in self.dirs:
                d = self.dirs["memory"]
                for line in _read(os.path.join(d, "memory.oom_control")).splitlines():
                    k, _, v = line.partition(" ")
                    if k == "oom_kill" and int(v) > 0:
                        return True
                return int(_read(os.path.join(d, "memory.failcnt"))) > 0
            if self.plan.memory == "v2" and "v2" in self.dirs:
                for line in _read(os.path.join(self.dirs["v2"], "memory.events")).splitlines():
                    k, _, v = line.partition(" ")
                    if k in ("max", "oom_kill") and int(v) > 0:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def pids(self) -> list[int]:
        """Every pid in the run's cgroup (the first directory that lists processes)."""
        for key in ("v2", "pids", "freezer", "cpuacct", "memory"):
            d = self.dirs.get(key)
            if d:
                try:
                    return [int(x) for x in _read(os.path.join(d, "cgroup.procs")).split()]
                except (OSError, ValueError):
                    continue
        return []

    def kill(self) -> None:
        """SIGKILL everything in the run's cgroup, bounded (about 2 s), forks included."""
        v2 = self.dirs.get("v2")
        if v2 and self.plan.kill == "v2":
            try:
                _write(os.path.join(v2, "cgroup.kill"), "1")
            except OSError:
                pass
        fz = self.dirs.get("freezer")
        frozen = False
        if fz:
            try:
                _write(os.path.join(fz, "freezer.state"), "FROZEN")
                frozen = True
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if frozen:  # a frozen task dies only once thawed; it cannot fork in between
                try:
                    _write(os.path.join(fz or "", "freezer.state"), "THAWED")
                except OSError:
                    pass
                frozen = False
            time.sleep(0.02)

    def empty(self) -> bool:
        return not self.pids()

    def remove(self) -> None:
        """Remove the directories (only once empty; a busy one is left and named by nothing else)."""
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def kill_tree(pid: int, pgid: int | None) -> None:
    """Without a cgroup: SIGKILL ``pid``, its process group and every descendant found in ``/proc``."""
    for p in [pid, *descendants(pid, _ppid_table())]:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def preexec(procs_files: Iterable[str], rlimits: Iterable[tuple[int, int, int]]) -> None:
    """Run in the child between fork and exec: join the run's cgroups, then set the rlimits.

    Only ``os`` and ``resource`` calls (no locks, no allocation-heavy work), as a ``preexec_fn`` must.
    """
    me = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, me)
        finally:
            os.close(fd)
    for res, soft, hard in rlimits:
        resource.setrlimit(res, (soft, hard))
