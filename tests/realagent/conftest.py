"""Fixtures of the real-agent tier (tests/realagent): the pinned Claude Code, the stand-in model, a HOME
with the first run answered, a private tmux server, a sotd daemon whose rows run the real TUI.

Every test in this folder is marked ``realagent`` and ``serial`` (out of the parallel pass: the TUI's
timing is what these tests read; ``scripts/test`` runs them as one group in the background, one test at a
time, beside the parallel pass and the other serial groups but never beside the ``alone`` tests). Usage: /work/notes/realagent-kit.md and kit.py.
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
def claude_kit(request: pytest.FixtureRequest, claude_exe: str) -> kit.ClaudeKit:
    """The Claude Code a test runs: the pin, or with ``parametrize("claude_kit", ["pin", "newest"],
    indirect=True)`` each; ``newest`` is skipped, with the reason printed, when ``scripts/setup --newest``
    put none beside the pin."""
    label = getattr(request, "param", "pin")
    if label == "pin":
        return kit.ClaudeKit("pin", claude_exe, kit.pin())
    newest = kit.newest_claude()
    if newest is None:
        pytest.skip(
            f"no Claude Code newer than the pin {kit.pin()} in {kit.NEWEST_PREFIX} (scripts/setup --newest "
            "puts the registry's newest there)"
        )
    return newest


@pytest.fixture
def claude_home(tmp_path: Any, claude_kit: kit.ClaudeKit) -> kit.ClaudeHome:
    return kit.ClaudeHome(str(tmp_path / "claude"), version=claude_kit.version)


@pytest.fixture
def panes(claude_exe: str) -> Iterator[kit.Panes]:
    p = kit.Panes()
    yield p
    p.close()


@pytest.fixture
def start_claude(
    panes: kit.Panes, claude_home: kit.ClaudeHome, model: StandIn, tmp_path: Any, claude_kit: kit.ClaudeKit
) -> Callable[..., kit.Claude]:
    """``start_claude(project="proj", extra_env=None, args=())``: a real Claude Code session in ``panes``
    (the ``claude_kit``'s Claude Code)."""

    def start(project: str = "proj", **kw: Any) -> kit.Claude:
        kw.setdefault("exe", claude_kit.exe)
        return kit.Claude(panes, claude_home, model, str(tmp_path / project), **kw)

    return start


@pytest.fixture
def box(claude_home: kit.ClaudeHome, model: StandIn) -> Iterator[kit.Box]:
    """A sotd daemon (not yet started: ``box.install(...)`` first if the test wants, then ``box.start()``)
    whose ``claude`` rows run the pinned Claude Code with ``claude_home`` and ``model``."""
    b = kit.Box(claude_home, model, {"SOTD_TEST_HEARTBEAT_SECS": "2"})
    yield b
    b.close()


# ------------------------------------------------------------------------------------ Codex (issue 12)


@pytest.fixture(scope="session")
def codex_exe() -> str:
    """The pinned Codex; fails (never skips) with the install's error when it is not there."""
    from tests.realagent import codex_kit

    if shutil.which("tmux") is None:
        pytest.fail("the real-agent tier needs tmux (scripts/setup installs it)")
    return codex_kit.codex_exe()


@pytest.fixture
def codex_model() -> Iterator[Any]:
    """The stand-in Responses API on 127.0.0.1 (empty script: every turn answers ``Done.``)."""
    from tests.realagent.codex_standin import CodexStandIn

    s = CodexStandIn().start()
    yield s
    s.stop()


@pytest.fixture
def codex_home(tmp_path: Any, codex_exe: str, codex_model: Any) -> Any:
    """A ``codex_kit.CodexHome``: the stand-in provider, first-run notices answered, ``sleep`` allowed."""
    from tests.realagent import codex_kit

    home = codex_kit.CodexHome(str(tmp_path / "codex"), codex_model)
    home.rules("tier", (["sleep"], "allow"))
    return home


@pytest.fixture
def codex_panes(codex_exe: str) -> Iterator[kit.Panes]:
    p = kit.Panes()
    yield p
    p.close()


@pytest.fixture
def start_codex(codex_panes: kit.Panes, codex_home: Any, tmp_path: Any) -> Callable[..., Any]:
    """``start_codex(project="proj", extra_env=None, args=())``: a real Codex session in ``codex_panes``."""
    from tests.realagent import codex_kit

    def start(project: str = "proj", **kw: Any) -> Any:
        return codex_kit.Codex(codex_panes, codex_home, str(tmp_path / project), **kw)

    return start


@pytest.fixture
def codex_box(codex_home: Any, codex_model: Any) -> Iterator[Any]:
    """A sotd daemon (not yet started) whose ``codex`` rows run the pinned Codex with ``codex_home``."""
    from tests.realagent import codex_kit

    b = codex_kit.CodexBox(codex_home, codex_model, {"SOTD_TEST_HEARTBEAT_SECS": "2"})
    yield b
    b.close()
