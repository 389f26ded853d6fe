"""The stored captures of the real Claude Code are current: each state is reached again with the pinned
release and captured the wake's way; after ``screens.normalise`` (the temp path, seconds counters, the
finished turn's random verb, the spinner's animation frame, the blinking tool dot and cursor block, and blank cells'
invisible colours — nothing else) its bytes must equal the stored fixture's, and its verdict must be the
table's. A new release that draws differently fails here: rerun
``python -m tests.realagent.screens`` with the new pin and commit both (issue 11 part 1).

The states are reached three at a time (each its own HOME, model and tmux server), so the whole set
costs about a third of its sequential time."""

from __future__ import annotations

import pytest

from tests.realagent import capture, screens

PARALLEL = 3
# the first test reaches every state (the module fixture): one session each, three at a time, ~100 s
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def live(claude_exe: str) -> dict[str, str | BaseException]:
    return capture.live(screens.CLAUDE, screens.CASES, PARALLEL)


@pytest.mark.parametrize("case", screens.CASES, ids=[c.name for c in screens.CASES])
def test_the_real_tui_draws_the_stored_capture(
    case: screens.Case, live: dict[str, str | BaseException]
) -> None:
    capture.check_stored(screens.CLAUDE, case, live[case.name])
