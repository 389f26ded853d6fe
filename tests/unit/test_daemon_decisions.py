"""The daemon's pure decisions, as tables: is-hub (2.4), the offer outcome (D4), the link backoff (2.4),
the comm.file verdict order (2.3), the hello check (2.1), agent.join (D5) and the code-change check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sotd import _clock, topology
from sotd.daemon import hub, links, ops, server
from sotd.daemon import process as dprocess
from sotd.errors import RegistryUnreadable

pytestmark = pytest.mark.unit

TOPO = topology.parse(b'hub = "boxa"\n[boxes.boxa]\n[boxes.boxb]\n[boxes.boxc]\n')


@pytest.mark.parametrize(
    ("topo", "unreadable", "host", "identity", "want"),
    [
        (None, False, "boxb", "none@m", True),  # no topology: its own hub
        (TOPO, False, "boxa", "none@m", True),  # the topology names it
        (TOPO, False, "boxb", "local m", True),  # its folder is on its own disk
        (TOPO, False, "boxb", "nfs4 srv:/x", False),
        (TOPO, False, "boxb", "none@m", False),
        (TOPO, False, "boxb", "none", False),
        (None, True, "boxb", "none@m", False),  # unreadable names no hub
        (None, True, "boxb", "local m", True),
    ],
)
def test_is_hub(
    topo: topology.Topology | None, unreadable: bool, host: str, identity: str, want: bool
) -> None:
    assert hub.is_hub(topo, unreadable, host, identity) is want


OK = {"ok": True}
NH = {"error": "no box knows that handle: h", "code": "not_here"}
STALE = {"error": "no live session holds @h", "code": "no_live_session"}
OLD = {"error": "unknown op: comm.file", "code": "unknown_op"}


@pytest.mark.parametrize(
    ("answers", "should", "linked", "want"),
    [
        ([("b", NH), ("c", OK)], [], ["b", "c"], OK),  # first ok wins
        ([("b", STALE), ("c", OK)], [], ["b", "c"], OK),  # an ok beats a refusal that came first
        ([("b", NH), ("c", STALE)], [], ["b", "c"], STALE),  # the listing box's own refusal
        ([("b", None), ("c", STALE)], [], ["b", "c"], STALE),  # a refusal beats silence
        ([("c", OLD)], [], ["c"], OLD),  # an old daemon's refusal is an answer, not not_here
        (
            [("c", None), ("b", None), ("d", NH)],
            [],
            ["b", "c", "d"],
            {"error": "no box answered for @h within 3s: b, c", "code": "file_failed"},
        ),
        ([("b", NH)], [], ["b"], {"error": "no box knows that handle: h", "code": "not_here"}),
        (
            [("b", NH)],
            ["b", "c", "d"],
            ["b"],
            {"error": "no box knows that handle: h (no link from: c, d)", "code": "not_here"},
        ),
        ([], ["c"], [], {"error": "no box knows that handle: h (no link from: c)", "code": "not_here"}),
        (
            [("b", {"what": 1})],
            [],
            ["b"],
            {"error": 'b answered neither ok nor a refusal: {"what": 1}', "code": "file_failed"},
        ),
    ],
)
def test_offer_outcome(
    answers: list[tuple[str, dict[str, Any] | None]],
    should: list[str],
    linked: list[str],
    want: dict[str, Any],
) -> None:
    assert hub.offer_outcome("h", answers, should, linked, 3.0) == want


@pytest.mark.parametrize(
    ("answers", "unasked", "want"),
    [
        (
            [("b", NH)],
            ["d", "c"],
            "no box answered for @h within 3s: c, d (the bound ran out before they were asked)",
        ),
        ([("b", None)], ["c"], "no box answered for @h within 3s: b"),  # the silent box asked is the cause
        ([("b", STALE)], ["c"], "no live session holds @h"),  # a listing box's refusal comes first
        ([], ["c"], "no box answered for @h within 3s: c (the bound ran out before they were asked)"),
    ],
)
def test_offer_outcome_names_boxes_the_bound_left_unasked(
    answers: list[tuple[str, dict[str, Any] | None]], unasked: list[str], want: str
) -> None:
    """Never ``no box knows that handle`` when a linked box was not asked (issue 27 item 2)."""
    got = hub.offer_outcome("h", answers, [], ["b", "c", "d"], 3.0, unasked=unasked)
    assert got["error"] == want


F, U, R = links.FAILED, links.UNREACHED, links.LOGIN_REFUSED


@pytest.mark.parametrize(
    ("prev", "outage", "kind", "want"),
    [
        (0.0, 0.0, F, 1),  # the first redial after a link ended
        (1.0, 5.0, F, 1),  # a hub restarting: every second while the outage is young
        (1.0, 29.9, F, 1),
        (1.0, 30.0, F, 2),  # past the fast window: doubling
        (2.0, 40.0, F, 4),
        (16.0, 100.0, F, 30),
        (30.0, 500.0, F, 30),  # never past 30 s
        (30.0, 500.0, U, 1),  # dials that never reach the far box cost it nothing (a partition)
        (0.0, 31.0, F, 2),
        (0.0, 0.0, R, 30),  # a refused login or host key: backs off at once, however young the outage
        (1.0, 5.0, R, 30),
    ],
)
def test_next_delay_table(prev: float, outage: float, kind: str, want: float) -> None:
    assert links.next_delay(prev, outage, kind) == want


@pytest.mark.parametrize(
    ("base", "spread", "want"),
    [
        (1.0, 0.0, 0.5),
        (1.0, 0.5, 1.0),
        (1.0, 0.999, 1.499),
        (30.0, 0.0, 15.0),
        (1.0, 7.0, 1.5),
        (1.0, -1.0, 0.5),
    ],
)
def test_jittered_table(base: float, spread: float, want: float) -> None:
    assert links.jittered(base, spread) == pytest.approx(want)


def _outages_in_a_row(restarts: int, down_s: float, up_s: float, spread: float) -> list[float]:
    """The guest's loop (``Uplink.run``) as a model: a hub restarted ``restarts`` times, each time down
    ``down_s`` then up ``up_s``; returns how long after the hub was back each redial came."""
    late: list[float] = []
    base, outage_start, t = 0.0, 0.0, 0.0
    for _ in range(restarts):
        down_until = t + down_s
        link_started = None
        while link_started is None:  # dial until the hub is back
            base = links.next_delay(base, t - outage_start, links.FAILED)
            t += links.jittered(base, spread)
            if t >= down_until:
                link_started = t
                late.append(t - down_until)
        t = link_started + up_s  # the link holds, then the hub restarts again
        if t - link_started >= links.STABLE_S:
            outage_start, base = t, 0.0
    return late


@pytest.mark.parametrize("spread", [0.0, 0.5, 0.999])
def test_restarts_in_a_row_are_each_redialled_within_two_seconds(spread: float) -> None:
    """Issue 27: five restarts 10 s apart grew the outage to 14 s; now each one is redialled in < 2 s."""
    late = _outages_in_a_row(restarts=8, down_s=1.2, up_s=9.0, spread=spread)
    assert len(late) == 8
    assert max(late) < 1.5, late


def test_a_hub_that_stays_down_is_backed_off() -> None:
    """Failed dials over 10 minutes: about 30 in the first 30 s, then the wait grows to 30 s (jittered)."""
    t, base, dials = 0.0, 0.0, 0
    while t < 600:
        base = links.next_delay(base, t, links.FAILED)
        t += links.jittered(base, 0.5)
        dials += 1
    assert base == links.MAX_S
    assert dials <= 30 + 5 + 19


@pytest.mark.parametrize(
    ("err", "was_up", "want"),
    [
        (
            "the link closed before the hub answered hello: root@10.77.0.1: Permission denied (publickey).",
            False,
            R,
        ),
        ("the link closed before the hub answered hello: Host key verification failed.", False, R),
        ("the link's child exited 255: @ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @", True, R),
        ("exited 255: ssh: connect to host 10.77.0.1 port 22: Connection timed out", False, U),
        ("ssh: connect to host boxa port 22: Connection refused", False, U),
        ("the link's child exited 255: ssh: connect to host boxa port 22: Connection refused", True, F),
        (
            "the link closed before the hub answered hello: sotd stdio-bridge: no daemon socket at /r/s",
            False,
            F,
        ),
        ("the hub closed the link", True, F),
    ],
)
def test_failure_kind_table(err: str, was_up: bool, want: str) -> None:
    assert links.failure_kind(err, was_up) == want


def test_redial_text_says_a_refused_login_will_not_fix_itself() -> None:
    assert links.redial_text("ssh:boxa/boxa", "the hub closed the link", F, 1.0) == (
        "link to the hub at ssh:boxa/boxa: the hub closed the link; dialling again in 1.0s"
    )
    assert links.redial_text("ssh:boxa/boxa", "x: Permission denied (publickey).", R, 31.23) == (
        "link to the hub at ssh:boxa/boxa: x: Permission denied (publickey).; dialling again in 31.2s"
        " (ssh refused the login or the host key: this will not fix itself; fix the key on this box,"
        " then sotd daemon reload dials at once)"
    )


@pytest.mark.parametrize(
    ("err", "want"),
    [
        ("exited 255: ssh: connect to host 10.77.0.1 port 22: Connection timed out", False),
        ("ssh: connect to host boxa port 22: No route to host", False),
        ("ssh: Could not resolve hostname boxz: Name or service not known", False),
        ("the link closed before the hub answered hello: sotd stdio-bridge: no daemon socket at /r/s", True),
        (
            "the link closed before the hub answered hello: root@10.77.0.1: Permission denied (publickey).",
            True,
        ),
        ("the link closed before the hub answered hello: bash: line 1: exec: sotd: not found", True),
    ],
)
def test_reached_far_side(err: str, want: bool) -> None:
    assert links.reached_far_side(err) is want


@pytest.mark.parametrize(
    ("rc", "stderr", "keepalive", "want"),
    [
        (0, "", "", "the hub closed the link"),
        (
            255,
            "Timeout, server boxa not responding.",
            "",
            "the link's child exited 255: Timeout, server boxa not responding.",
        ),
        (-9, "", "", "the link's child was killed"),
        (
            -9,
            "",
            "no answer to the link's keepalive within 3s",
            "no answer to the link's keepalive within 3s",
        ),
    ],
)
def test_end_reason(rc: int, stderr: str, keepalive: str, want: str) -> None:
    assert links.end_reason(rc, stderr, keepalive) == want


def test_offer_names_the_state_of_a_down_link_in_a_hint_after_the_d4_sentence() -> None:
    """D4's sentence ends at ``(no link from: <boxes>)`` byte for byte; the links' state is the answer's
    hint, which the sender prints on the next line (issue 28 item 5)."""
    since = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    got = hub.offer_outcome(
        "bob", [], ["boxb", "boxc"], [], 3.0, down={"boxb": (since, "the hub closed the link")}
    )
    # the D4 sentence ends at the boxes (behaviour 2.3); the state of their links is the answer's hint
    assert got == {
        "error": "no box knows that handle: bob (no link from: boxb, boxc)",
        "code": "not_here",
        "hint": "the link from boxb is down since 2027-01-15T08:00:00Z: the hub closed the link",
    }
    both = hub.offer_outcome(
        "bob", [], ["boxb", "boxc"], [], 3.0, down={"boxb": (since, "x"), "boxc": (since + 60, "y")}
    )
    assert both["hint"] == (
        "the link from boxb is down since 2027-01-15T08:00:00Z: x; "
        "the link from boxc is down since 2027-01-15T08:01:00Z: y"
    )


FRESH = _clock.stamp(1_000_000.0)
STALE_STAMP = _clock.stamp(1_000_000.0 - 601)


def doc(**agents: dict[str, Any]) -> dict[str, Any]:
    return {"agents": agents}


@pytest.mark.parametrize(
    ("to", "frm", "home", "want"),
    [
        ("../x", "s", False, ("bad_handle", 'not a handle: "../x"')),  # 1 before 2
        ("", "s", True, ("bad_handle", 'not a handle: ""')),
        (None, "s", True, ("bad_handle", 'not a handle: ""')),
        ('a"b', "s", True, ("bad_handle", 'not a handle: "a\\"b"')),
        ("../x", "\x1b", True, ("bad_handle", 'not a handle: "../x"')),  # to before from
        ("h", "\x1b[2J", False, ("bad_handle", 'the sender is not a handle: "\\u001b[2J"')),  # from before 2
        ("h", None, True, ("bad_handle", 'the sender is not a handle: ""')),
        ("h", "a\nb", True, ("bad_handle", 'the sender is not a handle: "a\\nb"')),
        ("h", "\u202e", True, ("bad_handle", 'the sender is not a handle: "\u202e"')),
        ("h", "s", False, ("not_here", "no box knows that handle: h")),
        ("h", "s", True, None),
    ],
)
def test_verdict_steps_1_2(to: object, frm: object, home: bool, want: tuple[str, str] | None) -> None:
    got = ops.check_handles(to, frm, home)
    assert (None if got is None else (got["code"], got["error"])) == want


@pytest.mark.parametrize(
    ("registry", "want"),
    [
        (None, ("not_here", "no box knows that handle: h")),
        (
            RegistryUnreadable("x"),
            ("file_failed", "the registry could not be read, so @h is unverified; nothing was filed"),
        ),
        (
            {"no": "agents"},
            ("file_failed", "the registry could not be read, so @h is unverified; nothing was filed"),
        ),
        (doc(), ("not_here", "no box knows that handle: h")),
        (doc(h={"host": "", "last_seen": FRESH}), ("not_here", "no box knows that handle: h")),
        (doc(h={"last_seen": FRESH}), ("not_here", "no box knows that handle: h")),
        (doc(h={"host": "b", "last_seen": STALE_STAMP}), ("no_live_session", "no live session holds @h")),
        (doc(h={"host": "b", "last_seen": "yesterday"}), ("no_live_session", "no live session holds @h")),
        (doc(h={"host": "b", "last_seen": FRESH}), None),
    ],
)
def test_verdict_steps_4_6(registry: object, want: tuple[str, str] | None) -> None:
    got = ops.registry_verdict("h", registry, 1_000_000.0)  # type: ignore[arg-type]
    assert (None if got is None else (got["code"], got["error"])) == want
    if got is not None and got["code"] == "not_here":
        assert got[ops.UNLISTED] is True  # the hub offers these


class _Rows:
    def holder_of(self, handle: str) -> str | None:
        return "row-7" if handle == "taken" else None

    def exists(self, workspace_id: str) -> bool:
        return workspace_id == "row-7"

    def declare(self, workspace_id: str, handle: str) -> dict[str, Any]:
        return {"ok": True}


@pytest.mark.parametrize(
    ("ws", "h", "rows", "want"),
    [
        ("", "free", ops.NoRows(), {"ok": True}),
        ("", "taken", _Rows(), {"error": "@taken is held by row row-7", "code": "held_by_row"}),
        ("", "../x", ops.NoRows(), {"error": 'invalid handle: "../x"', "code": "bad_handle"}),
        ("w1", "free", ops.NoRows(), {"error": 'unknown workspace: "w1"', "code": "unknown_workspace"}),
        ("row-7", "free", _Rows(), {"ok": True}),
    ],
)
def test_join(ws: str, h: str, rows: ops.JoinRows, want: dict[str, Any]) -> None:
    assert ops.join_verdict(ws, h, rows) == want


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"protocol": 3, "role": "cli", "host": "a"}, None),
        ({"protocol": 3, "role": "link", "host": "a"}, None),
        ({"protocol": 3, "role": "fe", "host": "a"}, None),
        ({"protocol": 2, "role": "cli", "host": "a"}, "protocol_mismatch"),
        ({"protocol": 3, "role": "root", "host": "a"}, "bad_hello"),
        ({"protocol": 3, "role": "cli", "host": ""}, "bad_hello"),
    ],
)
def test_hello_verdict(payload: dict[str, Any], code: str | None) -> None:
    got = server.hello_verdict(payload)
    assert (None if got is None else got[0]) == code


def test_changed_files() -> None:
    a = {"x.py": (1, 10), "y.py": (2, 20)}
    assert dprocess.changed_files(a, dict(a)) == []
    assert dprocess.changed_files(a, {"x.py": (1, 11), "z.py": (3, 3)}) == ["x.py", "y.py", "z.py"]
    assert "restart it" in dprocess.restart_text(["a.py", "b.py", "c.py", "d.py"])


class _Writer:
    """Stands in for the link child's stdin: records what the link writes."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, b: bytes) -> None:
        self.data += b

    async def drain(self) -> None:
        return None


