"""OCX layer 3 on a node: the ``run`` and ``stop`` readers between ``sotd.ocx`` and ``sotd.jobs``.

``Runs(node, settings)`` registers two readers on an ``sotd.ocx.node.Node``:

- **run**: a ``run`` whose ``clone`` is the server-code of the clone it arrived in (read fresh from the
  repository) is this node's. Any other clone passes it by and writes nothing. For a run that is this
  node's: ``to`` must be a login of the clone's user table that the configuration acts as, else it ends
  ``refused``. The run then goes to ``sotd.jobs.runner.Run`` in a thread of its own: node policy, steps,
  sandbox, limits, process. Its answers go where the run is, with ``Node.answer``: one ``started`` (when
  the process started), then one ``ended`` (O9). Only after ``ended`` is written are the
  ``unversioned_files`` stored below the run's own prefix (``ocx/out/<RUN-HASH>/<as>``; an ``as`` under
  ``ocx/`` is refused) and the logs as ``ocx/logs/<RUN-HASH>/stdout`` and ``…/stderr``, and the clone
  synced, so a reader checks what arrives against the hashes on record. Only senders the policy lists
  for the clone (``[runs.senders]``) get their runs taken; any other's ends ``refused``. A run for
  another clone's server-code is not answered, and logged in one line.
- **stop**: a ``stop`` answering a run this node is running stops it (the whole tree is killed; the run
  ends ``stopped``) when it comes from the run's sender, the run's ``to``, or a login with admin (``a``)
  or setup (``s``) capability in the clone's user table (O10). Any other is logged and ignored.

``recover()`` (once, before the first sync): every run this node accepted and did not finish answering is
looked at again. A run whose processes still live is adopted and supervised again; one whose processes are
gone ends ``lost``; one that ended while the node was down gets its recorded ``ended``.

**Sessions (O11).** A run with ``session: true`` is prepared by the executor like any run (policy, steps,
homes, sandbox argv), then handed to a ``SessionHost`` (the daemon's terminal rows, ``sotd.daemon.ocxnode``)
as one row running ``prlimit … python -I -m sotd.jobs.launch SPEC`` (which opens the binds and the
seccomp filter, then execs ``setpriv … bwrap … COMMAND``). Posts from a ``hears`` login answering the run
(or an answer of it) are filed as sot-comm mail to the session's handle ``ocx-<RUN-HASH[:16]>`` (so the
wake wakes it) and mirrored into ``$$workspace$$/inbox.jsonl``; ``deliveries`` is ``start``, ``new`` or
``none``. Files the session writes into ``$$workspace$$/outbox/`` are posted as OCX messages answering the
run. A permitted ``stop`` despawns the row (``ended stopped``); the wall limit too (``timed_out``). Without
a host (``sotd ocx node``), sessions end ``refused``. After a restart, a session whose row still lives is
adopted (``Session.adopt``: deliveries, outbox, stop and wall resume); one whose row is gone ends ``lost``.

Settings come from the node's policy file (``RunSettings``, ``load_settings``): ``$SOT_OCX_POLICY``, else
``ocx-policy.toml`` beside the node's ``ocx.toml``. No file: the node runs nothing (every run addressed to
it ends ``refused``). State: ``STATE/jobs/<RUN-HASH>/`` (the executor's) and ``STATE/answers/<RUN-HASH>.json``
(which answers were written: ``accepted`` -> ``started`` -> ``ended`` -> ``done``).

This module imports ``sotd.ocx``, ``sotd.jobs``, ``sotd.errors``, ``sotd._clock`` and the standard library;
the CLI (``sotd ocx node``) and the daemon (``sotd.daemon.ocxnode``) import it.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import stat
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol
from urllib.parse import unquote

from sotd import _clock
from sotd.errors import SotdError
from sotd.jobs import limits as lim
from sotd.jobs import paths, runner, seccomp, spec
from sotd.jobs import sandbox as sbx
from sotd.jobs import steps as stp
from sotd.jobs.errors import PolicyError, Refused
from sotd.ocx import envelope, fossil
from sotd.ocx.errors import InvalidMessage, OcxConfigError, OcxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sotd.ocx.config import CloneConfig, NodeConfig
    from sotd.ocx.node import Delivery, Node

log = logging.getLogger("sotd.ocx")

POLICY_NAME = "ocx-policy.toml"
READER_RUN = "sotd.ocxrun.run"
READER_STOP = "sotd.ocxrun.stop"
ADMIN_CAPS = frozenset("as")
PHASES = ("accepted", "started", "ended", "done")
PRLIMIT = "/usr/bin/prlimit"
SH = "/bin/sh"
# a session row's first command: join the run's cgroups (each cgroup.procs named before `--`), then exec
# the rest; everything the session starts afterwards is born inside them
JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done; shift; exec "$@"'
SESSION_POLL_S = 0.3
SESSION_INBOX = "inbox.jsonl"
SESSION_OUTBOX = "outbox"
# kinds a session may not post: only the node answers a run with these, and a session asks for no runs
NODE_KINDS = frozenset(("run", "started", "ended", "stop"))


def log_name(run_hash: str, which: str) -> str:
    """The unversioned name a run's log is stored under: ``ocx/logs/<RUN-HASH>/<stdout|stderr>``."""
    return f"ocx/logs/{run_hash}/{which}"


