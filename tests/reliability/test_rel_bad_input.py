"""Bad input everywhere sotd reads: random bytes as the registry, an inbox, a cursor, a self file and a lock
record, and random frames at a real daemon (behaviour 2.1, 6.1, 6.2, 6.4, 6.6, 6.7).

Injector: hypothesis (bounded: ~200 examples, no deadline) writes the bytes into the real files and the
real readers run on them in process; a few nasty examples also go through the real ``sotd comm``
subprocesses. Every reader answers (a value, a refusal with its sentence, or "unreadable"), never
crashes, and never changes or removes what it read.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sotd import handles
from sotd.cli.comm.common import Context
from sotd.cli.comm.poll import read_batch
from sotd.errors import FormatError, LockFailed, RegistryUnreadable
from sotd.formats import cursor, holder, inbox, registry, selffile, showline
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock, read_fresh
from sotd.handles import is_valid
from sotd.text import inert
from tests.conftest import Comm

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

BOUNDED = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

# Bytes that broke parsers somewhere: empty, whitespace, not UTF-8, NaN, deep nesting, a huge number, two
# documents, the wrong shapes.
NASTY: list[bytes] = [
    b"",
    b"\n\n  \n",
    b"\xff\xfe\x00garbage\n",
    b'{"agents": NaN}',
    b"[" * 50_000 + b"]" * 50_000,
    b'{"agents": {}, "n": 1' + b"0" * 5000 + b"}",
    b'{"agents": {}}{"agents": {}}',
    b'{"agents": []}',
    b'{"protocol_version": 1, "agents": {"x": 5, "": null, "y": {"last_seen": []}}}\n',
    b"\x00" * 300,
]


def _tree(home: str) -> dict[str, tuple[str, str]]:
    """Every entry under ``home``: kind and content hash (files), for "nothing changed" checks."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(home):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), home)] = ("dir", "")
        for n in filenames:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                out[os.path.relpath(p, home)] = ("link", os.readlink(p))
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, home)] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


@pytest.fixture
def scratch() -> Iterator[Layout]:
    with tempfile.TemporaryDirectory() as d:
        lay = Layout(os.path.join(d, "comm"))
        for sub in (lay.home, lay.inbox_dir, lay.read_dir, lay.self_dir):
            os.makedirs(sub, mode=0o700, exist_ok=True)
        yield lay


