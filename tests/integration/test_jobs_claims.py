"""Workspace claims that end (issue 24 item 4), in process with real bubblewrap: a claim is recorded
only for a run that passed its checks, and dropped when the run is refused, ends, or is found dead at a
restart (``restart.adopt``), so one refused run never blocks the seed's default workspace for later
runs. The same through a real node and its restart: tests/integration/test_ocx_root_attacks.py."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from sotd.jobs import claims as wsc
from sotd.jobs import restart, runner
from sotd.jobs.outcome import Ended
from tests.integration import test_jobs_limits as jl

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists("/usr/bin/bwrap"), reason="needs root and bubblewrap"
    ),
]

PROJ = "$$root$$/build-user/projects/proj"


@pytest.fixture
def node() -> Iterator[runner.NodeSupplies]:
    """test_jobs_limits' lab node (its fixture, entered as a context)."""
    with contextlib.contextmanager(jl.node.__wrapped__)() as n:  # type: ignore[attr-defined]
        yield n


def claims(node: runner.NodeSupplies) -> dict[str, str]:
    d = os.path.join(node.state_dir, wsc.WORKSPACES)
    out = {}
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not n.startswith("."):
            with open(os.path.join(d, n)) as f:
                out[n] = f.read()
    return out


def test_a_refused_run_leaves_no_claim_and_the_default_workspace_runs(node: runner.NodeSupplies) -> None:
    """The issue's case: a run whose workspace is ``$$root$$/build-user/projects/proj`` (holding every
    default workspace) is refused while another run lives there, and records nothing; once that run
    ended, a run with the seed's default workspace passes; the proj-level run refused for another reason
    after its checks (the folder exists) drops its claim too."""
    live = jl.make_run(node, jl.body(["sh", "-c", "sleep 30"], {"wall": 20}))
    assert live.start() is not None
    ws_live = live.values["workspace"]
    assert claims(node) == {live.run_hash: ws_live}
    b = jl.body(["true"])
    b["workspace"][0]["at"] = PROJ
    nested = jl.make_run(node, b)
    assert nested.start() is None and nested.result is not None
    proj = os.path.join(node.root, "build-user/projects/proj")
    assert nested.result.body() == {
        "outcome": "refused",
        "why": f"the workspace {proj} would lie inside, or hold, run {live.run_hash[:12]}'s workspace {ws_live}",
    }
    assert claims(node) == {live.run_hash: ws_live}  # the refused run recorded nothing
    live.stop()
    assert live.wait(timeout=10).outcome == "stopped"
    assert claims(node) == {}  # the ended run dropped its own
    again = jl.make_run(node, {**b, "objective": "again"})
    assert again.start() is None and again.result is not None
    assert (again.result.outcome, again.result.step) == ("error", 0)
    assert again.result.why == f"the workspace {proj} already exists"
    assert claims(node) == {}  # claimed after its checks, dropped when the step failed
    _, ended = jl.make_run(node, jl.body(["true"], verdict=False)).execute()
    assert ended.outcome == "exited", ended  # the seed's default workspace is not held by anything
    assert claims(node) == {}


def test_a_run_found_dead_at_a_restart_drops_its_claim_and_a_live_one_keeps_it(
    node: runner.NodeSupplies,
) -> None:
    keep = jl.body(["sh", "-c", "sleep 30"], {"wall": 20})
    keep["sandbox"]["ends_with_parent"] = False
    alive = jl.make_run(node, keep)
    dead = jl.make_run(node, {**keep, "objective": "dies"})
    assert alive.start() is not None and dead.start() is not None
    dead.launcher.kill()  # its processes die with the node; no wait() records the end
    jl.child(dead).wait(timeout=5)
    assert set(claims(node)) == {alive.run_hash, dead.run_hash}
    lost = restart.adopt(node.state_dir, dead.run_hash, node)
    assert isinstance(lost, Ended) and lost.outcome == "lost"
    adopted = restart.adopt(node.state_dir, alive.run_hash, node)
    assert isinstance(adopted, runner.JobRun)
    assert claims(node) == {alive.run_hash: alive.values["workspace"]}
    adopted.stop()
    assert adopted.wait(timeout=10).outcome == "stopped"
    assert claims(node) == {}
    assert jl.child(alive).wait(timeout=5) is not None


def test_keep_claims_drops_every_claim_but_the_runs_looked_at_again(tmp_path: str) -> None:
    state = str(tmp_path)
    wsc.claim_workspace(state, "a" * 64, "/srv/r/u/p/a")
    wsc.claim_workspace(state, "c" * 64, "/srv/r/u/q/c")
    with open(os.path.join(state, wsc.WORKSPACES, "b" * 64), "w") as f:
        f.write("/srv/r/u/p")  # a claim an older node left for a refused run: it holds a's
    assert wsc.keep_claims(state, {"a" * 64}) == ["b" * 64, "c" * 64]
    assert sorted(os.listdir(os.path.join(state, wsc.WORKSPACES))) == [".lock", "a" * 64]
    wsc.release_workspace(state, "a" * 64)
    wsc.release_workspace(state, "a" * 64)  # idempotent
    assert os.listdir(os.path.join(state, wsc.WORKSPACES)) == [".lock"]
