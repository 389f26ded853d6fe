"""``sotd/client/dial.py``: a daemon's endpoint string, parsed, and one request to it by its transport.

Spec: behaviour 2.2 (a daemon is dialled at ``unix:<path>`` or ``ssh:<target>[/<host>]``; ``pipe:`` and
``tcp:`` are discarded with a line that says so). Guarantee: ``parse_endpoint`` is the one reading of an
endpoint string every dialler shares (the verbs, ``sotd doctor``, the daemon's links); ``request`` sends one
op to a ``DaemonEndpoint`` over the transport it names (``client.unix`` or ``client.ssh``, the latter
imported only when an ssh endpoint is dialled, so the hot path never pays for ``subprocess``).
What would break it: a second parser of endpoint strings (two diallers would disagree on what dials), or
importing ``client.ssh`` at module level. Stdlib only.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DISCARD = "comm-lib: discarding an endpoint this version cannot dial: "


class DaemonEndpoint:
    """Where a daemon is dialled: ``unix:<path>`` (its socket) or ``ssh:<target>[/<host>]`` (a bridge to the
    daemon of ``host``, or of ``target``'s own box, through OpenSSH)."""

    __slots__ = ("host", "kind", "path", "target")

    def __init__(self, kind: str, *, path: str = "", target: str = "", host: str = "") -> None:
        self.kind = kind
        self.path = path
        self.target = target
        self.host = host

    def __str__(self) -> str:
        if self.kind == "unix":
            return "unix:" + self.path
        return "ssh:" + self.target + ("/" + self.host if self.host else "")

    def __repr__(self) -> str:
        return f"DaemonEndpoint({self!s})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DaemonEndpoint) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def _plain_host(s: str) -> bool:
    """``[a-z0-9][a-z0-9._-]*``"""
    if not s or not ("a" <= s[0] <= "z" or "0" <= s[0] <= "9"):
        return False
    return all("a" <= c <= "z" or "0" <= c <= "9" or c in "._-" for c in s)


def parse_endpoint(s: str) -> tuple[DaemonEndpoint | None, str | None]:
    """(endpoint, None) for a dialable string; (None, discard text) otherwise; (None, None) for empty.

    ``pipe:`` (Windows named pipes) and ``tcp:`` cannot be dialled by this version and are discarded.
    """
    if not s:
        return None, None
    if s.startswith("unix:"):
        path = s[5:]
        if path and "\0" not in path and "\n" not in path:
            return DaemonEndpoint("unix", path=path), None
    elif s.startswith("ssh:"):
        target, sep, host = s[4:].partition("/")
        if _plain_host(target) and (not sep or _plain_host(host)):
            return DaemonEndpoint("ssh", target=target, host=host), None
    return None, DISCARD + s


def request(
    ep: DaemonEndpoint,
    op: str,
    payload: dict[str, Any],
    hello: dict[str, Any],
    *,
    deadline_s: float,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Send ``op`` with ``payload`` to the daemon at ``ep``; its response payload (``client.unix.request``
    or ``client.ssh.request``: their errors, their one deadline)."""
    if ep.kind == "ssh":
        from sotd.client import ssh  # subprocess is paid for only when a request really dials ssh

        return ssh.request(ep.target, ep.host, op, payload, hello, deadline_s=deadline_s, environ=environ)
    from sotd.client import unix

    return unix.request(ep.path, op, payload, hello, deadline_s=deadline_s)
