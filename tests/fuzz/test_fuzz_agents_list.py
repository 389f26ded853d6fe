"""Fuzz: a linked daemon's ``agents.list`` answer (issue 30), as the hub and ``sotd web`` read it.

File: ``tests/fuzz/test_fuzz_agents_list.py``. Any JSON a far daemon sends back (``ops.far_box``), then the
page's view of each box (``web.snapshot.far_view``). Oracle: no exception; every box is a dict with a
string ``box``, a dict ``registry`` and a string ``error`` (a fleet answer may list none), and its
``unread`` keeps only whole counts from 0 below ``payloads.UNREAD_MAX`` of handles its registry lists;
asked for its own list (``own``), a daemon gives exactly one box, named for its link; the view holds no
control character (escapes are inert).
What would break it: a reader that indexes a peer's answer without checking its shape.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sotd.daemon import ops
from sotd.web import snapshot
from sotd.wire import payloads
from tests.fuzz.conftest import Cases, fuzz

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
values = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)
names = st.one_of(st.sampled_from(["a", "b", "\x1b[2J"]), st.text(max_size=4))
registries = st.one_of(values, st.dictionaries(names, values, max_size=4))
counts = st.one_of(values, st.dictionaries(names, st.one_of(scalars, st.integers(-2, 2**64)), max_size=4))
box_entry = st.fixed_dictionaries(
    {}, optional={"box": values, "registry": registries, "error": values, "unread": counts, "x": values}
)
answers_st = st.one_of(
    values,
    st.fixed_dictionaries(
        {"ok": st.booleans()}, optional={"boxes": st.lists(st.one_of(box_entry, values), max_size=5)}
    ),
)


@fuzz(300)
@given(answer=answers_st, own=st.booleans())
def test_fuzz_any_agents_list_answer_reads_as_boxes(cases: Cases, answer: Any, own: bool) -> None:
    cases.one()
    got = ops.far_box("boxb", answer if isinstance(answer, dict) else None, own=own)
    assert all(
        isinstance(b["box"], str) and isinstance(b["registry"], dict) and isinstance(b["error"], str)
        for b in got
    ), got
    for b in got:  # a count is kept only as a whole number for a handle the box lists
        assert all(
            name in b["registry"] and type(n) is int and 0 <= n < payloads.UNREAD_MAX
            for name, n in b["unread"].items()
        ), b
    if own:
        assert [b["box"] for b in got] == ["boxb"]
    for b in got:
        view = json.dumps(snapshot.far_view(b), ensure_ascii=False)
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in view), view
