"""OCX session runs (O11) end to end: a loopback ``fossil server`` hub, node A (alice) posting, node B a real
``sotd daemon run`` whose OCX node runs the seed's agent-session example as a row on its private tmux
server. The agent is ``sotd.demo.scripted_agent`` (copied into the node's release folder, so the sandbox reads it
there); when the wake types its line, it runs ``reply.py``, which reads the session's mail mirror and writes
one answer per post into its outbox folder."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.demo import ocx_seed as seed
from sotd.jobs.nodepolicy import DEFAULT_MAXIMA
from sotd.ocxrun import session_handle
from tests.ocx import runkit as rk
from tests.ocx.fossilkit import base_env, need_fossil

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    # each lab is its own (hub port, node state, tmux server, daemon socket; its teardown kills only its own
    # runs' cgroups): the second serial lane, beside the mounts; the CPU budget's test alone (below)
    pytest.mark.second_lane,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("tmux") is None,
        reason="needs root, bubblewrap and tmux",
    ),
    pytest.mark.timeout(240),
]

# The scripted agent's "work" when woken: read the mail mirror, answer each post not yet answered.
REPLY_PY = """\
import json, os, sys
ws, run = sys.argv[1], sys.argv[2]
done_path = os.path.join(ws, "answered.txt")
done = set(open(done_path).read().split()) if os.path.exists(done_path) else set()
n = 0
for line in open(os.path.join(ws, "inbox.jsonl")):
    m = json.loads(line)
    if m["hash"] in done:
        continue
    text = m["message"][m["kind"]].get("text", "")
    doc = {"ocx": 2, "re": run, "said": {"to_post": m["hash"], "text": "read: " + text}}
    tmp = os.path.join(ws, "outbox", ".reply.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(doc))
    os.replace(tmp, os.path.join(ws, "outbox", m["hash"][:16] + ".json"))
    with open(done_path, "a") as f:
        f.write(m["hash"] + "\\n")
    n += 1
print(f"answered {n} post(s)")
"""


def session_body(clone: str, release_py: str) -> dict[str, Any]:
    """The seed's agent-session example with real values (no password/clone steps: ``files`` is enough)."""
    command = [release_py, "$$release$$/scripted_agent.py", "--work", "0.3", "--log", "$$workspace$$/agent.log",
               "--on-wake", f"{release_py} $$release$$/reply.py $$workspace$$ $$run$$"]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$", "TERM": "xterm-256color", "LANG": "C.UTF-8"}
    return seed.session_body(clone, command, env, network=False, read_only=["/usr", "$$release$$"],
                             steps=[seed.WORKSPACE_DIR, {"step": "files", "of": "trunk", "into": "$$workspace$$/tree"}])  # fmt: skip


class Daemon:
    def __init__(self, lab: rk.Lab) -> None:
        self.env = seed.daemon_env(lab.envs["b"], lab.top, "boxb")
        self.state = self.env["SOTD_STATE_DIR"]
        self.home = self.env["SOT_COMM_HOME"]
        subprocess.run(
            [rk.SOTD, "comm", "install"], env=self.env, check=True, capture_output=True, timeout=60
        )
        self.log_path = os.path.join(lab.top, "daemon.log")
        self.start()

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen([rk.SOTD, "daemon", "run"], env=self.env, stdout=log, stderr=log)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, *, rows_too: bool = True) -> int | None:
        """SIGTERM the daemon; with ``rows_too`` also end its tmux server (else the rows run on)."""
        seed.stop(self.proc, 40)
        sock = os.path.join(self.state, "tmux", "tmux.sock")
        if rows_too and os.path.exists(sock):
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10, check=False)
        return self.proc.returncode


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    need_fossil()
    top = f"/tmp/sotd-ocxsess-{secrets.token_hex(4)}"  # searchable by the sandbox uid
    os.mkdir(top, 0o755)
    hub = os.path.join(top, "hub.fossil")
    srv = None
    try:
        rk.make_project(hub, top)
        port, srv = seed.serve(hub, base_env(top))
        lab = rk.setup_nodes(top, "127.0.0.1", port, {})
        release = os.path.join(top, "release")
        os.mkdir(release, 0o755)
        import sotd.demo.scripted_agent

        shutil.copy(sotd.demo.scripted_agent.__file__, os.path.join(release, "scripted_agent.py"))
        with open(os.path.join(release, "reply.py"), "w") as f:
            f.write(REPLY_PY)
        pol = os.path.join(top, "b-policy.toml")
        with open(pol, "w") as f:
            f.write(seed.node_policy(os.path.join(top, "b-root"), lab.state["b"], users=["build-user", "agent-user"],
                                     read_only=["/usr", "/etc/alternatives", "$$release$$"], limits={"wall": "1h"},
                                     release=release, sessions=True))  # fmt: skip
        yield lab
    finally:
        if srv is not None:
            seed.stop(srv)
        rk.sandbox_cleanup(top, [os.path.join(top, f"{who}-state") for who in rk.NODE_LOGIN])
        shutil.rmtree(top, ignore_errors=True)


