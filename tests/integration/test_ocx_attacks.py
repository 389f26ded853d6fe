"""Issue 18: an ordinary participant attacks node B (a login that can push to the hub, posting runs whose
commands and fields it chooses). Each attack runs against a real node (``sotd ocx node``), real
bubblewrap and real Fossil, and each test shows it refused with the reason, the host untouched (a
sentinel file and a root-only 0700 folder, checked byte for byte), and other runs answered only by the
node. Then the items "on the same path": fresh trees, no secrets on command lines."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from sotd import sysprobe
from sotd.jobs.spec import output_name
from tests.ocx import runkit as rk
from tests.ocx.fossilkit import free_port, wait_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap"
    ),
    pytest.mark.timeout(300),
]

UP = "../" * 16  # from any folder of a workspace, relative links climb to / and stay there


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    with rk.served_lab("sotd-attack") as lab:
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


def only_ended(lab: rk.Lab, who: str, run_hash: str) -> dict[str, object]:
    got = rk.answers(lab, who, run_hash)
    assert [(k, s) for k, _, s in got] == [("ended", "lab-user")], got
    return got[0][1]


def test_symlinked_bind_paths_are_refused_naming_the_link(lab: rk.Lab, host: rk.HostSentinels) -> None:
    """Attack 1: a check-in's relative symlinks named as bind paths below ``$$tree$$`` (host /tmp
    read-write, /etc and /proc read-only, a path through the /tmp link). Each run ends refused naming the
    link, before any process starts; nothing lands on the host."""
    links = {"links/rtmp": UP + "tmp", "links/retc": UP + "etc", "links/rproc": UP + "proc"}
    rk.commit_files(lab, {"README": "links\n"}, links, "a check-in holding links")
    code = lab.server_code("b")
    dropped = f"/tmp/sotd-pwned-{secrets.token_hex(4)}"
    cmd = ["sh", "-c", f"echo pwned > $$tree$$/links/rtmp/{os.path.basename(dropped)}; cat /etc/hostname"]
    ro = ["/usr", "/etc/alternatives"]
    asks = {
        "rw tmp": ({"read_write": ["$$workspace$$", "$$tree$$/links/rtmp"]}, "links/rtmp", "is a symlink"),
        "ro etc": ({"read_only": [*ro, "$$tree$$/links/retc"]}, "links/retc", "is a symlink"),
        "ro proc": ({"read_only": [*ro, "$$tree$$/links/rproc"]}, "links/rproc", "is a symlink"),
        "through": (
            {"read_only": [*ro, "$$tree$$/links/rtmp/" + os.path.basename(host.folder)]},
            "links/rtmp/" + os.path.basename(host.folder),
            "passes through the symlink",
        ),
        "mount point": (
            {"tmp": "$$tree$$/links/rtmp/sotd-mnt"},
            "links/rtmp/sotd-mnt",
            "passes through the symlink",
        ),
    }
    posted = {}
    for name, (sandbox, _, _) in asks.items():
        b = rk.run_body(code, cmd)
        b["sandbox"].update(sandbox)
        posted[name] = rk.post_run(lab, "a", b)
    log_b = rk.node_once(lab, "b")
    for name, (_, path, how) in asks.items():
        h = posted[name]
        tree = os.path.join(workspace_of(lab, h), "tree")
        what = "the sandbox's tmp mount point" if name == "mount point" else "the sandbox path"
        want = f"{what} {tree}/{path} {how}"
        if how == "passes through the symlink":
            want += f" {tree}/links/rtmp"
        assert only_ended(lab, "a", h) == {"outcome": "refused", "why": want + ": refused"}, log_b
        assert not os.path.exists(os.path.join(lab.state["b"], "jobs", h, "stdout"))  # never started
    assert not os.path.exists(dropped)
    host.check()


def test_a_workspace_inside_another_runs_is_refused_while_that_run_plants_links(
    lab: rk.Lab, host: rk.HostSentinels
) -> None:
    """Attacks 2 and 3: an outer run (same sandbox uid) keeps planting symlinks in its own workspace
    where inner runs' workspaces would be (their ``tree``, a bind below it); inner runs ask for a
    workspace inside the outer one, one to bind through the planted link, one to extract its files
    there. Both are refused at the ``directory`` step naming the folder the sandbox can write; the outer
    run is untouched and ends only by its sender's stop, answered by the node alone. (The node refuses
    them first from its record of workspaces; the ``directory`` step's own rule, a folder a sandbox can
    write, is the second wall: tests/integration/test_jobs_paths.py.)"""
    code = lab.server_code("b")
    plant = (  # the moment an inner workspace appears, redirect its tree (or a bind below it)
        "mkdir -p $$workspace$$/nest/in $$workspace$$/nest/ex; i=0; while [ $i -lt 900 ]; do"
        f" ln -sfn {UP}tmp $$workspace$$/nest/in/w/tree/l 2>/dev/null;"
        " rm -rf $$workspace$$/nest/ex/w/tree 2>/dev/null;"
        f" ln -sfn {host.folder} $$workspace$$/nest/ex/w/tree 2>/dev/null; i=$((i+1)); sleep 0.05; done"
    )
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        outer = rk.post_run(lab, "a", rk.run_body(code, ["sh", "-c", plant], limits={"wall": "3m"}))
        ws_outer = rk.wait_answer(lab, "a", outer, "started")["values"]["workspace"]
        assert ws_outer == workspace_of(lab, outer)
        inner_at = f"$$root$$/build-user/projects/proj/{outer}/nest/in/w"
        bind = rk.run_body(code, ["sh", "-c", "echo pwned > $$tree$$/x"])
        bind["workspace"][0]["at"] = inner_at
        bind["sandbox"]["read_write"] = ["$$workspace$$", "$$tree$$/l"]
        files = rk.run_body(code, ["true"])
        files["workspace"][0]["at"] = f"$$root$$/build-user/projects/proj/{outer}/nest/ex/w"
        h_bind, h_files = rk.post_run(lab, "a", bind), rk.post_run(lab, "a", files)
        for h, sub in ((h_bind, "nest/in/w"), (h_files, "nest/ex/w")):
            ended = rk.wait_answer(lab, "a", h, "ended")
            assert ended == {
                "outcome": "refused",
                "why": f"the workspace {ws_outer}/{sub} would lie inside, or hold, run {outer[:12]}'s workspace"
                f" {ws_outer}",
            }
            assert not os.path.lexists(os.path.join(ws_outer, sub))
        rk.post_stop(lab, "a", outer)
        assert rk.wait_answer(lab, "a", outer, "ended")["outcome"] == "stopped"
        got = rk.answers(lab, "a", outer)
        assert [(k, s) for k, _, s in got] == [
            ("started", "lab-user"),
            ("stop", "alice"),
            ("ended", "lab-user"),
        ]
    finally:
        rk.stop_node(node)
    host.check()
    assert os.listdir(host.folder) == ["secret"]


def test_forged_answers_and_overwrites_through_output_names_are_refused(
    lab: rk.Lab, host: rk.HostSentinels
) -> None:
    """Attack 4: carol (a login the node takes runs from) declares outputs named as OCX's own files: a
    forged ``stop`` for alice's run as ``ocx/m/<hash>.json``, and alice's run's log. Both runs end
    refused naming the field; a third run of carol's storing ``builds/board.img`` (the name alice's run
    uses) lands below its own prefix. Alice's run is answered only by the node and its image is intact."""
    rk.add_poster(lab, "c", "carol")
    rk.set_senders(lab, ["alice", "carol"])
    code = lab.server_code("b")
    victim = rk.post_run(lab, "a", rk.run_body(code, ["make", "-C", "$$tree$$", "image"]))
    forged = json.dumps({"ocx": 2, "re": victim, "stop": {}}).encode()
    forged_name = f"ocx/m/{hashlib.sha3_256(forged).hexdigest()}.json"
    write = ["sh", "-c", f"mkdir -p $$tree$$/out; printf '%s' '{forged.decode()}' > $$tree$$/out/board.img"]
    runs = {}
    for name, as_ in (
        ("stop", forged_name),
        ("log", f"ocx/logs/{victim}/stdout"),
        ("same", "builds/board.img"),
    ):
        b = rk.run_body(code, write)
        b["process"]["unversioned_files"] = [{"at": "$$workspace$$/tree/out/board.img", "as": as_}]
        runs[name] = rk.post_run(lab, "c", b)
    rk.node_once(lab, "b")
    for name in ("stop", "log"):
        as_ = forged_name if name == "stop" else f"ocx/logs/{victim}/stdout"
        assert only_ended(lab, "c", runs[name]) == {
            "outcome": "refused",
            "why": "run.process.unversioned_files[0].as may not name anything under 'ocx/' (the names OCX"
            f" itself writes), not {as_!r}",
        }
    got = rk.answers(lab, "a", victim)
    assert [(k, s) for k, _, s in got] == [("started", "lab-user"), ("ended", "lab-user")]
    assert got[1][1]["outcome"] == "passed"
    img = rk.uv_bytes(lab.clones["a"], output_name(victim, "builds/board.img"), lab.top)
    assert img is not None and img.startswith(b"board 0\n")
    assert got[1][1]["outputs"] == {"builds/board.img": hashlib.sha3_256(img).hexdigest()}
    other = rk.uv_bytes(lab.clones["a"], output_name(runs["same"], "builds/board.img"), lab.top)
    assert other == forged
    names = rk.fossil("uv", "list", "-R", lab.clones["a"], env=rk.base_env(lab.top)).split()
    assert output_name(victim, "builds/board.img") in names
    assert forged_name not in names and "builds/board.img" not in names
    host.check()


