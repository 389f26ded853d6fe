"""Prepare, then launch (issue 29): ``launchers.PreparedRun`` and ``supervision.supervise`` over a launcher.

``supervise`` is the one loop of a job and of a session; here it runs over ``Steps``, a launcher of this
file that ends after a given number of polls and records each kill (the real ones, ``Direct`` and the
session's ``RowLauncher``, run under tests/integration/test_jobs_limits.py and test_ocx_sessions.py).
The table says which bound ends a run, and the one difference ``bounds_first`` makes: a job's own end
wins the poll it ends in; a session's stop met as its row ends still ends it ``stopped``.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from sotd.jobs import launchers as la
from sotd.jobs import limits as lim
from sotd.jobs import nodepolicy, runner, spec, supervision
from sotd.jobs import steps as stp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

pytestmark = pytest.mark.unit

BODY = {
    "clone": "0" * 40,
    "objective": "test",
    "workspace": [{"step": "directory", "at": "$$root$$/u/p/$$run$$"}],
    "sandbox": {
        "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": False, "isolate_terminal": True,
        "ends_with_parent": True, "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
        "read_only": ["/usr", "/bin", "/etc/alternatives", "/usr"], "read_write": ["$$workspace$$"],
        "homes": [], "created_files": [],
    },
    "limits": {},
    "process": {"user": "build-user", "command": ["true"], "env": {"PATH": "/usr/bin:/bin"}},
}  # fmt: skip


class Steps:
    """A launcher whose sandbox lives for ``polls`` calls of ``alive``; ``killed`` counts ``kill``."""

    def __init__(self, polls: int) -> None:
        self.polls = polls
        self.killed = 0

    def refuse(self, run: spec.RunSpec, values: Mapping[str, str]) -> str | None:
        return None

    def start(self, p: la.PreparedRun, cgroups: lim.Cgroups) -> None:
        return None

    def alive(self) -> bool:
        self.polls -= 1
        return self.polls >= 0

    def kill(self) -> None:
        self.killed += 1

    def reap(self) -> None:
        return None

    def exit_status(self) -> int | None:
        return 0

    def state(self) -> dict[str, object] | None:
        return None


def a_run(tmp_path: str, launcher: Steps) -> runner.JobRun:
    node = runner.NodeSupplies(
        root="/srv", policy=nodepolicy.Policy(), carrier=stp.FossilCarrier(), state_dir=tmp_path
    )
    return runner.JobRun(BODY, run_hash="a" * 64, repository_name="proj", target=stp.Target(""), node=node,
                         launcher=launcher)  # fmt: skip


@pytest.mark.parametrize(
    ("polls", "stop_at", "deadline_in", "bounds_first", "want", "kills"),
    [
        (3, None, None, False, None, 0),  # ends by itself
        (5, 2, None, False, "stopped", 1),  # a stop asked while it runs
        (5, None, 0.0, False, "timed_out", 1),  # the wall deadline passed
        (5, 0, 0.0, False, "stopped", 1),  # a stop and the wall together: the stop first
        (0, 0, None, False, None, 0),  # a job: its own end wins the poll it ends in
        (0, 0, None, True, "stopped", 1),  # a session: the stop still ends it stopped
        (0, None, None, True, None, 0),  # a session's row that ended by itself
    ],
)
def test_supervise_names_the_bound_that_ended_the_run(
    tmp_path: str, polls: int, stop_at: int | None, deadline_in: float | None, bounds_first: bool,
    want: str | None, kills: int,
) -> None:  # fmt: skip
    steps = Steps(polls)
    r = a_run(str(tmp_path), steps)
    if deadline_in is not None:
        r.deadline = time.monotonic() + deadline_in
    asked = [0]

    def stop() -> bool:
        asked[0] += 1
        return stop_at is not None and asked[0] > stop_at

    ticks: list[int] = []
    got = supervision.supervise(
        r, stop=stop, poll=0.0, tick=lambda: ticks.append(1), bounds_first=bounds_first
    )
    assert (got, steps.killed) == (want, kills)
    assert len(ticks) <= polls


def test_supervise_gives_up_with_timeout_error_past_give_up(tmp_path: str) -> None:
    r = a_run(str(tmp_path), Steps(1000))
    with pytest.raises(TimeoutError, match=f"run {'a' * 12} still running"):
        supervision.supervise(r, stop=lambda: False, poll=0.0, give_up=time.monotonic())


def test_a_prepared_run_binds_each_source_once_and_not_usrs_merged_links(tmp_path: str) -> None:
    run = spec.parse_run(BODY)
    p = la.PreparedRun(
        run_hash="a" * 64, dir=str(tmp_path), run=run, values={}, limits=spec.Limits(),
        plan=lim.Plan(pids=None, cpu=None, kill=None, v2=None, v1={}, how={}), bind_fds={},
        usr_links={"/bin": "usr/bin"}, seccomp=False, user_namespaces=False,
    )  # fmt: skip
    assert p.binds() == ["/usr", "/etc/alternatives", "$$workspace$$"]  # /bin is a link inside /usr's bind
    unbound = replace(p, run=replace(run, sandbox=replace(run.sandbox, read_only=("/bin",))))
    assert unbound.binds() == ["/bin", "$$workspace$$"]  # without /usr, /bin is bound itself
