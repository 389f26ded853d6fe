"""Inbox append throughput against the floor of a raw write+fsync loop, measured in the same run (issue 2).

Single writer: N appends through ``sotd.formats.inbox.append`` (open the lock file, flock, open the inbox,
check its tail, write, fsync, close both) versus N bare ``os.write`` + ``os.fsync`` calls on one O_APPEND
file opened once, in the same ``inbox/`` folder. Rounds alternate which goes first, so load drift on a
shared machine hits both alike; each append is timed on its own for the latency percentiles.

Four writers: four processes appending to one inbox at once (they take turns through its lock, and each
fsync happens under the lock, as the spec requires), against four raw writers on one shared O_APPEND file
without a lock (the floor), four raw writers doing the design by hand (``common.flocked_append_loop``, per
line: open the lock file, blocking flock, open the inbox, write, fsync, close both; the floor of the design,
the same one ``bench/contention.py`` uses), and four raw writers on four files (reference).

Usage: ``python -m bench.append [--quick]``; writes ``bench/results/append.json`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench import common

MSG = "benchmark line " + "x" * 105
TARGET_SINGLE = 0.8  # sotd append throughput >= 0.8x the raw write+fsync loop


def make_line() -> bytes:
    from sotd.formats import inbox

    return inbox.encode_line("alpha-bench", "beta-bench", "bench", MSG, "2026-01-01T00:00:00Z")


def raw_loop(path: str, n: int, line: bytes) -> list[int]:
    """Per-append nanoseconds of ``n`` write+fsync pairs on one O_APPEND descriptor."""
    lat = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        clock = time.perf_counter_ns
        for _ in range(n):
            t0 = clock()
            os.write(fd, line)
            os.fsync(fd)
            lat.append(clock() - t0)
    finally:
        os.close(fd)
    return lat


def _writer(kind: str, home: str, target: str, n: int, line: bytes, barrier: object, out: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    t0 = time.monotonic_ns()
    if kind == "raw-locked":
        lat = common.flocked_append_loop(target, target + ".lock", n, line)
    elif kind.startswith("raw"):
        lat = raw_loop(target, n, line)
    else:
        lat = common.sotd_append_loop(home, target, n, line)
    out.put((t0, time.monotonic_ns(), lat))


def parallel(kind: str, home: str, tag: str, writers: int, n: int, line: bytes) -> tuple[float, list[int]]:
    """(lines per second over the whole run, every append's nanoseconds) for ``writers`` processes."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(writers)
    out = ctx.Queue()
    if kind in ("raw-shared", "raw-locked"):
        targets = [os.path.join(home, "inbox", f"{kind}-{tag}.jsonl")] * writers
    elif kind == "raw-4files":
        targets = [os.path.join(home, "inbox", f"raw4-{tag}-{i}.jsonl") for i in range(writers)]
    else:
        targets = [f"four-{tag}"] * writers
    procs = [
        ctx.Process(target=_writer, args=(kind, home, t, n, line, barrier, out), daemon=True) for t in targets
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        if p.exitcode != 0:
            raise RuntimeError(f"{kind} writer exited {p.exitcode}")
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    lat = [x for r in results for x in r[2]]
    if kind == "sotd":
        _check_inbox(os.path.join(home, "inbox", f"four-{tag}.jsonl"), writers * n, line)
    return writers * n / ((end - start) / 1e9), lat


def _check_inbox(path: str, lines: int, line: bytes) -> None:
    with open(path, "rb") as f:
        data = f.read()
    if data != line * lines:
        found = data.count(b"\n")
        raise RuntimeError(f"{path}: expected {lines} whole lines, found {found} newlines")


def run(n: int, rounds: int, n4: int, rounds4: int) -> dict[str, object]:
    line = make_line()
    work = tempfile.mkdtemp(prefix="sotd-bench-append-", dir=common.bench_dir())
    try:
        layout = common.make_comm(work)
        home = layout.home
        facts = common.machine(layout.inbox_dir)
        # Warm-up: first-touch costs (imports, the journal) must not land in round 0.
        raw_loop(os.path.join(layout.inbox_dir, "warm.jsonl"), 50, line)
        common.sotd_append_loop(home, "warm", 50, line)

        raw_tp: list[float] = []
        sotd_tp: list[float] = []
        raw_lat: list[int] = []
        sotd_lat: list[int] = []
        paired: list[float] = []
        for r in range(rounds):
            got: dict[str, list[int]] = {}
            order = ("raw", "sotd") if r % 2 == 0 else ("sotd", "raw")
            for kind in order:
                if kind == "raw":
                    got[kind] = raw_loop(os.path.join(layout.inbox_dir, f"raw-{r}.jsonl"), n, line)
                else:
                    got[kind] = common.sotd_append_loop(home, f"single-{r}", n, line)
            rt = n / (sum(got["raw"]) / 1e9)
            st = n / (sum(got["sotd"]) / 1e9)
            raw_tp.append(rt)
            sotd_tp.append(st)
            paired.append(st / rt)
            raw_lat += got["raw"]
            sotd_lat += got["sotd"]
        _check_inbox(os.path.join(layout.inbox_dir, "single-0.jsonl"), n, line)

        kinds4 = ("raw-shared", "sotd", "raw-locked", "raw-4files")
        tp4: dict[str, list[float]] = {k: [] for k in kinds4}
        lat4: dict[str, list[int]] = {k: [] for k in kinds4}
        for r in range(rounds4):
            order = kinds4 if r % 2 == 0 else tuple(reversed(kinds4))
            for kind in order:
                tp, lat = parallel(kind, home, str(r), 4, n4, line)
                tp4[kind].append(tp)
                lat4[kind] += lat
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ms = 1e-6  # nanoseconds -> milliseconds
    single_ratio = statistics.median(paired)
    four_ratio = statistics.median(tp4["sotd"]) / statistics.median(tp4["raw-shared"])
    facts["load_avg_end"] = common.load_avg()
    return {
        "workload": "append",
        "machine": facts,
        "params": {
            "lines_per_round": n,
            "rounds": rounds,
            "lines_per_writer_4": n4,
            "rounds_4": rounds4,
            "line_bytes": len(line),
        },
        "single": {
            "floor": "os.write + os.fsync on one O_APPEND descriptor, same folder",
            "raw_per_s": common.summary(raw_tp),
            "sotd_per_s": common.summary(sotd_tp),
            "raw_latency_ms": common.summary(raw_lat, ms),
            "sotd_latency_ms": common.summary(sotd_lat, ms),
            "ratio_paired_rounds": common.summary(paired),
            "ratio": single_ratio,
            "ratio_of_medians": statistics.median(sotd_tp) / statistics.median(raw_tp),
            "target": TARGET_SINGLE,
            "pass": single_ratio >= TARGET_SINGLE,
        },
        "four": {
            "floor": "4 processes, os.write + os.fsync, one shared O_APPEND file, no lock",
            "raw_shared_per_s": common.summary(tp4["raw-shared"]),
            "raw_locked_per_s": common.summary(tp4["raw-locked"]),
            "raw_4files_per_s": common.summary(tp4["raw-4files"]),
            "sotd_per_s": common.summary(tp4["sotd"]),
            "raw_shared_latency_ms": common.summary(lat4["raw-shared"], ms),
            "raw_locked_latency_ms": common.summary(lat4["raw-locked"], ms),
            "raw_4files_latency_ms": common.summary(lat4["raw-4files"], ms),
            "sotd_latency_ms": common.summary(lat4["sotd"], ms),
            "ratio": four_ratio,
            "ratio_vs_locked": statistics.median(tp4["sotd"]) / statistics.median(tp4["raw-locked"]),
            "ratio_vs_4files": statistics.median(tp4["sotd"]) / statistics.median(tp4["raw-4files"]),
            "target": None,
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few small rounds (a smoke test, not a result)")
    ap.add_argument("--lines", type=int, default=800, help="appends per single-writer round")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--lines4", type=int, default=300, help="appends per writer per four-writer round")
    ap.add_argument("--rounds4", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/results alone")
    a = ap.parse_args(argv)
    if a.quick:
        a.lines, a.rounds, a.lines4, a.rounds4 = 100, 3, 50, 2
    result = run(a.lines, a.rounds, a.lines4, a.rounds4)
    text = json.dumps(result, indent=2)
    print(text)
    if not a.no_write and not a.quick:
        common.write_result("append", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