def test_runs_only_from_the_logins_the_policy_names(lab: rk.Lab, host: rk.HostSentinels) -> None:
    """Who may ask: carol may push but is not in ``runs.senders``: her run ends refused, answered to her;
    with no list for the clone, no one's run is taken, alice's included."""
    rk.add_poster(lab, "c", "carol")
    code = lab.server_code("b")
    h = rk.post_run(lab, "c", rk.run_body(code, ["true"]))
    rk.node_once(lab, "b")
    assert only_ended(lab, "c", h) == {
        "outcome": "refused",
        "why": "this node does not take runs on the clone 'proj' from the login 'carol'",
    }
    rk.set_senders(lab, [])
    h2 = rk.post_run(lab, "a", rk.run_body(code, ["true", "alice"]))  # other bytes: another RUN-HASH
    rk.node_once(lab, "b")
    assert only_ended(lab, "a", h2) == {
        "outcome": "refused",
        "why": "this node takes runs on the clone 'proj' from no login (its policy lists none in runs.senders)",
    }
    assert not os.path.exists(workspace_of(lab, h)) and not os.path.exists(workspace_of(lab, h2))
    host.check()


def test_a_build_uses_the_remote_trunk_and_started_names_the_checkin(lab: rk.Lab) -> None:
    """Fresh trees: a check-in made on the hub after B cloned it is built (B pulls before the ``files``
    step) and ``started.checkins`` names it; a name no check-in has, even after the pull, is refused."""
    checkin = rk.commit_files(lab, {"NEWS": "fresh\n"}, {}, "new trunk", pull_b=False)
    code = lab.server_code("b")
    h = rk.post_run(lab, "a", rk.run_body(code, ["cat", "$$tree$$/NEWS"]))
    b = rk.run_body(code, ["true"])
    b["workspace"][1]["of"] = "no-such-tag"
    h_bad = rk.post_run(lab, "a", b)
    rk.node_once(lab, "b")
    got = rk.answers(lab, "a", h)
    assert [k for k, _, _ in got] == ["started", "ended"], got
    assert got[0][1]["checkins"] == [{"step": 1, "of": "trunk", "checkin": checkin}]
    assert got[1][1]["outcome"] == "passed"
    out = rk.uv_bytes(lab.clones["a"], f"ocx/logs/{h}/stdout", lab.top)
    assert out == b"fresh\n"
    assert only_ended(lab, "a", h_bad) == {
        "outcome": "refused",
        "why": "run.workspace[1].of names no check-in of this clone, even after a pull: 'no-such-tag'",
    }