def _hello_through(chunks: list[bytes]) -> tuple[Any, list[Any], bytes]:
    import asyncio

    async def go() -> tuple[Any, list[Any], bytes]:
        reader = asyncio.StreamReader()
        for c in chunks:
            reader.feed_data(c)
        reader.feed_eof()
        w = _Writer()
        up = links.Uplink("unix:/x", "boxb", {}, None, asyncio.Event())  # type: ignore[arg-type]
        decoder, queue = await up._hello(reader, server.Channel(w, "t"))  # type: ignore[arg-type]
        return decoder, queue, w.data

    return asyncio.run(go())


HELLO_OK = b'{"v":1,"id":0,"kind":"res","op":"hello","payload":{"ok":true}}\n'
OFFER = b'{"v":1,"id":7,"kind":"req","op":"comm.file","payload":{"to":"h"}}\n'


def test_link_skips_a_login_banner_and_keeps_what_follows_hello() -> None:
    _d, queue, sent = _hello_through(
        [b"Welcome to boxa\n", b"\n  last login: x\n" + HELLO_OK[:20], HELLO_OK[20:] + OFFER]
    )
    hello = json.loads(sent)
    assert hello["op"] == "hello" and hello["payload"]["role"] == "link"
    assert hello["payload"]["name"] == "sotd-boxb" and hello["payload"]["client_id"].startswith(
        "sotd-hub-link-"
    )
    assert [e.id for e in queue] == [7]


