"""The pure parts of ``sotd web`` (issue 30): who may ask (``web/guard``), what a form may run
(``web/actions``), what the page is sent (``web/snapshot``), and the screens' one tmux call
(``terminal/tmux.screens_argv``/``split_screens``). Tables; the browser tier (tests/browser) drives the
whole of it in Chromium."""

from __future__ import annotations

from typing import Any

import pytest

from sotd.terminal import tmux
from sotd.web import actions, guard, snapshot

pytestmark = pytest.mark.unit

SECRET = "s3cret-_x"
PORT = 8123
COOKIE = f"sotd_web_{PORT}={SECRET}"
H = "127.0.0.1:8123"


@pytest.mark.parametrize(
    ("method", "query", "headers", "want"),
    [
        ("GET", f"s={SECRET}", {"host": H}, guard.ENTER),
        ("GET", f"a=1&s={SECRET}", {"host": "localhost:9000"}, guard.ENTER),  # ssh -L from another port
        ("GET", "", {"host": H, "cookie": COOKIE}, guard.SERVE),
        ("GET", "", {"host": H, "cookie": f"other=1; {COOKIE}; x=y"}, guard.SERVE),
        ("GET", "", {"host": H}, guard.REFUSE),
        ("GET", "s=", {"host": H}, guard.REFUSE),
        ("GET", f"s={SECRET}x", {"host": H}, guard.REFUSE),
        ("GET", "", {"host": H, "cookie": f"sotd_web_{PORT + 1}={SECRET}"}, guard.REFUSE),  # another server's
        ("GET", "", {"host": H, "cookie": f"sotd_web_{PORT}="}, guard.REFUSE),
        ("GET", f"s={SECRET}", {"host": f"evil.example:{PORT}"}, guard.REFUSE),  # DNS rebinding
        ("GET", f"s={SECRET}", {"host": "127.0.0.1:80x"}, guard.REFUSE),
        ("GET", f"s={SECRET}", {}, guard.REFUSE),
        ("POST", "", {"host": H, "cookie": COOKIE, "origin": f"http://{H}"}, guard.SERVE),
        ("POST", "", {"host": H, "cookie": COOKIE}, guard.REFUSE),  # no Origin
        ("POST", "", {"host": H, "cookie": COOKIE, "origin": "http://evil.example"}, guard.REFUSE),
        ("POST", "", {"host": H, "cookie": COOKIE, "origin": "null"}, guard.REFUSE),
        ("POST", "", {"host": H, "cookie": COOKIE, "origin": "http://localhost:8123"}, guard.REFUSE),
        (
            "POST",
            f"s={SECRET}",
            {"host": H, "origin": f"http://{H}"},
            guard.REFUSE,
        ),  # the secret is no cookie
        ("PUT", "", {"host": H, "cookie": COOKIE, "origin": f"http://{H}"}, guard.REFUSE),
    ],
)
def test_verdict(method: str, query: str, headers: dict[str, str], want: str) -> None:
    assert guard.verdict(method, query, headers, SECRET, PORT) == want


TABLE = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:1FBB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
    "   1: 0100007F:C350 0100007F:1FBB 01 00000000:00000000 00:00000000 00000000  1000        0 2 1\n"
    "   2: 0100007F:C351 0100007F:1FBC 01 00000000:00000000 00:00000000 00000000  1001        0 3 1\n"
)


@pytest.mark.parametrize(
    ("ip", "port", "server", "want"),
    [
        ("127.0.0.1", 0xC350, 0x1FBB, 1000),
        ("127.0.0.1", 0xC351, 0x1FBB, None),  # that socket talks to another port
        ("127.0.0.1", 0xC351, 0x1FBC, 1001),
        ("127.0.0.1", 0xC352, 0x1FBB, None),
        ("::1", 0xC350, 0x1FBB, None),
    ],
)
def test_peer_uid(ip: str, port: int, server: int, want: int | None) -> None:
    assert guard.peer_uid(TABLE, ip, port, server) == want


def test_tcp_address() -> None:
    assert guard.tcp_address("127.0.0.1", 8123) == "0100007F:1FBB"
    assert guard.tcp_address("10.1.2.3", 1) == "0302010A:0001"
    assert guard.tcp_address("1.2.3", 1) == ""


