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

``check_steps`` (before any step; the rule is ``steps_refusal``, issue 21): a run may never rotate or
receive the password of a login the node itself uses on the repository (``Target.node_logins``); a
``password`` step for a login the repository lacks, and a ``clone`` step with no server of the node's
clone (``Target.url``), are ``Refused`` naming the commands that set them up.

Every path goes through descriptors (``sotd.jobs.paths``): ``directory`` only below folders owned by
root and writable by no one else, made and handed over with ``mkdir``/``fchmod``/``fchown`` relative to a
held parent; ``files`` extracts as the sandbox uid into a held folder (``/proc/self/fd/N``); ``clone`` and
``checkout`` run fossil as the sandbox uid; passwords reach fossil through ``--args FILE``, never argv.
Before ``files`` the node pulls the clone (``Target.pull``) and the name is resolved to one check-in.
``bring_homes`` copies the node's home entries into ``WORKSPACE/home`` as new entries only
(``paths.copy_in_at``); anything a step already put at ``home/<name>`` is ``Refused`` (``home_refusal``,
issue 24), so a check-in's symlink there never makes root write, create or chmod outside.

Guarantee: a step failure raises ``StepFailed(index, kind, why)`` and leaves the workspace in place for
inspection; a path that is, or passes through, a symlink is ``Refused`` before anything is written
through it, and nothing running as root writes into a folder a sandbox can change. What would break
it: a caller using a path by name after the check (only ``clone``/``checkout`` take paths, and they run
as the sandbox uid), or a ``$$root$$`` a sandbox can write (``make_workspace`` refuses it).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from sotd.errors import SotdError
from sotd.jobs import paths
from sotd.jobs.errors import Refused, StepFailed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.jobs.spec import RunSpec

FOSSIL_TIMEOUT = 600.0
RESOLVE_TRIES = 4  # fossil whatis, when it cannot read the clone (busy: another run's pull into it)
RESOLVE_PAUSE = 0.3


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


CLONE_PORT_HINT = 8081


def steps_refusal(kinds: tuple[str, ...], user: str, target: Target, has_login: bool | None) -> str | None:
    """Why the node cannot do a run's ``password``/``clone`` steps at all, before any step runs; ``None``
    when it can. ``kinds`` are the run's step kinds in order, ``user`` its ``process.user``, ``has_login``
    whether that login is in the clone's user table (``None``: not known). Pure (a table test)."""
    where = f"this node's clone {target.name!r}" if target.name else "this node's clone"
    if "password" in kinds and user in target.node_logins:
        return (
            f"run.process.user {user!r} is a login this node itself uses on {where}: a password step would"
            " rotate its password and hand it to the run; ask for another login"
        )
    if "password" in kinds and has_login is False:
        repo = target.repository
        return (
            f"the password step sets the password of the login {user!r} in {where}, which has no such"
            f" login; the node's operator adds it with: fossil user new {user} {user}@localhost"
            f" unused-password -R {repo} && fossil user capabilities {user} gio -R {repo}"
        )
    if "clone" in kinds and not target.url:
        pol = target.policy_path or "the node policy file"
        name = target.name or "NAME"
        return (
            f"the clone step needs a server of {where} (where the password step sets the password):"
            f" start one with: fossil server --localhost --port {CLONE_PORT_HINT} {target.repository}"
            f' and add [runs.clone_urls] {name} = "http://127.0.0.1:{CLONE_PORT_HINT}/" to {pol}'
        )
    return None


def check_steps(run: RunSpec, target: Target) -> None:
    """``Refused`` with ``steps_refusal``'s reason, asking the clone's user table only when it matters."""
    kinds = tuple(s.kind for s in run.workspace)
    user = run.process.user
    known = target.has_login(user) if "password" in kinds and target.has_login is not None else None
    why = steps_refusal(kinds, user, target, known)
    if why is not None:
        raise Refused(why)


def claim_password(claims: PasswordClaims, run: RunSpec, repository: str, run_hash: str) -> None:
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
    """The Fossil operations the steps need; raise ``OSError``/``RuntimeError`` with a clear message.

    ``ids`` is the sandbox ``(uid, gid)`` the work that writes into the workspace runs as (``None``: as
    this process); ``into`` for ``export`` is ``/proc/self/fd/N``, a folder the caller holds open."""

    def export(self, repo: str, ref: str, into: str, ids: tuple[int, int] | None = None) -> None:
        """Write the files of check-in ``ref`` of ``repo`` into the existing directory ``into``."""

    def set_password(self, repo: str, login: str, password: str) -> None:
        """Give ``login`` the password ``password`` on ``repo``."""

    def clone(
        self, url: str, file: str, login: str, password: str, ids: tuple[int, int] | None = None
    ) -> None:
        """Clone ``url`` as ``login``/``password`` into the new repository ``file`` (fresh server-code),
        keeping the password for later syncs."""

    def checkout(self, repo: str, ref: str, dir: str, ids: tuple[int, int] | None = None) -> None:
        """Open a working checkout of ``ref`` of the clone ``repo`` in the existing directory ``dir``."""

    def resolve(self, repo: str, ref: str) -> str | None:
        """The full hash of the check-in ``ref`` names in ``repo``, or ``None`` when it names none."""