def _descends_from(pid: int, root: int) -> bool:
    """Whether ``pid`` is ``root`` or below it (its parents from /proc, at most 64 steps); False when it
    ended before it could be read."""
    for _ in range(64):
        if pid == root:
            return True
        if pid <= 1:
            return False
        got = sysprobe.stat_of(pid)
        parent = None if got is None else sysprobe.ppid_in(got[1])
        if parent is None:
            return False
        pid = parent
    return False


def _secret_cmdlines(
    stop: threading.Event, found: list[bytes], seen: list[int], secrets_: list[bytes]
) -> None:
    """Read every /proc/*/cmdline until ``stop`` (bounded: 60 s): a command line of this test's own
    process tree holding a password (a known one, or any URL with one) goes to ``found``; ``seen`` counts
    the fossil command lines of that tree read. (Other tests' processes are not this node's: the
    multihost tier, in the lane beside, types `sotd ocx clone http://bob:bobpw@…` as a person would.)"""
    url_pw = re.compile(rb"://[^/\x00@:]+:[^/\x00@]+@")
    deadline = time.monotonic() + 60
    me = os.getpid()
    while not stop.is_set() and time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or not _descends_from(int(pid), me):
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read()
            except OSError:
                continue
            if b"fossil" in line.split(b"\x00", 1)[0]:
                seen.append(1)
            if (
                url_pw.search(line)
                or any(s in line for s in secrets_)
                or b"password\x00build-user\x00" in line
            ):
                found.append(line)
        time.sleep(0.002)