@pytest.mark.parametrize(
    ("action", "form", "want"),
    [
        ("send", {"to": "peer", "text": "hi"}, ["send", "@peer", "hi"]),
        ("send", {"to": "@peer", "text": "--broadcast"}, ["send", "@peer", "--broadcast"]),
        (
            "spawn",
            {"path": "/p", "agent": "none", "command": "bash -i"},
            ["spawn", "/p", "--agent", "none", "--command", "bash -i"],
        ),
        ("spawn", {"path": "/p", "name": "@w1"}, ["spawn", "/p", "--agent", "claude", "--name", "w1"]),
        ("despawn", {"id": "ws-1"}, ["despawn", "ws-1"]),
    ],
)
def test_action_argv(action: str, form: dict[str, object], want: list[str]) -> None:
    assert actions.ARGV[action][0](form) == want


@pytest.mark.parametrize(
    ("action", "form", "said"),
    [
        ("send", {"to": "--broadcast", "text": "hi"}, "not a handle: '--broadcast'"),
        ("send", {"to": "a b", "text": "hi"}, "not a handle: 'a b'"),
        ("send", {"to": "peer", "text": "  "}, "nothing to send: the message is empty"),
        ("send", {"to": "peer", "text": 5}, "text: not text"),
        (
            "send",
            {"to": "peer", "text": "x" * (actions.TEXT_MAX + 1)},
            f"the message is over {actions.TEXT_MAX} characters",
        ),
        ("spawn", {"path": "--endpoint=ssh:x"}, "give the project's folder (a path, not an option)"),
        ("spawn", {"path": "/p", "agent": "sh"}, "agent: one of claude, codex, none"),
        ("spawn", {"path": "/p", "name": "-x"}, "not a handle: '-x'"),
        ("despawn", {"id": "--endpoint"}, "give the row's id, slug or handle"),
        ("despawn", {"id": "a\nb"}, "give the row's id, slug or handle"),
    ],
)
def test_action_refusals(action: str, form: dict[str, object], said: str) -> None:
    with pytest.raises(actions.FormRefused) as e:
        actions.ARGV[action][0](form)
    assert str(e.value) == said


def test_a_refused_form_runs_nothing() -> None:
    assert actions.run("send", {"to": "-x", "text": "hi"}, {}) == ("not a handle: '-x'", False)


@pytest.mark.parametrize(
    ("state", "colour"),
    [
        ("working", "green"),
        ("blocked", "red"),
        ("waiting", "amber"),
        ("done", "blue"),
        ("idle", "grey"),
        ("odd", "grey"),
    ],
)
def test_colour(state: str, colour: str) -> None:
    assert snapshot.colour(state) == colour


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_handle_view_is_inert_and_reads_what_list_reads() -> None:
    entry = {
        "host": "box\x1b[31m",
        "repo": "r\u202e",
        "last_seen": "2027-01-15T07:59:30Z",
        "state": "working",
        "summary": "a\nb<b>",
    }
    got = snapshot.handle_view("h1", entry, NOW, 600, unread=3, me="h1")
    assert got == {
        "name": "h1",
        "host": "box\\u001b[31m",
        "repo": "r\\u202e",
        "live": True,
        "seen": "just now",
        "state": "working",
        "colour": "green",
        "summary": "a\\u000ab<b>",
        "unread": 3,
        "me": True,
    }
    stale = snapshot.handle_view(
        "h2", {"last_seen": "2027-01-15T07:40:00Z", "state": ["x"]}, NOW, 600, unread=None, me="h1"
    )
    assert (stale["live"], stale["seen"], stale["state"], stale["colour"], stale["me"]) == (
        False,
        "20m ago",
        "idle",
        "grey",
        False,
    )
    assert snapshot.handle_view("h3", "not an object", NOW, 600, unread=None, me="")["seen"] == "never"


def test_daemon_view() -> None:
    info = {
        "pid": 7,
        "host": "a",
        "version": "0.7.0",
        "hub": False,
        "link": {"endpoint": "ssh:hub", "up": False, "since": "t", "error": "refused\x07"},
        "links": ["b\x1b"],
    }
    got = snapshot.daemon_view(info)
    assert got["line"] == "pid 7, host a, version 0.7.0, guest"
    assert got["link"] == {"endpoint": "ssh:hub", "up": False, "since": "t", "error": "refused\\u0007"}
    assert got["links"] == ["b\\u001b"]
    assert snapshot.daemon_view(None, "gone\x1b") == {"up": False, "line": "no daemon answered: gone\\u001b"}


def test_mail_and_row_views_keep_newlines_of_mail_only() -> None:
    m = snapshot.mail_view({"from": "a", "to": "b\x1b", "ts": "t", "msg": "x\ny\x1b[2J"})
    assert m == {"from": "a", "to": "b\\u001b", "ts": "t", "msg": "x\ny\\u001b[2J"}
    r = snapshot.row_view(
        {"workspace_id": "ws-1", "phase": "ready", "label": "l\x1b"}, "$ ls\n\x07\n", "tmux"
    )
    assert (r["label"], r["screen"], r["handle"]) == ("l\\u001b", "$ ls\n\\u0007", "")


