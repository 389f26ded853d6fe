"""The 0.6.6 reference daemon's reading of a ``comm.file`` frame, as ``behaviour.md`` 2.1 and 2.3 write it.

A stand-in: the 0.6.6 daemon is not available to run here, so this encodes its rules as written, to
judge the frames sotd sends (``tests/integration/test_expires_decision.py``): the envelope of 2.1, the
request ``{from, to, text, broadcast (default false), forwarded (default false)}`` of 2.3 (the three
strings required, the two flags booleans when present), then the verdict order of 2.3 for a folder this
daemon files for itself (route *Local*). Every step reads only the keys 2.3 names; nothing in 2.1 or 2.3
refuses a key it does not name, so none is refused here (``expires`` is one such key).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_ENVELOPE = 1 << 20  # 2.1: 1 MiB
_HANDLE = re.compile(r"[A-Za-z0-9._-]{1,64}")
FRESH_SECS = 600


class Refused(Exception):
    """The frame could not be read as a comm.file request at all (2.1 envelope or 2.3 field types)."""


def read_request(envelope: dict[str, Any]) -> dict[str, Any]:
    """The request fields 2.3 names, with their defaults; ``Refused`` for what the rules cannot read."""
    line = (json.dumps(envelope, ensure_ascii=False) + "\n").encode("utf-8")
    if len(line) > MAX_ENVELOPE:
        raise Refused("envelope over 1 MiB")
    if envelope.get("v") != 1 or envelope.get("kind") != "req" or envelope.get("op") != "comm.file":
        raise Refused("not a v1 comm.file request")
    rid = envelope.get("id")
    if not isinstance(rid, int) or isinstance(rid, bool) or not 0 <= rid < 1 << 64:
        raise Refused("id is not a u64")
    payload = envelope.get("payload")
    if not isinstance(payload, dict):
        raise Refused("payload is not an object")
    req: dict[str, Any] = {}
    for key in ("from", "to", "text"):
        if not isinstance(payload.get(key), str):
            raise Refused(f"{key} is not a string")
        req[key] = payload[key]
    for key in ("broadcast", "forwarded"):
        v = payload.get(key, False)
        if not isinstance(v, bool):
            raise Refused(f"{key} is not a boolean")
        req[key] = v
    return req


def verdict(
    req: dict[str, Any], *, home: bool, agents: dict[str, Any] | None, now_stamp_floor: str
) -> dict[str, Any]:
    """2.3's verdict order on a Local route: the answer, or ``{"append": line}`` for step 7."""
    to = req["to"]
    if not _HANDLE.fullmatch(to) or ".." in to or to.startswith("-"):
        return {"error": f"not a handle: {json.dumps(to)}", "code": "bad_handle"}
    if not home or agents is None:
        return {"error": f"no box knows that handle: {to}", "code": "not_here"}
    row = agents.get(to)
    if not isinstance(row, dict) or not row.get("host"):
        return {"error": f"no box knows that handle: {to}", "code": "not_here"}
    seen = row.get("last_seen")
    if not (isinstance(seen, str) and len(seen) == 20 and seen > now_stamp_floor):
        return {"error": f"no live session holds @{to}", "code": "no_live_session"}
    line = {"from": req["from"], "to": "" if req["broadcast"] else to, "repo": "daemon", "msg": req["text"]}
    return {"append": line}
