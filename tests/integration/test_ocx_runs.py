"""OCX layer 3 between two nodes on one machine: a loopback ``fossil server`` hub, node A (alice) posting
runs, node B (lab-user) taking those addressed to its clone and running them under bubblewrap with limits.
Every step goes through the real ``sotd ocx`` CLI (``sotd ocx node`` for the nodes)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from sotd.jobs import statefolder
from sotd.jobs.nodepolicy import DEFAULT_MAXIMA
from sotd.jobs.spec import output_name
from sotd.ocx.config import load_config
from sotd.ocx.node import NodeClones
from sotd.ocxrun import Runs, load_settings, log_name
from tests.ocx import runkit as rk
from tests.ocx.fossilkit import base_env, free_port, need_fossil, wait_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap"
    ),
    pytest.mark.timeout(300),
]


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    need_fossil()
    top = f"/tmp/sotd-ocxrun-{secrets.token_hex(4)}"  # searchable by the sandbox uid, unlike tmp_path
    os.mkdir(top, 0o755)
    hub = os.path.join(top, "hub.fossil")
    srv = None
    try:
        rk.make_project(hub, top)
        port = free_port()
        srv = subprocess.Popen(
            ["fossil", "server", "--localhost", "--port", str(port), hub],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=base_env(top),
        )
        wait_port("127.0.0.1", port)
        yield rk.setup_nodes(top, "127.0.0.1", port, {})
    finally:
        if srv is not None:
            srv.terminate()
            srv.wait(timeout=10)
        rk.sandbox_cleanup(top, [os.path.join(top, f"{who}-state") for who in rk.NODE_LOGIN])
        shutil.rmtree(top, ignore_errors=True)


def hub_of(lab: rk.Lab) -> str:
    return os.path.join(lab.top, "hub.fossil")


def test_seed_build_example_end_to_end(lab: rk.Lab) -> None:
    code_b = lab.server_code("b")
    assert code_b != lab.server_code("a")
    h = rk.post_run(lab, "a", rk.run_body(code_b, ["make", "-C", "$$tree$$", "image"]))
    log_a = rk.node_once(lab, "a")  # A's clone has another server-code: it takes nothing, writes nothing
    assert log_a.count(f"run {h[:12]}") == 1 and "not this clone's; not answered" in log_a, log_a
    assert rk.answers(lab, "a", h) == []
    log_b = rk.node_once(lab, "b")
    assert "accepted" in log_b and "ended: passed" in log_b, log_b
    got = rk.answers(lab, "a", h)
    assert [(k, s) for k, _, s in got] == [("started", "lab-user"), ("ended", "lab-user")]
    started, ended = got[0][1], got[1][1]
    ws = started["values"]["workspace"]
    assert ws == os.path.join(lab.top, "b-root", "build-user", "projects", "proj", h)
    assert started["limits"] == {
        "wall": "1h",
        "cpu": 3000,
        "processes": 256,
        "file_size": "2G",
        **DEFAULT_MAXIMA,
        "disk": "1G",  # the lab's policy (runkit.node_policy)
    }
    assert ended["outcome"] == "passed" and ended["verdict"] is True and ended["exit"] == 0
    assert list(ended) == ["outcome", "verdict", "exit", "outputs", "logs"]
    # the image itself, on A, matches the hash ended put on record
    img = rk.uv_bytes(lab.clones["a"], output_name(h, "builds/board.img"), lab.top)
    assert img is not None and img.startswith(b"board 0\n")
    assert ended["outputs"] == {"builds/board.img": hashlib.sha3_256(img).hexdigest()}
    for which in ("stdout", "stderr"):
        data = rk.uv_bytes(lab.clones["a"], log_name(h, which), lab.top)
        assert data is not None and hashlib.sha3_256(data).hexdigest() == ended["logs"][which]
    # the hub received started, then ended, then the image (O9: ended before the files)
    rows = json.loads(rk.sotd("ocx", "answers", h, "--json", env=lab.envs["a"]).out)
    order = rk.hub_order(
        hub_of(lab), [f"ocx/m/{rows[0]['hash']}.json", f"ocx/m/{rows[1]['hash']}.json", output_name(h, "builds/board.img")],
        lab.top,
    )  # fmt: skip
    assert order[0] < order[1] < order[2]
    # the workspace belongs to the sandbox uid; the state is private
    assert os.stat(ws).st_uid == 1000 and os.stat(ws).st_mode & 0o777 == 0o700
    assert os.stat(lab.state["b"]).st_mode & 0o777 == 0o700
    # a second node pass takes nothing again
    assert "accepted" not in rk.node_once(lab, "b")
    assert len(rk.answers(lab, "a", h)) == 2


def test_refused_by_policy_and_session_and_login(lab: rk.Lab) -> None:
    code_b = lab.server_code("b")
    h_user = rk.post_run(lab, "a", rk.run_body(code_b, ["true"], user="root-user"))
    h_sess = rk.post_run(lab, "a", rk.run_body(code_b, ["agent"], session=True))
    h_to = rk.post_run(lab, "a", rk.run_body(code_b, ["true"]), to="carol")
    h_bad = rk.post_run(lab, "a", {**rk.run_body(code_b, ["true"]), "limits": {"wall": "soon"}})
    rk.node_once(lab, "b")
    for h, why in (
        (h_user, "this node does not run processes as the login 'root-user'"),
        (h_sess, "this node does not run sessions"),
        (h_to, "this node does not act as the login 'carol' on this clone"),
    ):
        got = rk.answers(lab, "a", h)
        assert [(k, b) for k, b, _ in got] == [("ended", {"outcome": "refused", "why": why})], got
    ((k, b, _),) = rk.answers(lab, "a", h_bad)
    assert k == "ended" and b["outcome"] == "refused" and "run.limits.wall" in b["why"]
    assert not os.path.exists(os.path.join(lab.top, "b-root", "root-user"))


def test_stop_ends_a_long_run_and_others_cannot_stop_it(lab: rk.Lab) -> None:
    code_b = lab.server_code("b")
    h = rk.post_run(lab, "a", rk.run_body(code_b, ["sh", "-c", "sleep 120"], limits={"wall": "5m"}))
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        rk.wait_answer(lab, "a", h, "started")
        # carol is neither the run's sender, its to, nor an admin: her stop is indexed and ignored
        rk.add_poster(lab, "c", "carol")
        # (the same bytes are the same message, first received from carol: hers must differ from alice's)
        rk.post_stop(lab, "c", h, {"note": "carol asks"})
        deadline = time.monotonic() + 30
        while "neither the run's sender" not in rk.node_log(lab, "b"):
            assert time.monotonic() < deadline, rk.node_log(lab, "b")
            time.sleep(0.2)
        assert [(k, s) for k, _, s in rk.answers(lab, "a", h)] == [("started", "lab-user"), ("stop", "carol")]
        t0 = time.monotonic()
        rk.post_stop(lab, "a", h)
        ended = rk.wait_answer(lab, "a", h, "ended")
        assert ended["outcome"] == "stopped" and time.monotonic() - t0 < 30
        assert ended["exit"] == 128 + signal.SIGKILL
        kinds = [(k, s) for k, _, s in rk.answers(lab, "a", h)]
        assert kinds == [("started", "lab-user"), ("stop", "carol"), ("stop", "alice"), ("ended", "lab-user")]
    finally:
        rk.stop_node(node)
    assert not [d for d in os.listdir("/sys/fs/cgroup/pids") if d.startswith("sotd-job-" + h[:16])]


def test_restart_adopts_live_runs_and_ends_gone_ones_lost(lab: rk.Lab) -> None:
    code_b = lab.server_code("b")
    alive = rk.post_run(
        lab, "a",
        # alive until the next node has looked: 3 s was too short once the machine was loaded (the node's
        # kill, the other run's answer and the next node's start and sync outlasted it: "lost")
        rk.run_body(code_b, ["sh", "-c", "sleep 15; make -C $$tree$$ image"], ends_with_parent=False,
                    objective="outlives its node"),
    )  # fmt: skip
    gone = rk.post_run(lab, "a", rk.run_body(code_b, ["sleep", "120"], objective="dies with its node"))
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        rk.wait_answer(lab, "a", alive, "started")
        rk.wait_answer(lab, "a", gone, "started")
    finally:
        rk.stop_node(node, signal.SIGKILL)  # the node dies without a word
    assert sorted(statefolder.unfinished(os.path.join(lab.state["b"], "jobs"))) == sorted([alive, gone])
    log_b = rk.node_once(lab, "b")
    assert "found alive after a restart: adopted" in log_b and "lost" in log_b, log_b
    a_ans = rk.answers(lab, "a", alive)
    assert [k for k, _, _ in a_ans] == ["started", "ended"]
    ended = a_ans[1][1]
    assert ended["outcome"] == "passed", ended
    img = rk.uv_bytes(lab.clones["a"], output_name(alive, "builds/board.img"), lab.top)
    assert img is not None and ended["outputs"]["builds/board.img"] == hashlib.sha3_256(img).hexdigest()
    g_ans = rk.answers(lab, "a", gone)
    assert [k for k, _, _ in g_ans] == ["started", "ended"] and g_ans[1][1]["outcome"] == "lost"
    assert statefolder.unfinished(os.path.join(lab.state["b"], "jobs")) == []


def test_run_accepted_but_never_started_ends_lost_after_restart(lab: rk.Lab) -> None:
    """In process: the node takes a run, dies before the process starts; the next node ends it lost."""
    code_b = lab.server_code("b")
    h = rk.post_run(lab, "a", rk.run_body(code_b, ["true"]))
    node = NodeClones(load_config(lab.envs["b"]))
    try:
        runs = Runs(node, load_settings(node.config, lab.envs["b"]))
        runs.attach()
        runs._spawn = lambda a, target, args: None  # type: ignore[method-assign]  # dies right after accepting
        node.sync_once()
    finally:
        node.close()
    log_b = rk.node_once(lab, "b")
    assert "lost" in log_b
    ((k, b, _),) = rk.answers(lab, "a", h)
    assert (k, b) == (
        "ended",
        {"outcome": "lost", "why": "the node restarted before the run's process started"},
    )


def test_fossil_carrier_password_clone_and_checkout(lab: rk.Lab) -> None:
    """The real carrier's password, clone and checkout steps against the served hub (ocx.md 1.3)."""
    from sotd.jobs.steps import FossilCarrier
    from sotd.ocx import fossil as fx

    hub = hub_of(lab)
    url = f"http://127.0.0.1:{lab.port}/"
    ws = os.path.join(lab.top, "ws")
    os.makedirs(os.path.join(ws, "tree"))
    before = os.path.exists("/tmp/.fossil") and os.stat("/tmp/.fossil").st_mtime_ns
    c = FossilCarrier()
    pw = "fresh-" + secrets.token_hex(8)
    c.set_password(hub, "lab-user", pw)
    clone = os.path.join(ws, "clone")
    c.clone(url, clone, "lab-user", pw)
    c.checkout(clone, "trunk", os.path.join(ws, "tree"))
    assert sorted(os.listdir(os.path.join(ws, "tree"))) == [".fslckout", "Makefile", "board.c"]
    assert fx.repo_info(clone).server_code != fx.repo_info(hub).server_code
    assert fx.repo_info(clone).last_sync_url == f"http://lab-user@127.0.0.1:{lab.port}/"
    # the password was saved in the clone: a sync with no URL works without a prompt
    fx.uv_sync(clone, None)
    # no global fossil database was written on the host's behalf
    assert (os.path.exists("/tmp/.fossil") and os.stat("/tmp/.fossil").st_mtime_ns) == before
    with pytest.raises(RuntimeError, match="fossil clone exited") as e:
        c.clone(url, os.path.join(ws, "clone2"), "lab-user", "not-the-password")
    assert "not-the-password" not in str(e.value)  # it would reach ended.why


