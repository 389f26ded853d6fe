"""Issue 14, through the real ``sotd comm`` verbs: behaviours where sotd differed from 0.6.6 / the contract.

- 6.7: a self file whose ``repo=`` disagrees with the project it is read in names nobody, even when its
  ``root=`` agrees.
- 6.6: a hashed cursor one line past the end is the end, and the reader is told its last line was cut back.
"""

from __future__ import annotations

import os

import pytest

from sotd.formats import cursor
from tests.conftest import Comm

pytestmark = pytest.mark.integration


def _put(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_6_7_self_file_with_another_repo_names_nobody(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    good = f"alpha\nrepo=alpha\nroot={a.root}\n".encode()
    assert _read(a.self_file) == good
    assert a.run("context").out_lines[5] == "NAME=alpha"
    bad = f"alpha\nrepo=elsewhere\nroot={a.root}\n".encode()  # root= agrees, repo= does not
    _put(a.self_file, bad)
    ctx = a.run("context")
    assert (ctx.code, ctx.out_lines[4:6]) == (0, [f"PROJECT_ROOT={a.root}", "NAME="]), ctx
    p = a.run("poll")
    assert (p.code, p.out, p.err) == (1, "", "Not joined — run comm-join.sh first.\n")
    assert _read(a.self_file) == bad  # discarded for reading, never rewritten by a reader


def test_6_6_hashed_cursor_one_past_the_end_says_cut_back(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    inbox = comm.layout.inbox("alpha")
    _put(
        inbox,
        b'{"from":"b","to":"alpha","repo":"r","msg":"one","ts":"T1"}\n{"from":"b","to":"alpha","repo":"r","msg":"two","ts":"T2"}\n',
    )
    _put(comm.layout.cursor("alpha"), b"3 1-1")  # line 3 was counted, then cut back by a failed append
    p = a.run("poll")
    note = "note: the last line read from @alpha's inbox was cut back; reading from the line before it"
    assert (p.code, p.out, p.err) == (0, "No new messages.\n", note + "\n"), p
    lines = _read(inbox).split(b"\n")[:-1]
    assert _read(comm.layout.cursor("alpha")).decode() == cursor.encode(2, lines[1])
    again = a.run("poll")
    assert (again.out, again.err) == ("No new messages.\n", "")  # said once: the cursor is right now
