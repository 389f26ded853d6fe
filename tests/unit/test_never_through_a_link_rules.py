"""The two rules of issue 25 problems 2 and 3 as tables: ``fsprim.open_nofollow`` (a link at the file or at
its folder is ``LinkedPath``, nothing else is) and ``runtime.level_fault`` (which level of the socket's
folder path may be trusted)."""

from __future__ import annotations

import os
import stat

import pytest

from sotd import fsprim, runtime

pytestmark = pytest.mark.unit

ME, OTHER, ROOT = 1000, 1001, 0
D, L, F = stat.S_IFDIR, stat.S_IFLNK, stat.S_IFREG


@pytest.mark.parametrize(
    ("mode", "owner", "last", "fault"),
    [
        (D | 0o755, ROOT, False, None),  # /
        (D | 0o1777, ROOT, False, None),  # /tmp: sticky
        (D | 0o777, ROOT, False, "other accounts can write in it (mode 0777)"),
        (L | 0o777, ROOT, False, None),  # /var/run -> /run: root's link, its real path checked too
        (L | 0o777, ME, False, "it is a symbolic link"),
        (L | 0o777, ROOT, True, "it is a symbolic link"),
        (D | 0o700, ME, False, None),
        (D | 0o755, ME, False, None),  # $HOME: readable, not writable by others
        (D | 0o775, ME, False, "other accounts can write in it (mode 0775)"),
        (D | 0o755, OTHER, False, "it belongs to uid 1001, not to this account (uid 1000)"),
        (D | 0o700, ME, True, None),
        (D | 0o750, ME, True, "it is open to group or other (mode 0750)"),
        (D | 0o700, OTHER, True, "it belongs to uid 1001, not to this account (uid 1000)"),
        (D | 0o700, ROOT, True, "it belongs to uid 0, not to this account (uid 1000)"),
        (F | 0o600, ME, True, "it is not a folder"),
    ],
)
def test_level_fault(mode: int, owner: int, last: bool, fault: str | None) -> None:
    assert runtime.level_fault(mode, owner, ME, socket_folder=last) == fault


def test_open_nofollow_refuses_a_link_at_the_file_or_its_folder(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_bytes(b"x")
    (tmp_path / "lf").symlink_to(real / "f")
    (tmp_path / "ld").symlink_to(real, target_is_directory=True)
    fd = fsprim.open_nofollow(str(real / "f"), os.O_RDONLY, real_folder=True)
    os.close(fd)
    with pytest.raises(fsprim.LinkedPath) as e:
        fsprim.open_nofollow(str(tmp_path / "lf"), os.O_RDWR | os.O_CREAT)
    assert e.value.filename == str(tmp_path / "lf")
    with pytest.raises(fsprim.LinkedPath) as e:
        fsprim.open_nofollow(str(tmp_path / "ld" / "f"), os.O_RDONLY, real_folder=True)
    assert e.value.filename == str(tmp_path / "ld")
    # without real_folder the folder is not judged (the comm folder itself may be a link)
    os.close(fsprim.open_nofollow(str(tmp_path / "ld" / "f"), os.O_RDONLY))
    with pytest.raises(FileNotFoundError):
        fsprim.open_nofollow(str(real / "missing"), os.O_RDONLY, real_folder=True)
    with pytest.raises(fsprim.LinkedPath):
        fsprim.write_atomic(str(tmp_path / "ld" / "g"), b"y", real_folder=True)
    assert not (real / "g").exists()
    assert (real / "f").read_bytes() == b"x"
