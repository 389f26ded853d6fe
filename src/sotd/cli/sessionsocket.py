"""``sotd session-socket-path <label>``: the socket this box's daemon for this comm folder listens on.

Spec: behaviour 2.2, "Local daemon endpoint": a 0.6.6 client with no ``$SOT_SOCKET`` (off Windows) finds
the local daemon by running ``sotd session-socket-path ${SOT_BACKEND_LABEL:-sot}``, which must name a
live socket; it then dials it through ``sotd stdio-bridge --endpoint unix:<path>`` (issue 28 item 1).
Guarantee: the one line printed is where a sotd daemon started in this environment with ``<label>``
listens: ``$SOT_SOCKET`` when set (every sotd command's socket), else ``sotd.runtime.default_socket`` for
``<label>`` and this environment's comm folder (it follows the folder: issue 27 item 5), so a 0.6.6
script and sotd's own commands reach one daemon. Nothing is checked or written: whether a daemon answers
there is the caller's test, as the reference's is.
What would break it: a path spelled here instead of by ``runtime``, or a label that leaves its folder
(refused: a label is a handle-shaped name, 1-64 bytes of ``A-Za-z0-9._-``, no ``..``, no leading ``-``).
"""

from __future__ import annotations

import os
import sys

from sotd import cmdtable
from sotd.errors import EXIT_OK, UsageError


def socket_for(label: str, environ: dict[str, str]) -> str:
    """The socket for ``label`` in ``environ`` (see the module header)."""
    from sotd import runtime

    return os.path.abspath(environ.get("SOT_SOCKET") or runtime.default_socket(environ, label))


def run(argv: list[str]) -> int:
    from sotd import handles

    if len(argv) != 1:
        raise UsageError(cmdtable.usage("session-socket-path"))
    label = argv[0]
    if not handles.is_valid(label):
        from sotd.text import inert

        raise UsageError(
            f"sotd session-socket-path: a label is 1-64 bytes of A-Za-z0-9._-, with no '..' and no leading "
            f"'-' (got '{inert(label)}')"
        )
    sys.stdout.write(socket_for(label, dict(os.environ)) + "\n")
    return EXIT_OK
