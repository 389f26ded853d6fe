"""Contention (issue 17, target 2): many senders to one inbox at once, from the CLI and in process.

- **CLI.** 16 joined sessions, each a thread running ``sotd comm send @rcpt <body>`` subprocesses back to
  back for 10 s (no daemon: each send appends itself). Counted: sends filed (exit 0) and FAILED (exit 1, by
  the answer's text), lines lost (filed but not in the inbox), FAILED-but-filed, the wall of every send
  (p50/p95/p99/max) and its CPU (the child's user+system time). Two controls in the same run, so the
  inbox lock's own share can be told from the two cores' queue: the same 16 threads running ``python -c
  pass`` (the floor, before and after), and the same 16 senders each sending to its own recipient (16
  inboxes, one writer each: the same processes and CPU, no shared lock). Targets: 0 lost, 0 FAILED, p99
  <= 150 ms, no send over 500 ms; checked here and printed as PASS/FAIL lines on stderr.
- **In process (the daemon's filing path).** 16 forked processes each call ``inbox.append`` M times into
  one inbox, against 16 processes doing the design by hand per line (``common.flocked_append_loop``, the
  floor ``bench/append.py`` uses too); rounds alternate which goes first. Target: sotd >= 0.6x the floor's
  lines per second. The 2 s bound with many waiters in one process is shown by
  ``tests/integration/test_inbox_procs.py``, the CLI's timer-bounded wait by
  ``tests/integration/test_inbox_alarm_wait.py`` (a bound is a guarantee, so it is a test, not a figure).

Usage: ``python -m bench.contention [--quick] [--secs S]``; writes ``bench/results/contention.json``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
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


def _run_timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, int, str]:
    """(wall s spawn to reap, child CPU s, exit code, last stderr line) of one run; stdout to /dev/null."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)  # fmt: skip
    assert p.stderr is not None
    err = p.stderr.read()
    p.stderr.close()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return wall, ru.ru_utime + ru.ru_stime, p.returncode, lines[-1] if lines else ""


def cli_phase(s: common.Sessions, kind: str, n: int, secs: float) -> dict[str, object]:
    """``n`` threads running, back to back for ``secs``: ``sotd comm send`` to the one recipient (kind
    "send"), ``sotd comm send`` each to its own recipient, the next sender (kind "spread"), or ``python -c
    pass`` (kind "floor")."""
    rcpt = s.handle[RCPT]
    lat: list[float] = []
    cpu: list[float] = []
    ok: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    reasons: dict[str, int] = {}
    lock = threading.Lock()
    go = threading.Barrier(n)
    stop_at = [0.0]

    def sender(i: int) -> None:
        who = f"s{i}"
        to = rcpt if kind == "send" else s.handle[f"s{(i + 1) % n}"]
        env, cwd = s.env[who], s.cwd[who]
        go.wait()
        seq = 0
        while time.monotonic() < stop_at[0]:
            if kind == "floor":
                argv = [common.PYTHON, "-c", "pass"]
            else:
                argv = [common.SOTD, "comm", "send", f"@{to}", fanin.body(who, seq, 200)]
            wall, used, code, last = _run_timed(argv, dict(env, PWD=cwd), cwd)
            with lock:
                lat.append(wall)
                cpu.append(used)
                (ok if code == 0 else failed).setdefault(who, []).append(seq)
                if code != 0:
                    reasons[last or f"exit {code}"] = reasons.get(last or f"exit {code}", 0) + 1
            seq += 1

    load_start = common.load_avg()
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
        "cpu_ms": common.summary(cpu, 1e3),
        "load_avg": [load_start, common.load_avg()],
    }
    if kind != "floor":
        paths = (
            [s.layout.inbox(rcpt)]
            if kind == "send"
            else [s.layout.inbox(s.handle[f"s{i}"]) for i in range(n)]
        )
        data = b""
        for path in paths:
            try:
                with open(path, "rb") as f:
                    data += f.read()  # each sender's lines are in one file, so its order survives
            except FileNotFoundError:
                pass
            with contextlib.suppress(FileNotFoundError):
                os.truncate(path, 0)
        out["checks"] = fanin.check_fanin(data, ok, failed, 0)
        out["failed_reasons"] = reasons
        out["over_500ms"] = sum(1 for x in lat if x * 1e3 > TARGET_MAX_MS)
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
    floor_before = cli_phase(s, "floor", n, secs / 2)
    send = cli_phase(s, "send", n, secs)
    spread = cli_phase(s, "spread", n, secs)
    floor_after = cli_phase(s, "floor", n, secs / 2)
    return {
        "floor_before": floor_before,
        "send": send,
        "spread": spread,
        "floor_after": floor_after,
        "recipient": rcpt,
    }


