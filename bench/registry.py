"""Registry contention (issue 6, W5): 32 concurrent joins and touches, reclaim, and a frozen holder.

Both contending workloads run sotd's own code paths, with only a timer wrapped around
``RegistryLock.acquire`` and ``release`` (the class attributes replaced in the measured process; the lock's
behaviour is untouched), so that the lock wait and the hold are timed apart:

- **Joins.** 32 ``sotd comm join --name rNN`` processes started at once (32 sessions of one comm folder):
  each a fresh interpreter running the CLI's ``main`` (what the ``sotd`` console script runs) behind a few
  lines that install the timer and append each take's wait and hold to a side file. Wall time of each
  join; then the registry must list all 32, with no temp file and no lock left.
- **Touches.** 32 forked processes, one per joined session, each calling
  ``sotd.formats.registry.touch(layout, host, handle, bound=1.0)`` K times back to back: the best-effort
  ``last_seen`` touch that every ``send`` and ``poll`` makes, with their 1 s bound. A touch that cannot
  take the lock within the bound raises ``LockFailed``; ``send`` and ``poll`` drop it, so here it counts
  as skipped, not as a failure. Every touch here is made due (``registry.TOUCH_EVERY_S`` set to 0 in the
  touching processes): a real touch rewrites the row only when its stamp is a minute old, so this is the
  worst case of a box where every session's touch falls due at once, and a touch inside its minute, which
  takes no lock at all, would time nothing. Before each round every row's ``last_seen`` is set to a marker; after it,
  every row must still be there with its other fields unchanged, and every session with a touch that
  landed must show a new stamp. Floor, same run, alternating: the same 32 x K ``last_seen`` writes to a
  copy of the same registry under a blocking ``flock`` of a side file (read, change, write temp, fsync,
  rename, fsync the folder: the kernel's lock hand-off, no proof record, no bound).
- **Reclaim.** A holder takes the lock, is SIGKILLed; the time for the next taker (default settle, 1 s) to
  hold it. **Frozen holder.** A holder is SIGSTOPped; a taker with a 1 s bound must fail naming it as
  running, and the lock file must be unchanged with no reclaim marker.

``run_registry`` is what ``tests/reliability/test_suite_registry.py`` asserts (its ``problems`` list).

Usage: ``python -m bench.registry [--quick]``; writes ``bench/results/registry.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench import common

HOLDER = """
import sys
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock
lk = RegistryLock(Layout(sys.argv[1]), sys.argv[2], 10)
with lk:
    print(lk.me.record(), flush=True)
    sys.stdin.read()
"""


JOIN = """
import os, sys
sys.path.insert(0, sys.argv[1])
from bench.locktimer import install
_log = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
install(lambda w, h, ok: os.write(_log, f"{w} {h} {int(ok)}\\n".encode()))
from sotd.cli.main import main
sys.exit(main(sys.argv[3:]))
"""

MARK = "2000-01-01T00:00:00Z"


def _toucher(kind: str, home: str, handle: str, k: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    from sotd.errors import LockFailed
    from sotd.formats import registry
    from sotd.formats.layout import Layout

    lay = Layout(home)
    waits: list[float] = []
    holds: list[float] = []
    landed = skipped = 0

    def record(w: float, h: float | None, ok: bool) -> None:
        waits.append(w)
        if ok and h is not None:
            holds.append(h)

    if kind == "sotd":
        from bench.locktimer import install

        install(record)
        registry.TOUCH_EVERY_S = 0  # every touch due: see the module's header
    barrier.wait()
    t_begin = time.perf_counter()
    if kind == "sotd":
        for _ in range(k):
            try:
                if registry.touch(lay, common.HOST, handle, bound=1.0):
                    landed += 1
            except LockFailed:
                skipped += 1
    else:
        path = os.path.join(home, "floor.json")
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        for _ in range(k):
            t0 = time.perf_counter()
            fcntl.flock(fd, fcntl.LOCK_EX)
            t1 = time.perf_counter()
            try:
                with open(path, "rb") as f:
                    doc = json.loads(f.read())
                registry.set_last_seen(doc, handle)
                tmp = path + f".tmp.{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write(json.dumps(doc).encode())
                    f.flush()
                    os.fsync(f.fileno())
                os.rename(tmp, path)
                dfd = os.open(home, os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            record(t1 - t0, time.perf_counter() - t1, True)
            landed += 1
        os.close(fd)
    out.put((handle, waits, holds, landed, skipped, t_begin, time.perf_counter()))


def _rows(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    """Every row without its ``last_seen`` (what a touch must never change)."""
    from sotd.formats import registry

    return {
        h: {k: v for k, v in row.items() if k != "last_seen"}
        for h, row in registry.agents_of(doc).items()
        if isinstance(row, dict)
    }


def touches(kind: str, home: str, handles: list[str], k: int) -> dict[str, object]:
    """One round: a process per handle, ``k`` touches each (sotd's ``registry.touch``, or the floor)."""
    from sotd.formats import registry
    from sotd.formats.layout import Layout

    lay = Layout(home)

    def mark(doc: dict[str, object]) -> tuple[bool, None]:
        for h in handles:
            registry.set_last_seen(doc, h, MARK)
        return True, None

    before, _ = registry.update(lay, common.HOST, mark, bound=10)
    if kind == "floor":
        with open(os.path.join(home, "floor.json"), "wb") as f:
            f.write(registry.encode(before))
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(handles))
    out = ctx.Queue()
    ps = [ctx.Process(target=_toucher, args=(kind, home, h, k, barrier, out)) for h in handles]
    for p in ps:
        p.start()
    res = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(30)
    elapsed = max(r[6] for r in res) - min(r[5] for r in res)
    if kind == "sotd":
        after = registry.read(lay) or {}
    else:
        with open(os.path.join(home, "floor.json"), "rb") as f:
            after = json.loads(f.read())
    agents = registry.agents_of(after)
    landed = {r[0]: r[3] for r in res}
    stale = [h for h, n in landed.items() if n and agents.get(h, {}).get("last_seen") == MARK]  # type: ignore[union-attr]
    rows_after = _rows(after)
    changed = [h for h, row in _rows(before).items() if rows_after.get(h) != row]
    return {
        "per_s": sum(landed.values()) / elapsed,
        "calls_per_s": len(handles) * k / elapsed,
        "waits": [w for r in res for w in r[1]],
        "holds": [h for r in res for h in r[2]],
        "landed": sum(landed.values()),
        "skipped": sum(r[4] for r in res),
        "lost_update_rows": stale + changed,
    }


