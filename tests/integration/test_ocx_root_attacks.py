"""Issue 24 items 1 and 4 against a real node (``sotd ocx node`` as root, real bubblewrap, a real Fossil
hub on 127.0.0.1): a check-in's symlinks at ``home/<name>`` never redirect the node's ``homes`` copy,
and a workspace claim ends with its run, across restarts.

Homes: alice commits check-ins holding a link at ``.claude`` (to a root-only 0700 folder), at
``.claude.json`` (to a root-owned 0644 file, and to a new name inside the root-only folder), and at
``.claude/.credentials.json`` (to the 0644 file); her runs extract each into ``$$workspace$$/home`` with a
``files`` step and bring the node's ``homes``. Each ends refused with the exact sentence, before any
process starts, and the targets keep their bytes, mode, owner and mtime; a benign control run then finds
the real copies at ``$HOME``.

Claims: a run asking for ``$$root$$/build-user/projects/proj`` (the folder holding every default
workspace) is refused while another run lives there; after that, runs with the seed's default workspace
pass, also after a node restart that finds a claim an older node left behind; a run whose processes die
with the node is found dead at the restart, ends ``lost`` and drops its claim."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from tests.ocx import runkit as rk

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap"
    ),
    pytest.mark.timeout(300),
]

SECRET = "the node's credentials\n"


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    with rk.served_lab("sotd-root-attack") as lab:
        yield lab


@pytest.fixture
def host() -> Iterator[rk.HostSentinels]:
    s = rk.HostSentinels()
    try:
        yield s
    finally:
        s.remove()


def workspace_of(lab: rk.Lab, run_hash: str) -> str:
    return os.path.join(lab.top, "b-root", "build-user", "projects", "proj", run_hash)


def claims_of(lab: rk.Lab) -> list[str]:
    d = os.path.join(lab.state["b"], "jobs", ".workspaces")
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else []


def node_homes(lab: rk.Lab) -> tuple[str, str]:
    """The node's ``/root/.claude`` and ``/root/.claude.json`` stand-ins, listed in B's policy ``homes``."""
    admin = os.path.join(lab.top, "admin")
    claude = os.path.join(admin, ".claude")
    os.makedirs(claude)
    os.chmod(admin, 0o700)
    os.chmod(claude, 0o700)
    with open(os.path.join(claude, ".credentials.json"), "w") as f:
        f.write(SECRET)
    os.chmod(os.path.join(claude, ".credentials.json"), 0o600)
    claude_json = os.path.join(admin, ".claude.json")
    with open(claude_json, "w") as f:
        f.write('{"onboarded": true}\n')
    path = lab.envs["b"]["SOT_OCX_POLICY"]
    with open(path) as f:
        text = f.read()
    rw = 'read_write = ["$$workspace$$"]\n'
    with open(path, "w") as f:
        f.write(text.replace(rw, rw + f"homes = {json.dumps([claude, claude_json])}\n", 1))
    return claude, claude_json


def homes_body(
    lab: rk.Lab, command: list[str], homes: list[str], into: str, of: str = "trunk"
) -> dict[str, object]:
    b = rk.run_body(lab.server_code("b"), command)
    b["workspace"][1] = {"step": "files", "of": of, "into": into}
    b["sandbox"]["homes"] = homes
    b["process"]["env"] = {"PATH": "/usr/bin:/bin"}  # HOME is the copies' folder
    b["process"]["unversioned_files"] = []
    return b


def test_links_at_home_never_redirect_the_homes_copy(lab: rk.Lab, host: rk.HostSentinels) -> None:
    claude, claude_json = node_homes(lab)
    attacks = {  # branch: (links of the check-in, the home entry, the name refused, what is there)
        "dir-link": ({".claude": host.folder}, claude, ".claude", "a symlink"),
        "file-link": ({".claude.json": host.file}, claude_json, ".claude.json", "a symlink"),
        "plant": ({".claude.json": os.path.join(host.folder, "planted")}, claude_json, ".claude.json", "a symlink"),
        "inner-link": ({".claude/.credentials.json": host.file}, claude, ".claude", "a folder"),
    }  # fmt: skip
    posted = {}
    for branch, (links, entry, _, _) in attacks.items():
        checkin = rk.commit_files(lab, {}, links, f"links at home: {branch}", branch=branch)
        b = homes_body(lab, ["sh", "-c", "echo pwned"], [entry], "$$workspace$$/home", of=checkin)
        posted[branch] = rk.post_run(lab, "a", b)
    log_b = rk.node_once(lab, "b")
    for branch, (_, entry, name, kind) in attacks.items():
        h = posted[branch]
        got = rk.answers(lab, "a", h)
        at = os.path.join(workspace_of(lab, h), "home", name)
        assert [(k, body, s) for k, body, s in got] == [("ended", {
            "outcome": "refused",
            "why": f"the home entry {entry} cannot be copied into the workspace: {at} is already there ({kind},"
            " put there by a workspace step): refused",
        }, "lab-user")], log_b  # fmt: skip
        assert not os.path.exists(os.path.join(lab.state["b"], "jobs", h, "stdout"))  # never started
    host.check()
    assert os.listdir(host.folder) == ["secret"]
    control = rk.post_run(lab, "a", homes_body(
        lab, ["sh", "-c", 'cat "$HOME/.claude/.credentials.json" "$HOME/.claude.json"'], [claude, claude_json],
        "$$workspace$$/tree",
    ))  # fmt: skip
    rk.node_once(lab, "b")  # the node, after the attacks, answers a benign run
    got = rk.answers(lab, "a", control)
    assert [k for k, _, _ in got] == ["started", "ended"] and got[1][1]["outcome"] == "passed", got
    out = rk.uv_bytes(lab.clones["a"], f"ocx/logs/{control}/stdout", lab.top)
    assert out == (SECRET + '{"onboarded": true}\n').encode()
    copy = os.path.join(workspace_of(lab, control), "home", ".claude", ".credentials.json")
    assert (os.stat(copy).st_uid, os.stat(copy).st_mode & 0o777) == (1000, 0o600)
    assert claims_of(lab) == []


def _wait(cond: Callable[[], bool], bound: float, what: str) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _gone(pid: int, cgroups: dict[str, str]) -> bool:
    """``pid`` is gone or a zombie (no one is left to reap bwrap once its parent, the node, was killed)
    and the run's cgroups hold no process: what a restarted node finds dead."""
    for d in cgroups.values():
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                if f.read().strip():
                    return False
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_refused_nested_run_leaves_the_default_workspace_free_across_restarts(lab: rk.Lab) -> None:
    code = lab.server_code("b")
    proj = os.path.join(lab.top, "b-root", "build-user", "projects", "proj")
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        live = rk.post_run(lab, "a", rk.run_body(code, ["sh", "-c", "sleep 120"], limits={"wall": "3m"}))
        ws_live = rk.wait_answer(lab, "a", live, "started")["values"]["workspace"]
        nested = rk.run_body(code, ["true"])
        nested["workspace"][0]["at"] = "$$root$$/build-user/projects/proj"
        h = rk.post_run(lab, "a", nested)
        assert rk.wait_answer(lab, "a", h, "ended") == {
            "outcome": "refused",
            "why": f"the workspace {proj} would lie inside, or hold, run {live[:12]}'s workspace {ws_live}",
        }
        assert claims_of(lab) == [live]  # the refused run recorded nothing
        rk.post_stop(lab, "a", live)
        assert rk.wait_answer(lab, "a", live, "ended")["outcome"] == "stopped"
        _wait(lambda: claims_of(lab) == [], 20, "the stopped run kept its claim")
        after = rk.post_run(lab, "a", rk.run_body(code, ["make", "-C", "$$tree$$", "image"]))
        assert rk.wait_answer(lab, "a", after, "ended")["outcome"] == "passed"
    finally:
        rk.stop_node(node)
    # what an older node left: the claim of a run it refused, holding every default workspace
    stale = "e" * 64
    with open(os.path.join(lab.state["b"], "jobs", ".workspaces", stale), "w") as f:
        f.write(proj)
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        again = rk.post_run(
            lab, "a", rk.run_body(code, ["make", "-C", "$$tree$$", "image"], objective="again")
        )
        assert rk.wait_answer(lab, "a", again, "ended")["outcome"] == "passed"
    finally:
        rk.stop_node(node)
    assert claims_of(lab) == []
    assert f"ocx: run {stale[:12]}: its workspace claim outlived it; dropped" in rk.node_log(lab, "b")


