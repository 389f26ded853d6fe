"""The 0.6.6 reference, as ``behaviour.md`` writes it: its daemon's reading of a ``comm.file`` frame, and
its shell client's way to a daemon when it cannot take the inbox lock itself.

Stand-ins: the 0.6.6 scripts and daemon are not in this repository (nor may their code be), so this
encodes their rules as written.

- The daemon (``read_request``, ``verdict``), to judge the frames sotd sends
  (``tests/integration/test_expires_decision.py``): the envelope of 2.1, the request ``{from, to, text,
  broadcast (default false), forwarded (default false)}`` of 2.3 (the three strings required, the two
  flags booleans when present), then the verdict order of 2.3 for a folder this daemon files for itself
  (route *Local*). Every step reads only the keys 2.3 names; nothing in 2.1 or 2.3 refuses a key it does
  not name, so none is refused here (``expires`` is one such key).
- The client's hand-off (``local_daemon_endpoint``, ``file_through_daemon``), to check that a 0.6.6 box
  that cannot take the lock finds sotd's daemon (``tests/integration/test_mixed_066.py``, issue 28 item
  1): 6.4 "Who appends where" (a box that cannot take the lock itself hands the line to this box's daemon
  as ``comm.file``, else names ``this box cannot take the inbox lock itself, and no daemon is reachable to
  file it``), 2.2 (the local endpoint: ``unix:$SOT_SOCKET``, else ``sotd session-socket-path
  ${SOT_BACKEND_LABEL:-sot}``'s first line, which must be a live socket; ``unix:`` dialled through
  ``sotd stdio-bridge --endpoint``), 2.1 (the hello the comm scripts send, a one-shot request, the first
  line carrying the op) and 1.4's answer table (``filed -> @t`` unindented, ``FAILED -> @t: E``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
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


# ------------------------------------------------------------------------------------- the client side

NO_DAEMON = "this box cannot take the inbox lock itself, and no daemon is reachable to file it"


def _live_socket(path: str) -> bool:
    """2.2: the path "must be a live socket": a socket there that takes a connection."""
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2.0)
            s.connect(path)
    except OSError:
        return False
    return True


def local_daemon_endpoint(sotd: str, env: dict[str, str]) -> str | None:
    """2.2's local daemon endpoint (no explicit one; not Windows): ``unix:$SOT_SOCKET``, else the first
    line of ``sotd session-socket-path ${SOT_BACKEND_LABEL:-sot}`` when it names a live socket; None when
    neither gives one (a ``sotd`` that does not know the command prints nothing on stdout)."""
    if env.get("SOT_SOCKET"):
        return "unix:" + env["SOT_SOCKET"]
    label = env.get("SOT_BACKEND_LABEL") or "sot"
    p = subprocess.run(
        [sotd, "session-socket-path", label], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    lines = p.stdout.splitlines() if p.returncode == 0 else []
    if not lines or not _live_socket(lines[0]):
        return None
    return "unix:" + lines[0]


def hello_066(host: str, name: str, env: dict[str, str]) -> dict[str, Any]:
    """2.1: the hello payload the comm scripts send."""
    return {
        "client_id": "sot-comm",
        "last_seen_revision": 0,
        "protocol": 3,
        "app_version": "comm",
        "host": host,
        "os_user": f"uid:{os.geteuid()}",
        "role": "agent" if env.get("SOT_WORKSPACE") else "cli",
        "name": name,
    }


def oneshot(sotd: str, endpoint: str, env: dict[str, str], hello: dict[str, Any], op: str,
            payload: dict[str, Any], window: float = 10.0) -> dict[str, Any] | None:  # fmt: skip
    """2.1's one-shot request over ``sotd stdio-bridge --endpoint <ep>``: the hello line and the request
    line, stdin kept open; the first complete line holding ``"op":"<op>"`` that parses. None: silence."""
    lines = [
        {"v": 1, "id": 1, "kind": "req", "op": "hello", "payload": hello},
        {"v": 1, "id": 2, "kind": "req", "op": op, "payload": payload},
    ]
    data = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines).encode()
    with subprocess.Popen(
        [sotd, "stdio-bridge", "--endpoint", endpoint],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    ) as p:  # fmt: skip
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(data)
        p.stdin.flush()
        try:
            for raw in p.stdout:
                text = raw.decode("utf-8", "replace")
                if f'"op":"{op}"' not in text.replace(" ", ""):
                    continue
                try:
                    env_ = json.loads(text)
                except ValueError:
                    continue
                if env_.get("kind") == "res" and env_.get("id") == 2:
                    got = env_.get("payload")
                    return got if isinstance(got, dict) else None
            return None
        finally:
            p.stdin.close()
            p.kill()


def file_through_daemon(sotd: str, env: dict[str, str], *, host: str, frm: str, to: str, text: str) -> str:
    """6.4: a box that cannot take the inbox lock itself hands the line to this box's daemon as one
    ``comm.file``; what ``comm-send.sh`` then prints (1.4's table), ``filed -> @t`` or ``FAILED -> @t: …``."""
    endpoint = local_daemon_endpoint(sotd, env)
    if endpoint is None:
        return f"FAILED -> @{to}: {NO_DAEMON}"
    answer = oneshot(
        sotd, endpoint, env, hello_066(host, frm, env), "comm.file",
        {"from": frm, "to": to, "text": text, "broadcast": False},
    )  # fmt: skip
    if answer is None:
        return f"FAILED -> @{to}: the daemon did not answer at {endpoint}"
    if answer.get("ok") is True:
        return f"filed -> @{to}"
    return f"FAILED -> @{to}: {answer.get('error')}"
