"""The hello, both sides: what a client says (``hello_payload``) and whether a daemon accepts it.

Spec: behaviour 2.1 (every connection opens with a hello; its payload; the roles a daemon accepts; a
refused hello is the answer), 2.2 (one OS account per daemon), 2.4 (the ``link`` role of hub links).
Guarantee: one list of the roles a daemon accepts (``ROLES``) and one verdict on a hello
(``hello_verdict``), checked in the order protocol, role, host; the comm tools say hello only as one of
``CLIENT_ROLES`` and never without a host and an OS account.
What would break it: a second role list (the daemon and the builder disagreed once: ``fe`` and ``bridge``
were accepted by the daemon but missing from the wire's list), or a verdict that looks at the role
before the protocol (a client of another protocol would then be told about roles, not the mismatch).

Pure: stdlib only (``json`` inside the verdict, which only the daemon calls).
"""

from __future__ import annotations

from sotd.errors import NoHello
from sotd.wire import answers

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL = 3
CLIENT_ID = "sot-comm"
APP_VERSION = "comm"
HELLO_OP = "hello"
# Every role a daemon accepts (behaviour 2.1: ``fe | bridge | cli | agent``, and ``link`` for hub links).
ROLES = ("fe", "bridge", "cli", "agent", "link")
# The roles sotd's own clients say hello as (a front end's ``fe`` and ``bridge`` belong to other programs).
CLIENT_ROLES = ("agent", "cli", "link")
# A one-shot role sends its requests and goes; the others stay for events (fe, bridge) or offers (link).
ONE_SHOT_ROLES = ("cli", "agent")
EVENT_ROLES = ("fe", "bridge")  # the connections a daemon's events are sent to
LINK_ROLE = "link"


def os_user_for_uid(euid: int) -> str:
    """The hello's ``os_user`` on a POSIX box: ``uid:<euid>``."""
    return f"uid:{euid}"


def hello_payload(
    *,
    host: str,
    os_user: str,
    role: str,
    name: str = "",
    client_id: str = CLIENT_ID,
    last_seen_revision: int = 0,
    app_version: str = APP_VERSION,
    protocol: int = PROTOCOL,
) -> dict[str, Any]:
    """The hello the comm tools send. No hello at all without a host or an OS account (``NoHello``)."""
    if not host:
        raise NoHello("cannot say hello: this box's declared host could not be read")
    if not os_user:
        raise NoHello("cannot say hello: this process's OS account could not be read")
    if role not in CLIENT_ROLES:
        raise ValueError(f"hello role must be one of {', '.join(CLIENT_ROLES)} (got {role!r})")
    return {
        "client_id": client_id,
        "last_seen_revision": last_seen_revision,
        "protocol": protocol,
        "app_version": app_version,
        "host": host,
        "os_user": os_user,
        "role": role,
        "name": name,
    }


def hello_verdict(payload: dict[str, Any]) -> tuple[str, str] | None:
    """None for an acceptable hello, else ``(code, error)``: protocol, then role, then host. Pure."""
    import json

    protocol = payload.get("protocol")
    if protocol != PROTOCOL:
        return (
            answers.PROTOCOL_MISMATCH,
            f"protocol mismatch: this daemon speaks protocol {PROTOCOL}, the client {json.dumps(protocol)}",
        )
    role = payload.get("role")
    if role not in ROLES:
        return answers.BAD_HELLO, f"unknown role: {json.dumps(role)} (one of {', '.join(ROLES)})"
    host = payload.get("host")
    if not isinstance(host, str) or not host:
        return answers.BAD_HELLO, "a hello must name its host"
    return None


def hello_ok(host: str, version: str) -> dict[str, Any]:
    """A daemon's answer to an accepted hello: the protocol, who answers, and its version."""
    return {"ok": True, "protocol": PROTOCOL, "host": host, "version": version}


def foreign_uid_text(own_uid: int, peer_uid: int) -> str:
    """The refusal a peer of another OS account gets (behaviour 2.2), before any op runs."""
    return f"this daemon serves uid {own_uid} only (the peer runs as uid {peer_uid})"


HELLO_REQUIRED_TEXT = "the first request on a connection must be hello"


class Peer:
    """Who said hello on a connection: its role, declared host, name and client id (as strings)."""

    __slots__ = ("client_id", "host", "name", "role")

    def __init__(self, role: str, host: str, name: str, client_id: str) -> None:
        self.role = role
        self.host = host
        self.name = name
        self.client_id = client_id

    @classmethod
    def of(cls, payload: dict[str, Any]) -> Peer:
        """The peer an accepted hello names (``hello_verdict`` said None: role and host are there)."""
        return cls(
            str(payload["role"]),
            str(payload["host"]),
            str(payload.get("name") or ""),
            str(payload.get("client_id") or ""),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Peer):
            return NotImplemented
        return (self.role, self.host, self.name, self.client_id) == (
            other.role,
            other.host,
            other.name,
            other.client_id,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Peer({self.role!r}, {self.host!r}, {self.name!r}, {self.client_id!r})"


__all__ = [
    "APP_VERSION",
    "CLIENT_ID",
    "CLIENT_ROLES",
    "HELLO_OP",
    "PROTOCOL",
    "ROLES",
    "Peer",
    "hello_ok",
    "hello_payload",
    "hello_verdict",
    "os_user_for_uid",
]
