"""Across boxes, as deployed (issue 20): send latency local vs cross-box, cold and warm, and how long mail
to a guest fails after a hub restart and after a healed partition.

Two boxes in network namespaces with their own sshd (``tests/multihost/netns.py``; the daemons and
sessions of ``tests/multihost/test_cross_box.py``'s ``World``): ``boxa`` the hub (session ``hank``),
``boxb`` a guest (sessions ``bob``, ``bea``), boxb's daemon linked to the hub over ssh.

Timed (wall time of one ``sotd comm send`` process, spawn to exit, each through the same ``ip netns exec
… unshare`` wrapper, so the wrapper's cost is in every case alike):

- local: bob → bea on boxb (its own folder, no daemon, no ssh);
- guest → hub, warm: bob → hank with the ssh master up (the session shares boxb's ControlPath folder with
  its daemon's link, as a deployed session does);
- guest → hub, cold: the same with an empty ControlPath folder each time (a full ssh handshake);
- hub → guest: hank → bob (the hub's daemon offers it down boxb's link; no ssh dial by the sender).

Outages (how long hub → guest mail fails): after a hub restart, from the new hub daemon answering
``sotd daemon status`` to the first hank → bob send filed (a send every 0.2 s); after a partition of boxb
healed, from the network's return to the first send filed, for a short cut (3 s, under the keepalive
bound: the old TCP connection survives) and a long one (15 s: the link is torn down and redialled).
Every filed send is counted in bob's inbox: each exactly once.

Needs root, ``ip``, ``unshare`` and sshd; otherwise the result says why it was not run.
Usage: ``python -m bench.heal [--quick]``; writes ``bench/results/heal.json``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time

from bench import common

POLL_S = 0.2
OUTAGE_BOUND_S = 60.0
TARGET_S = 5.0  # "within a few seconds, not 30" (issue 20): the headline's bound on the median outage


def _not_run(why: str) -> dict[str, object]:
    return {"workload": "heal", "not_run": why, "machine": common.machine(tempfile.gettempdir())}


def run(rounds: int, restarts: int, cuts: tuple[float, ...], cut_rounds: int) -> dict[str, object]:
    sys.path.insert(0, common.ROOT)
    try:
        from tests.multihost.netns import Net, unavailable
        from tests.multihost.test_cross_box import World
    except ImportError as e:
        return _not_run(f"tests/multihost cannot be imported: {e}")
    why = unavailable()
    if why:
        return _not_run(why)
    base = tempfile.mkdtemp(prefix="sotd-hl-", dir="/tmp")  # short: AF_UNIX paths are bounded
    try:
        with Net(["boxa", "boxb"], base) as net:
            facts = common.machine(net.boxes["boxa"].comm_home)
            w = World(net)
            try:
                return _measure(w, facts, base, rounds, restarts, cuts, cut_rounds)
            finally:
                for box in list(w.daemons):
                    w.stop(box)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _measure(
    w: object,
    facts: dict[str, object],
    base: str,
    rounds: int,
    restarts: int,
    cuts: tuple[float, ...],
    n: int,
) -> dict[str, object]:
    from tests.multihost.test_cross_box import World

    assert isinstance(w, World)
    net = w.net
    w.start("boxa")
    w.start("boxb")
    w.wait_link("boxb")
    for box, name in (("boxa", "hank"), ("boxb", "bob"), ("boxb", "bea")):
        if w.comm(box, name, "join", "--name", name).code != 0:
            raise RuntimeError(f"join {name} on {box} failed")

    def timed(box: str, who: str, to: str, text: str, **env: str) -> tuple[float, bool]:
        e, cwd = w.session_env(box, who)
        e.update(env)
        t0 = time.perf_counter()
        r = net.run(box, [common.SOTD, "comm", "send", f"@{to}", text], env=e, cwd=cwd, timeout=30)
        return time.perf_counter() - t0, r.returncode == 0

    cases: dict[str, list[float]] = {
        k: [] for k in ("local", "guest_to_hub_warm", "guest_to_hub_cold", "hub_to_guest")
    }
    for i in range(rounds):
        cold = tempfile.mkdtemp(prefix="c", dir=base)
        for key, args in (
            ("local", ("boxb", "bob", "bea", f"l{i}")),
            ("guest_to_hub_warm", ("boxb", "bob", "hank", f"w{i}")),
            ("guest_to_hub_cold", ("boxb", "bob", "hank", f"c{i}")),
            ("hub_to_guest", ("boxa", "hank", "bob", f"h{i}")),
        ):
            extra = {"XDG_RUNTIME_DIR": cold} if key == "guest_to_hub_cold" else {}
            took, ok = timed(*args, **extra)
            if not ok:
                raise RuntimeError(f"{key} send {i} failed")
            cases[key].append(took)

    def outage(tag: str) -> float:
        """From now to the first hank -> bob send filed."""
        t0 = time.monotonic()
        k = 0
        while time.monotonic() - t0 < OUTAGE_BOUND_S:
            k += 1
            _took, ok = timed("boxa", "hank", "bob", f"{tag}-{k}")
            if ok:
                return time.monotonic() - t0
            time.sleep(POLL_S)
        raise RuntimeError(f"{tag}: hub -> guest mail still failed after {OUTAGE_BOUND_S:g}s")

    restart_s: list[float] = []
    for i in range(restarts):
        w.stop("boxa")
        w.start("boxa")  # returns once the new hub answers
        restart_s.append(outage(f"r{i}"))
    heal_s: dict[str, list[float]] = {}
    for cut in cuts:
        heal_s[f"{cut:g} s cut"] = []
        for i in range(n):
            net.link("boxb", up=False)
            time.sleep(cut)
            net.link("boxb", up=True)
            heal_s[f"{cut:g} s cut"].append(outage(f"p{cut:g}-{i}"))
            time.sleep(2.0)
    bob = [json.loads(x)["msg"] for x in w.comms["boxb"].inbox_bytes("bob").splitlines()]
    filed_once = all(bob.count(m) == 1 for m in bob)
    facts["load_avg_end"] = common.load_avg()
    return {
        "workload": "heal",
        "machine": facts,
        "params": {
            "rounds": rounds,
            "restarts": restarts,
            "cuts_s": list(cuts),
            "cut_rounds": n,
            "target_s": TARGET_S,
        },
        "send_ms": {k: common.summary(v, 1000) for k, v in cases.items()},
        "outage_after_hub_restart_s": common.summary(restart_s),
        "outage_after_heal_s": {k: common.summary(v) for k, v in heal_s.items()},
        "filed_exactly_once": filed_once,
        "pass": filed_once,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)
    restarts, cuts, n = 3, (3.0, 15.0), 2
    if a.quick:
        a.rounds, restarts, n = 3, 1, 1
    try:
        result = run(a.rounds, restarts, cuts, n)
    except (RuntimeError, OSError, subprocess.SubprocessError, AssertionError) as e:
        result = _not_run(f"the two-box set-up failed: {e}")
    return common.finish("heal", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
