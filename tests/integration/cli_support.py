"""Small helpers for the command tests: edit the registry by hand, stamp times, hold real locks.

Not a test module. The registry edits stand in for what another box or an old client would have written;
the lock holders are real processes holding a real ``flock`` or the real registry lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.conftest import Comm

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))


def stamp(ago: float = 0.0) -> str:
    """The ISO stamp of ``ago`` seconds before now."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago))


def skeleton(comm: Comm) -> Comm:
    """Create the empty registry the first command would create, so a snapshot sees only later writes."""
    from sotd.formats import registry as reg

    reg.ensure(comm.layout)
    return comm


def registry(comm: Comm) -> dict:
    with open(comm.layout.registry) as f:
        return json.load(f)


def put_registry(comm: Comm, doc: dict) -> None:
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")


def edit_row(comm: Comm, handle: str, **fields: object) -> None:
    """Set ``fields`` on an existing row (or create the row from them)."""
    doc = registry(comm)
    doc["agents"].setdefault(handle, {}).update(fields)
    put_registry(comm, doc)


def row(comm: Comm, handle: str, root: str, *, host: str = "testhost", ago: float = 0.0) -> dict:
    """A whole registry row as a join on another project would write it, ``ago`` seconds old."""
    t = stamp(ago)
    return {
        "host": host,
        "workspace_id": "",
        "repo": os.path.basename(root),
        "root": root,
        "expertise": [],
        "status": "idle",
        "joined": t,
        "last_seen": t,
    }


def snapshot(home: str) -> dict[str, bytes | None]:
    """Every entry under the comm folder: a file's bytes, a folder as None, a symlink as its target."""
    snap: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(home):
        for d in dirnames:
            snap[os.path.relpath(os.path.join(dirpath, d), home) + "/"] = None
        for fn in filenames:
            p = os.path.join(dirpath, fn)
            if os.path.islink(p):
                snap[os.path.relpath(p, home)] = ("-> " + os.readlink(p)).encode()
            else:
                with open(p, "rb") as f:
                    snap[os.path.relpath(p, home)] = f.read()
    return snap


FLOCK_HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""

REGLOCK_HOLDER = r"""
import sys
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock
with RegistryLock(Layout(sys.argv[1]), sys.argv[2], 10):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def _holding(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    with subprocess.Popen(
        [sys.executable, "-c", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    ) as p:  # leaving the block closes its stdout too
        try:
            assert p.stdout is not None
            assert p.stdout.readline() == "held\n", "the helper did not take its lock"
            yield p
        finally:
            if p.stdin is not None:
                p.stdin.close()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


@contextmanager
def inbox_lock_held(comm: Comm, handle: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holds an exclusive flock on ``inbox/<handle>.lock`` (a writer mid-append)."""
    with flock_held(comm.layout.inbox_lock(handle)) as p:
        yield p


@contextmanager
def flock_held(path: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holds an exclusive flock on ``path`` until the block ends."""
    with _holding([FLOCK_HOLDER, path]) as p:
        yield p


@contextmanager
def registry_lock_held(comm: Comm, host: str = "testhost") -> Iterator[subprocess.Popen[str]]:
    """Another live process holds the registry lock (``.registry.lock`` names it)."""
    with _holding([REGLOCK_HOLDER, comm.home, host]) as p:
        yield p
