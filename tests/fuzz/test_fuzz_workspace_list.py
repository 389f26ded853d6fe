"""Fuzz: a daemon's ``workspace.list`` answer as ``sotd comm spawn`` reads it while it waits for a row.

File: ``tests/fuzz/test_fuzz_workspace_list.py``. The spawn's wait reads the phase and, since 2026-12-03,
the ``waiting_on`` reason of its row (``spawn.phase_of``, ``spawn.waiting_of``) from whatever the daemon,
possibly a far one over ssh, answers. Oracle: no exception; both are strings of at most
``spawn.WAITING_MAX`` characters with no control or bidi character (they go into the ERROR line as data);
a row that is not listed (or no list at all) reads ``gone`` with no reason; a listed row's plain reason
comes back as it was sent.
What would break it: a reader that indexes the answer without checking its shape, or prints a peer's
text as it came.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sotd.cli.comm import spawn
from tests.fuzz.conftest import Cases, fuzz

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30))
values = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)
nasty = st.one_of(
    st.text(max_size=300), st.sampled_from(["\x1b[2J", "a\nERROR: fake", "\u202eevil", "x" * 500]), values
)
row = st.fixed_dictionaries(
    {},
    optional={"workspace_id": st.sampled_from(["ws-a", "ws-b", ""]), "phase": nasty, "waiting_on": nasty},
)
answers_st = st.one_of(
    st.dictionaries(st.text(max_size=8), values, max_size=3),
    st.fixed_dictionaries(
        {}, optional={"workspaces": st.one_of(values, st.lists(st.one_of(row, values), max_size=5))}
    ),
)


def _bidi_or_control(c: str) -> bool:
    return (
        ord(c) < 0x20
        or 0x7F <= ord(c) < 0xA0
        or c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    )


@fuzz(300)
@given(answer=answers_st)
def test_fuzz_any_workspace_list_answer_reads_as_a_phase_and_a_reason(cases: Cases, answer: Any) -> None:
    cases.one()
    phase, waiting = spawn.phase_of(answer, "ws-a"), spawn.waiting_of(answer, "ws-a")
    for text in (phase, waiting):
        assert isinstance(text, str) and len(text) <= spawn.WAITING_MAX, text
        assert not any(_bidi_or_control(c) for c in text), text
    rows = answer.get("workspaces")
    mine = (
        [w for w in rows if isinstance(w, dict) and w.get("workspace_id") == "ws-a"]
        if isinstance(rows, list)
        else []
    )
    if not mine:
        assert (phase, waiting) == ("gone", "")
        return
    why = mine[0].get("waiting_on")
    if isinstance(why, str) and len(why) <= spawn.WAITING_MAX and not any(_bidi_or_control(c) for c in why):
        assert waiting == why
