"""``sotd daemon status`` is a thin client (``sotd.daemon.command``): its round trip to a running daemon
imports neither the daemon's process nor what the process pulls in (asyncio, the rows, the wake, OCX).

Read the way the hot-path test reads it (``-X importtime`` through the console script), against a real
daemon started with ``sotd daemon start`` in a private comm folder, and once with no daemon there.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import SOTD, Comm
from tests.newcomer.daemons import daemon, stop_daemon
from tests.unit.test_hot_path_imports import imported

pytestmark = pytest.mark.unit

HEAVY = ("asyncio", "sotd.daemon.process", "sotd.daemon.rows", "sotd.daemon.wake", "sotd.ocx", "sotd.ocxrun")


def heavy_chains(stderr: str) -> dict[str, list[str]]:
    """For each heavy module (or a submodule of one) in the report: the chain that imported it."""
    rows = imported(stderr)
    found: dict[str, list[str]] = {}
    for i, (depth, name) in enumerate(rows):
        top = next((h for h in HEAVY if name == h or name.startswith(h + ".")), None)
        if top is None or top in found:
            continue
        chain, want = [name], depth
        for d, n in rows[i + 1 :]:
            if d < want:
                chain.append(n)
                want = d
        found[top] = list(reversed(chain))
    return found


def status_report(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    e = dict(env, PYTHONPROFILEIMPORTTIME="1")
    e.pop("PYTHONIMPORTTIME", None)
    return subprocess.run(
        [SOTD, "daemon", "status"], check=False, env=e, capture_output=True, text=True, timeout=60
    )


def test_daemon_status_round_trip_imports_no_process(tmp_path: object) -> None:
    comm = Comm(str(tmp_path))
    a = comm.session("alpha")
    sock = os.path.join(comm.work, "run", "sotd.sock")
    env = {**a.env, "SOT_SOCKET": sock}
    started = daemon(env, "start")
    try:
        assert started.returncode == 0, started.stderr
        p = status_report(env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.startswith(f"sotd daemon at {sock}: pid "), p.stdout
        names = {n for _, n in imported(p.stderr)}
        assert "sotd.daemon.command" in names, "the import report was not read"
        bad = heavy_chains(p.stderr)
        assert not bad, "\n".join(f"{m}: " + " -> ".join(c) for m, c in bad.items())
    finally:
        stop_daemon(env, sock)


def test_daemon_status_with_no_daemon_imports_no_process(tmp_path: object) -> None:
    comm = Comm(str(tmp_path), install=False)
    env = {**comm.session("alpha").env, "SOT_SOCKET": os.path.join(comm.work, "none.sock")}
    p = status_report(env)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "start it: sotd daemon start" in p.stderr
    assert heavy_chains(p.stderr) == {}


def test_heavy_chain_reader() -> None:
    report = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:        1 |          1 |     asyncio.events",
            "import time:        1 |          2 |   sotd.daemon.process",
            "import time:        1 |          3 | sotd.daemon.command",
        ]
    )
    assert heavy_chains(report) == {
        "asyncio": ["sotd.daemon.command", "sotd.daemon.process", "asyncio.events"],
        "sotd.daemon.process": ["sotd.daemon.command", "sotd.daemon.process"],
    }
