"""``selffile.write_guarded``: the join's self-file write that runs the slot guard again before its rename."""

from __future__ import annotations

import os

import pytest

from sotd import fsprim
from sotd.errors import EXIT_SLOT_REFUSED, SelfFileError, SlotClaimed
from sotd.formats import selffile

pytestmark = pytest.mark.unit

ROOT = "/home/u/proj"


@pytest.fixture
def path(tmp_path: object) -> str:
    return os.path.join(str(tmp_path), "box__ws-1.txt")


def _leftovers(path: str) -> list[str]:
    return [n for n in os.listdir(os.path.dirname(path)) if ".tmp." in n]


def test_writes_an_empty_slot_and_one_of_the_same_project(path: str) -> None:
    selffile.write_guarded(path, "proj-box", "proj", ROOT)
    assert selffile.read_handle(path, ROOT) == "proj-box"
    selffile.write_guarded(path, "proj-2", "proj", ROOT)  # same root: last writer wins
    assert selffile.read_handle(path, ROOT) == "proj-2"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert _leftovers(path) == []


def test_a_claim_that_lands_after_the_temp_was_written_is_kept(path: str, monkeypatch) -> None:
    claim = b"other\nrepo=other\nroot=/srv/other\n"
    real = fsprim.write_all

    def write_then_claim(fd: int, data: bytes) -> None:
        real(fd, data)
        with open(path, "wb") as f:  # another session claims the slot while the join is writing
            f.write(claim)

    monkeypatch.setattr(fsprim, "write_all", write_then_claim)
    with pytest.raises(SlotClaimed) as ei:
        selffile.write_guarded(path, "proj-box", "proj", ROOT)
    assert ei.value.code == "slot_claimed"
    assert ei.value.exit_status == EXIT_SLOT_REFUSED == 3
    assert ei.value.message.startswith(
        f"the identity slot '{path}' already names @other, claimed for root='/srv/other'"
    )
    with open(path, "rb") as f:
        assert f.read() == claim
    assert _leftovers(path) == []


def test_an_unwritable_folder_is_an_ordinary_self_file_error(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "missing", "box__ws-1.txt")
    with pytest.raises(SelfFileError) as ei:
        selffile.write_guarded(path, "proj-box", "proj", ROOT)
    assert ei.value.code == "self_file" and ei.value.exit_status == 1
    assert ei.value.message.startswith(f"could not write the self file '{path}': ")
