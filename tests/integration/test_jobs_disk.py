"""Disk that holds (issue 24, item 5): each run's workspace is a file system of exactly its disk cap (a
sparse image, mkfs.ext4, a loop mount), finished workspaces are removed after the policy's retention, and
a node-wide bound refuses a run naming the bound. Real root, real bubblewrap, real loop mounts."""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.demo.ocx_seed import BOARD_C, MAKEFILE
from sotd.jobs import disk, nodepolicy, runner
from tests.integration.test_jobs_limits import DirCarrier, body, kill_own_cgroups, make_run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists("/usr/bin/bwrap") or not os.path.exists("/dev/loop-control"),
        reason="needs root, bubblewrap and loop devices",
    ),
]


LIVE: list[runner.JobRun] = []  # runs a test left running: stopped at teardown


def _stop_all() -> None:
    for r in LIVE:
        if r.result is None:
            r.stop()
            r.wait(timeout=15)
    LIVE.clear()


@pytest.fixture
def node() -> Iterator[runner.NodeSupplies]:
    top = f"/tmp/sotd-disk-{secrets.token_hex(4)}"
    os.mkdir(top, 0o755)
    src = os.path.join(top, "src")
    os.mkdir(src)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write(MAKEFILE)
    with open(os.path.join(src, "board.c"), "w") as f:
        f.write(BOARD_C)
    os.mkdir(os.path.join(top, "root"), 0o755)
    policy = nodepolicy.parse_policy(
        {
            "users": ["build-user"], "uids": [1000], "gids": [1000],
            "read_only": ["/usr", "/etc/alternatives"], "read_write": ["$$workspace$$"],
            "limits": {"wall": "1h", "processes": 512, "disk": "8M"},
            "workspaces": {"total": "24M", "keep": 2, "keep_bytes": "64M"},
        }
    )  # fmt: skip
    n = runner.NodeSupplies(root=os.path.join(top, "root"), policy=policy, carrier=DirCarrier(src),
                       state_dir=os.path.join(top, "state"))  # fmt: skip
    yield n
    _stop_all()
    kill_own_cgroups(n.state_dir)
    disk.release_below(top)
    shutil.rmtree(top, ignore_errors=True)


def quiet(command: str, tag: str, limits: dict[str, object] | None = None) -> dict[str, Any]:
    """A run of ``sh -c command`` with no declared output (``tag`` makes its RUN-HASH its own)."""
    b = body(["sh", "-c", command], {"wall": 30, **(limits or {})}, verdict=False)
    b["process"]["unversioned_files"] = []
    b["objective"] = tag
    return b


def log(r: runner.JobRun, name: str) -> str:
    with open(os.path.join(r.dir, name)) as f:
        return f.read()


def mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return disk.mounted_at(f.read(), path)


def test_a_run_capped_at_8m_lands_at_most_8m_and_ends_limit_disk(node: runner.NodeSupplies) -> None:
    """A run capped at 8M that writes 32M: the write gets ENOSPC inside the sandbox, the run ends
    ``limit: disk`` at once (not after its sleep) with the reason, and the bytes on the node's disk (the
    image's allocated blocks) are at most 8M."""
    r = make_run(node, quiet('head -c 33554432 /dev/zero > "$HOME/big"; echo "head $?"; sleep 30', "cap8"))
    t0 = time.monotonic()
    started, e = r.execute()
    assert started is not None, r.result
    assert started["limits"]["disk"] == "8M"  # type: ignore[index]
    assert r.how()["disk"] == "the workspace is a file system of exactly that size (ENOSPC past it)"
    assert time.monotonic() - t0 < 10
    assert e.body() == {
        "outcome": "limit", "limit": "disk",
        "why": "the workspace's file system of 8M (run.limits.disk) is full: writes past it get ENOSPC",
        "exit": e.exit, "outputs": {}, "logs": e.logs, "limits_hit": ["disk"],
    }  # fmt: skip
    # the node kills the run once its disk is full, which may land before head has written its ENOSPC
    # error or before the echo; whatever ran first says that head failed of a full disk
    out, err = log(r, "stdout"), log(r, "stderr")
    assert out in ("head 1\n", ""), out
    assert "No space left on device" in err or (out == "" and err == ""), err
    ws = r.values["workspace"]
    img = r.disks.image(r.run_hash)
    assert os.path.getsize(img) == 8 << 20 and disk.allocated(img) <= 8 << 20
    assert 7 << 20 < os.path.getsize(os.path.join(ws, "big")) <= 8 << 20
    assert mounted(ws) and os.stat(ws).st_uid == 1000 and os.stat(ws).st_mode & 0o777 == 0o700
    assert sorted(os.listdir(ws)) == ["big", "tree"]  # no lost+found: only the files step and the run


