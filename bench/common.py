"""Shared pieces of the benchmarks: percentiles, machine facts, a private comm folder, the result file.

Every workload is measured against a floor taken in the same run, in interleaved rounds, so the numbers
that matter are ratios: the machine these run on is shared, and absolute times drift with its load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.formats.layout import Layout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was measured, never an interpolation."""
    s = sorted(values)
    if not s:
        return math.nan
    k = max(1, math.ceil(q / 100.0 * len(s)))
    return s[min(k, len(s)) - 1]


def summary(values: list[float], scale: float = 1.0) -> dict[str, float | int]:
    """Median, p95, p99, min, max and count of ``values`` multiplied by ``scale``."""
    return {
        "n": len(values),
        "median": statistics.median(values) * scale,
        "p95": pct(values, 95) * scale,
        "p99": pct(values, 99) * scale,
        "min": min(values) * scale,
        "max": max(values) * scale,
    }


def fs_type(path: str) -> str:
    """The file-system type of the mount holding ``path`` (from /proc/self/mountinfo; "?" elsewhere)."""
    path = os.path.realpath(path)
    best, best_type = "", "?"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5:
                    continue
                mnt = fields[4].replace("\\040", " ")
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):
                    best, best_type = mnt, right.split()[0]
    except OSError:
        pass
    return best_type


def load_avg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine(folder: str) -> dict[str, object]:
    """Facts that a reader needs to judge the numbers: cores, kernel, file system, Python, date, load."""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "fs_type": fs_type(folder),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_avg_start": load_avg(),
        "git_head": _git_head(),
    }


def _git_head() -> str:
    try:
        p = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return p.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def make_comm(work: str) -> Layout:
    """A comm folder at ``<work>/comm`` with the inbox lock identity recorded as the hub records it."""
    from sotd.formats import lockmanager
    from sotd.formats.layout import Layout, ensure_home

    layout = Layout(os.path.join(work, "comm"))
    ensure_home(layout)
    lockmanager.write_for_hub(
        layout, lockmanager.lock_manager_of(layout.inbox_dir), lockmanager.machine_id_or_none()
    )
    return layout


def write_result(name: str, result: dict[str, object], quick: bool = False) -> str:
    """``bench/results/<name>.json`` (``bench/results/quick/`` for a quick run), written whole (temp + rename)."""
    folder = os.path.join(RESULTS, "quick") if quick else RESULTS
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
    return path


def bench_dir() -> str | None:
    """Where temp folders go: ``$SOTD_BENCH_DIR`` or the system default."""
    return os.environ.get("SOTD_BENCH_DIR") or None


# ---------------------------------------------------------------------------------- sessions and spawning

VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))
PYTHON = os.path.join(VENV_BIN, "python")
SOTD = os.path.join(VENV_BIN, "sotd")
FLOOR_CODE = "import json, socket, fcntl, os"
HOST = "benchhost"


