"""PNG plots of ``bench/results/*.json`` for docs/benchmarks.md (matplotlib, Agg backend; the ``bench`` extra).

``make_all(results)`` draws what it can and answers ``{workload: [(alt text, path relative to docs/)]}``;
``bench/report.py`` embeds those under each workload's tables. A workload whose result is missing, or a
machine without matplotlib, simply gets no picture (the tables stay the record). Run alone:
``python -m bench.plots`` redraws every PNG from the stored results.

Plots: W1 per-command latency against its floor (and the 1.3x target), W2 fan-in throughput by N
(library and CLI), W3 cross-box send latency with no added delay and with 10 ms (beside the floor and a
local send), W4 what the crash runs kept and lost and their rate while killed, W5 the registry lock-wait
distribution (joins, touches, the flock floor), W6 cost against inbox size (commands; in-process reads
with and without the hint), peers (durable deliveries/s per kind and N, per body size).
"""

from __future__ import annotations

import json
import os
import sys

from bench import common

OUT = os.path.join(common.ROOT, "docs", "benchmarks")
REL = "benchmarks"  # how docs/benchmarks.md names the folder
_out = OUT  # where this call of make_all writes (a temp folder for a trial report)

_PLOTTED = ("commands", "fanin", "crossbox", "crash", "registry", "growth", "peers", "scale")


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 110, "font.size": 9, "axes.grid": True})
    return plt


def _save(plt, fig, name: str) -> str:  # type: ignore[no-untyped-def]
    os.makedirs(_out, exist_ok=True)
    path = os.path.join(_out, name)
    tmp = path + ".tmp.png"
    fig.tight_layout()
    fig.savefig(tmp, format="png")
    plt.close(fig)
    os.replace(tmp, path)
    return f"{REL}/{name}"