def verdicts(cli: dict[str, object], lib: dict[str, object], secs: float) -> list[str]:
    """The PASS/FAIL lines of the targets (and the controls that explain them), as printed."""
    send, spread = cli["send"], cli["spread"]
    fb, fa = cli["floor_before"], cli["floor_after"]
    w, ck = send["wall_ms"], send["checks"]  # type: ignore[index]
    t = cli["targets"]

    def pf(ok: object) -> str:
        return "PASS" if ok else "FAIL"

    def ms(d: dict[str, float]) -> str:
        return f"p50 {d['median']:.0f} / p99 {d['p99']:.0f} / max {d['max']:.0f} ms"

    return [
        f"{pf(t['pass_lost_failed'])}  {SENDERS} CLI senders, one inbox, {secs:.0f} s: {ck['successes']} filed, "  # type: ignore[index]
        f"{ck['failures']} FAILED, {ck['missing']} lost, {ck['failed_but_filed']} FAILED-but-filed, "  # type: ignore[index]
        f"{len(ck['problems'])} problems (target 0 lost, 0 FAILED)",  # type: ignore[index]
        f"{pf(t['pass_p99'])}  send p99 {w['p99']:.0f} ms (target <= {TARGET_P99_MS:.0f}); {ms(w)}",  # type: ignore[index]
        f"{pf(t['pass_max'])}  slowest send {w['max']:.0f} ms, {send['over_500ms']} over {TARGET_MAX_MS:.0f} ms "  # type: ignore[index]
        f"(target none)",
        f"      control, each sender to its own inbox (no shared lock): {ms(spread['wall_ms'])}",  # type: ignore[index]
        f"      control, python -c pass: before {ms(fb['wall_ms'])}; after {ms(fa['wall_ms'])}",  # type: ignore[index]
        f"      CPU per run (median): send {send['cpu_ms']['median']:.1f} ms, python -c pass "  # type: ignore[index]
        f"{fb['cpu_ms']['median']:.1f} ms; load average {send['load_avg']}",  # type: ignore[index]
        f"{pf(lib['pass'])}  {WRITERS} in-process writers: {lib['ratio']:.2f}x the flocked floor "
        f"(target >= {TARGET_LIB}x), from a worker thread as the daemon files; helper threads per process "
        f"<= {lib['helper_threads_per_process_max']}",
        f"      the same from the main thread (the CLI's timer wait): {lib['main_thread']['ratio']:.2f}x, helper "  # type: ignore[index]
        f"threads {lib['main_thread']['helper_threads_per_process_max']}",  # type: ignore[index]
    ]


# ------------------------------------------------------------------------------------------- library


def _writer(kind: str, home: str, handle: str, n: int, line: bytes, barrier: object, out: object) -> None:
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    layout = Layout(home)
    barrier.wait()  # type: ignore[attr-defined]
    t0 = time.monotonic_ns()
    if kind == "floor":
        lat = common.flocked_append_loop(layout.inbox(handle), layout.inbox_lock(handle), n, line)
    elif kind == "sotd":  # the daemon's filing path: a worker thread, so a contended wait uses a helper
        got: list[list[int]] = []
        worker = threading.Thread(target=lambda: got.append(common.sotd_append_loop(home, handle, n, line)))
        worker.start()
        worker.join()
        lat = got[0]
    else:  # "sotd-main": the CLI's path, the main thread, so a contended wait uses the timer
        lat = common.sotd_append_loop(home, handle, n, line)
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
    kinds = ("floor", "sotd", "sotd-main")
    tp: dict[str, list[float]] = {k: [] for k in kinds}
    lat: dict[str, list[int]] = {k: [] for k in kinds}
    paired: dict[str, list[float]] = {"sotd": [], "sotd-main": []}
    helpers: dict[str, int] = {"sotd": 0, "sotd-main": 0}
    for r in range(rounds):
        got: dict[str, float] = {}
        for kind in kinds if r % 2 == 0 else tuple(reversed(kinds)):
            res = lib_phase(layout.home, kind, f"{kind}-{r}", writers, n, line)
            got[kind] = res["per_s"]  # type: ignore[assignment]
            tp[kind].append(got[kind])
            lat[kind] += res["lat"]  # type: ignore[arg-type]
            if kind in helpers:
                helpers[kind] = max(helpers[kind], res["helpers_per_process_max"])  # type: ignore[type-var]
        for k, ratios in paired.items():
            ratios.append(got[k] / got["floor"])
    ratio = statistics.median(paired["sotd"])
    return {
        "writers": writers,
        "lines_per_writer": n,
        "rounds": rounds,
        "floor": "common.flocked_append_loop: per line, open lock file, blocking flock, open inbox O_APPEND, "
        "write, fsync, close both",
        "floor_per_s": common.summary(tp["floor"]),
        "sotd_per_s": common.summary(tp["sotd"]),
        "floor_latency_ms": common.summary(lat["floor"], 1e-6),
        "sotd_latency_ms": common.summary(lat["sotd"], 1e-6),
        "ratio_paired_rounds": common.summary(paired["sotd"]),
        "ratio": ratio,
        "helper_threads_per_process_max": helpers["sotd"],
        "main_thread": {
            "what": "the same appends from each process's main thread (the CLI's path: the timer-bounded wait)",
            "per_s": common.summary(tp["sotd-main"]),
            "latency_ms": common.summary(lat["sotd-main"], 1e-6),
            "ratio_paired_rounds": common.summary(paired["sotd-main"]),
            "ratio": statistics.median(paired["sotd-main"]),
            "helper_threads_per_process_max": helpers["sotd-main"],
        },
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
    lines = verdicts(cli, lib, a.secs)
    for line in lines:
        print(f"contention: {line}", file=sys.stderr)
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
        "verdicts": lines,
    }
    return common.finish("contention", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
