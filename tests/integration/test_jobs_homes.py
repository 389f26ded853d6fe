"""``homes`` with real bubblewrap (ocx.md O7; docs/ocx.md "The HOME"): the entries are copied into
``$$workspace$$/home`` owned by the sandbox uid, and the process finds them at ``$HOME`` — the node sets
``HOME`` there when ``process.env`` does not, and a ``HOME`` the run sets itself wins."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.jobs import disk, nodepolicy, runner
from sotd.jobs.steps import Target
from tests.integration.test_jobs_limits import SC, DirCarrier

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists("/usr/bin/bwrap"), reason="needs root and bubblewrap"
    ),
]

SHOW = 'echo "HOME=${HOME-unset}"; cat "${HOME-/nonexistent}/.agentrc/conf" 2>&1; true'


@pytest.fixture
def lab() -> Iterator[tuple[runner.NodeSupplies, str]]:
    """A node whose policy brings ``<top>/admin/.agentrc`` (a 0700 folder of root's, like /root/.claude)."""
    top = f"/tmp/sotd-homes-{secrets.token_hex(4)}"
    os.mkdir(top, 0o755)
    src = os.path.join(top, "src")
    os.mkdir(src)
    entry = os.path.join(top, "admin", ".agentrc")
    os.makedirs(entry)
    os.chmod(os.path.dirname(entry), 0o700)
    with open(os.path.join(entry, "conf"), "w") as f:
        f.write("logged-in\n")
    os.mkdir(os.path.join(top, "root"), 0o755)
    policy = nodepolicy.parse_policy(
        {
            "users": ["build-user"], "uids": [1000], "gids": [1000],
            "read_only": ["/usr", "/etc/alternatives"], "read_write": ["$$workspace$$"],
            "homes": [entry], "limits": {"wall": "1h", "processes": 64},
        }
    )  # fmt: skip
    node = runner.NodeSupplies(root=os.path.join(top, "root"), policy=policy, carrier=DirCarrier(src),
                          state_dir=os.path.join(top, "state"))  # fmt: skip
    yield node, entry
    disk.release_below(top)
    shutil.rmtree(top, ignore_errors=True)


def _body(homes: list[str], process: dict[str, Any]) -> dict[str, Any]:
    """A run body for the lab's clone that brings ``homes``, with ``process`` as given."""
    return {
        "clone": SC, "objective": "test",
        "workspace": [{"step": "directory", "at": "$$root$$/$$process_user$$/projects/$$repository_name$$/$$run$$"}],
        "sandbox": {
            "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": False,
            "isolate_terminal": True, "ends_with_parent": True, "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
            "read_only": ["/usr", "/etc/alternatives"], "read_write": ["$$workspace$$"], "homes": homes,
            "created_files": [],
        },
        "limits": {"wall": 20},
        "process": process,
    }  # fmt: skip


def _run(node: runner.NodeSupplies, homes: list[str], env: dict[str, str]) -> tuple[runner.JobRun, str]:
    b = _body(homes, {"user": "build-user", "command": ["sh", "-c", SHOW], "env": env})
    raw = json.dumps({"ocx": 2, "to": "lab-user", "run": b}).encode()
    r = runner.JobRun(b, run_hash=hashlib.sha3_256(raw).hexdigest(), repository_name="proj",
                      target=Target("/nonexistent.fossil"), node=node, hash_name="sha3_256")  # fmt: skip
    started, ended = r.execute()
    assert started is not None, r.result
    assert ended.outcome == "exited" and ended.exit == 0, ended
    with open(ended.log_files["stdout"]) as f:
        return r, f.read()


def test_a_run_that_brings_homes_finds_them_at_home(lab: tuple[runner.NodeSupplies, str]) -> None:
    node, entry = lab
    r, out = _run(node, [entry], {"PATH": "/usr/bin:/bin"})
    ws = r.values["workspace"]
    assert out == f"HOME={ws}/home\nlogged-in\n"
    copy = os.path.join(ws, "home", ".agentrc", "conf")
    assert os.stat(copy).st_uid == 1000 and os.stat(os.path.join(ws, "home")).st_uid == 1000


def test_a_home_the_run_sets_itself_wins(lab: tuple[runner.NodeSupplies, str]) -> None:
    node, entry = lab
    r, out = _run(node, [entry], {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$"})
    ws = r.values["workspace"]
    assert out.splitlines()[0] == f"HOME={ws}"  # the run's HOME, though the copies are in $HOME/home
    assert os.path.isfile(os.path.join(ws, "home", ".agentrc", "conf"))


def test_without_homes_the_environment_is_exactly_process_env(lab: tuple[runner.NodeSupplies, str]) -> None:
    node, _ = lab
    r, out = _run(node, [], {"PATH": "/usr/bin:/bin"})
    assert out.splitlines()[0] == "HOME=unset"
    assert not os.path.exists(os.path.join(r.values["workspace"], "home"))


class OneRow:
    """A ``SessionHost`` that records the row it is asked to open and starts nothing: this test is about
    the preparation (tests/integration/test_ocx_sessions.py runs real rows)."""

    def __init__(self) -> None:
        self.opened: list[dict[str, object]] = []
        self.closed: list[str] = []

    def open(
        self, *, run_hash: str, label: str, root: str, argv: list[str], handle: str, before: list[str]
    ) -> str:
        self.opened.append({"argv": argv, "root": root, "handle": handle, "before": before})
        return "row-1"

    def phase(self, session_id: str) -> str:
        return "ended"

    def deliver(self, handle: str, sender: str, text: str) -> str | None:
        return "no mail here"

    def close(self, session_id: str) -> None:
        self.closed.append(session_id)


def test_a_session_run_is_prepared_with_the_same_home(lab: tuple[runner.NodeSupplies, str]) -> None:
    """A ``session: true`` run shares the preparation: the row's command (``RowLauncher``) runs
    ``sotd.jobs.launch`` on a launch spec whose argv sets HOME to the copies, inside the run's cgroups."""
    from dataclasses import replace

    from sotd.ocxrun import sessions

    node, entry = lab
    node = replace(node, policy=replace(node.policy, sessions=True))
    b = _body(
        [entry], {"user": "build-user", "command": ["sh"], "env": {"PATH": "/usr/bin:/bin"}, "session": True}
    )
    raw = json.dumps({"ocx": 2, "to": "lab-user", "run": b}).encode()
    h = hashlib.sha3_256(raw).hexdigest()
    host = OneRow()
    r = runner.JobRun(b, run_hash=h, repository_name="proj", target=Target("/nonexistent.fossil"), node=node,
                      hash_name="sha3_256", launcher=sessions.RowLauncher(host, h))  # fmt: skip
    try:
        assert r.start() is not None, r.result
        spec_path = os.path.join(r.dir, sessions.LAUNCH_SPEC)
        (opened,) = host.opened
        assert opened["argv"] == [sys.executable, "-I", "-m", "sotd.jobs.launch", spec_path]
        assert opened["handle"] == sessions.session_handle(h)
        assert r.cgroups is not None
        assert opened["before"] == [sessions.SH, "-c", sessions.JOIN_CGROUPS, "sotd-join",
                                    *r.cgroups.procs_files(), "--"]  # fmt: skip
        with open(spec_path) as f:
            argv = json.load(f)["argv"]
        ws = r.values["workspace"]
        at = argv.index("HOME")
        assert argv[at - 1 : at + 2] == ["--setenv", "HOME", f"{ws}/home"], argv
        r.launcher.kill()
        assert host.closed == ["row-1"]
    finally:
        if r.cgroups is not None:
            r.cgroups.remove()


class NoRows(OneRow):
    """A ``SessionHost`` whose rows cannot open (the daemon's tmux refused, say)."""

    def open(
        self, *, run_hash: str, label: str, root: str, argv: list[str], handle: str, before: list[str]
    ) -> str:
        from sotd.errors import SotdError

        raise SotdError("the rows manager is stopping")


def test_a_session_whose_row_cannot_open_ends_error_and_keeps_nothing(
    lab: tuple[runner.NodeSupplies, str],
) -> None:
    """``RowLauncher.start`` fails (``LaunchFailed``): the run ends ``error`` with the exact sentence, its
    cgroups are gone and its workspace claim is released."""
    from dataclasses import replace

    from sotd.jobs import claims
    from sotd.ocxrun import sessions

    node, entry = lab
    node = replace(node, policy=replace(node.policy, sessions=True))
    b = _body(
        [entry], {"user": "build-user", "command": ["sh"], "env": {"PATH": "/usr/bin:/bin"}, "session": True}
    )
    h = hashlib.sha3_256(json.dumps({"ocx": 2, "to": "lab-user", "run": b}).encode()).hexdigest()
    r = runner.JobRun(b, run_hash=h, repository_name="proj", target=Target("/nonexistent.fossil"), node=node,
                      hash_name="sha3_256", launcher=sessions.RowLauncher(NoRows(), h))  # fmt: skip
    assert r.start() is None
    assert r.result is not None
    assert r.result.body() == {
        "outcome": "error", "why": "the session's row could not start: the rows manager is stopping",
    }  # fmt: skip
    assert r.cgroups is not None and r.cgroups.dirs
    assert not any(os.path.exists(d) for d in r.cgroups.dirs.values())
    assert not os.path.exists(os.path.join(node.state_dir, claims.WORKSPACES, h))


class LinkCarrier(DirCarrier):
    """``export`` copies the source folder keeping its symlinks, as a check-in's tarball holds them."""

    def export(self, repo: str, ref: str, into: str, ids: tuple[int, int] | None = None) -> None:
        shutil.copytree(self.src, into, symlinks=True, dirs_exist_ok=True)


def test_a_link_a_check_in_put_at_home_is_refused_and_nothing_outside_changes(
    lab: tuple[runner.NodeSupplies, str],
) -> None:
    """Issue 24, in process: a ``files`` step extracts a check-in holding ``.agentrc`` as a link to a
    root-only 0700 folder (and ``.agentrc.json`` as a link to a root-owned 0644 file) into
    ``$$workspace$$/home``; the homes copy refuses each with the exact sentence, the targets keep their
    bytes, mode, owner and mtime, and a run without the planted link then works."""
    from dataclasses import replace

    from tests.ocx.runkit import HostSentinels

    node, entry = lab
    host = HostSentinels()
    try:
        src = os.path.join(os.path.dirname(os.path.dirname(entry)), "src")
        json_entry = os.path.join(os.path.dirname(entry), ".agentrc.json")
        with open(json_entry, "w") as f:
            f.write("{}\n")
        node = replace(node, carrier=LinkCarrier(src),
                       policy=replace(node.policy, homes=(entry, json_entry)))  # fmt: skip
        cases = {entry: (".agentrc", host.folder), json_entry: (".agentrc.json", host.file)}
        for home_entry, (name, target) in cases.items():
            for n in os.listdir(src):
                os.unlink(os.path.join(src, n))
            os.symlink(target, os.path.join(src, name))
            b = _body([home_entry], {"user": "build-user", "command": ["true"], "env": {}})
            b["workspace"].append({"step": "files", "of": "trunk", "into": "$$workspace$$/home"})
            raw = json.dumps({"ocx": 2, "to": "lab-user", "run": b, "n": name}).encode()
            r = runner.JobRun(b, run_hash=hashlib.sha3_256(raw).hexdigest(), repository_name="proj",
                              target=Target("/nonexistent.fossil"), node=node, hash_name="sha3_256")  # fmt: skip
            assert r.start() is None and r.result is not None
            at = os.path.join(node.root, "build-user/projects/proj", r.run_hash, "home", name)
            assert r.result.body() == {
                "outcome": "refused",
                "why": f"the home entry {home_entry} cannot be copied into the workspace: {at} is already"
                " there (a symlink, put there by a workspace step): refused",
            }
            host.check()
        for n in os.listdir(src):
            os.unlink(os.path.join(src, n))
        _, out = _run(node, [entry], {"PATH": "/usr/bin:/bin"})  # the benign control
        assert out.endswith("logged-in\n")
    finally:
        host.remove()


def test_a_home_folder_that_is_a_link_or_a_file_is_refused(tmp_path: str) -> None:
    """``WORKSPACE/home`` itself a link, or a file (a ``clone`` step's ``into``): refused, never followed."""
    from sotd.jobs.errors import Refused
    from sotd.jobs.steps import bring_homes
    from tests.ocx.runkit import HostSentinels

    host = HostSentinels()
    try:
        ws = os.path.join(str(tmp_path), "ws")
        os.mkdir(ws)
        entry = os.path.join(str(tmp_path), ".agentrc")
        os.mkdir(entry)
        os.symlink(host.folder, os.path.join(ws, "home"))
        with pytest.raises(Refused) as e:
            bring_homes((entry,), ws, 1000, 1000)
        assert e.value.message == f"the workspace's home {ws}/home is a symlink: refused"
        os.unlink(os.path.join(ws, "home"))
        with open(os.path.join(ws, "home"), "w") as f:
            f.write("a clone\n")
        with pytest.raises(Refused) as e:
            bring_homes((entry,), ws, 1000, 1000)
        assert (
            e.value.message == f"the workspace's home {ws}/home cannot be opened as a folder: Not a directory"
        )
        host.check()
    finally:
        host.remove()
