"""``sotd/jobs/outcome.py``: how a run ended (ocx.md 1.7 and section 6, O9): the ``ended`` record and the
pure decisions that fill it.

Outcome order, first that holds: stopped, timed_out, limit cpu (budget reached, or SIGXCPU), limit disk,
limit file_size (SIGXFSZ, exit 153), limit memory, limit processes (a fork refused by pids.max and a
non-zero exit), then the verdict (``passed``/``failed``) or ``exited``; ``ended.limits_hit`` names every
limit met whatever the outcome (``limits_hit``). Guarantee: one run has one outcome, decided here from
what the supervisor saw (``classify``, pure, table-tested in tests/unit/test_jobs_limits.py). What would
break it: a second place that decides an outcome, or an order that lets a verdict hide a limit.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass
class Ended:
    """The ``ended`` record, plus where the files named in it are (for the caller's upload after it)."""

    outcome: str
    exit: int | None = None
    limit: str | None = None
    why: str | None = None
    step: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # as -> path on this node
    log_files: dict[str, str] = field(default_factory=dict)  # stdout/stderr -> path on this node
    limits_hit: list[str] = field(default_factory=list)

    def body(self) -> dict[str, object]:
        """The JSON body of ``ended`` (O9): outcome first, then what applies."""
        b: dict[str, object] = {"outcome": self.outcome}
        if self.outcome in ("passed", "failed"):
            b["verdict"] = self.outcome == "passed"
        for k in ("limit", "why", "step", "exit"):
            v = getattr(self, k)
            if v is not None:
                b[k] = v
        if self.outputs or self.outcome not in ("refused", "error", "lost"):
            b["outputs"] = dict(self.outputs)
        if self.logs:
            b["logs"] = dict(self.logs)
        if self.missing:
            b["missing"] = list(self.missing)
        if self.limits_hit:
            b["limits_hit"] = list(self.limits_hit)
        return b

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Ended:
        return cls(**d)  # type: ignore[arg-type]


def classify(
    *,
    exit_status: int | None,
    verdict: bool,
    stopped: bool,
    timed_out: bool,
    cpu_over: bool,
    pids_refused: int,
    memory_hit: bool = False,
    disk_over: bool = False,
) -> tuple[str, str | None]:
    """Pure: ``(outcome, limit)`` from what the supervisor saw. ``exit_status`` is bwrap's (128+N for a
    signal N)."""
    if stopped:
        return "stopped", None
    if timed_out:
        return "timed_out", None
    if cpu_over or exit_status == 128 + signal.SIGXCPU:
        return "limit", "cpu"
    if disk_over:
        return "limit", "disk"
    if exit_status == 128 + signal.SIGXFSZ:
        return "limit", "file_size"
    if memory_hit and exit_status != 0:
        return "limit", "memory"
    if pids_refused and exit_status != 0:
        return "limit", "processes"
    if verdict:
        return ("passed" if exit_status == 0 else "failed"), None
    return "exited", None


def limits_hit(
    *,
    cpu_over: bool,
    pids_refused: int,
    memory_hit: bool,
    disk_over: bool,
    file_size: int | None,
    sizes: list[int],
    killed_by_xfsz: bool,
    missing: bool,
) -> list[str]:
    """Pure: ``ended.limits_hit``, every limit the run met, whatever its outcome (a fork bomb that met
    ``processes`` and still exited 0, say): ``cpu``, ``processes`` (pids.max refused a fork), ``memory``
    (the cgroup reached its cap), ``disk``, ``file_size`` (a process got SIGXFSZ, or an output or log is
    exactly ``file_size`` bytes: cut there), ``outputs`` (a declared output is missing)."""
    out = []
    if cpu_over:
        out.append("cpu")
    if pids_refused:
        out.append("processes")
    if memory_hit:
        out.append("memory")
    if disk_over:
        out.append("disk")
    if killed_by_xfsz or (file_size is not None and any(n >= file_size for n in sizes)):
        out.append("file_size")
    if missing:
        out.append("outputs")
    return out