def test_no_password_reaches_a_command_line(lab: rk.Lab) -> None:
    """No secrets on command lines: while node B syncs with a ``password_file`` and runs the password,
    clone and checkout steps (a fresh password, a clone that saves it), a watcher reads every
    /proc/*/cmdline; no password, and no URL carrying one, is ever there."""
    clone_b = lab.clones["b"]
    env = rk.base_env(lab.top)
    rk.fossil("user", "new", "build-user", "b@example.invalid", "unused", "-R", clone_b, env=env)
    rk.fossil("user", "capabilities", "build-user", "gioy", "-R", clone_b, env=env)
    pw_file = os.path.join(lab.top, "lab-user.pw")
    with open(pw_file, "w") as f:
        f.write(rk.RUN_USERS["lab-user"][0] + "\n")
    os.chmod(pw_file, 0o600)
    rk.write_config(lab.envs["b"]["SOT_OCX_CONFIG"], os.path.join(lab.top, "b.sqlite"),
                    [{"name": "proj", "repository": clone_b, "login": "lab-user",
                      "url": f"http://lab-user@{lab.host}:{lab.port}/", "password_file": pw_file}])  # fmt: skip
    port = free_port()
    srv = subprocess.Popen(["fossil", "server", "--localhost", "--port", str(port), clone_b],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    stop, found, seen = threading.Event(), [], []
    watcher = threading.Thread(target=_secret_cmdlines, args=(stop, found, seen, [b"labpw"]), daemon=True)
    try:
        wait_port("127.0.0.1", port)
        with open(lab.envs["b"]["SOT_OCX_POLICY"], "a") as f:
            f.write(f'\n[runs.clone_urls]\nproj = "http://127.0.0.1:{port}/"\n')
        b = rk.run_body(lab.server_code("b"), ["make", "-C", "$$tree$$", "image"], limits={"wall": "5m"})
        b["workspace"] = [
            b["workspace"][0],
            {"step": "password"},
            {"step": "clone", "into": "$$workspace$$/clone.fossil"},
            {"step": "checkout", "of": "trunk", "into": "$$workspace$$/tree"},
        ]
        h = rk.post_run(lab, "a", b)
        watcher.start()
        rk.node_once(lab, "b")
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=10)
        srv.terminate()
        srv.wait(timeout=10)
    got = rk.answers(lab, "a", h)
    assert [k for k, _, _ in got] == ["started", "ended"] and got[1][1]["outcome"] == "passed", got
    assert seen, "the watcher read no fossil command line: it proves nothing"
    assert found == []


# forks 40 sleepers, ignoring the forks pids.max refuses, then exits 0
FORK_BOMB = """import os, time
for i in range(40):
    try:
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
    except OSError:
        pass
"""


def _limited(code: str, script: str, limits: dict[str, object], *, output: bool = False) -> dict[str, object]:
    b = rk.run_body(code, ["sh", "-c", script], limits={"wall": "2m", **limits})
    if not output:
        b["process"]["unversioned_files"] = []
    return b


