"""The private offset hint (formats/readhint.py): a reader that uses it sees what a full scan shows."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd.formats import cursor, readhint
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit


def _lay(tmp_path: object) -> Layout:
    lay = Layout(os.path.join(str(tmp_path), "comm"))
    os.makedirs(lay.inbox_dir)
    os.makedirs(lay.read_dir)
    return lay


def _append(lay: Layout, data: bytes) -> None:
    with open(lay.inbox("h"), "ab") as f:
        f.write(data)


def _poll(lay: Layout) -> tuple[int, list[bytes]]:
    """What poll does: read, pick the start, write the cursor and the hint. Returns (start, new lines)."""
    text = cursor.read(lay, "h")
    view = readhint.read(lay, "h", text)
    assert view is not None
    start = view.base if view.base else cursor.offset(text, view.lines, "h", None)
    new = view.lines[start - view.base :]
    last = view.line(view.total)
    new_text = cursor.encode(view.total, last)
    cursor.write(lay, "h", view.total, last)
    readhint.write(lay, "h", new_text, view)
    return start, new


def _full(lay: Layout) -> tuple[int, list[bytes]]:
    """The reference: a full scan with the cursor's rules, no hint."""
    from sotd.formats import inbox

    with open(lay.inbox("h"), "rb") as f:
        lines = inbox.complete_lines(f.read())
    start = cursor.offset(cursor.read(lay, "h"), lines, "h", None)
    return start, lines[start:]


def test_hint_is_used_and_skips_the_counted_lines(tmp_path: object) -> None:
    lay = _lay(tmp_path)
    _append(lay, b"".join(b'{"n":%d}\n' % i for i in range(1000)))
    assert _poll(lay) == (0, [b'{"n":%d}' % i for i in range(1000)])
    _append(lay, b'{"n":1000}\n{"n":1001}\n{"tor')
    view = readhint.read(lay, "h", cursor.read(lay, "h"))
    assert view is not None and view.base == 1000
    assert view.lines == [b'{"n":1000}', b'{"n":1001}']


@pytest.mark.parametrize(
    "spoil",
    ["other_inode", "cursor_rewritten", "line_cut_back_and_replaced", "file_truncated", "garbage_hint"],
)
def test_a_hint_that_does_not_match_falls_back_to_the_full_scan(tmp_path: object, spoil: str) -> None:
    lay = _lay(tmp_path)
    _append(lay, b'{"n":1}\n{"n":2}\n')
    _poll(lay)
    if spoil == "other_inode":
        with open(lay.inbox("h"), "rb") as f:
            data = f.read()
        with open(lay.inbox("h") + ".new", "wb") as f:  # a new inode while the old one still exists
            f.write(data + b'{"n":3}\n')
        os.replace(lay.inbox("h") + ".new", lay.inbox("h"))
    elif spoil == "cursor_rewritten":
        cursor.write(lay, "h", 1, b'{"n":1}')
    elif spoil == "line_cut_back_and_replaced":
        os.truncate(lay.inbox("h"), len(b'{"n":1}\n'))
        _append(lay, b'{"n":9}\n{"n":3}\n')
    elif spoil == "file_truncated":
        os.truncate(lay.inbox("h"), 3)
    else:
        with open(lay.read_hint("h"), "w") as f:
            f.write("sotd-offset-hint 1 2 x 3\n")
    view = readhint.read(lay, "h", cursor.read(lay, "h"))
    assert view is not None and view.base == 0
    assert _poll(lay)[1] == _full_after(lay, spoil)


def _full_after(lay: Layout, spoil: str) -> list[bytes]:
    return {
        "other_inode": [b'{"n":3}'],
        "cursor_rewritten": [b'{"n":2}'],
        "line_cut_back_and_replaced": [b'{"n":9}', b'{"n":3}'],
        "file_truncated": [],
        "garbage_hint": [],
    }[spoil]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("cut"), st.integers(1, 40), st.booleans()),
        st.tuples(st.just("poll"), st.integers(0, 0), st.booleans()),
    ),
    max_size=25,
)


@settings(deadline=None)
@given(ops)
def test_hinted_reader_equals_full_scan_reader(tmp_path_factory: pytest.TempPathFactory, steps: list) -> None:
    """Appends (whole or torn), tail cuts and polls in any order: with the hint, each poll shows exactly
    what a reader without any hint would show from the same cursor."""
    lay = _lay(tmp_path_factory.mktemp("h"))
    open(lay.inbox("h"), "ab").close()
    n = 0
    for op, arg, flag in steps:
        if op == "append":
            for _ in range(arg + 1):
                n += 1
                _append(lay, b'{"n":%d}\n' % n if flag or arg else b'{"n":%d' % n)
        elif op == "cut":
            size = os.path.getsize(lay.inbox("h"))
            os.truncate(lay.inbox("h"), max(0, size - arg))
        else:
            expected = _full(lay)
            assert _poll(lay) == expected


def test_a_full_scan_that_accepts_the_cursor_leaves_a_hint_for_its_line(tmp_path: object) -> None:
    """A cursor written by another client (no hint): the first reader scans, the next one starts at it."""
    lay = _lay(tmp_path)
    _append(lay, b'{"n":1}\n{"n":2}\n{"n":3}\n')
    text = cursor.encode(2, b'{"n":2}')
    cursor.write(lay, "h", 2, b'{"n":2}')
    view = readhint.read(lay, "h", text)
    assert view is not None and view.base == 0
    readhint.write(lay, "h", text, view, 2)
    again = readhint.read(lay, "h", text)
    assert again is not None and again.base == 2 and again.lines == [b'{"n":3}']


def _line(n: int) -> bytes:
    return b'{"from":"x","to":"a","msg":"m%d","ts":"2026-01-01T00:00:0%dZ"}' % (n, n)


@pytest.mark.parametrize(
    ("base", "cursor_text", "want"),
    [
        (2, "anything at all", 2),  # a hint that checked out: the cursor was judged when it was written
        (0, "", 0),
        (0, "2 " + cursor.line_hash(_line(2)), 2),
        (0, "2 deadbeef", 1),  # a hashed cursor whose line changed steps back one
        (0, "9", 0),  # past the end: from the start
    ],
)
def test_view_shown_is_where_unread_mail_starts(base: int, cursor_text: str, want: int) -> None:
    lines = [_line(n) for n in (1, 2, 3)]
    view = readhint.View(base, lines[base:], lines[base - 1] if base else None, 0, 0)
    notes: list[str] = []
    assert view.shown(cursor_text, "a", notes.append) == want
    assert bool(notes) is (cursor_text == "2 deadbeef")
