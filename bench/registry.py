"""Registry contention (issue 6, W5): 32 concurrent joins and touches, reclaim, and a frozen holder.

- **Joins.** 32 ``sotd comm join --name rNN`` subprocesses started at once (32 sessions of one comm folder);
  wall time of each; then the registry must list all 32, with no temp file and no lock left.
- **Touches.** 32 forked processes each do K read-decide-writes under ``RegistryLock`` (bound 30 s): the
  lock wait (``acquire``) and the hold (``registry.update_locked``: fresh read, change, write temp, fsync,
  rename, fsync the folder) timed apart. Each change increments a counter in the process's own row, so a
  lost update shows as a short count. Floor, same run, alternating: the same 32 x K read-modify-writes of the
  same file under a blocking ``flock`` of a side file (the kernel's lock hand-off, no proof record).
- **Reclaim.** A holder takes the lock, is SIGKILLed; the time for the next taker (default settle, 1 s) to
  hold it. **Frozen holder.** A holder is SIGSTOPped; a taker with a 1 s bound must fail naming it as
  running, and the lock file must be unchanged with no reclaim marker.

``run_registry`` is what ``tests/reliability/test_suite_registry.py`` asserts (its ``problems`` list).

Usage: ``python -m bench.registry [--quick]``; writes ``bench/results/registry.json``.
"""

from __future__ import annotations

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


def _toucher(kind: str, home: str, handle: str, k: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    from sotd.formats import registry
    from sotd.formats.layout import Layout
    from sotd.formats.reglock import RegistryLock

    lay = Layout(home)

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        row = registry.agents_of(doc).setdefault(handle, {"host": common.HOST})
        row["bench_touches"] = int(row.get("bench_touches", 0)) + 1  # type: ignore[union-attr, call-overload]
        registry.set_last_seen(doc, handle)
        return True, None

    waits: list[float] = []
    holds: list[float] = []
    barrier.wait()
    if kind == "sotd":
        for _ in range(k):
            lk = RegistryLock(lay, common.HOST, 30)
            t0 = time.perf_counter()
            lk.acquire()
            t1 = time.perf_counter()
            try:
                registry.update_locked(lay, change)
            finally:
                lk.release()
            waits.append(t1 - t0)
            holds.append(time.perf_counter() - t1)
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
                change(doc)
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
            waits.append(t1 - t0)
            holds.append(time.perf_counter() - t1)
        os.close(fd)
    out.put((handle, waits, holds))


def touches(kind: str, home: str, procs: int, k: int) -> dict[str, object]:
    from sotd.formats import registry
    from sotd.formats.layout import Layout

    if kind == "floor":
        with open(os.path.join(home, "floor.json"), "wb") as f:
            f.write(registry.skeleton())
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    ps = [
        ctx.Process(target=_toucher, args=(kind, home, f"t{kind}{i}", k, barrier, out)) for i in range(procs)
    ]
    t0 = time.perf_counter()
    for p in ps:
        p.start()
    res = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(30)
    elapsed = time.perf_counter() - t0
    if kind == "sotd":
        doc = registry.read(Layout(home)) or {}
    else:
        with open(os.path.join(home, "floor.json"), "rb") as f:
            doc = json.loads(f.read())
    agents = registry.agents_of(doc)
    short = [h for h, _, _ in res if agents.get(h, {}).get("bench_touches") != k]  # type: ignore[union-attr]
    return {
        "per_s": procs * k / elapsed,
        "waits": [w for _, ws, _ in res for w in ws],
        "holds": [h for _, _, hs in res for h in hs],
        "lost_update_rows": short,
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
    t0 = time.perf_counter()
    ps = {
        n: subprocess.Popen(
            [common.SOTD, "comm", "join", "--name", n],
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
    agents = registry.agents_of(registry.read(lay) or {})
    lost = [n for n in names if n not in agents]
    if lost:
        problems.append(f"{len(lost)} joined handles missing from the registry: {lost[:5]}")
    leftovers = [f for f in os.listdir(lay.home) if ".tmp" in f or f == os.path.basename(lay.reglock)]
    if leftovers:
        problems.append(f"left in the comm folder after the joins: {leftovers}")
    # touches, alternating with the floor
    acc: dict[str, dict[str, list[float]]] = {
        x: {"per_s": [], "waits": [], "holds": []} for x in ("sotd", "floor")
    }
    for r in range(rounds):
        for kind in ("sotd", "floor") if r % 2 == 0 else ("floor", "sotd"):
            res = touches(kind, lay.home, procs, k)
            for key in ("waits", "holds"):
                acc[kind][key] += res[key]  # type: ignore[operator]
            acc[kind]["per_s"].append(res["per_s"])  # type: ignore[arg-type]
            if res["lost_update_rows"] and kind == "sotd":
                problems.append(f"lost updates under the registry lock: {res['lost_update_rows'][:5]}")
            # reset the counters for the next round
            if kind == "sotd":

                def zero(doc: dict[str, object]) -> tuple[bool, None]:
                    for row in registry.agents_of(doc).values():
                        if isinstance(row, dict):
                            row.pop("bench_touches", None)
                    return True, None

                registry.update(lay, common.HOST, zero, bound=10)
    if os.path.exists(lay.reglock):
        problems.append("the registry lock is still there after the touches")
    # reclaim after a SIGKILLed holder
    reclaim: list[float] = []
    for i in range(reclaims):
        p, rec = start_holder(lay.home, f"victim{i}")
        p.kill()
        p.wait(10)
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
    if os.path.exists(lay.reglock):
        problems.append("the registry lock is still there at the end")
    return {
        "joins": joins,
        "join_wall_ms": common.summary(join_wall, 1000),
        "joins_elapsed_s": joins_elapsed,
        "touch_procs": procs,
        "touches_per_proc": k,
        "touch_rounds": rounds,
        "sotd_per_s": common.summary(acc["sotd"]["per_s"]),
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
