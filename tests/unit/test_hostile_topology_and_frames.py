"""Issue 25, the pure decisions: a hosts.toml is data, never a crash; frames the daemon builds are held to
the 1 MiB line bound where they are built; a long quoted answer is cut to fit.

Tables over ``topology.parse`` / ``endpoint_problem`` (every failure one ``TopologyError`` with the exact
sentence, one line), ``framing.request_length``, ``hub.frame_too_long``, ``answers.cut_text`` /
``quoted_answer``, ``serverconn.fitted_answer`` / ``answer_line``, ``process.kept_text`` and the status line.
The real-process side is tests/integration/test_hostile_topology_and_frames.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sotd import topology
from sotd.errors import TopologyUnreadable
from sotd.wire import answers, framing, serverconn

pytestmark = pytest.mark.unit

PLAIN = "[a-z0-9][a-z0-9._-]*"
SENTENCE = "this box's hosts.toml cannot be read, so it names no hub: "


def box_endpoint(value: str) -> bytes:
    return b'hub = "boxa"\n[boxes.boxa]\nendpoint = ' + value.encode() + b"\n"


DEEP = b'hub = "boxa"\nx = ' + b"[" * 500 + b"]" * 500 + b"\n"

BAD_FILES = [
    (DEEP, "hosts.toml is nested too deep to read"),
    (
        box_endpoint('"unix:/run/h\\u0000.sock"'),
        "[boxes.boxa] endpoint holds a control character (got 'unix:/run/h\\x00.sock')",
    ),
    (
        box_endpoint('"unix:/run/h\\n.sock"'),
        "[boxes.boxa] endpoint holds a control character (got 'unix:/run/h\\n.sock')",
    ),
    (
        box_endpoint('"ssh:Boxa/boxa"'),
        f"[boxes.boxa] endpoint ssh:<target>[/<host>] needs a target that is a plain host name {PLAIN} "
        "(got 'ssh:Boxa/boxa')",
    ),
    (
        box_endpoint('"ssh:"'),
        f"[boxes.boxa] endpoint ssh:<target>[/<host>] needs a target that is a plain host name {PLAIN} "
        "(got 'ssh:')",
    ),
    (
        box_endpoint('"ssh:/boxa"'),
        f"[boxes.boxa] endpoint ssh:<target>[/<host>] needs a target that is a plain host name {PLAIN} "
        "(got 'ssh:/boxa')",
    ),
    (
        box_endpoint('"ssh:-oProxyCommand=touch /tmp/x/boxa"'),
        f"[boxes.boxa] endpoint ssh:<target>[/<host>] needs a target that is a plain host name {PLAIN} "
        "(got 'ssh:-oProxyCommand=touch /tmp/x/boxa')",
    ),
    (
        box_endpoint('"ssh:boxa/Boxa"'),
        f"[boxes.boxa] endpoint ssh:<target>/<host> needs a host that is a plain host name {PLAIN} "
        "(got 'ssh:boxa/Boxa')",
    ),
    (
        box_endpoint('"ssh:boxa/"'),
        f"[boxes.boxa] endpoint ssh:<target>/<host> needs a host that is a plain host name {PLAIN} "
        "(got 'ssh:boxa/')",
    ),
    (
        box_endpoint('"unix:run/h.sock"'),
        "[boxes.boxa] endpoint unix:<path> needs an absolute path (got 'unix:run/h.sock')",
    ),
    (
        box_endpoint('"tcp:1.2.3.4:5"'),
        "[boxes.boxa] endpoint must be unix:<path> or ssh:<target>[/<host>] (got 'tcp:1.2.3.4:5')",
    ),
    (box_endpoint("5"), "[boxes.boxa] endpoint must be a string (got 5)"),
    (box_endpoint("[1, [2]]"), "[boxes.boxa] endpoint must be a string (got [1, [2]])"),
    (b'hub = "boxa"\n[boxes.boxa]\nssh = 5\n', "[boxes.boxa] ssh must be a plain host name (got 5)"),
    (
        b'hub = "boxa"\n[boxes.boxa]\nssh = "Boxa"\n',
        "[boxes.boxa] ssh must be a plain host name (got 'Boxa')",
    ),
    (b"hub = 5\n", f"hub must be a plain host name {PLAIN} (got 5)"),
    (b"hub = [[[]]]\n", f"hub must be a plain host name {PLAIN} (got [[[]]])"),
    (b'hub = "' + b"x" * 5000 + b'X"\n', f"hub must be a plain host name {PLAIN} (got '" + "x" * 76 + "...)"),
    (b'hub = "boxa"\nboxes = 3\n', "boxes must be a table of [boxes.<host>] tables"),
    (b'hub = "boxa"\nboxes = {a = 3}\n', "[boxes.a] must be a table"),
    (b'hub = "boxa"\n[boxes."a\\u001b[2J"]\n', "box name must be a plain host name (got 'a\\x1b[2J')"),
    (b"\xff\xfe", "hosts.toml is not UTF-8 (invalid start byte at byte 0)"),
    (b'hub = "a"\nx = ' + b"1" * 5000 + b"\n", None),  # int's digit limit: "is not TOML (...)"
    (b"hub = ", None),
]


@pytest.mark.parametrize(("data", "why"), BAD_FILES)
def test_every_bad_hosts_toml_is_one_sentence(data: bytes, why: str | None) -> None:
    with pytest.raises(TopologyUnreadable) as got:
        topology.parse(data)
    e = got.value
    assert e is not None and isinstance(e, topology.TopologyError)
    assert e.code == "topology_unreadable" and e.exit_status == 1
    if why is None:
        assert e.why.startswith("hosts.toml is not TOML (")
    else:
        assert e.why == why
    assert e.message == SENTENCE + e.why
    assert "\n" not in e.message and len(e.message) < 400  # one line, never the whole bad value


@pytest.mark.parametrize(
    ("endpoint", "good"),
    [
        ("unix:/run/sotd/sotd.sock", True),
        ("ssh:boxa", True),
        ("ssh:boxa.lan/boxa", True),
        ("ssh:10.0.0.1/boxa", True),
        ("unix:/run/a\tb", False),
        ("unix:/run/a\x7fb", False),
        ("unix:", False),
        ("ssh:box a/boxa", False),
        ("ssh:boxa/box/a", False),
        ("SSH:boxa", False),
    ],
)
def test_endpoint_problem(endpoint: str, good: bool) -> None:
    assert (topology.endpoint_problem(endpoint) == "") is good


def test_every_endpoint_a_topology_names_can_be_dialled() -> None:
    """The shape ``parse`` accepts is never looser than the dial's (``client.dial.parse_endpoint``)."""
    from sotd.client import dial

    for ep in ("unix:/run/h.sock", "ssh:boxa", "ssh:boxa.lan/boxa"):
        t = topology.parse(box_endpoint(json.dumps(ep)))
        assert topology.relay_endpoint(t, "boxb") == ep
        assert dial.parse_endpoint(ep)[0] is not None


