"""Session runs of OCX layer 3 (O11): a ``session: true`` run as one terminal row of the daemon.

The executor (``sotd.jobs.runner.JobRun``) prepares it like any run (policy, steps, homes, cgroups,
sandbox argv) and starts it through a ``RowLauncher``: a ``SessionHost`` (the daemon's rows,
``sotd.daemon.ocxnode.RowSessions``) runs ``prlimit … python -I -m sotd.jobs.launch SPEC`` in one row
(which opens the binds and the seccomp filter, then execs ``setpriv … bwrap … COMMAND``); a ``Session``
then supervises it with ``supervision.supervise``, the loop a job has too. Posts from a ``hears`` login
answering the run (or an answer of it) are filed as
sot-comm mail to the session's handle ``ocx-<RUN-HASH[:16]>`` (so the wake wakes it) and mirrored into
``$$workspace$$/inbox.jsonl``; ``deliveries`` is ``start``, ``new`` or ``none``. Files the session writes
into ``$$workspace$$/outbox/`` are posted as OCX messages answering the run. A permitted ``stop`` despawns
the row (``ended stopped``); the wall limit too (``timed_out``). Without a host (``sotd ocx node``),
sessions end ``refused``. After a restart, a session whose row still lives is adopted (``Session.adopt``:
deliveries, outbox, stop and wall resume); one whose row is gone ends ``lost``.

A ``Session`` talks to its ``Runs`` (``sotd.ocxrun.runs``), to the executor (``sotd.jobs``: it
composes a ``JobRun`` and subclasses nothing there) and to the ``NodeClones`` (``sotd.ocx.node``) through
their public methods only (``answer``, ``record``, ``finish``, ``hold_password``, ``adopted``;
``NodeClones.thread``, ``.message_bytes``, ``.post``). What would break it: following a link the session
put in its workspace (it owns its inbox and outbox; every open here refuses links), or delivering out of
order.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import stat
import sys
import time
from typing import Protocol

from sotd import _clock
from sotd.errors import SotdError
from sotd.jobs import launchers as la
from sotd.jobs import limits as lim
from sotd.jobs import paths, restart, runner, spec, statefolder, supervision
from sotd.jobs.errors import LaunchFailed, Refused
from sotd.jobs.outcome import Ended
from sotd.ocx import envelope
from sotd.ocx.errors import InvalidMessage, OcxError
from sotd.ocxrun.records import write_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.ocxrun.runs import Active, Runs

log = logging.getLogger("sotd.ocx")

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


def asks_session(body: object) -> bool:
    proc = body.get("process") if isinstance(body, dict) else None
    return isinstance(proc, dict) and proc.get("session") is True


def session_handle(run_hash: str) -> str:
    """The sot-comm handle a session's mail is filed to."""
    return "ocx-" + run_hash[:16]


def _plain_folder(path: str) -> bool:
    """``path`` is a folder reached without following a link: the row (started as root) may start in it.
    A ``process.cwd`` through a link the check-in holds starts the row in the workspace instead."""
    try:
        os.close(paths.open_dir(path, "the session's folder"))
    except (OSError, Refused):
        return False
    return True


class RowLauncher:
    """A ``session: true`` run's launcher (``sotd.jobs.launchers.Launcher``): the prepared sandbox started
    in one terminal row of ``host``. ``start`` makes the session's inbox and outbox, writes the launch
    spec (``sotd.jobs.launch`` opens the binds and the filter when the row starts) and opens the row
    running ``prlimit … python -I -m sotd.jobs.launch SPEC`` after joining the run's cgroups. Without a
    host (``sotd ocx node``) the run is refused after the policy says it may run."""

    def __init__(self, host: SessionHost | None, run_hash: str, row: str = "") -> None:
        self.host = host
        self.run_hash = run_hash
        self.row = row
        self.phase = "starting"  # the row's phase as ``alive`` last read it
        self.closed = False

    def refuse(self, run: spec.RunSpec, values: Mapping[str, str]) -> str | None:
        if self.host is None:
            return "this node runs sessions only inside the daemon (sotd daemon run), in its terminal rows"
        if run.sandbox.created_files:
            return "this node does not create files in a session's sandbox"
        if "workspace" not in values:
            return "a session needs a directory step: its inbox and outbox live in $$workspace$$"
        return None

    def start(self, p: la.PreparedRun, cgroups: lim.Cgroups) -> None:
        assert self.host is not None
        ws = p.values["workspace"]
        make_mailboxes(ws, p.run.sandbox.uid, p.run.sandbox.gid)
        argv = row_argv(p)
        procs = cgroups.procs_files()
        before = [SH, "-c", JOIN_CGROUPS, "sotd-join", *procs, "--"] if procs else []
        cwd = p.run.process.cwd if p.run.process.cwd and _plain_folder(p.run.process.cwd) else ws
        try:
            self.row = self.host.open(run_hash=p.run_hash, label=f"ocx-{p.run_hash[:12]}", root=cwd, argv=argv,
                                      handle=session_handle(p.run_hash), before=before)  # fmt: skip
        except Exception as e:
            what = e.message if isinstance(e, SotdError) else f"{type(e).__name__}: {e}"
            raise LaunchFailed(f"the session's row could not start: {what}") from None

    def alive(self) -> bool:
        assert self.host is not None
        self.phase = self.host.phase(self.row)
        return self.phase != "ended"

    def kill(self) -> None:
        """Despawn the row (once; a failure is logged: the cgroups' kill follows in any case)."""
        if self.closed or self.host is None or not self.row:
            return
        self.closed = True
        try:
            self.host.close(self.row)
        except Exception as e:
            log.warning("ocx: run %s: row %s not despawned: %s", self.run_hash[:12], self.row, e)

    def reap(self) -> None:
        return None

    def exit_status(self) -> int | None:
        return None  # the row does not say how its command exited

    def state(self) -> dict[str, object] | None:
        return None  # the session keeps its own record (``SESSION_RECORD``)


