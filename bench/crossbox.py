"""Cross-box (issue 6, W3): ``sotd comm send`` from a guest box to a handle on the hub.

Two boxes in network namespaces with their own sshd (``tests/multihost/netns.py``, testing notes 2.8):
``boxa`` the hub (session ``hank``), ``boxb`` a guest (sessions ``bob`` and ``bea``), each with its own comm
folder and ``sotd daemon run`` (boxb's daemon holds its link to the hub, as a deployed guest's does).
The timed cross-box send is ``sotd comm send @hank`` run by bob on boxb. boxb's folder does not list hank,
so the send takes the relay route of behaviour 1.4: the CLI itself dials the relay endpoint that
``hosts.toml`` names (``ssh:boxa/boxa``), i.e. ``ssh`` through this phase's ControlMaster into boxa, where
``sotd stdio-bridge`` hands the one ``comm.file`` frame to the hub's daemon, which appends to hank's inbox
and answers back the same way. boxb's daemon and its link are not on this route.

Phases: no added delay, then 10 ms each way: the CLI's ssh config (``SOT_SSH_CONFIG``) has a
``ProxyCommand`` running ``tests/multihost/delay_relay.py``, which holds every chunk 10 ms in each
direction (this kernel has no netem). Each phase has a fresh ControlPath folder (``XDG_RUNTIME_DIR``), so
its ssh master is dialled through that phase's config; a shared folder would reuse the undelayed master of
the first phase. Each phase records the delaying relay processes it found running in boxb and how much
the cross-box send grew over the undelayed phase (cross minus local, medians): a delayed phase passes
only when the relay was on the route and the send grew by at least one round trip (2 x delay).

Every round runs, in rotated order and through the same ``ip netns exec ... unshare`` wrapper: the floor
(``python -c "import json, socket, fcntl, os"`` in boxb), a local send on boxb (``@bea``, no daemon
involved) and the cross-box send. Each cross send must be in hank's inbox exactly once.

Needs root, ``ip``, ``unshare`` and sshd; otherwise the result says why it was not run.
Usage: ``python -m bench.crossbox [--quick]``; writes ``bench/results/crossbox.json``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench import common

TOPOLOGY = 'hub = "boxa"\n\n[boxes.boxa]\nssh = "boxa"\n\n[boxes.boxb]\nssh = "boxb"\n'
LINK_UP = "link to the hub at ssh:boxa/boxa is up"


def _not_run(why: str) -> dict[str, object]:
    return {"workload": "crossbox", "not_run": why, "machine": common.machine(tempfile.gettempdir())}


def run(rounds: int, delays: tuple[int, ...]) -> dict[str, object]:
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
    base = tempfile.mkdtemp(prefix="sotd-bx-", dir="/tmp")  # short: AF_UNIX paths are bounded
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    phases: dict[str, dict[str, object]] = {}
    try:
        with Net(["boxa", "boxb"], base) as net:
            facts = common.machine(net.boxes["boxa"].comm_home)
            for box in net.boxes.values():
                ensure_home(Layout(box.comm_home))
                with open(os.path.join(box.comm_home, "hosts.toml"), "w") as f:
                    f.write(TOPOLOGY)

            def log(box: str) -> str:
                return os.path.join(net.boxes[box].dir, "daemon.log")

            def start(box: str, **env: str) -> None:
                with open(log(box), "ab") as lf:
                    daemons[box] = net.popen(
                        box,
                        [common.SOTD, "daemon", "run"],
                        env=net.env(box, **env),
                        stdin=subprocess.DEVNULL,
                        stdout=lf,
                        stderr=lf,
                    )
                deadline = time.monotonic() + 20
                while net.run(box, [common.SOTD, "daemon", "status"]).returncode != 0:
                    if time.monotonic() > deadline or daemons[box].poll() is not None:
                        raise RuntimeError(f"the daemon on {box} did not start")
                    time.sleep(0.1)

            def stop(box: str) -> None:
                common.stop_proc(daemons.pop(box))

            def wait_link(count: int) -> None:
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline:
                    with open(log("boxb")) as f:
                        if f.read().count(LINK_UP) >= count:
                            return
                    time.sleep(0.1)
                raise RuntimeError("boxb holds no link to the hub")

            sess: dict[str, tuple[dict[str, str], str]] = {}
            for box, name in (("boxa", "hank"), ("boxb", "bob"), ("boxb", "bea")):
                root = os.path.realpath(os.path.join(net.boxes[box].dir, "p", name))
                os.makedirs(root, exist_ok=True)
                env = net.env(box)
                env.update(
                    SOT_COMM_SELF_FILE=os.path.join(net.boxes[box].comm_home, "self", f"{name}-session.txt"),
                    PWD=root,
                    PYTHONPYCACHEPREFIX=os.path.join(base, "pycache"),
                )
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                sess[name] = (env, root)
                r = net.run(box, [common.SOTD, "comm", "join", "--name", name], env=env, cwd=root)
                if r.returncode != 0:
                    raise RuntimeError(f"join {name} on {box}: {r.stdout} {r.stderr}")
            start("boxa")
            start("boxb")
            wait_link(1)
            env_b, root_b = sess["bob"]
            for delay in delays:
                # a fresh ControlPath folder: this phase's ssh master is dialled through this phase's config
                control = tempfile.mkdtemp(prefix="c", dir=base)
                config = net.proxy_config(delay) if delay else net.ssh_config
                env = dict(env_b, SOT_SSH_CONFIG=config, XDG_RUNTIME_DIR=control)
                cases = {
                    "floor": net.in_box("boxb", [common.PYTHON, "-c", common.FLOOR_CODE]),
                    "local send": net.in_box("boxb", [common.SOTD, "comm", "send", "@bea", "local"]),
                    "cross-box send": net.in_box("boxb", [common.SOTD, "comm", "send", "@hank", f"x{delay}"]),
                }
                cases = {k: [ip, *v[1:]] for k, v in cases.items()}
                for argv in cases.values():  # warm-up, untimed (the cross send starts this phase's master)
                    common.spawn_timed(argv, env, root_b)
                relays = _relays(net.pids("boxb"), delay)
                hank = os.path.join(net.boxes["boxa"].comm_home, "inbox", "hank.jsonl")
                before = _lines(hank, f"x{delay}")
                wall: dict[str, list[float]] = {k: [] for k in cases}
                names = list(cases)
                for r in range(rounds):
                    k = r % len(names)
                    for name in names[k:] + names[:k]:
                        wall[name].append(common.spawn_timed(cases[name], env, root_b)[0])
                got = _lines(hank, f"x{delay}") - before
                cross_minus_local = (
                    common.summary(wall["cross-box send"])["median"]
                    - common.summary(wall["local send"])["median"]
                ) * 1000
                phases[f"{delay} ms"] = {
                    "delay_ms_each_way": delay,
                    "route": "CLI -> ssh (ControlMaster, fresh folder)"
                    + (f" -> delay_relay.py {delay} ms each way" if delay else "")
                    + " -> boxa sshd -> sotd stdio-bridge -> hub daemon",
                    "delaying_relays_seen": relays,
                    "cases": {k: common.summary(v, 1000) for k, v in wall.items()},
                    "ratio_cross_to_floor": common.ratio(wall["cross-box send"], wall["floor"]),
                    "ratio_cross_to_local": common.ratio(wall["cross-box send"], wall["local send"]),
                    "cross_minus_local_ms": cross_minus_local,
                    "delivered": got,
                    "sent": rounds,
                    "pass": got == rounds,
                }
            _observe_delay(phases)
            for box in list(daemons):
                stop(box)
    finally:
        for p in daemons.values():
            p.kill()
        shutil.rmtree(base, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    return {"workload": "crossbox", "machine": facts, "params": {"rounds": rounds}, "phases": phases}


def _relays(pids: list[int], delay: int) -> int:
    """How many ``delay_relay.py … <delay>`` processes run among ``pids`` (the ProxyCommand of a master)."""
    if not delay:
        return 0
    n = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().rstrip(b"\0").split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"delay_relay.py") for a in argv) and argv[-1] == str(delay).encode():
            n += 1
    return n


def _observe_delay(phases: dict[str, dict[str, object]]) -> None:
    """For each delayed phase: how much the cross-box send grew over the undelayed phase (cross minus local,
    medians, so load common to both cancels), the least a crossing of the relay adds (one round trip,
    2 x delay), and whether both that and a running relay were seen. Printed on stderr and kept."""
    base = phases.get("0 ms")
    for name, ph in phases.items():
        delay = ph["delay_ms_each_way"]
        assert isinstance(delay, int)
        if not delay or base is None:
            continue
        added = float(ph["cross_minus_local_ms"]) - float(base["cross_minus_local_ms"])  # type: ignore[arg-type]
        least = 2 * delay
        seen = bool(ph["delaying_relays_seen"]) and added >= least
        ph["observed_added_ms"] = added
        ph["least_added_ms"] = least
        ph["delay_seen"] = seen
        ph["pass"] = bool(ph["pass"]) and seen
        print(
            f"crossbox: {name} each way: the cross-box send took {added:.0f} ms more than with no delay "
            f"(at least {least} ms expected); delaying relays running: {ph['delaying_relays_seen']}"
            f"{'' if seen else ' -- THE DELAY WAS NOT SEEN'}",
            file=sys.stderr,
        )


def _lines(path: str, tag: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(f'"msg":"{tag}"'.encode())
    except FileNotFoundError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=25)
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds = 5
    try:
        result = run(a.rounds, (0, 10))
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        result = _not_run(f"the two-box set-up failed: {e}")
    return common.finish("crossbox", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
