"""The Stop hook's pure helpers: closing markers, the turn's start, and the paths a SITREP names."""

from __future__ import annotations

import calendar
import os
import time

import pytest

from sotd.cli.comm.hooks.stop import MAX_AUDITED, missing_paths, named_paths, sitrep, turn_started

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("SITREP: fixed `src/a.py`", ["src/a.py"]),
        ("`src/a.py:12` and `src/b.py:3:7` and `src/a.py`", ["src/a.py", "src/b.py"]),
        ("`/etc/hosts` `docs/x.md`", ["/etc/hosts", "docs/x.md"]),
        ("`README.md` `os.path` `x` ``", []),  # no slash: a name, not a path we can judge
        ("`https://x.invalid/a` `--out=dir/x` `src/*.py` `$HOME/x` `~/x` `a/{b,c}`", []),
        ("`two words/x` src/plain.py", []),  # spaces inside, or not backticked
    ],
)
def test_named_paths(text: str, paths: list[str]) -> None:
    assert named_paths(text) == paths


def test_named_paths_is_bounded() -> None:
    text = " ".join(f"`d/{i}`" for i in range(MAX_AUDITED + 5))
    assert named_paths(text) == [f"d/{i}" for i in range(MAX_AUDITED)]


def test_missing_paths(tmp_path: object) -> None:
    top = str(tmp_path)
    os.makedirs(os.path.join(top, "src"))
    open(os.path.join(top, "src", "a.py"), "w").close()
    os.symlink("nowhere", os.path.join(top, "src", "dangling"))
    assert missing_paths(["src/a.py", "src/dangling", "src/b.py", os.path.join(top, "src")], top) == [
        "src/b.py"
    ]


def test_turn_started() -> None:
    t = calendar.timegm(time.strptime("2026-11-30T07:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))
    assert turn_started("sess:0a1b2c3d:2026-11-30T07:00:00Z") == t
    assert turn_started(":0a1b2c3d:2026-11-30T07:00:00Z") == t
    for bad in ("", "sess:2026-11-30", "x" * 30, None, 5):
        assert turn_started(bad) is None


@pytest.mark.parametrize(
    ("text", "got"),
    [
        ("All good.\nSITREP: shipped", ("done", "shipped")),
        ("### SITREP-QUESTION: which one?", ("blocked", "which one?")),
        ("**SITREP-WAITING:**\n\n  CI  ", ("waiting", "CI")),
        ("SITREP: first\nSITREP-WAITING: second", ("waiting", "second")),  # the last marker wins
        ("no marker", None),
    ],
)
def test_sitrep(text: str, got: tuple[str, str] | None) -> None:
    assert sitrep(text) == got
