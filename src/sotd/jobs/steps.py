"""Workspace steps (ocx.md 1.3, decision O6), in order, before the process starts.

``run_steps(run, target, carrier)`` runs the resolved steps of a run: ``directory`` (must not exist;
made 0700 and owned by the sandbox uid/gid), ``files`` (an export of a check-in's files), ``password`` (a
fresh random password for ``process.user`` on the addressed repository), ``clone`` (a new clone with its
own server-code, with that password saved), ``checkout`` (a working checkout of the clone). Everything a
step writes is then handed to the sandbox uid/gid. Fossil work goes through a ``Carrier`` so tests can
inject one; ``FossilCarrier`` shells out to ``fossil``.

A ``password`` step leaves the login's password changed (the run's clone keeps syncing with it), so a
node lets one run at a time rotate a given login on a given repository: ``PasswordClaims`` records the
holder until the run ends, and a second run asking for the same rotation meanwhile is ``Refused``.

Guarantee: a step failure raises ``StepFailed(index, kind, why)`` and leaves the workspace in place for
inspection; a path that ``realpath`` puts outside ``$$root$$`` is ``Refused`` before it is written.
What would break it: a symlink placed under ``$$root$$`` by an earlier run -- ``directory`` refuses a
pre-existing path and every later path is re-checked with ``realpath``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Protocol

from sotd.jobs.errors import Refused, StepFailed
from sotd.jobs.spec import inside

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.jobs.spec import Run

FOSSIL_TIMEOUT = 600.0


class PasswordClaims:
    """Which run holds the password it set for a login on a repository, until that run ends.

    A second ``password`` step for the same login and repository would change the password under the
    first run's clone, whose syncs would then fail: ``claim`` names the holder instead. Thread-safe; kept
    in memory and taken again by a restarted node for each run it adopts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], str] = {}

    @staticmethod
    def _key(repository: str, login: str) -> tuple[str, str]:
        return os.path.realpath(repository), login

    def claim(self, repository: str, login: str, run_hash: str) -> str | None:
        """Hold ``login`` on ``repository`` for ``run_hash``: None when held now (or already by this run),
        else the RUN-HASH that holds it."""
        key = self._key(repository, login)
        with self._lock:
            holder = self._held.setdefault(key, run_hash)
        return None if holder == run_hash else holder

    def release(self, run_hash: str) -> None:
        """Drop every claim of ``run_hash`` (idempotent)."""
        with self._lock:
            for key in [k for k, v in self._held.items() if v == run_hash]:
                del self._held[key]

    def holder(self, repository: str, login: str) -> str | None:
        with self._lock:
            return self._held.get(self._key(repository, login))


def claim_password(claims: PasswordClaims, run: Run, repository: str, run_hash: str) -> None:
    """Before the steps: take the claim a ``password`` step needs, or ``Refused`` naming its holder."""
    if not any(s.kind == "password" for s in run.workspace):
        return
    login = run.process.user
    other = claims.claim(repository, login, run_hash)
    if other is not None:
        raise Refused(
            f"the password of the login {login!r} on this repository belongs to run {other[:12]} until it"
            " ends: another password step now would break that run's clone"
        )


class Carrier(Protocol):
    """The Fossil operations the steps need; raise ``OSError``/``RuntimeError`` with a clear message."""

    def export(self, repo: str, ref: str, into: str) -> None:
        """Write the files of check-in ``ref`` of ``repo`` into the existing directory ``into``."""

    def set_password(self, repo: str, login: str, password: str) -> None:
        """Give ``login`` the password ``password`` on ``repo``."""

    def clone(self, url: str, file: str, login: str, password: str) -> None:
        """Clone ``url`` as ``login``/``password`` into the new repository ``file`` (fresh server-code),
        keeping the password for later syncs."""

    def checkout(self, repo: str, ref: str, dir: str) -> None:
        """Open a working checkout of ``ref`` of the clone ``repo`` in the existing directory ``dir``."""


@dataclass(frozen=True)
class Target:
    """The addressed repository: its file, the URL a new clone is made from (http, no credentials)."""

    repository: str
    url: str | None = None


@dataclass
class Prepared:
    """What the steps produced: the workspace, the fresh password (only this run knows it), the clone."""

    workspace: str
    password: str | None = None
    clone: str | None = None


