"""Appenders SIGKILLed at random points: only whole lines survive, the torn tail is cut, no ack is lost."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from sotd.formats import inbox
from sotd.formats.layout import Layout

pytestmark = pytest.mark.reliability

H = "a"
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

# Each line goes out in two write calls with a moment between them, so a kill can tear a line; the ack is
# written only after append() returned (the line is synced).
WRITER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from sotd.formats import inbox
from sotd.formats.layout import Layout
lay, wid, ackpath = Layout(sys.argv[2]), sys.argv[3], sys.argv[4]
real = inbox._write
def torn_prone(fd, data):
    data = bytes(data)
    if len(data) < 2:
        return real(fd, data)
    n = real(fd, data[: len(data) // 2])
    time.sleep(0.0005)
    return n
inbox._write = torn_prone
ack = os.open(ackpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
notes = []
for seq in range(10**6):
    line = inbox.encode_line(wid, "a", "r", f"{wid} {seq} " + "p" * 200, "2026-01-01T00:00:00Z")
    inbox.append(lay, "a", line, nfs=False, bound=30, note=lambda s: sys.stderr.write(s + "\n"))
    os.write(ack, f"{wid} {seq}\n".encode())
"""

KILLS = 60
BUDGET_SECS = 15.0


def test_random_sigkills(tmp_path: os.PathLike[str]) -> None:
    lay = Layout(str(tmp_path / "comm"))  # type: ignore[operator]
    os.makedirs(lay.inbox_dir)
    ackpath = os.path.join(str(tmp_path), "acks")
    rng = random.Random(0x50D)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stderr_paths: list[str] = []
    kills = 0
    n = 0
    deadline = time.monotonic() + BUDGET_SECS
    try:
        while kills < KILLS and time.monotonic() < deadline:
            while len(procs) < 3:
                n += 1
                wid = f"w{n}"
                errpath = os.path.join(str(tmp_path), f"{wid}.err")
                stderr_paths.append(errpath)
                with open(errpath, "wb") as err:
                    procs[wid] = subprocess.Popen(
                        [sys.executable, "-c", WRITER, SRC, lay.home, wid, ackpath], stderr=err
                    )
            time.sleep(rng.uniform(0.05, 0.2))  # pacing of the killer, not synchronisation
            victim = procs.pop(rng.choice(sorted(procs)))
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)  # reaped, so no zombie and no Popen left running behind the test
            kills += 1
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
        for p in procs.values():
            p.wait(10)
    assert kills >= 20, "too few kills within the budget"

    # The next append cuts whatever torn tail the last victim left, and says how much it cut.
    before = inbox.read_all(lay, H) or b""
    torn = len(before) - (before.rfind(b"\n") + 1)
    notes: list[str] = []
    final = inbox.encode_line("final", "a", "r", "final 0", "2026-01-01T00:00:00Z")
    inbox.append(lay, H, final, nfs=False, bound=5, note=notes.append)
    if torn:
        assert notes == [f"note: cut {torn} bytes of an unterminated line a dead writer left in @a's inbox"]
    else:
        assert notes == []

    data = inbox.read_all(lay, H) or b""
    assert data.endswith(final)
    lines = inbox.complete_lines(data)
    seen: list[tuple[str, int]] = []
    for raw in lines:
        obj = json.loads(raw)  # every line whole: a torn fragment never survives an append
        wid, seq = obj["msg"].split(" ")[:2]
        seen.append((wid, int(seq)))
    assert len(seen) == len(set(seen)), "a line appears twice"
    with open(ackpath) as f:
        acked = {(w, int(s)) for w, s in (x.split() for x in f.read().splitlines())}
    assert acked, "no writer acknowledged anything"
    missing = acked - set(seen)
    assert not missing, f"acknowledged but missing: {sorted(missing)[:5]}"
    per_writer: dict[str, list[int]] = {}
    for wid, seq in seen:
        per_writer.setdefault(wid, []).append(seq)
    for wid, seqs in per_writer.items():
        if wid != "final":
            assert seqs == list(range(len(seqs))), f"{wid} lost or reordered a line"

    cut_notes = 0
    for errpath in stderr_paths:
        with open(errpath) as f:
            for note in f.read().splitlines():
                assert note.startswith("note: cut ") and note.endswith("in @a's inbox"), note
                cut_notes += 1
    # With two write calls per line and 60 kills some victims die mid-line; their tails get cut.
    assert cut_notes + (1 if torn else 0) >= 1
