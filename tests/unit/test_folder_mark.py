"""``lockmanager.folder_mark`` and ``same_folder``: how ``sotd doctor`` tells whether a far box's daemon
serves this comm folder (docs/doctor.md, "the same comm folder or not")."""

from __future__ import annotations

import os

import pytest

from sotd.formats import lockmanager
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("mine", "theirs", "verdict"),
    [
        ("5:7:local m|m", "5:7:local m|m", lockmanager.SAME),
        ("5:7:local m|m", "6:7:local m|m", lockmanager.OTHER),  # another record file
        ("5:7:local m|m", "", lockmanager.OTHER),  # a shared folder's record is in every box's view
        ("", "5:7:local m|m", lockmanager.OTHER),
        ("", "", lockmanager.UNKNOWN),
    ],
)
def test_same_folder(mine: str, theirs: str, verdict: str) -> None:
    assert lockmanager.same_folder(mine, theirs) == verdict


def _layout(home: str) -> Layout:
    os.makedirs(home, mode=0o700)
    return Layout.from_env({"SOT_COMM_HOME": home})


def test_two_folders_with_equal_records_have_other_marks(tmp_path: object) -> None:
    a, b = _layout(os.path.join(str(tmp_path), "a")), _layout(os.path.join(str(tmp_path), "b"))
    assert lockmanager.folder_mark(a) == ""  # no record yet
    for lay in (a, b):
        with open(lay.lock_manager, "wb") as f:
            f.write(lockmanager.encode_record("local m1", "m1"))
    mark = lockmanager.folder_mark(a)
    assert mark.endswith(":local m1|m1") and mark == lockmanager.folder_mark(a)
    assert lockmanager.same_folder(mark, lockmanager.folder_mark(b)) == lockmanager.OTHER
    # one folder read through another path (as a second box mounting it would): the same mark
    alias = os.path.join(str(tmp_path), "alias")
    os.symlink(a.home, alias)
    assert lockmanager.folder_mark(Layout.from_env({"SOT_COMM_HOME": alias})) == mark