# ------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class RunSettings:
    """The node policy file: where runs live, what they may do, and how a ``clone`` step reaches a clone.

    ``path`` is ``None`` when there is no policy file: then the node runs nothing."""

    path: str | None
    policy: spec.Policy
    root: str
    state: str
    release: str | None = None
    clone_urls: Mapping[str, str] = field(default_factory=dict)
    senders: Mapping[str, frozenset[str]] = field(default_factory=dict)


def policy_path(config: NodeConfig, environ: Mapping[str, str]) -> str:
    """``$SOT_OCX_POLICY``, else ``ocx-policy.toml`` beside the node's configuration file."""
    if environ.get("SOT_OCX_POLICY"):
        return os.path.abspath(environ["SOT_OCX_POLICY"])
    return os.path.join(os.path.dirname(config.path), POLICY_NAME)


def parse_settings(doc: Mapping[str, object], path: str) -> RunSettings:
    """The policy file's tables (already read with ``tomllib``): ``[runs]`` and ``[jobs.policy]``."""
    base = os.path.dirname(os.path.abspath(path))
    extra = sorted(set(doc) - {"runs", "jobs"})
    if extra:
        raise OcxConfigError(f"ocx: {path}: unknown table {extra[0]!r} (known: [runs], [jobs.policy])")
    runs = doc.get("runs", {})
    if not isinstance(runs, dict):
        raise OcxConfigError(f"ocx: {path}: [runs] must be a table")
    bad = sorted(set(runs) - {"root", "state", "release", "clone_urls", "senders"})
    if bad:
        raise OcxConfigError(f"ocx: {path}: [runs] has an unknown key {bad[0]!r}")

    def where(key: str, default: str | None) -> str | None:
        v = runs.get(key, default)
        if v is None:
            return None
        if not isinstance(v, str) or not v:
            raise OcxConfigError(f"ocx: {path}: runs.{key} must be a non-empty path")
        # the real path: the executor walks these without following links, so a link the operator put
        # on the way (/var/run -> /run) is resolved once, here, from the trusted configuration
        return os.path.realpath(os.path.join(base, v))

    urls = runs.get("clone_urls", {})
    if not isinstance(urls, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith(("http://", "https://"))
        for k, v in urls.items()
    ):
        raise OcxConfigError(f"ocx: {path}: runs.clone_urls must map clone names to http(s) URLs")
    senders = parse_senders(runs.get("senders", {}), path)
    jobs = doc.get("jobs", {})
    table = jobs.get("policy", {}) if isinstance(jobs, dict) else None
    if not isinstance(table, dict):
        raise OcxConfigError(f"ocx: {path}: [jobs.policy] must be a table")
    try:
        policy = spec.parse_policy(table)
    except PolicyError as e:
        raise OcxConfigError(f"ocx: {path}: {e.message}") from None
    root = where("root", "ocx-root")
    state = where("state", "ocx-state")
    assert root is not None and state is not None
    return RunSettings(
        path=os.path.abspath(path),
        policy=policy,
        root=root,
        state=state,
        release=where("release", None),
        clone_urls={str(k): str(v) for k, v in urls.items()},
        senders=senders,
    )


def parse_senders(v: object, path: str) -> dict[str, frozenset[str]]:
    """``[runs.senders]``: clone name -> the logins whose runs the node takes on that clone."""
    if not isinstance(v, dict) or not all(
        isinstance(k, str) and isinstance(x, list) and all(envelope.is_login(y) for y in x)
        for k, x in v.items()
    ):
        raise OcxConfigError(f"ocx: {path}: runs.senders must map clone names to lists of logins")
    return {str(k): frozenset(str(y) for y in x) for k, x in v.items()}


def sender_refusal(senders: Mapping[str, frozenset[str]], clone: str, sender: str) -> str | None:
    """Why the node policy takes no run from ``sender`` on ``clone`` (``None``: it does). No list for the
    clone takes runs from no one."""
    allowed = senders.get(clone)
    if not allowed:
        return f"this node takes runs on the clone {clone!r} from no login (its policy lists none in runs.senders)"
    if sender not in allowed:
        return f"this node does not take runs on the clone {clone!r} from the login {sender!r}"
    return None


def load_settings(config: NodeConfig, environ: Mapping[str, str]) -> RunSettings:
    """Read the policy file named by ``policy_path``. No file: settings under which the node runs nothing
    (its state still beside the configuration, so a restart can end what an earlier policy started)."""
    path = policy_path(config, environ)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        base = os.path.dirname(config.path)
        return RunSettings(
            None, spec.Policy(), os.path.join(base, "ocx-root"), os.path.join(base, "ocx-state")
        )
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise OcxConfigError(f"ocx: cannot read the node policy {path}: {e}") from None
    return parse_settings(doc, path)


# ------------------------------------------------------------------------------------------------ runs


def _hash_name(policy: str | None) -> str:
    return "sha1" if envelope.algorithm_for_policy(policy) == "sha1" else "sha3_256"


def _write_json(path: str, obj: object) -> None:
    tmp = f"{path}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Active:
    """A run this node accepted: where it arrived, who may stop it, and its executor once it has one."""

    __slots__ = ("repo", "run", "run_hash", "sender", "stop_asked", "stopped", "thread", "to")

    def __init__(self, run_hash: str, repo: str, to: str, sender: str) -> None:
        self.run_hash = run_hash
        self.repo = repo
        self.to = to
        self.sender = sender
        self.run: runner.Run | None = None
        self.thread: threading.Thread | None = None
        self.stop_asked = False
        self.stopped = threading.Event()  # set with stop_asked; a session's loop waits on it