def test_daemon_runs_the_node_when_an_ocx_config_exists(lab: rk.Lab) -> None:
    code_b = lab.server_code("b")
    h = rk.post_run(lab, "a", rk.run_body(code_b, ["make", "-C", "$$tree$$", "image"]))
    env = dict(lab.envs["b"])
    run_dir = os.path.join(lab.top, "run")
    os.mkdir(run_dir, 0o700)
    env.update(SOT_SELF_HOST="boxb", SOT_SOCKET=os.path.join(run_dir, "sotd.sock"))
    with open(os.path.join(lab.top, "daemon.log"), "w") as log:
        d = subprocess.Popen([rk.SOTD, "daemon", "run"], env=env, stdout=log, stderr=log)
    try:
        ended = rk.wait_answer(lab, "a", h, "ended", bound=90)
        assert ended["outcome"] == "passed"
    finally:
        d.send_signal(signal.SIGTERM)
        assert d.wait(timeout=40) == 0
    with open(os.path.join(lab.top, "daemon.log")) as f:
        text = f.read()
    assert "ocx: serving 1 clone(s) of" in text and "ended: passed" in text, text


def test_password_step_one_run_at_a_time_per_login(lab: rk.Lab) -> None:
    """The real password, clone and checkout steps through node B, whose clone is served for its runs'
    clone steps. While run 1 holds build-user's password (its clone syncs with it), run 2's password step
    is refused naming run 1, and run 1's clone still syncs; once run 1 ends, run 3 rotates it and builds."""
    from sotd.ocx import fossil as fx

    clone_b = lab.clones["b"]
    rk.fossil(
        "user", "new", "build-user", "b@example.invalid", "unused", "-R", clone_b, env=base_env(lab.top)
    )
    rk.fossil("user", "capabilities", "build-user", "gioy", "-R", clone_b, env=base_env(lab.top))
    port = free_port()
    srv = subprocess.Popen(["fossil", "server", "--localhost", "--port", str(port), clone_b],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=base_env(lab.top))  # fmt: skip
    node = None
    try:
        wait_port("127.0.0.1", port)
        with open(lab.envs["b"]["SOT_OCX_POLICY"], "a") as f:
            f.write(f'\n[runs.clone_urls]\nproj = "http://127.0.0.1:{port}/"\n')

        def body(command: list[str]) -> dict[str, object]:
            b = rk.run_body(lab.server_code("b"), command, limits={"wall": "5m"})
            b["workspace"] = [
                b["workspace"][0],
                {"step": "password"},
                {"step": "clone", "into": "$$workspace$$/clone.fossil"},
                {"step": "checkout", "of": "trunk", "into": "$$workspace$$/tree"},
            ]
            return b

        node = rk.start_node(lab, "b", interval=0.3)
        h1 = rk.post_run(lab, "a", body(["sleep", "120"]))
        ws1 = rk.wait_answer(lab, "a", h1, "started")["values"]["workspace"]
        h2 = rk.post_run(lab, "a", body(["true"]))
        ended2 = rk.wait_answer(lab, "a", h2, "ended")
        assert ended2 == {
            "outcome": "refused",
            "why": f"the password of the login 'build-user' on this repository belongs to run {h1[:12]} until"
            " it ends: another password step now would break that run's clone",
        }

        def pushes_as_build_user(name: str) -> bool:
            """Run 1's clone writes an unversioned file and syncs: only an authenticated build-user (cap y)
            gets it onto the server; with a wrong password fossil falls back to nobody without a word."""
            c1 = os.path.join(ws1, "clone.fossil")
            fx.uv_add(c1, name, name.encode(), "build-user")
            fx.uv_sync(c1, None)
            return fx.uv_hash(clone_b, name) is not None

        assert pushes_as_build_user("probe/1")  # run 1's saved password still works
        rk.post_stop(lab, "a", h1)
        assert rk.wait_answer(lab, "a", h1, "ended")["outcome"] == "stopped"
        h3 = rk.post_run(lab, "a", body(["make", "-C", "$$tree$$", "image"]))
        ended3 = rk.wait_answer(lab, "a", h3, "ended")
        assert ended3["outcome"] == "passed", ended3
        assert not pushes_as_build_user("probe/2")  # run 3 rotated it: run 1's clone is locked out now
    finally:
        if node is not None:
            rk.stop_node(node)
        srv.terminate()
        srv.wait(timeout=10)


