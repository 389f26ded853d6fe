"""Scale (issue 17, target 3): how the registry and sends grow from 50 to 500 handles, and three boxes.

- **Registry growth (no root needed).** One comm folder whose registry is grown to 50, 100, 200 and 500
  rows (copies of a real joined row, each with its own handle and root). At each size: the registry's
  bytes, one read and parse (``registry.read``), one registry write as every ``send``/``poll`` touch makes
  it (``registry.touch``: the lock, a fresh read, the rewrite, fsyncs and the rename), and one local
  ``sotd comm send`` subprocess into that folder (wall, median of rounds, with the interpreter floor).
- **Three boxes (root).** Three network namespaces with their own sshd, comm folder and ``sotd daemon run``
  (``tests/multihost/netns.py``): boxa the hub, boxb and boxc guests linked to it. Rows are spread over the
  three registries (500 in the full run; a few joined sessions per box are the senders, the rest copies of
  their rows). ``--senders`` threads run ``sotd comm send`` back to back for ``--secs``: on the guests
  half of the sends go to a handle on the same box (local), half to a handle on the hub (cross-box: the
  relay route of behaviour 1.4 over ssh, as ``bench/crossbox.py``); on the hub all are local. Counted:
  filed, FAILED (by its reason), and every filed line found in its inbox; wall p50/p99 of local and of
  cross-box sends.

Usage: ``python -m bench.scale [--quick | --full]``; writes ``bench/results/scale.json``; ``python -m
bench.scale --plot`` draws ``docs/benchmarks/scale.png`` from it. ``scripts/bench`` runs the default: 500
handles, 16 senders for 10 s (about 30 s with the boxes' set-up); ``--full`` is the issue's 100
senders for 60 s (not in ``scripts/bench``: on two cores it is a load test of the scheduler).
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
    for n in sizes:
        grow_registry(s.layout.home, a, n, "row")
        size = os.path.getsize(s.layout.registry)
        reads, writes = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            registry.read(s.layout)
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            registry.touch(s.layout, common.HOST, a, bound=5.0)
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


def run_boxes(handles: int, senders: int, secs: float, per_box_sessions: int) -> dict[str, object]:
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
    base = tempfile.mkdtemp(prefix="sotd-sc-", dir="/tmp")  # short: AF_UNIX paths are bounded
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with Net(boxes, base) as net:
            for box in boxes:
                ensure_home(Layout(net.boxes[box].comm_home))
                with open(os.path.join(net.boxes[box].comm_home, "hosts.toml"), "w") as f:
                    f.write(TOPOLOGY)

            def log(box: str) -> str:
                return os.path.join(net.boxes[box].dir, "daemon.log")

            sess: dict[str, tuple[str, dict[str, str], str]] = {}  # name -> (box, env, root)
            for box in boxes:
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
                        raise RuntimeError(f"join {name} on {box}: {r.stdout} {r.stderr}")
                    sess[name] = (box, env, root)
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
            hub_names = [n for n in names if sess[n][0] == "boxa"]
            # warm-up, untimed: the .pyc cache and each guest's ssh master
            for n in names:
                box, env, root = sess[n]
                tgt = hub_names[0] if box != "boxa" else n
                common.spawn_timed(
                    [ip, *net.in_box(box, [common.SOTD, "comm", "send", f"@{tgt}", "warm"])[1:]],
                    env,
                    root,
                    ok=(0, 1),
                )
            lat: dict[str, list[float]] = {"local": [], "cross": []}
            filed: dict[str, int] = {"local": 0, "cross": 0}
            failed: dict[str, list[str]] = {"local": [], "cross": []}
            sent_tags: list[tuple[str, str, str]] = []  # (box of the recipient, recipient, tag) filed
            mu = threading.Lock()
            stop_at = [0.0]
            go = threading.Barrier(senders)

            def sender(i: int) -> None:
                me = names[i % len(names)]
                box, env, root = sess[me]
                local_peers = [n for n in names if sess[n][0] == box and n != me] or [me]
                go.wait(60)
                seq = 0
                while time.monotonic() < stop_at[0]:
                    cross = box != "boxa" and seq % 2 == 1
                    to = (
                        hub_names[(i + seq) % len(hub_names)]
                        if cross
                        else local_peers[seq % len(local_peers)]
                    )
                    kind = "cross" if cross else "local"
                    tag = f"sc-{i}-{seq}"
                    argv = [ip, *net.in_box(box, [common.SOTD, "comm", "send", f"@{to}", tag])[1:]]
                    t0 = time.perf_counter()
                    p = subprocess.run(
                        argv, env=env, cwd=root, capture_output=True, text=True, timeout=120, check=False
                    )
                    wall = time.perf_counter() - t0
                    with mu:
                        lat[kind].append(wall)
                        if p.returncode == 0:
                            filed[kind] += 1
                            sent_tags.append(("boxa" if cross else box, to, tag))
                        else:
                            failed[kind].append(
                                (p.stdout + p.stderr).strip().splitlines()[-1:][0]
                                if (p.stdout + p.stderr).strip()
                                else f"exit {p.returncode}"
                            )
                    seq += 1

            threads = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
            stop_at[0] = time.monotonic() + secs + 2.0
            for t in threads:
                t.start()
            for t in threads:
                t.join(secs + 300)
            missing = 0
            cache: dict[tuple[str, str], str] = {}
            for box, to, tag in sent_tags:
                key = (box, to)
                if key not in cache:
                    try:
                        with open(
                            os.path.join(net.boxes[box].comm_home, "inbox", f"{to}.jsonl"), encoding="utf-8"
                        ) as f:
                            cache[key] = f.read()
                    except OSError:
                        cache[key] = ""
                if f'"msg":"{tag}"' not in cache[key]:
                    missing += 1
            reasons: dict[str, int] = {}
            for k, answers in failed.items():
                for r in answers:
                    reasons[f"{k}: {r}"] = reasons.get(f"{k}: {r}", 0) + 1
            for box in list(daemons):
                p = daemons.pop(box)
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
    finally:
        for p in daemons.values():
            p.kill()
        shutil.rmtree(base, ignore_errors=True)
    return {
        "handles": per_box * len(boxes),
        "handles_per_box": per_box,
        "registry_bytes": reg_bytes,
        "senders": senders,
        "secs": secs,
        "joined_sessions_per_box": per_box_sessions,
        "local_ms": common.summary(lat["local"], 1e3) if lat["local"] else None,
        "cross_ms": common.summary(lat["cross"], 1e3) if lat["cross"] else None,
        "filed": filed,
        "failed": {k: len(v) for k, v in failed.items()},
        "failed_reasons": reasons,
        "filed_but_missing": missing,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--full", action="store_true", help="the issue's run: 100 senders for 60 s")
    ap.add_argument("--handles", type=int, default=500)
    ap.add_argument("--senders", type=int, default=16, help="100 with --full")
    ap.add_argument("--secs", type=float, default=10.0, help="60 with --full")
    ap.add_argument("--sessions", type=int, default=3, help="joined sessions per box (the senders)")
    ap.add_argument("--no-boxes", action="store_true", help="only the registry growth")
    a = ap.parse_args(argv)
    reps, rounds, sizes = 20, 8, SIZES
    if a.full:
        a.senders, a.secs, a.sessions = 100, 60.0, 6
    if a.quick:
        a.handles, a.senders, a.secs, a.sessions = 150, 12, 5.0, 2
        reps, rounds, sizes = 10, 4, (50, 500)
    work = tempfile.mkdtemp(prefix="sotd-bench-scale-", dir=common.bench_dir())
    try:
        facts = common.machine(work)
        growth = run_growth(os.path.join(work, "g"), sizes, reps, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    boxes = _not_run("--no-boxes") if a.no_boxes else run_boxes(a.handles, a.senders, a.secs, a.sessions)
    facts["load_avg_end"] = common.load_avg()
    result = {
        "workload": "scale",
        "machine": facts,
        "params": vars(a) | {"reps": reps, "rounds": rounds},
        "growth": growth,
        "boxes": boxes,
    }
    json.dumps(result)
    return common.finish("scale", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
