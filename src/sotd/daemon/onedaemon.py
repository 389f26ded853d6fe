"""One daemon per box per comm folder: a lock the daemon holds for its life, and the refusal of a second.

Spec: behaviour 2.4 (one link per box: a box's daemon is who links as that host) and 6.4 (one filer per
folder per box); issue 20 ("two daemons on one box keep displacing each other's hub link").
Guarantee: while a daemon for host H runs on comm folder F, a second daemon for H on F — whatever its
socket or ``XDG_RUNTIME_DIR`` — refuses to start with a sentence naming the first one's pid and socket and
the command that stops it. The lock is ``<F>/state/daemon-<H>.lock`` (an ``flock`` held on an open file
until the process ends, so a crashed daemon never leaves it held); the file's text is the holder's record
(pid, socket), rewritten by each new holder.
What would break it: a lock keyed by the socket path (two runtime dirs would give two locks), or one that
outlives its process (a pid file without a lock).

``refusal_text`` is pure; ``claim`` is the I/O.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from sotd import fsprim
from sotd.errors import AlreadyServed
from sotd.formats.layout import Layout, link_refused


def lock_path(layout: Layout, host: str) -> str:
    return layout.state(f"daemon-{host}.lock")


def refusal_text(home: str, host: str, record: dict[str, Any] | None) -> tuple[str, str]:
    """The sentence and the hint for a second daemon. ``record``: the first one's (None: unreadable)."""
    pid = record.get("pid") if record else None
    sock = record.get("socket") if record else None
    who = f"pid {pid}, socket {sock}" if pid and sock else "its record could not be read"
    text = f"another sotd daemon already serves the comm folder {home} as host {host} ({who})"
    lock = os.path.join(home, "state", f"daemon-{host}.lock")
    hint = f"stop it first: sotd daemon stop --socket {sock}" if sock else f"find it: fuser -v {lock}"
    return text, hint


def claim(layout: Layout, host: str, socket_path: str) -> int | None:
    """Take the folder's lock for ``host`` and write our record; the open fd (keep it for the process's
    life). None when there is no comm folder (nothing to serve twice). ``AlreadyServed`` when held."""
    if not os.path.isdir(layout.home):
        return None
    os.makedirs(layout.state_dir, mode=0o700, exist_ok=True)
    path = lock_path(layout, host)
    try:  # never through a link, at the lock or at state/ (issue 25)
        fd = fsprim.open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o600, real_folder=True)
    except fsprim.LinkedPath as e:
        raise link_refused(str(e.filename)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            data = os.pread(fd, 65536, 0)
            record = json.loads(data.decode("utf-8")) if data else None
        except (OSError, ValueError):
            record = None
        os.close(fd)
        text, hint = refusal_text(layout.home, host, record if isinstance(record, dict) else None)
        raise AlreadyServed(text, hint=hint) from None
    except OSError:
        os.close(fd)
        raise
    doc = json.dumps({"pid": os.getpid(), "socket": socket_path, "host": host}).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, doc, 0)
    return fd
