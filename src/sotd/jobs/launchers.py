"""How a prepared run's sandbox is started and watched (ocx.md 1.7; issue 29): one value, one protocol.

``PreparedRun`` is what the executor (``sotd.jobs.runner.JobRun``) decided before any process exists: the
resolved run (its environment with ``HOME`` already set), the capped limits and their ``Plan``, the bind
descriptors, the host's merged-/usr links and the policy's seccomp and user-namespace choices. From it
there is one way to make the run's cgroups (``make_cgroups``) and one way to build its sandbox command
line (``sandbox_argv``: ``setpriv + bwrap`` through ``sandbox.bwrap_argv``); the filter is always
``seccomp.memfd()`` (here, or in a session's row by ``sotd.jobs.launch``).

A ``Launcher`` starts that sandbox and answers the supervisor (``supervision.supervise``): ``start``,
``alive``, ``kill``, ``reap`` and ``exit_status``. Here: ``Direct`` (a child process, memfds and
``preexec_fn`` rlimits, its log files in the run's state folder) and ``Adopted`` (a run found alive after
a node restart: a pid and its start time, and the cgroups). The session row's launcher is
``sotd.ocxrun.sessions.RowLauncher``: the same value and the same protocol, started in a terminal row.

Guarantee: every launcher starts exactly the argv ``sandbox_argv`` builds, inside the cgroups
``make_cgroups`` made, so a job and a session get the same sandbox from the same run. What would break
it: a launcher that builds its own bwrap argv or cgroup, or kills a pid whose start time changed (a
reused pid after a restart: ``Adopted`` checks it first).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from sotd import sysprobe
from sotd.jobs import limits as lim
from sotd.jobs import sandbox as sbx
from sotd.jobs import seccomp
from sotd.jobs.errors import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.jobs import spec


@dataclass(frozen=True)
class PreparedRun:
    """A run after its checks, steps and homes, before its process: what every launcher starts from."""

    run_hash: str
    dir: str  # the run's state folder (STATE/<RUN-HASH>), made and empty
    run: spec.RunSpec  # resolved, with the process's whole environment
    values: Mapping[str, str]
    limits: spec.Limits  # capped by the node policy
    plan: lim.Plan
    bind_fds: Mapping[str, int]  # bind source -> O_PATH descriptor (runner's check of the sources)
    usr_links: Mapping[str, str]
    seccomp: bool  # the policy asks for the filter and this host can load it
    user_namespaces: bool

    def binds(self) -> list[str]:
        """The bind sources a launcher opens itself (``/usr``'s merged links are symlinks inside)."""
        sb = self.run.sandbox
        both = (*sb.read_only, *sb.read_write)
        return [p for p in dict.fromkeys(both) if not ("/usr" in both and p in self.usr_links)]


def make_cgroups(p: PreparedRun) -> lim.Cgroups:
    """The run's cgroups (``sotd-job-<RUN-HASH[:16]>``), made with its ``pids.max`` and memory cap."""
    cg = lim.Cgroups(p.plan, "sotd-job-" + p.run_hash[:16])
    cg.create(p.limits.processes, p.limits.memory)
    return cg


def sandbox_argv(
    p: PreparedRun,
    *,
    bind_fds: Mapping[str, int],
    seccomp_fd: int | None,
    data_fds: tuple[int, ...] = (),
    status_fd: int | None = None,
    slots: list[tuple[int, str]] | None = None,
) -> list[str]:
    """The run's ``setpriv + bwrap + COMMAND`` argv (``sandbox.bwrap_argv``) with the given descriptors
    (or ``-1`` slots a launcher fills later: ``sotd.jobs.launch``)."""
    return sbx.bwrap_argv(
        p.run.sandbox, p.run.process, usr_links=p.usr_links, data_fds=data_fds, status_fd=status_fd,
        bind_fds=bind_fds, tmp_size=p.limits.tmp_size, seccomp_fd=seccomp_fd, slots=slots,
        user_namespaces=p.user_namespaces,
    )  # fmt: skip


def starttime(pid: int) -> int | None:
    """The start time of a live ``pid`` (``None`` when it is gone, or a zombie no one reaped yet: an
    adopted run's bwrap is the child of whoever adopted the orphan, not ours)."""
    got = sysprobe.stat_of(pid)
    tick = None if got is None or not got[1] or got[1][0] in ("Z", "X") else sysprobe.tick_in(got[1])
    return None if tick is None else int(tick)


class Launcher(Protocol):
    """Starts a prepared run's sandbox and answers its supervisor. Only ``kill`` may be called from
    another thread than the one supervising."""

    def refuse(self, run: spec.RunSpec, values: Mapping[str, str]) -> str | None:
        """After the policy allowed ``run``: why this launcher cannot start its kind, else ``None``."""
        ...

    def start(self, p: PreparedRun, cgroups: lim.Cgroups) -> None:
        """Start the sandbox inside ``cgroups``; ``Refused`` or ``LaunchFailed`` when it cannot."""
        ...

    def alive(self) -> bool:
        """Is the run's sandbox still running?"""
        ...

    def kill(self) -> None:
        """End the run's processes now (idempotent)."""
        ...

    def reap(self) -> None:
        """After the end: collect what this launcher started (bounded)."""
        ...

    def exit_status(self) -> int | None:
        """How the sandbox exited as this launcher saw it (128+N for a signal N), if it knows."""
        ...

    def state(self) -> dict[str, object] | None:
        """What a restarted node needs to adopt the process (``pid``, ``start_time``), or ``None`` when
        the launcher keeps its own record (a session row)."""
        ...


class Direct:
    """A job's sandbox as a child process of the node: its own process group, stdout and stderr to
    ``STATE/<RUN-HASH>/stdout|stderr``, bwrap's JSON status to ``status.json``, created files and the
    filter as memfds, the cgroups joined and the rlimits set between fork and exec (``limits.preexec``)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.cgroups: lim.Cgroups | None = None
        self.pid: int | None = None
        self.start_time: int | None = None

    def refuse(self, run: spec.RunSpec, values: Mapping[str, str]) -> str | None:
        if run.process.session:
            return "session runs are started by the daemon's terminal, not by the jobs executor"
        return None

    def start(self, p: PreparedRun, cgroups: lim.Cgroups) -> None:
        self.cgroups = cgroups
        made = p.run.sandbox.created_files
        fds: list[int] = []
        try:
            for c in made:
                fd = os.memfd_create("created", 0)
                os.write(fd, c.content.encode())
                os.lseek(fd, 0, os.SEEK_SET)
                fds.append(fd)
            filter_fd = seccomp.memfd() if p.seccomp else None
            if filter_fd is not None:
                fds.append(filter_fd)
            status_fd = os.open(
                os.path.join(p.dir, "status.json"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
            )
            fds.append(status_fd)
            out = os.open(os.path.join(p.dir, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            err = os.open(os.path.join(p.dir, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            fds += [out, err]
            argv = sandbox_argv(p, bind_fds=p.bind_fds, seccomp_fd=filter_fd, data_fds=tuple(fds[: len(made)]),
                                status_fd=status_fd)  # fmt: skip
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    pass_fds=(*fds[:-2], *p.bind_fds.values()),
                    start_new_session=True,
                    env={"PATH": "/usr/bin:/bin"},
                    preexec_fn=partial(  # noqa: PLW1509 -- only os/resource calls; see limits.preexec
                        lim.preexec, cgroups.procs_files(), lim.rlimits_for(p.limits, p.plan)
                    ),
                )
            except (OSError, subprocess.SubprocessError) as e:
                raise Refused(f"this node could not start the sandbox: {e}") from None
        finally:
            for fd in fds:
                os.close(fd)
        self.pid = self.proc.pid
        self.start_time = starttime(self.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.cgroups is not None and self.cgroups.dirs:
            self.cgroups.kill()
        if self.pid is not None:
            lim.kill_tree(self.pid, self.pid)

    def reap(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            lim.kill_tree(self.proc.pid, self.proc.pid)
            self.proc.wait()

    def exit_status(self) -> int | None:
        if self.proc is None or self.proc.returncode is None:
            return None
        rc = self.proc.returncode
        return 128 - rc if rc < 0 else rc

    def state(self) -> dict[str, object] | None:
        return {"pid": self.pid, "start_time": self.start_time}


class Adopted:
    """A job's sandbox found after a node restart: alive while its pid has the recorded start time, or
    its cgroups still hold a process. Not ours to ``wait`` on: bwrap's ``status.json`` tells its exit."""

    def __init__(self, pid: int | None, start_time: int | None, cgroups: lim.Cgroups | None) -> None:
        self.pid, self.start_time, self.cgroups = pid, start_time, cgroups

    def refuse(self, run: spec.RunSpec, values: Mapping[str, str]) -> str | None:
        return "an adopted run is not started again"

    def start(self, p: PreparedRun, cgroups: lim.Cgroups) -> None:
        raise Refused("an adopted run is not started again")

    def same_process(self) -> bool:
        return self.pid is not None and self.start_time is not None and starttime(self.pid) == self.start_time

    def alive(self) -> bool:
        if self.same_process():
            return True
        return self.cgroups is not None and bool(self.cgroups.dirs) and not self.cgroups.empty()

    def kill(self) -> None:
        if self.cgroups is not None and self.cgroups.dirs:
            self.cgroups.kill()
        if self.pid is not None and starttime(self.pid) == self.start_time:
            lim.kill_tree(self.pid, self.pid)

    def reap(self) -> None:
        return None

    def exit_status(self) -> int | None:
        return None

    def state(self) -> dict[str, object] | None:
        return {"pid": self.pid, "start_time": self.start_time}
