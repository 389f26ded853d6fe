"""Issue 25 item 1: what reaches a terminal is inert, and a ``comm.file`` ``from`` must be a handle.

Every test runs the real ``sotd`` as a subprocess (and a real daemon for the wire) and compares exact
bytes: a hostile sender's escape sequences (window title and clear screen, an OSC 52 clipboard write, CR
with erase-line, the C1 CSI, a right-to-left override, a lone CR) show in ``poll``, ``list``, ``status``'s
refusal, ``doctor`` and the error lines as their ``\\u`` escapes (the rule: ``sotd.text.inert``,
docs/commands.md "What reaches a terminal"), while the inbox keeps exactly the bytes the protocol writes
(the 0.6.6 reference's jq line) and a text with none of them shows as the reference shows it. A daemon
refuses a ``from`` that is not a handle with ``bad_handle``, files nothing, and serves a good client next.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from sotd import _clock
from sotd.formats import cursor, showline
from sotd.wire.framing import Envelope, encode
from tests.conftest import SOTD, Comm, Session
from tests.fakes.fake_daemon import FakeDaemon
from tests.integration.cli_support import put_registry, registry
from tests.integration.test_daemon import (
    HELLO,
    Daemon,
    folder,
    hub_sock_path,
    line,
    linked,
    live,
    put_agents,
    raw,
    start,
    write_hosts,
)

pytestmark = pytest.mark.integration

# (id, the text sent, the msg as the inbox line holds it -- jq's escaping, byte for byte --, how sotd shows it)
ATTACKS = [
    ("title-clear", "\x1b]0;TITLE\x07\x1b[2J", rb"\u001b]0;TITLE\u0007\u001b[2J", rb"\u001b]0;TITLE\u0007\u001b[2J"),
    ("osc52-clipboard", "\x1b]52;c;cHduZWQ=\x07", rb"\u001b]52;c;cHduZWQ=\u0007", rb"\u001b]52;c;cHduZWQ=\u0007"),
    ("cr-erase-line", "safe\r\x1b[Kforged", rb"safe\r\u001b[Kforged", rb"safe\u000d\u001b[Kforged"),
    ("c1-csi", "\u009b2J", b"\xc2\x9b2J", rb"\u009b2J"),
    ("rlo", "abc\u202edcba", b"abc\xe2\x80\xaedcba", rb"abc\u202edcba"),
    ("lone-cr", "line one\rXX", rb"line one\rXX", rb"line one\u000dXX"),
]  # fmt: skip
IDS = [a[0] for a in ATTACKS]
# the raw forms none of which may reach a terminal
RAW = (b"\x1b", b"\x07", b"\r", b"\xc2\x9b", b"\xe2\x80\xae")


def no_raw(data: bytes) -> None:
    assert not any(r in data for r in RAW), data


def run_bytes(
    s: Session, *args: str, prefix: tuple[str, ...] = ("comm",), **env: str
) -> subprocess.CompletedProcess[bytes]:
    """``sotd <prefix> <args>`` as session ``s``, with its output as bytes (nothing decoded for us)."""
    return subprocess.run(
        [SOTD, *prefix, *args],
        env=dict(s.env, **env),
        cwd=s.root,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def ab(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


# ------------------------------------------------------------------------------------------------ poll


@pytest.mark.parametrize(("_id", "text", "held", "shown"), ATTACKS, ids=IDS)
def test_poll_shows_each_attack_escaped_and_the_inbox_keeps_the_protocols_bytes(
    ab: Any, _id: str, text: str, held: bytes, shown: bytes
) -> None:
    comm, a, b = ab
    assert b.run("send", "@alpha", text).code == 0
    data = comm.inbox_bytes("alpha")
    ts = json.loads(data)["ts"].encode()
    # the line the protocol writes (the 0.6.6 reference's jq line), unchanged by the display rule
    assert data == b'{"from":"beta","to":"alpha","repo":"beta","msg":"' + held + b'","ts":"' + ts + b'"}\n'
    p = run_bytes(a, "poll")
    assert (p.returncode, p.stderr) == (0, b""), p
    assert p.stdout == b"[" + ts + b"] [beta:beta] " + shown + b"\n"
    no_raw(p.stdout)
    # the reference's display shows the text raw: here, and only here, sotd departs from it
    assert showline.show_line(data.rstrip(b"\n")) == f"[{ts.decode()}] [beta:beta] {text}"
    assert comm.inbox_bytes("alpha") == data
    assert cursor.read(comm.layout, "alpha").startswith("1 ")
    assert run_bytes(a, "poll").stdout == b"No new messages.\n"


def test_poll_of_text_without_controls_is_the_references_display_byte_for_byte(ab: Any) -> None:
    """Newline and tab inside mail, non-ASCII text, the bidi marks and a literal backslash escape: shown
    exactly as the 0.6.6 reference's jq shows them (``showline``), and the inbox line is jq's."""
    comm, a, b = ab
    text = "caf\u00e9 \u6f22\ttab\nsecond line \u200f\u200e\u061c \\u001b"
    assert b.run("send", "@alpha", text).code == 0
    data = comm.inbox_bytes("alpha")
    assert (
        b'"msg":"caf\xc3\xa9 \xe6\xbc\xa2\\ttab\\nsecond line \xe2\x80\x8f\xe2\x80\x8e\xd8\x9c \\\\u001b"'
        in data
    )
    p = run_bytes(a, "poll")
    assert p.returncode == 0, p
    assert p.stdout == showline.show_line(data.rstrip(b"\n")).encode() + b"\n"  # type: ignore[union-attr]
    assert p.stdout.endswith(" \u6f22\ttab\nsecond line \u200f\u200e\u061c \\u001b\n".encode())


def test_poll_escapes_controls_in_every_field_of_a_planted_line(ab: Any) -> None:
    """A line another writer appended by hand, controls in ``ts``, ``from`` and ``repo`` too."""
    comm, a, _ = ab
    planted = (
        b'{"from":"b\\u001b[31m","to":"alpha","repo":"r\xc2\x9b","msg":"m\\r\\u001b[K\xe2\x80\xae",'
        b'"ts":"\\u0007T"}\n'
    )
    with open(comm.layout.inbox("alpha"), "ab") as f:
        f.write(planted)
    p = run_bytes(a, "poll")
    assert p.stdout == rb"[\u0007T] [b\u001b[31m:r\u009b] m\u000d\u001b[K\u202e" + b"\n", p
    assert comm.inbox_bytes("alpha") == planted


# ------------------------------------------------------------------------------------------------ list


LIST_ATTACKS = [
    *ATTACKS,
    ("newline-row", "r\n  @forged              testhost", b"", rb"r\u000a  @forged              testhost"),
]


@pytest.mark.parametrize(("_id", "text", "_held", "shown"), LIST_ATTACKS, ids=[a[0] for a in LIST_ATTACKS])
def test_list_shows_planted_registry_fields_escaped(
    ab: Any, _id: str, text: str, _held: bytes, shown: bytes
) -> None:
    """``repo``, ``expertise``, ``state``, ``summary`` and the handle itself planted in the registry (as
    another client could write them): each shows as one field with its escapes; the registry is untouched."""
    comm, a, _ = ab
    doc = registry(comm)
    row = {"host": "testhost", "repo": text, "expertise": [text, "ok"], "state": text, "summary": text}
    doc["agents"]["evil"] = dict(row, last_seen=_clock.stamp(), root="/nowhere")
    doc["agents"]["e" + text] = dict(row, repo="r", expertise=[], last_seen=_clock.stamp(), root="/x")
    put_registry(comm, doc)
    with open(comm.layout.registry, "rb") as f:
        before = f.read()
    p = run_bytes(a, "list")
    assert p.returncode == 0, p
    no_raw(p.stdout)
    esc = shown.decode()
    lines = p.stdout.decode().splitlines()
    i = lines.index(f"  @{'evil':<18} {'testhost':<10} {esc:<14} {'live':<12} [{esc}/ok]")
    assert lines[i + 1] == f"      [{esc}] {esc}"
    j = lines.index(f"  @{'e' + esc:<18} {'testhost':<10} {'r':<14} {'live':<12} []")
    assert lines[j + 1] == f"      [{esc}] {esc}"
    assert not any(x.startswith("  @forged") for x in lines)
    with open(comm.layout.registry, "rb") as f:
        assert f.read() == before


# ---------------------------------------------------------------------------------- the error lines


STATUS_VERBS = "prompt|stop|interrupted|working|idle|blocked|done|waiting"
FIELD_ATTACKS = [*ATTACKS, ("newline", "v\nforged line", b"", rb"v\u000aforged line")]


@pytest.mark.parametrize(("_id", "text", "_held", "shown"), FIELD_ATTACKS, ids=[a[0] for a in FIELD_ATTACKS])
def test_status_echoes_its_bad_verb_escaped(ab: Any, _id: str, text: str, _held: bytes, shown: bytes) -> None:
    comm, a, _ = ab
    with open(comm.layout.registry, "rb") as f:
        before = f.read()
    p = run_bytes(a, "status", text, "words")
    assert (p.returncode, p.stdout) == (2, b""), p
    assert (
        p.stderr == b"sotd comm status: invalid verb '" + shown + b"' (want " + STATUS_VERBS.encode() + b")\n"
    )
    with open(comm.layout.registry, "rb") as f:
        assert f.read() == before


@pytest.mark.parametrize(("_id", "text", "_held", "shown"), FIELD_ATTACKS, ids=[a[0] for a in FIELD_ATTACKS])
def test_an_unknown_verb_and_a_doctor_argument_are_echoed_escaped(
    ab: Any, _id: str, text: str, _held: bytes, shown: bytes
) -> None:
    """The two printers of ``sotd.cli.main``: a refused command line (``_refuse``) and a raised error
    (``_print_error``, here doctor's usage error)."""
    _, a, _ = ab
    p = run_bytes(a, text)
    assert (p.returncode, p.stdout) == (2, b""), p
    first = p.stderr.split(b"\n")[0]
    assert first == b"sotd comm: unknown verb '" + shown + b"' (see: sotd comm --help)"
    no_raw(p.stderr)
    d = run_bytes(a, text, prefix=("doctor",))
    assert (d.returncode, d.stdout) == (2, b""), d
    assert d.stderr == b"sotd doctor: unexpected argument '" + shown + b"' (see: sotd doctor --help)\n"


def test_a_send_to_a_bad_handle_echoes_it_escaped(ab: Any) -> None:
    """A raised error whose sentence quotes the word twice (as typed, and JSON-quoted)."""
    comm, _, b = ab
    p = run_bytes(b, "send", "@x\x1b]0;T\x07\u009b\u202e", "hi")
    assert p.returncode == 1, p
    assert (
        p.stderr
        == rb'FAILED -> @x\u001b]0;T\u0007\u009b\u202e: not a handle: "x\u001b]0;T\u0007\u009b\u202e"' + b"\n"
    )
    assert not os.path.exists(comm.layout.inbox("x\x1b]0;T\x07\u009b\u202e"))


# ---------------------------------------------------------------------------------------------- doctor


@pytest.mark.parametrize(("_id", "text", "_held", "shown"), ATTACKS, ids=IDS)
def test_doctor_shows_a_daemons_version_escaped(
    ab: Any, _id: str, text: str, _held: bytes, shown: bytes
) -> None:
    """The daemon at this box's socket (a fake here, speaking the real wire) answers ``version.query``
    with a version holding the attack: ``doctor`` prints it escaped, and ``--json`` still reads back to
    the very text (each escape is a JSON string escape of the same character)."""
    _, a, _ = ab
    sock = a.env["SOT_SOCKET"]
    with FakeDaemon(sock) as fake:
        fake.answer = {"daemon": {"host": "testhost", "version": text, "restart_requested": ""}}
        p = run_bytes(a, prefix=("doctor",))
        j = run_bytes(a, "--json", prefix=("doctor",))
    assert p.returncode == 1, p
    no_raw(p.stdout)
    want = f"PROBLEM daemon_version: the daemon at {sock} runs sotd ".encode() + shown + b", this command is "
    assert any(x.startswith(want) for x in p.stdout.split(b"\n")), p.stdout
    no_raw(j.stdout)
    found = {f["code"]: f["what"] for f in json.loads(j.stdout)["findings"]}
    assert found["daemon_version"].startswith(f"the daemon at {sock} runs sotd {text}, this command is ")


@pytest.mark.parametrize(("_id", "text", "_held", "shown"), ATTACKS, ids=IDS)
def test_daemon_status_shows_a_daemons_version_escaped(
    ab: Any, _id: str, text: str, _held: bytes, shown: bytes
) -> None:
    """``sotd daemon status`` (``daemon/command.py``, which writes its own lines) prints a peer's version
    string through the same rule: the status line holds the escapes, never the raw bytes."""
    _, a, _ = ab
    sock = a.env["SOT_SOCKET"]
    with FakeDaemon(sock) as fake:
        fake.answer = {"daemon": {"host": "testhost", "version": text, "restart_requested": ""}}
        p = run_bytes(a, "status", prefix=("daemon",))
    assert p.returncode == 0, p
    no_raw(p.stdout + p.stderr)
    assert b", version " + shown + b", protocol " in p.stdout.split(b"\n")[0], p.stdout


# ------------------------------------------------------------------------------ comm.file's ``from``


BAD_FROM = [
    ("\x1b]0;T\x07\x1b[2J", 'the sender is not a handle: "\\u001b]0;T\\u0007\\u001b[2J"'),
    ("a\nb", 'the sender is not a handle: "a\\nb"'),
    ("x" * 4096, 'the sender is not a handle: "' + "x" * 128 + '"\u2026'),
    ("\u009b\u202e", 'the sender is not a handle: "\u009b\u202e"'),
    ("../up", 'the sender is not a handle: "../up"'),
    ("", 'the sender is not a handle: ""'),
    (None, 'the sender is not a handle: ""'),  # no ``from`` at all
    (7, 'the sender is not a handle: "7"'),
]


def bad_from_requests(first_id: int, to: str) -> bytes:
    frames = b""
    for i, (frm, _) in enumerate(BAD_FROM):
        payload: dict[str, Any] = {"to": to, "text": "forged"}
        if frm is not None:
            payload["from"] = frm
        frames += line(first_id + i, "comm.file", payload)
    return frames


def answers_of(s: Any, n: int) -> list[bytes]:
    buf = b""
    while buf.count(b"\n") < n:
        data = s.recv(65536)
        if not data:
            break
        buf += data
    return buf.split(b"\n")[:n]


def test_daemon_refuses_a_from_that_is_not_a_handle_and_files_nothing(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    put_agents(lay, alice=live())
    d = start(daemons, work, "a", lay.home, "testhost")
    with raw(d.sock) as s:
        s.sendall(line(1, "hello", HELLO) + bad_from_requests(2, "alice"))
        got = sorted(answers_of(s, 1 + len(BAD_FROM)))
        # the same connection is still served after every refusal
        s.sendall(line(99, "comm.file", {"from": "beta", "to": "alice", "text": "after"}))
        after = answers_of(s, 1)
    want = sorted(
        encode(Envelope(2 + i, "res", "comm.file", {"error": text, "code": "bad_handle"})).rstrip(b"\n")
        for i, (_, text) in enumerate(BAD_FROM)
    )
    assert [x for x in got if b'"op":"hello"' not in x] == want
    assert after == [encode(Envelope(99, "res", "comm.file", {"ok": True})).rstrip(b"\n")]
    with open(lay.inbox("alice"), "rb") as f:
        [filed] = f.read().splitlines()
    assert json.loads(filed)["from"] == "beta" and b"forged" not in filed
    # a good client on a new connection is served too
    assert d.file("alice", "second") == {"ok": True}
    log = d.logtext()
    assert log.count("comm.file from client refused: the sender is not a handle: ") == len(BAD_FROM)
    assert "\x1b" not in log and "\u009b" not in log and "\u202e" not in log


def test_a_link_cannot_forward_a_from_that_is_not_a_handle(tmp_path: Any, daemons: list[Daemon]) -> None:
    """A guest's link up to the hub (a fake link speaking the wire, role ``link``): the hub refuses what
    the link carries with a bad ``from`` just as a client's, files nothing, and keeps the link."""
    work = str(tmp_path)
    write_hosts(work, hub_sock_path(work))
    hub_lay = folder(work, "a")
    put_agents(hub_lay, alpha=live("boxa"))
    hub = start(daemons, work, "hub", hub_lay.home, "boxa")
    with raw(hub.sock) as s:
        s.sendall(line(1, "hello", dict(HELLO, role="link", host="boxb", client_id="sotd-hub-link-1")))
        assert json.loads(answers_of(s, 1)[0])["payload"]["ok"] is True
        s.sendall(bad_from_requests(2, "alpha"))
        got = sorted(answers_of(s, len(BAD_FROM)))
        s.sendall(line(50, "comm.file", {"from": "gamma", "to": "alpha", "text": "good", "forwarded": True}))
        after = answers_of(s, 1)
    assert got == sorted(
        encode(Envelope(2 + i, "res", "comm.file", {"error": text, "code": "bad_handle"})).rstrip(b"\n")
        for i, (_, text) in enumerate(BAD_FROM)
    )
    assert after == [encode(Envelope(50, "res", "comm.file", {"ok": True})).rstrip(b"\n")]
    with open(hub_lay.inbox("alpha"), "rb") as f:
        [filed] = f.read().splitlines()
    assert json.loads(filed)["from"] == "gamma"
    assert linked(hub, "boxb")
    assert hub.logtext().count("comm.file from link:boxb refused: the sender is not a handle: ") == len(
        BAD_FROM
    )
