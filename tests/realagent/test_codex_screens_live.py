"""The stored captures of the real Codex are current: each state is reached again with the pinned release
and captured the wake's way; after ``codex_screens.normalise`` (the Claude captures' normalising plus the
finished turn's clock and the working status line's blink and shimmer — nothing else) its bytes must equal
the stored fixture's, and its verdict must be the table's. A new release that draws differently fails
here: rerun ``python -m tests.realagent.codex_screens`` with the new pin and commit both (issue 12 part 4).

Two states are reached at a time (each its own CODEX_HOME, model and tmux server)."""

from __future__ import annotations

import pytest

from tests.realagent import capture, codex_screens

PARALLEL = 2


@pytest.fixture(scope="module")
def live(codex_exe: str) -> dict[str, str | BaseException]:
    return capture.live(codex_screens.CODEX, codex_screens.CASES, PARALLEL)


@pytest.mark.parametrize("case", codex_screens.CASES, ids=[c.name for c in codex_screens.CASES])
def test_the_real_codex_draws_the_stored_capture(
    case: codex_screens.Case, live: dict[str, str | BaseException]
) -> None:
    capture.check_stored(codex_screens.CODEX, case, live[case.name])
