"""Scale (issue 17, target 3): how the registry and sends grow from 50 to 500 handles, and three boxes.

- **Registry growth (no root needed).** One comm folder whose registry is grown to 50, 100, 200 and 500
  rows (copies of a real joined row, each with its own handle and root). At each size: the registry's
  bytes, one read and parse (``registry.read``), one registry write as a due touch, a join or a Stop hook
  makes it (``registry.update`` rewriting one row's ``last_seen``: the lock, a fresh read, the rewrite,
  fsyncs and the rename), and one local
  ``sotd comm send`` subprocess into that folder (wall, median of rounds, with the interpreter floor).
- **Three boxes (root).** Three network namespaces with their own sshd, comm folder and ``sotd daemon run``
  (``tests/multihost/netns.py``): boxa the hub, boxb and boxc guests linked to it over ssh, as in the
  multi-host tier. 500 rows are spread over the three registries: one joined session per sender (100 in
  the default run, 34 on each box), the rest copies of their rows. Each sender is a thread running ``sotd
  comm send`` as its own session, back to back for ``--secs`` (60): even sends go to a session on the same
  box (local), odd ones to a session on another box, rotating over the routes (guest -> hub: the relay of
  behaviour 1.4 over ssh; hub -> guest: the hub daemon's offer down the guest's link; guest -> guest:
  through the hub). Bounded: every send has a 120 s limit, the run a deadline. Counted: filed, FAILED by
  its answer (the lock-bound answers the contract allows apart from the rest), every filed line found in
  its inbox once; wall p50/p99 of local and of cross-box sends (and per route).

The targets are checked and printed as PASS/FAIL lines on stderr (``verdicts`` in the result).

Usage: ``python -m bench.scale [--quick]``; writes ``bench/results/scale.json``; ``python -m bench.scale
writes nothing else (``bench/report.py`` draws ``docs/benchmarks/scale.png`` from it, ``bench/plots.py``). ``scripts/bench`` runs the default, the issue's run:
500 handles, 100 senders for 60 s (about 2.5 min with the growth phase and the boxes' set-up); ``--quick``
150 handles, 12 senders for 5 s. ``--full`` is accepted and means the default.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench import common

SIZES = (50, 100, 200, 500)
TOPOLOGY = (
    'hub = "boxa"\n\n[boxes.boxa]\nssh = "boxa"\n\n[boxes.boxb]\nssh = "boxb"\n\n[boxes.boxc]\nssh = "boxc"\n'
)
LINK_UP = "link to the hub at ssh:boxa/boxa is up"
SEND_LIMIT_S = 120.0


def grow_registry(home: str, template: str, total: int, prefix: str) -> None:
    """Add copies of the row ``template`` to the registry at ``home`` until it holds ``total`` rows."""
    from sotd.formats import registry
    from sotd.formats.layout import Layout

    layout = Layout(home)

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        agents = registry.agents_of(doc)
        base = agents[template]
        assert isinstance(base, dict)
        i = 0
        while len(agents) < total:
            name = f"{prefix}{i:04d}"
            if name not in agents:
                row = dict(base)
                if isinstance(row.get("root"), str):
                    row["root"] = f"{row['root']}-{name}"
                agents[name] = row
            i += 1
        return True, None

    registry.update(layout, common.HOST, change, bound=30)


# ------------------------------------------------------------------------------------- registry growth


def run_growth(work: str, sizes: tuple[int, ...], reps: int, rounds: int) -> dict[str, object]:
    from sotd.formats import registry

    s = common.Sessions(work)
    a = s.add("alpha")
    b = s.add("beta")
    s.check("alpha", [common.SOTD, "comm", "send", f"@{b}", "warm"], "filed")
    out: list[dict[str, object]] = []

    def stamp_row(doc: dict[str, object]) -> tuple[bool, None]:
        # A forced rewrite of one row's last_seen: what a touch that is due, a join or a Stop hook pays
        # (a touch inside its 60 s bound writes nothing, so it would time a read).
        registry.set_last_seen(doc, a)
        return True, None

    for n in sizes:
        grow_registry(s.layout.home, a, n, "row")
        size = os.path.getsize(s.layout.registry)
        reads, writes = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            registry.read(s.layout)
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            registry.update(s.layout, common.HOST, stamp_row, bound=5.0)
            writes.append(time.perf_counter() - t0)
        send, floor = [], []
        for r in range(rounds):
            pair = (
                ("send", [common.SOTD, "comm", "send", f"@{b}", "scale"]),
                ("floor", [common.PYTHON, "-c", "pass"]),
            )
            for kind, argv in pair if r % 2 == 0 else tuple(reversed(pair)):
                (send if kind == "send" else floor).append(s.spawn("alpha", argv)[0])
        out.append(
            {
                "handles": n,
                "registry_bytes": size,
                "read_ms": common.summary(reads, 1e3),
                "write_ms": common.summary(writes, 1e3),
                "send_ms": common.summary(send, 1e3),
                "floor_ms": common.summary(floor, 1e3),
                "send_to_floor": common.ratio(send, floor),
            }
        )
    first, last = out[0], out[-1]

    def grow(key: str) -> float:
        return last[key]["median"] / first[key]["median"]  # type: ignore[index,no-any-return]

    return {
        "sizes": out,
        "growth_first_to_last": {
            "handles": f"{first['handles']} -> {last['handles']}",
            "registry_bytes": last["registry_bytes"] / first["registry_bytes"],  # type: ignore[operator]
            "read": grow("read_ms"),
            "write": grow("write_ms"),
            "send": grow("send_ms"),
            "send_to_floor": last["send_to_floor"] / first["send_to_floor"],  # type: ignore[operator]
        },
    }


# ------------------------------------------------------------------------------------------ three boxes


def _not_run(why: str) -> dict[str, object]:
    return {"not_run": why}


LOCK_BOUND_MARKS = ("was held for", "the registry lock")  # the bounded lock answers the contract allows


def allowed_failure(answer: str) -> bool:
    """Whether a FAILED answer is one of the bounded lock answers the contract allows under load (the
    inbox lock held past its bound, the registry lock not had in its bound); any other answer is a
    failure of the run."""
    return any(m in answer for m in LOCK_BOUND_MARKS)


def reason_of(answer: str) -> str:
    """A FAILED answer with its handles, paths and figures replaced by placeholders, so answers that differ
    only in those are counted as one reason."""
    import re

    s = re.sub(r"@[A-Za-z0-9_.-]+", "@<h>", answer)
    s = re.sub(r"/tmp/\S+", "<path>", s)
    s = re.sub(r"\d+\.\d+s\b", "<n>s", s)
    return s


def route_of(from_box: str, to_box: str) -> str:
    if from_box == to_box:
        return "local"
    if to_box == "boxa":
        return "guest -> hub"
    if from_box == "boxa":
        return "hub -> guest"
    return "guest -> guest"


def run_boxes(handles: int, senders: int, secs: float) -> dict[str, object]:
    sys.path.insert(0, common.ROOT)
    try:
        from tests.multihost.netns import Net, unavailable
    except ImportError as e:
        return _not_run(f"tests/multihost/netns.py cannot be imported: {e}")
    why = unavailable()
    if why:
        return _not_run(why)
    from sotd.formats.layout import Layout, ensure_home

    ip = shutil.which("ip") or "/usr/sbin/ip"
    boxes = ["boxa", "boxb", "boxc"]
    per_box_sessions = max(2, -(-senders // len(boxes)))  # one session per sender, at least two per box
    base = tempfile.mkdtemp(prefix="sotd-sc-", dir="/tmp")  # short: AF_UNIX paths are bounded
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    t_setup = time.monotonic()
    try:
        with Net(boxes, base) as net:
            for box in boxes:
                ensure_home(Layout(net.boxes[box].comm_home))
                with open(os.path.join(net.boxes[box].comm_home, "hosts.toml"), "w") as f:
                    f.write(TOPOLOGY)

            def log(box: str) -> str:
                return os.path.join(net.boxes[box].dir, "daemon.log")

            sess: dict[str, tuple[str, dict[str, str], str]] = {}  # name -> (box, env, root)
            join_errors: list[str] = []

            def join_box(box: str) -> None:
                for k in range(per_box_sessions):
                    name = f"{box[-1]}{k}"
                    root = os.path.realpath(os.path.join(net.boxes[box].dir, "p", name))
                    os.makedirs(root, exist_ok=True)
                    env = net.env(box)
                    env.update(
                        SOT_COMM_SELF_FILE=os.path.join(
                            net.boxes[box].comm_home, "self", f"{name}-session.txt"
                        ),
                        PWD=root,
                        PYTHONPYCACHEPREFIX=os.path.join(base, "pycache"),
                    )
                    env.pop("PYTHONDONTWRITEBYTECODE", None)
                    r = net.run(box, [common.SOTD, "comm", "join", "--name", name], env=env, cwd=root)
                    if r.returncode != 0:
                        join_errors.append(f"join {name} on {box}: {r.stdout} {r.stderr}")
                        return
                    sess[name] = (box, env, root)

            joiners = [
                threading.Thread(target=join_box, args=(b,)) for b in boxes
            ]  # one box each: in parallel
            for t in joiners:
                t.start()
            for t in joiners:
                t.join(600)
            if join_errors:
                raise RuntimeError(join_errors[0])
            per_box = handles // len(boxes)
            for box in boxes:
                grow_registry(net.boxes[box].comm_home, f"{box[-1]}0", per_box, f"{box[-1]}r")
            reg_bytes = {
                b: os.path.getsize(os.path.join(net.boxes[b].comm_home, "registry.json")) for b in boxes
            }
            for box in boxes:
                with open(log(box), "ab") as lf:
                    daemons[box] = net.popen(
                        box,
                        [common.SOTD, "daemon", "run"],
                        env=net.env(box),
                        stdin=subprocess.DEVNULL,
                        stdout=lf,
                        stderr=lf,
                    )
            deadline = time.monotonic() + 60
            for box in ("boxb", "boxc"):
                while True:
                    with open(log(box)) as f:
                        if LINK_UP in f.read():
                            break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{box} holds no link to the hub")
                    time.sleep(0.2)
            names = sorted(sess)
            elsewhere = {b: [n for n in names if sess[n][0] != b] for b in boxes}

            def warm(box: str) -> None:  # untimed: the .pyc cache and each guest's ssh master
                mine = [n for n in names if sess[n][0] == box]
                for j, n in enumerate(mine[:4]):
                    _box, env, root = sess[n]
                    to = elsewhere[box][j % len(elsewhere[box])] if j % 2 else mine[(j + 1) % len(mine)]
                    common.spawn_timed(
                        [ip, *net.in_box(box, [common.SOTD, "comm", "send", f"@{to}", "warm"])[1:]],
                        env,
                        root,
                        ok=(0, 1),
                    )

            warmers = [threading.Thread(target=warm, args=(b,)) for b in boxes]
            for t in warmers:
                t.start()
            for t in warmers:
                t.join(300)
            setup_s = time.monotonic() - t_setup
            lat: dict[str, list[float]] = {}
            filed: dict[str, int] = {}
            failed: dict[str, list[str]] = {}
            sent_tags: list[tuple[str, str, str]] = []  # (box of the recipient, recipient, tag) filed
            mu = threading.Lock()
            stop_at = [0.0]
            go = threading.Barrier(senders)

            def sender(i: int) -> None:
                me = names[i % len(names)]
                box, env, root = sess[me]
                local_peers = [n for n in names if sess[n][0] == box and n != me] or [me]
                far = elsewhere[box]
                go.wait(120)
                seq = 0
                while time.monotonic() < stop_at[0]:
                    to = (
                        far[(i + seq // 2) % len(far)]
                        if seq % 2
                        else local_peers[(seq // 2) % len(local_peers)]
                    )
                    to_box = sess[to][0]
                    route = route_of(box, to_box)
                    tag = f"sc-{i}-{seq}"
                    argv = [ip, *net.in_box(box, [common.SOTD, "comm", "send", f"@{to}", tag])[1:]]
                    t0 = time.perf_counter()
                    try:
                        p = subprocess.run(
                            argv, env=env, cwd=root, capture_output=True, text=True, timeout=SEND_LIMIT_S,
                            check=False,
                        )  # fmt: skip
                        code, said = p.returncode, (p.stdout + p.stderr).strip()
                    except subprocess.TimeoutExpired:
                        code, said = -1, f"no answer within {SEND_LIMIT_S:.0f} s (the bench's limit)"
                    wall = time.perf_counter() - t0
                    with mu:
                        lat.setdefault(route, []).append(wall)
                        if code == 0:
                            filed[route] = filed.get(route, 0) + 1
                            sent_tags.append((to_box, to, tag))
                        else:
                            last = said.splitlines()[-1] if said else f"exit {code}"
                            failed.setdefault(route, []).append(last)
                    seq += 1

            threads = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
            stop_at[0] = time.monotonic() + secs + 5.0  # the barrier's start-up of 100 threads inside it
            load_start = common.load_avg()
            t_run = time.monotonic()
            for t in threads:
                t.start()
            run_deadline = time.monotonic() + secs + 5.0 + SEND_LIMIT_S + 30
            for t in threads:
                t.join(max(1.0, run_deadline - time.monotonic()))
            stuck = sum(1 for t in threads if t.is_alive())
            run_s = time.monotonic() - t_run
            load_end = common.load_avg()
            with mu:
                tags = list(sent_tags)
            missing = 0
            seen_twice = 0
            cache: dict[tuple[str, str], str] = {}
            for box, to, tag in tags:
                key = (box, to)
                if key not in cache:
                    try:
                        with open(
                            os.path.join(net.boxes[box].comm_home, "inbox", f"{to}.jsonl"), encoding="utf-8"
                        ) as f:
                            cache[key] = f.read()
                    except OSError:
                        cache[key] = ""
                n = cache[key].count(f'"msg":"{tag}"')
                missing += n == 0
                seen_twice += n > 1
            reasons: dict[str, int] = {}
            for k, answers in failed.items():
                for r in answers:
                    key = f"{k}: {reason_of(r)}"
                    reasons[key] = reasons.get(key, 0) + 1
            reasons = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
            for box in list(daemons):
                common.stop_proc(daemons.pop(box))
    finally:
        for p in daemons.values():
            p.kill()
        shutil.rmtree(base, ignore_errors=True)
    local = lat.get("local", [])
    cross = [x for k, v in lat.items() if k != "local" for x in v]
    n_failed = {k: len(v) for k, v in failed.items()}
    allowed = sum(n for why, n in reasons.items() if allowed_failure(why))
    return {
        "handles": per_box * len(boxes),
        "handles_per_box": per_box,
        "registry_bytes": reg_bytes,
        "senders": senders,
        "secs": secs,
        "joined_sessions_per_box": per_box_sessions,
        "setup_s": setup_s,
        "run_s": run_s,
        "load_avg": [load_start, load_end],
        "stuck_senders": stuck,
        "local_ms": common.summary(local, 1e3) if local else None,
        "cross_ms": common.summary(cross, 1e3) if cross else None,
        "route_ms": {k: common.summary(v, 1e3) for k, v in sorted(lat.items())},
        "filed": filed,
        "failed": n_failed,
        "failed_reasons": reasons,
        "failed_allowed": allowed,
        "failed_other": sum(n_failed.values()) - allowed,
        "filed_but_missing": missing,
        "filed_twice": seen_twice,
    }


def verdicts(growth: dict[str, object], boxes: dict[str, object]) -> list[str]:
    """The PASS/FAIL lines of target 3 (and the figures beside them), as printed."""
    sizes: list[dict] = growth["sizes"]  # type: ignore[assignment]
    first, last = sizes[0], sizes[-1]
    g: dict = growth["growth_first_to_last"]  # type: ignore[assignment]
    out = [
        f"      registry at {last['handles']} handles: {last['registry_bytes']:,} bytes "
        f"({g['registry_bytes']:.1f}x of {first['handles']}); read {last['read_ms']['median']:.2f} ms "
        f"({g['read']:.1f}x); one registry write {last['write_ms']['median']:.1f} ms ({g['write']:.1f}x); "
        f"a local send / floor {last['send_to_floor']:.2f}x ({g['send_to_floor']:.2f}x)",
    ]
    if "not_run" in boxes:
        return [*out, f"SKIP  three boxes not run: {boxes['not_run']}"]

    def pf(ok: object) -> str:
        return "PASS" if ok else "FAIL"

    def ms(d: dict | None) -> str:
        return (
            "none"
            if not d
            else f"n {d['n']}, p50 {d['median']:.0f} / p99 {d['p99']:.0f} / max {d['max']:.0f} ms"
        )

    failed: dict = boxes["failed"]  # type: ignore[assignment]
    filed: dict = boxes["filed"]  # type: ignore[assignment]
    out += [
        f"{pf(boxes['failed_other'] == 0 and boxes['stuck_senders'] == 0)}  three boxes, {boxes['handles']} handles, "
        f"{boxes['senders']} senders for {boxes['secs']:.0f} s: {sum(filed.values())} filed, "
        f"{sum(failed.values())} FAILED ({boxes['failed_allowed']} bounded lock answers, allowed; "
        f"{boxes['failed_other']} other), {boxes['stuck_senders']} senders stuck",
        f"{pf(boxes['filed_but_missing'] == 0 and boxes['filed_twice'] == 0)}  filed but missing "
        f"{boxes['filed_but_missing']}, filed twice {boxes['filed_twice']}",
        f"      local: {ms(boxes['local_ms'])}",  # type: ignore[arg-type]
        f"      cross-box: {ms(boxes['cross_ms'])}",  # type: ignore[arg-type]
    ]
    for why, n in boxes["failed_reasons"].items():  # type: ignore[attr-defined]
        out.append(f"      FAILED {n} x {why}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--full", action="store_true", help="the issue's run (the default; kept for old notes)")
    ap.add_argument("--handles", type=int, default=500)
    ap.add_argument("--senders", type=int, default=100, help="concurrent senders, one joined session each")
    ap.add_argument("--secs", type=float, default=60.0)
    ap.add_argument("--no-boxes", action="store_true", help="only the registry growth")
    a = ap.parse_args(argv)
    reps, rounds, sizes = 20, 8, SIZES
    if a.quick:
        a.handles, a.senders, a.secs = 150, 12, 5.0
        reps, rounds, sizes = 10, 4, (50, 500)
    work = tempfile.mkdtemp(prefix="sotd-bench-scale-", dir=common.bench_dir())
    try:
        facts = common.machine(work)
        growth = run_growth(os.path.join(work, "g"), sizes, reps, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    boxes = _not_run("--no-boxes") if a.no_boxes else run_boxes(a.handles, a.senders, a.secs)
    facts["load_avg_end"] = common.load_avg()
    lines = verdicts(growth, boxes)
    for line in lines:
        print(f"scale: {line}", file=sys.stderr)
    result = {
        "workload": "scale",
        "machine": facts,
        "params": vars(a) | {"reps": reps, "rounds": rounds},
        "growth": growth,
        "boxes": boxes,
        "verdicts": lines,
    }
    json.dumps(result)
    return common.finish("scale", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