def _put(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------- registry


@BOUNDED
@given(data=st.one_of(st.binary(min_size=1, max_size=600), st.sampled_from([n for n in NASTY if n])))
def test_random_registry_reads_and_refuses_to_write(scratch: Layout, data: bytes) -> None:
    _put(scratch.registry, data)
    try:
        doc = registry.read(scratch)
    except RegistryUnreadable as e:
        assert e.message
        doc = None
    else:
        assert isinstance(doc, dict) and isinstance(registry.agents_of(doc), dict)
        for name, entry in registry.agents_of(doc).items():
            row = registry.AgentRow(name, entry)  # any shape: a bool and a verdict, never a crash
            assert row.is_live() in (True, False) and row.verdict() in registry.VERDICTS
    ino = os.stat(scratch.registry).st_ino
    try:
        registry.update(
            scratch, "testhost", lambda d: (registry.put(d, "zz", {"root": "/z"}), (True, None))[1], bound=1
        )
    except RegistryUnreadable as e:
        assert doc is None
        assert e.message == registry.READ_OR_UPDATE_FAILED
        with open(scratch.registry, "rb") as f:
            assert f.read() == data  # an unreadable registry is never replaced or repaired
        assert os.stat(scratch.registry).st_ino == ino
    else:
        assert doc is not None
    assert read_fresh(scratch.reglock)[0] == "gone"


@pytest.mark.parametrize("data", NASTY, ids=[f"nasty{i}" for i in range(len(NASTY))])
def test_random_registry_through_the_cli(tmp_path: object, data: bytes) -> None:
    comm = Comm(str(tmp_path))
    a = comm.session("alpha")
    _put(comm.layout.registry, data)
    for args in (("list",), ("send", "@beta", "hi"), ("join", "alpha")):
        r = a.run(*args, env={"SOT_LOCK_WAIT_SECS": "1"})
        assert "Traceback" not in r.err, (args, r)
        assert r.code in (0, 1, 2, 3, 4, 5, 75), (args, r)
        if args[0] != "join" or r.code != 0:
            with open(comm.layout.registry, "rb") as f:
                assert f.read() == data, (args, r)


# ------------------------------------------------------------------------------------------------- inbox


def _ctx(lay: Layout) -> Context:
    root = os.path.dirname(lay.home)
    return Context(
        {
            "SOT_COMM_HOME": lay.home,
            "SOT_SELF_HOST": "testhost",
            "SOT_COMM_TEST_HOST": "testhost",
            "SOT_COMM_SELF_FILE": os.path.join(lay.self_dir, "x.txt"),
            "PWD": root,
        }
    )


@BOUNDED
@given(
    data=st.binary(max_size=1500) | st.lists(st.binary(max_size=80), max_size=20).map(b"\n".join),
    cursor_text=st.text(max_size=40),
)
def test_random_inbox_reads_complete_lines_only(scratch: Layout, data: bytes, cursor_text: str) -> None:
    _put(scratch.inbox("alpha"), data)
    _put(scratch.cursor("alpha"), cursor_text.encode("utf-8", "surrogatepass"))
    batch = read_batch(_ctx(scratch), "alpha", warn=lambda s: None)
    assert batch is not None
    whole = inbox.complete_lines(data)
    assert batch.view.lines == whole[batch.view.base :]
    assert 0 <= batch.start <= len(whole)
    assert batch.new == whole[batch.start :]  # only complete lines, and exactly those past the cursor
    for raw in batch.new:
        assert b"\n" not in raw
        shown = showline.show_line(raw)
        assert shown is None or isinstance(shown, str)
        obj = inbox.decode_line(raw)
        if obj is not None:
            handles.is_directed(obj, "alpha")
    with open(scratch.inbox("alpha"), "rb") as f:
        assert f.read() == data


@pytest.mark.parametrize("data", [*NASTY, b'{"to":"alpha","msg":"ok"}\n{"to":"alpha"'])
def test_random_inbox_through_poll_and_unread(tmp_path: object, data: bytes) -> None:
    comm = Comm(str(tmp_path))
    a = comm.session("alpha")
    assert a.run("join", "alpha").code == 0
    _put(comm.layout.inbox("alpha"), data)
    u = a.run("unread", "alpha")
    assert (u.code, u.err) == (0, ""), u
    lines = inbox.complete_lines(data)
    objs = [o for o in (inbox.decode_line(x) for x in lines) if o is not None]
    assert int(u.out) == sum(handles.is_directed(o, "alpha") for o in objs)
    p = a.run("poll")
    assert (p.code, p.err) == (0, ""), p
    # the reference's display (showline) made inert for a terminal (sotd.text.inert, issue 25)
    shown = [inert(t, lines=True) for t in (showline.show_line(x) for x in lines) if t is not None]
    assert p.out_lines == "".join(t + "\n" for t in shown or ["No new messages."]).splitlines()
    with open(comm.layout.inbox("alpha"), "rb") as f:
        assert f.read() == data
    assert a.run("poll").out == "No new messages.\n"


# ------------------------------------------------------------------------------------------------ cursor


@BOUNDED
@given(
    text=st.text(max_size=60)
    | st.from_regex(r"\A[0-9]{1,25}( [0-9]{1,12}-[0-9]{1,5})?\n?\Z")
    | st.binary(max_size=60).map(lambda b: b.decode("utf-8", "surrogateescape")),
    lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=12),
)
def test_any_cursor_text_is_an_offset(scratch: Layout, text: str, lines: list[bytes]) -> None:
    _put(scratch.cursor("alpha"), text.encode("utf-8", "surrogateescape"))
    got = cursor.read(scratch, "alpha")
    n = cursor.offset(got, lines, "alpha", note=lambda s: None)
    assert isinstance(n, int) and 0 <= n <= len(lines)


# --------------------------------------------------------------------------------------------- self file


