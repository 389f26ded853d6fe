"""``formats.unread.Counter`` (issue 30: the counts ``agents.list`` gives and ``sotd web`` shows) against the
real commands: each count is the number ``sotd comm unread <h>`` prints at that moment, through sends,
a poll and a cursor another reader moved; a read lock held by another process leaves the handle
uncounted within the bound, and counting never moves the cursor."""

from __future__ import annotations

import os
import time

import pytest

from sotd.formats import unread
from tests.conftest import Comm, Session
from tests.integration.cli_support import inbox_lock_held, snapshot

pytestmark = pytest.mark.integration


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _cli_count(s: Session, handle: str) -> int:
    r = s.run("unread", handle)
    assert r.code == 0, r
    return int(r.out)


def test_each_count_is_what_comm_unread_prints_and_is_read_again_only_when_something_moved(
    comm: Comm,
) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    counter = unread.Counter(comm.layout, bound=0.2)
    assert counter.count("alpha") == 0 == _cli_count(a, "alpha")  # no inbox file yet
    for text in ("one", "it costs $5 now", 'a "quoted" \\ line'):
        assert b.run("send", "@alpha", text).code == 0
        assert counter.count("alpha") == _cli_count(a, "alpha")
    assert counter.count("alpha") == 3
    assert b.run("send", "--broadcast", "to all").code == 0
    assert counter.count("alpha") == _cli_count(a, "alpha")
    stamp = unread.stamp_of(comm.layout, "alpha")
    n = counter.count("alpha")
    assert unread.stamp_of(comm.layout, "alpha") == stamp
    before = snapshot(comm.home)
    assert counter.count("alpha") == n
    assert snapshot(comm.home) == before  # a count writes nothing: no cursor, no hint
    assert a.run("poll").code == 0  # the reader moves its cursor: the kept count is stale and read again
    assert counter.count("alpha") == 0 == _cli_count(a, "alpha")
    assert b.run("send", "@alpha", "after the poll").code == 0
    assert counter.count("alpha") == 1 == _cli_count(a, "alpha")


def test_a_held_read_lock_leaves_the_handle_uncounted_within_the_bound(comm: Comm) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    assert b.run("send", "@alpha", "waiting").code == 0
    counter = unread.Counter(comm.layout, bound=0.2)
    with inbox_lock_held(comm, "alpha"):
        t0 = time.monotonic()
        assert counter.count("alpha") is None
        took = time.monotonic() - t0
        assert unread.Counter(comm.layout, bound=0.2).count("beta") == 0  # another handle is not held up
    assert 0.2 <= took < 2.0, took
    assert counter.count("alpha") == 1  # the lock is gone: counted (a None is never kept)


def test_an_inbox_past_max_bytes_is_left_uncounted_and_nothing_is_read(comm: Comm) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    assert b.run("send", "@alpha", "one").code == 0
    size = os.path.getsize(comm.layout.inbox("alpha"))
    assert unread.Counter(comm.layout, bound=0.2, max_bytes=size).count("alpha") == 1  # at the bound: read
    before = snapshot(comm.home)
    assert unread.Counter(comm.layout, bound=0.2, max_bytes=size - 1).count("alpha") is None
    assert snapshot(comm.home) == before  # not even the read hint was written


def test_a_planted_link_in_place_of_an_inbox_or_cursor_is_never_followed(
    comm: Comm, tmp_path: object
) -> None:
    """The daemon counts for a peer's page (``agents.list``): an inbox or cursor that is a symlink (to a
    file this account may read) is left uncounted, the target untouched, and other handles still count."""
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    assert b.run("send", "@alpha", "one").code == 0
    target = os.path.join(str(tmp_path), "elsewhere.jsonl")
    with open(comm.layout.inbox("alpha"), "rb") as src, open(target, "wb") as f:
        f.write(src.read())
    os.symlink(target, comm.layout.inbox("gamma"))
    os.symlink(target, comm.layout.cursor("beta"))
    counter = unread.Counter(comm.layout, bound=0.2)
    before = _bytes(target), os.stat(target).st_mtime_ns
    assert counter.count("gamma") is None
    assert counter.count("beta") is None
    assert (_bytes(target), os.stat(target).st_mtime_ns) == before
    assert counter.count("alpha") == 1
