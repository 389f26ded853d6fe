"""Behaviour 1.7 (comm-list.sh) and 1.8 (comm-leave.sh) through the installed wrappers: the stale column,
the state line and its age, ``SOT_COMM_STALE_SECS``, and the unreadable-registry failures."""

from __future__ import annotations

import os
import re

import pytest

from tests.conftest import Comm, Session
from tests.integration.cli_support import edit_row, snapshot, stamp

pytestmark = pytest.mark.integration

FRONTENDS = ["", "attached frontend boxes (this daemon):", "  (none attached, or no daemon answered)"]


@pytest.fixture
def two(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha", "--expertise", "files, git").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


def _match(got: list[str], want: list[str]) -> None:
    """Each expected line is a regular expression matched against the whole line."""
    assert len(got) == len(want), "\n".join(got)
    for g, w in zip(got, want, strict=True):
        assert re.fullmatch(w, g), f"{g!r} !~ {w!r}"


def test_1_7_stale_row_shows_its_age_in_seconds(two) -> None:
    comm, a, _ = two
    edit_row(comm, "beta", last_seen=stamp(601))
    r = a.run("list")
    assert (r.code, r.err) == (0, ""), r
    _match(
        r.out_lines,
        [
            re.escape(f"sot-comm agents  ({comm.layout.registry}):"),
            re.escape("  @alpha              testhost   alpha          live         [files/git]  <- me"),
            re.escape("      [idle]"),
            r"  @beta               testhost   beta           stale 60[1-4]s   \[\]",
            re.escape("      [idle]"),
            *map(re.escape, FRONTENDS),
        ],
    )


def test_1_7_unparseable_last_seen_counts_from_epoch_0(two) -> None:
    comm, a, _ = two
    edit_row(comm, "beta", last_seen="2099-01-01 00:00:00Z")
    r = a.run("list")
    assert r.code == 0, r
    _match(r.out_lines[3:4], [r"  @beta               testhost   beta           stale \d{10}s \[\]"])


@pytest.mark.parametrize(
    ("state", "summary", "ago", "want"),
    [
        ("working", "fixing the build", 3 * 60 + 5, "      [working] fixing the build · 3m ago"),
        ("blocked", "which database?", 5, "      [blocked] which database? · just now"),
        ("waiting", "CI on main", 2 * 3600 + 5, "      [waiting] CI on main · 2h ago"),
        ("done", "merged", 3 * 86400 + 5, "      [done] merged · 3d ago"),
        ("working", "", 90, "      [working] · 1m ago"),
        ("", "", 90, "      [idle] · 1m ago"),
    ],
)
def test_1_7_state_summary_and_age_line(two, state: str, summary: str, ago: int, want: str) -> None:
    comm, a, _ = two
    edit_row(comm, "beta", state=state, summary=summary, status_at=stamp(ago))
    r = a.run("list")
    assert (r.code, r.err) == (0, ""), r
    assert r.out_lines[4] == want, r


def test_1_7_state_without_status_at_has_no_age(two) -> None:
    comm, a, _ = two
    edit_row(comm, "beta", state="working", summary="on it")
    r = a.run("list")
    assert r.out_lines[4] == "      [working] on it", r


def test_1_7_stale_window_from_the_environment(two) -> None:
    comm, a, _ = two
    edit_row(comm, "beta", last_seen=stamp(100))
    r = a.run("list", env={"SOT_COMM_STALE_SECS": "30"})
    assert r.code == 0, r
    _match(r.out_lines[3:4], [r"  @beta               testhost   beta           stale 10[0-3]s   \[\]"])
    edit_row(comm, "beta", last_seen=stamp(5000))
    r = a.run("list", env={"SOT_COMM_STALE_SECS": "100000"})
    assert r.out_lines[3] == "  @beta               testhost   beta           live         []", r
    # a window that is not a number is the default 600
    r = a.run("list", env={"SOT_COMM_STALE_SECS": "soon"})
    _match(r.out_lines[3:4], [r"  @beta               testhost   beta           stale 500[0-3]s  \[\]"])


def test_1_7_the_stale_window_is_for_display_only(two) -> None:
    comm, a, _ = two
    edit_row(comm, "beta", last_seen=stamp(100))
    r = a.run("send", "@beta", "still live by the 600 s rule", env={"SOT_COMM_STALE_SECS": "30"})
    assert (r.code, r.out_lines) == (0, ["  filed -> @beta"]), r


def test_1_7_unreadable_registry_lists_nothing(two) -> None:
    comm, a, _ = two
    with open(comm.layout.registry, "w") as f:
        f.write('{"agents": 5}\n')
    before = snapshot(comm.home)
    r = a.run("list")
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        ["FAILED: the registry could not be read; nothing was listed", "see why and what to do: sotd doctor"],
    ), r
    assert snapshot(comm.home) == before


