"""``sotd stdio-bridge [--endpoint unix:<path>] [--host <h>]``: stdin/stdout to the local daemon's socket.

Behaviour 2.2: what an ``ssh:`` endpoint runs on the far box, and what a ``unix:`` endpoint may be dialled
through. It connects only to a socket served by this same account: the socket's folder must be a folder
owned by this uid with no group or other bits (0700), the socket itself owned by this uid, and the process
that accepts the connection must run as this uid (``SO_PEERCRED``, checked after connecting, so a swap
between the check and the dial gains nothing). Anything else is a one-line refusal on stderr, exit 1.

The socket is ``--endpoint unix:<path>``, else ``$SOT_SOCKET``, else ``sotd.runtime.default_socket``.
``--host <h>`` names the box on whose behalf the bridge runs; the daemon learns the peer's host from its
hello, so the bridge uses it only to label its own stderr lines (``sotd stdio-bridge (for <h>): …``).

Pumping: bytes both ways with ``select`` and bounded buffers, never blocking on one side while the other
has data. When stdin ends, the bridge sends what it still holds, half-closes the socket (``SHUT_WR``) and
keeps passing the daemon's answer to stdout until the daemon closes or ``LINGER_S`` passes; when the
daemon closes, it flushes stdout and exits. A closed stdout (the ssh client went away) ends it quietly.
Exit 0 in all those cases.

What would break it: reading stdin in blocking mode while the daemon's answer waits (a one-shot client
keeps stdin open until it has its answer), or leaving O_NONBLOCK on the inherited stdin/stdout (they may
be shared with the parent), so the bridge never changes their flags and writes at most PIPE_BUF bytes per
ready write.
"""

from __future__ import annotations

import os

from sotd import cmdtable
from sotd.errors import EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping

USAGE = cmdtable.usage("stdio-bridge")  # made from the command table
LINGER_S = 10.0  # after stdin ends: how long the daemon may take to finish its answer and close
BUF_MAX = 1 << 21  # stop reading a side while this much of it waits to be written
_CHUNK = 65536
_PIPE_BUF = 4096


class BridgeRefused(Exception):
    """The bridge will not connect (the sentence says why)."""


def parse(argv: list[str]) -> tuple[str | None, str]:
    """(endpoint or None, host); ``ValueError`` with the usage problem."""
    endpoint: str | None = None
    host = ""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--endpoint", "--host"):
            if i + 1 >= len(argv):
                raise ValueError(f"{a} needs a value")
            if a == "--endpoint":
                endpoint = argv[i + 1]
            else:
                host = argv[i + 1]
            i += 2
        elif a.startswith("--endpoint="):
            endpoint = a.split("=", 1)[1]
            i += 1
        elif a.startswith("--host="):
            host = a.split("=", 1)[1]
            i += 1
        else:
            raise ValueError(f"unknown argument '{a}'")
    return endpoint, host


def socket_for(endpoint: str | None, environ: Mapping[str, str]) -> str:
    """The socket path to dial; ``BridgeRefused`` for an endpoint this bridge does not serve."""
    if endpoint is not None:
        if not endpoint.startswith("unix:") or len(endpoint) == 5 or "\0" in endpoint:
            raise BridgeRefused(f"only a unix:<path> endpoint can be bridged (got '{endpoint}')")
        return endpoint[5:]
    if environ.get("SOT_SOCKET"):
        return environ["SOT_SOCKET"]
    from sotd import runtime

    return runtime.default_socket(environ)


def check_private(path: str) -> None:
    """``BridgeRefused`` unless ``path`` is a socket of this uid in a private folder of this uid."""
    import stat

    from sotd import fsprim

    uid = os.geteuid()
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(folder)
    except OSError as e:
        raise BridgeRefused(f"no daemon socket at {path} ({e.strerror or e})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BridgeRefused(f"refusing {path}: {folder} is not a folder")
    if not fsprim.owned_private(st, uid):
        raise BridgeRefused(
            f"refusing {path}: its folder {folder} is not private to this account "
            f"(mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}; want 0700, uid {uid})"
        )
    try:
        st = os.lstat(path)
    except OSError as e:
        raise BridgeRefused(f"no daemon socket at {path} ({e.strerror or e})") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise BridgeRefused(f"refusing {path}: not a socket")
    if st.st_uid != uid:
        raise BridgeRefused(
            f"refusing {path}: the socket belongs to uid {st.st_uid}, not this account ({uid})"
        )


def connect(path: str) -> socket.socket:
    """A connected socket to ``path`` whose server runs as this uid (``BridgeRefused`` otherwise)."""
    import socket
    import struct

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        sock.connect(path)
        if hasattr(socket, "SO_PEERCRED"):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, peer_uid, _gid = struct.unpack("3i", creds)
            if peer_uid != os.geteuid():
                raise BridgeRefused(f"refusing {path}: it is served by uid {peer_uid}, not this account")
    except OSError as e:
        sock.close()
        raise BridgeRefused(f"cannot connect to the daemon at {path} ({e.strerror or e})") from None
    except BridgeRefused:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def pump(sock: socket.socket, in_fd: int = 0, out_fd: int = 1, *, linger_s: float = LINGER_S) -> None:
    """Copy ``in_fd`` -> socket and socket -> ``out_fd`` until the daemon closes or stdin ends (+ linger)."""
    import select
    import socket
    import time

    up = bytearray()  # stdin -> daemon
    down = bytearray()  # daemon -> stdout
    stdin_open = True
    sock_open = True  # the daemon may still send
    shut_wr = False
    linger_until: float | None = None
    while True:
        if not stdin_open and not up and not shut_wr:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            shut_wr = True
            linger_until = time.monotonic() + linger_s
        if not sock_open and not down:
            return
        if linger_until is not None and not down:
            left = linger_until - time.monotonic()
            if left <= 0:
                return
        else:
            left = None
        rlist: list[int | socket.socket] = []
        wlist: list[int | socket.socket] = []
        if stdin_open and len(up) < BUF_MAX:
            rlist.append(in_fd)
        if sock_open and len(down) < BUF_MAX:
            rlist.append(sock)
        if up:
            wlist.append(sock)
        if down:
            wlist.append(out_fd)
        readable, writable, _ = select.select(rlist, wlist, [], left)
        if out_fd in writable:
            try:
                n = os.write(out_fd, down[:_PIPE_BUF])
            except BrokenPipeError:
                return  # nobody reads our answer any more: the far client has gone
            del down[:n]
        if sock in writable:
            try:
                n = sock.send(up)
                del up[:n]
            except BlockingIOError:
                pass
            except OSError:
                up.clear()  # the daemon stopped reading; what it sends back still counts
                stdin_open = False
        if in_fd in readable:
            data = os.read(in_fd, _CHUNK)
            if data:
                up += data
            else:
                stdin_open = False
        if sock in readable:
            try:
                data = sock.recv(_CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                down += data
            else:
                sock_open = False


def run(argv: list[str]) -> int:
    try:
        endpoint, host = parse(argv)
    except ValueError as e:
        from sotd.errors import UsageError

        raise UsageError(f"sotd stdio-bridge: {e}", hint=USAGE) from None
    label = f"sotd stdio-bridge (for {host})" if host else "sotd stdio-bridge"
    try:
        path = socket_for(endpoint, os.environ)
        check_private(path)
        sock = connect(path)
    except BridgeRefused as e:
        from sotd.errors import BridgeFailed

        raise BridgeFailed(f"{label}: {e}") from None
    try:
        pump(sock)
    finally:
        sock.close()
    return EXIT_OK
