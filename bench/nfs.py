"""NFS figures (issue 15): appends/s on v4.2 with the inbox lock and without it (and the lines the lockless run
lost), p50/p99 of a send over NFS, registry write rate from two hosts.

File: ``bench/nfs.py``. Usage: ``python -m bench.nfs`` boots the NFS tier's guest (``tests/nfs/vm.py``; root,
QEMU under TCG, about 6 minutes) with only the points these figures come from; ``--from <results.json>``
reads a tier run instead (``build/nfs/results.json``, kept by ``scripts/test nfs``). Writes
``bench/results/nfs.json``.

Every figure is from a QEMU guest in software emulation on a shared 2-core machine: RPCs between two
namespaces of one emulated kernel, so the absolute numbers are far below a real network's and say nothing
about one; the ratios between lock and no lock, and the counts of lost lines, are the point.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from bench import common

POINTS = "appends_sotd_v4,appends_plain_v4,appends_plain_v3,appends_hub_v3,registry_v4,registry_v3,send_v4"


def figures(results: dict[str, dict]) -> dict[str, object]:
    """The figures of the doc from a guest's ``results.json``."""
    out: dict[str, object] = {}
    for key in ("appends_sotd_v4", "appends_plain_v4", "appends_plain_v3", "appends_hub_v3"):
        r = results.get(key)
        if not r or "census" not in r:
            continue
        c = r["census"]
        wall = r.get("wall_secs") or max(float(w.get("secs", 0)) for w in r["writers"].values())
        out[key] = {
            "writers": 2,
            "each": r["expected"] // 2,
            "wall_secs": wall,
            "appends_per_sec": round(r["expected"] / wall, 1) if wall else None,
            "reported_failed": sum(int(w.get("failed", 0)) for w in r["writers"].values()),
            "failed_but_filed": len(r.get("failed_but_filed", [])),
            "lines": c["lines"],
            "lost": c["missing"]["A"] + c["missing"]["B"],
            "torn": c["torn"],
            "p50_ms": {w: round(v["p50"] * 1000, 1) for w, v in r["writers"].items() if "p50" in v},
            "p99_ms": {w: round(v["p99"] * 1000, 1) for w, v in r["writers"].items() if "p99" in v},
        }
    s = results.get("send_v4")
    if s and "secs_each" in s:
        out["send_v4"] = {**common.summary(s["secs_each"], 1000.0), "filed": s["codes"].count(0)}
    for key in ("registry_v4", "registry_v3"):
        r = results.get(key)
        if not r or "writers" not in r:
            continue
        ws = r["writers"]
        wall = max(w["write_secs"] for w in ws.values())
        out[key] = {
            "writes": sum(w["n"] for w in ws.values()),
            "wall_secs": wall,
            "writes_per_sec": round(sum(w["n"] for w in ws.values()) / wall, 2),
            "final_counter": r["final"]["agents"]["counter"]["n"],
            "reads": sum(w["reader"]["reads"] for w in ws.values()),
            "unparseable": sum(w["reader"]["unparseable"] for w in ws.values()),
            "estale_retries": sum(w["retry_errors"].get("ESTALE", 0) for w in ws.values()),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--from", dest="src", help="a tier run's results.json instead of a new boot")
    a = ap.parse_args(argv)
    if a.src:
        with open(a.src, encoding="utf-8") as f:
            results = json.load(f)
        source = os.path.relpath(os.path.abspath(a.src), common.ROOT)
    else:
        from tests.nfs import vm

        with tempfile.TemporaryDirectory(prefix="sotd-nfs-bench-") as work:
            boot = vm.boot(
                work, {"python": sys.executable, "budget_secs": 600, "only": POINTS}, wall_secs=630
            )
        results = boot.results or {}
        source = f"a new boot (QEMU exit {boot.rc}, {boot.secs:.0f} s)"
    result: dict[str, object] = {
        "workload": "nfs",
        "source": source,
        "guest": "QEMU TCG, 2 vCPUs, Debian kernel, kernel nfsd on tmpfs, lease 10 s",
        "machine": common.machine(tempfile.gettempdir()),
        **figures(results),
    }
    return common.finish("nfs", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
