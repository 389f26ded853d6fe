"""One hub with many linked guests (issue 27 part 8): ``comm.file`` routed per second, added latency, RSS.

The hub is a **real daemon** (``sotd daemon run``, its own process, its own comm folder and hosts.toml);
the guests are **in-process links** in this process: N Unix-socket connections that each say the link
hello (role ``link``, host ``g<i>``) and answer the hub's offers as a guest daemon would (``ok`` for its
own handle ``h<i>``, ``not_here`` for any other), with no disk work on the guest side, so what is
measured is the hub's routing. C client connections (role ``cli``) send ``comm.file`` for handles spread
over 20 of the guests' handles (each first offered to every link, then known), each waiting for its
answer before the next (a closed loop), for a fixed time.

Per N in {10, 100, 1000}: routed/s (answers ``ok``), p50/p99 of a routed send's round trip, the same for
a floor taken on the same connections in the same run (``version.query``: the hub's cost of one request
with no routing), the difference as "added by routing", and the hub's RSS before the links, with them,
and after the load. The first offer of a handle goes to every linked box; after that the hub offers it
to the box that filed it last (``hub.offer_order``), so the steady state is one frame per send.

Usage: ``python -m bench.hubscale [--quick] [--no-write]``; writes ``bench/results/hubscale.json``.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import common
from sotd.daemon.links import PING_S
from sotd.wire import framing, payloads
from sotd.wire import hello as wire_hello
from sotd.wire.framing import Envelope

CLIENTS = 16
TARGETS = 20  # handles the load is spread over (each on its own guest): each is offered to all N once


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def cpu_s(pid: int) -> float:
    """The process's user + system CPU time (``/proc/<pid>/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Peer:
    """One connection to the hub: requests out, answers matched by id; offers answered by ``serve``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = framing.Decoder()
        self.next_id = 1
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.pings = 0

    @classmethod
    async def open(cls, sock: str, hello: dict[str, Any]) -> Peer:
        r, w = await asyncio.open_unix_connection(sock, limit=1 << 21)
        p = cls(r, w)
        w.write(framing.encode(Envelope(0, "req", wire_hello.HELLO_OP, hello)))
        await w.drain()
        while True:
            for env in p.decoder.feed(await r.read(65536)):
                if env.id == 0 and env.kind == "res":
                    if env.payload.get("error"):
                        raise RuntimeError(f"hello refused: {env.payload}")
                    return p

    async def call(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        i = self.next_id
        self.next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[i] = fut
        self.writer.write(framing.encode(Envelope(i, "req", op, payload)))
        return await fut

    async def keepalive(self, phase: float) -> None:
        """As a real guest's link does (``links.Uplink._keepalive``): a ``version.query`` every ``PING_S``."""
        await asyncio.sleep(phase)
        while True:
            await self.call(payloads.VERSION_QUERY, payloads.version_query_payload())
            self.pings += 1
            await asyncio.sleep(PING_S)

    async def pump(self, own: str | None) -> None:
        """Read until the end: answers resolve ``call``s; a ``comm.file`` offer is answered at once."""
        while True:
            data = await self.reader.read(65536)
            if not data:
                for fut in self.waiting.values():  # the hub closed us: a call waiting for an answer fails
                    if not fut.done():
                        fut.set_exception(ConnectionError("the hub closed the connection"))
                return
            for env in self.decoder.feed(data):
                if env.kind == "res":
                    fut = self.waiting.pop(env.id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(env.payload)
                elif env.kind == "req":
                    if env.op == payloads.COMM_FILE and env.payload.get("to") == own:
                        answer: dict[str, Any] = {"ok": True}
                    else:
                        answer = {
                            "error": f"no box knows that handle: {env.payload.get('to')}",
                            "code": "not_here",
                        }
                    self.writer.write(framing.encode(Envelope(env.id, "res", env.op, answer)))


def start_hub(work: str, n_guests: int, profile: str = "") -> tuple[subprocess.Popen[bytes], str]:
    lay = common.make_comm(work)
    sock = os.path.join(work, "hub.sock")
    hosts = os.path.join(work, "hosts.toml")
    with open(hosts, "w") as f:  # a fleet's file lists every box (the hub names a missing one's link)
        f.write('hub = "hub"\n\n[boxes.hub]\n')
        f.writelines(f'\n[boxes.g{i}]\nssh = "g{i}"\n' for i in range(n_guests))
    env = common.clean_env()
    env.update(
        SOT_COMM_HOME=lay.home,
        SOT_SOCKET=sock,
        SOT_SELF_HOST="hub",
        SOT_HOSTS_TOML=hosts,
    )
    # ``--profile``: the hub under cProfile (its event loop's thread; the worker threads are not seen)
    wrap = ["-m", "cProfile", "-o", profile] if profile else []
    proc = subprocess.Popen(
        [common.PYTHON, *wrap, "-m", "sotd.cli.main", "daemon", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(work, "hub.log"), "wb"),  # noqa: SIM115 - the child holds it
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the hub did not start; see {work}/hub.log")
        time.sleep(0.05)
    return proc, sock


def hello(role: str, host: str, i: int) -> dict[str, Any]:
    return wire_hello.hello_payload(
        host=host,
        os_user=wire_hello.os_user_for_uid(os.geteuid()),
        role=role,
        name=f"bench-{role}-{i}",
        client_id=f"bench-{role}-{i}-{os.getpid()}",
    )


async def load(
    clients: list[Peer], targets: list[int], seconds: float, op: str
) -> tuple[int, int, list[float]]:
    """Each client in a closed loop for ``seconds``: (ok answers, other answers, latencies in s)."""
    lat: list[float] = []
    counts = [0, 0]
    end = time.monotonic() + seconds
    rng = random.Random(7)

    async def one(c: Peer) -> None:
        while time.monotonic() < end:
            if op == payloads.COMM_FILE:
                to = f"h{rng.choice(targets)}"
                payload = payloads.comm_file_payload("sender", to, "x" * 200, broadcast=False, expires=None)
            else:  # the floor: ``agent.send`` naming no handle (a window notification: answered ok, no I/O)
                payload = {}
            t0 = time.perf_counter()
            answer = await c.call(op, payload)
            lat.append(time.perf_counter() - t0)
            counts[0 if answer.get("ok") else 1] += 1

    await asyncio.gather(*(one(c) for c in clients))
    return counts[0], counts[1], lat


async def run_n(n_guests: int, seconds: float, profile: str = "", n_clients: int = CLIENTS) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="sotd-hubscale-", dir=common.bench_dir())
    proc, sock = start_hub(work, n_guests, f"{profile}.{n_guests}" if profile else "")
    pumps: list[asyncio.Task[None]] = []
    try:
        rss0 = rss_kib(proc.pid)
        guests = []
        for i in range(n_guests):
            g = await Peer.open(sock, hello("link", f"g{i}", i))
            guests.append(g)
            pumps.append(asyncio.create_task(g.pump(f"h{i}")))
            pumps.append(asyncio.create_task(g.keepalive(random.Random(i).uniform(0, PING_S))))
        rss_linked = rss_kib(proc.pid)
        warm = await Peer.open(sock, hello("cli", "bench-warm", 0))
        pumps.append(asyncio.create_task(warm.pump(None)))
        # warm: each target handle once, so the hub knows its box; the first offer of a handle goes to
        # every linked box, and its time is the cost of an unknown handle at this N
        targets = sorted(
            {round(k * n_guests / min(TARGETS, n_guests)) for k in range(min(TARGETS, n_guests))}
        )
        first: list[float] = []
        for i in targets:
            t0 = time.perf_counter()
            await warm.call(
                payloads.COMM_FILE,
                payloads.comm_file_payload("sender", f"h{i}", "warm", broadcast=False, expires=None),
            )
            first.append(time.perf_counter() - t0)
        clients = []  # opened after the warm-up: a client silent for 60 s after its hello is closed
        for i in range(n_clients):
            c = await Peer.open(sock, hello("cli", "bench", i))
            clients.append(c)
            pumps.append(asyncio.create_task(c.pump(None)))
        rounds = []
        routed_cpu = floor_cpu = bench_cpu = 0.0
        floor_n = 0
        for _ in range(2):  # interleaved: floor, routed, floor, routed
            c0 = cpu_s(proc.pid)
            f_ok, _f_bad, f_lat = await load(clients, targets, seconds / 2, payloads.AGENT_SEND)
            floor_cpu += cpu_s(proc.pid) - c0
            floor_n += f_ok
            c0, b0 = cpu_s(proc.pid), cpu_s(os.getpid())
            r_ok, r_bad, r_lat = await load(clients, targets, seconds, payloads.COMM_FILE)
            routed_cpu += cpu_s(proc.pid) - c0
            bench_cpu += cpu_s(os.getpid()) - b0
            rounds.append((f_ok, f_lat, r_ok, r_bad, r_lat))
        f_lat = [x for r in rounds for x in r[1]]
        r_lat = [x for r in rounds for x in r[4]]
        routed = sum(r[2] for r in rounds)
        failed = sum(r[3] for r in rounds)
        rss_after = rss_kib(proc.pid)
        p50, p99 = common.pct(r_lat, 50), common.pct(r_lat, 99)
        fp50, fp99 = common.pct(f_lat, 50), common.pct(f_lat, 99)
        return {
            "guests": n_guests,
            "clients": n_clients,
            "routed": routed,
            "failed": failed,
            "routed_per_s": round(routed / (2 * seconds), 1),
            "hub_cpu_ms_per_routed": round(routed_cpu / max(routed, 1) * 1e3, 3),
            "hub_cpu_ms_per_floor": round(floor_cpu / max(floor_n, 1) * 1e3, 3),
            "bench_cpu_ms_per_routed": round(bench_cpu / max(routed, 1) * 1e3, 3),
            "floor_per_s": round(sum(r[0] for r in rounds) / seconds, 1),
            "routed_ms": {"p50": round(p50 * 1e3, 2), "p99": round(p99 * 1e3, 2)},
            "floor_ms": {"p50": round(fp50 * 1e3, 2), "p99": round(fp99 * 1e3, 2)},
            "added_ms": {"p50": round((p50 - fp50) * 1e3, 2), "p99": round((p99 - fp99) * 1e3, 2)},
            "rss_kib": {"start": rss0, "linked": rss_linked, "after": rss_after},
            "rss_per_link_kib": round((rss_linked - rss0) / max(n_guests, 1), 1),
            "targets": len(targets),
            "keepalives_answered": sum(g.pings for g in guests),
            "first_offer_ms": {
                "p50": round(common.pct(first, 50) * 1e3, 1),
                "max": round(max(first) * 1e3, 1),
            },
        }
    finally:
        for t in pumps:
            t.cancel()
        common.stop_proc(proc)
        shutil.rmtree(work, ignore_errors=True)


def registry_cost(sizes: tuple[int, ...] = (0, 100, 1000), n: int = 1000) -> dict[str, float]:
    """The hub's own steps of one routed send (``Ops._local_steps``: route, the fresh registry read, the
    verdict ``not_here``), in this process, with ``k`` handles of its own in its registry: the rule that
    every filing reads the registry afresh makes its size a cost of every send the hub routes. Median of
    5 rounds of ``n`` calls each, interleaved over the sizes; microseconds per send."""
    from sotd.daemon import ops
    from sotd.formats import registry

    made = []
    for k in sizes:
        work = tempfile.mkdtemp(prefix="sotd-hubscale-reg-", dir=common.bench_dir())
        lay = common.make_comm(work)
        registry.ensure(lay)
        doc = registry.read(lay) or {}
        for i in range(k):
            entry = {
                "root": f"/work/p{i}",
                "host": "hub",
                "repo": f"p{i}",
                "last_seen": "2026-12-02T06:00:00Z",
            }
            registry.put(doc, f"local{i}", entry)
        registry.write_locked(lay, doc)
        environ = {"SOT_COMM_HOME": lay.home}
        o = ops.Ops(
            layout=lay,
            environ=environ,
            self_host="hub",
            is_hub=True,
            forward=None,  # type: ignore[arg-type]  # not reached: the hub files or refuses
            offer=None,  # type: ignore[arg-type]
            version_info=dict,
        )
        made.append((k, work, o))
    p = payloads.comm_file_payload("sender", "h1", "x" * 200, broadcast=False, expires=None)
    times: dict[int, list[float]] = {k: [] for k in sizes}
    try:
        for _ in range(5):
            for k, _work, o in made:
                t0 = time.perf_counter()
                for _ in range(n):
                    answer, _req = o._local_steps(p, "client")
                times[k].append((time.perf_counter() - t0) / n * 1e6)
                assert answer is not None and answer.get("code") == "not_here", answer
    finally:
        for _k, work, _o in made:
            shutil.rmtree(work, ignore_errors=True)
    return {str(k): round(sorted(v)[len(v) // 2], 1) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__ or "")
    ap.add_argument("--seconds", type=float, default=0.0, help="per routed round (default 4, quick 1.5)")
    ap.add_argument("--sizes", default="", help="guest counts, comma-separated (default 10,100,1000)")
    ap.add_argument("--clients", type=int, default=CLIENTS, help=f"closed-loop senders (default {CLIENTS})")
    ap.add_argument("--profile", default="", help="write the hub's cProfile to PATH.<guests> (not timed)")
    args = ap.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # 1,000 links + the hub's own
    seconds = args.seconds or (1.5 if args.quick else 4.0)
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    machine = common.machine(tempfile.gettempdir())  # the load average before the runs
    runs = [asyncio.run(run_n(n, seconds, args.profile, args.clients)) for n in sizes]
    machine["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    for r in runs:
        print(
            f"{r['guests']:5d} guests: {r['routed_per_s']:8.1f} routed/s, p50 {r['routed_ms']['p50']} ms, "
            f"p99 {r['routed_ms']['p99']} ms (added p99 {r['added_ms']['p99']} ms), "
            f"RSS {r['rss_kib']['linked']} KiB, hub CPU {r['hub_cpu_ms_per_routed']} ms/routed "
            f"({r['hub_cpu_ms_per_floor']} per floor op), bench CPU {r['bench_cpu_ms_per_routed']} ms/routed",
            file=sys.stderr,
        )
    reg = registry_cost()
    print(f"hub's own steps per routed send by local handles: {reg} us", file=sys.stderr)
    result = {
        "bench": "hubscale",
        "local_steps_us_by_registry_size": reg,
        "what": "a real hub daemon; N in-process guest links over Unix sockets; 16 closed-loop clients",
        "machine": machine,
        "runs": runs,
    }
    return common.finish("hubscale", result, args.no_write, args.quick)


if __name__ == "__main__":
    sys.exit(main())
