"""``sotd/web/guard.py``: who may ask the page what (issue 30 item 3). Pure.

The rule: a request is served when its ``Host`` is a loopback name (a DNS name that points at 127.0.0.1
is refused: that is DNS rebinding) and it carries this start's secret, as ``?s=<secret>`` on a ``GET``
(which then sets the cookie and sends the browser on to the same path without the secret) or as the
cookie. A ``POST`` (the only requests that change anything) must also name its own origin:
``Origin`` equal to ``http://`` + ``Host`` (a page of another site, or a request with no ``Origin``, is
refused: CSRF). Every refusal is the same plain 403, so a refused request learns nothing.
Guarantee: nothing but a holder of the secret (or of the cookie it set) reads or acts; the comparisons of
secrets take the same time whatever they hold. What would break it: serving anything before ``verdict``
(a favicon, a static file), or a second place that decides access.
"""

from __future__ import annotations

import hmac

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SERVE = "serve"
ENTER = "enter"  # the secret is right: set the cookie, send the browser on without it
REFUSE = "refuse"

LOOPBACK_NAMES = ("127.0.0.1", "localhost")  # the server listens on 127.0.0.1 alone
REFUSAL_BODY = b"forbidden\n"


def cookie_name(port: int) -> str:
    """The cookie of the server on ``port`` (browsers keep cookies per host, not per port)."""
    return f"sotd_web_{port}"


def loopback_host(host: str) -> bool:
    """``Host`` names this machine's loopback (any port: ``ssh -L`` may forward from another one)."""
    name, _sep, port = host.partition(":")
    return name in LOOPBACK_NAMES and (port == "" or port.isdigit())


def cookie_value(header: str, name: str) -> str:
    """The value of cookie ``name`` in a ``Cookie`` header, ``""`` when it is not there."""
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return ""


def query_secret(query: str) -> str:
    """The ``s`` parameter of a query string, ``""`` when absent."""
    for part in query.split("&"):
        key, sep, value = part.partition("=")
        if sep and key == "s":
            return value
    return ""


def same(a: str, b: str) -> bool:
    return bool(a) and hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def verdict(method: str, query: str, headers: Mapping[str, str], secret: str, port: int) -> str:
    """``SERVE``, ``ENTER`` or ``REFUSE`` for one request. ``headers`` keys are lower-case."""
    host = headers.get("host", "")
    if not loopback_host(host):
        return REFUSE
    has_cookie = same(cookie_value(headers.get("cookie", ""), cookie_name(port)), secret)
    if method == "POST":
        if headers.get("origin", "") != f"http://{host}":
            return REFUSE
        return SERVE if has_cookie else REFUSE
    if method != "GET":
        return REFUSE
    if same(query_secret(query), secret):
        return ENTER
    return SERVE if has_cookie else REFUSE


def tcp_address(ip: str, port: int) -> str:
    """``127.0.0.1``, ``port`` as ``/proc/net/tcp`` writes it (the address's bytes in host order: little
    endian here, as Linux on x86 and ARM writes it)."""
    parts = ip.split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
        return ""
    return "".join(f"{int(p):02X}" for p in reversed(parts)) + f":{port:04X}"


def peer_uid(table: str, client_ip: str, client_port: int, server_port: int) -> int | None:
    """The uid that owns the client's end of a connection to ``server_port``, from ``/proc/net/tcp``'s
    text; None when the table does not hold it (the client's end is in another network namespace)."""
    local = tcp_address(client_ip, client_port)
    if not local:
        return None
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 7 and fields[1] == local and fields[2].endswith(f":{server_port:04X}"):
            return int(fields[7]) if fields[7].isdigit() else None
    return None