class Runs:
    """The ``run`` and ``stop`` readers of one node (see the module docstring)."""

    def __init__(
        self,
        node: Node,
        settings: RunSettings,
        *,
        carrier: stp.Carrier | None = None,
        sessions: SessionHost | None = None,
    ) -> None:
        self.node = node
        self.settings = settings
        self.sessions = sessions
        self.jobs_dir = os.path.join(settings.state, "jobs")
        self.answers_dir = os.path.join(settings.state, "answers")
        self.jobs = runner.Node(
            root=settings.root,
            policy=settings.policy,
            carrier=carrier if carrier is not None else stp.FossilCarrier(),
            state_dir=self.jobs_dir,
            release=settings.release,
        )
        self._active: dict[str, Active] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def attach(self) -> Runs:
        """Register the readers (``run`` first, so a run and its stop in one scan come in that order)."""
        for d in (self.settings.state, self.jobs_dir, self.answers_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        if not os.path.isdir(self.settings.root):  # the sandbox uid searches through it, whatever the umask
            os.makedirs(self.settings.root, mode=0o755)
            os.chmod(self.settings.root, 0o755)  # noqa: S103
        self.node.register("run", self.on_run, name=READER_RUN)
        self.node.register("stop", self.on_stop, name=READER_STOP)
        return self

    # ----------------------------------------------------------------------------------------- record

    def _record_path(self, run_hash: str) -> str:
        return os.path.join(self.answers_dir, run_hash + ".json")

    def _record(self, a: Active, phase: str) -> None:
        _write_json(
            self._record_path(a.run_hash),
            {"run": a.run_hash, "repo": a.repo, "to": a.to, "sender": a.sender, "phase": phase},
        )

    def _read_record(self, run_hash: str) -> dict[str, str] | None:
        try:
            with open(self._record_path(run_hash), encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def active(self) -> list[str]:
        """RUN-HASHes this node is running (or still answering) now."""
        with self._lock:
            return sorted(self._active)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no run is active (``timeout`` seconds at most); True when idle."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._active, timeout)

    # ------------------------------------------------------------------------------------------ readers

    def on_run(self, d: Delivery) -> None:
        try:
            doc = json.loads(d.data)
        except ValueError:
            return
        body = doc.get("run") if isinstance(doc, dict) else None
        clone = body.get("clone") if isinstance(body, dict) else None
        code = fossil.repo_info(d.clone.repository).server_code  # fresh: --new may have changed it
        if clone != code:  # another clone's run: nothing is written back (1.2), one line is logged
            log.info("ocx: run %s from %s in %s is for the server-code %s, not this clone's; not answered",
                     d.hash[:12], d.sender, d.clone.name, repr(clone)[:48])  # fmt: skip
            return
        to = d.envelope.to or ""
        with self._lock:
            if d.hash in self._active or self._read_record(d.hash) is not None:
                return  # already taken (a rebuilt index or a replayed file)
            a = Active(d.hash, d.clone.name, to, d.sender)
            self._record(a, "accepted")
            self._active[d.hash] = a
        why = sender_refusal(self.settings.senders, d.clone.name, d.sender) or self._refuse_login(d.clone, to)
        log.info("ocx: run %s from %s to %s in %s: %s", d.hash[:12], d.sender, to, d.clone.name,
                 f"refused: {why}" if why else "accepted")  # fmt: skip
        self._spawn(a, self._drive, (a, body, why))

    def _refuse_login(self, clone: CloneConfig, to: str) -> str | None:
        if to not in clone.logins:
            return f"this node does not act as the login {to!r} on this clone"
        if fossil.user_caps(clone.repository, to) is None:
            return f"the login {to!r} is not in this clone's user table"
        return None

    def on_stop(self, d: Delivery) -> None:
        re = d.envelope.re or ""
        with self._lock:
            a = self._active.get(re)
            if a is None or a.repo != d.clone.name:
                log.info("ocx: stop %s for %s: no such run here; ignored", d.hash[:12], re[:12])
                return
        caps = fossil.user_caps(d.clone.repository, d.sender) or ""
        if d.sender not in (a.sender, a.to) and not (ADMIN_CAPS & set(caps)):
            log.info(
                "ocx: stop %s for %s from %s: neither the run's sender, its to, nor an admin; ignored",
                d.hash[:12], re[:12], d.sender,
            )  # fmt: skip
            return
        log.info("ocx: stop %s for %s from %s: stopping", d.hash[:12], re[:12], d.sender)
        with self._lock:
            a.stop_asked = True
            a.stopped.set()
            if a.run is not None:
                a.run.stop()

    # ------------------------------------------------------------------------------------------ workers

    def _spawn(self, a: Active, target: Callable[..., None], args: tuple[object, ...]) -> None:
        def main() -> None:
            try:
                target(*args)
            except Exception:
                log.exception("ocx: run %s: the node failed while driving it", a.run_hash[:12])
            finally:
                with self._idle:
                    self._active.pop(a.run_hash, None)
                    self._idle.notify_all()

        t = threading.Thread(target=main, name=f"ocx-run-{a.run_hash[:12]}", daemon=True)
        a.thread = t
        t.start()

    def _new_run(self, a: Active, body: object) -> runner.Run:
        clone = self.node.config.clone(a.repo)
        info = fossil.repo_info(clone.repository)
        kind = SessionRun if _asks_session(body) else runner.Run
        return kind(
            body,
            run_hash=a.run_hash,
            repository_name=clone.name,
            target=stp.Target(
                clone.repository,
                self.settings.clone_urls.get(clone.name),
                pull=partial(self.node.pull_checkins, clone.name),
                name=clone.name,
                policy_path=self.settings.path or "",
                node_logins=node_logins(clone, self.settings.clone_urls.get(clone.name)),
                has_login=partial(_has_login, clone.repository),
            ),
            node=self.jobs,
            hash_name=_hash_name(info.hash_policy),
        )

    def _answer(self, a: Active, kind: str, body: object) -> None:
        """Write the answer; a sync that fails leaves it in the clone for the next sync to carry."""
        try:
            res = self.node.answer(a.repo, a.run_hash, kind, body)
            if not res.delivered:
                log.warning("ocx: run %s: %s %s not delivered yet: %s", a.run_hash[:12], kind, res.hash[:12],
                            res.reason)  # fmt: skip
        except OcxError as e:
            log.warning("ocx: run %s: %s written, not yet synced: %s", a.run_hash[:12], kind, e.message)

    def _drive(self, a: Active, body: object, why: str | None) -> None:
        if why is not None:
            self._finish(a, runner.Ended("refused", why=why), "accepted")
            return
        r = self._new_run(a, body)
        with self._lock:
            a.run = r
            if a.stop_asked:
                r.stop()
        if isinstance(r, SessionRun):
            r.hosted = self.sessions is not None
        try:
            started = r.start()
        except SotdError as e:  # the executor names what it could not do
            self._finish(a, runner.Ended("error", why=e.message), "accepted")
            return
        if started is None:
            assert r.result is not None
            self._finish(a, r.result, "accepted")
            return
        if isinstance(r, SessionRun):
            assert self.sessions is not None
            Session(self, a, r, self.sessions, started).drive()
            return
        self._answer(a, "started", started)
        self._record(a, "started")
        self._finish(a, r.wait(), "started")

    def _hold_password(self, a: Active, run: spec.Run | None) -> None:
        """An adopted run takes again the password claim its ``password`` step made (``PasswordClaims``)."""
        if run is None:
            return
        try:
            repository = self.node.config.clone(a.repo).repository
            stp.claim_password(self.jobs.passwords, run, repository, a.run_hash)
        except (OcxError, Refused) as e:
            log.warning("ocx: run %s: password claim not taken again: %s", a.run_hash[:12], e.message)

    def _finish(self, a: Active, ended: runner.Ended, phase: str) -> None:
        """Write ``ended`` (unless already written), then store the outputs and logs, then sync."""
        self.jobs.passwords.release(a.run_hash)
        if PHASES.index(phase) < PHASES.index("ended"):
            self._answer(a, "ended", ended.body())
            self._record(a, "ended")
        log.info(
            "ocx: run %s ended: %s%s", a.run_hash[:12], ended.outcome, f" ({ended.why})" if ended.why else ""
        )
        uploads = [
            (spec.output_name(a.run_hash, name), ended.files[name], h)
            for name, h in ended.outputs.items()
            if name in ended.files
        ]
        uploads += [
            (log_name(a.run_hash, k), ended.log_files[k], h)
            for k, h in ended.logs.items()
            if k in ended.log_files
        ]
        added = 0
        for name, path, h in uploads:
            try:
                stored = self.node.upload(a.repo, name, path)
            except OcxError as e:
                log.warning("ocx: run %s: %s not stored: %s", a.run_hash[:12], name, e.message)
                continue
            if stored != h:  # never send bytes other than those ended names
                log.warning("ocx: run %s: %s changed after it was hashed; not sent", a.run_hash[:12], name)
                try:
                    self.node.remove_upload(a.repo, name)
                except OcxError:
                    pass
                continue
            added += 1
        if added:
            rep = self.node.push(a.repo)
            if rep.error:
                log.warning("ocx: run %s: outputs stored, not yet synced: %s", a.run_hash[:12], rep.error)
        self._record(a, "done")

    # ----------------------------------------------------------------------------------------- restart

    def recover(self) -> list[str]:
        """Look again at every run accepted and not finished (see the module docstring); their hashes."""
        try:
            names = sorted(os.listdir(self.answers_dir))
        except OSError:
            return []
        out = []
        for n in names:
            if not n.endswith(".json"):
                continue
            rec = self._read_record(n[: -len(".json")])
            if rec is None or rec.get("phase") == "done" or rec.get("phase") not in PHASES:
                continue
            a = Active(rec["run"], rec["repo"], rec["to"], rec["sender"])
            try:
                self.node.config.clone(a.repo)
            except OcxError:
                log.warning("ocx: run %s: its clone %r is no longer configured", a.run_hash[:12], a.repo)
                continue
            with self._lock:
                if a.run_hash in self._active:
                    continue
                self._active[a.run_hash] = a
            out.append(a.run_hash)
            self._spawn(a, self._resume, (a, rec["phase"]))
        return out

    def _resume(self, a: Active, phase: str) -> None:
        d = os.path.join(self.jobs_dir, a.run_hash)
        has_state = os.path.exists(os.path.join(d, "state.json"))
        rec = _read_json(os.path.join(d, SESSION_RECORD))
        if rec is not None and phase != "ended":  # a session: adopt its row if it still lives
            if self.sessions is not None:
                Session.adopt(self, a, self.sessions, rec, phase)
                return
            self._finish(a, runner.Ended("lost", why="the node restarted during the session"), phase)
            return
        if phase == "ended":
            got = runner.adopt(self.jobs_dir, a.run_hash, self.jobs)
            ended = got if isinstance(got, runner.Ended) else runner.Ended("lost")
            self._finish(a, ended, "ended")
            return
        if not has_state and not os.path.exists(os.path.join(d, "ended.json")):
            why = "the node restarted before the run's process started"
            self._finish(a, runner.Ended("lost", why=why), phase)
            return
        got = runner.adopt(self.jobs_dir, a.run_hash, self.jobs)
        if isinstance(got, runner.Ended):
            log.info("ocx: run %s found unfinished after a restart: %s", a.run_hash[:12], got.outcome)
            self._finish(a, got, phase)
            return
        log.info("ocx: run %s found alive after a restart: adopted", a.run_hash[:12])
        self._hold_password(a, got.run)
        with self._lock:
            a.run = got
            if a.stop_asked:
                got.stop()
        if phase == "accepted" and got.run is not None:  # the node died between spawn and started
            limits = spec.cap_limits(got.run.limits, self.settings.policy).report()
            self._answer(a, "started", {"values": dict(got.values), "limits": limits})
            self._record(a, "started")
        self._finish(a, got.wait(), "started")


# --------------------------------------------------------------------------------------------- sessions

SESSION_RECORD = "session.json"
LAUNCH_SPEC = "launch.json"  # what sotd.jobs.launch opens and execs in a session's row
SESSION_SEEN = "seen"  # one thread message hash a line: looked at (delivered, passed by, or skipped by `new`)


class SessionHost(Protocol):
    """Where a session's terminal lives: the daemon's rows (``sotd.daemon.ocxnode.RowSessions``).

    Every method blocks and may be called from any thread."""

    def open(
        self, *, run_hash: str, label: str, root: str, argv: list[str], handle: str, before: list[str]
    ) -> str:
        """Register ``handle`` and start one row running ``argv`` in ``root``; the row's id (a
        ``SotdError`` when it cannot). ``before`` (may be empty) runs first and execs the row's
        ``sot-capsule``: it puts the whole row, capsule included, in the run's cgroups."""
        ...

    def phase(self, session_id: str) -> str:
        """``starting``, ``ready`` (the row declared its handle and may be woken) or ``ended``."""
        ...

    def deliver(self, handle: str, sender: str, text: str) -> str | None:
        """File ``text`` from ``sender`` as sot-comm mail to ``handle``; None when filed, else why not."""
        ...

    def close(self, session_id: str) -> None:
        """Despawn the row (its processes end; its registry entry is pruned)."""
        ...


def _asks_session(body: object) -> bool:
    proc = body.get("process") if isinstance(body, dict) else None
    return isinstance(proc, dict) and proc.get("session") is True


def _read_json(path: str) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def node_logins(clone: CloneConfig, clone_url: str | None) -> frozenset[str]:
    """The logins the node itself uses on ``clone``: the one it syncs and posts as, those it acts as, and
    any login its sync URL or its ``runs.clone_urls`` entry names. A run may never rotate or receive
    their passwords (``sotd.jobs.steps.steps_refusal``)."""
    out = {clone.login, *clone.logins}
    for url in (clone.url, clone_url):
        if url and url.startswith(("http://", "https://")):
            netloc = url.split("://", 1)[1].split("/", 1)[0]
            if "@" in netloc:
                out.add(unquote(netloc.rsplit("@", 1)[0].split(":", 1)[0]))
    return frozenset(out)


def _has_login(repository: str, login: str) -> bool:
    return fossil.user_caps(repository, login) is not None


def session_handle(run_hash: str) -> str:
    """The sot-comm handle a session's mail is filed to."""
    return "ocx-" + run_hash[:16]


class SessionRun(runner.Run):
    """The executor's preparation of a ``session: true`` run (policy, steps, homes, sandbox), without its
    process: ``argv`` is what the session's row runs. ``hosted`` is False on a node without terminal rows
    (``sotd ocx node``): the run is refused after the policy says it may run."""

    hosted = False

    def _refuse_kind(self, run: spec.Run) -> None:
        if not self.hosted:
            raise Refused(
                "this node runs sessions only inside the daemon (sotd daemon run), in its terminal rows"
            )
        if run.sandbox.created_files:
            raise Refused("this node does not create files in a session's sandbox")
        if "workspace" not in self.values:
            raise Refused("a session needs a directory step: its inbox and outbox live in $$workspace$$")

    def _spawn(self, run: spec.Run) -> None:
        """Prepare the session's folders, its cgroups and its argv (the row starts it; see ``Session``)."""
        os.makedirs(self.dir, mode=0o700, exist_ok=False)
        ws = self.values["workspace"]
        uid, gid = run.sandbox.uid, run.sandbox.gid
        inbox = os.path.join(ws, SESSION_INBOX)
        outbox = os.path.join(ws, SESSION_OUTBOX)
        try:
            os.close(os.open(inbox, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            os.mkdir(outbox, 0o700)
            for p in (inbox, outbox):
                os.chown(p, uid, gid, follow_symlinks=False)
        except OSError as e:
            raise Refused(f"this node could not prepare the session's inbox and outbox: {e}") from None
        assert self.plan is not None
        names = {resource.RLIMIT_CPU: "cpu", resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_NPROC: "nproc",
                 resource.RLIMIT_AS: "as"}  # fmt: skip
        rl = [f"--{names[res]}={soft}:{hard}" for res, soft, hard in lim.rlimits_for(self.limits, self.plan)]
        pre = [PRLIMIT, *rl, "--"] if rl else []
        # the row cannot inherit descriptors: sotd.jobs.launch opens the binds (no link followed) and
        # the seccomp filter when the row starts, and fills them into the bwrap argv's slots
        slots: list[tuple[int, str]] = []
        links = self._usr_links()
        binds = {p: -1 for p in (*run.sandbox.read_only, *run.sandbox.read_write)
                 if not ("/usr" in (*run.sandbox.read_only, *run.sandbox.read_write) and p in links)}  # fmt: skip
        pol = self.node.policy
        box = sbx.bwrap_argv(run.sandbox, run.process, usr_links=links, tmp_size=self.limits.tmp_size,
                             bind_fds=binds, seccomp_fd=-1 if pol.seccomp and seccomp.available() else None,
                             slots=slots, user_namespaces=pol.user_namespaces)  # fmt: skip
        spec = {
            "argv": box,
            "binds": [[i, p] for i, p in slots if p],
            "seccomp": next((i for i, p in slots if not p), None),
        }
        spec_path = os.path.join(self.dir, LAUNCH_SPEC)
        _write_json(spec_path, spec)
        argv = [*pre, sys.executable, "-I", "-m", "sotd.jobs.launch", spec_path]
        if not all(argv):  # a row's command is a list of non-empty words
            raise Refused("a session's command line cannot carry an empty word (an empty env value?)")
        cg = lim.Cgroups(self.plan, "sotd-job-" + self.run_hash[:16])
        cg.create(self.limits.processes, self.limits.memory)
        self.cgroups = cg
        procs = cg.procs_files()
        self.argv = argv
        self.before = [SH, "-c", JOIN_CGROUPS, "sotd-join", *procs, "--"] if procs else []
        self.started_at = time.monotonic()
        if self.limits.wall is not None:
            self.deadline = self.started_at + self.limits.wall

    argv: list[str]
    before: list[str]


class Session:
    """One session run after its preparation: its row, deliveries, outbox, stop and wall (O11)."""

    def __init__(self, runs: Runs, a: Active, r: SessionRun, host: SessionHost, started: object) -> None:
        self.runs = runs
        self.a = a
        self.r = r
        self.host = host
        self.started = started
        assert r.run is not None
        self.proc = r.run.process
        self.handle = session_handle(a.run_hash)
        self.ws = r.values["workspace"]
        self.outbox = os.path.join(self.ws, SESSION_OUTBOX)
        self.record = os.path.join(r.dir, SESSION_RECORD)
        self.seen_path = os.path.join(r.dir, SESSION_SEEN)
        self.seen: set[str] = set()  # thread messages looked at (delivered, passed by, or skipped by `new`)
        self.row = ""
        self.ready = False
        self.hit: str | None = None  # the limit a "limit" outcome names, when not cpu

    def _save(self) -> None:
        """``session.json``: what a restarted node needs to adopt the session (``Session.adopt``)."""
        r = self.r
        deadline = None if r.deadline is None else _clock.now() + (r.deadline - time.monotonic())
        _write_json(self.record, {
            "run": self.a.run_hash, "session_id": self.row, "handle": self.handle, "body": r.body,
            "repository_name": r.repository_name, "hash_name": r.hash_name, "values": r.values,
            "deadline": deadline, "started": self.started, "ready": self.ready, "cpu": r.limits.cpu, "disk": r.limits.disk,
            "cgroups": r.cgroups.dirs if r.cgroups else {},
            "plan": None if r.plan is None else {"pids": r.plan.pids, "cpu": r.plan.cpu, "kill": r.plan.kill},
        })  # fmt: skip

    def _see(self, hashes: list[str]) -> None:
        new = [h for h in hashes if h not in self.seen]
        if not new:
            return
        self.seen.update(new)
        try:
            with open(self.seen_path, "a", encoding="utf-8") as f:
                f.write("".join(h + "\n" for h in new))
        except OSError as e:
            log.warning("ocx: run %s: %s not written: %s", self.a.run_hash[:12], self.seen_path, e)

    @classmethod
    def adopt(cls, runs: Runs, a: Active, host: SessionHost, rec: Mapping[str, object], phase: str) -> None:
        """After a node restart: take up a session whose row still lives (deliveries, outbox, stop and
        wall resume); a session whose row is gone ends ``lost``."""
        row = rec.get("session_id")
        row = row if isinstance(row, str) else ""
        why = "the session's row was gone after the node restarted"
        r: SessionRun | None = None
        try:
            body, values = rec["body"], rec["values"]
            assert isinstance(values, dict)
            r = SessionRun(body, run_hash=a.run_hash, repository_name=str(rec["repository_name"]),
                           target=stp.Target(""), node=runs.jobs,
                           hash_name=str(rec.get("hash_name") or "sha3_256"))  # fmt: skip
            r.values = {str(k): str(v) for k, v in values.items()}
            keys = ("root", "repository_name", "run", "release")
            base: dict[str, str] = {k: r.values[k] for k in keys if k in r.values}
            r.run, _ = spec.resolve(spec.parse_run(body), base)
            dl = rec.get("deadline")
            if isinstance(dl, (int, float)):
                r.deadline = time.monotonic() + max(0.0, float(dl) - _clock.now())
            cpu, pl, dirs = rec.get("cpu"), rec.get("plan"), rec.get("cgroups")
            disk = rec.get("disk")
            r.limits = spec.Limits(cpu=cpu if isinstance(cpu, int) else None,
                                   disk=disk if isinstance(disk, int) else None)  # fmt: skip
            if isinstance(pl, dict) and isinstance(dirs, dict) and dirs:
                r.plan = lim.Plan(pids=pl.get("pids"), cpu=pl.get("cpu"), kill=pl.get("kill"), v2=None, v1={},
                                  how={})  # fmt: skip
                r.cgroups = lim.Cgroups.existing({str(k): str(v) for k, v in dirs.items()}, r.plan)
        except (KeyError, TypeError, AssertionError, Refused):
            r, why = None, "the node restarted during the session and its record cannot be adopted"
        if r is None or not row or host.phase(row) == "ended":
            if row:
                try:
                    host.close(row)
                except Exception as e:
                    log.warning("ocx: run %s: session row %s not despawned: %s", a.run_hash[:12], row, e)
            if r is not None and r.cgroups is not None:
                r.cgroups.kill()
                r.cgroups.remove()
            runs._finish(a, runner.Ended("lost", why=why), phase)
            return
        s = cls(runs, a, r, host, rec.get("started"))
        s.row = row
        s.ready = rec.get("ready") is True
        try:
            with open(s.seen_path, encoding="utf-8") as f:
                s.seen = {x for x in f.read().split() if x}
        except OSError:
            pass
        runs._hold_password(a, r.run)
        with runs._lock:
            a.run = r
        log.info("ocx: run %s: session @%s in row %s adopted after a restart", a.run_hash[:12], s.handle, row)
        if phase == "accepted":  # the node died between the row's start and `started`
            runs._answer(a, "started", s.started)
            runs._record(a, "started")
        s._supervise()

    def drive(self) -> None:
        a, r = self.a, self.r
        cwd = self.proc.cwd if self.proc.cwd and os.path.isdir(self.proc.cwd) else self.ws
        try:
            self.row = self.host.open(
                run_hash=a.run_hash, label=f"ocx-{a.run_hash[:12]}", root=cwd, argv=r.argv, handle=self.handle,
                before=r.before,
            )  # fmt: skip
        except Exception as e:
            what = e.message if isinstance(e, SotdError) else f"{type(e).__name__}: {e}"
            if r.cgroups is not None:
                r.cgroups.kill()
                r.cgroups.remove()
            self.runs._finish(
                a, runner.Ended("error", why=f"the session's row could not start: {what}"), "accepted"
            )
            return
        self._save()
        log.info("ocx: run %s: session @%s in row %s", a.run_hash[:12], self.handle, self.row)
        self.runs._answer(a, "started", self.started)
        self.runs._record(a, "started")
        self._supervise()

    def _supervise(self) -> None:
        a = self.a
        outcome, why = self._loop()
        try:
            self.host.close(self.row)
        except Exception as e:
            log.warning("ocx: run %s: row %s not despawned: %s", a.run_hash[:12], self.row, e)
        cg, limit = self.r.cgroups, None
        if cg is not None:
            if outcome == "exited" and lim.over_budget(cg.cpu_seconds(), self.r.limits.cpu):
                outcome, why = "limit", None
            cg.kill()  # nothing of the session outlives it, whatever it left behind
            cg.remove()
        if outcome == "limit":
            limit = self.hit or "cpu"
        self._post_outbox()  # what the session wrote before it ended still goes out
        self.runs._finish(a, runner.Ended(outcome, limit=limit, why=why), "started")

    def _loop(self) -> tuple[str, str | None]:
        next_disk = time.monotonic() + runner.DISK_POLL
        while True:
            if self.a.stop_asked:
                return "stopped", None
            if self.r.deadline is not None and time.monotonic() >= self.r.deadline:
                return "timed_out", None
            if self.r.limits.disk is not None and time.monotonic() >= next_disk:
                next_disk = time.monotonic() + runner.DISK_POLL
                if self.r._disk_used() > self.r.limits.disk:
                    self.hit = "disk"
                    return "limit", None  # the workspace's disk bound
            if self.r.cgroups is not None and lim.over_budget(
                self.r.cgroups.cpu_seconds(), self.r.limits.cpu
            ):
                return "limit", None  # the whole session's CPU budget
            phase = self.host.phase(self.row)
            if phase == "ended":
                return "exited", "the session's process ended"
            if phase == "ready" and not self.ready:
                self.ready = True
                if self.proc.deliveries == "new":
                    self._see(list(self._thread()))  # only what arrives from now on
                self._save()
            if self.ready:
                self._deliver()
            self._post_outbox()
            self.a.stopped.wait(SESSION_POLL_S)

    # -------------------------------------------------------------------------------------- deliveries

    def _thread(self) -> dict[str, tuple[str, str, str, str]]:
        """Every valid message answering the run or an answer of it, in this clone:
        hash -> (kind, sender, re, name), in received order."""
        out: dict[str, tuple[str, str, str, str]] = {}
        todo = [self.a.run_hash]
        with self.runs.node._lock:
            while todo:
                h = todo.pop(0)
                for row in self.runs.node.index.answers(h):
                    if row["repo"] != self.a.repo or str(row["hash"]) in out:
                        continue
                    k = str(row["hash"])
                    out[k] = (str(row["kind"]), str(row["sender_login"] or ""), h, str(row["name"]))
                    todo.append(k)
        return out

    def _deliver(self) -> None:
        for h, (kind, sender, re, name) in self._thread().items():
            if h in self.seen:
                continue
            if not sender:
                continue  # the sender is not known yet: look again later
            if sender not in self.proc.hears or kind in NODE_KINDS:
                self._see([h])
                continue
            if self.proc.deliveries == "none":
                self._see([h])
                log.info(
                    "ocx: run %s: %s from %s kept from the session: deliveries is none",
                    self.a.run_hash[:12], h[:12], sender,
                )  # fmt: skip
                continue
            clone = self.runs.node.config.clone(self.a.repo)
            data = self.runs.node._bytes(clone, name)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                self._see([h])
                continue
            line = {"hash": h, "from": sender, "kind": kind, "re": re, "message": json.loads(text)}
            mail = f"OCX {kind} {h} from {sender}, answering {re}: {text}"
            why = self.host.deliver(self.handle, sender, mail)
            if why is not None:
                log.info(
                    "ocx: run %s: %s from %s not delivered yet: %s", self.a.run_hash[:12], h[:12], sender, why
                )
                return  # in order: try again at the next pass
            self._mirror(line)
            self._see([h])
            log.info(
                "ocx: run %s: %s from %s delivered to @%s", self.a.run_hash[:12], h[:12], sender, self.handle
            )

    def _mirror(self, line: dict[str, object]) -> None:
        """Append the delivery to ``$$workspace$$/inbox.jsonl``: the session's sandbox sees its mail there.
        Opened one component at a time without following a link: the session may have replaced it."""
        path = os.path.join(self.ws, SESSION_INBOX)
        try:
            fd = paths.open_nofollow(path, "the session's inbox", flags=os.O_WRONLY | os.O_APPEND)
        except (OSError, Refused) as e:
            log.warning("ocx: run %s: %s not mirrored: %s", self.a.run_hash[:12], path,
                        e.message if isinstance(e, Refused) else e)  # fmt: skip
            return
        try:
            os.write(fd, (json.dumps(line) + "\n").encode("utf-8"))
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------------------ outbox

    def _outbox_fd(self) -> int | None:
        """The outbox folder, opened without following a link (the session owns it and may swap it for a
        symlink to anywhere: every read and move below goes through this descriptor)."""
        try:
            return paths.open_dir(self.outbox, "the session's outbox")
        except (OSError, Refused) as e:
            if not isinstance(e, FileNotFoundError):
                log.warning("ocx: run %s: outbox not read: %s", self.a.run_hash[:12],
                            e.message if isinstance(e, Refused) else e)  # fmt: skip
            return None

    def _post_outbox(self) -> None:
        """Post each ``outbox/*.json`` the session finished writing, oldest first; move it to ``sent/`` or
        ``rejected/`` (with a ``.why`` beside it)."""
        dfd = self._outbox_fd()
        if dfd is None:
            return
        try:
            names = [n for n in os.listdir(dfd) if n.endswith(".json") and not n.startswith(".")]
            entries = []
            for n in names:
                try:
                    st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    entries.append((st.st_mtime_ns, n))
            for _, n in sorted(entries):
                self._post_one(dfd, n)
        finally:
            os.close(dfd)

    def _post_one(self, dfd: int, n: str) -> None:
        try:
            fd = os.open(n, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError:
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            data = os.read(fd, envelope.MAX_MESSAGE_BYTES + 1)
        finally:
            os.close(fd)
        why = self._refuse_post(data)
        if why is None:
            try:
                res = self.runs.node.post(self.a.repo, data)
            except (InvalidMessage, OcxError) as e:
                why = e.message
            else:
                log.info("ocx: run %s: the session posted %s%s", self.a.run_hash[:12], res.hash[:12],
                         "" if res.delivered else f" (not delivered yet: {res.reason})")  # fmt: skip
                self._move(dfd, n, "sent")
                return
        log.info("ocx: run %s: outbox file %s not posted: %s", self.a.run_hash[:12], n, why)
        self._move(dfd, n, "rejected", why)

    def _refuse_post(self, data: bytes) -> str | None:
        if len(data) > envelope.MAX_MESSAGE_BYTES:
            return "too large"
        v = envelope.read_envelope(data)
        if isinstance(v, envelope.Invalid):
            return v.reason
        if v.kind in NODE_KINDS:
            return f"a session does not post {v.kind!r}"
        if v.re is None:
            return "a session posts answers only (re: the run or a message of its thread)"
        if v.re != self.a.run_hash and v.re not in self._thread():
            return f"{v.re} is neither the run nor a message of its thread"
        return None

    def _move(self, dfd: int, n: str, where: str, why: str | None = None) -> None:
        """Move ``n`` into ``where/`` of the held outbox (never through a link)."""
        try:
            try:
                os.mkdir(where, 0o700, dir_fd=dfd)
            except FileExistsError:
                pass
            sub = os.open(where, paths.DIR_FLAGS, dir_fd=dfd)
            try:
                os.replace(n, n, src_dir_fd=dfd, dst_dir_fd=sub)
                if why is not None:
                    wfd = os.open(n + ".why", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600,
                                  dir_fd=sub)  # fmt: skip
                    with os.fdopen(wfd, "w", encoding="utf-8") as f:
                        f.write(why + "\n")
            finally:
                os.close(sub)
        except OSError as e:
            log.warning("ocx: run %s: outbox file %s not moved to %s: %s", self.a.run_hash[:12], n, where, e)