def test_a_file_past_the_read_bound_is_refused(tmp_path: Any) -> None:
    p = tmp_path / "hosts.toml"
    p.write_bytes(b'hub = "boxa"\n' + b"#" * topology.READ_MAX)
    with pytest.raises(TopologyUnreadable) as got:
        topology.load({"SOT_HOSTS_TOML": str(p)})
    assert got.value.why == f"{p} is larger than {topology.READ_MAX} bytes"


# ------------------------------------------------------------------------------------------ frames


def comm_file(text_len: int, **extra: Any) -> dict[str, Any]:
    return {"from": "alice", "to": "gamma", "text": "x" * text_len, "broadcast": False, **extra}


def test_request_length_is_the_widest_line() -> None:
    p = comm_file(10)
    env = framing.Envelope(framing.U64_MAX, "req", "comm.file", p)
    assert framing.request_length("comm.file", p) == len(framing.encode(env)) - 1
    assert framing.request_length("comm.file", p) > framing.line_length(
        framing.Envelope(1, "req", "comm.file", p)
    )


def _largest_legal_text() -> int:
    """The text length of the largest comm.file a client may send (its line exactly at the bound)."""
    base = framing.line_length(framing.Envelope(1, "req", "comm.file", comm_file(0)))
    return framing.MAX_LINE - base


@pytest.mark.parametrize(
    ("text_len", "fits"),
    [(1000, True), (framing.MAX_LINE - 200, True), (None, False), (framing.MAX_LINE, False)],
)
def test_frame_too_long(text_len: int | None, fits: bool) -> None:
    from sotd.daemon import hub

    n = _largest_legal_text() if text_len is None else text_len
    frame = comm_file(n, forwarded=True, expires=1999999999.123)
    why = hub.frame_too_long(frame, "hand it to the hub")
    if fits:
        assert why == ""
        return
    size = framing.request_length("comm.file", frame)
    assert why == (
        f"the message is too long to hand it to the hub: its frame would be {size} bytes, over the "
        f"{framing.MAX_LINE}-byte line bound (send it in parts)"
    )


