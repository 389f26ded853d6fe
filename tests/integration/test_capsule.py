"""``sot-capsule supervise`` (D16, behaviour 4.1, 5.3): the real console script of this venv.

The capsule must stay in the agent's ancestry (it runs the agent as a child), name its row in its own
arguments so the identity check recognises it, forward SIGTERM/SIGINT/SIGHUP, and exit with the child's
status, writing nothing of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import SOTD, VENV_BIN, Comm
from tests.integration.test_ancestry_procs import NOT_IN

pytestmark = pytest.mark.integration

CAPSULE = shutil.which("sot-capsule", path=VENV_BIN) or "sot-capsule"


def capsule_argv(row_dir: str, *child: str, start: bool = True) -> list[str]:
    return [CAPSULE, "supervise", row_dir, *(["--start"] if start else []), "--", *child]


@pytest.fixture
def row_env(tmp_path) -> dict[str, str]:
    comm = Comm(str(tmp_path), install=False)
    env = comm.session("alpha").env
    env.pop("SOT_COMM_SELF_FILE", None)  # a pinned file would win over SOT_WORKSPACE_ID (behaviour 5.3)
    return env


def test_context_inside_the_rows_capsule_passes(tmp_path, row_env) -> None:
    ws = str(tmp_path / "state" / "workspaces" / "ws-1")
    env = dict(row_env, SOT_WORKSPACE_ID="ws-1")
    p = subprocess.run(
        capsule_argv(ws, SOTD, "comm", "context"),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.strip() and all("=" in line for line in p.stdout.splitlines())


def test_context_naming_another_row_is_refused(tmp_path, row_env) -> None:
    ws = str(tmp_path / "state" / "workspaces" / "ws-1")
    env = dict(row_env, SOT_WORKSPACE_ID="ws-2")
    p = subprocess.run(
        capsule_argv(ws, SOTD, "comm", "context"),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr == f"comm-context: {NOT_IN.format(row='ws-2')}\n"


def test_agent_is_a_child_of_the_capsule(tmp_path) -> None:
    ws = str(tmp_path / "workspaces" / "ws-1")
    code = "import os; print(os.getppid()); print(open(f'/proc/{os.getppid()}/cmdline','rb').read().split(b'\\0')[1:4])"
    p = subprocess.Popen(capsule_argv(ws, sys.executable, "-c", code), stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    ppid, args = out.splitlines()
    assert int(ppid) == p.pid
    assert args == repr([CAPSULE.encode(), b"supervise", ws.encode()])


@pytest.mark.parametrize("status", [0, 3, 7, 255])
def test_exit_status_is_propagated(tmp_path, status: int) -> None:
    p = subprocess.run(
        capsule_argv(
            str(tmp_path / "workspaces" / "ws-1"), "sh", "-c", f"echo out; echo err >&2; exit {status}"
        ),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (p.returncode, p.stdout, p.stderr) == (status, "out\n", "err\n")  # nothing of its own


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_child_killed_by_a_signal_kills_the_capsule_the_same_way(tmp_path, sig: signal.Signals) -> None:
    p = subprocess.run(
        capsule_argv(str(tmp_path / "workspaces" / "ws-1"), "sh", "-c", f"kill -{sig.name[3:]} $$"),
        timeout=30,
        check=False,
    )
    assert p.returncode == -sig


CHILD = r"""
import os, signal, sys, time
mark = sys.argv[1]
def on(sig, frame):
    with open(mark, "a") as f:
        f.write(signal.Signals(sig).name + "\n")
    sys.exit(40 + sig)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on)
open(mark + ".ready", "w").close()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(99)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_signals_are_forwarded_once(tmp_path, sig: signal.Signals) -> None:
    mark = str(tmp_path / "mark")
    # its own session: not in the test's process group, so only the signal sent to the capsule reaches it
    p = subprocess.Popen(
        capsule_argv(str(tmp_path / "workspaces" / "ws-1"), sys.executable, "-c", CHILD, mark),
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not os.path.exists(mark + ".ready") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.path.exists(mark + ".ready")
    p.send_signal(sig)
    assert p.wait(timeout=10) == 40 + sig
    with open(mark) as f:
        assert f.read() == sig.name + "\n"


@pytest.mark.parametrize(
    "args",
    [[], ["run"], ["supervise"], ["supervise", "/s/workspaces/ws-1"], ["supervise", "/s/workspaces/ws-1", "--"],
     ["supervise", "/s/workspaces/ws-1", "--bogus", "--", "true"], ["supervise", "--", "true"]],
)  # fmt: skip
def test_usage(args: list[str]) -> None:
    p = subprocess.run([CAPSULE, *args], check=False, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.startswith("usage: sot-capsule supervise ")


def test_missing_program_is_127(tmp_path) -> None:
    p = subprocess.run(
        capsule_argv(str(tmp_path / "workspaces" / "ws-1"), str(tmp_path / "nope")),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 127
    assert p.stdout == ""
    assert "nope" in p.stderr
