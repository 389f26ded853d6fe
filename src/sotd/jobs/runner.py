"""The run executor (ocx.md 1.7 and section 6): policy, steps, sandbox, limits, process, outcome.

``JobRun(body, ..., launcher=)``: ``start()`` parses, resolves, checks the policy, caps the limits, runs
the workspace steps, makes the run's cgroups and hands the prepared run (``launchers.PreparedRun``) to its
launcher: by default ``launchers.Direct``, the process under ``setpriv + bwrap`` in its own process group
and cgroup with its stdout/stderr in log files of the run's state folder (a session's is
``sotd.ocxrun.sessions.RowLauncher``). It returns the ``started`` body, or ``None`` when the run ended
before starting (``refused``/``error``; ``result`` holds it). ``wait()`` supervises
(``supervision.supervise``: wall timer, whole-run CPU budget, disk, stop requests) and returns the
``outcome.Ended``. ``stop()`` may be called from any thread. After a node restart ``restart.adopt``
supervises the run again if its processes live, else it ends ``lost``.

The parts beside this one, each its own concern: ``outcome`` (the ``ended`` record and the pure
``classify``/``limits_hit``), ``statefolder`` (``STATE_DIR/<RUN-HASH>/``: the records, bwrap's status,
the outputs hashed and copied without following links), ``supervision`` (the one watch loop of a job and
a session), ``restart`` (a run rebuilt from its record), ``launchers`` (the prepared value, its cgroups and
sandbox argv, and how it is started).

Bind sources reach bwrap as descriptors (``--bind-fd``), the seccomp filter as a memfd; a run's workspace
may not nest with another's (``claim_workspace``: recorded only once the run passed its checks, dropped by
``release_workspace`` when it is refused, fails, ends or is found dead by ``adopt``; issue 24). Before the
steps the disk bounds admit the run (``disk.Disks.reserve``: the node-wide ``total`` and the free space,
naming the bound that refuses); the ``directory`` step's workspace becomes a file system of exactly the
disk cap (``Disks.make``), watched for full every poll; every end calls ``Disks.end`` (then the retention
of finished workspaces). A run that brings ``homes`` gets ``HOME=$$workspace$$/home`` (where they were
copied) unless its ``process.env`` sets ``HOME`` itself (``env_with_home``); a node that left ``HOME``
unset there would hand the process entries it cannot find.
What would break it: a start that launches before the policy, the steps and the homes are done (the
prepared value would not be the run that was checked), or an end that keeps the workspace's claim.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field, replace

from sotd import _clock
from sotd.jobs import disk as dsk
from sotd.jobs import launchers as la
from sotd.jobs import limits as lim
from sotd.jobs import nodepolicy, paths, placeholders, seccomp, spec
from sotd.jobs import sandbox as sbx
from sotd.jobs import steps as stp
from sotd.jobs.claims import claim_workspace, release_workspace
from sotd.jobs.errors import LaunchFailed, Refused, StepFailed
from sotd.jobs.outcome import Ended, classify, limits_hit
from sotd.jobs.statefolder import hash_file, plan_record, read_exit, write_json
from sotd.jobs.supervision import POLL, supervise

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True)
class NodeSupplies:
    """What the node supplies to every run: ``$$root$$``, ``$$release$$``, its policy, its Fossil carrier,
    the state folder, and (for tests) the host facts it would otherwise read."""

    root: str
    policy: nodepolicy.Policy
    carrier: stp.Carrier
    state_dir: str
    release: str | None = None
    facts: lim.CgroupFacts | None = None
    usr_links: Mapping[str, str] | None = None
    passwords: stp.PasswordClaims = field(default_factory=stp.PasswordClaims)


def env_with_home(env: Mapping[str, str], homes: tuple[str, ...], workspace: str) -> dict[str, str]:
    """The sandboxed process's whole environment (O7; docs/ocx.md "The HOME"): ``process.env`` as it is,
    plus ``HOME=<workspace>/home`` (where ``bring_homes`` copied them) when the run brings ``homes`` and
    its ``env`` names no ``HOME``. A ``HOME`` the run sets itself wins, wherever it points. Pure."""
    out = dict(env)
    if homes and "HOME" not in out:
        out["HOME"] = os.path.join(workspace, "home")
    return out


class JobRun:
    """One run on this node. See the module docstring for the life cycle."""

    def __init__(
        self,
        body: object,
        *,
        run_hash: str,
        repository_name: str,
        target: stp.Target,
        node: NodeSupplies,
        hash_name: str = "sha3_256",
        launcher: la.Launcher | None = None,
    ) -> None:
        self.body = body
        self.run_hash = run_hash
        self.repository_name = repository_name
        self.target = target
        self.node = node
        self.hash_name = hash_name
        self.dir = os.path.join(node.state_dir, run_hash)
        self.result: Ended | None = None
        self.run: spec.RunSpec | None = None
        self.values: dict[str, str] = {}
        self.limits = spec.Limits()
        self.plan: lim.Plan | None = None
        self.cgroups: lim.Cgroups | None = None
        self.launcher: la.Launcher = la.Direct() if launcher is None else launcher
        self.started_at = 0.0
        self.deadline: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.bind_fds: dict[str, int] = {}  # bind source -> O_PATH descriptor, from _check_sources
        self.checkins: list[dict[str, object]] = []  # started.checkins: the check-in each step used
        self.disks = dsk.Disks(node.state_dir, node.policy.workspaces)
        self._own_fs: bool | None = None  # is the workspace a file system of its own (disk.Disks.make)?

    # -------------------------------------------------------------------------------------- preparation

    def _decide(self) -> spec.RunSpec:
        run = spec.parse_run(self.body)
        base = {"root": self.node.root, "repository_name": self.repository_name, "run": self.run_hash}
        if self.node.release:
            base["release"] = self.node.release
        resolved, self.values = placeholders.resolve(run, base)
        why = nodepolicy.check(resolved, self.node.policy, self.values)
        if why:
            raise Refused(why)
        why = self.launcher.refuse(resolved, self.values)
        if why:
            raise Refused(why)
        self.limits = nodepolicy.cap_limits(resolved.limits, self.node.policy)
        facts = self.node.facts if self.node.facts is not None else lim.read_facts()
        self.plan = lim.plan(self.limits, facts, resolved.sandbox.uid)
        if self.limits.disk is not None and self.node.policy.workspaces.cap == "filesystem":
            how = {
                **self.plan.how,
                "disk": "the workspace is a file system of exactly that size (ENOSPC past it)",
            }
            self.plan = replace(self.plan, how=how)
        return resolved

    def _check_sources(self, run: spec.RunSpec, *, before_steps: bool) -> None:
        """Every bind source opened without following a symlink (``paths.open_nofollow``) and reachable
        by the sandbox uid. Before the steps, paths the steps make (below the workspace) wait; after them
        the descriptors are kept in ``bind_fds`` for bwrap's ``--bind-fd``/``--ro-bind-fd``."""
        sb = run.sandbox
        links = self.usr_links()
        ws = self.values.get("workspace", "/")
        self._close_binds()
        for p in dict.fromkeys((*sb.read_only, *sb.read_write)):
            if "/usr" in (*sb.read_only, *sb.read_write) and p in links:
                continue
            if before_steps and placeholders.inside(p, ws):
                continue
            try:
                fd = paths.open_nofollow(p, "the sandbox path")
            except FileNotFoundError:
                raise Refused(f"the sandbox path {p} does not exist on this node") from None
            except OSError as e:
                raise Refused(f"the sandbox path {p} cannot be opened: {e.strerror}") from None
            if before_steps:
                os.close(fd)
            else:
                self.bind_fds[p] = fd
            stat = {}
            cur = "/"
            for part in [x for x in os.path.normpath(p).split("/") if x][:-1]:
                st = os.stat(cur, follow_symlinks=False)
                stat[cur] = (st.st_mode, st.st_uid, st.st_gid)
                cur = os.path.join(cur, part)
            st = os.stat(cur, follow_symlinks=False)
            stat[cur] = (st.st_mode, st.st_uid, st.st_gid)
            bad = sbx.unreachable(p, sb.uid, sb.gid, stat)
            if bad:
                self._close_binds()
                raise Refused(
                    f"the sandbox path {p} cannot be reached by uid {sb.uid}: {bad} is not searchable"
                )
        if not before_steps:  # where bwrap mounts or creates (maybe below a bound folder): no link on the way
            for what, dest in (("proc", sb.proc), ("dev", sb.dev), ("tmp", sb.tmp)):
                if dest is not None:
                    paths.check_dest(dest, f"the sandbox's {what} mount point")
            for c in sb.created_files:
                paths.check_dest(c.path, "the created file")
        if os.geteuid() != 0 and (sb.uid, sb.gid) != (os.geteuid(), os.getegid()):
            raise Refused(f"this node cannot run as uid {sb.uid}: it is not root")

    def _close_binds(self) -> None:
        for fd in self.bind_fds.values():
            os.close(fd)
        self.bind_fds = {}

    def usr_links(self) -> Mapping[str, str]:
        """The host's merged-/usr links (``sandbox.host_usr_links``), or the node's for a test."""
        return self.node.usr_links if self.node.usr_links is not None else sbx.host_usr_links()

    def _end_early(self, e: Ended) -> None:
        self.result = e
        self.node.passwords.release(self.run_hash)
        release_workspace(self.node.state_dir, self.run_hash)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        write_json(os.path.join(self.dir, "ended.json"), e.to_json())
        self.disks.end(self.run_hash)

    def start(self) -> dict[str, object] | None:
        """Decide, prepare and start. The ``started`` body, or ``None`` with ``result`` set."""
        try:
            run = self._decide()
            self.run = run
            self._check_sources(run, before_steps=True)
            stp.check_steps(run, self.target)
            stp.claim_password(self.node.passwords, run, self.target.repository, self.run_hash)
            claim_workspace(self.node.state_dir, self.run_hash, self.values.get("workspace"))
            ws = self.values.get("workspace")
            if ws and self.limits.disk is not None:
                self.disks.reserve(self.run_hash, ws, self.limits.disk)  # the node-wide bounds
            sb = run.sandbox
            prep = stp.run_steps(run, self.node.root, self.target, self.node.carrier,
                                 on_workspace=lambda at: self.disks.make(self.run_hash, at, sb.uid, sb.gid))  # fmt: skip
            self.checkins = prep.checkins
            self._check_sources(run, before_steps=False)
            assert self.values.get("workspace")
            stp.bring_homes(run.sandbox.homes, self.values["workspace"], run.sandbox.uid, run.sandbox.gid)
            env = env_with_home(run.process.env, run.sandbox.homes, self.values["workspace"])
            run = self.run = replace(run, process=replace(run.process, env=env))
            if self._stop.is_set():
                self._end_early(Ended("stopped"))
                return None
            self._spawn(run)
        except Refused as e:
            self._end_early(Ended("refused", why=e.message))
            return None
        except StepFailed as e:
            self._end_early(Ended("error", step=e.step, why=e.message))
            return None
        except LaunchFailed as e:
            self._end_early(Ended("error", why=e.message))
            return None
        except BaseException:
            release_workspace(self.node.state_dir, self.run_hash)  # whatever failed, the claim ends here
            with contextlib.suppress(OSError):
                self.disks.end(self.run_hash)  # and a workspace file system made for it is let go
            raise
        finally:
            self._close_binds()
        started: dict[str, object] = {"values": dict(self.values), "limits": self.limits.report()}
        if self.checkins:
            started["checkins"] = list(self.checkins)
        return started

    def prepared(self, run: spec.RunSpec) -> la.PreparedRun:
        """The value every launcher starts from (``launchers.PreparedRun``), once checks, steps and homes
        are done."""
        assert self.plan is not None
        pol = self.node.policy
        return la.PreparedRun(
            run_hash=self.run_hash, dir=self.dir, run=run, values=dict(self.values), limits=self.limits,
            plan=self.plan, bind_fds=dict(self.bind_fds), usr_links=self.usr_links(),
            seccomp=pol.seccomp and seccomp.available(), user_namespaces=pol.user_namespaces,
        )  # fmt: skip

    def _spawn(self, run: spec.RunSpec) -> None:
        """The state folder, the cgroups (``launchers.make_cgroups``), the wall clock, then the launcher;
        the cgroups go again when the launcher cannot start."""
        os.makedirs(self.dir, mode=0o700, exist_ok=False)
        p = self.prepared(run)
        self.cgroups = la.make_cgroups(p)
        self.started_at = time.monotonic()
        if self.limits.wall is not None:
            self.deadline = self.started_at + self.limits.wall
        try:
            self.launcher.start(p, self.cgroups)
        except BaseException:
            self.cgroups.kill()
            self.cgroups.remove()
            raise
        st = self.launcher.state()
        if st is not None:
            self._save_state(run, st)

    def _save_state(self, run: spec.RunSpec, launched: Mapping[str, object]) -> None:
        assert self.plan is not None and self.cgroups is not None
        write_json(
            os.path.join(self.dir, "state.json"),
            {
                "run_hash": self.run_hash,
                "body": self.body,
                "repository_name": self.repository_name,
                "values": self.values,
                "hash_name": self.hash_name,
                "pid": launched.get("pid"),
                "start_time": launched.get("start_time"),
                "started": _clock.now(),
                "deadline": None if self.limits.wall is None else _clock.now() + self.limits.wall,
                "cpu": self.limits.cpu,
                "disk": self.limits.disk,
                "verdict": run.process.verdict,
                "workspace": self.values.get("workspace"),
                "outputs": [[o.at, o.as_] for o in run.process.unversioned_files],
                "cgroups": self.cgroups.dirs,
                "plan": plan_record(self.plan),
            },
        )

    # -------------------------------------------------------------------------------------- supervision

    def resolve_again(self) -> spec.RunSpec:
        """The run resolved again from its body and its recorded ``values`` (after a node restart, or
        ``restored``); ``Refused`` (or ``KeyError``) when they no longer resolve."""
        keys = ("root", "repository_name", "run", "release")
        base: dict[str, str] = {k: self.values[k] for k in keys if k in self.values}
        run, _ = placeholders.resolve(spec.parse_run(self.body), base)
        return run

    def how(self) -> Mapping[str, str]:
        """How each applied limit is enforced (for logs or an extended ``started``)."""
        return self.plan.how if self.plan else {}

    def stop(self) -> None:
        """Ask the run to stop: the whole tree is killed and the run ends ``stopped``. Thread-safe."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> Ended:
        """Supervise until the run ends (or ``timeout`` passes: then ``TimeoutError``); the ``Ended``."""
        if self.result is not None:
            return self.result
        with self._lock:
            give_up = None if timeout is None else time.monotonic() + timeout
            met = supervise(self, stop=self._stop.is_set, poll=POLL, give_up=give_up)
            self.launcher.reap()
            self.result = self._ended(met)
            self.node.passwords.release(self.run_hash)
            write_json(os.path.join(self.dir, "ended.json"), self.result.to_json())
            release_workspace(self.node.state_dir, self.run_hash)
            self.disks.end(self.run_hash)  # then the retention (this run's outputs are copied already)
            return self.result

    def _ended(self, met: str | None) -> Ended:
        """The ``Ended`` of a run whose sandbox is gone, after ``supervise`` answered ``met``: the last
        measures of its cgroups and disk, its outcome (``classify``), outputs and ``limits_hit``; its
        cgroups are emptied and removed."""
        stopped, timed_out, cpu_over, disk_over = (met == m for m in ("stopped", "timed_out", "cpu", "disk"))
        exit_status = self.exit_status()
        pids_refused = self.cgroups.pids_refused() if self.cgroups else 0
        memory_hit = self.cgroups.memory_hit() if self.cgroups else False
        if not disk_over:
            disk_over = self.disk_hit()
        if self.cgroups is not None and not cpu_over and self.limits.cpu is not None:
            cpu_over = lim.over_budget(self.cgroups.cpu_seconds(), self.limits.cpu)
        if self.cgroups is not None:
            self.cgroups.kill()  # nothing outlives the run, whatever it left behind
            self.cgroups.remove()
        outcome, limit = classify(
            exit_status=exit_status, verdict=bool(self.run.process.verdict) if self.run else False,
            stopped=stopped, timed_out=timed_out, cpu_over=cpu_over, pids_refused=pids_refused,
            memory_hit=memory_hit, disk_over=disk_over,
        )  # fmt: skip
        e = self.collect(Ended(outcome, exit=exit_status, limit=limit, why=self.disk_why(limit)))
        e.limits_hit = limits_hit(
            cpu_over=cpu_over or limit == "cpu", pids_refused=pids_refused, memory_hit=memory_hit,
            disk_over=disk_over, file_size=self.limits.file_size,
            sizes=[os.path.getsize(p) for p in (*e.files.values(), *e.log_files.values())],
            killed_by_xfsz=limit == "file_size", missing=bool(e.missing),
        )  # fmt: skip
        return e

    def own_fs(self) -> bool:
        """Is this run's workspace a file system of its own (``disk.Disks.make``)? Read once."""
        if self._own_fs is None:
            self._own_fs = self.disks.own_fs(self.run_hash)
        return self._own_fs

    def disk_hit(self) -> bool:
        """Has the workspace met ``limits.disk``: its own file system is full (``disk.fs_full``), or
        (``measured``) its use passed the cap?"""
        ws = self.values.get("workspace")
        if self.limits.disk is None or not ws:
            return False
        if self.own_fs():
            return self.disks.full(ws)
        return self._disk_used() > self.limits.disk

    def disk_why(self, limit: str | None) -> str | None:
        """``ended.why`` for ``limit: disk`` on a workspace file system of its own, else ``None``."""
        if limit != "disk" or not self.own_fs() or self.limits.disk is None:
            return None
        return (
            f"the workspace's file system of {dsk.size_text(dsk.fs_size(self.limits.disk))} (run.limits.disk)"
            " is full: writes past it get ENOSPC"
        )

    def _disk_used(self) -> int:
        ws = self.values.get("workspace")
        if not ws:
            return 0
        try:
            return paths.disk_used(ws)
        except (OSError, Refused):
            return 0

    def exit_status(self) -> int | None:
        """bwrap's ``exit-code`` (``status.json``), else what the launcher saw, else ``None``."""
        code = read_exit(os.path.join(self.dir, "status.json"))
        return code if code is not None else self.launcher.exit_status()

    def collect(self, e: Ended) -> Ended:
        """``e`` with the outputs hashed and copied into the state folder, and the logs hashed."""
        ws = self.values.get("workspace", "")
        outs = self.run.process.unversioned_files if self.run else ()
        copies = os.path.join(self.dir, "outputs")  # private: what is uploaded is what was hashed
        if outs:
            os.makedirs(copies, mode=0o700, exist_ok=True)
        for i, o in enumerate(outs):
            copy = os.path.join(copies, str(i))
            if os.path.lexists(copy):
                os.unlink(copy)
            h = hash_file(o.at, ws, self.hash_name, copy) if ws else None
            if h is None:
                e.missing.append(o.as_)
            else:
                e.outputs[o.as_] = h
                e.files[o.as_] = copy
        for name in ("stdout", "stderr"):
            p = os.path.join(self.dir, name)
            h = hash_file(p, self.dir, self.hash_name)
            if h is not None:
                e.logs[name] = h
                e.log_files[name] = p
        return e

    def execute(self) -> tuple[dict[str, object] | None, Ended]:
        """``start`` then ``wait``: ``(started body or None, ended)``."""
        started = self.start()
        return started, self.wait()


def end_disk(node: NodeSupplies, run_hash: str) -> None:
    """The run ended (however: a session, ``lost``, refused by the OCX layer): its workspace counts as
    finished for the node-wide bound and the retention (``disk.Disks.end``; idempotent)."""
    dsk.Disks(node.state_dir, node.policy.workspaces).end(run_hash)