def test_a_run_found_dead_at_the_restart_drops_its_claim(lab: rk.Lab) -> None:
    code = lab.server_code("b")
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        h = rk.post_run(lab, "a", rk.run_body(code, ["sh", "-c", "sleep 120"], limits={"wall": "3m"}))
        rk.wait_answer(lab, "a", h, "started")
        assert claims_of(lab) == [h]
    finally:
        rk.stop_node(node, signal.SIGKILL)  # the node dies; bwrap (ends_with_parent) takes the run with it
    with open(os.path.join(lab.state["b"], "jobs", h, "state.json")) as f:
        st = json.load(f)
    _wait(lambda: _gone(st["pid"], st["cgroups"]), 20, "the run outlived its node")
    assert claims_of(lab) == [h]  # nothing dropped it: the node was killed
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        ended = rk.wait_answer(lab, "a", h, "ended")
        assert ended["outcome"] == "lost", ended
        _wait(lambda: claims_of(lab) == [], 20, "the dead run kept its claim")
        after = rk.post_run(lab, "a", rk.run_body(code, ["make", "-C", "$$tree$$", "image"]))
        assert rk.wait_answer(lab, "a", after, "ended")["outcome"] == "passed"
    finally:
        rk.stop_node(node)
    assert claims_of(lab) == []


def test_a_clone_fossil_cannot_read_is_an_error_not_a_missing_checkin(tmp_path: str) -> None:
    """``FossilCarrier.resolve``: a name the clone lacks is ``None`` (the run is refused naming it); a
    clone ``fossil whatis`` cannot read at all is a ``RuntimeError`` naming the exit (the step ends
    ``error``), never read as a missing check-in."""
    from sotd.demo import ocx_seed as seed
    from sotd.jobs.steps import FossilCarrier
    from tests.ocx.fossilkit import base_env, need_fossil

    need_fossil()
    hub = os.path.join(str(tmp_path), "hub.fossil")
    seed.make_hub(hub, rk.RUN_USERS, env=base_env(str(tmp_path)))
    assert FossilCarrier().resolve(hub, "no-such-tag") is None
    bad = os.path.join(str(tmp_path), "bad.fossil")
    with open(bad, "w") as f:
        f.write("not a repository\n")
    with pytest.raises(RuntimeError) as e:
        FossilCarrier().resolve(bad, "trunk")
    assert str(e.value).startswith("fossil whatis exited 1: "), e.value
