"""The read hint beside a 0.6.6 reader (docs/contract.md, "Reads that do not grow with the inbox"; issue 14).

``read/<h>.offset`` is sotd's alone: a 0.6.6 ``comm-poll.sh`` moves the cursor and never touches it. The
rule that makes it safe: the hint is trusted only while it agrees with the cursor (it records the cursor
text it was written for, the inode, and the byte range of the cursor's last line, which must still hash
as the cursor says); otherwise the reader scans from byte 0 under the cursor's rules.

Here real ``sotd comm poll`` runs alternate with a 0.6.6-style poll written in this file from behaviour
1.5/6.6 (its own offset rules, the hash from ``/usr/bin/cksum``, the cursor replaced by temp and rename,
the hint never touched, and sometimes no read lock, so it can count a line a failed append then cuts
back). Over one shared cursor, every line is shown exactly once in order; a line shown and then cut back
is the only extra, and the line written in its place is still shown.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess

import pytest

from sotd.formats import cksum, inbox, readhint
from tests.conftest import Comm, Session

pytestmark = pytest.mark.integration

H = "alpha"


def _ref_hash(line: bytes) -> str:
    kept = line.replace(b"\n", b"").replace(b"\0", b"")
    out = subprocess.run(["cksum"], input=kept, capture_output=True, check=True, timeout=10).stdout.split()
    return f"{int(out[0])}-{int(out[1])}"


def _ref_offset(text: str, lines: list[bytes]) -> int:
    """Behaviour 6.6's offset for a count cursor (the 0.6.6 poll never writes another kind)."""
    text = text.rstrip("\n")
    if not text:
        return 0
    count_s, _, h = text.partition(" ")
    count, total = int(count_s), len(lines)
    if count > total:
        return total if count == total + 1 and h else 0
    if count > 0 and h and _ref_hash(lines[count - 1]) != h:
        return count - 1
    return count


def ref_poll(comm: Comm, *, locked: bool) -> list[str]:
    """One 0.6.6-style poll: the ids it shows. Never reads or writes ``read/<h>.offset``."""
    lay = comm.layout
    lock = os.open(lay.inbox_lock(H), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if locked:
            fcntl.flock(lock, fcntl.LOCK_SH)
        with open(lay.inbox(H), "rb") as f:
            data = f.read()
    finally:
        os.close(lock)
    lines = data.split(b"\n")[:-1]
    try:
        with open(lay.cursor(H)) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    shown = [json.loads(x)["msg"] for x in lines[_ref_offset(text, lines) :]]
    new = f"{len(lines)} {_ref_hash(lines[-1])}" if lines else "0"
    tmp = lay.cursor(H) + ".ref066"
    with open(tmp, "w") as f:
        f.write(new)
    os.rename(tmp, lay.cursor(H))
    return shown


def sotd_poll(a: Session) -> list[str]:
    r = a.run("poll")
    assert r.code == 0, r
    return [x.rsplit("] ", 1)[1] for x in r.out_lines if x != "No new messages."]


def _line(n: int) -> bytes:
    return json.dumps({"from": "w", "to": H, "repo": "r", "msg": f"m{n}", "ts": "T"}).encode() + b"\n"


def _hint_state(comm: Comm) -> str:
    """``none``, ``agrees`` (written for the cursor text on disk) or ``stale``."""
    lay = comm.layout
    try:
        with open(lay.read_hint(H)) as f:
            hint = readhint.parse(f.read())
        with open(lay.cursor(H), "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return "none"
    if hint is None:
        return "none"
    return "agrees" if hint[4] == cksum.cksum(text) else "stale"


def test_sotd_and_0_6_6_polls_alternate_over_one_cursor(comm: Comm) -> None:
    a = comm.session(H)
    assert a.run("join", "--name", H).code == 0
    lay = comm.layout
    rng = random.Random(14)
    n = 0
    shown: list[str] = []
    cut: set[str] = set()
    states: list[str] = []

    def append(k: int) -> None:
        nonlocal n
        for _ in range(k):
            inbox.append(lay, H, _line(n), nfs=False, bound=2.0)
            n += 1

    append(5)
    for _ in range(40):
        step = rng.choice(["append", "append", "sotd", "sotd", "ref", "inflight"])
        if step == "append":
            append(rng.randint(1, 3))
        elif step == "sotd":
            states.append(_hint_state(comm))
            shown += sotd_poll(a)
        elif step == "ref":
            shown += ref_poll(comm, locked=rng.random() < 0.5)
        else:
            # a line in flight, counted by an unlocked 0.6.6 reader, then cut back by its failed append
            with open(lay.inbox(H), "ab") as f:
                before = f.tell()
                f.write(_line(n))
            shown += ref_poll(comm, locked=False)
            os.truncate(lay.inbox(H), before)
            cut.add(f"m{n}")
            n += 1
    states.append(_hint_state(comm))
    shown += sotd_poll(a)
    with open(lay.inbox(H), "rb") as f:
        final = [json.loads(x)["msg"] for x in f.read().splitlines()]
    assert [m for m in shown if m not in cut] == final  # nothing lost, nothing shown twice, in order
    assert all(shown.count(m) <= 1 for m in cut)
    # the run met both a hint sotd could use and one a 0.6.6 poll had left stale
    assert "agrees" in states and "stale" in states, states
    assert cut, "the run cut no line back"