@dataclass(frozen=True)
class Target:
    """The addressed repository: its file, the URL a new clone is made from (http, no credentials), and
    how the node pulls its check-ins before a ``files`` step (``None``: the file is the hub itself)."""

    repository: str
    url: str | None = None
    pull: Callable[[], None] | None = None
    name: str = ""  # the clone's name in the node's configuration (for refusals)
    policy_path: str = ""  # the node policy file (where runs.clone_urls is written)
    node_logins: frozenset[str] = frozenset()  # the logins the node itself syncs, posts or acts as here
    has_login: Callable[[str], bool] | None = None  # is a login in this clone's user table?


@dataclass
class Prepared:
    """What the steps produced: the workspace, the fresh password (only this run knows it), the clone."""

    workspace: str
    password: str | None = None
    clone: str | None = None
    checkins: list[dict[str, object]] = field(default_factory=list)  # started.checkins


def _run(
    argv: list[str],
    *,
    input: bytes | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    ids: tuple[int, int] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> None:
    """Run ``argv`` in a new session (no controlling terminal), as ``ids`` when given."""
    drop: dict[str, object] = {}
    if ids is not None and ids != (os.geteuid(), os.getegid()):
        drop = {"user": ids[0], "group": ids[1], "extra_groups": []}
    try:
        p = subprocess.run(
            argv, input=input, capture_output=True, timeout=FOSSIL_TIMEOUT, check=False, cwd=cwd, env=env,
            start_new_session=True, pass_fds=pass_fds, **drop,  # type: ignore[call-overload]
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{argv[0]} {argv[1]}: {e}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{' '.join(argv[:2])} exited {p.returncode}: {tail[0]}")


def fd_path(fd: int) -> str:
    """``/proc/self/fd/N``: a held folder named so that a child given the same descriptor reaches it
    without resolving any path again."""
    return f"/proc/self/fd/{fd}"


def _fd_of(path: str) -> tuple[int, ...]:
    head, _, n = path.rpartition("/")
    return (int(n),) if head == "/proc/self/fd" and n.isdigit() else ()


def _login_pw(repo: str, login: str) -> str | None:
    import sqlite3
    from urllib.parse import quote

    db = sqlite3.connect(f"file:{quote(os.path.abspath(repo))}?mode=ro", uri=True, timeout=10.0)
    try:
        row = db.execute("SELECT pw FROM user WHERE login = ?", (login,)).fetchone()
    finally:
        db.close()
    return None if row is None else str(row[0])


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
    """The real carrier: Debian's ``fossil`` (2.21), with the commands checked in ocx.md 1.3.

    What writes into a workspace (``tar`` of an export, ``clone``, ``open``) runs as the sandbox uid/gid,
    so a path redirected under it could give no more than the sandbox has. Passwords reach fossil through
    ``--args FILE`` (a 0600 file in the call's private folder), never its command line."""

    def __init__(self, fossil: str = "fossil") -> None:
        self.fossil = fossil

    def _env(self, home: str = "/nonexistent") -> dict[str, str]:
        # No user's ~/.fossil is read or written: FOSSIL_HOME is a private folder made for the one call
        # (``clone`` and ``open`` record the new repository and checkout in that global database).
        return {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "USER": "root", "FOSSIL_HOME": home}

    def _fossil(
        self, args: list[str], *, cwd: str | None = None, ids: tuple[int, int] | None = None,
        secret: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        """``fossil ARGS`` with a private ``FOSSIL_HOME``; ``secret`` (a password, a URL carrying one) is
        written one a line to a 0600 file in that folder and given as ``--args FILE`` where ``args`` holds
        the word ``--args``: fossil reads it from there, so no secret is on a command line."""
        import tempfile

        if any("\n" in x or "\r" in x for x in secret):
            raise RuntimeError("a secret for fossil holds a line break")
        with tempfile.TemporaryDirectory(prefix="sotd-fossil-home-") as home:
            argv = [self.fossil, *args]
            if secret:
                path = os.path.join(home, "args")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write("".join(x + "\n" for x in secret))
                if ids is not None:
                    os.chown(path, ids[0], ids[1])
                argv[argv.index("--args") + 1 : argv.index("--args") + 1] = [path]
            if ids is not None:
                os.chown(home, ids[0], ids[1])
            _run(argv, cwd=cwd, env=self._env(home), ids=ids)

    def export(self, repo: str, ref: str, into: str, ids: tuple[int, int] | None = None) -> None:
        try:
            tb = subprocess.run(
                [self.fossil, "tarball", ref, "-", "--name", ".", "-R", repo],
                capture_output=True, timeout=FOSSIL_TIMEOUT, check=False, env=self._env(),
                start_new_session=True,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"fossil tarball: {e}") from None
        if tb.returncode != 0 or not tb.stdout:
            raise RuntimeError(
                f"fossil tarball {ref} exited {tb.returncode}: {tb.stderr.decode(errors='replace').strip()}"
            )
        _run(
            ["tar", "-xzf", "-", "-C", into, "--no-same-owner", "--no-same-permissions", "--no-overwrite-dir"],
            input=tb.stdout, ids=ids, pass_fds=_fd_of(into), env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip

    def set_password(self, repo: str, login: str, password: str) -> None:
        before = _login_pw(repo, login)
        self._fossil(["user", "password", "--args", "-R", repo], secret=(login, password))
        if _login_pw(repo, login) == before:
            raise RuntimeError(f"fossil user password left the password of {login!r} unchanged")

    def clone(
        self, url: str, file: str, login: str, password: str, ids: tuple[int, int] | None = None
    ) -> None:
        # The password rides in the URL, which fossil reads from --args FILE (never argv); _run never
        # repeats argv beyond its first two words in an error, so it does not reach ended.why either.
        self._fossil(
            ["clone", "--save-http-password", "--no-open", "--args", file],
            ids=ids, secret=(with_login(url, login, password),),
        )  # fmt: skip

    def checkout(self, repo: str, ref: str, dir: str, ids: tuple[int, int] | None = None) -> None:
        self._fossil(["open", repo, ref, "--workdir", dir], cwd=dir, ids=ids)

    def resolve(self, repo: str, ref: str) -> str | None:
        # ``whatis`` exits 0 for a name it does not know ("unknown: NAME"); a non-zero exit is a failure
        # to read the clone (SQLITE_BUSY while another run's step pulls into it): tried again a few
        # times, then an error naming the exit, never read as "no such check-in"
        for attempt in range(RESOLVE_TRIES):
            try:
                p = subprocess.run(
                    [self.fossil, "whatis", ref, "-R", repo], capture_output=True, timeout=FOSSIL_TIMEOUT,
                    check=False, env=self._env(), start_new_session=True,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as e:
                raise RuntimeError(f"fossil whatis: {e}") from None
            if p.returncode == 0:
                return checkin_hash(p.stdout.decode(errors="replace"))
            if attempt + 1 < RESOLVE_TRIES:
                time.sleep(RESOLVE_PAUSE)
        tail = (p.stderr or p.stdout).decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"fossil whatis exited {p.returncode}: {tail[0]}")


def checkin_hash(whatis: str) -> str | None:
    """Pure: the full hash ``fossil whatis`` names when it names exactly one check-in, else ``None``."""
    fields: dict[str, list[str]] = {}
    for line in whatis.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            fields.setdefault(k.strip(), []).append(v.strip())
    art, kind = fields.get("artifact", []), fields.get("type", [])
    if len(art) != 1 or len(kind) != 1 or not kind[0].startswith("Check-in"):
        return None
    h = art[0].split()[0] if art[0] else ""
    return h if len(h) in (40, 64) and all(c in "0123456789abcdef" for c in h) else None


def chown_tree(top: str, uid: int, gid: int) -> None:
    """Hand ``top`` and everything below it to ``uid``/``gid`` (through descriptors; no symlink followed)."""
    paths.chown_tree_fd(top, uid, gid, "the workspace")


def run_steps(
    run: RunSpec,
    root: str,
    target: Target,
    carrier: Carrier,
    on_workspace: Callable[[str], None] | None = None,
) -> Prepared:
    """Run the resolved ``run.workspace`` in order; ``root`` is ``$$root$$``. See the module docstring.
    ``on_workspace(at)`` runs right after the first ``directory`` step made the workspace, before anything
    is written into it (``disk.Disks.make`` mounts its own file system there)."""
    sb, login = run.sandbox, run.process.user
    ids = (sb.uid, sb.gid)
    prep: Prepared | None = None
    pulled = False
    for i, s in enumerate(run.workspace):
        what = f"run.workspace[{i}]"
        try:
            if s.kind == "directory":
                assert s.at is not None
                try:
                    paths.make_workspace(root, s.at, sb.uid, sb.gid, what + ".at")
                except FileExistsError:
                    raise StepFailed(i, s.kind, f"the workspace {s.at} already exists") from None
                if prep is None and on_workspace is not None:
                    on_workspace(s.at)
                prep = Prepared(workspace=s.at)
                continue
            assert prep is not None
            if s.kind == "password":
                prep.password = secrets.token_urlsafe(24)
                carrier.set_password(target.repository, login, prep.password)
                continue
            assert s.into is not None
            if s.kind == "clone":
                if not target.url:
                    raise StepFailed(i, s.kind, "this node has no URL to clone the repository from")
                assert prep.password is not None
                os.close(paths.make_below(prep.workspace, s.into, sb.uid, sb.gid, what + ".into", last=False))
                carrier.clone(target.url, s.into, login, prep.password, ids)
                prep.clone = s.into
                continue
            assert s.of is not None
            source = target.repository if s.kind == "files" else prep.clone
            assert source is not None
            if s.kind == "files" and target.pull is not None and not pulled:
                target.pull()  # the clone's check-ins as its remote has them now
                pulled = True
            checkin = carrier.resolve(source, s.of)
            if checkin is None:
                raise Refused(f"{what}.of names no check-in of this clone, even after a pull: {s.of!r}")
            prep.checkins.append({"step": i, "of": s.of, "checkin": checkin})
            try:
                fd = paths.make_below(prep.workspace, s.into, sb.uid, sb.gid, what + ".into", last=True)
            except FileExistsError:
                raise StepFailed(i, s.kind, f"step {i} ({s.kind}): {s.into} already exists") from None
            try:
                if s.kind == "files":
                    carrier.export(source, checkin, fd_path(fd), ids)
                else:
                    carrier.checkout(source, checkin, s.into, ids)
            finally:
                os.close(fd)
        except (StepFailed, Refused):
            raise
        except SotdError as e:  # the node's pull (sotd.ocx errors are SotdErrors)
            raise StepFailed(i, s.kind, f"step {i} ({s.kind}) failed: {e.message}") from None
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


def home_refusal(home_entry: str, shown: str, kind: str | None, seen: bool) -> str | None:
    """Why the home entry ``home_entry`` cannot be copied to ``shown`` (``WORKSPACE/home/<name>``), where
    ``kind`` is what a workspace step already put there (``None``: nothing) and ``seen`` says an earlier
    entry of this run has that name; ``None`` when it can. Pure (a table test)."""
    if seen:
        return f"the home entry {home_entry} has the same name as another home entry of this run: refused"
    if kind is not None:
        return (
            f"the home entry {home_entry} cannot be copied into the workspace: {shown} is already there"
            f" ({kind}, put there by a workspace step): refused"
        )
    return None


def bring_homes(homes: tuple[str, ...], workspace: str, uid: int, gid: int) -> dict[str, str]:
    """Copy each home entry into ``WORKSPACE/home/<name>``, owned by the uid (O7); returns source -> copy.

    ``WORKSPACE/home`` is made, or opened when a step made it, without following a link; anything
    already at ``home/<name>`` (a link a check-in holds above all) is ``Refused`` (``home_refusal``)
    before a byte is copied, and the copy itself is ``paths.copy_in_at``: every entry created new and set
    (mode, owner, times) through its own descriptor, so root never writes through a path the workspace
    controls. A missing entry, or one that is or passes through a symlink, is ``Refused`` too (the node
    cannot provide that sandbox)."""
    out: dict[str, str] = {}
    if not homes:
        return out
    home = os.path.join(workspace, "home")
    what = "the workspace's home"
    try:
        try:
            fd = paths.make_below(workspace, home, uid, gid, what, last=True)
        except FileExistsError:
            fd = paths.open_dir(home, what)
    except OSError as e:
        raise Refused(f"{what} {home} cannot be opened as a folder: {e.strerror}") from None
    try:
        seen: set[str] = set()
        for h in homes:
            name = os.path.basename(os.path.normpath(h))
            shown = os.path.join(home, name)
            why = home_refusal(h, shown, paths.entry_kind_at(fd, name), name in seen)
            if why is not None:
                raise Refused(why)
            seen.add(name)
            try:
                paths.copy_in_at(h, fd, uid, gid, "the home entry")
            except FileNotFoundError:
                raise Refused(f"the home entry {h} does not exist on this node") from None
            except OSError as e:  # a name that appeared meanwhile (a race), or an unreadable entry
                raise Refused(f"the home entry {h} could not be copied to {shown}: {e.strerror}") from None
            out[h] = shown
    finally:
        os.close(fd)
    return out
