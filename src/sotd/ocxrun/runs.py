"""OCX layer 3 on a node: the ``run`` and ``stop`` readers between ``sotd.ocx`` and ``sotd.jobs``.

``Runs(node, settings)`` registers two readers on an ``sotd.ocx.node.NodeClones``:

- **run**: a ``run`` whose ``clone`` is the server-code of the clone it arrived in (read fresh from the
  repository) is this node's. Any other clone passes it by and writes nothing. For a run that is this
  node's: ``to`` must be a login of the clone's user table that the configuration acts as, else it ends
  ``refused``. The run then goes to ``sotd.jobs.runner.JobRun`` in a thread of its own: node policy,
  steps, sandbox, limits, process. Its answers go where the run is, with ``NodeClones.answer``: one
  ``started`` (when the process started), then one ``ended`` (O9). Only after ``ended`` is written are the
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
gone ends ``lost``; one that ended while the node was down gets its recorded ``ended``. A session run
(``session: true``) is handed to ``sotd.ocxrun.sessions.Session`` once prepared.

State: ``STATE/jobs/<RUN-HASH>/`` (the executor's) and ``STATE/answers/<RUN-HASH>.json`` (which answers
were written: ``accepted`` -> ``started`` -> ``ended`` -> ``done``). What would break it: an answer
written twice after a restart (the record's phase must be written after each answer, before the next
step), or outputs stored before ``ended`` names their hashes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from functools import partial
from urllib.parse import unquote

from sotd.errors import SotdError
from sotd.jobs import claims, nodepolicy, restart, runner, spec
from sotd.jobs import steps as stp
from sotd.jobs.errors import Refused
from sotd.jobs.outcome import Ended
from sotd.ocx import envelope, fossil
from sotd.ocx.errors import OcxError
from sotd.ocxrun.records import read_json, write_json
from sotd.ocxrun.sessions import SESSION_RECORD, RowLauncher, Session, asks_session
from sotd.ocxrun.settings import sender_refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.ocx.config import CloneConfig
    from sotd.ocx.node import Delivery, NodeClones
    from sotd.ocxrun.sessions import SessionHost
    from sotd.ocxrun.settings import RunSettings

log = logging.getLogger("sotd.ocx")

READER_RUN = "sotd.ocxrun.run"
READER_STOP = "sotd.ocxrun.stop"
ADMIN_CAPS = frozenset("as")
PHASES = ("accepted", "started", "ended", "done")


def log_name(run_hash: str, which: str) -> str:
    """The unversioned name a run's log is stored under: ``ocx/logs/<RUN-HASH>/<stdout|stderr>``."""
    return f"ocx/logs/{run_hash}/{which}"


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


def has_login(repository: str, login: str) -> bool:
    return fossil.user_caps(repository, login) is not None


def _hash_name(policy: str | None) -> str:
    return "sha1" if envelope.algorithm_for_policy(policy) == "sha1" else "sha3_256"


RUNS_SHOWN = 20


def node_runs(state: str, limit: int = RUNS_SHOWN) -> list[dict[str, object]]:
    """The runs this node took (``STATE/answers/*.json``), newest first, each with its answers record's
    fields and, once it ended, its ``ended`` body (O9: outcome, the limit hit, outputs) from the
    executor's ``ended.json``. Read-only (``sotd web``, issue 30); a record that does not read is left out."""
    answers_dir = os.path.join(state, "answers")
    try:
        names = [n for n in os.listdir(answers_dir) if n.endswith(".json")]
    except OSError:
        return []

    def mtime(n: str) -> float:
        try:
            return os.stat(os.path.join(answers_dir, n)).st_mtime
        except OSError:
            return 0.0

    out: list[dict[str, object]] = []
    for n in sorted(names, key=mtime, reverse=True)[:limit]:
        rec = read_json(os.path.join(answers_dir, n))
        if rec is None:
            continue
        run = dict(rec)
        ended = read_json(os.path.join(state, "jobs", n[: -len(".json")], "ended.json"))
        if ended is not None:
            try:
                run["ended"] = Ended.from_json(ended).body()
            except TypeError:
                run["ended"] = {"outcome": "unreadable"}
        out.append(run)
    return out


class Active:
    """A run this node accepted: where it arrived, who may stop it, and its executor once it has one."""

    __slots__ = ("repo", "run", "run_hash", "sender", "stop_asked", "stopped", "thread", "to")

    def __init__(self, run_hash: str, repo: str, to: str, sender: str) -> None:
        self.run_hash = run_hash
        self.repo = repo
        self.to = to
        self.sender = sender
        self.run: runner.JobRun | None = None
        self.thread: threading.Thread | None = None
        self.stop_asked = False
        self.stopped = threading.Event()  # set with stop_asked; a session's loop waits on it


