"""The hot verbs against a bare interpreter start: issue 17 target 1 (every one within 1.6x ``python -c pass``).

A narrow cut of ``bench/commands.py`` (W1): the same private comm folder, the same two joined sessions and
the same untimed state reset before each run, but only the verbs the target names, each both ways an agent
reaches it: the console script ``sotd`` (what a person types; what ``pip install`` puts on PATH) and the
wrapper ``sotd comm install`` writes (what the agent's allow list and hook settings run: the Stop hook as
installed is ``comm-status-idle.sh``). Every round runs every case once, rotated, so load drift hits all
alike, and each case's ratio is taken **per round** (its time over that round's ``python -c pass``); the
table gives the median of those ratios, wall clock and CPU (the child's user+system, ``wait4``). The floor
is plain ``python -c pass`` of the venv's interpreter, as the issue defines it; ``python -S -c pass`` is
shown beside it for what ``site`` costs, never used as the floor.

Usage: ``python -m bench.hotpath [--rounds N] [--quick] [--importtime] [--no-write]``; prints the markdown
table (and, with ``--importtime``, each case's module count and sotd modules) and writes
``bench/results/hotpath.json``, which ``bench/report.py`` renders (``render``, ``headline``) into
docs/benchmarks.md; ``scripts/bench`` runs it (``bench/runall.py``). A benchmark, not a test: nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common
from bench.commands import PYTHON, SOTD, Bench

TARGET_PASS = 1.6


def cases(b: Bench) -> list[dict[str, object]]:
    """The floor, the ``-S`` floor (shown only), and every targeted verb both ways."""
    peer = b.handle["beta"]
    return [
        {"name": "pass", "who": "alpha", "argv": [PYTHON, "-c", "pass"], "want": "", "floor": True},
        {"name": "pass -S", "who": "alpha", "argv": [PYTHON, "-S", "-c", "pass"], "want": "", "floor": True},
        {"name": "send", "who": "alpha", "argv": [SOTD, "comm", "send", f"@{peer}", "bench message"],
         "want": f"filed -> @{peer}", "unread": 0},
        {"name": "unread", "who": "beta", "argv": [SOTD, "comm", "unread"], "want": "1", "unread": 1},
        {"name": "poll (0 unread)", "who": "beta", "argv": [SOTD, "comm", "poll"], "want": "No new", "unread": 0},
        {"name": "poll (1 unread)", "who": "beta", "argv": [SOTD, "comm", "poll"], "want": "message 99",
         "unread": 1},
        {"name": "stop hook (no mail)", "who": "beta", "argv": [SOTD, "comm", "hook", "stop"], "want": "",
         "unread": 0},
        {"name": "comm-send.sh", "who": "alpha", "argv": [f"{b.bin}/comm-send.sh", f"@{peer}", "bench message"],
         "want": f"filed -> @{peer}", "unread": 0},
        {"name": "comm-poll.sh (0 unread)", "who": "beta", "argv": [f"{b.bin}/comm-poll.sh"], "want": "No new",
         "unread": 0},
        {"name": "comm-poll.sh (1 unread)", "who": "beta", "argv": [f"{b.bin}/comm-poll.sh"],
         "want": "message 99", "unread": 1},
        {"name": "comm-status-idle.sh (Stop hook as installed, no mail)", "who": "beta",
         "argv": [f"{b.bin}/comm-status-idle.sh"], "want": "", "unread": 0},
    ]  # fmt: skip


def importtime(b: Bench, case: dict[str, object]) -> dict[str, object]:
    """One run with ``PYTHONPROFILEIMPORTTIME``: how many modules, which of sotd's, and the self time."""
    b.prepare(case)
    env = dict(case.get("env") or b.env[str(case["who"])], PYTHONPROFILEIMPORTTIME="1")  # type: ignore[call-overload]
    p = subprocess.run(
        [str(x) for x in case["argv"]],  # type: ignore[attr-defined]
        cwd=b.cwd[str(case["who"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    rows = []
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "imported package" not in line:
            _, self_us, _cum, name = (x.strip() for x in line.replace("import time:", "|").split("|"))
            rows.append((name, int(self_us)))
    return {
        "modules": len(rows),
        "self_ms": sum(r[1] for r in rows) / 1000,
        "sotd": [r[0] for r in rows if r[0].startswith("sotd")],
        "stdlib": [r[0] for r in rows if not r[0].startswith("sotd")],
    }


def run(rounds: int, with_imports: bool) -> dict[str, object]:
    work = tempfile.mkdtemp(prefix="sotd-bench-hot-", dir=common.bench_dir())
    try:
        b = Bench(work)
        facts = common.machine(b.layout.home)
        b.join_both()
        b.fill_beta()
        all_cases = cases(b)
        for case in all_cases:  # correctness first; it warms the .pyc cache too
            b.verify(case)
        imports = {str(c["name"]): importtime(b, c) for c in all_cases} if with_imports else {}
        wall, cpu = common.interleaved_rounds(b, all_cases, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    rows = []
    for case in all_cases:
        name = str(case["name"])
        per_round = [w / p for w, p in zip(wall[name], wall["pass"], strict=True)]
        per_round_cpu = [c / p for c, p in zip(cpu[name], cpu["pass"], strict=True)]
        row: dict[str, object] = {
            "name": name,
            "argv": " ".join(
                os.path.basename(str(x)) if i == 0 else str(x) for i, x in enumerate(case["argv"])
            ),  # type: ignore[arg-type]
            "wall_ms": common.summary(wall[name], 1000),
            "cpu_ms": common.summary(cpu[name], 1000),
            "ratio_wall": statistics.median(per_round),
            "ratio_cpu": statistics.median(per_round_cpu),
        }
        if not case.get("floor"):
            row["target"] = TARGET_PASS
            row["met"] = row["ratio_wall"] <= TARGET_PASS  # type: ignore[operator]
        if imports:
            row["imports"] = imports[name]
        rows.append(row)
    return {
        "workload": "hotpath",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": facts,
        "params": {"rounds": rounds, "floor": "python -c pass (the venv's interpreter, with site)"},
        "cases": rows,
    }


def table(result: dict[str, object]) -> str:
    """The markdown table docs/benchmarks.md quotes."""
    out = [
        "| case | wall ms (median) | CPU ms (median) | wall / `-c pass`, per round | CPU / `-c pass` | <= 1.6x |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in result["cases"]:  # type: ignore[attr-defined]
        met = "" if "met" not in row else ("met" if row["met"] else "**not met**")
        out.append(
            f"| {row['name']} (`{row['argv']}`) | {row['wall_ms']['median']:.1f} | {row['cpu_ms']['median']:.1f} "
            f"| {row['ratio_wall']:.2f}x | {row['ratio_cpu']:.2f}x | {met} |"
        )
    m = result["machine"]
    out.append("")
    out.append(
        f"{result['params']['rounds']} interleaved rounds at {result['when']}, git {m.get('git_head', '?')}, "  # type: ignore[index]
        f"load average at start {m.get('load_avg_start')}, at end {m.get('load_avg_end')}."  # type: ignore[attr-defined]
    )
    return "\n".join(out)


def render(result: dict[str, object]) -> str:
    """This workload's section of docs/benchmarks.md (``bench/report.py`` calls it; its note follows)."""
    p: dict = result["params"]  # type: ignore[assignment]
    return "\n".join(
        [
            "## Hot verbs against `python -c pass` (`bench/hotpath.py`, issue 17 target 1)\n",
            f"Each case: {p['rounds']} runs, every round running every case once in a rotated order; each run's "
            "wall (spawn to reap) and CPU (user+system, wait4) over the same round's `python -c pass`, then the "
            "median of those per-round ratios. Floor: plain `python -c pass` of the venv's interpreter (with "
            "`site`); `python -S -c pass` is shown beside it, never used as the floor. The console script is "
            "pip's `bin/sotd`; the `comm-*.sh` rows are the wrappers `sotd comm install` writes (the Stop hook "
            "as installed is `comm-status-idle.sh`, what the hook settings run). Beta's inbox holds 100 lines, "
            "its cursor reset before each run. .pyc warmed in a private PYTHONPYCACHEPREFIX.\n",
            table(result),
            "",
        ]
    )


def headline(result: dict[str, object]) -> list[str]:
    """The rows of the doc's headline table for target 1."""
    return [
        f"| hot path | `{row['name']}` wall / `-c pass` (median per round) | {row['ratio_wall']:.2f}x "
        f"| <= {TARGET_PASS}x | {'pass' if row['met'] else '**miss**'} |"
        for row in result["cases"]  # type: ignore[attr-defined]
        if "met" in row
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument(
        "--quick", action="store_true", help="five rounds, to bench/results/quick/ (a smoke test)"
    )
    ap.add_argument("--importtime", action="store_true", help="also one profiled run per case (modules)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/results alone")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds = 5
    result = run(a.rounds, a.importtime)
    if a.importtime:
        for row in result["cases"]:  # type: ignore[attr-defined]
            imp = row["imports"]
            print(
                f"{row['name']}: {imp['modules']} modules, {imp['self_ms']:.1f} ms self; sotd: {' '.join(imp['sotd'])}"
            )
        print()
    print(table(result))
    if not a.no_write:
        print(common.write_result("hotpath", result, a.quick), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
