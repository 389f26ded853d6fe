"""``sotd/cli/install/part.py``: what an install part is (``Part``) and what every part is given (``Setup``).

Behaviour 1.12. A part is a module of this package with three functions: ``check`` raises before anything
at all is written (a settings file we could not merge into), ``install`` writes its files and notes in the
install record what it added, ``uninstall`` takes out exactly what the record names and returns 0, or 1
when a file had to be left as it was. Parts compose: none knows another's record key, and the order is
``command.PARTS``'s alone (uninstall walks it backwards).

What would break it: a part whose ``uninstall`` reads anything but the record (it would take out what
another install, or the user, put there), or a ``check`` that writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from sotd.formats.layout import Layout

    class Part(Protocol):
        """One thing ``sotd comm install`` puts in (a module of ``sotd.cli.install``)."""

        def check(self, setup: Setup) -> None: ...

        def install(self, setup: Setup, record: dict[str, object]) -> None: ...

        def uninstall(self, setup: Setup, record: dict[str, object]) -> int: ...


@dataclass(frozen=True)
class Setup:
    """One install's choices: the comm folder's layout, the ``sotd`` the scripts run, Claude Code's settings
    file (``--agent-settings``; None without it) and whether the skill was asked for (``--skill``)."""

    lay: Layout
    sotd: str = ""
    settings: str | None = None
    skill_wanted: bool = False

    @property
    def home(self) -> str:
        return os.path.expanduser("~")

    @property
    def claude_dir(self) -> str:
        """Where the skill goes: beside the settings file named, else ``~/.claude``."""
        return os.path.dirname(self.settings) if self.settings else os.path.join(self.home, ".claude")
