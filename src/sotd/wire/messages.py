"""The client side of a one-shot request (behaviour 2.1, 2.3; D6). Pure: bytes in, bytes out.

Every connection opens with a hello request; a refused hello (``payload.error``) is the answer, except
``protocol_mismatch``, which is decisive only if no reply ever comes. ``OneShot`` produces the two lines to
send and consumes what comes back: it skips events and lines for other ops, and ends at the first response
for its op (or at a decisive hello refusal). The transport (sockets, deadline) lives in ``sotd.client``.
The hello's payload and the ops' payloads are built by ``sotd.wire.hello`` and ``sotd.wire.payloads``
(imported from there, never through this module); the daemon's side of a connection is
``sotd.wire.serverconn``.

What would break it: treating an event that carries the op's name as the answer, or ending the wait on a
``protocol_mismatch`` refusal while an answer may still come.
"""

from __future__ import annotations

from sotd.errors import WireError
from sotd.wire import answers
from sotd.wire import hello as wire_hello
from sotd.wire.framing import Decoder, Envelope, encode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def request(id: int, op: str, payload: dict[str, Any]) -> bytes:
    return encode(Envelope(id, "req", op, payload))


class OneShot:
    """One hello + one request on a fresh connection, as a state machine over bytes.

    ``to_send()`` gives the two lines. ``feed(data)`` consumes incoming bytes (``WireError`` on a malformed
    stream) and returns ``done``. When done: ``response`` is the op's response payload, or ``refused`` the
    decisive hello refusal's message. ``mismatch`` holds a ``protocol_mismatch`` refusal's message, which
    the transport reports only if the wait ends without an answer (``final_refusal``).
    """

    __slots__ = (
        "_decoder",
        "done",
        "hello",
        "hello_id",
        "mismatch",
        "op",
        "payload",
        "refused",
        "req_id",
        "response",
    )

    def __init__(self, op: str, payload: dict[str, Any], hello: dict[str, Any], *, first_id: int = 1) -> None:
        self.op = op
        self.payload = payload
        self.hello = hello
        self.hello_id = first_id
        self.req_id = first_id + 1
        self._decoder = Decoder()
        self.done = False
        self.response: dict[str, Any] | None = None
        self.refused: str | None = None
        self.mismatch: str | None = None

    def to_send(self) -> bytes:
        return request(self.hello_id, wire_hello.HELLO_OP, self.hello) + request(
            self.req_id, self.op, self.payload
        )

    def _hello_answer(self, env: Envelope) -> bool:
        """Record a hello refusal; True when it is decisive (ends the wait)."""
        err = env.payload.get("error")
        if err is None or err is False:
            return False
        msg = err if isinstance(err, str) else str(err)
        if env.payload.get("code") == answers.PROTOCOL_MISMATCH:
            self.mismatch = msg
            return False
        self.refused = msg
        self.done = True
        return True

    def feed(self, data: bytes) -> bool:
        if self.done:
            return True
        for env in self._decoder.feed(data):
            if env.kind != "res":
                continue
            if env.op == self.op and (env.id == self.req_id or self.op != wire_hello.HELLO_OP):
                self.response = env.payload
                self.done = True
                return True
            if env.op == wire_hello.HELLO_OP and self._hello_answer(env):
                return True
        failed = self._decoder.failed
        if failed is not None:
            raise WireError(failed.message)
        return self.done

    def final_refusal(self) -> str | None:
        """The refusal to report when the wait ends: the decisive one, else a pending protocol mismatch."""
        if self.response is not None:
            return None
        return self.refused if self.refused is not None else self.mismatch


__all__ = ["OneShot", "request"]