@BOUNDED
@given(
    data=st.binary(max_size=300)
    | st.builds(
        lambda h, r, extra: f"{h}\nrepo=r\nroot={r}\n{extra}".encode("utf-8", "surrogateescape"),
        st.text(max_size=12),
        st.sampled_from(["/w/alpha", "/w/other", ""]),
        st.sampled_from(["", "x\n", "\n"]),
    )
)
def test_random_self_file_names_a_valid_handle_or_nobody(scratch: Layout, data: bytes) -> None:
    path = os.path.join(scratch.self_dir, "alpha-session.txt")
    _put(path, data)
    got = selffile.read_handle(path, "/w/alpha")
    if got is not None:
        assert is_valid(got)
        rec = selffile.parse(data)
        assert rec is not None and rec.root == "/w/alpha" and rec.handle == got
    selffile.guard(path, "alpha", "/w/alpha")  # a refusal text or None, never a crash
    with open(path, "rb") as f:
        assert f.read() == data


# ----------------------------------------------------------------------------------------- lock record


@BOUNDED
@given(
    data=st.binary(max_size=200)
    | st.lists(st.text(alphabet="ab-:0123456789\r", max_size=6), min_size=5, max_size=7).map(
        lambda xs: ":".join(xs).encode()
    )
)
def test_random_lock_record_is_reported_never_removed(scratch: Layout, data: bytes) -> None:
    text = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    try:
        rec: holder.Holder | None = holder.Holder.parse(text)
    except FormatError:
        rec = None
    _put(scratch.reglock, data)
    before = os.stat(scratch.reglock)
    try:
        with RegistryLock(scratch, "testhost", 0, settle=0):
            # only a record proved dead (this box, this boot, its pid gone) may be reclaimed
            assert rec is not None and holder.judge(rec, holder.own("testhost"))[0] == holder.DEAD
            return
    except LockFailed as e:
        msg = e.message
    if rec is None:
        assert msg.startswith(f"registry lock {scratch.reglock} still held (") or msg.startswith(
            f"registry lock {scratch.reglock} was not taken by the deadline"
        ), msg
        assert "by hand" in msg or "Retry." in msg
    else:
        assert f"pid {rec.pid}" in msg, msg
    with open(scratch.reglock, "rb") as f:
        assert f.read() == data  # reported, never removed
    assert os.stat(scratch.reglock).st_ino == before.st_ino


# ------------------------------------------------------------------------------------- frames at a daemon


def _daemon(work: str, comm_home: str):  # type: ignore[no-untyped-def]
    from tests.integration.test_daemon import Daemon

    return Daemon(work, "a", comm_home, "boxa")


def _hello_line() -> bytes:
    from tests.integration.test_daemon import HELLO, line

    return line(1, "hello", HELLO)


SAFE_OPS = st.sampled_from(["version.query", "hello", "agent.send", "agent.join", "no.such", ""]) | st.text(
    max_size=12
).filter(lambda s: s != "comm.file" and not s.startswith("workspace."))
JSONV = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
ENVELOPE = st.fixed_dictionaries(
    {},
    optional={
        "v": st.integers(-1, 4) | JSONV,
        "id": st.integers() | JSONV,
        "kind": st.sampled_from(["req", "res", "evt"]) | JSONV,
        "op": SAFE_OPS,
        "payload": JSONV,
    },
)
FRAME = st.one_of(
    st.binary(max_size=2000),
    JSONV.map(lambda v: json.dumps(v).encode() + b"\n"),
    ENVELOPE.map(lambda v: json.dumps(v).encode() + b"\n"),
    st.lists(ENVELOPE.map(lambda v: json.dumps(v).encode()), max_size=5).map(
        lambda xs: b"\n".join(xs) + b"\n"
    ),
)


def _send(sock_path: str, hello: bool, frames: list[bytes]) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(sock_path)
        if hello:
            s.sendall(_hello_line())
        for fr in frames:
            s.sendall(fr)
        s.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and s.recv(65536):
            pass
    except OSError:
        pass  # the daemon may close on us mid-write: that is its answer to junk
    finally:
        s.close()


