"""OCX layer 3 on a node: the ``run`` and ``stop`` readers between ``sotd.ocx`` and ``sotd.jobs``.

``Runs(node, settings)`` registers two readers on an ``sotd.ocx.node.Node``:

- **run**: a ``run`` whose ``clone`` is the server-code of the clone it arrived in (read fresh from the
  repository) is this node's. Any other clone passes it by and writes nothing. For a run that is this
  node's: ``to`` must be a login of the clone's user table that the configuration acts as, else it ends
  ``refused``. The run then goes to ``sotd.jobs.runner.Run`` in a thread of its own: node policy, steps,
  sandbox, limits, process. Its answers go where the run is, with ``Node.answer``: one ``started`` (when
  the process started), then one ``ended`` (O9). Only after ``ended`` is written are the
  ``unversioned_files`` stored as their ``as`` names and the logs as ``ocx/logs/<RUN-HASH>/stdout`` and
  ``…/stderr``, and the clone synced, so a reader checks what arrives against the hashes on record.
- **stop**: a ``stop`` answering a run this node is running stops it (the whole tree is killed; the run
  ends ``stopped``) when it comes from the run's sender, the run's ``to``, or a login with admin (``a``)
  or setup (``s``) capability in the clone's user table (O10). Any other is logged and ignored.

``recover()`` (once, before the first sync): every run this node accepted and did not finish answering is
looked at again. A run whose processes still live is adopted and supervised again; one whose processes are
gone ends ``lost``; one that ended while the node was down gets its recorded ``ended``. Runs asking for
``session: true`` are refused (O11 needs the daemon's terminal rows; see docs/ocx.md).

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
import threading
import tomllib
from dataclasses import dataclass, field

from sotd.errors import SotdError
from sotd.jobs import runner, spec
from sotd.jobs import steps as stp
from sotd.jobs.errors import PolicyError
from sotd.ocx import envelope, fossil
from sotd.ocx.errors import OcxConfigError, OcxError

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
    bad = sorted(set(runs) - {"root", "state", "release", "clone_urls"})
    if bad:
        raise OcxConfigError(f"ocx: {path}: [runs] has an unknown key {bad[0]!r}")

    def where(key: str, default: str | None) -> str | None:
        v = runs.get(key, default)
        if v is None:
            return None
        if not isinstance(v, str) or not v:
            raise OcxConfigError(f"ocx: {path}: runs.{key} must be a non-empty path")
        return os.path.normpath(os.path.join(base, v))

    urls = runs.get("clone_urls", {})
    if not isinstance(urls, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith(("http://", "https://"))
        for k, v in urls.items()
    ):
        raise OcxConfigError(f"ocx: {path}: runs.clone_urls must map clone names to http(s) URLs")
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
    )


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

    __slots__ = ("repo", "run", "run_hash", "sender", "stop_asked", "thread", "to")

    def __init__(self, run_hash: str, repo: str, to: str, sender: str) -> None:
        self.run_hash = run_hash
        self.repo = repo
        self.to = to
        self.sender = sender
        self.run: runner.Run | None = None
        self.thread: threading.Thread | None = None
        self.stop_asked = False


class Runs:
    """The ``run`` and ``stop`` readers of one node (see the module docstring)."""

    def __init__(self, node: Node, settings: RunSettings, *, carrier: stp.Carrier | None = None) -> None:
        self.node = node
        self.settings = settings
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
        if clone != code:
            return  # another clone's run: nothing is written back (1.2)
        to = d.envelope.to or ""
        with self._lock:
            if d.hash in self._active or self._read_record(d.hash) is not None:
                return  # already taken (a rebuilt index or a replayed file)
            a = Active(d.hash, d.clone.name, to, d.sender)
            self._record(a, "accepted")
            self._active[d.hash] = a
        why = self._refuse_login(d.clone, to)
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
        return runner.Run(
            body,
            run_hash=a.run_hash,
            repository_name=clone.name,
            target=stp.Target(clone.repository, self.settings.clone_urls.get(clone.name)),
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
        try:
            started = r.start()
        except SotdError as e:  # the executor names what it could not do
            self._finish(a, runner.Ended("error", why=e.message), "accepted")
            return
        if started is None:
            assert r.result is not None
            self._finish(a, r.result, "accepted")
            return
        self._answer(a, "started", started)
        self._record(a, "started")
        self._finish(a, r.wait(), "started")

    def _finish(self, a: Active, ended: runner.Ended, phase: str) -> None:
        """Write ``ended`` (unless already written), then store the outputs and logs, then sync."""
        if PHASES.index(phase) < PHASES.index("ended"):
            self._answer(a, "ended", ended.body())
            self._record(a, "ended")
        log.info(
            "ocx: run %s ended: %s%s", a.run_hash[:12], ended.outcome, f" ({ended.why})" if ended.why else ""
        )
        uploads = [(name, ended.files[name], h) for name, h in ended.outputs.items() if name in ended.files]
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
        with self._lock:
            a.run = got
            if a.stop_asked:
                got.stop()
        if phase == "accepted" and got.run is not None:  # the node died between spawn and started
            limits = spec.cap_limits(got.run.limits, self.settings.policy).report()
            self._answer(a, "started", {"values": dict(got.values), "limits": limits})
            self._record(a, "started")
        self._finish(a, got.wait(), "started")