def stop_proc(p: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL past 10 s: a bench's own daemon or server (a no-op once it has ended)."""
    if p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def clean_env() -> dict[str, str]:
    """This process's environment without anything that points at a real comm folder, tmux or bytecode."""
    drop = (
        "SOT_",
        "SOTD_",
        "TMUX",
        "CLAUDE",
        "COMM_STATUS_",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX",
    )
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


class Sessions:
    """Joined sessions of one private comm folder, run as the venv's ``sotd`` with a warmed private .pyc cache."""

    def __init__(self, work: str, layout: Layout | None = None) -> None:
        self.work = work
        self.layout = layout or make_comm(work)
        self.pycache = os.path.join(work, "pycache")
        self.env: dict[str, dict[str, str]] = {}
        self.cwd: dict[str, str] = {}
        self.handle: dict[str, str] = {}

    def add(self, name: str, join: bool = True) -> str:
        root = os.path.realpath(os.path.join(self.work, "p", name))
        os.makedirs(root, exist_ok=True)
        env = clean_env()
        env.update(
            SOT_COMM_HOME=self.layout.home,
            SOT_SELF_HOST=HOST,
            SOT_COMM_SELF_FILE=os.path.join(self.layout.home, "self", f"{name}-session.txt"),
            SOT_COMM_TEST_HOST=HOST,
            SOT_SOCKET=os.path.join(self.work, "no-daemon.sock"),
            PYTHONPYCACHEPREFIX=self.pycache,
            PWD=root,
        )
        self.env[name] = env
        self.cwd[name] = root
        if join:
            out = self.check(name, [SOTD, "comm", "join", "--name", name], "Joined sot-comm as @")
            self.handle[name] = out.split("@", 1)[1].split()[0]
        return self.handle.get(name, name)

    def run(self, who: str, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=self.cwd[who], env=self.env[who], capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip

    def check(self, who: str, argv: list[str], want: str) -> str:
        p = self.run(who, argv)
        if p.returncode != 0 or want not in p.stdout:
            raise RuntimeError(f"{argv} as {who}: exit {p.returncode}, want {want!r}\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def spawn(self, who: str, argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
        """(wall seconds spawn to reap, child CPU seconds) of one run, output to /dev/null."""
        return spawn_timed(argv, self.env[who], self.cwd[who], ok)


def spawn_timed(
    argv: list[str], env: dict[str, str], cwd: str | None = None, ok: tuple[int, ...] = (0,)
) -> tuple[float, float]:
    """(wall seconds spawn to reap, child user+system CPU seconds) of ``argv``, stdio on /dev/null."""
    here = os.open(".", os.O_RDONLY)
    if cwd:
        os.chdir(cwd)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
        _, status, ru = os.wait4(pid, 0)
        wall = time.perf_counter() - t0
    finally:
        os.fchdir(here)
        os.close(here)
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise RuntimeError(f"{argv}: exit {code}")
    return wall, ru.ru_utime + ru.ru_stime


def interleaved_rounds(
    bench: Any, cases: list[dict[str, object]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each case once untimed (warm-up), then ``rounds`` rounds that run every case once, each round
    starting one case later (so no case always follows the same one): (wall, CPU) per case name.
    ``bench`` has ``prepare(case)`` and ``spawn(case) -> (wall, cpu)``."""
    for case in cases:
        bench.prepare(case)
        bench.spawn(case)
    wall: dict[str, list[float]] = {str(c["name"]): [] for c in cases}
    cpu: dict[str, list[float]] = {str(c["name"]): [] for c in cases}
    for r in range(rounds):
        k = r % len(cases)
        for case in cases[k:] + cases[:k]:
            bench.prepare(case)
            w, c = bench.spawn(case)
            wall[str(case["name"])].append(w)
            cpu[str(case["name"])].append(c)
    return wall, cpu


def ratio(a: list[float], b: list[float]) -> float:
    """median(a) / median(b)."""
    return statistics.median(a) / statistics.median(b)


def base_parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small, fast subset (still written, marked quick)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/results alone")
    return ap


def finish(name: str, result: dict[str, object], no_write: bool, quick: bool = False) -> int:
    """Print the result; write it unless ``no_write`` (a quick run goes to ``bench/results/quick/``)."""
    result.setdefault("quick", quick)
    print(json.dumps(result, indent=2))
    if not no_write:
        print(write_result(name, result, quick), file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------- the inbox append floors


def flocked_append_loop(inbox_path: str, lock_path: str, n: int, line: bytes) -> list[int]:
    """The inbox design done by hand, per line: open the lock file, blocking flock, open the inbox
    O_APPEND, write, fsync, close both. Nanoseconds of each of ``n`` lines.

    The floor every in-process append is measured against (``bench/append.py``'s four writers and
    ``bench/contention.py``'s sixteen): what ``inbox.append`` does less its tail check and its rules, so a
    ratio to it is the cost of those alone.
    """
    import fcntl

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


def sotd_append_loop(home: str, handle: str, n: int, line: bytes) -> list[int]:
    """Nanoseconds of each of ``n`` calls of ``inbox.append`` (2 s bound, not nfs) into ``home``."""
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
