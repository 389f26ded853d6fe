"""``sotd mcp`` (issue 26 item 6): one idle server's start and memory, and a tool call's round trip.

In one run, on the same private comm folder and two joined sessions as ``bench/commands.py``:

- **start to ``initialize`` answered**: the wall time from spawning ``sotd mcp`` to reading its answer to
  an ``initialize`` written at once, against ``python -c pass`` started the same way (rounds alternate);
  target 150 ms.
- **RSS of one idle server** (``VmRSS`` and ``VmHWM`` of ``/proc/<pid>/status`` after initialize and
  tools/list, and again after one call of every tool); target 30 MB.
- **round trips through one running server**: ``send`` (filed), ``poll`` with 0 new, ``poll`` with 1 new
  (a send from the other session before each, untimed), each request written and its answer read; the
  same verbs as one-shot wrappers (``comm-send.sh``, ``comm-poll.sh``) beside them, and MCP Agent Mail's
  ``send_message`` through its running server from a kept-alive client, one each round (when its package
  is installed in its own venv, ``.venv-agent-mail``, as ``scripts/bench`` makes it; else the result says so). Target: send through the tool at most 3 ms
  median, 10 ms p99. The floor of a durable send, in the same rounds: one line ``os.write`` +
  ``os.fsync`` to a file in the same folder.

Usage: ``python -m bench.mcp [--rounds N] [--quick] [--no-write]``; writes ``bench/results/mcp.json``. A
benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import common, peers_mcp
from bench.commands import PYTHON, SOTD, Bench

# agmsg, the other peer the issue names, is not installable here: the package of that name on PyPI
# (1.0.5, 2018, "Agges message package") is something else, and the npm registry has none.
AGMSG = (
    "not installable here: PyPI's 'agmsg' (1.0.5, 2018) is an unrelated package and the npm registry has "
    "no agmsg"
)


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


class AgentMailClient:
    """A running client of MCP Agent Mail's server: one kept-alive HTTP connection, one JSON-RPC
    ``tools/call`` per request (its streamable-HTTP endpoint answers in JSON), as an agent's MCP client
    that holds its session open would; ``send`` is its ``send_message`` from BlueLake to GreenCastle."""

    def __init__(self, am: dict[str, object]) -> None:
        import http.client
        import urllib.parse

        u = urllib.parse.urlsplit(str(am["url"]))
        self.path = u.path
        self.conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=60)
        self.send_args = dict(am["send_args"])  # type: ignore[call-overload]
        self.rid = 0

    def call(self, tool: str, args: dict[str, object]) -> float:
        self.rid += 1
        body = _call(self.rid, tool, args)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        t0 = time.perf_counter()
        self.conn.request("POST", self.path, body, headers)
        data = self.conn.getresponse().read()
        dt = time.perf_counter() - t0
        res = json.loads(data).get("result")
        if not isinstance(res, dict) or res.get("isError"):
            raise RuntimeError(f"Agent Mail {tool}: {data[:300]!r}")
        return dt

    def send(self, text: str) -> float:
        return self.call("send_message", self.send_args | {"body_md": text})

    def close(self) -> None:
        self.conn.close()


def round_trips(b: Bench, rounds: int, peer: AgentMailClient | None = None) -> dict[str, object]:
    beta = b.handle["beta"]
    sa, sb = Server(b, "alpha"), Server(b, "beta")
    sa.ask(_init(0))
    sb.ask(_init(0))
    send: list[float] = []
    poll0: list[float] = []
    poll1: list[float] = []
    wrap_send: list[float] = []
    wrap_poll0: list[float] = []
    peer_send: list[float] = []
    if peer is not None:
        for i in range(3):  # warm-up, untimed
            peer.send(f"warm-up {i}")
    fsync_floor: list[float] = []
    floor_fd = os.open(os.path.join(b.work, "fsync-floor"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for i in range(rounds):
        t0 = time.perf_counter()  # the floor of a durable send: one line written and fsynced, same disk
        os.write(floor_fd, f"bench message {i}\n".encode())
        os.fsync(floor_fd)
        fsync_floor.append(time.perf_counter() - t0)
        if peer is not None:
            peer_send.append(peer.send(f"bench message {i}"))
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
    os.close(floor_fd)
    out: dict[str, object] = {
        "write_fsync_floor_ms": common.summary(fsync_floor, 1000.0),
        "send_ms": common.summary(send, 1000.0),
        "poll_0_new_ms": common.summary(poll0, 1000.0),
        "poll_1_new_ms": common.summary(poll1, 1000.0),
        "comm_send_sh_ms": common.summary(wrap_send, 1000.0),
        "comm_poll_sh_0_new_ms": common.summary(wrap_poll0, 1000.0),
        "rss": rss,
        "target_send_ms": {"median": 3, "p99": 10},
    }
    if peer is not None:
        out["agent_mail_send_message_ms"] = common.summary(peer_send, 1000.0)
    return out


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
    with tempfile.TemporaryDirectory(prefix="sotd-bench-mcp-") as work, contextlib.ExitStack() as stack:
        b = Bench(work)
        b.join_both()
        result: dict[str, object] = {
            "machine": common.machine(work),
            "rounds": rounds,
            "start": start_to_initialize(b, max(10, rounds // 4)),
            "idle_rss_kib": idle_rss(b),
        }
        peer: AgentMailClient | None = None
        try:
            result["agent_mail"] = {"peer": f"mcp-agent-mail {peers_mcp.installed()}"}
            os.makedirs(os.path.join(work, "am"))
            am = stack.enter_context(peers_mcp.agent_mail(os.path.join(work, "am")))
            peer = AgentMailClient(am)
            stack.callback(peer.close)
            result["agent_mail"] = {
                "peer": result["agent_mail"]["peer"],  # type: ignore[index]
                "server": "python -m mcp_agent_mail.cli serve-http on 127.0.0.1 (streamable HTTP, JSON answers)",
                "client": "this process: one kept-alive http.client connection, a JSON-RPC tools/call each",
                "server_up_s": am["server_up_s"],
            }
        except peers_mcp.NotRun as e:
            result["agent_mail"] = {"not_run": str(e)}
        result["agmsg"] = {"not_run": AGMSG}
        result["round_trips"] = round_trips(b, rounds, peer)
        result["machine"]["load_avg_end"] = common.load_avg()  # type: ignore[index]
    return common.finish("mcp", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
