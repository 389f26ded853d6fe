"""The errors the jobs layer raises: each a ``SotdError`` with a stable code and one clear sentence.

A ``Refused`` becomes ``ended {"outcome": "refused", "why": message}``; a ``StepFailed`` becomes
``ended {"outcome": "error", "step": index}``; a ``LaunchFailed`` ``ended {"outcome": "error", "why":
message}``. Nothing here prints.
"""

from __future__ import annotations

from sotd.errors import SotdError


class JobError(SotdError):
    """Something the run executor was asked to do could not be done."""

    code = "job"


class Refused(JobError):
    """The run (its fields, placeholders, sandbox, limits or the node policy) is refused; message says why."""

    code = "job_refused"


class StepFailed(JobError):
    """A workspace step failed; ``step`` is its index in ``run.workspace``, ``kind`` its name."""

    code = "job_step_failed"

    def __init__(self, step: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.step = step
        self.kind = kind


class LaunchFailed(JobError):
    """The prepared run's launcher could not start its sandbox (a session's row did not open, say)."""

    code = "job_launch_failed"


class PolicyError(JobError):
    """The node's jobs policy (TOML) is malformed; the message names the key."""

    code = "job_policy"