def test_link_hello_refused_and_closed() -> None:
    refused = b'{"v":1,"id":0,"kind":"res","op":"hello","payload":{"error":"no","code":"forbidden"}}\n'
    with pytest.raises(links.LinkError, match="hello refused: no"):
        _hello_through([b"banner\n" + refused])
    with pytest.raises(links.LinkError, match="closed before the hub answered hello"):
        _hello_through([b"banner only\n"])


@pytest.mark.parametrize(
    ("expires", "now", "lock_wait", "want"),
    [
        (None, 100.0, 2.0, 2.0),  # a frame without a deadline (0.6.6 senders): the whole lock wait
        ("soon", 100.0, 2.0, 2.0),  # not a number: ignored
        (True, 100.0, 2.0, 2.0),  # a bool is not a deadline
        (110.0, 100.0, 2.0, 2.0),  # plenty of time: the lock wait
        (101.25, 100.0, 2.0, 1.0),  # 1.25 s left, less the 0.25 s answer margin
        (100.25, 100.0, 2.0, None),  # nothing left after the margin: refuse, file nothing
        (99.0, 100.0, 2.0, None),  # already past: refuse
    ],
)
def test_expires_budget(expires: object, now: float, lock_wait: float, want: float | None) -> None:
    got = ops.budget(expires, now, lock_wait)
    assert got == (pytest.approx(want) if want is not None else None)