class Runs:
    """The ``run`` and ``stop`` readers of one node (see the module docstring)."""

    def __init__(
        self,
        node: NodeClones,
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
        self.jobs = runner.NodeSupplies(
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

    def record(self, a: Active, phase: str) -> None:
        """Write the run's answers record with ``phase`` (``PHASES``)."""
        write_json(
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
            self.record(a, "accepted")
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

    def _new_run(self, a: Active, body: object) -> runner.JobRun:
        clone = self.node.config.clone(a.repo)
        info = fossil.repo_info(clone.repository)
        return runner.JobRun(
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
                has_login=partial(has_login, clone.repository),
            ),
            node=self.jobs,
            hash_name=_hash_name(info.hash_policy),
            launcher=RowLauncher(self.sessions, a.run_hash) if asks_session(body) else None,
        )

    def answer(self, a: Active, kind: str, body: object) -> None:
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
            self.finish(a, Ended("refused", why=why), "accepted")
            return
        r = self._new_run(a, body)
        with self._lock:
            a.run = r
            if a.stop_asked:
                r.stop()
        try:
            started = r.start()
        except SotdError as e:  # the executor names what it could not do
            self.finish(a, Ended("error", why=e.message), "accepted")
            return
        if started is None:
            assert r.result is not None
            self.finish(a, r.result, "accepted")
            return
        if isinstance(r.launcher, RowLauncher):
            Session(self, a, r, r.launcher, started).drive()
            return
        self.answer(a, "started", started)
        self.record(a, "started")
        self.finish(a, r.wait(), "started")

    def hold_password(self, a: Active, run: spec.RunSpec | None) -> None:
        """An adopted run takes again the password claim its ``password`` step made (``PasswordClaims``)."""
        if run is None:
            return
        try:
            repository = self.node.config.clone(a.repo).repository
            stp.claim_password(self.jobs.passwords, run, repository, a.run_hash)
        except (OcxError, Refused) as e:
            log.warning("ocx: run %s: password claim not taken again: %s", a.run_hash[:12], e.message)

    def adopted(self, a: Active, r: runner.JobRun) -> None:
        """``r`` is the executor of ``a`` again (a session taken up after a restart: ``Session.adopt``)."""
        with self._lock:
            a.run = r

    def finish(self, a: Active, ended: Ended, phase: str) -> None:
        """Write ``ended`` (unless already written), then store the outputs and logs, then sync. The run's
        password and workspace claims end here, whatever ended it."""
        self.jobs.passwords.release(a.run_hash)
        claims.release_workspace(self.jobs_dir, a.run_hash)
        runner.end_disk(self.jobs, a.run_hash)  # idempotent: a session, a lost or refused run ends here too
        if PHASES.index(phase) < PHASES.index("ended"):
            self.answer(a, "ended", ended.body())
            self.record(a, "ended")
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
        self.record(a, "done")

    # ----------------------------------------------------------------------------------------- restart

    def recover(self) -> list[str]:
        """Look again at every run accepted and not finished (see the module docstring); their hashes."""
        try:
            names = sorted(os.listdir(self.answers_dir))
        except OSError:
            names = []
        recs = []
        for n in names:
            if not n.endswith(".json"):
                continue
            rec = self._read_record(n[: -len(".json")])
            if rec is None or rec.get("phase") == "done" or rec.get("phase") not in PHASES:
                continue
            recs.append(rec)
        # the workspace claims of runs that ended, or never got this far, go now; the runs looked at
        # again below keep theirs until they turn out dead (issue 24: a claim outlived its run)
        for h in claims.keep_claims(self.jobs_dir, {str(r.get("run")) for r in recs}):
            log.info("ocx: run %s: its workspace claim outlived it; dropped", h[:12])
        out = []
        for rec in recs:
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
        rec = read_json(os.path.join(d, SESSION_RECORD))
        if rec is not None and phase != "ended":  # a session: adopt its row if it still lives
            if self.sessions is not None:
                Session.adopt(self, a, self.sessions, rec, phase)
                return
            self.finish(a, Ended("lost", why="the node restarted during the session"), phase)
            return
        if phase == "ended":
            got = restart.adopt(self.jobs_dir, a.run_hash, self.jobs)
            ended = got if isinstance(got, Ended) else Ended("lost")
            self.finish(a, ended, "ended")
            return
        if not has_state and not os.path.exists(os.path.join(d, "ended.json")):
            why = "the node restarted before the run's process started"
            self.finish(a, Ended("lost", why=why), phase)
            return
        got = restart.adopt(self.jobs_dir, a.run_hash, self.jobs)
        if isinstance(got, Ended):
            log.info("ocx: run %s found unfinished after a restart: %s", a.run_hash[:12], got.outcome)
            self.finish(a, got, phase)
            return
        log.info("ocx: run %s found alive after a restart: adopted", a.run_hash[:12])
        self.hold_password(a, got.run)
        with self._lock:
            a.run = got
            if a.stop_asked:
                got.stop()
        if phase == "accepted" and got.run is not None:  # the node died between spawn and started
            limits = nodepolicy.cap_limits(got.run.limits, self.settings.policy).report()
            self.answer(a, "started", {"values": dict(got.values), "limits": limits})
            self.record(a, "started")
        self.finish(a, got.wait(), "started")