def test_screens_in_one_call_split_by_the_secret_marker() -> None:
    argv = tmux.screens_argv("/s", ["%1", "%2"], "M")
    assert argv == [
        "tmux", "-S", "/s",
        "capture-pane", "-p", "-t", "%1", ";", "display-message", "-p", "M", ";",
        "capture-pane", "-p", "-t", "%2", ";", "display-message", "-p", "M",
    ]  # fmt: skip
    assert tmux.split_screens("a\nb\nM\nc\nM\n", "M", 2) == ["a\nb\n", "c\n"]
    assert tmux.split_screens("a\nM\n", "M", 2) is None
    assert tmux.split_screens("a\nM\ntrailing", "M", 1) is None


def test_far_box_reads_a_linked_daemon_s_answer() -> None:
    from sotd.daemon import ops
    from sotd.wire import answers, payloads

    assert payloads.agents_list_payload() == {} and payloads.agents_list_payload(fleet=True) == {
        "fleet": True
    }
    assert payloads.read_agents_list({"fleet": True}) and not payloads.read_agents_list({"fleet": 1})
    ok = answers.ok_with(
        {"boxes": [{"box": "b", "registry": {"x": {}}, "error": ""}, {"box": "c", "registry": 5}, 7]}
    )
    assert ops.far_box("b", ok) == [
        {"box": "b", "registry": {"x": {}}, "error": "", "unread": {}},
        {"box": "c", "registry": {}, "error": "", "unread": {}},
    ]
    assert ops.far_box("b", None, "timeout") == [
        {"box": "b", "registry": {}, "error": "no answer: timeout", "unread": {}}
    ]
    assert ops.far_box("b", answers.unknown_op("agents.list")) == [
        {
            "box": "b",
            "registry": {},
            "error": "its daemon does not answer agents.list (an older sotd, or the 0.6.6 scripts)",
            "unread": {},
        }
    ]
    (odd,) = ops.far_box("b", {"ok": False})
    assert odd["error"].startswith("it answered ")
    # a guest asked for its own list cannot speak for another box: its first entry, under the link's name
    spoof = answers.ok_with(
        {"boxes": [{"box": "a", "registry": {"x": {}}, "unread": {"x": 3}}, {"box": "c", "registry": {}}]}
    )
    assert ops.far_box("b", spoof, own=True) == [
        {"box": "b", "registry": {"x": {}}, "error": "", "unread": {"x": 3}}
    ]
    assert ops.far_box("b", answers.ok_with({"boxes": []}), own=True) == [
        {"box": "b", "registry": {}, "error": "it listed no box", "unread": {}}
    ]
    assert snapshot.far_view({"box": "b\x1b", "registry": {"x": {}, "y": {}}, "error": None}) == {
        "box": "b\\u001b",
        "handles": 2,
        "error": "",
    }


UNLINKED_CASES = [
    ("no other host", {"a": {"host": "me", "last_seen": "2026-12-02T10:00:00Z"}}, set(), []),
    (
        "a host with no daemon: its handles and how many are live",
        {
            "a": {"host": "old", "last_seen": "2026-12-02T10:00:00Z"},
            "b": {"host": "old", "last_seen": "2026-12-01T10:00:00Z"},
            "c": {"host": "me"},
        },
        set(),
        [{"box": "old", "handles": 2, "live": 1, "error": "", "scripts": True}],
    ),
    ("a host a sotd daemon answered for is not listed again", {"a": {"host": "b1"}}, {"b1"}, []),
    (
        "odd entries: no host, a host that is no string, an entry that is no object",
        {"a": {}, "b": {"host": 5}, "c": "x", "d": {"host": "z\x1b"}},
        set(),
        [{"box": "z\\u001b", "handles": 1, "live": 0, "error": "", "scripts": True}],
    ),
]


@pytest.mark.parametrize(
    ("what", "agents", "answered", "want"), UNLINKED_CASES, ids=[c[0] for c in UNLINKED_CASES]
)
def test_unlinked_boxes(what: str, agents: dict[str, object], answered: set[str], want: list[object]) -> None:
    import calendar
    import time

    now = calendar.timegm(time.strptime("2026-12-02T10:01:00Z", "%Y-%m-%dT%H:%M:%SZ"))
    assert snapshot.unlinked_boxes(agents, "me", answered, now, 600) == want, what


