"""The no-follow primitives of ``sotd.jobs.paths`` (issue 24), one test each, on the real file system as
root: what root does in a folder a run or a check-in controls never follows a link placed there, never
writes into an entry it did not create, and never changes a file outside (bytes, mode, owner, mtime)."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections.abc import Iterator

import pytest

from sotd.jobs import paths
from sotd.jobs.errors import Refused

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (hands entries to uid 1000)"),
]


@pytest.fixture
def top() -> Iterator[str]:
    t = f"/tmp/sotd-nofollow-{secrets.token_hex(4)}"
    os.mkdir(t, 0o755)
    try:
        yield t
    finally:
        shutil.rmtree(t, ignore_errors=True)


def _held(path: str) -> int:
    return os.open(path, paths.DIR_FLAGS)


def _facts(path: str) -> tuple[int, int, int, int, bytes | None]:
    st = os.lstat(path)
    data = None
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            data = f.read()
    return st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, data


@pytest.fixture
def outside(top: str) -> Iterator[tuple[str, str]]:
    """A root-owned 0644 file and a root-only 0700 folder outside the held folder."""
    f = os.path.join(top, "victim")
    with open(f, "w") as fh:
        fh.write("root's bytes\n")
    os.chmod(f, 0o644)
    d = os.path.join(top, "rootonly")
    os.mkdir(d, 0o700)
    yield f, d


def test_entry_kind_at_names_what_is_there_without_following_it(top: str, outside: tuple[str, str]) -> None:
    f, d = outside
    ws = os.path.join(top, "ws")
    os.mkdir(ws)
    os.symlink(d, os.path.join(ws, "link"))
    os.symlink(os.path.join(d, "nothing"), os.path.join(ws, "dangling"))
    os.mkdir(os.path.join(ws, "dir"))
    shutil.copy(f, os.path.join(ws, "file"))
    os.mkfifo(os.path.join(ws, "fifo"))
    fd = _held(ws)
    try:
        got = {n: paths.entry_kind_at(fd, n) for n in ("link", "dangling", "dir", "file", "fifo", "none")}
    finally:
        os.close(fd)
    assert got == {"link": "a symlink", "dangling": "a symlink", "dir": "a folder", "file": "a file",
                   "fifo": "a special file", "none": None}  # fmt: skip


def test_make_dir_at_creates_new_sets_through_its_descriptor_and_never_follows(
    top: str, outside: tuple[str, str]
) -> None:
    _, d = outside
    ws = os.path.join(top, "ws")
    os.mkdir(ws)
    os.symlink(d, os.path.join(ws, "home"))
    before = _facts(d)
    fd = _held(ws)
    try:
        with pytest.raises(FileExistsError):
            paths.make_dir_at(fd, "home", 0o755, 1000, 1000)
        os.close(paths.make_dir_at(fd, "new", 0o750, 1000, 1000))
    finally:
        os.close(fd)
    assert _facts(d) == before and os.listdir(d) == []
    st = os.lstat(os.path.join(ws, "new"))
    assert (stat.S_ISDIR(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (
        True,
        0o750,
        1000,
        1000,
    )


def test_make_file_at_never_opens_what_is_there(top: str, outside: tuple[str, str]) -> None:
    f, d = outside
    ws = os.path.join(top, "ws")
    os.mkdir(ws)
    os.symlink(f, os.path.join(ws, "to-file"))
    os.symlink(os.path.join(d, "planted"), os.path.join(ws, "dangling"))
    before = _facts(f), _facts(d)
    fd = _held(ws)
    try:
        for name in ("to-file", "dangling"):
            with pytest.raises(FileExistsError):
                paths.make_file_at(fd, name, 0o644, 1000, 1000)
        os.close(paths.make_file_at(fd, "inbox", 0o640, 1000, 1000))
    finally:
        os.close(fd)
    assert (_facts(f), _facts(d)) == before and os.listdir(d) == []
    st = os.lstat(os.path.join(ws, "inbox"))
    assert (stat.S_ISREG(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_size) == (
        True,
        0o640,
        1000,
        0,
    )


def test_copy_in_at_copies_a_tree_as_new_entries_and_refuses_a_name_already_there(
    top: str, outside: tuple[str, str]
) -> None:
    f, d = outside
    src = os.path.join(top, "admin", ".agentrc")
    os.makedirs(os.path.join(src, "sub"))
    os.chmod(src, 0o700)
    with open(os.path.join(src, "sub", "conf"), "w") as fh:
        fh.write("conf\n")
    os.chmod(os.path.join(src, "sub", "conf"), 0o4640)  # a set-uid bit, dropped by the copy
    os.utime(os.path.join(src, "sub", "conf"), ns=(1_000_000_000, 2_000_000_000))
    os.symlink("sub/conf", os.path.join(src, "alias"))
    os.mkfifo(os.path.join(src, "fifo"))
    ws = os.path.join(top, "ws")
    os.mkdir(ws)
    fd = _held(ws)
    try:
        assert paths.copy_in_at(src, fd, 1000, 1000, "the home entry") == ".agentrc"
        with pytest.raises(FileExistsError):  # nothing already there is written into
            paths.copy_in_at(src, fd, 1000, 1000, "the home entry")
        os.symlink(d, os.path.join(top, "admin", "linked"))
        with pytest.raises(Refused) as e:  # a source that is a link is not followed either
            paths.copy_in_at(os.path.join(top, "admin", "linked"), fd, 1000, 1000, "the home entry")
        assert e.value.message == f"the home entry {top}/admin/linked is a symlink: refused"
    finally:
        os.close(fd)
    copy = os.path.join(ws, ".agentrc")
    conf = os.lstat(os.path.join(copy, "sub", "conf"))
    assert (stat.S_IMODE(conf.st_mode), conf.st_uid, conf.st_gid, conf.st_mtime_ns) == (
        0o640,
        1000,
        1000,
        2_000_000_000,
    )
    assert (
        os.readlink(os.path.join(copy, "alias")) == "sub/conf"
        and os.lstat(os.path.join(copy, "alias")).st_uid == 1000
    )
    assert stat.S_IMODE(os.lstat(copy).st_mode) == 0o700 and os.lstat(copy).st_uid == 1000
    assert sorted(os.listdir(copy)) == ["alias", "sub"]  # the FIFO is not copied
    assert os.listdir(d) == [] and _facts(f)[4] == b"root's bytes\n"


def test_chown_tree_fd_never_follows_and_refuses_a_foreign_hard_link(
    top: str, outside: tuple[str, str]
) -> None:
    f, d = outside
    ws = os.path.join(top, "ws")
    os.makedirs(os.path.join(ws, "a"))
    os.symlink(d, os.path.join(ws, "a", "to-dir"))
    os.symlink(f, os.path.join(ws, "to-file"))
    before = _facts(f), _facts(d)
    paths.chown_tree_fd(ws, 1000, 1000, "the workspace")
    assert (_facts(f), _facts(d)) == before  # the link targets keep root as owner
    assert {os.lstat(os.path.join(ws, p)).st_uid for p in ("", "a", "a/to-dir", "to-file")} == {1000}
    os.link(f, os.path.join(ws, "a", "hard"))  # root's file, linked in (another uid's would be the case)
    with pytest.raises(Refused) as e:
        paths.chown_tree_fd(ws, 1000, 1000, "the workspace")
    assert e.value.message == (
        f"the workspace: {ws}/a/hard has 2 hard links and belongs to uid 0: the node does not hand it to"
        " uid 1000: refused"
    )
    assert _facts(f) == before[0]
