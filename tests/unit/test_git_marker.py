"""Which ``.git`` entries make a folder the project root (behaviour 1.1: ``git rev-parse --show-toplevel``).

``sotd.cli.comm.common.is_git_marker`` and ``raw_root``: a repository folder or a ``gitdir:`` pointer to
one counts; an empty folder (what Codex's sandbox mounts at each writable root's ``.git`` while a command
runs: the real-agent tier's Codex made ``/tmp/.git`` for seconds, and a send under ``/tmp`` took the
project to be ``tmp``), a stray file, a FIFO, a device, another user's repository or a dangling pointer
does not, and the walk goes on past it as git's
does.
"""

from __future__ import annotations

import os

import pytest

from sotd.cli.comm.common import is_git_marker, raw_root

pytestmark = pytest.mark.unit


def _repo(path: str) -> None:
    os.makedirs(os.path.join(path, "objects"))
    os.makedirs(os.path.join(path, "refs"))
    with open(os.path.join(path, "HEAD"), "w") as f:
        f.write("ref: refs/heads/main\n")


def _file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


CASES = [
    ("a repository folder", _repo, True),
    ("an empty folder (Codex's sandbox mount point)", os.mkdir, False),
    ("a folder with HEAD alone", lambda g: (os.mkdir(g), _file(os.path.join(g, "HEAD"), "x\n")), False),
    (
        "a gitdir pointer to a repository",
        lambda g: (_repo(g + "-real"), _file(g, f"gitdir: {g}-real\n")),
        True,
    ),
    ("a relative gitdir pointer", lambda g: (_repo(g + "-real"), _file(g, "gitdir: .git-real\n")), True),
    ("a dangling gitdir pointer", lambda g: _file(g, "gitdir: /nonexistent/x\n"), False),
    ("an empty gitdir pointer", lambda g: _file(g, "gitdir: \n"), False),
    ("a file of something else", lambda g: _file(g, "hello\n"), False),
    ("a FIFO (never opened: a read would block)", os.mkfifo, False),
    ("a symlink to a character device", lambda g: os.symlink("/dev/zero", g), False),
    ("nothing there", lambda g: None, False),
]


@pytest.mark.parametrize(("what", "make", "counts"), CASES, ids=[c[0] for c in CASES])
def test_is_git_marker(tmp_path: object, what: str, make, counts: bool) -> None:
    marker = os.path.join(str(tmp_path), ".git")
    make(marker)
    assert is_git_marker(marker) is counts, what


def test_another_users_repository_is_not_this_projects_root(tmp_path: object) -> None:
    # anyone may plant a .git in /tmp: git (2.35.2 on) refuses a repository another user owns, and so do we
    marker = os.path.join(str(tmp_path), ".git")
    _repo(marker)
    assert is_git_marker(marker)
    if os.geteuid() != 0:
        pytest.skip("giving the folder to another user needs root (CI runs as root)")
    os.chown(marker, 65534, 65534)
    assert not is_git_marker(marker)
    here = os.path.join(str(tmp_path), "work")
    os.makedirs(here)
    assert raw_root(here) == here


def test_raw_root_walks_past_an_empty_git_folder_to_the_checkout_above(tmp_path: object) -> None:
    top = os.path.join(str(tmp_path), "checkout")
    _repo(os.path.join(top, ".git"))
    mid = os.path.join(top, "work")
    os.makedirs(os.path.join(mid, ".git"))  # a sandbox's mount point, empty
    deep = os.path.join(mid, "src")
    os.makedirs(deep)
    assert raw_root(deep) == top


def test_raw_root_is_the_folder_itself_when_only_empty_git_folders_are_above(tmp_path: object) -> None:
    os.makedirs(os.path.join(str(tmp_path), ".git"))
    here = os.path.join(str(tmp_path), "a", "b")
    os.makedirs(here)
    assert raw_root(here) == here
