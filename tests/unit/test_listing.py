"""Behaviour 1.7 and D13: the list's pure parts (age format, the stale window, each row's two lines)."""

from __future__ import annotations

import calendar
import time

import pytest

from sotd.cli.comm import listing

pytestmark = pytest.mark.unit

NOW = 1_780_000_000.0


def at(ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - ago))


@pytest.mark.parametrize(
    ("secs", "want"),
    [
        (-30, "just now"),  # a future stamp
        (0, "just now"),
        (59, "just now"),
        (59.9, "just now"),
        (60, "1m ago"),
        (3599, "59m ago"),
        (3600, "1h ago"),
        (86399, "23h ago"),
        (86400, "1d ago"),
        (400 * 86400, "400d ago"),
    ],
)
def test_1_7_age_format(secs: float, want: str) -> None:
    assert listing.age_text(secs) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [(None, 600), ("", 600), ("30", 30), ("0", 0), ("soon", 600), ("1.5", 600), ("86400", 86400)],
)
def test_d13_stale_window(raw: str | None, want: int) -> None:
    env = {} if raw is None else {"SOT_COMM_STALE_SECS": raw}
    assert listing.stale_window(env) == want


def _row(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"host": "box", "repo": "proj", "expertise": [], "last_seen": at(0)}
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("ago", "window", "col"),
    [(600, 600, "live        "), (601, 600, "stale 601s  "), (0, 0, "live        "), (1, 0, "stale 1s    ")],
)
def test_1_7_live_until_the_window_then_stale(ago: int, window: int, col: str) -> None:
    lines = listing.render("/r", {"b": _row(last_seen=at(ago))}, "a", NOW, window)
    assert lines[1] == f"  @b                  box        proj           {col} []"


def test_1_7_unparseable_stamp_is_aged_from_epoch_0() -> None:
    lines = listing.render("/r", {"b": _row(last_seen="yesterday")}, "", NOW, 600)
    assert lines[1] == f"  @b                  box        proj           stale {int(NOW)}s []"


def test_1_7_render_whole() -> None:
    agents = {
        "me": _row(expertise=["a", "b"], state="working", summary="build", status_at=at(125)),
        "z": _row(host="other-box", repo="other", last_seen=at(700), status_at=at(7200)),
        "odd": "not an object",
    }
    assert listing.render("/c/registry.json", agents, "me", NOW, 600) == [
        "sot-comm agents  (/c/registry.json):",
        "  @me                 box        proj           live         [a/b]  <- me",
        "      [working] build · 2m ago",
        "  @odd                                          stale 1780000000s []",
        "      [idle]",
        "  @z                  other-box  other          stale 700s   []",
        "      [idle] · 2h ago",
    ]


def test_1_7_no_agents() -> None:
    assert listing.render("/r", {}, "", NOW, 600) == ["sot-comm agents  (/r):", "  (none)"]


def test_now_is_what_the_stamps_say() -> None:
    assert calendar.timegm(time.strptime(at(0), "%Y-%m-%dT%H:%M:%SZ")) == NOW


def test_frontend_lines() -> None:
    from sotd.cli.comm.listing import frontend_lines, up_text

    none = "  (none attached, or no daemon answered)"
    assert frontend_lines(None) == ["attached frontend boxes (this daemon):", none]
    assert frontend_lines({"up_s": 75, "frontends": []}) == [
        "attached frontend boxes (this daemon, up 1m):",
        none,
    ]
    assert frontend_lines({"up_s": 5, "frontends": [{"host": "boxf", "client_id": "c1", "name": ""}, "junk",
                                                    {"host": "", "client_id": "", "name": ""}]}) == [
        "attached frontend boxes (this daemon, up 5s):", "  fe@boxf (c1)", "  fe@?"]  # fmt: skip
    assert frontend_lines({"frontends": 3}) == ["attached frontend boxes (this daemon):", none]
    assert [up_text(s) for s in (-1, 59, 60, 3599, 3600, 86399, 86400)] == [
        "0s",
        "59s",
        "1m",
        "59m",
        "1h",
        "23h",
        "1d",
    ]
