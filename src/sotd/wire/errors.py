"""The wire's two kinds of protocol error: a peer's fault, and our own code's (h11's remote/local split).

Spec: behaviour 2.1 (a bad frame closes its connection; a refused hello is the answer), 2.3 (a refusal is
``{error, code}``). Guarantee: what a peer did wrong is a ``RemoteProtocolError`` that carries the answer
the peer may be sent (its ``code`` and sentence) and whether its connection closes; what our own code did
wrong (feeding a closed connection, answering a request that was never received or twice) is a
``LocalProtocolError``, which is not a ``SotdError``: it is a bug, so nothing presents it to a user and
nothing sends it to a peer.
What would break it: catching ``LocalProtocolError`` where peer errors are answered (a bug of ours would
then reach a peer as a refusal), or raising ``RemoteProtocolError`` for our own misuse.

A leaf of ``sotd.wire``: imports only ``sotd.errors``.
"""

from __future__ import annotations

from sotd.errors import WireError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class RemoteProtocolError(WireError):
    """The peer broke the protocol: a bad frame, a missing or refused hello, a bad payload.

    ``code`` is the wire's answer code (``bad_frame`` for bytes that are no envelope), ``message`` the
    sentence the peer is told, ``closes`` whether the connection ends with it.
    """

    def __init__(self, message: str, *, code: str | None = None, closes: bool = True) -> None:
        super().__init__(message, code=code)
        self.closes = closes

    def answer(self) -> dict[str, Any]:
        """The refusal payload a peer is sent for this error: ``{error, code}``."""
        return {"error": self.message, "code": self.code}


class LocalProtocolError(RuntimeError):
    """Our own code used a wire state machine out of order. A programming error: never sent to a peer."""


__all__ = ["LocalProtocolError", "RemoteProtocolError"]
