"""Issue 18's path handling on the real filesystem (root): the ``directory`` step's rule, the steps'
folders through descriptors, and ``sotd.jobs.launch`` (a session's sandbox started with descriptors and
the seccomp filter, through real bubblewrap)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sotd.jobs import paths
from sotd.jobs import sandbox as sbx
from sotd.jobs.errors import Refused
from sotd.jobs.spec import Process, Sandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists("/usr/bin/bwrap"), reason="needs root and bwrap"
    ),
]


@pytest.fixture
def top() -> Iterator[str]:
    t = f"/tmp/sotd-paths-{secrets.token_hex(4)}"
    os.mkdir(t, 0o755)
    os.mkdir(os.path.join(t, "root"), 0o755)
    try:
        yield t
    finally:
        shutil.rmtree(t, ignore_errors=True)


def test_make_workspace_modes_and_owner(top: str) -> None:
    root = os.path.join(top, "root")
    ws = os.path.join(root, "u", "projects", "p", "h")
    paths.make_workspace(root, ws, 1000, 1000, "run.workspace[0].at")
    for d in ("u", "u/projects", "u/projects/p"):
        st = os.stat(os.path.join(root, d))
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o755)
    st = os.stat(ws)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1000, 1000, 0o700)
    with pytest.raises(FileExistsError):
        paths.make_workspace(root, ws, 1000, 1000, "run.workspace[0].at")


def test_make_workspace_refuses_a_link_and_a_folder_a_sandbox_can_write(top: str) -> None:
    root = os.path.join(top, "root")
    os.symlink("/etc", os.path.join(root, "l"))
    with pytest.raises(Refused) as e:
        paths.make_workspace(root, os.path.join(root, "l", "w"), 1000, 1000, "at")
    assert e.value.message == f"at {root}/l/w passes through the symlink {root}/l: refused"
    os.mkdir(os.path.join(root, "open"), 0o777)
    os.chmod(os.path.join(root, "open"), 0o777)
    with pytest.raises(Refused) as e:
        paths.make_workspace(root, os.path.join(root, "open", "w"), 1000, 1000, "at")
    assert e.value.message == (
        f"at: the workspace {root}/open/w would lie inside {root}/open (owner uid 0, mode 0777), where a"
        " sandbox could write: refused"
    )
    assert os.listdir(os.path.join(root, "open")) == []


def test_make_below_hands_each_new_folder_to_the_uid(top: str) -> None:
    ws = os.path.join(top, "root", "ws")
    os.mkdir(ws, 0o700)
    os.chown(ws, 1000, 1000)
    fd = paths.make_below(ws, os.path.join(ws, "a", "b"), 1000, 1000, "into", last=True)
    os.close(fd)
    assert (
        os.stat(os.path.join(ws, "a")).st_uid == 1000 and os.stat(os.path.join(ws, "a", "b")).st_uid == 1000
    )
    os.symlink("/etc", os.path.join(ws, "l"))
    with pytest.raises(Refused, match="passes through the symlink"):
        paths.make_below(ws, os.path.join(ws, "l", "x"), 1000, 1000, "into", last=True)
    assert not os.path.exists("/etc/x")


def _launch(top: str, bind: str, command: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    sb = Sandbox(uid=1000, gid=1000, proc="/proc", read_only=("/usr", bind))
    slots: list[tuple[int, str]] = []
    argv = sbx.bwrap_argv(sb, Process(user="u", command=command, env={"PATH": "/usr/bin:/bin"}),
                          usr_links=sbx.host_usr_links(), bind_fds={bind: -1}, seccomp_fd=-1, slots=slots)  # fmt: skip
    spec = os.path.join(top, "launch.json")
    with open(spec, "w") as f:
        json.dump({"argv": argv, "binds": [[i, p] for i, p in slots if p],
                   "seccomp": next(i for i, p in slots if not p)}, f)  # fmt: skip
    return subprocess.run([sys.executable, "-I", "-m", "sotd.jobs.launch", spec], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_launch_binds_by_descriptor_with_the_filter_and_refuses_a_link(top: str) -> None:
    data = os.path.join(top, "data")
    os.mkdir(data, 0o755)
    with open(os.path.join(data, "f"), "w") as f:
        f.write("hello\n")
    os.chmod(os.path.join(data, "f"), 0o644)
    ok = _launch(top, data, ("sh", "-c", f"cat {data}/f; grep ^Seccomp: /proc/self/status"))
    assert (ok.returncode, ok.stdout) == (0, "hello\nSeccomp:\t2\n"), ok.stderr
    link = os.path.join(top, "link")
    os.symlink("/etc", link)
    bad = _launch(top, link, ("cat", "/etc/hostname"))
    assert bad.returncode == 126 and bad.stdout == ""
    assert bad.stderr == f"sotd.jobs.launch: the sandbox path {link} is a symlink: refused\n"


def test_claim_workspace_refuses_nesting_whatever_the_owner(top: str) -> None:
    """The node's record of workspaces refuses a workspace inside another run's, or holding one, even
    when that one is root-owned (a uid-0 sandbox's); a sibling is fine."""
    from sotd.jobs.claims import claim_workspace

    state = os.path.join(top, "state")
    claim_workspace(state, "a" * 64, "/srv/ocx/u/p/r/" + "a" * 64)
    claim_workspace(state, "b" * 64, "/srv/ocx/u/p/r/" + "b" * 64)
    with pytest.raises(Refused) as e:
        claim_workspace(state, "c" * 64, "/srv/ocx/u/p/r/" + "a" * 64 + "/nest")
    assert e.value.message == (
        f"the workspace /srv/ocx/u/p/r/{'a' * 64}/nest would lie inside, or hold, run {'a' * 12}'s workspace"
        f" /srv/ocx/u/p/r/{'a' * 64}"
    )
    with pytest.raises(Refused, match="would lie inside, or hold, run aaaaaaaaaaaa"):
        claim_workspace(state, "d" * 64, "/srv/ocx/u/p")
