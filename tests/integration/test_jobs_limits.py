"""The run executor with real limits, real bubblewrap and real cgroups (this host: cgroup v1 + bare v2)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.demo.ocx_seed import BOARD_C, MAKEFILE  # the board project the demo builds too
from sotd.jobs import disk, nodepolicy, restart, runner, spec, statefolder
from sotd.jobs import launchers as la
from sotd.jobs import limits as lim
from sotd.jobs.nodepolicy import DEFAULT_MAXIMA
from sotd.jobs.outcome import Ended
from sotd.jobs.steps import Target

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.alone,  # CPU budgets and the teardown's sweep of every sotd-job cgroup: beside nothing
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists("/usr/bin/bwrap"), reason="needs root and bubblewrap"
    ),
]

SC = "c" * 40


class DirCarrier:
    """A local carrier: ``export`` copies a source folder (the check-in); the rest are not used here."""

    def __init__(self, src: str) -> None:
        self.src = src

    def export(self, repo: str, ref: str, into: str, ids: tuple[int, int] | None = None) -> None:
        shutil.copytree(self.src, into, dirs_exist_ok=True)

    def set_password(self, repo: str, login: str, password: str) -> None:
        raise RuntimeError("not used")

    def clone(
        self, url: str, file: str, login: str, password: str, ids: tuple[int, int] | None = None
    ) -> None:
        raise RuntimeError("not used")

    def checkout(self, repo: str, ref: str, dir: str, ids: tuple[int, int] | None = None) -> None:
        raise RuntimeError("not used")

    def resolve(self, repo: str, ref: str) -> str | None:
        return "d" * 64  # a folder, not a repository: it stands for one check-in


@pytest.fixture
def node() -> Iterator[runner.NodeSupplies]:
    top = f"/tmp/sotd-jobs-{secrets.token_hex(4)}"
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
            "limits": {"wall": "1h", "processes": 512},
        }
    )  # fmt: skip
    n = runner.NodeSupplies(
        root=os.path.join(top, "root"),
        policy=policy,
        carrier=DirCarrier(src),
        state_dir=os.path.join(top, "state"),
    )
    yield n
    kill_own_cgroups(n.state_dir)
    disk.release_below(top)  # the workspaces' own file systems
    shutil.rmtree(top, ignore_errors=True)


def kill_own_cgroups(state_dir: str) -> None:
    """Teardown: nothing of ours survives a failed test, and nothing of a test running beside this one is
    touched (only the cgroups of this node's runs, ``STATE/<RUN-HASH>``)."""
    mine = {"sotd-job-" + h[:16] for h in os.listdir(state_dir)} if os.path.isdir(state_dir) else set()
    for d in os.listdir("/sys/fs/cgroup/pids"):
        if d in mine:
            cg = lim.Cgroups.existing(
                {"pids": f"/sys/fs/cgroup/pids/{d}"}, lim.plan(spec.Limits(), lim.CgroupFacts(), 0)
            )
            cg.kill()
            cg.remove()


def body(
    command: list[str], limits: dict[str, object] | None = None, *, verdict: bool = True
) -> dict[str, Any]:
    return {
        "clone": SC,
        "objective": "test",
        "workspace": [
            {"step": "directory", "at": "$$root$$/$$process_user$$/projects/$$repository_name$$/$$run$$"},
            {"step": "files", "of": "trunk", "into": "$$workspace$$/tree"},
        ],
        "sandbox": {
            "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": False,
            "isolate_terminal": True, "ends_with_parent": True, "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
            "read_only": ["/usr", "/etc/alternatives"], "read_write": ["$$workspace$$"], "homes": [], "created_files": [],
        },
        "limits": limits or {},
        "process": {
            "user": "build-user", "command": command, "env": {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$"},
            "verdict": verdict,
            "unversioned_files": [{"at": "$$workspace$$/tree/out/board.img", "as": "builds/board.img"}],
        },
    }  # fmt: skip


def child(r: runner.JobRun) -> subprocess.Popen[bytes]:
    """The sandbox's child process of a run this node started (``launchers.Direct``)."""
    assert isinstance(r.launcher, la.Direct) and r.launcher.proc is not None
    return r.launcher.proc


def make_run(node: runner.NodeSupplies, b: dict[str, Any], hash_name: str = "sha3_256") -> runner.JobRun:
    raw = json.dumps({"ocx": 2, "to": "lab-user", "run": b}).encode()
    h = hashlib.new(hash_name, raw).hexdigest()
    return runner.JobRun(
        b,
        run_hash=h,
        repository_name="proj",
        target=Target("/nonexistent.fossil"),
        node=node,
        hash_name=hash_name,
    )


def test_seed_build_example_passes_and_hashes_the_image(node: runner.NodeSupplies) -> None:
    r = make_run(
        node,
        body(
            ["make", "-C", "$$tree$$", "image"],
            {"wall": "1h", "cpu": 3000, "processes": 256, "file_size": "2G"},
        ),
    )
    started, ended = r.execute()
    assert started is not None, r.result
    ws = started["values"]["workspace"]  # type: ignore[index]
    assert started["limits"] == {
        "wall": "1h",
        "cpu": 3000,
        "processes": 256,
        "file_size": "2G",
        **DEFAULT_MAXIMA,
    }
    with open(os.path.join(r.dir, "stderr")) as f:
        assert ended.outcome == "passed", f.read()
    img = os.path.join(ws, "tree/out/board.img")
    with open(img, "rb") as f:
        data = f.read()
    assert data.startswith(b"board 0\n")
    assert ended.outputs == {"builds/board.img": hashlib.sha3_256(data).hexdigest()}
    # the file to upload is the node's private copy of the bytes hashed, not the workspace's path
    assert ended.files == {"builds/board.img": os.path.join(r.dir, "outputs", "0")}
    with open(ended.files["builds/board.img"], "rb") as f:
        assert f.read() == data
    assert os.stat(img).st_uid == 1000 and os.stat(ws).st_mode & 0o777 == 0o700
    assert set(ended.logs) == {"stdout", "stderr"}
    with open(ended.log_files["stdout"], "rb") as f:
        assert ended.logs["stdout"] == hashlib.sha3_256(f.read()).hexdigest()
    b = ended.body()
    assert b["outcome"] == "passed" and b["verdict"] is True and b["exit"] == 0
    assert list(b) == ["outcome", "verdict", "exit", "outputs", "logs"]
    assert restart.adopt(node.state_dir, r.run_hash).outcome == "passed"  # recorded: adopt returns it


def test_sha1_repositories_hash_with_sha1(node: runner.NodeSupplies) -> None:
    r = make_run(node, body(["make", "-C", "$$tree$$", "image"]), hash_name="sha1")
    _, ended = r.execute()
    assert ended.outcome == "passed" and len(ended.outputs["builds/board.img"]) == 40


def test_failed_verdict_and_exited(node: runner.NodeSupplies) -> None:
    _, e = make_run(node, body(["sh", "-c", "exit 3"])).execute()
    assert (e.outcome, e.exit, e.missing) == ("failed", 3, ["builds/board.img"])
    _, e = make_run(node, body(["sh", "-c", "exit 4"], verdict=False)).execute()
    assert (e.outcome, e.exit) == ("exited", 4)


def test_wall_limit_ends_a_sleeping_run(node: runner.NodeSupplies) -> None:
    r = make_run(node, body(["sleep", "30"], {"wall": 1}))
    t0 = time.monotonic()
    _, e = r.execute()
    assert e.outcome == "timed_out" and time.monotonic() - t0 < 4
    assert r.cgroups is not None and r.cgroups.empty()


def test_cpu_budget_is_for_the_whole_run_across_processes(node: runner.NodeSupplies) -> None:
    # three busy processes of ~0.8 s each: each stays under RLIMIT_CPU (1 s), together they pass the budget
    hog = "i=0; while [ $i -lt 10000000 ]; do i=$((i+1)); done"
    r = make_run(
        node, body(["sh", "-c", f"for n in 1 2 3 4 5 6; do ( {hog} ) & done; wait"], {"cpu": 1, "wall": 10})
    )
    t0 = time.monotonic()
    started, e = r.execute()
    assert started is not None and "cgroup" in r.how()["cpu"]
    assert (e.outcome, e.limit) == ("limit", "cpu") and time.monotonic() - t0 < 3


def test_fork_bomb_is_held_by_processes(node: runner.NodeSupplies) -> None:
    bomb = "b() { b & b & }; b; sleep 5"
    r = make_run(node, body(["sh", "-c", bomb], {"processes": 16, "wall": 2}))
    started, e = r.execute()
    assert started is not None and r.how()["processes"].endswith("pids.max")
    assert e.outcome in ("timed_out", "limit")
    assert r.cgroups is not None and r.cgroups.empty()


def test_fork_failure_under_processes_is_limit_processes(node: runner.NodeSupplies) -> None:
    script = "for i in $(seq 40); do sleep 3 & done 2>/dev/null; wait; exit 1"
    _, e = make_run(node, body(["sh", "-c", script], {"processes": 8, "wall": 6})).execute()
    assert (e.outcome, e.limit) == ("limit", "processes")


def test_file_size_cuts_a_large_write(node: runner.NodeSupplies) -> None:
    script = "mkdir -p $HOME/tree/out; head -c 4194304 /dev/zero > $HOME/tree/out/board.img"
    r = make_run(node, body(["sh", "-c", script], {"file_size": "1M", "wall": 5}))
    _, e = r.execute()
    assert (e.outcome, e.limit, e.exit) == ("limit", "file_size", 128 + signal.SIGXFSZ)
    assert os.path.getsize(r.values["workspace"] + "/tree/out/board.img") == 1 << 20


def test_stop_kills_the_whole_tree(node: runner.NodeSupplies) -> None:
    r = make_run(node, body(["sh", "-c", "sleep 30 & sleep 30 & wait"], {"wall": 20}))
    assert r.start() is not None
    threading.Timer(0.3, r.stop).start()
    e = r.wait()
    assert e.outcome == "stopped" and r.cgroups is not None and r.cgroups.empty()


def test_refused_and_error_end_before_starting(node: runner.NodeSupplies) -> None:
    b = body(["true"])
    b["sandbox"]["uid"] = 0
    r = make_run(node, b)
    assert r.start() is None and r.result is not None
    assert r.result.body() == {"outcome": "refused", "why": "this node does not run sandboxes as uid 0"}
    b = body(["true"])
    b["sandbox"]["read_only"] = ["/usr", "/etc/alternatives/nope"]
    r = make_run(node, b)
    assert r.start() is None and r.result is not None and "does not exist" in (r.result.why or "")
    r = make_run(node, body(["true"]))
    os.makedirs(os.path.join(node.root, "build-user/projects/proj", r.run_hash))
    assert r.start() is None and r.result is not None
    assert (r.result.outcome, r.result.step) == ("error", 0) and "already exists" in (r.result.why or "")


def test_an_output_symlink_out_of_the_workspace_is_not_read(node: runner.NodeSupplies) -> None:
    script = "mkdir -p $HOME/tree/out && ln -s /etc/shadow $HOME/tree/out/board.img"
    _, e = make_run(node, body(["sh", "-c", script])).execute()
    assert e.outcome == "passed" and e.outputs == {} and e.missing == ["builds/board.img"]


def test_adopt_lost_when_processes_are_gone_and_adopted_when_alive(node: runner.NodeSupplies) -> None:
    b = body(["sh", "-c", "sleep 30"], {"wall": 20})
    b["sandbox"]["ends_with_parent"] = False
    r = make_run(node, b)
    assert r.start() is not None
    assert statefolder.unfinished(node.state_dir) == [r.run_hash]
    adopted = restart.adopt(node.state_dir, r.run_hash, node)  # as a restarted node would
    assert isinstance(adopted, runner.JobRun)
    adopted.stop()
    e = adopted.wait(timeout=5)
    assert e.outcome == "stopped"
    assert child(r).wait(timeout=5) is not None
    # a second run whose processes are gone at restart: lost
    r2 = make_run(node, body(["sh", "-c", "sleep 30"], {"wall": 20}))
    assert r2.start() is not None
    r2.launcher.kill()  # the processes die with the node; no wait() ever records the end
    child(r2).wait(timeout=5)
    assert not os.path.exists(os.path.join(r2.dir, "ended.json"))
    lost = restart.adopt(node.state_dir, r2.run_hash, node)
    assert isinstance(lost, Ended) and lost.outcome == "lost"
    assert restart.adopt(node.state_dir, r2.run_hash, node).outcome == "lost"  # recorded once
    for d in list(r2.cgroups.dirs.values()) if r2.cgroups else []:
        assert not os.path.exists(d)


def test_a_pull_that_fails_ends_error_and_builds_nothing(node: runner.NodeSupplies) -> None:
    """Fresh trees: before a ``files`` step the node pulls; when it cannot, the run ends ``error`` naming
    the step, and no tree is exported (it never builds the old trunk silently)."""
    from sotd.errors import SotdError

    def pull() -> None:
        raise SotdError("ocx: fossil pull -R proj.fossil failed: cannot reach the hub")

    r = make_run(node, body(["true"]))
    r.target = Target("/nonexistent.fossil", pull=pull)
    assert r.start() is None and r.result is not None
    assert r.result.body() == {
        "outcome": "error",
        "why": "step 1 (files) failed: ocx: fossil pull -R proj.fossil failed: cannot reach the hub",
        "step": 1,
    }
    assert not os.path.exists(os.path.join(node.root, "build-user/projects/proj", r.run_hash, "tree"))


def test_the_filter_and_userns_follow_the_policy(node: runner.NodeSupplies) -> None:
    """By default every sandbox runs under the seccomp filter with nested user namespaces off; a policy
    saying ``seccomp = false`` / ``user_namespaces = true`` gets neither (real bwrap, /proc/self/status)."""
    import dataclasses

    script = "grep ^Seccomp: /proc/self/status; unshare -U true 2>/dev/null; echo userns $?"

    def out(n: runner.NodeSupplies) -> str:
        b = body(["sh", "-c", script], verdict=False)
        b["process"]["unversioned_files"] = []
        b["objective"] = str(n.policy.seccomp)  # another RUN-HASH per policy
        r = make_run(n, b)
        started, _ = r.execute()
        assert started is not None, r.result
        with open(os.path.join(r.dir, "stdout")) as f:
            return f.read()

    assert out(node) == "Seccomp:\t2\nuserns 1\n"
    loose = dataclasses.replace(node.policy, seccomp=False, user_namespaces=True)
    assert out(dataclasses.replace(node, policy=loose)) == "Seccomp:\t0\nuserns 0\n"
