"""Helpers for OCX layer-3 tests: a Fossil project whose trunk builds ``out/board.img``, two nodes (A posts
runs as ``alice``; B serves its clone as ``lab-user`` with a node policy), and every step through the real
``sotd ocx`` CLI, optionally inside a network namespace (``prefixes``: ``ip netns exec NS`` per node).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sotd.demo import ocx_seed as seed
from tests.ocx.fossilkit import SOTD, base_env, fossil, sotd, write_config

__all__ = ["base_env", "fossil", "sotd", "write_config"]


# alice posts runs (node A); lab-user is the login node B acts as; carol may post but is nobody to a run.
RUN_USERS = {"alice": ("alicepw", "oiy"), "lab-user": ("labpw", "oiy"), "carol": ("carolpw", "oiy")}
NODE_LOGIN = {"a": ("alice", "alicepw"), "b": ("lab-user", "labpw")}


def node_policy(root: str, state: str) -> str:
    """The node policy of A and B: builds as ``build-user``, a wall limit of 1 h, 512 processes and 1G of
    disk a run (each workspace is a file system of that size; the node-wide bound and the free space
    count it for every live run, and some tests run seven at once)."""
    return seed.node_policy(root, state, users=["build-user"], read_only=["/usr", "/etc/alternatives"],
                            limits={"wall": "1h", "processes": 512, "disk": "1G"})  # fmt: skip


def make_project(hub: str, work: str, env: dict[str, str] | None = None) -> None:
    """The hub repository with ``RUN_USERS`` and one check-in on trunk: the Makefile and board.c."""
    e = dict(env or base_env(work))
    seed.make_hub(hub, RUN_USERS, env=env)
    seed.commit_board(hub, os.path.join(work, "checkin"), env=e)


@dataclass
class Lab:
    top: str
    host: str
    port: int
    prefixes: dict[str, list[str]]
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    clones: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)

    def prefix(self, who: str) -> list[str] | None:
        return self.prefixes.get(who)

    def server_code(self, who: str) -> str:
        r = sotd("ocx", "server-code", "proj", env=self.envs[who])
        assert r.code == 0, r
        return r.out.strip()


def setup_nodes(top: str, host: str, port: int, prefixes: dict[str, list[str]]) -> Lab:
    """Clones, configurations and node policies for A and B (both may run builds; only B is addressed)."""
    lab = Lab(top, host, port, prefixes)
    for who, (login, pw) in NODE_LOGIN.items():
        e = base_env(top)
        cfg = os.path.join(top, f"{who}.toml")
        e["SOT_OCX_CONFIG"] = cfg
        clone = os.path.join(top, f"{who}.fossil")
        r = sotd(
            "ocx", "clone", f"http://{login}:{pw}@{host}:{port}/", clone, env=e, prefix=prefixes.get(who)
        )
        assert r.code == 0, r
        write_config(
            cfg,
            os.path.join(top, f"{who}.sqlite"),
            [{"name": "proj", "repository": clone, "login": login, "url": f"http://{login}@{host}:{port}/"}],
        )
        root, state = os.path.join(top, f"{who}-root"), os.path.join(top, f"{who}-state")
        # A's policy file is found by its default name beside a.toml; B's through $SOT_OCX_POLICY
        pol = os.path.join(top, "ocx-policy.toml" if who == "a" else f"{who}-policy.toml")
        with open(pol, "w") as f:
            f.write(node_policy(root, state))
        if who != "a":
            e["SOT_OCX_POLICY"] = pol
        lab.envs[who], lab.clones[who], lab.state[who] = e, clone, state
    return lab


def run_body(clone: str, command: list[str], *, session: bool = False, **kw: Any) -> dict[str, Any]:
    """The seed's build example (``ocx_seed.build_body``, keywords passed on); with ``session`` its process
    asks for a session instead (what a node without ``sessions = true`` refuses)."""
    body = seed.build_body(clone, command, **kw)
    if session:
        body["process"] = {"user": body["process"]["user"], "command": command, "session": True,
                           "hears": ["alice"], "deliveries": "start"}  # fmt: skip
    return body


def post(lab: Lab, who: str, doc: dict[str, Any]) -> str:
    """Post ``doc`` (json.dumps defaults) from node ``who``; its hash."""
    path = os.path.join(lab.top, f"msg-{time.monotonic_ns()}.json")
    with open(path, "w") as f:
        f.write(json.dumps(doc))
    r = sotd("ocx", "post", path, "--repo", "proj", env=lab.envs[who], prefix=lab.prefix(who))
    assert r.code == 0, r
    return r.out.strip()


def post_run(lab: Lab, who: str, body: dict[str, Any], to: str = "lab-user") -> str:
    return post(lab, who, {"ocx": 2, "to": to, "run": body})


def post_stop(lab: Lab, who: str, run_hash: str, body: dict[str, Any] | None = None) -> str:
    return post(lab, who, {"ocx": 2, "re": run_hash, "stop": body or {}})


def answers(lab: Lab, who: str, run_hash: str, *, sync: bool = True) -> list[tuple[str, dict[str, Any], str]]:
    """(kind, body, sender) of every answer to ``run_hash`` that node ``who`` holds, in received order."""
    if sync:
        assert sotd("ocx", "sync", env=lab.envs[who], prefix=lab.prefix(who)).code == 0
    r = sotd("ocx", "answers", run_hash, "--json", env=lab.envs[who])
    assert r.code == 0, r
    out = []
    for row in json.loads(r.out):
        shown = json.loads(sotd("ocx", "show", row["hash"], "--json", env=lab.envs[who]).out)
        doc = json.loads(shown["message"])
        out.append((row["kind"], doc[row["kind"]], row["sender_login"]))
    return out


def wait_answer(lab: Lab, who: str, run_hash: str, kind: str, bound: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + bound
    while True:
        for k, body, _ in answers(lab, who, run_hash):
            if k == kind:
                return body
        assert time.monotonic() < deadline, f"no {kind} for {run_hash} within {bound}s"
        time.sleep(0.3)


def node_once(lab: Lab, who: str, timeout: float = 120) -> str:
    """``sotd ocx node --once`` for node ``who``; its stderr (the node's log)."""
    p = subprocess.run([*(lab.prefix(who) or []), SOTD, "ocx", "node", "--once"], env=lab.envs[who],
                       capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stderr


def start_node(lab: Lab, who: str, interval: float = 0.5) -> subprocess.Popen[str]:
    with open(os.path.join(lab.top, f"node-{who}.log"), "a") as log:  # the node writes it; our copy closes
        return subprocess.Popen(
            [*(lab.prefix(who) or []), SOTD, "ocx", "node", "--interval", str(interval)],
            env=lab.envs[who], stdout=log, stderr=log, text=True,
        )  # fmt: skip


def stop_node(p: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    if p.poll() is None:
        p.send_signal(sig)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)


def node_log(lab: Lab, who: str) -> str:
    try:
        with open(os.path.join(lab.top, f"node-{who}.log")) as f:
            return f.read()
    except OSError:
        return ""


def uv_bytes(repo: str, name: str, top: str) -> bytes | None:
    """The unversioned file ``name`` of ``repo`` (None when the clone has none)."""
    p = subprocess.run(["fossil", "uv", "cat", name, "-R", repo], capture_output=True, timeout=60,
                       check=False, env=base_env(top))  # fmt: skip
    return p.stdout if p.returncode == 0 else None


def hub_order(hub: str, names: list[str], top: str) -> list[int]:
    """The hub's receipt id of each unversioned file (first receipt order)."""
    out = fossil("sql", "-R", hub, "SELECT name, rcvid FROM unversioned", env=base_env(top))
    got: dict[str, int] = {}
    for line in out.splitlines():
        name, _, rcv = line.rpartition(",")
        got[name.strip("'")] = int(rcv)
    return [got[n] for n in names]


def sandbox_cleanup(top: str | None = None, states: list[str] | None = None) -> None:
    """Kill and remove any job cgroup a failed test left behind (pids and memory v1 on this host); with
    ``states``, only those of the runs below those node state folders (``STATE/jobs/<RUN-HASH>``), so a
    lab's teardown never kills the runs of a test running beside it; with ``top``, unmount the workspace
    file systems below it (``disk.release_below``) before it is removed."""
    from sotd.jobs import disk, spec
    from sotd.jobs import limits as lim

    mine: set[str] | None = None
    if states is not None:
        mine = set()
        for st in states:
            with contextlib.suppress(OSError):
                mine.update("sotd-job-" + h[:16] for h in os.listdir(os.path.join(st, "jobs")))

    bases = [("pids", "/sys/fs/cgroup/pids")]
    memory = lim.read_facts().v1.get("memory")
    if memory:
        bases.append(("memory", memory))
    for key, base in bases:
        if not os.path.isdir(base):
            continue
        for d in os.listdir(base):
            if d.startswith("sotd-job-") and (mine is None or d in mine):
                cg = lim.Cgroups.existing({key: f"{base}/{d}"}, lim.plan(spec.Limits(), lim.CgroupFacts(), 0))
                cg.kill()
                cg.remove()
    if top is not None:
        disk.release_below(top)


@contextmanager
def served_lab(prefix: str = "sotd-ocxrun") -> Iterator[Lab]:
    """The project hub served on loopback and nodes A and B set up (``setup_nodes``); all removed after.

    The top folder is in /tmp and 0755: the sandbox uid must search its way to the workspaces."""
    from tests.ocx.fossilkit import need_fossil

    need_fossil()
    top = f"/tmp/{prefix}-{secrets.token_hex(4)}"
    os.mkdir(top, 0o755)
    hub = os.path.join(top, "hub.fossil")
    srv = None
    try:
        make_project(hub, top)
        port, srv = seed.serve(hub, base_env(top))
        yield setup_nodes(top, "127.0.0.1", port, {})
    finally:
        if srv is not None:
            seed.stop(srv)
        sandbox_cleanup(top, [os.path.join(top, f"{who}-state") for who in NODE_LOGIN])
        shutil.rmtree(top, ignore_errors=True)


def add_poster(lab: Lab, who: str, login: str) -> None:
    """A third node configuration ``who`` posting as ``login`` (one of ``RUN_USERS``) through its own clone."""
    e = base_env(lab.top)
    cfg = os.path.join(lab.top, f"{who}.toml")
    e["SOT_OCX_CONFIG"] = cfg
    clone = os.path.join(lab.top, f"{who}.fossil")
    pw = RUN_USERS[login][0]
    r = sotd("ocx", "clone", f"http://{login}:{pw}@{lab.host}:{lab.port}/", clone, env=e)
    assert r.code == 0, r
    write_config(cfg, os.path.join(lab.top, f"{who}.sqlite"),
                 [{"name": "proj", "repository": clone, "login": login,
                   "url": f"http://{login}@{lab.host}:{lab.port}/"}])  # fmt: skip
    lab.envs[who], lab.clones[who] = e, clone


def set_senders(lab: Lab, logins: list[str]) -> None:
    """Rewrite node B's ``runs.senders`` for the clone ``proj``."""
    path = lab.envs["b"]["SOT_OCX_POLICY"]
    with open(path) as f:
        text = f.read()
    start = text.index("senders = ")
    end = text.index("\n", start)
    with open(path, "w") as f:
        f.write(text[:start] + f"senders = {{ proj = {json.dumps(logins)} }}" + text[end:])


def commit_files(
    lab: Lab, files: dict[str, str], links: dict[str, str], message: str, *, pull_b: bool = True,
    branch: str | None = None,
) -> str:  # fmt: skip
    """Commit ``files`` (name -> text) and symlinks (name -> target) on the hub's trunk (or, with
    ``branch``, on a new branch of that name from trunk), with Fossil's ``allow-symlinks`` on so the
    check-in (and its tarball) holds real links; its full hash. Node B's clone pulls it when ``pull_b``."""
    hub = os.path.join(lab.top, "hub.fossil")
    e = base_env(lab.top)
    co = os.path.join(lab.top, f"co-{secrets.token_hex(3)}")
    os.mkdir(co)
    run = partial(subprocess.run, cwd=co, env=e, check=True, capture_output=True, timeout=60)
    run(["fossil", "open", hub, *(["trunk"] if branch else []), "--workdir", co])
    run(["fossil", "settings", "allow-symlinks", "on"])
    for name, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(co, name)) or co, exist_ok=True)
        with open(os.path.join(co, name), "w") as f:
            f.write(text)
    for name, target in links.items():
        os.makedirs(os.path.dirname(os.path.join(co, name)) or co, exist_ok=True)
        os.symlink(target, os.path.join(co, name))
    run(["fossil", "add", *files, *links])
    run(["fossil", "commit", "-m", message, "--user", "admin", "--no-warnings",
         *(["--branch", branch] if branch else [])])  # fmt: skip
    checkin = run(["fossil", "whatis", branch or "trunk", "-R", hub], text=True).stdout
    run(["fossil", "close", "--force"])
    shutil.rmtree(co)
    if pull_b:
        pw = RUN_USERS["lab-user"][0]
        subprocess.run(["fossil", "pull", f"http://lab-user:{pw}@{lab.host}:{lab.port}/", "--once", "-R",
                        lab.clones["b"]], env=e, check=True, capture_output=True, timeout=60)  # fmt: skip
    return next(ln.split()[1] for ln in checkin.splitlines() if ln.startswith("artifact:"))


class HostSentinels:
    """A sentinel file in /tmp and a root-only 0700 folder with a secret in it: bytes, mode, owner and
    mtime recorded, to be checked byte for byte after an attack (``check``)."""

    def __init__(self) -> None:
        tag = secrets.token_hex(4)
        self.file = f"/tmp/sotd-sentinel-{tag}"
        self.folder = f"/tmp/sotd-rootonly-{tag}"
        with open(self.file, "w") as f:
            f.write("sentinel " + tag + "\n")
        os.chmod(self.file, 0o644)
        os.mkdir(self.folder, 0o700)
        with open(os.path.join(self.folder, "secret"), "w") as f:
            f.write("root only " + tag + "\n")
        self.before = self._snapshot()

    def _snapshot(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for p in (self.file, self.folder, os.path.join(self.folder, "secret")):
            st = os.lstat(p)
            data = None
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    data = f.read()
            out[p] = (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, data)
        out["listing"] = sorted(os.listdir(self.folder))
        return out

    def check(self) -> None:
        assert self._snapshot() == self.before

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self.file)
