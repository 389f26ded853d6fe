"""Run the named workloads one after another, each bounded, and record how long each took.

``scripts/bench`` calls this after its setup: ``python -m bench.runall [--quick] [--setup-secs S] [NAME ...]``
(default: every workload, in ``ALL`` order). Each runs as ``python -m bench.<name>`` with its output to
/dev/null (the result is its JSON file) and a time limit; a stuck or failing one is recorded and the rest
still run. The wall time of each and of the whole is written to ``bench/results/timing.json``
(``bench/results/quick/`` for a quick run), which ``bench/report.py`` turns into the doc's run-time line:

- ``last_run``: this invocation (names, each workload's seconds and status, setup seconds, total);
- ``full_run``: the last invocation that ran every workload (kept when a later run names only some);
- ``latest``: each workload's most recent timing (so a workload rerun alone since the full run shows).

Each workload's timing carries the date it ended.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time

from bench import common

ALL = (
    "commands",
    "hotpath",
    "fanin",
    "crossbox",
    "heal",
    "crash",
    "registry",
    "growth",
    "peers",
    "append",
    "contention",
    "scale",
    "daemon",
    "hubscale",
    "wake",
    "realwake",
    "codex_wake",
    "mcp",
    "web",
)
LIMIT_SECS = 600


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def run_one(name: str, quick: bool, limit: float) -> dict[str, object]:
    """Run one workload in its own process group; past ``limit`` it gets SIGINT (so its ``finally`` blocks
    stop its daemon and tmux servers), then 20 s later the group gets SIGKILL."""
    argv = [sys.executable, "-m", f"bench.{name}", *(["--quick"] if quick else [])]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=common.ROOT, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        code = p.wait(limit)
        status = "ok" if code == 0 else f"exit {code}"
    except subprocess.TimeoutExpired:
        status = f"stopped after {limit:.0f} s"
        _stop(p)
    except KeyboardInterrupt:  # its own session does not see the terminal's ^C: pass it on
        _stop(p)
        raise
    return {"seconds": round(time.monotonic() - t0, 1), "status": status, "date": _now()}


def load(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"workloads (default: all of {' '.join(ALL)})")
    ap.add_argument(
        "--quick", action="store_true", help="each workload's --quick (results in bench/results/quick/)"
    )
    ap.add_argument("--setup-secs", type=float, default=0.0, help="time scripts/bench spent before this, s")
    ap.add_argument("--limit", type=float, default=LIMIT_SECS, help="time limit of each workload, s")
    a = ap.parse_args(argv)
    names = a.names or list(ALL)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        ap.error(f"unknown workload(s): {' '.join(unknown)}")
    start, t0 = _now(), time.monotonic()
    each: dict[str, dict[str, object]] = {}
    for n in names:
        print(f"bench: {n} {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)
        each[n] = run_one(n, a.quick, a.limit)
        if each[n]["status"] != "ok":
            print(f"bench: {n} FAILED ({each[n]['status']})", file=sys.stderr, flush=True)
    workloads = time.monotonic() - t0
    run = {
        "date": start,
        "quick": a.quick,
        "names": names,
        "complete": set(ALL) <= set(names),
        "setup_s": round(a.setup_secs, 1),
        "workloads_s": round(workloads, 1),
        "total_s": round(a.setup_secs + workloads, 1),
        "each": each,
    }
    folder = os.path.join(common.RESULTS, "quick") if a.quick else common.RESULTS
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "timing.json")
    data = load(path)
    data["last_run"] = run
    if run["complete"]:
        data["full_run"] = run
    latest = data.get("latest") if isinstance(data.get("latest"), dict) else {}
    latest.update(each)  # type: ignore[union-attr]
    data["latest"] = latest
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print(
        f"bench: {len(names)} workload(s) in {workloads / 60:.1f} min (+{a.setup_secs:.0f} s setup); "
        f"{os.path.relpath(path, common.ROOT)}",
        file=sys.stderr,
    )
    return 0 if all(x["status"] == "ok" for x in each.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
