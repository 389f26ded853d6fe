"""``sotd/cli/doctor/report.py``: what ``sotd doctor`` found: each problem a value (``Finding``: its code,
what, why, the fix to type, the repair ``--fix`` may apply), and the checks that passed (``Report``).
Guarantee: a finding is data; nothing here checks, writes or prints. What would break it: a finding that
runs its repair when made (the repair is a function ``--fix`` alone calls)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Finding:
    """One problem: a stable ``code``, what is wrong, why it matters, the command that fixes it, and
    (when it is safe by the contract) the fix ``--fix`` applies, which returns what it did."""

    __slots__ = ("code", "fix", "repair", "what", "why")

    def __init__(
        self, code: str, what: str, why: str, fix: str, repair: Callable[[], str] | None = None
    ) -> None:
        self.code = code
        self.what = what
        self.why = why
        self.fix = fix
        self.repair = repair

    def doc(self) -> dict[str, object]:
        return {
            "code": self.code,
            "what": self.what,
            "why": self.why,
            "fix": self.fix,
            "fixable": bool(self.repair),
        }


class Report:
    """The findings and the checks that passed (``ok``: one line each)."""

    __slots__ = ("findings", "ok")

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.ok: list[str] = []

    def add(self, f: Finding) -> None:
        self.findings.append(f)