def _topo(text: str) -> Any:
    from sotd import topology

    return topology.parse(text.encode())


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        (None, None, []),
        ('hub = "a"\n[boxes.b]\n', 'hub = "a"\n[boxes.b]\n', []),
        (
            'hub = "a"\n[boxes.b]\n',
            'hub = "a"\n[boxes.b]\n[boxes.c]\nssh = "c.lan"\n',
            ["box added: c (ssh c.lan)"],
        ),
        ('hub = "a"\n[boxes.b]\n[boxes.c]\n', 'hub = "a"\n[boxes.b]\n', ["box removed: c"]),
        (
            'hub = "a"\n[boxes.b]\n',
            'hub = "b"\n[boxes.b]\nssh = "b2"\n',
            ["hub a -> b", "box b: ssh b -> ssh b2"],
        ),
        (None, 'hub = "a"\n[boxes.b]\n', ["hosts.toml appeared: hub a, boxes b"]),
        ('hub = "a"\n', None, ["hosts.toml is gone (the hub was a)"]),
    ],
)
def test_topology_changes(old: str | None, new: str | None, want: list[str]) -> None:
    from sotd import topology

    a = _topo(old) if old is not None else None
    b = _topo(new) if new is not None else None
    assert topology.describe_changes(a, b) == want