def start_holder(home: str, host: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, home, host], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    rec = p.stdout.readline().strip()
    if not rec:
        raise RuntimeError("the holder did not take the lock")
    return p, rec


def _close_pipes(p: subprocess.Popen[str]) -> None:
    """A holder that was waited for: its pipes closed too (no file left for the garbage collector)."""
    for pipe in (p.stdin, p.stdout):
        if pipe is not None:
            pipe.close()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def run_registry(
    work: str,
    joins: int = 32,
    procs: int = 32,
    k: int = 5,
    rounds: int = 2,
    reclaims: int = 3,
    frozen: int = 2,
) -> dict[str, object]:
    """Every part; ``problems`` lists each violated invariant (empty when all hold)."""
    from sotd.errors import LockFailed
    from sotd.formats import registry
    from sotd.formats.reglock import RegistryLock

    problems: list[str] = []
    s = common.Sessions(work)
    lay = s.layout
    registry.ensure(lay)
    # joins
    names = [f"r{i:02d}" for i in range(joins)]
    for n in names:
        s.add(n, join=False)
    s.add("warm")  # one join first: warms the .pyc cache
    join_log = os.path.join(work, "join-lock.log")
    t0 = time.perf_counter()
    ps = {
        n: subprocess.Popen(
            [common.PYTHON, "-c", JOIN, common.ROOT, join_log, "comm", "join", "--name", n],
            cwd=s.cwd[n],
            env=s.env[n],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in names
    }
    join_wall: list[float] = []
    for n, p in ps.items():
        o, e = p.communicate(timeout=120)
        join_wall.append(time.perf_counter() - t0)
        if p.returncode != 0 or f"@{n}" not in o:
            problems.append(f"join {n}: exit {p.returncode}: {o.strip()[:200]} {e.strip()[:200]}")
    joins_elapsed = time.perf_counter() - t0
    join_takes: list[tuple[float, float | None, bool]] = []
    with contextlib.suppress(FileNotFoundError), open(join_log, encoding="utf-8") as f:
        for line in f:
            w, h, ok = line.split()
            join_takes.append((float(w), None if h == "None" else float(h), ok == "1"))
    if len(join_takes) < len(names):
        problems.append(f"{len(join_takes)} registry lock takes timed for {len(names)} joins")
    agents = registry.agents_of(registry.read(lay) or {})
    lost = [n for n in names if n not in agents]
    if lost:
        problems.append(f"{len(lost)} joined handles missing from the registry: {lost[:5]}")
    leftovers = [f for f in os.listdir(lay.home) if ".tmp" in f or f == os.path.basename(lay.reglock)]
    if leftovers:
        problems.append(f"left in the comm folder after the joins: {leftovers}")
    # touches (sotd's registry.touch), alternating with the floor
    handles = names[: max(1, min(procs, joins))]
    acc: dict[str, dict[str, list[float]]] = {
        x: {"per_s": [], "calls_per_s": [], "waits": [], "holds": []} for x in ("sotd", "floor")
    }
    landed = skipped = 0
    for r in range(rounds):
        for kind in ("sotd", "floor") if r % 2 == 0 else ("floor", "sotd"):
            res = touches(kind, lay.home, handles, k)
            for key in ("waits", "holds"):
                acc[kind][key] += res[key]  # type: ignore[operator]
            for key in ("per_s", "calls_per_s"):
                acc[kind][key].append(res[key])  # type: ignore[arg-type]
            if kind == "sotd":
                landed += int(res["landed"])  # type: ignore[call-overload]
                skipped += int(res["skipped"])  # type: ignore[call-overload]
                if res["lost_update_rows"]:
                    problems.append(f"lost updates under the registry lock: {res['lost_update_rows'][:5]}")
    if os.path.exists(lay.reglock):
        problems.append("the registry lock is still there after the touches")
    # reclaim after a SIGKILLed holder
    reclaim: list[float] = []
    for i in range(reclaims):
        p, rec = start_holder(lay.home, f"victim{i}")
        p.kill()
        p.wait(10)
        _close_pipes(p)
        t0 = time.perf_counter()
        try:
            with RegistryLock(lay, "reclaimer", 10) as lk:
                reclaim.append(time.perf_counter() - t0)
                with open(lay.reglock) as f:
                    if f.read().strip() != lk.me.record():
                        problems.append("after a reclaim the lock does not name the reclaimer")
        except LockFailed as e:
            problems.append(f"a SIGKILLed holder was not reclaimed: {e.message}")
    # a stopped holder is never forced
    never_forced = 0
    for i in range(frozen):
        p, rec = start_holder(lay.home, f"frozen{i}")
        try:
            os.kill(p.pid, signal.SIGSTOP)
            for _ in range(200):
                if _stopped(p.pid):
                    break
                time.sleep(0.01)
            markers_before = sorted(f for f in os.listdir(lay.home) if ".reclaim." in f)
            try:
                RegistryLock(lay, "impatient", 1.0).acquire()
                problems.append("a SIGSTOPped holder's lock was taken")
            except LockFailed as e:
                if "it is running" not in e.message or f"pid {p.pid}" not in e.message:
                    problems.append(f"a frozen holder's refusal does not name it as running: {e.message}")
                else:
                    never_forced += 1
            with open(lay.reglock) as f:
                if f.read().strip() != rec:
                    problems.append("the frozen holder's lock file changed")
            if sorted(f for f in os.listdir(lay.home) if ".reclaim." in f) != markers_before:
                problems.append("a reclaim marker was written for a frozen holder")
        finally:
            os.kill(p.pid, signal.SIGCONT)
            assert p.stdin is not None
            p.stdin.close()
            p.wait(10)
            _close_pipes(p)
    if os.path.exists(lay.reglock):
        problems.append("the registry lock is still there at the end")
    return {
        "joins": joins,
        "join_wall_ms": common.summary(join_wall, 1000),
        "joins_elapsed_s": joins_elapsed,
        "join_path": "sotd comm join (the CLI's main in a fresh interpreter, lock timer around it)",
        "join_lock_takes": len(join_takes),
        "join_wait_ms": common.summary([w for w, _, _ in join_takes], 1000) if join_takes else None,
        "join_hold_ms": common.summary([h for _, h, ok in join_takes if ok and h is not None], 1000)
        if any(ok for _, _, ok in join_takes)
        else None,
        "join_wait_hist_ms": _hist([w for w, _, _ in join_takes]),
        "touch_path": "sotd.formats.registry.touch(layout, host, handle, bound=1.0)",
        "touch_bound_s": 1.0,
        "touch_procs": len(handles),
        "touches_per_proc": k,
        "touch_rounds": rounds,
        "touch_landed": landed,
        "touch_skipped": skipped,
        "sotd_per_s": common.summary(acc["sotd"]["per_s"]),
        "sotd_calls_per_s": common.summary(acc["sotd"]["calls_per_s"]),
        "floor_per_s": common.summary(acc["floor"]["per_s"]),
        "ratio": common.ratio(acc["sotd"]["per_s"], acc["floor"]["per_s"]),
        "sotd_wait_ms": common.summary(acc["sotd"]["waits"], 1000),
        "floor_wait_ms": common.summary(acc["floor"]["waits"], 1000),
        "sotd_hold_ms": common.summary(acc["sotd"]["holds"], 1000),
        "floor_hold_ms": common.summary(acc["floor"]["holds"], 1000),
        "sotd_wait_hist_ms": _hist(acc["sotd"]["waits"]),
        "floor_wait_hist_ms": _hist(acc["floor"]["waits"]),
        "reclaim_ms": common.summary(reclaim, 1000) if reclaim else None,
        "frozen_never_forced": f"{never_forced}/{frozen}",
        "problems": problems,
        "pass": not problems,
    }


EDGES_MS = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000)


def _hist(values: list[float]) -> dict[str, int]:
    out: dict[str, int] = {}
    lo = 0.0
    for e in (*EDGES_MS, float("inf")):
        label = f"<{e}" if e != float("inf") else f">={EDGES_MS[-1]}"
        out[label] = sum(1 for v in values if lo <= v * 1000 < e)
        lo = e
    return out


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="sotd-bench-reg-", dir=common.bench_dir())
    try:
        facts = common.machine(work)
        if a.quick:
            res = run_registry(work, joins=32, procs=32, k=2, rounds=2, reclaims=1, frozen=1)
        else:
            res = run_registry(work, joins=32, procs=32, k=5, rounds=4, reclaims=3, frozen=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    return common.finish("registry", {"workload": "registry", "machine": facts, **res}, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
