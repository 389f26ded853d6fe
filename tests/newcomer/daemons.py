"""Helpers for the newcomer tests that start real daemons with ``sotd daemon start`` (detached): each
test stops what it started, by the pid in the status file, and kills it if the stop did not work."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

from tests.conftest import SOTD, running


def daemon(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SOTD, "daemon", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def status_pid(sock: str) -> int | None:
    try:
        with open(sock + ".status.json") as f:
            pid = json.load(f).get("pid")
    except (OSError, ValueError):
        return None
    return pid if isinstance(pid, int) else None


def started_pid(sock: str, secs: float = 10.0) -> int | None:
    """The pid a daemon that was just started writes to its status file, waited for: the daemon answers on
    its socket (what ``start`` and an autostart wait for) a moment before its status file is written, so a
    read right after may find none (a fresh-clone CI run read ``None`` there). None if it never came."""
    deadline = time.monotonic() + secs
    while True:
        pid = status_pid(sock)
        if pid is not None or time.monotonic() > deadline:
            return pid
        time.sleep(0.05)


def kill_daemon(sock: str) -> None:
    """SIGKILL by the status file's pid, waited for (``started_pid``: a daemon just started may not have
    written it yet; a fresh-clone CI run's doctor then found the daemon still answering), and then until
    the process has ended: a daemon that is gone (its socket stays, dead; the next ``sotd daemon start``
    removes it). Faster than a stop, whose wait for the exit takes about 2 s here."""
    pid = started_pid(sock)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def stop_daemon(env: dict[str, str], sock: str) -> None:
    """``sotd daemon stop``; SIGKILL by the status file's pid if that left it running."""
    pid = status_pid(sock)
    daemon({**env, "SOT_SOCKET": sock}, "stop")
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            os.kill(pid, signal.SIGKILL)