def w1_commands(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Wall median (bar) and p95 (whisker) per command; its floor's median as a tick, the target as a dash."""
    cases = [c for c in r["cases"] if c["name"] != c["floor_case"]]
    floors = {c["name"]: c["wall_ms"]["median"] for c in r["cases"] if c["name"] == c["floor_case"]}
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) + 2.0))
    ys = list(range(len(cases)))[::-1]
    med = [c["wall_ms"]["median"] for c in cases]
    p95 = [c["wall_ms"]["p95"] for c in cases]
    colors = [
        "tab:gray" if c["target"] is None else ("tab:green" if c.get("pass") else "tab:red") for c in cases
    ]
    ax.barh(ys, med, color=colors, alpha=0.8, label="wall median")
    ax.errorbar(
        p95, ys, xerr=[[p - m for p, m in zip(p95, med, strict=True)], [0] * len(med)], fmt="none", ecolor="k"
    )
    ax.scatter(p95, ys, marker="|", color="k", s=80, label="p95")
    for y, c in zip(ys, cases, strict=True):
        fl = floors.get(c["floor_case"])
        if fl is None:
            continue
        ax.plot([fl, fl], [y - 0.4, y + 0.4], color="tab:blue", lw=2)
        if c["target"] is not None:
            t = fl * c["target"]
            ax.plot([t, t], [y - 0.4, y + 0.4], color="tab:red", lw=1.5, ls="--")
        ax.annotate(
            f"{c['ratio']:.2f}x",
            (0, y),
            xytext=(4, -3),
            textcoords="offset points",
            color="white",
            weight="bold",
        )
    ax.plot([], [], color="tab:blue", lw=2, label="floor median (python -c imports)")
    ax.plot([], [], color="tab:red", lw=1.5, ls="--", label="target (1.3x floor)")
    ax.set_yticks(ys, [c["name"] for c in cases])
    ax.set_xlabel("wall ms (spawn to reap)")
    ax.set_title("W1: per-command latency vs the interpreter floor (label: ratio to floor)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, fontsize=8)
    return "W1 per-command latency vs floor", _save(plt, fig, "w1.png")


def w2_fanin(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Lines/s by N writers, sotd against its floor, per body size; library (processes) and CLI."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in (
        (axes[0], "library", "library: N processes x inbox.append"),
        (axes[1], "cli", "CLI: N threads x `sotd comm send`"),
    ):
        rows = r.get(key) or []
        bodies = sorted({x["body"] for x in rows})
        for body, mk, col in zip(
            bodies, ("o", "s", "^"), ("tab:blue", "tab:orange", "tab:green"), strict=False
        ):
            xs = [x for x in rows if x["body"] == body]
            ns = [x["n"] for x in xs]
            ax.plot(ns, [x["per_s"]["median"] for x in xs], marker=mk, color=col, label=f"sotd, {body} B")
            ax.plot(
                ns,
                [x["floor_per_s"]["median"] for x in xs],
                marker=mk,
                color=col,
                ls="--",
                alpha=0.6,
                label=f"floor, {body} B",
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({x["n"] for x in rows}), [str(n) for n in sorted({x["n"] for x in rows})])
        ax.set_xlabel("N senders")
        ax.set_ylabel("lines/s (median)" if key == "library" else "sends/s (median)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("W2: fan-in throughput by N (dashed: the floor of the same run)")
    return "W2 fan-in throughput by N", _save(plt, fig, "w2.png")


def w6_growth(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Wall median per command against inbox size; in-process reads with the hint and with a full scan."""
    sizes = r["params"]["sizes"]

    def lines(s: str) -> float:
        mult = {"k": 1e3, "M": 1e6}
        return float(s[:-1]) * mult[s[-1]] if s[-1] in mult else float(s)

    xs = [lines(s) for s in sizes]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    for c in r["cases"]:
        ax.plot(xs, [c[s]["wall_ms"]["median"] for s in sizes], marker="o", label=c["name"])
    ax.axhline(r["floor_wall_ms"]["median"], color="k", ls="--", lw=1, label="floor (python -c)")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("inbox lines")
    ax.set_ylabel("wall ms (median)")
    ax.set_title("commands (hinted, as a poll leaves them)")
    ax.legend(fontsize=8)
    ax = axes[1]
    ip = r["in_process_read_batch_ms"]
    ax.plot(xs, [ip[s]["hint"] for s in sizes], marker="o", label="with the read hint")
    ax.plot(xs, [ip[s]["full scan"] for s in sizes], marker="s", label="without it (full scan)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("inbox lines")
    ax.set_ylabel("ms (median), log")
    ax.set_title("in process: poll.read_batch, 1 unread")
    ax.legend(fontsize=8)
    fig.suptitle("W6: poll/unread cost vs inbox size, hinted vs unhinted")
    return "W6 poll/unread cost vs inbox size, hinted vs unhinted", _save(plt, fig, "w6.png")


def peers(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Durable deliveries/s (median) per kind, grouped by N writers (log scale); a panel per body size."""
    rows = r["delivery"]
    body = r["params"].get("body")
    bodies = sorted({x.get("body", body) for x in rows})
    ns = sorted({x["n"] for x in rows})
    kinds = [
        k for k in ("raw", "sotd", "maildir", "sqlite", "jsonarray") if any(x["kind"] == k for x in rows)
    ]
    names = {
        "raw": "floor: write+fsync",
        "sotd": "sotd inbox.append",
        "maildir": "Maildir + fsync",
        "sqlite": "SQLite WAL FULL",
        "jsonarray": "JSON array rewrite",
    }
    fig, axes = plt.subplots(1, len(bodies), figsize=(5 * len(bodies) + 1, 4), squeeze=False)
    width = 0.8 / max(1, len(kinds))
    for ax, b in zip(axes[0], bodies, strict=True):
        for i, k in enumerate(kinds):
            vals = []
            for n in ns:
                hit = [x for x in rows if x["kind"] == k and x["n"] == n and x.get("body", body) == b]
                vals.append(hit[0]["per_s"]["median"] if hit else 0)
            ax.bar([j + i * width for j in range(len(ns))], vals, width, label=names.get(k, k))
        ax.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(ns))], [f"N = {n}" for n in ns])
        ax.set_yscale("log")
        ax.set_ylabel("deliveries/s (median), log")
        ax.set_title(f"body {b} B")
        ax.legend(fontsize=7)
    fig.suptitle("Peers: durable delivery of one message, by store and number of writers")
    return "Peers: durable deliveries per second by store", _save(plt, fig, "peers.png")