def _run(
    argv: list[str], *, input: bytes | None = None, cwd: str | None = None, env: dict[str, str] | None = None
) -> None:
    try:
        p = subprocess.run(
            argv, input=input, capture_output=True, timeout=FOSSIL_TIMEOUT, check=False, cwd=cwd, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{argv[0]} {argv[1]}: {e}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{' '.join(argv[:2])} exited {p.returncode}: {tail[0]}")


def with_login(url: str, login: str, password: str) -> str:
    """``http://host/`` -> ``http://LOGIN:PW@host/`` (percent-encoded), replacing any login already there."""
    from urllib.parse import quote, urlsplit, urlunsplit

    u = urlsplit(url)
    host = u.netloc.rpartition("@")[2]
    return urlunsplit(
        (
            u.scheme,
            f"{quote(login, safe='')}:{quote(password, safe='')}@{host}",
            u.path or "/",
            u.query,
            u.fragment,
        )
    )


class FossilCarrier:
    """The real carrier: Debian's ``fossil`` (2.21), with the commands checked in ocx.md 1.3."""

    def __init__(self, fossil: str = "fossil") -> None:
        self.fossil = fossil

    def _env(self, home: str = "/nonexistent") -> dict[str, str]:
        # No user's ~/.fossil is read or written: FOSSIL_HOME is a private folder made for the one call
        # (``clone`` and ``open`` record the new repository and checkout in that global database).
        return {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "USER": "root", "FOSSIL_HOME": home}

    def _fossil(self, args: list[str], *, cwd: str | None = None) -> None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sotd-fossil-home-") as home:
            _run([self.fossil, *args], cwd=cwd, env=self._env(home))

    def export(self, repo: str, ref: str, into: str) -> None:
        try:
            tb = subprocess.run(
                [self.fossil, "tarball", ref, "-", "--name", ".", "-R", repo],
                capture_output=True, timeout=FOSSIL_TIMEOUT, check=False, env=self._env(),
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"fossil tarball: {e}") from None
        if tb.returncode != 0 or not tb.stdout:
            raise RuntimeError(
                f"fossil tarball {ref} exited {tb.returncode}: {tb.stderr.decode(errors='replace').strip()}"
            )
        _run(
            ["tar", "-xzf", "-", "-C", into, "--no-same-owner", "--no-same-permissions"],
            input=tb.stdout,
        )

    def set_password(self, repo: str, login: str, password: str) -> None:
        self._fossil(["user", "password", login, password, "-R", repo])

    def clone(self, url: str, file: str, login: str, password: str) -> None:
        # The password rides in the URL (fossil has no other non-interactive way); _run never repeats
        # argv beyond its first two words in an error, so it does not reach ended.why.
        self._fossil(["clone", "--save-http-password", "--no-open", with_login(url, login, password), file])

    def checkout(self, repo: str, ref: str, dir: str) -> None:
        self._fossil(["open", repo, ref, "--workdir", dir], cwd=dir)


def _real_inside(path: str, top: str, what: str) -> None:
    if not inside(os.path.realpath(path), os.path.realpath(top)):
        raise Refused(f"{what} resolves outside {top}: {os.path.realpath(path)}")


def _searchable_dirs(path: str) -> None:
    """Make ``path`` and its missing parents 0755 whatever the umask (the daemon runs under 077, and
    the sandbox uid must reach the workspace through them)."""
    missing: list[str] = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        os.mkdir(d, 0o755)
        os.chmod(d, 0o755)  # noqa: S103 -- the sandbox uid must search its way to the workspace


def chown_tree(top: str, uid: int, gid: int) -> None:
    """Hand ``top`` and everything below it to ``uid``/``gid`` (never following a symlink)."""
    os.lchown(top, uid, gid)
    for d, dirs, files in os.walk(top, followlinks=False):
        for n in dirs + files:
            os.lchown(os.path.join(d, n), uid, gid)


def run_steps(run: Run, root: str, target: Target, carrier: Carrier) -> Prepared:
    """Run the resolved ``run.workspace`` in order; ``root`` is ``$$root$$``. See the module docstring."""
    sb, login = run.sandbox, run.process.user
    prep: Prepared | None = None
    for i, s in enumerate(run.workspace):
        try:
            if s.kind == "directory":
                assert s.at is not None
                _real_inside(os.path.dirname(s.at), root, f"run.workspace[{i}].at")
                if os.path.lexists(s.at):
                    raise StepFailed(i, s.kind, f"the workspace {s.at} already exists")
                _searchable_dirs(os.path.dirname(s.at))
                os.mkdir(s.at, 0o700)
                os.chmod(s.at, 0o700)
                os.chown(s.at, sb.uid, sb.gid)
                prep = Prepared(workspace=s.at)
                continue
            assert prep is not None
            if s.kind == "password":
                prep.password = secrets.token_urlsafe(24)
                carrier.set_password(target.repository, login, prep.password)
                continue
            assert s.into is not None
            _real_inside(os.path.dirname(s.into), prep.workspace, f"run.workspace[{i}].into")
            os.makedirs(os.path.dirname(s.into), mode=0o755, exist_ok=True)
            if s.kind == "clone":
                if not target.url:
                    raise StepFailed(i, s.kind, "this node has no URL to clone the repository from")
                assert prep.password is not None
                carrier.clone(target.url, s.into, login, prep.password)
                prep.clone = s.into
            else:
                os.makedirs(s.into, mode=0o755, exist_ok=False)
                assert s.of is not None
                if s.kind == "files":
                    carrier.export(target.repository, s.of, s.into)
                else:
                    assert prep.clone is not None
                    carrier.checkout(prep.clone, s.of, s.into)
        except (StepFailed, Refused):
            raise
        except (OSError, RuntimeError) as e:
            raise StepFailed(i, s.kind, f"step {i} ({s.kind}) failed: {e}") from None
    assert prep is not None
    try:
        chown_tree(prep.workspace, sb.uid, sb.gid)
    except OSError as e:
        raise StepFailed(
            len(run.workspace) - 1, run.workspace[-1].kind, f"cannot hand the workspace to uid {sb.uid}: {e}"
        ) from None
    return prep


def bring_homes(homes: tuple[str, ...], workspace: str, uid: int, gid: int) -> dict[str, str]:
    """Copy each home entry into ``WORKSPACE/home/<name>``, owned by the uid (O7); returns source -> copy.

    A missing entry is ``Refused`` (the node cannot provide that sandbox)."""
    out: dict[str, str] = {}
    if not homes:
        return out
    home = os.path.join(workspace, "home")
    os.makedirs(home, mode=0o700, exist_ok=True)
    for h in homes:
        if not os.path.exists(h):
            raise Refused(f"the home entry {h} does not exist on this node")
        dest = os.path.join(home, os.path.basename(h.rstrip("/")))
        if os.path.isdir(h):
            shutil.copytree(h, dest, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(h, dest, follow_symlinks=False)
        out[h] = dest
    chown_tree(home, uid, gid)
    return out