def carol_node(lab: rk.Lab) -> None:
    """Node configuration ``c``: carol, who may post in the project but is nobody to a run."""
    rk.add_poster(lab, "c", "carol")


def wait_for(pred: Any, bound: float, what: str) -> Any:
    deadline = time.monotonic() + bound
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} within {bound}s"
        time.sleep(0.3)


def test_seed_agent_session_hears_alice_not_carol_answers_and_stops(lab: rk.Lab) -> None:
    carol_node(lab)
    d = Daemon(lab)
    try:
        code_b = lab.server_code("b")
        h = rk.post_run(lab, "a", session_body(code_b, "/usr/bin/python3"), to="lab-user")
        started = rk.wait_answer(lab, "a", h, "started", bound=60)
        ws = started["values"]["workspace"]
        assert ws == os.path.join(lab.top, "b-root", "agent-user", "projects", "proj", h)
        assert started["limits"] == {"wall": "1h", **DEFAULT_MAXIMA}  # capped by the node
        handle = session_handle(h)
        inbox = os.path.join(d.home, "inbox", f"{handle}.jsonl")
        wait_for(lambda: f"session @{handle} in row" in d.log(), 30, "the session's row")
        agent_log = os.path.join(ws, "agent.log")
        wait_for(lambda: os.path.exists(agent_log), 30, "the agent's first frame")

        # carol answers the run first: she is not in hears, so nothing reaches the session
        h_carol = rk.post(lab, "c", {"ocx": 2, "re": h, "post": {"text": "carol here"}})
        h_alice = rk.post(lab, "a", {"ocx": 2, "re": h, "post": {"text": "the parser drops a token"}})

        def replies() -> list[dict[str, Any]]:
            return [b for k, b, s in rk.answers(lab, "a", h) if k == "said" and s == "lab-user"]

        got = wait_for(replies, 90, "the session's reply")
        assert got == [{"to_post": h_alice, "text": "read: the parser drops a token"}]
        with open(inbox, encoding="utf-8") as f:
            mail = f.read()
        assert h_alice in mail and h_carol not in mail
        assert json.loads(mail.splitlines()[0])["from"] == "alice"
        with open(os.path.join(ws, "inbox.jsonl"), encoding="utf-8") as f:
            mirror = [json.loads(x) for x in f]
        assert [(m["hash"], m["from"]) for m in mirror] == [(h_alice, "alice")]
        with open(agent_log, encoding="utf-8") as f:
            events = [json.loads(x) for x in f]
        lines = [e["text"] for e in events if e["event"] == "line"]
        assert lines == ["[sot-comm] you have mail: run comm-poll.sh"], events  # woken once
        assert "comm wake" in d.log() or "wake" in d.log()

        # alice stops the run: the row is despawned, the run ends stopped
        rk.post_stop(lab, "a", h)
        ended = rk.wait_answer(lab, "a", h, "ended", bound=60)
        assert ended["outcome"] == "stopped"
        kinds = [(k, s) for k, _, s in rk.answers(lab, "a", h)]
        assert kinds[0] == ("started", "lab-user") and kinds[-1] == ("ended", "lab-user")
        assert ("said", "lab-user") in kinds and ("post", "carol") in kinds and ("stop", "alice") in kinds
        wait_for(lambda: not os.listdir(os.path.join(d.state, "workspaces")), 20, "the row's removal")
        with open(os.path.join(d.home, "registry.json"), encoding="utf-8") as f:
            assert handle not in json.load(f).get("agents", {})
    finally:
        rc = d.stop()
    assert rc == 0, d.log()[-3000:]


