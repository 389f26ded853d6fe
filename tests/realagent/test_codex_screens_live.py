"""The stored captures of the real Codex are current: each state is reached again with the pinned release
and captured the wake's way; after ``codex_screens.normalise`` (the Claude captures' normalising plus the
finished turn's clock and the working status line's blink and shimmer — nothing else) its bytes must equal
the stored fixture's, and its verdict must be the table's. A new release that draws differently fails
here: rerun ``python -m tests.realagent.codex_screens`` with the new pin and commit both (issue 12 part 4).

Two states are reached at a time (each its own CODEX_HOME, model and tmux server)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.realagent import codex_kit, codex_screens, kit

PARALLEL = 2


@pytest.fixture(scope="module")
def live(codex_exe: str) -> dict[str, str | BaseException]:
    def one(case: codex_screens.Case) -> str | BaseException:
        try:
            return codex_screens.capture(case)
        except BaseException as e:  # reported by that case's test
            return e

    with ThreadPoolExecutor(PARALLEL) as pool:
        got = list(pool.map(one, codex_screens.CASES))
    return {c.name: g for c, g in zip(codex_screens.CASES, got, strict=True)}


@pytest.mark.parametrize("case", codex_screens.CASES, ids=[c.name for c in codex_screens.CASES])
def test_the_real_codex_draws_the_stored_capture(
    case: codex_screens.Case, live: dict[str, str | BaseException]
) -> None:
    raw = live[case.name]
    if isinstance(raw, BaseException):
        raise raw
    assert codex_kit.verdict(raw) == case.verdict
    assert codex_kit.verdict(codex_screens.normalise(raw)) == case.verdict  # normalising changes no verdict
    with open(codex_screens.path_of(case), encoding="utf-8", newline="") as f:
        stored = f.read()
    assert codex_screens.normalise(raw) == codex_screens.normalise(stored), (
        f"Codex {codex_kit.pin()} draws {case.name} differently now:\n{kit.plain(raw)}\n"
        "rerun python -m tests.realagent.codex_screens and commit the captures with the pin"
    )
