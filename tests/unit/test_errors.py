"""The error classes (``sotd.errors``) and the page made from them (docs/errors.md).

Each code is named by one class and has one exit status; every class says its sentence; the checked-in
docs/errors.md is exactly what ``python -m sotd.errors`` writes; ``sotd.cli.main`` prints an error's
lines in order (reason, sentence, hint, after) on the stream its class names.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from sotd import errors
from sotd.cli import main as cli_main

pytestmark = pytest.mark.unit

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "errors.md")


def test_codes_are_unique_and_each_has_one_exit_status() -> None:
    codes = [cls.code for cls in errors.error_classes()]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    assert all(c.replace("_", "").isalpha() and c.islower() for c in codes)


def test_exit_statuses_are_documented_once_each() -> None:
    statuses = [s for s, _ in errors.EXIT_MEANINGS]
    assert len(statuses) == len(set(statuses))
    assert {cls.exit_status for cls in errors.error_classes()} <= set(statuses)


def test_every_class_says_its_sentence_and_when() -> None:
    for cls in errors.error_classes():
        assert cls.__doc__ and cls.sentence, cls.__name__


def test_the_checked_in_page_is_what_the_generator_writes() -> None:
    made = subprocess.run(
        [sys.executable, "-m", "sotd.errors"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    with open(DOC, encoding="utf-8") as f:
        assert f.read() == made, "docs/errors.md is stale: run `python -m sotd.errors > docs/errors.md`"
    for cls in errors.error_classes():
        assert f"| `{cls.code}` | {cls.exit_status} | `{cls.__name__}` |" in made


@pytest.mark.parametrize(
    ("error", "stderr", "stdout"),
    [
        (errors.SotdError("m"), "m\n", ""),
        (errors.SotdError("m", hint="h", reason="r"), "r\nm\nh\n", ""),
        (errors.SpawnFailed("m", hint="h", after=("a1", "a2")), "m\nh\na1\na2\n", ""),
        (errors.PollBusy("busy"), "", "busy\n"),
    ],
)
def test_main_prints_the_lines_in_order_on_the_class_stream(
    error: errors.SotdError, stderr: str, stdout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    cli_main._print_error(error)
    assert (err.getvalue(), out.getvalue()) == (stderr, stdout)
