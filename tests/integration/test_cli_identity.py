"""Identity refusals through the CLI (behaviour 5.4 "How commands surface it", section 1 preamble).

Each command runs through its installed wrapper inside a REAL process tree built from the fake agents of
``test_ancestry_procs`` (symlinks to /bin/sh named ``claude`` / ``codex`` / ``sot-capsule``, started by its
double-fork launcher so the walk ends at the tree's top). A refused command prints its own surface text and
leaves the comm folder byte-for-byte as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from tests.conftest import Comm, Result, Session
from tests.integration.cli_support import snapshot
from tests.integration.test_ancestry_procs import LAUNCH, NOT_IN, SECOND, agent, capsule

pytestmark = pytest.mark.integration

# sh -c 'f=$1; shift; "$@"; echo $? > "$f"' sh <rcfile> <argv...>: records the command's own exit status.
RC = 'f=$1; shift; "$@"; echo $? > "$f"'


class Tree:
    """Runs argv inside a built process tree; ``layers`` outermost first, optional capsule above them."""

    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.bin = os.path.join(tmp, "fakebin")
        os.makedirs(self.bin, exist_ok=True)
        for name in ("claude", "codex", "sot-capsule"):
            link = os.path.join(self.bin, name)
            if not os.path.lexists(link):
                os.symlink("/bin/sh", link)
        self.launcher = os.path.join(tmp, "launch.py")
        with open(self.launcher, "w") as f:
            f.write(LAUNCH)
        self.ws = os.path.join(tmp, "workspaces")
        self.n = 0

    def argv(self, argv: list[str], layers: tuple[str, ...], capsule_args: list[str] | None) -> list[str]:
        run = types.SimpleNamespace(bin=self.bin)
        self.n += 1
        self.rcfile = os.path.join(self.tmp, f"rc.{self.n}")
        cmd = ["/bin/sh", "-c", RC, "sh", self.rcfile, *argv]
        for name in reversed(layers):
            cmd = agent(run, name, *cmd)
        if capsule_args is not None:
            cmd = capsule(run, capsule_args, *cmd)
        return cmd

    def run(
        self,
        session: Session,
        argv: list[str],
        *,
        layers: tuple[str, ...] = ("codex", "claude"),
        capsule_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        drop: tuple[str, ...] = (),
        stdin: str = "",
    ) -> Result:
        e = dict(session.env)
        e.update(env or {})
        for k in drop:
            e.pop(k, None)
        report = os.path.join(self.tmp, f"top-ppid.{self.n + 1}")
        full = [sys.executable, self.launcher, report, *self.argv(argv, layers, capsule_args)]
        p = subprocess.run(
            full,
            check=False,
            cwd=session.root,
            env=e,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 0, p.stderr
        with open(report) as f:
            top = f.read()
        if top != "1":
            pytest.skip(f"orphans here are adopted by pid {top} (a subreaper), not 1: the walk would not end")
        with open(self.rcfile) as f:
            code = int(f.read().strip())
        return Result(subprocess.CompletedProcess(full, code, p.stdout, p.stderr))


def wrapper(comm: Comm, verb: str) -> str:
    return os.path.join(comm.layout.bin_dir, f"comm-{verb}.sh")


@pytest.fixture
def two(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    assert b.run("send", "@alpha", "pending mail").code == 0
    return comm, a, b


@pytest.fixture
def tree(tmp_path: object) -> Tree:
    return Tree(os.path.join(str(tmp_path), "tree"))


CASES = [
    (["send.sh", "@beta", "hello"], f"FAILED -> @beta: {SECOND}"),
    (["poll.sh"], f"comm-poll: {SECOND}"),
    (["join.sh", "--name", "alpha"], f"comm-join.sh: REFUSING to bind: {SECOND}"),
    (["status.sh", "working", "on it"], f"comm-status.sh: {SECOND}"),
    (["sotd", "unread", "alpha"], f"sotd comm unread: {SECOND}"),
    (["leave.sh"], f"comm-leave.sh: {SECOND}"),
    (["leave.sh", "--name", "beta"], f"comm-leave.sh: {SECOND}"),
    (["list.sh"], f"comm-list.sh: {SECOND}"),
    (["context.sh"], f"comm-context: {SECOND}"),
    (["sotd", "leave"], f"sotd comm leave: {SECOND}"),
    (["sotd", "list"], f"sotd comm list: {SECOND}"),
]


@pytest.mark.parametrize(("cmd", "text"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_second_agent_is_refused_and_changes_nothing(two, tree, cmd: list[str], text: str) -> None:
    comm, a, _ = two
    if cmd[0] == "sotd":
        from tests.conftest import SOTD

        argv = [SOTD, "comm", *cmd[1:]]
    else:
        argv = [wrapper(comm, cmd[0][: -len(".sh")]), *cmd[1:]]
    before = snapshot(comm.home)
    r = tree.run(a, argv)
    assert (r.code, r.out, r.err_lines) == (1, "", [text]), r
    assert snapshot(comm.home) == before


def test_status_event_under_a_second_agent_is_silent_and_changes_nothing(two, tree) -> None:
    comm, a, _ = two
    before = snapshot(comm.home)
    for verb in ("prompt", "stop"):
        r = tree.run(a, [wrapper(comm, "status"), verb])
        assert (r.code, r.out, r.err) == (0, "", ""), r
    assert snapshot(comm.home) == before


def test_one_agent_is_not_refused(two, tree) -> None:
    comm, a, _ = two
    r = tree.run(a, [wrapper(comm, "poll")], layers=("claude",))
    assert r.code == 0, r
    assert r.out_lines[-1].endswith("[beta:beta] pending mail")


def _row_env(comm: Comm) -> dict[str, str]:
    return {"SOT_WORKSPACE_ID": "ws-x"}


def test_row_named_by_env_outside_its_capsule_is_refused(comm: Comm, tree: Tree) -> None:
    a = comm.session("alpha")
    why = NOT_IN.format(row="ws-x")
    before = snapshot(comm.home)
    kw = {"layers": ("claude",), "env": _row_env(comm), "drop": ("SOT_COMM_SELF_FILE",)}
    r = tree.run(a, [wrapper(comm, "join"), "--name", "alpha"], **kw)
    assert (r.code, r.out, r.err_lines) == (1, "", [f"comm-join.sh: REFUSING to bind: {why}"]), r
    r = tree.run(a, [wrapper(comm, "send"), "@beta", "hi"], **kw)
    assert (r.code, r.out, r.err_lines) == (1, "", [f"FAILED -> @beta: {why}"]), r
    r = tree.run(a, [wrapper(comm, "poll")], **kw)
    assert (r.code, r.out, r.err_lines) == (1, "", [f"comm-poll: {why}"]), r
    for verb, prefix in (("leave", "comm-leave.sh"), ("list", "comm-list.sh"), ("context", "comm-context")):
        r = tree.run(a, [wrapper(comm, verb)], **kw)
        assert (r.code, r.out, r.err_lines) == (1, "", [f"{prefix}: {why}"]), r
    assert snapshot(comm.home) == before


def test_row_named_by_env_inside_its_capsule_passes(comm: Comm, tree: Tree) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert b.run("join", "--name", "beta").code == 0
    cap = ["supervise", os.path.join(tree.ws, "ws-x"), "--start", "--"]
    kw = {"layers": ("claude",), "env": _row_env(comm), "drop": ("SOT_COMM_SELF_FILE",), "capsule_args": cap}
    r = tree.run(a, [wrapper(comm, "join"), "--name", "alpha"], **kw)
    assert r.code == 0, r
    assert r.out_lines[0] == "Joined sot-comm as @alpha  (alpha on testhost)."
    assert os.path.exists(os.path.join(comm.layout.self_dir, "testhost__ws-x.txt"))
    r = tree.run(a, [wrapper(comm, "send"), "@beta", "from the row"], **kw)
    assert (r.code, r.out_lines, r.err) == (0, ["  filed -> @beta"], ""), r
    # the same session outside its capsule (same env, same slot) is refused again
    kw.pop("capsule_args")
    r = tree.run(a, [wrapper(comm, "send"), "@beta", "outside"], **kw)
    assert (r.code, r.err_lines) == (1, [f"FAILED -> @beta: {NOT_IN.format(row='ws-x')}"]), r
    # a capsule naming another row does not count
    kw["capsule_args"] = ["supervise", os.path.join(tree.ws, "ws-xy")]
    r = tree.run(a, [wrapper(comm, "send"), "@beta", "wrong capsule"], **kw)
    assert r.code == 1, r
    assert comm.inbox_bytes("beta").count(b"\n") == 1
