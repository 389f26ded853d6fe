"""The read hint against the real reader: ``poll.read_batch`` (what poll, unread and the Stop hook call) and
``inbox.count_directed`` must give, with whatever hint is on disk, exactly what a full scan from the same
cursor gives. Random steps: whole and torn appends to and from several handles, tail cut-backs, the file
replaced under a new inode (same bytes or a changed line), a stale hint put back, a cursor written by
another client, polls that move the cursor and write the hint, and unread counts that do not."""

from __future__ import annotations

import json
import os
import shutil
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sotd.cli.comm.poll import read_batch
from sotd.formats import cursor, inbox, readhint
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit

H = "h"
WHO = ("h", "other", "")  # directed to h, to someone else, a broadcast


def _line(n: int, frm: str, to: str) -> bytes:
    doc = {"from": frm, "to": to, "repo": "r", "msg": f"m{n}", "ts": "2026-11-30T07:00:00Z"}
    return json.dumps(doc, separators=(",", ":")).encode()


def _full(lay: Layout) -> tuple[list[bytes], int]:
    """The reference reader: every complete line from byte 0, the cursor's own rules, no hint."""
    with open(lay.inbox(H), "rb") as f:
        lines = inbox.complete_lines(f.read())
    start = cursor.offset(cursor.read(lay, H), lines, H, None)
    new = lines[start:]
    return new, inbox.count_directed(new, H)


step = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.sampled_from(WHO), st.booleans()),
    st.tuples(st.just("cut"), st.integers(1, 60), st.just(""), st.just(False)),
    st.tuples(st.just("replace"), st.integers(0, 1), st.just(""), st.booleans()),
    st.tuples(st.just("save_hint"), st.just(0), st.just(""), st.just(False)),
    st.tuples(st.just("stale_hint"), st.just(0), st.just(""), st.just(False)),
    st.tuples(st.just("foreign_cursor"), st.integers(0, 30), st.just(""), st.booleans()),
    st.tuples(st.just("poll"), st.just(0), st.just(""), st.just(False)),
    st.tuples(st.just("unread"), st.just(0), st.just(""), st.just(False)),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(step, max_size=30))
def test_the_real_reader_with_any_hint_equals_a_full_scan(tmp_path: object, steps: list) -> None:
    top = os.path.join(str(tmp_path), f"c{os.urandom(4).hex()}")
    lay = Layout(os.path.join(top, "comm"))
    os.makedirs(lay.inbox_dir)
    os.makedirs(lay.read_dir)
    open(lay.inbox(H), "ab").close()
    ctx = types.SimpleNamespace(layout=lay, environ={})
    saved_hint: bytes | None = None
    n = 0
    try:
        for op, arg, who, flag in steps:
            path = lay.inbox(H)
            if op == "append":
                with open(path, "ab") as f:
                    for i in range(arg):
                        n += 1
                        frm = H if who == "" and i % 2 else "peer"  # some self-echo broadcasts too
                        data = _line(n, frm, who)
                        torn = flag and i == arg - 1
                        f.write(data[: len(data) // 2] if torn else data + b"\n")
            elif op == "cut":
                os.truncate(path, max(0, os.path.getsize(path) - arg))
            elif op == "replace":  # a new inode: the same bytes, or the last whole line changed
                with open(path, "rb") as f:
                    data = f.read()
                if arg and data.endswith(b"\n") and len(data) > 1:
                    head, _, _ = data[:-1].rpartition(b"\n")
                    n += 1
                    data = (head + b"\n" if head else b"") + _line(n, "peer", H) + b"\n"
                with open(path + ".new", "wb") as f:
                    f.write(data)
                os.replace(path + ".new", path)
            elif op == "save_hint":
                try:
                    with open(lay.read_hint(H), "rb") as f:
                        saved_hint = f.read()
                except FileNotFoundError:
                    saved_hint = None
            elif op == "stale_hint":
                if saved_hint is not None:
                    with open(lay.read_hint(H), "wb") as f:
                        f.write(saved_hint)
            elif op == "foreign_cursor":  # another client's cursor: a count, hashed (flag) or bare
                with open(path, "rb") as f:
                    lines = inbox.complete_lines(f.read())
                count = min(arg, len(lines))
                last = lines[count - 1] if count and flag else None
                cursor.write(lay, H, count, last)
            else:
                want_new, want_count = _full(lay)
                batch = read_batch(ctx, H)  # type: ignore[arg-type]
                assert batch is not None
                assert batch.new == want_new
                assert inbox.count_directed(batch.new, H) == want_count
                if op == "poll":  # what poll commits after showing the batch
                    new_text = cursor.encode(batch.total, batch.last_line)
                    if new_text != cursor.read(lay, H):
                        cursor.write(lay, H, batch.total, batch.last_line)
                        readhint.write(lay, H, new_text, batch.view)
                    elif batch.view.base == 0 and batch.total:
                        readhint.write(lay, H, new_text, batch.view)
                    assert _full(lay) == ([], 0)  # nothing is shown twice
    finally:
        shutil.rmtree(top, ignore_errors=True)