def test_session_refused_without_a_daemon(lab: rk.Lab) -> None:
    """``sotd ocx node`` has no terminal rows: a session the policy allows ends refused, saying so."""
    code_b = lab.server_code("b")
    h = rk.post_run(lab, "a", session_body(code_b, "/usr/bin/python3"))
    rk.node_once(lab, "b")
    ((k, b, _),) = rk.answers(lab, "a", h)
    assert (k, b["outcome"]) == ("ended", "refused") and "inside the daemon" in b["why"], b


def _session_up(lab: rk.Lab, d: Daemon, limits: dict[str, Any] | None = None) -> tuple[str, str, str]:
    """Post the session run to B; (RUN-HASH, workspace, row id) once the agent drew its first frame."""
    body = session_body(lab.server_code("b"), "/usr/bin/python3")
    if limits is not None:
        body["limits"] = limits
    h = rk.post_run(lab, "a", body, to="lab-user")
    ws = rk.wait_answer(lab, "a", h, "started", bound=60)["values"]["workspace"]
    handle = session_handle(h)
    wait_for(lambda: f"session @{handle} in row" in d.log(), 30, "the session's row")
    wait_for(lambda: os.path.exists(os.path.join(ws, "agent.log")), 30, "the agent's first frame")
    (row,) = os.listdir(os.path.join(d.state, "workspaces"))
    return h, ws, row


