"""Per-verb peer: MCP Agent Mail (``mcp-agent-mail`` 0.1.0 from PyPI) beside sotd, send and fetch (issue 17).

Its server (``python -m mcp_agent_mail.cli serve-http``) runs on 127.0.0.1 with its SQLite database and
its Git mailbox in a temp folder (``LITELLM_LOCAL_MODEL_COST_MAP=True``: its ``litellm`` dependency would
otherwise try to fetch a price list from the network at import). One project, two agents registered
through its own tools. Each timed call is a cold process, as an agent's tool call or sotd's CLI is: a
stdlib client (``urllib``, no MCP SDK: the least a client can do) that POSTs one JSON-RPC ``tools/call`` to
the streamable-HTTP endpoint, which answers in JSON without a session (stateless), and exits 1 unless the
answer is a result without ``isError``. Cases, rotated every round: the floor ``python -c pass``; sotd's
``comm send`` and ``comm poll``; Agent Mail's ``send_message`` and ``fetch_inbox`` (limit 20), and its
``health_check`` (the same client and round trip with almost no server work: the client's own floor).

Called by ``bench/peers.py`` (the same run); ``python -m bench.peers_mcp [--quick]`` runs it alone and
writes ``bench/results/peers_mcp.json``. Agent Mail runs from its own venv (``.venv-agent-mail``, which ``scripts/bench`` makes: it cannot share
``.venv``); when it is not installed there or its server does not come up, the result says why instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

from bench import common

CLIENT = r"""
import json, sys, urllib.request
url, tool, args = sys.argv[1], sys.argv[2], sys.argv[3]
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": tool, "arguments": json.loads(args)}}).encode()
req = urllib.request.Request(url, body, {"Content-Type": "application/json",
                                         "Accept": "application/json, text/event-stream"})
with urllib.request.urlopen(req, timeout=30) as r:
    out = json.loads(r.read())
