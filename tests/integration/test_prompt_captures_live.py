"""The stored screen captures are real and current: each is drawn again in a real tmux pane and captured
the wake's way; the bytes match the stored fixture and the verdict is the table's."""

from __future__ import annotations

import shutil

import pytest

from tests.fakes.screens import CASES, Case, capture, path_of, verdict_of

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_capture_again_matches_the_fixture(case: Case, tmp_path: object) -> None:
    raw = capture(case, str(tmp_path))
    assert verdict_of(raw) == case.verdict
    with open(path_of(case), encoding="utf-8", newline="") as f:
        assert raw == f.read(), "the screen changed: python -m tests.fakes.screens rewrites the fixtures"