@pytest.mark.parametrize("args", [(), ("--name", "beta"), ("--name=beta",)])
def test_1_8_unreadable_registry_removes_nothing(two, args: tuple[str, ...]) -> None:
    comm, a, _ = two
    with open(comm.layout.registry, "w") as f:
        f.write("not json\n")
    before = snapshot(comm.home)
    r = a.run("leave", *args)
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        [
            "FAILED: the registry could not be read; nothing was removed",
            "see why and what to do: sotd doctor",
        ],
    ), r
    assert snapshot(comm.home) == before  # the self file too


def test_1_8_leave_keeps_inbox_and_cursor(two) -> None:
    comm, a, b = two
    assert b.run("send", "@alpha", "hi").code == 0
    assert a.run("poll").code == 0
    inbox = comm.inbox_bytes("alpha")
    with open(comm.layout.cursor("alpha"), "rb") as f:
        cursor = f.read()
    r = a.run("leave")
    assert (r.code, r.out_lines) == (0, ["Left sot-comm (@alpha removed)."]), r
    assert comm.inbox_bytes("alpha") == inbox
    with open(comm.layout.cursor("alpha"), "rb") as f:
        assert f.read() == cursor
    assert not os.path.exists(a.self_file)


def test_1_7_frontends_block_names_the_attached_front_ends(two, tmp_path) -> None:
    """With this box's daemon up, list asks it (version.query) and shows its uptime and every ``fe``
    connection past its hello; a front end that leaves is gone from the next list."""
    import json
    import socket
    import time

    from sotd.wire import hello as wire_hello
    from tests.integration.test_daemon import Daemon

    comm, a, _ = two
    d = Daemon(str(tmp_path), "fe", comm.home, "testhost")
    fe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        env = {"SOT_SOCKET": d.sock}
        r = a.run("list", env=env)
        assert r.code == 0, r
        assert r.out_lines[-1] == "  (none attached, or no daemon answered)"
        assert re.fullmatch(r"attached frontend boxes \(this daemon, up \d+s\):", r.out_lines[-2]), (
            r.out_lines
        )
        hello = dict(
            wire_hello.hello_payload(host="boxf", os_user=f"uid:{os.geteuid()}", role="cli", name="watcher")
        )
        hello["role"] = "fe"  # the comm tools never say fe; a front end (sot-fe) does
        fe.settimeout(10)
        fe.connect(d.sock)
        fe.sendall(
            json.dumps({"v": 1, "id": 1, "kind": "req", "op": "hello", "payload": hello}).encode() + b"\n"
        )
        assert b'"ok":true' in fe.recv(65536)
        r = a.run("list", env=env)
        assert r.out_lines[-1] == f"  fe@boxf ({hello['client_id']}, watcher)", r.out_lines
        fe.close()
        deadline = time.monotonic() + 10
        while a.run("list", env=env).out_lines[-1] != "  (none attached, or no daemon answered)":
            assert time.monotonic() < deadline, "the front end that left is still listed"
            time.sleep(0.1)
    finally:
        fe.close()
        d.stop()