sys.exit(0 if "result" in out and not out["result"].get("isError") else 1)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, tool: str, args: dict[str, object]) -> dict[str, object]:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    ).encode()
    req = urllib.request.Request(
        url, body, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.loads(r.read())
    res = out.get("result")
    if not isinstance(res, dict) or res.get("isError"):
        raise RuntimeError(f"{tool}: {str(out)[:300]}")
    return res


class NotRun(Exception):
    """Why the peer could not run here (the result says it instead of numbers)."""


# Its own environment: mcp-agent-mail 0.1.0 needs fastmcp 2, which needs mcp<2, and the project's dev
# tools pin mcp 2.3.0 (the SDK client the MCP tests use), so the two cannot share .venv (installing it
# there moved mcp back to 1.x and broke those tests; seen). scripts/bench makes this one.
VENV = os.path.join(common.ROOT, ".venv-agent-mail")


def python() -> str:
    """The interpreter that runs Agent Mail's server: ``$SOTD_AGENT_MAIL_PYTHON``, else its own venv's."""
    return os.environ.get("SOTD_AGENT_MAIL_PYTHON") or os.path.join(VENV, "bin", "python")


def installed() -> str:
    """The installed mcp-agent-mail's version (asked of ``python()``, by its metadata: importing it makes
    its litellm try the network); ``NotRun`` when it is not there."""
    py = python()
    probe = "from importlib.metadata import version; print(version('mcp-agent-mail'))"
    try:
        p = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        p = None
    if p is None or p.returncode != 0 or not p.stdout.strip():
        raise NotRun(
            f"mcp-agent-mail is not installed for {py} (scripts/bench makes {VENV} with it: it cannot share "
            ".venv, whose MCP SDK it would move back to 1.x)"
        )
    return p.stdout.strip()


@contextlib.contextmanager
def agent_mail(work: str) -> Iterator[dict[str, object]]:
    """Its server on 127.0.0.1 with its store in ``work``, one project and the agents BlueLake and
    GreenCastle registered through its own tools: ``url``, ``send_args`` (BlueLake to GreenCastle, add
    ``body_md``), ``fetch_args`` (GreenCastle's inbox) and ``server_up_s``. ``NotRun`` when it does not
    come up within 180 s. The server is stopped on leaving."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp/"
    env = common.clean_env()
    env.update(
        HTTP_HOST="127.0.0.1",
        HTTP_PORT=str(port),
        STORAGE_ROOT=os.path.join(work, "store"),
        DATABASE_URL=f"sqlite+aiosqlite:///{os.path.join(work, 'db.sqlite3')}",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LLM_ENABLED="false",
    )
    log = open(os.path.join(work, "server.log"), "wb")  # noqa: SIM115  (closed in finally)
    server = subprocess.Popen(
        [python(), "-m", "mcp_agent_mail.cli", "serve-http"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        t0 = time.monotonic()
        while True:
            try:
                _call(url, "health_check", {})
                break
            except OSError:
                if server.poll() is not None or time.monotonic() - t0 > 180:
                    log.flush()
                    with open(os.path.join(work, "server.log"), "rb") as f:
                        tail = f.read()[-600:].decode("utf-8", "replace")
                    raise NotRun(f"its server did not answer on {url} within 180 s: {tail}") from None
                time.sleep(0.5)
        server_up_s = time.monotonic() - t0
        proj = os.path.join(work, "proj")
        os.makedirs(proj)
        _call(url, "ensure_project", {"human_key": proj})
        for name in ("BlueLake", "GreenCastle"):
            _call(
                url,
                "register_agent",
                {"project_key": proj, "program": "bench", "model": "none", "name": name},
            )
        yield {
            "url": url,
            "server_up_s": round(server_up_s, 1),
            "send_args": {
                "project_key": proj,
                "sender_name": "BlueLake",
                "to": ["GreenCastle"],
                "subject": "bench",
            },
            "fetch_args": {"project_key": proj, "agent_name": "GreenCastle", "limit": 20},
        }
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(5)
        log.close()


def run(rounds: int) -> dict[str, object]:
    try:
        ver = installed()
    except NotRun as e:
        return {"not_run": str(e)}
    work = tempfile.mkdtemp(prefix="sotd-bench-mam-", dir=common.bench_dir())
    facts = common.machine(work)
    try:
        with agent_mail(work) as am:
            url = str(am["url"])
            send_args = dict(am["send_args"])  # type: ignore[call-overload]
            fetch_args = dict(am["fetch_args"])  # type: ignore[call-overload]
            s = common.Sessions(os.path.join(work, "sotd"))
            s.add("alpha")
            beta = s.add("beta")
            client = [common.PYTHON, "-c", CLIENT, url]
            cases: dict[str, tuple[str, list[str]]] = {
                "floor": ("alpha", [common.PYTHON, "-c", "pass"]),
                "sotd send": ("alpha", [common.SOTD, "comm", "send", f"@{beta}", "bench message"]),
                "sotd poll": ("beta", [common.SOTD, "comm", "poll"]),
                "Agent Mail send_message": (
                    "alpha",
                    [*client, "send_message", json.dumps(send_args | {"body_md": "bench message"})],
                ),
                "Agent Mail fetch_inbox": ("alpha", [*client, "fetch_inbox", json.dumps(fetch_args)]),
                "Agent Mail health_check (client floor)": ("alpha", [*client, "health_check", "{}"]),
            }
            for who, argv in cases.values():  # warm-up, untimed
                s.spawn(who, argv)
            wall: dict[str, list[float]] = {k: [] for k in cases}
            cpu: dict[str, list[float]] = {k: [] for k in cases}
            names = list(cases)
            for r in range(rounds):
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    who, argv = cases[name]
                    w, c = s.spawn(who, argv)
                    wall[name].append(w)
                    cpu[name].append(c)
            server_up_s = am["server_up_s"]
    except NotRun as e:
        return {"not_run": str(e)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    return {
        "machine": facts,
        "peer": f"mcp-agent-mail {ver}",
        "server": "python -m mcp_agent_mail.cli serve-http on 127.0.0.1 (streamable HTTP, JSON answers)",
        "server_up_s": server_up_s,
        "client": "a cold python process: urllib POST of one JSON-RPC tools/call (no MCP SDK)",
        "rounds": rounds,
        "cases": {
            k: {"wall_ms": common.summary(wall[k], 1e3), "cpu_ms": common.summary(cpu[k], 1e3)} for k in cases
        },
        "to_floor": {k: common.ratio(wall[k], wall["floor"]) for k in cases},
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args(argv)
    return common.finish("peers_mcp", run(5 if a.quick else a.rounds), a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
