"""Fan-in (issue 6, W2): N senders x M messages into one recipient's inbox, with the invariants checked.

Two views, both with bodies of 200 B and 4 KiB and N in {1, 4, 16}:

- **Throughput (library).** N forked processes each call ``sotd.formats.inbox.append`` M times (the
  daemon's and the CLI's one append path: lock, tail check, write, fsync, unlock). Floor, same run,
  alternating which goes first: N processes doing ``os.write`` + ``os.fsync`` of the same lines on one
  shared O_APPEND file with no lock (a raw write+fsync loop).
- **Latency (CLI).** N threads each run ``sotd comm send @rcpt <body>`` as a subprocess, one after another,
  M times (N joined sender sessions, no daemon). Floor: the same N threads running
  ``python -c "import json, socket, fcntl, os"``.

In both, a watcher thread in the parent takes the recipient's shared read lock (behaviour 6.5) every
0.5 ms and reads what is new: "send->readable" is the time from the start of an append (or the spawn of a
send) to the first read that shows its line.

Checks (each run): every successful send is in the inbox exactly once; each sender's lines are in its
order; no read under the shared lock ever ended inside a line (no partial line visible); no send that
answered FAILED (or raised) is in the inbox; every line parses. ``check_fanin`` is what
``tests/reliability/test_suite_fanin.py`` asserts.

Usage: ``python -m bench.fanin [--quick]``; writes ``bench/results/fanin.json``.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench import common

NS = (1, 4, 16)
BODIES = (200, 4096)
RCPT = "rcpt"


def body(wid: str, seq: int, size: int) -> str:
    head = f"fanin {wid} {seq} "
    return head + "b" * max(0, size - len(head))


def ident(line: bytes) -> tuple[str, int] | None:
    """(sender, seq) of a fan-in line, from its ``msg``."""
    i = line.find(b'"msg":"fanin ')
    if i < 0:
        return None
    parts = line[i + 13 : i + 80].split(b" ", 2)
    return parts[0].decode(), int(parts[1])


class Watcher(threading.Thread):
    """Reads the inbox under the shared lock every ``interval`` s; first-seen time of each line; partial reads."""

    def __init__(self, inbox_path: str, lock_path: str, interval: float = 0.0005) -> None:
        super().__init__(daemon=True)
        self.path = inbox_path
        self.lock_path = lock_path
        self.interval = interval
        self.seen: dict[tuple[str, int], int] = {}
        self.dupes = 0
        self.partial = 0
        self.reads = 0
        self.stop = threading.Event()
        self.offset = 0

    def run(self) -> None:
        lk = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while True:
                last = self.stop.is_set()
                self.scan(lk)
                if last:
                    return
                time.sleep(self.interval)
        finally:
            os.close(lk)

    def scan(self, lk: int) -> None:
        fcntl.flock(lk, fcntl.LOCK_SH)
        try:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return
            try:
                size = os.fstat(fd).st_size
                data = os.pread(fd, size - self.offset, self.offset) if size > self.offset else b""
            finally:
                os.close(fd)
        finally:
            fcntl.flock(lk, fcntl.LOCK_UN)
        now = time.monotonic_ns()
        self.reads += 1
        if not data:
            return
        if not data.endswith(b"\n"):
            self.partial += 1
            data = data[: data.rfind(b"\n") + 1]
        self.offset += len(data)
        for line in data.split(b"\n")[:-1]:
            k = ident(line)
            if k is None:
                continue
            if k in self.seen:
                self.dupes += 1
            else:
                self.seen[k] = now


def check_fanin(
    data: bytes, ok: dict[str, list[int]], failed: dict[str, list[int]], partial_reads: int
) -> dict[str, object]:
    """The W2 invariants on the final inbox bytes. ``ok``/``failed``: per sender, the seqs that succeeded
    (in the order sent) and those that failed. Returns the counts; ``problems`` lists every violation."""
    problems: list[str] = []
    if data and not data.endswith(b"\n"):
        problems.append("the inbox ends inside a line")
    per: dict[str, list[int]] = {}
    count: dict[tuple[str, int], int] = {}
    bad = 0
    for line in data.split(b"\n")[:-1] if data else []:
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        k = ident(line)
        if not isinstance(obj, dict) or k is None:
            bad += 1
            continue
        count[k] = count.get(k, 0) + 1
        per.setdefault(k[0], []).append(k[1])
    if bad:
        problems.append(f"{bad} lines do not parse as fan-in records")
    dupes = sum(1 for v in count.values() if v > 1)
    if dupes:
        problems.append(f"{dupes} lines appear more than once")
    missing = [(w, s) for w, seqs in ok.items() for s in seqs if (w, s) not in count]
    if missing:
        problems.append(f"{len(missing)} successful sends are missing, e.g. {missing[:3]}")
    filed_failed = [(w, s) for w, seqs in failed.items() for s in seqs if (w, s) in count]
    if filed_failed:
        problems.append(f"{len(filed_failed)} sends answered FAILED but were filed, e.g. {filed_failed[:3]}")
    disorder = [w for w, seqs in per.items() if seqs != sorted(seqs)]
    if disorder:
        problems.append(f"senders out of order: {disorder[:3]}")
    if partial_reads:
        problems.append(f"{partial_reads} reads under the shared lock ended inside a line")
    return {
        "lines": sum(count.values()),
        "successes": sum(len(v) for v in ok.values()),
        "failures": sum(len(v) for v in failed.values()),
        "duplicates": dupes,
        "missing": len(missing),
        "failed_but_filed": len(filed_failed),
        "out_of_order_senders": len(disorder),
        "partial_reads": partial_reads,
        "problems": problems,
    }


# --------------------------------------------------------------------------------------- library view


def _lib_writer(kind: str, home: str, target: str, wid: str, m: int, size: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    from sotd.errors import SotdError
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    lines = [
        inbox.encode_line(wid, RCPT, "bench", body(wid, s, size), "2026-01-01T00:00:00Z") for s in range(m)
    ]
    layout = Layout(home)
    starts: list[int] = []
    lat: list[int] = []
    ok: list[int] = []
    failed: list[int] = []
    fd = -1
    if kind == "raw":
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    barrier.wait()
    t_begin = time.monotonic_ns()
    for s, line in enumerate(lines):
        t0 = time.monotonic_ns()
        try:
            if kind == "raw":
                os.write(fd, line)
                os.fsync(fd)
            else:
                inbox.append(layout, target, line, nfs=False, bound=30.0)
            ok.append(s)
        except SotdError:
            failed.append(s)
        t1 = time.monotonic_ns()
        starts.append(t0)
        lat.append(t1 - t0)
    if fd >= 0:
        os.close(fd)
    out.put((wid, t_begin, time.monotonic_ns(), starts, lat, ok, failed))


def lib_run(kind: str, layout, tag: str, n: int, m: int, size: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """One run of ``n`` processes x ``m`` lines: throughput, per-append latency, send->readable, checks."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(n)
    out = ctx.Queue()
    if kind == "raw":
        path = os.path.join(layout.inbox_dir, f"raw-{tag}.jsonl")
        target = path
        lock_path = path + ".lock"
    else:
        target = f"{RCPT}{tag}"
        path = layout.inbox(target)
        lock_path = layout.inbox_lock(target)
    w = Watcher(
        path, lock_path, interval=0.002
    )  # a reader every 2 ms: it holds off sotd's writers, not raw's
    w.start()
    procs = [
        ctx.Process(target=_lib_writer, args=(kind, layout.home, target, f"w{i}", m, size, barrier, out))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    res = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    w.stop.set()
    w.join(30)
    begin = min(r[1] for r in res)
    end = max(r[2] for r in res)
    lat = [x / 1e9 for r in res for x in r[4]]
    e2e = [(w.seen[(r[0], s)] - r[3][s]) / 1e9 for r in res for s in r[5] if (r[0], s) in w.seen]
    with open(path, "rb") as f:
        data = f.read()
    checks = check_fanin(data, {r[0]: r[5] for r in res}, {r[0]: r[6] for r in res}, w.partial)
    os.unlink(path)
    return {"per_s": n * m / ((end - begin) / 1e9), "lat": lat, "e2e": e2e, "checks": checks}


# ------------------------------------------------------------------------------------------- CLI view


def _spawn_code(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    """(wall seconds spawn to reap, exit code); threads share the process's cwd, so Popen sets the child's."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    code = p.wait(120)
    return time.perf_counter() - t0, code


def cli_run(s: common.Sessions, rcpt: str, kind: str, n: int, m: int, size: int) -> dict[str, object]:
    """``n`` threads x ``m`` subprocesses: ``sotd comm send`` (kind "send") or the interpreter floor."""
    lay = s.layout
    w = Watcher(lay.inbox(rcpt), lay.inbox_lock(rcpt))
    if kind == "send":
        w.start()
    lat: list[float] = []
    e2e: list[float] = []
    ok: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    spawned: dict[tuple[str, int], int] = {}
    go = threading.Barrier(n)
    lock = threading.Lock()

    def sender(i: int) -> None:
        who = f"s{i}"
        env, cwd = s.env[who], s.cwd[who]
        go.wait()
        for seq in range(m):
            if kind == "send":
                argv = [common.SOTD, "comm", "send", f"@{rcpt}", body(who, seq, size)]
            else:
                argv = [common.PYTHON, "-c", common.FLOOR_CODE]
            spawned[(who, seq)] = time.monotonic_ns()
            secs, code = _spawn_code(argv, dict(env, PWD=cwd), cwd)
            with lock:
                lat.append(secs)
                (ok if code == 0 else failed).setdefault(who, []).append(seq)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    elapsed = time.perf_counter() - t0
    result: dict[str, object] = {"per_s": n * m / elapsed, "lat": lat}
    if kind == "send":
        w.stop.set()
        w.join(30)
        e2e = [(w.seen[k] - t) / 1e9 for k, t in spawned.items() if k in w.seen]
        with open(lay.inbox(rcpt), "rb") as f:
            data = f.read()
        result["e2e"] = e2e
        result["checks"] = check_fanin(data, ok, failed, w.partial)
        os.truncate(lay.inbox(rcpt), 0)
    return result


# ------------------------------------------------------------------------------------------------ run


def _merge(acc: dict[str, dict[str, list[float]]], key: str, r: dict[str, object]) -> None:
    a = acc.setdefault(key, {"per_s": [], "lat": [], "e2e": []})
    a["per_s"].append(r["per_s"])  # type: ignore[arg-type]
    a["lat"] += r["lat"]  # type: ignore[operator]
    a["e2e"] += r.get("e2e", [])  # type: ignore[operator]


def run(rounds: int, lib_m: dict[int, int], cli_m: dict[int, int], cli_rounds: int) -> dict[str, object]:
    from sotd.formats.layout import Layout  # noqa: F401  (fork children import it anyway)

    work = tempfile.mkdtemp(prefix="sotd-bench-fanin-", dir=common.bench_dir())
    problems: list[str] = []
    all_checks: list[dict[str, object]] = []
    lib: dict[str, dict[str, list[float]]] = {}
    cli: dict[str, dict[str, list[float]]] = {}
    try:
        s = common.Sessions(work)
        facts = common.machine(s.layout.home)
        # library view
        for r in range(rounds):
            for n in NS:
                for size in BODIES:
                    order = ("raw", "sotd") if (r + n + size) % 2 == 0 else ("sotd", "raw")
                    for kind in order:
                        res = lib_run(kind, s.layout, f"{r}-{n}-{size}", n, lib_m[n], size)
                        _merge(lib, f"{kind} n={n} body={size}", res)
                        if kind == "sotd":
                            c: dict = res["checks"]  # type: ignore[assignment]
                            all_checks.append(c)
                            problems += [f"library n={n} body={size}: {p}" for p in c["problems"]]
        # CLI view
        rcpt = s.add(RCPT)
        for i in range(max(NS)):
            s.add(f"s{i}")
        for n in NS:  # correctness first, and it warms the .pyc cache
            cli_run(s, rcpt, "send", n, 1, 200)
        for r in range(cli_rounds):
            for n in NS:
                for size in BODIES:
                    order = ("floor", "send") if (r + n) % 2 == 0 else ("send", "floor")
                    for kind in order:
                        res = cli_run(s, rcpt, kind, n, cli_m[n], size)
                        _merge(cli, f"{kind} n={n} body={size}", res)
                        if kind == "send":
                            c = res["checks"]  # type: ignore[assignment]
                            all_checks.append(c)
                            problems += [f"cli n={n} body={size}: {p}" for p in c["problems"]]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()

    def rows(acc: dict[str, dict[str, list[float]]], floor: str, kind: str) -> list[dict[str, object]]:
        out = []
        for n in NS:
            for size in BODIES:
                f, x = acc[f"{floor} n={n} body={size}"], acc[f"{kind} n={n} body={size}"]
                out.append(
                    {
                        "n": n,
                        "body": size,
                        "floor_per_s": common.summary(f["per_s"]),
                        "per_s": common.summary(x["per_s"]),
                        "ratio": common.ratio(x["per_s"], f["per_s"]),
                        "floor_latency_ms": common.summary(f["lat"], 1000),
                        "latency_ms": common.summary(x["lat"], 1000),
                        "latency_ratio": common.ratio(x["lat"], f["lat"]),
                        "e2e_ms": common.summary(x["e2e"], 1000) if x["e2e"] else None,
                        "floor_e2e_ms": common.summary(f["e2e"], 1000) if f["e2e"] else None,
                    }
                )
        return out

    total = {
        k: sum(int(c[k]) for c in all_checks)  # type: ignore[call-overload]
        for k in (
            "lines",
            "successes",
            "failures",
            "duplicates",
            "missing",
            "failed_but_filed",
            "partial_reads",
        )
    }
    return {
        "workload": "fanin",
        "machine": facts,
        "params": {
            "rounds_library": rounds,
            "messages_per_sender_library": {str(k): v for k, v in lib_m.items()},
            "rounds_cli": cli_rounds,
            "messages_per_sender_cli": {str(k): v for k, v in cli_m.items()},
            "bodies": list(BODIES),
        },
        "library": rows(lib, "raw", "sotd"),
        "cli": rows(cli, "floor", "send"),
        "checks": {"runs": len(all_checks), **total, "problems": problems, "pass": not problems},
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cli-rounds", type=int, default=2)
    a = ap.parse_args(argv)
    lib_m = {1: 300, 4: 100, 16: 30}
    cli_m = {1: 8, 4: 3, 16: 2}
    if a.quick:
        a.rounds, a.cli_rounds = 1, 1
        lib_m = {1: 60, 4: 30, 16: 10}
        cli_m = {1: 3, 4: 2, 16: 1}
    return common.finish("fanin", run(a.rounds, lib_m, cli_m, a.cli_rounds), a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