def make_mailboxes(ws: str, uid: int, gid: int) -> None:
    """``inbox.jsonl`` and ``outbox/`` in the held workspace, set through their own descriptors."""
    try:
        wfd = paths.open_dir(ws, "the workspace")
        try:
            os.close(paths.make_file_at(wfd, SESSION_INBOX, 0o600, uid, gid))
            os.close(paths.make_dir_at(wfd, SESSION_OUTBOX, 0o700, uid, gid))
        finally:
            os.close(wfd)
    except OSError as e:
        raise Refused(f"this node could not prepare the session's inbox and outbox: {e}") from None


def row_argv(p: la.PreparedRun) -> list[str]:
    """The row's command: ``prlimit`` with the run's rlimits, then ``sotd.jobs.launch`` on the launch
    spec written here (``STATE/<RUN-HASH>/launch.json``): the sandbox argv with a slot for each bind
    descriptor and the filter, which the row cannot inherit."""
    names = {resource.RLIMIT_CPU: "cpu", resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_NPROC: "nproc",
             resource.RLIMIT_AS: "as"}  # fmt: skip
    rl = [f"--{names[res]}={soft}:{hard}" for res, soft, hard in lim.rlimits_for(p.limits, p.plan)]
    pre = [PRLIMIT, *rl, "--"] if rl else []
    slots: list[tuple[int, str]] = []
    box = la.sandbox_argv(p, bind_fds=dict.fromkeys(p.binds(), -1), seccomp_fd=-1 if p.seccomp else None,
                          slots=slots)  # fmt: skip
    launch = {
        "argv": box,
        "binds": [[i, x] for i, x in slots if x],
        "seccomp": next((i for i, x in slots if not x), None),
    }
    spec_path = os.path.join(p.dir, LAUNCH_SPEC)
    write_json(spec_path, launch)
    argv = [*pre, sys.executable, "-I", "-m", "sotd.jobs.launch", spec_path]
    if not all(argv):  # a row's command is a list of non-empty words
        raise Refused("a session's command line cannot carry an empty word (an empty env value?)")
    return argv