def test_retention_keeps_the_newest_by_count_and_bytes_and_never_a_live_run(
    node: runner.NodeSupplies,
) -> None:
    """keep = 2: after a third run ends the oldest finished workspace is unmounted, its image deleted and
    its folder removed; a live run's workspace (started first, so the oldest) stays. Then keep_bytes =
    3M with runs of 2M each: only the newest is kept."""
    live = make_run(node, quiet("sleep 30", "live"))
    LIVE.append(live)
    assert live.start() is not None, live.result
    done = []
    for i in range(3):
        r = make_run(node, quiet('head -c 1048576 /dev/urandom > "$HOME/one"', f"small{i}"))
        _, e = r.execute()
        assert e.outcome == "exited" and e.exit == 0, (e, log(r, "stderr"))
        done.append(r)
    first, *kept = done
    assert not os.path.exists(first.values["workspace"]) and not mounted(first.values["workspace"])
    assert not os.path.exists(first.disks.image(first.run_hash))
    for r in kept:
        assert (
            mounted(r.values["workspace"])
            and os.path.getsize(os.path.join(r.values["workspace"], "one")) == 1 << 20
        )
    assert mounted(live.values["workspace"]) and live.disks.own_fs(live.run_hash)
    assert {h.run_hash for h in live.disks.held()} == {live.run_hash, *(r.run_hash for r in kept)}

    ws_pol = dataclasses.replace(node.policy.workspaces, keep_bytes=3 << 20)
    tight = dataclasses.replace(node, policy=dataclasses.replace(node.policy, workspaces=ws_pol))
    two = []
    for i in range(2):
        r = make_run(tight, quiet('head -c 2097152 /dev/urandom > "$HOME/two"', f"two{i}"))
        _, e = r.execute()
        assert e.outcome == "exited" and e.exit == 0, e
        two.append(r)
    assert os.path.exists(two[1].values["workspace"]) and not os.path.exists(two[0].values["workspace"])
    assert not any(os.path.exists(r.values["workspace"]) for r in kept)
    assert mounted(live.values["workspace"])  # still live, never removed
    live.stop()
    live.wait(timeout=10)
    assert live.disks.held() and all(h.ended is not None for h in live.disks.held())


def test_the_node_wide_bound_refuses_naming_it_and_the_node_still_runs_a_control(
    node: runner.NodeSupplies,
) -> None:
    """total = 24M with 8M caps: three live runs take it all, a fourth is refused with the exact sentence
    (and makes no workspace); once they end, the benign control run (the seed's build) passes."""
    lives = []
    for i in range(3):
        r = make_run(node, quiet("sleep 30", f"hold{i}"))
        LIVE.append(r)
        assert r.start() is not None, r.result
        lives.append(r)
    extra = make_run(node, quiet("true", "extra"))
    assert extra.start() is None and extra.result is not None
    assert extra.result.body() == {
        "outcome": "refused",
        "why": "this node's bound on what all runs' workspaces may hold, jobs.policy.workspaces.total (24M),"
        " would be passed: the 3 live runs' disk caps take 24M and this run's disk cap is 8M",
    }
    assert not os.path.exists(extra.values["workspace"])
    assert extra.run_hash not in {h.run_hash for h in extra.disks.held()}
    stops = [threading.Thread(target=r.stop) for r in lives]
    for t in stops:
        t.start()
    for t in stops:
        t.join()
    assert [r.wait(timeout=10).outcome for r in lives] == ["stopped"] * 3
    control = make_run(node, body(["make", "-C", "$$tree$$", "image"]))
    started, e = control.execute()
    assert started is not None and e.outcome == "passed", (control.result, log(control, "stderr"))
    assert mounted(control.values["workspace"])


def test_measured_is_the_documented_fallback(node: runner.NodeSupplies) -> None:
    """``cap = "measured"``: no file system of its own; the workspace's use is measured every 2 s and the
    run killed over it (it may pass the cap meanwhile, as docs/jobs.md says)."""
    ws_pol = dataclasses.replace(node.policy.workspaces, cap="measured")
    loose = dataclasses.replace(node, policy=dataclasses.replace(node.policy, workspaces=ws_pol))
    r = make_run(
        loose, quiet('head -c 16777216 /dev/zero > "$HOME/big"; sleep 30', "measured", {"disk": "4M"})
    )
    started, e = r.execute()
    assert started is not None, r.result
    assert (e.outcome, e.limit, e.why) == ("limit", "disk", None)
    assert not mounted(r.values["workspace"]) and not r.disks.own_fs(r.run_hash)
