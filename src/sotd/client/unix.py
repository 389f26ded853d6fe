"""A blocking one-shot request over a Unix socket (behaviour 2.1, 2.2; D6). Stdlib only, no asyncio.

``request`` dials, sends hello + request, and reads until the op's answer, under ONE deadline measured from
the moment it starts to dial (connect, send and every receive share it). The answer decides: a response
payload is returned as the daemon sent it (``{ok: true}`` or ``{error, code?}``, for the caller to judge);
no answer in time, a closed connection, or a dial error is ``DaemonUnreachable`` ("the daemon did not answer
at unix:<path>", the OS error as the hint); a decisive hello refusal is ``DaemonUnreachable`` ("hello
refused: <msg>", code ``hello_refused``); a malformed stream is ``WireError``.

What would break it: restarting the clock per phase (a slow hello plus a slow answer would exceed 5 s), or
reading a transport success as an answer.
"""

from __future__ import annotations

import socket
import time

from sotd.errors import DaemonUnreachable, HelloRefused, WireError
from sotd.wire.messages import OneShot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_DEADLINE_S = 5.0
_RECV = 65536


def _left(deadline: float) -> float:
    return deadline - time.monotonic()


def request(
    endpoint_path: str,
    op: str,
    payload: dict[str, Any],
    hello: dict[str, Any],
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> dict[str, Any]:
    """Send ``op`` with ``payload`` to the daemon at ``endpoint_path``; its response payload."""
    deadline = time.monotonic() + deadline_s
    where = "unix:" + endpoint_path
    shot = OneShot(op, payload, hello)
    silent = f"the daemon did not answer at {where}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            left = _left(deadline)
            if left <= 0:
                raise TimeoutError("deadline passed before dialling")
            sock.settimeout(left)
            sock.connect(endpoint_path)
            left = _left(deadline)
            if left <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(left)
            sock.sendall(shot.to_send())
            while not shot.done:
                left = _left(deadline)
                if left <= 0:
                    raise TimeoutError("timed out")
                sock.settimeout(left)
                data = sock.recv(_RECV)
                if not data:
                    raise ConnectionResetError("the connection closed without an answer")
                try:
                    shot.feed(data)
                except WireError as e:
                    raise WireError(f"the daemon at {where} sent a malformed line: {e.message}") from None
        except OSError as e:
            refusal = shot.final_refusal()
            if refusal is not None:
                raise HelloRefused(f"hello refused: {refusal}") from None
            reason = str(e) or type(e).__name__
            raise DaemonUnreachable(silent, hint=reason) from None
    finally:
        sock.close()
    if shot.response is not None:
        return shot.response
    refusal = shot.final_refusal()
    raise HelloRefused(f"hello refused: {refusal}")
