"""``sotd daemon``'s refusals, printed by ``sotd.cli.main`` from the classes ``daemon/command.py`` and
``daemon/unit.py`` raise (issue 29 item 1): each exact line, its exit status, and that nothing was done.

No daemon is started: each path fails before one would be (a stop with no status file or a stale one, a
word the subcommand does not take, a unit that cannot be written).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from sotd import cmdtable, sysprobe
from tests.conftest import SOTD, clean_env

pytestmark = pytest.mark.integration


def _daemon(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SOTD, "daemon", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _env(work: str) -> dict[str, str]:
    env = clean_env()
    env.update(SOT_COMM_HOME=os.path.join(work, "comm"), XDG_CONFIG_HOME=os.path.join(work, "config"))
    return env


def test_stop_with_no_status_file_says_so_and_exits_1(tmp_path: object) -> None:
    sock = os.path.join(str(tmp_path), "run", "sotd.sock")
    r = _daemon(_env(str(tmp_path)), "stop", "--socket", sock)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"sotd daemon: no daemon runs at {sock} (no status file {sock}.status.json)\n"


def test_stop_with_a_stale_status_file_signals_nothing_and_removes_it(tmp_path: object) -> None:
    """The status file names this test's own pid with another start tick: a recycled pid, never signalled
    (this process is still here to check), and the stale file is removed."""
    run = os.path.join(str(tmp_path), "run")
    os.makedirs(run, mode=0o700)
    sock = os.path.join(run, "sotd.sock")
    me = os.getpid()
    with open(sock + ".status.json", "w") as f:
        json.dump({"pid": me, "start_tick": f"{sysprobe.start_tick(me)}0", "socket": sock}, f)
    r = _daemon(_env(str(tmp_path)), "stop", "--socket", sock)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        f"sotd daemon: the status file names pid {me}, which no longer runs that daemon: nothing signalled\n"
    )
    assert not os.path.exists(sock + ".status.json")


def test_a_word_the_subcommand_does_not_take_is_usage_exit_2(tmp_path: object) -> None:
    sock = os.path.join(str(tmp_path), "run", "sotd.sock")
    r = _daemon(_env(str(tmp_path)), "status", "--socket", sock, "extra")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"sotd daemon: unknown argument 'extra'\n{cmdtable.usages('daemon')}\n"


def test_install_that_cannot_write_the_unit_says_why_and_writes_nothing(tmp_path: object) -> None:
    work = str(tmp_path)
    env = _env(work)
    with open(env["XDG_CONFIG_HOME"], "w") as f:  # a file where the config folder would be
        f.write("not a folder\n")
    path = os.path.join(env["XDG_CONFIG_HOME"], "systemd", "user", "sotd.service")
    r = _daemon(env, "install", "--socket", os.path.join(work, "run", "sotd.sock"))
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"sotd daemon install: cannot write {path}: Not a directory\n"
    with open(env["XDG_CONFIG_HOME"]) as f:
        assert f.read() == "not a folder\n"
