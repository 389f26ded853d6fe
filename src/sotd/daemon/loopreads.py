"""``sotd/daemon/loopreads.py``: whether ``comm.file``'s read-only steps may run on the event loop.

Spec: behaviour 2.3 (a filing reads the registry afresh: every filing, on the loop or not) and 6.4 (the
route reads the lock record); issue 27 item 8 (one hub, 1,000 linked guests, 2,000 routed ``comm.file`` a
second). The steps before an append only read: the comm folder's ``isdir``, the mount table's memo, the
lock record and ``registry.json``. In a filing thread those fourteen system calls each hand the GIL to
the loop and back, and that ping-pong was most of a routed send's cost at the hub (0.53 ms of hub CPU a
send; 0.19 ms with the same steps on the loop: bench/hubscale.py, docs/benchmarks.md). The append (the
inbox lock's wait, the fsync) always runs in a filing thread.
Guarantee: the loop runs the reads itself only while a filing thread has found, within the last
``FRESH_S`` seconds and with no mount or unmount since, that every folder on the way to the comm folder
and to its ``inbox/`` is on a local disk or in memory (``LOOP_SAFE_FSTYPES``: never a network or FUSE
file system, whose server can hang a read for minutes). Anything else, or any doubt, keeps the reads in a
thread, as before. The check itself runs in a thread (``verify``); on the loop ``fresh`` only compares
the clock and asks the kernel, with ``poll(0)`` on an open ``/proc/self/mountinfo``, whether the mount
table changed (a file of the proc file system: it never waits).
What would break it: a loop-side check that touches the comm folder's path, a mount that appears after
``verify`` read the table but before its descriptor was opened (the descriptor is opened first), or a
folder type added to ``LOOP_SAFE_FSTYPES`` that can wait on a network.
Left open, and said in docs/daemon.md: a symbolic link on the way to the comm folder re-pointed at a
network file system is followed by the loop for at most ``FRESH_S`` (the comm folder is its owner's
alone, mode 0700, so only its owner can do that).

``loop_safe`` is pure (a table test); ``LoopReads`` is the thin shell around the clock and the mount table.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from typing import TYPE_CHECKING

from sotd.formats import holder, lockmanager

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sotd.formats.layout import Layout

FRESH_S = 1.0  # how long one thread's check lets the loop read the folder itself
# local disks (the lock identity's own list) and memory: a read there may wait for a disk, never a network
LOOP_SAFE_FSTYPES = lockmanager.LOCAL_FSTYPES | frozenset({"tmpfs", "ramfs"})


def ancestors(path: str) -> list[str]:
    """``path`` (absolute, canonical) and every folder above it, the root last. Pure."""
    out = [path]
    while path != "/":
        path = os.path.dirname(path)
        out.append(path)
    return out


def loop_safe(mountinfo_text: str, canonical_paths: Iterable[str]) -> bool:
    """Whether every mount a lookup of each of ``canonical_paths`` passes through (the mount of the path and
    of each folder above it) is of a type in ``LOOP_SAFE_FSTYPES``; False when one cannot be found. Pure."""
    for path in canonical_paths:
        if not path.startswith("/"):
            return False
        for folder in ancestors(path):
            mount = holder.mount_for(mountinfo_text, folder)
            if mount is None or mount[0] not in LOOP_SAFE_FSTYPES:
                return False
    return True


class LoopReads:
    """The memo ``fresh`` reads on the loop and ``verify`` sets in a filing thread. A "no" is kept as long
    as a "yes" (a folder on NFS is not checked again at every filing: the check reads the mount table)."""

    def __init__(self, fresh_s: float = FRESH_S) -> None:
        self.fresh_s = fresh_s
        self.safe = False  # the last check's verdict
        self.until = 0.0  # monotonic time until which that verdict holds (no mount since)
        self.fd: int | None = None  # the ``/proc/self/mountinfo`` descriptor ``verify`` opened
        self.lock = threading.Lock()  # ``verify`` in two threads at once: one at a time

    def fresh(self, mono_now: float) -> bool:
        """Whether the loop may do the reads now: the last check said yes, is younger than ``fresh_s``, and
        no mount changed since. Touches no file but the open proc descriptor."""
        return self.safe and self._holds(mono_now)

    def _holds(self, mono_now: float) -> bool:
        """Whether the last check's verdict still holds: ``poll(0)`` on the mountinfo descriptor, with a
        poll object of this call's own (the loop and the filing threads ask at once)."""
        fd = self.fd
        if mono_now >= self.until or fd is None:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        # a descriptor ``verify`` closed meanwhile answers POLLNVAL: changed, as any doubt is
        if poller.poll(0):
            self.until = 0.0
            return False
        return True

    def verify(self, layout: Layout) -> bool:
        """In a filing thread: whether the comm folder and its ``inbox/`` are on loop-safe mounts now (the
        verdict kept for ``fresh_s`` unless a mount changes). Off Linux, or when anything cannot be read:
        no."""
        if not sys.platform.startswith("linux"):
            return False
        with self.lock:
            if self._holds(time.monotonic()):
                return self.safe  # another thread's check, a moment ago
            self.until = 0.0
            self.safe = False
            if self.fd is not None:
                fd, self.fd = self.fd, None
                os.close(fd)
            try:
                fd = os.open(lockmanager.MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
            self.fd = fd  # opened before the table is read: a mount after this is seen by ``fresh``
            try:
                with open(lockmanager.MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
                    text = f.read()
                paths = [os.path.realpath(layout.home), os.path.realpath(layout.inbox_dir)]
            except OSError:
                return False
            safe = loop_safe(text, paths)
            self.until = time.monotonic() + self.fresh_s
            self.safe = safe and self._holds(time.monotonic())  # and no mount since the descriptor opened
            return self.safe
