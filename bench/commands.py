"""Per-command latency of ``sotd comm`` verbs as real subprocesses, against interpreter floors (issue 3, W1).

Each verb runs as the venv's console script, directly (no shell, no wrapper), as one of two joined sessions
in a private comm folder. The floors are the same interpreter running ``-c "import json, socket, fcntl,
os"`` (what any Python client of the folder must pay) and ``-c pass``. Every round runs every case once, in
a rotated order, so load drift on a shared machine hits all of them alike. Each case is timed from spawn to
reap (wall) and by the child's own CPU time (``wait4`` rusage: user + system), which other processes on the
machine disturb less than wall time.

The state each case sees is reset (untimed) before every run, so no case drifts as the run goes on:
beta's inbox holds 100 lines, and its cursor is set for 0, 1 or 100 unread.

Bytecode: the environment here sets ``PYTHONDONTWRITEBYTECODE=1``; an editable install then has no .pyc
for sotd and every command would compile its modules. The runs use a private ``PYTHONPYCACHEPREFIX``,
warmed first, like an installed package with its .pyc (a "cold" pair, no .pyc at all, is reported as well).

Usage: ``python -m bench.commands [--quick]``; writes ``bench/results/commands.json`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import common

VENV_BIN = os.path.dirname(sys.executable)
PYTHON = os.path.join(VENV_BIN, "python")
SOTD = os.path.join(VENV_BIN, "sotd")
HOST = "benchhost"
FLOOR_CODE = "import json, socket, fcntl, os"
TARGET = 1.3  # median <= 1.3x the floor, for send and unread
TARGETED = ("send", "unread")
# issue 17 target 1: median <= 1.6x ``python -c pass``, for these (console script and installed wrapper)
TARGET_PASS = 1.6
TARGETED_PASS = (
    "send", "unread", "poll (0 unread)", "poll (1 unread)", "stop hook (no mail)",
    "send (comm-send.sh)", "poll (0 unread) (comm-poll.sh)", "stop hook (comm-status-idle.sh)",
)  # fmt: skip
INBOX_LINES = 100


class Bench:
    """The comm folder, the two sessions' environments, and the cases."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.layout = common.make_comm(work)
        self.pycache = os.path.join(work, "pycache")
        self.cold_pycache = os.path.join(work, "pycache-empty")
        os.makedirs(self.cold_pycache)
        self.env: dict[str, dict[str, str]] = {}
        self.cwd: dict[str, str] = {}
        for name in ("alpha", "beta"):
            root = os.path.realpath(os.path.join(work, name))
            os.makedirs(root)
            env = common.clean_env()
            env.update(
                SOT_COMM_HOME=self.layout.home,
                SOT_SELF_HOST=HOST,
                SOT_COMM_SELF_FILE=os.path.join(self.layout.home, "self", f"{name}-session.txt"),
                SOT_COMM_TEST_HOST=HOST,
                SOT_SOCKET=os.path.join(work, "no-daemon.sock"),
                PYTHONPYCACHEPREFIX=self.pycache,
                PWD=root,
            )
            self.env[name] = env
            self.cwd[name] = root
        self.handle: dict[str, str] = {}

    # ------------------------------------------------------------------------------------------ set-up

    def check(self, who: str, argv: list[str], want: str, env: dict[str, str] | None = None) -> str:
        p = subprocess.run(
            argv,
            cwd=self.cwd[who],
            env=env or self.env[who],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if p.returncode != 0 or want not in p.stdout:
            raise RuntimeError(f"{argv} as {who}: exit {p.returncode}, want {want!r}\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def join_both(self) -> None:
        for name in ("alpha", "beta"):
            out = self.check(name, [SOTD, "comm", "join"], "Joined sot-comm as @")
            self.handle[name] = out.split("@", 1)[1].split()[0]
        self.check("alpha", [SOTD, "comm", "install"], "Installed sot-comm")  # the wrappers agents run
        self.bin = self.layout.bin_dir

    def fill_beta(self) -> None:
        """beta's inbox: INBOX_LINES directed lines from alpha."""
        from sotd.formats import inbox

        lines = [
            inbox.encode_line(self.handle["alpha"], self.handle["beta"], "alpha", f"message {i}", self.ts())
            for i in range(INBOX_LINES)
        ]
        self.beta_lines = lines
        path = self.layout.inbox(self.handle["beta"])
        with open(path, "wb") as f:
            f.write(b"".join(lines))

    @staticmethod
    def ts() -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def set_unread(self, unread: int) -> None:
        """Reset beta's inbox to its INBOX_LINES lines with ``unread`` of them past the cursor."""
        from sotd.formats import cursor

        path = self.layout.inbox(self.handle["beta"])
        if os.path.getsize(path) != sum(len(x) for x in self.beta_lines):
            with open(path, "wb") as f:
                f.write(b"".join(self.beta_lines))
        count = INBOX_LINES - unread
        cursor.write(self.layout, self.handle["beta"], count, self.beta_lines[count - 1] if count else None)

    def cases(self) -> list[dict[str, object]]:
        """name, who, argv, the text its stdout must hold, the state to reset, whether it is a floor."""
        a, b = self.handle["alpha"], self.handle["beta"]
        cold = dict(self.env["alpha"], PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=self.cold_pycache)
        return [
            {"name": "floor", "who": "alpha", "argv": [PYTHON, "-c", FLOOR_CODE], "want": "", "floor": True},
            {"name": "pass", "who": "alpha", "argv": [PYTHON, "-c", "pass"], "want": "", "floor": True},
            {"name": "send", "who": "alpha", "argv": [SOTD, "comm", "send", f"@{b}", "bench message"],
             "want": f"filed -> @{b}", "unread": 0},
            {"name": "unread", "who": "beta", "argv": [SOTD, "comm", "unread"], "want": "1", "unread": 1},
            {"name": "poll (0 unread)", "who": "beta", "argv": [SOTD, "comm", "poll"], "want": "No new",
             "unread": 0},
            {"name": "poll (1 unread)", "who": "beta", "argv": [SOTD, "comm", "poll"], "want": "message 99",
             "unread": 1},
            {"name": "poll (100 unread)", "who": "beta", "argv": [SOTD, "comm", "poll"], "want": "message 0",
             "unread": 100},
            {"name": "stop hook (no mail)", "who": "beta", "argv": [SOTD, "comm", "hook", "stop"], "want": "",
             "unread": 0},
            {"name": "send (comm-send.sh)", "who": "alpha", "argv": [f"{self.bin}/comm-send.sh", f"@{b}", "bench message"],
             "want": f"filed -> @{b}", "unread": 0},
            {"name": "poll (0 unread) (comm-poll.sh)", "who": "beta", "argv": [f"{self.bin}/comm-poll.sh"],
             "want": "No new", "unread": 0},
            {"name": "stop hook (comm-status-idle.sh)", "who": "beta", "argv": [f"{self.bin}/comm-status-idle.sh"],
             "want": "", "unread": 0},
            {"name": "join", "who": "alpha", "argv": [SOTD, "comm", "join"], "want": f"@{a}"},
            {"name": "list", "who": "alpha", "argv": [SOTD, "comm", "list"], "want": f"@{b}"},
            {"name": "floor (no .pyc)", "who": "alpha", "argv": [PYTHON, "-c", FLOOR_CODE], "want": "",
             "floor": True, "env": cold},
            {"name": "send (no .pyc)", "who": "alpha", "argv": [SOTD, "comm", "send", f"@{b}", "bench message"],
             "want": f"filed -> @{b}", "unread": 0, "env": cold},
        ]  # fmt: skip

    def prepare(self, case: dict[str, object]) -> None:
        if "unread" in case:
            self.set_unread(int(case["unread"]))  # type: ignore[call-overload]

    # ------------------------------------------------------------------------------------------ timing

    def spawn(self, case: dict[str, object]) -> tuple[float, float]:
        """(wall seconds spawn to reap, child CPU seconds) of one run, output to /dev/null."""
        argv = case["argv"]
        env = case.get("env") or self.env[str(case["who"])]
        try:
            return common.spawn_timed(list(argv), dict(env), self.cwd[str(case["who"])])  # type: ignore[call-overload]
        except RuntimeError as e:
            raise RuntimeError(f"{case['name']}: {e}") from None

    def verify(self, case: dict[str, object]) -> None:
        self.prepare(case)
        self.check(str(case["who"]), list(case["argv"]), str(case["want"]), case.get("env"))  # type: ignore[call-overload, arg-type]

    def importtime(self, case: dict[str, object]) -> dict[str, object]:
        """One run under ``-X importtime``: the top self-time imports, and what is imported beyond the floor."""
        self.prepare(case)
        argv = [str(x) for x in case["argv"]]  # type: ignore[attr-defined]
        argv = (
            [PYTHON, "-X", "importtime", *argv[1:]]
            if argv[0] == PYTHON
            else [PYTHON, "-X", "importtime", *argv]
        )
        env = case.get("env") or self.env[str(case["who"])]
        p = subprocess.run(
            argv,
            cwd=self.cwd[str(case["who"])],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )  # type: ignore[call-overload]
        rows = []
        for line in p.stderr.splitlines():
            if not line.startswith("import time:") or "imported package" in line:
                continue
            _, self_us, cum_us, name = (x.strip() for x in line.replace("import time:", "|").split("|"))
            rows.append((name, int(self_us), int(cum_us)))
        return {"rows": rows}


def analyse_imports(raw: dict[str, dict[str, object]], top: int = 8) -> dict[str, object]:
    """Per case: total self time, the top ``top`` modules, and the modules (and time) beyond the floor's."""
    floor_rows: list[tuple[str, int, int]] = raw["floor"]["rows"]  # type: ignore[assignment]
    floor_mods = {r[0] for r in floor_rows}
    out: dict[str, object] = {}
    for name, data in raw.items():
        rows: list[tuple[str, int, int]] = data["rows"]  # type: ignore[assignment]
        extra = [r for r in rows if r[0] not in floor_mods]
        mods = {r[0] for r in rows}
        missing = [r for r in floor_rows if r[0] not in mods]
        out[name] = {
            "modules": len(rows),
            "self_ms_total": sum(r[1] for r in rows) / 1000,
            "top_self_ms": [[r[0], r[1] / 1000] for r in sorted(rows, key=lambda r: -r[1])[:top]],
            "beyond_floor_modules": len(extra),
            "beyond_floor_self_ms": sum(r[1] for r in extra) / 1000,
            "beyond_floor_top": [[r[0], r[1] / 1000] for r in sorted(extra, key=lambda r: -r[1])[:top]],
            "floor_only_modules": len(missing),
            "floor_only_self_ms": sum(r[1] for r in missing) / 1000,
            "sotd_modules": sorted(r[0] for r in rows if r[0].startswith("sotd")),
        }
    return out


def run(rounds: int) -> dict[str, object]:
    work = tempfile.mkdtemp(prefix="sotd-bench-cmd-", dir=common.bench_dir())
    try:
        b = Bench(work)
        facts = common.machine(b.layout.home)
        b.join_both()
        b.fill_beta()
        cases = b.cases()
        for case in cases:  # correctness first, and it warms the .pyc cache
            b.verify(case)
        imports = {str(c["name"]): b.importtime(c) for c in cases if "no .pyc" not in str(c["name"])}
        wall, cpu = common.interleaved_rounds(b, cases, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    facts["load_avg_end"] = common.load_avg()
    results = []
    for case in cases:
        name = str(case["name"])
        floor = "floor (no .pyc)" if "no .pyc" in name else "floor"
        row = {
            "name": name,
            "argv": " ".join(
                os.path.basename(str(x)) if i == 0 else str(x) for i, x in enumerate(case["argv"])
            ),  # type: ignore[arg-type]
            "floor_case": floor,
            "wall_ms": common.summary(wall[name], 1000),
            "cpu_ms": common.summary(cpu[name], 1000),
            "ratio": statistics.median(wall[name]) / statistics.median(wall[floor]),
            "ratio_cpu": statistics.median(cpu[name]) / statistics.median(cpu[floor]),
            "ratio_to_pass": statistics.median(wall[name]) / statistics.median(wall["pass"]),
            "target": TARGET if name in TARGETED else None,
            "target_pass": TARGET_PASS if name in TARGETED_PASS else None,
        }
        if row["target"] is not None:
            row["pass"] = row["ratio"] <= TARGET
        if row["target_pass"] is not None:
            row["pass_to_pass"] = row["ratio_to_pass"] <= TARGET_PASS
        results.append(row)
    return {
        "workload": "commands",
        "machine": facts,
        "params": {"rounds": rounds, "inbox_lines": INBOX_LINES, "floor_code": FLOOR_CODE},
        "cases": results,
        "imports": analyse_imports(imports),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="three rounds (a smoke test, not a result)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/results alone")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds = 3
    result = run(a.rounds)
    print(json.dumps(result, indent=2))
    if not a.no_write and not a.quick:
        common.write_result("commands", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