def _tmux(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    sock = os.path.join(d.state, "tmux", "tmux.sock")
    return subprocess.run(
        ["tmux", "-S", sock, *args], capture_output=True, text=True, timeout=10, check=False
    )


def _session_cgroups(lab: rk.Lab, h: str) -> dict[str, str]:
    with open(os.path.join(lab.state["b"], "jobs", h, "session.json"), encoding="utf-8") as f:
        dirs: dict[str, str] = json.load(f)["cgroups"]
    return dirs


def _runs_in(cgroup_dir: str, marker: bytes) -> bool:
    """True when a process of ``cgroup_dir`` has ``marker`` in its command line."""
    with open(os.path.join(cgroup_dir, "cgroup.procs")) as f:
        pids = f.read().split()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    return True
        except OSError:
            continue
    return False


def _agent_in(cgroup_dir: str) -> bool:
    """The session's agent (scripted_agent.py inside bwrap) and the row's ``sot-capsule`` both run in it."""
    return _runs_in(cgroup_dir, b"scripted_agent.py") and _runs_in(cgroup_dir, b"sot-capsule\x00supervise")


def test_session_adopted_after_a_daemon_restart(lab: rk.Lab) -> None:
    """O10 across a restart: the daemon stops (its tmux server and the session's row run on), a post arrives
    meanwhile; the next daemon adopts the session: both posts reach it, both answers arrive, stop ends it.
    The session runs in the run's cgroup (pids.max = its processes limit), kept across the restart and
    removed at the end."""
    d = Daemon(lab)
    try:
        h, ws, row = _session_up(lab, d, {"wall": "8h", "processes": 64, "cpu": "1h"})
        handle = session_handle(h)
        dirs = _session_cgroups(lab, h)
        assert dirs and all(os.path.basename(p) == f"sotd-job-{h[:16]}" for p in dirs.values()), dirs
        pids_dir = dirs.get("pids") or dirs["v2"]
        with open(os.path.join(pids_dir, "pids.max")) as f:
            assert f.read().strip() == "64"
        assert all(_agent_in(p) for p in dirs.values()), dirs
        assert d.stop(rows_too=False) == 0, d.log()[-3000:]
        panes = _tmux(d, "list-panes", "-a", "-F", "#{pane_dead}")
        assert panes.returncode == 0 and panes.stdout.split() == ["0"], panes  # the row outlived the daemon

        h1 = rk.post(lab, "a", {"ocx": 2, "re": h, "post": {"text": "sent while the node was down"}})
        d.start()
        wait_for(lambda: f"session @{handle} in row {row} adopted" in d.log(), 60, "the adoption")
        assert all(_agent_in(p) for p in dirs.values()), dirs
        h2 = rk.post(lab, "a", {"ocx": 2, "re": h, "post": {"text": "sent after the restart"}})

        def replies() -> list[dict[str, Any]]:
            got = [b for k, b, s in rk.answers(lab, "a", h) if k == "said" and s == "lab-user"]
            return got if len(got) >= 2 else []

        got = wait_for(replies, 120, "the session's two replies")
        assert sorted((b["to_post"], b["text"]) for b in got) == sorted(
            [(h1, "read: sent while the node was down"), (h2, "read: sent after the restart")]
        )
        with open(os.path.join(ws, "inbox.jsonl"), encoding="utf-8") as f:
            assert [json.loads(x)["hash"] for x in f] == [h1, h2]  # each delivered once

        rk.post_stop(lab, "a", h)
        ended = rk.wait_answer(lab, "a", h, "ended", bound=60)
        assert ended["outcome"] == "stopped", ended
        kinds = [k for k, _, _ in rk.answers(lab, "a", h)]
        assert kinds.count("started") == 1 and kinds.count("ended") == 1 and kinds[-1] == "ended"
        wait_for(lambda: not any(os.path.exists(p) for p in dirs.values()), 20, "the cgroups' removal")
        wait_for(lambda: not os.listdir(os.path.join(d.state, "workspaces")), 20, "the row's removal")
        with open(os.path.join(d.home, "registry.json"), encoding="utf-8") as f:
            assert handle not in json.load(f).get("agents", {})
    finally:
        rc = d.stop()
    assert rc == 0, d.log()[-3000:]


def test_session_lost_when_its_row_died_during_the_restart(lab: rk.Lab) -> None:
    """The row's window is killed while the daemon is down: the next daemon ends the run ``lost``."""
    d = Daemon(lab)
    try:
        h, _ws, row = _session_up(lab, d)
        assert d.stop(rows_too=False) == 0, d.log()[-3000:]
        with open(os.path.join(d.state, "workspaces", row, "row.json"), encoding="utf-8") as f:
            pane = json.load(f)["pane"]
        assert _tmux(d, "kill-pane", "-t", pane).returncode == 0
        d.start()
        ended = rk.wait_answer(lab, "a", h, "ended", bound=60)
        assert ended["outcome"] == "lost" and "row was gone" in ended["why"], ended
        wait_for(lambda: not os.listdir(os.path.join(d.state, "workspaces")), 20, "the row's removal")
        with open(os.path.join(d.home, "registry.json"), encoding="utf-8") as f:
            assert session_handle(h) not in json.load(f).get("agents", {})
    finally:
        rc = d.stop()
    assert rc == 0, d.log()[-3000:]


@pytest.mark.alone  # a whole-run CPU budget read off the cgroup: beside nothing
def test_session_cpu_is_a_whole_run_budget(lab: rk.Lab) -> None:
    """Two busy processes share a 3 s budget: the cgroup's total ends the session ``limit cpu`` while each
    process is still under its own RLIMIT_CPU."""
    d = Daemon(lab)
    try:
        body = session_body(lab.server_code("b"), "/usr/bin/python3")
        body["limits"] = {"wall": "2m", "cpu": "3s"}
        body["process"]["command"] = ["/bin/sh", "-c", "yes >/dev/null & yes >/dev/null & wait"]
        h = rk.post_run(lab, "a", body, to="lab-user")
        assert rk.wait_answer(lab, "a", h, "started", bound=60)["limits"] == {
            "wall": "2m",
            "cpu": "3s",
            **DEFAULT_MAXIMA,
        }
        ended = rk.wait_answer(lab, "a", h, "ended", bound=90)
        assert (ended["outcome"], ended.get("limit")) == ("limit", "cpu"), ended
    finally:
        rc = d.stop()
    assert rc == 0, d.log()[-3000:]


def _replies(lab: rk.Lab, h: str) -> list[dict[str, Any]]:
    return [b for k, b, s in rk.answers(lab, "a", h) if k == "said" and s == "lab-user"]


def _mirror_hashes(ws: str) -> list[str]:
    path = os.path.join(ws, "inbox.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(x)["hash"] for x in f]


def test_session_deliveries_new_skips_what_came_before_ready(lab: rk.Lab) -> None:
    """``deliveries: "new"``: a post made before the node even saw the run is in the thread when the row
    becomes ready, so it is never delivered; a post made after ready is delivered, woken and answered."""
    body = session_body(lab.server_code("b"), "/usr/bin/python3")
    body["process"]["deliveries"] = "new"
    h = rk.post_run(lab, "a", body, to="lab-user")
    h_early = rk.post(lab, "a", {"ocx": 2, "re": h, "post": {"text": "before the session was up"}})
    d = Daemon(lab)  # B syncs the run and the early post together
    try:
        ws = rk.wait_answer(lab, "a", h, "started", bound=60)["values"]["workspace"]
        handle = session_handle(h)
        wait_for(lambda: f"session @{handle} in row" in d.log(), 30, "the session's row")
        wait_for(lambda: os.path.exists(os.path.join(ws, "agent.log")), 30, "the agent's first frame")
        seen = os.path.join(lab.state["b"], "jobs", h, "seen")

        def early_seen() -> bool:
            if not os.path.exists(seen):
                return False
            with open(seen, encoding="utf-8") as f:
                return h_early in f.read().split()

        wait_for(early_seen, 30, "the early post marked looked-at when the row became ready")
        h_late = rk.post(lab, "a", {"ocx": 2, "re": h, "post": {"text": "after ready"}})
        got = wait_for(lambda: _replies(lab, h), 90, "the session's reply")
        assert got == [{"to_post": h_late, "text": "read: after ready"}]
        assert _mirror_hashes(ws) == [h_late]
        with open(os.path.join(d.home, "inbox", f"{handle}.jsonl"), encoding="utf-8") as f:
            mail = f.read()
        assert h_late in mail and h_early not in mail
        rk.post_stop(lab, "a", h)
        assert rk.wait_answer(lab, "a", h, "ended", bound=60)["outcome"] == "stopped"
    finally:
        rc = d.stop()
    assert rc == 0, d.log()[-3000:]


def test_session_deliveries_none_files_nothing_and_never_wakes(lab: rk.Lab) -> None:
    """``deliveries: "none"``: a heard post is logged as kept from the session and marked looked-at; no mail
    is filed, nothing is mirrored, the agent is never woken, and the run still stops cleanly."""
    d = Daemon(lab)
    try:
        body = session_body(lab.server_code("b"), "/usr/bin/python3")
        body["process"]["deliveries"] = "none"
        h = rk.post_run(lab, "a", body, to="lab-user")
        ws = rk.wait_answer(lab, "a", h, "started", bound=60)["values"]["workspace"]
        handle = session_handle(h)
        wait_for(lambda: f"session @{handle} in row" in d.log(), 30, "the session's row")
        agent_log = os.path.join(ws, "agent.log")
        wait_for(lambda: os.path.exists(agent_log), 30, "the agent's first frame")
        h_post = rk.post(lab, "a", {"ocx": 2, "re": h, "post": {"text": "nobody should hear this"}})
        kept = f"{h_post[:12]} from alice kept from the session: deliveries is none"
        wait_for(lambda: kept in d.log(), 60, "the node passing the post by")
        time.sleep(3)  # several node passes and wake ticks after it was passed by
        assert d.log().count(kept) == 1
        assert _mirror_hashes(ws) == []
        inbox = os.path.join(d.home, "inbox", f"{handle}.jsonl")
        if os.path.exists(inbox):
            with open(inbox, encoding="utf-8") as f:
                assert h_post not in f.read()
        with open(agent_log, encoding="utf-8") as f:
            assert [e for e in map(json.loads, f) if e["event"] == "line"] == []  # never woken
        assert _replies(lab, h) == []
        rk.post_stop(lab, "a", h)
        assert rk.wait_answer(lab, "a", h, "ended", bound=60)["outcome"] == "stopped"
    finally:
        rc = d.stop()
    assert rc == 0, d.log()[-3000:]
