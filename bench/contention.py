"""Contention (issue 17, target 2): many senders to one inbox at once, from the CLI and in process.

- **CLI.** 16 joined sessions, each a thread running ``sotd comm send @rcpt <body>`` subprocesses back to
  back for 10 s (no daemon: each send appends itself). Counted: sends filed (exit 0) and FAILED (exit 1),
  lines lost (filed but not in the inbox), FAILED-but-filed, and the wall of every send (p50/p95/p99/max).
  Floor, same run, before and after: the same 16 threads running ``python -c pass`` for the same time.
  Targets: 0 lost, 0 FAILED, p99 <= 150 ms, no send over 500 ms.
- **In process (the daemon's filing path).** 16 forked processes each call ``inbox.append`` M times into
  one inbox, against 16 processes doing the raw design by hand per line: open the lock file, blocking
  flock, open the inbox O_APPEND, write, fsync, close both (the floor); rounds alternate which goes first.
  Target: sotd >= 0.6x the floor's lines per second. The 2 s bound with many waiters in one process is
  shown by ``tests/integration/test_inbox_procs.py`` (a bound is a guarantee, so it is a test, not a figure).

Usage: ``python -m bench.contention [--quick]``; writes ``bench/results/contention.json``.
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from bench import common, fanin

RCPT = "rcpt"
SENDERS = 16
CLI_SECS = 10.0
WRITERS = 16
TARGET_P99_MS = 150.0
TARGET_MAX_MS = 500.0
TARGET_LIB = 0.6


# ------------------------------------------------------------------------------------------------ CLI


def cli_phase(s: common.Sessions, rcpt: str, kind: str, n: int, secs: float) -> dict[str, object]:
    """``n`` threads running ``sotd comm send`` (kind "send") or ``python -c pass`` back to back for ``secs``."""
    lat: list[float] = []
    ok: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    lock = threading.Lock()
    go = threading.Barrier(n)
    stop_at = [0.0]

    def sender(i: int) -> None:
        who = f"s{i}"
        env, cwd = s.env[who], s.cwd[who]
        go.wait()
        seq = 0
        while time.monotonic() < stop_at[0]:
            if kind == "send":
                argv = [common.SOTD, "comm", "send", f"@{rcpt}", fanin.body(who, seq, 200)]
            else:
                argv = [common.PYTHON, "-c", "pass"]
            wall, code = fanin._spawn_code(argv, dict(env, PWD=cwd), cwd)
            with lock:
                lat.append(wall)
                (ok if code == 0 else failed).setdefault(who, []).append(seq)
            seq += 1

    stop_at[0] = time.monotonic() + secs + 1.0  # the barrier's start-up inside the second
    threads = [threading.Thread(target=sender, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(secs + 120)
    elapsed = time.perf_counter() - t0
    out: dict[str, object] = {
        "runs": len(lat),
        "per_s": len(lat) / elapsed,
        "wall_ms": common.summary(lat, 1e3),
    }
    if kind == "send":
        with open(s.layout.inbox(rcpt), "rb") as f:
            data = f.read()
        checks = fanin.check_fanin(data, ok, failed, 0)
        out["checks"] = checks
        out["over_500ms"] = sum(1 for x in lat if x * 1e3 > TARGET_MAX_MS)
        os.truncate(s.layout.inbox(rcpt), 0)
    return out


def run_cli(work: str, n: int, secs: float) -> dict[str, object]:
    s = common.Sessions(work)
    s.add(RCPT)
    for i in range(n):
        s.add(f"s{i}")
    rcpt = s.handle[RCPT]
    # warm the private .pyc cache and the journal
    s.check("s0", [common.SOTD, "comm", "send", f"@{rcpt}", "warm"], "filed")
    os.truncate(s.layout.inbox(rcpt), 0)
    floor_before = cli_phase(s, rcpt, "floor", n, secs / 2)
    send = cli_phase(s, rcpt, "send", n, secs)
    floor_after = cli_phase(s, rcpt, "floor", n, secs / 2)
    return {"floor_before": floor_before, "send": send, "floor_after": floor_after, "recipient": rcpt}


# ------------------------------------------------------------------------------------------- library


def _floor_loop(inbox_path: str, lock_path: str, n: int, line: bytes) -> list[int]:
    """The design by hand, per line: open lock, flock, open inbox, write, fsync, close both."""
    lat = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        lk = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(lk, fcntl.LOCK_EX)
        fd = os.open(inbox_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.write(fd, line)
        os.fsync(fd)
        os.close(fd)
        os.close(lk)
        lat.append(clock() - t0)
    return lat


def _sotd_loop(home: str, handle: str, n: int, line: bytes) -> list[int]:
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    layout = Layout(home)
    lat = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        inbox.append(layout, handle, line, nfs=False, bound=2.0)
        lat.append(clock() - t0)
    return lat


def _writer(kind: str, home: str, handle: str, n: int, line: bytes, barrier: object, out: object) -> None:
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    layout = Layout(home)
    barrier.wait()  # type: ignore[attr-defined]
    t0 = time.monotonic_ns()
    if kind == "floor":
        lat = _floor_loop(layout.inbox(handle), layout.inbox_lock(handle), n, line)
    else:
        lat = _sotd_loop(home, handle, n, line)
    out.put((t0, time.monotonic_ns(), lat, inbox._waiters.started))  # type: ignore[attr-defined]


def lib_phase(home: str, kind: str, handle: str, writers: int, n: int, line: bytes) -> dict[str, object]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(writers)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(kind, home, handle, n, line, barrier, out), daemon=True)
        for _ in range(writers)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
        if p.exitcode != 0:
            raise RuntimeError(f"{kind} writer exited {p.exitcode}")
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    path = os.path.join(home, "inbox", f"{handle}.jsonl")
    with open(path, "rb") as f:
        data = f.read()
    if data != line * (writers * n):
        newlines = data.count(b"\n")
        raise RuntimeError(f"{kind}: expected {writers * n} whole lines, found {newlines} newlines")
    os.unlink(path)
    return {
        "per_s": writers * n / ((end - start) / 1e9),
        "lat": [x for r in results for x in r[2]],
        "helpers_per_process_max": max(r[3] for r in results),
    }


def run_lib(work: str, writers: int, n: int, rounds: int) -> dict[str, object]:
    from sotd.formats import inbox

    layout = common.make_comm(work)
    line = inbox.encode_line(
        "alpha-bench", "beta-bench", "bench", "contention " + "x" * 100, "2026-01-01T00:00:00Z"
    )
    lib_phase(layout.home, "sotd", "warm", 2, 20, line)
    tp: dict[str, list[float]] = {"floor": [], "sotd": []}
    lat: dict[str, list[int]] = {"floor": [], "sotd": []}
    paired: list[float] = []
    helpers = 0
    for r in range(rounds):
        got: dict[str, float] = {}
        for kind in ("floor", "sotd") if r % 2 == 0 else ("sotd", "floor"):
            res = lib_phase(layout.home, kind, f"{kind}-{r}", writers, n, line)
            got[kind] = res["per_s"]  # type: ignore[assignment]
            tp[kind].append(got[kind])
            lat[kind] += res["lat"]  # type: ignore[arg-type]
            if kind == "sotd":
                helpers = max(helpers, res["helpers_per_process_max"])  # type: ignore[type-var]
        paired.append(got["sotd"] / got["floor"])
    ratio = statistics.median(paired)
    return {
        "writers": writers,
        "lines_per_writer": n,
        "rounds": rounds,
        "floor": "per line: open lock file, blocking flock, open inbox O_APPEND, write, fsync, close both",
        "floor_per_s": common.summary(tp["floor"]),
        "sotd_per_s": common.summary(tp["sotd"]),
        "floor_latency_ms": common.summary(lat["floor"], 1e-6),
        "sotd_latency_ms": common.summary(lat["sotd"], 1e-6),
        "ratio_paired_rounds": common.summary(paired),
        "ratio": ratio,
        "helper_threads_per_process_max": helpers,
        "target": TARGET_LIB,
        "pass": ratio >= TARGET_LIB,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--secs", type=float, default=CLI_SECS, help="CLI phase length, s")
    ap.add_argument("--lines", type=int, default=150, help="appends per writer per round")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    if a.quick:
        a.secs, a.lines, a.rounds = 3.0, 30, 2
    work = tempfile.mkdtemp(prefix="sotd-bench-contention-", dir=common.bench_dir())
    try:
        facts = common.machine(work)
        lib = run_lib(os.path.join(work, "lib"), WRITERS, a.lines, a.rounds)
        cli = run_cli(os.path.join(work, "cli"), SENDERS, a.secs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    send = cli["send"]
    wall = send["wall_ms"]  # type: ignore[index]
    checks = send["checks"]  # type: ignore[index]
    cli["targets"] = {
        "lost": checks["missing"],  # type: ignore[index]
        "failed": checks["failures"],  # type: ignore[index]
        "p99_ms": wall["p99"],  # type: ignore[index]
        "max_ms": wall["max"],  # type: ignore[index]
        "pass_lost_failed": checks["missing"] == 0 and checks["failures"] == 0 and not checks["problems"],  # type: ignore[index]
        "pass_p99": wall["p99"] <= TARGET_P99_MS,  # type: ignore[index]
        "pass_max": wall["max"] <= TARGET_MAX_MS,  # type: ignore[index]
    }
    result = {
        "workload": "contention",
        "machine": facts,
        "params": {
            "senders": SENDERS,
            "cli_secs": a.secs,
            "writers": WRITERS,
            "lines": a.lines,
            "rounds": a.rounds,
        },
        "cli": cli,
        "lib": lib,
    }
    return common.finish("contention", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
