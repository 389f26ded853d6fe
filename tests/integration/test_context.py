"""Behaviour 1.1: the context keys, the project root, and the legacy self-slot migration."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import SOTD, Comm, clean_env

pytestmark = pytest.mark.integration


def _env(comm: Comm, root: str, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, SOT_SELF_HOST="testhost", SOT_COMM_TEST_HOST="TestHost", PWD=root)
    env.update(extra)
    return env


def _context(env: dict[str, str], cwd: str) -> dict[str, str]:
    p = subprocess.run(
        [SOTD, "comm", "context"], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


def test_1_1_keys_in_order_and_empty_values(comm: Comm, tmp_path: object) -> None:
    root = os.path.join(comm.work, "proj")
    os.makedirs(root)
    env = _env(comm, root)
    p = subprocess.run(
        [SOTD, "comm", "context"], cwd=root, env=env, capture_output=True, text=True, check=True
    )
    keys = [line.split("=", 1)[0] for line in p.stdout.splitlines()]
    assert keys == [
        "HOST", "HANDLE_HOST", "WORKSPACE_ID", "REPO", "PROJECT_ROOT", "NAME",
        "SELF_FILE", "COMM_HOME", "REGISTRY", "INBOX_DIR", "READ_DIR",
    ]  # fmt: skip
    ctx = _context(env, root)
    assert ctx["HOST"] == "testhost"
    assert ctx["HANDLE_HOST"] == "TestHost"
    assert ctx["WORKSPACE_ID"] == "" and ctx["NAME"] == ""
    assert ctx["SELF_FILE"] == os.path.join(comm.home, "self", "testhost__nopane.txt")


def test_1_1_project_root_is_the_git_work_tree(comm: Comm) -> None:
    root = os.path.join(comm.work, "My Repo")
    sub = os.path.join(root, "src", "deep")
    os.makedirs(sub)
    subprocess.run(["git", "init", "--quiet", root], check=True, timeout=30)
    ctx = _context(_env(comm, sub), sub)
    assert ctx["REPO"] == "'My Repo'"
    assert ctx["PROJECT_ROOT"] == f"'{os.path.realpath(root)}'"


def test_1_1_row_slot_made_safe(comm: Comm) -> None:
    # A row's slot is named from the row id with unsafe bytes made _ (a row needs its capsule to run a
    # command, so this is checked on the layout the context uses).
    assert comm.layout.self_file("testhost", "ws/1 x") == os.path.join(
        comm.home, "self", "testhost__ws_1_x.txt"
    )


def test_1_1_unnameable_slot_refused_before_any_write(comm: Comm) -> None:
    root = os.path.join(comm.work, "p")
    os.makedirs(root)
    env = _env(comm, root, SOT_SELF_HOST="a/b")
    p = subprocess.run(
        [SOTD, "comm", "context"], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    assert p.returncode == 1
    assert p.stderr == "comm-context: aborting before any write: no self slot can be named for host 'a/b'\n"


def _join_row(comm: Comm, handle: str, root: str) -> None:
    doc = {
        "protocol_version": 1,
        "agents": {
            handle: {"host": "testhost", "workspace_id": "", "repo": os.path.basename(root), "root": root,
                     "expertise": [], "status": "idle", "joined": "2026-01-01T00:00:00Z",
                     "last_seen": "2026-01-01T00:00:00Z"},
        },
    }  # fmt: skip
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")


def _write_slot(path: str, handle: str, repo: str, root: str) -> None:
    with open(path, "w") as f:
        f.write(f"{handle}\nrepo={repo}\nroot={root}\n")


def test_1_1_legacy_raw_host_slot_migrates_when_the_row_proves_it(comm: Comm) -> None:
    root = os.path.realpath(os.path.join(comm.work, "proj"))
    os.makedirs(root)
    legacy = os.path.join(comm.home, "self", "TestHost__nopane.txt")
    _write_slot(legacy, "proj-x", "proj", root)
    _join_row(comm, "proj-x", root)
    ctx = _context(_env(comm, root), root)
    assert ctx["NAME"] == "proj-x"
    assert not os.path.exists(legacy)
    with open(os.path.join(comm.home, "self", "testhost__nopane.txt")) as f:
        assert f.read() == f"proj-x\nrepo=proj\nroot={root}\n"


def test_1_1_legacy_slot_stays_when_the_row_does_not_prove_it(comm: Comm) -> None:
    root = os.path.realpath(os.path.join(comm.work, "proj"))
    os.makedirs(root)
    legacy = os.path.join(comm.home, "self", "TestHost__nopane.txt")
    _write_slot(legacy, "proj-x", "proj", root)
    _join_row(comm, "proj-x", "/another/root")
    ctx = _context(_env(comm, root), root)
    assert ctx["NAME"] == ""
    assert os.path.exists(legacy)
    assert not os.path.exists(os.path.join(comm.home, "self", "testhost__nopane.txt"))


def test_1_1_legacy_slot_never_overwrites_a_populated_slot(comm: Comm) -> None:
    root = os.path.realpath(os.path.join(comm.work, "proj"))
    os.makedirs(root)
    legacy = os.path.join(comm.home, "self", "TestHost__nopane.txt")
    canonical = os.path.join(comm.home, "self", "testhost__nopane.txt")
    _write_slot(legacy, "proj-x", "proj", root)
    _write_slot(canonical, "proj-y", "proj", root)
    _join_row(comm, "proj-x", root)
    ctx = _context(_env(comm, root), root)
    assert ctx["NAME"] == "proj-y"
    assert os.path.exists(legacy)
