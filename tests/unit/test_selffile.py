"""Behaviour 6.7: the self file (format, read validation, whole-file write, the slot guard)."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd import fsprim
from sotd.errors import HandleError, SelfFileError
from sotd.formats import selffile

pytestmark = pytest.mark.unit

ROOT = "/home/u/proj"


@pytest.fixture
def path(tmp_path: object) -> str:
    return os.path.join(str(tmp_path), "box__ws-1.txt")


def put(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_6_7_format_three_lines() -> None:
    assert selffile.format_record("proj-box", "proj", ROOT) == b"proj-box\nrepo=proj\nroot=/home/u/proj\n"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"proj-box\nrepo=proj\nroot=/home/u/proj\n", "proj-box"),
        (b"proj-box\nrepo=proj\nroot=/home/u/proj", "proj-box"),  # last newline missing: still the lines
        (b"proj-box\nrepo=proj\nroot=\n", None),  # empty root=
        (b"proj-box\nrepo=proj\nroot=/home/u/other\n", None),  # wrong root
        (b"proj-box\nrepo=proj\nnotroot=/home/u/proj\n", None),  # third line not root=
        (b"proj-box\nrepo=proj\n", None),  # no root= names nobody [0.7.0]
        (b"proj-box\n", None),  # legacy one-liner names nobody
        (b"", None),
        (b"-bad\nrepo=proj\nroot=/home/u/proj\n", None),  # invalid handle
        (b"a..b\nrepo=proj\nroot=/home/u/proj\n", None),
        (b"\nrepo=proj\nroot=/home/u/proj\n", None),
        (b"proj-box\nroot=/home/u/proj\nrepo=proj\n", None),  # lines out of order
        (b"proj-box\nrepo=proj\nroot=/home/u/proj\nextra\n", None),
        (b"proj-box\nrepo=proj\nroot=/home/u/proj/\n", None),  # not equal
    ],
)
def test_6_7_read_handle_validation(path: str, data: bytes, want: str | None) -> None:
    put(path, data)
    assert selffile.read_handle(path, ROOT) == want


def test_6_7_read_handle_missing_file(path: str) -> None:
    assert selffile.read_handle(path, ROOT) is None


def test_6_7_mismatched_repo_discarded(path: str) -> None:
    put(path, b"proj-box\nrepo=other\nroot=/home/u/proj\n")
    assert selffile.read_handle(path, ROOT, repo="proj") is None
    assert selffile.read_handle(path, ROOT, repo="other") == "proj-box"


def test_6_7_write_then_read(path: str) -> None:
    selffile.write(path, "proj-box", "proj", ROOT)
    with open(path, "rb") as f:
        assert f.read() == b"proj-box\nrepo=proj\nroot=/home/u/proj\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert selffile.read_handle(path, ROOT) == "proj-box"
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]


def test_6_7_write_replaces_whole_new_inode(path: str) -> None:
    put(path, b"old-box\nrepo=old\nroot=/old\n" + b"x" * 1000)
    ino = os.stat(path).st_ino
    selffile.write(path, "proj-box", "proj", ROOT)
    assert os.stat(path).st_ino != ino
    with open(path, "rb") as f:
        assert f.read() == b"proj-box\nrepo=proj\nroot=/home/u/proj\n"


def test_6_7_write_refuses_invalid_handle(path: str) -> None:
    with pytest.raises(HandleError):
        selffile.write(path, "-x", "proj", ROOT)
    assert not os.path.exists(path)


def test_6_7_write_refuses_line_break_in_root(path: str) -> None:
    with pytest.raises(SelfFileError):
        selffile.write(path, "proj-box", "proj", "/a\nroot=/b")
    assert not os.path.exists(path)


@pytest.mark.parametrize("step", ["_fsync", "_rename"])
def test_6_7_write_failure_temp_removed_original_untouched(
    path: str, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    put(path, b"old-box\nrepo=old\nroot=/old\n")
    ino = os.stat(path).st_ino

    def bad(*a: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsprim, step, bad)
    with pytest.raises(SelfFileError) as ei:
        selffile.write(path, "proj-box", "proj", ROOT)
    assert "No space left on device" in ei.value.message
    with open(path, "rb") as f:
        assert f.read() == b"old-box\nrepo=old\nroot=/old\n"
    assert os.stat(path).st_ino == ino
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]


def test_6_7_write_uses_tmp_xxxxxx_name(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = fsprim._rename

    def spy(src: str, dst: str) -> None:
        seen.append(src)
        real(src, dst)

    monkeypatch.setattr(fsprim, "_rename", spy)
    selffile.write(path, "proj-box", "proj", ROOT)
    assert len(seen) == 1 and seen[0].startswith(path + ".tmp.") and len(seen[0]) == len(path) + 11


@pytest.mark.parametrize(
    ("data", "refused_for"),
    [
        (None, None),  # empty slot
        (b"proj-box\nrepo=proj\nroot=/home/u/proj\n", None),  # same project
        (b"other-box\nrepo=other\nroot=/home/u/other\n", "root='/home/u/other'"),
        (b"other-box\nrepo=proj\nroot=\n", "root=''"),
        (b"other-box\nrepo=other\n", "repo='other'"),  # legacy: repo= decides
        (b"proj-box\nrepo=proj\n", None),
        (b"other-box\n", None),  # names no project at all
        (b"-bad\nrepo=x\nroot=/x\n", None),  # names no handle
        (b"garbage\ngarbage\ngarbage\n", None),
    ],
)
def test_6_7_guard(path: str, data: bytes | None, refused_for: str | None) -> None:
    if data is not None:
        put(path, data)
    got = selffile.guard(path, "proj", ROOT)
    if refused_for is None:
        assert got is None
    else:
        assert got is not None
        handle = data.split(b"\n")[0].decode() if data else ""
        assert got.startswith(
            f"the identity slot '{path}' already names @{handle}, claimed for {refused_for}"
        )
        assert "REFUSING to write" in got


def test_6_7_guard_exempt_nopane_or_repin(path: str) -> None:
    put(path, b"other-box\nrepo=other\nroot=/home/u/other\n")
    assert selffile.guard(path, "proj", ROOT, exempt=True) is None


@pytest.mark.parametrize(
    ("leaf", "want"), [("box__nopane.txt", True), ("box__ws-1.txt", False), ("nopane.txt", False)]
)
def test_6_7_nopane_slot(leaf: str, want: bool) -> None:
    assert selffile.slot_is_nopane("/c/self/" + leaf) is want


# ----------------------------------------------------------------------------------------- properties

_handles = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", fullmatch=True).filter(lambda h: ".." not in h)
# repo= and root= hold any text but a line break; a root worth naming is not empty
_field = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=120)


@given(_handles, _field, _field)
def test_6_7_format_parse_roundtrip(handle: str, repo: str, root: str) -> None:
    rec = selffile.parse(selffile.format_record(handle, repo, root))
    assert rec is not None
    assert (rec.handle, rec.repo, rec.root) == (handle, repo, root)


@settings(deadline=None)
@given(_handles, _field, _field.filter(bool))
def test_6_7_write_read_roundtrip(handle: str, repo: str, root: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "box__ws.txt")
        selffile.write(path, handle, repo, root)
        assert selffile.read_handle(path, root) == handle
        assert selffile.read_handle(path, root, repo=repo) == handle
        assert selffile.read_handle(path, root + "/x") is None
        assert selffile.guard(path, repo, root) is None  # the same project may always write its slot
        assert os.listdir(d) == ["box__ws.txt"]


@given(st.binary(max_size=300))
def test_6_7_any_bytes_parse_or_none_never_raise(data: bytes) -> None:
    rec = selffile.parse(data)
    assert rec is None or isinstance(rec.handle, str)


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_6_7_any_bytes_in_a_slot_name_a_valid_handle_or_nobody(data: bytes) -> None:
    import tempfile

    from sotd.handles import is_valid

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "box__ws.txt")
        put(path, data)
        got = selffile.read_handle(path, ROOT)
        assert got is None or (is_valid(got) and data.startswith(got.encode()))
        refusal = selffile.guard(path, "proj", ROOT)
        assert refusal is None or refusal.startswith(f"the identity slot '{path}' already names @")
