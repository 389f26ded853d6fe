"""The benchmark page's generator and the scale run's pure rules (bench/report.py, bench/scale.py).

A regenerated docs/benchmarks.md must keep every section a result exists for (the Codex wake's was
hand-added once and lost on every regeneration), and the scale run's FAILED counting must tell the
bounded lock answers the contract allows from every other answer.
"""

from __future__ import annotations

import json
import os

import pytest
from bench import report, scale

pytestmark = pytest.mark.unit

CODEX = {
    "machine": {"cpu_count": 2, "date": "2026-12-01T10:44:33Z", "load_avg_start": [1.0, 1.0, 1.0]},
    "params": {"rounds": 12, "hold_s": 1.5, "tick_s": 2.0, "codex": "0.171.0", "target_median_s": 2.5},
    "latency_s": {"n": 12, "median": 1.836, "p95": 1.948, "p99": 1.948, "min": 1.7751, "max": 1.948},
    "wakes": 12,
    "pass_median": True,
    "pass_once_per_batch": True,
    "pass": True,
}


def test_the_codex_wake_section_is_generated_with_its_figures() -> None:
    text = report._codex_wake(CODEX)
    assert text.startswith("## The wake of a real Codex row (`bench/codex_wake.py`, issue 12)")
    assert "| idle Codex row | 12 | 12 | 1.84 | 1.95 | 1.78 | 1.95 |" in text
    assert "at end" not in text  # a result without an end load says nothing about it
    assert (
        report._codex_wake({"not_run": "tmux is not installed"}).count("**Not run**: tmux is not installed.")
        == 1
    )


def test_a_regenerated_page_keeps_the_codex_wake_section_and_its_note(tmp_path: os.PathLike[str]) -> None:
    results = os.path.join(str(tmp_path), "results")
    os.makedirs(results)
    with open(os.path.join(results, "codex_wake.json"), "w", encoding="utf-8") as f:
        json.dump(CODEX, f)
    out = os.path.join(str(tmp_path), "docs", "benchmarks.md")
    assert report.main(["--results", results, "--out", out]) == 0
    with open(out, encoding="utf-8") as f:
        page = f.read()
    assert "## The wake of a real Codex row" in page
    assert "| issue 12 | wake of an idle real Codex row" in page  # and its headline row
    assert "The idle Codex row is woken" in page  # bench/notes/codex_wake.md, included


@pytest.mark.parametrize(
    ("answer", "allowed"),
    [
        ("FAILED -> @b: the inbox lock for @b was held for 2s — nothing was appended", True),
        ("FAILED -> @b: the daemon did not answer at ssh:boxa/boxa", False),
        (
            "FAILED -> @b: the frame arrived after its sender stopped waiting for it, so nothing was filed",
            False,
        ),
        ("no answer within 120 s (the bench's limit)", False),
    ],
)
def test_only_the_bounded_lock_answers_are_allowed(answer: str, allowed: bool) -> None:
    assert scale.allowed_failure(answer) is allowed


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            "FAILED -> @a12: the daemon did not answer at unix:/tmp/sotd-sc-x/boxa/run/sotd.sock",
            "FAILED -> @<h>: the daemon did not answer at unix:<path>",
        ),
        (
            "FAILED -> @b3: no box answered for @b3 within 0.629437s: boxb",
            "FAILED -> @<h>: no box answered for @<h> within <n>s: boxb",
        ),
        (
            "FAILED -> @c1: the inbox lock for @c1 was held for 2s — nothing was appended",
            "FAILED -> @<h>: the inbox lock for @<h> was held for 2s — nothing was appended",
        ),
    ],
)
def test_answers_that_differ_only_in_handles_paths_and_figures_are_one_reason(
    answer: str, reason: str
) -> None:
    assert scale.reason_of(answer) == reason


@pytest.mark.parametrize(
    ("src", "dst", "route"),
    [
        ("boxb", "boxb", "local"),
        ("boxa", "boxa", "local"),
        ("boxb", "boxa", "guest -> hub"),
        ("boxa", "boxc", "hub -> guest"),
        ("boxb", "boxc", "guest -> guest"),
    ],
)
def test_route_of(src: str, dst: str, route: str) -> None:
    assert scale.route_of(src, dst) == route


def test_the_per_verb_table_comes_from_the_newer_result() -> None:
    full = {"machine": {"date": "2026-12-01T16:00:13Z"}, "tag": "full"}
    alone_old = {"machine": {"date": "2026-12-01T13:34:00Z"}, "tag": "alone"}
    alone_undated = {"tag": "undated"}
    assert report._per_verb({"per_verb": full}, alone_old) is full
    assert report._per_verb({"per_verb": full}, alone_undated) is full
    assert report._per_verb({}, alone_old) is alone_old
    later = {"machine": {"date": "2026-12-02T09:00:00Z"}}
    assert report._per_verb({"per_verb": full}, later) is later
    assert report._per_verb({}, None) is None