def test_the_largest_legal_client_frame_is_one_the_daemon_cannot_forward() -> None:
    """The issue's case: 1,048,568 bytes from a client is legal; with forwarded/expires it is not."""
    frame = comm_file(_largest_legal_text())
    assert framing.line_length(framing.Envelope(1, "req", "comm.file", frame)) == framing.MAX_LINE
    framing.encode(framing.Envelope(1, "req", "comm.file", frame))  # legal: does not raise
    grown = dict(frame, forwarded=True, expires=1999999999.123)
    assert framing.request_length("comm.file", grown) > framing.MAX_LINE


@pytest.mark.parametrize(
    ("text", "limit", "want"),
    [
        ("short", 10, "short"),
        ("x" * 10, 10, "x" * 10),
        ("x" * 11, 10, "x" * 10 + "... (11 characters in all)"),
        ("", 0, ""),
    ],
)
def test_cut_text(text: str, limit: int, want: str) -> None:
    assert answers.cut_text(text, limit) == want


def test_quoted_answer_is_cut() -> None:
    odd = {"odd": "y" * (2 * framing.MAX_LINE)}
    q = answers.quoted_answer(odd)
    assert q.startswith('{"odd": "yyy') and q.endswith(f"... ({len(json.dumps(odd))} characters in all)")
    assert len(q) < answers.QUOTE_MAX + 50
    assert answers.quoted_answer({"a": 1}) == '{"a": 1}'


def test_offer_outcome_quotes_an_odd_answer_within_the_bound() -> None:
    from sotd.daemon import hub

    odd = {"weird": "z" * framing.MAX_LINE}
    out = hub.offer_outcome("gamma", [("boxb", odd)], ["boxb"], ["boxb"], 2.0)
    assert out["code"] == "file_failed"
    assert out["error"].startswith('boxb answered neither ok nor a refusal: {"weird": "zzz')
    framing.encode(framing.Envelope(framing.U64_MAX, "res", "comm.file", out))  # fits


@pytest.mark.parametrize(
    ("payload", "want_code", "want_start"),
    [
        (
            {"error": 'not a handle: "' + '\\"' * framing.MAX_LINE, "code": "bad_handle"},
            "bad_handle",
            "not a handle",
        ),
        ({"error": "e" * (framing.MAX_LINE + 5), "code": "file_failed"}, "file_failed", "eeee"),
        (
            {"ok": True, "big": "b" * framing.MAX_LINE},
            "internal",
            "the answer could not be sent: envelope longer",
        ),
        ({"error": "e" * (framing.MAX_LINE + 5)}, "internal", "the answer could not be sent: "),
    ],
)
def test_an_answer_too_long_is_cut_to_fit(payload: dict[str, Any], want_code: str, want_start: str) -> None:
    data = serverconn.answer_line(framing.U64_MAX, "comm.file", payload)
    assert len(data) - 1 <= framing.MAX_LINE
    env = framing.decode_line(data[:-1])
    assert (env.kind, env.op, env.id) == ("res", "comm.file", framing.U64_MAX)
    assert env.payload["code"] == want_code and env.payload["error"].startswith(want_start)
    assert env.payload["error"].endswith(" characters in all)") == (want_code != "internal")


def test_an_answer_that_fits_is_sent_as_it_is() -> None:
    p = {"error": "no live session holds @gamma", "code": "no_live_session"}
    assert serverconn.answer_line(7, "comm.file", p) == framing.encode(
        framing.Envelope(7, "res", "comm.file", p)
    )


# ------------------------------------------------------------------------------------------ daemon


def test_kept_text_and_the_status_line() -> None:
    from sotd.daemon import command, process

    t = topology.parse(b'hub = "boxa"\n')
    assert (
        process.kept_text(t)
        == "this daemon keeps serving its folder with the topology it read last (hub boxa)"
    )
    assert process.kept_text(None) == (
        "this daemon keeps serving its folder with no topology until the file can be read"
    )
    err = f"{SENTENCE}hosts.toml is nested too deep to read; {process.kept_text(t)}"
    assert command.status_lines({"topology_error": err}) == [
        f"{err}: fix the file (sotd topology path names it), then: sotd daemon reload"
    ]
    assert command.status_lines({"topology_error": ""}) == []


def test_bad_input_from_the_hub_text() -> None:
    from sotd.daemon import links

    assert (
        links.bad_input_text("envelope is not JSON (x)") == "bad input from the hub: envelope is not JSON (x)"
    )
