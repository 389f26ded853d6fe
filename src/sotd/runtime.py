"""Where this user's daemon lives on this box: its socket, and the files beside it.

A leaf module (stdlib only, no I/O at import) so the daemon and the CLI compute one path from one rule.
Spec: behaviour 2.2 ("Local daemon endpoint", user isolation: the socket sits in a private folder).
What would break it: a second place that spells the socket path, so ``sotd comm`` dials where no daemon is.
"""

from __future__ import annotations

import os

# This box's declared host has one home, ``sysprobe.declared_host``; the daemon and the CLI's routing call it
# by this name (an import, not a copy).
from sotd.sysprobe import declared_host as self_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SOCKET_NAME = "sotd.sock"

__all__ = ["SOCKET_NAME", "default_socket", "log_path", "self_host", "socket_path", "status_path"]


def default_socket(environ: Mapping[str, str]) -> str:
    """Where this user's daemon listens when ``$SOT_SOCKET`` is unset (a private 0700 folder)."""
    label = environ.get("SOT_BACKEND_LABEL") or "sot"
    base = environ.get("XDG_RUNTIME_DIR") or f"/tmp/sotd-{os.geteuid()}"
    return os.path.join(base, f"sotd-{label}", SOCKET_NAME)


def socket_path(environ: Mapping[str, str], explicit: str | None = None) -> str:
    """The socket a daemon serves: ``explicit`` (``--socket``), else ``$SOT_SOCKET``, else the default."""
    return explicit or environ.get("SOT_SOCKET") or default_socket(environ)


def status_path(socket: str) -> str:
    """The status file beside ``socket`` (same private folder)."""
    return os.path.join(os.path.dirname(socket), os.path.basename(socket) + ".status.json")


def log_path(socket: str) -> str:
    """The log file beside ``socket``."""
    return os.path.join(os.path.dirname(socket), os.path.basename(socket) + ".log")
