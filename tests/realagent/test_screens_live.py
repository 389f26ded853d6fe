"""The stored captures of the real Claude Code are current: each state is reached again with the pinned
release and captured the wake's way; after ``screens.normalise`` (the temp path, seconds counters, the
finished turn's random verb, the spinner's animation frame, the blinking tool dot and cursor block, and blank cells'
invisible colours — nothing else) its bytes must equal the stored fixture's, and its verdict must be the
table's. A new release that draws differently fails here: rerun
``python -m tests.realagent.screens`` with the new pin and commit both (issue 11 part 1).

The states are reached three at a time (each its own HOME, model and tmux server), so the whole set
costs about a third of its sequential time."""

from __future__ import annotations

import difflib
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.realagent import kit, screens

PARALLEL = 3
# the first test reaches every state (the module fixture): one session each, three at a time, ~100 s
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def live(claude_exe: str) -> dict[str, str | BaseException]:
    def one(case: screens.Case) -> str | BaseException:
        try:
            return screens.capture(case)
        except BaseException as e:  # reported by that case's test
            return e

    with ThreadPoolExecutor(PARALLEL) as pool:
        got = list(pool.map(one, screens.CASES))
    return {c.name: g for c, g in zip(screens.CASES, got, strict=True)}


@pytest.mark.parametrize("case", screens.CASES, ids=[c.name for c in screens.CASES])
def test_the_real_tui_draws_the_stored_capture(
    case: screens.Case, live: dict[str, str | BaseException]
) -> None:
    raw = live[case.name]
    if isinstance(raw, BaseException):
        raise raw
    assert kit.verdict(raw) == case.verdict
    assert (
        kit.verdict(screens.normalise(raw)) == case.verdict
    )  # normalising never changes what the wake reads
    with open(screens.path_of(case), encoding="utf-8", newline="") as f:
        stored = f.read()
    got, want = screens.normalise(raw), screens.normalise(stored)
    diff = "\n".join(
        repr(d) for d in difflib.unified_diff(want.split("\n"), got.split("\n"), lineterm="", n=0)
    )
    assert got == want, (
        f"Claude Code {kit.pin()} draws {case.name} differently now:\n{kit.plain(raw)}\n{diff}\n"
        "rerun python -m tests.realagent.screens and commit the captures with the pin"
    )