@pytest.mark.parametrize(
    ("record", "want"),
    [
        (
            {"pid": 42, "socket": "/r/sotd.sock"},
            (
                "another sotd daemon already serves the comm folder /h/.sot-comm as host boxb (pid 42, socket "
                "/r/sotd.sock)",
                "stop it first: sotd daemon stop --socket /r/sotd.sock",
            ),
        ),
        (
            None,
            (
                "another sotd daemon already serves the comm folder /h/.sot-comm as host boxb (its record could "
                "not be read)",
                "find it: fuser -v /h/.sot-comm/state/daemon-boxb.lock",
            ),
        ),
    ],
)
def test_second_daemon_refusal(record: dict[str, Any] | None, want: tuple[str, str]) -> None:
    from sotd.daemon import onedaemon

    assert onedaemon.refusal_text("/h/.sot-comm", "boxb", record) == want


@pytest.mark.parametrize(
    ("info", "want"),
    [
        ({"link": None, "links": []}, []),
        (
            {"link": {"endpoint": "ssh:a/a", "up": True, "since": "T1", "error": ""}, "links": []},
            ["link to the hub at ssh:a/a: up since T1"],
        ),
        (
            {"link": {"endpoint": "ssh:a/a", "up": False, "since": "T2", "error": "the hub closed the link"}},
            ["link to the hub at ssh:a/a: down since T2: the hub closed the link"],
        ),
        ({"links": ["boxb", "boxc"]}, ["links from: boxb, boxc"]),
    ],
)
def test_daemon_status_link_lines(info: dict[str, Any], want: list[str]) -> None:
    from sotd.daemon import command

    assert command.status_lines(info) == want


