"""Crash (issue 6, W4): appenders SIGKILLed at random points in a bounded loop; no acknowledged line lost.

Three writer processes append to one inbox through ``sotd.formats.inbox.append``; each line goes out in two
``write`` calls with 0.5 ms between them (the ``inbox._write`` seam), so a kill can tear a line. A writer
records ``<writer> <seq>`` in an ack file only after ``append`` returned (the line is synced). The killer
SIGKILLs a random writer every 10-60 ms and starts a new one, until ``kills`` kills or the time budget.
Then one more append (which must cut any torn tail the last victim left), and the checks: every acked
line present, exactly once, every line parses, each writer's lines are 0, 1, 2, ... in order.

``run_crash`` is what ``tests/reliability/test_suite_crash.py`` asserts (200 kills, <= 40 s). The benchmark
reports the counts and the append rate while being killed against the same writers unkilled (floor).

Usage: ``python -m bench.crash [--quick]``; writes ``bench/results/crash.json``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench import common

H = "victim"
WRITER = r"""
import os, sys, time
from sotd.formats import inbox
from sotd.formats.layout import Layout
lay, wid, ackpath, torn = Layout(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
real = inbox._write
def torn_prone(fd, data):
    data = bytes(data)
    if len(data) < 2:
        return real(fd, data)
    n = real(fd, data[: len(data) // 2])
    time.sleep(0.0005)
    return n
if torn:
    inbox._write = torn_prone
ack = os.open(ackpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
limit = int(sys.argv[5])
os.write(ack, f"{wid} start\n".encode())
for seq in range(limit):
    line = inbox.encode_line(wid, "victim", "r", f"{wid} {seq} " + "p" * 200, "2026-01-01T00:00:00Z")
    inbox.append(lay, "victim", line, nfs=False, bound=30, note=lambda s: sys.stderr.write(s + "\n"))
    os.write(ack, f"{wid} {seq}\n".encode())
"""


def _spawn(work: str, home: str, wid: str, ackpath: str, torn: bool, limit: int) -> subprocess.Popen[bytes]:
    err = open(os.path.join(work, f"{wid}.err"), "wb")  # noqa: SIM115  (closed by the caller's loop end)
    try:
        return subprocess.Popen(
            [sys.executable, "-c", WRITER, home, wid, ackpath, "1" if torn else "0", str(limit)], stderr=err
        )
    finally:
        err.close()


def run_crash(
    work: str, kills: int = 200, budget: float = 40.0, writers: int = 3, seed: int = 0x50D, torn: bool = True
) -> dict[str, object]:
    """Kill ``kills`` writers (or stop at ``budget`` seconds); check the inbox. Returns counts + problems."""
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    lay = Layout(os.path.join(work, "comm"))
    os.makedirs(lay.inbox_dir, exist_ok=True)
    ackpath = os.path.join(work, "acks")
    rng = random.Random(seed)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    n = killed = 0
    t0 = time.monotonic()
    deadline = t0 + budget
    try:
        while killed < kills and time.monotonic() < deadline:
            while len(procs) < writers:
                n += 1
                procs[f"w{n}"] = _spawn(work, lay.home, f"w{n}", ackpath, torn, 10**6)
            time.sleep(rng.uniform(0.01, 0.06))  # the killer's pace, not synchronisation
            victim = procs.pop(rng.choice(sorted(procs)))
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)  # reaped: no zombie, no Popen left running
            killed += 1
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
        for p in procs.values():
            p.wait(10)
    elapsed = time.monotonic() - t0

    problems: list[str] = []
    before = inbox.read_all(lay, H) or b""
    torn_tail = len(before) - (before.rfind(b"\n") + 1)
    notes: list[str] = []
    final = inbox.encode_line("final", H, "r", "final 0", "2026-01-01T00:00:00Z")
    inbox.append(lay, H, final, nfs=False, bound=5, note=notes.append)
    want_note = [f"note: cut {torn_tail} bytes of an unterminated line a dead writer left in @{H}'s inbox"]
    if notes != (want_note if torn_tail else []):
        problems.append(f"the final append's notes {notes!r} do not match a torn tail of {torn_tail} bytes")
    data = inbox.read_all(lay, H) or b""
    if not data.endswith(final):
        problems.append("the final line is not the last line")
    seen: list[tuple[str, int]] = []
    bad = 0
    for raw in inbox.complete_lines(data):
        try:
            wid, seq = json.loads(raw)["msg"].split(" ")[:2]
            seen.append((wid, int(seq)))
        except (ValueError, KeyError, TypeError):
            bad += 1
    if bad:
        problems.append(f"{bad} lines are not whole records")
    dupes = len(seen) - len(set(seen))
    if dupes:
        problems.append(f"{dupes} lines appear twice")
    acked: set[tuple[str, int]] = set()
    started = 0
    with open(ackpath) as f:
        for x in f.read().splitlines():
            w, s = x.split()
            if s == "start":
                started += 1
            else:
                acked.add((w, int(s)))
    missing = acked - set(seen)
    if missing:
        problems.append(f"{len(missing)} acknowledged lines are missing, e.g. {sorted(missing)[:5]}")
    per: dict[str, list[int]] = {}
    for wid, seq in seen:
        per.setdefault(wid, []).append(seq)
    disorder = [w for w, seqs in per.items() if w != "final" and seqs != list(range(len(seqs)))]
    if disorder:
        problems.append(f"writers with a lost or reordered line: {disorder[:5]}")
    cut_notes = 0
    for name in os.listdir(work):
        if name.endswith(".err"):
            with open(os.path.join(work, name)) as f:
                for note in f.read().splitlines():
                    if note.startswith("note: cut ") and note.endswith(f"in @{H}'s inbox"):
                        cut_notes += 1
                    else:
                        problems.append(f"{name}: unexpected stderr: {note[:200]}")
    if kills and killed < min(kills, 20):
        problems.append(f"only {killed} kills within the budget")
    if not acked:
        problems.append("no writer acknowledged anything")
    return {
        "kills": killed,
        "writers_started": n,
        "writers_that_ran": started,
        "seconds": elapsed,
        "lines": len(seen),
        "acked": len(acked),
        "acked_missing": len(missing),
        "durable_unacked": len(set(seen) - acked) - 1,  # minus the final line
        "duplicates": dupes,
        "bad_lines": bad,
        "torn_tails_cut": cut_notes + (1 if torn_tail else 0),
        "lines_per_s": len(seen) / elapsed if elapsed else 0.0,
        "problems": problems,
        "pass": not problems,
    }


def unkilled_rate(work: str, seconds: float, writers: int = 3, torn: bool = True) -> float:
    """Lines per second of the same writers left to run for ``seconds`` (the floor for the rate)."""
    from sotd.formats.layout import Layout

    lay = Layout(os.path.join(work, "comm"))
    os.makedirs(lay.inbox_dir, exist_ok=True)
    ackpath = os.path.join(work, "acks")
    ps = [_spawn(work, lay.home, f"u{i}", ackpath, torn, 10**6) for i in range(writers)]
    t0 = time.monotonic()
    time.sleep(seconds)
    for p in ps:
        p.send_signal(signal.SIGKILL)
    for p in ps:
        p.wait(10)
    el = time.monotonic() - t0
    with open(lay.inbox(H), "rb") as f:
        return f.read().count(b"\n") / el


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--budget", type=float, default=40.0)
    a = ap.parse_args(argv)
    if a.quick:
        a.kills, a.budget = 60, 15.0
    out: dict[str, object] = {"workload": "crash"}
    work = tempfile.mkdtemp(prefix="sotd-bench-crash-", dir=common.bench_dir())
    try:
        out["machine"] = common.machine(work)
        out["params"] = {"kills": a.kills, "budget_secs": a.budget, "writers": 3, "torn_prone_writes": True}
        runs = {}
        for torn in (True, False):
            w = os.path.join(work, f"killed-{int(torn)}")
            os.makedirs(w)
            runs["torn-prone" if torn else "plain"] = run_crash(w, a.kills, a.budget, torn=torn)
        out["runs"] = runs
        out["unkilled_lines_per_s"] = {}
        for torn in (True, False):
            w = os.path.join(work, f"unkilled-{int(torn)}")
            os.makedirs(w)
            rate = unkilled_rate(w, 5.0 if not a.quick else 2.0, torn=torn)
            out["unkilled_lines_per_s"]["torn-prone" if torn else "plain"] = rate  # type: ignore[index]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["machine"]["load_avg_end"] = common.load_avg()  # type: ignore[index]
    out["pass"] = all(r["pass"] for r in runs.values())
    return common.finish("crash", out, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
