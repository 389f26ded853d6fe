"""Behaviour 1.1 and 1.13 through ``sotd comm context`` and the wrappers: the slot-name limit, the
unnameable slot, a relative ``SOT_COMM_HOME``, and a working folder that no longer resolves."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import SOTD, Comm, Result, clean_env
from tests.integration.cli_support import snapshot

pytestmark = pytest.mark.integration

SUFFIX = "__nopane.txt"  # 12 bytes after the host in a slot's leaf


def _env(comm: Comm, root: str, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, SOT_SELF_HOST="testhost", SOT_COMM_TEST_HOST="testhost", PWD=root)
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: str) -> Result:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60)
    return Result(p)


def _keys(r: Result) -> dict[str, str]:
    return dict(line.split("=", 1) for line in r.out_lines)


@pytest.fixture
def root(comm: Comm) -> str:
    p = os.path.join(comm.work, "proj")
    os.makedirs(p)
    return os.path.realpath(p)


@pytest.mark.parametrize("leaf_bytes", [252, 255])
def test_1_1_slot_leaf_within_the_file_name_limit(comm: Comm, root: str, leaf_bytes: int) -> None:
    host = "h" * (leaf_bytes - len(SUFFIX))
    env = _env(comm, root, SOT_SELF_HOST=host)
    r = _run([SOTD, "comm", "context"], env, root)
    assert (r.code, r.err) == (0, ""), r
    slot = os.path.join(comm.home, "self", host + SUFFIX)
    assert len(os.path.basename(slot).encode()) == leaf_bytes
    assert _keys(r)["SELF_FILE"] == slot


@pytest.mark.parametrize("leaf_bytes", [256, 257])
def test_1_1_slot_leaf_past_the_file_name_limit_is_refused(comm: Comm, root: str, leaf_bytes: int) -> None:
    host = "h" * (leaf_bytes - len(SUFFIX))
    env = _env(comm, root, SOT_SELF_HOST=host)
    before = snapshot(comm.home)
    r = _run([SOTD, "comm", "context"], env, root)
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        [f"comm-context: aborting before any write: no self slot can be named for host '{host}'"],
    ), r
    r = _run([os.path.join(comm.layout.bin_dir, "comm-join.sh"), "--name", "alpha"], env, root)
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        [f"comm-context: aborting before any write: no self slot can be named for host '{host}'"],
    ), r
    assert snapshot(comm.home) == before


# (the host, as the error line shows it: a CR is escaped, as every control that reaches a terminal is --
# docs/commands.md, "What reaches a terminal"; a tab stays inside an error's line)
@pytest.mark.parametrize(
    ("host", "shown"), [("a\\b", "a\\b"), ("tab\there", "tab\there"), ("cr\rhere", "cr\\u000dhere")]
)
def test_1_1_host_that_cannot_name_a_slot(comm: Comm, root: str, host: str, shown: str) -> None:
    before = snapshot(comm.home)
    p = subprocess.run(
        [SOTD, "comm", "context"],
        cwd=root,
        env=_env(comm, root, SOT_SELF_HOST=host),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (1, b""), p
    want = f"comm-context: aborting before any write: no self slot can be named for host '{shown}'\n"
    assert p.stderr == want.encode()
    assert snapshot(comm.home) == before


def test_1_1_pinned_self_file_needs_no_slot_name(comm: Comm, root: str) -> None:
    host = "h" * 300
    pinned = os.path.join(comm.home, "self", "pinned.txt")
    r = _run([SOTD, "comm", "context"], _env(comm, root, SOT_SELF_HOST=host, SOT_COMM_SELF_FILE=pinned), root)
    assert r.code == 0, r
    assert _keys(r)["SELF_FILE"] == pinned


# ----------------------------------------------------------------------------- relative SOT_COMM_HOME


def test_1_13_relative_comm_home_is_made_absolute(comm: Comm, root: str) -> None:
    env = _env(comm, root, SOT_COMM_HOME="rel/comm")
    r = _run([SOTD, "comm", "context"], env, root)
    assert r.code == 0, r
    home = os.path.join(root, "rel", "comm")
    keys = _keys(r)
    assert keys["COMM_HOME"] == home
    assert keys["REGISTRY"] == os.path.join(home, "registry.json")
    assert keys["INBOX_DIR"] == os.path.join(home, "inbox")
    assert keys["SELF_FILE"] == os.path.join(home, "self", "testhost__nopane.txt")
    r = _run([SOTD, "comm", "join", "--name", "alpha"], env, root)
    assert r.code == 0, r
    assert r.out_lines[1] == f"  inbox: {home}/inbox/alpha.jsonl"
    assert os.path.isfile(os.path.join(home, "registry.json"))


def test_1_13_relative_comm_home_follows_pwd_through_a_symlink(comm: Comm, root: str) -> None:
    link = os.path.join(comm.work, "link-to-proj")
    os.symlink(root, link)
    r = _run([SOTD, "comm", "context"], _env(comm, link, SOT_COMM_HOME="c"), link)
    assert r.code == 0, r
    assert _keys(r)["COMM_HOME"] == os.path.join(link, "c")


# ------------------------------------------------------------------------------ an unresolvable root


def test_1_1_deleted_working_folder_is_the_canonical_root_failure(comm: Comm) -> None:
    gone = os.path.join(os.path.realpath(comm.work), "gone")
    os.makedirs(gone)
    env = _env(comm, gone)
    before = snapshot(comm.home)
    r = _run(["/bin/sh", "-c", 'cd "$1" && rmdir "$1" && exec "$2" comm context', "sh", gone, SOTD], env, "/")
    assert (r.code, r.out) == (1, ""), r
    assert len(r.err_lines) == 2, r
    assert r.err_lines[0].startswith(f"sot_canonical_path: could not resolve a canonical path for '{gone}'")
    assert r.err_lines[1] == (
        f"comm-context: could not establish a canonical project root for '{gone}' — see the reason above; "
        "aborting rather than proceeding with an unknown identity"
    )
    assert snapshot(comm.home) == before
