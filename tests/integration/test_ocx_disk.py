"""Issue 24, item 5, against a real node (``sotd ocx node``, real bubblewrap, real Fossil on 127.0.0.1,
real loop mounts): a run that writes past its disk cap lands at most the cap on the node's disk and ends
``limit: disk`` with the reason; the node-wide bound refuses a run with the sentence naming the bound;
the node then still answers the benign control run (the seed's build)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from sotd.jobs import disk
from tests.ocx import runkit as rk

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None or not os.path.exists("/dev/loop-control"),
        reason="needs root, bubblewrap and loop devices",
    ),
    pytest.mark.timeout(300),
]


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    with rk.served_lab("sotd-ocxdisk") as lab:
        with open(lab.envs["b"]["SOT_OCX_POLICY"], "a") as f:
            f.write('\n[jobs.policy.workspaces]\ntotal = "2G"\nkeep = 1\n')
        yield lab


def image_bytes(lab: rk.Lab, run_hash: str) -> int:
    return disk.allocated(os.path.join(lab.state["b"], "jobs", disk.DISKS, run_hash + ".img"))


def test_a_node_holds_each_cap_and_its_bound_and_still_answers(lab: rk.Lab) -> None:
    code = lab.server_code("b")

    def sh(script: str, objective: str, limits: dict[str, object]) -> dict[str, object]:
        b = rk.run_body(code, ["sh", "-c", script], limits={"wall": "2m", **limits}, objective=objective)
        b["process"]["unversioned_files"] = []  # type: ignore[index]
        return b

    node = rk.start_node(lab, "b", interval=0.3)
    try:
        full = rk.post_run(
            lab, "a", sh('head -c 33554432 /dev/zero > "$HOME/big"; sleep 60', "fill", {"disk": "8M"})
        )
        ended = rk.wait_answer(lab, "a", full, "ended")
        assert (ended["outcome"], ended["limit"], ended["limits_hit"], ended["why"]) == (
            "limit", "disk", ["disk"],
            "the workspace's file system of 8M (run.limits.disk) is full: writes past it get ENOSPC",
        ), ended  # fmt: skip
        assert 0 < image_bytes(lab, full) <= 8 << 20
        holds = [rk.post_run(lab, "a", sh("sleep 120", f"hold {i}", {})) for i in range(2)]
        for h in holds:
            rk.wait_answer(lab, "a", h, "started")
        extra = rk.post_run(lab, "a", sh("true", "one more", {}))
        assert rk.wait_answer(lab, "a", extra, "ended") == {
            "outcome": "refused",
            "why": "this node's bound on what all runs' workspaces may hold, jobs.policy.workspaces.total (2G),"
            " would be passed: the 2 live runs' disk caps take 2G and this run's disk cap is 1G",
        }
        for h in holds:
            rk.post_stop(lab, "a", h)
        assert [rk.wait_answer(lab, "a", h, "ended")["outcome"] for h in holds] == ["stopped", "stopped"]
        control = rk.post_run(
            lab, "a", rk.run_body(code, ["make", "-C", "$$tree$$", "image"], limits={"wall": "5m"})
        )
        ended = rk.wait_answer(lab, "a", control, "ended")
        assert ended["outcome"] == "passed", ended
        # keep = 1: only the control run's workspace is left of the five
        root = os.path.join(lab.top, "b-root", "build-user", "projects", "proj")
        assert os.listdir(root) == [control]
        assert image_bytes(lab, full) == 0 and not os.path.exists(os.path.join(root, full))
    finally:
        rk.stop_node(node)
