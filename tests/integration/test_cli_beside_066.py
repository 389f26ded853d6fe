"""Issue 14, through the real ``sotd comm`` verbs: behaviours where sotd differed from 0.6.6 / the contract.

- 6.7: a self file whose ``repo=`` disagrees with the project it is read in names nobody, even when its
  ``root=`` agrees.
- 6.6: a hashed cursor one line past the end is the end, and the reader is told its last line was cut back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sotd.formats import cursor, holder
from sotd.formats.holder import Holder
from tests.conftest import Comm

pytestmark = pytest.mark.integration


def _put(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_6_7_self_file_with_another_repo_names_nobody(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    good = f"alpha\nrepo=alpha\nroot={a.root}\n".encode()
    assert _read(a.self_file) == good
    assert a.run("context").out_lines[5] == "NAME=alpha"
    bad = f"alpha\nrepo=elsewhere\nroot={a.root}\n".encode()  # root= agrees, repo= does not
    _put(a.self_file, bad)
    ctx = a.run("context")
    assert (ctx.code, ctx.out_lines[4:6]) == (0, [f"PROJECT_ROOT={a.root}", "NAME="]), ctx
    p = a.run("poll")
    assert (p.code, p.out, p.err) == (1, "", "Not joined — run comm-join.sh first.\n")
    assert _read(a.self_file) == bad  # discarded for reading, never rewritten by a reader


def test_6_6_hashed_cursor_one_past_the_end_says_cut_back(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    inbox = comm.layout.inbox("alpha")
    _put(
        inbox,
        b'{"from":"b","to":"alpha","repo":"r","msg":"one","ts":"T1"}\n{"from":"b","to":"alpha","repo":"r","msg":"two","ts":"T2"}\n',
    )
    _put(comm.layout.cursor("alpha"), b"3 1-1")  # line 3 was counted, then cut back by a failed append
    p = a.run("poll")
    note = "note: the last line read from @alpha's inbox was cut back; reading from the line before it"
    assert (p.code, p.out, p.err) == (0, "No new messages.\n", note + "\n"), p
    # the cursor stands as it is until a line follows (the reference writes only after a batch: issue 28)
    assert _read(comm.layout.cursor("alpha")) == b"3 1-1"
    again = a.run("poll")
    assert (again.out, again.err) == ("No new messages.\n", note + "\n")
    assert _read(comm.layout.cursor("alpha")) == b"3 1-1"
    # the line written where the cut one was is shown (with the note: it steps back once more)
    three = b'{"from":"b","to":"alpha","repo":"r","msg":"three","ts":"T3"}\n'
    with open(inbox, "ab") as f:
        f.write(three)
    p = a.run("poll")
    assert (p.code, p.out, p.err) == (0, "[T3] [b:r] three\n", note + "\n"), p
    assert _read(comm.layout.cursor("alpha")).decode() == cursor.encode(3, three[:-1])
    again = a.run("poll")
    assert (again.out, again.err) == ("No new messages.\n", "")


def test_6_6_a_cursor_one_past_the_end_hashed_as_the_last_line_stays_and_says_cut_back(comm: Comm) -> None:
    """Issue 28 item 3: ``4 <hash of line 3>`` over three lines. The 0.6.6 reference reads it as the end,
    prints its cut-back note and leaves the cursor as it is (it writes one only after a batch); sotd
    once rewrote it to ``3 …`` and said nothing."""
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    lines = [b'{"from":"b","to":"alpha","repo":"r","msg":"m%d","ts":"T%d"}' % (i, i) for i in (1, 2, 3)]
    _put(comm.layout.inbox("alpha"), b"".join(x + b"\n" for x in lines))
    held = f"4 {cursor.line_hash(lines[2])}".encode()
    _put(comm.layout.cursor("alpha"), held)
    p = a.run("poll")
    note = "note: the last line read from @alpha's inbox was cut back; reading from the line before it"
    assert (p.code, p.out, p.err) == (0, "No new messages.\n", note + "\n"), p
    assert _read(comm.layout.cursor("alpha")) == held
    assert not os.path.exists(comm.layout.read_hint("alpha"))  # no hint for a cursor that did not move


# Takes the registry lock as <host>, prints its record and waits to be killed inside it.
HOLDER = """
import sys
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock
lk = RegistryLock(Layout(sys.argv[1]), sys.argv[2], 10)
lk.acquire()
print(lk.me.record(), flush=True)
sys.stdin.read()
"""


def _dead_holder(comm: Comm, host: str) -> Holder:
    """A real process that took the lock and was SIGKILLed inside it: its record, proved dead from here."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, comm.layout.home, host], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as p:  # leaving the block closes its pipes and reaps it
        try:
            assert p.stdout is not None
            rec = Holder.parse(p.stdout.readline().decode())
        finally:
            p.kill()
            p.wait(10)
    assert holder.judge(rec, holder.own(host)) == (holder.DEAD, "it has exited")
    return rec


