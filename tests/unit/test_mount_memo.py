"""``ops.MountMemo``: the lock identity of a folder from a memo while no mount changed (issue 27's scale),
the same answer as ``lockmanager.lock_manager_of``; a mount change (``POLLPRI`` on ``mountinfo``) computes
it again. The remount itself is exercised by the serial tiers that remount (NFS); here the memo's rule."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from sotd.daemon import ops
from sotd.formats import lockmanager

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")]


def test_the_memo_answers_as_the_mount_table_does(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOT_COMM_TEST_LOCK_IDENTITY", raising=False)
    memo = ops.MountMemo()
    want = (lockmanager.lock_manager_of(str(tmp_path)), lockmanager.machine_id_or_none())
    assert memo.identity(str(tmp_path)) == want
    calls: list[str] = []
    real = lockmanager.lock_manager_of

    def counted(folder: str) -> str:
        calls.append(folder)
        return real(folder)

    monkeypatch.setattr(lockmanager, "lock_manager_of", counted)
    for _ in range(5):
        assert memo.identity(str(tmp_path)) == want
    assert calls == []  # no mount changed: no parse
    other = tmp_path / "sub"
    other.mkdir()
    assert memo.identity(str(other)) == want  # another folder: computed once, then kept
    assert memo.identity(str(other)) == want
    assert calls == [str(other)]


def test_the_test_seam_is_never_memoised(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    memo = ops.MountMemo()
    monkeypatch.setenv("SOT_COMM_TEST_LOCK_IDENTITY", "none@other")
    assert memo.identity(str(tmp_path))[0] == "none@other"
    monkeypatch.setenv("SOT_COMM_TEST_LOCK_IDENTITY", "nfs4 srv:/x")
    assert memo.identity(str(tmp_path))[0] == "nfs4 srv:/x"
    assert memo.fd is None and os.path.isdir(str(tmp_path))
