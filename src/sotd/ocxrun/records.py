"""The JSON files of OCX layer 3 on a node: the answers record, the session record, the launch spec.

Each is written whole to a temporary name beside it, fsynced, and renamed over the old one, so a reader
(a restarted node's ``recover``) sees the old file or the new, never a mix. What would break it: a
temporary name shared by two threads (each writer's thread id is in it), or reading a half-written file
as a record (``read_json`` answers None for anything that is not a JSON object).
"""

from __future__ import annotations

import json
import threading

from sotd import fsprim


def write_json(path: str, obj: object) -> None:
    fsprim.write_atomic(path, json.dumps(obj).encode(), tmp=f"{path}.{threading.get_ident()}.tmp", mode=0o666, sync_folder=False)  # fmt: skip


def read_json(path: str) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None
