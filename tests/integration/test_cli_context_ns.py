"""Behaviour 1.1's two context failures, provoked for real in a namespace of their own (root only):

- no declared host: a UTS namespace whose host name is empty, and no ``SOT_SELF_HOST``;
- no canonical project root: a mount namespace in which a tmpfs covers the folder above the working
  folder, so the path ``getcwd()`` reports no longer resolves.

Each refusal comes before anything is written under the comm folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import SOTD, Comm, Result, clean_env
from tests.integration.cli_support import snapshot

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.serial,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"),
]

HOST_REASON = "sot_host: no SOT_SELF_HOST override and hostname failed -- cannot declare an identity"
HOST_TEXT = (
    "comm-context: could not establish this box's declared host (see the reason above); aborting rather "
    "than proceeding with an unknown identity"
)
# In a new UTS namespace: empty the host name, then become the command.
NO_HOST = "import os, socket, sys; socket.sethostname(''); os.execv(sys.argv[1], sys.argv[1:])"
# In a new mount namespace: cover $1 with a small tmpfs, then become the command.
COVER = 'mount -t tmpfs -o size=64k sotd-test-cover "$1" && shift && exec "$@"'


def _run(argv: list[str], env: dict[str, str], cwd: str) -> Result:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60)
    return Result(p)


@pytest.fixture
def proj(comm: Comm) -> str:
    p = os.path.join(comm.work, "proj")
    os.makedirs(p)
    return os.path.realpath(p)


def _no_host_env(comm: Comm, root: str) -> dict[str, str]:
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, PWD=root)
    return env


def test_1_1_no_declared_host_context(comm: Comm, proj: str) -> None:
    before = snapshot(comm.home)
    r = _run(
        ["unshare", "--uts", sys.executable, "-c", NO_HOST, SOTD, "comm", "context"],
        _no_host_env(comm, proj),
        proj,
    )
    assert (r.code, r.out, r.err_lines) == (1, "", [HOST_REASON, HOST_TEXT]), r
    assert snapshot(comm.home) == before


def test_1_1_no_declared_host_join_writes_nothing(comm: Comm, proj: str) -> None:
    before = snapshot(comm.home)
    wrapper = os.path.join(comm.layout.bin_dir, "comm-join.sh")
    r = _run(
        ["unshare", "--uts", sys.executable, "-c", NO_HOST, wrapper, "--name", "alpha"],
        _no_host_env(comm, proj),
        proj,
    )
    assert (r.code, r.out) == (1, ""), r
    assert sorted(r.err_lines) == sorted([HOST_REASON, HOST_TEXT]), r
    assert snapshot(comm.home) == before


def test_1_1_no_declared_host_join_reason_comes_first(comm: Comm, proj: str) -> None:
    wrapper = os.path.join(comm.layout.bin_dir, "comm-join.sh")
    r = _run(
        ["unshare", "--uts", sys.executable, "-c", NO_HOST, wrapper, "--name", "alpha"],
        _no_host_env(comm, proj),
        proj,
    )
    assert r.err_lines == [HOST_REASON, HOST_TEXT], r


def _covered(comm: Comm) -> tuple[str, str, dict[str, str]]:
    cover = os.path.join(os.path.realpath(comm.work), "cover")
    raw = os.path.join(cover, "proj")
    os.makedirs(raw)
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, SOT_SELF_HOST="testhost", SOT_COMM_TEST_HOST="testhost", PWD=raw)
    return cover, raw, env


def _under_cover(cover: str, *command: str) -> list[str]:
    """``command`` in a private mount namespace where ``cover`` hides the project folder (``COVER``)."""
    return ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", COVER, "sh", cover, *command]


def test_1_1_no_canonical_project_root_context(comm: Comm) -> None:
    cover, raw, env = _covered(comm)
    before = snapshot(comm.home)
    r = _run(_under_cover(cover, SOTD, "comm", "context"), env, raw)
    assert (r.code, r.out) == (1, ""), r
    assert len(r.err_lines) == 2, r
    assert r.err_lines[0].startswith(
        f"sot_canonical_path: could not resolve a canonical path for '{raw}' ("
    ), r
    assert r.err_lines[1] == (
        f"comm-context: could not establish a canonical project root for '{raw}' — see the reason above; "
        "aborting rather than proceeding with an unknown identity"
    )
    assert snapshot(comm.home) == before


def test_1_1_no_canonical_project_root_send_writes_nothing(comm: Comm) -> None:
    cover, raw, env = _covered(comm)
    before = snapshot(comm.home)
    wrapper = os.path.join(comm.layout.bin_dir, "comm-send.sh")
    r = _run(_under_cover(cover, wrapper, "@b", "hi"), env, raw)
    assert (r.code, r.out) == (1, ""), r
    assert (
        f"comm-context: could not establish a canonical project root for '{raw}' — see the reason above; "
        "aborting rather than proceeding with an unknown identity"
    ) in r.err_lines, r
    assert snapshot(comm.home) == before