def w3_crossbox(plt, r: dict) -> tuple[str, str] | None:  # type: ignore[no-untyped-def]
    """Wall ms (median bar, p95 whisker) of the floor, a local send and the cross-box send, per added delay."""
    if "not_run" in r:
        return None
    phases = list(r["phases"])
    cases = [
        ("floor", "floor (python -c)"),
        ("local send", "local send"),
        ("cross-box send", "cross-box send"),
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(cases)
    for i, (key, label) in enumerate(cases):
        med = [r["phases"][ph]["cases"][key]["median"] for ph in phases]
        p95 = [r["phases"][ph]["cases"][key]["p95"] for ph in phases]
        xs = [j + i * width for j in range(len(phases))]
        ax.bar(xs, med, width, label=label, alpha=0.85)
        ax.errorbar(
            xs,
            med,
            yerr=[[0] * len(med), [b - a for a, b in zip(med, p95, strict=True)]],
            fmt="none",
            ecolor="k",
        )
    for j, ph in enumerate(phases):
        d = r["phases"][ph]
        top = d["cases"]["cross-box send"]["p95"]
        ax.annotate(
            f"cross/floor {d['ratio_cross_to_floor']:.2f}x\ncross-local {d['cross_minus_local_ms']:.0f} ms",
            (j + 2 * width, top),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    ax.set_xticks([j + width for j in range(len(phases))], [f"{ph} added each way" for ph in phases])
    ax.set_ylabel("wall ms (median; whisker p95)")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)
    ax.set_title("W3: cross-box send through the hub vs a local send and the floor, same box")
    ax.legend(fontsize=8, loc="upper left")
    return "W3 cross-box send latency, 0 ms and 10 ms added", _save(plt, fig, "w3.png")


def w4_crash(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Per run: lines acknowledged (all kept), durable but unacknowledged, acknowledged but lost, torn
    tails cut; and the rate while writers were being killed against an unkilled run."""
    runs = list(r["runs"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    bars = [
        ("acked", "acknowledged (all found)", "tab:green"),
        ("durable_unacked", "durable, not acknowledged", "tab:blue"),
        ("torn_tails_cut", "torn tails cut", "tab:orange"),
        ("acked_missing", "acknowledged but lost", "tab:red"),
    ]
    width = 0.8 / len(bars)
    for i, (key, label, col) in enumerate(bars):
        vals = [r["runs"][n][key] for n in runs]
        xs = [j + i * width for j in range(len(runs))]
        ax.bar(xs, [max(v, 0.8) for v in vals], width, label=label, color=col, alpha=0.85)
        for x, v in zip(xs, vals, strict=True):
            ax.annotate(
                str(v), (x, max(v, 0.8)), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7
            )
    ax.set_yscale("log")
    ax.set_xticks(
        [j + width * (len(bars) - 1) / 2 for j in range(len(runs))],
        [f"{n}\n{r['runs'][n]['kills']} kills" for n in runs],
    )
    ax.set_ylabel("lines (log)")
    ax.set_title("lines after the kills")
    ax.legend(fontsize=7)
    ax = axes[1]
    unk = r.get("unkilled_lines_per_s", {})
    xs = list(range(len(runs)))
    ax.bar([x - 0.2 for x in xs], [r["runs"][n]["lines_per_s"] for n in runs], 0.4, label="while killed")
    ax.bar([x + 0.2 for x in xs], [unk.get(n, 0) for n in runs], 0.4, label="unkilled (floor)", alpha=0.7)
    ax.set_xticks(xs, runs)
    ax.set_ylabel("acknowledged lines/s")
    ax.set_title("rate while writers are SIGKILLed")
    ax.legend(fontsize=8)
    fig.suptitle("W4: SIGKILLed writers -- acknowledged lines lost must be 0")
    return "W4 crash: lines kept and lost under SIGKILL", _save(plt, fig, "w4.png")


def w5_registry(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Lock-wait histogram (share of waits per bucket) and percentiles, for joins, touches and the floor."""
    kinds = [("sotd touches", "sotd"), ("floor (flock)", "floor")]
    if r.get("join_wait_ms"):
        kinds.insert(0, ("sotd joins", "join"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    buckets = list(r["sotd_wait_hist_ms"])
    width = 0.8 / len(kinds)
    for i, (label, k) in enumerate(kinds):
        h = r[f"{k}_wait_hist_ms"]
        total = max(1, sum(h.values()))
        ax.bar(
            [j + i * width for j in range(len(buckets))], [h[b] / total for b in buckets], width, label=label
        )
    ax.set_xticks(
        [j + width * (len(kinds) - 1) / 2 for j in range(len(buckets))], buckets, rotation=45, fontsize=7
    )
    ax.set_xlabel("lock wait, ms (bucket upper edge)")
    ax.set_ylabel("share of waits")
    ax.set_title("distribution")
    ax.legend(fontsize=8)
    ax = axes[1]
    stats = ("median", "p95", "p99", "max")
    for i, (label, k) in enumerate(kinds):
        d = r[f"{k}_wait_ms"]
        ax.bar(
            [j + i * width for j in range(len(stats))], [max(d[s], 0.01) for s in stats], width, label=label
        )
    ax.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(stats))], stats)
    ax.set_yscale("log")
    ax.set_ylabel("lock wait ms (log)")
    if r.get("touch_bound_s"):
        ax.axhline(r["touch_bound_s"] * 1000, color="tab:red", ls="--", lw=1, label="a touch's bound")
    ax.set_title("percentiles")
    ax.legend(fontsize=8)
    fig.suptitle(f"W5: registry lock wait, {r['touch_procs']} processes contending")
    return "W5 registry lock-wait distribution", _save(plt, fig, "w5.png")


def scale(plt, r: dict) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Registry bytes, one read, one write (touch) and one local send against the number of handles."""
    rows = r["growth"]["sizes"]
    xs = [x["handles"] for x in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    ax.plot(xs, [x["registry_bytes"] / 1024 for x in rows], marker="o", label="registry.json, KiB")
    ax.set_xlabel("handles in the registry")
    ax.set_ylabel("KiB")
    ax.set_ylim(bottom=0)
    ax.set_title("registry size")
    ax.legend(fontsize=8)
    ax = axes[1]
    for key, label in (
        ("read_ms", "read + parse (in process)"),
        ("write_ms", "one registry write: touch (in process)"),
        ("send_ms", "sotd comm send (process)"),
        ("floor_ms", "floor: python -c pass"),
    ):
        ax.plot(xs, [x[key]["median"] for x in rows], marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("handles in the registry")
    ax.set_ylabel("ms (median), log")
    ax.set_title("cost per operation")
    ax.legend(fontsize=8)
    fig.suptitle("Scale: registry size and cost from 50 to 500 handles")
    return "Scale: registry size and cost from 50 to 500 handles", _save(plt, fig, "scale.png")


_DRAW = {
    "commands": w1_commands,
    "fanin": w2_fanin,
    "crossbox": w3_crossbox,
    "crash": w4_crash,
    "registry": w5_registry,
    "growth": w6_growth,
    "peers": peers,
    "scale": scale,
}


def make_all(
    results: dict[str, dict], warn=None, out_dir: str | None = None
) -> dict[str, list[tuple[str, str]]]:  # type: ignore[no-untyped-def]
    """Draw every plot whose result is in ``results`` into ``out_dir`` (default docs/benchmarks/);
    ``{workload: [(alt, path relative to the page: "benchmarks/<name>.png")]}``."""
    global _out
    _out = out_dir or OUT
    say = warn or (lambda s: print(s, file=sys.stderr))
    try:
        plt = _pyplot()
    except ImportError:
        say("plots: matplotlib is missing (pip install -e '.[bench]'); the doc gets no pictures")
        return {}
    out: dict[str, list[tuple[str, str]]] = {}
    for name, draw in _DRAW.items():
        r = results.get(name)
        if not r:
            continue
        try:
            pic = draw(plt, r)
            if pic is not None:
                out[name] = [pic]
        except (KeyError, TypeError, ValueError, IndexError) as e:  # a result of another shape
            say(f"plots: {name}: not drawn ({type(e).__name__}: {e})")
    return out


def _load() -> dict[str, dict]:
    loaded: dict[str, dict] = {}
    for name in _PLOTTED:
        try:
            with open(os.path.join(common.RESULTS, f"{name}.json"), encoding="utf-8") as f:
                loaded[name] = json.load(f)
        except FileNotFoundError:
            pass
    return loaded


def main() -> int:
    for name, pics in make_all(_load()).items():
        for _alt, rel in pics:
            print(f"{name}: docs/{rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