class Session:
    """One session run after its preparation: its row, deliveries, outbox, stop and wall (O11)."""

    def __init__(self, runs: Runs, a: Active, r: runner.JobRun, rows: RowLauncher, started: object) -> None:
        self.runs = runs
        self.a = a
        self.r = r
        self.rows = rows
        assert rows.host is not None
        self.host = rows.host
        self.started = started
        assert r.run is not None
        self.proc = r.run.process
        self.handle = session_handle(a.run_hash)
        self.ws = r.values["workspace"]
        self.outbox = os.path.join(self.ws, SESSION_OUTBOX)
        self.record = os.path.join(r.dir, SESSION_RECORD)
        self.seen_path = os.path.join(r.dir, SESSION_SEEN)
        self.seen: set[str] = set()  # thread messages looked at (delivered, passed by, or skipped by `new`)
        self.ready = False
        self.hit: str | None = None  # the limit a "limit" outcome names, when not cpu

    def _save(self) -> None:
        """``session.json``: what a restarted node needs to adopt the session (``Session.adopt``)."""
        r = self.r
        deadline = None if r.deadline is None else _clock.now() + (r.deadline - time.monotonic())
        write_json(self.record, {
            "run": self.a.run_hash, "session_id": self.rows.row, "handle": self.handle, "body": r.body,
            "repository_name": r.repository_name, "hash_name": r.hash_name, "values": r.values,
            "deadline": deadline, "started": self.started, "ready": self.ready, "cpu": r.limits.cpu, "disk": r.limits.disk,
            "cgroups": r.cgroups.dirs if r.cgroups else {},
            "plan": None if r.plan is None else statefolder.plan_record(r.plan),
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
        r: runner.JobRun | None = None
        rows = RowLauncher(host, a.run_hash, row)
        try:
            r = restart.restored(rec, run_hash=a.run_hash, node=runs.jobs, launcher=rows)
            r.run = r.resolve_again()
            pl, dirs = rec.get("plan"), rec.get("cgroups")
            if isinstance(pl, dict) and isinstance(dirs, dict) and dirs:
                r.plan = statefolder.plan_from(pl)
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
            runs.finish(a, Ended("lost", why=why), phase)
            return
        s = cls(runs, a, r, rows, rec.get("started"))
        s.ready = rec.get("ready") is True
        try:
            with open(s.seen_path, encoding="utf-8") as f:
                s.seen = {x for x in f.read().split() if x}
        except OSError:
            pass
        runs.hold_password(a, r.run)
        runs.adopted(a, r)
        log.info("ocx: run %s: session @%s in row %s adopted after a restart", a.run_hash[:12], s.handle, row)
        if phase == "accepted":  # the node died between the row's start and `started`
            runs.answer(a, "started", s.started)
            runs.record(a, "started")
        s._supervise()

    def drive(self) -> None:
        """The row is open (``RowLauncher.start``): record it, answer ``started``, supervise."""
        a = self.a
        self._save()
        log.info("ocx: run %s: session @%s in row %s", a.run_hash[:12], self.handle, self.rows.row)
        self.runs.answer(a, "started", self.started)
        self.runs.record(a, "started")
        self._supervise()

    def _supervise(self) -> None:
        a = self.a
        outcome, why = self._loop()
        self.rows.kill()  # the row is despawned, whatever ended the session
        cg, limit = self.r.cgroups, None
        if cg is not None:
            if outcome == "exited" and lim.over_budget(cg.cpu_seconds(), self.r.limits.cpu):
                outcome, why = "limit", None
            cg.kill()  # nothing of the session outlives it, whatever it left behind
            cg.remove()
        if outcome == "limit":
            limit = self.hit or "cpu"
        self._post_outbox()  # what the session wrote before it ended still goes out
        self.runs.finish(a, Ended(outcome, limit=limit, why=why), "started")

    def _loop(self) -> tuple[str, str | None]:
        """``supervision.supervise`` over the row, with the deliveries and the outbox at every poll:
        ``(outcome, why)``."""
        met = supervision.supervise(self.r, stop=lambda: self.a.stop_asked, poll=SESSION_POLL_S,
                               sleep=self.a.stopped.wait, tick=self._tick, bounds_first=True)  # fmt: skip
        if met is None:
            return "exited", "the session's process ended"
        if met == "disk":
            self.hit = "disk"
            return "limit", self.r.disk_why("disk")  # the workspace's disk bound
        if met == "cpu":
            return "limit", None  # the whole session's CPU budget
        return met, None

    def _tick(self) -> None:
        if self.rows.phase == "ready" and not self.ready:
            self.ready = True
            if self.proc.deliveries == "new":
                self._see(list(self._thread()))  # only what arrives from now on
            self._save()
        if self.ready:
            self._deliver()
        self._post_outbox()

    # -------------------------------------------------------------------------------------- deliveries

    def _thread(self) -> dict[str, tuple[str, str, str, str]]:
        """Every valid message answering the run or an answer of it, in this clone:
        hash -> (kind, sender, re, name), in received order."""
        return self.runs.node.thread(self.a.run_hash, self.a.repo)

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
            data = self.runs.node.message_bytes(clone, name)
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
            fd = paths.open_nofollow(
                path, "the session's inbox", flags=os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
            )
        except (OSError, Refused) as e:
            log.warning("ocx: run %s: %s not mirrored: %s", self.a.run_hash[:12], path,
                        e.message if isinstance(e, Refused) else e)  # fmt: skip
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device the session put there
                log.warning("ocx: run %s: %s not mirrored: not a regular file", self.a.run_hash[:12], path)
                return
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
