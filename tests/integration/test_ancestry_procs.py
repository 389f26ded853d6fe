"""sotd.ancestry.check on REAL process trees (behaviour 5).

Fake agents and capsule are symlinks to /bin/sh named ``claude``, ``codex`` and ``sot-capsule``: /proc shows
their argv[0] as the link's path, so the check sees exactly those names. Each runs ``sh -c '"$@"; exit $?'``
so the shell forks its child instead of exec'ing into it (the layer stays in the tree).

Robustness against the test runner's own ancestry (pytest may itself run under a real ``claude``): every
tree is started through ``launch.py``, which double-forks with ``setsid`` so the tree's top process is
reparented to pid 1 before it execs; the walk then ends at the tree's top and never reaches pytest. The top
process records its parent after reparenting; if it is not 1 (a child subreaper such as ``systemd --user``
would adopt it and the walk would continue through the subreaper's ancestry) the test skips with that
reason rather than judge an ancestry it did not build.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

CODE = "from sotd.ancestry import check; print(check())"
PASS = '"$@"; exit $?'
SECOND = (
    "this process runs under claude, started inside codex's session, so it has no comm identity — nothing "
    "was read, sent or stamped; do not retry or join: an agent that needs its own handle is started as its own row"
)
NOT_IN = (
    "this process names row {row} but is not shown to run inside that row's capsule, so it has no comm identity; "
    "nothing was read, sent or stamped; start it inside the row, or as its own row"
)

LAUNCH = r"""
import os, sys, time
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid:
    os.waitpid(pid, 0)
    sys.exit(0)
os.setsid()
mid = os.getpid()
if os.fork():
    os._exit(0)
deadline = time.monotonic() + 5
while os.getppid() == mid and time.monotonic() < deadline:
    time.sleep(0.01)
with open(report, "w") as f:
    f.write(str(os.getppid()))
os.execv(argv[0], argv)
"""


@pytest.fixture
def tree(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("claude", "codex", "sot-capsule"):
        os.symlink("/bin/sh", bindir / name)
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCH)
    report = tmp_path / "top-ppid"

    def run(argv, env_extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SOT_")}
        src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
        env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(env_extra)
        res = subprocess.run(
            [sys.executable, str(launcher), str(report), *argv],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert res.returncode == 0, res.stderr
        top_ppid = report.read_text()
        if top_ppid != "1":
            pytest.skip(
                f"orphans here are adopted by pid {top_ppid} (a subreaper), not 1: the walk would not end"
            )
        return eval(res.stdout.strip())  # a tuple literal printed by check()

    run.bin = str(bindir)
    run.ws = str(tmp_path / "state" / "workspaces")
    return run


def agent(run, name, *rest):
    return [os.path.join(run.bin, name), "-c", PASS, name, *rest]


def test_plain_process_passes(tree):
    assert tree([sys.executable, "-c", CODE], {}) == (0, None)


def test_one_agent_passes(tree):
    assert tree(agent(tree, "claude", sys.executable, "-c", CODE), {}) == (0, None)


def test_claude_under_codex_is_refused(tree):
    argv = agent(tree, "codex", *agent(tree, "claude", sys.executable, "-c", CODE))
    assert tree(argv, {}) == (1, SECOND)


def capsule(run, args, *rest):
    # sh -c 'shift N; "$@"; exit $?' sot-capsule <args...> <child...>
    script = f'shift {len(args)}; "$@"; exit $?'
    return [os.path.join(run.bin, "sot-capsule"), "-c", script, "sot-capsule", *args, *rest]


def test_inside_the_rows_capsule_passes(tree):
    ws = os.path.join(tree.ws, "ws-r1")
    argv = capsule(
        tree, ["supervise", ws, "--start", "--"], *agent(tree, "claude", sys.executable, "-c", CODE)
    )
    assert tree(argv, {"SOT_WORKSPACE_ID": "ws-r1"}) == (0, None)


def test_capsule_stops_the_walk_above_two_agents(tree):
    ws = os.path.join(tree.ws, "ws-r1")
    inner = capsule(tree, ["run", ws + "/voyages/v1"], *agent(tree, "claude", sys.executable, "-c", CODE))
    assert tree(agent(tree, "codex", *inner), {"SOT_WORKSPACE_ID": "ws-r1"}) == (0, None)


def test_row_named_by_env_but_not_by_the_capsule_is_refused(tree):
    ws = os.path.join(tree.ws, "ws-r1")
    argv = capsule(
        tree, ["supervise", ws, "--start", "--"], *agent(tree, "claude", sys.executable, "-c", CODE)
    )
    assert tree(argv, {"SOT_WORKSPACE_ID": "ws-r2"}) == (2, NOT_IN.format(row="ws-r2"))


def test_prefix_row_id_is_refused(tree):
    ws = os.path.join(tree.ws, "ws-r1b")
    argv = capsule(tree, ["supervise", ws], sys.executable, "-c", CODE)
    assert tree(argv, {"SOT_WORKSPACE_ID": "ws-r1"}) == (2, NOT_IN.format(row="ws-r1"))


def test_row_id_only_after_double_dash_is_refused(tree):
    ws = os.path.join(tree.ws, "ws-r1")
    argv = capsule(tree, ["supervise", "--start", "--", ws], sys.executable, "-c", CODE)
    assert tree(argv, {"SOT_WORKSPACE_ID": "ws-r1"}) == (2, NOT_IN.format(row="ws-r1"))


def test_pinned_self_file_wins_over_the_environment(tree):
    ws = os.path.join(tree.ws, "ws-r1")
    argv = capsule(tree, ["supervise", ws], sys.executable, "-c", CODE)
    env = {"SOT_WORKSPACE_ID": "ws-r1", "SOT_COMM_SELF_FILE": "/c/self/box__ws-r9.txt"}
    assert tree(argv, env) == (2, NOT_IN.format(row="ws-r9"))


def test_row_named_outside_any_capsule_is_refused(tree):
    argv = agent(tree, "claude", sys.executable, "-c", CODE)
    assert tree(argv, {"SOT_WORKSPACE_ID": "ws-r1"}) == (2, NOT_IN.format(row="ws-r1"))