def test_limits_hold_and_ended_names_each_limit_met(lab: rk.Lab, host: rk.HostSentinels) -> None:
    """Limits that hold, against a real node: a fork bomb meets ``processes`` and still exits 0 (passed,
    ``limits_hit: [processes]``); an output cut at ``file_size`` by a process the shell outlives; a
    declared output missing; a memory hog killed by the memory cgroup; a 2 MiB write into a 1 MiB
    sandbox /tmp; a workspace over its disk bound; nested user namespaces and the filtered calls
    (``keyctl``, ``ptrace``) refused with EPERM inside."""
    code = lab.server_code("b")
    py = "import ctypes; c = ctypes.CDLL(None, use_errno=True)"
    calls = (
        f"python3 -c '{py}; r = c.syscall(250, 0, -3, 0); print(\"keyctl\", r, ctypes.get_errno())';"
        f" python3 -c '{py}; r = c.syscall(101, 0, 0, 0, 0); print(\"ptrace\", r, ctypes.get_errno())';"
        " unshare -U true 2>/dev/null; echo unshare $?"
    )
    runs = {
        "fork": _limited(code, f"python3 -c '{FORK_BOMB}'", {"processes": 10}),
        "fsize": _limited(code, "mkdir -p $$tree$$/out; head -c 2097152 /dev/zero > $$tree$$/out/board.img; exit 0",
                          {"file_size": "1M"}, output=True),
        "missing": _limited(code, "true", {}, output=True),
        "memory": _limited(code, "python3 -c 'b = bytearray(256 << 20); print(len(b))'", {"memory": "64M"}),
        "tmp": _limited(code, "head -c 2097152 /dev/zero > /tmp/x; echo wrote $?; exit 0", {"tmp_size": "1M"}),
        "disk": _limited(code, "head -c 16777216 /dev/zero > $$workspace$$/big; sleep 20", {"disk": "4M"}),
        "calls": _limited(code, calls, {}),
    }  # fmt: skip
    posted = {name: rk.post_run(lab, "a", b) for name, b in runs.items()}
    rk.node_once(lab, "b")
    ended = {name: rk.wait_answer(lab, "a", h, "ended") for name, h in posted.items()}

    def stdout(name: str) -> bytes:
        return rk.uv_bytes(lab.clones["a"], f"ocx/logs/{posted[name]}/stdout", lab.top) or b""

    assert (ended["fork"]["outcome"], ended["fork"]["exit"], ended["fork"]["limits_hit"]) == (
        "passed", 0, ["processes"]
    ), ended["fork"]  # fmt: skip
    assert ended["fsize"]["outcome"] == "passed" and ended["fsize"]["limits_hit"] == ["file_size"]
    img = rk.uv_bytes(lab.clones["a"], output_name(posted["fsize"], "builds/board.img"), lab.top)
    assert img is not None and len(img) == 1 << 20
    assert ended["missing"]["missing"] == ["builds/board.img"] and ended["missing"]["limits_hit"] == [
        "outputs"
    ]
    assert ended["missing"]["outcome"] == "passed"
    assert (ended["memory"]["outcome"], ended["memory"].get("limit")) == ("limit", "memory"), ended["memory"]
    assert "memory" in ended["memory"]["limits_hit"]
    assert ended["tmp"]["outcome"] == "passed" and stdout("tmp") == b"wrote 1\n"
    assert (ended["disk"]["outcome"], ended["disk"]["limit"], ended["disk"]["limits_hit"]) == (
        "limit", "disk", ["disk"]
    ), ended["disk"]  # fmt: skip
    assert stdout("calls") == b"keyctl -1 1\nptrace -1 1\nunshare 1\n", stdout("calls")
    host.check()


def test_a_session_outbox_swapped_for_a_link_is_never_followed(host: rk.HostSentinels, tmp_path: str) -> None:
    """A session owns its outbox and inbox and may swap them for symlinks to a root-only folder: the node
    then lists, reads, moves and appends nothing through them (it used to move host files into
    ``rejected/`` as root). In process: ``Session`` with a stand-in node that records posts."""
    from sotd.ocxrun import Session

    ws = os.path.join(str(tmp_path), "ws")
    os.mkdir(ws)
    with open(os.path.join(host.folder, "note.json"), "w") as f:
        f.write('{"ocx": 2, "re": "x", "post": {}}')
    host.before = host._snapshot()  # the folder now holds a .json the outbox reader would take
    os.symlink(host.folder, os.path.join(ws, "outbox"))
    os.symlink(os.path.join(host.folder, "secret"), os.path.join(ws, "inbox.jsonl"))

    class Posts:
        def __init__(self) -> None:
            self.posted: list[bytes] = []

        def post(self, repo: str, data: bytes) -> object:
            self.posted.append(data)
            raise AssertionError("nothing may be posted from a linked outbox")

    class Runs:
        node = Posts()

    class Active:
        run_hash = "f" * 64
        repo = "proj"

    s = Session.__new__(Session)
    s.runs, s.a, s.ws, s.outbox = Runs(), Active(), ws, os.path.join(ws, "outbox")  # type: ignore[assignment]
    s._post_outbox()
    s._mirror({"hash": "h", "from": "alice"})
    assert Runs.node.posted == []
    host.check()


def test_the_tree_is_extracted_as_the_sandbox_uid(lab: rk.Lab, host: rk.HostSentinels) -> None:
    """The second wall of attack 3: were a ``files`` step's folder swapped for a root-only folder, the
    extraction runs as the sandbox uid and cannot write there (it used to run as root and reset the
    folder's mode and mtime from the archive). The real carrier, handed the root-only folder itself."""
    from sotd.jobs import paths
    from sotd.jobs.steps import FossilCarrier, fd_path

    fd = paths.open_dir(host.folder, "the tree")
    try:
        with pytest.raises(RuntimeError, match="tar -xzf exited 2"):
            FossilCarrier().export(os.path.join(lab.top, "hub.fossil"), "trunk", fd_path(fd), (1000, 1000))
    finally:
        os.close(fd)
    host.check()
