"""Inbox growth (issue 6, W6): poll, unread and send at 1k, 10k, 100k and 1M lines.

One comm folder, one joined sender (``alpha``) and one joined recipient per size (``g1k`` ... ``g1m``), whose
inboxes are written directly in the exact record format (``inbox.encode_line`` of one template line, the
message numbered), with the cursor and the private read hint set the way ``poll`` leaves them
(``cursor.write`` + ``readhint.write`` of a view ending at the last line). Before every timed run the state
it needs is restored, untimed: the inbox cut back to its built length, the cursor and hint reset for 0 or 1
unread. Every round runs every (size, case) once, plus the interpreter floor, in a rotated order.

Cases, all ``sotd comm`` subprocesses (wall spawn to reap, and the child's CPU by ``wait4``):
``poll`` with 0 and with 1 unread, ``unread`` (1 unread), ``send`` from alpha into the big inbox.
In-process, per size: ``poll.read_batch`` with the hint (what poll and unread do) and with the hint
removed (the full scan a reader falls back to), median of a few reads.

Target: poll and unread at 1M within 1.2x of their cost at 1k (ratio of medians, same run).

Usage: ``python -m bench.growth [--quick]``; writes ``bench/results/growth.json``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

from bench import common

SIZES = (1_000, 10_000, 100_000, 1_000_000)
TARGET = 1.2
LABEL = {1_000: "1k", 10_000: "10k", 100_000: "100k", 1_000_000: "1M"}
MSG = "growth line {:08d} " + "x" * 100


class Growth:
    def __init__(self, work: str, sizes: tuple[int, ...]) -> None:
        self.s = common.Sessions(work)
        self.sizes = sizes
        self.alpha = self.s.add("alpha")
        self.handle: dict[int, str] = {}
        self.built: dict[int, tuple[int, bytes, bytes]] = {}  # size -> (bytes, last line, line before)
        for n in sizes:
            self.handle[n] = self.s.add("g" + LABEL[n].lower())
            self.build(n)

    def build(self, n: int) -> None:
        """Write ``n`` lines to the recipient's inbox in the exact record format, in 64k-line chunks."""
        from sotd.formats import inbox

        h = self.handle[n]
        tmpl = inbox.encode_line(self.alpha, h, "bench", MSG.format(0), "2026-01-01T00:00:00Z")
        head, tail = tmpl.split(b"00000000", 1)
        path = self.s.layout.inbox(h)
        with open(path, "wb") as f:
            for start in range(0, n, 65536):
                f.write(b"".join(head + b"%08d" % i + tail for i in range(start, min(n, start + 65536))))
            f.flush()
            os.fsync(f.fileno())
        last = head + b"%08d" % (n - 1) + tail
        prev = head + b"%08d" % (n - 2) + tail
        self.built[n] = (os.path.getsize(path), last[:-1], prev[:-1])

    def reset(self, n: int, unread: int) -> None:
        """Inbox back to its built bytes; cursor and hint as a poll that saw all but ``unread`` lines."""
        from sotd.formats import cursor, readhint

        h = self.handle[n]
        lay = self.s.layout
        size, last, prev = self.built[n]
        path = lay.inbox(h)
        if os.path.getsize(path) != size:
            os.truncate(path, size)
        count = n - unread
        line = last if unread == 0 else prev
        text = cursor.encode(count, line)
        if cursor.read(lay, h) != text:
            cursor.write(lay, h, count, line)
        end = size - (len(last) + 1) * unread
        view = readhint.View(count, [], line, end, os.stat(path).st_ino)
        readhint.write(lay, h, text, view)

    def cases(self) -> list[dict[str, object]]:
        c: list[dict[str, object]] = [
            {"name": "floor", "size": 0, "who": "alpha", "argv": [common.PYTHON, "-c", common.FLOOR_CODE]}
        ]
        for n in self.sizes:
            g = "g" + LABEL[n].lower()
            c += [
                {"name": "poll (0 unread)", "size": n, "who": g, "argv": [common.SOTD, "comm", "poll"], "unread": 0},
                {"name": "poll (1 unread)", "size": n, "who": g, "argv": [common.SOTD, "comm", "poll"], "unread": 1},
                {"name": "unread", "size": n, "who": g, "argv": [common.SOTD, "comm", "unread"], "unread": 1},
                {"name": "send", "size": n, "who": "alpha",
                 "argv": [common.SOTD, "comm", "send", f"@{self.handle[n]}", "growth bench"], "unread": 0},
            ]  # fmt: skip
        return c

    def verify(self, case: dict[str, object]) -> None:
        n = int(case["size"])  # type: ignore[call-overload]
        if not n:
            return
        self.reset(n, int(case["unread"]))  # type: ignore[call-overload]
        out = self.s.check(str(case["who"]), list(case["argv"]), "")  # type: ignore[call-overload]
        want = {
            "poll (0 unread)": "No new messages.",
            "poll (1 unread)": f"growth line {n - 1:08d}",
            "unread": "1",
            "send": f"filed -> @{self.handle[n]}",
        }[str(case["name"])]
        if want not in out or (case["name"] == "poll (1 unread)" and out.count("\n") != 1):
            raise RuntimeError(f"{case['name']} at {n}: want {want!r}, got {out!r}")

    def in_process(self, n: int, reps: int) -> dict[str, float]:
        """Median ms of ``read_batch`` with the hint, and with the hint removed (full scan)."""
        from sotd.cli.comm.common import Context
        from sotd.cli.comm.poll import read_batch

        h = self.handle[n]
        env = self.s.env["g" + LABEL[n].lower()]
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            ctx = Context()
            out: dict[str, float] = {}
            for kind in ("hint", "full scan"):
                times = []
                for _ in range(reps):
                    self.reset(n, 1)
                    if kind == "full scan":
                        os.unlink(self.s.layout.read_hint(h))
                    t0 = time.perf_counter()
                    b = read_batch(ctx, h)
                    times.append(time.perf_counter() - t0)
                    assert b is not None and len(b.new) == 1, (kind, n)
                out[kind] = statistics.median(times) * 1000
            return out
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def run(rounds: int, sizes: tuple[int, ...]) -> dict[str, object]:
    work = tempfile.mkdtemp(prefix="sotd-bench-growth-", dir=common.bench_dir())
    try:
        t_build = time.perf_counter()
        g = Growth(work, sizes)
        build_s = time.perf_counter() - t_build
        facts = common.machine(g.s.layout.home)
        inbox_bytes = {LABEL[n]: g.built[n][0] for n in sizes}
        cases = g.cases()
        for case in cases:  # correctness, and it warms the .pyc cache
            g.verify(case)
        key = [f"{c['name']}@{c['size']}" for c in cases]
        wall: dict[str, list[float]] = {k: [] for k in key}
        cpu: dict[str, list[float]] = {k: [] for k in key}
        for r in range(rounds):
            k0 = r % len(cases)
            for case in cases[k0:] + cases[:k0]:
                n = int(case["size"])  # type: ignore[call-overload]
                if n:
                    g.reset(n, int(case["unread"]))  # type: ignore[call-overload]
                w, c = g.s.spawn(str(case["who"]), list(case["argv"]))  # type: ignore[call-overload]
                k = f"{case['name']}@{case['size']}"
                wall[k].append(w)
                cpu[k].append(c)
        inproc = {LABEL[n]: g.in_process(n, 5 if n < 1_000_000 else 3) for n in sizes}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    small, big = sizes[0], sizes[-1]
    rows = []
    for name in ("poll (0 unread)", "poll (1 unread)", "unread", "send"):
        row: dict[str, object] = {"name": name}
        for n in sizes:
            k = f"{name}@{n}"
            row[LABEL[n]] = {
                "wall_ms": common.summary(wall[k], 1000),
                "cpu_ms": common.summary(cpu[k], 1000),
                "ratio_to_floor": common.ratio(wall[k], wall["floor@0"]),
            }
        row["ratio_big_small_wall"] = common.ratio(wall[f"{name}@{big}"], wall[f"{name}@{small}"])
        row["ratio_big_small_cpu"] = common.ratio(cpu[f"{name}@{big}"], cpu[f"{name}@{small}"])
        if name != "send":
            row["target"] = TARGET
            row["pass"] = row["ratio_big_small_wall"] <= TARGET
        rows.append(row)
    return {
        "workload": "growth",
        "machine": facts,
        "params": {
            "rounds": rounds,
            "sizes": [LABEL[n] for n in sizes],
            "inbox_bytes": inbox_bytes,
            "line_bytes": inbox_bytes[LABEL[small]] // small,
            "build_secs": build_s,
            "floor_code": common.FLOOR_CODE,
        },
        "floor_wall_ms": common.summary(wall["floor@0"], 1000),
        "floor_cpu_ms": common.summary(cpu["floor@0"], 1000),
        "cases": rows,
        "in_process_read_batch_ms": inproc,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args(argv)
    sizes = SIZES
    if a.quick:
        a.rounds, sizes = 5, (1_000, 100_000)
    return common.finish("growth", run(a.rounds, sizes), a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