@pytest.mark.parametrize(
    ("exit_code", "keepalive", "want"),
    [
        (0, False, False),  # the hub closed the link: the connection is fine, the master kept
        (1, False, False),  # the far bridge refused (no daemon socket: the hub is restarting)
        (127, False, False),  # no sotd on the far side
        (255, False, True),  # ssh itself failed: the connection is lost or never was
        (None, False, True),  # it hung until it was killed
        (0, True, True),  # a keepalive went unanswered
    ],
)
def test_master_suspect(exit_code: int | None, keepalive: bool, want: bool) -> None:
    assert links.master_suspect(exit_code, keepalive) is want


def test_remember_keeps_the_last_box_and_forgets_the_oldest_first() -> None:
    where: dict[str, str] = {}
    hub.remember(where, "bob", "boxb", cap=2)
    hub.remember(where, "cora", "boxc", cap=2)
    hub.remember(where, "bob", "boxd", cap=2)  # filed elsewhere now: the newest entry
    hub.remember(where, "dan", "boxb", cap=2)  # over the cap: cora (the least recently filed) goes
    assert where == {"bob": "boxd", "dan": "boxb"}
    hub.remember(where, "bob", None, cap=2)
    assert where == {"dan": "boxb"}


@pytest.mark.parametrize(
    ("known", "linked", "want"),
    [
        (None, ["c", "b"], (["b", "c"], [])),  # nothing known: every linked box at once
        ("c", ["c", "b", "d"], (["c"], ["b", "d"])),  # the box that filed it last, alone first
        ("z", ["c", "b"], (["b", "c"], [])),  # known but not linked: every linked box
    ],
)
def test_offer_order(known: str | None, linked: list[str], want: tuple[list[str], list[str]]) -> None:
    assert hub.offer_order(known, linked) == want


def test_a_known_box_whose_link_is_down_leads_the_hint() -> None:
    since = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    got = hub.offer_outcome(
        "bob",
        [("boxc", {"error": "no box knows that handle: bob", "code": "not_here"})],
        ["boxb", "boxc", "boxd"],
        ["boxc"],
        3.0,
        down={
            "boxb": (since, "its connection ended"),
            "boxd": (since, "it has not linked since this daemon started"),
        },
        known="boxb",
    )
    assert got == {
        "error": "no box knows that handle: bob (no link from: boxb, boxd)",
        "code": "not_here",
        "hint": "@bob was last filed on boxb, and the link from boxb is down since 2027-01-15T08:00:00Z: its "
        "connection ended; the link from boxd is down since 2027-01-15T08:00:00Z: it has not linked since this "
        "daemon started",
    }