def test_ocx_runs_of_this_node_as_the_page_shows_them(tmp_path: object) -> None:
    """The node's own files as its writers write them (``records.write_json`` for the answers record, the
    runner's ``Ended.to_json`` for ``ended.json``), read back by ``node_runs`` and shown by ``run_view``.
    A planted state folder: a real OCX run needs Fossil, bubblewrap and a node (tests/integration/
    test_ocx_runs.py drives those); this test is about what the page reads of them."""
    import json
    import os

    from sotd.jobs.outcome import Ended
    from sotd.ocxrun import records
    from sotd.ocxrun.runs import node_runs

    state = str(tmp_path)
    os.makedirs(os.path.join(state, "answers"))
    a, b = "a" * 40, "b" * 40
    records.write_json(
        os.path.join(state, "answers", f"{a}.json"),
        {"run": a, "repo": "r", "to": "n", "sender": "s\x1b", "phase": "done"},
    )
    records.write_json(
        os.path.join(state, "answers", f"{b}.json"),
        {"run": b, "repo": "r", "to": "n", "sender": "s", "phase": "started"},
    )
    os.utime(os.path.join(state, "answers", f"{a}.json"), (1, 1))  # the older
    os.makedirs(os.path.join(state, "jobs", a))
    ended = Ended("limit", limit="wall", outputs={"out.bin": "c" * 40}, limits_hit=["wall"])
    with open(os.path.join(state, "jobs", a, "ended.json"), "w") as f:
        json.dump(ended.to_json(), f)
    with open(os.path.join(state, "answers", "junk.json"), "w") as f:
        f.write("[1]")
    got = node_runs(state)
    assert [r["run"] for r in got] == [b, a]
    assert [snapshot.run_view(r) for r in got] == [
        {"run": "b" * 16, "repo": "r", "to": "n", "sender": "s", "phase": "started", "outcome": "", "limit": "",
         "limits_hit": [], "outputs": []},
        {"run": "a" * 16, "repo": "r", "to": "n", "sender": "s\\u001b", "phase": "done", "outcome": "limit",
         "limit": "wall", "limits_hit": ["wall"], "outputs": ["out.bin " + "c" * 16]},
    ]  # fmt: skip
    assert node_runs(os.path.join(state, "nowhere")) == []


@pytest.mark.parametrize(
    ("box", "counts"),
    [
        ({"registry": {"a": {}, "b": {}}, "unread": {"a": 0, "b": 7}}, {"a": 0, "b": 7}),
        ({"registry": {"a": {}}}, {}),  # an older daemon sends none
        ({"registry": {"a": {}}, "unread": None}, {}),
        ({"registry": {"a": {}}, "unread": [1]}, {}),
        ({"registry": 5, "unread": {"a": 1}}, {}),  # no registry: no handle to count for
        ({"registry": {"a": {}}, "unread": {"a": 1, "ghost": 4}}, {"a": 1}),  # only handles it lists
        ({"registry": {"a": {}}, "unread": {"a": True}}, {}),  # a bool is not a count
        ({"registry": {"a": {}}, "unread": {"a": 1.0}}, {}),
        ({"registry": {"a": {}}, "unread": {"a": "3"}}, {}),
        ({"registry": {"a": {}}, "unread": {"a": -1}}, {}),
        ({"registry": {"a": {}}, "unread": {"a": 10**12}}, {}),
        ({"registry": {"a": {}}, "unread": {"a": 10**12 - 1}}, {"a": 10**12 - 1}),
    ],
)
def test_read_box_unread_keeps_only_whole_counts_of_listed_handles(
    box: dict[str, Any], counts: dict[str, int]
) -> None:
    from sotd.wire import payloads

    assert payloads.read_box_unread(box) == counts


@pytest.mark.parametrize(
    ("agents", "mine"),
    [
        ({}, []),
        ({"b": {"host": "me"}, "a": {"host": "me"}}, ["a", "b"]),
        (
            {"a": {"host": "me"}, "far": {"host": "other"}},
            ["a"],
        ),  # a shared folder: the other box counts its own
        ({"a": {"host": "Me"}}, []),  # the host as written, not folded
        ({"a": "me", "b": {"host": None}, "c": {}}, []),  # entries that say no host
        (
            {"../x": {"host": "me"}, "a b": {"host": "me"}, "x/y": {"host": "me"}},
            [],
        ),  # no valid handle: its inbox path is not read
    ],
)
def test_own_handles_are_this_host_s_valid_handles(agents: dict[str, Any], mine: list[str]) -> None:
    from sotd.daemon import ops

    assert ops.own_handles(agents, "me") == mine
