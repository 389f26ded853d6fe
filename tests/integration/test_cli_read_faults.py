"""Behaviour 1.5, 1.6, 6.5 and decision D1 through the commands: a read lock held by another process, other
read faults, and a poll with no inbox file."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import Comm, Session
from tests.integration.cli_support import edit_row, inbox_lock_held, registry, snapshot, stamp

pytestmark = pytest.mark.integration

FAST = {"SOT_INBOX_READ_WAIT_SECS": "1"}


@pytest.fixture
def two(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    assert b.run("send", "@alpha", "waiting mail").code == 0
    return comm, a, b


def test_1_5_poll_with_the_read_lock_held_exits_75_and_reads_nothing(two) -> None:
    comm, a, _ = two
    with inbox_lock_held(comm, "alpha"):
        before = snapshot(comm.home)
        r = a.run("poll", env=FAST)
        after = snapshot(comm.home)
    assert (r.code, r.err, r.out_lines) == (
        75,
        "",
        ["the inbox for @alpha is being written — nothing was read; run comm-poll.sh again"],
    ), r
    assert after == before  # no cursor, no hint, no touch
    r = a.run("poll")
    assert r.code == 0 and r.out_lines[0].endswith("[beta:beta] waiting mail"), r


def test_1_5_default_read_bound_is_3s(two) -> None:
    import time

    comm, a, _ = two
    with inbox_lock_held(comm, "alpha"):
        t0 = time.monotonic()
        r = a.run("poll")
        took = time.monotonic() - t0
    assert r.code == 75, r
    assert took >= 3.0, took


def test_d1_unread_with_the_read_lock_held_prints_nothing_exit_75(two) -> None:
    comm, a, _ = two
    with inbox_lock_held(comm, "alpha"):
        before = snapshot(comm.home)
        r = a.run("unread", "alpha", env=FAST)
        after = snapshot(comm.home)
    assert (r.code, r.out) == (75, ""), r
    assert r.err_lines == ["the inbox for @alpha is being written — nothing was counted; ask again"]
    assert after == before
    r = a.run("unread", "alpha")
    assert (r.code, r.out) == (0, "1\n"), r


def test_d1_unread_other_fault_exit_1_never_a_zero(two) -> None:
    comm, a, _ = two
    path = comm.layout.inbox("alpha")
    os.unlink(path)
    os.mkdir(path)  # an inbox that cannot be read
    r = a.run("unread", "alpha")
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == ["the inbox for @alpha could not be read: Is a directory"]
    r = a.run("poll")
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == ["the inbox for @alpha could not be read: Is a directory"]


def test_d1_unread_usage_faults_exit_1(two) -> None:
    _, a, _ = two
    r = a.run("unread", "alpha", "beta")
    assert (r.code, r.out, r.err_lines) == (1, "", ["usage: sotd comm unread [HANDLE]"]), r
    r = a.run("unread", "../x")
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == [
        "invalid handle '../x': a handle is 1-64 bytes of A-Za-z0-9._-, with no '..' and no leading '-'"
    ]


def test_d1_unread_without_a_handle_counts_its_own(two) -> None:
    _, a, _ = two
    r = a.run("unread")
    assert (r.code, r.out, r.err) == (0, "1\n", ""), r


def test_1_5_poll_with_no_inbox_file(two) -> None:
    comm, a, _ = two
    os.unlink(comm.layout.inbox("alpha"))
    edit_row(comm, "alpha", last_seen=stamp(300))
    r = a.run("poll")
    assert (r.code, r.out_lines, r.err) == (0, ["No messages."], ""), r
    assert registry(comm)["agents"]["alpha"]["last_seen"] >= stamp(30)  # touched
    assert not os.path.exists(comm.layout.cursor("alpha"))
    assert not os.path.exists(comm.layout.inbox("alpha"))


def test_1_6_unread_with_no_inbox_file_is_zero(two) -> None:
    comm, a, _ = two
    os.unlink(comm.layout.inbox("alpha"))
    r = a.run("unread", "alpha")
    assert (r.code, r.out, r.err) == (0, "0\n", ""), r


def test_1_5_poll_with_no_inbox_folder_at_all(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    shutil.rmtree(comm.layout.inbox_dir)
    r = a.run("poll")
    assert (r.code, r.out_lines) == (0, ["No messages."]), r
