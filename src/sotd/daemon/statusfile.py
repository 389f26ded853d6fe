"""The daemon's status file, beside its socket: who runs there (pid, start tick, socket, version, host).

Written atomically (exclusive temp, fsync, rename, folder fsync), so a reader sees the old file or the new
one, never a torn one. The file alone proves nothing: ``sotd daemon status`` asks the daemon
(``version.query``), and ``stop`` signals the pid only when its start tick (``/proc/<pid>/stat`` field 22)
is the one recorded (``sysprobe.start_tick``), so a recycled pid is never killed. The write is
``fsprim.write_atomic``.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from sotd import fsprim, sysprobe


def write(path: str, doc: dict[str, Any]) -> None:
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    fsprim.write_atomic(path, data, tmp=f"{path}.{os.getpid()}.tmp")


def read(path: str) -> dict[str, Any] | None:
    """The status document, or None when absent or not a JSON object."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def remove(path: str, pid: int) -> None:
    """Remove the file if it is still ours (a newer daemon may have replaced it)."""
    doc = read(path)
    if doc is not None and doc.get("pid") == pid:
        with contextlib.suppress(OSError):
            os.unlink(path)


def same_process(doc: dict[str, Any]) -> bool:
    """True when the recorded pid still runs and is the same process (same start tick)."""
    pid = doc.get("pid")
    tick = doc.get("start_tick")
    if type(pid) is not int or pid <= 0 or not isinstance(tick, str):
        return False
    return sysprobe.start_tick(pid) == tick
