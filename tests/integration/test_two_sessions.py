"""Two sessions end to end through their wrappers: join, directed mail, a broadcast, poll, unread, leave.

Each session is its own process with its own pinned self file and project folder in one comm folder. The
inbox line and cursor bytes are checked exactly (seed 000 formats; behaviour 1.3, 1.5, 6.6), the cursor hash
against /usr/bin/cksum itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import Comm

pytestmark = pytest.mark.integration

TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def cksum(line: bytes) -> str:
    exe = shutil.which("cksum") or "/usr/bin/cksum"
    data = line.replace(b"\n", b"").replace(b"\0", b"")
    out = subprocess.run([exe], input=data, capture_output=True, check=True).stdout.split()
    return f"{int(out[0])}-{int(out[1])}"


def lines_of(comm: Comm, h: str) -> list[bytes]:
    return comm.inbox_bytes(h).splitlines(keepends=True)


def cursor_of(comm: Comm, h: str) -> bytes:
    with open(comm.layout.cursor(h), "rb") as f:
        return f.read()


def expect_line(raw: bytes, frm: str, to: str, repo: str, msg: str) -> str:
    head = json.dumps(
        {"from": frm, "to": to, "repo": repo, "msg": msg}, separators=(",", ":"), ensure_ascii=False
    )
    m = re.fullmatch(re.escape(head[:-1]) + r',"ts":"(' + TS + r')"\}' + "\n", raw.decode())
    assert m, raw
    return m.group(1)


def test_two_sessions(comm: Comm) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.self_file != b.self_file
    r = a.run("join", "--name", "alpha")
    assert (r.code, r.out_lines) == (
        0,
        [
            "Joined sot-comm as @alpha  (alpha on testhost).",
            f"  inbox: {comm.layout.inbox_dir}/alpha.jsonl",
            "Others registered: none",
        ],
    )
    r = b.run("join", "--name", "beta", "--expertise", "tests, ci")
    assert r.out_lines[2] == "Others registered: alpha"
    with open(b.self_file) as f:
        assert f.read() == f"beta\nrepo=beta\nroot={b.root}\n"

    # nothing yet
    assert (b.run("unread").out, b.run("unread", "beta").out) == ("0\n", "0\n")
    assert b.run("poll").out_lines == ["No new messages."]

    # directed mail, both ways
    r = a.run("send", "@beta", "hello beta — ünïcode ok?")
    assert (r.code, r.out, r.err) == (0, "  filed -> @beta\n", "")
    r = a.run("send", "@beta", "second")
    assert r.out == "  filed -> @beta\n"
    r = b.run("send", "@alpha", "hi alpha")
    assert r.out == "  filed -> @alpha\n"
    bl = lines_of(comm, "beta")
    t1 = expect_line(bl[0], "alpha", "beta", "alpha", "hello beta — ünïcode ok?")
    t2 = expect_line(bl[1], "alpha", "beta", "alpha", "second")
    t3 = expect_line(lines_of(comm, "alpha")[0], "beta", "alpha", "beta", "hi alpha")
    assert b.run("unread").out == "2\n"
    assert a.run("unread", "alpha").out == "1\n"
    assert a.run("unread", "beta").out == "2\n"  # any handle may be asked about

    # a broadcast reaches every other handle, never the sender, and is never counted as unread
    r = a.run("send", "--broadcast", "stand-up")
    assert (r.code, r.out_lines) == (0, ["  filed -> @beta", "Broadcast to 1 agent(s)."])
    bl = lines_of(comm, "beta")
    t4 = expect_line(bl[2], "alpha", "", "alpha", "stand-up")
    assert len(lines_of(comm, "alpha")) == 1
    assert b.run("unread").out == "2\n"

    # poll shows every line past the cursor, then writes the cursor from what it showed
    r = b.run("poll")
    assert (r.code, r.err) == (0, "")
    assert r.out_lines == [
        f"[{t1}] [alpha:alpha] hello beta — ünïcode ok?",
        f"[{t2}] [alpha:alpha] second",
        f"[{t4}] [alpha:alpha] stand-up",
    ]
    assert cursor_of(comm, "beta") == f"3 {cksum(bl[2])}".encode()
    assert b.run("unread").out == "0\n"
    assert b.run("poll").out_lines == ["No new messages."]
    assert cursor_of(comm, "beta") == f"3 {cksum(bl[2])}".encode()

    r = a.run("poll")
    assert r.out_lines == [f"[{t3}] [beta:beta] hi alpha"]
    assert cursor_of(comm, "alpha") == f"1 {cksum(lines_of(comm, 'alpha')[0])}".encode()
    assert a.run("unread").out == "0\n"

    # more mail after a poll: only the new line shows
    a.run("send", "@beta", "third")
    t5 = expect_line(lines_of(comm, "beta")[3], "alpha", "beta", "alpha", "third")
    assert b.run("unread").out == "1\n"
    assert b.run("poll").out_lines == [f"[{t5}] [alpha:alpha] third"]
    assert cursor_of(comm, "beta") == f"4 {cksum(lines_of(comm, 'beta')[3])}".encode()

    # both rows are live in the registry; the files are private
    with open(comm.layout.registry) as f:
        agents = json.load(f)["agents"]
    assert set(agents) == {"alpha", "beta"}
    assert agents["beta"]["expertise"] == ["tests", "ci"]
    for p in (comm.layout.inbox("beta"), comm.layout.cursor("beta"), b.self_file, comm.layout.registry):
        assert os.stat(p).st_mode & 0o077 == 0, p

    # leave: the row and the self file go, the inbox and the cursor stay (D10)
    r = b.run("leave")
    assert (r.code, r.out) == (0, "Left sot-comm (@beta removed).\n")
    assert not os.path.exists(b.self_file)
    assert os.path.exists(comm.layout.inbox("beta")) and os.path.exists(comm.layout.cursor("beta"))
    before = comm.inbox_bytes("beta")
    r = a.run("send", "@beta", "are you there?")  # a registry miss goes to the relay; no daemon here
    assert (r.code, r.out) == (1, "")
    assert r.err_lines[0].startswith("FAILED -> @beta: "), r
    assert comm.inbox_bytes("beta") == before
    assert b.run("poll").err == "Not joined — run comm-join.sh first.\n"
    r = a.run("leave")
    assert r.out == "Left sot-comm (@alpha removed).\n"
    with open(comm.layout.registry) as f:
        assert json.load(f)["agents"] == {}
    assert a.run("leave").out == "Not joined — nothing to do.\n"