def test_random_frames_at_a_real_daemon(tmp_path: object) -> None:
    work = str(tmp_path)
    comm = Comm(work)
    d = _daemon(work, comm.home)
    try:
        before = _tree(comm.home)
        pid = d.proc.pid

        @settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(hello=st.booleans(), frames=st.lists(FRAME, min_size=1, max_size=4))
        def one(hello: bool, frames: list[bytes]) -> None:
            _send(d.sock, hello, frames)
            assert d.proc.poll() is None, d.logtext()[-2000:]
            assert d.request("version.query", {}, deadline_s=10)["daemon"]["pid"] == pid

        one()
        # oversize lines, with and without their newline, and many connections at once left half-open
        _send(d.sock, True, [b"x" * ((1 << 20) + 10)])
        _send(
            d.sock,
            True,
            [
                b'{"v":1,"id":2,"kind":"req","op":"version.query","payload":{"p":"'
                + b"y" * (2 << 20)
                + b'"}}\n'
            ],
        )
        _send(d.sock, False, [b"z" * (3 << 20) + b"\n"])
        held: list[socket.socket] = []
        try:
            for i in range(60):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5)
                s.connect(d.sock)
                s.sendall(_hello_line() if i % 2 else b"\x00\xff" * 50)
                held.append(s)
            assert d.request("version.query", {}, deadline_s=10)["daemon"]["pid"] == pid
        finally:
            for s in held:
                s.close()
        assert d.proc.poll() is None
        assert d.request("version.query", {}, deadline_s=10)["daemon"]["pid"] == pid
        assert _tree(comm.home) == before
    finally:
        d.stop()


# Typed fuzz: well-formed requests for the ops that write (comm.file, agent.*, workspace.*), with payloads
# that hold the op's own keys with random values. An empty comm folder lists nobody and no project root
# given is an existing absolute folder, so none may succeed in writing: every answer is a clear refusal.
WRITING_OPS = ("comm.file", "agent.join", "agent.send", "workspace.create", "workspace.destroy",
               "workspace.activate")  # fmt: skip
OP_KEYS = {
    "comm.file": ("from", "to", "text", "broadcast", "forwarded", "expires"),
    "agent.join": ("workspace_id", "handle"),
    "agent.send": ("to", "text", "workspace_id"),
    "workspace.create": ("project_root", "agent", "agent_name", "label", "command", "account"),
    "workspace.destroy": ("workspace_id", "slug", "name"),
    "workspace.activate": ("workspace_id", "read"),
}
FINITE_JSONV = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)  # fmt: skip
NOT_A_ROOT = st.text(max_size=20).filter(lambda t: not t.startswith("/")) | FINITE_JSONV


@st.composite
def typed_request(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    op = draw(st.sampled_from(WRITING_OPS))
    keys = draw(st.lists(st.sampled_from(OP_KEYS[op]), unique=True))
    payload: dict[str, object] = {k: draw(NOT_A_ROOT if k == "project_root" else FINITE_JSONV) for k in keys}
    if draw(st.booleans()):
        payload.update(draw(st.dictionaries(st.text(max_size=8), FINITE_JSONV, max_size=3)))
    if op == "workspace.create" and isinstance(payload.get("project_root"), str):
        assert not str(payload["project_root"]).startswith("/")
    return op, payload


def test_typed_requests_for_writing_ops_get_clear_refusals_and_write_nothing(tmp_path: object) -> None:
    work = str(tmp_path)
    comm = Comm(work)
    d = _daemon(work, comm.home)
    try:
        before = _tree(comm.home)
        pid = d.proc.pid
        seen_codes: set[str] = set()

        @settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(req=typed_request())
        def one(req: tuple[str, dict[str, object]]) -> None:
            op, payload = req
            got = d.request(op, payload, deadline_s=15)
            assert isinstance(got, dict), (op, payload, got)
            if got.get("ok") is True:
                # only answers that write nothing may be ok: an activate of nothing, a join with no row
                # that nobody holds (D5), a window notification that names no handle
                assert op in ("agent.join", "agent.send", "workspace.activate"), (op, payload, got)
            else:
                why = got.get("error")
                assert isinstance(why, str) and why.strip(), (op, payload, got)
                code = got.get("code")
                assert code is None or (isinstance(code, str) and code), (op, payload, got)
                if code:
                    seen_codes.add(code)
            assert d.proc.poll() is None, d.logtext()[-2000:]

        one()
        assert d.request("version.query", {}, deadline_s=10)["daemon"]["pid"] == pid
        assert d.request("workspace.list", {}, deadline_s=10).get("workspaces", []) == []
        assert _tree(comm.home) == before
        assert {"bad_request", "bad_handle"} & seen_codes, seen_codes  # the refusals were the checks
    finally:
        d.stop()
