"""Fixtures of the real-agent tier (tests/realagent): the pinned Claude Code, the stand-in model, a HOME
with the first run answered, a private tmux server, a sotd daemon whose rows run the real TUI.

Every test in this folder is marked ``realagent`` and ``serial`` (the TUI's timing is what these tests
read: they run in the serial pass, beside nothing). Usage: /work/notes/realagent-kit.md and kit.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.realagent import kit
from tests.realagent.standin import StandIn


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the CI's serial pass must see these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/realagent/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.realagent)
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def claude_exe() -> str:
    """The pinned Claude Code; fails (never skips) with the install's error when it is not there."""
    if shutil.which("tmux") is None:
        pytest.fail("the real-agent tier needs tmux (scripts/setup installs it)")
    return kit.claude_exe()


@pytest.fixture
def model() -> Iterator[StandIn]:
    """The stand-in Messages API on 127.0.0.1 (empty script: every turn answers ``Done.``)."""
    s = StandIn().start()
    yield s
    s.stop()


@pytest.fixture
def claude_home(tmp_path: Any, claude_exe: str) -> kit.ClaudeHome:
    return kit.ClaudeHome(str(tmp_path / "claude"))


@pytest.fixture
def panes(claude_exe: str) -> Iterator[kit.Panes]:
    p = kit.Panes()
    yield p
    p.close()


@pytest.fixture
def start_claude(
    panes: kit.Panes, claude_home: kit.ClaudeHome, model: StandIn, tmp_path: Any
) -> Callable[..., kit.Claude]:
    """``start_claude(project="proj", extra_env=None, args=())``: a real Claude Code session in ``panes``."""

    def start(project: str = "proj", **kw: Any) -> kit.Claude:
        return kit.Claude(panes, claude_home, model, str(tmp_path / project), **kw)

    return start


@pytest.fixture
def box(claude_home: kit.ClaudeHome, model: StandIn) -> Iterator[kit.Box]:
    """A sotd daemon (not yet started: ``box.install(...)`` first if the test wants, then ``box.start()``)
    whose ``claude`` rows run the pinned Claude Code with ``claude_home`` and ``model``."""
    b = kit.Box(claude_home, model, {"SOTD_TEST_HEARTBEAT_SECS": "2"})
    yield b
    b.close()
