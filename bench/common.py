"""Shared pieces of the benchmarks: percentiles, machine facts, a private comm folder, the result file.

Every workload is measured against a floor taken in the same run, in interleaved rounds, so the numbers
that matter are ratios: the machine these run on is shared, and absolute times drift with its load.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import statistics
import subprocess

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
        layout, lockmanager.lock_identity(layout.inbox_dir), lockmanager.machine_id_or_none()
    )
    return layout


def write_result(name: str, result: dict[str, object]) -> str:
    """``bench/results/<name>.json``, written whole (a temp file renamed over it)."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
    return path


def bench_dir() -> str | None:
    """Where temp folders go: ``$SOTD_BENCH_DIR`` or the system default."""
    return os.environ.get("SOTD_BENCH_DIR") or None