def test_6_1_marker_naming_its_own_dead_holder_ends_the_wait_at_once(comm: Comm) -> None:
    """Seed 000: a marker naming a record the walk already passed ends the walk; a join does not sit out
    the 10 s bound first (it cannot get better: markers are never removed)."""
    a = comm.session("alpha")
    lay = comm.layout
    dead = _dead_holder(comm, "testhost")
    marker = lay.reclaim_marker(dead.holder_id())
    _put(marker, (dead.record() + "\n").encode())  # the dead holder's marker names the dead holder itself
    t0 = time.monotonic()
    r = a.run("join", "--name", "alpha", env={"SOT_LOCK_WAIT_SECS": "10"})
    took = time.monotonic() - t0
    want = (
        f"registry lock {lay.reglock} still held (",
        f" old): its reclaim marker {marker} names {dead.record()}, which its reclaim chain already holds,"
        f" so no reclaim can pass it. If its holder is dead, remove {lay.reglock} by hand and retry.",
    )
    assert r.code == 1, r
    [line] = [x for x in r.err_lines if "registry lock" in x]
    assert want[0] in line and line.endswith(want[1]), r
    assert took < 5.0, f"the join waited {took:.1f}s for a lock no wait can free"  # bound 10 s
    assert _read(lay.reglock) == (dead.record() + "\n").encode()  # nothing removed
    assert _read(marker) == (dead.record() + "\n").encode()


def test_6_1_join_with_a_240_byte_host_takes_the_lock(tmp_path: object) -> None:
    """A declared host of 240 bytes: the take's temp name is clamped under the file-name limit, so the
    join works (it used to fail with "cannot remove the stale temp"); the registry row keeps the host."""
    host = "h" * 240
    comm = Comm(str(tmp_path), host=host)
    a = comm.session("alpha")
    r = a.run("join", "--name", "alpha")
    assert (r.code, r.err) == (0, ""), r
    assert r.out_lines[0] == f"Joined sot-comm as @alpha  (alpha on {host})."
    with open(comm.layout.registry) as f:
        assert json.load(f)["agents"]["alpha"]["host"] == host
    assert not [n for n in os.listdir(comm.layout.home) if n.startswith(".registry.lock")]


def test_1_5_poll_shows_each_shape_as_the_reference_does(comm: Comm) -> None:
    """Missing and null fields, objects, big numbers and NUL bytes, through a real ``sotd comm poll``
    (the rules and their jq cross-check: ``tests/unit/test_showline.py``)."""
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    _put(
        comm.layout.inbox("alpha"),
        b'{"to":"alpha","msg":"no from, repo or ts"}\n'
        b'{"from":null,"to":"alpha","repo":null,"msg":"nulls","ts":null}\n'
        b'{"from":{"b":1,"a":[1.0,"\\u007f"]},"to":"alpha","repo":"r","msg":{"k":null},"ts":"T"}\n'
        b'{"from":12345678901234567890,"to":"alpha","repo":1e400,"msg":1.0,"ts":-0}\n'
        b'{"from":"b\\u0000c","to":"alpha","repo":"r","msg":"x\x00y","ts":"T"}\n',
    )
    p = a.run("poll")
    assert (p.code, p.err) == (0, ""), p
    assert p.out == (
        "[] [:] no from, repo or ts\n"
        "[] [:] nulls\n"
        '[T] [{\n  "b": 1,\n  "a": [\n    1,\n    "\\u007f"\n  ]\n}:r] {\n  "k": null\n}\n'
        "[-0] [12345678901234567000:1.7976931348623157e+308] 1\n"
        "[T] [bc:r] xy\n"
    )


def test_1_5_poll_shows_trailing_newlines_json_messages_and_1e400_as_the_reference_does(comm: Comm) -> None:
    """Issue 28 item 2, through a real ``sotd comm poll``: the reference shows each field through a shell
    command substitution of ``jq -r``, so a message's trailing newlines go (``] end`` and one newline), a
    message that is a JSON object or array shows as jq's indented JSON, and a ``ts`` of ``1e400`` as the
    largest double. What poll prints is then inert: an ESC the message holds shows as its escape."""
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    _put(
        comm.layout.inbox("alpha"),
        b'{"from":"b","to":"alpha","repo":"r","msg":"end\\n","ts":"T1"}\n'
        b'{"from":"b","to":"alpha","repo":"r","msg":"two\\nlines\\n\\n","ts":"T2"}\n'
        b'{"from":"b","to":"alpha","repo":"r","msg":{"k":"v","n":[1,2.0,{}]},"ts":"T3"}\n'
        b'{"from":"b","to":"alpha","repo":"r","msg":["a",[]],"ts":"T4"}\n'
        b'{"from":"b","to":"alpha","repo":"r","msg":"m","ts":1e400}\n'
        b'{"from":"b","to":"alpha","repo":"r","msg":"\\u001b[31mred\\n","ts":"T6"}\n',
    )
    p = a.run("poll")
    assert (p.code, p.err) == (0, ""), p
    assert p.out == (
        "[T1] [b:r] end\n"
        "[T2] [b:r] two\nlines\n"
        '[T3] [b:r] {\n  "k": "v",\n  "n": [\n    1,\n    2,\n    {}\n  ]\n}\n'
        '[T4] [b:r] [\n  "a",\n  []\n]\n'
        "[1.7976931348623157e+308] [b:r] m\n"
        "[T6] [b:r] \\u001b[31mred\n"
    )
