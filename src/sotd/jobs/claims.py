"""Workspace claims (issue 24): no run's workspace lies inside another's, or holds one.

``claim_workspace(STATE, RUN-HASH, at)`` refuses a workspace nested with a recorded one (whatever the
uids and modes: a uid-0 sandbox owns its workspace as root), else records it in
``STATE/.workspaces/<RUN-HASH>``; deciding and recording are one act under an ``flock`` of
``STATE/.workspaces/.lock``, so of two racing runs the second sees the first. ``release_workspace`` drops
a claim (a run refused after it, ended, or found dead at a restart); ``keep_claims`` at a node's start
drops all but the runs it looks at again. ``nested_in`` is the pure decision. What would break it: a claim
recorded before the run passed its checks (a refused run must record nothing), or one never released
(then it blocks every later run below it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from sotd import fsprim
from sotd.jobs import placeholders
from sotd.jobs.errors import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Mapping

WORKSPACES = ".workspaces"  # STATE/.workspaces/<RUN-HASH>: the workspace each run's directory step names
CLAIMS_LOCK = ".lock"  # STATE/.workspaces/.lock: flock'd while a claim is decided, recorded or dropped


def nested_in(at: str, others: Mapping[str, str]) -> tuple[str, str] | None:
    """Pure: ``(run hash, workspace)`` of another run whose workspace holds ``at`` or lies inside it."""
    for h, w in sorted(others.items()):
        if placeholders.inside(at, w) or placeholders.inside(w, at):
            return h, w
    return None


@contextlib.contextmanager
def _claims_locked(state_dir: str) -> Iterator[str]:
    """``STATE/.workspaces/``, held under an exclusive ``flock`` of its ``.lock`` (threads and processes
    of one node each see a claim whole, and never two claims decided at once)."""
    d = os.path.join(state_dir, WORKSPACES)
    os.makedirs(d, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(d, CLAIMS_LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield d
    finally:
        os.close(fd)


def _claims(d: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in os.listdir(d):
        if name.startswith("."):
            continue
        try:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                out[name] = f.read()
        except OSError:
            continue
    return out


def claim_workspace(state_dir: str, run_hash: str, at: str | None) -> None:
    """``Refused`` when this run's workspace would lie inside another run's recorded one (or hold one),
    whatever the uids and modes (a uid-0 sandbox owns its workspace as root); else record it in
    ``STATE/.workspaces/<RUN-HASH>``. Decided and recorded under one lock, so of two runs racing for
    nested workspaces the second sees the first; a refused run records nothing (issue 24). The claim
    lasts until ``release_workspace``: the run refused after it, ended, or found dead at a restart."""
    if not at:
        return
    with _claims_locked(state_dir) as d:
        others = {h: w for h, w in _claims(d).items() if h != run_hash}
        hit = nested_in(at, others)
        if hit is not None:
            raise Refused(
                f"the workspace {at} would lie inside, or hold, run {hit[0][:12]}'s workspace {hit[1]}"
            )
        with open(os.path.join(d, run_hash), "w", encoding="utf-8") as f:
            f.write(at)


def release_workspace(state_dir: str, run_hash: str) -> None:
    """Drop the workspace claim of ``run_hash`` (idempotent: a run with none is fine)."""
    d = os.path.join(state_dir, WORKSPACES)
    if not os.path.isdir(d):
        return
    with _claims_locked(state_dir) as d:
        fsprim.unlink_quiet(os.path.join(d, run_hash))


def keep_claims(state_dir: str, live: Collection[str]) -> list[str]:
    """At a node's start: drop every workspace claim but those of ``live`` (the runs it is about to look
    at again, which drop their own when they turn out dead); the RUN-HASHes dropped."""
    d = os.path.join(state_dir, WORKSPACES)
    if not os.path.isdir(d):
        return []
    with _claims_locked(state_dir) as d:
        gone = sorted(h for h in _claims(d) if h not in live)
        for h in gone:
            fsprim.unlink_quiet(os.path.join(d, h))
    return gone
