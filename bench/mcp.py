"""``sotd mcp`` (issue 26 item 6): one idle server's start and memory, and a tool call's round trip.

In one run, on the same private comm folder and two joined sessions as ``bench/commands.py``:

- **start to ``initialize`` answered**: the wall time from spawning ``sotd mcp`` to reading its answer to
  an ``initialize`` written at once, against ``python -c pass`` started the same way (rounds alternate);
  target 150 ms.
- **RSS of one idle server** (``VmRSS`` and ``VmHWM`` of ``/proc/<pid>/status`` after initialize and
  tools/list, and again after one call of every tool); target 30 MB.
- **round trips through one running server**: ``send`` (filed), ``poll`` with 0 new, ``poll`` with 1 new
  (a send from the other session before each, untimed), each request written and its answer read; the
  same verbs as one-shot wrappers (``comm-send.sh``, ``comm-poll.sh``) beside them. Target: send through
  the tool at most 3 ms median, 10 ms p99.

Usage: ``python -m bench.mcp [--rounds N] [--quick] [--no-write]``; writes ``bench/results/mcp.json``. A
benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time

from bench import common
from bench.commands import PYTHON, SOTD, Bench


def _init(rid: int) -> bytes:
    msg = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    return json.dumps(msg).encode() + b"\n"


def _call(rid: int, tool: str, args: dict[str, object]) -> bytes:
    msg = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    return json.dumps(msg).encode() + b"\n"


class Server:
    """One running ``sotd mcp`` as ``who``: write a line, read its answer line."""

    def __init__(self, b: Bench, who: str) -> None:
        self.p = subprocess.Popen(
            [SOTD, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=b.cwd[who], env=b.env[who]
        )
        self.rid = 0

    def ask(self, line: bytes) -> dict[str, object]:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(line)
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def call(self, tool: str, args: dict[str, object]) -> tuple[str, float]:
        self.rid += 1
        t0 = time.perf_counter()
        answer = self.ask(_call(self.rid, tool, args))
        dt = time.perf_counter() - t0
        result = answer["result"]
        assert isinstance(result, dict)
        return result["content"][0]["text"], dt  # type: ignore[index,no-any-return]

    def rss_kib(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
        return out

    def close(self) -> None:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.close()
        self.p.wait(timeout=10)
        self.p.stdout.close()


def start_to_initialize(b: Bench, rounds: int) -> dict[str, object]:
    mcp: list[float] = []
    floor: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([PYTHON, "-c", "pass"], env=b.env["alpha"], check=True)
        floor.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        s = Server(b, "alpha")
        s.ask(_init(0))
        mcp.append(time.perf_counter() - t0)
        s.close()
    return {
        "start_to_initialize_ms": common.summary(mcp, 1000.0),
        "python_c_pass_ms": common.summary(floor, 1000.0),
        "ratio_median": round(sorted(mcp)[len(mcp) // 2] / sorted(floor)[len(floor) // 2], 2),
        "target_ms": 150,
    }


def round_trips(b: Bench, rounds: int) -> dict[str, object]:
    beta = b.handle["beta"]
    sa, sb = Server(b, "alpha"), Server(b, "beta")
    sa.ask(_init(0))
    sb.ask(_init(0))
    send: list[float] = []
    poll0: list[float] = []
    poll1: list[float] = []
    wrap_send: list[float] = []
    wrap_poll0: list[float] = []
    for i in range(rounds):
        text, dt = sa.call("send", {"to": beta, "text": f"bench message {i}"})
        assert "filed -> @" in text, text
        send.append(dt)
        text, dt = sb.call("poll", {})
        assert "bench message" in text, text
        poll1.append(dt)
        text, dt = sb.call("poll", {})
        assert text == "No new messages.", text
        poll0.append(dt)
        t0 = time.perf_counter()
        b.check("alpha", [f"{b.bin}/comm-send.sh", f"@{beta}", "bench message"], f"filed -> @{beta}")
        wrap_send.append(time.perf_counter() - t0)
        b.check("beta", [SOTD, "comm", "poll"], "bench message")
        t0 = time.perf_counter()
        b.check("beta", [f"{b.bin}/comm-poll.sh"], "No new")
        wrap_poll0.append(time.perf_counter() - t0)
    for tool, args in (("join", {}), ("unread", {}), ("list", {}), ("status", {"state": "working"})):
        sa.call(tool, args)
    rss = {"alpha_after_every_tool_kib": sa.rss_kib(), "beta_kib": sb.rss_kib()}
    sa.close()
    sb.close()
    return {
        "send_ms": common.summary(send, 1000.0),
        "poll_0_new_ms": common.summary(poll0, 1000.0),
        "poll_1_new_ms": common.summary(poll1, 1000.0),
        "comm_send_sh_ms": common.summary(wrap_send, 1000.0),
        "comm_poll_sh_0_new_ms": common.summary(wrap_poll0, 1000.0),
        "rss": rss,
        "target_send_ms": {"median": 3, "p99": 10},
    }


def idle_rss(b: Bench) -> dict[str, int]:
    s = Server(b, "alpha")
    s.ask(_init(0))
    s.ask(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode() + b"\n")
    out = s.rss_kib()
    s.close()
    return out


def main() -> int:
    ap = common.base_parser(__doc__ or "")
    ap.add_argument("--rounds", type=int, default=200)
    a = ap.parse_args()
    rounds = 20 if a.quick else a.rounds
    with tempfile.TemporaryDirectory(prefix="sotd-bench-mcp-") as work:
        b = Bench(work)
        b.join_both()
        result: dict[str, object] = {
            "machine": common.machine(work),
            "rounds": rounds,
            "start": start_to_initialize(b, max(10, rounds // 4)),
            "idle_rss_kib": idle_rss(b),
            "round_trips": round_trips(b, rounds),
        }
    return common.finish("mcp", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