def test_password_and_clone_steps_refused_naming_the_setup(lab: rk.Lab) -> None:
    """Issue 21 on a node set up as docs/ocx.md says (one clone as lab-user, no server of it): the seed's
    password/clone/checkout steps are refused before any step runs, each naming what to fix. The node's own
    login is never rotated (its password, hence its clone's saved password, still syncs)."""
    clone_b = lab.clones["b"]
    policy = lab.envs["b"]["SOT_OCX_POLICY"]

    def body(user: str, objective: str = "clone trunk") -> dict[str, object]:
        b = rk.run_body(lab.server_code("b"), ["true"], user=user, limits={"wall": "5m"}, objective=objective)
        b["workspace"] = [
            b["workspace"][0],
            {"step": "password"},
            {"step": "clone", "into": "$$workspace$$/clone"},
            {"step": "checkout", "of": "trunk", "into": "$$workspace$$/tree"},
        ]
        return b

    with open(policy) as f:
        text = f.read()
    with open(policy, "w") as f:
        f.write(text.replace('users = ["build-user"]', 'users = ["build-user", "lab-user"]'))
    h_own = rk.post_run(lab, "a", body("lab-user"))
    h_missing = rk.post_run(lab, "a", body("build-user"))
    rk.node_once(lab, "b")
    own = rk.wait_answer(lab, "a", h_own, "ended")
    assert own == {
        "outcome": "refused",
        "why": "run.process.user 'lab-user' is a login this node itself uses on this node's clone 'proj': a"
        " password step would rotate its password and hand it to the run; ask for another login",
    }
    missing = rk.wait_answer(lab, "a", h_missing, "ended")
    assert missing == {
        "outcome": "refused",
        "why": "the password step sets the password of the login 'build-user' in this node's clone 'proj',"
        " which has no such login; the node's operator adds it with: fossil user new build-user"
        f" build-user@localhost unused-password -R {clone_b} && fossil user capabilities build-user gio -R"
        f" {clone_b}",
    }
    # the operator types what the refusal says; then the clone step names its server
    cmd = missing["why"].split("adds it with: ", 1)[1]
    subprocess.run(["sh", "-c", cmd], check=True, capture_output=True, timeout=60, env=base_env(lab.top))
    h_no_server = rk.post_run(lab, "a", body("build-user", "clone trunk again"))  # other bytes (O2)
    rk.node_once(lab, "b")
    no_server = rk.wait_answer(lab, "a", h_no_server, "ended")
    assert no_server == {
        "outcome": "refused",
        "why": "the clone step needs a server of this node's clone 'proj' (where the password step sets the"
        f" password): start one with: fossil server --localhost --port 8081 {clone_b} and add"
        f' [runs.clone_urls] proj = "http://127.0.0.1:8081/" to {policy}',
    }
    assert not os.path.exists(os.path.join(lab.top, "b-root", "build-user"))  # no step ran
    assert rk.sotd("ocx", "sync", env=lab.envs["b"]).code == 0  # lab-user's saved password still works
