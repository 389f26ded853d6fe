"""W5 of issue 6: 32 concurrent joins and touches lose nothing; a killed holder is reclaimed by proof; a
stopped holder is never forced (bench/registry.py asserts the invariants; the timings are the benchmark's)."""

from __future__ import annotations

import pytest
from bench.registry import run_registry

pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.alone, pytest.mark.timeout(180)]


def test_suite_registry_contention_reclaim_and_frozen_holder(tmp_path: object) -> None:
    r = run_registry(str(tmp_path), joins=32, procs=32, k=2, rounds=1, reclaims=1, frozen=1)
    assert r["problems"] == [], r["problems"]
    assert r["frozen_never_forced"] == "1/1"
    assert r["reclaim_ms"] is not None
