"""The append's busy sentence names the bound it was given, truthfully (behaviour 6.4 step 1).

Whole bounds print exactly as the 0.6.6 scripts print them (``2s``); a fraction, which a daemon passes
when it trims the wait to what is left of a send's deadline, prints to the millisecond instead of being
truncated to ``0s``.
"""

from __future__ import annotations

import pytest

from sotd.formats import inbox

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("bound", "text"),
    [
        (2.0, "2"),
        (2, "2"),
        (10.0, "10"),
        (0.0, "0"),  # one try: a whole bound of zero
        (0.75, "0.75"),
        (1.5, "1.5"),
        (0.25, "0.25"),
        (0.1234, "0.123"),
        (1.9996, "2"),  # rounds to a whole second: no ".000"
        (0.0004, "0.001"),  # positive, under a millisecond: never "0"
        (2.05, "2.05"),
    ],
)
def test_bound_text(bound: float, text: str) -> None:
    assert inbox.bound_text(bound) == text


def test_busy_text_whole_and_fractional() -> None:
    assert inbox.busy_text("a", 2.0) == "the inbox lock for @a was held for 2s — nothing was appended"
    assert inbox.busy_text("a", 0.75) == "the inbox lock for @a was held for 0.75s — nothing was appended"
    assert "held for 0s" not in inbox.busy_text("a", 0.3)


def test_a_real_append_past_a_fractional_bound_says_so(tmp_path: object) -> None:
    import fcntl
    import os

    from sotd.errors import AppendFailed
    from sotd.formats.layout import Layout, ensure_home

    lay = Layout(os.path.join(str(tmp_path), "comm"))
    ensure_home(lay)
    holder = os.open(lay.inbox_lock("a"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with pytest.raises(AppendFailed) as ei:
            inbox.append(lay, "a", b'{"x":1}\n', nfs=True, bound=0.25)
    finally:
        os.close(holder)
    assert ei.value.message == "the inbox lock for @a was held for 0.25s — nothing was appended"
